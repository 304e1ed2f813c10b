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
 * Joining (--zk ADDR: ZooKeeper membership; else static peers): the
 * machines start one after the other, each waiting until it is a member
 * of a view with every machine started so far, and the time of each
 * start and wait is its join (mean and slowest reported); formation is
 * from the first open to the last join. With --zk, a cluster is formed
 * at its size (expect_machines), then one machine more joins it late: its
 * join (join_ms, its start until it is a member) and until every machine
 * applied that configuration (settle_ms) are the figures of a machine
 * joining an N-machine cluster; join_ms_128 is judged on it (static
 * peers: on the last machine's start, the only join they have).
 *
 * Losing two machines (--zk, after the late join): machines n/3 and
 * 2n/3 (never the CM) are closed at once; loss_ms is until every
 * survivor is a member of a configuration without them, recovered_ms
 * until, besides, none copies a region as a new backup (no data is
 * written here, so the two are nearly one: what is measured is the
 * configuration change, whose floor is a lease, --lease-ms). A closed
 * machine's session ends at once; a crash would add its detection.
 *
 * Goals: memory per machine at 128 machines <= 2x that at 8, fixed
 * fan-out; a machine joins a 128-machine cluster in under 1 s; recovery
 * (recovered_ms) at 64 machines <= 2x that at 4. A size whose
 * machines cannot be opened (an id past the limit) is reported with its error,
 * and a goal that needs it is not met.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
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
	double join_s; /* formation: first open to last join */
	double join_mean_ms, join_max_ms; /* one machine's start and wait */
	double join_last_ms;              /* the last machine's */
	double late_ms, settle_ms; /* --zk: machine N joining N; -1: none */
	/* Of late_ms: its farm_node_start (registration included); the
	 * rest is the wait for the configuration that takes it. */
	double late_start_ms;
	int late_err;
	/* --zk: two machines lost at once: until every survivor applied a
	 * configuration without them (loss_ms), and until none of them
	 * still copied a region (recovered_ms); -1: not run. */
	double loss_ms, recovered_ms;
	int loss_err;
	/* Objects committed before the loss, and read back with their
	 * values after the recovery; the first error. */
	unsigned committed, read_back;
	int commit_err;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--sizes N,N,...] [--threads T] [--ids M]\n"
	           "       [--fanout K] [--zk HOST:PORT] [--lease-ms MS]\n"
	           "  Memory per machine (message + log + metadata) of an\n"
	           "  N-machine cluster formed in this process, for each N\n"
	           "  (default 8,128; 1..1024), T threads a machine (default\n"
	           "  1), machine ids below M (max_machines, default 1024,\n"
	           "  at least the largest size). Two workloads on each\n"
	           "  cluster: every machine messages its K next machines\n"
	           "  (default 7: the same work at every size, what the goal\n"
	           "  judges), then every machine. Joins: each machine's\n"
	           "  start until it is a member, and with --zk (ZooKeeper\n"
	           "  membership at HOST:PORT, e.g. from scripts/zk-local)\n"
	           "  one machine more joining the formed cluster, then two\n"
	           "  machines lost at once and the survivors' recovery.\n"
	           "  --lease-ms: leases and a third of the ZooKeeper\n"
	           "  sessions (default 1000; every machine shares this\n"
	           "  process's cores). Prints a summary, then one JSON\n"
	           "  line.\n");
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
static unsigned ids = 1024;      /* max_machines of every machine */
static const char *zk;           /* --zk: ZooKeeper membership; NULL: static */
static unsigned lease_ms = 1000; /* --lease-ms */
static char zk_root[64];         /* this size's cluster root, with --zk */

/* Membership: static peers 0..@n-1, or ZooKeeper at --zk, the cluster
 * formed at @n machines. Long sessions and leases: the machines share
 * this process's cores with each other, and a join is measured, not a
 * failure. */
static int set_membership(farm_conf *c, const char *root, unsigned id,
                          unsigned n)
{
	if (!zk)
		return bn_peers(PROG, c, id, n, root);
	char v[32], sess[32], lease[32];
	snprintf(v, sizeof(v), "%u", n);
	/* Sessions outlast leases: a lease lapse is the failure detector,
	 * a session expiry the last resort (ZooKeeper's limit: 20 s with
	 * scripts/zk-local's ticks). */
	snprintf(sess, sizeof(sess), "%u",
	         3 * lease_ms > 20000 ? 3 * lease_ms : 20000);
	snprintf(lease, sizeof(lease), "%u", lease_ms * 1000);
	int rc = bn_set(PROG, c, "zk", zk);
	rc = rc ? rc : bn_set(PROG, c, "zk_root", zk_root);
	rc = rc ? rc : bn_set(PROG, c, "expect_machines", v);
	rc = rc ? rc : bn_set(PROG, c, "zk_session_ms", sess);
	rc = rc ? rc : bn_set(PROG, c, "lease_us", lease);
	return rc;
}

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
	rc = rc ? rc : bn_set(PROG, c, "region_size", "16M");
	rc = rc ? rc : bn_set(PROG, c, "replicas", n >= 3 ? "3" : "1");
	rc = rc ? rc : set_membership(c, root, id, n);
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

