/*
 * The B-tree's public API, used the way an application uses it: this file
 * includes only installed headers (include/farm/btree.h first: it stands
 * alone; besides them only the harness's libc-only tmpdir.h) and links the
 * shared library, so every farm_bt_* it calls is exported. One machine, an
 * application-run loop:
 *
 *   index      rows are objects of their own; a transaction allocates a
 *              row and puts its index entry (an 8-byte key naming the
 *              row's address), so the index commits with the row it
 *              indexes; an aborted one leaves neither
 *   ranges     a scan with an end key and a limit, inside a transaction
 *              and lock-free, reads the rows its entries name
 *   strings    byte-string keys of different lengths sort as memcmp
 *              orders them (a prefix first), ascending and descending
 */
#include <farm/btree.h> /* first: stands alone */
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

static char dir[256], conf[300];
static farm_node *node;
static farm_kv *kv;
static farm_loop *loop;
static farm_txm *txm;

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "%s/farm-test-btpub-XXXXXX",
	         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(conf, sizeof(conf), "%s/machine.conf", dir);
	FILE *f = fopen(conf, "w");
	if (!f)
		return -1;
	fprintf(f,
	        "machine_id = 0\ndata_dir = %s\nregion_size = 32M\n"
	        "threads = 1\n",
	        dir);
	fclose(f);
	if (farm_node_open_file(conf, &node) ||
	    farm_kv_create(node, NULL, 64, &kv))
		return -1;
	farm_node_set_app_loops(node, true);
	if (farm_node_start(node, 10000) ||
	    farm_node_loop_open(node, 0, &loop) ||
	    farm_node_wait_members(node, 1, 10000) ||
	    farm_kv_attach(kv, loop) || farm_kv_join_sync(kv, loop, 1, 10000))
		return -1;
	txm = farm_node_txm(node);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	farm_kv_detach(kv, loop);
	farm_node_loop_close(node, loop);
	farm_node_close(node);
	farm_kv_destroy(kv);
	return tu_rmtree(dir);
}

struct row {
	uint64_t id, balance;
};

/* Insert row @id and its index entry in one transaction; @abort: then
 * abort instead of committing. */
static void insert_row(farm_bt *bt, uint64_t id, bool abort)
{
	farm_tx *tx = NULL;
	assert_int_equal(farm_tx_begin(txm, loop, &tx), 0);
	farm_fatptr fp;
	void *d;
	assert_int_equal(farm_tx_alloc_sync(tx, sizeof(struct row),
	                                    FARM_GADDR_NULL, &fp, &d),
	                 0);
	struct row r = {.id = id, .balance = id * 100};
	memcpy(d, &r, sizeof(r));
	uint8_t k[8];
	farm_bt_key_u64(id, k);
	assert_int_equal(farm_bt_put(bt, tx, loop, k, 8, &fp, sizeof(fp)), 0);
	if (abort)
		assert_int_equal(farm_tx_abort(tx), 0);
	else
		assert_int_equal(farm_tx_commit_sync(tx), 0);
	farm_tx_free(tx);
}

struct rows {
	farm_tx *tx;
	uint64_t ids[64], sum;
	unsigned n;
};

/* Each index entry's row, read in the scan's transaction or lock-free. */
static bool row_cb(void *ctx, const void *key, uint32_t klen, const void *val,
                   uint32_t vlen)
{
	struct rows *rs = ctx;
	assert_int_equal(klen, 8);
	assert_int_equal(vlen, sizeof(farm_fatptr));
	farm_fatptr fp;
	memcpy(&fp, val, sizeof(fp));
	struct row r;
	if (rs->tx) {
		const void *d;
		assert_int_equal(
		        farm_tx_read_sync(rs->tx, fp.addr, fp.size, &d), 0);
		memcpy(&r, d, sizeof(r));
	} else {
		assert_int_equal(farm_lf_read_sync(txm, loop, fp.addr, fp.size,
		                                   fp.incarnation, &r),
		                 0);
	}
	uint8_t k[8];
	farm_bt_key_u64(r.id, k);
	assert_memory_equal(key, k, 8);
	rs->ids[rs->n++] = r.id;
	rs->sum += r.balance;
	return true;
}

