/*
 * libfarm's ordered index: a B+-tree over the cluster's memory, after
 * FaRM's (SOSP'15 section 6.2): every node is one libfarm object with
 * fence keys (its low and high key), internal nodes are cached on every
 * machine, and a lookup with a warm cache is one lock-free READ of a leaf.
 * Splits are transactions, so recovery needs nothing of its own.
 *
 *   farm_bt_create_sync()  make a tree and name it in the KV store's
 *                          named-object directory (one machine)
 *   farm_bt_open_sync()    find a tree by name (every other machine)
 *   farm_bt_get/put/delete/scan  inside a transaction (@tx), or, with
 *                          @tx NULL, lock-free (get, scan) or in a
 *                          transaction of their own (put, delete)
 *   farm_bt_close()        free the handle and its cache (the tree stays)
 *
 * Keys are byte strings of 1..key_max bytes (at most FARM_BT_MAX_KEY),
 * ordered as memcmp orders them (a prefix before its extensions); use
 * farm_bt_key_u64() for integer keys. Values are 0..val_max bytes (at most
 * FARM_BT_MAX_VALUE), kept inline in the leaves.
 *
 * Every call drives @loop (its thread; with @tx, the loop @tx was begun
 * on) until it is done, as the *_sync wrappers of include/farm/txn.h do:
 * not from handlers or continuations.
 * A handle may be used from several loops of its machine (its cache is
 * shared and locked).
 *
 * Errors are negative codes: -EINVAL (NULL or empty key, bad arguments),
 * -EMSGSIZE (key longer than key_max, value longer than val_max),
 * -ENOENT (absent), FARM_ECORRUPT (a node read is malformed, or nodes
 * disagree with their parents: nothing is written), -EBUSY (a lock-free
 * call kept meeting splits for 1,000 descents), -ENOSPC (a split would
 * make the tree deeper than 24 levels), -ENOMEM, the transaction layer's
 * errors. Inside a transaction an error
 * for which farm_tx_retryable() is true means the transaction saw the
 * tree change under it: abort it and run it again.
 */
#ifndef FARM_BTREE_H
#define FARM_BTREE_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/error.h>
#include <farm/kv.h>
#include <farm/txn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest key and value any tree takes. */
#define FARM_BT_MAX_KEY   64u
#define FARM_BT_MAX_VALUE 1024u
/* The longest tree name (as the KV directory's names, less a prefix). */
#define FARM_BT_MAX_NAME 200u

typedef struct farm_bt farm_bt;

/*
 * Layout of a tree, fixed at creation. 0 fields take defaults: key_max 16,
 * val_max 32, leaf_cap and inner_cap so that a node is about 1 KiB.
 * leaf_cap and inner_cap are entries per node, 4..512; a node's size is
 * rounded up to whole cache lines (the space is not used) and must be at
 * most 64 KiB (-EINVAL otherwise: a split writes three nodes in one
 * transaction, which must fit in the commit log), e.g. at most 56 entries
 * of a 64-byte key and a 1,024-byte value.
 */
struct farm_bt_attr {
	uint32_t key_max;   /* 1..FARM_BT_MAX_KEY */
	uint32_t val_max;   /* 1..FARM_BT_MAX_VALUE (values may be shorter) */
	uint32_t leaf_cap;  /* entries per leaf */
	uint32_t inner_cap; /* children per internal node */
};

/* A big-endian copy of @x: integer keys that sort as numbers. */
static inline void farm_bt_key_u64(uint64_t x, uint8_t out[8])
{
	for (int i = 7; i >= 0; i--, x >>= 8)
		out[i] = (uint8_t)x;
}

/*
 * farm_bt_create_sync() - make an empty tree (its root, one leaf, in a
 * transaction) and name it @name in @kv's directory. Returns 0 and a
 * handle; -EEXIST (the name is taken); -EINVAL (bad attributes, NULL,
 * empty name); -EMSGSIZE (name over FARM_BT_MAX_NAME); the KV store's or
 * the transaction layer's error. Two machines creating the same name at
 * once may both succeed, the later naming wins: create on one machine.
 */
