/*
 * Hashtable lookups (ht.h, ht_int.h), from any machine and lock-free:
 * farm_ht_get reads buckets b and b + 1 in one one-sided READ (a
 * line-atomic copy when the shard is local), validates them object by
 * object and by their joint version, then follows the home's overflow
 * chain and an indirect pair's object; farm_ht_get_many starts a window
 * of them together (farm_ht_get_first, that first read alone: ht_first.c).
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txm.h"
#include "util/lines.h"

struct get_op {
	farm_ht *h;
	struct htloop *l;
	uint8_t key[FARM_HT_MAX_KEY];
	uint32_t klen;
	uint64_t hash;
	const struct farm_ht_shard *sd;
	uint32_t b;
	uint8_t *img; /* 2 buckets, from the pool */
	unsigned tries;
	uint64_t busy_t0; /* ns of the first retry (0: none yet) */
	uint64_t fwd;     /* the pair version seen */
	farm_ht_get_fn cont;
	void *ctx;
	/* chain walk / indirect value */
	uint8_t *obuf;
	uint32_t olen;
	farm_fatptr next;
	int stage;     /* 0 buckets, 1 chain block, 2 indirect value */
	farm_lf_op ep; /* an epoch operation from start to continuation */
	struct get_op *next_free;
	const uint8_t *lp;    /* local shard: the buckets, copied when due */
	uint64_t cfg;         /* the configuration the buckets were found in */
	struct get_op *gnext; /* farm_ht_get_many: the group's next local */
};

void farm_ht_gets_free(struct htloop *l)
{
	while (l->free_gets) {
		struct get_op *g = l->free_gets;
		l->free_gets = g->next_free;
		free(g);
	}
	farm_ht_firsts_free(l);
}

static void get_start(struct get_op *g);
static void get_again(farm_loop *loop, void *ctx, int status);

static void get_end(struct get_op *g, int status, const void *val, uint32_t len)
{
	farm_ht *h = g->h;
	status = farm_ht_lease_checked(h, status);
	hl_count(g->l, status == 0 ? T_FOUND : T_NOTFOUND, 1);
	farm_loop *loop = g->l->loop;
	farm_ht_get_fn cont = g->cont;
	void *ctx = g->ctx;
	cont(loop, ctx, status, val, len);
	farm_lf_end_inline(&g->ep);
	if (g->img)
		buf_put(g->l, g->img);
	g->img = NULL;
	if (g->obuf) { /* an indirect value's */
		free(g->obuf);
		g->obuf = NULL;
	}
	/* Recycled with its bucket buffers: a lookup allocates nothing in
	 * the steady state. */
	struct htloop *l = g->l;
	g->next_free = l->free_gets;
	l->free_gets = g;
	lookup_out_end(l);
}

static void get_retry(struct get_op *g)
{
	hl_count(g->l, T_RETRIES, 1);
	uint64_t now = farm_now_ns();
	if (!g->busy_t0)
		g->busy_t0 = now;
	if (++g->tries >= READ_TRIES && now - g->busy_t0 >= READ_BUSY_NS) {
		get_end(g, -EBUSY, NULL, 0);
		return;
	}
	g->stage = 0;
	/* As a transaction's read does (txn/read.c): a short randomized
	 * spin for the first few tries, then retry from a later loop pass
	 * and give the core away once per pass. The bucket pair stays locked
	 * until its commit's primary applies COMMIT-PRIMARY, which may wait
	 * in a log this loop serves, or on another machine's loop that, on a
	 * host with more loops than cores, waits for this very core. */
	if (g->tries <= 4) {
		uint64_t spins =
		        farm_rand64(&g->l->rand) & ((1ull << g->tries) - 1);
		for (uint64_t i = 0; i < spins; i++)
			farm_cpu_relax();
	} else {
		(void)sched_yield();
		if (farm_loop_defer(g->l->loop, get_again, g) == 0)
			return;
	}
	get_start(g);
}

static void get_again(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct get_op *g = ctx;
	if (lookup_cancelled(g->l))
		status = -ECANCELED;
	if (status)
		get_end(g, status, NULL, 0);
	else
		get_start(g);
}

static void get_read_obj(struct get_op *g, farm_fatptr p, int stage);