static void test_index(void **state)
{
	(void)state;
	farm_bt *bt = NULL;
	struct farm_bt_attr a = {.key_max = 8, .val_max = sizeof(farm_fatptr)};
	assert_int_equal(farm_bt_create_sync(kv, txm, loop, "rows", &a, &bt),
	                 0);
	for (uint64_t id = 1; id <= 200; id++)
		insert_row(bt, id, id % 10 == 0); /* every tenth aborted */
	uint8_t lo[8], hi[8];
	farm_bt_key_u64(15, lo);
	farm_bt_key_u64(45, hi);
	struct farm_bt_range r = {
	        .start = lo, .start_len = 8, .end = hi, .end_len = 8};
	/* Inside a transaction: ids 15..44 but the aborted 20, 30, 40. */
	struct rows rs = {0};
	assert_int_equal(farm_tx_begin(txm, loop, &rs.tx), 0);
	assert_int_equal(farm_bt_scan(bt, rs.tx, loop, &r, row_cb, &rs), 27);
	assert_int_equal(farm_tx_commit_sync(rs.tx), 0);
	farm_tx_free(rs.tx);
	assert_int_equal(rs.ids[0], 15);
	assert_int_equal(rs.ids[26], 44);
	/* Lock-free, with a limit. */
	struct rows lf = {0};
	r.limit = 5;
	assert_int_equal(farm_bt_scan(bt, NULL, loop, &r, row_cb, &lf), 5);
	assert_int_equal(lf.ids[4], 19);
	farm_bt_stats st;
	farm_bt_stats_get(bt, &st);
	assert_true(st.splits > 0);
	farm_bt_close(bt);
}

static bool key_cb(void *ctx, const void *key, uint32_t klen, const void *val,
                   uint32_t vlen)
{
	(void)val, (void)vlen;
	char *out = ctx;
	strncat(out, key, klen);
	strcat(out, ",");
	return true;
}

static void test_strings(void **state)
{
	(void)state;
	farm_bt *bt = NULL;
	assert_int_equal(farm_bt_create_sync(kv, txm, loop, "words", NULL, &bt),
	                 0);
	const char *w[] = {"pear", "app", "apple", "b", "apples", "a", "pea"};
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		assert_int_equal(farm_bt_put(bt, NULL, loop, w[i],
		                             (uint32_t)strlen(w[i]), "", 0),
		                 0);
	char out[128] = "";
	struct farm_bt_range r = {0};
	assert_int_equal(farm_bt_scan(bt, NULL, loop, &r, key_cb, out), 7);
	assert_string_equal(out, "a,app,apple,apples,b,pea,pear,");
	out[0] = 0;
	r = (struct farm_bt_range){
	        .start = "app", .start_len = 3, .end = "b", .end_len = 1};
	assert_int_equal(farm_bt_scan(bt, NULL, loop, &r, key_cb, out), 3);
	assert_string_equal(out, "app,apple,apples,");
	/* Descending: the latest before "pea", the three before "b". */
	out[0] = 0;
	r = (struct farm_bt_range){
	        .end = "pea", .end_len = 3, .limit = 1, .reverse = true};
	assert_int_equal(farm_bt_scan(bt, NULL, loop, &r, key_cb, out), 1);
	assert_string_equal(out, "b,");
	out[0] = 0;
	r = (struct farm_bt_range){.reverse = true};
	assert_int_equal(farm_bt_scan(bt, NULL, loop, &r, key_cb, out), 7);
	assert_string_equal(out, "pear,pea,b,apples,apple,app,a,");
	farm_bt *again = NULL;
	assert_int_equal(farm_bt_open_sync(kv, txm, loop, "words", &again), 0);
	uint32_t len = 1;
	assert_int_equal(
	        farm_bt_get(again, NULL, loop, "pea", 3, NULL, 0, &len), 0);
	assert_int_equal(len, 0);
	farm_bt_close(again);
	farm_bt_close(bt);
}

int main(void)
{
	const struct CMUnitTest t[] = {
	        cmocka_unit_test(test_index),
	        cmocka_unit_test(test_strings),
	};
	return cmocka_run_group_tests_name("btree_public", t, setup, teardown);
}