FARM_API FARM_MUST_CHECK int
farm_bt_create_sync(farm_kv *kv, farm_txm *m, farm_loop *loop, const char *name,
                    const struct farm_bt_attr *attr, farm_bt **out);
/* farm_bt_open_sync() - the tree named @name. 0; -ENOENT (no such name);
 * FARM_ECORRUPT (the name does not lead to a tree's root); errors as
 * create's. */
FARM_API FARM_MUST_CHECK int farm_bt_open_sync(farm_kv *kv, farm_txm *m,
                                               farm_loop *loop,
                                               const char *name, farm_bt **out);
/* Free the handle and its cache. NULL is fine. */
FARM_API void farm_bt_close(farm_bt *bt);
/* The tree's layout (after defaults); with @bt NULL, all zero. @out NULL
 * is ignored. */
FARM_API void farm_bt_attr_get(const farm_bt *bt, struct farm_bt_attr *out);

/*
 * farm_bt_get() - the value of @key: 0 and *@vlen bytes into @val;
 * -EMSGSIZE when it is longer than @cap (*@vlen says how long); -ENOENT.
 * With @tx the leaf joins the read set (the answer, absent included, is
 * validated at commit); without, one lock-free READ of the leaf with a
 * warm cache, linearizable.
 */
FARM_API FARM_MUST_CHECK int farm_bt_get(farm_bt *bt, farm_tx *tx,
                                         farm_loop *loop, const void *key,
                                         uint32_t klen, void *val, uint32_t cap,
                                         uint32_t *vlen);
/* farm_bt_put() - insert or replace. Without @tx it commits a transaction
 * of its own (farm_tx_run: retried while retryable, with backoff, at
 * most FARM_TX_RUN_TRIES times). */
FARM_API FARM_MUST_CHECK int farm_bt_put(farm_bt *bt, farm_tx *tx,
                                         farm_loop *loop, const void *key,
                                         uint32_t klen, const void *val,
                                         uint32_t vlen);
/* farm_bt_delete() - 0, or -ENOENT when absent (then nothing is written;
 * with @tx the absence is validated at commit). */
FARM_API FARM_MUST_CHECK int farm_bt_delete(farm_bt *bt, farm_tx *tx,
                                            farm_loop *loop, const void *key,
                                            uint32_t klen);

/*
 * A range: keys from @start (inclusive; NULL: the first key) up to @end
 * (exclusive; NULL: no end), at most @limit entries (0: no limit), in
 * ascending order, or with @reverse descending (from the last key below
 * @end down to @start: "the latest before").
 */
struct farm_bt_range {
	const void *start;
	uint32_t start_len;
	const void *end;
	uint32_t end_len;
	uint32_t limit;
	bool reverse;
};
/* Each entry in key order; the bytes are valid during the call only.
 * Return false to stop. */
typedef bool (*farm_bt_scan_fn)(void *ctx, const void *key, uint32_t klen,
                                const void *val, uint32_t vlen);
/*
 * farm_bt_scan() - visit the entries of @r in key order (descending with
 * @r->reverse: each leaf before the first is found by a descent through
 * the cache, one READ when warm). Returns
 * the number visited, or an error. With @tx every leaf the scan read is
 * in the read set, so the scan is serializable, phantoms included (a key
 * inserted into the range scanned changes one of those leaves). Without,
 * each leaf is one lock-free READ: every entry visited was present when
 * its leaf was read and every key present throughout the scan is
 * visited, but the scan as a whole is not one snapshot.
 *
 * @fn may write to the tree (in @tx or not): each leaf is visited as it
 * was when the scan read it, so writes to the entries of the leaf being
 * visited never shift the scan; in @tx, keys it writes to the part of
 * the range not yet reached are seen when the scan reaches them.
 * Entries passed to @fn before an error stand (the scan does not undo
 * them); with @tx, a retryable error means run the transaction again.
 */
