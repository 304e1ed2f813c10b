/*
 * The participant's side of a commit (SOSP'15 section 4, as primary and as
 * backup): each loop polls the logs of its thread index, one per
 * coordinator machine, and processes whole records in order.
 *   LOCK            lock the objects (CAS of each header version to the
 *                   exclusive lock, from the version read), keep the record,
 *                   answer the coordinator by message;
 *   COMMIT-PRIMARY  install the LOCK record's after-images, unlock;
 *   ABORT           unlock;
 *   COMMIT-BACKUP   checked now, applied to the backup copies when it is
 *                   truncated.
 * Every record carries the coordinator's low-water mark in that log:
 * records before it are done; they are applied, zeroed, and the freed word
 * published (the coordinator READs it when short of room; log.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "txn/epoch.h"
#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "util/fault.h"
#include "util/log.h"

static struct lock_ent **lock_slot(struct txloop *tl, uint64_t txid)
{
	struct lock_ent **pp = &tl->locks[(txid ^ (txid >> 32)) % LOCK_BUCKETS];
	while (*pp && (*pp)->txid != txid)
		pp = &(*pp)->next;
	return pp;
}

static void send_reply(struct txloop *tl, uint64_t txid, int status)
{
	uint32_t coord = txid_machine(txid);
	unsigned t = txid_thread(txid);
	struct reply r = {.txid = txid, .status = status};
	int rc = farm_msg_send(tl->loop, coord, t, FARM_MSGT_TX_REPLY, &r,
	                       sizeof(r));
	if (rc)
		farm_warn("txn: cannot answer machine %" PRIu32 ": %s", coord,
		          farm_strerror(rc));
}

static const struct rec_obj *rec_objs(const uint8_t *rec)
{
	return (const struct rec_obj *)(const void *)(rec +
	                                              sizeof(struct rec_hdr));
}

/* Does a record's object table fit its length? Images follow it. */
static bool rec_sane(const uint8_t *rec, uint32_t len)
{
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	if (rec_size(h.nobj, 0, h.nreg) > len)
		return false;
	const struct rec_obj *o = rec_objs(rec);
	uint64_t img = 0;
	for (unsigned i = 0; i < h.nobj; i++) {
		if (o[i].lines == 0 || o[i].lines > OBJ_MAX_LINES)
			return false;
		img += 64ull * o[i].lines;
		if (rec_size(h.nobj, img, h.nreg) > len)
			return false; /* the images, region ids, checksum and
			                 trailer must fit */
	}
	return true;
}

/* The local object a record names, as primary: NULL when it is not ours. */
static uint8_t *primary_obj(farm_txm *m, const struct rec_obj *o)
{
	return farm_as_local_ptr(m->as, o->addr, 64ull * o->lines);
}

/*
 * Undo on_lock's locks of the first @n objects of LOCK record @rec: each
 * header back to the word the lock found, a new object of this machine's
 * coordinator with its claim's mark (obj_new_locked): it stays marked
 * until the coordinator's abort frees it (commit.c, new_abort), so it
 * never looks allocated and unlocked in between. A new object of another
 * machine's coordinator (growth moved its region here) is unlocked
 * plain, as no one here would ever free it. A compare-and-swap from the
 * lock on_lock set, so that a header someone changed since (the local
 * coordinator's abort freed and unlocked it first) is left alone.
 */
static void unlock_objs(farm_txm *m, const uint8_t *rec, unsigned n)
{
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	bool ours = txid_machine(h.txid) == m->me;
	const struct rec_obj *o = rec_objs(rec);
	for (unsigned i = 0; i < n; i++) {
		bool demoted;
		uint8_t *p =
		        txn_own_ptr(m, o[i].addr, 64ull * o[i].lines, &demoted);
		if (!p)
			continue;
		uint64_t locked = o[i].version | OBJ_LOCK_EXCL;
		/* Unlocked, version unchanged: pairs with the next locker's
		 * CAS and with the acquire of the header in validation
		 * (commit.c) and lock-free reads (read.c). */
		(void)atomic_compare_exchange_strong_explicit(
		        (_Atomic uint64_t *)(void *)p, &locked,
		        obj_new_locked(o[i].version,
		                       ours && (o[i].flags & OBJF_NEW)),
		        memory_order_release, memory_order_relaxed);
	}
}

