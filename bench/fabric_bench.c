/*
 * fabric_bench: one-sided READ and WRITE between two machine processes,
 * against a plain memcpy from the same memory; with --fabric ofi
 * the same over libfabric (tcp;ofi_rxm, software RMA) on loopback, or with
 * --netns across network namespaces, with the CPU time the
 * target spends per request (its progress thread does the work a NIC
 * would).
 *
 * The process forks a target machine: it opens its own fabric on a data
 * directory under /dev/shm, creates a region (1 GiB by default), touches
 * every page of it, sends its fabric address and region descriptor up a
 * pipe, then blocks reading a second pipe until told to go (no CPU while
 * being measured). The parent, the initiator, opens its own fabric,
 * connects, maps the target's region file read-only for the memcpy
 * baseline, faults in both of its mappings of the region, then measures,
 * for each size:
 *   rate     READ, WRITE and memcpy at random cache-line-aligned offsets
 *            over the whole region (one precomputed array, the same for all
 *            variants). READ and WRITE keep up to --outstanding requests in
 *            flight: every --signal-every'th request is signaled (default
 *            half the window), the CQ is polled one completion at a time
 *            (in order, it retires the requests before it too) and the
 *            freed slots are re-posted as one list. memcpy copies into the
 *            same rotating slots. Each run lasts --seconds; runs are
 *            repeated --repeat times, interleaved across variants and
 *            sizes, and the median run is reported;
 *   latency  READ and WRITE with one request in flight (post, poll until
 *            it completes), median and 99th percentile over --samples,
 *            each (variant, size) at offsets no other run touched.
 * Target CPU: the target's CPU time (all its threads, schedstat) over each
 * run, per request. On shm it is nil (the target sleeps in read(2)); on ofi
 * it is the software RMA's cost.
 * --fabric ofi or udp: the region is anonymous memory, no file to map: no
 * memcpy baseline. --netns (under scripts/netns-cluster run --net-only): the
 * target runs in the first machine namespace, the initiator in the second,
 * over the veth links (bench/lib/benchnet.h).
 * Output: a table, then, last, one JSON line (bench/README.md).
 */
#include "fabric_bench.h"

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
#include <sys/wait.h>
#include <unistd.h>

volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* ---- output ------------------------------------------------------------ */

void print_table(const struct opts *o, const struct result *res)
{
	printf("\n%8s %11s %11s %11s %11s %17s %17s\n", "size", "READ", "WRITE",
	       "memcpy", "READ/", "READ ns", "WRITE ns");
	/* ofi runs thousands, not millions, of requests a second. */
	double unit = is_shm(o) ? 1 : 1e3;
	const char *un = is_shm(o) ? "Mops/s" : "kops/s";
	printf("%8s %11s %11s %11s %11s %17s %17s\n", "bytes", un, un, un,
	       "memcpy", "p50 / p99", "p50 / p99");
	for (unsigned i = 0; i < o->nsizes && !is_shm(o); i++) {
		const struct result *r = &res[i];
		if (i == 0)
			printf("%8s %23s %23s %23s\n", "size",
			       "target CPU ns/READ", "target CPU ns/WRITE",
			       "initiator CPU ns/op");
		printf("%8" PRIu32 " %11.0f / %9.0f %11.0f / %9.0f %11.0f / "
		       "%9.0f\n",
		       o->sizes[i], median(r->read_tcpu, o->repeat),
		       r->read_lat_tcpu, median(r->write_tcpu, o->repeat),
		       r->write_lat_tcpu, median(r->read_icpu, o->repeat),
		       median(r->write_icpu, o->repeat));
		if (i + 1 == o->nsizes)
			printf("(target: loaded rate run / one in flight; "
			       "initiator: READ / WRITE in rate runs)\n");
	}
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct result *r = &res[i];
		double rd = median(r->read_mops, o->repeat);
		double wr = median(r->write_mops, o->repeat);
		double mc = median(r->memcpy_mops, o->repeat);
		char rl[32], wl[32];
		snprintf(rl, sizeof(rl), "%" PRIu64 " / %" PRIu64, r->read_p50,
		         r->read_p99);
		snprintf(wl, sizeof(wl), "%" PRIu64 " / %" PRIu64, r->write_p50,
		         r->write_p99);
		printf("%8" PRIu32 " %11.2f %11.2f %11.2f %11.3f %17s %17s\n",
		       o->sizes[i], rd * unit, wr * unit, mc * unit,
		       mc > 0 ? rd / mc : 0.0, rl, wl);
	}
	printf("\n");
	fflush(stdout);
}

