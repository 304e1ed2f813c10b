/*
 * The B-tree's internals, shared by the files of src/btree: the node
 * layout, the handle, the internal-node cache and the descent helpers.
 */
#ifndef FARM_BT_INT_H
#define FARM_BT_INT_H

#include <farm/btree.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/*
 * Node layout (application bytes of one object; all fields host order):
 *
 *   0  u32 magic            BT_MAGIC
 *   4  u8  leaf, u8 level   leaf 1 with level 0; internal 0 with level >= 1
 *   6  u16 n                entries in use
 *   8  u16 key_max, val_max, leaf_cap   the tree's layout (with
 *                           inner_cap below), checked at each read
 *  14  u8  flags            BT_LOW_INF, BT_HIGH_INF (fences at infinity)
 *  15  u8  pad
 *  16  u64 next             right sibling at the same level (0: none)
 *  24  u8  lowlen, highlen, u16 inner_cap, then 4 bytes pad
 *  32  low fence [key_max], high fence [key_max]
 *  32 + 2 key_max: n entries
 *      leaf:     u8 klen, u8 pad, u16 vlen, key [key_max], value [val_max]
 *      internal: u8 klen, 7 pad, u64 child, key [key_max]
 *
 * A node holds the keys k with low <= k < high. Internal entry i covers
 * [key_i, key_i+1) (the last one up to the node's high fence) and its key
 * is its child's low fence; entry 0's key is the node's own low fence.
 */
#define BT_MAGIC      0x4e544246u /* "FBTN" */
#define BT_LOW_INF    1u
#define BT_HIGH_INF   2u
#define BT_HDR        32u
#define BT_MAX_LEVELS 24u
/* Entries of the whole tree, at most: caps are in [BT_MIN_CAP, BT_MAX_CAP]. */
#define BT_MIN_CAP 4u
#define BT_MAX_CAP 512u
/* The largest node: a split writes three nodes (the node, its new
 * sibling, the parent; a root split the root and two children) in one
 * transaction, and a transaction's writes must fit in half a log, or its
 * commit fails with -E2BIG. 64 KiB keeps the three far below that. */
#define BT_NODE_MAX (64u * 1024u)

/* Lock-free reads of nodes up to this size go to a buffer on the
 * caller's stack (the default layout's nodes are about 1 KiB): a lookup
 * then allocates nothing. */
#define BT_STACK_NODE 2048u

/* A key (or fence) by value: up to FARM_BT_MAX_KEY bytes. */
struct bt_key {
	uint32_t len;
	bool inf; /* a fence at infinity (low: -inf, high: +inf) */
	uint8_t b[FARM_BT_MAX_KEY];
};

struct bt_layout {
	uint32_t key_max, val_max, leaf_cap, inner_cap;
	uint32_t leaf_size, inner_size; /* object sizes (whole lines) */
};

/* The internal-node cache: open addressing on the node's address, each
 * slot holding a copy of an internal node read lock-free. */
struct bt_cache_slot {
	farm_gaddr a;
	uint8_t *node;
};

struct farm_bt {
	farm_kv *kv;
	farm_txm *txm;
	farm_gaddr root;
	struct bt_layout lay;
	pthread_mutex_t cache_lock; /* guards the cache slots */
	struct bt_cache_slot *slots;
	uint32_t nslots, nused;
	struct {
		_Atomic uint64_t lookups, leaf_reads, inner_reads, cache_hits,
		        fence_misses, slow_paths, splits, root_splits,
		        scan_leaves;
	} st;
};

#define BT_COUNT(bt, f) \
	atomic_fetch_add_explicit(&(bt)->st.f, 1, memory_order_relaxed)

/* ---- node accessors (bt_node.c) ------------------------------------------ */

static inline uint32_t bt_u16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}
static inline void bt_set_u16(uint8_t *p, uint32_t v)
{
	uint16_t x = (uint16_t)v;
	memcpy(p, &x, 2);
}
static inline uint64_t bt_u64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}
static inline void bt_set_u64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static inline bool bt_is_leaf(const uint8_t *n)
{
	return n[4] != 0;
}
static inline uint32_t bt_level(const uint8_t *n)
{
	return n[5];
}
static inline uint32_t bt_n(const uint8_t *n)
{
	return bt_u16(n + 6);
}
static inline void bt_set_n(uint8_t *n, uint32_t v)
{
	bt_set_u16(n + 6, v);
}
static inline farm_gaddr bt_next(const uint8_t *n)
{
	return bt_u64(n + 16);
}
static inline uint32_t bt_esize(const struct bt_layout *l, bool leaf)
{
	return leaf ? 4 + l->key_max + l->val_max : 16 + l->key_max;
}
static inline uint8_t *bt_entry(const struct bt_layout *l, const uint8_t *n,
                                uint32_t i)
{
	return (uint8_t *)n + BT_HDR + 2 * l->key_max +
	       (size_t)i * bt_esize(l, bt_is_leaf(n));
}
static inline const uint8_t *bt_eval(const struct bt_layout *l,
                                     const uint8_t *e)
{
	return e + 4 + l->key_max;
}
static inline uint32_t bt_evlen(const uint8_t *e)
{
	return bt_u16(e + 2);
}
static inline const uint8_t *bt_ekey(const uint8_t *e, bool leaf)
{
	return e + (leaf ? 4 : 16);
}
static inline uint32_t bt_eklen(const uint8_t *e)
{
	return e[0];
}
static inline farm_gaddr bt_echild(const uint8_t *e)
{
	return bt_u64(e + 8);
}

