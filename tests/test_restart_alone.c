/*
 * A machine restarted alone on its data directory, into a cluster that
 * lived on without it, is refused (a restart is for the whole
 * cluster; a lone machine's memory is out of date).
 *
 * 3 machines through a private ZooKeeper run the bank workload of
 * txproc.h (3 replicas). Machine 2 is killed with SIGKILL; machines 0 and
 * 1 take a configuration without it and go on with transfers, so its
 * copies fall behind. Machine 2 is then started again on its directory.
 * It must be refused at once (farm_node_wait_members: -EEXIST, "not taken
 * back"), the survivors' configuration must not change (the manager does
 * not admit it, zk.c), its files must still be there (renamed .old, never
 * wiped), and after more transfers the survivors' histories (machine 2's
 * up to its kill included) must be strictly serializable with the total
 * conserved.
 *
 * --broken: the manager admits it (FARM_FP_ZK_ADMIT_ALONE, the rule
 * before); the survivors' configuration then takes it back, which the
 * test must notice.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or (--broken)
 * without fault injection.
 */
#define NP_NM 3
#include "txproc.h"

#include <dirent.h>

#include "brokenarg.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define RA_ACCOUNTS   20
#define RA_NACC       (NP_NM * RA_ACCOUNTS)
#define RA_SESSION_MS 1500
#define RA_LEASE_US   50000u
#define RA_JOIN_MS    60000
#define RA_PRE        100 /* transfers per machine before the kill */
#define RA_POST       100 /* per survivor after the refusal */
#define RA_LONE       2

static char zk_dir[256], zk_connect[64], zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool broken;
static struct np_cluster cl;

struct vrep {
	uint64_t config_id;
	unsigned n;
	bool has_lone;
	bool lone_seen; /* a view with machine 2 after its removal */
	int64_t sum;
	int sum_rc;
};

static void vrep_fill(struct tx_child *c, struct vrep *r)
{
	struct farm_view *v = malloc(sizeof(*v));
	memset(r, 0, sizeof(*r));
	if (v && !farm_node_view(c->np.node, v)) {
		r->config_id = v->config_id;
		r->n = v->n;
		r->has_lone = farm_view_find(v, RA_LONE) != NULL;
	}
	free(v);
}

/* Where a machine's role stands between commands. */
struct role {
	farm_fatptr *acc;
	struct bank_counts k;
	uint64_t said_at;
	bool said, waiting, counting, halted, watching, lone_seen;
};

/* What the role reports unasked: 0, or the child's exit status. */
static int role_tick(struct tx_child *c, struct role *ro)
{
	if (ro->watching) { /* was machine 2 ever taken back? */
		struct vrep r;
		vrep_fill(c, &r);
		ro->lone_seen |= r.has_lone;
	}
	if (!ro->said && ro->k.transfers >= RA_PRE) {
		if (np_say(&c->np, 'P', NULL, 0))
			return 21;
		ro->said = true;
	}
	if (ro->waiting) { /* 'W': until a view without machine 2 */
		struct vrep r;
		vrep_fill(c, &r);
		if (!r.has_lone && r.config_id) {
			ro->waiting = false;
			ro->watching = true;
			if (np_say(&c->np, 'w', &r, sizeof(r)))
				return 22;
		}
	}
	if (ro->counting && ro->k.transfers >= ro->said_at + RA_POST) {
		ro->counting = false;
		if (np_say(&c->np, 'm', NULL, 0))
			return 23;
	}
	return 0;
}

/* 'V' (the view) or 'S' (the view and the read-only sum). */
static int role_report(struct tx_child *c, struct role *ro, int cmd)
{
	struct vrep r;
	vrep_fill(c, &r);
	r.lone_seen = ro->lone_seen;
	r.sum_rc = -EAGAIN;
	for (unsigned t = 0;
	     cmd == 'S' && t < 20 && farm_tx_retryable(r.sum_rc); t++) {
		int64_t minb;
		r.sum_rc = ro_sum(c, &ro->k, ro->acc, RA_NACC, RA_NACC, &r.sum,
		                  &minb);
	}
	tx_hist_flush(c);
	return np_say(&c->np, 'v', &r, sizeof(r)) ? 24 : 0;
}

