/*
 * Two graceful leaves at once on one machine (farm_node_leave; src/node/
 * README.md, "Graceful leave"): one leave runs at a time, and a call made
 * while it runs (another application thread, or the control socket's
 * `leave` beside one) is refused -EALREADY and touches nothing. Before
 * that guard the second call ran alongside on its own copy of the
 * machine's leave state: one that gave up before it saw the other's
 * R/left let commits in again, breaking the mark's promise that no commit
 * of this machine's is to come.
 *
 * 2 machine processes on a private ZooKeeper (1 replica, so one machine may
 * leave); every machine hooks FARM_FP_ZK_LEFT_HOLD, so the manager ignores
 * R/left (counting each time it would have let the leaver go) and the
 * configuration without the leaver never comes. The machine that is not
 * the manager leaves (call A, LEAVE_MS, on a thread of its own; again
 * until one call gets there, within LP_WAIT_MS) and is held by the
 * FARM_FP_LEAVE_QUIESCED hook where it has quiesced and is about to say
 * R/left. Meanwhile its main thread makes the second calls:
 *   - farm_node_leave(node, 0) must answer -EALREADY;
 *   - "leave 1" on the control socket must get an error line that says a
 *     leave already runs.
 * Then A goes on: it says R/left (the manager must count the mark held)
 * and times out (-ETIMEDOUT), and a commit on the leaver after it must be
 * refused -ESHUTDOWN: still quiesced, as the mark promises.
 *
 * --broken-unguarded (FARM_FP_LEAVE_UNGUARDED: the second calls run
 * alongside A, as before the guard): the direct call gives up at once
 * (timeout 0, R/left not yet said by anyone) and lets commits in again
 * between A's drain and A's mark, so the commit after A must be found
 * admitted. Label proof.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or without fault
 * injection (the holds are hooks).
 */
#define NP_NM 2
#include "nodeproc.h"
#include "leaveproc.h"

#include <inttypes.h>

#include "node/ctl.h"

#define LEAVE_MS 2000 /* call A's timeout */
#define CTL_MS   5000 /* the control socket's answer */
#define GRACE_MS 5000 /* the manager's read of R/left, waited for */

/* Child: call A held where it quiesced, before R/left (its first arrival
 * only), until the main thread made the second calls. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int state; /* 0 not there yet, 1 held there, 2 let go on */
} at = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void quiesced_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	pthread_mutex_lock(&at.lock);
	if (at.state == 0) {
		at.state = 1; /* seen by at_state, under at.lock */
		/* Pairs with the broadcast in let_go_on. */
		while (at.state == 1)
			pthread_cond_wait(&at.cond, &at.lock);
	}
	pthread_mutex_unlock(&at.lock);
}

static int at_state(void)
{
	pthread_mutex_lock(&at.lock);
	int s = at.state;
	pthread_mutex_unlock(&at.lock);
	return s;
}

static void let_go_on(void)
{
	pthread_mutex_lock(&at.lock);
	at.state = 2;
	pthread_cond_broadcast(&at.cond); /* pairs with quiesced_hook's wait */
	pthread_mutex_unlock(&at.lock);
}

struct twice_report {
	unsigned calls; /* A's calls, the last one held */
	bool reached;   /* A was held where it quiesced */
	int a_rc;       /* the held call's return */
	int b_rc;       /* farm_node_leave(node, 0) meanwhile */
	int ctl_rc;     /* "leave 1" meanwhile: farm_ctl_request's return */
	bool ctl_busy;  /* its answer said a leave already runs */
	struct lp_commit commit; /* after A */
};

/* Child, A held: the second calls, from this thread and the control
 * socket's. */
static void second_calls(struct np_child *c, struct twice_report *r)
{
	r->reached = true;
	r->b_rc = farm_node_leave(c->node, 0);
	char *reply = NULL;
	r->ctl_rc = farm_ctl_request(c->cl->dir[c->me], "leave 1", &reply, NULL,
	                             CTL_MS);
	r->ctl_busy = reply && strstr(reply, "already runs");
	if (reply)
		fprintf(stderr, "m%u: leave 1 on the control socket: %s", c->me,
		        reply);
	free(reply);
}

/* Child, at each pass while call A runs: the second calls once A is
 * held, then A let go on. */
static void while_a(struct np_child *c, void *arg)
{
	struct twice_report *r = arg;
	if (!r->reached && at_state() == 1) {
		second_calls(c, r);
		let_go_on();
	}
}

