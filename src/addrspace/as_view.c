/*
 * Installing a view (addrspace.h, farm_as_set_view*): the ring placed for
 * the new configuration goes in under the write lock, the previous ones
 * into the history; cached descriptors of remote regions are forgotten;
 * growth's give-ups (gives_up, below) take copies out of the table, kept
 * mapped in farm_as.given, and a demoted primary copy where this machine
 * stays a replica gets its new, filling backup copy in the same step
 * (premake, hold_premade). Also the copies given up since (farm_as_give_up)
 * and the accessors of demoted copies (farm_as_demoted_*). The table and
 * the rest of the machine's view are addrspace.c's (as_int.h).
 */
#include "addrspace/as_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/fault.h"
#include "util/log.h"

int farm_as_set_view(farm_as *as, uint64_t config_id, const uint32_t *ids,
                     unsigned n)
{
	if (!as || !ids || !n || n > FARM_RING_MAX_MACHINES)
		return -EINVAL;
	struct farm_ring_machine *ms = malloc(n * sizeof(*ms));
	if (!ms)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++)
		ms[i] = (struct farm_ring_machine){.id = ids[i]};
	int rc = farm_as_set_view_placed(as, config_id, ms, n);
	free(ms);
	return rc;
}

static bool gives_up(const farm_as *as, const struct entry *e);

/* Whether ring @g makes @me a replica of @region. */
static bool holds(const farm_ring *g, uint32_t region, uint32_t me)
{
	uint32_t h[FARM_RING_MAX_REPLICAS];
	unsigned n = g ? farm_ring_holders(g, region, h) : 0;
	for (unsigned i = 0; i < n; i++)
		if (h[i] == me)
			return true;
	return false;
}

/* Whether @me is a member (not departed) of the view @ms. */
static bool view_has(const struct farm_ring_machine *ms, unsigned n,
                     uint32_t me)
{
	for (unsigned i = 0; i < n; i++)
		if (ms[i].id == me && !ms[i].departed)
			return true;
	return false;
}

/* Install ring @g for @config_id under the write lock: the current ring
 * becomes the previous one, the previous one goes into the history.
 * Returns the ring that falls off the history's end (freed by the caller
 * once the lock is dropped), or NULL. */
static farm_ring *install_ring(farm_as *as, farm_ring *g, uint64_t config_id)
{
	farm_ring *old = NULL;
	if (as->prev) { /* into the history; its oldest goes */
		if (as->nhist == AS_RING_HISTORY) {
			old = as->hist[0].ring;
			memmove(&as->hist[0], &as->hist[1],
			        (AS_RING_HISTORY - 1) * sizeof(as->hist[0]));
			as->nhist--;
		}
		as->hist[as->nhist].cfg = as->prev_cfg;
		as->hist[as->nhist++].ring = as->prev;
	}
	as->prev = as->ring;
	as->prev_cfg =
	        atomic_load_explicit(&as->config_id, memory_order_relaxed);
	as->ring = g;
	/* Release: pairs with the acquire load in farm_as_config_id (a reader
	 * of the id sees the ring installed above). */
	atomic_store_explicit(&as->config_id, config_id, memory_order_release);
	return old;
}

/* A new backup copy made for a view before it is installed (premake). */
struct premade {
	uint32_t id;
	farm_region *r;
};

/* What a view change takes out of the table: the ids to delete, and the
 * copies growth moved away (kept mapped in as->given). */
struct view_sweep {
	uint32_t *drop;
	uint32_t ndrop;
	struct given_up *gave;
	unsigned ngave;
};

/* Entry @e is a copy growth moved away: note it given up and dropped.
 * Without memory for the note the entry stays (as if kept). */
static void sweep_give_up(farm_as *as, struct entry *e, struct view_sweep *w)
{
	if (!w->gave)
		w->gave = malloc(sizeof(*w->gave) * as->cap);
	if (!w->gave)
		return;
	bool prim = e->kind == E_PRIMARY;
	w->gave[w->ngave++] = (struct given_up){
	        .id = e->id,
	        .primary = prim,
	        .source = prim && holds(as->ring, e->id, as->me),
	        .r = e->local};
	w->drop[w->ndrop++] = e->id;
}

/* Primaries may have moved: forget every cached descriptor (a removed
 * machine's memory must not be read again; lookups ask the new
 * primaries). The lock bumped the generation, so resolve caches drop
 * theirs too. Under the write lock, with the new ring in place. */
