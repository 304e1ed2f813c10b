/*
 * Fault-injection points: named places in the library where a test can
 * make something happen (a delay that widens a race window, a SIGKILL at
 * one step of a protocol). They exist only in builds configured with
 * FARM_FAULT_INJECTION=ON (the default when the tests are built, off for
 * an installed release build: -DFARM_BUILD_TESTS=OFF); elsewhere
 * FARM_FAULT_POINT() compiles to nothing and farm_fault_set() reports
 * -ENOTSUP.
 *
 * A point costs one relaxed load of its hook while no hook is set.
 * Hooks run on the thread that reaches the point, with whatever that
 * thread holds; they must not call back into the layer they sit in.
 */
#ifndef FARM_UTIL_FAULT_H
#define FARM_UTIL_FAULT_H

#include <stdatomic.h>
#include <stddef.h>

enum farm_fault_point {
	/* txn/epoch.c: a quiesce pass between reading the epoch (and
	 * checking the old bucket) and announcing its quiescent state. */
	FARM_FP_EPOCH_QUIESCE_WINDOW,
	/* node/ctl.c: a stats answer, about to call a source's counters
	 * (with the control socket's lock held). */
	FARM_FP_CTL_SOURCE,
	FARM_FP_COUNT
};

typedef void (*farm_fault_fn)(enum farm_fault_point fp, void *arg);

struct farm_fault_slot {
	_Atomic(farm_fault_fn) fn;
	void *_Atomic arg;
};
extern struct farm_fault_slot farm_fault_slots[FARM_FP_COUNT];

/* Set (or with @fn NULL clear) the hook of @fp. 0; -EINVAL (no such
 * point); -ENOTSUP (built without fault injection). */
int farm_fault_set(enum farm_fault_point fp, farm_fault_fn fn, void *arg);
/* Whether this build has fault-injection points at all. */
int farm_fault_built(void);

#ifdef FARM_FAULT_INJECTION
static inline void farm_fault_hit(enum farm_fault_point fp)
{
	farm_fault_fn fn = atomic_load_explicit(&farm_fault_slots[fp].fn,
	                                        memory_order_acquire);
	if (__builtin_expect(fn != NULL, 0))
		fn(fp, atomic_load_explicit(&farm_fault_slots[fp].arg,
		                            memory_order_relaxed));
}
#define FARM_FAULT_POINT(fp) farm_fault_hit(fp)
#else
#define FARM_FAULT_POINT(fp) ((void)0)
#endif

#endif
