/*
 * Transactions (include/farm/txn.h, txm.h): optimistic concurrency control
 * with the SOSP'15 commit protocol over logs written with one-sided WRITEs.
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
 * Single-machine transactions (every object's primary is the coordinator's
 * machine): lock locally in shared mode (lock-free reads still succeed),
 * validate locally, COMMIT-BACKUP to the backups, then lock exclusively,
 * install, unlock.
 *
 * Records: 64-byte aligned, [hdr | objects | images | trailer]; the
 * trailer (last 8 bytes) is the record's position + 1, and a WRITE's last
 * 8 bytes land last, so a record whose trailer matches is whole.
 */
#include "txn/txm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "txn/epoch.h"
#include "txn/object.h"
#include "txn/txn_testing.h"
#include "util/common.h"
#include "util/lines.h"
#include "util/log.h"
#include "txn/txn_int.h"

#define WQ_CAP 1024u /* initial record queue per log writer; grows */

#define SPACE_WAIT_NS (1000ull * 1000000ull) /* then -ENOSPC */

#define DEFAULT_LOG   (1u << 20)
#define DEFAULT_ARENA (64u << 20)

/* Testing knobs (txn_testing.h; the testing section at the end). */
static _Atomic bool testing_crash_after_backup, testing_skip_validation;

struct decisive;

#define REPLY_TIMEOUT_NS (1000ull * 1000000ull)

static bool is_write(const struct txobj *o)
{
	return (o->flags & TXO_WRITE) != 0;
}

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
	if (!is_write(o) || o->primary != p)
		return false;
	return type == REC_LOCK || backs(o, b);
}

static uint64_t rec_bytes(farm_tx *tx, int type, uint32_t p, uint32_t b,
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
	return n ? rec_size(n, img) : 0;
}

static uint64_t new_incarn(const struct txobj *o)
{
	return (o->flags & TXO_FREE) ? farm_incarn_freed(o->incarn) : o->incarn;
}

static int build_rec(farm_tx *tx, int type, uint32_t p, uint32_t b,
                     uint8_t **out, size_t *len)
{
	unsigned n;
	uint64_t sz = rec_bytes(tx, type, p, b, &n);
	uint8_t *buf = arena_get(&tx->tl->ar, sz);
	if (!buf)
		return -ENOMEM;
	memset(buf, 0, sz);
	struct rec_hdr h = {
	        .type = (uint16_t)type, .nobj = (uint16_t)n, .txid = tx->id};
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
		        .incarn = type == REC_LOCK ? o->incarn : new_incarn(o),
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
		                          : 0)};
		memcpy(img, o->img, 64ull * o->lines);
		img += 64ull * o->lines;
	}
	*out = buf;
	*len = sz;
	return 0;
}

