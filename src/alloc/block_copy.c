/*
 * Replicating the block table (alloc.h, README.md): the owner describes
 * the slab block an object lies in (farm_alloc_block_info), and a
 * replica writes that into its raw copy of the region
 * (farm_alloc_copy_note), so that a copy rebuilt by scan after promotion
 * knows every block that holds a committed object. Notes into one copy
 * come from any thread at once: every word is claimed by compare-and-swap
 * from zero, and a word that says something else is corruption.
 */
#include <errno.h>
#include <string.h>

#include "alloc/alloc_int.h"

#define BINFO_CLS(i) (((i) >> 1) & 0xffu)
#define BINFO_MB(i)  (((i) >> 9) & 7u)
#define BINFO_OFF(i) (((i) >> 12) & 7u)

int farm_alloc_block_info(farm_blockalloc *ba, farm_gaddr a, uint32_t *info)
{
	if (!ba || !info)
		return -EINVAL;
	struct ba_region *r = ba_lookup(ba, farm_gaddr_region(a));
	if (!r)
		return -EREMOTE;
	uint64_t off = farm_gaddr_offset(a);
	if (off >= r->size)
		return -EINVAL;
	uint32_t mib = (uint32_t)(off / FARM_ALLOC_BLOCK);
	/* Acquire: pairs with meta_publish's release; the caller holds an
	 * object of the block, so it was published before it was handed out
	 * and never changes. */
	const struct farm_block *b =
	        atomic_load_explicit(&r->meta[mib], memory_order_acquire);
	if (!b)
		return -ENOENT;
	*info = 1u | (uint32_t)b->cls << 1 | b->len_mb << 9 |
	        (mib - b->bidx) << 12;
	return 0;
}

/* @copy as a raw region: the header's fields, for a check or a write. */
static void copy_rhdr(const struct farm_alloc_region *copy,
                      struct farm_alloc_rhdr *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = FARM_ALLOC_MAGIC;
	h->region_id = copy->id;
	h->nblocks = (uint32_t)(copy->size / FARM_ALLOC_BLOCK);
	h->table_off = RHDR_TABLE_OFF;
	h->layout = 1;
}

bool farm_alloc_copy_formatted(const struct farm_alloc_region *copy)
{
	/* Acquire: pairs with the release store of the magic in
	 * farm_alloc_copy_note (and add_region_locked): the header is whole. */
	return copy && copy->base &&
	       atomic_load_explicit((_Atomic uint64_t *)copy->base,
	                            memory_order_acquire) == FARM_ALLOC_MAGIC;
}

/* CAS *@w from 0 to @v: 1 written, 0 already @v (or @same accepts it),
 * FARM_ECORRUPT otherwise. */
static int word_claim(_Atomic uint64_t *w, uint64_t v,
                      bool (*same)(uint64_t have, uint64_t want))
{
	uint64_t have = 0;
	/* Acq_rel: pairs with the same CAS by another writer of the copy and
	 * with the acquire loads of the table (farm_alloc_copy_note's checks,
	 * the rebuild) that read the word it publishes. */
	if (atomic_compare_exchange_strong_explicit(
	            w, &have, v, memory_order_acq_rel, memory_order_acquire))
		return 1;
	return have == v || (same && same(have, v)) ? 0 : FARM_ECORRUPT;
}

/* A slab head with any owner is the same run. */
static bool same_slab(uint64_t have, uint64_t want)
{
	return bt_type(have) == BT_SLAB &&
	       bt_slab_cls(have) == bt_slab_cls(want) &&
	       bt_slab_mb(have) == bt_slab_mb(want);
}

/* Whether @copy can take notes at all: a region of a size the allocator
 * makes, line-aligned, holding @a. */
static bool copy_note_region_ok(const struct farm_alloc_region *copy,
                                farm_gaddr a)
{
	return copy && copy->base && farm_gaddr_region(a) == copy->id &&
	       farm_is_pow2(copy->size) &&
	       copy->size >= FARM_ALLOC_MIN_REGION &&
	       copy->size <= FARM_ALLOC_MAX_REGION &&
	       !((uintptr_t)copy->base & (FARM_ALLOC_LINE - 1));
}

/* The words of @copy's header, @ww (as copy_rhdr writes them), checked
 * against what is there: the magic into *@magic (0: not yet written);
 * FARM_ECORRUPT for any word that is neither absent nor the expected one. */
static int copy_header_check(_Atomic uint64_t *hw, const uint64_t *ww,
                             unsigned nw, uint64_t *magic)
{
	/* Pairs with the magic's CAS in copy_header_write (word_claim), after
	 * the header's other words, or add_region_locked's release store. */
	*magic = atomic_load_explicit(&hw[0], memory_order_acquire);
	if (*magic != 0 && *magic != FARM_ALLOC_MAGIC)
		return FARM_ECORRUPT;
	for (unsigned k = 1; k < nw; k++) {
		uint64_t have =
		        atomic_load_explicit(&hw[k], memory_order_relaxed);
		if (have != ww[k] && (*magic || have))
			return FARM_ECORRUPT;
	}
	return 0;
}

