/*
 * The linearizability checker (tests/harness/lincheck.h) must pass linearizable
 * key-value histories, find each known violation alone and buried in a
 * large valid history, agree with a brute-force checker on small random
 * histories, reject malformed input and give up on budget.
 *
 *   test_lincheck                the unit tests
 *   test_lincheck --filter PAT   only the tests matching PAT (cmocka)
 *   test_lincheck --big N K C [L] only a random linearizable history of N
 *                                ops over K keys by C clients, L per mille
 *                                without response (default 5), timed
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "lincheck.h"

#define NR LC_NO_RESPONSE

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Shorthands: client, key, times. */
static void get(lc_history *h, uint32_t c, uint64_t k, uint64_t v, uint64_t inv,
                uint64_t resp)
{
	assert_true(lc_op(h, c, LC_GET, k, v, true, inv, resp) >= 0);
}

static void get_absent(lc_history *h, uint32_t c, uint64_t k, uint64_t inv,
                       uint64_t resp)
{
	assert_true(lc_op(h, c, LC_GET, k, 0, false, inv, resp) >= 0);
}

static void put(lc_history *h, uint32_t c, uint64_t k, uint64_t v, uint64_t inv,
                uint64_t resp)
{
	assert_true(lc_op(h, c, LC_PUT, k, v, false, inv, resp) >= 0);
}

static void del(lc_history *h, uint32_t c, uint64_t k, bool found, uint64_t inv,
                uint64_t resp)
{
	assert_true(lc_op(h, c, LC_DEL, k, 0, found, inv, resp) >= 0);
}

/* Check, print the report, return the violation count. */
static int check(const lc_history *h, lc_report *r)
{
	int rc = lc_check(h, r, 0);
	assert_true(rc >= 0);
	lc_report_print(stdout, r);
	assert_int_equal((uint64_t)rc, r->nviolations);
	return rc;
}

static void expect_ok(const lc_history *h)
{
	lc_report r;
	assert_int_equal(check(h, &r), 0);
}

/* Exactly one key without linearization, @key; its text contains each of
 * the NULL-terminated strings. */
static void expect_bad(const lc_history *h, uint64_t key, ...)
{
	static lc_report r;
	assert_int_equal(check(h, &r), 1);
	assert_int_equal(r.nexamples, 1);
	assert_int_equal(r.examples[0].key, key);
	va_list ap;
	va_start(ap, key);
	for (const char *s; (s = va_arg(ap, const char *));) {
		if (!strstr(r.examples[0].text, s))
			fail_msg("'%s' not in: %s", s, r.examples[0].text);
	}
	va_end(ap);
}

/* ---- linearizable histories -------------------------------------------- */

static void test_sequential(void **state)
{
	(void)state;
	lc_history *h = lc_new();
	expect_ok(h);
	get_absent(h, 0, 1, 0, 1);
	put(h, 0, 1, 10, 2, 3);
	get(h, 1, 1, 10, 4, 5);
	put(h, 1, 1, 11, 6, 7);
	get(h, 0, 1, 11, 8, 9);
	del(h, 0, 1, true, 10, 11);
	get_absent(h, 1, 1, 12, 13);
	del(h, 1, 1, false, 14, 15);
	assert_true(lc_op(h, 0, LC_DEL_ANY, 1, 0, false, 16, 17) >= 0);
	put(h, 0, 2, 20, 0, 1);
	get(h, 0, 2, 20, 18, 19);
	assert_int_equal(lc_nops(h), 11);
	expect_ok(h);
	lc_free(h);
}

