/*
 * The public KV and node API, used the way an application uses it: this
 * file includes only installed headers (include/farm/; besides them only
 * the harness's libc-only tmpdir.h) and links the
 * shared library, whose other symbols are hidden, so it also proves that
 * the headers stand alone and that every function they declare is
 * exported. One machine (a configuration file written here, static
 * membership, no peers), an application-run loop:
 *
 *   open        a missing file and a bad key are errors; a good file opens
 *   store       put / get / delete, blocking and with continuations;
 *               a window of gets in one call (farm_kv_get_many);
 *               multi-get (present, absent, bad keys, a short buffer,
 *               more keys than a loop has lookups in flight);
 *               iteration over the shard; the directory; the counters
 *               (the table's: lookups found and not, puts, and an older
 *               caller's shorter snapshot)
 *   limits      keys of FARM_KV_MAX_KEY bytes and values of
 *               farm_kv_value_limit bytes round-trip; one byte more is
 *               -EMSGSIZE; empty keys and values are -EINVAL
 */
#include <farm/kv.h> /* first: stands alone */
#include <farm/node.h>
#include <farm/farm.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"

#define NPAIRS 40u

static char dir[256], conf[300];

static void write_conf(const char *path, const char *extra)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f,
	        "# one machine, no peers\n"
	        "machine_id = 0\n"
	        "data_dir = %s\n"
	        "region_size = 32M\n"
	        "threads = 1\n"
	        "%s",
	        dir, extra);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	(void)state;
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/farm-test-kvpub-XXXXXX", base);
	if (!mkdtemp(dir))
		return -1;
	snprintf(conf, sizeof(conf), "%s/machine.conf", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	/* The machine's files in its data dir, and the dir. */
	return tu_rmtree(dir);
}

static void test_open_errors(void **state)
{
	(void)state;
	farm_node *n = NULL;
	char missing[320];
	snprintf(missing, sizeof(missing), "%s/none.conf", dir);
	assert_int_equal(farm_node_open_file(missing, &n), -ENOENT);
	assert_int_equal(farm_node_open_file(NULL, &n), -EINVAL);
	write_conf(conf, "no_such_key = 1\n");
	assert_int_equal(farm_node_open_file(conf, &n), -EINVAL);
	assert_null(n);
}

struct w {
	volatile int done;
	int status;
	uint32_t len;
	uint8_t val[64];
};

static void get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                   uint32_t len)
{
	(void)loop;
	struct w *w = ctx;
	w->status = status;
	w->len = len;
	if (!status && len <= sizeof(w->val))
		memcpy(w->val, val, len);
	w->done = 1;
}

static void op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct w *w = ctx;
	w->status = status;
	w->done = 1;
}

struct iter {
	unsigned pairs, ours;
	unsigned big; /* the indirect pairs, with their bytes right */
};

static bool iter_cb(void *ctx, const void *key, uint32_t klen, const void *val,
                    uint32_t vlen)
{
	(void)val;
	struct iter *it = ctx;
	it->pairs++;
	it->ours += klen == 8 && memcmp(key, "pub-", 4) == 0 && vlen == 8;
	/* big-N: N + 1 KiB of byte N; a 200-byte key of 'L': 500 of 'l' */
	if (klen == 6 && memcmp(key, "big-", 4) == 0 && vlen > 1000) {
		unsigned n = (unsigned)(vlen - 1000);
		bool ok = true;
		for (uint32_t i = 0; i < vlen; i++)
			ok &= ((const uint8_t *)val)[i] == (uint8_t)n;
		it->big += ok;
	}
	if (klen == 200 && vlen == 500 && ((const uint8_t *)key)[199] == 'L' &&
	    ((const uint8_t *)val)[499] == 'l')
		it->big++;
	return true;
}

/* A window of gets in one call: three present keys, an absent one, an
 * empty and an over-long key (refused in their rcs, never answered). */
