/*
 * Failure detection and reconfiguration (src/recovery) on 4 machine
 * processes joined through a real ZooKeeper (scripts/zk-local), with a
 * session timeout of 4 s and 50 ms leases, so that every removal seen
 * within a fraction of the session timeout came from the lease path:
 *
 *   zombie      machine 3 is stopped with SIGSTOP: the CM (machine 0)
 *               suspects it when its lease lapses, probes the others, and
 *               writes a configuration without it that lists its
 *               incarnation as removed. After SIGCONT, machine 3 finds
 *               itself removed and its lease lost (farm_node_removed), and
 *               nobody takes it back, though its ZooKeeper session lives.
 *   CM killed   machine 0 (the CM) is killed with SIGKILL: machines 1 and
 *               2 suspect it, a majority of the configuration answers
 *               their probe, and machine 1 (its successor by id) writes
 *               the next configuration as the new CM, long before the
 *               dead machine's session expires.
 *
 * The CM waits one lease length before it acts on the configuration that
 * removed the stopped machine (it is paused, not dead: it may still act
 * under its lease), where it may skip the wait for the killed one (shm's
 * death notices are exact).
 *
 * --broken: the CM skips the wait for a machine only suspected
 * (FARM_FP_REC_SUSPECT_AS_DEAD); the test must see the stopped machine's
 * removal not waited for.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or (--broken)
 * without fault injection.
 * Not yet here (issue "Recovery I"): transactions and regions across the
 * change; this test checks detection and configuration only.
 */
#define NP_NM 4
#include "nodeproc.h"

#include <inttypes.h>

#include "brokenarg.h"
#include "coord/membership.h"
#include "recovery/recovery.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define SESSION_MS 4000
/* Not the default 10 ms: at load 12-16 on 2 cores lease threads went up
 * to 15 ms without running (lease_bench), and a false removal would
 * break this test's exact expectations. Still far below the session. */
#define LEASE_US 50000u
#define WAIT_MS  15000

static char zk_dir[256], zk_connect[64], zk_root[64];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool broken; /* --broken: FARM_FP_REC_SUSPECT_AS_DEAD */

struct report {
	uint64_t config_id;
	unsigned n;
	uint32_t ids[NP_NM];
	bool has_cm;
	uint32_t cm;
	unsigned nremoved;
	uint32_t removed[NP_NM];
	bool removed_self;
	uint64_t t_view_ns; /* monotonic, when this configuration applied */
	struct farm_recovery_stats st;
};

struct child {
	_Atomic uint64_t t_view_ns;
};

static void on_config(void *ctx, uint64_t id, unsigned members, bool member)
{
	(void)id;
	(void)members;
	(void)member;
	struct child *ch = ctx;
	atomic_store(&ch->t_view_ns, np_now_ns());
}

static void fill(struct np_child *c, struct child *ch, struct report *r)
{
	struct farm_view *v = malloc(sizeof(*v));
	memset(r, 0, sizeof(*r));
	if (!v || farm_node_view(c->node, v)) {
		free(v);
		return;
	}
	r->config_id = v->config_id;
	r->n = v->n;
	for (unsigned i = 0; i < v->n && i < NP_NM; i++)
		r->ids[i] = v->members[i].id;
	r->has_cm = v->has_cm;
	r->cm = v->cm;
	r->nremoved = v->nremoved;
	for (unsigned i = 0; i < v->nremoved && i < NP_NM; i++)
		r->removed[i] = v->removed[i].id;
	r->removed_self = farm_node_removed(c->node);
	r->t_view_ns = atomic_load(&ch->t_view_ns);
	farm_recovery_stats(farm_node_recovery(c->node), &r->st);
	free(v);
}

/* Wait (serving the loop) until the view has @n members or this machine
 * was removed, at most WAIT_MS. */
