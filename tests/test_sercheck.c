/*
 * The strict-serializability checker (tests/harness/sercheck.h) must pass valid
 * histories and report each known anomaly with the right kind, alone and
 * buried in a large valid history.
 *
 *   test_sercheck           the unit tests
 *   test_sercheck --big N   only a random serial history of N transactions
 *                           (about 5 ops each), timed
 *   test_sercheck --replay FILE...
 *                           check the histories a bank test kept
 *                           (FARM_HIST_DIR, tests/harness/recbank.c)
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "sercheck.h"

enum { R = 0, W = 1 };

struct op {
	int write;
	uint64_t key, ver;
};

/* Record one transaction: @n ops, then end. Returns its index. */
static int txn(sc_history *h, uint64_t t_inv, uint64_t t_done,
               enum sc_outcome oc, int n, const struct op *ops)
{
	int t = sc_txn_begin(h, t_inv);
	assert_true(t >= 0);
	for (int i = 0; i < n; i++) {
		int rc = ops[i].write ? sc_write(h, t, ops[i].key, ops[i].ver)
		                      : sc_read(h, t, ops[i].key, ops[i].ver);
		assert_int_equal(rc, 0);
	}
	assert_int_equal(sc_txn_end(h, t, t_done, oc), 0);
	return t;
}

#define TXN(h, inv, done, oc, ...)                                         \
	txn(h, inv, done, oc,                                              \
	    (int)(sizeof((struct op[]){__VA_ARGS__}) / sizeof(struct op)), \
	    (struct op[]){__VA_ARGS__})

/* Check, print the report, return the anomaly count. */
static int check(const sc_history *h, sc_report *r)
{
	int rc = sc_check(h, r);
	assert_true(rc >= 0);
	sc_report_print(stdout, r);
	assert_int_equal((uint64_t)rc, r->total);
	return rc;
}

/* Exactly one anomaly, of kind @k. Returns its description. */
static const char *expect_one(const sc_history *h, enum sc_kind k)
{
	static sc_report r;
	assert_int_equal(check(h, &r), 1);
	assert_int_equal(r.count[k], 1);
	assert_int_equal(r.nexamples, 1);
	assert_int_equal(r.examples[0].kind, k);
	return r.examples[0].text;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- valid histories --------------------------------------------------- */

static void test_empty_and_serial(void **state)
{
	(void)state;
	sc_report r;
	sc_history *h = sc_new();
	assert_int_equal(check(h, &r), 0);
	TXN(h, 0, 1, SC_COMMITTED, {W, 1, 1}, {W, 2, 1});
	TXN(h, 2, 3, SC_COMMITTED, {R, 1, 1}, {W, 1, 2}, {R, 3, 0});
	TXN(h, 4, 5, SC_COMMITTED, {R, 1, 2}, {R, 2, 1});
	TXN(h, 6, 7, SC_COMMITTED, {R, 1, 2}, {W, 2, 5}, {R, 2, 5});
	TXN(h, 8, 9, SC_COMMITTED, {R, 2, 5});
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.ncommitted, 5);
	sc_free(h);
}

static void test_concurrent_serializable(void **state)
{
	(void)state;
	sc_report r;
	sc_history *h = sc_new();
	/* Overlapping writers of disjoint keys. */
	TXN(h, 0, 100, SC_COMMITTED, {R, 1, 0}, {W, 1, 1});
	TXN(h, 10, 90, SC_COMMITTED, {R, 2, 0}, {W, 2, 1});
	TXN(h, 20, 30, SC_COMMITTED, {W, 3, 1});
	/* Read-only txns overlapping a writer: the old version ... */
	TXN(h, 200, 300, SC_COMMITTED, {R, 4, 0}, {W, 4, 1});
	TXN(h, 250, 350, SC_COMMITTED, {R, 4, 0});
	TXN(h, 150, 210, SC_COMMITTED, {R, 4, 0}, {R, 1, 1});
	/* ... or the new one, even finishing before the writer. */
	TXN(h, 260, 270, SC_COMMITTED, {R, 4, 1});
	/* Ties: done == inv is concurrent, the old version is fine. */
	TXN(h, 400, 500, SC_COMMITTED, {R, 5, 0}, {W, 5, 1});
	TXN(h, 500, 510, SC_COMMITTED, {R, 5, 0});
	/* Aborted txns constrain nothing, whatever they read. */
	TXN(h, 600, 610, SC_ABORTED, {R, 5, 77}, {R, 4, 0}, {W, 4, 2});
	TXN(h, 620, 630, SC_COMMITTED, {R, 4, 1}, {R, 5, 1});
	assert_int_equal(check(h, &r), 0);
	sc_free(h);
}

