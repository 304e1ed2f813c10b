/*
 * Stale configurations, on four in-process
 * machines (asnodes.h) whose views the test sets itself, deterministically:
 *
 *   stale_lock      the primaries of a transaction's objects move to
 *                   configuration 2 while its coordinator is still in 1:
 *                   each refuses the LOCK record (stale_refused), the
 *                   commit aborts retryably, nothing is locked or changed;
 *                   once the coordinator is in 2 the retry commits.
 *   stale_messages  machines 1-3 reconfigure without machine 4 (fenced;
 *                   transaction recovery runs, machine 1 decides). Then
 *                   recovery messages are forged with the old
 *                   configuration id (and a future one): votes and ends
 *                   of votes to the decider, decisions, ends of recovery
 *                   and starts from it. Each is refused and counted
 *                   (rec_refused); the same message with the current id
 *                   is taken (not counted), so the id is what was refused.
 *                   A message from the removed machine is not taken
 *                   either. Messages the receivers do not judge by
 *                   configuration (REC_APPLIED, REC_QUERY) are reported.
 *   decided_after_primary
 *                   machine 4 commits a transfer (its COMMIT-PRIMARYs
 *                   processed, its records still in the logs), machine 3
 *                   commits a newer one of the same objects, then machine
 *                   4 is removed. Recovery decides machine 4's transfer
 *                   committed (a COMMIT-PRIMARY) and every survivor gets
 *                   the decision, holding no lock of it: each counts it
 *                   (rec_decided_unlocked), none installs anything, and
 *                   the objects keep the newer commit's values and
 *                   versions. With FARM_FP_REC_DECIDE_REINSTALL (a test
 *                   switch: the decision installs the LOCK record anyway)
 *                   the older images must be seen back.
 *   place_window    machine 1 commits a write to its own object (a
 *                   single-machine commit) and, between the commit's
 *                   placement and its first record, takes configuration
 *                   2, which moves one of the object's backups, then
 *                   starts recovery of 2. The commit was placed in
 *                   configuration 1 and its COMMIT-BACKUPs went to 1's
 *                   backups: it must abort, retryably, not install. With
 *                   FARM_FP_TX_CFG_LATE (a test switch: the commit reads
 *                   its configuration after placing, by the current
 *                   view) it is stamped 2 and installs.
 */
#include "asntx.h"

#include <inttypes.h>

#include "txn/txid.h"
#include "txn/txm.h"
#include "txn/txn_testing.h"
#include "util/fault.h"
#include "brokenarg.h"

#define RSIZE (16ull << 20)

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

/* Machines @from .. @to (indexes) take configuration @cid with ids
 * @ids. */
static void views(unsigned from, unsigned to, uint64_t cid, const uint32_t *ids,
                  unsigned n)
{
	for (unsigned m = from; m <= to; m++)
		assert_int_equal(farm_as_set_view(C.m[m].as, cid, ids, n), 0);
}

/* Machine index @m moves @amt from a's first byte to b's; its id in
 * *@txid when not NULL. */
static int transfer_by(unsigned m, farm_gaddr a, farm_gaddr b, uint8_t amt,
                       uint64_t *txid)
{
	farm_tx *tx = begin(m);
	const uint8_t *da, *db;
	assert_int_equal(rd(tx, a, 64, (const void **)&da), 0);
	assert_int_equal(rd(tx, b, 64, (const void **)&db), 0);
	uint8_t *wa, *wb;
	assert_int_equal(farm_tx_write(tx, a, (void **)&wa), 0);
	assert_int_equal(farm_tx_write(tx, b, (void **)&wb), 0);
	wa[0] = (uint8_t)(wa[0] - amt);
	wb[0] = (uint8_t)(wb[0] + amt);
	if (txid)
		*txid = farm_tx_testing_id(tx);
	int rc = commit(tx);
	farm_tx_free(tx);
	return rc;
}

/* Machine 3 moves @amt from a's first byte to b's. */
static int transfer(farm_gaddr a, farm_gaddr b, uint8_t amt)
{
	return transfer_by(2, a, b, amt, NULL);
}

