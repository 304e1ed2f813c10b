/*
 * Placement of one arc (ring_int.h): which machines hold the regions whose
 * hash lands in an arc, walked from the arc's end, with failure domains,
 * late machines, the grower's extra backup and a leaver's successors.
 */
#include "addrspace/ring_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"

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
		    farm_ring_in_set(L, nl, m) ||
		    domain_in(g, L, nl, walk_domain(g, m, ordinary), ordinary))
			continue;
		L[nl++] = m;
		ndom++;
	}
	for (unsigned s = 0; s < g->npts && nl < want; s++) {
		uint32_t m = R->pts[(i + s) % g->npts].idx;
		if (!unwalked(g, m, ordinary, drop_leaving) &&
		    !farm_ring_in_set(L, nl, m))
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
			    vanished(g, m, drop_leaving) ||
			    farm_ring_in_set(L, nl, m) ||
			    farm_ring_in_set(chosen, got, m) ||
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
		if (!farm_ring_in_set(chosen, got, g->late[q]) &&
		    !gone_for(g, g->late[q], drop_leaving))
			chosen[got++] = g->late[q];
	return got;
}

static int cmp_machine_id(const void *a, const void *b)
{
	uint32_t x = ((const struct farm_ring_machine *)a)->id,
	         y = ((const struct farm_ring_machine *)b)->id;
	return x < y ? -1 : x > y;
}

/* The index in g->all (by id) of machine id @id, or UINT32_MAX (not on
 * the rings). */
static uint32_t index_of(const farm_ring *g, uint32_t id)
{
	struct farm_ring_machine key = {.id = id};
	const struct farm_ring_machine *m =
	        g->nall ? bsearch(&key, g->all, g->nall, sizeof(key),
	                          cmp_machine_id)
	                : NULL;
	return m ? (uint32_t)(m - g->all) : UINT32_MAX;
}

/* Is a pin to machine index @m honored in this placement (ring.h,
 * farm_ring_set_pins): an ordinary member there, and no failure domains?
 * With domains, departed machines stay in the walk, so the ring's list
 * after the pinned machine departs is not the pinned list less it (a
 * backup of the pinned machine's domain would fall behind one it was
 * ahead of): pins would break the survivors' order recovery relies on. */
static bool pin_honored(const farm_ring *g, uint32_t m, uint32_t ordinary,
                        bool drop_leaving)
{
	return g->plain && m != UINT32_MAX && !gone_for(g, m, drop_leaving) &&
	       !late_for(g, m, ordinary) && !vanished(g, m, drop_leaving);
}

/* place_arc_as with the region pinned to machine index @pin (UINT32_MAX:
 * none): the pinned machine first where honored, then the ring's list
 * without it, cut to the replica count. */
static unsigned place_pinned_as(const farm_ring *g, const struct one_ring *R,
                                unsigned i, uint32_t ordinary,
                                bool drop_leaving, uint32_t pin,
                                uint32_t *chosen)
{
	unsigned got = place_arc_as(g, R, i, ordinary, drop_leaving, chosen);
	if (!pin_honored(g, pin, ordinary, drop_leaving))
		return got;
	unsigned at = 0;
	while (at < got && chosen[at] != pin)
		at++;
	if (at == got && got < g->nrep)
		got++; /* a short list: room for it */
	if (at == got)
		at = got - 1; /* not listed: the last makes room */
	memmove(&chosen[1], &chosen[0], at * sizeof(chosen[0]));
	chosen[0] = pin;
	return got;
}

/* Graceful leave: the arc's successors (ring.h) into @succ (g->nrep
 * slots, FARM_RING_NO_EXTRA after the last): the target's machines that
 * @chosen (@got replicas) lacks, in its order, while the holders have
 * room (@used of them so far). */
static void place_successors(const farm_ring *g, const struct one_ring *R,
                             unsigned i, uint32_t pin, const uint32_t *chosen,
                             unsigned got, unsigned used, uint32_t extra,
                             uint32_t *succ)
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
	unsigned nt = place_pinned_as(g, R, i, UINT32_MAX, true, pin, target);
	for (unsigned q = 0; q < nt && used + k < FARM_RING_MAX_REPLICAS; q++)
		if (!farm_ring_in_set(chosen, got, target[q]) &&
		    g->all[target[q]].id != extra)
			succ[k++] = g->all[target[q]].id;
}

/* The arc ending at point @i of ring @R, for a region pinned to machine
 * index @pin (UINT32_MAX: none): its replicas into @rep (ids, g->nrep of
 * them), its extra backup into *@extra (ring.h) and, while a member
 * leaves, its successors into @succ (g->nrep slots). */
static void place_arc_pinned(const farm_ring *g, const struct one_ring *R,
                             unsigned i, uint32_t pin, uint32_t *rep,
                             uint32_t *extra, uint32_t *succ)
{
	uint32_t chosen[FARM_RING_MAX_REPLICAS];
	unsigned got = place_pinned_as(g, R, i, UINT32_MAX, false, pin, chosen);
	for (unsigned q = 0; q < got; q++)
		rep[q] = g->all[chosen[q]].id;
	*extra = FARM_RING_NO_EXTRA;
	/* Growth: where the grower placed as an ordinary member would be a
	 * replica and is not one, it is an extra backup, after the others
	 * (so never promoted ahead of them). With room for it only. */
	if (g->grower != UINT32_MAX && got < FARM_RING_MAX_REPLICAS &&
	    !farm_ring_in_set(chosen, got, g->grower)) {
		uint32_t target[FARM_RING_MAX_REPLICAS];
		unsigned nt =
		        place_pinned_as(g, R, i, g->grower, false, pin, target);
		if (farm_ring_in_set(target, nt, g->grower))
			*extra = g->all[g->grower].id;
	}
	if (succ)
		place_successors(g, R, i, pin, chosen, got,
		                 got + (*extra != FARM_RING_NO_EXTRA), *extra,
		                 succ);
}

void farm_ring_place_arc(const farm_ring *g, const struct one_ring *R,
                         unsigned i, uint32_t *rep, uint32_t *extra)
{
	place_arc_pinned(g, R, i, UINT32_MAX, rep, extra,
	                 R->succ ? &R->succ[(size_t)i * g->nrep] : NULL);
}

void farm_ring_place_pinned(const farm_ring *g, const struct one_ring *R,
                            unsigned i, struct ring_pin *p)
{
	for (unsigned q = 0; q < FARM_RING_MAX_REPLICAS; q++)
		p->rep[q] = p->succ[q] = FARM_RING_NO_EXTRA;
	place_arc_pinned(g, R, i, index_of(g, p->machine), p->rep, &p->extra,
	                 g->nleaving ? p->succ : NULL);
}

uint32_t farm_ring_place_target_primary(const farm_ring *g,
                                        const struct one_ring *R, unsigned i,
                                        uint32_t pin)
{
	uint32_t chosen[FARM_RING_MAX_REPLICAS];
	uint32_t m = pin == FARM_RING_NO_EXTRA ? UINT32_MAX : index_of(g, pin);
	unsigned got = place_pinned_as(g, R, i, g->grower, false, m, chosen);
	return got ? g->all[chosen[0]].id : FARM_RING_NO_EXTRA;
}
