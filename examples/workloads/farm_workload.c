/*
 * farm-workload: run TATP, SmallBank or TPC-C on a local cluster of libfarm
 * machines (forked processes), print throughput, latency and abort
 * rates, check the workload's invariants. Exits 0 when the run finished
 * and the invariants held, 1 when they did not, 2 on bad input (said
 * before anything starts), 3 when the run failed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <farm/error.h>

#include "wl.h"
#include "wl_peers.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: farm-workload [options] tatp|smallbank|tpcc\n"
	        "       (or --workload tatp|smallbank|tpcc)\n"
	        "  --machines N      machines (processes), 1..8 (3)\n"
	        "  --threads N       client threads (event loops) per machine "
	        "(1)\n"
	        "  --scale N         subscribers (TATP) or accounts "
	        "(SmallBank) "
	        "(10000), warehouses (TPC-C, 3)\n"
	        "  --items N         TPC-C: items (1000; the spec: 100000)\n"
	        "  --customers N     TPC-C: customers per district (30; the "
	        "spec: 3000)\n"
	        "  --full-scale      TPC-C: the spec's population (100000 "
	        "items, 3000 customers)\n"
	        "  --mix M           standard | read-only | write-heavy | "
	        "p1,p2,... (standard)\n"
	        "  --duration S      seconds of run (2)\n"
	        "  --seed N          random seed (1)\n"
	        "  --replicas N      copies of every region (3)\n"
	        "  --fabric F        shm | ofi (shm)\n"
	        "  --partitioned     clients pick ids their machine owns\n"
	        "  --hotspot P,Q     SmallBank: Q%% of picks go to P%% of the "
	        "accounts (4,90)\n"
	        "  --audit           SmallBank: per-client ledgers (every "
	        "acknowledged commit checked)\n"
	        "  --history DIR     SmallBank: per-client histories "
	        "(tests/wl_histcheck)\n"
	        "  --zk HOST:PORT    ZooKeeper membership (recovery needs it)\n"
	        "  --kill M@S        kill machine M S seconds into the run\n"
	        "  --lease MS        recovery's lease with --zk (1000)\n"
	        "  --region-size SZ  region size (64M)\n"
	        "  --busy-poll       loops never park\n"
	        "  --park-after-us N idle loops spin N us before parking (0)\n"
	        "  --ship-window N   TATP: shipped updates a client keeps\n"
	        "                    in flight while it runs the next\n"
	        "                    transactions, at most one per owner\n"
	        "                    (1: it waits for each)\n"
	        "  --bank-window N   SmallBank: transactions a client keeps\n"
	        "                    in flight on its loop (1: it waits for\n"
	        "                    each; not with --audit or --history)\n"
	        "  --vs-limit        TATP, SmallBank: after the run, the\n"
	        "                    in-memory limit (the same options, one\n"
	        "                    thread of this process, plain tables)\n"
	        "                    and the run's txn per CPU-second\n"
	        "                    against its own\n"
	        "  --quiet           only the summary line\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *e;
	errno = 0;
	unsigned long long v = strtoull(s, &e, 10);
	if (errno || e == s || *e || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

static int parse_secs(const char *s, uint64_t *ms)
{
	char *e;
	double v = strtod(s, &e);
	if (e == s || *e || !(v > 0) || v > 86400)
		return -1;
	*ms = (uint64_t)(v * 1000 + 0.5);
	return 0;
}

/* TPC-C: committed new orders per second (FaRM's figure; tpmC is per
 * minute), the population, what the check counted. */
static void print_tpcc(const struct wl_opts *o, const struct wl_result *r,
                       uint64_t acked, uint64_t ledger)
{
	uint64_t no = r->commits[WT_NEW_ORDER] - r->fails[WT_NEW_ORDER];
	double nps = r->seconds > 0 ? no / r->seconds : 0;
	printf("TPC-C new orders: %llu committed (%llu rolled back), %.0f "
	       "new orders/s (%.0f tpmC-style, %.0f per client thread); "
	       "%llu warehouses, %u items, %u customers a district%s\n",
	       (unsigned long long)no,
	       (unsigned long long)r->fails[WT_NEW_ORDER], nps, nps * 60,
	       r->cores ? nps / r->cores : 0, (unsigned long long)o->scale,
	       o->items, o->customers,
	       o->items == 100000 && o->customers == 3000
	               ? " (the specification's)"
	               : " (scaled down from 100000 and 3000)");
	printf("new orders acknowledged to surviving clients %llu, theirs "
	       "found %llu; rows: orders %llu (loaded %llu), new-orders %llu, "
	       "order lines %llu, districts %llu\n",
	       (unsigned long long)acked, (unsigned long long)ledger,
	       (unsigned long long)r->rows[0],
	       (unsigned long long)r->initial[0],
	       (unsigned long long)r->rows[1], (unsigned long long)r->rows[2],
	       (unsigned long long)r->rows[3]);
}

