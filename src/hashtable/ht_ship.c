/*
 * Hashtable writes on the wire (ht.h, ht_int.h): put and delete are
 * shipped to the loop that serves the key's shard on its owner, which
 * queues them per shard and applies whatever waits in one transaction
 * (flat combining; ht_write.c applies each operation), retrying a batch
 * whose outcome is retryable, then answers each.
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/fault.h"
#include "util/log.h"

struct op_req {
	uint8_t op; /* 1 put, 2 del */
	uint8_t pad;
	uint16_t shard;
	uint32_t klen, vlen;
	uint32_t pad2;
	/* key, then value */
};

/* Requests up to this size are built on the caller's stack. */
#define SHIP_STACK 512u

/* Continuations kept per loop index, at most. */
#define PUT_KEEP 256u

struct put_ctx {
	farm_op_fn cont;
	void *ctx;
	farm_ht *h;
	struct put_ctx *next_free;
};

/* A write's continuation from @h's list for loop index @li (a malloc
 * and a free an update were part of YCSB-A's count); NULL out of
 * memory. The caller sets cont and ctx. */
static struct put_ctx *put_get(farm_ht *h, unsigned li)
{
	struct put_ctx *c = li < MAX_LOOPS ? h->free_puts[li] : NULL;
	if (c) {
		h->free_puts[li] = c->next_free;
		h->nfree_puts[li]--;
	} else if (!(c = malloc(sizeof(*c)))) {
		return NULL;
	}
	c->h = h;
	c->next_free = NULL;
	return c;
}

/* @li: the index of the loop it was taken on, which its answer runs on
 * (farm_as_call's continuation runs on the calling loop). */
static void put_put(struct put_ctx *c, unsigned li)
{
	farm_ht *h = c->h;
	if (li >= MAX_LOOPS || h->nfree_puts[li] >= PUT_KEEP) {
		free(c);
		return;
	}
	c->next_free = h->free_puts[li];
	h->free_puts[li] = c;
	h->nfree_puts[li]++;
}

void farm_ht_puts_free(farm_ht *h)
{
	for (unsigned i = 0; i < MAX_LOOPS; i++) {
		while (h->free_puts[i]) {
			struct put_ctx *c = h->free_puts[i];
			h->free_puts[i] = c->next_free;
			free(c);
		}
		h->nfree_puts[i] = 0;
	}
}

static void put_reply(farm_loop *loop, void *ctx, int status, const void *reply,
                      uint32_t len)
{
	(void)reply;
	(void)len;
	struct put_ctx *c = ctx;
	farm_op_fn cont = c->cont;
	void *cctx = c->ctx;
	/* Back first: the continuation may ship the next write. */
	put_put(c, farm_loop_index(loop));
	cont(loop, cctx, status);
}

static int ship(farm_ht *h, farm_loop *loop, uint8_t op, const void *key,
                uint32_t klen, const void *val, uint32_t vlen, farm_op_fn cont,
                void *ctx)
{
	if (!h || !loop || !cont)
		return -EINVAL;
	int rc = farm_ht_check_key(key, klen);
	if (rc)
		return rc;
	if (op == 1 && (!val || vlen == 0))
		return -EINVAL;
	if (vlen > FARM_HT_MAX_VALUE ||
	    sizeof(struct op_req) + klen + vlen > farm_msg_max_payload(h->msg))
		return -E2BIG;
	unsigned si;
	uint64_t hash = farm_ht_hash(key, klen);
	const struct farm_ht_shard *sd = farm_ht_shard_of(h, hash, &si);
	if (!sd)
		return -ENOENT;
	size_t len = sizeof(struct op_req) + klen + vlen;
	/* The call copies the request: a small one is built on the stack
	 * (a malloc and a free an update, in YCSB-A's count). */
	uint8_t small[SHIP_STACK];
	uint8_t *req = len <= sizeof(small) ? small : malloc(len);
	unsigned li = farm_loop_index(loop);
	struct put_ctx *c = put_get(h, li);
	if (!req || !c) {
		if (req != small)
			free(req);
		if (c)
			put_put(c, li);
		return -ENOMEM;
	}
	struct op_req q = {
	        .op = op, .shard = (uint16_t)si, .klen = klen, .vlen = vlen};
	memcpy(req, &q, sizeof(q));
	memcpy(req + sizeof(q), key, klen);
	if (vlen)
		memcpy(req + sizeof(q) + klen, val, vlen);
	c->cont = cont;
	c->ctx = ctx;
	/* The owner's commit may wait for log room: allow it time. */
	rc = farm_as_call(h->as, loop, sd->base, FARM_MSGT_HT_OP, req,
	                  (uint32_t)len, 10ull * 1000000000ull, put_reply, c);
	if (req != small)
		free(req);
	if (rc)
		put_put(c, li);
	else
		ht_count(h, li, op == 1 ? T_PUTS : T_DELS, 1);
	return rc;
}

