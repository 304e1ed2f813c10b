/*
 * fgraph's single-node reads against its updates, on a 3-machine local
 * cluster (gcluster.h), checked from outside through the public API only.
 *
 * moves: one node holds FG_LIN_EDGES edges (more than one block) that are
 * never deleted; every machine overwrites them with random times (an edge
 * whose time rises moves to an earlier block, one whose time falls to a
 * later one) while reading the list whole (assoc_range from 0, from the
 * middle, assoc_time_range over all times). Every edge exists for the
 * whole of every read, so each read must return all of them (from the
 * middle: exactly the second half's count), none twice.
 *
 * history: each of two nodes has one writer, which cycles it through
 * creation, an edge, growth (a move to a larger object), an overwrite of
 * the edge, its deletion, and the node's deletion, so every state a read
 * can see names the cycle (generation) it belongs to. Every machine reads
 * both nodes meanwhile (obj_get, assoc_get, assoc_count, assoc_range,
 * assoc_time_range), each read recorded with its interval. The parent
 * checks that the history is linearizable: each read matches a state
 * current at some instant of its interval, and no read that ended before
 * another began saw a later state than it (the writes of a node are
 * sequential, so states are numbered and a read's possible states form a
 * set whose least and greatest member bound it).
 *
 * --broken runs a library built with FG_TEST_BREAK_LIN, whose multi-block
 * ranges are not validated and whose assoc_get runs beside the node's
 * updates (both as they were); the test then passes only when both
 * checks find violations. FG_LIN_SECONDS sets each run (default 3 s).
 */
#include "gcluster.h"
#include "graph_int.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define FG_LIN_EDGES 48u
#define MOVE_NODE    1u
#define LIN_NODES    2u /* ids 1 and 2, written by machines 0 and 1 */
#define EDGE_ID2     7u
#define GROWN_LEN    600u /* past any first capacity: the node moves */

static double seconds = 3.0;
static bool broken; /* --broken: the anomalies must be found */

struct answer {
	int32_t err;
	uint32_t bad, reads;
};

static uint64_t xr(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return fg_mix(*s);
}

/* ---- moves -------------------------------------------------------------- */

static int move_init(struct gc_machine *mc)
{
	struct fg_edge e[FG_LIN_EDGES];
	memset(e, 0, sizeof(e));
	for (unsigned i = 0; i < FG_LIN_EDGES; i++) {
		e[i].id2 = 1000 - i; /* newest first: equal times, id2 down */
		e[i].time = 5;
		e[i].len = 1;
		e[i].data[0] = 'm';
	}
	return fg_obj_load_sync(mc->g, mc->loop, MOVE_NODE, 1, 0, "m", 1, 1, e,
	                        FG_LIN_EDGES);
}

/* One read of the whole list; whether it returned what it must. */
static bool move_read(struct gc_machine *mc, unsigned kind, struct fg_edge *b,
                      int *err)
{
	unsigned n = 0, want = FG_LIN_EDGES;
	int rc;
	if (kind == 0) {
		rc = fg_assoc_range_sync(mc->g, mc->loop, MOVE_NODE, 1, 0,
		                         FG_MAX_LIMIT, b, FG_MAX_LIMIT, &n);
	} else if (kind == 1) {
		want = FG_LIN_EDGES - FG_LIN_EDGES / 2;
		rc = fg_assoc_range_sync(mc->g, mc->loop, MOVE_NODE, 1,
		                         FG_LIN_EDGES / 2, FG_MAX_LIMIT, b,
		                         FG_MAX_LIMIT, &n);
	} else {
		rc = fg_assoc_time_range_sync(
		        mc->g, mc->loop, MOVE_NODE, 1, INT64_MAX, INT64_MIN,
		        FG_MAX_LIMIT, b, FG_MAX_LIMIT, &n);
	}
	if (rc == -EBUSY)
		return true; /* kept changing: no answer, nothing to check */
	if (rc) {
		*err = rc;
		return true;
	}
	bool ok = n == want;
	for (unsigned i = 1; ok && i < n; i++)
		ok = edge_before(b[i - 1].time, b[i - 1].id2, b[i].time,
		                 b[i].id2);
	if (!ok)
		fprintf(stderr,
		        "m%u: read kind %u returned %u edges, %u "
		        "expected\n",
		        mc->me, kind, n, want);
	return ok;
}

