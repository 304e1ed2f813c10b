/*
 * Arrays (FaRM NSDI'14 3.3): n elements of one size back to back, each
 * with its own object header (README.md "Arrays"). Up to
 * FARM_ALLOC_MAX_OBJECT in all, an array takes one slab slot of the class
 * of the total, through the same steps as an object (slab_int.h); a larger
 * one takes a run of whole blocks under ba->lock, recorded in the block
 * table (BT_ARRAY) and retired (BT_RETIRED) on free until a distributed
 * epoch lets its blocks be reused.
 */
#include <errno.h>

#include "alloc/slab_int.h"

static int array_dims(uint64_t esize, uint64_t n, uint64_t *esz,
                      uint64_t *total)
{
	if (!esize || !n)
		return -EINVAL;
	if (esize > FARM_ALLOC_MAX_OBJECT)
		return -E2BIG;
	*esz = (esize + FARM_ALLOC_LINE - 1) / FARM_ALLOC_LINE *
	       FARM_ALLOC_LINE;
	if (n > (FARM_ALLOC_MAX_REGION - FARM_ALLOC_BLOCK) / *esz)
		return -E2BIG;
	*total = n * *esz;
	return 0;
}

struct array_try {
	uint32_t nmb;
	uint64_t word;
	struct ba_region *r;
	uint32_t bidx;
};

/* Under no lock: take and write a run for a large array in @r. */
static int try_array_region(farm_slab *s, void *ctx, struct ba_region *r)
{
	struct array_try *t = ctx;
	pthread_mutex_lock(&s->ba->lock);
	int rc = farm_ba_take_run_locked(s->ba, r, t->nmb, &t->bidx);
	if (!rc) {
		farm_ba_write_run(r, t->bidx, t->nmb, t->word);
		t->r = r;
	}
	pthread_mutex_unlock(&s->ba->lock);
	if (rc == -ENOSPC && region_fits(r, t->nmb))
		return -E2BIG;
	return rc;
}

static int large_array(farm_slab *s, uint64_t esz, uint64_t n, uint64_t total,
                       farm_gaddr hint, uint64_t mark, farm_gaddr *out)
{
	farm_blockalloc *ba = s->ba;
	struct array_try t = {0};
	t.nmb = (uint32_t)((total + FARM_ALLOC_BLOCK - 1) / FARM_ALLOC_BLOCK);
	t.word =
	        bt_array(BT_ARRAY, t.nmb, (uint32_t)(esz / FARM_ALLOC_LINE), n);
	int rc, level;
	if (hint != FARM_GADDR_NULL) {
		struct ba_region *r = slab_region(s, farm_gaddr_region(hint));
		if (!r) {
			farm_stat_add_owned(&s->hint[FARM_ALLOC_HINT_REMOTE],
			                    1);
			return farm_gaddr_region(hint) ? -EREMOTE : -EINVAL;
		}
		if (farm_gaddr_offset(hint) >= r->size)
			return -EINVAL;
		level = FARM_ALLOC_HINT_REGION;
		rc = try_array_region(s, &t, r);
		if (rc == -ENOSPC || rc == -E2BIG) {
			level = FARM_ALLOC_HINT_NEAR;
			rc = farm_slab_near_regions(s, r, try_array_region, &t);
		}
	} else {
		level = FARM_ALLOC_HINT_NONE;
		pthread_mutex_lock(&ba->lock);
		rc = -ENOSPC;
		uint32_t nr = atomic_load_explicit(&ba->nregions,
		                                   memory_order_relaxed);
		for (uint32_t i = 0; i < nr && rc == -ENOSPC; i++) {
			struct ba_region *r = ba->regions[i];
			rc = farm_ba_take_run_locked(ba, r, t.nmb, &t.bidx);
			if (!rc)
				t.r = r;
		}
		if (rc == -ENOSPC) {
			rc = farm_ba_grow_locked(ba, FARM_REGION_ID_NONE, &t.r);
			if (!rc) {
				rc = farm_ba_take_run_locked(ba, t.r, t.nmb,
				                             &t.bidx);
				if (rc == -ENOSPC)
					rc = region_fits(t.r, t.nmb);
			}
		}
		if (!rc)
			farm_ba_write_run(t.r, t.bidx, t.nmb, t.word);
		pthread_mutex_unlock(&ba->lock);
	}
	if (rc)
		return rc;
	/* Fresh blocks (never reused in this issue): headers are zero. */
	char *base = t.r->base + (uint64_t)t.bidx * FARM_ALLOC_BLOCK;
	for (uint64_t i = 0; i < n; i++) {
		struct farm_objhdr *h = (void *)(base + i * esz);
		uint64_t w =
		        atomic_load_explicit(&h->incarn, memory_order_relaxed);
		if (mark)
			hdr_mark(h, mark);
		/* Release: as slot_claim's (pairs with the acquire loads of
		 * the incarnation, farm_objhdr_load_incarn; orders the mark
		 * before the bit). */
		atomic_store_explicit(
		        &h->incarn,
		        farm_incarn_claimed(w,
		                            (unsigned)(esz / FARM_ALLOC_LINE)),
		        memory_order_release);
	}
	farm_stat_add_owned(&s->hint[level], 1);
	farm_stat_add_owned(&s->allocs, 1);
	farm_stat_add_owned(&s->bytes, (int64_t)t.nmb * FARM_ALLOC_BLOCK);
	*out = farm_gaddr_make(t.r->id, t.bidx * FARM_ALLOC_BLOCK);
	return 0;
}

