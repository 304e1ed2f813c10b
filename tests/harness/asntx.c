#include "asntx.h"

struct asn_cluster C;

void read_cb(farm_tx *tx, void *ctx, int status, const void *data,
             uint32_t size)
{
	(void)tx;
	(void)size;
	struct res *r = ctx;
	r->status = status;
	r->data = data;
	r->done = 1;
}

void alloc_cb(farm_tx *tx, void *ctx, int status, farm_fatptr p, void *data)
{
	(void)tx;
	struct res *r = ctx;
	r->status = status;
	r->fp = p;
	r->wdata = data;
	r->done = 1;
}

void op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->done = 1;
}

farm_tx *begin(unsigned m)
{
	farm_tx *tx;
	assert_int_equal(farm_tx_begin(C.m[m].txm, C.m[m].loop, &tx), 0);
	return tx;
}

int rd(farm_tx *tx, farm_gaddr a, uint32_t size, const void **data)
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

int commit(farm_tx *tx)
{
	struct res r = {0};
	int rc = farm_tx_commit(tx, op_cb, &r);
	if (rc)
		return rc;
	assert_int_equal(r.done, 0); /* never before commit returns */
	asn_wait(&C, &r.done);
	return r.status;
}

int lf(unsigned m, farm_gaddr a, uint32_t size, uint64_t want, void *buf)
{
	struct res r = {0};
	int rc = farm_lf_read(C.m[m].txm, C.m[m].loop, a, size, want, buf,
	                      op_cb, &r);
	if (rc)
		return rc;
	asn_wait(&C, &r.done);
	return r.status;
}

farm_fatptr make_obj(unsigned m, uint32_t size, uint8_t fill)
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

uint32_t primary_of(farm_gaddr a)
{
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	assert_true(farm_as_replicas(C.m[0].as, farm_gaddr_region(a), rep) > 0);
	return rep[0];
}

farm_txm_stats txm_stats(unsigned m)
{
	farm_txm_stats s;
	farm_txm_stats_get(C.m[m].txm, &s);
	return s;
}

int asntx_setup(void **state)
{
	(void)state;
	asn_open(&C, 3, ASNTX_RSIZE, NULL);
	return 0;
}

int asntx_teardown(void **state)
{
	(void)state;
	asn_close(&C);
	return 0;
}
