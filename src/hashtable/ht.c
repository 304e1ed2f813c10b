/*
 * Chained associative hopscotch hashing (ht.h).
 *
 * Bucket object data: [fwd u64][bwd u64][overflow fat pointer 24 B]
 * [H/2 slots]. Chain block data: [ver u64][pad u64... 32 B header with the
 * next block's fat pointer][BLK_SLOTS (2) slots]. Slot: [flags u8][klen u8]
 * [pad u16][vlen u32][key K][value V]. A slot whose value or key does not
 * fit holds a fat pointer to an object [klen u32][vlen u32][key][value] in
 * its value area (and, for a long key, the key's hash in its key area).
 */
#include "hashtable/ht.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "util/common.h"
#include "util/lines.h"
#include "util/log.h"

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
 * preempted on a loaded host (kv_bench_smoke in a flake-hunt run at
 * load 15). As for lock-free reads (src/txn/read.c). */
#define READ_BUSY_NS (1000ull * 1000000ull)
#define LINE_TRIES   1000u

struct pending {
	struct pending *next;
	struct farm_msg_token tok;
	uint8_t op; /* 1 put, 2 del */
	uint32_t klen, vlen;
	int status;
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
	unsigned retries;
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
	struct farm_as_rcache rc; /* where shards are */
};

struct farm_ht {
	farm_txm *txm;
	farm_as *as;
	farm_galloc *ga;
	farm_msg *msg;
	uint32_t me;
	unsigned H, spb; /* slots per bucket: H / 2 */
	uint32_t K, V, slot_bytes;
	uint32_t bucket_data, bucket_lines;
	uint32_t block_data, block_lines;
	struct farm_ht_shard shards[FARM_HT_MAX_SHARDS];
	unsigned nshards;
	struct htloop *loops[MAX_LOOPS];
	struct {
		_Atomic uint64_t v[16];
	} st;
};

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

static void st_add(farm_ht *h, int i, uint64_t n)
{
	atomic_fetch_add_explicit(&h->st.v[i], n, memory_order_relaxed);
}

/* ---- hashing and layout
 * ------------------------------------------------------ */

uint64_t farm_ht_hash(const void *key, uint32_t klen)
{
	const uint8_t *p = key;
	uint64_t x = 0xcbf29ce484222325ull ^ klen;
	for (uint32_t i = 0; i < klen; i++)
		x = (x ^ p[i]) * 0x100000001b3ull;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Jump consistent hash (Lamping and Veach): shard of @key among @n. */
static unsigned jump(uint64_t key, unsigned n)
{
	int64_t b = -1, j = 0;
	while (j < (int64_t)n) {
		b = j;
		key = key * 2862933555777941757ull + 1;
		j = (int64_t)((double)(b + 1) * ((double)(1ll << 31) /
		                                 (double)((key >> 33) + 1)));
	}
	return (unsigned)b;
}

static uint32_t home_of(uint64_t hash, uint32_t nb)
{
	return (uint32_t)((hash >> 11) % nb);
}

static uint8_t *slot_at(const farm_ht *h, uint8_t *bucket, unsigned i)
{
	return bucket + BKT_HDR + (size_t)i * h->slot_bytes;
}

static uint8_t *blk_slot(const farm_ht *h, uint8_t *blk, unsigned i)
{
	return blk + BLK_HDR + (size_t)i * h->slot_bytes;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static farm_fatptr get_fat(const uint8_t *p)
{
	farm_fatptr f;
	memcpy(&f, p, sizeof(f));
	return f;
}

static void put_fat(uint8_t *p, farm_fatptr f)
{
	memcpy(p, &f, sizeof(f));
}

/* fields of a bucket's data */
#define B_FWD(b) ((b) + 0)
#define B_BWD(b) ((b) + 8)
#define B_OVF(b) ((b) + 16)

/* Does slot @s hold @key? (@hash for long keys; the full key of an
 * indirect long key is checked by the reader of its object.) */
static bool slot_match(const farm_ht *h, const uint8_t *s, const void *key,
                       uint32_t klen, uint64_t hash)
{
	if (!(s[0] & SLOT_USED) || s[1] != (klen > h->K ? 0 : klen))
		return false;
	if (klen > h->K)
		return (s[0] & SLOT_LONGKEY) && get64(s + 8) == hash;
	return memcmp(s + 8, key, klen) == 0;
}

static uint32_t slot_vlen(const uint8_t *s)
{
	uint32_t v;
	memcpy(&v, s + 4, 4);
	return v;
}

/* The home of the key in an occupied slot. */
static uint64_t slot_hash(const farm_ht *h, const uint8_t *s)
{
	if (s[0] & SLOT_LONGKEY)
		return get64(s + 8);
	return farm_ht_hash(s + 8, s[1]);
}

/* ---- creation
 * -------------------------------------------------------------------- */

int farm_ht_create(farm_txm *txm, farm_as *as, farm_galloc *ga, farm_msg *msg,
                   const struct farm_ht_attr *attr, farm_ht **out);

uint32_t farm_ht_bucket_bytes(const farm_ht *h)
{
	return 64u * h->bucket_lines;
}
unsigned farm_ht_slots_per_bucket(const farm_ht *h)
{
	return h->spb;
}
uint32_t farm_ht_block_bytes(const farm_ht *h)
{
	return 64u * h->block_lines;
}

static struct htloop *hl_of(farm_ht *h, farm_loop *loop)
{
	unsigned i = farm_loop_index(loop);
	struct htloop *l = i < MAX_LOOPS ? h->loops[i] : NULL;
	return l && l->loop == loop ? l : NULL;
}

static void *buf_get(struct htloop *l)
{
	void *p = l->free_bufs;
	if (p)
		memcpy(&l->free_bufs, p, sizeof(void *));
	return p;
}

static void buf_put(struct htloop *l, void *p)
{
	memcpy(p, &l->free_bufs, sizeof(void *));
	l->free_bufs = p;
}

/* ---- lookups (any machine, lock-free)
 * ----------------------------------------- */

struct get_op {
	farm_ht *h;
	struct htloop *l;
	uint8_t key[FARM_HT_MAX_KEY];
	uint32_t klen;
	uint64_t hash;
	const struct farm_ht_shard *sd;
	uint32_t b;
	uint8_t *img; /* 2 buckets, from the pool */
	uint8_t *d0, *d1;
	unsigned tries;
	uint64_t busy_t0; /* ns of the first retry (0: none yet) */
	uint64_t fwd;     /* the pair version seen */
	farm_ht_get_fn cont;
	void *ctx;
	/* chain walk / indirect value */
	uint8_t *obuf;
	uint32_t olen;
	farm_fatptr next;
	int stage;     /* 0 buckets, 1 chain block, 2 indirect value */
	farm_lf_op ep; /* an epoch operation from start to continuation */
	struct get_op *next_free;
	const uint8_t *lp; /* local shard: the buckets, copied when due */
};

static void get_start(struct get_op *g);

static void get_end(struct get_op *g, int status, const void *val, uint32_t len)
{
	farm_ht *h = g->h;
	st_add(h, status == 0 ? T_FOUND : T_NOTFOUND, 1);
	farm_loop *loop = g->l->loop;
	farm_ht_get_fn cont = g->cont;
	void *ctx = g->ctx;
	cont(loop, ctx, status, val, len);
	farm_lf_end(&g->ep);
	if (g->img)
		buf_put(g->l, g->img);
	g->img = NULL;
	free(g->obuf);
	g->obuf = NULL;
	/* Recycled with its bucket buffers: a lookup allocates nothing in
	 * the steady state. */
	g->next_free = g->l->free_gets;
	g->l->free_gets = g;
}

static void get_retry(struct get_op *g)
{
	st_add(g->h, T_RETRIES, 1);
	uint64_t now = farm_now_ns();
	if (!g->busy_t0)
		g->busy_t0 = now;
	if (++g->tries >= READ_TRIES && now - g->busy_t0 >= READ_BUSY_NS) {
		get_end(g, -EBUSY, NULL, 0);
		return;
	}
	unsigned k = FARM_MIN(g->tries, 10u);
	uint64_t spins = farm_rand64(&g->l->rand) & ((1ull << k) - 1);
	for (uint64_t i = 0; i < spins; i++)
		farm_cpu_relax();
	g->stage = 0;
	get_start(g);
}

/* An indirect pair's object, [klen][vlen][key][value]: whether it holds
 * @key (its lengths in *@kl, *@vl either way). */
static bool indirect_match(const uint8_t *obj, uint32_t olen,
                           const uint8_t *key, uint32_t klen, uint32_t *kl,
                           uint32_t *vl)
{
	if (olen < 8) {
		*kl = *vl = 0;
		return false;
	}
	memcpy(kl, obj, 4);
	memcpy(vl, obj + 4, 4);
	return *kl == klen && 8ull + *kl + *vl <= olen &&
	       memcmp(obj + 8, key, *kl) == 0;
}

static void get_read_obj(struct get_op *g, farm_fatptr p, int stage);

/* Found in slot @s: inline value, or the object it names. */
static void get_found(struct get_op *g, const uint8_t *s)
{
	if (!(s[0] & SLOT_INDIRECT)) {
		get_end(g, 0, s + 8 + g->h->K, slot_vlen(s));
		return;
	}
	get_read_obj(g, get_fat(s + 8 + g->h->K), 2);
}

/* Look for the key in a chain block's data (@blk); follow its chain. */
static void get_scan_block(struct get_op *g, uint8_t *blk)
{
	farm_ht *h = g->h;
	/* A block written after the buckets we read: our view is mixed. */
	if (get64(blk) > g->fwd) {
		get_retry(g);
		return;
	}
	for (unsigned i = 0; i < BLK_SLOTS; i++) {
		uint8_t *s = blk_slot(h, blk, i);
		if (slot_match(h, s, g->key, g->klen, g->hash)) {
			get_found(g, s);
			return;
		}
	}
	farm_fatptr next = get_fat(blk + 8);
	if (next.addr)
		get_read_obj(g, next, 1);
	else
		get_end(g, -ENOENT, NULL, 0);
}

static void obj_read_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct get_op *g = ctx;
	if (status == FARM_EFREED || status == -EBUSY) {
		get_retry(g); /* unlinked or rewritten meanwhile: start over */
		return;
	}
	if (status) {
		get_end(g, status, NULL, 0);
		return;
	}
	if (g->stage == 1) {
		get_scan_block(g, g->obuf);
		return;
	}
	uint32_t kl, vl;
	if (!indirect_match(g->obuf, g->olen, g->key, g->klen, &kl, &vl)) {
		/* A long key whose hash matched another's, or a stale slot. */
		get_end(g, kl == g->klen ? -EBUSY : -ENOENT, NULL, 0);
		return;
	}
	get_end(g, 0, g->obuf + 8 + kl, vl);
}

static void get_read_obj(struct get_op *g, farm_fatptr p, int stage)
{
	if (!p.addr || p.size == 0 || p.size > FARM_TX_MAX_SIZE) {
		get_end(g, FARM_ECORRUPT, NULL, 0);
		return;
	}
	free(g->obuf);
	g->obuf = malloc(p.size);
	g->olen = p.size;
	g->stage = stage;
	if (!g->obuf) {
		get_end(g, -ENOMEM, NULL, 0);
		return;
	}
	st_add(g->h, T_READS, 1);
	if (stage == 1)
		st_add(g->h, T_CHAIN, 1);
	int rc = farm_lf_read(g->h->txm, g->l->loop, p.addr, p.size,
	                      p.incarnation, g->obuf, obj_read_done, g);
	if (rc)
		get_end(g, rc, NULL, 0);
}

/* Both buckets read: validate, then search. */
static void get_buckets(struct get_op *g)
{
	farm_ht *h = g->h;
	unsigned L = h->bucket_lines;
	uint64_t v, w;
	int rc0 = obj_check(g->img, L, UINT64_MAX, &v, &w);
	int rc1 = obj_check(g->img + 64u * L, L, UINT64_MAX, &v, &w);
	if (rc0 == -EAGAIN || rc1 == -EAGAIN) {
		get_retry(g);
		return;
	}
	if (rc0 || rc1) {
		get_end(g, FARM_ECORRUPT, NULL, 0); /* not a bucket */
		return;
	}
	obj_unpack(g->img, h->bucket_data, g->d0);
	obj_unpack(g->img + 64u * L, h->bucket_data, g->d1);
	if (get64(B_FWD(g->d0)) != get64(B_BWD(g->d1))) {
		get_retry(g); /* the two come from different commits */
		return;
	}
	g->fwd = get64(B_FWD(g->d0));
	for (unsigned i = 0; i < 2 * h->spb; i++) {
		uint8_t *s = slot_at(h, i < h->spb ? g->d0 : g->d1, i % h->spb);
		if (slot_match(h, s, g->key, g->klen, g->hash)) {
			get_found(g, s);
			return;
		}
	}
	farm_fatptr ovf = get_fat(B_OVF(g->d0));
	if (ovf.addr)
		get_read_obj(g, ovf, 1);
	else
		get_end(g, -ENOENT, NULL, 0);
}

static void bucket_read_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct get_op *g = ctx;
	if (status == FARM_EFLUSHED) {
		get_retry(g);
		return;
	}
	if (status) {
		get_end(g, status, NULL, 0);
		return;
	}
	get_buckets(g);
}

