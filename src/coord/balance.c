/*
 * The manager's chosen placement (membership.h, farm_view.pins; ring.h,
 * farm_ring_set_pins): which machine is primary of each *balanced*
 * region, so that every machine serves an even share of them, where the
 * rings alone give a random one (src/kv/README.md measures it). FaRM's
 * configuration manager places regions knowing the machines; this is
 * that choice, made where growth moves regions anyway, with the moves
 * growth already makes safe: a pin to the grower makes it the region's
 * extra backup (its copy filled as any of its target's) and, once it
 * grows, its primary; a pin to the region's primary in force moves
 * nothing. So every move goes through growth's copy-then-promote
 * handoff, and no region changes primary between two machines that
 * both live outside of it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coord/membership.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_pin(const void *a, const void *b)
{
	const struct farm_ring_pin *x = a, *y = b;
	return x->region < y->region ? -1 : x->region > y->region;
}

/* Pins of machines that are not members of @x go: placement ignores
 * them already (the ring's list), so dropping one moves nothing, and a
 * later holder of the id must not inherit them. */
static void drop_departed(struct farm_view *x)
{
	unsigned k = 0;
	for (unsigned i = 0; i < x->npins; i++)
		if (farm_view_find(x, x->pins[i].machine))
			x->pins[k++] = x->pins[i];
	x->npins = k;
}

/* Pin @region to @machine in @x (replacing its pin). false: no room. */
static bool pin_set(struct farm_view *x, uint32_t region, uint32_t machine)
{
	for (unsigned i = 0; i < x->npins; i++)
		if (x->pins[i].region == region) {
			x->pins[i].machine = machine;
			return true;
		}
	if (x->npins == FARM_VIEW_MAX_PINS)
		return false;
	x->pins[x->npins++] =
	        (struct farm_ring_pin){.region = region, .machine = machine};
	return true;
}

/* The balancing proper, on @g (@x's rings with its pins): @tp[i] is
 * region @rg[i]'s primary in the grower's target. */
struct bal {
	struct farm_view *x;
	const farm_ring *g;
	uint32_t grower;
	unsigned nr;
	uint32_t *rg, *tp;
	unsigned count[FARM_VIEW_MAX]; /* by member index in x */
	bool in_play[FARM_VIEW_MAX];   /* ordinary members and the grower */
};

static unsigned member_index(const struct farm_view *x, uint32_t id)
{
	const struct farm_member *mb = farm_view_find(x, id);
	return mb ? (unsigned)(mb - x->members) : UINT32_MAX;
}

/* Step 1: a region the rings would hand the grower stays with its
 * primary in force (pinned there), so the grower's share is chosen, not
 * drawn. */
static bool keep_ring_moves(struct bal *b)
{
	for (unsigned i = 0; i < b->nr; i++) {
		if (b->tp[i] != b->grower ||
		    farm_ring_pinned(b->g, b->rg[i]) == b->grower)
			continue;
		uint32_t p = farm_ring_primary(b->g, b->rg[i]);
		unsigned pi = member_index(b->x, p);
		if (p == b->grower || pi == UINT32_MAX || !b->in_play[pi])
			continue;
		if (!pin_set(b->x, b->rg[i], p))
			return false;
		b->tp[i] = p;
	}
	return true;
}

/* Step 2: while the most loaded machine (the lowest id among equals)
 * has two more than the grower, its lowest region moves to the grower. */
static bool fill_grower(struct bal *b)
{
	unsigned gi = member_index(b->x, b->grower);
	for (;;) {
		unsigned h = UINT32_MAX;
		for (unsigned m = 0; m < b->x->n; m++)
			if (b->in_play[m] && m != gi &&
			    (h == UINT32_MAX || b->count[m] > b->count[h]))
				h = m;
		if (h == UINT32_MAX || b->count[h] <= b->count[gi] + 1)
			return true;
		uint32_t hid = b->x->members[h].id;
		unsigned i = 0;
		while (i < b->nr && b->tp[i] != hid)
			i++;
		if (i == b->nr)
			return true; /* cannot be: count[h] > 0 */
		if (!pin_set(b->x, b->rg[i], b->grower))
			return false;
		b->tp[i] = b->grower;
		b->count[h]--;
		b->count[gi]++;
	}
}

static int balance_on(struct bal *b)
{
	for (unsigned m = 0; m < b->x->n; m++) {
		uint32_t id = b->x->members[m].id;
		b->in_play[m] = id == b->grower ||
		                !farm_ids_have(b->x->late, b->x->nlate, id);
	}
	for (unsigned i = 0; i < b->nr; i++)
		b->tp[i] = farm_ring_target_primary(b->g, b->rg[i]);
	bool room = keep_ring_moves(b);
	for (unsigned i = 0; i < b->nr; i++) {
		unsigned m = member_index(b->x, b->tp[i]);
		if (m != UINT32_MAX && b->in_play[m])
			b->count[m]++;
	}
	room = room && fill_grower(b);
	qsort(b->x->pins, b->x->npins, sizeof(b->x->pins[0]), cmp_pin);
	if (!room)
		farm_warn("membership: more than %u regions to place: the "
		          "rest stay where the rings put them",
		          FARM_VIEW_MAX_PINS);
	return room ? 0 : -ENOSPC;
}

int farm_view_balance(struct farm_view *x, const struct farm_ring_attr *attr,
                      const uint32_t *regions, unsigned n)
{
	if (!x || (n && !regions))
		return -EINVAL;
	drop_departed(x);
	if (!n || !x->n || !x->nlate || FARM_FAULT_SWITCH(FARM_FP_BALANCE_OFF))
		return 0;
	uint32_t ids[FARM_VIEW_MAX];
	for (unsigned i = 0; i < x->n; i++)
		ids[i] = x->members[i].id;
	struct farm_ring_machine *placed =
	        malloc(2 * FARM_VIEW_MAX * sizeof(*placed));
	struct bal *b = calloc(1, sizeof(*b));
	uint32_t *rg = malloc((size_t)n * 2 * sizeof(*rg));
	farm_ring *g = NULL;
	int rc = placed && b && rg ? 0 : -ENOMEM;
	if (!rc)
		rc = farm_ring_build_domains(
		        placed, farm_view_placement(x, ids, x->n, placed), attr,
		        &g);
	if (!rc)
		rc = farm_ring_set_pins(g, x->pins, x->npins);
	/* With failure domains pins are ignored (ring.h): none made. */
	if (!rc && farm_ring_grower(g) != FARM_RING_NO_EXTRA &&
	    !farm_ring_has_domains(g)) {
		memcpy(rg, regions, n * sizeof(*rg));
		qsort(rg, n, sizeof(*rg), cmp_u32);
		unsigned k = 0;
		for (unsigned i = 0; i < n; i++)
			if (rg[i] && (!k || rg[k - 1] != rg[i]))
				rg[k++] = rg[i];
		*b = (struct bal){.x = x,
		                  .g = g,
		                  .grower = farm_ring_grower(g),
		                  .nr = k,
		                  .rg = rg,
		                  .tp = rg + n};
		rc = balance_on(b);
	}
	farm_ring_free(g);
	free(rg);
	free(b);
	free(placed);
	return rc;
}