static struct answer move_run(struct gc_machine *mc, struct fg_edge *b)
{
	struct answer a = {0};
	uint64_t rng = gc_now_ns() ^ ((uint64_t)mc->me << 52);
	uint64_t end = gc_now_ns() + (uint64_t)(seconds * 1e9);
	while (gc_now_ns() < end && !a.err) {
		unsigned x = (unsigned)(xr(&rng) % 100);
		if (x < 40) {
			uint64_t id2 = 1000 - xr(&rng) % FG_LIN_EDGES;
			int64_t t = (int64_t)(1 + xr(&rng) % 1000000);
			int rc = fg_assoc_add_sync(mc->g, mc->loop, MOVE_NODE,
			                           1, id2, t, "o", 1);
			if (rc != 0 && rc != -EBUSY)
				a.err = rc < 0 ? rc : -EPROTO;
			continue;
		}
		a.reads++;
		int err = 0;
		if (!move_read(mc, x % 3, b, &err))
			a.bad++;
		if (err)
			a.err = err;
	}
	return a;
}

/* ---- history ------------------------------------------------------------- */

enum { K_WRITE = 1, K_OBJ_GET, K_ASSOC_GET, K_COUNT, K_RANGE, K_TIME_RANGE };

/* What one operation saw (reads) or did (writes: step of the cycle). */
struct lrec {
	uint8_t kind, node, step, pad;
	int32_t status;
	uint64_t t0, t1;
	uint64_t gen;     /* obj_get: the data's generation; writes: theirs */
	uint32_t version; /* obj_get */
	uint32_t n;       /* edges or count */
	int64_t etime;    /* the edge's time when n == 1 */
};

/* A node's cycle: the state after step s of generation g. */
enum { S_ADD, S_EDGE, S_GROW, S_OVERWRITE, S_EDGE_DEL, S_DEL, S_NSTEPS };

static int64_t edge_time(uint64_t g, unsigned step)
{
	return (int64_t)(g * 4 + (step >= S_OVERWRITE ? 2 : 1));
}

static int lin_write(struct gc_machine *mc, uint64_t id, uint64_t g,
                     unsigned step)
{
	uint8_t data[GROWN_LEN];
	memset(data, 'g', sizeof(data));
	memcpy(data, &g, 8);
	switch (step) {
	case S_ADD: return fg_obj_add_sync(mc->g, mc->loop, id, 1, 0, data, 8);
	case S_EDGE:
	case S_OVERWRITE: {
		int rc = fg_assoc_add_sync(mc->g, mc->loop, id, 1, EDGE_ID2,
		                           edge_time(g, step), "e", 1);
		return rc < 0 ? rc : 0; /* 1 added, 0 overwritten */
	}
	case S_GROW:
		return fg_obj_update_sync(mc->g, mc->loop, id, 1, 0, data,
		                          GROWN_LEN);
	case S_EDGE_DEL:
		return fg_assoc_delete_sync(mc->g, mc->loop, id, 1, EDGE_ID2);
	default: return fg_obj_delete_sync(mc->g, mc->loop, id);
	}
}

static void lin_read(struct gc_machine *mc, struct lrec *r, struct fg_edge *b)
{
	uint64_t id = r->node;
	unsigned n = 0;
	uint64_t cnt = 0;
	struct fg_obj o;
	static const uint64_t id2s[1] = {EDGE_ID2};
	r->t0 = gc_now_ns();
	switch (r->kind) {
	case K_OBJ_GET:
		r->status = fg_obj_get_sync(mc->g, mc->loop, id, &o);
		if (!r->status) {
			memcpy(&r->gen, o.data, 8);
			r->version = o.version;
		}
		break;
	case K_ASSOC_GET:
		r->status = fg_assoc_get_sync(mc->g, mc->loop, id, 1, id2s, 1,
		                              INT64_MAX, INT64_MIN, b, 4, &n);
		break;
	case K_COUNT:
		r->status = fg_assoc_count_sync(mc->g, mc->loop, id, 1, &cnt);
		n = (unsigned)cnt;
		break;
	case K_RANGE:
		r->status = fg_assoc_range_sync(mc->g, mc->loop, id, 1, 0, 10,
		                                b, 4, &n);
		break;
	default:
		r->status = fg_assoc_time_range_sync(mc->g, mc->loop, id, 1,
		                                     INT64_MAX, INT64_MIN, 10,
		                                     b, 4, &n);
	}
	r->t1 = gc_now_ns();
	r->n = n;
	if (!r->status && r->kind != K_COUNT && r->kind != K_OBJ_GET && n)
		r->etime = b[0].time;
}