static void test_unknown_outcomes(void **state)
{
	(void)state;
	sc_report r;
	sc_history *h = sc_new();
	/* Observed: taken as committed, no G1a. Its own t_done (10) is when
	 * the client gave up, not when it committed: reading x@0 at 20 is
	 * fine. */
	TXN(h, 0, 10, SC_UNKNOWN, {W, 1, 1});
	TXN(h, 20, 25, SC_COMMITTED, {R, 1, 0});
	TXN(h, 30, 35, SC_COMMITTED, {R, 1, 1});
	/* Never observed: taken as aborted, its reads do not matter. */
	TXN(h, 40, 50, SC_UNKNOWN, {R, 2, 99}, {W, 2, 1});
	TXN(h, 60, 70, SC_COMMITTED, {R, 2, 0});
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.nunknown_included, 1);
	assert_int_equal(r.nunknown_dropped, 1);
	sc_free(h);

	/* Transitively observed: U1 -> U2 -> committed; U1's phantom read
	 * then counts. */
	h = sc_new();
	TXN(h, 0, 10, SC_UNKNOWN, {R, 9, 99}, {W, 1, 1});
	TXN(h, 0, 10, SC_UNKNOWN, {R, 1, 1}, {W, 2, 1});
	TXN(h, 20, 30, SC_COMMITTED, {R, 2, 1});
	expect_one(h, SC_PHANTOM_VERSION);
	sc_free(h);

	/* An observed unknown txn still orders after its invocation. */
	h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1});
	TXN(h, 20, 30, SC_UNKNOWN, {R, 1, 0}, {W, 2, 1});
	TXN(h, 40, 50, SC_COMMITTED, {R, 2, 1});
	expect_one(h, SC_REALTIME);
	sc_free(h);
}

/*
 * Two unknown transactions that claim the same version: the bank's
 * histories when both machines killed in a run were committing a transfer
 * (test_datarec copy_kill). U1, in flight at the first kill, really
 * aborted: C, committed after it, read a@0 and installed a@1 as U1 would
 * have. U2, in flight at the second kill, read b@0 (U1 never installed
 * b@1) and really committed b@1 and c@1, which the final scan read. Both
 * unknowns claim b@1. U1 cannot have committed without installing a@1
 * twice, so the only explanation without an anomaly is that U2 wrote the
 * b@1 the scan saw and U1 aborted; the first recorded claimant (U1) as
 * the source of b@1 would make two duplicate versions, a@1 (C, U1) and
 * b@1 (U1, U2).
 * (Keys a, b, c, d are 1, 2, 3, 4.)
 */
