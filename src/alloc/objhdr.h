/*
 * The 16-byte header every allocated object starts with (src/alloc/README.md).
 *
 *   offset 0  uint64_t version  owned by the transaction layer: its two low
 *                               bits are the lock mode. The allocator never
 *                               resets it, so versions only grow across
 *                               incarnations of a slot; a claim asked for a
 *                               mark (farm_slab_alloc_marked) sets the two
 *                               low bits (FARM_OBJHDR_MARK_MASK) before the
 *                               allocated bit. Bit 63 is the allocator's
 *                               (FARM_OBJHDR_FREE_PENDING), set only while
 *                               the object is locked.
 *   offset 8  uint64_t incarn   bit 0: allocated; bits 14..1: the object's
 *                               size in lines, minus one (set by alloc);
 *                               bits 63..15: incarnation, bumped by every
 *                               free.
 *
 * Objects are cache-line aligned and a whole number of lines, so the header
 * never straddles a line. Both words are only ever accessed atomically:
 * remote machines read them with one-sided READs while the owner writes.
 *
 * Memory ordering: alloc publishes the allocated bit with a release store
 * (pairs with the acquire load in farm_objhdr_load_incarn() and the CAS in
 * free); free clears it with an acq_rel compare-and-swap, which is what makes
 * a double free from two threads fail for one of them. A marked claim
 * stores the version word before that release store, so a reader that
 * sees the bit set sees the mark (or a later version): by acquire, or as
 * a line-atomic READ, which copies line 0 as a seqlock reader of the
 * version word (src/fabric/shm_data.c) and so retries when the mark lands
 * during its copy.
 */
#ifndef FARM_ALLOC_OBJHDR_H
#define FARM_ALLOC_OBJHDR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct farm_objhdr {
	_Atomic uint64_t version;
	_Atomic uint64_t incarn;
};

#define FARM_OBJHDR_SIZE       16u
#define FARM_OBJHDR_ALLOCATED  1ull
#define FARM_INCARN_LINES_MASK (0x3fffull << 1)
#define FARM_INCARN_ONE        (1ull << 15) /* one incarnation */
/*
 * In the version word: the bits a claim may be asked to set
 * (farm_slab_alloc_marked, farm_alloc_array_marked): the transaction
 * layer's lock mode. The allocator gives them no meaning; it only writes
 * them, with the rest of the word as the slot's last incarnation left it
 * (FARM_OBJHDR_FREE_PENDING clear), before the allocated bit is visible.
 */
#define FARM_OBJHDR_MARK_MASK 3ull
/*
 * In the version word: a committed free of this object waits for the
 * allocator (galloc's adopter, src/alloc/galloc_adopt.c, while it scans the
 * object's promoted region), its header still allocated. Set by galloc
 * while the transaction layer holds the object locked exclusive, cleared
 * by the adopter after it frees the header (farm_slab_free_unlock, before
 * the slot is reusable); a whole-cluster restart that finds it set on an
 * allocated header frees it (src/txn/restart.c): the free committed, and
 * its records may all be truncated. Versions advance by 4 per commit and
 * never reach it.
 */
#define FARM_OBJHDR_FREE_PENDING (1ull << 63)

_Static_assert(sizeof(struct farm_objhdr) == FARM_OBJHDR_SIZE,
               "object header is 16 bytes");

/* Acquire: pairs with the release stores and CASes of the incarnation by
 * the allocator (slot_claim, hdr_free in alloc/slab_int.h): a reader that sees
 * an incarnation sees the slot as its allocation or free left it. */
static inline uint64_t farm_objhdr_load_incarn(const struct farm_objhdr *h)
{
	return atomic_load_explicit((_Atomic uint64_t *)&h->incarn,
	                            memory_order_acquire);
}

/* Acquire: pairs with the release stores of the version word (a commit's
 * unlock in txn/, galloc's deferred-free unlock): the object's bytes
 * written before it are seen. */
static inline uint64_t farm_objhdr_load_version(const struct farm_objhdr *h)
{
	return atomic_load_explicit((_Atomic uint64_t *)&h->version,
	                            memory_order_acquire);
}

/* The allocated bit of an incarnation word. */
static inline bool farm_incarn_allocated(uint64_t w)
{
	return (w & FARM_OBJHDR_ALLOCATED) != 0;
}

/* The incarnation count of an incarnation word (bits 63..15). */
static inline uint64_t farm_incarn_count(uint64_t w)
{
	return w >> 15;
}

/* The object's size in 64-byte lines (1..16384), as alloc recorded it. */
static inline unsigned farm_incarn_lines(uint64_t w)
{
	return (unsigned)((w & FARM_INCARN_LINES_MASK) >> 1) + 1;
}

/* The word free() leaves: allocated bit clear, count + 1. */
static inline uint64_t farm_incarn_freed(uint64_t w)
{
	return (w & ~FARM_OBJHDR_ALLOCATED) + FARM_INCARN_ONE;
}

/* The word alloc leaves: allocated, @lines (1..16384) recorded, count
 * unchanged. */
static inline uint64_t farm_incarn_claimed(uint64_t w, unsigned lines)
{
	return (w & ~FARM_INCARN_LINES_MASK) | ((uint64_t)(lines - 1) << 1) |
	       FARM_OBJHDR_ALLOCATED;
}

static inline bool farm_objhdr_allocated(const struct farm_objhdr *h)
{
	return farm_incarn_allocated(farm_objhdr_load_incarn(h));
}

static inline uint64_t farm_objhdr_incarnation(const struct farm_objhdr *h)
{
	return farm_incarn_count(farm_objhdr_load_incarn(h));
}

#endif /* FARM_ALLOC_OBJHDR_H */
