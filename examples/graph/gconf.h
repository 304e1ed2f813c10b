/*
 * farm-graph on a cluster described by configuration files (--config):
 * every machine of the cluster is a farm-graph process started with its
 * own file (docs/config.md) and the same command and options, one per
 * host or several per host, with ZooKeeper membership (`zk`) or static
 * `peer` lines. The machines must be numbered 0 .. N-1, N being the
 * file's `expect_machines` (or its peer lines + 1), with `threads = 1`:
 * ids are spread over the machines that store them, and every machine
 * runs the graph's handlers (a cluster of `farm machine` processes does
 * not: they serve no graph).
 *
 * Each machine loads the ids it owns (a progress line on stderr), then
 * all do the command: `run` runs the mix on every machine at once, `query`
 * is answered by machine 0, `load` stops there. Machine 0 coordinates the
 * steps: each machine calls it with a barrier message that it answers once
 * every machine has called (results travel in those messages), so no
 * machine leaves while another still needs it. Machine 0 prints the
 * summary of the whole cluster (stdout); the others print one line each.
 * SIGINT and SIGTERM stop the load or the run early, and every machine
 * leaves cleanly. Header-only, public API only.
 */
#ifndef FGRAPH_GCONF_H
#define FGRAPH_GCONF_H

#include <signal.h>

#include "gdriver.h"

#define GX_MSG_BARRIER 0x4710
#define GX_MSG_PING    0x4711
#define GX_PING_NS     (30ull * 1000000000ull)
#define GX_CHUNK       8192u /* result bytes one barrier message carries */
#define GX_CALL_NS     (24ull * 3600 * 1000000000ull)

enum { GX_NONE, GX_COUNTS, GX_RESULT };

struct gx_req {
	uint32_t phase, machine;
	uint32_t kind, off, len;
	uint32_t pad;
	/* len bytes follow: GX_COUNTS two uint64_t (nodes, edges loaded);
	 * GX_RESULT bytes off .. off + len of the machine's gd_result */
};

struct gx {
	struct gc_machine m;
	struct gd_shared *sh;
	unsigned n;         /* machines */
	uint32_t phase;     /* this machine's next barrier */
	_Atomic int formed; /* a view had every machine */
	_Atomic int lost;   /* a machine left, or this one was removed */
	/* machine 0: the barrier being gathered */
	uint32_t c_phase;
	unsigned c_arrived;
	uint64_t c_seen;
	struct farm_msg_token c_tok[GD_MAXM];
	/* this machine's outstanding barrier call */
	volatile int w_done;
	int w_status;
	/* pings to the machines a barrier waits for (one each at a time) */
	struct gx_ping {
		struct gx *x;
		bool busy;
	} ping[GD_MAXM];
};

static volatile sig_atomic_t gx_signal;

static void gx_on_signal(int sig)
{
	gx_signal = sig;
}

/* Machine 0: answer a barrier call (@status 0: go on). A reply that
 * cannot be sent leaves its machine waiting until it sees the cluster
 * change: said here. */
static void gx_answer(farm_loop *loop, const struct farm_msg_token *tok,
                      int status)
{
	int rc = status ? farm_msg_reply_error(loop, tok, status)
	                : farm_msg_reply(loop, tok, NULL, 0);
	if (rc)
		fprintf(stderr, "m0: cannot answer machine %u: %s\n",
		        tok->machine, farm_strerror(rc));
}

