/*
 * msg_bench: request/response and one-way messaging between two machine
 * processes (include/farm/msg.h), against TCP loopback and a plain
 * shared-memory ring measured in the same run (baseline.h). --fabric ofi:
 * the same over libfabric on loopback (the baselines too); --netns: the
 * client in the first machine namespace of scripts/netns-cluster, the
 * server in the second, over the veth links (no baselines: they run on
 * one host).
 *
 * The process is machine 0, the client. It forks machine 1, the server:
 * each opens its own shm fabric on a data directory under /dev/shm and its
 * own farm_msg (one thread, busy polling), they swap fabric addresses and
 * message-region descriptors over pipes, add each other as peers and open
 * their loops. The server then blocks reading a pipe until told to serve;
 * while serving it runs nothing but its loop, until an "idle" request puts
 * it back on the pipe. So exactly two processes are busy at any time: the
 * two machines while messaging is measured, then this process and the
 * helper a baseline forks, while the server sleeps. While messaging, the
 * client is pinned to the first CPU it may use and the server to the
 * second (--no-pin: not), so the two never share a core.
 *
 * For each payload size (--sizes, default 16,64,128,256,512 bytes):
 *   rr1     request/response, one call outstanding: the continuation
 *           issues the next call; the server's handler echoes the payload.
 *           Rate and round-trip latency (median, p99) of every call;
 *   rrN     the same with --depth (64) calls outstanding: each
 *           continuation issues a new call, keeping the window full, and
 *           every --flush-every (depth/4) calls farm_loop_flush() sends
 *           what is staged, so the server works on the first calls while
 *           the client still handles replies. One call in 16 is timed;
 *   oneway  the client streams farm_msg_send as fast as it can (polling
 *           its loop every --send-batch (128) sends and whenever a send
 *           says -ENOBUFS), the server counts in a handler; the rate is
 *           what the server counts per second, which it reports up a pipe.
 * Each measurement lasts --seconds (2) after a warm-up of a tenth of that.
 * Then the baselines: TCP request/response at 64 B (bl_tcp_best, up to
 * --depth in flight), and the ring stream and ring request/response with
 * as many 64-byte slots as a message ring has bytes / 64.
 * Output: a table, then, last, one JSON line (bench/README.md).
 */
#include "msg_bench.h"

#include "benchopts.h"
#include "benchreport.h"
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* ---- output -------------------------------------------------------------- */

static void print_goal(const char *name, double v, bool known, double target,
                       bool met, bool last)
{
	static const struct br_style style = {{'f', 3}, {'f', 1}, false};
	struct br_goal g = {name, known ? v : NAN, target, known && met, NULL,
	                    NULL};
	br_goal(stdout, &style, &g, !last);
}

static void print_bl(const char *name, int rc, const struct bl_result *r,
                     bool lat)
{
	if (rc) {
		printf("\"%s\": null, ", name);
		return;
	}
	printf("\"%s\": {\"rate\": %.0f", name, r->rate);
	if (lat)
		printf(", \"p50_ns\": %.0f, \"p99_ns\": %.0f", r->p50_ns,
		       r->p99_ns);
	printf("}, ");
}

/* The 64-byte goals, from the results and the baselines of one run. */
struct goals64 {
	const struct size_res *r64;
	bool tcp_ok, ring_ok, tcp1_ok, rrr_ok;
	double best, rr, rtt, ow, rr1, rtt_ring;
	/* The plain ring's request/response rate over TCP's one in flight:
	 * what rr1 against TCP could reach with messaging costing nothing
	 * (0: not measured). */
	double ring_rr1;
};

static struct goals64 goals64(const struct opts *o, const struct size_res *res,
                              const struct base_res *br)
{
	struct goals64 g = {0};
	for (unsigned i = 0; i < o->nsizes; i++)
		if (res[i].size == 64)
			g.r64 = &res[i];
	const struct size_res *r = g.r64;
	if (!r)
		return g;
	g.best = BU_MAX(r->rr1.rate, r->rrn.rate);
	g.tcp_ok = o->baseline && br->tcp_rc == 0 && br->tcp.rate > 0;
	g.ring_ok = o->baseline && br->stream_rc == 0 && br->stream.rate > 0;
	g.rr = g.tcp_ok ? g.best / br->tcp.rate : 0;
	g.rtt = r->rr1.p50_ns / 1e3;
	g.ow = g.ring_ok ? r->oneway_rate / br->stream.rate : 0;
	/* One in flight: the rates of two busy-polling processes swing with
	 * the host's load far more than their p50s, hence the p50s for the
	 * ring's goal. */
	g.tcp1_ok = g.tcp_ok && br->tcp1.rate > 0;
	g.rrr_ok = o->baseline && br->rr_rc == 0 && br->rr.p50_ns > 0 &&
	           r->rr1.p50_ns > 0;
	g.rr1 = g.tcp1_ok ? r->rr1.rate / br->tcp1.rate : 0;
	g.rtt_ring = g.rrr_ok ? br->rr.p50_ns / r->rr1.p50_ns : 0;
	if (g.tcp1_ok && br->rr_rc == 0)
		g.ring_rr1 = br->rr.rate / br->tcp1.rate;
	return g;
}