/* A local lookup's buckets were prefetched when it started; copy them
 * now, a pass later, as the shm fabric does for a READ (NSDI'14 keeps
 * many lookups in flight so their misses overlap). */
static void get_local_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct get_op *g = ctx;
	if (status) {
		get_end(g, status, NULL, 0);
		return;
	}
	uint32_t bb = 64u * g->h->bucket_lines;
	if (!farm_lines_copy(g->img, g->lp, 2ull * bb, LINE_TRIES)) {
		get_retry(g);
		return;
	}
	get_buckets(g);
}

static void get_start(struct get_op *g)
{
	farm_ht *h = g->h;
	uint32_t bb = 64u * h->bucket_lines;
	farm_gaddr a = g->sd->base + (uint64_t)g->b * bb;
	st_add(h, T_READS, 1);
	uint8_t *p;
	farm_mr_desc d;
	int rc = farm_as_resolve_cached(h->as, &g->l->rc, a, 2ull * bb, &p, &d);
	if (!rc && p) {
		for (uint32_t o = 0; o < 2 * bb; o += 64)
			__builtin_prefetch(p + o, 0, 3);
		g->lp = p;
		/* Copy and complete on a later pass, as a remote read
		 * would. */
		if (farm_loop_defer(g->l->loop, get_local_done, g))
			get_end(g, -ENOMEM, NULL, 0);
		return;
	}
	if (!rc) { /* the shard's descriptor is cached: one READ */
		farm_wr wr = farm_wr_read(0, g->img, g->l->mr, 2 * bb, &d,
		                          farm_gaddr_offset(a));
		rc = farm_loop_rdma(g->l->loop, d.machine, &wr,
		                    bucket_read_done, g);
	} else if (rc == -EAGAIN) {
		rc = farm_as_read(h->as, g->l->loop, a, g->img, g->l->mr,
		                  2 * bb, bucket_read_done, g);
	}
	if (rc)
		get_end(g, rc, NULL, 0);
}

static int check_key(const void *key, uint32_t klen)
{
	if (!key || klen == 0)
		return -EINVAL;
	return klen > FARM_HT_MAX_KEY ? -E2BIG : 0;
}

unsigned farm_ht_shard_index(uint64_t hash, unsigned nshards)
{
	return nshards ? jump(hash, nshards) : 0;
}

static const struct farm_ht_shard *shard_of(farm_ht *h, uint64_t hash,
                                            unsigned *idx)
{
	if (!h->nshards)
		return NULL;
	unsigned i = jump(hash, h->nshards);
	if (idx)
		*idx = i;
	return &h->shards[i];
}

/* What every lookup starts with: its arguments checked, its loop state,
 * the key's hash and shard. */
static int lookup_prep(farm_ht *h, farm_loop *loop, const void *key,
                       uint32_t klen, bool has_cont, struct htloop **l,
                       uint64_t *hash, const struct farm_ht_shard **sd)
{
	if (!h || !loop || !has_cont)
		return -EINVAL;
	int rc = check_key(key, klen);
	if (rc)
		return rc;
	if (!(*l = hl_of(h, loop)))
		return -EINVAL;
	*hash = farm_ht_hash(key, klen);
	*sd = shard_of(h, *hash, NULL);
	return *sd ? 0 : -ENOENT;
}

int farm_ht_get(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                farm_ht_get_fn cont, void *ctx)
{
	struct htloop *l;
	uint64_t hash;
	const struct farm_ht_shard *sd;
	int rc = lookup_prep(h, loop, key, klen, cont != NULL, &l, &hash, &sd);
	if (rc)
		return rc;
	struct get_op *g = l->free_gets;
	if (g) {
		l->free_gets = g->next_free;
	} else {
		if (!(g = calloc(1, sizeof(*g))))
			return -ENOMEM;
		g->d0 = malloc(h->bucket_data);
		g->d1 = malloc(h->bucket_data);
	}
	g->img = buf_get(l);
	if (!g->img || !g->d0 || !g->d1) {
		int rc2 = g->img ? -ENOMEM : -EAGAIN; /* too many in flight */
		if (g->img)
			buf_put(l, g->img);
		g->img = NULL;
		g->next_free = l->free_gets;
		l->free_gets = g;
		return rc2;
	}
	g->tries = 0;
	g->busy_t0 = 0;
	g->fwd = 0;
	g->obuf = NULL;
	g->olen = 0;
	g->next = (farm_fatptr){0};
	g->stage = 0;
	g->ep = (farm_lf_op){0};
	g->h = h;
	g->l = l;
	memcpy(g->key, key, klen);
	g->klen = klen;
	g->hash = hash;
	g->sd = sd;
	g->b = home_of(hash, sd->nbuckets);
	g->cont = cont;
	g->ctx = ctx;
	/* Buckets, chain blocks and value objects it reaches must not change
	 * size class until it is done (epochs). */
	if ((rc = farm_lf_begin(h->txm, loop, &g->ep))) {
		buf_put(l, g->img);
		g->img = NULL;
		g->next_free = l->free_gets;
		l->free_gets = g;
		return rc; /* the loop has no transactions attached */
	}
	st_add(h, T_LOOKUPS, 1);
	get_start(g);
	return 0;
}

/* ---- writes: the client
 * ------------------------------------------------------------ */

struct op_req {
	uint8_t op; /* 1 put, 2 del */
	uint8_t pad;
	uint16_t shard;
	uint32_t klen, vlen;
	uint32_t pad2;
	/* key, then value */
};

struct put_ctx {
	farm_op_fn cont;
	void *ctx;
};

