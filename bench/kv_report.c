/*
 * kv_bench: the results, the human summary and the JSON line (kv_bench.h;
 * what is measured: kv_bench.c's head).
 */
#include "kv_bench.h"

#include "benchreport.h"

const struct results *g_pages_res[2];

/* The farm's uniform C lookups per CPU-second that the limit is judged
 * against in @r: the turns' (kb_run_limit), else the workload's run. */
static double limit_farm(const struct results *r)
{
	const struct fig *fw = &r->farm[W_C];
	if (r->limit_farm_cpu > 0)
		return r->limit_farm_cpu;
	return fw->cores > 0 ? fw->keys / fw->cores : 0;
}

void kb_jfig(const char *name, const struct fig *f, bool ycsb, bool comma)
{
	if (!f->have) {
		printf("\"%s\": null%s", name, comma ? ", " : "");
		return;
	}
	printf("\"%s\": {\"ops\": %.0f, \"keys\": %.0f, \"gets\": %.0f, "
	       "\"puts\": %.0f, \"keys_per_core\": %.0f, \"p50_ns\": %.0f, "
	       "\"p99_ns\": %.0f",
	       name, f->ops, f->keys, f->gets, f->puts, f->keys / g_res.cores,
	       f->p50_ns, f->p99_ns);
	if (ycsb)
		printf(", \"inserts\": %.0f, \"scans\": %.0f, \"scan_pairs\": "
		       "%.0f, \"rmws\": %.0f, \"notfound\": %" PRIu64,
		       f->inserts, f->scans, f->scan_pairs, f->rmws,
		       f->notfound);
	printf("}%s", comma ? ", " : "");
}

void kb_jgoal(const char *name, double v, bool have, double target, bool met,
              const char *cmp, bool comma)
{
	static const struct br_style style = {{'g', 4}, {'g', 4}, false};
	/* Judged on g_res: the 2 MiB pages' figures when measured. */
	struct br_goal g = {name,   have ? v : NAN,
	                    target, have && met,
	                    cmp,    g_res.pages ? bp_key(g_res.pages) : NULL};
	br_goal(stdout, &style, &g, comma);
}

/* The comparison over ofi: lookups per measured CPU core against
 * memcached's best configuration per measured server core, unloaded
 * lookup p50 against memcached's unloaded GET p50. */
struct net_goals {
	double farm_pc, mc_pc, x, mc_cores, mc_client_cores;
	double farm_p50, mc_p50; /* us */
	const char *mc_mode;
};

static struct net_goals net_goals(void)
{
	struct net_goals g = {.mc_mode = "none"};
	const struct fig *f = &g_res.farm[W_C];
	if (f->have && f->cores > 0)
		g.farm_pc = f->keys / f->cores;
	for (int m = 0; m < NMODE && g_res.peer_ok[P_MC]; m++) {
		const struct fig *p = &g_res.peer[P_MC][m][W_C];
		/* At least a hundredth of a core: schedstat's resolution is
		 * exact, but a run must have run. */
		double pc = p->have && p->cores > 0.01 ? p->keys / p->cores : 0;
		if (pc > g.mc_pc) {
			g.mc_pc = pc;
			g.mc_cores = p->cores;
			g.mc_client_cores = p->client_cores;
			g.mc_mode = mname[m];
		}
	}
	g.x = g.mc_pc > 0 ? g.farm_pc / g.mc_pc : 0;
	/* Against memcached, whose every GET crosses the link: the lookups
	 * that cross it too. */
	g.farm_p50 =
	        (g_res.lat1o.have ? g_res.lat1o.p50_ns : g_res.lat1.p50_ns) /
	        1e3;
	g.mc_p50 = g_res.peer_lat1[P_MC].have
	                   ? g_res.peer_lat1[P_MC].p50_ns / 1e3
	                   : 0;
	return g;
}

static void print_net(const struct net_goals *g)
{
	printf("\n%s (%s): uniform C %.3f M lookups/s on %.2f measured "
	       "cores (every machine process, progress threads included) = "
	       "%.0f lookups/s per core\n",
	       g_opt.net.fabric, bnet_network(&g_opt.net),
	       g_res.farm[W_C].keys / 1e6, g_res.farm[W_C].cores, g->farm_pc);
	printf("memcached best (%s): %.0f GETs/s per server core (%.2f "
	       "server cores, %.2f client cores)\n",
	       g->mc_mode, g->mc_pc, g->mc_cores, g->mc_client_cores);
	printf("per core: farm/memcached %.3f (goal >= 2); unloaded p50: farm "
	       "lookup of another machine's key %.1f us (every key %.1f us), "
	       "memcached GET %.1f us (goal: farm's under)\n",
	       g->x, g->farm_p50, g_res.lat1.p50_ns / 1e3, g->mc_p50);
}

