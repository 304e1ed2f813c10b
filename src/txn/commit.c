/*
 * The coordinator: the commit protocol (SOSP'15 section 4) over logs
 * written with one-sided WRITEs (log.c), processed by participants
 * (participant.c). farm_tx_commit, which places the objects and reserves
 * the log room (step 1), is in commit_start.c; this file runs the phases.
 *
 * Commit of a distributed transaction (coordinator = the loop that ran it):
 *   1. reserve room in every log the commit will write;
 *   2. LOCK: a record (objects, versions read, after-images) into each
 *      write-set primary's log; the primary locks the objects (CAS of the
 *      header version to the exclusive lock) and answers by message;
 *   3. VALIDATE: one one-sided READ of the header of every object only
 *      read (a load when local): unchanged and unlocked, else abort;
 *   4. COMMIT-BACKUP: a record with the after-images into the log of each
 *      backup of each primary; wait until every WRITE has completed
 *      (durable: FARM_WR_PERSIST);
 *   5. COMMIT-PRIMARY: a record into each primary's log; the primary
 *      installs from its LOCK record and unlocks. The outcome is reported
 *      once one of these WRITEs has completed;
 *   6. TRUNCATE: every record's header carries the coordinator's low-water
 *      mark in that log; records below it are done. Backups apply the
 *      after-images of COMMIT-BACKUP records they truncate, then zero the
 *      space and publish how far the log is free.
 * Aborts after LOCK write ABORT records; the primary unlocks.
 * Single-machine transactions (commit_single.c; every object's primary is
 * the coordinator's machine): lock locally in shared mode (lock-free reads
 * still succeed), validate locally, COMMIT-BACKUP to the backups, then lock
 * exclusively, install, unlock.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/txn_testing.h"
#include "util/fault.h"
#include "util/log.h"

/* Testing knobs (txn_testing.h; the testing section at the end). */
#ifdef FARM_FAULT_INJECTION
static _Atomic bool testing_crash_after_backup, testing_skip_validation;
#define TESTING(flag) atomic_load(&testing_##flag)
#else
#define TESTING(flag) false
#endif

struct decisive;

#define REPLY_TIMEOUT_NS (1000ull * 1000000ull)

/* ---- records ----------------------------------------------------------- */

static bool backs(const struct txobj *o, uint32_t b)
{
	for (unsigned i = 1; i < o->nrep; i++)
		if (o->reps[i] == b)
			return true;
	return false;
}

/* Objects of a record: LOCK to @p (type LOCK), or COMMIT-BACKUP for
 * primary @p to backup @b. */
static bool in_rec(const struct txobj *o, int type, uint32_t p, uint32_t b)
{
	if (!txo_is_write(o) || o->primary != p)
		return false;
	return type == REC_LOCK || backs(o, b);
}

/* The size of the record of @type from this commit to primary @p (LOCK)
 * or to backup @b of @p (COMMIT-BACKUP); its object count in *@nobj. */
uint64_t farm_txn_rec_bytes(farm_tx *tx, int type, uint32_t p, uint32_t b,
                            unsigned *nobj)
{
	unsigned n = 0;
	uint64_t img = 0;
	for (unsigned i = 0; i < tx->n; i++)
		if (in_rec(&tx->o[i], type, p, b)) {
			n++;
			img += 64ull * tx->o[i].lines;
		}
	if (nobj)
		*nobj = n;
	return n ? rec_size(n, img, tx->nregs) : 0;
}

