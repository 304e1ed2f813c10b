/*
 * Internal to the hashtable (ht.h): the layout of buckets, chain blocks
 * and slots, the table's and each loop's state, and what the files share.
 *
 *   ht.c        the table: creation, loops, shards (jump hash), counters
 *   ht_get.c    lookups (farm_ht_get, farm_ht_get_many): lock-free reads
 *   ht_first.c  a lookup's first read alone (farm_ht_get_first)
 *   ht_pair.c   a bucket pair's image checked and searched in place
 *   ht_batch.c  batched local lookups (farm_ht_get_local_batch)
 *   ht_ship.c   writes shipped to a shard's owner, its handler and its
 *               flat-combining batches
 *   ht_write.c  the owner's put and delete in a transaction: buckets,
 *               hops, evictions, pulling chain pairs back
 *   ht_chain.c  overflow chains: free slots, appends, pops, unlinking
 *   ht_iter.c   scans of a local shard (iteration, usage)
 *
 * Bucket object data: [fwd u64][bwd u64][overflow fat pointer 24 B]
 * [H/2 slots]. Chain block data: [ver u64][pad u64... 32 B header with the
 * next block's fat pointer][BLK_SLOTS (2) slots]. Slot: [flags u8][klen u8]
 * [pad u16][vlen u32][key K][value V]. A slot whose value or key does not
 * fit holds a fat pointer to an object [klen u32][vlen u32][key][value] in
 * its value area (and, for a long key, the key's hash in its key area).
 */
#ifndef FARM_HASHTABLE_HT_INT_H
#define FARM_HASHTABLE_HT_INT_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "hashtable/ht.h"
#include "txn/txm.h"
#include "util/common.h"
#include "util/stat.h"

#define SLOT_USED     1u
#define SLOT_INDIRECT 2u
#define SLOT_LONGKEY  4u
#define BKT_HDR       40u /* fwd, bwd, overflow */
#define BLK_HDR       32u /* ver, next */
#define BLK_SLOTS     2u  /* pairs per overflow block (FaRM's two) */
#define HOP_REACH     32u /* buckets probed each way for a free slot */
#define MAX_LOOPS     64
#define POOL_BUFS     256u
#define MAX_BATCH     64u
#define READ_TRIES    1024u
/* ... and at least this long retrying before -EBUSY: a count alone ran
 * out within milliseconds when the owner holding a bucket's lock was
 * preempted on a loaded host. As for lock-free reads
 * (src/txn/read.c). */
#define READ_BUSY_NS (1000ull * 1000000ull)
#define LINE_TRIES   1000u

/* fields of a bucket's data */
#define B_FWD(b) ((b) + 0)
#define B_BWD(b) ((b) + 8)
#define B_OVF(b) ((b) + 16)

/* The operation needs an allocation before it can go on: the batch makes
 * it, then applies the operation again (which changed nothing before
 * returning these). */
#define NEED_IND 1
#define NEED_BLK 2

struct pending {
	struct pending *next;
	struct farm_msg_token tok;
	uint8_t op; /* 1 put, 2 del */
	uint32_t klen, vlen;
	int status;
	uint32_t cap;  /* bytes of buf (a recycled one may hold more) */
	uint64_t hash; /* the key's, taken once on arrival */
	uint8_t buf[]; /* key, then value */
};

struct shardq {
	struct pending *head, *tail; /* waiting */
	struct pending *batch;       /* in the transaction being committed */
	bool busy;
	farm_tx *tx;
	/* allocations the batch made for the operation being applied: an
	 * indirect pair object, a chain block */
	bool ind_ready, blk_ready;
	farm_fatptr ind_fp, blk_fp;
	void *ind_data, *blk_data;
	unsigned retries;     /* of the batch in the transaction */
	uint64_t retry_until; /* ns: a retryable batch runs again until */
};