/* The JSON line's end over ofi: the measured cores, the peers' unloaded
 * GETs and the goals across hosts (across namespaces; on loopback they are
 * reported, never met). */
static void print_net_json(const struct net_goals *ng)
{
	printf("}, \"measured_cores\": {\"farm_uniform_c\": %.3f, "
	       "\"farm_unloaded_lookup\": %.3f, "
	       "\"memcached_best_server\": %.3f, "
	       "\"memcached_best_client\": %.3f}, "
	       "\"per_core\": {\"farm_uniform_c\": %.0f, "
	       "\"memcached_best\": %.0f, \"memcached_best_mode\": "
	       "\"%s\"}, ",
	       g_res.farm[W_C].cores, g_res.lat1.cores, ng->mc_cores,
	       ng->mc_client_cores, ng->farm_pc, ng->mc_pc, ng->mc_mode);
	kb_jfig("memcached_unloaded_get", &g_res.peer_lat1[P_MC], false, true);
	kb_jfig("redis_unloaded_get", &g_res.peer_lat1[P_REDIS], false, false);
	printf(", \"goals\": {");
	kb_jgoal("netns_lookups_per_core_vs_memcached_best", ng->x,
	         ng->mc_pc > 0 && ng->farm_pc > 0, 2.0,
	         g_opt.net.netns && ng->x >= 2.0, ">=", true);
	kb_jgoal("netns_lookup_p50_us_vs_memcached_p50_us", ng->farm_p50,
	         g_res.lat1.have && ng->mc_p50 > 0,
	         ng->mc_p50 > 0 ? ng->mc_p50 : 0,
	         g_opt.net.netns && g_res.lat1.have && ng->mc_p50 > 0 &&
	                 ng->farm_p50 < ng->mc_p50,
	         "<", false);
	printf("}}\n");
	fflush(stdout);
}

/* The default run's summary lines. */
static void print_summary(double farm_c, double lat_us, const char *best_name,
                          double best_peer, double vs_peer)
{
	printf("\nfarm: %u machine threads on %d cores; lookups/s per core "
	       "(uniform C) %.3f M\n",
	       g_opt.machines, g_res.cores, farm_c / 1e6);
	printf("unloaded lookup latency p50 %.2f us, p99 %.2f us (1 in flight; "
	       "under load, %u in flight: p50 %.1f us)\n",
	       lat_us, g_res.lat1.p99_ns / 1e3, g_opt.depth,
	       g_res.farm[W_C].p50_ns / 1e3);
	printf("limit loop (same table, one thread): %.3f M/s with %u in "
	       "flight, %.3f M/s with %u, %.3f M/s one at a time (wall clock); "
	       "farm per core / limit(%u) %.3f (the goal, %.1f, is per "
	       "CPU-second, below)\n",
	       g_res.limit_plain / 1e6, PLAIN_BATCH, g_res.limit_depth / 1e6,
	       g_opt.depth, g_res.limit_one / 1e6, g_opt.depth,
	       g_res.limit_depth > 0 ? farm_c / g_res.limit_depth : 0,
	       GOAL_VS_LIMIT);
	/* Under other load the wall-clock figures measure time slices:
	 * the same ratio per second of CPU the machines and the loop had. */
	double farm_cpu = limit_farm(&g_res);
	printf("per CPU-second%s: farm %.3f M lookups (the machines' CPU "
	       "time), limit(%u) %.3f M (the loop's); farm / limit %.3f (goal "
	       ">= %.1f)\n",
	       g_res.limit_farm_cpu > 0 ? ", in turns" : "", farm_cpu / 1e6,
	       g_opt.depth, g_res.limit_depth_cpu / 1e6,
	       g_res.limit_depth_cpu > 0 ? farm_cpu / g_res.limit_depth_cpu : 0,
	       GOAL_VS_LIMIT);
	printf("best peer: %s, %.3f M GETs/s per server core; farm/peer "
	       "%.2fx\n",
	       best_name, best_peer / 1e6, vs_peer);
}

