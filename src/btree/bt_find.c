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
#include <stdlib.h>
#include <time.h>

/* Lock-free descents tried before giving up with -EBUSY; each failure
 * means a split happened between two reads of one descent. */
#define LF_TRIES 1000u
/* Fast descents a transaction tries before the root-down one. */
#define TX_FAST_TRIES 2u
/* Lock-free descents tried back to back before backing off. */
#define LF_FREE_TRIES 4u

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

int farm_bt_check_key(const farm_bt *bt, const void *key, uint32_t klen)
{
	if (!bt || !key || !klen)
		return -EINVAL;
	return klen > bt->lay.key_max ? -EMSGSIZE : 0;
}

/* A node read's outcome: an address that names no node is corruption
 * (nodes are never freed while the tree exists), and every node read is
 * checked before anything follows it. */
static int read_outcome(const farm_bt *bt, int rc, const uint8_t *n,
                        uint32_t size)
{
	if (rc)
		return rc == -EINVAL || rc == FARM_EFREED ? FARM_ECORRUPT : rc;
	return farm_bt_check_prefix(&bt->lay, n, size);
}

int farm_bt_read(farm_bt *bt, farm_tx *tx, farm_loop *loop, farm_gaddr a,
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
	return read_outcome(bt, rc, *out, size);
}

static void lf_pending_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct bt_lf_pending *p = ctx;
	p->status = status;
	p->done = 1; /* farm_loop_wait's flag, set on the loop's thread */
}

int farm_bt_lf_start(farm_bt *bt, farm_loop *loop, farm_gaddr a, uint32_t upto,
                     uint8_t *buf, struct bt_lf_pending *p)
{
	const struct bt_layout *l = &bt->lay;
	uint64_t size =
	        BT_HDR + 2ull * l->key_max + (uint64_t)upto * bt_esize(l, true);
	if (size > l->leaf_size)
		size = l->leaf_size;
	/* Its finish waits on the loop: refused where it could not, before
	 * the READ into @buf is posted. */
	if (!farm_loop_can_wait(loop))
		return loop ? -EDEADLK : -EINVAL;
	*p = (struct bt_lf_pending){
	        .buf = buf, .busy = true, .size = (uint32_t)size};
	int rc = farm_lf_read(bt->txm, loop, a, (uint32_t)size, UINT64_MAX, buf,
	                      lf_pending_done, p);
	if (rc)
		p->busy = false;
	return rc;
}

int farm_bt_lf_finish(farm_bt *bt, farm_loop *loop, struct bt_lf_pending *p,
                      const uint8_t **out)
{
	if (!p->busy)
		return -EINVAL;
	int rc = farm_loop_wait(loop, &p->done, 0);
	if (rc)
		return rc; /* still in flight: the caller must not wait here */
	p->busy = false;
	*out = p->buf;
	return read_outcome(bt, p->status, p->buf, p->size);
}

struct path {
	farm_gaddr a[BT_MAX_LEVELS + 1];
	uint32_t n;
};

/* A fence miss between a parent and its child both read afresh (not
 * from the cache) by one descent: the addresses and the child's fences. */
struct miss {
	bool set;
	farm_gaddr parent, child;
	struct bt_key low, high;
};

static void note_miss(const struct bt_layout *l, struct miss *m,
                      farm_gaddr parent, farm_gaddr child, const uint8_t *n)
{
	m->set = true;
	m->parent = parent;
	m->child = child;
	farm_bt_fence(l, n, false, &m->low);
	farm_bt_fence(l, n, true, &m->high);
}

static bool same_key(const struct bt_key *a, const struct bt_key *b)
{
	return a->inf == b->inf && a->len == b->len &&
	       !memcmp(a->b, b->b, a->len);
}

/* Whether two misses in a row prove the committed tree wrong. The child
 * of the first was read before the parent of the second; a node's fences
 * only narrow (splits), and a split writes the parent and the child in
 * one transaction. So a parent that, read later, still sends the probe to
 * a child whose fences have not changed and do not hold it is committed
 * state that disagrees with itself: corruption, not a race. */
static bool same_miss(const struct miss *a, const struct miss *b)
{
	return a->set && b->set && a->parent == b->parent &&
	       a->child == b->child && same_key(&a->low, &b->low) &&
	       same_key(&a->high, &b->high);
}

static void drop_path(farm_bt *bt, const struct path *p)
{
	for (uint32_t i = 0; i < p->n; i++)
		farm_bt_cache_drop(bt, p->a[i]);
}

/*
 * One fast descent. 0 with the leaf in *@f; -EAGAIN when a fence check
 * failed (the path is dropped from the cache); -ESTALE when only the
 * transaction's own reads can find the leaf; an error.
 */