struct htloop {
	farm_ht *h;
	farm_loop *loop;
	uint8_t *pool; /* registered: POOL_BUFS buffers of 2 buckets */
	farm_mr *mr;
	void *free_bufs;
	struct shardq *q; /* per shard (owned by this loop) */
	uint64_t rand;
	struct get_op *free_gets; /* recycled lookups (bucket buffers kept) */
	struct first_op *free_firsts; /* recycled farm_ht_get_first states */
	/* Recycled shipped writes (ht_ship.c, pend_get): a malloc and a
	 * free an update were a visible part of YCSB-A's instructions. */
	struct pending *free_pend;
	unsigned nfree_pend;
	struct farm_as_rcache rc; /* where shards are */
	struct ht_counters *lst;  /* this loop's counters (in farm_ht) */
	/* Lookups (farm_ht_get, farm_ht_get_first) started and not yet
	 * answered: each holds a pool buffer (a READ may still land in it)
	 * and comes back to this state on a later pass. */
	unsigned gets_out;
	/* farm_ht_detach ran (the loop's thread alone reads and writes
	 * it): lookups still out end -ECANCELED at their next step, a write
	 * batch in flight ends with its transaction (nothing after it
	 * starts), and the last of them frees this state
	 * (farm_ht_loop_release). */
	bool detached;
};

/* Counters by T_* (below). */
struct ht_counters {
	_Atomic uint64_t v[16];
};

/* Where slot i of a bucket pair's image is (ht_pair.c): its header in
 * one piece or two (hdr_n bytes at hdr, the rest at hdr2) split by a
 * line's version, and its key area in at most 3 pieces. */
struct ht_smap {
	uint16_t hdr, hdr2;
	bool hdr_whole;
	uint8_t hdr_n;
	uint8_t npieces;
	uint16_t key_at[3];
	uint8_t key_n[3];
	/* 8 key bytes from probe_key on lie in one piece, at probe_at
	 * (probe_key 255: no piece holds 8) */
	uint8_t probe_key;
	uint16_t probe_at;
	uint8_t nvpieces; /* 0: the value area is in more than 3 pieces */
	uint16_t val_at[3];
	uint8_t val_n[3];
	/* the lines of the pair image that hold the whole slot */
	uint16_t line_lo, line_hi;
};

struct farm_ht {
	farm_txm *txm;
	farm_as *as;
	/* as's configuration id (farm_as_config_word), read inline by every
	 * lookup twice (ht_config_id). */
	const _Atomic uint64_t *as_cfg;
	/* txm's serve word (farm_txm_serve_word), read inline by every
	 * lookup's answer (farm_ht_lease_checked). */
	_Atomic uint64_t *serve;
	farm_galloc *ga;
	farm_msg *msg;
	uint32_t me;
	unsigned H, spb; /* slots per bucket: H / 2 */
	uint32_t K, V, slot_bytes;
	uint32_t bucket_data, bucket_lines;
	uint32_t block_data, block_lines;
	struct ht_smap smap[16]; /* per slot of a pair: H of them */
	struct farm_ht_shard shards[FARM_HT_MAX_SHARDS];
	unsigned nshards;
	struct htloop *loops[MAX_LOOPS];
	/* Counters per loop index, each written by that loop's thread alone
	 * (hl_count, ht_count): lookups', shipped writes' (puts, deletes)
	 * and the owner's batches' (combined, hops, chain blocks). A locked
	 * add per counter was a tenth of a KV lookup's CPU, and on the write
	 * path it drains a store buffer full of stores that missed. Kept
	 * here, not in the htloop, so that farm_ht_stats_get can add them up
	 * while loops detach. */
	struct ht_counters lst[MAX_LOOPS];
	/* Shipped writes' continuations (ht_ship.c), recycled per loop
	 * index, each list touched by that loop's thread alone; here, not
	 * in the htloop, because a write's answer may come after its loop
	 * detached (ship does not need the attach); freed with the table. */
	struct put_ctx *free_puts[MAX_LOOPS];
	unsigned nfree_puts[MAX_LOOPS];
};

/* The address space's configuration id, as farm_as_config_id reads it
 * (acquire: pairs with the release store of the id in
 * farm_as_set_view_placed, as_view.c), without the call. */
static inline uint64_t ht_config_id(const farm_ht *h)
{
	return atomic_load_explicit(h->as_cfg, memory_order_acquire);
}

enum {
	T_LOOKUPS,
	T_READS,
	T_RETRIES,
	T_CHAIN,
	T_PUTS,
	T_DELS,
	T_HOPS,
	T_CHAIN_APPENDS,
	T_CHAIN_FREES,
	T_COMBINED,
	T_FOUND,
	T_NOTFOUND
};

