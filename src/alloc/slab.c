/*
 * Thread-private slab allocators (FaRM NSDI'14 3.3); arrays are in
 * slab_array.c, the helpers the two share in slab_int.h.
 *
 * A slab owns blocks of each class. Allocation pops the class's current
 * block's free list (or its never-used tail) and sets the allocated bit: no
 * lock, no atomic read-modify-write. Free clears the bit and bumps the
 * incarnation with one CAS on the header (the CAS is what makes a double
 * free, from any two threads, fail for one of them), then pushes the slot
 * on the block's local free list when the caller owns the block, else on
 * the block's remote-free stack, which the owner takes whole when its own
 * lists run dry. Slots go back to their class at once (type-stable memory);
 * a block never changes class (that needs distributed epochs: later issue).
 *
 * Locks: ba->lock only when a slab needs a block (new, or adopted from the
 * unowned ones) or a region (and for large arrays, slab_array.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "alloc/slab_int.h"
#include "util/fault.h"

int farm_slab_create(farm_blockalloc *ba, farm_slab **out)
{
	if (!ba || !out)
		return -EINVAL;
	size_t sz = (sizeof(farm_slab) + FARM_CL - 1) / FARM_CL * FARM_CL;
	farm_slab *s = aligned_alloc(FARM_CL, sz);
	if (!s)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	s->ba = ba;
	s->line_cls = farm_alloc_line_cls_table();
	pthread_mutex_lock(&ba->lock);
	int rc = 0;
	if (ba->nslabs >= FARM_ALLOC_MAX_SLABS) {
		rc = -EMFILE;
	} else if (ba->nslabs == ba->slab_cap) {
		uint32_t cap = ba->slab_cap ? ba->slab_cap * 2 : 16;
		farm_slab **n = realloc(ba->slabs, cap * sizeof(*n));
		if (!n)
			rc = -ENOMEM;
		else {
			ba->slabs = n;
			ba->slab_cap = cap;
		}
	}
	if (!rc) {
		ba->slabs[ba->nslabs++] = s;
		s->id = (uint16_t)ba->nslabs; /* 1.., 0 means unowned */
	}
	pthread_mutex_unlock(&ba->lock);
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void farm_slab_destroy(farm_slab *s)
{
	if (!s)
		return;
	farm_blockalloc *ba = s->ba;
	pthread_mutex_lock(&ba->lock);
	for (int c = 0; c < FARM_ALLOC_NCLASSES; c++) {
		struct farm_slab_cls *k = &s->cls[c];
		for (uint32_t i = 0; i < k->nblocks; i++) {
			struct farm_block *b = k->blocks[i];
			/* A retired region's table is not ours to write. */
			if (atomic_load_explicit(&b->retired,
			                         memory_order_relaxed))
				continue;
			farm_ba_set_owner_locked(b, NULL);
			b->orphan_next = ba->orphans[c];
			ba->orphans[c] = b;
		}
		free(k->blocks);
		/* The counters stay (they are part of the sums). */
		k->cur = k->spare = NULL;
		k->blocks = NULL;
		k->nblocks = k->cap = 0;
	}
	/* The struct stays (its counters are part of the sums) until the
	 * block allocator goes. */
	s->dead = true;
	pthread_mutex_unlock(&ba->lock);
}

/* ---- blocks ---------------------------------------------------------- */

__attribute__((noinline)) struct ba_region *farm_slab_region_miss(farm_slab *s,
                                                                  uint32_t id)
{
	struct ba_region *r = ba_lookup(s->ba, id);
	if (r) {
		s->last_r = r;
		s->rc_id = r->id;
		s->rc_size = r->size;
		s->rc_base = r->base;
		s->rc_meta = r->meta;
	}
	return r;
}

/*
 * Drop what this slab holds of retired regions (farm_blockalloc_retire_
 * region): their blocks from the class lists, cur and spare, and the region
 * cache. Owner-only; called from the slow paths when the block allocator's
 * region generation moved (acquire: pairs with the release bump after the
 * flags, so every flag of that retire is seen), or when a block or the
 * cached region is found flagged. O(blocks of the slab), once per retire.
 */
