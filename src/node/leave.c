/*
 * Graceful leave, the leaver's side (farm_node_leave; src/recovery/
 * README.md, "Graceful leave"): ask to be listed leaving, wait until the
 * successors' copies are complete, quiesce, say so, and wait for the
 * configuration without this machine.
 *
 * Runs on the caller's thread; the completion check runs on loop 0 (its
 * messages are the address space's), so loop 0 must be served meanwhile
 * by its own thread (the library's, or the application's other thread).
 * One call runs at a time on a machine (leave_claim): another made
 * meanwhile is refused -EALREADY.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "node/node.h"
#include "node/node_int.h"
#include "txn/txm.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

#define LEAVE_CHECK_MS 50u /* between two completion checks */

/* A completion check on loop 0, waited for by the leaver's thread. */
struct leave_wait {
	farm_node *n;
	uint64_t cfg;
	uint32_t members[FARM_VIEW_MAX];
	unsigned nm;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int refs; /* the waiter's and, while one is out, the check's */
	bool done;
	int status;
};

static void lw_unref(struct leave_wait *w)
{
	pthread_mutex_lock(&w->lock);
	bool last = --w->refs == 0;
	pthread_mutex_unlock(&w->lock);
	if (!last)
		return;
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

static void lw_answered(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct leave_wait *w = ctx;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	w->status = status;
	pthread_cond_broadcast(&w->cond); /* pairs with the wait in check */
	pthread_mutex_unlock(&w->lock);
	lw_unref(w);
}

static void lw_ask(farm_loop *loop, void *ctx, int status)
{
	struct leave_wait *w = ctx;
	int rc =
	        status ? status
	               : farm_as_leave_check(w->n->as, loop, w->cfg, w->members,
	                                     w->nm, lw_answered, w);
	if (rc)
		lw_answered(loop, w, rc);
}

/* Deadline arithmetic on CLOCK_MONOTONIC ns. */
static bool past(uint64_t deadline)
{
	return farm_now_ns() >= deadline;
}

/* Has farm_node_close begun? Then the leave gives up: the close waits for
 * the thread that runs it (the control socket's), and a leave can wait
 * minutes for a view that this closing machine no longer needs. */
static bool closing(farm_node *n)
{
	if (FARM_FAULT_SWITCH(FARM_FP_LEAVE_NO_CANCEL))
		return false; /* testing: the close waits the leave out */
	/* Pairs with the release store in farm_node_close. */
	return atomic_load_explicit(&n->closing, memory_order_acquire);
}

/* One completion check in view @v: 0 complete, -EAGAIN/-ESTALE not yet,
 * -ETIMEDOUT past @deadline, or an error. */
static int leave_check(farm_node *n, const struct farm_view *v,
                       uint64_t deadline)
{
	if (FARM_FAULT_SWITCH(FARM_FP_LEAVE_EARLY))
		return 0; /* testing: the handoff skipped */
	farm_loop *loop = farm_node_loop(n, 0);
	if (!loop)
		return -ENOTCONN;
	struct leave_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->n = n;
	w->cfg = v->config_id;
	for (unsigned i = 0; i < v->n && i < FARM_VIEW_MAX; i++)
		w->members[w->nm++] = v->members[i].id;
	w->refs = 2;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	int rc = farm_loop_post(loop, lw_ask, w);
	if (rc) {
		w->refs = 1;
		lw_unref(w);
		return rc;
	}
	/* The answer, waited for in slices of LEAVE_CHECK_MS: a close
	 * (which cannot signal this private condition) is seen within one.
	 * An answer that comes later finds only its own reference. */
	pthread_mutex_lock(&w->lock);
	while (!w->done && !past(deadline) && !closing(n)) {
		uint64_t until = farm_now_ns() + LEAVE_CHECK_MS * 1000000ull;
		if (until > deadline)
			until = deadline;
		struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
		                      .tv_nsec = (long)(until % 1000000000ull)};
		(void)pthread_cond_timedwait(&w->cond, &w->lock, &ts);
	}
	rc = w->done ? w->status : closing(n) ? -ECANCELED : -ETIMEDOUT;
	pthread_mutex_unlock(&w->lock);
	lw_unref(w);
	return rc;
}

