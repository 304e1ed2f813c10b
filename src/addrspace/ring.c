/*
 * Consistent hashing of regions to machines (ring.h).
 *
 * Layout: for each ring, the n*p points sorted by (position, machine), and
 * for each point the replica set that a region landing in the arc ending
 * at that point gets (precomputed at build, so a lookup is one binary
 * search and a copy).
 */
#include "addrspace/ring_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"

static uint64_t fmix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The k hash functions of a machine's identity: ring j's function places
 * point i of machine m at the top half of fmix64 of (m, j, i). */
uint32_t farm_ring_point_pos(uint32_t machine, unsigned ring, unsigned point)
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
void farm_ring_sort_points(struct point *pts, struct point *tmp, unsigned n)
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
	free(ring->pins);
	free(ring);
}

static int cmp_machine(const void *a, const void *b)
{
	const struct farm_ring_machine *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
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

int farm_ring_alloc_one(const farm_ring *g, struct one_ring *R)
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
int farm_ring_place_one(farm_ring *g, unsigned j)
{
	struct one_ring *R = &g->rings[j];
	int rc = farm_ring_alloc_one(g, R);
	struct point *tmp = malloc((size_t)g->npts * sizeof(*tmp));
	if (rc || !tmp) {
		free(tmp);
		return -ENOMEM;
	}
	unsigned x = 0;
	for (unsigned m = 0; m < g->nall; m++)
		for (unsigned i = 0; i < g->p; i++)
			R->pts[x++] = (struct point){
			        .pos = farm_ring_point_pos(g->all[m].id, j, i),
			        .machine = g->all[m].id,
			        .idx = m};
	farm_ring_sort_points(R->pts, tmp, g->npts);
	free(tmp);
	for (unsigned i = 0; i < g->npts; i++)
		farm_ring_place_arc(g, R, i, &R->reps[(size_t)i * g->nrep],
		                    &R->extra[i]);
	return 0;
}

/* A ring for @ms with everything but the rings' points and arcs: the
 * machines, members, late ranks and domains, and the sizes. */
int farm_ring_prepare(const struct farm_ring_machine *ms, unsigned n,
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

static int cmp_pin(const void *a, const void *b)
{
	const struct ring_pin *x = a, *y = b;
	return x->region < y->region ? -1 : x->region > y->region;
}

/* @region's pin, or NULL (ring.h, farm_ring_set_pins; pins by region). */
static const struct ring_pin *pin_of(const farm_ring *ring, uint32_t region)
{
	struct ring_pin key = {.region = region};
	return ring->npins ? bsearch(&key, ring->pins, ring->npins, sizeof(key),
	                             cmp_pin)
	                   : NULL;
}

int farm_ring_set_pins(farm_ring *ring, const struct farm_ring_pin *pins,
                       unsigned n)
{
	if (!ring || (n && !pins) || n > FARM_RING_MAX_PINS)
		return -EINVAL;
	free(ring->pins);
	ring->pins = NULL;
	ring->npins = 0;
	if (!n)
		return 0;
	struct ring_pin *p = calloc(n, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (unsigned q = 0; q < n; q++) {
		if (!pins[q].region) {
			free(p);
			return -EINVAL;
		}
		p[q].region = pins[q].region;
		p[q].machine = pins[q].machine;
	}
	qsort(p, n, sizeof(*p), cmp_pin);
	for (unsigned q = 1; q < n; q++)
		if (p[q].region == p[q - 1].region) {
			free(p);
			return -EINVAL;
		}
	/* Each pinned region placed once, here, so a lookup costs a
	 * search of the pins and a copy, as an arc's does. */
	for (unsigned q = 0; q < n; q++) {
		const struct one_ring *R =
		        &ring->rings[farm_ring_of(ring, p[q].region)];
		unsigned i = succ(R, ring->npts, farm_ring_pos(p[q].region));
		farm_ring_place_pinned(ring, R, i, &p[q]);
	}
	ring->pins = p;
	ring->npins = n;
	return 0;
}

uint32_t farm_ring_pinned(const farm_ring *ring, uint32_t region)
{
	const struct ring_pin *p = pin_of(ring, region);
	return p ? p->machine : FARM_RING_NO_EXTRA;
}

bool farm_ring_has_domains(const farm_ring *ring)
{
	return !ring->plain;
}

uint32_t farm_ring_grower(const farm_ring *ring)
{
	return ring->grower == UINT32_MAX ? FARM_RING_NO_EXTRA
	                                  : ring->all[ring->grower].id;
}

uint32_t farm_ring_target_primary(const farm_ring *ring, uint32_t region)
{
	if (ring->grower == UINT32_MAX)
		return farm_ring_primary(ring, region);
	unsigned i;
	const struct one_ring *R = arc_of(ring, region, &i);
	return farm_ring_place_target_primary(ring, R, i,
	                                      farm_ring_pinned(ring, region));
}

/* Where @region is placed: its pin's lists or its arc's, found once
 * (a binary search) for every list a caller asks for. */
struct placed {
	const uint32_t *rep;
	uint32_t extra;
	const uint32_t *succ; /* NULL: none; else FARM_RING_NO_EXTRA ends */
};

static struct placed placed_of(const farm_ring *ring, uint32_t region)
{
	const struct ring_pin *p = pin_of(ring, region);
	if (p)
		return (struct placed){.rep = p->rep,
		                       .extra = p->extra,
		                       .succ = ring->nleaving ? p->succ : NULL};
	unsigned i;
	const struct one_ring *R = arc_of(ring, region, &i);
	size_t at = (size_t)i * ring->nrep;
	return (struct placed){.rep = &R->reps[at],
	                       .extra = R->extra[i],
	                       .succ = R->succ ? &R->succ[at] : NULL};
}

/* @w's successors into @out; how many. */
static unsigned succ_copy(const farm_ring *ring, const struct placed *w,
                          uint32_t *out)
{
	unsigned n = 0;
	while (w->succ && n < ring->nrep && w->succ[n] != FARM_RING_NO_EXTRA) {
		out[n] = w->succ[n];
		n++;
	}
	return n;
}

unsigned farm_ring_replicas(const farm_ring *ring, uint32_t region,
                            uint32_t *out)
{
	struct placed w = placed_of(ring, region);
	memcpy(out, w.rep, ring->nrep * sizeof(*out));
	return ring->nrep;
}

uint32_t farm_ring_extra(const farm_ring *ring, uint32_t region)
{
	return placed_of(ring, region).extra;
}

unsigned farm_ring_holders(const farm_ring *ring, uint32_t region,
                           uint32_t *out)
{
	struct placed w = placed_of(ring, region);
	unsigned n = ring->nrep;
	for (unsigned q = 0; q < n; q++)
		out[q] = w.rep[q];
	if (w.extra != FARM_RING_NO_EXTRA)
		out[n++] = w.extra;
	return n + succ_copy(ring, &w, out + n);
}

unsigned farm_ring_successors(const farm_ring *ring, uint32_t region,
                              uint32_t *out)
{
	struct placed w = placed_of(ring, region);
	return succ_copy(ring, &w, out);
}

unsigned farm_ring_nleaving(const farm_ring *ring)
{
	return ring ? ring->nleaving : 0;
}

uint32_t farm_ring_primary(const farm_ring *ring, uint32_t region)
{
	if (ring->npins) {
		const struct ring_pin *p = pin_of(ring, region);
		if (p)
			return p->rep[0];
	}
	const struct one_ring *R = &ring->rings[farm_ring_of(ring, region)];
	return R->reps[(size_t)succ(R, ring->npts, farm_ring_pos(region)) *
	               ring->nrep];
}

static bool usable(const farm_ring *ring, uint32_t id, uint32_t machine,
                   bool (*taken)(void *, uint32_t), void *ctx)
{
	if (id == 0 || id > 0xfffffffeu)
		return false;
	if (farm_ring_primary(ring, id) != machine || pin_of(ring, id))
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
