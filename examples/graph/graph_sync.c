/*
 * fgraph: the blocking wrappers (graph.h), each an asynchronous call whose
 * continuation raises a flag that farm_loop_wait drives the loop until, or
 * until the wrapper's deadline passes.
 *
 * The wait record is on the heap: a wrapper that gives up leaves its
 * operation running (a shipped one until the owner answers or the
 * request's own timeout, FG_RPC_NS), and the continuation, which always
 * runs, frees the record it finds abandoned without touching the caller's
 * buffers.
 */
#include "graph_int.h"

#include <errno.h>
#include <stdlib.h>

struct wait {
	volatile int done;
	int status;
	bool abandoned;
	struct fg_obj *obj;
	uint64_t *count;
	struct fg_edge *out;
	unsigned cap, *n;
};

void fg_set_sync_timeout(fg_graph *g, uint64_t timeout_ns)
{
	if (g)
		atomic_store_explicit(&g->sync_timeout_ns, timeout_ns,
		                      memory_order_relaxed);
}

static uint64_t dflt(const fg_graph *g)
{
	return g ? atomic_load_explicit(&g->sync_timeout_ns,
	                                memory_order_relaxed)
	         : 0;
}

static struct wait *wait_new(void)
{
	return calloc(1, sizeof(struct wait));
}

/* @rc: what starting the operation returned. Its status, or the start's or
 * the wait's error (then @w is the continuation's to free). */
static int wait_for(farm_loop *loop, struct wait *w, int rc,
                    uint64_t timeout_ns)
{
	if (!w)
		return -ENOMEM;
	if (!rc) {
		rc = farm_loop_wait(loop, &w->done, timeout_ns);
		if (!w->done) {
			w->abandoned = true;
			return rc ? rc : -ETIMEDOUT;
		}
		rc = w->status;
	}
	free(w);
	return rc;
}

/* The continuations: 1 when the record was abandoned (and is now freed). */
static bool gone(struct wait *w)
{
	if (!w->abandoned)
		return false;
	free(w);
	return true;
}

static void obj_cb(farm_loop *loop, void *ctx, int status,
                   const struct fg_obj *o)
{
	(void)loop;
	struct wait *w = ctx;
	if (gone(w))
		return;
	w->status = status;
	if (!status && w->obj)
		*w->obj = *o;
	w->done = 1;
}

static void count_cb(farm_loop *loop, void *ctx, int status, uint64_t count)
{
	(void)loop;
	struct wait *w = ctx;
	if (gone(w))
		return;
	w->status = status;
	if (w->count)
		*w->count = status ? 0 : count;
	w->done = 1;
}

static void edges_cb(farm_loop *loop, void *ctx, int status,
                     const struct fg_edge *e, unsigned n)
{
	(void)loop;
	struct wait *w = ctx;
	if (gone(w))
		return;
	w->status = status;
	unsigned k = n < w->cap ? n : w->cap;
	if (!status && k && w->out)
		memcpy(w->out, e, k * sizeof(*e));
	if (w->n)
		*w->n = status ? 0 : k;
	w->done = 1;
}

static void done_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct wait *w = ctx;
	if (gone(w))
		return;
	w->status = status;
	w->done = 1;
}

/* Start @call with a new record @w (NULL: -ENOMEM without starting). */
#define RUN(loop, w, timeout, call) \
	wait_for((loop), (w), (w) ? (call) : -ENOMEM, (timeout))

int fg_obj_get_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                          struct fg_obj *out, uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	if (w)
		w->obj = out;
	return RUN(loop, w, timeout_ns, fg_obj_get(g, loop, id, obj_cb, w));
}

int fg_assoc_count_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                              uint32_t atype, uint64_t *count,
                              uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	if (w)
		w->count = count;
	return RUN(loop, w, timeout_ns,
	           fg_assoc_count(g, loop, id1, atype, count_cb, w));
}

static struct wait *edges_wait(struct fg_edge *out, unsigned cap, unsigned *n)
{
	struct wait *w = wait_new();
	if (w) {
		w->out = out;
		w->cap = cap;
		w->n = n;
	}
	return w;
}

int fg_assoc_range_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                              uint32_t atype, uint32_t pos, uint32_t limit,
                              struct fg_edge *out, unsigned cap, unsigned *n,
                              uint64_t timeout_ns)
{
	struct wait *w = edges_wait(out, cap, n);
	return RUN(
	        loop, w, timeout_ns,
	        fg_assoc_range(g, loop, id1, atype, pos, limit, edges_cb, w));
}

int fg_assoc_time_range_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                                   uint32_t atype, int64_t high, int64_t low,
                                   uint32_t limit, struct fg_edge *out,
                                   unsigned cap, unsigned *n,
                                   uint64_t timeout_ns)
{
	struct wait *w = edges_wait(out, cap, n);
	return RUN(loop, w, timeout_ns,
	           fg_assoc_time_range(g, loop, id1, atype, high, low, limit,
	                               edges_cb, w));
}

