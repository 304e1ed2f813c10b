/*
 * fgraph: a Tao-style graph store on libfarm (FaRM NSDI'14 section 4.4),
 * built on the public API only (include/farm/).
 *
 * Data model (Tao): objects (nodes) with a 64-bit id (not 0), a type, a
 * version, a timestamp and up to FG_MAX_DATA bytes of data; associations
 * (edges) (id1, atype, id2) with a timestamp and up to FG_MAX_EDGE_DATA
 * bytes of data. An association type may have an inverse type
 * (fg_attr.inverse): adding, deleting or retyping (id1, a, id2) then does
 * the same to (id2, inverse(a), id1) in the same transaction (self-loops
 * have no inverse edge). A node has edges of at most FG_MAX_TYPES types.
 *
 * Layout (README.md): a node is one libfarm object with its data inline;
 * the KV store maps an id to the node's fat pointer, which clients cache.
 * A node's edges of one type are a list of blocks of edges, newest first
 * (ordered by time, then id2, both descending), allocated next to the node;
 * the node holds each list's head pointer and count. A head block that
 * stops being the head is freed (its content moved to a new object), so a
 * cached head pointer goes stale (FARM_EFREED) and is fetched again.
 *
 * Every id has an owner: the machine (and loop) that stores its node,
 * mix(id) mod the graph's machines. Reads (obj_get, assoc_count,
 * assoc_range, assoc_time_range) are lock-free reads from any machine;
 * assoc_get is shipped to the owner of id1; updates are shipped to the
 * owner of id1, which runs them as transactions.
 *
 *   fg_create()   on each machine after farm_kv_create, before
 *                 farm_node_start (registers message handlers)
 *   fg_attach()   on every loop's thread, after farm_kv_attach (every loop
 *                 serves owner requests)
 *   operations, asynchronous (continuations on @loop) or *_sync
 *   fg_detach(), fg_destroy()
 *
 * Errors are negative codes (farm_strerror, fg_strerror): -EINVAL (id 0,
 * NULL arguments, a loop not attached), -EMSGSIZE (data too long),
 * -ERANGE (a limit of 0 or above FG_MAX_LIMIT, a position above
 * FG_MAX_POS, high < low, an id2 set of 0 or more than FG_GET_MAX),
 * -ENOENT (no such node or edge), -EEXIST (obj_add of an id that exists),
 * -ENOSPC (a node with FG_MAX_TYPES edge types already, or memory full),
 * -EBUSY (kept conflicting; retry), -ETIMEDOUT / FARM_EPEERDEAD (the
 * owner did not answer). A failed update changes nothing, except one that
 * reports -ETIMEDOUT or FARM_EPEERDEAD: its outcome is UNKNOWN (the owner
 * may have run it, or may still run it: read to learn).
 *
 * Return convention: every call returns 0 or a negative error, except the
 * updates' status (their continuation's, and the *_sync wrapper's), which
 * is >= 0 on success: assoc_add's is 1 when it added the edge and 0 when
 * it overwrote one, every other update's 0. Reads (obj_get, assoc_count,
 * assoc_range, assoc_time_range, assoc_get) return 0, their results in
 * their out parameters (edges: *n of them), never a count as the status.
 *
 * Consistency: every single-node read is linearizable with the updates of
 * that node: it returns the node (and its list) as they were at one
 * instant between its call and its answer, and a read that begins after
 * another ended never sees an older state. A range over several blocks
 * returns one state of the whole list.
 */
#ifndef FGRAPH_GRAPH_H
#define FGRAPH_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/kv.h>
#include <farm/msg.h>
#include <farm/node.h>
#include <farm/txn.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FG_MAX_DATA      1024u  /* node data bytes */
#define FG_MAX_EDGE_DATA 46u    /* edge data bytes */
#define FG_MAX_TYPES     4u     /* edge types per node */
#define FG_MAX_LIMIT     10000u /* edges one range returns */
#define FG_MAX_POS       1000000u
#define FG_GET_MAX       64u  /* id2s one assoc_get takes */
#define FG_MAX_ATYPE     255u /* association types are 1..FG_MAX_ATYPE */

