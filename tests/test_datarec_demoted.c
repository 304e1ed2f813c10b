/*
 * Data recovery from this machine's demoted copy (growth: copy.c) whose
 * block table cannot be read (src/txn/copy_retry.c), on four in-process
 * machines (asnodes.h) whose views the test sets itself:
 *
 *   configuration 1: machines 1-3; machine 1 makes a region R (one made
 *     for an array, until one whose placement with machine 4 a member
 *     makes 4 its primary and keeps 1 a backup) and NOBJ objects in it;
 *   configuration 2: machine 4 joins late (ring.h: the grower), the extra
 *     backup of R, which data recovery fills from machine 1;
 *   configuration 3: machine 4 an ordinary member, R's primary: machine
 *     1's copy is demoted, and its new one is filled from the demoted
 *     one, whose every block table read is taken as bad
 *     (FARM_FP_DATAREC_BAD_LOCAL_TABLE), while machine 2 commits to R's
 *     objects.
 *
 * The copy must give the demoted copy up for the primary at the bound
 * (farm_txn_testing_datarec_bad_bound: that many reads of the table, no
 * sooner than its waits), READ from machine 4 and complete: every object
 * of R equal in machine 1's copy and machine 4's, each holding the value
 * of its last acknowledged commit; the copy never taken for stalled (that
 * is for a primary's table).
 *
 * --broken (FARM_FP_DATAREC_NO_LOCAL_FALLBACK: past the bound the demoted
 * copy's table is read again once a second, as a primary's, never given
 * up) must see the copy not complete, nothing READ from the primary, well
 * after the bound's waits.
 */
#include "asndr.h"

#include <inttypes.h>

#include "alloc/galloc.h"
#include "brokenarg.h"
#include "txn/object.h"
#include "txn/txn_testing.h"
#include "util/fault.h"

#define RSIZE    (4ull << 20)
#define NOBJ     16
#define OBJ_SIZE 32 /* one line with its header */
#define TRIES    48

static bool broken;

