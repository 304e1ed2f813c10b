/*
 * fgraph, the client's half: the handle, the per-loop cache of fat
 * pointers (nodes and list heads), the lock-free reads (obj_get,
 * assoc_count, assoc_range, assoc_time_range) and cache warming. The
 * requests shipped to owners are in graph_ship.c, the owner's half in
 * graph_owner.c.
 */
#include "graph_int.h"

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define NODE_TYPE       UINT32_MAX              /* cache entries of nodes */
#define DETACH_DRAIN_NS (15ull * 1000000000ull) /* above FG_RPC_NS */
#define MAX_RESTARTS    64u
#define MAX_KV_TRIES    4u
#define RBUF_SIZE       (GN_MAX_SIZE > GB_MAX_SIZE ? GN_MAX_SIZE : GB_MAX_SIZE)

/* ---- the per-loop cache ------------------------------------------------- */

/* One entry: 32 bytes, so a set of CWAYS entries is two whole cache lines
 * (the table is aligned). */
struct centry {
	uint64_t id; /* 0: empty */
	farm_gaddr addr;
	uint64_t incarnation;
	uint32_t size;
	uint32_t type;
};
_Static_assert(sizeof(struct centry) == 32, "a cache entry is 32 bytes");

#define CWAYS 4u

struct rop;
static void rop_pool_free(struct fg_client *c);

struct fg_client {
	fg_graph *g;
	farm_loop *loop;
	struct centry *cache;
	size_t cache_bytes;
	uint32_t set_mask;
	uint32_t victim;
	struct rop *free_rops; /* finished reads, for the next ones */
	unsigned nfree;
	unsigned live; /* reads issued and not finished */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Four-way set associative: with a graph's entries filling a third of the
 * table, about 1% of them find their set full (two-way: 5%; direct mapped:
 * 15%), and a lost entry costs a KV lookup and a second read. */
static struct centry *c_set(const struct fg_client *c, uint64_t id,
                            uint32_t type)
{
	uint64_t h = fg_mix(id * 0x9e3779b97f4a7c15ull + type);
	return &c->cache[(h & c->set_mask) * CWAYS];
}

static struct centry *c_find(struct fg_client *c, uint64_t id, uint32_t type)
{
	struct centry *s = c_set(c, id, type);
	for (unsigned i = 0; i < CWAYS; i++)
		if (s[i].id == id && s[i].type == type)
			return &s[i];
	return NULL;
}

static bool c_get(struct fg_client *c, uint64_t id, uint32_t type,
                  farm_fatptr *p)
{
	struct centry *e = c_find(c, id, type);
	if (e)
		*p = (farm_fatptr){.addr = e->addr,
		                   .size = e->size,
		                   .incarnation = e->incarnation};
	return e != NULL;
}

static void c_put(struct fg_client *c, uint64_t id, uint32_t type,
                  farm_fatptr p)
{
	if (!p.addr)
		return;
	struct centry *s = c_set(c, id, type), *e = c_find(c, id, type);
	for (unsigned i = 0; !e && i < CWAYS; i++)
		if (!s[i].id)
			e = &s[i];
	if (!e) /* a full set: the ways in turn */
		e = &s[c->victim++ % CWAYS];
	*e = (struct centry){.id = id,
	                     .addr = p.addr,
	                     .incarnation = p.incarnation,
	                     .size = p.size,
	                     .type = type};
}

/* Ask for the set of (@id, @type) early: both of its lines. */
static void c_prefetch(const struct fg_client *c, uint64_t id, uint32_t type)
{
	const char *s = (const char *)c_set(c, id, type);
	__builtin_prefetch(s, 0, 3);
	__builtin_prefetch(s + 64, 0, 3);
}

static void c_drop(struct fg_client *c, uint64_t id, uint32_t type)
{
	struct centry *e = c_find(c, id, type);
	if (e)
		e->id = 0;
}

/* The table: zeroed pages mapped on first use, huge pages where the
 * kernel gives them (a lookup then costs no TLB miss). */
static struct centry *c_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (bytes >= (2u << 20))
		(void)madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}

