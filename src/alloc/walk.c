/*
 * Walking the objects of a region from its block table alone, with no
 * allocator state (alloc.h, farm_alloc_walk_region): what a whole-cluster
 * restart uses to find every object header of a region the previous
 * incarnation left behind (src/txn/restart.c clears stale locks with it).
 * One role: reading the durable layout; never writes.
 */
#include <errno.h>

#include "alloc/alloc_int.h"
#include "alloc/objhdr.h"
#include "util/fault.h"

/*
 * One slab slot of @lines lines at @p: nothing when it is free, else its
 * object, or every element of the array it holds. A small array
 * (farm_alloc_array) lives in one slot: element 0's header records the
 * element's lines, fewer than the slot's, and every element's header
 * carries element 0's incarnation word (an element header after the
 * array's end, or left by an earlier incarnation of the slot, does not).
 * Each element is an object of its own, locked and installed alone, so a
 * walker that clears stale locks (src/txn/restart.c) or counts locked
 * objects must see every element's header, not only the slot's first.
 * Returns the objects seen. A free slot whose version word is locked or
 * marked free-pending (the lock's two low bits, FARM_OBJHDR_FREE_PENDING)
 * goes to @free_fn when one is given, counted as no object: a deferred
 * free cut short after its header's free leaves one (galloc_adopt.c).
 */
static int walk_slot(uint8_t *p, uint32_t lines, farm_alloc_walk_fn fn,
                     farm_alloc_walk_fn free_fn, void *ctx)
{
	struct farm_objhdr *o0 = (void *)p;
	uint64_t w0 = farm_objhdr_load_incarn(o0);
	if (!farm_incarn_allocated(w0)) {
		if (free_fn && (farm_objhdr_load_version(o0) &
		                (3ull | FARM_OBJHDR_FREE_PENDING)))
			free_fn(ctx, o0, lines);
		return 0;
	}
	uint32_t el = farm_incarn_lines(w0);
	if (el >= lines || FARM_FAULT_SWITCH(FARM_FP_ALLOC_WALK_SLOTS)) {
		fn(ctx, o0, lines);
		return 1;
	}
	int n = 0;
	for (uint32_t l = 0; l + el <= lines; l += el) {
		struct farm_objhdr *o = (void *)(p + (uint64_t)l * 64);
		if (l && farm_objhdr_load_incarn(o) != w0)
			continue;
		fn(ctx, o, el);
		n++;
	}
	return n;
}

int farm_alloc_walk_region(void *base, uint64_t size, uint32_t id,
                           farm_alloc_walk_fn fn, void *ctx)
{
	return farm_alloc_walk_region_locked(base, size, id, fn, NULL, ctx);
}

int farm_alloc_walk_region_locked(void *base, uint64_t size, uint32_t id,
                                  farm_alloc_walk_fn fn,
                                  farm_alloc_walk_fn free_fn, void *ctx)
{
	if (!base || !fn || size < FARM_ALLOC_BLOCK || size % FARM_ALLOC_BLOCK)
		return -EINVAL;
	const struct farm_alloc_rhdr *h = base;
	uint32_t nblocks = (uint32_t)(size / FARM_ALLOC_BLOCK);
	if (h->magic == 0)
		return 0; /* never formatted (a backup copy, or unused) */
	if (h->magic != FARM_ALLOC_MAGIC || h->region_id != id ||
	    h->nblocks != nblocks || h->table_off != RHDR_TABLE_OFF ||
	    h->layout != 1)
		return FARM_ECORRUPT;
	const _Atomic uint64_t *table =
	        (const _Atomic uint64_t *)(const void *)((const uint8_t *)base +
	                                                 RHDR_TABLE_OFF);
	uint8_t *b0 = base;
	int n = 0;
	for (uint32_t i = 1; i < nblocks;) {
		/* Acquire: pairs with the release stores of the table
		 * (farm_ba_write_run, word_claim, the reclaim's zeroing). */
		uint64_t w =
		        atomic_load_explicit(&table[i], memory_order_acquire);
		uint8_t *blk = b0 + (uint64_t)i * FARM_ALLOC_BLOCK;
		uint32_t mb;
		switch (bt_type(w)) {
		case BT_SLAB: {
			unsigned cls = bt_slab_cls(w);
			mb = bt_slab_mb(w);
			uint32_t slot = farm_alloc_class_size((int)cls);
			if (!mb || !slot || i + mb > nblocks)
				return FARM_ECORRUPT;
			uint64_t ns = (uint64_t)mb * FARM_ALLOC_BLOCK / slot;
			for (uint64_t k = 0; k < ns; k++)
				n += walk_slot(blk + k * slot,
				               slot / FARM_ALLOC_LINE, fn,
				               free_fn, ctx);
			break;
		}
		case BT_ARRAY: {
			mb = bt_array_mb(w);
			uint64_t stride =
			        (uint64_t)bt_array_elines(w) * FARM_ALLOC_LINE;
			uint64_t ne = bt_array_n(w);
			if (!mb || !stride || i + mb > nblocks ||
			    stride * ne > (uint64_t)mb * FARM_ALLOC_BLOCK)
				return FARM_ECORRUPT;
			for (uint64_t k = 0; k < ne; k++) {
				struct farm_objhdr *o =
				        (void *)(blk + k * stride);
				if (farm_objhdr_allocated(o)) {
					fn(ctx, o, bt_array_elines(w));
					n++;
				}
			}
			break;
		}
		case BT_RETIRED: mb = bt_array_mb(w); break;
		case BT_FREE: mb = 1; break;
		default: return FARM_ECORRUPT;
		}
		i += mb ? mb : 1;
	}
	return n;
}

int farm_alloc_region_check(uint64_t magic, uint32_t region_id, uint32_t id)
{
	if (magic == 0)
		return 0; /* never formatted: a backup copy or an unused one */
	if (magic != FARM_ALLOC_MAGIC)
		return 1;
	return region_id == id ? 0 : 2;
}
