/*
 * Membership, single process: the static backend's view, the text form of
 * a configuration, bad input, and an unreachable ZooKeeper (a loopback
 * port nothing listens on) failing with FARM_EUNAVAILABLE within the bound.
 * The real ZooKeeper runs in test_zk.
 */
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "coord/membership.h"
#include "util/config.h"

struct seen {
	int views;
	uint64_t last_id;
	unsigned last_n;
};

static void on_view(void *ctx, const struct farm_view *v)
{
	struct seen *s = ctx;
	s->views++;
	s->last_id = v->config_id;
	s->last_n = v->n;
}

static void test_static_view(void **state)
{
	(void)state;
	struct farm_config c;
	char err[256];
	farm_config_defaults(&c);
	assert_int_equal(
	        farm_config_set(&c, "machine_id", "2", err, sizeof(err)), 0);
	assert_int_equal(
	        farm_config_set(&c, "data_dir", "/tmp/m2", err, sizeof(err)),
	        0);
	assert_int_equal(
	        farm_config_set(&c, "peer", "5 /tmp/m5", err, sizeof(err)), 0);
	assert_int_equal(
	        farm_config_set(&c, "peer", "0 /tmp/m0", err, sizeof(err)), 0);
	assert_int_equal(farm_config_set(&c, "peer", "1 /tmp/dir with space",
	                                 err, sizeof(err)),
	                 0);
	struct seen s = {0};
	struct farm_membership *m = NULL;
	assert_int_equal(farm_membership_open_config(&c, on_view, NULL, &s, &m),
	                 0);
	assert_non_null(m);
	assert_int_equal(s.views, 1); /* static: once, inside open */
	assert_int_equal(s.last_id, 1);

	struct farm_view v;
	assert_int_equal(farm_membership_view(m, &v), 0);
	assert_int_equal(v.config_id, 1);
	assert_int_equal(v.n, 4);
	/* Static members never change: no graceful leave. */
	assert_int_equal(farm_membership_leave(m, 1), -ENOTSUP);
	assert_int_equal(farm_membership_leave(m, 0), -EINVAL);
	const uint32_t want[] = {0, 1, 2, 5};
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(v.members[i].id, want[i]);
	assert_string_equal(v.members[1].endpoint, "/tmp/dir with space");
	assert_string_equal(farm_view_find(&v, 2)->endpoint, "/tmp/m2");
	assert_null(farm_view_find(&v, 3));

	struct farm_membership_status st;
	assert_int_equal(farm_membership_status(m, &st), 0);
	assert_int_equal(st.state, FARM_MEMBERSHIP_CONNECTED);
	assert_true(st.registered);
	assert_int_equal(st.views, 1);

	/* Waits are satisfied at once or time out; never hang. */
	assert_int_equal(farm_membership_wait_members(m, 4, 0, &v), 0);
	uint64_t t0 = farm_now_ns();
	assert_int_equal(farm_membership_wait_members(m, 3, 50, NULL),
	                 -ETIMEDOUT);
	assert_int_equal(farm_membership_wait_newer(m, 1, 20, NULL),
	                 -ETIMEDOUT);
	uint64_t el = farm_now_ns() - t0;
	assert_true(el >= 70ull * 1000000 && el < 2000ull * 1000000);
	assert_int_equal(farm_membership_wait_newer(m, 0, 0, NULL), 0);
	farm_membership_close(m);

	/* Alone. */
	c.npeers = 0;
	assert_int_equal(farm_membership_open_config(&c, NULL, NULL, NULL, &m),
	                 0);
	assert_int_equal(farm_membership_wait_members(m, 1, 0, &v), 0);
	assert_int_equal(v.members[0].id, 2);
	farm_membership_close(m);
}

/* The largest view (FARM_VIEW_MAX members, 256) over ids spread up to
 * 1,023: a static cluster of that many forms one view, every member
 * found by id and none between; its text form parses back equal (the
 * configuration znode's size at that many members); placement takes
 * every member. A view of all 1,024 ids is refused (parse, config). */
