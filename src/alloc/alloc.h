/*
 * libfarm allocator: thread-private slab allocators over a machine-wide
 * block allocator over regions (FaRM NSDI'14 section 3.3;
 * src/alloc/README.md has the layouts, invariants and figures).
 *
 * Internal API. Every function that can fail returns 0 or a negative code:
 *   -EINVAL   bad argument: size 0, NULL/misaligned/out-of-region address,
 *             an address that is not the start of an object of this kind
 *   -E2BIG    a plain object above FARM_ALLOC_MAX_OBJECT (1 MiB) stored bytes,
 *             or an array larger than a region can hold
 *   -ENOENT   free of a slot that is not allocated (never allocated or
 *             already freed); nothing is changed
 *   -EREMOTE  the address (or hint) names a region that is not local to this
 *             machine: the caller (address-space layer) must send the
 *             request to the region's owner (an RPC); nothing is changed
 *   -ENOMEM   no memory for allocator metadata, or the region callback could
 *             not supply a region
 *   -ENOSPC   a region is full (only internally; callers see a new region)
 *   -EMFILE   too many regions or slab allocators for this block allocator
 *   FARM_ECORRUPT  a header or block-table word contradicts the allocator's
 *             state (found while formatting, rebuilding or allocating)
 *
 * Sizes passed in are *stored* sizes in bytes, header included (the
 * transaction layer adds its per-line versions before calling).
 *
 * Threads: a farm_blockalloc is shared by every thread of a machine (its
 * calls take one mutex; lookups of regions are lock-free). A farm_slab is
 * owned by one thread at a time: farm_slab_alloc(), farm_slab_free() and the
 * array calls on a slab must not run concurrently with each other, but any
 * slab may free an object allocated by any other slab of the same block
 * allocator.
 */
#ifndef FARM_ALLOC_ALLOC_H
#define FARM_ALLOC_ALLOC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <farm/addr.h>
#include <farm/error.h>

#include "alloc/objhdr.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FARM_ALLOC_LINE        64u
#define FARM_ALLOC_BLOCK       (1u << 20) /* 1 MiB */
#define FARM_ALLOC_NCLASSES    256
#define FARM_ALLOC_MAX_OBJECT  (1u << 20) /* largest plain object */
#define FARM_ALLOC_MAX_LINES   (FARM_ALLOC_MAX_OBJECT / FARM_ALLOC_LINE)
#define FARM_ALLOC_MAX_REGIONS 1024
/* A slab block is 1 to 7 MiB (per class); regions of 8 MiB and up hold a
 * block of every class. */
#define FARM_ALLOC_MAX_BLOCK_MB 7
#define FARM_ALLOC_MAX_SLABS    65535
/* Region sizes the allocator accepts: powers of two in [2 MiB, 4 GiB]. */
#define FARM_ALLOC_MIN_REGION (2ull << 20)
#define FARM_ALLOC_MAX_REGION (1ull << 32)

/* ---- size classes ------------------------------------------------------ */

/*
 * farm_alloc_class_of() - the size class for @size stored bytes (header
 * included). Returns the class (0..255), -EINVAL for 0, -E2BIG above 1 MiB.
 */
int farm_alloc_class_of(uint64_t size);
/* Bytes of a slot of class @cls (a multiple of 64); 0 for a bad class. */
uint32_t farm_alloc_class_size(int cls);
/* MiB in one slab block of class @cls (1..FARM_ALLOC_MAX_BLOCK_MB). */
uint32_t farm_alloc_class_block_mb(int cls);

/* Internal fragmentation of the class table (README.md, "size classes"). */
struct farm_alloc_frag {
	double avg;           /* mean over classes of the class average */
	double max;           /* max over classes of the class worst case */
	double max_avg;       /* max over classes of the class average */
	double req_avg;       /* mean over all 16384 line-granular requests */
	uint32_t exact_lines; /* classes 1..exact_lines lines are every line */
	/* Byte-granular requests (16 B..1 MiB, each size once), apart: */
	double line_avg;       /* mean waste of rounding up to whole lines */
	double line_max;       /* its worst case (65 B -> 128 B) */
	double bytes_avg;      /* mean waste of lines and class together */
	double block_tail_max; /* worst slab-block tail left unused */
};
void farm_alloc_frag_compute(struct farm_alloc_frag *f);

