/*
 * The hashtable (ht.h, ht_int.h): creation, the loops that use it, its
 * shards and the jump hash that picks a key's shard, and the counters
 * (the key hash itself is inline in ht.h).
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "util/fault.h"
#include "util/log.h"

/* Jump consistent hash (Lamping and Veach): shard of @key among @n. Each
 * step draws r and jumps to j = (b + 1) * 2^31 / (r + 1), computed in
 * doubles as the paper does (every machine must pick the same shard, so
 * the result is exactly that computation's). The last step, whose j is
 * n or more, needs no division: the doubles' two roundings (half an ulp
 * each) move the quotient by under 2^-52 of it, so under 2^-31 while it
 * is below 2n and n below 2^20, and an exact quotient other than n is at
 * least 1 / (r + 1) >= 2^-31 from it (r < 2^31); so j >= n exactly when
 * (b + 1) * 2^31 > n * (r + 1) in integers, and on equality the doubles
 * decide. A lookup's shard thus costs a division only for the steps that
 * move it on (none for half the keys of 2 shards), not one more for the
 * step that ends. test_ht_match checks it against the doubles alone,
 * equal products included. */
static double jump_j(int64_t b, uint64_t r1)
{
	return (double)(b + 1) * ((double)(1ll << 31) / (double)r1);
}

static unsigned jump(uint64_t key, unsigned n)
{
	int64_t b = -1, j = 0;
	bool exact = n < (1u << 20);
	while (j < (int64_t)n) {
		b = j;
		key = key * 2862933555777941757ull + 1;
		uint64_t r1 = (key >> 33) + 1;
		if (exact) {
			uint64_t lhs = (uint64_t)(b + 1) << 31, rhs = n * r1;
			if (lhs > rhs)
				break;
			if (lhs == rhs && jump_j(b, r1) >= (double)n)
				break;
		}
		j = (int64_t)jump_j(b, r1);
	}
	return (unsigned)b;
}

uint32_t farm_ht_bucket_bytes(const farm_ht *h)
{
	return 64u * h->bucket_lines;
}
unsigned farm_ht_slots_per_bucket(const farm_ht *h)
{
	return h->spb;
}
uint32_t farm_ht_block_bytes(const farm_ht *h)
{
	return 64u * h->block_lines;
}

int farm_ht_check_key(const void *key, uint32_t klen)
{
	return ht_key_check(key, klen);
}

unsigned farm_ht_shard_index(uint64_t hash, unsigned nshards)
{
	return nshards ? jump(hash, nshards) : 0;
}

const struct farm_ht_shard *farm_ht_shard_of(farm_ht *h, uint64_t hash,
                                             unsigned *idx)
{
	if (!h->nshards)
		return NULL;
	unsigned i = jump(hash, h->nshards);
	if (idx)
		*idx = i;
	return &h->shards[i];
}

void farm_ht_layout(farm_ht *h, const struct farm_ht_attr *a)
{
	h->H = a->neighborhood;
	h->spb = a->neighborhood / 2;
	h->K = (a->key_inline + 7) & ~7u;
	h->V = (a->val_inline + 7) & ~7u;
	h->slot_bytes = 8 + h->K + h->V;
	h->bucket_data = BKT_HDR + h->spb * h->slot_bytes;
	h->bucket_lines = obj_lines(h->bucket_data);
	h->block_data = BLK_HDR + BLK_SLOTS * h->slot_bytes;
	h->block_lines = obj_lines(h->block_data);
	farm_ht_pair_map(h);
}

int farm_ht_create(farm_txm *txm, farm_as *as, farm_galloc *ga, farm_msg *msg,
                   const struct farm_ht_attr *attr, farm_ht **out)
{
	if (!txm || !as || !ga || !msg || !out)
		return -EINVAL;
	struct farm_ht_attr a = attr ? *attr : (struct farm_ht_attr){0};
	if (!a.neighborhood)
		a.neighborhood = 8;
	if (!a.key_inline)
		a.key_inline = 16;
	if (!a.val_inline)
		a.val_inline = 32;
	if (a.neighborhood % 2 || a.neighborhood < 2 || a.neighborhood > 16 ||
	    a.key_inline < 8 || a.key_inline > 64 || a.val_inline < 24 ||
	    a.val_inline > 1024)
		return -EINVAL;
	farm_ht *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->txm = txm;
	h->as = as;
	h->as_cfg = farm_as_config_word(as);
	h->serve = farm_txm_serve_word(txm);
	h->ga = ga;
	h->msg = msg;
	h->me = farm_as_machine_id(as);
	farm_ht_layout(h, &a);
	int rc = farm_msg_handle(msg, FARM_MSGT_HT_OP, farm_ht_h_op, h);
	if (rc) {
		free(h);
		return rc;
	}
	*out = h;
	return 0;
}

