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

/* One op being made: its random stream and what it drew so far. */
struct op {
	struct rng r;
	unsigned j, kind;
	uint64_t id1, id2;
	uint32_t t, len;
	int64_t time;
	uint8_t data[FG_MAX_DATA];
	fg_graph *g; /* NULL: the model alone */
	farm_loop *loop;
	int want, got;
};

/* An edge of @o's list to act on, mostly one that is there. */
static void pick_present(struct gm *m, struct op *o)
{
	struct gm_node *n = gm_node(m, o->id1);
	if (n && n->l[o->t].n && rn(&o->r, 4))
		o->id2 = n->l[o->t].e[rn(&o->r, n->l[o->t].n)].id2;
}

/* The node ops (add, update, delete): want and got. */
static void op_node(struct mctx *c, struct op *o)
{
	struct gm *m = &c->m;
	if (o->kind < 9)
		o->len = rn(&o->r, 2) ? rn(&o->r, 64)
		                      : rn(&o->r, FG_MAX_DATA + 1);
	if (o->kind < 5) {
		o->want = gm_obj_add(m, o->id1, 7, o->time, o->data, o->len);
		o->got = o->g ? fg_obj_add_sync(o->g, o->loop, o->id1, 7,
		                                o->time, o->data, o->len)
		              : o->want;
	} else if (o->kind < 9) { /* sometimes growing */
		o->want = gm_obj_update(m, o->id1, 8 + rn(&o->r, 3), o->time,
		                        o->data, o->len);
		o->got = o->g ? fg_obj_update_sync(o->g, o->loop, o->id1,
		                                   m->n[o->id1].o.otype,
		                                   o->time, o->data, o->len)
		              : o->want;
	} else { /* node 1 keeps its long list */
		o->id1 = 2 + rn(&o->r, GM_NODES - 1);
		o->want = gm_obj_delete(m, o->id1);
		o->got = o->g ? fg_obj_delete_sync(o->g, o->loop, o->id1)
		              : o->want;
	}
}

/* The edge writes (add, delete, change type): want and got. */
static void op_edge(struct mctx *c, struct op *o)
{
	struct gm *m = &c->m;
	if (o->kind < 46) { /* add, half of them to one long list */
		if (rn(&o->r, 2)) {
			o->id1 = 1;
			o->t = 1;
			o->id2 = 100 + rn(&o->r, 4000);
		}
		o->want = gm_assoc_add(m, o->id1, o->t, o->id2, o->time,
		                       o->data, o->len);
		o->got = o->g ? fg_assoc_add_sync(o->g, o->loop, o->id1, o->t,
		                                  o->id2, o->time, o->data,
		                                  o->len)
		              : o->want;
	} else if (o->kind < 58) { /* delete, mostly of edges there */
		pick_present(m, o);
		o->want = gm_assoc_delete(m, o->id1, o->t, o->id2);
		o->got = o->g ? fg_assoc_delete_sync(o->g, o->loop, o->id1,
		                                     o->t, o->id2)
		              : o->want;
		c->emptied += !o->want && !m->n[o->id1].l[o->t].n;
	} else {
		pick_present(m, o);
		uint32_t nt = 1 + rn(&o->r, 4);
		o->want = gm_change_type(m, o->id1, o->t, o->id2, nt);
		o->got = o->g ? fg_assoc_change_type_sync(o->g, o->loop, o->id1,
		                                          o->t, o->id2, nt)
		              : o->want;
	}
}

/* obj_get and assoc_count against the model: 0, or -1 (c->err). */
static int op_get_count(struct mctx *c, struct op *o)
{
	struct gm_node *n = gm_node(&c->m, o->id1);
	o->want = n ? 0 : -ENOENT;
	if (!o->g)
		return 0;
	if (o->kind < 70) {
		struct fg_obj b;
		o->got = fg_obj_get_sync(o->g, o->loop, o->id1, &b);
		if (!o->got && !o->want &&
		    (b.id != o->id1 || b.otype != n->o.otype ||
		     b.version != n->o.version || b.time != n->o.time ||
		     b.len != n->o.len || memcmp(b.data, n->o.data, b.len)))
			return mfail(c, o->j,
			             "obj_get %" PRIu64 ": version %u/%u len "
			             "%u/%u",
			             o->id1, b.version, n->o.version, b.len,
			             n->o.len);
		return 0;
	}
	uint64_t cnt = 0;
	o->got = fg_assoc_count_sync(o->g, o->loop, o->id1, o->t, &cnt);
	if (!o->got && !o->want && cnt != n->l[o->t].n)
		return mfail(c, o->j,
		             "count %" PRIu64 "/%u: %" PRIu64 ", model %u",
		             o->id1, o->t, cnt, n->l[o->t].n);
	return 0;
}

/* A list read's @n edges (c->b) against the model's (c->a, o->want):
 * 0, or -1 (c->err) naming it @what. */