static void print_summary(const struct goals64 *g)
{
	const struct size_res *r64 = g->r64;
	printf("\n64 B: best msg request/response %.3f M/s", g->best / 1e6);
	if (g->tcp_ok)
		printf(" = %.1fx TCP (goal %.0fx)", g->rr, GOAL_RR_VS_TCP);
	if (g->tcp1_ok)
		printf("; with 1 in flight each, %.3f M/s = %.1fx TCP (goal "
		       "%.0fx)",
		       r64->rr1.rate / 1e6, g->rr1, GOAL_RR1_VS_TCP1);
	if (g->ring_rr1 > 0)
		printf(" (the plain ring's request/response: %.1fx)",
		       g->ring_rr1);
	printf("; round trip p50 %.2f us (goal < %.1f us)", g->rtt,
	       GOAL_RTT_US);
	if (g->rrr_ok)
		printf(" = %.2fx the plain ring's (goal %.1fx)", g->rtt_ring,
		       GOAL_RTT_VS_RING);
	printf("; one-way %.3f M/s", r64->oneway_rate / 1e6);
	if (g->ring_ok)
		printf(" = %.2fx the plain ring (goal %.1fx)", g->ow,
		       GOAL_ONEWAY);
	printf("\n");
}

static void print_goals(const struct goals64 *g)
{
	bool k = g->r64 != NULL;
	print_goal("rr_vs_tcp_64B", g->rr, k && g->tcp_ok, GOAL_RR_VS_TCP,
	           g->rr >= GOAL_RR_VS_TCP, false);
	print_goal("rtt_p50_us_64B", g->rtt, k, GOAL_RTT_US,
	           g->rtt < GOAL_RTT_US, false);
	print_goal("oneway_vs_ring_64B", g->ow, k && g->ring_ok, GOAL_ONEWAY,
	           g->ow >= GOAL_ONEWAY, false);
	print_goal("rr1_vs_tcp1_64B", g->rr1, k && g->tcp1_ok, GOAL_RR1_VS_TCP1,
	           g->rr1 >= GOAL_RR1_VS_TCP1, false);
	print_goal("rtt_vs_ring_rtt_64B", g->rtt_ring, k && g->rrr_ok,
	           GOAL_RTT_VS_RING, g->rtt_ring >= GOAL_RTT_VS_RING, true);
}

