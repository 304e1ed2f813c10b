/*
 * Data recovery's re-reads of an object locked at the primary
 * (src/txn/copy_retry.c, farm_txn_dr_stuck), on four in-process machines
 * (asnodes.h) whose views the test sets itself. Machine 1 makes NOBJ
 * objects in a region and one of them is left locked there (its header's
 * exclusive lock bit set, as a coordinator that died mid-commit leaves it
 * until recovery decides); a backup of the region is removed
 * (configuration 2), so another machine becomes a new backup and copies
 * it from machine 1, stopping at that object:
 *
 *   - while the lock is held (HOLD_NS), the copy reads the object again,
 *     but paced: no more than the bound allows in that time
 *     (farm_txn_testing_datarec_stuck_bound: a few at the pace, then one
 *     after each wait, the waits growing to 250 ms), counted in
 *     datarec_stuck_reads, far fewer than one a tick of the pace; it is
 *     still copying (never given up: the primary is the only source);
 *   - the log says it in a line once it lasted a second, and one when
 *     the copy gets past it;
 *   - once the lock is released the same copy completes, with no new
 *     configuration, every object equal at the new backup and the
 *     primary.
 *
 * --broken (FARM_FP_DATAREC_STUCK_UNPACED: re-read at every tick of the
 * pace, as before the bound) must be seen reading it many times the
 * bound.
 */
#include "asndr.h"

#include <inttypes.h>

#include "brokenarg.h"
#include "txn/object.h"
#include "txn/txn_testing.h"
#include "util/fault.h"

#define RSIZE   (4ull << 20)
#define NOBJ    16
#define HOLD_NS (2500ull * 1000000ull)

static bool broken;

static int setup(void **state)
{
	(void)state;
	asn_open(&C, 4, RSIZE, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	asn_close(&C);
	return 0;
}

/* Configuration 2 without a backup of @region (machine 1 its primary):
 * the machine index of the new backup that copies it. */
static unsigned remove_backup(uint32_t region)
{
	uint32_t old[FARM_RING_MAX_REPLICAS], now[FARM_RING_MAX_REPLICAS];
	unsigned no = farm_as_replicas(C.m[0].as, region, old);
	assert_true(no >= 2);
	assert_int_equal(old[0], 1);
	uint32_t gone = old[1], ids[3];
	for (unsigned i = 0, k = 0; i < 4; i++)
		if (i + 1 != gone)
			ids[k++] = i + 1;
	dr_reconfigure(2, ids, 3, gone);
	unsigned nn = farm_as_replicas(C.m[0].as, region, now);
	uint32_t fresh = 0;
	for (unsigned i = 1; i < nn; i++) {
		bool was = false;
		for (unsigned k = 0; k < no; k++)
			was |= now[i] == old[k];
		if (!was)
			fresh = now[i];
	}
	assert_int_equal(now[0], 1);
	assert_true(fresh != 0);
	return fresh - 1;
}

static void test_stuck(void **state)
{
	(void)state;
	farm_fatptr obj[NOBJ];
	for (unsigned i = 0; i < NOBJ; i++)
		obj[i] = make_obj(0, 32, (uint8_t)(i + 1));
	uint32_t region = farm_gaddr_region(obj[0].addr);
	for (unsigned i = 1; i < NOBJ; i++)
		assert_int_equal(farm_gaddr_region(obj[i].addr), region);
	/* Locked at the primary as an install leaves it, by no live
	 * transaction: only the test releases it. */
	_Atomic uint64_t *h =
	        farm_as_local_ptr(C.m[0].as, obj[NOBJ / 2].addr, 64);
	assert_non_null(h);
	uint64_t v = atomic_load(h);
	assert_int_equal(v & OBJ_LOCK_MASK, 0);
	atomic_store(h, v | OBJ_LOCK_EXCL);

	dr_log_capture();
	unsigned m = remove_backup(region);
	uint64_t s0 = txm_stats(m).datarec_stuck_reads;
	uint64_t t0 = farm_now_ns();
	while (txm_stats(m).datarec_stuck_reads == s0 &&
	       farm_now_ns() - t0 < 10000000000ull)
		asn_pump(&C);
	uint64_t t_first = farm_now_ns();
	assert_true(txm_stats(m).datarec_stuck_reads > s0);
	dr_pump_for(HOLD_NS);
	uint64_t held = farm_now_ns() - t_first;
	uint64_t reads = txm_stats(m).datarec_stuck_reads - s0;
	struct farm_datarec_region d = {0};
	assert_true(dr_copy_of(m, region, &d));
	bool copying = d.state == FARM_DATAREC_COPYING &&
	               farm_as_backup_filling(C.m[m].as, region);

	/* Released: the same copy completes. */
	atomic_store(h, v);
	uint64_t t_rel = farm_now_ns();
	bool done = dr_pump_copy(m, region, 0, t_rel + 10000000000ull, 0, &d);
	double after = (double)(farm_now_ns() - t_rel) / 1e9;
	unsigned lines = dr_log_release("the object at offset");
	uint32_t bytes, us;
	farm_txm_datarec_pace(C.m[m].txm, &bytes, &us);
	/* The streak began at most a pump before t_first. */
	uint64_t bound =
	        farm_txn_testing_datarec_stuck_bound(held + 50000000ull);
	uint64_t ticks = held / (1000ull * us);
	unsigned same = 0;
	for (unsigned i = 0; i < NOBJ; i++)
		same += dr_obj_equal(0, m, obj[i].addr);
	printf("stuck%s: machine %u copying region %#" PRIx32 ": %" PRIu64
	       " reads of the locked object in %.2f s (bound %" PRIu64
	       ", %" PRIu64 " ticks of the pace), %s; released: %s %.2f s "
	       "later, %u of %u objects equal, %u log lines\n",
	       broken ? " [broken: unpaced]" : "", m + 1, region, reads,
	       (double)held / 1e9, bound, ticks,
	       copying ? "still copying" : "not copying",
	       done && d.state == FARM_DATAREC_DONE ? "complete"
	                                            : "not complete",
	       after, same, NOBJ, lines);
	assert_true(copying);
	if (broken) {
		/* A read a tick: many times the bound. */
		assert_true(reads > 4 * bound);
		return;
	}
	/* Paced: within the bound, far fewer than a read a tick, yet read
	 * again all along (the fast ones at least). */
	assert_true(reads <= bound + 1);
	assert_true(reads * 10 < ticks);
	assert_true(reads >= farm_txn_testing_datarec_stuck_bound(0));
	assert_true(done);
	assert_int_equal(d.state, FARM_DATAREC_DONE);
	assert_false(farm_as_backup_filling(C.m[m].as, region));
	assert_int_equal(same, NOBJ);
	/* Said once it lasted a second, and at the release. */
	assert_int_equal(lines, 2);
}

int main(int argc, char **argv)
{
	int rc = tu_broken_arg(argc, argv, FARM_FP_DATAREC_STUCK_UNPACED,
	                       &broken);
	if (rc || !farm_fault_built())
		return rc ? rc : FARM_TEST_SKIP;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_stuck, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
