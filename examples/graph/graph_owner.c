/*
 * fgraph, the owner's half: updates and assoc_get shipped to the loop that
 * owns id1, run as transactions there.
 *
 * Every update of id1 waits in a per-id queue on its owner loop, so updates
 * of one node run one after another (obj_add of one id cannot race itself;
 * obj_delete and a node's growth finish their KV step before the next op).
 * Edges of other nodes (inverse edges) are changed in the same transaction
 * through their fat pointers, and conflicts there abort and retry.
 *
 * A transaction's logic (graph_logic.c) runs twice: PLAN, on private
 * scratch copies, which reads every object it needs (remote ones with an
 * asynchronous read, then PLAN runs again) and counts the allocations; then
 * the allocations; then APPLY, the same code on the transaction's copies,
 * which writes. Both see the same objects, so they take the same path.
 */
#include "graph_logic.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MAX_ATTEMPTS 400u

/* ---- the owner's id map: id -> node fat pointer and the id's queue ---- */

struct oent {
	uint64_t id; /* 0: empty */
	farm_fatptr node;
	struct uop *qhead, *qtail;
};

struct fg_owner {
	fg_graph *g;
	farm_loop *loop;
	struct oent *tab;
	size_t cap, n;
	uint64_t gen;          /* +1 whenever entries move (grow, delete) */
	unsigned live;         /* operations made and not yet freed */
	bool closing;          /* detaching: new requests are refused */
	struct uop *free_uops; /* finished operations, for the next ones */
	unsigned nfree;
};

/* The map's table: from 2 MiB on, zeroed pages mapped on first use with
 * huge pages where the kernel gives them (at 1M nodes the table is 25 MB
 * per machine, and a lookup missed the TLB: om_find was 4% of a machine's
 * CPU in the LinkBench mix); calloc below. */
#define OM_MAP_BYTES (2u << 20)

static struct oent *om_alloc(size_t cap)
{
	size_t bytes = cap * sizeof(struct oent);
	if (bytes < OM_MAP_BYTES)
		return calloc(cap, sizeof(struct oent));
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}

static void om_release(struct oent *tab, size_t cap)
{
	size_t bytes = cap * sizeof(struct oent);
	if (bytes < OM_MAP_BYTES)
		free(tab);
	else if (tab)
		munmap(tab, bytes);
}

static size_t om_slot(const struct fg_owner *o, uint64_t id)
{
	return (size_t)fg_mix(id ^ 0x5bd1e995u) & (o->cap - 1);
}

static struct oent *om_find(struct fg_owner *o, uint64_t id)
{
	for (size_t i = om_slot(o, id);; i = (i + 1) & (o->cap - 1)) {
		if (o->tab[i].id == id)
			return &o->tab[i];
		if (!o->tab[i].id)
			return NULL;
	}
}

static int om_grow(struct fg_owner *o)
{
	size_t ncap = o->cap * 2;
	struct oent *old = o->tab, *nt = om_alloc(ncap);
	if (!nt)
		return -ENOMEM;
	size_t ocap = o->cap;
	o->tab = nt;
	o->cap = ncap;
	o->gen++;
	for (size_t i = 0; i < ocap; i++) {
		if (!old[i].id)
			continue;
		size_t j = om_slot(o, old[i].id);
		while (nt[j].id)
			j = (j + 1) & (ncap - 1);
		nt[j] = old[i];
	}
	om_release(old, ocap);
	return 0;
}

static struct oent *om_get(struct fg_owner *o, uint64_t id)
{
	struct oent *e = om_find(o, id);
	if (e)
		return e;
	if ((o->n + 1) * 4 > o->cap * 3 && om_grow(o))
		return NULL;
	size_t i = om_slot(o, id);
	while (o->tab[i].id)
		i = (i + 1) & (o->cap - 1);
	o->tab[i] = (struct oent){.id = id};
	o->n++;
	return &o->tab[i];
}

