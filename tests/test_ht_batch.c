/*
 * The hashtable's batched local lookup (farm_ht_get_local_batch, ht.h) on
 * three in-process machines: against a model of keys of three lengths
 * (short, inline, long: hash in the slot) and values inline and in
 * objects of their own, with deletes and a table full enough for chains
 * (which it walks when their blocks are local), every answer it gives is
 * the model's (unresolved only where the full lookup must decide:
 * another machine's shard, an object), and farm_ht_get agrees (every
 * other batch through farm_ht_get_local_batch_hashed); the same
 * keys through farm_ht_get_many (ht_get.c: windows of every shard's keys,
 * a bad key in each) answer as the model; bad arguments; the key hash
 * (ht.h) reads every byte of keys of every length and spreads keys alike
 * but for a counter evenly over homes and shards;
 * and a writer thread installing bucket images over a pair (the install
 * protocol of txn/object.h) while batches read it: a value is never torn;
 * and a new version of a bucket installed inside the window of a found
 * slot's read (after its header and key, before its value), every time: the
 * answer is one version's value, never the header of one and the value
 * of the other; the same window for farm_ht_get's local lookup, which
 * answers a found key from its slot alone too (every other lookup there
 * through farm_ht_get_many, whose local lookups complete the same way).
 *
 * --broken: only those last two cases, with the found slot's reads not
 * checked afterwards (FARM_FP_HT_SLOT_NO_CHECK): a torn value must be
 * seen by each.
 */
#include "asnodes.h"
#include "brokenarg.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "hashtable/ht.h"
#include "hashtable/ht_int.h"
#include "txn/object.h"

#define RSIZE (32ull << 20)
#define NK    300u

static struct asn_cluster C;
static farm_ht *H[3];
static struct farm_ht_shard SD[3];

static void hook(struct asn *x, unsigned i)
{
	assert_int_equal(
	        farm_ht_create(x->txm, x->as, x->ga, x->msg, NULL, &H[i]), 0);
}

struct res {
	int done, status;
	uint8_t val[512];
	uint32_t len;
	struct farm_ht_shard sd;
};
static struct res R;

static void op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	((struct res *)ctx)->status = status;
	((struct res *)ctx)->done = 1;
}

static void get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                   uint32_t len)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->len = len;
	if (!status && len <= sizeof(r->val))
		memcpy(r->val, val, len);
	r->done = 1;
}

static void shard_cb(farm_loop *loop, void *ctx, int status,
                     struct farm_ht_shard sd)
{
	(void)loop;
	((struct res *)ctx)->status = status;
	((struct res *)ctx)->sd = sd;
	((struct res *)ctx)->done = 1;
}

static int put(unsigned m, const void *k, uint32_t kl, const void *v,
               uint32_t vl)
{
	R.done = 0;
	int rc = farm_ht_put(H[m], C.m[m].loop, k, kl, v, vl, op_cb, &R);
	if (!rc)
		asn_wait(&C, &R.done);
	return rc ? rc : R.status;
}

static int get(unsigned m, const void *k, uint32_t kl)
{
	R.done = 0;
	int rc = farm_ht_get(H[m], C.m[m].loop, k, kl, get_cb, &R);
	if (!rc)
		asn_wait(&C, &R.done);
	return rc ? rc : R.status;
}

/* farm_ht_get_many of one key (its answer in R, as get's). */
static int get_many1(unsigned m, const void *k, uint32_t kl)
{
	R.done = 0;
	const void *ks[1] = {k};
	void *cs[1] = {&R};
	int rc, st = farm_ht_get_many(H[m], C.m[m].loop, 1, ks, &kl, get_cb, cs,
	                              &rc);
	if (st)
		return st;
	if (!rc)
		asn_wait(&C, &R.done);
	return rc ? rc : R.status;
}

static void make_shards(uint32_t nb)
{
	for (unsigned i = 0; i < 3; i++) {
		R.done = 0;
		assert_int_equal(
		        farm_ht_make_shard(H[i], C.m[i].loop, nb, shard_cb, &R),
		        0);
		asn_wait(&C, &R.done);
		assert_int_equal(R.status, 0);
		SD[i] = R.sd;
	}
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(farm_ht_set_shards(H[i], SD, 3), 0);
}

