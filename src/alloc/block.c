/*
 * The machine-wide block allocator: regions, their block tables, and the
 * runs of 1 MiB blocks that slabs and arrays take (FaRM NSDI'14 3.3).
 *
 * Every change to a block table happens under ba->lock; words are written
 * with atomic release stores so a concurrent scanner (a replica, a remote
 * READ) sees whole words. In a run, continuation words are written before
 * the head word, so a head is never seen without its continuations.
 * Regions are only added while the allocator lives; the id lookup table and
 * the region array are published with release stores and read lock-free.
 * A retired region (farm_blockalloc_retire_region) stays in both as a
 * tombstone that every lookup and walk skips.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_int.h"
#include "util/config.h"
#include "util/log.h"

_Static_assert(FARM_CONFIG_MIN_REGION_SIZE == FARM_ALLOC_MIN_REGION,
               "a configured region_size the allocator refuses would fail "
               "every allocation instead of the configuration");

/* A region's slab-block metadata (one per run, covering len_mb entries). */
void farm_ba_free_metas(struct ba_region *r)
{
	for (uint32_t b = 0; b < r->nblocks;) {
		struct farm_block *m =
		        atomic_load_explicit(&r->meta[b], memory_order_relaxed);
		if (m && m->bidx == b) {
			b += m->len_mb;
			free(m);
		} else {
			b++;
		}
	}
	free(r->meta);
	free(r);
}

int farm_blockalloc_create(const struct farm_blockalloc_attr *a,
                           farm_blockalloc **out)
{
	if (!out)
		return -EINVAL;
	size_t sz = (sizeof(struct farm_blockalloc) + FARM_CL - 1) / FARM_CL *
	            FARM_CL;
	farm_blockalloc *ba =
	        aligned_alloc(FARM_CL, sz); /* region_gen's line */
	if (!ba)
		return -ENOMEM;
	memset(ba, 0, sizeof(*ba));
	if (pthread_mutex_init(&ba->lock, NULL)) {
		free(ba);
		return -ENOMEM;
	}
	if (pthread_cond_init(&ba->idle_cv, NULL)) {
		pthread_mutex_destroy(&ba->lock);
		free(ba);
		return -ENOMEM;
	}
	ba->retire_gen = 1;
	if (a) {
		ba->new_region = a->new_region;
		ba->ctx = a->ctx;
	}
	(void)farm_alloc_line_cls_table(); /* build the class table now */
	*out = ba;
	return 0;
}

void farm_blockalloc_destroy(farm_blockalloc *ba)
{
	if (!ba)
		return;
	/* Acquire: pairs with the release store of nregions in
	 * farm_ba_region_publish (the regions[] entries below it are written).
	 */
	uint32_t n = atomic_load_explicit(&ba->nregions, memory_order_acquire);
	for (uint32_t i = 0; i < n; i++) {
		struct ba_region *r = ba->regions[i];
		farm_ba_free_metas(r);
	}
	for (uint32_t i = 0; i < ba->nslabs; i++) {
		for (int c = 0; c < FARM_ALLOC_NCLASSES; c++)
			free(ba->slabs[i]->cls[c].blocks);
		free(ba->slabs[i]);
	}
	free(ba->slabs);
	while (ba->retired) {
		struct ba_retired *x = ba->retired;
		ba->retired = x->next;
		free(x);
	}
	pthread_cond_destroy(&ba->idle_cv);
	pthread_mutex_destroy(&ba->lock);
	free(ba);
}

int farm_ba_check_region_arg(farm_blockalloc *ba,
                             const struct farm_alloc_region *r)
{
	if (!r || !r->base || r->id == FARM_REGION_ID_NONE ||
	    r->id > FARM_REGION_ID_MAX || !farm_is_pow2(r->size) ||
	    r->size < FARM_ALLOC_MIN_REGION ||
	    r->size > FARM_ALLOC_MAX_REGION ||
	    ((uintptr_t)r->base & (FARM_ALLOC_LINE - 1)))
		return -EINVAL;
	if (ba_lookup(ba, r->id))
		return -EEXIST;
	if (atomic_load_explicit(&ba->nregions, memory_order_relaxed) >=
	    FARM_ALLOC_MAX_REGIONS)
		return -EMFILE;
	return 0;
}