/* farm_alloc_array(_marked). */
static int alloc_array(farm_slab *s, uint64_t elem_size, uint64_t n,
                       farm_gaddr hint, uint64_t mark, farm_gaddr *out)
{
	uint64_t esz, total;
	int rc = array_dims(elem_size, n, &esz, &total);
	if (rc)
		return rc;
	if (!s || !out)
		return -EINVAL;
	if (total > FARM_ALLOC_MAX_OBJECT)
		return large_array(s, esz, n, total, hint, mark, out);
	unsigned c = s->line_cls[total / FARM_ALLOC_LINE];
	char *p;
	struct farm_block *b;
	int lvl;
	rc = take(s, c, hint, &p, &b, &lvl);
	if (rc)
		return rc;
	/* Element headers inside the slot: the slot's incarnation (monotonic
	 * per slot, so a stale pointer to any earlier object here never
	 * matches) and its version with the lock bits and the free-pending
	 * mark clear, and the caller's @mark set. Written before the slot's
	 * allocated bit is published, each element's version before its own
	 * incarnation (as slot_claim). */
	struct farm_objhdr *h0 = (struct farm_objhdr *)p;
	uint64_t w0 = atomic_load_explicit(&h0->incarn, memory_order_relaxed);
	uint64_t v0 = atomic_load_explicit(&h0->version, memory_order_relaxed);
	for (uint64_t i = 1; i < n; i++) {
		struct farm_objhdr *h = (void *)(p + i * esz);
		atomic_store_explicit(&h->version,
		                      (v0 & ~(FARM_OBJHDR_MARK_MASK |
		                              FARM_OBJHDR_FREE_PENDING)) |
		                              mark,
		                      memory_order_relaxed);
		/* Release: as slot_claim's (pairs with the acquire loads of
		 * the incarnation, farm_objhdr_load_incarn). */
		atomic_store_explicit(
		        &h->incarn,
		        farm_incarn_claimed(w0,
		                            (unsigned)(esz / FARM_ALLOC_LINE)),
		        memory_order_release);
	}
	rc = slot_claim(p, (unsigned)(esz / FARM_ALLOC_LINE), mark);
	if (rc)
		return rc;
	count_alloc(s, c, lvl);
	*out = b->gbase + (uint64_t)(p - b->base);
	return 0;
}

int farm_alloc_array(farm_slab *s, uint64_t elem_size, uint64_t n,
                     farm_gaddr hint, farm_gaddr *out)
{
	return alloc_array(s, elem_size, n, hint, 0, out);
}

int farm_alloc_array_marked(farm_slab *s, uint64_t elem_size, uint64_t n,
                            farm_gaddr hint, uint64_t mark, farm_gaddr *out)
{
	if (mark & ~FARM_OBJHDR_MARK_MASK)
		return -EINVAL;
	return alloc_array(s, elem_size, n, hint, mark, out);
}

