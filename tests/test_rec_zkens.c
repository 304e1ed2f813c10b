/*
 * ZooKeeper faults (the fault campaign's ZooKeeper
 * fault): the bank of recbank.h on 4 machines whose membership lives in a
 * 3-server ZooKeeper ensemble (scripts/zk-local start-ensemble; every
 * machine is given the three servers). Once every machine has committed
 * 300 transfers:
 *
 *   1. the ensemble's leader is killed (SIGKILL): the other two elect a
 *      new one, and every machine must commit ZE_PROGRESS more transfers
 *      while the server is down; then it is restarted on its ports and
 *      data and must serve again, and no machine may have changed its
 *      configuration meanwhile;
 *   2. the server that leads now (another one) is killed, and right after
 *      it machine 2 (SIGKILL): the configuration manager must write the
 *      configuration without machine 2 through the two servers left, and
 *      every survivor must apply it and recover the machine's regions
 *      (rb_wait_recovered); then the server is restarted;
 *   3. recbank.h's checks (total conserved, no account left locked, every
 *      committed write present, sercheck over every history, every
 *      survivor committed after the new configuration), and all three
 *      servers serve at the end.
 * What was done is printed with its times.
 *
 * --broken (a test-only switch, only with fault injection built): the
 * machines are given the first server alone, and step 2 kills that very
 * server with machine 2, so no machine can reach ZooKeeper and no
 * configuration without machine 2 can be written: the checks must notice
 * (no new configuration, machine 2's accounts unreadable).
 *
 * Exits 77 (skip) without the ZooKeeper client, java or the jars.
 */
#define NP_NM 4
#include "recbank.h"

#include <time.h>

#define ZE_SERVERS     3
#define ZE_VICTIM      2   /* the machine killed (not the CM) */
#define ZE_PROGRESS    100 /* transfers each machine commits, server down */
#define ZE_PROGRESS_MS 15000
#define ZE_ELECT_MS    30000

static bool opt_broken;

/* ---- the machines ------------------------------------------------------ */

static uint64_t ze_transfers; /* this machine's, committed so far */

static int ze_step(struct tx_child *c, struct run_report *r)
{
	(void)c;
	ze_transfers = r->k.transfers;
	return 0;
}

/* What a machine answers to 'C' ('c'). */
struct ze_state {
	uint64_t transfers; /* committed so far */
	uint64_t config;    /* the configuration it runs in */
};

static int ze_cmd(struct tx_child *c, int cmd, const farm_fatptr *acc,
                  unsigned nacc)
{
	(void)acc;
	(void)nacc;
	if (cmd != 'C')
		return -1;
	struct ze_state st = {.transfers = ze_transfers,
	                      .config = farm_node_config_id(c->np.node)};
	return np_say(&c->np, 'c', &st, sizeof(st));
}

/* ---- the parent --------------------------------------------------------- */

static uint64_t ze_t0; /* every machine past its first transfers */

static double ms_since(uint64_t t)
{
	return (double)(np_now_ns() - t) / 1e6;
}

static struct ze_state ask(unsigned i)
{
	struct ze_state st;
	np_send(&rb_cl, i, 'C');
	np_expect(&rb_cl, i, 'c', 10000);
	np_recv(&rb_cl, i, &st, sizeof(st), 1000);
	return st;
}

/* Between polls of a condition that has its own deadline. */
static void pause_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* The member that leads, once one does (0 after ZE_ELECT_MS). */
static unsigned wait_leader(void)
{
	uint64_t dl = np_now_ns() + ZE_ELECT_MS * 1000000ull;
	for (;;) {
		unsigned k = zkl_leader(rb_zk_script, rb_zk_dir, ZE_SERVERS);
		if (k || np_now_ns() >= dl)
			return k;
		pause_ms(20);
	}
}

static void zk_kill(struct rb_result *res, unsigned k)
{
	if (tu_zk_member(rb_zk_script, rb_zk_dir, k, "kill", NULL, 0))
		failed(&res->f, "zk-local kill of ZooKeeper server %u failed",
		       k);
}

/* Restart server @k on its ports and data; the time until it serves. */
static double zk_restart(struct rb_result *res, unsigned k)
{
	uint64_t t = np_now_ns();
	char line[128];
	int st = tu_zk_member(rb_zk_script, rb_zk_dir, k, "start", line,
	                      sizeof(line));
	if (st)
		failed(&res->f,
		       "ZooKeeper server %u did not restart (zk-local: %d; "
		       "log: %s/%u/zk.log)",
		       k, st, rb_zk_dir, k);
	return ms_since(t);
}