static void test_full_view(void **state)
{
	(void)state;
	struct farm_config c;
	char err[256], v1[32], v2[64];
	farm_config_defaults(&c);
	assert_int_equal(
	        farm_config_set(&c, "max_machines", "1024", err, sizeof(err)),
	        0);
	assert_int_equal(
	        farm_config_set(&c, "machine_id", "1023", err, sizeof(err)), 0);
	assert_int_equal(
	        farm_config_set(&c, "data_dir", "/tmp/m1023", err, sizeof(err)),
	        0);
	for (unsigned i = 0; i + 1 < FARM_VIEW_MAX; i++) {
		snprintf(v1, sizeof(v1), "%u /tmp/m%u", 4 * i + 3, 4 * i + 3);
		assert_int_equal(
		        farm_config_set(&c, "peer", v1, err, sizeof(err)), 0);
	}
	assert_true(farm_config_set(&c, "peer", "1 /tmp/m1", err, sizeof(err)) <
	            0);
	struct farm_membership *m = NULL;
	assert_int_equal(farm_membership_open_config(&c, NULL, NULL, NULL, &m),
	                 0);
	struct farm_view *v = calloc(2, sizeof(*v));
	assert_non_null(v);
	assert_int_equal(farm_membership_wait_members(m, FARM_VIEW_MAX, 0, v),
	                 0);
	assert_int_equal(v->n, FARM_VIEW_MAX);
	for (unsigned id = 0; id < 1024; id++) {
		const struct farm_member *mb = farm_view_find(v, id);
		assert_int_equal(mb != NULL, id % 4 == 3);
		snprintf(v2, sizeof(v2), "/tmp/m%u", id);
		if (mb)
			assert_string_equal(mb->endpoint, v2);
	}
	size_t cap = 64 << 10;
	char *buf = malloc(cap);
	assert_non_null(buf);
	int len = farm_view_format(v, buf, cap);
	assert_true(len > 0);
	printf("a view of %u members over ids up to 1,023: %d bytes of "
	       "text\n",
	       v->n, len);
	assert_int_equal(farm_view_parse(buf, (size_t)len, &v[1]), 0);
	assert_true(farm_view_equal(&v[0], &v[1]));
	uint32_t ids[FARM_VIEW_MAX];
	for (unsigned i = 0; i < v->n; i++)
		ids[i] = v->members[i].id;
	struct farm_ring_machine *pl = calloc(2 * FARM_VIEW_MAX, sizeof(*pl));
	assert_non_null(pl);
	assert_int_equal(farm_view_placement(v, ids, v->n, pl), FARM_VIEW_MAX);
	/* One member more than a view holds. */
	size_t off = (size_t)snprintf(buf, cap,
	                              "libfarm-config 1\n"
	                              "config_id 1\n");
	for (unsigned id = 0; id < 1024; id++)
		off += (size_t)snprintf(buf + off, cap - off,
		                        "member %u /tmp/m%u\n", id, id);
	assert_int_equal(farm_view_parse(buf, off, &v[1]), FARM_ECORRUPT);
	free(pl);
	free(buf);
	free(v);
	farm_membership_close(m);
}

/* Ids up to 1,023 (a configuration's max_machines of 1,024): a static
 * cluster of ids 0, 700 and 1023 forms one view, sorted, each found by
 * id; max_machines takes 1..1024 and nothing else. */
