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

long farm_ht_iterate_local_from(farm_ht *h, unsigned shard, const void *key,
                                uint32_t klen, farm_ht_iter_fn fn, void *ctx)
{
	if (!h || !fn || shard >= h->nshards ||
	    h->shards[shard].machine != h->me ||
	    (key && ht_check_key(key, klen)))
		return -EINVAL;
	const struct farm_ht_shard *sd = &h->shards[shard];
	uint32_t first =
	        key ? home_of(farm_ht_hash(key, klen), sd->nbuckets) : 0;
	uint32_t bb = 64u * h->bucket_lines;
	uint8_t *d = malloc(h->bucket_data > h->block_data ? h->bucket_data
	                                                   : h->block_data);
	uint8_t *img =
	        malloc(bb > 64u * h->block_lines ? bb : 64u * h->block_lines);
	if (!d || !img) {
		free(d);
		free(img);
		return -ENOMEM;
	}
	long n = 0;
	bool go = true;
	for (uint32_t b = first; b <= sd->nbuckets && go && n >= 0; b++) {
		const uint8_t *p = farm_as_local_ptr(
		        h->as, sd->base + (uint64_t)b * bb, bb);
		if (!p)
			break;
		farm_lines_copy(img, p, bb, LINE_TRIES);
		obj_unpack(img, h->bucket_data, d);
		farm_fatptr ovf = get_fat(B_OVF(d));
		for (unsigned i = 0; i < h->spb && go && n >= 0; i++) {
			const uint8_t *s = slot_at(h, d, i);
			if (!(s[0] & SLOT_USED))
				continue;
			int r = iter_slot(h, s, fn, ctx, &go);
			n = r < 0 ? r : n + r;
		}
		while (ovf.addr && go && n >= 0) {
			const uint8_t *bp = farm_as_local_ptr(
			        h->as, ovf.addr, 64ull * h->block_lines);
			if (!bp)
				break;
			farm_lines_copy(img, bp, 64ull * h->block_lines,
			                LINE_TRIES);
			obj_unpack(img, h->block_data, d);
			for (unsigned i = 0; i < BLK_SLOTS && go && n >= 0;
			     i++) {
				const uint8_t *s = blk_slot(h, d, i);
				if (!(s[0] & SLOT_USED))
					continue;
				int r = iter_slot(h, s, fn, ctx, &go);
				n = r < 0 ? r : n + r;
			}
			ovf = get_fat(d + 8);
		}
	}
	free(d);
	free(img);
	return n;
}

int farm_ht_usage_local(farm_ht *h, unsigned shard, struct farm_ht_usage *u)
{
	if (!h || !u || shard >= h->nshards ||
	    h->shards[shard].machine != h->me)
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