/* Start machine @i of @nodes and wait until it is a member of a view of
 * @want machines (or, late, of the formed cluster); its join time in ms
 * into *@ms. */
static int join_one(farm_node **nodes, unsigned i, unsigned want, double *ms,
                    double *start_ms)
{
	uint64_t t = bu_now_ns();
	int rc = farm_node_start(nodes[i], JOIN_MS);
	if (start_ms)
		*start_ms = (double)(bu_now_ns() - t) / 1e6;
	rc = rc ? rc : farm_node_wait_members(nodes[i], want, JOIN_MS);
	*ms = (double)(bu_now_ns() - t) / 1e6;
	return rc;
}

/* Start the machines of r->n one after the other, each a member before
 * the next starts (static peers: all are from the first view). */
static void join_all(struct size_result *r, farm_node **nodes)
{
	double sum = 0;
	for (unsigned i = 0; !r->err && i < r->n; i++) {
		double ms;
		if ((r->err = join_one(nodes, i, zk ? i + 1 : r->n, &ms, NULL)))
			r->failed = i;
		sum += ms;
		r->join_last_ms = ms;
		r->join_max_ms = ms > r->join_max_ms ? ms : r->join_max_ms;
	}
	r->join_mean_ms = sum / r->n;
}

/* --zk: machine r->n joins the formed cluster late: until it is a
 * member (late_ms), then until every machine applied the configuration
 * that admitted it (settle_ms). *@extra: the machine, closed by the
 * caller. */
/* Profiling the late join alone: with SCALE_BENCH_PERF_CTL naming the
 * control fifo of `perf record -D -1 --control fifo:PATH`, events are
 * enabled for the late join and its settling only. */
static void perf_ctl(const char *cmd)
{
	const char *path = getenv("SCALE_BENCH_PERF_CTL");
	int fd = path ? open(path, O_WRONLY) : -1;
	if (fd < 0)
		return;
	if (write(fd, cmd, strlen(cmd)) < 0)
		fprintf(stderr, PROG ": perf control: %s\n", strerror(errno));
	close(fd);
}

static void join_late(struct size_result *r, const char *root, unsigned T,
                      farm_node **nodes, farm_node **extra)
{
	r->late_ms = r->settle_ms = r->late_start_ms = -1;
	if (!zk || r->err || r->n >= ids)
		return;
	nodes[r->n] = NULL;
	int rc = open_one(root, r->n, r->n, T, extra);
	if (rc) {
		r->late_err = rc;
		return;
	}
	nodes[r->n] = *extra;
	perf_ctl("enable\n");
	uint64_t t = bu_now_ns();
	if ((rc = join_one(nodes, r->n, r->n + 1, &r->late_ms,
	                   &r->late_start_ms))) {
		r->late_err = rc;
		r->late_ms = -1;
		return;
	}
	uint64_t cfg = farm_node_config_id(*extra);
	for (unsigned i = 0; i < r->n; i++)
		while (farm_node_config_id(nodes[i]) < cfg) {
			if (bu_now_ns() - t > JOIN_MS * 1000000ull) {
				r->late_err = -ETIMEDOUT;
				return;
			}
			usleep(1000);
		}
	r->settle_ms = (double)(bu_now_ns() - t) / 1e6;
	perf_ctl("disable\n");
}

static void *close_one(void *arg)
{
	farm_node_close(arg);
	return NULL;
}

#define CLOSE_BATCH 32

/* Close the machines @which (@k of them) of @nodes at once, their slots
 * emptied: one after the other, every close is a configuration change
 * that the rest apply, and 128 machines took minutes to close. */
static void close_many(farm_node **nodes, const unsigned *which, unsigned k)
{
	for (unsigned b = 0; b < k; b += CLOSE_BATCH) {
		pthread_t th[CLOSE_BATCH];
		bool ok[CLOSE_BATCH] = {false};
		for (unsigned i = b; i < k && i < b + CLOSE_BATCH; i++) {
			farm_node *n = nodes[which[i]];
			nodes[which[i]] = NULL;
			if (n && !(ok[i - b] = !pthread_create(&th[i - b], NULL,
			                                       close_one, n)))
				farm_node_close(n);
		}
		for (unsigned i = b; i < k && i < b + CLOSE_BATCH; i++)
			if (ok[i - b])
				pthread_join(th[i - b], NULL);
	}
}