/* Found in a chain block's slot @s: inline value, or the object it
 * names. */
static void get_found(struct get_op *g, const uint8_t *s)
{
	if (!(s[0] & SLOT_INDIRECT)) {
		get_end(g, 0, s + 8 + g->h->K, slot_vlen(s));
		return;
	}
	get_read_obj(g, get_fat(s + 8 + g->h->K), 2);
}

/* Found in slot @slot of the pair in g->img (header @hdr): the inline
 * value, where it lies in the image or gathered to its start (the image
 * is ours until get_end), or the object it names. */
static void get_found_pair(struct get_op *g, unsigned slot, const uint8_t *hdr)
{
	uint32_t off = 8 + g->h->K;
	if (!(hdr[0] & SLOT_INDIRECT)) {
		uint32_t vl = slot_vlen(hdr);
		get_end(g, 0, farm_ht_pair_val(g->h, g->img, slot, vl), vl);
		return;
	}
	farm_fatptr p;
	farm_ht_pair_slot_read(g->h, g->img, slot, off, sizeof(p), &p);
	get_read_obj(g, p, 2);
}

/* Look for the key in a chain block's data (@blk); follow its chain. */
static void get_scan_block(struct get_op *g, uint8_t *blk)
{
	farm_ht *h = g->h;
	/* A block written after the buckets we read: our view is mixed. */
	if (get64(blk) > g->fwd) {
		get_retry(g);
		return;
	}
	for (unsigned i = 0; i < BLK_SLOTS; i++) {
		uint8_t *s = blk_slot(h, blk, i);
		if (slot_match(h, s, g->key, g->klen, g->hash)) {
			get_found(g, s);
			return;
		}
	}
	farm_fatptr next = get_fat(blk + 8);
	if (next.addr)
		get_read_obj(g, next, 1);
	else
		get_end(g, -ENOENT, NULL, 0);
}

static void obj_read_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct get_op *g = ctx;
	if (lookup_cancelled(g->l)) {
		get_end(g, -ECANCELED, NULL, 0);
		return;
	}
	if (status == FARM_EFREED || status == -EBUSY) {
		get_retry(g); /* unlinked or rewritten meanwhile: start over */
		return;
	}
	if (status) {
		get_end(g, read_err(status), NULL, 0);
		return;
	}
	if (g->stage == 1) {
		get_scan_block(g, g->obuf);
		return;
	}
	uint32_t kl, vl;
	if (!farm_ht_indirect_match(g->obuf, g->olen, g->key, g->klen, &kl,
	                            &vl)) {
		/* A long key whose hash matched another's, or a stale slot. */
		get_end(g, kl == g->klen ? -EBUSY : -ENOENT, NULL, 0);
		return;
	}
	get_end(g, 0, g->obuf + 8 + kl, vl);
}

static void get_read_obj(struct get_op *g, farm_fatptr p, int stage)
{
	if (!p.addr || p.size == 0 || p.size > FARM_TX_MAX_SIZE) {
		get_end(g, FARM_ECORRUPT, NULL, 0);
		return;
	}
	free(g->obuf);
	g->obuf = malloc(p.size);
	g->olen = p.size;
	g->stage = stage;
	if (!g->obuf) {
		get_end(g, -ENOMEM, NULL, 0);
		return;
	}
	hl_count(g->l, T_READS, 1);
	if (stage == 1)
		hl_count(g->l, T_CHAIN, 1);
	int rc = farm_lf_read(g->h->txm, g->l->loop, p.addr, p.size,
	                      p.incarnation, g->obuf, obj_read_done, g);
	if (rc)
		get_end(g, read_err(rc), NULL, 0);
}

