/*
 * graph_bench: the graph store (fgraph on a 3-machine local cluster) against
 * MariaDB (LinkBench's schema), Redis and a plain in-memory implementation
 * of the same layout, in the same run, with the same LinkBench-style graph
 * and the same operation stream (linkbench.h), for Tao's mix and
 * LinkBench's. Each system runs in its best configuration (fgraph: --depth
 * operations in flight per machine; Redis: pipelined; MariaDB: several
 * connections) and one request at a time. Prints per-operation and overall
 * tables, then one JSON line with the goals.
 *
 * CPU: every figure "per core" divides throughput by the cores the system
 * kept busy in the measured window (CPU seconds of its processes, server
 * and client, per wall second).
 */
#include "graph_maria.h"
#include "graph_redis.h"

#include <getopt.h>

enum { SYS_FG, SYS_MEM, SYS_REDIS, SYS_MARIA, NSYS };
static const char *const sys_name[NSYS] = {"fgraph", "in-memory", "redis",
                                           "mariadb"};

static struct {
	uint64_t nodes, seed;
	double warm, secs;
	unsigned depth, redis_depth, maria_conns, replicas;
	int park_after;
	int mix; /* -1: both */
	bool no_redis, no_maria, quick, demo, verbose;
	const char *plot;
} O = {.nodes = 250000,
       .seed = 1,
       .warm = 1.0,
       .secs = 3.0,
       .depth = 32,
       .redis_depth = 0,
       .maria_conns = 4,
       .replicas = 1,
       .park_after = 0,
       .mix = -1};

/* Whether mix @m is run (--mix). */
static bool mix_on(int m)
{
	return O.mix < 0 || O.mix == m;
}

/* The pipeline depth Redis's best run used, per mix. */
static unsigned redis_best_depth[LB_NMIX];

/* results[system][mix][0 best, 1 one at a time] */
static struct gd_sum R[NSYS][LB_NMIX][2];
static bool have[NSYS][LB_NMIX][2];

static const char *usage =
        "usage: graph_bench [options]\n"
        "  --nodes N          graph size (k, M suffixes; default 250k: with\n"
        "                     MariaDB's load, 1M takes over 5 minutes on 2\n"
        "                     cores)\n"
        "  --seconds T        measured seconds per run (default 3)\n"
        "  --warm T           warm-up seconds per run (default 1)\n"
        "  --depth D          fgraph operations in flight per machine (32)\n"
        "  --redis-depth D    Redis pipeline depth (default: the faster\n"
        "                     of 32 and 128)\n"
        "  --maria-conns N    MariaDB connections (4)\n"
        "  --replicas R       fgraph region copies (default 1: see README)\n"
        "  --park-after US    fgraph machines' park_after_us (default 0:\n"
        "                     three machines share 2 cores; see\n"
        "                     docs/benchmarks.md)\n"
        "  --no-redis, --no-maria   leave a peer out\n"
        "  --mix M            only mix M (tao or linkbench; default both)\n"
        "  --quick            100k nodes, 1 s runs\n"
        "  --plot FILE        also write a PNG of per-operation throughput\n"
        "  --seed S           the graph's seed\n"
        "  --verbose          also fgraph's per-operation table of every\n"
        "                     run (reads per operation, retries)\n"
        "  --demo             make demo: 20k nodes, the Tao mix for 10 s,\n"
        "                     fgraph next to MariaDB\n"
        "  --zk HOST:PORT     the machines join through ZooKeeper\n";

static void say_progress(const char *what, uint64_t done, uint64_t total,
                         uint64_t t0)
{
	static uint64_t last;
	uint64_t now = gc_now_ns();
	if (done < total && now - last < 1000000000ull)
		return;
	last = now;
	double s = (double)(now - t0) / 1e9;
	fprintf(stderr, "%s: %" PRIu64 "/%" PRIu64 " nodes (%.0f%%), %.1f s\n",
	        what, done, total, 100.0 * (double)done / (double)total, s);
}

