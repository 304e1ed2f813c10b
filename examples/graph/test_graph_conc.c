/*
 * fgraph under concurrency, on a 3-machine local cluster (gcluster.h): every
 * machine adds and deletes edges of type 1 on three hot nodes (each edge
 * unique, so each has one add and at most one delete), adds and deletes
 * inverse edges (types 2 <-> 3) between the hot nodes and others (so
 * transactions on the hot nodes conflict across machines), and reads the
 * hot lists whole (assoc_range) and their counts. Every operation is
 * recorded with its start and end time; the parent checks the history:
 *
 *   - every range is newest first with no edge twice;
 *   - every range holds every edge whose add was acknowledged before the
 *     range began and whose delete had not begun before it ended, and no
 *     edge whose add had not begun before it ended or whose delete was
 *     acknowledged before it began (no acknowledged add lost, no
 *     acknowledged delete come back);
 *   - every count lies between the lengths those two bounds give;
 *   - a final read of each list, after everything, is exactly the
 *     acknowledged adds less the acknowledged deletes.
 *
 * --broken runs a library built with FG_TEST_BREAK_HEAD, which keeps an old
 * head block allocated when a new head replaces it (the incarnation is not
 * bumped), so a client holding the old head's pointer reads a stale list;
 * the test then passes only when the checker finds the violations.
 * FG_CONC_SECONDS sets the run (default 4 s).
 */
#include "gcluster.h"
#include "graph_int.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define HOT       3u
#define OTHER_LO  10u
#define OTHER_N   24u
#define MAX_RANGE FG_MAX_LIMIT

static bool broken;
static double seconds = 4.0;

enum { R_ADD = 1, R_DEL, R_RANGE, R_COUNT, R_FINAL };

struct rec {
	uint8_t kind, h, pad[2];
	int32_t status;
	uint64_t t0, t1;
	uint64_t id2;
	uint64_t count;
	uint32_t n, pad2; /* ranges: n (id2, time) pairs follow */
};

struct pair {
	uint64_t id2;
	int64_t time;
};

static struct fg_attr conc_attr(void)
{
	struct fg_attr a = {.cache_entries = 4096};
	a.inverse[2] = 3;
	a.inverse[3] = 2;
	return a;
}

/* ---- machine side ------------------------------------------------------- */

struct hist {
	FILE *f;
	unsigned nrec;
};

static void put_rec(struct hist *h, const struct rec *r, const struct pair *p)
{
	fwrite(r, sizeof(*r), 1, h->f);
	if (r->n && p)
		fwrite(p, sizeof(*p), r->n, h->f);
	h->nrec++;
}

static uint64_t xr(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return fg_mix(*s);
}

static int read_list(struct gc_machine *mc, struct hist *hs, uint8_t kind,
                     uint8_t h, struct fg_edge *buf, struct pair *pairs)
{
	struct rec r = {.kind = kind, .h = h};
	unsigned n = 0;
	r.t0 = gc_now_ns();
	r.status = fg_assoc_range_sync(mc->g, mc->loop, h, 1, 0, MAX_RANGE, buf,
	                               MAX_RANGE, &n);
	r.t1 = gc_now_ns();
	if (!r.status) {
		r.n = n;
		for (unsigned i = 0; i < n; i++)
			pairs[i] = (struct pair){buf[i].id2, buf[i].time};
	}
	put_rec(hs, &r, pairs);
	return r.status;
}

/* One machine's workload state: its history, its live edges (so it
 * deletes edges that exist), its buffers for range reads. */
struct conc {
	struct gc_machine *mc;
	struct hist hs;
	struct fg_edge *buf;
	struct pair *pairs;
	uint64_t *live;
	uint8_t *live_h;
	unsigned nlive;
	uint64_t rng, k;
};

#define CONC_LIVE (1u << 20)

/* The nodes: the hot ones and the others the inverse edges point at. */
static int32_t conc_nodes(struct conc *c)
{
	int32_t ans = 0;
	for (uint64_t id = 1; id <= HOT && !ans; id++)
		ans = fg_obj_add_sync(c->mc->g, c->mc->loop, id, 1, 0, "hot",
		                      3);
	for (uint64_t id = OTHER_LO; id < OTHER_LO + OTHER_N && !ans; id++)
		ans = fg_obj_add_sync(c->mc->g, c->mc->loop, id, 2, 0, "o", 1);
	return ans;
}

