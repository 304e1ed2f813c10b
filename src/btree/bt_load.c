/*
 * Bulk load (farm_bt_append): sorted entries above every key in the tree
 * go in along the tree's right edge, bottom-up. The rightmost path (every
 * node on it has a high fence of +inf) is read in the caller's
 * transaction once; entries are appended to its leaf, and a node that
 * reaches its fill gets a new, empty right sibling whose low fence is the
 * next key, linked into its parent (which gets a sibling the same way when
 * it is at its fill; the root, which never moves, splits in place as a
 * put's root split does). So each node is written once per batch rather
 * than a descent and a leaf copy per entry, and the leaves start three
 * quarters full instead of the half that sorted puts leave. Every node
 * touched is read and written in the transaction: it commits or vanishes
 * whole, and validation serializes it with concurrent writers.
 */
#include "btree/bt_int.h"

#include <errno.h>

/* The right edge, indexed by level (0: the leaf, h: the root). @w is
 * the transaction's writable copy, NULL until the node is written. */
struct edge {
	uint32_t h;
	farm_gaddr a[BT_MAX_LEVELS + 1];
	const uint8_t *r[BT_MAX_LEVELS + 1];
	uint8_t *w[BT_MAX_LEVELS + 1];
};

/* Entries a node holds before the load starts a sibling: three quarters,
 * so inserts after a load find room before they split. */
static uint32_t fill(const struct bt_layout *l, uint32_t level)
{
	uint32_t cap = level ? l->inner_cap : l->leaf_cap;
	return cap - cap / 4;
}

static const uint8_t *node(const struct edge *p, uint32_t lv)
{
	return p->w[lv] ? p->w[lv] : p->r[lv];
}

static int writable(farm_tx *tx, struct edge *p, uint32_t lv)
{
	return p->w[lv] ? 0 : farm_tx_write(tx, p->a[lv], (void **)&p->w[lv]);
}

/* Read the right edge in @tx. Nodes that disagree (a level out of step,
 * a high fence below +inf) are a transaction that must run again, or a
 * corrupt tree when lock-free descents say so (farm_bt_confirm). */
static int read_edge(farm_bt *bt, farm_tx *tx, farm_loop *loop, struct edge *p)
{
	const struct bt_layout *l = &bt->lay;
	struct bt_probe last = {.key = NULL, .before = true};
	farm_gaddr a = bt->root;
	const uint8_t *n = NULL;
	int rc = farm_bt_read(bt, tx, loop, a, l->leaf_size, NULL, &n);
	if (rc)
		return rc;
	p->h = bt_level(n);
	if (p->h >= BT_MAX_LEVELS)
		return FARM_ECORRUPT;
	for (uint32_t lv = p->h;; lv--) {
		struct bt_key high;
		farm_bt_fence(l, n, true, &high);
		if (bt_level(n) != lv || !high.inf || (lv && !bt_n(n)))
			return farm_bt_confirm(bt, loop, &last,
			                       FARM_EVALIDATION);
		p->a[lv] = a;
		p->r[lv] = n;
		p->w[lv] = NULL;
		if (!lv)
			return 0;
		a = bt_echild(bt_entry(l, n, bt_n(n) - 1));
		rc = farm_bt_read(bt, tx, loop, a, l->leaf_size, NULL, &n);
		if (rc)
			return rc;
	}
}

/* The root at its fill: split in place (its halves to two new nodes, it
 * one level up over them); the edge continues through the right half. */
static int split_root(farm_bt *bt, farm_tx *tx, struct edge *p)
{
	uint32_t lv = p->h;
	if (lv + 1 >= BT_MAX_LEVELS)
		return -ENOSPC;
	farm_gaddr ba;
	uint8_t *b;
	int rc = writable(tx, p, lv);
	if (!rc)
		rc = farm_bt_root_split(bt, tx, p->w[lv], &ba, &b);
	if (rc)
		return rc;
	p->a[lv + 1] = p->a[lv];
	p->w[lv + 1] = p->w[lv];
	p->r[lv + 1] = p->w[lv];
	p->a[lv] = ba;
	p->w[lv] = b;
	p->r[lv] = b;
	p->h = lv + 1;
	return 0;
}

/*
 * Room at the end of the edge's node at level @lv for an entry whose key
 * is @sep: none needed, or the node closed at @sep (its high fence and
 * next pointer) and a new empty sibling from @sep to +inf taking its
 * place on the edge, linked into its parent (room made there first). A
 * new internal node's first entry is then @sep's, equal to its low fence,
 * as every internal node's must be.
 */