static void wait_view(struct np_child *c, unsigned n)
{
	static const volatile int never = 0;
	uint64_t dl = np_now_ns() + WAIT_MS * 1000000ull;
	struct farm_view *v = malloc(sizeof(*v));
	while (v && np_now_ns() < dl) {
		if (!farm_node_view(c->node, v) &&
		    (v->n == n || farm_node_removed(c->node)))
			break;
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
	free(v);
}

/* Wait (serving the loop) until this machine, as CM, decided on a lease
 * wait (waited or skipped), at most WAIT_MS: the view is seen before its
 * recovery starts. */
static void wait_lease_decision(struct np_child *c)
{
	static const volatile int never = 0;
	uint64_t dl = np_now_ns() + WAIT_MS * 1000000ull;
	struct farm_recovery_stats *st = malloc(sizeof(*st));
	while (st && np_now_ns() < dl) {
		farm_recovery_stats(farm_node_recovery(c->node), st);
		if (st->lease_waits + st->lease_waits_skipped)
			break;
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
	free(st);
}

static int machine(struct np_child *c, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	int rc = np_config_zk(c, "16M", zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (rc)
		return rc;
	struct child ch = {0};
	if ((rc = farm_node_open(&cfg, &c->node))) {
		fprintf(stderr, "m%u: open: %s\n", c->me, farm_strerror(rc));
		return 4;
	}
	farm_node_on_config(c->node, on_config, &ch);
	farm_node_set_app_loops(c->node, true);
	if (farm_node_start(c->node, 10000) ||
	    farm_node_loop_open(c->node, 0, &c->loop))
		return 5;
	wait_view(c, NP_NM);
	if (np_ready(c))
		return 6;
	for (;;) {
		int b = np_wait_cmd(c);
		if (b == 'Q' || b < 0)
			break;
		if (b >= '1' && b <= '0' + NP_NM)
			wait_view(c, (unsigned)(b - '0'));
		if (b == 'L')
			wait_lease_decision(c);
		struct report r;
		fill(c, &ch, &r);
		if (np_say(c, 'V', &r, sizeof(r)))
			break;
	}
	farm_node_loop_close(c->node, c->loop);
	farm_node_close(c->node);
	return 0;
}

static struct report ask(struct np_cluster *cl, unsigned i, char cmd)
{
	struct report r;
	np_send(cl, i, cmd);
	np_expect(cl, i, 'V', WAIT_MS + 5000);
	np_recv(cl, i, &r, sizeof(r), 1000);
	return r;
}

static struct np_cluster cl;

static void test_detect_and_reconfigure(void **state)
{
	(void)state;
	np_start(&cl, "recovery", machine, NULL);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', 60000);
	struct report r[NP_NM];
	for (unsigned i = 0; i < NP_NM; i++) {
		r[i] = ask(&cl, i, 'V');
		assert_int_equal(r[i].n, NP_NM);
		assert_true(r[i].has_cm);
		assert_int_equal(r[i].cm, 0);
	}
	uint64_t c0 = r[0].config_id;

	/* Zombie: stop machine 3 past its lease. */
	uint64_t t_stop = np_now_ns();
	assert_int_equal(kill(cl.pid[3], SIGSTOP), 0);
	for (unsigned i = 0; i < 3; i++) {
		r[i] = ask(&cl, i, '3');
		assert_int_equal(r[i].n, 3);
		assert_true(r[i].config_id > c0);
		assert_int_equal(r[i].nremoved, 1);
		assert_int_equal(r[i].removed[0], 3);
		assert_int_equal(r[i].cm, 0);
	}
	assert_true(r[0].st.suspicions >= 1);
	assert_true(r[0].st.requests >= 1);
	double det = (double)(r[0].st.t_suspect_ns - t_stop) / 1e6;
	double cfg = (double)(r[0].t_view_ns - t_stop) / 1e6;
	printf("zombie: machine 3 stopped; the CM suspected it after %.1f ms, "
	       "probed in %.1f ms, and applied configuration %" PRIu64
	       " without it %.1f ms after the stop (lease %u ms, session "
	       "%d ms)\n",
	       det, (double)(r[0].st.t_probed_ns - r[0].st.t_suspect_ns) / 1e6,
	       r[0].config_id, cfg, LEASE_US / 1000, SESSION_MS);
	uint64_t c1 = r[0].config_id;
	/* Paused, not dead: its removal waited one lease length. */
	r[0] = ask(&cl, 0, 'L');
	printf("zombie: the CM waited %" PRIu64
	       " lease lengths, skipped %" PRIu64 "\n",
	       r[0].st.lease_waits, r[0].st.lease_waits_skipped);
	if (broken) {
		if (r[0].st.lease_waits_skipped == 0)
			fail_msg("--broken: the stopped machine's lease wait "
			         "was not skipped");
	} else {
		assert_int_equal(r[0].st.lease_waits, 1);
		assert_int_equal(r[0].st.lease_waits_skipped, 0);
	}
	assert_int_equal(kill(cl.pid[3], SIGCONT), 0);
	struct report z = ask(&cl, 3, '3');
	assert_true(z.removed_self);
	assert_true(z.st.lease.lost >= 1 || z.st.removed >= 1);
	printf("zombie: after SIGCONT machine 3 sees configuration %" PRIu64
	       ", finds itself removed (lease lost %" PRIu64 ")\n",
	       z.config_id, z.st.lease.lost);
	/* Nobody took it back. */
	for (unsigned i = 0; i < 3; i++) {
		r[i] = ask(&cl, i, 'V');
		assert_int_equal(r[i].n, 3);
		assert_int_equal(r[i].config_id, c1);
	}

	/* The CM killed: its successor (machine 1) takes over. */
	uint64_t t_kill = np_now_ns();
	assert_int_equal(kill(cl.pid[0], SIGKILL), 0);
	tu_reap(cl.pid[0]);
	cl.pid[0] = 0;
	for (unsigned i = 1; i < 3; i++) {
		r[i] = ask(&cl, i, '2');
		assert_int_equal(r[i].n, 2);
		assert_true(r[i].config_id > c1);
		assert_true(r[i].has_cm);
		assert_int_equal(r[i].cm, 1);
	}
	assert_int_equal(r[1].config_id, r[2].config_id);
	/* Machine 0's session still lives: it left through the lease path. */
	bool listed = false;
	for (unsigned k = 0; k < r[1].nremoved; k++)
		listed |= r[1].removed[k] == 0;
	assert_true(listed);
	r[1] = ask(&cl, 1, 'L');
	printf("CM killed: the new CM waited %" PRIu64 " lease lengths, "
	       "skipped %" PRIu64 " (the death notice came first)\n",
	       r[1].st.lease_waits, r[1].st.lease_waits_skipped);
	printf("CM killed: machine 1 became CM in configuration %" PRIu64
	       " %.1f ms after kill -9 (suspected after %.1f ms)\n",
	       r[1].config_id, (double)(r[1].t_view_ns - t_kill) / 1e6,
	       (double)(r[1].st.t_suspect_ns - t_kill) / 1e6);
	for (unsigned i = 1; i < NP_NM; i++)
		np_send(&cl, i, 'Q');
	int st[NP_NM];
	np_finish(&cl, st);
	for (unsigned i = 1; i < NP_NM; i++)
		assert_int_equal(st[i], 0);
	np_cleanup(&cl);
}

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	return 0;
}

int main(int argc, char **argv)
{
	int bst =
	        tu_broken_arg(argc, argv, FARM_FP_REC_SUSPECT_AS_DEAD, &broken);
	if (bst)
		return bst;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-recovery-%d",
	         (int)getpid());
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_detect_and_reconfigure,
	                                  teardown),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "recovery", tests,
	                 sizeof(tests) / sizeof(tests[0]));
}