/* Remove @e (backward-shift deletion keeps probe chains whole). */
static void om_del(struct fg_owner *o, struct oent *e)
{
	size_t i = (size_t)(e - o->tab), mask = o->cap - 1;
	o->tab[i] = (struct oent){0};
	o->n--;
	o->gen++;
	for (size_t j = (i + 1) & mask; o->tab[j].id; j = (j + 1) & mask) {
		size_t h = om_slot(o, o->tab[j].id);
		/* may o->tab[j] move to i? when h is not in (i, j] */
		bool between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
		if (!between) {
			o->tab[i] = o->tab[j];
			o->tab[j] = (struct oent){0};
			i = j;
		}
	}
}

/* @op's id1 entry (NULL: none), looked up again only when entries moved
 * since the last time: an update used to look it up four times. */
static struct oent *op_ent(struct uop *op)
{
	struct fg_owner *o = op->ow;
	if (op->oe && op->oe_gen == o->gen)
		return op->oe;
	op->oe = om_find(o, op->rq.id1);
	op->oe_gen = o->gen;
	return op->oe;
}

static void uop_pool_free(struct fg_owner *o)
{
	while (o->free_uops) {
		struct uop *op = o->free_uops;
		o->free_uops = op->next_free;
		free(op->data);
		free(op->objs);
		free(op->out);
		free(op);
	}
	o->nfree = 0;
}

int fg_owner_attach(fg_graph *g, farm_loop *loop)
{
	struct fg_owner *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->g = g;
	o->loop = loop;
	o->cap = 1024;
	o->tab = om_alloc(o->cap);
	if (!o->tab) {
		free(o);
		return -ENOMEM;
	}
	g->owner[farm_loop_index(loop)] = o;
	return 0;
}

unsigned fg_owner_quiesce(fg_graph *g, farm_loop *loop)
{
	struct fg_owner *o = g->owner[farm_loop_index(loop)];
	if (!o)
		return 0;
	o->closing = true;
	return o->live;
}

/* After fg_owner_quiesce and a drain: operations still running (their
 * transactions or KV steps outstanding) would complete into freed memory
 * when the loop closes, so then the owner's state is left allocated. */
void fg_owner_detach(fg_graph *g, farm_loop *loop)
{
	unsigned i = farm_loop_index(loop);
	struct fg_owner *o = g->owner[i];
	if (!o)
		return;
	g->owner[i] = NULL;
	if (o->live) {
		fprintf(stderr,
		        "fgraph: m%u detached with %u owner operations "
		        "running; their memory is left allocated\n",
		        g->me, o->live);
		return;
	}
	uop_pool_free(o);
	om_release(o->tab, o->cap);
	free(o);
}

/* ---- operations ---------------------------------------------------------- */

/* Finished operations wait for reuse, with their buffers: a fresh record
 * for every update (calloc of 3.8 KB, most of it the allocation table)
 * cost more than the rest of its bookkeeping. At most this many. */
#define UOP_POOL  256u
#define DATA_KEEP FG_MAX_DATA /* request bytes a pooled record keeps */

static void uop_free(struct uop *op)
{
	struct fg_owner *o = op->ow;
	o->live--;
	acc_reset(op);
	if (op->tx)
		farm_tx_free(op->tx);
	if (o->nfree >= UOP_POOL) {
		free(op->objs);
		free(op->out);
		free(op->data);
		free(op);
		return;
	}
	if (op->datacap > DATA_KEEP) { /* obj_load's */
		free(op->data);
		op->data = NULL;
		op->datacap = 0;
	}
	op->next_free = o->free_uops;
	o->free_uops = op;
	o->nfree++;
}

/* Replies are best effort: a caller that gave up is answered harmlessly,
 * and one that cannot be answered times out. */
static void say(farm_loop *loop, const struct farm_msg_token *tok,
                const void *buf, uint32_t len)
{
	int rc = farm_msg_reply(loop, tok, buf, len);
	(void)rc;
}

static void say_error(farm_loop *loop, const struct farm_msg_token *tok,
                      int status)
{
	int rc = farm_msg_reply_error(loop, tok, status);
	(void)rc;
}

static void reply(struct uop *op, int status)
{
	if (op->is_get && status >= 0) {
		size_t len =
		        sizeof(uint32_t) + op->nout * sizeof(struct fg_edge);
		uint8_t *buf = malloc(len);
		if (buf) {
			uint32_t n = op->nout;
			memcpy(buf, &n, 4);
			if (n)
				memcpy(buf + 4, op->out, n * sizeof(*op->out));
			say(op->loop, &op->tok, buf, (uint32_t)len);
			free(buf);
			return;
		}
		status = -ENOMEM;
	}
	if (status < 0) {
		say_error(op->loop, &op->tok, status);
		return;
	}
	struct up_reply r = {.status = status};
	say(op->loop, &op->tok, &r, sizeof(r));
}

