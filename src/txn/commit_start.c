/*
 * The start of a commit (commit_start.c): farm_tx_commit places the
 * objects, packs the after-images, counts and reserves the log room every
 * record will need, then hands over to the phases (commit.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "util/log.h"

#define SPACE_WAIT_NS (1000ull * 1000000ull) /* then -ENOSPC */

static void tx_deferred(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)status; /* a closing loop still reports and frees */
	farm_tx *tx = ctx;
	bool fin = tx->deferred_finish;
	if (tx->deferred_report) {
		tx->deferred_report = false;
		tx->cont(tx->tl->loop, tx->ctx, tx->outcome);
	}
	if (fin) {
		tx->deferred_finish = false;
		farm_txn_tx_finish(tx);
	}
}

/* The end of farm_tx_commit: callbacks that came during it run later. */
static int tx_leave_call(farm_tx *tx)
{
	tx->in_call = false;
	if ((tx->deferred_report || tx->deferred_finish) &&
	    farm_loop_post(tx->tl->loop, tx_deferred, tx)) {
		/* No memory for a work item: run them now rather than lose
		 * them (the caller learns the outcome inside the call). */
		tx_deferred(tx->tl->loop, tx, 0);
	}
	return 0;
}

/* Reserve the log room every record of the commit needs, or wait for it. */
static void reserve_again(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	farm_tx *tx = ctx;
	tx->retry_posted = false;
	if (tx->ph != PH_RESERVE)
		return;
	if (status) { /* the loop is closing */
		tx_need_clear(tx);
		farm_txn_tx_report(tx, status);
		farm_txn_tx_finish(tx);
		return;
	}
	farm_txn_tx_reserve(tx);
}

void farm_txn_tx_reserve(farm_tx *tx)
{
	farm_txm *m = tx->m;
	struct txloop *tl = tx->tl;
	bool ok = true, reading = false, closed = false;
	const struct txpart *pt = tx_parts(tx);
	for (unsigned i = 0; i < tx->nparts; i++) {
		uint32_t mach = pt[i].mach;
		if (mach >= m->M || !pt[i].need)
			continue;
		struct writer *w = &tl->w[mach];
		if (!farm_txn_writer_open(m, w, mach)) {
			/* A log that still holds an old holder's records of
			 * this machine's id (farm_txm_forget_peer): wait, as
			 * for room, reading its header until it opens. */
			farm_txn_refresh_freed(tl, mach);
			ok = false;
			closed = true;
			reading |= w->reading || w->read_at;
			continue;
		}
		if (!has_room(m, w, pt[i].need)) {
			wq_pop_done(w, tl->cs_low);
			farm_txn_refresh_freed(tl, mach);
			if (!has_room(m, w, pt[i].need)) {
				farm_txn_maybe_truncate(tl, mach, true);
				ok = false;
				reading |= w->reading || w->read_at;
			}
		}
	}
	if (!ok) {
		farm_txn_room_wait(tl, tx); /* freed_read_done retries us */
		if (!tx->space_tries++) {
			farm_stat_add(&m->st.v[S_LOG_FULL], 1);
			tx->deadline = farm_now_ns() + SPACE_WAIT_NS;
		}
		tx->ph = PH_RESERVE;
		if (farm_now_ns() > tx->deadline) {
			tx_need_clear(tx);
			/* A closed log opens once recovery is done: retry. */
			farm_txn_tx_report(tx, closed ? -EAGAIN : -ENOSPC);
			farm_txn_tx_finish(tx);
			return;
		}
		/* A freed-word READ's completion retries us; with none out
		 * (our own log, or no memory for one) try on the next pass,
		 * after the poller has truncated what it could. */
		if (!reading && !tx->retry_posted &&
		    farm_loop_post(tl->loop, reserve_again, tx) == 0)
			tx->retry_posted = true;
		return;
	}
	/* The commit sequence is taken only now, with the room held: a
	 * commit waiting for room must not hold the low-water mark back, as
	 * records below the mark are all that replicas may truncate
	 * (wq_truncatable), and the room it waits for may be theirs. */
	int crc = farm_txn_cseq_take(tl, &tx->cseq);
	if (crc) {
		tx_need_clear(tx);
		farm_txn_tx_report(tx, crc);
		farm_txn_tx_finish(tx);
		return;
	}
	for (unsigned i = 0; i < tx->nparts; i++)
		if (pt[i].mach < m->M)
			tl->w[pt[i].mach].reserved += pt[i].need;
	farm_txn_tx_start_phases(tx);
}

/* farm_tx_commit refuses @tx with @rc before reserving any log room: the
 * room it counted is forgotten, as farm_txn_tx_finish (at farm_tx_abort or
 * farm_tx_free) releases need less used from the writers' reserved
 * bytes, which are other commits' then; a later farm_tx_commit counts
 * afresh. */
static int commit_refused(farm_tx *tx, int rc)
{
	tx_need_clear(tx); /* and each participant's flags */
	return rc;
}

