/*
 * The shard owner's put and delete (ht.h, ht_int.h), applied in the
 * batch's transaction: find the key (its two buckets, then its home's
 * chain), insert into a free slot in reach, slid there by hops and
 * backward moves, or evict a pair to a shallower chain slot, else append
 * to the home's chain (ht_chain.c); a delete refills the freed bucket slot
 * from the longest chain in reach.
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static farm_gaddr bucket_addr(const farm_ht *h, const struct farm_ht_shard *sd,
                              uint32_t b)
{
	return sd->base + (uint64_t)b * 64u * h->bucket_lines;
}

/* The transaction's writable copy of bucket @b. */
int farm_ht_wbucket(struct wctx *w, uint32_t b, uint8_t **out)
{
	farm_gaddr a = bucket_addr(w->h, w->sd, b);
	const void *d;
	int rc = farm_tx_read_local(w->tx, a, w->h->bucket_data, &d);
	if (!rc)
		rc = farm_tx_write(w->tx, a, (void **)out);
	return rc;
}

/* A read-only view of bucket @b (the transaction's copy). */
int farm_ht_rbucket(struct wctx *w, uint32_t b, const uint8_t **out)
{
	return farm_tx_read_local(w->tx, bucket_addr(w->h, w->sd, b),
	                          w->h->bucket_data, (const void **)out);
}

/* Bump the joint versions of the pairs around bucket @x. */
int farm_ht_bump_pairs(struct wctx *w, uint32_t x)
{
	uint32_t nb = w->sd->nbuckets;
	for (int side = 0; side < 2; side++) {
		if (side == 0 && x == 0)
			continue;
		uint32_t y = side == 0 ? x - 1 : x; /* the pair (y, y + 1) */
		if (y + 1 > nb)
			continue;
		uint8_t *by, *by1;
		int rc = farm_ht_wbucket(w, y, &by);
		if (!rc)
			rc = farm_ht_wbucket(w, y + 1, &by1);
		if (rc)
			return rc;
		uint64_t v = get64(B_FWD(by)) + 1;
		put64(B_FWD(by), v);
		put64(B_BWD(by1), v);
	}
	return 0;
}

static void fill_slot(const farm_ht *h, uint8_t *s, const uint8_t *key,
                      uint32_t klen, uint64_t hash, const uint8_t *val,
                      uint32_t vlen, const farm_fatptr *ind)
{
	memset(s, 0, h->slot_bytes);
	s[0] = SLOT_USED;
	if (klen > h->K) {
		s[0] |= SLOT_LONGKEY;
		put64(s + 8, hash);
	} else {
		s[1] = (uint8_t)klen;
		memcpy(s + 8, key, klen);
	}
	memcpy(s + 4, &vlen, 4);
	if (ind) {
		s[0] |= SLOT_INDIRECT;
		put_fat(s + 8 + h->K, *ind);
	} else {
		memcpy(s + 8 + h->K, val, vlen);
	}
}

/* The indirect object for a pair that does not fit inline. */
static bool needs_object(const farm_ht *h, uint32_t klen, uint32_t vlen)
{
	return klen > h->K || vlen > h->V;
}

/* Free the indirect object a slot names (it must be read first). */
static int drop_indirect(struct wctx *w, const uint8_t *s)
{
	if (!(s[0] & SLOT_INDIRECT))
		return 0;
	farm_fatptr f = get_fat(s + 8 + w->h->K);
	const void *d;
	int rc = farm_tx_read_local(w->tx, f.addr, f.size, &d);
	if (!rc)
		rc = farm_tx_free_obj(w->tx, f.addr);
	return rc == FARM_EFREED ? 0 : rc;
}

/* Where the key is: bucket slot, or chain block slot. */
struct loc {
	int where; /* 0 none, 1 bucket, 2 chain */
	uint32_t bucket;
	unsigned slot;
	farm_fatptr blk, prev; /* chain: the block and its predecessor */
};

