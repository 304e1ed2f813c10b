/*
 * fgraph, the requests a client ships to the owner of an id (the updates
 * and assoc_get): encoded, sent to the owner's loop, the reply checked
 * and handed to the caller's continuation. The owner's half is
 * graph_owner.c.
 */
#include "graph_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct sop {
	fg_graph *g;
	enum fg_op kind;
	union {
		fg_done_fn done;
		fg_edges_fn edges;
	} cont;
	void *ctx;
};

static void sop_cb(farm_loop *loop, void *ctx, int status, const void *reply,
                   uint32_t len)
{
	struct sop *s = ctx;
	fg_count(&s->g->st_ops[s->kind], 1);
	if (s->kind == FG_ASSOC_GET) {
		uint32_t n = 0;
		if (!status &&
		    (len < 4 || (memcpy(&n, reply, 4), n > FG_GET_MAX) ||
		     len != 4 + n * sizeof(struct fg_edge)))
			status = FARM_ECORRUPT;
		const struct fg_edge *e =
		        status ? NULL
		               : (const struct fg_edge *)((const uint8_t *)
		                                                  reply +
		                                          4);
		if (e && n) {
			/* the reply's bytes may not be aligned for edges */
			struct fg_edge *copy = malloc(n * sizeof(*copy));
			if (copy) {
				memcpy(copy, e, n * sizeof(*copy));
				s->cont.edges(loop, s->ctx, 0, copy, n);
				free(copy);
			} else {
				s->cont.edges(loop, s->ctx, -ENOMEM, NULL, 0);
			}
		} else {
			s->cont.edges(loop, s->ctx, status, NULL,
			              status ? 0 : n);
		}
	} else {
		struct up_reply r = {0};
		if (!status && len != sizeof(r))
			status = FARM_ECORRUPT;
		if (!status)
			memcpy(&r, reply, sizeof(r));
		s->cont.done(loop, s->ctx, status ? status : r.status);
	}
	free(s);
}

static int ship(fg_graph *g, farm_loop *loop, enum fg_op kind, uint64_t id1,
                uint16_t type, const void *req, uint32_t len, void *cont,
                void *ctx)
{
	struct sop *s = malloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->g = g;
	s->kind = kind;
	s->ctx = ctx;
	if (kind == FG_ASSOC_GET)
		s->cont.edges = (fg_edges_fn)cont;
	else
		s->cont.done = (fg_done_fn)cont;
	int rc = farm_msg_call(loop, fg_owner(g, id1), fg_owner_loop(g, id1),
	                       type, req, len, FG_RPC_NS, sop_cb, s);
	if (rc)
		free(s);
	return rc;
}

int fg_assoc_get(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                 const uint64_t *id2s, unsigned n, int64_t high, int64_t low,
                 fg_edges_fn cont, void *ctx)
{
	if (!fg_client_of(g, loop) || !id1 || !cont || !id2s ||
	    !fg_atype_ok(atype))
		return -EINVAL;
	if (!n || n > FG_GET_MAX || high < low)
		return -ERANGE;
	uint8_t buf[sizeof(struct get_req) + FG_GET_MAX * sizeof(uint64_t)];
	struct get_req rq = {
	        .id1 = id1, .atype = atype, .n = n, .high = high, .low = low};
	memcpy(buf, &rq, sizeof(rq));
	memcpy(buf + sizeof(rq), id2s, n * sizeof(uint64_t));
	return ship(g, loop, FG_ASSOC_GET, id1, FG_MSG_GET, buf,
	            (uint32_t)(sizeof(rq) + n * sizeof(uint64_t)), (void *)cont,
	            ctx);
}

static int update(fg_graph *g, farm_loop *loop, enum fg_op kind, uint8_t op,
                  uint64_t id1, uint32_t atype, uint64_t id2, uint32_t arg,
                  int64_t time, const void *data, uint32_t len, fg_done_fn cont,
                  void *ctx)
{
	if (!fg_client_of(g, loop) || !id1 || !cont || (len && !data))
		return -EINVAL;
	if (op >= UP_ASSOC_ADD &&
	    (!id2 || !fg_atype_ok(atype) ||
	     (op == UP_ASSOC_CHANGE_TYPE && !fg_atype_ok(arg))))
		return -EINVAL;
	uint32_t max = op >= UP_ASSOC_ADD ? FG_MAX_EDGE_DATA : FG_MAX_DATA;
	if (len > max)
		return -EMSGSIZE;
	uint8_t buf[sizeof(struct up_req) + FG_MAX_DATA];
	struct up_req rq = {.op = op,
	                    .len = len,
	                    .id1 = id1,
	                    .id2 = id2,
	                    .atype = atype,
	                    .arg = arg,
	                    .time = time};
	memcpy(buf, &rq, sizeof(rq));
	if (len)
		memcpy(buf + sizeof(rq), data, len);
	return ship(g, loop, kind, id1, FG_MSG_UPDATE, buf,
	            (uint32_t)sizeof(rq) + len, (void *)cont, ctx);
}