static void on_lock(struct txloop *tl, const uint8_t *rec)
{
	farm_txm *m = tl->m;
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	const struct rec_obj *o = rec_objs(rec);
	int status = 0;
	unsigned locked = 0;
	if (h.cfg < (uint32_t)farm_as_config_id(m->as)) {
		/* Started in an older configuration: its coordinator may not
		 * know where the regions are now (FaRM 5.2). Retryable. */
		txl_count(tl, S_STALE_REFUSED, 1);
		send_reply(tl, h.txid, FARM_ECONFLICT);
		return;
	}
	for (; locked < h.nobj; locked++) {
		uint8_t *p = primary_obj(m, &o[locked]);
		if (!p || (o[locked].version & OBJ_LOCK_MASK)) {
			status = -EINVAL;
			break;
		}
		uint64_t w = farm_objhdr_load_incarn((void *)p);
		if (w != o[locked].incarn) {
			status = farm_incarn_allocated(w) ? FARM_ECONFLICT
			                                  : FARM_EFREED;
			break;
		}
		/* A new object (the coordinator's, allocated here) holds the
		 * shared lock since its allocation (obj_claim_mark). */
		uint64_t expect = obj_new_locked(o[locked].version,
		                                 o[locked].flags & OBJF_NEW);
		/* Lock: pairs with the release that last unlocked or
		 * installed this header (here, commit.c, apply_image), or
		 * marked it new, so the object is the one that version
		 * names. */
		if (!atomic_compare_exchange_strong_explicit(
		            (_Atomic uint64_t *)(void *)p, &expect,
		            o[locked].version | OBJ_LOCK_EXCL,
		            memory_order_acq_rel, memory_order_acquire)) {
			status = FARM_ECONFLICT;
			break;
		}
	}
	if (status) {
		unlock_objs(m, rec, locked);
		txl_count(tl, S_LOCKS_REFUSED, 1);
	} else {
		struct lock_ent *e = malloc(sizeof(*e));
		if (!e) {
			unlock_objs(m, rec, locked);
			status = -ENOMEM;
		} else {
			*e = (struct lock_ent){.txid = h.txid, .rec = rec};
			struct lock_ent **pp = lock_slot(tl, h.txid);
			if (*pp) { /* a duplicate LOCK: refuse it, keep the
				      first */
				free(e);
				unlock_objs(m, rec, locked);
				status = -EEXIST;
			} else {
				*pp = e;
				txl_count(tl, S_LOCKS_OK, 1);
			}
		}
	}
	if (!status && txid_machine(h.txid) != m->me)
		FARM_FAULT_POINT(FARM_FP_TX_ON_LOCK);
	send_reply(tl, h.txid, status);
}

