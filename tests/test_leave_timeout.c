/*
 * A graceful leave that times out after its handoff was said (farm_node_leave;
 * src/recovery/README.md, "Graceful leave", 5 and 6): once the leaver wrote
 * R/left it promised that no commit of its own is in flight or to come, and
 * the manager may let it go on that promise, without a lease wait, at any
 * moment while that configuration is in force. A timeout must not let
 * commits in again.
 *
 * 2 machine processes on a private ZooKeeper (1 replica, so one machine may
 * leave). Every machine hooks FARM_FP_ZK_LEFT_HOLD: the manager ignores
 * R/left and counts each time the mark would have let the leaver go, so the
 * configuration without the leaver never comes. The machine that is not the
 * configuration manager leaves, LEAVE_MS at a time, each call followed by a
 * commit on it, until the manager has held the mark (so the handoff was
 * said, in that call or an earlier one, before that call returned; a host
 * too slow to get there within WAIT_MS fails the test saying so). Then:
 *   - that call answered -ETIMEDOUT, and the commit after it was refused
 *     -ESHUTDOWN (not admitted);
 *   - one more farm_node_leave waits again and answers -ETIMEDOUT, and a
 *     commit is still refused.
 * Before the handoff is said, a timeout lets commits in: those calls'
 * commits are not checked.
 *
 * --broken-unquiesce (FARM_FP_LEAVE_UNQUIESCE: a leave that gives up lets
 * commits in again, as before the fix): the commit after the timeout must be
 * found admitted. Label proof.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or without fault
 * injection (the hold is a switch).
 */
#define NP_NM 2
#include "nodeproc.h"
#include "brokenarg.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>

#include "node/node.h"
#include "util/fault.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define SESSION_MS 4000
#define LEASE_US   50000u
#define WAIT_MS    30000
#define LEAVE_MS   1000 /* one call's timeout */
#define GRACE_MS   300  /* the manager's read of the mark, waited for */

static char zk_dir[256], zk_connect[64], zk_root[64];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool opt_broken;

/* Child: the manager's hold, counted (the hook runs on its membership
 * thread; read by 'H'). */
static atomic_uint held;

static void hold_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	atomic_fetch_add(&held, 1);
}

struct view_report {
	uint64_t config_id;
	unsigned n;
	uint32_t cm;
};

struct leave_report {
	int leave_rc;
	int commit_rc; /* farm_tx_commit's return, else its outcome */
	bool admitted; /* farm_tx_commit took it (returned 0) */
};

