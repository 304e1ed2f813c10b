/*
 * kv_bench: the coordinator's side (kv_bench.h): the shared page, the
 * cluster of machine processes and the commands it is given, the figures
 * collected from them, and the memory system's limit over a table of the
 * same size (bench/lib/memlimit.h).
 */
#include "kv_bench.h"
#include "memlimit.h"

volatile sig_atomic_t interrupted;
struct opts g_opt;
struct shared *g_sh;
static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void cluster_kill(struct cluster *c)
{
	for (unsigned i = 0; i < c->n; i++)
		if (c->pid[i] > 0)
			kill(c->pid[i], SIGKILL);
	for (unsigned i = 0; i < c->n; i++)
		if (c->pid[i] > 0) {
			while (waitpid(c->pid[i], NULL, 0) < 0 &&
			       errno == EINTR)
				;
			c->pid[i] = 0;
		}
	if (c->base[0])
		bu_rm_tree(AT_FDCWD, c->base, 3);
	c->base[0] = 0;
}

/* Has a machine failed or gone? */
static int cluster_check(struct cluster *c)
{
	for (unsigned i = 0; i < c->n; i++) {
		if (atomic_load(&g_sh->m[i].state) == ST_FAILED) {
			fprintf(stderr, PROG ": machine %u failed: %s\n", i,
			        farm_strerror(g_sh->m[i].err));
			return g_sh->m[i].err ? g_sh->m[i].err : -EIO;
		}
		int st;
		pid_t p = waitpid(c->pid[i], &st, WNOHANG);
		if (p == c->pid[i]) {
			c->pid[i] = 0;
			fprintf(stderr,
			        PROG ": machine %u exited (status %#x)\n", i,
			        (unsigned)st);
			return -ECHILD;
		}
	}
	return interrupted ? -EINTR : 0;
}

/* One start of the cluster (kb_cluster_start retries it). */
static int cluster_start1(struct cluster *c, uint64_t nkeys, const char *tmp)
{
	memset(c, 0, sizeof(*c));
	c->n = g_opt.machines;
	c->nkeys = nkeys;
	snprintf(c->base, sizeof(c->base), "%s/kv_bench.XXXXXX", tmp);
	if (!mkdtemp(c->base)) {
		fprintf(stderr, PROG ": mkdtemp in %s: %s\n", tmp,
		        strerror(errno));
		c->base[0] = 0;
		return -errno;
	}
	memset(g_sh, 0, sizeof(*g_sh));
	g_sh->nkeys = nkeys;
	int first[MAXM] = {-1, -1, -1, -1, -1, -1, -1, -1};
	int ncpu = kb_ncpus_allowed(first);
	uint64_t t0 = bu_now_ns();
	g_sh->zeta_n = kb_zeta(nkeys, g_opt.theta);
	if (g_opt.zk[0]) {
		/* A fresh root per start: a retry must not see the ephemeral
		 * znodes of the machines it killed. */
		static unsigned starts;
		snprintf(g_opt.zk_root, sizeof(g_opt.zk_root),
		         "/libfarm/kvdemo-%ld-%u", (long)getpid(), starts++);
	}
	fflush(NULL);
	pid_t parent = getpid();
	for (unsigned i = 0; i < c->n; i++) {
		pid_t p = fork();
		if (p < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			cluster_kill(c);
			return -errno;
		}
		if (p == 0) {
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			signal(SIGINT, SIG_IGN);
			if (getppid() != parent)
				_exit(1);
			int cpu = g_opt.pin ? first[i % (unsigned)BU_MIN(ncpu,
			                                                 MAXM)]
			                    : -1;
			if (bnet_enter(&g_opt.net, i))
				_exit(1);
			int rc = kb_machine_main(i, c->base, nkeys, cpu);
			fflush(NULL);
			_exit(rc);
		}
		c->pid[i] = p;
	}
	for (;;) {
		int rc = cluster_check(c);
		if (rc) {
			cluster_kill(c);
			return rc;
		}
		unsigned ready = 0;
		for (unsigned i = 0; i < c->n; i++)
			ready += atomic_load(&g_sh->m[i].state) == ST_READY;
		if (ready == c->n)
			break;
		kb_nap_ms(2);
	}
	printf("cluster of %u machines up in %.1f s (%" PRIu32
	       " buckets of %u slots per machine, region %" PRIu64 " MiB)\n",
	       c->n, (double)(bu_now_ns() - t0) / 1e9, kb_buckets_for(nkeys),
	       4u, kb_region_for(kb_buckets_for(nkeys), nkeys) >> 20);
	if (g_opt.zk[0])
		printf("  membership: ZooKeeper %s, root %s\n", g_opt.zk,
		       g_opt.zk_root);
	fflush(stdout);
	return 0;
}