/* Print @r; the number of transactions committed. */
static uint64_t print_result(const struct wl_opts *o, const struct wl_result *r)
{
	int from, to;
	uint64_t all = 0;
	wl_types(o->kind, &from, &to);
	for (int t = from; t < to; t++) {
		all += r->commits[t];
		if (!o->quiet)
			printf("  %-24s %10llu  (%llu ended by the logic)\n",
			       wl_txn_name((enum wl_txn)t),
			       (unsigned long long)r->commits[t],
			       (unsigned long long)r->fails[t]);
	}
	double tput = r->seconds > 0 ? all / r->seconds : 0;
	printf("%s: %u machines x %u threads, scale %llu, %s%s: %llu "
	       "committed, %.0f txn/s "
	       "(%.0f per client thread), p50 %.1f us, p99 %.1f us, "
	       "retries %.2f%%, errors %llu, shipped %llu (fallbacks %llu), "
	       "load %llu ms, run CPU %.2f s (%.0f txn per CPU-second)\n",
	       o->kind == WL_TATP   ? "TATP"
	       : o->kind == WL_BANK ? "SmallBank"
	                            : "TPC-C",
	       o->machines, o->threads, (unsigned long long)o->scale,
	       o->kind == WL_TPCC ? "warehouses partitioned"
	       : o->partitioned   ? "partitioned"
	                          : "unpartitioned",
	       o->kill_machine >= 0 ? ", one killed" : "",
	       (unsigned long long)all, tput, r->cores ? tput / r->cores : 0,
	       wl_hist_pct(r->hist, 0.5), wl_hist_pct(r->hist, 0.99),
	       all ? 100.0 * r->retries / (all + r->retries) : 0,
	       (unsigned long long)r->errors, (unsigned long long)r->shipped,
	       (unsigned long long)r->ship_fallbacks,
	       (unsigned long long)r->load_ms, r->cpu_s,
	       r->cpu_s > 0 ? all / r->cpu_s : 0);
	uint64_t acked = 0, ledger = 0;
	for (unsigned i = 0; i < WL_MAX_MACHINES; i++)
		for (unsigned t = 0; t < WL_MAX_THREADS; t++) {
			acked += r->acked[i][t];
			ledger += r->ledger[i][t];
		}
	if (o->kind == WL_TPCC) {
		print_tpcc(o, r, acked, ledger);
		return all;
	}
	if (o->kind == WL_TATP)
		printf("updates acknowledged to surviving clients %llu, in "
		       "all ledgers %llu\n",
		       (unsigned long long)acked, (unsigned long long)ledger);
	if (o->kind == WL_TATP)
		printf("rows: subscriber %llu, access_info %llu, "
		       "special_facility %llu, call_forwarding %llu\n",
		       (unsigned long long)r->rows[0],
		       (unsigned long long)r->rows[1],
		       (unsigned long long)r->rows[2],
		       (unsigned long long)r->rows[3]);
	else
		printf("accounts %llu, total balance %lld (loaded %lld, "
		       "ledgers %+lld)\n",
		       (unsigned long long)r->rows[0], (long long)r->total,
		       (long long)(int64_t)r->initial[1],
		       (long long)r->ledger_delta);
	return all;
}

/* The in-memory limit of @o's workload, run here after the cluster's
 * (one thread, the same mix, scale and seed), and run @r's @all
 * transactions per CPU-second against the limit's: both per CPU-second,
 * so that a loaded host, which shrinks the limit's wall-clock rate as
 * much as the cluster's, does not enter the ratio. 0, or 3 (it failed). */
static int print_limit(const struct wl_opts *o, const struct wl_result *r,
                       uint64_t all)
{
	struct wl_bres b;
	int rc = wl_mem_run(o, &b);
	if (rc || !(b.cpu_tput > 0)) {
		fprintf(stderr,
		        "farm-workload: the in-memory limit failed: %s\n",
		        rc ? farm_strerror(rc) : "no CPU time");
		return 3;
	}
	double run = r->cpu_s > 0 ? all / r->cpu_s : 0;
	printf("in-memory limit: %.0f txn/s, %.0f txn per CPU-second; this "
	       "run per CPU-second: %.3f of it\n",
	       b.tput, b.cpu_tput, run / b.cpu_tput);
	return 0;
}