/* ---- block allocator (machine-wide) ----------------------------------- */

/* A region as the allocator sees it. @base must be 64-byte aligned and the
 * memory zero-filled when it is first handed over (farm_region_create()
 * gives both); @size a power of two in [2 MiB, 4 GiB]. */
struct farm_alloc_region {
	uint32_t id;
	void *base;
	uint64_t size;
};

/*
 * Supplies a new, zero-filled local region for the block allocator, which
 * formats it. @near_region is the region the new one should be near (same
 * virtual ring, nearby position) or FARM_REGION_ID_NONE. Returns 0 and fills
 * *out, or a negative code. Called with the block allocator's lock held: it
 * must not call back into the allocator.
 */
typedef int (*farm_alloc_new_region_fn)(void *ctx, uint32_t near_region,
                                        struct farm_alloc_region *out);

typedef struct farm_blockalloc farm_blockalloc;
typedef struct farm_slab farm_slab;

struct farm_blockalloc_attr {
	farm_alloc_new_region_fn new_region; /* may be NULL: no growth */
	void *ctx;
};

FARM_MUST_CHECK int farm_blockalloc_create(const struct farm_blockalloc_attr *a,
                                           farm_blockalloc **out);
/* Frees the allocator's own state (never region memory). Every slab must be
 * destroyed first. */
void farm_blockalloc_destroy(farm_blockalloc *ba);

/*
 * farm_blockalloc_add_region() - format a fresh, zeroed region (header and
 * block table in block 0) and make it available. -EEXIST for a region id
 * already known, -EINVAL for a bad size/base/id, FARM_ECORRUPT when the
 * memory is not zero where the table goes.
 */
FARM_MUST_CHECK int
farm_blockalloc_add_region(farm_blockalloc *ba,
                           const struct farm_alloc_region *r);

/*
 * farm_blockalloc_rebuild_region() - adopt a region that an allocator has
 * already formatted and used (a replica's memory during recovery), rebuilding
 * block states, per-block free slots and allocated objects by scanning its
 * block table and object headers. Its slab blocks become unowned; any slab
 * adopts them when it needs a block of their class. A block the table says
 * is FREE but whose memory is not all zero (data the table does not
 * describe: a replica's copy of a large array's run) is made UNUSABLE and
 * never handed out (counted: blocks_unusable). Returns 0, or FARM_ECORRUPT
 * (bad header or table) with nothing added.
 */
FARM_MUST_CHECK int
farm_blockalloc_rebuild_region(farm_blockalloc *ba,
                               const struct farm_alloc_region *r);
/* The same, reading the object headers and the FREE blocks from @fd, the
 * file mapped at @r->base (offset 0 there), by pread: a FREE block where
 * the file has no data (lseek SEEK_DATA) is zero without a read, and no
 * page is brought into memory (on tmpfs a first read through the mapping
 * clears, or allocates and clears, each page). For a region where no object is
 * allocated or freed during the rebuild, so that the incarnation words it
 * reads hold still: a restart's, or one promoted here before its adoption
 * (commits change only versions and data, which it does not read).
 * -EINVAL for @fd < 0. */
FARM_MUST_CHECK int
farm_blockalloc_rebuild_region_fd(farm_blockalloc *ba,
                                  const struct farm_alloc_region *r, int fd);

