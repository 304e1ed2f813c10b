/*
 * Applying a view the membership delivers (farm_node_apply_view, the
 * membership's on_view callback): one view at a time, in config-id order.
 *
 * A named state machine: each state does one step of the view and names
 * the next; the states run in this order, skipping as the arrows say.
 *
 *   SCREEN     a restart refused (restart_alone), a failed restart, or a
 *              view of the previous incarnation (farm_restart_view)
 *                -> DONE; else -> ADMIT
 *   ADMIT      not a member: the machine is refused when it left or the
 *              cluster restarted without it (told once)     -> CLASSIFY
 *   CLASSIFY   members only: who left, who joined late, who grew, a
 *              recovery round a member asked for (bump), this machine's
 *              primaries before the view                      -> FENCE
 *   FENCE      the machines that left are fenced (fabric, messages);
 *              messages are stamped with the view              -> PEERS
 *   PEERS      every member a messaging and log peer, from its card
 *                                                              -> PLACE
 *   PLACE      placement; the allocator gives up the primaries that
 *              growth moves; the address space takes the view -> LEASES
 *   LEASES     recovery's leases take the view
 *                -> RESTART; the address space refused it -> RECORD
 *   RESTART    the whole-cluster restart, when this view runs it
 *                -> DONE (failed: restart_failed); -> RECOVER when a
 *                machine left, joined late or grew, or a round was
 *                asked for; else -> RESTARTED
 *   RECOVER    transaction recovery (CM decides), then data recovery
 *                                                          -> RESTARTED
 *   RESTARTED  just restarted: data recovery tells every backup again
 *                                                             -> RECORD
 *   RECORD     the view recorded, the application told, growth told
 *                                                               -> DONE
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/galloc.h"
#include "node/node.h"
#include "node/node_int.h"
#include "node/rejoin.h"
#include "node/restart.h"
#include "recovery/recovery.h"
#include "txn/txm.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

/* The members of the view this machine applied last that @v drops. */
/* Is @id named by both @old and @v, with another incarnation in @v? A new
 * holder of it, and this machine missed the view that removed the old
 * holder (views are read from ZooKeeper, whose watches can skip one):
 * the old holder left as if dropped, the new one joined late. */
static bool reheld(const struct farm_view *old, const struct farm_view *v,
                   uint32_t id)
{
	const struct farm_member *a = farm_view_find(old, id);
	const struct farm_member *b = farm_view_find(v, id);
	return a && b && a->incarnation != b->incarnation;
}

static unsigned dropped(farm_node *n, const struct farm_view *v, uint32_t *out)
{
	unsigned k = 0;
	pthread_mutex_lock(&n->lock);
	if (n->view.config_id && n->view.config_id < v->config_id)
		for (unsigned i = 0; i < n->view.n; i++)
			if (!farm_view_find(v, n->view.members[i].id) ||
			    reheld(&n->view, v, n->view.members[i].id))
				out[k++] = n->view.members[i].id;
	pthread_mutex_unlock(&n->lock);
	return k;
}

/* Rejoin and growth: machines of @v that joined late since this machine's
 * last view (into @out; ring.h). They take no part in this view's
 * transaction-recovery barrier (they have no previous state); the others
 * run one so every commit of an older configuration ends before the new
 * backups copy (src/txn/copy.c). */
static unsigned joined_late(farm_node *n, const struct farm_view *v,
                            uint32_t *out)
{
	unsigned k = 0;
	pthread_mutex_lock(&n->lock);
	if (n->view.config_id && n->view.config_id < v->config_id)
		for (unsigned q = 0; q < v->nlate && q < FARM_VIEW_MAX; q++)
			if (farm_view_find(v, v->late[q]) &&
			    (!farm_view_find(&n->view, v->late[q]) ||
			     reheld(&n->view, v, v->late[q])))
				out[k++] = v->late[q];
	pthread_mutex_unlock(&n->lock);
	return k;
}

/* Growth: machines this machine's last view listed as late that @v lists
 * as ordinary members (ring.h: the grower, once its share was complete).
 * Their placement changed with everyone else's still there, so the
 * machines run the transaction-recovery barrier of a view that removed
 * nobody, every member taking part (the grower too: it was one). */