/* READ/memcpy at @size in @res, or -1 (not measured). */
static double read_vs_memcpy(const struct opts *o, const struct result *res,
                             uint32_t size)
{
	if ((o->ops & (OP_READ | OP_MEMCPY)) != (OP_READ | OP_MEMCPY))
		return -1;
	for (unsigned i = 0; i < o->nsizes; i++) {
		if (o->sizes[i] != size)
			continue;
		double mc = median(res[i].memcpy_mops, o->repeat);
		return mc > 0 ? median(res[i].read_mops, o->repeat) / mc : 0.0;
	}
	return -1;
}

/* A JSON results array of @res. */
static void print_json_results(const struct opts *o, const struct result *res)
{
	printf("[");
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct result *r = &res[i];
		double rd = median(r->read_mops, o->repeat);
		double wr = median(r->write_mops, o->repeat);
		double mc = median(r->memcpy_mops, o->repeat);
		double ratio = mc > 0 ? rd / mc : 0.0;
		printf("%s{\"size\": %" PRIu32 ", \"read_mops\": %.3f, "
		       "\"write_mops\": %.3f, \"memcpy_mops\": %.3f, "
		       "\"read_over_memcpy\": %.3f, \"read_p50_ns\": %" PRIu64
		       ", \"read_p99_ns\": %" PRIu64
		       ", \"write_p50_ns\": %" PRIu64
		       ", \"write_p99_ns\": %" PRIu64
		       ", \"read_target_cpu_ns_per_op\": %.0f"
		       ", \"write_target_cpu_ns_per_op\": %.0f"
		       ", \"read_target_cpu_ns_one_in_flight\": %.0f"
		       ", \"write_target_cpu_ns_one_in_flight\": %.0f"
		       ", \"read_initiator_cpu_ns_per_op\": %.1f"
		       ", \"write_initiator_cpu_ns_per_op\": %.0f"
		       ", \"memcpy_cpu_ns_per_op\": %.1f}",
		       i ? ", " : "", o->sizes[i], rd, wr, mc, ratio,
		       r->read_p50, r->read_p99, r->write_p50, r->write_p99,
		       median(r->read_tcpu, o->repeat),
		       median(r->write_tcpu, o->repeat), r->read_lat_tcpu,
		       r->write_lat_tcpu, median(r->read_icpu, o->repeat),
		       median(r->write_icpu, o->repeat),
		       median(r->memcpy_icpu, o->repeat));
	}
	printf("]");
}

/* The measurement the goals are judged on: 2 MiB pages when measured. */
static const struct page_out *judged(const struct page_out *out, unsigned n)
{
	const struct page_out *j = NULL;
	for (unsigned i = 0; i < n; i++)
		if (out[i].done && (!j || out[i].pages == BP_2M))
			j = &out[i];
	return j;
}

/* With both page sizes: READ/memcpy side by side. */
static void print_pages_summary(const struct opts *o,
                                const struct page_out *out, unsigned n)
{
	if (n < 2 || !out[0].done || !out[1].done)
		return;
	printf("pages: READ/memcpy (READ Mops/s), region resident by 2 MiB "
	       "entries %.0f%% / %.0f%%\n%8s %21s %21s\n",
	       100 * BU_MAX(bp_huge_share(&out[0].huge), 0.0),
	       100 * BU_MAX(bp_huge_share(&out[1].huge), 0.0), "bytes",
	       bp_words(out[0].pages), bp_words(out[1].pages));
	for (unsigned i = 0; i < o->nsizes; i++) {
		char c[2][40];
		for (int k = 0; k < 2; k++)
			snprintf(c[k], sizeof(c[k]), "%.3f (%.2f)",
			         read_vs_memcpy(o, out[k].res, o->sizes[i]),
			         median(out[k].res[i].read_mops, o->repeat));
		printf("%8" PRIu32 " %21s %21s\n", o->sizes[i], c[0], c[1]);
	}
	printf("\n");
}

