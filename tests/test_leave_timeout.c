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
 * too slow to get there within LP_WAIT_MS fails the test saying so). Then:
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
#include "leaveproc.h"

#include <inttypes.h>

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define LEAVE_MS 1000 /* one call's timeout */
#define GRACE_MS 300  /* the manager's read of the mark, waited for */

static char zk_dir[256], zk_connect[64], zk_root[64];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool opt_broken;

struct leave_report {
	int leave_rc;
	struct lp_commit commit;
};

/* Child, 'L': one leave of LEAVE_MS, then a commit. */
static int on_leave(struct np_child *c)
{
	struct leave_report r = {0};
	if (lp_leave(c, LEAVE_MS, NULL, NULL, &r.leave_rc))
		return -1;
	lp_try_commit(c, &r.commit);
	return np_say(c, 'L', &r, sizeof(r));
}

static int machine(struct np_child *c, void *arg)
{
	(void)arg;
	int rc = lp_machine_open(c, zk_connect, zk_root);
	return rc ? rc : lp_serve(c, on_leave);
}

static struct np_cluster cl;

static struct leave_report ask_leave(unsigned i)
{
	struct leave_report r;
	uint64_t t0 = np_now_ns();
	np_send(&cl, i, 'L');
	np_expect(&cl, i, 'L', LEAVE_MS + LP_WAIT_MS);
	np_recv(&cl, i, &r, sizeof(r), 1000);
	printf("%smachine %u's leave (%d ms) answered %s after %.0f ms; a "
	       "commit then: %s (%s)\n",
	       opt_broken ? "broken: " : "", i, LEAVE_MS,
	       farm_strerror(r.leave_rc), (double)(np_now_ns() - t0) / 1e6,
	       r.commit.admitted ? "admitted" : "refused",
	       farm_strerror(r.commit.rc));
	return r;
}

static void test_leave_timeout(void **state)
{
	(void)state;
	np_start(&cl, opt_broken ? "leave_timeout_broken" : "leave_timeout",
	         machine, NULL);
	unsigned cm, leaver;
	lp_roles(&cl, &cm, &leaver);

	/* Calls until the manager held R/left: the leaver said it before
	 * the last call returned (it asks for the mark, which is written
	 * after, farm_zk_mark returning at once, before the call goes on).
	 * A hold seen only after GRACE_MS costs one more call, whose
	 * commit is checked instead. */
	struct leave_report r = {0};
	unsigned h = 0, calls = 0;
	for (uint64_t dl = np_now_ns() + LP_WAIT_MS * 1000000ull;
	     !h && np_now_ns() < dl;) {
		r = ask_leave(leaver);
		calls++;
		assert_int_equal(r.leave_rc, -ETIMEDOUT);
		uint64_t g = np_now_ns() + GRACE_MS * 1000000ull;
		while (!(h = lp_ask_held(&cl, cm)) && np_now_ns() < g)
			np_pause_ms(20);
	}
	printf("the manager held R/left %u times, after %u calls\n", h, calls);
	if (!h)
		fail_msg("the leaver never said its handoff within %d ms: "
		         "nothing checked",
		         LP_WAIT_MS);
	if (opt_broken) {
		if (!r.commit.admitted)
			fail_msg("--broken-unquiesce: the commit after the "
			         "timeout was refused (%s): the switch did not "
			         "take",
			         farm_strerror(r.commit.rc));
		printf("--broken-unquiesce: a commit admitted after R/left, "
		       "as the check must find\n");
	} else {
		assert_false(r.commit.admitted);
		assert_int_equal(r.commit.rc, -ESHUTDOWN);
		/* A later call: still quiesced, it waits again. */
		r = ask_leave(leaver);
		assert_int_equal(r.leave_rc, -ETIMEDOUT);
		assert_false(r.commit.admitted);
		assert_int_equal(r.commit.rc, -ESHUTDOWN);
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