static void put_reply(farm_loop *loop, void *ctx, int status, const void *reply,
                      uint32_t len)
{
	(void)reply;
	(void)len;
	struct put_ctx *c = ctx;
	c->cont(loop, c->ctx, status);
	free(c);
}

static int ship(farm_ht *h, farm_loop *loop, uint8_t op, const void *key,
                uint32_t klen, const void *val, uint32_t vlen, farm_op_fn cont,
                void *ctx)
{
	if (!h || !loop || !cont)
		return -EINVAL;
	int rc = check_key(key, klen);
	if (rc)
		return rc;
	if (op == 1 && (!val || vlen == 0))
		return -EINVAL;
	if (vlen > FARM_HT_MAX_VALUE ||
	    sizeof(struct op_req) + klen + vlen > farm_msg_max_payload(h->msg))
		return -E2BIG;
	unsigned si;
	uint64_t hash = farm_ht_hash(key, klen);
	const struct farm_ht_shard *sd = shard_of(h, hash, &si);
	if (!sd)
		return -ENOENT;
	size_t len = sizeof(struct op_req) + klen + vlen;
	uint8_t *req = malloc(len);
	struct put_ctx *c = malloc(sizeof(*c));
	if (!req || !c) {
		free(req);
		free(c);
		return -ENOMEM;
	}
	struct op_req q = {
	        .op = op, .shard = (uint16_t)si, .klen = klen, .vlen = vlen};
	memcpy(req, &q, sizeof(q));
	memcpy(req + sizeof(q), key, klen);
	if (vlen)
		memcpy(req + sizeof(q) + klen, val, vlen);
	*c = (struct put_ctx){.cont = cont, .ctx = ctx};
	/* The owner's commit may wait for log room: allow it time. */
	rc = farm_as_call(h->as, loop, sd->base, FARM_MSGT_HT_OP, req,
	                  (uint32_t)len, 10ull * 1000000000ull, put_reply, c);
	free(req);
	if (rc)
		free(c);
	else
		st_add(h, op == 1 ? T_PUTS : T_DELS, 1);
	return rc;
}

int farm_ht_put(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                const void *val, uint32_t vlen, farm_op_fn cont, void *ctx)
{
	return ship(h, loop, 1, key, klen, val, vlen, cont, ctx);
}

int farm_ht_del(farm_ht *h, farm_loop *loop, const void *key, uint32_t klen,
                farm_op_fn cont, void *ctx)
{
	return ship(h, loop, 2, key, klen, NULL, 0, cont, ctx);
}

/* ---- writes: the shard's owner
 * ----------------------------------------------------- */

/* The operation needs an allocation before it can go on: the batch makes
 * it, then applies the operation again (which changed nothing before
 * returning these). */
#define NEED_IND 1
#define NEED_BLK 2

struct wctx {
	farm_ht *h;
	struct htloop *l;
	struct shardq *q;
	const struct farm_ht_shard *sd;
	farm_tx *tx;
};

static farm_gaddr bucket_addr(const farm_ht *h, const struct farm_ht_shard *sd,
                              uint32_t b)
{
	return sd->base + (uint64_t)b * 64u * h->bucket_lines;
}

/* The transaction's writable copy of bucket @b. */
static int wbucket(struct wctx *w, uint32_t b, uint8_t **out)
{
	farm_gaddr a = bucket_addr(w->h, w->sd, b);
	const void *d;
	int rc = farm_tx_read_local(w->tx, a, w->h->bucket_data, &d);
	if (!rc)
		rc = farm_tx_write(w->tx, a, (void **)out);
	return rc;
}

/* A read-only view of bucket @b (the transaction's copy). */
static int rbucket(struct wctx *w, uint32_t b, const uint8_t **out)
{
	return farm_tx_read_local(w->tx, bucket_addr(w->h, w->sd, b),
	                          w->h->bucket_data, (const void **)out);
}

/* Bump the joint versions of the pairs around bucket @x. */
static int bump_pairs(struct wctx *w, uint32_t x)
{
	uint32_t nb = w->sd->nbuckets;
	for (int side = 0; side < 2; side++) {
		if (side == 0 && x == 0)
			continue;
		uint32_t y = side == 0 ? x - 1 : x; /* the pair (y, y + 1) */
		if (y + 1 > nb)
			continue;
		uint8_t *by, *by1;
		int rc = wbucket(w, y, &by);
		if (!rc)
			rc = wbucket(w, y + 1, &by1);
		if (rc)
			return rc;
		uint64_t v = get64(B_FWD(by)) + 1;
		put64(B_FWD(by), v);
		put64(B_BWD(by1), v);
	}
	return 0;
}

static void fill_slot(const farm_ht *h, uint8_t *s, const uint8_t *key,
                      uint32_t klen, uint64_t hash, const uint8_t *val,
                      uint32_t vlen, const farm_fatptr *ind)
{
	memset(s, 0, h->slot_bytes);
	s[0] = SLOT_USED;
	if (klen > h->K) {
		s[0] |= SLOT_LONGKEY;
		put64(s + 8, hash);
	} else {
		s[1] = (uint8_t)klen;
		memcpy(s + 8, key, klen);
	}
	memcpy(s + 4, &vlen, 4);
	if (ind) {
		s[0] |= SLOT_INDIRECT;
		put_fat(s + 8 + h->K, *ind);
	} else {
		memcpy(s + 8 + h->K, val, vlen);
	}
}

/* The indirect object for a pair that does not fit inline. */
static bool needs_object(const farm_ht *h, uint32_t klen, uint32_t vlen)
{
	return klen > h->K || vlen > h->V;
}

/* Free the indirect object a slot names (it must be read first). */
static int drop_indirect(struct wctx *w, const uint8_t *s)
{
	if (!(s[0] & SLOT_INDIRECT))
		return 0;
	farm_fatptr f = get_fat(s + 8 + w->h->K);
	const void *d;
	int rc = farm_tx_read_local(w->tx, f.addr, f.size, &d);
	if (!rc)
		rc = farm_tx_free_obj(w->tx, f.addr);
	return rc == FARM_EFREED ? 0 : rc;
}

/* Where the key is: bucket slot, or chain block slot. */
struct loc {
	int where; /* 0 none, 1 bucket, 2 chain */
	uint32_t bucket;
	unsigned slot;
	farm_fatptr blk, prev; /* chain: the block and its predecessor */
};

static int find_key(struct wctx *w, uint32_t home, const uint8_t *key,
                    uint32_t klen, uint64_t hash, struct loc *lc)
{
	farm_ht *h = w->h;
	memset(lc, 0, sizeof(*lc));
	for (uint32_t b = home; b <= home + 1; b++) {
		const uint8_t *bd;
		int rc = rbucket(w, b, &bd);
		if (rc)
			return rc;
		for (unsigned i = 0; i < h->spb; i++)
			if (slot_match(h, slot_at(h, (uint8_t *)bd, i), key,
			               klen, hash)) {
				*lc = (struct loc){
				        .where = 1, .bucket = b, .slot = i};
				return 0;
			}
	}
	const uint8_t *hb;
	int rc = rbucket(w, home, &hb);
	if (rc)
		return rc;
	farm_fatptr prev = {0}, cur = get_fat(B_OVF(hb));
	while (cur.addr) {
		const uint8_t *blk;
		rc = farm_tx_read_local(w->tx, cur.addr, cur.size,
		                        (const void **)&blk);
		if (rc)
			return rc;
		for (unsigned i = 0; i < BLK_SLOTS; i++)
			if (slot_match(h, blk_slot(h, (uint8_t *)blk, i), key,
			               klen, hash)) {
				*lc = (struct loc){.where = 2,
				                   .slot = i,
				                   .blk = cur,
				                   .prev = prev};
				return 0;
			}
		prev = cur;
		cur = get_fat(blk + 8);
	}
	return 0;
}

/* The first free slot of bucket data @bd, or -1. */
static int free_slot(const farm_ht *h, const uint8_t *bd)
{
	for (unsigned i = 0; i < h->spb; i++)
		if (!(slot_at(h, (uint8_t *)bd, i)[0] & SLOT_USED))
			return (int)i;
	return -1;
}

/* Can a free slot of bucket @y move to the adjacent bucket @n? When @n
 * holds a key homed at min(y, n), which may live in both: it moves from
 * @n into @y (a forward hop when n = y - 1, a backward move when
 * n = y + 1). *@slot: its slot in @n, or -1. */
static int step_slot(struct wctx *w, uint32_t y, uint32_t n, int *slot)
{
	farm_ht *h = w->h;
	uint32_t home = FARM_MIN(y, n);
	const uint8_t *bd;
	int rc = rbucket(w, n, &bd);
	if (rc)
		return rc;
	*slot = -1;
	for (unsigned i = 0; i < h->spb; i++) {
		const uint8_t *s = slot_at(h, (uint8_t *)bd, i);
		if ((s[0] & SLOT_USED) &&
		    home_of(slot_hash(h, s), w->sd->nbuckets) == home) {
			*slot = (int)i;
			break;
		}
	}
	return 0;
}

/* Move the pair in slot @fs of bucket @from to the free slot @ts of the
 * adjacent bucket @to (the pair may live in both), bumping the joint
 * versions around both: a lookup reads the pair's two buckets together
 * and sees it in one of them. */