/* Last: the one JSON line. "results" holds the judged measurement's
 * figures (as before --pages), "results_4k" / "results_2m" each page
 * size's. */
static void print_json(const struct opts *o, const struct page_out *out,
                       unsigned n)
{
	const struct page_out *j = judged(out, n);
	if (!j)
		return;
	printf("{\"bench\": \"fabric_bench\", \"provider\": \"%s\", "
	       "\"network\": \"%s\", "
	       "\"region_bytes\": %" PRIu64 ", \"outstanding\": %u, ",
	       o->net.fabric, bnet_network(&o->net), j->region_bytes,
	       o->outstanding);
	if (j->pages)
		printf("\"pages\": \"%s\", ", bp_key(j->pages));
	for (unsigned i = 0; i < n; i++)
		if (out[i].done && out[i].pages)
			printf("\"huge_share_%s\": %.3f, ",
			       bp_key(out[i].pages),
			       bp_huge_share(&out[i].huge));
	printf("\"results\": ");
	print_json_results(o, j->res);
	for (unsigned i = 0; i < n; i++) {
		if (!out[i].done || !out[i].pages)
			continue;
		printf(", \"results_%s\": ", bp_key(out[i].pages));
		print_json_results(o, out[i].res);
	}
	printf(", \"goals\": {");
	if (!is_shm(o)) {
		/* The goals across hosts are kv_bench's: none here. */
		printf("}}\n");
		fflush(stdout);
		return;
	}
	static const char *const names[2] = {"read_64B_vs_memcpy",
	                                     "read_256B_vs_memcpy"};
	static const uint32_t sizes[2] = {64, 256};
	static const struct br_style style = {{'f', 3}, {'f', 1}, false};
	for (int g = 0; g < 2; g++) {
		double v = read_vs_memcpy(o, j->res, sizes[g]);
		struct br_goal bg = {names[g], v < 0 ? NAN : v, 0.7, v >= 0.7,
		                     NULL,     bp_key(j->pages)};
		br_goal(stdout, &style, &bg, g < 1);
	}
	printf("}}\n");
	fflush(stdout);
}

/* ---- options and main ---------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: fabric_bench [OPTIONS]\n"
	        "\n"
	        "One-sided READ and WRITE rate and latency over the shm\n"
	        "fabric between two machine processes, against memcpy from\n"
	        "the same memory; or over libfabric (--fabric ofi), with the\n"
	        "target's CPU time per request. Prints a table, then one JSON\n"
	        "line (last).\n"
	        "\n"
	        "  --fabric NAME      shm (default), udp (datagrams) or ofi\n"
	        "                     (libfabric tcp;ofi_rxm), over loopback;\n"
	        "                     udp, ofi: no memcpy\n"
	        "                     baseline; defaults: region 64M, 2000\n"
	        "                     latency samples)\n"
	        "  --netns            ofi across network namespaces: target "
	        "in\n"
	        "                     the first machine namespace, initiator\n"
	        "                     in the second; run it under\n"
	        "                     scripts/netns-cluster run --net-only --\n"
	        "  --sizes LIST       request sizes in bytes, comma-separated\n"
	        "                     (default 64,256,1024,4096,8192)\n"
	        "  --seconds S        length of one rate run (default 1)\n"
	        "  --repeat N         rate runs per variant and size; the\n"
	        "                     median is reported (default 3, max %d)\n"
	        "  --region-size SZ   target region, a power of two, 1M..4G\n"
	        "                     (default 1G)\n"
	        "  --outstanding N    requests in flight in rate runs\n"
	        "                     (default 16, max %d)\n"
	        "  --samples N        latency samples per size (default\n"
	        "                     20000)\n"
	        "  --offsets N        random offsets, a power of two\n"
	        "                     (default %u, fewer for small regions)\n"
	        "  --signal-every N   in rate runs, signal every Nth request\n"
	        "                     (default: outstanding / 2)\n"
	        "  --ops LIST         variants to run, of read,write,memcpy\n"
	        "                     (default all; those left out report 0:\n"
	        "                     for profiling)\n"
	        "  --pin CPU          pin the initiator to CPU\n"
	        "  --pages P          shm: the region's pages, 4k, 2m or both\n"
	        "                     (default: both where this host allows\n"
	        "                     a private huge tmpfs, else 4k; goals\n"
	        "                     judged on 2m when measured)\n"
	        "  --quick            small region, short runs (smoke test)\n"
	        "  -h, --help         this text\n",
	        MAX_REPEAT, MAX_OUTSTANDING, DEFAULT_OFFSETS);
}

/* Which defaults the options overrode (the network's and --quick's apply
 * only to the others). */