int farm_ht_put(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                const void *val, uint32_t vlen, farm_op_fn cont, void *ctx)
{
	return ship(h, loop, 1, key, klen, val, vlen, cont, ctx);
}

int farm_ht_del(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                farm_op_fn cont, void *ctx)
{
	return ship(h, loop, 2, key, klen, NULL, 0, cont, ctx);
}

/* A batch whose outcome is retryable runs again at most this often and
 * this long before its writers get the outcome. */
#define BATCH_TRIES    64u
#define BATCH_RETRY_NS 200000000ull

static void batch_start(struct htloop *l, unsigned shard);
static void batch_apply(struct htloop *l, unsigned shard);

struct bctx {
	struct htloop *l;
	unsigned shard;
	int kind;      /* NEED_IND or NEED_BLK */
	uint32_t size; /* of the object being allocated */
	bool hinted;   /* next to the shard */
};

static void reply_op(struct htloop *l, struct pending *p, int status)
{
	int rc = status ? farm_msg_reply_error(l->loop, &p->tok, status)
	                : farm_msg_reply(l->loop, &p->tok, NULL, 0);
	if (rc)
		farm_warn("ht: cannot answer machine %" PRIu32 ": %s",
		          p->tok.machine, farm_strerror(rc));
}

/* Shipped writes kept on a loop's free list, at most, and the room a
 * fresh one gets (YCSB's keys and values fit): a write that needs more
 * takes a larger one, which goes back to the list like any other. */
#define PEND_KEEP 256u
#define PEND_ROOM 256u

/* A shipped write's record for @need bytes of key and value, from @l's
 * free list when its head has the room; NULL out of memory. The caller
 * sets every field (farm_ht_h_op). */
static struct pending *pend_get(struct htloop *l, uint32_t need)
{
	struct pending *p = l->free_pend;
	if (p && p->cap >= need) {
		l->free_pend = p->next;
		l->nfree_pend--;
		return p;
	}
	uint32_t cap = need > PEND_ROOM ? need : PEND_ROOM;
	p = malloc(sizeof(*p) + cap);
	if (p)
		p->cap = cap;
	return p;
}

static void pend_put(struct htloop *l, struct pending *p)
{
	if (l->nfree_pend >= PEND_KEEP) {
		free(p);
		return;
	}
	p->next = l->free_pend;
	l->free_pend = p;
	l->nfree_pend++;
}

void farm_ht_pend_free(struct htloop *l)
{
	while (l->free_pend) {
		struct pending *p = l->free_pend;
		l->free_pend = p->next;
		free(p);
	}
	l->nfree_pend = 0;
}

/* Answer every write of list @p with @status, recycling them. */
static void reply_all(struct htloop *l, struct pending *p, int status)
{
	while (p) {
		struct pending *n = p->next;
		reply_op(l, p, status);
		pend_put(l, p);
		p = n;
	}
}

/*
 * Whether @rc, a write's failure in the batch being applied, means this
 * machine stopped serving @shard since the write was accepted: growth
 * made another machine the primary of the shard's bucket region (our
 * copy demoted; views are installed by another thread, at any time),
 * and the buckets' local reads fail with -EREMOTE. farm_ht_h_op checks
 * the shard on arrival, but a batch runs later: queued behind the one
 * committing, run again after a retryable outcome (the commit that
 * found the region gone says -EAGAIN), or caught as it applies. Then
 * no write waiting for the shard can be applied here, and -EREMOTE
 * would reach the writer as a hard error: the batch's transaction is
 * dropped (nothing of it committed) and every write waiting for the
 * shard, batched or queued, is refused with -EAGAIN, as one sent here
 * after the move is on arrival; the writer's retry goes to the owner
 * its next view names. True when so.
 */
static bool moved_away(struct htloop *l, unsigned shard, int rc)
{
	if (rc != -EREMOTE || farm_ht_serves(l->h, shard) ||
	    FARM_FAULT_SWITCH(FARM_FP_HT_APPLY_MOVED))
		return false;
	struct shardq *q = &l->q[shard];
	farm_tx_free(q->tx);
	q->tx = NULL;
	struct pending *batch = q->batch, *queued = q->head;
	q->batch = q->head = q->tail = NULL;
	q->retries = 0;
	q->retry_until = 0;
	q->busy = false;
	reply_all(l, batch, -EAGAIN);
	reply_all(l, queued, -EAGAIN);
	return true;
}