/*
 * Replicating the block table (README.md "Replicating the block table").
 * A replica's copy of a region receives object images only; the block
 * table in block 0 is the owner's. The transaction layer carries, with each
 * new object it replicates, a 15-bit description of the object's slab block
 * (FARM_ALLOC_BINFO_BITS bits), and the replica writes it into its copy's
 * table, so a copy rebuilt by scan (farm_blockalloc_rebuild_region) after
 * promotion knows every block that holds a committed object.
 *
 * farm_alloc_block_info() - the description of the slab block holding the
 * allocated object at @a: bit 0 set, bits 8..1 the class, 11..9 the run's
 * length in MiB, 14..12 the MiB of the run the object is in. Lock-free.
 * Returns 0, -EREMOTE (not a local region), -ENOENT (not in a slab block:
 * a large array's run, or a free block), -EINVAL.
 *
 * farm_alloc_copy_note() - write @info for the object at @a into the raw
 * copy @copy of its region (@copy->id is @a's region): the region header
 * (as farm_blockalloc_add_region writes it) when block 0 is still zero, and
 * the run's table words (owner 0) where they are still FREE. Words are
 * written with compare-and-swap, so any threads may note into one copy at
 * once. Returns 1 (a word was written), 0 (all were there already),
 * -EINVAL (bad @info, @a or @copy), FARM_ECORRUPT (the copy's header or a
 * word says otherwise: nothing is written).
 */
#define FARM_ALLOC_BINFO_BITS 15
FARM_MUST_CHECK int farm_alloc_block_info(farm_blockalloc *ba, farm_gaddr a,
                                          uint32_t *info);
FARM_MUST_CHECK int farm_alloc_copy_note(const struct farm_alloc_region *copy,
                                         farm_gaddr a, uint32_t info);
/* True when @copy's block 0 holds a region header (some block was noted,
 * or an allocator formatted it). */
bool farm_alloc_copy_formatted(const struct farm_alloc_region *copy);

/*
 * farm_alloc_walk_region() - call @fn for every allocated object of the
 * region at @base (@size bytes, id @id) as its block table and object
 * headers describe it, with no allocator state (walk.c: a restart finds the
 * objects a previous incarnation left). @fn gets the object's header and
 * its slot's lines; every element of an array is an object of its own
 * (one that fits a slab slot too: @fn gets each element's header and the
 * element's lines). Returns the objects seen, 0 for a region never
 * formatted (all zero header), FARM_ECORRUPT for a bad header or table,
 * -EINVAL.
 */
struct farm_objhdr;
typedef void (*farm_alloc_walk_fn)(void *ctx, struct farm_objhdr *obj,
                                   uint32_t lines);
int farm_alloc_walk_region(void *base, uint64_t size, uint32_t id,
                           farm_alloc_walk_fn fn, void *ctx);
/* The same, and @free_fn (when not NULL) for each free slab slot whose
 * version word is locked or marked FARM_OBJHDR_FREE_PENDING (objhdr.h):
 * the state a deferred free leaves when a kill cuts it short after its
 * header's free (farm_slab_free_unlock), for a restart to unlock. */
int farm_alloc_walk_region_locked(void *base, uint64_t size, uint32_t id,
                                  farm_alloc_walk_fn fn,
                                  farm_alloc_walk_fn free_fn, void *ctx);
/* The same, reading the header, the table and every object header from
 * @fd, the file mapped at @base (offset 0 there), by pread, and calling
 * @fn only for an allocated object whose version word is locked or
 * marked FARM_OBJHDR_FREE_PENDING (with its header's address at @base);
 * returns every allocated object counted all the same. For a walk no one
 * else writes during (a restart's): it touches the mapping only where a
 * callback is due. -EINVAL for @fd < 0. */
int farm_alloc_walk_region_fd(void *base, uint64_t size, uint32_t id, int fd,
                              farm_alloc_walk_fn fn, farm_alloc_walk_fn free_fn,
                              void *ctx);
/* Is a region file's first 16 bytes (@magic, @region_id at offset 8) a
 * header of region @id, or never formatted (0)? 1: bad magic (offset 0),
 * 2: another region's header (offset 8). */
int farm_alloc_region_check(uint64_t magic, uint32_t region_id, uint32_t id);

/* Local pointer to @len bytes at @a, or NULL if @a is not in a local region
 * or the range leaves it. Lock-free. */
void *farm_alloc_local(farm_blockalloc *ba, farm_gaddr a, uint64_t len);
/* Global address of local pointer @p: 0, or -EINVAL if @p is in no region. */
FARM_MUST_CHECK int farm_alloc_gaddr_of(farm_blockalloc *ba, const void *p,
                                        farm_gaddr *out);