struct fprog {
	struct gd_shared *sh;
	uint64_t t0;
};
static void fg_progress(void *arg)
{
	struct fprog *p = arg;
	uint64_t n = 0;
	for (unsigned i = 0; i < GC_NM; i++)
		n += atomic_load(&p->sh->loaded[i]);
	say_progress("fgraph load", n, p->sh->nodes, p->t0);
}
struct pprog {
	const char *what;
	uint64_t t0, total;
};
static void peer_progress(uint64_t done, void *arg)
{
	struct pprog *p = arg;
	say_progress(p->what, done, p->total, p->t0);
}

static void from_result(const struct gd_result *r, struct gd_sum *s)
{
	gd_summarize(r, 1, s);
}

/* ---- the systems --------------------------------------------------------- */

static int run_fgraph(void)
{
	struct gd_shared *sh = gd_map();
	if (!sh)
		return -ENOMEM;
	sh->nodes = O.nodes;
	sh->seed = O.seed;
	sh->warm = O.warm;
	sh->secs = O.secs;
	gc_o.region_size = "512M";
	gc_o.kv_buckets = (uint32_t)(O.nodes / GC_NM / 3 + 1024);
	gc_o.replicas = O.replicas;
	gc_o.park_after_us = O.park_after;
	/* The demo shows throughput, not detection time: leases that
	 * outlast the loaded host's wake-up latency (kv_bench --demo's). */
	if (O.demo)
		gc_o.lease_us = 100000;
	struct gc_cluster cl;
	struct fg_attr a = {.cache_entries = gd_cache_entries(sh->nodes)};
	uint64_t t0 = gc_now_ns();
	if (gc_start(&cl, "bench", &a, gd_body, sh)) {
		fprintf(stderr, "graph_bench: the cluster did not start\n");
		gc_kill(&cl);
		return -EIO;
	}
	struct fprog p = {sh, t0};
	int rc = gd_command(&cl, 'L', 0, GC_NM, fg_progress, &p);
	if (rc) {
		fprintf(stderr, "graph_bench: fgraph load: %s\n",
		        fg_strerror(rc));
		gc_kill(&cl);
		return rc;
	}
	uint64_t e = 0;
	for (unsigned i = 0; i < GC_NM; i++)
		e += atomic_load(&sh->edges[i]);
	fprintf(stderr,
	        "fgraph: loaded %" PRIu64 " nodes, %" PRIu64
	        " edges (%.2f per node) in %.1f s\n",
	        O.nodes, e, (double)e / (double)O.nodes,
	        (double)(gc_now_ns() - t0) / 1e9);
	/* the clients' caches as a long-running client has them */
	uint64_t t1 = gc_now_ns();
	rc = gd_command(&cl, 'C', 0, GC_NM, NULL, NULL);
	fprintf(stderr,
	        "fgraph: caches warmed (every node's pointer and "
	        "list heads, on each machine) in %.1f s\n",
	        (double)(gc_now_ns() - t1) / 1e9);
	for (int mix = 0; mix < LB_NMIX && !rc; mix++)
		for (int one = 0; one < 2 && !rc; one++) {
			if ((O.demo && (mix || one)) || !mix_on(mix))
				continue;
			sh->mix = mix;
			sh->depth = one ? 1 : O.depth;
			rc = gd_command(&cl, 'W', 0, GC_NM, NULL, NULL);
			if (!rc) {
				gd_summarize(sh->res, GC_NM,
				             &R[SYS_FG][mix][one]);
				have[SYS_FG][mix][one] = true;
				if (O.verbose) {
					char t[80];
					snprintf(t, sizeof(t),
					         "fgraph, %s mix, %u in flight "
					         "per machine:",
					         lb_mix_name((enum lb_mix)mix),
					         sh->depth);
					gd_print(stderr, t,
					         &R[SYS_FG][mix][one]);
				}
			}
		}
	if (rc)
		fprintf(stderr, "graph_bench: fgraph run: %s\n",
		        fg_strerror(rc));
	if (gc_finish(&cl))
		rc = rc ? rc : -EIO;
	munmap(sh, sizeof(*sh));
	return rc;
}