void print_results(const struct opts *o, const struct size_res *res,
                   const struct base_res *br)
{
	printf("\nsize (B)  rr1: M/s   p50 us   p99 us | rr%-3u M/s   p50 us "
	       "  p99 us  msg/frame | oneway M/s  msg/frame\n",
	       o->depth);
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct size_res *r = &res[i];
		printf("%8" PRIu32 "  %8.3f %8.2f %8.2f | %8.3f %8.2f %8.2f "
		       "%10.1f | %10.3f %10.1f\n",
		       r->size, r->rr1.rate / 1e6, r->rr1.p50_ns / 1e3,
		       r->rr1.p99_ns / 1e3, r->rrn.rate / 1e6,
		       r->rrn.p50_ns / 1e3, r->rrn.p99_ns / 1e3,
		       r->rrn.msgs_per_frame, r->oneway_rate / 1e6,
		       r->oneway_msgs_per_frame);
	}
	struct goals64 g = goals64(o, res, br);
	if (g.r64)
		print_summary(&g);

	printf("{\"bench\": \"msg_bench\", \"provider\": \"%s\", "
	       "\"network\": \"%s\", \"threads\": 1, \"busy_poll\": true, "
	       "\"pinned\": %s, "
	       "\"ring_size\": %" PRIu32 ", \"depth\": %u, "
	       "\"flush_every\": %d, \"send_batch\": %u, \"seconds\": %.3g, "
	       "\"results\": [",
	       o->net.fabric, bnet_network(&o->net),
	       o->cpu[0] >= 0 ? "true" : "false", o->ring_size, o->depth,
	       o->flush_every, o->send_batch, o->seconds);
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct size_res *r = &res[i];
		printf("%s{\"size\": %" PRIu32 ", \"rr1_rate\": %.0f, "
		       "\"rr1_p50_ns\": %.0f, \"rr1_p99_ns\": %.0f, "
		       "\"rr1_max_ns\": %.0f, \"rrn_rate\": %.0f, "
		       "\"rrn_p50_ns\": %.0f, \"rrn_p99_ns\": %.0f, "
		       "\"rrn_max_ns\": %.0f, \"rrn_msgs_per_frame\": %.2f, "
		       "\"oneway_rate\": %.0f, \"oneway_msgs_per_frame\": "
		       "%.2f, \"oneway_queued\": %" PRIu64
		       ", \"oneway_nobufs\": %" PRIu64 "}",
		       i ? ", " : "", r->size, r->rr1.rate, r->rr1.p50_ns,
		       r->rr1.p99_ns, r->rr1.max_ns, r->rrn.rate, r->rrn.p50_ns,
		       r->rrn.p99_ns, r->rrn.max_ns, r->rrn.msgs_per_frame,
		       r->oneway_rate, r->oneway_msgs_per_frame,
		       r->oneway_queued, r->oneway_nobufs);
	}
	printf("], \"baseline\": {");
	if (o->baseline) {
		print_bl("tcp_best_64B", br->tcp_rc, &br->tcp, true);
		print_bl("tcp_1inflight_64B", br->tcp_rc, &br->tcp1, true);
		printf("\"tcp_best_which\": \"%s\", ",
		       br->tcp_rc ? "" : br->tcp_which);
		print_bl("ring_stream", br->stream_rc, &br->stream, false);
		print_bl("ring_rr", br->rr_rc, &br->rr, true);
		printf("\"ring_slots\": %u", br->slots);
	}
	if (g.ring_rr1 > 0)
		printf("}, \"ratios\": {\"ring_rr_vs_tcp1_64B\": %.3f",
		       g.ring_rr1);
	printf("}, \"goals\": {");
	/* The goals across hosts are kv_bench's: none here. */
	if (bnet_shm(&o->net))
		print_goals(&g);
	printf("}}\n");
	fflush(stdout);
}

/* ---- options and main --------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: msg_bench [OPTIONS]\n"
	        "\n"
	        "Request/response and one-way messaging (farm_msg) between\n"
	        "two machine processes on the shm fabric, one busy-polling\n"
	        "loop each, against TCP loopback and a plain shared-memory\n"
	        "ring measured in the same run. Prints a table, then one\n"
	        "JSON line (last).\n"
	        "\n"
	        "  --sizes LIST       payload sizes in bytes, comma-separated\n"
	        "                     (default 16,64,128,256,512)\n"
	        "  --seconds S        length of one measurement, after a\n"
	        "                     warm-up of a tenth of it (default 2)\n"
	        "  --depth N          calls outstanding in the pipelined\n"
	        "                     run, and TCP's largest window\n"
	        "                     (default 64, max %u)\n"
	        "  --ring-size SZ     bytes of each message ring, a power of\n"
	        "                     two, 4K..64M (default 256K)\n"
	        "  --send-batch N     one-way: sends between loop polls (0:\n"
	        "                     poll only when a send says -ENOBUFS;\n"
	        "                     default 128)\n"
	        "  --flush-every N    pipelined run: farm_loop_flush() after\n"
	        "                     every N calls issued (0: only at the\n"
	        "                     end of each loop pass; default depth/4)\n"
	        "  --no-baseline      skip TCP and the plain ring (goals\n"
	        "                     that need them report null)\n"
	        "  --no-pin           do not pin the two machines to the\n"
	        "                     first two CPUs while messaging\n"
	        "  --runs LIST        measurements to make, of rr1,rrn,oneway\n"
	        "                     (default all; those left out report 0:\n"
	        "                     for profiling)\n"
	        "  --fabric NAME      shm (default) or ofi (libfabric\n"
	        "                     tcp;ofi_rxm over loopback)\n"
	        "  --netns            ofi across network namespaces (client\n"
	        "                     in the first machine namespace, server\n"
	        "                     in the second; no baselines); run it\n"
	        "                     under scripts/netns-cluster run\n"
	        "                     --net-only --\n"
	        "  --quick            0.2 s measurements (smoke test)\n"
	        "  -h, --help         this text\n",
	        MAX_DEPTH);
}

enum {
	O_SIZES = 256,
	O_SECONDS,
	O_DEPTH,
	O_RING,
	O_BATCH,
	O_FLUSH,
	O_NOBASE,
	O_NOPIN,
	O_RUNS,
	O_QUICK,
	O_FABRIC,
	O_NETNS
};
static const struct option lopts[] = {
        {"sizes", required_argument, NULL, O_SIZES},
        {"seconds", required_argument, NULL, O_SECONDS},
        {"depth", required_argument, NULL, O_DEPTH},
        {"ring-size", required_argument, NULL, O_RING},
        {"send-batch", required_argument, NULL, O_BATCH},
        {"flush-every", required_argument, NULL, O_FLUSH},
        {"no-baseline", no_argument, NULL, O_NOBASE},
        {"no-pin", no_argument, NULL, O_NOPIN},
        {"runs", required_argument, NULL, O_RUNS},
        {"quick", no_argument, NULL, O_QUICK},
        {"fabric", required_argument, NULL, O_FABRIC},
        {"netns", no_argument, NULL, O_NETNS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
};

/* --runs: bit i of RUN_* is run_names[i]. */
static const char *const run_names[] = {"rr1", "rrn", "oneway"};

