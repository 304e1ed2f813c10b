/*
 * kv_bench: YCSB-style load on the cluster key-value store (src/kv) on a
 * local cluster of machine processes over the shm fabric, against
 * memcached and Redis driven by a client in this program, same run, same
 * key set, same operation mix, same concurrency.
 *
 * The process is the coordinator; it is not a machine. It forks machines
 * 0..M-1 (--machines, default 2), each a farm_node built from a
 * configuration in code (static membership: the peers' data directories
 * under /dev/shm; threads 1; busy_poll on; the loop run by the process's
 * main thread: farm_node_set_app_loops), pinned to CPU i mod ncpu. Each
 * creates a farm_kv with buckets for its share of the keys at --occupancy
 * (0.85) and joins with farm_kv_join_sync. Commands, results and latency
 * samples go through a shared anonymous mapping made before the fork; the
 * coordinator sleeps (1 ms naps) while the machines work.
 *
 * Keys are 16 bytes (16 hex digits of a mix of the key number), values 32
 * bytes (the key number, then a pattern), or --key-size and --value-size
 * (make_key, make_val in kv_bench.h); every value read is checked.
 * Loading: machine m puts keys i = m mod M with --load-depth (64)
 * farm_ht_put in flight (shipped to the key's owner, which combines them
 * into transactions). Workloads, each --seconds (2) after a warm-up:
 *   C  read-only, B 95/5 reads/updates, A 50/50, each with uniform and
 *   Zipf --zipf (0.99: YCSB's scrambled zipfian) key choice; mget24:
 *   farm_kv_mget of 24 uniform keys; C-local: read-only on keys of the
 *   machine's own shard only (the API path with no fabric).
 * Or, with --mix, YCSB's core workloads A to F instead (kv_work.c's table
 * g_wdesc): A, B, C as zipf A, B, C; D 95/5 reads/inserts, the reads of the
 * latest inserted keys (a zipfian rank back from the last insert every
 * one below which is acknowledged, YCSB's AcknowledgedCounterGenerator);
 * E 95/5 scans/inserts, a scan visiting 1..100 pairs (uniform) of the
 * machine's own shard from the home bucket of a zipfian-chosen key of
 * that shard on, in the table's order (farm_ht_iterate_local_from: a hash
 * table has no key order, and a remote shard no scan), each pair checked;
 * F 50/50 reads / read-modify-writes (a get, then a put of a changed
 * value: the client's, as YCSB's, not one transaction).
 * Each machine keeps --depth (32) operations in flight (continuations; for
 * mget24, depth/24 rounded up multi-gets). One op in 16 is timed. Then:
 * unloaded latency (machine 0 alone, one lookup in flight), and the plain
 * local loop: machine 0 looks up keys of its own shard straight from its
 * memory (hash, home bucket, prefetch batch of 16, copy and validate the
 * two buckets, match the slot), no loop, no continuations. Last, the
 * limit in the same run (bench/lib/memlimit.h): this process, one thread,
 * copies the two-bucket span from random homes of a table of the cluster's
 * size (every shard's buckets, mapped in the machines' directory as the
 * shards are), 16 in flight with prefetch (the plain loop's), --depth in
 * flight (farm's), and one at a time; farm's lookups per core and the plain
 * loop are reported against it.
 * With --keys above 1M the same cluster set-up is first run with 1M keys
 * (read-only uniform and Zipf) for the size-scaling goal.
 *
 * Peers (after the machines are gone): memcached -t 1 and redis-server
 * (single-threaded) on loopback free ports, started here, stopped by pid
 * (also on failure; they die with this process: PR_SET_PDEATHSIG). Loaded
 * with the same keys (pipelined); then the same workloads from M client
 * threads, one connection each: "pipe" (memcached meta mg/ms, Redis
 * GET/SET/MGET, `depth` requests per batch; a read-modify-write's set
 * goes in a second round after the batch's replies) and "single" (one
 * request at a time per connection). YCSB E is not run on them (no scan).
 *
 * Output: a table, then, last, one JSON line (bench/README.md).
 *
 * --demo (make demo, scripts/demo): 3 machines, 1M keys, YCSB-B uniform for
 * 10 s, then memcached pipelined with the same mix (skipped when not
 * installed), lookup latency only on the farm side, and a short summary
 * instead of the table and JSON. --zk HOST:PORT: the machines join through
 * ZooKeeper (config zk, zk_root /libfarm/kvdemo-<pid>-<n>, a fresh root per
 * cluster start, expect_machines) instead of static peer lines.
 *
 * --fabric ofi (libfabric over loopback) and --netns (ofi across the
 * network namespaces of scripts/netns-cluster run --net-only: machine i
 * in the i-th machine namespace, joined through the cluster's ZooKeeper,
 * the peers in machine 0's, this process and the peers' clients in the
 * clients'; benchnet.h): the CPU the servers and clients use in each run
 * is measured, the peers get an unloaded GET, and the goals are issue
 * 15's (net_goals).
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

struct cluster {
	char base[256];
	pid_t pid[MAXM];
	unsigned n;
	uint64_t nkeys;
};

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

static int cluster_start(struct cluster *c, uint64_t nkeys, const char *tmp)
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

/* Post a command; wait until every machine has done it. */
static int cluster_cmd(struct cluster *c, int cmd, int wl, double secs,
                       bool progress)
{
	g_sh->cmd = cmd;
	g_sh->wl = wl;
	g_sh->dur_ns = (uint64_t)(secs * 1e9);
	g_sh->warm_ns = g_sh->dur_ns / 10;
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
		uint64_t loaded = 0;
		for (unsigned i = 0; i < c->n; i++) {
			done += atomic_load(&g_sh->m[i].done) == seq;
			loaded += atomic_load(&g_sh->m[i].loaded);
		}
		if (progress && loaded * 100 >= (uint64_t)next_pct * c->nkeys &&
		    next_pct <= 100) {
			double s = (double)(bu_now_ns() - t0) / 1e9;
			printf("  loaded %3d%% (%" PRIu64
			       " keys, %.1f s, %.2f M "
			       "puts/s)\n",
			       next_pct, loaded, s, (double)loaded / s / 1e6);
			fflush(stdout);
			while (loaded * 100 >= (uint64_t)next_pct * c->nkeys)
				next_pct += 10;
		}
		if (done == c->n)
			return 0;
		kb_nap_ms(1);
	}
}