static void test_unknown_claimants(void **state)
{
	(void)state;
	sc_report r;
	sc_history *h = sc_new();
	/* Recorded in the order of the merged bank histories (by machine):
	 * C's machine first, then the two killed machines'. */
	TXN(h, 30, 60, SC_COMMITTED, {R, 1, 0}, {R, 4, 0}, {W, 1, 1},
	    {W, 4, 1});
	int u1 = TXN(h, 10, 10, SC_UNKNOWN, {R, 1, 0}, {R, 2, 0}, {W, 1, 1},
	             {W, 2, 1});
	int u2 = TXN(h, 50, 50, SC_UNKNOWN, {R, 2, 0}, {R, 3, 0}, {W, 2, 1},
	             {W, 3, 1});
	TXN(h, 100, 110, SC_COMMITTED, {R, 1, 1}, {R, 2, 1}, {R, 3, 1},
	    {R, 4, 1});
	assert_true(u1 < u2); /* U1 is the first recorded claimant of b@1 */
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.nunknown_included, 1);
	assert_int_equal(r.nunknown_dropped, 1);
	sc_free(h);

	/* Neither claimant of b@1 installs a version a committed one does
	 * (a@1 is U1's alone), but the scan's read of c@1 needs U2: it is
	 * the explanation of b@1 too, and U1 aborted. */
	h = sc_new();
	u1 = TXN(h, 10, 10, SC_UNKNOWN, {R, 1, 0}, {R, 2, 0}, {W, 1, 1},
	         {W, 2, 1});
	u2 = TXN(h, 50, 50, SC_UNKNOWN, {R, 2, 0}, {R, 3, 0}, {W, 2, 1},
	         {W, 3, 1});
	TXN(h, 100, 110, SC_COMMITTED, {R, 1, 0}, {R, 2, 1}, {R, 3, 1});
	assert_true(u1 < u2);
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.nunknown_included, 1);
	assert_int_equal(r.nunknown_dropped, 1);
	sc_free(h);

	/* A claimant that a read needs is included even when it installs a
	 * version a committed transaction installs too: with no other
	 * writer of b@1, U1 must have committed, and a@1 was installed
	 * twice. */
	h = sc_new();
	TXN(h, 10, 10, SC_UNKNOWN, {R, 1, 0}, {R, 2, 0}, {W, 1, 1}, {W, 2, 1});
	TXN(h, 30, 40, SC_COMMITTED, {R, 1, 0}, {W, 1, 1});
	TXN(h, 100, 110, SC_COMMITTED, {R, 1, 1}, {R, 2, 1});
	expect_one(h, SC_DUPLICATE_VERSION);
	sc_free(h);
}

/* ---- random serial histories ------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

enum inject { INJ_NONE, INJ_LOST_UPDATE, INJ_WRITE_SKEW, INJ_STALE_READ };

struct sim {
	uint64_t *cur, *prev, *last_done;
	uint8_t *last_committed; /* cur was installed by a committed txn */
	uint32_t nkeys;
	uint64_t c; /* the serial execution's clock (commit points) */
};

/*
 * Simulate a serial execution of @n transactions over @nkeys keys with up
 * to @maxops ops each: txn i commits at point c_i (non-decreasing, ties
 * allowed) inside [t_inv, t_done], so real time agrees with the serial
 * order while intervals overlap at random. 88% commit, 6% abort, 6% are
 * unknown (half of them really committed). Then inject @inj once, in the
 * middle.
 */