/* The table: each workload's rate per core and latency, and the peers'. */
static void print_table(double cores)
{
	printf("\n%-20s | %12s %8s %8s | %26s | %26s\n", "workload",
	       "farm keys/s", "p50 us", "p99 us", "memcached pipe / single",
	       "redis pipe / single");
	printf("%-20s | %12s %8s %8s | %26s | %26s\n", "", "per core", "", "",
	       "keys/s (all threads)", "keys/s (all threads)");
	for (int w = 0; w < NW; w++) {
		const struct fig *f = &g_res.farm[w];
		if (!kb_runs(w, false))
			continue;
		printf("%-20s | %10.3f M %8.1f %8.1f |", g_wdesc[w].name,
		       f->keys / cores / 1e6, f->p50_ns / 1e3, f->p99_ns / 1e3);
		for (int p = 0; p < NPEER; p++) {
			if (!kb_runs(w, true) || !g_res.peer_ok[p])
				printf(" %26s |", "-");
			else
				printf("   %9.3f M / %9.3f M |",
				       g_res.peer[p][M_PIPE][w].keys / 1e6,
				       g_res.peer[p][M_SINGLE][w].keys / 1e6);
		}
		printf("\n");
	}
}

/* The best peer's rate of uniform C GETs (one server core) and its name. */
static double best_peer_c(const char **name)
{
	double best_peer = 0;
	*name = "none";
	for (int p = 0; p < NPEER; p++)
		for (int m = 0; m < NMODE; m++)
			if (g_res.peer_ok[p] &&
			    g_res.peer[p][m][W_C].gets > best_peer) {
				best_peer = g_res.peer[p][m][W_C]
				                    .gets; /* 1 server core */
				*name = p == P_MC ? (m ? "memcached single"
				                       : "memcached pipelined")
				                  : (m ? "redis single"
				                       : "redis pipelined");
			}
	return best_peer;
}

/* The JSON line's `limit` object (after `small`). */
static void jlimit(void)
{
	printf("}, \"limit\": {\"table_bytes\": %" PRIu64
	       ", \"span_bytes\": %u, \"per_s_%u_in_flight\": %.0f, "
	       "\"per_s_depth\": %.0f, \"per_s_one\": %.0f, "
	       "\"per_cpu_s_depth\": %.0f, \"farm_uniform_c_per_cpu_s\": "
	       "%.0f, \"per_cpu_s_16_in_flight\": %.0f, \"in_turns\": %s",
	       g_res.limit_bytes, g_res.limit_span, PLAIN_BATCH,
	       g_res.limit_plain, g_res.limit_depth, g_res.limit_one,
	       g_res.limit_depth_cpu, limit_farm(&g_res), g_res.limit_plain_cpu,
	       g_res.limit_farm_cpu > 0 ? "true" : "false");
}

/* The goal against the limit, last in `goals`. */
static void jlimit_goals(void)
{
	/* Per second of CPU time on both sides, taken in turns
	 * (kb_run_limit): the machines' CPU time is two cores', the loop's
	 * one core's, and the host's other load takes from either. */
	double farm_cpu = limit_farm(&g_res);
	double vs_lim = g_res.limit_depth_cpu > 0
	                        ? farm_cpu / g_res.limit_depth_cpu
	                        : 0;
	kb_jgoal("kv_lookups_vs_limit", vs_lim,
	         g_res.limit_depth_cpu > 0 && farm_cpu > 0, GOAL_VS_LIMIT,
	         vs_lim >= GOAL_VS_LIMIT, ">=", false);
}

/* Farm lookups per CPU-second of uniform C over the limit's (with
 * @depth in flight) in @r, or 0. */
static double vs_limit(const struct results *r)
{
	double farm_cpu = limit_farm(r);
	return r->limit_depth_cpu > 0 ? farm_cpu / r->limit_depth_cpu : 0;
}

