/*
 * farm_ht_get_first (ht.h): a lookup's first read alone, for the KV
 * store's batched multi-get: the bucket pair's read, its validation and
 * an indirect value's read, as farm_ht_get's (ht_get.c) first steps;
 * anything more (a chain, a retry) is FARM_HT_UNRESOLVED, left to the
 * caller. Its states are recycled per loop, as farm_ht_get's.
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txm.h"
#include "util/lines.h"

/* One farm_ht_get_first(): the bucket pair's read, its validation and an
 * indirect value's read; anything else is FARM_HT_UNRESOLVED. */
struct first_op {
	farm_ht *h;
	struct htloop *l;
	uint8_t key[FARM_HT_MAX_KEY];
	uint32_t klen;
	uint64_t hash;
	uint8_t *img; /* 2 buckets, from the pool */
	uint8_t *obuf;
	uint32_t olen;
	const uint8_t *lp; /* local shard: the buckets, copied when due */
	uint64_t cfg;      /* the configuration the buckets were found in */
	farm_ht_get_fn cont;
	void *ctx;
	farm_lf_op ep;
	struct first_op *next_free;
};

void farm_ht_firsts_free(struct htloop *l)
{
	while (l->free_firsts) {
		struct first_op *f = l->free_firsts;
		l->free_firsts = f->next_free;
		free(f);
	}
}

/* A state from the loop's free list (as get_new's): a multi-get's first
 * reads allocate nothing in the steady state. Every field get_first does
 * not set is cleared. */
static struct first_op *first_new(struct htloop *l)
{
	struct first_op *f = l->free_firsts;
	if (!f)
		return calloc(1, sizeof(*f));
	l->free_firsts = f->next_free;
	f->obuf = NULL;
	f->olen = 0;
	f->lp = NULL;
	f->ep = (farm_lf_op){0};
	return f;
}

static void first_recycle(struct htloop *l, struct first_op *f)
{
	f->next_free = l->free_firsts;
	l->free_firsts = f;
}

static void first_end(struct first_op *f, int status, const void *val,
                      uint32_t len)
{
	status = farm_ht_lease_checked(f->h, status);
	if (status == 0 || status == -ENOENT)
		hl_count(f->l, status == 0 ? T_FOUND : T_NOTFOUND, 1);
	struct htloop *l = f->l;
	f->cont(l->loop, f->ctx, status, val, len);
	farm_lf_end(&f->ep);
	buf_put(l, f->img);
	free(f->obuf);
	/* Before lookup_out_end: the last lookup out of a detached loop
	 * frees the loop's state, this list with it. */
	first_recycle(l, f);
	lookup_out_end(l);
}

static void first_obj_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct first_op *f = ctx;
	if (lookup_cancelled(f->l))
		status = -ECANCELED;
	if (status == FARM_EFREED || status == -EBUSY ||
	    status == FARM_EFLUSHED) {
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
		return;
	}
	if (status) {
		first_end(f, read_err(status), NULL, 0);
		return;
	}
	uint32_t kl, vl;
	if (!farm_ht_indirect_match(f->obuf, f->olen, f->key, f->klen, &kl,
	                            &vl)) {
		/* Another long key with the same hash, or a stale slot. */
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
		return;
	}
	first_end(f, 0, f->obuf + 8 + kl, vl);
}

/* Found in slot @slot of the pair (header @hdr): the inline value,
 * gathered to the image's start, or the read of the object it names. */
static void first_found(struct first_op *f, unsigned slot, const uint8_t *hdr)
{
	farm_ht *h = f->h;
	uint32_t off = 8 + h->K;
	if (!(hdr[0] & SLOT_INDIRECT)) {
		uint32_t vl = slot_vlen(hdr);
		farm_ht_pair_val_read(h, f->img, slot, vl, f->img);
		first_end(f, 0, f->img, vl);
		return;
	}
	farm_fatptr p;
	farm_ht_pair_slot_read(h, f->img, slot, off, sizeof(p), &p);
	if (!p.addr || p.size < 8 || p.size > FARM_TX_MAX_SIZE) {
		first_end(f, FARM_ECORRUPT, NULL, 0);
		return;
	}
	f->obuf = malloc(p.size);
	f->olen = p.size;
	if (!f->obuf) {
		first_end(f, -ENOMEM, NULL, 0);
		return;
	}
	hl_count(f->l, T_READS, 1);
	int rc = farm_lf_read(h->txm, f->l->loop, p.addr, p.size, p.incarnation,
	                      f->obuf, first_obj_done, f);
	if (rc)
		first_end(f, rc == -EAGAIN ? FARM_HT_UNRESOLVED : read_err(rc),
		          NULL, 0);
}

