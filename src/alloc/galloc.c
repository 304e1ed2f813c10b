/*
 * Cluster-wide allocation (galloc.h).
 *
 * The block allocator asks for regions synchronously, under its lock, but
 * the address space makes them asynchronously (the backups answer by RPC).
 * So the region callback only hands out regions that are already made: a
 * small pool of (near, region) pairs. When the pool has none for the
 * asked-for `near`, the callback records the wish and fails with -EAGAIN;
 * the allocation then asks the address space for such a region, adds it
 * to the pool when it comes, and tries again.
 */
#include "alloc/galloc.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

#define POOL_MAX    8
#define MAX_LOOPS   64
#define MAX_RETRY   4 /* region requests per allocation */
#define MAX_PARKS   8 /* waits for an adoption per allocation (op_park) */
#define ADOPTED_MAX 64

struct pooled {
	uint32_t near;
	struct farm_alloc_region r;
};

struct farm_galloc {
	farm_as *as;
	farm_msg *msg;
	farm_blockalloc *ba;
	farm_slab *slabs[MAX_LOOPS]; /* one per loop, made on first use */
	pthread_mutex_t lock;        /* pool */
	struct pooled pool[POOL_MAX];
	unsigned npool;
	/* Regions taken out of a full pool and being added to the block
	 * allocator outside `lock` (region_made); a retire waits on `pool_cv`
	 * until none is, so it cannot miss one. Under `lock`. */
	unsigned adding;
	pthread_cond_t pool_cv;
	_Atomic uint64_t retired;
	_Atomic uint64_t shipped_allocs, served_allocs, shipped_frees,
	        served_frees, regions_added, region_waits;
	/* Adopting promoted regions (farm_galloc_adopt): one thread, made on
	 * first use, parked on `adopt_cv` while there is nothing to do. */
	pthread_mutex_t adopt_lock;
	pthread_cond_t adopt_cv;
	pthread_t adopter;
	bool adopter_up, adopt_stop;
	/* The region the adopter is on (0: none); cleared, with a broadcast
	 * on `adopt_done_cv`, once its deferred frees are done too. */
	uint32_t adopt_busy;
	pthread_cond_t adopt_done_cv;
	struct adopt_region *adopting; /* expected or queued, under the lock */
	struct deferred *deferred;     /* frees waiting for their region */
	/* Allocations that wanted a region while regions promoted here
	 * were still to be adopted (op_park): posted back to their loops
	 * when one leaves `adopting` (adopt_take_locked). */
	struct galloc_op *parked;
	_Atomic uint64_t allocs_parked;
	_Atomic uint64_t adopted, adopt_failed, adopt_skipped, adopt_ns,
	        adopt_max_ns, frees_deferred, deferred_freed, deferred_lost;
	/* The regions adopted (the first ADOPTED_MAX), for the counters of
	 * allocations and frees in them: ids written before the count
	 * (release; pairs with the acquire in in_adopted). */
	uint32_t adopted_ids[ADOPTED_MAX];
	_Atomic unsigned nadopted_ids;
	_Atomic uint64_t adopted_allocs, adopted_frees;
};

/* A region promoted here, not yet in the block allocator. */
struct adopt_region {
	uint32_t id;
	bool queued; /* farm_galloc_adopt called: the adopter may take it */
	bool taken;  /* the adopter is on it */
	struct adopt_region *next;
};
/* A free of an object in such a region, done once it is adopted; then
 * @then is stored (release) in the object's first word. */
struct deferred {
	farm_gaddr a;
	uint64_t then;
	struct deferred *next;
};

/* Wire formats. */
struct alloc_req {
	uint64_t size; /* object bytes, or element bytes of an array */
	uint64_t n;    /* 0: an object; else array elements */
	uint64_t hint;
};
struct alloc_rep {
	uint64_t addr;
};
struct free_req {
	uint64_t addr;
};

static bool in_adopted(farm_galloc *g, uint32_t id);

/* ---- regions ----------------------------------------------------------- */

static int new_region_cb(void *ctx, uint32_t near,
                         struct farm_alloc_region *out)
{
	farm_galloc *g = ctx;
	pthread_mutex_lock(&g->lock);
	for (unsigned i = 0; i < g->npool; i++) {
		if (g->pool[i].near != near)
			continue;
		*out = g->pool[i].r;
		g->pool[i] = g->pool[--g->npool];
		pthread_mutex_unlock(&g->lock);
		atomic_fetch_add(&g->regions_added, 1);
		return 0;
	}
	pthread_mutex_unlock(&g->lock);
	return -EAGAIN;
}

/* ---- one allocation ------------------------------------------------------ */