/* Machine 0: a machine reached barrier c_phase. */
static void gx_h_barrier(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct gx *x = arg;
	struct gx_req rq;
	if (!in->token.call_id)
		return;
	if (in->len < sizeof(rq)) {
		gx_answer(loop, &in->token, FARM_ECORRUPT);
		return;
	}
	memcpy(&rq, in->payload, sizeof(rq));
	const uint8_t *data = (const uint8_t *)in->payload + sizeof(rq);
	bool ok = x->m.me == 0 && rq.machine < x->n &&
	          rq.machine == in->src_machine && rq.phase == x->c_phase &&
	          !(x->c_seen >> rq.machine & 1) &&
	          rq.len == in->len - sizeof(rq);
	if (ok && rq.kind == GX_COUNTS)
		ok = rq.len == 2 * sizeof(uint64_t);
	else if (ok && rq.kind == GX_RESULT)
		ok = rq.off <= sizeof(struct gd_result) &&
		     rq.len <= sizeof(struct gd_result) - rq.off;
	else if (ok)
		ok = rq.kind == GX_NONE && rq.len == 0;
	if (!ok) {
		gx_answer(loop, &in->token, -EINVAL);
		return;
	}
	if (rq.kind == GX_COUNTS) {
		uint64_t v[2];
		memcpy(v, data, sizeof(v));
		atomic_store(&x->sh->loaded[rq.machine], v[0]);
		atomic_store(&x->sh->edges[rq.machine], v[1]);
	} else if (rq.kind == GX_RESULT) {
		memcpy((uint8_t *)&x->sh->res[rq.machine] + rq.off, data,
		       rq.len);
	}
	x->c_tok[rq.machine] = in->token;
	x->c_seen |= 1ull << rq.machine;
	if (++x->c_arrived < x->n)
		return;
	for (unsigned i = 0; i < x->n; i++)
		gx_answer(loop, &x->c_tok[i], 0);
	x->c_phase++;
	x->c_arrived = 0;
	x->c_seen = 0;
}

static void gx_reply(farm_loop *loop, void *ctx, int status, const void *reply,
                     uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct gx *x = ctx;
	x->w_status = status;
	x->w_done = 1;
}

static void gx_h_ping(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)arg;
	if (in->token.call_id)
		gx_answer(loop, &in->token, 0);
}

static void gx_pong(farm_loop *loop, void *ctx, int status, const void *reply,
                    uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct gx_ping *p = ctx;
	p->busy = false;
	if (status && status != -ECANCELED)
		atomic_store(&p->x->lost, 1);
}

/* Is every machine this one waits for (@all: every other) still there?
 * With static membership nothing else says that one died (ZooKeeper's
 * membership does: gx_on_config). A ping that fails (the peer died, or
 * did not answer for GX_PING_NS) sets lost: the step fails. */
static void gx_ping(struct gx *x, bool all)
{
	for (unsigned i = 0; i < x->n; i++) {
		bool waited = i != x->m.me &&
		              (all ||
		               (x->m.me == 0 ? !(x->c_seen >> i & 1) : i == 0));
		struct gx_ping *p = &x->ping[i];
		if (!waited || p->busy)
			continue;
		p->x = x;
		int rc = farm_msg_call(x->m.loop, i, 0, GX_MSG_PING, NULL, 0,
		                       GX_PING_NS, gx_pong, p);
		if (rc == 0)
			p->busy = true;
		else if (rc != -EAGAIN && rc != -ENOBUFS && rc != -ENOMEM)
			atomic_store(&x->lost, 1); /* known dead, or broken */
	}
}

static void gx_on_config(void *ctx, uint64_t id, unsigned members, bool member)
{
	(void)id;
	struct gx *x = ctx;
	/* the views before every machine joined have fewer members */
	if (member && members >= x->n)
		atomic_store(&x->formed, 1);
	else if (atomic_load(&x->formed))
		atomic_store(&x->lost, 1);
}

/* Why this machine must stop waiting: 0 (it need not), or an error. */
static int gx_broken(struct gx *x)
{
	if (gx_signal)
		return -EINTR;
	if (atomic_load(&x->lost) || farm_node_removed(x->m.node))
		return FARM_EPEERDEAD;
	return 0;
}

/* Reach the next barrier with @len bytes of @kind (at @off), and wait
 * until every machine has. 0 or an error (said on stderr). */
