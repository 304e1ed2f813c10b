/*
 * The directory side of a same-id rejoin (src/node/rejoin.c), without a
 * cluster: a data directory as a killed machine leaves it (a manifest,
 * two region files, one of them set aside as `.old`, its log, another
 * memory file), and the move cut short at each point a kill can cut it
 * (stale/farm.manifest written, some region files moved). Each open must
 * finish the move: the old copies in stale/, nothing of the old
 * incarnation at the top that would make farm_restart_open refuse or
 * restart from it. A later incarnation's manifest at the top outdates
 * stale/ (removed, the top kept); without reuse_copies, or with it but
 * no reuse_ids, nothing is touched. The ZooKeeper question is not asked
 * here (a server that does not answer: restarted from as before).
 */
#include "testutil.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tmpdir.h"

#include "node/rejoin.h"
#include "node/restart_int.h"
#include "util/wire.h"

#define RS (1ull << 20)
/* A manifest of two regions (the header holds a view's members). */
#define MAN_BYTES                                                 \
	(sizeof(struct man_hdr) + 2 * sizeof(struct man_region) + \
	 sizeof(struct man_tail))

static char dir[256];

static void path(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", dir, name);
}

static bool exists(const char *name)
{
	char p[512];
	path(p, sizeof(p), name);
	return access(p, F_OK) == 0;
}