static void test_thousand_ids(void **state)
{
	(void)state;
	struct farm_config c;
	char err[256];
	farm_config_defaults(&c);
	assert_int_equal(c.max_machines, 0); /* the node's default: 64 */
	assert_true(farm_config_set(&c, "max_machines", "1025", err,
	                            sizeof(err)) < 0);
	assert_true(farm_config_set(&c, "max_machines", "0", err, sizeof(err)) <
	            0);
	assert_int_equal(
	        farm_config_set(&c, "max_machines", "1024", err, sizeof(err)),
	        0);
	assert_int_equal(c.max_machines, 1024);
	assert_int_equal(
	        farm_config_set(&c, "machine_id", "700", err, sizeof(err)), 0);
	assert_int_equal(
	        farm_config_set(&c, "data_dir", "/tmp/m700", err, sizeof(err)),
	        0);
	assert_int_equal(farm_config_set(&c, "peer", "1023 /tmp/m1023", err,
	                                 sizeof(err)),
	                 0);
	assert_int_equal(
	        farm_config_set(&c, "peer", "0 /tmp/m0", err, sizeof(err)), 0);
	struct farm_membership *m = NULL;
	assert_int_equal(farm_membership_open_config(&c, NULL, NULL, NULL, &m),
	                 0);
	struct farm_view v;
	assert_int_equal(farm_membership_wait_members(m, 3, 0, &v), 0);
	const uint32_t want[] = {0, 700, 1023};
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(v.members[i].id, want[i]);
	assert_string_equal(farm_view_find(&v, 1023)->endpoint, "/tmp/m1023");
	assert_null(farm_view_find(&v, 699));
	farm_membership_close(m);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct farm_membership *m = (struct farm_membership *)0x1;
	struct farm_view v;
	struct farm_config_peer peers[2] = {{1, "/tmp/a"}, {1, "/tmp/b"}};
	struct farm_membership_attr a = {.self_id = 0, .endpoint = "/tmp/x"};

	assert_int_equal(farm_membership_open(NULL, &m), -EINVAL);
	assert_int_equal(farm_membership_open(&a, NULL), -EINVAL);
	assert_int_equal(
	        farm_membership_open_config(NULL, NULL, NULL, NULL, &m),
	        -EINVAL);
	a.endpoint = NULL;
	assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	a.endpoint = "";
	assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	a.endpoint = "bad\nendpoint";
	assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	a.endpoint = "/tmp/x";
	/* A peer twice, a peer with our id, a NULL peer array. */
	a.peers = peers;
	a.npeers = 2;
	assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	a.npeers = 1;
	a.self_id = 1;
	assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	a.peers = NULL;
	assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	a.npeers = 0;
	/* Bad connect strings and roots fail before any connection. */
	const char *bad_zk[] = {"nohostport", "127.0.0.1:", ":2181",
	                        "h:0",        "h:65536",    "h:12x",
	                        "h:1,",       "h:1/",       "h:1/a//b",
	                        "ho st:1",    "[::1]2181",  "h:1/.."};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(bad_zk); i++) {
		a.zk = bad_zk[i];
		assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	}
	a.zk = "127.0.0.1:1";
	const char *bad_root[] = {"",      "relative", "/",       "/a/",
	                          "/a//b", "/a/./b",   "/a/../b", "/a\tb"};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(bad_root); i++) {
		a.zk_root = bad_root[i];
		assert_int_equal(farm_membership_open(&a, &m), -EINVAL);
	}
	assert_ptr_equal(m, (struct farm_membership *)0x1); /* untouched */

	assert_int_equal(farm_membership_view(NULL, &v), -EINVAL);
	assert_int_equal(farm_membership_status(NULL, NULL), -EINVAL);
	assert_int_equal(farm_membership_wait(NULL, NULL, NULL, 0, NULL),
	                 -EINVAL);
	farm_membership_close(NULL);

	/* Configuration keys. */
	struct farm_config c;
	char err[256];
	farm_config_defaults(&c);
	assert_string_equal(c.zk, "");
	assert_string_equal(c.zk_root, "/libfarm/default");
	assert_int_equal(c.zk_session_ms, 4000);
	assert_int_equal(farm_config_set(&c, "zk", "127.0.0.1:2181,h:2", err,
	                                 sizeof(err)),
	                 0);
	assert_int_equal(farm_config_set(&c, "zk", "a b", err, sizeof(err)),
	                 -EINVAL);
	assert_int_equal(farm_config_set(&c, "zk_root", "x", err, sizeof(err)),
	                 -EINVAL);
	assert_int_equal(
	        farm_config_set(&c, "zk_root", "/libfarm/t", err, sizeof(err)),
	        0);
	assert_int_equal(
	        farm_config_set(&c, "zk_session_ms", "abc", err, sizeof(err)),
	        -EINVAL);
	assert_true(farm_config_set(&c, "zk_session_ms", "10", err,
	                            sizeof(err)) < 0);
	assert_int_equal(
	        farm_config_set(&c, "zk_session_ms", "1500", err, sizeof(err)),
	        0);
	assert_int_equal(c.zk_session_ms, 1500);
	assert_true(farm_config_set(&c, "zk_connect_timeout_ms", "0", err,
	                            sizeof(err)) < 0);
	setenv("FARM_ZK_CONNECT_TIMEOUT_MS", "1234", 1);
	assert_int_equal(farm_config_apply_env(&c, err, sizeof(err)), 0);
	unsetenv("FARM_ZK_CONNECT_TIMEOUT_MS");
	assert_int_equal(c.zk_connect_timeout_ms, 1234);
}