/* One command: 0 to go on, 1 on 'Q', else the child's exit status. */
static int role_cmd(struct tx_child *c, struct role *ro, int cmd)
{
	switch (cmd) {
	case 'H': ro->halted = true; break; /* only commands from now */
	case 'W': ro->waiting = true; break;
	case 'M': /* RA_POST more transfers, then 'm' */
		ro->said_at = ro->k.transfers;
		ro->counting = true;
		break;
	case 'V':
	case 'S': return role_report(c, ro, cmd);
	case 'Q': tx_hist_flush(c); return 1;
	default: break;
	}
	return 0;
}

static int run_role(struct tx_child *c)
{
	farm_fatptr mine[RA_ACCOUNTS];
	struct role ro = {0};
	ro.acc = share_objs(c, "acct", RA_ACCOUNTS, 64, fill_account, NULL,
	                    mine);
	if (!ro.acc)
		return 20;
	int rc = 0;
	while (!rc) {
		rc = role_tick(c, &ro);
		if (rc)
			break;
		rc = role_cmd(c, &ro,
		              ro.halted ? np_wait_cmd(&c->np)
		                        : np_poll_cmd(&c->np));
		if (!rc && !ro.halted)
			bank_step(c, &ro.k, mine, RA_ACCOUNTS, ro.acc, RA_NACC,
			          2000000000ull);
	}
	free(ro.acc);
	return rc == 1 ? 0 : rc;
}

static int config(struct np_child *np, struct farm_config *cfg)
{
	int st = np_config_zk(np, "16M", zk_connect, zk_root, RA_SESSION_MS,
	                      RA_LEASE_US, cfg);
	cfg->replicas = 3;
	/* Formed with its 3 machines: from then on the configuration lists
	 * the ids that left (gone), which the refusal needs. */
	cfg->expect_machines = NP_NM;
	return st;
}

static int run_machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct tx_child c = {.np = *np};
	struct farm_config cfg;
	int st = config(np, &cfg);
	if (st)
		return st;
	if (tx_hist_stream(&c))
		return 8;
	return tx_child_run(&c, &cfg, RA_JOIN_MS, run_role);
}

/* Machine 2 again, on its directory: 0 when it is refused (its history
 * file is left alone). */
static int lone_machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	int st = config(np, &cfg);
	if (st)
		return st;
	farm_node *n;
	if (farm_node_open(&cfg, &n))
		return 4;
	farm_node_set_app_loops(n, true);
	int rc = farm_node_start(n, RA_JOIN_MS);
	if (!rc)
		rc = farm_node_wait_members(n, NP_NM, 20000);
	printf("lone restart: machine %u: %s\n", np->me,
	       rc == -EEXIST ? "refused" : farm_strerror(rc));
	farm_node_close(n);
	return rc == -EEXIST ? 0 : 10;
}

static struct vrep ask(unsigned i, char cmd, char answer)
{
	struct vrep r;
	np_send(&cl, i, cmd);
	np_expect(&cl, i, answer, 60000);
	np_recv(&cl, i, &r, sizeof(r), 10000);
	return r;
}

/* Files left in machine 2's directory: how many, and whether the manifest
 * is one of them. */
static unsigned dir_files(const char *dir, bool *manifest)
{
	DIR *d = opendir(dir);
	unsigned n = 0;
	*manifest = false;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		n++;
		*manifest |= !strcmp(e->d_name, "farm.manifest");
	}
	if (d)
		closedir(d);
	return n;
}

