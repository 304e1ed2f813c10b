/*
 * Global addresses and the consistent-hashing ring (src/addrspace/ring.h):
 * processes agree on the mapping, shares stay within 20% of even for 3, 5
 * and 10 machines, and a join or leave moves only the regions whose
 * replica sets include the machine. An incremental update
 * (farm_ring_update) gives a build's rings, with and without failure
 * domains and shadows.
 */
#include "testutil.h"

#include <inttypes.h>
#include <math.h>

#include <farm/addr.h>

#include "addrspace/ring.h"

/* ---- global addresses ---------------------------------------------------- */

static void test_gaddr(void **state)
{
	(void)state;
	farm_gaddr a = farm_gaddr_make(7, 0x1040);
	assert_int_equal(farm_gaddr_region(a), 7);
	assert_int_equal(farm_gaddr_offset(a), 0x1040);
	char buf[FARM_GADDR_STRLEN];
	assert_int_equal(farm_gaddr_format(a, buf, sizeof(buf)), 9);
	assert_string_equal(buf, "r7+0x1040");
	farm_gaddr b;
	assert_int_equal(farm_gaddr_parse(buf, &b), 0);
	assert_true(a == b);
	assert_int_equal(farm_gaddr_parse("r4294967295+4294967295", &b), 0);
	assert_true(b == UINT64_MAX);
	assert_int_equal(farm_gaddr_format(b, buf, sizeof(buf)), 22);
	assert_int_equal(farm_gaddr_format(b, buf, 22), -ERANGE);
	const char *bad[] = {"",        "r",
	                     "7+0x10",  "r7",
	                     "r7+",     "r+1",
	                     "r7+0x",   "r-1+0",
	                     "r7+0x1g", "r4294967296+0",
	                     "r1+1 ",   "r1+0x100000000"};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(bad); i++)
		assert_int_equal(farm_gaddr_parse(bad[i], &b), -EINVAL);
	assert_int_equal(farm_gaddr_parse(NULL, &b), -EINVAL);

	uint64_t rs = 64ull << 20;
	assert_true(farm_gaddr_valid(farm_gaddr_make(1, 0), 64, rs));
	assert_true(farm_gaddr_valid(farm_gaddr_make(1, (uint32_t)rs - 64), 64,
	                             rs));
	assert_false(farm_gaddr_valid(farm_gaddr_make(1, (uint32_t)rs - 63), 64,
	                              rs));
	assert_false(farm_gaddr_valid(farm_gaddr_make(1, (uint32_t)rs), 0, rs));
	assert_false(farm_gaddr_valid(FARM_GADDR_NULL, 0, rs));
	assert_false(farm_gaddr_valid(farm_gaddr_make(0xffffffffu, 0), 0, rs));
	assert_false(farm_gaddr_valid(farm_gaddr_make(1, 0), rs + 1, rs));
	assert_true(farm_gaddr_valid(farm_gaddr_make(1, UINT32_MAX), 1,
	                             4ull << 30));
}

/* ---- ring ---------------------------------------------------------------- */

static farm_ring *build(const uint32_t *ids, unsigned n, unsigned r)
{
	struct farm_ring_attr a = {.replicas = r};
	farm_ring *g = NULL;
	assert_int_equal(farm_ring_build(ids, n, &a, &g), 0);
	return g;
}

static void test_ring_bad(void **state)
{
	(void)state;
	uint32_t ids[] = {1, 2, 2};
	farm_ring *g = NULL;
	assert_int_equal(farm_ring_build(ids, 3, NULL, &g), -EINVAL);
	assert_int_equal(farm_ring_build(ids, 0, NULL, &g), -EINVAL);
	assert_int_equal(farm_ring_build(NULL, 1, NULL, &g), -EINVAL);
	struct farm_ring_attr a = {.rings = FARM_RING_MAX_RINGS + 1};
	assert_int_equal(farm_ring_build(ids, 2, &a, &g), -EINVAL);
	/* One machine: it holds every replica there is. */
	assert_int_equal(farm_ring_build(ids, 1, NULL, &g), 0);
	assert_int_equal(farm_ring_nreplicas(g), 1);
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	assert_int_equal(farm_ring_replicas(g, 12345, rep), 1);
	assert_int_equal(rep[0], 1);
	farm_ring_free(g);
}

