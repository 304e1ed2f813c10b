/*
 * fgraph: the blocking wrappers (graph.h), each an asynchronous call whose
 * continuation raises a flag that farm_loop_wait drives the loop until.
 */
#include "graph_int.h"

#include <errno.h>

struct wait {
	volatile int done;
	int status;
	struct fg_obj *obj;
	uint64_t *count;
	struct fg_edge *out;
	unsigned cap, *n;
};

static int wait_for(farm_loop *loop, struct wait *w, int rc)
{
	if (rc)
		return rc;
	rc = farm_loop_wait(loop, &w->done, 0);
	return rc ? rc : w->status;
}

static void obj_cb(farm_loop *loop, void *ctx, int status,
                   const struct fg_obj *o)
{
	struct wait *w = ctx;
	w->status = status;
	if (!status && w->obj)
		*w->obj = *o;
	w->done = 1;
}

static void count_cb(farm_loop *loop, void *ctx, int status, uint64_t count)
{
	struct wait *w = ctx;
	w->status = status;
	if (w->count)
		*w->count = status ? 0 : count;
	w->done = 1;
}

static void edges_cb(farm_loop *loop, void *ctx, int status,
                     const struct fg_edge *e, unsigned n)
{
	struct wait *w = ctx;
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
	struct wait *w = ctx;
	w->status = status;
	w->done = 1;
}

int fg_obj_get_sync(fg_graph *g, farm_loop *loop, uint64_t id,
                    struct fg_obj *out)
{
	struct wait w = {.obj = out};
	return wait_for(loop, &w, fg_obj_get(g, loop, id, obj_cb, &w));
}

int fg_assoc_count_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, uint64_t *count)
{
	struct wait w = {.count = count};
	return wait_for(loop, &w,
	                fg_assoc_count(g, loop, id1, atype, count_cb, &w));
}

int fg_assoc_range_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, uint32_t pos, uint32_t limit,
                        struct fg_edge *out, unsigned cap, unsigned *n)
{
	struct wait w = {.out = out, .cap = cap, .n = n};
	return wait_for(
	        loop, &w,
	        fg_assoc_range(g, loop, id1, atype, pos, limit, edges_cb, &w));
}

int fg_assoc_time_range_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                             uint32_t atype, int64_t high, int64_t low,
                             uint32_t limit, struct fg_edge *out, unsigned cap,
                             unsigned *n)
{
	struct wait w = {.out = out, .cap = cap, .n = n};
	return wait_for(loop, &w,
	                fg_assoc_time_range(g, loop, id1, atype, high, low,
	                                    limit, edges_cb, &w));
}

int fg_assoc_get_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                      uint32_t atype, const uint64_t *id2s, unsigned nid,
                      int64_t high, int64_t low, struct fg_edge *out,
                      unsigned cap, unsigned *n)
{
	struct wait w = {.out = out, .cap = cap, .n = n};
	return wait_for(loop, &w,
	                fg_assoc_get(g, loop, id1, atype, id2s, nid, high, low,
	                             edges_cb, &w));
}

int fg_obj_add_sync(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                    int64_t time, const void *data, uint32_t len)
{
	struct wait w = {0};
	return wait_for(
	        loop, &w,
	        fg_obj_add(g, loop, id, otype, time, data, len, done_cb, &w));
}

int fg_obj_load_sync(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                     int64_t time, const void *data, uint32_t len,
                     uint32_t atype, const struct fg_edge *edges, unsigned n)
{
	struct wait w = {0};
	return wait_for(loop, &w,
	                fg_obj_load(g, loop, id, otype, time, data, len, atype,
	                            edges, n, done_cb, &w));
}

int fg_obj_update_sync(fg_graph *g, farm_loop *loop, uint64_t id,
                       uint32_t otype, int64_t time, const void *data,
                       uint32_t len)
{
	struct wait w = {0};
	return wait_for(loop, &w,
	                fg_obj_update(g, loop, id, otype, time, data, len,
	                              done_cb, &w));
}

int fg_obj_delete_sync(fg_graph *g, farm_loop *loop, uint64_t id)
{
	struct wait w = {0};
	return wait_for(loop, &w, fg_obj_delete(g, loop, id, done_cb, &w));
}

int fg_assoc_add_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                      uint32_t atype, uint64_t id2, int64_t time,
                      const void *data, uint32_t len)
{
	struct wait w = {0};
	return wait_for(loop, &w,
	                fg_assoc_add(g, loop, id1, atype, id2, time, data, len,
	                             done_cb, &w));
}

int fg_assoc_delete_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                         uint32_t atype, uint64_t id2)
{
	struct wait w = {0};
	return wait_for(loop, &w,
	                fg_assoc_delete(g, loop, id1, atype, id2, done_cb, &w));
}

int fg_assoc_change_type_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                              uint32_t atype, uint64_t id2, uint32_t newtype)
{
	struct wait w = {0};
	return wait_for(loop, &w,
	                fg_assoc_change_type(g, loop, id1, atype, id2, newtype,
	                                     done_cb, &w));
}