/* With both page sizes: the farm's figures side by side. */
static void print_pages(void)
{
	if (!g_pages_res[0] || !g_pages_res[1])
		return;
	const struct results *r[2] = {g_pages_res[0], g_pages_res[1]};
	printf("\npages: farm keys/s per core, %s | %s (2 MiB entries: "
	       "machines %.0f%% | %.0f%%, limit table %.0f%% | %.0f%%)\n",
	       bp_words(r[0]->pages), bp_words(r[1]->pages),
	       100 * BU_MAX(bp_huge_share(&r[0]->huge), 0.0),
	       100 * BU_MAX(bp_huge_share(&r[1]->huge), 0.0),
	       100 * BU_MAX(bp_huge_share(&r[0]->limit_huge), 0.0),
	       100 * BU_MAX(bp_huge_share(&r[1]->limit_huge), 0.0));
	for (int w = 0; w < NW; w++)
		if (kb_runs(w, false))
			printf("  %-20s %9.3f M | %9.3f M\n", g_wdesc[w].name,
			       r[0]->farm[w].keys / g_res.cores / 1e6,
			       r[1]->farm[w].keys / g_res.cores / 1e6);
	printf("  %-20s %9.2f us | %9.2f us\n", "unloaded p50",
	       r[0]->lat1.p50_ns / 1e3, r[1]->lat1.p50_ns / 1e3);
	printf("  %-20s %9.3f M | %9.3f M\n", "limit per CPU-s",
	       r[0]->limit_depth_cpu / 1e6, r[1]->limit_depth_cpu / 1e6);
	printf("  %-20s %9.3f   | %9.3f\n", "farm / limit", vs_limit(r[0]),
	       vs_limit(r[1]));
}

/* The JSON line's page members: which pages the figures (and the goals)
 * are of, what smaps showed, and with both page sizes each one's farm
 * figures, suffixed _4k and _2m. */
static void jpages(void)
{
	if (!g_res.pages)
		return;
	printf("\"pages\": \"%s\", ", bp_key(g_res.pages));
	const struct results *only[2] = {&g_res, NULL};
	const struct results *const *r = g_pages_res[1] ? g_pages_res : only;
	for (int i = 0; i < 2 && r[i]; i++) {
		const char *k = bp_key(r[i]->pages);
		printf("\"huge_share_%s\": %.3f, \"limit_huge_share_%s\": "
		       "%.3f, ",
		       k, bp_huge_share(&r[i]->huge), k,
		       bp_huge_share(&r[i]->limit_huge));
		if (!g_pages_res[1])
			continue;
		printf("\"farm_%s\": {", k);
		for (int w = 0; w < NW; w++)
			if (kb_runs(w, false))
				kb_jfig(g_wdesc[w].key, &r[i]->farm[w],
				        w >= W_YA, true);
		kb_jfig("unloaded_lookup", &r[i]->lat1, false, false);
		printf("}, \"limit_per_cpu_s_depth_%s\": %.0f, "
		       "\"kv_lookups_vs_limit_%s\": %.4f, ",
		       k, r[i]->limit_depth_cpu, k, vs_limit(r[i]));
	}
}

/* The JSON line's head: the run's parameters, up to "farm". */
static void jhead(double rpl)
{
	printf("{\"bench\": \"kv_bench\", \"provider\": \"%s\", "
	       "\"lookup\": \"%s\", "
	       "\"network\": \"%s\", \"machines\": %u, "
	       "\"threads_per_machine\": 1, \"cores\": %d, \"busy_poll\": "
	       "true, "
	       "\"pinned\": %s, \"gets\": \"%s\", \"keys\": %" PRIu64
	       ", \"key_bytes\": %u, "
	       "\"value_bytes\": %u, \"key_inline\": %u, \"value_inline\": "
	       "%u, \"zipf_theta\": %.3g, \"mix\": ",
	       g_opt.net.fabric, g_opt.lookup[0] ? g_opt.lookup : "auto",
	       bnet_network(&g_opt.net), g_opt.machines, g_res.cores,
	       g_opt.pin ? "true" : "false",
	       g_opt.single_gets ? "single" : "window", g_opt.keys, g_opt.ksize,
	       g_opt.vsize, kb_key_inline(), kb_val_inline(), g_opt.theta);
	if (g_opt.any_mix) {
		printf("\"");
		for (int w = W_YA; w <= W_YF; w++)
			if (g_opt.mix[w])
				printf("%c", 'A' + (w - W_YA));
		printf("\"");
	} else {
		printf("null");
	}
	printf(", \"occupancy\": %.2f, \"depth\": %u, \"log_size\": %" PRIu64
	       ", \"seconds\": %.3g, \"sample_every\": %u, \"load_s\": %.2f, "
	       "\"load_puts_per_s\": %.0f, \"reads_per_lookup\": %.4f, ",
	       g_opt.occupancy, g_opt.depth, g_opt.log_size, g_opt.seconds,
	       g_opt.sample_every, g_res.load_s, g_res.load_rate, rpl);
	jpages();
	printf("\"farm\": {");
}

