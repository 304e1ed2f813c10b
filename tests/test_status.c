/*
 * `farm status` and `farm stats` (src/tools) against a real cluster: 3
 * machine processes with a KV store (regions of 2 replicas), joined
 * through a private ZooKeeper (scripts/zk-local), run with the built
 * `farm` tool:
 *
 *   cluster   status prints the configuration id and CM the machines
 *             applied, every member registered and answering with its
 *             fabric address (shm: its data directory) and the regions
 *             it holds as primary and backup (as its address space
 *             counts them), every region fully replicated; --check
 *             exits 0. stats shows the puts each machine made, as text
 *             and in Prometheus' format.
 *   killed    machine 2 is killed (SIGKILL): status --check exits 3, the
 *             machine is listed as not answering and some region is no
 *             longer fully replicated; stats on its directory fails.
 *   errors    usage errors exit 2; no ZooKeeper, a bad connect string,
 *             a root with no cluster, a configuration without zk, a
 *             directory with no machine: exit 1 with a reason on stderr.
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 3
#include "nodeproc.h"

#include <inttypes.h>

#include "kv/kv.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif
#ifndef FARM_TOOL
#error "FARM_TOOL must name the built farm tool"
#endif

#define PUTS    10
#define WAIT_MS 30000

static char zk_dir[256], zk_connect[64], zk_root[64];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";

struct report {
	uint64_t config_id;
	uint64_t primary, backup;
};

static int machine(struct np_child *c, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	/* Leases of 500 ms: no false suspicion on a loaded host. */
	int rc =
	        np_config_zk(c, "16M", zk_connect, zk_root, 4000, 500000, &cfg);
	if (rc)
		return rc;
	cfg.replicas = 2;
	farm_kv *kv = NULL;
	int st = 4;
	if ((rc = farm_node_open(&cfg, &c->node))) {
		fprintf(stderr, "m%u: open: %s\n", c->me, farm_strerror(rc));
		return 4;
	}
	if (farm_kv_create(c->node, NULL, 256, &kv))
		goto out;
	farm_node_set_app_loops(c->node, true);
	st = 5;
	if (farm_node_start(c->node, WAIT_MS) ||
	    farm_node_loop_open(c->node, 0, &c->loop) ||
	    farm_node_wait_members(c->node, NP_NM, WAIT_MS))
		goto out;
	st = 6;
	if (farm_kv_attach(kv, c->loop) ||
	    (rc = farm_kv_join_sync(kv, c->loop, NP_NM, WAIT_MS))) {
		fprintf(stderr, "m%u: join: %s\n", c->me, farm_strerror(rc));
		goto out;
	}
	st = 7;
	if (np_ready(c))
		goto out;
	for (;;) {
		int b = np_wait_cmd(c);
		if (b == 'Q' || b < 0)
			break;
		if (b != 'P')
			continue;
		for (unsigned i = 0; i < PUTS; i++) {
			char key[32];
			snprintf(key, sizeof(key), "m%u-key-%u", c->me, i);
			if (farm_kv_put_sync(kv, c->loop, key,
			                     (uint32_t)strlen(key), key,
			                     (uint32_t)strlen(key)))
				goto out;
		}
		struct farm_as_stats as;
		farm_as_stats_get(farm_node_as(c->node), &as);
		struct report r = {.config_id = farm_node_config_id(c->node),
		                   .primary = as.regions_primary,
		                   .backup = as.regions_backup};
		if (np_say(c, 'D', &r, sizeof(r)))
			goto out;
	}
	st = 0;
out:
	if (c->loop) {
		farm_kv_detach(kv, c->loop);
		farm_node_loop_close(c->node, c->loop);
	}
	farm_node_close(c->node);
	farm_kv_destroy(kv);
	return st;
}

/* Run the farm tool with @args (shell words); its stdout (and stderr
 * when @err) in @out. Returns its exit status. */
