/*
 * fwl's machine process: its configuration file, node, KV store and
 * shipped-update handler; one client thread per event loop; the commands
 * the parent sends down the pipe (load, run, check, quit) and the answers
 * it sends back. Public API of libfarm only.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_int.h"
#include "wl_proc.h"

static const struct wl_ops *ops_of(const struct wl_opts *o)
{
	return o->kind == WL_TATP   ? &wl_tatp_ops
	       : o->kind == WL_TPCC ? &wl_tpcc_ops
	                            : &wl_bank_ops;
}

bool wl_retryable(int rc)
{
	return farm_tx_retryable(rc) || rc == -EBUSY || rc == -EAGAIN ||
	       rc == FARM_EPEERDEAD || rc == -ETIMEDOUT || rc == -ECANCELED;
}

/* Let the loop serve for about @us microseconds (a backoff that still
 * answers peers). */
static void serve_for(farm_loop *loop, uint64_t us)
{
	static const volatile int never = 0;
	(void)farm_loop_wait(loop, &never, us * 1000ull);
}

/* Give up on an operation that keeps failing after this long: recovery
 * takes well under it. */
#define WL_RETRY_NS (20ull * 1000000000ull)

void wl_backoff(struct wl_client *c, unsigned attempt)
{
	serve_for(c->loop, attempt < 20 ? 10u * attempt : 200u);
}

int wl_kv_ptr(struct wl_client *c, const struct wl_key *k, void *val,
              uint32_t size)
{
	uint64_t dl = wl_now_ns() + WL_RETRY_NS;
	for (;;) {
		uint32_t len = 0;
		int rc = farm_kv_get_sync(c->m->kv, c->loop, k->b, k->len, val,
		                          size, &len);
		if (rc == 0 && len != size)
			return FARM_ECORRUPT;
		if (rc == 0 || rc == -ENOENT || !wl_retryable(rc) ||
		    wl_now_ns() > dl)
			return rc;
		serve_for(c->loop, 200);
	}
}

/* The load's puts, pipelined: up to PUT_WINDOW in flight on the loading
 * loop (one at a time, each waited for, made loading a scale of 10^4 take
 * tens of seconds). A put that fails retryably is issued again from its
 * continuation; the first other error is kept for wl_kv_flush. */
#define PUT_WINDOW 64

struct put_ctx {
	struct wl_machine *m;
	farm_loop *loop;
	struct wl_key k;
	uint8_t val[32];
	uint32_t size;
	uint64_t deadline;
};

static int put_issue(struct put_ctx *p);

static void put_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct put_ctx *p = ctx;
	struct wl_machine *m = p->m;
	if (status && wl_retryable(status) && wl_now_ns() < p->deadline &&
	    put_issue(p) == 0)
		return;
	if (status && !m->put_err)
		m->put_err = status;
	m->puts_in_flight--;
	free(p);
}

static int put_issue(struct put_ctx *p)
{
	return farm_kv_put(p->m->kv, p->loop, p->k.b, p->k.len, p->val, p->size,
	                   put_done, p);
}

int wl_kv_put(struct wl_machine *m, farm_loop *loop, const struct wl_key *k,
              const void *val, uint32_t size)
{
	struct put_ctx *p = malloc(sizeof(*p));
	if (!p || size > sizeof(p->val)) {
		free(p);
		return -ENOMEM;
	}
	*p = (struct put_ctx){m,   loop, *k,
	                      {0}, size, wl_now_ns() + WL_RETRY_NS};
	memcpy(p->val, val, size);
	for (;;) {
		while (m->puts_in_flight >= PUT_WINDOW)
			serve_for(loop, 50);
		int rc = put_issue(p);
		if (rc == 0) {
			m->puts_in_flight++;
			return m->put_err;
		}
		if (rc != -EAGAIN || wl_now_ns() > p->deadline) {
			free(p);
			return rc;
		}
		serve_for(loop, 50);
	}
}

int wl_kv_flush(struct wl_machine *m, farm_loop *loop)
{
	while (m->puts_in_flight)
		serve_for(loop, 50);
	return m->put_err;
}

