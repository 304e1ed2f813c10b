/*
 * ht_bench's in-process machines (ht_cluster.c; as tests/asnodes.h,
 * without cmocka): shm fabric, one loop each, one thread drives them all.
 */
#ifndef FARM_BENCH_HT_CLUSTER_H
#define FARM_BENCH_HT_CLUSTER_H

#include <stdint.h>

#include <farm/farm.h>

#include "addrspace/addrspace.h"
#include "alloc/galloc.h"
#include "hashtable/ht.h"
#include "txn/txm.h"

#define MAX_M 4

struct mach {
	char dir[256];
	farm_fabric *fab;
	farm_msg *msg;
	farm_loop *loop;
	farm_as *as;
	farm_galloc *ga;
	farm_txm *txm;
	farm_ht *ht;
};

struct cluster {
	unsigned n;
	struct mach m[MAX_M];
};

/* @n machines with regions of @rsize and a table of attributes @ha on
 * each, peers added, loops open, the view set: 0, or an error (said on
 * stderr; cluster_close frees what was made). */
int cluster_open(struct cluster *c, unsigned n, uint64_t rsize,
                 const struct farm_ht_attr *ha);
void cluster_close(struct cluster *c);
/* One poll of every machine's loop. */
void pump(struct cluster *c);

#endif