static void start(struct uop *op);

/* The op is over: answer, and start the next op of its id. */
static void finish(struct uop *op, int status)
{
	reply(op, status);
	struct fg_owner *o = op->ow;
	if (!op->queued) {
		uop_free(op);
		return;
	}
	struct oent *e = op_ent(op);
	struct uop *next = op->qnext;
	uop_free(op);
	if (!e)
		return;
	e->qhead = next;
	if (!next) {
		e->qtail = NULL;
		if (!e->node.addr)
			om_del(o, e);
		return;
	}
	start(next);
}

static void attempt(struct uop *op);

static void retry_cb(farm_loop *loop, void *ctx, int status)
{
	struct uop *op = ctx;
	if (status)
		finish(op, status);
	else
		attempt(op);
}

/* Run the current step again (a conflict, a stale pointer). */
static void retry(struct uop *op, int why)
{
	if (op->tx) {
		farm_tx_free(op->tx);
		op->tx = NULL;
	}
	acc_reset(op);
	if (++op->attempts >= MAX_ATTEMPTS) {
		finish(op, why == FARM_EFREED || farm_tx_retryable(why) ? -EBUSY
		                                                        : why);
		return;
	}
	fg_count(&op->g->st_tx_retries, 1);
	op->have_id2 = false; /* look the other node up again */
	if (farm_loop_defer(op->loop, retry_cb, op))
		finish(op, -ENOMEM);
}

static void after_commit(struct uop *op);

static void commit_cb(farm_loop *loop, void *ctx, int outcome)
{
	struct uop *op = ctx;
	farm_tx_free(op->tx);
	op->tx = NULL;
	acc_reset(op);
	if (outcome == 0) {
		fg_count(&op->g->st_commits, 1);
		after_commit(op);
	} else if (farm_tx_retryable(outcome) || outcome == FARM_EFREED ||
	           outcome == -EBUSY) {
		retry(op, outcome);
	} else {
		finish(op, outcome);
	}
}

static void alloc_next(struct uop *op);

static void alloc_cb(farm_tx *tx, void *ctx, int status, farm_fatptr p,
                     void *data)
{
	struct uop *op = ctx;
	if (status) {
		retry_or_fail(op, status);
		return;
	}
	op->al[op->nal_done].p = p;
	op->al[op->nal_done].data = data;
	op->nal_done++;
	alloc_next(op);
}

/* The logic said no: a stale pointer or a busy object (run again), or an
 * answer (no such node, no room ...), with nothing to commit. */
static void logic_failed(struct uop *op, int rc)
{
	if (rc == L_STALE || rc == -EAGAIN || rc == -EBUSY ||
	    rc == FARM_EFREED) {
		retry(op, rc == L_STALE ? FARM_EFREED : rc);
		return;
	}
	farm_tx_free(op->tx);
	op->tx = NULL;
	acc_reset(op);
	finish(op, rc);
}

static void run_apply(struct uop *op)
{
	op->mode = M_APPLY;
	op->ual = 0;
	int rc = fg_logic(op);
	if (rc == L_NEED) /* PLAN read everything; cannot happen */
		rc = -EAGAIN;
	if (rc < 0) {
		logic_failed(op, rc);
		return;
	}
	op->result = rc;
	rc = farm_tx_commit(op->tx, commit_cb, op);
	if (rc)
		retry_or_fail(op, rc);
}

static void alloc_next(struct uop *op)
{
	if (op->nal_done == op->nal) {
		acc_reset(op);
		run_apply(op);
		return;
	}
	struct alloc_req *a = &op->al[op->nal_done];
	farm_gaddr hint = a->hint;
	if (hint && farm_gaddr_region(hint) == 0) {
		/* next to an object allocated earlier in this transaction */
		unsigned k = (unsigned)(hint / 64) - 1;
		hint = k < op->nal_done ? op->al[k].p.addr : FARM_GADDR_NULL;
	}
	int rc = farm_tx_alloc(op->tx, a->size, hint, alloc_cb, op);
	if (rc)
		retry_or_fail(op, rc);
}

