/*
 * A LinkBench-style graph and operation stream (Armstrong et al., SIGMOD
 * 2013, after its FBWorkload defaults), the same for every system the
 * benchmark drives. Everything is a function of (seed, id) or of a
 * caller's random state, so machines generate their shares independently.
 *
 *   nodes      ids 1..N; data sizes log-normal around LinkBench's median
 *              node payload (128 bytes), capped at FG_MAX_DATA
 *   out-degree a power law (Pareto, x_m 1.75, alpha 1.35, floor - 1),
 *              mean about 4.3 edges per node as in LinkBench, capped at
 *              FG_LOAD_MAX (a loader operation's limit)
 *   edges      type 1, id2 uniform over the nodes, times in the day
 *              before the load, data log-normal around LinkBench's median
 *              link payload (8 bytes), capped at FG_MAX_EDGE_DATA
 *   access     Zipf-like over ids (exponent LB_ZIPF), hot ids scattered
 *              over the id space by a fixed permutation
 *   mixes      Tao's (99.8% reads) and LinkBench's default (write-heavy),
 *              weights as in the issue (lb_mix_names)
 * Header-only.
 */
#ifndef FGRAPH_LINKBENCH_H
#define FGRAPH_LINKBENCH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph_int.h"

#define LB_ZIPF      0.8
#define LB_T0        1700000000000000ll /* the load's "now", microseconds */
#define LB_DAY_US    86400000000ll
#define LB_NEW_IDS   (1ull << 40) /* ids obj_add makes start here */
#define LB_TAO_LIMIT 10u          /* Tao's assoc_range and time_range limit */
#define LB_LB_LIMIT  10000u       /* LinkBench's getlinklist limit */

static inline uint64_t lb_rand(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return fg_mix(*s);
}

/* Uniform in (0, 1]. */
static inline double lb_unit(uint64_t *s)
{
	return ((double)(lb_rand(s) >> 11) + 1.0) / 9007199254740992.0;
}

struct lb_graph {
	uint64_t nodes, seed, perm;
	/* lb_pick's constants, computed once (lb_init): pow(nodes, 1 - Z) - 1,
	 * and the inverse exponent 1 / (1 - Z), with zipf_k its value when it
	 * is a small integer (5 for Z = 0.8: a power by multiplication) */
	double zipf_span, zipf_inv;
	unsigned zipf_k;
};

static inline uint64_t lb_gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static inline void lb_init(struct lb_graph *g, uint64_t nodes, uint64_t seed)
{
	g->nodes = nodes ? nodes : 1;
	g->seed = seed;
	g->perm = 0x9e3779b97f4a7c15ull % g->nodes;
	while (g->nodes > 1 && (g->perm == 0 || lb_gcd(g->perm, g->nodes) != 1))
		g->perm++;
	if (g->nodes == 1)
		g->perm = 1;
	double a = 1.0 - LB_ZIPF;
	g->zipf_span = pow((double)g->nodes, a) - 1.0;
	g->zipf_inv = 1.0 / a;
	double k = floor(g->zipf_inv + 0.5);
	g->zipf_k = fabs(g->zipf_inv - k) < 1e-9 && k >= 1 && k <= 8
	                    ? (unsigned)k
	                    : 0;
}

/* A log-normal size around @median (sigma 0.7), in [0, @cap]. */
static inline uint32_t lb_size(uint64_t *s, double median, uint32_t cap)
{
	double u1 = lb_unit(s), u2 = lb_unit(s);
	double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
	double v = median * exp(0.7 * z);
	return v >= cap ? cap : (uint32_t)v;
}

static inline void lb_fill(uint64_t *s, uint8_t *d, uint32_t len)
{
	for (uint32_t i = 0; i < len; i += 8) {
		uint64_t x = lb_rand(s);
		memcpy(d + i, &x, len - i < 8 ? len - i : 8);
	}
}

static inline uint32_t lb_degree(const struct lb_graph *g, uint64_t id)
{
	uint64_t s = g->seed ^ fg_mix(id * 2 + 1);
	double x = 1.75 / pow(lb_unit(&s), 1.0 / 1.35);
	double d = floor(x) - 1;
	return d >= FG_LOAD_MAX ? FG_LOAD_MAX : (uint32_t)d;
}

