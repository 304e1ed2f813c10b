/*
 * The fault campaign (campaign.h): the machines. Each is a process of
 * its own (cp_machine) that joins the cluster, runs both workloads and
 * answers the parent's commands.
 */
#include "campaign.h"

/* In a machine's process (CLOCK_MONOTONIC, which the host's processes
 * share): when it last ended a --slow-replace hold, and when it, a new holder,
 * sent its first requests (cp_first_asks); 0: never. */
static _Atomic uint64_t cp_held_until;
static uint64_t cp_asked_at;

static int cp_config(struct np_child *np, struct farm_config *cfg)
{
	farm_config_defaults(cfg);
	cfg->machine_id = np->me;
	cfg->has_machine_id = true;
	snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s",
	         np->cl->dir[np->me]);
	if (farm_parse_size("16M", &cfg->region_size))
		return 2;
	cfg->threads = 1;
	snprintf(cfg->zk, sizeof(cfg->zk), "%s", rb_zk_connect);
	snprintf(cfg->zk_root, sizeof(cfg->zk_root), "%s", rb_zk_root);
	cfg->zk_session_ms = RB_SESSION_MS;
	cfg->zk_connect_timeout_ms = 30000;
	cfg->lease_us = CP_LEASE_US;
	cfg->replicas = CP_REPLICAS;
	/* Formed with CP_NM0 machines: a machine joining later is late. */
	cfg->expect_machines = CP_NM0;
	snprintf(cfg->domain, sizeof(cfg->domain), "%s",
	         cp_zone[cp_dom[np->me]]);
	cfg->datarec_bytes = CP_DR_BYTES;
	cfg->datarec_interval_us = CP_DR_US;
	cfg->grow = opt_grow;
	cfg->reuse_ids = opt_reuse && !opt_old_ids;
	cfg->reuse_copies = opt_keep_dirs;
	/* --hold-end: region ids from a fixed seed, so that the layout, and
	 * with it a region machine CP_HOLD backs up (cp_cold_victims), is
	 * the same every run. */
	if (opt_hold_end)
		cfg->region_seed = CP_HOLD_SEED;
	char err[256];
	if (farm_config_validate(cfg, err, sizeof(err))) {
		fprintf(stderr, "m%u: config: %s\n", np->me, err);
		return 3;
	}
	return 0;
}

static void cp_state_of(struct cp_child *c, struct cp_state *s)
{
	struct farm_view *v = malloc(sizeof(*v));
	memset(s, 0, sizeof(*s));
	if (v && !farm_node_view(c->tx.np.node, v)) {
		s->config = v->config_id;
		s->has_cm = v->has_cm;
		s->cm = v->cm;
		for (unsigned i = 0; i < v->n; i++)
			if (v->members[i].id < 64)
				s->members |= 1ull << v->members[i].id;
		for (unsigned i = 0; i < v->nlate; i++)
			if (v->late[i] < 64)
				s->late |= 1ull << v->late[i];
	}
	free(v);
	s->removed = farm_node_removed(c->tx.np.node);
	s->transfers = c->k.transfers;
	s->kv_ops = c->L.st.found + c->L.st.absent + c->L.st.puts +
	            c->L.st.del_found + c->L.st.del_absent;
}

/* The commands a machine answers running or paused. 1: not one of them. */
static int cp_query(struct cp_child *c, int cmd)
{
	if (cmd == 'v') {
		struct cp_state s;
		cp_state_of(c, &s);
		return np_say(&c->tx.np, 'V', &s, sizeof(s)) ? -1 : 0;
	}
	if (cmd == 'u') {
		struct cp_refusals r = {0};
		farm_msg_stats ms;
		farm_msg_stats_get(farm_node_msg(c->tx.np.node), NULL, &ms);
		struct farm_node_stats ns = {.size = sizeof(ns)};
		farm_txm_stats ts;
		farm_txm_stats_get(c->tx.txm, &ts);
		r.frames = ms.refused_config;
		r.lease = farm_node_stats_get(c->tx.np.node, &ns)
		                  ? UINT64_MAX
		                  : ns.lease.refused;
		r.stale = ts.stale_refused;
		r.rec = ts.rec_refused;
		return np_say(&c->tx.np, 'U', &r, sizeof(r)) ? -1 : 0;
	}
	if (cmd == 't') {
		/* Relaxed: the hook stored it on another thread, before the
		 * view that let this query's cycle go on. */
		struct cp_times t = {
		        .held_until = atomic_load_explicit(
		                &cp_held_until, memory_order_relaxed),
		        .asked_at = cp_asked_at};
		return np_say(&c->tx.np, 'T', &t, sizeof(t)) ? -1 : 0;
	}
	if (cmd == 'g') {
		struct held_report *r = malloc(sizeof(*r));
		if (!r)
			return -1;
		rp_held(&c->tx, r);
		int rc = np_say(&c->tx.np, 'G', r, sizeof(*r));
		free(r);
		return rc ? -1 : 0;
	}
	return 1;
}