static void cluster_stop(struct cluster *c)
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

static void collect(unsigned n, struct fig *f)
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

/* CPU time so far of the processes @pid[0..n-1], in ns. */
static uint64_t cpu_of(const pid_t *pid, unsigned n)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < n; i++)
		if (pid[i] > 0)
			sum += bu_proc_cpu_ns(pid[i]);
	return sum;
}

/* The limit loop over a table of the cluster's shards' size and layout,
 * in the machines' directory (so on the pages the shards get). */
static int run_limit(const struct cluster *c)
{
	uint64_t nb = 0;
	for (unsigned i = 0; i < c->n; i++)
		nb += g_sh->sd[i].nbuckets + 1ull;
	struct ml_table t;
	int rc = ml_open(&t, nb - 1, kb_bucket_bytes(), c->base);
	if (rc)
		return rc;
	g_res.limit_bytes = t.bytes;
	g_res.limit_span = 2 * t.bucket_bytes;
	double plain_cpu;
	g_res.limit_plain = ml_run(&t, PLAIN_BATCH, g_opt.seconds, &plain_cpu);
	g_res.limit_depth_cpu = g_res.limit_plain_cpu = plain_cpu;
	g_res.limit_depth = g_opt.depth == PLAIN_BATCH
	                            ? g_res.limit_plain
	                            : ml_run(&t, g_opt.depth, g_opt.seconds,
	                                     &g_res.limit_depth_cpu);
	g_res.limit_one = ml_run(&t, 1, g_opt.seconds, NULL);
	ml_close(&t);
	printf("  limit loop (one thread, %.0f MB table, %u B per lookup): "
	       "%.3f M/s with %u in flight, %.3f M/s with %u, %.3f M/s one "
	       "at a time\n",
	       (double)g_res.limit_bytes / 1e6, g_res.limit_span,
	       g_res.limit_plain / 1e6, PLAIN_BATCH, g_res.limit_depth / 1e6,
	       g_opt.depth, g_res.limit_one / 1e6);
	return 0;
}