static inline uint32_t home_of(uint64_t hash, uint32_t nb)
{
	return (uint32_t)((hash >> 11) % nb);
}

static inline uint8_t *slot_at(const farm_ht *h, uint8_t *bucket, unsigned i)
{
	return bucket + BKT_HDR + (size_t)i * h->slot_bytes;
}

static inline uint8_t *blk_slot(const farm_ht *h, uint8_t *blk, unsigned i)
{
	return blk + BLK_HDR + (size_t)i * h->slot_bytes;
}

static inline uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static inline farm_fatptr get_fat(const uint8_t *p)
{
	farm_fatptr f;
	memcpy(&f, p, sizeof(f));
	return f;
}

static inline void put_fat(uint8_t *p, farm_fatptr f)
{
	memcpy(p, &f, sizeof(f));
}

/* Does slot @s hold @key? (@hash for long keys; the full key of an
 * indirect long key is checked by the reader of its object.) */
static inline bool slot_match(const farm_ht *h, const uint8_t *s,
                              const void *key, uint32_t klen, uint64_t hash)
{
	if (!(s[0] & SLOT_USED) || s[1] != (klen > h->K ? 0 : klen))
		return false;
	if (klen > h->K)
		return (s[0] & SLOT_LONGKEY) && get64(s + 8) == hash;
	return memcmp(s + 8, key, klen) == 0;
}

static inline uint32_t slot_vlen(const uint8_t *s)
{
	uint32_t v;
	memcpy(&v, s + 4, 4);
	return v;
}

/* The home of the key in an occupied slot. */
static inline uint64_t slot_hash(const farm_ht *h, const uint8_t *s)
{
	if (s[0] & SLOT_LONGKEY)
		return get64(s + 8);
	return farm_ht_hash(s + 8, s[1]);
}

static inline struct htloop *hl_of(farm_ht *h, farm_loop *loop)
{
	unsigned i = farm_loop_index(loop);
	struct htloop *l = i < MAX_LOOPS ? h->loops[i] : NULL;
	return l && l->loop == loop ? l : NULL;
}

/* Count @n in this loop's counter @t, on the loop's thread: its one
 * writer. */
static inline void hl_count(struct htloop *l, unsigned t, uint64_t n)
{
	farm_stat_add_owned(&l->lst->v[t], n);
}

/* The same by loop index @li, for a loop that need not be attached (a
 * shipped write's caller), on that loop's thread: its one writer, as for
 * free_puts[@li]. */
static inline void ht_count(farm_ht *h, unsigned li, unsigned t, uint64_t n)
{
	farm_stat_add_owned(&h->lst[li].v[t], n);
}

static inline void *buf_get(struct htloop *l)
{
	void *p = l->free_bufs;
	if (p)
		memcpy(&l->free_bufs, p, sizeof(void *));
	return p;
}

static inline void buf_put(struct htloop *l, void *p)
{
	memcpy(p, &l->free_bufs, sizeof(void *));
	l->free_bufs = p;
}

struct wctx {
	farm_ht *h;
	struct htloop *l;
	struct shardq *q;
	const struct farm_ht_shard *sd;
	farm_tx *tx;
};

/* Where a pair added to a home's chain goes: the first free slot from the
 * head, else a new block linked after the last one. */
struct cfree {
	unsigned depth;   /* blocks a lookup reads to reach it (head: 1) */
	farm_fatptr blk;  /* the block with the free slot; null: a new block */
	unsigned slot;    /* in blk */
	farm_fatptr last; /* the last block (null: the chain is empty) */
};

/* ht.c */
/* The sizes of @h's buckets, slots and chain blocks and the pair map, for
 * the attributes @a (checked, defaults filled in): farm_ht_create's. */
void farm_ht_layout(farm_ht *h, const struct farm_ht_attr *a);
int farm_ht_check_key(const void *key, uint32_t klen);
const struct farm_ht_shard *farm_ht_shard_of(farm_ht *h, uint64_t hash,
                                             unsigned *idx);