int fg_assoc_get_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                            uint32_t atype, const uint64_t *id2s, unsigned nid,
                            int64_t high, int64_t low, struct fg_edge *out,
                            unsigned cap, unsigned *n, uint64_t timeout_ns)
{
	struct wait *w = edges_wait(out, cap, n);
	return RUN(loop, w, timeout_ns,
	           fg_assoc_get(g, loop, id1, atype, id2s, nid, high, low,
	                        edges_cb, w));
}

int fg_obj_add_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                          uint32_t otype, int64_t time, const void *data,
                          uint32_t len, uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	return RUN(loop, w, timeout_ns,
	           fg_obj_add(g, loop, id, otype, time, data, len, done_cb, w));
}

int fg_obj_load_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                           uint32_t otype, int64_t time, const void *data,
                           uint32_t len, uint32_t atype,
                           const struct fg_edge *edges, unsigned n,
                           uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	return RUN(loop, w, timeout_ns,
	           fg_obj_load(g, loop, id, otype, time, data, len, atype,
	                       edges, n, done_cb, w));
}

int fg_obj_update_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                             uint32_t otype, int64_t time, const void *data,
                             uint32_t len, uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	return RUN(
	        loop, w, timeout_ns,
	        fg_obj_update(g, loop, id, otype, time, data, len, done_cb, w));
}

int fg_obj_delete_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                             uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	return RUN(loop, w, timeout_ns, fg_obj_delete(g, loop, id, done_cb, w));
}

int fg_assoc_add_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                            uint32_t atype, uint64_t id2, int64_t time,
                            const void *data, uint32_t len, uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	return RUN(loop, w, timeout_ns,
	           fg_assoc_add(g, loop, id1, atype, id2, time, data, len,
	                        done_cb, w));
}

int fg_assoc_delete_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                               uint32_t atype, uint64_t id2,
                               uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	return RUN(loop, w, timeout_ns,
	           fg_assoc_delete(g, loop, id1, atype, id2, done_cb, w));
}

int fg_assoc_change_type_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                                    uint32_t atype, uint64_t id2,
                                    uint32_t newtype, uint64_t timeout_ns)
{
	struct wait *w = wait_new();
	return RUN(loop, w, timeout_ns,
	           fg_assoc_change_type(g, loop, id1, atype, id2, newtype,
	                                done_cb, w));
}

/* ---- the wrappers with the handle's deadline ----------------------------- */

int fg_obj_get_sync(fg_graph *g, farm_loop *loop, uint64_t id,
                    struct fg_obj *out)
{
	return fg_obj_get_sync_timed(g, loop, id, out, dflt(g));
}

int fg_assoc_count_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, uint64_t *count)
{
	return fg_assoc_count_sync_timed(g, loop, id1, atype, count, dflt(g));
}

int fg_assoc_range_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, uint32_t pos, uint32_t limit,
                        struct fg_edge *out, unsigned cap, unsigned *n)
{
	return fg_assoc_range_sync_timed(g, loop, id1, atype, pos, limit, out,
	                                 cap, n, dflt(g));
}

int fg_assoc_time_range_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                             uint32_t atype, int64_t high, int64_t low,
                             uint32_t limit, struct fg_edge *out, unsigned cap,
                             unsigned *n)
{
	return fg_assoc_time_range_sync_timed(g, loop, id1, atype, high, low,
	                                      limit, out, cap, n, dflt(g));
}

int fg_assoc_get_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                      uint32_t atype, const uint64_t *id2s, unsigned nid,
                      int64_t high, int64_t low, struct fg_edge *out,
                      unsigned cap, unsigned *n)
{
	return fg_assoc_get_sync_timed(g, loop, id1, atype, id2s, nid, high,
	                               low, out, cap, n, dflt(g));
}

int fg_obj_add_sync(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                    int64_t time, const void *data, uint32_t len)
{
	return fg_obj_add_sync_timed(g, loop, id, otype, time, data, len,
	                             dflt(g));
}

int fg_obj_load_sync(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                     int64_t time, const void *data, uint32_t len,
                     uint32_t atype, const struct fg_edge *edges, unsigned n)
{
	return fg_obj_load_sync_timed(g, loop, id, otype, time, data, len,
	                              atype, edges, n, dflt(g));
}

int fg_obj_update_sync(fg_graph *g, farm_loop *loop, uint64_t id,
                       uint32_t otype, int64_t time, const void *data,
                       uint32_t len)
{
	return fg_obj_update_sync_timed(g, loop, id, otype, time, data, len,
	                                dflt(g));
}

int fg_obj_delete_sync(fg_graph *g, farm_loop *loop, uint64_t id)
{
	return fg_obj_delete_sync_timed(g, loop, id, dflt(g));
}

int fg_assoc_add_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                      uint32_t atype, uint64_t id2, int64_t time,
                      const void *data, uint32_t len)
{
	return fg_assoc_add_sync_timed(g, loop, id1, atype, id2, time, data,
	                               len, dflt(g));
}

int fg_assoc_delete_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                         uint32_t atype, uint64_t id2)
{
	return fg_assoc_delete_sync_timed(g, loop, id1, atype, id2, dflt(g));
}

int fg_assoc_change_type_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                              uint32_t atype, uint64_t id2, uint32_t newtype)
{
	return fg_assoc_change_type_sync_timed(g, loop, id1, atype, id2,
	                                       newtype, dflt(g));
}