typedef struct fg_graph fg_graph;

struct fg_attr {
	/* inverse[a]: the inverse type of association type a, 0 for none.
	 * Must be symmetric (inverse[inverse[a]] == a). */
	uint8_t inverse[FG_MAX_ATYPE + 1];
	/* Client cache entries per loop (fat pointers of nodes and list
	 * heads; 32 bytes each, four-way set associative), a power of two;
	 * 0: 65536. */
	uint32_t cache_entries;
};

struct fg_obj {
	uint64_t id;
	uint32_t otype;
	uint32_t version;
	int64_t time;
	uint32_t len;
	uint8_t data[FG_MAX_DATA];
};

struct fg_edge {
	uint64_t id1, id2;
	uint32_t atype;
	uint32_t len;
	int64_t time;
	uint8_t data[FG_MAX_EDGE_DATA];
};

/*
 * fg_create() - the graph on machine @node over KV store @kv, whose ids'
 * owners are machines 0..@nmachines - 1 (the machines the KV store joins).
 * Before farm_node_start. 0; -EINVAL (bad arguments or an asymmetric
 * inverse table); -EEXIST (a graph exists on this machine); -ENOMEM.
 */
int fg_create(farm_node *node, farm_kv *kv, const struct fg_attr *attr,
              unsigned nmachines, fg_graph **out);
void fg_destroy(fg_graph *g);
int fg_attach(fg_graph *g, farm_loop *loop);
void fg_detach(fg_graph *g, farm_loop *loop);
/* The machine that owns @id. */
uint32_t fg_owner(const fg_graph *g, uint64_t id);

/* ---- asynchronous operations ---------------------------------------------
 * Each returns 0 and runs its continuation once on @loop (never inside the
 * call), or returns an error and never runs it. Results are valid during
 * the continuation only. */
typedef void (*fg_obj_fn)(farm_loop *loop, void *ctx, int status,
                          const struct fg_obj *o);
typedef void (*fg_count_fn)(farm_loop *loop, void *ctx, int status,
                            uint64_t count);
typedef void (*fg_edges_fn)(farm_loop *loop, void *ctx, int status,
                            const struct fg_edge *e, unsigned n);
/* Updates: @status >= 0 on success (assoc_add: 1 added, 0 overwritten). */
typedef void (*fg_done_fn)(farm_loop *loop, void *ctx, int status);

int fg_obj_get(fg_graph *g, farm_loop *loop, uint64_t id, fg_obj_fn cont,
               void *ctx);
int fg_assoc_count(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                   fg_count_fn cont, void *ctx);
/* Edges pos .. pos + limit - 1 of the list, newest first. */
int fg_assoc_range(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                   uint32_t pos, uint32_t limit, fg_edges_fn cont, void *ctx);
/* The newest @limit edges with low <= time <= high, newest first. */
int fg_assoc_time_range(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, int64_t high, int64_t low,
                        uint32_t limit, fg_edges_fn cont, void *ctx);
/* The edges (id1, atype, id2) for the @n id2s with low <= time <= high
 * (INT64_MAX, INT64_MIN: any), newest first. Shipped to id1's owner. */
int fg_assoc_get(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                 const uint64_t *id2s, unsigned n, int64_t high, int64_t low,
                 fg_edges_fn cont, void *ctx);

int fg_obj_add(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
               int64_t time, const void *data, uint32_t len, fg_done_fn cont,
               void *ctx);
/*
 * fg_obj_load() - the loader's operation: a new node with its list of
 * @atype edges (@n of them, FG_LOAD_MAX at most, no id2 twice) made in one
 * transaction. The edges' id1 and atype fields are ignored. As obj_add
 * otherwise (-EEXIST, -EMSGSIZE); -E2BIG for more than FG_LOAD_MAX edges.
 */