struct galloc_op {
	farm_galloc *g;
	uint64_t size, n;
	farm_gaddr hint;
	farm_galloc_fn cont;
	void *ctx;
	unsigned retries, parks;
	int status;
	farm_gaddr result;
	farm_loop *loop;        /* parked: its loop */
	struct galloc_op *next; /* parked: the next one */
};

static farm_slab *slab_of(farm_galloc *g, farm_loop *loop, int *rc)
{
	unsigned i = farm_loop_index(loop);
	if (i >= MAX_LOOPS) {
		*rc = -EINVAL;
		return NULL;
	}
	if (!g->slabs[i]) {
		*rc = farm_slab_create(g->ba, &g->slabs[i]);
		if (*rc)
			return NULL;
	}
	*rc = 0;
	return g->slabs[i];
}

static void op_finish(farm_loop *loop, void *ctx, int status)
{
	struct galloc_op *op = ctx;
	op->cont(loop, op->ctx, status ? status : op->status,
	         status || op->status ? FARM_GADDR_NULL : op->result);
	free(op);
}

/* Report @op's outcome from a later pass of the loop (never inline). */
static void op_post(farm_loop *loop, struct galloc_op *op, int status,
                    farm_gaddr a)
{
	op->status = status;
	op->result = a;
	if (farm_loop_post(loop, op_finish, op)) {
		/* Out of memory for a work item: report now rather than lose
		 * the continuation. */
		op->cont(loop, op->ctx, -ENOMEM, FARM_GADDR_NULL);
		free(op);
	}
}

static void op_try(farm_loop *loop, struct galloc_op *op);

/* The region @id that farm_as made for @op (@status), this machine its
 * primary; or NULL, with @op failed. */
static farm_region *op_region(farm_loop *loop, struct galloc_op *op, int status,
                              uint32_t id)
{
	if (status) {
		op_post(loop, op, status, FARM_GADDR_NULL);
		return NULL;
	}
	enum farm_as_role role;
	farm_region *r = farm_as_local_region(op->g->as, id, &role);
	if (!r || role != FARM_AS_PRIMARY) {
		op_post(loop, op, FARM_ECORRUPT, FARM_GADDR_NULL);
		return NULL;
	}
	return r;
}

static void region_made(farm_loop *loop, void *ctx, int status, uint32_t id)
{
	struct galloc_op *op = ctx;
	farm_galloc *g = op->g;
	farm_region *r = op_region(loop, op, status, id);
	if (!r)
		return;
	uint32_t near =
	        op->hint ? farm_gaddr_region(op->hint) : FARM_REGION_ID_NONE;
	pthread_mutex_lock(&g->lock);
	if (g->npool == POOL_MAX) {
		/* Full of regions nobody took: the oldest goes to the block
		 * allocator as a plain region, so none is lost. */
		struct farm_alloc_region old = g->pool[0].r;
		g->pool[0] = g->pool[--g->npool];
		g->adding++;
		pthread_mutex_unlock(&g->lock);
		if (farm_blockalloc_add_region(g->ba, &old) == 0)
			atomic_fetch_add(&g->regions_added, 1);
		pthread_mutex_lock(&g->lock);
		if (--g->adding == 0)
			pthread_cond_broadcast(&g->pool_cv);
	}
	g->pool[g->npool++] =
	        (struct pooled){.near = near,
	                        .r = {.id = id,
	                              .base = farm_region_base(r),
	                              .size = farm_region_size(r)}};
	pthread_mutex_unlock(&g->lock);
	op_try(loop, op);
}

/* Is the adopter on a region, or has it one to take? Its work always
 * ends (a scan), so a wait for it is bounded; an expected region that
 * recovery has not handed over yet (its locks still being decided) is no
 * reason to wait. Under adopt_lock. */
static bool adopt_under_way(const farm_galloc *g)
{
	if (g->adopt_busy)
		return true;
	for (const struct adopt_region *a = g->adopting; a; a = a->next)
		if (a->queued)
			return true;
	return false;
}

/* The block allocator wants a region for @op while regions promoted here
 * are being adopted (adopt_under_way): @op waits for them instead of
 * making a region, which it would most likely not need once they are in
 * the block allocator with their free blocks. A
 * machine that becomes primary of regions it did not make (promotion; a
 * late machine has no region of its own) used to make a region for the
 * first allocations after every such recovery, and regions are never
 * freed: the reuse campaign's grew by one or more at every kill of the
 * machine primary of all of them. true: parked (op_again retries it on
 * its loop once an adoption ends); false: make a region. */
static bool op_park(farm_galloc *g, farm_loop *loop, struct galloc_op *op)
{
	if (op->parks >= MAX_PARKS || FARM_FAULT_SWITCH(FARM_FP_ALLOC_NO_PARK))
		return false;
	pthread_mutex_lock(&g->adopt_lock);
	bool park = !g->adopt_stop && adopt_under_way(g);
	if (park) {
		op->parks++;
		op->loop = loop;
		op->next = g->parked;
		g->parked = op;
		atomic_fetch_add(&g->allocs_parked, 1);
	}
	pthread_mutex_unlock(&g->adopt_lock);
	return park;
}