struct ba_region *farm_ba_region_new(const struct farm_alloc_region *ar)
{
	struct ba_region *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->id = ar->id;
	r->base = ar->base;
	r->size = ar->size;
	r->nblocks = (uint32_t)(ar->size / FARM_ALLOC_BLOCK);
	r->table = (_Atomic uint64_t *)(r->base + RHDR_TABLE_OFF);
	r->meta = calloc(r->nblocks, sizeof(*r->meta));
	r->scan_from = 1;
	if (!r->meta) {
		free(r);
		return NULL;
	}
	return r;
}

/* Publish @r: lookup table, then the region array (release: pairs with the
 * acquire loads in ba_lookup() and the region walks). */
void farm_ba_region_publish(farm_blockalloc *ba, struct ba_region *r)
{
	uint32_t i = (r->id * 0x9e3779b1u) >> (32 - RTAB_BITS);
	while (atomic_load_explicit(&ba->rtab[i], memory_order_relaxed))
		i = (i + 1) & (RTAB_SIZE - 1);
	atomic_store_explicit(&ba->rtab[i], r, memory_order_release);
	uint32_t n = atomic_load_explicit(&ba->nregions, memory_order_relaxed);
	ba->regions[n] = r;
	/* Pairs with the acquire loads of nregions in the region walks
	 * (farm_alloc_gaddr_of, farm_blockalloc_destroy, farm_blockalloc_dump
	 * in block_dump.c). */
	atomic_store_explicit(&ba->nregions, n + 1, memory_order_release);
	ba->blocks_total += r->nblocks;
	if (!ba->cur_region)
		ba->cur_region = r;
}

static int add_region_locked(farm_blockalloc *ba,
                             const struct farm_alloc_region *ar,
                             struct ba_region **out)
{
	int rc = farm_ba_check_region_arg(ba, ar);
	if (rc)
		return rc;
	/* The header and table must be untouched memory. */
	uint64_t nb = ar->size / FARM_ALLOC_BLOCK;
	const uint64_t *w = ar->base;
	for (uint64_t i = 0; i < RHDR_TABLE_OFF / 8 + nb; i++)
		if (w[i])
			return FARM_ECORRUPT;
	struct ba_region *r = farm_ba_region_new(ar);
	if (!r)
		return -ENOMEM;
	struct farm_alloc_rhdr *h = ar->base;
	h->region_id = r->id;
	h->nblocks = r->nblocks;
	h->table_off = RHDR_TABLE_OFF;
	h->layout = 1;
	/* Release, the magic last: pairs with the acquire loads of the table
	 * in farm_alloc_walk and of the magic in farm_alloc_copy_formatted
	 * (a reader of the region's bytes that sees the magic sees the
	 * header and table word 0 written above). */
	atomic_store_explicit(&r->table[0], bt_table(1), memory_order_release);
	atomic_store_explicit((_Atomic uint64_t *)&h->magic, FARM_ALLOC_MAGIC,
	                      memory_order_release);
	farm_ba_region_publish(ba, r);
	ba->blocks_in_use++;
	if (out)
		*out = r;
	return 0;
}

int farm_blockalloc_add_region(farm_blockalloc *ba,
                               const struct farm_alloc_region *r)
{
	if (!ba)
		return -EINVAL;
	pthread_mutex_lock(&ba->lock);
	int rc = add_region_locked(ba, r, NULL);
	pthread_mutex_unlock(&ba->lock);
	return rc;
}

int farm_ba_grow_locked(farm_blockalloc *ba, uint32_t near,
                        struct ba_region **out)
{
	if (!ba->new_region)
		return -ENOMEM;
	struct farm_alloc_region ar = {0};
	int rc = ba->new_region(ba->ctx, near, &ar);
	if (rc)
		return rc < 0 ? rc : -ENOMEM;
	return add_region_locked(ba, &ar, out);
}