static int build_rec(farm_tx *tx, int type, uint32_t p, uint32_t b,
                     uint8_t **out, size_t *len)
{
	unsigned n;
	uint64_t sz = farm_txn_rec_bytes(tx, type, p, b, &n);
	uint8_t *buf = arena_get(&tx->tl->ar, sz);
	if (!buf)
		return -ENOMEM;
	/* Every byte is written below but the tail after the region list
	 * (the pad to 64, the checksum and the trailer, which the log's
	 * append sets): zeroing the whole record first was an eighth of
	 * YCSB-A's malloc, free, memset and memcpy instructions. The header
	 * and the object entries have no padding (txn_log.h). */
	struct rec_hdr h = {.type = (uint16_t)type,
	                    .nobj = (uint16_t)n,
	                    .txid = tx->id,
	                    .cseq = tx->cseq,
	                    .cfg = tx->cfg,
	                    .nreg = (uint16_t)tx->nregs};
	memcpy(buf, &h, sizeof(h));
	struct rec_obj *ro = (struct rec_obj *)(void *)(buf + sizeof(h));
	uint8_t *img = buf + sizeof(h) + (size_t)n * sizeof(*ro);
	unsigned k = 0;
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!in_rec(o, type, p, b))
			continue;
		ro[k++] = (struct rec_obj){
		        .addr = o->a,
		        .version = type == REC_LOCK ? o->version
		                                    : o->version + OBJ_VSTEP,
		        .incarn = type == REC_LOCK ? o->incarn
		                                   : txo_new_incarn(o),
		        .lines = o->lines,
		        .flags = (o->flags & TXO_NEW ? OBJF_NEW : 0) |
		                 (o->flags & TXO_FREE ? OBJF_FREE : 0) |
		                 ((o->flags & (TXO_FREE | TXO_ARRAY)) ==
		                                  (TXO_FREE | TXO_ARRAY)
		                          ? OBJF_ARRAY |
		                                    (o->arr_n << OBJF_N_SHIFT)
		                          : 0) |
		                 ((o->flags & (TXO_FREE | TXO_ELEM)) ==
		                                  (TXO_FREE | TXO_ELEM)
		                          ? OBJF_ELEM
		                          : 0) |
		                 (type == REC_COMMIT_BACKUP
		                          ? farm_txn_alloc_flags(tx->m, o)
		                          : 0)};
		memcpy(img, o->img, 64ull * o->lines);
		img += 64ull * o->lines;
	}
	memcpy(img, tx->regs, 4ull * tx->nregs);
	uint8_t *end = img + 4ull * tx->nregs;
	memset(end, 0, (size_t)(buf + sz - end));
	*out = buf;
	*len = sz;
	return 0;
}

/* A COMMIT-PRIMARY or ABORT record not written. The outcome carries the
 * error to the application; a line per record only fills a disk when the
 * application retries on a machine that cannot write (removed, its access
 * revoked, or a peer gone): fenced or removed, nothing is said (the
 * recovery module said once that it was removed); anything else, once a
 * second with a count. */
static void append_failed(farm_tx *tx, uint32_t mach, int kind, int rc)
{
	static struct farm_log_limit lim;
	const char *what = kind == K_PRIMARY ? "COMMIT-PRIMARY" : "ABORT";
	if (FARM_FAULT_SWITCH(FARM_FP_REMOVED_LOUD))
		farm_warn("txn: %s record of transaction %#" PRIx64
		          " to machine %" PRIu32 " not written: %s",
		          what, tx->id, mach, farm_strerror(rc));
	else if (rc != FARM_EFENCED && !txn_removed(tx->m))
		farm_warn_limited(&lim,
		                  "txn: %s record of transaction %#" PRIx64
		                  " to machine %" PRIu32 " not written: %s",
		                  what, tx->id, mach, farm_strerror(rc));
}

static void tx_append(farm_tx *tx, uint32_t mach, uint8_t *buf, size_t len,
                      int kind)
{
	uint64_t seq;
	int rc = farm_txn_log_append(tx->tl, mach, buf, len, tx, kind, &seq);
	if (!rc) {
		struct txpart *tp = tx_part(tx, mach);
		if (tp)
			tp->used += len;
	}
	if (rc && rc != -EAGAIN && (kind == K_PRIMARY || kind == K_ABORT))
		append_failed(tx, mach, kind, rc);
	if (rc) {
		if (!tx->fail)
			tx->fail = rc;
		return;
	}
	if (mach != tx->m->me)
		tx->n_writes++;
	if (tx->nrecs == tx->caprecs) {
		unsigned nc = tx->caprecs ? tx->caprecs * 2 : 8;
		struct txrec *nr = realloc(tx->recs, nc * sizeof(*nr));
		if (!nr) { /* the record's entry stays not-done: the log's
			      low-water mark stops there (no data loss) */
			farm_err("txn: out of memory tracking a log record");
			tx->wait_writes++;
			return;
		}
		tx->recs = nr;
		tx->caprecs = nc;
	}
	tx->recs[tx->nrecs++] = (struct txrec){.machine = mach, .seq = seq};
	tx->wait_writes++;
}

/* ---- outcome and the end of a commit ---------------------------------- */