static void sweep_entries(farm_as *as, struct view_sweep *w)
{
	w->drop = as->prev ? malloc(sizeof(*w->drop) * as->cap) : NULL;
	/* A demoted copy is a source for data recovery only while this
	 * machine stayed a replica since: one that was not missed commits. */
	for (unsigned i = 0; i < as->ngiven; i++)
		if (as->given[i].source &&
		    !holds(as->ring, as->given[i].id, as->me))
			as->given[i].source = false;
	for (uint32_t i = 0; as->prev && i < as->cap; i++) {
		struct entry *e = &as->tab[i];
		if (e->id && (e->kind == E_PRIMARY || e->kind == E_BACKUP) &&
		    w->drop && gives_up(as, e))
			sweep_give_up(as, e, w);
		else if (e->id && e->kind == E_BACKUP)
			e->desc.len = 0;
		else if (e->id && e->kind == E_REMOTE && w->drop)
			w->drop[w->ndrop++] = e->id;
		else if (e->id && e->kind == E_REMOTE)
			e->desc.len = 0; /* no memory: keep, but unusable */
	}
	for (uint32_t i = 0; i < w->ndrop; i++)
		farm_as_del(as, w->drop[i]);
}

/* Append the given-up copies of @w to as->given and count them. Under
 * the write lock. */
static void keep_given(farm_as *as, const struct view_sweep *w)
{
	if (w->ngave && as->ngiven + w->ngave > as->given_cap) {
		unsigned nc = as->given_cap ? as->given_cap : 16;
		while (nc < as->ngiven + w->ngave)
			nc *= 2;
		struct given_up *nv = realloc(as->given, nc * sizeof(*nv));
		if (nv) {
			as->given = nv;
			as->given_cap = nc;
		}
	}
	for (unsigned i = 0; i < w->ngave; i++) {
		if (as->ngiven < as->given_cap)
			as->given[as->ngiven++] = w->gave[i];
		/* else: out of memory for the list; the region leaks mapped
		 * (never destroyed under a reader). */
		if (w->gave[i].primary)
			as->demoted++;
		else
			as->displaced++;
	}
}

/* Say each given-up copy of @w and tell the local listener. Called
 * after the write lock is dropped, as every call of the listener is. */
static void announce_given(farm_as *as, const struct view_sweep *w,
                           uint64_t config_id)
{
	for (unsigned i = 0; i < w->ngave; i++) {
		const struct given_up *gu = &w->gave[i];
		farm_info("addrspace: machine %" PRIu32 " gives up its %s copy "
		          "of region %" PRIu32 " in configuration %" PRIu64
		          " (growth: %s)",
		          as->me, gu->primary ? "primary" : "backup", gu->id,
		          config_id,
		          gu->primary ? "the grower is its primary now"
		                      : "no longer a replica");
		tell_local(as, gu->id, gu->r, false);
	}
}

int farm_as_place(farm_as *as, const struct farm_ring_machine *ms, unsigned n,
                  farm_ring **out)
{
	if (!as || !ms || !n || !out)
		return -EINVAL;
	/* From the rings in force: views are applied one at a time, so
	 * the next one differs from them by a join or a leave, most often,
	 * which an update places in a fraction of a build's time. Read
	 * lock: pairs with install_ring's write lock (the rings stay). */
	pthread_rwlock_rdlock(&as->lock);
	int rc = farm_ring_update(as->ring, ms, n, &as->ring_attr, out);
	pthread_rwlock_unlock(&as->lock);
	return rc;
}

/*
 * The new backup copies of the regions that ring @g demotes here (our
 * primary copy, another machine primary in @g, this machine still a
 * replica), made before the view is installed (farm_region_create takes
 * milliseconds a region, too long under the write lock): the view puts
 * each in place of the copy it demotes, in the same step, so that the
 * region is never without a copy here (hold_premade). Returns how many,
 * in *out (the caller frees the array and any region left in it).
 */
static unsigned premake(farm_as *as, const farm_ring *g, struct premade **out)
{
	*out = NULL;
	if (FARM_FAULT_SWITCH(FARM_FP_AS_DEMOTED_OPEN_LATE) ||
	    FARM_FAULT_SWITCH(FARM_FP_AS_NO_DEMOTE))
		return 0;
	unsigned n = 0;
	pthread_rwlock_rdlock(&as->lock);
	struct premade *pm = as->ring ? malloc(sizeof(*pm) * as->cap) : NULL;
	for (uint32_t i = 0; pm && i < as->cap; i++) {
		const struct entry *e = &as->tab[i];
		uint32_t h[FARM_RING_MAX_REPLICAS];
		unsigned nh = e->id && e->kind == E_PRIMARY
		                      ? farm_ring_holders(g, e->id, h)
		                      : 0;
		if (nh && h[0] != as->me && holds(g, e->id, as->me))
			pm[n++] = (struct premade){.id = e->id};
	}
	pthread_rwlock_unlock(&as->lock);
	for (unsigned i = 0; i < n; i++)
		if (farm_region_create(as->fab, as->region_size, &pm[i].r))
			pm[i].r = NULL; /* none: filled from the primary */
	*out = pm;
	return n;
}

