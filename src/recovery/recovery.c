/*
 * The failure detector and reconfiguration trigger (recovery.h).
 *
 * Threads: the lease thread reports suspicions (on_suspect) and this
 * module's recovery thread, which sleeps on a condition variable, takes
 * them, probes and asks the membership. Views arrive on the membership's
 * worker thread. Everything shared is under r->mu; the probe runs without
 * it (it waits up to two lease lengths).
 */
#include "recovery/recovery.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

_Static_assert(FARM_LEASE_MAX_PEERS >= FARM_VIEW_MAX,
               "the CM leases every member of a view");

struct farm_recovery {
	struct farm_recovery_attr a;
	farm_lease *lease;
	struct farm_membership *mem;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, joined;
	/* The configuration in force, with each member's lease address. */
	struct farm_view view;
	struct farm_lease_peer peers[FARM_VIEW_MAX];
	unsigned npeers;
	bool have_view;
	bool removed_reported;
	bool ever_member; /* some view named this machine (under mu) */
	/* Suspicions not yet probed. */
	uint32_t pending[FARM_VIEW_MAX];
	unsigned npending;
	/* Machines the fabric saw die (kept until a view leaves them out):
	 * not probed, counted as not answering. */
	uint32_t dead[FARM_VIEW_MAX];
	unsigned ndead;
	/* Of the machines the last view left out, those the fabric had seen
	 * die (exact_deaths only): farm_recovery_all_dead. */
	uint32_t gone_dead[FARM_VIEW_MAX];
	unsigned ngone_dead;
	struct farm_recovery_stats st;
};