/* Say how far the load is, every 10%. */
static void load_progress(const struct cluster *c, uint64_t t0, int *next_pct)
{
	uint64_t loaded = 0;
	for (unsigned i = 0; i < c->n; i++)
		loaded += atomic_load(&g_sh->m[i].loaded);
	if (loaded * 100 < (uint64_t)*next_pct * c->nkeys || *next_pct > 100)
		return;
	double s = (double)(bu_now_ns() - t0) / 1e9;
	printf("  loaded %3d%% (%" PRIu64 " keys, %.1f s, %.2f M "
	       "puts/s)\n",
	       *next_pct, loaded, s, (double)loaded / s / 1e6);
	fflush(stdout);
	while (loaded * 100 >= (uint64_t)*next_pct * c->nkeys)
		*next_pct += 10;
}

#define FIRST_WARM_NS (2 * NS)

int kb_cluster_cmd(struct cluster *c, int cmd, int wl, double secs,
                   bool progress)
{
	/* The key streams are drawn first, untimed: drawn inside the 20 ms
	 * plus warm-up lead, a million keys took longer than it at load
	 * 14-36 here, and the run began after its window ended (0 ops). */
	int swl = cmd == CMD_RUN          ? wl
	          : cmd == CMD_LAT        ? W_C
	          : cmd == CMD_LAT_OTHERS ? W_RC
	                                  : -1;
	if (swl >= 0) {
		int rc = kb_cluster_cmd(c, CMD_STREAM, swl, 0, false);
		if (rc)
			return rc;
	}
	g_sh->cmd = cmd;
	g_sh->wl = wl;
	g_sh->dur_ns = (uint64_t)(secs * 1e9);
	g_sh->warm_ns = g_sh->dur_ns / 10;
	/* The first measurement after the load warms up for at least
	 * FIRST_WARM_NS: a machine's first READ of each page of a peer's
	 * region faults it into its mapping, about a second of minor faults
	 * for 10M keys at 4 KiB pages (docs/benchmarks.md, kv_bench), which
	 * a 1 s measurement otherwise mostly consisted of. */
	if (swl >= 0 && !c->warmed) {
		c->warmed = true;
		if (g_sh->warm_ns < FIRST_WARM_NS)
			g_sh->warm_ns = FIRST_WARM_NS;
	}
	g_sh->go_ns = bu_now_ns() + 20000000ull + g_sh->warm_ns;
	int seq = atomic_load(&g_sh->seq) + 1;
	atomic_store(&g_sh->seq, seq);
	uint64_t t0 = bu_now_ns();
	int next_pct = 10;
	for (;;) {
		int rc = cluster_check(c);
		if (rc)
			return rc;
		unsigned done = 0;
		for (unsigned i = 0; i < c->n; i++)
			done += atomic_load(&g_sh->m[i].done) == seq;
		if (progress)
			load_progress(c, t0, &next_pct);
		if (done == c->n)
			return 0;
		kb_nap_ms(1);
	}
}

void kb_cluster_stop(struct cluster *c)
{
	g_sh->cmd = CMD_QUIT;
	atomic_store(&g_sh->seq, atomic_load(&g_sh->seq) + 1);
	uint64_t t0 = bu_now_ns();
	for (unsigned i = 0; i < c->n; i++) {
		while (c->pid[i] > 0) {
			int st;
			pid_t p = waitpid(c->pid[i], &st, WNOHANG);
			if (p == c->pid[i] || (p < 0 && errno != EINTR)) {
				c->pid[i] = 0;
				break;
			}
			if (bu_now_ns() - t0 > 10 * NS) {
				kill(c->pid[i], SIGKILL);
				t0 = bu_now_ns();
			}
			kb_nap_ms(1);
		}
	}
	cluster_kill(c);
}

