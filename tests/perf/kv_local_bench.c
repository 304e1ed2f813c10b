/*
 * kv_local_bench: what the cluster key-value store's own layout costs,
 * measured below its API (tests/perf/README.md), on kv_bench's cluster of
 * machine processes, keys and workloads (bench/kv_bench.h; kv_bench.c's
 * head says how they run):
 *   - uniform C through the API (farm_kv_get), and C on the keys of the
 *     machine's own shard (the API path with no fabric);
 *   - the plain local loop: machine 0 looks up keys of its own shard
 *     straight from its memory in calls of 64 keys, the store's batched
 *     local lookup (farm_ht_get_local_batch: in groups of 16 keys, the
 *     limit's number in flight, each key hashed and its home bucket
 *     prefetched, then searched in place and the slot found copied and
 *     validated, the other bucket fetched for a key not found there; a
 *     key it does not resolve there takes the store's full lookup), no
 *     loop, no continuations;
 *   - the limit in the same run (bench/lib/memlimit.h) that the plain loop
 *     is compared with, per second of CPU time on both sides, the two
 *     taken in turns on machine 0 (KL_TURNS of each, alternating, the
 *     same CPU and process) so that both meet the same state of the host;
 *   - YCSB E (95/5 scans/inserts): a scan visits 1..100 pairs (uniform) of
 *     the machine's own shard from the home bucket of a zipfian-chosen key
 *     of that shard on, in the table's order (the hashtable's
 *     farm_ht_iterate_local_from: a hash table has no key order, and the
 *     public API no such scan), each pair checked. Last: its inserts
 *     change the table.
 * Output: a summary, then, last, one JSON line with the goals
 * vs_plain_local_loop (farm's uniform C lookups per core / the plain loop,
 * >= 0.5) and local_loop_vs_limit (the plain loop / the limit with 16 in
 * flight, per CPU-second, >= 0.7).
 */
#include "kv_local.h"

#include "hashtable/ht.h"

static struct {
	double rate, cpu_rate, fallback_frac;
} plain;

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: kv_local_bench [OPTIONS]\n"
	        "\n"
	        "The cluster key-value store below its API, on kv_bench's\n"
	        "local cluster (shm fabric, one busy-polling loop per machine\n"
	        "process): uniform C and C on the machine's own shard through\n"
	        "the API, the plain local lookup loop on the shard's memory\n"
	        "against the memory system's limit in the same run, then YCSB\n"
	        "E's scans from a key's home bucket. Prints a summary, then\n"
	        "one JSON line (last).\n"
	        "\n"
	        "  --machines N     machine processes (2..%d; default 2)\n"
	        "  --keys N         keys to load (default 10M; suffixes k, M)\n"
	        "  --seconds S      length of each measurement (default 2)\n"
	        "  --depth D        operations in flight per machine thread\n"
	        "                   (default 32)\n"
	        "  --load-depth D   puts in flight per machine while loading\n"
	        "                   (default 64)\n"
	        "  --occupancy F    table occupancy to size buckets for\n"
	        "                   (0.3..0.95; default 0.85)\n"
	        "  --sample-every K time one operation in K (power of two;\n"
	        "                   default 16)\n"
	        "  --log-size SZ    transaction log ring size (default 1M)\n"
	        "  --no-pin         do not pin machine i to CPU i\n"
	        "  --quick          100k keys, 0.5 s runs (smoke test)\n"
	        "  --key-size N     key bytes (8..250; default 16)\n"
	        "  --value-size N   value bytes (default 32)\n"
	        "  --zipf THETA     the zipfian constant (default 0.99)\n"
	        "  --lookup MODE    read, owner or auto (default)\n"
	        "  --pages P        the region files' and the limit table's\n"
	        "                   pages: 4k (default) or 2m (a private\n"
	        "                   tmpfs on /dev/shm with huge=advise,\n"
	        "                   where the host allows it)\n"
	        "  -h, --help       this text\n",
	        MAXM);
}

/* Figures of machine 0's turns (CMD_INNER), summed. */
struct turns {
	uint64_t ops, ns, cpu_ns, fallbacks;
};

/* A turn of @mode (KL_PLAIN, KL_LIMIT) @secs long on machine 0; @t its
 * figures so far (the limit's turns report their running sums). */
static int turn(struct cluster *c, int mode, double secs, struct turns *t)
{
	int rc = kb_cluster_cmd(c, CMD_INNER, mode, secs, false);
	if (rc)
		return rc;
	const struct mres *r = &g_sh->res[0];
	if (mode == KL_LIMIT)
		*t = (struct turns){
		        .ops = r->ops, .ns = r->ns, .cpu_ns = r->cpu_ns};
	else
		*t = (struct turns){t->ops + r->ops, t->ns + r->ns,
		                    t->cpu_ns + r->cpu_ns,
		                    t->fallbacks + r->chain_fallbacks};
	return 0;
}

