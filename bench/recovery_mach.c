/*
 * recovery_bench: a machine process. It joins the cluster, makes its
 * accounts, runs the closed-loop workload (transfers and lookups) while
 * counting every operation in its 1 ms bucket and logging every commit it
 * is told of, and at the end the scanner reads every account. See
 * recovery_bench.c's head comment.
 */
#include "benchnode.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <farm/farm.h>
#include <farm/txn.h>

#include "benchutil.h"

#include "recovery_bench.h"
#include "benchcluster.h"
#include "transfers.h"

/* ---- the machine ----------------------------------------------------- */

struct mach {
	uint32_t me;
	farm_node *node;
	farm_loop *loop;
	farm_txm *txm;
	struct mstat *st;
	uint64_t rng;
	farm_fatptr *acc; /* every machine's accounts, NM * nacct */
	unsigned nacc;
	unsigned busy; /* operations in flight */
};

static uint64_t rnd(struct mach *c)
{
	return bu_rand64(&c->rng);
}

static void fail(struct mach *c, const char *what, int rc)
{
	c->st->fail_rc = rc;
	snprintf(c->st->fail_what, sizeof(c->st->fail_what), "%s", what);
	fprintf(stderr, PROG ": machine %u: %s: %s\n", c->me, what,
	        farm_strerror(rc));
	atomic_store(&c->st->state, ST_FAILED);
}

static void serve_ms(struct mach *c, unsigned ms)
{
	static const volatile int never = 0;
	(void)farm_loop_wait(c->loop, &never, (uint64_t)ms * 1000000ull);
}

/* The machine's accounts. */
static int create_accounts(struct mach *c)
{
	int rc = bx_create(c->txm, c->loop, g_opt.accounts,
	                   sizeof(struct bx_acct), INIT_BAL, c->st->acct);
	if (!rc)
		c->st->nacct = g_opt.accounts;
	return rc;
}

static void bump(struct mach *c, uint32_t *counts)
{
	uint64_t b = (now_ns() - g_sh->t0) / 1000000ull;
	if (b < g_sh->nbuckets)
		counts[(size_t)c->me * g_sh->nbuckets + b]++;
}

static bool running(struct mach *c)
{
	return atomic_load(&g_sh->cmd) == C_GO && !atomic_load(&c->st->removed);
}

static void note_error(struct mach *c, int rc, const char *what)
{
	atomic_fetch_add(&c->st->failed, 1);
	if (!c->st->first_err) {
		c->st->first_err = rc;
		snprintf(c->st->first_err_what, sizeof(c->st->first_err_what),
		         "%s, %" PRId64 " ms after go", what,
		         (int64_t)((now_ns() - g_sh->t0) / 1000000ull));
		fprintf(stderr, PROG ": machine %u: %s: %s\n", c->me,
		        c->st->first_err_what, farm_strerror(rc));
	}
}

/* One operation in flight: a transfer (its reads, then its commit) or a
 * lookup. A transfer whose outcome is retryable runs again after a
 * backoff (retry_at), with the same accounts. */
struct slot {
	struct bx_slot h; /* first: bx_slots_pass */
	struct mach *c;
	struct bx_pair p; /* a transfer's transaction and reads */
	bool lookup;
	unsigned ia, ib, tries;
	int64_t amt;
	uint64_t t_start;
	int phase; /* 1 reading, 2 committing */
	struct bx_acct lk;
};

static void slot_start(struct slot *s);

static void slot_start_any(void *s)
{
	slot_start(s);
}

