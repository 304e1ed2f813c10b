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
#include "asntx.h"

#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

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

/* Machine index @m's record of its copy of @region (false: none). */
static bool copy_of(unsigned m, uint32_t region, struct farm_datarec_region *d)
{
	struct farm_datarec_region r[64];
	unsigned n = farm_txm_datarec_get(C.m[m].txm, r, 64);
	for (unsigned i = 0; i < n && i < 64; i++)
		if (r[i].region == region) {
			*d = r[i];
			return true;
		}
	return false;
}

/* ---- the log: stderr into a file while the copy runs (one write(2) a
 * line, log.c) ----------------------------------------------------------- */

static int log_fd = -1, saved_fd = -1;

static void log_capture(void)
{
	char path[] = "/tmp/farm_drretry_XXXXXX";
	log_fd = mkstemp(path);
	assert_true(log_fd >= 0);
	(void)unlink(path);
	saved_fd = dup(STDERR_FILENO);
	assert_true(saved_fd >= 0);
	assert_true(dup2(log_fd, STDERR_FILENO) >= 0);
}

/* Back to the real stderr; the lines that name the block table. */
static unsigned log_release(void)
{
	assert_true(dup2(saved_fd, STDERR_FILENO) >= 0);
	close(saved_fd);
	off_t len = lseek(log_fd, 0, SEEK_END);
	assert_true(len >= 0);
	char *buf = calloc(1, (size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(pread(log_fd, buf, (size_t)len, 0), len);
	close(log_fd);
	unsigned n = 0;
	for (char *line = buf, *e; *line; line = e + 1) {
		e = strchr(line, '\n');
		if (!e)
			e = line + strlen(line) - 1;
		char save = e[1];
		e[1] = '\0';
		n += strstr(line, "block table") != NULL;
		e[1] = save;
		if (!save)
			break;
	}
	free(buf);
	return n;
}

/* ---- configurations --------------------------------------------------- */

/* Machines @ids (@n, indexes = id - 1) take configuration @cid; @gone
 * removed (0: none). Pumped until each has finished its recovery round
 * (bounded). */
static void reconfigure(uint64_t cid, const uint32_t *ids, unsigned n,
                        uint32_t gone)
{
	for (unsigned k = 0; k < n; k++) {
		unsigned m = ids[k] - 1;
		if (gone)
			assert_int_equal(farm_fabric_revoke(C.m[m].fab, gone),
			                 0);
		assert_int_equal(farm_as_set_view(C.m[m].as, cid, ids, n), 0);
		assert_int_equal(farm_txm_reconfigure(C.m[m].txm, cid, &gone,
		                                      gone ? 1 : 0, ids, n,
		                                      ids[0]),
		                 0);
	}
	uint64_t t0 = farm_now_ns();
	for (bool all = false; !all && farm_now_ns() - t0 < 10000000000ull;) {
		asn_pump(&C);
		all = true;
		/* 0 from the reconfiguration until its round ends. */
		for (unsigned k = 0; k < n; k++)
			all &= txm_stats(ids[k] - 1).rec_t_active_ns != 0;
	}
	for (unsigned k = 0; k < n; k++)
		farm_txm_datarec_view(C.m[ids[k] - 1].txm);
}

/* Pump until machine index @m's copy of @region started at @after or
 * later (monotonic ns; a copy started again keeps its record) has read a
 * bad table @reads times (d->retries), or, @reads 0, is no longer in
 * progress; false when @until passes first. */
static bool pump_copy(unsigned m, uint32_t region, uint64_t after,
                      uint64_t until, uint64_t reads,
                      struct farm_datarec_region *d)
{
	while (farm_now_ns() < until) {
		asn_pump(&C);
		if (copy_of(m, region, d) && d->t_start_ns >= after &&
		    (reads ? d->retries >= reads
		           : d->state >= FARM_DATAREC_DONE))
			return true;
	}
	return false;
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
	log_capture();
	uint64_t t0 = farm_now_ns();
	reconfigure(2, ids, 3, gone);
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
	bool stalled = pump_copy(m, region, t0, limit, bound, &d);
	uint64_t t_end = farm_now_ns();
	uint64_t r_end = d.retries;
	/* Stalled: a read a second at most from now on. */
	uint64_t t_watch = farm_now_ns();
	for (uint64_t t = t_watch; farm_now_ns() - t < 1500000000ull;)
		asn_pump(&C);
	double watched = (double)(farm_now_ns() - t_watch) / 1e9;
	struct farm_datarec_region d2 = {0};
	assert_true(copy_of(m, region, &d2));
	unsigned lines = log_release();
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
	assert_true(pump_copy(m, region, t0, t3 + 20000000000ull, 0, &d));
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