/* What the option handlers fill in (bo_getopt's context). */
struct opt_ctx {
	struct opts *o;
	bool *set_seconds;
};

/* A number option @c's value @arg into @o. 0, -EINVAL, or 1 (not a
 * number option). */
static int opt_number(int c, const char *arg, void *ctx)
{
	struct opts *o = ((struct opt_ctx *)ctx)->o;
	uint64_t v = 0;
	bool bad = bu_parse_size(arg, &v) != 0;
	switch (c) {
	case O_DEPTH:
		bad = bad || v < 1 || v > MAX_DEPTH;
		o->depth = (unsigned)v;
		break;
	case O_RING:
		bad = bad || !bu_is_pow2(v) || v < (4u << 10) ||
		      v > (64u << 20);
		o->ring_size = (uint32_t)v;
		break;
	case O_BATCH:
		bad = bad || v > 1000000;
		o->send_batch = (unsigned)v;
		break;
	case O_FLUSH:
		bad = bad || v > MAX_DEPTH;
		o->flush_every = (int)v;
		break;
	default: return 1;
	}
	return bad ? -EINVAL : 0;
}

/* Any other option. 0, -EINVAL, or 1 (not one). */
static int opt_other(int c, const char *arg, void *ctx)
{
	struct opts *o = ((struct opt_ctx *)ctx)->o;
	bool *secs = ((struct opt_ctx *)ctx)->set_seconds;
	char *end;
	switch (c) {
	case O_SIZES:
		return bo_parse_sizes(arg, 0, 1u << 24, o->sizes, MAX_SIZES,
		                      &o->nsizes);
	case O_SECONDS:
		o->seconds = strtod(arg, &end);
		*secs = true;
		return *end || !(o->seconds >= 0.01 && o->seconds <= 600)
		               ? -EINVAL
		               : 0;
	case O_NOBASE: o->baseline = false; return 0;
	case O_NOPIN: o->pin = false; return 0;
	case O_RUNS:
		return bo_parse_names(arg, run_names, BU_ARRAY_SIZE(run_names),
		                      &o->runs);
	case O_QUICK: o->quick = true; return 0;
	case O_FABRIC: return bnet_set_fabric(&o->net, arg) ? -EINVAL : 0;
	case O_NETNS: o->net.netns = true; return 0;
	default: return 1;
	}
}

/* After the options: --quick's seconds, the network, the flush interval
 * and the CPUs. 0 or -EINVAL. */
static int finish_opts(struct opts *o, bool set_seconds)
{
	if (o->quick && !set_seconds)
		o->seconds = 0.2;
	if (bnet_check(&o->net, PROG, 2))
		return -EINVAL;
	if (o->net.netns)
		o->baseline = false; /* TCP and the ring run on one host */
	if (o->flush_every < 0)
		o->flush_every = (int)BU_MAX(o->depth / 4, 1u);
	/* The first two CPUs we may use: one machine on each. */
	cpu_set_t set;
	if (o->pin && sched_getaffinity(0, sizeof(set), &set) == 0 &&
	    CPU_COUNT(&set) >= 2) {
		for (int i = 0, k = 0; i < CPU_SETSIZE && k < 2; i++)
			if (CPU_ISSET(i, &set))
				o->cpu[k++] = i;
	}
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	bool set_seconds = false;
	*o = (struct opts){.sizes = {16, 64, 128, 256, 512},
	                   .nsizes = 5,
	                   .seconds = 2.0,
	                   .depth = 64,
	                   .ring_size = 256u << 10,
	                   .send_batch = 128,
	                   .flush_every = -1,
	                   .baseline = true,
	                   .pin = true,
	                   .cpu = {-1, -1},
	                   .runs = RUN_RR1 | RUN_RRN | RUN_ONEWAY,
	                   .net = BNET_DEFAULT};
	static const struct bo_parser parser = {PROG, lopts, usage, opt_number,
	                                        opt_other};
	struct opt_ctx ctx = {o, &set_seconds};
	if (bo_getopt(&parser, argc, argv, &ctx))
		return -EINVAL;
	return finish_opts(o, set_seconds);
}