static void op_again(farm_loop *loop, void *ctx, int status)
{
	(void)status;
	op_try(loop, ctx);
}

/* Every parked allocation back to its loop: a region left the adoption
 * list (adopted, skipped, cancelled or retired). Under adopt_lock; the
 * loops take them later, never inline. One whose work item cannot be
 * made (out of memory) stays parked for the next. */
static void parked_release_locked(farm_galloc *g)
{
	struct galloc_op *op = g->parked, *keep = NULL;
	g->parked = NULL;
	while (op) {
		struct galloc_op *n = op->next;
		if (farm_loop_post(op->loop, op_again, op)) {
			op->next = keep;
			keep = op;
		}
		op = n;
	}
	g->parked = keep;
}

static void op_try(farm_loop *loop, struct galloc_op *op)
{
	farm_galloc *g = op->g;
	int rc;
	farm_slab *s = slab_of(g, loop, &rc);
	farm_gaddr a = FARM_GADDR_NULL;
	if (s)
		rc = op->n ? farm_alloc_array(s, op->size, op->n, op->hint, &a)
		           : farm_slab_alloc(s, op->size, op->hint, &a);
	if (rc == -EAGAIN && op_park(g, loop, op))
		return;
	if (rc == -EAGAIN && op->retries++ < MAX_RETRY) {
		/* The block allocator wants a region: make one, then retry. */
		atomic_fetch_add(&g->region_waits, 1);
		uint32_t near = op->hint ? farm_gaddr_region(op->hint) : 0;
		rc = farm_as_region_alloc(g->as, loop, near, region_made, op);
		if (rc == 0)
			return;
	}
	if (rc == -EAGAIN)
		rc = -ENOSPC;
	if (!rc && in_adopted(g, farm_gaddr_region(a)))
		atomic_fetch_add_explicit(&g->adopted_allocs, 1,
		                          memory_order_relaxed);
	op_post(loop, op, rc, a);
}

static void shipped_done(farm_loop *loop, void *ctx, int status,
                         const void *reply, uint32_t len)
{
	struct galloc_op *op = ctx;
	struct alloc_rep r = {0};
	if (!status && len != sizeof(r))
		status = FARM_ECORRUPT;
	if (!status)
		memcpy(&r, reply, sizeof(r));
	op->cont(loop, op->ctx, status, status ? FARM_GADDR_NULL : r.addr);
	free(op);
}

static int galloc_start(farm_galloc *g, farm_loop *loop, uint64_t size,
                        uint64_t n, farm_gaddr hint, farm_galloc_fn cont,
                        void *ctx)
{
	if (!g || !loop || !cont || size == 0)
		return -EINVAL;
	struct galloc_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct galloc_op){.g = g,
	                         .size = size,
	                         .n = n,
	                         .hint = hint,
	                         .cont = cont,
	                         .ctx = ctx};
	if (hint &&
	    !farm_alloc_region_is_local(g->ba, farm_gaddr_region(hint))) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		if (farm_as_replicas(g->as, farm_gaddr_region(hint), rep) &&
		    rep[0] != farm_as_machine_id(g->as)) {
			struct alloc_req q = {
			        .size = size, .n = n, .hint = hint};
			/* The owner may have to make a region first. */
			int rc = farm_as_call(g->as, loop, hint,
			                      FARM_MSGT_ALLOC, &q, sizeof(q),
			                      10ull * 1000000000ull,
			                      shipped_done, op);
			if (rc) {
				free(op);
				return rc;
			}
			atomic_fetch_add(&g->shipped_allocs, 1);
			return 0;
		}
		/* Ours by the rings but not in the allocator: not an object
		 * region (or not yet): the slab says -EREMOTE/-EINVAL. */
	}
	op_try(loop, op);
	return 0;
}

int farm_galloc_alloc(farm_galloc *g, farm_loop *loop, uint64_t size,
                      farm_gaddr hint, farm_galloc_fn cont, void *ctx)
{
	return galloc_start(g, loop, size, 0, hint, cont, ctx);
}

int farm_galloc_alloc_array(farm_galloc *g, farm_loop *loop, uint64_t elem_size,
                            uint64_t n, farm_gaddr hint, farm_galloc_fn cont,
                            void *ctx)
{
	if (n == 0)
		return -EINVAL;
	return galloc_start(g, loop, elem_size, n, hint, cont, ctx);
}

/* A region made for one array (farm_galloc_alloc_array_alone): handed to
 * the block allocator at once, then the array allocated with a hint in it,
 * so the array is the region's first run whatever else is pooled. */