static void tx_append(farm_tx *tx, uint32_t mach, uint8_t *buf, size_t len,
                      int kind)
{
	uint64_t seq;
	int rc = txn_log_append(tx->tl, mach, buf, len, tx, kind, &seq);
	if (!rc)
		tx->used[mach] += len;
	if (rc && rc != -EAGAIN && (kind == K_PRIMARY || kind == K_ABORT))
		farm_warn("txn: %s record of transaction %#" PRIx64
		          " to machine "
		          "%" PRIu32 " not written: %s",
		          kind == K_PRIMARY ? "COMMIT-PRIMARY" : "ABORT",
		          tx->id, mach, farm_strerror(rc));
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

static void count_outcome(farm_txm *m, int outcome)
{
	switch (outcome) {
	case 0: break;
	case FARM_ECONFLICT: stat_add(m, S_AB_CONFLICT, 1); break;
	case FARM_EVALIDATION: stat_add(m, S_AB_VALIDATION, 1); break;
	case -ENOSPC: stat_add(m, S_AB_NOSPACE, 1); break;
	case FARM_EFREED: stat_add(m, S_AB_FREED, 1); break;
	default: stat_add(m, S_AB_FAILURE, 1); break;
	}
}

static void tx_report(farm_tx *tx, int outcome)
{
	if (tx->reported)
		return;
	tx->reported = true;
	tx->outcome = outcome;
	farm_txm *m = tx->m;
	if (!outcome) {
		stat_add(m, S_COMMITS, 1);
		if (tx->single)
			stat_add(m, S_COMMITS_SINGLE, 1);
		stat_add(m, S_C_WRITES, tx->n_writes);
		stat_add(m, S_C_READS, tx->n_reads);
		stat_add(m, S_C_MSGS, tx->n_msgs);
	}
	count_outcome(m, outcome);
	if (tx->in_call) {
		tx->deferred_report = true; /* never before commit returns */
		return;
	}
	tx->cont(tx->tl->loop, tx->ctx, outcome);
}

/* Everything the transaction wrote is done: its records may go. */
void txn_tx_finish(farm_tx *tx)
{
	struct txloop *tl = tx->tl;
	farm_txm *m = tx->m;
	if (tx->in_call) {
		tx->deferred_finish = true;
		return;
	}
	if (tx->ph == PH_PRIMARY || tx->ph == PH_ABORT)
		for (uint32_t p = 0; p < 0x40; p++)
			if (tx->locked_at[p] && !tx->decided_at[p])
				farm_warn(
				        "txn: transaction %#" PRIx64
				        " finished "
				        "without a decision at machine %" PRIu32
				        " (phase %d, fail %d)",
				        tx->id, p, (int)tx->ph, tx->fail);
	for (unsigned i = 0; i < tx->nrecs; i++) {
		struct writer *w = &tl->w[tx->recs[i].machine];
		w->wq[tx->recs[i].seq % w->wq_cap].done = true;
	}
	for (uint32_t mach = 0; mach < m->M && mach < 0x40; mach++) {
		if (!tx->need[mach])
			continue;
		struct writer *w = &tl->w[mach];
		uint64_t left = tx->need[mach] > tx->used[mach]
		                        ? tx->need[mach] - tx->used[mach]
		                        : 0;
		w->reserved -= FARM_MIN(w->reserved, left);
		txn_maybe_truncate(tl, mach);
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
		if ((o->flags & TXO_NEW) && tx->outcome) {
			if (o->flags & TXO_ARRAY)
				(void)farm_galloc_free_array_local(
				        m->ga, tl->loop, o->a, 64ull * o->lines,
				        o->arr_n);
			else if (!(o->flags & TXO_ELEM))
				(void)farm_galloc_free_local(m->ga, tl->loop,
				                             o->a);
		}
		o->flags &= ~TXO_NEW;
	}
	tx->ph = PH_DONE;
	if (tx->released)
		txn_tx_free(tx);
}

static void phase_validate(farm_tx *tx);
static void phase_backup(farm_tx *tx);
static void phase_primary(farm_tx *tx);
static void phase_abort(farm_tx *tx, int outcome);
static void single_install(farm_tx *tx);
static void single_unlock(farm_tx *tx, unsigned upto);

/* A phase's operations are all back: go on. */
/* A phase after LOCK failed: a single-machine commit drops its shared
 * locks and reports; a distributed one writes ABORT records. */
static void tx_fail(farm_tx *tx, int fail)
{
	if (tx->single) {
		single_unlock(tx, tx->n);
		tx_report(tx, fail);
		txn_tx_finish(tx);
	} else {
		phase_abort(tx, fail);
	}
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
			phase_validate(tx);
		break;
	case PH_VALIDATE:
		if (fail) {
			tx_fail(tx, fail);
		} else if (tx->single) {
			phase_backup(tx);
		} else {
			bool any = false;
			for (unsigned i = 0; i < tx->n; i++)
				any |= is_write(&tx->o[i]);
			if (!any) { /* read-only: validated */
				tx_report(tx, 0);
				txn_tx_finish(tx);
			} else {
				phase_backup(tx);
			}
		}
		break;
	case PH_BACKUP:
		if (fail) {
			tx_fail(tx, fail);
		} else if (tx->single) {
			single_install(tx);
		} else {
			if (atomic_load(&testing_crash_after_backup))
				raise(SIGKILL); /* testing: COMMIT-BACKUP acked
				                 */
			phase_primary(tx);
		}
		break;
	case PH_PRIMARY:
		/* Reported at the first landed COMMIT-PRIMARY. */
		if (!tx->reported)
			tx_report(tx,
			          tx->committed_writes ? 0 : FARM_EPEERDEAD);
		txn_tx_finish(tx);
		break;
	case PH_ABORT: txn_tx_finish(tx); break;
	default: break;
	}
}

static void send_decisive(farm_tx *tx, uint32_t mach, int type, int kind,
                          struct decisive *d);

void txn_tx_record_done(farm_loop *loop, farm_tx *tx, int kind, uint32_t mach,
                        int status)
{
	(void)loop;
	tx->wait_writes--;
	if (kind == K_LOCK && status)
		tx->wait_replies--; /* no record, no answer */
	if ((kind == K_PRIMARY || kind == K_ABORT) && !status && mach < 0x40)
		tx->decided_at[mach] = true;
	if ((kind == K_PRIMARY || kind == K_ABORT) && status &&
	    status != FARM_EPEERDEAD) {
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
			tx_report(tx, 0);
	}
	if (status && !tx->fail && kind != K_PRIMARY && kind != K_ABORT)
		tx->fail = status == FARM_EFLUSHED ? FARM_EPEERDEAD : status;
	tx_step(tx);
}

