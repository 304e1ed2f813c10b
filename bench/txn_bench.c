/*
 * txn_bench: transactions (include/farm/txn.h) on a local cluster of
 * machine processes over the shm fabric: throughput and latency of
 * single-machine and distributed read-modify-write transactions of 1 to 4
 * objects, lock-free reads against raw one-sided READs of the same
 * objects, and the protocol's one-sided operations and messages per
 * commit against what the SOSP'15 protocol prescribes for each shape.
 *
 * The process is machine 0, the coordinator of every transaction. Before
 * anything else it forks machines 1..N-1 (--machines, default 2). Each
 * machine is a farm_node built from a configuration in code (static
 * membership: the peers' data directories under /dev/shm; busy_poll on;
 * one loop run by the process's main thread: farm_node_set_app_loops).
 * Once all have joined, each allocates --tx-objects (4096) objects of
 * 64 B (its own regions: it is their primary), and machine 1 also
 * --lf-objects (262144) objects of 64 B for the lock-free reads; the
 * addresses (and machine 1's region descriptors) go to machine 0 through
 * a shared anonymous mapping made before the fork. The other machines then
 * run nothing but their loops until machine 0 is done. Machine i is pinned
 * to CPU i when there are at least as many CPUs as machines (--no-pin).
 *
 * Shapes (objects read, each incremented, then commit):
 *   local_rmwK  K objects whose primary is machine 0: single-machine;
 *   dist_rmwK   K objects on machines 1, 2, .., N-1, 0, 1, ... in turn
 *               (dist_rmw2 on 2 machines: one on the coordinator's machine,
 *               one on machine 1; on 3 machines: machines 1 and 2);
 *   dist_rmw1_ro1  one remote object written, another remote object only
 *               read (its version is validated with a one-sided READ).
 * Each runs --seconds with one transaction in flight (latency: begin to
 * the commit's outcome, and commit call to outcome; every one timed) and
 * then with --depth (8) in flight (throughput; conflicts abort, counted).
 * Per committed transaction, the expected work is computed from the
 * objects' replica lists; the measured work is the farm_txm_stats delta.
 *
 * Lock-free reads: --lf-depth (16) farm_lf_read()s of random objects on
 * machine 1 in flight, against farm_loop_rdma() READs of 64 B and of
 * 128 B (the object's two lines) at the same objects, with the same number
 * in flight, on the same loop: --repeat (3) x 5 interleaved slices of
 * --seconds / 5 each (lock-free, raw 64 B, raw 128 B, lock-free, ...), so
 * that both see the same state of a noisy host; rates are the medians of
 * the slices, and the ratio is the median of the per-slice ratios (each
 * lock-free slice against the raw slice next to it). Then latency with
 * one read in flight.
 * At the end every object's counter is read back: their sum must equal the
 * increments of the committed transactions.
 *
 * Output: a table, then, last, one JSON line (bench/README.md).
 */
#include "benchnode.h"
#include "benchutil.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
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

#include "addrspace/addrspace.h"
#include "node/node.h"
#include "util/common.h"
#include "util/config.h"

#define PROG          "txn_bench"
#define MAXM          3u
#define MAX_TXOBJ     65536u
#define MAX_LFOBJ     (1u << 20)
#define MAX_LFREG     64u
#define MAX_SAMPLES   (1u << 22)
#define MAX_DEPTH     256u
#define MAX_K         8u
#define OBJ_SIZE      64u
#define ALLOC_BATCH   256u
#define NS_PER_S      1000000000ull
#define JOIN_MS       30000
#define GOAL_LF_RATIO 0.7
#define GOAL_P50_US   20.0

enum { GO_WAIT = 0, GO_ALLOC = 1, GO_EXIT = 3 };
enum { ST_START = 0, ST_JOINED = 1, ST_ALLOCATED = 2, ST_FAILED = -1 };

struct opts {
	unsigned machines, replicas, depth, lf_depth, repeat;
	double seconds;
	uint32_t tx_objects, lf_objects, log_size;
	uint64_t region_size;
	bool pin, quick, lf, shared_objs;
	char shapes[256]; /* "" all, else a comma list of shape names */
};

/* Shared between the machine processes (mapped before the fork). */
struct shared {
	_Atomic int go;
	struct {
		_Atomic int state;
		int err;
		uint32_t ntx, nlf, nreg;
		uint32_t reg_id[MAX_LFREG];
		farm_mr_desc reg_desc[MAX_LFREG];
	} m[MAXM];
	farm_gaddr tx[MAXM][MAX_TXOBJ];
	farm_gaddr lf[MAX_LFOBJ];
};

static volatile sig_atomic_t interrupted;
static struct shared *SH;
static struct opts O;
static const char *data_dir = "/dev/shm"; /* --data-dir */

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* ---- helpers ------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct samples {
	uint64_t *v;
	size_t n;
};

static void samp_add(struct samples *s, uint64_t x)
{
	if (s->n < MAX_SAMPLES)
		s->v[s->n++] = x;
}

static void samp_pcts(struct samples *s, double *p50, double *p99)
{
	*p50 = *p99 = 0;
	if (!s->n)
		return;
	qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
	*p50 = (double)s->v[s->n / 2];
	*p99 = (double)s->v[FARM_MIN(s->n - 1, s->n * 99 / 100)];
}

/* The @i'th CPU this process may use, or -1. */
static int nth_cpu(unsigned i, unsigned *count)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -1;
	*count = (unsigned)CPU_COUNT(&set);
	for (int c = 0, k = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && (unsigned)k++ == i)
			return c;
	return -1;
}

/* ---- a machine ----------------------------------------------------------- */

struct mach {
	uint32_t id;
	farm_node *node;
	farm_loop *loop;
	farm_txm *txm;
	farm_as *as;
	char dir[256];
};