static int move_pair(struct wctx *w, uint32_t from, unsigned fs, uint32_t to,
                     unsigned ts)
{
	farm_ht *h = w->h;
	uint8_t *pf, *pt;
	int rc = wbucket(w, from, &pf);
	if (!rc)
		rc = wbucket(w, to, &pt);
	if (rc)
		return rc;
	memcpy(slot_at(h, pt, ts), slot_at(h, pf, fs), h->slot_bytes);
	memset(slot_at(h, pf, fs), 0, h->slot_bytes);
	if ((rc = bump_pairs(w, to)) || (rc = bump_pairs(w, from)))
		return rc;
	st_add(h, T_HOPS, 1);
	return 0;
}

/* Slide the free slot *@ys of bucket @y to bucket @t, one move per bucket
 * (each step checked before with step_slot). *@ys: the free slot in @t. */
static int slide(struct wctx *w, uint32_t y, unsigned *ys, uint32_t t)
{
	while (y != t) {
		uint32_t n = y > t ? y - 1 : y + 1;
		int s;
		int rc = step_slot(w, y, n, &s);
		if (rc)
			return rc;
		if (s < 0)
			return FARM_ECORRUPT; /* checked before: cannot be */
		if ((rc = move_pair(w, n, (unsigned)s, y, *ys)))
			return rc;
		*ys = (unsigned)s;
		y = n;
	}
	return 0;
}

/* A free slot in reach of @home (in @home or @home + 1), slid there if
 * needed from the nearest free slot forward (keys homed at x - 1 hop from
 * x - 1 to x) or backward (keys homed at x - 1 move from x back to x - 1),
 * whichever takes fewer moves (forward on a tie), within HOP_REACH
 * buckets. Returns 0 with the bucket and slot, -ENOSPC when no free slot
 * can be slid there. */
static int make_room(struct wctx *w, uint32_t home, uint32_t *ob, unsigned *os)
{
	farm_ht *h = w->h;
	uint32_t nb = w->sd->nbuckets;
	const uint8_t *bd;
	int rc, s;
	for (uint32_t b = home; b <= home + 1; b++) {
		if ((rc = rbucket(w, b, &bd)))
			return rc;
		if ((s = free_slot(h, bd)) >= 0) {
			*ob = b;
			*os = (unsigned)s;
			return 0;
		}
	}
	/* Forward: bucket y is in reach when y - 1 is and holds a key homed
	 * at y - 1. */
	uint32_t fj = UINT32_MAX, bj = UINT32_MAX;
	unsigned fs = 0, bs = 0, fdist = HOP_REACH + 1;
	for (uint32_t y = home + 2; y <= FARM_MIN(home + HOP_REACH, nb); y++) {
		if ((rc = step_slot(w, y, y - 1, &s)))
			return rc;
		if (s < 0)
			break;
		if ((rc = rbucket(w, y, &bd)))
			return rc;
		if ((s = free_slot(h, bd)) >= 0) {
			fj = y;
			fs = (unsigned)s;
			fdist = y - (home + 1);
			break;
		}
	}
	/* Backward, when shorter: bucket y < home is in reach when y + 1 is
	 * and holds a key homed at y. */
	for (uint32_t d = 1; d <= home && d < fdist && d <= HOP_REACH; d++) {
		uint32_t y = home - d;
		if ((rc = step_slot(w, y, y + 1, &s)))
			return rc;
		if (s < 0)
			break;
		if ((rc = rbucket(w, y, &bd)))
			return rc;
		if ((s = free_slot(h, bd)) >= 0) {
			bj = y;
			bs = (unsigned)s;
			break;
		}
	}
	if (bj != UINT32_MAX) {
		*ob = home;
		*os = bs;
		return slide(w, bj, os, home);
	}
	if (fj != UINT32_MAX) {
		*ob = home + 1;
		*os = fs;
		return slide(w, fj, os, home + 1);
	}
	return -ENOSPC;
}

static void chain_block_init(const farm_ht *h, uint8_t *blk, uint64_t ver,
                             farm_fatptr next)
{
	memset(blk, 0, h->block_data);
	put64(blk, ver);
	put_fat(blk + 8, next);
}

/* Put the pair in slot @s (inline, or through the batch's indirect
 * object, which this consumes). */
static void place(struct wctx *w, uint8_t *s, const uint8_t *key, uint32_t klen,
                  uint64_t hash, const uint8_t *val, uint32_t vlen)
{
	farm_ht *h = w->h;
	struct shardq *q = w->q;
	if (!needs_object(h, klen, vlen)) {
		fill_slot(h, s, key, klen, hash, val, vlen, NULL);
		return;
	}
	uint8_t *o = q->ind_data;
	memcpy(o, &klen, 4);
	memcpy(o + 4, &vlen, 4);
	memcpy(o + 8, key, klen);
	memcpy(o + 8 + klen, val, vlen);
	fill_slot(h, s, key, klen, hash, val, vlen, &q->ind_fp);
	q->ind_ready = false;
}

/* Stamp a chain block with its home's pair version after the change. */
static int stamp_block(struct wctx *w, uint8_t *blk, uint32_t home)
{
	int rc = bump_pairs(w, home);
	const uint8_t *hb;
	if (!rc)
		rc = rbucket(w, home, &hb);
	if (!rc)
		put64(blk, get64(B_FWD(hb)));
	return rc;
}

/* Where a pair added to a home's chain goes: the first free slot from the
 * head, else a new block linked after the last one. */
struct cfree {
	unsigned depth;   /* blocks a lookup reads to reach it (head: 1) */
	farm_fatptr blk;  /* the block with the free slot; null: a new block */
	unsigned slot;    /* in blk */
	farm_fatptr last; /* the last block (null: the chain is empty) */
};

/* Walks at most @limit - 1 blocks of @home's chain: a depth of @limit means
 * no free slot shallower than that (blk and last then mean nothing). */
static int chain_free(struct wctx *w, uint32_t home, unsigned limit,
                      struct cfree *cf)
{
	farm_ht *h = w->h;
	const uint8_t *hb;
	int rc = rbucket(w, home, &hb);
	if (rc)
		return rc;
	memset(cf, 0, sizeof(*cf));
	cf->depth = 1;
	farm_fatptr cur = get_fat(B_OVF(hb));
	while (cur.addr && cf->depth < limit) {
		const void *d;
		if ((rc = farm_tx_read_local(w->tx, cur.addr, cur.size, &d)))
			return rc;
		const uint8_t *blk = d;
		for (unsigned i = 0; i < BLK_SLOTS; i++)
			if (!(blk_slot(h, (uint8_t *)blk, i)[0] & SLOT_USED)) {
				cf->blk = cur;
				cf->slot = i;
				return 0;
			}
		cf->last = cur;
		cur = get_fat(blk + 8);
		cf->depth++;
	}
	return 0;
}

/* The writable free slot @cf names in @home's chain: in its block, or in
 * the batch's new block (the caller made sure of it), linked after the
 * last one. The caller fills the slot, then stamps *@blk. */
static int chain_take(struct wctx *w, uint32_t home, const struct cfree *cf,
                      uint8_t **blk, uint8_t **slot)
{
	farm_ht *h = w->h;
	struct shardq *q = w->q;
	int rc;
	if (cf->blk.addr) {
		if ((rc = farm_tx_write(w->tx, cf->blk.addr, (void **)blk)))
			return rc;
		*slot = blk_slot(h, *blk, cf->slot);
		return 0;
	}
	*blk = q->blk_data;
	chain_block_init(h, *blk, 0, (farm_fatptr){0});
	if (cf->last.addr) {
		uint8_t *lb;
		if ((rc = farm_tx_write(w->tx, cf->last.addr, (void **)&lb)))
			return rc;
		put_fat(lb + 8, q->blk_fp);
		if ((rc = stamp_block(w, lb, home)))
			return rc;
	} else {
		uint8_t *hb;
		if ((rc = wbucket(w, home, &hb)))
			return rc;
		put_fat(B_OVF(hb), q->blk_fp);
	}
	q->blk_ready = false;
	st_add(h, T_CHAIN_APPENDS, 1);
	*slot = blk_slot(h, *blk, 0);
	return 0;
}

/* No free slot can be slid into reach of @home, and a pair added to its
 * chain would sit at depth @own. Rather, a pair of another home, in reach
 * as make_room's free slots are, whose chain has a shallower free slot
 * goes there (the shallowest, then the nearest), and the slot it leaves is
 * slid to @home or @home + 1: as many pairs end in chains, fewer chain
 * reads. Each move stays within a pair's two buckets or between them and
 * its home's chain. Returns 0 with the bucket and slot, -ENOSPC when no
 * pair's chain is shallower, NEED_BLK (nothing changed) when that chain
 * needs the batch's new block. */