static int read_equal(struct mctx *c, struct op *o, unsigned n,
                      const char *what)
{
	if (o->got < 0 || o->want < 0)
		return 0;
	if (o->got) /* reads return 0, the edges in *n (graph.h) */
		return mfail(c, o->j, "%s returned %d, not 0", what, o->got);
	if ((int)n != o->want || !edges_equal(c->a, c->b, n))
		return mfail(c, o->j, "%s %" PRIu64 "/%u: %u edges, model %d",
		             what, o->id1, o->t, n, o->want);
	o->got = o->want;
	return 0;
}

/* assoc_range and assoc_time_range against the model. */
static int op_range(struct mctx *c, struct op *o)
{
	unsigned n = 0;
	if (o->kind < 90) {
		uint32_t pos = rn(&o->r, 3) ? 0 : rn(&o->r, 80);
		uint32_t lim =
		        rn(&o->r, 2) ? 1 + rn(&o->r, 10) : 1 + rn(&o->r, 300);
		o->want = gm_range(&c->m, o->id1, o->t, pos, lim, c->a);
		if (!o->g)
			return 0;
		o->got = fg_assoc_range_sync(o->g, o->loop, o->id1, o->t, pos,
		                             lim, c->b, FG_MAX_LIMIT, &n);
		return read_equal(c, o, n, "range");
	}
	int64_t hi = (int64_t)rn(&o->r, o->j * 16 + 1),
	        lo = hi - rn(&o->r, 2000);
	uint32_t lim = 1 + rn(&o->r, 50);
	o->want = gm_time_range(&c->m, o->id1, o->t, hi, lo, lim, c->a);
	if (!o->g)
		return 0;
	o->got = fg_assoc_time_range_sync(o->g, o->loop, o->id1, o->t, hi, lo,
	                                  lim, c->b, FG_MAX_LIMIT, &n);
	return read_equal(c, o, n, "time_range");
}

/* assoc_get of a few edges, mostly ones there, against the model. */
static int op_assoc_get(struct mctx *c, struct op *o)
{
	uint64_t ids[6];
	unsigned nid = 1 + rn(&o->r, 6);
	struct gm_node *n = gm_node(&c->m, o->id1);
	for (unsigned i = 0; i < nid; i++)
		ids[i] = n && n->l[o->t].n && rn(&o->r, 2)
		                 ? n->l[o->t].e[rn(&o->r, n->l[o->t].n)].id2
		                 : 1 + rn(&o->r, 500);
	int64_t hi =
	        rn(&o->r, 4) ? INT64_MAX : (int64_t)rn(&o->r, o->j * 16 + 1);
	int64_t lo = rn(&o->r, 4) ? INT64_MIN : hi - rn(&o->r, 5000);
	o->want = gm_get(&c->m, o->id1, o->t, ids, nid, hi, lo, c->a);
	if (!o->g)
		return 0;
	unsigned k = 0;
	o->got = fg_assoc_get_sync(o->g, o->loop, o->id1, o->t, ids, nid, hi,
	                           lo, c->b, FG_GET_MAX, &k);
	return read_equal(c, o, k, "get");
}

/* Op @j's first draws: kind, node, type, edge, time, data. */
static void op_draw(struct op *o)
{
	o->kind = rn(&o->r, 100);
	o->id1 = pick_node(&o->r);
	o->t = 1 + rn(&o->r, 5); /* 5: the type with no room */
	if (rn(&o->r, 4))
		o->t = 1 + rn(&o->r, 4);
	o->id2 = o->t == 1 && rn(&o->r, 2) ? 100 + rn(&o->r, 400)
	                                   : 1 + rn(&o->r, GM_NODES);
	o->time = (int64_t)o->j * 16;
	if (rn(&o->r, 5) == 0) /* older than the head */
		o->time -= (int64_t)rn(&o->r, o->j * 16 + 1);
	o->len = rn(&o->r, 3) ? rn(&o->r, FG_MAX_EDGE_DATA + 1) : 0;
	for (uint32_t i = 0; i < sizeof(o->data); i++)
		o->data[i] = (uint8_t)(o->j + i);
}

/* Op @j: make it, apply it to the model, and (@g non-NULL) run it on the
 * store and compare. 0, or -1 with the reason in c->err. */
static int step(struct mctx *c, unsigned j, fg_graph *g, farm_loop *loop)
{
	struct op o = {
	        .r = {.s = seed * 1000003u + j}, .j = j, .g = g, .loop = loop};
	op_draw(&o);
	int rc = 0;
	if (o.kind < 10)
		op_node(c, &o);
	else if (o.kind < 62)
		op_edge(c, &o);
	else if (o.kind < 78)
		rc = op_get_count(c, &o);
	else if (o.kind < 95)
		rc = op_range(c, &o);
	else
		rc = op_assoc_get(c, &o);
	if (rc)
		return rc;
	if (g && o.got != o.want)
		return mfail(c, j,
		             "kind %u id1 %" PRIu64 " t %u id2 %" PRIu64
		             ": %d (%s), model %d",
		             o.kind, o.id1, o.t, o.id2, o.got,
		             fg_strerror(o.got), o.want);
	for (unsigned k = 1; k <= GM_NODES; k++)
		for (unsigned tt = 1; tt <= GM_TYPES; tt++)
			if (c->m.n[k].l[tt].n > c->max_len)
				c->max_len = c->m.n[k].l[tt].n;
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