/* First fit: @nmb free blocks in a row in @r. */
int farm_ba_take_run_locked(farm_blockalloc *ba, struct ba_region *r,
                            uint32_t nmb, uint32_t *bidx)
{
	/* Nothing is carved in a retired region (checked under the lock, where
	 * the flag is set). */
	if (atomic_load_explicit(&r->retired, memory_order_relaxed))
		return -ENOSPC;
	uint32_t run = 0;
	bool all_used_below = true;
	for (uint32_t i = r->scan_from; i < r->nblocks; i++) {
		uint64_t w = atomic_load_explicit(&r->table[i],
		                                  memory_order_relaxed);
		if (w != 0) {
			run = 0;
			continue;
		}
		if (all_used_below)
			r->scan_from = i;
		all_used_below = false;
		if (++run == nmb) {
			*bidx = i + 1 - nmb;
			ba->blocks_in_use += nmb;
			if (*bidx == r->scan_from)
				r->scan_from = i + 1;
			return 0;
		}
	}
	return -ENOSPC;
}

void farm_ba_retire_locked(farm_blockalloc *ba, struct ba_region *r,
                           uint32_t bidx, uint32_t mb, uint64_t gen)
{
	struct ba_retired *x = malloc(sizeof(*x));
	if (!x) {
		/* Stays RETIRED for the allocator's life: lost space, not
		 * lost safety. */
		farm_warn("alloc: no memory to track a retired run of %u MiB; "
		          "it is not reused",
		          mb);
		return;
	}
	*x = (struct ba_retired){.r = r,
	                         .bidx = bidx,
	                         .mb = mb,
	                         .gen = gen,
	                         .next = ba->retired};
	ba->retired = x;
}

uint64_t farm_blockalloc_epoch_mark(farm_blockalloc *ba)
{
	if (!ba)
		return 0;
	pthread_mutex_lock(&ba->lock);
	uint64_t g = ba->retire_gen++;
	pthread_mutex_unlock(&ba->lock);
	return g;
}

void farm_blockalloc_blocks(farm_blockalloc *ba, uint64_t *total,
                            uint64_t *in_use, uint64_t *retired)
{
	*total = *in_use = *retired = 0;
	if (!ba)
		return;
	pthread_mutex_lock(&ba->lock);
	*total = ba->blocks_total;
	*in_use = ba->blocks_in_use;
	*retired = ba->blocks_retired;
	pthread_mutex_unlock(&ba->lock);
}

uint64_t farm_blockalloc_reclaim(farm_blockalloc *ba, uint64_t mark)
{
	if (!ba)
		return 0;
	/* Take the runs retired at or before @mark off the list; they stay
	 * RETIRED in the table (no one allocates them) while we zero them
	 * without the lock. */
	struct ba_retired *take = NULL, **pp;
	pthread_mutex_lock(&ba->lock);
	for (pp = &ba->retired; *pp;) {
		struct ba_retired *x = *pp;
		if (x->gen <= mark) {
			*pp = x->next;
			x->next = take;
			take = x;
		} else {
			pp = &x->next;
		}
	}
	if (take)
		ba->reclaiming++; /* a retire waits until we are done */
	pthread_mutex_unlock(&ba->lock);
	if (!take)
		return 0;
	/* Zero: a block handed out again must look never used (headers with
	 * the allocated bit and lock bits clear), whatever class takes it. */
	for (struct ba_retired *x = take; x; x = x->next)
		memset(x->r->base + (uint64_t)x->bidx * FARM_ALLOC_BLOCK, 0,
		       (uint64_t)x->mb * FARM_ALLOC_BLOCK);
	uint64_t n = 0;
	pthread_mutex_lock(&ba->lock);
	while (take) {
		struct ba_retired *x = take;
		take = x->next;
		/* Release: pairs with the acquire loads of the table in
		 * farm_alloc_walk and the rebuild (a FREE word is seen after
		 * the zeroed block above). */
		for (uint32_t i = x->mb; i-- > 0;)
			atomic_store_explicit(&x->r->table[x->bidx + i], 0,
			                      memory_order_release);
		if (x->bidx < x->r->scan_from)
			x->r->scan_from = x->bidx;
		ba->blocks_retired -= x->mb;
		ba->blocks_reclaimed += x->mb;
		n += x->mb;
		free(x);
	}
	if (--ba->reclaiming == 0)
		pthread_cond_broadcast(&ba->idle_cv);
	pthread_mutex_unlock(&ba->lock);
	return n;
}