static unsigned grown(farm_node *n, const struct farm_view *v, uint32_t *out)
{
	unsigned k = 0;
	pthread_mutex_lock(&n->lock);
	if (n->view.config_id && n->view.config_id < v->config_id)
		for (unsigned q = 0; q < n->view.nlate && q < FARM_VIEW_MAX;
		     q++) {
			uint32_t id = n->view.late[q];
			if (farm_view_find(v, id) &&
			    farm_view_find(&n->view, id) &&
			    !farm_ids_have(v->late, v->nlate, id))
				out[k++] = id;
		}
	pthread_mutex_unlock(&n->lock);
	return k;
}

/* Graceful leave: does @v list a machine leaving that this machine's last
 * view did not? Its regions gained successors (ring.h), whose copies data
 * recovery makes, as after a join. */
static bool leaving_new(farm_node *n, const struct farm_view *v)
{
	bool yes = false;
	pthread_mutex_lock(&n->lock);
	for (unsigned q = 0; q < v->nleaving && q < FARM_VIEW_MAX; q++)
		yes |= !farm_ids_have(n->view.leaving, n->view.nleaving,
		                      v->leaving[q]);
	pthread_mutex_unlock(&n->lock);
	return yes;
}

/* Growth: the regions of which this machine holds the primary copy (for
 * farm_galloc_retire once a view moved them). */
static unsigned primaries(farm_node *n, struct farm_as_held **out)
{
	unsigned cap = 256, k;
	for (;;) {
		*out = malloc(cap * sizeof(**out));
		if (!*out)
			return 0;
		k = farm_as_held(n->as, *out, cap);
		if (k <= cap)
			break;
		free(*out);
		cap = k + 64;
	}
	unsigned j = 0;
	for (unsigned i = 0; i < k; i++)
		if ((*out)[i].role == FARM_AS_PRIMARY)
			(*out)[j++] = (*out)[i];
	return j;
}

/* The regions of @held (this machine's primaries) whose primary the
 * new rings @g make another machine: given up by the allocator
 * (farm_galloc_retire). Only growth does that to a machine that lives. */
static void retire_moved(farm_node *n, const farm_ring *g,
                         const struct farm_as_held *held, unsigned nheld)
{
	for (unsigned i = 0; g && i < nheld; i++) {
		if (farm_ring_primary(g, held[i].region) == n->cfg.machine_id)
			continue;
		int rc = farm_galloc_retire(n->ga, held[i].region);
		if (rc && rc != -ENOENT)
			farm_warn("node: allocator keeps region %" PRIu32
			          ": %s",
			          held[i].region, farm_strerror(rc));
	}
}

