/*
 * Reads (NSDI'14 sections 3.4-3.5): one read of an object's lines, local
 * (a copy) or remote (one one-sided READ), checked for consistency
 * (object.h: obj_check) and retried with backoff while it is being
 * installed. Lock-free reads (farm_lf_*) end there; a transaction's reads
 * add the object, its version and incarnation to the read set
 * (farm_tx_read*, farm_tx_read_local).
 */
#include <errno.h>
#include <sched.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/epoch.h"
#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/txn_testing.h"
#include "util/lines.h"

#define READ_TRIES 4096u
/* A read retried READ_TRIES times gives up with -EBUSY only once it has
 * also been retrying this long. A count alone expired within a few
 * milliseconds when the process holding the lock was preempted on a
 * loaded host; a lock is
 * held for one install, microseconds, unless its holder is descheduled
 * or dead, and a dead holder is recovery's to clear. */
#define READ_BUSY_NS (1000ull * 1000000ull)

#define LINE_TRIES 1000u

static void rd_start(struct rd_op *op);

static void rd_finish_post(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct rd_op *op = ctx;
	if (status)
		op->status = status;
	op->done(op);
}

static void rd_again_post(farm_loop *loop, void *ctx, int status);

static void rd_retry(struct rd_op *op)
{
	txl_count(op->tl, S_LF_RETRIES, 1);
	uint64_t now = farm_now_ns();
	if (!op->busy_t0)
		op->busy_t0 = now;
	if (++op->tries >= READ_TRIES && now - op->busy_t0 >= READ_BUSY_NS) {
		op->status = -EBUSY;
		op->done(op);
		return;
	}
	/* Randomized backoff for the first few tries: spin a random number
	 * of pauses. After that, retry from a later loop pass instead: the
	 * lock may be one that only this loop's poller can release (a LOCK
	 * or COMMIT-PRIMARY waiting in a log this loop serves). And give the
	 * core away once per pass instead of spinning: a lock held that
	 * long is released by another machine's loop, which on a host with
	 * more loops than cores may be waiting for this very core (spinning
	 * here up to 2^10 pauses a pass took a third of SmallBank's CPU and
	 * kept the holders from running). With a core to itself, the yield
	 * returns at once. */
	if (op->tries <= 4) {
		uint64_t spins =
		        farm_rand64(&op->tl->rand) & ((1ull << op->tries) - 1);
		for (uint64_t i = 0; i < spins; i++)
			farm_cpu_relax();
	} else {
		(void)sched_yield();
		if (farm_loop_defer(op->tl->loop, rd_again_post, op) == 0)
			return;
	}
	rd_start(op);
}

/* A deferred retry: start the read again (no extra try counted). */
static void rd_again_post(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct rd_op *op = ctx;
	if (status) {
		op->status = status;
		op->done(op);
		return;
	}
	rd_start(op);
}

/* The image read of an array range: each element. */
static int rd_validate_array(struct rd_op *op)
{
	unsigned el = op->lines / op->nel;
	for (unsigned k = 0; k < op->nel; k++) {
		uint64_t v, w;
		int rc = obj_check(op->img + 64ull * el * k, el, op->want, &v,
		                   &w);
		if (rc)
			return rc;
		if (!k) {
			op->version = v;
			op->incarn = w;
		}
	}
	return 0;
}

/* The image read: one object (inline: every read checks one), or each
 * element of an array range. */
static inline int rd_validate(struct rd_op *op)
{
	if (op->nel <= 1)
		return obj_check(op->img, op->lines, op->want, &op->version,
		                 &op->incarn);
	return rd_validate_array(op);
}

/* Whether the configuration changed since the copy was resolved (after
 * the copy: the fence orders its loads before the id's). A view can move
 * a region's primary while its old copy lives on (growth demotes it,
 * addrspace.h), and the new primary commits only once every machine has
 * taken the view (recovery's barrier): a copy resolved and made in one
 * configuration saw nothing of the next, so it is read again. */
static bool rd_moved(const struct rd_op *op)
{
	/* Pairs with the release store of the id when a configuration is
	 * installed (as_view.c). */
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(op->tl->m->as_cfg, memory_order_acquire) !=
	       op->cfg;
}

/* lf_remote_done makes these checks, and rd_remote_done's, inline for a
 * lock-free read of one object: a check added here goes there too. */