static __attribute__((noinline)) void slab_purge(farm_slab *s, uint64_t gen)
{
	s->region_gen = gen;
	for (int c = 0; c < FARM_ALLOC_NCLASSES; c++) {
		struct farm_slab_cls *k = &s->cls[c];
		uint32_t j = 0;
		for (uint32_t i = 0; i < k->nblocks; i++)
			if (!block_retired(k->blocks[i]))
				k->blocks[j++] = k->blocks[i];
		k->nblocks = j;
		if (k->cur && block_retired(k->cur))
			k->cur = NULL;
		if (k->spare && block_retired(k->spare))
			k->spare = NULL;
	}
	struct ba_region *r = s->last_r;
	if (r && atomic_load_explicit(&r->retired, memory_order_relaxed)) {
		s->last_r = NULL;
		s->rc_id = 0; /* names no region; rc_size 0 refuses all */
		s->rc_size = 0;
		s->rc_base = NULL;
		s->rc_meta = NULL;
	}
}

static inline void slab_sync(farm_slab *s)
{
	/* Acquire: pairs with the release bump of region_gen in
	 * farm_blockalloc_retire_region (its retired flags are seen). */
	uint64_t g =
	        atomic_load_explicit(&s->ba->region_gen, memory_order_acquire);
	if (FARM_UNLIKELY(g != s->region_gen))
		slab_purge(s, g);
}

/* Take the remote frees into the (empty) local list. Acquire pairs with the
 * release CAS in slot_release(): the links written before it are seen. */
static bool block_drain(struct farm_block *b)
{
	if (!atomic_load_explicit(&b->remote_head, memory_order_relaxed))
		return false;
	char *h = atomic_exchange_explicit(&b->remote_head, NULL,
	                                   memory_order_acquire);
	if (!h)
		return false;
	if (!b->free_head) {
		b->free_head = h;
		return true;
	}
	char *t = h;
	while (slot_link(t))
		t = slot_link(t);
	slot_set_link(t, b->free_head);
	b->free_head = h;
	return true;
}

static bool block_room(struct farm_block *b)
{
	return b->free_head || b->next_fresh < b->nslots || block_drain(b);
}

static inline char *block_pop(struct farm_block *b)
{
	char *p = b->free_head;
	if (p) {
		b->free_head = slot_link(p);
		return p;
	}
	if (b->next_fresh < b->nslots)
		return b->base + (uint64_t)b->next_fresh++ * b->slot;
	if (block_drain(b)) {
		p = b->free_head;
		b->free_head = slot_link(p);
		return p;
	}
	return NULL;
}

