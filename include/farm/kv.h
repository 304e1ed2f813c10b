/*
 * libfarm's key-value store: one hashtable over the cluster, one shard (a
 * bucket array) per machine, FaRM's chained associative hopscotch hashing
 * (NSDI'14 section 4). Lookups are lock-free one-sided reads; puts and
 * deletes are shipped to the shard's owner, which runs them as
 * transactions. Also a batched multi-get and a named-object directory.
 *
 *   farm_kv_create()    on each machine, after farm_node_open_file and
 *                       before farm_node_start (it registers handlers)
 *   farm_kv_attach()    on each loop's thread that uses the store, and on
 *                       every loop that serves a shard region (with one
 *                       loop per machine: that loop)
 *   farm_kv_join_sync() on one loop of each machine once every machine is
 *                       in the view: makes this machine's shard, fetches
 *                       every other machine's, installs the list (ordered
 *                       by machine id)
 *   get / put / del / mget, the directory, iteration
 *   farm_kv_detach(), farm_kv_destroy() (after the loops are closed)
 *
 * Keys are 1..FARM_KV_MAX_KEY bytes, values 1..FARM_KV_MAX_VALUE bytes (a
 * put's key and value must also fit in one message: farm_kv_value_limit).
 * Keys whose first byte is 0xff are the directory's; applications use
 * others. Every call is made on its loop's thread; continuations run
 * there. The *_sync wrappers drive the loop and must not be called from a
 * handler or continuation. Errors are negative codes (farm_strerror()).
 */
#ifndef FARM_KV_H
#define FARM_KV_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/error.h>
#include <farm/msg.h>
#include <farm/node.h>
#include <farm/txn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest key and value the table stores (-EMSGSIZE beyond). */
#define FARM_KV_MAX_KEY   256u
#define FARM_KV_MAX_VALUE (64u << 10)
/* The most keys one farm_kv_mget takes (-E2BIG beyond). */
#define FARM_KV_MGET_MAX 65536u

typedef struct farm_kv farm_kv;

/* The table's shape; every machine uses the same. Zero fields: defaults. */
struct farm_kv_attr {
	unsigned neighborhood; /* H: even, 2..16 (0: 8); a bucket holds H/2 */
	uint32_t key_inline;   /* key bytes kept in a slot, 8..64 (0: 16) */
	uint32_t val_inline;   /* value bytes kept in a slot, 24..1024 (0: 32);
	                          larger values live in an object of their own */
	/* Shards each machine makes when the store is made, each in a region
	 * of its own (0: the machine's kv_shards setting, default 1). Every
	 * machine must give the same; machines x shards at most 256. More
	 * shards than machines let the store's serving spread over machines
	 * that join later (growth moves a shard with its region). */
	unsigned shards_per_machine;
};

/*
 * farm_kv_create() - the store's handle on machine @node, with
 * @buckets_per_machine buckets in this machine's shard (the table never
 * resizes: keys that do not fit their neighbourhood go to overflow
 * chains). @attr NULL: defaults. Before farm_node_start. Returns 0;
 * -EINVAL (bad arguments or attributes); -EEXIST (a store exists on this
 * machine already); -ENOMEM.
 */
FARM_API FARM_MUST_CHECK int farm_kv_create(farm_node *node,
                                            const struct farm_kv_attr *attr,
                                            uint32_t buckets_per_machine,
                                            farm_kv **out);
/* Free the handle (the shards stay in the cluster's memory). NULL is
 * fine. After every loop detached. */
FARM_API void farm_kv_destroy(farm_kv *kv);
/* Use the store on @loop (its thread). 0; -EINVAL (NULL, attached
 * already); -ENOMEM; a fabric error registering the read buffers. */
FARM_API FARM_MUST_CHECK int farm_kv_attach(farm_kv *kv, farm_loop *loop);
/* Stop using the store on @loop (its thread). Lookups still in flight
 * on it are answered -ECANCELED on a later pass of the loop (or at its
 * close); nothing new starts on it (-EINVAL) until attached again. Puts
 * and deletes this machine's shards had taken on @loop (sent by any
 * machine) are answered once too: -ECANCELED, not written, those whose
 * transaction had not begun its commit; the others with their commit's
 * outcome, as farm_kv_put says. Those that reach @loop after the detach
 * (it still serves the shard's region) are answered -ECANCELED, not
 * written, until it is attached again. */
