/*
 * The graceful-leave tests' cluster (test_leave_timeout, test_leave_twice):
 * 2 machine processes (nodeproc.h) on a private ZooKeeper, 1 replica so
 * that one of them may leave, every machine hooking FARM_FP_ZK_LEFT_HOLD:
 * the manager ignores R/left (counting each time the mark would have let
 * the leaver go), so the configuration without the leaver never comes and
 * a leave can only time out. Include after nodeproc.h (NP_NM 2).
 *
 * The test defines FARM_SOURCE_DIR (scripts/zk-local) and calls lp_main.
 *
 * Machine commands: 'V' the view (struct lp_view), 'H' the manager's
 * holds so far (unsigned), 'L' the test's leave (its own report), 'Q'.
 */
#ifndef FARM_TEST_LEAVEPROC_H
#define FARM_TEST_LEAVEPROC_H

#include <pthread.h>
#include <stdatomic.h>

#include "brokenarg.h"
#include "node/node.h"
#include "util/fault.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define LP_SESSION_MS 4000
#define LP_LEASE_US   50000u
#define LP_WAIT_MS    30000

/* The test's private ZooKeeper, its cluster and whether it runs broken. */
static char lp_zk_dir[256], lp_zk_connect[64], lp_zk_root[64];
static struct np_cluster cl;
static bool opt_broken;

/* Child: the manager's hold, counted (the hook runs on its membership
 * thread; read by 'H'). */
static atomic_uint lp_held;

static void lp_hold_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	atomic_fetch_add(&lp_held, 1);
}

struct lp_view {
	uint64_t config_id;
	unsigned n;
	uint32_t cm;
};

/* A commit tried on the leaver after its leave. */
struct lp_commit {
	int rc;        /* farm_tx_commit's return, else its outcome */
	bool admitted; /* farm_tx_commit took it (returned 0) */
};