/* ---- the handle --------------------------------------------------------- */

static fg_graph *the_graph[FARM_NODE_MAX_MACHINES];

int fg_create(farm_node *node, farm_kv *kv, const struct fg_attr *attr,
              unsigned nmachines, fg_graph **out)
{
	if (!node || !kv || !out || !nmachines ||
	    nmachines > FARM_NODE_MAX_MACHINES)
		return -EINVAL;
	*out = NULL;
	if (attr) {
		for (unsigned a = 0; a <= FG_MAX_ATYPE; a++) {
			unsigned b = attr->inverse[a];
			if (b && (a == 0 || attr->inverse[b] != a))
				return -EINVAL;
		}
		if (attr->cache_entries &&
		    (attr->cache_entries < 2 ||
		     (attr->cache_entries & (attr->cache_entries - 1))))
			return -EINVAL;
	}
	uint32_t me = farm_node_id(node);
	if (me >= FARM_NODE_MAX_MACHINES)
		return -EINVAL;
	if (the_graph[me])
		return -EEXIST;
	fg_graph *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->node = node;
	g->kv = kv;
	g->txm = farm_node_txm(node);
	g->msg = farm_node_msg(node);
	g->me = me;
	g->nmachines = nmachines;
	g->nthreads = farm_node_nthreads(node);
	if (attr)
		memcpy(g->inverse, attr->inverse, sizeof(g->inverse));
	g->cache_entries =
	        attr && attr->cache_entries ? attr->cache_entries : 65536u;
	int rc = farm_msg_handle(g->msg, FG_MSG_UPDATE, fg_h_update, g);
	if (!rc)
		rc = farm_msg_handle(g->msg, FG_MSG_GET, fg_h_get, g);
	if (rc) {
		free(g);
		return rc;
	}
	the_graph[me] = g;
	*out = g;
	return 0;
}

void fg_destroy(fg_graph *g)
{
	if (!g)
		return;
	if (the_graph[g->me] == g)
		the_graph[g->me] = NULL;
	free(g);
}

int fg_attach(fg_graph *g, farm_loop *loop)
{
	if (!g || !loop)
		return -EINVAL;
	unsigned i = farm_loop_index(loop);
	if (i >= 64 || g->client[i])
		return -EINVAL;
	struct fg_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->g = g;
	c->loop = loop;
	uint32_t sets = g->cache_entries / CWAYS ? g->cache_entries / CWAYS : 1;
	c->set_mask = sets - 1;
	c->cache_bytes = (size_t)sets * CWAYS * sizeof(*c->cache);
	c->cache = c_alloc(c->cache_bytes);
	int rc = c->cache ? fg_owner_attach(g, loop) : -ENOMEM;
	if (rc) {
		if (c->cache)
			munmap(c->cache, c->cache_bytes);
		free(c);
		return rc;
	}
	g->client[i] = c;
	return 0;
}

void fg_detach(fg_graph *g, farm_loop *loop)
{
	if (!g || !loop)
		return;
	unsigned i = farm_loop_index(loop);
	if (i >= 64 || !g->client[i])
		return;
	/* Operations still running on this loop (reads issued here, owner
	 * transactions and their KV steps) would complete into freed memory
	 * when the loop closes: let them finish first, for a while. */
	struct fg_client *c = g->client[i];
	static const volatile int never;
	uint64_t deadline = now_ns() + DETACH_DRAIN_NS;
	while ((fg_owner_quiesce(g, loop) || c->live) && now_ns() < deadline)
		if (farm_loop_wait(loop, &never, 1000000ull) == -EDEADLK)
			break; /* called from a handler: cannot wait */
	fg_owner_detach(g, loop);
	g->client[i] = NULL;
	if (c->live) {
		fprintf(stderr,
		        "fgraph: m%u detached with %u reads running; their "
		        "memory is left allocated\n",
		        g->me, c->live);
		return;
	}
	rop_pool_free(c);
	munmap(c->cache, c->cache_bytes);
	free(c);
}

