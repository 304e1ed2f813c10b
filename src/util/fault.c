/* Fault-injection points (fault.h): the hook table and its setter. */
#include "util/fault.h"

#include <errno.h>

struct farm_fault_slot farm_fault_slots[FARM_FP_COUNT];

int farm_fault_built(void)
{
#ifdef FARM_FAULT_INJECTION
	return 1;
#else
	return 0;
#endif
}

int farm_fault_set(enum farm_fault_point fp, farm_fault_fn fn, void *arg)
{
	if ((unsigned)fp >= FARM_FP_COUNT)
		return -EINVAL;
	if (!farm_fault_built())
		return -ENOTSUP;
	/* The argument first: a point that sees the new hook sees its
	 * argument (release: pairs with the acquire loads of the hook in
	 * farm_fault_hit and farm_fault_switch, fault.h). */
	atomic_store_explicit(&farm_fault_slots[fp].arg, arg,
	                      memory_order_relaxed);
	atomic_store_explicit(&farm_fault_slots[fp].fn, fn,
	                      memory_order_release);
	return 0;
}