static void count_outcome(struct txloop *tl, int outcome)
{
	switch (outcome) {
	case 0: break;
	case FARM_ECONFLICT: txl_count(tl, S_AB_CONFLICT, 1); break;
	case FARM_EVALIDATION: txl_count(tl, S_AB_VALIDATION, 1); break;
	case -ENOSPC: txl_count(tl, S_AB_NOSPACE, 1); break;
	case FARM_EFREED: txl_count(tl, S_AB_FREED, 1); break;
	default: txl_count(tl, S_AB_FAILURE, 1); break;
	}
}

/* On the transaction's loop's thread (every outcome is reported there):
 * its counters are that loop's (txl_count). */
void farm_txn_tx_report(farm_tx *tx, int outcome)
{
	if (tx->reported)
		return;
	tx->reported = true;
	tx->outcome = outcome;
	struct txloop *tl = tx->tl;
	if (tx->counted) { /* counted by farm_tx_commit */
		tx->counted = false;
		txl_commit_done(tl);
	}
	if (!outcome) {
		txl_count(tl, S_COMMITS, 1);
		if (tx->single)
			txl_count(tl, S_COMMITS_SINGLE, 1);
		txl_count(tl, S_C_WRITES, tx->n_writes);
		txl_count(tl, S_C_READS, tx->n_reads);
		txl_count(tl, S_C_MSGS, tx->n_msgs);
	}
	count_outcome(tl, outcome);
	if (tx->in_call) {
		tx->deferred_report = true; /* never before commit returns */
		return;
	}
	tx->cont(tx->tl->loop, tx->ctx, outcome);
}

/* A new object of an aborted transaction goes back
 * (farm_txn_new_give_back): a new array once, by its first element, each
 * other element unlocked at its own entry, after it. Its header here, or
 * in a copy demoted here (growth), is unlocked at the version read. */
static void new_abort(farm_txm *m, struct txloop *tl, const struct txobj *o)
{
	bool d;
	_Atomic uint64_t *hv =
	        (void *)txn_own_ptr(m, o->a, 64ull * o->lines, &d);
	if (o->flags & TXO_ELEM)
		farm_txn_new_unlock(hv, o->version);
	else
		farm_txn_new_give_back(m, tl->loop, o->a, 64ull * o->lines,
		                       (o->flags & TXO_ARRAY) ? o->arr_n : 0,
		                       hv, o->version);
}

/* Everything the transaction wrote is done: its records may go. */
void farm_txn_tx_finish(farm_tx *tx)
{
	struct txloop *tl = tx->tl;
	farm_txm *m = tx->m;
	if (tx->in_call) {
		tx->deferred_finish = true;
		return;
	}
	struct txpart *pt = tx_parts(tx);
	if (tx->ph == PH_PRIMARY || tx->ph == PH_ABORT)
		for (unsigned i = 0; i < tx->nparts; i++)
			if ((pt[i].flags & (TXP_LOCKED | TXP_DECIDED)) ==
			    TXP_LOCKED)
				farm_warn(
				        "txn: transaction %#" PRIx64
				        " finished "
				        "without a decision at machine %" PRIu32
				        " (phase %d, fail %d)",
				        tx->id, pt[i].mach, (int)tx->ph,
				        tx->fail);
	for (unsigned i = 0; i < tx->nrecs; i++) {
		struct writer *w = &tl->w[tx->recs[i].machine];
		w->wq[tx->recs[i].seq % w->wq_cap].done = true;
	}
	for (unsigned i = 0; i < tx->nparts; i++) {
		uint32_t mach = pt[i].mach;
		if (mach >= m->M || !pt[i].need)
			continue;
		struct writer *w = &tl->w[mach];
		uint64_t left =
		        pt[i].need > pt[i].used ? pt[i].need - pt[i].used : 0;
		w->reserved -= FARM_MIN(w->reserved, left);
		farm_txn_maybe_truncate(tl, mach, false);
	}
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (o->img)
			arena_put(&tl->ar, o->img, 64ull * o->lines);
		if (o->vbuf)
			arena_put(&tl->ar, o->vbuf, 64);
		o->img = o->vbuf = NULL;
		/* A new object of an aborted transaction goes back (a new
		 * array once, by its first element). */
		if ((o->flags & TXO_NEW) && tx->outcome)
			new_abort(m, tl, o);
		o->flags &= ~TXO_NEW;
	}
	if (tx->nwaiters) /* decided without passing the hooks */
		farm_txn_tell_decided(tx, tx->outcome == 0);
	if (tx->cseq) {
		farm_txn_cseq_done(tl, tx->cseq);
		tx->cseq = 0;
	}
	tx->ph = PH_DONE;
	if (tx->released)
		farm_txn_tx_free(tx);
}

