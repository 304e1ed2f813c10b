/*
 * Chunk summaries for a copy that may take objects from memory it already
 * holds instead of READing them from the primary: the old copies of a
 * machine that rejoins under its id (src/recovery/README.md, "Same-id
 * restart"; copy.c's first pass with a stale source), and every copy's
 * check pass. Both sides summarize a chunk the same way, the primary its
 * live copy and the other side its stale source or its filling copy, by
 * the primary's block table; equal summaries mean equal (offset, version,
 * incarnation) for every allocated object, and equal headers for every
 * free slot ever written, whose slot starts in the chunk. Anything that could
 * make equal versions hold unequal bytes (a lock: an install, an apply or a
 * recovered transaction in progress, or one a kill cut short; a line
 * version unlike its header's: a body written in part) makes the chunk
 * unjudgeable (-EAGAIN), which only ever means: READ it.
 */
#include "txn/copy_digest.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "alloc/alloc.h"
#include "alloc/objhdr.h"
#include "txn/object.h"
#include "util/common.h"
#include "util/fault.h"

#define DG_SEED 0x6a09e667f3bcc909ull

/* One word into the digest (a multiply-xorshift step per word: every bit
 * of @x reaches every bit of the result). */
static uint64_t dg_mix(uint64_t h, uint64_t x)
{
	h ^= x;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 29;
	return h;
}

/* One object of @lines lines at @p (offset @off) into *@h; -EAGAIN when
 * locked or torn. A free one adds its header unless never written: a
 * copy whose free slot's header is not the primary's would not be
 * byte for byte the one a READ makes (its lines are not judged: a free
 * writes the header alone). Acquire loads of the header:
 * pair with the release of the version by an install or apply
 * (farm_txn_copy_apply, obj_install) and of the incarnation by the
 * allocator; the line versions, read after, are relaxed (a torn view of
 * them is what the comparison with the header detects). The version is
 * read again after the incarnation, as a line-atomic READ's seqlock
 * does: a claim stores its mark (the shared lock of a transaction's new
 * object, obj_claim_mark) before the allocated bit, so a first load from
 * before the mark and an incarnation from after it would show the
 * uncommitted object allocated and unlocked; the second load then sees
 * the word changed. */
static int dg_obj(const uint8_t *p, unsigned lines, uint64_t off, uint64_t *h)
{
	const struct farm_objhdr *hd = (const struct farm_objhdr *)p;
	uint64_t v = farm_objhdr_load_version(hd);
	uint64_t w = farm_objhdr_load_incarn(hd);
	if ((v & OBJ_LOCK_MASK) || farm_objhdr_load_version(hd) != v)
		return -EAGAIN;
	if (!farm_incarn_allocated(w)) {
		if (v || w)
			*h = dg_mix(dg_mix(dg_mix(*h, off), v), w);
		return 0;
	}
	for (unsigned l = 1; l < lines; l++) {
		uint16_t x = atomic_load_explicit(
		        (_Atomic uint16_t *)(uintptr_t)(p + 64ull * l),
		        memory_order_relaxed);
		if (x != obj_v16(v))
			return -EAGAIN;
	}
	*h = dg_mix(dg_mix(dg_mix(*h, off), v), w);
	return 0;
}

/* One slot of @slot_lines lines: its object, or each element of the small
 * array it holds (as data recovery's apply_slot and the region walk read
 * a slot: element 0's word gives the element's lines, and every element
 * carries element 0's incarnation word). */
static int dg_slot(const uint8_t *p, unsigned slot_lines, uint64_t off,
                   uint64_t *h)
{
	uint64_t w = farm_objhdr_load_incarn((const struct farm_objhdr *)p);
	unsigned lines = w ? farm_incarn_lines(w) : 1;
	if (lines >= slot_lines || !farm_incarn_allocated(w) ||
	    FARM_FAULT_SWITCH(FARM_FP_DIGEST_SLOT_FIRST))
		return dg_obj(p, FARM_MIN(lines, slot_lines), off, h);
	for (unsigned l = 0; l + lines <= slot_lines; l += lines) {
		const uint8_t *e = p + 64ull * l;
		if (l &&
		    farm_objhdr_load_incarn((const struct farm_objhdr *)e) != w)
			continue; /* past the array's end */
		int rc = dg_obj(e, lines, off + 64ull * l, h);
		if (rc)
			return rc;
	}
	return 0;
}

/* The slots of run @L that start in [@at, @end) into *@h. */
static int dg_run(const struct farm_alloc_layout *L, const uint8_t *base,
                  uint64_t at, uint64_t end, uint64_t *h)
{
	uint64_t k = at <= L->run_off ? 0
	                              : (at - L->run_off + L->slot_bytes - 1) /
	                                        L->slot_bytes;
	*h = dg_mix(*h, L->slot_bytes);
	for (; k < L->nslots; k++) {
		uint64_t o = L->run_off + k * L->slot_bytes;
		if (o >= end)
			break;
		int rc = dg_slot(base + o, L->slot_bytes / 64u, o, h);
		if (rc)
			return rc;
	}
	return 0;
}

int farm_txn_chunk_digest(const void *meta, uint64_t meta_bytes,
                          uint64_t region_size, const uint8_t *base,
                          uint64_t off, uint64_t len, uint64_t *out)
{
	if (!len || off >= region_size || len > region_size - off ||
	    meta_bytes < 16)
		return -EINVAL;
	uint64_t hw[2];
	memcpy(hw, meta, sizeof(hw));
	uint64_t h = dg_mix(dg_mix(DG_SEED, hw[0]), hw[1]);
	uint64_t end = off + len;
	for (uint64_t at = off; at < end;) {
		uint32_t b = (uint32_t)(at / FARM_ALLOC_BLOCK);
		struct farm_alloc_layout L;
		int rc = farm_alloc_block_layout(meta, meta_bytes, region_size,
		                                 b, &L);
		if (rc)
			return rc;
		if (L.kind == FARM_LAYOUT_UNKNOWN)
			return -EAGAIN;
		uint64_t next = (uint64_t)(b + 1) * FARM_ALLOC_BLOCK;
		if (L.kind == FARM_LAYOUT_SLOTS) {
			rc = dg_run(&L, base, at, end, &h);
			if (rc)
				return rc;
			next = FARM_MAX(next, L.run_off + L.run_len);
		}
		at = next;
	}
	*out = h;
	return 0;
}
