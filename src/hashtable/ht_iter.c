/*
 * Scans of a shard stored on this machine (ht.h, ht_int.h): iteration
 * over its pairs (farm_ht_iterate_local) and what it holds
 * (farm_ht_usage_local), read in place, line-consistently.
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "util/lines.h"

/* Visit the pair in slot @s: inline, or in its own object (a local one:
 * the shard's owner allocated it), read line-consistently and checked
 * against the slot's fat pointer. 1 visited, 0 skipped (freed meanwhile,
 * or not local), -ENOMEM. */
static int iter_slot(farm_ht *h, const uint8_t *s, farm_ht_iter_fn fn,
                     void *ctx, bool *go)
{
	if (!(s[0] & SLOT_INDIRECT)) {
		*go = fn(ctx, s + 8, s[1], s + 8 + h->K, slot_vlen(s));
		return 1;
	}
	farm_fatptr p = get_fat(s + 8 + h->K);
	unsigned lines = obj_lines(p.size);
	const uint8_t *src =
	        lines ? farm_as_local_ptr(h->as, p.addr, 64ull * lines) : NULL;
	if (!src)
		return 0;
	uint8_t *img = malloc(64ull * lines), *obj = malloc(p.size);
	int rc = img && obj ? 0 : -ENOMEM;
	uint64_t v, w;
	uint32_t kl, vl;
	/* [klen][vlen][key][value] */
	if (!rc && p.size >= 8 &&
	    farm_lines_copy(img, src, 64ull * lines, LINE_TRIES) &&
	    obj_check(img, lines, p.incarnation, &v, &w) == 0) {
		obj_unpack(img, p.size, obj);
		memcpy(&kl, obj, 4);
		memcpy(&vl, obj + 4, 4);
		if (kl && 8ull + kl + vl <= p.size) {
			*go = fn(ctx, obj + 8, kl, obj + 8 + kl, vl);
			rc = 1;
		}
	}
	free(img);
	free(obj);
	return rc;
}

long farm_ht_iterate_local(farm_ht *h, unsigned shard, farm_ht_iter_fn fn,
                           void *ctx)
{
	return farm_ht_iterate_local_from(h, shard, NULL, 0, fn, ctx);
}

/* One local iteration: the callback, the buffers a bucket or chain block
 * is copied (@img) and unpacked (@d) into, the pairs visited so far (or a
 * negative error) and whether the callback wants more. */
struct iter_walk {
	farm_ht *h;
	farm_ht_iter_fn fn;
	void *ctx;
	uint8_t *d, *img;
	long n;
	bool go;
};

static bool iter_going(const struct iter_walk *w)
{
	return w->go && w->n >= 0;
}

/* Visit slot @s if it holds a pair. */
static void iter_visit(struct iter_walk *w, const uint8_t *s)
{
	if (!(s[0] & SLOT_USED))
		return;
	int r = iter_slot(w->h, s, w->fn, w->ctx, &w->go);
	w->n = r < 0 ? r : w->n + r;
}

/* The pairs of the overflow chain starting at @ovf, block by block, until
 * a block is not local. */
static void iter_chain(struct iter_walk *w, farm_fatptr ovf)
{
	farm_ht *h = w->h;
	uint64_t len = 64ull * h->block_lines;
	while (ovf.addr && iter_going(w)) {
		const uint8_t *bp = farm_as_local_ptr(h->as, ovf.addr, len);
		if (!bp)
			return;
		farm_lines_copy(w->img, bp, len, LINE_TRIES);
		obj_unpack(w->img, h->block_data, w->d);
		for (unsigned i = 0; i < BLK_SLOTS && iter_going(w); i++)
			iter_visit(w, blk_slot(h, w->d, i));
		ovf = get_fat(w->d + 8);
	}
}

/* The pairs of bucket @b of shard @sd, then of its chain. False when the
 * bucket is not local (the walk ends). */