static struct answer hist_run(struct gc_machine *mc, FILE *f, struct fg_edge *b)
{
	struct answer a = {0};
	uint64_t rng = gc_now_ns() ^ ((uint64_t)mc->me << 52);
	uint64_t end = gc_now_ns() + (uint64_t)(seconds * 1e9);
	uint64_t mine = mc->me < LIN_NODES ? mc->me + 1 : 0, g = 1;
	unsigned step = 0;
	while (!a.err) {
		/* the writer ends its cycle, so the node ends absent */
		if (gc_now_ns() >= end && (!mine || step == 0))
			break;
		struct lrec r = {0};
		if (mine && (gc_now_ns() >= end || xr(&rng) % 100 < 30)) {
			r = (struct lrec){.kind = K_WRITE,
			                  .node = (uint8_t)mine,
			                  .step = (uint8_t)step,
			                  .gen = g};
			r.t0 = gc_now_ns();
			r.status = lin_write(mc, mine, g, step);
			r.t1 = gc_now_ns();
			if (r.status) {
				fprintf(stderr,
				        "m%u: write %u of gen %" PRIu64
				        " failed: %d\n",
				        mc->me, step, g, r.status);
				a.err = r.status;
			}
			if (++step == S_NSTEPS) {
				step = 0;
				g++;
			}
			fwrite(&r, sizeof(r), 1, f);
			continue;
		}
		/* a pair of reads of one node: assoc_get (the owner's), then
		 * one of the lock-free reads */
		uint8_t node = (uint8_t)(1 + xr(&rng) % LIN_NODES);
		for (unsigned k = 0; k < 2; k++) {
			r = (struct lrec){.node = node};
			r.kind = k ? (uint8_t)(K_OBJ_GET + xr(&rng) % 5)
			           : K_ASSOC_GET;
			lin_read(mc, &r, b);
			if (r.status > 0) { /* reads return 0 or an error */
				fprintf(stderr, "m%u: read %u returned %d\n",
				        mc->me, r.kind, r.status);
				a.err = -EPROTO;
			}
			fwrite(&r, sizeof(r), 1, f);
			a.reads++;
		}
	}
	return a;
}

static int lin_body(struct gc_machine *mc, void *arg)
{
	(void)arg;
	struct fg_edge *b = calloc(FG_MAX_LIMIT, sizeof(*b));
	char path[400];
	snprintf(path, sizeof(path), "%s/lin-%u", mc->cl->root, mc->me);
	FILE *f = fopen(path, "w");
	if (!b || !f)
		return 20;
	for (;;) {
		char cmd;
		if (gc_wait_cmd(mc, &cmd, 1))
			break;
		struct answer a = {0};
		if (cmd == 'I')
			a.err = move_init(mc);
		else if (cmd == 'M')
			a = move_run(mc, b);
		else if (cmd == 'H')
			a = hist_run(mc, f, b);
		fflush(f);
		if (gc_write_all(mc->out, &a, sizeof(a)))
			break;
	}
	fclose(f);
	free(b);
	return 0;
}

/* ---- the checker -------------------------------------------------------- */

struct state {
	bool present, edge;
	uint64_t gen;
	uint32_t version;
	int64_t etime;
	uint64_t from, to; /* when it may be current */
};

/* The states of @node, in order, from its writes (one writer: they are
 * sequential, and in the file in order). */
static size_t states_of(const struct lrec *r, size_t nr, uint8_t node,
                        struct state *st)
{
	size_t k = 0;
	st[k++] = (struct state){.from = 0};
	for (size_t i = 0; i < nr; i++) {
		if (r[i].kind != K_WRITE || r[i].node != node)
			continue;
		struct state s = st[k - 1];
		st[k - 1].to = r[i].t1;
		s.from = r[i].t0;
		switch (r[i].step) {
		case S_ADD:
			s = (struct state){.present = true,
			                   .gen = r[i].gen,
			                   .version = 1,
			                   .from = r[i].t0};
			break;
		case S_EDGE:
		case S_OVERWRITE:
			s.edge = true;
			s.etime = edge_time(r[i].gen, r[i].step);
			break;
		case S_GROW: s.version++; break;
		case S_EDGE_DEL: s.edge = false; break;
		default: s.present = false;
		}
		st[k++] = s;
	}
	st[k - 1].to = UINT64_MAX;
	return k;
}

