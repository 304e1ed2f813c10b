/*
 * Transaction-state recovery at a promoted primary (recover.c, step 2):
 * a region this machine held a backup copy of and is now primary of gets
 * the locks of the transactions still pending in it (lock recovery), its
 * finished ones applied, and its pending ones settled once decided; its
 * regions are handed to the allocator for adoption once their locks are
 * settled.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/txn_testing.h"
#include "txn/recover_int.h"
#include "txn/recover_wire.h"
#include "util/fault.h"
#include "util/log.h"

static bool in_promo(const farm_txm *m, uint32_t region)
{
	for (unsigned i = 0; i < m->rec.npromo; i++)
		if (m->rec.promo[i] == region)
			return true;
	return false;
}

/* This machine's copy of object @o, whatever its role; NULL when it holds
 * none or the object does not fit the region. */
uint8_t *farm_txn_rec_copy_obj(farm_txm *m, const struct rec_obj *o)
{
	enum farm_as_role role;
	farm_region *r =
	        farm_as_local_region(m->as, farm_gaddr_region(o->addr), &role);
	uint64_t off = farm_gaddr_offset(o->addr);
	if (!r || off + 64ull * o->lines > farm_region_size(r))
		return NULL;
	return (uint8_t *)farm_region_base(r) + off;
}

/* Is @region this round's to promote (rec.nelig)? */
static bool is_elig(const farm_txm *m, uint32_t region)
{
	for (unsigned i = 0; i < m->rec.nelig && i < m->rec.npromo; i++)
		if (m->rec.promo[i] == region)
			return true;
	return false;
}

/* Does a recovered lock lie in this machine's current copy of @region
 * (not in a copy growth demoted since)? (rec.lock held) */
bool farm_txn_rec_region_locked(const farm_txm *m, uint32_t region)
{
	farm_region *r = farm_as_local_region(m->as, region, NULL);
	if (!r)
		return false;
	const uint8_t *base = farm_region_base(r);
	uint64_t size = farm_region_size(r);
	for (unsigned k = 0; k < m->rec.nrl; k++) {
		const struct rec_rlock *l = &m->rec.rl[k];
		if (farm_gaddr_region(l->addr) == region && l->q >= base &&
		    l->q < base + size)
			return true;
	}
	return false;
}

/* The copy of @o's object when its region is this round's to promote
 * (rec.nelig: held as a complete backup copy this machine was primary
 * of when the round began), else NULL. A region stays listed after its
 * round (pending transactions), so a listed one may since have been
 * handed to a grower and refilled here as a plain backup: that copy
 * takes no recovered lock, which nothing would release and for which a
 * later round would throw the copy away (rec_loop_run). A filling copy
 * is never promoted either, so no lock is recovered in it (data
 * recovery's applies would wait on one for good). */
static uint8_t *promo_obj(farm_txm *m, const struct rec_obj *o)
{
	enum farm_as_role role;
	uint32_t r = farm_gaddr_region(o->addr);
	bool old_rule = FARM_FAULT_SWITCH(FARM_FP_REC_STALE_PROMO);
	if (!(old_rule ? in_promo(m, r) : is_elig(m, r)) ||
	    !farm_as_local_region(m->as, r, &role) || role != FARM_AS_BACKUP ||
	    farm_as_backup_filling(m->as, r))
		return NULL;
	return farm_txn_rec_copy_obj(m, o);
}

/* ---- recovered locks at a promoted primary ------------------------------
 *
 * Objects of promoted regions that pending transactions lock, with how
 * many hold each (transactions of different coordinator threads may, on
 * different loops). Every change to a promoted region's objects before it
 * is promoted, and every recovered lock, is made under rec.lock.
 */

/* The recovered lock of @addr taken at @q, or with @q NULL in any copy. */
static struct rec_rlock *rlock_find(farm_txm *m, uint64_t addr,
                                    const uint8_t *q)
{
	for (unsigned i = 0; i < m->rec.nrl; i++)
		if (m->rec.rl[i].addr == addr && (!q || m->rec.rl[i].q == q))
			return &m->rec.rl[i];
	return NULL;
}