/* The JSON line's "peers" object. */
static void jpeers(void)
{
	/* Each pipelined run just after the farm's of the same workload
	 * (kv_bench.c's run_rounds). */
	printf("}, \"peers\": {\"pipelined_after_farm_each\": true, ");
	for (int p = 0; p < NPEER; p++) {
		printf("\"%s\": {\"ok\": %s, \"server_cores\": 1, \"load_s\": "
		       "%.2f",
		       pname[p], g_res.peer_ok[p] ? "true" : "false",
		       g_res.peer_load_s[p]);
		for (int m = 0; m < NMODE; m++) {
			printf(", \"%s\": {", mname[m]);
			bool first = true;
			for (int w = 0; w < NW; w++) {
				if (!kb_runs(w, true))
					continue;
				printf("%s", first ? "" : ", ");
				kb_jfig(g_wdesc[w].key, &g_res.peer[p][m][w],
				        w >= W_YA, false);
				first = false;
			}
			printf("}");
		}
		printf("}%s", p + 1 < NPEER ? ", " : "");
	}
}

/* Each workload's farm per core against the best peer's rate. */
static void jratios_per_workload(double cores)
{
	for (int w = 0; w < NW; w++) {
		const struct fig *f = &g_res.farm[w];
		if (!kb_runs(w, true))
			continue;
		double bp = 0;
		for (int p = 0; p < NPEER; p++)
			for (int m = 0; m < NMODE; m++)
				if (g_res.peer_ok[p])
					bp = BU_MAX(bp,
					            g_res.peer[p][m][w].keys);
		printf(", \"%s_farm_per_core_vs_best_peer\": %.3f",
		       g_wdesc[w].key, bp > 0 ? f->keys / cores / bp : 0);
	}
}

/* The summary's figures the JSON line repeats. */
struct summary {
	double cores, farm_c, best_peer, vs_peer, lat_us, scale, rpl;
	const char *best_name;
	bool have_small;
};

/* The JSON line's "goals" (on shm). */
static void jgoals(const struct summary *m)
{
	printf("}, \"goals\": {");
	kb_jgoal("lookups_per_s_per_core", m->farm_c, g_res.farm[W_C].have,
	         GOAL_RATE, m->farm_c >= GOAL_RATE, ">=", true);
	kb_jgoal("vs_best_peer_per_server_core", m->vs_peer, m->best_peer > 0,
	         GOAL_PEER_X, m->vs_peer >= GOAL_PEER_X, ">=", true);
	kb_jgoal("lookup_p50_us", m->lat_us, g_res.lat1.have, GOAL_P50_US,
	         m->lat_us < GOAL_P50_US, "<", true);
	kb_jgoal("n_keys_vs_1m_keys", m->scale, m->have_small, 1.0 - GOAL_SCALE,
	         m->scale >= 1.0 - GOAL_SCALE, ">=", true);
	jlimit_goals();
	printf("}}\n");
	fflush(stdout);
}

/* The JSON line, last. */
static void print_json(const struct summary *m, const struct net_goals *ng)
{
	jhead(m->rpl);
	for (int w = 0; w < NW; w++)
		if (kb_runs(w, false))
			kb_jfig(g_wdesc[w].key, &g_res.farm[w], w >= W_YA,
			        true);
	kb_jfig("unloaded_lookup", &g_res.lat1, false, true);
	kb_jfig("unloaded_lookup_other_shards", &g_res.lat1o, false, false);
	printf("}, \"small\": {\"keys\": %" PRIu64 ", ", g_res.small_keys);
	kb_jfig("uniform_c", &g_res.small_c, false, true);
	kb_jfig("zipf_c", &g_res.small_zc, false, false);
	jlimit();
	jpeers();
	printf("}, \"ratios\": "
	       "{\"farm_per_core_vs_best_peer_per_server_core\": "
	       "%.3f, \"best_peer\": \"%s\", \"n_vs_small\": %.3f",
	       m->vs_peer, m->best_name, m->scale);
	jratios_per_workload(m->cores);
	if (!bnet_shm(&g_opt.net))
		print_net_json(ng);
	else
		jgoals(m);
}

