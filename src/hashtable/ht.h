/*
 * The KV store's hashtable: FaRM's chained associative hopscotch hashing
 * (NSDI'14 section 4) over transactions and lock-free reads.
 *
 * A table is a set of shards, each an array of bucket objects on one
 * machine; a key's hash picks a shard by consistent (jump) hashing and a
 * home bucket b in it. A bucket holds H/2 slots; a key lives in its home
 * bucket or the next one, so a lookup is one one-sided READ of buckets b
 * and b+1 (adjacent objects), validated object by object and by the pair's
 * joint version: every transaction that changes which keys bucket x holds
 * bumps the joint versions of (x-1, x) and (x, x+1), kept in both buckets
 * of each pair (x's bwd and fwd fields); an update in place bumps none.
 * When no slot in reach can be freed by hopping,
 * a key goes to its home bucket's overflow chain (blocks of 2 slots,
 * allocated next to the shard) instead of resizing.
 *
 * Slots hold a key up to key_inline bytes and a value up to val_inline
 * bytes inline; larger values (and keys) go into a separate object named
 * by a fat pointer in the slot (a long key leaves its hash in the slot).
 *
 * Writes (put, delete) are shipped to the loop that serves the shard's
 * region on its machine, which runs them as single-machine transactions;
 * operations that arrive while one is committing are combined into the
 * next transaction (flat combining). Internal; not installed.
 */
#ifndef FARM_HASHTABLE_HT_H
#define FARM_HASHTABLE_HT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <farm/addr.h>
#include <farm/msg.h>
#include <farm/txn.h>

#include "addrspace/addrspace.h"
#include "alloc/galloc.h"

#define FARM_MSGT_HT_OP 0xf130u /* writes shipped to a shard's owner */

#define FARM_HT_MAX_KEY    256u
#define FARM_HT_MAX_VALUE  (64u << 10)
#define FARM_HT_MAX_SHARDS 256u

typedef struct farm_ht farm_ht;

struct farm_ht_attr {
	unsigned neighborhood; /* H: even, 2..16 (0: 8) */
	uint32_t key_inline;   /* bytes of key in a slot, 8..64 (0: 16) */
	uint32_t val_inline;   /* bytes of value in a slot, 24..1024 (0: 32) */
};

struct farm_ht_shard {
	uint32_t machine;
	uint32_t nbuckets;
	farm_gaddr base; /* bucket 0; bucket nbuckets is the last one's pair */
};

struct farm_ht_stats {
	uint64_t lookups, lookup_reads, lookup_retries, lookup_chain_reads;
	uint64_t puts, dels, hops, chain_appends, chain_frees, combined_txns;
	uint64_t found, not_found;
};

/* Every machine creates its handle the same way, before the loops run. */
int farm_ht_create(farm_txm *txm, farm_as *as, farm_galloc *ga, farm_msg *msg,
                   const struct farm_ht_attr *attr, farm_ht **out);
void farm_ht_destroy(farm_ht *h);
/* On each loop that uses the table (its thread), before using it. */
int farm_ht_attach(farm_ht *h, farm_loop *loop);
/* Stop using the table on @loop (its thread): nothing new starts on it
 * (-EINVAL), and a write shipped to it later (as its shard's owner) is
 * answered -ECANCELED, nothing written. What is in flight on it ends
 * once, on later passes of the
 * loop (or at its close): a lookup -ECANCELED; a write it serves as its
 * shard's owner -ECANCELED, nothing of it written, while no commit of it
 * began (queued behind a batch, or its batch's transaction still
 * allocating: dropped), else with its batch's commit outcome (0:
 * written; a retryable one: not written, -ECANCELED). The loop's state
 * is freed when the last of them ends. */
void farm_ht_detach(farm_ht *h, farm_loop *loop);

/* Bytes a bucket takes (whole lines), and slots per bucket. */
uint32_t farm_ht_bucket_bytes(const farm_ht *h);
unsigned farm_ht_slots_per_bucket(const farm_ht *h);
/* Bytes an overflow chain block takes (whole lines; 2 slots). */
uint32_t farm_ht_block_bytes(const farm_ht *h);

/* Make a shard of @nbuckets buckets on this machine (an array allocated
 * on @loop's machine: empty buckets are zero objects). */