/* Whether @n is a member of a configuration of @want machines and
 * copies no region as a new backup (of the first 64 it lists). */
static bool has_members(farm_node *n, unsigned want)
{
	struct farm_node_stats st = {.size = sizeof(st)};
	return !farm_node_stats_get(n, &st) && !st.removed &&
	       st.members == want;
}

static bool copying(farm_node *n)
{
	struct farm_copy_stats cs[64];
	unsigned k = farm_node_copies_get(n, cs, 64);
	for (unsigned i = 0; i < k && i < 64; i++)
		if (cs[i].state == FARM_COPY_COPYING ||
		    cs[i].state == FARM_COPY_CHECKING)
			return true;
	return false;
}

/* Wait until @done(node, @want) for every machine of @nodes[0..@m) left
 * (the same @done for each); 0 or -ETIMEDOUT, JOIN_MS after @t. */
static int wait_all(farm_node **nodes, unsigned m, unsigned want,
                    bool (*done)(farm_node *, unsigned), uint64_t t)
{
	for (unsigned i = 0; i < m; i++)
		while (nodes[i] && !done(nodes[i], want)) {
			if (bu_now_ns() - t > JOIN_MS * 1000000ull)
				return -ETIMEDOUT;
			usleep(1000);
		}
	return 0;
}

static bool not_copying(farm_node *n, unsigned want)
{
	(void)want;
	return !copying(n);
}

/* One object committed by one machine, read back by another. */
struct obj {
	farm_txm *m;
	farm_tx *tx;
	farm_fatptr p; /* p.addr 0 until committed */
	uint64_t val;
	int rc;
	_Atomic bool done;
};

static void obj_end(struct obj *o, int rc)
{
	if (o->tx) { /* a failure, or a read: nothing to commit */
		(void)farm_tx_abort(o->tx);
		farm_tx_free(o->tx);
		o->tx = NULL;
	}
	o->rc = rc;
	atomic_store(&o->done, true);
}

static void on_commit(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct obj *o = ctx;
	farm_tx_free(o->tx);
	o->tx = NULL;
	if (outcome) /* not committed: a retry allocates anew */
		o->p = (farm_fatptr){0};
	obj_end(o, outcome);
}

static void on_alloc(farm_tx *tx, void *ctx, int status, farm_fatptr p,
                     void *data)
{
	(void)tx;
	struct obj *o = ctx;
	if (status) {
		obj_end(o, status);
		return;
	}
	memcpy(data, &o->val, sizeof(o->val));
	o->p = p;
	int rc = farm_tx_commit(o->tx, on_commit, o);
	if (rc)
		obj_end(o, rc);
}

static void on_read(farm_tx *tx, void *ctx, int status, const void *data,
                    uint32_t size)
{
	(void)tx;
	struct obj *o = ctx;
	uint64_t v = 0;
	if (!status && size >= sizeof(v))
		memcpy(&v, data, sizeof(v));
	obj_end(o, status ? status : v == o->val ? 0 : FARM_ECORRUPT);
}

/* On a loop: allocate and commit o->val (o->p.addr 0), or read it back. */
static void obj_run(farm_loop *loop, void *ctx, int status)
{
	struct obj *o = ctx;
	int rc = status ? status : farm_tx_begin(o->m, loop, &o->tx);
	if (!rc)
		rc = o->p.addr ? farm_tx_read_fat(o->tx, o->p, on_read, o)
		               : farm_tx_alloc(o->tx, sizeof(o->val),
		                               FARM_GADDR_NULL, on_alloc, o);
	if (rc)
		obj_end(o, rc);
}

/* Run @o on machine @n's loop 0 and wait for its end: 0 or its error. */
static int obj_on(farm_node *n, struct obj *o)
{
	o->m = farm_node_txm(n);
	o->tx = NULL;
	atomic_store(&o->done, false);
	int rc = farm_node_run(n, 0, obj_run, o);
	for (uint64_t t = bu_now_ns(); !rc && !atomic_load(&o->done);
	     usleep(1000))
		if (bu_now_ns() - t > JOIN_MS * 1000000ull)
			return -ETIMEDOUT; /* o stays in use: leaked */
	return rc ? rc : o->rc;
}

/* obj_on, again while the error is one an application retries (a view
 * changing under the allocation or the commit: the late join's just
 * before), for up to JOIN_MS. */