/* Reference: walk the machines' points by brute force, no precomputation. */
static unsigned ref_replicas(const uint32_t *ids, unsigned n, unsigned r,
                             uint32_t region, uint32_t *out)
{
	/* Rebuild with one machine at a time is too slow; instead use the
	 * public pieces: the ring each machine alone would give is its own
	 * points. Collect every point of ring (region % k) into a list. */
	unsigned k = FARM_RING_DEFAULT_RINGS, p = FARM_RING_DEFAULT_POINTS;
	unsigned j = region % k;
	uint32_t pos = farm_ring_pos(region);
	unsigned got = 0;
	uint32_t last = pos;
	/* Repeatedly find the machine whose nearest point at or after @last
	 * (clockwise) comes first, excluding those already chosen. */
	while (got < r && got < n) {
		uint64_t best_d = UINT64_MAX;
		uint32_t best_m = 0, best_pos = 0;
		for (unsigned m = 0; m < n; m++) {
			bool chosen = false;
			for (unsigned q = 0; q < got; q++)
				chosen |= out[q] == ids[m];
			if (chosen)
				continue;
			for (unsigned i = 0; i < p; i++) {
				/* Same hash as ring.c's point_pos. */
				uint64_t key = ((uint64_t)ids[m] << 32) |
				               ((uint64_t)j << 16) | i;
				uint64_t z = key ^ 0x6a09e667f3bcc908ull;
				z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
				z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
				z ^= z >> 31;
				uint32_t pp = (uint32_t)(z >> 32);
				uint64_t d = (uint32_t)(pp - last);
				if (d < best_d ||
				    (d == best_d && ids[m] < best_m)) {
					best_d = d;
					best_m = ids[m];
					best_pos = pp;
				}
			}
		}
		out[got++] = best_m;
		last = best_pos;
	}
	return got;
}

static void test_ring_reference(void **state)
{
	(void)state;
	uint32_t ids[] = {3, 17, 4, 99, 1000};
	farm_ring *g = build(ids, 5, 3);
	uint64_t seed = 42;
	for (int t = 0; t < 2000; t++) {
		uint32_t region = (uint32_t)farm_rand64(&seed) | 1;
		uint32_t a[FARM_RING_MAX_REPLICAS], b[FARM_RING_MAX_REPLICAS];
		assert_int_equal(farm_ring_replicas(g, region, a), 3);
		assert_int_equal(ref_replicas(ids, 5, 3, region, b), 3);
		for (int q = 0; q < 3; q++)
			assert_int_equal(a[q], b[q]);
		assert_int_equal(farm_ring_primary(g, region), a[0]);
		assert_true(a[0] != a[1] && a[1] != a[2] && a[0] != a[2]);
	}
	farm_ring_free(g);
}

/* Digest of the mapping of every region id in [1, 2^20] and 2^20 random
 * ones, for the given member order. */
static uint64_t mapping_digest(const uint32_t *ids, unsigned n)
{
	farm_ring *g = build(ids, n, 3);
	uint64_t h = 1469598103934665603ull, seed = 7;
	for (uint32_t i = 1; i <= (2u << 20); i++) {
		uint32_t region =
		        i <= (1u << 20) ? i : (uint32_t)farm_rand64(&seed);
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		unsigned nr = farm_ring_replicas(g, region, rep);
		for (unsigned q = 0; q < nr; q++)
			h = (h ^ rep[q]) * 1099511628211ull;
	}
	farm_ring_free(g);
	return h;
}

/* Three processes, each given the members in a different order (as three
 * machines reading a view may), compute the same mapping. */