/* ht_pair.c. @img: buckets b and b + 1 as one read copied them.
 * farm_ht_pair_check: 0 (and the pair's joint version in *@fwd), -EAGAIN
 * (being installed, or the buckets are of different commits: read again),
 * FARM_ECORRUPT (not buckets). farm_ht_pair_find: the slot (0..H-1, b's
 * first) holding @key, its 8-byte header ([flags][klen][pad][vlen]) in
 * @hdr; -1 when neither bucket has it (@hdr then undefined). */
void farm_ht_pair_map(farm_ht *h); /* fills h->smap, at creation */
int farm_ht_pair_check(const farm_ht *h, const uint8_t *img, uint64_t *fwd);
int farm_ht_pair_find(const farm_ht *h, const uint8_t *img, const void *key,
                      uint32_t klen, uint64_t hash, uint8_t hdr[8]);
/* farm_ht_pair_find over slots [@lo, @hi) only (a bucket of the pair:
 * 0..spb, or spb..H), whose lines alone need to be here. */
int farm_ht_pair_find_in(const farm_ht *h, const uint8_t *img, unsigned lo,
                         unsigned hi, const void *key, uint32_t klen,
                         uint64_t hash, uint8_t hdr[8]);
/* Does slot @slot of @img hold @key? Its header in @hdr when it does, as
 * farm_ht_pair_find. */
bool farm_ht_pair_slot_is(const farm_ht *h, const uint8_t *img, unsigned slot,
                          const void *key, uint32_t klen, uint64_t hash,
                          uint8_t hdr[8]);
/* @key searched in slots [@lo, @hi) of the bucket pair at @pair (the
 * table's memory, where installs may run) where they lie, as
 * farm_ht_pair_find_in searches an image, and a key found answered from
 * its slot alone: its inline value copied to @out (room for V bytes), its
 * length in *@vlen. The reads are checked afterwards: the slot's bucket
 * header as it was before any of them, every line holding the slot of
 * that header's version (a slot as of one instant of its bucket is a
 * committed state of the key, whatever the rest of the pair held then).
 * 0: found; -ENOENT: not found as the slots were read (which may have
 * been torn: only a whole, checked pair says a key is absent); -EAGAIN:
 * found but not answered so (its value in an object of its own, or the
 * bucket changed or was being installed while read). */
int farm_ht_pair_get_in(const farm_ht *h, const uint8_t *pair, unsigned lo,
                        unsigned hi, const void *key, uint32_t klen,
                        uint64_t hash, uint8_t *out, uint32_t *vlen);
/* @n bytes at @off in slot @slot of the pair (its value: off 8 + K), or of
 * one object's data at @off (the image may be @out's own buffer: bytes move
 * only toward its start). */
void farm_ht_pair_slot_read(const farm_ht *h, const uint8_t *img, unsigned slot,
                            uint32_t off, uint32_t n, void *out);
/* The first @n bytes of slot @slot's inline value, as
 * farm_ht_pair_slot_read(h, img, slot, 8 + K, n, out) but by the map
 * farm_ht_pair_map made (no line arithmetic per lookup). */
void farm_ht_pair_val_read(const farm_ht *h, const uint8_t *img, unsigned slot,
                           uint32_t n, void *out);
/* Slot @slot's inline value of @n bytes, where it lies in @img when one
 * piece holds it (most slots: no copy), else gathered to @img's start
 * (farm_ht_pair_val_read); valid while @img is. */
static inline const uint8_t *farm_ht_pair_val(const farm_ht *h, uint8_t *img,
                                              unsigned slot, uint32_t n)
{
	const struct ht_smap *m = &h->smap[slot];
	if (m->nvpieces && n <= m->val_n[0])
		return img + m->val_at[0];
	farm_ht_pair_val_read(h, img, slot, n, img);
	return img;
}
void farm_ht_img_read(const uint8_t *obj, uint32_t off, uint32_t n, void *out);
/* The home bucket's overflow chain pointer. */
farm_fatptr farm_ht_pair_overflow(const uint8_t *img);
/* farm_ht_check_key's checks, inline for a batch's keys. */
static inline int ht_key_check(const void *key, uint32_t klen)
{
	if (!key || klen == 0)
		return -EINVAL;
	return klen > FARM_HT_MAX_KEY ? -E2BIG : 0;
}