/* True when @region_id is a local region of @ba. */
bool farm_alloc_region_is_local(farm_blockalloc *ba, uint32_t region_id);

/*
 * farm_blockalloc_dump() - write a canonical description of the allocator
 * state to @f: per region (by id) every non-free block-table word; per slab
 * block its class and the sorted set of free slots as the allocator's own
 * lists hold it (local free list, remote-free stack, never-used tail), and
 * the count of allocated slots; per array its elements. Two allocators with
 * the same state write the same text. Only while no slab is in use.
 * Returns 0, or FARM_ECORRUPT when a free-listed slot's header says
 * allocated (or the reverse); the text names it.
 */
FARM_MUST_CHECK int farm_blockalloc_dump(farm_blockalloc *ba, FILE *f);

/*
 * Object layout of a region, from an image of its first
 * farm_alloc_meta_bytes() bytes (header and block table) read from any
 * copy (layout.c; data recovery copies regions object by object). For
 * 1 MiB block @b: FARM_LAYOUT_SKIP (free or retired: no object lives
 * there), FARM_LAYOUT_UNKNOWN (the image has no header, or the block is
 * UNUSABLE: data the table does not describe; nothing says),
 * FARM_LAYOUT_META (the header and table: [run_off, run_off + run_len) is raw
 * metadata), or FARM_LAYOUT_SLOTS (the run [run_off, run_off + run_len) that @b
 * belongs to holds @nslots objects of @slot_bytes each from run_off). Returns
 * 0, -EINVAL, or FARM_ECORRUPT for a header or table word that makes no sense.
 */
enum {
	FARM_LAYOUT_SKIP = 0,
	FARM_LAYOUT_META,
	FARM_LAYOUT_SLOTS,
	FARM_LAYOUT_UNKNOWN, /* no header: see farm_alloc_block_infer */
};
struct farm_alloc_layout {
	int kind;
	uint64_t run_off, run_len;
	uint32_t slot_bytes;
	uint64_t nslots;
};
uint64_t farm_alloc_meta_bytes(uint64_t region_size);
/*
 * farm_alloc_block_infer() - the layout of block @b of a region whose
 * header and table are not there (FARM_LAYOUT_UNKNOWN), from @incarn, the
 * incarnation word of the object at the block's first byte (0: never
 * allocated): a slab run of that object's size class, as long as the
 * class's slab blocks, or nothing. Arrays are not told apart from slabs:
 * a large array of elements over 38 lines (its stride is the element, not
 * the class); a block of a large array's run that starts inside an
 * element (it reads as nothing); a small array in the block's first slot
 * (the word is its element's, so the element's class is taken for the
 * slot's and later slots are misread). A copy given any slab block's
 * description has a header (farm_alloc_copy_note), so only a region whose
 * copies never were (large arrays only) is inferred; FARM_ECORRUPT for an
 * impossible size.
 */
FARM_MUST_CHECK int farm_alloc_block_infer(uint64_t region_size, uint32_t b,
                                           uint64_t incarn,
                                           struct farm_alloc_layout *out);
FARM_MUST_CHECK int farm_alloc_block_layout(const void *meta, uint64_t meta_len,
                                            uint64_t region_size, uint32_t b,
                                            struct farm_alloc_layout *out);

/* ---- slab allocators (one per thread) --------------------------------- */

FARM_MUST_CHECK int farm_slab_create(farm_blockalloc *ba, farm_slab **out);
/* The slab's blocks become unowned (adopted later by other slabs); objects
 * in them stay allocated. Its counters stay in the block allocator's sums. */
void farm_slab_destroy(farm_slab *s);

/*
 * farm_slab_alloc() - allocate an object of @size stored bytes (16-byte
 * header included) and return its address in *out. Sets the allocated bit;
 * the incarnation is unchanged. @hint, unless FARM_GADDR_NULL, is an existing
 * object's address; the object goes, in this order (README.md "hints"):
 *   1. into the hint's block (a slab block of this class owned by @s with a
 *      free slot),
 *   2. into the hint's region (a block of @s of this class there with room,
 *      an unowned one, or a new block there),
 *   3. into a region near it (one created earlier near it, else a new one
 *      from the callback with near_region = the hint's region).
 * Which level was used is counted (farm_slab_stats()). Returns 0, -EINVAL
 * (size 0, or a hint offset outside its region), -E2BIG (over 1 MiB),
 * -EREMOTE (the hint's region is not local: allocate on its owner), -ENOMEM.
 */
