/*
 * farm-graph: the graph store from the command line. Starts a local
 * cluster of 3 machine processes (shm fabric, static membership, data
 * under /dev/shm), loads a LinkBench-style graph with a progress line, and
 * then runs an operation mix for a while or prints one node and its edge
 * lists. Everything it started is stopped and removed before it exits.
 * With --config FILE it is instead one machine of the cluster that the
 * file describes, started on each machine with the same command
 * (gconf.h).
 */
#include "gconf.h"

#include <getopt.h>

static const char *usage =
        "usage: farm-graph [options] load|run|query ID\n"
        "  load        load the graph, print what was loaded\n"
        "  run         load, then run an operation mix\n"
        "  query ID    load, then print node ID and its newest edges\n"
        "options:\n"
        "  --nodes N       nodes (suffixes k, M; default 100k)\n"
        "  --seed S        the graph's random seed (default 1)\n"
        "  --mix M         tao (99.8% reads) or linkbench (default tao)\n"
        "  --seconds T     how long run runs (default 10)\n"
        "  --depth D       operations in flight per machine (default 16)\n"
        "  --region SIZE   region size of each machine (default 256M)\n"
        "  --busy          machines poll instead of parking when idle\n"
        "  --park-after US idle microseconds before a machine parks\n"
        "                  (park_after_us; default 200)\n"
        "  --replicas R    copies of each region, 1..3 (default 3)\n"
        "  --config FILE   be one machine of the cluster FILE describes\n"
        "                  (docs/config.md: machine ids 0..N-1, threads =\n"
        "                  1, ZooKeeper or peer lines) instead of starting\n"
        "                  a local one: run farm-graph with the same\n"
        "                  command and options on every machine, each with\n"
        "                  its own file; machine 0 prints the results.\n"
        "                  --region, --busy, --park-after, --replicas come\n"
        "                  from the file\n"
        "  --wait S        with --config: how long to wait for the other\n"
        "                  machines to join (default 120)\n"
        "  --help          this text\n";

static uint64_t parse_count(const char *s, int *err)
{
	char *end;
	double v = strtod(s, &end);
	if (*end == 'k' || *end == 'K')
		v *= 1e3, end++;
	else if (*end == 'M' || *end == 'm')
		v *= 1e6, end++;
	else if (*end == 'G' || *end == 'g')
		v *= 1e9, end++;
	if (*end || v < 1 || v > 1e10) {
		*err = 1;
		return 0;
	}
	return (uint64_t)v;
}

struct prog {
	struct gd_shared *sh;
	uint64_t t0, total;
	bool tty;
	uint64_t last;
};

static void progress(void *arg)
{
	struct prog *p = arg;
	uint64_t now = gc_now_ns();
	if (!p->tty && now - p->last < 2000000000ull)
		return;
	p->last = now;
	uint64_t n = 0, e = 0;
	for (unsigned i = 0; i < GC_NM; i++) {
		n += atomic_load(&p->sh->loaded[i]);
		e += atomic_load(&p->sh->edges[i]);
	}
	double s = (double)(now - p->t0) / 1e9;
	fprintf(stderr,
	        "%sloading: %" PRIu64 "/%" PRIu64 " nodes (%.0f%%), %" PRIu64
	        " edges, %.0f nodes/s%s",
	        p->tty ? "\r" : "", n, p->total,
	        100.0 * (double)n / (double)p->total, e,
	        s > 0 ? (double)n / s : 0, p->tty ? "   " : "\n");
}

/* Start the cluster and load: 0, or an error said on stderr. */
int fg_tool_load(struct gc_cluster *cl, struct gd_shared *sh, const char *who,
                 bool quiet);
int fg_tool_load(struct gc_cluster *cl, struct gd_shared *sh, const char *who,
                 bool quiet)
{
	struct fg_attr a = {.cache_entries = gd_cache_entries(sh->nodes)};
	if (gc_start(cl, "tool", &a, gd_body, sh)) {
		fprintf(stderr, "%s: the cluster did not start\n", who);
		gc_kill(cl);
		return -1;
	}
	struct prog p = {.sh = sh,
	                 .t0 = gc_now_ns(),
	                 .total = sh->nodes,
	                 .tty = isatty(2) && !quiet};
	int rc = gd_command(cl, 'L', 0, GC_NM, quiet ? NULL : progress, &p);
	p.last = 0;
	if (!quiet) {
		p.tty = false;
		progress(&p);
	}
	if (rc) {
		fprintf(stderr, "%s: loading failed: %s\n", who,
		        fg_strerror(rc));
		gc_kill(cl);
		return -1;
	}
	return 0;
}

#ifndef FG_TOOL_NO_MAIN
/* What the command line asked for beyond @sh's settings. */
struct tool_args {
	const char *cmd, *conf;
	int wait_s;
	bool local_only; /* set an option only a local cluster takes */
};

/* One option (getopt's @c, @arg) into @sh, gc_o or @a; *@bad on a wrong
 * value. 1: --help. */
