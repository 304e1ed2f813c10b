/*
 * Writes that need room: a descent from the root in the writing
 * transaction that splits every full node on the way down (so a split's
 * parent always has room for the new separator), and the root split,
 * which keeps the root at its address (the name points at it for good)
 * by moving its entries into two new children. Every node it touches is
 * read and written in the caller's transaction, so a split commits or
 * vanishes with the write that needed it and recovery has nothing to do.
 */
#include "btree/bt_int.h"

#include <errno.h>

/* A new node on this machine (the one that splits). Not near its
 * parent: a hint on another machine ships the allocation there, and the
 * transaction cannot take an object it did not allocate locally
 * (-EREMOTE); a hint in a region recovery just promoted fails the same
 * way. */
int farm_bt_alloc_node(farm_bt *bt, farm_tx *tx, farm_gaddr *a, uint8_t **d)
{
	farm_fatptr fp;
	void *data = NULL;
	int rc = farm_tx_alloc_sync(tx, bt->lay.leaf_size, FARM_GADDR_NULL, &fp,
	                            &data);
	if (rc)
		return rc;
	*a = fp.addr;
	*d = data;
	return 0;
}

#ifdef FARM_FAULT_INJECTION
_Atomic int farm_bt_fault_orphan;
#endif

/* Test builds: the broken split's extra node, a well-formed empty leaf
 * that nothing points to. */
static int leak_node(farm_bt *bt, farm_tx *tx)
{
#ifdef FARM_FAULT_INJECTION
	if (atomic_load_explicit(&farm_bt_fault_orphan, memory_order_relaxed)) {
		farm_gaddr a;
		uint8_t *d;
		int rc = farm_bt_alloc_node(bt, tx, &a, &d);
		if (!rc)
			farm_bt_init_node(&bt->lay, d, true, 0);
		return rc;
	}
#endif
	(void)bt, (void)tx;
	return 0;
}

/* Split @x (at @xa, writable) under its writable parent @p: the upper
 * half goes to a new right sibling, whose address and low fence (the
 * separator) the parent takes. */
static int split_node(farm_bt *bt, farm_tx *tx, farm_gaddr xa, uint8_t *x,
                      uint8_t *p)
{
	const struct bt_layout *l = &bt->lay;
	struct bt_key sep;
	farm_bt_entry_key(l, x, bt_n(x) / 2, &sep);
	uint32_t pi = farm_bt_inner_search(l, p, sep.b, sep.len);
	if (bt_echild(bt_entry(l, p, pi)) != xa)
		return FARM_EVALIDATION; /* reads that disagree: run again */
	farm_gaddr ya;
	uint8_t *y;
	int rc = farm_bt_alloc_node(bt, tx, &ya, &y);
	if (!rc)
		rc = leak_node(bt, tx);
	if (rc)
		return rc;
	farm_bt_split_half(l, x, y, ya, &sep);
	farm_bt_inner_insert(l, p, pi + 1, &sep, ya);
	BT_COUNT(bt, splits);
	return 0;
}

int farm_bt_root_split(farm_bt *bt, farm_tx *tx, uint8_t *r, farm_gaddr *ba,
                       uint8_t **b)
{
	if (bt_level(r) + 1 >= BT_MAX_LEVELS)
		return -ENOSPC;
	farm_gaddr la, ra;
	uint8_t *ld, *rd;
	int rc = farm_bt_alloc_node(bt, tx, &la, &ld);
	if (!rc)
		rc = farm_bt_alloc_node(bt, tx, &ra, &rd);
	if (rc)
		return rc;
	farm_bt_split_root(&bt->lay, r, ld, la, rd, ra);
	BT_COUNT(bt, splits);
	BT_COUNT(bt, root_splits);
	*ba = ra;
	*b = rd;
	return 0;
}

/* A node of @tx's, read (a transaction's copy) and checked. */
static int read_node(const farm_bt *bt, farm_tx *tx, farm_gaddr a,
                     const uint8_t **n)
{
	const void *d = NULL;
	int rc = farm_tx_read_sync(tx, a, bt->lay.leaf_size, &d);
	if (rc)
		return rc == -EINVAL || rc == FARM_EFREED ? FARM_ECORRUPT : rc;
	*n = d;
	return farm_bt_check_node(&bt->lay, d);
}

/* Split the full node @a (read by @tx) under @pa, or the root. Returns
 * the node that now holds @key in *@a. */
static int split_on_path(farm_bt *bt, farm_tx *tx, farm_gaddr *a, farm_gaddr pa,
                         const void *key, uint32_t klen)
{
	uint8_t *w, *p;
	int rc = farm_tx_write(tx, *a, (void **)&w);
	if (rc)
		return rc;
	if (*a == bt->root) {
		farm_gaddr ra;
		uint8_t *rd;
		/* Then the root is read again. */
		return farm_bt_root_split(bt, tx, w, &ra, &rd);
	}
	rc = farm_tx_write(tx, pa, (void **)&p);
	if (!rc)
		rc = split_node(bt, tx, *a, w, p);
	if (!rc && !farm_bt_in_fences(&bt->lay, w, key, klen))
		*a = bt_next(w); /* the new right half */
	return rc;
}

int farm_bt_writable_leaf(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                          const void *key, uint32_t klen, bool need_room,
                          farm_gaddr *out_a, uint8_t **out)
{
	const struct bt_layout *l = &bt->lay;
	BT_COUNT(bt, slow_paths);
	farm_gaddr a = bt->root, pa = FARM_GADDR_NULL;
	for (uint32_t depth = 0; depth <= 2 * BT_MAX_LEVELS; depth++) {
		const uint8_t *n;
		int rc = read_node(bt, tx, a, &n);
		if (rc)
			return rc;
		/* Reads of a transaction are one snapshot only once it
		 * commits: nodes that disagree mean it must run again. */
		if (!farm_bt_in_fences(l, n, key, klen)) {
			struct bt_probe pr = {.key = key, .klen = klen};
			return farm_bt_confirm(bt, loop, &pr, FARM_EVALIDATION);
		}
		uint32_t cap = bt_is_leaf(n) ? l->leaf_cap : l->inner_cap;
		if (need_room && bt_n(n) == cap) {
			rc = split_on_path(bt, tx, &a, pa, key, klen);
			if (rc)
				return rc;
			continue;
		}
		if (bt_is_leaf(n)) {
			*out_a = a;
			return farm_tx_write(tx, a, (void **)out);
		}
		pa = a;
		a = bt_echild(
		        bt_entry(l, n, farm_bt_inner_search(l, n, key, klen)));
	}
	return FARM_ECORRUPT;
}