FARM_MUST_CHECK int farm_slab_alloc(farm_slab *s, uint64_t size,
                                    farm_gaddr hint, farm_gaddr *out);
/*
 * farm_slab_alloc_marked() - farm_slab_alloc() whose claim also sets @mark
 * (bits of FARM_OBJHDR_MARK_MASK) in the slot's version word, the rest of
 * the word kept (FARM_OBJHDR_FREE_PENDING cleared), before the allocated
 * bit is visible: no reader, local or a one-sided READ, ever sees the slot
 * allocated without the mark (objhdr.h). For an owner that must keep a
 * new object from looking settled until it says so (the transaction
 * layer's lock mode); the owner clears the mark, also before it frees the
 * object. -EINVAL for bits outside the mask; otherwise as
 * farm_slab_alloc().
 */
FARM_MUST_CHECK int farm_slab_alloc_marked(farm_slab *s, uint64_t size,
                                           farm_gaddr hint, uint64_t mark,
                                           farm_gaddr *out);

/*
 * farm_slab_free() - free the object at @a: clears its allocated bit and
 * bumps its incarnation with one compare-and-swap, then makes the slot
 * reusable for the same class at once. Any slab may free any object of the
 * same block allocator. Returns 0, -EINVAL (NULL, misaligned, outside a
 * region, not the start of a slot of a slab block), -ENOENT (not allocated:
 * never allocated or already freed), -EREMOTE (not a local region). On error
 * nothing changes.
 */
FARM_MUST_CHECK int farm_slab_free(farm_slab *s, farm_gaddr a);

/*
 * farm_slab_free_unlock() - farm_slab_free() of an object its free left
 * locked (and maybe marked FARM_OBJHDR_FREE_PENDING: a deferred free,
 * src/alloc/galloc_adopt.c): the header freed, then @then stored in its
 * version word (release), then the slot made reusable. So the word is
 * this object's until the store (no next object of the slot can have
 * it), and a kill at any point leaves the header allocated with the word
 * as the caller left it, or freed. Errors as farm_slab_free (nothing
 * stored then).
 */
FARM_MUST_CHECK int farm_slab_free_unlock(farm_slab *s, farm_gaddr a,
                                          uint64_t then);

/*
 * farm_alloc_array() - @n contiguous elements of @elem_size stored bytes
 * each (rounded up to whole lines; each element an object with its own
 * header, allocated bit set). Returns element 0's address; element i is at
 * *out + i * line_rounded(elem_size). Arrays of up to 1 MiB in all take one
 * slab slot of the class of their total size; larger ones take a run of
 * whole 1 MiB blocks in one region. Hints as farm_slab_alloc() (for a large
 * array: levels 2 and 3). Returns 0, -EINVAL (@n or @elem_size 0), -E2BIG
 * (element over 1 MiB, or more than a region holds), -EREMOTE, -ENOMEM.
 */
FARM_MUST_CHECK int farm_alloc_array(farm_slab *s, uint64_t elem_size,
                                     uint64_t n, farm_gaddr hint,
                                     farm_gaddr *out);
/* farm_alloc_array() with @mark set in every element's version word, as
 * farm_slab_alloc_marked() does: each element's before its allocated
 * bit. */
FARM_MUST_CHECK int farm_alloc_array_marked(farm_slab *s, uint64_t elem_size,
                                            uint64_t n, farm_gaddr hint,
                                            uint64_t mark, farm_gaddr *out);
/*
 * farm_alloc_array_free() - free a whole array, given the @elem_size and @n
 * it was allocated with (a fat pointer carries them). Every element's
 * incarnation is bumped. Returns 0, -EINVAL (not the start of an array with
 * these dimensions), -ENOENT (not allocated), -EREMOTE.
 */
