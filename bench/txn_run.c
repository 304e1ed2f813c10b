/*
 * txn_bench: the transaction runs and the lock-free and raw READ runs
 * (txn_bench.h; what is measured: txn_bench.c's head).
 */
#include "txn_bench.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- transactions -------------------------------------------------------- */

uint64_t g_increments; /* every committed increment, all runs */

/* The protocol's work for committing @s's transaction, from the objects'
 * replica lists (bench/README.md, txn_bench):
 *   WRITEs = 2 per remote primary of the write set (LOCK, COMMIT-PRIMARY)
 *          + 1 per (primary, backup) pair of the write set whose backup is
 *            not the coordinator (COMMIT-BACKUP);
 *   messages = 1 per remote primary of the write set (lock reply);
 *   READs = 1 per remote object only read (validation);
 * for a single-machine transaction only the COMMIT-BACKUPs. */
static void expected_work(struct txslot *s, const struct shape *sh,
                          farm_node *node, uint32_t me)
{
	bool prim[64] = {false};
	bool pair[64][64];
	memset(pair, 0, sizeof(pair));
	s->ew = s->emsg = s->er = 0;
	for (unsigned i = 0; i < sh->k + sh->ro; i++) {
		uint32_t rep[FARM_REPLICAS_MAX];
		unsigned n =
		        region_replicas(node, farm_gaddr_region(s->a[i]), rep);
		if (!n)
			continue;
		if (i >= sh->k) { /* read only */
			if (rep[0] != me)
				s->er++;
			continue;
		}
		if (rep[0] != me && !prim[rep[0]]) {
			prim[rep[0]] = true;
			s->ew += 2;
			s->emsg++;
		}
		for (unsigned j = 1; j < n; j++)
			if (rep[j] != me && !pair[rep[0]][rep[j]]) {
				pair[rep[0]][rep[j]] = true;
				s->ew++;
			}
	}
}

static void slot_start(struct txslot *s);

static void slot_end(struct txslot *s, int outcome)
{
	struct txrun *r = s->run;
	uint64_t now = bu_now_ns();
	if (s->tx)
		farm_tx_free(s->tx);
	s->tx = NULL;
	if (outcome == 0) {
		r->commits++;
		r->increments += r->sh->k;
		r->ew += s->ew;
		r->emsg += s->emsg;
		r->er += s->er;
		samp_add(&r->lat, now - s->t0);
		samp_add(&r->clat, now - s->tc);
	} else if (farm_tx_retryable(outcome)) {
		r->aborts++;
		if (getenv("TXN_BENCH_DEBUG") && r->aborts < 5)
			fprintf(stderr, "debug %s: abort %s after %.1f us\n",
			        r->sh->name, farm_strerror(outcome),
			        (double)(now - s->t0) / 1e3);
	} else {
		r->errors++;
		if (!r->fatal) {
			r->fatal = outcome;
			fprintf(stderr, PROG ": %s: transaction failed: %s\n",
			        r->sh->name, farm_strerror(outcome));
		}
	}
	r->inflight--;
	if (r->active && !r->fatal && s->starting) {
		s->deferred = true;
		r->ndeferred++;
	} else if (r->active && !r->fatal) {
		slot_start(s);
	}
}

static void commit_cb(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	slot_end(ctx, outcome);
}

static void read_cb(farm_tx *tx, void *ctx, int status, const void *data,
                    uint32_t size)
{
	(void)data;
	(void)size;
	struct txslot *s = ctx;
	if (status && !s->err)
		s->err = status;
	if (--s->pending)
		return;
	int rc = s->err;
	for (unsigned i = 0; !rc && i < s->run->sh->k; i++) {
		uint64_t *w;
		rc = farm_tx_write(tx, s->a[i], (void **)&w);
		if (!rc)
			(*w)++;
	}
	if (!rc) {
		s->tc = bu_now_ns();
		rc = farm_tx_commit(tx, commit_cb, s);
	}
	if (rc)
		slot_end(s, rc);
}

static void slot_start1(struct txslot *s);

static void slot_start(struct txslot *s)
{
	s->starting = true;
	slot_start1(s);
	s->starting = false;
}

/* The slots whose transaction ended inside its start, started again. */
static void restart_deferred(struct txrun *r)
{
	for (unsigned i = 0; r->ndeferred && i < r->depth; i++) {
		struct txslot *s = &r->slots[i];
		if (!s->deferred)
			continue;
		s->deferred = false;
		r->ndeferred--;
		if (r->active && !r->fatal)
			slot_start(s);
	}
}