int wl_lf_read(struct wl_client *c, farm_fatptr p, void *buf, uint32_t size)
{
	/* The deadline is read from the clock at the first retry, not
	 * before every read: most reads take none, and TATP's single-row
	 * read is little more than the READ itself. */
	uint64_t dl = 0;
	for (;;) {
		int rc = farm_lf_read_sync(c->m->txm, c->loop, p.addr, size,
		                           p.incarnation, buf);
		if (rc == 0 || !wl_retryable(rc))
			return rc;
		if (!dl)
			dl = wl_now_ns() + WL_RETRY_NS;
		else if (wl_now_ns() > dl)
			return rc;
		serve_for(c->loop, 200);
	}
}

struct ship_wait {
	volatile int done;
	int status, answer;
};

static void ship_done(farm_loop *loop, void *ctx, int status, const void *reply,
                      uint32_t len)
{
	(void)loop;
	struct ship_wait *w = ctx;
	w->status = status;
	if (status == 0 && len == sizeof(int))
		memcpy(&w->answer, reply, sizeof(int));
	else if (status == 0)
		w->status = FARM_ECORRUPT;
	w->done = 1;
}

int wl_ship(struct wl_client *c, unsigned to, const void *req, uint32_t len,
            int *answer)
{
	if (c->dead[to])
		return FARM_EPEERDEAD;
	struct ship_wait w = {0};
	unsigned th = c->idx % c->m->o->threads;
	int rc = farm_msg_call(c->loop, to, th, WL_MSG_SHIP, req, len,
	                       500000000ull, ship_done, &w);
	if (rc)
		return rc;
	(void)farm_loop_wait(c->loop, &w.done, 0);
	if (w.status == FARM_EPEERDEAD)
		c->dead[to] = true; /* run its updates here from now on */
	if (w.status == 0)
		*answer = w.answer;
	return w.status;
}

void wl_count(struct wl_client *c, enum wl_txn t, int outcome, uint64_t t0_ns)
{
	wl_count_at(c, t, outcome, t0_ns, wl_now_ns());
}

/* FWL_SLOW_MS=N: every transaction that took N ms or more, on stderr
 * (CLOCK_MONOTONIC ms, as FARM_LOG_TIME's lines), to read a recovery's
 * stalls client by client. */
static void trace_slow(const struct wl_client *c, enum wl_txn t, int outcome,
                       uint64_t t0_ns, uint64_t now)
{
	/* Read once by whichever client gets here first; every client
	 * thread reads it after (relaxed: the value is the same for all). */
	static _Atomic int slow_ms = -1;
	if (atomic_load_explicit(&slow_ms, memory_order_relaxed) < 0) {
		const char *e = getenv("FWL_SLOW_MS");
		atomic_store_explicit(&slow_ms, e && *e ? atoi(e) : 0,
		                      memory_order_relaxed);
	}
	int limit = atomic_load_explicit(&slow_ms, memory_order_relaxed);
	if (limit <= 0 || now - t0_ns < (uint64_t)limit * 1000000ull)
		return;
	const uint64_t *ph = c->phase_ns;
	char phases[128] = "";
	if (ph[WL_PH_LOOKUP] | ph[WL_PH_READ] | ph[WL_PH_COMMIT] |
	    ph[WL_PH_BACKOFF])
		snprintf(phases, sizeof(phases),
		         " (lookups %.3f, reads %.3f, commits %.3f, "
		         "backoff %.3f ms)",
		         (double)ph[WL_PH_LOOKUP] / 1e6,
		         (double)ph[WL_PH_READ] / 1e6,
		         (double)ph[WL_PH_COMMIT] / 1e6,
		         (double)ph[WL_PH_BACKOFF] / 1e6);
	fprintf(stderr, "%.3f slow m%u.%u %s %.3f ms: %d%s\n",
	        (double)now / 1e6, c->m->me, c->idx, wl_txn_name(t),
	        (double)(now - t0_ns) / 1e6, outcome, phases);
}