/* ---- the state machine ------------------------------------------------ */

static void phase_backup(farm_tx *tx);
static void phase_primary(farm_tx *tx);
static void phase_abort(farm_tx *tx, int outcome);

/* A phase's operations are all back: go on. */
/* A phase after LOCK failed: a single-machine commit drops its shared
 * locks and reports; a distributed one writes ABORT records. */
static void tx_fail(farm_tx *tx, int fail)
{
	if (tx->single) {
		farm_txn_single_unlock(tx, tx->n);
		FARM_FAULT_POINT(FARM_FP_TX_LOCK_UNDONE);
		bool cb = false;
		const struct txpart *pt = tx_parts(tx);
		for (unsigned i = 0; i < tx->nparts; i++)
			cb |= (pt[i].flags & TXP_CB) != 0;
		if (!cb) {
			farm_txn_tx_report(tx, fail);
			farm_txn_tx_finish(tx);
			return;
		}
	}
	phase_abort(tx, fail);
}

static void tx_step(farm_tx *tx)
{
	if (tx->wait_writes || tx->wait_replies || tx->wait_reads)
		return;
	int fail = tx->fail;
	switch (tx->ph) {
	case PH_LOCK:
		tx->tl->lock_waiters--;
		if (fail)
			phase_abort(tx,
			            fail == -EINVAL ? FARM_ECONFLICT : fail);
		else
			farm_txn_phase_validate(tx);
		break;
	case PH_VALIDATE:
		if (fail) {
			tx_fail(tx, fail);
		} else if (tx->single) {
			phase_backup(tx);
		} else {
			bool any = false;
			for (unsigned i = 0; i < tx->n; i++)
				any |= txo_is_write(&tx->o[i]);
			if (!any) { /* read-only: validated */
				farm_txn_tx_report(tx, 0);
				farm_txn_tx_finish(tx);
			} else {
				phase_backup(tx);
			}
		}
		break;
	case PH_BACKUP:
		if (fail) {
			tx_fail(tx, fail);
		} else if (tx->single &&
		           tx->cfg <
		                   /* Pairs with recovery's store of rec.cfg
		                    * (recover.c), after its round's state. */
		                   atomic_load_explicit(&tx->m->rec.cfg,
		                                        memory_order_acquire)) {
			/* Its COMMIT-BACKUPs went to the replicas of an older
			 * configuration: a new backup copying the region
			 * (copy.c) would miss the install. Abort; the retry
			 * runs in the new one. */
			tx_fail(tx, -EAGAIN);
		} else if (tx->single) {
			farm_txn_single_install(tx);
		} else {
			if (TESTING(crash_after_backup))
				raise(SIGKILL); /* testing: COMMIT-BACKUP acked
				                 */
			/* The configuration changed since the commit started:
			 * a COMMIT-BACKUP may have landed after a promoted
			 * primary drained its logs, so it must not count
			 * (recover.c). Abort; the retry runs in the new one. */
			if (tx->cfg <
			    /* Pairs with recovery's store of rec.cfg. */
			    atomic_load_explicit(&tx->m->rec.cfg,
			                         memory_order_acquire))
				tx_fail(tx, -EAGAIN);
			else
				phase_primary(tx);
		}
		break;
	case PH_PRIMARY:
		/* Reported at the first landed COMMIT-PRIMARY. None landed:
		 * every primary died, yet every COMMIT-BACKUP is durable, and
		 * recovery commits a transaction whose regions each have
		 * their COMMIT-BACKUP at every surviving backup (recover.c),
		 * so it is committed. */
		if (!tx->reported)
			farm_txn_tx_report(tx, 0);
		farm_txn_tx_finish(tx);
		break;
	case PH_ABORT:
		farm_txn_tx_report(tx, tx->abort_outcome);
		farm_txn_tx_finish(tx);
		break;
	default: break;
	}
}

static void send_decisive(farm_tx *tx, uint32_t mach, int type, int kind,
                          struct decisive *d);