/* Step 1: the leader @k down while the bank runs. */
static void leader_down(struct rb_result *res, unsigned k)
{
	struct ze_state base[NP_NM];
	for (unsigned i = 0; i < NP_NM; i++)
		base[i] = ask(i);
	uint64_t t = np_now_ns();
	zk_kill(res, k);
	double killed_at = (double)(t - ze_t0) / 1e6;
	/* The bank does not wait on ZooKeeper: every machine goes on. */
	uint64_t dl = t + ZE_PROGRESS_MS * 1000000ull, now[NP_NM];
	bool all;
	do {
		all = true;
		for (unsigned i = 0; i < NP_NM; i++) {
			now[i] = ask(i).transfers;
			all = all && now[i] >= base[i].transfers + ZE_PROGRESS;
		}
		if (!all)
			pause_ms(20);
	} while (!all && np_now_ns() < dl);
	double progressed = ms_since(t);
	/* Asked after the progress, which overlaps the election. */
	unsigned next = wait_leader();
	double elected = ms_since(t);
	if (!next)
		failed(&res->f,
		       "no ZooKeeper server led within %d ms of "
		       "server %u's kill",
		       ZE_ELECT_MS, k);
	for (unsigned i = 0; i < NP_NM; i++)
		if (now[i] < base[i].transfers + ZE_PROGRESS)
			failed(&res->f,
			       "machine %u committed %" PRIu64
			       " transfers in %d ms with ZooKeeper server %u "
			       "down (at least %d expected)",
			       i, now[i] - base[i].transfers, ZE_PROGRESS_MS, k,
			       ZE_PROGRESS);
	double restart = zk_restart(res, k);
	/* A server's death is the ensemble's business: no machine may
	 * leave the configuration over it. */
	for (unsigned i = 0; i < NP_NM; i++) {
		struct ze_state st = ask(i);
		if (st.config != base[i].config)
			failed(&res->f,
			       "machine %u: configuration %" PRIu64
			       " before ZooKeeper server %u's kill, %" PRIu64
			       " after its restart (no machine had left)",
			       i, base[i].config, k, st.config);
	}
	printf("%s: ZooKeeper server %u (the leader) killed at +%.0f ms; "
	       "every machine committed %d more transfers %.0f ms after "
	       "the kill; server %u seen leading %.0f ms after it; server "
	       "%u restarted, serving %.0f ms later\n",
	       res->name, k, killed_at, ZE_PROGRESS, progressed, next, elected,
	       k, restart);
}

/* Step 2: server @k and machine ZE_VICTIM down together. */
static void leader_and_machine_down(struct rb_result *res, unsigned k)
{
	uint64_t t = np_now_ns();
	zk_kill(res, k);
	rb_reap(res, ZE_VICTIM, true);
	printf("%s: ZooKeeper server %u killed at +%.0f ms; machine %u "
	       "killed %.1f ms later\n",
	       res->name, k, (double)(t - ze_t0) / 1e6, ZE_VICTIM,
	       (double)(res->t_kill_ns - t) / 1e6);
	rb_tell(res, ZE_VICTIM, !opt_broken);
	if (opt_broken) {
		/* No configuration can be written: the machines run
		 * RB_RECONF_MS, then report. The server stays down through
		 * the checks, which need no ZooKeeper. */
		rb_collect(res);
		printf("%s: the survivors reported %.0f ms after the "
		       "machine's kill\n",
		       res->name, ms_since(res->t_kill_ns));
		return;
	}
	rb_wait_recovered(res);
	double recovered = ms_since(res->t_kill_ns);
	double restart = zk_restart(res, k);
	printf("%s: every survivor applied a configuration without machine "
	       "%u and recovered its regions %.0f ms after its kill (one "
	       "ZooKeeper server down); server %u restarted, serving %.0f "
	       "ms later\n",
	       res->name, ZE_VICTIM, recovered, k, restart);
}

static void test_zk_faults(void **state)
{
	(void)state;
	struct rb_result res;
	const char *name = opt_broken ? "zkens_broken" : "zkens";
	if (opt_broken) /* server 1 alone (the list is in member order) */
		rb_zk_connect[strcspn(rb_zk_connect, ",")] = 0;
	printf("%s: the machines are given ZooKeeper %s\n", name,
	       rb_zk_connect);
	rb_start(&res, name);
	ze_t0 = np_now_ns();
	unsigned lead = wait_leader();
	assert_true(lead != 0);
	/* --broken: the machines know server 1 alone, which step 2 kills;
	 * step 1 leaves it up. */
	unsigned first = opt_broken && lead == 1 ? 2 : lead;
	leader_down(&res, first);
	unsigned second = opt_broken ? 1 : wait_leader();
	if (second == 0 || second == first)
		second = first % ZE_SERVERS + 1;
	leader_and_machine_down(&res, second);
	rb_check(&res);
	for (unsigned k = 1; !opt_broken && k <= ZE_SERVERS; k++) {
		char mode[32];
		if (tu_zk_member(rb_zk_script, rb_zk_dir, k, "mode", mode,
		                 sizeof(mode)))
			failed(&res.f, "ZooKeeper server %u is %s at the end",
			       k, mode);
	}
	rb_verdict(&res, opt_broken,
	           "the machines knew one ZooKeeper server, killed with "
	           "machine 2");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_zk_faults, rb_teardown),
	};
	if (argc > 1 && !strcmp(argv[1], "--broken")) {
		/* A test-only switch, like the other --broken runs: it is
		 * the test's own setup that is broken (one server known). */
		if (!farm_fault_built()) {
			printf("skipped: --broken needs fault injection "
			       "(FARM_FAULT_INJECTION=OFF)\n");
			return FARM_TEST_SKIP;
		}
		opt_broken = true;
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--broken]\n", argv[0]);
		return 2;
	}
	rb_p.pre_transfers = 300;
	rb_p.post_ms = 3000;
	rb_p.step = ze_step;
	rb_p.cmd = ze_cmd;
	return rb_main_n(opt_broken ? "rec_zkens_broken" : "rec_zkens", tests,
	                 1, ZE_SERVERS);
}
