/*
 * Waiting for the members (farm_node_wait_members), and at a whole-cluster
 * restart giving up the previous members that do not come back: at once
 * for one that refused its damaged directory and left a refusal notice,
 * after restart_wait_ms for one that is missing (src/node/restart.c,
 * docs/config.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "node/node_int.h"
#include "node/restart.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

/* While a whole-cluster restart waits for its members: how often to look
 * for a missing one's refusal notice (farm_membership_refused). */
#define NOTICE_POLL_NS 200000000ull

/* Under n->lock: ask the membership, with the lock let go, to list @ids
 * lost (farm_membership_forsake). */
static void forsake_unlocked(farm_node *n, const uint32_t *ids, unsigned k)
{
	pthread_mutex_unlock(&n->lock);
	int rc = farm_membership_forsake(n->mem, ids, k);
	pthread_mutex_lock(&n->lock);
	if (rc)
		farm_err("node %" PRIu32 ": cannot give up machine %" PRIu32
		         "%s: %s",
		         n->cfg.machine_id, ids[0], k > 1 ? " and others" : "",
		         farm_strerror(rc));
}

/* Under n->lock, while a restart is pending and the view has not changed
 * for restart_wait_ms: ask the membership to give up the previous members
 * still missing, so the others restart without them (restart.c). Once;
 * when too many are missing, again after another restart_wait_ms. */
static void forsake_missing(farm_node *n)
{
	uint32_t miss[FARM_VIEW_MAX];
	unsigned most;
	unsigned k = farm_restart_missing(n->rs, &n->view, miss, &most);
	n->view_t_ns = farm_now_ns(); /* the next try, if any */
	if (!k)
		return;
	if (k > most) {
		farm_err("node %" PRIu32 ": %u previous members have not "
		         "restarted after %" PRIu32 " ms (machine %" PRIu32
		         " first); the replicas allow restarting without at "
		         "most %u: waiting for them",
		         n->cfg.machine_id, k, n->cfg.restart_wait_ms, miss[0],
		         most);
		return;
	}
	n->forsook = true;
	for (unsigned i = 0; i < k; i++)
		farm_warn("node %" PRIu32 ": machine %" PRIu32 " has not "
		          "restarted after %" PRIu32 " ms: giving it up (its "
		          "data is recovered from replicas)",
		          n->cfg.machine_id, miss[i], n->cfg.restart_wait_ms);
	forsake_unlocked(n, miss, k);
}

/* farm_node_open refused this machine's directory (@rc, @why): with
 * ZooKeeper, tell the cluster (farm_zk_note_refused), so that a
 * whole-cluster restart gives this machine up at once rather than wait for
 * it. Only for damage (FARM_ECORRUPT): another machine's or cluster's
 * directory (-EXDEV) is a mistake to mend, not a loss. */
void farm_node_note_refused(const struct farm_config *cfg, int rc,
                            const char *why)
{
	if (rc != FARM_ECORRUPT || !cfg->zk[0] ||
	    FARM_FAULT_SWITCH(FARM_FP_RESTART_NO_NOTICE))
		return;
	int nrc = farm_zk_note_refused(cfg->zk,
	                               cfg->zk_root[0] ? cfg->zk_root : NULL,
	                               cfg->machine_id, why);
	if (nrc)
		farm_err("node %" PRIu32 ": cannot leave a refusal notice in "
		         "ZooKeeper (%s): the others wait for this machine "
		         "(restart_wait_ms)",
		         cfg->machine_id, farm_strerror(nrc));
	else
		farm_warn("node %" PRIu32 ": refusal notice left: a "
		          "whole-cluster restart goes on without this machine",
		          cfg->machine_id);
}

void farm_node_clear_notice(const struct farm_config *cfg)
{
	if (!cfg->zk[0])
		return;
	int rc = farm_zk_clear_refused(cfg->zk,
	                               cfg->zk_root[0] ? cfg->zk_root : NULL,
	                               cfg->machine_id);
	if (rc)
		farm_warn("node %" PRIu32 ": cannot delete its old refusal "
		          "notice (%s): the others may give it up",
		          cfg->machine_id, farm_strerror(rc));
}

/* Under n->lock, while a restart is pending: give up at once the previous
 * members still missing that left a refusal notice (@ref[0..nref): their
 * directories are damaged, farm_node_note_refused), as if they had failed,
 * rather than wait restart_wait_ms (or for ever) for them. */
