/*
 * B-tree test helpers (test_btree, test_btree_load, test_btree_multi,
 * test_btree_rec): a sorted-map model of u64 keys and values, a check of
 * a quiescent tree's invariants read lock-free level by level, and a
 * machine alone to hold trees. Defined in btcheck.c (src/btree
 * internals).
 */
#ifndef FARM_TESTS_BTCHECK_H
#define FARM_TESTS_BTCHECK_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <farm/kv.h>
#include <farm/node.h>

#include "btree/bt_int.h"

/* ---- the model: a sorted array -------------------------------------------
 */

struct bm_pair {
	uint64_t k, v;
};
struct bmodel {
	struct bm_pair *p;
	size_t n, cap;
};

size_t bm_find(const struct bmodel *m, uint64_t k, bool *found);
void bm_put(struct bmodel *m, uint64_t k, uint64_t v);
bool bm_del(struct bmodel *m, uint64_t k);

/* ---- scans into arrays ---------------------------------------------------
 */

struct bscan {
	struct bm_pair *out;
	size_t n, cap;
	bool bad; /* an entry that is not an 8-byte key and value */
};
bool bscan_cb(void *ctx, const void *key, uint32_t klen, const void *val,
              uint32_t vlen);

/* ---- invariants ----------------------------------------------------------
 */

int bc_fail(const char *what, farm_gaddr a);

bool bc_key_eq(const struct bt_key *a, const uint8_t *b, uint32_t blen);

/* Addresses of the nodes a check reached (bc_verify_nodes). */
struct bc_nodes {
	farm_gaddr *a;
	size_t n, cap;
};

void bc_note(struct bc_nodes *s, farm_gaddr a);

/* One level: the chain from @first, checked against the children its
 * parents named (@kids, @nk; NULL at the root). The next level's
 * children go to @next (*@nn). Leaves: keys counted into *@keys and
 * ordered across the chain. */
int bc_level(farm_bt *bt, farm_loop *loop, farm_gaddr first,
             const farm_gaddr *kids, size_t nk, farm_gaddr **next, size_t *nn,
             uint64_t *keys, struct bc_nodes *seen);

/* The whole tree: every level a chain from -inf to +inf whose nodes are
 * exactly its parents' children in order, keys ordered and within fences
 * (farm_bt_check_node), leaves all at level 0. *@keys: the leaves' keys;
 * @seen (or NULL): every node reached. */
int bc_verify_nodes(farm_bt *bt, farm_loop *loop, uint64_t *keys,
                    struct bc_nodes *seen);

int bc_verify(farm_bt *bt, farm_loop *loop, uint64_t *keys);

/* ---- one machine to hold trees -------------------------------------------
 */

/* A machine alone (static membership), its loop run by the test, with a
 * KV store of @buckets buckets for the trees' names and a region of
 * @region_size (a config size: "32M"), in a new directory farm-test-@tag-*.
 * 0 or the first error. */
struct bc_node {
	char dir[256];
	farm_node *node;
	farm_kv *kv;
	farm_loop *loop;
	farm_txm *txm;
};

int bc_node_open(struct bc_node *o, const char *tag, const char *region_size,
                 uint32_t buckets);

/* Close it and remove its directory: 0 or -1 when the removal failed. */
int bc_node_close(struct bc_node *o);

#endif