static void test_stale_lock(void **state)
{
	(void)state;
	farm_fatptr a = make_obj(0, 64, 50), b = make_obj(1, 64, 50);
	assert_int_equal(primary_of(a.addr), 1);
	assert_int_equal(primary_of(b.addr), 2);
	farm_txm_stats p0[2] = {txm_stats(0), txm_stats(1)};
	const uint32_t ids[4] = {1, 2, 3, 4};
	views(0, 1, 2, ids, 4); /* the primaries: configuration 2 */
	int rc = transfer(a.addr, b.addr, 7);
	printf("stale_lock: commit from configuration 1 at primaries in 2: "
	       "%s\n",
	       farm_strerror(rc));
	assert_int_equal(rc, FARM_ECONFLICT);
	assert_true(farm_tx_retryable(rc));
	for (unsigned m = 0; m < 2; m++) {
		farm_txm_stats s = txm_stats(m);
		printf("stale_lock: machine %u: %" PRIu64 " stale LOCK(s) "
		       "refused, %" PRIu64 " locks granted\n",
		       m + 1, s.stale_refused - p0[m].stale_refused,
		       s.locks_granted - p0[m].locks_granted);
		assert_int_equal(s.stale_refused - p0[m].stale_refused, 1);
		assert_int_equal(s.locks_granted, p0[m].locks_granted);
	}
	/* Nothing locked, nothing changed, from any machine. */
	for (unsigned m = 0; m < 4; m++) {
		uint8_t buf[64];
		assert_int_equal(lf(m, a.addr, 64, a.incarnation, buf), 0);
		assert_int_equal(buf[0], 50);
		assert_int_equal(lf(m, b.addr, 64, b.incarnation, buf), 0);
		assert_int_equal(buf[0], 50);
	}
	/* The coordinator catches up: the retry commits. */
	views(2, 3, 2, ids, 4);
	assert_int_equal(transfer(a.addr, b.addr, 7), 0);
	uint8_t buf[64];
	assert_int_equal(lf(0, a.addr, 64, a.incarnation, buf), 0);
	assert_int_equal(buf[0], 43);
	for (unsigned m = 0; m < 2; m++)
		assert_int_equal(txm_stats(m).stale_refused,
		                 p0[m].stale_refused + 1);
}

/* Pump every loop until machine @m has refused @n more recovery messages
 * than @base (bounded), and a while more: how many it refused. */
static uint64_t pump_refused(unsigned m, uint64_t base, uint64_t n)
{
	uint64_t t0 = farm_now_ns();
	while (txm_stats(m).rec_refused < base + n &&
	       farm_now_ns() - t0 < 10000000000ull)
		asn_pump(&C);
	for (unsigned i = 0; i < 1000; i++) /* anything more would show */
		asn_pump(&C);
	return txm_stats(m).rec_refused - base;
}

static void wait_refused(unsigned m, uint64_t base, uint64_t n)
{
	assert_int_equal(pump_refused(m, base, n), n);
}

static void send_from(unsigned from, uint32_t to, uint16_t type, const void *p,
                      uint32_t len)
{
	assert_int_equal(farm_msg_send(C.m[from].loop, to, 0, type, p, len), 0);
}

/* Machines 1-3 remove machine 4 (node.c's apply_view, by hand) and pump
 * until each has finished its recovery round and, given @base, counted
 * more decisions without a LOCK than that (bounded). */
static void remove_machine4(const uint64_t *base)
{
	const uint32_t ids[3] = {1, 2, 3}, gone[1] = {4};
	for (unsigned m = 0; m < 3; m++) {
		assert_int_equal(farm_fabric_revoke(C.m[m].fab, 4), 0);
		assert_int_equal(farm_as_set_view(C.m[m].as, 2, ids, 3), 0);
		assert_int_equal(
		        farm_txm_reconfigure(C.m[m].txm, 2, gone, 1, ids, 3, 1),
		        0);
	}
	uint64_t t0 = farm_now_ns();
	for (bool all = false; !all && farm_now_ns() - t0 < 10000000000ull;) {
		asn_pump(&C);
		all = true;
		for (unsigned m = 0; m < 3; m++)
			all &= txm_stats(m).rec_t_active_ns != 0 &&
			       (!base ||
			        txm_stats(m).rec_decided_unlocked > base[m]);
	}
}