static void plan(struct uop *op);

static void read_cb(farm_tx *tx, void *ctx, int status, const void *data,
                    uint32_t size)
{
	struct uop *op = ctx;
	if (status) {
		retry_or_fail(op, status);
		return;
	}
	plan(op);
}

static void plan(struct uop *op)
{
	acc_reset(op);
	op->mode = M_PLAN;
	op->nal = op->nal_done = 0;
	int rc = fg_logic(op);
	if (rc == L_NEED) {
		rc = farm_tx_read_fat(op->tx, op->need, read_cb, op);
		if (rc)
			retry_or_fail(op, rc);
		return;
	}
	if (rc < 0) {
		logic_failed(op, rc);
		return;
	}
	if (op->is_get) {
		/* read-only: committing validates what was read */
		op->result = rc;
		rc = farm_tx_commit(op->tx, commit_cb, op);
		if (rc)
			retry_or_fail(op, rc);
		return;
	}
	alloc_next(op);
}

void retry_or_fail(struct uop *op, int rc)
{
	if (farm_tx_retryable(rc) || rc == FARM_EFREED || rc == -EBUSY ||
	    rc == -EAGAIN || rc == L_STALE)
		retry(op, rc == L_STALE ? FARM_EFREED : rc);
	else {
		if (op->tx) {
			farm_tx_free(op->tx);
			op->tx = NULL;
		}
		acc_reset(op);
		finish(op, rc);
	}
}

static void kv_id2_cb(farm_loop *loop, void *ctx, int status, const void *val,
                      uint32_t len)
{
	struct uop *op = ctx;
	fg_count(&op->g->st_kv[FG_ASSOC_ADD], 1);
	if (status == -ENOENT) {
		op->have_id2 = true;
		op->id2ptr = (farm_fatptr){0};
		attempt(op);
		return;
	}
	if (status || len != sizeof(farm_fatptr)) {
		retry_or_fail(op, status ? status : FARM_ECORRUPT);
		return;
	}
	memcpy(&op->id2ptr, val, sizeof(op->id2ptr));
	op->have_id2 = true;
	attempt(op);
}

/* The fat pointer of node @id as this owner knows it (its own ids). */
static bool own_ptr(struct uop *op, uint64_t id, farm_fatptr *p)
{
	fg_graph *g = op->g;
	if (fg_owner(g, id) != g->me ||
	    fg_owner_loop(g, id) != farm_loop_index(op->loop))
		return false;
	struct oent *e = om_find(op->ow, id);
	*p = e ? e->node : (farm_fatptr){0};
	return true;
}

/*
 * An assoc_get of an id whose updates are running waits behind them in the
 * id's queue. It reads the node through the owner's map, which names a new
 * node from its commit on, while the other reads find it through the KV
 * store once the update's KV step is done: run beside obj_add (or the KV
 * step of a growth), it would see a node that a read after it may not, and
 * the node's reads would not be linearizable. Queued, it runs after them,
 * as the lock-free reads see them. Gets of an id with no update running
 * run at once, side by side.
 */
static void get_wait(struct uop *op, struct oent *e)
{
	op->queued = true;
	op->oe = e;
	op->oe_gen = op->ow->gen;
	e->qtail->qnext = op;
	e->qtail = op;
}

/* One try of the current step: look the other node up when needed, then
 * a transaction. */
