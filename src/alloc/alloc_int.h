/*
 * Allocator internals shared by block.c, slab.c and slab_array.c (and the
 * files that read a region's layout). Not an API.
 *
 * Block-table word (8 bytes per 1 MiB block, region block 0 at offset 64;
 * README.md has the table):
 *   bits 63..60 type
 *   FREE    (0) all zero
 *   TABLE   (1) bits 31..0: blocks the table occupies (1: block 0)
 *   SLAB    (2) bits 7..0 class, 15..8 length in MiB (1..7),
 *               31..16 owner slab id (0: unowned)
 *   ARRAY   (3) bits 12..0 length in MiB, 27..13 element lines,
 *               54..28 element count
 *   CONT    (4) bits 31..0 index of the head block of the run
 *   RETIRED (5) as ARRAY: a freed array whose blocks wait for a distributed
 *               epoch before reuse
 *   UNUSABLE (6) bits 31..0: 1. A block a rebuild found FREE in the table
 *               but not zero (committed data the table does not describe,
 *               e.g. a large array in a replica's copy): never reused
 */
#ifndef FARM_ALLOC_INT_H
#define FARM_ALLOC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "alloc/alloc.h"
#include "util/common.h"
#include "util/stat.h"

enum bt_type {
	BT_FREE = 0,
	BT_TABLE = 1,
	BT_SLAB = 2,
	BT_ARRAY = 3,
	BT_CONT = 4,
	BT_RETIRED = 5,
	BT_UNUSABLE = 6,
};

static inline unsigned bt_type(uint64_t w)
{
	return (unsigned)(w >> 60);
}
static inline uint64_t bt_table(uint32_t n)
{
	return (uint64_t)BT_TABLE << 60 | n;
}
static inline uint64_t bt_slab(unsigned cls, unsigned mb, unsigned owner)
{
	return (uint64_t)BT_SLAB << 60 | (uint64_t)owner << 16 |
	       (uint64_t)mb << 8 | cls;
}
static inline unsigned bt_slab_cls(uint64_t w)
{
	return (unsigned)(w & 0xff);
}
static inline unsigned bt_slab_mb(uint64_t w)
{
	return (unsigned)((w >> 8) & 0xff);
}
static inline unsigned bt_slab_owner(uint64_t w)
{
	return (unsigned)((w >> 16) & 0xffff);
}
static inline uint64_t bt_array(unsigned type, uint32_t mb, uint32_t elines,
                                uint64_t n)
{
	return (uint64_t)type << 60 | n << 28 | (uint64_t)elines << 13 | mb;
}
static inline uint32_t bt_array_mb(uint64_t w)
{
	return (uint32_t)(w & 0x1fff);
}
static inline uint32_t bt_array_elines(uint64_t w)
{
	return (uint32_t)((w >> 13) & 0x7fff);
}
static inline uint64_t bt_array_n(uint64_t w)
{
	return (w >> 28) & ((1ull << 27) - 1);
}
static inline uint64_t bt_unusable(void)
{
	return (uint64_t)BT_UNUSABLE << 60 | 1;
}
static inline uint64_t bt_cont(uint32_t head)
{
	return (uint64_t)BT_CONT << 60 | head;
}
static inline uint32_t bt_cont_head(uint64_t w)
{
	return (uint32_t)w;
}

/* Region header at offset 0 of block 0; the table follows at 64. */
#define FARM_ALLOC_MAGIC 0x314350414d524146ull /* "FARMAPC1" */
struct farm_alloc_rhdr {
	uint64_t magic;
	uint32_t region_id;
	uint32_t nblocks;
	uint32_t table_off;
	uint32_t layout; /* 1 */
	uint64_t pad[5];
};
#define RHDR_TABLE_OFF 64u

struct farm_block;