static void slot_start1(struct txslot *s)
{
	struct txrun *r = s->run;
	const struct shape *sh = r->sh;
	unsigned n = sh->k + sh->ro;
	for (unsigned i = 0; i < n; i++) {
		uint32_t mm = sh->mach[i];
		farm_gaddr a;
		bool dup;
		uint32_t nt = g_sh->m[mm].ntx,
		         part = g_opt.shared_objs ? 1 : r->depth;
		do {
			uint32_t x =
			        (uint32_t)(bu_rand64(&r->rnd) % (nt / part));
			a = g_sh->tx[mm][x * part +
			                 (g_opt.shared_objs ? 0 : s->idx)];
			dup = false;
			for (unsigned j = 0; j < i; j++)
				dup |= s->a[j] == a;
		} while (dup);
		s->a[i] = a;
	}
	expected_work(s, sh, r->m->node, r->m->id);
	r->inflight++;
	s->err = 0;
	s->t0 = bu_now_ns();
	int rc = farm_tx_begin(r->m->txm, r->m->loop, &s->tx);
	if (rc) {
		s->tx = NULL;
		slot_end(s, rc);
		return;
	}
	s->pending = n + 1; /* +1: held until every read is issued */
	for (unsigned i = 0; i < n; i++) {
		rc = farm_tx_read(s->tx, s->a[i], OBJ_SIZE, read_cb, s);
		if (rc) {
			s->err = s->err ? s->err : rc;
			s->pending--;
		}
	}
	read_cb(s->tx, s, 0, NULL, 0);
}

double ratio_or(double a, double b)
{
	return b > 0 ? a / b : 0;
}

int run_tx(struct mach *m, const struct shape *sh, unsigned depth,
           double seconds, struct txrun *r, struct run_res *out)
{
	uint64_t *lv = r->lat.v, *cv = r->clat.v;
	memset(r, 0, sizeof(*r));
	r->lat.v = lv;
	r->clat.v = cv;
	r->m = m;
	r->sh = sh;
	r->depth = depth;
	r->rnd = bu_now_ns();
	farm_txm_stats s0, s1;
	farm_txm_stats_get(m->txm, &s0);
	r->active = true;
	uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	for (unsigned i = 0; i < depth; i++) {
		r->slots[i].run = r;
		r->slots[i].idx = i;
		slot_start(&r->slots[i]);
	}
	while (bu_now_ns() < end && !interrupted && !r->fatal) {
		(void)farm_loop_poll(m->loop);
		restart_deferred(r);
	}
	r->active = false;
	uint64_t dl = bu_now_ns() + 10 * NS_PER_S;
	while (r->inflight && bu_now_ns() < dl)
		(void)farm_loop_poll(m->loop);
	uint64_t t1 = bu_now_ns();
	if (r->inflight) {
		fprintf(stderr, PROG ": %s: %u transactions never finished\n",
		        sh->name, r->inflight);
		return -ETIMEDOUT;
	}
	farm_txm_stats_get(m->txm, &s1);
	if (getenv("TXN_BENCH_DEBUG")) {
		uint64_t slow = 0;
		for (size_t i = 0; i < r->lat.n; i++)
			slow += r->lat.v[i] > 1000000;
		fprintf(stderr,
		        "debug %s depth %u: commits %" PRIu64
		        " slow(>1ms) %" PRIu64 " log_full %" PRIu64
		        " truncates %" PRIu64 " aborts c/v/f/n %" PRIu64
		        "/%" PRIu64 "/%" PRIu64 "/%" PRIu64 " elapsed %.3f s\n",
		        sh->name, depth, r->commits, slow,
		        s1.log_full - s0.log_full, s1.truncates - s0.truncates,
		        s1.aborts_conflict - s0.aborts_conflict,
		        s1.aborts_validation - s0.aborts_validation,
		        s1.aborts_failure - s0.aborts_failure,
		        s1.aborts_nospace - s0.aborts_nospace, (t1 - t0) / 1e9);
	}
	g_increments += r->increments;
	memset(out, 0, sizeof(*out));
	out->commits = r->commits;
	out->aborts = r->aborts;
	out->errors = r->errors;
	out->tps = (double)r->commits / ((double)(t1 - t0) / 1e9);
	samp_pcts(&r->lat, &out->p50_us, &out->p99_us);
	samp_pcts(&r->clat, &out->cp50_us, &out->cp99_us);
	out->max_us = r->lat.n ? (double)r->lat.v[r->lat.n - 1] / 1e3 : 0;
	out->p50_us /= 1e3;
	out->p99_us /= 1e3;
	out->cp50_us /= 1e3;
	out->cp99_us /= 1e3;
	uint64_t dc = s1.commits - s0.commits;
	if (dc != r->commits)
		fprintf(stderr,
		        PROG ": %s: %" PRIu64 " commits seen, the counters "
		             "say %" PRIu64 "\n",
		        sh->name, r->commits, dc);
	out->w = ratio_or((double)(s1.commit_writes - s0.commit_writes),
	                  (double)dc);
	out->msgs =
	        ratio_or((double)(s1.commit_msgs - s0.commit_msgs), (double)dc);
	out->r = ratio_or((double)(s1.commit_reads - s0.commit_reads),
	                  (double)dc);
	out->trunc =
	        ratio_or((double)(s1.truncates - s0.truncates), (double)dc);
	out->w_exp = ratio_or((double)r->ew, (double)r->commits);
	out->msgs_exp = ratio_or((double)r->emsg, (double)r->commits);
	out->r_exp = ratio_or((double)r->er, (double)r->commits);
	return r->fatal;
}