#define FG_LOAD_MAX 256u
int fg_obj_load(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                int64_t time, const void *data, uint32_t len, uint32_t atype,
                const struct fg_edge *edges, unsigned n, fg_done_fn cont,
                void *ctx);
/* New type, time and data; version + 1. */
int fg_obj_update(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                  int64_t time, const void *data, uint32_t len, fg_done_fn cont,
                  void *ctx);
/* The node and its edge lists (not edges of other nodes that point to it). */
int fg_obj_delete(fg_graph *g, farm_loop *loop, uint64_t id, fg_done_fn cont,
                  void *ctx);
/* Add, or overwrite time and data of an existing edge. id1 must exist (and
 * id2 when atype has an inverse). */
int fg_assoc_add(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                 uint64_t id2, int64_t time, const void *data, uint32_t len,
                 fg_done_fn cont, void *ctx);
int fg_assoc_delete(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                    uint64_t id2, fg_done_fn cont, void *ctx);
/* Move the edge to type @newtype (time and data kept); -EEXIST when an edge
 * (id1, newtype, id2) exists. */
int fg_assoc_change_type(fg_graph *g, farm_loop *loop, uint64_t id1,
                         uint32_t atype, uint64_t id2, uint32_t newtype,
                         fg_done_fn cont, void *ctx);

/* ---- blocking wrappers (drive @loop; not from handlers) ------------------
 * Ranges: at most @cap edges are copied into @out, *@n the number returned.
 *
 * Deadlines: each wrapper waits at most the handle's default
 * (fg_set_sync_timeout; 0, the initial value, is no limit of the wrapper's
 * own: a shipped operation then ends by the owner's answer or the
 * request's 10 s timeout) or, for the *_timed variants, @timeout_ns (0: no
 * limit). Past it the wrapper returns -ETIMEDOUT and writes none of its
 * outputs; the operation goes on to the outcome the asynchronous call
 * defines, unreported. A read that timed out had no effect; an update's
 * outcome is UNKNOWN (it may have been applied, or may still be: read the
 * node to learn). */
void fg_set_sync_timeout(fg_graph *g, uint64_t timeout_ns);

int fg_obj_get_sync(fg_graph *g, farm_loop *loop, uint64_t id,
                    struct fg_obj *out);
int fg_assoc_count_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, uint64_t *count);
int fg_assoc_range_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, uint32_t pos, uint32_t limit,
                        struct fg_edge *out, unsigned cap, unsigned *n);
int fg_assoc_time_range_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                             uint32_t atype, int64_t high, int64_t low,
                             uint32_t limit, struct fg_edge *out, unsigned cap,
                             unsigned *n);
int fg_assoc_get_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                      uint32_t atype, const uint64_t *id2s, unsigned nid,
                      int64_t high, int64_t low, struct fg_edge *out,
                      unsigned cap, unsigned *n);
int fg_obj_add_sync(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                    int64_t time, const void *data, uint32_t len);
int fg_obj_load_sync(fg_graph *g, farm_loop *loop, uint64_t id, uint32_t otype,
                     int64_t time, const void *data, uint32_t len,
                     uint32_t atype, const struct fg_edge *edges, unsigned n);
int fg_obj_update_sync(fg_graph *g, farm_loop *loop, uint64_t id,
                       uint32_t otype, int64_t time, const void *data,
                       uint32_t len);
int fg_obj_delete_sync(fg_graph *g, farm_loop *loop, uint64_t id);
int fg_assoc_add_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                      uint32_t atype, uint64_t id2, int64_t time,
                      const void *data, uint32_t len);
int fg_assoc_delete_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                         uint32_t atype, uint64_t id2);
int fg_assoc_change_type_sync(fg_graph *g, farm_loop *loop, uint64_t id1,
                              uint32_t atype, uint64_t id2, uint32_t newtype);