/* Keys compared as memcmp orders them, a prefix first. Inline, and the
 * first 8 bytes compared as one big-endian word, because every descent
 * and node check makes dozens of these on keys that are mostly short
 * (8-byte integers): a call to memcmp each cost more than the READ's
 * copy of the leaf. */
static inline int bt_cmp(const void *a, uint32_t alen, const void *b,
                         uint32_t blen)
{
	uint32_t m = alen < blen ? alen : blen;
	int c = 0;
	if (m >= 8) {
		uint64_t x, y;
		memcpy(&x, a, 8);
		memcpy(&y, b, 8);
		if (x != y) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			x = __builtin_bswap64(
			        x); /* memcmp order is big-endian */
			y = __builtin_bswap64(y);
#endif
			return x < y ? -1 : 1;
		}
		if (m > 8)
			c = memcmp((const uint8_t *)a + 8,
			           (const uint8_t *)b + 8, m - 8);
	} else if (m) {
		c = memcmp(a, b, m);
	}
	if (c)
		return c;
	return alen < blen ? -1 : alen > blen ? 1 : 0;
}

/* What a descent looks for: the node holding @key (low <= key < high),
 * or with @before the node holding the keys just below it (low < key <=
 * high; a NULL @key is +inf: the last node). */
struct bt_probe {
	const void *key;
	uint32_t klen;
	bool before;
};
bool farm_bt_probe_holds(const struct bt_layout *l, const uint8_t *n,
                         const struct bt_probe *p);
uint32_t farm_bt_probe_child(const struct bt_layout *l, const uint8_t *n,
                             const struct bt_probe *p);
void farm_bt_fence(const struct bt_layout *l, const uint8_t *n, bool high,
                   struct bt_key *out);
void farm_bt_set_fence(const struct bt_layout *l, uint8_t *n, bool high,
                       const struct bt_key *k);
bool farm_bt_in_fences(const struct bt_layout *l, const uint8_t *n,
                       const void *key, uint32_t klen);
void farm_bt_init_node(const struct bt_layout *l, uint8_t *n, bool leaf,
                       uint32_t level);
int farm_bt_check_node(const struct bt_layout *l, const uint8_t *n);
/* The entries of @n whose bytes lie in its first @size bytes (a read of
 * a prefix of the object, as consistent as a whole read). */
uint32_t farm_bt_prefix_entries(const struct bt_layout *l, const uint8_t *n,
                                uint32_t size);
/* farm_bt_check_node for a node of which only the first @size bytes
 * were read: the entries beyond are not looked at. */
int farm_bt_check_prefix(const struct bt_layout *l, const uint8_t *n,
                         uint32_t size);
/* Leaf: the first index whose key is >= @key, *found when equal. */
uint32_t farm_bt_leaf_search(const struct bt_layout *l, const uint8_t *n,
                             const void *key, uint32_t klen, bool *found);
/* Internal: the entry whose range holds @key (the last key <= @key). */
uint32_t farm_bt_inner_search(const struct bt_layout *l, const uint8_t *n,
                              const void *key, uint32_t klen);
void farm_bt_leaf_insert(const struct bt_layout *l, uint8_t *n, uint32_t i,
                         const void *key, uint32_t klen, const void *val,
                         uint32_t vlen);
void farm_bt_leaf_set_val(const struct bt_layout *l, uint8_t *e,
                          const void *val, uint32_t vlen);
void farm_bt_remove(const struct bt_layout *l, uint8_t *n, uint32_t i);
void farm_bt_inner_insert(const struct bt_layout *l, uint8_t *n, uint32_t i,
                          const struct bt_key *k, farm_gaddr child);
void farm_bt_entry_key(const struct bt_layout *l, const uint8_t *n, uint32_t i,
                       struct bt_key *k);
/* Split @x: its upper half moves to the empty node @y (at @ya), the
 * fences and sibling pointers set; *@sep is y's low fence, for the
 * parent. */
void farm_bt_split_half(const struct bt_layout *l, uint8_t *x, uint8_t *y,
                        farm_gaddr ya, struct bt_key *sep);
/* Split root @r in place: its entries to @a (at @aa) and @b (at @ba),
 * @r an internal node one level up over them. */