static void test_ring_processes_agree(void **state)
{
	(void)state;
	const uint32_t orders[3][5] = {
	        {1, 2, 3, 40, 7}, {40, 7, 3, 2, 1}, {3, 1, 40, 2, 7}};
	int fds[3][2];
	pid_t pids[3];
	for (int c = 0; c < 3; c++) {
		assert_int_equal(pipe(fds[c]), 0);
		pids[c] = tu_fork();
		assert_true(pids[c] >= 0);
		if (pids[c] == 0) {
			uint64_t d = mapping_digest(orders[c], 5);
			_exit(write(fds[c][1], &d, sizeof(d)) == sizeof(d) ? 0
			                                                   : 1);
		}
		close(fds[c][1]);
	}
	uint64_t d[3];
	for (int c = 0; c < 3; c++) {
		assert_int_equal(read(fds[c][0], &d[c], sizeof(d[c])),
		                 sizeof(d[c]));
		close(fds[c][0]);
		int st;
		assert_int_equal(waitpid(pids[c], &st, 0), pids[c]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	printf("mapping digest of 2M region ids: %016" PRIx64
	       " (3 processes)\n",
	       d[0]);
	assert_true(d[0] == d[1] && d[1] == d[2]);
	/* And the digest does depend on the members. */
	const uint32_t other[5] = {1, 2, 3, 40, 8};
	assert_true(mapping_digest(other, 5) != d[0]);
}

static void check_balance(unsigned n)
{
	uint32_t ids[16];
	for (unsigned i = 0; i < n; i++)
		ids[i] = 1 + i * 7; /* arbitrary, not consecutive */
	farm_ring *g = build(ids, n, 3);
	unsigned nrep = farm_ring_nreplicas(g);
	uint32_t got[16];
	double pri[16], bak[16], psum = 0, bsum = 0, pworst = 0, bworst = 0;
	farm_ring_shares(g, got, pri, bak);
	double peven = 1.0 / n, beven = (double)(nrep - 1) / n;
	for (unsigned m = 0; m < n; m++) {
		psum += pri[m];
		bsum += bak[m];
		pworst = FARM_MAX(pworst, fabs(pri[m] / peven - 1));
		if (nrep > 1)
			bworst = FARM_MAX(bworst, fabs(bak[m] / beven - 1));
	}
	printf("%2u machines (r=%u k=%u p=%u): primary share worst %.1f%% off "
	       "even, backup share worst %.1f%% off even\n",
	       n, nrep, FARM_RING_DEFAULT_RINGS, FARM_RING_DEFAULT_POINTS,
	       100 * pworst, 100 * bworst);
	for (unsigned m = 0; m < n; m++)
		printf("   machine %3u: primary %.4f backup %.4f\n", got[m],
		       pri[m], bak[m]);
	assert_true(fabs(psum - 1) < 1e-9);
	assert_true(fabs(bsum - (nrep - 1)) < 1e-9);
	assert_true(pworst < 0.20);
	assert_true(bworst < 0.20);
	farm_ring_free(g);
}

static void test_ring_balance(void **state)
{
	(void)state;
	check_balance(3);
	check_balance(5);
	check_balance(10);
}

/* Compare the mapping of 2M random ids before and after @x joins (the
 * "before" set lacks it). Every region whose replica set changed must
 * have @x in its new set; report the fractions against the ideal. */
static void check_move(unsigned n, bool join)
{
	uint32_t ids[16];
	for (unsigned i = 0; i < n + 1; i++)
		ids[i] = 100 + i * 13;
	uint32_t x = ids[n];
	farm_ring *small = build(ids, n, 3), *big = build(ids, n + 1, 3);
	farm_ring *before = join ? small : big, *after = join ? big : small;
	uint64_t seed = 99;
	const unsigned N = 2u << 20;
	unsigned moved = 0, pmoved = 0, bad = 0;
	for (unsigned t = 0; t < N; t++) {
		uint32_t region = (uint32_t)farm_rand64(&seed) | 1;
		uint32_t a[FARM_RING_MAX_REPLICAS], b[FARM_RING_MAX_REPLICAS];
		unsigned na = farm_ring_replicas(before, region, a);
		unsigned nb = farm_ring_replicas(after, region, b);
		bool same = na == nb, has_x = false;
		for (unsigned q = 0; q < na; q++) {
			bool in = false;
			for (unsigned s = 0; s < nb; s++)
				in |= a[q] == b[s];
			same &= in;
		}
		const uint32_t *with = join ? b : a;
		for (unsigned q = 0; q < (join ? nb : na); q++)
			has_x |= with[q] == x;
		if (!same) {
			moved++;
			bad += !has_x;
		}
		pmoved += a[0] != b[0];
	}
	unsigned nrep = farm_ring_nreplicas(big);
	double ideal = (double)nrep / (n + 1);
	printf("%s of one machine (%u -> %u): %.2f%% of regions changed "
	       "replica "
	       "set (ideal r/n = %.2f%%), %.2f%% changed primary (ideal 1/n = "
	       "%.2f%%); %u moved without involving it\n",
	       join ? "join" : "leave", join ? n : n + 1, join ? n + 1 : n,
	       100.0 * moved / N, 100 * ideal, 100.0 * pmoved / N,
	       100.0 / (n + 1), bad);
	assert_int_equal(bad, 0);
	/* Within 25% of the ideal: a machine's share is within 20% of even. */
	assert_true(fabs((double)moved / N / ideal - 1) < 0.25);
	farm_ring_free(small);
	farm_ring_free(big);
}

/* Placement over a thousand machine ids: every id up to 1,023 (the most
 * a configuration has) placed, each region's replicas distinct members,
 * shares summing to one; and a cluster whose ids are far apart (0, 700,
 * 1023) places like any other. Prints the build time and the worst
 * share (a placement's spread at 1,024 machines). */
static void check_ids(const uint32_t *ids, unsigned n)
{
	uint64_t t0 = farm_now_ns();
	farm_ring *g = build(ids, n, 3);
	uint64_t t1 = farm_now_ns();
	uint64_t seed = 7;
	for (unsigned t = 0; t < 100000; t++) {
		uint32_t region = (uint32_t)farm_rand64(&seed) | 1;
		uint32_t a[FARM_RING_MAX_REPLICAS];
		unsigned na = farm_ring_replicas(g, region, a);
		assert_int_equal(na, FARM_MIN(3u, n));
		for (unsigned q = 0; q < na; q++) {
			bool member = false;
			for (unsigned i = 0; i < n && !member; i++)
				member = ids[i] == a[q];
			assert_true(member);
			for (unsigned s = 0; s < q; s++)
				assert_true(a[s] != a[q]);
		}
	}
	uint32_t *got = calloc(n, sizeof(*got));
	double *pri = calloc(n, sizeof(*pri)), *bak = calloc(n, sizeof(*bak));
	assert_true(got && pri && bak);
	farm_ring_shares(g, got, pri, bak);
	double psum = 0, pworst = 0;
	for (unsigned m = 0; m < n; m++) {
		psum += pri[m];
		pworst = FARM_MAX(pworst, fabs(pri[m] * n - 1));
	}
	printf("%4u machines (ids %" PRIu32 "..%" PRIu32 "): ring built in "
	       "%.2f ms, primary share worst %.1f%% off even\n",
	       n, ids[0], ids[n - 1], (double)(t1 - t0) / 1e6, 100 * pworst);
	assert_true(fabs(psum - 1) < 1e-9);
	free(got);
	free(pri);
	free(bak);
	farm_ring_free(g);
}

static void test_ring_thousand_ids(void **state)
{
	(void)state;
	uint32_t *ids = calloc(1024, sizeof(*ids));
	assert_non_null(ids);
	for (unsigned i = 0; i < 1024; i++)
		ids[i] = i;
	check_ids(ids, 1024);
	const uint32_t far[] = {0, 700, 1023};
	check_ids(far, 3);
	free(ids);
}

static void test_ring_movement(void **state)
{
	(void)state;
	check_move(3, true);
	check_move(5, true);
	check_move(9, true);
	check_move(5, false);
	check_move(9, false);
}

static bool taken_even(void *ctx, uint32_t id)
{
	(void)ctx;
	return (id & 1) == 0;
}

static void test_ring_pick(void **state)
{
	(void)state;
	uint32_t ids[] = {5, 6, 7, 8};
	farm_ring *g = build(ids, 4, 3);
	uint64_t seed = 1;
	unsigned per_ring[FARM_RING_DEFAULT_RINGS] = {0};
	for (int t = 0; t < 3000; t++) {
		uint32_t id;
		assert_int_equal(farm_ring_pick_region(g, 6, &seed, taken_even,
		                                       NULL, 0, &id),
		                 0);
		assert_int_equal(farm_ring_primary(g, id), 6);
		assert_true(id & 1);
		per_ring[farm_ring_of(g, id)]++;
	}
	for (unsigned j = 0; j < FARM_RING_DEFAULT_RINGS; j++)
		assert_true(per_ring[j] > 700); /* rings chosen at random */
	uint32_t id;
	assert_int_equal(farm_ring_pick_region(g, 9, &seed, NULL, NULL, 0, &id),
	                 -ENOENT);
	/* Near: same ring, primary the asker, close after the hint. */
	for (int t = 0; t < 200; t++) {
		uint32_t hint = (uint32_t)farm_rand64(&seed) | 1;
		uint32_t m = ids[t % 4];
		assert_int_equal(farm_ring_near_region(g, m, hint, taken_even,
		                                       NULL, 0, &id),
		                 0);
		assert_int_equal(farm_ring_of(g, id), farm_ring_of(g, hint));
		assert_int_equal(farm_ring_primary(g, id), m);
		assert_true(id & 1);
		/* Closer than a random id would be: well within the ring. */
		uint32_t d = farm_ring_pos(id) - farm_ring_pos(hint);
		assert_true(d < (1u << 31));
	}
	farm_ring_free(g);
}

/* ---- incremental update ------------------------------------------------ */

/* A view's machines for the update tests: members, with late ranks. */
struct uview {
	struct farm_ring_machine ms[FARM_RING_MAX_MACHINES];
	unsigned n;
	uint32_t rank; /* the last late rank given */
};

static bool uview_has(const struct uview *v, uint32_t id)
{
	for (unsigned i = 0; i < v->n; i++)
		if (v->ms[i].id == id)
			return true;
	return false;
}

/* A machine id not in @v (ids up to 4,095, beyond the members' count). */
static uint32_t uview_new_id(const struct uview *v, uint64_t *seed)
{
	uint32_t id;
	do
		id = (uint32_t)(farm_rand64(seed) % 4096);
	while (uview_has(v, id));
	return id;
}

/* One random change: a join (late or not), a leave, two leaves at once,
 * a join and a leave at once, or the grower leaving the late list. */
static void uview_step(struct uview *v, uint64_t *seed)
{
	unsigned op = (unsigned)(farm_rand64(seed) % 6);
	if ((op == 2 || op == 3 || op == 4) && v->n < 4)
		op = 0;
	if (v->n >= FARM_RING_MAX_MACHINES - 1 && op < 2)
		op = 2;
	if (op == 0 || op == 1 || op == 4) {
		uint32_t id = uview_new_id(v, seed);
		v->ms[v->n++] = (struct farm_ring_machine){
		        .id = id, .late = op == 1 ? ++v->rank : 0};
	}
	for (unsigned k = 0; k < (op == 3 ? 2u : op >= 2 && op < 5); k++) {
		unsigned gone = (unsigned)(farm_rand64(seed) % v->n);
		v->ms[gone] = v->ms[v->n - 1];
		v->n--;
	}
	if (op == 5) { /* the grower: the least rank */
		unsigned g = v->n;
		for (unsigned i = 0; i < v->n; i++)
			if (v->ms[i].late &&
			    (g == v->n || v->ms[i].late < v->ms[g].late))
				g = i;
		if (g < v->n)
			v->ms[g].late = 0;
	}
}

/* @steps random changes from @n0 machines: each view's rings updated from
 * the previous view's updated rings are a build's, arc for arc. */
static void check_updates(unsigned n0, unsigned steps, uint64_t seed)
{
	struct uview *v = calloc(1, sizeof(*v));
	assert_non_null(v);
	for (unsigned i = 0; i < n0; i++) {
		uint32_t id = uview_new_id(v, &seed);
		v->ms[v->n++] = (struct farm_ring_machine){.id = id};
	}
	farm_ring *prev = NULL;
	assert_int_equal(farm_ring_build_domains(v->ms, v->n, NULL, &prev), 0);
	for (unsigned s = 0; s < steps; s++) {
		uview_step(v, &seed);
		farm_ring *up = NULL, *full = NULL;
		assert_int_equal(farm_ring_update(prev, v->ms, v->n, NULL, &up),
		                 0);
		assert_int_equal(
		        farm_ring_build_domains(v->ms, v->n, NULL, &full), 0);
		if (!farm_ring_same(up, full))
			fail_msg("update from %u machines, step %u (%u "
			         "machines) differs from a build",
			         n0, s, v->n);
		farm_ring_free(full);
		farm_ring_free(prev);
		prev = up;
	}
	farm_ring_free(prev);
	free(v);
}

/* One random change with failure domains (1 to 3), as a configuration
 * makes them: a join (late or not), a member leaving (it stays, departed,
 * with its domain), a departed id reused by a late new holder (a shadow
 * of the departed one where that one was walked, membership.h), or the
 * grower growing (its shadow dropped). */
static void uview_step_domains(struct uview *v, uint64_t *seed)
{
	unsigned op = (unsigned)(farm_rand64(seed) % 4), members = 0;
	for (unsigned i = 0; i < v->n; i++)
		members += !v->ms[i].departed;
	if (op == 1 && members < 3)
		op = 0;
	if (op == 0 || v->n == FARM_RING_MAX_MACHINES) {
		uint32_t id = uview_new_id(v, seed);
		v->ms[v->n++] = (struct farm_ring_machine){
		        .id = id,
		        .domain = 1 + (uint32_t)(farm_rand64(seed) % 3),
		        .late = farm_rand64(seed) % 2 ? ++v->rank : 0};
		return;
	}
	unsigned i = (unsigned)(farm_rand64(seed) % v->n), g = v->n;
	struct farm_ring_machine *m = &v->ms[i];
	if (op == 1 && !m->departed) {
		m->departed = true;
		m->shadow = 0;
	} else if (op == 2 && m->departed) {
		m->shadow = m->late ? 0 : m->domain;
		m->domain = 1 + (uint32_t)(farm_rand64(seed) % 3);
		m->departed = false;
		m->late = ++v->rank;
	} else if (op == 3) {
		for (unsigned q = 0; q < v->n; q++)
			if (v->ms[q].late && !v->ms[q].departed &&
			    (g == v->n || v->ms[q].late < v->ms[g].late))
				g = q;
		if (g < v->n)
			v->ms[g].late = v->ms[g].shadow = 0;
	}
}

/* The same with failure domains and shadows: an update builds, and
 * gives a build's rings. A shadow changes the placement (in some of the
 * views that have one). */
static void check_updates_domains(unsigned n0, unsigned steps, uint64_t seed)
{
	struct uview *v = calloc(1, sizeof(*v));
	assert_non_null(v);
	for (unsigned i = 0; i < n0; i++)
		v->ms[v->n++] = (struct farm_ring_machine){
		        .id = uview_new_id(v, &seed), .domain = 1 + i % 3};
	farm_ring *prev = NULL;
	assert_int_equal(farm_ring_build_domains(v->ms, v->n, NULL, &prev), 0);
	unsigned shadows = 0, moved = 0;
	for (unsigned s = 0; s < steps; s++) {
		uview_step_domains(v, &seed);
		farm_ring *up = NULL, *full = NULL;
		assert_int_equal(farm_ring_update(prev, v->ms, v->n, NULL, &up),
		                 0);
		assert_int_equal(
		        farm_ring_build_domains(v->ms, v->n, NULL, &full), 0);
		if (!farm_ring_same(up, full))
			fail_msg("update with domains, step %u (%u machines) "
			         "differs from a build",
			         s, v->n);
		for (unsigned i = 0; i < v->n; i++) {
			if (!v->ms[i].shadow)
				continue;
			shadows++;
			struct farm_ring_machine keep = v->ms[i];
			farm_ring *bare = NULL;
			v->ms[i].shadow = 0;
			assert_int_equal(farm_ring_build_domains(v->ms, v->n,
			                                         NULL, &bare),
			                 0);
			v->ms[i] = keep;
			unsigned differ = 0; /* none where its domain has no
			                        walked member left */
			uint32_t x[FARM_RING_MAX_REPLICAS];
			uint32_t y[FARM_RING_MAX_REPLICAS];
			for (uint32_t id = 1; id <= 4000; id++) {
				unsigned nx = farm_ring_replicas(bare, id, x);
				farm_ring_replicas(full, id, y);
				differ += memcmp(x, y, nx * sizeof(x[0])) != 0;
			}
			moved += differ > 0;
			farm_ring_free(bare);
			break;
		}
		farm_ring_free(full);
		farm_ring_free(prev);
		prev = up;
	}
	assert_true(shadows > 0 && moved > 0);
	farm_ring_free(prev);
	free(v);
}

static void test_ring_update(void **state)
{
	(void)state;
	check_updates(4, 60, 11);
	check_updates(64, 40, 12);
	check_updates(128, 30, 13);
	check_updates(1024, 6, 14);
	check_updates_domains(6, 60, 15);
	check_updates_domains(24, 30, 16);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_gaddr),
	        cmocka_unit_test(test_ring_bad),
	        cmocka_unit_test(test_ring_reference),
	        cmocka_unit_test(test_ring_processes_agree),
	        cmocka_unit_test(test_ring_balance),
	        cmocka_unit_test(test_ring_movement),
	        cmocka_unit_test(test_ring_pick),
	        cmocka_unit_test(test_ring_update),
	        cmocka_unit_test(test_ring_thousand_ids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
