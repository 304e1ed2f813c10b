/*
 * scale_bench: how a machine's memory grows with the cluster. For each
 * size N it forms an N-machine cluster in this process (static peers,
 * shm, one region per machine) and reads every machine's farm_node_memory:
 * the message region and channel mirrors, the transaction log arena, and
 * the tables sized by machine ids (messaging's peers and loop tables, the
 * logs' peers, writers, readers and record queues). The figure per
 * machine is the mean over the N machines, after each of two workloads
 * on the same cluster:
 *   - fixed fan-out (--fanout K, default 7): every loop sends one message
 *     to every loop of the K machines after its own (ids mod N), so each
 *     machine talks to K peers and hears from K, at every size: the same
 *     workload at 8 and 128 machines. mem_128_vs_8 is judged on it.
 *   - all-to-all: then every loop to every loop of every other machine
 *     (the pattern of transactions over data spread uniformly), whose
 *     work grows with the cluster; with a ring per (sender thread,
 *     receiver thread) its memory is proportional to the peers, which
 *     is reported (all_to_all_128_vs_8) and not a goal.
 * Log records are not written (no transactions run): a peer's logs here
 * cost a page each until it commits here (src/txn/README.md, "Logs").
 *
 * Every size runs with the same id space (--ids, the configuration's
 * max_machines; default 1,024), so the layouts sized by ids are the same
 * and what changes is the cluster. The message region, the mirrors and
 * the log arena are laid out for every id but backed only where written
 * (FARM_MEM_SPARSE): the figures are what is in memory (resident pages,
 * mincore), with the laid-out sizes beside them.
 *
 * Goal: memory per machine at 128 machines <= 2x that at 8, fixed
 * fan-out. A size whose machines cannot be opened (an id past the limit)
 * is reported with its error, and a goal that needs it is not met.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <farm/farm.h>

#include "lib/benchnode.h"
#include "lib/benchreport.h"
#include "lib/benchutil.h"

#define PROG      "scale_bench"
#define MAX_SIZES 8
#define JOIN_MS   60000

/* Bytes per machine, mean over the machines, after one workload. */
struct mem_fig {
	double msg, log, meta;     /* in memory */
	double msg_laid, log_laid; /* laid out (address space) */
};

struct size_result {
	unsigned n;
	int err;                 /* 0: measured */
	unsigned failed;         /* the machine that failed, when err */
	struct mem_fig fan, all; /* fixed fan-out, then all-to-all */
	unsigned fanout;         /* peers each machine talked to in fan */
	unsigned max_machines;
	double join_s;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--sizes N,N,...] [--threads T] [--ids M]\n"
	           "       [--fanout K]\n"
	           "  Memory per machine (message + log + metadata) of an\n"
	           "  N-machine cluster formed in this process, for each N\n"
	           "  (default 8,128; 1..1024), T threads a machine (default\n"
	           "  1), machine ids below M (max_machines, default 1024,\n"
	           "  at least the largest size). Two workloads on each\n"
	           "  cluster: every machine messages its K next machines\n"
	           "  (default 7: the same work at every size, what the goal\n"
	           "  judges), then every machine. Prints a summary, then\n"
	           "  one JSON line.\n");
}

static int parse_sizes(const char *s, unsigned *sizes, unsigned *n)
{
	*n = 0;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *save, *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (*n == MAX_SIZES || bu_parse_u(t, 1, 1024, &sizes[*n]))
			return -EINVAL;
		(*n)++;
	}
	return *n ? 0 : -EINVAL;
}

#define PING_TYPE 0x7100u

static _Atomic unsigned long pings;

static void on_ping(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop, (void)in, (void)arg;
	atomic_fetch_add(&pings, 1);
}

struct ping_ctx {
	farm_node *n;
	unsigned machines;
	unsigned fanout; /* the next @fanout ids (mod machines) */
	int err;
};

/* On a loop: one message to every loop of each of the @fanout machines
 * after this one (all-to-all: fanout = machines - 1). */
static void ping_all(farm_loop *loop, void *arg, int status)
{
	struct ping_ctx *p = arg;
	p->err = status;
	uint32_t me = farm_node_id(p->n);
	unsigned T = farm_node_nthreads(p->n);
	for (unsigned k = 1; !p->err && k <= p->fanout; k++) {
		uint32_t m = (me + k) % p->machines;
		for (unsigned t = 0; !p->err && t < T; t++)
			p->err = farm_msg_send(loop, m, t, PING_TYPE, NULL, 0);
	}
	farm_loop_flush(loop);
}

static int ping_from(farm_node *n, unsigned machines, unsigned fanout)
{
	struct ping_ctx p = {n, machines, fanout, 0};
	for (unsigned i = 0; i < farm_node_nthreads(n); i++) {
		int rc = farm_node_run(n, i, ping_all, &p);
		if (rc || p.err)
			return rc ? rc : p.err;
	}
	return 0;
}

/* Machine @id of @n, with its directory under @root. */
static unsigned ids = 1024; /* max_machines of every machine */