static double per_s(uint64_t n, uint64_t ns)
{
	return ns ? (double)n / ((double)ns / 1e9) : 0;
}

/* The plain loop and the limit with as many in flight, in turns on
 * machine 0 (the same CPU and process, so that both meet the same state
 * of a host whose speed moves by tens of percent within a run); then the
 * limit's other figures (kb_run_limit, in this process: --depth in
 * flight and one at a time), which keeps the turns' 16 in flight. */
static int run_plain(struct cluster *c)
{
	struct turns pl = {0}, li = {0};
	double secs = g_opt.seconds / KL_TURNS;
	int rc = 0, lrc = 0;
	for (unsigned i = 0; i < KL_TURNS && !rc; i++) {
		rc = turn(c, KL_PLAIN, secs, &pl);
		if (!rc && !lrc && (lrc = turn(c, KL_LIMIT, secs, &li)))
			fprintf(stderr, PROG ": the limit's turn: %s\n",
			        strerror(-lrc));
	}
	int erc = kb_cluster_cmd(c, CMD_INNER, KL_LIMIT_END, 0, false);
	if (rc || erc)
		return rc ? rc : erc;
	plain.rate = per_s(pl.ops, pl.ns);
	plain.cpu_rate = per_s(pl.ops, pl.cpu_ns);
	plain.fallback_frac =
	        pl.ops ? (double)pl.fallbacks / (double)pl.ops : 0;
	printf("  plain local loop (machine 0, own shard): %.3f M lookups/s\n",
	       plain.rate / 1e6);
	g_res.limit_plain = lrc ? 0 : per_s(li.ops, li.ns);
	g_res.limit_plain_cpu = lrc ? 0 : per_s(li.ops, li.cpu_ns);
	printf("  limit loop with %u in flight on machine 0, in %u turns with "
	       "the plain loop's: %.3f M/s, %.3f M per CPU-s\n",
	       PLAIN_BATCH, KL_TURNS, g_res.limit_plain / 1e6,
	       g_res.limit_plain_cpu / 1e6);
	/* The limit is a reference figure: without it its goal prints
	 * null, the rest of the run stands. */
	if (lrc || kb_run_limit(c, false))
		fprintf(stderr, PROG ": no limit figure (above); its goal is "
		                     "null\n");
	return 0;
}

static int run(const char *tmp)
{
	struct cluster c;
	int rc = kb_cluster_start(&c, g_opt.keys, tmp);
	if (rc)
		return rc;
	rc = kb_cluster_load(&c, true);
	if (!rc)
		rc = kb_cluster_run(&c, W_C, &g_res.farm[W_C]);
	if (!rc)
		rc = kb_cluster_run(&c, W_LOCAL, &g_res.farm[W_LOCAL]);
	if (!rc)
		rc = run_plain(&c);
	if (!rc)
		rc = kb_cluster_run(&c, W_YE, &g_res.farm[W_YE]);
	fflush(stdout);
	kb_cluster_stop(&c);
	return rc;
}

static void print_summary(double farm_c, double vs_plain, double pl_lim)
{
	printf("\nfarm: %u machine threads on %d cores; lookups/s per core "
	       "(uniform C) %.3f M, own shard %.3f M\n",
	       g_opt.machines, g_res.cores, farm_c / 1e6,
	       g_res.farm[W_LOCAL].keys / g_res.cores / 1e6);
	printf("plain local loop %.3f M lookups/s per core (%.4f%% via the "
	       "chain fallback); farm/plain %.3f\n",
	       plain.rate / 1e6, plain.fallback_frac * 100, vs_plain);
	printf("limit loop (same table, one thread): %.3f M/s with %u in "
	       "flight (wall clock); plain / limit(%u) %.3f\n",
	       g_res.limit_plain / 1e6, PLAIN_BATCH, PLAIN_BATCH,
	       g_res.limit_plain > 0 ? plain.rate / g_res.limit_plain : 0);
	printf("per CPU-second: plain loop %.3f M, limit(%u) %.3f M: %.3f "
	       "(goal >= %.1f)\n",
	       plain.cpu_rate / 1e6, PLAIN_BATCH, g_res.limit_plain_cpu / 1e6,
	       pl_lim, GOAL_LOCAL_VS_LIMIT);
	const struct fig *e = &g_res.farm[W_YE];
	printf("YCSB E: %.3f M scans/s (%.1f pairs each), %.3f M inserts/s\n",
	       e->scans / 1e6, e->scans > 0 ? e->scan_pairs / e->scans : 0,
	       e->inserts / 1e6);
}