/* Both buckets read: validate, then search. */
static void get_buckets(struct get_op *g)
{
	farm_ht *h = g->h;
	int rc = farm_ht_pair_check(h, g->img, &g->fwd);
	if (rc == -EAGAIN) {
		get_retry(g);
		return;
	}
	if (rc) {
		get_end(g, rc, NULL, 0);
		return;
	}
	/* Read again when the configuration changed since the buckets
	 * were found: growth can move the shard's region while its old
	 * copy lives on (src/txn/read.c, rd_moved). The acquire fence
	 * orders the buckets' loads before the id's; it pairs with the
	 * release store of the id in farm_as_set_view_placed (as_view.c). */
	atomic_thread_fence(memory_order_acquire);
	if (ht_config_id(h) != g->cfg) {
		get_retry(g);
		return;
	}
	uint8_t hdr[8];
	int slot = farm_ht_pair_find(h, g->img, g->key, g->klen, g->hash, hdr);
	if (slot >= 0) {
		get_found_pair(g, (unsigned)slot, hdr);
		return;
	}
	farm_fatptr ovf = farm_ht_pair_overflow(g->img);
	if (ovf.addr)
		get_read_obj(g, ovf, 1);
	else
		get_end(g, -ENOENT, NULL, 0);
}

static void bucket_read_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct get_op *g = ctx;
	if (lookup_cancelled(g->l))
		status = -ECANCELED;
	if (status == FARM_EFLUSHED) {
		get_retry(g);
		return;
	}
	if (status) {
		get_end(g, read_err(status), NULL, 0);
		return;
	}
	get_buckets(g);
}

/* A local lookup's key searched in its pair where it lies, and a key
 * found answered from its slot alone (farm_ht_pair_get_in: the slot's
 * reads checked against its bucket's header), as farm_ht_get_local_batch
 * answers a found key (ht_batch.c, batch_home): a slot as of one instant
 * of its bucket is a committed state of the key whatever the other bucket
 * held. Answers and returns true only for an inline value found so in
 * the configuration the lookup started in; false: the whole pair's copy
 * decides (absent keys, chains, objects, a slot that changed). */
static bool get_local_slot(struct get_op *g, unsigned lo, unsigned hi)
{
	farm_ht *h = g->h;
	uint32_t vl;
	if (farm_ht_pair_get_in(h, g->lp, lo, hi, g->key, g->klen, g->hash,
	                        g->img, &vl))
		return false;
	/* As get_buckets: the reads' loads before the configuration id's
	 * (pairs with the release store of the id in
	 * farm_as_set_view_placed, as_view.c). */
	atomic_thread_fence(memory_order_acquire);
	if (ht_config_id(h) != g->cfg)
		return false;
	get_end(g, 0, g->img, vl);
	return true;
}

/* A local lookup's pair searched in place from slot @lo on (the slots
 * before it searched already), a key found answered from its slot alone;
 * else the whole pair copied, checked and searched. */
static void get_local_from(struct get_op *g, unsigned lo)
{
	if (get_local_slot(g, lo, 2 * g->h->spb))
		return;
	uint32_t bb = 64u * g->h->bucket_lines;
	if (!farm_lines_copy(g->img, g->lp, 2ull * bb, LINE_TRIES)) {
		get_retry(g);
		return;
	}
	get_buckets(g);
}

/* A local lookup's buckets were prefetched when it started; copy them
 * now, a pass later, as the shm fabric does for a READ (NSDI'14 keeps
 * many lookups in flight so their misses overlap): the found slot alone
 * when it can answer, else the whole pair. */
static void get_local_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct get_op *g = ctx;
	if (lookup_cancelled(g->l))
		status = -ECANCELED;
	if (status) {
		get_end(g, status, NULL, 0);
		return;
	}
	get_local_from(g, 0);
}

/* farm_ht_get_many's group as get_start_in fills it: its local lookups
 * (a list, completed together a pass later: get_group_done) and its
 * remote pairs' READs, posted together per machine (group_reads_post). */
struct get_group {
	struct get_op **tail; /* the local list's end */
	unsigned nr;
	struct get_op *rg[FARM_HT_BATCH_MAX];
	uint32_t rm[FARM_HT_BATCH_MAX];
	farm_wr rw[FARM_HT_BATCH_MAX];
	struct ht_shards sh; /* each shard resolved once */
};

/* The bucket pair's read: here, prefetched now and copied on a later
 * pass (one deferred item of its own, or, with @group, appended to the
 * group's local lookups, completed by one item); elsewhere, one READ
 * (with @group, added to the group's READs). */