static int evict(struct wctx *w, uint32_t home, unsigned own, uint32_t *ob,
                 unsigned *os)
{
	farm_ht *h = w->h;
	uint32_t nb = w->sd->nbuckets;
	unsigned best = own, bs = 0;
	uint32_t by = 0, bt = 0, bh = 0;
	bool fwd = true, bwd = true;
	int rc, s = 0;
	/* Bucket home + 1 + d slides to home + 1, bucket home - d to home. */
	for (uint32_t d = 0; d <= HOP_REACH && (fwd || bwd) && best > 1; d++) {
		for (int side = 0; side < 2; side++) {
			uint32_t y, t;
			if (side == 0) {
				y = home + 1 + d;
				t = home + 1;
				if (fwd && (y > nb || d >= HOP_REACH))
					fwd = false;
				if (!fwd)
					continue;
				if (d > 0 && (rc = step_slot(w, y, y - 1, &s)))
					return rc;
			} else {
				y = home - d;
				t = home;
				if (bwd && d > home)
					bwd = false;
				if (!bwd)
					continue;
				if (d > 0 && (rc = step_slot(w, y, y + 1, &s)))
					return rc;
			}
			if (d > 0 && s < 0) {
				*(side == 0 ? &fwd : &bwd) = false;
				continue;
			}
			const uint8_t *bd;
			if ((rc = rbucket(w, y, &bd)))
				return rc;
			for (unsigned i = 0; i < h->spb; i++) {
				const uint8_t *sl =
				        slot_at(h, (uint8_t *)bd, i);
				if (!(sl[0] & SLOT_USED))
					continue;
				uint32_t kh = home_of(slot_hash(h, sl), nb);
				struct cfree cf;
				if (kh == home)
					continue;
				if ((rc = chain_free(w, kh, best, &cf)))
					return rc;
				if (cf.depth < best) {
					best = cf.depth;
					by = y;
					bs = i;
					bt = t;
					bh = kh;
				}
			}
		}
	}
	if (best == own)
		return -ENOSPC;
	struct cfree cf;
	if ((rc = chain_free(w, bh, UINT_MAX, &cf)))
		return rc;
	if (!cf.blk.addr && !w->q->blk_ready)
		return NEED_BLK;
	uint8_t *bd, *blk, *cs;
	if ((rc = wbucket(w, by, &bd)) ||
	    (rc = chain_take(w, bh, &cf, &blk, &cs)))
		return rc;
	memcpy(cs, slot_at(h, bd, bs), h->slot_bytes);
	memset(slot_at(h, bd, bs), 0, h->slot_bytes);
	if ((rc = stamp_block(w, blk, bh)) || (rc = bump_pairs(w, by)))
		return rc;
	*ob = bt;
	*os = bs;
	return slide(w, by, os, bt);
}

static int apply_put(struct wctx *w, const uint8_t *key, uint32_t klen,
                     const uint8_t *val, uint32_t vlen)
{
	farm_ht *h = w->h;
	struct shardq *q = w->q;
	uint64_t hash = farm_ht_hash(key, klen);
	uint32_t home = home_of(hash, w->sd->nbuckets);
	if (needs_object(h, klen, vlen) && !q->ind_ready)
		return NEED_IND;
	struct loc lc;
	int rc = find_key(w, home, key, klen, hash, &lc);
	if (rc)
		return rc;
	if (lc.where == 1) { /* update in its bucket */
		uint8_t *bd;
		if ((rc = wbucket(w, lc.bucket, &bd)))
			return rc;
		uint8_t *s = slot_at(h, bd, lc.slot);
		if ((rc = drop_indirect(w, s)))
			return rc;
		place(w, s, key, klen, hash, val, vlen);
		return bump_pairs(w, lc.bucket);
	}
	if (lc.where == 2) { /* update in its chain block */
		uint8_t *blk;
		if ((rc = farm_tx_write(w->tx, lc.blk.addr, (void **)&blk)))
			return rc;
		uint8_t *s = blk_slot(h, blk, lc.slot);
		if ((rc = drop_indirect(w, s)))
			return rc;
		place(w, s, key, klen, hash, val, vlen);
		return stamp_block(w, blk, home);
	}
	uint32_t b;
	unsigned si;
	rc = make_room(w, home, &b, &si);
	if (rc == -ENOSPC) {
		/* The home's overflow chain (its first free slot, else a new
		 * block at its end), unless a pair in reach can go to a
		 * shallower slot in its own home's chain. */
		struct cfree cf;
		if ((rc = chain_free(w, home, UINT_MAX, &cf)))
			return rc;
		rc = cf.depth > 1 ? evict(w, home, cf.depth, &b, &si) : -ENOSPC;
		if (rc == -ENOSPC) {
			uint8_t *blk, *s;
			if (!cf.blk.addr && !q->blk_ready)
				return NEED_BLK;
			if ((rc = chain_take(w, home, &cf, &blk, &s)))
				return rc;
			place(w, s, key, klen, hash, val, vlen);
			return stamp_block(w, blk, home);
		}
	}
	if (rc)
		return rc;
	uint8_t *bd;
	if ((rc = wbucket(w, b, &bd)))
		return rc;
	place(w, slot_at(h, bd, si), key, klen, hash, val, vlen);
	return bump_pairs(w, b);
}

/* Unlink chain block @lc->blk (empty now) and free it. */
static int unlink_block(struct wctx *w, uint32_t home, farm_fatptr blkp,
                        farm_fatptr prev, farm_fatptr next)
{
	int rc;
	if (prev.addr) {
		uint8_t *pb;
		if ((rc = farm_tx_write(w->tx, prev.addr, (void **)&pb)))
			return rc;
		put_fat(pb + 8, next);
		if ((rc = stamp_block(w, pb, home)))
			return rc;
	} else {
		uint8_t *hb;
		if ((rc = wbucket(w, home, &hb)))
			return rc;
		put_fat(B_OVF(hb), next);
		if ((rc = bump_pairs(w, home)))
			return rc;
	}
	st_add(w->h, T_CHAIN_FREES, 1);
	return farm_tx_free_obj(w->tx, blkp.addr);
}

static bool block_empty(const farm_ht *h, uint8_t *blk)
{
	for (unsigned i = 0; i < BLK_SLOTS; i++)
		if (blk_slot(h, blk, i)[0] & SLOT_USED)
			return false;
	return true;
}

/* @home's chain: its last block, the one before it (null when none) and
 * its length in blocks. */
static int chain_last(struct wctx *w, uint32_t home, farm_fatptr *last,
                      farm_fatptr *prev, unsigned *nblk)
{
	const uint8_t *hb;
	int rc = rbucket(w, home, &hb);
	if (rc)
		return rc;
	farm_fatptr p = {0}, l = {0}, cur = get_fat(B_OVF(hb));
	unsigned n = 0;
	while (cur.addr) {
		const void *d;
		if ((rc = farm_tx_read_local(w->tx, cur.addr, cur.size, &d)))
			return rc;
		p = l;
		l = cur;
		n++;
		cur = get_fat((const uint8_t *)d + 8);
	}
	*last = l;
	*prev = p;
	*nblk = n;
	return 0;
}

/* Move a pair of the last block of @home's chain (@last, after @prev)
 * into the free slot @s (of a bucket or of a block of the same chain); the
 * block is freed when it empties, else restamped. */
static int chain_pop(struct wctx *w, uint32_t home, farm_fatptr last,
                     farm_fatptr prev, uint8_t *s)
{
	farm_ht *h = w->h;
	uint8_t *blk;
	int rc = farm_tx_write(w->tx, last.addr, (void **)&blk);
	if (rc)
		return rc;
	for (unsigned i = BLK_SLOTS; i-- > 0;) {
		uint8_t *cs = blk_slot(h, blk, i);
		if (!(cs[0] & SLOT_USED))
			continue;
		memcpy(s, cs, h->slot_bytes);
		memset(cs, 0, h->slot_bytes);
		break;
	}
	if (block_empty(h, blk))
		return unlink_block(w, home, last, prev, (farm_fatptr){0});
	return stamp_block(w, blk, home);
}

/* Slot @xs of bucket @x was freed: the last pair of the longest chain that
 * can reach it moves there (saving its depth in chain reads per lookup).
 * The chains of homes p - 1 and p reach bucket p, and the free slot slides
 * from @x to p as in make_room (a key homed at y moves from y + 1 back to
 * y, one homed at y - 1 from y - 1 forward to y), within HOP_REACH
 * buckets; the longest chain first, then the nearest. */
static int pull_back(struct wctx *w, uint32_t x, unsigned xs)
{
	farm_ht *h = w->h;
	uint32_t nb = w->sd->nbuckets;
	unsigned best = 0, n;
	uint32_t bp = 0, bc = 0;
	bool up = true, down = true;
	farm_fatptr last, prev;
	int rc, s = 0;
	for (uint32_t d = 0; d <= HOP_REACH && (up || down); d++) {
		for (int side = 0; side < 2; side++) {
			uint32_t p;
			if (side == 0) {
				p = x + d;
				if (up && p > nb)
					up = false;
				if (!up)
					continue;
				if (d > 0 && (rc = step_slot(w, p - 1, p, &s)))
					return rc;
			} else {
				if (d == 0)
					continue; /* p = x: done above */
				if (down && d > x)
					down = false;
				if (!down)
					continue;
				p = x - d;
				if ((rc = step_slot(w, p + 1, p, &s)))
					return rc;
			}
			if (d > 0 && s < 0) {
				*(side == 0 ? &up : &down) = false;
				continue;
			}
			for (uint32_t c = p ? p - 1 : 0; c <= p && c < nb;
			     c++) {
				if ((rc = chain_last(w, c, &last, &prev, &n)))
					return rc;
				if (n > best) {
					best = n;
					bp = p;
					bc = c;
				}
			}
		}
	}
	if (!best)
		return 0;
	uint8_t *bd;
	if ((rc = slide(w, x, &xs, bp)) ||
	    (rc = chain_last(w, bc, &last, &prev, &n)) ||
	    (rc = wbucket(w, bp, &bd)) ||
	    (rc = chain_pop(w, bc, last, prev, slot_at(h, bd, xs))))
		return rc;
	return bump_pairs(w, bp);
}

