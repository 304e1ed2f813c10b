/*
 * Walking the objects of a region from its block table alone, with no
 * allocator state (alloc.h, farm_alloc_walk_region): what a whole-cluster
 * restart uses to find every object header of a region the previous
 * incarnation left behind (src/txn/restart.c clears stale locks with it).
 * One role: reading the durable layout; never writes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc_int.h"
#include "alloc/objhdr.h"
#include "util/fault.h"

/*
 * Where a walk reads the headers and the table: the memory at @base, or,
 * with @fd >= 0, the file mapped there (offset 0 at @base) by pread. A
 * restart reads a region's copies by the file: on the development host a
 * page fault that maps a header's page cost 25-50 us (a guest whose page
 * tables the hypervisor shadows), a 16-byte pread 2.6-3 us, and nothing
 * else runs on the copies while it walks them (src/txn/restart.c). Only
 * objects a callback must see are touched through the mapping.
 */
struct walk_src {
	uint8_t *base;
	int fd;
	/* fd's reader. The callbacks write only the header they were
	 * given, through the mapping, and no header is read twice, so its
	 * windows stay true. */
	struct alloc_fread *fr;
	bool all; /* call back every allocated object, not only marked ones */
	farm_alloc_walk_fn fn, free_fn;
	void *ctx;
};

void farm_alloc_fread_init(struct alloc_fread *r, int fd)
{
	*r = (struct alloc_fread){.fd = fd, .buf = malloc(ALLOC_FREAD_WIN)};
}

void farm_alloc_fread_fini(struct alloc_fread *r)
{
	free(r->buf);
	r->buf = NULL;
	r->len = 0;
}

bool farm_alloc_fread(struct alloc_fread *r, uint64_t off, void *out,
                      uint32_t n, uint64_t stride)
{
	if (r->len && off >= r->start && off - r->start <= r->len &&
	    n <= r->len - (off - r->start)) {
		memcpy(out, r->buf + (off - r->start), n);
		return true;
	}
	if (!r->buf || stride > ALLOC_FREAD_DENSE || n > ALLOC_FREAD_WIN)
		return pread(r->fd, out, n, (off_t)off) == (ssize_t)n;
	ssize_t got = pread(r->fd, r->buf, ALLOC_FREAD_WIN, (off_t)off);
	r->len = got > 0 ? (uint32_t)got : 0;
	r->start = off;
	if (got < (ssize_t)n)
		return false;
	memcpy(out, r->buf, n);
	return true;
}

/* The version and incarnation words of the header at @off, the next
 * being @stride bytes on; false: the file could not be read (the walk
 * stops: FARM_ECORRUPT). */
static bool hdr_read(const struct walk_src *s, uint64_t off, uint64_t stride,
                     uint64_t *ver, uint64_t *inc)
{
	if (s->fd < 0) {
		const struct farm_objhdr *o = (const void *)(s->base + off);
		*inc = farm_objhdr_load_incarn(o);
		*ver = farm_objhdr_load_version(o);
		return true;
	}
	uint64_t w[2];
	if (!farm_alloc_fread(s->fr, off, w, sizeof(w), stride))
		return false;
	*ver = w[0];
	*inc = w[1];
	return true;
}

/* An allocated object at @off whose version word is @ver: to @s->fn,
 * unless only locked or marked ones are wanted and it is neither. */
static void walk_obj(const struct walk_src *s, uint64_t off, uint64_t ver,
                     uint32_t lines)
{
	if (s->all || (ver & (3ull | FARM_OBJHDR_FREE_PENDING)))
		s->fn(s->ctx, (void *)(s->base + off), lines);
}