/* Wait under n->lock until n->view is past @cfg, this machine left, the
 * node closes, or @wait_ns pass (or @deadline). */
static void wait_view(farm_node *n, uint64_t cfg, uint64_t wait_ns,
                      uint64_t deadline)
{
	uint64_t until = farm_now_ns() + wait_ns;
	if (until > deadline)
		until = deadline;
	struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
	                      .tv_nsec = (long)(until % 1000000000ull)};
	pthread_mutex_lock(&n->lock);
	/* closing() is read under n->lock, where farm_node_close broadcasts
	 * after setting it: the wake-up cannot fall between the check and
	 * the wait. */
	while (n->view.config_id <= cfg && !n->left_cfg && !n->removed &&
	       !closing(n) &&
	       pthread_cond_timedwait(&n->cond, &n->lock, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&n->lock);
}

/* This machine's view (a copy), and whether it left or was removed. */
static void view_now(farm_node *n, struct farm_view *v, bool *left,
                     bool *removed)
{
	pthread_mutex_lock(&n->lock);
	*v = n->view;
	*left = n->left_cfg != 0;
	*removed = n->removed;
	pthread_mutex_unlock(&n->lock);
}

/* Make this call the machine's one graceful leave (n->leave_running),
 * and read the configuration in which it last said its handoff done
 * (n->leave_said, kept under n->lock) into @said. 0, or -EALREADY while
 * another call runs: that one alone asks, quiesces, says R/left and
 * gives up. Two at once would each act on their own copy of leave_said
 * and of the quiesce: one that gives up before seeing the other's
 * R/left (said_set) lets commits in again under that mark, or undoes
 * the other's quiesce between its drain and its mark; both would check
 * and say the handoff. Refusing, rather than joining the first's wait,
 * keeps each caller's timeout its own and the first's outcome whole;
 * farm_node_left tells the second caller how it ended.
 *
 * n->lock orders the calls: this lock acquires what the previous
 * call's leave_release published when it unlocked (its leave_said and
 * quiesce), and nothing waits on the flag, so no wake-up can be lost. */
static int leave_claim(farm_node *n, uint64_t *said)
{
	bool unguarded = FARM_FAULT_SWITCH(FARM_FP_LEAVE_UNGUARDED);
	pthread_mutex_lock(&n->lock); /* pairs with leave_release's unlock */
	bool busy = n->leave_running && !unguarded;
	if (!busy) {
		n->leave_running = true;
		*said = n->leave_said;
	}
	pthread_mutex_unlock(&n->lock);
	if (busy)
		farm_err("node %" PRIu32 ": a graceful leave already runs on "
		         "this machine (another thread, or the control "
		         "socket's `leave`): this call is refused, that one "
		         "goes on",
		         n->cfg.machine_id);
	return busy ? -EALREADY : 0;
}

/* The call that leave_claim admitted ends: the next may run. */
static void leave_release(farm_node *n)
{
	pthread_mutex_lock(&n->lock);
	n->leave_running = false;
	pthread_mutex_unlock(&n->lock); /* pairs with leave_claim's lock */
}

static void said_set(farm_node *n, uint64_t cfg)
{
	pthread_mutex_lock(&n->lock);
	n->leave_said = cfg;
	pthread_mutex_unlock(&n->lock);
}

/* The leave gives up in configuration @cfg without having been let go.
 * Commits are let in again unless R/left was said in @cfg (@said): the
 * manager may act on that mark at any moment while @cfg is in force, and
 * lets the machine go without a lease wait on its promise that no commit
 * of its own is in flight or to come, so the quiesce stays on. A mark of
 * an older configuration (@said < @cfg: this machine saw a later one
 * that still lists it) is one the manager ignores (zk_next.c, left_now),
 * so it promises nothing any more. Whether the quiesce stays on. */