void farm_ht_destroy(farm_ht *h)
{
	if (h)
		farm_ht_puts_free(h);
	free(h);
}

int farm_ht_attach(farm_ht *h, farm_loop *loop)
{
	if (!h || !loop)
		return -EINVAL;
	unsigned i = farm_loop_index(loop);
	if (i >= MAX_LOOPS || h->loops[i])
		return -EINVAL;
	struct htloop *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	size_t bsz = 2ull * 64u * h->bucket_lines;
	l->h = h;
	l->loop = loop;
	l->rand = farm_now_ns() ^ i;
	l->lst = &h->lst[i];
	l->pool = aligned_alloc(64, bsz * POOL_BUFS);
	l->q = calloc(FARM_HT_MAX_SHARDS, sizeof(*l->q));
	int rc = l->pool && l->q ? farm_mr_reg(farm_as_fabric(h->as), l->pool,
	                                       bsz * POOL_BUFS,
	                                       FARM_ACCESS_LOCAL, &l->mr)
	                         : -ENOMEM;
	if (rc) {
		free(l->pool);
		free(l->q);
		free(l);
		return rc;
	}
	for (unsigned k = 0; k < POOL_BUFS; k++)
		buf_put(l, l->pool + k * bsz);
	h->loops[i] = l;
	return 0;
}

static void loop_free(struct htloop *l)
{
	farm_ht_gets_free(l);
	farm_ht_pend_free(l);
	farm_mr_dereg(l->mr);
	free(l->pool);
	free(l->q);
	free(l);
}

void farm_ht_loop_release(struct htloop *l)
{
	/* Lookups still out come back to this state (their buffers, the
	 * loop's counters) on a later pass of the loop, or at its close
	 * (-ECANCELED); a write batch still in flight comes back to its
	 * shard's queue (ht_ship.c). The last of them frees it. */
	if (!l->detached || farm_ht_writes_out(l) ||
	    (l->gets_out && !FARM_FAULT_SWITCH(FARM_FP_HT_DETACH_NOW)))
		return;
	loop_free(l);
}

void farm_ht_detach(farm_ht *h, farm_loop *loop)
{
	struct htloop *l = h ? hl_of(h, loop) : NULL;
	if (!l)
		return;
	h->loops[farm_loop_index(loop)] = NULL; /* nothing new starts */
	l->detached = true;
	/* Writes queued behind a batch are answered -ECANCELED now (none of
	 * them started); a batch whose transaction is in flight ends when
	 * it comes back, with its outcome (ht_ship.c). */
	farm_ht_writes_detach(l);
	farm_ht_loop_release(l);
}

/* Buckets written per transaction while a shard is made: a commit must
 * fit half a log (64 KiB at least). */
#define MK_TX_BYTES (16u << 10)
#define MK_TRIES    64u

struct mk_ctx {
	farm_ht *h;
	farm_loop *loop;
	uint32_t nb;
	farm_ht_shard_fn cont;
	void *ctx;
	farm_gaddr base;
	uint64_t next; /* the first bucket not yet committed */
	unsigned n;    /* buckets in the transaction in flight */
	unsigned tries;
	farm_tx *tx;
};

static void mk_chunk(struct mk_ctx *c);

static void mk_end(struct mk_ctx *c, int status)
{
	struct farm_ht_shard sd = {
	        .machine = c->h->me, .nbuckets = c->nb, .base = c->base};
	if (status && c->base &&
	    farm_galloc_free_array_local(c->h->ga, c->loop, c->base,
	                                 64ull * c->h->bucket_lines,
	                                 (uint64_t)c->nb + 1))
		farm_warn("ht: a shard that could not be made was not freed");
	const struct farm_ht_shard none = {0};
	c->cont(c->loop, c->ctx, status, status ? none : sd);
	free(c);
}

static void mk_committed(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct mk_ctx *c = ctx;
	farm_tx_free(c->tx);
	c->tx = NULL;
	if (outcome && farm_tx_retryable(outcome) && ++c->tries < MK_TRIES) {
		mk_chunk(c);
		return;
	}
	if (outcome) {
		mk_end(c, outcome);
		return;
	}
	c->tries = 0;
	c->next += c->n;
	if (c->next > c->nb)
		mk_end(c, 0);
	else
		mk_chunk(c);
}