static int open_one(const char *root, unsigned id, unsigned n, unsigned T,
                    farm_node **out)
{
	farm_conf *c;
	int rc = bn_conf_new(PROG, &c);
	if (rc)
		return rc;
	char v[512];
	snprintf(v, sizeof(v), "%s/m%u", root, id);
	if (mkdir(v, 0700) && errno != EEXIST)
		rc = -errno;
	rc = rc ? rc : bn_set(PROG, c, "data_dir", v);
	snprintf(v, sizeof(v), "%u", id);
	rc = rc ? rc : bn_set(PROG, c, "machine_id", v);
	snprintf(v, sizeof(v), "%u", T);
	rc = rc ? rc : bn_set(PROG, c, "threads", v);
	snprintf(v, sizeof(v), "%u", ids);
	rc = rc ? rc : bn_set(PROG, c, "max_machines", v);
	rc = rc ? rc : bn_set(PROG, c, "fabric", "shm");
	rc = rc ? rc : bn_set(PROG, c, "region_size", "1M");
	rc = rc ? rc : bn_set(PROG, c, "replicas", n >= 3 ? "3" : "1");
	rc = rc ? rc : bn_peers(PROG, c, id, n, root);
	rc = rc ? rc : bn_open(PROG, c, id, out);
	farm_conf_free(c);
	if (!rc && (rc = farm_msg_handle(farm_node_msg(*out), PING_TYPE,
	                                 on_ping, NULL)))
		fprintf(stderr, PROG ": machine %u: handler: %s\n", id,
		        farm_strerror(rc));
	return rc;
}

static void measure(struct size_result *r, struct mem_fig *f, farm_node **nodes)
{
	for (unsigned i = 0; i < r->n; i++) {
		farm_node_mem m = {.size = sizeof(m)};
		if (farm_node_memory(nodes[i], &m))
			continue;
		f->msg += (double)m.msg_resident / r->n;
		f->log += (double)m.log_resident / r->n;
		f->msg_laid += (double)m.msg / r->n;
		f->log_laid += (double)m.log / r->n;
		f->meta += (double)m.meta / r->n;
		r->max_machines = (unsigned)m.max_machines;
	}
}

static double fig_total(const struct mem_fig *f)
{
	return f->msg + f->log + f->meta;
}

static unsigned fanout = 7; /* --fanout: peers each machine talks to */

/* Every machine pings its @k next machines' loops; measured into @f once
 * every ping is delivered (the channels exist at both ends). Pings add
 * up over calls: @want is the total expected so far. */
static void workload(struct size_result *r, farm_node **nodes, unsigned k,
                     unsigned long want, struct mem_fig *f)
{
	for (unsigned i = 0; !r->err && i < r->n; i++)
		if ((r->err = ping_from(nodes[i], r->n, k)))
			r->failed = i;
	for (uint64_t t1 = bu_now_ns(); !r->err && atomic_load(&pings) < want;
	     usleep(1000))
		if (bu_now_ns() - t1 > JOIN_MS * 1000000ull)
			r->err = -ETIMEDOUT;
	if (!r->err)
		measure(r, f, nodes);
}

/* Form, measure and close an r->n-machine cluster. */
static void run_size(struct size_result *r, unsigned T)
{
	/* Above the id space a cluster cannot form: say so before opening
	 * machines (each holds its region files) only to be refused. */
	if (r->n > ids) {
		r->err = -E2BIG;
		r->failed = ids;
		return;
	}
	char root[] = "/tmp/scale_bench.XXXXXX";
	if (!mkdtemp(root)) {
		r->err = -errno;
		return;
	}
	farm_node **nodes = calloc(r->n, sizeof(*nodes));
	unsigned opened = 0, started = 0;
	r->err = nodes ? 0 : -ENOMEM;
	uint64_t t0 = bu_now_ns();
	for (; !r->err && opened < r->n; opened++)
		if ((r->err = open_one(root, opened, r->n, T, &nodes[opened])))
			r->failed = opened;
	for (; !r->err && started < r->n; started++)
		if ((r->err = farm_node_start(nodes[started], JOIN_MS)))
			r->failed = started;
	for (unsigned i = 0; !r->err && i < r->n; i++)
		if ((r->err = farm_node_wait_members(nodes[i], r->n, JOIN_MS)))
			r->failed = i;
	r->join_s = (double)(bu_now_ns() - t0) / 1e9;
	/* The same workload at every size first (each machine talks to
	 * @fanout peers), then all-to-all on the same cluster. */
	r->fanout = fanout < r->n - 1 ? fanout : r->n - 1;
	unsigned long per = (unsigned long)r->n * T * T;
	workload(r, nodes, r->fanout, per * r->fanout, &r->fan);
	workload(r, nodes, r->n - 1, per * (r->fanout + r->n - 1), &r->all);
	atomic_store(&pings, 0);
	for (unsigned i = 0; nodes && i < r->n; i++)
		if (nodes[i])
			farm_node_close(nodes[i]);
	free(nodes);
	bu_rm_tree(AT_FDCWD, root, 8);
}