void wl_count_at(struct wl_client *c, enum wl_txn t, int outcome,
                 uint64_t t0_ns, uint64_t now)
{
	trace_slow(c, t, outcome, t0_ns, now);
	if (outcome < 0) {
		c->res.errors++;
		return;
	}
	c->res.commits[t]++;
	if (outcome == 1)
		c->res.fails[t]++;
	c->res.hist[wl_hist_bucket(now - t0_ns)]++;
	struct wl_machine *m = c->m;
	if (m->ticks) {
		uint64_t tick =
		        (now - m->run_start_ns) / (m->o->tick_us * 1000);
		if (tick < m->nticks)
			atomic_fetch_add(&m->ticks[tick], 1);
	}
}

uint64_t wl_pick_id(struct wl_client *c, uint64_t id)
{
	const struct wl_opts *o = c->m->o;
	if (!o->partitioned || o->machines == 1)
		return id;
	/* The nearest id at or below @id that this machine owns (ids run
	 * from 1; owner is id mod machines), wrapping to the top. */
	uint64_t want = c->m->me, have = id % o->machines;
	uint64_t d = (have + o->machines - want) % o->machines;
	if (id > d)
		return id - d;
	uint64_t top = o->scale - (o->scale % o->machines + o->machines -
	                           want) % o->machines;
	return top ? top : id;
}

static void ship_handler(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct wl_machine *m = arg;
	ops_of(m->o)->ship(m, loop, in);
}

/* ---- the run --------------------------------------------------------------
 */

static enum wl_txn pick_type(struct wl_client *c)
{
	int from, to;
	wl_types(c->m->o->kind, &from, &to);
	unsigned r = (unsigned)wl_uni(&c->rng, 0, 99), acc = 0;
	for (int t = from; t < to; t++) {
		acc += c->m->o->mix[t];
		if (r < acc)
			return (enum wl_txn)t;
	}
	return (enum wl_txn)from;
}

static void client_run(struct wl_client *c)
{
	struct wl_machine *m = c->m;
	const struct wl_ops *w = ops_of(m->o);
	uint64_t end = m->run_start_ns + m->o->duration_ms * 1000000ull;
	memset(&c->res, 0, sizeof(c->res));
	c->hist_fd = -1;
	if (m->o->history) {
		char p[512];
		snprintf(p, sizeof(p), "%s/hist.%u.%u", m->o->history, m->me,
		         c->idx);
		c->hist_fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0600);
	}
	uint64_t t0 = wl_now_ns(), s;
	/* One clock read a transaction for the deadline and its start:
	 * the in-memory limit reads it as often. */
	while ((s = wl_now_ns()) < end) {
		enum wl_txn t = pick_type(c);
		int rc = w->txn(c, t);
		/* Answers to updates in flight, between transactions. */
		if (w->reap)
			w->reap(c, false);
		if (rc == WL_INFLIGHT)
			continue;
		if (rc == WL_GIVEN_UP)
			break;
		wl_count(c, t, rc, s);
		if (rc < 0)
			fprintf(stderr,
			        "m%u.%u: %s given up after %.1f ms: %s\n",
			        m->me, c->idx, wl_txn_name(t),
			        (double)(wl_now_ns() - s) / 1e6,
			        farm_strerror(rc));
		if (rc < 0 && !wl_retryable(rc))
			break;
	}
	if (w->reap)
		w->reap(c, true);
	c->res.seconds = (double)(wl_now_ns() - t0) / 1e9;
	if (c->hist_fd >= 0)
		close(c->hist_fd);
}

static void set_go(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)status;
	struct wl_client *c = ctx;
	c->go = c->go ? c->go : 1;
}

static void set_quit(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)status;
	((struct wl_client *)ctx)->go = 2;
}