/* Child: one call A, serving the loop; the second calls once it is held. */
static int leave_once(struct np_child *c, struct twice_report *r)
{
	if (lp_leave(c, LEAVE_MS, while_a, r, &r->a_rc))
		return -1;
	r->calls++;
	return 0;
}

/* Child: A's calls until one is held where it quiesced (the first ones
 * may time out before: nothing said yet), then a commit. */
static int leave_twice(struct np_child *c, struct twice_report *r)
{
	uint64_t dl = np_now_ns() + LP_WAIT_MS * 1000000ull;
	while (!r->reached && np_now_ns() < dl)
		if (leave_once(c, r))
			return -1;
	lp_try_commit(c, &r->commit);
	return 0;
}

/* Child, 'L': A's calls and the second ones, then a commit. */
static int on_leave(struct np_child *c)
{
	struct twice_report r = {0};
	if (leave_twice(c, &r))
		return -1;
	return np_say(c, 'L', &r, sizeof(r));
}

static int machine(struct np_child *c, void *arg)
{
	(void)arg;
	int rc = lp_machine_open(c);
	if (rc)
		return rc;
	if (farm_fault_set(FARM_FP_LEAVE_QUIESCED, quiesced_hook, NULL))
		return 6;
	rc = lp_serve(c, on_leave);
	(void)farm_fault_set(FARM_FP_LEAVE_QUIESCED, NULL, NULL);
	return rc;
}

static void test_leave_twice(void **state)
{
	(void)state;
	np_start(&cl, opt_broken ? "leave_twice_broken" : "leave_twice",
	         machine, NULL);
	unsigned cm, leaver;
	lp_roles(&cm, &leaver);

	struct twice_report r;
	uint64_t t0 = np_now_ns();
	np_send(&cl, leaver, 'L');
	np_expect(&cl, leaver, 'L', 2 * LP_WAIT_MS + LEAVE_MS);
	np_recv(&cl, leaver, &r, sizeof(r), 1000);
	/* The mark is written after farm_membership_left returns (it
	 * returns at once): the manager's read of it, waited for. */
	unsigned h = 0;
	for (uint64_t g = np_now_ns() + GRACE_MS * 1000000ull;
	     !(h = lp_ask_held(cm)) && np_now_ns() < g;)
		np_pause_ms(20);
	printf("%smachine %u: %u call(s) of %d ms, the last held where it "
	       "quiesced: %s; meanwhile leave(0) answered %s, the control "
	       "socket's leave %s (%s); the held call answered %s after "
	       "%.0f ms in all; the manager held R/left %u times; a commit "
	       "then: %s (%s)\n",
	       opt_broken ? "broken: " : "", leaver, r.calls, LEAVE_MS,
	       r.reached ? "yes" : "no", farm_strerror(r.b_rc),
	       farm_strerror(r.ctl_rc),
	       r.ctl_busy ? "a leave already runs" : "another answer",
	       farm_strerror(r.a_rc), (double)(np_now_ns() - t0) / 1e6, h,
	       r.commit.admitted ? "admitted" : "refused",
	       farm_strerror(r.commit.rc));
	if (!r.reached)
		fail_msg("the leave never quiesced within %d ms: nothing "
		         "checked",
		         LP_WAIT_MS);
	if (!h)
		fail_msg("the held leave never said R/left: nothing checked");
	if (opt_broken) {
		if (!r.commit.admitted)
			fail_msg("--broken-unguarded: the commit after R/left "
			         "was refused (%s): the switch did not take",
			         farm_strerror(r.commit.rc));
		printf("--broken-unguarded: a commit admitted after R/left, "
		       "as the check must find\n");
	} else {
		assert_int_equal(r.b_rc, -EALREADY);
		assert_int_equal(r.ctl_rc, -EPROTO);
		assert_true(r.ctl_busy);
		assert_int_equal(r.a_rc, -ETIMEDOUT);
		assert_false(r.commit.admitted);
		assert_int_equal(r.commit.rc, -ESHUTDOWN);
	}
	np_quit_all(&cl);
	np_cleanup(&cl);
}

int main(int argc, char **argv)
{
	return lp_main(argc, argv, "--broken-unguarded",
	               FARM_FP_LEAVE_UNGUARDED, "leave_twice",
	               test_leave_twice);
}
