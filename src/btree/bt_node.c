/*
 * B-tree nodes: the layout's sizes, comparing keys, fence keys, searching
 * and shifting entries, and the check every node read passes before it
 * is used (a malformed node is FARM_ECORRUPT, never followed).
 */
#include "btree/bt_int.h"

#include <errno.h>

#include <farm/txn.h>

static uint8_t *fence_bytes(const struct bt_layout *l, const uint8_t *n,
                            bool high)
{
	return (uint8_t *)n + BT_HDR + (high ? l->key_max : 0);
}

void farm_bt_fence(const struct bt_layout *l, const uint8_t *n, bool high,
                   struct bt_key *out)
{
	out->inf = (n[14] & (high ? BT_HIGH_INF : BT_LOW_INF)) != 0;
	out->len = out->inf ? 0 : n[high ? 25 : 24];
	if (out->len <= FARM_BT_MAX_KEY)
		memcpy(out->b, fence_bytes(l, n, high), out->len);
}

void farm_bt_set_fence(const struct bt_layout *l, uint8_t *n, bool high,
                       const struct bt_key *k)
{
	uint8_t bit = high ? BT_HIGH_INF : BT_LOW_INF;
	n[14] = (uint8_t)(k->inf ? n[14] | bit : n[14] & ~bit);
	n[high ? 25 : 24] = (uint8_t)(k->inf ? 0 : k->len);
	uint8_t *f = fence_bytes(l, n, high);
	memset(f, 0, l->key_max);
	if (!k->inf)
		memcpy(f, k->b, k->len);
}

bool farm_bt_in_fences(const struct bt_layout *l, const uint8_t *n,
                       const void *key, uint32_t klen)
{
	if (!(n[14] & BT_LOW_INF) &&
	    bt_cmp(key, klen, fence_bytes(l, n, false), n[24]) < 0)
		return false;
	if (!(n[14] & BT_HIGH_INF) &&
	    bt_cmp(key, klen, fence_bytes(l, n, true), n[25]) >= 0)
		return false;
	return true;
}

bool farm_bt_probe_holds(const struct bt_layout *l, const uint8_t *n,
                         const struct bt_probe *p)
{
	if (!p->before)
		return farm_bt_in_fences(l, n, p->key, p->klen);
	bool low_inf = n[14] & BT_LOW_INF, high_inf = n[14] & BT_HIGH_INF;
	if (!p->key)
		return high_inf;
	if (!low_inf &&
	    bt_cmp(fence_bytes(l, n, false), n[24], p->key, p->klen) >= 0)
		return false;
	return high_inf ||
	       bt_cmp(p->key, p->klen, fence_bytes(l, n, true), n[25]) <= 0;
}