static bool leave_give_up(farm_node *n, uint64_t said, uint64_t cfg)
{
	if (said && said == cfg && !FARM_FAULT_SWITCH(FARM_FP_LEAVE_UNQUIESCE))
		return true;
	farm_txm_quiesce(n->txm, false);
	return false;
}

/* May this machine ask to leave in @v? 0, or why not (said once). */
static int leave_allowed(farm_node *n, const struct farm_view *v)
{
	uint32_t me = n->cfg.machine_id;
	if (!v->config_id)
		return -ENOENT;
	if (v->has_cm && v->cm == me) {
		farm_err("node %" PRIu32 ": the configuration manager cannot "
		         "leave gracefully (its role is not handed off): stop "
		         "it instead, or let another machine leave",
		         me);
		return -EPERM;
	}
	int rc = farm_view_may_leave(v, me, n->cfg.replicas);
	if (rc == -EBUSY)
		farm_err("node %" PRIu32 ": cannot leave gracefully: fewer "
		         "than %u machines would stay (configuration %" PRIu64
		         " has %u, %u leaving)",
		         me, n->cfg.replicas + 1, v->config_id, v->n,
		         v->nleaving);
	return rc;
}

/* Quiesce (no commit of ours in flight or to come), then say the handoff
 * is done in @v. 0, -ETIMEDOUT or -ECANCELED (commits still out at
 * @deadline or the close: the caller lets them in again, leave_give_up),
 * or the membership's error. */
static int leave_quiesced(farm_node *n, const struct farm_view *v,
                          uint64_t deadline)
{
	farm_txm_quiesce(n->txm, true);
	/* Commits end on the loops, which report no event this thread
	 * could wait on: the count is polled, briefly. */
	while (farm_txm_commits_out(n->txm) && !past(deadline) && !closing(n)) {
		struct timespec ts = {.tv_nsec = 1000000};
		nanosleep(&ts, NULL);
	}
	if (farm_txm_commits_out(n->txm))
		return closing(n) ? -ECANCELED : -ETIMEDOUT;
	FARM_FAULT_POINT(FARM_FP_LEAVE_QUIESCED);
	return farm_membership_left(n->mem, v->config_id);
}

/* One step of the leave in view @v: ask, check, or say it is done. 0 when
 * something was done that a new view answers; -EAGAIN to check again;
 * else an error that ends the leave. */
static int leave_step(farm_node *n, const struct farm_view *v,
                      uint64_t deadline, uint64_t *said)
{
	uint32_t me = n->cfg.machine_id;
	if (FARM_FAULT_SWITCH(FARM_FP_LEAVE_HOLD))
		return -EAGAIN; /* testing: the view that ends it never comes */
	if (!farm_ids_have(v->leaving, v->nleaving, me)) {
		int rc = leave_allowed(n, v);
		if (!rc)
			rc = farm_membership_leave(n->mem, v->config_id);
		return rc;
	}
	if (*said == v->config_id)
		return 0; /* told in this configuration: its successor ends it
		           */
	int rc = leave_check(n, v, deadline);
	if (rc)
		return rc == -ESTALE ? -EAGAIN : rc;
	rc = leave_quiesced(n, v, deadline);
	if (!rc) {
		*said = v->config_id;
		said_set(n, *said);
		farm_info("node %" PRIu32 ": every successor's copy is "
		          "complete and no commit of ours is in flight "
		          "(configuration %" PRIu64 "): asking to go",
		          me, v->config_id);
	}
	return rc;
}