static int run_farm(uint64_t nkeys, bool full, const char *tmp)
{
	struct cluster c;
	int rc;
	/* Making a region of hundreds of MiB (and its backups) can overrun
	 * the 1 s RPC timeout inside addrspace on a loaded host: the join
	 * then fails with -ETIMEDOUT. Try again, up to 3 times. */
	for (int attempt = 1;; attempt++) {
		rc = cluster_start(&c, nkeys, tmp);
		if (rc != -ETIMEDOUT || attempt == 3 || interrupted)
			break;
		fprintf(stderr,
		        PROG ": joining timed out; starting the cluster "
		             "again (attempt %d)\n",
		        attempt + 1);
	}
	if (rc)
		return rc;
	printf("loading %" PRIu64 " keys (%u B keys, %u B values) from %u "
	       "machines, %u puts in flight each\n",
	       nkeys, g_opt.ksize, g_opt.vsize, g_opt.machines,
	       g_opt.load_depth);
	fflush(stdout);
	uint64_t t0 = bu_now_ns();
	rc = cluster_cmd(&c, CMD_LOAD, 0, 0, true);
	if (rc)
		goto out;
	double ls = (double)(bu_now_ns() - t0) / 1e9;
	printf("  loaded in %.1f s: %.2f M puts/s\n", ls,
	       (double)nkeys / ls / 1e6);
	if (full) {
		g_res.load_s = ls;
		g_res.load_rate = (double)nkeys / ls;
	}
	int wls[NW], nwl = 0;
	if (full && g_opt.demo)
		wls[nwl++] = W_B;
	else if (full) {
		for (int w = 0; w < NW; w++)
			if (kb_runs(w, false))
				wls[nwl++] = w;
	} else {
		wls[nwl++] = W_C;
		wls[nwl++] = W_ZC;
	}
	for (int i = 0; i < nwl && !rc; i++) {
		int w = wls[i];
		uint64_t c0 = cpu_of(c.pid, c.n), t0w = bu_now_ns();
		rc = cluster_cmd(&c, CMD_RUN, w, g_opt.seconds, false);
		if (rc)
			break;
		double cores = (double)(cpu_of(c.pid, c.n) - c0) /
		               (double)(bu_now_ns() - t0w);
		struct fig *f = full       ? &g_res.farm[w]
		                : w == W_C ? &g_res.small_c
		                           : &g_res.small_zc;
		collect(c.n, f);
		f->cores = cores;
		printf("  %-20s %8.3f M ops/s (%.3f M keys/s per core), p50 "
		       "%.1f us, p99 %.1f us\n",
		       g_wdesc[w].name, f->ops / 1e6,
		       f->keys / g_res.cores / 1e6, f->p50_ns / 1e3,
		       f->p99_ns / 1e3);
		if (w >= W_YA)
			printf("  %-20s %.3f M inserts/s, %.3f M scans/s (%.1f "
			       "pairs each), %.3f M read-modify-writes/s, "
			       "%" PRIu64 " reads not found\n",
			       "", f->inserts / 1e6, f->scans / 1e6,
			       f->scans > 0 ? f->scan_pairs / f->scans : 0,
			       f->rmws / 1e6, f->notfound);
		fflush(stdout);
	}
	if (!rc && full && !g_opt.demo && !g_opt.any_mix) {
		uint64_t c0 = cpu_of(c.pid, c.n), t0l = bu_now_ns();
		rc = cluster_cmd(&c, CMD_LAT, 0, BU_MIN(g_opt.seconds, 1.0),
		                 false);
		if (!rc) {
			collect(c.n, &g_res.lat1);
			g_res.lat1.cores = (double)(cpu_of(c.pid, c.n) - c0) /
			                   (double)(bu_now_ns() - t0l);
			printf("  unloaded lookup (1 in flight, machine 0): "
			       "%.3f M/s, "
			       "p50 %.2f us, p99 %.2f us\n",
			       g_res.lat1.ops / 1e6, g_res.lat1.p50_ns / 1e3,
			       g_res.lat1.p99_ns / 1e3);
		}
	}
	if (!rc && full && !g_opt.demo && !g_opt.any_mix) {
		rc = cluster_cmd(&c, CMD_PLAIN, 0, g_opt.seconds, false);
		if (!rc) {
			struct mres *r = &g_sh->res[0];
			g_res.plain_rate =
			        (double)r->ops / ((double)r->ns / 1e9);
			g_res.plain_cpu_rate =
			        r->cpu_ns ? (double)r->ops /
			                            ((double)r->cpu_ns / 1e9)
			                  : 0;
			g_res.plain_fallback_frac =
			        r->ops ? (double)r->chain_fallbacks /
			                         (double)r->ops
			               : 0;
			printf("  plain local loop (machine 0, own shard): "
			       "%.3f M "
			       "lookups/s\n",
			       g_res.plain_rate / 1e6);
		}
	}
	/* The limit is a reference figure: without it the goals that use
	 * it print null, the rest of the run stands. */
	if (!rc && full && !g_opt.demo && !g_opt.any_mix && run_limit(&c))
		fprintf(stderr, "kv_bench: no limit figure (above); its goals "
		                "are null\n");
	if (!rc && full && !g_opt.demo) {
		g_res.hst = (farm_kv_table_stats){0};
		for (unsigned i = 0; i < c.n; i++) {
			const farm_kv_table_stats *s = &g_sh->hst[i];
			g_res.hst.lookups += s->lookups;
			g_res.hst.lookup_reads += s->lookup_reads;
			g_res.hst.lookup_retries += s->lookup_retries;
			g_res.hst.lookup_chain_reads += s->lookup_chain_reads;
			g_res.hst.puts += s->puts;
			g_res.hst.combined_txns += s->combined_txns;
			g_res.hst.hops += s->hops;
			g_res.hst.chain_appends += s->chain_appends;
		}
	}
out:
	fflush(stdout);
	cluster_stop(&c);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: kv_bench [OPTIONS]\n"
	        "\n"
	        "YCSB-style load on the cluster key-value store (src/kv): a\n"
	        "local cluster of machine processes (shm fabric, or ofi:\n"
	        "--fabric; one busy-polling loop each), 16 B keys and 32 B\n"
	        "values, uniform and Zipf 0.99 key choice, read-only / 95-5\n"
	        "/ 50-50 and 24-key multi-get (or YCSB A-F: --mix); against\n"
	        "memcached and Redis (started here on loopback, same keys,\n"
	        "same mix, same number of connections as machine threads),\n"
	        "and a plain local lookup loop. Prints a table, then one\n"
	        "JSON line (last).\n"
	        "\n"
	        "  --machines N     machine processes (2..%d; default 2)\n"
	        "  --keys N         keys to load (default 10M; suffixes k, M)\n"
	        "  --seconds S      length of each measurement (default 2)\n"
	        "  --depth D        operations in flight per machine thread,\n"
	        "                   and requests per pipelined peer batch\n"
	        "                   (default 32)\n"
	        "  --load-depth D   puts in flight per machine while loading\n"
	        "                   (default 64)\n"
	        "  --occupancy F    table occupancy to size buckets for\n"
	        "                   (0.3..0.95; default 0.85)\n"
	        "  --sample-every K time one operation in K (power of two;\n"
	        "                   default 16)\n"
	        "  --log-size SZ    transaction log ring size (config\n"
	        "                   log_size; default 1M, more for values\n"
	        "                   over about 1 KiB: 64 combined puts must\n"
	        "                   fit)\n"
	        "  --no-peers       skip memcached and Redis\n"
	        "  --no-small       skip the 1M-key run\n"
	        "  --no-pin         do not pin machine i to CPU i\n"
	        "  --quick          100k keys, 0.5 s runs, no 1M-key run; "
	        "peers\n"
	        "                   skipped when not installed (smoke test)\n"
	        "  --demo           make demo: 3 machines, 1M keys, YCSB-B\n"
	        "                   (95/5 uniform) for 10 s, then memcached\n"
	        "                   (pipelined; skipped when not installed)\n"
	        "                   with the same mix; a short summary, no\n"
	        "                   JSON\n"
	        "  --zk HOST:PORT   membership in this ZooKeeper (its own "
	        "root\n"
	        "                   /libfarm/kvdemo-<pid>-<n>) instead of\n"
	        "                   static peers\n"
	        "YCSB's knobs:\n"
	        "  --key-size N     key bytes (8..250; default 16): "
	        "printable,\n"
	        "                   as memcached takes them\n"
	        "  --value-size N   value bytes (8 up to the store's limit "
	        "for\n"
	        "                   one message, about 32 KiB with the "
	        "default\n"
	        "                   rings; default 32; YCSB's default record "
	        "is\n"
	        "                   1 KiB). Keys up to 64 B and values up to\n"
	        "                   128 B are kept in the bucket's slots,\n"
	        "                   longer ones in an object of their own\n"
	        "  --zipf THETA     the zipfian constant (0.01..0.999; "
	        "default\n"
	        "                   0.99, YCSB's)\n"
	        "  --mix LIST       run YCSB's core workloads instead of the\n"
	        "                   default set: letters A-F or all (A 50/50\n"
	        "                   read/update, B 95/5, C read only, all\n"
	        "                   zipfian; D 95/5 read/insert, reads of the\n"
	        "                   latest keys; E 95/5 scan/insert, scans of\n"
	        "                   1..100 pairs of the machine's own shard "
	        "in\n"
	        "                   table order (not on the peers: they have\n"
	        "                   no scan); F 50/50 "
	        "read/read-modify-write).\n"
	        "                   No 1M-key run, unloaded latency or plain\n"
	        "                   loop: those goals report null\n"
	        "Networks:\n"
	        "  --fabric NAME    shm (default) or ofi (libfabric\n"
	        "                   tcp;ofi_rxm over loopback; default keys\n"
	        "                   100k); the server and client CPU each\n"
	        "                   run uses is measured, and the goals are\n"
	        "                   per core against memcached's\n"
	        "  --lookup MODE    read, owner or auto (default): how a\n"
	        "                   machine looks up another's keys\n"
	        "                   (src/kv/README.md, Owner-served lookups)\n"
	        "  --netns          ofi across network namespaces: machine i\n"
	        "                   in the i-th machine namespace (ZooKeeper\n"
	        "                   membership), memcached and Redis in\n"
	        "                   machine 0's, their clients in the\n"
	        "                   clients' namespace; run it under\n"
	        "                   scripts/netns-cluster run --net-only\n"
	        "                   --machines N --\n"
	        "  -h, --help       this text\n",
	        MAXM);
}