static void attempt(struct uop *op)
{
	fg_graph *g = op->g;
	if (!op->is_get) {
		struct oent *e = op_ent(op);
		op->id1ptr = e ? e->node : (farm_fatptr){0};
		if (!op->id1ptr.addr && op->step == S_MAIN &&
		    op->rq.op != UP_OBJ_ADD && op->rq.op != UP_OBJ_LOAD) {
			/* No node: what the logic would answer, without a
			 * transaction (the map names every node this loop
			 * owns). In LinkBench's mix at 1M nodes a fifth of
			 * the updates name a node deleted before. */
			finish(op, -ENOENT);
			return;
		}
	} else {
		struct oent *e =
		        op->queued ? NULL : om_find(op->ow, op->rq.id1);
#ifdef FG_TEST_BREAK_LIN
		e = NULL; /* the test-only build: gets beside updates */
#endif
		if (e && e->qtail) {
			get_wait(op, e);
			return;
		}
		(void)own_ptr(op, op->grq.id1, &op->id1ptr);
	}
	if (op->wants_id2 && !op->have_id2) {
		if (own_ptr(op, op->rq.id2, &op->id2ptr)) {
			op->have_id2 = true;
		} else {
			uint8_t k[FG_KEY_LEN];
			fg_key(op->rq.id2, k);
			int rc = farm_kv_get(g->kv, op->loop, k, FG_KEY_LEN,
			                     kv_id2_cb, op);
			if (rc)
				retry_or_fail(op, rc);
			return;
		}
	}
	int rc = farm_tx_begin(g->txm, op->loop, &op->tx);
	if (rc) {
		retry_or_fail(op, rc);
		return;
	}
	plan(op);
}

static void start(struct uop *op)
{
	if (op->ow->closing) {
		finish(op, -ECANCELED);
		return;
	}
	op->attempts = 0;
	attempt(op);
}

/* ---- the steps after a commit (KV store, freeing the old node) ---------- */

static void kv_step_cb(farm_loop *loop, void *ctx, int status)
{
	struct uop *op = ctx;
	if (status && status != -ENOENT) {
		/* The node is committed but not published: retry the KV. */
		if (++op->attempts < MAX_ATTEMPTS &&
		    (status == -EAGAIN || status == -ETIMEDOUT ||
		     farm_tx_retryable(status))) {
			after_commit(op);
			return;
		}
		finish(op, status);
		return;
	}
	if (op->step == S_KV_PUT &&
	    (op->rq.op == UP_OBJ_ADD || op->rq.op == UP_OBJ_LOAD)) {
		finish(op, 0);
		return;
	}
	/* obj_delete, obj_update that grew: free the old node */
	op->step = S_FREE_OLD;
	op->attempts = 0;
	attempt(op);
}

static void after_commit(struct uop *op)
{
	fg_graph *g = op->g;
	if (op->is_get) {
		finish(op, op->result);
		return;
	}
	struct oent *e = op_ent(op);
	uint8_t k[FG_KEY_LEN];
	fg_key(op->rq.id1, k);
	int rc = 0;
	switch (op->step) {
	case S_MAIN:
		if (op->rq.op == UP_OBJ_ADD || op->rq.op == UP_OBJ_LOAD ||
		    (op->rq.op == UP_OBJ_UPDATE && op->newnode.addr)) {
			e->node = op->newnode;
			op->step = S_KV_PUT;
			rc = farm_kv_put(g->kv, op->loop, k, FG_KEY_LEN,
			                 &op->newnode, sizeof(op->newnode),
			                 kv_step_cb, op);
		} else if (op->rq.op == UP_OBJ_DELETE) {
			op->step = S_KV_DEL;
			rc = farm_kv_del(g->kv, op->loop, k, FG_KEY_LEN,
			                 kv_step_cb, op);
		} else {
			finish(op, op->result);
			return;
		}
		break;
	case S_KV_PUT:
		rc = farm_kv_put(g->kv, op->loop, k, FG_KEY_LEN, &op->newnode,
		                 sizeof(op->newnode), kv_step_cb, op);
		break;
	case S_KV_DEL:
		rc = farm_kv_del(g->kv, op->loop, k, FG_KEY_LEN, kv_step_cb,
		                 op);
		break;
	case S_FREE_OLD:
		if (op->rq.op == UP_OBJ_DELETE)
			e->node = (farm_fatptr){0};
		finish(op, 0);
		return;
	}
	if (rc)
		finish(op, rc);
}

/* ---- handlers ----------------------------------------------------------- */

static struct uop *uop_new(fg_graph *g, farm_loop *loop, const farm_msg_in *in)
{
	struct fg_owner *o = g->owner[farm_loop_index(loop)];
	struct uop *op = o->free_uops;
	if (op) {
		o->free_uops = op->next_free;
		o->nfree--;
	} else if ((op = malloc(sizeof(*op)))) {
		op->data = NULL;
		op->datacap = 0;
		op->objs = NULL;
		op->capobj = 0;
		op->out = NULL;
	} else {
		return NULL;
	}
	memset(op, 0, offsetof(struct uop, next_free));
	op->g = g;
	op->loop = loop;
	op->ow = o;
	o->live++;
	op->tok = in->token;
	return op;
}