int fg_obj_add(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
               int64_t time, const void *data, uint32_t len, fg_done_fn cont,
               void *ctx)
{
	return update(g, loop, FG_OBJ_ADD, UP_OBJ_ADD, id, 0, 0, otype, time,
	              data, len, cont, ctx);
}

int fg_obj_load(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                int64_t time, const void *data, uint32_t len, uint32_t atype,
                const struct fg_edge *edges, unsigned n, fg_done_fn cont,
                void *ctx)
{
	if (!fg_client_of(g, loop) || !id || !cont || (len && !data) ||
	    (n && (!edges || !fg_atype_ok(atype))))
		return -EINVAL;
	if (n > FG_LOAD_MAX)
		return -E2BIG;
	if (len > FG_MAX_DATA)
		return -EMSGSIZE;
	for (unsigned i = 0; i < n; i++)
		if (edges[i].len > FG_MAX_EDGE_DATA)
			return -EMSGSIZE;
		else if (!edges[i].id2)
			return -EINVAL;
	uint8_t *buf = malloc(FG_UP_MAX);
	if (!buf)
		return -ENOMEM;
	struct up_req rq = {.op = UP_OBJ_LOAD,
	                    .id1 = id,
	                    .id2 = n,
	                    .atype = atype,
	                    .arg = otype,
	                    .time = time};
	uint8_t *p = buf + sizeof(rq);
	memcpy(p, &len, 4);
	p += 4;
	if (len)
		memcpy(p, data, len);
	p += len;
	for (unsigned i = 0; i < n; i++) {
		struct ld_edge le = {.id2 = edges[i].id2,
		                     .time = edges[i].time,
		                     .len = edges[i].len};
		memcpy(p, &le, sizeof(le));
		p += sizeof(le);
		memcpy(p, edges[i].data, le.len);
		p += le.len;
	}
	rq.len = (uint32_t)(p - buf - sizeof(rq));
	memcpy(buf, &rq, sizeof(rq));
	int rc = ship(g, loop, FG_OBJ_LOAD, id, FG_MSG_UPDATE, buf,
	              (uint32_t)(p - buf), (void *)cont, ctx);
	free(buf);
	return rc;
}

int fg_obj_update(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                  int64_t time, const void *data, uint32_t len, fg_done_fn cont,
                  void *ctx)
{
	return update(g, loop, FG_OBJ_UPDATE, UP_OBJ_UPDATE, id, 0, 0, otype,
	              time, data, len, cont, ctx);
}

int fg_obj_delete(fg_graph *g, farm_loop *loop, uint64_t id, fg_done_fn cont,
                  void *ctx)
{
	return update(g, loop, FG_OBJ_DELETE, UP_OBJ_DELETE, id, 0, 0, 0, 0,
	              NULL, 0, cont, ctx);
}

int fg_assoc_add(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                 uint64_t id2, int64_t time, const void *data, uint32_t len,
                 fg_done_fn cont, void *ctx)
{
	return update(g, loop, FG_ASSOC_ADD, UP_ASSOC_ADD, id1, atype, id2, 0,
	              time, data, len, cont, ctx);
}

int fg_assoc_delete(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                    uint64_t id2, fg_done_fn cont, void *ctx)
{
	return update(g, loop, FG_ASSOC_DELETE, UP_ASSOC_DELETE, id1, atype,
	              id2, 0, 0, NULL, 0, cont, ctx);
}

int fg_assoc_change_type(fg_graph *g, farm_loop *loop, uint64_t id1,
                         uint32_t atype, uint64_t id2, uint32_t newtype,
                         fg_done_fn cont, void *ctx)
{
	return update(g, loop, FG_ASSOC_CHANGE_TYPE, UP_ASSOC_CHANGE_TYPE, id1,
	              atype, id2, newtype, 0, NULL, 0, cont, ctx);
}
