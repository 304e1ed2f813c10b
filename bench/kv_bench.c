/*
 * kv_bench: YCSB-style load on the cluster key-value store (farm/kv.h) on a
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
 * farm_kv_put in flight (shipped to the key's owner, which combines them
 * into transactions). Then each machine lists the loaded keys of its own
 * shard (farm_kv_iterate_local). Workloads, each --seconds (2) after a warm-up:
 *   C  read-only, B 95/5 reads/updates, A 50/50, each with uniform and
 *   Zipf --zipf (0.99: YCSB's scrambled zipfian) key choice; mget24:
 *   farm_kv_mget of 24 uniform keys; C-local: read-only on keys of the
 *   machine's own shard only (the API path with no fabric).
 * Or, with --mix, YCSB's core workloads A to F instead (kv_work.c's table
 * g_wdesc): A, B, C as zipf A, B, C; D 95/5 reads/inserts, the reads of the
 * latest inserted keys (a zipfian rank back from the last insert every
 * one below which is acknowledged, YCSB's AcknowledgedCounterGenerator);
 * F 50/50 reads / read-modify-writes (a get, then a put of a changed
 * value: the client's, as YCSB's, not one transaction). E (scans from a
 * key's home bucket, in the table's order) has no public form:
 * tests/perf's kv_local_bench runs it.
 * Each machine keeps --depth (32) operations in flight (continuations; for
 * mget24, depth/24 rounded up multi-gets). One op in 16 is timed. Then:
 * unloaded latency (machine 0 alone, one lookup in flight). Last, the
 * limit in the same run (bench/lib/memlimit.h): this process, one thread,
 * copies the two-bucket span from random homes of a table of the cluster's
 * size (every shard's buckets, mapped in the machines' directory as the
 * shards are), 16 in flight with prefetch, --depth in flight (farm's), and
 * one at a time; farm's lookups per core are reported against it. (The
 * plain local loop, the store's own lookup on its shard's memory, is
 * kv_local_bench's: tests/perf.)
 * With --keys above 1M the same cluster set-up is first run with 1M keys
 * (read-only uniform and Zipf) for the size-scaling goal.
 *
 * Peers, beside the cluster of the judged page size: memcached -t 1 and
 * redis-server (single-threaded) on loopback free ports, started and
 * loaded here before the cluster is, held (SIGSTOP) through its load,
 * stopped by pid (also on failure; they die with this process:
 * PR_SET_PDEATHSIG). Loaded with the same keys (pipelined), and once the
 * cluster is loaded warmed up until their rate stops climbing
 * (kb_peer_settle); then the same workloads from M client threads, one
 * connection each: "pipe" (memcached meta mg/ms, Redis GET/SET/MGET,
 * `depth` requests per batch; a read-modify-write's set goes in a second
 * round after the batch's replies) just after the farm's run of the same
 * workload (so each ratio is of figures seconds apart, not minutes: the
 * host's speed moves by a third between minutes), in three turns, each
 * side's figure its median turn's (run_rounds), the machines napping
 * while the peers run and the peers stopped while the farm runs; then,
 * once the machines are gone, "single" (one request at a time per
 * connection) and the unloaded GET.
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

/* The public API alone: kv_local_bench (tests/perf) has the rest. */
const struct kb_inner *const kb_inner = NULL;

/* The workloads of a run: the default set or --mix (@full), --demo's B,
 * or the 1M-key run's read-only ones. Returns how many. */
static int run_set(bool full, int *wls)
{
	int n = 0;
	if (full && g_opt.demo)
		wls[n++] = W_B;
	else if (full) {
		for (int w = 0; w < NW; w++)
			if (kb_runs(w, false))
				wls[n++] = w;
	} else {
		wls[n++] = W_C;
		wls[n++] = W_ZC;
	}
	return n;
}

