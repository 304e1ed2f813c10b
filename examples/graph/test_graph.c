/*
 * fgraph's tests, on a 3-machine local cluster (gcluster.h, public API):
 *
 *   model        a random sequence of every operation, issued in turns by
 *                the 3 machines, each result compared with an in-memory
 *                model (gmodel.h) that every machine keeps; lists that span
 *                many blocks (some adds older than the head: middle inserts
 *                and splits), deletes that empty them, heads replaced under
 *                clients holding the old head's pointer (counted), inverse
 *                edges (types 2 <-> 3, 4 its own inverse), a fifth type
 *                (no room)
 *   bad_input    bad arguments, unknown ids, a deleted node, a stale fat
 *                pointer (FARM_EFREED), malformed and misrouted owner
 *                messages: clear errors, nothing changed
 *   concurrency  (test_graph_conc.c)
 *
 * FG_SEED=<n> repeats a sequence; FG_OPS=<n> sets its length.
 */
#include "gcluster.h"
#include "gmodel.h"
#include "graph_int.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define BATCH 25u

static uint64_t seed;
static unsigned nops = 3000;

static struct fg_attr model_attr(void)
{
	struct fg_attr a = {.cache_entries = 1024};
	a.inverse[2] = 3;
	a.inverse[3] = 2;
	a.inverse[4] = 4;
	return a;
}

/* ---- the operation sequence --------------------------------------------- */

struct rng {
	uint64_t s;
};
static uint64_t rnd(struct rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return fg_mix(r->s);
}
static unsigned rn(struct rng *r, unsigned n)
{
	return (unsigned)(rnd(r) % n);
}

struct mctx {
	struct gm m;
	unsigned next; /* ops applied to the model */
	struct fg_edge *a, *b;
	char err[400];
	unsigned max_len, emptied;
};

static int mfail(struct mctx *c, unsigned j, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(c->err, sizeof(c->err), "op %u: ", j);
	va_start(ap, fmt);
	vsnprintf(c->err + k, sizeof(c->err) - (size_t)k, fmt, ap);
	va_end(ap);
	return -1;
}

static bool edges_equal(const struct fg_edge *x, const struct fg_edge *y,
                        unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (x[i].id1 != y[i].id1 || x[i].id2 != y[i].id2 ||
		    x[i].atype != y[i].atype || x[i].time != y[i].time ||
		    x[i].len != y[i].len ||
		    memcmp(x[i].data, y[i].data, x[i].len))
			return false;
	return true;
}

static uint64_t pick_node(struct rng *r)
{
	/* a few hot nodes get long lists */
	return rn(r, 10) < 6 ? 1 + rn(r, 3) : 1 + rn(r, GM_NODES);
}

/* Op @j: make it, apply it to the model, and (@g non-NULL) run it on the
 * store and compare. 0, or -1 with the reason in c->err. */