/* A local region, as the block allocator keeps it (DRAM). */
struct ba_region {
	uint32_t id;
	uint32_t nblocks;
	char *base;
	uint64_t size;
	_Atomic uint64_t *table;
	/* Slab block covering each 1 MiB block, or NULL. Set (release) before
	 * any object of the block is handed out; never cleared. */
	_Atomic(struct farm_block *) *meta;
	/* Set (release) once, under the lock, by farm_blockalloc_retire_region:
	 * the region is a tombstone, skipped by every lookup and never written
	 * again. Read relaxed (coherence orders it for calls that start after
	 * the retire returned) or under the lock. */
	_Atomic bool retired;
	/* Under the lock: */
	struct ba_region *spill; /* the region created near this one */
	uint32_t scan_from;      /* no free block below this index */
};

/*
 * A slab block: one class, slots of `slot` bytes from the block start.
 * Free slots are linked through the word at offset 16 of each slot (after
 * the header), so the list costs no memory; a freed slot's contents are
 * garbage anyway (readers check the incarnation).
 */
struct farm_block {
	struct ba_region *r;
	char *base;
	farm_gaddr gbase;
	uint32_t bidx;
	uint32_t len_mb;
	uint32_t slot;
	uint32_t nslots;
	uint64_t
	        slot_inv; /* rel / slot == (rel * slot_inv) >> SLOT_INV_SHIFT */
	uint8_t cls;
	/* Set (release, under the lock) when the block's region is retired:
	 * the owner stops taking slots from it and drops it from its lists,
	 * freers refuse its slots (-EREMOTE). In the first cache line, which
	 * alloc and free read anyway, so the check costs a relaxed load of a
	 * line already fetched and a branch never taken. */
	_Atomic uint8_t retired;
	/* The owning slab, or NULL (unowned: on the block allocator's orphan
	 * list). Written by the owner (destroy) or the adopter, under the lock;
	 * freers compare it with themselves only. */
	_Atomic(struct farm_slab *) owner;
	/* Owner-only (or under the lock while unowned): */
	char *free_head;
	uint32_t next_fresh; /* slots [next_fresh, nslots) never used */
	struct farm_block *orphan_next;
	/* Remote frees: a Treiber stack pushed by any thread (CAS, release)
	 * and taken whole by the owner (exchange, acquire): no ABA, since the
	 * owner never pops single entries. */
	FARM_CL_ALIGNED _Atomic(char *) remote_head;
};

/* Division by the slot size as a multiply: with m = 2^44 / slot + 1, the
 * error of rel * m / 2^44 is below rel / 2^44 < 2^-21 (rel < 7 MiB), less
 * than 1 / slot (slot <= 2^20), so the quotient is exact; m < 2^39 and
 * rel * m < 2^62. */
#define SLOT_INV_SHIFT 44
/*
 * The same product tells whether rel is a multiple of the slot: with
 * rel = q * slot + r and slot * m = 2^44 + e (0 < e <= slot),
 * rel * m = q * 2^44 + q * e + r * m, where q * e <= rel < 2^23 < m
 * (m > 2^24 since slot <= 2^20) and, for 0 < r < slot, m <= q * e + r * m
 * < 2^44. So the low 44 bits are below m exactly when r == 0 (free checks
 * this instead of multiplying back; test_alloc checks every offset).
 */
#define SLOT_INV_FRAC ((1ull << SLOT_INV_SHIFT) - 1)

#define RTAB_BITS 11
#define RTAB_SIZE (1u << RTAB_BITS)

struct farm_slab_cls {
	struct farm_block *cur;
	/* The block of the owner's last local free of this class (it has a
	 * free slot unless allocated from since): where alloc looks first when
	 * `cur` runs dry, before scanning `blocks`. Owner-only; always one of
	 * `blocks` (cleared with them on destroy). */
	struct farm_block *spare;
	struct farm_block **blocks;
	uint32_t nblocks;
	uint32_t cap;
	/* Slots of this class allocated (objects and small arrays) and freed
	 * by this slab: written only by the owner (relaxed load + store, no
	 * read-modify-write), read by any thread; farm_slab_stats() derives
	 * allocs, frees, bytes in use and hint[NONE] from them. Kept by
	 * destroy. */
	_Atomic uint64_t nalloc, nfree;
};