void txn_h_reply(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct txloop *tl = loop_state(m, loop);
	struct reply r;
	if (!tl || in->len != sizeof(r)) {
		stat_add(m, S_BAD_RECORDS, 1);
		return;
	}
	memcpy(&r, in->payload, sizeof(r));
	farm_tx *tx = tl->slots[(r.txid & ((1ull << 48) - 1)) % TX_SLOTS];
	if (!tx || tx->id != r.txid || tx->ph != PH_LOCK || !tx->wait_replies)
		return; /* late (the transaction gave up) */
	tx->wait_replies--;
	if (in->src_machine != m->me)
		tx->n_msgs++;
	if (r.status && !tx->fail)
		tx->fail = r.status;
	tx_step(tx);
}

static void phase_lock(farm_tx *tx)
{
	farm_txm *m = tx->m;
	tx->ph = PH_LOCK;
	tx->deadline = farm_now_ns() + REPLY_TIMEOUT_NS;
	tx->tl->lock_waiters++;
	bool seen[0x40] = {false};
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o) || seen[o->primary])
			continue;
		seen[o->primary] = true;
		uint8_t *buf;
		size_t len;
		int rc = build_rec(tx, REC_LOCK, o->primary, 0, &buf, &len);
		if (rc) {
			tx->fail = rc;
			continue;
		}
		tx->locked_at[o->primary] = true;
		unsigned before = tx->wait_writes;
		tx_append(tx, o->primary, buf, len, K_LOCK);
		if (tx->wait_writes != before)
			tx->wait_replies++;
	}
	(void)m;
	tx_step(tx);
}

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
	tx_step(tx);
}

static void phase_validate(farm_tx *tx)
{
	farm_txm *m = tx->m;
	tx->ph = PH_VALIDATE;
	for (unsigned i = 0;
	     i < tx->n && !tx->fail && !atomic_load(&testing_skip_validation);
	     i++) {
		struct txobj *o = &tx->o[i];
		if (is_write(o) || !(o->flags & TXO_READ))
			continue;
		const _Atomic uint64_t *lp = farm_as_local_ptr(m->as, o->a, 8);
		if (lp) {
			if (atomic_load_explicit(lp, memory_order_acquire) !=
			    o->version)
				tx->fail = FARM_EVALIDATION;
			continue;
		}
		o->vbuf = arena_get(&tx->tl->ar, 64);
		if (!o->vbuf) {
			tx->fail = -ENOMEM;
			break;
		}
		memcpy(o->vbuf + 8, &tx, sizeof(tx));
		int rc = farm_as_read(m->as, tx->tl->loop, o->a, o->vbuf,
		                      tx->tl->ar.mr, 8, val_done, o);
		if (rc) {
			tx->fail = rc;
			break;
		}
		tx->n_reads++;
		tx->wait_reads++;
	}
	tx_step(tx);
}

static void phase_backup(farm_tx *tx)
{
	tx->ph = PH_BACKUP;
	bool seenp[0x40] = {false};
	for (unsigned i = 0; i < tx->n && !tx->fail; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o) || seenp[o->primary])
			continue;
		seenp[o->primary] = true;
		bool seenb[0x40] = {false};
		for (unsigned j = i; j < tx->n; j++) {
			struct txobj *q = &tx->o[j];
			if (!is_write(q) || q->primary != o->primary)
				continue;
			for (unsigned k = 1; k < q->nrep; k++) {
				uint32_t b = q->reps[k];
				if (seenb[b])
					continue;
				seenb[b] = true;
				uint8_t *buf;
				size_t len;
				int rc = build_rec(tx, REC_COMMIT_BACKUP,
				                   o->primary, b, &buf, &len);
				if (rc) {
					tx->fail = rc;
					break;
				}
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
		struct rec_hdr h = {.type = (uint16_t)type, .txid = tx->id};
		memcpy(b, &h, sizeof(h));
		unsigned before = tx->wait_writes;
		int fail = tx->fail;
		tx->fail = 0;
		tx_append(tx, mach, b, 64, kind);
		rc = tx->wait_writes != before ? 0
		                               : (tx->fail ? tx->fail : -EIO);
		tx->fail = fail;
	}
	if (!rc || rc == FARM_EPEERDEAD || rc == -ENOENT) {
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
	for (uint32_t p = 0; p < tx->m->M && p < 0x40; p++)
		if (tx->locked_at[p])
			send_decisive(tx, p, REC_COMMIT_PRIMARY, K_PRIMARY,
			              NULL);
	tx_step(tx);
}

static void phase_abort(farm_tx *tx, int outcome)
{
	tx->ph = PH_ABORT;
	tx->fail = 0;
	for (uint32_t p = 0; p < tx->m->M && p < 0x40; p++)
		if (tx->locked_at[p])
			send_decisive(tx, p, REC_ABORT, K_ABORT, NULL);
	tx_report(tx, outcome);
	tx_step(tx);
}

static _Atomic uint64_t *local_hdr(farm_tx *tx, const struct txobj *o)
{
	return farm_as_local_ptr(tx->m->as, o->a, 64ull * o->lines);
}

static void single_unlock(farm_tx *tx, unsigned upto)
{
	for (unsigned i = 0; i < upto; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o) || !o->locked)
			continue;
		_Atomic uint64_t *h = local_hdr(tx, o);
		if (h)
			atomic_store_explicit(h, o->version,
			                      memory_order_release);
		o->locked = false;
	}
}