static void check_get_many(farm_kv *kv, farm_loop *loop)
{
	static char keys[3][16], big[FARM_KV_MAX_KEY + 1];
	const void *ks[6] = {keys[0], keys[1], keys[2], "pub-none", "", big};
	uint32_t kls[6] = {8, 8, 8, 8, 0, FARM_KV_MAX_KEY + 1};
	struct w ws[6] = {0};
	void *cs[6];
	int rcs[6];
	for (unsigned i = 0; i < 6; i++)
		cs[i] = &ws[i];
	for (unsigned i = 0; i < 3; i++)
		snprintf(keys[i], sizeof(keys[i]), "pub-%04u", 10 + i);
	memset(big, 'b', sizeof(big));
	assert_int_equal(
	        farm_kv_get_many(kv, loop, 6, ks, kls, get_cb, cs, rcs), 0);
	assert_int_equal(rcs[4], -EINVAL);
	assert_int_equal(rcs[5], -EMSGSIZE);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(rcs[i], 0);
		assert_int_equal(
		        farm_loop_wait(loop, &ws[i].done, 5000000000ull), 0);
	}
	for (unsigned i = 0; i < 3; i++) {
		uint64_t x;
		assert_int_equal(ws[i].status, 0);
		assert_int_equal(ws[i].len, 8);
		memcpy(&x, ws[i].val, 8);
		assert_int_equal(x, 1010 + i);
	}
	assert_int_equal(ws[3].status, -ENOENT);
	assert_int_equal(ws[4].done + ws[5].done, 0);
	assert_int_equal(farm_kv_get_many(kv, loop, FARM_KV_GET_MANY_MAX + 1,
	                                  ks, kls, get_cb, cs, rcs),
	                 -E2BIG);
	assert_int_equal(farm_kv_get_many(kv, loop, 6, ks, kls, NULL, cs, rcs),
	                 -EINVAL);
	assert_int_equal(
	        farm_kv_get_many(NULL, loop, 6, ks, kls, get_cb, cs, rcs),
	        -EINVAL);
}

/* Blocking puts, gets and deletes; a buffer too short. */
static void store_blocking(farm_kv *kv, farm_loop *loop)
{
	uint32_t len = 0;
	char key[16];
	for (unsigned i = 0; i < NPAIRS; i++) {
		snprintf(key, sizeof(key), "pub-%04u", i);
		uint64_t x = 1000 + i;
		assert_int_equal(farm_kv_put_sync(kv, loop, key, 8, &x, 8), 0);
	}
	uint64_t x = 0;
	assert_int_equal(
	        farm_kv_get_sync(kv, loop, "pub-0007", 8, &x, sizeof(x), &len),
	        0);
	assert_int_equal(len, 8);
	assert_int_equal(x, 1007);
	assert_int_equal(farm_kv_del_sync(kv, loop, "pub-0007", 8), 0);
	assert_int_equal(farm_kv_del_sync(kv, loop, "pub-0007", 8), -ENOENT);
	assert_int_equal(
	        farm_kv_get_sync(kv, loop, "pub-0007", 8, &x, sizeof(x), &len),
	        -ENOENT);
	/* a buffer too short: -EMSGSIZE and the value's length */
	uint8_t one;
	assert_int_equal(
	        farm_kv_get_sync(kv, loop, "pub-0001", 8, &one, 1, &len),
	        -EMSGSIZE);
	assert_int_equal(len, 8);
}

/* The table's counters: one lookup found, one not, one put; an older
 * caller's shorter struct. */