static int find_key(struct wctx *w, uint32_t home, const uint8_t *key,
                    uint32_t klen, uint64_t hash, struct loc *lc)
{
	farm_ht *h = w->h;
	memset(lc, 0, sizeof(*lc));
	for (uint32_t b = home; b <= home + 1; b++) {
		const uint8_t *bd;
		int rc = farm_ht_rbucket(w, b, &bd);
		if (rc)
			return rc;
		for (unsigned i = 0; i < h->spb; i++)
			if (slot_match(h, slot_at(h, (uint8_t *)bd, i), key,
			               klen, hash)) {
				*lc = (struct loc){
				        .where = 1, .bucket = b, .slot = i};
				return 0;
			}
	}
	const uint8_t *hb;
	int rc = farm_ht_rbucket(w, home, &hb);
	if (rc)
		return rc;
	farm_fatptr prev = {0}, cur = get_fat(B_OVF(hb));
	while (cur.addr) {
		const uint8_t *blk;
		rc = farm_tx_read_local(w->tx, cur.addr, cur.size,
		                        (const void **)&blk);
		if (rc)
			return rc;
		for (unsigned i = 0; i < BLK_SLOTS; i++)
			if (slot_match(h, blk_slot(h, (uint8_t *)blk, i), key,
			               klen, hash)) {
				*lc = (struct loc){.where = 2,
				                   .slot = i,
				                   .blk = cur,
				                   .prev = prev};
				return 0;
			}
		prev = cur;
		cur = get_fat(blk + 8);
	}
	return 0;
}

/* The first free slot of bucket data @bd, or -1. */
static int free_slot(const farm_ht *h, const uint8_t *bd)
{
	for (unsigned i = 0; i < h->spb; i++)
		if (!(slot_at(h, (uint8_t *)bd, i)[0] & SLOT_USED))
			return (int)i;
	return -1;
}

/* Can a free slot of bucket @y move to the adjacent bucket @n? When @n
 * holds a key homed at min(y, n), which may live in both: it moves from
 * @n into @y (a forward hop when n = y - 1, a backward move when
 * n = y + 1). *@slot: its slot in @n, or -1. */
static int step_slot(struct wctx *w, uint32_t y, uint32_t n, int *slot)
{
	farm_ht *h = w->h;
	uint32_t home = FARM_MIN(y, n);
	const uint8_t *bd;
	int rc = farm_ht_rbucket(w, n, &bd);
	if (rc)
		return rc;
	*slot = -1;
	for (unsigned i = 0; i < h->spb; i++) {
		const uint8_t *s = slot_at(h, (uint8_t *)bd, i);
		if ((s[0] & SLOT_USED) &&
		    home_of(slot_hash(h, s), w->sd->nbuckets) == home) {
			*slot = (int)i;
			break;
		}
	}
	return 0;
}

/* Move the pair in slot @fs of bucket @from to the free slot @ts of the
 * adjacent bucket @to (the pair may live in both), bumping the joint
 * versions around both: a lookup reads the pair's two buckets together
 * and sees it in one of them. */
static int move_pair(struct wctx *w, uint32_t from, unsigned fs, uint32_t to,
                     unsigned ts)
{
	farm_ht *h = w->h;
	uint8_t *pf, *pt;
	int rc = farm_ht_wbucket(w, from, &pf);
	if (!rc)
		rc = farm_ht_wbucket(w, to, &pt);
	if (rc)
		return rc;
	memcpy(slot_at(h, pt, ts), slot_at(h, pf, fs), h->slot_bytes);
	memset(slot_at(h, pf, fs), 0, h->slot_bytes);
	if ((rc = farm_ht_bump_pairs(w, to)) ||
	    (rc = farm_ht_bump_pairs(w, from)))
		return rc;
	hl_count(w->l, T_HOPS, 1);
	return 0;
}

/* Slide the free slot *@ys of bucket @y to bucket @t, one move per bucket
 * (each step checked before with step_slot). *@ys: the free slot in @t. */
static int slide(struct wctx *w, uint32_t y, unsigned *ys, uint32_t t)
{
	while (y != t) {
		uint32_t n = y > t ? y - 1 : y + 1;
		int s;
		int rc = step_slot(w, y, n, &s);
		if (rc)
			return rc;
		if (s < 0)
			return FARM_ECORRUPT; /* checked before: cannot be */
		if ((rc = move_pair(w, n, (unsigned)s, y, *ys)))
			return rc;
		*ys = (unsigned)s;
		y = n;
	}
	return 0;
}