/* Install a LOCK record's after-images (and frees), unlocking. */
static void install_rec(struct txloop *tl, const uint8_t *rec)
{
	farm_txm *m = tl->m;
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	const struct rec_obj *o = rec_objs(rec);
	const uint8_t *img = rec + sizeof(h) + (size_t)h.nobj * sizeof(*o);
	bool arrays = false;
	for (unsigned i = 0; i < h.nobj; i++) {
		bool demoted;
		uint8_t *p =
		        txn_own_ptr(m, o[i].addr, 64ull * o[i].lines, &demoted);
		if (p) {
			uint64_t nv = o[i].version + OBJ_VSTEP;
			obj_install_locked(p, o[i].lines, img, nv);
			txl_count(tl, S_INSTALLS, 1);
			if (o[i].flags & (OBJF_ARRAY | OBJF_ELEM)) {
				arrays = true; /* unlocked after the free */
			} else {
				if ((o[i].flags & OBJF_FREE) && !demoted &&
				    farm_txn_free_at_commit(m, tl, o[i].addr,
				                            nv))
					goto next; /* the allocator unlocks */
				/* Install: the body above, then the new
				 * version, unlocked. Pairs with the acquire of
				 * the header in validation and lock-free reads,
				 * which check the version around their copy. */
				atomic_store_explicit(
				        (_Atomic uint64_t *)(void *)p, nv,
				        memory_order_release);
			}
		}
	next:
		img += 64ull * o[i].lines;
	}
	if (!arrays)
		return;
	/* Freed arrays: every element is installed and still locked; free
	 * each array whole, then unlock its elements. */
	for (unsigned i = 0; i < h.nobj; i++)
		if ((o[i].flags & OBJF_ARRAY) && primary_obj(m, &o[i])) {
			int rc = farm_galloc_free_array_local(
			        m->ga, tl->loop, o[i].addr, 64ull * o[i].lines,
			        o[i].flags >> OBJF_N_SHIFT);
			if (rc) {
				farm_stat_add(&m->st.v[S_FREE_FAILED], 1);
				farm_warn("txn: array free at commit: %s",
				          farm_strerror(rc));
			}
		}
	for (unsigned i = 0; i < h.nobj; i++) {
		bool demoted;
		uint8_t *p =
		        txn_own_ptr(m, o[i].addr, 64ull * o[i].lines, &demoted);
		/* As an install: pairs with readers' acquire of the header. */
		if (p && (o[i].flags & (OBJF_ARRAY | OBJF_ELEM)))
			atomic_store_explicit((_Atomic uint64_t *)(void *)p,
			                      o[i].version + OBJ_VSTEP,
			                      memory_order_release);
	}
}

/* Install (@commit) or unlock what this loop holds of @txid's LOCK, and
 * forget it. Returns whether it held any. */
static bool settle_lock(struct txloop *tl, uint64_t txid, bool commit)
{
	struct lock_ent **pp = lock_slot(tl, txid);
	struct lock_ent *e = *pp;
	if (!e)
		return false;
	if (commit) {
		install_rec(tl, e->rec);
	} else {
		struct rec_hdr h;
		memcpy(&h, e->rec, sizeof(h));
		unlock_objs(tl->m, e->rec, h.nobj);
	}
	*pp = e->next;
	free(e);
	return true;
}

/* A COMMIT-PRIMARY or ABORT record. An ABORT finds no lock when its LOCK
 * was refused; a COMMIT-PRIMARY always follows a granted LOCK, so one
 * with none here is a protocol bug worth hearing about. */
static void on_commit_primary(struct txloop *tl, uint64_t txid, bool commit)
{
	if (!settle_lock(tl, txid, commit) && commit)
		farm_warn("txn: COMMIT-PRIMARY of %#" PRIx64 " with no lock",
		          txid);
}

/* ---- aborted transactions (their COMMIT-BACKUPs are never applied) -- */

static struct abort_ent **abort_slot(struct txloop *tl, uint64_t txid)
{
	struct abort_ent **pp =
	        &tl->aborts[(txid ^ (txid >> 32)) % LOCK_BUCKETS];
	while (*pp && (*pp)->txid != txid)
		pp = &(*pp)->next;
	return pp;
}

bool farm_txn_aborted(struct txloop *tl, uint64_t txid)
{
	return *abort_slot(tl, txid) != NULL;
}

void farm_txn_note_abort(struct txloop *tl, uint64_t txid, uint64_t pos)
{
	struct abort_ent **pp = abort_slot(tl, txid);
	if (*pp)
		return;
	struct abort_ent *e = malloc(sizeof(*e));
	if (!e) {
		/* Cannot remember it: the COMMIT-BACKUPs of this aborted
		 * transaction would be applied at truncation. Say so. */
		farm_err("txn: out of memory noting the abort of %#" PRIx64,
		         txid);
		return;
	}
	*e = (struct abort_ent){.txid = txid, .pos = pos};
	*pp = e;
}

