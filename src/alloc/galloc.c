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
#include "alloc/galloc_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

#define MAX_RETRY 4 /* region requests per allocation */
#define MAX_PARKS 8 /* waits for an adoption per allocation (op_park) */

/* Wire formats. */
struct alloc_req {
	uint64_t size; /* object bytes, or element bytes of an array */
	uint64_t n;    /* 0: an object; else array elements */
	uint64_t hint;
	uint64_t mark; /* farm_galloc_alloc_marked's */
};
struct alloc_rep {
	uint64_t addr;
};
struct free_req {
	uint64_t addr;
};

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
	uint64_t mark; /* set by the claim (farm_slab_alloc_marked) */
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
void farm_galloc_parked_release_locked(farm_galloc *g)
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
		rc = op->n ? farm_alloc_array_marked(s, op->size, op->n,
		                                     op->hint, op->mark, &a)
		           : farm_slab_alloc_marked(s, op->size, op->hint,
		                                    op->mark, &a);
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
	if (!rc && farm_galloc_in_adopted(g, farm_gaddr_region(a)))
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
                        uint64_t n, farm_gaddr hint, uint64_t mark,
                        farm_galloc_fn cont, void *ctx)
{
	if (!g || !loop || !cont || size == 0 ||
	    (mark & ~FARM_OBJHDR_MARK_MASK))
		return -EINVAL;
	struct galloc_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct galloc_op){.g = g,
	                         .size = size,
	                         .n = n,
	                         .hint = hint,
	                         .mark = mark,
	                         .cont = cont,
	                         .ctx = ctx};
	if (hint &&
	    !farm_alloc_region_is_local(g->ba, farm_gaddr_region(hint))) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		if (farm_as_replicas(g->as, farm_gaddr_region(hint), rep) &&
		    rep[0] != farm_as_machine_id(g->as)) {
			struct alloc_req q = {.size = size,
			                      .n = n,
			                      .hint = hint,
			                      .mark = mark};
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
	return galloc_start(g, loop, size, 0, hint, 0, cont, ctx);
}

int farm_galloc_alloc_marked(farm_galloc *g, farm_loop *loop, uint64_t size,
                             farm_gaddr hint, uint64_t mark,
                             farm_galloc_fn cont, void *ctx)
{
	return galloc_start(g, loop, size, 0, hint, mark, cont, ctx);
}

int farm_galloc_alloc_array(farm_galloc *g, farm_loop *loop, uint64_t elem_size,
                            uint64_t n, farm_gaddr hint, farm_galloc_fn cont,
                            void *ctx)
{
	if (n == 0)
		return -EINVAL;
	return galloc_start(g, loop, elem_size, n, hint, 0, cont, ctx);
}

int farm_galloc_alloc_array_marked(farm_galloc *g, farm_loop *loop,
                                   uint64_t elem_size, uint64_t n,
                                   farm_gaddr hint, uint64_t mark,
                                   farm_galloc_fn cont, void *ctx)
{
	if (n == 0)
		return -EINVAL;
	return galloc_start(g, loop, elem_size, n, hint, mark, cont, ctx);
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

/* @loop's slab, for a free of @a here now; NULL with the error in *@rc:
 * -EINVAL, -EREMOTE (not local), or slab_of's. */
static farm_slab *local_slab(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                             int *rc)
{
	*rc = -EINVAL;
	if (!g || !loop)
		return NULL;
	*rc = -EREMOTE;
	if (!farm_alloc_region_is_local(g->ba, farm_gaddr_region(a)))
		return NULL;
	return slab_of(g, loop, rc);
}

int farm_galloc_free_local(farm_galloc *g, farm_loop *loop, farm_gaddr a)
{
	int rc;
	farm_slab *s = local_slab(g, loop, a, &rc);
	return s ? farm_slab_free(s, a) : rc;
}

int farm_galloc_free_local_unlock(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                                  uint64_t then)
{
	int rc;
	farm_slab *s = local_slab(g, loop, a, &rc);
	return s ? farm_slab_free_unlock(s, a, then) : rc;
}

int farm_galloc_free_array_local(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                                 uint64_t elem_size, uint64_t n)
{
	int rc;
	farm_slab *s = local_slab(g, loop, a, &rc);
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
	int rc = galloc_start(g, loop, q.size, q.n, q.hint, q.mark, served_done,
	                      sv);
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