static void forsake_refused(farm_node *n, const uint32_t *ref, unsigned nref)
{
	uint32_t miss[FARM_VIEW_MAX], give[FARM_VIEW_MAX];
	unsigned most, g = 0;
	unsigned k = farm_restart_missing(n->rs, &n->view, miss, &most);
	for (unsigned i = 0; i < k; i++)
		if (farm_ids_have(ref, nref, miss[i]) &&
		    !farm_ids_have(n->refused_gone, n->nrefused_gone, miss[i]))
			give[g++] = miss[i];
	if (!g)
		return;
	if (n->nrefused_gone + g > most) {
		/* Said once per count; looked at again at every poll (a
		 * notice goes when its machine comes back). */
		if (n->refused_over != n->nrefused_gone + g)
			farm_err("node %" PRIu32 ": %u previous members "
			         "refused their directories (machine %" PRIu32
			         " first); the replicas allow restarting "
			         "without at most %u: waiting for them",
			         n->cfg.machine_id, n->nrefused_gone + g,
			         give[0], most);
		n->refused_over = n->nrefused_gone + g;
		return;
	}
	for (unsigned i = 0; i < g; i++) {
		farm_warn("node %" PRIu32 ": machine %" PRIu32 " refused its "
		          "directory at the restart: giving it up (its data "
		          "is recovered from replicas)",
		          n->cfg.machine_id, give[i]);
		n->refused_gone[n->nrefused_gone++] = give[i];
	}
	forsake_unlocked(n, give, g);
}

/* Under n->lock: does farm_node_wait_members(@count) return? The view
 * has @count members; or @count less the machines a restart gave up; or
 * this machine joined the formed cluster late (the cluster had its
 * machines before it came: it waits only to be a member). Not while a
 * whole-cluster restart is pending: a late machine that restarts on its
 * directory waits for the restart like the others (the fault campaign's
 * restart found it returning first). */
static bool members_enough(const farm_node *n, unsigned count)
{
	const struct farm_view *v = &n->view;
	uint32_t me = n->cfg.machine_id;
	return v->n == count ||
	       (n->restart_lost && v->n + n->restart_lost == count) ||
	       (v->formed && farm_ids_have(v->late, v->nlate, me) &&
	        farm_view_find(v, me) && !farm_restart_pending(n->rs));
}

static void ts_of(uint64_t realtime_ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(realtime_ns / 1000000000ull);
	ts->tv_nsec = (long)(realtime_ns % 1000000000ull);
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Nothing more to wait for: enough members, or a restart that cannot
 * finish. Under n->lock. */
static bool members_settled(const farm_node *n, unsigned count)
{
	return members_enough(n, count) || n->restart_failed || n->refused;
}

/* Read the refusal notices (without our lock: the membership takes its
 * own) and give up the machines that refused. Under n->lock, which is let
 * go meanwhile. */
static void members_read_refusals(farm_node *n)
{
	uint32_t ref[FARM_VIEW_MAX];
	pthread_mutex_unlock(&n->lock);
	unsigned nref = farm_membership_refused(n->mem, ref);
	pthread_mutex_lock(&n->lock);
	if (nref)
		forsake_refused(n, ref, nref);
}

/* While a restart is pending, when to wake before the caller's deadline
 * @dl (realtime ns; @timeout_ms < 0: none): the give-up time (@watch), and
 * a refusal notice changes no view, so look for one again in a while.
 * True with *@t set when that comes first. */
static bool members_own_wake(const farm_node *n, bool watch, uint64_t wait_ns,
                             uint64_t now, uint64_t dl, int timeout_ms,
                             struct timespec *t)
{
	uint64_t after = NOTICE_POLL_NS;
	if (watch && n->view_t_ns + wait_ns - now < after)
		after = n->view_t_ns + wait_ns - now;
	uint64_t g = realtime_ns() + after;
	if (timeout_ms >= 0 && g >= dl)
		return false;
	ts_of(g, t);
	return true;
}

int farm_node_wait_members(farm_node *n, unsigned count, int timeout_ms)
{
	if (!n)
		return -EINVAL;
	struct timespec ts;
	uint64_t dl = realtime_ns() +
	              (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
	ts_of(dl, &ts);
	uint64_t wait_ns = (uint64_t)n->cfg.restart_wait_ms * 1000000ull;
	int rc = 0;
	pthread_mutex_lock(&n->lock);
	/* After a restart without machines given up, the view is short of
	 * @count by them; a machine that joined the formed cluster late
	 * waits only to be a member. */
	while (!members_settled(n, count) && rc == 0) {
		/* Whole-cluster restart: while this machine is in the view
		 * and the view has not changed for restart_wait_ms, give up
		 * the previous members still missing. */
		bool pending = n->mem && farm_restart_pending(n->rs) &&
		               farm_view_find(&n->view, n->cfg.machine_id);
		bool watch = pending && wait_ns && !n->forsook;
		if (pending) {
			members_read_refusals(n);
			/* The lock was let go: what came meanwhile. */
			if (members_settled(n, count))
				break;
		}
		uint64_t now = farm_now_ns();
		if (watch && now >= n->view_t_ns + wait_ns) {
			forsake_missing(n);
			continue;
		}
		struct timespec t = ts;
		bool mine = pending && /* waiting for our own time */
		            members_own_wake(n, watch, wait_ns, now, dl,
		                             timeout_ms, &t);
		rc = timeout_ms < 0 && !mine
		             ? pthread_cond_wait(&n->cond, &n->lock)
		             : pthread_cond_timedwait(&n->cond, &n->lock, &t);
		if (rc == ETIMEDOUT && mine)
			rc = 0; /* our time, not the caller's */
	}
	bool ok = members_enough(n, count);
	bool refused = n->refused;
	pthread_mutex_unlock(&n->lock);
	return ok ? 0 : refused ? -EEXIST : -ETIMEDOUT;
}