static void test_concurrent(void **state)
{
	(void)state;
	/* A get overlapping a put may return the old or the new value, and
	 * may even finish before the put does. */
	for (int sees_new = 0; sees_new < 2; sees_new++) {
		lc_history *h = lc_new();
		put(h, 0, 1, 1, 0, 10);
		put(h, 0, 1, 2, 20, 100);
		get(h, 1, 1, sees_new ? 2 : 1, 30, 40);
		get(h, 2, 1, 2, 101, 110);
		expect_ok(h);
		lc_free(h);
	}
	/* Two overlapping puts: either order, as long as later reads agree
	 * with it. */
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	put(h, 1, 1, 2, 0, 10);
	get(h, 2, 1, 1, 20, 30);
	get(h, 2, 1, 1, 40, 50);
	expect_ok(h);
	lc_free(h);
	/* Ties: a get invoked at the instant a put returns is concurrent. */
	h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	get_absent(h, 1, 1, 10, 20);
	expect_ok(h);
	lc_free(h);
	/* A read observes a put that is still in progress; a second read
	 * that starts later must see it too (or a newer value). */
	h = lc_new();
	put(h, 0, 1, 5, 0, 100);
	get(h, 1, 1, 5, 10, 20);
	get(h, 2, 1, 5, 30, 40);
	del(h, 1, 1, true, 50, 60);
	get_absent(h, 2, 1, 70, 80);
	expect_ok(h);
	lc_free(h);
}

static void test_deletes(void **state)
{
	(void)state;
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	/* Two concurrent deletes: exactly one finds it. */
	del(h, 0, 1, true, 20, 30);
	del(h, 1, 1, false, 20, 30);
	get_absent(h, 2, 1, 40, 50);
	/* A delete without a result, concurrent with a put. */
	assert_true(lc_op(h, 0, LC_DEL_ANY, 1, 0, false, 60, 70) >= 0);
	put(h, 1, 1, 2, 65, 75);
	get(h, 2, 1, 2, 80, 90);
	expect_ok(h);
	lc_free(h);

	/* Both finding it is wrong. */
	h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	del(h, 0, 1, true, 20, 30);
	del(h, 1, 1, true, 20, 30);
	expect_bad(h, 1, "Longest linearizable prefix", NULL);
	lc_free(h);
}

static void test_no_response(void **state)
{
	(void)state;
	/* A put that never returned, observed later: it took effect. */
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	put(h, 1, 1, 2, 20, NR);
	get(h, 2, 1, 1, 30, 40);
	get(h, 2, 1, 2, 50, 60);
	get(h, 0, 1, 2, 1000, 1010);
	expect_ok(h);
	lc_free(h);
	/* Never observed: it did not (or not yet). */
	h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	put(h, 1, 1, 2, 20, NR);
	get(h, 2, 1, 1, 30, 40);
	get(h, 2, 1, 1, 5000, 5010);
	expect_ok(h);
	lc_free(h);
	/* But it cannot take effect before it was invoked, nor twice. */
	h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	put(h, 1, 1, 2, 20, NR);
	get(h, 2, 1, 2, 12, 15);
	expect_bad(h, 1, NULL);
	lc_free(h);
	h = lc_new();
	put(h, 1, 1, 2, 20, NR);
	get(h, 2, 1, 2, 30, 40);
	put(h, 0, 1, 1, 50, 60);
	get(h, 2, 1, 2, 70, 80);
	expect_bad(h, 1, "op 3 get -> 2", NULL);
	lc_free(h);
	/* Begin/end pairs; one never ended; a lost get and a lost delete;
	 * a lost multi-get. */
	h = lc_new();
	lc_report r;
	int a = lc_begin(h, 0, LC_PUT, 3, 7, 0);
	int b = lc_begin(h, 1, LC_GET, 3, 0, 1);
	int d = lc_begin(h, 2, LC_DEL, 3, 0, 2);
	assert_int_equal(lc_begin(h, 3, LC_PUT, 3, 8, 3), 3); /* open */
	assert_int_equal(lc_end(h, a, 0, false, 10), 0);
	assert_int_equal(lc_end(h, b, 99, true, NR), 0); /* dropped */
	assert_int_equal(lc_end(h, d, 0, true, NR), 0);  /* any */
	int g = lc_begin(h, 1, LC_GET, 3, 0, 20);
	assert_int_equal(lc_end(h, g, 8, true, 30), 0);
	uint64_t keys[2] = {3, 4};
	assert_int_equal(lc_mget(h, 1, 2, keys, NULL, NULL, 40, NR), 5);
	g = lc_begin(h, 1, LC_GET, 3, 0, 50);
	assert_int_equal(lc_end(h, g, 0, false, 60), 0);
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.nno_response, 5);
	assert_int_equal(r.ndropped_gets, 3);
	lc_free(h);
}