/* Check the slab run of @mb blocks at @head (head word @hv) in @table:
 * 1 when every word is already there, 0 when some are missing,
 * FARM_ECORRUPT when one says something else. */
static int copy_run_check(_Atomic uint64_t *table, uint32_t head, unsigned mb,
                          uint64_t hv)
{
	int all_there = 1;
	for (uint32_t i = 0; i < mb; i++) {
		/* Pairs with word_claim's CAS in copy_run_write. */
		uint64_t have = atomic_load_explicit(&table[head + i],
		                                     memory_order_acquire);
		if (have && !(i ? have == bt_cont(head) : same_slab(have, hv)))
			return FARM_ECORRUPT;
		all_there &= have != 0;
	}
	return all_there;
}

/* Write the missing header: its fields, the table's own word, the magic
 * last. Returns 1 if a word was written, 0 if others wrote them all. */
static int copy_header_write(_Atomic uint64_t *hw, _Atomic uint64_t *table,
                             const uint64_t *ww, unsigned nw)
{
	int wrote = 0, rc;
	for (unsigned k = 1; k < nw; k++)
		atomic_store_explicit(&hw[k], ww[k], memory_order_relaxed);
	if ((rc = word_claim(&table[0], bt_table(1), NULL)) < 0)
		return rc;
	wrote |= rc;
	if ((rc = word_claim(&hw[0], FARM_ALLOC_MAGIC, NULL)) < 0)
		return rc;
	return wrote | rc;
}

/* Write the run's words: continuations first, then the head, as
 * farm_ba_write_run. Returns 1 if a word was written. */
static int copy_run_write(_Atomic uint64_t *table, uint32_t head, unsigned mb,
                          uint64_t hv)
{
	int wrote = 0, rc;
	for (uint32_t i = 1; i < mb; i++) {
		if ((rc = word_claim(&table[head + i], bt_cont(head), NULL)) <
		    0)
			return rc;
		wrote |= rc;
	}
	if ((rc = word_claim(&table[head], hv, same_slab)) < 0)
		return rc;
	return wrote | rc;
}

int farm_alloc_copy_note(const struct farm_alloc_region *copy, farm_gaddr a,
                         uint32_t info)
{
	if (!copy_note_region_ok(copy, a) || !(info & 1) ||
	    info >> FARM_ALLOC_BINFO_BITS)
		return -EINVAL;
	uint32_t nblocks = (uint32_t)(copy->size / FARM_ALLOC_BLOCK);
	uint32_t mib = (uint32_t)(farm_gaddr_offset(a) / FARM_ALLOC_BLOCK);
	unsigned cls = BINFO_CLS(info), mb = BINFO_MB(info),
	         roff = BINFO_OFF(info);
	if (mb != farm_alloc_class_block_mb((int)cls) || roff >= mb ||
	    farm_gaddr_offset(a) >= copy->size || mib < roff + 1 ||
	    mib - roff + mb > nblocks)
		return -EINVAL;
	uint32_t head = mib - roff;
	/* The header: written whole by whoever finds it missing (every
	 * writer writes the same words), the magic last (release: pairs with
	 * the acquire loads of farm_alloc_copy_formatted and the checks
	 * below). */
	struct farm_alloc_rhdr want;
	copy_rhdr(copy, &want);
	_Atomic uint64_t *hw = (_Atomic uint64_t *)copy->base;
	_Atomic uint64_t *table =
	        (_Atomic uint64_t *)((char *)copy->base + RHDR_TABLE_OFF);
	uint64_t ww[sizeof(want) / 8], magic;
	const unsigned nw = sizeof(want) / 8;
	memcpy(ww, &want, sizeof(want));
	int rc = copy_header_check(hw, ww, nw, &magic);
	if (rc)
		return rc;
	/* Check the run before writing anything. */
	/* Acquire (the table words too): pairs with word_claim's CAS. */
	uint64_t t0 = atomic_load_explicit(&table[0], memory_order_acquire);
	if (t0 && t0 != bt_table(1))
		return FARM_ECORRUPT;
	uint64_t hv = bt_slab(cls, mb, 0);
	int there = copy_run_check(table, head, mb, hv);
	if (there < 0)
		return there;
	if (there && magic != 0 && t0 != 0)
		return 0; /* the common case: loads only, no line written */
	int wrote = 0;
	if (!magic) {
		if ((rc = copy_header_write(hw, table, ww, nw)) < 0)
			return rc;
		wrote = rc;
	}
	if ((rc = copy_run_write(table, head, mb, hv)) < 0)
		return rc;
	return wrote | rc;
}