/* Child: wait (serving the loop) until the view has @n members. */
static int wait_members(struct np_child *c, unsigned n)
{
	static const volatile int never = 0;
	uint64_t dl = np_now_ns() + WAIT_MS * 1000000ull;
	struct farm_view *v = malloc(sizeof(*v));
	int rc = -ETIMEDOUT;
	while (v && np_now_ns() < dl) {
		if (!farm_node_view(c->node, v) && v->n == n) {
			rc = 0;
			break;
		}
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
	free(v);
	return rc;
}

/* Child: the leave, on a thread of its own while the main thread serves
 * loop 0 (the completion check's messages run there). */
struct leaver {
	farm_node *node;
	int timeout_ms;
	int rc;
	atomic_int done;
};

static void *leave_main(void *arg)
{
	struct leaver *l = arg;
	l->rc = farm_node_leave(l->node, l->timeout_ms);
	atomic_store(&l->done, 1); /* pairs with the load in leave_run */
	return NULL;
}

static void committed(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	int *o = ctx;
	o[0] = outcome;
	o[1] = 1;
}

/* Child: an empty transaction's commit on this machine: refused at once
 * (its return), or admitted (0) and then its outcome. */
static void try_commit(struct np_child *c, struct leave_report *r)
{
	farm_tx *tx;
	r->admitted = false;
	r->commit_rc = farm_tx_begin(farm_node_txm(c->node), c->loop, &tx);
	if (r->commit_rc)
		return;
	int o[2] = {0, 0};
	r->commit_rc = farm_tx_commit(tx, committed, o);
	if (!r->commit_rc) {
		r->admitted = true;
		(void)farm_loop_wait(c->loop, &o[1], WAIT_MS * 1000000ull);
		r->commit_rc = o[1] ? o[0] : -ETIMEDOUT;
	}
	farm_tx_free(tx);
}

static int leave_run(struct np_child *c, int timeout_ms, struct leave_report *r)
{
	static const volatile int never = 0;
	struct leaver l = {.node = c->node, .timeout_ms = timeout_ms};
	pthread_t th;
	if (pthread_create(&th, NULL, leave_main, &l))
		return -1;
	while (!atomic_load(&l.done))
		(void)farm_loop_wait(c->loop, &never, 10000000ull);
	pthread_join(th, NULL);
	r->leave_rc = l.rc;
	try_commit(c, r);
	return 0;
}

static int machine(struct np_child *c, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	int rc = np_config_zk(c, "16M", zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (rc)
		return rc;
	cfg.replicas = 1; /* so that one of the 2 may leave */
	if ((rc = farm_node_open(&cfg, &c->node))) {
		fprintf(stderr, "m%u: open: %s\n", c->me, farm_strerror(rc));
		return 4;
	}
	farm_node_set_app_loops(c->node, true);
	if (farm_node_start(c->node, 10000) ||
	    farm_node_loop_open(c->node, 0, &c->loop))
		return 5;
	if (wait_members(c, NP_NM))
		return 6;
	if (farm_fault_set(FARM_FP_ZK_LEFT_HOLD, hold_hook, NULL))
		return 6;
	if (np_ready(c))
		return 7;
	for (;;) {
		int b = np_wait_cmd(c);
		if (b == 'Q' || b < 0)
			break;
		if (b == 'V') {
			struct view_report vr = {0};
			struct farm_view *v = malloc(sizeof(*v));
			if (v && !farm_node_view(c->node, v))
				vr = (struct view_report){.config_id =
				                                  v->config_id,
				                          .n = v->n,
				                          .cm = v->cm};
			free(v);
			if (np_say(c, 'V', &vr, sizeof(vr)))
				break;
		} else if (b == 'L') {
			struct leave_report r = {0};
			if (leave_run(c, LEAVE_MS, &r) ||
			    np_say(c, 'L', &r, sizeof(r)))
				break;
		} else if (b == 'H') {
			unsigned h = atomic_load(&held);
			if (np_say(c, 'H', &h, sizeof(h)))
				break;
		}
	}
	farm_node_loop_close(c->node, c->loop);
	farm_node_close(c->node);
	(void)farm_fault_set(FARM_FP_ZK_LEFT_HOLD, NULL, NULL);
	return 0;
}

static struct np_cluster cl;

static unsigned ask_held(unsigned i)
{
	unsigned h = 0;
	np_send(&cl, i, 'H');
	np_expect(&cl, i, 'H', WAIT_MS);
	np_recv(&cl, i, &h, sizeof(h), 1000);
	return h;
}

static struct leave_report ask_leave(unsigned i)
{
	struct leave_report r;
	uint64_t t0 = np_now_ns();
	np_send(&cl, i, 'L');
	np_expect(&cl, i, 'L', LEAVE_MS + WAIT_MS);
	np_recv(&cl, i, &r, sizeof(r), 1000);
	printf("%smachine %u's leave (%d ms) answered %s after %.0f ms; a "
	       "commit then: %s (%s)\n",
	       opt_broken ? "broken: " : "", i, LEAVE_MS,
	       farm_strerror(r.leave_rc), (double)(np_now_ns() - t0) / 1e6,
	       r.admitted ? "admitted" : "refused", farm_strerror(r.commit_rc));
	return r;
}

static void test_leave_timeout(void **state)
{
	(void)state;
	np_start(&cl, opt_broken ? "leave_timeout_broken" : "leave_timeout",
	         machine, NULL);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', 60000);
	struct view_report vr;
	np_send(&cl, 0, 'V');
	np_expect(&cl, 0, 'V', WAIT_MS);
	np_recv(&cl, 0, &vr, sizeof(vr), 1000);
	assert_int_equal(vr.n, NP_NM);
	assert_true(vr.cm < NP_NM);
	unsigned cm = vr.cm, leaver = 1 - vr.cm;

	/* Calls until the manager held R/left: the leaver said it before
	 * the last call returned (it asks for the mark, which is written
	 * after, farm_zk_mark returning at once, before the call goes on).
	 * A hold seen only after GRACE_MS costs one more call, whose
	 * commit is checked instead. */
	struct leave_report r = {0};
	unsigned h = 0, calls = 0;
	for (uint64_t dl = np_now_ns() + WAIT_MS * 1000000ull;
	     !h && np_now_ns() < dl;) {
		r = ask_leave(leaver);
		calls++;
		assert_int_equal(r.leave_rc, -ETIMEDOUT);
		uint64_t g = np_now_ns() + GRACE_MS * 1000000ull;
		while (!(h = ask_held(cm)) && np_now_ns() < g)
			np_pause_ms(20);
	}
	printf("the manager held R/left %u times, after %u calls\n", h, calls);
	if (!h)
		fail_msg("the leaver never said its handoff within %d ms: "
		         "nothing checked",
		         WAIT_MS);
	if (opt_broken) {
		if (!r.admitted)
			fail_msg("--broken-unquiesce: the commit after the "
			         "timeout was refused (%s): the switch did not "
			         "take",
			         farm_strerror(r.commit_rc));
		printf("--broken-unquiesce: a commit admitted after R/left, "
		       "as the check must find\n");
	} else {
		assert_false(r.admitted);
		assert_int_equal(r.commit_rc, -ESHUTDOWN);
		/* A later call: still quiesced, it waits again. */
		r = ask_leave(leaver);
		assert_int_equal(r.leave_rc, -ETIMEDOUT);
		assert_false(r.admitted);
		assert_int_equal(r.commit_rc, -ESHUTDOWN);
	}
	np_quit_all(&cl);
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
	if (argc == 2 && !strcmp(argv[1], "--broken-unquiesce")) {
		opt_broken = true;
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--broken-unquiesce]\n", argv[0]);
		return 2;
	}
	if (!farm_fault_built()) {
		printf("skipped: the hold needs fault injection\n");
		return FARM_TEST_SKIP;
	}
	if (opt_broken &&
	    farm_fault_set(FARM_FP_LEAVE_UNQUIESCE, tu_switch_on, NULL))
		return 1;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-leave-timeout-%d",
	         (int)getpid());
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_leave_timeout, teardown),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "leave_timeout", tests, 1);
}