static void test_mget(void **state)
{
	(void)state;
	/* Each key's read is checked, not the batch's atomicity: this
	 * multi-get sees key 2's new value and key 1's old one although key
	 * 1 was written first (both puts overlap it). */
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	put(h, 0, 1, 2, 20, 30);
	put(h, 1, 2, 3, 31, 40);
	uint64_t keys[3] = {1, 2, 9};
	uint64_t vals[3] = {1, 3, 0};
	bool found[3] = {true, true, false};
	assert_int_equal(lc_mget(h, 2, 3, keys, vals, found, 15, 50), 3);
	lc_report r;
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.nmget_gets, 3);
	/* A stale key inside a multi-get is found. */
	vals[0] = 1;
	assert_int_equal(lc_mget(h, 2, 3, keys, vals, found, 60, 70), 6);
	expect_bad(h, 1, "stale read", "mget -> 1", NULL);
	lc_free(h);
}

/* ---- each violation ---------------------------------------------------- */

static void test_stale_read(void **state)
{
	(void)state;
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	get_absent(h, 1, 1, 20, 30);
	expect_bad(h, 1, "stale read", "op 1 get -> absent (client 1, 20..30)",
	           "op 0 put 1 (client 0, 0..10) completed before", NULL);
	lc_free(h);

	h = lc_new();
	put(h, 0, 7, 1, 0, 10);
	put(h, 1, 7, 2, 20, 30);
	get(h, 2, 7, 1, 40, 50);
	expect_bad(h, 7, "stale read", "was overwritten by op 1 put 2",
	           "the key holds 2 (set by op 1 put 2", NULL);
	lc_free(h);
}

static void test_never_written(void **state)
{
	(void)state;
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	put(h, 1, 1, 2, 5, 30);
	get(h, 2, 1, 3, 0, 50);
	expect_bad(h, 1, "value never written", "get -> 3", NULL);
	lc_free(h);
}

static void test_read_after_delete(void **state)
{
	(void)state;
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	del(h, 1, 1, true, 20, 30);
	get(h, 2, 1, 1, 40, 50);
	expect_bad(h, 1, "stale read", "was deleted by op 1 del -> found",
	           NULL);
	lc_free(h);
}

static void test_lost_update(void **state)
{
	(void)state;
	/* A put completes, then a delete does not find the key. */
	lc_history *h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	del(h, 1, 1, false, 20, 30);
	expect_bad(h, 1, "lost update", NULL);
	lc_free(h);
	/* Two concurrent puts, then reads that flip between them: one
	 * update was lost, then came back. */
	h = lc_new();
	put(h, 0, 1, 1, 0, 10);
	put(h, 1, 1, 2, 0, 10);
	get(h, 2, 1, 1, 20, 30);
	get(h, 2, 1, 2, 40, 50);
	expect_bad(h, 1, "Longest linearizable prefix: 3 ops", NULL);
	lc_free(h);
}

/* ---- brute force ------------------------------------------------------- */

struct bop {
	int kind;
	uint64_t v;
	bool found;
	uint64_t inv, resp;
};

/* Is there an order of a subset of @o (all responded ops included) that
 * respects real time and the model? Plain recursion, n <= 8. */