static void slot_end(struct slot *s, int rc)
{
	struct mach *c = s->c;
	uint64_t now = now_ns();
	if (now - s->t_start > 100000000ull) { /* the last 16 */
		struct slow *w = &c->st->slow[c->st->nslow++ % 16];
		w->start_ms = (int64_t)((s->t_start - g_sh->t0) / 1000000ull);
		w->ms = (uint32_t)((now - s->t_start) / 1000000ull);
		w->rc = rc;
		w->lookup = s->lookup;
		w->phase = s->phase;
		w->acct_a = s->ia;
		w->acct_b = s->ib;
	}
	if (s->p.tx)
		farm_tx_free(s->p.tx);
	s->p.tx = NULL;
	s->h.busy = false;
	c->busy--;
	if (rc == 0) {
		if (!s->lookup)
			bump(c, g_xfers);
		bump(c, g_ops);
		s->tries = 0;
	} else if (!s->lookup && farm_tx_retryable(rc)) {
		/* Back off, so that a lock held by a descheduled machine
		 * or a recovering region is not hammered. */
		atomic_fetch_add(&c->st->retries, 1);
		for (unsigned k = 0; k < 8; k++)
			if ((c->st->rcode[k] == rc &&
			     c->st->rphase[k] == s->phase) ||
			    !c->st->rcount[k]) {
				c->st->rcode[k] = rc;
				c->st->rphase[k] = s->phase;
				c->st->rcount[k]++;
				c->st->rlast_ms[k] =
				        (int64_t)((now - g_sh->t0) /
				                  1000000ull);
				break;
			}
		s->h.retry_at = bx_backoff(&s->tries);
		return; /* the main loop starts it again */
	} else {
		if (!farm_tx_retryable(rc) && rc != -EBUSY)
			note_error(c, rc,
			           s->lookup       ? "lookup"
			           : s->phase == 2 ? "transfer commit"
			                           : "transfer read");
		s->tries = 0;
	}
	if (running(c))
		slot_start(s);
}

static void commit_cb(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct slot *s = ctx;
	struct mach *c = s->c;
	if (outcome == 0) {
		uint64_t *mw = g_sh->maxw[c->me];
		mw[s->ia] = BU_MAX(mw[s->ia], s->p.a.ctr);
		mw[s->ib] = BU_MAX(mw[s->ib], s->p.b.ctr);
		uint32_t k = atomic_load(&c->st->nclog);
		if (k < CLOG_CAP) {
			g_clog[(size_t)c->me * CLOG_CAP + k] = (struct clog){
			        .ia = (uint16_t)s->ia,
			        .ib = (uint16_t)s->ib,
			        .ca = (uint32_t)s->p.a.ctr,
			        .cb = (uint32_t)s->p.b.ctr,
			        .t_begin = (uint32_t)((s->t_start - g_sh->t0) /
			                              1000),
			        .t_end = (uint32_t)((now_ns() - g_sh->t0) /
			                            1000)};
			atomic_store(&c->st->nclog, k + 1);
		}
		atomic_fetch_add(&c->st->transfers, 1);
	}
	atomic_fetch_sub(&c->st->inflight, 1);
	slot_end(s, outcome);
}

static void reads_done(struct bx_pair *p)
{
	struct slot *s = (struct slot *)((char *)p - offsetof(struct slot, p));
	int rc = p->err;
	if (!rc && p->a.balance < s->amt) {
		atomic_fetch_add(&s->c->st->declined, 1);
		slot_end(s, 0); /* read-only: nothing to commit */
		return;
	}
	if (!rc && !(rc = bx_pair_write(p, s->c->acc[s->ia].addr,
	                                s->c->acc[s->ib].addr, s->amt))) {
		/* Counted before the commit can be decided: a machine killed
		 * inside it may or may not have committed. */
		atomic_fetch_add(&s->c->st->inflight, 1);
		s->phase = 2;
		rc = farm_tx_commit(p->tx, commit_cb, s);
		if (rc)
			atomic_fetch_sub(&s->c->st->inflight, 1);
	}
	if (rc)
		slot_end(s, rc);
}

static void lookup_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct slot *s = ctx;
	if (status == 0)
		atomic_fetch_add(&s->c->st->lookups, 1);
	slot_end(s, status);
}