static void rd_check(struct rd_op *op)
{
	int rc = rd_validate(op);
	if (rc == -EAGAIN || (!rc && rd_moved(op))) {
		rd_retry(op);
		return;
	}
	/* Checked after the copy: a machine paused past its lease (it may
	 * have been removed, its regions promoted elsewhere) must not
	 * return what it read. */
	if (!rc && !txn_serving(op->tl->m))
		rc = txn_not_serving(op->tl->m);
	op->status = rc;
	op->done(op);
}

static void rd_remote_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct rd_op *op = ctx;
	if (status == FARM_EFLUSHED) { /* an earlier operation failed */
		rd_retry(op);
		return;
	}
	if (status) {
		op->status = status;
		op->done(op);
		return;
	}
	/* A read slower than the bound could have straddled 2^14 commits
	 * of the object, wrapping the 16-bit line versions unseen. */
	if (farm_cycles() - op->t0 > op->tl->m->lf_bound_cycles) {
		rd_retry(op);
		return;
	}
	rd_check(op);
}

static void lf_remote_done(farm_loop *loop, void *ctx, int status);
static void lf_done(struct rd_op *op);

/* A read's copy or READ. Inline into farm_lf_read (a lock-free read's
 * first try, where a call's saves and restores showed), called through
 * rd_start everywhere else. */
static inline __attribute__((always_inline)) void
rd_start_inline(struct rd_op *op, farm_op_fn cb)
{
	struct txloop *tl = op->tl;
	farm_txm *m = tl->m;
	uint64_t len = 64ull * op->lines;
	uint8_t *p = NULL;
	farm_mr_desc d;
	/* Acquire: pairs with the release store of the id when a
	 * configuration is installed (as_view.c); read before the copy is
	 * resolved, as rd_moved reads it after the copy. */
	op->cfg = atomic_load_explicit(m->as_cfg, memory_order_acquire);
	int rc = farm_as_resolve_cached(m->as, &tl->rc, op->a, len, &p, &d);
	if (!rc && p) {
		if (!farm_lines_copy(op->img, p, len, LINE_TRIES)) {
			rd_retry(op);
			return;
		}
		rc = rd_validate(op);
		if (rc == -EAGAIN || (!rc && rd_moved(op))) {
			rd_retry(op);
			return;
		}
		if (!rc && !txn_serving(m))
			rc = txn_not_serving(m); /* see rd_check */
		op->status = rc;
		/* Never complete inline: the caller may not be ready. */
		if (farm_loop_defer(tl->loop, rd_finish_post, op)) {
			op->status = -ENOMEM;
			op->done(op);
		}
		return;
	}
	op->t0 = farm_cycles();
	if (!rc) {
		/* The primary's descriptor is cached: one READ, posted here. */
		farm_wr wr = farm_wr_read(0, op->img, tl->ar.mr, (uint32_t)len,
		                          &d, farm_gaddr_offset(op->a));
		rc = farm_loop_rdma(tl->loop, d.machine, &wr, cb, op);
	} else if (rc == -EAGAIN) {
		rc = farm_as_read(m->as, tl->loop, op->a, op->img, tl->ar.mr,
		                  (uint32_t)len, cb, op);
	}
	if (rc == -EAGAIN) { /* the endpoint drains after a failure */
		rd_retry(op);
		return;
	}
	if (rc) {
		op->status = rc;
		if (farm_loop_defer(tl->loop, rd_finish_post, op))
			op->done(op);
	}
}

/* @cb: a lock-free read of one object completes in lf_remote_done
 * (checks and copy out in one callback), everything else in
 * rd_remote_done. */
static void rd_start(struct rd_op *op)
{
	rd_start_inline(op, op->done == lf_done && op->nel <= 1
	                            ? lf_remote_done
	                            : rd_remote_done);
}

/* A read record from the loop's free list (rd_put gives it back), only
 * its loop and link set; NULL out of memory. */
static struct rd_op *rd_get(struct txloop *tl)
{
	struct rd_op *op = tl->rd_free_list;
	if (op)
		tl->rd_free_list = op->next_free;
	else if (!(op = malloc(sizeof(*op))))
		return NULL;
	op->tl = tl;
	op->next_free = NULL;
	return op;
}

static void rd_put(struct rd_op *op)
{
	struct txloop *tl = op->tl;
	op->next_free = tl->rd_free_list;
	tl->rd_free_list = op;
}

/* Begin a read of @lines lines at @a into a fresh arena image. Inline:
 * out of line, its calls and stores cost a lock-free read about 80
 * instructions. */