static inline __attribute__((always_inline)) void
get_start_in(struct get_op *g, struct get_group *group)
{
	farm_ht *h = g->h;
	uint32_t bb = 64u * h->bucket_lines;
	farm_gaddr a = g->sd->base + (uint64_t)g->b * bb;
	hl_count(g->l, T_READS, 1);
	uint8_t *p;
	farm_mr_desc d;
	g->cfg = ht_config_id(h);
	int rc = group ? ht_shards_resolve(h, g->l, &group->sh, g->sd,
	                                   a - g->sd->base, &p, &d)
	               : farm_as_resolve_cached(h->as, &g->l->rc, a, 2ull * bb,
	                                        &p, &d);
	if (!rc && p) {
		/* A group's: the home bucket alone (get_group_done). */
		ht_prefetch_lines(p, h->bucket_lines);
		if (!group)
			ht_prefetch_lines(p + bb, h->bucket_lines);
		g->lp = p;
		if (group) {
			g->gnext = NULL;
			*group->tail = g;
			group->tail = &g->gnext;
			return;
		}
		/* Copy and complete on a later pass, as a remote read
		 * would. */
		if (farm_loop_defer(g->l->loop, get_local_done, g))
			get_end(g, -ENOMEM, NULL, 0);
		return;
	}
	if (!rc) { /* the shard's descriptor is cached: one READ */
		farm_wr wr = farm_wr_read(0, g->img, g->l->mr, 2 * bb, &d,
		                          farm_gaddr_offset(a));
		if (group) {
			unsigned i = group->nr++;
			group->rg[i] = g;
			group->rm[i] = d.machine;
			group->rw[i] = wr;
			return;
		}
		rc = farm_loop_rdma(g->l->loop, d.machine, &wr,
		                    bucket_read_done, g);
	} else if (rc == -EAGAIN) {
		rc = farm_as_read(h->as, g->l->loop, a, g->img, g->l->mr,
		                  2 * bb, bucket_read_done, g);
	}
	if (rc)
		get_end(g, read_err(rc), NULL, 0);
}

static void get_start(struct get_op *g)
{
	get_start_in(g, NULL);
}

/* A lookup's state, from the loop's free list, with its bucket buffer
 * and its epoch operation begun (the loop attached to the transactions:
 * the caller's check); its hash, shard and home still to set. -EAGAIN:
 * this loop's buffers are all in flight. */
static inline __attribute__((always_inline)) int
get_new(farm_ht *h, struct htloop *l, const void *key, uint32_t klen,
        farm_ht_get_fn cont, void *ctx, struct get_op **out)
{
	struct get_op *g = l->free_gets;
	if (g) {
		l->free_gets = g->next_free;
	} else if (!(g = calloc(1, sizeof(*g)))) {
		return -ENOMEM;
	}
	g->img = buf_get(l);
	if (!g->img) { /* too many in flight */
		g->next_free = l->free_gets;
		l->free_gets = g;
		return -EAGAIN;
	}
	g->tries = 0;
	g->busy_t0 = 0;
	g->fwd = 0;
	g->obuf = NULL;
	g->olen = 0;
	g->next = (farm_fatptr){0};
	g->stage = 0;
	g->ep = (farm_lf_op){0};
	g->h = h;
	g->l = l;
	if (klen <= 64) /* two fixed-size copies, not a call (object.h) */
		obj_copy_line(g->key, key, klen);
	else
		memcpy(g->key, key, klen);
	g->klen = klen;
	g->cont = cont;
	g->ctx = ctx;
	/* Buckets, chain blocks and value objects it reaches must not change
	 * size class until it is done (epochs); the caller checked that the
	 * loop is attached to the transactions (farm_txm_loop_attached). */
	farm_lf_begin_attached(&g->ep);
	*out = g;
	return 0;
}

int farm_ht_get(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                farm_ht_get_fn cont, void *ctx)
{
	struct htloop *l;
	uint64_t hash;
	const struct farm_ht_shard *sd;
	int rc = farm_ht_lookup_prep(h, loop, key, klen, cont != NULL, &l,
	                             false, &hash, &sd);
	if (rc)
		return rc;
	if (!farm_txm_loop_attached(h->txm, loop))
		return -EINVAL; /* the loop has no transactions attached */
	struct get_op *g;
	if ((rc = get_new(h, l, key, klen, cont, ctx, &g)))
		return rc;
	g->hash = hash;
	g->sd = sd;
	g->b = home_of(hash, sd->nbuckets);
	hl_count(l, T_LOOKUPS, 1);
	l->gets_out++; /* until get_end */
	get_start(g);
	return 0;
}