static void slot_start(struct slot *s)
{
	struct mach *c = s->c;
	s->h.busy = true;
	s->h.retry_at = 0;
	s->t_start = now_ns();
	s->phase = 1;
	c->busy++;
	if (!s->tries) {
		s->lookup = rnd(c) % 100 >= 70;
		s->ia = (unsigned)(rnd(c) % c->nacc);
		do
			s->ib = (unsigned)(rnd(c) % c->nacc);
		while (s->ib == s->ia);
		s->amt = 1 + (int64_t)(rnd(c) % 20);
	}
	int rc;
	if (s->lookup) {
		const farm_fatptr *p = &c->acc[s->ia];
		rc = farm_lf_read(c->txm, c->loop, p->addr, sizeof(s->lk),
		                  p->incarnation, &s->lk, lookup_cb, s);
		if (rc)
			slot_end(s, rc);
		return;
	}
	if ((rc = farm_tx_begin(c->txm, c->loop, &s->p.tx))) {
		s->p.tx = NULL;
		slot_end(s, rc);
		return;
	}
	bx_pair_read(&s->p, c->acc[s->ia].addr, c->acc[s->ib].addr);
}

/* What the parent watches while it waits (every ms). */
static void publish(struct mach *c)
{
	farm_txm_stats ts;
	farm_txm_stats_get(c->txm, &ts);
	atomic_store(&c->st->t_active, ts.rec_t_active_ns);
	atomic_store(&c->st->config_id, farm_node_config_id(c->node));
	struct farm_node_stats ns = {.size = sizeof(ns)};
	if (!farm_node_stats_get(c->node, &ns)) {
		atomic_store(&c->st->suspicions,
		             ns.recovery.suspicions + ns.lease.lost);
		atomic_store(&c->st->cm, ns.cm);
	}
	atomic_store(&c->st->removed, farm_node_removed(c->node));
}

/* --depth operations in flight until told to stop (or removed), then
 * until every one has ended. */
