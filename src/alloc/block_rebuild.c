/*
 * Rebuilding a region's block allocator state from the region itself
 * (its memory, or its file by pread): after a whole-cluster restart or
 * when a promoted copy is adopted. The block table is checked word by
 * word (a run's continuations must name its head), every slab block's
 * slots are scanned for their incarnations and in-use counts, blocks
 * marked free but dirty are fenced off, and the region is published
 * only once all of it holds (block.c's invariants then apply).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc_int.h"
#include "util/fault.h"

static bool conts_ok(struct ba_region *r, uint32_t bidx, uint32_t mb)
{
	if (mb == 0 || bidx + mb > r->nblocks)
		return false;
	for (uint32_t i = 1; i < mb; i++) {
		/* Acquire: pairs with the release stores of farm_ba_write_run.
		 */
		uint64_t w = atomic_load_explicit(&r->table[bidx + i],
		                                  memory_order_acquire);
		if (bt_type(w) != BT_CONT || bt_cont_head(w) != bidx)
			return false;
	}
	return true;
}

/* Where a rebuild reads the object headers and the free blocks: the
 * memory, or (@fd >= 0) the region's file by pread, with @bits (a bit
 * per slot of a block, FARM_ALLOC_MAX_BLOCK_MB MiB of 64-byte slots) for
 * the allocated slots it read (farm_blockalloc_rebuild_region_fd). */
struct rebuild_src {
	int fd;
	uint64_t *bits;
	struct alloc_fread fr; /* dropped before each block: its free slots
	                          are linked through the mapping */
};
#define SRC_BITS_WORDS                                          \
	((uint64_t)FARM_ALLOC_MAX_BLOCK_MB * FARM_ALLOC_BLOCK / \
	 FARM_ALLOC_LINE / 64)

/* The incarnation word of slot @i of @b: false, the file not read. */
static bool slot_incarn(const struct ba_region *r, const struct farm_block *b,
                        struct rebuild_src *src, uint32_t i, uint64_t *w)
{
	char *p = b->base + (uint64_t)i * b->slot;
	if (src->fd < 0) {
		*w = farm_objhdr_load_incarn((void *)p);
		return true;
	}
	return farm_alloc_fread(&src->fr, (uint64_t)(p - r->base) + 8, w, 8,
	                        b->slot);
}

/* Free slots of a scanned block: every slot below the high-water mark (the
 * last one that was ever allocated) whose allocated bit is clear goes on the
 * free list, lowest first; the rest are never-used. -1: the file not read. */
static int64_t scan_block(const struct ba_region *r, struct farm_block *b,
                          struct rebuild_src *src, uint64_t *nalloc)
{
	uint32_t hw = 0;
	uint64_t n = 0;
	if (src->fd >= 0) {
		farm_alloc_fread_drop(&src->fr);
		memset(src->bits, 0, ((b->nslots + 63) / 64) * 8);
	}
	for (uint32_t i = 0; i < b->nslots; i++) {
		uint64_t w;
		if (!slot_incarn(r, b, src, i, &w))
			return -1;
		if (w)
			hw = i + 1;
		if (farm_incarn_allocated(w)) {
			n++;
			if (src->fd >= 0)
				src->bits[i / 64] |= 1ull << (i % 64);
		}
	}
	b->next_fresh = hw;
	b->free_head = NULL;
	for (uint32_t i = hw; i-- > 0;) {
		char *p = b->base + (uint64_t)i * b->slot;
		bool used = src->fd >= 0 ? (src->bits[i / 64] >> (i % 64)) & 1
		                         : farm_objhdr_allocated((void *)p);
		if (!used) {
			slot_set_link(p, b->free_head);
			b->free_head = p;
		}
	}
	*nalloc = n;
	return (int64_t)n * b->slot;
}

static bool block_zero(const struct ba_region *r, uint32_t bidx)
{
	const uint64_t *w =
	        (const uint64_t *)(r->base + (uint64_t)bidx * FARM_ALLOC_BLOCK);
	uint64_t any = 0;
	for (uint32_t i = 0; i < FARM_ALLOC_BLOCK / 8; i += 8) {
		for (uint32_t k = 0; k < 8; k++)
			any |= w[i + k];
		if (any)
			return false;
	}
	return true;
}