uint32_t fg_owner(const fg_graph *g, uint64_t id)
{
	return (uint32_t)(fg_mix(id) % g->nmachines);
}

struct fg_client *fg_client_of(fg_graph *g, farm_loop *loop)
{
	if (!g || !loop)
		return NULL;
	unsigned i = farm_loop_index(loop);
	return i < 64 && g->client[i] && g->client[i]->loop == loop
	               ? g->client[i]
	               : NULL;
}

void fg_stats_get(const fg_graph *g, struct fg_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!g)
		return;
	for (unsigned i = 0; i < FG_NOPS; i++) {
		out->ops[i] = atomic_load(&g->st_ops[i]);
		out->reads[i] = atomic_load(&g->st_reads[i]);
		out->kv_gets[i] = atomic_load(&g->st_kv[i]);
	}
	out->retries = atomic_load(&g->st_retries);
	out->stale_heads = atomic_load(&g->st_stale_heads);
	out->tx_retries = atomic_load(&g->st_tx_retries);
	out->tx_commits = atomic_load(&g->st_commits);
}

const char *fg_op_name(enum fg_op op)
{
	static const char *const names[FG_NOPS] = {
	        "obj_get",          "assoc_count",       "assoc_range",
	        "assoc_time_range", "assoc_get",         "obj_add",
	        "obj_update",       "obj_delete",        "assoc_add",
	        "assoc_delete",     "assoc_change_type", "obj_load"};
	return (unsigned)op < FG_NOPS ? names[op] : "?";
}

const char *fg_strerror(int err)
{
	switch (err) {
	case -ERANGE: return "limit, position or time range out of bounds";
	case -ENOSPC: return "no room (edge types on the node, or memory)";
	case -EMSGSIZE: return "data longer than the limit";
	default: return farm_strerror(err);
	}
}

/* ---- lock-free reads ---------------------------------------------------- */

struct rop {
	fg_graph *g;
	struct fg_client *c;
	farm_loop *loop;
	enum fg_op kind;
	uint64_t id1;
	uint32_t atype, pos, limit;
	int64_t high, low;
	union {
		fg_obj_fn obj;
		fg_count_fn count;
		fg_edges_fn edges;
	} cont;
	void *ctx;
	farm_fatptr p;
	bool from_cache, head_cached, first_block, lf_open;
	unsigned kv_tries, restarts, reads, kvs;
	farm_lf_op lf;
	unsigned nout;
	uint32_t skipped;
	bool have_last;
	int64_t last_time;
	uint64_t last_id2;
	farm_fatptr head; /* the list's head as this pass read it */
	uint64_t head_seq;
	unsigned blocks; /* blocks this pass read */
	/* kept when the record is reused (rop_new clears what is above) */
	struct rop *next_free;
	struct fg_edge *out;
	unsigned capout;
	struct fg_obj obj;
	uint8_t buf[RBUF_SIZE];
};

/* Finished reads wait for reuse (a fresh record for every read, cleared
 * whole, cost more than the read's own bookkeeping); at most this many. */
#define ROP_POOL 256u
#define OUT_KEEP 64u /* edges of result space a pooled record keeps */

static void rop_pool_free(struct fg_client *c)
{
	while (c->free_rops) {
		struct rop *r = c->free_rops;
		c->free_rops = r->next_free;
		free(r->out);
		free(r);
	}
	c->nfree = 0;
}