static int cls_reserve(struct farm_slab_cls *k)
{
	if (k->nblocks < k->cap)
		return 0;
	uint32_t cap = k->cap ? k->cap * 2 : 4;
	struct farm_block **n = realloc(k->blocks, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	k->blocks = n;
	k->cap = cap;
	return 0;
}

/* One of our blocks of @c with room, in @r (any region when NULL). Cost:
 * the class's block count, paid only when the current block runs dry. */
static struct farm_block *own_with_room(farm_slab *s, unsigned c,
                                        const struct ba_region *r)
{
	struct farm_slab_cls *k = &s->cls[c];
	for (uint32_t i = k->nblocks; i-- > 0;) {
		struct farm_block *b = k->blocks[i];
		/* (Flagged but not purged yet: a retire in progress.) */
		if ((!r || b->r == r) && !block_retired(b) && block_room(b))
			return b;
	}
	return NULL;
}

/* Under the lock: adopt an unowned block of @c with room in @r (any when
 * NULL). The lock orders the previous owner's last use before ours. */
static struct farm_block *adopt_locked(farm_slab *s, unsigned c,
                                       const struct ba_region *r)
{
	farm_blockalloc *ba = s->ba;
	for (struct farm_block **pp = &ba->orphans[c]; *pp;
	     pp = &(*pp)->orphan_next) {
		struct farm_block *b = *pp;
		if ((r && b->r != r) || block_retired(b) || !block_room(b))
			continue;
		*pp = b->orphan_next;
		b->orphan_next = NULL;
		farm_ba_set_owner_locked(b, s);
		struct farm_slab_cls *k = &s->cls[c];
		k->blocks[k->nblocks++] = b;
		return b;
	}
	return NULL;
}

/* Under the lock: a new block of @c in @r, added to the slab. */
static int new_block_locked(farm_slab *s, unsigned c, struct ba_region *r,
                            struct farm_block **out)
{
	int rc = farm_ba_new_slab_block_locked(s->ba, s, c, r, out);
	if (!rc) {
		struct farm_slab_cls *k = &s->cls[c];
		k->blocks[k->nblocks++] = *out;
	}
	return rc;
}

/* A block of @c with room in region @r: ours, an unowned one, or a new one.
 * -ENOSPC when @r has none. */
static int block_in_region(farm_slab *s, unsigned c, struct ba_region *r,
                           struct farm_block **out)
{
	struct farm_block *b = own_with_room(s, c, r);
	if (b) {
		*out = b;
		return 0;
	}
	int rc = cls_reserve(&s->cls[c]);
	if (rc)
		return rc;
	pthread_mutex_lock(&s->ba->lock);
	b = adopt_locked(s, c, r);
	if (b) {
		*out = b;
		rc = 0;
	} else {
		rc = new_block_locked(s, c, r, out);
	}
	pthread_mutex_unlock(&s->ba->lock);
	return rc;
}

/* No hint: any of our blocks, an unowned one, a new block in the current
 * region or any other, or a new region. */
static int refill_any(farm_slab *s, unsigned c, struct farm_block **out)
{
	struct farm_block *b = own_with_room(s, c, NULL);
	if (b) {
		*out = b;
		return 0;
	}
	int rc = cls_reserve(&s->cls[c]);
	if (rc)
		return rc;
	farm_blockalloc *ba = s->ba;
	pthread_mutex_lock(&ba->lock);
	b = adopt_locked(s, c, NULL);
	if (b) {
		*out = b;
		goto out;
	}
	rc = -ENOSPC;
	if (ba->cur_region)
		rc = new_block_locked(s, c, ba->cur_region, out);
	uint32_t n = atomic_load_explicit(&ba->nregions, memory_order_relaxed);
	for (uint32_t i = 0; i < n && rc == -ENOSPC; i++) {
		if (ba->regions[i] == ba->cur_region)
			continue;
		rc = new_block_locked(s, c, ba->regions[i], out);
		if (!rc)
			ba->cur_region = ba->regions[i];
	}
	if (rc == -ENOSPC) {
		struct ba_region *r;
		rc = farm_ba_grow_locked(ba, FARM_REGION_ID_NONE, &r);
		if (!rc) {
			ba->cur_region = r;
			rc = new_block_locked(s, c, r, out);
			if (rc == -ENOSPC)
				rc = region_fits(
				        r, farm_alloc_class_block_mb((int)c));
		}
	}
out:
	pthread_mutex_unlock(&ba->lock);
	return rc;
}

/* Level 3: the regions created near @r, in order, else a new one near it.
 * Calls @try(ctx, region) until it returns anything but -ENOSPC. */
int farm_slab_near_regions(farm_slab *s, struct ba_region *r,
                           farm_slab_try_region_fn fn, void *ctx)
{
	farm_blockalloc *ba = s->ba;
	struct ba_region *q = r;
	/* Bounded: the chain is finite, and at most two regions are created
	 * (a second only if other threads filled the first meanwhile). */
	for (int grown = 0;;) {
		pthread_mutex_lock(&ba->lock);
		struct ba_region *nq = q->spill;
		int rc = 0;
		if (!nq) {
			if (grown == 2)
				rc = -ENOSPC;
			else if (!(rc = farm_ba_grow_locked(ba, r->id, &nq)))
				q->spill = nq;
			grown++;
		}
		pthread_mutex_unlock(&ba->lock);
		if (rc)
			return rc;
		rc = fn(s, ctx, nq);
		if (rc != -ENOSPC)
			return rc;
		q = nq;
	}
}

struct slab_try {
	unsigned c;
	struct farm_block *b;
};

static int try_slab_region(farm_slab *s, void *ctx, struct ba_region *r)
{
	struct slab_try *t = ctx;
	int rc = block_in_region(s, t->c, r, &t->b);
	if (rc == -ENOSPC &&
	    region_fits(r, farm_alloc_class_block_mb((int)t->c)))
		return -E2BIG;
	return rc;
}

/* Pop a slot of class @c following @hint (see farm_slab_alloc()). */
int farm_slab_take_hinted(farm_slab *s, unsigned c, farm_gaddr hint, char **p,
                          struct farm_block **bo, int *lvl)
{
	slab_sync(s);
	struct ba_region *r = slab_region(s, farm_gaddr_region(hint));
	if (!r) {
		farm_stat_add_owned(&s->hint[FARM_ALLOC_HINT_REMOTE], 1);
		return farm_gaddr_region(hint) ? -EREMOTE : -EINVAL;
	}
	uint32_t off = farm_gaddr_offset(hint);
	if (off >= r->size)
		return -EINVAL;
	/* Acquire: pairs with the release stores of farm_ba_meta_publish. */
	struct farm_block *b = atomic_load_explicit(
	        &r->meta[off / FARM_ALLOC_BLOCK], memory_order_acquire);
	int level = FARM_ALLOC_HINT_BLOCK;
	if (!b || b->cls != c ||
	    atomic_load_explicit(&b->owner, memory_order_relaxed) != s ||
	    block_retired(b) || !block_room(b)) {
		level = FARM_ALLOC_HINT_REGION;
		int rc = block_in_region(s, c, r, &b);
		if (rc == -ENOSPC) {
			level = FARM_ALLOC_HINT_NEAR;
			struct slab_try t = {.c = c};
			rc = farm_slab_near_regions(s, r, try_slab_region, &t);
			b = t.b;
		}
		if (rc)
			return rc;
	}
	*p = block_pop(b);
	if (!*p)
		return FARM_ECORRUPT; /* cannot happen: block_room() said so */
	*bo = b;
	*lvl = level;
	return 0;
}

/* ---- objects --------------------------------------------------------- */

/* cur is dry: the block of the last local free, if it still has a local
 * free slot (O(1)), else refill_any() (scan, adopt, new block). */
__attribute__((noinline)) int
farm_slab_take_slow(farm_slab *s, unsigned c, char **pp, struct farm_block **bo)
{
	slab_sync(s);
	struct farm_slab_cls *k = &s->cls[c];
	struct farm_block *b = k->cur, *sp = k->spare;
	char *p;
	if (sp && sp != b && !block_retired(sp) &&
	    (p = sp->free_head) != NULL) {
		sp->free_head = slot_link(p);
		k->cur = sp;
		*pp = p;
		*bo = sp;
		return 0;
	}
	int rc = refill_any(s, c, &b);
	if (rc)
		return rc;
	k->cur = b;
	p = block_pop(b);
	if (!p)
		return FARM_ECORRUPT;
	*pp = p;
	*bo = b;
	return 0;
}

/* Everything but the fast path of farm_slab_alloc(). */
static __attribute__((noinline)) int alloc_slow(farm_slab *s, unsigned c,
                                                farm_gaddr hint, uint64_t mark,
                                                farm_gaddr *out)
{
	char *p;
	struct farm_block *b;
	int lvl;
	int rc = take(s, c, hint, &p, &b, &lvl);
	if (FARM_UNLIKELY(rc))
		return rc;
	rc = slot_claim(p, b->slot / FARM_ALLOC_LINE, mark);
	if (FARM_UNLIKELY(rc))
		return rc;
	count_alloc(s, c, lvl);
	*out = b->gbase + (uint64_t)(p - b->base);
	return 0;
}

/* farm_slab_alloc(_marked); inline into both, so the unmarked fast path
 * tests no mark (@mark is the constant 0 there). */
static inline __attribute__((always_inline)) int
slab_alloc(farm_slab *s, uint64_t size, farm_gaddr hint, uint64_t mark,
           farm_gaddr *out)
{
	if (FARM_UNLIKELY(size - 1 >= FARM_ALLOC_MAX_OBJECT))
		return size ? -E2BIG : -EINVAL;
	if (FARM_UNLIKELY(!s || !out))
		return -EINVAL;
	unsigned c =
	        s->line_cls[(size + FARM_ALLOC_LINE - 1) / FARM_ALLOC_LINE];
	/* Fast path: no hint, the current block's local free list (the
	 * never-used tail, refills and hints go through take()). Same steps
	 * as take() + slot_claim(), with nothing spilled to the stack. */
	struct farm_block *b = s->cls[c].cur;
	char *p;
	/* The retired check: a relaxed load from the block's first line,
	 * which the header write below reads anyway (b->slot, b->gbase). */
	if (FARM_UNLIKELY(
	            hint != FARM_GADDR_NULL || !b ||
	            atomic_load_explicit(&b->retired, memory_order_relaxed) ||
	            !(p = b->free_head)))
		return alloc_slow(s, c, hint, mark, out);
	b->free_head = slot_link(p);
	int rc = slot_claim(p, b->slot / FARM_ALLOC_LINE, mark);
	if (FARM_UNLIKELY(rc))
		return rc;
	farm_stat_add_owned(&s->cls[c].nalloc, 1);
	*out = b->gbase + (uint64_t)(p - b->base);
	return 0;
}

int farm_slab_alloc(farm_slab *s, uint64_t size, farm_gaddr hint,
                    farm_gaddr *out)
{
	return slab_alloc(s, size, hint, 0, out);
}

int farm_slab_alloc_marked(farm_slab *s, uint64_t size, farm_gaddr hint,
                           uint64_t mark, farm_gaddr *out)
{
	if (mark & ~FARM_OBJHDR_MARK_MASK)
		return -EINVAL;
	return slab_alloc(s, size, hint, mark, out);
}

/* find_slot() failed on a cached region: if that region was retired since
 * (maybe re-adopted under the same id, at another base and size), drop the
 * cache and look @id up again. True when there is a live region @id to try
 * again in. Takes no pointer to the caller's block and slot, so they stay
 * in registers on the fast path. */
__attribute__((noinline)) bool farm_slab_find_slot_stale(farm_slab *s,
                                                         uint32_t id)
{
	struct ba_region *r = s->last_r;
	/* Acquire (both loads): pair with the release store of r->retired
	 * and the release bump of region_gen in
	 * farm_blockalloc_retire_region. */
	if (!r || !atomic_load_explicit(&r->retired, memory_order_acquire))
		return false;
	slab_purge(s, atomic_load_explicit(&s->ba->region_gen,
	                                   memory_order_acquire));
	return farm_slab_region_miss(s, id) != NULL;
}

static int slab_free(farm_slab *s, farm_gaddr a, const uint64_t *then);

/* find_slot() refused @a with @rc: again after dropping a stale region
 * cache (farm_slab_find_slot_stale), else counted and returned. */
static __attribute__((noinline)) int free_refused(farm_slab *s, farm_gaddr a,
                                                  int rc, const uint64_t *then)
{
	if (rc != -EINVAL && rc != -EREMOTE)
		return rc;
	if (farm_slab_find_slot_stale(s, farm_gaddr_region(a)))
		return slab_free(s, a, then); /* the cache is live now: once */
	if (rc != -EREMOTE)
		farm_stat_add_owned(&s->free_errors, 1);
	return rc;
}

/* The free of @a; with @then, the version word's store between the
 * header's free and the slot's release (farm_slab_free_unlock). */
static inline int slab_free(farm_slab *s, farm_gaddr a, const uint64_t *then)
{
	if (FARM_UNLIKELY(!s))
		return -EINVAL;
	struct farm_block *b;
	char *p;
	int rc = find_slot(s, a, &b, &p);
	if (FARM_UNLIKELY(rc)) /* a tail call: nothing live across it */
		return free_refused(s, a, rc, then);
	rc = hdr_free(p);
	if (FARM_UNLIKELY(rc)) {
		farm_stat_add_owned(&s->free_errors, 1);
		return rc;
	}
	if (then) {
		/* A kill here leaves the header freed with the object
		 * still locked and marked: the restart clears both
		 * (src/txn/restart.c, unlock_one: a freed header is not
		 * freed again), and the rebuild by scan lists the slot. */
		FARM_FAULT_POINT(FARM_FP_ALLOC_FREED_MARKED);
		/* Release: pairs with the acquire loads of the version
		 * word (farm_objhdr_load_version), which then see the free.
		 * The slot is not reusable yet, so the word is still this
		 * object's. */
		atomic_store_explicit((_Atomic uint64_t *)(void *)p, *then,
		                      memory_order_release);
	}
	slot_release(s, b, p);
	farm_stat_add_owned(&s->cls[b->cls].nfree, 1);
	return 0;
}

int farm_slab_free(farm_slab *s, farm_gaddr a)
{
	return slab_free(s, a, NULL);
}

int farm_slab_free_unlock(farm_slab *s, farm_gaddr a, uint64_t then)
{
	return slab_free(s, a, &then);
}
