/*
 * recovery_bench: how fast a local cluster gets back to work after it
 * loses a machine (issue 12, FaRM SOSP'15 section 6.5, Figure 9).
 *
 * One private ZooKeeper server (scripts/zk-local; its data on tmpfs under
 * /dev/shm unless --zk-disk) serves every run. A run is a fresh cluster of
 * 4 machine processes forked by the benchmark (shm fabric, membership and
 * leases through ZooKeeper, 3 replicas, one loop each run by the process's
 * own thread, busy polling off unless --busy-poll; data directories under
 * /dev/shm). Each machine makes --accounts accounts (16 bytes: a balance
 * and a write counter) in its own regions, then runs a closed-loop
 * workload with --depth (8) operations in flight: 70% transfers between
 * two random
 * accounts of the whole cluster (read both, write both: balance moved,
 * each account's counter + 1; retried while the outcome is retryable),
 * 30% lock-free lookups of a random account. Every completed operation is
 * counted in the machine's 1 ms bucket (a shared mapping made before the
 * fork).
 *
 * After --pre-ms of steady load the benchmark hits one machine:
 *   member   kill -9 of machine 2 (not the CM)              (--runs)
 *   cm       kill -9 of the configuration manager            (--cm-runs)
 *   sigstop  SIGSTOP of machine 2 (only its leases can tell)  (--stop-runs)
 * and waits until every survivor has its regions active again, then
 * --post-ms more. A stopped machine is then continued (SIGCONT): it must
 * find itself removed and commit nothing more. Then every survivor stops,
 * and the lowest one reads every account lock-free (a locked one is a
 * lock recovery left behind) and sums them in one read-only transaction.
 *
 * The timeline of each run (Figure 9), in ms after the kill, from the
 * survivors' recovery steps and counters (CLOCK_MONOTONIC, one clock on
 * one host):
 *   suspect      the first suspicion of the victim (a lease lapsed)
 *   probe        the end of the first probe that asked to remove it
 *   zk           the CM's compare-and-set of configuration c+1 returned
 *   config_first, config_last  the first and the last survivor took it
 *   txn_recover  the last survivor's transaction layer took it (the CM
 *                first waits one lease length)
 *   commit       every survivor had taken it: REC_GO (NEW-CONFIG-COMMIT)
 *   active       the last survivor's promoted regions became active
 *   80pct        the survivors' throughput is back to 80% of what they did
 *                in the --base-ms before the kill: the start of the first
 *                window after the suspicion whose mean is at least that.
 *                The window is the shortest multiple of --window-ms in
 *                which 90% of the steady state's own windows pass the same
 *                test (1 ms buckets hold a few operations on a loaded
 *                2-core host; a burst must not count as recovered).
 *
 * Checks of every run (lost commits): the total of all balances is what
 * was created; every account's final counter is at least the highest one
 * any transfer reported committed wrote into it; the counters sum to twice
 * the transfers reported committed (plus up to 2 per commit the victim
 * had in flight); and, from a log of every transfer each machine was told
 * committed (accounts, counter values written, when), the values written
 * into each account are 1, 2, .., its final counter, each once: a value
 * written twice or above the final one is a lost commit, named with its
 * machine, its times and the transfer that overwrote it. After the
 * survivors stop, no account may be left locked (a lock-free read of
 * each).
 *
 * False suspicions: the first member run holds its steady load for
 * --fs-secs (120) before the kill: every suspicion before a kill (that
 * run's and every other's), every suspicion a survivor withdrew, and every
 * survivor removed counts as false.
 *
 * Output: a line per run, the distributions (median, p90, max), the
 * throughput timeline of the member run with the median recovery time as
 * a gnuplot data file and PNG (bench/recovery_plot.gp, when gnuplot is
 * installed) in --out, then, last, one JSON line (bench/README.md).
 */
#include "benchnode.h"
#include "benchutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <farm/farm.h>
#include <farm/txn.h>

#include "addrspace/membership.h"
#include "node/node.h"
#include "recovery/lease.h"
#include "recovery/recovery.h"
#include "util/common.h"
#include "util/config.h"
#include "zklocal.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (scripts/zk-local)"
#endif

#define PROG "recovery_bench"
#define NM   4u
/* Accounts per machine, at most: the final sum reads every account in one
 * read-only transaction, whose validation posts one READ per remote object
 * at once; more than the endpoint's 1024 at one machine fail with -EAGAIN
 * (msg_int.h EP_DEPTH), and a machine that took over the victim's regions
 * holds about 2 machines' worth. */
#define MAX_ACCT   320u
#define INIT_BAL   1000
#define MAX_RUNS   200u
#define JOIN_MS    30000
#define RECOV_MS   10000 /* a run fails without recovery within this */
#define SESSION_MS 4000
#define NSCEN      3

enum scen { SC_MEMBER, SC_CM, SC_STOP };
static const char *const scen_name[NSCEN] = {"member", "cm", "sigstop"};

/* Machine states (struct mstat.state). */
enum { ST_NONE, ST_CREATED, ST_DONE, ST_SCANNED, ST_FAILED };
/* Commands (struct shared.cmd). */
enum { C_WAIT, C_GO, C_STOP, C_SCAN, C_QUIT };

/* What one machine publishes (only it writes its slot). */
struct mstat {
	_Atomic int state;
	int fail_rc;
	char fail_what[48];
	uint32_t nacct;
	farm_fatptr acct[MAX_ACCT];
	/* The workload. */
	_Atomic uint64_t transfers, lookups, declined, retries, failed;
	_Atomic int inflight;   /* transfers inside their commit */
	_Atomic uint32_t nclog; /* entries in its commit log */
	int first_err;
	char first_err_what[64]; /* which operation, when */
	/* Retried outcomes by code (the first NERR codes seen). */
	int rcode[8], rphase[8];
	uint64_t rcount[8];
	int64_t rlast_ms[8]; /* the last one, ms after go */
	/* Operations that took over 100 ms (debugging): the first 16. */
	struct slow {
		int64_t start_ms; /* after t0 */
		uint32_t ms;
		int rc, lookup, phase;
		uint32_t acct_a, acct_b;
	} slow[16];
	unsigned nslow;
	/* Refreshed every ms by the workload. */
	_Atomic uint64_t t_active, config_id, suspicions;
	_Atomic uint32_t cm;
	_Atomic bool removed;
	/* At the end. */
	struct farm_recovery_stats rs;
	struct farm_txm_stats ts;
	struct farm_membership_status ms;
	unsigned members; /* in its final configuration */
};

struct shared {
	_Atomic int cmd;
	uint64_t t0; /* bucket 0 starts here */
	uint32_t nbuckets;
	uint32_t scanner;
	struct mstat m[NM];
	/* The highest counter each machine's committed transfers wrote into
	 * each account (index: machine * nacct + slot). */
	uint64_t maxw[NM][NM * MAX_ACCT];
	/* The scanner's result. */
	int sum_rc;
	char sum_where[32]; /* which call failed */
	unsigned sum_tries, lf_read, lf_locked, lf_other;
	uint32_t locked_acct[4]; /* the first accounts found locked */
	int lf_err;
	int64_t total;
	uint64_t ctr[NM * MAX_ACCT];
};

/* Per-ms counts: ops[m][b] (transfers and lookups), xfers[m][b]. */
static uint32_t *g_ops, *g_xfers;

/* Every transfer a machine was told committed: the two accounts and the
 * counter values it wrote into them (CLOG_CAP per machine, in a shared
 * mapping; a machine past it stops logging and the check says so). */
struct clog {
	uint16_t ia, ib;
	uint32_t ca, cb;
	uint32_t t_begin, t_end; /* us after t0: started, told committed */
};
#define CLOG_CAP (1u << 19)
static struct clog *g_clog; /* [NM][CLOG_CAP] */
static struct shared *SH;

static struct opts {
	unsigned runs, cm_runs, stop_runs;
	unsigned accounts, depth, lease_us, pre_ms, post_ms, base_ms;
	unsigned window_ms;
	unsigned fs_secs;
	bool busy_poll, zk_disk, verbose, quick;
	const char *zk_dir_base, *zk_script, *out;
	uint64_t seed;
} O = {
        .runs = 20,
        .cm_runs = 5,
        .stop_runs = 5,
        .accounts = 256,
        .depth = 8,
        .pre_ms = 1500,
        .post_ms = 1200,
        .base_ms = 500,
        .window_ms = 5,
        .fs_secs = 120,
        .zk_script = FARM_SOURCE_DIR "/scripts/zk-local",
};

static volatile sig_atomic_t interrupted;
static pid_t g_pid[NM];
static char g_zk_dir[256], g_zk_connect[64];

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static uint64_t now_ns(void)
{
	return farm_now_ns();
}

static void nap_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

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

struct acct {
	int64_t balance;
	uint64_t ctr; /* committed transfers that wrote it */
};

