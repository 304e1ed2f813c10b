/*
 * Transactions on the in-process machines of asnodes.h, driven
 * synchronously by the test thread: begin, read, commit, lock-free read,
 * make an object (tests/test_txn.c, tests/test_rec_stale.c), on the
 * cluster C (asntx.c defines it; the test starts it).
 */
#ifndef FARM_TESTS_ASNTX_H
#define FARM_TESTS_ASNTX_H

#include "asnodes.h"

/* The cluster the helpers below drive (the test starts it). */
extern struct asn_cluster C;

/* The regions of the cluster asntx_setup() opens. */
#define ASNTX_RSIZE (16ull << 20)

/* cmocka fixtures: C opened with 3 machines and regions of ASNTX_RSIZE
 * bytes, and closed. */
int asntx_setup(void **state);
int asntx_teardown(void **state);

struct res {
	int done, status;
	const void *data;
	farm_fatptr fp;
	void *wdata;
};

void read_cb(farm_tx *tx, void *ctx, int status, const void *data,
             uint32_t size);

void alloc_cb(farm_tx *tx, void *ctx, int status, farm_fatptr p, void *data);

void op_cb(farm_loop *loop, void *ctx, int status);

farm_tx *begin(unsigned m);

int rd(farm_tx *tx, farm_gaddr a, uint32_t size, const void **data);

int commit(farm_tx *tx);

int lf(unsigned m, farm_gaddr a, uint32_t size, uint64_t want, void *buf);

/* A new committed object of @size bytes on machine @m holding @fill. */
farm_fatptr make_obj(unsigned m, uint32_t size, uint8_t fill);

uint32_t primary_of(farm_gaddr a);

/* Machine index @m's transaction counters. */
farm_txm_stats txm_stats(unsigned m);

#endif