static void *client_thread(void *arg)
{
	struct wl_client *c = arg;
	struct wl_machine *m = c->m;
	if (farm_node_loop_open(m->node, c->idx, &c->loop) ||
	    farm_kv_attach(m->kv, c->loop)) {
		atomic_store(&c->done, -1);
		return NULL;
	}
	atomic_store(&c->done, 1);
	while (c->go != 2) {
		(void)farm_loop_wait(c->loop, &c->go, 0);
		if (c->go == 1) {
			c->go = 0;
			client_run(c);
			atomic_store(&c->done, 1);
		}
	}
	/* Stay until every loop may close: peers may still call this one. */
	farm_kv_detach(m->kv, c->loop);
	farm_node_loop_close(m->node, c->loop);
	return NULL;
}

/* Wait, serving loop 0, until every worker's done is non-zero. */
static int wait_workers(struct wl_machine *m)
{
	for (;;) {
		bool all = true;
		for (unsigned i = 1; i < m->o->threads; i++) {
			int d = atomic_load(&m->cl[i].done);
			if (d < 0)
				return -1;
			all = all && d;
		}
		if (all)
			return 0;
		serve_for(m->cl[0].loop, 1000);
	}
}

static void run_all(struct wl_machine *m)
{
	uint64_t cpu0 = wl_cpu_ns();
	m->run_start_ns = wl_now_ns();
	for (unsigned i = 1; i < m->o->threads; i++) {
		atomic_store(&m->cl[i].done, 0);
		if (farm_loop_post(m->cl[i].loop, set_go, &m->cl[i]))
			atomic_store(&m->cl[i].done, -1);
	}
	client_run(&m->cl[0]);
	(void)wait_workers(m);
	m->run_cpu_ns = wl_cpu_ns() - cpu0;
}

/* ---- setup ----------------------------------------------------------------
 */

static int write_conf(const struct wl_machine *m, const char *conf)
{
	const struct wl_opts *o = m->o;
	FILE *f = fopen(conf, "w");
	if (!f)
		return -1;
	fprintf(f, "machine_id = %u\ndata_dir = %s/m%u\nregion_size = %s\n",
	        m->me, m->root, m->me, o->region_size);
	fprintf(f, "threads = %u\nlog_size = 256K\nbusy_poll = %d\n",
	        o->threads, o->busy_poll);
	fprintf(f, "replicas = %u\nfabric = %s\n", o->replicas, o->fabric);
	if (o->park_after_us >= 0)
		fprintf(f, "park_after_us = %d\n", o->park_after_us);
	if (o->zk)
		fprintf(f,
		        "zk = %s\nzk_root = /libfarm/fwl-%d\n"
		        "expect_machines = %u\nzk_session_ms = %u\n"
		        "lease_us = %u\n",
		        o->zk, (int)getppid(), o->machines,
		        o->lease_ms * 4 > 2000 ? o->lease_ms * 4 : 2000,
		        o->lease_ms * 1000);
	for (unsigned j = 0; j < o->machines && !o->zk; j++)
		if (j != m->me)
			fprintf(f, "peer = %u %s/m%u\n", j, m->root, j);
	return fclose(f) ? -1 : 0;
}

/* KV buckets per machine for the rows of the workload, with room. */
static uint32_t kv_buckets(const struct wl_opts *o)
{
	/* TPC-C: a warehouse's stock and customers, its districts, and
	 * the items. */
	uint64_t keys =
	        o->kind == WL_TATP ? o->scale * 10
	        : o->kind == WL_TPCC
	                ? o->scale * (o->items + 10ull * o->customers + 11) +
	                          o->items
	                : o->scale * 2;
	keys += 64u * WL_MAX_THREADS * WL_MAX_MACHINES;
	uint64_t b = keys / o->machines / 2 + 1024; /* 4 slots a bucket */
	return b > (1u << 24) ? 1u << 24 : (uint32_t)b;
}