/* Node @id as loaded: type, time, data. */
static inline void lb_node(const struct lb_graph *g, uint64_t id,
                           uint32_t *otype, int64_t *time, uint8_t *data,
                           uint32_t *len)
{
	uint64_t s = g->seed ^ fg_mix(id * 2);
	*otype = 1 + (uint32_t)(lb_rand(&s) % 4);
	*time = LB_T0 - (int64_t)(lb_rand(&s) % (uint64_t)LB_DAY_US);
	*len = lb_size(&s, 128, FG_MAX_DATA);
	lb_fill(&s, data, *len);
}

/* Edge @k of node @id1's loaded list (k < degree); id2s may repeat. */
static inline void lb_edge(const struct lb_graph *g, uint64_t id1, uint32_t k,
                           struct fg_edge *e)
{
	uint64_t s = g->seed ^ fg_mix(id1 * 0x100000001b3ull + k + 7);
	e->id1 = id1;
	e->atype = 1;
	e->id2 = 1 + lb_rand(&s) % g->nodes;
	e->time = LB_T0 - (int64_t)(lb_rand(&s) % (uint64_t)LB_DAY_US);
	e->len = lb_size(&s, 8, FG_MAX_EDGE_DATA);
	lb_fill(&s, e->data, e->len);
}

/* Node @id1's loaded list, newest first, each id2 once: the count. */
static inline unsigned lb_list(const struct lb_graph *g, uint64_t id1,
                               struct fg_edge *out)
{
	unsigned n = 0, d = lb_degree(g, id1);
	for (uint32_t k = 0; k < d; k++) {
		struct fg_edge e;
		lb_edge(g, id1, k, &e);
		bool dup = false;
		for (unsigned i = 0; i < n && !dup; i++)
			dup = out[i].id2 == e.id2;
		if (dup)
			continue;
		unsigned pos = n;
		while (pos > 0 && (out[pos - 1].time < e.time ||
		                   (out[pos - 1].time == e.time &&
		                    out[pos - 1].id2 < e.id2))) {
			out[pos] = out[pos - 1];
			pos--;
		}
		out[pos] = e;
		n++;
	}
	return n;
}

/* A Zipf-like id: rank r with probability ~ 1 / r^LB_ZIPF (continuous
 * inverse), then scattered by the permutation. The generator runs for
 * every operation of every system, so it is kept cheap: the constants
 * come from lb_init, and with LB_ZIPF 0.8 the inverse is x^5 by
 * multiplication (pow took about 3% of fgraph's CPU, computed three times
 * per operation). */
static inline uint64_t lb_pick(const struct lb_graph *g, uint64_t *s)
{
	double x = g->zipf_span * lb_unit(s) + 1.0, p = x;
	if (g->zipf_k)
		for (unsigned i = 1; i < g->zipf_k; i++)
			p *= x;
	else
		p = pow(x, g->zipf_inv);
	double r = p - 1.0;
	uint64_t rank = r < 0 ? 0 : (uint64_t)r;
	if (rank >= g->nodes)
		rank = g->nodes - 1;
	return 1 + (rank * g->perm) % g->nodes;
}

/* ---- operation mixes ----------------------------------------------------- */

enum lb_mix { LB_TAO, LB_LINKBENCH, LB_NMIX };

struct lb_op {
	enum fg_op op;
	uint64_t id1, id2;
	uint32_t atype, newtype, pos, limit;
	int64_t time, high, low;
	uint64_t id2s[2];
	unsigned nid2;
};