static bool in_ids(const uint32_t *ids, unsigned n, uint32_t id)
{
	for (unsigned i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Restarting on its directory while the others lived on without it: a
 * newer configuration than the manifest's lists it as gone and is not a
 * restart's (farm_view.restart). Its copies are out of date, and the
 * manager does not admit it (zk.c): refused, said once. */
static bool restart_alone(farm_node *n, const struct farm_view *v)
{
	uint32_t me = n->cfg.machine_id;
	if (!farm_restart_pending(n->rs) || !v->formed || v->restart ||
	    v->config_id <= farm_restart_config(n->rs) ||
	    farm_view_find(v, me) || !farm_ids_have(v->gone, v->ngone, me) ||
	    FARM_FAULT_SWITCH(FARM_FP_ZK_ADMIT_ALONE))
		return false;
	pthread_mutex_lock(&n->lock);
	bool tell = !n->refused;
	n->refused = true;
	pthread_cond_broadcast(&n->cond);
	pthread_mutex_unlock(&n->lock);
	if (tell)
		farm_err("node %" PRIu32 ": this machine restarted on its "
		         "data directory, but the cluster lived on without "
		         "it (configuration %" PRIu64 " lists it as gone): "
		         "its memory is out of date and it is not taken "
		         "back; start it under a new machine_id with an "
		         "empty directory",
		         me, v->config_id);
	return true;
}

enum av_state {
	AV_SCREEN,
	AV_ADMIT,
	AV_CLASSIFY,
	AV_FENCE,
	AV_PEERS,
	AV_PLACE,
	AV_LEASES,
	AV_RESTART,
	AV_RECOVER,
	AV_RESTARTED,
	AV_RECORD,
	AV_DONE
};

/* One view being applied: what the states hand each other. */
struct av {
	farm_node *n;
	const struct farm_view *v;
	bool member;     /* this machine is in the view */
	bool replaced;   /* the view names a later holder of this id */
	bool restarting; /* a whole-cluster restart not run yet (this view
	                    may run it) */
	uint32_t ids[FARM_VIEW_MAX]; /* the members (ids in range) */
	unsigned k;
	uint32_t gone[FARM_VIEW_MAX];
	unsigned ngone;
	uint32_t late[FARM_VIEW_MAX];
	unsigned nlate;
	uint32_t grew[FARM_VIEW_MAX];
	unsigned ngrew;
	bool bumped;
	/* Graceful leave: the view lists a machine leaving that this
	 * machine's last view did not (its successors' copies are made). */
	bool leaving_new;
	struct farm_as_held *was_primary;
	unsigned nwas;
	int rc; /* the address space's answer to the view */
	unsigned rlost;
};

/* Whether @v names this machine: its id, and the incarnation it took from
 * the first view that named it (farm_member.incarnation). A view that
 * names the id with another incarnation names a later holder of it: this
 * machine is that id's old holder, removed (*@replaced), whatever else it
 * still believes; it must never act as the member the view names. */
static bool self_member(farm_node *n, const struct farm_view *v, bool *replaced)
{
	const struct farm_member *me = farm_view_find(v, n->cfg.machine_id);
	*replaced = false;
	if (!me)
		return false;
	pthread_mutex_lock(&n->lock);
	if (!n->have_inc) {
		n->have_inc = true;
		n->self_inc = me->incarnation;
		farm_txm_set_incarnation(n->txm, n->self_inc);
	}
	*replaced = me->incarnation != n->self_inc;
	pthread_mutex_unlock(&n->lock);
	return !*replaced;
}

static enum av_state av_screen(struct av *a)
{
	farm_node *n = a->n;
	if (restart_alone(n, a->v))
		return AV_DONE;
	if (n->restart_failed || farm_restart_view(n->rs, a->v))
		return AV_DONE; /* the previous incarnation's view (restart.c)
		                 */
	a->member = self_member(n, a->v, &a->replaced);
	a->restarting = farm_restart_pending(n->rs);
	return AV_ADMIT;
}

/* A graceful leave's end (farm_node_leave): @v lists this machine left,
 * so it was let go, neither refused nor removed. Under n->lock; wakes
 * farm_node_leave's wait. */
static bool let_go(farm_node *n, const struct farm_view *v)
{
	if (!farm_ids_have(v->left, v->nleft, n->cfg.machine_id))
		return false;
	if (!n->left_cfg)
		farm_info("node %" PRIu32 ": left the cluster gracefully "
		          "(configuration %" PRIu64 " goes on without it)",
		          n->cfg.machine_id, v->config_id);
	n->left_cfg = v->config_id;
	n->refused = true; /* no view takes it back */
	pthread_cond_broadcast(&n->cond);
	return true;
}

static enum av_state av_admit(struct av *a)
{
	farm_node *n = a->n;
	const struct farm_view *v = a->v;
	if (a->member)
		return AV_CLASSIFY;
	/* Its id left the formed cluster: a fresh machine under it, or this
	 * one after it left (its session expired and it registered again),
	 * is not admitted (zk.c). */
	bool left = farm_ids_have(v->gone, v->ngone, n->cfg.machine_id);
	/* Or the others restarted without it (its directory did not come
	 * back in time): any memory it has is stale. */
	bool lost = farm_ids_have(v->lost, v->nlost, n->cfg.machine_id);
	/* A machine restarting on its directory is listed gone until it
	 * registers (the manager lists every previous member so): views it
	 * applies before then are not a refusal: a restarting machine whose
	 * old session delays its registration sees more than one such
	 * view. */
	pthread_mutex_lock(&n->lock);
	bool was = n->view.config_id != 0;
	bool fresh = !was && !a->restarting;
	/* With reuse_ids a fresh machine under a gone id waits for the
	 * manager to admit it as a new incarnation. */
	bool wait = !n->have_inc && !a->restarting && n->cfg.reuse_ids &&
	            !farm_restart_pending(n->rs);
	left = (left && !a->restarting && !wait && (fresh || was)) || lost ||
	       a->replaced;
	if (a->replaced)
		n->replaced_seen++;
	bool graceful = let_go(n, v);
	left = left && !graceful;
	bool tell = left && !n->refused;
	if (left) {
		n->refused = true;
		if (was) {
			n->removed = true;
			farm_txm_set_removed(n->txm);
		}
		pthread_cond_broadcast(&n->cond);
	}
	pthread_mutex_unlock(&n->lock);
	if (tell && a->replaced)
		farm_err("node %" PRIu32 ": configuration %" PRIu64 " names "
		         "a later holder of this machine's id (incarnation "
		         "%" PRIu32 ", this one %" PRIu32 "): this machine was "
		         "removed and acts no more",
		         n->cfg.machine_id, v->config_id,
		         farm_view_find(v, n->cfg.machine_id)->incarnation,
		         n->self_inc);
	else if (tell && lost)
		farm_err("node %" PRIu32 ": the cluster restarted "
		         "without this machine (configuration %" PRIu64
		         ": lost) and recovered its data from "
		         "replicas; it is not taken back: start it "
		         "under a new machine_id with an empty "
		         "directory",
		         n->cfg.machine_id, v->config_id);
	else if (tell && fresh)
		farm_err("node %" PRIu32 ": a machine with this id "
		         "left the cluster; this one has an empty "
		         "directory and is not admitted: start it with "
		         "a new machine_id (same-id rejoin is not "
		         "supported)",
		         n->cfg.machine_id);
	else if (tell)
		farm_err("node %" PRIu32 ": this machine left the "
		         "cluster (configuration %" PRIu64 "); it is not "
		         "taken back: restart it under a new machine_id "
		         "with an empty directory",
		         n->cfg.machine_id, v->config_id);
	return AV_CLASSIFY;
}

static enum av_state av_classify(struct av *a)
{
	farm_node *n = a->n;
	const struct farm_view *v = a->v;
	if (!a->member)
		return AV_FENCE;
	a->ngone = dropped(n, v, a->gone);
	a->nlate = joined_late(n, v, a->late);
	a->ngrew = grown(n, v, a->grew);
	/* A round a member asked for (farm_view.bump) that this machine
	 * has not run yet; not at its first view (a joiner, a restart: the
	 * mark is carried on from configuration to configuration, and the
	 * others ran that round long ago). */
	a->bumped = n->view.config_id && v->bump && v->bump != n->view.bump;
	a->leaving_new = leaving_new(n, v);
	/* Views other than growth's never take a primary copy from a
	 * machine that lives (addrspace.h), but the allocator is told of
	 * whatever the address space gave up, whichever view did it. */
	a->nwas = primaries(n, &a->was_primary);
	return AV_FENCE;
}

static enum av_state av_fence(struct av *a)
{
	farm_node *n = a->n;
	/* Fence the machines that left before anything moves: from here on
	 * their one-sided requests to this machine fail (a zombie that
	 * resumes writes nothing). */
	for (unsigned i = 0; i < a->ngone; i++) {
		if (FARM_FAULT_SWITCH(FARM_FP_NODE_NO_FENCE))
			break; /* testing: a zombie is not fenced */
		int frc = farm_fabric_revoke(n->fab, a->gone[i]);
		if (frc && frc != -ENOTSUP)
			farm_warn("node: cannot fence machine %" PRIu32 ": %s",
			          a->gone[i], farm_strerror(frc));
	}
	/* Its messages too, whatever it stamps on them (the only fence on
	 * providers that cannot revoke), and ours to it stop. */
	for (unsigned i = 0; i < a->ngone; i++) {
		if (FARM_FAULT_SWITCH(FARM_FP_NODE_NO_FENCE))
			break;
		if (a->gone[i] < n->max_machines &&
		    !farm_msg_peer_min_config(n->msg, a->gone[i], UINT32_MAX))
			n->msg_removed[a->gone[i]] = true;
	}
	if (a->member && farm_msg_set_config(n->msg, (uint32_t)a->v->config_id))
		farm_warn("node: messages not stamped with view %" PRIu64,
		          a->v->config_id);
	return AV_PEERS;
}

struct forget {
	farm_node *n;
	uint32_t id;
	int rc;
};

static void forget_on_loop(farm_loop *loop, void *ctx, int status)
{
	struct forget *f = ctx;
	if (status)
		return;
	int rc = farm_loop_forget_peer(loop, f->id);
	if (!rc)
		rc = farm_txm_forget_peer(f->n->txm, loop, f->id);
	if (rc && !f->rc)
		f->rc = rc;
}

/* Machine @id, known here, has a new holder (a reused id, admitted by the
 * configuration @from; its card gave @addr, @d, @ld). Messaging and the
 * logs reach the new holder and every loop starts its channels and logs
 * with @id afresh, on its own thread; only then are its frames let in
 * (the fence at @from) and its memory at the fabric (its old holder stays
 * fenced). The other order let a first request of the new holder in
 * before a loop forgot the old holder: where the old holder had sent
 * nothing (the ring read from its start) the request was delivered and
 * answered on the old holder's channel, and the answer was lost. On
 * shm and udp the new holder writes nothing here before the admission
 * (await_admitted: its requests fail FARM_EFENCED until then); elsewhere
 * (no admission) a frame it wrote before is refused (the fence) and
 * zeroed with the ring. */
static int replace_holder(farm_node *n, uint32_t id, uint32_t inc,
                          uint32_t from, const char *addr,
                          const farm_mr_desc *d, const farm_mr_desc *ld)
{
	FARM_FAULT_POINT(FARM_FP_NODE_REPLACE);
	int rc = farm_msg_replace_peer(n->msg, id, addr, d);
	if (!rc)
		rc = farm_txm_replace_peer(n->txm, id, inc, ld);
	struct forget f = {.n = n, .id = id};
	for (unsigned i = 0; !rc && i < n->nthreads; i++)
		rc = farm_node_run(n, i, forget_on_loop, &f);
	if (!rc)
		rc = f.rc;
	if (rc)
		return rc; /* its frames stay refused */
	if (!farm_msg_peer_min_config(n->msg, id, from))
		n->msg_removed[id] = false;
	rc = farm_fabric_admit(n->fab, id, addr);
	if (rc && rc != -ENOTSUP)
		return rc;
	if (rc == -ENOTSUP)
		farm_warn("node: the fabric cannot fence machine %" PRIu32
		          "'s old holder off this machine's memory",
		          id);
	farm_info("node: machine %" PRIu32 " is a new holder of its id; its "
	          "channels and logs start afresh",
	          id);
	return 0;
}

/* Member @m (not this machine) a messaging and log peer, from its card. */
static void add_peer(farm_node *n, const struct farm_view *v,
                     const struct farm_member *m)
{
	/* A new holder of the id (farm_member.incarnation): frames stamped
	 * with a configuration before the one that admitted it are its old
	 * holder's, a zombie's, and are refused. A machine that came back
	 * otherwise (a re-registration): from this view on. A new holder's
	 * frames are refused altogether until every loop has forgotten the
	 * old holder (replace_holder lowers the fence); one not reached is
	 * taken for new again at the next view. */
	bool holder = m->incarnation != n->peer_inc[m->id];
	uint32_t from = holder ? m->incarnation : (uint32_t)v->config_id;
	uint32_t now = holder ? UINT32_MAX : from;
	if ((n->msg_removed[m->id] || holder) &&
	    !farm_msg_peer_min_config(n->msg, m->id, now))
		n->msg_removed[m->id] = holder;
	char card[FARM_ENDPOINT_MAX], addr[FARM_ENDPOINT_MAX];
	farm_mr_desc d, ld;
	int rc = farm_node_card_parse(m->endpoint, addr, sizeof(addr), &d, &ld);
	if (rc == -ENOENT) { /* static: the card is in its directory */
		rc = farm_node_card_read(m->endpoint, n->start_timeout_ms, card,
		                         sizeof(card));
		if (!rc)
			rc = farm_node_card_parse(card, addr, sizeof(addr), &d,
			                          &ld);
	}
	if (!rc) {
		d.machine = m->id;
		ld.machine = m->id;
		rc = farm_msg_add_peer(n->msg, m->id, addr, &d);
		if (!rc)
			rc = farm_txm_add_peer(n->txm, m->id, m->incarnation,
			                       &ld);
		if (rc == -EEXIST && holder && m->incarnation)
			rc = replace_holder(n, m->id, m->incarnation, from,
			                    addr, &d, &ld);
		else if (!rc && holder &&
		         !farm_msg_peer_min_config(n->msg, m->id, from))
			n->msg_removed[m->id] = false; /* nothing to forget */
	}
	if (!rc || !holder)
		n->peer_inc[m->id] = m->incarnation;
	if (rc == -EEXIST)
		farm_warn("node: machine %" PRIu32 " (incarnation %" PRIu32
		          ") came back with new message rings; messages to "
		          "it fail until this machine restarts (replacing a "
		          "peer's rings is not yet supported)",
		          m->id, m->incarnation);
	else if (rc)
		farm_warn("node: cannot reach machine %" PRIu32 ": %s", m->id,
		          farm_strerror(rc));
}

/* A new holder of a reused id, at its first view as a member: the others
 * let it in at their fabric only once they apply that view
 * (farm_fabric_admit), and until then its one-sided requests fail as its
 * old holder's do (FARM_EFENCED), which would fail the channels its
 * layers are about to open. So it READs every member's message header
 * until each answers (or @FENCE_WAIT_NS pass; logged), once its leases
 * took the view and before recovery or the application act on it. */
#define FENCE_WAIT_NS (10ull * 1000000000ull)
static void await_admitted(farm_node *n, const struct av *a)
{
	uint32_t ids[FARM_VIEW_MAX];
	bool ok[FARM_VIEW_MAX];
	unsigned k = 0;
	for (unsigned i = 0; i < a->k; i++)
		if (a->ids[i] != n->cfg.machine_id)
			ids[k++] = a->ids[i];
	uint64_t t0 = farm_now_ns();
	while (k) {
		int got = farm_msg_probe(n->msg, ids, k, 200000000ull, ok);
		if (got == (int)k)
			return;
		if (farm_now_ns() - t0 > FENCE_WAIT_NS) {
			farm_warn("node %" PRIu32 ": %d of %u members let "
			          "this machine (a new holder of its id) in "
			          "within %llu s",
			          n->cfg.machine_id, got < 0 ? 0 : got, k,
			          FENCE_WAIT_NS / 1000000000ull);
			return;
		}
		struct timespec ts = {.tv_nsec = 5000000};
		nanosleep(&ts, NULL);
	}
}

static enum av_state av_peers(struct av *a)
{
	farm_node *n = a->n;
	const struct farm_view *v = a->v;
	for (unsigned i = 0; i < v->n; i++) {
		const struct farm_member *m = &v->members[i];
		if (m->id >= n->max_machines) {
			farm_warn("node: member %" PRIu32
			          " ignored: ids are below %" PRIu32
			          " (max_machines)",
			          m->id, n->max_machines);
			continue;
		}
		a->ids[a->k++] = m->id;
		if (m->id != n->cfg.machine_id)
			add_peer(n, v, m);
	}
	/* The CM: the machines this view adds are peers now. */
	farm_node_newconfig_joiners(n, v->config_id);
	return AV_PLACE;
}

static enum av_state av_place(struct av *a)
{
	farm_node *n = a->n;
	const struct farm_view *v = a->v;
	/* Placement with the failure domains and departed machines the
	 * configuration lists (addrspace/ring.h). */
	struct farm_ring_machine placed[2 * FARM_VIEW_MAX];
	unsigned np = farm_view_placement(v, a->ids, a->k, placed);
	/* The view's rings, made once for the allocator and the address
	 * space (an error: the address space refuses the view). */
	farm_ring *g = NULL;
	int prc =
	        a->member || a->nwas ? farm_as_place(n->as, placed, np, &g) : 0;
	/* The regions the manager placed itself (ring.h, pins): part of
	 * the placement, so before anything reads it. */
	if (!prc && g && (prc = farm_ring_set_pins(g, v->pins, v->npins))) {
		farm_ring_free(g);
		g = NULL;
	}
	/* Growth moves some of our primaries to the grower: the allocator
	 * gives them up before the address space takes the view (the
	 * grower's allocator takes them over by scan, recover.c), so no
	 * allocation made here in the view can take a slot of one. */
	retire_moved(n, g, a->was_primary, a->nwas);
	free(a->was_primary);
	a->was_primary = NULL;
	/* A view without this machine (one formed before it joined) has no
	 * ring for it to take: its peers are known, nothing else moves. */
	a->rc = a->member ? prc : 0;
	if (!a->member)
		farm_ring_free(g);
	else if (!prc)
		a->rc = farm_as_set_view_ring(n->as, v->config_id, placed, np,
		                              g);
	if (a->rc && a->rc != -ESTALE)
		farm_warn("node: view %" PRIu64 " not applied: %s",
		          v->config_id, farm_strerror(a->rc));
	return AV_LEASES;
}

static enum av_state av_leases(struct av *a)
{
	farm_node *n = a->n;
	const struct farm_view *v = a->v;
	if (n->rec) {
		/* The caller's own: machines in one process apply views on
		 * threads of their own, at once. */
		char(*leases)[FARM_LEASE_ADDR_MAX] =
		        calloc(v->n ? v->n : 1, sizeof(*leases));
		for (unsigned i = 0; leases && i < v->n; i++)
			if (farm_node_card_lease(v->members[i].endpoint,
			                         leases[i], sizeof(leases[i])))
				leases[i][0] = 0;
		int lrc = leases ? farm_recovery_view(n->rec, v, leases)
		                 : -ENOMEM;
		free(leases);
		if (lrc && lrc != -ESTALE)
			farm_warn("node: leases of view %" PRIu64 ": %s",
			          v->config_id, farm_strerror(lrc));
	}
	/* After the leases took the view, as a restart: the wait can
	 * outlast the join grace (a new holder of id 0 is the CM, whose
	 * members' leases lapsed while it waited before them), and before
	 * recovery and the application open channels. */
	pthread_mutex_lock(&n->lock);
	bool first = a->member && n->self_inc &&
	             !farm_view_find(&n->view, n->cfg.machine_id);
	pthread_mutex_unlock(&n->lock);
	if (first)
		await_admitted(n, a);
	return a->rc ? AV_RECORD : AV_RESTART;
}

/* The restart at normal priority. Views are applied on the membership's
 * real-time threads (so that a view never waits behind busy loops), but
 * a restart walks every object of every copy: seconds of CPU at 1 GiB
 * per machine and 3 replicas. At SCHED_FIFO that held the cores away
 * from everything at its level or below on the host: the other
 * machines' ZooKeeper threads (FIFO too, never preempting an equal) and
 * the ZooKeeper server, so a machine whose view came late never started
 * renewing its lease, and the CM, which had taken the view and started
 * judging it, removed it (restart_bench --replicas 3 with 500 ms leases
 * on two cores). The lease thread stays above both. The policy comes
 * back afterwards. */
static int run_restart(farm_node *n, const struct farm_view *v)
{
	int policy = SCHED_OTHER;
	struct sched_param sp = {0};
	bool lowered = farm_restart_pending(n->rs) &&
	               !FARM_FAULT_SWITCH(FARM_FP_RESTART_REALTIME) &&
	               !pthread_getschedparam(pthread_self(), &policy, &sp) &&
	               policy != SCHED_OTHER && !farm_thread_set_normal();
	/* Leases are not judged while the restart runs: nothing commits
	 * before its barrier, and the members may each run it in another
	 * configuration (their first with every member restarted, judged
	 * at different times), each frozen there until it is done. */
	bool hold = farm_restart_pending(n->rs) &&
	            !FARM_FAULT_SWITCH(FARM_FP_RESTART_LEASES_JUDGED);
	if (hold)
		farm_recovery_hold_leases(n->rec, true);
	int rc = farm_restart_run(n->rs, v);
	if (hold)
		farm_recovery_hold_leases(n->rec, false);
	if (lowered)
		(void)pthread_setschedparam(pthread_self(), policy, &sp);
	return rc;
}

static enum av_state av_restart(struct av *a)
{
	farm_node *n = a->n;
	/* Whole-cluster restart: the first view with every previous member
	 * brings the previous incarnation's memory back before the view is
	 * recorded (restart.c). After the leases took the view: a restart
	 * can outlast the join grace, and leases renew on their own thread
	 * meanwhile (before them, the CM suspected machines still
	 * restarting and removed them). */
	if (run_restart(n, a->v)) {
		pthread_mutex_lock(&n->lock);
		n->restart_failed = true;
		pthread_cond_broadcast(&n->cond);
		pthread_mutex_unlock(&n->lock);
		return AV_DONE;
	}
	farm_restart_applied(n->rs, a->v);
	farm_node_restart_unmark(n);
	/* After the leases took the configuration (no lease is granted
	 * outside it any more). */
	return a->ngone || a->nlate || a->ngrew || a->bumped || a->leaving_new
	               ? AV_RECOVER
	               : AV_RESTARTED;
}

static enum av_state av_recover(struct av *a)
{
	farm_node *n = a->n;
	const struct farm_view *v = a->v;
	/* Recover the transactions and regions the lost machines took part
	 * in (src/txn/recover.c); the configuration's CM decides for their
	 * coordinators. Late joiners only: the same round with nothing
	 * removed, among the machines that were here before
	 * (joined_late). */
	uint32_t decider = v->has_cm ? v->cm : a->ids[0];
	uint32_t olds[FARM_VIEW_MAX];
	unsigned nolds = 0;
	for (unsigned i = 0; i < a->k; i++)
		if (!in_ids(a->late, a->nlate, a->ids[i]))
			olds[nolds++] = a->ids[i];
	if (nolds && in_ids(a->late, a->nlate, decider))
		decider = olds[0]; /* a late CM takes no part */
	/* FaRM's lease wait before NEW-CONFIG-COMMIT, by the CM; not for
	 * a machine that left gracefully (farm_view.left): it quiesced
	 * before it asked to go, so nothing of its own is in flight or
	 * starts, and it is no failure. */
	uint32_t failed[FARM_VIEW_MAX];
	unsigned nfailed = 0;
	for (unsigned i = 0; i < a->ngone; i++)
		if (!farm_ids_have(v->left, v->nleft, a->gone[i]))
			failed[nfailed++] = a->gone[i];
	if (nfailed && decider == n->cfg.machine_id)
		farm_recovery_lease_wait(n->rec, failed, nfailed);
	int trc = farm_txm_reconfigure(n->txm, v->config_id, a->gone, a->ngone,
	                               olds, nolds, decider);
	if (trc == -ENOENT) /* loops closed: this machine stops */
		farm_info("node: view %" PRIu64 " while closing: no "
		          "transaction recovery",
		          v->config_id);
	else if (trc)
		farm_err("node: transaction recovery for view %" PRIu64
		         " not started: %s",
		         v->config_id, farm_strerror(trc));
	/* Then the regions that lost a replica get a new one, copied in the
	 * background (data recovery, src/txn/copy.c). */
	farm_txm_datarec_view(n->txm);
	return AV_RESTARTED;
}

static enum av_state av_restarted(struct av *a)
{
	farm_node *n = a->n;
	if (!a->restarting || farm_restart_pending(n->rs))
		return AV_RECORD;
	/* Restarted: data recovery tells every backup again. With machines
	 * given up, their regions' replicas are short and new ones are
	 * made; without, a copy the restart cut off (a filling copy is not
	 * in the manifest, so the backup came back without it) must start
	 * again: nothing else would tell that backup (a commit's records
	 * are not applied where the copy is not held, and open none). */
	struct farm_restart_stats rst;
	farm_restart_stats(n->rs, &rst);
	a->rlost = (unsigned)rst.lost;
	if (!a->ngone && !a->nlate &&
	    (a->rlost || !FARM_FAULT_SWITCH(FARM_FP_NODE_RESTART_NO_COPY)))
		farm_txm_datarec_view(n->txm);
	return AV_RECORD;
}

static enum av_state av_record(struct av *a)
{
	farm_node *n = a->n;
	const struct farm_view *v = a->v;
	pthread_mutex_lock(&n->lock);
	if (a->rlost)
		n->restart_lost = a->rlost;
	if (!a->rc) {
		n->view = *v;
		n->view_t_ns = farm_now_ns();
	}
	if (a->member)
		n->lease_lost = false;
	farm_node_config_fn fn = n->on_config;
	void *fn_ctx = n->on_config_ctx;
	pthread_cond_broadcast(&n->cond);
	pthread_mutex_unlock(&n->lock);
	/* Also for a configuration without this machine, which the address
	 * space refuses: the application must learn it was removed. */
	if (fn && (!a->rc || !a->member))
		fn(fn_ctx, v->config_id, v->n, a->member);
	if (!a->rc && a->member)
		farm_node_grow_view(n, v);
	/* Growth over (an ordinary member): the old copies of regions this
	 * machine did not get back are let go (rejoin.c). */
	if (!a->rc && a->member && n->rj &&
	    !farm_ids_have(v->late, v->nlate, n->cfg.machine_id))
		farm_rejoin_grown(n->rj, n->txm);
	farm_info("node %" PRIu32 ": view %" PRIu64 " with %u machines",
	          n->cfg.machine_id, v->config_id, v->n);
	return AV_DONE;
}

static enum av_state (*const av_steps[AV_DONE])(struct av *) = {
        [AV_SCREEN] = av_screen,     [AV_ADMIT] = av_admit,
        [AV_CLASSIFY] = av_classify, [AV_FENCE] = av_fence,
        [AV_PEERS] = av_peers,       [AV_PLACE] = av_place,
        [AV_LEASES] = av_leases,     [AV_RESTART] = av_restart,
        [AV_RECOVER] = av_recover,   [AV_RESTARTED] = av_restarted,
        [AV_RECORD] = av_record,
};

void farm_node_apply_view(void *ctx, const struct farm_view *v)
{
	struct av a = {.n = ctx, .v = v};
	for (enum av_state s = AV_SCREEN; s != AV_DONE;)
		s = av_steps[s](&a);
	free(a.was_primary); /* NULL unless a state left early */
}
