/*
 * workload_bench: TATP, SmallBank and TPC-C on libfarm (local cluster, 3
 * replicas) against PostgreSQL (a private server on tmpfs, its better client
 * count and synchronous_commit setting) and the in-memory limit (one thread,
 * plain hash tables), per core; and, when ZooKeeper is there
 * (scripts/zk-local), TATP's throughput per millisecond across a killed
 * machine (a gnuplot PNG). A human summary, then one JSON line with the
 * goals (null where nothing was measured). libfarm runs with 1 and 2
 * client threads a machine (SmallBank also with 2 and several
 * transactions in flight on each) and reports the best, as PostgreSQL is
 * reported at its best client count. With no arguments it finishes in
 * about two to three minutes (134 s measured on a loaded 2-core host).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl.h"
#include "wl_peers.h"

static struct {
	double seconds;
	uint64_t tatp_scale, bank_scale, tpcc_scale;
	bool pg, timeline, timeline_only;
	const char *out, *scripts;
	unsigned machines, max_threads, lease_ms, bank_window, ship_window;
} a = {2.0, 2000, 5000, 3, true, true, false, ".", NULL, 3, 2, 200, 16, 8};

static uint64_t scale_of(enum wl_kind kind)
{
	return kind == WL_TATP   ? a.tatp_scale
	       : kind == WL_BANK ? a.bank_scale
	                         : a.tpcc_scale;
}

static const char *kind_name(enum wl_kind kind)
{
	return kind == WL_TATP   ? "TATP"
	       : kind == WL_BANK ? "SmallBank"
	                         : "TPC-C";
}

/* SIGINT/SIGTERM: the phase under way ends (wl_run kills its machines
 * and removes their directory, then raises the signal again here), and
 * no other starts; what was started (PostgreSQL, ZooKeeper) is stopped
 * and removed before the exit. */
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = sig;
}

static unsigned ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

/* libfarm on a local cluster: the figures of one run with @threads
 * clients a machine, each with @window transactions in flight
 * (SmallBank) or shipped updates in flight (TATP); 1 for TPC-C. */
static int farm_run_one(enum wl_kind kind, bool part, unsigned threads,
                        unsigned window, struct wl_bres *b)
{
	if (stop)
		return -EINTR;
	struct wl_opts o;
	wl_opts_default(&o, kind);
	o.machines = a.machines;
	o.threads = threads;
	o.scale = scale_of(kind);
	o.duration_ms = (uint64_t)(a.seconds * 1000);
	o.partitioned = part;
	o.region_size = "256M";
	if (kind == WL_TATP)
		o.ship_window = window;
	else
		o.bank_window = window;
	struct wl_result *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	int rc = wl_run(&o, r);
	if (rc || r->check) {
		fprintf(stderr, "workload_bench: libfarm %s: %s\n",
		        kind_name(kind), r->msg);
		free(r);
		return rc ? rc : -EIO;
	}
	uint64_t n = 0;
	for (int t = 0; t < WT_NTYPES; t++)
		n += r->commits[t];
	unsigned c = o.machines * o.threads;
	*b = (struct wl_bres){
	        .tput = n / r->seconds,
	        .new_orders = (double)(r->commits[WT_NEW_ORDER] -
	                               r->fails[WT_NEW_ORDER]) /
	                      r->seconds,
	        .p50 = wl_hist_pct(r->hist, 0.5),
	        .p99 = wl_hist_pct(r->hist, 0.99),
	        .abort_pct = n ? 100.0 * r->retries / (n + r->retries) : 0,
	        .cpu_tput = r->cpu_s > 0 ? n / r->cpu_s : 0,
	        .cores = c < ncpu() ? c : ncpu(),
	        .clients = c};
	char win[48] = "";
	if (window > 1)
		snprintf(win, sizeof(win), ", %u %sin flight each", window,
		         kind == WL_TATP ? "shipped updates " : "");
	snprintf(b->note, sizeof(b->note),
	         "%u machines x %u threads%s, 3 replicas, %s", o.machines,
	         o.threads, win,
	         kind == WL_TPCC ? "warehouses partitioned, conditions 1-5 held"
	         : part          ? "partitioned"
	                         : "unpartitioned");
	wl_result_free(r);
	free(r);
	return 0;
}

