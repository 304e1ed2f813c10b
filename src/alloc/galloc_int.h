/*
 * The cluster allocator's internals, shared by its files (not installed):
 * allocation, frees and the handlers (galloc.c), and regions changing
 * hands, adopted or retired (galloc_adopt.c).
 */
#ifndef FARM_ALLOC_GALLOC_INT_H
#define FARM_ALLOC_GALLOC_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc/galloc.h"

#define POOL_MAX    8
#define MAX_LOOPS   64
#define ADOPTED_MAX 64

struct pooled {
	uint32_t near;
	struct farm_alloc_region r;
};

struct farm_galloc {
	farm_as *as;
	farm_msg *msg;
	farm_blockalloc *ba;
	farm_slab *slabs[MAX_LOOPS]; /* one per loop, made on first use */
	pthread_mutex_t lock;        /* pool */
	struct pooled pool[POOL_MAX];
	unsigned npool;
	/* Regions taken out of a full pool and being added to the block
	 * allocator outside `lock` (region_made); a retire waits on `pool_cv`
	 * until none is, so it cannot miss one. Under `lock`. */
	unsigned adding;
	pthread_cond_t pool_cv;
	_Atomic uint64_t retired;
	_Atomic uint64_t shipped_allocs, served_allocs, shipped_frees,
	        served_frees, regions_added, region_waits;
	/* Adopting promoted regions (farm_galloc_adopt): one thread, made on
	 * first use, parked on `adopt_cv` while there is nothing to do. */
	pthread_mutex_t adopt_lock;
	pthread_cond_t adopt_cv;
	pthread_t adopter;
	bool adopter_up, adopt_stop;
	/* The region the adopter is on (0: none); cleared, with a broadcast
	 * on `adopt_done_cv`, once its deferred frees are done too. */
	uint32_t adopt_busy;
	pthread_cond_t adopt_done_cv;
	struct adopt_region *adopting; /* expected or queued, under the lock */
	struct deferred *deferred;     /* frees waiting for their region */
	/* Allocations that wanted a region while regions promoted here
	 * were still to be adopted (op_park): posted back to their loops
	 * when one leaves `adopting` (adopt_take_locked). */
	struct galloc_op *parked;
	_Atomic uint64_t allocs_parked;
	_Atomic uint64_t adopted, adopt_failed, adopt_skipped, adopt_ns,
	        adopt_max_ns, frees_deferred, deferred_freed, deferred_lost;
	/* The regions adopted (the first ADOPTED_MAX), for the counters of
	 * allocations and frees in them: ids written before the count
	 * (release; pairs with the acquire in farm_galloc_in_adopted). */
	uint32_t adopted_ids[ADOPTED_MAX];
	_Atomic unsigned nadopted_ids;
	_Atomic uint64_t adopted_allocs, adopted_frees;
};

/* A region promoted here, not yet in the block allocator. */
struct adopt_region {
	uint32_t id;
	bool queued; /* farm_galloc_adopt called: the adopter may take it */
	bool taken;  /* the adopter is on it */
	struct adopt_region *next;
};
/* A free of an object in such a region, done once it is adopted; then
 * @then is stored (release) in the object's first word. */
struct deferred {
	farm_gaddr a;
	uint64_t then;
	struct deferred *next;
};

/* galloc.c: every parked allocation back to its loop (a region left the
 * adoption list). Under adopt_lock. */
void farm_galloc_parked_release_locked(farm_galloc *g);
/* galloc_adopt.c: was region @id adopted here? (Counters only.) */
bool farm_galloc_in_adopted(farm_galloc *g, uint32_t id);

#endif
