/*
 * recovery_bench: how fast a local cluster gets back to work after it
 * loses a machine (FaRM SOSP'15 section 6.5, Figure 9).
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
 *
 * Files (recovery_bench.h has what they share): this one is options, main
 * and the summary; recovery_mach.c a machine process; recovery_run.c the
 * cluster driver (one run); recovery_timeline.c the timeline analysis and
 * checks; recovery_report.c distributions, run lines and the plot;
 * transfers.c the transfer and benchcluster.c ZooKeeper, forking and a
 * machine's start, shared with datarec_bench.
 */
#include "benchutil.h"

#include <errno.h>
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
#include <time.h>
#include <unistd.h>

#include <farm/farm.h>
#include <farm/txn.h>

#include "recovery_bench.h"

const char *const scen_name[NSCEN] = {"member", "cm", "sigstop"};
const char *const t_name[NT] = {"suspect",      "probe",       "zk",
                                "config_first", "config_last", "txn_recover",
                                "commit",       "active",      "80pct"};

/* Per-ms counts: ops[m][b] (transfers and lookups), xfers[m][b]. */
uint32_t *g_ops, *g_xfers;
struct clog *g_clog; /* [NM][CLOG_CAP] */
struct shared *g_sh;

struct opts g_opt = {
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

volatile sig_atomic_t interrupted;
pid_t g_pid[NM];
char g_zk_dir[256], g_zk_connect[64];

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
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
	        MAX_ACCT, FARM_STATS_LEASE_DEFAULT_US);
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

/* What the command line chose beyond g_opt. */
struct choice {
	bool only_cm, only_stop, only_fs;
	unsigned n_sc[NSCEN], total;
};

/* One option with a number in lo..hi: 1 when @a is @name (consumed, and
 * *bad set when its value is missing or out of range), else 0. */
static int opt_u(const char *a, const char *v, const char *name, unsigned lo,
                 unsigned hi, unsigned *dst, bool *bad)
{
	if (strcmp(a, name))
		return 0;
	*bad = !v || bu_parse_u(v, lo, hi, dst);
	if (*bad)
		fprintf(stderr, PROG ": %s needs a number in %u..%u\n", name,
		        lo, hi);
	return 1;
}

/* An option with a number; 1 when @a was one (and *i moved past its
 * value), -1 when its value was bad, 0 when @a is something else. */
static int parse_number(int argc, char **argv, int *i, unsigned *seed)
{
	static const struct {
		const char *name;
		unsigned lo, hi;
		unsigned *dst;
	} nums[] = {
	        {"--runs", 0, MAX_RUNS, &g_opt.runs},
	        {"--cm-runs", 0, MAX_RUNS, &g_opt.cm_runs},
	        {"--stop-runs", 0, MAX_RUNS, &g_opt.stop_runs},
	        {"--fs-secs", 0, 3600, &g_opt.fs_secs},
	        {"--pre-ms", 200, 600000, &g_opt.pre_ms},
	        {"--post-ms", 50, 60000, &g_opt.post_ms},
	        {"--base-ms", 10, 10000, &g_opt.base_ms},
	        {"--window-ms", 1, 1000, &g_opt.window_ms},
	        {"--accounts", 2, MAX_ACCT, &g_opt.accounts},
	        {"--depth", 1, 256, &g_opt.depth},
	        {"--lease-us", 1000, 60000000, &g_opt.lease_us},
	        {"--seed", 0, UINT32_MAX, NULL},
	};
	const char *a = argv[*i];
	const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
	for (size_t k = 0; k < sizeof(nums) / sizeof(nums[0]); k++) {
		bool bad = false;
		if (opt_u(a, v, nums[k].name, nums[k].lo, nums[k].hi,
		          nums[k].dst ? nums[k].dst : seed, &bad)) {
			(*i)++;
			return bad ? -1 : 1;
		}
	}
	return 0;
}

/* A flag or an option with a string; 0 when known, 2 when not (usage
 * printed), -1 for --help (printed). */