static void print_fig(const char *what, const struct size_result *r,
                      const struct mem_fig *f)
{
	const double MiB = 1024.0 * 1024.0;
	printf("%-9u %-11s %12.2f %12.2f %12.2f %12.2f %14.1f %14.1f\n", r->n,
	       what, f->msg / MiB, f->log / MiB, f->meta / MiB,
	       fig_total(f) / MiB, f->msg_laid / MiB, f->log_laid / MiB);
}

static void json_fig(const char *name, const struct mem_fig *f)
{
	printf("\"%s\": {\"msg\": %.0f, \"log\": %.0f, \"meta\": %.0f, "
	       "\"total\": %.0f}",
	       name, f->msg, f->log, f->meta, fig_total(f));
}

/* at128 / at8 of the figure @fan (fixed fan-out) or all-to-all. */
static double ratio(const struct size_result *at8,
                    const struct size_result *at128, bool fan)
{
	if (!at8 || !at128)
		return NAN;
	return fan ? fig_total(&at128->fan) / fig_total(&at8->fan)
	           : fig_total(&at128->all) / fig_total(&at8->all);
}

static void report(const struct size_result *res, unsigned ns, unsigned T)
{
	printf("%-9s %-11s %12s %12s %12s %12s %14s %14s\n", "machines",
	       "workload", "msg MiB", "log MiB", "meta MiB", "total MiB",
	       "msg laid MiB", "log laid MiB");
	const struct size_result *at8 = NULL, *at128 = NULL;
	for (unsigned i = 0; i < ns; i++) {
		const struct size_result *r = &res[i];
		if (r->err) {
			printf("%-9u not formed: machine %u: %s\n", r->n,
			       r->failed, farm_strerror(r->err));
			continue;
		}
		char what[32];
		snprintf(what, sizeof(what), "fan-out %u", r->fanout);
		print_fig(what, r, &r->fan);
		print_fig("all-to-all", r, &r->all);
		at8 = r->n == 8 ? r : at8;
		at128 = r->n == 128 ? r : at128;
	}
	printf("(per machine in memory, mean over the machines, ids %u; "
	       "fan-out k: every loop messaged every loop of the k machines "
	       "after it; all-to-all: then of every other machine, on the "
	       "same cluster; laid out: the sparse region and arena's address "
	       "space)\n",
	       ids);
	double v = ratio(at8, at128, true), va = ratio(at8, at128, false);
	printf("mem_128_vs_8 is judged on the fixed fan-out (the same "
	       "workload at both sizes); all-to-all, whose work grows with "
	       "the cluster, %.2fx\n",
	       va);
	printf("{\"bench\": \"" PROG "\", \"threads\": %u, \"fanout\": %u, "
	       "\"sizes\": [",
	       T, fanout);
	for (unsigned i = 0; i < ns; i++) {
		const struct size_result *r = &res[i];
		printf("%s{\"machines\": %u, ", i ? ", " : "", r->n);
		if (r->err) {
			printf("\"error\": \"%s\"}", farm_strerror(r->err));
			continue;
		}
		printf("\"ids\": %u, \"fanout\": %u, ", r->max_machines,
		       r->fanout);
		json_fig("fan", &r->fan);
		printf(", ");
		json_fig("all", &r->all);
		printf(", \"msg_laid\": %.0f, \"log_laid\": %.0f, "
		       "\"join_s\": %.2f}",
		       r->all.msg_laid, r->all.log_laid, r->join_s);
	}
	printf("], \"all_to_all_128_vs_8\": ");
	if (isnan(va))
		printf("null");
	else
		printf("%.3f", va);
	printf(", \"goals\": {");
	struct br_style st = {{'f', 3}, {'f', 1}, false};
	struct br_goal g = {"mem_128_vs_8", v, 2.0, !isnan(v) && v <= 2.0,
	                    "<="};
	br_goal(stdout, &st, &g, false);
	printf("}}\n");
}

int main(int argc, char **argv)
{
	unsigned sizes[MAX_SIZES] = {8, 128}, ns = 2, T = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
			if (parse_sizes(argv[++i], sizes, &ns))
				goto bad;
		} else if (!strcmp(argv[i], "--ids") && i + 1 < argc) {
			if (bu_parse_u(argv[++i], 1, FARM_NODE_MAX_MACHINES,
			               &ids))
				goto bad;
		} else if (!strcmp(argv[i], "--fanout") && i + 1 < argc) {
			if (bu_parse_u(argv[++i], 1, 1023, &fanout))
				goto bad;
		} else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			if (bu_parse_u(argv[++i], 1, 64, &T))
				goto bad;
		} else {
			goto bad;
		}
	}
	struct size_result res[MAX_SIZES] = {{0}};
	for (unsigned i = 0; i < ns; i++) {
		res[i].n = sizes[i];
		run_size(&res[i], T);
	}
	report(res, ns, T);
	for (unsigned i = 0; i < ns; i++)
		if (res[i].err && res[i].n <= ids)
			return 1; /* a size within the limit must form */
	return 0;
bad:
	usage(stderr);
	return 2;
}