uint32_t farm_bt_probe_child(const struct bt_layout *l, const uint8_t *n,
                             const struct bt_probe *p)
{
	if (!p->before)
		return farm_bt_inner_search(l, n, p->key, p->klen);
	if (!p->key)
		return bt_n(n) - 1;
	/* The last entry whose key is below @key (entry 0 covers from the
	 * node's low fence, which is below it). */
	uint32_t lo = 1, hi = bt_n(n);
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		const uint8_t *e = bt_entry(l, n, mid);
		if (bt_cmp(bt_ekey(e, false), bt_eklen(e), p->key, p->klen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

void farm_bt_init_node(const struct bt_layout *l, uint8_t *n, bool leaf,
                       uint32_t level)
{
	memset(n, 0, farm_bt_node_size(l, leaf));
	uint32_t magic = BT_MAGIC;
	memcpy(n, &magic, 4);
	n[4] = leaf ? 1 : 0;
	n[5] = (uint8_t)level;
	bt_set_u16(n + 8, l->key_max);
	bt_set_u16(n + 10, l->val_max);
	n[14] = BT_LOW_INF | BT_HIGH_INF;
	/* The whole layout is in every node: a read checks it, and opening
	 * a tree learns it from the root. */
	bt_set_u16(n + 12, l->leaf_cap);
	bt_set_u16(n + 26, l->inner_cap);
}

/* Whether the fixed header agrees with the tree's layout. */
static bool header_ok(const struct bt_layout *l, const uint8_t *n)
{
	uint32_t magic;
	memcpy(&magic, n, 4);
	bool leaf = bt_is_leaf(n);
	if (magic != BT_MAGIC || n[4] > 1 || leaf != (bt_level(n) == 0) ||
	    bt_level(n) >= BT_MAX_LEVELS)
		return false;
	if (bt_u16(n + 8) != l->key_max || bt_u16(n + 10) != l->val_max ||
	    bt_u16(n + 12) != l->leaf_cap || bt_u16(n + 26) != l->inner_cap)
		return false;
	if (bt_n(n) > (leaf ? l->leaf_cap : l->inner_cap) ||
	    (!leaf && bt_n(n) == 0) || (n[14] & ~(BT_LOW_INF | BT_HIGH_INF)))
		return false;
	return n[24] <= l->key_max && n[25] <= l->key_max;
}

/* Fences that bound a non-empty interval (low < high); for an internal
 * node, entry 0's key is its low fence (empty at -infinity). */
static bool fences_ok(const struct bt_layout *l, const uint8_t *n)
{
	struct bt_key low, high;
	farm_bt_fence(l, n, false, &low);
	farm_bt_fence(l, n, true, &high);
	if (!low.inf && !high.inf &&
	    bt_cmp(low.b, low.len, high.b, high.len) >= 0)
		return false;
	if (bt_is_leaf(n))
		return true;
	const uint8_t *e = bt_entry(l, n, 0);
	return bt_cmp(bt_ekey(e, false), bt_eklen(e), low.b, low.len) == 0;
}

/* Keys strictly increasing, each within the node's fences; children not
 * null; entry 0 of an internal node carries the node's low fence. Every
 * read runs this, so the fences are compared with the first and last
 * keys only: with the keys strictly increasing, that bounds them all. */
int farm_bt_check_node(const struct bt_layout *l, const uint8_t *n)
{
	return farm_bt_check_prefix(l, n, l->leaf_size);
}

uint32_t farm_bt_prefix_entries(const struct bt_layout *l, const uint8_t *n,
                                uint32_t size)
{
	uint32_t fixed = BT_HDR + 2 * l->key_max;
	uint32_t m =
	        size > fixed ? (size - fixed) / bt_esize(l, bt_is_leaf(n)) : 0;
	return bt_n(n) < m ? bt_n(n) : m;
}

int farm_bt_check_prefix(const struct bt_layout *l, const uint8_t *n,
                         uint32_t size)
{
	if (!header_ok(l, n) || !fences_ok(l, n))
		return FARM_ECORRUPT;
	bool leaf = bt_is_leaf(n);
	const uint8_t *pk = NULL;
	uint32_t plen = 0, m = farm_bt_prefix_entries(l, n, size);
	for (uint32_t i = 0; i < m; i++) {
		const uint8_t *e = bt_entry(l, n, i);
		uint32_t kl = bt_eklen(e);
		const uint8_t *k = bt_ekey(e, leaf);
		if (kl > l->key_max ||
		    (leaf && (kl == 0 || bt_u16(e + 2) > l->val_max)))
			return FARM_ECORRUPT;
		if (!leaf && bt_echild(e) == FARM_GADDR_NULL)
			return FARM_ECORRUPT;
		if (pk && bt_cmp(pk, plen, k, kl) >= 0)
			return FARM_ECORRUPT;
		/* The first key of a leaf against the low fence (an
		 * internal node's entry 0 is its low fence: fences_ok). */
		if (!pk && leaf && !farm_bt_in_fences(l, n, k, kl))
			return FARM_ECORRUPT;
		pk = k;
		plen = kl;
	}
	/* The last key against the high fence (and, for a leaf of one key
	 * or an internal node, again against the low one: harmless). */
	return !pk || farm_bt_in_fences(l, n, pk, plen) ? 0 : FARM_ECORRUPT;
}

uint32_t farm_bt_leaf_search(const struct bt_layout *l, const uint8_t *n,
                             const void *key, uint32_t klen, bool *found)
{
	uint32_t lo = 0, hi = bt_n(n);
	*found = false;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		const uint8_t *e = bt_entry(l, n, mid);
		int c = bt_cmp(bt_ekey(e, true), bt_eklen(e), key, klen);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint32_t farm_bt_inner_search(const struct bt_layout *l, const uint8_t *n,
                              const void *key, uint32_t klen)
{
	/* Entry 0 covers everything below entry 1; search entries 1..n-1 for
	 * the last key <= @key. */
	uint32_t lo = 1, hi = bt_n(n);
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		const uint8_t *e = bt_entry(l, n, mid);
		if (bt_cmp(bt_ekey(e, false), bt_eklen(e), key, klen) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

static void shift(const struct bt_layout *l, uint8_t *n, uint32_t i, int by)
{
	uint32_t es = bt_esize(l, bt_is_leaf(n));
	uint8_t *e = bt_entry(l, n, i);
	memmove(e + (by > 0 ? es : 0), e + (by > 0 ? 0 : es),
	        (size_t)(bt_n(n) - i - (by > 0 ? 0 : 1)) * es);
}

void farm_bt_leaf_set_val(const struct bt_layout *l, uint8_t *e,
                          const void *val, uint32_t vlen)
{
	bt_set_u16(e + 2, vlen);
	memset(e + 4 + l->key_max, 0, l->val_max);
	if (vlen)
		memcpy(e + 4 + l->key_max, val, vlen);
}

void farm_bt_leaf_insert(const struct bt_layout *l, uint8_t *n, uint32_t i,
                         const void *key, uint32_t klen, const void *val,
                         uint32_t vlen)
{
	shift(l, n, i, 1);
	bt_set_n(n, bt_n(n) + 1);
	uint8_t *e = bt_entry(l, n, i);
	memset(e, 0, bt_esize(l, true));
	e[0] = (uint8_t)klen;
	bt_set_u16(e + 2, vlen);
	memcpy(e + 4, key, klen);
	if (vlen)
		memcpy(e + 4 + l->key_max, val, vlen);
}

void farm_bt_remove(const struct bt_layout *l, uint8_t *n, uint32_t i)
{
	shift(l, n, i, -1);
	bt_set_n(n, bt_n(n) - 1);
	memset(bt_entry(l, n, bt_n(n)), 0, bt_esize(l, bt_is_leaf(n)));
}

void farm_bt_inner_insert(const struct bt_layout *l, uint8_t *n, uint32_t i,
                          const struct bt_key *k, farm_gaddr child)
{
	shift(l, n, i, 1);
	bt_set_n(n, bt_n(n) + 1);
	uint8_t *e = bt_entry(l, n, i);
	memset(e, 0, bt_esize(l, false));
	e[0] = (uint8_t)k->len;
	bt_set_u64(e + 8, child);
	memcpy(e + 16, k->b, k->len);
}

/* Application bytes of an object of @lines cache lines. */
static uint32_t line_bytes(uint32_t lines)
{
	return 48u + 62u * (lines - 1);
}

uint32_t farm_bt_node_size(const struct bt_layout *l, bool leaf)
{
	return leaf ? l->leaf_size : l->inner_size;
}

static uint32_t whole_lines(uint32_t bytes)
{
	uint32_t lines = bytes <= 48 ? 1 : 1 + (bytes - 48 + 61) / 62;
	return line_bytes(lines);
}

int farm_bt_layout_check(const struct farm_bt_attr *a)
{
	if (!a)
		return 0;
	if (a->key_max > FARM_BT_MAX_KEY || a->val_max > FARM_BT_MAX_VALUE)
		return -EINVAL;
	if ((a->leaf_cap &&
	     (a->leaf_cap < BT_MIN_CAP || a->leaf_cap > BT_MAX_CAP)) ||
	    (a->inner_cap &&
	     (a->inner_cap < BT_MIN_CAP || a->inner_cap > BT_MAX_CAP)))
		return -EINVAL;
	struct bt_layout l;
	farm_bt_layout_make(&l, a);
	return l.leaf_size > BT_NODE_MAX ? -EINVAL : 0;
}

void farm_bt_layout_make(struct bt_layout *l, const struct farm_bt_attr *a)
{
	struct farm_bt_attr d = a ? *a : (struct farm_bt_attr){0};
	l->key_max = d.key_max ? d.key_max : 16;
	l->val_max = d.val_max ? d.val_max : 32;
	uint32_t fixed = BT_HDR + 2 * l->key_max;
	uint32_t want = 1024;
	l->leaf_cap =
	        d.leaf_cap ? d.leaf_cap : (want - fixed) / bt_esize(l, true);
	l->inner_cap =
	        d.inner_cap ? d.inner_cap : (want - fixed) / bt_esize(l, false);
	if (l->leaf_cap < BT_MIN_CAP)
		l->leaf_cap = BT_MIN_CAP;
	if (l->inner_cap < BT_MIN_CAP)
		l->inner_cap = BT_MIN_CAP;
	if (l->leaf_cap > BT_MAX_CAP)
		l->leaf_cap = BT_MAX_CAP;
	if (l->inner_cap > BT_MAX_CAP)
		l->inner_cap = BT_MAX_CAP;
	/* One size for both kinds: a reader that has not seen a node's
	 * parent (the root) does not know its kind before reading it. */
	uint32_t ls = fixed + l->leaf_cap * bt_esize(l, true);
	uint32_t is = fixed + l->inner_cap * bt_esize(l, false);
	l->leaf_size = l->inner_size = whole_lines(ls > is ? ls : is);
}

/* ---- splits (shared by transactions and bench/'s in-memory tree) ------- */

/* Move entries [@from, n) of @x to the empty node @y. */
static void move_tail(const struct bt_layout *l, uint8_t *x, uint8_t *y,
                      uint32_t from)
{
	uint32_t n = bt_n(x), es = bt_esize(l, bt_is_leaf(x));
	memcpy(bt_entry(l, y, 0), bt_entry(l, x, from),
	       (size_t)(n - from) * es);
	memset(bt_entry(l, x, from), 0, (size_t)(n - from) * es);
	bt_set_n(y, n - from);
	bt_set_n(x, from);
}

void farm_bt_entry_key(const struct bt_layout *l, const uint8_t *n, uint32_t i,
                       struct bt_key *k)
{
	const uint8_t *e = bt_entry(l, n, i);
	k->inf = false;
	k->len = bt_eklen(e);
	memcpy(k->b, bt_ekey(e, bt_is_leaf(n)), k->len);
}

void farm_bt_split_half(const struct bt_layout *l, uint8_t *x, uint8_t *y,
                        farm_gaddr ya, struct bt_key *sep)
{
	struct bt_key high;
	farm_bt_entry_key(l, x, bt_n(x) / 2, sep);
	farm_bt_init_node(l, y, bt_is_leaf(x), bt_level(x));
	move_tail(l, x, y, bt_n(x) / 2);
	farm_bt_fence(l, x, true, &high);
	farm_bt_set_fence(l, y, false, sep);
	farm_bt_set_fence(l, y, true, &high);
	farm_bt_set_fence(l, x, true, sep);
	bt_set_u64(y + 16, bt_next(x));
	bt_set_u64(x + 16, ya);
}

void farm_bt_split_root(const struct bt_layout *l, uint8_t *r, uint8_t *a,
                        farm_gaddr aa, uint8_t *b, farm_gaddr ba)
{
	bool leaf = bt_is_leaf(r);
	uint32_t level = bt_level(r), n = bt_n(r);
	struct bt_key sep;
	farm_bt_entry_key(l, r, n / 2, &sep);
	farm_bt_init_node(l, a, leaf, level);
	farm_bt_init_node(l, b, leaf, level);
	memcpy(bt_entry(l, a, 0), bt_entry(l, r, 0),
	       (size_t)n * bt_esize(l, leaf));
	bt_set_n(a, n);
	move_tail(l, a, b, n / 2);
	farm_bt_set_fence(l, a, true, &sep);
	farm_bt_set_fence(l, b, false, &sep);
	bt_set_u64(a + 16, ba);
	farm_bt_init_node(l, r, false, level + 1);
	struct bt_key lowest = {.len = 0};
	farm_bt_inner_insert(l, r, 0, &lowest, aa);
	farm_bt_inner_insert(l, r, 1, &sep, ba);
}