typedef void (*farm_ht_shard_fn)(farm_loop *loop, void *ctx, int status,
                                 struct farm_ht_shard sd);
int farm_ht_make_shard(farm_ht *h, farm_loop *loop, uint32_t nbuckets,
                       farm_ht_shard_fn cont, void *ctx);
/* The same in a region of its own (farm_galloc_alloc_array_alone): the
 * shard's serving then moves with that region's primary alone, so shards
 * spread over machines as regions do (growth moves some to a new
 * machine). */
int farm_ht_make_shard_alone(farm_ht *h, farm_loop *loop, uint32_t nbuckets,
                             farm_ht_shard_fn cont, void *ctx);
/* The table's shards, in the same order on every machine. */
int farm_ht_set_shards(farm_ht *h, const struct farm_ht_shard *sd, unsigned n);

/* get: @status 0 and the value (valid during the call), -ENOENT, or an
 * error. */
typedef void (*farm_ht_get_fn)(farm_loop *loop, void *ctx, int status,
                               const void *val, uint32_t len);
int farm_ht_get(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                farm_ht_get_fn cont, void *ctx);
/* put (insert or update) and delete (-ENOENT when absent). -EAGAIN
 * (retryable, nothing written) when the machine the shard was shipped to
 * does not serve it: not yet, or no longer (recovery or growth moved it,
 * also after the write was accepted there, before it was applied).
 * -ECANCELED: the owner's serving loop was detached (farm_ht_detach)
 * before the write's commit began (also before the write reached it),
 * nothing written; not retried, as the write would reach that loop
 * again until it is attached again or the shard moves; or a loop closed
 * with the write in flight (this one's, or the owner's while its commit
 * was out: farm_msg and farm_tx_commit say so at a close), when it may
 * have been written. */
int farm_ht_put(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                const void *val, uint32_t vlen, farm_op_fn cont, void *ctx);
int farm_ht_del(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                farm_op_fn cont, void *ctx);

/*
 * farm_ht_serves() - whether this machine serves shard @shard's writes and
 * shipped lookups: it is the primary of the region that holds the shard's
 * buckets. That is the machine that made the shard, or, after it failed,
 * the machine recovery promoted the region at (src/txn/recover.c), so a
 * dead machine's shard is taken over with its regions.
 */
bool farm_ht_serves(farm_ht *h, unsigned shard);

/* Keys and values of a shard stored on this machine, read in place
 * (a consistent view only while no write runs on it), pairs in objects of
 * their own included (an object freed meanwhile is skipped). @fn returns
 * false to stop. Returns the pairs visited, or an error. */
typedef bool (*farm_ht_iter_fn)(void *ctx, const void *key, uint32_t klen,
                                const void *val, uint32_t vlen);
long farm_ht_iterate_local(farm_ht *h, unsigned shard, farm_ht_iter_fn fn,
                           void *ctx);
/* The same from the home bucket of @key (NULL: the first bucket) to the
 * end of the shard, in bucket order (a short scan: kv_bench's YCSB E);
 * -EINVAL also for a bad key. */
long farm_ht_iterate_local_from(farm_ht *h, unsigned shard, const void *key,
                                uint32_t klen, farm_ht_iter_fn fn, void *ctx);

void farm_ht_stats_get(farm_ht *h, struct farm_ht_stats *out);

/*
 * farm_ht_usage_local() - what a shard stored on this machine holds, by a
 * scan of its buckets and chains (consistent only while no write runs on
 * it): occupancy = pairs_in_buckets / slots (pairs_in_chains overflowed),
 * space utilization = data_bytes (keys and values, indirect values by
 * their length) / table_bytes (buckets and chain blocks, whole lines),
 * chain lengths in blocks. -EINVAL (not a local shard), FARM_ECORRUPT (a
 * bucket or chain block is not where the table says), -ENOMEM.
 */
struct farm_ht_usage {
	uint64_t buckets, slots;
	uint64_t pairs_in_buckets, pairs_in_chains;
	uint64_t chains, chain_blocks, longest_chain;
	uint64_t data_bytes, table_bytes;
};
int farm_ht_usage_local(farm_ht *h, unsigned shard, struct farm_ht_usage *u);