/* The second stage of a group (get_group_done): each key not found in its
 * home bucket searched in its other bucket, prefetched a pass ago, and a
 * key in neither completed as get_local_done completes it. */
static void get_group_rest(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	for (struct get_op *g = ctx, *next; g; g = next) {
		next = g->gnext;
		if (status || lookup_cancelled(g->l))
			get_end(g, status ? status : -ECANCELED, NULL, 0);
		else
			get_local_from(g, g->h->spb);
	}
}

/* One farm_ht_get_many group's local lookups, a pass after their home
 * buckets were prefetched, one deferred item for them all, in two stages
 * (as farm_ht_get_local_batch's groups): each home bucket searched in
 * place and a key found there answered from its slot's copy; the other
 * buckets of the keys not found (30% at 85% occupancy) prefetched, and
 * searched by one more deferred item on the next pass (get_group_rest),
 * so that their misses overlap the pass's other work (the remote READs'
 * harvest, the next window's issue) instead of stalling the search right
 * after the prefetch. A group's misses are about half its pairs' lines
 * so, not every line of every pair at once (in-process, kv_bench
 * --alt-gets: window / single gets per CPU-s 1.04 with whole pairs,
 * 1.09-1.12 so). */
static void get_group_done(farm_loop *loop, void *ctx, int status)
{
	struct get_op *rest = NULL, **tail = &rest;
	for (struct get_op *g = ctx, *next; g; g = next) {
		next = g->gnext;
		if (status) {
			get_end(g, status, NULL, 0);
			continue;
		}
		farm_ht *h = g->h;
		if (get_local_slot(g, 0, h->spb))
			continue;
		ht_prefetch_lines(g->lp + 64u * h->bucket_lines,
		                  h->bucket_lines);
		g->gnext = NULL;
		*tail = g;
		tail = &g->gnext;
	}
	/* Out of deferred items: the second stage now, as before. */
	if (rest && farm_loop_defer(loop, get_group_rest, rest))
		get_group_rest(loop, rest, 0);
}

/* @n READs of pairs to machine @m, one list; a lookup whose READ was not
 * posted ends with the error, as farm_loop_rdma's would end it. */
static void reads_post(struct htloop *l, uint32_t m, farm_wr *w, unsigned n,
                       void *const *ctx)
{
	unsigned posted;
	int rc = farm_loop_rdma_reads(l->loop, m, w, n, bucket_read_done, ctx,
	                              &posted);
	for (unsigned i = posted; i < n; i++)
		get_end(ctx[i], read_err(rc), NULL, 0);
}

/* A group's remote READs, posted as one list per machine: the
 * endpoints' checks and the provider's post once for a machine's, not per
 * READ. */
static void group_reads_post(struct htloop *l, struct get_group *grp)
{
	unsigned n = grp->nr;
	void *ctx[FARM_HT_BATCH_MAX];
	bool one = true;
	for (unsigned i = 0; i < n; i++) {
		ctx[i] = grp->rg[i];
		one &= grp->rm[i] == grp->rm[0];
	}
	if (one) { /* all to one machine (always, with two) */
		reads_post(l, grp->rm[0], grp->rw, n, ctx);
		return;
	}
	farm_wr w[FARM_HT_BATCH_MAX];
	void *c[FARM_HT_BATCH_MAX];
	bool taken[FARM_HT_BATCH_MAX] = {false};
	for (unsigned i = 0; i < n; i++) {
		if (taken[i])
			continue;
		unsigned k = 0;
		for (unsigned j = i; j < n; j++) {
			if (taken[j] || grp->rm[j] != grp->rm[i])
				continue;
			w[k] = grp->rw[j];
			c[k++] = ctx[j];
			taken[j] = true;
		}
		reads_post(l, grp->rm[i], w, k, c);
	}
}

/* Every pair's read issued: the local ones prefetched, back to back, and
 * completed together a pass later; the remote ones posted as one list
 * per machine. Out of line: its group's arrays (5 KiB) stay off the
 * hashing stage's frame. */