/* An edge of hot node @h added (recorded; kept live when it took). */
static void conc_add(struct conc *c, uint8_t h)
{
	struct rec r = {.h = h, .kind = R_ADD};
	r.id2 = ((uint64_t)c->mc->me + 1) << 40 | ++c->k;
	r.t0 = gc_now_ns();
	r.status = fg_assoc_add_sync(c->mc->g, c->mc->loop, h, 1, r.id2,
	                             (int64_t)r.t0, "e", 1);
	r.t1 = gc_now_ns();
	put_rec(&c->hs, &r, NULL);
	if (r.status >= 0 && c->nlive < CONC_LIVE) {
		c->live_h[c->nlive] = h;
		c->live[c->nlive++] = r.id2;
	}
}

/* A live edge, drawn at random, deleted (recorded). */
static void conc_del(struct conc *c)
{
	unsigned i = (unsigned)(xr(&c->rng) % c->nlive);
	struct rec r = {.kind = R_DEL, .h = c->live_h[i], .id2 = c->live[i]};
	c->live[i] = c->live[--c->nlive];
	c->live_h[i] = c->live_h[c->nlive];
	r.t0 = gc_now_ns();
	r.status = fg_assoc_delete_sync(c->mc->g, c->mc->loop, r.h, 1, r.id2);
	r.t1 = gc_now_ns();
	put_rec(&c->hs, &r, NULL);
}

/* An inverse edge of hot node @h added or deleted (@add): conflicts
 * across machines on the hot nodes. Not recorded; an error other than
 * "absent" or "busy" ends the workload. */
static int32_t conc_inverse(struct conc *c, uint8_t h, bool add)
{
	uint64_t o = OTHER_LO + xr(&c->rng) % OTHER_N;
	int rc = add ? fg_assoc_add_sync(c->mc->g, c->mc->loop, h, 2, o,
	                                 (int64_t)gc_now_ns(), "i", 1)
	             : fg_assoc_delete_sync(c->mc->g, c->mc->loop, h, 2, o);
	return rc < 0 && rc != -ENOENT && rc != -EBUSY ? rc : 0;
}

/* Hot node @h's edge count read (recorded). */
static void conc_count(struct conc *c, uint8_t h)
{
	struct rec r = {.h = h, .kind = R_COUNT};
	r.t0 = gc_now_ns();
	r.status = fg_assoc_count_sync(c->mc->g, c->mc->loop, h, 1, &r.count);
	r.t1 = gc_now_ns();
	put_rec(&c->hs, &r, NULL);
}

/* The mix for @seconds: 35% adds (50% while nothing is live), 15%
 * deletes, 8% inverse edges, 27% range reads, 15% counts. */
static int32_t conc_workload(struct conc *c)
{
	uint64_t end = gc_now_ns() + (uint64_t)(seconds * 1e9);
	int32_t ans = 0;
	while (!ans && gc_now_ns() < end) {
		unsigned x = (unsigned)(xr(&c->rng) % 100);
		uint8_t h = (uint8_t)(1 + xr(&c->rng) % HOT);
		if (x < 35 || (x < 50 && !c->nlive))
			conc_add(c, h);
		else if (x < 50)
			conc_del(c);
		else if (x < 58)
			ans = conc_inverse(c, h, x & 1);
		else if (x < 85)
			read_list(c->mc, &c->hs, R_RANGE, h, c->buf, c->pairs);
		else
			conc_count(c, h);
	}
	return ans;
}

static void conc_free(struct conc *c)
{
	if (c->hs.f)
		fclose(c->hs.f);
	free(c->buf);
	free(c->pairs);
	free(c->live);
	free(c->live_h);
}

static int conc_body(struct gc_machine *mc, void *arg)
{
	(void)arg;
	struct conc c = {.mc = mc,
	                 .buf = calloc(MAX_RANGE, sizeof(*c.buf)),
	                 .pairs = calloc(MAX_RANGE, sizeof(*c.pairs)),
	                 .live = calloc(CONC_LIVE, sizeof(*c.live)),
	                 .live_h = calloc(CONC_LIVE, 1),
	                 .rng = gc_now_ns() ^ ((uint64_t)mc->me << 50)};
	char path[400];
	snprintf(path, sizeof(path), "%s/hist-%u", mc->cl->root, mc->me);
	c.hs.f = fopen(path, "w");
	if (!c.buf || !c.pairs || !c.live || !c.live_h || !c.hs.f) {
		conc_free(&c);
		return 20;
	}
	for (;;) {
		char cmd;
		if (gc_wait_cmd(mc, &cmd, 1))
			break;
		int32_t ans = 0;
		if (cmd == 'I') {
			ans = conc_nodes(&c);
		} else if (cmd == 'W') {
			ans = conc_workload(&c);
		} else if (cmd == 'F') { /* the final reads */
			for (uint8_t h = 1; h <= HOT; h++)
				read_list(mc, &c.hs, R_FINAL, h, c.buf,
				          c.pairs);
			fflush(c.hs.f);
		}
		if (gc_write_all(mc->out, &ans, sizeof(ans)))
			break;
	}
	conc_free(&c);
	return 0;
}