static void test_view_text(void **state)
{
	(void)state;
	struct farm_view *v = calloc(2, sizeof(*v));
	assert_non_null(v);
	v[0].config_id = 42;
	v[0].n = 3;
	v[0].members[0] =
	        (struct farm_member){.id = 0, .endpoint = "/dev/shm/a"};
	v[0].members[1] =
	        (struct farm_member){.id = 7, .endpoint = "10.0.0.1:7471"};
	v[0].members[2] =
	        (struct farm_member){.id = 4000000000u, .endpoint = "a b"};
	char buf[4096];
	int n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_true(n > 0);
	assert_string_equal(
	        buf, "libfarm-config 1\nconfig_id 42\nmember 0 /dev/shm/a\n"
	             "member 7 10.0.0.1:7471\nmember 4000000000 a b\n");
	assert_int_equal(farm_view_parse(buf, (size_t)n, &v[1]), 0);
	assert_true(farm_view_equal(&v[0], &v[1]));
	assert_int_equal(farm_view_format(&v[0], buf, 20), -ENOBUFS);

	/* The CM and removed incarnations. */
	v[0].has_cm = true;
	v[0].cm = 7;
	v[0].nremoved = 2;
	v[0].removed[0] = (struct farm_removed){.id = 3, .incarnation = 99};
	v[0].removed[1] =
	        (struct farm_removed){.id = 9, .incarnation = INT64_MAX};
	n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_string_equal(buf, "libfarm-config 1\nconfig_id 42\ncm 7\n"
	                         "member 0 /dev/shm/a\nmember 7 10.0.0.1:7471\n"
	                         "member 4000000000 a b\nremoved 3 99\n"
	                         "removed 9 9223372036854775807\n");
	assert_int_equal(farm_view_parse(buf, (size_t)n, &v[1]), 0);
	assert_true(farm_view_equal(&v[0], &v[1]));
	assert_true(farm_view_removed(&v[1], 9));
	assert_false(farm_view_removed(&v[1], 7));
	v[1].removed[1].incarnation = 5;
	assert_false(farm_view_equal(&v[0], &v[1]));
	/* The restart mark: last, and part of equality. */
	v[0].restart = 41;
	n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_true(n > 0 && strstr(buf, "\nrestart 41\n") &&
	            buf[n - 1] == '\n' &&
	            !strcmp(buf + n - strlen("restart 41\n"), "restart 41\n"));
	assert_int_equal(farm_view_parse(buf, (size_t)n, &v[1]), 0);
	assert_int_equal(v[1].restart, 41);
	assert_true(farm_view_equal(&v[0], &v[1]));
	v[1].restart = 0;
	assert_false(farm_view_equal(&v[0], &v[1]));
	v[0].restart = 0;

	/* Pins (chosen placement): version 4, by region, kept exactly. */
	v[0].npins = 2;
	v[0].pins[0] = (struct farm_ring_pin){.region = 7, .machine = 3};
	v[0].pins[1] =
	        (struct farm_ring_pin){.region = 4000000000u, .machine = 9};
	n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_true(n > 0 && !strncmp(buf, "libfarm-config 4\n", 17) &&
	            strstr(buf, "\npin 7 3\npin 4000000000 9\n"));
	assert_int_equal(farm_view_parse(buf, (size_t)n, &v[1]), 0);
	assert_true(farm_view_equal(&v[0], &v[1]));
	v[1].pins[1].machine = 8;
	assert_false(farm_view_equal(&v[0], &v[1]));
	v[0].npins = 0;
	n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_true(n > 0 && strncmp(buf, "libfarm-config 4\n", 17));

	const char *bad[] = {
	        "",
	        "libfarm-config 5\nconfig_id 1\n",
	        "libfarm-config 1\n",
	        "libfarm-config 1\nconfig_id 1", /* no newline */
	        "libfarm-config 1\nconfig_id -1\n",
	        "libfarm-config 1\nconfig_id 18446744073709551616\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 \n",
	        "libfarm-config 1\nconfig_id 1\nmember 4294967296 x\n",
	        "libfarm-config 1\nconfig_id 1\nmember 2 x\nmember 1 y\n",
	        /* a CM that is not a member, twice, after members */
	        "libfarm-config 1\nconfig_id 1\ncm 2\nmember 1 x\n",
	        "libfarm-config 1\nconfig_id 1\ncm 1\ncm 1\nmember 1 x\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\ncm 1\n",
	        "libfarm-config 1\nconfig_id 1\ncm x\n",
	        /* removed: before a member, malformed, negative */
	        "libfarm-config 1\nconfig_id 1\nremoved 1 2\nmember 3 x\n",
	        "libfarm-config 1\nconfig_id 1\nremoved 1\n",
	        "libfarm-config 1\nconfig_id 1\nremoved 1 -2\n",
	        "libfarm-config 1\nconfig_id 1\nremoved 1 2 3\n",
	        "libfarm-config 1\nconfig_id 1\nremoved 1 "
	        "9223372036854775808\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\nmember 1 y\n",
	        "libfarm-config 1\nconfig_id 1\nmemberx 1 y\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 a\tb\n",
	        /* restart: zero, twice, junk, before a member */
	        "libfarm-config 1\nconfig_id 1\nrestart 0\n",
	        "libfarm-config 1\nconfig_id 1\nrestart 2\nrestart 2\n",
	        "libfarm-config 1\nconfig_id 1\nrestart 2x\n",
	        "libfarm-config 1\nconfig_id 1\nrestart 2\nmember 1 x\n",
	        /* pin: before version 4, region 0, regions not increasing,
	         * junk, before a member */
	        "libfarm-config 3\nconfig_id 1\nmember 1 x\npin 5 1\n",
	        "libfarm-config 4\nconfig_id 1\nmember 1 x\npin 0 1\n",
	        "libfarm-config 4\nconfig_id 1\nmember 1 x\npin 5 1\npin 5 1\n",
	        "libfarm-config 4\nconfig_id 1\nmember 1 x\npin 6 1\npin 5 1\n",
	        "libfarm-config 4\nconfig_id 1\nmember 1 x\npin 5\n",
	        "libfarm-config 4\nconfig_id 1\nmember 1 x\npin 5 1 2\n",
	        "libfarm-config 4\nconfig_id 1\npin 5 1\nmember 1 x\n",
	};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(bad); i++)
		assert_int_equal(farm_view_parse(bad[i], strlen(bad[i]), &v[1]),
		                 FARM_ECORRUPT);
	/* Too many members. */
	size_t off = (size_t)snprintf(buf, sizeof(buf),
	                              "libfarm-config 1\nconfig_id 1\n");
	char *big = malloc(64 << 10);
	memcpy(big, buf, off);
	for (unsigned i = 0; i <= FARM_VIEW_MAX; i++)
		off += (size_t)sprintf(big + off, "member %u e\n", i);
	assert_int_equal(farm_view_parse(big, off, &v[1]), FARM_ECORRUPT);
	free(big);
	/* An embedded NUL. */
	const char nul[] = "libfarm-config 1\nconfig_id 1\nmember 1 a\0b\n";
	assert_int_equal(farm_view_parse(nul, sizeof(nul) - 1, &v[1]),
	                 FARM_ECORRUPT);
	assert_string_equal(farm_strerror(FARM_EUNAVAILABLE),
	                    "coordination service (ZooKeeper) unreachable");
	free(v);
}

