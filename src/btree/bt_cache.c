/*
 * The internal-node cache of one handle (one per machine and tree): copies
 * of internal nodes read lock-free, looked up by address. A copy may be
 * stale; it is only ever used to choose a child, and whatever it leads to
 * is checked by its fence keys, so a stale copy costs a retry, never a
 * wrong answer. Copies of uncommitted nodes (a transaction's own writes)
 * never enter it. Nodes are never freed while the tree exists, so an
 * address in a stale copy still names a node.
 */
#include "btree/bt_int.h"

#include <errno.h>
#include <stdlib.h>

/* The cache grows by doubling its slots (at most 3/4 used) while the
 * copies it may hold stay under CACHE_BYTES, so at most about twice that
 * (64 MiB; 49k copies of 1 KiB nodes, enough for the internal nodes of
 * some 100 million keys), then starts over. It is one table behind one
 * mutex, taken once per cached level of every descent: a handle shared
 * by many loops contends there. */
#define CACHE_SLOTS0    1024u
#define CACHE_SLOTS_MAX (1u << 17)
#define CACHE_BYTES     (32u << 20)

int farm_bt_cache_init(farm_bt *bt)
{
	bt->slots = calloc(CACHE_SLOTS0, sizeof(*bt->slots));
	if (!bt->slots)
		return -ENOMEM;
	bt->nslots = CACHE_SLOTS0;
	bt->nused = 0;
	return pthread_mutex_init(&bt->cache_lock, NULL) ? -ENOMEM : 0;
}

static void clear_slots(struct bt_cache_slot *s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		free(s[i].node);
		s[i] = (struct bt_cache_slot){0};
	}
}

void farm_bt_cache_free(farm_bt *bt)
{
	if (!bt->slots)
		return;
	clear_slots(bt->slots, bt->nslots);
	free(bt->slots);
	bt->slots = NULL;
	pthread_mutex_destroy(&bt->cache_lock);
}

static uint32_t slot_of(const farm_bt *bt, farm_gaddr a)
{
	uint64_t h = a * 0x9e3779b97f4a7c15ull;
	uint32_t i = (uint32_t)(h >> 32) & (bt->nslots - 1);
	while (bt->slots[i].a && bt->slots[i].a != a)
		i = (i + 1) & (bt->nslots - 1);
	return i;
}

farm_gaddr farm_bt_cache_child(farm_bt *bt, farm_gaddr a,
                               const struct bt_probe *p, bool *leaf_next)
{
	farm_gaddr child = FARM_GADDR_NULL;
	pthread_mutex_lock(&bt->cache_lock);
	struct bt_cache_slot *s = &bt->slots[slot_of(bt, a)];
	if (s->a == a && s->node) {
		if (farm_bt_probe_holds(&bt->lay, s->node, p)) {
			uint32_t i = farm_bt_probe_child(&bt->lay, s->node, p);
			child = bt_echild(bt_entry(&bt->lay, s->node, i));
			*leaf_next = bt_level(s->node) == 1;
		} else {
			/* The node split since it was cached: the key went
			 * to a right sibling this copy does not know. */
			free(s->node);
			s->node = NULL;
			BT_COUNT(bt, fence_misses);
		}
	}
	pthread_mutex_unlock(&bt->cache_lock);
	if (child)
		BT_COUNT(bt, cache_hits);
	return child;
}

/* Double the slots (with the lock held); false when it cannot. */
static bool grow(farm_bt *bt)
{
	if (bt->nslots >= CACHE_SLOTS_MAX ||
	    (uint64_t)bt->nslots / 4 * 3 * bt->lay.inner_size >= CACHE_BYTES)
		return false;
	struct bt_cache_slot *old = bt->slots;
	uint32_t n = bt->nslots;
	bt->slots = calloc(2 * (size_t)n, sizeof(*bt->slots));
	if (!bt->slots) {
		bt->slots = old;
		return false;
	}
	bt->nslots = 2 * n;
	bt->nused = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!old[i].node)
			continue;
		bt->slots[slot_of(bt, old[i].a)] = old[i];
		bt->nused++;
	}
	free(old);
	return true;
}

void farm_bt_cache_put(farm_bt *bt, farm_gaddr a, const uint8_t *node)
{
	uint8_t *copy = malloc(bt->lay.inner_size);
	if (!copy)
		return; /* a cache without the copy is still correct */
	memcpy(copy, node, bt->lay.inner_size);
	pthread_mutex_lock(&bt->cache_lock);
	if (bt->nused >= bt->nslots / 4 * 3 && !grow(bt)) {
		/* Full: start over rather than grow without bound; the
		 * nodes in use come back with one read each. */
		clear_slots(bt->slots, bt->nslots);
		bt->nused = 0;
	}
	struct bt_cache_slot *s = &bt->slots[slot_of(bt, a)];
	if (!s->a) {
		s->a = a;
		bt->nused++;
	}
	free(s->node);
	s->node = copy;
	pthread_mutex_unlock(&bt->cache_lock);
}

void farm_bt_cache_drop(farm_bt *bt, farm_gaddr a)
{
	pthread_mutex_lock(&bt->cache_lock);
	struct bt_cache_slot *s = &bt->slots[slot_of(bt, a)];
	if (s->a == a) {
		free(s->node);
		s->node = NULL;
	}
	pthread_mutex_unlock(&bt->cache_lock);
}