static void simulate(sc_history *h, size_t n, uint32_t nkeys, int maxops,
                     uint64_t seed, enum inject inj)
{
	struct sim s = {.nkeys = nkeys, .c = 1000};
	s.cur = calloc(nkeys, sizeof(uint64_t));
	s.prev = calloc(nkeys, sizeof(uint64_t));
	s.last_done = calloc(nkeys, sizeof(uint64_t));
	s.last_committed = calloc(nkeys, 1);
	assert_non_null(s.cur);
	assert_non_null(s.prev);
	assert_non_null(s.last_done);
	assert_non_null(s.last_committed);
	rng_state = seed * 2654435761u + 1;
	struct {
		uint64_t key, ver;
	} staged[64];
	for (size_t i = 0; i < n; i++) {
		if (i == n / 2 && inj != INJ_NONE) {
			uint64_t k = rnd() % nkeys, k2 = (k + 1) % nkeys;
			uint64_t t = s.c + 1;
			if (inj == INJ_LOST_UPDATE) {
				uint64_t v = s.cur[k];
				TXN(h, t, t + 5, SC_COMMITTED, {R, k, v},
				    {W, k, v + 1});
				TXN(h, t, t + 5, SC_COMMITTED, {R, k, v},
				    {W, k, v + 2});
				s.prev[k] = v + 1;
				s.cur[k] = v + 2;
				s.last_committed[k] = 1;
				s.last_done[k] = t + 5;
			} else if (inj == INJ_WRITE_SKEW) {
				uint64_t a = s.cur[k], b = s.cur[k2];
				TXN(h, t, t + 5, SC_COMMITTED, {R, k, a},
				    {R, k2, b}, {W, k, a + 1});
				TXN(h, t, t + 5, SC_COMMITTED, {R, k, a},
				    {R, k2, b}, {W, k2, b + 1});
				s.prev[k] = a;
				s.cur[k] = a + 1;
				s.prev[k2] = b;
				s.cur[k2] = b + 1;
				s.last_committed[k] = s.last_committed[k2] = 1;
				s.last_done[k] = s.last_done[k2] = t + 5;
			} else {
				/* A read-only txn, invoked after the last
				 * writer of k completed, sees the version
				 * before it. */
				while (!s.cur[k] || !s.last_committed[k])
					k = (k + 1) % nkeys;
				uint64_t inv = s.last_done[k] + 1;
				TXN(h, inv, inv + 1, SC_COMMITTED,
				    {R, k, s.prev[k]});
			}
			s.c = t + 1;
		}
		s.c += rnd() % 3;
		uint64_t c = s.c;
		uint64_t inv = c - rnd() % 20, done = c + rnd() % 20;
		unsigned roll = rnd() % 100;
		enum sc_outcome oc = roll < 88   ? SC_COMMITTED
		                     : roll < 94 ? SC_ABORTED
		                                 : SC_UNKNOWN;
		int applies =
		        oc == SC_COMMITTED || (oc == SC_UNKNOWN && (rnd() & 1));
		int t = sc_txn_begin(h, inv);
		assert_true(t >= 0);
		int nops = 1 + (int)(rnd() % (unsigned)maxops), ns = 0;
		for (int j = 0; j < nops; j++) {
			uint64_t k = rnd() % nkeys;
			int own = -1;
			for (int x = 0; x < ns; x++)
				if (staged[x].key == k)
					own = x;
			if (rnd() & 1) {
				uint64_t v =
				        own >= 0 ? staged[own].ver : s.cur[k];
				if (!applies && (rnd() % 8) == 0)
					v += 7; /* garbage nobody checks */
				assert_int_equal(sc_read(h, t, k, v), 0);
			} else {
				uint64_t base =
				        own >= 0 ? staged[own].ver : s.cur[k];
				uint64_t v = base + 1 + rnd() % 2; /* gaps */
				/* An unknown txn that did not commit claims
				 * a version nobody else does (else which of
				 * two unknown writers a read saw would be
				 * ambiguous). Aborted ones may collide. */
				if (oc == SC_UNKNOWN && !applies)
					v += 1ull << 40;
				assert_int_equal(sc_write(h, t, k, v), 0);
				if (own < 0)
					own = ns++;
				staged[own].key = k;
				staged[own].ver = v;
			}
		}
		assert_int_equal(sc_txn_end(h, t, done, oc), 0);
		if (!applies)
			continue;
		for (int x = 0; x < ns; x++) {
			uint64_t k = staged[x].key;
			s.prev[k] = s.cur[k];
			s.cur[k] = staged[x].ver;
			s.last_committed[k] = oc == SC_COMMITTED;
			s.last_done[k] = done;
		}
	}
	free(s.cur);
	free(s.prev);
	free(s.last_done);
	free(s.last_committed);
}