/* Unloaded latency: machine 0 alone, one lookup in flight. */
static int run_lat(struct cluster *c)
{
	uint64_t c0 = kb_cpu_of(c->pid, c->n), t0 = bu_now_ns();
	int rc = kb_cluster_cmd(c, CMD_LAT, 0, BU_MIN(g_opt.seconds, 1.0),
	                        false);
	if (rc)
		return rc;
	kb_collect(c->n, &g_res.lat1);
	g_res.lat1.cores = (double)(kb_cpu_of(c->pid, c->n) - c0) /
	                   (double)(bu_now_ns() - t0);
	printf("  unloaded lookup (1 in flight, machine 0): "
	       "%.3f M/s, "
	       "p50 %.2f us, p99 %.2f us\n",
	       g_res.lat1.ops / 1e6, g_res.lat1.p50_ns / 1e3,
	       g_res.lat1.p99_ns / 1e3);
	/* The same with keys of the other machines only: with about 1/N of
	 * the keys in machine 0's own shard, answered in about 1 us, the
	 * median of every key can sit on the edge between the two kinds. */
	if (c->n < 2 || (rc = kb_cluster_cmd(c, CMD_OWN, 0, 0, false)))
		return rc;
	rc = kb_cluster_cmd(c, CMD_LAT_OTHERS, 0, BU_MIN(g_opt.seconds, 1.0),
	                    false);
	if (rc)
		return rc;
	kb_collect(c->n, &g_res.lat1o);
	printf("  unloaded lookup of other machines' keys: %.3f M/s, p50 "
	       "%.2f us, p99 %.2f us\n",
	       g_res.lat1o.ops / 1e6, g_res.lat1o.p50_ns / 1e3,
	       g_res.lat1o.p99_ns / 1e3);
	return 0;
}