/*
 * One slab slot of @lines lines at @off: nothing when it is free, else its
 * object, or every element of the array it holds. A small array
 * (farm_alloc_array) lives in one slot: element 0's header records the
 * element's lines, fewer than the slot's, and every element's header
 * carries element 0's incarnation word (an element header after the
 * array's end, or left by an earlier incarnation of the slot, does not).
 * Each element is an object of its own, locked and installed alone, so a
 * walker that clears stale locks (src/txn/restart.c) or counts locked
 * objects must see every element's header, not only the slot's first.
 * Returns the objects seen, or -1: the file could not be read. A free
 * slot whose version word is locked or marked free-pending (the lock's
 * two low bits, FARM_OBJHDR_FREE_PENDING) goes to free_fn when one is
 * given, counted as no object: a deferred free cut short after its
 * header's free leaves one (galloc_adopt.c).
 */
static int walk_slot(const struct walk_src *s, uint64_t off, uint32_t lines)
{
	uint64_t v0, w0;
	if (!hdr_read(s, off, (uint64_t)lines * 64, &v0, &w0))
		return -1;
	if (!farm_incarn_allocated(w0)) {
		if (s->free_fn && (v0 & (3ull | FARM_OBJHDR_FREE_PENDING)))
			s->free_fn(s->ctx, (void *)(s->base + off), lines);
		return 0;
	}
	uint32_t el = farm_incarn_lines(w0);
	if (el >= lines || FARM_FAULT_SWITCH(FARM_FP_ALLOC_WALK_SLOTS)) {
		walk_obj(s, off, v0, lines);
		return 1;
	}
	int n = 0;
	for (uint32_t l = 0; l + el <= lines; l += el) {
		uint64_t o = off + (uint64_t)l * 64, v = v0, w = w0;
		if (l && !hdr_read(s, o, (uint64_t)el * 64, &v, &w))
			return -1;
		if (w != w0)
			continue;
		walk_obj(s, o, v, el);
		n++;
	}
	return n;
}

/* The slab run of @mb blocks at block @i, slots of class @cls. */
static int walk_slab(const struct walk_src *s, uint32_t i, uint32_t mb,
                     unsigned cls)
{
	uint32_t slot = farm_alloc_class_size((int)cls);
	if (!slot)
		return FARM_ECORRUPT;
	uint64_t ns = (uint64_t)mb * FARM_ALLOC_BLOCK / slot,
	         b0 = (uint64_t)i * FARM_ALLOC_BLOCK;
	int n = 0;
	for (uint64_t k = 0; k < ns; k++) {
		int m = walk_slot(s, b0 + k * slot, slot / FARM_ALLOC_LINE);
		if (m < 0)
			return FARM_ECORRUPT;
		n += m;
	}
	return n;
}

/* The array run at block @i whose head word is @w. */
static int walk_array(const struct walk_src *s, uint32_t i, uint64_t w)
{
	uint64_t stride = (uint64_t)bt_array_elines(w) * FARM_ALLOC_LINE;
	uint64_t ne = bt_array_n(w), b0 = (uint64_t)i * FARM_ALLOC_BLOCK;
	int n = 0;
	for (uint64_t k = 0; k < ne; k++) {
		uint64_t v, inc;
		if (!hdr_read(s, b0 + k * stride, stride, &v, &inc))
			return FARM_ECORRUPT;
		if (farm_incarn_allocated(inc)) {
			walk_obj(s, b0 + k * stride, v, bt_array_elines(w));
			n++;
		}
	}
	return n;
}

/* The run whose head word @w is at block @i of @nblocks: its objects
 * (or a negative code), and its length in *@mb. */
static int walk_run(const struct walk_src *s, uint32_t i, uint32_t nblocks,
                    uint64_t w, uint32_t *mb)
{
	switch (bt_type(w)) {
	case BT_SLAB:
		*mb = bt_slab_mb(w);
		if (!*mb || i + *mb > nblocks)
			return FARM_ECORRUPT;
		return walk_slab(s, i, *mb, bt_slab_cls(w));
	case BT_ARRAY:
		*mb = bt_array_mb(w);
		if (!*mb || !bt_array_elines(w) || i + *mb > nblocks ||
		    (uint64_t)bt_array_elines(w) * FARM_ALLOC_LINE *
		                    bt_array_n(w) >
		            (uint64_t)*mb * FARM_ALLOC_BLOCK)
			return FARM_ECORRUPT;
		return walk_array(s, i, w);
	case BT_RETIRED: *mb = bt_array_mb(w); return 0;
	case BT_FREE: *mb = 1; return 0;
	default: return FARM_ECORRUPT;
	}
}