static int parse_kill(struct wl_opts *o, const char *s)
{
	char *e;
	long m = strtol(s, &e, 10);
	if (e == s || *e != '@' || m < 0 || m >= 64)
		return -1;
	o->kill_machine = (int)m;
	return parse_secs(e + 1, &o->kill_at_ms);
}

static int parse_hot(struct wl_opts *o, const char *s)
{
	unsigned p, q;
	char end;
	if (sscanf(s, "%u,%u%c", &p, &q, &end) != 2 || !p || p > 100 || q > 100)
		return -1;
	o->hot_pct = p;
	o->hot_prob = q;
	return 0;
}

/* One option into @o: 0, 1 (a bad value), -1 (unknown). */
static int parse_opt(struct wl_opts *o, int c, const char **mix)
{
	uint64_t v;
	int bad = 0;
	switch (c) {
	case 'm':
		bad |= parse_u64(optarg, &v) || v > 64;
		o->machines = (unsigned)v;
		break;
	case 't':
		bad |= parse_u64(optarg, &v) || v > 64;
		o->threads = (unsigned)v;
		break;
	case 's': bad |= parse_u64(optarg, &o->scale); break;
	case 'x': *mix = optarg; break;
	case 'd': bad |= parse_secs(optarg, &o->duration_ms); break;
	case 'S': bad |= parse_u64(optarg, &o->seed); break;
	case 'r':
		bad |= parse_u64(optarg, &v) || v > 64;
		o->replicas = (unsigned)v;
		break;
	case 'f': o->fabric = optarg; break;
	case 'p': o->partitioned = true; break;
	case 'H': bad |= parse_hot(o, optarg); break;
	case 'a': o->audit = true; break;
	case 'y': o->history = optarg; break;
	case 'z': o->zk = optarg; break;
	case 'k': bad |= parse_kill(o, optarg); break;
	case 'R': o->region_size = optarg; break;
	case 'b': o->busy_poll = true; break;
	case 'P':
		bad |= parse_u64(optarg, &v) || v > 1000000;
		o->park_after_us = (int)v;
		break;
	case 'W':
		bad |= parse_u64(optarg, &v) || v > WL_MAX_MACHINES;
		o->ship_window = (unsigned)v;
		break;
	case 'N':
		bad |= parse_u64(optarg, &v) || v > WL_MAX_BANK_WINDOW;
		o->bank_window = (unsigned)v;
		break;
	case 'q': o->quiet = true; break;
	case 'I':
		bad |= parse_u64(optarg, &v) || v > 0xffffffffu;
		o->items = (uint32_t)v;
		break;
	case 'C':
		bad |= parse_u64(optarg, &v) || v > 0xffffffffu;
		o->customers = (uint32_t)v;
		break;
	case 'F':
		o->items = 100000;
		o->customers = 3000;
		break;
	case 'w': break; /* the workload: found before */
	case 'l':
		bad |= parse_u64(optarg, &v) || v > 60000;
		o->lease_ms = (unsigned)v;
		break;
	default: return -1;
	}
	return bad;
}

/* The workload's name: the positional argument or --workload's value
 * (options depend on it, so it is found before they are parsed). */
static const char *find_workload(int argc, char **argv, bool *positional)
{
	const char *name = NULL;
	for (int i = 1; i < argc; i++) {
		bool val = i > 1 && !strcmp(argv[i - 1], "--workload");
		if (val || !strcmp(argv[i], "tatp") ||
		    !strcmp(argv[i], "smallbank") || !strcmp(argv[i], "tpcc")) {
			name = argv[i];
			*positional = !val;
		} else if (!strncmp(argv[i], "--workload=", 11)) {
			name = argv[i] + 11;
			*positional = false;
		}
	}
	return name;
}

static enum wl_kind kind_of(const char *name)
{
	return !strcmp(name, "tatp")        ? WL_TATP
	       : !strcmp(name, "smallbank") ? WL_BANK
	       : !strcmp(name, "tpcc")      ? WL_TPCC
	                                    : (enum wl_kind)0;
}