/* A free slot in reach of @home (in @home or @home + 1), slid there if
 * needed from the nearest free slot forward (keys homed at x - 1 hop from
 * x - 1 to x) or backward (keys homed at x - 1 move from x back to x - 1),
 * whichever takes fewer moves (forward on a tie), within HOP_REACH
 * buckets. Returns 0 with the bucket and slot, -ENOSPC when no free slot
 * can be slid there. */
static int make_room(struct wctx *w, uint32_t home, uint32_t *ob, unsigned *os)
{
	farm_ht *h = w->h;
	uint32_t nb = w->sd->nbuckets;
	const uint8_t *bd;
	int rc, s;
	for (uint32_t b = home; b <= home + 1; b++) {
		if ((rc = farm_ht_rbucket(w, b, &bd)))
			return rc;
		if ((s = free_slot(h, bd)) >= 0) {
			*ob = b;
			*os = (unsigned)s;
			return 0;
		}
	}
	/* Forward: bucket y is in reach when y - 1 is and holds a key homed
	 * at y - 1. */
	uint32_t fj = UINT32_MAX, bj = UINT32_MAX;
	unsigned fs = 0, bs = 0, fdist = HOP_REACH + 1;
	for (uint32_t y = home + 2; y <= FARM_MIN(home + HOP_REACH, nb); y++) {
		if ((rc = step_slot(w, y, y - 1, &s)))
			return rc;
		if (s < 0)
			break;
		if ((rc = farm_ht_rbucket(w, y, &bd)))
			return rc;
		if ((s = free_slot(h, bd)) >= 0) {
			fj = y;
			fs = (unsigned)s;
			fdist = y - (home + 1);
			break;
		}
	}
	/* Backward, when shorter: bucket y < home is in reach when y + 1 is
	 * and holds a key homed at y. */
	for (uint32_t d = 1; d <= home && d < fdist && d <= HOP_REACH; d++) {
		uint32_t y = home - d;
		if ((rc = step_slot(w, y, y + 1, &s)))
			return rc;
		if (s < 0)
			break;
		if ((rc = farm_ht_rbucket(w, y, &bd)))
			return rc;
		if ((s = free_slot(h, bd)) >= 0) {
			bj = y;
			bs = (unsigned)s;
			break;
		}
	}
	if (bj != UINT32_MAX) {
		*ob = home;
		*os = bs;
		return slide(w, bj, os, home);
	}
	if (fj != UINT32_MAX) {
		*ob = home + 1;
		*os = fs;
		return slide(w, fj, os, home + 1);
	}
	return -ENOSPC;
}

/* Put the pair in slot @s (inline, or through the batch's indirect
 * object, which this consumes). */
static void place(struct wctx *w, uint8_t *s, const uint8_t *key, uint32_t klen,
                  uint64_t hash, const uint8_t *val, uint32_t vlen)
{
	farm_ht *h = w->h;
	struct shardq *q = w->q;
	if (!needs_object(h, klen, vlen)) {
		fill_slot(h, s, key, klen, hash, val, vlen, NULL);
		return;
	}
	uint8_t *o = q->ind_data;
	memcpy(o, &klen, 4);
	memcpy(o + 4, &vlen, 4);
	memcpy(o + 8, key, klen);
	memcpy(o + 8 + klen, val, vlen);
	fill_slot(h, s, key, klen, hash, val, vlen, &q->ind_fp);
	q->ind_ready = false;
}

/* The best pair evict found so far: the shallowest chain depth, then the
 * bucket @by and slot @bs it sits in, the bucket @bt its slot slides to,
 * and the pair's home @bh. */
struct evict_pick {
	unsigned best, bs;
	uint32_t by, bt, bh;
};

/* One side of evict's walk at distance @d: bucket *@y, whose slots would
 * slide to *@t (home + 1 + d to home + 1 forward, home - d to home
 * backward). Clears *@open once that side can go no further: past the
 * table or HOP_REACH, or a step no pair can take. */