static bool brute(const struct bop *o, int n, unsigned used, bool present,
                  uint64_t v)
{
	bool done = true;
	for (int i = 0; i < n; i++)
		if (!(used & (1u << i)) && o[i].resp != NR &&
		    !(o[i].kind == LC_GET && o[i].resp == NR))
			done = false;
	if (done)
		return true;
	for (int i = 0; i < n; i++) {
		if (used & (1u << i))
			continue;
		/* i must not follow an unused op that precedes it. */
		bool minimal = true;
		for (int j = 0; j < n && minimal; j++)
			if (j != i && !(used & (1u << j)) && o[j].resp != NR &&
			    o[j].resp < o[i].inv)
				minimal = false;
		if (!minimal)
			continue;
		bool p2 = present, ok = true;
		uint64_t v2 = v;
		switch (o[i].kind) {
		case LC_GET:
			if (o[i].resp == NR)
				ok = false; /* dropped */
			else
				ok = o[i].found ? present && v == o[i].v
				                : !present;
			break;
		case LC_PUT:
			p2 = true;
			v2 = o[i].v;
			break;
		case LC_DEL:
			ok = o[i].resp == NR || o[i].found == present;
			p2 = false;
			v2 = 0;
			break;
		default: p2 = false; v2 = 0;
		}
		if (ok && brute(o, n, used | (1u << i), p2, v2))
			return true;
	}
	return false;
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* 20000 random histories, a write without response in @nr_pct % of ops. */
static void brute_run(unsigned nr_pct)
{
	rng_state = 12345;
	int agree_ok = 0, agree_bad = 0;
	for (int iter = 0; iter < 20000; iter++) {
		int n = 2 + (int)(rnd() % 7);
		struct bop o[9];
		lc_history *h = lc_new();
		for (int i = 0; i < n; i++) {
			o[i].kind = 1 + (int)(rnd() % 4);
			o[i].v = 1 + rnd() % 3;
			o[i].found = rnd() % 3 != 0;
			o[i].inv = rnd() % 20;
			o[i].resp = rnd() % 100 < nr_pct
			                    ? NR
			                    : o[i].inv + rnd() % 10;
			if (o[i].kind == LC_GET && !o[i].found)
				o[i].v = 0;
			assert_true(lc_op(h, (uint32_t)i,
			                  (enum lc_kind)o[i].kind, 5, o[i].v,
			                  o[i].found, o[i].inv,
			                  o[i].resp) >= 0);
		}
		bool want = brute(o, n, 0, false, 0);
		lc_report r;
		int rc = lc_check(h, &r, 0);
		if (rc != (want ? 0 : 1)) {
			lc_report_print(stdout, &r);
			for (int i = 0; i < n; i++)
				printf("  %d: kind %d v %" PRIu64
				       " found %d %" PRIu64 "..%" PRIu64 "\n",
				       i, o[i].kind, o[i].v, o[i].found,
				       o[i].inv, o[i].resp);
			fail_msg("iteration %d: lincheck %d, brute force %s",
			         iter, rc, want ? "ok" : "violation");
		}
		want ? agree_ok++ : agree_bad++;
		lc_free(h);
	}
	printf("lincheck: agrees with brute force on %d linearizable and %d "
	       "non-linearizable small histories (%u%% of ops without "
	       "response)\n",
	       agree_ok, agree_bad, nr_pct);
	assert_true(agree_ok > 2000 && agree_bad > 2000);
}

static void test_brute_force(void **state)
{
	(void)state;
	brute_run(10);
}

/* Many writes without response (a failure's histories): what the search
 * leaves untried (lincheck.c, skip_unknown) must not change a verdict. */
static void test_brute_force_unknowns(void **state)
{
	(void)state;
	brute_run(40);
}

/* ---- random linearizable histories ------------------------------------- */

struct gop {
	uint32_t client;
	int kind;
	uint64_t key, value, inv, resp, lp;
	bool found, lost, applies;
	uint32_t
	        mget; /* 0, or the multi-get's number (its gets are adjacent) */
};

struct gen {
	struct gop *ops;
	size_t n;
	uint64_t nextval;
};

/*
 * Simulate a linearizable execution: @nc clients each run operations one
 * after the other; each takes effect at a random point inside its
 * interval (ties broken by position), and results come from applying them
 * in that order. 0.5% (lost_per_mille) get no response (half of those took
 * effect).
 * Multi-gets of 3 keys read each key at its own point.
 */
static unsigned lost_per_mille = 5;

static void generate(struct gen *g, size_t n, uint32_t nc, uint64_t nkeys,
                     uint64_t maxdur, uint64_t seed)
{
	rng_state = seed * 2654435761u + 7;
	g->ops = calloc(n + 16, sizeof(*g->ops));
	assert_non_null(g->ops);
	g->n = 0;
	g->nextval = 1;
	uint64_t *t = calloc(nc, sizeof(uint64_t));
	assert_non_null(t);
	uint32_t nmget = 0;
	while (g->n < n) {
		uint32_t c = (uint32_t)(rnd() % nc);
		uint64_t inv = t[c] + 1 + rnd() % 4;
		uint64_t dur = 1 + rnd() % maxdur;
		unsigned roll = rnd() % 100;
		int kind = roll < 45   ? LC_GET
		           : roll < 80 ? LC_PUT
		           : roll < 90 ? LC_DEL
		                       : LC_DEL_ANY;
		int cnt = 1;
		uint32_t mg = 0;
		if (roll >= 95 && g->n + 3 <= n) {
			kind = LC_GET;
			cnt = 3;
			mg = ++nmget;
		}
		bool lost = rnd() % 1000 < lost_per_mille && !mg;
		for (int i = 0; i < cnt; i++) {
			struct gop *o = &g->ops[g->n++];
			o->client = c;
			o->kind = kind;
			o->key = rnd() % nkeys;
			if (mg)
				o->key = (o->key + (uint64_t)i) % nkeys;
			o->value = kind == LC_PUT ? g->nextval++ : 0;
			o->inv = inv;
			o->resp = inv + dur;
			o->lp = inv + rnd() % (dur + 1);
			o->lost = lost;
			o->applies = !lost || (rnd() & 1);
			o->mget = mg;
		}
		t[c] = inv + dur;
	}
	free(t);
}

static int lp_cmp(const void *x, const void *y)
{
	const struct gop *a = *(const struct gop *const *)x;
	const struct gop *b = *(const struct gop *const *)y;
	if (a->lp != b->lp)
		return a->lp < b->lp ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* Apply in linearization order: fill in results. */
static void apply(struct gen *g, uint64_t nkeys)
{
	struct gop **p = malloc(g->n * sizeof(*p));
	uint64_t *val = calloc(nkeys, sizeof(uint64_t));
	bool *pres = calloc(nkeys, sizeof(bool));
	assert_non_null(p);
	assert_non_null(val);
	assert_non_null(pres);
	for (size_t i = 0; i < g->n; i++)
		p[i] = &g->ops[i];
	qsort(p, g->n, sizeof(*p), lp_cmp);
	for (size_t i = 0; i < g->n; i++) {
		struct gop *o = p[i];
		if (!o->applies)
			continue;
		switch (o->kind) {
		case LC_GET:
			o->found = pres[o->key];
			o->value = o->found ? val[o->key] : 0;
			break;
		case LC_PUT:
			pres[o->key] = true;
			val[o->key] = o->value;
			break;
		default: o->found = pres[o->key]; pres[o->key] = false;
		}
	}
	free(p);
	free(val);
	free(pres);
}

static void record(lc_history *h, const struct gen *g)
{
	for (size_t i = 0; i < g->n;) {
		const struct gop *o = &g->ops[i];
		uint64_t resp = o->lost ? NR : o->resp;
		if (o->mget) {
			uint64_t keys[3], vals[3];
			bool found[3];
			size_t k = 0;
			for (; i < g->n && g->ops[i].mget == o->mget;
			     i++, k++) {
				keys[k] = g->ops[i].key;
				vals[k] = g->ops[i].value;
				found[k] = g->ops[i].found;
			}
			assert_true(lc_mget(h, o->client, k, keys, vals, found,
			                    o->inv, resp) >= 0);
			continue;
		}
		assert_true(lc_op(h, o->client, (enum lc_kind)o->kind, o->key,
		                  o->value, o->found, o->inv, resp) >= 0);
		i++;
	}
}

static void test_random_small(void **state)
{
	(void)state;
	/* Heavy contention: few keys, up to 8 clients, long intervals. */
	for (uint64_t seed = 1; seed <= 40; seed++) {
		struct gen g;
		uint64_t nkeys = 1 + seed % 3;
		generate(&g, 2000, 2 + (uint32_t)(seed % 7), nkeys,
		         5 + seed % 40, seed);
		apply(&g, nkeys);
		lc_history *h = lc_new();
		record(h, &g);
		lc_report r;
		int rc = lc_check(h, &r, 10000);
		if (rc)
			lc_report_print(stdout, &r);
		assert_int_equal(rc, 0);
		free(g.ops);
		lc_free(h);
	}
}

static void test_random_large(void **state)
{
	(void)state;
	struct gen g;
	double t0 = now_ms();
	generate(&g, 200000, 4, 1000, 20, 42);
	apply(&g, 1000);
	lc_history *h = lc_new();
	record(h, &g);
	double t1 = now_ms();
	lc_report r;
	assert_int_equal(check(h, &r), 0);
	printf("lincheck: 200k ops, 1000 keys, 4 clients: generated in %.0f "
	       "ms, checked in %.0f ms\n",
	       t1 - t0, r.elapsed_ms);
	assert_true(r.nno_response > 0);
	assert_true(r.nmget_gets > 0);
	assert_true(r.elapsed_ms < 20000);
	free(g.ops);
	lc_free(h);

	/* One hot key: 100k ops deep, no recursion. */
	generate(&g, 100000, 3, 1, 10, 43);
	apply(&g, 1);
	h = lc_new();
	record(h, &g);
	assert_int_equal(check(h, &r), 0);
	printf("lincheck: 100k ops on one key, 3 clients: checked in %.0f "
	       "ms\n",
	       r.elapsed_ms);
	assert_int_equal(r.max_key_ops + r.ndropped_gets, 100000);
	free(g.ops);
	lc_free(h);
}

/* ---- buried violations ------------------------------------------------- */

static bool is_write(const struct gop *o)
{
	return o->kind != LC_GET;
}

/* A completed write @w whose key sees no other write overlapping
 * [w.inv, w.resp + 2] (lost writes overlap everything after them). */
static bool quiet(const struct gen *g, size_t w)
{
	const struct gop *o = &g->ops[w];
	if (o->lost)
		return false;
	for (size_t i = 0; i < g->n; i++) {
		const struct gop *x = &g->ops[i];
		if (i == w || x->key != o->key || !is_write(x))
			continue;
		uint64_t xr = x->lost ? UINT64_MAX : x->resp;
		if (x->inv <= o->resp + 2 && xr >= o->inv)
			return false;
	}
	return true;
}

enum inject { INJ_STALE, INJ_NEVER, INJ_AFTER_DELETE, INJ_LOST_UPDATE };

/* Find a quiet write of kind @kind in the second half, with an earlier
 * completed put of the same key (*prev: its index). */
static size_t find_quiet(const struct gen *g, int kind, size_t *prev)
{
	for (size_t w = g->n / 2; w < g->n; w++) {
		const struct gop *o = &g->ops[w];
		if (o->kind != kind || o->mget || !quiet(g, w))
			continue;
		for (size_t p = 0; p < w; p++) {
			const struct gop *x = &g->ops[p];
			if (x->key == o->key && x->kind == LC_PUT && !x->lost &&
			    x->resp < o->inv && x->value != o->value) {
				*prev = p;
				return w;
			}
		}
	}
	fail_msg("no quiet write found");
	return 0;
}

static void buried(enum inject inj, const char *what)
{
	struct gen g;
	generate(&g, 100000, 4, 1000, 20, 77);
	apply(&g, 1000);
	lc_history *h = lc_new();
	record(h, &g);
	size_t prev = 0, w;
	uint64_t key;
	switch (inj) {
	case INJ_STALE:
		w = find_quiet(&g, LC_PUT, &prev);
		key = g.ops[w].key;
		get(h, 99, key, g.ops[prev].value, g.ops[w].resp + 1,
		    g.ops[w].resp + 2);
		break;
	case INJ_NEVER:
		key = g.ops[g.n / 2].key;
		get(h, 99, key, 1ull << 50, g.ops[g.n / 2].inv,
		    g.ops[g.n / 2].inv + 5);
		break;
	case INJ_AFTER_DELETE:
		w = find_quiet(&g, LC_DEL_ANY, &prev);
		key = g.ops[w].key;
		get(h, 99, key, g.ops[prev].value, g.ops[w].resp + 1,
		    g.ops[w].resp + 2);
		break;
	default:
		w = find_quiet(&g, LC_PUT, &prev);
		key = g.ops[w].key;
		del(h, 99, key, false, g.ops[w].resp + 1, g.ops[w].resp + 2);
		break;
	}
	expect_bad(h, key, what, "client 99", NULL);
	free(g.ops);
	lc_free(h);
}

static void test_buried(void **state)
{
	(void)state;
	buried(INJ_STALE, "stale read");
	buried(INJ_NEVER, "value never written");
	buried(INJ_AFTER_DELETE, "was deleted by");
	buried(INJ_LOST_UPDATE, "lost update");
}

/* ---- merge, malformed, budget ------------------------------------------ */

static void test_merge(void **state)
{
	(void)state;
	lc_report r;
	lc_history *a = lc_new(), *b = lc_new();
	put(a, 0, 1, 1, 0, 10);
	put(a, 0, 1, 2, 20, 30);
	get(b, 1, 1, 1, 40, 50);
	assert_int_equal(lc_check(a, &r, 0), 0);
	assert_int_equal(lc_check(b, &r, 0), 1); /* 1 never written in b */
	assert_int_equal(lc_merge(a, b), 2);
	assert_int_equal(lc_nops(a), 3);
	expect_bad(a, 1, "op 2 get -> 1", "stale read", NULL);
	lc_free(a);
	lc_free(b);
}

static void test_malformed(void **state)
{
	(void)state;
	lc_report r;
	assert_int_equal(lc_check(NULL, &r, 0), -EINVAL);
	lc_history *h = lc_new();
	assert_int_equal(lc_check(h, NULL, 0), -EINVAL);
	assert_int_equal(lc_op(h, 0, LC_PUT, 1, 1, false, 10, 5), -EINVAL);
	assert_int_equal(lc_nops(h), 0);
	assert_int_equal(lc_check(h, &r, 0), -EINVAL); /* sticky */
	lc_free(h);

	h = lc_new();
	assert_int_equal(lc_op(h, 0, (enum lc_kind)9, 1, 1, false, 1, 5),
	                 -EINVAL);
	assert_int_equal(lc_check(h, &r, 0), -EINVAL);
	lc_free(h);

	h = lc_new();
	assert_int_equal(lc_op(h, 0, LC_GET, 1, 1, true, NR, NR), -EINVAL);
	lc_free(h);

	h = lc_new();
	int op = lc_begin(h, 0, LC_GET, 1, 0, 10);
	assert_int_equal(lc_end(h, op + 1, 0, false, 20), -EINVAL);
	lc_free(h);

	h = lc_new();
	op = lc_begin(h, 0, LC_GET, 1, 0, 10);
	assert_int_equal(lc_end(h, op, 0, false, 20), 0);
	assert_int_equal(lc_end(h, op, 0, false, 20), -EINVAL); /* twice */
	assert_int_equal(lc_check(h, &r, 0), -EINVAL);
	lc_free(h);

	h = lc_new();
	uint64_t keys[1] = {1};
	assert_int_equal(lc_mget(h, 0, 0, keys, keys, NULL, 1, 2), -EINVAL);
	lc_free(h);
	h = lc_new();
	assert_int_equal(lc_mget(h, 0, 1, keys, NULL, NULL, 1, 2), -EINVAL);
	lc_free(h);

	lc_history *a = lc_new(), *b = lc_new();
	assert_int_equal(lc_merge(a, a), -EINVAL);
	lc_free(a);
	a = lc_new();
	assert_int_equal(lc_op(b, 0, LC_PUT, 1, 1, false, 10, 5), -EINVAL);
	assert_int_equal(lc_merge(a, b), -EINVAL); /* src's error */
	assert_int_equal(lc_check(a, &r, 0), -EINVAL);
	lc_free(a);
	lc_free(b);
}

static void test_budget(void **state)
{
	(void)state;
	/* 24 concurrent puts, then two sequential reads of different values:
	 * not linearizable, but proving it takes every (subset, last put)
	 * pair, about 2^27 states. */
	lc_history *h = lc_new();
	put(h, 0, 5, 1000, 0, 10); /* an easy key checked first */
	for (uint64_t i = 1; i <= 24; i++)
		put(h, (uint32_t)i, 9, i, 100, 200);
	get(h, 0, 9, 1, 300, 310);
	get(h, 0, 9, 2, 320, 330);
	put(h, 0, 11, 1, 0, 10); /* never reached */
	lc_report r;
	double t0 = now_ms();
	int rc = lc_check(h, &r, 200);
	double t = now_ms() - t0;
	lc_report_print(stdout, &r);
	printf("lincheck: budget 200 ms, gave up after %.0f ms\n", t);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_int_equal(r.ntimedout, 1);
	assert_int_equal(r.ntimedout_keys, 1);
	assert_int_equal(r.timedout_keys[0], 9);
	assert_int_equal(r.nunchecked, 1);
	assert_true(t < 5000);
	/* A violation found elsewhere still counts. */
	get(h, 0, 3, 77, 0, 1);
	rc = lc_check(h, &r, 200);
	assert_int_equal(rc, 1);
	assert_int_equal(r.ntimedout, 1);
	lc_free(h);
}

static int big(size_t n, uint64_t nkeys, uint32_t nc)
{
	struct gen g;
	double t0 = now_ms();
	generate(&g, n, nc, nkeys, 20, 99);
	apply(&g, nkeys);
	lc_history *h = lc_new();
	record(h, &g);
	double t1 = now_ms();
	lc_report r;
	int rc = lc_check(h, &r, 0);
	lc_report_print(stdout, &r);
	printf("lincheck: %zu ops, %" PRIu64 " keys, %" PRIu32
	       " clients: generated in %.0f ms, checked in %.0f ms, rc %d\n",
	       n, nkeys, nc, t1 - t0, r.elapsed_ms, rc);
	free(g.ops);
	lc_free(h);
	return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && strcmp(argv[1], "--big") == 0) {
		if (argc == 6)
			lost_per_mille = (unsigned)strtoul(argv[5], NULL, 0);
		return big(strtoull(argv[2], NULL, 0),
		           strtoull(argv[3], NULL, 0),
		           (uint32_t)strtoul(argv[4], NULL, 0));
	}
	if (argc == 3 && strcmp(argv[1], "--filter") == 0)
		cmocka_set_test_filter(argv[2]);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_sequential),
	        cmocka_unit_test(test_concurrent),
	        cmocka_unit_test(test_deletes),
	        cmocka_unit_test(test_no_response),
	        cmocka_unit_test(test_mget),
	        cmocka_unit_test(test_stale_read),
	        cmocka_unit_test(test_never_written),
	        cmocka_unit_test(test_read_after_delete),
	        cmocka_unit_test(test_lost_update),
	        cmocka_unit_test(test_brute_force),
	        cmocka_unit_test(test_brute_force_unknowns),
	        cmocka_unit_test(test_random_small),
	        cmocka_unit_test(test_random_large),
	        cmocka_unit_test(test_buried),
	        cmocka_unit_test(test_merge),
	        cmocka_unit_test(test_malformed),
	        cmocka_unit_test(test_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