struct farm_slab {
	farm_blockalloc *ba;
	uint16_t id;
	bool dead;
	/* One-entry region cache, owner-only, with the fields free needs
	 * copied in so the slot address is one load from the slab (README.md
	 * "free"). rc_id 0 never names a region; rc_size 0 then refuses every
	 * offset. */
	uint32_t rc_id;
	uint64_t rc_size;
	char *rc_base;
	_Atomic(struct farm_block *) *rc_meta;
	struct ba_region *last_r;
	/* The block allocator's region_gen when this slab last dropped its
	 * retired blocks (slab_sync). Owner-only. */
	uint64_t region_gen;
	const uint8_t *line_cls; /* size-class table: lines -> class */
	/* Counters: written only by the owning thread, read by any. Slot
	 * allocations and frees are counted per class (farm_slab_cls); allocs,
	 * frees, bytes and hint[] here count the rest (large arrays), and
	 * `hinted` the slot allocations placed by a hint (levels 1..3), so
	 * hint[NONE] = hint[NONE] here + the class allocs - hinted. */
	_Atomic uint64_t allocs, frees, remote_frees, free_errors;
	_Atomic int64_t bytes;
	_Atomic uint64_t hint[FARM_ALLOC_HINT_NLEVELS];
	_Atomic uint64_t hinted;
	struct farm_slab_cls cls[FARM_ALLOC_NCLASSES];
};

/* A freed large array's run, waiting for a distributed epoch. */
struct ba_retired {
	struct ba_region *r;
	uint32_t bidx, mb;
	uint64_t gen; /* farm_blockalloc_epoch_mark() generation at retire */
	struct ba_retired *next;
};

struct farm_blockalloc {
	pthread_mutex_t lock;
	farm_alloc_new_region_fn new_region;
	void *ctx;
	_Atomic(struct ba_region *) rtab[RTAB_SIZE];
	struct ba_region *regions[FARM_ALLOC_MAX_REGIONS];
	_Atomic uint32_t nregions;
	/* Under the lock: */
	struct ba_region *cur_region;
	struct farm_block *orphans[FARM_ALLOC_NCLASSES];
	struct farm_slab **slabs;
	uint32_t nslabs, slab_cap;
	uint64_t blocks_total, blocks_in_use, blocks_retired;
	/* Retired runs (newest first) and the generation a retire gets now. */
	struct ba_retired *retired;
	uint64_t retire_gen;
	uint64_t blocks_reclaimed; /* retired blocks freed by epochs */
	uint64_t blocks_unusable;  /* FREE but not zero at a rebuild */
	/* Objects found by rebuild (no slab counted them), and array blocks
	 * counted in bytes: */
	int64_t base_bytes;
	uint64_t base_allocs;
	/* farm_blockalloc_reclaim()s zeroing runs outside the lock; a retire
	 * waits (idle_cv) until none is, so none writes a retired region. */
	unsigned reclaiming;
	pthread_cond_t idle_cv;
	uint32_t nretired_regions; /* tombstones in regions[] */
	/* Bumped (release) after a retire has flagged its region and blocks;
	 * each slab compares it in its slow paths (acquire) and drops the
	 * retired blocks from its lists. Its own line: read-mostly. */
	FARM_CL_ALIGNED _Atomic uint64_t region_gen;
};

/* Region lookup by id; lock-free (entries are published with release, in
 * farm_ba_region_publish, and never removed while the allocator lives). A
 * retired region stays in the table as a tombstone and is skipped: a later
 * region of the same id (re-adopted) sits further along the same probe chain.
 */
static inline struct ba_region *ba_lookup(farm_blockalloc *ba, uint32_t id)
{
	uint32_t i = (id * 0x9e3779b1u) >> (32 - RTAB_BITS);
	for (uint32_t n = 0; n < RTAB_SIZE;
	     n++, i = (i + 1) & (RTAB_SIZE - 1)) {
		/* Pairs with the release store of the entry in
		 * farm_ba_region_publish (block.c). */
		struct ba_region *r = atomic_load_explicit(
		        &ba->rtab[i], memory_order_acquire);
		if (!r)
			return NULL;
		if (r->id == id &&
		    !atomic_load_explicit(&r->retired, memory_order_relaxed))
			return r;
	}
	return NULL;
}