/* Write a run's words: continuations first, then the head (release: a
 * reader that sees the head finds the continuations written). */
void farm_ba_write_run(struct ba_region *r, uint32_t bidx, uint32_t nmb,
                       uint64_t head)
{
	/* The stores pair with the acquire loads of the table words:
	 * rebuild_table, conts_ok (block_rebuild.c), walk_table (walk.c),
	 * farm_blockalloc_dump (block_dump.c), large_array_free
	 * (slab_array.c). */
	for (uint32_t i = 1; i < nmb; i++)
		atomic_store_explicit(&r->table[bidx + i], bt_cont(bidx),
		                      memory_order_release);
	atomic_store_explicit(&r->table[bidx], head, memory_order_release);
}

struct farm_block *farm_ba_block_meta_new(struct ba_region *r, uint32_t bidx,
                                          unsigned cls)
{
	_Static_assert(sizeof(struct farm_block) % FARM_CL == 0,
	               "aligned_alloc needs a multiple of the alignment");
	struct farm_block *b = aligned_alloc(FARM_CL, sizeof(*b));
	if (!b)
		return NULL;
	memset(b, 0, sizeof(*b));
	b->r = r;
	b->bidx = bidx;
	b->len_mb = farm_alloc_class_block_mb((int)cls);
	b->base = r->base + (uint64_t)bidx * FARM_ALLOC_BLOCK;
	b->gbase = farm_gaddr_make(r->id, bidx * FARM_ALLOC_BLOCK);
	b->slot = farm_alloc_class_size((int)cls);
	b->slot_inv = (1ull << SLOT_INV_SHIFT) / b->slot + 1;
	b->nslots =
	        (uint32_t)((uint64_t)b->len_mb * FARM_ALLOC_BLOCK / b->slot);
	b->cls = (uint8_t)cls;
	return b;
}

/* Publish a block's metadata for every 1 MiB it covers (release: pairs with
 * the acquire load in free). */
void farm_ba_meta_publish(struct farm_block *b)
{
	for (uint32_t i = 0; i < b->len_mb; i++)
		atomic_store_explicit(&b->r->meta[b->bidx + i], b,
		                      memory_order_release);
}

int farm_ba_new_slab_block_locked(farm_blockalloc *ba, farm_slab *s,
                                  unsigned cls, struct ba_region *r,
                                  struct farm_block **out)
{
	uint32_t mb = farm_alloc_class_block_mb((int)cls), bidx;
	int rc = farm_ba_take_run_locked(ba, r, mb, &bidx);
	if (rc)
		return rc;
	struct farm_block *b = farm_ba_block_meta_new(r, bidx, cls);
	if (!b) {
		ba->blocks_in_use -= mb;
		return -ENOMEM;
	}
	atomic_store_explicit(&b->owner, s, memory_order_relaxed);
	farm_ba_meta_publish(b);
	farm_ba_write_run(r, bidx, mb, bt_slab(cls, mb, s ? s->id : 0));
	*out = b;
	return 0;
}

/* The head word names the owner (release: pairs with the acquire loads of
 * the table in farm_alloc_walk and the rebuild). */
void farm_ba_set_owner_locked(struct farm_block *b, farm_slab *s)
{
	atomic_store_explicit(&b->owner, s, memory_order_relaxed);
	atomic_store_explicit(&b->r->table[b->bidx],
	                      bt_slab(b->cls, b->len_mb, s ? s->id : 0),
	                      memory_order_release);
}

/* ---- retiring a region ------------------------------------------------ */

