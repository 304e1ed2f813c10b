/*
 * What a machine of farm-graph and graph_bench does (gcluster.h machines):
 * load its share of a LinkBench graph (the ids it owns, fg_obj_load, many
 * in flight, progress counted in shared memory), run an operation mix for a
 * while with a number of operations in flight (latencies in histograms,
 * lock-free reads counted), and answer queries. The parent writes the
 * command's parameters into the shared struct gd_shared (mapped before the
 * machines were forked), sends a command byte, and reads the results there.
 * Header-only.
 */
#ifndef FGRAPH_GDRIVER_H
#define FGRAPH_GDRIVER_H

#include <inttypes.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "gcluster.h"
#include "linkbench.h"

#define GD_MAXM 64u  /* the graph driver runs clusters of up to 64 */
#define GD_HB   320u /* latency buckets: 8 per power of two from 64 ns */

struct gd_result {
	uint64_t ops[FG_NOPS], errs[FG_NOPS];
	uint64_t reads[FG_NOPS], kvs[FG_NOPS];
	uint64_t hist[FG_NOPS][GD_HB];
	uint64_t cpu_ns, wall_ns;
	/* fg_stats over the measured window: reads restarted, cached heads
	 * found replaced, owner transactions run again, committed */
	uint64_t retries, stale_heads, tx_retries, tx_commits;
};

struct gd_shared {
	/* the command */
	uint64_t nodes, seed, query;
	int mix;
	double warm, secs;
	unsigned depth;
	/* Called by a machine about every 10 ms while it loads or runs, when
	 * set (in that machine's process): non-zero stops it (loading fails
	 * with -ECANCELED; a run ends early). */
	int (*tick)(struct gd_shared *sh, unsigned me);
	/* progress and results */
	_Atomic uint64_t loaded[GD_MAXM], edges[GD_MAXM]; /* by machine */
	struct gd_result res[GD_MAXM];
	char err[GD_MAXM][200];
};