/* Whether the header of @ar's memory describes @ar in this layout. */
static bool rhdr_matches(const struct farm_alloc_region *ar)
{
	const struct farm_alloc_rhdr *h = ar->base;
	return h->magic == FARM_ALLOC_MAGIC && h->region_id == ar->id &&
	       h->nblocks == ar->size / FARM_ALLOC_BLOCK &&
	       h->table_off == RHDR_TABLE_OFF && h->layout == 1;
}

/* What a rebuild found, added to the allocator's counters once the
 * region is valid. */
struct rebuild_count {
	uint64_t in_use, retired, allocs, unusable;
	int64_t bytes;
	struct rebuild_src src;
};

/* The slab run whose head word @w is at block @i: its metadata, with the
 * free slots found by scanning. */
static int rebuild_slab(struct ba_region *r, uint32_t i, uint64_t w,
                        struct rebuild_count *c)
{
	unsigned cls = bt_slab_cls(w);
	uint32_t mb = bt_slab_mb(w);
	if (mb != farm_alloc_class_block_mb((int)cls) || !conts_ok(r, i, mb))
		return FARM_ECORRUPT;
	struct farm_block *b = farm_ba_block_meta_new(r, i, cls);
	if (!b)
		return -ENOMEM;
	farm_ba_meta_publish(b);
	uint64_t n;
	int64_t bytes = scan_block(r, b, &c->src, &n);
	if (bytes < 0)
		return FARM_ECORRUPT;
	c->bytes += bytes;
	c->allocs += n;
	c->in_use += mb;
	return 0;
}

/* The array run (live or retired) whose head word @w is at block @i. */
static int rebuild_array(farm_blockalloc *ba, struct ba_region *r, uint32_t i,
                         uint64_t w, struct rebuild_count *c)
{
	uint32_t mb = bt_array_mb(w);
	if (!conts_ok(r, i, mb) ||
	    (uint64_t)bt_array_elines(w) * FARM_ALLOC_LINE * bt_array_n(w) >
	            (uint64_t)mb * FARM_ALLOC_BLOCK)
		return FARM_ECORRUPT;
	if (bt_type(w) == BT_ARRAY) {
		c->in_use += mb;
		c->bytes += (int64_t)mb * FARM_ALLOC_BLOCK;
		c->allocs++;
	} else {
		c->retired += mb;
		/* Freed before the rebuild: generation 0, so the next epoch
		 * frees it. */
		farm_ba_retire_locked(ba, r, i, mb, 0);
	}
	return 0;
}

/* Walk the block table of @r run by run, checking each run and rebuilding
 * its metadata. */
static int rebuild_table(farm_blockalloc *ba, struct ba_region *r,
                         struct rebuild_count *c)
{
	for (uint32_t i = 1; i < r->nblocks;) {
		/* Acquire: pairs with the release stores of the table
		 * (farm_ba_write_run, farm_alloc_copy_note's word_claim). */
		uint64_t w = atomic_load_explicit(&r->table[i],
		                                  memory_order_acquire);
		uint32_t mb = 1;
		int rc = 0;
		switch (bt_type(w)) {
		case BT_FREE: break;
		case BT_SLAB:
			rc = rebuild_slab(r, i, w, c);
			mb = bt_slab_mb(w);
			break;
		case BT_ARRAY:
		case BT_RETIRED:
			rc = rebuild_array(ba, r, i, w, c);
			mb = bt_array_mb(w);
			break;
		case BT_UNUSABLE:
			if (w != bt_unusable())
				return FARM_ECORRUPT;
			c->in_use++;
			c->unusable++;
			break;
		default: return FARM_ECORRUPT;
		}
		if (rc)
			return rc;
		i += mb;
	}
	return 0;
}

/* The FREE blocks of a region that are not zero, found before ba->lock
 * is taken (dirty_free_scan); !done: not scanned (no memory, or a region
 * the rebuild refuses), fence_dirty_free then reads the blocks itself. */
struct dirty_free {
	uint64_t *bits; /* bit i: block i */
	bool done;
};

