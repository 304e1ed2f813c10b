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
#include "leaveproc.h"

#include <inttypes.h>

#define LEAVE_MS 1000 /* one call's timeout */
#define GRACE_MS 300  /* the manager's read of the mark, waited for */

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
	int rc = lp_machine_open(c);
	return rc ? rc : lp_serve(c, on_leave);
}

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
	lp_roles(&cm, &leaver);

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
		while (!(h = lp_ask_held(cm)) && np_now_ns() < g)
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

int main(int argc, char **argv)
{
	return lp_main(argc, argv, "--broken-unquiesce",
	               FARM_FP_LEAVE_UNQUIESCE, "leave_timeout",
	               test_leave_timeout);
}