static void test_alone(void **state)
{
	(void)state;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/restart-alone-%d",
	         (int)getpid());
	np_start(&cl, broken ? "restart_alone_broken" : "restart_alone",
	         run_machine, NULL);
	p_setup(&cl);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'P', 120000);
	assert_int_equal(kill(cl.pid[RA_LONE], SIGKILL), 0);
	assert_int_equal(tu_reap(cl.pid[RA_LONE]), 128 + SIGKILL);
	cl.pid[RA_LONE] = 0;
	close(cl.to[RA_LONE]);
	close(cl.from[RA_LONE]);
	struct vrep w[2];
	for (unsigned i = 0; i < 2; i++)
		w[i] = ask(i, 'W', 'w');
	/* The survivors move on: machine 2's copies fall behind. */
	for (unsigned i = 0; i < 2; i++)
		np_send(&cl, i, 'M');
	for (unsigned i = 0; i < 2; i++)
		np_expect(&cl, i, 'm', 60000);
	printf("machine 2 killed; the survivors took configuration %" PRIu64
	       " without it and committed %u more transfers each\n",
	       w[0].config_id, RA_POST);

	uint64_t t0 = np_now_ns();
	np_spawn_one(&cl, RA_LONE, lone_machine, NULL);
	int lone_st = tu_reap(cl.pid[RA_LONE]);
	cl.pid[RA_LONE] = 0;
	close(cl.to[RA_LONE]);
	close(cl.from[RA_LONE]);
	cl.to[RA_LONE] = cl.from[RA_LONE] = -1;
	double lone_ms = (np_now_ns() - t0) / 1e6;
	bool manifest;
	unsigned files = dir_files(cl.dir[RA_LONE], &manifest);

	/* More transfers, then the survivors' view and total. */
	for (unsigned i = 0; i < 2; i++)
		np_send(&cl, i, 'M');
	for (unsigned i = 0; i < 2; i++)
		np_expect(&cl, i, 'm', 60000);
	for (unsigned i = 0; i < 2; i++)
		np_send(&cl, i, 'H');
	struct vrep s0 = ask(0, 'S', 'v'), s1 = ask(1, 'V', 'v');
	for (unsigned i = 0; i < 2; i++)
		np_send(&cl, i, 'Q');
	int st[NP_NM];
	np_finish(&cl, st);
	sc_report rep;
	uint64_t cut = 0;
	int anomalies =
	        tx_check_history(&cl, 1u << RA_LONE, &rep, &cut, NULL, NULL);
	bool admitted =
	        s0.has_lone || s1.has_lone || s0.lone_seen || s1.lone_seen;
	printf("lone restart: exit %d after %.0f ms; %u files left in its "
	       "directory (manifest %s); survivors at configuration %" PRIu64
	       " and %" PRIu64 " with %u and %u members (machine 2 %s); "
	       "total %" PRId64 " (%s); %d anomalies, %" PRIu64
	       " transactions cut by the kill\n",
	       lone_st, lone_ms, files, manifest ? "kept" : "missing",
	       s0.config_id, s1.config_id, s0.n, s1.n,
	       admitted ? "taken back" : "out", s0.sum,
	       farm_strerror(s0.sum_rc), anomalies, cut);
	np_cleanup(&cl);
	if (broken) {
		if (!admitted)
			fail_msg("--broken: the lone machine was not taken "
			         "back: "
			         "the test cannot see the admission");
		printf("--broken: the survivors' configuration took machine 2 "
		       "back, as it must without the refusal\n");
		return;
	}
	assert_int_equal(lone_st, 0);
	assert_false(admitted);
	assert_int_equal(s0.n, 2);
	assert_true(manifest);
	assert_true(files >= 2);
	assert_int_equal(st[0], 0);
	assert_int_equal(st[1], 0);
	assert_int_equal(s0.sum_rc, 0);
	assert_int_equal(s0.sum, (int64_t)RA_NACC * INIT_BALANCE);
	assert_int_equal(anomalies, 0);
}

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	return 0;
}

int main(int argc, char **argv)
{
	int st = tu_broken_arg(argc, argv, FARM_FP_ZK_ADMIT_ALONE, &broken);
	if (st)
		return st;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_alone, teardown),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "restart_alone", tests, 1);
}