FARM_API void farm_kv_detach(farm_kv *kv, farm_loop *loop);

/*
 * farm_kv_join_sync() - make this machine's shards, learn the other
 * @nmachines - 1 machines' (machine ids 0..@nmachines - 1, all in the
 * view), install the list. Drives @loop, at most @timeout_ms. Returns 0;
 * -EINVAL (bad arguments, @nmachines 0, or @nmachines times the shards
 * per machine above 256; a peer that makes another number of shards);
 * -ETIMEDOUT; the allocator's or a peer's error.
 */
FARM_API FARM_MUST_CHECK int farm_kv_join_sync(farm_kv *kv, farm_loop *loop,
                                               unsigned nmachines,
                                               int timeout_ms);

/*
 * farm_kv_join_existing_sync() - join a store whose shards exist without
 * making one: learn the shard list machine @from installed (any machine
 * that joined). For a machine that joins a running cluster (rejoin and
 * growth: it holds no primary region, so it can make no shard); its gets,
 * puts and deletes go to the shards' owners as anyone's do. Drives @loop,
 * at most @timeout_ms. Returns 0; -EINVAL (bad arguments, @from is this
 * machine, joined already); -ETIMEDOUT; FARM_ECORRUPT (a malformed
 * answer); FARM_EPEERDEAD; -ENOMEM.
 */
FARM_API FARM_MUST_CHECK int farm_kv_join_existing_sync(farm_kv *kv,
                                                        farm_loop *loop,
                                                        uint32_t from,
                                                        int timeout_ms);

/* The largest value a put of a @klen-byte key accepts: FARM_KV_MAX_VALUE,
 * or less when the key and value would not fit in one message (with the
 * default 256 KiB message rings, about 32 KiB in all). 0 for a bad @klen. */
FARM_API uint32_t farm_kv_value_limit(const farm_kv *kv, uint32_t klen);

/* ---- asynchronous operations --------------------------------------------
 *
 * Each returns 0 and then runs @cont exactly once, on @loop, or returns an
 * error and never runs it: -EINVAL (NULL or empty key, NULL @cont or
 * value, a loop the store is not attached to), -EMSGSIZE (key longer than
 * FARM_KV_MAX_KEY, value longer than farm_kv_value_limit), -ENOENT (the
 * store has not joined), -EAGAIN (too many lookups in flight on this loop,
 * or messaging's call limit: retry once one completes), -ENOMEM.
 */

/* get: @status 0 with the value (valid during the call only), -ENOENT, or
 * an error (FARM_EPEERDEAD: the shard's machine died; -EBUSY: the buckets
 * kept changing while being read; on the owner path, kv_lookup = owner:
 * -EAGAIN, the shard's machine refused for a second, a view change in
 * progress: retry, and -ETIMEDOUT, it did not answer in 5 s). */
typedef void (*farm_kv_get_fn)(farm_loop *loop, void *ctx, int status,
                               const void *val, uint32_t len);
FARM_API FARM_MUST_CHECK int farm_kv_get(farm_kv *kv, farm_loop *loop,
                                         const void *key, uint32_t klen,
                                         farm_kv_get_fn cont, void *ctx);
/* get of @n keys at once (a client's window of gets, at most
 * FARM_KV_GET_MANY_MAX): as farm_kv_get for each of keys[i] (klens[i]
 * bytes), its @cont run with ctxs[i]; rcs[i] is what farm_kv_get would have
 * returned for it (0: @cont runs once for it; an error: never). The gets
 * start together: every key hashed, then every bucket pair's read issued
 * before any is looked at, so their cache misses overlap (G-Opt's group
 * prefetching); each answer is farm_kv_get's. Returns 0, or -EINVAL (NULL
 * @kv, @cont or array: nothing started), -E2BIG (@n too large). */
#define FARM_KV_GET_MANY_MAX 64u
FARM_API FARM_MUST_CHECK int
farm_kv_get_many(farm_kv *kv, farm_loop *loop, unsigned n,
                 const void *const *keys, const uint32_t *klens,
                 farm_kv_get_fn cont, void *const *ctxs, int *rcs);