static __attribute__((noinline)) void
get_many_issue(struct htloop *l, struct get_op **gs, unsigned m)
{
	struct get_op *local = NULL;
	struct get_group grp;
	grp.tail = &local;
	grp.nr = 0;
	grp.sh = (struct ht_shards){0};
	for (unsigned j = 0; j < m; j++)
		get_start_in(gs[j], &grp);
	if (grp.nr)
		group_reads_post(l, &grp);
	if (local && farm_loop_defer(l->loop, get_group_done, local))
		for (struct get_op *g = local, *next; g; g = next) {
			next = g->gnext;
			get_end(g, -ENOMEM, NULL, 0);
		}
}

/* G-Opt's stages over the lookups started: every key hashed, its shard
 * and home found, then every pair's read issued (the
 * local ones prefetched, back to back, the remote ones batched by the
 * loop into one READ list per machine), and the local ones completed
 * together a pass later. */
static void get_many_start(farm_ht *h, struct htloop *l, struct get_op **gs,
                           unsigned m)
{
	for (unsigned j = 0; j < m; j++) {
		struct get_op *g = gs[j];
		g->hash = farm_ht_hash(g->key, g->klen);
		g->sd = farm_ht_shard_of(h, g->hash, NULL);
		g->b = home_of(g->hash, g->sd->nbuckets);
	}
	hl_count(l, T_LOOKUPS, m);
	l->gets_out += m; /* each until its get_end, as farm_ht_get's */
	get_many_issue(l, gs, m);
}

int farm_ht_get_many(farm_ht *h, farm_loop *loop, unsigned n,
                     const void *const *keys, const uint32_t *klens,
                     farm_ht_get_fn cont, void *const *ctxs, int *rcs)
{
	struct htloop *l = h && loop ? hl_of(h, loop) : NULL;
	if (!l || !cont || (n && (!keys || !klens || !ctxs || !rcs)))
		return -EINVAL;
	if (n > FARM_HT_BATCH_MAX)
		return -E2BIG;
	struct get_op *gs[FARM_HT_BATCH_MAX];
	unsigned m = 0;
	/* As farm_ht_get's: no shards yet, or a loop without transactions. */
	int all = !h->nshards                             ? -ENOENT
	          : !farm_txm_loop_attached(h->txm, loop) ? -EINVAL
	                                                  : 0;
	for (unsigned i = 0; i < n; i++) {
		int rc = ht_key_check(keys[i], klens[i]);
		if (!rc)
			rc = all;
		if (!rc)
			rc = get_new(h, l, keys[i], klens[i], cont, ctxs[i],
			             &gs[m]);
		rcs[i] = rc;
		if (!rc)
			m++;
	}
	if (m)
		get_many_start(h, l, gs, m);
	return 0;
}

/* What every lookup starts with: its arguments checked, its loop state,
 * the key's hash (taken here unless @hashed: the caller's *@hash) and
 * shard. */
int farm_ht_lookup_prep(farm_ht *h, farm_loop *loop, const void *key,
                        uint32_t klen, bool has_cont, struct htloop **l,
                        bool hashed, uint64_t *hash,
                        const struct farm_ht_shard **sd)
{
	if (!h || !loop || !has_cont)
		return -EINVAL;
	int rc = farm_ht_check_key(key, klen);
	if (rc)
		return rc;
	if (!(*l = hl_of(h, loop)))
		return -EINVAL;
	if (!hashed)
		*hash = farm_ht_hash(key, klen);
	*sd = farm_ht_shard_of(h, *hash, NULL);
	return *sd ? 0 : -ENOENT;
}

/* An indirect pair's object, [klen][vlen][key][value]: whether it holds
 * @key (its lengths in *@kl, *@vl either way). */
bool farm_ht_indirect_match(const uint8_t *obj, uint32_t olen,
                            const uint8_t *key, uint32_t klen, uint32_t *kl,
                            uint32_t *vl)
{
	if (olen < 8) {
		*kl = *vl = 0;
		return false;
	}
	memcpy(kl, obj, 4);
	memcpy(vl, obj + 4, 4);
	return *kl == klen && 8ull + *kl + *vl <= olen &&
	       memcmp(obj + 8, key, *kl) == 0;
}