static bool better(enum wl_kind kind, const struct wl_bres *x,
                   const struct wl_bres *than)
{
	return kind == WL_TPCC ? x->new_orders > than->new_orders
	                       : x->tput > than->tput;
}

/* farm_run_one's figures into @b when better than what @b holds. */
static int farm_run_best(enum wl_kind kind, bool part, unsigned threads,
                         unsigned window, struct wl_bres *b)
{
	struct wl_bres b2;
	int rc = farm_run_one(kind, part, threads, window, &b2);
	if (!rc && better(kind, &b2, b))
		*b = b2;
	return rc;
}

/* libfarm at its better client count, as PostgreSQL is measured at its
 * best: 1 and 2 client threads a machine (each client has one
 * transaction in flight, so one a machine leaves the cluster waiting on
 * its own round trips), and for SmallBank also --bank-window
 * transactions in flight a machine (one wake-up of a loop then serves
 * several commits: wl_bank_win.c), on one client thread and shared by
 * the most threads. One thread a machine leaves 3 loops polling on a
 * 2-core host instead of 6 (1 thread with 16 in flight: 158-187k txn
 * per CPU-second; 2 threads with 8 each: 107-117k, docs/benchmarks.md).
 * TATP also with --ship-window shipped updates in flight a client (its
 * reads run while an update's round trip is out, so a loop parks less
 * often: at most one update an owner is out at a time). */
static int farm_run(enum wl_kind kind, bool part, struct wl_bres *b)
{
	int rc = farm_run_one(kind, part, 1, 1, b);
	struct wl_bres b2;
	if (!rc && a.max_threads > 1) {
		rc = farm_run_one(kind, part, a.max_threads, 1, &b2);
		if (!rc && better(kind, &b2, b))
			*b = b2;
	}
	if (!rc && kind == WL_TATP && a.ship_window > 1)
		rc = farm_run_best(kind, part, 1, a.ship_window, b);
	if (!rc && kind == WL_TATP && a.ship_window > 1 && a.max_threads > 1)
		rc = farm_run_best(kind, part, a.max_threads, a.ship_window, b);
	unsigned w = a.bank_window, per = w / a.max_threads;
	if (!rc && kind == WL_BANK && w > 1) {
		rc = farm_run_one(kind, part, 1, w, &b2);
		if (!rc && better(kind, &b2, b))
			*b = b2;
	}
	if (!rc && kind == WL_BANK && a.max_threads > 1 && per > 1) {
		rc = farm_run_one(kind, part, a.max_threads, per, &b2);
		if (!rc && better(kind, &b2, b))
			*b = b2;
	}
	return rc;
}

static int mem_run(enum wl_kind kind, struct wl_bres *b)
{
	struct wl_opts o;
	wl_opts_default(&o, kind);
	o.scale = scale_of(kind);
	o.duration_ms = (uint64_t)(a.seconds * 1000);
	return wl_mem_run(&o, b);
}

/* PostgreSQL at 1, 2 and 4 clients with synchronous_commit on and off:
 * the best of each setting. */
static int pg_runs(struct wl_pg *pg, enum wl_kind kind, struct wl_bres best[2])
{
	struct wl_opts o;
	wl_opts_default(&o, kind);
	o.scale = scale_of(kind);
	o.duration_ms = (uint64_t)(a.seconds * 1000 / 2);
	int rc = wl_pg_load(pg, &o);
	memset(best, 0, 2 * sizeof(best[0]));
	/* One run discarded first: the server's caches and its functions'
	 * first calls warm there, not in the first measured client count. */
	struct wl_bres warm;
	if (!rc)
		rc = wl_pg_run(pg, &o, 4, true, &warm);
	/* 1 to 8 clients, then double them while the throughput still
	 * grows (up to 64, the most wl_pg_run takes): PostgreSQL's best,
	 * not a count fixed here. Short runs on a shared host are noisy,
	 * so a drop below 8 clients does not end the search. */
	for (int s = 0; s < 2 && !rc && !stop; s++)
		for (unsigned n = 1; n <= 64 && !rc && !stop; n *= 2) {
			struct wl_bres b;
			rc = wl_pg_run(pg, &o, n, s == 0, &b);
			unsigned c = n * 2;
			b.cores = c < ncpu() ? c : ncpu();
			if (rc)
				break;
			if (b.tput < best[s].tput && n >= 8)
				break;
			if (b.tput > best[s].tput)
				best[s] = b;
		}
	return rc;
}

