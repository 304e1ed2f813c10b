/*
 * The B-tree's bulk load (farm_bt_append) on one machine:
 *
 *   load       batches of random sizes appended to an empty tree of small
 *              nodes (roots split four levels up), several batches in one
 *              transaction too, checked against a sorted-map model and
 *              the invariants (tests/harness/btcheck.h) as it grows; a
 *              handle opened before the load (a stale cache) answers
 *              right; then random puts, deletes and scans on the loaded
 *              tree (splits of nodes the load filled) and more appends
 *   onto puts  appends onto a tree that random puts built (a right edge
 *              that splits made, leaves full and half full)
 *   aborted    an append in a transaction that aborts leaves nothing
 *   conflict   a put into the right edge's leaf commits between an
 *              append's reads and its commit: the append's commit fails
 *              validation (retryable), and run again it holds both
 *   bad input  keys out of order, equal, not above the tree's last key,
 *              over the limits, NULLs: the error, and nothing written
 *   oversized  a batch of big entries whose commit could pass half a log:
 *              -E2BIG from the append itself, nothing written (the same
 *              transaction then appends a batch that fits and commits)
 */
#include "testutil.h"

#include "btcheck.h"

#include <farm/btree.h>
#include <farm/kv.h>
#include <farm/node.h>

static struct bc_node one;
static farm_kv *kv;
static farm_loop *loop;
static farm_txm *txm;

static int setup(void **state)
{
	(void)state;
	if (bc_node_open(&one, "btl", "64M", 256))
		return -1;
	kv = one.kv;
	loop = one.loop;
	txm = one.txm;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return bc_node_close(&one);
}

static const struct farm_bt_attr small = {
        .key_max = 8, .val_max = 8, .leaf_cap = 4, .inner_cap = 4};

static uint64_t rng = 0x7654321;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Entries for keys @k[0..n) (values k * 3 + 1), with their bytes. */
struct batch {
	struct farm_bt_entry e[64];
	uint8_t kb[64][8];
	uint64_t v[64];
	size_t n;
};

static void batch_of(struct batch *b, const uint64_t *k, size_t n)
{
	assert_true(n <= 64);
	b->n = n;
	for (size_t i = 0; i < n; i++) {
		farm_bt_key_u64(k[i], b->kb[i]);
		b->v[i] = k[i] * 3 + 1;
		b->e[i] = (struct farm_bt_entry){
		        .key = b->kb[i], .klen = 8, .val = &b->v[i], .vlen = 8};
	}
}

/* Append @n increasing keys from *@next (gaps of 1-3) in @tx. */
static int append_run(farm_bt *bt, farm_tx *tx, struct bmodel *m,
                      uint64_t *next, size_t n)
{
	uint64_t k[64];
	struct batch b;
	for (size_t i = 0; i < n; i++) {
		k[i] = *next;
		*next += 1 + rnd() % 3;
	}
	batch_of(&b, k, n);
	int rc = farm_bt_append(bt, tx, loop, b.e, b.n);
	if (!rc)
		for (size_t i = 0; i < n; i++)
			bm_put(m, k[i], b.v[i]);
	return rc;
}

/* Commit one append of @n keys in a transaction of its own. */
static void append_tx(farm_bt *bt, struct bmodel *m, uint64_t *next, size_t n)
{
	farm_tx *tx = NULL;
	assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
	assert_int_equal(append_run(bt, tx, m, next, n), 0);
	assert_int_equal(farm_tx_commit_sync(tx), 0);
	farm_tx_free(tx);
}

/* The tree holds exactly the model: invariants, every key, a full scan. */
static void verify(farm_bt *bt, const struct bmodel *m)
{
	uint64_t keys = 0;
	assert_int_equal(bc_verify(bt, loop, &keys), 0);
	assert_int_equal(keys, m->n);
	for (size_t i = 0; i < m->n; i++) {
		uint8_t kb[8];
		uint64_t v = 0;
		uint32_t len = 0;
		farm_bt_key_u64(m->p[i].k, kb);
		assert_int_equal(
		        farm_bt_get(bt, NULL, loop, kb, 8, &v, 8, &len), 0);
		assert_int_equal(v, m->p[i].v);
	}
	struct bscan s = {.cap = m->n + 1};
	s.out = malloc(s.cap * sizeof(*s.out));
	struct farm_bt_range r = {0};
	assert_int_equal(farm_bt_scan(bt, NULL, loop, &r, bscan_cb, &s),
	                 (long)m->n);
	assert_false(s.bad);
	for (size_t i = 0; i < m->n; i++)
		assert_int_equal(s.out[i].k, m->p[i].k);
	free(s.out);
}

static int put_u64(farm_bt *bt, uint64_t k, uint64_t v)
{
	uint8_t kb[8];
	farm_bt_key_u64(k, kb);
	return farm_bt_put(bt, NULL, loop, kb, 8, &v, 8);
}