static int apply_del(struct wctx *w, const uint8_t *key, uint32_t klen)
{
	farm_ht *h = w->h;
	uint64_t hash = farm_ht_hash(key, klen);
	uint32_t home = home_of(hash, w->sd->nbuckets);
	struct loc lc;
	int rc = find_key(w, home, key, klen, hash, &lc);
	if (rc)
		return rc;
	if (lc.where == 0)
		return -ENOENT;
	if (lc.where == 2) {
		uint8_t *blk;
		if ((rc = farm_tx_write(w->tx, lc.blk.addr, (void **)&blk)))
			return rc;
		uint8_t *s = blk_slot(h, blk, lc.slot);
		if ((rc = drop_indirect(w, s)))
			return rc;
		memset(s, 0, h->slot_bytes);
		/* Keep the chain dense: its last pair fills the hole. */
		farm_fatptr last, prev;
		unsigned n;
		if ((rc = chain_last(w, home, &last, &prev, &n)))
			return rc;
		if (last.addr != lc.blk.addr) {
			if ((rc = chain_pop(w, home, last, prev, s)))
				return rc;
			return stamp_block(w, blk, home);
		}
		if (block_empty(h, blk))
			return unlink_block(w, home, lc.blk, lc.prev,
			                    get_fat(blk + 8));
		return stamp_block(w, blk, home);
	}
	uint8_t *bd;
	if ((rc = wbucket(w, lc.bucket, &bd)))
		return rc;
	uint8_t *s = slot_at(h, bd, lc.slot);
	if ((rc = drop_indirect(w, s)))
		return rc;
	memset(s, 0, h->slot_bytes);
	if ((rc = bump_pairs(w, lc.bucket)))
		return rc;
	/* The freed slot takes the last pair of a chain in reach. */
	return pull_back(w, lc.bucket, lc.slot);
}

/* ---- the owner's batches (flat combining)
 * ---------------------------------------- */

static void batch_start(struct htloop *l, unsigned shard);
static void batch_apply(struct htloop *l, unsigned shard);

struct bctx {
	struct htloop *l;
	unsigned shard;
	int kind; /* NEED_IND or NEED_BLK */
};

static void reply_op(struct htloop *l, struct pending *p, int status)
{
	int rc = status ? farm_msg_reply_error(l->loop, &p->tok, status)
	                : farm_msg_reply(l->loop, &p->tok, NULL, 0);
	if (rc)
		farm_warn("ht: cannot answer machine %" PRIu32 ": %s",
		          p->tok.machine, farm_strerror(rc));
}

static void batch_done(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct bctx *c = ctx;
	struct htloop *l = c->l;
	unsigned shard = c->shard;
	struct shardq *q = &l->q[shard];
	free(c);
	farm_tx_free(q->tx);
	q->tx = NULL;
	if (outcome && farm_tx_retryable(outcome) && ++q->retries < 64) {
		/* Run the same operations again in a new transaction. */
		batch_start(l, shard);
		return;
	}
	q->retries = 0;
	struct pending *p = q->batch;
	q->batch = NULL;
	while (p) {
		struct pending *n = p->next;
		reply_op(l, p, outcome ? outcome : p->status);
		free(p);
		p = n;
	}
	q->busy = false;
	if (q->head)
		batch_start(l, shard);
}

static void batch_alloc_done(farm_tx *tx, void *ctx, int status, farm_fatptr p,
                             void *data)
{
	(void)tx;
	struct bctx *c = ctx;
	struct htloop *l = c->l;
	unsigned shard = c->shard;
	struct shardq *q = &l->q[shard];
	int kind = c->kind;
	free(c);
	if (status) {
		/* No memory: the operation being applied fails alone. */
		for (struct pending *o = q->batch; o; o = o->next)
			if (o->status == -EINPROGRESS) {
				o->status = status;
				break;
			}
	} else if (kind == NEED_IND) {
		q->ind_ready = true;
		q->ind_fp = p;
		q->ind_data = data;
	} else {
		q->blk_ready = true;
		q->blk_fp = p;
		q->blk_data = data;
	}
	batch_apply(l, shard);
}

/* Apply the batch's operations that are not yet applied, then commit. */
static void batch_apply(struct htloop *l, unsigned shard)
{
	farm_ht *h = l->h;
	struct shardq *q = &l->q[shard];
	struct wctx w = {
	        .h = h, .l = l, .q = q, .sd = &h->shards[shard], .tx = q->tx};
	for (struct pending *p = q->batch; p; p = p->next) {
		if (p->status != -EINPROGRESS)
			continue;
		int rc = p->op == 1 ? apply_put(&w, p->buf, p->klen,
		                                p->buf + p->klen, p->vlen)
		                    : apply_del(&w, p->buf, p->klen);
		if (rc == NEED_IND || rc == NEED_BLK) {
			struct bctx *c = malloc(sizeof(*c));
			uint32_t size = rc == NEED_IND ? 8 + p->klen + p->vlen
			                               : h->block_data;
			int arc = c ? 0 : -ENOMEM;
			if (c) {
				*c = (struct bctx){
				        .l = l, .shard = shard, .kind = rc};
				arc = farm_tx_alloc(q->tx, size, w.sd->base,
				                    batch_alloc_done, c);
				if (arc)
					free(c);
			}
			if (!arc)
				return; /* continued in batch_alloc_done */
			rc = arc;
		}
		p->status = rc;
	}
	struct bctx *c = malloc(sizeof(*c));
	int rc = c ? 0 : -ENOMEM;
	if (c) {
		*c = (struct bctx){.l = l, .shard = shard};
		rc = farm_tx_commit(q->tx, batch_done, c);
		if (rc)
			free(c);
	}
	if (rc) {
		c = malloc(sizeof(*c));
		if (c) {
			*c = (struct bctx){.l = l, .shard = shard};
			batch_done(l->loop, c, rc);
		}
	}
}

static void batch_start(struct htloop *l, unsigned shard)
{
	farm_ht *h = l->h;
	struct shardq *q = &l->q[shard];
	q->busy = true;
	if (!q->batch) {
		/* Take everything waiting (up to MAX_BATCH): one transaction.
		 */
		struct pending **tail = &q->batch;
		unsigned n = 0;
		while (q->head && n < MAX_BATCH) {
			struct pending *p = q->head;
			q->head = p->next;
			p->next = NULL;
			*tail = p;
			tail = &p->next;
			n++;
		}
		if (!q->head)
			q->tail = NULL;
		if (n > 1)
			st_add(h, T_COMBINED, 1);
	}
	for (struct pending *p = q->batch; p; p = p->next)
		p->status = -EINPROGRESS;
	q->ind_ready = q->blk_ready = false;
	int rc = farm_tx_begin(h->txm, l->loop, &q->tx);
	if (rc) {
		struct bctx *c = malloc(sizeof(*c));
		if (c) {
			*c = (struct bctx){.l = l, .shard = shard};
			q->tx = NULL;
			batch_done(l->loop, c, rc);
		}
		return;
	}
	batch_apply(l, shard);
}