static int farm(char *out, size_t cap, bool err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int farm(char *out, size_t cap, bool err, const char *fmt, ...)
{
	char args[1024], cmd[1400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "'%s' %s%s", FARM_TOOL, args,
	         err ? " 2>&1" : " 2>/dev/null");
	fflush(NULL);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t n = 0;
	while (n + 1 < cap) {
		size_t r = fread(out + n, 1, cap - 1 - n, p);
		if (!r)
			break;
		n += r;
	}
	out[n] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static struct np_cluster cl;
static char out[1 << 16];

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	return 0;
}

/* The member line of machine @id in a status output, or NULL. */
static const char *member_line(const char *o, unsigned id)
{
	char pre[32];
	snprintf(pre, sizeof(pre), "\n  %-7u ", id);
	const char *l = strstr(o, pre);
	return l ? l + 1 : NULL;
}

static void test_cluster(void **state)
{
	(void)state;
	np_start(&cl, "status", machine, NULL);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', 90000);
	struct report r[NP_NM];
	uint64_t regions = 0;
	for (unsigned i = 0; i < NP_NM; i++) {
		np_send(&cl, i, 'P');
		np_expect(&cl, i, 'D', WAIT_MS);
		np_recv(&cl, i, &r[i], sizeof(r[i]), 1000);
		assert_int_equal(r[i].config_id, r[0].config_id);
		assert_true(r[i].primary >= 1); /* its shard */
		regions += r[i].primary;
	}

	int st = farm(out, sizeof(out), true, "status --zk %s --root %s",
	              zk_connect, zk_root);
	printf("%s", out);
	assert_int_equal(st, 0);
	char want[512];
	snprintf(want, sizeof(want),
	         "cluster %s%s\nconfiguration %" PRIu64 "\ncm 0\nmembers %u\n",
	         zk_connect, zk_root, r[0].config_id, NP_NM);
	assert_true(!strncmp(out, want, strlen(want)));
	for (unsigned i = 0; i < NP_NM; i++) {
		const char *l = member_line(out, i);
		assert_non_null(l);
		char pb[32], line[600];
		snprintf(pb, sizeof(pb), "%" PRIu64 "/%" PRIu64, r[i].primary,
		         r[i].backup);
		snprintf(line, sizeof(line), "  %-7u %-10s %-8s %-13s %s%s\n",
		         i, "yes", "yes", pb, cl.dir[i],
		         i == 0 ? "  (cm)" : "");
		if (strncmp(l, line, strlen(line)))
			fail_msg("member %u: want '%s'", i, line);
	}
	snprintf(want, sizeof(want), "\nregions %" PRIu64 " (", regions);
	assert_non_null(strstr(out, want));
	snprintf(want, sizeof(want),
	         "\nreplication: %" PRIu64 " ok, 0 degraded, 0 unknown\n",
	         regions);
	assert_non_null(strstr(out, want));
	/* Every region: one primary and one backup, on two machines. */
	unsigned lines = 0;
	for (const char *p = strstr(out, "\n  region "); p;
	     p = strchr(p + 1, '\n')) {
		uint32_t id, a, b, hp, hb;
		if (sscanf(p + 1,
		           "  %" SCNu32 " %" SCNu32 " %" SCNu32 " %" SCNu32
		           ":primary %" SCNu32 ":backup ok",
		           &id, &a, &b, &hp, &hb) == 5) {
			assert_int_equal(hp, a);
			assert_int_equal(hb, b);
			assert_true(a != b);
			lines++;
		}
	}
	assert_int_equal(lines, regions);
	assert_int_equal(farm(out, sizeof(out), false,
	                      "status --zk %s --root %s --check", zk_connect,
	                      zk_root),
	                 0);

	/* stats, text and Prometheus. */
	for (unsigned i = 0; i < NP_NM; i++) {
		assert_int_equal(farm(out, sizeof(out), true,
		                      "stats --dir '%s'", cl.dir[i]),
		                 0);
		snprintf(want, sizeof(want), "\nht.puts %d\n", PUTS);
		assert_non_null(strstr(out, want));
		snprintf(want, sizeof(want), "\nnode.config_id %" PRIu64 "\n",
		         r[i].config_id);
		assert_non_null(strstr(out, want));
		assert_int_equal(farm(out, sizeof(out), true,
		                      "stats --dir '%s' --prometheus",
		                      cl.dir[i]),
		                 0);
		snprintf(want, sizeof(want),
		         "\nfarm_ht_puts_total{machine=\"%u\"} %d\n", i, PUTS);
		assert_non_null(strstr(out, want));
	}

	/* Machine 2 killed: not answering, regions not fully replicated. */
	assert_int_equal(kill(cl.pid[2], SIGKILL), 0);
	tu_reap(cl.pid[2]);
	cl.pid[2] = 0;
	st = farm(out, sizeof(out), true, "status --zk %s --root %s --check",
	          zk_connect, zk_root);
	printf("after machine 2 was killed:\n%s", out);
	assert_int_equal(st, 3);
	const char *l = member_line(out, 2);
	if (l) /* still a member: registered or not, it does not answer */
		assert_non_null(strstr(l, " no       ?"));
	const char *rep = strstr(out, "\nreplication: ");
	assert_non_null(rep);
	unsigned ok, deg, unk;
	assert_int_equal(sscanf(rep,
	                        "\nreplication: %u ok, %u degraded, "
	                        "%u unknown",
	                        &ok, &deg, &unk),
	                 3);
	assert_true(deg + unk >= 1);
	assert_int_equal(
	        farm(out, sizeof(out), true, "stats --dir '%s'", cl.dir[2]), 1);
	assert_non_null(strstr(out, "nobody answers"));

	for (unsigned i = 0; i < 2; i++)
		np_send(&cl, i, 'Q');
	int sts[NP_NM];
	np_finish(&cl, sts);
	assert_int_equal(sts[0], 0);
	assert_int_equal(sts[1], 0);
}

static void test_errors(void **state)
{
	(void)state;
	assert_int_equal(farm(out, sizeof(out), true, "status"), 2);
	assert_non_null(strstr(out, "usage: farm status"));
	assert_int_equal(farm(out, sizeof(out), true, "status --help"), 0);
	assert_non_null(strstr(out, "usage: farm status"));
	assert_int_equal(farm(out, sizeof(out), true,
	                      "status --zk %s --config /x", zk_connect),
	                 2);
	assert_int_equal(farm(out, sizeof(out), true, "status --zk a:1 x"), 2);
	assert_int_equal(farm(out, sizeof(out), true,
	                      "status --zk %s --timeout 0", zk_connect),
	                 2);
	assert_int_equal(farm(out, sizeof(out), true, "stats"), 2);
	assert_int_equal(farm(out, sizeof(out), true, "stats --help"), 0);
	assert_non_null(strstr(out, "usage: farm stats"));

	/* Nothing listens on port 1. */
	assert_int_equal(farm(out, sizeof(out), true,
	                      "status --zk 127.0.0.1:1 --timeout 500"),
	                 1);
	assert_non_null(strstr(out, "no ZooKeeper server answered"));
	assert_int_equal(farm(out, sizeof(out), true, "status --zk 'no port'"),
	                 1);
	assert_non_null(strstr(out, "bad connect string"));
	assert_int_equal(farm(out, sizeof(out), true,
	                      "status --zk %s --root /libfarm/no-such-%d",
	                      zk_connect, (int)getpid()),
	                 1);
	assert_non_null(strstr(out, "no cluster under this root"));

	char dir[256], conf[300];
	tu_tmpdir(dir, sizeof(dir), "status-err");
	snprintf(conf, sizeof(conf), "%s/m.conf", dir);
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "machine_id = 0\ndata_dir = %s\n", dir);
	fclose(f);
	assert_int_equal(
	        farm(out, sizeof(out), true, "status --config '%s'", conf), 1);
	assert_non_null(strstr(out, "names no ZooKeeper"));
	assert_int_equal(
	        farm(out, sizeof(out), true, "stats --config '%s'", conf), 1);
	assert_non_null(strstr(out, "no control socket"));
	assert_int_equal(
	        farm(out, sizeof(out), true, "stats --dir '%s/none'", dir), 1);
	assert_int_equal(farm(out, sizeof(out), true, "stats --config /none"),
	                 1);
	/* A --dir with no machine makes status fail too. */
	assert_int_equal(farm(out, sizeof(out), true,
	                      "status --zk %s --root %s --dir '%s'", zk_connect,
	                      zk_root, dir),
	                 1);
	assert_non_null(strstr(out, "no control socket"));
	tu_rmtree(dir);
}

int main(void)
{
	int st = tu_zk_start(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                     sizeof(zk_connect));
	if (st)
		return st;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-status-%d",
	         (int)getpid());
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_cluster, teardown),
	        cmocka_unit_test(test_errors),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	tu_zk_stop(zk_script, zk_dir);
	return rc;
}