_Static_assert(offsetof(struct farm_block, retired) < FARM_CL,
               "the retired flag shares the line alloc and free read");

int farm_blockalloc_retire_region(farm_blockalloc *ba, uint32_t id)
{
	if (!ba || id == FARM_REGION_ID_NONE || id > FARM_REGION_ID_MAX)
		return -EINVAL;
	pthread_mutex_lock(&ba->lock);
	/* A reclaim zeroes runs outside the lock: let it finish, so that
	 * nothing writes the region after we return. */
	while (ba->reclaiming)
		pthread_cond_wait(&ba->idle_cv, &ba->lock);
	struct ba_region *r = ba_lookup(ba, id);
	if (!r) {
		pthread_mutex_unlock(&ba->lock);
		return -ENOENT;
	}
	/* Flag the region and every slab block of it (release: pairs with
	 * the acquire load of the flag in farm_slab_find_slot_stale, slab.c;
	 * slab_sync sees the flags by the bump of region_gen below; the
	 * relaxed loads on the hot paths rely on coherence, which orders
	 * them after this for any call that starts after we return). */
	atomic_store_explicit(&r->retired, true, memory_order_release);
	uint64_t in_use = 0, runs = 0;
	for (uint32_t i = 0; i < r->nblocks; i++) {
		struct farm_block *b =
		        atomic_load_explicit(&r->meta[i], memory_order_relaxed);
		/* Release, as r->retired above, though no load of this flag
		 * pairs with it: the slabs read it relaxed, and what orders
		 * it for them is the bump of region_gen below (slab_sync). */
		if (b && b->bidx == i)
			atomic_store_explicit(&b->retired, 1,
			                      memory_order_release);
		/* Read while the memory is still the caller's, for the
		 * counters: every used word but a RETIRED run's is in use. */
		uint64_t w = atomic_load_explicit(&r->table[i],
		                                  memory_order_relaxed);
		if (bt_type(w) == BT_RETIRED)
			runs = bt_array_mb(w);
		if (w && !runs)
			in_use++;
		if (runs)
			runs--;
	}
	/* Its unowned blocks leave the orphan lists (owned ones leave their
	 * slab's lists on the owner's thread: slab_sync). */
	for (int c = 0; c < FARM_ALLOC_NCLASSES; c++)
		for (struct farm_block **pp = &ba->orphans[c]; *pp;) {
			if ((*pp)->r == r)
				*pp = (*pp)->orphan_next;
			else
				pp = &(*pp)->orphan_next;
		}
	/* Its retired runs are never zeroed: that would write the memory. */
	for (struct ba_retired **pp = &ba->retired; *pp;) {
		struct ba_retired *x = *pp;
		if (x->r == r) {
			*pp = x->next;
			ba->blocks_retired -= x->mb;
			free(x);
		} else {
			pp = &x->next;
		}
	}
	if (ba->cur_region == r)
		ba->cur_region = NULL; /* refill_any walks the regions */
	ba->blocks_total -= r->nblocks;
	ba->blocks_in_use -= in_use;
	ba->nretired_regions++;
	/* After the flags (release: pairs with the acquire loads of
	 * region_gen in slab_sync and slab_purge): a slab that sees the new
	 * generation sees every flag of this retire. */
	atomic_fetch_add_explicit(&ba->region_gen, 1, memory_order_release);
	pthread_mutex_unlock(&ba->lock);
	return 0;
}

/* ---- translation ----------------------------------------------------- */

void *farm_alloc_local(farm_blockalloc *ba, farm_gaddr a, uint64_t len)
{
	if (FARM_UNLIKELY(!ba))
		return NULL;
	/* A found region's id is valid (checked when it was added), so only
	 * the range is left to check. */
	struct ba_region *r = ba_lookup(ba, farm_gaddr_region(a));
	uint64_t off = farm_gaddr_offset(a);
	if (FARM_UNLIKELY(!r || off >= r->size || len > r->size - off))
		return NULL;
	return r->base + off;
}