static int setup(void **state)
{
	(void)state;
	asn_open(&C, 3, RSIZE, hook);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(farm_ht_attach(H[i], C.m[i].loop), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (unsigned i = 0; i < 3; i++) {
		farm_ht_detach(H[i], C.m[i].loop);
		farm_ht_destroy(H[i]);
	}
	asn_close(&C);
	return 0;
}

struct mkey {
	uint8_t key[40], val[300];
	uint32_t klen, vlen;
	bool present;
};
static struct mkey M[NK];
static uint64_t Chain_reads; /* chain blocks the batches read */

/* Key @i: 5, 16 or 40 bytes; value 8, 32 (inline) or 300 bytes (an
 * object), each byte from the key's number. */
static void mk(unsigned i)
{
	struct mkey *k = &M[i];
	k->klen = i % 7 == 0 ? 40 : i % 5 == 0 ? 5 : 16;
	memset(k->key, 'a' + (int)(i % 26), sizeof(k->key));
	snprintf((char *)k->key, 6, "%05u", i);
	k->vlen = i % 11 == 0 ? 300 : i % 3 == 0 ? 8 : 32;
	for (uint32_t j = 0; j < k->vlen; j++)
		k->val[j] = (uint8_t)(i * 7 + j);
}

/* Every key, in batches of up to 64 on machine @m, against the model
 * and farm_ht_get; returns how many the batches answered. */
static unsigned check_batches(unsigned m)
{
	static uint8_t img[FARM_HT_BATCH_MAX * 4096];
	assert_true(farm_ht_batch_bytes(H[m]) * FARM_HT_BATCH_MAX <=
	            sizeof(img));
	struct farm_ht_lkey lk[FARM_HT_BATCH_MAX];
	unsigned answered = 0;
	for (unsigned at = 0; at < NK; at += 37) {
		unsigned n = NK - at < 37 ? NK - at : 37;
		/* Every other batch with the keys hashed by the caller, as
		 * the KV store's multi-get passes them: the same answers. */
		bool hashed = (at / 37) % 2;
		for (unsigned j = 0; j < n; j++) {
			lk[j].key = M[at + j].key;
			lk[j].klen = M[at + j].klen;
			/* Without _hashed, a wrong one is ignored. */
			lk[j].hash =
			        hashed ? farm_ht_hash(lk[j].key, lk[j].klen)
			               : 0;
		}
		struct farm_ht_stats s0, s1;
		farm_ht_stats_get(H[m], &s0);
		assert_int_equal(hashed ? farm_ht_get_local_batch_hashed(
		                                  H[m], C.m[m].loop, lk, n, img)
		                        : farm_ht_get_local_batch(H[m],
		                                                  C.m[m].loop,
		                                                  lk, n, img),
		                 0);
		farm_ht_stats_get(H[m], &s1);
		Chain_reads += s1.lookup_chain_reads - s0.lookup_chain_reads;
		for (unsigned j = 0; j < n; j++) {
			const struct mkey *k = &M[at + j];
			uint64_t hash = farm_ht_hash(k->key, k->klen);
			bool here = farm_ht_shard_index(hash, 3) == m;
			int st = lk[j].status;
			if (!here || (k->present && k->vlen == 300))
				assert_int_equal(st, FARM_HT_UNRESOLVED);
			if (st == 0) {
				assert_true(k->present);
				assert_int_equal(lk[j].vlen, k->vlen);
				assert_memory_equal(lk[j].val, k->val, k->vlen);
			} else if (st == -ENOENT) {
				assert_false(k->present);
			} else {
				assert_int_equal(st, FARM_HT_UNRESOLVED);
			}
			answered += st != FARM_HT_UNRESOLVED;
			int g = get(m, k->key, k->klen);
			assert_int_equal(g, k->present ? 0 : -ENOENT);
			if (!g)
				assert_memory_equal(R.val, k->val, k->vlen);
		}
	}
	return answered;
}

/* Every key, and a bad key in each window, through farm_ht_get_many in
 * windows of 61 on machine @m (every shard's keys, local and READ):
 * every answer the model's, the bad keys refused in their rcs and never
 * answered, every other continuation run once. */
static void check_many(unsigned m)
{
	static struct res rs[FARM_HT_BATCH_MAX];
	const void *ks[FARM_HT_BATCH_MAX];
	uint32_t kls[FARM_HT_BATCH_MAX];
	void *cs[FARM_HT_BATCH_MAX];
	int rcs[FARM_HT_BATCH_MAX];
	const unsigned W = 61;
	for (unsigned at = 0; at < NK; at += W - 1) {
		unsigned nk = NK - at < W - 1 ? NK - at : W - 1, n = nk + 1;
		for (unsigned j = 0; j < nk; j++) {
			ks[j] = M[at + j].key;
			kls[j] = M[at + j].klen;
		}
		/* A bad key among them: too long, then empty. */
		ks[nk] = "bad";
		kls[nk] = (at / (W - 1)) % 2 ? FARM_HT_MAX_KEY + 1 : 0;
		for (unsigned j = 0; j < n; j++) {
			rs[j].done = 0;
			cs[j] = &rs[j];
		}
		assert_int_equal(farm_ht_get_many(H[m], C.m[m].loop, n, ks, kls,
		                                  get_cb, cs, rcs),
		                 0);
		assert_int_equal(rcs[nk], kls[nk] ? -E2BIG : -EINVAL);
		for (unsigned j = 0; j < nk; j++) {
			assert_int_equal(rcs[j], 0);
			asn_wait(&C, &rs[j].done);
		}
		for (unsigned j = 0; j < nk; j++) {
			const struct mkey *k = &M[at + j];
			assert_int_equal(rs[j].status,
			                 k->present ? 0 : -ENOENT);
			if (k->present) {
				assert_int_equal(rs[j].len, k->vlen);
				assert_memory_equal(rs[j].val, k->val, k->vlen);
			}
		}
		assert_int_equal(rs[nk].done, 0);
	}
}

/* The key hash reads every byte of a key of any length: one bit changed
 * anywhere changes the hash (each word folds into the state one-to-one,
 * and the finish is a bijection), as does the length alone. */
static void test_hash_bytes(void **state)
{
	(void)state;
	uint8_t k[72];
	for (unsigned i = 0; i < sizeof(k); i++)
		k[i] = (uint8_t)(i * 37 + 11);
	for (uint32_t len = 0; len <= sizeof(k); len++) {
		uint64_t h = farm_ht_hash(k, len);
		if (len < sizeof(k))
			assert_true(h != farm_ht_hash(k, len + 1));
		for (uint32_t at = 0; at < len; at++)
			for (unsigned bit = 0; bit < 8; bit++) {
				k[at] ^= (uint8_t)(1u << bit);
				assert_true(farm_ht_hash(k, len) != h);
				k[at] ^= (uint8_t)(1u << bit);
			}
	}
}

/* Keys alike but for a counter (the usual "user12345") spread evenly
 * over the home buckets and the shards, which take the hash's middle and
 * high bits: no bin more than 6 standard deviations from its mean. */
static void test_hash_spread(void **state)
{
	(void)state;
	enum { KEYS = 1 << 20, BINS = 1021, SHARDS = 7 };
	static uint32_t home[BINS], shard[SHARDS];
	char k[32];
	for (uint32_t i = 0; i < KEYS; i++) {
		int n = snprintf(k, sizeof(k), "user%u", i);
		uint64_t h = farm_ht_hash(k, (uint32_t)n);
		home[(h >> 11) % BINS]++;
		shard[farm_ht_shard_index(h, SHARDS)]++;
	}
	double mean = (double)KEYS / BINS, sd = sqrt(mean);
	for (unsigned b = 0; b < BINS; b++)
		assert_true(fabs(home[b] - mean) < 6 * sd);
	mean = (double)KEYS / SHARDS;
	sd = sqrt(mean);
	for (unsigned b = 0; b < SHARDS; b++)
		assert_true(fabs(shard[b] - mean) < 6 * sd);
}

static void test_model(void **state)
{
	(void)state;
	/* 3 x 24 buckets x 4 slots = 288 slots for 276 keys: hops and
	 * chains that the batches walk. */
	make_shards(24);
	for (unsigned i = 0; i < NK; i++) {
		mk(i);
		M[i].present = i % 13 != 0;
		if (M[i].present)
			assert_int_equal(put(i % 3, M[i].key, M[i].klen,
			                     M[i].val, M[i].vlen),
			                 0);
	}
	unsigned answered = 0;
	for (unsigned m = 0; m < 3; m++)
		answered += check_batches(m);
	for (unsigned m = 0; m < 3; m++)
		check_many(m);
	/* Most local inline keys, present and absent, answered at once. */
	printf("batches answered %u of %u keys, %" PRIu64
	       " chain blocks read\n",
	       answered, NK, Chain_reads);
	assert_true(answered > NK / 2);
	assert_true(Chain_reads > 0);
}

static void test_bad_input(void **state)
{
	(void)state;
	make_shards(8);
	uint8_t img[4096 * 2];
	struct farm_ht_lkey lk[2] = {{.key = NULL, .klen = 4},
	                             {.key = "k", .klen = FARM_HT_MAX_KEY + 1}};
	assert_int_equal(farm_ht_get_local_batch(NULL, C.m[0].loop, lk, 2, img),
	                 -EINVAL);
	assert_int_equal(farm_ht_get_local_batch(H[0], NULL, lk, 2, img),
	                 -EINVAL);
	assert_int_equal(farm_ht_get_local_batch(H[0], C.m[1].loop, lk, 2, img),
	                 -EINVAL); /* another machine's loop */
	assert_int_equal(farm_ht_get_local_batch(H[0], C.m[0].loop, lk,
	                                         FARM_HT_BATCH_MAX + 1, img),
	                 -E2BIG);
	assert_int_equal(farm_ht_get_local_batch(H[0], C.m[0].loop, lk, 2, img),
	                 0);
	assert_int_equal(lk[0].status, -EINVAL);
	assert_int_equal(lk[1].status, -E2BIG);
	assert_int_equal(farm_ht_get_local_batch(H[0], C.m[0].loop, lk, 0, img),
	                 0);
	/* farm_ht_get_many's own arguments: nothing started. */
	const void *ks[1] = {"k"};
	uint32_t kl = 1;
	void *cs[1] = {&R};
	int rc = 1;
	assert_int_equal(farm_ht_get_many(NULL, C.m[0].loop, 1, ks, &kl, get_cb,
	                                  cs, &rc),
	                 -EINVAL);
	assert_int_equal(farm_ht_get_many(H[0], C.m[1].loop, 1, ks, &kl, get_cb,
	                                  cs, &rc),
	                 -EINVAL);
	assert_int_equal(
	        farm_ht_get_many(H[0], C.m[0].loop, 1, ks, &kl, NULL, cs, &rc),
	        -EINVAL);
	assert_int_equal(farm_ht_get_many(H[0], C.m[0].loop, 1, NULL, &kl,
	                                  get_cb, cs, &rc),
	                 -EINVAL);
	assert_int_equal(farm_ht_get_many(H[0], C.m[0].loop,
	                                  FARM_HT_BATCH_MAX + 1, ks, &kl,
	                                  get_cb, cs, &rc),
	                 -E2BIG);
	assert_int_equal(rc, 1); /* untouched */
	assert_int_equal(farm_ht_get_many(H[0], C.m[0].loop, 0, NULL, NULL,
	                                  get_cb, NULL, NULL),
	                 0); /* nothing to do */
}

/* ---- a writer racing the batches ----------------------------------------- */

static _Atomic int Stop;
static uint8_t *Pair; /* the bucket pair in machine 0's memory */

/* obj_install's protocol (txn/object.h) with the data lines written last
 * to first, a pause between them: a reader that copied the lines without
 * checking their versions would see values of two writes across a line. */
static void install_backwards(uint8_t *obj, unsigned L, const uint8_t *img,
                              uint64_t nv)
{
	_Atomic uint64_t *hv = (_Atomic uint64_t *)(void *)obj;
	uint64_t locked = (atomic_load(hv) & ~OBJ_LOCK_MASK) | OBJ_LOCK_EXCL;
	atomic_store(hv, locked);
	for (unsigned l = 1; l < L; l++)
		atomic_store((_Atomic uint16_t *)(void *)(obj + 64u * l),
		             obj_v16(locked));
	atomic_thread_fence(memory_order_seq_cst);
	for (unsigned l = L; l-- > 1;) {
		memcpy(obj + 64u * l + 2, img + 64u * l + 2, 62);
		for (int i = 0; i < 50; i++)
			farm_cpu_relax();
	}
	memcpy(obj + FARM_OBJHDR_SIZE, img + FARM_OBJHDR_SIZE,
	       64 - FARM_OBJHDR_SIZE);
	atomic_thread_fence(memory_order_seq_cst);
	for (unsigned l = 1; l < L; l++)
		atomic_store((_Atomic uint16_t *)(void *)(obj + 64u * l),
		             obj_v16(nv));
	atomic_store(hv, nv); /* pairs with the reader's acquire of line 0 */
}

/* Rewrite every used slot of bucket b (the pair's first) with a value of
 * one repeated byte, a new one each time, by the install protocol, until
 * told to stop. */
static void *writer(void *arg)
{
	(void)arg;
	farm_ht *h = H[0];
	unsigned L = h->bucket_lines;
	uint8_t img[64 * 16], data[64 * 16];
	for (unsigned x = 1; !atomic_load(&Stop); x++) {
		uint64_t v = atomic_load((_Atomic uint64_t *)(void *)Pair);
		memcpy(img, Pair, 64u * L);
		obj_unpack(img, h->bucket_data, data);
		for (unsigned s = 0; s < h->spb; s++) {
			uint8_t *sl = slot_at(h, data, s);
			if (sl[0] & SLOT_USED)
				memset(sl + 8 + h->K, (int)(x & 0xff),
				       slot_vlen(sl));
		}
		uint64_t nv = (v & ~OBJ_LOCK_MASK) + OBJ_VSTEP;
		obj_pack(img, L, data, h->bucket_data, nv, get64(Pair + 8));
		install_backwards(Pair, L, img, nv);
	}
	return NULL;
}

/*
 * Keys whose home is bucket b of machine 0's shard and that sit in b:
 * while the writer rewrites b, every value a batch returns is of one
 * write (one repeated byte, in every slot of the pair, a value crossing a
 * line's version too), never a mix.
 */
static void test_torn(void **state)
{
	(void)state;
	make_shards(4);
	farm_ht *h = H[0];
	uint32_t bb = 64u * h->bucket_lines;
	/* Fill shard 0's bucket 1 (all four slots: one value crosses a line
	 * with 16-byte keys and 32-byte values). */
	char keys[64][16];
	unsigned nk = 0;
	for (unsigned i = 0; nk < 4 && i < 100000; i++) {
		char k[16];
		memset(k, 0, sizeof(k));
		snprintf(k, sizeof(k), "torn%u", i);
		uint64_t hash = farm_ht_hash(k, 16);
		if (farm_ht_shard_index(hash, 3) != 0 || home_of(hash, 4) != 1)
			continue;
		uint8_t v[32];
		memset(v, 0, sizeof(v));
		assert_int_equal(put(0, k, 16, v, 32), 0);
		memcpy(keys[nk++], k, 16);
	}
	assert_int_equal(nk, 4);
	Pair = (uint8_t *)(uintptr_t)farm_as_local_ptr(
	        C.m[0].as, SD[0].base + bb, 2ull * bb);
	assert_non_null(Pair);
	pthread_t th;
	atomic_store(&Stop, 0);
	assert_int_equal(pthread_create(&th, NULL, writer, NULL), 0);
	static uint8_t img[4 * 4096];
	/* Nothing asserted until the writer stopped: a failed assertion
	 * would tear the machines down under it. */
	uint64_t found = 0, unresolved = 0, torn = 0, bad = 0;
	uint64_t t0 = farm_now_ns();
	while (found < 200000 && farm_now_ns() - t0 < 20000000000ull) {
		struct farm_ht_lkey lk[4];
		for (unsigned j = 0; j < 4; j++)
			lk[j] = (struct farm_ht_lkey){.key = keys[j],
			                              .klen = 16};
		bad += farm_ht_get_local_batch(h, C.m[0].loop, lk, 4, img) != 0;
		for (unsigned j = 0; j < 4; j++) {
			if (lk[j].status == FARM_HT_UNRESOLVED) {
				unresolved++;
				continue;
			}
			if (lk[j].status != 0 || lk[j].vlen != 32) {
				bad++;
				continue;
			}
			const uint8_t *v = lk[j].val;
			for (unsigned b = 1; b < 32; b++)
				torn += v[b] != v[0];
			found++;
		}
	}
	atomic_store(&Stop, 1);
	pthread_join(th, NULL);
	printf("torn: %" PRIu64 " found, %" PRIu64 " unresolved, %" PRIu64
	       " torn bytes, %" PRIu64 " other failures\n",
	       found, unresolved, torn, bad);
	assert_int_equal(bad, 0);
	assert_int_equal(torn, 0);
	assert_true(found > 0);
}

/* ---- a commit inside the slot copy's window ------------------------------ */

static bool Broken;

/* The window key's value at version @x: @x bytes @x long, 32 bytes when
 * @x is odd, 20 when even. A value of one version is all one byte, and
 * its length that byte's; a slot header of one version over the value
 * lines of the next is not. */
static uint32_t win_len(uint8_t x)
{
	return x & 1 ? 32 : 20;
}

struct window {
	uint8_t *bucket; /* in machine 0's memory */
	int armed;       /* install at the next hit, once */
	uint8_t x;       /* the version of the value installed last */
	unsigned installs;
};

/* The delay hook, on the batch's thread between the copy of the slot's
 * line 0 and of its other lines: a new version of the bucket installed
 * by the install protocol a commit uses (obj_install), the key in slot 0
 * given the next version's value (another length, another byte; the rest
 * of the value area keeps the old bytes). */
static void window_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	struct window *w = arg;
	if (!w->armed)
		return;
	w->armed = 0;
	farm_ht *h = H[0];
	unsigned L = h->bucket_lines;
	uint8_t img[64 * 16], data[64 * 16];
	uint64_t v = atomic_load((_Atomic uint64_t *)(void *)w->bucket);
	memcpy(img, w->bucket, 64u * L);
	obj_unpack(img, h->bucket_data, data);
	uint8_t *sl = slot_at(h, data, 0);
	uint32_t n = win_len(++w->x);
	memcpy(sl + 4, &n, 4);
	memset(sl + 8 + h->K, w->x, n);
	uint64_t nv = (v & ~OBJ_LOCK_MASK) + OBJ_VSTEP;
	obj_pack(img, L, data, h->bucket_data, nv, get64(w->bucket + 8));
	obj_install(w->bucket, L, img, nv);
	w->installs++;
}