static int take_option(int c, const char *arg, struct gd_shared *sh,
                       struct tool_args *a, int *bad)
{
	switch (c) {
	case 'n': sh->nodes = parse_count(arg, bad); break;
	case 's': sh->seed = strtoull(arg, NULL, 0); break;
	case 'm':
		if (!strcmp(arg, "tao"))
			sh->mix = LB_TAO;
		else if (!strcmp(arg, "linkbench"))
			sh->mix = LB_LINKBENCH;
		else
			*bad = 1;
		break;
	case 't': sh->secs = strtod(arg, NULL); break;
	case 'd': sh->depth = (unsigned)strtoul(arg, NULL, 0); break;
	case 'r': gc_o.region_size = arg; break;
	case 'b': gc_o.busy_poll = true; break;
	case 'k':
		gc_o.park_after_us = atoi(arg);
		*bad |= gc_o.park_after_us < 0 || gc_o.park_after_us > 1000000;
		break;
	case 'p': gc_o.replicas = (unsigned)strtoul(arg, NULL, 0); break;
	case 'c': a->conf = arg; break;
	case 'w':
		a->wait_s = atoi(arg);
		*bad |= a->wait_s < 1 || a->wait_s > 86400;
		break;
	case 'h': return 1;
	default: *bad = 1;
	}
	a->local_only |= c == 'r' || c == 'b' || c == 'k' || c == 'p';
	return 0;
}

/* The command line into @sh and @a: 0, 1 (--help printed), 2 (usage
 * printed to stderr). */
static int parse_args(int argc, char **argv, struct gd_shared *sh,
                      struct tool_args *a)
{
	static const struct option opts[] = {
	        {"nodes", required_argument, 0, 'n'},
	        {"seed", required_argument, 0, 's'},
	        {"mix", required_argument, 0, 'm'},
	        {"seconds", required_argument, 0, 't'},
	        {"depth", required_argument, 0, 'd'},
	        {"region", required_argument, 0, 'r'},
	        {"busy", no_argument, 0, 'b'},
	        {"park-after", required_argument, 0, 'k'},
	        {"replicas", required_argument, 0, 'p'},
	        {"config", required_argument, 0, 'c'},
	        {"wait", required_argument, 0, 'w'},
	        {"help", no_argument, 0, 'h'},
	        {0, 0, 0, 0}};
	int c, bad = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
		if (take_option(c, optarg, sh, a, &bad)) {
			fputs(usage, stdout);
			return 1;
		}
	a->cmd = optind < argc ? argv[optind] : NULL;
	if (a->cmd && !strcmp(a->cmd, "query")) {
		if (optind + 1 >= argc ||
		    !(sh->query = strtoull(argv[optind + 1], NULL, 0)))
			bad = 1;
	} else if (!a->cmd ||
	           (strcmp(a->cmd, "load") && strcmp(a->cmd, "run"))) {
		bad = 1;
	}
	if (bad || sh->secs <= 0 || sh->depth == 0 || sh->depth > 4096) {
		fputs(usage, stderr);
		return 2;
	}
	if (a->conf && a->local_only) {
		fprintf(stderr, "farm-graph: with --config, the region size, "
		                "polling, parking and replicas are the "
		                "file's\n");
		return 2;
	}
	return 0;
}

/* @cmd on a local cluster of GC_NM machines (loaded first): 0 or an
 * error code. */
static int run_local(struct gd_shared *sh, const char *cmd)
{
	gc_o.kv_buckets = (uint32_t)(sh->nodes / GC_NM / 4 + 1024);
	if (!gc_o.region_size[0] || !strcmp(gc_o.region_size, "64M"))
		gc_o.region_size = "256M";
	struct gc_cluster cl;
	if (fg_tool_load(&cl, sh, "farm-graph", false))
		return -1;
	int rc = 0;
	if (!strcmp(cmd, "run")) {
		fprintf(stderr,
		        "running the %s mix for %.0f s, %u in flight "
		        "per machine\n",
		        lb_mix_name((enum lb_mix)sh->mix), sh->secs, sh->depth);
		rc = gd_command(&cl, 'W', 0, GC_NM, NULL, NULL);
		if (!rc) {
			struct gd_sum s;
			gd_summarize(sh->res, GC_NM, &s);
			char title[128];
			snprintf(title, sizeof(title),
			         "%s mix, %" PRIu64 " nodes, 3 machines:",
			         lb_mix_name((enum lb_mix)sh->mix), sh->nodes);
			gd_print(stdout, title, &s);
		}
	} else if (!strcmp(cmd, "query")) {
		rc = gd_command(&cl, 'Q', 0, 1, NULL, NULL);
	}
	if (rc)
		fprintf(stderr, "farm-graph: %s failed: %s\n", cmd,
		        fg_strerror(rc));
	if (gc_finish(&cl)) {
		fprintf(stderr, "farm-graph: a machine failed\n");
		rc = rc ? rc : -1;
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct gd_shared *sh = gd_map();
	if (!sh) {
		perror("farm-graph: mmap");
		return 1;
	}
	sh->nodes = 100000;
	sh->seed = 1;
	sh->secs = 10;
	sh->warm = 1;
	sh->depth = 16;
	struct tool_args a = {.wait_s = 120};
	int st = parse_args(argc, argv, sh, &a);
	if (st)
		return st == 1 ? 0 : 2;
	if (a.conf)
		return gx_main(a.conf, sh, a.cmd, a.wait_s) ? 1 : 0;
	return run_local(sh, a.cmd) ? 1 : 0;
}
#endif