/* The bucket pair is in f->img (on a later pass than the call). */
static void first_buckets(struct first_op *f)
{
	farm_ht *h = f->h;
	int rc = farm_ht_pair_check(h, f->img, NULL);
	if (rc) { /* -EAGAIN: being installed, or mixed commits */
		first_end(f, rc == -EAGAIN ? FARM_HT_UNRESOLVED : rc, NULL, 0);
		return;
	}
	/* As get_buckets: a configuration change since the buckets were
	 * found may have moved the shard (the old copy may be stale). The
	 * fence pairs with the release store of the id in
	 * farm_as_set_view_placed (as_view.c). */
	atomic_thread_fence(memory_order_acquire);
	if (ht_config_id(h) != f->cfg) {
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
		return;
	}
	uint8_t hdr[8];
	int slot = farm_ht_pair_find(h, f->img, f->key, f->klen, f->hash, hdr);
	if (slot >= 0) {
		first_found(f, (unsigned)slot, hdr);
		return;
	}
	/* Not in b or b + 1: absent, unless the home has a chain. */
	first_end(f,
	          farm_ht_pair_overflow(f->img).addr ? FARM_HT_UNRESOLVED
	                                             : -ENOENT,
	          NULL, 0);
}

static void first_read_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct first_op *f = ctx;
	/* A local pair was prefetched when the lookup started and is copied
	 * now, a pass later, with the other lookups of the batch in flight
	 * (as farm_ht_get's get_local_done); a line that kept changing
	 * leaves the key unresolved. */
	if (lookup_cancelled(f->l))
		status = -ECANCELED;
	if (!status && f->lp &&
	    !farm_lines_copy(f->img, f->lp, 128ull * f->h->bucket_lines,
	                     LINE_TRIES))
		status = FARM_EFLUSHED;
	if (status == FARM_EFLUSHED)
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
	else if (status)
		first_end(f, read_err(status), NULL, 0);
	else
		first_buckets(f);
}

/* The bucket pair resolved once, through the loop's descriptor cache
 * (no lock, as get_start): here, prefetched now and copied with its lines
 * checked on a later pass, as a remote read would complete; elsewhere, one
 * READ; unknown yet, the address space's resolving read. */
static int first_issue(struct first_op *f, farm_gaddr a, uint32_t len)
{
	struct htloop *l = f->l;
	uint8_t *lp;
	farm_mr_desc d;
	int rc = farm_as_resolve_cached(f->h->as, &l->rc, a, len, &lp, &d);
	if (!rc && lp) {
		ht_prefetch_lines(lp, (len + 63u) / 64u);
		f->lp = lp;
		return farm_loop_defer(l->loop, first_read_done, f);
	}
	if (!rc) {
		farm_wr wr = farm_wr_read(0, f->img, l->mr, len, &d,
		                          farm_gaddr_offset(a));
		return farm_loop_rdma(l->loop, d.machine, &wr, first_read_done,
		                      f);
	}
	if (rc != -EAGAIN)
		return rc;
	return farm_as_read(f->h->as, l->loop, a, f->img, l->mr, len,
	                    first_read_done, f);
}

static int get_first(farm_ht *h, farm_loop *loop, const void *key,
                     uint32_t klen, bool hashed, uint64_t hash,
                     farm_ht_get_fn cont, void *ctx)
{
	struct htloop *l;
	const struct farm_ht_shard *sd;
	int rc = farm_ht_lookup_prep(h, loop, key, klen, cont != NULL, &l,
	                             hashed, &hash, &sd);
	if (rc)
		return rc;
	struct first_op *f = first_new(l);
	if (!f)
		return -ENOMEM;
	f->img = buf_get(l);
	if (!f->img) { /* too many in flight */
		first_recycle(l, f);
		return -EAGAIN;
	}
	f->h = h;
	f->l = l;
	memcpy(f->key, key, klen);
	f->klen = klen;
	f->hash = hash;
	f->cont = cont;
	f->ctx = ctx;
	uint32_t bb = 64u * h->bucket_lines;
	farm_gaddr a = sd->base + (uint64_t)home_of(hash, sd->nbuckets) * bb;
	if ((rc = farm_lf_begin(h->txm, loop, &f->ep))) {
		buf_put(l, f->img);
		first_recycle(l, f);
		return rc;
	}
	hl_count(l, T_LOOKUPS, 1);
	hl_count(l, T_READS, 1);
	f->cfg = ht_config_id(h);
	l->gets_out++; /* until first_end */
	rc = first_issue(f, a, 2 * bb);
	if (rc) {
		l->gets_out--; /* not issued: never comes back */
		farm_lf_end(&f->ep);
		buf_put(l, f->img);
		first_recycle(l, f);
	}
	return read_err(rc); /* -ENOENT from here would say: no shards */
}

int farm_ht_get_first(farm_ht *h, farm_loop *loop, const void *key,
                      uint32_t klen, farm_ht_get_fn cont, void *ctx)
{
	return get_first(h, loop, key, klen, false, 0, cont, ctx);
}

int farm_ht_get_first_hashed(farm_ht *h, farm_loop *loop, const void *key,
                             uint32_t klen, uint64_t hash, farm_ht_get_fn cont,
                             void *ctx)
{
	return get_first(h, loop, key, klen, true, hash, cont, ctx);
}