static void test_random_serial(void **state)
{
	(void)state;
	sc_report r;
	for (uint64_t seed = 1; seed <= 20; seed++) {
		sc_history *h = sc_new();
		simulate(h, 500, 1 + seed % 7, 6, seed, INJ_NONE);
		assert_int_equal(sc_check(h, &r), 0);
		sc_free(h);
	}
	sc_history *h = sc_new();
	double t0 = now_ms();
	simulate(h, 200000, 10000, 8, 42, INJ_NONE);
	double t1 = now_ms();
	assert_int_equal(check(h, &r), 0);
	printf("sercheck: 200k-txn serial history (%" PRIu64
	       " ops) generated in %.0f ms, checked in %.0f ms\n",
	       r.nops, t1 - t0, r.elapsed_ms);
	assert_true(r.nunknown_included > 0);
	assert_true(r.nunknown_dropped > 0);
	sc_free(h);
}

/* ---- each anomaly ------------------------------------------------------ */

static void test_lost_update(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {R, 7, 0}, {W, 7, 1});
	TXN(h, 0, 10, SC_COMMITTED, {R, 7, 0}, {W, 7, 2});
	const char *d = expect_one(h, SC_GSINGLE);
	assert_non_null(strstr(d, "lost update of key 7"));
	assert_non_null(strstr(d, "T0"));
	assert_non_null(strstr(d, "T1"));
	sc_free(h);
}

static void test_write_skew(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {R, 1, 0}, {R, 2, 0}, {W, 1, 1});
	TXN(h, 0, 10, SC_COMMITTED, {R, 1, 0}, {R, 2, 0}, {W, 2, 1});
	const char *d = expect_one(h, SC_G2);
	assert_non_null(strstr(d, "write skew"));
	sc_free(h);
}

static void test_stale_read(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1});
	TXN(h, 20, 30, SC_COMMITTED, {R, 1, 0});
	const char *d = expect_one(h, SC_REALTIME);
	assert_non_null(strstr(d, "done 10 < inv 20"));
	sc_free(h);
	/* Same, but the reader is a lock-free read that starts at the very
	 * instant the write completes: concurrent, fine. */
	h = sc_new();
	sc_report r;
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1});
	TXN(h, 10, 30, SC_COMMITTED, {R, 1, 0});
	assert_int_equal(check(h, &r), 0);
	sc_free(h);
}

static void test_aborted_read(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_ABORTED, {W, 1, 1});
	TXN(h, 20, 30, SC_COMMITTED, {R, 1, 1});
	const char *d = expect_one(h, SC_ABORTED_READ);
	assert_non_null(strstr(d, "aborted T0"));
	sc_free(h);
}

static void test_phantom_version(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1});
	TXN(h, 20, 30, SC_COMMITTED, {R, 1, 5});
	const char *d = expect_one(h, SC_PHANTOM_VERSION);
	assert_non_null(strstr(d, "key 1 version 5"));
	sc_free(h);
}

static void test_duplicate_version(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1});
	TXN(h, 20, 30, SC_COMMITTED, {W, 1, 1});
	const char *d = expect_one(h, SC_DUPLICATE_VERSION);
	assert_non_null(strstr(d, "T0 and T1"));
	sc_free(h);
}

static void test_g0(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1}, {W, 2, 2});
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 2}, {W, 2, 1});
	expect_one(h, SC_G0);
	sc_free(h);
}

static void test_g1c(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1}, {R, 2, 1});
	TXN(h, 0, 10, SC_COMMITTED, {W, 2, 1}, {R, 1, 1});
	expect_one(h, SC_G1C);
	sc_free(h);
}

static void test_g1b_and_internal(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	/* T0 writes key 1 twice: v1 is intermediate. */
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1}, {R, 1, 1}, {W, 1, 2});
	TXN(h, 20, 30, SC_COMMITTED, {R, 1, 1});
	expect_one(h, SC_INTERMEDIATE_READ);
	sc_free(h);

	h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1}, {R, 1, 0});
	const char *d = expect_one(h, SC_INTERNAL);
	assert_non_null(strstr(d, "after writing version 1"));
	sc_free(h);

	/* Reading the own write before making it. */
	h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {R, 1, 1}, {W, 1, 1});
	expect_one(h, SC_INTERNAL);
	sc_free(h);
}