static void rop_done(struct rop *r, int status, const void *res)
{
	fg_graph *g = r->g;
	struct fg_client *c = r->c;
	c->live--;
	if (r->lf_open)
		farm_lf_end(&r->lf);
	fg_count(&g->st_ops[r->kind], 1);
	fg_count(&g->st_reads[r->kind], r->reads);
	fg_count(&g->st_kv[r->kind], r->kvs);
	switch (r->kind) {
	case FG_OBJ_GET: r->cont.obj(r->loop, r->ctx, status, res); break;
	case FG_ASSOC_COUNT:
		r->cont.count(r->loop, r->ctx, status,
		              res ? *(const uint64_t *)res : 0);
		break;
	default:
		r->cont.edges(r->loop, r->ctx, status, status ? NULL : r->out,
		              status ? 0 : r->nout);
	}
	if (c->nfree >= ROP_POOL) {
		free(r->out);
		free(r);
		return;
	}
	if (r->capout > OUT_KEEP) {
		free(r->out);
		r->out = NULL;
		r->capout = 0;
	}
	r->next_free = c->free_rops;
	c->free_rops = r;
	c->nfree++;
}

static void node_start(struct rop *r);
static void read_node(struct rop *r);
static void read_block(struct rop *r, farm_fatptr p, bool first);

static void kv_cb(farm_loop *loop, void *ctx, int status, const void *val,
                  uint32_t len)
{
	struct rop *r = ctx;
	if (status) {
		rop_done(r, status, NULL);
		return;
	}
	if (len != sizeof(farm_fatptr)) {
		rop_done(r, FARM_ECORRUPT, NULL);
		return;
	}
	memcpy(&r->p, val, sizeof(r->p));
	r->from_cache = false;
	c_put(r->c, r->id1, NODE_TYPE, r->p);
	read_node(r);
}

static void kv_lookup(struct rop *r)
{
	if (r->kv_tries++ >= MAX_KV_TRIES) {
		/* the store kept naming freed nodes: deleted meanwhile */
		rop_done(r, -ENOENT, NULL);
		return;
	}
	uint8_t k[FG_KEY_LEN];
	fg_key(r->id1, k);
	r->kvs++;
	int rc = farm_kv_get(r->g->kv, r->loop, k, FG_KEY_LEN, kv_cb, r);
	if (rc)
		rop_done(r, rc, NULL);
}

/* The node: from the cache, else the KV store. */
static void node_start(struct rop *r)
{
	if (c_get(r->c, r->id1, NODE_TYPE, &r->p)) {
		r->from_cache = true;
		read_node(r);
	} else {
		kv_lookup(r);
	}
}

static void node_cb(farm_loop *loop, void *ctx, int status)
{
	struct rop *r = ctx;
	const struct gn_hdr *n = (const struct gn_hdr *)r->buf;
	if (!status && !gn_sane(n, r->p.size, r->id1))
		status = FARM_EFREED; /* not the node we asked for */
	if (status == FARM_EFREED) {
		c_drop(r->c, r->id1, NODE_TYPE);
		fg_count(&r->g->st_retries, 1);
		kv_lookup(r);
		return;
	}
	if (status) {
		rop_done(r, status, NULL);
		return;
	}
	if (n->flags & GN_DELETED) {
		c_drop(r->c, r->id1, NODE_TYPE);
		rop_done(r, -ENOENT, NULL);
		return;
	}
	if (n->flags & GN_MOVED) {
		r->p = n->fwd;
		c_put(r->c, r->id1, NODE_TYPE, r->p);
		read_node(r);
		return;
	}
	if (r->kind == FG_OBJ_GET) {
		struct fg_obj *o = &r->obj;
		o->id = n->id;
		o->otype = n->otype;
		o->version = n->version;
		o->time = n->time;
		o->len = n->dlen;
		memcpy(o->data, gn_data((void *)n), n->dlen);
		rop_done(r, 0, o);
		return;
	}
	int s = gn_slot(n, r->atype);
	if (r->kind == FG_ASSOC_COUNT) {
		uint64_t count = s < 0 ? 0 : n->lists[s].count;
		rop_done(r, 0, &count);
		return;
	}
	if (s < 0 || !n->lists[s].head.addr) {
		rop_done(r, 0, NULL);
		return;
	}
	c_put(r->c, r->id1, r->atype, n->lists[s].head);
	r->head_cached = false;
	read_block(r, n->lists[s].head, true);
}

