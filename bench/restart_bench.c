/*
 * restart_bench: whole-cluster restart from durable memory ("restart
 * time for a whole cluster with 1 GB of committed data per
 * machine": kill all, start all, time to the first committed
 * transaction). src/node/restart.c is what it measures.
 *
 * NP machine processes join through a private ZooKeeper server
 * (scripts/zk-local) with data directories on tmpfs (/dev/shm). Each
 * commits --mb MiB of objects (64 KiB each, 8 per transaction) into
 * regions it is primary of, remembers its first and last object with
 * their contents, and waits. All are killed with SIGKILL at once. Once
 * reaped, all are started again on the same directories at once (each
 * deletes its dead incarnation's registration, whose session still lives,
 * instead of waiting it out: src/addrspace/README.md), and each commits
 * one transaction. Reported per machine: node open to its first commit,
 * the restart's parts (mapping the region files again, deciding and
 * applying the logs, the barrier), and when, since the start, it opened,
 * joined, saw every member restarted and committed; the figure the goal
 * judges is the kill to the last machine's first commit. The remembered
 * objects are read back and compared.
 *
 * Usage: restart_bench [--machines N] [--mb MiB] [--replicas R]
 *                      [--region MiB] [--dir D] [--lease-ms L] [--quick]
 *                      [--keep S | --again S]
 * --keep/--again: one filling kept in S for many restarts
 * (bench/README.md).
 * Default: 3 machines, 1024 MiB each, 1 replica (3 would need 3 GiB of
 * copies per machine, twice over while restarting: more tmpfs than the
 * development host has to spare). Prints a summary and, last, one JSON
 * line.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchnode.h"
#include "benchutil.h"
#include "benchcluster.h"
#include "zklocal.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (scripts/zk-local)"
#endif

#define PROG   "restart_bench"
#define MAXM   8
#define OBJ    (64u << 10)
#define PER_TX (g_opt.replicas > 1 ? 1u : 8u)
#define SESSION_MS                                                \
	3000 /* loaded hosts: a 1 s session expired while filling \
	      */
#define JOIN_MS 120000

static struct {
	unsigned machines, replicas;
	uint64_t mb, region_mb;
	const char *dir;
	unsigned lease_ms;
	const char *keep, *again; /* --keep, --again: the state directory */
} g_opt = {3, 1, 1024, 256, "/dev/shm", 500, NULL, NULL};

static char g_root[200], g_zk_dir[300], g_zk_connect[64], g_zk_root[96];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What a machine says to the parent (one struct per phase). */
struct report {
	int status;
	uint64_t bytes, objects, t_ready_ns, t_first_ns;
	/* After the restart: the node opened (its directory checked),
	 * joined (farm_node_start returned), every member restarted
	 * (t_ready_ns). */
	uint64_t t_open_ns, t_joined_ns;
	uint64_t check_bad; /* remembered objects whose contents differ */
	struct farm_node_stats st; /* its restart's phases: st.restart */
};

struct remembered {
	farm_gaddr a[2];
	uint64_t seed[2];
};

static void fill(void *d, uint64_t seed)
{
	uint64_t *w = d;
	for (unsigned i = 0; i < OBJ / 8; i++)
		w[i] = seed * 0x9e3779b97f4a7c15ull + i;
}

/* Machine @me's configuration, in *@out (errors said). */
static int make_config(unsigned me, farm_conf **out)
{
	farm_conf *c;
	if (bn_conf_new(PROG, &c))
		return -ENOMEM;
	char v[512];
	int rc = 0;
	snprintf(v, sizeof(v), "%u", me);
	rc |= bn_set(PROG, c, "machine_id", v);
	snprintf(v, sizeof(v), "%" PRIu64, (uint64_t)g_opt.region_mb << 20);
	rc |= bn_set(PROG, c, "region_size", v);
	snprintf(v, sizeof(v), "%u", g_opt.replicas);
	rc |= bn_set(PROG, c, "replicas", v);
	/* With backups every transaction's images go through the logs: room
	 * for a transaction of PER_TX objects. */
	if (g_opt.replicas > 1)
		rc |= bn_set(PROG, c, "log_size", "4M");
	rc |= bn_set(PROG, c, "threads", "1");
	snprintf(v, sizeof(v), "%s/m%u", g_root, me);
	rc |= bn_set(PROG, c, "data_dir", v);
	rc |= bn_set(PROG, c, "fabric", "shm");
	rc |= bn_set(PROG, c, "zk", g_zk_connect);
	rc |= bn_set(PROG, c, "zk_root", g_zk_root);
	snprintf(v, sizeof(v), "%u", SESSION_MS);
	rc |= bn_set(PROG, c, "zk_session_ms", v);
	snprintf(v, sizeof(v), "%u", g_opt.lease_ms * 1000u);
	rc |= bn_set(PROG, c, "lease_us", v);
	rc |= bn_set(PROG, c, "zk_connect_timeout_ms", "30000");
	snprintf(v, sizeof(v), "%u", g_opt.machines);
	rc |= bn_set(PROG, c, "expect_machines", v);
	if (rc) {
		farm_conf_free(c);
		return -EINVAL;
	}
	*out = c;
	return 0;
}