static inline __attribute__((always_inline)) struct rd_op *
rd_new(struct txloop *tl, farm_gaddr a, uint32_t size, uint64_t want,
       void (*done)(struct rd_op *), void *ctx, int *rc)
{
	farm_txm *m = tl->m;
	unsigned lines = obj_lines(size);
	if (!lines || !farm_gaddr_valid(a, 64ull * lines, m->region_size) ||
	    farm_gaddr_offset(a) % 64) {
		*rc = -EINVAL;
		return NULL;
	}
	struct rd_op *op = rd_get(tl);
	uint8_t *img = op ? arena_get(&tl->ar, 64ull * lines) : NULL;
	if (!img) {
		if (op)
			rd_put(op);
		*rc = -ENOMEM;
		return NULL;
	}
	/* Field by field: clearing the whole record (with its caller's
	 * context) showed up on the read path. */
	op->a = a;
	op->size = size;
	op->lines = lines;
	op->want = want;
	op->img = img;
	op->tries = 0;
	op->t0 = 0;
	op->busy_t0 = 0;
	op->status = 0;
	op->version = op->incarn = 0;
	op->ep = 0;
	op->nel = 1;
	op->done = done;
	op->ctx = ctx;
	op->ctx2 = NULL;
	op->lf.version_out = NULL;
	*rc = 0;
	return op;
}

static void rd_free(struct rd_op *op)
{
	arena_put(&op->tl->ar, op->img, 64ull * op->lines);
	rd_put(op);
}

/* ---- lock-free reads --------------------------------------------------- */

/* A lock-free read's end: the object out to the caller's buffer (when
 * read), the record and image back, the epoch count ended, then the
 * caller's continuation. Inline into lf_remote_done, a read's usual end. */
static inline __attribute__((always_inline)) void lf_finish(struct rd_op *op)
{
	struct lf_ctx *c = &op->lf;
	if (!op->status && op->nel > 1) {
		unsigned el = op->lines / op->nel;
		for (unsigned k = 0; k < op->nel; k++)
			obj_unpack(op->img + 64ull * el * k, op->size,
			           (uint8_t *)c->buf + (size_t)op->size * k);
	} else if (!op->status) {
		obj_unpack(op->img, op->size, c->buf);
		if (c->version_out)
			*c->version_out = op->version;
	}
	txl_count(op->tl, S_LF_READS, 1);
	farm_op_fn cont = c->cont;
	void *ctx = c->ctx;
	int st = op->status;
	farm_loop *loop = op->tl->loop;
	unsigned ep = op->ep;
	rd_free(op);
	farm_epoch_op_end(ep);
	cont(loop, ctx, st);
}

static void lf_done(struct rd_op *op)
{
	lf_finish(op);
}

/* A lock-free read's READ of one object completed: the checks of
 * rd_remote_done and rd_check in their order (the 1 ms bound, the
 * header and line versions, the configuration id after the copy, the
 * lease), and when all pass, the end in this callback. Anything else
 * (an error, a retry, a failed check) takes the general path, which
 * makes every check again. */
static void lf_remote_done(farm_loop *loop, void *ctx, int status)
{
	struct rd_op *op = ctx;
	farm_txm *m = op->tl->m;
	if (FARM_LIKELY(!status &&
	                farm_cycles() - op->t0 <= m->lf_bound_cycles &&
	                !obj_check(op->img, op->lines, op->want, &op->version,
	                           &op->incarn) &&
	                !rd_moved(op) && txn_serving(m))) {
		op->status = 0;
		lf_finish(op);
		return;
	}
	rd_remote_done(loop, ctx, status);
}

int farm_lf_read(farm_txm *m, farm_loop *loop, farm_gaddr a, uint32_t size,
                 uint64_t want_incarnation, void *buf, farm_op_fn cont,
                 void *ctx)
{
	struct txloop *tl = loop_state(m, loop);
	if (!tl || !buf || !cont)
		return -EINVAL;
	int rc;
	struct rd_op *op =
	        rd_new(tl, a, size, want_incarnation, lf_done, NULL, &rc);
	if (!op)
		return rc;
	op->lf = (struct lf_ctx){.buf = buf, .cont = cont, .ctx = ctx};
	op->ep = farm_epoch_op_begin();
	rd_start_inline(op, lf_remote_done);
	return 0;
}