/* The region header and block table, read from @s into @tab (the
 * table's words; @nblocks of them). 1: never formatted; 0: read; or a
 * negative code. */
static int walk_table(const struct walk_src *s, uint32_t id, uint32_t nblocks,
                      uint64_t *tab)
{
	struct farm_alloc_rhdr h;
	size_t tl = (size_t)nblocks * 8;
	if (s->fd >= 0) {
		if (pread(s->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
			return FARM_ECORRUPT;
	} else {
		memcpy(&h, s->base, sizeof(h));
	}
	if (h.magic == 0)
		return 1; /* never formatted (a backup copy, or unused) */
	if (h.magic != FARM_ALLOC_MAGIC || h.region_id != id ||
	    h.nblocks != nblocks || h.table_off != RHDR_TABLE_OFF ||
	    h.layout != 1)
		return FARM_ECORRUPT;
	if (s->fd >= 0)
		return pread(s->fd, tab, tl, RHDR_TABLE_OFF) == (ssize_t)tl
		               ? 0
		               : FARM_ECORRUPT;
	/* Acquire: pairs with the release stores of the table
	 * (farm_ba_write_run, word_claim, the reclaim's zeroing). */
	const _Atomic uint64_t *t =
	        (const _Atomic uint64_t *)(const void *)(s->base +
	                                                 RHDR_TABLE_OFF);
	for (uint32_t i = 0; i < nblocks; i++)
		tab[i] = atomic_load_explicit(&t[i], memory_order_acquire);
	return 0;
}

static int walk(const struct walk_src *s, uint64_t size, uint32_t id)
{
	if (!s->base || !s->fn || size < FARM_ALLOC_BLOCK ||
	    size % FARM_ALLOC_BLOCK)
		return -EINVAL;
	uint32_t nblocks = (uint32_t)(size / FARM_ALLOC_BLOCK);
	uint64_t *tab = malloc((size_t)nblocks * 8);
	if (!tab)
		return -ENOMEM;
	int rc = walk_table(s, id, nblocks, tab), n = 0;
	for (uint32_t i = 1; !rc && i < nblocks;) {
		uint32_t mb = 1;
		int m = walk_run(s, i, nblocks, tab[i], &mb);
		if (m < 0)
			rc = m;
		else
			n += m;
		i += mb ? mb : 1;
	}
	free(tab);
	return rc < 0 ? rc : n;
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
	struct walk_src s = {.base = base,
	                     .fd = -1,
	                     .all = true,
	                     .fn = fn,
	                     .free_fn = free_fn,
	                     .ctx = ctx};
	return walk(&s, size, id);
}

int farm_alloc_walk_region_fd(void *base, uint64_t size, uint32_t id, int fd,
                              farm_alloc_walk_fn fn, farm_alloc_walk_fn free_fn,
                              void *ctx)
{
	if (fd < 0)
		return -EINVAL;
	struct alloc_fread fr;
	farm_alloc_fread_init(&fr, fd);
	struct walk_src s = {.base = base,
	                     .fd = fd,
	                     .fr = &fr,
	                     .all = false,
	                     .fn = fn,
	                     .free_fn = free_fn,
	                     .ctx = ctx};
	int rc = walk(&s, size, id);
	farm_alloc_fread_fini(&fr);
	return rc;
}

int farm_alloc_region_check(uint64_t magic, uint32_t region_id, uint32_t id)
{
	if (magic == 0)
		return 0; /* never formatted: a backup copy or an unused one */
	if (magic != FARM_ALLOC_MAGIC)
		return 1;
	return region_id == id ? 0 : 2;
}