/* lin_run's pacing: a bank step between KV operations, until 'P' (pause)
 * or until this machine learns it was removed. */
static bool cp_go(struct lin *L, void *arg)
{
	(void)L;
	struct cp_child *c = arg;
	if (farm_node_removed(c->tx.np.node))
		return false;
	int cmd = np_poll_cmd(&c->tx.np);
	if (cmd == 'P')
		return false;
	if (cmd) {
		int rc = cp_query(c, cmd);
		if (rc) {
			c->bad = cmd;
			return false;
		}
	}
	/* One bank step per slice of CP_SLICE_NS, the rest of it parked on
	 * the loop (serving the peers); lin_run issues one KV operation
	 * between two calls. Paced, so that 5 machines leave the 2-core
	 * host some room and the histories stay small enough for sercheck
	 * and lincheck over the whole campaign. */
	static const volatile int never = 0;
	uint64_t until = np_now_ns() + CP_SLICE_NS;
	bank_step(&c->tx, &c->k, c->own, c->nown, c->acc, c->nacc,
	          RB_GIVE_UP_NS);
	uint64_t now = np_now_ns();
	if (now < until)
		(void)farm_loop_wait(c->tx.np.loop, &never, until - now);
	return true;
}

/* zombie_reuse, 'z' (paused): close both histories (a new holder of
 * this id goes on in them), prepare the one-sided requests and run their
 * control; 'z' and the control's counts. */
static int cp_zombie_prepare(struct cp_child *c)
{
	struct zp_counts control = {0};
	if (lin_close(&c->L) || tx_hist_save(&c->tx))
		return -1;
	if (zp_prepare(&c->zp, &c->tx, c->acc, c->nacc, &control))
		fprintf(stderr, "m%u: zombie: no requests prepared\n",
		        c->tx.np.me);
	return np_say(&c->tx.np, 'z', &control, sizeof(control));
}

/* zombie_reuse, 'Y' (after SIGCONT, its id taken by a new holder): the
 * requests, then its bank workload as if nothing happened (its
 * histories are closed: what it does is judged by its counts and by the
 * others' checks), then it waits to learn it was removed. */
static int cp_zombie_act(struct cp_child *c)
{
	static const volatile int never = 0;
	farm_node *node = c->tx.np.node;
	struct cp_zombie r = {0};
	farm_msg_stats m0, m1;
	farm_msg_stats_get(farm_node_msg(node), NULL, &m0);
	uint64_t t0 = np_now_ns();
	if (c->zp.buf)
		zp_run(&c->zp, &c->tx, &r.after);
	uint64_t known = 0;
	while (np_now_ns() < t0 + CP_ZOMBIE_ACT_MS * 1000000ull) {
		bank_step(&c->tx, &r.k, c->own, c->nown, c->acc, c->nacc,
		          CP_ZOMBIE_GIVE_NS);
		(void)farm_loop_wait(c->tx.np.loop, &never, CP_SLICE_NS);
		if (!known && farm_node_removed(node))
			known = np_now_ns();
	}
	uint64_t dl = np_now_ns() + CP_ZOMBIE_KNOW_MS * 1000000ull;
	while (!farm_node_removed(node) && np_now_ns() < dl)
		(void)farm_loop_wait(c->tx.np.loop, &never, CP_SLICE_NS);
	r.removed = farm_node_removed(node);
	if (!known)
		known = np_now_ns();
	r.t_know_ms = (known - t0) / 1000000ull;
	farm_msg_stats_get(farm_node_msg(node), NULL, &m1);
	r.sent = m1.sent - m0.sent;
	r.frames = m1.frames_sent - m0.frames_sent;
	r.timeouts = m1.timeouts - m0.timeouts;
	r.peerdead = m1.peer_deaths - m0.peer_deaths;
	zp_free(&c->zp);
	return np_say(&c->tx.np, 'Z', &r, sizeof(r)) ? 40 : 0;
}