static void read_node(struct rop *r)
{
	if (r->p.size > RBUF_SIZE || r->p.size < sizeof(struct gn_hdr)) {
		rop_done(r, FARM_ECORRUPT, NULL);
		return;
	}
	r->reads++;
	int rc = farm_lf_read(r->g->txm, r->loop, r->p.addr, r->p.size,
	                      r->p.incarnation, r->buf, node_cb, r);
	if (rc)
		rop_done(r, rc, NULL);
}

/* Start the range over: from the cached head, else the node. */
static void range_start(struct rop *r)
{
	r->nout = 0;
	r->skipped = 0;
	r->have_last = false;
	r->blocks = 0;
	farm_fatptr h;
	if (c_get(r->c, r->id1, r->atype, &h)) {
		r->head_cached = true;
		read_block(r, h, true);
	} else {
		node_start(r);
	}
}

static void range_restart(struct rop *r);

static void head_check_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct rop *r = ctx;
	const struct gb_hdr *b = (const struct gb_hdr *)r->buf;
	if (!status && (!gb_sane(b, r->head.size, r->id1, r->atype) ||
	                b->seq != r->head_seq))
		status = FARM_EVALIDATION;
	if (status == FARM_EFREED || status == FARM_EVALIDATION) {
		if (status == FARM_EFREED)
			c_drop(r->c, r->id1, r->atype);
		range_restart(r);
		return;
	}
	rop_done(r, status, NULL);
}

/*
 * The range is read. Its blocks were each read at one instant, and every
 * transaction that changes the list bumps the head's seq (graph_logic.c,
 * list_touch): a read of several blocks whose head still has the seq it
 * had when it was read saw one state of the whole list, so no edge that
 * existed throughout is missing (an overwrite that moved an edge to a
 * block already read, or from one not yet read, makes it read again).
 * One read of the head's header more, for ranges of more than one block.
 */
static void range_end(struct rop *r)
{
	bool check = r->blocks >= 2;
#ifdef FG_TEST_BREAK_LIN
	check = false; /* the test-only build: ranges as before, unchecked */
#endif
	if (!check) {
		rop_done(r, 0, NULL);
		return;
	}
	r->reads++;
	int rc = farm_lf_read(r->g->txm, r->loop, r->head.addr,
	                      (uint32_t)sizeof(struct gb_hdr),
	                      r->head.incarnation, r->buf, head_check_cb, r);
	if (rc)
		rop_done(r, rc, NULL);
}

static void range_restart(struct rop *r)
{
	fg_count(&r->g->st_retries, 1);
	if (++r->restarts > MAX_RESTARTS) {
		rop_done(r, -EBUSY, NULL);
		return;
	}
	range_start(r);
}

static int out_push(struct rop *r, const struct gb_edge *e)
{
	if (r->nout == r->capout) {
		unsigned nc = r->capout ? r->capout * 2 : 16;
		if (nc > r->limit)
			nc = r->limit;
		struct fg_edge *no = realloc(r->out, nc * sizeof(*no));
		if (!no)
			return -ENOMEM;
		r->out = no;
		r->capout = nc;
	}
	struct fg_edge *o = &r->out[r->nout++];
	o->id1 = r->id1;
	o->id2 = e->id2;
	o->atype = r->atype;
	o->time = e->time;
	o->len = e->len <= FG_MAX_EDGE_DATA ? e->len : FG_MAX_EDGE_DATA;
	memcpy(o->data, e->data, o->len);
	return 0;
}

