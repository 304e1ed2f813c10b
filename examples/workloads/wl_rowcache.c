/*
 * A client's cache of what its KV lookups found (wl_int.h, "row cache"):
 * key -> the row's fat pointer, or its absence. TATP's and SmallBank's
 * rows are allocated by the load and never moved or re-indexed in a run,
 * so a client looks a row up once and reads it with one READ after that,
 * as the in-memory limit reads its hash table once. Direct-mapped: a
 * collision only evicts. The checks after a run read through the index,
 * never this.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wl_int.h"

struct rc_ent {
	uint64_t key; /* 0: empty */
	bool absent;  /* the index has no such key */
	farm_fatptr p;
};

struct wl_rowcache {
	unsigned bits;
	struct rc_ent e[];
};

struct wl_rowcache *wl_rowcache_new(uint64_t keys, unsigned max_bits)
{
	unsigned bits = 10;
	while ((1ull << bits) < keys && bits < max_bits)
		bits++;
	struct wl_rowcache *rc =
	        calloc(1, sizeof(*rc) + sizeof(rc->e[0]) * (1ull << bits));
	if (rc)
		rc->bits = bits;
	return rc;
}

void wl_rowcache_free(struct wl_rowcache *rc)
{
	free(rc);
}

static struct rc_ent *slot(struct wl_rowcache *rc, uint64_t key)
{
	return rc ? &rc->e[(key * 0x9e3779b97f4a7c15ull) >> (64 - rc->bits)]
	          : NULL;
}

int wl_rowcache_find(struct wl_rowcache *rc, uint64_t key, void *val,
                     uint32_t size)
{
	struct rc_ent *e = slot(rc, key);
	if (!e || e->key != key)
		return 1;
	if (e->absent)
		return -ENOENT;
	memcpy(val, &e->p, size);
	return 0;
}

int wl_rowcache_fill(struct wl_client *c, struct wl_rowcache *rc, uint64_t key,
                     const struct wl_key *k, void *val, uint32_t size)
{
	struct rc_ent *e = slot(rc, key);
	int r = wl_kv_ptr(c, k, val, size);
	if (e && (r == 0 || r == -ENOENT)) {
		*e = (struct rc_ent){.key = key, .absent = r == -ENOENT};
		if (r == 0)
			memcpy(&e->p, val, size);
	}
	return r;
}

int wl_rowcache_get(struct wl_client *c, struct wl_rowcache *rc, uint64_t key,
                    const struct wl_key *k, void *val, uint32_t size)
{
	int r = wl_rowcache_find(rc, key, val, size);
	return r <= 0 ? r : wl_rowcache_fill(c, rc, key, k, val, size);
}

void wl_rowcache_forget(struct wl_rowcache *rc, uint64_t key)
{
	struct rc_ent *e = slot(rc, key);
	if (e && e->key == key)
		e->key = 0;
}
