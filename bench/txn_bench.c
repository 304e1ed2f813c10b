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
#include "txn_bench.h"

#include "benchreport.h"
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

volatile sig_atomic_t interrupted;
struct shared *g_sh;
struct opts g_opt;
const char *data_dir = "/dev/shm"; /* --data-dir */

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
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
	qsort(t, n, sizeof(*t), bu_cmp_double);
	return n ? t[n / 2] : 0;
}

static int make_shapes(struct shape *sh)
{
	unsigned n = 0, N = g_opt.machines;
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
	if (!g_opt.shapes[0])
		return true;
	size_t n = strlen(name);
	for (const char *p = g_opt.shapes; (p = strstr(p, name)); p += n)
		if ((p == g_opt.shapes || p[-1] == ',') &&
		    (p[n] == ',' || !p[n]))
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
	static const struct br_style style = {{'g', 4}, {'g', 6}, true};
	struct br_goal g = {name, v, target, met, NULL, NULL};
	br_goal(stdout, &style, &g, !last);
}

/* What the coordinator's phases hand each other. */
struct coord {
	struct mach *m;
	int cpu;
	struct shape shapes[16];
	int nsh;
	struct run_res res1[16], resN[16];
	struct txrun *tr;
	struct lfrun *lr;
	unsigned nrep;
	double maxdev;
	bool counts_ok, check_ok;
	bool checked; /* the counters were read back */
	uint32_t nlf;
	struct lf_res L;
};