static void block_cb(farm_loop *loop, void *ctx, int status)
{
	struct rop *r = ctx;
	const struct gb_hdr *b = (const struct gb_hdr *)r->buf;
	if (!status && (!gb_sane(b, r->p.size, r->id1, r->atype) || !b->n))
		status = FARM_EFREED;
	if (status == FARM_EFREED) {
		if (r->first_block && r->head_cached) {
			/* the cached head is no longer the head */
			c_drop(r->c, r->id1, r->atype);
			fg_count(&r->g->st_retries, 1);
			fg_count(&r->g->st_stale_heads, 1);
			r->head_cached = false;
			node_start(r);
		} else {
			c_drop(r->c, r->id1, r->atype);
			range_restart(r);
		}
		return;
	}
	if (status) {
		rop_done(r, status, NULL);
		return;
	}
	if (r->first_block) {
		r->head = r->p;
		r->head_seq = b->seq;
	}
	r->blocks++;
	const struct gb_edge *e = gb_edges((void *)b);
	for (unsigned i = 0; i < b->n; i++) {
		/* newest first, no repeats: a list that changed under a read
		 * of several blocks is read again */
		if (r->have_last && !edge_before(r->last_time, r->last_id2,
		                                 e[i].time, e[i].id2)) {
			range_restart(r);
			return;
		}
		r->have_last = true;
		r->last_time = e[i].time;
		r->last_id2 = e[i].id2;
		if (r->kind == FG_ASSOC_RANGE) {
			if (r->skipped < r->pos) {
				r->skipped++;
				continue;
			}
		} else {
			if (e[i].time > r->high)
				continue;
			if (e[i].time < r->low) {
				range_end(r);
				return;
			}
		}
		if (out_push(r, &e[i])) {
			rop_done(r, -ENOMEM, NULL);
			return;
		}
		if (r->nout == r->limit) {
			range_end(r);
			return;
		}
	}
	if (!b->next.addr) {
		range_end(r);
		return;
	}
	read_block(r, b->next, false);
}

static void read_block(struct rop *r, farm_fatptr p, bool first)
{
	if (p.size > RBUF_SIZE || p.size < sizeof(struct gb_hdr)) {
		rop_done(r, FARM_ECORRUPT, NULL);
		return;
	}
	r->p = p;
	r->first_block = first;
	r->reads++;
	int rc = farm_lf_read(r->g->txm, r->loop, p.addr, p.size, p.incarnation,
	                      r->buf, block_cb, r);
	if (rc)
		rop_done(r, rc, NULL);
}

static void rop_go(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct rop *r = ctx;
	if (status)
		rop_done(r, status, NULL);
	else if (r->kind == FG_ASSOC_RANGE || r->kind == FG_ASSOC_TIME_RANGE)
		range_start(r);
	else
		node_start(r);
}

/*
 * Start a read from the next loop pass, its cache set prefetched now.
 * The cache is a table of 32 bytes per entry, 256 MB per loop at 1M
 * nodes, so a lookup is a miss to memory: done at once, it stalled the
 * core (c_find was 10% of the machines' CPU in the LinkBench mix); done
 * a pass later, the other operations that pass completes and starts
 * overlap with the line's arrival. Ranges fetch the node's set too (read
 * when the list's head is not cached: an empty list, a replaced head).
 */
static void rop_launch(struct rop *r)
{
	bool range =
	        r->kind == FG_ASSOC_RANGE || r->kind == FG_ASSOC_TIME_RANGE;
	c_prefetch(r->c, r->id1, range ? r->atype : NODE_TYPE);
	if (range)
		c_prefetch(r->c, r->id1, NODE_TYPE);
	if (farm_loop_defer(r->loop, rop_go, r))
		rop_go(r->loop, r, 0); /* no memory for the item: now */
}

static int rop_new(fg_graph *g, farm_loop *loop, enum fg_op kind, uint64_t id1,
                   void *ctx, struct rop **out)
{
	struct fg_client *c = fg_client_of(g, loop);
	if (!c || !id1)
		return -EINVAL;
	struct rop *r = c->free_rops;
	if (r) {
		c->free_rops = r->next_free;
		c->nfree--;
	} else if ((r = malloc(sizeof(*r)))) {
		r->out = NULL;
		r->capout = 0;
	} else {
		return -ENOMEM;
	}
	memset(r, 0, offsetof(struct rop, next_free));
	c->live++;
	r->g = g;
	r->c = c;
	r->loop = loop;
	r->kind = kind;
	r->id1 = id1;
	r->ctx = ctx;
	int rc = farm_lf_begin(g->txm, loop, &r->lf);
	if (rc) {
		c->live--;
		r->next_free = c->free_rops;
		c->free_rops = r;
		c->nfree++;
		return rc;
	}
	r->lf_open = true;
	*out = r;
	return 0;
}