static void show(const char *what, const struct wl_bres *b)
{
	printf("  %-34s %9.0f txn/s  %8.0f /core  p50 %7.1f us  p99 %8.1f us  "
	       "aborts %5.2f%%  (%u clients; %s)\n",
	       what, b->tput, b->tput / (b->cores ? b->cores : 1), b->p50,
	       b->p99, b->abort_pct, b->clients, b->note);
	if (b->cpu_tput > 0)
		printf("  %-34s %9.0f txn per CPU-second it used\n", "",
		       b->cpu_tput);
}

static void json_res(const char *name, const struct wl_bres *b, bool comma)
{
	printf("\"%s\": {\"tput\": %.0f, \"per_core\": %.0f, \"p50_us\": %.1f, "
	       "\"p99_us\": %.1f, \"abort_pct\": %.2f, \"clients\": %u, "
	       "\"cores\": %u}%s",
	       name, b->tput, b->tput / (b->cores ? b->cores : 1), b->p50,
	       b->p99, b->abort_pct, b->clients, b->cores, comma ? ", " : "");
}

static double per_core(const struct wl_bres *b)
{
	return b->tput / (b->cores ? b->cores : 1);
}

static double no_per_core(const struct wl_bres *b)
{
	return b->new_orders / (b->cores ? b->cores : 1);
}

static void show_tpcc(const char *what, const struct wl_bres *b)
{
	printf("  %-34s %9.0f new orders/s  %8.0f /core  (%.0f txn/s)  p50 "
	       "%7.1f us  p99 %8.1f us  aborts %5.2f%%  (%u clients; %s)\n",
	       what, b->new_orders, no_per_core(b), b->tput, b->p50, b->p99,
	       b->abort_pct, b->clients, b->note);
}

static void json_tpcc(const char *name, const struct wl_bres *b, bool comma)
{
	printf("\"%s\": {\"new_orders\": %.0f, \"new_orders_per_core\": %.0f, "
	       "\"tput\": %.0f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
	       "\"abort_pct\": %.2f, \"clients\": %u, \"cores\": %u}%s",
	       name, b->new_orders, no_per_core(b), b->tput, b->p50, b->p99,
	       b->abort_pct, b->clients, b->cores, comma ? ", " : "");
}

struct figures {
	struct wl_bres ft, ftp, fb, mt, mb, pt[2], pb[2], fc, mc, pc[2];
	bool have_pgc;
	bool have_pg;
	struct wl_tl tl;
	bool have_tl;
};

static void show_ms(const char *what, double v)
{
	if (isnan(v))
		printf("  %-44s -\n", what);
	else
		printf("  %-44s %8.1f ms\n", what, v);
}

static void show_timeline(const struct figures *f)
{
	const struct wl_tl *t = &f->tl;
	if (!f->have_tl) {
		if (a.timeline)
			printf("failure timeline: not measured\n");
		return;
	}
	printf("failure timeline (TATP, 4 machines, lease %u ms, %.1f txn/ms "
	       "before, 80%% judged on %u ms windows; %s/"
	       "workload_timeline.png), ms after the kill:\n",
	       t->lease_ms, t->before, t->window_ms, a.out);
	show_ms("first suspicion", t->suspect);
	show_ms("configuration written to ZooKeeper", t->zk_written);
	show_ms("taken by the first survivor's recovery", t->view_first);
	show_ms("taken by the last survivor's transactions", t->config_last);
	show_ms("REC_GO", t->go);
	show_ms("last promoted region active", t->active);
	show_ms("throughput below 80%", t->dip);
	show_ms("back at 80%", t->back80);
	printf("  suspicion to 80%%: %.1f ms; kill to 80%%: %.1f ms (%llu "
	       "regions promoted, %llu locks recovered)\n",
	       t->suspect_to_80, t->kill_to_80, (unsigned long long)t->promoted,
	       (unsigned long long)t->locks);
}