/* The machines' directories under a fresh one in /dev/shm (or $TMPDIR,
 * /tmp). 0, or 1 (said). */
static int make_dirs(char *base, size_t blen, char *sdir, char *cdir,
                     size_t dlen)
{
	const char *tmp = "/dev/shm";
	if (access(tmp, W_OK) != 0) {
		tmp = getenv("TMPDIR");
		if (!tmp || !*tmp)
			tmp = "/tmp";
	}
	if (snprintf(base, blen, "%s/msg_bench.XXXXXX", tmp) >= (int)blen) {
		fprintf(stderr, PROG ": temporary directory name too long\n");
		return 1;
	}
	if (!mkdtemp(base)) {
		fprintf(stderr, PROG ": cannot create a directory in %s: %s\n",
		        tmp, strerror(errno));
		return 1;
	}
	snprintf(sdir, dlen, "%s/m%u", base, SERVER_ID);
	snprintf(cdir, dlen, "%s/m%u", base, CLIENT_ID);
	return 0;
}

static void close_pipes(int *down, int *up)
{
	for (int i = 0; i < 2; i++) {
		if (down[i] >= 0)
			close(down[i]);
		if (up[i] >= 0)
			close(up[i]);
	}
}

/* The server's process (forked): serve until told to go. */
static void server_child(const struct opts *o, const char *base,
                         const char *sdir, int *down, int *up, pid_t parent)
{
	close(down[1]);
	close(up[0]);
	/* Go when the client goes, however it goes. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	int rc = 1;
	if (getppid() != parent)
		bu_rm_tree(AT_FDCWD, base, 2);
	else if (bnet_enter(&o->net, SERVER_ID))
		rc = 1;
	else if (!interrupted)
		rc = server_main(o, base, sdir, down[0], up[1], parent);
	fflush(NULL);
	_exit(rc);
}

/* Tell the server @pid to go, and wait for it to have cleaned up; one
 * that is still polling (@serving) does not read its pipe: kill it (its
 * files go with the directory). Returns @rc, or -ECHILD when the server
 * exited badly. */
static int stop_server(pid_t pid, int down, int up, bool serving, int rc)
{
	if (serving)
		kill(pid, SIGKILL);
	else if (write(down, "q", 1) != 1 && errno != EPIPE)
		fprintf(stderr, PROG ": cannot stop the server: %s\n",
		        strerror(errno));
	close(down);
	close(up);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = -1;
			break;
		}
	}
	if (status != 0 && rc == 0 && !serving) {
		fprintf(stderr, PROG ": the server exited badly (status %#x)\n",
		        (unsigned)status);
		rc = -ECHILD;
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse_opts(argc, argv, &o))
		return 2;

	bu_on_stop(on_signal);
	signal(SIGCHLD, SIG_DFL); /* the baselines reap their helpers */

	char base[512], sdir[600], cdir[600];
	if (make_dirs(base, sizeof(base), sdir, cdir, sizeof(sdir)))
		return 1;
	int down[2] = {-1, -1}, up[2] = {-1, -1};
	if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		close_pipes(down, up);
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		close_pipes(down, up);
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	if (pid == 0)
		server_child(&o, base, sdir, down, up, parent);
	close(down[0]);
	close(up[1]);

	bool serving = false;
	int rc = bnet_enter(&o.net, CLIENT_ID)
	                 ? -ENOENT
	                 : client_main(&o, cdir, down[1], up[0], &serving);
	rc = stop_server(pid, down[1], up[0], serving, rc);
	bu_rm_tree(AT_FDCWD, base, 2);
	if (interrupted && rc) {
		fprintf(stderr, PROG ": interrupted\n");
		return 130;
	}
	return rc ? 1 : 0;
}
