/*
 * Batched local lookups (ht.h, farm_ht_get_local_batch): G-Opt's group
 * prefetching (Kalia et al., NSDI'15) on this machine's shards. A lookup
 * that walks to its bucket pair alone waits for one miss per line group;
 * a group hashes every key and prefetches every home bucket first, so the
 * misses of the whole group are in flight at once (and the next group is
 * hashed meanwhile), then searches each home bucket where it lies and
 * answers a key found from its slot alone, its reads checked against the
 * bucket's header (ht_pair.c, farm_ht_pair_get_in); a key not found there
 * has its other bucket prefetched and searched a group later, and a key
 * in neither has its whole pair copied and searched as farm_ht_get does,
 * its home's chain walked while its blocks are here (the first one
 * prefetched, and walked a group later again). The configuration
 * and the lease are checked once for the call. What it cannot answer so
 * (pairs in objects of their own, pairs being written, shards and chain
 * blocks elsewhere) it leaves to farm_ht_get.
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txm.h"
#include "util/lines.h"

uint32_t farm_ht_batch_bytes(const farm_ht *h)
{
	return h ? 128u * h->bucket_lines : 0;
}

/* Stage 1 for a valid key @k, hashed (k->hash): its home, where its pair
 * is here (its shard resolved once a call: @sh), or a status that ends it
 * now. */
static void batch_addr(farm_ht *h, struct htloop *l, struct ht_shards *sh,
                       struct farm_ht_lkey *k)
{
	k->status = FARM_HT_UNRESOLVED;
	const struct farm_ht_shard *sd = farm_ht_shard_of(h, k->hash, NULL);
	if (!sd)
		return;
	uint64_t off = (uint64_t)home_of(k->hash, sd->nbuckets) * 64u *
	               h->bucket_lines;
	uint8_t *lp;
	farm_mr_desc d;
	if (ht_shards_resolve(h, l, sh, sd, off, &lp, &d) || !lp)
		return; /* another machine's: the full lookup reads it */
	k->lp = lp;
}

/* Stage 1 for keys [@lo, @hi): each valid key hashed (unless @hashed:
 * the caller's k->hash), then its pair found. */
static void batch_stage1(farm_ht *h, struct htloop *l, struct ht_shards *sh,
                         struct farm_ht_lkey *keys, unsigned lo, unsigned hi,
                         bool hashed)
{
	for (unsigned i = lo; i < hi; i++) { /* each key checked once */
		struct farm_ht_lkey *k = &keys[i];
		k->lp = NULL;
		k->val = NULL;
		k->vlen = 0;
		k->status = ht_key_check(k->key, k->klen);
		if (k->status)
			continue;
		if (!hashed)
			k->hash = farm_ht_hash(k->key, k->klen);
		batch_addr(h, l, sh, k);
	}
}

/* Key @k not in its pair, whose joint version is @fwd: its home's chain
 * from block @p on, when every block is here, each copied into @img (the
 * pair is no longer needed) and checked as farm_ht_get's chain walk
 * checks it (its incarnation, not newer than the pair), a value found
 * copied to @out. Anything else leaves the key unresolved. */
static void batch_chain(farm_ht *h, struct htloop *l, struct farm_ht_lkey *k,
                        uint8_t *img, uint8_t *out, uint64_t fwd, farm_fatptr p)
{
	uint8_t blk[BLK_HDR + BLK_SLOTS * (8 + 64 + 1024)];
	unsigned lines = h->block_lines;
	for (unsigned depth = 0; depth < 8 && p.addr; depth++) {
		uint8_t *lp;
		farm_mr_desc d;
		uint64_t v, w;
		if (p.size < h->block_data || obj_lines(p.size) != lines ||
		    farm_as_resolve_cached(h->as, &l->rc, p.addr, 64ull * lines,
		                           &lp, &d) ||
		    !lp ||
		    !farm_lines_copy(img, lp, 64ull * lines, LINE_TRIES) ||
		    obj_check(img, lines, p.incarnation, &v, &w))
			return;
		hl_count(l, T_CHAIN, 1);
		obj_unpack(img, h->block_data, blk);
		if (get64(blk) > fwd)
			return; /* written after the pair we read: mixed */
		for (unsigned i = 0; i < BLK_SLOTS; i++) {
			const uint8_t *s = blk_slot(h, blk, i);
			if (!slot_match(h, s, k->key, k->klen, k->hash))
				continue;
			if (s[0] & SLOT_INDIRECT)
				return;
			k->vlen = slot_vlen(s);
			memcpy(out, s + 8 + h->K, k->vlen);
			k->val = out;
			k->status = 0;
			return;
		}
		p = get_fat(blk + 8);
	}
	if (!p.addr)
		k->status = -ENOENT;
}

/* Stage 3 for key @k: its home bucket searched where it lies (the lines
 * the prefetch brought), a key found answered from its slot alone, its
 * value copied to @out (farm_ht_pair_get_in). False: not found so (or its
 * slot changed meanwhile); the other bucket decides. */