static uint64_t rnd(struct mach *c)
{
	return farm_rand64(&c->rng);
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

/* The machine's accounts, in transactions of 16. */
static int create_accounts(struct mach *c)
{
	unsigned n = O.accounts;
	for (unsigned done = 0; done < n;) {
		unsigned k = FARM_MIN(16u, n - done);
		farm_tx *tx;
		int rc = farm_tx_begin(c->txm, c->loop, &tx);
		if (rc)
			return rc;
		for (unsigned j = 0; j < k && !rc; j++) {
			void *d;
			rc = farm_tx_alloc_sync(tx, sizeof(struct acct),
			                        FARM_GADDR_NULL,
			                        &c->st->acct[done + j], &d);
			if (!rc) {
				struct acct a = {.balance = INIT_BAL};
				memcpy(d, &a, sizeof(a));
			}
		}
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (rc == 0)
			done += k;
		else if (!farm_tx_retryable(rc))
			return rc;
	}
	c->st->nacct = n;
	return 0;
}

static void bump(struct mach *c, uint32_t *counts)
{
	uint64_t b = (now_ns() - SH->t0) / 1000000ull;
	if (b < SH->nbuckets)
		counts[(size_t)c->me * SH->nbuckets + b]++;
}

static bool running(struct mach *c)
{
	return atomic_load(&SH->cmd) == C_GO && !atomic_load(&c->st->removed);
}

static void note_error(struct mach *c, int rc, const char *what)
{
	atomic_fetch_add(&c->st->failed, 1);
	if (!c->st->first_err) {
		c->st->first_err = rc;
		snprintf(c->st->first_err_what, sizeof(c->st->first_err_what),
		         "%s, %" PRId64 " ms after go", what,
		         (int64_t)((now_ns() - SH->t0) / 1000000ull));
		fprintf(stderr, PROG ": machine %u: %s: %s\n", c->me,
		        c->st->first_err_what, farm_strerror(rc));
	}
}

/* One operation in flight: a transfer (its reads, then its commit) or a
 * lookup. A transfer whose outcome is retryable runs again after a
 * backoff (retry_at), with the same accounts. */
struct slot {
	struct mach *c;
	farm_tx *tx;
	bool busy, lookup;
	unsigned ia, ib, pending, tries;
	int64_t amt;
	int err;
	uint64_t retry_at, t_start;
	int phase; /* 1 reading, 2 committing */
	struct acct a, b, lk;
};

static void slot_start(struct slot *s);

static void slot_end(struct slot *s, int rc)
{
	struct mach *c = s->c;
	uint64_t now = now_ns();
	if (now - s->t_start > 100000000ull) { /* the last 16 */
		struct slow *w = &c->st->slow[c->st->nslow++ % 16];
		w->start_ms = (int64_t)((s->t_start - SH->t0) / 1000000ull);
		w->ms = (uint32_t)((now - s->t_start) / 1000000ull);
		w->rc = rc;
		w->lookup = s->lookup;
		w->phase = s->phase;
		w->acct_a = s->ia;
		w->acct_b = s->ib;
	}
	if (s->tx)
		farm_tx_free(s->tx);
	s->tx = NULL;
	s->busy = false;
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
				        (int64_t)((now - SH->t0) / 1000000ull);
				break;
			}
		s->retry_at = now_ns() + (1000ull << FARM_MIN(s->tries, 10u));
		s->tries++;
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
		uint64_t *mw = SH->maxw[c->me];
		mw[s->ia] = FARM_MAX(mw[s->ia], s->a.ctr);
		mw[s->ib] = FARM_MAX(mw[s->ib], s->b.ctr);
		uint32_t k = atomic_load(&c->st->nclog);
		if (k < CLOG_CAP) {
			g_clog[(size_t)c->me * CLOG_CAP + k] = (struct clog){
			        .ia = (uint16_t)s->ia,
			        .ib = (uint16_t)s->ib,
			        .ca = (uint32_t)s->a.ctr,
			        .cb = (uint32_t)s->b.ctr,
			        .t_begin = (uint32_t)((s->t_start - SH->t0) /
			                              1000),
			        .t_end =
			                (uint32_t)((now_ns() - SH->t0) / 1000)};
			atomic_store(&c->st->nclog, k + 1);
		}
		atomic_fetch_add(&c->st->transfers, 1);
	}
	atomic_fetch_sub(&c->st->inflight, 1);
	slot_end(s, outcome);
}

static void reads_done(struct slot *s)
{
	if (--s->pending)
		return;
	int rc = s->err;
	if (!rc && s->a.balance < s->amt) {
		atomic_fetch_add(&s->c->st->declined, 1);
		slot_end(s, 0); /* read-only: nothing to commit */
		return;
	}
	void *wa, *wb;
	if (!rc && !(rc = farm_tx_write(s->tx, s->c->acc[s->ia].addr, &wa)) &&
	    !(rc = farm_tx_write(s->tx, s->c->acc[s->ib].addr, &wb))) {
		s->a.balance -= s->amt;
		s->a.ctr++;
		s->b.balance += s->amt;
		s->b.ctr++;
		memcpy(wa, &s->a, sizeof(s->a));
		memcpy(wb, &s->b, sizeof(s->b));
		/* Counted before the commit can be decided: a machine killed
		 * inside it may or may not have committed. */
		atomic_fetch_add(&s->c->st->inflight, 1);
		s->phase = 2;
		rc = farm_tx_commit(s->tx, commit_cb, s);
		if (rc)
			atomic_fetch_sub(&s->c->st->inflight, 1);
	}
	if (rc)
		slot_end(s, rc);
}

static void read_cb(farm_tx *tx, void *ctx, int status, const void *data,
                    struct acct *into)
{
	(void)tx;
	struct slot *s = ctx;
	if (status && !s->err)
		s->err = status;
	if (!status)
		memcpy(into, data, sizeof(*into));
	reads_done(s);
}

static void read_a_cb(farm_tx *tx, void *ctx, int status, const void *data,
                      uint32_t size)
{
	(void)size;
	read_cb(tx, ctx, status, data, &((struct slot *)ctx)->a);
}

static void read_b_cb(farm_tx *tx, void *ctx, int status, const void *data,
                      uint32_t size)
{
	(void)size;
	read_cb(tx, ctx, status, data, &((struct slot *)ctx)->b);
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
	s->busy = true;
	s->retry_at = 0;
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
	if ((rc = farm_tx_begin(c->txm, c->loop, &s->tx))) {
		s->tx = NULL;
		slot_end(s, rc);
		return;
	}
	s->err = 0;
	s->pending = 3; /* two reads, and one held until both are issued */
	if ((rc = farm_tx_read(s->tx, c->acc[s->ia].addr, sizeof(s->a),
	                       read_a_cb, s))) {
		s->err = rc;
		s->pending--;
	}
	if ((rc = farm_tx_read(s->tx, c->acc[s->ib].addr, sizeof(s->b),
	                       read_b_cb, s))) {
		s->err = s->err ? s->err : rc;
		s->pending--;
	}
	reads_done(s);
}

/* What the parent watches while it waits (every ms). */
static void publish(struct mach *c)
{
	farm_txm_stats ts;
	farm_txm_stats_get(c->txm, &ts);
	atomic_store(&c->st->t_active, ts.rec_t_active_ns);
	atomic_store(&c->st->config_id, farm_node_config_id(c->node));
	struct farm_recovery_stats rs;
	farm_recovery_stats(farm_node_recovery(c->node), &rs);
	atomic_store(&c->st->suspicions, rs.suspicions + rs.lease.lost);
	atomic_store(&c->st->cm, rs.cm);
	atomic_store(&c->st->removed, farm_node_removed(c->node));
}

/* --depth operations in flight until told to stop (or removed), then
 * until every one has ended. */
static int workload(struct mach *c)
{
	static const volatile int never = 0;
	struct slot *slots = calloc(O.depth, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (unsigned i = 0; i < O.depth; i++) {
		slots[i].c = c;
		slot_start(&slots[i]);
	}
	uint64_t last = UINT64_MAX;
	while (running(c)) {
		uint64_t now = now_ns();
		uint64_t b = (now - SH->t0) / 1000000ull;
		if (b != last) {
			last = b;
			publish(c);
		}
		uint64_t next = now + 1000000ull;
		for (unsigned i = 0; i < O.depth; i++) {
			struct slot *s = &slots[i];
			if (s->busy)
				continue;
			if (s->retry_at <= now)
				slot_start(s);
			else
				next = FARM_MIN(next, s->retry_at);
		}
		(void)farm_loop_wait(c->loop, &never,
		                     next > now ? next - now : 1000);
	}
	uint64_t dl = now_ns() + 10000000000ull;
	while (c->busy && now_ns() < dl)
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	publish(c);
	int rc = c->busy ? -ETIMEDOUT : 0;
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
		struct acct a;
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
			SH->lf_read++;
		} else if (rc == -EBUSY) {
			SH->locked_acct[SH->lf_locked] = i;
			SH->lf_locked++;
			if (SH->lf_locked == 4)
				break; /* 1 s each: enough evidence */
		} else {
			if (!SH->lf_other++)
				SH->lf_err = rc;
		}
	}
	int rc = 0;
	for (unsigned t = 0; t < 20; t++) {
		if (t)
			serve_ms(c, 20);
		SH->sum_tries++;
		SH->total = 0;
		farm_tx *tx;
		rc = farm_tx_begin(c->txm, c->loop, &tx);
		snprintf(SH->sum_where, sizeof(SH->sum_where), "begin");
		if (rc)
			break;
		for (unsigned i = 0; i < c->nacc && !rc; i++) {
			const void *d;
			rc = farm_tx_read_sync(tx, c->acc[i].addr,
			                       sizeof(struct acct), &d);
			snprintf(SH->sum_where, sizeof(SH->sum_where),
			         "read of account %u", i);
			if (!rc) {
				struct acct a;
				memcpy(&a, d, sizeof(a));
				SH->total += a.balance;
				SH->ctr[i] = a.ctr;
			}
		}
		if (!rc) {
			rc = farm_tx_commit_sync(tx);
			snprintf(SH->sum_where, sizeof(SH->sum_where),
			         "commit");
		}
		farm_tx_free(tx);
		if (!rc || !farm_tx_retryable(rc))
			break;
	}
	SH->sum_rc = rc;
}

static int wait_cmd(struct mach *c, int want)
{
	for (;;) {
		int cmd = atomic_load(&SH->cmd);
		if (cmd >= want)
			return cmd;
		if (getppid() == 1)
			return -1;
		serve_ms(c, 1);
	}
}

