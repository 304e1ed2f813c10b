/*
 * Slab internals shared by slab.c (objects) and slab_array.c (arrays).
 * Not an API. The static inline helpers are steps of the allocation and
 * free paths: inline so that slab.c's fast paths (farm_slab_alloc,
 * farm_slab_free) keep them in line, and the array paths take the same
 * steps. The functions declared here are slab.c's (out of line there).
 */
#ifndef FARM_ALLOC_SLAB_INT_H
#define FARM_ALLOC_SLAB_INT_H

#include <errno.h>

#include "alloc/alloc_int.h"

/* slab.c: region @id looked up and cached in @s (the cache missed). */
FARM_INTERNAL struct ba_region *farm_slab_region_miss(farm_slab *s,
                                                      uint32_t id);

static inline struct ba_region *slab_region(farm_slab *s, uint32_t id)
{
	struct ba_region *r = s->last_r;
	if (FARM_LIKELY(
	            r && r->id == id &&
	            !atomic_load_explicit(&r->retired, memory_order_relaxed)))
		return r;
	return farm_slab_region_miss(s, id);
}

static inline bool block_retired(const struct farm_block *b)
{
	return atomic_load_explicit(&((struct farm_block *)b)->retired,
	                            memory_order_relaxed);
}

/* A new region's block run cannot fit: the class needs a larger region. */
static inline int region_fits(const struct ba_region *r, uint32_t mb)
{
	return mb + 1 <= r->nblocks ? 0 : -E2BIG;
}

/* slab.c: calls @fn(ctx, region) on the regions near @r (hint level 3). */
typedef int (*farm_slab_try_region_fn)(farm_slab *s, void *ctx,
                                       struct ba_region *r);
FARM_INTERNAL int farm_slab_near_regions(farm_slab *s, struct ba_region *r,
                                         farm_slab_try_region_fn fn, void *ctx);

/* The caller's @mark (FARM_OBJHDR_MARK_MASK bits) into the version word
 * of header @h, the free-pending mark off (a slot is freed without it).
 * Relaxed: the release store of the allocated bit that follows orders it
 * (slot_claim). */
static inline void hdr_mark(struct farm_objhdr *h, uint64_t mark)
{
	uint64_t v = atomic_load_explicit(&h->version, memory_order_relaxed);
	atomic_store_explicit(
	        &h->version,
	        (v & ~(FARM_OBJHDR_MARK_MASK | FARM_OBJHDR_FREE_PENDING)) |
	                mark,
	        memory_order_relaxed);
}

/* Set the allocated bit. The release store pairs with the acquire loads
 * and the CAS of readers and freers. The bit is clear on every slot on a
 * free list; finding it set means the lists are corrupt. A @mark (0: the
 * version word untouched) is stored in the version word first: the
 * release orders it before the bit for an acquire reader of the
 * incarnation, and a line-atomic READ (a seqlock reader of the version
 * word, src/fabric/shm_data.c) that copied the bit sees the word changed
 * and copies the line again, so no reader sees the slot allocated
 * without its mark. */
static inline int slot_claim(char *p, unsigned lines, uint64_t mark)
{
	struct farm_objhdr *h = (struct farm_objhdr *)p;
	uint64_t w = atomic_load_explicit(&h->incarn, memory_order_relaxed);
	if (FARM_UNLIKELY(w & FARM_OBJHDR_ALLOCATED))
		return FARM_ECORRUPT;
	if (mark)
		hdr_mark(h, mark);
	/* Pairs with the acquire load and CAS of the incarnation in hdr_free
	 * and with readers' farm_objhdr_load_incarn (objhdr.h). */
	atomic_store_explicit(&h->incarn, farm_incarn_claimed(w, lines),
	                      memory_order_release);
	return 0;
}

/* slab.c: take()'s out-of-line steps: a slot of class @c following a hint,
 * and a refill when the current block is dry. */
FARM_INTERNAL int farm_slab_take_hinted(farm_slab *s, unsigned c,
                                        farm_gaddr hint, char **p,
                                        struct farm_block **bo, int *lvl);
FARM_INTERNAL int farm_slab_take_slow(farm_slab *s, unsigned c, char **pp,
                                      struct farm_block **bo);

/* Pop a slot of class @c; *lvl: the hint level used. The common case (no
 * hint, the current block has a free or never-used slot) is inline. */
static inline __attribute__((always_inline)) int
take(farm_slab *s, unsigned c, farm_gaddr hint, char **pp,
     struct farm_block **bo, int *lvl)
{
	if (hint != FARM_GADDR_NULL)
		return farm_slab_take_hinted(s, c, hint, pp, bo, lvl);
	*lvl = FARM_ALLOC_HINT_NONE;
	struct farm_block *b = s->cls[c].cur;
	if (FARM_LIKELY(b && !block_retired(b))) {
		char *p = b->free_head;
		if (FARM_LIKELY(p)) {
			b->free_head = slot_link(p);
			*pp = p;
			*bo = b;
			return 0;
		}
		if (b->next_fresh < b->nslots) {
			*pp = b->base + (uint64_t)b->next_fresh++ * b->slot;
			*bo = b;
			return 0;
		}
	}
	return farm_slab_take_slow(s, c, pp, bo);
}