static int parse_other(int argc, char **argv, int *i, struct choice *c)
{
	const char *a = argv[*i];
	bool v = *i + 1 < argc;
	if (!strcmp(a, "--kill-cm"))
		c->only_cm = true;
	else if (!strcmp(a, "--sigstop"))
		c->only_stop = true;
	else if (!strcmp(a, "--false-suspicion"))
		c->only_fs = true;
	else if (!strcmp(a, "--busy-poll"))
		g_opt.busy_poll = true;
	else if (!strcmp(a, "--zk-disk"))
		g_opt.zk_disk = true;
	else if (!strcmp(a, "--zk-dir") && v)
		g_opt.zk_dir_base = argv[++*i];
	else if (!strcmp(a, "--zk-script") && v)
		g_opt.zk_script = argv[++*i];
	else if (!strcmp(a, "--out") && v)
		g_opt.out = argv[++*i];
	else if (!strcmp(a, "--verbose"))
		g_opt.verbose = true;
	else if (!strcmp(a, "--quick"))
		g_opt.quick = true;
	else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
		usage(stdout);
		return -1;
	} else {
		fprintf(stderr, PROG ": unknown option %s\n", a);
		usage(stderr);
		return 2;
	}
	return 0;
}

/* The runs of each scenario the options ask for; 0, or main's exit
 * status. */
static int plan_runs(struct choice *c)
{
	if (c->only_cm + c->only_stop + c->only_fs > 1) {
		fprintf(stderr, PROG ": --kill-cm, --sigstop and "
		                     "--false-suspicion exclude each other\n");
		return 2;
	}
	if (g_opt.quick) {
		g_opt.runs = 1;
		g_opt.cm_runs = g_opt.stop_runs = 0;
		g_opt.fs_secs = 0;
		g_opt.pre_ms = BU_MIN(g_opt.pre_ms, 1500u);
		g_opt.post_ms = BU_MIN(g_opt.post_ms, 300u);
	}
	c->n_sc[SC_MEMBER] = g_opt.runs;
	c->n_sc[SC_CM] = g_opt.cm_runs;
	c->n_sc[SC_STOP] = g_opt.stop_runs;
	if (c->only_cm || c->only_stop) {
		c->n_sc[SC_MEMBER] = c->n_sc[SC_CM] = c->n_sc[SC_STOP] = 0;
		c->n_sc[c->only_cm ? SC_CM : SC_STOP] = g_opt.runs;
		g_opt.fs_secs = 0;
	}
	if (c->only_fs) {
		c->n_sc[SC_MEMBER] = 1;
		c->n_sc[SC_CM] = c->n_sc[SC_STOP] = 0;
		if (!g_opt.fs_secs)
			g_opt.fs_secs = 120;
	}
	c->total = c->n_sc[0] + c->n_sc[1] + c->n_sc[2];
	if (!c->total || c->total > MAX_RUNS) {
		fprintf(stderr, PROG ": between 1 and %u runs\n", MAX_RUNS);
		return 2;
	}
	return 0;
}

/* The command line into g_opt and @c; 0 to go on, else main's exit
 * status (0 after --help). */
static int parse_args(int argc, char **argv, struct choice *c)
{
	unsigned seed = 0;
	for (int i = 1; i < argc; i++) {
		int n = parse_number(argc, argv, &i, &seed);
		if (n < 0)
			return 2;
		if (n > 0)
			continue;
		int o = parse_other(argc, argv, &i, c);
		if (o)
			return o < 0 ? -1 : o;
	}
	g_opt.seed = seed;
	return plan_runs(c);
}

/* The memory the machine processes share with this one (mapped before
 * they fork): the shared block, per-ms counts, the commit logs. */
