/*
 * The observability API (include/farm/stats.h) as an application uses it:
 * installed headers only, linked against the shared library.
 *
 *   errors   NULL arguments and a size below the first fields: -EINVAL,
 *            and the caller's structure left as it was
 *   alone    a machine alone (static membership) reports its
 *            configuration, one member, no restart, no recovery steps
 *            and no copies; the version and size come back
 *   sized    a caller compiled against a shorter structure (an older
 *            header) gets exactly its size filled and not one byte more
 */
#include <farm/stats.h> /* first: stands alone */
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
static farm_node *node;

static int rm_cb(const char *path, const struct stat *sb, int flag,
                 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* One machine alone, started and joined. */
static int setup(void **state)
{
	(void)state;
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/farm-test-stats-XXXXXX", base);
	if (!mkdtemp(dir))
		return -1;
	farm_conf *c = NULL;
	int rc = farm_conf_new(&c);
	rc = rc ? rc : farm_conf_set(c, "machine_id", "0");
	rc = rc ? rc : farm_conf_set(c, "data_dir", dir);
	rc = rc ? rc : farm_conf_set(c, "region_size", "32M");
	rc = rc ? rc : farm_node_open_conf(c, &node);
	farm_conf_free(c);
	rc = rc ? rc : farm_node_start(node, 10000);
	rc = rc ? rc : farm_node_wait_members(node, 1, 10000);
	return rc ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	farm_node_close(node);
	node = NULL;
	if (access(dir, F_OK) != 0)
		return 0;
	return nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void test_errors(void **state)
{
	(void)state;
	struct farm_node_stats s;
	memset(&s, 0x5a, sizeof(s));
	s.size = sizeof(s);
	assert_int_equal(farm_node_stats_get(NULL, &s), -EINVAL);
	assert_int_equal(farm_node_stats_get(node, NULL), -EINVAL);
	s.size = 4; /* not even the version */
	assert_int_equal(farm_node_stats_get(node, &s), -EINVAL);
	assert_int_equal(s.size, 4);
	assert_int_equal(s.version, 0x5a5a5a5au);
	struct farm_copy_stats cp[2];
	assert_int_equal(farm_node_copies_get(NULL, cp, 2), 0);
}

static void test_alone(void **state)
{
	(void)state;
	struct farm_node_stats s;
	memset(&s, 0x5a, sizeof(s));
	s.size = sizeof(s);
	assert_int_equal(farm_node_stats_get(node, &s), 0);
	assert_int_equal(s.version, FARM_STATS_VERSION);
	assert_int_equal(s.size, sizeof(s));
	assert_int_equal(s.config_id, farm_node_config_id(node));
	assert_true(s.config_id > 0);
	assert_int_equal(s.members, 1);
	assert_false(s.removed);
	assert_false(s.restart.restarted);
	/* Static membership: no failure detector, no recovery steps. */
	assert_int_equal(s.recovery.nsteps, 0);
	assert_int_equal(s.recovery.suspicions, 0);
	assert_int_equal(s.lease.expiries, 0);
	struct farm_copy_stats cp[2];
	assert_int_equal(farm_node_copies_get(node, cp, 2), 0);
	assert_int_equal(farm_node_copies_get(node, NULL, 0), 0);
}

static void test_sized(void **state)
{
	(void)state;
	/* An older caller's structure ends before the lease counters. */
	const size_t old = offsetof(struct farm_node_stats, lease);
	unsigned char buf[sizeof(struct farm_node_stats)];
	memset(buf, 0xa5, sizeof(buf));
	struct farm_node_stats *s = (struct farm_node_stats *)buf;
	s->size = (uint32_t)old;
	assert_int_equal(farm_node_stats_get(node, s), 0);
	assert_int_equal(s->size, old);
	assert_int_equal(s->version, FARM_STATS_VERSION);
	assert_int_equal(s->members, 1);
	for (size_t i = old; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xa5);
	/* A newer caller's larger structure: only what the library knows. */
	unsigned char big[sizeof(struct farm_node_stats) + 64];
	memset(big, 0xa5, sizeof(big));
	s = (struct farm_node_stats *)big;
	s->size = (uint32_t)sizeof(big);
	assert_int_equal(farm_node_stats_get(node, s), 0);
	assert_int_equal(s->size, sizeof(struct farm_node_stats));
	for (size_t i = sizeof(struct farm_node_stats); i < sizeof(big); i++)
		assert_int_equal(big[i], 0xa5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_errors),
	        cmocka_unit_test(test_alone),
	        cmocka_unit_test(test_sized),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