/* ---- the checker --------------------------------------------------------- */

struct edge_hist {
	uint64_t id2;
	uint8_t h;
	bool has_add, add_ok, has_del, del_ok;
	uint64_t add0, add1, del0, del1;
};

struct history {
	struct edge_hist *e;
	size_t ne;
	struct rec *r; /* reads */
	struct pair **p;
	size_t nr, capr;
};

static int cmp_id2(const void *a, const void *b)
{
	uint64_t x = ((const struct edge_hist *)a)->id2,
	         y = ((const struct edge_hist *)b)->id2;
	return x < y ? -1 : x > y;
}

static const struct edge_hist *find_edge(const struct history *H, uint64_t id2)
{
	struct edge_hist key = {.id2 = id2};
	return bsearch(&key, H->e, H->ne, sizeof(*H->e), cmp_id2);
}

static void load(struct history *H, const char *path)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	struct rec r;
	while (fread(&r, sizeof(r), 1, f) == 1) {
		struct pair *p = NULL;
		if (r.n) {
			p = malloc(r.n * sizeof(*p));
			assert_int_equal(fread(p, sizeof(*p), r.n, f), r.n);
		}
		if (r.kind == R_ADD || r.kind == R_DEL) {
			if (r.kind == R_ADD) {
				H->e = realloc(H->e,
				               (H->ne + 1) * sizeof(*H->e));
				assert_non_null(H->e);
				H->e[H->ne++] = (struct edge_hist){
				        .id2 = r.id2,
				        .h = r.h,
				        .has_add = true,
				        .add_ok = r.status >= 0,
				        .add0 = r.t0,
				        .add1 = r.t1};
			} else {
				/* deletes follow their add in the same file */
				struct edge_hist *e = NULL;
				for (size_t i = H->ne; i-- > 0;)
					if (H->e[i].id2 == r.id2) {
						e = &H->e[i];
						break;
					}
				if (!e)
					fail_msg("delete of %" PRIx64
					         " without its add",
					         r.id2);
				else
					*e = (struct edge_hist){
					        .id2 = e->id2,
					        .h = e->h,
					        .has_add = e->has_add,
					        .add_ok = e->add_ok,
					        .add0 = e->add0,
					        .add1 = e->add1,
					        .has_del = true,
					        .del_ok = r.status == 0,
					        .del0 = r.t0,
					        .del1 = r.t1};
			}
			free(p);
			continue;
		}
		if (H->nr == H->capr) {
			H->capr = H->capr ? H->capr * 2 : 1024;
			H->r = realloc(H->r, H->capr * sizeof(*H->r));
			H->p = realloc(H->p, H->capr * sizeof(*H->p));
			assert_true(H->r && H->p);
		}
		H->r[H->nr] = r;
		H->p[H->nr++] = p;
	}
	fclose(f);
}

/* An edge surely in a list read during [s, e], and possibly in it. */
static bool must_have(const struct edge_hist *x, uint64_t s, uint64_t e)
{
	return x->add_ok && x->add1 < s && !(x->has_del && x->del0 < e);
}
static bool may_have(const struct edge_hist *x, uint64_t s, uint64_t e)
{
	return x->has_add && x->add0 < e &&
	       !(x->has_del && x->del_ok && x->del1 < s);
}

/* A range read @i (over [@s, @e]) that returned its edges newest first,
 * each one that may be there, and every edge that must be: the
 * violations found (the first few printed, counting @bad). */
static unsigned check_range(const struct history *H, size_t i, uint64_t s,
                            uint64_t e, unsigned must, unsigned bad)
{
	const struct rec *r = &H->r[i];
	const struct pair *p = H->p[i];
	unsigned found = 0, n = 0;
	for (unsigned k = 0; k < r->n; k++) {
		if (k &&
		    !(p[k - 1].time > p[k].time ||
		      (p[k - 1].time == p[k].time &&
		       p[k - 1].id2 > p[k].id2)) &&
		    bad + n++ < 10)
			printf("range of %u: not newest first at %u\n", r->h,
			       k);
		const struct edge_hist *x = find_edge(H, p[k].id2);
		if (!x || x->h != r->h || !may_have(x, s, e)) {
			if (bad + n++ < 10)
				printf("range of %u holds %" PRIx64
				       ", which cannot be there\n",
				       r->h, p[k].id2);
			continue;
		}
		found += must_have(x, s, e);
	}
	if (found < must && bad + n++ < 10)
		printf("range of %u%s: %u of the %u edges surely there (%u "
		       "returned)\n",
		       r->h, r->kind == R_FINAL ? " (final)" : "", found, must,
		       r->n);
	if (r->kind == R_FINAL && r->n != must && bad + n++ < 10)
		printf("final list of %u: %u edges, %u expected\n", r->h, r->n,
		       must);
	return n;
}