/*
 * A LOCK record that failed has no answer coming: the wait for it ends.
 * Failed because its machine died (the death notice flushed it), this is
 * the same early end as farm_txn_end_lock_waits' at the configuration
 * that removes the machine, and counted with it: on shm the notice
 * usually comes first.
 */
static void lock_record_failed(farm_tx *tx, int status)
{
	bool died = status == FARM_EFLUSHED || status == FARM_EPEERDEAD;
#ifdef FARM_FAULT_INJECTION
	if (died && atomic_load(&farm_txn_testing_keep_lock_waits_on))
		return; /* testing: wait for the deadline, as before */
#endif
	tx->wait_replies--;
	if (died)
		farm_stat_add(&tx->m->st.v[S_LOCK_WAITS_ENDED], 1);
}

void farm_txn_tx_record_done(farm_loop *loop, farm_tx *tx, int kind,
                             uint32_t mach, int status)
{
	(void)loop;
	tx->wait_writes--;
	if (kind == K_LOCK && status)
		lock_record_failed(tx, status);
	if ((kind == K_PRIMARY || kind == K_ABORT) && !status)
		tx_part_mark(tx, mach, TXP_DECIDED);
	if ((kind == K_PRIMARY || kind == K_ABORT) && status &&
	    status != FARM_EPEERDEAD && status != FARM_EFENCED) {
		/* It did not land (an earlier failure on the endpoint flushed
		 * it): the primary still holds the locks. Send it again. */
		farm_warn("txn: %s record of transaction %#" PRIx64
		          " to machine "
		          "%" PRIu32 " failed (%s): sending it again",
		          kind == K_PRIMARY ? "COMMIT-PRIMARY" : "ABORT",
		          tx->id, mach, farm_strerror(status));
		send_decisive(tx, mach,
		              kind == K_PRIMARY ? REC_COMMIT_PRIMARY
		                                : REC_ABORT,
		              kind, NULL);
	}
	if (kind == K_PRIMARY && !status) {
		tx->committed_writes++;
		if (!tx->reported)
			farm_txn_tx_report(tx, 0);
	}
	if (status && !tx->fail && kind != K_PRIMARY && kind != K_ABORT)
		tx->fail = status == FARM_EFLUSHED ? FARM_EPEERDEAD : status;
	tx_step(tx);
}

void farm_txn_h_reply(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct txloop *tl = loop_state(m, loop);
	struct reply r;
	if (!tl || in->len != sizeof(r)) {
		farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
		return;
	}
	memcpy(&r, in->payload, sizeof(r));
	farm_tx *tx = tl->slots[txid_seq(r.txid) % TX_SLOTS];
	if (!tx || tx->id != r.txid || tx->ph != PH_LOCK || !tx->wait_replies)
		return; /* late (the transaction gave up) */
	tx->wait_replies--;
	if (in->src_machine != m->me)
		tx->n_msgs++;
	if (r.status && !tx->fail)
		tx->fail = r.status;
	if (tx->wait_replies)
		FARM_FAULT_POINT(FARM_FP_TX_LOCK_REPLIED);
	tx_step(tx);
}

/* ---- distributed phases ----------------------------------------------- */

static void phase_lock(farm_tx *tx)
{
	farm_txm *m = tx->m;
	tx->ph = PH_LOCK;
	tx->deadline = farm_now_ns() + REPLY_TIMEOUT_NS;
	tx->tl->lock_waiters++;
	tx_parts_unsee(tx, TXP_SEEN);
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!txo_is_write(o))
			continue;
		/* A participant already (commit_count_room). */
		struct txpart *tp = tx_part_get(tx, o->primary);
		if (!tp) {
			tx->fail = -ENOMEM;
			continue;
		}
		if (tp->flags & TXP_SEEN)
			continue;
		tp->flags |= TXP_SEEN;
		uint8_t *buf;
		size_t len;
		int rc = build_rec(tx, REC_LOCK, o->primary, 0, &buf, &len);
		if (rc) {
			tx->fail = rc;
			continue;
		}
		tp->flags |= TXP_LOCKED;
		unsigned before = tx->wait_writes;
		tx_append(tx, o->primary, buf, len, K_LOCK);
		if (tx->wait_writes != before)
			tx->wait_replies++;
	}
	(void)m;
	if (tx->wait_replies)
		FARM_FAULT_POINT(FARM_FP_TX_LOCK_SENT);
	tx_step(tx);
}

static void validate_more(farm_tx *tx);