static void json_num(const char *name, double v, bool comma)
{
	if (isnan(v))
		printf("\"%s\": null%s", name, comma ? ", " : "");
	else
		printf("\"%s\": %.2f%s", name, v, comma ? ", " : "");
}

static void json_timeline(const struct figures *f)
{
	const struct wl_tl *t = &f->tl;
	printf("\"timeline\": {\"lease_ms\": %u, \"window_ms\": %u, ",
	       t->lease_ms, t->window_ms);
	json_num("before_per_ms", f->have_tl ? t->before : NAN, true);
	json_num("suspect_ms", t->suspect, true);
	json_num("zk_written_ms", t->zk_written, true);
	json_num("view_first_ms", t->view_first, true);
	json_num("config_last_ms", t->config_last, true);
	json_num("rec_go_ms", t->go, true);
	json_num("active_ms", t->active, true);
	json_num("back80_ms", t->back80, true);
	json_num("kill_to_80_ms", t->kill_to_80, false);
	printf("}");
}

static void human(const struct figures *f)
{
	printf("workload_bench: %u CPUs on this host; per core = throughput "
	       "(wall clock) / cores the run could use (the fewer of the "
	       "host's CPUs\nand the run's client threads, PostgreSQL's "
	       "clients and their servers); per CPU-second:\nthe CPU time "
	       "the run's machine processes (the limit: its thread) "
	       "spent\nTATP (%llu subscribers):\n",
	       ncpu(), (unsigned long long)a.tatp_scale);
	show("libfarm unpartitioned", &f->ft);
	show("libfarm partitioned", &f->ftp);
	show("in-memory limit", &f->mt);
	if (f->have_pg) {
		show("PostgreSQL", &f->pt[0]);
		show("PostgreSQL", &f->pt[1]);
	}
	printf("SmallBank (%llu accounts, 90%% to 4%%):\n",
	       (unsigned long long)a.bank_scale);
	show("libfarm", &f->fb);
	show("in-memory limit", &f->mb);
	if (f->have_pg) {
		show("PostgreSQL", &f->pb[0]);
		show("PostgreSQL", &f->pb[1]);
	}
	printf("TPC-C (%llu warehouses, 1000 items, 30 customers a district: "
	       "scaled down; standard mix):\n",
	       (unsigned long long)a.tpcc_scale);
	show_tpcc("libfarm", &f->fc);
	show_tpcc("in-memory limit", &f->mc);
	if (f->have_pgc) {
		show_tpcc("PostgreSQL", &f->pc[0]);
		show_tpcc("PostgreSQL", &f->pc[1]);
	}
	printf("FaRM (SOSP'15): TATP 140 M txn/s on 90 machines x 16 cores = "
	       "97 k per core (RDMA, 2x 8-core Xeon; here: shm on %u shared "
	       "cores)\n",
	       ncpu());
	show_timeline(f);
}

/* One goal: its value, or null (and not met) when nothing measured it. */
static void goal(const char *name, double v, double target, bool ge, bool comma)
{
	bool have = !isnan(v);
	bool met = have && (ge ? v >= target : v <= target);
	printf("\"%s\": {\"value\": ", name);
	if (have)
		printf("%.3f", v);
	else
		printf("null");
	printf(", \"target\": %g, \"met\": %s}%s", target,
	       met ? "true" : "false", comma ? ", " : "");
}