static int machine_open(struct wl_machine *m, const char *conf)
{
	int rc = farm_node_open_file(conf, &m->node);
	if (rc) {
		fprintf(stderr, "m%u: open: %s\n", m->me, farm_strerror(rc));
		return 3;
	}
	m->txm = farm_node_txm(m->node);
	if (farm_kv_create(m->node, NULL, kv_buckets(m->o), &m->kv) ||
	    farm_msg_handle(farm_node_msg(m->node), WL_MSG_SHIP, ship_handler,
	                    m))
		return 4;
	farm_node_set_app_loops(m->node, true);
	rc = farm_node_start(m->node, 30000);
	if (rc) {
		fprintf(stderr, "m%u: start: %s\n", m->me, farm_strerror(rc));
		return 5;
	}
	for (unsigned i = 0; i < m->o->threads; i++) {
		struct wl_client *c = &m->cl[i];
		c->m = m;
		c->idx = i;
		c->rng = (m->o->seed + 1) * 0x9e3779b97f4a7c15ull ^
		         ((uint64_t)m->me << 32 | i) * 0xbf58476d1ce4e5b9ull;
		c->rng = c->rng ? c->rng : 1;
		if (i && pthread_create(&c->th, NULL, client_thread, c))
			return 5;
	}
	struct wl_client *c0 = &m->cl[0];
	if (farm_node_loop_open(m->node, 0, &c0->loop) ||
	    farm_kv_attach(m->kv, c0->loop) || wait_workers(m) ||
	    farm_node_wait_members(m->node, m->o->machines, 30000))
		return 5;
	rc = farm_kv_join_sync(m->kv, c0->loop, m->o->machines, 30000);
	if (rc) {
		fprintf(stderr, "m%u: join: %s\n", m->me, farm_strerror(rc));
		return 6;
	}
	return 0;
}

static void machine_close(struct wl_machine *m)
{
	for (unsigned i = 1; i < m->o->threads; i++)
		if (m->cl[i].th) {
			/* Without memory for the work item the thread
			 * cannot be told: leave it to farm_node_close. */
			if (m->cl[i].loop &&
			    farm_loop_post(m->cl[i].loop, set_quit,
			                   &m->cl[i]) == 0)
				pthread_join(m->cl[i].th, NULL);
		}
	if (ops_of(m->o)->fini)
		ops_of(m->o)->fini(m);
	if (m->cl[0].loop) {
		farm_kv_detach(m->kv, m->cl[0].loop);
		farm_node_loop_close(m->node, m->cl[0].loop);
	}
	farm_node_close(m->node);
	farm_kv_destroy(m->kv);
}

/* ---- commands -------------------------------------------------------------
 */

/* Serve loop 0 until a command byte arrives (its value) or the pipe
 * closes (0). */
static int wait_cmd(struct wl_machine *m, int in)
{
	for (;;) {
		struct pollfd pf = {.fd = in, .events = POLLIN};
		if (poll(&pf, 1, 0) > 0) {
			char c = 0;
			return read(in, &c, 1) == 1 ? c : 0;
		}
		serve_for(m->cl[0].loop, 1000);
	}
}

/* What this machine saw of recovery after a kill (the timeline's
 * phases): the library's counters, read after the run. */
static void rec_times(struct wl_machine *m, struct wl_rec_times *t)
{
	struct farm_node_stats ns = {.size = sizeof(ns)};
	farm_txm_stats ts;
	t->run_start = m->run_start_ns;
	if (m->o->kill_machine < 0 || farm_node_stats_get(m->node, &ns))
		return;
	uint64_t taken = 0; /* the first configuration without the victim */
	for (uint32_t i = 0; i < ns.recovery.nsteps; i++) {
		const struct farm_stats_step *s = &ns.recovery.steps[i];
		if (s->machine != (uint32_t)m->o->kill_machine ||
		    s->t_ns < m->run_start_ns)
			continue;
		if (s->kind == FARM_STATS_STEP_SUSPECT && !t->suspect)
			t->suspect = s->t_ns;
		if (s->kind == FARM_STATS_STEP_CONFIG && !taken)
			taken = s->t_ns;
	}
	/* The membership keeps its last write only: the one that removed
	 * the victim if nothing was written between it and the report. */
	t->view = taken;
	if (ns.membership.t_write_ns >= m->run_start_ns &&
	    ns.membership.t_write_ns <= taken) {
		t->zk_begin = ns.membership.t_write_begin_ns;
		t->zk_written = ns.membership.t_write_ns;
	}
	farm_txm_stats_get(m->txm, &ts);
	t->config = ts.rec_t_config_ns;
	t->go = ts.rec_t_go_ns;
	t->active = ts.rec_t_active_ns;
	t->promoted = ts.rec_promoted;
	t->locks = ts.rec_locks;
}