static int obj_on_retried(farm_node *n, struct obj *o)
{
	uint64_t t = bu_now_ns();
	int rc;
	while ((rc = obj_on(n, o)) && rc != -ETIMEDOUT &&
	       farm_tx_retryable(rc) && bu_now_ns() - t < JOIN_MS * 1000000ull)
		usleep(10000);
	return rc;
}

#define NOBJ 4

/* --zk, after the late join: machines n/3 and 2n/3 (never the CM, 0)
 * leave at once; until every survivor is a member of a configuration
 * without them (loss_ms) and copies no region (recovered_ms). Their
 * sessions end with their close, so this is a departure that ZooKeeper
 * reports at once, not a crash found by a lapsed lease. */
static void lose_two(struct size_result *r, farm_node **nodes)
{
	r->loss_ms = r->recovered_ms = -1;
	if (!zk || r->err || r->late_err || r->late_ms < 0 || r->n < 4)
		return;
	unsigned m = r->n + 1, v[2] = {r->n / 3, 2 * r->n / 3};
	/* Committed before: by the CM, both machines lost (their objects'
	 * primaries are their own regions) and the last; read back after
	 * by the machine that joined late. */
	static struct obj objs[NOBJ];
	unsigned by[NOBJ] = {0, v[0], v[1], r->n - 1};
	for (unsigned i = 0; i < NOBJ; i++) {
		objs[i] = (struct obj){.val = 0x5ca1e000u + r->n * 16 + i};
		int rc = obj_on_retried(nodes[by[i]], &objs[i]);
		r->commit_err = r->commit_err ? r->commit_err : rc;
		r->committed += !rc;
	}
	uint64_t t = bu_now_ns();
	close_many(nodes, v, 2);
	if ((r->loss_err = wait_all(nodes, m, m - 2, has_members, t)))
		return;
	r->loss_ms = (double)(bu_now_ns() - t) / 1e6;
	if ((r->loss_err = wait_all(nodes, m, 0, not_copying, t)))
		return;
	r->recovered_ms = (double)(bu_now_ns() - t) / 1e6;
	for (unsigned i = 0; i < NOBJ; i++) {
		if (objs[i].rc || !objs[i].p.addr)
			continue;
		int rc = obj_on_retried(nodes[r->n], &objs[i]);
		r->commit_err = r->commit_err ? r->commit_err : rc;
		r->read_back += !rc;
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
	farm_node **nodes = calloc(r->n + 1, sizeof(*nodes)), *extra = NULL;
	unsigned opened = 0;
	snprintf(zk_root, sizeof(zk_root), "/" PROG "/%ld-%u", (long)getpid(),
	         r->n);
	r->err = nodes ? 0 : -ENOMEM;
	uint64_t t0 = bu_now_ns();
	for (; !r->err && opened < r->n; opened++)
		if ((r->err = open_one(root, opened, r->n, T, &nodes[opened])))
			r->failed = opened;
	join_all(r, nodes);
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
	join_late(r, root, T, nodes, &extra);
	lose_two(r, nodes);
	unsigned *all = nodes ? malloc((r->n + 1) * sizeof(*all)) : NULL;
	for (unsigned i = 0; all && i <= r->n; i++)
		all[i] = i;
	if (all)
		close_many(nodes, all, r->n + 1);
	else if (extra)
		farm_node_close(extra);
	for (unsigned i = 0; !all && nodes && i < r->n; i++)
		if (nodes[i])
			farm_node_close(nodes[i]);
	free(all);
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

/* A machine joining the @r->n-machine cluster: with --zk the late join,
 * else the last machine's start; NAN without one. */
static double join_ms(const struct size_result *r)
{
	if (!r || r->err)
		return NAN;
	if (!zk)
		return r->join_last_ms;
	return r->late_err || r->late_ms < 0 ? NAN : r->late_ms;
}

static void report_joins(const struct size_result *res, unsigned ns)
{
	printf("%-9s %10s %13s %12s %13s %11s %9s %13s\n", "machines",
	       "formed s", "join mean ms", "join max ms", "late join ms",
	       "settled ms", "loss ms", "recovered ms");
	for (unsigned i = 0; i < ns; i++) {
		const struct size_result *r = &res[i];
		if (r->err)
			continue;
		printf("%-9u %10.2f %13.1f %12.1f %13.1f %11.1f %9.1f %13.1f",
		       r->n, r->join_s, r->join_mean_ms, r->join_max_ms,
		       r->late_ms, r->settle_ms, r->loss_ms, r->recovered_ms);
		if (r->late_err)
			printf("  (late join: %s)", farm_strerror(r->late_err));
		if (r->loss_err)
			printf("  (loss: %s)", farm_strerror(r->loss_err));
		if (r->loss_ms >= 0)
			printf("  commits %u of %u, read back after %u",
			       r->committed, NOBJ, r->read_back);
		if (r->commit_err)
			printf(" (%s)", farm_strerror(r->commit_err));
		printf("\n");
	}
	printf("(%s; join: a machine's start until it is a member of a view "
	       "with every machine started so far; late: one machine more "
	       "joining the formed cluster, until it is a member, and until "
	       "every machine applied that configuration; loss: two "
	       "machines closed at once, until every survivor is a member "
	       "of a configuration without them, recovered: and copies no "
	       "region; -1: not run)\n",
	       zk ? "ZooKeeper membership" : "static peers");
}

static void json_joins(const struct size_result *r)
{
	printf(", \"join_s\": %.2f, \"join_mean_ms\": %.1f, "
	       "\"join_max_ms\": %.1f, \"late_join_ms\": %.1f, "
	       "\"late_start_ms\": %.1f, "
	       "\"settle_ms\": %.1f, \"loss_ms\": %.1f, "
	       "\"recovered_ms\": %.1f, \"committed\": %u, "
	       "\"read_back\": %u",
	       r->join_s, r->join_mean_ms, r->join_max_ms, r->late_ms,
	       r->late_start_ms, r->settle_ms, r->loss_ms, r->recovered_ms,
	       r->committed, r->read_back);
}

static void report(const struct size_result *res, unsigned ns, unsigned T)
{
	printf("%-9s %-11s %12s %12s %12s %12s %14s %14s\n", "machines",
	       "workload", "msg MiB", "log MiB", "meta MiB", "total MiB",
	       "msg laid MiB", "log laid MiB");
	const struct size_result *at8 = NULL, *at128 = NULL, *at4 = NULL,
	                         *at64 = NULL;
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
		at4 = r->n == 4 ? r : at4;
		at64 = r->n == 64 ? r : at64;
	}
	printf("(per machine in memory, mean over the machines, ids %u; "
	       "fan-out k: every loop messaged every loop of the k machines "
	       "after it; all-to-all: then of every other machine, on the "
	       "same cluster; laid out: the sparse region and arena's address "
	       "space)\n",
	       ids);
	double v = ratio(at8, at128, true), va = ratio(at8, at128, false);
	report_joins(res, ns);
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
		printf(", \"msg_laid\": %.0f, \"log_laid\": %.0f",
		       r->all.msg_laid, r->all.log_laid);
		json_joins(r);
		printf("}");
	}
	printf("], \"all_to_all_128_vs_8\": ");
	if (isnan(va))
		printf("null");
	else
		printf("%.3f", va);
	printf(", \"membership\": \"%s\", \"goals\": {", zk ? "zk" : "static");
	struct br_style st = {{'f', 3}, {'f', 1}, false};
	struct br_goal g = {"mem_128_vs_8",        v,    2.0,
	                    !isnan(v) && v <= 2.0, "<=", NULL};
	br_goal(stdout, &st, &g, true);
	double j = join_ms(at128);
	struct br_style sj = {{'f', 1}, {'f', 0}, false};
	struct br_goal gj = {"join_ms_128",           j,   1000.0,
	                     !isnan(j) && j < 1000.0, "<", NULL};
	br_goal(stdout, &sj, &gj, true);
	double rv =
	        at4 && at64 && at4->recovered_ms > 0 && at64->recovered_ms > 0
	                ? at64->recovered_ms / at4->recovered_ms
	                : NAN;
	struct br_goal gr = {"recovery_64_vs_4",      rv,   2.0,
	                     !isnan(rv) && rv <= 2.0, "<=", NULL};
	br_goal(stdout, &st, &gr, false);
	printf("}}\n");
}

/* With --zk, what a size must do besides forming: the late join, the
 * loss and recovery, every commit made and read back after. */
static bool survived(const struct size_result *r)
{
	if (!zk || r->err || r->n < 4 || r->n >= ids)
		return true;
	return !r->late_err && !r->loss_err && !r->commit_err &&
	       r->committed == NOBJ && r->read_back == NOBJ;
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
		} else if (!strcmp(argv[i], "--lease-ms") && i + 1 < argc) {
			if (bu_parse_u(argv[++i], 10, 60000, &lease_ms))
				goto bad;
		} else if (!strcmp(argv[i], "--zk") && i + 1 < argc) {
			zk = argv[++i];
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
		if ((res[i].err && res[i].n <= ids) || !survived(&res[i]))
			return 1; /* form; with --zk, survive too */
	return 0;
bad:
	usage(stderr);
	return 2;
}
