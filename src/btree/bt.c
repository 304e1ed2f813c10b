/*
 * Trees: making one (its root leaf in a transaction, then its name in
 * the KV store's named-object directory), opening one by name (the
 * layout is learned from the root, which every node repeats), closing a
 * handle, and the counters.
 */
#include "btree/bt_int.h"
#include "util/stat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Directory names of trees: a prefix keeps them apart from others'. */
#define NAME_PREFIX "farm.bt."

static int dir_name(const char *name, char *out, size_t cap)
{
	if (!name || !*name)
		return -EINVAL;
	if (strlen(name) > FARM_BT_MAX_NAME)
		return -EMSGSIZE;
	snprintf(out, cap, NAME_PREFIX "%s", name);
	return 0;
}

static int new_handle(farm_kv *kv, farm_txm *m, farm_gaddr root,
                      const struct farm_bt_attr *a, farm_bt **out)
{
	farm_bt *bt = calloc(1, sizeof(*bt));
	if (!bt)
		return -ENOMEM;
	bt->kv = kv;
	bt->txm = m;
	bt->root = root;
	farm_bt_layout_make(&bt->lay, a);
	int rc = farm_bt_cache_init(bt);
	if (rc) {
		free(bt->slots);
		free(bt);
		return rc;
	}
	*out = bt;
	return 0;
}

/* A transaction that allocates the root, an empty leaf. */
static int make_root(farm_txm *m, farm_loop *loop, const struct bt_layout *l,
                     farm_fatptr *fp)
{
	farm_tx *tx = NULL;
	int rc = farm_tx_begin(m, loop, &tx);
	if (rc)
		return rc;
	void *d = NULL;
	rc = farm_tx_alloc_sync(tx, l->leaf_size, FARM_GADDR_NULL, fp, &d);
	if (!rc) {
		farm_bt_init_node(l, d, true, 0);
		rc = farm_tx_commit_sync(tx);
	}
	farm_tx_free(tx);
	return rc;
}

/* Free the root of a tree that could not be named (no one else can find
 * it, so nothing else refers to it); best effort: a failure leaks one
 * node, and the naming error is what the caller needs. */
static void drop_root(farm_txm *m, farm_loop *loop, const struct bt_layout *l,
                      farm_gaddr a)
{
	farm_tx *tx = NULL;
	if (farm_tx_begin(m, loop, &tx))
		return;
	const void *d;
	int rc = farm_tx_read_sync(tx, a, l->leaf_size, &d);
	if (!rc)
		rc = farm_tx_free_obj(tx, a);
	if (!rc)
		rc = farm_tx_commit_sync(tx);
	else
		(void)farm_tx_abort(tx);
	farm_tx_free(tx);
}

int farm_bt_create_sync(farm_kv *kv, farm_txm *m, farm_loop *loop,
                        const char *name, const struct farm_bt_attr *attr,
                        farm_bt **out)
{
	char dn[FARM_BT_MAX_NAME + sizeof(NAME_PREFIX)];
	if (!kv || !m || !loop || !out)
		return -EINVAL;
	int rc = dir_name(name, dn, sizeof(dn));
	if (!rc)
		rc = farm_bt_layout_check(attr);
	if (rc)
		return rc;
	farm_fatptr fp;
	rc = farm_kv_lookup_sync(kv, loop, dn, &fp);
	if (rc != -ENOENT)
		return rc ? rc : -EEXIST;
	struct bt_layout l;
	farm_bt_layout_make(&l, attr);
	rc = make_root(m, loop, &l, &fp);
	if (rc)
		return rc;
	rc = farm_kv_name_sync(kv, loop, dn, fp);
	if (rc) {
		drop_root(m, loop, &l, fp.addr);
		return rc;
	}
	struct farm_bt_attr a = {.key_max = l.key_max,
	                         .val_max = l.val_max,
	                         .leaf_cap = l.leaf_cap,
	                         .inner_cap = l.inner_cap};
	return new_handle(kv, m, fp.addr, &a, out);
}

int farm_bt_open_sync(farm_kv *kv, farm_txm *m, farm_loop *loop,
                      const char *name, farm_bt **out)
{
	char dn[FARM_BT_MAX_NAME + sizeof(NAME_PREFIX)];
	if (!kv || !m || !loop || !out)
		return -EINVAL;
	int rc = dir_name(name, dn, sizeof(dn));
	if (rc)
		return rc;
	farm_fatptr fp;
	rc = farm_kv_lookup_sync(kv, loop, dn, &fp);
	if (rc)
		return rc;
	if (fp.size < BT_HDR || fp.size > FARM_TX_MAX_SIZE)
		return FARM_ECORRUPT;
	uint8_t *root = malloc(fp.size);
	if (!root)
		return -ENOMEM;
	rc = farm_lf_read_sync(m, loop, fp.addr, fp.size, fp.incarnation, root);
	struct farm_bt_attr a;
	struct bt_layout l;
	if (!rc) {
		/* The root's bytes mean something only once read. */
		a = (struct farm_bt_attr){
		        .key_max = bt_u16(root + 8),
		        .val_max = bt_u16(root + 10),
		        .leaf_cap = bt_u16(root + 12),
		        .inner_cap = bt_u16(root + 26),
		};
		farm_bt_layout_make(&l, &a);
		if (!a.key_max || !a.val_max || !a.leaf_cap || !a.inner_cap ||
		    farm_bt_layout_check(&a) || l.leaf_size != fp.size ||
		    farm_bt_check_node(&l, root))
			rc = FARM_ECORRUPT;
	} else if (rc == -EINVAL || rc == FARM_EFREED) {
		rc = FARM_ECORRUPT;
	}
	free(root);
	return rc ? rc : new_handle(kv, m, fp.addr, &a, out);
}

void farm_bt_close(farm_bt *bt)
{
	if (!bt)
		return;
	farm_bt_cache_free(bt);
	free(bt);
}

void farm_bt_attr_get(const farm_bt *bt, struct farm_bt_attr *out)
{
	if (!out)
		return;
	if (!bt) {
		*out = (struct farm_bt_attr){0};
		return;
	}
	*out = (struct farm_bt_attr){.key_max = bt->lay.key_max,
	                             .val_max = bt->lay.val_max,
	                             .leaf_cap = bt->lay.leaf_cap,
	                             .inner_cap = bt->lay.inner_cap};
}

void farm_bt_stats_read(const farm_bt *bt, farm_bt_stats *out, size_t size)
{
	if (!out)
		return;
	farm_bt_stats s = {0};
	if (!bt) {
		farm_stats_copy(out, size, &s, sizeof(s));
		return;
	}
#define LD(f) atomic_load_explicit(&((farm_bt *)bt)->st.f, memory_order_relaxed)
	s = (farm_bt_stats){
	        .lookups = LD(lookups),
	        .leaf_reads = LD(leaf_reads),
	        .inner_reads = LD(inner_reads),
	        .cache_hits = LD(cache_hits),
	        .fence_misses = LD(fence_misses),
	        .slow_paths = LD(slow_paths),
	        .splits = LD(splits),
	        .root_splits = LD(root_splits),
	        .scan_leaves = LD(scan_leaves),
	};
#undef LD
	farm_stats_copy(out, size, &s, sizeof(s));
}