FARM_API FARM_MUST_CHECK long farm_bt_scan(farm_bt *bt, farm_tx *tx,
                                           farm_loop *loop,
                                           const struct farm_bt_range *r,
                                           farm_bt_scan_fn fn, void *ctx);

/* One entry of farm_bt_append(). */
struct farm_bt_entry {
	const void *key;
	uint32_t klen;
	const void *val;
	uint32_t vlen;
};
/*
 * farm_bt_append() - bulk load: add the @n entries of @e, whose keys must
 * be strictly increasing, above the tree's last key and at or above its
 * rightmost leaf's low fence (after deletes emptied that leaf, a key
 * between the two is -EINVAL: insert it with farm_bt_put), in @tx (the
 * caller commits). A commit's records must fit half a log, 128 KiB by
 * default, and leaves have a fixed size whatever the entries' lengths: a
 * batch costs about n / (3/4 of a leaf's capacity) leaves of the
 * layout's leaf size (with 8-byte keys and values, 2,048 entries write
 * about 60 KiB; with the default 16/32-byte layout about 150 KiB, too
 * much). A batch that could need more is refused with -E2BIG before
 * anything is allocated or written (farm_tx_write_fits, counting the
 * transaction's other writes and, at worst, every node the batch may
 * write): append fewer at once. The
 * entries fill the tree's rightmost leaf and new leaves to begin with
 * three quarters of their capacity (room for inserts before they split),
 * and internal nodes likewise, bottom-up along the right edge: a few
 * nodes written per 30-odd entries instead of a descent and a leaf write
 * per entry. An ordinary transaction, so recovery needs nothing of its
 * own and concurrent writers are serialized as with farm_bt_put().
 * Returns 0; -EINVAL (NULL, an empty key, keys out of order or not above
 * the tree's last key: nothing is written); -EMSGSIZE (a key or value
 * over the layout's limits: nothing is written); -E2BIG (the batch may
 * not fit a commit: nothing is written); -ENOSPC; FARM_ECORRUPT
 * (a node on the right edge failed its checks); the
 * transaction layer's errors (abort @tx on any error).
 */
FARM_API FARM_MUST_CHECK int farm_bt_append(farm_bt *bt, farm_tx *tx,
                                            farm_loop *loop,
                                            const struct farm_bt_entry *e,
                                            size_t n);

/* ---- counters ------------------------------------------------------------
 */

typedef struct farm_bt_stats {
	uint64_t lookups;      /* leaves located (gets, puts, deletes, scans'
	                          first leaf) */
	uint64_t leaf_reads;   /* READs of leaves (lock-free or in a tx) */
	uint64_t inner_reads;  /* READs of internal nodes (cache misses) */
	uint64_t cache_hits;   /* internal nodes found in the cache */
	uint64_t fence_misses; /* leaves or cached nodes whose fences did not
	                          hold the key: the cache was stale */
	uint64_t slow_paths;   /* descents from the root in a transaction
	                          (splits, stale caches in a transaction) */
	uint64_t splits, root_splits;
	uint64_t scan_leaves; /* leaves read by scans after their first */
} farm_bt_stats;

/* This handle's counters (approximate while loops run); with @bt NULL,
 * all zero. @out NULL is ignored. */
/* @size: sizeof(*@out) as the caller was compiled, which the inline
 * farm_bt_stats_get passes. The struct only grows at its end: the
 * library fills the fields both know and zeroes any it does not. */
FARM_API void farm_bt_stats_read(const farm_bt *bt, farm_bt_stats *out,
                                 size_t size);
static inline void farm_bt_stats_get(const farm_bt *bt, farm_bt_stats *out)
{
	farm_bt_stats_read(bt, out, sizeof(*out));
}

#ifdef __cplusplus
}
#endif
#endif /* FARM_BTREE_H */