int farm_alloc_gaddr_of(farm_blockalloc *ba, const void *p, farm_gaddr *out)
{
	if (!ba || !p || !out)
		return -EINVAL;
	/* Acquire: pairs with the release store of nregions in
	 * farm_ba_region_publish. */
	uint32_t n = atomic_load_explicit(&ba->nregions, memory_order_acquire);
	for (uint32_t i = 0; i < n; i++) {
		struct ba_region *r = ba->regions[i];
		/* A tombstone's memory may be mapped again for another. */
		if (atomic_load_explicit(&r->retired, memory_order_relaxed))
			continue;
		uintptr_t b = (uintptr_t)r->base, q = (uintptr_t)p;
		if (q >= b && q - b < r->size) {
			*out = farm_gaddr_make(r->id, (uint32_t)(q - b));
			return 0;
		}
	}
	return -EINVAL;
}

bool farm_alloc_region_is_local(farm_blockalloc *ba, uint32_t id)
{
	return ba && ba_lookup(ba, id) != NULL;
}

/* ---- stats ----------------------------------------------------------- */

void farm_slab_stats(const farm_slab *s, struct farm_alloc_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!s)
		return;
	farm_slab *m = (farm_slab *)s;
	st->allocs = atomic_load_explicit(&m->allocs, memory_order_relaxed);
	st->frees = atomic_load_explicit(&m->frees, memory_order_relaxed);
	st->remote_frees =
	        atomic_load_explicit(&m->remote_frees, memory_order_relaxed);
	st->free_errors =
	        atomic_load_explicit(&m->free_errors, memory_order_relaxed);
	st->bytes_in_use =
	        atomic_load_explicit(&m->bytes, memory_order_relaxed);
	for (int i = 0; i < FARM_ALLOC_HINT_NLEVELS; i++)
		st->hint[i] =
		        atomic_load_explicit(&m->hint[i], memory_order_relaxed);
	/* Slot allocations and frees, counted per class (alloc_int.h). */
	uint64_t hinted =
	        atomic_load_explicit(&m->hinted, memory_order_relaxed);
	uint64_t na_all = 0;
	for (int c = 0; c < FARM_ALLOC_NCLASSES; c++) {
		uint64_t nf = atomic_load_explicit(&m->cls[c].nfree,
		                                   memory_order_relaxed);
		uint64_t na = atomic_load_explicit(&m->cls[c].nalloc,
		                                   memory_order_relaxed);
		na_all += na;
		st->frees += nf;
		st->bytes_in_use += ((int64_t)na - (int64_t)nf) *
		                    (int64_t)farm_alloc_class_size(c);
	}
	st->allocs += na_all;
	/* Read while the owner runs, the figures may be from different
	 * moments: never let the derived one go below zero. */
	st->hint[FARM_ALLOC_HINT_NONE] += na_all > hinted ? na_all - hinted : 0;
}

void farm_blockalloc_stats(farm_blockalloc *ba, struct farm_alloc_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!ba)
		return;
	pthread_mutex_lock(&ba->lock);
	for (uint32_t i = 0; i < ba->nslabs; i++) {
		struct farm_alloc_stats one;
		farm_slab_stats(ba->slabs[i], &one);
		st->allocs += one.allocs;
		st->frees += one.frees;
		st->remote_frees += one.remote_frees;
		st->free_errors += one.free_errors;
		st->bytes_in_use += one.bytes_in_use;
		for (int k = 0; k < FARM_ALLOC_HINT_NLEVELS; k++)
			st->hint[k] += one.hint[k];
	}
	st->allocs += ba->base_allocs;
	st->bytes_in_use += ba->base_bytes;
	st->regions =
	        atomic_load_explicit(&ba->nregions, memory_order_relaxed) -
	        ba->nretired_regions;
	st->blocks_total = ba->blocks_total;
	st->blocks_in_use = ba->blocks_in_use;
	st->blocks_retired = ba->blocks_retired;
	st->blocks_reclaimed = ba->blocks_reclaimed;
	st->blocks_unusable = ba->blocks_unusable;
	pthread_mutex_unlock(&ba->lock);
}
