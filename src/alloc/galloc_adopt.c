/*
 * Regions that change hands (galloc_int.h): a region promoted here is
 * adopted into the block allocator off the event loops, frees in it
 * deferred until then; a region this machine stops being primary of is
 * retired.
 */
#include "alloc/galloc_int.h"
#include "alloc/objhdr.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

/* ---- recovery: adopting promoted regions ------------------------------------
 *
 * A region promoted here (its primary failed; src/txn/recover.c) serves
 * reads and commits at once, but the block allocator does not know it. Its
 * copy's block table was kept by the replica (farm_alloc_copy_note, from
 * each new object's block description carried in COMMIT-BACKUP), so once
 * recovery has settled every transaction that could still write it, the
 * adopter thread rebuilds it by scan (farm_blockalloc_rebuild_region) off
 * the event loops. Frees of its objects meanwhile are deferred, the object
 * left locked by the caller, and done (then unlocked) right after the
 * rebuild, so none leaks and none is seen freed-but-allocated.
 */

/* Was region @id adopted here? (Counters only; the adopter is the only
 * writer of the list.) */
bool farm_galloc_in_adopted(farm_galloc *g, uint32_t id)
{
	/* Acquire: pairs with the release store of nadopted_ids in
	 * adopt_one (the ids below it are written). */
	unsigned n =
	        atomic_load_explicit(&g->nadopted_ids, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (g->adopted_ids[i] == id)
			return true;
	return false;
}

static struct adopt_region **adopt_find(farm_galloc *g, uint32_t id)
{
	struct adopt_region **pp = &g->adopting;
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* The version word of @a's header in this machine's copy of its region,
 * or NULL (no such copy, or outside it). */
static _Atomic uint64_t *version_word(farm_galloc *g, farm_gaddr a)
{
	farm_region *fr =
	        farm_as_local_region(g->as, farm_gaddr_region(a), NULL);
	uint64_t off = farm_gaddr_offset(a);
	if (!fr || off % FARM_ALLOC_LINE ||
	    off + FARM_OBJHDR_SIZE > farm_region_size(fr))
		return NULL;
	return (_Atomic uint64_t *)(void *)((char *)farm_region_base(fr) + off);
}

int farm_galloc_adopt_expect(farm_galloc *g, uint32_t region)
{
	if (!g)
		return -EINVAL;
	pthread_mutex_lock(&g->adopt_lock);
	int rc = 0;
	if (farm_alloc_region_is_local(g->ba, region)) {
		rc = 2; /* adopted already (an earlier recovery) */
	} else if (!*adopt_find(g, region)) {
		struct adopt_region *a = calloc(1, sizeof(*a));
		if (a) {
			*a = (struct adopt_region){.id = region,
			                           .next = g->adopting};
			g->adopting = a;
			rc = 1;
		} else {
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&g->adopt_lock);
	return rc;
}

/* Take region @id out of the adoption list with its deferred frees; under
 * adopt_lock. */
static struct deferred *adopt_take_locked(farm_galloc *g, uint32_t id)
{
	struct deferred *mine = NULL;
	struct adopt_region **pp = adopt_find(g, id);
	if (*pp) {
		struct adopt_region *a = *pp;
		*pp = a->next;
		free(a);
	}
	/* Adopted (published in the block allocator before this), or never
	 * to be: the allocations waiting for it try again. */
	farm_galloc_parked_release_locked(g);
	for (struct deferred **dp = &g->deferred; *dp;) {
		struct deferred *d = *dp;
		if (farm_gaddr_region(d->a) == id) {
			*dp = d->next;
			d->next = mine;
			mine = d;
		} else {
			dp = &d->next;
		}
	}
	return mine;
}

static struct deferred *adopt_take(farm_galloc *g, uint32_t id)
{
	pthread_mutex_lock(&g->adopt_lock);
	struct deferred *mine = adopt_take_locked(g, id);
	pthread_mutex_unlock(&g->adopt_lock);
	return mine;
}

void farm_galloc_adopt_cancel(farm_galloc *g, uint32_t region)
{
	if (!g)
		return;
	struct deferred *d = adopt_take(g, region);
	while (d) { /* none: the region never served here */
		struct deferred *n = d->next;
		free(d);
		d = n;
	}
}

/* The order before farm_slab_free_unlock (FARM_FP_ALLOC_MARK_FIRST, a
 * test's proof): the mark off, then the header freed and unlocked; a
 * kill in between leaves the object allocated and unmarked (a leak). */
static int free_mark_first(farm_galloc *g, farm_slab *slab, farm_gaddr a,
                           uint64_t then)
{
	_Atomic uint64_t *v = version_word(g, a);
	if (v)
		atomic_fetch_and_explicit(v, ~FARM_OBJHDR_FREE_PENDING,
		                          memory_order_relaxed);
	FARM_FAULT_POINT(FARM_FP_ALLOC_FREED_MARKED);
	int f = farm_slab_free(slab, a);
	/* The unlock, as farm_slab_free_unlock's: pairs with the acquire
	 * loads of the version word (farm_objhdr_load_version). */
	if (!f && v)
		atomic_store_explicit(v, then, memory_order_release);
	return f;
}

/* Rebuild the promoted region @fr (@r) in the block allocator, by its
 * file where it has one: most of a region is never written, and reading
 * that through the mapping had tmpfs clear (where not fallocated, also
 * allocate) each page, which took a core for 250-300 ms per 64 MiB right
 * after recovery, while the commits were to get their throughput back.
 * No object of it is allocated or freed until the rebuild is done (frees
 * deferred), as the file's reader requires. */
static int rebuild_live(farm_galloc *g, farm_region *fr,
                        const struct farm_alloc_region *r)
{
	int fd = farm_mem_open_file(farm_region_mem(fr));
	if (fd < 0)
		return farm_blockalloc_rebuild_region(g->ba, r);
	int rc = farm_blockalloc_rebuild_region_fd(g->ba, r, fd);
	close(fd);
	return rc;
}

/* Adopt one region; then its deferred frees, and unlock their objects. */
static void adopt_one(farm_galloc *g, farm_slab **slab, uint32_t id)
{
	enum farm_as_role role;
	farm_region *fr = farm_as_local_region(g->as, id, &role);
	struct farm_alloc_region r = {.id = id};
	int rc = -ENOENT;
	if (fr) { /* for the deferred frees' unlocks in any case */
		r.base = farm_region_base(fr);
		r.size = farm_region_size(fr);
	}
	if (fr && role == FARM_AS_PRIMARY) {
		if (!farm_alloc_copy_formatted(&r)) {
			/* No object was ever carried into it: not an
			 * allocator region (or an unused one). */
			atomic_fetch_add(&g->adopt_skipped, 1);
			rc = 1;
		} else {
			FARM_FAULT_POINT(FARM_FP_ALLOC_ADOPT_SLOW);
			uint64_t t0 = farm_now_ns();
			rc = rebuild_live(g, fr, &r);
			uint64_t dt = farm_now_ns() - t0;
			if (!rc) {
				atomic_fetch_add(&g->adopted, 1);
				unsigned k = atomic_load_explicit(
				        &g->nadopted_ids, memory_order_relaxed);
				if (k < ADOPTED_MAX) {
					g->adopted_ids[k] = id;
					/* Release: pairs with the acquire
					 * load in farm_galloc_in_adopted. */
					atomic_store_explicit(
					        &g->nadopted_ids, k + 1,
					        memory_order_release);
				}
				atomic_fetch_add(&g->adopt_ns, dt);
				uint64_t mx = atomic_load(&g->adopt_max_ns);
				while (dt > mx &&
				       !atomic_compare_exchange_weak(
				               &g->adopt_max_ns, &mx, dt))
					;
				farm_info("alloc: region %" PRIu32
				          " adopted (rebuilt by scan in "
				          "%.2f ms)",
				          id, dt / 1e6);
			}
		}
	}
	if (rc < 0) {
		atomic_fetch_add(&g->adopt_failed, 1);
		farm_warn("alloc: promoted region %" PRIu32
		          " not adopted: %s; its free space is not used",
		          id, farm_strerror(rc));
	}
	/* Published (if adopted) before adopt_take takes the lock, so a free
	 * that finds the region still unknown under the lock is ours. */
	struct deferred *d = adopt_take(g, id);
	if (d && !*slab && rc == 0 && farm_slab_create(g->ba, slab))
		*slab = NULL;
	while (d) {
		struct deferred *n = d->next;
		/* The header freed first, the mark and the lock off
		 * after (one store of @then), the slot reusable last
		 * (farm_slab_free_unlock): a kill before the free leaves
		 * the object marked and allocated (the restart frees it),
		 * one after it a freed header, still marked, that the
		 * restart only unlocks; and no next object of the slot
		 * gets the mark or this store. */
		uint64_t then = d->then & ~FARM_OBJHDR_FREE_PENDING;
		int f = rc ? rc : -ENOMEM; /* not adopted, or no slab */
		if (!rc && *slab)
			f = FARM_FAULT_SWITCH(FARM_FP_ALLOC_MARK_FIRST)
			            ? free_mark_first(g, *slab, d->a, then)
			            : farm_slab_free_unlock(*slab, d->a, then);
		/* Not freed: the object stays allocated (a leak, counted
		 * below), unmarked and unlocked, as a free that never
		 * came (release: pairs with the acquire loads of the
		 * version word, farm_objhdr_load_version). */
		_Atomic uint64_t *v = version_word(g, d->a);
		if (f && v)
			atomic_store_explicit(v, then, memory_order_release);
		/* Counted after (seq_cst, so a release): whoever reads the
		 * count sees the free and the unlock. */
		if (f) {
			atomic_fetch_add(&g->deferred_lost, 1);
			farm_warn("alloc: deferred free of %#" PRIx64
			          " in region %" PRIu32 ": %s (leaked)",
			          d->a, id, farm_strerror(f < 0 ? f : -ENOENT));
		} else {
			atomic_fetch_add(&g->deferred_freed, 1);
		}
		free(d);
		d = n;
	}
}

static void *adopter_main(void *arg)
{
	farm_galloc *g = arg;
	farm_slab *slab = NULL; /* for deferred frees, made when needed */
	/* Created on the membership's real-time worker (a view's recovery):
	 * a scan of a whole region at that priority held both cores of a
	 * 2-core host for hundreds of ms, and no transaction committed. */
	(void)farm_thread_set_normal();
	pthread_mutex_lock(&g->adopt_lock);
	for (;;) {
		struct adopt_region *a = g->adopting;
		while (a && !a->queued)
			a = a->next;
		if (!a) {
			if (g->adopt_stop)
				break;
			pthread_cond_wait(&g->adopt_cv, &g->adopt_lock);
			continue;
		}
		uint32_t id = a->id;
		a->queued = false; /* ours now: adopt_take removes it */
		a->taken = true;
		g->adopt_busy = id;
		pthread_mutex_unlock(&g->adopt_lock);
		adopt_one(g, &slab, id);
		pthread_mutex_lock(&g->adopt_lock);
		g->adopt_busy = 0; /* farm_galloc_retire may wait for it */
		/* Allocations parked since adopt_take released them saw it
		 * busy: they try again now (op_park). */
		farm_galloc_parked_release_locked(g);
		pthread_cond_broadcast(&g->adopt_done_cv);
	}
	pthread_mutex_unlock(&g->adopt_lock);
	farm_slab_destroy(slab);
	return NULL;
}

int farm_galloc_adopt(farm_galloc *g, uint32_t region)
{
	if (!g)
		return -EINVAL;
	int rc = farm_galloc_adopt_expect(g, region);
	if (rc < 0 || rc == 2)
		return rc < 0 ? rc : 0;
	if (FARM_FAULT_SWITCH(FARM_FP_ALLOC_ADOPT_HOLD))
		return 0; /* test-only: its frees stay deferred */
	pthread_mutex_lock(&g->adopt_lock);
	if (!g->adopter_up) {
		rc = pthread_create(&g->adopter, NULL, adopter_main, g);
		if (rc) {
			pthread_mutex_unlock(&g->adopt_lock);
			return -rc;
		}
		g->adopter_up = true;
	}
	struct adopt_region *a = *adopt_find(g, region);
	if (a && !a->taken) /* (gone: adopted since, by a racing call) */
		a->queued = true;
	pthread_cond_signal(&g->adopt_cv);
	pthread_mutex_unlock(&g->adopt_lock);
	return 0;
}

/*
 * The header of @a, a committed free's object in region @id, expected for
 * adoption and not yet scanned (under adopt_lock): freed now, in the
 * header alone (the allocator's CAS, src/alloc/README.md "Object
 * header"). The adopter's scan has not begun (it marks the region taken
 * under adopt_lock first) and will find the slot free and list it, as a
 * whole-cluster restart's rebuild will if a kill comes first: the header
 * is all the allocator keeps of a free across a kill, and the
 * COMMIT-BACKUP images the backups applied hold this word too, so the
 * copies agree. Kept whole until the adoption (the old way: the free done
 * after the rebuild, the object left locked meanwhile), a kill before it
 * left the slot allocated at the primary and freed at its backups (a
 * leak). Returns 0, -ENOENT (not allocated), or 1 (no such header here,
 * or not a primary's: the caller defers as before).
 */
static int free_header_early(farm_galloc *g, uint32_t id, farm_gaddr a)
{
	enum farm_as_role role;
	farm_region *fr = farm_as_local_region(g->as, id, &role);
	uint64_t off = farm_gaddr_offset(a);
	if (!fr || role != FARM_AS_PRIMARY || off % FARM_ALLOC_LINE ||
	    off + FARM_OBJHDR_SIZE > farm_region_size(fr))
		return 1;
	struct farm_objhdr *h = (void *)((char *)farm_region_base(fr) + off);
	uint64_t w = farm_objhdr_load_incarn(h);
	do {
		if (!farm_incarn_allocated(w))
			return -ENOENT;
		/* acq_rel: pairs with the acquire loads of the incarnation
		 * (farm_objhdr_load_incarn: readers, the adopter's scan), as
		 * the allocator's free (hdr_free, slab_int.h). */
	} while (!atomic_compare_exchange_weak_explicit(
	        &h->incarn, &w, farm_incarn_freed(w), memory_order_acq_rel,
	        memory_order_acquire));
	return 0;
}

/*
 * A free of @a deferred while the adopter scans its region (under
 * adopt_lock): its header stays allocated until the adopter frees it, and
 * the transaction's records may all be truncated by then, so a
 * whole-cluster restart meanwhile would find nothing saying the slot is
 * free (its backups applied the freed header: a leak, and copies that
 * disagree). The mark in the version word says it across the kill
 * (FARM_OBJHDR_FREE_PENDING): the restart frees the header of an object
 * it finds marked (src/txn/restart.c). The caller holds the object locked
 * exclusive, so no writer changes the word meanwhile; fetch_or keeps its
 * lock bits.
 */
static void mark_pending(farm_galloc *g, farm_gaddr a)
{
	_Atomic uint64_t *v = version_word(g, a);
	if (!v || FARM_FAULT_SWITCH(FARM_FP_ALLOC_NO_FREE_MARK))
		return;
	/* Relaxed: the adopter that clears it (adopt_one) takes the entry
	 * under adopt_lock, held here, which orders the two; readers see
	 * the object locked either way. */
	atomic_fetch_or_explicit(v, FARM_OBJHDR_FREE_PENDING,
	                         memory_order_relaxed);
}

/* Region @id is not local to the block allocator (under adopt_lock):
 * defer the free of @a (1), do it in its header now (2), or -EREMOTE. */
static int defer_locked(farm_galloc *g, uint32_t id, farm_gaddr a,
                        uint64_t then)
{
	struct adopt_region *ar = *adopt_find(g, id);
	if (!ar)
		return -EREMOTE;
	if (!ar->taken && !FARM_FAULT_SWITCH(FARM_FP_ALLOC_DEFER_WHOLE)) {
		int rc = free_header_early(g, id, a);
		if (rc < 0)
			return rc; /* the caller counts a free refused */
		if (rc == 0) {     /* counted deferred and done at once */
			atomic_fetch_add(&g->frees_deferred, 1);
			atomic_fetch_add(&g->deferred_freed, 1);
			return 2;
		}
	}
	struct deferred *d = malloc(sizeof(*d));
	if (!d)
		return -EREMOTE;
	*d = (struct deferred){.a = a, .then = then, .next = g->deferred};
	g->deferred = d;
	mark_pending(g, a);
	atomic_fetch_add(&g->frees_deferred, 1);
	return 1;
}

int farm_galloc_free_local_or_defer(farm_galloc *g, farm_loop *loop,
                                    farm_gaddr a, uint64_t then)
{
	if (!g || !loop)
		return -EINVAL;
	uint32_t id = farm_gaddr_region(a);
	if (!farm_alloc_region_is_local(g->ba, id)) {
		pthread_mutex_lock(&g->adopt_lock);
		if (!farm_alloc_region_is_local(g->ba, id)) {
			int rc = defer_locked(g, id, a, then);
			pthread_mutex_unlock(&g->adopt_lock);
			return rc;
		}
		pthread_mutex_unlock(&g->adopt_lock);
	}
	int rc = farm_galloc_free_local(g, loop, a);
	if (!rc && farm_galloc_in_adopted(g, id))
		atomic_fetch_add_explicit(&g->adopted_frees, 1,
		                          memory_order_relaxed);
	return rc;
}

/* ---- retiring a region ------------------------------------------------
 *
 * This machine stops being primary of a region (a new configuration moved
 * it): the new primary's allocator rebuilds it by scan and owns its free
 * slots, so ours must never hand one out again, nor write the memory, which
 * the caller is about to discard. The block allocator keeps the region as a
 * tombstone (farm_blockalloc_retire_region); here, the region is also taken
 * out of the pool and out of adoption.
 */
int farm_galloc_retire(farm_galloc *g, uint32_t region)
{
	if (!g || region == FARM_REGION_ID_NONE || region > FARM_REGION_ID_MAX)
		return -EINVAL;
	bool known = false;
	/* Adoption: wait for the adopter if it is on this region (its rebuild
	 * and deferred frees write the memory), else cancel an expectation. */
	struct deferred *d = NULL;
	pthread_mutex_lock(&g->adopt_lock);
	while (g->adopt_busy == region)
		pthread_cond_wait(&g->adopt_done_cv, &g->adopt_lock);
	if (*adopt_find(g, region)) { /* not taken: the adopter skips it */
		d = adopt_take_locked(g, region);
		known = true;
	}
	pthread_mutex_unlock(&g->adopt_lock);
	/* Its deferred frees are not done: the copy they would free in is
	 * discarded, and the new primary frees them in its own. */
	while (d) {
		struct deferred *n = d->next;
		atomic_fetch_add(&g->deferred_lost, 1);
		free(d);
		d = n;
	}
	/* The pool: a made but unused region is dropped. Wait for regions
	 * moving from the pool to the block allocator first. */
	pthread_mutex_lock(&g->lock);
	while (g->adding)
		pthread_cond_wait(&g->pool_cv, &g->lock);
	for (unsigned i = 0; i < g->npool;) {
		if (g->pool[i].r.id == region) {
			g->pool[i] = g->pool[--g->npool];
			known = true;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&g->lock);
	int rc = farm_blockalloc_retire_region(g->ba, region);
	if (rc && rc != -ENOENT)
		return rc;
	if (rc == 0)
		known = true;
	if (!known)
		return -ENOENT;
	atomic_fetch_add(&g->retired, 1);
	farm_info("alloc: region %" PRIu32 " retired (no longer primary here)",
	          region);
	return 0;
}