static void alone_made(farm_loop *loop, void *ctx, int status, uint32_t id)
{
	struct galloc_op *op = ctx;
	farm_galloc *g = op->g;
	farm_region *r = op_region(loop, op, status, id);
	if (!r)
		return;
	struct farm_alloc_region ar = {.id = id,
	                               .base = farm_region_base(r),
	                               .size = farm_region_size(r)};
	int rc = farm_blockalloc_add_region(g->ba, &ar);
	if (rc) {
		op_post(loop, op, rc, FARM_GADDR_NULL);
		return;
	}
	atomic_fetch_add(&g->regions_added, 1);
	op->hint = farm_gaddr_make(id, 0);
	op->retries = MAX_RETRY; /* never another region: this one or fail */
	op_try(loop, op);
}

int farm_galloc_alloc_array_alone(farm_galloc *g, farm_loop *loop,
                                  uint64_t elem_size, uint64_t n,
                                  farm_galloc_fn cont, void *ctx)
{
	if (!g || !loop || !cont || elem_size == 0 || n == 0)
		return -EINVAL;
	struct galloc_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct galloc_op){
	        .g = g, .size = elem_size, .n = n, .cont = cont, .ctx = ctx};
	atomic_fetch_add(&g->region_waits, 1);
	/* Near nothing: a random ring, so arrays made this way are placed
	 * independently of each other. */
	int rc = farm_as_region_alloc(g->as, loop, 0, alone_made, op);
	if (rc)
		free(op);
	return rc;
}

/* ---- frees --------------------------------------------------------------- */

struct free_op {
	farm_op_fn cont;
	void *ctx;
	int status;
};

static void free_finish(farm_loop *loop, void *ctx, int status)
{
	struct free_op *f = ctx;
	f->cont(loop, f->ctx, status ? status : f->status);
	free(f);
}

static void free_shipped(farm_loop *loop, void *ctx, int status,
                         const void *reply, uint32_t len)
{
	(void)reply;
	(void)len;
	struct free_op *f = ctx;
	f->cont(loop, f->ctx, status);
	free(f);
}

int farm_galloc_free_local(farm_galloc *g, farm_loop *loop, farm_gaddr a)
{
	if (!g || !loop)
		return -EINVAL;
	if (!farm_alloc_region_is_local(g->ba, farm_gaddr_region(a)))
		return -EREMOTE;
	int rc;
	farm_slab *s = slab_of(g, loop, &rc);
	return s ? farm_slab_free(s, a) : rc;
}

int farm_galloc_free_array_local(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                                 uint64_t elem_size, uint64_t n)
{
	if (!g || !loop)
		return -EINVAL;
	if (!farm_alloc_region_is_local(g->ba, farm_gaddr_region(a)))
		return -EREMOTE;
	int rc;
	farm_slab *s = slab_of(g, loop, &rc);
	return s ? farm_alloc_array_free(s, a, elem_size, n) : rc;
}

int farm_galloc_free(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                     farm_op_fn cont, void *ctx)
{
	if (!g || !loop || !cont || a == FARM_GADDR_NULL)
		return -EINVAL;
	struct free_op *f = malloc(sizeof(*f));
	if (!f)
		return -ENOMEM;
	*f = (struct free_op){.cont = cont, .ctx = ctx};
	int rc;
	if (farm_alloc_region_is_local(g->ba, farm_gaddr_region(a))) {
		farm_slab *s = slab_of(g, loop, &rc);
		if (s)
			rc = farm_slab_free(s, a);
		f->status = rc;
		if ((rc = farm_loop_post(loop, free_finish, f)))
			free(f);
		return rc;
	}
	struct free_req q = {.addr = a};
	rc = farm_as_call(g->as, loop, a, FARM_MSGT_FREE, &q, sizeof(q), 0,
	                  free_shipped, f);
	if (rc)
		free(f);
	else
		atomic_fetch_add(&g->shipped_frees, 1);
	return rc;
}

/* ---- recovery: adopting promoted regions ------------------------------------
 *
 * A region promoted here (its primary failed; src/txn/recover.c) serves
 * reads and commits at once, but the block allocator does not know it. Its
 * copy's block table was kept by the replica (farm_alloc_copy_note, from
 * each new object's block description carried in COMMIT-BACKUP), so once
 * recovery has settled every transaction that could still write it, the
 * adopter thread rebuilds it by scan (farm_blockalloc_rebuild_region) off
 * the event loops. Frees of its objects meanwhile are deferred, the object
 * left locked by the caller, and done (then unlocked) right after the
 * rebuild, so none leaks and none is seen freed-but-allocated.
 */

/* Was region @id adopted here? (Counters only; the adopter is the only
 * writer of the list.) */