static bool in_list(const uint32_t *ids, unsigned n, uint32_t id)
{
	for (unsigned i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Under r->mu: remember a step (the ring keeps the last ones). */
static void step(farm_recovery *r, uint32_t kind, uint32_t machine, uint32_t n,
                 uint64_t config_id, uint64_t t)
{
	struct farm_recovery_stats *st = &r->st;
	st->steps[st->steps_total % FARM_RECOVERY_STEPS] =
	        (struct farm_recovery_step){.t_ns = t,
	                                    .config_id = config_id,
	                                    .machine = machine,
	                                    .n = n,
	                                    .kind = kind};
	st->steps_total++;
}

/* Under r->mu: whether this machine may judge the view in force. One
 * the view leaves out (removed, let go, not yet admitted) is no member of
 * it: its suspicions would probe a configuration it is not in, and the
 * members judge each other without it. */
static bool judges(farm_recovery *r)
{
	return r->have_view && (farm_view_find(&r->view, r->a.self_id) ||
	                        FARM_FAULT_SWITCH(FARM_FP_REMOVED_LOUD));
}

static void queue_suspect(farm_recovery *r, uint32_t machine)
{
	pthread_mutex_lock(&r->mu);
	if (r->have_view && !judges(r))
		r->st.dropped++;
	else if (r->have_view && farm_view_find(&r->view, machine) &&
	         !in_list(r->pending, r->npending, machine) &&
	         r->npending < FARM_VIEW_MAX) {
		r->pending[r->npending++] = machine;
		r->st.suspicions++;
		r->st.t_suspect_ns = farm_now_ns();
		step(r, FARM_RSTEP_SUSPECT, machine, 1, r->view.config_id,
		     r->st.t_suspect_ns);
		pthread_cond_signal(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
}

static void on_suspect(void *ctx, uint32_t machine, enum farm_lease_why why)
{
	(void)why;
	queue_suspect(ctx, machine);
}

static void on_lost(void *ctx, uint64_t config_id)
{
	farm_recovery *r = ctx;
	farm_warn("recovery %" PRIu32 ": its lease at the CM lapsed in "
	          "configuration %" PRIu64 "; it acts as a member no more "
	          "until a configuration takes it back",
	          r->a.self_id, config_id);
	if (r->a.on_event)
		r->a.on_event(r->a.ctx, FARM_RECOVERY_LEASE_LOST, config_id);
}

/* One probe of the configuration: whom to ask how, and what came back. */
struct probe {
	/* peers: the suspects, asked on the lease channel; others: the
	 * rest, READ (without a messaging, on the lease channel too); gone:
	 * those the fabric saw die. */
	struct farm_lease_peer peers[FARM_VIEW_MAX];
	uint32_t gone[FARM_VIEW_MAX], others[FARM_VIEW_MAX];
	unsigned n, np, ngone, nothers; /* n: members probed */
	uint64_t cfg;
	struct farm_membership *mem;
	/* got: members that answered (negative: the probe failed); rgot:
	 * those of the READ probe; out: the machines to remove. */
	int got, rgot;
	uint32_t out[FARM_VIEW_MAX];
	unsigned nout;
};

/* Sort the configuration's members into @p's lists for suspects @sus;
 * false (nothing to probe) when a view that leaves this machine out came
 * since they were queued. */
static bool probe_plan(farm_recovery *r, const uint32_t *sus, unsigned nsus,
                       struct probe *p)
{
	pthread_mutex_lock(&r->mu);
	if (!judges(r)) {
		r->st.dropped += nsus;
		pthread_mutex_unlock(&r->mu);
		return false;
	}
	bool by_read = r->a.msg && !FARM_FAULT_SWITCH(FARM_FP_REC_LEASE_PROBE);
	p->n = r->npeers;
	for (unsigned i = 0; i < p->n; i++) {
		uint32_t id = r->peers[i].id;
		/* A machine the fabric saw die cannot answer: no need to
		 * wait two lease lengths for it. */
		if (in_list(r->dead, r->ndead, id))
			p->gone[p->ngone++] = id;
		else if (by_read && !in_list(sus, nsus, id))
			p->others[p->nothers++] = id;
		else
			p->peers[p->np++] = r->peers[i];
	}
	p->cfg = r->view.config_id;
	p->mem = r->mem;
	r->st.probes++;
	pthread_mutex_unlock(&r->mu);
	return true;
}

/* The others first: FaRM's CM READs every member but the suspect
 * (SOSP'15 5.2), which proves its memory is reachable on the fabric the
 * transactions use, where a lease only proves its lease thread runs. The
 * suspects are asked on the lease channel: one that answers is alive and
 * its lease thread runs, so the lapse was ours (we were paused, say) and
 * the suspicion is withdrawn; a READ would not tell, for a stopped
 * machine's memory still answers. */
static void probe_ask(farm_recovery *r, struct probe *p)
{
	bool ok[FARM_VIEW_MAX], rok[FARM_VIEW_MAX];
	uint64_t lease_ns = (uint64_t)(r->a.lease_us ? r->a.lease_us
	                                             : FARM_LEASE_DEFAULT_US) *
	                    1000ull;
	p->rgot = p->nothers ? farm_msg_probe(r->a.msg, p->others, p->nothers,
	                                      2 * lease_ns, rok)
	                     : 0;
	p->got = p->rgot < 0 || !p->np
	                 ? 0
	                 : farm_lease_probe(r->lease, p->peers, p->np,
	                                    2 * lease_ns, ok);
	if (p->rgot < 0)
		p->got = p->rgot;
	else if (p->got >= 0)
		p->got += p->rgot;
	if (p->got < 0)
		return;
	for (unsigned i = 0; i < p->ngone; i++)
		p->out[p->nout++] = p->gone[i];
	for (unsigned i = 0; i < p->nothers; i++)
		if (!rok[i])
			p->out[p->nout++] = p->others[i];
	for (unsigned i = 0; i < p->np; i++)
		if (!ok[i])
			p->out[p->nout++] = p->peers[i].id;
}

/* Count the probe's outcome and record its step. */
static void probe_note(farm_recovery *r, const struct probe *p,
                       const uint32_t *sus, unsigned nsus, bool majority)
{
	pthread_mutex_lock(&r->mu);
	r->st.t_probed_ns = farm_now_ns();
	if (p->rgot >= 0) {
		r->st.read_probes += p->nothers;
		r->st.read_silent += p->nothers - (unsigned)p->rgot;
	}
	if (!majority) {
		r->st.no_majority++;
		step(r, FARM_RSTEP_NO_MAJORITY, sus[0],
		     p->got > 0 ? (uint32_t)p->got : 0, p->cfg,
		     r->st.t_probed_ns);
	} else if (!p->nout) {
		r->st.withdrawn += nsus;
		step(r, FARM_RSTEP_WITHDRAWN, sus[0], nsus, p->cfg,
		     r->st.t_probed_ns);
	} else {
		r->st.requests++;
		step(r, FARM_RSTEP_REQUEST, p->out[0], p->nout, p->cfg,
		     r->st.t_probed_ns);
	}
	pthread_mutex_unlock(&r->mu);
}

/* Probe the configuration; with a majority, ask to remove the suspects
 * and whoever did not answer. */
static void handle(farm_recovery *r, const uint32_t *sus, unsigned nsus)
{
	struct probe p = {0};
	if (!probe_plan(r, sus, nsus, &p))
		return;
	probe_ask(r, &p);
	bool majority = p.got >= 0 && (unsigned)p.got * 2 > p.n;
	probe_note(r, &p, sus, nsus, majority);
	if (majority && !p.nout) {
		farm_info("recovery %" PRIu32 ": machine %" PRIu32 " answered "
		          "the probe: suspicion withdrawn",
		          r->a.self_id, sus[0]);
		return;
	}
	if (!majority) {
		farm_warn("recovery %" PRIu32 ": %d of %u machines of "
		          "configuration %" PRIu64 " answered the probe: no "
		          "majority, no reconfiguration from here",
		          r->a.self_id, p.got, p.n, p.cfg);
		return;
	}
	farm_warn("recovery %" PRIu32 ": configuration %" PRIu64
	          ": %u machine(s) to remove (first %" PRIu32 "); %d of %u "
	          "answered the probe",
	          r->a.self_id, p.cfg, p.nout, p.out[0], p.got, p.n);
	int rc = p.mem ? farm_membership_suspect(p.mem, p.out, p.nout)
	               : -ENOTSUP;
	if (rc)
		farm_warn("recovery %" PRIu32 ": cannot ask for a new "
		          "configuration: %s",
		          r->a.self_id, farm_strerror(rc));
}

static void *recovery_main(void *arg)
{
	farm_recovery *r = arg;
	/* Like the lease thread (which wakes this one): a suspicion's probe
	 * and its hand-off to the membership must not wait for a core
	 * behind busy loops. It sleeps between suspicions. */
	if (!r->a.no_realtime)
		(void)farm_thread_set_realtime();
	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		if (!r->npending) {
			pthread_cond_wait(&r->cv, &r->mu);
			continue;
		}
		uint32_t sus[FARM_VIEW_MAX];
		unsigned n = r->npending;
		memcpy(sus, r->pending, n * sizeof(sus[0]));
		r->npending = 0;
		pthread_mutex_unlock(&r->mu);
		handle(r, sus, n);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int farm_recovery_open(const struct farm_recovery_attr *a, farm_recovery **out)
{
	if (!a || !out)
		return -EINVAL;
	farm_recovery *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->a = *a;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	struct farm_lease_attr la = {.self_id = a->self_id,
	                             .lease_us = a->lease_us,
	                             .bind = a->lease_bind,
	                             .no_realtime = a->no_realtime,
	                             .on_suspect = on_suspect,
	                             .on_lost = on_lost,
	                             .ctx = r,
	                             .serve_word = a->serve_word};
	int rc = farm_lease_open(&la, &r->lease);
	if (!rc && (rc = -pthread_create(&r->th, NULL, recovery_main, r)))
		farm_lease_close(r->lease);
	if (rc) {
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void farm_recovery_stop(farm_recovery *r)
{
	if (!r || r->joined)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->th, NULL);
	r->joined = true;
}

void farm_recovery_close(farm_recovery *r)
{
	if (!r)
		return;
	/* The recovery thread first: a probe in progress waits on the
	 * lease's condition variables. Suspicions the lease thread queues
	 * meanwhile are dropped with r. */
	farm_recovery_stop(r);
	farm_lease_close(r->lease);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

const char *farm_recovery_lease_addr(const farm_recovery *r)
{
	return r ? farm_lease_addr(r->lease) : "";
}

void farm_recovery_set_membership(farm_recovery *r, struct farm_membership *m)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->mem = m;
	pthread_mutex_unlock(&r->mu);
}

/* The members of @v that have a lease address, into @peers; returns how
 * many. */
static unsigned lease_peers(const struct farm_view *v,
                            const char (*lease_addrs)[FARM_LEASE_ADDR_MAX],
                            struct farm_lease_peer *peers)
{
	unsigned k = 0;
	for (unsigned i = 0; i < v->n; i++) {
		if (!lease_addrs[i][0])
			continue;
		peers[k].id = v->members[i].id;
		memcpy(peers[k].addr, lease_addrs[i], FARM_LEASE_ADDR_MAX);
		k++;
	}
	return k;
}

/* A configuration without machines of the previous one: record its step.
 * Death notices hold until a view leaves the machine out or names a new
 * holder of its id (another incarnation, or an id the previous view did
 * not name): the notice was its old holder's. Under r->mu, before r->view
 * becomes @v. */
static void view_note_departures(farm_recovery *r, const struct farm_view *v)
{
	uint32_t dropped = 0, first = 0;
	unsigned ngd = 0;
	for (unsigned i = 0; r->have_view && i < r->view.n; i++) {
		uint32_t id = r->view.members[i].id;
		if (farm_view_find(v, id))
			continue;
		if (!dropped++)
			first = id;
		if (r->a.exact_deaths && in_list(r->dead, r->ndead, id))
			r->gone_dead[ngd++] = id;
	}
	if (dropped)
		r->ngone_dead = ngd;
	if (dropped) {
		r->st.t_config_ns = farm_now_ns();
		step(r, FARM_RSTEP_CONFIG, first, dropped, v->config_id,
		     r->st.t_config_ns);
	}
	unsigned kd = 0;
	for (unsigned i = 0; i < r->ndead; i++) {
		const struct farm_member *nm = farm_view_find(v, r->dead[i]);
		const struct farm_member *om =
		        r->have_view ? farm_view_find(&r->view, r->dead[i])
		                     : NULL;
		if (nm && (!r->have_view ||
		           (om && om->incarnation == nm->incarnation)))
			r->dead[kd++] = r->dead[i];
	}
	r->ndead = kd;
}

/* This machine learns it was removed: say so and tell the node. */
static void report_removed(farm_recovery *r, uint64_t config_id)
{
	farm_err("recovery %" PRIu32 ": this machine was removed from the "
	         "cluster in configuration %" PRIu64
	         " (its lease lapsed or it stopped answering); it stops "
	         "serving",
	         r->a.self_id, config_id);
	if (r->a.on_event)
		r->a.on_event(r->a.ctx, FARM_RECOVERY_REMOVED, config_id);
}

int farm_recovery_view(farm_recovery *r, const struct farm_view *v,
                       const char (*lease_addrs)[FARM_LEASE_ADDR_MAX])
{
	if (!r || !v || (v->n && !lease_addrs))
		return -EINVAL;
	struct farm_lease_peer peers[FARM_VIEW_MAX];
	unsigned k = lease_peers(v, lease_addrs, peers);
	bool member = farm_view_find(v, r->a.self_id) != NULL;
	bool listed_removed = farm_view_removed(v, r->a.self_id);
	uint32_t cm = v->has_cm ? v->cm : (v->n ? v->members[0].id : 0);
	pthread_mutex_lock(&r->mu);
	if (r->have_view && v->config_id < r->view.config_id) {
		pthread_mutex_unlock(&r->mu);
		return -ESTALE;
	}
	bool was_member =
	        r->have_view && farm_view_find(&r->view, r->a.self_id);
	view_note_departures(r, v);
	r->view = *v;
	memcpy(r->peers, peers, k * sizeof(peers[0]));
	r->npeers = k;
	r->have_view = true;
	r->npending = 0; /* suspicions of the old configuration */
	r->st.config_id = v->config_id;
	r->st.cm = cm;
	/* Listed as removed counts only for a machine that was a member
	 * once: a fresh machine under a reused id sees its old holder's
	 * removal listed until it is admitted. */
	if (member)
		r->ever_member = true;
	bool report = !member &&
	              (was_member || (listed_removed && r->ever_member)) &&
	              !r->removed_reported;
	if (report) {
		r->removed_reported = true;
		r->st.removed++;
	}
	if (member)
		r->removed_reported = false;
	pthread_mutex_unlock(&r->mu);
	/* No leases for a machine outside it: its lease thread, left with
	 * the configuration it was removed from, would renew at a CM that
	 * refuses it and suspect every member of it. Before the node hears
	 * of the removal, so that its lease is quiet once it knows. */
	if (!member && !FARM_FAULT_SWITCH(FARM_FP_REMOVED_LOUD))
		farm_lease_retire(r->lease);
	/* A machine that left gracefully (farm_view.left) was let go, not
	 * removed: the node says so (farm_node_leave). */
	if (report && !farm_ids_have(v->left, v->nleft, r->a.self_id))
		report_removed(r, v->config_id);
	if (!member || !farm_view_find(v, cm))
		return 0; /* no leases for a machine outside it */
	return farm_lease_set_config(r->lease, v->config_id, cm, peers, k);
}

void farm_recovery_hold_leases(farm_recovery *r, bool on)
{
	if (r)
		farm_lease_hold(r->lease, on);
}

void farm_recovery_peer_dead(farm_recovery *r, uint32_t machine)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	if (!in_list(r->dead, r->ndead, machine) && r->ndead < FARM_VIEW_MAX)
		r->dead[r->ndead++] = machine;
	pthread_mutex_unlock(&r->mu);
	/* A probe that waits for its answer (a suspicion of a lapsed lease
	 * came first) ends now. */
	farm_lease_probe_dead(r->lease, machine);
	queue_suspect(r, machine);
}

bool farm_recovery_all_dead(farm_recovery *r, const uint32_t *ids, unsigned n)
{
	if (!r || !r->a.exact_deaths || (n && !ids))
		return false;
	pthread_mutex_lock(&r->mu);
	bool all = true;
	for (unsigned i = 0; all && i < n; i++)
		all = in_list(r->gone_dead, r->ngone_dead, ids[i]);
	pthread_mutex_unlock(&r->mu);
	return all;
}

void farm_recovery_lease_wait(farm_recovery *r, const uint32_t *ids, unsigned n)
{
	if (!r)
		return;
	bool skip = farm_recovery_all_dead(r, ids, n) ||
	            (r->a.exact_deaths &&
	             FARM_FAULT_SWITCH(FARM_FP_REC_SUSPECT_AS_DEAD));
	pthread_mutex_lock(&r->mu);
	if (skip)
		r->st.lease_waits_skipped++;
	else
		r->st.lease_waits++;
	pthread_mutex_unlock(&r->mu);
	if (skip)
		return;
	uint32_t us = r->a.lease_us ? r->a.lease_us : FARM_LEASE_DEFAULT_US;
	struct timespec ts = {.tv_sec = us / 1000000,
	                      .tv_nsec = (long)(us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

void farm_recovery_stats(farm_recovery *r, struct farm_recovery_stats *out)
{
	if (!r || !out)
		return;
	pthread_mutex_lock(&r->mu);
	*out = r->st;
	/* The ring, oldest first. */
	unsigned n = (unsigned)FARM_MIN(r->st.steps_total,
	                                (uint64_t)FARM_RECOVERY_STEPS);
	uint64_t from = r->st.steps_total - n;
	for (unsigned i = 0; i < n; i++)
		out->steps[i] = r->st.steps[(from + i) % FARM_RECOVERY_STEPS];
	out->nsteps = n;
	pthread_mutex_unlock(&r->mu);
	farm_lease_stats(r->lease, &out->lease);
}

farm_lease *farm_recovery_lease(farm_recovery *r)
{
	return r ? r->lease : NULL;
}