/* The one key of shard 0's bucket 1 (so in its slot 0, whose header is
 * in line 0 and value in the lines after it). */
static uint8_t *window_key(char k[16])
{
	farm_ht *h = H[0];
	const struct ht_smap *m = &h->smap[0];
	assert_int_equal(m->line_lo, 0);
	assert_true(m->line_hi >= 1 && m->nvpieces >= 1 && m->val_at[0] >= 64);
	for (unsigned i = 0; i < 100000; i++) {
		memset(k, 0, 16);
		snprintf(k, 16, "win%u", i);
		uint64_t hash = farm_ht_hash(k, 16);
		if (farm_ht_shard_index(hash, 3) == 0 && home_of(hash, 4) == 1)
			break;
	}
	uint8_t v[32];
	memset(v, 1, sizeof(v));
	assert_int_equal(put(0, k, 16, v, win_len(1)), 0);
	uint32_t bb = 64u * h->bucket_lines;
	uint8_t *b = (uint8_t *)(uintptr_t)farm_as_local_ptr(
	        C.m[0].as, SD[0].base + bb, 2ull * bb);
	assert_non_null(b);
	uint8_t data[64 * 16];
	obj_unpack(b, h->bucket_data, data);
	assert_memory_equal(slot_at(h, data, 0) + 8, k, 16);
	return b;
}