int farm_lf_read_array(farm_txm *m, farm_loop *loop, farm_fatptr first,
                       uint32_t from, uint32_t count, void *buf,
                       farm_op_fn cont, void *ctx)
{
	struct txloop *tl = loop_state(m, loop);
	if (!tl || !buf || !cont || !count)
		return -EINVAL;
	unsigned el = obj_lines(first.size);
	if (!el)
		return first.size ? -E2BIG : -EINVAL;
	if ((uint64_t)el * count > FARM_ALLOC_MAX_OBJECT / 64)
		return -E2BIG; /* one READ of at most 1 MiB */
	uint64_t stride = 64ull * el;
	farm_gaddr a = first.addr + stride * from;
	if (!farm_gaddr_valid(a, stride * count, m->region_size) ||
	    farm_gaddr_region(a) != farm_gaddr_region(first.addr))
		return -EINVAL;
	int rc;
	struct rd_op *op = rd_new(tl, a, first.size, first.incarnation, lf_done,
	                          NULL, &rc);
	if (!op)
		return rc;
	if (count > 1) {
		uint8_t *img = arena_get(&tl->ar, stride * count);
		if (!img) {
			rd_free(op);
			return -ENOMEM;
		}
		arena_put(&tl->ar, op->img, 64ull * op->lines);
		op->img = img;
		op->lines = el * count;
		op->nel = count;
	}
	op->lf = (struct lf_ctx){.buf = buf, .cont = cont, .ctx = ctx};
	op->ep = farm_epoch_op_begin();
	rd_start(op);
	return 0;
}

bool farm_txm_loop_attached(farm_txm *m, farm_loop *loop)
{
	return loop_state(m, loop) != NULL;
}

int farm_lf_begin(farm_txm *m, farm_loop *loop, farm_lf_op *op)
{
	if (!loop_state(m, loop) || !op)
		return -EINVAL;
	farm_lf_begin_attached(op);
	return 0;
}

void farm_lf_end(farm_lf_op *op)
{
	if (op)
		farm_lf_end_inline(op);
}

int farm_lf_read_sync(farm_txm *m, farm_loop *loop, farm_gaddr a, uint32_t size,
                      uint64_t want_incarnation, void *buf)
{
	if (!farm_loop_can_wait(loop))
		return loop ? -EDEADLK : -EINVAL;
	struct sync_res r = {0};
	int rc = farm_lf_read(m, loop, a, size, want_incarnation, buf,
	                      sync_op_cb, &r);
	if (rc)
		return rc;
	return wait_loop(loop, &r);
}

/* ---- transactional reads --------------------------------------------- */

static uint32_t primary_of(farm_txm *m, farm_gaddr a)
{
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	return farm_as_replicas(m->as, farm_gaddr_region(a), rep) ? rep[0]
	                                                          : UINT32_MAX;
}

/* A read's end: the object joins the read set (unless read meanwhile),
 * its data in the transaction's storage (farm_txn_data_get). The record
 * goes back before the caller's continuation, which may read again. */
static void txrd_done(struct rd_op *op)
{
	struct txrd_ctx c = op->tr;
	farm_tx *tx = c.tx;
	int st = op->status;
	uint32_t size = op->size;
	const void *data = NULL;
	tx->reads_out--;
	if (tx->released) {
		rd_free(op);
		(void)farm_txn_tx_gone(tx);
		return;
	}
	txl_count(tx->tl, S_TX_READS, 1);
	if (!st) {
		/* Read twice meanwhile? */
		struct txobj *o = tx_find(tx, op->a);
		if (!o) {
			o = tx_add(tx, op->a);
			uint8_t *d = o ? farm_txn_data_get(tx, size) : NULL;
			if (!d) {
				if (o)
					tx->n--;
				st = -ENOMEM;
			} else {
				obj_unpack(op->img, size, d);
				*o = (struct txobj){
				        .a = op->a,
				        .size = size,
				        .lines = op->lines,
				        .version = op->version,
				        .incarn = op->incarn,
				        .primary = primary_of(tx->m, op->a),
				        .flags = TXO_READ,
				        .data = d};
			}
		}
		if (o && !st) {
			data = o->data;
			if (size > o->size)
				st = -EINVAL;
		}
	}
	rd_free(op);
	c.cont(tx, c.ctx, st, st ? NULL : data, st ? 0 : size);
}

/* A read of an object already in the read set, answered from a later
 * loop pass (never inline, as a READ's). */
static void txrd_cached(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct rd_op *op = ctx;
	struct txrd_ctx c = op->tr;
	uint32_t size = op->size;
	rd_put(op);
	c.tx->reads_out--;
	if (c.tx->released) {
		(void)farm_txn_tx_gone(c.tx);
		return;
	}
	if (status)
		c.cont(c.tx, c.ctx, status, NULL, 0);
	else
		c.cont(c.tx, c.ctx, 0, c.data, size);
}