/* put (insert or replace): @status 0 or an error (-ETIMEDOUT,
 * FARM_EPEERDEAD, -ENOSPC when the shard's memory is full; -EAGAIN, the
 * shard is moving between machines, recovery or growth, and the machine
 * this one's view names does not serve it yet or any more: nothing was
 * written, retry; -ECANCELED, the shard's machine detached the loop that
 * held the write, or that serves the shard (farm_kv_detach), before its
 * commit began: nothing was written, and asking again reaches that same
 * loop until it is attached again; or a loop closed with the write in
 * flight, this one or the shard's machine's during its commit: it may
 * have been written, read the key to learn). farm_tx_retryable() is true for
 * -EAGAIN. */
FARM_API FARM_MUST_CHECK int farm_kv_put(farm_kv *kv, farm_loop *loop,
                                         const void *key, uint32_t klen,
                                         const void *val, uint32_t vlen,
                                         farm_op_fn cont, void *ctx);
/* delete: @status 0, -ENOENT (absent), or an error as put's. */
FARM_API FARM_MUST_CHECK int farm_kv_del(farm_kv *kv, farm_loop *loop,
                                         const void *key, uint32_t klen,
                                         farm_op_fn cont, void *ctx);

/*
 * farm_kv_mget() - look up @n keys (keys[i], klens[i] bytes) at once.
 * Keys of this machine's shard are read locally. For every other key one
 * one-sided READ fetches its two candidate buckets; the keys that this
 * first read does not resolve (the key may be in an overflow chain, or
 * the read did not validate) are sent, per owning machine, in one message
 * that the owner answers by running the lookups itself. When all are done
 * @cont runs, on @loop, never inside this call, with per key:
 * status[i] 0 and lens[i] bytes of value in vals + i * @cap; -ENOENT;
 * -EMSGSIZE when the value is longer than @cap (lens[i] its length);
 * -EINVAL (NULL or empty key) or -EMSGSIZE (key longer than
 * FARM_KV_MAX_KEY) for that key alone; or a lookup's error (lens[i] 0).
 * Keys are not looked up atomically together. The arrays stay in use until
 * @cont runs; the keys are copied. Returns 0; -EINVAL (@n 0, a NULL
 * array or @cont); -E2BIG (@n above FARM_KV_MGET_MAX); -ENOENT (the store
 * has not joined); -ENOMEM.
 */
typedef void (*farm_kv_mget_fn)(farm_loop *loop, void *ctx);
FARM_API FARM_MUST_CHECK int
farm_kv_mget(farm_kv *kv, farm_loop *loop, unsigned n, const void *const *keys,
             const uint32_t *klens, void *vals, uint32_t cap, uint32_t *lens,
             int *status, farm_kv_mget_fn cont, void *ctx);

/* ---- blocking wrappers (drive @loop until done) -------------------------- */

/*
 * Each waits at most its deadline: the store's default
 * (farm_kv_set_sync_timeout; 0, the initial value, is no limit of the
 * wrapper's own) or, for the *_timed variants, @timeout_ns (0: no limit).
 * Past it the wrapper returns -ETIMEDOUT, writes none of its outputs, and
 * the operation goes on to the outcome the asynchronous call defines,
 * unreported: a put or delete that timed out may have happened or may
 * still happen (UNKNOWN: read the key to learn); a get or mget has no
 * effect. A get refused for want of a free lookup slot on @loop retries
 * (the loop parked in between) within the same deadline, and returns
 * -ETIMEDOUT with nothing started once it passed. A put or delete refused
 * with -EAGAIN (a shard moving between machines: nothing written), and a
 * get answered -EAGAIN (on the owner path, the shard's machine refusing
 * for a second: a view change), is asked again, the loop parked in
 * between, until the deadline, or for 10 s with none: then -EAGAIN
 * (nothing written), or -ETIMEDOUT when the deadline cut the wait for
 * the last try's answer. The directory's
 * wrappers (farm_kv_name_sync ...) use the default; the join wrappers take
 * their own timeout.
 */

/* Set @kv's blocking wrappers' deadline (ns, 0: none); any thread, for
 * the calls that start after it. */
FARM_API void farm_kv_set_sync_timeout(farm_kv *kv, uint64_t timeout_ns);

/* get: 0 and *@len bytes into @val; -EMSGSIZE when the value is longer
 * than @cap (*@len is then its length); -ENOENT; errors as farm_kv_get. */