static void single_lock(farm_tx *tx)
{
	tx->ph = PH_VALIDATE;
	for (unsigned i = 0; i < tx->n && !tx->fail; i++) {
		struct txobj *o = &tx->o[i];
		_Atomic uint64_t *h = local_hdr(tx, o);
		if (!h) {
			tx->fail = -EINVAL;
			break;
		}
		if (!is_write(o)) {
			if (atomic_load_explicit(h, memory_order_acquire) !=
			    o->version)
				tx->fail = FARM_EVALIDATION;
			continue;
		}
		const struct farm_objhdr *oh = (const void *)h;
		if (farm_objhdr_load_incarn(oh) != o->incarn) {
			tx->fail = FARM_EFREED;
			break;
		}
		uint64_t expect = o->version;
		if (!atomic_compare_exchange_strong_explicit(
		            h, &expect, o->version | OBJ_LOCK_SHARED,
		            memory_order_acq_rel, memory_order_acquire)) {
			tx->fail = FARM_ECONFLICT;
			break;
		}
		o->locked = true;
	}
	tx_step(tx); /* PH_VALIDATE: unlock on failure, else backups */
}

static void single_install(farm_tx *tx)
{
	farm_txm *m = tx->m;
	/* Every written object exclusive before the first is installed: a
	 * shared lock lets lock-free readers through, and they must not see
	 * one object installed and another one still as it was. */
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (is_write(o))
			atomic_store_explicit(local_hdr(tx, o),
			                      o->version | OBJ_LOCK_EXCL,
			                      memory_order_seq_cst);
	}
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o))
			continue;
		uint8_t *p = (uint8_t *)local_hdr(tx, o);
		uint64_t nv = o->version + OBJ_VSTEP;
		obj_install_locked(p, o->lines, o->img, nv);
		stat_add(m, S_INSTALLS, 1);
		if ((o->flags & TXO_FREE) &&
		    (o->flags & (TXO_ARRAY | TXO_ELEM)))
			continue; /* freed whole below, then unlocked */
		if (o->flags & TXO_FREE) {
			/* Under the lock: see obj_install_locked. */
			int rc = farm_galloc_free_local(m->ga, tx->tl->loop,
			                                o->a);
			if (rc)
				farm_warn("txn: free at commit: %s",
				          farm_strerror(rc));
		}
		atomic_store_explicit((_Atomic uint64_t *)(void *)p, nv,
		                      memory_order_release);
		o->locked = false;
	}
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if ((o->flags & (TXO_FREE | TXO_ARRAY)) !=
		    (TXO_FREE | TXO_ARRAY))
			continue;
		int rc = farm_galloc_free_array_local(
		        m->ga, tx->tl->loop, o->a, 64ull * o->lines, o->arr_n);
		if (rc)
			farm_warn("txn: array free at commit: %s",
			          farm_strerror(rc));
	}
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o) || !(o->flags & TXO_FREE) ||
		    !(o->flags & (TXO_ARRAY | TXO_ELEM)))
			continue;
		atomic_store_explicit(local_hdr(tx, o), o->version + OBJ_VSTEP,
		                      memory_order_release);
		o->locked = false;
	}
	tx_report(tx, 0);
	txn_tx_finish(tx);
}

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
		txn_tx_finish(tx);
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

static void tx_start_phases(farm_tx *tx)
{
	if (tx->single)
		single_lock(tx);
	else
		phase_lock(tx);
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
		memset(tx->need, 0, sizeof(tx->need));
		tx_report(tx, status);
		txn_tx_finish(tx);
		return;
	}
	txn_tx_reserve(tx);
}