/* The same with a deadline of their own (ns, 0: none). */
int fg_obj_get_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                          struct fg_obj *out, uint64_t timeout_ns);
int fg_assoc_count_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                              uint32_t atype, uint64_t *count,
                              uint64_t timeout_ns);
int fg_assoc_range_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                              uint32_t atype, uint32_t pos, uint32_t limit,
                              struct fg_edge *out, unsigned cap, unsigned *n,
                              uint64_t timeout_ns);
int fg_assoc_time_range_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                                   uint32_t atype, int64_t high, int64_t low,
                                   uint32_t limit, struct fg_edge *out,
                                   unsigned cap, unsigned *n,
                                   uint64_t timeout_ns);
int fg_assoc_get_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                            uint32_t atype, const uint64_t *id2s, unsigned nid,
                            int64_t high, int64_t low, struct fg_edge *out,
                            unsigned cap, unsigned *n, uint64_t timeout_ns);
int fg_obj_add_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                          uint32_t otype, int64_t time, const void *data,
                          uint32_t len, uint64_t timeout_ns);
int fg_obj_load_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                           uint32_t otype, int64_t time, const void *data,
                           uint32_t len, uint32_t atype,
                           const struct fg_edge *edges, unsigned n,
                           uint64_t timeout_ns);
int fg_obj_update_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                             uint32_t otype, int64_t time, const void *data,
                             uint32_t len, uint64_t timeout_ns);
int fg_obj_delete_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id,
                             uint64_t timeout_ns);
int fg_assoc_add_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                            uint32_t atype, uint64_t id2, int64_t time,
                            const void *data, uint32_t len,
                            uint64_t timeout_ns);
int fg_assoc_delete_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                               uint32_t atype, uint64_t id2,
                               uint64_t timeout_ns);
int fg_assoc_change_type_sync_timed(fg_graph *g, farm_loop *loop, uint64_t id1,
                                    uint32_t atype, uint64_t id2,
                                    uint32_t newtype, uint64_t timeout_ns);

/*
 * fg_warm_sync() - fill @loop's cache with what a long-running client
 * holds: the fat pointers of nodes @first .. @first + @n - 1 (one batched
 * KV multi-get per FG_WARM_BATCH ids) and of their lists' heads (one
 * lock-free read per node found, many in flight). Not counted in the
 * operation counters. Returns the nodes cached (>= 0) or an error.
 */
#define FG_WARM_BATCH 1024u
long fg_warm_sync(fg_graph *g, farm_loop *loop, uint64_t first, uint64_t n);

/* ---- counters (per graph handle, all loops; approximate while running) */
enum fg_op {
	FG_OBJ_GET,
	FG_ASSOC_COUNT,
	FG_ASSOC_RANGE,
	FG_ASSOC_TIME_RANGE,
	FG_ASSOC_GET,
	FG_OBJ_ADD,
	FG_OBJ_UPDATE,
	FG_OBJ_DELETE,
	FG_ASSOC_ADD,
	FG_ASSOC_DELETE,
	FG_ASSOC_CHANGE_TYPE,
	FG_OBJ_LOAD,
	FG_NOPS
};
struct fg_stats {
	uint64_t ops[FG_NOPS];     /* operations completed (any status) */
	uint64_t reads[FG_NOPS];   /* lock-free object reads they issued */
	uint64_t kv_gets[FG_NOPS]; /* id lookups in the KV store */
	uint64_t retries; /* reads restarted (stale pointer, changed list) */
	uint64_t stale_heads; /* cached list heads found freed (replaced) */
	uint64_t tx_retries;  /* owner transactions run again */
	uint64_t tx_commits;
};
void fg_stats_get(const fg_graph *g, struct fg_stats *out);
const char *fg_op_name(enum fg_op op);
const char *fg_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