/* Count a slot allocation of class @c placed at hint level @lvl. */
static inline void count_alloc(farm_slab *s, unsigned c, int lvl)
{
	farm_stat_add_owned(&s->cls[c].nalloc, 1);
	if (FARM_UNLIKELY(lvl != FARM_ALLOC_HINT_NONE)) {
		farm_stat_add_owned(&s->hint[lvl], 1);
		farm_stat_add_owned(&s->hinted, 1);
	}
}

/* Back on a free list: ours, or the owner's remote stack (release: the
 * link is written before the slot is published; pairs with block_drain()).
 * The CAS loop is lock-free; it retries only when another freer won. */
static inline void slot_release(farm_slab *s, struct farm_block *b, char *p)
{
	if (atomic_load_explicit(&b->owner, memory_order_relaxed) == s) {
		slot_set_link(p, b->free_head);
		b->free_head = p;
		s->cls[b->cls].spare = b;
		return;
	}
	char *h = atomic_load_explicit(&b->remote_head, memory_order_relaxed);
	for (;;) {
		slot_set_link(p, h);
		/* Pairs with the acquire exchange in block_drain (slab.c). */
		if (atomic_compare_exchange_weak_explicit(
		            &b->remote_head, &h, p, memory_order_release,
		            memory_order_relaxed))
			break;
		farm_cpu_relax();
	}
	farm_stat_add_owned(&s->remote_frees, 1);
}

/* The slab block and slot at @a, or an error. The slot's address comes
 * from the slab's region cache (one load away), not from the block
 * metadata, so the header's line is fetched while the metadata and the
 * slot-index checks run; the header is only read, and a region is mapped
 * for its whole size, so a bad @a costs nothing but the error. */
static inline int find_in_cache(farm_slab *s, farm_gaddr a,
                                struct farm_block **bo, char **po)
{
	uint32_t off = farm_gaddr_offset(a);
	if (FARM_UNLIKELY(off >= s->rc_size))
		return -EINVAL;
	char *p = s->rc_base + off;
	/* Acquire: pairs with the release stores of farm_ba_meta_publish. */
	struct farm_block *b = atomic_load_explicit(
	        &s->rc_meta[off / FARM_ALLOC_BLOCK], memory_order_acquire);
	if (FARM_UNLIKELY(!b))
		return -EINVAL;
	/* Its region is retired: not ours to write (a relaxed load from the
	 * line the slot checks below read anyway). */
	if (FARM_UNLIKELY(
	            atomic_load_explicit(&b->retired, memory_order_relaxed)))
		return -EREMOTE;
	/* One multiply gives both the index (high bits) and whether @rel is a
	 * multiple of the slot (low bits below slot_inv: see SLOT_INV_SHIFT).
	 */
	uint32_t rel = off - b->bidx * FARM_ALLOC_BLOCK;
	uint64_t q = (uint64_t)rel * b->slot_inv;
	if (FARM_UNLIKELY((q & SLOT_INV_FRAC) >= b->slot_inv ||
	                  (q >> SLOT_INV_SHIFT) >= b->nslots))
		return -EINVAL;
	*bo = b;
	*po = p;
	return 0;
}

/* slab.c: true when a retired cached region @id was dropped and is live
 * again under that id (find_slot() is worth retrying). */
FARM_INTERNAL bool farm_slab_find_slot_stale(farm_slab *s, uint32_t id);

static inline int find_slot(farm_slab *s, farm_gaddr a, struct farm_block **bo,
                            char **po)
{
	if (FARM_UNLIKELY(a == FARM_GADDR_NULL || (a & (FARM_ALLOC_LINE - 1))))
		return -EINVAL;
	uint32_t id = farm_gaddr_region(a);
	if (FARM_UNLIKELY(id != s->rc_id) && !farm_slab_region_miss(s, id))
		return id ? -EREMOTE : -EINVAL;
	return find_in_cache(s, a, bo, po);
}

/* Clear the allocated bit and bump the incarnation: the one step that
 * decides between racing frees (acq_rel CAS: pairs with slot_claim()). */
static inline int hdr_free(char *p)
{
	struct farm_objhdr *h = (struct farm_objhdr *)p;
	uint64_t w = atomic_load_explicit(&h->incarn, memory_order_acquire);
	/* The CAS: its acquire pairs with the release store of slot_claim
	 * (or a racing free's CAS), its release with readers'
	 * farm_objhdr_load_incarn (objhdr.h). */
	do {
		if (FARM_UNLIKELY(!farm_incarn_allocated(w)))
			return -ENOENT;
	} while (!atomic_compare_exchange_weak_explicit(
	        &h->incarn, &w, farm_incarn_freed(w), memory_order_acq_rel,
	        memory_order_acquire));
	return 0;
}

#endif /* FARM_ALLOC_SLAB_INT_H */