static int fast_descent(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                        const struct bt_probe *pr, uint8_t *buf,
                        struct bt_found *f, struct miss *ms)
{
	struct path p = {.n = 0};
	farm_gaddr a = bt->root, fresh_parent = FARM_GADDR_NULL;
	bool leaf_next = false;
	ms->set = false;
	uint32_t size = bt->lay.leaf_size;
	for (uint32_t depth = 0; depth <= BT_MAX_LEVELS; depth++) {
		bool ln = false;
		farm_gaddr c = leaf_next ? FARM_GADDR_NULL
		                         : farm_bt_cache_child(bt, a, pr, &ln);
		if (c) {
			p.a[p.n++] = a;
			a = c;
			leaf_next = ln;
			fresh_parent = FARM_GADDR_NULL;
			continue;
		}
		const uint8_t *n = NULL;
		/* A node not known to be a leaf is read lock-free, so that
		 * what is cached is committed state. */
		int rc = farm_bt_read(bt, leaf_next ? tx : NULL, loop, a, size,
		                      buf, &n);
		if (rc)
			return rc;
		if (bt_is_leaf(n) && tx && !leaf_next) {
			BT_COUNT(bt, leaf_reads);
			rc = farm_bt_read(bt, tx, loop, a, size, buf, &n);
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
			if (!farm_bt_probe_holds(&bt->lay, n, pr) &&
			    (tx || !no_fence_check())) {
				BT_COUNT(bt, fence_misses);
				/* A transaction's leaf may be its older copy.
				 */
				if (fresh_parent && !tx)
					note_miss(&bt->lay, ms, fresh_parent, a,
					          n);
				drop_path(bt, &p);
				return -EAGAIN;
			}
			f->a = a;
			f->leaf = n;
			return 0;
		}
		BT_COUNT(bt, inner_reads);
		if (!farm_bt_probe_holds(&bt->lay, n, pr)) {
			BT_COUNT(bt, fence_misses);
			if (fresh_parent)
				note_miss(&bt->lay, ms, fresh_parent, a, n);
			drop_path(bt, &p);
			return -EAGAIN;
		}
		farm_bt_cache_put(bt, a, n);
		fresh_parent = a;
		p.a[p.n++] = a;
		leaf_next = bt_level(n) == 1;
		a = bt_echild(bt_entry(&bt->lay, n,
		                       farm_bt_probe_child(&bt->lay, n, pr)));
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
		int rc = farm_bt_read(bt, tx, loop, a, bt->lay.leaf_size, NULL,
		                      &n);
		if (rc)
			return rc;
		/* Reads of a transaction are not one snapshot until it
		 * commits: nodes that disagree mean it must run again. */
		if (!farm_bt_probe_holds(&bt->lay, n, pr))
			return FARM_EVALIDATION;
		if (bt_is_leaf(n)) {
			BT_COUNT(bt, leaf_reads);
			f->a = a;
			f->leaf = n;
			return 0;
		}
		BT_COUNT(bt, inner_reads);
		a = bt_echild(bt_entry(&bt->lay, n,
		                       farm_bt_probe_child(&bt->lay, n, pr)));
	}
	return FARM_ECORRUPT;
}

/* Pause before lock-free descent @i (0-based): none for the first few
 * (a split raced one descent), then doubling up to 1 ms, so that 1,000
 * tries span splits that take a while rather than a few microseconds. */
static void backoff(uint32_t i)
{
	if (i < LF_FREE_TRIES)
		return;
	uint32_t sh = i - LF_FREE_TRIES;
	long ns = sh >= 10 ? 1000000L : 1000L << sh;
	struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
	nanosleep(&ts, NULL);
}

/* Lock-free descents: -EAGAIN again and again is a race that lasts, but
 * the same parent and unchanged child disagreeing twice is corruption. */
static int lf_locate(farm_bt *bt, farm_loop *loop, const struct bt_probe *p,
                     uint8_t *buf, struct bt_found *f)
{
	struct miss prev = {.set = false}, cur;
	for (uint32_t i = 0; i < LF_TRIES; i++) {
		backoff(i);
		int rc = fast_descent(bt, NULL, loop, p, buf, f, &cur);
		if (rc != -EAGAIN)
			return rc;
		if (same_miss(&prev, &cur))
			return FARM_ECORRUPT;
		prev = cur;
	}
	return -EBUSY;
}

int farm_bt_locate_probe(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                         const struct bt_probe *p, uint8_t *buf,
                         struct bt_found *f)
{
	BT_COUNT(bt, lookups);
	if (!tx)
		return lf_locate(bt, loop, p, buf, f);
	struct miss ms;
	for (uint32_t i = 0; i < TX_FAST_TRIES; i++) {
		int rc = fast_descent(bt, tx, loop, p, buf, f, &ms);
		if (rc == -ESTALE)
			break;
		if (rc != -EAGAIN)
			return rc;
	}
	int rc = tx_descent(bt, tx, loop, p, f);
	return rc == FARM_EVALIDATION ? farm_bt_confirm(bt, loop, p, rc) : rc;
}

int farm_bt_confirm(farm_bt *bt, farm_loop *loop, const struct bt_probe *p,
                    int rc)
{
	uint8_t *buf = malloc(bt->lay.leaf_size);
	if (!buf)
		return rc;
	struct bt_found f;
	int lf = lf_locate(bt, loop, p, buf, &f);
	free(buf);
	return lf == FARM_ECORRUPT ? FARM_ECORRUPT : rc;
}

int farm_bt_locate(farm_bt *bt, farm_tx *tx, farm_loop *loop, const void *key,
                   uint32_t klen, uint8_t *buf, struct bt_found *f)
{
	struct bt_probe p = {.key = key, .klen = klen};
	return farm_bt_locate_probe(bt, tx, loop, &p, buf, f);
}