/* Both workloads, paused and resumed at the parent's word, until 'Q'. */
static int cp_work(struct cp_child *c)
{
	for (;;) {
		if (lin_run(&c->L, cp_go, c))
			return 30;
		tx_hist_flush(&c->tx);
		if (c->bad)
			return 31;
		struct cp_counts n = {.k = c->k, .lin = c->L.st};
		if (farm_node_removed(c->tx.np.node)) {
			/* A zombie: say so, then stop. */
			if (lin_close(&c->L) || tx_hist_save(&c->tx) ||
			    np_say(&c->tx.np, 'Z', &n, sizeof(n)))
				return 32;
			return 0;
		}
		if (np_say(&c->tx.np, 'p', &n, sizeof(n)))
			return 33;
		for (;;) { /* paused */
			int cmd = np_wait_cmd(&c->tx.np);
			int rc = cp_query(c, cmd);
			if (rc > 0)
				rc = cp_replica_cmd(c, cmd);
			if (rc < 0)
				return 34;
			if (rc == 0)
				continue;
			if (cmd == 'S') {
				struct scan_report *s = calloc(1, sizeof(*s));
				if (!s)
					return 35;
				rb_scan(&c->tx, c->acc, c->nacc, s);
				rc = np_say(&c->tx.np, 's', s, sizeof(*s));
				free(s);
				if (rc)
					return 36;
			} else if (cmd == 'A') {
				struct alloc_report a;
				alloc_scan(c->tx.np.node, &a);
				if (np_say(&c->tx.np, 'A', &a, sizeof(a)))
					return 37;
			} else if (cmd == 'z') {
				if (cp_zombie_prepare(c))
					return 41;
			} else if (cmd == 'Y') {
				return cp_zombie_act(c);
			} else if (cmd == 'r') {
				break;
			} else if (cmd == 'Q') {
				return lin_close(&c->L) || tx_hist_save(&c->tx)
				               ? 38
				               : 0;
			} else {
				return 39;
			}
		}
	}
}

/* A new holder of a reused id, just admitted: one request to every other
 * member at once (FARM_MSGT_KV_SHARDS; not joined yet is an answer too),
 * each asked once, never again: a member that let this machine's frames
 * in before it started its channels with the id afresh answers on the old
 * holder's channel, and that answer never comes. 0, or -1 (said why). */
#define CP_ASK_NS (10ull * 1000000000ull)
struct cp_ask {
	volatile int done;
	int status;
};

static void cp_ask_reply(farm_loop *loop, void *ctx, int status,
                         const void *reply, uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct cp_ask *a = ctx;
	a->status = status;
	a->done = 1;
}

static int cp_first_asks(struct np_child *p)
{
	struct farm_view *v = malloc(sizeof(*v));
	struct cp_ask *ask = calloc(FARM_VIEW_MAX, sizeof(*ask));
	int bad = !v || !ask || farm_node_view(p->node, v);
	cp_asked_at = np_now_ns();
	for (unsigned i = 0; !bad && i < v->n; i++) {
		if (v->members[i].id == p->me) {
			ask[i].done = 1;
			continue;
		}
		ask[i].status = farm_msg_call(p->loop, v->members[i].id, 0,
		                              FARM_MSGT_KV_SHARDS, NULL, 0,
		                              CP_ASK_NS, cp_ask_reply, &ask[i]);
		ask[i].done = ask[i].status != 0;
	}
	for (unsigned i = 0; !bad && i < v->n; i++) {
		if (!ask[i].done)
			(void)farm_loop_wait(p->loop, &ask[i].done,
			                     CP_ASK_NS + 1000000000ull);
		int st = ask[i].done ? ask[i].status : -ETIMEDOUT;
		if (st && st != -EAGAIN) {
			fprintf(stderr,
			        "m%u: a new holder of its id: machine %u did "
			        "not answer its first request: %s\n",
			        p->me, v->members[i].id, farm_strerror(st));
			bad = 1;
		}
	}
	free(ask);
	free(v);
	return bad ? -1 : 0;
}