static int run_mem(const struct lb_graph *lg)
{
	struct mg m;
	uint64_t t0 = gc_now_ns();
	int rc = mem_load(&m, lg);
	if (rc)
		return rc;
	fprintf(stderr, "in-memory: loaded in %.1f s\n",
	        (double)(gc_now_ns() - t0) / 1e9);
	static struct gd_result r;
	for (int mix = 0; mix < LB_NMIX && !rc; mix++) {
		if (!mix_on(mix))
			continue;
		struct peer_run pr = {.mix = (enum lb_mix)mix,
		                      .warm = O.warm,
		                      .secs = O.secs,
		                      .res = &r};
		rc = mem_run(&m, lg, &pr);
		from_result(&r, &R[SYS_MEM][mix][0]);
		R[SYS_MEM][mix][1] = R[SYS_MEM][mix][0];
		have[SYS_MEM][mix][0] = have[SYS_MEM][mix][1] = !rc;
	}
	for (uint64_t i = 0; i < m.cap; i++)
		if (m.tab[i]) {
			mg_free_lists(m.tab[i]);
			free(m.tab[i]);
		}
	free(m.tab);
	return rc;
}

static int run_redis(const struct lb_graph *lg)
{
	struct rds c;
	int rc = rds_start(&c);
	if (rc) {
		fprintf(stderr, "graph_bench: redis-server did not start: %s\n",
		        strerror(-rc));
		rds_stop(&c);
		return rc;
	}
	struct pprog p = {"redis load", gc_now_ns(), lg->nodes};
	rc = rds_load(&c, lg, peer_progress, &p);
	static struct gd_result r;
	/* Its best pipeline depth: the given one, or the faster of 32 and
	 * 128 (deeper helps LinkBench's mix on this host, not always Tao's). */
	const unsigned depths[] = {O.redis_depth ? O.redis_depth : 32, 128};
	unsigned nd = O.redis_depth ? 1 : 2;
	for (int mix = 0; mix < LB_NMIX && !rc; mix++)
		for (int one = 0; one < 2 && !rc; one++)
			for (unsigned d = 0;
			     d < (one ? 1 : nd) && !rc && mix_on(mix); d++) {
				struct peer_run pr = {.mix = (enum lb_mix)mix,
				                      .warm = O.warm,
				                      .secs = O.secs,
				                      .depth = one ? 1
				                                   : depths[d],
				                      .res = &r};
				rc = rds_run(&c, lg, &pr);
				struct gd_sum s;
				from_result(&r, &s);
				struct gd_sum *best = &R[SYS_REDIS][mix][one];
				if (!rc &&
				    (!have[SYS_REDIS][mix][one] ||
				     s.rate[FG_NOPS] > best->rate[FG_NOPS])) {
					*best = s;
					have[SYS_REDIS][mix][one] = true;
					if (!one)
						redis_best_depth[mix] =
						        depths[d];
				}
			}
	if (rc)
		fprintf(stderr, "graph_bench: redis: %s\n", strerror(-rc));
	rds_stop(&c);
	return rc;
}

static int run_maria(const struct lb_graph *lg)
{
	struct maria m;
	uint64_t pool = O.nodes / 1000 * 3 + 256;
	int rc = maria_start(&m, pool);
	if (rc) {
		maria_stop(&m);
		return rc;
	}
	struct pprog p = {"mariadb load", gc_now_ns(), lg->nodes};
	rc = maria_load(&m, lg, peer_progress, &p);
	static struct gd_result r;
	for (int mix = 0; mix < LB_NMIX && !rc; mix++)
		for (int one = 0; one < 2 && !rc; one++) {
			if ((O.demo && (mix || one)) || !mix_on(mix))
				continue;
			struct peer_run pr = {.mix = (enum lb_mix)mix,
			                      .warm = O.warm,
			                      .secs = O.secs,
			                      .depth = one ? 1 : O.maria_conns,
			                      .res = &r};
			rc = maria_run(&m, lg, &pr);
			from_result(&r, &R[SYS_MARIA][mix][one]);
			have[SYS_MARIA][mix][one] = !rc;
		}
	if (rc)
		fprintf(stderr, "graph_bench: mariadb failed\n");
	maria_stop(&m);
	return rc;
}

/* ---- report -------------------------------------------------------------- */

static double per_core(const struct gd_sum *s)
{
	return s->cores > 0.05 ? s->rate[FG_NOPS] / s->cores : 0;
}

static double lf_p50(const struct gd_sum *s)
{
	/* the largest p50 of the lock-free operations */
	double v = 0;
	const enum fg_op lf[] = {FG_OBJ_GET, FG_ASSOC_COUNT, FG_ASSOC_RANGE};
	for (int i = 0; i < 3; i++)
		v = s->p50[lf[i]] > v ? s->p50[lf[i]] : v;
	return v;
}