static void json(const struct figures *f)
{
	const struct wl_bres *pgt =
	        f->pt[0].tput > f->pt[1].tput ? &f->pt[0] : &f->pt[1];
	const struct wl_bres *pgb =
	        f->pb[0].tput > f->pb[1].tput ? &f->pb[0] : &f->pb[1];
	/* TATP's goals for FaRM's setup (unpartitioned) and the partitioned
	 * one, each on its own. */
	double pgt_c = f->have_pg ? per_core(pgt) : NAN;
	double pgb_c = f->have_pg ? per_core(pgb) : NAN;
	printf("{\"bench\": \"workload_bench\", \"cpus\": %u, \"tatp\": {",
	       ncpu());
	json_res("libfarm_unpartitioned", &f->ft, true);
	json_res("libfarm_partitioned", &f->ftp, true);
	json_res("memory", &f->mt, f->have_pg);
	if (f->have_pg) {
		json_res("pg_sync_on", &f->pt[0], true);
		json_res("pg_sync_off", &f->pt[1], false);
	}
	printf("}, \"smallbank\": {");
	json_res("libfarm", &f->fb, true);
	json_res("memory", &f->mb, f->have_pg);
	if (f->have_pg) {
		json_res("pg_sync_on", &f->pb[0], true);
		json_res("pg_sync_off", &f->pb[1], false);
	}
	printf("}, \"tpcc\": {");
	json_tpcc("libfarm", &f->fc, true);
	json_tpcc("memory", &f->mc, f->have_pgc);
	if (f->have_pgc) {
		json_tpcc("pg_sync_on", &f->pc[0], true);
		json_tpcc("pg_sync_off", &f->pc[1], false);
	}
	printf("}, \"pg_isolation\": \"read committed\", ");
	json_timeline(f);
	printf(", \"goals\": {");
	goal("tatp_unpartitioned_vs_pg_per_core", per_core(&f->ft) / pgt_c, 10,
	     true, true);
	goal("tatp_partitioned_vs_pg_per_core", per_core(&f->ftp) / pgt_c, 10,
	     true, true);
	goal("tatp_unpartitioned_vs_memory_per_core",
	     per_core(&f->ft) / per_core(&f->mt), 0.3, true, true);
	goal("tatp_partitioned_vs_memory_per_core",
	     per_core(&f->ftp) / per_core(&f->mt), 0.3, true, true);
	goal("smallbank_vs_pg_per_core", per_core(&f->fb) / pgb_c, 10, true,
	     true);
	const struct wl_bres *pgc = f->pc[0].new_orders > f->pc[1].new_orders
	                                    ? &f->pc[0]
	                                    : &f->pc[1];
	goal("tpcc_vs_pg_per_core",
	     f->have_pgc ? no_per_core(&f->fc) / no_per_core(pgc) : NAN, 5,
	     true, true);
	goal("suspect_to_80pct_ms", f->have_tl ? f->tl.suspect_to_80 : NAN, 50,
	     false, false);
	printf("}}\n");
}

/* The failure timeline alone: its lines, and a JSON line with its goal
 * only. */
static int timeline_only(struct figures *f)
{
	f->have_tl = !wl_timeline(a.scripts, a.out, a.lease_ms, &f->tl);
	if (stop)
		return 128 + stop;
	show_timeline(f);
	printf("{\"bench\": \"workload_bench\", \"cpus\": %u, ", ncpu());
	json_timeline(f);
	printf(", \"goals\": {");
	goal("suspect_to_80pct_ms", f->have_tl ? f->tl.suspect_to_80 : NAN, 50,
	     false, false);
	printf("}}\n");
	return f->have_tl ? 0 : 1;
}

static bool bad_args(void)
{
	return !(a.seconds > 0) || a.tatp_scale < 10 || a.bank_scale < 10 ||
	       a.tpcc_scale < a.machines || a.tpcc_scale > 64 ||
	       a.max_threads < 1 || a.max_threads > 16 || a.bank_window < 1 ||
	       a.bank_window > WL_MAX_BANK_WINDOW || a.ship_window < 1 ||
	       a.ship_window > WL_MAX_MACHINES || a.lease_ms < 1 ||
	       a.lease_ms > 60000;
}