static int setup(void **state)
{
	(void)state;
	asn_open_noview(&C, 4, RSIZE, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	asn_close(&C);
	return 0;
}

struct made {
	int done, status;
	farm_gaddr a;
};

static void made_cb(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	(void)loop;
	struct made *r = ctx;
	r->status = status;
	r->a = a;
	r->done = 1;
}

/* An address in a new region of machine 1's (an array made alone). */
static farm_gaddr new_region(void)
{
	struct made r = {0};
	assert_int_equal(farm_galloc_alloc_array_alone(C.m[0].ga, C.m[0].loop,
	                                               64, 1, made_cb, &r),
	                 0);
	asn_wait(&C, &r.done);
	assert_int_equal(r.status, 0);
	return r.a;
}

/* A committed object near @hint (machine 1's) holding @val. */
static farm_gaddr obj_near(farm_gaddr hint, uint64_t val)
{
	farm_tx *tx = begin(0);
	struct res r = {0};
	assert_int_equal(farm_tx_alloc(tx, OBJ_SIZE, hint, alloc_cb, &r), 0);
	asn_wait(&C, &r.done);
	assert_int_equal(r.status, 0);
	memset(r.wdata, 0, OBJ_SIZE);
	memcpy(r.wdata, &val, 8);
	assert_int_equal(commit(tx), 0);
	farm_tx_free(tx);
	return r.fp.addr;
}

/* Machine index @c adds one to the counter at @a: 0 and *@v the value
 * committed, or the transaction's error. */
static int bump(unsigned c, farm_gaddr a, uint64_t *v)
{
	farm_tx *tx = begin(c);
	const void *d;
	void *w;
	int rc = rd(tx, a, OBJ_SIZE, &d);
	uint64_t x = 0;
	if (!rc) {
		memcpy(&x, d, 8);
		x++;
		rc = farm_tx_write(tx, a, &w);
	}
	if (!rc) {
		memcpy(w, &x, 8);
		rc = commit(tx);
	}
	farm_tx_free(tx);
	if (!rc)
		*v = x;
	return rc;
}

/* Machine index @c's read of the counter at @a. */
static uint64_t counter(unsigned c, farm_gaddr a)
{
	farm_tx *tx = begin(c);
	const void *d;
	assert_int_equal(rd(tx, a, OBJ_SIZE, &d), 0);
	uint64_t x;
	memcpy(&x, d, 8);
	farm_tx_free(tx);
	return x;
}

/* In configuration 1 (machines 1-3): a region of machine 1's whose
 * placement with machine 4 an ordinary member makes 4 its primary and 1
 * a backup; an address in it. Every region made, into @regs (*@nreg). */
static farm_gaddr pick_region(farm_gaddr *regs, unsigned *nreg)
{
	struct farm_ring_machine ms[4];
	for (unsigned i = 0; i < 4; i++)
		ms[i] = (struct farm_ring_machine){.id = i + 1};
	farm_ring *g;
	assert_int_equal(farm_as_place(C.m[0].as, ms, 4, &g), 0);
	for (unsigned t = 0; t < TRIES; t++) {
		farm_gaddr a = new_region();
		regs[(*nreg)++] = a;
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		unsigned n = farm_ring_replicas(g, farm_gaddr_region(a), rep);
		bool one = false;
		for (unsigned k = 1; k < n; k++)
			one |= rep[k] == 1;
		if (n && rep[0] == 4 && one) {
			farm_ring_free(g);
			return a;
		}
	}
	farm_ring_free(g);
	fail_msg("no region of machine 1 that machine 4 grows into");
	return FARM_GADDR_NULL;
}

/* Configuration 2: machine 4 joins late; pumped until it holds a complete
 * copy of every region of machine 1's it is the extra backup of. */
static void grow_into(const farm_gaddr *regs, unsigned nreg)
{
	struct farm_ring_machine ms[4];
	for (unsigned i = 0; i < 4; i++)
		ms[i] = (struct farm_ring_machine){.id = i + 1,
		                                   .late = i == 3 ? 1 : 0};
	dr_reconfigure_placed(2, ms, 4, 0);
	for (unsigned i = 0; i < nreg; i++) {
		uint32_t r = farm_gaddr_region(regs[i]);
		if (farm_as_extra(C.m[0].as, r) != 4)
			continue;
		struct farm_datarec_region d;
		assert_true(dr_pump_copy(
		        3, r, 0, farm_now_ns() + 10000000000ull, 0, &d));
		assert_int_equal(d.state, FARM_DATAREC_DONE);
	}
}

/* Pump until machine 1's copy of @region started at @t0 or later is no
 * longer in progress or @until passes, machine 2 committing to one of
 * @obj (round robin) every 20 ms meanwhile; @val: the acknowledged
 * values. Whether it ended. */
static bool copy_under_commits(uint32_t region, uint64_t t0, uint64_t until,
                               const farm_gaddr *obj, uint64_t *val,
                               struct farm_datarec_region *d)
{
	uint64_t next = 0;
	unsigned k = 0, acked = 0;
	bool ended = false;
	while (!ended && farm_now_ns() < until) {
		asn_pump(&C);
		if (farm_now_ns() >= next) {
			int rc = bump(1, obj[k % NOBJ], &val[k % NOBJ]);
			assert_int_equal(rc, 0);
			acked++;
			k++;
			next = farm_now_ns() + 20000000ull;
		}
		ended = dr_copy_of(0, region, d) && d->t_start_ns >= t0 &&
		        d->state >= FARM_DATAREC_DONE;
	}
	printf("demoted: %u commits acknowledged during the copy\n", acked);
	return ended;
}

/* Every finished COMMIT-BACKUP applied (truncated), then every object
 * of @obj the same at machine 1 and its primary, at the value of its
 * last acknowledged commit (@val). */
static void check_objects(const farm_gaddr *obj, const uint64_t *val)
{
	for (unsigned r = 0; r < 2; r++) {
		for (unsigned i = 0; i < 4; i++)
			(void)farm_txm_testing_truncate(C.m[i].txm,
			                                C.m[i].loop);
		dr_pump_for(100000000ull);
	}
	unsigned same = 0;
	for (unsigned i = 0; i < NOBJ; i++) {
		assert_int_equal(counter(1, obj[i]), val[i]);
		same += dr_obj_equal(3, 0, obj[i]);
	}
	printf("demoted: %u of %u objects equal at machine 1 and the "
	       "primary\n",
	       same, NOBJ);
	assert_int_equal(same, NOBJ);
}

/* What keeps machine 1 from finishing its copy from the demoted one: its
 * block table read bad, or an object locked there for good. */
enum block { BAD_TABLE, LOCKED };

/*
 * The run: R made, grown into by machine 4 (configurations 1-3), machine
 * 1's new copy filled from its demoted one, which @how blocks; commits to
 * R meanwhile. The copy must go on from the primary and complete with
 * every object equal; --broken, never.
 */
static void run(enum block how)
{
	unsigned bound;
	uint64_t waits;
	farm_txn_testing_datarec_bad_bound(&bound, &waits);
	if (how == LOCKED) /* given up after a second locked */
		waits = 1000000000ull;
	uint32_t ids1[3] = {1, 2, 3};
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(farm_as_set_view(C.m[i].as, 1, ids1, 3), 0);
	farm_gaddr regs[TRIES];
	unsigned nreg = 0;
	farm_gaddr a = pick_region(regs, &nreg);
	uint32_t region = farm_gaddr_region(a);
	farm_gaddr obj[NOBJ];
	uint64_t val[NOBJ] = {0};
	for (unsigned i = 0; i < NOBJ; i++) {
		obj[i] = obj_near(a, 0);
		assert_int_equal(farm_gaddr_region(obj[i]), region);
	}
	grow_into(regs, nreg);
	assert_int_equal(farm_as_extra(C.m[0].as, region), 4);
	if (how == LOCKED) {
		/* Locked in machine 1's copy, the one configuration 3
		 * demotes, by no live transaction: held for good. */
		_Atomic uint64_t *h =
		        farm_as_local_ptr(C.m[0].as, obj[NOBJ / 2], 64);
		assert_non_null(h);
		atomic_fetch_or(h, OBJ_LOCK_EXCL);
	} else {
		assert_int_equal(farm_fault_set(FARM_FP_DATAREC_BAD_LOCAL_TABLE,
		                                tu_switch_on, NULL),
		                 0);
	}

	/* Configuration 3: machine 4 grows into R; machine 1's copy is
	 * demoted and its new one filled from it. */
	dr_log_capture();
	uint64_t t0 = farm_now_ns();
	uint32_t ids[4] = {1, 2, 3, 4};
	dr_reconfigure(3, ids, 4, 0);
	assert_int_equal(primary_of(a), 4);
	assert_non_null(farm_as_demoted_source(C.m[0].as, region));
	struct farm_datarec_region d = {0};
	/* The bound's waits and as much again for the host; broken, well
	 * past them. */
	uint64_t limit = broken ? t0 + waits + 3000000000ull
	                        : t0 + 2 * waits + 5000000000ull;
	bool ended = copy_under_commits(region, t0, limit, obj, val, &d);
	uint64_t t_end = farm_now_ns();
	unsigned lines = dr_log_release("demoted copy");
	farm_txm_stats s = txm_stats(0);
	printf("demoted %s%s: region %#" PRIx32 " at machine 1 %s after "
	       "%.2f s: %" PRIu64 " bytes READ from the primary, %" PRIu64
	       " taken from the demoted copy, %" PRIu64 " reads again "
	       "(bound %u, waits %.2f s), datarec_stalled %" PRIu64 ", "
	       "datarec_stuck_reads %" PRIu64 ", %u log lines about the "
	       "demoted copy\n",
	       how == LOCKED ? "locked" : "bad table",
	       broken ? " [broken: no fallback]" : "", region,
	       ended ? (d.state == FARM_DATAREC_DONE ? "complete" : "stopped")
	             : "still copying",
	       (double)(t_end - t0) / 1e9, d.bytes, d.local, d.retries, bound,
	       (double)waits / 1e9, s.datarec_stalled, s.datarec_stuck_reads,
	       lines);
	assert_int_equal(
	        farm_fault_set(FARM_FP_DATAREC_BAD_LOCAL_TABLE, NULL, NULL), 0);
	if (broken) {
		/* Never given up: still copying, from the demoted copy
		 * alone, well after the bound. */
		assert_false(ended);
		assert_int_equal(d.bytes, 0);
		assert_true(farm_as_backup_filling(C.m[0].as, region));
		return;
	}
	assert_true(ended);
	assert_int_equal(d.state, FARM_DATAREC_DONE);
	assert_false(farm_as_backup_filling(C.m[0].as, region));
	/* Given up at the bound, no sooner, for READs from the primary;
	 * never taken for a stalled primary. */
	if (how == BAD_TABLE)
		assert_true(d.retries >= bound);
	else
		assert_true(s.datarec_stuck_reads > 0);
	assert_true(t_end - t0 >= waits);
	assert_true(d.bytes > 0);
	assert_int_equal(s.datarec_stalled, 0);
	assert_true(lines >= 1);
	check_objects(obj, val);
}

static void test_bad_table(void **state)
{
	(void)state;
	run(BAD_TABLE);
}

static void test_locked(void **state)
{
	(void)state;
	run(LOCKED);
}

int main(int argc, char **argv)
{
	int rc = tu_broken_arg(argc, argv, FARM_FP_DATAREC_NO_LOCAL_FALLBACK,
	                       &broken);
	if (rc || !farm_fault_built())
		return rc ? rc : FARM_TEST_SKIP;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_bad_table, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_locked, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