static void val_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct txobj *o = ctx;
	farm_tx *tx = *(farm_tx **)(void *)(o->vbuf + 8);
	tx->wait_reads--;
	uint64_t v;
	memcpy(&v, o->vbuf, 8);
	if (!tx->fail && (status || v != o->version))
		tx->fail = status ? (status == FARM_EFLUSHED ? FARM_EPEERDEAD
		                                             : status)
		                  : FARM_EVALIDATION;
	validate_more(tx); /* a slot of the send queue came back */
	tx_step(tx);
}

/* How long validation waits for room in a send queue that none of its own
 * READs occupy (other transactions', or a failed endpoint draining)
 * before it fails with -EAGAIN. */
#define VALIDATE_FULL_NS (1000ull * 1000000ull)

static void validate_again(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	farm_tx *tx = ctx;
	tx->wait_reads--;
	if (status && !tx->fail)
		tx->fail = status; /* the loop closed */
	validate_more(tx);
	tx_step(tx);
}

/* Post the validation READs from tx->vnext on, as many as the send queue
 * takes. A full queue (-EAGAIN) is not a failure while our own READs are
 * in it: each completion posts more (val_done). Failing there instead made
 * a transaction reading more objects of one machine than the queue holds
 * (EP_DEPTH, 1024) abort every time it was retried. */
static void validate_more(farm_tx *tx)
{
	farm_txm *m = tx->m;
	if (tx->ph != PH_VALIDATE)
		return;
	for (; tx->vnext < tx->n && !tx->fail && !TESTING(skip_validation);
	     tx->vnext++) {
		struct txobj *o = &tx->o[tx->vnext];
		if (txo_is_write(o) || !(o->flags & TXO_READ))
			continue;
		const _Atomic uint64_t *lp = farm_as_local_ptr(m->as, o->a, 8);
		if (lp) {
			/* Pairs with the release of the version at unlock and
			 * install (participant.c, farm_txn_single_install). */
			if (atomic_load_explicit(lp, memory_order_acquire) !=
			    o->version)
				tx->fail = FARM_EVALIDATION;
			continue;
		}
		if (!o->vbuf)
			o->vbuf = arena_get(&tx->tl->ar, 64);
		if (!o->vbuf) {
			tx->fail = -ENOMEM;
			break;
		}
		memcpy(o->vbuf + 8, &tx, sizeof(tx));
		int rc = farm_as_read(m->as, tx->tl->loop, o->a, o->vbuf,
		                      tx->tl->ar.mr, 8, val_done, o);
		if (rc == -EAGAIN && tx->wait_reads)
			return; /* val_done goes on */
		if (rc == -EAGAIN) {
			uint64_t now = farm_now_ns();
			if (!tx->vfull_t0)
				tx->vfull_t0 = now;
			if (now - tx->vfull_t0 < VALIDATE_FULL_NS &&
			    !farm_loop_defer(tx->tl->loop, validate_again,
			                     tx)) {
				tx->wait_reads++; /* validate_again's */
				return;
			}
		}
		if (rc) {
			tx->fail = rc;
			break;
		}
		tx->vfull_t0 = 0;
		tx->n_reads++;
		tx->wait_reads++;
	}
}

void farm_txn_phase_validate(farm_tx *tx)
{
	tx->ph = PH_VALIDATE;
	tx->vnext = 0;
	tx->vfull_t0 = 0;
	validate_more(tx);
	tx_step(tx);
}

static void phase_backup(farm_tx *tx)
{
	tx->ph = PH_BACKUP;
	unsigned nsent = 0; /* records, for the crash point */
	tx_parts_unsee(tx, TXP_SEENP);
	for (unsigned i = 0; i < tx->n && !tx->fail; i++) {
		struct txobj *o = &tx->o[i];
		struct txpart *pp =
		        txo_is_write(o) ? tx_part_get(tx, o->primary) : NULL;
		if (!pp || (pp->flags & TXP_SEENP))
			continue;
		pp->flags |= TXP_SEENP;
		tx_parts_unsee(tx, TXP_SEEN); /* backups of this primary */
		for (unsigned j = i; j < tx->n; j++) {
			struct txobj *q = &tx->o[j];
			if (!txo_is_write(q) || q->primary != o->primary)
				continue;
			for (unsigned k = 1; k < q->nrep; k++) {
				uint32_t b = q->reps[k];
				struct txpart *tp = tx_part_get(tx, b);
				if (!tp) {
					tx->fail = -ENOMEM;
					break;
				}
				if (tp->flags & TXP_SEEN)
					continue;
				tp->flags |= TXP_SEEN;
				uint8_t *buf;
				size_t len;
				int rc = build_rec(tx, REC_COMMIT_BACKUP,
				                   o->primary, b, &buf, &len);
				if (rc) {
					tx->fail = rc;
					break;
				}
				if (nsent++)
					FARM_FAULT_POINT(
					        FARM_FP_TX_BACKUP_SOME);
				/* Landed or not: unknown. Set first, as
				 * tx_append may move the list. */
				tp->flags |= TXP_CB;
				tx_append(tx, b, buf, len, K_BACKUP);
			}
		}
	}
	tx_step(tx);
}