static void test_load(void **state)
{
	(void)state;
	farm_bt *bt = NULL, *early = NULL;
	assert_int_equal(
	        farm_bt_create_sync(kv, txm, loop, "load", &small, &bt), 0);
	assert_int_equal(farm_bt_open_sync(kv, txm, loop, "load", &early), 0);
	struct bmodel m = {0};
	uint64_t next = 5;
	for (int round = 0; round < 8; round++) {
		for (int i = 0; i < 12; i++)
			append_tx(bt, &m, &next, 1 + rnd() % 64);
		/* Several appends in one transaction. */
		farm_tx *tx = NULL;
		assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
		for (int i = 0; i < 3; i++)
			assert_int_equal(
			        append_run(bt, tx, &m, &next, 1 + rnd() % 20),
			        0);
		assert_int_equal(farm_tx_commit_sync(tx), 0);
		farm_tx_free(tx);
		verify(bt, &m);
		verify(early, &m); /* its cache went stale every round */
	}
	farm_bt_stats st;
	farm_bt_stats_get(bt, &st);
	assert_true(st.root_splits >= 4); /* a root five levels up */
	/* The loaded tree takes writes anywhere, then appends again. */
	for (int i = 0; i < 600; i++) {
		uint64_t k = rnd() % next, v = rnd();
		if (rnd() % 3) {
			assert_int_equal(put_u64(bt, k, v), 0);
			bm_put(&m, k, v);
		} else {
			uint8_t kb[8];
			farm_bt_key_u64(k, kb);
			bool had = bm_del(&m, k);
			assert_int_equal(farm_bt_delete(bt, NULL, loop, kb, 8),
			                 had ? 0 : -ENOENT);
		}
	}
	verify(bt, &m);
	for (int i = 0; i < 10; i++)
		append_tx(bt, &m, &next, 1 + rnd() % 64);
	verify(bt, &m);
	farm_bt_close(early);
	farm_bt_close(bt);
	free(m.p);
}

static void test_onto_puts(void **state)
{
	(void)state;
	farm_bt *bt = NULL;
	assert_int_equal(
	        farm_bt_create_sync(kv, txm, loop, "onto", &small, &bt), 0);
	struct bmodel m = {0};
	for (int i = 0; i < 400; i++) {
		uint64_t k = rnd() % 1000, v = rnd();
		assert_int_equal(put_u64(bt, k, v), 0);
		bm_put(&m, k, v);
	}
	uint64_t next = 1000;
	for (int i = 0; i < 20; i++)
		append_tx(bt, &m, &next, 1 + rnd() % 64);
	verify(bt, &m);
	farm_bt_close(bt);
	free(m.p);
}

static void test_aborted(void **state)
{
	(void)state;
	farm_bt *bt = NULL;
	assert_int_equal(
	        farm_bt_create_sync(kv, txm, loop, "abort", &small, &bt), 0);
	struct bmodel m = {0}, lost = {0};
	uint64_t next = 1;
	append_tx(bt, &m, &next, 40);
	farm_tx *tx = NULL;
	assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
	assert_int_equal(append_run(bt, tx, &lost, &next, 64), 0);
	assert_int_equal(farm_tx_abort(tx), 0);
	farm_tx_free(tx);
	verify(bt, &m);
	farm_bt_close(bt);
	free(m.p);
	free(lost.p);
}

static void test_conflict(void **state)
{
	(void)state;
	farm_bt *bt = NULL;
	assert_int_equal(
	        farm_bt_create_sync(kv, txm, loop, "conflict", &small, &bt), 0);
	struct bmodel m = {0};
	uint64_t next = 0;
	append_tx(bt, &m, &next, 30);
	uint64_t mid = next; /* above every key, below the next batch */
	next += 10;
	uint64_t from = next;
	farm_tx *tx = NULL;
	struct bmodel ghost = {0};
	assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
	assert_int_equal(append_run(bt, tx, &ghost, &next, 20), 0);
	assert_int_equal(put_u64(bt, mid, 77), 0); /* into the edge's leaf */
	bm_put(&m, mid, 77);
	int rc = farm_tx_commit_sync(tx);
	farm_tx_free(tx);
	assert_true(rc != 0 && farm_tx_retryable(rc));
	verify(bt, &m);
	next = from;
	append_tx(bt, &m, &next, 20);
	verify(bt, &m);
	farm_bt_close(bt);
	free(m.p);
	free(ghost.p);
}

/* @e's append in a transaction fails with @want and, aborted, leaves
 * the tree as @m says. */
static void bad_append(farm_bt *bt, const struct farm_bt_entry *e, size_t n,
                       int want, const struct bmodel *m)
{
	farm_tx *tx = NULL;
	assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
	assert_int_equal(farm_bt_append(bt, tx, loop, e, n), want);
	assert_int_equal(farm_tx_abort(tx), 0);
	farm_tx_free(tx);
	verify(bt, m);
}