static int evict_side(struct wctx *w, bool forward, uint32_t home, uint32_t d,
                      bool *open, uint32_t *y, uint32_t *t)
{
	if (forward) {
		*y = home + 1 + d;
		*t = home + 1;
		if (*y > w->sd->nbuckets || d >= HOP_REACH)
			*open = false;
	} else {
		*y = home - d;
		*t = home;
		if (d > home)
			*open = false;
	}
	if (!*open || d == 0)
		return 0;
	int s;
	int rc = step_slot(w, *y, forward ? *y - 1 : *y + 1, &s);
	if (!rc && s < 0)
		*open = false;
	return rc;
}

/* The pairs of bucket @y (sliding to @t) of homes other than @home whose
 * chain has a free slot shallower than @p's best replace it. */
static int evict_scan(struct wctx *w, uint32_t home, uint32_t y, uint32_t t,
                      struct evict_pick *p)
{
	farm_ht *h = w->h;
	const uint8_t *bd;
	int rc = farm_ht_rbucket(w, y, &bd);
	if (rc)
		return rc;
	for (unsigned i = 0; i < h->spb; i++) {
		const uint8_t *sl = slot_at(h, (uint8_t *)bd, i);
		if (!(sl[0] & SLOT_USED))
			continue;
		uint32_t kh = home_of(slot_hash(h, sl), w->sd->nbuckets);
		struct cfree cf;
		if (kh == home)
			continue;
		if ((rc = farm_ht_chain_free(w, kh, p->best, &cf)))
			return rc;
		if (cf.depth < p->best)
			*p = (struct evict_pick){.best = cf.depth,
			                         .bs = i,
			                         .by = y,
			                         .bt = t,
			                         .bh = kh};
	}
	return 0;
}

/* Move @p's pair to the free slot of its home's chain and slide the slot
 * it leaves to @p->bt: *@ob, *@os. */
static int evict_move(struct wctx *w, const struct evict_pick *p, uint32_t *ob,
                      unsigned *os)
{
	farm_ht *h = w->h;
	struct cfree cf;
	int rc;
	if ((rc = farm_ht_chain_free(w, p->bh, UINT_MAX, &cf)))
		return rc;
	if (!cf.blk.addr && !w->q->blk_ready)
		return NEED_BLK;
	uint8_t *bd, *blk, *cs;
	if ((rc = farm_ht_wbucket(w, p->by, &bd)) ||
	    (rc = farm_ht_chain_take(w, p->bh, &cf, &blk, &cs)))
		return rc;
	memcpy(cs, slot_at(h, bd, p->bs), h->slot_bytes);
	memset(slot_at(h, bd, p->bs), 0, h->slot_bytes);
	if ((rc = farm_ht_stamp_block(w, blk, p->bh)) ||
	    (rc = farm_ht_bump_pairs(w, p->by)))
		return rc;
	*ob = p->bt;
	*os = p->bs;
	return slide(w, p->by, os, p->bt);
}

/* No free slot can be slid into reach of @home, and a pair added to its
 * chain would sit at depth @own. Rather, a pair of another home, in reach
 * as make_room's free slots are, whose chain has a shallower free slot
 * goes there (the shallowest, then the nearest), and the slot it leaves is
 * slid to @home or @home + 1: as many pairs end in chains, fewer chain
 * reads. Each move stays within a pair's two buckets or between them and
 * its home's chain. Returns 0 with the bucket and slot, -ENOSPC when no
 * pair's chain is shallower, NEED_BLK (nothing changed) when that chain
 * needs the batch's new block. */
static int evict(struct wctx *w, uint32_t home, unsigned own, uint32_t *ob,
                 unsigned *os)
{
	struct evict_pick p = {.best = own};
	bool open[2] = {true, true}; /* forward, backward */
	int rc;
	for (uint32_t d = 0;
	     d <= HOP_REACH && (open[0] || open[1]) && p.best > 1; d++)
		for (int side = 0; side < 2; side++) {
			uint32_t y, t;
			if (!open[side])
				continue;
			if ((rc = evict_side(w, side == 0, home, d, &open[side],
			                     &y, &t)))
				return rc;
			if (open[side] && (rc = evict_scan(w, home, y, t, &p)))
				return rc;
		}
	if (p.best == own)
		return -ENOSPC;
	return evict_move(w, &p, ob, os);
}