/*
 * Each copy the sweep @w demoted that may be a source for this machine's
 * new copy (given_up.source) gets that new copy at once, a filling backup
 * made by premake. Why at once: the new copy is filled from the demoted
 * one, which gets no commit of this view, so every such commit must reach
 * the new copy as a COMMIT-BACKUP; one truncated here while the region
 * had no copy was not applied (participant.c) and was missing for good,
 * the check comparing with the demoted copy too (the copies differed at
 * the campaign's comparison). Without a new copy (no memory) the demoted
 * one is no source: the copy is READ from the new primary, which is safe
 * whenever it is opened (copy.c). Under the write lock, after the sweep.
 */
static void hold_premade(farm_as *as, const struct view_sweep *w,
                         struct premade *pm, unsigned npm)
{
	bool late = FARM_FAULT_SWITCH(FARM_FP_AS_DEMOTED_OPEN_LATE);
	for (unsigned i = 0; i < w->ngave; i++) {
		struct given_up *gu = &w->gave[i];
		if (!gu->primary || !gu->source)
			continue;
		struct premade *p = NULL;
		for (unsigned k = 0; k < npm && !p; k++)
			if (pm[k].id == gu->id && pm[k].r)
				p = &pm[k];
		struct entry ne = {.id = gu->id,
		                   .kind = E_BACKUP,
		                   .filling = true,
		                   .local = p ? p->r : NULL};
		if (p && !farm_as_put(as, &ne))
			p->r = NULL; /* the table's now */
		else if (!late)
			gu->source = false;
	}
}

int farm_as_set_view_ring(farm_as *as, uint64_t config_id,
                          const struct farm_ring_machine *ms, unsigned n,
                          farm_ring *g)
{
	if (!as || !ms || !n || !g || !view_has(ms, n, as->me)) {
		farm_ring_free(g);
		return -EINVAL;
	}
	struct premade *pm;
	unsigned npm = premake(as, g, &pm);
	int rc = 0;
	as_wrlock(as);
	if (as->ring &&
	    config_id <= atomic_load_explicit(&as->config_id,
	                                      memory_order_relaxed)) {
		pthread_rwlock_unlock(&as->lock);
		farm_ring_free(g);
		rc = -ESTALE;
		goto out;
	}
	farm_ring *old = install_ring(as, g, config_id);
	struct view_sweep w = {0};
	sweep_entries(as, &w);
	hold_premade(as, &w, pm, npm);
	keep_given(as, &w);
	pthread_rwlock_unlock(&as->lock);
	announce_given(as, &w, config_id);
	free(w.gave);
	free(w.drop);
	farm_ring_free(old);
out:
	for (unsigned i = 0; i < npm; i++)
		if (pm[i].r)
			farm_region_destroy(pm[i].r);
	free(pm);
	return rc;
}

int farm_as_set_view_placed(farm_as *as, uint64_t config_id,
                            const struct farm_ring_machine *ms, unsigned n)
{
	if (!as || !ms || !n)
		return -EINVAL;
	if (!view_has(ms, n, as->me))
		return -EINVAL;
	farm_ring *g;
	int rc = farm_as_place(as, ms, n, &g);
	return rc ? rc : farm_as_set_view_ring(as, config_id, ms, n, g);
}

/*
 * Growth (ring.h): a view that takes a machine out of the late list places
 * it as an ordinary member, so in the regions of its share it becomes a
 * replica, the primary of some, and the replica it displaces (the last, or
 * the one of its failure domain) is no longer one. Called under the write
 * lock with the new ring in place, for a copy this machine holds:
 *  - our primary copy of a region whose primary is now another machine:
 *    demoted. The new primary's copy is complete (the grower's extra
 *    copy, filled by data recovery and checked, with every COMMIT-BACKUP
 *    since), and recovery promotes it with the locks of the transactions
 *    still undecided. Ours stops being the primary copy at once (no new
 *    LOCK, lookup or local access reaches it), but stays mapped for the
 *    older configuration's work: its transactions' installs and unlocks
 *    (farm_as_demoted_ptr) and readers that resolved it before this view
 *    (the transaction layer's reads check the configuration after the
 *    copy). If this machine is a backup in the new view, the view puts a
 *    fresh, filling copy in its place at once (hold_premade: every
 *    COMMIT-BACKUP of the view finds it), which data recovery fills from
 *    the demoted copy (farm_as_demoted_source); the demoted copy itself
 *    holds locks of the old configuration's transactions and lacks the
 *    new one's commits, so it is never taken for a replica;
 *  - a backup copy, complete or still filling, of a region this machine
 *    is no longer a replica of: displaced, forgotten. A filling one is
 *    displaced when the handoff comes before data recovery completed it
 *    (its copy stops, copy.c); kept, it would be held with stale bytes
 *    for good, and a later view that made this machine a backup again
 *    would fill it over them: objects in blocks freed since, which a copy
 *    skips, would stay there. Forgotten, a later copy starts from fresh,
 *    zeroed memory.
 * Not for the first view, nor while the test-only switch
 * FARM_FP_AS_NO_DEMOTE is hooked (two primaries: test_datarec
 * --broken-handoff); FARM_FP_AS_KEEP_FILLING keeps filling copies.
 */