struct explicit_opts {
	bool region, seconds, repeat, samples;
};

/* After the options: the network's and --quick's defaults, then the
 * checks across options. 0 or -EINVAL (said on stderr). */
static int finish_opts(struct opts *o, struct explicit_opts set)
{
	if (bnet_check(&o->net, PROG, 2))
		return -EINVAL;
	if (o->pages && !is_shm(o)) {
		fprintf(stderr, PROG ": --pages is for the shm fabric (the "
		                     "others' regions are anonymous memory)\n");
		return -EINVAL;
	}
	if (!is_shm(o)) {
		/* Anonymous memory: no region file for memcpy to read. Software
		 * RMA over TCP: a smaller region and fewer samples keep the
		 * run within minutes. */
		o->ops &= ~OP_MEMCPY;
		if (!set.region)
			o->region_size = 64ull << 20;
		if (!set.samples)
			o->samples = 2000;
	}
	if (o->quick) {
		if (!set.region)
			o->region_size = 16ull << 20;
		if (!set.seconds)
			o->seconds = 0.05;
		if (!set.repeat)
			o->repeat = 1;
		if (!set.samples)
			o->samples = 2000;
	}
	if (!bu_is_pow2(o->region_size) ||
	    o->region_size < FARM_REGION_MIN_SIZE ||
	    o->region_size > FARM_REGION_MAX_SIZE) {
		fprintf(stderr, PROG ": --region-size must be a power of two "
		                     "from 1M to 4G\n");
		return -EINVAL;
	}
	if (max_size(o) > o->region_size / 2) {
		fprintf(stderr, PROG ": sizes must be at most half the "
		                     "region\n");
		return -EINVAL;
	}
	if (!o->signal_every)
		o->signal_every = BU_MAX(o->outstanding / 2, 1u);
	if (o->signal_every > o->outstanding) {
		fprintf(stderr, PROG ": --signal-every must be at most "
		                     "--outstanding\n");
		return -EINVAL;
	}
	if (!o->noffsets) {
		/* At most one offset per 4 lines of the region. */
		o->noffsets = DEFAULT_OFFSETS;
		while (o->noffsets > o->region_size / (4 * FARM_CACHE_LINE))
			o->noffsets >>= 1;
	}
	return 0;
}