/* Whether value @v of @vlen bytes is a whole value of version @x or
 * @x - 1. */
static bool whole_value(const uint8_t *v, uint32_t vlen, uint8_t x)
{
	if (vlen != win_len(v[0]) || (v[0] != x && v[0] != (uint8_t)(x - 1)))
		return false;
	for (uint32_t i = 1; i < vlen; i++)
		if (v[i] != v[0])
			return false;
	return true;
}

static bool window_whole(const struct farm_ht_lkey *lk, uint8_t x)
{
	return whole_value(lk->val, lk->vlen, x);
}

/*
 * The key found in place and answered from its slot alone; inside the
 * window every lookup has a new version of the bucket installed (by the
 * delay hook, synchronously). The slot's header was read at the old
 * version, its value is read at the new: the answer must be refused (and
 * the whole pair decide) or be unresolved, never the old header's length
 * over the new value's bytes.
 */
static void test_window(void **state)
{
	(void)state;
	make_shards(4);
	char k[16];
	struct window w = {.bucket = window_key(k), .x = 1};
	if (farm_fault_set(FARM_FP_HT_SLOT_WINDOW, window_hook, &w)) {
		printf("skipped: built without fault injection\n");
		skip();
	}
	static uint8_t img[4096];
	unsigned rounds = 64, found = 0, unresolved = 0, torn = 0, bad = 0;
	for (unsigned r = 0; r < rounds; r++) {
		struct farm_ht_lkey lk = {.key = k, .klen = 16};
		w.armed = 1;
		bad += farm_ht_get_local_batch(H[0], C.m[0].loop, &lk, 1,
		                               img) != 0;
		if (lk.status == FARM_HT_UNRESOLVED)
			unresolved++;
		else if (lk.status != 0)
			bad++;
		else if (window_whole(&lk, w.x))
			found++;
		else
			torn++;
	}
	assert_int_equal(farm_fault_set(FARM_FP_HT_SLOT_WINDOW, NULL, NULL), 0);
	printf("window: %u installs in %u lookups; %u whole, %u unresolved, "
	       "%u torn, %u other failures\n",
	       w.installs, rounds, found, unresolved, torn, bad);
	assert_int_equal(w.installs, rounds); /* every lookup in the window */
	assert_int_equal(bad, 0);
	if (Broken) {
		if (!torn)
			fail_msg("--broken: no torn value seen: the test "
			         "cannot see the version check's absence");
		printf("--broken: torn values taken, as they must be without "
		       "the check\n");
		return;
	}
	assert_int_equal(torn, 0);
	assert_true(found > 0);
	/* The last version installed is whole for the full lookup too. */
	assert_int_equal(get(0, k, 16), 0);
	assert_int_equal(R.len, win_len(w.x));
	for (uint32_t i = 0; i < R.len; i++)
		assert_int_equal(R.val[i], w.x);
}

