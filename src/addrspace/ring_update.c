/*
 * Incremental update of the rings (farm_ring_update): a configuration
 * that adds or removes a few machines reuses the previous rings' points
 * and the replicas of every arc whose walk passes no changed machine.
 */
#include "addrspace/ring_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"

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
		if (!g->all[m].late && !farm_ring_in_set(seen, nseen, m))
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
			        .pos = farm_ring_point_pos(g->all[m].id, j, i),
			        .machine = g->all[m].id,
			        .idx = m};
	farm_ring_sort_points(add, tmp, x);
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
	int rc = oldat && dirty && odirty ? farm_ring_alloc_one(g, R) : -ENOMEM;
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
			farm_ring_place_arc(g, R, x,
			                    &R->reps[(size_t)x * g->nrep],
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
	int rc = farm_ring_prepare(ms, n, attr, &g);
	if (rc)
		return rc;
	rc = -EAGAIN;
	if (prev && ring_updatable(prev, g))
		rc = ring_update_rings(prev, g);
	if (rc == -EAGAIN) {
		rc = 0;
		for (unsigned j = 0; !rc && j < g->k; j++)
			rc = farm_ring_place_one(g, j);
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

/* The same pins (ring.h, farm_ring_set_pins), region by region. */
static bool pins_same(const farm_ring *a, const farm_ring *b)
{
	if (a->npins != b->npins)
		return false;
	for (unsigned q = 0; q < a->npins; q++)
		if (a->pins[q].region != b->pins[q].region ||
		    a->pins[q].machine != b->pins[q].machine)
			return false;
	return true;
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
	return pins_same(a, b);
}