static void test_stale_messages(void **state)
{
	(void)state;
	for (unsigned m = 0; m < 4; m++)
		(void)make_obj(m, 64, (uint8_t)m); /* a region each */
	remove_machine4(NULL);
	const uint32_t ids[3] = {1, 2, 3}, gone[1] = {4};
	farm_txm_stats s1 = txm_stats(0), s2 = txm_stats(1);
	assert_true(s1.rec_t_active_ns && s2.rec_t_active_ns);
	assert_int_equal(
	        farm_txm_reconfigure(C.m[0].txm, 2, gone, 1, ids, 3, 1),
	        -ESTALE);
	printf("stale_messages: recovery without machine 4 done; refused "
	       "so far: %" PRIu64 " at the decider, %" PRIu64 " at machine 2\n",
	       s1.rec_refused, s2.rec_refused);
	const uint64_t txid = txid_make(4, 0, 77);

	/* To the decider (machine 1) from machine 2: a vote and an end of
	 * votes, of configurations 1 and 9; then the same vote of 2. */
	uint64_t base = txm_stats(0).rec_refused;
	for (uint64_t cfg = 1; cfg <= 9; cfg += 8) {
		struct rec_vote v = {
		        .cfg = cfg, .txid = txid, .coord = 4, .flags = 16};
		send_from(1, 1, FARM_MSGT_REC_VOTE, &v, sizeof(v));
		struct rec_end e = {.cfg = cfg, .coord = 4, .thread = 0};
		send_from(1, 1, FARM_MSGT_REC_END, &e, sizeof(e));
	}
	wait_refused(0, base, 4);
	struct rec_vote v = {.cfg = 2, .txid = txid, .coord = 4, .flags = 16};
	send_from(1, 1, FARM_MSGT_REC_VOTE, &v, sizeof(v));
	v.cfg = 1; /* behind it on the same channel: a barrier */
	send_from(1, 1, FARM_MSGT_REC_VOTE, &v, sizeof(v));
	wait_refused(0, base, 5); /* the current one was taken */

	/* From the decider to machine 2: a decision, an end of recovery, a
	 * start, of configurations 1 and 9; then the decision of 2. */
	base = txm_stats(1).rec_refused;
	farm_txm_stats before = txm_stats(1);
	for (uint64_t cfg = 1; cfg <= 9; cfg += 8) {
		struct rec_dec d = {
		        .cfg = cfg, .txid = txid, .coord = 4, .commit = 1};
		send_from(0, 2, FARM_MSGT_REC_DECIDE, &d, sizeof(d));
		struct rec_end e = {.cfg = cfg, .coord = 4, .thread = 0};
		send_from(0, 2, FARM_MSGT_REC_DONE, &e, sizeof(e));
		send_from(0, 2, FARM_MSGT_REC_GO, &e, sizeof(e));
	}
	wait_refused(1, base, 6);
	struct rec_dec d = {.cfg = 2, .txid = txid, .coord = 4, .commit = 1};
	send_from(0, 2, FARM_MSGT_REC_DECIDE, &d, sizeof(d));
	d.cfg = 1;
	send_from(0, 2, FARM_MSGT_REC_DECIDE, &d, sizeof(d));
	wait_refused(1, base, 7);
	farm_txm_stats after = txm_stats(1);
	assert_int_equal(after.rec_committed, before.rec_committed);
	assert_int_equal(after.installs, before.installs);

	/* From the removed machine, with the current id: fenced (the send or
	 * its write fails) or refused; never taken. */
	base = txm_stats(1).rec_refused;
	d.cfg = 2;
	int rc = farm_msg_send(C.m[3].loop, 2, 0, FARM_MSGT_REC_DECIDE, &d,
	                       sizeof(d));
	for (unsigned i = 0; i < 2000; i++)
		asn_pump(&C);
	uint64_t refused = txm_stats(1).rec_refused - base;
	printf("stale_messages: a decision from the removed machine: send "
	       "%s, %" PRIu64 " refused at machine 2\n",
	       farm_strerror(rc), refused);
	assert_true(refused <= 1);
	assert_int_equal(txm_stats(1).rec_committed, before.rec_committed);

	/* Not judged by configuration (reported, not asserted). */
	base = txm_stats(0).rec_refused;
	uint64_t qbase = txm_stats(1).rec_refused;
	struct rec_end ap = {.cfg = 1};
	send_from(1, 1, FARM_MSGT_REC_APPLIED, &ap, sizeof(ap));
	struct rec_q q = {.cfg = 1, .txid = txid_make(2, 0, 5)};
	send_from(2, 2, FARM_MSGT_REC_QUERY, &q, sizeof(q));
	v.cfg = 1;
	send_from(1, 1, FARM_MSGT_REC_VOTE, &v, sizeof(v)); /* barrier */
	d.cfg = 1;
	send_from(0, 2, FARM_MSGT_REC_DECIDE, &d, sizeof(d)); /* barrier */
	uint64_t na = pump_refused(0, base, 1) - 1,
	         nq = pump_refused(1, qbase, 1) - 1;
	printf("stale_messages: configuration 1's REC_APPLIED at the "
	       "decider: %s; REC_QUERY at machine 2: %s\n",
	       na ? "refused" : "not refused", nq ? "refused" : "not refused");
}