static void store_table_stats(farm_kv *kv, farm_loop *loop)
{
	uint64_t x = 0;
	uint32_t len = 0;
	farm_kv_table_stats t0 = {.size = sizeof(t0)},
	                    t1 = {.size = sizeof(t1)};
	assert_int_equal(farm_kv_table_stats_get(kv, &t0), 0);
	assert_int_equal(t0.version, FARM_KV_TABLE_STATS_VERSION);
	assert_int_equal(t0.size, sizeof(t0));
	assert_int_equal(
	        farm_kv_get_sync(kv, loop, "pub-0002", 8, &x, sizeof(x), &len),
	        0);
	assert_int_equal(
	        farm_kv_get_sync(kv, loop, "pub-none", 8, &x, sizeof(x), &len),
	        -ENOENT);
	assert_int_equal(farm_kv_put_sync(kv, loop, "pub-tabl", 8, &x, 8), 0);
	assert_int_equal(farm_kv_table_stats_get(kv, &t1), 0);
	assert_int_equal(t1.lookups - t0.lookups, 2);
	assert_true(t1.lookup_reads - t0.lookup_reads >= 2);
	assert_int_equal(t1.found - t0.found, 1);
	assert_int_equal(t1.not_found - t0.not_found, 1);
	assert_int_equal(t1.puts - t0.puts, 1);
	/* An older caller's shorter struct: only its prefix is written. */
	farm_kv_table_stats t2;
	memset(&t2, 0xa5, sizeof(t2));
	t2.size = offsetof(farm_kv_table_stats, lookup_reads);
	assert_int_equal(farm_kv_table_stats_get(kv, &t2), 0);
	assert_int_equal(t2.size, offsetof(farm_kv_table_stats, lookup_reads));
	assert_int_equal(t2.lookups, t1.lookups);
	assert_int_equal(t2.lookup_reads, 0xa5a5a5a5a5a5a5a5ull);
	t2.size = 4;
	assert_int_equal(farm_kv_table_stats_get(kv, &t2), -EINVAL);
	assert_int_equal(farm_kv_table_stats_get(NULL, &t1), -EINVAL);
	assert_int_equal(farm_kv_table_stats_get(kv, NULL), -EINVAL);
	assert_int_equal(farm_kv_del_sync(kv, loop, "pub-tabl", 8), 0);
}

/* Puts, gets and deletes with continuations; and get_many. */
static void store_continuations(farm_kv *kv, farm_loop *loop)
{
	struct w w = {0};
	assert_int_equal(
	        farm_kv_put(kv, loop, "async", 5, "value!", 6, op_cb, &w), 0);
	assert_int_equal(farm_loop_wait(loop, &w.done, 5000000000ull), 0);
	assert_int_equal(w.status, 0);
	w = (struct w){0};
	assert_int_equal(farm_kv_get(kv, loop, "async", 5, get_cb, &w), 0);
	assert_int_equal(farm_loop_wait(loop, &w.done, 5000000000ull), 0);
	assert_int_equal(w.status, 0);
	assert_int_equal(w.len, 6);
	assert_memory_equal(w.val, "value!", 6);
	check_get_many(kv, loop);
	w = (struct w){0};
	assert_int_equal(farm_kv_del(kv, loop, "async", 5, op_cb, &w), 0);
	assert_int_equal(farm_loop_wait(loop, &w.done, 5000000000ull), 0);
	assert_int_equal(w.status, 0);
	assert_int_equal(farm_kv_get(kv, loop, "", 0, get_cb, &w), -EINVAL);
	assert_int_equal(farm_kv_put(kv, loop, "k", 1, "v", 1, NULL, NULL),
	                 -EINVAL);
}

/* Multi-get: present, deleted, empty key, a short buffer. */
static void store_mget(farm_kv *kv, farm_loop *loop)
{
	const void *keys[5] = {"pub-0003", "pub-0007", "", "pub-0039", "async"};
	uint32_t klens[5] = {8, 8, 0, 8, 5}, lens[5];
	int st[5];
	uint64_t vals[5];
	farm_kv_stats s0, s1;
	farm_kv_stats_get(kv, &s0);
	assert_int_equal(
	        farm_kv_mget_sync(kv, loop, 5, keys, klens, vals, 8, lens, st),
	        0);
	farm_kv_stats_get(kv, &s1);
	assert_int_equal(st[0], 0);
	assert_int_equal(lens[0], 8);
	assert_int_equal(vals[0], 1003);
	assert_int_equal(st[1], -ENOENT);
	assert_int_equal(st[2], -EINVAL);
	assert_int_equal(st[3], 0);
	assert_int_equal(vals[3], 1039);
	assert_int_equal(st[4], -ENOENT);
	assert_int_equal(s1.mget_calls - s0.mget_calls, 1);
	assert_int_equal(s1.mget_local - s0.mget_local, 4);
	assert_int_equal(s1.mget_msgs - s0.mget_msgs, 0); /* all local */
	uint8_t small[5 * 4];
	assert_int_equal(
	        farm_kv_mget_sync(kv, loop, 1, keys, klens, small, 4, lens, st),
	        0);
	assert_int_equal(st[0], -EMSGSIZE);
	assert_int_equal(lens[0], 8);
	assert_int_equal(
	        farm_kv_mget_sync(kv, loop, 0, keys, klens, vals, 8, lens, st),
	        -EINVAL);
}

