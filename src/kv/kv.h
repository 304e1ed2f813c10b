/*
 * The key-value store of a cluster of libfarm machines: the public API is
 * include/farm/kv.h; this header adds the hashtable underneath and the
 * store's messages (for the library and its tests). Internal; not
 * installed.
 *
 * Multi-get batch (FARM_MSGT_KV_MGET, an RPC to the loop that serves the
 * owner's shard region), all fields in host byte order (machines of a
 * cluster share one):
 *   request: struct farm_kv_mget_req, then nkeys times
 *            [u16 klen][klen bytes of key], packed, nothing after
 *   reply:   struct farm_kv_mget_rep, then nkeys times, in request order,
 *            [i32 status][u32 vlen] and, for status 0, vlen value bytes
 *            (packed). status: 0 (found), -ENOENT, -EMSGSIZE (the value
 *            is longer than the request's cap; vlen is its length, no
 *            bytes follow), FARM_KV_MGET_SPILL (found, but the value did
 *            not fit in this reply: the asker looks it up itself), or
 *            another lookup error.
 * A malformed request gets an error reply (farm_msg_reply_error): -EINVAL
 * (truncated, trailing bytes, nkeys 0, a key of 0 or more than
 * FARM_KV_MAX_KEY bytes, a key of another machine's shard, cap above
 * FARM_KV_MAX_VALUE, flags set), -E2BIG (more than FARM_KV_MGET_BATCH_MAX
 * keys), -EAGAIN (this machine has not joined yet).
 */
#ifndef FARM_KV_KV_H
#define FARM_KV_KV_H

#include <farm/kv.h>
#include <farm/txn.h>

#include "addrspace/addrspace.h"
#include "alloc/galloc.h"
#include "hashtable/ht.h"

#define FARM_MSGT_KV_SHARD 0xf140u /* -> the machine's shard descriptor */
#define FARM_MSGT_KV_MGET  0xf141u /* multi-get batch -> statuses, values */
#define FARM_MSGT_KV_OGET  0xf143u /* owner-served get (owner_serve.c) */
#define FARM_MSGT_KV_SHARDS                            \
	0xf142u /* -> the installed shard list (u32 n, \
	           then n struct farm_ht_shard) */

/* Keys one batch request may carry. */
#define FARM_KV_MGET_BATCH_MAX 1024u
/* Reply status: found, value not included (look it up separately). */
#define FARM_KV_MGET_SPILL 1

struct farm_kv_mget_req {
	uint16_t nkeys;
	uint16_t flags; /* 0 */
	uint32_t cap;   /* longest value the asker takes */
};

struct farm_kv_mget_rep {
	uint32_t nkeys; /* the request's */
	uint32_t pad;
};

_Static_assert(sizeof(struct farm_kv_mget_req) == 8, "mget request layout");
_Static_assert(sizeof(struct farm_kv_mget_rep) == 8, "mget reply layout");

/*
 * What the store needs of the machine it runs on. The layer that puts a
 * machine together (src/node: farm_kv_create) fills it in; the store
 * calls nothing above it, only these callbacks, each with @host.
 */
struct farm_kv_env {
	farm_txm *txm;
	farm_as *as;
	farm_galloc *galloc;
	farm_msg *msg;
	uint32_t me; /* this machine's id */
	void *host;
	/* Keep @len bytes under @name with the machine's data directory, for
	 * a whole-cluster restart: 0; -ENOTSUP (no durable directory). */
	int (*keep)(void *host, const char *name, const void *data, size_t len);
	/* The bytes kept under @name: their length, up to @cap copied into
	 * @buf; -ENOENT (none). */
	long (*kept)(void *host, const char *name, void *buf, size_t cap);
	/* Called once by farm_kv_destroy, before the store is freed (NULL:
	 * nothing to do): the host lets go of the store. */
	void (*release)(void *host);
	/* The fabric's provider ("shm", "udp", ...; NULL: shm): picks how
	 * lookups travel when the mode is FARM_KV_LOOKUP_AUTO. */
	const char *fabric;
	/* The shard list is installed: @regions[0..n) are the shards' bucket
	 * regions, each the serving of one shard, which the host has the
	 * cluster's placement spread evenly (NULL: nothing to do; the
	 * node's manager pins them: src/coord/balance.c). */
	void (*balance)(void *host, const uint32_t *regions, unsigned n);
};

/* The store on the machine @env describes (farm_kv_create's work, for the
 * layer above). @env is copied. Same returns as farm_kv_create. */
int farm_kv_open(const struct farm_kv_env *env, const struct farm_kv_attr *attr,
                 uint32_t buckets_per_machine, farm_kv **out);

/* The store's hashtable (the asynchronous farm_ht_* calls, its stats). */
farm_ht *farm_kv_table(farm_kv *kv);

/*
 * Owner-served get (FARM_MSGT_KV_OGET, an RPC to the loop that serves the
 * key's shard region; owner_lookup.c asks, owner_serve.c answers), host
 * byte order:
 *   request: struct farm_kv_oget_req, then klen bytes of key, nothing after
 *   reply:   [i32 status][u32 vlen] and, for status 0, vlen value bytes.
 *            status: 0, -ENOENT, FARM_KV_MGET_SPILL (found, the value does
 *            not fit one reply: the asker reads it itself), or a lookup
 *            error.
 * Refused with an error reply: -EINVAL (truncated, trailing bytes, klen 0
 * or above FARM_KV_MAX_KEY, flags or pad set), -ESTALE (config is not the
 * owner's configuration id: the asker retries once views agree), -EAGAIN
 * (not joined yet, or this machine does not serve the key's shard: not
 * its primary, perhaps no longer). A one-way request is dropped.
 */
struct farm_kv_oget_req {
	uint16_t klen;
	uint16_t flags;  /* 0 */
	uint32_t pad;    /* 0 */
	uint64_t config; /* the asker's configuration id */
};
_Static_assert(sizeof(struct farm_kv_oget_req) == 16, "oget request layout");

/* The owner path's counters (tests; not on the public stats). */
struct farm_kv_owner_stats {
	uint64_t sent;    /* gets sent to an owner */
	uint64_t retries; /* resent after -ESTALE / -EAGAIN */
	uint64_t served;  /* requests answered here */
	uint64_t bad;     /* malformed requests refused here */
	uint64_t refused; /* well-formed, refused (-ESTALE, -EAGAIN) */
};
void farm_kv_owner_stats_get(const farm_kv *kv, struct farm_kv_owner_stats *o);

#endif