static void forget_abort(struct txloop *tl, uint64_t txid, uint64_t pos)
{
	struct abort_ent **pp = abort_slot(tl, txid);
	if (*pp && (*pp)->pos == pos) {
		struct abort_ent *e = *pp;
		*pp = e->next;
		free(e);
	}
}

/*
 * Apply an after-image to a copy that is not the primary (a backup, or a
 * region recovery is promoting): only when it is newer than the copy, so
 * images of one object applied from different logs (different loops, in
 * any order) leave the newest. The copy's header is taken exclusive for
 * the copy (appliers on other loops wait; a lock recovery holds has been
 * taken by this machine's recovery, which applies under it: @held).
 * Returns whether it was applied.
 */
bool farm_txn_copy_apply(uint8_t *p, unsigned lines, const uint8_t *img,
                         bool held)
{
	_Atomic uint64_t *hv = (_Atomic uint64_t *)(void *)p;
	uint64_t nv;
	memcpy(&nv, img, 8);
	nv &= ~OBJ_LOCK_MASK;
	/* This acquire and the CAS below pair with the release of the
	 * version by the install before ours (below, or participant's
	 * COMMIT-PRIMARY). */
	uint64_t cur = atomic_load_explicit(hv, memory_order_acquire);
	if (!held) {
		for (unsigned spins = 0;; spins++) {
			if ((cur & ~OBJ_LOCK_MASK) >= nv && cur)
				return false;
			/* Pairs with the release store of the version by
			 * the install before ours, as the load above does
			 * (the end of this function, obj_install). */
			if (!(cur & OBJ_LOCK_MASK) &&
			    atomic_compare_exchange_weak_explicit(
			            hv, &cur, cur | OBJ_LOCK_EXCL,
			            memory_order_acq_rel, memory_order_acquire))
				break;
			if (spins > 64)
				sched_yield();
			/* Pairs with the same release stores. */
			cur = atomic_load_explicit(hv, memory_order_acquire);
		}
	} else if ((cur & ~OBJ_LOCK_MASK) >= nv && (cur & ~OBJ_LOCK_MASK)) {
		return false;
	}
	/* The locked header before the body, as in obj_install_locked:
	 * an acq_rel CAS does not order the stores after it (on ARMv8 the
	 * body could be seen before the lock). Pairs with a reader's
	 * acquire fence after its copy (obj_read_lines), whose second
	 * look at the header then sees the lock. Free on x86. */
	if (!held)
		atomic_thread_fence(memory_order_release);
	/* The incarnation word and the body, then the version (unlocked
	 * unless recovery still holds it). */
	memcpy(p + 8, img + 8, 64ull * lines - 8);
	farm_store_fence();
	/* Pairs with readers' acquire of the header (validation, lock-free
	 * reads) and with the next installer's acquire above. */
	atomic_store_explicit(hv, held ? nv | OBJ_LOCK_EXCL : nv,
	                      memory_order_release);
	return true;
}

/*
 * recover_decide.c: recovery's decision for a removed coordinator's
 * transaction, which every survivor gets. Returns whether this loop still
 * held its LOCK (then installed or unlocked now). Holding none is the
 * common case, not an error: this machine was no primary of it, its LOCK
 * was refused, or its COMMIT-PRIMARY or ABORT landed before the
 * coordinator was removed and was processed then (the drain at the latest,
 * recover.c), which installed or unlocked and dropped the lock. The
 * objects may have been written since by newer commits, so nothing is
 * installed again: the decision agrees with the record (a COMMIT-PRIMARY
 * anywhere decides commit, an ABORT abort).
 */
bool farm_txn_decide_primary(struct txloop *tl, uint64_t txid, bool commit)
{
	return settle_lock(tl, txid, commit);
}