static int mach_open(struct mach *m, uint32_t id, const char *base)
{
	memset(m, 0, sizeof(*m));
	m->id = id;
	snprintf(m->dir, sizeof(m->dir), "%s/m%u", base, id);
	if (mkdir(m->dir, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, PROG ": mkdir %s: %s\n", m->dir,
		        strerror(errno));
		return -errno;
	}
	struct farm_config c;
	farm_config_defaults(&c);
	char v[512];
	int rc = 0;
	snprintf(v, sizeof(v), "%u", id);
	rc |= bn_cfg_set(PROG, &c, "machine_id", v);
	rc |= bn_cfg_set(PROG, &c, "data_dir", m->dir);
	rc |= bn_cfg_set(PROG, &c, "fabric", "shm");
	snprintf(v, sizeof(v), "%" PRIu64, O.region_size);
	rc |= bn_cfg_set(PROG, &c, "region_size", v);
	snprintf(v, sizeof(v), "%u", O.replicas);
	rc |= bn_cfg_set(PROG, &c, "replicas", v);
	snprintf(v, sizeof(v), "%" PRIu32, O.log_size);
	rc |= bn_cfg_set(PROG, &c, "log_size", v);
	rc |= bn_cfg_set(PROG, &c, "threads", "1");
	rc |= bn_cfg_set(PROG, &c, "busy_poll", "1");
	rc |= bn_static_peers(PROG, &c, id, O.machines, base);
	if (rc)
		return -EINVAL;
	if ((rc = bn_node_open(PROG, &c, id, &m->node)))
		return rc;
	farm_node_set_app_loops(m->node, true);
	if ((rc = farm_node_start(m->node, JOIN_MS)) ||
	    (rc = farm_node_loop_open(m->node, 0, &m->loop)) ||
	    (rc = farm_node_wait_members(m->node, O.machines, JOIN_MS))) {
		fprintf(stderr, PROG ": machine %u: cannot join: %s\n", id,
		        farm_strerror(rc));
		return rc;
	}
	m->txm = farm_node_txm(m->node);
	m->as = farm_node_as(m->node);
	return 0;
}

static void mach_close(struct mach *m)
{
	if (m->loop)
		farm_node_loop_close(m->node, m->loop);
	if (m->node)
		farm_node_close(m->node);
	m->loop = NULL;
	m->node = NULL;
}

/* Poll until every machine's state is at least @st (or one failed). */
static int wait_state(struct mach *m, int st)
{
	uint64_t t0 = farm_now_ns();
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < O.machines; i++) {
			int s = atomic_load(&SH->m[i].state);
			if (s == ST_FAILED)
				return SH->m[i].err ? SH->m[i].err : -EIO;
			all &= s >= st;
		}
		if (all)
			return 0;
		if (interrupted)
			return -EINTR;
		if (farm_now_ns() - t0 > 120 * NS_PER_S)
			return -ETIMEDOUT;
		(void)farm_loop_poll(m->loop);
	}
}

/* @n new committed objects of OBJ_SIZE bytes (zeroed) on this machine.
 * A batch whose commit aborts with a retryable outcome (-ENOSPC: the log
 * had no room yet) is allocated again. */
static int alloc_objs(struct mach *m, farm_gaddr *out, uint32_t n)
{
	unsigned tries = 0;
	for (uint32_t done = 0; done < n;) {
		farm_tx *tx;
		int rc = farm_tx_begin(m->txm, m->loop, &tx);
		if (rc)
			return rc;
		uint32_t b = FARM_MIN(ALLOC_BATCH, n - done);
		for (uint32_t i = 0; i < b && !rc; i++) {
			farm_fatptr fp;
			void *d;
			rc = farm_tx_alloc_sync(tx, OBJ_SIZE, FARM_GADDR_NULL,
			                        &fp, &d);
			if (!rc)
				out[done + i] = fp.addr;
		}
		const char *what = "farm_tx_alloc";
		if (!rc) {
			what = "farm_tx_commit";
			rc = farm_tx_commit_sync(tx);
		}
		farm_tx_free(tx);
		if (rc && farm_tx_retryable(rc) && ++tries < 1000) {
			uint64_t t = farm_now_ns() + 100000;
			while (farm_now_ns() < t)
				(void)farm_loop_poll(m->loop);
			continue;
		}
		if (rc) {
			fprintf(stderr,
			        PROG ": machine %u: allocating objects "
			             "(%u of %u done): %s: %s\n",
			        m->id, done, n, what, farm_strerror(rc));
			return rc;
		}
		done += b;
	}
	if (tries && getenv("TXN_BENCH_DEBUG"))
		fprintf(stderr,
		        "debug machine %u: %u allocation commits retried\n",
		        m->id, tries);
	return 0;
}

/* Machine @id's part of the setup: its transaction objects, and on
 * machine 1 the lock-free-read objects and their regions' descriptors. */
static int mach_alloc(struct mach *m)
{
	int rc = alloc_objs(m, SH->tx[m->id], O.tx_objects);
	if (rc)
		return rc;
	SH->m[m->id].ntx = O.tx_objects;
	if (m->id != 1)
		return 0;
	if ((rc = alloc_objs(m, SH->lf, O.lf_objects)))
		return rc;
	SH->m[1].nlf = O.lf_objects;
	uint32_t nreg = 0;
	for (uint32_t i = 0; i < O.lf_objects; i++) {
		uint32_t r = farm_gaddr_region(SH->lf[i]);
		bool seen = false;
		for (uint32_t j = 0; j < nreg && !seen; j++)
			seen = SH->m[1].reg_id[j] == r;
		if (seen)
			continue;
		if (nreg == MAX_LFREG)
			return -E2BIG;
		enum farm_as_role role;
		farm_region *reg = farm_as_local_region(m->as, r, &role);
		if (!reg || role != FARM_AS_PRIMARY)
			return -ENOENT;
		SH->m[1].reg_id[nreg] = r;
		SH->m[1].reg_desc[nreg] = farm_region_desc(reg);
		SH->m[1].reg_desc[nreg].machine = 1;
		nreg++;
	}
	SH->m[1].nreg = nreg;
	return 0;
}

/* A forked machine: join, allocate, serve until told to exit. */
static int child_main(uint32_t id, const char *base, int cpu)
{
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() == 1)
		return 1;
	bu_pin_to(cpu, PROG);
	struct mach m;
	int rc = mach_open(&m, id, base);
	if (!rc) {
		atomic_store(&SH->m[id].state, ST_JOINED);
		while (atomic_load(&SH->go) < GO_ALLOC && !interrupted)
			(void)farm_loop_poll(m.loop);
		rc = interrupted ? -EINTR : mach_alloc(&m);
	}
	if (rc) {
		SH->m[id].err = rc;
		atomic_store(&SH->m[id].state, ST_FAILED);
	} else {
		atomic_store(&SH->m[id].state, ST_ALLOCATED);
		while (atomic_load(&SH->go) < GO_EXIT && !interrupted)
			(void)farm_loop_poll(m.loop);
	}
	mach_close(&m);
	bu_rm_tree(AT_FDCWD, m.dir, 1);
	return rc ? 1 : 0;
}

