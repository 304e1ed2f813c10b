/*
 * Machine ids far apart and above 255, on four in-process machines
 * (asnodes.h) with ids 0, 300, 700 and 1023 of a 1,024-id space:
 *
 *   far_ids  machine 1023 coordinates transfers between objects whose
 *            primaries are other machines (its transaction ids name it:
 *            ten bits of machine), and they commit. Then machine 700 is
 *            removed (fenced, a new view, transaction recovery run by
 *            the decider, machine 0): recovery completes on every
 *            survivor, each committed transfer is there on every
 *            survivor, and machine 1023 commits again, on the promoted
 *            copies. Transaction ids of eight machine bits named
 *            machine 1023 as 255, and every LOCK record was refused.
 */
#include "asntx.h"

#include <inttypes.h>

#include "txn/txm.h"

#define RSIZE (16ull << 20)

static const uint32_t ids[4] = {0, 300, 700, 1023};

static int setup(void **state)
{
	(void)state;
	asn_open_ids(&C, 4, ids, 1024, RSIZE, NULL);
	asn_set_views(&C, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	asn_close(&C);
	return 0;
}

/* Machine index @m moves @amt from a's first byte to b's. */
static int transfer(unsigned m, farm_gaddr a, farm_gaddr b, uint8_t amt)
{
	farm_tx *tx = begin(m);
	const uint8_t *da, *db;
	int rc = rd(tx, a, 64, (const void **)&da);
	rc = rc ? rc : rd(tx, b, 64, (const void **)&db);
	uint8_t *wa, *wb;
	rc = rc ? rc : farm_tx_write(tx, a, (void **)&wa);
	rc = rc ? rc : farm_tx_write(tx, b, (void **)&wb);
	if (!rc) {
		wa[0] = (uint8_t)(wa[0] - amt);
		wb[0] = (uint8_t)(wb[0] + amt);
		rc = commit(tx);
	}
	farm_tx_free(tx);
	return rc;
}

static uint8_t value(unsigned m, farm_fatptr p)
{
	uint8_t buf[64];
	assert_int_equal(lf(m, p.addr, 64, p.incarnation, buf), 0);
	return buf[0];
}

static void test_far_ids(void **state)
{
	(void)state;
	/* An object on each of machines 0, 300 and 700. */
	farm_fatptr o[3];
	for (unsigned m = 0; m < 3; m++)
		o[m] = make_obj(m, 64, 100);
	for (unsigned m = 0; m < 3; m++)
		assert_int_equal(primary_of(o[m].addr), ids[m]);
	/* Machine 1023 coordinates: 0 -> 700, 300 -> 700. */
	assert_int_equal(transfer(3, o[0].addr, o[2].addr, 10), 0);
	assert_int_equal(transfer(3, o[1].addr, o[2].addr, 5), 0);
	for (unsigned m = 0; m < 4; m++) {
		assert_int_equal(value(m, o[0]), 90);
		assert_int_equal(value(m, o[1]), 95);
		assert_int_equal(value(m, o[2]), 115);
	}
	/* Machine 700 is removed (node.c's apply_view, by hand). */
	const uint32_t left[3] = {0, 300, 1023}, gone[1] = {700};
	const unsigned surv[3] = {0, 1, 3};
	for (unsigned k = 0; k < 3; k++) {
		unsigned m = surv[k];
		assert_int_equal(farm_fabric_revoke(C.m[m].fab, 700), 0);
		assert_int_equal(farm_as_set_view(C.m[m].as, 2, left, 3), 0);
		assert_int_equal(farm_txm_reconfigure(C.m[m].txm, 2, gone, 1,
		                                      left, 3, 0),
		                 0);
	}
	uint64_t t0 = farm_now_ns();
	bool all = false;
	while (!all && farm_now_ns() - t0 < 10000000000ull) {
		asn_pump(&C);
		all = true;
		for (unsigned k = 0; k < 3; k++)
			all &= txm_stats(surv[k]).rec_t_active_ns != 0;
	}
	assert_true(all);
	uint32_t p2 = primary_of(o[2].addr);
	printf("far_ids: recovery without machine 700 done in %.1f ms; "
	       "object 2's primary now machine %" PRIu32 "\n",
	       (double)(farm_now_ns() - t0) / 1e6, p2);
	assert_true(p2 != 700);
	/* Every committed transfer on every survivor; 1023 commits again. */
	for (unsigned k = 0; k < 3; k++) {
		assert_int_equal(value(surv[k], o[0]), 90);
		assert_int_equal(value(surv[k], o[1]), 95);
		assert_int_equal(value(surv[k], o[2]), 115);
	}
	int rc = FARM_ECONFLICT;
	for (unsigned i = 0; i < 100 && farm_tx_retryable(rc); i++)
		rc = transfer(3, o[2].addr, o[0].addr, 15);
	assert_int_equal(rc, 0);
	for (unsigned k = 0; k < 3; k++) {
		assert_int_equal(value(surv[k], o[0]), 105);
		assert_int_equal(value(surv[k], o[2]), 100);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_far_ids),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