/*
 * A lookup's answer from what this machine read, found or absent, only
 * while its lease holds, as for the transaction layer's reads (read.c,
 * rd_check; farm_txm_serve_word): a machine paused past its lease, perhaps
 * removed and its shards served elsewhere by now, must not answer from
 * what its copy or an old READ says (a zombie's get right after SIGCONT
 * would return a value the new configuration has overwritten). Checked
 * after the copy; other statuses pass. Inline: every answer runs it.
 */
static inline int farm_ht_lease_checked(const farm_ht *h, int status)
{
	if (status != 0 && status != -ENOENT)
		return status;
	return farm_txm_lease_held(h->serve) ? status : FARM_ELEASE;
}

/* ht_get.c: free a loop's recycled lookups (at detach). */
void farm_ht_gets_free(struct htloop *l);
/* ht_ship.c: free a loop's recycled shipped writes (at its free), the
 * table's recycled continuations (at its destroy). */
void farm_ht_pend_free(struct htloop *l);
void farm_ht_puts_free(farm_ht *h);
/* ht.c: free a detached loop's state once nothing is out on it (no
 * lookup, no write batch): called by the detach and by each lookup's or
 * batch's end on a detached loop. Nothing for a loop still attached. */
void farm_ht_loop_release(struct htloop *l);

/*
 * The shards a window of lookups falls in (farm_ht_get_many's group,
 * farm_ht_get_local_batch's call), each resolved whole once: a shard's
 * buckets lie in one region, so one resolve answers for every key of the
 * shard in the window, where one per key cost about 37 instructions.
 * Four shards, by index; held for the window only, under its epoch, as
 * each key's resolve was. Zero-initialised.
 */
struct ht_shards {
	struct {
		const struct farm_ht_shard *sd; /* NULL: empty */
		int rc; /* the span's resolve, as farm_as_resolve_cached's */
		uint8_t *p;
		farm_mr_desc d;
	} e[4];
};

/* Where the pair @off bytes into shard @sd is, as farm_as_resolve_cached
 * answers for those 2 buckets (*@d set only when *@p is NULL), from the
 * shard's span resolved once (a span not resolved whole: the pair
 * alone). */
static inline int ht_shards_resolve(farm_ht *h, struct htloop *l,
                                    struct ht_shards *c,
                                    const struct farm_ht_shard *sd,
                                    uint64_t off, uint8_t **p, farm_mr_desc *d)
{
	unsigned j = (unsigned)(sd - h->shards) % 4u;
	uint64_t bb = 64u * h->bucket_lines;
	if (FARM_UNLIKELY(c->e[j].sd != sd)) {
		c->e[j].sd = sd;
		c->e[j].rc = farm_as_resolve_cached(h->as, &l->rc, sd->base,
		                                    (sd->nbuckets + 1ull) * bb,
		                                    &c->e[j].p, &c->e[j].d);
	}
	if (FARM_LIKELY(c->e[j].p)) { /* here: *@d is not read */
		*p = c->e[j].p + off;
		return 0;
	}
	if (c->e[j].rc)
		return farm_as_resolve_cached(h->as, &l->rc, sd->base + off,
		                              2 * bb, p, d);
	*p = NULL;
	*d = c->e[j].d;
	return 0;
}

/* The @n lines at @p on their way to the cache (a bucket's: @n is
 * bucket_lines), straight-line for the usual bucket sizes (a loop's
 * counter and branch cost as many instructions as its prefetches), in
 * ascending order as a search reads them. Always inline: to GCC a
 * prefetch has no side effect, so a function of prefetches alone that it
 * does not inline is pure, and its calls, whose result nobody uses, are
 * deleted (GCC 12 did so to this switch before it had the attribute: no
 * prefetch was left, and kv_local_bench's plain loop ran at half its
 * speed). */
static inline __attribute__((always_inline)) void
ht_prefetch_lines(const uint8_t *p, unsigned n)
{
#define PF(i) __builtin_prefetch(p + 64u * (i), 0, 3)
	/* clang-format off */
	switch (n) {
	case 3: PF(0); PF(1); PF(2); return;
	case 4: PF(0); PF(1); PF(2); PF(3); return;
	case 5: PF(0); PF(1); PF(2); PF(3); PF(4); return;
	case 6: PF(0); PF(1); PF(2); PF(3); PF(4); PF(5); return;
	default:
		for (unsigned l = 0; l < n; l++)
			PF(l);
	}
	/* clang-format on */
#undef PF
}