FARM_API FARM_MUST_CHECK int farm_kv_get_sync(farm_kv *kv, farm_loop *loop,
                                              const void *key, uint32_t klen,
                                              void *val, uint32_t cap,
                                              uint32_t *len);
FARM_API FARM_MUST_CHECK int farm_kv_put_sync(farm_kv *kv, farm_loop *loop,
                                              const void *key, uint32_t klen,
                                              const void *val, uint32_t vlen);
FARM_API FARM_MUST_CHECK int farm_kv_del_sync(farm_kv *kv, farm_loop *loop,
                                              const void *key, uint32_t klen);
/* farm_kv_mget, waited for (every lookup ends: a batch that is not
 * answered times out): farm_kv_mget's error, or 0 with the per-key
 * statuses in @status. */
FARM_API FARM_MUST_CHECK int
farm_kv_mget_sync(farm_kv *kv, farm_loop *loop, unsigned n,
                  const void *const *keys, const uint32_t *klens, void *vals,
                  uint32_t cap, uint32_t *lens, int *status);
FARM_API FARM_MUST_CHECK int
farm_kv_get_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                       uint32_t klen, void *val, uint32_t cap, uint32_t *len,
                       uint64_t timeout_ns);
FARM_API FARM_MUST_CHECK int
farm_kv_put_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                       uint32_t klen, const void *val, uint32_t vlen,
                       uint64_t timeout_ns);
FARM_API FARM_MUST_CHECK int
farm_kv_del_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                       uint32_t klen, uint64_t timeout_ns);
FARM_API FARM_MUST_CHECK int
farm_kv_mget_sync_timed(farm_kv *kv, farm_loop *loop, unsigned n,
                        const void *const *keys, const uint32_t *klens,
                        void *vals, uint32_t cap, uint32_t *lens, int *status,
                        uint64_t timeout_ns);

/* ---- iteration ----------------------------------------------------------- */

/*
 * farm_kv_iterate_local() - the pairs of the shards this machine serves
 * (the primary of their bucket regions), read in place: @fn gets each key
 * and value (valid during the call) and returns false to stop. A
 * consistent view only while no write runs on the shards.
 * Pairs kept in an object of their own (values longer than val_inline,
 * keys longer than key_inline) are visited too (their object read in
 * place); directory entries are visited as pairs whose key starts with
 * 0xff. Returns the pairs visited, or -EINVAL (NULL, not joined),
 * -ENOMEM.
 */
typedef bool (*farm_kv_iter_fn)(void *ctx, const void *key, uint32_t klen,
                                const void *val, uint32_t vlen);
FARM_API long farm_kv_iterate_local(farm_kv *kv, farm_kv_iter_fn fn, void *ctx);

/* ---- the named-object directory -------------------------------------------
 *
 * A name (a C string of 1..FARM_KV_MAX_KEY - 1 bytes) names a fat pointer,
 * kept in the same table under the key 0xff followed by the name. -EINVAL
 * for a NULL or empty name, -EMSGSIZE for a longer one.
 */
FARM_API FARM_MUST_CHECK int farm_kv_name_sync(farm_kv *kv, farm_loop *loop,
                                               const char *name, farm_fatptr p);
/* 0 and *@p; -ENOENT when the name is not there. */
FARM_API FARM_MUST_CHECK int farm_kv_lookup_sync(farm_kv *kv, farm_loop *loop,
                                                 const char *name,
                                                 farm_fatptr *p);
/* 0, or -ENOENT when the name is not there. */
FARM_API FARM_MUST_CHECK int farm_kv_unname_sync(farm_kv *kv, farm_loop *loop,
                                                 const char *name);

/* ---- how lookups travel -------------------------------------------------- */

/*
 * A get or multi-get of a key in another machine's shard either reads the
 * shard's buckets one-sided (READ: FaRM's way) or is sent as one RPC to
 * the shard's primary, which looks the key up in its own memory and
 * answers (OWNER: HERD's way). AUTO, the default, picks by fabric (the
 * faster measured on each: READ on all so far; src/kv/README.md,
 * "Owner-served lookups");
 * the machine's configuration key `kv_lookup` overrides it.
 */