static int step(struct mctx *c, unsigned j, fg_graph *g, farm_loop *loop)
{
	struct rng r = {.s = seed * 1000003u + j};
	struct gm *m = &c->m;
	unsigned kind = rn(&r, 100);
	uint64_t id1 = pick_node(&r);
	uint32_t t = 1 + rn(&r, 5); /* 5: the type with no room */
	if (rn(&r, 4))
		t = 1 + rn(&r, 4);
	uint64_t id2 =
	        t == 1 && rn(&r, 2) ? 100 + rn(&r, 400) : 1 + rn(&r, GM_NODES);
	int64_t time = (int64_t)j * 16;
	if (rn(&r, 5) == 0)
		time -= (int64_t)rn(&r, j * 16 + 1); /* older than the head */
	uint8_t data[FG_MAX_DATA];
	uint32_t len = rn(&r, 3) ? rn(&r, FG_MAX_EDGE_DATA + 1) : 0;
	for (uint32_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(j + i);
	int want, got;
	if (kind < 5) { /* obj_add */
		len = rn(&r, 2) ? rn(&r, 64) : rn(&r, FG_MAX_DATA + 1);
		want = gm_obj_add(m, id1, 7, time, data, len);
		got = g ? fg_obj_add_sync(g, loop, id1, 7, time, data, len)
		        : want;
	} else if (kind < 9) { /* obj_update, sometimes growing */
		len = rn(&r, 2) ? rn(&r, 64) : rn(&r, FG_MAX_DATA + 1);
		want = gm_obj_update(m, id1, 8 + rn(&r, 3), time, data, len);
		got = g ? fg_obj_update_sync(g, loop, id1, m->n[id1].o.otype,
		                             time, data, len)
		        : want;
	} else if (kind < 10) { /* obj_delete (node 1 keeps its long list) */
		id1 = 2 + rn(&r, GM_NODES - 1);
		want = gm_obj_delete(m, id1);
		got = g ? fg_obj_delete_sync(g, loop, id1) : want;
	} else if (kind < 46) { /* assoc_add, half of them to one long list */
		if (rn(&r, 2)) {
			id1 = 1;
			t = 1;
			id2 = 100 + rn(&r, 4000);
		}
		want = gm_assoc_add(m, id1, t, id2, time, data, len);
		got = g ? fg_assoc_add_sync(g, loop, id1, t, id2, time, data,
		                            len)
		        : want;
	} else if (kind < 58) { /* assoc_delete, mostly of edges there */
		struct gm_node *n = gm_node(m, id1);
		if (n && n->l[t].n && rn(&r, 4))
			id2 = n->l[t].e[rn(&r, n->l[t].n)].id2;
		want = gm_assoc_delete(m, id1, t, id2);
		got = g ? fg_assoc_delete_sync(g, loop, id1, t, id2) : want;
		c->emptied += !want && !m->n[id1].l[t].n;
	} else if (kind < 62) { /* assoc_change_type */
		struct gm_node *n = gm_node(m, id1);
		if (n && n->l[t].n && rn(&r, 4))
			id2 = n->l[t].e[rn(&r, n->l[t].n)].id2;
		uint32_t nt = 1 + rn(&r, 4);
		want = gm_change_type(m, id1, t, id2, nt);
		got = g ? fg_assoc_change_type_sync(g, loop, id1, t, id2, nt)
		        : want;
	} else if (kind < 70) { /* obj_get */
		struct gm_node *n = gm_node(m, id1);
		want = n ? 0 : -ENOENT;
		if (!g)
			goto done;
		struct fg_obj o;
		got = fg_obj_get_sync(g, loop, id1, &o);
		if (!got && !want &&
		    (o.id != id1 || o.otype != n->o.otype ||
		     o.version != n->o.version || o.time != n->o.time ||
		     o.len != n->o.len || memcmp(o.data, n->o.data, o.len)))
			return mfail(
			        c, j,
			        "obj_get %" PRIu64 ": version %u/%u len %u/%u",
			        id1, o.version, n->o.version, o.len, n->o.len);
	} else if (kind < 78) { /* assoc_count */
		struct gm_node *n = gm_node(m, id1);
		want = n ? 0 : -ENOENT;
		if (!g)
			goto done;
		uint64_t cnt = 0;
		got = fg_assoc_count_sync(g, loop, id1, t, &cnt);
		if (!got && !want && cnt != n->l[t].n)
			return mfail(c, j,
			             "count %" PRIu64 "/%u: %" PRIu64
			             ", model %u",
			             id1, t, cnt, n->l[t].n);
	} else if (kind < 90) { /* assoc_range */
		uint32_t pos = rn(&r, 3) ? 0 : rn(&r, 80);
		uint32_t lim = rn(&r, 2) ? 1 + rn(&r, 10) : 1 + rn(&r, 300);
		want = gm_range(m, id1, t, pos, lim, c->a);
		if (!g)
			goto done;
		unsigned n = 0;
		got = fg_assoc_range_sync(g, loop, id1, t, pos, lim, c->b,
		                          FG_MAX_LIMIT, &n);
		if (got >= 0 && want >= 0) {
			if (got) /* reads return 0, the edges in *n */
				return mfail(c, j, "read returned %d, not 0",
				             got);
			if ((int)n != want || !edges_equal(c->a, c->b, n))
				return mfail(c, j,
				             "range %" PRIu64
				             "/%u pos %u limit %u: %u "
				             "edges, model %d",
				             id1, t, pos, lim, n, want);
			got = want;
		}
	} else if (kind < 95) { /* assoc_time_range */
		int64_t hi = (int64_t)rn(&r, j * 16 + 1),
		        lo = hi - rn(&r, 2000);
		uint32_t lim = 1 + rn(&r, 50);
		want = gm_time_range(m, id1, t, hi, lo, lim, c->a);
		if (!g)
			goto done;
		unsigned n = 0;
		got = fg_assoc_time_range_sync(g, loop, id1, t, hi, lo, lim,
		                               c->b, FG_MAX_LIMIT, &n);
		if (got >= 0 && want >= 0) {
			if (got) /* reads return 0, the edges in *n */
				return mfail(c, j, "read returned %d, not 0",
				             got);
			if ((int)n != want || !edges_equal(c->a, c->b, n))
				return mfail(c, j,
				             "time_range %" PRIu64
				             "/%u: %u edges, model %d",
				             id1, t, n, want);
			got = want;
		}
	} else { /* assoc_get */
		uint64_t ids[6];
		unsigned nid = 1 + rn(&r, 6);
		struct gm_node *n = gm_node(m, id1);
		for (unsigned i = 0; i < nid; i++)
			ids[i] = n && n->l[t].n && rn(&r, 2)
			                 ? n->l[t].e[rn(&r, n->l[t].n)].id2
			                 : 1 + rn(&r, 500);
		int64_t hi =
		        rn(&r, 4) ? INT64_MAX : (int64_t)rn(&r, j * 16 + 1);
		int64_t lo = rn(&r, 4) ? INT64_MIN : hi - rn(&r, 5000);
		want = gm_get(m, id1, t, ids, nid, hi, lo, c->a);
		if (!g)
			goto done;
		unsigned k = 0;
		got = fg_assoc_get_sync(g, loop, id1, t, ids, nid, hi, lo, c->b,
		                        FG_GET_MAX, &k);
		if (got >= 0 && want >= 0) {
			/* reads return 0, the edges in *n (graph.h) */
			if (got)
				return mfail(c, j, "get returned %d, not 0",
				             got);
			if ((int)k != want || !edges_equal(c->a, c->b, k))
				return mfail(c, j,
				             "get %" PRIu64
				             "/%u: %u edges, model %d",
				             id1, t, k, want);
			got = want;
		}
	}
	if (g && got != want)
		return mfail(c, j,
		             "kind %u id1 %" PRIu64 " t %u id2 %" PRIu64
		             ": %d (%s), model %d",
		             kind, id1, t, id2, got, fg_strerror(got), want);
done:
	for (unsigned k = 1; k <= GM_NODES; k++)
		for (unsigned tt = 1; tt <= GM_TYPES; tt++)
			if (m->n[k].l[tt].n > c->max_len)
				c->max_len = m->n[k].l[tt].n;
	return 0;
}

/* ---- machine side -------------------------------------------------------- */

struct cmd {
	uint32_t op; /* 'S' steps, 'B' bad input, 'T' stats */
	uint32_t from, to;
};

struct answer {
	int32_t status;
	uint32_t max_len, emptied;
	struct fg_stats st;
	char err[512];
};

static int bad_input(struct gc_machine *mc, char *err, size_t len);

static int model_body(struct gc_machine *mc, void *arg)
{
	(void)arg;
	struct mctx *c = calloc(1, sizeof(*c));
	c->a = calloc(FG_MAX_LIMIT, sizeof(*c->a));
	c->b = calloc(FG_MAX_LIMIT, sizeof(*c->b));
	struct fg_attr a = model_attr();
	memcpy(c->m.inverse, a.inverse, sizeof(a.inverse));
	for (;;) {
		struct cmd cmd;
		if (gc_wait_cmd(mc, &cmd, sizeof(cmd)))
			return 0;
		struct answer ans = {0};
		if (cmd.op == 'S') {
			while (c->next < cmd.from)
				step(c, c->next++, NULL, NULL);
			for (; c->next < cmd.to && !ans.status; c->next++)
				ans.status = step(c, c->next, mc->g, mc->loop);
			if (ans.status)
				snprintf(ans.err, sizeof(ans.err), "m%u %s",
				         mc->me, c->err);
		} else if (cmd.op == 'B') {
			ans.status = bad_input(mc, ans.err, sizeof(ans.err));
		}
		ans.max_len = c->max_len;
		ans.emptied = c->emptied;
		fg_stats_get(mc->g, &ans.st);
		if (gc_write_all(mc->out, &ans, sizeof(ans)))
			return 1;
	}
}

/* ---- parent side --------------------------------------------------------- */

static struct answer ask(struct gc_cluster *cl, unsigned i, struct cmd cmd)
{
	struct answer a;
	if (gc_write_all(cl->to[i], &cmd, sizeof(cmd)) ||
	    gc_read_all(cl->from[i], &a, sizeof(a), 60000)) {
		gc_kill(cl);
		fail_msg("machine %u did not answer", i);
	}
	return a;
}

static void test_model(void **state)
{
	(void)state;
	static struct gc_cluster cl; /* static: the teardown reaches it */
	gc_live = &cl;
	struct fg_attr a = model_attr();
	assert_int_equal(gc_start(&cl, "model", &a, model_body, NULL), 0);
	printf("model: seed %" PRIu64 ", %u operations\n", seed, nops);
	for (unsigned from = 0; from < nops; from += BATCH) {
		unsigned to = from + BATCH < nops ? from + BATCH : nops;
		unsigned i = (from / BATCH) % GC_NM;
		struct answer ans =
		        ask(&cl, i,
		            (struct cmd){.op = 'S', .from = from, .to = to});
		if (ans.status) {
			gc_kill(&cl);
			fail_msg("%s (FG_SEED=%" PRIu64 ")", ans.err, seed);
		}
	}
	uint64_t retries = 0, reads = 0, ops = 0, txr = 0, heads = 0;
	unsigned max_len = 0, emptied = 0;
	for (unsigned i = 0; i < GC_NM; i++) {
		struct answer ans = ask(&cl, i, (struct cmd){.op = 'T'});
		retries += ans.st.retries;
		heads += ans.st.stale_heads;
		emptied = ans.emptied;
		txr += ans.st.tx_retries;
		max_len = ans.max_len > max_len ? ans.max_len : max_len;
		for (unsigned k = 0; k < FG_NOPS; k++) {
			ops += ans.st.ops[k];
			reads += ans.st.reads[k];
		}
	}
	printf("model: %" PRIu64 " ops, %" PRIu64 " reads, longest list %u, "
	       "%u lists emptied by deletes, %" PRIu64 " stale pointers met "
	       "(%" PRIu64 " cached heads replaced), %" PRIu64 " tx retries\n",
	       ops, reads, max_len, emptied, retries, heads, txr);
	/* lists spanning many blocks (at most 32 edges a block) */
	assert_true(max_len >= 4 * 32);
	/* deletes emptied lists; clients met heads replaced under their
	 * cached pointers */
	assert_true(emptied > 0);
	assert_true(heads > 0);
	struct answer ans = ask(&cl, 0, (struct cmd){.op = 'B'});
	if (ans.status) {
		gc_kill(&cl);
		fail_msg("bad input: %s", ans.err);
	}
	assert_int_equal(gc_finish(&cl), 0);
}

/* ---- bad input (machine 0) ---------------------------------------------- */

#define CHECK(cond)                                                         \
	do {                                                                \
		if (!(cond)) {                                              \
			snprintf(err, len, "line %d: %s", __LINE__, #cond); \
			return -1;                                          \
		}                                                           \
	} while (0)

static void nop_edges(farm_loop *l, void *c, int s, const struct fg_edge *e,
                      unsigned n)
{
}
static void nop_done(farm_loop *l, void *c, int s)
{
}

struct rawc {
	volatile int done;
	int status;
};
static void raw_cb(farm_loop *loop, void *ctx, int status, const void *reply,
                   uint32_t rlen)
{
	struct rawc *w = ctx;
	w->status = status;
	w->done = 1;
}

static int snapshot(struct gc_machine *mc, uint64_t id, struct fg_obj *o,
                    struct fg_edge *e, unsigned *n)
{
	int rc = fg_obj_get_sync(mc->g, mc->loop, id, o);
	if (!rc)
		rc = fg_assoc_range_sync(mc->g, mc->loop, id, 1, 0, 1000, e,
		                         1000, n);
	return rc;
}

static int bad_input(struct gc_machine *mc, char *err, size_t len)
{
	fg_graph *g = mc->g;
	farm_loop *l = mc->loop;
	const uint64_t X = 5000, Y = 5001;
	uint8_t big[FG_MAX_DATA + 1] = {1};
	CHECK(fg_obj_add_sync(g, l, X, 1, 10, "x", 1) == 0);
	CHECK(fg_obj_add_sync(g, l, Y, 1, 10, "y", 1) == 0);
	for (unsigned i = 0; i < 40; i++)
		CHECK(fg_assoc_add_sync(g, l, X, 1, 100 + i, 20 + i, "e", 1) ==
		      1);
	static struct fg_edge e0[1000], e1[1000];
	struct fg_obj o0, o1;
	unsigned n0 = 0, n1 = 0;
	CHECK(snapshot(mc, X, &o0, e0, &n0) == 0 && n0 == 40);

	/* arguments */
	CHECK(fg_obj_add_sync(g, l, 0, 1, 1, "a", 1) == -EINVAL);
	CHECK(fg_obj_add_sync(g, l, 7000, 1, 1, big, sizeof(big)) == -EMSGSIZE);
	CHECK(fg_obj_update_sync(g, l, X, 1, 1, big, sizeof(big)) == -EMSGSIZE);
	CHECK(fg_obj_add_sync(g, l, 7000, 1, 1, NULL, 5) == -EINVAL);
	CHECK(fg_assoc_add_sync(g, l, X, 1, 9, 1, big, FG_MAX_EDGE_DATA + 1) ==
	      -EMSGSIZE);
	CHECK(fg_assoc_add_sync(g, l, X, 0, 9, 1, "a", 1) == -EINVAL);
	CHECK(fg_assoc_add_sync(g, l, X, FG_MAX_ATYPE + 1, 9, 1, "a", 1) ==
	      -EINVAL);
	CHECK(fg_assoc_add_sync(g, l, X, 1, 0, 1, "a", 1) == -EINVAL);
	CHECK(fg_assoc_change_type_sync(g, l, X, 1, 100, 0) == -EINVAL);
	unsigned n = 0;
	CHECK(fg_assoc_range_sync(g, l, X, 1, 0, 0, e1, 10, &n) == -ERANGE);
	CHECK(fg_assoc_range_sync(g, l, X, 1, 0, FG_MAX_LIMIT + 1, e1, 10,
	                          &n) == -ERANGE);
	CHECK(fg_assoc_range_sync(g, l, X, 1, (uint32_t)-1, 10, e1, 10, &n) ==
	      -ERANGE);
	CHECK(fg_assoc_range(g, l, X, 1, 0, (uint32_t)-5, nop_edges, NULL) ==
	      -ERANGE);
	CHECK(fg_assoc_range(g, l, X, 1, 0, 10, NULL, NULL) == -EINVAL);
	CHECK(fg_assoc_time_range_sync(g, l, X, 1, 5, 10, 10, e1, 10, &n) ==
	      -ERANGE);
	uint64_t ids[FG_GET_MAX + 1] = {100};
	CHECK(fg_assoc_get_sync(g, l, X, 1, ids, 0, INT64_MAX, INT64_MIN, e1,
	                        10, &n) == -ERANGE);
	CHECK(fg_assoc_get_sync(g, l, X, 1, ids, FG_GET_MAX + 1, INT64_MAX,
	                        INT64_MIN, e1, 10, &n) == -ERANGE);
	CHECK(fg_assoc_get_sync(g, l, X, 1, NULL, 1, INT64_MAX, INT64_MIN, e1,
	                        10, &n) == -EINVAL);
	CHECK(fg_obj_delete(g, NULL, X, nop_done, NULL) == -EINVAL);
	CHECK(fg_obj_delete(NULL, l, X, nop_done, NULL) == -EINVAL);

	/* unknown ids and edges */
	struct fg_obj o;
	uint64_t cnt;
	CHECK(fg_obj_get_sync(g, l, 99999, &o) == -ENOENT);
	CHECK(fg_assoc_count_sync(g, l, 99999, 1, &cnt) == -ENOENT);
	CHECK(fg_assoc_range_sync(g, l, 99999, 1, 0, 5, e1, 10, &n) == -ENOENT);
	CHECK(fg_assoc_add_sync(g, l, 99999, 1, X, 1, "a", 1) == -ENOENT);
	CHECK(fg_assoc_add_sync(g, l, X, 2, 99999, 1, "a", 1) == -ENOENT);
	CHECK(fg_assoc_delete_sync(g, l, X, 1, 99999) == -ENOENT);
	CHECK(fg_assoc_change_type_sync(g, l, X, 1, 99999, 4) == -ENOENT);
	CHECK(fg_obj_update_sync(g, l, 99999, 1, 1, "a", 1) == -ENOENT);
	CHECK(fg_obj_delete_sync(g, l, 99999) == -ENOENT);
	CHECK(fg_obj_add_sync(g, l, X, 1, 1, "again", 5) == -EEXIST);
	/* a fifth edge type finds no room */
	for (uint32_t t = 2; t <= 4; t++)
		CHECK(fg_assoc_add_sync(g, l, X, t, Y, 1, "t", 1) == 1);
	CHECK(fg_assoc_add_sync(g, l, X, 5, Y, 1, "t", 1) == -ENOSPC);
	for (uint32_t t = 2; t <= 4; t++)
		CHECK(fg_assoc_delete_sync(g, l, X, t, Y) == 0);

	/* malformed and misrouted owner messages */
	struct rawc w = {0};
	uint32_t owner = fg_owner(g, X);
	CHECK(farm_msg_call(l, owner, 0, FG_MSG_UPDATE, "junk", 4, 0, raw_cb,
	                    &w) == 0);
	CHECK(farm_loop_wait(l, &w.done, 0) == 0 && w.status == FARM_ECORRUPT);
	struct up_req rq = {.op = UP_OBJ_DELETE, .id1 = X};
	uint32_t other = (owner + 1) % GC_NM;
	w.done = 0;
	CHECK(farm_msg_call(l, other, 0, FG_MSG_UPDATE, &rq, sizeof(rq), 0,
	                    raw_cb, &w) == 0);
	CHECK(farm_loop_wait(l, &w.done, 0) == 0 && w.status == -EINVAL);
	rq.op = 99;
	w.done = 0;
	CHECK(farm_msg_call(l, owner, 0, FG_MSG_UPDATE, &rq, sizeof(rq), 0,
	                    raw_cb, &w) == 0);
	CHECK(farm_loop_wait(l, &w.done, 0) == 0 && w.status == FARM_ECORRUPT);
	struct get_req gq = {.id1 = X, .atype = 1, .n = 3};
	w.done = 0;
	CHECK(farm_msg_call(l, owner, 0, FG_MSG_GET, &gq, sizeof(gq), 0, raw_cb,
	                    &w) == 0);
	CHECK(farm_loop_wait(l, &w.done, 0) == 0 && w.status == FARM_ECORRUPT);

	/* nothing changed */
	CHECK(snapshot(mc, X, &o1, e1, &n1) == 0 && n1 == n0);
	CHECK(o1.version == o0.version && o1.len == o0.len);
	CHECK(edges_equal(e0, e1, n0));

	/* the loader's operation: a node and its list in one go */
	static struct fg_edge le[FG_LOAD_MAX + 1], got[FG_LOAD_MAX + 1];
	for (unsigned i = 0; i < 70; i++)
		le[i] = (struct fg_edge){.id1 = 6000,
		                         .atype = 1,
		                         .id2 = 9000 - i,
		                         .time = 500 - (int64_t)i,
		                         .len = 2,
		                         .data = {1, (uint8_t)i}};
	CHECK(fg_obj_load_sync(g, l, 6000, 3, 9, "ld", 2, 1, le, 70) == 0);
	CHECK(fg_assoc_range_sync(g, l, 6000, 1, 0, 1000, got, 1000, &n) == 0);
	CHECK(n == 70 && edges_equal(le, got, 70));
	CHECK(fg_assoc_count_sync(g, l, 6000, 1, &cnt) == 0 && cnt == 70);
	CHECK(fg_obj_get_sync(g, l, 6000, &o) == 0 && o.len == 2 &&
	      o.otype == 3);
	CHECK(fg_obj_load_sync(g, l, 6000, 3, 9, "ld", 2, 1, le, 3) == -EEXIST);
	CHECK(fg_obj_load_sync(g, l, 6001, 3, 9, "ld", 2, 1, le,
	                       FG_LOAD_MAX + 1) == -E2BIG);
	le[1] = le[0]; /* the same edge twice: the owner refuses */
	CHECK(fg_obj_load_sync(g, l, 6001, 3, 9, "ld", 2, 1, le, 3) ==
	      FARM_ECORRUPT);
	CHECK(fg_obj_get_sync(g, l, 6001, &o) == -ENOENT);

	/* a deleted node, and the fat pointer that named it */
	farm_fatptr p;
	uint8_t key[FG_KEY_LEN];
	uint32_t plen = 0;
	fg_key(X, key);
	CHECK(farm_kv_get_sync(mc->kv, l, key, FG_KEY_LEN, &p, sizeof(p),
	                       &plen) == 0 &&
	      plen == sizeof(p));
	CHECK(fg_obj_delete_sync(g, l, X) == 0);
	CHECK(fg_obj_get_sync(g, l, X, &o) == -ENOENT);
	CHECK(fg_assoc_count_sync(g, l, X, 1, &cnt) == -ENOENT);
	CHECK(fg_assoc_range_sync(g, l, X, 1, 0, 5, e1, 10, &n) == -ENOENT);
	CHECK(fg_assoc_add_sync(g, l, X, 1, 7, 1, "a", 1) == -ENOENT);
	CHECK(fg_obj_update_sync(g, l, X, 1, 1, "a", 1) == -ENOENT);
	CHECK(fg_obj_delete_sync(g, l, X) == -ENOENT);
	static uint8_t buf[GN_MAX_SIZE];
	CHECK(p.size <= sizeof(buf));
	CHECK(farm_lf_read_sync(farm_node_txm(mc->node), l, p.addr, p.size,
	                        p.incarnation, buf) == FARM_EFREED);
	/* the id can be used again, with nothing of the old node */
	CHECK(fg_obj_add_sync(g, l, X, 2, 11, "new", 3) == 0);
	CHECK(fg_obj_get_sync(g, l, X, &o) == 0 && o.version == 1 &&
	      o.len == 3);
	CHECK(fg_assoc_count_sync(g, l, X, 1, &cnt) == 0 && cnt == 0);
	return 0;
}

int main(int argc, char **argv)
{
	const char *s = getenv("FG_SEED"), *o = getenv("FG_OPS");
	seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
	if (o)
		nops = (unsigned)strtoul(o, NULL, 0);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_model, gc_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
