/*
 * farm_blockalloc_dump (alloc.h): a canonical description of the block
 * allocator's state (block-table words, slab free slots, arrays), so two
 * allocators can be compared (a rebuild against the original). A reader
 * of the state block.c owns: it takes ba->lock and changes nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_int.h"
#include "util/log.h"

static int cmp_region(const void *a, const void *b)
{
	const struct ba_region *x = *(struct ba_region *const *)a;
	const struct ba_region *y = *(struct ba_region *const *)b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Mark slot @p of @b in @bits; false if it is not a slot or is marked. */
static bool mark_slot(const struct farm_block *b, const char *p, uint8_t *bits)
{
	if (p < b->base)
		return false;
	uint64_t rel = (uint64_t)(p - b->base);
	if (rel % b->slot || rel / b->slot >= b->nslots)
		return false;
	uint64_t i = rel / b->slot;
	if (bits[i / 8] & (1u << (i % 8)))
		return false;
	bits[i / 8] |= (uint8_t)(1u << (i % 8));
	return true;
}

static void print_ranges(FILE *f, const char *what, const uint8_t *bits,
                         uint32_t n, bool want)
{
	fprintf(f, "    %s", what);
	for (uint32_t i = 0; i < n;) {
		bool v = (bits[i / 8] >> (i % 8)) & 1;
		if (v != want) {
			i++;
			continue;
		}
		uint32_t j = i;
		while (j + 1 < n &&
		       (((bits[(j + 1) / 8] >> ((j + 1) % 8)) & 1) == want))
			j++;
		if (i == j)
			fprintf(f, " %u", i);
		else
			fprintf(f, " %u-%u", i, j);
		i = j + 1;
	}
	fputc('\n', f);
}

static int dump_slab_block(FILE *f, const struct farm_block *b)
{
	int rc = 0;
	uint8_t *bits = calloc((b->nslots + 7) / 8, 1);
	if (!bits)
		return -ENOMEM;
	fprintf(f, "    slab class %u slot %u slots %u\n", b->cls, b->slot,
	        b->nslots);
	for (const char *p = b->free_head; p; p = slot_link(p))
		if (!mark_slot(b, p, bits)) {
			fprintf(f, "    BAD free-list entry %p\n",
			        (const void *)p);
			rc = FARM_ECORRUPT;
			break;
		}
	/* Acquire: pairs with the release CAS of slot_release (the links of
	 * the remote frees are seen). */
	for (const char *p = atomic_load_explicit(
	             &((struct farm_block *)b)->remote_head,
	             memory_order_acquire);
	     p; p = slot_link(p))
		if (!mark_slot(b, p, bits)) {
			fprintf(f, "    BAD remote-free entry %p\n",
			        (const void *)p);
			rc = FARM_ECORRUPT;
			break;
		}
	for (uint32_t i = b->next_fresh; i < b->nslots; i++)
		bits[i / 8] |= (uint8_t)(1u << (i % 8));
	for (uint32_t i = 0; i < b->nslots; i++) {
		bool is_free = (bits[i / 8] >> (i % 8)) & 1;
		const struct farm_objhdr *h =
		        (const void *)(b->base + (uint64_t)i * b->slot);
		if (is_free == farm_objhdr_allocated(h)) {
			fprintf(f,
			        "    MISMATCH slot %u listed %s, header %s\n",
			        i, is_free ? "free" : "allocated",
			        is_free ? "allocated" : "free");
			rc = FARM_ECORRUPT;
		}
	}
	print_ranges(f, "free", bits, b->nslots, true);
	print_ranges(f, "allocated", bits, b->nslots, false);
	free(bits);
	return rc;
}

int farm_blockalloc_dump(farm_blockalloc *ba, FILE *f)
{
	if (!ba || !f)
		return -EINVAL;
	pthread_mutex_lock(&ba->lock);
	/* Acquire: pairs with the release store of farm_ba_region_publish. */
	uint32_t n = atomic_load_explicit(&ba->nregions, memory_order_acquire);
	struct ba_region **rs = malloc((n ? n : 1) * sizeof(*rs));
	if (!rs) {
		pthread_mutex_unlock(&ba->lock);
		return -ENOMEM;
	}
	uint32_t live = 0;
	for (uint32_t k = 0; k < n; k++)
		if (!atomic_load_explicit(&ba->regions[k]->retired,
		                          memory_order_relaxed))
			rs[live++] = ba->regions[k];
	n = live;
	qsort(rs, n, sizeof(*rs), cmp_region);
	int rc = 0;
	for (uint32_t k = 0; k < n; k++) {
		struct ba_region *r = rs[k];
		fprintf(f, "region %u blocks %u\n", r->id, r->nblocks);
		for (uint32_t i = 0; i < r->nblocks; i++) {
			/* Acquire (table and meta): pairs with the release
			 * stores of farm_ba_write_run and
			 * farm_ba_meta_publish. */
			uint64_t w = atomic_load_explicit(&r->table[i],
			                                  memory_order_acquire);
			if (!w)
				continue;
			fprintf(f, "  block %u word %016llx\n", i,
			        (unsigned long long)w);
			/* Pairs with the release store of
			 * farm_ba_meta_publish. */
			struct farm_block *b = atomic_load_explicit(
			        &r->meta[i], memory_order_acquire);
			if (bt_type(w) == BT_SLAB) {
				int e = b && b->bidx == i
				                ? dump_slab_block(f, b)
				                : FARM_ECORRUPT;
				if (e && !rc)
					rc = e;
			} else if (bt_type(w) == BT_ARRAY) {
				const char *base =
				        r->base +
				        (uint64_t)i * FARM_ALLOC_BLOCK;
				uint64_t esz = (uint64_t)bt_array_elines(w) *
				               FARM_ALLOC_LINE;
				uint64_t bad = 0;
				for (uint64_t e = 0; e < bt_array_n(w); e++)
					bad += !farm_objhdr_allocated(
					        (const void *)(base + e * esz));
				fprintf(f,
				        "    array elem %llu n %llu "
				        "unallocated %llu\n",
				        (unsigned long long)esz,
				        (unsigned long long)bt_array_n(w),
				        (unsigned long long)bad);
				if (bad && !rc)
					rc = FARM_ECORRUPT;
			}
		}
	}
	free(rs);
	pthread_mutex_unlock(&ba->lock);
	return rc;
}