static int gx_barrier(struct gx *x, uint32_t kind, uint32_t off,
                      const void *data, uint32_t len)
{
	uint8_t buf[sizeof(struct gx_req) + GX_CHUNK];
	struct gx_req rq = {.phase = x->phase++,
	                    .machine = x->m.me,
	                    .kind = kind,
	                    .off = off,
	                    .len = len};
	memcpy(buf, &rq, sizeof(rq));
	if (len)
		memcpy(buf + sizeof(rq), data, len);
	x->w_done = 0;
	int rc = farm_msg_call(x->m.loop, 0, 0, GX_MSG_BARRIER, buf,
	                       (uint32_t)sizeof(rq) + len, GX_CALL_NS, gx_reply,
	                       x);
	uint64_t ping_at = gc_now_ns() + 1000000000ull;
	while (!rc && !x->w_done) {
		(void)farm_loop_wait(x->m.loop, &x->w_done, 100000000ull);
		if (x->w_done || (rc = gx_broken(x)))
			break;
		if (gc_now_ns() >= ping_at) {
			gx_ping(x, false);
			ping_at = gc_now_ns() + 1000000000ull;
		}
	}
	if (!rc)
		rc = x->w_status;
	if (rc)
		fprintf(stderr, "m%u: step %u with the other machines: %s\n",
		        x->m.me, rq.phase,
		        rc == -EINTR ? "interrupted" : fg_strerror(rc));
	return rc;
}

static struct gx *gx_self;
static bool gx_loading;

/* While loading or running: the progress line of the load, pings to the
 * other machines; non-zero (stop) on a signal or when one left. */
static int gx_tick(struct gd_shared *sh, unsigned me)
{
	static uint64_t t0, last, ping_at;
	uint64_t now = gc_now_ns();
	if (!t0)
		t0 = last = now;
	if (now >= ping_at) {
		gx_ping(gx_self, true);
		ping_at = now + 1000000000ull;
	}
	if (gx_loading && now - last >= 2000000000ull) {
		last = now;
		double s = (double)(now - t0) / 1e9;
		fprintf(stderr,
		        "m%u loading: %" PRIu64 " nodes, %" PRIu64
		        " edges, %.0f nodes/s\n",
		        me, (uint64_t)sh->loaded[me], (uint64_t)sh->edges[me],
		        (double)sh->loaded[me] / s);
	}
	return gx_broken(gx_self) != 0;
}

/* The steps after joining: load, the command, results. 0 or an error. */
static int gx_steps(struct gx *x, const char *cmd)
{
	struct gd_shared *sh = x->sh;
	struct gc_machine *m = &x->m;
	/* Every machine has installed the KV store's shard list: one that
	 * has not yet answers a put for its shard with -EINVAL. */
	int rc = gx_barrier(x, GX_NONE, 0, NULL, 0);
	if (rc)
		return rc;
	uint64_t t0 = gc_now_ns();
	gx_loading = true;
	rc = gd_load(m, sh);
	gx_loading = false;
	if (rc) {
		fprintf(stderr, "m%u: loading failed: %s\n", m->me,
		        fg_strerror(rc));
		return rc;
	}
	uint64_t v[2] = {sh->loaded[m->me], sh->edges[m->me]};
	fprintf(stderr,
	        "m%u: loaded its %" PRIu64 " nodes and %" PRIu64
	        " edges in %.1f s\n",
	        m->me, v[0], v[1], (double)(gc_now_ns() - t0) / 1e9);
	if ((rc = gx_barrier(x, GX_COUNTS, 0, v, sizeof(v))))
		return rc;
	if (m->me == 0) {
		uint64_t n = 0, e = 0;
		for (unsigned i = 0; i < x->n; i++)
			n += sh->loaded[i], e += sh->edges[i];
		printf("loaded %" PRIu64 " nodes, %" PRIu64
		       " edges on %u machines in %.1f s\n",
		       n, e, x->n, (double)(gc_now_ns() - t0) / 1e9);
		fflush(stdout);
	}
	if (!strcmp(cmd, "run")) {
		if (m->me == 0)
			fprintf(stderr,
			        "running the %s mix for %.0f s, %u in flight "
			        "per machine\n",
			        lb_mix_name((enum lb_mix)sh->mix), sh->secs,
			        sh->depth);
		if ((rc = gd_run_mix(m, sh)))
			return rc;
		const uint8_t *r = (const uint8_t *)&sh->res[m->me];
		for (uint32_t off = 0; off < sizeof(struct gd_result);
		     off += GX_CHUNK) {
			uint32_t len = sizeof(struct gd_result) - off;
			len = len < GX_CHUNK ? len : GX_CHUNK;
			if ((rc = gx_barrier(x, GX_RESULT, off, r + off, len)))
				return rc;
		}
		struct gd_sum s;
		char title[160];
		if (m->me == 0) {
			gd_summarize(sh->res, x->n, &s);
			snprintf(title, sizeof(title),
			         "%s mix, %" PRIu64 " nodes, %u machines:",
			         lb_mix_name((enum lb_mix)sh->mix), sh->nodes,
			         x->n);
			gd_print(stdout, title, &s);
		} else {
			gd_summarize(&sh->res[m->me], 1, &s);
			printf("m%u: %.0f ops/s of the cluster's, p50 %.2f us, "
			       "%.3f reads per lock-free operation\n",
			       m->me, s.rate[FG_NOPS], s.p50[FG_NOPS] / 1e3,
			       s.lf_reads);
		}
	} else if (!strcmp(cmd, "query") && m->me == 0) {
		rc = gd_query(m, sh->query, stdout);
	}
	fflush(stdout);
	/* the last step: nobody leaves while another still works */
	int rc2 = gx_barrier(x, GX_NONE, 0, NULL, 0);
	return rc ? rc : rc2;
}