/* --slow-replace: FARM_FP_NODE_REPLACE's hook. */
void cp_slow_replace(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	pause_ms(CP_SLOW_MS);
	/* Relaxed: read on the loop's thread ('t'), long after. */
	atomic_store_explicit(&cp_held_until, np_now_ns(),
	                      memory_order_relaxed);
}

/* --hold-end: FARM_FP_REC_DECIDE_LATE is a plain switch; this is the
 * hook of CP_HOLD's other point, and the first end of recovery it
 * refuses unhooks both (one round held). */
static void cp_hold_done(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	(void)farm_fault_set(FARM_FP_REC_DECIDE_LATE, NULL, NULL);
	(void)farm_fault_set(FARM_FP_REC_DONE_LATE, NULL, NULL);
	fprintf(stderr, "m%u: a recovery round's end held past it\n", CP_HOLD);
}

static void cp_hold_empty(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	(void)farm_fault_set(FARM_FP_REC_EMPTY_LATE, NULL, NULL);
	fprintf(stderr, "m%u: a recovery round's end held past it\n", CP_HOLD);
}

/* --hold-end: CP_HOLD's hooks (above). */
static int cp_hold_set(void)
{
	if (!opt_broken_handoff)
		return farm_fault_set(FARM_FP_REC_EMPTY_LATE, cp_hold_empty,
		                      NULL);
	return farm_fault_set(FARM_FP_REC_DECIDE_LATE, tu_switch_on, NULL) ||
	       farm_fault_set(FARM_FP_REC_DONE_LATE, cp_hold_done, NULL);
}

/* --fill-mb: the cold objects, allocated in this machine's regions. */
static int cp_fill(struct cp_child *c)
{
	uint64_t n = ((uint64_t)opt_fill_mb << 20) / CP_FILL_SIZE;
	for (uint64_t done = 0; done < n;) {
		farm_tx *tx;
		if (farm_tx_begin(c->tx.txm, c->tx.np.loop, &tx))
			return -1;
		unsigned k = 0;
		int rc = 0;
		for (; k < CP_FILL_TX && done + k < n && !rc; k++) {
			farm_fatptr p;
			void *d;
			rc = farm_tx_alloc_sync(tx, CP_FILL_SIZE,
			                        FARM_GADDR_NULL, &p, &d);
			if (!rc)
				memset(d, (int)((done + k) & 0xff),
				       CP_FILL_SIZE);
		}
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (rc && !farm_tx_retryable(rc))
			return -1;
		done += rc ? 0 : k;
	}
	return 0;
}

/* A machine's steps return this to go on, or the exit status to end
 * with. */
#define CP_GO (-1)

/* One of the first machines: the cluster formed, the store's shards
 * made. */
static int cp_join_first(struct cp_child *c)
{
	struct np_child *p = &c->tx.np;
	if (farm_node_wait_members(p->node, CP_NM0, CP_JOIN_MS) ||
	    farm_kv_attach(c->kv, p->loop))
		return 7;
	int rc = farm_kv_join_sync(c->kv, p->loop, CP_NM0, CP_JOIN_MS);
	if (rc) {
		fprintf(stderr, "m%u: kv join: %s\n", p->me, farm_strerror(rc));
		return 8;
	}
	return CP_GO;
}

/* A machine restarted from its directory: the store installs the shard
 * list it kept there (src/kv/README.md). */
static int cp_join_restart(struct cp_child *c, const struct cp_arg *a)
{
	struct np_child *p = &c->tx.np;
	if (farm_node_wait_members(p->node, a->n, CP_JOIN_MS) ||
	    farm_kv_attach(c->kv, p->loop))
		return 7;
	struct farm_restart_stats rs;
	farm_node_restart_stats(p->node, &rs);
	if (!rs.restarted) {
		fprintf(stderr, "m%u: not restarted from its data directory\n",
		        p->me);
		return 16;
	}
	int rc = p->me < CP_NM0
	                 ? farm_kv_join_sync(c->kv, p->loop, CP_NM0, CP_JOIN_MS)
	                 : farm_kv_join_existing_sync(c->kv, p->loop, 0,
	                                              CP_JOIN_MS);
	if (rc) {
		fprintf(stderr, "m%u: kv shards: %s\n", p->me,
		        farm_strerror(rc));
		return 8;
	}
	return CP_GO;
}