static int map_shared(void)
{
	unsigned max_pre = BU_MAX(g_opt.pre_ms, g_opt.fs_secs * 1000u);
	size_t nb = (size_t)NM * (max_pre + RECOV_MS + g_opt.post_ms + 3000);
	g_sh = mmap(NULL, sizeof(*g_sh), PROT_READ | PROT_WRITE,
	            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	g_ops = mmap(NULL, 2 * nb * sizeof(uint32_t), PROT_READ | PROT_WRITE,
	             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (g_sh == MAP_FAILED || g_ops == MAP_FAILED) {
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
	return 0;
}

static void read_load(char *load, size_t len)
{
	FILE *lf = fopen("/proc/loadavg", "r");
	if (lf) {
		if (fgets(load, (int)len, lf))
			load[strcspn(load, "\n")] = 0;
		fclose(lf);
	}
}

static void print_setup(const char *load, unsigned lease_us)
{
	printf(PROG ": %u machines (processes) on %ld CPUs, shm fabric, "
	            "3 replicas, ZooKeeper on %s, lease %.1f ms, busy polling "
	            "%s, %u accounts per machine, %u operations in flight per "
	            "machine; load average %s\n",
	       NM, sysconf(_SC_NPROCESSORS_ONLN),
	       g_opt.zk_disk ? "disk (fsync)" : "tmpfs", lease_us / 1e3,
	       g_opt.busy_poll ? "on" : "off", g_opt.accounts, g_opt.depth,
	       load);
}

static void print_table_head(const struct choice *c)
{
	printf("ZooKeeper %s, data in %s\n", g_zk_connect, g_zk_dir);
	printf("runs: %u member kills, %u CM kills, %u SIGSTOPs; the first "
	       "member run after %u s of steady load\n",
	       c->n_sc[0], c->n_sc[1], c->n_sc[2],
	       g_opt.fs_secs ? g_opt.fs_secs : g_opt.pre_ms / 1000);
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
}

/* Every run of every scenario, each printed as it ends; the number run
 * (*nr) and of those that failed. */
static unsigned run_all(const struct choice *c, struct run *runs, unsigned *nr)
{
	unsigned failed = 0;
	*nr = 0;
	for (unsigned sc = 0; sc < NSCEN && !interrupted; sc++)
		for (unsigned k = 0; k < c->n_sc[sc] && !interrupted; k++) {
			unsigned pre = g_opt.pre_ms;
			if (sc == SC_MEMBER && k == 0 && g_opt.fs_secs)
				pre = g_opt.fs_secs * 1000u;
			if (pre > 10000)
				fprintf(stderr,
				        PROG ": run %u: %u s of steady load "
				             "before the kill (false "
				             "suspicions)...\n",
				        *nr, pre / 1000);
			if (one_run(*nr, (enum scen)sc, pre, &runs[*nr]))
				failed++;
			print_run(*nr, &runs[*nr]);
			fflush(stdout);
			(*nr)++;
		}
	return failed;
}

/* The distributions over the runs and the totals of their checks. */
struct summary {
	struct dist d80[NSCEN], dsteps[NSCEN][NT];
	uint64_t fs, lost, phantom, locked, zombie;
	unsigned hung, win_ok, win_max, stop_n, failed, nr;
	double fs_secs, stop_susp_max, longest_pre, secs;
	bool judged[NSCEN];
};

/* Per scenario, each step's distribution and suspect->80%'s, printed;
 * -1 when out of memory. */
static int summarize_dists(const struct run *runs, unsigned total,
                           struct summary *s)
{
	printf("\ndistribution over runs (nearest rank; '-' never seen "
	       "counts as infinite), ms:\n");
	printf("%-8s %-13s %4s %8s %8s %8s\n", "kill", "step", "runs", "median",
	       "p90", "max");
	for (unsigned sc = 0; sc < NSCEN; sc++) {
		double *v = calloc(total + 1, sizeof(double));
		if (!v)
			return -1;
		unsigned n = 0;
		for (unsigned k = 0; k < NT; k++) {
			n = 0;
			for (unsigned i = 0; i < s->nr; i++)
				if (runs[i].sc == sc && runs[i].ok)
					v[n++] = runs[i].t[k];
			s->dsteps[sc][k] = distribution(v, n);
		}
		n = 0;
		for (unsigned i = 0; i < s->nr; i++)
			if (runs[i].sc == sc)
				v[n++] = runs[i].ok ? runs[i].t80_from_suspect
				                    : NAN;
		s->d80[sc] = distribution(v, n);
		free(v);
		if (!s->d80[sc].n)
			continue;
		for (unsigned k = 0; k < NT; k++)
			printf("%-8s %-13s %4u %8.1f %8.1f %8.1f\n",
			       scen_name[sc], t_name[k], s->dsteps[sc][k].n,
			       s->dsteps[sc][k].med, s->dsteps[sc][k].p90,
			       s->dsteps[sc][k].max);
		printf("%-8s %-13s %4u %8.1f %8.1f %8.1f\n", scen_name[sc],
		       "suspect->80%", s->d80[sc].n, s->d80[sc].med,
		       s->d80[sc].p90, s->d80[sc].max);
	}
	return 0;
}

/* The checks' totals over the runs. */
static void summarize_checks(const struct run *runs, struct summary *s)
{
	s->stop_susp_max = NAN;
	for (unsigned i = 0; i < s->nr; i++) {
		const struct run *r = &runs[i];
		s->fs += r->false_susp;
		s->fs_secs += r->pre_secs;
		s->lost += r->lost;
		s->phantom += r->phantom;
		s->locked += r->unlocked_checks;
		s->zombie += r->zombie;
		s->hung += r->zombie_hung;
		s->win_ok += r->ok && r->win_ok;
		s->win_max = BU_MAX(s->win_max, r->ok ? r->win : 0);
		if (r->sc == SC_STOP) {
			/* A run that failed or never suspected: infinite. */
			double x = r->ok && !isnan(r->t[T_SUSPECT])
			                   ? r->t[T_SUSPECT]
			                   : INFINITY;
			s->stop_susp_max =
			        s->stop_n++ ? BU_MAX(s->stop_susp_max, x) : x;
		}
	}
	for (unsigned i = 0; i < s->nr; i++)
		s->longest_pre = BU_MAX(s->longest_pre, runs[i].pre_secs);
}

static void print_checks(const struct summary *s, unsigned lease_us)
{
	printf("\nfalse suspicions: %" PRIu64 " in %.0f s of steady load "
	       "(longest continuous: %.0f s) at a %.1f ms lease\n",
	       s->fs, s->fs_secs, s->longest_pre, lease_us / 1e3);
	printf("lost commits: %" PRIu64 ", phantom commits: %" PRIu64
	       ", locks or unreadable accounts left: %" PRIu64
	       ", zombie commits: %" PRIu64 "; %u of %u runs failed\n",
	       s->lost, s->phantom, s->locked, s->zombie, s->failed, s->nr);
	if (s->stop_n)
		printf("SIGSTOP: slowest suspicion %.1f ms after the stop = "
		       "%.2f lease lengths; %u of %u stopped machines had not "
		       "ended their operations 1 s after SIGCONT\n",
		       s->stop_susp_max, s->stop_susp_max / (lease_us / 1e3),
		       s->hung, s->stop_n);
	printf("80%% windows: %u of %u runs had a steady state in which 90%% "
	       "of the windows pass (longest window used: %u ms)\n",
	       s->win_ok, s->nr, s->win_max);
}

/* A throughput goal is judged only when at least half the runs of its
 * kind had a steady state that passes its own test: otherwise "back to
 * 80%" is noise (a burst long before any region is active counts). */
static void judge(const struct run *runs, struct summary *s)
{
	for (unsigned sc = 0; sc < NSCEN; sc++) {
		unsigned n = 0, ok = 0;
		for (unsigned i = 0; i < s->nr; i++)
			if (runs[i].sc == sc) {
				n++;
				ok += runs[i].ok && runs[i].win_ok;
			}
		s->judged[sc] = n && 2 * ok >= n;
		if (n && !s->judged[sc])
			printf("%s: the time to 80%% is not judged: only %u of "
			       "%u runs had a steady state steady enough to "
			       "compare with (see suspect->active instead)\n",
			       scen_name[sc], ok, n);
	}
}

/* The plot: the first scenario's run with the median recovery (to 80%,
 * or to all-active when the median never got back to 80%), among the
 * runs whose steady state before the kill ran at least at the median
 * rate (a host stall there makes 80% meaningless). */
static int pick_plot(const struct run *runs, const struct summary *s)
{
	int pick = -1;
	for (unsigned sc = 0; sc < NSCEN && pick < 0; sc++) {
		bool by80 = isfinite(s->d80[sc].med);
		double med =
		        by80 ? s->d80[sc].med : s->dsteps[sc][T_ACTIVE].med;
		double *rates = calloc(s->nr + 1, sizeof(double));
		unsigned nrt = 0;
		for (unsigned i = 0; rates && i < s->nr; i++)
			if (runs[i].sc == sc && runs[i].ok)
				rates[nrt++] = runs[i].pre_rate;
		double rmed = nrt ? distribution(rates, nrt).med : 0;
		free(rates);
		double best = INFINITY;
		for (unsigned i = 0; i < s->nr; i++) {
			const struct run *r = &runs[i];
			double v = by80 ? r->t80_from_suspect : r->t[T_ACTIVE];
			if (r->sc == sc && r->ok && r->pre_rate >= rmed &&
			    fabs(v - med) < best) {
				best = fabs(v - med);
				pick = (int)i;
			}
		}
	}
	return pick;
}

/* The JSON line's timeline: each scenario's steps. */
static void json_timeline(const struct summary *s)
{
	bool first = true;
	for (unsigned sc = 0; sc < NSCEN; sc++) {
		if (!s->d80[sc].n)
			continue;
		printf("%s\"%s\": {", first ? "" : ", ", scen_name[sc]);
		first = false;
		for (unsigned k = 0; k <= NT; k++) {
			const struct dist *d =
			        k < NT ? &s->dsteps[sc][k] : &s->d80[sc];
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
}

static void json_goals(const struct summary *s, bool fs_met, bool commits_ok,
                       unsigned lease_us)
{
	double stop_mult =
	        s->stop_n ? s->stop_susp_max / (lease_us / 1e3) : NAN;
	const struct dist *m = &s->d80[SC_MEMBER], *cm = &s->d80[SC_CM];
	printf("\"suspect_to_80pct_median_ms\": {\"value\": ");
	json_num(stdout, m->med);
	printf(", \"target\": 30, \"met\": %s}, ",
	       s->judged[SC_MEMBER] && m->med < 30 ? "true" : "false");
	printf("\"suspect_to_80pct_max_ms\": {\"value\": ");
	json_num(stdout, m->max);
	printf(", \"target\": 150, \"met\": %s}, ",
	       s->judged[SC_MEMBER] && m->max < 150 ? "true" : "false");
	printf("\"cm_suspect_to_80pct_median_ms\": {\"value\": ");
	json_num(stdout, cm->med);
	printf(", \"target\": 60, \"met\": %s}, ",
	       s->judged[SC_CM] && cm->med < 60 ? "true" : "false");
	printf("\"sigstop_suspicion_in_leases\": {\"value\": ");
	json_num(stdout, stop_mult);
	printf(", \"target\": 2, \"met\": %s}, ",
	       s->stop_n && stop_mult <= 2 ? "true" : "false");
	printf("\"false_suspicions_2min_default_lease\": {\"value\": %" PRIu64
	       ", \"target\": 0, \"met\": %s}, ",
	       s->fs, fs_met ? "true" : "false");
	printf("\"lost_commits\": {\"value\": %" PRIu64
	       ", \"target\": 0, \"met\": %s}}}\n",
	       s->lost + s->phantom + s->locked + s->zombie,
	       commits_ok ? "true" : "false");
}

/* The JSON line; whether the commit checks passed. */
static bool print_json(const struct summary *s, const char *load,
                       unsigned lease_us)
{
	bool commits_ok = !s->lost && !s->phantom && !s->locked && !s->zombie &&
	                  !s->failed;
	if (!commits_ok)
		printf("CHECKS FAILED: %" PRIu64 " lost and %" PRIu64
		       " phantom commits, %" PRIu64
		       " accounts left locked or unreadable, %" PRIu64
		       " zombie commits, %u runs failed (details above and on "
		       "stderr)\n",
		       s->lost, s->phantom, s->locked, s->zombie, s->failed);
	bool fs_met = s->fs == 0 && s->longest_pre >= 120 &&
	              lease_us == FARM_STATS_LEASE_DEFAULT_US;
	printf("{\"bench\": \"recovery\", \"machines\": %u, \"lease_ms\": "
	       "%.1f, \"busy_poll\": %s, \"zk_data\": \"%s\", "
	       "\"accounts_per_machine\": %u, \"depth\": %u, "
	       "\"window_ms\": %u, \"load_avg\": \"%s\", \"seconds\": %.0f, "
	       "\"runs\": {",
	       NM, lease_us / 1e3, g_opt.busy_poll ? "true" : "false",
	       g_opt.zk_disk ? "disk" : "tmpfs", g_opt.accounts, g_opt.depth,
	       g_opt.window_ms, load, s->secs);
	for (unsigned sc = 0; sc < NSCEN; sc++)
		printf("%s\"%s\": %u", sc ? ", " : "", scen_name[sc],
		       s->d80[sc].n);
	printf("}, \"failed_runs\": %u, \"timeline_ms\": {", s->failed);
	json_timeline(s);
	printf("}, \"false_suspicions\": %" PRIu64 ", \"steady_seconds\": "
	       "%.0f, \"longest_steady_seconds\": %.0f, \"lost_commits\": "
	       "%" PRIu64 ", \"phantom_commits\": %" PRIu64
	       ", \"accounts_left_locked\": %" PRIu64
	       ", \"zombie_commits\": %" PRIu64 ", \"zombies_not_ended\": %u, "
	       "\"runs_with_calibrated_window\": %u, \"longest_window_ms\": "
	       "%u, \"goals\": {",
	       s->fs, s->fs_secs, s->longest_pre, s->lost, s->phantom,
	       s->locked, s->zombie, s->hung, s->win_ok, s->win_max);
	json_goals(s, fs_met, commits_ok, lease_us);
	return commits_ok;
}

int main(int argc, char **argv)
{
	struct choice c = {0};
	int pr = parse_args(argc, argv, &c);
	if (pr)
		return pr < 0 ? 0 : pr;
	if (!g_opt.out)
		g_opt.out = default_out(argv[0]);
	unsigned lease_us =
	        g_opt.lease_us ? g_opt.lease_us : FARM_STATS_LEASE_DEFAULT_US;

	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (map_shared())
		return 1;
	char load[128] = "?";
	read_load(load, sizeof(load));
	print_setup(load, lease_us);
	int zs = zk_start();
	if (zs)
		return zs;
	print_table_head(&c);

	struct run *runs = calloc(c.total, sizeof(*runs));
	if (!runs) {
		zk_stop();
		return 1;
	}
	static struct summary s;
	uint64_t t_start = now_ns();
	s.failed = run_all(&c, runs, &s.nr);
	kill_all();
	zk_stop();
	s.secs = (double)(now_ns() - t_start) / 1e9;

	if (summarize_dists(runs, c.total, &s))
		return 1;
	summarize_checks(runs, &s);
	print_checks(&s, lease_us);
	judge(runs, &s);
	printf("%u runs in %.0f s\n", s.nr, s.secs);
	int pick = pick_plot(runs, &s);
	if (pick >= 0)
		write_plot(&runs[pick], (unsigned)pick);
	bool commits_ok = print_json(&s, load, lease_us);
	for (unsigned i = 0; i < s.nr; i++)
		free(runs[i].plot_ops);
	free(runs);
	/* --quick (the smoke test) says whether it ran; the checks' verdict
	 * is in the output either way. */
	if (g_opt.quick)
		return s.failed || interrupted ? 1 : 0;
	return s.failed || !commits_ok || interrupted ? 1 : 0;
}