static bool matches(const struct state *s, const struct lrec *r)
{
	if (r->status == -ENOENT)
		return !s->present;
	if (!s->present)
		return false;
	if (r->kind == K_OBJ_GET)
		return r->gen == s->gen && r->version == s->version;
	if (r->n != (s->edge ? 1u : 0u))
		return false;
	return r->kind == K_COUNT || !r->n || r->etime == s->etime;
}

struct span {
	uint64_t t0, t1;
	size_t lo, hi;
};

static int cmp_t1(const void *a, const void *b)
{
	uint64_t x = ((const struct span *)a)->t1,
	         y = ((const struct span *)b)->t1;
	return x < y ? -1 : x > y;
}

/* Pairs of reads (@sp, whose states are known) where one that ended
 * before the other began saw a later state than it: none in a
 * linearizable history. */
static unsigned order_violations(struct span *sp, size_t nsp, uint8_t node)
{
	unsigned bad = 0;
	qsort(sp, nsp, sizeof(*sp), cmp_t1);
	size_t *pmax = calloc(nsp + 1, sizeof(*pmax)),
	       *who = calloc(nsp + 1, sizeof(*who));
	assert_true(pmax && who);
	for (size_t i = 0; i < nsp; i++) {
		pmax[i] = i && pmax[i - 1] > sp[i].lo ? pmax[i - 1] : sp[i].lo;
		who[i] = i && pmax[i - 1] > sp[i].lo ? who[i - 1] : i;
	}
	for (size_t i = 0; i < nsp; i++) {
		size_t lo = 0, hi = nsp; /* reads with t1 < sp[i].t0 */
		while (lo < hi) {
			size_t m = (lo + hi) / 2;
			if (sp[m].t1 < sp[i].t0)
				lo = m + 1;
			else
				hi = m;
		}
		if (lo && pmax[lo - 1] > sp[i].hi && bad++ < 10) {
			const struct span *e = &sp[who[lo - 1]];
			printf("node %u: a read in [%" PRIu64 ", %" PRIu64
			       "] saw state %zu or later, a later one in "
			       "[%" PRIu64 ", %" PRIu64
			       "] state %zu or earlier\n",
			       node, e->t0, e->t1, e->lo, sp[i].t0, sp[i].t1,
			       sp[i].hi);
		}
	}
	free(pmax);
	free(who);
	return bad;
}

/* The first of the @ns states @st (in write order) that may be current
 * after @t0. A node's writes are sequential, so both ends of the states'
 * intervals rise with their index: the states a read's interval meets are
 * one run from here, and the check stays linear in the reads however many
 * writes a run makes. */
static size_t first_current(const struct state *st, size_t ns, uint64_t t0)
{
	size_t lo = 0, hi = ns;
	while (lo < hi) {
		size_t m = (lo + hi) / 2;
		if (st[m].to > t0)
			hi = m;
		else
			lo = m + 1;
	}
	return lo;
}

/* Violations among @node's reads. */
static unsigned check_node(const struct lrec *r, size_t nr, uint8_t node,
                           unsigned *checked)
{
	struct state *st = calloc(nr + 1, sizeof(*st));
	struct span *sp = calloc(nr + 1, sizeof(*sp));
	assert_true(st && sp);
	size_t ns = states_of(r, nr, node, st), nsp = 0;
	unsigned bad = 0;
	for (size_t i = 0; i < nr; i++) {
		if (r[i].kind == K_WRITE || r[i].node != node)
			continue;
		if (r[i].status && r[i].status != -ENOENT)
			continue; /* no answer (-EBUSY ...): nothing seen */
		struct span s = {r[i].t0, r[i].t1, SIZE_MAX, 0};
		size_t j = first_current(st, ns, s.t0);
		for (; j < ns && st[j].from < s.t1; j++)
			if (matches(&st[j], &r[i])) {
				if (s.lo == SIZE_MAX)
					s.lo = j;
				s.hi = j;
			}
		(*checked)++;
		if (s.lo == SIZE_MAX) {
			if (bad++ < 10)
				printf("node %u: read %u -> %d (n %u) matches "
				       "no state of its interval\n",
				       node, r[i].kind, r[i].status, r[i].n);
			continue;
		}
		sp[nsp++] = s;
	}
	bad += order_violations(sp, nsp, node);
	free(st);
	free(sp);
	return bad;
}