static int machine(uint32_t me, const char *root, const char *zk_root)
{
	struct mach c = {.me = me, .st = &SH->m[me]};
	c.rng = now_ns() ^ O.seed ^ ((uint64_t)me << 40) ^
	        0x9e3779b97f4a7c15ull;
	struct farm_config cfg;
	farm_config_defaults(&cfg);
	char v[320];
	int rc = 0;
	snprintf(v, sizeof(v), "%u", me);
	rc |= bn_cfg_set(PROG, &cfg, "machine_id", v);
	snprintf(v, sizeof(v), "%s/m%u", root, me);
	if (mkdir(v, 0700) && errno != EEXIST)
		rc = -errno;
	rc |= bn_cfg_set(PROG, &cfg, "data_dir", v);
	rc |= bn_cfg_set(PROG, &cfg, "region_size", "16M");
	rc |= bn_cfg_set(PROG, &cfg, "threads", "1");
	rc |= bn_cfg_set(PROG, &cfg, "replicas", "3");
	rc |= bn_cfg_set(PROG, &cfg, "busy_poll", O.busy_poll ? "1" : "0");
	rc |= bn_cfg_set(PROG, &cfg, "zk", g_zk_connect);
	rc |= bn_cfg_set(PROG, &cfg, "zk_root", zk_root);
	snprintf(v, sizeof(v), "%u", SESSION_MS);
	rc |= bn_cfg_set(PROG, &cfg, "zk_session_ms", v);
	if (O.lease_us) {
		snprintf(v, sizeof(v), "%u", O.lease_us);
		rc |= bn_cfg_set(PROG, &cfg, "lease_us", v);
	}
	if (rc) {
		fail(&c, "configuration", -EINVAL);
		return 3;
	}
	if ((rc = bn_node_open(PROG, &cfg, me, &c.node))) {
		fail(&c, "open", rc);
		return 4;
	}
	farm_node_set_app_loops(c.node, true);
	int st = 5;
	if ((rc = farm_node_start(c.node, JOIN_MS)) ||
	    (rc = farm_node_loop_open(c.node, 0, &c.loop))) {
		fail(&c, "start", rc);
		goto out;
	}
	st = 6;
	if ((rc = farm_node_wait_members(c.node, NM, JOIN_MS))) {
		fail(&c, "join", rc);
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
	c.nacc = NM * O.accounts;
	c.acc = calloc(c.nacc, sizeof(*c.acc));
	if (!c.acc)
		goto out;
	for (unsigned i = 0; i < NM; i++)
		memcpy(c.acc + i * O.accounts, SH->m[i].acct,
		       O.accounts * sizeof(*c.acc));
	if ((rc = workload(&c))) {
		fail(&c, "workload", rc);
		goto out;
	}
	farm_recovery_stats(farm_node_recovery(c.node), &c.st->rs);
	farm_txm_stats_get(c.txm, &c.st->ts);
	(void)farm_membership_status(farm_node_membership(c.node), &c.st->ms);
	struct farm_view *view = malloc(sizeof(*view));
	if (view && !farm_node_view(c.node, view))
		c.st->members = view->n;
	free(view);
	atomic_store(&c.st->state, ST_DONE);
	int cmd = wait_cmd(&c, C_SCAN);
	if (cmd == C_SCAN && SH->scanner == me) {
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

/* ---- ZooKeeper ------------------------------------------------------- */

/* scripts/zk-local @verb on g_zk_dir (tests/zklocal.h). */
static int zk_local(const char *verb, char *line, size_t len)
{
	return zkl_run(O.zk_disk ? "ZK_LOCAL_SYNC=yes" : NULL, O.zk_script,
	               verb, g_zk_dir, line, len);
}

static int zk_start(void)
{
	const char *base = O.zk_dir_base ? O.zk_dir_base
	                   : O.zk_disk   ? "/var/tmp"
	                                 : "/dev/shm";
	snprintf(g_zk_dir, sizeof(g_zk_dir), "%s/farm-recbench-zk-XXXXXX",
	         base);
	if (!mkdtemp(g_zk_dir)) {
		fprintf(stderr, PROG ": mkdtemp %s: %s\n", g_zk_dir,
		        strerror(errno));
		return 1;
	}
	int st = zk_local("start", g_zk_connect, sizeof(g_zk_connect));
	if (st == 0)
		return 0;
	if (st == 3)
		fprintf(stderr, PROG ": java or the ZooKeeper jars are not "
		                     "installed (scripts/install-deps)\n");
	else
		fprintf(stderr,
		        PROG ": zk-local start failed (%d); see %s/zk.log\n",
		        st, g_zk_dir);
	zk_local("stop", NULL, 0);
	if (st != 3)
		return 1;
	bu_rm_tree(AT_FDCWD, g_zk_dir, 3);
	g_zk_dir[0] = 0;
	return 77;
}

static void zk_stop(void)
{
	if (!g_zk_dir[0])
		return;
	if (zk_local("stop", NULL, 0))
		fprintf(stderr, PROG ": zk-local stop failed\n");
	bu_rm_tree(AT_FDCWD, g_zk_dir, 4);
	g_zk_dir[0] = 0;
}

/* ---- one run (parent) ------------------------------------------------ */

/* Timeline steps, ms after the kill (NAN: not seen):
 *   suspect       the first suspicion of the victim (any survivor)
 *   probe         the end of the first probe that asked to remove it
 *   zk            the compare-and-set of the configuration without it
 *   config_first, config_last  the first and the last survivor took it
 *   txn_recover   the last survivor's transaction layer took it (after
 *                 the CM's lease wait)
 *   commit        REC_GO: every survivor had (NEW-CONFIG-COMMIT)
 *   active        the last survivor's promoted regions became active
 *   80pct         survivors back to 80% of their pre-failure rate */
enum {
	T_SUSPECT,
	T_PROBE,
	T_ZK,
	T_CFG_FIRST,
	T_CFG_LAST,
	T_TXREC,
	T_COMMIT,
	T_ACTIVE,
	T_80,
	NT
};
static const char *const t_name[NT] = {
        "suspect",     "probe",  "zk",     "config_first", "config_last",
        "txn_recover", "commit", "active", "80pct"};

struct run {
	enum scen sc;
	unsigned victim;
	bool ok;         /* recovered, checks run */
	char why[512];   /* what failed */
	double t[NT];    /* ms after the kill */
	double pre_rate; /* survivors' ops per ms before the kill */
	unsigned win;    /* ms: the window 80% is judged over */
	bool win_ok;     /* 90% of the steady state's windows pass */
	double pre_secs; /* steady load before the kill */
	uint64_t false_susp;
	uint64_t lost, phantom, unlocked_checks; /* commits */
	uint64_t zombie;  /* a stopped victim's commits after SIGCONT */
	bool zombie_hung; /* ... its operations had not ended 1 s after */
	uint64_t clog_lost, clog_unreported; /* check_clog */
	double t80_from_suspect;
	uint64_t transfers;
	/* The throughput around the kill (for the plot): from kill - 200. */
	unsigned nplot;
	uint32_t *plot_ops, *plot_xfers;
};

static double ms_after(uint64_t t, uint64_t t_kill)
{
	return t >= t_kill ? (double)(t - t_kill) / 1e6 : NAN;
}

/* The smallest of @t (ms after the kill), NAN when none. */
static double tmin(double a, double b)
{
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	return a < b ? a : b;
}

static double tmax(double a, double b)
{
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	return a > b ? a : b;
}

static void kill_all(void)
{
	for (unsigned i = 0; i < NM; i++)
		if (g_pid[i] > 0) {
			kill(g_pid[i], SIGKILL);
			kill(g_pid[i], SIGCONT);
			waitpid(g_pid[i], NULL, 0);
			g_pid[i] = 0;
		}
}

/* Wait until every machine in @mask is in a state >= @state (or failed);
 * -1 on timeout, failure or interruption. */
static int wait_state(unsigned mask, int state, unsigned ms, char *why,
                      size_t len)
{
	uint64_t dl = now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < NM; i++) {
			if (!(mask & (1u << i)))
				continue;
			int s = atomic_load(&SH->m[i].state);
			if (s == ST_FAILED) {
				snprintf(why, len, "machine %u: %s: %s", i,
				         SH->m[i].fail_what,
				         farm_strerror(SH->m[i].fail_rc));
				return -1;
			}
			all &= s >= state;
		}
		if (all)
			return 0;
		if (interrupted) {
			snprintf(why, len, "interrupted");
			return -1;
		}
		if (now_ns() > dl) {
			snprintf(why, len,
			         "machines did not reach state %d "
			         "within %u ms",
			         state, ms);
			return -1;
		}
		nap_ms(1);
	}
}

/* Survivors' ops in bucket @b. */
static uint32_t surv_ops(unsigned victim, uint64_t b, const uint32_t *arr)
{
	uint32_t s = 0;
	for (unsigned i = 0; i < NM; i++)
		if (i != victim)
			s += arr[(size_t)i * SH->nbuckets + b];
	return s;
}

/* The window "back to 80%" is judged over: the shortest multiple of
 * --window-ms in which at least 90% of the windows of the steady state
 * before the kill (buckets @b0..@b1, @rate ops per ms) reach 80% of
 * @rate, so that the test is one the steady state itself passes. At most
 * 100 ms (*@ok false when even that does not do). */
static unsigned calibrate(unsigned victim, uint64_t b0, uint64_t b1,
                          double rate, bool *ok)
{
	unsigned w = O.window_ms;
	for (; w <= 100; w += O.window_ms) {
		unsigned n = 0, pass = 0;
		for (uint64_t b = b0; b + w <= b1; b++, n++) {
			uint64_t s = 0;
			for (unsigned k = 0; k < w; k++)
				s += surv_ops(victim, b + k, g_ops);
			pass += (double)s >= 0.8 * rate * w;
		}
		if (n && pass >= 0.9 * n) {
			*ok = true;
			return w;
		}
	}
	*ok = false;
	return w - O.window_ms;
}

/* One committed write: account, the counter value written, by whom. */
struct cw {
	uint32_t acct, val, mach, idx, t_begin, t_end;
};

static int cmp_cw(const void *a, const void *b)
{
	const struct cw *x = a, *y = b;
	if (x->acct != y->acct)
		return x->acct < y->acct ? -1 : 1;
	if (x->val != y->val)
		return x->val < y->val ? -1 : 1;
	return (x->mach > y->mach) - (x->mach < y->mach);
}

/*
 * The commit logs against the final counters. Each transfer sets both
 * accounts' counters to what it read + 1, so the values the committed
 * transfers wrote into account j must be 1, 2, .., ctr[j], each once:
 *   a value written twice: two transfers reported committed read the same
 *     state, so one of them was lost (rolled back after it was reported,
 *     or overwritten without being read);
 *   a value above ctr[j]: a committed write is missing;
 *   a value nobody reported: a write of a commit that was not reported
 *     committed (allowed only for the victim's commits in flight, 2 per
 *     commit).
 * Returns the lost commits (duplicates + values above) and counts the
 * unreported writes in *@unreported; the first few violations go to @why.
 */
static uint64_t check_clog(unsigned nacc, uint64_t t_kill_us,
                           uint64_t *unreported, char *why, size_t wl,
                           bool *complete)
{
	size_t n = 0;
	*complete = true;
	for (unsigned i = 0; i < NM; i++) {
		n += 2 * (size_t)SH->m[i].nclog;
		*complete &= SH->m[i].nclog < CLOG_CAP;
	}
	struct cw *w = malloc((n + 1) * sizeof(*w));
	if (!w) {
		*complete = false;
		return 0;
	}
	size_t k = 0;
	for (unsigned i = 0; i < NM; i++)
		for (uint32_t e = 0; e < SH->m[i].nclog; e++) {
			const struct clog *c =
			        &g_clog[(size_t)i * CLOG_CAP + e];
			w[k++] = (struct cw){c->ia, c->ca,      i,
			                     e,     c->t_begin, c->t_end};
			w[k++] = (struct cw){c->ib, c->cb,      i,
			                     e,     c->t_begin, c->t_end};
		}
	qsort(w, n, sizeof(*w), cmp_cw);
	uint64_t lost = 0, unrep = 0;
	size_t o = strlen(why);
	size_t x = 0;
	for (unsigned j = 0; j < nacc; j++) {
		uint32_t expect = 1; /* the next value 1..ctr[j] */
		for (; x < n && w[x].acct == j; x++) {
			const struct cw *c = &w[x];
			bool dup = x > 0 && w[x - 1].acct == j &&
			           w[x - 1].val == c->val;
			bool above = c->val > SH->ctr[j];
			if (c->val > expect && !dup)
				unrep += c->val - expect;
			if (!dup)
				expect = c->val + 1;
			if (!dup && !above)
				continue;
			lost++;
			if (o >= wl - 1 || lost > 4)
				continue;
			/* Times in ms after the kill. */
			double b = ((double)c->t_begin - (double)t_kill_us) /
			           1e3,
			       e = ((double)c->t_end - (double)t_kill_us) / 1e3;
			o += (size_t)snprintf(
			        why + o, wl - o,
			        "%saccount %u (made on machine %u): counter %u "
			        "written by machine "
			        "%u's transfer #%u (begun %+.1f ms, committed "
			        "%+.1f ms after the kill)",
			        o ? "; " : "", j, j / O.accounts, c->val,
			        c->mach, c->idx, b, e);
			if (dup) {
				const struct cw *p = &w[x - 1];
				o += (size_t)snprintf(
				        why + o, wl - FARM_MIN(o, wl),
				        " and by machine %u's transfer #%u "
				        "(begun %+.1f, committed %+.1f ms)",
				        p->mach, p->idx,
				        ((double)p->t_begin -
				         (double)t_kill_us) /
				                1e3,
				        ((double)p->t_end - (double)t_kill_us) /
				                1e3);
			} else {
				o += (size_t)snprintf(
				        why + o, wl - FARM_MIN(o, wl),
				        ", above the final %" PRIu64,
				        SH->ctr[j]);
			}
		}
		if (SH->ctr[j] >= expect)
			unrep += SH->ctr[j] - expect + 1;
	}
	free(w);
	*unreported = unrep;
	return lost;
}

static void show_logs(const char *root)
{
	for (unsigned i = 0; i < NM; i++) {
		char cmd[400];
		snprintf(cmd, sizeof(cmd),
		         "echo '--- machine %u (last lines of its log)' >&2; "
		         "tail -n 8 '%s/m%u.log' >&2",
		         i, root, i);
		if (system(cmd) != 0)
			fprintf(stderr, "(no log of machine %u)\n", i);
	}
}

static pid_t spawn(unsigned i, const char *root, const char *zk_root)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_DFL);
	if (!O.verbose) {
		char path[320];
		snprintf(path, sizeof(path), "%s/m%u.log", root, i);
		if (!freopen(path, "w", stderr))
			_exit(2);
		setvbuf(stderr, NULL, _IOLBF, 0);
	}
	_exit(machine(i, root, zk_root));
}