static bool batch_home(farm_ht *h, struct farm_ht_lkey *k, uint8_t *out)
{
	if (farm_ht_pair_get_in(h, k->lp, 0, h->spb, k->key, k->klen, k->hash,
	                        out, &k->vlen))
		return false;
	k->val = out;
	k->status = 0;
	return true;
}

/* The keys in neither bucket of their pair whose home has a chain, the
 * chain's first block on its way while the next group's are issued. */
struct batch_chains {
	unsigned n;
	uint8_t idx[FARM_HT_BATCH_GROUP];
	uint64_t fwd[FARM_HT_BATCH_GROUP]; /* the pair's joint version */
	farm_fatptr p[FARM_HT_BATCH_GROUP];
};

/* Key @i's chain from block @p on, its pair's joint version @fwd: its
 * first block prefetched when it is here, the walk queued on @cq (a group
 * later: batch_chains_run). */
static void batch_chain_queue(farm_ht *h, struct htloop *l,
                              struct batch_chains *cq, unsigned i, uint64_t fwd,
                              farm_fatptr p)
{
	uint8_t *lp;
	farm_mr_desc d;
	uint64_t bytes = 64ull * h->block_lines;
	if (!farm_as_resolve_cached(h->as, &l->rc, p.addr, bytes, &lp, &d) &&
	    lp)
		ht_prefetch_lines(lp, h->block_lines);
	cq->idx[cq->n] = (uint8_t)i;
	cq->fwd[cq->n] = fwd;
	cq->p[cq->n++] = p;
}

static void batch_chains_run(farm_ht *h, struct htloop *l,
                             struct farm_ht_lkey *keys, struct batch_chains *cq,
                             uint8_t *one, uint8_t *scratch, uint32_t span)
{
	for (unsigned j = 0; j < cq->n; j++) {
		unsigned i = cq->idx[j];
		uint8_t *out = scratch + (size_t)i * span;
		batch_chain(h, l, &keys[i], one ? one : out, out, cq->fwd[j],
		            cq->p[j]);
	}
	cq->n = 0;
}

/* Stage 4 for key @i, not found in its home bucket: the other bucket
 * searched in place and a key found answered as batch_home answers; a
 * key not found there either has its whole pair copied into @img,
 * checked and searched again, its chain queued on @cq, as farm_ht_get
 * does. A value found is copied to @out. */
static void batch_rest(farm_ht *h, struct htloop *l, struct farm_ht_lkey *keys,
                       unsigned i, struct batch_chains *cq, uint8_t *img,
                       uint8_t *out)
{
	struct farm_ht_lkey *k = &keys[i];
	if (!farm_ht_pair_get_in(h, k->lp, h->spb, 2 * h->spb, k->key, k->klen,
	                         k->hash, out, &k->vlen)) {
		k->val = out;
		k->status = 0;
		return;
	}
	/* Absent from the pair, or torn: only a whole, consistent pair
	 * says a key is not there (a hop moves it between the buckets). */
	if (!farm_lines_copy(img, k->lp, 128ull * h->bucket_lines, LINE_TRIES))
		return; /* a line kept changing: unresolved */
	uint64_t fwd;
	int rc = farm_ht_pair_check(h, img, &fwd);
	if (rc) { /* -EAGAIN: being installed, or mixed commits */
		if (rc != -EAGAIN)
			k->status = rc;
		return;
	}
	uint8_t hdr[8];
	int slot = farm_ht_pair_find(h, img, k->key, k->klen, k->hash, hdr);
	if (slot < 0) {
		farm_fatptr ovf = farm_ht_pair_overflow(img);
		if (ovf.addr)
			batch_chain_queue(h, l, cq, i, fwd, ovf);
		else
			k->status = -ENOENT;
		return;
	}
	if (hdr[0] & SLOT_INDIRECT)
		return; /* its object: the full lookup reads it */
	k->vlen = slot_vlen(hdr);
	farm_ht_pair_val_read(h, img, (unsigned)slot, k->vlen, out);
	k->val = out;
	k->status = 0;
}

/* The keys a group's home buckets did not answer, their other buckets on
 * their way while the next group's are issued. */
struct batch_pend {
	unsigned n;
	uint8_t idx[FARM_HT_BATCH_GROUP];
};

static void batch_pend_run(farm_ht *h, struct htloop *l,
                           struct farm_ht_lkey *keys, struct batch_pend *p,
                           struct batch_chains *cq, uint8_t *one,
                           uint8_t *scratch, uint32_t span)
{
	for (unsigned j = 0; j < p->n; j++) {
		unsigned i = p->idx[j];
		uint8_t *out = scratch + (size_t)i * span;
		batch_rest(h, l, keys, i, cq, one ? one : out, out);
	}
	p->n = 0;
}

