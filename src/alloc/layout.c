/*
 * Where the objects of a region are, read from an image of its header and
 * block table (for data recovery, src/txn/copy.c, which copies a region
 * object by object from a primary it reads with one-sided READs).
 */
#include <errno.h>
#include <string.h>

#include "alloc/alloc_int.h"

uint64_t farm_alloc_meta_bytes(uint64_t region_size)
{
	uint64_t nb = region_size / FARM_ALLOC_BLOCK;
	return (RHDR_TABLE_OFF + 8 * nb + 63) & ~63ull;
}

int farm_alloc_block_layout(const void *meta, uint64_t meta_len,
                            uint64_t region_size, uint32_t b,
                            struct farm_alloc_layout *out)
{
	struct farm_alloc_rhdr h;
	uint64_t nb = region_size / FARM_ALLOC_BLOCK;
	if (!meta || !out || meta_len < farm_alloc_meta_bytes(region_size) ||
	    b >= nb)
		return -EINVAL;
	memcpy(&h, meta, sizeof(h));
	*out = (struct farm_alloc_layout){0};
	if (h.magic != FARM_ALLOC_MAGIC) {
		/* No header: a copy that never had one (a backup's block 0
		 * is not replicated), or a region not formatted yet. */
		out->kind = FARM_LAYOUT_UNKNOWN;
		out->run_off = (uint64_t)b * FARM_ALLOC_BLOCK;
		out->run_len = FARM_ALLOC_BLOCK;
		return 0;
	}
	if (h.nblocks != nb || h.table_off != RHDR_TABLE_OFF)
		return FARM_ECORRUPT;
	const uint8_t *tab = (const uint8_t *)meta + RHDR_TABLE_OFF;
	uint64_t w;
	memcpy(&w, tab + 8ull * b, 8);
	uint32_t head = b;
	if (bt_type(w) == BT_CONT) {
		head = bt_cont_head(w);
		if (head >= b)
			return FARM_ECORRUPT;
		memcpy(&w, tab + 8ull * head, 8);
	}
	out->run_off = (uint64_t)head * FARM_ALLOC_BLOCK;
	switch (bt_type(w)) {
	case BT_FREE:
	case BT_RETIRED: out->kind = FARM_LAYOUT_SKIP; return 0;
	case BT_UNUSABLE:
		/* Data the table does not describe, kept out of allocation
		 * by a rebuild (block_rebuild.c: an adopted replica's copy
		 * of a large array's run): committed objects may live there,
		 * so the block is copied, its layout found from its first
		 * object header as in a copy without a table. */
		out->kind = FARM_LAYOUT_UNKNOWN;
		out->run_len = FARM_ALLOC_BLOCK;
		return 0;
	case BT_TABLE:
		out->kind = FARM_LAYOUT_META;
		out->run_len = farm_alloc_meta_bytes(region_size);
		return 0;
	case BT_SLAB: {
		uint32_t sb = farm_alloc_class_size((int)bt_slab_cls(w));
		if (!sb || !bt_slab_mb(w))
			return FARM_ECORRUPT;
		out->kind = FARM_LAYOUT_SLOTS;
		out->run_len = (uint64_t)bt_slab_mb(w) * FARM_ALLOC_BLOCK;
		out->slot_bytes = sb;
		out->nslots = out->run_len / sb;
		break;
	}
	case BT_ARRAY:
		if (!bt_array_elines(w) || !bt_array_mb(w))
			return FARM_ECORRUPT;
		out->kind = FARM_LAYOUT_SLOTS;
		out->run_len = (uint64_t)bt_array_mb(w) * FARM_ALLOC_BLOCK;
		out->slot_bytes = bt_array_elines(w) * FARM_ALLOC_LINE;
		out->nslots = bt_array_n(w);
		break;
	default: return FARM_ECORRUPT;
	}
	if (out->run_off + out->run_len > region_size ||
	    out->nslots * out->slot_bytes > out->run_len)
		return FARM_ECORRUPT;
	return 0;
}

int farm_alloc_block_infer(uint64_t region_size, uint32_t b, uint64_t incarn,
                           struct farm_alloc_layout *out)
{
	uint64_t nb = region_size / FARM_ALLOC_BLOCK;
	if (!out || b >= nb)
		return -EINVAL;
	*out = (struct farm_alloc_layout){.kind = FARM_LAYOUT_SKIP,
	                                  .run_off = (uint64_t)b *
	                                             FARM_ALLOC_BLOCK,
	                                  .run_len = FARM_ALLOC_BLOCK};
	/* Block 0 is the header and table; a block whose first slot was
	 * never allocated holds no object (slabs hand out a block's slots
	 * from its start; free blocks are zero). */
	if (b == 0 || incarn == 0)
		return 0;
	int cls = farm_alloc_class_of((uint64_t)farm_incarn_lines(incarn) *
	                              FARM_ALLOC_LINE);
	uint32_t sb = farm_alloc_class_size(cls);
	uint32_t mb = farm_alloc_class_block_mb(cls);
	if (cls < 0 || !sb || !mb)
		return FARM_ECORRUPT;
	out->kind = FARM_LAYOUT_SLOTS;
	out->run_len =
	        (uint64_t)FARM_MIN((uint64_t)mb, nb - b) * FARM_ALLOC_BLOCK;
	out->slot_bytes = sb;
	out->nslots = out->run_len / sb;
	return 0;
}