static int one_run(unsigned idx, enum scen sc, unsigned pre_ms, struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->sc = sc;
	for (unsigned k = 0; k < NT; k++)
		r->t[k] = NAN;
	r->t80_from_suspect = NAN;
	memset(SH, 0, sizeof(*SH));
	SH->nbuckets = pre_ms + RECOV_MS + O.post_ms + 3000;
	size_t nb = (size_t)NM * SH->nbuckets;
	memset(g_ops, 0, nb * sizeof(*g_ops));
	memset(g_xfers, 0, nb * sizeof(*g_xfers));

	char root[256], zk_root[128];
	snprintf(root, sizeof(root), "/dev/shm/farm-recbench-XXXXXX");
	if (!mkdtemp(root)) {
		snprintf(r->why, sizeof(r->why), "mkdtemp: %s",
		         strerror(errno));
		return -1;
	}
	snprintf(zk_root, sizeof(zk_root), "/libfarm/recbench-%d-%u",
	         (int)getpid(), idx);
	for (unsigned i = 0; i < NM; i++) {
		g_pid[i] = spawn(i, root, zk_root);
		if (g_pid[i] < 0) {
			g_pid[i] = 0;
			snprintf(r->why, sizeof(r->why), "fork: %s",
			         strerror(errno));
			kill_all();
			bu_rm_tree(AT_FDCWD, root, 3);
			return -1;
		}
	}
	int rc = wait_state((1u << NM) - 1, ST_CREATED, 2 * JOIN_MS + 30000,
	                    r->why, sizeof(r->why));
	uint64_t t_kill = 0;
	unsigned mask = 0;
	if (rc)
		goto out;
	/* The victim: machine 2, or the CM (all agree on it by now). */
	uint32_t cm = atomic_load(&SH->m[0].cm);
	unsigned victim = sc == SC_CM ? cm : 2;
	if (sc != SC_CM && victim == cm)
		victim = 3;
	r->victim = victim;
	mask = ((1u << NM) - 1) & ~(1u << victim);
	SH->scanner = victim == 0 ? 1 : 0;
	SH->t0 = now_ns();
	atomic_store(&SH->cmd, C_GO);
	uint64_t t_go = SH->t0;
	while (now_ns() < t_go + (uint64_t)pre_ms * 1000000ull) {
		if (interrupted) {
			snprintf(r->why, sizeof(r->why), "interrupted");
			rc = -1;
			goto out;
		}
		for (unsigned i = 0; i < NM; i++)
			if (atomic_load(&SH->m[i].state) == ST_FAILED) {
				snprintf(r->why, sizeof(r->why),
				         "machine %u failed before the kill",
				         i);
				rc = -1;
				goto out;
			}
		nap_ms(pre_ms > 5000 ? 50 : 5);
	}
	/* Suspicions so far (refreshed every ms) are false ones; those
	 * after the kill are told apart by the survivors' steps. */
	for (unsigned i = 0; i < NM; i++)
		r->false_susp += atomic_load(&SH->m[i].suspicions);
	uint64_t victim_xfers = atomic_load(&SH->m[victim].transfers);
	t_kill = now_ns();
	r->pre_secs = (double)(t_kill - t_go) / 1e9;
	kill(g_pid[victim], sc == SC_STOP ? SIGSTOP : SIGKILL);
	uint64_t stop_inflight = (uint64_t)atomic_load(&SH->m[victim].inflight);
	if (sc != SC_STOP) {
		waitpid(g_pid[victim], NULL, 0);
		g_pid[victim] = 0;
	}
	/* Until every survivor's regions are active again. */
	uint64_t dl = t_kill + (uint64_t)RECOV_MS * 1000000ull;
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < NM; i++)
			if ((mask & (1u << i)) &&
			    atomic_load(&SH->m[i].t_active) < t_kill)
				all = false;
		if (all)
			break;
		int failed = -1;
		for (unsigned i = 0; i < NM; i++)
			if ((mask & (1u << i)) &&
			    atomic_load(&SH->m[i].state) == ST_FAILED)
				failed = (int)i;
		if (failed >= 0)
			snprintf(r->why, sizeof(r->why),
			         "machine %d failed during recovery", failed);
		else if (interrupted)
			snprintf(r->why, sizeof(r->why), "interrupted");
		else if (now_ns() > dl)
			snprintf(r->why, sizeof(r->why),
			         "no recovery within %d ms of the kill",
			         RECOV_MS);
		if (failed >= 0 || interrupted || now_ns() > dl) {
			rc = -1;
			goto out;
		}
		nap_ms(1);
	}
	nap_ms(O.post_ms);
	atomic_store(&SH->cmd, C_STOP);
	if (sc == SC_STOP) {
		/* The zombie: it must find itself removed, commit nothing. */
		kill(g_pid[victim], SIGCONT);
		char tmp[64];
		int zr = wait_state(1u << victim, ST_DONE, 1000, tmp,
		                    sizeof(tmp));
		uint64_t after = atomic_load(&SH->m[victim].transfers);
		uint64_t infl = (uint64_t)atomic_load(&SH->m[victim].inflight);
		r->zombie = after - victim_xfers;
		/* Its commits in flight at the stop may end either way. */
		r->zombie -= FARM_MIN(r->zombie, stop_inflight);
		r->zombie_hung = zr != 0;
		if (zr)
			fprintf(stderr,
			        PROG ": run %u: the stopped machine %u did not "
			             "end its workload within 1 s of SIGCONT "
			             "(%" PRIu64 " commits in flight)\n",
			        idx, victim, infl);
		kill(g_pid[victim], SIGKILL);
		waitpid(g_pid[victim], NULL, 0);
		g_pid[victim] = 0;
	}
	if ((rc = wait_state(mask, ST_DONE, 30000, r->why, sizeof(r->why))))
		goto out;
	atomic_store(&SH->cmd, C_SCAN);
	if ((rc = wait_state(1u << SH->scanner, ST_SCANNED, 120000, r->why,
	                     sizeof(r->why))))
		goto out;
	atomic_store(&SH->cmd, C_QUIT);
	r->ok = true;