static const struct option lo[] = {{"machines", 1, 0, 'm'},
                                   {"threads", 1, 0, 't'},
                                   {"scale", 1, 0, 's'},
                                   {"mix", 1, 0, 'x'},
                                   {"duration", 1, 0, 'd'},
                                   {"seed", 1, 0, 'S'},
                                   {"replicas", 1, 0, 'r'},
                                   {"fabric", 1, 0, 'f'},
                                   {"partitioned", 0, 0, 'p'},
                                   {"hotspot", 1, 0, 'H'},
                                   {"audit", 0, 0, 'a'},
                                   {"history", 1, 0, 'y'},
                                   {"zk", 1, 0, 'z'},
                                   {"kill", 1, 0, 'k'},
                                   {"region-size", 1, 0, 'R'},
                                   {"busy-poll", 0, 0, 'b'},
                                   {"quiet", 0, 0, 'q'},
                                   {"lease", 1, 0, 'l'},
                                   {"park-after-us", 1, 0, 'P'},
                                   {"ship-window", 1, 0, 'W'},
                                   {"bank-window", 1, 0, 'N'},
                                   {"items", 1, 0, 'I'},
                                   {"customers", 1, 0, 'C'},
                                   {"full-scale", 0, 0, 'F'},
                                   {"workload", 1, 0, 'w'},
                                   {"vs-limit", 0, 0, 'V'},
                                   {"help", 0, 0, 'h'},
                                   {0, 0, 0, 0}};

/* The options after the workload was found: into @o and *@vs_limit. 0,
 * or the exit status (2: bad usage, said on stderr). */
static int parse_args(int argc, char **argv, bool positional, struct wl_opts *o,
                      bool *vs_limit)
{
	const char *mix = NULL;
	char err[256];
	int c;
	int li = 0;
	while ((c = getopt_long(argc, argv, "h", lo, &li)) != -1) {
		if (c == 'V') {
			*vs_limit = true;
			continue;
		}
		int bad = parse_opt(o, c, &mix);
		if (bad < 0) {
			usage(stderr);
			return 2;
		}
		if (bad) {
			fprintf(stderr,
			        "farm-workload: bad value for --%s: %s\n",
			        lo[li].name, optarg);
			return 2;
		}
	}
	if (optind != argc - (positional ? 1 : 0)) {
		usage(stderr);
		return 2;
	}
	if ((mix && wl_mix_parse(o, mix, err, sizeof(err))) ||
	    wl_validate(o, err, sizeof(err))) {
		fprintf(stderr, "farm-workload: %s\n", err);
		return 2;
	}
	if (*vs_limit && o->kind == WL_TPCC) {
		fprintf(stderr, "farm-workload: --vs-limit: TATP and SmallBank "
		                "only\n");
		return 2;
	}
	return 0;
}

/* Run @o, print the result and judge it: the exit status. */
static int run_workload(const struct wl_opts *o, bool vs_limit)
{
	struct wl_result *r = calloc(1, sizeof(*r));
	if (!r)
		return 3;
	int rc = wl_run(o, r);
	if (rc) {
		fprintf(stderr, "farm-workload: the run failed: %s\n", r->msg);
		free(r);
		return 3;
	}
	uint64_t all = print_result(o, r);
	if (r->check)
		fprintf(stderr, "farm-workload: INVARIANT FAILED: %s\n",
		        r->msg);
	else
		printf("invariants hold\n");
	/* A run that gave transactions up or committed nothing measured
	 * nothing trustworthy, whatever the invariants say. */
	int st = r->check ? 1 : 0;
	if (!st && r->errors) {
		fprintf(stderr,
		        "farm-workload: FAILED: %llu transactions "
		        "given up\n",
		        (unsigned long long)r->errors);
		st = 1;
	}
	if (!st && !all) {
		fprintf(stderr, "farm-workload: FAILED: nothing committed\n");
		st = 1;
	}
	if (!st && vs_limit)
		st = print_limit(o, r, all);
	wl_result_free(r);
	free(r);
	return st;
}

int main(int argc, char **argv)
{
	/* The workload comes last but options depend on it (the mix):
	 * find it first. */
	bool positional = false;
	const char *wname = find_workload(argc, argv, &positional);
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
	if (!wname) {
		fprintf(stderr, "farm-workload: name a workload: tatp, "
		                "smallbank or tpcc\n");
		usage(stderr);
		return 2;
	}
	enum wl_kind kind = kind_of(wname);
	if (!kind) {
		fprintf(stderr, "farm-workload: unknown workload '%s'\n",
		        wname);
		return 2;
	}
	struct wl_opts o;
	wl_opts_default(&o, kind);
	bool vs_limit = false;
	int st = parse_args(argc, argv, positional, &o, &vs_limit);
	return st ? st : run_workload(&o, vs_limit);
}