static void report(void)
{
	for (int mix = 0; mix < (O.demo ? 1 : LB_NMIX); mix++) {
		if (!mix_on(mix))
			continue;
		printf("\n== %s mix, %" PRIu64 " nodes ==\n",
		       lb_mix_name((enum lb_mix)mix), O.nodes);
		printf("%-22s %12s %7s %12s %10s %10s\n", "system", "ops/s",
		       "cores", "ops/s/core", "p50 us", "p99 us");
		for (int s = 0; s < NSYS; s++)
			for (int one = 0; one < 2; one++) {
				if (!have[s][mix][one] || (s == SYS_MEM && one))
					continue;
				const struct gd_sum *g = &R[s][mix][one];
				char name[40], best[24] = " (best)";
				if (s == SYS_REDIS)
					snprintf(best, sizeof(best),
					         " (best: %u deep)",
					         redis_best_depth[mix]);
				else if (s == SYS_FG)
					snprintf(best, sizeof(best),
					         " (best: %u deep)", O.depth);
				snprintf(name, sizeof(name), "%s%s",
				         sys_name[s],
				         s == SYS_MEM ? ""
				         : one        ? " (1 at a time)"
				                      : best);
				printf("%-22s %12.0f %7.2f %12.0f %10.2f "
				       "%10.2f\n",
				       name, g->rate[FG_NOPS], g->cores,
				       per_core(g), g->p50[FG_NOPS] / 1e3,
				       g->p99[FG_NOPS] / 1e3);
			}
		printf("per operation, best configurations: ops/s (p50 us)\n");
		printf("%-18s", "operation");
		for (int s = 0; s < NSYS; s++)
			printf(" %22s", sys_name[s]);
		printf("\n");
		for (unsigned k = 0; k < FG_NOPS; k++) {
			bool any = false;
			for (int s = 0; s < NSYS; s++)
				any |= have[s][mix][0] && R[s][mix][0].ops[k];
			if (!any)
				continue;
			printf("%-18s", fg_op_name((enum fg_op)k));
			for (int s = 0; s < NSYS; s++) {
				const struct gd_sum *g = &R[s][mix][0];
				if (!have[s][mix][0])
					printf(" %22s", "-");
				else
					printf(" %12.0f (%7.2f)", g->rate[k],
					       g->p50[k] / 1e3);
			}
			printf("\n");
		}
		if (have[SYS_FG][mix][0])
			printf("fgraph: %.3f lock-free reads per obj_get, "
			       "assoc_count, assoc_range (KV lookups counted "
			       "as one)\n",
			       R[SYS_FG][mix][0].lf_reads);
	}
}

static void plot(void)
{
	char dat[600];
	snprintf(dat, sizeof(dat), "%s.dat", O.plot);
	FILE *f = fopen(dat, "w");
	if (!f)
		return;
	fprintf(f, "# op fgraph in-memory redis mariadb (ops/s, Tao mix)\n");
	const enum fg_op ops[] = {FG_ASSOC_RANGE, FG_OBJ_GET, FG_ASSOC_GET,
	                          FG_ASSOC_COUNT, FG_ASSOC_TIME_RANGE};
	for (int i = 0; i < 5; i++) {
		fprintf(f, "%s", fg_op_name(ops[i]));
		for (int s = 0; s < NSYS; s++)
			fprintf(f, " %.0f",
			        have[s][LB_TAO][0]
			                ? R[s][LB_TAO][0].rate[ops[i]]
			                : 0.0);
		fprintf(f, "\n");
	}
	fclose(f);
	char cmd[2000];
	snprintf(cmd, sizeof(cmd),
	         "gnuplot -e \"set terminal png size 900,500 noenhanced; set "
	         "output "
	         "'%s'; set style data histograms; set style fill solid; "
	         "set logscale y; set ylabel 'operations/s (Tao mix, %" PRIu64
	         " nodes)'; set key top right; plot '%s' using 2:xtic(1) "
	         "title 'fgraph', '' using 3 title 'in-memory', '' using 4 "
	         "title 'redis', '' using 5 title 'mariadb'\"",
	         O.plot, O.nodes, dat);
	if (system(cmd))
		fprintf(stderr, "graph_bench: gnuplot failed\n");
	unlink(dat);
}