/* A fractured read: a read-only txn sees one of T0's writes but not the
 * other (read skew: one rw). */
static void test_read_skew(void **state)
{
	(void)state;
	sc_history *h = sc_new();
	TXN(h, 0, 10, SC_COMMITTED, {W, 1, 1}, {W, 2, 1});
	TXN(h, 0, 10, SC_COMMITTED, {R, 1, 1}, {R, 2, 0});
	expect_one(h, SC_GSINGLE);
	sc_free(h);
}

static void buried(enum inject inj, enum sc_kind k)
{
	sc_history *h = sc_new();
	simulate(h, 100000, 5000, 6, 7, inj);
	expect_one(h, k);
	sc_free(h);
}

static void test_buried(void **state)
{
	(void)state;
	buried(INJ_LOST_UPDATE, SC_GSINGLE);
	buried(INJ_WRITE_SKEW, SC_G2);
	buried(INJ_STALE_READ, SC_REALTIME);
}

/* Per-thread histories, merged. The lost update spans both. */
static void test_merge(void **state)
{
	(void)state;
	sc_report r;
	sc_history *a = sc_new(), *b = sc_new();
	TXN(a, 0, 1, SC_COMMITTED, {W, 1, 1});
	TXN(a, 10, 20, SC_COMMITTED, {R, 1, 1}, {W, 1, 2});
	TXN(b, 2, 3, SC_COMMITTED, {R, 1, 1});
	int tb = TXN(b, 10, 20, SC_COMMITTED, {R, 1, 1}, {W, 1, 3});
	assert_int_equal(sc_check(a, &r), 0);
	assert_int_equal(sc_check(b, &r), 2); /* v1 has no writer in b */
	assert_int_equal(sc_merge(a, b), 2);
	assert_int_equal(sc_ntxns(a), 4);
	const char *d = expect_one(a, SC_GSINGLE);
	char name[16];
	snprintf(name, sizeof(name), "T%d", 2 + tb);
	assert_non_null(strstr(d, name));
	sc_free(a);
	sc_free(b);
}

static void test_malformed(void **state)
{
	(void)state;
	sc_report r;
	assert_int_equal(sc_check(NULL, &r), -EINVAL);
	sc_history *h = sc_new();
	assert_int_equal(sc_check(h, NULL), -EINVAL);
	assert_int_equal(sc_read(h, 0, 1, 0), -EINVAL); /* never begun */
	assert_int_equal(sc_check(h, &r), -EINVAL);     /* sticky */
	sc_free(h);

	h = sc_new();
	int t = sc_txn_begin(h, 10);
	assert_int_equal(sc_read(h, -1, 1, 0), -EINVAL);
	sc_free(h);

	h = sc_new();
	t = sc_txn_begin(h, 10);
	assert_int_equal(sc_write(h, t, 1, 0), -EINVAL); /* version 0 */
	assert_int_equal(sc_check(h, &r), -EINVAL);
	sc_free(h);

	h = sc_new();
	t = sc_txn_begin(h, 10);
	assert_int_equal(sc_txn_end(h, t, 5, SC_COMMITTED), -EINVAL);
	sc_free(h);

	h = sc_new();
	t = sc_txn_begin(h, 10);
	assert_int_equal(sc_txn_end(h, t, 10, (enum sc_outcome)9), -EINVAL);
	sc_free(h);

	h = sc_new();
	t = sc_txn_begin(h, 10);
	assert_int_equal(sc_txn_end(h, t, 20, SC_COMMITTED), 0);
	assert_int_equal(sc_txn_end(h, t, 20, SC_COMMITTED), -EINVAL);
	assert_int_equal(sc_read(h, t, 1, 0), -EINVAL); /* after its end */
	assert_int_equal(sc_check(h, &r), -EINVAL);
	sc_free(h);

	h = sc_new();
	t = sc_txn_begin(h, 10);
	assert_int_equal(sc_read(h, t, 1, 0), 0);
	assert_int_equal(sc_check(h, &r), -EINVAL); /* never ended */
	sc_free(h);

	sc_history *a = sc_new();
	assert_int_equal(sc_merge(a, a), -EINVAL);
	sc_free(a);
}

