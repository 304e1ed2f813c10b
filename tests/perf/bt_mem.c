/*
 * bt_bench's in-memory limit: the same B-tree layout (src/btree's node
 * format, searches and splits) in this process's memory, no fabric, no
 * versions, no replication, no transactions: what a lookup, an insert and
 * a scan cost when nothing but the tree is done.
 */
#include "bt_bench.h"

#include <errno.h>
#include <stdlib.h>

#include "btree/bt_int.h"

static struct bt_layout lay;
static uint8_t *root;

static uint8_t *new_node(void)
{
	return calloc(1, lay.leaf_size);
}

static uint8_t *child(const uint8_t *n, const void *key, uint32_t klen)
{
	return (uint8_t *)(uintptr_t)bt_echild(
	        bt_entry(&lay, n, farm_bt_inner_search(&lay, n, key, klen)));
}

static const uint8_t *leaf_of(const uint8_t *k)
{
	const uint8_t *n = root;
	while (!bt_is_leaf(n))
		n = child(n, k, 8);
	return n;
}

static int mem_get(void *ctx, uint64_t key, uint64_t *v)
{
	(void)ctx;
	uint8_t k[8];
	farm_bt_key_u64(key, k);
	const uint8_t *n = leaf_of(k);
	bool found;
	uint32_t i = farm_bt_leaf_search(&lay, n, k, 8, &found);
	if (!found)
		return -ENOENT;
	memcpy(v, bt_eval(&lay, bt_entry(&lay, n, i)), 8);
	return 0;
}

/* Top-down: every full node on the path split first, as src/btree does. */
static int mem_put(void *ctx, uint64_t key, uint64_t v)
{
	(void)ctx;
	uint8_t k[8];
	farm_bt_key_u64(key, k);
	if (bt_n(root) == (bt_is_leaf(root) ? lay.leaf_cap : lay.inner_cap)) {
		uint8_t *a = new_node(), *b = new_node();
		if (!a || !b)
			return -ENOMEM;
		farm_bt_split_root(&lay, root, a, (uintptr_t)a, b,
		                   (uintptr_t)b);
	}
	uint8_t *n = root;
	while (!bt_is_leaf(n)) {
		uint8_t *c = child(n, k, 8);
		if (bt_n(c) == (bt_is_leaf(c) ? lay.leaf_cap : lay.inner_cap)) {
			uint8_t *y = new_node();
			struct bt_key sep;
			if (!y)
				return -ENOMEM;
			farm_bt_split_half(&lay, c, y, (uintptr_t)y, &sep);
			uint32_t pi =
			        farm_bt_inner_search(&lay, n, sep.b, sep.len);
			farm_bt_inner_insert(&lay, n, pi + 1, &sep,
			                     (uintptr_t)y);
			if (!farm_bt_in_fences(&lay, c, k, 8))
				c = y;
		}
		n = c;
	}
	bool found;
	uint32_t i = farm_bt_leaf_search(&lay, n, k, 8, &found);
	if (found)
		farm_bt_leaf_set_val(&lay, bt_entry(&lay, n, i), &v, 8);
	else
		farm_bt_leaf_insert(&lay, n, i, k, 8, &v, 8);
	return 0;
}

static long mem_scan(void *ctx, uint64_t key, uint32_t want)
{
	(void)ctx;
	uint8_t k[8];
	farm_bt_key_u64(key, k);
	const uint8_t *n = leaf_of(k);
	bool found;
	uint32_t i = farm_bt_leaf_search(&lay, n, k, 8, &found);
	long got = 0;
	volatile uint64_t sink = 0;
	while (n && got < want) {
		for (; i < bt_n(n) && got < want; i++, got++)
			sink += bt_u64(bt_eval(&lay, bt_entry(&lay, n, i)));
		n = (const uint8_t *)(uintptr_t)bt_next(n);
		i = 0;
	}
	(void)sink;
	return got;
}

static uint64_t mem_cpu(void *ctx)
{
	(void)ctx;
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Every node once: the nodes are reached from the leftmost path, level
 * by level, along the sibling pointers. */
static void free_all(void)
{
	uint8_t *first = root;
	while (first) {
		uint8_t *down = bt_is_leaf(first)
		                        ? NULL
		                        : (uint8_t *)(uintptr_t)bt_echild(
		                                  bt_entry(&lay, first, 0));
		for (uint8_t *n = first; n;) {
			uint8_t *next = (uint8_t *)(uintptr_t)bt_next(n);
			if (n != root)
				free(n);
			n = next;
		}
		first = down;
	}
	free(root);
	root = NULL;
}

int bb_mem_start(uint64_t n, struct bb_sys *s)
{
	struct farm_bt_attr a = {.key_max = 8, .val_max = 8};
	farm_bt_layout_make(&lay, &a);
	root = new_node();
	if (!root)
		return -ENOMEM;
	farm_bt_init_node(&lay, root, true, 0);
	for (uint64_t i = 0; i < n; i++)
		if (mem_put(NULL, 2 * i, BB_VAL(2 * i)))
			return -ENOMEM;
	*s = (struct bb_sys){.name = "memory",
	                     .get = mem_get,
	                     .put = mem_put,
	                     .scan = mem_scan,
	                     .cpu_ns = mem_cpu};
	return 0;
}

void bb_mem_stop(void)
{
	if (root)
		free_all();
}