int farm_ht_apply_put(struct wctx *w, const uint8_t *key, uint32_t klen,
                      uint64_t hash, const uint8_t *val, uint32_t vlen)
{
	farm_ht *h = w->h;
	struct shardq *q = w->q;
	uint32_t home = home_of(hash, w->sd->nbuckets);
	if (needs_object(h, klen, vlen) && !q->ind_ready)
		return NEED_IND;
	struct loc lc;
	int rc = find_key(w, home, key, klen, hash, &lc);
	if (rc)
		return rc;
	if (lc.where == 1) {
		/* Update in its bucket: the key stays in the slot it is in,
		 * so no pair's set of keys changes and the joint versions,
		 * which only tell a lookup that pairs moved between the two
		 * buckets or a chain, are left alone. A lookup takes a slot as
		 * of one instant of its bucket (the object's own version), so
		 * it sees the old or the new value. The commit so writes (and
		 * logs, locks, installs) this one bucket instead of three. */
		uint8_t *bd;
		if ((rc = farm_ht_wbucket(w, lc.bucket, &bd)))
			return rc;
		uint8_t *s = slot_at(h, bd, lc.slot);
		if ((rc = drop_indirect(w, s)))
			return rc;
		place(w, s, key, klen, hash, val, vlen);
		return 0;
	}
	if (lc.where == 2) { /* update in its chain block */
		uint8_t *blk;
		if ((rc = farm_tx_write(w->tx, lc.blk.addr, (void **)&blk)))
			return rc;
		uint8_t *s = blk_slot(h, blk, lc.slot);
		if ((rc = drop_indirect(w, s)))
			return rc;
		place(w, s, key, klen, hash, val, vlen);
		return farm_ht_stamp_block(w, blk, home);
	}
	uint32_t b;
	unsigned si;
	rc = make_room(w, home, &b, &si);
	if (rc == -ENOSPC) {
		/* The home's overflow chain (its first free slot, else a new
		 * block at its end), unless a pair in reach can go to a
		 * shallower slot in its own home's chain. */
		struct cfree cf;
		if ((rc = farm_ht_chain_free(w, home, UINT_MAX, &cf)))
			return rc;
		rc = cf.depth > 1 ? evict(w, home, cf.depth, &b, &si) : -ENOSPC;
		if (rc == -ENOSPC) {
			uint8_t *blk, *s;
			if (!cf.blk.addr && !q->blk_ready)
				return NEED_BLK;
			if ((rc = farm_ht_chain_take(w, home, &cf, &blk, &s)))
				return rc;
			place(w, s, key, klen, hash, val, vlen);
			return farm_ht_stamp_block(w, blk, home);
		}
	}
	if (rc)
		return rc;
	uint8_t *bd;
	if ((rc = farm_ht_wbucket(w, b, &bd)))
		return rc;
	place(w, slot_at(h, bd, si), key, klen, hash, val, vlen);
	return farm_ht_bump_pairs(w, b);
}

/* One side of pull_back's walk at distance @d from @x: bucket *@p (x + d
 * up, x - d down), the free slot stepped there from its neighbour nearer
 * @x. Clears *@open once that side can go no further: past the table, or
 * a step no pair can take. */
static int pull_side(struct wctx *w, bool up, uint32_t x, uint32_t d,
                     bool *open, uint32_t *p)
{
	if (up) {
		*p = x + d;
		if (*p > w->sd->nbuckets)
			*open = false;
	} else {
		if (d > x)
			*open = false;
		*p = x - d;
	}
	if (!*open || d == 0)
		return 0;
	int s;
	int rc = step_slot(w, up ? *p - 1 : *p + 1, *p, &s);
	if (!rc && s < 0)
		*open = false;
	return rc;
}

/* The chains of homes @p - 1 and @p, which reach bucket @p: a longer one
 * than *@best replaces it (its length, bucket and home into *@best, *@bp,
 * *@bc). */
