/*
 * Configurations built in memory (include/farm/config.h), used the way an
 * application uses them: only installed headers, linked against the shared
 * library (whose other symbols are hidden), so the header stands alone and
 * its functions are exported.
 *
 *   errors      NULL arguments; an unknown key, a malformed value, a value
 *               out of bounds, one peer too many: each a code and a reason,
 *               and the configuration as it was (a refused `peer` adds no
 *               peer: the machine opened later expects one machine fewer)
 *   check       a configuration without machine_id or data_dir does not
 *               open a machine, and says why
 *   open        a machine opens from it, keeps its own copy (the
 *               configuration is freed before the machine starts), the
 *               last value set for a key wins, and the machine starts,
 *               joins and closes
 */
#include <farm/config.h> /* first: stands alone */
#include <farm/farm.h>

#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[256];

static int setup(void **state)
{
	(void)state;
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/farm-test-confpub-XXXXXX", base);
	return mkdtemp(dir) ? 0 : -1;
}

static int rm_cb(const char *path, const struct stat *sb, int flag,
                 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	/* A machine that closes removes its data directory once empty. */
	if (access(dir, F_OK) != 0)
		return 0;
	return nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* @rc from @key = @value, a reason naming the key, and no change. */
static void refused(farm_conf *c, const char *key, const char *value, int rc)
{
	assert_int_equal(farm_conf_set(c, key, value), rc);
	assert_non_null(strstr(farm_conf_error(c), key));
}

static void test_errors(void **state)
{
	(void)state;
	farm_conf *c = NULL;
	assert_int_equal(farm_conf_new(NULL), -EINVAL);
	assert_int_equal(farm_conf_new(&c), 0);
	assert_string_equal(farm_conf_error(c), "");
	assert_int_equal(farm_conf_set(NULL, "threads", "1"), -EINVAL);
	assert_int_equal(farm_conf_set(c, NULL, "1"), -EINVAL);
	assert_int_equal(farm_conf_set(c, "threads", NULL), -EINVAL);
	assert_int_equal(farm_conf_check(NULL), -EINVAL);
	assert_string_equal(farm_conf_error(NULL), "NULL configuration");

	refused(c, "no_such_key", "1", -EINVAL);
	refused(c, "region_size", "12Q", -EINVAL);
	refused(c, "busy_poll", "maybe", -EINVAL);
	refused(c, "threads", "-1", -EINVAL);
	refused(c, "threads", "0", -ERANGE);
	refused(c, "replicas", "9", -ERANGE);
	refused(c, "zk", "a b", -EINVAL);
	refused(c, "peer", "3", -EINVAL); /* no address */
	refused(c, "peer", "x /dev/shm/x", -EINVAL);
	/* 255 peers: a cluster of 256 machines (docs/config.md). */
	for (unsigned i = 0; i < 255; i++) {
		char v[320];
		snprintf(v, sizeof(v), "%u %s/p%u", i + 1, dir, i + 1);
		assert_int_equal(farm_conf_set(c, "peer", v), 0);
	}
	refused(c, "peer", "999 /dev/shm/p999", -E2BIG);
	farm_conf_free(c);
	farm_conf_free(NULL);
}

static void test_check(void **state)
{
	(void)state;
	farm_conf *c = NULL;
	farm_node *n = (farm_node *)&n; /* must be left alone */
	assert_int_equal(farm_conf_new(&c), 0);
	assert_int_equal(farm_conf_check(c), -EINVAL);
	assert_non_null(strstr(farm_conf_error(c), "machine_id"));
	assert_int_equal(farm_node_open_conf(c, &n), -EINVAL);
	assert_ptr_equal(n, (farm_node *)&n);
	assert_int_equal(farm_conf_set(c, "machine_id", "0"), 0);
	assert_int_equal(farm_node_open_conf(c, &n), -EINVAL);
	assert_non_null(strstr(farm_conf_error(c), "data_dir"));
	assert_int_equal(farm_node_open_conf(NULL, &n), -EINVAL);
	assert_int_equal(farm_node_open_conf(c, NULL), -EINVAL);
	farm_conf_free(c);
}

static void test_open(void **state)
{
	(void)state;
	farm_conf *c = NULL;
	char peer[320];
	assert_int_equal(farm_conf_new(&c), 0);
	assert_int_equal(farm_conf_set(c, "machine_id", "3"), 0);
	assert_int_equal(farm_conf_set(c, "data_dir", dir), 0);
	assert_int_equal(farm_conf_set(c, "region_size", "32M"), 0);
	assert_int_equal(farm_conf_set(c, "threads", "1"), 0);
	assert_int_equal(farm_conf_set(c, "threads", "2"), 0); /* last wins */
	snprintf(peer, sizeof(peer), "1 %s/p1", dir);
	assert_int_equal(farm_conf_set(c, "peer", peer), 0);
	/* Refused half-way (after the id): must not count as a peer. */
	assert_int_equal(farm_conf_set(c, "peer", "2"), -EINVAL);
	assert_int_equal(farm_conf_check(c), 0);

	farm_node *n = NULL;
	assert_int_equal(farm_node_open_conf(c, &n), 0);
	assert_non_null(n);
	assert_int_equal(farm_node_id(n), 3);
	assert_int_equal(farm_node_nthreads(n), 2);
	assert_int_equal(farm_node_expected_machines(n), 2);
	farm_node_close(n);

	/* Without the peer: a machine alone, opened after its configuration
	 * was freed, starts and joins. */
	farm_conf_free(c);
	assert_int_equal(farm_conf_new(&c), 0);
	assert_int_equal(farm_conf_set(c, "machine_id", "0"), 0);
	assert_int_equal(farm_conf_set(c, "data_dir", dir), 0);
	assert_int_equal(farm_conf_set(c, "region_size", "32M"), 0);
	n = NULL;
	assert_int_equal(farm_node_open_conf(c, &n), 0);
	farm_conf_free(c);
	assert_int_equal(farm_node_expected_machines(n), 1);
	assert_int_equal(farm_node_start(n, 10000), 0);
	assert_int_equal(farm_node_wait_members(n, 1, 10000), 0);
	assert_int_equal(farm_node_nthreads(n), 1);
	farm_node_close(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_errors),
	        cmocka_unit_test(test_check),
	        cmocka_unit_test_setup_teardown(test_open, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