/* ---- lock-free reads and raw READs --------------------------------------- */

static void lf_issue(struct lfslot *s);

static void lf_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct lfslot *s = ctx;
	struct lfrun *r = s->run;
	r->inflight--;
	if (status) {
		if (!r->fatal) {
			r->fatal = 1;
			fprintf(stderr, PROG ": read failed: %s\n",
			        farm_strerror(status));
		}
		return;
	}
	r->ops++;
	if (r->timed)
		samp_add(&r->lat, bu_now_ns() - s->t0);
	if (r->active)
		lf_issue(s);
}

static void lf_issue(struct lfslot *s)
{
	struct lfrun *r = s->run;
	uint32_t i = (uint32_t)(bu_rand64(&r->rnd) % r->nobj);
	farm_gaddr a = r->objs[i];
	if (r->timed)
		s->t0 = bu_now_ns();
	int rc;
	if (r->kind == LF_READ) {
		rc = farm_lf_read(r->m->txm, r->m->loop, a, OBJ_SIZE,
		                  UINT64_MAX, s->buf, lf_cb, s);
	} else {
		uint32_t len = r->kind == RAW_64 ? 64 : 128;
		uint32_t reg = farm_gaddr_region(a), j = 0;
		while (j + 1 < r->nreg && r->reg_id[j] != reg)
			j++;
		s->wr = farm_wr_read(0, s->buf, r->mr, len, &r->descs[j],
		                     farm_gaddr_offset(a));
		rc = farm_loop_rdma(r->m->loop, 1, &s->wr, lf_cb, s);
	}
	if (rc) {
		if (!r->fatal) {
			r->fatal = 1;
			fprintf(stderr, PROG ": posting a read: %s\n",
			        farm_strerror(rc));
		}
		return;
	}
	r->inflight++;
}

/* Reads per second (0 on failure). */
double run_lf(struct lfrun *r, int kind, unsigned depth, double seconds,
              bool timed, const farm_gaddr *objs, uint32_t nobj)
{
	r->kind = kind;
	r->timed = timed;
	r->objs = objs;
	r->nobj = nobj;
	r->ops = 0;
	r->fatal = 0;
	r->lat.n = 0;
	r->rnd = bu_now_ns();
	r->active = true;
	uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	for (unsigned i = 0; i < depth; i++) {
		r->slots[i].run = r;
		lf_issue(&r->slots[i]);
	}
	while (bu_now_ns() < end && !interrupted && !r->fatal)
		(void)farm_loop_poll(r->m->loop);
	r->active = false;
	uint64_t dl = bu_now_ns() + 10 * NS_PER_S;
	while (r->inflight && bu_now_ns() < dl)
		(void)farm_loop_poll(r->m->loop);
	uint64_t t1 = bu_now_ns();
	if (r->inflight || r->fatal)
		return 0;
	return (double)r->ops / ((double)(t1 - t0) / 1e9);
}

/* region_replicas' cache: per process, filled on first use of a region
 * (a small open-addressed table; regions beyond it are asked each
 * time). */
#define REPCACHE 256u
static struct {
	uint32_t region; /* 0: empty */
	unsigned n;
	uint32_t rep[FARM_REPLICAS_MAX];
} g_repcache[REPCACHE];

unsigned region_replicas(farm_node *n, uint32_t region,
                         uint32_t rep[FARM_REPLICAS_MAX])
{
	unsigned h = (region * 2654435761u) % REPCACHE;
	for (unsigned k = 0; k < REPCACHE; k++) {
		unsigned i = (h + k) % REPCACHE;
		if (g_repcache[i].region == region) {
			memcpy(rep, g_repcache[i].rep,
			       g_repcache[i].n * sizeof(*rep));
			return g_repcache[i].n;
		}
		if (g_repcache[i].region)
			continue;
		struct farm_replicas r;
		farm_gaddr a = farm_gaddr_make(region, 0);
		if (farm_replicas(n, a, &r))
			return 0;
		g_repcache[i].rep[0] = r.primary;
		for (unsigned j = 0; j < r.nbackups; j++)
			g_repcache[i].rep[j + 1] = r.backups[j];
		g_repcache[i].n = 1 + r.nbackups;
		g_repcache[i].region = region;
		memcpy(rep, g_repcache[i].rep, g_repcache[i].n * sizeof(*rep));
		return g_repcache[i].n;
	}
	return 0;
}