int fg_obj_get(fg_graph *g, farm_loop *loop, uint64_t id, fg_obj_fn cont,
               void *ctx)
{
	struct rop *r;
	if (!cont)
		return -EINVAL;
	int rc = rop_new(g, loop, FG_OBJ_GET, id, ctx, &r);
	if (rc)
		return rc;
	r->cont.obj = cont;
	rop_launch(r);
	return 0;
}

int fg_assoc_count(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                   fg_count_fn cont, void *ctx)
{
	struct rop *r;
	if (!cont || !fg_atype_ok(atype))
		return -EINVAL;
	int rc = rop_new(g, loop, FG_ASSOC_COUNT, id1, ctx, &r);
	if (rc)
		return rc;
	r->atype = atype;
	r->cont.count = cont;
	rop_launch(r);
	return 0;
}

int fg_assoc_range(fg_graph *g, farm_loop *loop, uint64_t id1, uint32_t atype,
                   uint32_t pos, uint32_t limit, fg_edges_fn cont, void *ctx)
{
	struct rop *r;
	if (!cont || !fg_atype_ok(atype))
		return -EINVAL;
	if (!limit || limit > FG_MAX_LIMIT || pos > FG_MAX_POS)
		return -ERANGE;
	int rc = rop_new(g, loop, FG_ASSOC_RANGE, id1, ctx, &r);
	if (rc)
		return rc;
	r->atype = atype;
	r->pos = pos;
	r->limit = limit;
	r->cont.edges = cont;
	rop_launch(r);
	return 0;
}

int fg_assoc_time_range(fg_graph *g, farm_loop *loop, uint64_t id1,
                        uint32_t atype, int64_t high, int64_t low,
                        uint32_t limit, fg_edges_fn cont, void *ctx)
{
	struct rop *r;
	if (!cont || !fg_atype_ok(atype))
		return -EINVAL;
	if (!limit || limit > FG_MAX_LIMIT || high < low)
		return -ERANGE;
	int rc = rop_new(g, loop, FG_ASSOC_TIME_RANGE, id1, ctx, &r);
	if (rc)
		return rc;
	r->atype = atype;
	r->high = high;
	r->low = low;
	r->limit = limit;
	r->cont.edges = cont;
	rop_launch(r);
	return 0;
}

/* ---- warming the cache --------------------------------------------------- */

#define WARM_INFLIGHT 64u

struct warm_slot {
	struct warm *w;
	uint64_t id;
	farm_fatptr p;
	uint8_t buf[GN_MAX_SIZE];
};

struct warm {
	struct fg_client *c;
	unsigned inflight;
	volatile int idle;
	long cached;
};

static void warm_cb(farm_loop *loop, void *ctx, int status)
{
	struct warm_slot *s = ctx;
	struct warm *w = s->w;
	const struct gn_hdr *n = (const struct gn_hdr *)s->buf;
	if (!status && gn_sane(n, s->p.size, s->id) &&
	    !(n->flags & (GN_DELETED | GN_MOVED))) {
		for (unsigned i = 0; i < FG_MAX_TYPES; i++)
			if (n->lists[i].atype && n->lists[i].head.addr)
				c_put(w->c, s->id, n->lists[i].atype,
				      n->lists[i].head);
		w->cached++;
	}
	s->id = 0;
	if (--w->inflight == 0)
		w->idle = 1;
}

/* A warm-up's buffers: one batch of keys looked up together, and the
 * node reads in flight. */