/* How many of a record's objects backup_apply resolves and prefetches
 * before applying them. */
#define APPLY_GROUP 16u

/* Where object @o's image goes in this machine's copy: its lines in the
 * copy (NULL when it is applied nowhere here), with @r and @role as
 * farm_as_local_region said. */
static uint8_t *backup_target(farm_txm *m, const struct rec_obj *o,
                              farm_region **r, enum farm_as_role *role)
{
	uint32_t rid = farm_gaddr_region(o->addr);
	*r = farm_as_local_region(m->as, rid, role);
	uint64_t off = farm_gaddr_offset(o->addr);
	if (!*r || *role != FARM_AS_BACKUP ||
	    off + 64ull * o->lines > farm_region_size(*r))
		return NULL;
	return (uint8_t *)farm_region_base(*r) + off;
}

static void backup_apply_one(struct txloop *tl, const struct rec_obj *o,
                             farm_region *r, enum farm_as_role role, uint8_t *q,
                             const uint8_t *img)
{
	farm_txm *m = tl->m;
	/* A new backup's record may come before the primary's COPY has the
	 * copy opened (by the copy engine: copy_engine.c). Nothing is lost
	 * by not applying it: the object is locked at the primary from
	 * before this record was written until it is installed there, so
	 * the copy's READs, all after its open, see it locked (and read it
	 * again) or installed. A copy filled from a demoted one reads no
	 * primary: it is held from the view that demoted (as_view.c), so
	 * its records always find it. Opening the copy here instead (making
	 * and registering a region, 7-17 ms for 64 MB) held up this loop and
	 * every client of it right after recovery. */
	uint32_t rid = farm_gaddr_region(o->addr);
	if (r && role == FARM_AS_BACKUP &&
	    farm_txn_datarec_skip_apply(m, rid)) {
		/* test-only: data recovery misses commits */
	} else if (q) {
		bool done =
		        farm_txn_rec_promoting(m, rid)
		                ? farm_txn_rec_truncate_apply(m, o->addr, q,
		                                              o->lines, img)
		                : farm_txn_copy_apply(q, o->lines, img, false);
		if (done)
			txl_count(tl, S_BACKUP_APPLIES, 1);
	} else if (r && role == FARM_AS_PRIMARY) {
		/* Promoted by recovery, which applied or decided it. */
	} else if (!r) {
		txl_count(tl, S_BACKUP_NOCOPY, 1);
	} else {
		farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
	}
}

/*
 * A COMMIT-BACKUP's images into this machine's copies, in groups of
 * APPLY_GROUP objects: every object of a group found and its copy's lines
 * prefetched (for writing), then each applied. The copy's header is the
 * first thing an apply touches (its lock and version), and the copies a
 * record names are in no cache here (the primary wrote them, on another
 * machine): one miss after another was the backup's largest cost in
 * YCSB-A's profile (docs/benchmarks.md); prefetched together, a group's
 * misses overlap. What is applied, and in which order, is unchanged.
 */
static void backup_apply(struct txloop *tl, const uint8_t *rec)
{
	farm_txm *m = tl->m;
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	if (farm_txn_aborted(tl, h.txid)) {
		txl_count(tl, S_BACKUP_SKIPPED, 1);
		return;
	}
	const struct rec_obj *o = rec_objs(rec);
	const uint8_t *img = rec + sizeof(h) + (size_t)h.nobj * sizeof(*o);
	for (unsigned g = 0; g < h.nobj; g += APPLY_GROUP) {
		unsigned n = FARM_MIN(APPLY_GROUP, h.nobj - g);
		farm_region *r[APPLY_GROUP];
		enum farm_as_role role[APPLY_GROUP];
		uint8_t *q[APPLY_GROUP];
		for (unsigned i = 0; i < n; i++) {
			q[i] = backup_target(m, &o[g + i], &r[i], &role[i]);
			for (uint32_t l = 0; q[i] && l < o[g + i].lines; l++)
				__builtin_prefetch(q[i] + 64ull * l, 1, 3);
		}
		for (unsigned i = 0; i < n; i++) {
			backup_apply_one(tl, &o[g + i], r[i], role[i], q[i],
			                 img);
			img += 64ull * o[g + i].lines;
		}
	}
}