out:
	if (rc)
		atomic_store(&SH->cmd, C_QUIT);
	for (unsigned i = 0; i < NM; i++) {
		if (g_pid[i] <= 0)
			continue;
		/* Closing leaves ZooKeeper; give it a few seconds. */
		uint64_t dl2 = now_ns() + 10000000000ull;
		int st = 0;
		pid_t w;
		while ((w = waitpid(g_pid[i], &st, WNOHANG)) == 0 &&
		       now_ns() < dl2)
			nap_ms(2);
		if (w == 0) {
			kill(g_pid[i], SIGKILL);
			waitpid(g_pid[i], &st, 0);
		}
		if (r->ok && (!WIFEXITED(st) || WEXITSTATUS(st))) {
			r->ok = false;
			snprintf(r->why, sizeof(r->why),
			         "machine %u exited with status %d", i,
			         WIFEXITED(st) ? WEXITSTATUS(st)
			                       : 128 + WTERMSIG(st));
		}
		g_pid[i] = 0;
	}
	if (!r->ok)
		show_logs(root);
	bu_rm_tree(AT_FDCWD, root, 3);
	if (!r->ok)
		return -1;

	if (getenv("RECOVERY_BENCH_DEBUG"))
		for (unsigned i = 0; i < NM; i++) {
			const struct mstat *m = &SH->m[i];
			fprintf(stderr,
			        "debug run %u machine %u: %" PRIu64
			        " transfers, %" PRIu64 " lookups, %" PRIu64
			        " declined, %" PRIu64 " retries, %" PRIu64
			        " failed (%s%s%s); txm: %" PRIu64 " commits, "
			        "aborts conflict %" PRIu64
			        " validation %" PRIu64 " failure %" PRIu64
			        " nospace %" PRIu64 "; lease: %" PRIu64
			        " renewals, %" PRIu64
			        " late, max gap %.1f ms\n",
			        idx, i, (uint64_t)m->transfers,
			        (uint64_t)m->lookups, (uint64_t)m->declined,
			        (uint64_t)m->retries, (uint64_t)m->failed,
			        m->first_err ? farm_strerror(m->first_err)
			                     : "-",
			        m->first_err ? " at " : "", m->first_err_what,
			        m->ts.commits, m->ts.aborts_conflict,
			        m->ts.aborts_validation, m->ts.aborts_failure,
			        m->ts.aborts_nospace, m->rs.lease.renewals,
			        m->rs.lease.late, m->rs.lease.max_gap_us / 1e3);
			for (unsigned k = 0; k < FARM_MIN(m->nslow, 16u); k++)
				fprintf(stderr,
				        "  slow %s: start %" PRId64
				        " ms after go (kill at %" PRIu64
				        "), %u ms, phase %d, %s, accounts %u "
				        "%u\n",
				        m->slow[k].lookup ? "lookup"
				                          : "transfer",
				        m->slow[k].start_ms,
				        (uint64_t)((t_kill - SH->t0) /
				                   1000000ull),
				        m->slow[k].ms, m->slow[k].phase,
				        farm_strerror(m->slow[k].rc),
				        m->slow[k].acct_a, m->slow[k].acct_b);
			static const char *const kn[] = {
			        "?",         "suspect",     "request",
			        "withdrawn", "no-majority", "config"};
			for (unsigned k = 0; k < m->rs.nsteps; k++) {
				const struct farm_recovery_step *st =
				        &m->rs.steps[k];
				fprintf(stderr,
				        "  step %+.1f ms after the kill: %s "
				        "machine %u (n %u, configuration "
				        "%" PRIu64 ")\n",
				        ((double)st->t_ns - (double)t_kill) /
				                1e6,
				        kn[st->kind <= 5 ? st->kind : 0],
				        st->machine, st->n, st->config_id);
			}
			fprintf(stderr,
			        "  lease: %" PRIu64 " expiries, %" PRIu64
			        " lost, %" PRIu64
			        " refused; membership: %" PRIu64
			        " config writes, %" PRIu64 " suspects\n",
			        m->rs.lease.expiries, m->rs.lease.lost,
			        m->rs.lease.refused, m->ms.config_writes,
			        m->ms.suspects);
			for (unsigned k = 0; k < 8 && m->rcount[k]; k++)
				fprintf(stderr,
				        "  retried %s in phase %d x %" PRIu64
				        ", the last %" PRId64 " ms after go\n",
				        farm_strerror(m->rcode[k]),
				        m->rphase[k], m->rcount[k],
				        m->rlast_ms[k]);
		}
	const char *dump = getenv("RECOVERY_BENCH_DUMP");
	FILE *df = dump ? fopen(dump, "w") : NULL;
	if (df) { /* every machine's ops per 10 ms, the whole run */
		uint64_t kb10 = (t_kill - SH->t0) / 10000000ull;
		for (uint64_t b = 0; b + 10 <= SH->nbuckets; b += 10) {
			fprintf(df, "%" PRId64,
			        (int64_t)(b / 10) - (int64_t)kb10);
			for (unsigned i = 0; i < NM; i++) {
				uint32_t n = 0;
				for (unsigned k = 0; k < 10; k++)
					n += g_ops[(size_t)i * SH->nbuckets +
					           b + k];
				fprintf(df, " %u", n);
			}
			fprintf(df, "\n");
		}
		fclose(df);
	}
	/* ---- the timeline ---- */
	unsigned victim_ = r->victim;
	uint64_t new_cfg = 0;
	for (unsigned i = 0; i < NM; i++) {
		if (i == victim_)
			continue;
		const struct mstat *m = &SH->m[i];
		const struct farm_recovery_stats *rs = &m->rs;
		bool saw_cfg = false;
		for (unsigned k = 0; k < rs->nsteps; k++) {
			const struct farm_recovery_step *st = &rs->steps[k];
			if (st->t_ns < t_kill)
				continue;
			double t = ms_after(st->t_ns, t_kill);
			bool v = st->machine == victim_;
			switch (st->kind) {
			case FARM_RSTEP_SUSPECT:
				if (v)
					r->t[T_SUSPECT] =
					        tmin(r->t[T_SUSPECT], t);
				else
					r->false_susp++; /* a survivor */
				break;
			case FARM_RSTEP_REQUEST:
				if (v && st->n == 1)
					r->t[T_PROBE] = tmin(r->t[T_PROBE], t);
				else
					r->false_susp++; /* a survivor too */
				break;
			case FARM_RSTEP_WITHDRAWN: r->false_susp++; break;
			case FARM_RSTEP_CONFIG:
				if (!v || saw_cfg)
					break;
				saw_cfg = true;
				new_cfg = st->config_id;
				r->t[T_CFG_FIRST] = tmin(r->t[T_CFG_FIRST], t);
				r->t[T_CFG_LAST] = tmax(r->t[T_CFG_LAST], t);
				break;
			default: break;
			}
		}
		if (!saw_cfg)
			r->t[T_CFG_LAST] = INFINITY; /* never took it */
		r->t[T_TXREC] = tmax(r->t[T_TXREC],
		                     ms_after(m->ts.rec_t_config_ns, t_kill));
		r->t[T_COMMIT] = tmax(r->t[T_COMMIT],
		                      ms_after(m->ts.rec_t_go_ns, t_kill));
		r->t[T_ACTIVE] = tmax(r->t[T_ACTIVE],
		                      ms_after(m->ts.rec_t_active_ns, t_kill));
		if (m->removed)
			r->false_susp++;
		r->transfers += m->transfers;
	}
	for (unsigned i = 0; i < NM; i++) {
		const struct farm_membership_status *ms = &SH->m[i].ms;
		if (i != victim_ && new_cfg && ms->write_config_id == new_cfg)
			r->t[T_ZK] = tmin(r->t[T_ZK],
			                  ms_after(ms->t_write_ns, t_kill));
	}
	/* Throughput before the kill, and when it is back to 80%. */
	uint64_t kb = (t_kill - SH->t0) / 1000000ull; /* the kill's bucket */
	unsigned base = FARM_MIN(O.base_ms, (unsigned)kb);
	uint64_t pre = 0;
	for (uint64_t b = kb - base; b < kb; b++)
		pre += surv_ops(victim_, b, g_ops);
	r->pre_rate = base ? (double)pre / base : 0;
	r->win = calibrate(victim_, kb - base, kb, r->pre_rate, &r->win_ok);
	double target = 0.8 * r->pre_rate * r->win;
	double from = isnan(r->t[T_SUSPECT]) ? 0 : r->t[T_SUSPECT];
	uint64_t end = kb + (uint64_t)ceil(r->t[T_ACTIVE]) + O.post_ms;
	for (uint64_t b = kb + (uint64_t)ceil(from);
	     b + r->win <= end && b + r->win <= SH->nbuckets; b++) {
		uint64_t s = 0;
		for (unsigned w = 0; w < r->win; w++)
			s += surv_ops(victim_, b + w, g_ops);
		if ((double)s >= target) {
			/* Bucket b counts what ended in [b, b + 1) ms after
			 * t0; the kill fell inside bucket kb. */
			uint64_t start = SH->t0 + b * 1000000ull;
			r->t[T_80] = start > t_kill
			                     ? (double)(start - t_kill) / 1e6
			                     : 0.0;
			break;
		}
	}
	if (!isnan(r->t[T_80]) && !isnan(r->t[T_SUSPECT]))
		r->t80_from_suspect =
		        FARM_MAX(0.0, r->t[T_80] - r->t[T_SUSPECT]);
	/* The plot: 200 ms before the kill to post_ms after active. */
	uint64_t p0 = kb >= 200 ? kb - 200 : 0;
	uint64_t p1 = FARM_MIN(end, (uint64_t)SH->nbuckets);
	r->nplot = (unsigned)(p1 - p0);
	r->plot_ops = calloc(r->nplot + 1, sizeof(uint32_t) * 2);
	if (r->plot_ops) {
		r->plot_xfers = r->plot_ops + r->nplot;
		for (unsigned k = 0; k < r->nplot; k++) {
			r->plot_ops[k] = surv_ops(victim_, p0 + k, g_ops);
			r->plot_xfers[k] = surv_ops(victim_, p0 + k, g_xfers);
		}
	}
	/* ---- lost commits ---- */
	unsigned nacc = NM * O.accounts;
	if (SH->sum_rc == 0) {
		uint64_t unrep = 0;
		bool complete;
		char det[1400] = "";
		uint64_t l = check_clog(nacc, (t_kill - SH->t0) / 1000, &unrep,
		                        det, sizeof(det), &complete);
		uint64_t allowed =
		        2 * (uint64_t)atomic_load(&SH->m[victim_].inflight);
		r->clog_lost = l;
		r->clog_unreported = unrep;
		if (l || unrep > allowed) {
			fprintf(stderr,
			        PROG
			        ": run %u: %" PRIu64 " lost commit(s), %" PRIu64
			        " write(s) of commits not reported (%" PRIu64
			        " allowed)%s%s\n",
			        idx, l, unrep, allowed, det[0] ? ": " : "",
			        det);
			if (unrep > allowed)
				r->phantom += (unrep - allowed + 1) / 2;
		}
		if (!complete)
			fprintf(stderr,
			        PROG
			        ": run %u: a commit log is full; the "
			        "per-account check covers part of the run\n",
			        idx);
	}
	uint64_t reported = 0, ctr_sum = 0, below_max = 0;
	for (unsigned i = 0; i < NM; i++)
		reported += SH->m[i].transfers;
	for (unsigned j = 0; j < nacc; j++) {
		ctr_sum += SH->ctr[j];
		uint64_t want = 0;
		for (unsigned i = 0; i < NM; i++)
			want = FARM_MAX(want, SH->maxw[i][j]);
		below_max += SH->ctr[j] < want;
	}
	int64_t expect = (int64_t)nacc * INIT_BAL;
	char *w = r->why;
	size_t wl = sizeof(r->why);
	size_t o = 0;
	if (SH->sum_rc) {
		o += (size_t)snprintf(
		        w, wl, "the final sum failed: %s at its %s (%u tries)",
		        farm_strerror(SH->sum_rc), SH->sum_where,
		        SH->sum_tries);
		r->lost++; /* unknown: counted as a failure */
	} else {
		/* Three views of the same question; the largest counts. */
		uint64_t slack =
		        2 * (uint64_t)atomic_load(&SH->m[victim_].inflight);
		uint64_t deficit = ctr_sum < 2 * reported
		                           ? (2 * reported - ctr_sum + 1) / 2
		                           : 0;
		r->lost = FARM_MAX(deficit, FARM_MAX(below_max, r->clog_lost));
		if (ctr_sum > 2 * reported + slack)
			r->phantom =
			        FARM_MAX(r->phantom,
			                 (ctr_sum - 2 * reported - slack) / 2);
		if (r->lost || r->phantom)
			o += (size_t)snprintf(
			        w + o, wl - o,
			        "%" PRIu64 " lost, %" PRIu64
			        " phantom commit(s): counters sum to %" PRIu64
			        ", %" PRIu64 " transfers reported committed "
			        "(victim's in flight: %" PRIu64 "), %" PRIu64
			        " account(s) below a committed value, %" PRIu64
			        " counter value(s) committed twice or above "
			        "the final one (details on stderr)",
			        r->lost, r->phantom, ctr_sum, reported,
			        slack / 2, below_max, r->clog_lost);
		if (SH->total != expect) {
			r->lost++;
			o += (size_t)snprintf(w + o, wl - FARM_MIN(o, wl),
			                      "%stotal %" PRId64
			                      ", expected %" PRId64,
			                      o ? "; " : "", SH->total, expect);
		}
	}
	if (SH->lf_locked || SH->lf_other) {
		r->unlocked_checks = SH->lf_locked + SH->lf_other;
		o += (size_t)snprintf(
		        w + FARM_MIN(o, wl - 1), wl - FARM_MIN(o, wl - 1),
		        "%s%s%u account(s) left locked, %u unreadable (%s); "
		        "locked:",
		        o ? "; " : "", SH->lf_locked >= 4 ? "at least " : "",
		        SH->lf_locked, SH->lf_other,
		        SH->lf_other ? farm_strerror(SH->lf_err) : "-");
		for (unsigned k = 0; k < FARM_MIN(SH->lf_locked, 4u); k++)
			o += (size_t)snprintf(w + FARM_MIN(o, wl - 1),
			                      wl - FARM_MIN(o, wl - 1),
			                      " %u (made on %u)",
			                      SH->locked_acct[k],
			                      SH->locked_acct[k] / O.accounts);
	}
	return 0;
}