struct warm_bufs {
	uint8_t *keys;
	const void **kp;
	uint32_t *kl, *lens;
	int *st;
	farm_fatptr *vals;
	struct warm_slot *slots;
};

static void warm_bufs_free(struct warm_bufs *b)
{
	free(b->keys);
	free(b->kp);
	free(b->kl);
	free(b->lens);
	free(b->st);
	free(b->vals);
	free(b->slots);
}

static int warm_bufs_alloc(struct warm_bufs *b)
{
	b->keys = malloc(FG_WARM_BATCH * FG_KEY_LEN);
	b->kp = malloc(FG_WARM_BATCH * sizeof(*b->kp));
	b->kl = malloc(FG_WARM_BATCH * sizeof(*b->kl));
	b->lens = malloc(FG_WARM_BATCH * sizeof(*b->lens));
	b->st = malloc(FG_WARM_BATCH * sizeof(*b->st));
	b->vals = malloc(FG_WARM_BATCH * sizeof(*b->vals));
	b->slots = calloc(WARM_INFLIGHT, sizeof(*b->slots));
	if (!b->keys || !b->kp || !b->kl || !b->lens || !b->st || !b->vals ||
	    !b->slots)
		return -ENOMEM; /* the caller frees what was made */
	return 0;
}

/* A slot for one more node read, waiting on the loop while all are
 * busy. */
static struct warm_slot *warm_slot(struct warm *w, struct warm_bufs *b,
                                   farm_loop *loop)
{
	static const volatile int never;
	for (;;) {
		for (unsigned j = 0; j < WARM_INFLIGHT; j++)
			if (!b->slots[j].id)
				return &b->slots[j];
		w->idle = 0;
		(void)farm_loop_wait(loop, &never, 20000ull);
	}
}

/* The @k nodes from @base: their pointers by one multi-get, then each
 * node read (lock-free) to cache its lists' heads. */
static int warm_batch(fg_graph *g, farm_loop *loop, struct warm *w,
                      struct warm_bufs *b, uint64_t base, unsigned k)
{
	for (unsigned i = 0; i < k; i++) {
		fg_key(base + i, b->keys + i * FG_KEY_LEN);
		b->kp[i] = b->keys + i * FG_KEY_LEN;
		b->kl[i] = FG_KEY_LEN;
	}
	int rc = farm_kv_mget_sync(g->kv, loop, k, b->kp, b->kl, b->vals,
	                           sizeof(farm_fatptr), b->lens, b->st);
	for (unsigned i = 0; i < k && !rc; i++) {
		const farm_fatptr v = b->vals[i];
		if (b->st[i] || b->lens[i] != sizeof(farm_fatptr) ||
		    v.size > GN_MAX_SIZE)
			continue;
		c_put(w->c, base + i, NODE_TYPE, v);
		struct warm_slot *s = warm_slot(w, b, loop);
		*s = (struct warm_slot){.w = w, .id = base + i, .p = v};
		if (farm_lf_read(g->txm, loop, v.addr, v.size, v.incarnation,
		                 s->buf, warm_cb, s) == 0)
			w->inflight++;
		else
			s->id = 0;
	}
	return rc;
}

long fg_warm_sync(fg_graph *g, farm_loop *loop, uint64_t first, uint64_t n)
{
	struct fg_client *c = fg_client_of(g, loop);
	if (!c || !first || first + n < first)
		return -EINVAL;
	struct warm_bufs b = {0};
	struct warm w = {.c = c};
	long rc = warm_bufs_alloc(&b);
	for (uint64_t base = first; !rc && base < first + n;
	     base += FG_WARM_BATCH) {
		uint64_t left = first + n - base;
		rc = warm_batch(g, loop, &w, &b, base,
		                left < FG_WARM_BATCH ? (unsigned)left
		                                     : FG_WARM_BATCH);
	}
	while (w.inflight) {
		w.idle = 0;
		(void)farm_loop_wait(loop, &w.idle, 0);
	}
	warm_bufs_free(&b);
	return rc ? rc : w.cached;
}