static int pull_scan(struct wctx *w, uint32_t p, unsigned *best, uint32_t *bp,
                     uint32_t *bc)
{
	farm_fatptr last, prev;
	unsigned n;
	for (uint32_t c = p ? p - 1 : 0; c <= p && c < w->sd->nbuckets; c++) {
		int rc = farm_ht_chain_last(w, c, &last, &prev, &n);
		if (rc)
			return rc;
		if (n > *best) {
			*best = n;
			*bp = p;
			*bc = c;
		}
	}
	return 0;
}

/* Slot @xs of bucket @x was freed: the last pair of the longest chain that
 * can reach it moves there (saving its depth in chain reads per lookup).
 * The chains of homes p - 1 and p reach bucket p, and the free slot slides
 * from @x to p as in make_room (a key homed at y moves from y + 1 back to
 * y, one homed at y - 1 from y - 1 forward to y), within HOP_REACH
 * buckets; the longest chain first, then the nearest. */
static int pull_back(struct wctx *w, uint32_t x, unsigned xs)
{
	farm_ht *h = w->h;
	unsigned best = 0, n;
	uint32_t bp = 0, bc = 0;
	bool open[2] = {true, true}; /* up, down */
	int rc;
	for (uint32_t d = 0; d <= HOP_REACH && (open[0] || open[1]); d++)
		for (int side = 0; side < 2; side++) {
			uint32_t p;
			/* Down at distance 0 is bucket x, done going up. */
			if (!open[side] || (side == 1 && d == 0))
				continue;
			if ((rc = pull_side(w, side == 0, x, d, &open[side],
			                    &p)))
				return rc;
			if (open[side] &&
			    (rc = pull_scan(w, p, &best, &bp, &bc)))
				return rc;
		}
	if (!best)
		return 0;
	farm_fatptr last, prev;
	uint8_t *bd;
	if ((rc = slide(w, x, &xs, bp)) ||
	    (rc = farm_ht_chain_last(w, bc, &last, &prev, &n)) ||
	    (rc = farm_ht_wbucket(w, bp, &bd)) ||
	    (rc = farm_ht_chain_pop(w, bc, last, prev, slot_at(h, bd, xs))))
		return rc;
	return farm_ht_bump_pairs(w, bp);
}

int farm_ht_apply_del(struct wctx *w, const uint8_t *key, uint32_t klen,
                      uint64_t hash)
{
	farm_ht *h = w->h;
	uint32_t home = home_of(hash, w->sd->nbuckets);
	struct loc lc;
	int rc = find_key(w, home, key, klen, hash, &lc);
	if (rc)
		return rc;
	if (lc.where == 0)
		return -ENOENT;
	if (lc.where == 2) {
		uint8_t *blk;
		if ((rc = farm_tx_write(w->tx, lc.blk.addr, (void **)&blk)))
			return rc;
		uint8_t *s = blk_slot(h, blk, lc.slot);
		if ((rc = drop_indirect(w, s)))
			return rc;
		memset(s, 0, h->slot_bytes);
		/* Keep the chain dense: its last pair fills the hole. */
		farm_fatptr last, prev;
		unsigned n;
		if ((rc = farm_ht_chain_last(w, home, &last, &prev, &n)))
			return rc;
		if (last.addr != lc.blk.addr) {
			if ((rc = farm_ht_chain_pop(w, home, last, prev, s)))
				return rc;
			return farm_ht_stamp_block(w, blk, home);
		}
		if (farm_ht_block_empty(h, blk))
			return farm_ht_unlink_block(w, home, lc.blk, lc.prev,
			                            get_fat(blk + 8));
		return farm_ht_stamp_block(w, blk, home);
	}
	uint8_t *bd;
	if ((rc = farm_ht_wbucket(w, lc.bucket, &bd)))
		return rc;
	uint8_t *s = slot_at(h, bd, lc.slot);
	if ((rc = drop_indirect(w, s)))
		return rc;
	memset(s, 0, h->slot_bytes);
	if ((rc = farm_ht_bump_pairs(w, lc.bucket)))
		return rc;
	/* The freed slot takes the last pair of a chain in reach. */
	return pull_back(w, lc.bucket, lc.slot);
}