static void usage(void)
{
	printf("usage: workload_bench [--seconds S] "
	       "[--tatp-scale N] "
	       "[--bank-scale N] [--tpcc-scale WAREHOUSES] "
	       "[--no-pg] [--no-timeline | --timeline-only] "
	       "[--lease-ms MS] "
	       "[--out DIR] [--scripts DIR] [--threads N] [--bank-window N] "
	       "[--ship-window N]\n"
	       "  --lease-ms MS: the failure timeline's lease "
	       "(200)\n"
	       "  --threads N: libfarm with 1 and N client "
	       "threads a machine, the better reported (2; 1: "
	       "only 1)\n"
	       "  --bank-window N: SmallBank also with N transactions in "
	       "flight a machine,\n    on 1 client thread and shared by "
	       "the --threads (16; 1: not tried)\n"
	       "  --ship-window N: TATP also with N shipped updates in "
	       "flight a client,\n    with 1 and --threads client threads "
	       "(8; 1: not tried)\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"seconds", 1, 0, 's'},
	                                   {"tatp-scale", 1, 0, 't'},
	                                   {"bank-scale", 1, 0, 'b'},
	                                   {"tpcc-scale", 1, 0, 'w'},
	                                   {"no-pg", 0, 0, 'n'},
	                                   {"no-timeline", 0, 0, 'T'},
	                                   {"timeline-only", 0, 0, 'O'},
	                                   {"lease-ms", 1, 0, 'l'},
	                                   {"out", 1, 0, 'o'},
	                                   {"scripts", 1, 0, 'S'},
	                                   {"threads", 1, 0, 'j'},
	                                   {"bank-window", 1, 0, 'B'},
	                                   {"ship-window", 1, 0, 'W'},
	                                   {"help", 0, 0, 'h'},
	                                   {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's': a.seconds = atof(optarg); break;
		case 't': a.tatp_scale = strtoull(optarg, NULL, 10); break;
		case 'b': a.bank_scale = strtoull(optarg, NULL, 10); break;
		case 'w': a.tpcc_scale = strtoull(optarg, NULL, 10); break;
		case 'n': a.pg = false; break;
		case 'T': a.timeline = false; break;
		case 'O': a.timeline_only = true; break;
		case 'l': a.lease_ms = (unsigned)atoi(optarg); break;
		case 'o': a.out = optarg; break;
		case 'S': a.scripts = optarg; break;
		case 'j': a.max_threads = (unsigned)atoi(optarg); break;
		case 'B': a.bank_window = (unsigned)atoi(optarg); break;
		case 'W': a.ship_window = (unsigned)atoi(optarg); break;
		case 'h': usage(); return 0;
		default: return 2;
		}
	}
	if (bad_args()) {
		fprintf(stderr, "workload_bench: bad --seconds, scale, "
		                "--threads, --bank-window or --ship-window\n");
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	static struct figures f;
	if (a.timeline_only)
		return timeline_only(&f);
	int rc = farm_run(WL_TATP, false, &f.ft) ||
	         farm_run(WL_TATP, true, &f.ftp) ||
	         farm_run(WL_BANK, false, &f.fb) ||
	         farm_run(WL_TPCC, false, &f.fc) || mem_run(WL_TATP, &f.mt) ||
	         mem_run(WL_BANK, &f.mb) || mem_run(WL_TPCC, &f.mc);
	if (rc || stop)
		return stop ? 128 + stop : 1;
	if (a.pg) {
		struct wl_pg *pg;
		char err[256];
		if (wl_pg_start(&pg, err, sizeof(err))) {
			fprintf(stderr, "workload_bench: %s\n", err);
		} else {
			f.have_pg = !pg_runs(pg, WL_TATP, f.pt) &&
			            !pg_runs(pg, WL_BANK, f.pb);
			f.have_pgc = !pg_runs(pg, WL_TPCC, f.pc);
			wl_pg_stop(pg);
		}
	}
	if (stop)
		return 128 + stop;
	f.have_tl =
	        a.timeline && !wl_timeline(a.scripts, a.out, a.lease_ms, &f.tl);
	if (stop)
		return 128 + stop;
	human(&f);
	json(&f);
	return 0;
}