static void goal(bool *first, const char *name, double v, double target,
                 bool met)
{
	printf("%s\"%s\": {\"value\": %.4g, \"target\": %g, \"met\": %s}",
	       *first ? "" : ", ", name, v, target, met ? "true" : "false");
	*first = false;
}

static void json(void)
{
	const struct gd_sum *ft = &R[SYS_FG][LB_TAO][0],
	                    *f1 = &R[SYS_FG][LB_TAO][1],
	                    *fl = &R[SYS_FG][LB_LINKBENCH][0];
	double best_tao = 0, best_lb = 0;
	for (int s = SYS_REDIS; s < NSYS; s++)
		for (int one = 0; one < 2; one++) {
			if (have[s][LB_TAO][one] &&
			    per_core(&R[s][LB_TAO][one]) > best_tao)
				best_tao = per_core(&R[s][LB_TAO][one]);
			if (have[s][LB_LINKBENCH][one] &&
			    per_core(&R[s][LB_LINKBENCH][one]) > best_lb)
				best_lb = per_core(&R[s][LB_LINKBENCH][one]);
		}
	double rt = best_tao > 0 ? per_core(ft) / best_tao : 0;
	double rl = best_lb > 0 ? per_core(fl) / best_lb : 0;
	double mem = R[SYS_MEM][LB_TAO][0].rate[FG_NOPS];
	double vm = mem > 0 ? ft->rate[FG_NOPS] / mem : 0;
	printf("{\"bench\": \"graph_bench\", \"nodes\": %" PRIu64
	       ", \"fgraph_tao_ops\": %.0f, \"fgraph_tao_ops_per_core\": %.0f, "
	       "\"fgraph_linkbench_ops\": %.0f, \"inmem_tao_ops\": %.0f, "
	       "\"best_peer_tao_ops_per_core\": %.0f, "
	       "\"best_peer_linkbench_ops_per_core\": %.0f, \"goals\": {",
	       O.nodes, ft->rate[FG_NOPS], per_core(ft), fl->rate[FG_NOPS], mem,
	       best_tao, best_lb);
	bool first = true;
	goal(&first, "tao_reads_per_lockfree_op", ft->lf_reads, 1.02,
	     ft->lf_reads > 0 && ft->lf_reads <= 1.02);
	goal(&first, "tao_per_core_vs_best_peer", rt, 10, rt >= 10);
	goal(&first, "tao_lockfree_p50_us_one_at_a_time", lf_p50(f1) / 1e3, 2,
	     lf_p50(f1) > 0 && lf_p50(f1) < 2000);
	goal(&first, "tao_vs_inmemory", vm, 0.5, vm >= 0.5);
	goal(&first, "linkbench_per_core_vs_best_peer", rl, 3, rl >= 3);
	printf("}}\n");
}

static uint64_t count_arg(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (*end == 'k')
		v *= 1e3;
	else if (*end == 'M')
		v *= 1e6;
	return v >= 1 ? (uint64_t)v : 0;
}

/*
 * make demo's verdict: the demo exists to show fgraph next to MariaDB, so
 * without MariaDB's figures it failed, and says why. Returns main's exit
 * status.
 */
static int demo_verdict(int maria_rc)
{
	report();
	double f = R[SYS_FG][LB_TAO][0].rate[FG_NOPS],
	       m = R[SYS_MARIA][LB_TAO][0].rate[FG_NOPS];
	if (maria_rc || !have[SYS_MARIA][LB_TAO][0] || !(m > 0)) {
		fprintf(stderr,
		        "graph_bench: demo failed: MariaDB left out (%s)\n",
		        maria_rc ? strerror(-maria_rc)
		                 : "it ran no operations");
		return 1;
	}
	printf("demo: done: fgraph %.0f ops/s, %.1fx MariaDB's "
	       "%.0f ops/s (Tao mix, %" PRIu64 " nodes, 10 s)\n",
	       f, f / m, m, O.nodes);
	return 0;
}