static void h_op(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_ht *h = arg;
	struct htloop *l = hl_of(h, loop);
	struct op_req q;
	int status = 0;
	if (!l || in->len < sizeof(q) || !in->token.call_id) {
		status = -EINVAL;
	} else {
		memcpy(&q, in->payload, sizeof(q));
		if ((q.op != 1 && q.op != 2) || q.klen == 0 ||
		    q.klen > FARM_HT_MAX_KEY || q.vlen > FARM_HT_MAX_VALUE ||
		    in->len != sizeof(q) + q.klen + q.vlen ||
		    (q.op == 1 && q.vlen == 0) || q.shard >= h->nshards ||
		    h->shards[q.shard].machine != h->me)
			status = -EINVAL;
	}
	if (status) {
		farm_warn("ht: bad request from machine %" PRIu32,
		          in->src_machine);
		if (in->token.call_id &&
		    farm_msg_reply_error(loop, &in->token, status))
			farm_warn("ht: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	struct pending *p = malloc(sizeof(*p) + q.klen + q.vlen);
	if (!p) {
		if (farm_msg_reply_error(loop, &in->token, -ENOMEM))
			farm_warn("ht: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	*p = (struct pending){
	        .tok = in->token, .op = q.op, .klen = q.klen, .vlen = q.vlen};
	memcpy(p->buf, (const uint8_t *)in->payload + sizeof(q),
	       q.klen + q.vlen);
	struct shardq *sq = &l->q[q.shard];
	if (sq->tail)
		sq->tail->next = p;
	else
		sq->head = p;
	sq->tail = p;
	if (!sq->busy)
		batch_start(l, q.shard);
}

/* ---- creation, shards
 * ------------------------------------------------------------ */

int farm_ht_create(farm_txm *txm, farm_as *as, farm_galloc *ga, farm_msg *msg,
                   const struct farm_ht_attr *attr, farm_ht **out)
{
	if (!txm || !as || !ga || !msg || !out)
		return -EINVAL;
	struct farm_ht_attr a = attr ? *attr : (struct farm_ht_attr){0};
	if (!a.neighborhood)
		a.neighborhood = 8;
	if (!a.key_inline)
		a.key_inline = 16;
	if (!a.val_inline)
		a.val_inline = 32;
	if (a.neighborhood % 2 || a.neighborhood < 2 || a.neighborhood > 16 ||
	    a.key_inline < 8 || a.key_inline > 64 || a.val_inline < 24 ||
	    a.val_inline > 1024)
		return -EINVAL;
	farm_ht *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->txm = txm;
	h->as = as;
	h->ga = ga;
	h->msg = msg;
	h->me = farm_as_machine_id(as);
	h->H = a.neighborhood;
	h->spb = a.neighborhood / 2;
	h->K = (a.key_inline + 7) & ~7u;
	h->V = (a.val_inline + 7) & ~7u;
	h->slot_bytes = 8 + h->K + h->V;
	h->bucket_data = BKT_HDR + h->spb * h->slot_bytes;
	h->bucket_lines = obj_lines(h->bucket_data);
	h->block_data = BLK_HDR + BLK_SLOTS * h->slot_bytes;
	h->block_lines = obj_lines(h->block_data);
	int rc = farm_msg_handle(msg, FARM_MSGT_HT_OP, h_op, h);
	if (rc) {
		free(h);
		return rc;
	}
	*out = h;
	return 0;
}

void farm_ht_destroy(farm_ht *h)
{
	free(h);
}

int farm_ht_attach(farm_ht *h, farm_loop *loop)
{
	if (!h || !loop)
		return -EINVAL;
	unsigned i = farm_loop_index(loop);
	if (i >= MAX_LOOPS || h->loops[i])
		return -EINVAL;
	struct htloop *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	size_t bsz = 2ull * 64u * h->bucket_lines;
	l->h = h;
	l->loop = loop;
	l->rand = farm_now_ns() ^ i;
	l->pool = aligned_alloc(64, bsz * POOL_BUFS);
	l->q = calloc(FARM_HT_MAX_SHARDS, sizeof(*l->q));
	int rc = l->pool && l->q ? farm_mr_reg(farm_as_fabric(h->as), l->pool,
	                                       bsz * POOL_BUFS,
	                                       FARM_ACCESS_LOCAL, &l->mr)
	                         : -ENOMEM;
	if (rc) {
		free(l->pool);
		free(l->q);
		free(l);
		return rc;
	}
	for (unsigned k = 0; k < POOL_BUFS; k++)
		buf_put(l, l->pool + k * bsz);
	h->loops[i] = l;
	return 0;
}

void farm_ht_detach(farm_ht *h, farm_loop *loop)
{
	struct htloop *l = h ? hl_of(h, loop) : NULL;
	if (!l)
		return;
	for (unsigned s2 = 0; s2 < FARM_HT_MAX_SHARDS; s2++)
		if (l->q[s2].busy) {
			/* A batch's commit is still in flight and will come
			 * back to this state: keep it (leaked) rather than free
			 * it. */
			farm_warn("ht: loop detached with a write batch "
			          "committing");
			h->loops[farm_loop_index(loop)] = NULL;
			return;
		}
	for (unsigned s = 0; s < FARM_HT_MAX_SHARDS; s++) {
		struct pending *p = l->q[s].head;
		while (p) {
			struct pending *n = p->next;
			free(p);
			p = n;
		}
	}
	while (l->free_gets) {
		struct get_op *g = l->free_gets;
		l->free_gets = g->next_free;
		free(g->d0);
		free(g->d1);
		free(g);
	}
	farm_mr_dereg(l->mr);
	free(l->pool);
	free(l->q);
	h->loops[farm_loop_index(loop)] = NULL;
	free(l);
}

struct mk_ctx {
	farm_ht *h;
	uint32_t nb;
	farm_ht_shard_fn cont;
	void *ctx;
};

static void shard_made(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	struct mk_ctx *c = ctx;
	struct farm_ht_shard sd = {
	        .machine = c->h->me, .nbuckets = c->nb, .base = a};
	c->cont(loop, c->ctx, status, status ? (struct farm_ht_shard){0} : sd);
	free(c);
}

int farm_ht_make_shard(farm_ht *h, farm_loop *loop, uint32_t nbuckets,
                       farm_ht_shard_fn cont, void *ctx)
{
	if (!h || !loop || !cont || nbuckets == 0)
		return -EINVAL;
	struct mk_ctx *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct mk_ctx){.h = h, .nb = nbuckets, .cont = cont, .ctx = ctx};
	/* nbuckets + 1: the last home's neighbour. Fresh array elements are
	 * allocated objects of version 0 with zero data: empty buckets. */
	int rc = farm_galloc_alloc_array(h->ga, loop, 64ull * h->bucket_lines,
	                                 (uint64_t)nbuckets + 1,
	                                 FARM_GADDR_NULL, shard_made, c);
	if (rc)
		free(c);
	return rc;
}

int farm_ht_set_shards(farm_ht *h, const struct farm_ht_shard *sd, unsigned n)
{
	if (!h || !sd || n == 0 || n > FARM_HT_MAX_SHARDS)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!sd[i].nbuckets || !sd[i].base)
			return -EINVAL;
	memcpy(h->shards, sd, n * sizeof(*sd));
	h->nshards = n;
	return 0;
}

/* Visit the pair in slot @s: inline, or in its own object (a local one:
 * the shard's owner allocated it), read line-consistently and checked
 * against the slot's fat pointer. 1 visited, 0 skipped (freed meanwhile,
 * or not local), -ENOMEM. */
static int iter_slot(farm_ht *h, const uint8_t *s, farm_ht_iter_fn fn,
                     void *ctx, bool *go)
{
	if (!(s[0] & SLOT_INDIRECT)) {
		*go = fn(ctx, s + 8, s[1], s + 8 + h->K, slot_vlen(s));
		return 1;
	}
	farm_fatptr p = get_fat(s + 8 + h->K);
	unsigned lines = obj_lines(p.size);
	const uint8_t *src =
	        lines ? farm_as_local_ptr(h->as, p.addr, 64ull * lines) : NULL;
	if (!src)
		return 0;
	uint8_t *img = malloc(64ull * lines), *obj = malloc(p.size);
	int rc = img && obj ? 0 : -ENOMEM;
	uint64_t v, w;
	uint32_t kl, vl;
	/* [klen][vlen][key][value] */
	if (!rc && p.size >= 8 &&
	    farm_lines_copy(img, src, 64ull * lines, LINE_TRIES) &&
	    obj_check(img, lines, p.incarnation, &v, &w) == 0) {
		obj_unpack(img, p.size, obj);
		memcpy(&kl, obj, 4);
		memcpy(&vl, obj + 4, 4);
		if (kl && 8ull + kl + vl <= p.size) {
			*go = fn(ctx, obj + 8, kl, obj + 8 + kl, vl);
			rc = 1;
		}
	}
	free(img);
	free(obj);
	return rc;
}

long farm_ht_iterate_local(farm_ht *h, unsigned shard, farm_ht_iter_fn fn,
                           void *ctx)
{
	if (!h || !fn || shard >= h->nshards ||
	    h->shards[shard].machine != h->me)
		return -EINVAL;
	const struct farm_ht_shard *sd = &h->shards[shard];
	uint32_t bb = 64u * h->bucket_lines;
	uint8_t *d = malloc(h->bucket_data > h->block_data ? h->bucket_data
	                                                   : h->block_data);
	uint8_t *img =
	        malloc(bb > 64u * h->block_lines ? bb : 64u * h->block_lines);
	if (!d || !img) {
		free(d);
		free(img);
		return -ENOMEM;
	}
	long n = 0;
	bool go = true;
	for (uint32_t b = 0; b <= sd->nbuckets && go && n >= 0; b++) {
		const uint8_t *p = farm_as_local_ptr(
		        h->as, sd->base + (uint64_t)b * bb, bb);
		if (!p)
			break;
		farm_lines_copy(img, p, bb, LINE_TRIES);
		obj_unpack(img, h->bucket_data, d);
		farm_fatptr ovf = get_fat(B_OVF(d));
		for (unsigned i = 0; i < h->spb && go && n >= 0; i++) {
			const uint8_t *s = slot_at(h, d, i);
			if (!(s[0] & SLOT_USED))
				continue;
			int r = iter_slot(h, s, fn, ctx, &go);
			n = r < 0 ? r : n + r;
		}
		while (ovf.addr && go && n >= 0) {
			const uint8_t *bp = farm_as_local_ptr(
			        h->as, ovf.addr, 64ull * h->block_lines);
			if (!bp)
				break;
			farm_lines_copy(img, bp, 64ull * h->block_lines,
			                LINE_TRIES);
			obj_unpack(img, h->block_data, d);
			for (unsigned i = 0; i < BLK_SLOTS && go && n >= 0;
			     i++) {
				const uint8_t *s = blk_slot(h, d, i);
				if (!(s[0] & SLOT_USED))
					continue;
				int r = iter_slot(h, s, fn, ctx, &go);
				n = r < 0 ? r : n + r;
			}
			ovf = get_fat(d + 8);
		}
	}
	free(d);
	free(img);
	return n;
}

int farm_ht_usage_local(farm_ht *h, unsigned shard, struct farm_ht_usage *u)
{
	if (!h || !u || shard >= h->nshards ||
	    h->shards[shard].machine != h->me)
		return -EINVAL;
	const struct farm_ht_shard *sd = &h->shards[shard];
	uint32_t bb = 64u * h->bucket_lines;
	uint32_t kb = 64u * h->block_lines;
	uint8_t *d = malloc(FARM_MAX(h->bucket_data, h->block_data));
	uint8_t *img = malloc(FARM_MAX(bb, kb));
	if (!d || !img) {
		free(d);
		free(img);
		return -ENOMEM;
	}
	*u = (struct farm_ht_usage){.buckets = sd->nbuckets + 1ull};
	u->slots = u->buckets * h->spb;
	int rc = 0;
	for (uint32_t b = 0; b <= sd->nbuckets; b++) {
		const uint8_t *p = farm_as_local_ptr(
		        h->as, sd->base + (uint64_t)b * bb, bb);
		if (!p) {
			rc = FARM_ECORRUPT;
			break;
		}
		farm_lines_copy(img, p, bb, LINE_TRIES);
		obj_unpack(img, h->bucket_data, d);
		farm_fatptr ovf = get_fat(B_OVF(d));
		for (unsigned i = 0; i < h->spb; i++) {
			const uint8_t *s = slot_at(h, d, i);
			if (!(s[0] & SLOT_USED))
				continue;
			u->pairs_in_buckets++;
			u->data_bytes += (uint64_t)s[1] + slot_vlen(s);
		}
		uint64_t len = 0;
		while (ovf.addr) {
			const uint8_t *bp =
			        farm_as_local_ptr(h->as, ovf.addr, kb);
			if (!bp) {
				rc = FARM_ECORRUPT;
				break;
			}
			farm_lines_copy(img, bp, kb, LINE_TRIES);
			obj_unpack(img, h->block_data, d);
			len++;
			for (unsigned i = 0; i < BLK_SLOTS; i++) {
				const uint8_t *s = blk_slot(h, d, i);
				if (!(s[0] & SLOT_USED))
					continue;
				u->pairs_in_chains++;
				u->data_bytes += (uint64_t)s[1] + slot_vlen(s);
			}
			ovf = get_fat(d + 8);
		}
		if (len) {
			u->chains++;
			u->chain_blocks += len;
			u->longest_chain = FARM_MAX(u->longest_chain, len);
		}
	}
	free(d);
	free(img);
	u->table_bytes = u->buckets * bb + u->chain_blocks * kb;
	return rc;
}

void farm_ht_stats_get(farm_ht *h, struct farm_ht_stats *out)
{
	if (!h || !out)
		return;
	uint64_t v[16];
	for (int i = 0; i < 16; i++)
		v[i] = atomic_load_explicit(&h->st.v[i], memory_order_relaxed);
	*out = (struct farm_ht_stats){.lookups = v[T_LOOKUPS],
	                              .lookup_reads = v[T_READS],
	                              .lookup_retries = v[T_RETRIES],
	                              .lookup_chain_reads = v[T_CHAIN],
	                              .puts = v[T_PUTS],
	                              .dels = v[T_DELS],
	                              .hops = v[T_HOPS],
	                              .chain_appends = v[T_CHAIN_APPENDS],
	                              .chain_frees = v[T_CHAIN_FREES],
	                              .combined_txns = v[T_COMBINED],
	                              .found = v[T_FOUND],
	                              .not_found = v[T_NOTFOUND]};
}

/* ---- first-read lookups (the KV store's batched multi-get)
 * ---------------------------------------------------------- */

/* One farm_ht_get_first(): the bucket pair's read, its validation and an
 * indirect value's read; anything else is FARM_HT_UNRESOLVED. */
struct first_op {
	farm_ht *h;
	struct htloop *l;
	uint8_t key[FARM_HT_MAX_KEY];
	uint32_t klen;
	uint64_t hash;
	uint8_t *img; /* 2 buckets, from the pool */
	uint8_t *d;   /* both buckets' data */
	uint8_t *obuf;
	uint32_t olen;
	bool torn; /* the local copy was not line-consistent */
	farm_ht_get_fn cont;
	void *ctx;
	farm_lf_op ep;
};

static void first_end(struct first_op *f, int status, const void *val,
                      uint32_t len)
{
	if (status == 0 || status == -ENOENT)
		st_add(f->h, status == 0 ? T_FOUND : T_NOTFOUND, 1);
	f->cont(f->l->loop, f->ctx, status, val, len);
	farm_lf_end(&f->ep);
	buf_put(f->l, f->img);
	free(f->d);
	free(f->obuf);
	free(f);
}

static void first_obj_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct first_op *f = ctx;
	if (status == FARM_EFREED || status == -EBUSY ||
	    status == FARM_EFLUSHED) {
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
		return;
	}
	if (status) {
		first_end(f, status, NULL, 0);
		return;
	}
	uint32_t kl, vl;
	if (!indirect_match(f->obuf, f->olen, f->key, f->klen, &kl, &vl)) {
		/* Another long key with the same hash, or a stale slot. */
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
		return;
	}
	first_end(f, 0, f->obuf + 8 + kl, vl);
}