/* Violations found (each printed, the first few only). */
static unsigned check(struct history *H, unsigned *reads)
{
	unsigned bad = 0;
	qsort(H->e, H->ne, sizeof(*H->e), cmp_id2);
	for (size_t i = 0; i < H->nr; i++) {
		const struct rec *r = &H->r[i];
		if (r->status) {
			if (r->kind == R_FINAL) {
				printf("final read of %u failed: %d\n", r->h,
				       r->status);
				bad++;
			}
			continue;
		}
		(*reads)++;
		uint64_t s = r->t0, e = r->t1;
		if (r->kind == R_FINAL)
			s = e = UINT64_MAX - 1;
		unsigned must = 0, may = 0;
		for (size_t k = 0; k < H->ne; k++) {
			if (H->e[k].h != r->h)
				continue;
			must += must_have(&H->e[k], s, e);
			may += may_have(&H->e[k], s, e);
		}
		if (r->kind != R_COUNT)
			bad += check_range(H, i, s, e, must, bad);
		else if ((r->count < must || r->count > may) && bad++ < 10)
			printf("count of %u: %" PRIu64 " outside [%u, %u]\n",
			       r->h, r->count, must, may);
	}
	return bad;
}

/* ---- parent ------------------------------------------------------------- */

static void all(struct gc_cluster *cl, char cmd, int ms)
{
	for (unsigned i = 0; i < GC_NM; i++)
		assert_int_equal(gc_write_all(cl->to[i], &cmd, 1), 0);
	for (unsigned i = 0; i < GC_NM; i++) {
		int32_t ans = -1;
		if (gc_read_all(cl->from[i], &ans, sizeof(ans), ms) || ans) {
			gc_kill(cl);
			fail_msg("machine %u: '%c' failed: %d", i, cmd, ans);
		}
	}
}

static void test_concurrency(void **state)
{
	(void)state;
	static struct gc_cluster cl; /* static: the teardown reaches it */
	gc_live = &cl;
	struct fg_attr a = conc_attr();
	assert_int_equal(gc_start(&cl, "conc", &a, conc_body, NULL), 0);
	char cmd = 'I';
	int32_t ans = -1;
	assert_int_equal(gc_write_all(cl.to[0], &cmd, 1), 0);
	assert_int_equal(gc_read_all(cl.from[0], &ans, sizeof(ans), 30000), 0);
	assert_int_equal(ans, 0);
	all(&cl, 'W', (int)(seconds * 1000) + 60000);
	cmd = 'F';
	assert_int_equal(gc_write_all(cl.to[0], &cmd, 1), 0);
	assert_int_equal(gc_read_all(cl.from[0], &ans, sizeof(ans), 30000), 0);
	assert_int_equal(ans, 0);
	char root[256];
	snprintf(root, sizeof(root), "%s", cl.root);
	/* the histories are complete once the machines are gone */
	for (unsigned i = 0; i < GC_NM; i++) {
		close(cl.to[i]);
		cl.to[i] = -1;
	}
	for (unsigned i = 0; i < GC_NM; i++) {
		int ws = 0;
		waitpid(cl.pid[i], &ws, 0);
		cl.pid[i] = 0;
		assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	}
	struct history H = {0};
	for (unsigned i = 0; i < GC_NM; i++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/hist-%u", root, i);
		load(&H, path);
	}
	gc_finish(&cl);
	unsigned reads = 0, adds = 0, dels = 0;
	for (size_t k = 0; k < H.ne; k++) {
		adds += H.e[k].add_ok;
		dels += H.e[k].has_del && H.e[k].del_ok;
	}
	unsigned bad = check(&H, &reads);
	printf("concurrency%s: %u adds, %u deletes, %u reads checked: %u "
	       "violations\n",
	       broken ? " (broken head replacement)" : "", adds, dels, reads,
	       bad);
	assert_true(adds > 100 && reads > 100);
	if (broken)
		assert_true(bad > 0);
	else
		assert_int_equal(bad, 0);
	for (size_t i = 0; i < H.nr; i++)
		free(H.p[i]);
	free(H.p);
	free(H.r);
	free(H.e);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--broken"))
			broken = true;
	const char *s = getenv("FG_CONC_SECONDS");
	if (s)
		seconds = strtod(s, NULL);
#ifdef FG_TEST_BREAK_HEAD
	if (!broken) {
		fprintf(stderr,
		        "this build breaks head replacement: --broken\n");
		return 2;
	}
#else
	if (broken) {
		fprintf(stderr,
		        "--broken needs the FG_TEST_BREAK_HEAD build\n");
		return 2;
	}
#endif
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_concurrency, gc_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