/* ---- reporting ------------------------------------------------------- */

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct dist {
	unsigned n;
	double med, p90, max;
};

/* Nearest-rank percentiles of the finite values (NAN counts as +inf: a
 * step never seen is as slow as it gets). */
static struct dist distribution(const double *v, unsigned n)
{
	struct dist d = {.n = n, .med = NAN, .p90 = NAN, .max = NAN};
	if (!n)
		return d;
	double *s = malloc(n * sizeof(*s));
	if (!s)
		return d;
	for (unsigned i = 0; i < n; i++)
		s[i] = isnan(v[i]) ? INFINITY : v[i];
	qsort(s, n, sizeof(*s), cmp_dbl);
	d.med = s[(n + 1) / 2 - 1];
	d.p90 = s[(unsigned)ceil(0.9 * n) - 1];
	d.max = s[n - 1];
	free(s);
	return d;
}

static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.2f", v);
	else
		fprintf(f, "null");
}

static void print_run(unsigned i, const struct run *r)
{
	if (!r->ok) {
		printf("%3u %-7s  FAILED: %s\n", i, scen_name[r->sc], r->why);
		return;
	}
	printf("%3u %-7s %2u", i, scen_name[r->sc], r->victim);
	for (unsigned k = 0; k < NT; k++) {
		if (isnan(r->t[k]))
			printf(" %7s", "-");
		else
			printf(" %7.1f", r->t[k]);
	}
	printf(" %7.1f %7.1f %3u%s %3" PRIu64 " %s\n", r->t80_from_suspect,
	       r->pre_rate, r->win, r->win_ok ? " " : "!", r->false_susp,
	       r->lost || r->phantom || r->unlocked_checks ? r->why : "ok");
}

static void write_plot(const struct run *r, unsigned idx)
{
	if (!O.out || !r || !r->plot_ops)
		return;
	if (mkdir(O.out, 0755) && errno != EEXIST) {
		fprintf(stderr, PROG ": mkdir %s: %s\n", O.out,
		        strerror(errno));
		return;
	}
	char dat[600], ev[600], png[600];
	snprintf(dat, sizeof(dat), "%s/recovery_timeline.dat", O.out);
	snprintf(ev, sizeof(ev), "%s/recovery_events.dat", O.out);
	snprintf(png, sizeof(png), "%s/recovery_timeline.png", O.out);
	FILE *f = fopen(dat, "w");
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", dat, strerror(errno));
		return;
	}
	fprintf(f,
	        "# recovery_bench run %u (%s, machine %u): survivors' "
	        "operations per 1 ms bucket\n"
	        "# ms_after_kill ops transfers ops_10ms_mean (pre-failure "
	        "%.1f ops/ms)\n",
	        idx, scen_name[r->sc], r->victim, r->pre_rate);
	for (unsigned k = 0; k < r->nplot; k++) {
		/* The mean of the 10 buckets around this one. */
		unsigned lo = k >= 5 ? k - 5 : 0,
		         hi = FARM_MIN(k + 5, r->nplot), sum = 0;
		for (unsigned j = lo; j < hi; j++)
			sum += r->plot_ops[j];
		fprintf(f, "%d %u %u %.2f\n", (int)k - 200, r->plot_ops[k],
		        r->plot_xfers[k], (double)sum / (hi - lo));
	}
	fclose(f);
	f = fopen(ev, "w");
	if (!f)
		return;
	fprintf(f, "# event ms_after_kill\n\"kill\" 0\n");
	static const unsigned shown[] = {T_SUSPECT, T_PROBE,  T_ZK,
	                                 T_COMMIT,  T_ACTIVE, T_80};
	for (unsigned k = 0; k < sizeof(shown) / sizeof(shown[0]); k++)
		if (!isnan(r->t[shown[k]]))
			fprintf(f, "\"%s\" %.2f\n", t_name[shown[k]],
			        r->t[shown[k]]);
	fclose(f);
	printf("timeline of run %u: %s, events %s\n", idx, dat, ev);
	if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
		printf("(gnuplot not installed: no PNG; scripts/install-deps "
		       "installs it)\n");
		return;
	}
	char cmd[2400];
	snprintf(cmd, sizeof(cmd),
	         "gnuplot -e \"dat='%s'; ev='%s'; png='%s'; pre=%.3f\" "
	         "'%s/bench/recovery_plot.gp'",
	         dat, ev, png, r->pre_rate, FARM_SOURCE_DIR);
	if (system(cmd) == 0)
		printf("plot: %s\n", png);
	else
		fprintf(stderr, PROG ": gnuplot failed: %s\n", cmd);
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: " PROG " [options]\n"
	        "A 4-machine local cluster (ZooKeeper membership, shm "
	        "fabric) under a transfer +\nlookup workload loses a "
	        "machine; prints FaRM's Figure 9 timeline per run and\n"
	        "its distribution, writes a throughput plot, then one "
	        "JSON line.\n"
	        "  --runs N        member kills (kill -9 of machine 2; "
	        "default 20)\n"
	        "  --cm-runs N     kills of the CM (default 5)\n"
	        "  --stop-runs N   SIGSTOPs of machine 2 (default 5)\n"
	        "  --kill-cm       only CM kills (--runs of them)\n"
	        "  --sigstop       only SIGSTOPs (--runs of them)\n"
	        "  --false-suspicion  one member run after --fs-secs of "
	        "steady load, nothing else\n"
	        "  --fs-secs S     steady load before the first member "
	        "kill (default 120; 0: --pre-ms)\n"
	        "  --pre-ms MS     steady load before each other kill "
	        "(default 1500)\n"
	        "  --post-ms MS    after every region is active again "
	        "(default 1200: past the 1 s\n"
	        "                  a commit waits for a dead primary's LOCK "
	        "reply)\n"
	        "  --base-ms MS    pre-failure throughput: the MS before "
	        "the kill (default 500)\n"
	        "  --window-ms MS  back at 80%%: windows of a multiple of "
	        "MS, calibrated per run\n"
	        "                  on the steady state (default 5)\n"
	        "  --accounts N    accounts per machine (default 256, at "
	        "most %u)\n"
	        "  --depth N       operations in flight per machine "
	        "(default 8)\n"
	        "  --lease-us US   lease length (default: the library's, "
	        "%u us)\n"
	        "  --busy-poll     the machines' loops never park\n"
	        "  --zk-disk       ZooKeeper's data on disk (/var/tmp) "
	        "with fsync, not tmpfs\n"
	        "  --zk-dir DIR    where ZooKeeper's data go\n"
	        "  --zk-script P   scripts/zk-local (default: the source "
	        "tree's)\n"
	        "  --out DIR       plot files (default <build>/"
	        "bench-results)\n"
	        "  --seed N        workload random seed\n"
	        "  --verbose       machines log to stderr (default: to "
	        "files, shown on failure)\n"
	        "  --quick         1 member run, short windows (smoke "
	        "test)\n",
	        MAX_ACCT, FARM_LEASE_DEFAULT_US);
}