/* ---- transactions -------------------------------------------------------- */

struct shape {
	char name[32];
	unsigned k;           /* objects written */
	unsigned ro;          /* objects only read (remote) */
	uint32_t mach[MAX_K]; /* machine of each object (written first) */
	bool single;
};

struct run_res {
	double tps, p50_us, p99_us, cp50_us, cp99_us, max_us;
	uint64_t commits, aborts, errors;
	/* per commit: measured (stats delta) and expected (formula) */
	double w, w_exp, msgs, msgs_exp, r, r_exp;
	double trunc; /* explicit TRUNCATE records per commit (not counted
	                 in commit_writes) */
};

struct txrun;

struct txslot {
	struct txrun *run;
	unsigned idx; /* objects with index % depth == idx (unless shared) */
	farm_tx *tx;
	unsigned pending;
	int err;
	uint64_t t0, tc;
	farm_gaddr a[MAX_K];
	uint32_t am[MAX_K];
	unsigned ew, emsg, er; /* expected work of this transaction */
};

struct txrun {
	struct mach *m;
	const struct shape *sh;
	bool active;
	unsigned inflight, depth;
	uint64_t rnd;
	uint64_t commits, aborts, errors, increments;
	uint64_t ew, emsg, er;
	int fatal;
	struct samples lat, clat;
	struct txslot slots[MAX_DEPTH];
};

static uint64_t g_increments; /* every committed increment, all runs */

/* The protocol's work for committing @s's transaction, from the objects'
 * replica lists (docs/benchmarks.md, txn_bench):
 *   WRITEs = 2 per remote primary of the write set (LOCK, COMMIT-PRIMARY)
 *          + 1 per (primary, backup) pair of the write set whose backup is
 *            not the coordinator (COMMIT-BACKUP);
 *   messages = 1 per remote primary of the write set (lock reply);
 *   READs = 1 per remote object only read (validation);
 * for a single-machine transaction only the COMMIT-BACKUPs. */
static void expected_work(struct txslot *s, const struct shape *sh, farm_as *as,
                          uint32_t me)
{
	bool prim[64] = {false};
	bool pair[64][64];
	memset(pair, 0, sizeof(pair));
	s->ew = s->emsg = s->er = 0;
	for (unsigned i = 0; i < sh->k + sh->ro; i++) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		unsigned n =
		        farm_as_replicas(as, farm_gaddr_region(s->a[i]), rep);
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
	uint64_t now = farm_now_ns();
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
	if (r->active && !r->fatal)
		slot_start(s);
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
		s->tc = farm_now_ns();
		rc = farm_tx_commit(tx, commit_cb, s);
	}
	if (rc)
		slot_end(s, rc);
}

