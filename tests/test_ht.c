/*
 * The hashtable (src/hashtable/ht.h) on three in-process machines driven
 * by one thread: a long random sequence of puts, gets and deletes from
 * every machine against an in-memory model (with hops, overflow chains,
 * removes that collapse chains, long keys and large values), occupancy
 * past 90% with H = 8 without a failed insert, and bad input.
 */
#include "asnodes.h"

#include <inttypes.h>

#include "hashtable/ht.h"

#define RSIZE (32ull << 20)

static struct asn_cluster C;
static farm_ht *H[3];

static void hook(struct asn *x, unsigned i)
{
	assert_int_equal(
	        farm_ht_create(x->txm, x->as, x->ga, x->msg, NULL, &H[i]), 0);
}

struct res {
	int done, status;
	uint8_t val[FARM_HT_MAX_VALUE];
	uint32_t len;
	struct farm_ht_shard sd;
};

static void op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->done = 1;
}

static void get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                   uint32_t len)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->len = len;
	if (!status)
		memcpy(r->val, val, len);
	r->done = 1;
}

static void shard_cb(farm_loop *loop, void *ctx, int status,
                     struct farm_ht_shard sd)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->sd = sd;
	r->done = 1;
}

static struct res R; /* one operation at a time */

static int put(unsigned m, const void *k, uint32_t kl, const void *v,
               uint32_t vl)
{
	memset(&R, 0, sizeof(R.done) + sizeof(R.status));
	R.done = 0;
	int rc = farm_ht_put(H[m], C.m[m].loop, k, kl, v, vl, op_cb, &R);
	if (rc)
		return rc;
	asn_wait(&C, &R.done);
	return R.status;
}

static int del(unsigned m, const void *k, uint32_t kl)
{
	R.done = 0;
	int rc = farm_ht_del(H[m], C.m[m].loop, k, kl, op_cb, &R);
	if (rc)
		return rc;
	asn_wait(&C, &R.done);
	return R.status;
}

static int get(unsigned m, const void *k, uint32_t kl)
{
	R.done = 0;
	int rc = farm_ht_get(H[m], C.m[m].loop, k, kl, get_cb, &R);
	if (rc)
		return rc;
	asn_wait(&C, &R.done);
	return R.status;
}

/* Shards: one per machine of @nb buckets, set on every machine. */
static void make_shards(uint32_t nb)
{
	struct farm_ht_shard sd[3];
	for (unsigned i = 0; i < 3; i++) {
		R.done = 0;
		assert_int_equal(
		        farm_ht_make_shard(H[i], C.m[i].loop, nb, shard_cb, &R),
		        0);
		asn_wait(&C, &R.done);
		assert_int_equal(R.status, 0);
		sd[i] = R.sd;
	}
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(farm_ht_set_shards(H[i], sd, 3), 0);
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

/* ---- the model
 * ------------------------------------------------------------------ */

#define NKEYS 600

struct mkey {
	uint8_t key[40];
	uint32_t klen;
	bool present;
	uint8_t val[300];
	uint32_t vlen;
};

static struct mkey M[NKEYS];

static void mk_key(unsigned i, uint64_t *seed)
{
	/* Mostly 16-byte keys; some short; some long (hash in the slot). */
	unsigned kind = (unsigned)(farm_rand64(seed) % 10);
	M[i].klen = kind == 0 ? 40 : kind == 1 ? 5 : 16;
	snprintf((char *)M[i].key, sizeof(M[i].key), "key-%u-", i);
	for (uint32_t j = (uint32_t)strlen((char *)M[i].key); j < M[i].klen;
	     j++)
		M[i].key[j] = (uint8_t)('a' + (i + j) % 26);
	if (M[i].klen == 5)
		snprintf((char *)M[i].key, 6, "k%04u", i);
}

static void check_all(unsigned m)
{
	for (unsigned i = 0; i < NKEYS; i++) {
		int rc = get(m, M[i].key, M[i].klen);
		if (M[i].present) {
			assert_int_equal(rc, 0);
			assert_int_equal(R.len, M[i].vlen);
			assert_memory_equal(R.val, M[i].val, M[i].vlen);
		} else {
			assert_int_equal(rc, -ENOENT);
		}
	}
}

static void test_model(void **state)
{
	(void)state;
	/* A small table (3 x 32 buckets x 4 slots = 384 slots) for 600 keys:
	 * hops and chains are certain. */
	make_shards(32);
	uint64_t seed = 12345;
	for (unsigned i = 0; i < NKEYS; i++)
		mk_key(i, &seed);
	unsigned present = 0;
	for (unsigned step = 0; step < 6000; step++) {
		unsigned i = (unsigned)(farm_rand64(&seed) % NKEYS);
		unsigned m = (unsigned)(farm_rand64(&seed) % 3);
		unsigned what = (unsigned)(farm_rand64(&seed) % 10);
		struct mkey *k = &M[i];
		if (what < 6) { /* put: small, medium or large values */
			unsigned sz = (unsigned)(farm_rand64(&seed) % 4);
			uint32_t vl = sz == 0   ? 8
			              : sz == 1 ? 32
			              : sz == 2 ? 100
			                        : 300;
			for (uint32_t j = 0; j < vl; j++)
				k->val[j] = (uint8_t)(step + j);
			assert_int_equal(put(m, k->key, k->klen, k->val, vl),
			                 0);
			k->vlen = vl;
			present += !k->present;
			k->present = true;
		} else if (what < 8) {
			int rc = del(m, k->key, k->klen);
			assert_int_equal(rc, k->present ? 0 : -ENOENT);
			present -= k->present;
			k->present = false;
		} else {
			int rc = get(m, k->key, k->klen);
			if (k->present) {
				assert_int_equal(rc, 0);
				assert_int_equal(R.len, k->vlen);
				assert_memory_equal(R.val, k->val, k->vlen);
			} else {
				assert_int_equal(rc, -ENOENT);
			}
		}
	}
	for (unsigned m = 0; m < 3; m++)
		check_all(m);
	struct farm_ht_stats s = {0}, t;
	for (unsigned m = 0; m < 3; m++) {
		farm_ht_stats_get(H[m], &t);
		s.hops += t.hops;
		s.chain_appends += t.chain_appends;
		s.chain_frees += t.chain_frees;
		s.lookups += t.lookups;
		s.lookup_reads += t.lookup_reads;
	}
	printf("model: %u keys present; %" PRIu64 " hops, %" PRIu64
	       " chain blocks added, %" PRIu64
	       " freed; %.3f reads per lookup\n",
	       present, s.hops, s.chain_appends, s.chain_frees,
	       (double)s.lookup_reads / (double)s.lookups);
	assert_true(s.hops > 0);
	assert_true(s.chain_appends > 0);
	assert_true(s.chain_frees > 0);
	/* Delete everything: chains collapse, nothing is left. */
	for (unsigned i = 0; i < NKEYS; i++)
		if (M[i].present) {
			assert_int_equal(del(i % 3, M[i].key, M[i].klen), 0);
			M[i].present = false;
		}
	check_all(1);
}

static bool count_cb(void *ctx, const void *k, uint32_t kl, const void *v,
                     uint32_t vl)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	(*(long *)ctx)++;
	return true;
}