struct rec_count {
	uint64_t txid;
	unsigned lock, primary;
};

static void count_recs(void *ctx, uint32_t coord, int type, uint64_t txid)
{
	struct rec_count *c = ctx;
	if (coord != 4 || txid != c->txid)
		return;
	c->lock += type == FARM_TXN_TESTING_LOCK;
	c->primary += type == FARM_TXN_TESTING_COMMIT_PRIMARY;
}

/* The first byte of @a and its version, read in a transaction of
 * machine index @m. */
static uint8_t read_ver(unsigned m, farm_gaddr a, uint64_t *version)
{
	farm_tx *tx = begin(m);
	const uint8_t *d;
	assert_int_equal(rd(tx, a, 64, (const void **)&d), 0);
	uint8_t v = d[0];
	*version = farm_tx_testing_version(tx, a);
	farm_tx_free(tx);
	return v;
}

/* The scenario of decided_after_primary; returns how many of the
 * survivors' reads of the two objects found anything but the newer
 * commit's value and version. */
static unsigned decided_after_primary(bool broken)
{
	farm_fatptr a = make_obj(0, 64, 50), b = make_obj(1, 64, 50);
	assert_int_equal(primary_of(a.addr), 1);
	assert_int_equal(primary_of(b.addr), 2);
	/* T: machine 4's transfer, committed; its LOCK and COMMIT-PRIMARY
	 * records stay in the primaries' logs (nothing truncates them). */
	uint64_t t;
	assert_int_equal(transfer_by(3, a.addr, b.addr, 5, &t), 0);
	for (unsigned m = 0; m < 2; m++) {
		struct rec_count c = {.txid = t};
		(void)farm_txm_testing_records(C.m[m].txm, count_recs, &c);
		assert_int_equal(c.lock, 1);
		assert_int_equal(c.primary, 1);
	}
	/* T2: machine 3's, newer, of the same objects. */
	assert_int_equal(transfer_by(2, a.addr, b.addr, 3, NULL), 0);
	uint64_t va, vb;
	assert_int_equal(read_ver(0, a.addr, &va), 42);
	assert_int_equal(read_ver(0, b.addr, &vb), 58);
	farm_txm_stats s0[3] = {txm_stats(0), txm_stats(1), txm_stats(2)};
	uint64_t base[3];
	for (unsigned m = 0; m < 3; m++)
		base[m] = s0[m].rec_decided_unlocked;
	if (broken)
		assert_int_equal(farm_fault_set(FARM_FP_REC_DECIDE_REINSTALL,
		                                tu_switch_on, NULL),
		                 0);
	remove_machine4(base);
	for (unsigned i = 0; i < 1000; i++) /* anything more would show */
		asn_pump(&C);
	(void)farm_fault_set(FARM_FP_REC_DECIDE_REINSTALL, NULL, NULL);
	unsigned bad = 0;
	for (unsigned m = 0; m < 3; m++) {
		farm_txm_stats s = txm_stats(m);
		uint64_t v1, v2;
		uint8_t x = read_ver(m, a.addr, &v1),
		        y = read_ver(m, b.addr, &v2);
		printf("decided_after_primary%s: machine %u: %" PRIu64
		       " decision(s) without a lock, %" PRIu64
		       " install(s), %" PRIu64 " recovered commit(s); a = %u "
		       "(version %" PRIu64 "), b = %u (version %" PRIu64
		       "); the newer commit wrote 42 (%" PRIu64
		       "), 58 (%" PRIu64 ")\n",
		       broken ? " (reinstall switch)" : "", m + 1,
		       s.rec_decided_unlocked - s0[m].rec_decided_unlocked,
		       s.installs - s0[m].installs,
		       s.rec_committed - s0[m].rec_committed, x, v1, y, v2, va,
		       vb);
		assert_true(s.rec_decided_unlocked >
		            s0[m].rec_decided_unlocked);
		bad += (x != 42 || v1 != va) + (y != 58 || v2 != vb);
		if (!broken)
			assert_int_equal(s.installs, s0[m].installs);
	}
	return bad;
}

