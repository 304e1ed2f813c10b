/*
 * Transactions on the in-process machines of asnodes.h, driven
 * synchronously by the test thread: begin, read, commit, lock-free read,
 * make an object (tests/test_txn.c, tests/test_rec_stale.c). The including
 * test defines the cluster C. Header-only, static functions.
 */
#ifndef FARM_TESTS_ASNTX_H
#define FARM_TESTS_ASNTX_H

#include "asnodes.h"

static struct asn_cluster C;

/* Not inline: inlined, -Wmaybe-uninitialized cannot tell that a failed
 * assertion leaves the test. */
#define ASNTX_FN static __attribute__((unused))

struct res {
	int done, status;
	const void *data;
	farm_fatptr fp;
	void *wdata;
};

ASNTX_FN void read_cb(farm_tx *tx, void *ctx, int status, const void *data,
                      uint32_t size)
{
	(void)tx;
	(void)size;
	struct res *r = ctx;
	r->status = status;
	r->data = data;
	r->done = 1;
}

ASNTX_FN void alloc_cb(farm_tx *tx, void *ctx, int status, farm_fatptr p,
                       void *data)
{
	(void)tx;
	struct res *r = ctx;
	r->status = status;
	r->fp = p;
	r->wdata = data;
	r->done = 1;
}

ASNTX_FN void op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->done = 1;
}

ASNTX_FN farm_tx *begin(unsigned m)
{
	farm_tx *tx;
	assert_int_equal(farm_tx_begin(C.m[m].txm, C.m[m].loop, &tx), 0);
	return tx;
}

ASNTX_FN int rd(farm_tx *tx, farm_gaddr a, uint32_t size, const void **data)
{
	struct res r = {0};
	int rc = farm_tx_read(tx, a, size, read_cb, &r);
	if (rc)
		return rc;
	asn_wait(&C, &r.done);
	if (data)
		*data = r.data;
	return r.status;
}

ASNTX_FN int commit(farm_tx *tx)
{
	struct res r = {0};
	int rc = farm_tx_commit(tx, op_cb, &r);
	if (rc)
		return rc;
	assert_int_equal(r.done, 0); /* never before commit returns */
	asn_wait(&C, &r.done);
	return r.status;
}

ASNTX_FN int lf(unsigned m, farm_gaddr a, uint32_t size, uint64_t want,
                void *buf)
{
	struct res r = {0};
	int rc = farm_lf_read(C.m[m].txm, C.m[m].loop, a, size, want, buf,
	                      op_cb, &r);
	if (rc)
		return rc;
	asn_wait(&C, &r.done);
	return r.status;
}

/* A new committed object of @size bytes on machine @m holding @fill. */
ASNTX_FN farm_fatptr make_obj(unsigned m, uint32_t size, uint8_t fill)
{
	farm_tx *tx = begin(m);
	struct res r = {0};
	assert_int_equal(farm_tx_alloc(tx, size, FARM_GADDR_NULL, alloc_cb, &r),
	                 0);
	asn_wait(&C, &r.done);
	assert_int_equal(r.status, 0);
	memset(r.wdata, fill, size);
	assert_int_equal(commit(tx), 0);
	farm_tx_free(tx);
	return r.fp;
}

ASNTX_FN uint32_t primary_of(farm_gaddr a)
{
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	assert_true(farm_as_replicas(C.m[0].as, farm_gaddr_region(a), rep) > 0);
	return rep[0];
}

#endif