static bool iter_bucket(struct iter_walk *w, const struct farm_ht_shard *sd,
                        uint32_t b)
{
	farm_ht *h = w->h;
	uint32_t bb = 64u * h->bucket_lines;
	const uint8_t *p =
	        farm_as_local_ptr(h->as, sd->base + (uint64_t)b * bb, bb);
	if (!p)
		return false;
	farm_lines_copy(w->img, p, bb, LINE_TRIES);
	obj_unpack(w->img, h->bucket_data, w->d);
	farm_fatptr ovf = get_fat(B_OVF(w->d));
	for (unsigned i = 0; i < h->spb && iter_going(w); i++)
		iter_visit(w, slot_at(h, w->d, i));
	iter_chain(w, ovf);
	return true;
}

long farm_ht_iterate_local_from(farm_ht *h, unsigned shard, const void *key,
                                uint32_t klen, farm_ht_iter_fn fn, void *ctx)
{
	if (!h || !fn || shard >= h->nshards || !farm_ht_serves(h, shard) ||
	    (key && farm_ht_check_key(key, klen)))
		return -EINVAL;
	const struct farm_ht_shard *sd = &h->shards[shard];
	uint32_t first =
	        key ? home_of(farm_ht_hash(key, klen), sd->nbuckets) : 0;
	uint32_t bb = 64u * h->bucket_lines;
	struct iter_walk w = {.h = h, .fn = fn, .ctx = ctx, .go = true};
	w.d = malloc(h->bucket_data > h->block_data ? h->bucket_data
	                                            : h->block_data);
	w.img = malloc(bb > 64u * h->block_lines ? bb : 64u * h->block_lines);
	if (!w.d || !w.img) {
		free(w.d);
		free(w.img);
		return -ENOMEM;
	}
	for (uint32_t b = first; b <= sd->nbuckets && iter_going(&w); b++)
		if (!iter_bucket(&w, sd, b))
			break;
	free(w.d);
	free(w.img);
	return w.n;
}

int farm_ht_usage_local(farm_ht *h, unsigned shard, struct farm_ht_usage *u)
{
	if (!h || !u || shard >= h->nshards || !farm_ht_serves(h, shard))
		return -EINVAL;
	const struct farm_ht_shard *sd = &h->shards[shard];
	uint32_t bb = 64u * h->bucket_lines;
	uint32_t kb = 64u * h->block_lines;
	uint8_t *d = malloc(FARM_MAX(h->bucket_data, h->block_data));
	uint8_t *img = malloc(FARM_MAX(bb, kb));
	if (!d || !img) {
		free(d);
		free(img);
		return -ENOMEM;
	}
	*u = (struct farm_ht_usage){.buckets = sd->nbuckets + 1ull};
	u->slots = u->buckets * h->spb;
	int rc = 0;
	for (uint32_t b = 0; b <= sd->nbuckets; b++) {
		const uint8_t *p = farm_as_local_ptr(
		        h->as, sd->base + (uint64_t)b * bb, bb);
		if (!p) {
			rc = FARM_ECORRUPT;
			break;
		}
		farm_lines_copy(img, p, bb, LINE_TRIES);
		obj_unpack(img, h->bucket_data, d);
		farm_fatptr ovf = get_fat(B_OVF(d));
		for (unsigned i = 0; i < h->spb; i++) {
			const uint8_t *s = slot_at(h, d, i);
			if (!(s[0] & SLOT_USED))
				continue;
			u->pairs_in_buckets++;
			u->data_bytes += (uint64_t)s[1] + slot_vlen(s);
		}
		uint64_t len = 0;
		while (ovf.addr) {
			const uint8_t *bp =
			        farm_as_local_ptr(h->as, ovf.addr, kb);
			if (!bp) {
				rc = FARM_ECORRUPT;
				break;
			}
			farm_lines_copy(img, bp, kb, LINE_TRIES);
			obj_unpack(img, h->block_data, d);
			len++;
			for (unsigned i = 0; i < BLK_SLOTS; i++) {
				const uint8_t *s = blk_slot(h, d, i);
				if (!(s[0] & SLOT_USED))
					continue;
				u->pairs_in_chains++;
				u->data_bytes += (uint64_t)s[1] + slot_vlen(s);
			}
			ovf = get_fat(d + 8);
		}
		if (len) {
			u->chains++;
			u->chain_blocks += len;
			u->longest_chain = FARM_MAX(u->longest_chain, len);
		}
	}
	free(d);
	free(img);
	u->table_bytes = u->buckets * bb + u->chain_blocks * kb;
	return rc;
}