static int make_room(farm_bt *bt, farm_tx *tx, struct edge *p, uint32_t lv,
                     const struct bt_key *sep)
{
	const struct bt_layout *l = &bt->lay;
	if (bt_n(node(p, lv)) < fill(l, lv))
		return 0;
	if (lv == p->h)
		return split_root(bt, tx, p); /* leaves the right half room */
	int rc = make_room(bt, tx, p, lv + 1, sep);
	farm_gaddr ya;
	uint8_t *y;
	if (!rc)
		rc = writable(tx, p, lv);
	if (!rc)
		rc = writable(tx, p, lv + 1);
	if (!rc)
		rc = farm_bt_alloc_node(bt, tx, &ya, &y);
	if (rc)
		return rc;
	farm_bt_init_node(l, y, lv == 0, lv);
	farm_bt_set_fence(l, y, false, sep);
	farm_bt_set_fence(l, p->w[lv], true, sep);
	bt_set_u64(p->w[lv] + 16, ya);
	farm_bt_inner_insert(l, p->w[lv + 1], bt_n(p->w[lv + 1]), sep, ya);
	p->a[lv] = ya;
	p->w[lv] = y;
	p->r[lv] = y;
	BT_COUNT(bt, splits);
	return 0;
}

/* The entries are well-formed and strictly increasing. */
static int check_entries(const farm_bt *bt, const struct farm_bt_entry *e,
                         size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int rc = farm_bt_check_key(bt, e[i].key, e[i].klen);
		if (rc)
			return rc;
		if (e[i].vlen > bt->lay.val_max)
			return -EMSGSIZE;
		if (e[i].vlen && !e[i].val)
			return -EINVAL;
		if (i && bt_cmp(e[i - 1].key, e[i - 1].klen, e[i].key,
		                e[i].klen) >= 0)
			return -EINVAL;
	}
	return 0;
}

/* At most the nodes a batch of @n entries writes along the edge @p: at
 * each level from the leaf up, the edge's node, and a new node each
 * time it reaches its fill (the edge's entries so far count), whose
 * separators go one level up; a root at its fill splits into two new
 * nodes instead. Levels above the last new node are not written. */
static uint64_t batch_nodes(const struct bt_layout *l, const struct edge *p,
                            size_t n)
{
	uint64_t k = n, total = 0;
	for (uint32_t lv = 0; lv <= p->h && k; lv++) {
		uint64_t f = fill(l, lv), e = bt_n(node(p, lv));
		uint64_t room = e < f ? f - e : 0;
		uint64_t add = k > room ? (k - room + f - 1) / f : 0;
		total += 1 + add + (lv == p->h && add ? 2 : 0);
		k = add;
	}
	return total;
}

/* @key is above every key of the rightmost leaf @leaf (and at or above
 * its low fence when it is empty). */
static bool above_all(const struct bt_layout *l, const uint8_t *leaf,
                      const void *key, uint32_t klen)
{
	uint32_t n = bt_n(leaf);
	if (n) {
		const uint8_t *e = bt_entry(l, leaf, n - 1);
		return bt_cmp(bt_ekey(e, true), bt_eklen(e), key, klen) < 0;
	}
	return farm_bt_in_fences(l, leaf, key, klen);
}

int farm_bt_append(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                   const struct farm_bt_entry *e, size_t n)
{
	if (!bt || !tx || !loop || (n && !e))
		return -EINVAL;
	int rc = check_entries(bt, e, n);
	if (rc || !n)
		return rc;
	const struct bt_layout *l = &bt->lay;
	struct edge p;
	rc = read_edge(bt, tx, loop, &p);
	if (rc)
		return rc;
	if (!above_all(l, p.r[0], e[0].key, e[0].klen))
		return -EINVAL; /* nothing written yet */
	/* A batch whose commit would be refused for size is refused here,
	 * before a node is allocated or written. */
	uint64_t nodes = batch_nodes(l, &p, n);
	rc = nodes > UINT32_MAX
	             ? -E2BIG
	             : farm_tx_write_fits(tx, (uint32_t)nodes, l->leaf_size);
	if (rc)
		return rc;
	for (size_t i = 0; i < n && !rc; i++) {
		if (bt_n(node(&p, 0)) >= fill(l, 0)) {
			struct bt_key k = {.len = e[i].klen};
			memcpy(k.b, e[i].key, e[i].klen);
			rc = make_room(bt, tx, &p, 0, &k);
		}
		if (!rc)
			rc = writable(tx, &p, 0);
		if (!rc)
			farm_bt_leaf_insert(l, p.w[0], bt_n(p.w[0]), e[i].key,
			                    e[i].klen, e[i].val, e[i].vlen);
	}
	return rc;
}