/* Is the FREE block at @off of the file @fd zero? Where the file has no
 * data (SEEK_DATA: a hole, or on tmpfs pages fallocated and never
 * written) it is zero without a read: reading such pages through the
 * mapping had tmpfs allocate and clear each (and fault each in), the
 * largest part of a restart's rebuild. Else read by pread, which maps
 * nothing. */
static bool block_zero_fd(int fd, uint64_t off, uint64_t *next_data)
{
	if (FARM_FAULT_SWITCH(FARM_FP_ALLOC_HOLES_SKIP))
		return true; /* testing: no look at all */
	/* *@next_data: where the last SEEK_DATA, from an offset below @off
	 * (the blocks are scanned in order), found data next; none before.
	 * Each lseek walks the file's pages up to the data, so one per
	 * block over a long hole cost them all again. */
	if (off + FARM_ALLOC_BLOCK <= *next_data)
		return true;
	off_t d = lseek(fd, (off_t)off, SEEK_DATA);
	if (d < 0 && errno == ENXIO)
		*next_data = UINT64_MAX;
	else if (d >= 0)
		*next_data = (uint64_t)d;
	if ((d < 0 && errno == ENXIO) ||
	    (d >= 0 && (uint64_t)d >= off + FARM_ALLOC_BLOCK))
		return true;
	uint64_t buf[1024];
	for (uint64_t o = 0; o < FARM_ALLOC_BLOCK; o += sizeof(buf)) {
		if (pread(fd, buf, sizeof(buf), (off_t)(off + o)) !=
		    (ssize_t)sizeof(buf))
			return false; /* unread: taken for data, never reused */
		uint64_t any = 0;
		for (unsigned k = 0; k < 1024; k++)
			any |= buf[k];
		if (any)
			return false;
	}
	return true;
}

/* Reads every free byte of the region (hundreds of ms for 64 MiB on a
 * loaded host), so it runs before ba->lock is taken: under the lock it
 * stopped loop 0 of the machine (its epoch check, farm_blockalloc_blocks,
 * every 10 ms) for the whole scan, and with it every commit that needed
 * that loop. It only reads: whether the region is new here is known only
 * under the lock (a published region's table is the allocator's, and a
 * write here would race with its allocations), so fence_dirty_free marks
 * the blocks found, under the lock, once the region is accepted. */
static void dirty_free_scan(const struct farm_alloc_region *ar, int fd,
                            struct dirty_free *d)
{
	*d = (struct dirty_free){0};
	if (!ar || !ar->base || !farm_is_pow2(ar->size) ||
	    ar->size < FARM_ALLOC_MIN_REGION ||
	    ar->size > FARM_ALLOC_MAX_REGION ||
	    ((uintptr_t)ar->base & (FARM_ALLOC_LINE - 1)) || !rhdr_matches(ar))
		return; /* refused under the lock */
	struct ba_region r = {
	        .base = ar->base,
	        .size = ar->size,
	        .nblocks = (uint32_t)(ar->size / FARM_ALLOC_BLOCK),
	        .table = (_Atomic uint64_t *)(void *)((char *)ar->base +
	                                              RHDR_TABLE_OFF)};
	if (atomic_load(&r.table[0]) != bt_table(1))
		return; /* refused under the lock (FARM_ECORRUPT) */
	d->bits = calloc((r.nblocks + 63) / 64, sizeof(*d->bits));
	if (!d->bits)
		return;         /* scanned under the lock */
	uint64_t next_data = 0; /* block_zero_fd */
	for (uint32_t i = 1; i < r.nblocks; i++)
		if (atomic_load_explicit(&r.table[i], memory_order_relaxed) ==
		            0 &&
		    !(fd >= 0 ? block_zero_fd(fd,
		                              (uint64_t)i * FARM_ALLOC_BLOCK,
		                              &next_data)
		              : block_zero(&r, i)))
			d->bits[i / 64] |= 1ull << (i % 64);
	d->done = true;
}