static void put_file(const char *name, const void *b, size_t n)
{
	char p[512];
	path(p, sizeof(p), name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	if (n)
		assert_int_equal(write(fd, b, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static void config(struct farm_config *c, bool copies)
{
	farm_config_defaults(c);
	c->has_machine_id = true;
	c->machine_id = 2;
	c->region_size = RS;
	snprintf(c->data_dir, sizeof(c->data_dir), "%s", dir);
	/* No server there: the question is not answered. */
	snprintf(c->zk, sizeof(c->zk), "127.0.0.1:1");
	c->zk_connect_timeout_ms = 200;
	c->reuse_ids = true;
	c->reuse_copies = copies;
}

/* A manifest of machine 2 listing regions 0x11 and 0x22, its log
 * mem-1.region; @cfgid tells one incarnation's from another's. */
static size_t manifest(const struct farm_config *c, uint64_t cfgid,
                       uint8_t *buf)
{
	size_t n = sizeof(struct man_hdr) + 2 * sizeof(struct man_region) +
	           sizeof(struct man_tail);
	memset(buf, 0, n);
	struct man_hdr *h = (struct man_hdr *)(void *)buf;
	h->magic = MAN_MAGIC;
	h->layout = MAN_LAYOUT;
	h->wire = FARM_WIRE_VERSION;
	h->machine = c->machine_id;
	h->region_size = RS;
	h->config_id = cfgid;
	h->nregions = 2;
	farm_rst_cluster_name(c, h->cluster, sizeof(h->cluster));
	snprintf(h->log_file, sizeof(h->log_file), "mem-1.region");
	struct man_region r[2] = {{.id = 0x11, .size = RS},
	                          {.id = 0x22, .size = RS}};
	snprintf(r[0].file, sizeof(r[0].file), "mem-2.region");
	snprintf(r[1].file, sizeof(r[1].file), "mem-3.region");
	memcpy(buf + sizeof(*h), r, sizeof(r));
	struct man_tail t = {.magic = MAN_END,
	                     .len = n,
	                     .sum = farm_rst_fnv1a(buf, n - sizeof(t))};
	memcpy(buf + n - sizeof(t), &t, sizeof(t));
	return n;
}

/* The killed machine's directory; its region 0x22 set aside (.old). */
static size_t killed_dir(const struct farm_config *c, uint8_t *man)
{
	static uint8_t zero[4096];
	size_t n = manifest(c, 7, man);
	put_file(FARM_MANIFEST_FILE, man, n);
	put_file("mem-0.region", zero, sizeof(zero));
	put_file("mem-1.region", zero, sizeof(zero));
	put_file("mem-2.region", zero, sizeof(zero));
	put_file("mem-3.region.old", zero, sizeof(zero));
	put_file("farm.history", zero, 16);
	return n;
}

static int setup(void **state)
{
	(void)state;
	tu_tmpdir(dir, sizeof(dir), "rejoin");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tu_rmtree(dir);
}

/* Fresh with its old copies in stale/: what every finished move leaves. */
static void moved(void)
{
	assert_false(exists(FARM_MANIFEST_FILE));
	assert_false(exists("mem-0.region"));
	assert_false(exists("mem-1.region"));
	assert_false(exists("mem-2.region"));
	assert_false(exists("mem-3.region.old"));
	assert_true(exists(FARM_STALE_DIR "/" FARM_MANIFEST_FILE));
	assert_true(exists(FARM_STALE_DIR "/mem-2.region"));
	assert_true(exists(FARM_STALE_DIR "/mem-3.region"));
}

/* Cut short after step 1: stale/farm.manifest equals the top one. */
static void test_after_manifest(void **state)
{
	(void)state;
	struct farm_config c;
	config(&c, true);
	static uint8_t man[MAN_BYTES];
	size_t n = killed_dir(&c, man);
	char p[512];
	path(p, sizeof(p), FARM_STALE_DIR);
	assert_int_equal(mkdir(p, 0700), 0);
	put_file(FARM_STALE_DIR "/" FARM_MANIFEST_FILE, man, n);
	struct farm_rejoin *rj = NULL;
	assert_int_equal(farm_rejoin_prepare(&c, &rj), 0);
	assert_non_null(rj);
	moved();
	farm_rejoin_close(rj);
	/* Opened again (killed before registering): the same, nothing
	 * lost. */
	assert_int_equal(farm_rejoin_prepare(&c, &rj), 0);
	assert_non_null(rj);
	moved();
	farm_rejoin_close(rj);
}

/* Cut short in step 2: one region file moved, the other not. */
static void test_mid_move(void **state)
{
	(void)state;
	struct farm_config c;
	config(&c, true);
	static uint8_t man[MAN_BYTES];
	size_t n = killed_dir(&c, man);
	char p[512], q[512];
	path(p, sizeof(p), FARM_STALE_DIR);
	assert_int_equal(mkdir(p, 0700), 0);
	put_file(FARM_STALE_DIR "/" FARM_MANIFEST_FILE, man, n);
	path(p, sizeof(p), "mem-2.region");
	path(q, sizeof(q), FARM_STALE_DIR "/mem-2.region");
	assert_int_equal(rename(p, q), 0);
	struct farm_rejoin *rj = NULL;
	assert_int_equal(farm_rejoin_prepare(&c, &rj), 0);
	assert_non_null(rj);
	moved();
	farm_rejoin_close(rj);
	/* Cut short after step 4: no top manifest, stale/ whole. */
	assert_int_equal(farm_rejoin_prepare(&c, &rj), 0);
	assert_non_null(rj);
	moved();
	farm_rejoin_close(rj);
}

/* The rejoined incarnation killed in turn: its own manifest at the top
 * outdates stale/, which goes; the top is judged afresh (here: no
 * answer from ZooKeeper, so restarted from as before, untouched). */
static void test_later_incarnation(void **state)
{
	(void)state;
	struct farm_config c;
	config(&c, true);
	static uint8_t man[MAN_BYTES], old[MAN_BYTES];
	killed_dir(&c, man);
	size_t n = manifest(&c, 3, old);
	char p[512];
	path(p, sizeof(p), FARM_STALE_DIR);
	assert_int_equal(mkdir(p, 0700), 0);
	put_file(FARM_STALE_DIR "/" FARM_MANIFEST_FILE, old, n);
	put_file(FARM_STALE_DIR "/mem-2.region", man, 16);
	struct farm_rejoin *rj = NULL;
	assert_int_equal(farm_rejoin_prepare(&c, &rj), 0);
	assert_null(rj);
	assert_false(exists(FARM_STALE_DIR));
	assert_true(exists(FARM_MANIFEST_FILE));
	assert_true(exists("mem-2.region"));
	assert_true(exists("mem-3.region.old"));
	assert_true(exists("mem-1.region"));
}

/* reuse_copies off, or on without reuse_ids: nothing touched, even with
 * a move's leftovers. */
static void test_off(void **state)
{
	(void)state;
	struct farm_config c;
	config(&c, false);
	static uint8_t man[MAN_BYTES];
	size_t n = killed_dir(&c, man);
	char p[512];
	path(p, sizeof(p), FARM_STALE_DIR);
	assert_int_equal(mkdir(p, 0700), 0);
	put_file(FARM_STALE_DIR "/" FARM_MANIFEST_FILE, man, n);
	struct farm_rejoin *rj = NULL;
	assert_int_equal(farm_rejoin_prepare(&c, &rj), 0);
	assert_null(rj);
	c.reuse_copies = true;
	c.reuse_ids = false;
	assert_int_equal(farm_rejoin_prepare(&c, &rj), 0);
	assert_null(rj);
	assert_true(exists(FARM_MANIFEST_FILE));
	assert_true(exists("mem-2.region"));
	assert_true(exists(FARM_STALE_DIR "/" FARM_MANIFEST_FILE));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_after_manifest, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_mid_move, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_later_incarnation, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_off, setup, teardown),
	};
	return cmocka_run_group_tests_name("rejoin", tests, NULL, NULL);
}