/* The transaction shapes, one in flight and then --depth: the table. */
static int coord_tx(struct coord *c)
{
	struct mach *m = c->m;
	struct shape *shapes = c->shapes;
	struct run_res *res1 = c->res1, *resN = c->resN;
	struct txrun *tr = c->tr;
	int nsh = c->nsh, rc = 0;
	printf("%-14s %9s %8s %8s %8s %8s %8s | %9s %7s | %-17s %-15s %-15s "
	       "%s\n",
	       "shape", "tx/s(1)", "p50 us", "p99 us", "max us", "c.p50",
	       "c.p99", "tx/s(D)", "aborts", "WRITEs/commit", "msgs/commit",
	       "READs/commit", "TRUNC");
	for (int i = 0; i < nsh && !rc && !interrupted; i++) {
		memset(&res1[i], 0, sizeof(res1[i]));
		memset(&resN[i], 0, sizeof(resN[i]));
		if (!shape_wanted(shapes[i].name)) {
			c->counts_ok = false;
			continue;
		}
		rc = run_tx(m, &shapes[i], 1, g_opt.seconds, tr, &res1[i]);
		if (!rc)
			rc = run_tx(m, &shapes[i], g_opt.depth, g_opt.seconds,
			            tr, &resN[i]);
		if (rc)
			break;
		struct run_res *a = &res1[i], *b = &resN[i];
		double d = BU_MAX(
		        dev(a->w, a->w_exp),
		        BU_MAX(dev(a->msgs, a->msgs_exp), dev(a->r, a->r_exp)));
		d = BU_MAX(d, BU_MAX(dev(b->w, b->w_exp),
		                     BU_MAX(dev(b->msgs, b->msgs_exp),
		                            dev(b->r, b->r_exp))));
		if (!a->commits || !b->commits)
			c->counts_ok = false;
		c->maxdev = BU_MAX(c->maxdev, d);
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
		return rc;
	printf("(1): one transaction in flight, latency begin->outcome (c.: "
	       "commit call->outcome); (D): %u in flight\n\n",
	       g_opt.depth);

	return 0;
}

/* The lock-free read runs against raw READs of the same objects, in
 * interleaved slices, then one in flight; into c->L. */
static int coord_lf_runs(struct coord *c)
{
	struct mach *m = c->m;
	struct lfrun *lr = c->lr;
	uint32_t nlf = c->nlf;
	struct lf_res L = {0};
	int rc = 0;
	farm_txm_stats ls0, ls1;
	farm_txm_stats_get(m->txm, &ls0);
	/* warm-up: a short pass of each */
	(void)run_lf(lr, LF_READ, g_opt.lf_depth, g_opt.seconds / 10, false,
	             g_sh->lf, nlf);
	(void)run_lf(lr, RAW_64, g_opt.lf_depth, g_opt.seconds / 10, false,
	             g_sh->lf, nlf);
	L.nslices = g_opt.repeat * 5;
	double slice = g_opt.seconds / 5;
	for (unsigned k = 0; k < L.nslices && !rc; k++) {
		L.lf_runs[k] = run_lf(lr, LF_READ, g_opt.lf_depth, slice, false,
		                      g_sh->lf, nlf);
		L.raw64_runs[k] = run_lf(lr, RAW_64, g_opt.lf_depth, slice,
		                         false, g_sh->lf, nlf);
		L.raw128_runs[k] = run_lf(lr, RAW_128, g_opt.lf_depth, slice,
		                          false, g_sh->lf, nlf);
		if (!L.lf_runs[k] || !L.raw64_runs[k] || !L.raw128_runs[k])
			rc = -EIO;
		else {
			L.ratio64[k] = L.lf_runs[k] / L.raw64_runs[k];
			L.ratio128[k] = L.lf_runs[k] / L.raw128_runs[k];
		}
	}
	if (rc)
		return rc;
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
	if (!run_lf(lr, LF_READ, 1, g_opt.seconds, true, g_sh->lf, nlf)) {
		return -EIO;
	}
	samp_pcts(&lr->lat, &L.lf_p50, &L.lf_p99);
	if (!run_lf(lr, RAW_64, 1, g_opt.seconds, true, g_sh->lf, nlf)) {
		return -EIO;
	}
	samp_pcts(&lr->lat, &L.raw64_p50, &L.raw64_p99);
	L.local_rate = run_lf(lr, LF_READ, 1, g_opt.seconds, true, g_sh->tx[0],
	                      g_sh->m[0].ntx);
	if (!L.local_rate) {
		return -EIO;
	}
	samp_pcts(&lr->lat, &L.local_p50, &L.local_p99);
	farm_txm_stats_get(m->txm, &ls1);
	L.retries = ls1.lf_retries - ls0.lf_retries;
	c->L = L;
	return 0;
}

/* The lock-free read figures (c->L): the summary's lines. */
static void coord_lf_print(const struct coord *c)
{
	const struct lf_res L = c->L;
	uint32_t nlf = c->nlf;
	printf("lock-free reads of %u B objects on machine 1 (%u objects, "
	       "random), "
	       "%u in flight, %u interleaved slices of %.2f s, medians:\n",
	       OBJ_SIZE, nlf, g_opt.lf_depth, L.nslices, g_opt.seconds / 5);
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
}

/* Lock-free reads, with the READ buffers registered for their run. */
static int coord_lf(struct coord *c)
{
	struct mach *m = c->m;
	struct lfrun *lr = c->lr;
	c->nlf = g_sh->m[1].nlf;
	size_t bufsz = (size_t)MAX_DEPTH * 128;
	uint8_t *bufs = aligned_alloc(4096, bufsz);
	farm_mr *mr = NULL;
	int rc = 0;
	if (!bufs) {
		rc = -ENOMEM;
		goto out;
	}
	memset(bufs, 0, bufsz);
	if ((rc = farm_mr_reg(farm_node_fabric(m->node), bufs, bufsz,
	                      FARM_ACCESS_LOCAL, &mr))) {
		fprintf(stderr, PROG ": farm_mr_reg: %s\n", farm_strerror(rc));
		goto out;
	}
	lr->m = m;
	lr->mr = mr;
	lr->reg_id = g_sh->m[1].reg_id;
	lr->nreg = g_sh->m[1].nreg;
	lr->descs = g_sh->m[1].reg_desc;
	for (unsigned i = 0; i < MAX_DEPTH; i++)
		lr->slots[i].buf = bufs + (size_t)i * 128;
	rc = coord_lf_runs(c);
	if (!rc)
		coord_lf_print(c);
out:
	if (mr)
		farm_mr_dereg(mr);
	free(bufs);
	return rc;
}

/* Check: the counters add up to the committed increments (c->check_ok,
 * -EIO when not). c->checked once they were read back. */
static int coord_check(struct coord *c)
{
	struct mach *m = c->m;
	int rc = 0;
	/* An object that stays locked (-EBUSY) is reported with its header
	 * word. */
	uint64_t sum = 0, stuck = 0;
	for (unsigned mm = 0; mm < g_opt.machines && !rc; mm++)
		for (uint32_t i = 0; i < g_sh->m[mm].ntx && !rc; i++) {
			uint64_t v[OBJ_SIZE / 8];
			farm_gaddr a = g_sh->tx[mm][i];
			rc = farm_lf_read_sync(m->txm, m->loop, a, OBJ_SIZE,
			                       UINT64_MAX, v);
			if (rc == -EBUSY) {
				uint64_t t = bu_now_ns() + 200000000ull;
				while (bu_now_ns() < t)
					(void)farm_loop_poll(m->loop);
				rc = farm_lf_read_sync(m->txm, m->loop, a,
				                       OBJ_SIZE, UINT64_MAX, v);
			}
			if (rc == -EBUSY) {
				stuck++;
				rc = 0;
				fprintf(stderr,
				        PROG ": object %" PRIx64
				             " (machine %u, "
				             "#%u) stays locked\n",
				        a, mm, i);
				continue;
			}
			sum += v[0];
		}
	if (rc) {
		fprintf(stderr, PROG ": reading the counters back: %s\n",
		        farm_strerror(rc));
		return rc;
	}
	c->checked = true;
	bool check_ok = c->check_ok = sum == g_increments && !stuck;
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

	return rc;
}

/* The goals, then the JSON line. */
static void coord_report(const struct coord *c)
{
	const struct shape *shapes = c->shapes;
	const struct run_res *res1 = c->res1, *resN = c->resN;
	const struct lf_res L = c->L;
	double maxdev = c->maxdev;
	bool counts_ok = c->counts_ok, check_ok = c->check_ok;
	unsigned nrep = c->nrep;
	uint32_t nlf = c->nlf;
	int nsh = c->nsh, cpu = c->cpu;
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
	       g_opt.machines == 2
	               ? "coordinator is machine 0, primary of one object"
	               : "coordinator on a third machine",
	       res1[d2].p50_us, GOAL_P50_US, gc ? "met" : "NOT met");

	printf("{\"bench\":\"txn_bench\",\"provider\":\"shm\",\"machines\":%u,"
	       "\"replicas\":%u,\"replicas_in_effect\":%u,\"coordinator\":0,"
	       "\"busy_poll\":true,\"pinned\":%s,\"seconds\":%g,\"depth\":%u,"
	       "\"lf_depth\":%u,\"object_size\":%u,\"tx_objects\":%u,"
	       "\"lf_objects\":%u,\"shapes\":[",
	       g_opt.machines, g_opt.replicas, nrep,
	       cpu >= 0 ? "true" : "false", g_opt.seconds, g_opt.depth,
	       g_opt.lf_depth, OBJ_SIZE, g_opt.tx_objects, nlf);
	for (int i = 0; i < nsh; i++) {
		const struct run_res *a = &res1[i], *b = &resN[i];
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
}

static int coordinator(struct mach *m, int cpu)
{
	int rc = 0;
	struct coord *c = calloc(1, sizeof(*c));
	uint64_t *sv = malloc(3ull * MAX_SAMPLES * sizeof(uint64_t));
	if (c) {
		c->tr = calloc(1, sizeof(*c->tr));
		c->lr = calloc(1, sizeof(*c->lr));
	}
	if (!c || !c->tr || !c->lr || !sv) {
		if (c) {
			free(c->tr);
			free(c->lr);
		}
		free(c);
		free(sv);
		return -ENOMEM;
	}
	c->m = m;
	c->cpu = cpu;
	c->counts_ok = true;
	c->nsh = make_shapes(c->shapes);
	c->tr->lat.v = sv;
	c->tr->clat.v = sv + MAX_SAMPLES;
	c->lr->lat.v = sv + 2ull * MAX_SAMPLES;

	uint32_t rep[FARM_REPLICAS_MAX];
	unsigned nrep = c->nrep = region_replicas(
	        m->node, farm_gaddr_region(g_sh->tx[0][0]), rep);
	printf("txn_bench: %u machine processes (1 loop each, busy polling%s), "
	       "shm fabric, replicas %u (r in effect: %u), coordinator machine "
	       "0%s\n",
	       g_opt.machines, cpu >= 0 ? ", pinned" : "", g_opt.replicas, nrep,
	       g_opt.machines == 2 ? " (also primary of the local objects)"
	                           : "");
	printf("objects of %u B (%u lines with versions): %u per machine for "
	       "transactions, %u on machine 1 for lock-free reads; %.2f s per "
	       "run\n\n",
	       OBJ_SIZE, 2u, g_opt.tx_objects, g_opt.lf_objects, g_opt.seconds);

	rc = coord_tx(c);
	if (rc)
		goto out;
	if (!g_opt.lf) {
		printf("(lock-free reads skipped: --no-lf)\n");
		goto out;
	}
	rc = coord_lf(c);
	if (!rc) {
		rc = coord_check(c);
		/* Counters that do not add up are reported; unreadable ones
		 * are not. */
		if (c->checked)
			coord_report(c);
	}
out:
	free(c->tr);
	free(c->lr);
	free(c);
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

/* The options into g_opt and data_dir: -1 to run, else the exit status
 * (0 after --help, 2 for a bad option). */
static int parse_opts(int argc, char **argv)
{
	g_opt = (struct opts){.machines = 2,
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
			bad = parse_u(optarg, 2, MAXM, &g_opt.machines);
			break;
		case OPT_REP:
			bad = parse_u(optarg, 1, 8, &g_opt.replicas);
			break;
		case OPT_SEC: {
			char *end;
			secs = strtod(optarg, &end);
			bad = *end || !(secs > 0 && secs <= 60);
			break;
		}
		case OPT_DEPTH:
			bad = parse_u(optarg, 1, MAX_DEPTH, &g_opt.depth);
			break;
		case OPT_LFD:
			bad = parse_u(optarg, 1, MAX_DEPTH, &g_opt.lf_depth);
			break;
		case OPT_REPEAT:
			bad = parse_u(optarg, 1, 15, &g_opt.repeat);
			break;
		case OPT_DATADIR:
			bad = strlen(optarg) == 0 || strlen(optarg) > 80;
			if (!bad)
				data_dir = optarg;
			break;
		case OPT_TXO: bad = parse_u(optarg, 16, MAX_TXOBJ, &txo); break;
		case OPT_LFO: bad = parse_u(optarg, 16, MAX_LFOBJ, &lfo); break;
		case OPT_RSZ:
			bad = bu_parse_size(optarg, &v) || !bu_is_pow2(v) ||
			      v < (1u << 20) || v > (1ull << 32);
			if (!bad)
				g_opt.region_size = v;
			break;
		case OPT_LSZ:
			bad = bu_parse_size(optarg, &v) || !bu_is_pow2(v) ||
			      v < (64u << 10) || v > (64u << 20);
			if (!bad)
				g_opt.log_size = (uint32_t)v;
			break;
		case OPT_NOPIN: g_opt.pin = false; break;
		case OPT_QUICK: quick = true; break;
		case OPT_SHAPES:
			bad = strlen(optarg) >= sizeof(g_opt.shapes);
			if (!bad)
				strcpy(g_opt.shapes, optarg);
			break;
		case OPT_NOLF: g_opt.lf = false; break;
		case OPT_SHARED: g_opt.shared_objs = true; break;
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
		g_opt.quick = true;
		g_opt.seconds = 0.1;
		g_opt.repeat = 1;
		g_opt.tx_objects = 256;
		g_opt.lf_objects = 8192;
	}
	if (secs > 0)
		g_opt.seconds = secs;
	if (txo)
		g_opt.tx_objects = txo;
	if (lfo)
		g_opt.lf_objects = lfo;
	return -1;
}

/* Fork machines 1..N-1 into @kids; 0 or the fork's error. */
static int fork_machines(const char *base, bool pin, unsigned *ncpu,
                         pid_t *kids)
{
	fflush(stdout);
	for (unsigned i = 1; i < g_opt.machines; i++) {
		pid_t p = fork();
		if (p < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			return -errno;
		}
		if (p == 0)
			_exit(child_main(i, base, pin ? nth_cpu(i, ncpu) : -1));
		kids[i] = p;
	}
	return 0;
}

/* Machine 0 (this process): join, allocate, coordinate. */
static int machine0(struct mach *m, const char *base, int cpu)
{
	bu_pin_to(cpu, PROG);
	int rc = mach_open(m, 0, base);
	if (!rc) {
		atomic_store(&g_sh->m[0].state, ST_JOINED);
		rc = wait_state(m, ST_JOINED);
	}
	if (!rc) {
		atomic_store(&g_sh->go, GO_ALLOC);
		rc = mach_alloc(m);
		if (!rc) {
			atomic_store(&g_sh->m[0].state, ST_ALLOCATED);
			rc = wait_state(m, ST_ALLOCATED);
		}
	}
	if (!rc)
		rc = coordinator(m, cpu);
	return rc;
}

/* Keep polling while the others leave; -EIO when one exited badly
 * (@rc: the run's outcome so far). */
static int reap_machines(struct mach *m, const pid_t *kids, int rc)
{
	for (unsigned i = 1; i < g_opt.machines; i++) {
		if (!kids[i])
			continue;
		int st = 0;
		uint64_t dl = bu_now_ns() + 20 * NS_PER_S;
		pid_t w;
		while ((w = waitpid(kids[i], &st, WNOHANG)) == 0 &&
		       bu_now_ns() < dl) {
			if (m->loop)
				(void)farm_loop_poll(m->loop);
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
	return rc;
}

/* The benchmark, in the process the supervisor forked: the machines'
 * files under @base. Exit status 0 or 1. */
static int run_bench(const char *base)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	unsigned ncpu = 0;
	(void)nth_cpu(0, &ncpu);
	bool pin = g_opt.pin && ncpu >= g_opt.machines;
	pid_t kids[MAXM] = {0};
	int rc = fork_machines(base, pin, &ncpu, kids);
	int cpu = pin ? nth_cpu(0, &ncpu) : -1;
	struct mach m = {0};
	if (!rc)
		rc = machine0(&m, base, cpu);
	if (rc)
		fprintf(stderr, PROG ": failed: %s\n", farm_strerror(rc));
	atomic_store(&g_sh->go, GO_EXIT);
	rc = reap_machines(&m, kids, rc);
	mach_close(&m);
	return rc ? 1 : 0;
}

/* The supervisor's: a signal only interrupts its wait (the run, in the
 * same process group, gets it too and stops). */
static void on_signal_supervisor(int sig)
{
	(void)sig;
}

/*
 * Run the benchmark in a child and remove @base whatever becomes of it:
 * a run that crashes (a signal) leaves its machines' files behind
 * otherwise. This process is the machines' reaper too
 * (PR_SET_CHILD_SUBREAPER), so it waits for them before removing their
 * files (they stop when the run's process dies: PR_SET_PDEATHSIG).
 */
static int supervise(const char *base)
{
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
	fflush(NULL);
	pid_t run = fork();
	if (run < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	if (run == 0)
		_exit(run_bench(base));
	struct sigaction sa = {.sa_handler = on_signal_supervisor};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	int rc = 1, st;
	pid_t w;
	while ((w = waitpid(-1, &st, 0)) > 0 || errno == EINTR) {
		if (w != run)
			continue;
		if (WIFEXITED(st))
			rc = WEXITSTATUS(st);
		else
			fprintf(stderr, PROG ": the run died of signal %d\n",
			        WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	}
	bu_rm_tree(AT_FDCWD, base, 2);
	return rc;
}

int main(int argc, char **argv)
{
	int prc = parse_opts(argc, argv);
	if (prc >= 0)
		return prc;

	g_sh = mmap(NULL, sizeof(*g_sh), PROT_READ | PROT_WRITE,
	            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (g_sh == MAP_FAILED) {
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
	int rc = supervise(base);
	munmap(g_sh, sizeof(*g_sh));
	return rc;
}