/* --mix: letters A to F (any case, commas allowed), or "all". */
static int parse_mix(const char *s)
{
	bool all = !strcasecmp(s, "all");
	for (const char *p = s; !all && *p; p++) {
		int c = *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p;
		if (c >= 'A' && c <= 'F')
			g_opt.mix[W_YA + (c - 'A')] = true;
		else if (c != ',')
			return -EINVAL;
	}
	for (int w = W_YA; all && w <= W_YF; w++)
		g_opt.mix[w] = true;
	for (int w = W_YA; w <= W_YF; w++)
		g_opt.any_mix |= g_opt.mix[w];
	return g_opt.any_mix ? 0 : -EINVAL;
}

/* Which defaults the options overrode (--quick's, --demo's and the
 * network's apply only to the others). */
struct explicit_opts {
	bool keys, secs, mach, log;
};

/* After the options: --quick's, --demo's and the network's defaults, the
 * log size the values need, and the checks across options. 0 or -EINVAL
 * (said on stderr). */
static int finish_opts(struct explicit_opts set)
{
	if (g_opt.quick) {
		if (!set.keys)
			g_opt.keys = 100000;
		if (!set.secs)
			g_opt.seconds = 0.5;
		g_opt.small = false;
		if (g_opt.peers &&
		    (!kb_in_path("memcached") || !kb_in_path("redis-server"))) {
			fprintf(stderr,
			        PROG ": --quick: memcached or redis-server "
			             "not installed: peers skipped\n");
			g_opt.peers = false;
		}
	}
	if (g_opt.demo) {
		if (!set.mach)
			g_opt.machines = 3;
		if (!set.keys)
			g_opt.keys = SMALL_KEYS;
		if (!set.secs)
			g_opt.seconds = 10.0;
		g_opt.small = false;
	}
	if (bnet_check(&g_opt.net, PROG, g_opt.machines))
		return -EINVAL;
	if (!bnet_shm(&g_opt.net)) {
		/* Software RMA over TCP loads thousands, not millions, of
		 * keys a second. */
		if (!set.keys)
			g_opt.keys = 100000;
		g_opt.small = false;
	}
	if (g_opt.net.netns) {
		/* The machines join through the cluster's ZooKeeper; the
		 * peers serve from machine 0's namespace. */
		const char *zk = getenv("FARM_NETNS_ZK");
		if (!g_opt.zk[0] && zk && *zk)
			snprintf(g_opt.zk, sizeof(g_opt.zk), "%s", zk);
		if (kb_peer_netns())
			return -EINVAL;
	}
	if (g_opt.keys <= SMALL_KEYS || g_opt.any_mix)
		g_opt.small = false;
	if (!set.log) {
		/* The owner combines up to 64 puts in one transaction, whose
		 * records must fit half a log with room to spare: big values
		 * need bigger logs (1 MiB for the default sizes). */
		uint64_t need =
		        64ull * 8 *
		        (8 + g_opt.ksize + g_opt.vsize + 4 * kb_bucket_bytes());
		while (g_opt.log_size < need && g_opt.log_size < (64u << 20))
			g_opt.log_size <<= 1;
	}
	if (g_opt.demo && g_opt.any_mix) {
		fprintf(stderr, PROG ": --demo runs YCSB-B; not with --mix\n");
		return -EINVAL;
	}
	return 0;
}