/*
 * Whether a batch coming back to @l ends there: @l was detached, which
 * starts no transaction, so the batch is not run again nor followed by
 * another (farm_ht_detach answered the writes queued behind it). Under
 * FARM_FP_HT_DETACH_WRITES_RUN_ON, as before: batches run on.
 */
static bool batch_ends(const struct htloop *l)
{
	return l->detached &&
	       !FARM_FAULT_SWITCH(FARM_FP_HT_DETACH_WRITES_RUN_ON);
}

void farm_ht_writes_detach(struct htloop *l)
{
	if (FARM_FAULT_SWITCH(FARM_FP_HT_DETACH_WRITES_RUN_ON))
		return;
	for (unsigned s = 0; s < FARM_HT_MAX_SHARDS; s++) {
		struct shardq *q = &l->q[s];
		struct pending *p = q->head;
		q->head = q->tail = NULL;
		/* No transaction took them: nothing of them is written. */
		reply_all(l, p, -ECANCELED);
	}
}

bool farm_ht_writes_out(const struct htloop *l)
{
	for (unsigned s = 0; s < FARM_HT_MAX_SHARDS; s++)
		if (l->q[s].busy)
			return true;
	return false;
}

/* A batch that came back to a detached loop before its commit started
 * (an allocation's answer): its transaction is dropped, so none of its
 * writes is written, and each is answered -ECANCELED; the last thing out
 * frees the state. */
static void batch_cancel(struct htloop *l, unsigned shard)
{
	struct shardq *q = &l->q[shard];
	farm_tx_free(q->tx);
	q->tx = NULL;
	struct pending *batch = q->batch;
	q->batch = NULL;
	q->retries = 0;
	q->retry_until = 0;
	q->busy = false;
	reply_all(l, batch, -ECANCELED);
	farm_ht_loop_release(l);
}

static void batch_done(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct bctx *c = ctx;
	struct htloop *l = c->l;
	unsigned shard = c->shard;
	struct shardq *q = &l->q[shard];
	free(c);
	farm_tx_free(q->tx);
	q->tx = NULL;
	if (outcome && farm_tx_retryable(outcome) && batch_ends(l)) {
		/* Not committed (a retryable outcome says so), and not run
		 * again on a detached loop. */
		outcome = -ECANCELED;
	} else if (outcome && farm_tx_retryable(outcome)) {
		/* Run the same operations again in a new transaction, a
		 * bounded number of times and for a bounded time: a commit
		 * can take a lock timeout, and the writers wait for their
		 * answer (their own retries and deadlines take over). */
		uint64_t now = farm_now_ns();
		if (!q->retry_until)
			q->retry_until = now + BATCH_RETRY_NS;
		if (++q->retries < BATCH_TRIES && now < q->retry_until) {
			batch_start(l, shard);
			return;
		}
	}
	q->retries = 0;
	q->retry_until = 0;
	struct pending *p = q->batch;
	q->batch = NULL;
	while (p) {
		struct pending *n = p->next;
		reply_op(l, p, outcome ? outcome : p->status);
		pend_put(l, p);
		p = n;
	}
	q->busy = false;
	if (q->head && !batch_ends(l))
		batch_start(l, shard);
	else if (l->detached)
		farm_ht_loop_release(l); /* may free l */
}

static void batch_alloc_done(farm_tx *tx, void *ctx, int status, farm_fatptr p,
                             void *data)
{
	(void)tx;
	struct bctx *c = ctx;
	struct htloop *l = c->l;
	unsigned shard = c->shard;
	struct shardq *q = &l->q[shard];
	int kind = c->kind;
	if (batch_ends(l)) {
		free(c);
		batch_cancel(l, shard);
		return;
	}
	if (status == -EREMOTE && c->hinted) {
		/* The shard's region was promoted here by recovery and its
		 * allocator state is still being rebuilt (SOSP'15 5.4,
		 * farm_galloc_adopt): it takes no new objects yet. Any region
		 * of this machine will do: the pair's fat pointer says where
		 * its object is, and it is local to the shard's owner, who
		 * reads it. */
		c->hinted = false;
		status = farm_tx_alloc(q->tx, c->size, FARM_GADDR_NULL,
		                       batch_alloc_done, c);
		if (!status)
			return;
	}
	free(c);
	if (moved_away(l, shard, status))
		return;
	if (status) {
		/* No memory: the operation being applied fails alone. */
		for (struct pending *o = q->batch; o; o = o->next)
			if (o->status == -EINPROGRESS) {
				o->status = status;
				break;
			}
	} else if (kind == NEED_IND) {
		q->ind_ready = true;
		q->ind_fp = p;
		q->ind_data = data;
	} else {
		q->blk_ready = true;
		q->blk_fp = p;
		q->blk_data = data;
	}
	batch_apply(l, shard);
}