/* farm-graph --config @conf: this process is one machine of the cluster
 * the file describes; @cmd is "load", "run" or "query". 0 or an error
 * (said on stderr). */
static inline int gx_main(const char *conf, struct gd_shared *sh,
                          const char *cmd, int wait_s)
{
	struct gx *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->sh = sh;
	gx_self = x;
	sh->tick = gx_tick;
	struct sigaction sa = {.sa_handler = gx_on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	struct gc_machine *m = &x->m;
	int rc = farm_node_open_file(conf, &m->node);
	if (rc) {
		fprintf(stderr, "farm-graph: %s: %s\n", conf,
		        farm_strerror(rc));
		free(x);
		return rc;
	}
	m->me = farm_node_id(m->node);
	x->n = farm_node_expected_machines(m->node);
	if (x->n > GD_MAXM || m->me >= x->n ||
	    farm_node_nthreads(m->node) != 1) {
		fprintf(stderr,
		        "farm-graph: %s: machine %u of %u with %u threads: "
		        "farm-graph needs machine ids 0..N-1 (N from "
		        "expect_machines or the peer lines) and threads = 1\n",
		        conf, m->me, x->n, farm_node_nthreads(m->node));
		farm_node_close(m->node);
		free(x);
		return -EINVAL;
	}
	struct fg_attr a = {.cache_entries = gd_cache_entries(sh->nodes)};
	uint32_t buckets = (uint32_t)(sh->nodes / x->n / 4 + 1024);
	int st = gc_machine_setup(m, &a, x->n, buckets);
	if (!st && (farm_msg_handle(farm_node_msg(m->node), GX_MSG_BARRIER,
	                            gx_h_barrier, x) ||
	            farm_msg_handle(farm_node_msg(m->node), GX_MSG_PING,
	                            gx_h_ping, x)))
		st = 4;
	if (!st) {
		farm_node_on_config(m->node, gx_on_config, x);
		fprintf(stderr, "m%u: waiting for %u machines (at most %d s)\n",
		        m->me, x->n, wait_s);
		st = gc_machine_join(m, x->n, wait_s * 1000);
	}
	if (st) {
		if (st == 5 || st == 6)
			fprintf(stderr,
			        "m%u: the cluster did not form within %d s "
			        "(%s; are all %u machines running?)\n",
			        m->me, wait_s,
			        st == 5 ? "joining" : "the KV store", x->n);
		else
			fprintf(stderr, "m%u: setting up the graph failed\n",
			        m->me);
		rc = -EIO;
	} else {
		rc = gx_steps(x, cmd);
	}
	/* machine 0's last replies must leave before it does */
	for (int i = 0; m->loop && i < 1000 && farm_loop_unsent(m->loop); i++)
		(void)farm_loop_poll(m->loop);
	farm_node_on_config(m->node, NULL, NULL);
	gc_machine_close(m);
	free(x);
	return rc;
}

#endif