static int large_array_free(farm_slab *s, struct ba_region *r, uint32_t off,
                            uint64_t esz, uint64_t n)
{
	if (off % FARM_ALLOC_BLOCK)
		return -EINVAL;
	uint32_t bidx = off / FARM_ALLOC_BLOCK;
	/* Acquire: pairs with the release store of the run's head word
	 * (farm_ba_write_run, or the RETIRED word below by an earlier free). */
	uint64_t w =
	        atomic_load_explicit(&r->table[bidx], memory_order_acquire);
	if (bt_type(w) == BT_RETIRED && bt_array_n(w) == n &&
	    bt_array_elines(w) == esz / FARM_ALLOC_LINE)
		return -ENOENT;
	if (bt_type(w) != BT_ARRAY || bt_array_n(w) != n ||
	    bt_array_elines(w) != esz / FARM_ALLOC_LINE)
		return -EINVAL;
	char *base = r->base + off;
	for (uint64_t i = 0; i < n; i++)
		if (!farm_objhdr_allocated((void *)(base + i * esz)))
			return -ENOENT;
	int rc = hdr_free(base);
	if (rc)
		return rc;
	for (uint64_t i = 1; i < n; i++) {
		struct farm_objhdr *h = (void *)(base + i * esz);
		uint64_t x =
		        atomic_load_explicit(&h->incarn, memory_order_relaxed);
		/* Release: as hdr_free's (pairs with the acquire loads of
		 * the incarnation, farm_objhdr_load_incarn). */
		atomic_store_explicit(&h->incarn, farm_incarn_freed(x),
		                      memory_order_release);
	}
	uint32_t mb = bt_array_mb(w);
	pthread_mutex_lock(&s->ba->lock);
	/* Release: pairs with the acquire load of the head word above (a
	 * second free sees RETIRED) and those of farm_alloc_walk. */
	atomic_store_explicit(&r->table[bidx],
	                      bt_array(BT_RETIRED, mb, bt_array_elines(w), n),
	                      memory_order_release);
	s->ba->blocks_in_use -= mb;
	s->ba->blocks_retired += mb;
	farm_ba_retire_locked(s->ba, r, bidx, mb, s->ba->retire_gen);
	pthread_mutex_unlock(&s->ba->lock);
	farm_stat_add_owned(&s->bytes, -(int64_t)mb * FARM_ALLOC_BLOCK);
	return 0;
}

/* Free an array of @n elements of @esz bytes (@total in all) that sits
 * in one slab slot at @a: every element's header must carry the first
 * one's allocated incarnation. */
static int slot_array_free(farm_slab *s, farm_gaddr a, uint64_t esz,
                           uint64_t total, uint64_t n)
{
	struct farm_block *b;
	char *p;
	int rc = find_slot(s, a, &b, &p);
	if (rc && farm_slab_find_slot_stale(s, farm_gaddr_region(a)))
		rc = find_slot(s, a, &b, &p);
	if (rc)
		return rc;
	if (total > b->slot)
		return -EINVAL;
	uint64_t w0 = farm_objhdr_load_incarn((void *)p);
	if (!farm_incarn_allocated(w0))
		return -ENOENT;
	for (uint64_t i = 1; i < n; i++)
		if (farm_objhdr_load_incarn((void *)(p + i * esz)) != w0)
			return -EINVAL;
	/* Only from the word the elements were checked against: if the slot
	 * was freed (and maybe reused) since, nothing changes (acq_rel: as
	 * hdr_free's CAS, pairs with slot_claim's release and with a racing
	 * free's CAS). */
	if (!atomic_compare_exchange_strong_explicit(
	            &((struct farm_objhdr *)p)->incarn, &w0,
	            farm_incarn_freed(w0), memory_order_acq_rel,
	            memory_order_acquire))
		return -ENOENT;
	for (uint64_t i = 1; i < n; i++) {
		struct farm_objhdr *h = (void *)(p + i * esz);
		/* Release: pairs with the acquire loads of the incarnation
		 * (farm_objhdr_load_incarn). */
		atomic_store_explicit(&h->incarn, farm_incarn_freed(w0),
		                      memory_order_release);
	}
	slot_release(s, b, p);
	farm_stat_add_owned(&s->cls[b->cls].nfree, 1);
	return 0;
}

int farm_alloc_array_free(farm_slab *s, farm_gaddr a, uint64_t elem_size,
                          uint64_t n)
{
	uint64_t esz, total;
	int rc = array_dims(elem_size, n, &esz, &total);
	if (rc || !s)
		return rc ? (rc == -E2BIG ? -EINVAL : rc) : -EINVAL;
	struct ba_region *r;
	if (a == FARM_GADDR_NULL || (a & (FARM_ALLOC_LINE - 1)))
		rc = -EINVAL;
	else if (!(r = slab_region(s, farm_gaddr_region(a))))
		return farm_gaddr_region(a) ? -EREMOTE : -EINVAL;
	else if (farm_gaddr_offset(a) >= r->size)
		rc = -EINVAL;
	else if (total > FARM_ALLOC_MAX_OBJECT) {
		rc = large_array_free(s, r, farm_gaddr_offset(a), esz, n);
		if (!rc)
			farm_stat_add_owned(&s->frees, 1);
	} else
		rc = slot_array_free(s, a, esz, total, n);
	if (rc) {
		farm_stat_add_owned(&s->free_errors, 1);
		return rc;
	}
	return 0;
}