/* The long options (parse_opts). */
enum {
	O_MACH = 256,
	O_KEYS,
	O_SECS,
	O_DEPTH,
	O_LDEPTH,
	O_OCC,
	O_SAMP,
	O_NOPEERS,
	O_NOSMALL,
	O_NOPIN,
	O_QUICK,
	O_LOG,
	O_DEMO,
	O_ZK,
	O_KSIZE,
	O_VSIZE,
	O_ZIPF,
	O_MIX,
	O_FABRIC,
	O_LOOKUP,
	O_NETNS
};
static const struct option lo[] = {
        {"machines", required_argument, NULL, O_MACH},
        {"keys", required_argument, NULL, O_KEYS},
        {"seconds", required_argument, NULL, O_SECS},
        {"depth", required_argument, NULL, O_DEPTH},
        {"load-depth", required_argument, NULL, O_LDEPTH},
        {"occupancy", required_argument, NULL, O_OCC},
        {"sample-every", required_argument, NULL, O_SAMP},
        {"no-peers", no_argument, NULL, O_NOPEERS},
        {"no-small", no_argument, NULL, O_NOSMALL},
        {"no-pin", no_argument, NULL, O_NOPIN},
        {"quick", no_argument, NULL, O_QUICK},
        {"log-size", required_argument, NULL, O_LOG},
        {"demo", no_argument, NULL, O_DEMO},
        {"zk", required_argument, NULL, O_ZK},
        {"key-size", required_argument, NULL, O_KSIZE},
        {"value-size", required_argument, NULL, O_VSIZE},
        {"zipf", required_argument, NULL, O_ZIPF},
        {"mix", required_argument, NULL, O_MIX},
        {"fabric", required_argument, NULL, O_FABRIC},
        {"lookup", required_argument, NULL, O_LOOKUP},
        {"netns", no_argument, NULL, O_NETNS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};

/* The options' defaults, into g_opt. */
static void default_opts(void)
{
	g_opt = (struct opts){.machines = 2,
	                      .depth = 32,
	                      .load_depth = 64,
	                      .log_size = 1u << 20,
	                      .sample_every = 16,
	                      .keys = 10000000ull,
	                      .seconds = 2.0,
	                      .occupancy = 0.85,
	                      .peers = true,
	                      .small = true,
	                      .pin = true,
	                      .ksize = 16,
	                      .vsize = 32,
	                      .theta = 0.99,
	                      .net = BNET_DEFAULT};
}

static int parse_opts(int argc, char **argv)
{
	default_opts();
	struct explicit_opts set = {false, false, false, false};
	uint64_t v;
	char *end;
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_MACH:
			if (bu_parse_size(optarg, &v) || v < 2 || v > MAXM)
				goto bad;
			g_opt.machines = (unsigned)v;
			set.mach = true;
			break;
		case O_KEYS:
			if (bu_parse_size(optarg, &v) || v < 1000 ||
			    v > KEY_LIMIT / 2) /* room for inserts */
				goto bad;
			g_opt.keys = v;
			set.keys = true;
			break;
		case O_SECS:
			g_opt.seconds = strtod(optarg, &end);
			if (*end ||
			    !(g_opt.seconds >= 0.05 && g_opt.seconds <= 600))
				goto bad;
			set.secs = true;
			break;
		case O_DEPTH:
			if (bu_parse_size(optarg, &v) || v < 1 || v > 200)
				goto bad;
			g_opt.depth = (unsigned)v;
			break;
		case O_LDEPTH:
			if (bu_parse_size(optarg, &v) || v < 1 || v > 200)
				goto bad;
			g_opt.load_depth = (unsigned)v;
			break;
		case O_OCC:
			g_opt.occupancy = strtod(optarg, &end);
			if (*end || !(g_opt.occupancy >= 0.3 &&
			              g_opt.occupancy <= 0.95))
				goto bad;
			break;
		case O_SAMP:
			if (bu_parse_size(optarg, &v) || !bu_is_pow2(v) ||
			    v > 65536)
				goto bad;
			g_opt.sample_every = (unsigned)v;
			break;
		case O_NOPEERS: g_opt.peers = false; break;
		case O_NOSMALL: g_opt.small = false; break;
		case O_NOPIN: g_opt.pin = false; break;
		case O_QUICK: g_opt.quick = true; break;
		case O_DEMO: g_opt.demo = true; break;
		case O_KSIZE:
			if (bu_parse_size(optarg, &v) || v < 8 || v > KLEN_MAX)
				goto bad;
			g_opt.ksize = (unsigned)v;
			break;
		case O_VSIZE:
			if (bu_parse_size(optarg, &v) || v < 8 || v > VLEN_MAX)
				goto bad;
			g_opt.vsize = (unsigned)v;
			break;
		case O_ZIPF:
			g_opt.theta = strtod(optarg, &end);
			if (*end ||
			    !(g_opt.theta >= 0.01 && g_opt.theta <= 0.999))
				goto bad;
			break;
		case O_MIX:
			if (parse_mix(optarg))
				goto bad;
			break;
		case O_FABRIC:
			if (bnet_set_fabric(&g_opt.net, optarg))
				goto bad;
			break;
		case O_LOOKUP:
			if (strcmp(optarg, "read") && strcmp(optarg, "owner") &&
			    strcmp(optarg, "auto"))
				goto bad;
			snprintf(g_opt.lookup, sizeof(g_opt.lookup), "%s",
			         optarg);
			break;
		case O_NETNS: g_opt.net.netns = true; break;
		case O_ZK:
			if (!*optarg || strlen(optarg) >= sizeof(g_opt.zk))
				goto bad;
			snprintf(g_opt.zk, sizeof(g_opt.zk), "%s", optarg);
			break;
		case O_LOG:
			if (bu_parse_size(optarg, &v) || !bu_is_pow2(v) ||
			    v < (64u << 10) || v > (64u << 20))
				goto bad;
			g_opt.log_size = v;
			set.log = true;
			break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n",
		        argv[optind]);
		return -EINVAL;
	}
	return finish_opts(set);