/* Apply the batch's operations that are not yet applied, then commit. */
static void batch_apply(struct htloop *l, unsigned shard)
{
	farm_ht *h = l->h;
	struct shardq *q = &l->q[shard];
	struct wctx w = {
	        .h = h, .l = l, .q = q, .sd = &h->shards[shard], .tx = q->tx};
	for (struct pending *p = q->batch; p; p = p->next) {
		if (p->status != -EINPROGRESS)
			continue;
		int rc = p->op == 1
		                 ? farm_ht_apply_put(&w, p->buf, p->klen,
		                                     p->hash, p->buf + p->klen,
		                                     p->vlen)
		                 : farm_ht_apply_del(&w, p->buf, p->klen,
		                                     p->hash);
		if (rc == NEED_IND || rc == NEED_BLK) {
			struct bctx *c = malloc(sizeof(*c));
			uint32_t size = rc == NEED_IND ? 8 + p->klen + p->vlen
			                               : h->block_data;
			int arc = c ? 0 : -ENOMEM;
			if (c) {
				*c = (struct bctx){.l = l,
				                   .shard = shard,
				                   .kind = rc,
				                   .size = size,
				                   .hinted = true};
				arc = farm_tx_alloc(q->tx, size, w.sd->base,
				                    batch_alloc_done, c);
				if (arc)
					free(c);
			}
			if (!arc)
				return; /* continued in batch_alloc_done */
			rc = arc;
		}
		if (moved_away(l, shard, rc))
			return;
		p->status = rc;
	}
	struct bctx *c = malloc(sizeof(*c));
	int rc = c ? 0 : -ENOMEM;
	if (c) {
		*c = (struct bctx){.l = l, .shard = shard};
		rc = farm_tx_commit(q->tx, batch_done, c);
		if (rc)
			free(c);
	}
	if (rc) {
		c = malloc(sizeof(*c));
		if (c) {
			*c = (struct bctx){.l = l, .shard = shard};
			batch_done(l->loop, c, rc);
		}
	}
}

static void batch_start(struct htloop *l, unsigned shard)
{
	farm_ht *h = l->h;
	struct shardq *q = &l->q[shard];
	FARM_FAULT_POINT(FARM_FP_HT_BATCH_START);
	q->busy = true;
	if (!q->batch) {
		/* Take everything waiting (up to MAX_BATCH): one transaction.
		 */
		struct pending **tail = &q->batch;
		unsigned n = 0;
		while (q->head && n < MAX_BATCH) {
			struct pending *p = q->head;
			q->head = p->next;
			p->next = NULL;
			*tail = p;
			tail = &p->next;
			n++;
		}
		if (!q->head)
			q->tail = NULL;
		if (n > 1)
			hl_count(l, T_COMBINED, 1);
	}
	for (struct pending *p = q->batch; p; p = p->next)
		p->status = -EINPROGRESS;
	q->ind_ready = q->blk_ready = false;
	int rc = farm_tx_begin(h->txm, l->loop, &q->tx);
	if (rc) {
		struct bctx *c = malloc(sizeof(*c));
		if (c) {
			*c = (struct bctx){.l = l, .shard = shard};
			q->tx = NULL;
			batch_done(l->loop, c, rc);
		}
		return;
	}
	batch_apply(l, shard);
}

/* Check a shipped write on loop state @l (NULL: the loop does not use
 * the table): 0, or its answer (-EINVAL: a malformed request). */
