/*
 * The rings' internals, shared by their files (not installed): the layout
 * (ring.c: points, build and lookups), one arc's placement (ring_place.c)
 * and the incremental update (ring_update.c).
 */
#ifndef FARM_ADDRSPACE_RING_INT_H
#define FARM_ADDRSPACE_RING_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "addrspace/ring.h"

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
	/* Chosen placement (ring.h, farm_ring_set_pins): npins, by region,
	 * each with its lists placed once when set. */
	struct ring_pin *pins;
	unsigned npins;
};

/* One pinned region's placement (ring.h): what the arc arrays hold for
 * the regions of an arc, for this region alone. */
struct ring_pin {
	uint32_t region;
	uint32_t machine;
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	uint32_t extra;
	uint32_t succ[FARM_RING_MAX_REPLICAS]; /* FARM_RING_NO_EXTRA after */
};

/* Is machine index @m in @set[0..n)? */
static inline bool farm_ring_in_set(const uint32_t *set, unsigned n, uint32_t m)
{
	for (unsigned q = 0; q < n; q++)
		if (set[q] == m)
			return true;
	return false;
}

/* ring.c */
uint32_t farm_ring_point_pos(uint32_t machine, unsigned ring, unsigned point);
void farm_ring_sort_points(struct point *pts, struct point *tmp, unsigned n);
/* A ring for @ms with everything but the rings' points and arcs. */
int farm_ring_prepare(const struct farm_ring_machine *ms, unsigned n,
                      const struct farm_ring_attr *attr, farm_ring **out);
int farm_ring_alloc_one(const farm_ring *g, struct one_ring *R);
/* Ring @j: every machine's points in position order, then each arc's
 * replicas and extra backup. */
int farm_ring_place_one(farm_ring *g, unsigned j);

/* ring_place.c: the arc ending at point @i of ring @R of @g: its replicas into
 * @rep (ids, nrep) and its extra backup into *@extra (FARM_RING_NO_EXTRA:
 * none); a leaver's successors too while anyone leaves. */
void farm_ring_place_arc(const farm_ring *g, const struct one_ring *R,
                         unsigned i, uint32_t *rep, uint32_t *extra);
/* ring_place.c: pinned region @p (region and machine set) in the arc
 * ending at point @i of ring @R: its lists (ring.h, farm_ring_set_pins). */
void farm_ring_place_pinned(const farm_ring *g, const struct one_ring *R,
                            unsigned i, struct ring_pin *p);
/* ring_place.c: the primary of the arc ending at point @i of ring @R in
 * the grower's target, pinned to machine id @pin (FARM_RING_NO_EXTRA:
 * none). */
uint32_t farm_ring_place_target_primary(const farm_ring *g,
                                        const struct one_ring *R, unsigned i,
                                        uint32_t pin);

#endif