static bool routed_here(fg_graph *g, farm_loop *loop, uint64_t id)
{
	return id && g->owner[farm_loop_index(loop)] &&
	       fg_owner(g, id) == g->me &&
	       fg_owner_loop(g, id) == farm_loop_index(loop);
}

static bool closing(fg_graph *g, farm_loop *loop)
{
	struct fg_owner *o = g->owner[farm_loop_index(loop)];
	return o && o->closing;
}

void fg_h_update(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	fg_graph *g = arg;
	struct up_req rq;
	if (in->len < sizeof(rq)) {
		say_error(loop, &in->token, FARM_ECORRUPT);
		return;
	}
	memcpy(&rq, in->payload, sizeof(rq));
	if (rq.op < UP_OBJ_ADD || rq.op > UP_OBJ_LOAD ||
	    rq.len > (rq.op == UP_OBJ_LOAD ? FG_UP_MAX : FG_MAX_DATA) ||
	    in->len != sizeof(rq) + rq.len) {
		say_error(loop, &in->token, FARM_ECORRUPT);
		return;
	}
	if (!routed_here(g, loop, rq.id1)) {
		say_error(loop, &in->token, -EINVAL);
		return;
	}
	if (closing(g, loop)) {
		say_error(loop, &in->token, -ECANCELED);
		return;
	}
	struct uop *op = uop_new(g, loop, in);
	struct oent *e = op ? om_get(op->ow, rq.id1) : NULL;
	if (!e) {
		if (op)
			uop_free(op);
		say_error(loop, &in->token, -ENOMEM);
		return;
	}
	op->rq = rq;
	op->queued = true;
	op->oe = e;
	op->oe_gen = op->ow->gen;
	if (rq.len > op->datacap || !op->data) { /* never NULL: memcpy */
		uint32_t cap = rq.len > DATA_KEEP ? rq.len : DATA_KEEP;
		uint8_t *d = realloc(op->data, cap);
		if (!d) {
			uop_free(op);
			say_error(loop, &in->token, -ENOMEM);
			return;
		}
		op->data = d;
		op->datacap = cap;
	}
	memcpy(op->data, (const uint8_t *)in->payload + sizeof(rq), rq.len);
	uint8_t inv = rq.atype <= FG_MAX_ATYPE ? g->inverse[rq.atype] : 0;
	uint8_t inv2 = rq.op == UP_ASSOC_CHANGE_TYPE && rq.arg <= FG_MAX_ATYPE
	                       ? g->inverse[rq.arg]
	                       : 0;
	op->wants_id2 =
	        rq.op >= UP_ASSOC_ADD && rq.id1 != rq.id2 && (inv || inv2);
	if (e->qtail) {
		e->qtail->qnext = op;
		e->qtail = op;
		return;
	}
	e->qhead = e->qtail = op;
	start(op);
}

void fg_h_get(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	fg_graph *g = arg;
	struct get_req rq;
	if (in->len < sizeof(rq)) {
		say_error(loop, &in->token, FARM_ECORRUPT);
		return;
	}
	memcpy(&rq, in->payload, sizeof(rq));
	if (rq.n == 0 || rq.n > FG_GET_MAX ||
	    in->len != sizeof(rq) + rq.n * sizeof(uint64_t)) {
		say_error(loop, &in->token, FARM_ECORRUPT);
		return;
	}
	if (!routed_here(g, loop, rq.id1)) {
		say_error(loop, &in->token, -EINVAL);
		return;
	}
	if (closing(g, loop)) {
		say_error(loop, &in->token, -ECANCELED);
		return;
	}
	struct uop *op = uop_new(g, loop, in);
	if (!op) {
		say_error(loop, &in->token, -ENOMEM);
		return;
	}
	op->is_get = true;
	op->grq = rq;
	op->rq.id1 = rq.id1; /* its queue's id, should it wait in one */
	memcpy(op->id2s, (const uint8_t *)in->payload + sizeof(rq),
	       rq.n * sizeof(uint64_t));
	start(op);
}
