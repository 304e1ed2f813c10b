/*
 * Data recovery's bound on a block table it cannot read
 * (src/txn/copy_retry.c), on four in-process machines (asnodes.h) whose
 * views the test sets itself. Machine 1 makes a region; a backup of it
 * is removed (configuration 2), so another machine becomes a new backup
 * and copies it from machine 1, with every block table it reads taken as
 * bad (FARM_FP_DATAREC_BAD_TABLE, a source damaged for good):
 *
 *   - the copy reaches the bound (farm_txn_testing_datarec_bad_bound:
 *     that many reads of the table) no sooner than the waits' sum (the
 *     reads are spread, not spun), and stalls: datarec_stalled 1;
 *   - stalled, it reads the table once a second at most, and is not
 *     complete: still copying, the filling copy still filling (never
 *     promotable);
 *   - the log says it in a few lines, not one a read;
 *   - once the table reads whole again (the switch off), the same copy
 *     goes on and completes, with no configuration change: a stable
 *     cluster sends no COPY again, so a copy stopped for good would have
 *     left the region a replica short for good.
 *
 * --broken (FARM_FP_DATAREC_BAD_UNBOUNDED, the code before the bound: a
 * bad table read again at once and logged each time, forever) must be
 * seen spinning: the bound's reads well before its waits' sum, many times
 * as many in the time after, and a log line each.
 */
#include "asndr.h"

#include <inttypes.h>

#include "brokenarg.h"
#include "txn/txm.h"
#include "txn/txn_testing.h"
#include "util/fault.h"

#define RSIZE (16ull << 20)

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

static void test_bad_table(void **state)
{
	(void)state;
	unsigned bound;
	uint64_t waits;
	farm_txn_testing_datarec_bad_bound(&bound, &waits);
	farm_fatptr o = make_obj(0, 64, 7);
	uint32_t region = farm_gaddr_region(o.addr);
	uint32_t old[FARM_RING_MAX_REPLICAS], now[FARM_RING_MAX_REPLICAS];
	unsigned no = farm_as_replicas(C.m[0].as, region, old);
	assert_true(no >= 2);
	assert_int_equal(old[0], 1);
	uint32_t gone = old[1], ids[3];
	for (unsigned i = 0, k = 0; i < 4; i++)
		if (i + 1 != gone)
			ids[k++] = i + 1;

	assert_int_equal(
	        farm_fault_set(FARM_FP_DATAREC_BAD_TABLE, tu_switch_on, NULL),
	        0);
	dr_log_capture();
	uint64_t t0 = farm_now_ns();
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
	unsigned m = fresh - 1;
	struct farm_datarec_region d = {0};
	/* The bound's waits, and as much again for the host; broken, the
	 * bound's time and a margin. */
	uint64_t limit = broken ? t0 + waits + 1500000000ull
	                        : t0 + 2 * waits + 5000000000ull;
	bool stalled = dr_pump_copy(m, region, t0, limit, bound, &d);
	uint64_t t_end = farm_now_ns();
	uint64_t r_end = d.retries;
	/* Stalled: a read a second at most from now on. */
	uint64_t t_watch = farm_now_ns();
	dr_pump_for(1500000000ull);
	double watched = (double)(farm_now_ns() - t_watch) / 1e9;
	struct farm_datarec_region d2 = {0};
	assert_true(dr_copy_of(m, region, &d2));
	unsigned lines = dr_log_release("block table");
	farm_txm_stats s = txm_stats(m);
	printf("bad_table%s: machine %u copying region %#" PRIx32
	       ": bound %s after %.2f s, %" PRIu64 " reads again (bound %u, "
	       "waits %.2f s), %" PRIu64 " in the %.1f s after, %u log "
	       "lines, datarec_stalled %" PRIu64 "\n",
	       broken ? " [broken: unbounded]" : "", fresh, region,
	       stalled ? "reached" : "not reached", (double)(t_end - t0) / 1e9,
	       r_end, bound, (double)waits / 1e9, d2.retries - r_end, watched,
	       lines, s.datarec_stalled);
	assert_true(farm_as_backup_filling(C.m[m].as, region));
	assert_int_equal(d2.state, FARM_DATAREC_COPYING);
	if (broken) {
		/* The spin: the bound's reads long before its waits, many
		 * times as many after, a line a read. */
		assert_true(stalled && t_end - t0 < waits);
		assert_true(d2.retries - r_end > 4ull * bound);
		assert_true(lines > 4 * bound);
		assert_true(s.datarec_stalled == 0);
		assert_int_equal(
		        farm_fault_set(FARM_FP_DATAREC_BAD_TABLE, NULL, NULL),
		        0);
		return;
	}
	assert_true(stalled);
	assert_true(t_end - t0 >= waits);
	assert_true(d2.retries - r_end <= 1 + (uint64_t)watched);
	assert_int_equal(s.datarec_stalled, 1);
	/* The first, a summary a second, the stall. */
	assert_true(lines >= 2);
	assert_true(lines <= 3 + (unsigned)((t_end - t0) / 1000000000ull));

	/* The table reads whole again: the same copy completes, no new
	 * configuration. */
	assert_int_equal(farm_fault_set(FARM_FP_DATAREC_BAD_TABLE, NULL, NULL),
	                 0);
	uint64_t t3 = farm_now_ns();
	assert_true(dr_pump_copy(m, region, t0, t3 + 20000000000ull, 0, &d));
	printf("bad_table: the table read whole again: %s %.1f s later, "
	       "%" PRIu64 " bytes read\n",
	       d.state == FARM_DATAREC_DONE ? "complete" : "stopped",
	       (double)(farm_now_ns() - t3) / 1e9, d.bytes);
	assert_int_equal(d.state, FARM_DATAREC_DONE);
	assert_false(farm_as_backup_filling(C.m[m].as, region));
	assert_int_equal(txm_stats(m).datarec_stalled, 1);
}

int main(int argc, char **argv)
{
	int rc = tu_broken_arg(argc, argv, FARM_FP_DATAREC_BAD_UNBOUNDED,
	                       &broken);
	if (rc || !farm_fault_built())
		return rc ? rc : FARM_TEST_SKIP;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_bad_table, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
