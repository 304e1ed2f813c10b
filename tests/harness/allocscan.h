/*
 * The allocator's state, live and rebuilt by scan (SOSP'15 5.4; the
 * check "the allocator's state, rebuilt by scan, matches the live
 * state"), for tests/test_rec_kv.c and tests/campaign/. Child side:
 * alloc_scan dumps the machine's block allocator, then rebuilds a fresh
 * one from a copy of every region it holds and dumps that
 * (farm_blockalloc_dump: the free lists agree with every header, so no
 * slot is both free and live), and counts the objects of those regions
 * left locked ("no object is left locked", for every object,
 * not only the bank's accounts). Parent side: alloc_check. Defined in
 * allocscan.c.
 */
#ifndef FARM_TESTS_ALLOCSCAN_H
#define FARM_TESTS_ALLOCSCAN_H

#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>

#include "alloc/alloc_int.h"
#include "alloc/galloc.h"
#include "node/node.h"
#include "txn/object.h"
#include "txn/txm.h"

/* A machine's allocator ('A' in the tests). */
struct alloc_report {
	farm_txm_stats st;
	struct farm_galloc_stats gs;
	int live_rc, rebuilt_rc; /* farm_blockalloc_dump's */
	int equal;               /* the two dumps are the same text */
	uint64_t dump_bytes, regions;
	/* Objects of the allocator's regions (every object this machine is
	 * primary of: bank accounts, KV objects, all) whose header holds a
	 * lock bit with the cluster quiet ("no object is left
	 * locked"); walk_rc: the first walk's error. */
	uint64_t objects, locked;
	int walk_rc;
};

void alloc_locked_one(void *ctx, struct farm_objhdr *obj, uint32_t lines);

char *alloc_dump_of(farm_blockalloc *ba, int *rc);

/* Child: machine @node's allocator, live and rebuilt by scan from a copy
 * of every region it holds. The machine must be quiet (no workload runs
 * anywhere in the cluster). */
void alloc_scan(farm_node *node, struct alloc_report *a);

/* Parent: machine @i's allocator report @a; a failed check in @f for each
 * leak, refusal, or a rebuilt state that differs from the live one. */
void alloc_check(unsigned i, const struct alloc_report *a, struct fails *f);

#endif