enum farm_kv_lookup {
	FARM_KV_LOOKUP_AUTO = 0,
	FARM_KV_LOOKUP_READ = 1,
	FARM_KV_LOOKUP_OWNER = 2,
};

/* Set how @kv's lookups travel (any time; lookups in flight finish as they
 * started). 0; -EINVAL (NULL or an unknown mode). */
FARM_API FARM_MUST_CHECK int farm_kv_set_lookup(farm_kv *kv,
                                                enum farm_kv_lookup mode);
/* The mode in force (AUTO resolved): READ or OWNER; READ for NULL. */
FARM_API enum farm_kv_lookup farm_kv_lookup_mode(const farm_kv *kv);
/* "read", "owner" or "auto" as a mode: 0; -EINVAL. */
FARM_API FARM_MUST_CHECK int farm_kv_lookup_parse(const char *s,
                                                  enum farm_kv_lookup *out);

/* ---- counters ------------------------------------------------------------ */

typedef struct farm_kv_stats {
	/* multi-get, asking side */
	uint64_t mget_calls;      /* farm_kv_mget calls accepted */
	uint64_t mget_keys;       /* keys in them */
	uint64_t mget_local;      /* keys of this machine's shard */
	uint64_t mget_first_hits; /* keys the first read resolved (found or
	                             absent) */
	uint64_t mget_misses;     /* keys sent to their owner in a batch */
	uint64_t mget_msgs;       /* batch messages sent (one per machine
	                             with misses, more only when one would
	                             not fit) */
	uint64_t mget_spills;     /* values that did not fit in a batch reply,
	                             looked up separately */
	uint64_t mget_fallbacks;  /* batched keys looked up separately because
	                             their batch could not be sent or its
	                             owner refused it */
	uint64_t mget_chased;     /* keys the first read left unresolved, then
	                             looked up whole by one-sided READs (READ
	                             lookups; none is batched) */
	/* multi-get, owning side */
	uint64_t mget_served;      /* batch requests answered */
	uint64_t mget_served_keys; /* keys in them */
	uint64_t mget_bad;         /* malformed requests refused */
} farm_kv_stats;

/* The counters (approximate while loops run). */
/* @size: sizeof(*@out) as the caller was compiled, which the inline
 * farm_kv_stats_get passes. The struct only grows at its end: the
 * library fills the fields both know and zeroes any it does not. */
FARM_API void farm_kv_stats_read(const farm_kv *kv, farm_kv_stats *out,
                                 size_t size);
static inline void farm_kv_stats_get(const farm_kv *kv, farm_kv_stats *out)
{
	farm_kv_stats_read(kv, out, sizeof(*out));
}

/*
 * The hashtable under the store, on this machine (its lookups, puts and
 * their work), as a snapshot that can grow: the caller sets @out->size to
 * sizeof(farm_kv_table_stats) as it was compiled; the library fills that
 * many bytes at most (a later version only appends fields, so an older
 * caller gets the fields it knows) and sets @out->version. Counters are
 * since farm_kv_create, summed over loops, approximate while loops run.
 */
#define FARM_KV_TABLE_STATS_VERSION 1u
typedef struct farm_kv_table_stats {
	uint32_t size;    /* in: bytes of *out the caller has */
	uint32_t version; /* out: FARM_KV_TABLE_STATS_VERSION */
	/* Lookups (farm_kv_get, multi-get's first reads), the one-sided
	 * READs they issued (bucket pairs and overflow blocks), the reads
	 * retried (torn or locked), and of them the overflow chain reads. */
	uint64_t lookups, lookup_reads, lookup_retries, lookup_chain_reads;
	/* Puts and deletes this machine sent to their key's owner;
	 * neighbourhood hops (a pair moved to make room) and overflow
	 * blocks appended and freed by writes run here; transactions run
	 * here that combined several puts shipped to this owner. */
	uint64_t puts, dels, hops, chain_appends, chain_frees, combined_txns;
	/* Lookups that found their key, and those that did not. */
	uint64_t found, not_found;
} farm_kv_table_stats;

/* 0; -EINVAL (@kv or @out NULL, or @out->size smaller than the two
 * header fields). */
FARM_API FARM_MUST_CHECK int farm_kv_table_stats_get(const farm_kv *kv,
                                                     farm_kv_table_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* FARM_KV_H */