static int answer_run(struct wl_machine *m, int out)
{
	struct wl_result *sum = calloc(1, sizeof(*sum));
	if (!sum)
		return -1;
	for (unsigned i = 0; i < m->o->threads; i++) {
		const struct wl_result *r = &m->cl[i].res;
		for (int t = 0; t < WT_NTYPES; t++) {
			sum->commits[t] += r->commits[t];
			sum->fails[t] += r->fails[t];
		}
		sum->retries += r->retries;
		sum->errors += r->errors;
		sum->shipped += r->shipped;
		sum->ship_fallbacks += r->ship_fallbacks;
		for (int b = 0; b < WL_HIST_BUCKETS; b++)
			sum->hist[b] += r->hist[b];
		sum->seconds =
		        r->seconds > sum->seconds ? r->seconds : sum->seconds;
		sum->acked[m->me][i] = r->acked[m->me][i];
		sum->acked_delta += r->acked_delta;
	}
	sum->cores = m->o->threads;
	sum->cpu_s = (double)m->run_cpu_ns / 1e9;
	rec_times(m, &sum->rec[m->me]);
	int rc = wl_write_all(out, sum, sizeof(*sum));
	free(sum);
	for (unsigned k = 0; !rc && k < m->nticks; k++) {
		uint64_t v = atomic_load(&m->ticks[k]);
		rc = wl_write_all(out, &v, sizeof(v));
	}
	return rc;
}

static int serve_cmds(struct wl_machine *m, int in, int out)
{
	const struct wl_ops *w = ops_of(m->o);
	for (;;) {
		int cmd = wait_cmd(m, in), rc = 0;
		struct wl_result *r;
		switch (cmd) {
		case 'L':
			rc = w->load(m, m->cl[0].loop);
			if (!rc)
				rc = wl_kv_flush(m, m->cl[0].loop);
			if (wl_write_all(out, &rc, sizeof(rc)) ||
			    wl_write_all(out, m->loaded, sizeof(m->loaded)))
				return 7;
			break;
		case 'G':
			/* Say the run is over, then report only when asked:
			 * the report is larger than a pipe holds, and a
			 * machine blocked writing it would stop serving
			 * transactions of machines still running. */
			run_all(m);
			if (wl_write_all(out, "D", 1))
				return 7;
			break;
		case 'R':
			if (answer_run(m, out))
				return 7;
			break;
		case 'C':
			r = calloc(1, sizeof(*r));
			rc = r ? w->check(m, m->cl[0].loop, r) : -ENOMEM;
			if (!r || wl_write_all(out, &rc, sizeof(rc)) ||
			    wl_write_all(out, r, sizeof(*r)))
				return 7;
			free(r);
			break;
		default: return 0;
		}
	}
}

int wl_machine_main(const struct wl_opts *o, unsigned me, const char *root,
                    int in, int out)
{
	static struct wl_machine mach;
	struct wl_machine *m = &mach;
	m->o = o;
	m->me = me;
	m->root = root;
	if (o->tick_us) {
		m->nticks = (unsigned)(o->duration_ms * 1000 / o->tick_us) + 1;
		m->ticks = calloc(m->nticks, sizeof(*m->ticks));
		if (!m->ticks)
			return 2;
	}
	char conf[512];
	snprintf(conf, sizeof(conf), "%s/m%u.conf", root, me);
	if (write_conf(m, conf))
		return 2;
	int st = machine_open(m, conf);
	char r = 'R';
	if (!st)
		st = wl_write_all(out, &r, 1) ? 7 : serve_cmds(m, in, out);
	machine_close(m);
	return st;
}