/* Truncate records of log @ring up to @upto: apply, zero, publish. */
static void truncate_to(struct txloop *tl, struct reader *rd, uint8_t *ring,
                        _Atomic uint64_t *freed_word, uint64_t upto)
{
	farm_txm *m = tl->m;
	bool moved = false;
	while (rd->applied < upto && rd->applied < rd->head) {
		uint8_t *rec = ring + log_pos(m, rd->applied);
		struct rec_hdr h;
		memcpy(&h, rec, sizeof(h));
		if (h.len == 0 || h.len % 64 ||
		    h.len > m->R - log_pos(m, rd->applied)) {
			/* Cannot happen unless the log was overwritten. */
			farm_err("txn: log corrupt at %" PRIu64
			         " (length %" PRIu32 ", head %" PRIu64
			         "): log abandoned",
			         rd->applied, h.len, rd->head);
			farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
			rd->broken = true;
			break;
		}
		if (h.type == REC_COMMIT_BACKUP) {
			/* Must not happen (wq_truncatable): recovery would not
			 * know the commit finished. Counted for the tests. */
			if (h.cseq >= rd->lw)
				txl_count(tl, S_TRUNC_UNFINISHED, 1);
			backup_apply(tl, rec);
			if (tl->pend) /* recovery waits for its decision */
				farm_txn_rec_truncated(tl, h.txid);
		}
		if (h.type == REC_ABORT)
			forget_abort(tl, h.txid, rd->applied);
		if (h.type == REC_LOCK && *lock_slot(tl, h.txid))
			farm_warn("txn: LOCK of transaction %#" PRIx64
			          " truncated "
			          "while its locks are held",
			          h.txid);
		rec_zero(rec, h.type, h.len);
		rd->applied += h.len;
		moved = true;
	}
	/* The records are zeroed before the coordinator may reuse their
	 * room: pairs with its acquire of this word (log.c,
	 * farm_txn_refresh_freed; a remote coordinator READs it). */
	if (moved)
		atomic_store_explicit(freed_word, rd->applied,
		                      memory_order_release);
}