/* The replicas of @region in configuration @cfg (@late: in the current
 * view, the switch of FARM_FP_TX_CFG_LATE) into @o; 0, -EAGAIN when
 * @cfg's ring is gone from this machine's history (the configuration
 * moved on meanwhile: retry), -EINVAL when the address names no region. */
static int place_one(farm_txm *m, uint32_t cfg, bool late, uint32_t region,
                     struct txobj *o)
{
	o->nrep = late ? farm_as_replicas(m->as, region, o->reps)
	               : farm_as_replicas_at(m->as, cfg, region, o->reps);
	if (!o->nrep && !late && (uint32_t)farm_as_config_id(m->as) != cfg &&
	    farm_as_replicas(m->as, region, o->reps))
		return -EAGAIN;
	if (!o->nrep || o->reps[0] >= m->M)
		return -EINVAL;
	return 0;
}

/* Find each object's replicas and primary in the ring of the commit's
 * configuration, tx->cfg, read before: a view installed meanwhile must
 * not place the commit by another configuration than the one its records
 * carry (PH_BACKUP's check against recovery's configuration, commit.c,
 * relies on that). Done at commit, not at read, so that the placement
 * is the one of the configuration the commit runs under. An object in
 * the region of the one before takes its placement: a KV batch's objects
 * lie in its shard's region, and each look-up is a read lock of the
 * address space. Counts the objects written in *@nw. */
static int commit_place(farm_tx *tx, bool late, unsigned *nw)
{
	farm_txm *m = tx->m;
	bool single = true;
	*nw = 0;
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		const struct txobj *prev = i ? &tx->o[i - 1] : NULL;
		uint32_t region = farm_gaddr_region(o->a);
		if (prev && farm_gaddr_region(prev->a) == region) {
			o->nrep = prev->nrep;
			memcpy(o->reps, prev->reps,
			       sizeof(o->reps[0]) * prev->nrep);
		} else {
			int rc = place_one(m, tx->cfg, late, region, o);
			if (rc)
				return rc;
		}
		o->primary = o->reps[0];
		single &= o->primary == m->me;
		if (txo_is_write(o))
			(*nw)++;
	}
	tx->single = single && *nw > 0;
	return 0;
}

/* Read-only: one object needs nothing more (the read was consistent);
 * several are validated. */
static int commit_read_only(farm_tx *tx)
{
	tx->in_call = true;
	if (tx->n <= 1) {
		tx->ph = PH_VALIDATE;
		farm_txn_tx_report(tx, 0);
		farm_txn_tx_finish(tx);
	} else {
		farm_txn_phase_validate(tx);
	}
	return tx_leave_call(tx);
}

/* The regions it writes (at most @nw), for every record's region list. */
static int commit_regions(farm_tx *tx, unsigned nw)
{
	/* A recycled record's list is kept (farm_tx_begin) when it has the
	 * room. */
	if (tx->capregs < nw) {
		uint32_t *r = malloc(sizeof(*r) * nw);
		if (!r)
			return -ENOMEM;
		free(tx->regs);
		tx->regs = r;
		tx->capregs = nw;
	}
	tx->nregs = 0;
	for (unsigned i = 0; i < tx->n; i++) {
		if (!txo_is_write(&tx->o[i]))
			continue;
		uint32_t r = farm_gaddr_region(tx->o[i].a);
		unsigned k = 0;
		while (k < tx->nregs && tx->regs[k] != r)
			k++;
		if (k == tx->nregs)
			tx->regs[tx->nregs++] = r;
	}
	if (tx->nregs > 512) /* recover.c: REC_MAX_REGS */
		return -E2BIG;
	return 0;
}

/* The after-image of every object written, packed as it will be
 * installed (next version, incarnation). */
static int commit_images(farm_tx *tx)
{
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!txo_is_write(o))
			continue;
		if (o->img) /* a commit refused before (commit_refused) */
			arena_put(&tx->tl->ar, o->img, 64ull * o->lines);
		o->img = arena_get(&tx->tl->ar, 64ull * o->lines);
		if (!o->img)
			return -ENOMEM;
		obj_pack(o->img, o->lines, o->data, o->size,
		         o->version + OBJ_VSTEP, txo_new_incarn(o));
	}
	return 0;
}

/* Room at each backup of primary @p: one COMMIT-BACKUP record per backup
 * (objects from index @from on share no earlier primary), plus a possible
 * ABORT once per backup. */
static int need_backups_of(farm_tx *tx, uint32_t p, unsigned from)
{
	tx_parts_unsee(tx, TXP_SEEN);
	for (unsigned j = from; j < tx->n; j++) {
		struct txobj *q = &tx->o[j];
		if (!txo_is_write(q) || q->primary != p)
			continue;
		for (unsigned k = 1; k < q->nrep; k++) {
			uint32_t b = q->reps[k];
			struct txpart *tb = tx_part_get(tx, b);
			if (!tb)
				return -ENOMEM;
			if (tb->flags & TXP_SEEN)
				continue;
			/* One COMMIT-BACKUP, and once per backup room for a
			 * possible ABORT. */
			tb->need += farm_txn_rec_bytes(tx, REC_COMMIT_BACKUP, p,
			                               b, NULL) +
			            (tb->flags & TXP_CB_ROOM ? 0 : 64);
			tb->flags |= TXP_SEEN | TXP_CB_ROOM;
		}
	}
	return 0;
}