static bool gives_up(const farm_as *as, const struct entry *e)
{
	if (FARM_FAULT_SWITCH(FARM_FP_AS_NO_DEMOTE))
		return false;
	uint32_t h[FARM_RING_MAX_REPLICAS];
	unsigned n = farm_ring_holders(as->ring, e->id, h);
	if (!n)
		return false;
	if (e->kind == E_PRIMARY)
		return h[0] != as->me;
	if (e->filling && FARM_FAULT_SWITCH(FARM_FP_AS_KEEP_FILLING))
		return false;
	for (unsigned i = 0; i < n; i++)
		if (h[i] == as->me)
			return false;
	return true;
}

int farm_as_give_up(farm_as *as, uint32_t region)
{
	if (!as || !region)
		return -EINVAL;
	farm_region *r = NULL;
	as_wrlock(as);
	struct entry *e = farm_as_find(as, region);
	/* Only a complete copy whose region another machine is primary of
	 * now: a filling one has no recovered locks, and where the ring
	 * still makes us primary the promotion is to come. */
	if (e && (e->kind != E_BACKUP || e->filling || !as->ring ||
	          farm_ring_primary(as->ring, region) == as->me))
		e = NULL;
	if (e && as->ngiven == as->given_cap) {
		unsigned nc = as->given_cap ? 2 * as->given_cap : 16;
		struct given_up *nv = realloc(as->given, nc * sizeof(*nv));
		if (nv) {
			as->given = nv;
			as->given_cap = nc;
		}
	}
	if (e && as->ngiven < as->given_cap) {
		r = e->local;
		as->given[as->ngiven++] = (struct given_up){
		        .id = region, .primary = false, .r = r};
		as->displaced++;
		farm_as_del(as, region);
	}
	pthread_rwlock_unlock(&as->lock);
	if (!r)
		return -ENOENT;
	farm_warn("addrspace: machine %" PRIu32 " gives up its copy of region "
	          "%" PRIu32 " (it holds recovered locks of a promotion a "
	          "later view moved elsewhere); a new copy is made",
	          as->me, region);
	tell_local(as, region, r, false);
	return 0;
}

void *farm_as_demoted_ptr(farm_as *as, farm_gaddr a, uint64_t len)
{
	if (!as || !farm_gaddr_valid(a, len, as->region_size))
		return NULL;
	uint32_t id = farm_gaddr_region(a);
	void *p = NULL;
	pthread_rwlock_rdlock(&as->lock);
	for (unsigned i = as->ngiven; i > 0 && !p; i--)
		if (as->given[i - 1].id == id && as->given[i - 1].primary)
			p = (uint8_t *)farm_region_base(as->given[i - 1].r) +
			    farm_gaddr_offset(a);
	pthread_rwlock_unlock(&as->lock);
	return p;
}

const void *farm_as_demoted_source(farm_as *as, uint32_t region)
{
	if (!as || !region || FARM_FAULT_SWITCH(FARM_FP_AS_NO_DEMOTED_SOURCE))
		return NULL;
	const void *p = NULL;
	pthread_rwlock_rdlock(&as->lock);
	struct entry *e = farm_as_find(as, region);
	if (e && e->kind == E_BACKUP && e->filling)
		for (unsigned i = as->ngiven; i > 0; i--) {
			const struct given_up *g = &as->given[i - 1];
			if (g->id != region || !g->primary)
				continue;
			if (g->source)
				p = farm_region_base(g->r);
			break; /* the newest demoted copy, or none */
		}
	pthread_rwlock_unlock(&as->lock);
	return p;
}

unsigned farm_as_demoted_sources(farm_as *as, uint32_t *out, unsigned max)
{
	unsigned n = 0;
	if (!as || !out)
		return 0;
	pthread_rwlock_rdlock(&as->lock);
	for (unsigned i = 0; i < as->ngiven; i++)
		if (as->given[i].source) {
			if (n < max)
				out[n] = as->given[i].id;
			n++;
		}
	pthread_rwlock_unlock(&as->lock);
	return n;
}