/* Process whole records of log (coord, our thread). Returns how many. */
static int poll_log(struct txloop *tl, uint32_t coord)
{
	farm_txm *m = tl->m;
	uint64_t li = log_index(m, coord, tl->t);
	uint8_t *ring = m->logbase + log_ring_off(m, li);
	_Atomic uint64_t *freed_word =
	        (_Atomic uint64_t *)(void *)(m->logbase + log_hdr_off(m, li));
	struct reader *rd = &tl->r[coord];
	int got = 0;
	while (!rd->broken && !rd->fenced) {
		uint64_t off = log_pos(m, rd->head);
		uint8_t *rec = ring + off;
		/* The coordinator's WRITE of the record (log.c) lands its
		 * first word whole and its trailer after every other byte;
		 * the first word may land after the bytes between them (the
		 * fabric promises only the last word's place), so it says
		 * where the trailer is and nothing more. Acquire keeps the
		 * reads below after this one; what publishes the record is
		 * the trailer's release, whose partner is the acquire below.
		 */
		uint32_t len = atomic_load_explicit(
		        (_Atomic uint32_t *)(void *)rec, memory_order_acquire);
		if (len == 0)
			break;
		struct rec_hdr h;
		memcpy(&h, rec, sizeof(h));
		uint64_t tr;
		if (len % 64 || len > m->R - off) {
			farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
			farm_warn("txn: bad record in machine %" PRIu32
			          "'s log "
			          "(length %" PRIu32 "): log abandoned",
			          coord, len);
			rd->broken = true;
			break;
		}
		/* The first word (length, type) lands whole, the trailer
		 * last: only once the trailer is there is the rest of the
		 * header (txid, low-water mark) there too. Read it again.
		 * Pairs with the release store of the WRITE's last word
		 * (fabric/shm_data.c write_ordered, udp_serve.c write_piece).
		 */
		tr = atomic_load_explicit(
		        (_Atomic uint64_t *)(void *)(rec + (h.type == REC_PAD
		                                                    ? 56
		                                                    : len - 8)),
		        memory_order_acquire);
		if (tr != rd->head + 1)
			break; /* still being written */
		memcpy(&h, rec, sizeof(h));
		switch (h.type) {
		case REC_LOCK:
			if (rec_sane(rec, len))
				on_lock(tl, rec);
			else
				farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
			break;
		case REC_COMMIT_PRIMARY:
			if (coord != m->me)
				FARM_FAULT_POINT(FARM_FP_TX_ON_PRIMARY);
			on_commit_primary(tl, h.txid, true);
			break;
		case REC_ABORT:
			on_commit_primary(tl, h.txid, false);
			farm_txn_note_abort(tl, h.txid, rd->head);
			break;
		case REC_COMMIT_BACKUP:
			if (!rec_sane(rec, len)) {
				farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
				break;
			}
			/* Before it can be applied: allocrec.c. */
			farm_txn_alloc_note(tl, rec);
			if (coord != m->me)
				FARM_FAULT_POINT(FARM_FP_TX_ON_BACKUP);
			break;
		case REC_TRUNC:
		case REC_PAD: break;
		default: farm_stat_add(&m->st.v[S_BAD_RECORDS], 1); break;
		}
		if (h.lw > rd->lw) /* a pad's too: it truncates too */
			rd->lw = h.lw;
		rd->head += len;
		got++;
		truncate_to(tl, rd, ring, freed_word, h.trunc);
	}
	return got;
}

int farm_txn_poll(farm_loop *loop, void *ctx)
{
	(void)loop;
	struct txloop *tl = ctx;
	farm_txm *m = tl->m;
	int got = 0;
	/* Pairs with the release of nready in txm.c (a log's reader set
	 * up before its id is listed). */
	unsigned n = atomic_load_explicit(&m->nready, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		got += poll_log(tl, m->ready_ids[i]);
	return got;
}

bool farm_txn_pending(farm_loop *loop, void *ctx)
{
	(void)loop;
	struct txloop *tl = ctx;
	farm_txm *m = tl->m;
	/* Pairs with the release of nready in txm.c. */
	unsigned n = atomic_load_explicit(&m->nready, memory_order_acquire);
	for (unsigned i = 0; i < n; i++) {
		uint32_t c = m->ready_ids[i];
		if (tl->r[c].broken || tl->r[c].fenced)
			continue;
		uint64_t li = log_index(m, c, tl->t);
		const uint8_t *ring = m->logbase + log_ring_off(m, li);
		uint64_t off = log_pos(m, tl->r[c].head);
		/* The record's first word, as poll_log reads it. No
		 * release store pairs with this acquire: a WRITE stores
		 * the first word relaxed (write_ordered,
		 * fabric/shm_data.c), and only whether it is zero is
		 * read here; poll_log reads the record after its
		 * trailer. */
		if (atomic_load_explicit(
		            (_Atomic uint32_t *)(void *)(ring + off),
		            memory_order_acquire))
			return true;
	}
	/* Nothing to do here: the loop may park; a thread with no
	 * operation open goes offline for epochs meanwhile. */
	farm_epoch_park();
	return false;
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

#ifdef FARM_FAULT_INJECTION
/* recover_decide.c's FARM_FP_REC_DECIDE_REINSTALL: install LOCK record
 * @rec's after-images whether or not its objects are still locked. */
void farm_txn_testing_install_rec(struct txloop *tl, const uint8_t *rec)
{
	install_rec(tl, rec);
}
#endif