void txn_tx_reserve(farm_tx *tx)
{
	farm_txm *m = tx->m;
	struct txloop *tl = tx->tl;
	bool ok = true, reading = false;
	for (uint32_t mach = 0; mach < m->M && mach < 0x40; mach++) {
		if (!tx->need[mach])
			continue;
		struct writer *w = &tl->w[mach];
		if (!has_room(m, w, tx->need[mach])) {
			wq_pop_done(w);
			txn_refresh_freed(tl, mach);
			if (!has_room(m, w, tx->need[mach])) {
				txn_maybe_truncate(tl, mach);
				ok = false;
				reading |= w->reading;
			}
		}
	}
	if (!ok) {
		if (!tx->space_tries++) {
			stat_add(m, S_LOG_FULL, 1);
			tx->deadline = farm_now_ns() + SPACE_WAIT_NS;
		}
		tx->ph = PH_RESERVE;
		if (farm_now_ns() > tx->deadline) {
			memset(tx->need, 0, sizeof(tx->need));
			tx_report(tx, -ENOSPC);
			txn_tx_finish(tx);
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
	for (uint32_t mach = 0; mach < m->M && mach < 0x40; mach++)
		tl->w[mach].reserved += tx->need[mach];
	tx_start_phases(tx);
}

int farm_tx_commit(farm_tx *tx, farm_tx_commit_fn cont, void *ctx)
{
	if (!tx || !cont)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	if (tx->reads_out)
		return -EBUSY;
	farm_txm *m = tx->m;
	tx->cont = cont;
	tx->ctx = ctx;
	unsigned nw = 0;
	bool single = true;
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		o->nrep = farm_as_replicas(m->as, farm_gaddr_region(o->a),
		                           o->reps);
		if (!o->nrep || o->reps[0] >= 0x40 || o->reps[0] >= m->M)
			return -EINVAL;
		o->primary = o->reps[0];
		single &= o->primary == m->me;
		if (is_write(o))
			nw++;
	}
	tx->single = single && nw > 0;
	if (nw == 0) {
		/* Read-only: one object needs nothing more (the read was
		 * consistent); several are validated. */
		tx->in_call = true;
		if (tx->n <= 1) {
			tx->ph = PH_VALIDATE;
			tx_report(tx, 0);
			txn_tx_finish(tx);
		} else {
			phase_validate(tx);
		}
		return tx_leave_call(tx);
	}
	/* After-images. */
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o))
			continue;
		o->img = arena_get(&tx->tl->ar, 64ull * o->lines);
		if (!o->img)
			return -ENOMEM;
		obj_pack(o->img, o->lines, o->data, o->size,
		         o->version + OBJ_VSTEP, new_incarn(o));
	}
	/* Log room: LOCK + COMMIT-PRIMARY/ABORT at each primary (not for a
	 * single-machine commit), COMMIT-BACKUP at each backup. */
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o))
			continue;
		uint32_t p = o->primary;
		if (!tx->single && !tx->need[p])
			tx->need[p] += rec_bytes(tx, REC_LOCK, p, 0, NULL) + 64;
	}
	bool seenp[0x40] = {false};
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!is_write(o) || seenp[o->primary])
			continue;
		seenp[o->primary] = true;
		bool seenb[0x40] = {false};
		for (unsigned j = i; j < tx->n; j++) {
			struct txobj *q = &tx->o[j];
			if (!is_write(q) || q->primary != o->primary)
				continue;
			for (unsigned k = 1; k < q->nrep; k++) {
				uint32_t b = q->reps[k];
				if (b >= 0x40 || seenb[b])
					continue;
				seenb[b] = true;
				tx->need[b] += rec_bytes(tx, REC_COMMIT_BACKUP,
				                         o->primary, b, NULL);
			}
		}
	}
	for (uint32_t mach = 0; mach < m->M && mach < 0x40; mach++)
		if (tx->need[mach] && mach != m->me &&
		    !atomic_load_explicit(&m->peer_ready[mach],
		                          memory_order_acquire))
			return FARM_EPEERDEAD; /* we cannot write its log */
	for (uint32_t mach = 0; mach < m->M && mach < 0x40; mach++)
		if (tx->need[mach] > m->R / 2)
			return -E2BIG; /* more than half a log: never fits */
	tx->ph = PH_RESERVE;
	tx->in_call = true;
	txn_tx_reserve(tx);
	return tx_leave_call(tx);
}

/* Transactions waiting for lock replies past their deadline give up. */
void txn_scan_deadlines(struct txloop *tl)
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

struct txepoch {
	farm_txm *m;
	uint64_t reclaimed;
	farm_op_fn cont;
	void *ctx;
};

static void txm_epoch_done(farm_loop *loop, void *ctx, int status)
{
	struct txepoch *e = ctx;
	farm_txm *m = e->m;
	stat_add(m, status ? S_EPOCHS_FAILED : S_EPOCHS, 1);
	stat_add(m, S_EPOCH_RECLAIMED, e->reclaimed);
	farm_op_fn cont = e->cont;
	void *cctx = e->ctx;
	free(e);
	cont(loop, cctx, status);
}

int farm_txm_epoch(farm_txm *m, farm_loop *loop, farm_op_fn cont, void *ctx)
{
	if (!loop_state(m, loop) || !cont)
		return -EINVAL;
	uint32_t peers[0x40];
	unsigned np = 0;
	unsigned n = atomic_load_explicit(&m->nready, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (m->ready_ids[i] != m->me)
			peers[np++] = m->ready_ids[i];
	struct txepoch *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	*e = (struct txepoch){.m = m, .cont = cont, .ctx = ctx};
	int rc = farm_epoch_run(loop, peers, np, 5000000000ull,
	                        farm_galloc_blockalloc(m->ga), &e->reclaimed,
	                        txm_epoch_done, e);
	if (rc)
		free(e);
	return rc;
}

static void epoch_auto_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	farm_txm *m = ctx;
	m->epoch_running = false;
	if (status)
		farm_info("txn: background epoch failed (%s); retired memory "
		          "waits for the next",
		          farm_strerror(status));
}