static inline char *slot_link(const char *p)
{
	char *n;
	memcpy(&n, p + FARM_OBJHDR_SIZE, sizeof(n));
	return n;
}
static inline void slot_set_link(char *p, char *n)
{
	memcpy(p + FARM_OBJHDR_SIZE, &n, sizeof(n));
}

/* Size-class tables (sizeclass.c), valid after any farm_alloc_class_*(). */
FARM_INTERNAL const uint8_t *farm_alloc_line_cls_table(void);

/* block.c, called with ba->lock held. */
FARM_INTERNAL int farm_ba_new_slab_block_locked(farm_blockalloc *ba,
                                                farm_slab *s, unsigned cls,
                                                struct ba_region *r,
                                                struct farm_block **out);
FARM_INTERNAL int farm_ba_take_run_locked(farm_blockalloc *ba,
                                          struct ba_region *r, uint32_t nmb,
                                          uint32_t *bidx);
FARM_INTERNAL int farm_ba_grow_locked(farm_blockalloc *ba, uint32_t near,
                                      struct ba_region **out);
FARM_INTERNAL void farm_ba_set_owner_locked(struct farm_block *b, farm_slab *s);
FARM_INTERNAL void farm_ba_retire_locked(farm_blockalloc *ba,
                                         struct ba_region *r, uint32_t bidx,
                                         uint32_t mb, uint64_t gen);
FARM_INTERNAL void farm_ba_write_run(struct ba_region *r, uint32_t bidx,
                                     uint32_t nmb, uint64_t head);

/* block.c, shared with the rebuild (block_rebuild.c): a region's checks,
 * its making, its publication (under ba->lock), a slab block's metadata
 * and its publication, and the freeing of a region's metadata. */
FARM_INTERNAL int farm_ba_check_region_arg(farm_blockalloc *ba,
                                           const struct farm_alloc_region *r);
FARM_INTERNAL struct ba_region *
farm_ba_region_new(const struct farm_alloc_region *ar);
FARM_INTERNAL void farm_ba_region_publish(farm_blockalloc *ba,
                                          struct ba_region *r);
FARM_INTERNAL struct farm_block *
farm_ba_block_meta_new(struct ba_region *r, uint32_t bidx, unsigned cls);
FARM_INTERNAL void farm_ba_meta_publish(struct farm_block *b);
FARM_INTERNAL void farm_ba_free_metas(struct ba_region *r);

/* ---- reading a region's file (walk.c) ------------------------------------
 * A restart reads its copies' headers by pread (walk.c, block_rebuild.c).
 * Headers of slots at most ALLOC_FREAD_DENSE bytes apart come in windows of
 * ALLOC_FREAD_WIN bytes, one pread for many (a pread per 64-byte slot cost
 * more than the page faults it replaced); sparser ones are read alone (a
 * window would read mostly object bodies). */
#define ALLOC_FREAD_WIN   (64u << 10)
#define ALLOC_FREAD_DENSE 1024u

struct alloc_fread {
	int fd;
	uint32_t len;   /* bytes of the window read; 0: none */
	uint64_t start; /* the window's offset in the file */
	uint8_t *buf;   /* ALLOC_FREAD_WIN bytes, or NULL: each read alone */
};

/* A reader of @fd, its window allocated (without memory: reads alone). */
void farm_alloc_fread_init(struct alloc_fread *r, int fd);
void farm_alloc_fread_fini(struct alloc_fread *r);
/* @n bytes at @off of the file into @out, the reads that follow being
 * @stride bytes apart; false: not read. A window is never refreshed:
 * for reads of bytes no one writes meanwhile (farm_alloc_fread_drop
 * forgets it). */
bool farm_alloc_fread(struct alloc_fread *r, uint64_t off, void *out,
                      uint32_t n, uint64_t stride);
static inline void farm_alloc_fread_drop(struct alloc_fread *r)
{
	r->len = 0;
}

#endif /* FARM_ALLOC_INT_H */