/* The bucket pair is in f->img (on a later pass than the call). */
static void first_buckets(struct first_op *f)
{
	farm_ht *h = f->h;
	unsigned L = h->bucket_lines;
	uint64_t v, w;
	if (f->torn) {
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
		return;
	}
	int rc0 = obj_check(f->img, L, UINT64_MAX, &v, &w);
	int rc1 = obj_check(f->img + 64u * L, L, UINT64_MAX, &v, &w);
	if (rc0 == -EAGAIN || rc1 == -EAGAIN) {
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
		return;
	}
	if (rc0 || rc1) {
		first_end(f, FARM_ECORRUPT, NULL, 0); /* not a bucket */
		return;
	}
	uint8_t *d0 = f->d, *d1 = f->d + h->bucket_data;
	obj_unpack(f->img, h->bucket_data, d0);
	obj_unpack(f->img + 64u * L, h->bucket_data, d1);
	if (get64(B_FWD(d0)) != get64(B_BWD(d1))) {
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0); /* mixed commits */
		return;
	}
	for (unsigned i = 0; i < 2 * h->spb; i++) {
		uint8_t *s = slot_at(h, i < h->spb ? d0 : d1, i % h->spb);
		if (!slot_match(h, s, f->key, f->klen, f->hash))
			continue;
		if (!(s[0] & SLOT_INDIRECT)) {
			first_end(f, 0, s + 8 + h->K, slot_vlen(s));
			return;
		}
		farm_fatptr p = get_fat(s + 8 + h->K);
		if (!p.addr || p.size < 8 || p.size > FARM_TX_MAX_SIZE) {
			first_end(f, FARM_ECORRUPT, NULL, 0);
			return;
		}
		f->obuf = malloc(p.size);
		f->olen = p.size;
		if (!f->obuf) {
			first_end(f, -ENOMEM, NULL, 0);
			return;
		}
		st_add(h, T_READS, 1);
		int rc =
		        farm_lf_read(h->txm, f->l->loop, p.addr, p.size,
		                     p.incarnation, f->obuf, first_obj_done, f);
		if (rc)
			first_end(f, rc == -EAGAIN ? FARM_HT_UNRESOLVED : rc,
			          NULL, 0);
		return;
	}
	/* Not in b or b + 1: absent, unless the home has a chain. */
	first_end(f, get_fat(B_OVF(d0)).addr ? FARM_HT_UNRESOLVED : -ENOENT,
	          NULL, 0);
}

static void first_read_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct first_op *f = ctx;
	if (status == FARM_EFLUSHED)
		first_end(f, FARM_HT_UNRESOLVED, NULL, 0);
	else if (status)
		first_end(f, status, NULL, 0);
	else
		first_buckets(f);
}

int farm_ht_get_first(farm_ht *h, farm_loop *loop, const void *key,
                      uint32_t klen, farm_ht_get_fn cont, void *ctx)
{
	struct htloop *l;
	uint64_t hash;
	const struct farm_ht_shard *sd;
	int rc = lookup_prep(h, loop, key, klen, cont != NULL, &l, &hash, &sd);
	if (rc)
		return rc;
	struct first_op *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->d = malloc(2ull * h->bucket_data);
	f->img = f->d ? buf_get(l) : NULL;
	if (!f->img) {
		rc = f->d ? -EAGAIN : -ENOMEM; /* too many in flight */
		free(f->d);
		free(f);
		return rc;
	}
	f->h = h;
	f->l = l;
	memcpy(f->key, key, klen);
	f->klen = klen;
	f->hash = hash;
	f->cont = cont;
	f->ctx = ctx;
	uint32_t bb = 64u * h->bucket_lines;
	farm_gaddr a = sd->base + (uint64_t)home_of(hash, sd->nbuckets) * bb;
	if ((rc = farm_lf_begin(h->txm, loop, &f->ep))) {
		buf_put(l, f->img);
		free(f->d);
		free(f);
		return rc;
	}
	st_add(h, T_LOOKUPS, 1);
	st_add(h, T_READS, 1);
	const uint8_t *p = farm_as_local_ptr(h->as, a, 2ull * bb);
	if (p) {
		f->torn = !farm_lines_copy(f->img, p, 2ull * bb, LINE_TRIES);
		/* Complete on a later pass, as a remote read would. */
		rc = farm_loop_defer(loop, first_read_done, f);
	} else {
		rc = farm_as_read(h->as, loop, a, f->img, l->mr, 2 * bb,
		                  first_read_done, f);
	}
	if (rc) {
		farm_lf_end(&f->ep);
		buf_put(l, f->img);
		free(f->d);
		free(f);
	}
	return rc;
}

uint32_t farm_ht_max_value(const farm_ht *h, uint32_t klen)
{
	if (!h || klen == 0 || klen > FARM_HT_MAX_KEY)
		return 0;
	uint32_t p = farm_msg_max_payload(h->msg);
	uint32_t hdr = (uint32_t)sizeof(struct op_req) + klen;
	if (p <= hdr)
		return 0;
	return FARM_MIN(p - hdr, FARM_HT_MAX_VALUE);
}