static int rlock_take(farm_txm *m, uint64_t addr, uint8_t *q)
{
	struct rec_rlock *l = rlock_find(m, addr, q);
	if (l) {
		l->n++;
		return 0;
	}
	if (m->rec.nrl == m->rec.caprl) {
		unsigned nc = m->rec.caprl ? 2 * m->rec.caprl : 64;
		struct rec_rlock *nr = realloc(m->rec.rl, nc * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		m->rec.rl = nr;
		m->rec.caprl = nc;
	}
	m->rec.rl[m->rec.nrl++] =
	        (struct rec_rlock){.addr = addr, .q = q, .n = 1};
	_Atomic uint64_t *hv = (_Atomic uint64_t *)(void *)q;
	/* Acquire: pairs with the release of the version word by the last
	 * install or unlock (object.h's obj_install, rlock_put below). */
	uint64_t v = atomic_load_explicit(hv, memory_order_acquire);
	atomic_store_explicit(hv, (v & ~OBJ_LOCK_MASK) | OBJ_LOCK_EXCL,
	                      memory_order_seq_cst);
	farm_stat_add(&m->st.v[S_REC_LOCKS], 1);
	return 0;
}

/*
 * Promoted regions waiting to be adopted by this machine's allocator
 * (allocrec.c, galloc.h): one is handed over once no recovered lock is
 * left in it, i.e. every transaction of the old configuration that writes
 * it is settled; until then a pending transaction's new object may still
 * be installed in a slot a scan would take for free. rec.lock held.
 */
void farm_txn_rec_adopt_add(farm_txm *m, uint32_t region)
{
	for (unsigned i = 0; i < m->rec.nadopt; i++)
		if (m->rec.adopt[i] == region)
			return; /* still waiting since an earlier recovery */
	if (m->rec.nadopt == m->rec.capadopt) {
		unsigned nc = m->rec.capadopt ? 2 * m->rec.capadopt : 16;
		uint32_t *n = realloc(m->rec.adopt, nc * sizeof(*n));
		if (!n) {
			farm_err("txn recovery: out of memory: region %" PRIu32
			         " is not adopted (its frees wait)",
			         region);
			return;
		}
		m->rec.adopt = n;
		m->rec.capadopt = nc;
	}
	m->rec.adopt[m->rec.nadopt++] = region;
}

void farm_txn_rec_adopt_ready(farm_txm *m)
{
	for (unsigned i = 0; i < m->rec.nadopt;) {
		uint32_t id = m->rec.adopt[i];
		enum farm_as_role role;
		/* No longer ours (growth demoted it: its allocator state
		 * was retired, farm_galloc_retire): never adopted. */
		if (!farm_as_local_region(m->as, id, &role) ||
		    role != FARM_AS_PRIMARY) {
			m->rec.adopt[i] = m->rec.adopt[--m->rec.nadopt];
			continue;
		}
		if (farm_txn_rec_region_locked(m, id)) {
			i++;
			continue;
		}
		int rc = farm_galloc_adopt(m->ga, id);
		if (rc)
			farm_err("txn recovery: region %" PRIu32
			         " not handed to the allocator: %s",
			         id, farm_strerror(rc));
		m->rec.adopt[i] = m->rec.adopt[--m->rec.nadopt];
	}
}

static void rlock_put(farm_txm *m, uint64_t addr, uint8_t *q)
{
	struct rec_rlock *l = rlock_find(m, addr, q);
	if (!l || --l->n)
		return;
	*l = m->rec.rl[--m->rec.nrl];
	_Atomic uint64_t *hv = (_Atomic uint64_t *)(void *)q;
	uint64_t v = atomic_load_explicit(hv, memory_order_relaxed);
	/* The unlock (release): pairs with the acquire loads of the version
	 * word (farm_objhdr_load_version, farm_txn_copy_apply). */
	atomic_store_explicit(hv, v & ~OBJ_LOCK_MASK, memory_order_release);
	if (m->rec.nadopt)
		farm_txn_rec_adopt_ready(m);
}

/* An image for an object of a promoted region (rec.lock held). */
static bool promo_apply(farm_txm *m, uint64_t addr, uint8_t *q, unsigned lines,
                        const uint8_t *img)
{
	return farm_txn_copy_apply(q, lines, img,
	                           rlock_find(m, addr, q) != NULL);
}

#ifdef FARM_FAULT_INJECTION
static _Atomic bool testing_no_drain; /* farm_txn_testing_recovery_no_drain */
#define NO_DRAIN() atomic_load_explicit(&testing_no_drain, memory_order_relaxed)
#else
#define NO_DRAIN() false
#endif

/* participant.c, at truncation: a COMMIT-BACKUP's object in a region
 * being promoted. Returns whether it applied. */
bool farm_txn_rec_truncate_apply(farm_txm *m, uint64_t addr, uint8_t *q,
                                 unsigned lines, const uint8_t *img)
{
	if (NO_DRAIN())
		return false; /* testing: the copy stays as it was */
	pthread_mutex_lock(&m->rec.lock);
	bool r = promo_apply(m, addr, q, lines, img);
	pthread_mutex_unlock(&m->rec.lock);
	return r;
}

bool farm_txn_rec_taken(farm_txm *m, uint64_t cfg)
{
	pthread_mutex_lock(&m->rec.lock);
	bool r = atomic_load(&m->rec.cfg) >= cfg &&
	         atomic_load(&m->rec.applied) >= m->T;
	pthread_mutex_unlock(&m->rec.lock);
	return r;
}

bool farm_txn_rec_promoting(farm_txm *m, uint32_t region)
{
	/* Acquire: pairs with the (seq_cst, hence release) stores of
	 * npromo_live where the promotions are set and ended, below. */
	if (!atomic_load_explicit(&m->rec.npromo_live, memory_order_acquire))
		return false; /* no promotion under way: the fast path */
	pthread_mutex_lock(&m->rec.lock);
	bool r = in_promo(m, region);
	pthread_mutex_unlock(&m->rec.lock);
	return r;
}

/* ---- pending transactions at a promoted primary ----------------------- */

/* Settle a pending transaction: install its images (commit) in the
 * promoted copies, and release its recovered locks. */
static void pend_settle(struct txloop *tl, struct rec_pend *p, bool commit)
{
	farm_txm *m = tl->m;
	struct rec_hdr h;
	memcpy(&h, p->rec, sizeof(h));
	const struct rec_obj *o = robjs(p->rec);
	const uint8_t *img = rimgs(p->rec);
	pthread_mutex_lock(&m->rec.lock);
	for (unsigned i = 0; i < h.nobj; i++) {
		/* Only what this entry locked (pend_add), in the copy it
		 * locked it in (a copy demoted since is installed there:
		 * data recovery reads it). */
		uint8_t *q = p->q[i];
		p->q[i] = NULL;
		if (q && !rlock_find(m, o[i].addr, q))
			q = NULL;
		if (q && commit &&
		    farm_txn_copy_apply(q, o[i].lines, img, true))
			farm_stat_add(&m->st.v[S_INSTALLS], 1);
		if (q)
			rlock_put(m, o[i].addr, q);
		img += 64ull * o[i].lines;
	}
	pthread_mutex_unlock(&m->rec.lock);
	farm_stat_add(&m->st.v[commit ? S_REC_COMMITTED : S_REC_ABORTED], 1);
}

/* The decision for @txid: settle its pending entries (those the log's
 * truncation has not settled already) and drop them. */
void farm_txn_rec_pend_decide(struct txloop *tl, uint64_t txid, bool commit)
{
	for (struct rec_pend **pp = &tl->pend; *pp;) {
		struct rec_pend *p = *pp;
		if (p->txid != txid) {
			pp = &p->next;
			continue;
		}
		if (!p->settled)
			pend_settle(tl, p, commit);
		*pp = p->next;
		free(p->q);
		free(p->rec);
		free(p);
	}
}

/*
 * participant.c: a COMMIT-BACKUP of @txid is being truncated. Its live
 * coordinator has finished the transaction, so it is decided, and an
 * ABORT it wrote here, if any, precedes the truncation mark (processed)
 * and follows the COMMIT-BACKUP (not yet truncated, so still known).
 * Settle its pending entries now: the coordinator's answer may come after
 * the truncation, when the ABORT is forgotten (FINISHED would then read
 * as committed), or never. The entries stay until the answer or a
 * decision removes them.
 */
void farm_txn_rec_truncated(struct txloop *tl, uint64_t txid)
{
	bool commit = !farm_txn_aborted(tl, txid);
	for (struct rec_pend *p = tl->pend; p; p = p->next)
		if (p->txid == txid && !p->settled) {
			pend_settle(tl, p, commit);
			p->settled = true;
		}
}

/* Lock the objects of COMMIT-BACKUP @rec in promoted regions and keep a
 * copy of it until its transaction is decided (rec.lock held). A copy: a
 * live coordinator that finished the transaction truncates the log past
 * the record, and our poller may zero it before the answer comes. */
static int pend_add(struct txloop *tl, uint32_t coord, const uint8_t *rec)
{
	farm_txm *m = tl->m;
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	struct rec_pend *p = malloc(sizeof(*p));
	uint8_t *copy = malloc(h.len);
	uint8_t **qs = calloc(h.nobj ? h.nobj : 1, sizeof(*qs));
	if (!p || !copy || !qs) {
		free(p);
		free(copy);
		free(qs);
		return -ENOMEM;
	}
	memcpy(copy, rec, h.len);
	*p = (struct rec_pend){.next = tl->pend,
	                       .txid = h.txid,
	                       .coord = coord,
	                       .rec = copy,
	                       .q = qs};
	const struct rec_obj *o = robjs(copy);
	for (unsigned i = 0; i < h.nobj; i++) {
		uint8_t *q = promo_obj(m, &o[i]);
		if (q && rlock_take(m, o[i].addr, q))
			farm_err("txn recovery: out of memory for a lock: "
			         "object %#" PRIx64 " left unlocked",
			         o[i].addr);
		else
			qs[i] = q;
	}
	tl->pend = p;
	return 0;
}

/* Step 2 for one log: finished records applied, the others locked
 * (rec.lock held). */
void farm_txn_rec_promote_scan(struct txloop *tl, uint32_t coord)
{
	farm_txm *m = tl->m;
	if (NO_DRAIN())
		return;
	struct reader *rd = &tl->r[coord];
	struct rec_hdr h;
	FOR_EACH_REC(tl, coord, pos, rec, h)
	{
		if (h.type != REC_COMMIT_BACKUP || farm_txn_aborted(tl, h.txid))
			continue;
		const struct rec_obj *o = robjs(rec);
		bool ours = false;
		/* Regions promoted in an earlier recovery serve already:
		 * theirs were settled then (promo_obj: backup copies only). */
		for (unsigned i = 0; i < h.nobj; i++)
			ours |= promo_obj(m, &o[i]) != NULL;
		if (!ours)
			continue;
		if (h.cseq && h.cseq < rd->lw) { /* finished: committed */
			const uint8_t *img = rimgs(rec);
			for (unsigned i = 0; i < h.nobj; i++) {
				uint8_t *q = promo_obj(m, &o[i]);
				if (q)
					(void)promo_apply(m, o[i].addr, q,
					                  o[i].lines, img);
				img += 64ull * o[i].lines;
			}
			continue;
		}
		if (pend_add(tl, coord, rec)) {
			farm_err("txn recovery: out of memory for transaction "
			         "%#" PRIx64,
			         h.txid);
			continue;
		}
		if (!reader_dead(m, coord, rd))
			farm_txn_rec_send_query(tl, coord, h.txid);
	}
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

#ifdef FARM_FAULT_INJECTION
void farm_txn_testing_recovery_no_drain(bool on)
{
	atomic_store(&testing_no_drain, on);
}
#endif