/* A multi-get of more keys than a loop has lookups in flight (256):
 * they queue. */
static void store_mget_many(farm_kv *kv, farm_loop *loop)
{
	enum { MANY = 600 };
	static const void *mk[MANY];
	static uint32_t mkl[MANY], ml[MANY];
	static int ms[MANY];
	static uint64_t mv[MANY];
	static char mkeys[MANY][16];
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(mkeys[i], sizeof(mkeys[i]), "pub-%04u", i % NPAIRS);
		mk[i] = mkeys[i];
		mkl[i] = 8;
	}
	assert_int_equal(
	        farm_kv_mget_sync(kv, loop, MANY, mk, mkl, mv, 8, ml, ms), 0);
	for (unsigned i = 0; i < MANY; i++) {
		if (i % NPAIRS == 7) {
			assert_int_equal(ms[i], -ENOENT);
			continue;
		}
		assert_int_equal(ms[i], 0);
		assert_int_equal(ml[i], 8);
		assert_int_equal(mv[i], 1000 + i % NPAIRS);
	}
}

/* Iteration: every pair is inline here; pairs in objects of their own
 * (long values, a long key) are visited too, with their bytes. */
static void store_iterate(farm_kv *kv, farm_loop *loop)
{
	struct iter it = {0};
	long np = farm_kv_iterate_local(kv, iter_cb, &it);
	assert_int_equal(np, NPAIRS - 1);
	assert_int_equal(it.ours, NPAIRS - 1);
	/* pairs in objects of their own (long values, a long key) are
	 * visited too, with their bytes */
	static uint8_t bigv[1010], lkey[200], lval[500];
	for (unsigned n = 1; n <= 3; n++) {
		char bk[7];
		snprintf(bk, sizeof(bk), "big-%02u", n);
		memset(bigv, (int)n, sizeof(bigv));
		assert_int_equal(
		        farm_kv_put_sync(kv, loop, bk, 6, bigv, 1000 + n), 0);
	}
	memset(lkey, 'L', sizeof(lkey));
	memset(lval, 'l', sizeof(lval));
	assert_int_equal(farm_kv_put_sync(kv, loop, lkey, 200, lval, 500), 0);
	it = (struct iter){0};
	np = farm_kv_iterate_local(kv, iter_cb, &it);
	assert_int_equal(np, NPAIRS - 1 + 4);
	assert_int_equal(it.big, 4);
}

/* The directory: name, look up, unname. */
static void store_directory(farm_kv *kv, farm_loop *loop)
{
	farm_fatptr p = {.addr = 0x1234000, .size = 96, .incarnation = 7}, q;
	assert_int_equal(farm_kv_name_sync(kv, loop, "app/root", p), 0);
	assert_int_equal(farm_kv_lookup_sync(kv, loop, "app/root", &q), 0);
	assert_int_equal(q.addr, p.addr);
	assert_int_equal(q.size, p.size);
	assert_int_equal(q.incarnation, p.incarnation);
	assert_int_equal(farm_kv_unname_sync(kv, loop, "app/root"), 0);
	assert_int_equal(farm_kv_lookup_sync(kv, loop, "app/root", &q),
	                 -ENOENT);
	assert_int_equal(farm_kv_lookup_sync(kv, loop, "", &q), -EINVAL);
}