/* Weights per mix, in operation order of enum fg_op (parts per 100000). */
static inline const uint32_t *lb_weights(enum lb_mix m)
{
	/* Tao: 99.8% reads (assoc_range 40.9, obj_get 28.9, assoc_get 15.7,
	 * assoc_count 11.7, assoc_time_range 2.8), 0.2% writes (assoc_add
	 * 52.5, obj_update 20.7, obj_add 16.5, assoc_del 8.3, obj_delete 2.0,
	 * assoc_change_type 0.9). */
	static const uint32_t tao[FG_NOPS] = {
	        [FG_OBJ_GET] = 28842,      [FG_ASSOC_COUNT] = 11677,
	        [FG_ASSOC_RANGE] = 40818,  [FG_ASSOC_TIME_RANGE] = 2794,
	        [FG_ASSOC_GET] = 15669,    [FG_OBJ_ADD] = 33,
	        [FG_OBJ_UPDATE] = 41,      [FG_OBJ_DELETE] = 4,
	        [FG_ASSOC_ADD] = 103,      [FG_ASSOC_DELETE] = 17,
	        [FG_ASSOC_CHANGE_TYPE] = 2};
	/* LinkBench: getlinklist 50.7, getnode 12.9, addlink 9.0,
	 * updatelink 8.0 (an add that overwrites), updatenode 7.4,
	 * countlink 4.9, deletelink 3.0, addnode 2.6, deletenode 1.0,
	 * multiget-link 0.5. */
	static const uint32_t lb[FG_NOPS] = {
	        [FG_OBJ_GET] = 12900,     [FG_ASSOC_COUNT] = 4900,
	        [FG_ASSOC_RANGE] = 50700, [FG_ASSOC_GET] = 500,
	        [FG_OBJ_ADD] = 2600,      [FG_OBJ_UPDATE] = 7400,
	        [FG_OBJ_DELETE] = 1000,   [FG_ASSOC_ADD] = 17000,
	        [FG_ASSOC_DELETE] = 3000};
	return m == LB_TAO ? tao : lb;
}

static inline const char *lb_mix_name(enum lb_mix m)
{
	return m == LB_TAO ? "tao" : "linkbench";
}

/* The next operation of mix @m (@s: the caller's random state; @next_id:
 * the caller's counter of new ids, which must not collide across callers). */
static inline void lb_next(const struct lb_graph *g, enum lb_mix m, uint64_t *s,
                           uint64_t *next_id, struct lb_op *op)
{
	const uint32_t *w = lb_weights(m);
	uint32_t x = (uint32_t)(lb_rand(s) % 100000u), acc = 0;
	unsigned k = 0;
	for (; k < FG_NOPS - 1; k++) {
		acc += w[k];
		if (x < acc)
			break;
	}
	memset(op, 0, sizeof(*op));
	op->op = (enum fg_op)k;
	op->id1 = lb_pick(g, s);
	op->atype = 1;
	int64_t now = LB_T0 + (int64_t)(lb_rand(s) % 1000000u);
	/* the loaded degree, for the operations that name a loaded edge
	 * only (a function of the id: computing it or not changes no draw) */
	uint32_t d = 0;
	if (op->op == FG_ASSOC_GET || op->op == FG_ASSOC_ADD ||
	    op->op == FG_ASSOC_DELETE || op->op == FG_ASSOC_CHANGE_TYPE)
		d = lb_degree(g, op->id1);
	struct fg_edge e;
	switch (op->op) {
	case FG_ASSOC_RANGE:
		op->limit = m == LB_TAO ? LB_TAO_LIMIT : LB_LB_LIMIT;
		break;
	case FG_ASSOC_TIME_RANGE:
		op->high = now;
		op->low = now - LB_DAY_US / 4;
		op->limit = LB_TAO_LIMIT;
		break;
	case FG_ASSOC_GET:
		op->nid2 = 1 + (unsigned)(lb_rand(s) % 2);
		for (unsigned i = 0; i < op->nid2; i++) {
			if (d) {
				lb_edge(g, op->id1, (uint32_t)(lb_rand(s) % d),
				        &e);
				op->id2s[i] = e.id2;
			} else {
				op->id2s[i] = 1 + lb_rand(s) % g->nodes;
			}
		}
		op->high = INT64_MAX;
		op->low = INT64_MIN;
		break;
	case FG_OBJ_ADD:
		op->id1 = (*next_id)++;
		op->time = now;
		break;
	case FG_OBJ_UPDATE: op->time = now; break;
	case FG_ASSOC_ADD:
		/* a new edge, or (LinkBench's updatelink) one loaded */
		if (d && lb_rand(s) % 2 && m == LB_LINKBENCH) {
			lb_edge(g, op->id1, (uint32_t)(lb_rand(s) % d), &e);
			op->id2 = e.id2;
		} else {
			op->id2 = 1 + lb_rand(s) % g->nodes;
		}
		op->time = now;
		break;
	case FG_ASSOC_DELETE:
	case FG_ASSOC_CHANGE_TYPE:
		if (d) {
			lb_edge(g, op->id1, (uint32_t)(lb_rand(s) % d), &e);
			op->id2 = e.id2;
		} else {
			op->id2 = 1 + lb_rand(s) % g->nodes;
		}
		op->newtype = 2;
		break;
	default: break;
	}
}

#endif