/* The keys of a call in G-Opt's groups, a bucket at a time: the home
 * buckets of FARM_HT_BATCH_GROUP keys prefetched, the next group's keys
 * hashed while those misses are in flight, then each home bucket searched.
 * Most keys are in their home bucket (70% at 85% occupancy), so the other
 * bucket is fetched only for a key not found there, and searched after
 * the next group's prefetches are issued: it has their time to come, and
 * a group's misses are half the lines. A key in neither bucket (3% at
 * 85%) has its chain's first block prefetched then and walked a group
 * later still, as G-Opt makes each dependent miss a stage of its own: a
 * block read when it is found waits a whole miss. (Measured slower on one
 * core: a rolling window, each key prefetched that many keys ahead of its
 * search; the next group hashed between this group's prefetches instead
 * of after them.) A found value goes to the key's part of @scratch. The
 * pairs a home and its other bucket do not answer are copied into one
 * image that stays in the L1 cache (a call's pair images would fill the
 * cache and evict the pairs prefetched); pairs larger than it (values of
 * hundreds of bytes inline) into the key's part. */
static void batch_groups(farm_ht *h, struct htloop *l,
                         struct farm_ht_lkey *keys, unsigned n,
                         uint8_t *scratch, bool hashed)
{
	uint8_t work[4096] __attribute__((aligned(64)));
	uint32_t span = farm_ht_batch_bytes(h);
	uint8_t *one = span <= sizeof(work) ? &work[0] : NULL;
	const unsigned G = FARM_HT_BATCH_GROUP;
	struct batch_pend pend = {0};
	struct batch_chains chains = {0};
	struct ht_shards shards = {0};
	batch_stage1(h, l, &shards, keys, 0, n < G ? n : G, hashed);
	for (unsigned g = 0; g < n; g += G) {
		unsigned e = n - g < G ? n : g + G;
		unsigned ne = n - e < G ? n : e + G;
		for (unsigned i = g; i < e; i++)
			if (keys[i].lp)
				ht_prefetch_lines(keys[i].lp, h->bucket_lines);
		/* The next group's hashing while this group's misses are
		 * in flight. */
		batch_stage1(h, l, &shards, keys, e, ne, hashed);
		/* The chains the group before it queued, and the previous
		 * group's other buckets, have had that time. */
		batch_chains_run(h, l, keys, &chains, one, scratch, span);
		batch_pend_run(h, l, keys, &pend, &chains, one, scratch, span);
		for (unsigned i = g; i < e; i++) {
			struct farm_ht_lkey *k = &keys[i];
			uint8_t *out = scratch + (size_t)i * span;
			if (!k->lp || batch_home(h, k, out))
				continue;
			ht_prefetch_lines(k->lp + 64u * h->bucket_lines,
			                  h->bucket_lines);
			pend.idx[pend.n++] = (uint8_t)i;
		}
	}
	batch_chains_run(h, l, keys, &chains, one, scratch, span);
	batch_pend_run(h, l, keys, &pend, &chains, one, scratch, span);
	batch_chains_run(h, l, keys, &chains, one, scratch, span);
}

static int local_batch(farm_ht *h, farm_loop *loop, struct farm_ht_lkey *keys,
                       unsigned n, uint8_t *scratch, bool hashed)
{
	struct htloop *l = h && loop ? hl_of(h, loop) : NULL;
	if (!l || (n && (!keys || !scratch)))
		return -EINVAL;
	if (n > FARM_HT_BATCH_MAX)
		return -E2BIG;
	/* The shard's buckets must not change size class while they are
	 * read (epochs, as farm_ht_get). */
	farm_lf_op ep = {0};
	int rc = farm_lf_begin(h->txm, loop, &ep);
	if (rc)
		return rc;
	uint64_t cfg = ht_config_id(h);
	batch_groups(h, l, keys, n, scratch, hashed);
	/* As get_buckets: a configuration change since the pairs were found
	 * may have moved a shard (the old copy may be stale). The fence
	 * orders the copies' loads before the id's; it pairs with the
	 * release store of the id in farm_as_set_view_placed (as_view.c). */
	atomic_thread_fence(memory_order_acquire);
	bool moved = ht_config_id(h) != cfg;
	int lease = farm_ht_lease_checked(h, 0);
	uint64_t found = 0, absent = 0;
	for (unsigned i = 0; i < n; i++) {
		struct farm_ht_lkey *k = &keys[i];
		if (!k->lp || (k->status != 0 && k->status != -ENOENT))
			continue;
		if (moved || lease) {
			k->status = moved ? FARM_HT_UNRESOLVED : lease;
			k->val = NULL;
			k->vlen = 0;
		} else if (k->status == 0)
			found++;
		else
			absent++;
	}
	farm_lf_end(&ep);
	/* Counted as lookups of one read each; the unresolved ones count in
	 * the full lookup that answers them. */
	hl_count(l, T_LOOKUPS, found + absent);
	hl_count(l, T_READS, found + absent);
	hl_count(l, T_FOUND, found);
	hl_count(l, T_NOTFOUND, absent);
	return 0;
}

int farm_ht_get_local_batch(farm_ht *h, farm_loop *loop,
                            struct farm_ht_lkey *keys, unsigned n,
                            uint8_t *scratch)
{
	return local_batch(h, loop, keys, n, scratch, false);
}

int farm_ht_get_local_batch_hashed(farm_ht *h, farm_loop *loop,
                                   struct farm_ht_lkey *keys, unsigned n,
                                   uint8_t *scratch)
{
	return local_batch(h, loop, keys, n, scratch, true);
}
