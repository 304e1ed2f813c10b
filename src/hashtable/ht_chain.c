/*
 * Overflow chains (ht.h, ht_int.h), in the owner's transaction: blocks of
 * BLK_SLOTS pairs hung off a home bucket, kept dense (pairs fill them from
 * the head, a new block goes at the end), each stamped with its home's
 * pair version whenever it changes.
 */
#include "hashtable/ht_int.h"

#include <string.h>

static void chain_block_init(const farm_ht *h, uint8_t *blk, uint64_t ver,
                             farm_fatptr next)
{
	memset(blk, 0, h->block_data);
	put64(blk, ver);
	put_fat(blk + 8, next);
}

/* Stamp a chain block with its home's pair version after the change. */
int farm_ht_stamp_block(struct wctx *w, uint8_t *blk, uint32_t home)
{
	int rc = farm_ht_bump_pairs(w, home);
	const uint8_t *hb;
	if (!rc)
		rc = farm_ht_rbucket(w, home, &hb);
	if (!rc)
		put64(blk, get64(B_FWD(hb)));
	return rc;
}

/* Walks at most @limit - 1 blocks of @home's chain: a depth of @limit means
 * no free slot shallower than that (blk and last then mean nothing). */
int farm_ht_chain_free(struct wctx *w, uint32_t home, unsigned limit,
                       struct cfree *cf)
{
	farm_ht *h = w->h;
	const uint8_t *hb;
	int rc = farm_ht_rbucket(w, home, &hb);
	if (rc)
		return rc;
	memset(cf, 0, sizeof(*cf));
	cf->depth = 1;
	farm_fatptr cur = get_fat(B_OVF(hb));
	while (cur.addr && cf->depth < limit) {
		const void *d;
		if ((rc = farm_tx_read_local(w->tx, cur.addr, cur.size, &d)))
			return rc;
		const uint8_t *blk = d;
		for (unsigned i = 0; i < BLK_SLOTS; i++)
			if (!(blk_slot(h, (uint8_t *)blk, i)[0] & SLOT_USED)) {
				cf->blk = cur;
				cf->slot = i;
				return 0;
			}
		cf->last = cur;
		cur = get_fat(blk + 8);
		cf->depth++;
	}
	return 0;
}

/* The writable free slot @cf names in @home's chain: in its block, or in
 * the batch's new block (the caller made sure of it), linked after the
 * last one. The caller fills the slot, then stamps *@blk. */
int farm_ht_chain_take(struct wctx *w, uint32_t home, const struct cfree *cf,
                       uint8_t **blk, uint8_t **slot)
{
	farm_ht *h = w->h;
	struct shardq *q = w->q;
	int rc;
	if (cf->blk.addr) {
		if ((rc = farm_tx_write(w->tx, cf->blk.addr, (void **)blk)))
			return rc;
		*slot = blk_slot(h, *blk, cf->slot);
		return 0;
	}
	*blk = q->blk_data;
	chain_block_init(h, *blk, 0, (farm_fatptr){0});
	if (cf->last.addr) {
		uint8_t *lb;
		if ((rc = farm_tx_write(w->tx, cf->last.addr, (void **)&lb)))
			return rc;
		put_fat(lb + 8, q->blk_fp);
		if ((rc = farm_ht_stamp_block(w, lb, home)))
			return rc;
	} else {
		uint8_t *hb;
		if ((rc = farm_ht_wbucket(w, home, &hb)))
			return rc;
		put_fat(B_OVF(hb), q->blk_fp);
	}
	q->blk_ready = false;
	hl_count(w->l, T_CHAIN_APPENDS, 1);
	*slot = blk_slot(h, *blk, 0);
	return 0;
}

/* Unlink chain block @lc->blk (empty now) and free it. */
int farm_ht_unlink_block(struct wctx *w, uint32_t home, farm_fatptr blkp,
                         farm_fatptr prev, farm_fatptr next)
{
	int rc;
	if (prev.addr) {
		uint8_t *pb;
		if ((rc = farm_tx_write(w->tx, prev.addr, (void **)&pb)))
			return rc;
		put_fat(pb + 8, next);
		if ((rc = farm_ht_stamp_block(w, pb, home)))
			return rc;
	} else {
		uint8_t *hb;
		if ((rc = farm_ht_wbucket(w, home, &hb)))
			return rc;
		put_fat(B_OVF(hb), next);
		if ((rc = farm_ht_bump_pairs(w, home)))
			return rc;
	}
	hl_count(w->l, T_CHAIN_FREES, 1);
	return farm_tx_free_obj(w->tx, blkp.addr);
}

bool farm_ht_block_empty(const farm_ht *h, uint8_t *blk)
{
	for (unsigned i = 0; i < BLK_SLOTS; i++)
		if (blk_slot(h, blk, i)[0] & SLOT_USED)
			return false;
	return true;
}

/* @home's chain: its last block, the one before it (null when none) and
 * its length in blocks. */
int farm_ht_chain_last(struct wctx *w, uint32_t home, farm_fatptr *last,
                       farm_fatptr *prev, unsigned *nblk)
{
	const uint8_t *hb;
	int rc = farm_ht_rbucket(w, home, &hb);
	if (rc)
		return rc;
	farm_fatptr p = {0}, l = {0}, cur = get_fat(B_OVF(hb));
	unsigned n = 0;
	while (cur.addr) {
		const void *d;
		if ((rc = farm_tx_read_local(w->tx, cur.addr, cur.size, &d)))
			return rc;
		p = l;
		l = cur;
		n++;
		cur = get_fat((const uint8_t *)d + 8);
	}
	*last = l;
	*prev = p;
	*nblk = n;
	return 0;
}

/* Move a pair of the last block of @home's chain (@last, after @prev)
 * into the free slot @s (of a bucket or of a block of the same chain); the
 * block is freed when it empties, else restamped. */
int farm_ht_chain_pop(struct wctx *w, uint32_t home, farm_fatptr last,
                      farm_fatptr prev, uint8_t *s)
{
	farm_ht *h = w->h;
	uint8_t *blk;
	int rc = farm_tx_write(w->tx, last.addr, (void **)&blk);
	if (rc)
		return rc;
	for (unsigned i = BLK_SLOTS; i-- > 0;) {
		uint8_t *cs = blk_slot(h, blk, i);
		if (!(cs[0] & SLOT_USED))
			continue;
		memcpy(s, cs, h->slot_bytes);
		memset(cs, 0, h->slot_bytes);
		break;
	}
	if (farm_ht_block_empty(h, blk))
		return farm_ht_unlink_block(w, home, last, prev,
		                            (farm_fatptr){0});
	return farm_ht_stamp_block(w, blk, home);
}