static void test_bad_input(void **state)
{
	(void)state;
	farm_bt *bt = NULL;
	assert_int_equal(farm_bt_create_sync(kv, txm, loop, "bad", &small, &bt),
	                 0);
	struct bmodel m = {0};
	uint64_t next = 100;
	append_tx(bt, &m, &next, 50);
	struct batch b;
	uint64_t down[] = {next + 5, next + 4}, same[] = {next + 1, next + 1},
	         below[] = {m.p[m.n - 1].k, next + 9},
	         ok[] = {next + 1, next + 2};
	batch_of(&b, down, 2);
	bad_append(bt, b.e, 2, -EINVAL, &m);
	batch_of(&b, same, 2);
	bad_append(bt, b.e, 2, -EINVAL, &m);
	batch_of(&b, below, 2);
	bad_append(bt, b.e, 2, -EINVAL, &m);
	batch_of(&b, ok, 2);
	b.e[1].klen = 9; /* over key_max */
	bad_append(bt, b.e, 2, -EMSGSIZE, &m);
	batch_of(&b, ok, 2);
	b.e[1].vlen = 9; /* over val_max */
	bad_append(bt, b.e, 2, -EMSGSIZE, &m);
	batch_of(&b, ok, 2);
	b.e[0].klen = 0;
	bad_append(bt, b.e, 2, -EINVAL, &m);
	batch_of(&b, ok, 2);
	b.e[1].val = NULL;
	bad_append(bt, b.e, 2, -EINVAL, &m);
	bad_append(bt, NULL, 2, -EINVAL, &m);
	batch_of(&b, ok, 2);
	assert_int_equal(farm_bt_append(bt, NULL, loop, b.e, 2), -EINVAL);
	assert_int_equal(farm_bt_append(NULL, NULL, loop, b.e, 2), -EINVAL);
	verify(bt, &m);
	farm_bt_close(bt);
	free(m.p);
}

/* Append keys @k0, @k0 + 1, ... (@n of them) with 1 KiB values of byte
 * @k0 in @tx. */
static int append_big(farm_bt *bt, farm_tx *tx, uint64_t k0, size_t n)
{
	static uint8_t kb[256][8], val[1024];
	static struct farm_bt_entry e[256];
	assert_true(n <= 256);
	memset(val, (int)(k0 & 0xff), sizeof(val));
	for (size_t i = 0; i < n; i++) {
		farm_bt_key_u64(k0 + i, kb[i]);
		e[i] = (struct farm_bt_entry){
		        .key = kb[i], .klen = 8, .val = val, .vlen = 1024};
	}
	return farm_bt_append(bt, tx, loop, e, n);
}

static void test_oversized(void **state)
{
	(void)state;
	/* Leaves of about 16 KiB: 200 entries need ~17 of them, past half
	 * of the default 256 KiB log; 24 entries need 2 or 3. */
	const struct farm_bt_attr a = {
	        .key_max = 8, .val_max = 1024, .leaf_cap = 16, .inner_cap = 16};
	farm_bt *bt = NULL;
	assert_int_equal(farm_bt_create_sync(kv, txm, loop, "big", &a, &bt), 0);
	farm_tx *tx = NULL;
	assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
	assert_int_equal(append_big(bt, tx, 100, 24), 0);
	assert_int_equal(farm_tx_commit_sync(tx), 0);
	farm_tx_free(tx);
	/* Refused by the append, not at commit; then, in the same
	 * transaction, a batch that fits: only its keys are added. */
	assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
	assert_int_equal(append_big(bt, tx, 200, 200), -E2BIG);
	assert_int_equal(farm_tx_write_fits(tx, 0, 0), 0);
	assert_int_equal(append_big(bt, tx, 500, 24), 0);
	assert_int_equal(farm_tx_commit_sync(tx), 0);
	farm_tx_free(tx);
	uint64_t keys = 0;
	assert_int_equal(bc_verify(bt, loop, &keys), 0);
	assert_int_equal(keys, 48);
	uint8_t kb[8], v[1024];
	uint32_t len = 0;
	farm_bt_key_u64(200, kb);
	assert_int_equal(farm_bt_get(bt, NULL, loop, kb, 8, v, sizeof(v), &len),
	                 -ENOENT);
	farm_bt_key_u64(523, kb);
	assert_int_equal(farm_bt_get(bt, NULL, loop, kb, 8, v, sizeof(v), &len),
	                 0);
	assert_int_equal(len, 1024);
	assert_int_equal(v[1023], 500 & 0xff);
	farm_bt_close(bt);
}

int main(void)
{
	const struct CMUnitTest t[] = {
	        cmocka_unit_test(test_load),
	        cmocka_unit_test(test_onto_puts),
	        cmocka_unit_test(test_aborted),
	        cmocka_unit_test(test_conflict),
	        cmocka_unit_test(test_bad_input),
	        cmocka_unit_test(test_oversized),
	};
	return cmocka_run_group_tests_name("btree_load", t, setup, teardown);
}
