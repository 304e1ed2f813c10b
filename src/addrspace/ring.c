/*
 * Consistent hashing of regions to machines (ring.h).
 *
 * Layout: for each ring, the n*p points sorted by (position, machine), and
 * for each point the replica set that a region landing in the arc ending
 * at that point gets (precomputed at build, so a lookup is one binary
 * search and a copy).
 */
#include "addrspace/ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"

struct point {
	uint32_t pos;
	uint32_t machine;
	uint32_t idx; /* into farm_ring.all */
};

struct one_ring {
	struct point *pts; /* npts, sorted */
	uint32_t *reps;    /* npts * nrep: replicas of the arc ending at pt i */
	uint32_t *extra;   /* npts: the grower as an extra backup of the arc,
	                      or FARM_RING_NO_EXTRA */
	uint32_t *succ;    /* npts * nrep while a member leaves (else NULL):
	                      the arc's successors, FARM_RING_NO_EXTRA after
	                      the last (ring.h, graceful leave) */
};

struct farm_ring {
	unsigned k, p, r, nrep, n;
	unsigned npts; /* nall * p per ring */
	uint32_t *ids; /* n members, ascending */
	unsigned nall; /* members and departed machines on the rings */
	struct farm_ring_machine *all; /* nall, by id; domain 0 made unique */
	unsigned ndomains;             /* distinct domains among all */
	/* No machine names a domain: departed machines are not on the
	 * rings and each machine is a domain of its own (the placement an
	 * incremental update reproduces, farm_ring_update). */
	bool plain;
	uint32_t *late; /* late members' indices, by rank */
	unsigned nlate;
	/* The grower: the first late member in rank order (its index in
	 * all), or UINT32_MAX when there is none (ring.h, growth). */
	uint32_t grower;
	unsigned nleaving; /* members leaving (ring.h, graceful leave) */
	/* nall, while a member leaves (else NULL): a leaving member that
	 * names no domain, which its departure takes off the rings (a view
	 * keeps only departed machines with a domain): the target walks
	 * past it. One that names a domain stays, departed, as there. */
	bool *vanish;
	struct one_ring rings[FARM_RING_MAX_RINGS];
};

static uint64_t fmix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The k hash functions of a machine's identity: ring j's function places
 * point i of machine m at the top half of fmix64 of (m, j, i). */
static uint32_t point_pos(uint32_t machine, unsigned ring, unsigned point)
{
	uint64_t key =
	        ((uint64_t)machine << 32) | ((uint64_t)ring << 16) | point;
	return (uint32_t)(fmix64(key ^ 0x6a09e667f3bcc908ull) >> 32);
}

static uint32_t inv32(uint32_t a) /* a odd: its inverse mod 2^32 */
{
	uint32_t x = a; /* correct to 3 bits; each step doubles them */
	for (int i = 0; i < 5; i++)
		x *= 2u - a * x;
	return x;
}

/* Inverse of farm_ring_pos(). */
static uint32_t ring_unpos(uint32_t x)
{
	x ^= x >> 16;
	x *= inv32(0x846ca68bU);
	x ^= (x >> 15) ^ (x >> 30);
	x *= inv32(0x7feb352dU);
	x ^= x >> 16;
	return x;
}

/* Byte @b of a point's sort key, (position, machine), from the least
 * significant: the machine's first @mbytes bytes, then the position's. */
static unsigned key_byte(const struct point *x, unsigned b, unsigned mbytes)
{
	uint32_t v = b < mbytes ? x->machine : x->pos;
	return (v >> (8 * (b < mbytes ? b : b - mbytes))) & 0xffu;
}

/* Sort @n points by (position, machine), stably (points of one machine at
 * one position keep their order): a least-significant-byte radix sort
 * through @tmp, over the machine's bytes only up to the largest id's.
 * Every machine sorts every ring at every configuration change, and at
 * 64 machines qsort's comparisons and copies were a third of the CPU a
 * cluster spent forming (scale_bench, docs/benchmarks.md). */