static int tx_read_common(farm_tx *tx, farm_gaddr a, uint32_t size,
                          uint64_t want, farm_tx_read_fn cont, void *ctx)
{
	if (!tx || !cont)
		return -EINVAL;
	if (tx->ph != PH_OPEN || tx->released)
		return FARM_ECLOSED;
	struct txobj *o = tx_find(tx, a);
	if (o) {
		if (size > o->size || (want != UINT64_MAX &&
		                       farm_incarn_count(o->incarn) != want))
			return size > o->size ? -EINVAL : FARM_EFREED;
		/* The object's data, not @o: the object array moves when a
		 * read completing before this one adds to it. */
		struct rd_op *op = rd_get(tx->tl);
		if (!op)
			return -ENOMEM;
		op->tr = (struct txrd_ctx){
		        .tx = tx, .cont = cont, .ctx = ctx, .data = o->data};
		op->size = size;
		int rc = farm_loop_defer(tx->tl->loop, txrd_cached, op);
		if (rc)
			rd_put(op);
		else
			tx->reads_out++;
		return rc;
	}
	int rc;
	struct rd_op *op = rd_new(tx->tl, a, size, want, txrd_done, NULL, &rc);
	if (!op)
		return rc;
	op->tr = (struct txrd_ctx){.tx = tx, .cont = cont, .ctx = ctx};
	tx->reads_out++;
	rd_start(op);
	return 0;
}

int farm_tx_read(farm_tx *tx, farm_gaddr a, uint32_t size, farm_tx_read_fn cont,
                 void *ctx)
{
	return tx_read_common(tx, a, size, UINT64_MAX, cont, ctx);
}

int farm_tx_read_fat(farm_tx *tx, farm_fatptr p, farm_tx_read_fn cont,
                     void *ctx)
{
	return tx_read_common(tx, p.addr, p.size, p.incarnation, cont, ctx);
}

/* ---- local reads without waiting --------------------------------------- */

int farm_tx_read_local(farm_tx *tx, farm_gaddr a, uint32_t size,
                       const void **data)
{
	if (!tx || !data)
		return -EINVAL;
	if (tx->ph != PH_OPEN || tx->released)
		return FARM_ECLOSED;
	struct txobj *o = tx_find(tx, a);
	if (o) {
		if (size > o->size)
			return -EINVAL;
		*data = o->data;
		return 0;
	}
	farm_txm *m = tx->m;
	unsigned lines = obj_lines(size);
	if (!lines || farm_gaddr_offset(a) % 64 ||
	    !farm_gaddr_valid(a, 64ull * lines, m->region_size))
		return -EINVAL;
	const uint8_t *p = farm_as_local_ptr(m->as, a, 64ull * lines);
	if (!p)
		return -EREMOTE;
	/* The data straight into the transaction's storage: a read that
	 * fails leaves it unused there until the transaction ends. */
	uint8_t *d = farm_txn_data_get(tx, size);
	int rc = d ? -EAGAIN : -ENOMEM;
	uint64_t version = 0, incarn = 0;
	for (unsigned tries = 0; rc == -EAGAIN && tries < READ_TRIES; tries++) {
		rc = obj_read_lines(p, lines, size, d, &version, &incarn);
		if (rc == -EAGAIN)
			farm_cpu_relax();
	}
	if (rc == -EAGAIN)
		rc = -EBUSY;
	if (!rc && !txn_serving(m))
		rc = txn_not_serving(m); /* see rd_check */
	if (!rc && !(o = tx_add(tx, a)))
		rc = -ENOMEM;
	if (!rc) {
		*o = (struct txobj){.a = a,
		                    .size = size,
		                    .lines = lines,
		                    .version = version,
		                    .incarn = incarn,
		                    .primary = m->me,
		                    .flags = TXO_READ,
		                    .data = d};
		*data = d;
		txl_count(tx->tl, S_TX_READS, 1);
	}
	return rc;
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

int farm_lf_testing_read_sync(farm_txm *m, farm_loop *loop, farm_gaddr a,
                              uint32_t size, uint64_t want_incarnation,
                              void *buf, uint64_t *version)
{
	struct txloop *tl = loop_state(m, loop);
	if (!tl || !buf)
		return -EINVAL;
	struct sync_res r = {0};
	int rc;
	struct rd_op *op =
	        rd_new(tl, a, size, want_incarnation, lf_done, NULL, &rc);
	if (!op)
		return rc;
	op->lf = (struct lf_ctx){.buf = buf,
	                         .cont = sync_op_cb,
	                         .ctx = &r,
	                         .version_out = version};
	op->ep = farm_epoch_op_begin(); /* lf_done ends it */
	rd_start(op);
	return wait_loop(loop, &r);
}