/* ht_get.c and ht_first.c: what every lookup shares. */
/* A lookup of @l answered: the last one out of a detached loop (lookups
 * and write batches) frees its state (farm_ht_loop_release). */
static inline void lookup_out_end(struct htloop *l)
{
	if (--l->gets_out == 0)
		farm_ht_loop_release(l);
}

/* A lookup's next step after its loop was detached: none, it ends
 * -ECANCELED (its buffer and counters are the detached state's, freed
 * once it is answered). */
static inline bool lookup_cancelled(const struct htloop *l)
{
	return l->detached;
}

/* A read's error as a lookup's: a read that finds no region where the
 * table says the shard's memory is (-ENOENT from the address space) must
 * not answer "absent", which -ENOENT means to a lookup's caller. */
static inline int read_err(int status)
{
	return status == -ENOENT ? FARM_ECORRUPT : status;
}

/* What every lookup starts with (ht_get.c): its arguments checked, its
 * loop state, the key's hash (taken here unless @hashed: the caller's
 * *@hash) and shard. */
int farm_ht_lookup_prep(farm_ht *h, farm_loop *loop, const void *key,
                        uint32_t klen, bool has_cont, struct htloop **l,
                        bool hashed, uint64_t *hash,
                        const struct farm_ht_shard **sd);
/* An indirect pair's object, [klen][vlen][key][value]: whether it holds
 * @key (its lengths in *@kl, *@vl either way). */
bool farm_ht_indirect_match(const uint8_t *obj, uint32_t olen,
                            const uint8_t *key, uint32_t klen, uint32_t *kl,
                            uint32_t *vl);
/* ht_first.c: the loop's free farm_ht_get_first states, freed. */
void farm_ht_firsts_free(struct htloop *l);

/* ht_ship.c: the owner's handler of shipped writes (FARM_MSGT_HT_OP). */
void farm_ht_h_op(farm_loop *loop, const farm_msg_in *in, void *arg);
/* ht_ship.c, at the detach: writes queued on @l that no transaction
 * took yet are answered -ECANCELED and freed. */
void farm_ht_writes_detach(struct htloop *l);
/* ht_ship.c: whether a write batch of @l is in flight (its transaction's
 * allocation or commit will come back to @l). */
bool farm_ht_writes_out(const struct htloop *l);

/* ht_write.c: apply one operation in the batch's transaction (@hash:
 * farm_ht_hash of the key); 0, an error, or NEED_IND / NEED_BLK (nothing
 * changed). */
int farm_ht_apply_put(struct wctx *w, const uint8_t *key, uint32_t klen,
                      uint64_t hash, const uint8_t *val, uint32_t vlen);
int farm_ht_apply_del(struct wctx *w, const uint8_t *key, uint32_t klen,
                      uint64_t hash);
/* The transaction's writable copy / read-only view of bucket @b. */
int farm_ht_wbucket(struct wctx *w, uint32_t b, uint8_t **out);
int farm_ht_rbucket(struct wctx *w, uint32_t b, const uint8_t **out);
/* Bump the joint versions of the pairs around bucket @x. */
int farm_ht_bump_pairs(struct wctx *w, uint32_t x);

/* ht_chain.c */
int farm_ht_stamp_block(struct wctx *w, uint8_t *blk, uint32_t home);
int farm_ht_chain_free(struct wctx *w, uint32_t home, unsigned limit,
                       struct cfree *cf);
int farm_ht_chain_take(struct wctx *w, uint32_t home, const struct cfree *cf,
                       uint8_t **blk, uint8_t **slot);
int farm_ht_unlink_block(struct wctx *w, uint32_t home, farm_fatptr blkp,
                         farm_fatptr prev, farm_fatptr next);
bool farm_ht_block_empty(const farm_ht *h, uint8_t *blk);
int farm_ht_chain_last(struct wctx *w, uint32_t home, farm_fatptr *last,
                       farm_fatptr *prev, unsigned *nblk);
int farm_ht_chain_pop(struct wctx *w, uint32_t home, farm_fatptr last,
                      farm_fatptr prev, uint8_t *s);

#endif