uint64_t *g_samp;

void kb_collect(unsigned n, struct fig *f)
{
	memset(f, 0, sizeof(*f));
	size_t ns = 0;
	for (unsigned i = 0; i < n; i++) {
		struct mres *r = &g_sh->res[i];
		if (!r->ns)
			continue;
		double s = (double)r->ns / 1e9;
		f->ops += (double)r->ops / s;
		f->keys += (double)r->keys / s;
		f->gets += (double)r->gets / s;
		f->puts += (double)r->puts / s;
		f->inserts += (double)r->inserts / s;
		f->scans += (double)r->scans / s;
		f->scan_pairs += (double)r->scan_pairs / s;
		f->rmws += (double)r->rmws / s;
		f->errors += r->errors;
		f->notfound += r->notfound;
		memcpy(g_samp + ns, r->samp, r->nsamp * sizeof(uint64_t));
		ns += r->nsamp;
	}
	kb_pcts(g_samp, ns, &f->p50_ns, &f->p99_ns);
	f->have = true;
}

struct results g_res;

uint64_t kb_cpu_of(const pid_t *pid, unsigned n)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < n; i++)
		if (pid[i] > 0)
			sum += bu_proc_cpu_ns(pid[i]);
	return sum;
}

/* In the machines' directory (so on the pages the shards get). */
uint64_t kb_shm_need(void)
{
	uint32_t nb = kb_buckets_for(g_opt.keys);
	uint64_t copies = BU_MIN(3u, g_opt.machines);
	/* Every machine's region and its backups', the limit's table, and
	 * per machine its logs and rings (sparse: a bound). */
	return g_opt.machines *
	       (copies * kb_region_for(nb, g_opt.keys) +
	        ((uint64_t)nb + 1) * kb_bucket_bytes() + (64ull << 20));
}

/* kv_lookups_vs_limit's two figures in turns: uniform C on the cluster,
 * then the limit loop with as many in flight (this process, the machines
 * napping), LIMIT_TURNS times, each figure per CPU-second summed over its
 * turns. Measured minutes apart, the limit alone moved 9-19 M per
 * CPU-second with the host's state (docs/benchmarks.md); in turns both
 * figures see the same host. */
#define LIMIT_TURNS 5
static int limit_turns(struct cluster *c, const struct ml_table *t)
{
	double keys = 0, cores = 0;
	struct ml_tally tl = {0};
	int rc = 0;
	printf("  the limit in turns with uniform C (%u of each, %.3g s):\n",
	       LIMIT_TURNS, g_opt.seconds);
	for (unsigned i = 0; i < LIMIT_TURNS && !rc && !interrupted; i++) {
		struct fig f = {0};
		rc = kb_cluster_run(c, W_C, &f);
		if (rc)
			break;
		keys += f.keys;
		cores += f.cores;
		atomic_store(&g_sh->nap, 1);
		rc = ml_slice(t, g_opt.depth, g_opt.seconds, &tl);
		atomic_store(&g_sh->nap, 0);
	}
	if (!rc && interrupted)
		rc = -EINTR;
	if (rc || !tl.ns || !tl.cpu_ns || cores <= 0)
		return rc ? rc : -EIO;
	g_res.limit_farm_cpu = keys / cores;
	g_res.limit_depth = (double)tl.n * 1e9 / (double)tl.ns;
	g_res.limit_depth_cpu = (double)tl.n * 1e9 / (double)tl.cpu_ns;
	printf("  in turns: farm %.3f M lookups per CPU-s, limit(%u) %.3f M; "
	       "farm / limit %.3f\n",
	       g_res.limit_farm_cpu / 1e6, g_opt.depth,
	       g_res.limit_depth_cpu / 1e6,
	       g_res.limit_farm_cpu / g_res.limit_depth_cpu);
	return 0;
}

