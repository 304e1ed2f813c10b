/*
 * fgraph internals: the layout of nodes and edge blocks in the cluster's
 * memory, the owner messages, and what the client and owner halves share.
 */
#ifndef FGRAPH_GRAPH_INT_H
#define FGRAPH_GRAPH_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "graph.h"

/* ---- objects in the cluster's memory ------------------------------------ */

/* A node's flags. */
#define GN_DELETED 1u /* deleted: freed once the KV store forgets it */
#define GN_MOVED   2u /* moved to fwd (grown): freed once the KV has fwd */

struct gn_list {
	uint32_t atype; /* 0: slot unused */
	uint32_t count;
	farm_fatptr head; /* NULL addr: empty */
};

struct gn_hdr {
	uint64_t id;
	uint32_t otype;
	uint32_t version;
	int64_t time;
	uint16_t dlen, dcap;
	uint8_t flags, pad[3];
	farm_fatptr fwd;
	struct gn_list lists[FG_MAX_TYPES];
	/* dcap bytes of data follow */
};

struct gb_edge {
	uint64_t id2;
	int64_t time;
	uint16_t len;
	uint8_t data[FG_MAX_EDGE_DATA];
};
_Static_assert(sizeof(struct gb_edge) == 64, "edge slot is one line's worth");

struct gb_hdr {
	uint64_t id1;
	uint32_t atype;
	uint16_t n, cap;
	farm_fatptr next;
	/* In a list's head: +1 by every transaction that changes the list
	 * (any block of it), so a reader of several blocks that finds the
	 * head's seq unchanged after them read one state of the list. */
	uint64_t seq;
	/* cap edges follow, newest first */
};

#define GB_MIN_CAP  4u
#define GB_MAX_CAP  32u
#define GN_MAX_SIZE ((uint32_t)sizeof(struct gn_hdr) + FG_MAX_DATA)
#define GB_MAX_SIZE                         \
	((uint32_t)(sizeof(struct gb_hdr) + \
	            GB_MAX_CAP * sizeof(struct gb_edge)))

static inline uint32_t gb_size(unsigned cap)
{
	return (uint32_t)(sizeof(struct gb_hdr) + cap * sizeof(struct gb_edge));
}
static inline struct gb_edge *gb_edges(void *b)
{
	return (struct gb_edge *)((char *)b + sizeof(struct gb_hdr));
}
static inline uint8_t *gn_data(void *n)
{
	return (uint8_t *)n + sizeof(struct gn_hdr);
}
/* Edge order: newer first; equal times by id2, larger first. */
static inline bool edge_before(int64_t t1, uint64_t a, int64_t t2, uint64_t b)
{
	return t1 != t2 ? t1 > t2 : a > b;
}
static inline int gn_slot(const struct gn_hdr *n, uint32_t atype)
{
	for (unsigned i = 0; i < FG_MAX_TYPES; i++)
		if (n->lists[i].atype == atype)
			return (int)i;
	return -1;
}
/* Whether a block read as @b (@size bytes) is one of (@id1, @atype)'s. */
static inline bool gb_sane(const struct gb_hdr *b, uint32_t size, uint64_t id1,
                           uint32_t atype)
{
	return size >= sizeof(*b) && b->id1 == id1 && b->atype == atype &&
	       b->cap >= 1 && b->cap <= GB_MAX_CAP && b->n <= b->cap &&
	       gb_size(b->cap) <= size;
}
static inline bool gn_sane(const struct gn_hdr *n, uint32_t size, uint64_t id)
{
	return size >= sizeof(*n) && n->id == id && n->dlen <= n->dcap &&
	       sizeof(*n) + n->dcap <= size;
}

/* ---- ids ----------------------------------------------------------------- */

static inline uint64_t fg_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* The KV key of node @id. */
#define FG_KEY_LEN 9u
static inline void fg_key(uint64_t id, uint8_t k[FG_KEY_LEN])
{
	k[0] = 'G';
	memcpy(k + 1, &id, 8);
}

/* ---- owner messages ------------------------------------------------------ */

#define FG_MSG_UPDATE 0x4701
#define FG_MSG_GET    0x4702
#define FG_RPC_NS     (10ull * 1000000000ull)

enum {
	UP_OBJ_ADD = 1,
	UP_OBJ_UPDATE,
	UP_OBJ_DELETE,
	UP_ASSOC_ADD,
	UP_ASSOC_DELETE,
	UP_ASSOC_CHANGE_TYPE,
	UP_OBJ_LOAD
};

struct up_req {
	uint8_t op, pad[3];
	uint32_t len;
	uint64_t id1, id2;
	uint32_t atype, arg; /* arg: otype, or newtype */
	int64_t time;
	/* len bytes of data follow */
};
/* obj_load: id2 holds the edge count; after the node's data come the edges,
 * newest first, each a struct ld_edge and its data. */
struct ld_edge {
	uint64_t id2;
	int64_t time;
	uint32_t len;
	uint32_t pad;
};
#define FG_UP_MAX                                  \
	(sizeof(struct up_req) + 4 + FG_MAX_DATA + \
	 FG_LOAD_MAX * (sizeof(struct ld_edge) + FG_MAX_EDGE_DATA))

struct up_reply {
	int32_t status;
	uint32_t pad;
};

struct get_req {
	uint64_t id1;
	uint32_t atype, n;
	int64_t high, low;
	/* n id2s follow */
};
/* Reply: uint32_t n, then n struct fg_edge. */

/* ---- the graph handle ---------------------------------------------------- */

struct fg_owner; /* per loop, graph_owner.c */
struct fg_client;

struct fg_graph {
	farm_node *node;
	farm_kv *kv;
	farm_txm *txm;
	farm_msg *msg;
	uint32_t me;
	unsigned nmachines, nthreads;
	uint8_t inverse[FG_MAX_ATYPE + 1];
	uint32_t cache_entries;
	struct fg_owner *owner[64];   /* by loop index */
	struct fg_client *client[64]; /* by loop index */
	_Atomic uint64_t st_ops[FG_NOPS], st_reads[FG_NOPS], st_kv[FG_NOPS];
	_Atomic uint64_t st_retries, st_tx_retries, st_commits, st_stale_heads;
	_Atomic uint64_t sync_timeout_ns; /* the *_sync wrappers' default */
};

static inline void fg_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* The loop that serves @id on its owner. */
static inline unsigned fg_owner_loop(const fg_graph *g, uint64_t id)
{
	return (unsigned)((fg_mix(id) / g->nmachines) % g->nthreads);
}

static inline bool fg_atype_ok(uint32_t atype)
{
	return atype >= 1 && atype <= FG_MAX_ATYPE;
}

/* graph.c: @g's client on @loop, NULL if @loop is not attached. */
struct fg_client *fg_client_of(fg_graph *g, farm_loop *loop);

/* graph_owner.c */
int fg_owner_attach(fg_graph *g, farm_loop *loop);
/* Refuse new requests on @loop; the operations still running. */
unsigned fg_owner_quiesce(fg_graph *g, farm_loop *loop);
void fg_owner_detach(fg_graph *g, farm_loop *loop);
void fg_h_update(farm_loop *loop, const farm_msg_in *in, void *arg);
void fg_h_get(farm_loop *loop, const farm_msg_in *in, void *arg);

#endif