static void slot_start(struct txslot *s)
{
	struct txrun *r = s->run;
	const struct shape *sh = r->sh;
	unsigned n = sh->k + sh->ro;
	for (unsigned i = 0; i < n; i++) {
		uint32_t mm = sh->mach[i];
		farm_gaddr a;
		bool dup;
		uint32_t nt = SH->m[mm].ntx,
		         part = O.shared_objs ? 1 : r->depth;
		do {
			uint32_t x =
			        (uint32_t)(farm_rand64(&r->rnd) % (nt / part));
			a = SH->tx[mm][x * part + (O.shared_objs ? 0 : s->idx)];
			dup = false;
			for (unsigned j = 0; j < i; j++)
				dup |= s->a[j] == a;
		} while (dup);
		s->a[i] = a;
	}
	expected_work(s, sh, r->m->as, r->m->id);
	r->inflight++;
	s->err = 0;
	s->t0 = farm_now_ns();
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

static double ratio_or(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static int run_tx(struct mach *m, const struct shape *sh, unsigned depth,
                  double seconds, struct txrun *r, struct run_res *out)
{
	uint64_t *lv = r->lat.v, *cv = r->clat.v;
	memset(r, 0, sizeof(*r));
	r->lat.v = lv;
	r->clat.v = cv;
	r->m = m;
	r->sh = sh;
	r->depth = depth;
	r->rnd = farm_now_ns();
	farm_txm_stats s0, s1;
	farm_txm_stats_get(m->txm, &s0);
	r->active = true;
	uint64_t t0 = farm_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	for (unsigned i = 0; i < depth; i++) {
		r->slots[i].run = r;
		r->slots[i].idx = i;
		slot_start(&r->slots[i]);
	}
	while (farm_now_ns() < end && !interrupted && !r->fatal)
		(void)farm_loop_poll(m->loop);
	r->active = false;
	uint64_t dl = farm_now_ns() + 10 * NS_PER_S;
	while (r->inflight && farm_now_ns() < dl)
		(void)farm_loop_poll(m->loop);
	uint64_t t1 = farm_now_ns();
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

enum { LF_READ = 0, RAW_64 = 1, RAW_128 = 2 };

struct lfrun;

struct lfslot {
	struct lfrun *run;
	uint64_t t0;
	uint8_t *buf; /* registered (raw) or plain (lf) */
	farm_wr wr;
};

struct lfrun {
	struct mach *m;
	int kind;
	bool active, timed;
	unsigned inflight;
	uint64_t rnd, ops, fatal;
	const farm_gaddr *objs;
	uint32_t nobj;
	const uint32_t *desc_of; /* per object: index into descs */
	const farm_mr_desc *descs;
	farm_mr *mr;
	struct samples lat;
	struct lfslot slots[MAX_DEPTH];
};

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
		samp_add(&r->lat, farm_now_ns() - s->t0);
	if (r->active)
		lf_issue(s);
}

static void lf_issue(struct lfslot *s)
{
	struct lfrun *r = s->run;
	uint32_t i = (uint32_t)(farm_rand64(&r->rnd) % r->nobj);
	farm_gaddr a = r->objs[i];
	if (r->timed)
		s->t0 = farm_now_ns();
	int rc;
	if (r->kind == LF_READ) {
		rc = farm_lf_read(r->m->txm, r->m->loop, a, OBJ_SIZE,
		                  UINT64_MAX, s->buf, lf_cb, s);
	} else {
		uint32_t len = r->kind == RAW_64 ? 64 : 128;
		s->wr = farm_wr_read(0, s->buf, r->mr, len,
		                     &r->descs[r->desc_of[i]],
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
static double run_lf(struct lfrun *r, int kind, unsigned depth, double seconds,
                     bool timed, const farm_gaddr *objs, uint32_t nobj)
{
	r->kind = kind;
	r->timed = timed;
	r->objs = objs;
	r->nobj = nobj;
	r->ops = 0;
	r->fatal = 0;
	r->lat.n = 0;
	r->rnd = farm_now_ns();
	r->active = true;
	uint64_t t0 = farm_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	for (unsigned i = 0; i < depth; i++) {
		r->slots[i].run = r;
		lf_issue(&r->slots[i]);
	}
	while (farm_now_ns() < end && !interrupted && !r->fatal)
		(void)farm_loop_poll(r->m->loop);
	r->active = false;
	uint64_t dl = farm_now_ns() + 10 * NS_PER_S;
	while (r->inflight && farm_now_ns() < dl)
		(void)farm_loop_poll(r->m->loop);
	uint64_t t1 = farm_now_ns();
	if (r->inflight || r->fatal)
		return 0;
	return (double)r->ops / ((double)(t1 - t0) / 1e9);
}

/* ---- the coordinator ----------------------------------------------------- */

struct lf_res {
	double lf_rate, raw64_rate, raw128_rate; /* medians */
	double lf_runs[80], raw64_runs[80], raw128_runs[80];
	double ratio64[80], ratio128[80]; /* per slice */
	double ratio64_med, ratio128_med;
	unsigned nslices;
	double lf_p50, lf_p99, raw64_p50, raw64_p99, local_p50, local_p99;
	double local_rate;
	uint64_t retries;
};

static double median(double *v, unsigned n)
{
	double t[16];
	memcpy(t, v, n * sizeof(*v));
	qsort(t, n, sizeof(*t), cmp_dbl);
	return n ? t[n / 2] : 0;
}

static int make_shapes(struct shape *sh)
{
	unsigned n = 0, N = O.machines;
	for (unsigned k = 1; k <= 4; k++) {
		struct shape *s = &sh[n++];
		memset(s, 0, sizeof(*s));
		snprintf(s->name, sizeof(s->name), "local_rmw%u", k);
		s->k = k;
		s->single = true;
	}
	for (unsigned k = 1; k <= 4; k++) {
		struct shape *s = &sh[n++];
		memset(s, 0, sizeof(*s));
		snprintf(s->name, sizeof(s->name), "dist_rmw%u", k);
		s->k = k;
		for (unsigned i = 0; i < k; i++)
			s->mach[i] = (1 + i) % N;
	}
	struct shape *s = &sh[n++];
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "dist_rmw1_ro1");
	s->k = 1;
	s->ro = 1;
	s->mach[0] = 1;
	s->mach[1] = N > 2 ? 2 : 1;
	return (int)n;
}

static bool shape_wanted(const char *name)
{
	if (!O.shapes[0])
		return true;
	size_t n = strlen(name);
	for (const char *p = O.shapes; (p = strstr(p, name)); p += n)
		if ((p == O.shapes || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return true;
	return false;
}

static double dev(double meas, double exp)
{
	if (exp == 0)
		return meas == 0 ? 0 : 1;
	double d = (meas - exp) / exp;
	return d < 0 ? -d : d;
}

static void json_goal(const char *name, double v, double target, bool met,
                      bool last)
{
	printf("\"%s\":{\"value\":%.4g,\"target\":%g,\"met\":%s}%s", name, v,
	       target, met ? "true" : "false", last ? "" : ",");
}

static int coordinator(struct mach *m, int cpu)
{
	int rc = 0;
	struct shape shapes[16];
	int nsh = make_shapes(shapes);
	struct run_res res1[16], resN[16];
	struct txrun *tr = calloc(1, sizeof(*tr));
	struct lfrun *lr = calloc(1, sizeof(*lr));
	uint64_t *sv = malloc(3ull * MAX_SAMPLES * sizeof(uint64_t));
	if (!tr || !lr || !sv) {
		free(tr);
		free(lr);
		free(sv);
		return -ENOMEM;
	}
	tr->lat.v = sv;
	tr->clat.v = sv + MAX_SAMPLES;
	lr->lat.v = sv + 2ull * MAX_SAMPLES;

	uint32_t rep[FARM_RING_MAX_REPLICAS];
	unsigned nrep =
	        farm_as_replicas(m->as, farm_gaddr_region(SH->tx[0][0]), rep);
	printf("txn_bench: %u machine processes (1 loop each, busy polling%s), "
	       "shm fabric, replicas %u (r in effect: %u), coordinator machine "
	       "0%s\n",
	       O.machines, cpu >= 0 ? ", pinned" : "", O.replicas, nrep,
	       O.machines == 2 ? " (also primary of the local objects)" : "");
	printf("objects of %u B (%u lines with versions): %u per machine for "
	       "transactions, %u on machine 1 for lock-free reads; %.2f s per "
	       "run\n\n",
	       OBJ_SIZE, 2u, O.tx_objects, O.lf_objects, O.seconds);

	/* Transactions. */
	printf("%-14s %9s %8s %8s %8s %8s %8s | %9s %7s | %-17s %-15s %-15s "
	       "%s\n",
	       "shape", "tx/s(1)", "p50 us", "p99 us", "max us", "c.p50",
	       "c.p99", "tx/s(D)", "aborts", "WRITEs/commit", "msgs/commit",
	       "READs/commit", "TRUNC");
	double maxdev = 0;
	bool counts_ok = true;
	for (int i = 0; i < nsh && !rc && !interrupted; i++) {
		memset(&res1[i], 0, sizeof(res1[i]));
		memset(&resN[i], 0, sizeof(resN[i]));
		if (!shape_wanted(shapes[i].name)) {
			counts_ok = false;
			continue;
		}
		rc = run_tx(m, &shapes[i], 1, O.seconds, tr, &res1[i]);
		if (!rc)
			rc = run_tx(m, &shapes[i], O.depth, O.seconds, tr,
			            &resN[i]);
		if (rc)
			break;
		struct run_res *a = &res1[i], *b = &resN[i];
		double d = FARM_MAX(dev(a->w, a->w_exp),
		                    FARM_MAX(dev(a->msgs, a->msgs_exp),
		                             dev(a->r, a->r_exp)));
		d = FARM_MAX(d, FARM_MAX(dev(b->w, b->w_exp),
		                         FARM_MAX(dev(b->msgs, b->msgs_exp),
		                                  dev(b->r, b->r_exp))));
		if (!a->commits || !b->commits)
			counts_ok = false;
		maxdev = FARM_MAX(maxdev, d);
		char wbuf[32], mbuf[32], rbuf[32];
		snprintf(wbuf, sizeof(wbuf), "%.3f (exp %.3f)", a->w, a->w_exp);
		snprintf(mbuf, sizeof(mbuf), "%.2f (exp %.2f)", a->msgs,
		         a->msgs_exp);
		snprintf(rbuf, sizeof(rbuf), "%.2f (exp %.2f)", a->r, a->r_exp);
		printf("%-14s %9.0f %8.2f %8.2f %8.0f %8.2f %8.2f | %9.0f "
		       "%7" PRIu64 " | %-17s %-15s %-15s %.2f\n",
		       shapes[i].name, a->tps, a->p50_us, a->p99_us, a->max_us,
		       a->cp50_us, a->cp99_us, b->tps, b->aborts, wbuf, mbuf,
		       rbuf, a->trunc);
		fflush(stdout);
	}
	if (rc)
		goto out;
	printf("(1): one transaction in flight, latency begin->outcome (c.: "
	       "commit call->outcome); (D): %u in flight\n\n",
	       O.depth);

	/* Lock-free reads against raw READs of the same objects. */
	struct lf_res L = {0};
	if (!O.lf) {
		printf("(lock-free reads skipped: --no-lf)\n");
		goto out;
	}
	uint32_t nlf = SH->m[1].nlf;
	uint32_t *desc_of = malloc((size_t)nlf * sizeof(*desc_of));
	size_t bufsz = (size_t)MAX_DEPTH * 128;
	uint8_t *bufs = aligned_alloc(4096, bufsz);
	farm_mr *mr = NULL;
	if (!desc_of || !bufs) {
		rc = -ENOMEM;
		goto lf_out;
	}
	for (uint32_t i = 0; i < nlf; i++) {
		uint32_t r = farm_gaddr_region(SH->lf[i]);
		desc_of[i] = 0;
		for (uint32_t j = 0; j < SH->m[1].nreg; j++)
			if (SH->m[1].reg_id[j] == r)
				desc_of[i] = j;
	}
	memset(bufs, 0, bufsz);
	if ((rc = farm_mr_reg(farm_node_fabric(m->node), bufs, bufsz,
	                      FARM_ACCESS_LOCAL, &mr))) {
		fprintf(stderr, PROG ": farm_mr_reg: %s\n", farm_strerror(rc));
		goto lf_out;
	}
	lr->m = m;
	lr->mr = mr;
	lr->desc_of = desc_of;
	lr->descs = SH->m[1].reg_desc;
	for (unsigned i = 0; i < MAX_DEPTH; i++)
		lr->slots[i].buf = bufs + (size_t)i * 128;
	farm_txm_stats ls0, ls1;
	farm_txm_stats_get(m->txm, &ls0);
	/* warm-up: a short pass of each */
	(void)run_lf(lr, LF_READ, O.lf_depth, O.seconds / 10, false, SH->lf,
	             nlf);
	(void)run_lf(lr, RAW_64, O.lf_depth, O.seconds / 10, false, SH->lf,
	             nlf);
	L.nslices = O.repeat * 5;
	double slice = O.seconds / 5;
	for (unsigned k = 0; k < L.nslices && !rc; k++) {
		L.lf_runs[k] = run_lf(lr, LF_READ, O.lf_depth, slice, false,
		                      SH->lf, nlf);
		L.raw64_runs[k] = run_lf(lr, RAW_64, O.lf_depth, slice, false,
		                         SH->lf, nlf);
		L.raw128_runs[k] = run_lf(lr, RAW_128, O.lf_depth, slice, false,
		                          SH->lf, nlf);
		if (!L.lf_runs[k] || !L.raw64_runs[k] || !L.raw128_runs[k])
			rc = -EIO;
		else {
			L.ratio64[k] = L.lf_runs[k] / L.raw64_runs[k];
			L.ratio128[k] = L.lf_runs[k] / L.raw128_runs[k];
		}
	}
	if (rc)
		goto lf_out;
	double tmp[80];
	memcpy(tmp, L.lf_runs, sizeof(tmp));
	L.lf_rate = median(tmp, L.nslices);
	memcpy(tmp, L.raw64_runs, sizeof(tmp));
	L.raw64_rate = median(tmp, L.nslices);
	memcpy(tmp, L.raw128_runs, sizeof(tmp));
	L.raw128_rate = median(tmp, L.nslices);
	memcpy(tmp, L.ratio64, sizeof(tmp));
	L.ratio64_med = median(tmp, L.nslices);
	memcpy(tmp, L.ratio128, sizeof(tmp));
	L.ratio128_med = median(tmp, L.nslices);
	if (!run_lf(lr, LF_READ, 1, O.seconds, true, SH->lf, nlf)) {
		rc = -EIO;
		goto lf_out;
	}
	samp_pcts(&lr->lat, &L.lf_p50, &L.lf_p99);
	if (!run_lf(lr, RAW_64, 1, O.seconds, true, SH->lf, nlf)) {
		rc = -EIO;
		goto lf_out;
	}
	samp_pcts(&lr->lat, &L.raw64_p50, &L.raw64_p99);
	L.local_rate = run_lf(lr, LF_READ, 1, O.seconds, true, SH->tx[0],
	                      SH->m[0].ntx);
	if (!L.local_rate) {
		rc = -EIO;
		goto lf_out;
	}
	samp_pcts(&lr->lat, &L.local_p50, &L.local_p99);
	farm_txm_stats_get(m->txm, &ls1);
	L.retries = ls1.lf_retries - ls0.lf_retries;
	printf("lock-free reads of %u B objects on machine 1 (%u objects, "
	       "random), "
	       "%u in flight, %u interleaved slices of %.2f s, medians:\n",
	       OBJ_SIZE, nlf, O.lf_depth, L.nslices, O.seconds / 5);
	printf("  farm_lf_read      %6.2f M/s  (slices:", L.lf_rate / 1e6);
	for (unsigned k = 0; k < L.nslices; k++)
		printf(" %.2f", L.lf_runs[k] / 1e6);
	printf(")\n  raw READ 64 B     %6.2f M/s  (slices:",
	       L.raw64_rate / 1e6);
	for (unsigned k = 0; k < L.nslices; k++)
		printf(" %.2f", L.raw64_runs[k] / 1e6);
	printf(")\n  raw READ 128 B    %6.2f M/s  (slices:",
	       L.raw128_rate / 1e6);
	for (unsigned k = 0; k < L.nslices; k++)
		printf(" %.2f", L.raw128_runs[k] / 1e6);
	printf(")\n  lf / raw 64 B per slice:");
	for (unsigned k = 0; k < L.nslices; k++)
		printf(" %.2f", L.ratio64[k]);
	printf("\n  lf / raw 64 B = %.3f, lf / raw 128 B = %.3f (medians of "
	       "the per-slice ratios; of the median rates: %.3f, %.3f); "
	       "retries %" PRIu64 "\n",
	       L.ratio64_med, L.ratio128_med, ratio_or(L.lf_rate, L.raw64_rate),
	       ratio_or(L.lf_rate, L.raw128_rate), L.retries);
	printf("  one in flight: lf_read p50 %.0f ns p99 %.0f ns; raw READ 64 "
	       "B p50 "
	       "%.0f ns p99 %.0f ns; local lf_read p50 %.0f ns p99 %.0f ns "
	       "(%.2f M/s)\n\n",
	       L.lf_p50, L.lf_p99, L.raw64_p50, L.raw64_p99, L.local_p50,
	       L.local_p99, L.local_rate / 1e6);

	/* Check: the counters add up to the committed increments. An object
	 * that stays locked (-EBUSY) is reported with its header word. */
	uint64_t sum = 0, stuck = 0;
	for (unsigned mm = 0; mm < O.machines && !rc; mm++)
		for (uint32_t i = 0; i < SH->m[mm].ntx && !rc; i++) {
			uint64_t v[OBJ_SIZE / 8];
			farm_gaddr a = SH->tx[mm][i];
			rc = farm_lf_read_sync(m->txm, m->loop, a, OBJ_SIZE,
			                       UINT64_MAX, v);
			if (rc == -EBUSY) {
				uint64_t t = farm_now_ns() + 200000000ull;
				while (farm_now_ns() < t)
					(void)farm_loop_poll(m->loop);
				rc = farm_lf_read_sync(m->txm, m->loop, a,
				                       OBJ_SIZE, UINT64_MAX, v);
			}
			if (rc == -EBUSY) {
				stuck++;
				rc = 0;
				uint64_t hdr = 0;
				const uint64_t *lp =
				        farm_as_local_ptr(m->as, a, 8);
				if (lp)
					hdr = __atomic_load_n(lp,
					                      __ATOMIC_ACQUIRE);
				fprintf(stderr,
				        PROG ": object %" PRIx64
				             " (machine %u, "
				             "#%u) stays locked: version word "
				             "%" PRIx64 "%s\n",
				        a, mm, i, hdr,
				        lp ? "" : " (remote: not read)");
				continue;
			}
			sum += v[0];
		}
	if (rc) {
		fprintf(stderr, PROG ": reading the counters back: %s\n",
		        farm_strerror(rc));
		goto lf_out;
	}
	bool check_ok = sum == g_increments && !stuck;
	printf("check: counters sum to %" PRIu64
	       ", committed increments %" PRIu64
	       ", objects left locked %" PRIu64 ": %s\n\n",
	       sum, g_increments, stuck, check_ok ? "ok" : "MISMATCH");
	if (!check_ok) {
		fprintf(stderr,
		        PROG ": counters do not add up (%" PRIu64 " vs %" PRIu64
		             " increments; %" PRIu64 " objects locked)\n",
		        sum, g_increments, stuck);
		rc = -EIO;
	}

	/* Goals. */
	double lfr = L.ratio64_med;
	int d2 = 5; /* dist_rmw2 */
	bool ga = counts_ok && maxdev == 0, gb = lfr >= GOAL_LF_RATIO,
	     gc = res1[d2].commits && res1[d2].p50_us < GOAL_P50_US;
	printf("goals: (a) max deviation of per-commit WRITEs/messages/READs "
	       "from "
	       "the protocol: %.4f (target 0): %s\n",
	       maxdev, ga ? "met" : "NOT met");
	printf("       (b) lock-free 64 B reads / raw 64 B READs: %.3f (target "
	       ">= "
	       "%.1f): %s\n",
	       lfr, GOAL_LF_RATIO, gb ? "met" : "NOT met");
	printf("       (c) dist_rmw2 median latency (begin->commit, %s): %.2f "
	       "us "
	       "(target < %.0f): %s\n",
	       O.machines == 2
	               ? "coordinator is machine 0, primary of one object"
	               : "coordinator on a third machine",
	       res1[d2].p50_us, GOAL_P50_US, gc ? "met" : "NOT met");

	printf("{\"bench\":\"txn_bench\",\"provider\":\"shm\",\"machines\":%u,"
	       "\"replicas\":%u,\"replicas_in_effect\":%u,\"coordinator\":0,"
	       "\"busy_poll\":true,\"pinned\":%s,\"seconds\":%g,\"depth\":%u,"
	       "\"lf_depth\":%u,\"object_size\":%u,\"tx_objects\":%u,"
	       "\"lf_objects\":%u,\"shapes\":[",
	       O.machines, O.replicas, nrep, cpu >= 0 ? "true" : "false",
	       O.seconds, O.depth, O.lf_depth, OBJ_SIZE, O.tx_objects, nlf);
	for (int i = 0; i < nsh; i++) {
		struct run_res *a = &res1[i], *b = &resN[i];
		printf("%s{\"name\":\"%s\",\"objects_written\":%u,\"objects_"
		       "read_only\":%u,"
		       "\"single\":%s,\"tps_1\":%.0f,\"p50_us\":%.3f,\"p99_"
		       "us\":%.3f,"
		       "\"max_us\":%.1f,\"commit_p50_us\":%.3f,\"commit_p99_"
		       "us\":%.3f,"
		       "\"tps_depth\":%.0f,"
		       "\"aborts_depth\":%" PRIu64
		       ",\"writes_per_commit\":%.4f,"
		       "\"writes_expected\":%.4f,\"msgs_per_commit\":%.4f,"
		       "\"msgs_expected\":%.4f,\"reads_per_commit\":%.4f,"
		       "\"reads_expected\":%.4f,\"truncates_per_commit\":%.4f}",
		       i ? "," : "", shapes[i].name, shapes[i].k, shapes[i].ro,
		       shapes[i].single ? "true" : "false", a->tps, a->p50_us,
		       a->p99_us, a->max_us, a->cp50_us, a->cp99_us, b->tps,
		       b->aborts, a->w, a->w_exp, a->msgs, a->msgs_exp, a->r,
		       a->r_exp, a->trunc);
	}
	printf("],\"lf\":{\"lf_read_rate\":%.0f,\"raw_read64_rate\":%.0f,"
	       "\"raw_read128_rate\":%.0f,\"lf_vs_raw128\":%.4f,"
	       "\"lf_vs_raw64\":%.4f,\"slices\":%u,\"lf_p50_ns\":%"
	       ".0f,"
	       "\"lf_p99_ns\":%.0f,\"raw64_p50_ns\":%.0f,\"raw64_p99_ns\":%.0f,"
	       "\"local_lf_rate\":%.0f,\"local_lf_p50_ns\":%.0f,"
	       "\"local_lf_p99_ns\":%.0f,\"lf_retries\":%" PRIu64 "},"
	       "\"check_ok\":%s,\"goals\":{",
	       L.lf_rate, L.raw64_rate, L.raw128_rate, L.ratio128_med,
	       L.ratio64_med, L.nslices, L.lf_p50, L.lf_p99, L.raw64_p50,
	       L.raw64_p99, L.local_rate, L.local_p50, L.local_p99, L.retries,
	       check_ok ? "true" : "false");
	json_goal("ops_per_commit", maxdev, 0, ga, false);
	json_goal("lf_read_vs_fabric_read_64B", lfr, GOAL_LF_RATIO, gb, false);
	json_goal("dist_rmw2_p50_us", res1[d2].p50_us, GOAL_P50_US, gc, true);
	printf("}}\n");
	fflush(stdout);
lf_out:
	if (mr)
		farm_mr_dereg(mr);
	free(bufs);
	free(desc_of);
out:
	free(tr);
	free(lr);
	free(sv);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: " PROG " [options]\n"
	        "Transactions on a local cluster of machine processes (shm "
	        "fabric):\n"
	        "read-modify-write throughput and latency, lock-free reads "
	        "against\n"
	        "raw READs, protocol operations per commit. Prints a table, "
	        "then one\n"
	        "JSON line. Machine 0 (this process) coordinates.\n\n"
	        "  --machines N      machine processes, 2 or 3 (default 2)\n"
	        "  --replicas R      copies of each region (default 3; fewer "
	        "when\n"
	        "                    the cluster is smaller)\n"
	        "  --seconds S       each run (default 1)\n"
	        "  --depth D         transactions in flight, throughput runs "
	        "(8)\n"
	        "  --lf-depth D      lock-free / raw reads in flight (16)\n"
	        "  --repeat N        lock-free vs raw READ runs, median (3)\n"
	        "  --tx-objects N    64 B objects per machine for transactions "
	        "(4096)\n"
	        "  --lf-objects N    64 B objects on machine 1 for reads "
	        "(262144)\n"
	        "  --region-size B   region size (default 256M)\n"
	        "  --log-size B      transaction log ring size (default 1M)\n"
	        "  --shapes LIST     only these transaction shapes "
	        "(local_rmw1..4,\n"
	        "                    dist_rmw1..4, dist_rmw1_ro1; for "
	        "profiling;\n"
	        "                    goals then not met)\n"
	        "  --shared-objects  concurrent transactions pick from all "
	        "objects\n"
	        "                    (default: each of the --depth slots has "
	        "its\n"
	        "                    own share, so they never conflict)\n"
	        "  --no-lf           skip the lock-free reads (and the goals' "
	        "JSON)\n"
	        "  --no-pin          do not pin machine i to CPU i\n"
	        "  --quick           short runs, few objects (smoke test)\n"
	        "  --data-dir DIR    where the machines' files go (default\n"
	        "                    /dev/shm: DRAM, persist = cache flush;\n"
	        "                    a disk file system makes every durable\n"
	        "                    log write an msync)\n"
	        "  --help            this text\n");
}

static int parse_u(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || !*s || v < lo || v > hi)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int main(int argc, char **argv)
{
	O = (struct opts){.machines = 2,
	                  .replicas = 3,
	                  .depth = 8,
	                  .lf_depth = 16,
	                  .repeat = 3,
	                  .seconds = 1.0,
	                  .tx_objects = 4096,
	                  .lf_objects = 262144,
	                  .log_size = 1u << 20,
	                  .region_size = 256ull << 20,
	                  .pin = true,
	                  .lf = true};
	enum {
		OPT_MACH = 256,
		OPT_REP,
		OPT_SEC,
		OPT_DEPTH,
		OPT_LFD,
		OPT_REPEAT,
		OPT_TXO,
		OPT_LFO,
		OPT_RSZ,
		OPT_LSZ,
		OPT_NOPIN,
		OPT_QUICK,
		OPT_SHAPES,
		OPT_NOLF,
		OPT_SHARED,
		OPT_DATADIR,
		OPT_HELP
	};
	static const struct option lo[] = {
	        {"machines", required_argument, 0, OPT_MACH},
	        {"replicas", required_argument, 0, OPT_REP},
	        {"seconds", required_argument, 0, OPT_SEC},
	        {"depth", required_argument, 0, OPT_DEPTH},
	        {"lf-depth", required_argument, 0, OPT_LFD},
	        {"repeat", required_argument, 0, OPT_REPEAT},
	        {"tx-objects", required_argument, 0, OPT_TXO},
	        {"lf-objects", required_argument, 0, OPT_LFO},
	        {"region-size", required_argument, 0, OPT_RSZ},
	        {"log-size", required_argument, 0, OPT_LSZ},
	        {"no-pin", no_argument, 0, OPT_NOPIN},
	        {"quick", no_argument, 0, OPT_QUICK},
	        {"shapes", required_argument, 0, OPT_SHAPES},
	        {"no-lf", no_argument, 0, OPT_NOLF},
	        {"shared-objects", no_argument, 0, OPT_SHARED},
	        {"data-dir", required_argument, 0, OPT_DATADIR},
	        {"help", no_argument, 0, OPT_HELP},
	        {0, 0, 0, 0}};
	bool quick = false;
	double secs = -1;
	data_dir = "/dev/shm";
	unsigned txo = 0, lfo = 0;
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int bad = 0;
		uint64_t v;
		switch (c) {
		case OPT_MACH:
			bad = parse_u(optarg, 2, MAXM, &O.machines);
			break;
		case OPT_REP: bad = parse_u(optarg, 1, 8, &O.replicas); break;
		case OPT_SEC: {
			char *end;
			secs = strtod(optarg, &end);
			bad = *end || !(secs > 0 && secs <= 60);
			break;
		}
		case OPT_DEPTH:
			bad = parse_u(optarg, 1, MAX_DEPTH, &O.depth);
			break;
		case OPT_LFD:
			bad = parse_u(optarg, 1, MAX_DEPTH, &O.lf_depth);
			break;
		case OPT_REPEAT: bad = parse_u(optarg, 1, 15, &O.repeat); break;
		case OPT_DATADIR:
			bad = strlen(optarg) == 0 || strlen(optarg) > 80;
			if (!bad)
				data_dir = optarg;
			break;
		case OPT_TXO: bad = parse_u(optarg, 16, MAX_TXOBJ, &txo); break;
		case OPT_LFO: bad = parse_u(optarg, 16, MAX_LFOBJ, &lfo); break;
		case OPT_RSZ:
			bad = farm_parse_size(optarg, &v) || !farm_is_pow2(v) ||
			      v < (1u << 20) || v > (1ull << 32);
			if (!bad)
				O.region_size = v;
			break;
		case OPT_LSZ:
			bad = farm_parse_size(optarg, &v) || !farm_is_pow2(v) ||
			      v < (64u << 10) || v > (64u << 20);
			if (!bad)
				O.log_size = (uint32_t)v;
			break;
		case OPT_NOPIN: O.pin = false; break;
		case OPT_QUICK: quick = true; break;
		case OPT_SHAPES:
			bad = strlen(optarg) >= sizeof(O.shapes);
			if (!bad)
				strcpy(O.shapes, optarg);
			break;
		case OPT_NOLF: O.lf = false; break;
		case OPT_SHARED: O.shared_objs = true; break;
		case OPT_HELP: usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (bad) {
			fprintf(stderr, PROG ": bad value '%s' for --%s\n",
			        optarg, lo[c - OPT_MACH].name);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n",
		        argv[optind]);
		usage(stderr);
		return 2;
	}
	if (quick) {
		O.quick = true;
		O.seconds = 0.1;
		O.repeat = 1;
		O.tx_objects = 256;
		O.lf_objects = 8192;
	}
	if (secs > 0)
		O.seconds = secs;
	if (txo)
		O.tx_objects = txo;
	if (lfo)
		O.lf_objects = lfo;

	SH = mmap(NULL, sizeof(*SH), PROT_READ | PROT_WRITE,
	          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (SH == MAP_FAILED) {
		fprintf(stderr, PROG ": mmap: %s\n", strerror(errno));
		return 1;
	}
	char base[128];
	snprintf(base, sizeof(base), "%s/txn_bench.%d", data_dir,
	         (int)getpid());
	if (mkdir(base, 0700) != 0) {
		fprintf(stderr, PROG ": mkdir %s: %s\n", base, strerror(errno));
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	unsigned ncpu = 0;
	(void)nth_cpu(0, &ncpu);
	bool pin = O.pin && ncpu >= O.machines;
	pid_t kids[MAXM] = {0};
	int rc = 0;
	fflush(stdout);
	for (unsigned i = 1; i < O.machines; i++) {
		pid_t p = fork();
		if (p < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			rc = -errno;
			break;
		}
		if (p == 0)
			_exit(child_main(i, base,
			                 pin ? nth_cpu(i, &ncpu) : -1));
		kids[i] = p;
	}
	int cpu = pin ? nth_cpu(0, &ncpu) : -1;
	struct mach m = {0};
	if (!rc) {
		bu_pin_to(cpu, PROG);
		rc = mach_open(&m, 0, base);
	}
	if (!rc) {
		atomic_store(&SH->m[0].state, ST_JOINED);
		rc = wait_state(&m, ST_JOINED);
	}
	if (!rc) {
		atomic_store(&SH->go, GO_ALLOC);
		rc = mach_alloc(&m);
		if (!rc) {
			atomic_store(&SH->m[0].state, ST_ALLOCATED);
			rc = wait_state(&m, ST_ALLOCATED);
		}
	}
	if (!rc)
		rc = coordinator(&m, cpu);
	if (rc)
		fprintf(stderr, PROG ": failed: %s\n", farm_strerror(rc));
	atomic_store(&SH->go, GO_EXIT);
	/* Keep polling while the others leave. */
	for (unsigned i = 1; i < O.machines; i++) {
		if (!kids[i])
			continue;
		int st = 0;
		uint64_t dl = farm_now_ns() + 20 * NS_PER_S;
		pid_t w;
		while ((w = waitpid(kids[i], &st, WNOHANG)) == 0 &&
		       farm_now_ns() < dl) {
			if (m.loop)
				(void)farm_loop_poll(m.loop);
			else
				usleep(1000);
		}
		if (w == 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], &st, 0);
		}
		if (!rc && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
			fprintf(stderr, PROG ": machine %u exited badly\n", i);
			rc = -EIO;
		}
	}
	mach_close(&m);
	bu_rm_tree(AT_FDCWD, base, 2);
	munmap(SH, sizeof(*SH));
	return rc ? 1 : 0;
}