/* Loop 0, every few thousand passes: when free blocks are low and some are
 * retired, start an epoch in the background. */
static void epoch_maybe_start(struct txloop *tl)
{
	farm_txm *m = tl->m;
	if (m->epoch_running || !m->epoch_free_pct)
		return;
	uint64_t now = farm_now_ns();
	if (now - m->epoch_last_check < 10000000ull)
		return;
	m->epoch_last_check = now;
	uint64_t total, in_use, retired;
	farm_blockalloc_blocks(farm_galloc_blockalloc(m->ga), &total, &in_use,
	                       &retired);
	if (!retired)
		return;
	uint64_t free_blocks = total - in_use - retired;
	if (free_blocks * 100 >= total * m->epoch_free_pct &&
	    retired * 100 < total * m->epoch_free_pct)
		return;
	m->epoch_running = true;
	if (farm_txm_epoch(m, tl->loop, epoch_auto_done, m))
		m->epoch_running = false;
}

int farm_txm_epoch_sync(farm_txm *m, farm_loop *loop)
{
	struct sync_res r = {0};
	int rc = farm_txm_epoch(m, loop, sync_op_cb, &r);
	return rc ? rc : wait_loop(loop, &r);
}

static int txn_poll_all(farm_loop *loop, void *ctx)
{
	struct txloop *tl = ctx;
	int got = txn_poll(loop, ctx);
	if (tl->lock_waiters && (++tl->rand & 1023) == 0)
		txn_scan_deadlines(tl);
	farm_epoch_quiesce();
	if (tl->t == 0 && (++tl->epoch_tick & 4095) == 0)
		epoch_maybe_start(tl);
	return got;
}

int farm_txm_create(farm_fabric *fab, farm_msg *msg, farm_as *as,
                    farm_galloc *ga, const struct farm_txm_attr *attr,
                    farm_txm **out)
{
	if (!fab || !msg || !as || !ga || !out)
		return -EINVAL;
	struct farm_txm_attr a = attr ? *attr : (struct farm_txm_attr){0};
	if (!a.log_size)
		a.log_size = DEFAULT_LOG;
	if (!farm_is_pow2(a.log_size) || a.log_size < (64u << 10) ||
	    a.log_size > (64u << 20))
		return -EINVAL;
	if (!a.arena_size)
		a.arena_size = DEFAULT_ARENA;
	if (!a.lf_bound_ns)
		a.lf_bound_ns = 1000000ull;
	if (a.epoch_free_pct > 100 && a.epoch_free_pct != FARM_TXM_EPOCH_MANUAL)
		return -EINVAL;
	farm_txm *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->fab = fab;
	m->msg = msg;
	m->as = as;
	m->ga = ga;
	m->me = farm_msg_machine_id(msg);
	m->T = farm_msg_nthreads(msg);
	m->M = FARM_MIN(farm_msg_max_machines(msg), 0x40u);
	m->R = a.log_size;
	m->lf_bound = a.lf_bound_ns;
	m->arena_size = a.arena_size;
	m->epoch_free_pct = a.epoch_free_pct ? a.epoch_free_pct : 25;
	if (a.epoch_free_pct == FARM_TXM_EPOCH_MANUAL)
		m->epoch_free_pct = 0;
	pthread_mutex_init(&m->peer_lock, NULL);
	/* The read bound in ticks: calibrate the tick against the clock. */
	uint64_t c0 = farm_cycles(), t0 = farm_now_ns(), t1;
	while ((t1 = farm_now_ns()) - t0 < 2000000)
		farm_cpu_relax();
	uint64_t c1 = farm_cycles();
	double per_ns = (double)(c1 - c0) / (double)(t1 - t0);
	m->lf_bound_cycles =
	        (uint64_t)((double)m->lf_bound * (per_ns > 0 ? per_ns : 1));
	if (m->T > MAX_LOOPS || m->me >= m->M) {
		free(m);
		return -EINVAL;
	}
	uint64_t nlogs = (uint64_t)m->M * m->T;
	m->hdr_area = (64 + nlogs * 64 + 4095) & ~4095ull;
	uint64_t total = m->hdr_area + nlogs * m->R;
	m->peers = calloc(m->M, sizeof(*m->peers));
	m->peer_ready = calloc(m->M, sizeof(*m->peer_ready));
	int rc = m->peers && m->peer_ready ? 0 : -ENOMEM;
	if (!rc)
		rc = farm_mem_alloc(fab, (size_t)total, 0, &m->logmem);
	if (!rc)
		rc = farm_mr_reg(fab, farm_mem_addr(m->logmem), (size_t)total,
		                 FARM_ACCESS_LOCAL | FARM_ACCESS_REMOTE_READ |
		                         FARM_ACCESS_REMOTE_WRITE,
		                 &m->logmr);
	if (!rc)
		rc = farm_msg_handle(msg, FARM_MSGT_TX_REPLY, txn_h_reply, m);
	if (!rc)
		rc = farm_epoch_handle(msg);
	if (!rc && !(rc = farm_epoch_domain_get()))
		m->epoch_domain = true;
	if (rc) {
		farm_err("txn: cannot set up logs (%" PRIu64 " bytes): %s",
		         total, farm_strerror(rc));
		farm_txm_destroy(m);
		return rc;
	}
	m->logbase = farm_mem_addr(m->logmem);
	struct log_super sb = {.magic = LOG_SUPER_MAGIC,
	                       .layout = 1,
	                       .machine = m->me,
	                       .M = m->M,
	                       .T = m->T,
	                       .R = m->R,
	                       .hdr_area = m->hdr_area,
	                       .total = total};
	memcpy(m->logbase, &sb, sizeof(sb));
	if ((rc = farm_mem_persist(m->logmem, m->logbase, sizeof(sb))))
		farm_warn("txn: cannot make the log superblock durable: %s",
		          farm_strerror(rc));
	m->logdesc = farm_mr_describe(m->logmr);
	m->peers[m->me] = m->logdesc;
	atomic_store(&m->peer_ready[m->me], 1);
	m->ready_ids[0] = m->me;
	atomic_store(&m->nready, 1);
	*out = m;
	return 0;
}