enum {
	O_SIZES = 256,
	O_SECONDS,
	O_REPEAT,
	O_REGION,
	O_OUTSTANDING,
	O_SAMPLES,
	O_OFFSETS,
	O_SIGNAL,
	O_OPS,
	O_PIN,
	O_QUICK,
	O_FABRIC,
	O_NETNS,
	O_PAGES
};
static const struct option lopts[] = {
        {"sizes", required_argument, NULL, O_SIZES},
        {"seconds", required_argument, NULL, O_SECONDS},
        {"repeat", required_argument, NULL, O_REPEAT},
        {"region-size", required_argument, NULL, O_REGION},
        {"outstanding", required_argument, NULL, O_OUTSTANDING},
        {"samples", required_argument, NULL, O_SAMPLES},
        {"offsets", required_argument, NULL, O_OFFSETS},
        {"signal-every", required_argument, NULL, O_SIGNAL},
        {"ops", required_argument, NULL, O_OPS},
        {"pin", required_argument, NULL, O_PIN},
        {"quick", no_argument, NULL, O_QUICK},
        {"fabric", required_argument, NULL, O_FABRIC},
        {"netns", no_argument, NULL, O_NETNS},
        {"pages", required_argument, NULL, O_PAGES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
};

/* --ops: bit i of OP_* is op_names[i]. */
static const char *const op_names[] = {"read", "write", "memcpy"};

/* What the option handlers fill in (bo_getopt's context). */
struct opt_ctx {
	struct opts *o;
	struct explicit_opts *set;
};

/* A number option @c's value @arg into @o (@set: which were given). 0,
 * -EINVAL, or 1 (not a number option). */
static int opt_number(int c, const char *arg, void *ctx)
{
	struct opts *o = ((struct opt_ctx *)ctx)->o;
	struct explicit_opts *set = ((struct opt_ctx *)ctx)->set;
	uint64_t v = 0;
	bool bad = bu_parse_size(arg, &v) != 0;
	switch (c) {
	case O_REPEAT:
		bad = bad || v < 1 || v > MAX_REPEAT;
		o->repeat = (unsigned)v;
		set->repeat = true;
		break;
	case O_REGION:
		o->region_size = v;
		set->region = true;
		break;
	case O_OUTSTANDING:
		bad = bad || v < 1 || v > MAX_OUTSTANDING;
		o->outstanding = (unsigned)v;
		break;
	case O_SAMPLES:
		bad = bad || v < 1 || v > 100000000;
		o->samples = (unsigned)v;
		set->samples = true;
		break;
	case O_OFFSETS:
		bad = bad || !bu_is_pow2(v) || v > (1u << 28);
		o->noffsets = (size_t)v;
		break;
	case O_SIGNAL:
		bad = bad || v < 1 || v > MAX_OUTSTANDING;
		o->signal_every = (unsigned)v;
		break;
	case O_PIN:
		bad = bad || v >= CPU_SETSIZE;
		o->pin = (int)v;
		break;
	default: return 1;
	}
	return bad ? -EINVAL : 0;
}

/* Any other option. 0, -EINVAL, or 1 (not one). */
static int opt_other(int c, const char *arg, void *ctx)
{
	struct opts *o = ((struct opt_ctx *)ctx)->o;
	struct explicit_opts *set = ((struct opt_ctx *)ctx)->set;
	char *end;
	switch (c) {
	case O_SIZES:
		return bo_parse_sizes(arg, 1, FARM_FABRIC_MAX_OP, o->sizes,
		                      MAX_SIZES, &o->nsizes);
	case O_SECONDS:
		o->seconds = strtod(arg, &end);
		set->seconds = true;
		return *end || !(o->seconds > 0 && o->seconds <= 3600) ? -EINVAL
		                                                       : 0;
	case O_OPS:
		return bo_parse_names(arg, op_names, BU_ARRAY_SIZE(op_names),
		                      &o->ops);
	case O_QUICK: o->quick = true; return 0;
	case O_FABRIC: return bnet_set_fabric(&o->net, arg) ? -EINVAL : 0;
	case O_NETNS: o->net.netns = true; return 0;
	case O_PAGES: return bp_parse(arg, &o->pages);
	default: return 1;
	}
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	struct explicit_opts set = {false, false, false, false};
	*o = (struct opts){.region_size = 1ull << 30,
	                   .sizes = {64, 256, 1024, 4096, 8192},
	                   .nsizes = 5,
	                   .seconds = 1.0,
	                   .outstanding = 16,
	                   .repeat = 3,
	                   .samples = 20000,
	                   .ops = OP_READ | OP_WRITE | OP_MEMCPY,
	                   .net = BNET_DEFAULT,
	                   .pin = -1};
	static const struct bo_parser parser = {PROG, lopts, usage, opt_number,
	                                        opt_other};
	struct opt_ctx ctx = {o, &set};
	if (bo_getopt(&parser, argc, argv, &ctx))
		return -EINVAL;
	return finish_opts(o, set);
}

/* One measurement (bp_run's function): a target forked, the initiator
 * here, both directories under /dev/shm removed after. */
struct run_arg {
	const struct opts *o;
	struct page_out *out;
};

static int run_once(void *arg)
{
	const struct opts *o = ((struct run_arg *)arg)->o;
	struct page_out *out = ((struct run_arg *)arg)->out;
	const char *tmp = "/dev/shm";
	if (access(tmp, W_OK) != 0) {
		tmp = getenv("TMPDIR");
		if (!tmp || !*tmp)
			tmp = "/tmp";
	}
	char base[512], tdir[600], idir[600];
	if (snprintf(base, sizeof(base), "%s/fabric_bench.XXXXXX", tmp) >=
	    (int)sizeof(base)) {
		fprintf(stderr, PROG ": temporary directory name too long\n");
		return 1;
	}
	if (!mkdtemp(base)) {
		fprintf(stderr, PROG ": cannot create a directory in %s: %s\n",
		        tmp, strerror(errno));
		return 1;
	}
	snprintf(tdir, sizeof(tdir), "%s/target", base);
	snprintf(idir, sizeof(idir), "%s/initiator", base);

	int info[2], ctl[2];
	if (pipe2(info, O_CLOEXEC) != 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	if (pipe2(ctl, O_CLOEXEC) != 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		close(info[0]);
		close(info[1]);
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		close(info[0]);
		close(info[1]);
		close(ctl[0]);
		close(ctl[1]);
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	if (pid == 0) {
		close(info[0]);
		close(ctl[1]);
		/* Go when the initiator goes, however it goes. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		int rc = 1;
		if (getppid() != parent)
			bu_rm_tree(AT_FDCWD, base, 2);
		else if (bnet_enter(&o->net, 0))
			rc = 1;
		else if (!interrupted)
			rc = target_main(o, base, tdir, info[1], ctl[0],
			                 parent);
		fflush(NULL);
		_exit(rc);
	}
	close(info[1]);
	close(ctl[0]);
	bu_pin_to(o->pin, PROG);

	int rc = 0;
	if (bnet_enter(&o->net, 1))
		rc = 1;
	else
		rc = initiator_main(o, idir, tdir, info[0], pid, out);
	close(info[0]);
	/* Tell the target to go, and wait for it to have cleaned up. */
	char q = 'q';
	if (write(ctl[1], &q, 1) != 1 && errno != EPIPE)
		fprintf(stderr, PROG ": cannot stop the target: %s\n",
		        strerror(errno));
	close(ctl[1]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = -1;
			break;
		}
	}
	if (status != 0 && rc == 0) {
		fprintf(stderr, PROG ": the target exited badly (status %#x)\n",
		        (unsigned)status);
		rc = -ECHILD;
	}
	bu_rm_tree(AT_FDCWD, base, 2);
	if (interrupted && rc)
		return 130;
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse_opts(argc, argv, &o))
		return 2;

	bu_on_stop(on_signal);

	/* The region file, and room for the initiator's own files. */
	struct bp_plan plan = {.pages = BP_4K};
	if (is_shm(&o)) {
		if (bp_plan(&plan, o.pages, o.region_size, PROG))
			return 2;
		if (plan.note[0])
			printf("pages: 4 KiB only: %s\n", plan.note);
		else if (plan.pages == BP_BOTH)
			printf("pages: 4 KiB, then 2 MiB (a private tmpfs on "
			       "/dev/shm each, %" PRIu64 " MiB); goals judged "
			       "on 2 MiB\n",
			       plan.mount_bytes >> 20);
	}
	size_t olen = 2 * sizeof(struct page_out);
	struct page_out *out = bp_shared(olen);
	if (!out) {
		fprintf(stderr, PROG ": no shared memory for the results\n");
		return 1;
	}
	unsigned n = 0;
	int rc = 0;
	for (unsigned pg = BP_4K; pg <= BP_2M && rc == 0 && !interrupted;
	     pg <<= 1) {
		if (!(plan.pages & pg))
			continue;
		out[n].pages = is_shm(&o) ? pg : 0;
		struct run_arg ra = {&o, &out[n]};
		if (is_shm(&o))
			printf("== %s pages\n", bp_words(pg));
		rc = bp_run(&plan, pg, run_once, &ra, PROG);
		n++;
	}
	if (rc == 0) {
		print_pages_summary(&o, out, n);
		print_json(&o, out, n);
	}
	bp_shared_free(out, olen);
	if (interrupted || rc == 130) {
		fprintf(stderr, PROG ": interrupted\n");
		return 130;
	}
	return rc ? 1 : 0;
}