void print_all(void)
{
	struct summary m = {.cores = g_res.cores};
	print_table(m.cores);
	m.farm_c = g_res.farm[W_C].keys / m.cores;
	m.best_peer = best_peer_c(&m.best_name);
	m.vs_peer = m.best_peer > 0 ? m.farm_c / m.best_peer : 0;
	m.lat_us = g_res.lat1.p50_ns / 1e3;
	m.have_small = g_res.small_c.have;
	m.scale = m.have_small && g_res.small_c.keys > 0
	                  ? g_res.farm[W_C].keys / g_res.small_c.keys
	                  : 0;
	if (g_opt.any_mix)
		printf("\n--mix: the default workloads, the unloaded latency "
		       "and the limit were not run: their goals report "
		       "null\n");
	else
		print_summary(m.farm_c, m.lat_us, m.best_name, m.best_peer,
		              m.vs_peer);
	if (m.have_small)
		printf("at %" PRIu64 " keys: %.3f M keys/s per core; %" PRIu64
		       " keys / %" PRIu64 " keys = %.3f\n",
		       g_res.small_keys, g_res.small_c.keys / m.cores / 1e6,
		       g_opt.keys, g_res.small_keys, m.scale);
	m.rpl = g_res.hst.lookups
	                ? (double)g_res.hst.lookup_reads / g_res.hst.lookups
	                : 0;
	printf("table: %.4f reads per lookup, %" PRIu64 " retries, %" PRIu64
	       " hops, %" PRIu64 " chain appends, %" PRIu64
	       " combined transactions for %" PRIu64 " puts\n",
	       m.rpl, g_res.hst.lookup_retries, g_res.hst.hops,
	       g_res.hst.chain_appends, g_res.hst.combined_txns,
	       g_res.hst.puts);
	print_pages();
	printf("total %.1f s\n", g_res.total_s);
	struct net_goals ng = net_goals();
	if (!bnet_shm(&g_opt.net))
		print_net(&ng);
	print_json(&m, &ng);
}

/* The demo's summary: farm's YCSB-B next to memcached's (pipelined). */
void print_demo(bool mc_skipped)
{
	const struct fig *f = &g_res.farm[W_B];
	const struct fig *m = &g_res.peer[P_MC][M_PIPE][W_B];
	printf("\n== summary: YCSB-B (95%% lookups, 5%% updates, uniform "
	       "keys), "
	       "%" PRIu64 " keys, %.0f s each, %d CPU%s\n",
	       g_opt.keys, g_opt.seconds, g_res.ncpu,
	       g_res.ncpu == 1 ? "" : "s");
	printf("  %-24s %12s %16s %10s %10s\n", "", "ops/s", "ops/s per core",
	       "p50", "p99");
	printf("  %-24s %10.2f M %14.2f M %7.1f us %7.1f us   (per lookup)\n",
	       "libfarm (3 machines)", f->ops / 1e6,
	       f->keys / g_res.cores / 1e6, f->p50_ns / 1e3, f->p99_ns / 1e3);
	if (g_res.peer_ok[P_MC] && m->have) {
		printf("  %-24s %10.2f M %14.2f M %7.1f us %7.1f us   (per "
		       "batch of %u requests)\n",
		       "memcached (pipelined)", m->ops / 1e6, m->ops / 1e6,
		       m->p50_ns / 1e3, m->p99_ns / 1e3, g_opt.depth);
		printf("  (per core: libfarm over the %d cores its %u machines "
		       "share; memcached over its one server thread, -t 1)\n",
		       g_res.cores, g_opt.machines);
		printf("demo: done: libfarm %.2f M ops/s, %.1fx memcached's "
		       "%.2f M (%.1fx per core); everything stopped\n",
		       f->ops / 1e6, m->ops > 0 ? f->ops / m->ops : 0,
		       m->ops / 1e6,
		       m->ops > 0 ? (f->keys / g_res.cores) / m->ops : 0);
	} else {
		printf("  %-24s %s\n", "memcached (pipelined)",
		       mc_skipped ? "skipped: memcached is not installed"
		                  : "skipped: memcached could not be run");
		printf("demo: done: libfarm %.2f M ops/s (memcached skipped); "
		       "everything stopped\n",
		       f->ops / 1e6);
	}
	fflush(stdout);
}