static int say(int fd, const struct report *r)
{
	return write(fd, r, sizeof(*r)) == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* Fill (@restart false) or restart and check (true). */
/* One transaction of up to PER_TX filler objects (@seed onwards) until
 * @want bytes; the first and last object made go in @rm. 0; 1 to retry;
 * -1 on failure. */
static int fill_tx(farm_txm *txm, farm_loop *loop, unsigned me, uint64_t want,
                   uint64_t *seed, struct report *r, struct remembered *rm)
{
	farm_tx *tx;
	if (farm_tx_begin(txm, loop, &tx))
		return -1;
	farm_fatptr p[8];
	unsigned k = 0;
	for (; k < PER_TX && r->bytes + (uint64_t)k * OBJ < want; k++) {
		void *d;
		if (farm_tx_alloc_sync(tx, OBJ, FARM_GADDR_NULL, &p[k], &d))
			break;
		fill(d, *seed + k);
	}
	int rc = k ? farm_tx_commit_sync(tx) : -ENOSPC;
	farm_tx_free(tx);
	if (rc && !farm_tx_retryable(rc)) {
		fprintf(stderr,
		        PROG ": machine %u: commit after %" PRIu64 " MiB: %s\n",
		        me, r->bytes >> 20, farm_strerror(rc));
		return -1;
	}
	if (rc)
		return 1;
	if (!r->objects) {
		rm->a[0] = p[0].addr;
		rm->seed[0] = *seed;
	}
	rm->a[1] = p[k - 1].addr;
	rm->seed[1] = *seed + k - 1;
	r->objects += k;
	r->bytes += (uint64_t)k * OBJ;
	*seed += k;
	return 0;
}

/* The first run: --mb MiB of objects, the first and last remembered in
 * @path for the check after the restart. 0; -1 on failure. */
static int fill_data(farm_txm *txm, farm_loop *loop, unsigned me,
                     const char *path, struct report *r)
{
	struct remembered rm = {0};
	uint64_t want = g_opt.mb << 20, seed = (uint64_t)me << 40;
	uint64_t t_report = now_ns();
	while (r->bytes < want) {
		int rc = fill_tx(txm, loop, me, want, &seed, r, &rm);
		if (rc < 0)
			return -1;
		if (rc)
			continue;
		if (me == 0 && now_ns() - t_report > 2000000000ull) {
			t_report = now_ns();
			fprintf(stderr,
			        PROG ": filling: %" PRIu64 " of %" PRIu64
			             " MiB\n",
			        r->bytes >> 20, g_opt.mb);
		}
	}
	FILE *f = fopen(path, "we");
	if (!f || fwrite(&rm, sizeof(rm), 1, f) != 1) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

/* After the restart: one commit (retried while retryable). 0; -1. */
static int first_commit(farm_txm *txm, farm_loop *loop, unsigned me)
{
	for (unsigned tries = 0;; tries++) {
		farm_tx *tx;
		farm_fatptr p;
		void *d;
		if (farm_tx_begin(txm, loop, &tx))
			return -1;
		int rc = farm_tx_alloc_sync(tx, 64, FARM_GADDR_NULL, &p, &d);
		if (!rc) {
			memset(d, 0x5a, 64);
			rc = farm_tx_commit_sync(tx);
		}
		farm_tx_free(tx);
		if (!rc)
			return 0;
		if (!farm_tx_retryable(rc) || tries > 1000) {
			fprintf(stderr, PROG ": machine %u: first commit: %s\n",
			        me, farm_strerror(rc));
			return -1;
		}
	}
}

/* The objects remembered before the kill, read back and compared
 * (mismatches in r->check_bad). 0; -1 when they cannot be checked. */
static int check_remembered(farm_txm *txm, farm_loop *loop, const char *path,
                            struct report *r)
{
	struct remembered rm;
	FILE *f = fopen(path, "re");
	if (!f || fread(&rm, sizeof(rm), 1, f) != 1) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	uint8_t *want = malloc(OBJ);
	for (unsigned i = 0; i < 2 && want; i++) {
		farm_tx *tx;
		const void *d;
		fill(want, rm.seed[i]);
		if (farm_tx_begin(txm, loop, &tx)) {
			free(want);
			return -1;
		}
		if (farm_tx_read_sync(tx, rm.a[i], OBJ, &d) ||
		    memcmp(d, want, OBJ) != 0)
			r->check_bad++;
		farm_tx_free(tx);
	}
	free(want);
	return 0;
}

/* Serve the loop until killed: with backups, the others' commits need
 * this machine's logs truncated. */
static void serve_forever(farm_loop *loop)
{
	static const volatile int never = 0;
	for (;;)
		(void)farm_loop_wait(loop, &never, 1000000000ull);
}

static int machine(unsigned me, bool restart, int out)
{
	struct report r = {0};
	farm_conf *cfg = NULL;
	farm_node *n = NULL;
	farm_loop *loop = NULL;
	r.status = 1;
	int orc = make_config(me, &cfg);
	if (!orc)
		orc = bn_open(PROG, cfg, me, &n);
	farm_conf_free(cfg);
	if (orc)
		goto out;
	r.t_open_ns = now_ns();
	farm_node_set_app_loops(n, true);
	r.status = 2;
	if (farm_node_start(n, JOIN_MS))
		goto out;
	r.t_joined_ns = now_ns();
	if (farm_node_loop_open(n, 0, &loop) ||
	    farm_node_wait_members(n, g_opt.machines, JOIN_MS))
		goto out;
	r.t_ready_ns = now_ns();
	farm_txm *txm = farm_node_txm(n);
	char path[400];
	snprintf(path, sizeof(path), "%s/remember-%u", g_root, me);
	r.status = 3;
	if (!restart) {
		if (fill_data(txm, loop, me, path, &r))
			goto out;
		r.status = 0;
		r.t_first_ns = now_ns();
		if (say(out, &r))
			goto out;
		serve_forever(loop); /* killed here */
	}
	/* After the restart: one commit, then the remembered objects. */
	if (first_commit(txm, loop, me))
		goto out;
	r.t_first_ns = now_ns();
	r.st.size = sizeof(r.st);
	if (farm_node_stats_get(n, &r.st))
		memset(&r.st, 0, sizeof(r.st));
	if (check_remembered(txm, loop, path, &r))
		goto out;
	r.status = 0;
	if (say(out, &r))
		goto out;
	serve_forever(loop); /* until the parent has every report */
out:
	if (r.status)
		fprintf(stderr, PROG ": machine %u failed at step %d\n", me,
		        r.status);
	(void)say(out, &r);
	if (loop)
		farm_node_loop_close(n, loop);
	if (n)
		farm_node_close(n);
	return r.status;
}

static void spawn(bool restart, pid_t *pid, int *from)
{
	for (unsigned i = 0; i < g_opt.machines; i++) {
		int p[2];
		if (pipe(p))
			exit(1);
		fflush(NULL);
		pid[i] = fork();
		if (pid[i] == 0) {
			close(p[0]);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(machine(i, restart, p[1]));
		}
		close(p[1]);
		from[i] = p[0];
	}
}

static int hear(int fd, struct report *r)
{
	size_t got = 0;
	while (got < sizeof(*r)) {
		ssize_t n = read(fd, (char *)r + got, sizeof(*r) - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: " PROG " [--machines N] [--mb MiB] [--replicas R] "
	        "[--region MiB] [--dir D] [--lease-ms L] [--quick]\n"
	        "       [--keep S | --again S]\n"
	        "  Whole-cluster restart: N machines (default 3) each commit "
	        "MiB (default 1024)\n"
	        "  of objects, all are killed with SIGKILL and started again "
	        "on their data\n"
	        "  directories (under D, default /dev/shm); time to the first "
	        "commit.\n"
	        "  --lease-ms: recovery's lease (default 500).\n"
	        "  --keep S: fill into the new directory S, kill, and keep "
	        "it (ZooKeeper's too);\n"
	        "  --again S: restart from S (kept or restarted before), "
	        "kill, keep it: restarts\n"
	        "  of one filling, by one build or another (same "
	        "--machines/--replicas/--mb).\n"
	        "  --quick: 64 MiB per machine.\n");
}

/* The command line into g_opt; 0 to go on, else main's exit status
 * (-1: --help, printed). */
/* An option with a value: 0 when @a is none of them. */
static int take_value(const char *a, const char *v)
{
	if (!strcmp(a, "--machines"))
		g_opt.machines = (unsigned)atoi(v);
	else if (!strcmp(a, "--mb"))
		g_opt.mb = strtoull(v, NULL, 10);
	else if (!strcmp(a, "--replicas"))
		g_opt.replicas = (unsigned)atoi(v);
	else if (!strcmp(a, "--region"))
		g_opt.region_mb = strtoull(v, NULL, 10);
	else if (!strcmp(a, "--dir"))
		g_opt.dir = v;
	else if (!strcmp(a, "--lease-ms"))
		g_opt.lease_ms = (unsigned)atoi(v);
	else if (!strcmp(a, "--keep"))
		g_opt.keep = v;
	else if (!strcmp(a, "--again"))
		g_opt.again = v;
	else
		return 0;
	return 1;
}

static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help")) {
			usage(stdout);
			return -1;
		} else if (!strcmp(a, "--quick")) {
			g_opt.mb = 64;
			g_opt.region_mb = 64;
		} else if (v && take_value(a, v)) {
			i++;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!g_opt.machines || g_opt.machines > MAXM || !g_opt.mb ||
	    !g_opt.replicas || g_opt.replicas > g_opt.machines ||
	    g_opt.lease_ms < 1 || g_opt.lease_ms > 60000) {
		usage(stderr);
		return 2;
	}
	return 0;
}

/* The machines fill their data, then are killed all at once; *fill_s,
 * *t_kill. 0; 1 when a machine failed. */
static int fill_and_kill(double *fill_s, uint64_t *t_kill)
{
	pid_t pid[MAXM];
	int from[MAXM];
	struct report fr[MAXM];
	int bad = 0;
	uint64_t t0 = now_ns();
	spawn(false, pid, from);
	for (unsigned i = 0; i < g_opt.machines; i++)
		if (hear(from[i], &fr[i]) || fr[i].status)
			bad = 1;
	*fill_s = (now_ns() - t0) / 1e9;
	/* All at once: stopped first, so none sees another die and
	 * reconfigures in between (test_restart does the same). */
	for (unsigned i = 0; i < g_opt.machines; i++)
		kill(pid[i], SIGSTOP);
	for (unsigned i = 0; i < g_opt.machines; i++)
		kill(pid[i], SIGKILL);
	*t_kill = now_ns();
	for (unsigned i = 0; i < g_opt.machines; i++) {
		waitpid(pid[i], NULL, 0);
		close(from[i]);
	}
	return bad;
}

/* Every machine started again on its data directory; their reports in
 * @rr, the last first commit in *t_last. 0; 1 when one failed. */
static int restart_all(struct report *rr, uint64_t *t_last)
{
	pid_t pid[MAXM];
	int from[MAXM];
	int bad = 0;
	*t_last = 0;
	spawn(true, pid, from);
	for (unsigned i = 0; i < g_opt.machines; i++) {
		if (hear(from[i], &rr[i]) || rr[i].status || rr[i].check_bad ||
		    !rr[i].st.restart.restarted)
			bad = 1;
		else if (rr[i].t_first_ns > *t_last)
			*t_last = rr[i].t_first_ns;
	}
	/* Stopped first, then killed, then reaped: killed and reaped one
	 * by one, the survivors of the first saw its lease lapse while its
	 * gigabytes were unmapped, and warned about a failure that was the
	 * bench's own. */
	for (unsigned i = 0; i < g_opt.machines; i++)
		kill(pid[i], SIGSTOP);
	for (unsigned i = 0; i < g_opt.machines; i++)
		kill(pid[i], SIGKILL);
	for (unsigned i = 0; i < g_opt.machines; i++) {
		waitpid(pid[i], NULL, 0);
		close(from[i]);
	}
	return bad;
}

/* Each machine's restart phases; the bytes restored and the slowest
 * adoption and replay. */
static void print_machines(const struct report *rr, uint64_t t_start,
                           uint64_t *bytes, double *adopt_max,
                           double *replay_max)
{
	for (unsigned i = 0; i < g_opt.machines; i++) {
		const struct farm_stats_restart *s = &rr[i].st.restart;
		*bytes += s->bytes;
		*adopt_max = BU_MAX(*adopt_max, s->adopt_ns / 1e6);
		*replay_max = BU_MAX(*replay_max, s->replay_ns / 1e6);
		printf("  machine %u: %" PRIu64 " region file(s), %" PRIu64
		       " MiB mapped again in %.0f ms; %" PRIu64
		       " records, %" PRIu64 " transactions decided, %" PRIu64
		       " objects checked for locks in %.0f ms (logs read %.0f, "
		       "decided and applied %.0f, allocator rebuilt %.0f); "
		       "barrier %.0f ms; first commit %.0f ms after start\n",
		       i, s->regions, s->bytes >> 20, s->adopt_ns / 1e6,
		       s->records, s->txns, s->objects, s->replay_ns / 1e6,
		       s->logs_ns / 1e6, s->apply_ns / 1e6, s->alloc_ns / 1e6,
		       s->barrier_ns / 1e6, (rr[i].t_first_ns - t_start) / 1e6);
		printf("    from the start: node open %.0f ms (its directory "
		       "checked), joined %.0f ms, every member restarted "
		       "%.0f ms, first commit %.0f ms\n",
		       (rr[i].t_open_ns - t_start) / 1e6,
		       (rr[i].t_joined_ns - t_start) / 1e6,
		       (rr[i].t_ready_ns - t_start) / 1e6,
		       (rr[i].t_first_ns - t_start) / 1e6);
		const struct farm_stats_lease *l = &rr[i].st.lease;
		printf("    its leases: %" PRIu64 " renewals, %" PRIu64
		       " late, %" PRIu64 " lapsed, %" PRIu64 " lost, %" PRIu64
		       " refused, longest gap %.0f ms; "
		       "configuration %" PRIu64 "\n",
		       l->renewals, l->late, l->expiries, l->lost, l->refused,
		       l->max_gap_us / 1e3, rr[i].st.config_id);
	}
}

/* The summary and the JSON line. */
static void report(const struct report *rr, int bad, double fill_s,
                   uint64_t t_kill, uint64_t t_start, uint64_t t_last)
{
	double total_ms = bad ? -1 : (t_last - t_start) / 1e6;
	double kill_ms = bad ? -1 : (t_last - t_kill) / 1e6;
	uint64_t bytes = 0;
	double adopt_max = 0, replay_max = 0;
	printf("restart_bench: %u machines, %" PRIu64
	       " MiB committed each (64 KiB objects) in %.1f s, %u replica(s), "
	       "regions of %" PRIu64 " MiB, data on %s\n",
	       g_opt.machines, g_opt.mb, fill_s, g_opt.replicas,
	       g_opt.region_mb, g_opt.dir);
	if (!bad)
		print_machines(rr, t_start, &bytes, &adopt_max, &replay_max);
	if (bad)
		fprintf(stderr, PROG ": the restart failed (see above)\n");
	else
		printf("  kill to the last first commit: %.0f ms (the kill "
		       "and reaping %.0f ms, start of every process to the "
		       "last first commit %.0f ms; sessions of %d ms still "
		       "live, their registrations deleted); remembered "
		       "objects intact\n",
		       kill_ms, (t_start - t_kill) / 1e6, total_ms, SESSION_MS);
	printf("{\"bench\": \"restart\", \"machines\": %u, \"mb_per_machine\": "
	       "%" PRIu64 ", \"replicas\": %u, \"region_mb\": %" PRIu64
	       ", \"bytes_restored\": %" PRIu64
	       ", \"start_to_first_commit_ms\": %.1f, "
	       "\"kill_to_first_commit_ms\": %.1f, \"adopt_ms_max\": "
	       "%.1f, "
	       "\"replay_ms_max\": %.1f, \"goals\": {\"restart_under_2s\": "
	       "{\"value\": %.1f, \"target\": 2000, \"met\": %s}}}\n",
	       g_opt.machines, g_opt.mb, g_opt.replicas, g_opt.region_mb, bytes,
	       total_ms, kill_ms, adopt_max, replay_max, kill_ms,
	       !bad && kill_ms < 2000 ? "true" : "false");
}

/* The state directory of --keep (made: 0) or --again (there: 0), its
 * ZooKeeper server started on DIR/zk (kept across runs: same port and
 * data). Else main's exit status. */
static int state_open(const char *script)
{
	const char *d = g_opt.keep ? g_opt.keep : g_opt.again;
	snprintf(g_root, sizeof(g_root), "%s", d);
	if (g_opt.keep && mkdir(g_root, 0700)) {
		fprintf(stderr, PROG ": mkdir %s: %s\n", g_root,
		        strerror(errno));
		return 1;
	}
	snprintf(g_zk_dir, sizeof(g_zk_dir), "%s/zk", g_root);
	if (g_opt.keep && mkdir(g_zk_dir, 0700))
		return 1;
	if (zkl_run(NULL, script, "start", g_zk_dir, g_zk_connect,
	            sizeof(g_zk_connect))) {
		fprintf(stderr, PROG ": zk-local start %s failed\n", g_zk_dir);
		return 1;
	}
	/* Started on its kept data, the server accepts connections before it
	 * serves them (loading its database: clients are refused for
	 * hundreds of ms). A whole-cluster restart is of the machines, with
	 * ZooKeeper up, as in a run without --again: its start is left out
	 * of the clock. */
	char mode[32];
	for (int i = 0; i < 300; i++) {
		if (!zkl_run(NULL, script, "mode", g_zk_dir, mode,
		             sizeof(mode)))
			break;
		usleep(20000);
	}
	snprintf(g_zk_root, sizeof(g_zk_root), "/libfarm/restart-bench-kept");
	return 0;
}

int main(int argc, char **argv)
{
	int pr = parse_args(argc, argv);
	if (pr)
		return pr < 0 ? 0 : pr;
	const char *script = FARM_SOURCE_DIR "/scripts/zk-local";
	bool kept = g_opt.keep || g_opt.again;
	if (kept) {
		if ((pr = state_open(script)))
			return pr;
	} else {
		snprintf(g_root, sizeof(g_root), "%s/farm-restart-bench-XXXXXX",
		         g_opt.dir);
		if (!mkdtemp(g_root)) {
			fprintf(stderr, PROG ": mkdtemp %s: %s\n", g_root,
			        strerror(errno));
			return 1;
		}
		snprintf(g_zk_dir, sizeof(g_zk_dir), "%s/zk-XXXXXX", g_root);
		int zs = bc_zk_start(PROG, script, NULL, g_zk_dir, g_zk_connect,
		                     sizeof(g_zk_connect));
		if (zs) {
			bu_rm_tree(AT_FDCWD, g_root, 4);
			return zs;
		}
		snprintf(g_zk_root, sizeof(g_zk_root),
		         "/libfarm/restart-bench-%d", (int)getpid());
	}
	static struct report rr[MAXM];
	double fill_s = 0;
	uint64_t t_kill = now_ns(), t_last = 0;
	int bad = g_opt.again ? 0 : fill_and_kill(&fill_s, &t_kill);
	if (bad) {
		fprintf(stderr, PROG ": filling failed\n");
	} else if (!g_opt.keep) {
		uint64_t t_start = now_ns();
		/* On the clock of FARM_LOG_TIME's lines (CLOCK_MONOTONIC, ms),
		 * to order them against the start. */
		fprintf(stderr, PROG ": processes started at %.3f\n",
		        t_start / 1e6);
		bad = restart_all(rr, &t_last);
		report(rr, bad, fill_s, g_opt.again ? t_start : t_kill, t_start,
		       t_last);
	}
	if (kept) {
		if (zkl_run(NULL, script, "stop", g_zk_dir, NULL, 0))
			fprintf(stderr, PROG ": zk-local stop failed\n");
		return bad;
	}
	bc_zk_stop(PROG, script, NULL, g_zk_dir);
	bu_rm_tree(AT_FDCWD, g_root, 4);
	return bad;
}