/*
 * A COMMIT-PRIMARY or ABORT record must reach its primary: it alone
 * unlocks the objects there (and installs the writes). When it cannot be
 * sent now (no staging memory, a full send queue, an endpoint draining
 * after a failure) it is retried from a work item until it is sent or the
 * primary is known dead; the transaction waits for it.
 */
struct decisive {
	farm_tx *tx;
	uint32_t mach;
	int type, kind;
};

static void decisive_retry(farm_loop *loop, void *ctx, int status);

static void send_decisive(farm_tx *tx, uint32_t mach, int type, int kind,
                          struct decisive *d)
{
	uint8_t *b = arena_get(&tx->tl->ar, 64);
	int rc = -ENOMEM;
	if (b) {
		memset(b, 0, 64);
		struct rec_hdr h = {.type = (uint16_t)type,
		                    .txid = tx->id,
		                    .cseq = tx->cseq,
		                    .cfg = tx->cfg};
		memcpy(b, &h, sizeof(h));
		unsigned before = tx->wait_writes;
		int fail = tx->fail;
		tx->fail = 0;
		tx_append(tx, mach, b, 64, kind);
		rc = tx->wait_writes != before ? 0
		                               : (tx->fail ? tx->fail : -EIO);
		tx->fail = fail;
	}
	/* Sent; or never to be: the machine is dead, unknown, or fenced this
	 * one off (it was removed: recovery decides without it). */
	if (!rc || rc == FARM_EPEERDEAD || rc == FARM_EFENCED ||
	    rc == -ENOENT) {
		if (d) {
			tx->wait_writes--; /* the retry's own hold */
			free(d);
		}
		return;
	}
	if (!d) {
		d = malloc(sizeof(*d));
		if (!d) {
			farm_err("txn: cannot retry a %s record: out of memory",
			         type == REC_ABORT ? "ABORT"
			                           : "COMMIT-PRIMARY");
			return;
		}
		*d = (struct decisive){
		        .tx = tx, .mach = mach, .type = type, .kind = kind};
		tx->wait_writes++; /* held until it is sent */
	}
	if (farm_loop_post(tx->tl->loop, decisive_retry, d)) {
		farm_err("txn: cannot retry a decisive record");
		tx->wait_writes--;
		free(d);
	}
}

static void decisive_retry(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct decisive *d = ctx;
	farm_tx *tx = d->tx;
	if (status) { /* the loop is closing: give up */
		tx->wait_writes--;
		free(d);
		tx_step(tx);
		return;
	}
	send_decisive(tx, d->mach, d->type, d->kind, d);
	tx_step(tx);
}

static void phase_primary(farm_tx *tx)
{
	tx->ph = PH_PRIMARY;
	farm_txn_tell_decided(tx, true);
	bool remote = false;
	/* By index: send_decisive does not add participants (each one it
	 * writes to is one already). */
	for (unsigned i = 0; i < tx->nparts; i++) {
		uint32_t p = tx_parts(tx)[i].mach;
		if (p >= tx->m->M || !(tx_parts(tx)[i].flags & TXP_LOCKED))
			continue;
		send_decisive(tx, p, REC_COMMIT_PRIMARY, K_PRIMARY, NULL);
		if (p != tx->m->me && !remote) {
			remote = true;
			FARM_FAULT_POINT(FARM_FP_TX_PRIMARY_FIRST);
		}
	}
	tx_step(tx);
}

/*
 * Abort: ABORT records to every primary that may hold a lock and every
 * backup that may hold a COMMIT-BACKUP (which it must then never apply).
 * The outcome is reported once they have landed: with a COMMIT-BACKUP at
 * every backup, recovery would commit a transaction whose coordinator
 * died, unless an ABORT record says otherwise.
 */
