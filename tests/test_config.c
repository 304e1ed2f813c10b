/* Configuration files and environment overrides (docs/config.md). */
#include "testutil.h"

#include "util/config.h"

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_sizes(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(farm_parse_size("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(farm_parse_size("64M", &v), 0);
	assert_int_equal(v, 64ull << 20);
	assert_int_equal(farm_parse_size("2G", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(farm_parse_size("1kB", &v), 0);
	assert_int_equal(v, 1024);
	assert_int_equal(farm_parse_size("", &v), -EINVAL);
	assert_int_equal(farm_parse_size("-1", &v), -EINVAL);
	assert_int_equal(farm_parse_size("12Q", &v), -EINVAL);
	assert_int_equal(farm_parse_size("99999999999999999999", &v), -EINVAL);
	assert_int_equal(farm_parse_size("17179869184G", &v), -EINVAL);
}

static void test_file_and_env(void **state)
{
	(void)state;
	char dir[256], path[300], err[256];
	tu_tmpdir(dir, sizeof(dir), "conf");
	snprintf(path, sizeof(path), "%s/m.conf", dir);
	write_file(path, "# a machine\n"
	                 "machine_id = 7\n"
	                 "data_dir = /dev/shm/x   # trailing comment\n"
	                 "region_size = 16M\n"
	                 "peer = 1 /dev/shm/p1\n"
	                 "peer = 2   /dev/shm/p2\n"
	                 "\n");
	struct farm_config c;
	farm_config_defaults(&c);
	assert_int_equal(c.region_size, 2ull << 30);
	assert_int_equal(farm_config_load(&c, path, err, sizeof(err)), 0);
	assert_int_equal(c.machine_id, 7);
	assert_string_equal(c.data_dir, "/dev/shm/x");
	assert_int_equal(c.region_size, 16u << 20);
	assert_int_equal(c.npeers, 2);
	assert_int_equal(c.peers[1].id, 2);
	assert_string_equal(c.peers[1].addr, "/dev/shm/p2");
	assert_int_equal(farm_config_validate(&c, err, sizeof(err)), 0);

	setenv("FARM_REGION_SIZE", "1M", 1);
	setenv("FARM_FABRIC", "verbs", 1);
	assert_int_equal(farm_config_apply_env(&c, err, sizeof(err)), 0);
	assert_int_equal(c.region_size, 1u << 20);
	/* Too small for the allocator (header and block table, no block):
	 * refused with the bounds named. */
	assert_int_equal(farm_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "from 2M to 4G"));
	c.region_size = 2u << 20;
	assert_int_equal(farm_config_validate(&c, err, sizeof(err)), 0);
	assert_string_equal(c.fabric, "verbs");
	setenv("FARM_FABRIC", "carrier-pigeon", 1);
	assert_int_equal(farm_config_apply_env(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "FARM_FABRIC"));
	unsetenv("FARM_FABRIC");
	unsetenv("FARM_REGION_SIZE");
	/* The ofi provider and its libfabric provider. */
	assert_int_equal(farm_config_set(&c, "fabric", "ofi", err, sizeof(err)),
	                 0);
	assert_string_equal(c.fabric, "ofi");
	assert_int_equal(farm_config_set(&c, "ofi_provider", "tcp;ofi_rxm", err,
	                                 sizeof(err)),
	                 0);
	assert_string_equal(c.ofi_provider, "tcp;ofi_rxm");

	/* Errors name the file and line. */
	write_file(path, "machine_id = 1\nbogus = 3\n");
	farm_config_defaults(&c);
	assert_int_equal(farm_config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, ":2:"));
	assert_non_null(strstr(err, "bogus"));
	write_file(path, "machine_id\n");
	assert_int_equal(farm_config_load(&c, path, err, sizeof(err)), -EINVAL);
	write_file(path, "machine_id = 1\nregion_size = 3M\ndata_dir = /x\n");
	farm_config_defaults(&c);
	assert_int_equal(farm_config_load(&c, path, err, sizeof(err)), 0);
	assert_int_equal(farm_config_validate(&c, err, sizeof(err)), -EINVAL);
	write_file(path,
	           "machine_id = 1\ndata_dir = /x\npeer = 2 /a\npeer = 2 /b\n");
	farm_config_defaults(&c);
	assert_int_equal(farm_config_load(&c, path, err, sizeof(err)), 0);
	assert_int_equal(farm_config_validate(&c, err, sizeof(err)), -EINVAL);
	write_file(path, "peer = 2\n");
	assert_int_equal(farm_config_load(&c, path, err, sizeof(err)), -EINVAL);
	farm_config_defaults(&c);
	assert_int_equal(farm_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_true(farm_config_load(&c, "/nonexistent/conf", err,
	                             sizeof(err)) < 0);
	tu_rmtree(dir);
}

/* The address-space keys: defaults, ranges, environment overrides. */
static void test_addrspace_keys(void **state)
{
	(void)state;
	struct farm_config c;
	char err[256];
	farm_config_defaults(&c);
	assert_int_equal(c.replicas, 3);
	assert_int_equal(c.rings, 3);
	assert_int_equal(c.ring_points, 128);
	assert_int_equal(c.threads, 1);
	assert_int_equal(farm_config_set(&c, "replicas", "2", err, sizeof(err)),
	                 0);
	assert_int_equal(c.replicas, 2);
	assert_int_equal(farm_config_set(&c, "replicas", "0", err, sizeof(err)),
	                 -ERANGE);
	assert_int_equal(farm_config_set(&c, "rings", "17", err, sizeof(err)),
	                 -ERANGE);
	assert_non_null(strstr(err, "rings"));
	assert_int_equal(
	        farm_config_set(&c, "ring_points", "x", err, sizeof(err)),
	        -EINVAL);
	assert_int_equal(farm_config_set(&c, "threads", "65", err, sizeof(err)),
	                 -ERANGE);
	assert_int_equal(c.replicas, 2); /* bad values change nothing */
	setenv("FARM_RINGS", "5", 1);
	setenv("FARM_THREADS", "2", 1);
	assert_int_equal(farm_config_apply_env(&c, err, sizeof(err)), 0);
	assert_int_equal(c.rings, 5);
	assert_int_equal(c.threads, 2);
	setenv("FARM_RING_POINTS", "0", 1);
	assert_int_equal(farm_config_apply_env(&c, err, sizeof(err)), -ERANGE);
	assert_non_null(strstr(err, "FARM_RING_POINTS"));
	unsetenv("FARM_RINGS");
	unsetenv("FARM_THREADS");
	unsetenv("FARM_RING_POINTS");
}

/* park_after_us: default, 0 allowed (park at once), range, environment. */
static void test_park_after(void **state)
{
	(void)state;
	struct farm_config c;
	char err[256];
	farm_config_defaults(&c);
	assert_int_equal(c.park_after_us, 200);
	assert_int_equal(
	        farm_config_set(&c, "park_after_us", "0", err, sizeof(err)), 0);
	assert_int_equal(c.park_after_us, 0);
	assert_int_equal(farm_config_set(&c, "park_after_us", "1000001", err,
	                                 sizeof(err)),
	                 -ERANGE);
	assert_int_equal(c.park_after_us, 0);
	setenv("FARM_PARK_AFTER_US", "50", 1);
	assert_int_equal(farm_config_apply_env(&c, err, sizeof(err)), 0);
	assert_int_equal(c.park_after_us, 50);
	unsetenv("FARM_PARK_AFTER_US");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_sizes),
	        cmocka_unit_test(test_file_and_env),
	        cmocka_unit_test(test_addrspace_keys),
	        cmocka_unit_test(test_park_after),
	};
	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