static int big(size_t n)
{
	sc_history *h = sc_new();
	double t0 = now_ms();
	simulate(h, n, (uint32_t)(n / 10 + 1), 9, 99, INJ_NONE);
	double t1 = now_ms();
	sc_report r;
	int rc = sc_check(h, &r);
	sc_report_print(stdout, &r);
	printf("sercheck: %zu txns, %" PRIu64 " ops: generated in %.0f ms, "
	       "checked in %.0f ms, rc %d\n",
	       n, r.nops, t1 - t0, r.elapsed_ms, rc);
	sc_free(h);
	return rc == 0 ? 0 : 1;
}

/*
 * --replay FILE...: the machines' streamed histories (tests/harness/txproc.h:
 * (tag, x, y) triples, BEGIN 1, READ 2, WRITE 3, END 4), merged in the
 * order given as tx_check_history merges them, a history that ends inside a
 * transaction ending it as unknown (a killed machine's), then checked.
 * Exits 0 when strictly serializable, 1 with anomalies, 2 on bad input.
 */
static int replay(int n, char **files)
{
	sc_history *h = sc_new();
	if (!h)
		return 2;
	int bad = 0;
	for (int i = 0; i < n && !bad; i++) {
		FILE *f = fopen(files[i], "rb");
		if (!f) {
			fprintf(stderr, "%s: %s\n", files[i], strerror(errno));
			bad = 1;
			break;
		}
		uint64_t v[3], t_inv = 0;
		int t = -1;
		while (!bad && fread(v, sizeof(v), 1, f) == 1) {
			if (v[0] == 1 && t < 0) {
				t = sc_txn_begin(h, v[1]);
				t_inv = v[1];
			} else if (v[0] == 2 && t >= 0) {
				bad = sc_read(h, t, v[1], v[2]) != 0;
			} else if (v[0] == 3 && t >= 0) {
				bad = sc_write(h, t, v[1], v[2]) != 0;
			} else if (v[0] == 4 && t >= 0) {
				bad = sc_txn_end(h, t, v[1],
				                 (enum sc_outcome)v[2]) != 0;
				t = -1;
			} else {
				bad = 1;
			}
		}
		fclose(f);
		if (!bad && t >= 0) {
			printf("%s: ends inside a transaction: unknown\n",
			       files[i]);
			bad = sc_txn_end(h, t, t_inv, SC_UNKNOWN) != 0;
		}
		if (bad)
			fprintf(stderr, "%s: not a history\n", files[i]);
	}
	sc_report r;
	int rc = bad ? -EINVAL : sc_check(h, &r);
	if (rc >= 0)
		sc_report_print(stdout, &r);
	sc_free(h);
	return rc < 0 ? 2 : rc > 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--big") == 0)
		return big(strtoull(argv[2], NULL, 0));
	if (argc > 2 && strcmp(argv[1], "--replay") == 0)
		return replay(argc - 2, argv + 2);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_empty_and_serial),
	        cmocka_unit_test(test_concurrent_serializable),
	        cmocka_unit_test(test_unknown_outcomes),
	        cmocka_unit_test(test_unknown_claimants),
	        cmocka_unit_test(test_random_serial),
	        cmocka_unit_test(test_lost_update),
	        cmocka_unit_test(test_write_skew),
	        cmocka_unit_test(test_stale_read),
	        cmocka_unit_test(test_aborted_read),
	        cmocka_unit_test(test_phantom_version),
	        cmocka_unit_test(test_duplicate_version),
	        cmocka_unit_test(test_g0),
	        cmocka_unit_test(test_g1c),
	        cmocka_unit_test(test_g1b_and_internal),
	        cmocka_unit_test(test_read_skew),
	        cmocka_unit_test(test_buried),
	        cmocka_unit_test(test_merge),
	        cmocka_unit_test(test_malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