static inline struct gd_shared *gd_map(void)
{
	void *p = mmap(NULL, sizeof(struct gd_shared), PROT_READ | PROT_WRITE,
	               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static inline unsigned gd_bucket(uint64_t ns)
{
	if (ns < 64)
		return 0;
	unsigned b = 63u - (unsigned)__builtin_clzll(ns);
	unsigned i = (b - 6) * 8 + (unsigned)((ns >> (b - 3)) & 7) + 1;
	return i < GD_HB ? i : GD_HB - 1;
}

/* The lower bound of bucket @i, in ns. */
static inline double gd_bucket_ns(unsigned i)
{
	if (!i)
		return 0;
	unsigned b = (i - 1) / 8 + 6, sub = (i - 1) % 8;
	return (double)(1ull << b) * (1.0 + sub / 8.0);
}

/* The @q quantile of histogram @h (ns). */
static inline double gd_quantile(const uint64_t *h, double q)
{
	uint64_t n = 0, acc = 0;
	for (unsigned i = 0; i < GD_HB; i++)
		n += h[i];
	if (!n)
		return 0;
	for (unsigned i = 0; i < GD_HB; i++) {
		acc += h[i];
		if ((double)acc >= q * (double)n)
			return gd_bucket_ns(i);
	}
	return gd_bucket_ns(GD_HB - 1);
}

static inline uint64_t gd_cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
	               1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/* Client cache entries for a graph of @nodes: each node takes one for
 * itself and one per edge list (about 1.8 per node with LinkBench's
 * degrees), and a four-way cache at most a third full loses under 1% of
 * them to full sets. 32 bytes each, per machine, at most 1 GiB: from 4M
 * nodes on the cache is fuller (at 10M, 18M entries in 32M: some 4% of
 * them are lost, each costing a KV lookup when read). */
static inline uint32_t gd_cache_entries(uint64_t nodes)
{
	uint64_t e = 1u << 16;
	while (e < nodes * 6 && e < (1u << 25))
		e <<= 1;
	return (uint32_t)e;
}

/* ---- loading ------------------------------------------------------------- */

struct gd_load {
	struct gc_machine *m;
	struct gd_shared *sh;
	struct lb_graph lg;
	uint64_t next; /* next id to consider */
	unsigned inflight;
	int err;
	volatile int done;
	struct fg_edge *edges;
};

static void gd_load_more(struct gd_load *L);

static void gd_load_cb(farm_loop *loop, void *ctx, int status)
{
	struct gd_load *L = ctx;
	L->inflight--;
	if (status < 0 && !L->err)
		L->err = status;
	atomic_fetch_add(&L->sh->loaded[L->m->me], 1);
	gd_load_more(L);
}

static void gd_load_more(struct gd_load *L)
{
	fg_graph *g = L->m->g;
	while (!L->err && L->inflight < 256 && L->next <= L->lg.nodes) {
		uint64_t id = L->next++;
		if (fg_owner(g, id) != L->m->me)
			continue;
		uint8_t data[FG_MAX_DATA];
		uint32_t otype, len;
		int64_t time;
		lb_node(&L->lg, id, &otype, &time, data, &len);
		unsigned n = lb_list(&L->lg, id, L->edges);
		int rc = fg_obj_load(g, L->m->loop, id, otype, time, data, len,
		                     1, L->edges, n, gd_load_cb, L);
		if (rc == -EAGAIN) { /* messaging's call limit: later */
			L->next--;
			break;
		}
		if (rc) {
			L->err = rc;
			break;
		}
		atomic_fetch_add(&L->sh->edges[L->m->me], n);
		L->inflight++;
	}
	if (!L->inflight && (L->err || L->next > L->lg.nodes))
		L->done = 1;
}

static inline int gd_load(struct gc_machine *m, struct gd_shared *sh)
{
	struct gd_load L = {.m = m, .sh = sh, .next = 1};
	lb_init(&L.lg, sh->nodes, sh->seed);
	L.edges = calloc(FG_LOAD_MAX, sizeof(*L.edges));
	if (!L.edges)
		return -ENOMEM;
	gd_load_more(&L);
	while (!L.done) {
		(void)farm_loop_wait(m->loop, &L.done, 10000000ull);
		if (sh->tick && sh->tick(sh, m->me) && !L.err)
			L.err = -ECANCELED;
		if (!L.done && !L.inflight)
			gd_load_more(&L);
	}
	free(L.edges);
	return L.err;
}

/* ---- running a mix ------------------------------------------------------- */

struct gd_run;
struct gd_slot {
	struct gd_run *run;
	struct lb_op op;
	uint64_t t0;
	uint8_t data[FG_MAX_DATA];
};

struct gd_run {
	struct gc_machine *m;
	struct gd_shared *sh;
	struct lb_graph lg;
	uint64_t rng, next_id, warm_end, end, cpu0;
	struct fg_stats st0;
	bool measuring;
	unsigned active;
	volatile int done;
	struct gd_result *res;
};

static void gd_issue(struct gd_slot *s, uint64_t now);

static void gd_done(struct gd_slot *s, int status)
{
	struct gd_run *r = s->run;
	uint64_t now = gc_now_ns();
	if (!r->measuring && now >= r->warm_end) {
		r->measuring = true;
		fg_stats_get(r->m->g, &r->st0);
		r->cpu0 = gd_cpu_ns();
		r->res->wall_ns = now;
	}
	if (r->measuring && s->t0 >= r->warm_end && now < r->end) {
		enum fg_op k = s->op.op;
		r->res->ops[k]++;
		if (status < 0 && status != -ENOENT && status != -EEXIST)
			r->res->errs[k]++;
		r->res->hist[k][gd_bucket(now - s->t0)]++;
	}
	if (now < r->end) {
		gd_issue(s, now);
		return;
	}
	if (--r->active == 0)
		r->done = 1;
}

static void gd_obj_cb(farm_loop *l, void *c, int st, const struct fg_obj *o)
{
	gd_done(c, st);
}
static void gd_cnt_cb(farm_loop *l, void *c, int st, uint64_t n)
{
	gd_done(c, st);
}
static void gd_edges_cb(farm_loop *l, void *c, int st, const struct fg_edge *e,
                        unsigned n)
{
	gd_done(c, st);
}
static void gd_done_cb(farm_loop *l, void *c, int st)
{
	gd_done(c, st);
}

static int gd_start(fg_graph *g, farm_loop *l, struct gd_slot *s)
{
	struct lb_op *o = &s->op;
	uint32_t len;
	switch (o->op) {
	case FG_OBJ_GET: return fg_obj_get(g, l, o->id1, gd_obj_cb, s);
	case FG_ASSOC_COUNT:
		return fg_assoc_count(g, l, o->id1, o->atype, gd_cnt_cb, s);
	case FG_ASSOC_RANGE:
		return fg_assoc_range(g, l, o->id1, o->atype, o->pos, o->limit,
		                      gd_edges_cb, s);
	case FG_ASSOC_TIME_RANGE:
		return fg_assoc_time_range(g, l, o->id1, o->atype, o->high,
		                           o->low, o->limit, gd_edges_cb, s);
	case FG_ASSOC_GET:
		return fg_assoc_get(g, l, o->id1, o->atype, o->id2s, o->nid2,
		                    o->high, o->low, gd_edges_cb, s);
	case FG_OBJ_ADD:
	case FG_OBJ_UPDATE:
		len = lb_size(&s->run->rng, 128, FG_MAX_DATA);
		lb_fill(&s->run->rng, s->data, len);
		return o->op == FG_OBJ_ADD
		               ? fg_obj_add(g, l, o->id1, 1, o->time, s->data,
		                            len, gd_done_cb, s)
		               : fg_obj_update(g, l, o->id1, 1, o->time,
		                               s->data, len, gd_done_cb, s);
	case FG_OBJ_DELETE: return fg_obj_delete(g, l, o->id1, gd_done_cb, s);
	case FG_ASSOC_ADD:
		len = lb_size(&s->run->rng, 8, FG_MAX_EDGE_DATA);
		lb_fill(&s->run->rng, s->data, len);
		return fg_assoc_add(g, l, o->id1, o->atype, o->id2, o->time,
		                    s->data, len, gd_done_cb, s);
	case FG_ASSOC_DELETE:
		return fg_assoc_delete(g, l, o->id1, o->atype, o->id2,
		                       gd_done_cb, s);
	case FG_ASSOC_CHANGE_TYPE:
		return fg_assoc_change_type(g, l, o->id1, o->atype, o->id2,
		                            o->newtype, gd_done_cb, s);
	default: return -EINVAL;
	}
}

/* The slot's next operation, timed from @now, when the slot's previous one
 * ended (a closed loop: one clock read per operation, not two; the ~50 ns
 * of drawing the operation count in its latency). */
static void gd_issue(struct gd_slot *s, uint64_t now)
{
	struct gd_run *r = s->run;
	s->t0 = now;
	for (int tries = 0; tries < 1000; tries++) {
		lb_next(&r->lg, (enum lb_mix)r->sh->mix, &r->rng, &r->next_id,
		        &s->op);
		if (!gd_start(r->m->g, r->m->loop, s))
			return;
		r->res->errs[s->op.op]++;
		s->t0 = gc_now_ns();
	}
	if (--r->active == 0)
		r->done = 1;
}

static inline int gd_run_mix(struct gc_machine *m, struct gd_shared *sh)
{
	struct gd_result *res = &sh->res[m->me];
	memset(res, 0, sizeof(*res));
	struct gd_run r = {.m = m, .sh = sh, .res = res};
	lb_init(&r.lg, sh->nodes, sh->seed);
	r.rng = sh->seed * 7919 + m->me * 104729 + gc_now_ns();
	r.next_id = LB_NEW_IDS + ((uint64_t)m->me << 36) +
	            (gc_now_ns() & 0xffffff) * 4096;
	uint64_t t = gc_now_ns();
	r.warm_end = t + (uint64_t)(sh->warm * 1e9);
	r.end = r.warm_end + (uint64_t)(sh->secs * 1e9);
	unsigned depth = sh->depth ? sh->depth : 1;
	struct gd_slot *slots = calloc(depth, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	r.active = depth;
	for (unsigned i = 0; i < depth; i++) {
		slots[i].run = &r;
		gd_issue(&slots[i], gc_now_ns());
	}
	while (!r.done) {
		(void)farm_loop_wait(m->loop, &r.done, 10000000ull);
		if (sh->tick && sh->tick(sh, m->me) && gc_now_ns() < r.end)
			r.end = gc_now_ns();
	}
	uint64_t now = gc_now_ns();
	struct fg_stats st;
	fg_stats_get(m->g, &st);
	for (unsigned k = 0; k < FG_NOPS; k++) {
		res->reads[k] = st.reads[k] - r.st0.reads[k];
		res->kvs[k] = st.kv_gets[k] - r.st0.kv_gets[k];
	}
	res->retries = st.retries - r.st0.retries;
	res->stale_heads = st.stale_heads - r.st0.stale_heads;
	res->tx_retries = st.tx_retries - r.st0.tx_retries;
	res->tx_commits = st.tx_commits - r.st0.tx_commits;
	uint64_t stop = now < r.end ? now : r.end;
	res->wall_ns = r.measuring ? stop - res->wall_ns : 0;
	res->cpu_ns = r.measuring ? gd_cpu_ns() - r.cpu0 : 0;
	free(slots);
	return 0;
}

/* ---- one node, printed --------------------------------------------------- */

static inline int gd_query(struct gc_machine *m, uint64_t id, FILE *out)
{
	struct fg_obj o;
	int rc = fg_obj_get_sync(m->g, m->loop, id, &o);
	if (rc) {
		fprintf(out, "node %" PRIu64 ": %s\n", id, fg_strerror(rc));
		return rc;
	}
	fprintf(out,
	        "node %" PRIu64 ": type %u version %u time %" PRId64
	        " data %u bytes, owner machine %u\n",
	        id, o.otype, o.version, o.time, o.len, fg_owner(m->g, id));
	for (uint32_t t = 1; t <= 2; t++) {
		uint64_t cnt = 0;
		struct fg_edge e[10];
		unsigned n = 0;
		rc = fg_assoc_count_sync(m->g, m->loop, id, t, &cnt);
		if (!rc)
			rc = fg_assoc_range_sync(m->g, m->loop, id, t, 0, 10, e,
			                         10, &n);
		if (rc)
			return rc;
		fprintf(out, "  edges of type %u: %" PRIu64 "%s\n", t, cnt,
		        cnt > n ? " (the newest 10)" : "");
		for (unsigned i = 0; i < n; i++)
			fprintf(out,
			        "    -> %" PRIu64 "  time %" PRId64
			        "  data %u bytes\n",
			        e[i].id2, e[i].time, e[i].len);
	}
	return 0;
}

/* The machines' body: commands 'L' load, 'W' run, 'Q' query (machine 0
 * prints), until the parent closes the pipe. Answers an int32 status. */
static inline int gd_body(struct gc_machine *m, void *arg)
{
	struct gd_shared *sh = arg;
	for (;;) {
		char cmd;
		if (gc_wait_cmd(m, &cmd, 1))
			return 0;
		int32_t st = 0;
		if (cmd == 'L')
			st = gd_load(m, sh);
		else if (cmd == 'W')
			st = gd_run_mix(m, sh);
		else if (cmd == 'C') {
			long n = fg_warm_sync(m->g, m->loop, 1, sh->nodes);
			st = n < 0 ? (int)n : 0;
		} else if (cmd == 'Q')
			st = gd_query(m, sh->query, stdout);
		fflush(stdout);
		if (st)
			snprintf(sh->err[m->me], sizeof(sh->err[m->me]), "%s",
			         fg_strerror(st));
		if (gc_write_all(m->out, &st, sizeof(st)))
			return 1;
	}
}

/* ---- the parent's summary ------------------------------------------------ */

struct gd_sum {
	double rate[FG_NOPS + 1]; /* ops/s per op, [FG_NOPS]: all */
	double p50[FG_NOPS + 1], p99[FG_NOPS + 1];
	double reads[FG_NOPS + 1]; /* lock-free reads (and KV lookups) per op */
	uint64_t ops[FG_NOPS + 1], errs[FG_NOPS + 1];
	double cores;    /* CPU seconds per wall second, all machines */
	double lf_reads; /* per obj_get, assoc_count, assoc_range together */
	uint64_t retries, stale_heads, tx_retries, tx_commits;
};

/* The results of @nm machines (@res[0 .. nm - 1]) together. */
static inline void gd_summarize(const struct gd_result *res, unsigned nm,
                                struct gd_sum *s)
{
	memset(s, 0, sizeof(*s));
	static uint64_t h[FG_NOPS + 1][GD_HB];
	memset(h, 0, sizeof(h));
	double wall = 0, cpu = 0, rd[FG_NOPS + 1] = {0}, lf = 0, lfo = 0;
	for (unsigned i = 0; i < nm; i++) {
		const struct gd_result *r = &res[i];
		wall = r->wall_ns > wall ? (double)r->wall_ns : wall;
		cpu += (double)r->cpu_ns;
		s->retries += r->retries;
		s->stale_heads += r->stale_heads;
		s->tx_retries += r->tx_retries;
		s->tx_commits += r->tx_commits;
		for (unsigned k = 0; k < FG_NOPS; k++) {
			s->ops[k] += r->ops[k];
			s->errs[k] += r->errs[k];
			rd[k] += (double)(r->reads[k] + r->kvs[k]);
			for (unsigned b = 0; b < GD_HB; b++) {
				h[k][b] += r->hist[k][b];
				h[FG_NOPS][b] += r->hist[k][b];
			}
		}
	}
	for (unsigned k = 0; k < FG_NOPS; k++) {
		s->ops[FG_NOPS] += s->ops[k];
		s->errs[FG_NOPS] += s->errs[k];
		rd[FG_NOPS] += rd[k];
		if (k == FG_OBJ_GET || k == FG_ASSOC_COUNT ||
		    k == FG_ASSOC_RANGE) {
			lf += rd[k];
			lfo += (double)s->ops[k];
		}
	}
	for (unsigned k = 0; k <= FG_NOPS; k++) {
		s->rate[k] = wall > 0 ? (double)s->ops[k] / (wall / 1e9) : 0;
		s->p50[k] = gd_quantile(h[k], 0.5);
		s->p99[k] = gd_quantile(h[k], 0.99);
		s->reads[k] = s->ops[k] ? rd[k] / (double)s->ops[k] : 0;
	}
	s->cores = wall > 0 ? cpu / wall : 0;
	s->lf_reads = lfo > 0 ? lf / lfo : 0;
}

static inline void gd_print(FILE *f, const char *title, const struct gd_sum *s)
{
	fprintf(f, "%s\n  %-18s %10s %12s %10s %10s %8s\n", title, "operation",
	        "ops", "ops/s", "p50 us", "p99 us", "reads/op");
	for (unsigned k = 0; k <= FG_NOPS; k++) {
		if (!s->ops[k])
			continue;
		fprintf(f,
		        "  %-18s %10" PRIu64 " %12.0f %10.2f %10.2f %8.3f%s\n",
		        k < FG_NOPS ? fg_op_name((enum fg_op)k) : "all",
		        s->ops[k], s->rate[k], s->p50[k] / 1e3, s->p99[k] / 1e3,
		        s->reads[k], s->errs[k] ? " (errors)" : "");
	}
	fprintf(f,
	        "  CPU: %.2f cores busy; lock-free reads per obj_get, "
	        "assoc_count, assoc_range: %.3f\n",
	        s->cores, s->lf_reads);
	if (s->tx_commits || s->retries)
		fprintf(f,
		        "  reads restarted %" PRIu64 " (stale heads %" PRIu64
		        "); owner transactions %" PRIu64 " committed, %" PRIu64
		        " run again\n",
		        s->retries, s->stale_heads, s->tx_commits,
		        s->tx_retries);
}

/* Parent: send @cmd to machines [@from, @to) and wait for their answers
 * (@progress, when not NULL, is called about twice a second meanwhile).
 * 0, or the first machine's error. */
static inline int gd_command(struct gc_cluster *cl, char cmd, unsigned from,
                             unsigned to, void (*progress)(void *), void *arg)
{
	for (unsigned i = from; i < to; i++)
		if (gc_write_all(cl->to[i], &cmd, 1))
			return -EPIPE;
	int rc = 0;
	for (unsigned i = from; i < to; i++) {
		int32_t st = 0;
		for (;;) {
			if (!gc_read_all(cl->from[i], &st, sizeof(st), 500))
				break;
			struct pollfd pf = {.fd = cl->from[i]};
			if (poll(&pf, 1, 0) > 0 && (pf.revents & POLLHUP))
				return -EPIPE;
			if (progress)
				progress(arg);
		}
		if (st && !rc)
			rc = st;
	}
	return rc;
}

#endif