/* Write the next buckets unchanged in one transaction. */
static void mk_chunk(struct mk_ctx *c)
{
	farm_ht *h = c->h;
	unsigned per =
	        FARM_MAX(1u, MK_TX_BYTES / (64u * h->bucket_lines + 64u));
	c->n = (unsigned)FARM_MIN((uint64_t)per, (uint64_t)c->nb + 1 - c->next);
	int rc = farm_tx_begin(h->txm, c->loop, &c->tx);
	for (unsigned i = 0; !rc && i < c->n; i++) {
		farm_gaddr a =
		        c->base + (c->next + i) * 64ull * h->bucket_lines;
		const void *d;
		void *w;
		rc = farm_tx_read_local(c->tx, a, h->bucket_data, &d);
		if (!rc)
			rc = farm_tx_write(c->tx, a, &w);
	}
	if (!rc)
		rc = farm_tx_commit(c->tx, mk_committed, c);
	if (rc) {
		farm_tx_free(c->tx);
		c->tx = NULL;
		mk_end(c, rc);
	}
}

static void shard_made(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	struct mk_ctx *c = ctx;
	(void)loop;
	if (status) {
		mk_end(c, status);
		return;
	}
	/* The array's object headers (allocated, size) were written here
	 * only, outside any transaction: a backup copy of its region would
	 * hold none of them, and a machine that took the region over after
	 * this one failed would find no buckets. Writing every bucket once,
	 * in transactions, puts them in the backups too. */
	c->base = a;
	mk_chunk(c);
}

static int make_shard(farm_ht *h, farm_loop *loop, uint32_t nbuckets,
                      bool alone, farm_ht_shard_fn cont, void *ctx)
{
	if (!h || !loop || !cont || nbuckets == 0)
		return -EINVAL;
	struct mk_ctx *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct mk_ctx){
	        .h = h, .loop = loop, .nb = nbuckets, .cont = cont, .ctx = ctx};
	/* nbuckets + 1: the last home's neighbour. Fresh array elements are
	 * allocated objects of version 0 with zero data: empty buckets. */
	uint64_t esz = 64ull * h->bucket_lines, n = (uint64_t)nbuckets + 1;
	int rc =
	        alone ? farm_galloc_alloc_array_alone(h->ga, loop, esz, n,
	                                              shard_made, c)
	              : farm_galloc_alloc_array(h->ga, loop, esz, n,
	                                        FARM_GADDR_NULL, shard_made, c);
	if (rc)
		free(c);
	return rc;
}

int farm_ht_make_shard(farm_ht *h, farm_loop *loop, uint32_t nbuckets,
                       farm_ht_shard_fn cont, void *ctx)
{
	return make_shard(h, loop, nbuckets, false, cont, ctx);
}

int farm_ht_make_shard_alone(farm_ht *h, farm_loop *loop, uint32_t nbuckets,
                             farm_ht_shard_fn cont, void *ctx)
{
	return make_shard(h, loop, nbuckets, true, cont, ctx);
}

int farm_ht_set_shards(farm_ht *h, const struct farm_ht_shard *sd, unsigned n)
{
	if (!h || !sd || n == 0 || n > FARM_HT_MAX_SHARDS)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!sd[i].nbuckets || !sd[i].base)
			return -EINVAL;
	memcpy(h->shards, sd, n * sizeof(*sd));
	h->nshards = n;
	return 0;
}

void farm_ht_stats_get(farm_ht *h, struct farm_ht_stats *out)
{
	if (!h || !out)
		return;
	uint64_t v[16] = {0};
	for (int i = 0; i < 16; i++) {
		for (unsigned k = 0; k < MAX_LOOPS; k++)
			v[i] += atomic_load_explicit(&h->lst[k].v[i],
			                             memory_order_relaxed);
	}
	*out = (struct farm_ht_stats){.lookups = v[T_LOOKUPS],
	                              .lookup_reads = v[T_READS],
	                              .lookup_retries = v[T_RETRIES],
	                              .lookup_chain_reads = v[T_CHAIN],
	                              .puts = v[T_PUTS],
	                              .dels = v[T_DELS],
	                              .hops = v[T_HOPS],
	                              .chain_appends = v[T_CHAIN_APPENDS],
	                              .chain_frees = v[T_CHAIN_FREES],
	                              .combined_txns = v[T_COMBINED],
	                              .found = v[T_FOUND],
	                              .not_found = v[T_NOTFOUND]};
}

bool farm_ht_serves(farm_ht *h, unsigned shard)
{
	if (!h || shard >= h->nshards)
		return false;
	return farm_as_local_ptr(h->as, h->shards[shard].base,
	                         64ull * h->bucket_lines) != NULL;
}