/*
 * The same window for farm_ht_get's local lookup, which answers a key
 * found in place from its slot's copy alone too (ht_get.c,
 * get_local_slot): the copy refused, the whole pair answers; never a torn
 * value.
 */
static void test_window_get(void **state)
{
	(void)state;
	make_shards(4);
	char k[16];
	struct window w = {.bucket = window_key(k), .x = 1};
	if (farm_fault_set(FARM_FP_HT_SLOT_WINDOW, window_hook, &w)) {
		printf("skipped: built without fault injection\n");
		skip();
	}
	unsigned rounds = 64, found = 0, torn = 0, bad = 0;
	for (unsigned r = 0; r < rounds; r++) {
		w.armed = 1;
		/* Every other lookup through farm_ht_get_many's group. */
		if ((r % 2 ? get_many1(0, k, 16) : get(0, k, 16)) != 0)
			bad++;
		else if (whole_value(R.val, R.len, w.x))
			found++;
		else
			torn++;
	}
	assert_int_equal(farm_fault_set(FARM_FP_HT_SLOT_WINDOW, NULL, NULL), 0);
	printf("window (farm_ht_get, _many): %u installs in %u lookups; "
	       "%u whole, %u torn, %u failures\n",
	       w.installs, rounds, found, torn, bad);
	/* Every lookup took the slot's copy, inside the window. */
	assert_int_equal(w.installs, rounds);
	assert_int_equal(bad, 0);
	if (Broken) {
		if (!torn)
			fail_msg("--broken: no torn value seen by farm_ht_get: "
			         "the test cannot see the version check's "
			         "absence");
		printf("--broken: farm_ht_get took torn values, as it must "
		       "without the check\n");
		return;
	}
	assert_int_equal(torn, 0);
	assert_int_equal(found, rounds);
}

int main(int argc, char **argv)
{
	int st = tu_broken_arg(argc, argv, FARM_FP_HT_SLOT_NO_CHECK, &Broken);
	if (st)
		return st;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_hash_bytes),
	        cmocka_unit_test(test_hash_spread),
	        cmocka_unit_test_setup_teardown(test_model, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_bad_input, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_torn, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_window, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_window_get, setup,
	                                        teardown),
	};
	/* --broken: the window's cases alone (the others are not made to
	 * expect the check off). */
	const struct CMUnitTest broken_tests[] = {
	        cmocka_unit_test_setup_teardown(test_window, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_window_get, setup,
	                                        teardown),
	};
	if (Broken)
		return cmocka_run_group_tests(broken_tests, NULL, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