/* The leave cut short by farm_node_close in configuration @cfg. Nothing
 * is half done: each step (the mark R/leave, the check, the quiesce and
 * the mark R/left) is whole before the flag is looked at again, so the
 * machine is in one of three states, each what a failure or a finished
 * handoff leaves:
 *   - not listed leaving (no mark written, or one the manager will
 *     ignore once this machine is gone): the close is a plain departure;
 *   - listed leaving, handoff not said in @cfg: a leaver that fails (src/
 *     recovery/README.md, "Graceful leave", 7): removed as a failure,
 *     with a lease wait; its successors' copies stay at the end of the
 *     lists;
 *   - R/left written in @cfg (@said, by this call or an earlier one):
 *     quiesced with no commit out, as the mark promises, so the manager
 *     may let it go without a lease wait. The quiesce stays on
 *     (leave_give_up): letting commits in now would break that promise
 *     while the close still runs the loops.
 * -ECANCELED. */
static int leave_cancelled(farm_node *n, uint64_t said, uint64_t cfg)
{
	bool quiesced = leave_give_up(n, said, cfg);
	farm_info("node %" PRIu32 ": graceful leave cut short by the close "
	          "(%s)",
	          n->cfg.machine_id,
	          quiesced ? "its handoff was complete"
	                   : "handoff not complete");
	return -ECANCELED;
}

/* Not let go by @deadline in configuration @cfg (leave_give_up: still
 * quiesced if R/left was said in @cfg). -ETIMEDOUT. */
static int leave_timed_out(farm_node *n, uint64_t said, uint64_t cfg)
{
	if (leave_give_up(n, said, cfg))
		farm_warn("node %" PRIu32 ": graceful leave timed out after "
		          "its handoff was said (configuration %" PRIu64 "): "
		          "commits stay refused, as R/left promises; ask to "
		          "leave again to wait for the configuration without "
		          "this machine, or close it",
		          n->cfg.machine_id, cfg);
	return -ETIMEDOUT;
}

/* The leave's steps until it ends (farm_node_leave, admitted by
 * leave_claim): @said as leave_claim read it. */
static int leave_run(farm_node *n, uint64_t deadline, uint64_t said)
{
	for (;;) {
		struct farm_view v;
		bool left, removed;
		view_now(n, &v, &left, &removed);
		if (left)
			return 0;
		if (removed)
			return FARM_ECLOSED; /* removed as a failure meanwhile
			                      */
		if (past(deadline))
			return leave_timed_out(n, said, v.config_id);
		if (closing(n))
			return leave_cancelled(n, said, v.config_id);
		int rc = leave_step(n, &v, deadline, &said);
		if (rc == -ECANCELED)
			return leave_cancelled(n, said, v.config_id);
		if (rc == -ETIMEDOUT)
			return leave_timed_out(n, said, v.config_id);
		if (rc && rc != -EAGAIN) {
			(void)leave_give_up(n, said, v.config_id);
			return rc;
		}
		/* A new view (listed leaving, or the one without us), or
		 * the next check. */
		wait_view(n, v.config_id,
		          rc ? LEAVE_CHECK_MS * 1000000ull : 1000000000ull,
		          deadline);
	}
}

int farm_node_leave(farm_node *n, int timeout_ms)
{
	if (!n || timeout_ms < 0)
		return -EINVAL;
	if (!n->mem || !n->cfg.zk[0])
		return -ENOTSUP; /* static members never change */
	uint64_t deadline = farm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	/* An earlier call that said R/left and timed out left the machine
	 * quiesced: while that configuration is in force, this call only
	 * waits for the one that lets the machine go (leave_step). */
	uint64_t said = 0;
	int rc = leave_claim(n, &said);
	if (rc)
		return rc;
	rc = leave_run(n, deadline, said);
	leave_release(n);
	return rc;
}

bool farm_node_left(farm_node *n)
{
	if (!n)
		return false;
	pthread_mutex_lock(&n->lock);
	bool left = n->left_cfg != 0;
	pthread_mutex_unlock(&n->lock);
	return left;
}