FARM_MUST_CHECK int farm_alloc_array_free(farm_slab *s, farm_gaddr a,
                                          uint64_t elem_size, uint64_t n);

/* Hint levels, for the counters. */
enum farm_alloc_hint_level {
	FARM_ALLOC_HINT_NONE = 0, /* no hint given */
	FARM_ALLOC_HINT_BLOCK,    /* placed in the hint's block */
	FARM_ALLOC_HINT_REGION,   /* in the hint's region */
	FARM_ALLOC_HINT_NEAR,     /* in a region near the hint's */
	FARM_ALLOC_HINT_REMOTE,   /* refused with -EREMOTE */
	FARM_ALLOC_HINT_NLEVELS
};

struct farm_alloc_stats {
	uint64_t allocs;       /* objects and arrays allocated */
	uint64_t frees;        /* objects and arrays freed */
	uint64_t remote_frees; /* frees of a slot in another slab's block */
	uint64_t free_errors;  /* frees refused (-EINVAL, -ENOENT) */
	int64_t bytes_in_use;  /* slot bytes (class size) + array block bytes */
	uint64_t hint[FARM_ALLOC_HINT_NLEVELS];
	/* Block allocator figures (farm_blockalloc_stats() only). */
	uint64_t regions;
	uint64_t blocks_total;   /* 1 MiB blocks in all regions, block 0 too */
	uint64_t blocks_in_use;  /* slab, array and table blocks */
	uint64_t blocks_retired; /* freed array blocks awaiting an epoch */
	uint64_t blocks_reclaimed; /* retired blocks freed by epochs, in all */
	uint64_t blocks_unusable;  /* FREE yet not zero at a rebuild: never
	                              reused (in blocks_in_use) */
};

/*
 * farm_blockalloc_retire_region() - forget region @id: this machine no
 * longer owns it (another machine became its primary; README.md "Retiring
 * a region"). Any thread, while slabs keep running. When it returns, every
 * call that starts afterwards treats @id as not local (-EREMOTE for frees
 * and hints, NULL from farm_alloc_local), no slab hands out a slot of it
 * (each slab drops its blocks of @id the next time it would use one), no
 * block is carved in it, and the allocator writes nothing more in its
 * memory (not even its block table; a retired run of it is never zeroed),
 * so the caller may discard the memory once the calls that overlapped this
 * one have finished. The region stays as a tombstone; a later
 * farm_blockalloc_rebuild_region() of the same id (a fresh copy, at any
 * base) adds it anew. Returns 0, -EINVAL, -ENOENT (no live region @id).
 */
FARM_MUST_CHECK int farm_blockalloc_retire_region(farm_blockalloc *ba,
                                                  uint32_t id);

/*
 * Distributed epochs (run by the transaction layer, src/txn/epoch.c): a
 * freed large array's blocks are RETIRED, stamped with the current
 * generation, and become free blocks (of any use) only once every
 * operation that could still read them has finished everywhere.
 *
 * farm_blockalloc_epoch_mark() - the generation of runs retired so far
 * (later retires get a larger one). Take it when an epoch starts.
 * farm_blockalloc_reclaim() - once that epoch has ended on every machine:
 * runs retired at or before @mark are zeroed and freed. Returns the
 * blocks freed. Any thread.
 */
uint64_t farm_blockalloc_epoch_mark(farm_blockalloc *ba);
uint64_t farm_blockalloc_reclaim(farm_blockalloc *ba, uint64_t mark);
/* Block counts (cheaper than farm_blockalloc_stats). */
void farm_blockalloc_blocks(farm_blockalloc *ba, uint64_t *total,
                            uint64_t *in_use, uint64_t *retired);

/* This slab's counters (any thread; figures are each read atomically). */
void farm_slab_stats(const farm_slab *s, struct farm_alloc_stats *st);
/* Sums over every slab ever created on @ba, plus the block figures. */
void farm_blockalloc_stats(farm_blockalloc *ba, struct farm_alloc_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* FARM_ALLOC_ALLOC_H */