int kb_run_limit(struct cluster *c, bool with_c)
{
	/* Each shard: the buckets the machine asked for, and the last
	 * home's neighbour. */
	uint64_t nb = (uint64_t)c->n * (kb_buckets_for(c->nkeys) + 1ull);
	struct ml_table t;
	int rc = ml_open(&t, nb - 1, kb_bucket_bytes(), c->base);
	if (rc)
		return rc;
	g_res.limit_bytes = t.bytes;
	/* The table's pages as the shards' are: read back, not assumed. */
	g_res.limit_huge = (struct bp_huge){0, 0};
	(void)bp_huge_of(0, c->base, &g_res.limit_huge);
	g_res.limit_span = 2 * t.bucket_bytes;
	g_res.limit_farm_cpu = 0;
	/* The machines nap while it runs: the loop has a CPU to itself. */
	atomic_store(&g_sh->nap, 1);
	if (with_c) { /* --depth: in turns, below */
		g_res.limit_plain = ml_run(&t, PLAIN_BATCH, g_opt.seconds,
		                           &g_res.limit_plain_cpu);
	} else if (g_opt.depth != PLAIN_BATCH) {
		g_res.limit_depth = ml_run(&t, g_opt.depth, g_opt.seconds,
		                           &g_res.limit_depth_cpu);
	} else { /* the caller's turns measured it */
		g_res.limit_depth = g_res.limit_plain;
		g_res.limit_depth_cpu = g_res.limit_plain_cpu;
	}
	g_res.limit_one = ml_run(&t, 1, g_opt.seconds, NULL);
	atomic_store(&g_sh->nap, 0);
	if (with_c)
		rc = limit_turns(c, &t);
	ml_close(&t);
	if (rc)
		return rc;
	printf("  limit table: %.0f%% mapped by 2 MiB entries\n",
	       100 * BU_MAX(bp_huge_share(&g_res.limit_huge), 0.0));
	printf("  limit loop (one thread, %.0f MB table, %u B per lookup): "
	       "%.3f M/s with %u in flight, %.3f M/s with %u, %.3f M/s one "
	       "at a time\n",
	       (double)g_res.limit_bytes / 1e6, g_res.limit_span,
	       g_res.limit_plain / 1e6, PLAIN_BATCH, g_res.limit_depth / 1e6,
	       g_opt.depth, g_res.limit_one / 1e6);
	return 0;
}

/* Making a region of hundreds of MiB (and its backups) can overrun the 1 s
 * RPC timeout inside addrspace on a loaded host: the join then fails with
 * -ETIMEDOUT. Try again, up to 3 times. */
int kb_cluster_start(struct cluster *c, uint64_t nkeys, const char *tmp)
{
	int rc;
	for (int attempt = 1;; attempt++) {
		rc = cluster_start1(c, nkeys, tmp);
		if (rc != -ETIMEDOUT || attempt == 3 || interrupted)
			return rc;
		fprintf(stderr,
		        PROG ": joining timed out; starting the cluster "
		             "again (attempt %d)\n",
		        attempt + 1);
	}
}

int kb_cluster_load(struct cluster *c, bool full)
{
	printf("loading %" PRIu64 " keys (%u B keys, %u B values) from %u "
	       "machines, %u puts in flight each\n",
	       c->nkeys, g_opt.ksize, g_opt.vsize, g_opt.machines,
	       g_opt.load_depth);
	fflush(stdout);
	uint64_t t0 = bu_now_ns();
	int rc = kb_cluster_cmd(c, CMD_LOAD, 0, 0, true);
	if (rc)
		return rc;
	double ls = (double)(bu_now_ns() - t0) / 1e9;
	printf("  loaded in %.1f s: %.2f M puts/s\n", ls,
	       (double)c->nkeys / ls / 1e6);
	if (full) {
		g_res.load_s = ls;
		g_res.load_rate = (double)c->nkeys / ls;
	}
	/* The machines list their own keys (the own-shard workloads') while
	 * none writes. */
	return full ? kb_cluster_cmd(c, CMD_OWN, 0, 0, false) : 0;
}

/* The machines' transaction counters, summed: commits, installs, COMMIT-
 * BACKUPs applied at backups, waits for log room; and the puts shipped. */
static void txm_sum(const struct cluster *c, uint64_t v[5])
{
	v[0] = v[1] = v[2] = v[3] = v[4] = 0;
	for (unsigned i = 0; i < c->n; i++) {
		const farm_txm_stats *s = &g_sh->tst[i];
		v[0] += s->commits;
		v[1] += s->installs;
		v[2] += s->backup_applies;
		v[3] += s->log_full;
		v[4] += g_sh->hst[i].puts;
	}
}