static int op_check(farm_ht *h, const struct htloop *l, const farm_msg_in *in,
                    struct op_req *q)
{
	if (in->len < sizeof(*q) || !in->token.call_id)
		return -EINVAL;
	memcpy(q, in->payload, sizeof(*q));
	if ((q->op != 1 && q->op != 2) || q->klen == 0 ||
	    q->klen > FARM_HT_MAX_KEY || q->vlen > FARM_HT_MAX_VALUE ||
	    in->len != sizeof(*q) + q->klen + q->vlen ||
	    (q->op == 1 && q->vlen == 0))
		return -EINVAL;
	if (h->nshards == 0)
		/* We have not installed the shard list yet: the sender
		 * joined first. Retryable. */
		return -EAGAIN;
	if (q->shard >= h->nshards)
		return -EINVAL;
	if (!farm_ht_serves(h, q->shard) ||
	    FARM_FAULT_SWITCH(FARM_FP_HT_REFUSE_OP))
		/* The sender's view and ours differ: the shard's region is
		 * moving here (a backup copy), or moved away (growth made
		 * another machine its primary and may have dropped our
		 * copy). Retryable either way. */
		return -EAGAIN;
	if (!l)
		/* A valid write for a shard we serve, on a loop that does
		 * not use the table: farm_ht_detach ran here (or no
		 * attach), so nothing of it is written, as for the writes
		 * queued at the detach. Not retryable: the sender picks this
		 * loop by the shard's region (farm_as_thread_of), not by
		 * what is attached here, so a retry would come back to it
		 * until the region moves; and not -EINVAL, which says the
		 * request was malformed. */
		return -ECANCELED;
	return 0;
}

/*
 * A write's bucket pair on its way to the cache when the write arrives
 * (G-Opt's prefetch stage, for writes): the write is applied when its
 * batch starts, which for all but the first of a batch is after the
 * transaction before it commits (its COMMIT-BACKUP's round trip), so its
 * pair's misses overlap that wait and the other arrivals instead of
 * stalling the apply's first read of the pair (the apply's bucket copy
 * was the owner's largest cost in YCSB-A's profile: docs/benchmarks.md).
 * The home's chain is not prefetched: most keys are in the pair. A hint
 * only: an address the loop's cache does not resolve to this machine's
 * memory is skipped, and the apply reads through the transaction as
 * before.
 */
static void op_prefetch(struct htloop *l, unsigned shard, uint64_t hash)
{
	farm_ht *h = l->h;
	const struct farm_ht_shard *sd = &h->shards[shard];
	uint32_t bb = 64u * h->bucket_lines;
	farm_gaddr a = sd->base + (uint64_t)home_of(hash, sd->nbuckets) * bb;
	uint8_t *p;
	farm_mr_desc d;
	if (farm_as_resolve_cached(h->as, &l->rc, a, 2ull * bb, &p, &d) || !p)
		return;
	ht_prefetch_lines(p, 2u * h->bucket_lines);
}

void farm_ht_h_op(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_ht *h = arg;
	struct htloop *l = hl_of(h, loop);
	struct op_req q;
	int status = op_check(h, l, in, &q);
	if (status == -EAGAIN || status == -ECANCELED) {
		/* -EAGAIN, not ours yet: the sender applied a
		 * configuration that makes us the shard's owner, and we have
		 * not, or recovery is promoting our copy, or we have not
		 * joined. Retryable. -ECANCELED: detached (above). Neither
		 * is a bad request. */
		if (farm_msg_reply_error(loop, &in->token, status))
			farm_warn("ht: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	if (status) {
		farm_warn("ht: bad request from machine %" PRIu32,
		          in->src_machine);
		if (in->token.call_id &&
		    farm_msg_reply_error(loop, &in->token, status))
			farm_warn("ht: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	struct pending *p = pend_get(l, q.klen + q.vlen);
	if (!p) {
		if (farm_msg_reply_error(loop, &in->token, -ENOMEM))
			farm_warn("ht: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	uint32_t cap = p->cap;
	*p = (struct pending){.tok = in->token,
	                      .op = q.op,
	                      .klen = q.klen,
	                      .vlen = q.vlen,
	                      .cap = cap};
	memcpy(p->buf, (const uint8_t *)in->payload + sizeof(q),
	       q.klen + q.vlen);
	p->hash = farm_ht_hash(p->buf, q.klen);
	op_prefetch(l, q.shard, p->hash);
	struct shardq *sq = &l->q[q.shard];
	if (sq->tail)
		sq->tail->next = p;
	else
		sq->head = p;
	sq->tail = p;
	if (!sq->busy)
		batch_start(l, q.shard);
}

uint32_t farm_ht_max_value(const farm_ht *h, uint32_t klen)
{
	if (!h || klen == 0 || klen > FARM_HT_MAX_KEY)
		return 0;
	uint32_t p = farm_msg_max_payload(h->msg);
	uint32_t hdr = (uint32_t)sizeof(struct op_req) + klen;
	if (p <= hdr)
		return 0;
	return FARM_MIN(p - hdr, FARM_HT_MAX_VALUE);
}