static int parse_u(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* The default --out: bench-results next to the program's directory. */
static char *default_out(const char *argv0)
{
	char self[512];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		snprintf(self, sizeof(self), "%s", argv0);
	else
		self[n] = 0;
	char *slash = strrchr(self, '/');
	if (!slash)
		return strdup("bench-results");
	*slash = 0;
	slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	else
		snprintf(self, sizeof(self), ".");
	size_t len = strlen(self) + 32;
	char *o = malloc(len);
	if (o)
		snprintf(o, len, "%s/bench-results", self);
	return o;
}

int main(int argc, char **argv)
{
	bool only_cm = false, only_stop = false, only_fs = false;
	unsigned seed = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
#define OPT_U(name, lo, hi, dst)                                       \
	if (!strcmp(a, name)) {                                        \
		bad = !v || parse_u(v, lo, hi, dst);                   \
		i++;                                                   \
		if (bad) {                                             \
			fprintf(stderr,                                \
			        PROG ": %s needs a number in "         \
			             "%u..%u\n",                       \
			        name, (unsigned)(lo), (unsigned)(hi)); \
			return 2;                                      \
		}                                                      \
		continue;                                              \
	}
		OPT_U("--runs", 0, MAX_RUNS, &O.runs)
		OPT_U("--cm-runs", 0, MAX_RUNS, &O.cm_runs)
		OPT_U("--stop-runs", 0, MAX_RUNS, &O.stop_runs)
		OPT_U("--fs-secs", 0, 3600, &O.fs_secs)
		OPT_U("--pre-ms", 200, 600000, &O.pre_ms)
		OPT_U("--post-ms", 50, 60000, &O.post_ms)
		OPT_U("--base-ms", 10, 10000, &O.base_ms)
		OPT_U("--window-ms", 1, 1000, &O.window_ms)
		OPT_U("--accounts", 2, MAX_ACCT, &O.accounts)
		OPT_U("--depth", 1, 256, &O.depth)
		OPT_U("--lease-us", 1000, 60000000, &O.lease_us)
		OPT_U("--seed", 0, UINT32_MAX, &seed)
#undef OPT_U
		if (!strcmp(a, "--kill-cm")) {
			only_cm = true;
		} else if (!strcmp(a, "--sigstop")) {
			only_stop = true;
		} else if (!strcmp(a, "--false-suspicion")) {
			only_fs = true;
		} else if (!strcmp(a, "--busy-poll")) {
			O.busy_poll = true;
		} else if (!strcmp(a, "--zk-disk")) {
			O.zk_disk = true;
		} else if (!strcmp(a, "--zk-dir") && v) {
			O.zk_dir_base = argv[++i];
		} else if (!strcmp(a, "--zk-script") && v) {
			O.zk_script = argv[++i];
		} else if (!strcmp(a, "--out") && v) {
			O.out = argv[++i];
		} else if (!strcmp(a, "--verbose")) {
			O.verbose = true;
		} else if (!strcmp(a, "--quick")) {
			O.quick = true;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, PROG ": unknown option %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	O.seed = seed;
	if (only_cm + only_stop + only_fs > 1) {
		fprintf(stderr, PROG ": --kill-cm, --sigstop and "
		                     "--false-suspicion exclude each other\n");
		return 2;
	}
	if (O.quick) {
		O.runs = 1;
		O.cm_runs = O.stop_runs = 0;
		O.fs_secs = 0;
		O.pre_ms = FARM_MIN(O.pre_ms, 1500u);
		O.post_ms = FARM_MIN(O.post_ms, 300u);
	}
	unsigned n_sc[NSCEN] = {O.runs, O.cm_runs, O.stop_runs};
	if (only_cm || only_stop) {
		n_sc[SC_MEMBER] = n_sc[SC_CM] = n_sc[SC_STOP] = 0;
		n_sc[only_cm ? SC_CM : SC_STOP] = O.runs;
		O.fs_secs = 0;
	}
	if (only_fs) {
		n_sc[SC_MEMBER] = 1;
		n_sc[SC_CM] = n_sc[SC_STOP] = 0;
		if (!O.fs_secs)
			O.fs_secs = 120;
	}
	unsigned total = n_sc[0] + n_sc[1] + n_sc[2];
	if (!total || total > MAX_RUNS) {
		fprintf(stderr, PROG ": between 1 and %u runs\n", MAX_RUNS);
		return 2;
	}
	if (!O.out)
		O.out = default_out(argv[0]);
	unsigned lease_us = O.lease_us ? O.lease_us : FARM_LEASE_DEFAULT_US;

	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	unsigned max_pre = FARM_MAX(O.pre_ms, O.fs_secs * 1000u);
	size_t nb = (size_t)NM * (max_pre + RECOV_MS + O.post_ms + 3000);
	SH = mmap(NULL, sizeof(*SH), PROT_READ | PROT_WRITE,
	          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	g_ops = mmap(NULL, 2 * nb * sizeof(uint32_t), PROT_READ | PROT_WRITE,
	             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (SH == MAP_FAILED || g_ops == MAP_FAILED) {
		fprintf(stderr, PROG ": mmap: %s\n", strerror(errno));
		return 1;
	}
	g_xfers = g_ops + nb;
	g_clog =
	        mmap(NULL, (size_t)NM * CLOG_CAP * sizeof(*g_clog),
	             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (g_clog == MAP_FAILED) {
		fprintf(stderr, PROG ": mmap: %s\n", strerror(errno));
		return 1;
	}

	char load[128] = "?";
	FILE *lf = fopen("/proc/loadavg", "r");
	if (lf) {
		if (fgets(load, sizeof(load), lf))
			load[strcspn(load, "\n")] = 0;
		fclose(lf);
	}
	printf(PROG ": %u machines (processes) on %ld CPUs, shm fabric, "
	            "3 replicas, ZooKeeper on %s, lease %.1f ms, busy polling "
	            "%s, %u accounts per machine, %u operations in flight per "
	            "machine; load average %s\n",
	       NM, sysconf(_SC_NPROCESSORS_ONLN),
	       O.zk_disk ? "disk (fsync)" : "tmpfs", lease_us / 1e3,
	       O.busy_poll ? "on" : "off", O.accounts, O.depth, load);
	int zs = zk_start();
	if (zs)
		return zs;
	printf("ZooKeeper %s, data in %s\n", g_zk_connect, g_zk_dir);
	printf("runs: %u member kills, %u CM kills, %u SIGSTOPs; the first "
	       "member run after %u s of steady load\n",
	       n_sc[0], n_sc[1], n_sc[2],
	       O.fs_secs ? O.fs_secs : O.pre_ms / 1000);
	printf("times in ms after the kill; 80pct: survivors back to 80%% of "
	       "their pre-failure ops/ms over win ms (!: even 100 ms windows "
	       "of the steady state fail it); s->80: from the suspicion; fs: "
	       "false suspicions\n");
	printf("%3s %-7s %2s", "run", "kill", "m");
	for (unsigned k = 0; k < NT; k++)
		printf(" %7.7s", t_name[k]);
	printf(" %7s %7s %4s %3s %s\n", "s->80", "pre/ms", "win", "fs",
	       "checks");
	fflush(stdout);

	struct run *runs = calloc(total, sizeof(*runs));
	if (!runs) {
		zk_stop();
		return 1;
	}
	unsigned nr = 0, failed = 0;
	uint64_t t_start = now_ns();
	for (unsigned sc = 0; sc < NSCEN && !interrupted; sc++)
		for (unsigned k = 0; k < n_sc[sc] && !interrupted; k++) {
			unsigned pre = O.pre_ms;
			if (sc == SC_MEMBER && k == 0 && O.fs_secs)
				pre = O.fs_secs * 1000u;
			if (pre > 10000)
				fprintf(stderr,
				        PROG ": run %u: %u s of steady load "
				             "before the kill (false "
				             "suspicions)...\n",
				        nr, pre / 1000);
			if (one_run(nr, (enum scen)sc, pre, &runs[nr]))
				failed++;
			print_run(nr, &runs[nr]);
			fflush(stdout);
			nr++;
		}
	kill_all();
	zk_stop();
	double secs = (double)(now_ns() - t_start) / 1e9;

	/* Distributions per scenario. */
	printf("\ndistribution over runs (nearest rank; '-' never seen "
	       "counts as infinite), ms:\n");
	printf("%-8s %-13s %4s %8s %8s %8s\n", "kill", "step", "runs", "median",
	       "p90", "max");
	struct dist d80[NSCEN], dsteps[NSCEN][NT];
	uint64_t fs = 0, lost = 0, phantom = 0, locked = 0, zombie = 0;
	unsigned hung = 0, win_ok = 0, win_max = 0;
	double fs_secs = 0, stop_susp_max = NAN;
	unsigned stop_n = 0;
	for (unsigned sc = 0; sc < NSCEN; sc++) {
		double *v = calloc(total + 1, sizeof(double));
		if (!v)
			return 1;
		unsigned n = 0;
		for (unsigned k = 0; k < NT; k++) {
			n = 0;
			for (unsigned i = 0; i < nr; i++)
				if (runs[i].sc == sc && runs[i].ok)
					v[n++] = runs[i].t[k];
			dsteps[sc][k] = distribution(v, n);
		}
		n = 0;
		for (unsigned i = 0; i < nr; i++)
			if (runs[i].sc == sc)
				v[n++] = runs[i].ok ? runs[i].t80_from_suspect
				                    : NAN;
		d80[sc] = distribution(v, n);
		free(v);
		if (!d80[sc].n)
			continue;
		for (unsigned k = 0; k < NT; k++)
			printf("%-8s %-13s %4u %8.1f %8.1f %8.1f\n",
			       scen_name[sc], t_name[k], dsteps[sc][k].n,
			       dsteps[sc][k].med, dsteps[sc][k].p90,
			       dsteps[sc][k].max);
		printf("%-8s %-13s %4u %8.1f %8.1f %8.1f\n", scen_name[sc],
		       "suspect->80%", d80[sc].n, d80[sc].med, d80[sc].p90,
		       d80[sc].max);
	}
	for (unsigned i = 0; i < nr; i++) {
		const struct run *r = &runs[i];
		fs += r->false_susp;
		fs_secs += r->pre_secs;
		lost += r->lost;
		phantom += r->phantom;
		locked += r->unlocked_checks;
		zombie += r->zombie;
		hung += r->zombie_hung;
		win_ok += r->ok && r->win_ok;
		win_max = FARM_MAX(win_max, r->ok ? r->win : 0);
		if (r->sc == SC_STOP) {
			/* A run that failed or never suspected: infinite. */
			double x = r->ok && !isnan(r->t[T_SUSPECT])
			                   ? r->t[T_SUSPECT]
			                   : INFINITY;
			stop_susp_max =
			        stop_n++ ? FARM_MAX(stop_susp_max, x) : x;
		}
	}
	double longest_pre = 0;
	for (unsigned i = 0; i < nr; i++)
		longest_pre = FARM_MAX(longest_pre, runs[i].pre_secs);
	printf("\nfalse suspicions: %" PRIu64 " in %.0f s of steady load "
	       "(longest continuous: %.0f s) at a %.1f ms lease\n",
	       fs, fs_secs, longest_pre, lease_us / 1e3);
	printf("lost commits: %" PRIu64 ", phantom commits: %" PRIu64
	       ", locks or unreadable accounts left: %" PRIu64
	       ", zombie commits: %" PRIu64 "; %u of %u runs failed\n",
	       lost, phantom, locked, zombie, failed, nr);
	if (stop_n)
		printf("SIGSTOP: slowest suspicion %.1f ms after the stop = "
		       "%.2f lease lengths; %u of %u stopped machines had not "
		       "ended their operations 1 s after SIGCONT\n",
		       stop_susp_max, stop_susp_max / (lease_us / 1e3), hung,
		       stop_n);
	printf("80%% windows: %u of %u runs had a steady state in which 90%% "
	       "of the windows pass (longest window used: %u ms)\n",
	       win_ok, nr, win_max);
	/* A throughput goal is judged only when at least half the runs of
	 * its kind had a steady state that passes its own test: otherwise
	 * "back to 80%" is noise (a burst long before any region is active
	 * counts). */
	bool judged[NSCEN];
	for (unsigned sc = 0; sc < NSCEN; sc++) {
		unsigned n = 0, ok = 0;
		for (unsigned i = 0; i < nr; i++)
			if (runs[i].sc == sc) {
				n++;
				ok += runs[i].ok && runs[i].win_ok;
			}
		judged[sc] = n && 2 * ok >= n;
		if (n && !judged[sc])
			printf("%s: the time to 80%% is not judged: only %u of "
			       "%u runs had a steady state steady enough to "
			       "compare with (see suspect->active instead)\n",
			       scen_name[sc], ok, n);
	}
	printf("%u runs in %.0f s\n", nr, secs);

	/* The plot: the first scenario's run with the median recovery (to
	 * 80%, or to all-active when the median never got back to 80%),
	 * among the runs whose steady state before the kill ran at least at
	 * the median rate (a host stall there makes 80% meaningless). */
	int pick = -1;
	for (unsigned sc = 0; sc < NSCEN && pick < 0; sc++) {
		bool by80 = isfinite(d80[sc].med);
		double med = by80 ? d80[sc].med : dsteps[sc][T_ACTIVE].med;
		double *rates = calloc(nr + 1, sizeof(double));
		unsigned nrt = 0;
		for (unsigned i = 0; rates && i < nr; i++)
			if (runs[i].sc == sc && runs[i].ok)
				rates[nrt++] = runs[i].pre_rate;
		double rmed = nrt ? distribution(rates, nrt).med : 0;
		free(rates);
		double best = INFINITY;
		for (unsigned i = 0; i < nr; i++) {
			const struct run *r = &runs[i];
			double v = by80 ? r->t80_from_suspect : r->t[T_ACTIVE];
			if (r->sc == sc && r->ok && r->pre_rate >= rmed &&
			    fabs(v - med) < best) {
				best = fabs(v - med);
				pick = (int)i;
			}
		}
	}
	if (pick >= 0)
		write_plot(&runs[pick], (unsigned)pick);

	/* The JSON line. */
	bool commits_ok = !lost && !phantom && !locked && !zombie && !failed;
	if (!commits_ok)
		printf("CHECKS FAILED: %" PRIu64 " lost and %" PRIu64
		       " phantom commits, %" PRIu64
		       " accounts left locked or unreadable, %" PRIu64
		       " zombie commits, %u runs failed (details above and on "
		       "stderr)\n",
		       lost, phantom, locked, zombie, failed);
	bool fs_met = fs == 0 && longest_pre >= 120 &&
	              lease_us == FARM_LEASE_DEFAULT_US;
	double stop_mult = stop_n ? stop_susp_max / (lease_us / 1e3) : NAN;
	printf("{\"bench\": \"recovery\", \"machines\": %u, \"lease_ms\": "
	       "%.1f, \"busy_poll\": %s, \"zk_data\": \"%s\", "
	       "\"accounts_per_machine\": %u, \"depth\": %u, "
	       "\"window_ms\": %u, \"load_avg\": \"%s\", \"seconds\": %.0f, "
	       "\"runs\": {",
	       NM, lease_us / 1e3, O.busy_poll ? "true" : "false",
	       O.zk_disk ? "disk" : "tmpfs", O.accounts, O.depth, O.window_ms,
	       load, secs);
	for (unsigned sc = 0; sc < NSCEN; sc++)
		printf("%s\"%s\": %u", sc ? ", " : "", scen_name[sc],
		       d80[sc].n);
	printf("}, \"failed_runs\": %u, \"timeline_ms\": {", failed);
	bool first = true;
	for (unsigned sc = 0; sc < NSCEN; sc++) {
		if (!d80[sc].n)
			continue;
		printf("%s\"%s\": {", first ? "" : ", ", scen_name[sc]);
		first = false;
		for (unsigned k = 0; k <= NT; k++) {
			const struct dist *d =
			        k < NT ? &dsteps[sc][k] : &d80[sc];
			printf("%s\"%s\": {\"median\": ", k ? ", " : "",
			       k < NT ? t_name[k] : "suspect_to_80pct");
			json_num(stdout, d->med);
			printf(", \"p90\": ");
			json_num(stdout, d->p90);
			printf(", \"max\": ");
			json_num(stdout, d->max);
			printf("}");
		}
		printf("}");
	}
	printf("}, \"false_suspicions\": %" PRIu64 ", \"steady_seconds\": "
	       "%.0f, \"longest_steady_seconds\": %.0f, \"lost_commits\": "
	       "%" PRIu64 ", \"phantom_commits\": %" PRIu64
	       ", \"accounts_left_locked\": %" PRIu64
	       ", \"zombie_commits\": %" PRIu64 ", \"zombies_not_ended\": %u, "
	       "\"runs_with_calibrated_window\": %u, \"longest_window_ms\": "
	       "%u, \"goals\": {",
	       fs, fs_secs, longest_pre, lost, phantom, locked, zombie, hung,
	       win_ok, win_max);
	printf("\"suspect_to_80pct_median_ms\": {\"value\": ");
	json_num(stdout, d80[SC_MEMBER].med);
	printf(", \"target\": 30, \"met\": %s}, ",
	       judged[SC_MEMBER] && d80[SC_MEMBER].med < 30 ? "true" : "false");
	printf("\"suspect_to_80pct_max_ms\": {\"value\": ");
	json_num(stdout, d80[SC_MEMBER].max);
	printf(", \"target\": 150, \"met\": %s}, ",
	       judged[SC_MEMBER] && d80[SC_MEMBER].max < 150 ? "true"
	                                                     : "false");
	printf("\"cm_suspect_to_80pct_median_ms\": {\"value\": ");
	json_num(stdout, d80[SC_CM].med);
	printf(", \"target\": 60, \"met\": %s}, ",
	       judged[SC_CM] && d80[SC_CM].med < 60 ? "true" : "false");
	printf("\"sigstop_suspicion_in_leases\": {\"value\": ");
	json_num(stdout, stop_mult);
	printf(", \"target\": 2, \"met\": %s}, ",
	       stop_n && stop_mult <= 2 ? "true" : "false");
	printf("\"false_suspicions_2min_default_lease\": {\"value\": %" PRIu64
	       ", \"target\": 0, \"met\": %s}, ",
	       fs, fs_met ? "true" : "false");
	printf("\"lost_commits\": {\"value\": %" PRIu64
	       ", \"target\": 0, \"met\": %s}}}\n",
	       lost + phantom + locked + zombie, commits_ok ? "true" : "false");
	for (unsigned i = 0; i < nr; i++)
		free(runs[i].plot_ops);
	free(runs);
	/* --quick (the smoke test) says whether it ran; the checks' verdict
	 * is in the output either way. */
	if (O.quick)
		return failed || interrupted ? 1 : 0;
	return failed || !commits_ok || interrupted ? 1 : 0;
}
