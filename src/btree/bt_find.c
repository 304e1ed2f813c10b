/*
 * Finding the leaf of a key. The fast path descends through the
 * machine's cache of internal nodes (reading lock-free, and caching, the
 * ones it lacks) and reads the leaf: lock-free outside a transaction, in
 * the transaction otherwise (only the leaf joins its read set). The leaf's
 * fence keys must hold the key; when they do not, the cached path was
 * stale: its nodes are dropped and the descent runs again, reading them
 * afresh. In a transaction a descent that still fails (the transaction's
 * own splits are in no cache) goes from the root through transactional
 * reads, which see the transaction's writes.
 */
#include "btree/bt_int.h"

#include <errno.h>

/* Lock-free descents tried before giving up with -EBUSY; each failure
 * means a split happened between two reads of one descent. */
#define LF_TRIES 1000u
/* Fast descents a transaction tries before the root-down one. */
#define TX_FAST_TRIES 2u

#ifdef FARM_FAULT_INJECTION
_Atomic int farm_bt_fault_no_fence, farm_bt_fault_scan_lf;
#endif

static bool no_fence_check(void)
{
#ifdef FARM_FAULT_INJECTION
	return atomic_load_explicit(&farm_bt_fault_no_fence,
	                            memory_order_relaxed) != 0;
#else
	return false;
#endif
}

int bt_check_key(const farm_bt *bt, const void *key, uint32_t klen)
{
	if (!bt || !key || !klen)
		return -EINVAL;
	return klen > bt->lay.key_max ? -EMSGSIZE : 0;
}

int bt_read(farm_bt *bt, farm_tx *tx, farm_loop *loop, farm_gaddr a,
            uint32_t size, uint8_t *buf, const uint8_t **out)
{
	int rc;
	if (tx) {
		const void *d = NULL;
		rc = farm_tx_read_sync(tx, a, size, &d);
		*out = d;
	} else {
		rc = farm_lf_read_sync(bt->txm, loop, a, size, UINT64_MAX, buf);
		*out = buf;
	}
	if (rc)
		return rc == -EINVAL || rc == FARM_EFREED ? FARM_ECORRUPT : rc;
	return bt_check_node(&bt->lay, *out);
}

struct path {
	farm_gaddr a[BT_MAX_LEVELS + 1];
	uint32_t n;
};

static void drop_path(farm_bt *bt, const struct path *p)
{
	for (uint32_t i = 0; i < p->n; i++)
		bt_cache_drop(bt, p->a[i]);
}

/*
 * One fast descent. 0 with the leaf in *@f; -EAGAIN when a fence check
 * failed (the path is dropped from the cache); -ESTALE when only the
 * transaction's own reads can find the leaf; an error.
 */
static int fast_descent(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                        const struct bt_probe *pr, uint8_t *buf,
                        struct bt_found *f)
{
	struct path p = {.n = 0};
	farm_gaddr a = bt->root;
	bool leaf_next = false;
	uint32_t size = bt->lay.leaf_size;
	for (uint32_t depth = 0; depth <= BT_MAX_LEVELS; depth++) {
		bool ln = false;
		farm_gaddr c = leaf_next ? FARM_GADDR_NULL
		                         : bt_cache_child(bt, a, pr, &ln);
		if (c) {
			p.a[p.n++] = a;
			a = c;
			leaf_next = ln;
			continue;
		}
		const uint8_t *n = NULL;
		/* A node not known to be a leaf is read lock-free, so that
		 * what is cached is committed state. */
		int rc = bt_read(bt, leaf_next ? tx : NULL, loop, a, size, buf,
		                 &n);
		if (rc)
			return rc;
		if (bt_is_leaf(n) && tx && !leaf_next) {
			BT_COUNT(bt, leaf_reads);
			rc = bt_read(bt, tx, loop, a, size, buf, &n);
			if (rc)
				return rc;
			/* The transaction split the root itself: its nodes
			 * are in no cache and cannot be read lock-free. */
			if (!bt_is_leaf(n))
				return -ESTALE;
		}
		if (leaf_next && !bt_is_leaf(n))
			return FARM_ECORRUPT; /* levels never change */
		if (bt_is_leaf(n)) {
			BT_COUNT(bt, leaf_reads);
			if (!bt_probe_holds(&bt->lay, n, pr) &&
			    (tx || !no_fence_check())) {
				BT_COUNT(bt, fence_misses);
				drop_path(bt, &p);
				return -EAGAIN;
			}
			f->a = a;
			f->leaf = n;
			return 0;
		}
		BT_COUNT(bt, inner_reads);
		if (!bt_probe_holds(&bt->lay, n, pr)) {
			BT_COUNT(bt, fence_misses);
			drop_path(bt, &p);
			return -EAGAIN;
		}
		bt_cache_put(bt, a, n);
		p.a[p.n++] = a;
		leaf_next = bt_level(n) == 1;
		a = bt_echild(
		        bt_entry(&bt->lay, n, bt_probe_child(&bt->lay, n, pr)));
	}
	return FARM_ECORRUPT; /* deeper than any tree */
}

/* The root-down descent of a transaction: every node read in @tx. */
static int tx_descent(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                      const struct bt_probe *pr, struct bt_found *f)
{
	BT_COUNT(bt, slow_paths);
	farm_gaddr a = bt->root;
	for (uint32_t depth = 0; depth <= BT_MAX_LEVELS; depth++) {
		const uint8_t *n = NULL;
		int rc = bt_read(bt, tx, loop, a, bt->lay.leaf_size, NULL, &n);
		if (rc)
			return rc;
		/* Reads of a transaction are not one snapshot until it
		 * commits: nodes that disagree mean it must run again. */
		if (!bt_probe_holds(&bt->lay, n, pr))
			return FARM_EVALIDATION;
		if (bt_is_leaf(n)) {
			BT_COUNT(bt, leaf_reads);
			f->a = a;
			f->leaf = n;
			return 0;
		}
		BT_COUNT(bt, inner_reads);
		a = bt_echild(
		        bt_entry(&bt->lay, n, bt_probe_child(&bt->lay, n, pr)));
	}
	return FARM_ECORRUPT;
}

int bt_locate_probe(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                    const struct bt_probe *p, uint8_t *buf, struct bt_found *f)
{
	BT_COUNT(bt, lookups);
	uint32_t tries = tx ? TX_FAST_TRIES : LF_TRIES;
	for (uint32_t i = 0; i < tries; i++) {
		int rc = fast_descent(bt, tx, loop, p, buf, f);
		if (rc == -ESTALE)
			break;
		if (rc != -EAGAIN)
			return rc;
	}
	return tx ? tx_descent(bt, tx, loop, p, f) : -EBUSY;
}

int bt_locate(farm_bt *bt, farm_tx *tx, farm_loop *loop, const void *key,
              uint32_t klen, uint8_t *buf, struct bt_found *f)
{
	struct bt_probe p = {.key = key, .klen = klen};
	return bt_locate_probe(bt, tx, loop, &p, buf, f);
}