void farm_txm_destroy(farm_txm *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < MAX_LOOPS; i++)
		if (m->loops[i])
			farm_warn("txn: loop %u still attached at destroy", i);
	if (m->logmr)
		farm_mr_dereg(m->logmr);
	if (m->logmem)
		farm_mem_free(m->logmem);
	if (m->epoch_domain)
		farm_epoch_domain_put();
	free(m->peers);
	free(m->peer_ready);
	free(m);
}

farm_mr_desc farm_txm_log_desc(const farm_txm *m)
{
	return m ? m->logdesc : (farm_mr_desc){0};
}

int farm_txm_add_peer(farm_txm *m, uint32_t id, const farm_mr_desc *logs)
{
	if (!m || !logs || id >= m->M || id == m->me)
		return -EINVAL;
	uint64_t nlogs = (uint64_t)m->M * m->T;
	if (logs->len != m->hdr_area + nlogs * m->R)
		return -EINVAL; /* another log size or thread count */
	farm_mr_desc d = *logs;
	d.machine = id;
	pthread_mutex_lock(&m->peer_lock);
	int rc = 0;
	if (atomic_load(&m->peer_ready[id])) {
		rc = memcmp(&m->peers[id], &d, sizeof(d)) ? -EEXIST : 0;
	} else {
		m->peers[id] = d;
		atomic_store_explicit(&m->peer_ready[id], 1,
		                      memory_order_release);
		unsigned n =
		        atomic_load_explicit(&m->nready, memory_order_relaxed);
		m->ready_ids[n] = id;
		atomic_store_explicit(&m->nready, n + 1, memory_order_release);
	}
	pthread_mutex_unlock(&m->peer_lock);
	return rc;
}

int farm_txm_attach(farm_txm *m, farm_loop *loop)
{
	if (!m || !loop)
		return -EINVAL;
	unsigned t = farm_loop_index(loop);
	if (t >= m->T || m->loops[t])
		return -EINVAL;
	struct txloop *tl = calloc(1, sizeof(*tl));
	if (!tl)
		return -ENOMEM;
	tl->m = m;
	tl->loop = loop;
	tl->t = t;
	tl->rand = farm_now_ns() ^ ((uint64_t)m->me << 32) ^ t;
	tl->slots = calloc(TX_SLOTS, sizeof(*tl->slots));
	tl->w = calloc(m->M, sizeof(*tl->w));
	tl->r = calloc(m->M, sizeof(*tl->r));
	int rc = tl->slots && tl->w && tl->r ? 0 : -ENOMEM;
	for (uint32_t i = 0; !rc && i < m->M; i++)
		if (!(tl->w[i].wq = calloc(WQ_CAP, sizeof(struct wq_ent))))
			rc = -ENOMEM;
		else
			tl->w[i].wq_cap = WQ_CAP;
	if (!rc) {
		tl->ar.size = m->arena_size;
		tl->ar.base = aligned_alloc(4096, tl->ar.size);
		rc = tl->ar.base ? farm_mr_reg(m->fab, tl->ar.base, tl->ar.size,
		                               FARM_ACCESS_LOCAL, &tl->ar.mr)
		                 : -ENOMEM;
	}
	bool entered = false;
	if (!rc && !(rc = farm_epoch_thread_enter(loop)))
		entered = true;
	if (!rc)
		rc = farm_loop_add_poller(loop, txn_poll_all, txn_pending, tl);
	if (rc) {
		if (entered)
			farm_epoch_thread_leave(loop);
		if (tl->ar.mr)
			farm_mr_dereg(tl->ar.mr);
		free(tl->ar.base);
		for (uint32_t i = 0; tl->w && i < m->M; i++)
			free(tl->w[i].wq);
		free(tl->w);
		free(tl->r);
		free(tl->slots);
		free(tl);
		return rc;
	}
	m->loops[t] = tl;
	return 0;
}