bad:
	fprintf(stderr, PROG ": bad value '%s' for --%s (see --help)\n", optarg,
	        lo[c - O_MACH].name);
	return -EINVAL;
}

/* --demo: farm with B only, then memcached (pipelined, B) if installed. */
static int demo_main(const char *tmp)
{
	printf("== libfarm: %u machines, %" PRIu64 " keys, YCSB-B for %.0f s\n",
	       g_opt.machines, g_opt.keys, g_opt.seconds);
	fflush(stdout);
	int rc = run_farm(g_opt.keys, true, tmp);
	bool mc_skipped = !kb_in_path("memcached");
	if (!rc && !interrupted) {
		if (mc_skipped)
			printf("== memcached: not installed: skipped\n");
		else {
			printf("== memcached (one server thread, %u pipelined "
			       "client connections)\n",
			       g_opt.machines);
			fflush(stdout);
			if (kb_run_peer(P_MC, tmp) && !interrupted)
				printf("== memcached: failed (above): "
				       "skipped\n");
		}
	}
	if (interrupted) {
		fprintf(stderr, PROG ": interrupted; everything stopped\n");
		return 130;
	}
	if (rc) {
		fprintf(stderr, PROG ": failed: %s\n", farm_strerror(rc));
		return 1;
	}
	print_demo(mc_skipped);
	/* The demo shows libfarm next to memcached: without memcached's
	 * figures it failed, and says why. */
	if (!g_res.peer_ok[P_MC] || !g_res.peer[P_MC][M_PIPE][W_B].have) {
		fprintf(stderr, PROG ": demo failed: memcached left out (%s)\n",
		        mc_skipped ? "not installed: scripts/install-deps "
		                     "installs it"
		                   : "it could not be run: above");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (parse_opts(argc, argv))
		return 2;
	/* The coordinator and the peers' client threads: in the clients'
	 * namespace (the machines enter theirs when forked). */
	if (g_opt.net.netns && tn_enter_client())
		return 1;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGCHLD, SIG_DFL);

	const char *tmp = "/dev/shm";
	if (access(tmp, W_OK) != 0) {
		tmp = getenv("TMPDIR");
		if (!tmp || !*tmp)
			tmp = "/tmp";
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
	if (g_opt.demo)
		printf("kv_bench --demo: the cluster key-value store (src/kv) "
		       "on "
		       "%u machine processes (shm fabric, %s membership), "
		       "YCSB-B, then the same mix on memcached\n",
		       g_opt.machines, g_opt.zk[0] ? "ZooKeeper" : "static");
	else
		printf("kv_bench: %u machine processes (1 busy-polling loop "
		       "each%s) on %d CPUs; %" PRIu64 " keys; %u ops in flight "
		       "per thread; %.2g s per workload\n",
		       g_opt.machines, g_opt.pin ? ", pinned" : "", g_res.ncpu,
		       g_opt.keys, g_opt.depth, g_opt.seconds);
	fflush(stdout);
	uint64_t t0 = bu_now_ns();
	int rc = 0;
	if (g_opt.demo)
		return demo_main(tmp);
	if (g_opt.small) {
		g_res.small_keys = SMALL_KEYS;
		printf("== farm, %" PRIu64 " keys\n", g_res.small_keys);
		rc = run_farm(SMALL_KEYS, false, tmp);
	}
	if (!rc) {
		printf("== farm, %" PRIu64 " keys\n", g_opt.keys);
		rc = run_farm(g_opt.keys, true, tmp);
	}
	double zn = g_sh->zeta_n;
	if (!rc && g_opt.peers && !interrupted) {
		/* The machines are gone: the peers have the cores. */
		g_sh->zeta_n = zn;
		for (int p = 0; p < NPEER && !rc; p++) {
			printf("== %s\n", pname[p]);
			rc = kb_run_peer(p, tmp);
		}
	}
	g_res.total_s = (double)(bu_now_ns() - t0) / 1e9;
	if (interrupted) {
		fprintf(stderr, PROG ": interrupted\n");
		return 130;
	}
	if (rc) {
		fprintf(stderr, PROG ": failed: %s\n", farm_strerror(rc));
		return 1;
	}
	print_all();
	return 0;
}