/* Child: wait (serving the loop) until the view has @n members. */
static int lp_wait_members(struct np_child *c, unsigned n)
{
	static const volatile int never = 0;
	uint64_t dl = np_now_ns() + LP_WAIT_MS * 1000000ull;
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
struct lp_leaver {
	farm_node *node;
	int timeout_ms;
	int rc;
	atomic_int done;
};

static void *lp_leave_main(void *arg)
{
	struct lp_leaver *l = arg;
	l->rc = farm_node_leave(l->node, l->timeout_ms);
	atomic_store(&l->done, 1); /* pairs with the load in lp_leave */
	return NULL;
}

/* Child: one farm_node_leave(@timeout_ms) on its own thread, serving loop
 * 0 meanwhile and calling @each (when set) at every pass. Its return in
 * *@rc; 0, or -1 when no thread could be made. */
static int lp_leave(struct np_child *c, int timeout_ms,
                    void (*each)(struct np_child *, void *), void *arg, int *rc)
{
	static const volatile int never = 0;
	struct lp_leaver l = {.node = c->node, .timeout_ms = timeout_ms};
	pthread_t th;
	if (pthread_create(&th, NULL, lp_leave_main, &l))
		return -1;
	while (!atomic_load(&l.done)) { /* pairs with lp_leave_main's store */
		if (each)
			each(c, arg);
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
	pthread_join(th, NULL);
	*rc = l.rc;
	return 0;
}

static void lp_committed(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	int *o = ctx;
	o[0] = outcome;
	o[1] = 1;
}

/* Child: an empty transaction's commit on this machine: refused at once
 * (its return), or admitted (0) and then its outcome. */
static void lp_try_commit(struct np_child *c, struct lp_commit *r)
{
	farm_tx *tx;
	r->admitted = false;
	r->rc = farm_tx_begin(farm_node_txm(c->node), c->loop, &tx);
	if (r->rc)
		return;
	int o[2] = {0, 0};
	r->rc = farm_tx_commit(tx, lp_committed, o);
	if (!r->rc) {
		r->admitted = true;
		(void)farm_loop_wait(c->loop, &o[1], LP_WAIT_MS * 1000000ull);
		r->rc = o[1] ? o[0] : -ETIMEDOUT;
	}
	farm_tx_free(tx);
}

/* Child: the machine up, both members seen, the manager's hold hooked.
 * 0, or the child's exit status. */
static int lp_machine_open(struct np_child *c)
{
	struct farm_config cfg;
	int rc = np_config_zk(c, "16M", lp_zk_connect, lp_zk_root,
	                      LP_SESSION_MS, LP_LEASE_US, &cfg);
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
	if (lp_wait_members(c, NP_NM))
		return 6;
	if (farm_fault_set(FARM_FP_ZK_LEFT_HOLD, lp_hold_hook, NULL))
		return 6;
	return 0;
}

/* Child: this machine's view, answered to 'V'. */
static int lp_say_view(struct np_child *c)
{
	struct lp_view vr = {0};
	struct farm_view *v = malloc(sizeof(*v));
	if (v && !farm_node_view(c->node, v))
		vr = (struct lp_view){
		        .config_id = v->config_id, .n = v->n, .cm = v->cm};
	free(v);
	return np_say(c, 'V', &vr, sizeof(vr));
}

/* Child: ready, then the commands until 'Q' ('L' runs @on_leave, which
 * answers it), then the machine closed. */
static int lp_serve(struct np_child *c, int (*on_leave)(struct np_child *))
{
	if (np_ready(c))
		return 7;
	for (;;) {
		int b = np_wait_cmd(c);
		if (b == 'Q' || b < 0)
			break;
		unsigned h = atomic_load(&lp_held);
		if ((b == 'V' && lp_say_view(c)) || (b == 'L' && on_leave(c)) ||
		    (b == 'H' && np_say(c, 'H', &h, sizeof(h))))
			break;
	}
	farm_node_loop_close(c->node, c->loop);
	farm_node_close(c->node);
	(void)farm_fault_set(FARM_FP_ZK_LEFT_HOLD, NULL, NULL);
	return 0;
}

/* Parent: how many times machine @i (the manager) held R/left so far. */
static unsigned lp_ask_held(unsigned i)
{
	unsigned h = 0;
	np_send(&cl, i, 'H');
	np_expect(&cl, i, 'H', LP_WAIT_MS);
	np_recv(&cl, i, &h, sizeof(h), 1000);
	return h;
}

/* Parent: every machine ready; the manager (*@cm) and the other one, the
 * leaver (*@leaver). */
static void lp_roles(unsigned *cm, unsigned *leaver)
{
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', 60000);
	struct lp_view vr;
	np_send(&cl, 0, 'V');
	np_expect(&cl, 0, 'V', LP_WAIT_MS);
	np_recv(&cl, 0, &vr, sizeof(vr), 1000);
	assert_int_equal(vr.n, NP_NM);
	assert_true(vr.cm < NP_NM);
	*cm = vr.cm;
	*leaver = 1 - vr.cm;
}

static int lp_teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	return 0;
}

/* The test's main: @broken_name (its proof's switch, @fp) or nothing,
 * then @test alone on a private ZooKeeper, tagged @tag. */
static int lp_main(int argc, char **argv, const char *broken_name,
                   enum farm_fault_point fp, const char *tag,
                   CMUnitTestFunction test)
{
	int rc = tu_broken_named(argc, argv, broken_name, fp, &opt_broken);
	if (rc)
		return rc;
	if (!farm_fault_built()) {
		printf("skipped: the leave's holds need fault injection\n");
		return FARM_TEST_SKIP;
	}
	snprintf(lp_zk_root, sizeof(lp_zk_root), "/libfarm/test-%s-%d", tag,
	         (int)getpid());
	const struct CMUnitTest tests[] = {
	        {tag, test, NULL, lp_teardown, NULL},
	};
	return tu_zk_run(FARM_SOURCE_DIR "/scripts/zk-local", lp_zk_dir,
	                 sizeof(lp_zk_dir), lp_zk_connect,
	                 sizeof(lp_zk_connect), tag, tests, 1);
}

#endif
