/*
 * What the store's files share: the handle, its counters, the checks every
 * entry point makes, and the waiter the blocking calls drive a loop on.
 * Internal to src/kv.
 */
#ifndef FARM_KV_KV_INT_H
#define FARM_KV_KV_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/kv.h"
#include "util/stat.h"

/* The shard list, kept with the machine's data directory (the
 * environment's keep/kept): after a whole-cluster restart the shards'
 * buckets are where they were, and this is the only way back to them. */
#define KV_KEPT "kv.shards"

/* Shards in all (machines of the store x shards per machine): the
 * hashtable's limit. */
#define MAX_SHARDS FARM_HT_MAX_SHARDS

enum {
	S_CALLS,
	S_KEYS,
	S_LOCAL,
	S_FIRST_HITS,
	S_MISSES,
	S_MSGS,
	S_SPILLS,
	S_FALLBACKS,
	S_CHASED,
	S_SERVED,
	S_SERVED_KEYS,
	S_BAD,
	S_OWN_SENT,
	S_OWN_RETRIES,
	S_OWN_SERVED,
	S_OWN_BAD,
	S_OWN_REFUSED,
	S_N
};

struct farm_kv {
	struct farm_kv_env env; /* the machine underneath (kv.h) */
	farm_ht *ht;
	farm_msg *msg;
	farm_as *as;
	uint32_t me;
	uint32_t nbuckets; /* per shard */
	unsigned per;      /* shards each machine makes (attr) */
	_Atomic int shard_ready;
	struct farm_ht_shard mine[MAX_SHARDS]; /* the per this machine made */
	/* The installed shard list (set once, before joined is raised). */
	_Atomic int joined;
	unsigned nshards;
	struct farm_ht_shard shards[MAX_SHARDS];
	_Atomic uint64_t st[S_N];
	_Atomic uint64_t sync_timeout_ns; /* the *_sync wrappers' default */
	_Atomic int lookup; /* FARM_KV_LOOKUP_READ or _OWNER (resolved) */
	const char *fabric; /* the provider's name, for AUTO */
};

/* Lookups of other machines' shards go to their owners (relaxed: a mode
 * change needs no ordering with anything else). */
static inline bool kv_owner_mode(const farm_kv *kv)
{
	return atomic_load_explicit(&kv->lookup, memory_order_relaxed) ==
	       FARM_KV_LOOKUP_OWNER;
}

/* Acquire: pairs with the release stores of joined in join.c (the shard
 * list is seen once joined). */
static inline bool joined(const farm_kv *kv)
{
	return atomic_load_explicit(&kv->joined, memory_order_acquire) != 0;
}

/* The index of the shard @key lives in (joined stores only). */
static inline unsigned shard_of_key(const farm_kv *kv, const void *key,
                                    uint32_t klen)
{
	return farm_ht_shard_index(farm_ht_hash(key, klen), kv->nshards);
}

/* Whether this machine serves shard @s (the primary of its bucket
 * region): its keys are looked up here, not sent anywhere. */
static inline bool serves_shard(farm_kv *kv, unsigned s)
{
	return farm_ht_serves(kv->ht, s);
}

/* Keys: 0, -EINVAL (NULL, empty), -EMSGSIZE (too long). */
static inline int check_key(const void *key, uint32_t klen)
{
	if (!key || klen == 0)
		return -EINVAL;
	return klen > FARM_KV_MAX_KEY ? -EMSGSIZE : 0;
}

/* A blocking call's state, set by its continuation (joining, the *_sync
 * wrappers). */
struct wait {
	volatile int done;
	int status;
	struct farm_ht_shard sd;
	uint8_t *val;
	uint32_t cap, len;
};

/* A blocking wrapper's record (sync.c), on the heap: one that gives up
 * leaves its operation running, whose continuation frees the record it
 * finds abandoned (the continuation always runs; ops here never outlive
 * it). */
struct sync_op {
	volatile int done;
	int status;
	bool abandoned;
	void *val; /* get: the caller's buffer, cap bytes */
	uint32_t cap, len;
	uint8_t *vals; /* mget: the lookup's own arrays */
	uint32_t *lens;
	int *st;
};

/* sync.c, shared with mget.c's wrapper. */
uint64_t farm_kv_sync_timeout(const farm_kv *kv);
void farm_kv_sop_free(struct sync_op *w);
/* The operation ended: true when the record was abandoned (now freed). */
bool farm_kv_sop_end(struct sync_op *w, int status);
/* Drive @loop until @w is done (0) or @timeout_ns passed (the error, @w
 * abandoned to its continuation). */
int farm_kv_sop_wait(farm_loop *loop, struct sync_op *w, uint64_t timeout_ns);

/* owner_lookup.c: a get of another machine's key, sent to its owner. */
int farm_kv_owner_get(farm_kv *kv, farm_loop *loop, const void *key,
                      uint32_t klen, farm_kv_get_fn cont, void *ctx);
/* owner_serve.c: FARM_MSGT_KV_OGET's handler. */
void farm_kv_owner_serve(farm_loop *loop, const farm_msg_in *in, void *arg);

/* FARM_MSGT_KV_MGET's handler (mget_serve.c). */
void farm_kv_mget_serve(farm_loop *loop, const farm_msg_in *in, void *arg);

#endif