static void phase_abort(farm_tx *tx, int outcome)
{
	tx->ph = PH_ABORT;
	tx->fail = 0;
	tx->abort_outcome = outcome;
	farm_txn_tell_decided(tx, false);
	for (unsigned i = 0; i < tx->nparts; i++) {
		uint32_t p = tx_parts(tx)[i].mach;
		if (p < tx->m->M &&
		    (tx_parts(tx)[i].flags & (TXP_LOCKED | TXP_CB)))
			send_decisive(tx, p, REC_ABORT, K_ABORT, NULL);
	}
	tx_step(tx);
}

/* The state machine's next step, for the single-machine phases
 * (commit_single.c). */
void farm_txn_tx_step(farm_tx *tx)
{
	tx_step(tx);
}

/* ---- commit: entry, log space ----------------------------------------- */

void farm_txn_tx_start_phases(farm_tx *tx)
{
	if (tx->single)
		farm_txn_single_lock(tx);
	else
		phase_lock(tx);
}

/* Transactions waiting for lock replies past their deadline give up. */
void farm_txn_scan_deadlines(struct txloop *tl)
{
	uint64_t now = farm_now_ns();
	for (unsigned i = 0; i < TX_SLOTS; i++) {
		farm_tx *tx = tl->slots[i];
		if (!tx || tx->ph != PH_LOCK || !tx->wait_replies ||
		    now < tx->deadline)
			continue;
		tx->wait_replies = 0;
		if (!tx->fail)
			tx->fail = -ETIMEDOUT;
		tx_step(tx);
	}
}

/*
 * A new configuration removed machines: commits still waiting for a LOCK
 * reply from one of them stop waiting now instead of at their deadline.
 * The LOCK record itself may have landed (shm memory outlives its
 * process), so no reply would ever come, and each such commit held its
 * other locks for REPLY_TIMEOUT_NS, stalling survivors' throughput for a
 * second after every kill (recovery_bench). Nothing was written past
 * LOCK, so aborting is safe; the retry runs in the new configuration.
 */
void farm_txn_end_lock_waits(struct txloop *tl, const bool *removed)
{
#ifdef FARM_FAULT_INJECTION
	if (atomic_load(&farm_txn_testing_keep_lock_waits_on))
		return; /* testing: wait for the deadline, as before */
#endif
	for (unsigned i = 0; i < TX_SLOTS; i++) {
		farm_tx *tx = tl->slots[i];
		if (!tx || tx->ph != PH_LOCK || !tx->wait_replies)
			continue;
		bool gone = false;
		const struct txpart *pt = tx_parts(tx);
		for (unsigned k = 0; k < tx->nparts && !gone; k++)
			gone = pt[k].mach < tl->m->M && removed[pt[k].mach] &&
			       (pt[k].flags & TXP_LOCKED);
		if (!gone)
			continue;
		tx->wait_replies = 0;
		if (!tx->fail)
			tx->fail = FARM_EPEERDEAD;
		farm_stat_add(&tl->m->st.v[S_LOCK_WAITS_ENDED], 1);
		tx_step(tx);
	}
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

uint64_t farm_txm_testing_log_reserved(farm_txm *m, farm_loop *loop,
                                       uint32_t mach)
{
	struct txloop *tl = loop_state(m, loop);
	return tl && mach < m->M ? tl->w[mach].reserved : 0;
}

#ifdef FARM_FAULT_INJECTION
_Atomic bool farm_txn_testing_keep_lock_waits_on;

void farm_txn_testing_keep_lock_waits(bool on)
{
	atomic_store(&farm_txn_testing_keep_lock_waits_on, on);
}
#endif

#ifdef FARM_FAULT_INJECTION
void farm_txn_testing_crash_after_backup(bool on)
{
	atomic_store(&testing_crash_after_backup, on);
}

void farm_txn_testing_skip_validation(bool on)
{
	atomic_store(&testing_skip_validation, on);
}
#endif

void farm_txn_on_decided(farm_txm *m, txn_decided_fn fn)
{
	m->on_decided = fn;
}

void farm_txn_tell_decided(farm_tx *tx, bool commit)
{
	if (tx->m->on_decided)
		tx->m->on_decided(tx, commit);
}