/* ---- parent ------------------------------------------------------------- */

static struct answer all(struct gc_cluster *cl, char cmd, int ms)
{
	struct answer sum = {0};
	for (unsigned i = 0; i < GC_NM; i++)
		assert_int_equal(gc_write_all(cl->to[i], &cmd, 1), 0);
	for (unsigned i = 0; i < GC_NM; i++) {
		struct answer a = {.err = -1};
		if (gc_read_all(cl->from[i], &a, sizeof(a), ms) || a.err) {
			gc_kill(cl);
			fail_msg("machine %u: '%c' failed: %d", i, cmd, a.err);
		}
		sum.bad += a.bad;
		sum.reads += a.reads;
	}
	return sum;
}

static struct fg_attr lin_attr(void)
{
	return (struct fg_attr){.cache_entries = 4096};
}

static void test_moves(void **state)
{
	(void)state;
	static struct gc_cluster cl;
	gc_live = &cl;
	struct fg_attr a = lin_attr();
	assert_int_equal(gc_start(&cl, "lin", &a, lin_body, NULL), 0);
	char cmd = 'I';
	struct answer ans = {.err = -1};
	assert_int_equal(gc_write_all(cl.to[0], &cmd, 1), 0);
	assert_int_equal(gc_read_all(cl.from[0], &ans, sizeof(ans), 30000), 0);
	assert_int_equal(ans.err, 0);
	ans = all(&cl, 'M', (int)(seconds * 1000) + 60000);
	printf("moves: %u reads of a %u-edge list under overwrites, %u "
	       "missing or repeating edges\n",
	       ans.reads, FG_LIN_EDGES, ans.bad);
	assert_int_equal(gc_finish(&cl), 0);
	assert_true(ans.reads > 100);
	if (broken)
		assert_true(ans.bad > 0);
	else
		assert_int_equal(ans.bad, 0);
}

static void test_history(void **state)
{
	(void)state;
	static struct gc_cluster cl;
	gc_live = &cl;
	struct fg_attr a = lin_attr();
	assert_int_equal(gc_start(&cl, "lin", &a, lin_body, NULL), 0);
	struct answer ans = all(&cl, 'H', (int)(seconds * 1000) + 60000);
	char root[256];
	snprintf(root, sizeof(root), "%s", cl.root);
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
	struct lrec *r = NULL;
	size_t nr = 0, cap = 0, writes = 0;
	for (unsigned i = 0; i < GC_NM; i++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/lin-%u", root, i);
		FILE *f = fopen(path, "r");
		assert_non_null(f);
		struct lrec x;
		while (fread(&x, sizeof(x), 1, f) == 1) {
			if (nr == cap) {
				cap = cap ? 2 * cap : 4096;
				r = realloc(r, cap * sizeof(*r));
				assert_non_null(r);
			}
			r[nr++] = x;
			writes += x.kind == K_WRITE;
		}
		fclose(f);
	}
	gc_finish(&cl);
	unsigned bad = 0, checked = 0;
	for (uint8_t node = 1; node <= LIN_NODES; node++)
		bad += check_node(r, nr, node, &checked);
	printf("history: %zu writes, %u reads checked (of %u): %u "
	       "violations\n",
	       writes, checked, ans.reads, bad);
	free(r);
	assert_true(writes > 12 && checked > 100);
	if (broken)
		assert_true(bad > 0);
	else
		assert_int_equal(bad, 0);
}

int main(int argc, char **argv)
{
	broken = argc > 1 && !strcmp(argv[1], "--broken");
#ifdef FG_TEST_BREAK_LIN
	if (!broken) {
		fprintf(stderr, "this build breaks the reads: --broken\n");
		return 2;
	}
#else
	if (broken) {
		fprintf(stderr, "--broken needs the FG_TEST_BREAK_LIN build\n");
		return 2;
	}
#endif
	const char *s = getenv("FG_LIN_SECONDS");
	if (s)
		seconds = strtod(s, NULL);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_moves, gc_teardown),
	        cmocka_unit_test_teardown(test_history, gc_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