/* Incarnations (a reused id's holder): written only in version 2 and only
 * for holders above 0, parsed back equal, part of equality; malformed or
 * misplaced incarnation lines and version 1 with one are refused. */
static void test_view_incarnation(void **state)
{
	(void)state;
	struct farm_view *v = calloc(2, sizeof(*v));
	assert_non_null(v);
	v[0].config_id = 90;
	v[0].n = 3;
	v[0].members[0] = (struct farm_member){.id = 1, .endpoint = "a"};
	v[0].members[1] =
	        (struct farm_member){.id = 2, .endpoint = "b", .domain = "z"};
	v[0].members[2] = (struct farm_member){.id = 5, .endpoint = "c"};
	char buf[4096];
	int n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_true(n > 0 && !strncmp(buf, "libfarm-config 1\n", 17));
	v[0].members[1].incarnation = 77;
	v[0].members[2].incarnation = 89;
	v[0].ngone = 1;
	v[0].gone[0] = 3;
	n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_true(n > 0);
	assert_string_equal(buf, "libfarm-config 2\nconfig_id 90\n"
	                         "member 1 a\nmember 2 b\nmember 5 c\n"
	                         "domain 2 z\nincarnation 2 77\n"
	                         "incarnation 5 89\ngone 3\n");
	assert_int_equal(farm_view_parse(buf, (size_t)n, &v[1]), 0);
	assert_true(farm_view_equal(&v[0], &v[1]));
	assert_int_equal(v[1].members[0].incarnation, 0);
	assert_int_equal(v[1].members[2].incarnation, 89);
	v[1].members[2].incarnation = 88;
	assert_false(farm_view_equal(&v[0], &v[1]));
	const char *bad[] = {
	        /* version 1 has none */
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\n"
	        "incarnation 1 2\n",
	        /* not a member, zero, junk, twice, out of order */
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\n"
	        "incarnation 2 2\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\n"
	        "incarnation 1 0\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\n"
	        "incarnation 1 2x\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\n"
	        "incarnation 1 2\nincarnation 1 3\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\nmember 2 y\n"
	        "incarnation 2 2\nincarnation 1 3\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\n"
	        "incarnation 1 4294967296\n",
	        /* before a member or a domain, after the state */
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\n"
	        "incarnation 1 2\nmember 2 y\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\n"
	        "incarnation 1 2\ndomain 1 z\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\nformed\n"
	        "incarnation 1 2\n",
	};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(bad); i++)
		assert_int_equal(farm_view_parse(bad[i], strlen(bad[i]), &v[1]),
		                 FARM_ECORRUPT);
	free(v);
}