/* A machine added to the running cluster (a new id or a reused one). */
static int cp_join_late(struct cp_child *c, const struct cp_arg *a)
{
	struct np_child *p = &c->tx.np;
	int rc = np_await_member(p->node, p->loop, p->me, CP_JOIN_MS);
	if (rc == -EEXIST) /* not admitted: say so */
		return np_say(p, 'X', NULL, 0) ? 10 : 0;
	if (rc || farm_kv_attach(c->kv, p->loop))
		return 7;
	if (a->reused && cp_first_asks(p))
		return 17;
	rc = farm_kv_join_existing_sync(c->kv, p->loop, a->from, CP_JOIN_MS);
	if (rc) {
		fprintf(stderr, "m%u: kv join (from %u): %s\n", p->me, a->from,
		        farm_strerror(rc));
		return 8;
	}
	return CP_GO;
}

/* Joined: the histories opened, the accounts made (first machines) and
 * loaded once the parent says go, the KV workload's state set up. */
static int cp_prepare(struct cp_child *c, const struct cp_arg *a)
{
	struct np_child *p = &c->tx.np;
	bool resume = a->mode == CP_RESTART || a->reused;
	if ((resume ? tx_hist_resume(&c->tx) : tx_hist_stream(&c->tx)) ||
	    np_ready(p))
		return 11;
	if (a->mode == CP_FIRST) {
		if (create_objs(&c->tx, "acct", RB_ACCOUNTS, 64, fill_account,
		                NULL, c->mine))
			return 12;
		c->own = c->mine;
		c->nown = RB_ACCOUNTS;
		if (opt_fill_mb && cp_fill(c))
			return 12;
	}
	if (np_say(p, 'C', NULL, 0) || np_wait_cmd(p) != 'G')
		return 13;
	c->acc = load_objs(&c->tx, "acct", &c->nacc);
	if (!c->acc || c->nacc != CP_NACC)
		return 14;
	if (a->mode != CP_FIRST) {
		c->own = c->acc;
		c->nown = c->nacc;
	}
	if (resume ? lin_resume(&c->L, p, farm_kv_table(c->kv), CP_W,
	                        CP_KV_GIVE)
	           : lin_init(&c->L, p, farm_kv_table(c->kv), CP_W, CP_KV_GIVE,
	                      false))
		return 15;
	return CP_GO;
}

int cp_machine(struct np_child *np, void *arg)
{
	const struct cp_arg *a = arg;
	if (opt_hold_end && a->mode == CP_FIRST && np->me == CP_HOLD &&
	    cp_hold_set())
		return 9;
	struct cp_child *c = calloc(1, sizeof(*c));
	if (!c)
		return 9;
	c->tx.np = *np;
	struct np_child *p = &c->tx.np;
	struct farm_config cfg;
	int st = cp_config(np, &cfg);
	if (st)
		goto out_free;
	st = 4;
	if (farm_node_open(&cfg, &p->node))
		goto out_free;
	st = 5;
	if (farm_kv_create(p->node, NULL, CP_NBUCKETS, &c->kv))
		goto out;
	farm_node_set_app_loops(p->node, true);
	st = 6;
	if (farm_node_start(p->node, CP_JOIN_MS) ||
	    farm_node_loop_open(p->node, 0, &p->loop))
		goto out;
	c->tx.txm = farm_node_txm(p->node);
	st = a->mode == CP_FIRST     ? cp_join_first(c)
	     : a->mode == CP_RESTART ? cp_join_restart(c, a)
	                             : cp_join_late(c, a);
	if (st == CP_GO)
		st = cp_prepare(c, a);
	if (st == CP_GO)
		st = cp_work(c);
out:
	if (p->loop) {
		farm_kv_detach(c->kv, p->loop);
		farm_node_loop_close(p->node, p->loop);
	}
	farm_node_close(p->node);
	farm_kv_destroy(c->kv);
	free(c->acc);
	free(c->tx.h);
	if (c->tx.hfd > 0)
		close(c->tx.hfd);
out_free:
	free(c);
	return st;
}