/* A key's hash: it picks the key's shard and home bucket and is kept in a
 * long key's slot, so every machine of a cluster must compute the same
 * one (a change to it is a change of FARM_WIRE_VERSION). Keys are taken
 * eight bytes at a time, each word folded into the state by a multiply
 * and a shift, then finished by murmur3's fmix64 (full avalanche: the
 * shard and home come from the high bits). Two keys of one length
 * differing in one word always differ before the finish, as each step
 * is a bijection of the state. Native words: machines of a cluster
 * share a byte order already (every one-sided layout is native). */
#define FARM_HT_HASH_SEED 0x9e3779b97f4a7c15ull
#define FARM_HT_HASH_MUL  0xff51afd7ed558ccdull

static inline uint64_t farm_ht_hash_step(uint64_t x, uint64_t w)
{
	x = (x ^ w) * FARM_HT_HASH_MUL;
	return x ^ (x >> 29);
}

static inline uint64_t farm_ht_hash_fin(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static inline uint64_t farm_ht_hash_ld8(const uint8_t *p)
{
	uint64_t w;
	memcpy(&w, p, 8);
	return w;
}

/* The 1..7 bytes of a key shorter than a word, as one word: every byte
 * read, none outside the key (two overlapping 4-byte loads, or the
 * first, middle and last byte), one-to-one for a given length. */
static inline uint64_t farm_ht_hash_short(const uint8_t *p, uint32_t n)
{
	if (n >= 4) {
		uint32_t a, b;
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		return a | (uint64_t)b << 32;
	}
	return p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16;
}

static inline uint64_t farm_ht_hash(const void *key, uint32_t klen)
{
	const uint8_t *p = key;
	uint64_t x = FARM_HT_HASH_SEED ^ klen;
	if (klen == 16) /* the default key: two steps, no loop */
		return farm_ht_hash_fin(farm_ht_hash_step(
		        farm_ht_hash_step(x, farm_ht_hash_ld8(p)),
		        farm_ht_hash_ld8(p + 8)));
	if (klen < 8)
		return farm_ht_hash_fin(
		        klen ? farm_ht_hash_step(x, farm_ht_hash_short(p, klen))
		             : x);
	uint32_t i = 0;
	for (; i + 8 <= klen; i += 8)
		x = farm_ht_hash_step(x, farm_ht_hash_ld8(p + i));
	/* A partial last word: the key's last eight bytes, overlapping the
	 * word before (one-to-one for a given length). */
	if (i < klen)
		x = farm_ht_hash_step(x, farm_ht_hash_ld8(p + klen - 8));
	return farm_ht_hash_fin(x);
}

/* The shard (index in the table's list of @nshards) a key's hash picks:
 * jump consistent hashing. */
unsigned farm_ht_shard_index(uint64_t hash, unsigned nshards);

/*
 * farm_ht_get_many() - farm_ht_get for each of @n keys (at most
 * FARM_HT_BATCH_MAX), started together in the stages of G-Opt's group
 * prefetching (Kalia et al., NSDI'15): every key hashed (four at a time),
 * its shard and home found, then every bucket pair's read issued, the
 * local pairs prefetched back to back and the remote READs batched by the
 * loop, and the local lookups completed together on a later pass. Each
 * lookup is then farm_ht_get's own, validation, chains and retries alike.
 * rcs[i] is what farm_ht_get would have returned for keys[i]: 0 (@cont
 * runs exactly once, with ctxs[i], on @loop) or an error (it never runs for
 * that key). Returns 0, -EINVAL (NULL @h, @cont or array, a loop not
 * attached: nothing started) or -E2BIG (@n too large).
 */
int farm_ht_get_many(farm_ht *h, farm_loop *loop, unsigned n,
                     const void *const *keys, const uint32_t *klens,
                     farm_ht_get_fn cont, void *const *ctxs, int *rcs);

/*
 * farm_ht_get_first() - the first read of a lookup, and nothing more: one
 * one-sided READ of buckets b and b + 1 (a line-atomic copy when the shard
 * is local), validated as farm_ht_get validates it, and, when the key is
 * found there with its value in a separate object, the lock-free read of
 * that object. It never follows an overflow chain and never retries.
 * @cont runs exactly once, always on a later pass of @loop (never inside
 * this call), with 0 and the value (valid during the call), -ENOENT (the
 * key is in neither bucket and the home bucket has no overflow chain),
 * FARM_HT_UNRESOLVED (a positive status: the key may be in the chain, or
 * the read did not validate or needs a retry; a full lookup, for example
 * by the shard's owner, decides), or an error of the read (FARM_EPEERDEAD,
 * ...). Returns 0, or -EINVAL / -E2BIG for bad arguments, -ENOENT (no
 * shards), -EAGAIN (this loop has too many lookups in flight: retry after
 * one completes), -ENOMEM, or the read's error (then @cont never runs).
 */
#define FARM_HT_UNRESOLVED 1
int farm_ht_get_first(farm_ht *h, farm_loop *loop, const void *key,
                      uint32_t klen, farm_ht_get_fn cont, void *ctx);
/* The same with the key's farm_ht_hash() taken already by the caller
 * (@hash must be it: the KV store's multi-get hashes each key once, to
 * find its shard). */
int farm_ht_get_first_hashed(farm_ht *h, farm_loop *loop, const void *key,
                             uint32_t klen, uint64_t hash, farm_ht_get_fn cont,
                             void *ctx);

/*
 * farm_ht_get_local_batch() - up to FARM_HT_BATCH_MAX lookups of keys in
 * this machine's shards, done now, in the group-prefetch shape of G-Opt
 * (Kalia et al., NSDI'15) over the lock-free read farm_ht_get does, in
 * groups of FARM_HT_BATCH_GROUP keys: every key of a group hashed and its
 * home bucket prefetched first, then each home bucket searched in place
 * (a key not found there: its other bucket prefetched and searched a group
 * later) and the slot found copied line-atomically and validated alone
 * (its bucket's header and per-line versions); a key in neither bucket so
 * has its pair copied
 * line-atomically, validated (per-line versions, joint version) and
 * searched (and the home's chain walked, block by block, while its blocks
 * are here), then the answers checked against the configuration and the
 * lease once for the call. No
 * continuation, no loop pass: the misses of the group overlap instead of one
 * lookup's each.
 *
 * Each @keys[i] gets its status: 0 (found: @val, @vlen name the value, in
 * @scratch, valid until @scratch is reused), -ENOENT (in neither bucket nor
 * the home's chain), FARM_HT_UNRESOLVED (a positive status: not a local
 * shard, a chain block elsewhere or newer than the pair, a pair in an
 * object of its own, being written, or the configuration changed:
 * farm_ht_get decides), FARM_ELEASE, or
 * -EINVAL / -E2BIG for a bad key, FARM_ECORRUPT. @scratch: @n times
 * farm_ht_batch_bytes(), 64-byte aligned. Returns 0, or -EINVAL (bad
 * arguments, or the loop is not attached), -E2BIG (@n too large).
 */
#define FARM_HT_BATCH_MAX 64u
/* Keys whose home buckets are prefetched together (G-Opt's group): a call
 * of more keys takes them a group at a time. */
#define FARM_HT_BATCH_GROUP 16u
struct farm_ht_lkey {
	const void *key;   /* in */
	uint32_t klen;     /* in */
	uint32_t vlen;     /* out */
	int status;        /* out */
	const void *val;   /* out */
	const uint8_t *lp; /* private: the pair here */
	uint64_t hash;     /* in for the _hashed call, else private */
};
uint32_t farm_ht_batch_bytes(const farm_ht *h);
int farm_ht_get_local_batch(farm_ht *h, farm_loop *loop,
                            struct farm_ht_lkey *keys, unsigned n,
                            uint8_t *scratch);
/* As farm_ht_get_local_batch, with each @keys[i].hash already
 * farm_ht_hash of its key (a caller that hashed the keys to route them:
 * the KV store's multi-get), not hashed again. */
int farm_ht_get_local_batch_hashed(farm_ht *h, farm_loop *loop,
                                   struct farm_ht_lkey *keys, unsigned n,
                                   uint8_t *scratch);

/* The longest value farm_ht_put takes with a @klen-byte key: the table's
 * limit, or less when key and value would not fit one shipped message
 * (longer ones fail with -E2BIG). 0 for a bad @klen. */
uint32_t farm_ht_max_value(const farm_ht *h, uint32_t klen);

#endif