/* Limits of keys and values. */
static void store_limits(farm_kv *kv, farm_loop *loop)
{
	uint8_t v[64];
	uint32_t len = 0;
	static uint8_t bigkey[FARM_KV_MAX_KEY + 1];
	memset(bigkey, 'K', sizeof(bigkey));
	assert_int_equal(
	        farm_kv_put_sync(kv, loop, bigkey, FARM_KV_MAX_KEY, "max", 3),
	        0);
	assert_int_equal(farm_kv_get_sync(kv, loop, bigkey, FARM_KV_MAX_KEY, v,
	                                  sizeof(v), &len),
	                 0);
	assert_int_equal(len, 3);
	assert_int_equal(farm_kv_put_sync(kv, loop, bigkey, FARM_KV_MAX_KEY + 1,
	                                  "max", 3),
	                 -EMSGSIZE);
	assert_int_equal(farm_kv_get_sync(kv, loop, bigkey, FARM_KV_MAX_KEY + 1,
	                                  v, sizeof(v), &len),
	                 -EMSGSIZE);
	assert_int_equal(
	        farm_kv_del_sync(kv, loop, bigkey, FARM_KV_MAX_KEY + 1),
	        -EMSGSIZE);
	uint32_t lim = farm_kv_value_limit(kv, 4);
	assert_true(lim > 1024 && lim <= FARM_KV_MAX_VALUE);
	assert_int_equal(farm_kv_value_limit(kv, 0), 0);
	assert_int_equal(farm_kv_value_limit(kv, FARM_KV_MAX_KEY + 1), 0);
	uint8_t *big = malloc(FARM_KV_MAX_VALUE + 1), *back = malloc(lim);
	assert_non_null(big);
	assert_non_null(back);
	for (uint32_t i = 0; i <= FARM_KV_MAX_VALUE; i++)
		big[i] = (uint8_t)(i * 13u + 5u);
	assert_int_equal(farm_kv_put_sync(kv, loop, "huge", 4, big, lim), 0);
	assert_int_equal(farm_kv_get_sync(kv, loop, "huge", 4, back, lim, &len),
	                 0);
	assert_int_equal(len, lim);
	assert_memory_equal(back, big, lim);
	assert_int_equal(farm_kv_put_sync(kv, loop, "huge", 4, big, lim + 1),
	                 -EMSGSIZE);
	assert_int_equal(farm_kv_put_sync(kv, loop, "huge", 4, big,
	                                  FARM_KV_MAX_VALUE + 1),
	                 -EMSGSIZE);
	assert_int_equal(farm_kv_put_sync(kv, loop, "huge", 4, big, 0),
	                 -EINVAL);
	assert_int_equal(farm_kv_put_sync(kv, loop, "", 0, big, 1), -EINVAL);
	free(big);
	free(back);
}

static void test_store(void **state)
{
	(void)state;
	write_conf(conf, "");
	farm_node *node = NULL;
	assert_int_equal(farm_node_open_file(conf, &node), 0);
	assert_int_equal(farm_node_id(node), 0);
	assert_int_equal(farm_node_nthreads(node), 1);
	assert_int_equal(farm_node_expected_machines(node), 1);
	assert_non_null(farm_node_msg(node));
	assert_non_null(farm_node_txm(node));
	assert_non_null(farm_node_fabric(node));
	farm_kv *kv = NULL;
	struct farm_kv_attr a = {
	        .neighborhood = 8, .key_inline = 16, .val_inline = 32};
	assert_int_equal(farm_kv_create(node, &a, 64, &kv), 0);
	struct farm_kv_attr bad = {.neighborhood = 3};
	farm_kv *kv2 = NULL;
	assert_int_equal(farm_kv_create(node, &bad, 64, &kv2), -EINVAL);
	farm_node_set_app_loops(node, true);
	assert_int_equal(farm_node_start(node, 10000), 0);
	farm_loop *loop = NULL;
	assert_int_equal(farm_node_loop_open(node, 0, &loop), 0);
	assert_ptr_equal(farm_node_loop(node, 0), loop);
	assert_int_equal(farm_node_wait_members(node, 1, 10000), 0);
	assert_int_equal(farm_kv_attach(kv, loop), 0);
	/* not joined yet */
	uint8_t v[64];
	uint32_t len = 0;
	assert_int_equal(farm_kv_get_sync(kv, loop, "k", 1, v, sizeof(v), &len),
	                 -ENOENT);
	assert_int_equal(farm_kv_join_sync(kv, loop, 1, 10000), 0);

	store_blocking(kv, loop);
	store_table_stats(kv, loop);
	store_continuations(kv, loop);
	store_mget(kv, loop);
	store_mget_many(kv, loop);
	store_iterate(kv, loop);
	store_directory(kv, loop);
	store_limits(kv, loop);
	farm_kv_detach(kv, loop);
	farm_node_loop_close(node, loop);
	farm_node_close(node);
	farm_kv_destroy(kv);
}

int main(void)
{
	const struct CMUnitTest t[] = {
	        cmocka_unit_test(test_open_errors),
	        cmocka_unit_test(test_store),
	};
	return cmocka_run_group_tests_name("kv_public", t, setup, teardown);
}
