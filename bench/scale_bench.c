/*
 * scale_bench: how a machine's memory grows with the cluster. For each
 * size N it forms an N-machine cluster in this process (static peers,
 * shm, one region per machine) and reads every machine's farm_node_memory:
 * the message region and channel mirrors, the transaction log arena, and
 * the tables sized by machine ids (messaging's peers and loop tables, the
 * logs' peers, writers, readers and record queues). The figure per
 * machine is the mean over the N machines, once they all see each other
 * and every loop has sent one message to every loop of every other
 * machine (all-to-all, the pattern of transactions over data spread
 * uniformly): what a machine pays for the ids and threads it is sized
 * for, and for the channels to the peers it talks to. Log record queues
 * (made by a coordinator's first record to a machine) are not exercised.
 *
 * Every size runs with the same id space (--ids, the configuration's
 * max_machines; default 1,024), so the layouts sized by ids are the same
 * and what changes is the cluster. The message region and the log arena
 * are laid out for every id but backed only where written
 * (FARM_MEM_SPARSE): the figures are what is in memory (resident pages,
 * mincore), with the laid-out sizes beside them.
 *
 * Goal: memory per machine at 128 machines <= 2x that at 8. A size whose
 * machines cannot be opened (an id past the limit) is reported with its
 * error, and a goal that needs it is not met.
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

struct size_result {
	unsigned n;
	int err;                   /* 0: measured */
	unsigned failed;           /* the machine that failed, when err */
	double msg, log, meta;     /* bytes per machine in memory, mean */
	double msg_laid, log_laid; /* ... laid out (address space) */
	unsigned max_machines;
	double join_s;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--sizes N,N,...] [--threads T] [--ids M]\n"
	           "  Memory per machine (message + log + metadata) of an\n"
	           "  N-machine cluster formed in this process, for each N\n"
	           "  (default 8,128; 1..1024), T threads a machine (default\n"
	           "  1), machine ids below M (max_machines, default 1024,\n"
	           "  at least the largest size). Prints a summary, then one\n"
	           "  JSON line.\n");
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
	int err;
};

/* On a loop: one message to every loop of every other machine. */
static void ping_all(farm_loop *loop, void *arg, int status)
{
	struct ping_ctx *p = arg;
	p->err = status;
	uint32_t me = farm_node_id(p->n);
	unsigned T = farm_node_nthreads(p->n);
	for (uint32_t m = 0; !p->err && m < p->machines; m++)
		for (unsigned t = 0; m != me && !p->err && t < T; t++)
			p->err = farm_msg_send(loop, m, t, PING_TYPE, NULL, 0);
	farm_loop_flush(loop);
}

static int ping_from(farm_node *n, unsigned machines)
{
	struct ping_ctx p = {n, machines, 0};
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

static void measure(struct size_result *r, farm_node **nodes)
{
	for (unsigned i = 0; i < r->n; i++) {
		farm_node_mem m = {.size = sizeof(m)};
		if (farm_node_memory(nodes[i], &m))
			continue;
		r->msg += (double)m.msg_resident / r->n;
		r->log += (double)m.log_resident / r->n;
		r->msg_laid += (double)m.msg / r->n;
		r->log_laid += (double)m.log / r->n;
		r->meta += (double)m.meta / r->n;
		r->max_machines = (unsigned)m.max_machines;
	}
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
	for (unsigned i = 0; !r->err && i < r->n; i++)
		if ((r->err = ping_from(nodes[i], r->n)))
			r->failed = i;
	/* Every ping delivered: the channels exist at both ends. */
	unsigned long want = (unsigned long)r->n * (r->n - 1) * T * T;
	for (uint64_t t1 = bu_now_ns(); !r->err && atomic_load(&pings) < want;
	     usleep(1000))
		if (bu_now_ns() - t1 > JOIN_MS * 1000000ull)
			r->err = -ETIMEDOUT;
	if (!r->err)
		measure(r, nodes);
	atomic_store(&pings, 0);
	for (unsigned i = 0; nodes && i < r->n; i++)
		if (nodes[i])
			farm_node_close(nodes[i]);
	free(nodes);
	bu_rm_tree(AT_FDCWD, root, 8);
}

static void report(const struct size_result *res, unsigned ns, unsigned T)
{
	const double MiB = 1024.0 * 1024.0;
	printf("%-9s %-6s %12s %12s %12s %12s %14s %14s\n", "machines", "ids",
	       "msg MiB", "log MiB", "meta MiB", "total MiB", "msg laid MiB",
	       "log laid MiB");
	const struct size_result *at8 = NULL, *at128 = NULL;
	for (unsigned i = 0; i < ns; i++) {
		const struct size_result *r = &res[i];
		if (r->err) {
			printf("%-9u not formed: machine %u: %s\n", r->n,
			       r->failed, farm_strerror(r->err));
			continue;
		}
		printf("%-9u %-6u %12.2f %12.2f %12.2f %12.2f %14.1f %14.1f\n",
		       r->n, r->max_machines, r->msg / MiB, r->log / MiB,
		       r->meta / MiB, (r->msg + r->log + r->meta) / MiB,
		       r->msg_laid / MiB, r->log_laid / MiB);
		at8 = r->n == 8 ? r : at8;
		at128 = r->n == 128 ? r : at128;
	}
	printf("(per machine in memory, mean over the machines, after forming "
	       "and one message from every loop to every loop of every other "
	       "machine; laid out: the sparse region and arena's address "
	       "space)\n");
	double v = at8 && at128 ? (at128->msg + at128->log + at128->meta) /
	                                  (at8->msg + at8->log + at8->meta)
	                        : NAN;
	printf("{\"bench\": \"" PROG "\", \"threads\": %u, \"sizes\": [", T);
	for (unsigned i = 0; i < ns; i++) {
		const struct size_result *r = &res[i];
		if (r->err)
			printf("%s{\"machines\": %u, \"error\": \"%s\"}",
			       i ? ", " : "", r->n, farm_strerror(r->err));
		else
			printf("%s{\"machines\": %u, \"ids\": %u, \"msg\": "
			       "%.0f, "
			       "\"log\": %.0f, \"meta\": %.0f, \"msg_laid\": "
			       "%.0f, \"log_laid\": %.0f, \"join_s\": %.2f}",
			       i ? ", " : "", r->n, r->max_machines, r->msg,
			       r->log, r->meta, r->msg_laid, r->log_laid,
			       r->join_s);
	}
	printf("], \"goals\": {");
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