void farm_txm_detach(farm_txm *m, farm_loop *loop)
{
	struct txloop *tl = loop_state(m, loop);
	if (!tl)
		return;
	/* Completions of log WRITEs (a commit is reported at its first
	 * COMMIT-PRIMARY; TRUNC records) and freed-word READs still to come
	 * use this state: let them land first. The loop's close would run
	 * them (cancelled) after we freed it. */
	uint64_t dl = farm_now_ns() + 2000000000ull;
	while (tl->inflight && farm_now_ns() < dl)
		(void)farm_loop_poll(loop);
	if (tl->inflight) {
		farm_warn("txn: loop %u detached with %u log operations in "
		          "flight: its state is leaked",
		          tl->t, tl->inflight);
		m->loops[tl->t] = NULL;
		farm_epoch_thread_leave(loop);
		return;
	}
	for (unsigned i = 0; i < TX_SLOTS; i++)
		if (tl->slots[i])
			farm_warn(
			        "txn: loop %u detached with a transaction open",
			        tl->t);
	for (unsigned b = 0; b < LOCK_BUCKETS; b++)
		while (tl->locks[b]) {
			struct lock_ent *e = tl->locks[b];
			tl->locks[b] = e->next;
			free(e);
		}
	stat_add(m, S_LF_READS, atomic_load(&tl->c_lf_reads));
	stat_add(m, S_LF_RETRIES, atomic_load(&tl->c_lf_retries));
	stat_add(m, S_TX_READS, atomic_load(&tl->c_tx_reads));
	m->loops[tl->t] = NULL;
	while (tl->rd_free_list) {
		struct rd_op *op = tl->rd_free_list;
		tl->rd_free_list = op->next_free;
		free(op);
	}
	farm_mr_dereg(tl->ar.mr);
	free(tl->ar.base);
	for (uint32_t i = 0; i < m->M; i++)
		free(tl->w[i].wq);
	free(tl->w);
	free(tl->r);
	free(tl->slots);
	m->loops[tl->t] = NULL;
	free(tl);
	farm_epoch_thread_leave(loop);
}

void farm_txm_stats_get(farm_txm *m, farm_txm_stats *out)
{
	if (!m || !out)
		return;
	uint64_t v[32];
	for (int i = 0; i < 32; i++)
		v[i] = atomic_load_explicit(&m->st.v[i], memory_order_relaxed);
	/* Loops' own counters (not while a loop detaches). */
	for (unsigned i = 0; i < MAX_LOOPS; i++) {
		struct txloop *tl = m->loops[i];
		if (!tl)
			continue;
		v[S_LF_READS] += atomic_load_explicit(&tl->c_lf_reads,
		                                      memory_order_relaxed);
		v[S_LF_RETRIES] += atomic_load_explicit(&tl->c_lf_retries,
		                                        memory_order_relaxed);
		v[S_TX_READS] += atomic_load_explicit(&tl->c_tx_reads,
		                                      memory_order_relaxed);
	}
	*out = (farm_txm_stats){.commits = v[S_COMMITS],
	                        .commits_single = v[S_COMMITS_SINGLE],
	                        .aborts_conflict = v[S_AB_CONFLICT],
	                        .aborts_validation = v[S_AB_VALIDATION],
	                        .aborts_failure = v[S_AB_FAILURE],
	                        .aborts_nospace = v[S_AB_NOSPACE],
	                        .aborts_freed = v[S_AB_FREED],
	                        .lf_reads = v[S_LF_READS],
	                        .lf_retries = v[S_LF_RETRIES],
	                        .tx_reads = v[S_TX_READS],
	                        .commit_writes = v[S_C_WRITES],
	                        .commit_reads = v[S_C_READS],
	                        .commit_msgs = v[S_C_MSGS],
	                        .log_full = v[S_LOG_FULL],
	                        .truncates = v[S_TRUNCATES],
	                        .locks_granted = v[S_LOCKS_OK],
	                        .locks_refused = v[S_LOCKS_REFUSED],
	                        .installs = v[S_INSTALLS],
	                        .backup_applies = v[S_BACKUP_APPLIES],
	                        .bad_records = v[S_BAD_RECORDS],
	                        .epochs = v[S_EPOCHS],
	                        .epochs_failed = v[S_EPOCHS_FAILED],
	                        .epoch_blocks_reclaimed = v[S_EPOCH_RECLAIMED]};
}

void farm_txn_testing_crash_after_backup(bool on)
{
	atomic_store(&testing_crash_after_backup, on);
}

void farm_txn_testing_skip_validation(bool on)
{
	atomic_store(&testing_skip_validation, on);
}