static void print_json(double farm_c, double vs_plain, double pl_lim)
{
	printf("{\"bench\": \"kv_local_bench\", \"provider\": \"%s\", "
	       "\"lookup\": \"%s\", \"machines\": %u, \"cores\": %d, "
	       "\"pinned\": %s, \"pages\": \"%s\", \"keys\": %" PRIu64
	       ", \"key_bytes\": %u, "
	       "\"value_bytes\": %u, \"key_inline\": %u, \"value_inline\": "
	       "%u, \"zipf_theta\": %.3g, \"occupancy\": %.2f, \"depth\": %u, "
	       "\"seconds\": %.3g, \"farm\": {",
	       g_opt.net.fabric, g_opt.lookup[0] ? g_opt.lookup : "auto",
	       g_opt.machines, g_res.cores, g_opt.pin ? "true" : "false",
	       bp_key(g_res.pages), g_opt.keys, g_opt.ksize, g_opt.vsize,
	       kb_key_inline(), kb_val_inline(), g_opt.theta, g_opt.occupancy,
	       g_opt.depth, g_opt.seconds);
	kb_jfig(g_wdesc[W_C].key, &g_res.farm[W_C], false, true);
	kb_jfig(g_wdesc[W_LOCAL].key, &g_res.farm[W_LOCAL], false, true);
	kb_jfig(g_wdesc[W_YE].key, &g_res.farm[W_YE], true, false);
	printf("}, \"plain_local_loop_per_s\": %.0f, "
	       "\"plain_chain_fallback_frac\": %.6f, \"limit\": "
	       "{\"table_bytes\": %" PRIu64 ", \"span_bytes\": %u, "
	       "\"per_s_%u_in_flight\": %.0f, \"per_cpu_s_16_in_flight\": "
	       "%.0f, \"plain_local_loop_per_cpu_s\": %.0f}, \"ratios\": "
	       "{\"farm_vs_plain\": %.3f}, \"goals\": {",
	       plain.rate, plain.fallback_frac, g_res.limit_bytes,
	       g_res.limit_span, PLAIN_BATCH, g_res.limit_plain,
	       g_res.limit_plain_cpu, plain.cpu_rate, vs_plain);
	kb_jgoal("vs_plain_local_loop", vs_plain, plain.rate > 0, GOAL_LOCAL,
	         vs_plain >= GOAL_LOCAL, ">=", true);
	kb_jgoal("local_loop_vs_limit", pl_lim,
	         g_res.limit_plain_cpu > 0 && plain.cpu_rate > 0,
	         GOAL_LOCAL_VS_LIMIT, pl_lim >= GOAL_LOCAL_VS_LIMIT,
	         ">=", false);
	printf("}}\n");
	fflush(stdout);
}

/* The run, then its summary and JSON line: an exit status. */
static int measure(void *arg)
{
	int st = kb_exit_status(run(arg), "");
	if (st)
		return st;
	double farm_c = g_res.farm[W_C].keys / g_res.cores;
	double vs_plain = plain.rate > 0 ? farm_c / plain.rate : 0;
	double pl_lim = g_res.limit_plain_cpu > 0
	                        ? plain.cpu_rate / g_res.limit_plain_cpu
	                        : 0;
	print_summary(farm_c, vs_plain, pl_lim);
	print_json(farm_c, vs_plain, pl_lim);
	return 0;
}

int main(int argc, char **argv)
{
	if (kb_parse_opts(argc, argv, usage))
		return 2;
	if (g_opt.demo || g_opt.any_mix || !bnet_shm(&g_opt.net)) {
		fprintf(stderr, PROG ": --demo, --mix and other fabrics are "
		                     "kv_bench's (see --help)\n");
		return 2;
	}
	const char *tmp;
	if (kb_setup(&tmp))
		return 1;
	kl_sd = mmap(NULL, MAXM * sizeof(struct farm_ht_shard),
	             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (kl_sd == MAP_FAILED) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	unsigned pages = g_opt.pages ? g_opt.pages : BP_4K;
	struct bp_plan plan = {.pages = BP_4K};
	if (pages == BP_2M && bp_plan(&plan, BP_2M, kb_shm_need(), PROG))
		return 2;
	g_res.pages = pages;
	kb_say_start("measurement");
	printf("pages: %s\n", bp_words(pages));
	fflush(stdout);
	/* 2 MiB pages: the whole measurement in a child on a private huge
	 * tmpfs (benchpages.h), which prints the results itself. */
	int st = pages == BP_2M
	                 ? bp_run(&plan, BP_2M, measure, (void *)tmp, PROG)
	                 : measure((void *)tmp);
	return st < 0 ? 1 : st;
}