/* Log room: LOCK + COMMIT-PRIMARY/ABORT at each primary (not for a
 * single-machine commit), COMMIT-BACKUP at each backup. */
static int commit_count_room(farm_tx *tx)
{
	for (unsigned i = 0; i < tx->n && !tx->single; i++) {
		struct txobj *o = &tx->o[i];
		if (!txo_is_write(o))
			continue;
		uint32_t p = o->primary;
		struct txpart *tp = tx_part_get(tx, p);
		if (!tp)
			return -ENOMEM;
		if (!tp->need)
			tp->need =
			        farm_txn_rec_bytes(tx, REC_LOCK, p, 0, NULL) +
			        64;
	}
	/* A single-machine commit's primary (this one) joins the list here
	 * as a placeholder, needing no room. */
	tx_parts_unsee(tx, TXP_SEENP);
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		struct txpart *tp =
		        txo_is_write(o) ? tx_part_get(tx, o->primary) : NULL;
		if (txo_is_write(o) && !tp)
			return -ENOMEM;
		if (!tp || (tp->flags & TXP_SEENP))
			continue;
		tp->flags |= TXP_SEENP;
		int rc = need_backups_of(tx, o->primary, i);
		if (rc)
			return rc;
	}
	return 0;
}

/* Every log the commit needs is at a peer ready to take it, and no one
 * commit asks for more than half of a log (it could never fit beside
 * others'); 0, or the code to refuse with. */
static int commit_room_check(farm_tx *tx)
{
	farm_txm *m = tx->m;
	const struct txpart *pt = tx_parts(tx);
	for (unsigned i = 0; i < tx->nparts; i++) {
		uint32_t mach = pt[i].mach;
		if (mach < m->M && pt[i].need && mach != m->me &&
		    /* Pairs with the release of peer_ready in txm.c. */
		    !atomic_load_explicit(&m->peer_ready[mach],
		                          memory_order_acquire))
			return FARM_EPEERDEAD;
	}
	for (unsigned i = 0; i < tx->nparts; i++)
		if (pt[i].mach < m->M && pt[i].need > m->R / 2)
			return -E2BIG;
	return 0;
}

static int commit_begin(farm_tx *tx, farm_tx_commit_fn cont, void *ctx)
{
	tx->cont = cont;
	tx->ctx = ctx;
	unsigned nw;
	bool late = FARM_FAULT_SWITCH(FARM_FP_TX_CFG_LATE);
	if (!late)
		tx->cfg = (uint32_t)farm_as_config_id(tx->m->as);
	int rc = commit_place(tx, late, &nw);
	if (rc)
		return rc;
	FARM_FAULT_POINT(FARM_FP_TX_PLACED);
	if (late)
		tx->cfg = (uint32_t)farm_as_config_id(tx->m->as);
	if (nw == 0)
		return commit_read_only(tx);
	rc = commit_regions(tx, nw);
	if (rc)
		return rc;
	rc = commit_images(tx);
	if (rc)
		return rc;
	rc = commit_count_room(tx);
	if (!rc)
		rc = commit_room_check(tx);
	if (rc)
		return commit_refused(tx, rc);
	tx->ph = PH_RESERVE;
	tx->in_call = true;
	farm_txn_tx_reserve(tx);
	return tx_leave_call(tx);
}

void farm_txm_quiesce(farm_txm *m, bool on)
{
	if (m)
		atomic_store(&m->quiescing, on);
}

unsigned long farm_txm_commits_out(farm_txm *m)
{
	if (!m)
		return 0;
	unsigned long n = 0;
	/* Under rec.lock, which a loop's attach and detach take to enter
	 * and leave the table (txm.c). Each count's load pairs with the
	 * release of its drop (txl_commit_done). */
	pthread_mutex_lock(&m->rec.lock);
	for (unsigned i = 0; i < MAX_LOOPS; i++)
		if (m->loops[i])
			n += atomic_load(&m->loops[i]->commits_out);
	pthread_mutex_unlock(&m->rec.lock);
	return n;
}

int farm_tx_commit(farm_tx *tx, farm_tx_commit_fn cont, void *ctx)
{
	if (!tx || !cont)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	if (tx->reads_out)
		return -EBUSY;
	/* Counted before the flag is read (txn_int.h, quiescing): a
	 * leaver that saw no commit out sees none start. The count drops
	 * when the outcome is reported (farm_txn_tx_report) or here, for a
	 * commit refused before it began. */
	atomic_fetch_add(&tx->tl->commits_out, 1);
	tx->counted = true;
	int rc = atomic_load(&tx->m->quiescing) ? -ESHUTDOWN
	                                        : commit_begin(tx, cont, ctx);
	if (rc && tx->counted) {
		tx->counted = false;
		txl_commit_done(tx->tl);
	}
	return rc;
}