static int workload(struct mach *c)
{
	struct slot *slots = calloc(g_opt.depth, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (unsigned i = 0; i < g_opt.depth; i++) {
		slots[i].c = c;
		slots[i].p.done = reads_done;
		slot_start(&slots[i]);
	}
	uint64_t last = UINT64_MAX;
	while (running(c)) {
		uint64_t now = now_ns();
		uint64_t b = (now - g_sh->t0) / 1000000ull;
		if (b != last) {
			last = b;
			publish(c);
		}
		bx_slots_pass(c->loop, slots, sizeof(*slots), g_opt.depth, now,
		              slot_start_any);
	}
	int rc = bx_slots_drain(c->loop, &c->busy);
	publish(c);
	if (rc)
		fprintf(stderr,
		        PROG ": machine %u: %u operations never ended\n", c->me,
		        c->busy);
	else
		free(slots); /* else continuations may still use them */
	return rc;
}

/* Every account read lock-free (a locked one is a lock left behind), then
 * all summed in one read-only transaction. */
static void scan(struct mach *c)
{
	for (unsigned i = 0; i < c->nacc; i++) {
		struct bx_acct a;
		int rc = farm_lf_read_sync(c->txm, c->loop, c->acc[i].addr,
		                           sizeof(a), UINT64_MAX, &a);
		for (unsigned t = 0;
		     rc && rc != -EBUSY && farm_tx_retryable(rc) && t < 100;
		     t++) {
			serve_ms(c, 10);
			rc = farm_lf_read_sync(c->txm, c->loop, c->acc[i].addr,
			                       sizeof(a), UINT64_MAX, &a);
		}
		if (rc == 0) {
			g_sh->lf_read++;
		} else if (rc == -EBUSY) {
			g_sh->locked_acct[g_sh->lf_locked] = i;
			g_sh->lf_locked++;
			if (g_sh->lf_locked == 4)
				break; /* 1 s each: enough evidence */
		} else {
			if (!g_sh->lf_other++)
				g_sh->lf_err = rc;
		}
	}
	int rc = 0;
	for (unsigned t = 0; t < 20; t++) {
		if (t)
			serve_ms(c, 20);
		g_sh->sum_tries++;
		g_sh->total = 0;
		farm_tx *tx;
		rc = farm_tx_begin(c->txm, c->loop, &tx);
		snprintf(g_sh->sum_where, sizeof(g_sh->sum_where), "begin");
		if (rc)
			break;
		for (unsigned i = 0; i < c->nacc && !rc; i++) {
			const void *d;
			rc = farm_tx_read_sync(tx, c->acc[i].addr,
			                       sizeof(struct bx_acct), &d);
			snprintf(g_sh->sum_where, sizeof(g_sh->sum_where),
			         "read of account %u", i);
			if (!rc) {
				struct bx_acct a;
				memcpy(&a, d, sizeof(a));
				g_sh->total += a.balance;
				g_sh->ctr[i] = a.ctr;
			}
		}
		if (!rc) {
			rc = farm_tx_commit_sync(tx);
			snprintf(g_sh->sum_where, sizeof(g_sh->sum_where),
			         "commit");
		}
		farm_tx_free(tx);
		if (!rc || !farm_tx_retryable(rc))
			break;
	}
	g_sh->sum_rc = rc;
}

static int wait_cmd(struct mach *c, int want)
{
	for (;;) {
		int cmd = atomic_load(&g_sh->cmd);
		if (cmd >= want)
			return cmd;
		if (getppid() == 1)
			return -1;
		serve_ms(c, 1);
	}
}

int machine(uint32_t me, const char *root, const char *zk_root)
{
	struct mach c = {.me = me, .st = &g_sh->m[me]};
	c.rng = now_ns() ^ g_opt.seed ^ ((uint64_t)me << 40) ^
	        0x9e3779b97f4a7c15ull;
	farm_conf *cfg;
	if (bn_conf_new(PROG, &cfg)) {
		fail(&c, "configuration", -ENOMEM);
		return 3;
	}
	char v[32];
	int rc = bc_node_config(PROG, cfg, me, root, g_zk_connect, zk_root,
	                        SESSION_MS);
	rc |= bn_set(PROG, cfg, "busy_poll", g_opt.busy_poll ? "1" : "0");
	if (g_opt.lease_us) {
		snprintf(v, sizeof(v), "%u", g_opt.lease_us);
		rc |= bn_set(PROG, cfg, "lease_us", v);
	}
	if (rc) {
		farm_conf_free(cfg);
		fail(&c, "configuration", -EINVAL);
		return 3;
	}
	unsigned stage;
	int st = 5;
	rc = bc_node_up(PROG, cfg, me, NM, JOIN_MS, &c.node, &c.loop, &stage);
	farm_conf_free(cfg);
	if (rc) {
		static const char *const what[] = {"open", "start", "join"};
		fail(&c, what[stage], rc);
		st = 4 + (int)stage;
		goto out;
	}
	c.txm = farm_node_txm(c.node);
	st = 7;
	if ((rc = create_accounts(&c))) {
		fail(&c, "create accounts", rc);
		goto out;
	}
	atomic_store(&c.st->state, ST_CREATED);
	st = 8;
	if (wait_cmd(&c, C_GO) != C_GO)
		goto out;
	c.nacc = NM * g_opt.accounts;
	c.acc = calloc(c.nacc, sizeof(*c.acc));
	if (!c.acc)
		goto out;
	for (unsigned i = 0; i < NM; i++)
		memcpy(c.acc + i * g_opt.accounts, g_sh->m[i].acct,
		       g_opt.accounts * sizeof(*c.acc));
	if ((rc = workload(&c))) {
		fail(&c, "workload", rc);
		goto out;
	}
	c.st->ns.size = sizeof(c.st->ns);
	if (farm_node_stats_get(c.node, &c.st->ns))
		memset(&c.st->ns, 0, sizeof(c.st->ns));
	farm_txm_stats_get(c.txm, &c.st->ts);
	atomic_store(&c.st->state, ST_DONE);
	int cmd = wait_cmd(&c, C_SCAN);
	if (cmd == C_SCAN && g_sh->scanner == me) {
		scan(&c);
		atomic_store(&c.st->state, ST_SCANNED);
	}
	st = wait_cmd(&c, C_QUIT) == C_QUIT ? 0 : 9;
out:
	free(c.acc);
	if (c.loop)
		farm_node_loop_close(c.node, c.loop);
	farm_node_close(c.node);
	return st;
}