static void sort_points(struct point *pts, struct point *tmp, unsigned n)
{
	uint32_t top = 0;
	for (unsigned i = 0; i < n; i++)
		top |= pts[i].machine;
	unsigned mbytes = 0;
	while (mbytes < 4 && (top >> (8 * mbytes)))
		mbytes++;
	struct point *src = pts, *dst = tmp;
	for (unsigned b = 0; b < mbytes + 4; b++) {
		unsigned at[257] = {0};
		for (unsigned i = 0; i < n; i++)
			at[key_byte(&src[i], b, mbytes) + 1]++;
		for (unsigned d = 0; d < 256; d++)
			at[d + 1] += at[d];
		for (unsigned i = 0; i < n; i++)
			dst[at[key_byte(&src[i], b, mbytes)]++] = src[i];
		struct point *t = src;
		src = dst;
		dst = t;
	}
	if (src != pts)
		memcpy(pts, src, (size_t)n * sizeof(*pts));
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

void farm_ring_free(farm_ring *ring)
{
	if (!ring)
		return;
	for (unsigned j = 0; j < FARM_RING_MAX_RINGS; j++) {
		free(ring->rings[j].pts);
		free(ring->rings[j].reps);
		free(ring->rings[j].extra);
		free(ring->rings[j].succ);
	}
	free(ring->ids);
	free(ring->all);
	free(ring->late);
	free(ring->vanish);
	free(ring);
}

static int cmp_machine(const void *a, const void *b)
{
	const struct farm_ring_machine *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Is machine index @m in @set[0..n)? */
static bool in_set(const uint32_t *set, unsigned n, uint32_t m)
{
	for (unsigned q = 0; q < n; q++)
		if (set[q] == m)
			return true;
	return false;
}

/* Is machine index @m late for this placement? @ordinary (an index, or
 * UINT32_MAX) is placed as if it were not: the grower's target. */
static bool late_for(const farm_ring *g, uint32_t m, uint32_t ordinary)
{
	return g->all[m].late && m != ordinary;
}

/* Does @m stand for its id's departed earlier holder in this placement
 * (ring.h, farm_ring_machine.shadow)? Not where it is @ordinary: its
 * target is the placement after its growth, which drops the shadow. */
static bool shadow_for(const farm_ring *g, uint32_t m, uint32_t ordinary)
{
	return g->all[m].shadow && m != ordinary;
}

/* Is @m met by the domain walk (L)? Members that are not late, and
 * departed machines, and late members standing for a departed holder. */
static bool walked_for(const farm_ring *g, uint32_t m, uint32_t ordinary)
{
	return !late_for(g, m, ordinary) || shadow_for(g, m, ordinary);
}

/* Is @m, met in L, no replica through it: departed, or standing for a
 * departed holder? */
static bool away_for(const farm_ring *g, uint32_t m, uint32_t ordinary)
{
	return g->all[m].departed || shadow_for(g, m, ordinary);
}

/* The domain the walk meets @m in: its shadow's while it stands for one. */
static uint32_t walk_domain(const farm_ring *g, uint32_t m, uint32_t ordinary)
{
	return shadow_for(g, m, ordinary) ? g->all[m].shadow : g->all[m].domain;
}

/* Has domain @d been taken by one of the machines in @set[0..n)? */
static bool domain_in(const farm_ring *g, const uint32_t *set, unsigned n,
                      uint32_t d, uint32_t ordinary)
{
	for (unsigned q = 0; q < n; q++)
		if (walk_domain(g, set[q], ordinary) == d)
			return true;
	return false;
}

/* Is machine index @m out of this placement: departed, or leaving when
 * @drop_leaving (the target a graceful leave fills)? */
static bool gone_for(const farm_ring *g, uint32_t m, bool drop_leaving)
{
	return g->all[m].departed || (drop_leaving && g->all[m].leaving);
}

/* Is @m off the rings in this placement: a leaving member naming no
 * domain, once it left (@drop_leaving)? */
static bool vanished(const farm_ring *g, uint32_t m, bool drop_leaving)
{
	return drop_leaving && g->vanish && g->vanish[m];
}

/* Is @m passed over by the domain walk (L) of this placement? */
static bool unwalked(const farm_ring *g, uint32_t m, uint32_t ordinary,
                     bool drop_leaving)
{
	return !walked_for(g, m, ordinary) || vanished(g, m, drop_leaving);
}

/* Step 1 of ring.h's placement for the arc ending at point @i: into @L
 * the first machine of each new domain, clockwise, then (fewer domains
 * than replicas) the next machines. Late machines other than @ordinary
 * are not walked (L never depends on them), unless they stand for a
 * departed holder (shadow_for): met as it, in its domain. Returns L's
 * length. */
static unsigned arc_leaders(const farm_ring *g, const struct one_ring *R,
                            unsigned i, uint32_t ordinary, bool drop_leaving,
                            uint32_t *L)
{
	unsigned nl = 0, want = FARM_MIN(g->r, g->nall), ndom = 0;
	for (unsigned s = 0; s < g->npts && nl < want && ndom < g->ndomains;
	     s++) {
		uint32_t m = R->pts[(i + s) % g->npts].idx;
		if (unwalked(g, m, ordinary, drop_leaving) ||
		    in_set(L, nl, m) ||
		    domain_in(g, L, nl, walk_domain(g, m, ordinary), ordinary))
			continue;
		L[nl++] = m;
		ndom++;
	}
	for (unsigned s = 0; s < g->npts && nl < want; s++) {
		uint32_t m = R->pts[(i + s) % g->npts].idx;
		if (!unwalked(g, m, ordinary, drop_leaving) &&
		    !in_set(L, nl, m))
			L[nl++] = m;
	}
	return nl;
}

/* Is there a member, walkable for this placement, outside L's domains? */
static bool member_outside(const farm_ring *g, const uint32_t *L, unsigned nl,
                           uint32_t ordinary, bool drop_leaving)
{
	for (unsigned m = 0; m < g->nall; m++)
		if (!gone_for(g, m, drop_leaving) &&
		    !late_for(g, m, ordinary) &&
		    !vanished(g, m, drop_leaving) &&
		    !domain_in(g, L, nl, g->all[m].domain, ordinary))
			return true;
	return false;
}

/* Step 3: @chosen (@got long) short of L's departed ones takes members
 * outside L's domains first, then any, each pass clockwise; a fixed
 * order given L, so a later departure only appends. Returns the new
 * length. */
static unsigned arc_fill_departed(const farm_ring *g, const struct one_ring *R,
                                  unsigned i, uint32_t ordinary,
                                  bool drop_leaving, const uint32_t *L,
                                  unsigned nl, uint32_t *chosen, unsigned got)
{
	if (got >= g->nrep)
		return got;
	bool outside = member_outside(g, L, nl, ordinary, drop_leaving);
	for (unsigned pass = outside ? 0 : 1; pass < 2 && got < g->nrep; pass++)
		for (unsigned s = 0; s < g->npts && got < g->nrep; s++) {
			uint32_t m = R->pts[(i + s) % g->npts].idx;
			if (gone_for(g, m, drop_leaving) ||
			    late_for(g, m, ordinary) ||
			    vanished(g, m, drop_leaving) || in_set(L, nl, m) ||
			    in_set(chosen, got, m) ||
			    (pass == 0 &&
			     domain_in(g, L, nl, g->all[m].domain, ordinary)))
				continue;
			chosen[got++] = m;
		}
	return got;
}

/* The replicas of the arc ending at point @i of ring @R into @chosen
 * (machine indices, g->nrep of them): ring.h's steps, with the late
 * machine @ordinary (UINT32_MAX: none) placed as any other member, and
 * with @drop_leaving the leaving members placed as departed ones. */
static unsigned place_arc_as(const farm_ring *g, const struct one_ring *R,
                             unsigned i, uint32_t ordinary, bool drop_leaving,
                             uint32_t *chosen)
{
	uint32_t L[FARM_RING_MAX_REPLICAS];
	unsigned nl = arc_leaders(g, R, i, ordinary, drop_leaving, L);
	/* 2. L's members, in L's order. */
	unsigned got = 0;
	for (unsigned q = 0; q < nl && got < g->nrep; q++)
		if (!away_for(g, L[q], ordinary) &&
		    !gone_for(g, L[q], drop_leaving))
			chosen[got++] = L[q];
	got = arc_fill_departed(g, R, i, ordinary, drop_leaving, L, nl, chosen,
	                        got);
	/* 4. Still short: the late members, in the order they joined (the
	 * same for every region, so a later joiner only appends). */
	for (unsigned q = 0; q < g->nlate && got < g->nrep; q++)
		if (!in_set(chosen, got, g->late[q]) &&
		    !gone_for(g, g->late[q], drop_leaving))
			chosen[got++] = g->late[q];
	return got;
}

/* Graceful leave: the arc's successors (ring.h) into @succ (g->nrep
 * slots, FARM_RING_NO_EXTRA after the last): the target's machines that
 * @chosen (@got replicas) lacks, in its order, while the holders have
 * room (@used of them so far). */
static void place_successors(const farm_ring *g, const struct one_ring *R,
                             unsigned i, const uint32_t *chosen, unsigned got,
                             unsigned used, uint32_t extra, uint32_t *succ)
{
	unsigned k = 0;
	for (unsigned q = 0; q < g->nrep; q++)
		succ[q] = FARM_RING_NO_EXTRA;
	bool leaves = false;
	for (unsigned q = 0; q < got; q++)
		leaves |= g->all[chosen[q]].leaving;
	if (!leaves)
		return;
	uint32_t target[FARM_RING_MAX_REPLICAS];
	unsigned nt = place_arc_as(g, R, i, UINT32_MAX, true, target);
	for (unsigned q = 0; q < nt && used + k < FARM_RING_MAX_REPLICAS; q++)
		if (!in_set(chosen, got, target[q]) &&
		    g->all[target[q]].id != extra)
			succ[k++] = g->all[target[q]].id;
}

/* The arc ending at point @i of ring @R: its replicas into @rep (ids,
 * g->nrep of them) and its extra backup into *@extra (ring.h). */
static void place_arc(const farm_ring *g, const struct one_ring *R, unsigned i,
                      uint32_t *rep, uint32_t *extra)
{
	uint32_t chosen[FARM_RING_MAX_REPLICAS];
	unsigned got = place_arc_as(g, R, i, UINT32_MAX, false, chosen);
	for (unsigned q = 0; q < got; q++)
		rep[q] = g->all[chosen[q]].id;
	*extra = FARM_RING_NO_EXTRA;
	/* Growth: where the grower placed as an ordinary member would be a
	 * replica and is not one, it is an extra backup, after the others
	 * (so never promoted ahead of them). With room for it only. */
	if (g->grower != UINT32_MAX && got < FARM_RING_MAX_REPLICAS &&
	    !in_set(chosen, got, g->grower)) {
		uint32_t target[FARM_RING_MAX_REPLICAS];
		unsigned nt = place_arc_as(g, R, i, g->grower, false, target);
		if (in_set(target, nt, g->grower))
			*extra = g->all[g->grower].id;
	}
	if (R->succ)
		place_successors(g, R, i, chosen, got,
		                 got + (*extra != FARM_RING_NO_EXTRA), *extra,
		                 &R->succ[(size_t)i * g->nrep]);
}

/* @attr with its zero fields set to the defaults, into *@a; -EINVAL for
 * a count past what the fixed-size tables hold. */
static int ring_attr_resolve(const struct farm_ring_attr *attr,
                             struct farm_ring_attr *a)
{
	*a = attr ? *attr : (struct farm_ring_attr){0};
	if (!a->replicas)
		a->replicas = FARM_RING_DEFAULT_REPLICAS;
	if (!a->rings)
		a->rings = FARM_RING_DEFAULT_RINGS;
	if (!a->points)
		a->points = FARM_RING_DEFAULT_POINTS;
	if (a->replicas > FARM_RING_MAX_REPLICAS ||
	    a->rings > FARM_RING_MAX_RINGS || a->points > FARM_RING_MAX_POINTS)
		return -EINVAL;
	return 0;
}

/* Copy the machines @ms that take part into g->all. Departed machines
 * matter only to the domain walk: without any domain (or with the
 * test-only switch that ignores them) the placement is the plain one
 * over the members. */
static void ring_copy_machines(farm_ring *g, const struct farm_ring_machine *ms,
                               unsigned n)
{
	bool domains = false;
	for (unsigned m = 0; m < n; m++)
		domains |= ms[m].domain != 0;
	if (FARM_FAULT_SWITCH(FARM_FP_RING_NO_DOMAINS))
		domains = false;
	bool no_late = FARM_FAULT_SWITCH(FARM_FP_RING_NO_LATE);
	g->plain = !domains;
	for (unsigned m = 0; m < n; m++) {
		if (!domains && ms[m].departed)
			continue;
		g->all[g->nall] = ms[m];
		if (!domains)
			g->all[g->nall].domain = 0;
		if (no_late)
			g->all[g->nall].late = 0;
		if (ms[m].departed)
			g->all[g->nall].leaving = false;
		/* A shadow means something only for a late member. */
		if (!domains || !g->all[g->nall].late ||
		    g->all[g->nall].departed)
			g->all[g->nall].shadow = 0;
		g->nall++;
	}
}

/* Sort g->all by id and list the members in g->ids; -EINVAL for a
 * repeated id or a member count the ring cannot hold. */
static int ring_sort_members(farm_ring *g)
{
	qsort(g->all, g->nall, sizeof(*g->all), cmp_machine);
	for (unsigned m = 0; m < g->nall; m++) {
		if (m && g->all[m].id == g->all[m - 1].id)
			return -EINVAL;
		if (!g->all[m].departed)
			g->ids[g->n++] = g->all[m].id;
	}
	if (g->n == 0 || g->n > FARM_RING_MAX_MACHINES)
		return -EINVAL;
	return 0;
}

/* Late members by rank (ties, which a view never makes, by id) into
 * g->late; the first of them not leaving is the grower. */
static int ring_rank_late(farm_ring *g)
{
	g->late = malloc((g->nall ? g->nall : 1) * sizeof(*g->late));
	if (!g->late)
		return -ENOMEM;
	for (unsigned m = 0; m < g->nall; m++) {
		if (!g->all[m].late || g->all[m].departed)
			continue;
		unsigned q = g->nlate++;
		while (q && g->all[g->late[q - 1]].late > g->all[m].late) {
			g->late[q] = g->late[q - 1];
			q--;
		}
		g->late[q] = m;
	}
	g->grower = UINT32_MAX;
	for (unsigned q = 0; q < g->nlate && g->grower == UINT32_MAX; q++)
		if (!g->all[g->late[q]].leaving)
			g->grower = g->late[q];
	return 0;
}

/* Count the leaving members and mark those that name no domain (before
 * ring_number_domains gives them one of their own; without domains,
 * every one). -ENOMEM. */
static int ring_mark_leaving(farm_ring *g)
{
	for (unsigned m = 0; m < g->nall; m++)
		g->nleaving += g->all[m].leaving;
	if (!g->nleaving)
		return 0;
	g->vanish = calloc(g->nall, sizeof(*g->vanish));
	if (!g->vanish)
		return -ENOMEM;
	for (unsigned m = 0; m < g->nall; m++)
		g->vanish[m] = g->all[m].leaving && !g->all[m].domain;
	return 0;
}

/* Domain number @s of g's machines: their domains, then their shadows'
 * (0 where none). */
static uint32_t nth_domain(const farm_ring *g, unsigned s)
{
	return s < g->nall ? g->all[s].domain : g->all[s - g->nall].shadow;
}

/* A machine without a domain is one of its own: give it a value no
 * named domain has (above the largest, shadows' included), and count the
 * domains the walk may meet. */
static int ring_number_domains(farm_ring *g)
{
	uint32_t top = 0;
	for (unsigned m = 0; m < g->nall; m++)
		top = FARM_MAX(top,
		               FARM_MAX(g->all[m].domain, g->all[m].shadow));
	for (unsigned m = 0; m < g->nall; m++)
		if (!g->all[m].domain) {
			if (top == UINT32_MAX)
				return -EINVAL;
			g->all[m].domain = ++top;
		}
	for (unsigned s = 0; s < 2 * g->nall; s++) {
		uint32_t d = nth_domain(g, s);
		bool seen = d == 0;
		for (unsigned q = 0; q < s && !seen; q++)
			seen = nth_domain(g, q) == d;
		g->ndomains += !seen;
	}
	return 0;
}

static int ring_alloc_one(const farm_ring *g, struct one_ring *R)
{
	R->pts = malloc(g->npts * sizeof(*R->pts));
	R->reps = malloc((size_t)g->npts * g->nrep * sizeof(*R->reps));
	R->extra = malloc((size_t)g->npts * sizeof(*R->extra));
	if (g->nleaving)
		R->succ = malloc((size_t)g->npts * g->nrep * sizeof(*R->succ));
	return R->pts && R->reps && R->extra && (R->succ || !g->nleaving)
	               ? 0
	               : -ENOMEM;
}

/* Ring @j: every machine's points in position order, then each arc's
 * replicas and extra backup. */
static int ring_place_one(farm_ring *g, unsigned j)
{
	struct one_ring *R = &g->rings[j];
	int rc = ring_alloc_one(g, R);
	struct point *tmp = malloc((size_t)g->npts * sizeof(*tmp));
	if (rc || !tmp) {
		free(tmp);
		return -ENOMEM;
	}
	unsigned x = 0;
	for (unsigned m = 0; m < g->nall; m++)
		for (unsigned i = 0; i < g->p; i++)
			R->pts[x++] = (struct point){
			        .pos = point_pos(g->all[m].id, j, i),
			        .machine = g->all[m].id,
			        .idx = m};
	sort_points(R->pts, tmp, g->npts);
	free(tmp);
	for (unsigned i = 0; i < g->npts; i++)
		place_arc(g, R, i, &R->reps[(size_t)i * g->nrep], &R->extra[i]);
	return 0;
}

/* A ring for @ms with everything but the rings' points and arcs: the
 * machines, members, late ranks and domains, and the sizes. */
static int ring_prepare(const struct farm_ring_machine *ms, unsigned n,
                        const struct farm_ring_attr *attr, farm_ring **out)
{
	if (!ms || !out || n == 0 || n > 2 * FARM_RING_MAX_MACHINES)
		return -EINVAL;
	struct farm_ring_attr a;
	int rc = ring_attr_resolve(attr, &a);
	if (rc)
		return rc;
	farm_ring *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->all = malloc(n * sizeof(*g->all));
	g->ids = malloc(n * sizeof(*g->ids));
	if (!g->all || !g->ids) {
		rc = -ENOMEM;
		goto fail;
	}
	ring_copy_machines(g, ms, n);
	if ((rc = ring_sort_members(g)) || (rc = ring_rank_late(g)) ||
	    (rc = ring_mark_leaving(g)) || (rc = ring_number_domains(g)))
		goto fail;
	g->k = a.rings;
	g->p = a.points;
	g->r = a.replicas;
	g->nrep = FARM_MIN(a.replicas, g->n);
	g->npts = g->nall * a.points;
	*out = g;
	return 0;
fail:
	farm_ring_free(g);
	return rc;
}

int farm_ring_build_domains(const struct farm_ring_machine *ms, unsigned n,
                            const struct farm_ring_attr *attr, farm_ring **out)
{
	return farm_ring_update(NULL, ms, n, attr, out);
}

/* ---- incremental update (farm_ring_update) --------------------------- */

#define RING_NONE UINT32_MAX
/* Past this many changed machines an update marks about as many arcs as
 * a build places: it builds. */
#define RING_UPDATE_MAX_CHANGED 16u

/* What an update of @prev into g changes: for each of prev's machines its
 * index in g (remap; RING_NONE: gone), for each of g's its index in prev
 * (back; RING_NONE: new), and the machines whose points count as changed,
 * in both (cold: prev's indices, cnew: g's). */
struct ring_diff {
	uint32_t *remap, *back;
	bool *cold, *cnew;
	unsigned changed; /* machines marked */
};

static void ring_diff_free(struct ring_diff *d)
{
	free(d->remap);
	free(d->back);
	free(d->cold);
	free(d->cnew);
}

/* Mark the grower of @g, when it is another machine than @prev's, and
 * @prev's: the extra backups of arcs near either may change. */
static void diff_growers(const farm_ring *prev, const farm_ring *g,
                         struct ring_diff *d)
{
	uint32_t was = prev->grower, is = g->grower;
	if ((was == RING_NONE) == (is == RING_NONE) &&
	    (was == RING_NONE || prev->all[was].id == g->all[is].id))
		return;
	if (was != RING_NONE)
		d->cold[was] = true;
	if (is != RING_NONE)
		d->cnew[is] = true;
}

/* Fill @d: machines added, removed or whose lateness changed are marked,
 * the growers when they differ, and a machine marked in one ring is
 * marked in the other. -ENOMEM. */
static int ring_diff(const farm_ring *prev, const farm_ring *g,
                     struct ring_diff *d)
{
	d->remap = malloc(prev->nall * sizeof(*d->remap));
	d->back = malloc(g->nall * sizeof(*d->back));
	d->cold = calloc(prev->nall, sizeof(*d->cold));
	d->cnew = calloc(g->nall, sizeof(*d->cnew));
	if (!d->remap || !d->back || !d->cold || !d->cnew)
		return -ENOMEM;
	unsigned a = 0, b = 0;
	while (a < prev->nall || b < g->nall) {
		if (b == g->nall ||
		    (a < prev->nall && prev->all[a].id < g->all[b].id)) {
			d->remap[a] = RING_NONE;
			d->cold[a++] = true;
		} else if (a == prev->nall || g->all[b].id < prev->all[a].id) {
			d->back[b] = RING_NONE;
			d->cnew[b++] = true;
		} else {
			bool moved = !prev->all[a].late != !g->all[b].late;
			d->remap[a] = b;
			d->back[b] = a;
			d->cold[a++] = moved;
			d->cnew[b++] = moved;
		}
	}
	diff_growers(prev, g, d);
	d->changed = 0;
	for (b = 0; b < g->nall; b++)
		if (d->back[b] != RING_NONE && d->cold[d->back[b]])
			d->cnew[b] = true;
	for (a = 0; a < prev->nall; a++) {
		if (d->remap[a] != RING_NONE && d->cnew[d->remap[a]])
			d->cold[a] = true;
		d->changed += d->cold[a];
	}
	for (b = 0; b < g->nall; b++)
		d->changed += d->cnew[b] && d->back[b] == RING_NONE;
	return 0;
}

/* Can g's rings be @prev's updated? Only the plain placement (no
 * domains) with the same sizes, and enough machines that are not late
 * for every arc's walk to end at its replicas (ring.h's steps 3 and 4
 * never add one): an arc's replicas and extra backup then depend only on
 * the points from its end up to its r-th distinct machine that is not
 * late. */
static bool ring_updatable(const farm_ring *prev, const farm_ring *g)
{
	if (!prev->plain || !g->plain || prev->k != g->k || prev->p != g->p ||
	    prev->r != g->r || prev->nrep != g->nrep || prev->nleaving ||
	    g->nleaving)
		return false;
	unsigned early[2] = {0, 0};
	for (unsigned m = 0; m < prev->nall; m++)
		early[0] += !prev->all[m].late;
	for (unsigned m = 0; m < g->nall; m++)
		early[1] += !g->all[m].late;
	return early[0] >= prev->nrep && early[1] >= g->nrep;
}

/* Mark in @dirty the arcs of ring @R of @g whose walk reaches point @c:
 * back from it, until the points passed hold as many distinct machines
 * that are not late as a walk takes (arcs before those stop short of it;
 * the walk with the grower as a member stops no later). */
static void mark_back(const farm_ring *g, const struct one_ring *R, unsigned c,
                      bool *dirty)
{
	uint32_t seen[FARM_RING_MAX_REPLICAS];
	unsigned nseen = 0, j = c;
	for (unsigned s = 0; s < g->npts; s++) {
		dirty[j] = true;
		j = j ? j - 1 : g->npts - 1;
		uint32_t m = R->pts[j].idx;
		if (!g->all[m].late && !in_set(seen, nseen, m))
			seen[nseen++] = m;
		if (nseen >= g->nrep)
			return;
	}
}

static bool point_before(const struct point *x, const struct point *y)
{
	return x->pos < y->pos || (x->pos == y->pos && x->machine < y->machine);
}

/* The points of g's new machines on ring @j, sorted, into *@out (its
 * length into *@nout). -ENOMEM. */
static int new_points(const farm_ring *g, unsigned j, const struct ring_diff *d,
                      struct point **out, unsigned *nout)
{
	unsigned nnew = 0;
	for (unsigned m = 0; m < g->nall; m++)
		nnew += d->back[m] == RING_NONE;
	size_t len = (size_t)nnew * g->p;
	struct point *add = malloc((len ? len : 1) * sizeof(*add));
	struct point *tmp = malloc((len ? len : 1) * sizeof(*tmp));
	if (!add || !tmp) {
		free(add);
		free(tmp);
		return -ENOMEM;
	}
	unsigned x = 0;
	for (unsigned m = 0; m < g->nall; m++)
		for (unsigned i = 0; d->back[m] == RING_NONE && i < g->p; i++)
			add[x++] = (struct point){
			        .pos = point_pos(g->all[m].id, j, i),
			        .machine = g->all[m].id,
			        .idx = m};
	sort_points(add, tmp, x);
	free(tmp);
	*out = add;
	*nout = x;
	return 0;
}

/* Ring @j's points: @P's of the machines kept (indices remapped) merged
 * with @add's, in position order; @oldat gets each point's index in @P
 * (RING_NONE: new). */
static void merge_points(const farm_ring *g, struct one_ring *R,
                         const farm_ring *prev, const struct one_ring *P,
                         const struct point *add, unsigned nadd,
                         const struct ring_diff *d, uint32_t *oldat)
{
	unsigned a = 0, b = 0;
	for (unsigned x = 0; x < g->npts; x++) {
		while (a < prev->npts && d->remap[P->pts[a].idx] == RING_NONE)
			a++;
		if (a < prev->npts &&
		    (b == nadd || point_before(&P->pts[a], &add[b]))) {
			R->pts[x] = P->pts[a];
			R->pts[x].idx = d->remap[P->pts[a].idx];
			oldat[x] = a++;
		} else {
			R->pts[x] = add[b++];
			oldat[x] = RING_NONE;
		}
	}
}

/* Ring @j of g from @prev's: the points merged, the arcs whose walk
 * reaches a changed machine's point (in either ring) placed afresh, the
 * others' replicas and extra backups copied: their walks pass the same
 * machines, with the same lateness, in both. */
static int ring_update_one(const farm_ring *prev, farm_ring *g, unsigned j,
                           const struct ring_diff *d)
{
	const struct one_ring *P = &prev->rings[j];
	struct one_ring *R = &g->rings[j];
	struct point *add = NULL;
	unsigned nadd = 0;
	uint32_t *oldat = malloc(g->npts * sizeof(*oldat));
	bool *dirty = calloc(g->npts, sizeof(*dirty));
	bool *odirty = calloc(prev->npts, sizeof(*odirty));
	int rc = oldat && dirty && odirty ? ring_alloc_one(g, R) : -ENOMEM;
	rc = rc ? rc : new_points(g, j, d, &add, &nadd);
	if (rc)
		goto out;
	merge_points(g, R, prev, P, add, nadd, d, oldat);
	for (unsigned a = 0; a < prev->npts; a++)
		if (d->cold[P->pts[a].idx])
			mark_back(prev, P, a, odirty);
	for (unsigned x = 0; x < g->npts; x++)
		if (d->cnew[R->pts[x].idx])
			mark_back(g, R, x, dirty);
	for (unsigned x = 0; x < g->npts; x++)
		dirty[x] =
		        dirty[x] || oldat[x] == RING_NONE || odirty[oldat[x]];
	for (unsigned x = 0, run; x < g->npts; x += run) {
		if (dirty[x]) {
			place_arc(g, R, x, &R->reps[(size_t)x * g->nrep],
			          &R->extra[x]);
			run = 1;
			continue;
		}
		/* Clean arcs that follow each other in both rings: one copy. */
		for (run = 1; x + run < g->npts && !dirty[x + run] &&
		              oldat[x + run] == oldat[x] + run;
		     run++)
			;
		memcpy(&R->reps[(size_t)x * g->nrep],
		       &P->reps[(size_t)oldat[x] * g->nrep],
		       (size_t)run * g->nrep * sizeof(*R->reps));
		memcpy(&R->extra[x], &P->extra[oldat[x]],
		       run * sizeof(*R->extra));
	}
out:
	free(add);
	free(oldat);
	free(dirty);
	free(odirty);
	return rc;
}

/* g's rings from @prev's, when ring_updatable; -EAGAIN when too many
 * machines changed for an update to pay (nothing placed), -ENOMEM. */
static int ring_update_rings(const farm_ring *prev, farm_ring *g)
{
	struct ring_diff d = {0};
	int rc = ring_diff(prev, g, &d);
	if (!rc && d.changed > RING_UPDATE_MAX_CHANGED)
		rc = -EAGAIN;
	for (unsigned j = 0; !rc && j < g->k; j++)
		rc = ring_update_one(prev, g, j, &d);
	ring_diff_free(&d);
	return rc;
}

int farm_ring_update(const farm_ring *prev, const struct farm_ring_machine *ms,
                     unsigned n, const struct farm_ring_attr *attr,
                     farm_ring **out)
{
	farm_ring *g = NULL;
	int rc = ring_prepare(ms, n, attr, &g);
	if (rc)
		return rc;
	rc = -EAGAIN;
	if (prev && ring_updatable(prev, g))
		rc = ring_update_rings(prev, g);
	if (rc == -EAGAIN) {
		rc = 0;
		for (unsigned j = 0; !rc && j < g->k; j++)
			rc = ring_place_one(g, j);
	}
	if (rc) {
		farm_ring_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

static bool rings_same(const farm_ring *a, const farm_ring *b, unsigned j)
{
	const struct one_ring *x = &a->rings[j], *y = &b->rings[j];
	for (unsigned i = 0; i < a->npts; i++)
		if (x->pts[i].pos != y->pts[i].pos ||
		    x->pts[i].machine != y->pts[i].machine ||
		    x->pts[i].idx != y->pts[i].idx ||
		    x->extra[i] != y->extra[i])
			return false;
	if (!x->succ != !y->succ ||
	    (x->succ && memcmp(x->succ, y->succ,
	                       (size_t)a->npts * a->nrep * sizeof(*x->succ))))
		return false;
	return !memcmp(x->reps, y->reps,
	               (size_t)a->npts * a->nrep * sizeof(*x->reps));
}

bool farm_ring_same(const farm_ring *a, const farm_ring *b)
{
	if (a->k != b->k || a->p != b->p || a->r != b->r ||
	    a->nrep != b->nrep || a->n != b->n || a->nall != b->nall ||
	    a->npts != b->npts || a->grower != b->grower ||
	    a->nlate != b->nlate || a->ndomains != b->ndomains ||
	    a->nleaving != b->nleaving ||
	    memcmp(a->ids, b->ids, a->n * sizeof(*a->ids)) ||
	    memcmp(a->late, b->late, a->nlate * sizeof(*a->late)))
		return false;
	for (unsigned m = 0; m < a->nall; m++)
		if (a->all[m].id != b->all[m].id ||
		    a->all[m].domain != b->all[m].domain ||
		    a->all[m].departed != b->all[m].departed ||
		    a->all[m].late != b->all[m].late ||
		    a->all[m].leaving != b->all[m].leaving ||
		    a->all[m].shadow != b->all[m].shadow)
			return false;
	for (unsigned j = 0; j < a->k; j++)
		if (!rings_same(a, b, j))
			return false;
	return true;
}

int farm_ring_build(const uint32_t *ids, unsigned n,
                    const struct farm_ring_attr *attr, farm_ring **out)
{
	if (!ids || !out || n == 0 || n > FARM_RING_MAX_MACHINES)
		return -EINVAL;
	struct farm_ring_machine *ms = malloc(n * sizeof(*ms));
	if (!ms)
		return -ENOMEM;
	for (unsigned m = 0; m < n; m++)
		ms[m] = (struct farm_ring_machine){.id = ids[m]};
	int rc = farm_ring_build_domains(ms, n, attr, out);
	free(ms);
	return rc;
}

unsigned farm_ring_nrings(const farm_ring *ring)
{
	return ring ? ring->k : 0;
}
unsigned farm_ring_nrings_(const farm_ring *ring)
{
	return ring->k;
}
unsigned farm_ring_nreplicas(const farm_ring *ring)
{
	return ring ? ring->nrep : 0;
}
unsigned farm_ring_nmachines(const farm_ring *ring)
{
	return ring ? ring->n : 0;
}

bool farm_ring_has(const farm_ring *ring, uint32_t machine)
{
	return ring && bsearch(&machine, ring->ids, ring->n, sizeof(uint32_t),
	                       cmp_u32) != NULL;
}

/* Index of the first point at or after @pos (wrapping to 0). */
static unsigned succ(const struct one_ring *R, unsigned npts, uint32_t pos)
{
	unsigned lo = 0, hi = npts;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (R->pts[mid].pos < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo == npts ? 0 : lo;
}

/* The ring of @region and the point ending its arc (*@i). */
static const struct one_ring *arc_of(const farm_ring *ring, uint32_t region,
                                     unsigned *i)
{
	const struct one_ring *R = &ring->rings[farm_ring_of(ring, region)];
	*i = succ(R, ring->npts, farm_ring_pos(region));
	return R;
}

unsigned farm_ring_replicas(const farm_ring *ring, uint32_t region,
                            uint32_t *out)
{
	unsigned i;
	const struct one_ring *R = arc_of(ring, region, &i);
	memcpy(out, &R->reps[(size_t)i * ring->nrep],
	       ring->nrep * sizeof(*out));
	return ring->nrep;
}

uint32_t farm_ring_extra(const farm_ring *ring, uint32_t region)
{
	unsigned i;
	return arc_of(ring, region, &i)->extra[i];
}

unsigned farm_ring_holders(const farm_ring *ring, uint32_t region,
                           uint32_t *out)
{
	unsigned i;
	const struct one_ring *R = arc_of(ring, region, &i);
	memcpy(out, &R->reps[(size_t)i * ring->nrep],
	       ring->nrep * sizeof(*out));
	unsigned n = ring->nrep;
	if (R->extra[i] != FARM_RING_NO_EXTRA)
		out[n++] = R->extra[i];
	const uint32_t *sc = R->succ ? &R->succ[(size_t)i * ring->nrep] : NULL;
	for (unsigned q = 0;
	     sc && q < ring->nrep && sc[q] != FARM_RING_NO_EXTRA; q++)
		out[n++] = sc[q];
	return n;
}

unsigned farm_ring_successors(const farm_ring *ring, uint32_t region,
                              uint32_t *out)
{
	unsigned i, n = 0;
	const struct one_ring *R = arc_of(ring, region, &i);
	const uint32_t *sc = R->succ ? &R->succ[(size_t)i * ring->nrep] : NULL;
	while (sc && n < ring->nrep && sc[n] != FARM_RING_NO_EXTRA) {
		out[n] = sc[n];
		n++;
	}
	return n;
}

unsigned farm_ring_nleaving(const farm_ring *ring)
{
	return ring ? ring->nleaving : 0;
}

uint32_t farm_ring_primary(const farm_ring *ring, uint32_t region)
{
	const struct one_ring *R = &ring->rings[farm_ring_of(ring, region)];
	return R->reps[(size_t)succ(R, ring->npts, farm_ring_pos(region)) *
	               ring->nrep];
}

static bool usable(const farm_ring *ring, uint32_t id, uint32_t machine,
                   bool (*taken)(void *, uint32_t), void *ctx)
{
	if (id == 0 || id > 0xfffffffeu)
		return false;
	if (farm_ring_primary(ring, id) != machine)
		return false;
	return !taken || !taken(ctx, id);
}

int farm_ring_pick_region(const farm_ring *ring, uint32_t machine,
                          uint64_t *seed, bool (*taken)(void *, uint32_t),
                          void *ctx, unsigned max_tries, uint32_t *out)
{
	if (!ring || !seed || !out)
		return -EINVAL;
	if (!farm_ring_has(ring, machine))
		return -ENOENT;
	if (!max_tries)
		max_tries = 64 * ring->n;
	for (unsigned t = 0; t < max_tries; t++) {
		uint32_t id = (uint32_t)farm_rand64(seed);
		if (usable(ring, id, machine, taken, ctx)) {
			*out = id;
			return 0;
		}
	}
	return -EAGAIN;
}

int farm_ring_near_region(const farm_ring *ring, uint32_t machine,
                          uint32_t near, bool (*taken)(void *, uint32_t),
                          void *ctx, unsigned max_tries, uint32_t *out)
{
	if (!ring || !out || near == 0)
		return -EINVAL;
	if (!farm_ring_has(ring, machine))
		return -ENOENT;
	if (!max_tries)
		max_tries = 1u << 16;
	unsigned j = farm_ring_of(ring, near);
	const struct one_ring *R = &ring->rings[j];
	/* Walk the positions after @near's. Within one of @machine's arcs
	 * every position has it as primary; about one in k of those maps
	 * back to an id on ring j. Jump over arcs of other machines. */
	uint32_t x = farm_ring_pos(near);
	unsigned tries = 0;
	uint64_t walked = 0;
	while (tries < max_tries && walked < (1ull << 32)) {
		x++;
		walked++;
		unsigned i = succ(R, ring->npts, x);
		if (R->reps[(size_t)i * ring->nrep] != machine) {
			/* Skip to the end of this arc. */
			uint32_t end = R->pts[i].pos;
			walked += (uint32_t)(end - x);
			x = end;
			continue;
		}
		tries++;
		uint32_t id = ring_unpos(x);
		if (id % ring->k == j &&
		    usable(ring, id, machine, taken, ctx)) {
			*out = id;
			return 0;
		}
	}
	return -EAGAIN;
}

void farm_ring_shares(const farm_ring *ring, uint32_t *ids, double *primary,
                      double *backup)
{
	unsigned n = ring->n;
	memcpy(ids, ring->ids, n * sizeof(*ids));
	for (unsigned m = 0; m < n; m++)
		primary[m] = backup[m] = 0;
	const double total = 4294967296.0 * ring->k;
	for (unsigned j = 0; j < ring->k; j++) {
		const struct one_ring *R = &ring->rings[j];
		for (unsigned i = 0; i < ring->npts; i++) {
			/* The arc (pts[i-1], pts[i]]. */
			uint32_t prev =
			        R->pts[(i + ring->npts - 1) % ring->npts].pos;
			double len = (double)(uint32_t)(R->pts[i].pos - prev);
			if (ring->npts == 1)
				len = 4294967296.0;
			const uint32_t *rep = &R->reps[(size_t)i * ring->nrep];
			for (unsigned q = 0; q < ring->nrep; q++) {
				uint32_t *hit =
				        bsearch(&rep[q], ring->ids, n,
				                sizeof(uint32_t), cmp_u32);
				unsigned m = (unsigned)(hit - ring->ids);
				if (q == 0)
					primary[m] += len / total;
				else
					backup[m] += len / total;
			}
		}
	}
}