static void test_occupancy(void **state)
{
	(void)state;
	/* 3 shards x 128 buckets x 4 slots = 1536 slots; fill 92%. */
	make_shards(128);
	unsigned slots = 3 * 128 * farm_ht_slots_per_bucket(H[0]);
	unsigned n = slots * 92 / 100;
	struct farm_ht_stats s0[3];
	for (unsigned m = 0; m < 3; m++)
		farm_ht_stats_get(H[m], &s0[m]);
	for (unsigned i = 0; i < n; i++) {
		char key[16], val[32];
		snprintf(key, sizeof(key), "occ%012u", i);
		memset(val, (int)(i & 0xff), sizeof(val));
		assert_int_equal(put(i % 3, key, 16, val, 32), 0);
	}
	uint64_t appends = 0, lookups = 0, reads = 0;
	for (unsigned i = 0; i < n; i++) {
		char key[16];
		snprintf(key, sizeof(key), "occ%012u", i);
		assert_int_equal(get((i + 1) % 3, key, 16), 0);
		assert_int_equal(R.val[0], (uint8_t)(i & 0xff));
	}
	for (unsigned m = 0; m < 3; m++) {
		struct farm_ht_stats t;
		farm_ht_stats_get(H[m], &t);
		appends += t.chain_appends - s0[m].chain_appends;
		lookups += t.lookups - s0[m].lookups;
		reads += t.lookup_reads - s0[m].lookup_reads;
	}
	long seen = 0;
	for (unsigned m = 0; m < 3; m++) {
		long c = farm_ht_iterate_local(H[m], m, count_cb, &seen);
		assert_true(c >= 0);
	}
	printf("occupancy %.1f%% of %u slots (H = 8): %" PRIu64
	       " chain blocks, %.3f reads per lookup\n",
	       100.0 * n / slots, slots, appends,
	       (double)reads / (double)lookups);
	assert_int_equal(seen, (long)n);
}

static void test_bad_input(void **state)
{
	(void)state;
	make_shards(8);
	uint8_t big[FARM_HT_MAX_KEY + 1] = {0};
	assert_int_equal(put(0, "", 0, "v", 1), -EINVAL);
	assert_int_equal(put(0, big, sizeof(big), "v", 1), -E2BIG);
	assert_int_equal(put(0, "k", 1, NULL, 0), -EINVAL);
	assert_int_equal(get(0, big, sizeof(big)), -E2BIG);
	assert_int_equal(get(0, NULL, 3), -EINVAL);
	assert_int_equal(del(0, "absent", 6), -ENOENT);
	assert_int_equal(get(1, "absent", 6), -ENOENT);
	static uint8_t huge[FARM_HT_MAX_VALUE + 1];
	assert_int_equal(put(0, "k", 1, huge, sizeof(huge)), -E2BIG);
	assert_int_equal(put(0, "k", 1, "v", 1), 0);
	assert_int_equal(get(2, "k", 1), 0);
	assert_int_equal(R.len, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_model),
	        cmocka_unit_test(test_occupancy),
	        cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