void farm_bt_split_root(const struct bt_layout *l, uint8_t *r, uint8_t *a,
                        farm_gaddr aa, uint8_t *b, farm_gaddr ba);
void farm_bt_layout_make(struct bt_layout *l, const struct farm_bt_attr *a);
int farm_bt_layout_check(const struct farm_bt_attr *a);
uint32_t farm_bt_node_size(const struct bt_layout *l, bool leaf);

/* ---- the internal-node cache (bt_cache.c) -------------------------------- */

int farm_bt_cache_init(farm_bt *bt);
void farm_bt_cache_free(farm_bt *bt);
/* The child of cached node @a for @key, 0 when @a is not cached (or its
 * fences do not hold @key: the copy is dropped). *@leaf_next: whether the
 * child is a leaf. */
farm_gaddr farm_bt_cache_child(farm_bt *bt, farm_gaddr a,
                               const struct bt_probe *p, bool *leaf_next);
void farm_bt_cache_put(farm_bt *bt, farm_gaddr a, const uint8_t *node);
void farm_bt_cache_drop(farm_bt *bt, farm_gaddr a);

/* ---- descents (bt_find.c) ------------------------------------------------ */

/* Test builds: while set, lock-free lookups skip the leaf's fence check
 * (a deliberately broken tree: test_btree_multi --broken-fence). */
#ifdef FARM_FAULT_INJECTION
extern _Atomic int farm_bt_fault_no_fence;
/* Test builds: while set, scans in a transaction read their leaves
 * lock-free, out of its read set (phantoms: test_btree_multi
 * --broken-scan). */
extern _Atomic int farm_bt_fault_scan_lf;
/* Test builds: while set, every split also commits a node it never links
 * (an orphan: test_btree_rec --broken-orphan). */
extern _Atomic int farm_bt_fault_orphan;
#endif

/* A leaf located for a key: its address and bytes (a transaction's copy
 * with @tx, else the caller's buffer). */
struct bt_found {
	farm_gaddr a;
	const uint8_t *leaf;
};

int farm_bt_read(farm_bt *bt, farm_tx *tx, farm_loop *loop, farm_gaddr a,
                 uint32_t size, uint8_t *buf, const uint8_t **out);
/* A lock-free read of the node at @a into @buf, its header and at least
 * its first @upto leaf entries (UINT32_MAX: all of it; *@size: the
 * bytes read), started (farm_bt_lf_start) and, after other work, waited
 * for and checked as farm_bt_read checks a node (farm_bt_lf_finish, which
 * pairs with the start; only the entries read are checked). @p and @buf
 * stay in place until the finish returns: the start refuses (-EDEADLK)
 * where the finish could not wait, so the finish always ends the READ. */
struct bt_lf_pending {
	volatile int done;
	int status;
	bool busy;
	uint32_t size;
	uint8_t *buf;
};
int farm_bt_lf_start(farm_bt *bt, farm_loop *loop, farm_gaddr a, uint32_t upto,
                     uint8_t *buf, struct bt_lf_pending *p);
int farm_bt_lf_finish(farm_bt *bt, farm_loop *loop, struct bt_lf_pending *p,
                      const uint8_t **out);
int farm_bt_locate(farm_bt *bt, farm_tx *tx, farm_loop *loop, const void *key,
                   uint32_t klen, uint8_t *buf, struct bt_found *f);
/* @rc, a transaction's FARM_EVALIDATION for nodes that disagreed, or
 * FARM_ECORRUPT when the committed tree disagrees with itself for @p too
 * (lock-free descents: the same fresh parent and unchanged child twice),
 * so that no retry loop runs for ever on a corrupt tree. */
int farm_bt_confirm(farm_bt *bt, farm_loop *loop, const struct bt_probe *p,
                    int rc);
/* The leaf @p asks for (bt_probe). */
int farm_bt_locate_probe(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                         const struct bt_probe *p, uint8_t *buf,
                         struct bt_found *f);
int farm_bt_check_key(const farm_bt *bt, const void *key, uint32_t klen);

/* ---- writes in a transaction (bt_split.c) -------------------------------- */

/* A new node (leaf-sized, as every node is) allocated in @tx on this
 * machine: its address and the transaction's writable bytes. */
int farm_bt_alloc_node(farm_bt *bt, farm_tx *tx, farm_gaddr *a, uint8_t **d);
/* Split the writable root @r in place (farm_bt_split_root) into two new
 * nodes; *@ba, *@b: the right one, which the bulk load's edge follows.
 * -ENOSPC when the tree is as tall as it may be. */
int farm_bt_root_split(farm_bt *bt, farm_tx *tx, uint8_t *r, farm_gaddr *ba,
                       uint8_t **b);

/* The leaf for @key with room for one more entry, read and made writable
 * in @tx, descending from the root and splitting full nodes on the way. */
int farm_bt_writable_leaf(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                          const void *key, uint32_t klen, bool need_room,
                          farm_gaddr *a, uint8_t **leaf);

#endif
