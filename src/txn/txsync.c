/*
 * The transactions' blocking wrappers (txn.h): each an asynchronous call
 * driven with farm_loop_wait until its continuation ran or its deadline
 * passed.
 *
 * A wrapper that gives up still has its operation in flight, whose
 * continuation writes into the wrapper's record later. So the record is on
 * the heap, and one given up is handed to its transaction (tx->orphans):
 * the continuation of a read or allocation runs only while the
 * transaction is not freed, a commit's before the transaction is, and the
 * transaction frees its orphans when it is freed (farm_txn_tx_free).
 * One that ended goes back to its loop (txloop.sync_spare) for the next
 * wrapper there: a wrapper waits on its loop's thread, where no other
 * waits meanwhile, so one spare serves (malloc and free per read were a
 * visible part of a short transaction's reads).
 */
#include "txn/txn_int.h"
#include "txn/txn_tx.h"

#include <errno.h>
#include <stdlib.h>

void farm_txm_set_sync_timeout(farm_txm *m, uint64_t timeout_ns)
{
	if (m)
		atomic_store_explicit(&m->sync_timeout_ns, timeout_ns,
		                      memory_order_relaxed);
}

static uint64_t default_timeout(const farm_tx *tx)
{
	return atomic_load_explicit(&tx->m->sync_timeout_ns,
	                            memory_order_relaxed);
}

static struct sync_res *res_new(farm_tx *tx)
{
	struct sync_res *r = tx->tl->sync_spare;
	if (!r)
		return calloc(1, sizeof(*r));
	tx->tl->sync_spare = NULL;
	memset(r, 0, sizeof(*r));
	return r;
}

/* @r, not handed to the transaction, back: kept as the loop's spare. */
static void res_put(farm_tx *tx, struct sync_res *r)
{
	if (tx->tl->sync_spare)
		free(r);
	else
		tx->tl->sync_spare = r;
}

/* Drive @tx's loop until @r is done or @timeout_ns passed (0: no limit):
 * its status, or the wait's error with @r handed to @tx (@r->done 0). */
static int res_wait(farm_tx *tx, struct sync_res *r, uint64_t timeout_ns)
{
	int rc = farm_loop_wait(tx->tl->loop, &r->done, timeout_ns);
	if (!r->done) { /* -ETIMEDOUT, or -EDEADLK inside a handler */
		r->next = tx->orphans;
		tx->orphans = r;
		return rc ? rc : -ETIMEDOUT;
	}
	return r->status;
}

void farm_txn_sync_orphans_free(farm_tx *tx)
{
	while (tx->orphans) {
		struct sync_res *r = tx->orphans;
		tx->orphans = r->next;
		free(r);
	}
}

static void read_cb(farm_tx *tx, void *ctx, int status, const void *data,
                    uint32_t size)
{
	(void)tx;
	(void)size;
	struct sync_res *r = ctx;
	r->status = status;
	r->data = data;
	r->done = 1;
}

int farm_tx_read_sync_timed(farm_tx *tx, farm_gaddr a, uint32_t size,
                            const void **data, uint64_t timeout_ns)
{
	if (!tx)
		return -EINVAL;
	struct sync_res *r = res_new(tx);
	if (!r)
		return -ENOMEM;
	int rc = farm_tx_read(tx, a, size, read_cb, r);
	if (rc) {
		res_put(tx, r);
		return rc;
	}
	rc = res_wait(tx, r, timeout_ns);
	if (!r->done)
		return rc; /* handed to the transaction */
	if (!rc && data)
		*data = r->data;
	res_put(tx, r);
	return rc;
}

int farm_tx_read_sync(farm_tx *tx, farm_gaddr a, uint32_t size,
                      const void **data)
{
	return tx ? farm_tx_read_sync_timed(tx, a, size, data,
	                                    default_timeout(tx))
	          : -EINVAL;
}

static void alloc_cb(farm_tx *tx, void *ctx, int status, farm_fatptr p,
                     void *data)
{
	(void)tx;
	struct sync_res *r = ctx;
	r->status = status;
	r->fp = p;
	r->wdata = data;
	r->done = 1;
}

int farm_tx_alloc_sync_timed(farm_tx *tx, uint32_t size, farm_gaddr hint,
                             farm_fatptr *p, void **data, uint64_t timeout_ns)
{
	if (!tx)
		return -EINVAL;
	struct sync_res *r = res_new(tx);
	if (!r)
		return -ENOMEM;
	int rc = farm_tx_alloc(tx, size, hint, alloc_cb, r);
	if (rc) {
		res_put(tx, r);
		return rc;
	}
	rc = res_wait(tx, r, timeout_ns);
	if (!r->done)
		return rc; /* handed to the transaction */
	if (!rc) {
		if (p)
			*p = r->fp;
		if (data)
			*data = r->wdata;
	}
	res_put(tx, r);
	return rc;
}

int farm_tx_alloc_sync(farm_tx *tx, uint32_t size, farm_gaddr hint,
                       farm_fatptr *p, void **data)
{
	return tx ? farm_tx_alloc_sync_timed(tx, size, hint, p, data,
	                                     default_timeout(tx))
	          : -EINVAL;
}

static void commit_cb(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct sync_res *r = ctx;
	r->status = outcome;
	r->done = 1;
}

int farm_tx_commit_sync_timed(farm_tx *tx, uint64_t timeout_ns)
{
	if (!tx)
		return -EINVAL;
	struct sync_res *r = res_new(tx);
	if (!r)
		return -ENOMEM;
	int rc = farm_tx_commit(tx, commit_cb, r);
	if (rc) {
		res_put(tx, r);
		return rc;
	}
	rc = res_wait(tx, r, timeout_ns);
	if (!r->done) /* handed to the transaction; it may still commit */
		return rc == -ETIMEDOUT ? FARM_EUNKNOWN : rc;
	res_put(tx, r);
	return rc;
}

int farm_tx_commit_sync(farm_tx *tx)
{
	return tx ? farm_tx_commit_sync_timed(tx, default_timeout(tx))
	          : -EINVAL;
}