/* The table's counters, summed over the machines, into g_res.hst. */
static void sum_table_stats(unsigned n)
{
	g_res.hst = (farm_kv_table_stats){0};
	for (unsigned i = 0; i < n; i++) {
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

/* After the workloads of a full run (not --demo): the unloaded latency
 * and the limit (not with --mix), the table's counters. */
static int run_after(struct cluster *c)
{
	int rc = 0;
	if (!g_opt.any_mix)
		rc = run_lat(c);
	/* The limit is a reference figure: without it the goals that use
	 * it print null, the rest of the run stands. */
	if (!rc && !g_opt.any_mix && kb_run_limit(c, true))
		fprintf(stderr, PROG ": no limit figure (above); its goals "
		                     "are null\n");
	if (!rc)
		sum_table_stats(c->n);
	return rc;
}

/* The machines' nap while a peer works: nothing waits on them then, and
 * each wake-up takes a peer's core for a while. */
#define PEER_NAP_MS 10
/* Turns of each workload in a full run (run_rounds). */
#define ROUNDS 3

/* The peers run beside the cluster, each workload on them just after
 * the farm's: the host's speed moves by a third from one minute to the
 * next, and a ratio of two figures taken seconds apart is one moment's.
 * Each side has the cores as it would alone: the machines nap while a
 * peer works, the peers are stopped (SIGSTOP) while the farm works.
 * peers_open: start and load each peer, then hold it. */
static int peers_open(const char *tmp)
{
	int rc = 0;
	for (int p = 0; p < NPEER && !rc; p++) {
		printf("== %s, beside the cluster\n", pname[p]);
		fflush(stdout);
		if ((rc = kb_peer_open(p, tmp)))
			while (p--)
				(void)kb_peer_close(p, rc);
	}
	for (int p = 0; p < NPEER && !rc; p++)
		kb_peer_hold(p, true);
	return rc;
}

/* Let the peers go on (@go) and the machines nap, or the other way. */
static void peers_turn(bool go)
{
	atomic_store(&g_sh->nap, go ? PEER_NAP_MS : 0);
	for (int p = 0; p < NPEER; p++)
		kb_peer_hold(p, !go);
}

/* Warm each peer up, the machines napping (kb_peer_settle): after the
 * cluster's load, as Redis held through it served its first turn after
 * at about half its later rate. */
static int peers_settle(void)
{
	int rc = 0;
	peers_turn(true);
	for (int p = 0; p < NPEER && !rc; p++)
		rc = kb_peer_settle(p);
	peers_turn(false);
	return rc;
}

/* The figure of @n whose keys per second is the median (the upper one
 * of an even count). */
static const struct fig *median_fig(const struct fig *f, unsigned n)
{
	const struct fig *by[ROUNDS];
	for (unsigned i = 0; i < n; i++) {
		unsigned j = i;
		for (; j > 0 && by[j - 1]->keys > f[i].keys; j--)
			by[j] = by[j - 1];
		by[j] = &f[i];
	}
	return by[n / 2];
}

/* Workload @w in ROUNDS turns of --seconds / ROUNDS (one whole turn for
 * --demo): the farm's, into @dst, then (@peers) each peer's, pipelined,
 * into g_res. Each side's figure is its median turn's: Redis's rate in
 * 1 s runs moved 0.30-0.46 M within one minute on this host, and one
 * bad slice on either side would make the ratio. */
static int run_rounds(struct cluster *c, int w, bool peers, struct fig *dst)
{
	unsigned n = g_opt.demo ? 1 : ROUNDS;
	double secs = g_opt.seconds / n;
	struct fig farm[ROUNDS], peer[NPEER][ROUNDS];
	bool pw = peers && kb_peer_wants(M_PIPE, w);
	int rc = 0;
	for (unsigned r = 0; r < n && !rc; r++) {
		rc = kb_cluster_run_for(c, w, secs, &farm[r]);
		if (rc || !pw)
			continue;
		peers_turn(true);
		for (int p = 0; p < NPEER && !rc; p++)
			rc = kb_peer_run(p, M_PIPE, w, secs, &peer[p][r]);
		peers_turn(false);
	}
	if (rc)
		return rc;
	*dst = *median_fig(farm, n);
	for (int p = 0; p < NPEER && pw; p++)
		g_res.peer[p][M_PIPE][w] = *median_fig(peer[p], n);
	return 0;
}

/* After the cluster has stopped (@rc: the outcome so far): the peers'
 * one-request-at-a-time runs, then each peer's close. */
static int peers_close(int rc)
{
	for (int p = 0; p < NPEER; p++)
		kb_peer_hold(p, false);
	for (int w = 0; w < NW && !rc && !interrupted; w++)
		for (int p = 0; p < NPEER && !rc; p++)
			if (kb_peer_wants(M_SINGLE, w))
				rc = kb_peer_run(p, M_SINGLE, w, g_opt.seconds,
				                 &g_res.peer[p][M_SINGLE][w]);
	for (int p = 0; p < NPEER; p++)
		rc = kb_peer_close(p, rc);
	return rc;
}

/* The cluster with @nkeys, loaded, then the workloads (@full: all of the
 * run's, else the 1M-key run's), each followed by the peers' (@peers). */
static int run_farm(uint64_t nkeys, bool full, bool peers, const char *tmp)
{
	/* The peers load first: for a minute after loading 10M keys each
	 * the host was slow, the farm's and Redis's rates a fifth to a
	 * third lower than later, and the cluster's load covers it. They
	 * warm up after it. */
	int rc = peers ? peers_open(tmp) : 0;
	if (rc)
		return rc;
	struct cluster c;
	if ((rc = kb_cluster_start(&c, nkeys, tmp)))
		return peers ? peers_close(rc) : rc;
	rc = kb_cluster_load(&c, full);
	if (!rc && full && bnet_shm(&g_opt.net)) {
		/* What the machines' region files are mapped by, now that
		 * the load has touched the table. */
		g_res.huge = (struct bp_huge){0, 0};
		for (unsigned i = 0; i < c.n; i++)
			(void)bp_huge_of(c.pid[i], c.base, &g_res.huge);
		printf("  pages: %.0f%% of the machines' %" PRIu64
		       " MiB resident in region and log files mapped by 2 MiB "
		       "entries (asked: %s)\n",
		       100 * BU_MAX(bp_huge_share(&g_res.huge), 0.0),
		       g_res.huge.rss >> 20, bp_words(g_res.pages));
	}
	if (!rc && peers)
		rc = peers_settle();
	int wls[NW], nwl = rc ? 0 : run_set(full, wls);
	for (int i = 0; i < nwl && !rc; i++) {
		int w = wls[i];
		struct fig *dst = full       ? &g_res.farm[w]
		                  : w == W_C ? &g_res.small_c
		                             : &g_res.small_zc;
		rc = run_rounds(&c, w, peers, dst);
	}
	if (!rc && full && !g_opt.demo)
		rc = run_after(&c);
	fflush(stdout);
	kb_cluster_stop(&c);
	return peers ? peers_close(rc) : rc;
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
	        "and the memory system's limit. Prints a table, then one\n"
	        "JSON line (last).\n"
	        "\n"
	        "  --machines N     machine processes (2..%d; default 2)\n"
	        "  --keys N         keys to load (default 10M; suffixes k, M)\n"
	        "  --seconds S      length of each measurement (default 2; a\n"
	        "                   workload of a full run: three turns of\n"
	        "                   a third of it, the median turn's figure)\n"
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
	        "  --single-gets    one farm_kv_get per lookup (default:\n"
	        "                   the gets a pass issues go in one\n"
	        "                   farm_kv_get_many)\n"
	        "  --alt-gets       both ways in turn, 50 ms each, in every\n"
	        "                   workload: each machine prints its gets\n"
	        "                   per CPU-second of its thread both ways\n"
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
	        "                   default set: letters A-D, F or all (A "
	        "50/50\n"
	        "                   read/update, B 95/5, C read only, all\n"
	        "                   zipfian; D 95/5 read/insert, reads of the\n"
	        "                   latest keys; F 50/50 "
	        "read/read-modify-write;\n"
	        "                   E, scans from a key's home bucket, has no\n"
	        "                   public form: kv_local_bench runs it);\n"
	        "                   M: the default set's mget24 alone.\n"
	        "                   No 1M-key run, unloaded latency or limit:\n"
	        "                   those goals report null\n"
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
	        "Pages (shm):\n"
	        "  --pages P        the region files' pages: 4k, 2m or both\n"
	        "                   (default: both where this host allows a\n"
	        "                   private huge tmpfs on /dev/shm, then 1 s\n"
	        "                   per measurement unless --seconds; else\n"
	        "                   4k); goals judged on 2m when measured;\n"
	        "                   the peers run once, beside the\n"
	        "                   judged one's cluster\n"
	        "  -h, --help       this text\n",
	        MAXM);
}

/* --demo: farm with B only, then memcached (pipelined, B) if installed. */
static int demo_main(const char *tmp)
{
	printf("== libfarm: %u machines, %" PRIu64 " keys, YCSB-B for %.0f s\n",
	       g_opt.machines, g_opt.keys, g_opt.seconds);
	fflush(stdout);
	int rc = run_farm(g_opt.keys, true, false, tmp);
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
	int st = kb_exit_status(rc, "; everything stopped");
	if (st)
		return st;
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

/* One page size's farm runs (bp_run's function): at 1M keys (the
 * size-scaling goal; @small: only for the judged page size, which keeps
 * a run of both within five minutes), then at --keys, into @arg's copy
 * of g_res. An exit status (kb_exit_status). */
struct farm_part {
	const char *tmp;
	unsigned pages;
	bool small, peers;
	struct results res; /* in memory shared with main's process */
};

static int farm_part(void *arg)
{
	struct farm_part *fp = arg;
	g_res.pages = fp->pages;
	int rc = 0;
	if (fp->small) {
		g_res.small_keys = SMALL_KEYS;
		printf("== farm, %" PRIu64 " keys\n", g_res.small_keys);
		rc = run_farm(SMALL_KEYS, false, false, fp->tmp);
	}
	if (!rc) {
		printf("== farm, %" PRIu64 " keys\n", g_opt.keys);
		rc = run_farm(g_opt.keys, true, fp->peers, fp->tmp);
	}
	fp->res = g_res;
	return kb_exit_status(rc, "");
}

/* The farm runs with each page size of @plan, 4 KiB first; g_res ends
 * up holding the judged one's (2 MiB when measured). An exit status. */
static int farm_pages(const struct bp_plan *plan, const char *tmp)
{
	size_t len = 2 * sizeof(struct farm_part);
	struct farm_part *fp = bp_shared(len);
	if (!fp) {
		fprintf(stderr, PROG ": no shared memory for the results\n");
		return 1;
	}
	struct results base = g_res;
	unsigned n = 0;
	int st = 0;
	for (unsigned pg = BP_4K; pg <= BP_2M && !st && !interrupted;
	     pg <<= 1) {
		if (!(plan->pages & pg))
			continue;
		fp[n].tmp = tmp;
		fp[n].pages = bnet_shm(&g_opt.net) ? pg : 0;
		bool judged = pg == BP_2M || plan->pages == pg;
		fp[n].small = g_opt.small && judged;
		fp[n].peers = g_opt.peers && judged;
		fp[n].res = base;
		if (fp[n].pages)
			printf("=== %s pages\n", bp_words(pg));
		st = bp_run(plan, pg, farm_part, &fp[n], PROG);
		if (st < 0)
			st = 1;
		n++;
	}
	if (!st && n) {
		g_res = fp[n - 1].res;
		/* Kept for print_all: the process ends after it. */
		static struct results keep[2];
		for (unsigned i = 0; i < n && n == 2; i++) {
			keep[i] = fp[i].res;
			g_pages_res[i] = &keep[i];
		}
	}
	bp_shared_free(fp, len);
	return st;
}

/* The default run or --mix: farm (each page size; the peers beside the
 * judged one's cluster), the summary and the JSON line. */
static int bench_main(const struct bp_plan *plan, const char *tmp)
{
	uint64_t t0 = bu_now_ns();
	int st = farm_pages(plan, tmp);
	if (st)
		return st;
	g_res.total_s = (double)(bu_now_ns() - t0) / 1e9;
	print_all();
	return 0;
}

int main(int argc, char **argv)
{
	if (kb_parse_opts(argc, argv, usage))
		return 2;
	/* The coordinator and the peers' client threads: in the clients'
	 * namespace (the machines enter theirs when forked). */
	if (bnet_enter_client(&g_opt.net))
		return 1;
	const char *tmp;
	if (kb_setup(&tmp))
		return 1;
	if (g_opt.demo)
		printf("kv_bench --demo: the cluster key-value store (src/kv) "
		       "on "
		       "%u machine processes (shm fabric, %s membership), "
		       "YCSB-B, then the same mix on memcached\n",
		       g_opt.machines, g_opt.zk[0] ? "ZooKeeper" : "static");
	struct bp_plan plan = {.pages = BP_4K};
	if (!g_opt.demo && bnet_shm(&g_opt.net)) {
		if (bp_plan(&plan, g_opt.pages, kb_shm_need(), PROG))
			return 2;
		/* Two page sizes in the time of one: half a measurement
		 * each (the farm's runs are most of the time). */
		if (plan.pages == BP_BOTH && !g_opt.secs_set && !g_opt.quick)
			g_opt.seconds /= 2;
	}
	if (!g_opt.demo)
		kb_say_start("workload");
	if (plan.note[0])
		printf("pages: 4 KiB only: %s\n", plan.note);
	else if (plan.pages == BP_BOTH)
		printf("pages: the farm runs with 4 KiB, then 2 MiB pages (a "
		       "private tmpfs on /dev/shm each, %" PRIu64 " MiB; %.3g "
		       "s per measurement); goals judged on 2 MiB\n",
		       plan.mount_bytes >> 20, g_opt.seconds);
	fflush(stdout);
	return g_opt.demo ? demo_main(tmp) : bench_main(&plan, tmp);
}