int kb_cluster_run(struct cluster *c, int w, struct fig *f)
{
	return kb_cluster_run_for(c, w, g_opt.seconds, f);
}

int kb_cluster_run_for(struct cluster *c, int w, double secs, struct fig *f)
{
	uint64_t t_before[5], t_after[5];
	txm_sum(c, t_before);
	uint64_t c0 = kb_cpu_of(c->pid, c->n), t0 = bu_now_ns();
	int rc = kb_cluster_cmd(c, CMD_RUN, w, secs, false);
	if (rc)
		return rc;
	double cores = (double)(kb_cpu_of(c->pid, c->n) - c0) /
	               (double)(bu_now_ns() - t0);
	kb_collect(c->n, f);
	f->cores = cores;
	/* Per second of the machines' CPU time as well: on a loaded host
	 * the wall-clock rate measures the time slices they got. */
	printf("  %-20s %8.3f M ops/s (%.3f M keys/s per core, %.3f M per "
	       "CPU-s), p50 %.1f us, p99 %.1f us\n",
	       g_wdesc[w].name, f->ops / 1e6, f->keys / g_res.cores / 1e6,
	       cores > 0 ? f->keys / cores / 1e6 : 0.0, f->p50_ns / 1e3,
	       f->p99_ns / 1e3);
	txm_sum(c, t_after);
	if (t_after[4] > t_before[4]) {
		/* Counted over the run and its warm-up: objects each put
		 * installs at its owner and applies at its backup. */
		double puts = (double)(t_after[4] - t_before[4]);
		double tot = (double)(t_after[0] - t_before[0]);
		printf("  %-20s %.0f puts in %.0f commits; per put %.2f "
		       "installs, %.2f backup applies; %" PRIu64
		       " waits for log room\n",
		       "", puts, tot, (double)(t_after[1] - t_before[1]) / puts,
		       (double)(t_after[2] - t_before[2]) / puts,
		       t_after[3] - t_before[3]);
	}
	if (w >= W_YA)
		printf("  %-20s %.3f M inserts/s, %.3f M scans/s (%.1f "
		       "pairs each), %.3f M read-modify-writes/s, "
		       "%" PRIu64 " reads not found\n",
		       "", f->inserts / 1e6, f->scans / 1e6,
		       f->scans > 0 ? f->scan_pairs / f->scans : 0,
		       f->rmws / 1e6, f->notfound);
	fflush(stdout);
	return 0;
}

int kb_setup(const char **tmp)
{
	bu_on_stop(on_signal);
	signal(SIGCHLD, SIG_DFL);

	*tmp = "/dev/shm";
	if (access(*tmp, W_OK) != 0) {
		*tmp = getenv("TMPDIR");
		if (!*tmp || !**tmp)
			*tmp = "/tmp";
	}
	g_sh = mmap(NULL, sizeof(*g_sh), PROT_READ | PROT_WRITE,
	            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	g_samp = malloc((size_t)MAXM * SAMP_MAX * sizeof(uint64_t));
	if (g_sh == MAP_FAILED || !g_samp) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	int first[MAXM];
	g_res.ncpu = kb_ncpus_allowed(first);
	g_res.cores = (int)BU_MIN((unsigned)g_res.ncpu, g_opt.machines);
	return 0;
}

void kb_say_start(const char *per)
{
	printf(PROG ": %u machine processes (1 busy-polling loop each%s) on "
	            "%d CPUs; %" PRIu64 " keys; %u ops in flight per thread "
	            "(gets: %s); %.2g s per %s\n",
	       g_opt.machines, g_opt.pin ? ", pinned" : "", g_res.ncpu,
	       g_opt.keys, g_opt.depth,
	       g_opt.single_gets ? "one call each" : "a pass's in one call",
	       g_opt.seconds, per);
}

int kb_exit_status(int rc, const char *note)
{
	if (interrupted) {
		fprintf(stderr, PROG ": interrupted%s\n", note);
		return 130;
	}
	if (rc) {
		fprintf(stderr, PROG ": failed: %s\n", farm_strerror(rc));
		return 1;
	}
	return 0;
}
