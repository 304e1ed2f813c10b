/*
 * Test fixture: N machines in one process, each with its own fabric,
 * messaging, address space and allocator, whose loops one test thread
 * drives in turn (asn_pump), so every step is deterministic. Defined in
 * asnodes.c.
 */
#ifndef FARM_TESTS_ASNODES_H
#define FARM_TESTS_ASNODES_H

#include "testutil.h"

#include "addrspace/addrspace.h"
#include "alloc/galloc.h"
#include "txn/txm.h"

#define ASN_MAX 4

struct asn {
	char dir[256];
	farm_fabric *fab;
	farm_msg *msg;
	farm_loop *loop;
	farm_as *as;
	farm_galloc *ga;
	farm_txm *txm;
};

struct asn_cluster {
	unsigned n;
	struct asn m[ASN_MAX];
	uint32_t id[ASN_MAX]; /* machine ids (asn_open: 1..n) */
};

/* The machines' lock-free read bound (farm_txm_attr.lf_bound_ns) for
 * the next asn_open*: 0 (the default) for the library's. */
extern uint64_t asn_lf_bound_ns;

/* Called on each machine's farm_msg before its loop opens. */
typedef void (*asn_hook_fn)(struct asn *x, unsigned i);

/* Every machine gets the view of every id with config id @cid. */
void asn_set_views(struct asn_cluster *c, uint64_t cid);

/* Machines 1..n, regions of @rsize, no view yet. */
void asn_open_noview(struct asn_cluster *c, unsigned n, uint64_t rsize,
                     asn_hook_fn hook);

/* Machines with ids @ids[0..n) (ascending), below @max_machines, regions
 * of @rsize, no view yet. */
void asn_open_ids(struct asn_cluster *c, unsigned n, const uint32_t *ids,
                  uint32_t max_machines, uint64_t rsize, asn_hook_fn hook);

/* Machines 1..n, regions of @rsize; views set (config id 1). */
void asn_open(struct asn_cluster *c, unsigned n, uint64_t rsize,
              asn_hook_fn hook);

void asn_close(struct asn_cluster *c);

void asn_pump(struct asn_cluster *c);

/* Drive every loop until *@flag is set (bounded: fails the test after
 * 30 s; a read of a locked object alone retries 4,096 times, yielding
 * the core each time, which a loaded host stretched past 10 s). */
void asn_wait(struct asn_cluster *c, const volatile int *flag);

#endif