static bool in_adopted(farm_galloc *g, uint32_t id)
{
	/* Acquire: pairs with the release store of nadopted_ids in
	 * adopt_one (the ids below it are written). */
	unsigned n =
	        atomic_load_explicit(&g->nadopted_ids, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (g->adopted_ids[i] == id)
			return true;
	return false;
}

static struct adopt_region **adopt_find(farm_galloc *g, uint32_t id)
{
	struct adopt_region **pp = &g->adopting;
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

int farm_galloc_adopt_expect(farm_galloc *g, uint32_t region)
{
	if (!g)
		return -EINVAL;
	pthread_mutex_lock(&g->adopt_lock);
	int rc = 0;
	if (farm_alloc_region_is_local(g->ba, region)) {
		rc = 2; /* adopted already (an earlier recovery) */
	} else if (!*adopt_find(g, region)) {
		struct adopt_region *a = calloc(1, sizeof(*a));
		if (a) {
			*a = (struct adopt_region){.id = region,
			                           .next = g->adopting};
			g->adopting = a;
			rc = 1;
		} else {
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&g->adopt_lock);
	return rc;
}

/* Take region @id out of the adoption list with its deferred frees; under
 * adopt_lock. */
static struct deferred *adopt_take_locked(farm_galloc *g, uint32_t id)
{
	struct deferred *mine = NULL;
	struct adopt_region **pp = adopt_find(g, id);
	if (*pp) {
		struct adopt_region *a = *pp;
		*pp = a->next;
		free(a);
	}
	/* Adopted (published in the block allocator before this), or never
	 * to be: the allocations waiting for it try again. */
	parked_release_locked(g);
	for (struct deferred **dp = &g->deferred; *dp;) {
		struct deferred *d = *dp;
		if (farm_gaddr_region(d->a) == id) {
			*dp = d->next;
			d->next = mine;
			mine = d;
		} else {
			dp = &d->next;
		}
	}
	return mine;
}

static struct deferred *adopt_take(farm_galloc *g, uint32_t id)
{
	pthread_mutex_lock(&g->adopt_lock);
	struct deferred *mine = adopt_take_locked(g, id);
	pthread_mutex_unlock(&g->adopt_lock);
	return mine;
}

void farm_galloc_adopt_cancel(farm_galloc *g, uint32_t region)
{
	if (!g)
		return;
	struct deferred *d = adopt_take(g, region);
	while (d) { /* none: the region never served here */
		struct deferred *n = d->next;
		free(d);
		d = n;
	}
}

/* Adopt one region; then its deferred frees, and unlock their objects. */
static void adopt_one(farm_galloc *g, farm_slab **slab, uint32_t id)
{
	enum farm_as_role role;
	farm_region *fr = farm_as_local_region(g->as, id, &role);
	struct farm_alloc_region r = {.id = id};
	int rc = -ENOENT;
	if (fr) { /* for the deferred frees' unlocks in any case */
		r.base = farm_region_base(fr);
		r.size = farm_region_size(fr);
	}
	if (fr && role == FARM_AS_PRIMARY) {
		if (!farm_alloc_copy_formatted(&r)) {
			/* No object was ever carried into it: not an
			 * allocator region (or an unused one). */
			atomic_fetch_add(&g->adopt_skipped, 1);
			rc = 1;
		} else {
			FARM_FAULT_POINT(FARM_FP_ALLOC_ADOPT_SLOW);
			uint64_t t0 = farm_now_ns();
			rc = farm_blockalloc_rebuild_region(g->ba, &r);
			uint64_t dt = farm_now_ns() - t0;
			if (!rc) {
				atomic_fetch_add(&g->adopted, 1);
				unsigned k = atomic_load_explicit(
				        &g->nadopted_ids, memory_order_relaxed);
				if (k < ADOPTED_MAX) {
					g->adopted_ids[k] = id;
					/* Release: pairs with the acquire
					 * load in in_adopted. */
					atomic_store_explicit(
					        &g->nadopted_ids, k + 1,
					        memory_order_release);
				}
				atomic_fetch_add(&g->adopt_ns, dt);
				uint64_t mx = atomic_load(&g->adopt_max_ns);
				while (dt > mx &&
				       !atomic_compare_exchange_weak(
				               &g->adopt_max_ns, &mx, dt))
					;
				farm_info("alloc: region %" PRIu32
				          " adopted (rebuilt by scan in "
				          "%.2f ms)",
				          id, dt / 1e6);
			}
		}
	}
	if (rc < 0) {
		atomic_fetch_add(&g->adopt_failed, 1);
		farm_warn("alloc: promoted region %" PRIu32
		          " not adopted: %s; its free space is not used",
		          id, farm_strerror(rc));
	}
	/* Published (if adopted) before adopt_take takes the lock, so a free
	 * that finds the region still unknown under the lock is ours. */
	struct deferred *d = adopt_take(g, id);
	if (d && !*slab && rc == 0 && farm_slab_create(g->ba, slab))
		*slab = NULL;
	while (d) {
		struct deferred *n = d->next;
		int f = rc == 0 && *slab ? farm_slab_free(*slab, d->a) : rc;
		/* Unlock it either way: the caller left that to us (release:
		 * pairs with the acquire loads of the version word,
		 * farm_objhdr_load_version, which then see the free). */
		if (r.base)
			atomic_store_explicit(
			        (_Atomic uint64_t *)(void *)((char *)r.base +
			                                     farm_gaddr_offset(
			                                             d->a)),
			        d->then, memory_order_release);
		/* Counted after (seq_cst, so a release): whoever reads the
		 * count sees the free and the unlock. */
		if (f) {
			atomic_fetch_add(&g->deferred_lost, 1);
			farm_warn("alloc: deferred free of %#" PRIx64
			          " in region %" PRIu32 ": %s (leaked)",
			          d->a, id, farm_strerror(f < 0 ? f : -ENOENT));
		} else {
			atomic_fetch_add(&g->deferred_freed, 1);
		}
		free(d);
		d = n;
	}
}

static void *adopter_main(void *arg)
{
	farm_galloc *g = arg;
	farm_slab *slab = NULL; /* for deferred frees, made when needed */
	/* Created on the membership's real-time worker (a view's recovery):
	 * a scan of a whole region at that priority held both cores of a
	 * 2-core host for hundreds of ms, and no transaction committed. */
	(void)farm_thread_set_normal();
	pthread_mutex_lock(&g->adopt_lock);
	for (;;) {
		struct adopt_region *a = g->adopting;
		while (a && !a->queued)
			a = a->next;
		if (!a) {
			if (g->adopt_stop)
				break;
			pthread_cond_wait(&g->adopt_cv, &g->adopt_lock);
			continue;
		}
		uint32_t id = a->id;
		a->queued = false; /* ours now: adopt_take removes it */
		a->taken = true;
		g->adopt_busy = id;
		pthread_mutex_unlock(&g->adopt_lock);
		adopt_one(g, &slab, id);
		pthread_mutex_lock(&g->adopt_lock);
		g->adopt_busy = 0; /* farm_galloc_retire may wait for it */
		/* Allocations parked since adopt_take released them saw it
		 * busy: they try again now (op_park). */
		parked_release_locked(g);
		pthread_cond_broadcast(&g->adopt_done_cv);
	}
	pthread_mutex_unlock(&g->adopt_lock);
	farm_slab_destroy(slab);
	return NULL;
}

int farm_galloc_adopt(farm_galloc *g, uint32_t region)
{
	if (!g)
		return -EINVAL;
	int rc = farm_galloc_adopt_expect(g, region);
	if (rc < 0 || rc == 2)
		return rc < 0 ? rc : 0;
	if (FARM_FAULT_SWITCH(FARM_FP_ALLOC_ADOPT_HOLD))
		return 0; /* test-only: its frees stay deferred */
	pthread_mutex_lock(&g->adopt_lock);
	if (!g->adopter_up) {
		rc = pthread_create(&g->adopter, NULL, adopter_main, g);
		if (rc) {
			pthread_mutex_unlock(&g->adopt_lock);
			return -rc;
		}
		g->adopter_up = true;
	}
	struct adopt_region *a = *adopt_find(g, region);
	if (a && !a->taken) /* (gone: adopted since, by a racing call) */
		a->queued = true;
	pthread_cond_signal(&g->adopt_cv);
	pthread_mutex_unlock(&g->adopt_lock);
	return 0;
}

int farm_galloc_free_local_or_defer(farm_galloc *g, farm_loop *loop,
                                    farm_gaddr a, uint64_t then)
{
	if (!g || !loop)
		return -EINVAL;
	uint32_t id = farm_gaddr_region(a);
	if (!farm_alloc_region_is_local(g->ba, id)) {
		pthread_mutex_lock(&g->adopt_lock);
		if (!farm_alloc_region_is_local(g->ba, id)) {
			struct deferred *d = NULL;
			if (*adopt_find(g, id) && (d = malloc(sizeof(*d)))) {
				*d = (struct deferred){.a = a,
				                       .then = then,
				                       .next = g->deferred};
				g->deferred = d;
				atomic_fetch_add(&g->frees_deferred, 1);
			}
			pthread_mutex_unlock(&g->adopt_lock);
			return d ? 1 : -EREMOTE;
		}
		pthread_mutex_unlock(&g->adopt_lock);
	}
	int rc = farm_galloc_free_local(g, loop, a);
	if (!rc && in_adopted(g, id))
		atomic_fetch_add_explicit(&g->adopted_frees, 1,
		                          memory_order_relaxed);
	return rc;
}

/* ---- retiring a region ------------------------------------------------
 *
 * This machine stops being primary of a region (a new configuration moved
 * it): the new primary's allocator rebuilds it by scan and owns its free
 * slots, so ours must never hand one out again, nor write the memory, which
 * the caller is about to discard. The block allocator keeps the region as a
 * tombstone (farm_blockalloc_retire_region); here, the region is also taken
 * out of the pool and out of adoption.
 */
int farm_galloc_retire(farm_galloc *g, uint32_t region)
{
	if (!g || region == FARM_REGION_ID_NONE || region > FARM_REGION_ID_MAX)
		return -EINVAL;
	bool known = false;
	/* Adoption: wait for the adopter if it is on this region (its rebuild
	 * and deferred frees write the memory), else cancel an expectation. */
	struct deferred *d = NULL;
	pthread_mutex_lock(&g->adopt_lock);
	while (g->adopt_busy == region)
		pthread_cond_wait(&g->adopt_done_cv, &g->adopt_lock);
	if (*adopt_find(g, region)) { /* not taken: the adopter skips it */
		d = adopt_take_locked(g, region);
		known = true;
	}
	pthread_mutex_unlock(&g->adopt_lock);
	/* Its deferred frees are not done: the copy they would free in is
	 * discarded, and the new primary frees them in its own. */
	while (d) {
		struct deferred *n = d->next;
		atomic_fetch_add(&g->deferred_lost, 1);
		free(d);
		d = n;
	}
	/* The pool: a made but unused region is dropped. Wait for regions
	 * moving from the pool to the block allocator first. */
	pthread_mutex_lock(&g->lock);
	while (g->adding)
		pthread_cond_wait(&g->pool_cv, &g->lock);
	for (unsigned i = 0; i < g->npool;) {
		if (g->pool[i].r.id == region) {
			g->pool[i] = g->pool[--g->npool];
			known = true;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&g->lock);
	int rc = farm_blockalloc_retire_region(g->ba, region);
	if (rc && rc != -ENOENT)
		return rc;
	if (rc == 0)
		known = true;
	if (!known)
		return -ENOENT;
	atomic_fetch_add(&g->retired, 1);
	farm_info("alloc: region %" PRIu32 " retired (no longer primary here)",
	          region);
	return 0;
}

int farm_galloc_block_info(farm_galloc *g, farm_gaddr a, uint32_t *info)
{
	return g ? farm_alloc_block_info(g->ba, a, info) : -EINVAL;
}

/* ---- handlers: requests from other machines ------------------------------ */

struct served {
	struct farm_msg_token tok;
	farm_galloc *g;
};

static void reply_status(farm_loop *loop, const struct farm_msg_token *tok,
                         int status, const void *data, uint32_t len)
{
	int rc = status ? farm_msg_reply_error(loop, tok, status)
	                : farm_msg_reply(loop, tok, data, len);
	if (rc)
		farm_warn("galloc: cannot reply to machine %" PRIu32 ": %s",
		          tok->machine, farm_strerror(rc));
}

static void served_done(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	struct served *sv = ctx;
	struct alloc_rep r = {.addr = a};
	reply_status(loop, &sv->tok, status, &r, sizeof(r));
	free(sv);
}

static void h_alloc(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_galloc *g = arg;
	struct alloc_req q;
	if (in->len != sizeof(q) || !in->token.call_id) {
		farm_warn(
		        "galloc: bad allocation request from machine %" PRIu32,
		        in->src_machine);
		if (in->token.call_id)
			reply_status(loop, &in->token, -EINVAL, NULL, 0);
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	/* Only hints we own: a request for another machine's region would
	 * bounce between machines whose views differ. */
	if (!q.hint ||
	    !farm_alloc_region_is_local(g->ba, farm_gaddr_region(q.hint))) {
		reply_status(loop, &in->token, -EREMOTE, NULL, 0);
		return;
	}
	struct served *sv = malloc(sizeof(*sv));
	if (!sv) {
		reply_status(loop, &in->token, -ENOMEM, NULL, 0);
		return;
	}
	sv->tok = in->token;
	sv->g = g;
	atomic_fetch_add(&g->served_allocs, 1);
	int rc = galloc_start(g, loop, q.size, q.n, q.hint, served_done, sv);
	if (rc) {
		reply_status(loop, &in->token, rc, NULL, 0);
		free(sv);
	}
}

static void h_free(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_galloc *g = arg;
	struct free_req q;
	if (in->len != sizeof(q) || !in->token.call_id) {
		farm_warn("galloc: bad free request from machine %" PRIu32,
		          in->src_machine);
		if (in->token.call_id)
			reply_status(loop, &in->token, -EINVAL, NULL, 0);
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	int rc = -EREMOTE;
	if (farm_alloc_region_is_local(g->ba, farm_gaddr_region(q.addr))) {
		farm_slab *s = slab_of(g, loop, &rc);
		if (s)
			rc = farm_slab_free(s, q.addr);
	}
	atomic_fetch_add(&g->served_frees, 1);
	reply_status(loop, &in->token, rc, NULL, 0);
}

/* ---- lifetime ------------------------------------------------------------ */

int farm_galloc_create(farm_as *as, farm_msg *msg, farm_galloc **out)
{
	if (!as || !msg || !out)
		return -EINVAL;
	if (farm_msg_nthreads(msg) > MAX_LOOPS)
		return -EINVAL;
	farm_galloc *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->as = as;
	g->msg = msg;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->pool_cv, NULL);
	pthread_mutex_init(&g->adopt_lock, NULL);
	pthread_cond_init(&g->adopt_cv, NULL);
	pthread_cond_init(&g->adopt_done_cv, NULL);
	struct farm_blockalloc_attr ba = {.new_region = new_region_cb,
	                                  .ctx = g};
	int rc = farm_blockalloc_create(&ba, &g->ba);
	if (!rc)
		rc = farm_msg_handle(msg, FARM_MSGT_ALLOC, h_alloc, g);
	if (!rc)
		rc = farm_msg_handle(msg, FARM_MSGT_FREE, h_free, g);
	if (rc) {
		farm_blockalloc_destroy(g->ba);
		pthread_mutex_destroy(&g->lock);
		pthread_cond_destroy(&g->pool_cv);
		pthread_mutex_destroy(&g->adopt_lock);
		pthread_cond_destroy(&g->adopt_cv);
		pthread_cond_destroy(&g->adopt_done_cv);
		free(g);
		return rc;
	}
	*out = g;
	return 0;
}

void farm_galloc_destroy(farm_galloc *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->adopt_lock);
	g->adopt_stop = true;
	for (struct adopt_region *a = g->adopting; a; a = a->next)
		a->queued = false; /* not started: dropped */
	pthread_cond_signal(&g->adopt_cv);
	bool up = g->adopter_up;
	pthread_mutex_unlock(&g->adopt_lock);
	if (up)
		pthread_join(g->adopter, NULL);
	while (g->adopting) {
		struct adopt_region *a = g->adopting;
		g->adopting = a->next;
		free(a);
	}
	while (g->deferred) {
		struct deferred *d = g->deferred;
		g->deferred = d->next;
		free(d);
	}
	while (g->parked) { /* the loops are closed: nobody to answer */
		struct galloc_op *op = g->parked;
		g->parked = op->next;
		free(op);
	}
	pthread_mutex_destroy(&g->adopt_lock);
	pthread_cond_destroy(&g->adopt_cv);
	pthread_cond_destroy(&g->adopt_done_cv);
	for (unsigned i = 0; i < MAX_LOOPS; i++)
		farm_slab_destroy(g->slabs[i]);
	farm_blockalloc_destroy(g->ba);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->pool_cv);
	free(g);
}

farm_blockalloc *farm_galloc_blockalloc(farm_galloc *g)
{
	return g ? g->ba : NULL;
}

void farm_galloc_stats(farm_galloc *g, struct farm_galloc_stats *out)
{
	if (!g || !out)
		return;
	memset(out, 0, sizeof(*out));
	farm_blockalloc_stats(g->ba, &out->local);
	out->shipped_allocs = atomic_load(&g->shipped_allocs);
	out->served_allocs = atomic_load(&g->served_allocs);
	out->shipped_frees = atomic_load(&g->shipped_frees);
	out->served_frees = atomic_load(&g->served_frees);
	out->regions_added = atomic_load(&g->regions_added);
	out->region_waits = atomic_load(&g->region_waits);
	out->allocs_parked = atomic_load(&g->allocs_parked);
	out->adopted = atomic_load(&g->adopted);
	out->adopt_failed = atomic_load(&g->adopt_failed);
	out->adopt_skipped = atomic_load(&g->adopt_skipped);
	out->adopt_ns = atomic_load(&g->adopt_ns);
	out->adopt_max_ns = atomic_load(&g->adopt_max_ns);
	out->frees_deferred = atomic_load(&g->frees_deferred);
	out->deferred_freed = atomic_load(&g->deferred_freed);
	out->deferred_lost = atomic_load(&g->deferred_lost);
	out->adopted_allocs = atomic_load(&g->adopted_allocs);
	out->adopted_frees = atomic_load(&g->adopted_frees);
	out->retired = atomic_load(&g->retired);
}