static void test_decided_after_primary(void **state)
{
	(void)state;
	assert_int_equal(decided_after_primary(false), 0);
}

/* The same with the decision installing anyway: the test must notice. */
static void test_decided_after_primary_broken(void **state)
{
	(void)state;
	if (!farm_fault_built())
		skip();
	unsigned bad = decided_after_primary(true);
	printf("decided_after_primary (reinstall switch): %u read(s) lost "
	       "the newer commit (must be > 0)\n",
	       bad);
	assert_true(bad > 0);
}

/* FARM_FP_TX_PLACED's hook: machine 1 takes configuration 2 (@arg: the
 * ids), once. */
static void place_hook(enum farm_fault_point fp, void *arg)
{
	const uint32_t *ids = arg;
	(void)farm_fault_set(fp, NULL, NULL);
	assert_int_equal(farm_as_set_view(C.m[0].as, 2, ids, 3), 0);
}

/* A write to @x by its primary's machine (index 0) with configuration 2
 * installed in its placement window, recovery of 2 started before the
 * commit goes on: the outcome. */
static int place_window(bool broken)
{
	farm_fatptr x = make_obj(0, 64, 50);
	uint32_t r1[FARM_RING_MAX_REPLICAS], r2[FARM_RING_MAX_REPLICAS];
	uint32_t reg = farm_gaddr_region(x.addr);
	unsigned n1 = farm_as_replicas(C.m[0].as, reg, r1);
	assert_int_equal(n1, 3);
	assert_int_equal(r1[0], 1);
	uint32_t gone[1] = {r1[2]}, ids[3], n = 0;
	for (uint32_t id = 1; id <= 4; id++)
		if (id != gone[0])
			ids[n++] = id;
	if (broken)
		assert_int_equal(
		        farm_fault_set(FARM_FP_TX_CFG_LATE, tu_switch_on, NULL),
		        0);
	farm_tx *tx = begin(0);
	const uint8_t *d;
	uint8_t *w;
	assert_int_equal(rd(tx, x.addr, 64, (const void **)&d), 0);
	assert_int_equal(farm_tx_write(tx, x.addr, (void **)&w), 0);
	w[0] = 43;
	struct res r = {0};
	assert_int_equal(farm_fault_set(FARM_FP_TX_PLACED, place_hook, ids), 0);
	assert_int_equal(farm_tx_commit(tx, op_cb, &r), 0);
	(void)farm_fault_set(FARM_FP_TX_PLACED, NULL, NULL);
	(void)farm_fault_set(FARM_FP_TX_CFG_LATE, NULL, NULL);
	/* The view moved a backup, not the primary. */
	assert_int_equal(farm_as_replicas(C.m[0].as, reg, r2), 3);
	assert_int_equal(r2[0], 1);
	assert_true(r2[1] != gone[0] && r2[2] != gone[0]);
	assert_int_equal(farm_fabric_revoke(C.m[0].fab, gone[0]), 0);
	assert_int_equal(
	        farm_txm_reconfigure(C.m[0].txm, 2, gone, 1, ids, 3, 1), 0);
	asn_wait(&C, &r.done);
	farm_tx_free(tx);
	printf("place_window%s: machine %u removed in the window; the "
	       "commit: %s\n",
	       broken ? " (broken)" : "", gone[0], farm_strerror(r.status));
	return r.status;
}

static void test_place_window(void **state)
{
	(void)state;
	int rc = place_window(false);
	assert_true(rc != 0 && farm_tx_retryable(rc));
}

/* The proof: stamped with the configuration read after the view moved,
 * the commit installs over the old configuration's backups. */
static void test_place_window_broken(void **state)
{
	(void)state;
	if (!farm_fault_built())
		skip();
	assert_int_equal(place_window(true), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_stale_lock, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_stale_messages, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_decided_after_primary,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_decided_after_primary_broken, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_place_window, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_place_window_broken, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