/* Graceful leave: "leaving" lines after the other lists, in the order
 * asked, parsed back equal and part of equality; a configuration without
 * one is byte for byte what it was (older ones still parse); a leaving
 * machine that is not a member, listed twice, or a leaving line before a
 * member or an incarnation line is refused; placement marks the leavers. */
static void test_view_leaving(void **state)
{
	(void)state;
	struct farm_view *v = calloc(2, sizeof(*v));
	assert_non_null(v);
	v[0].config_id = 12;
	v[0].n = 3;
	v[0].members[0] = (struct farm_member){.id = 1, .endpoint = "a"};
	v[0].members[1] = (struct farm_member){.id = 2, .endpoint = "b"};
	v[0].members[2] = (struct farm_member){.id = 5, .endpoint = "c"};
	v[0].formed = true;
	v[0].ngone = 1;
	v[0].gone[0] = 3;
	char buf[4096];
	int n = farm_view_format(&v[0], buf, sizeof(buf));
	const char *old = "libfarm-config 1\nconfig_id 12\nmember 1 a\n"
	                  "member 2 b\nmember 5 c\nformed\ngone 3\n";
	assert_string_equal(buf, old);
	v[0].nleaving = 2;
	v[0].leaving[0] = 5;
	v[0].leaving[1] = 1;
	v[0].bump = 11;
	n = farm_view_format(&v[0], buf, sizeof(buf));
	assert_true(n > 0);
	assert_string_equal(buf, "libfarm-config 1\nconfig_id 12\nmember 1 a\n"
	                         "member 2 b\nmember 5 c\nformed\ngone 3\n"
	                         "leaving 5\nleaving 1\nbump 11\n");
	assert_int_equal(farm_view_parse(buf, (size_t)n, &v[1]), 0);
	assert_true(farm_view_equal(&v[0], &v[1]));
	assert_int_equal(v[1].nleaving, 2);
	assert_int_equal(v[1].leaving[0], 5);
	/* The order is part of equality, and the list. */
	v[1].leaving[0] = 1;
	v[1].leaving[1] = 5;
	assert_false(farm_view_equal(&v[0], &v[1]));
	v[1].nleaving = 1;
	assert_false(farm_view_equal(&v[0], &v[1]));
	/* An older configuration parses, with nobody leaving. */
	assert_int_equal(farm_view_parse(old, strlen(old), &v[1]), 0);
	assert_int_equal(v[1].nleaving, 0);
	/* Who may leave: 3 members, 1 and 5 leaving already. */
	assert_int_equal(farm_view_may_leave(&v[0], 5, 1), 0); /* again */
	assert_int_equal(farm_view_may_leave(&v[0], 2, 1), -EBUSY);
	assert_int_equal(farm_view_may_leave(&v[0], 3, 1), -ENOENT);
	assert_int_equal(farm_view_may_leave(NULL, 3, 1), -EINVAL);
	v[1] = v[0];
	v[1].nleaving = 0;
	assert_int_equal(farm_view_may_leave(&v[1], 2, 2), 0);
	assert_int_equal(farm_view_may_leave(&v[1], 2, 3), -EBUSY);
	/* Placement marks the leavers, and only them. */
	uint32_t ids[] = {1, 2, 5};
	struct farm_ring_machine ms[2 * FARM_VIEW_MAX];
	unsigned k = farm_view_placement(&v[0], ids, 3, ms);
	assert_int_equal(k, 3);
	assert_true(ms[0].leaving && !ms[1].leaving && ms[2].leaving);
	const char *bad[] = {
	        /* not a member, twice, junk, empty */
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\nleaving 2\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\nleaving 1\n"
	        "leaving 1\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\nleaving 1x\n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\nleaving \n",
	        "libfarm-config 1\nconfig_id 1\nmember 1 x\nleaving\n",
	        /* before a member, before an incarnation */
	        "libfarm-config 1\nconfig_id 1\nleaving 1\nmember 1 x\n",
	        "libfarm-config 2\nconfig_id 1\nmember 1 x\nleaving 1\n"
	        "incarnation 1 2\n",
	};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(bad); i++)
		assert_int_equal(farm_view_parse(bad[i], strlen(bad[i]), &v[1]),
		                 FARM_ECORRUPT);
	free(v);
}