/* One option (getopt's @c, @arg) into O: 0, 1 (--help), -1 (unknown). */
static int take_option(int c, const char *arg)
{
	switch (c) {
	case 'n': O.nodes = count_arg(arg); break;
	case 't': O.secs = strtod(arg, NULL); break;
	case 'w': O.warm = strtod(arg, NULL); break;
	case 'd': O.depth = (unsigned)strtoul(arg, NULL, 0); break;
	case 'r': O.redis_depth = (unsigned)strtoul(arg, NULL, 0); break;
	case 'c': O.maria_conns = (unsigned)strtoul(arg, NULL, 0); break;
	case 'p': O.replicas = (unsigned)strtoul(arg, NULL, 0); break;
	case 'k': O.park_after = atoi(arg); break;
	case 'R': O.no_redis = true; break;
	case 'M': O.no_maria = true; break;
	case 'x':
		O.mix = !strcmp(arg, "tao")         ? LB_TAO
		        : !strcmp(arg, "linkbench") ? LB_LINKBENCH
		                                    : -2;
		break;
	case 'q': O.quick = true; break;
	case 'P': O.plot = arg; break;
	case 's': O.seed = strtoull(arg, NULL, 0); break;
	case 'D': O.demo = true; break;
	case 'v': O.verbose = true; break;
	case 'z': gc_o.zk = arg; break;
	case 'h': return 1;
	default: return -1;
	}
	return 0;
}

/* The command line into O, --demo's and --quick's settings over it: 0,
 * 1 (--help printed), 2 (usage printed to stderr). */
static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"nodes", required_argument, 0, 'n'},
	        {"seconds", required_argument, 0, 't'},
	        {"warm", required_argument, 0, 'w'},
	        {"depth", required_argument, 0, 'd'},
	        {"redis-depth", required_argument, 0, 'r'},
	        {"maria-conns", required_argument, 0, 'c'},
	        {"replicas", required_argument, 0, 'p'},
	        {"park-after", required_argument, 0, 'k'},
	        {"no-redis", no_argument, 0, 'R'},
	        {"no-maria", no_argument, 0, 'M'},
	        {"mix", required_argument, 0, 'x'},
	        {"quick", no_argument, 0, 'q'},
	        {"plot", required_argument, 0, 'P'},
	        {"seed", required_argument, 0, 's'},
	        {"verbose", no_argument, 0, 'v'},
	        {"demo", no_argument, 0, 'D'},
	        {"zk", required_argument, 0, 'z'},
	        {"help", no_argument, 0, 'h'},
	        {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int st = take_option(c, optarg);
		if (st == 1) {
			fputs(usage, stdout);
			return 1;
		}
		if (st) {
			fputs(usage, stderr);
			return 2;
		}
	}
	if (O.demo) {
		O.nodes = 20000;
		O.secs = 10;
		O.warm = 1;
		O.no_redis = true;
		O.mix = LB_TAO;
	}
	if (O.quick) {
		O.nodes = 100000;
		O.secs = 1;
		O.warm = 0.5;
	}
	if (!O.nodes || O.mix < -1 || O.secs <= 0 || !O.depth ||
	    O.depth > 1024 || O.redis_depth > 4096 || O.park_after < 0 ||
	    O.park_after > 1000000 || !O.maria_conns || O.maria_conns > 64) {
		fputs(usage, stderr);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int st = parse_args(argc, argv);
	if (st)
		return st == 1 ? 0 : 2;
	signal(SIGPIPE, SIG_IGN);
	struct lb_graph lg;
	lb_init(&lg, O.nodes, O.seed);
	uint64_t t0 = gc_now_ns();
	int rc = run_fgraph();
	if (rc)
		return 1;
	if (!O.demo && run_mem(&lg))
		fprintf(stderr, "graph_bench: the in-memory run failed\n");
	if (!O.no_redis && run_redis(&lg))
		fprintf(stderr, "graph_bench: Redis left out\n");
	int maria_rc = O.no_maria ? 0 : run_maria(&lg);
	if (maria_rc)
		fprintf(stderr, "graph_bench: MariaDB left out: %s\n",
		        strerror(-maria_rc));
	if (O.demo)
		return demo_verdict(maria_rc);
	report();
	if (O.plot)
		plot();
	printf("(%.0f s in all)\n", (double)(gc_now_ns() - t0) / 1e9);
	json();
	return 0;
}