/* A FREE block must be zero: anything else is committed data the table
 * does not describe (a replica's copy of a large array, whose table words
 * are not carried), and handing it out would allocate over it. The blocks
 * @d found so (or, not scanned, those found now) are marked UNUSABLE.
 * A block written between the scan and here would be missed, as one
 * written after the fence always could be, under the lock or not (commits
 * do not take it): what keeps both from happening is that a region is
 * adopted only once every transaction that could still write it settled
 * (src/txn/recover.c, adopt_ready). */
static void fence_dirty_free(struct ba_region *r, const struct dirty_free *d,
                             struct rebuild_count *c)
{
	for (uint32_t i = 1; i < r->nblocks; i++)
		if (atomic_load_explicit(&r->table[i], memory_order_relaxed) ==
		            0 &&
		    (d->done ? (d->bits[i / 64] >> (i % 64)) & 1
		             : !block_zero(r, i))) {
			/* Release: pairs with the acquire loads of the
			 * table in farm_alloc_walk. */
			atomic_store_explicit(&r->table[i], bt_unusable(),
			                      memory_order_release);
			c->in_use++;
			c->unusable++;
		}
}

/* The scanned slab blocks of @r join the orphans of their class. */
static void adopt_orphans(farm_blockalloc *ba, struct ba_region *r)
{
	for (uint32_t i = 1; i < r->nblocks; i++) {
		struct farm_block *b =
		        atomic_load_explicit(&r->meta[i], memory_order_relaxed);
		if (b && b->bidx == i) {
			b->orphan_next = ba->orphans[b->cls];
			ba->orphans[b->cls] = b;
		}
	}
}

/* Forget the runs of @r a failed rebuild retired. */
static void forget_retired(farm_blockalloc *ba, const struct ba_region *r)
{
	for (struct ba_retired **pp = &ba->retired; *pp;) {
		struct ba_retired *x = *pp;
		if (x->r == r) {
			*pp = x->next;
			free(x);
		} else {
			pp = &x->next;
		}
	}
}

static int rebuild_region(farm_blockalloc *ba,
                          const struct farm_alloc_region *ar, int fd)
{
	if (!ba)
		return -EINVAL;
	struct rebuild_count c = {.in_use = 1, /* block 0: the table */
	                          .src = {.fd = fd}};
	if (fd >= 0 &&
	    !(c.src.bits = malloc(SRC_BITS_WORDS * sizeof(uint64_t))))
		return -ENOMEM;
	if (fd >= 0)
		farm_alloc_fread_init(&c.src.fr, fd);
	struct dirty_free d;
	dirty_free_scan(ar, fd, &d);
	pthread_mutex_lock(&ba->lock);
	struct ba_region *r = NULL;
	int rc = farm_ba_check_region_arg(ba, ar);
	if (rc)
		goto out;
	rc = FARM_ECORRUPT;
	if (!rhdr_matches(ar))
		goto out;
	rc = -ENOMEM;
	r = farm_ba_region_new(ar);
	if (!r)
		goto out;
	rc = atomic_load(&r->table[0]) != bt_table(1)
	             ? FARM_ECORRUPT
	             : rebuild_table(ba, r, &c);
	if (rc) {
		forget_retired(ba, r);
		farm_ba_free_metas(r);
		goto out;
	}
	fence_dirty_free(r, &d, &c);
	adopt_orphans(ba, r);
	farm_ba_region_publish(ba, r);
	ba->blocks_in_use += c.in_use;
	ba->blocks_retired += c.retired;
	ba->blocks_unusable += c.unusable;
	ba->base_bytes += c.bytes;
	ba->base_allocs += c.allocs;
out:
	pthread_mutex_unlock(&ba->lock);
	free(d.bits);
	free(c.src.bits);
	if (fd >= 0)
		farm_alloc_fread_fini(&c.src.fr);
	return rc;
}

int farm_blockalloc_rebuild_region(farm_blockalloc *ba,
                                   const struct farm_alloc_region *ar)
{
	return rebuild_region(ba, ar, -1);
}

int farm_blockalloc_rebuild_region_fd(farm_blockalloc *ba,
                                      const struct farm_alloc_region *ar,
                                      int fd)
{
	return fd < 0 ? -EINVAL : rebuild_region(ba, ar, fd);
}