/* A loopback port with nothing listening: bind an ephemeral one, close it. */
static int dead_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	close(s);
	return ntohs(sa.sin_port);
}

static void test_unreachable(void **state)
{
	(void)state;
	char zk[64];
	snprintf(zk, sizeof(zk), "127.0.0.1:%d", dead_port());
	struct farm_membership_attr a = {.self_id = 1,
	                                 .endpoint = "/tmp/x",
	                                 .zk = zk,
	                                 .session_ms = 2000,
	                                 .connect_ms = 1000};
	struct farm_membership *m = NULL;
	uint64_t t0 = farm_now_ns();
	int rc = farm_membership_open(&a, &m);
	double ms = (double)(farm_now_ns() - t0) / 1e6;
#ifdef FARM_HAVE_ZK
	printf("unreachable ZooKeeper at %s: %s after %.0f ms (bound 1000 "
	       "ms)\n",
	       zk, farm_strerror(rc), ms);
	assert_int_equal(rc, FARM_EUNAVAILABLE);
	assert_true(ms >= 990 && ms < 2500);
#else
	assert_int_equal(rc, -ENOTSUP);
	(void)ms;
#endif
	assert_null(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_static_view),
	        cmocka_unit_test(test_bad_input),
	        cmocka_unit_test(test_thousand_ids),
	        cmocka_unit_test(test_full_view),
	        cmocka_unit_test(test_view_text),
	        cmocka_unit_test(test_view_incarnation),
	        cmocka_unit_test(test_view_leaving),
	        cmocka_unit_test(test_unreachable),
	};
	return cmocka_run_group_tests_name("membership", tests, NULL, NULL);
}
