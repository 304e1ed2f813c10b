/*
 * datarec_bench: data recovery's timeline (FaRM SOSP'15 section
 * 6.5, Figure 9(b)): after a machine is lost, how fast its regions get
 * their third replica back, and what the copy costs the foreground.
 *
 * One private ZooKeeper server (scripts/zk-local, data under /dev/shm)
 * and a cluster of --machines (5) processes forked by the benchmark (shm
 * fabric, 3 replicas, 16 MiB regions, one loop each, data directories
 * under /dev/shm). Each machine makes --accounts accounts and --fill-mb
 * MiB of 1 KiB filler objects (what the copies carry), then runs a closed
 * loop of --depth transfers in flight between two random accounts of the
 * whole cluster (read both, write both; retried while retryable). Every
 * committed transfer is counted in the machine's 10 ms bucket, and every
 * 10 ms each machine publishes how many regions it has copied so far
 * (farm_txm_datarec_get), in a mapping shared before the fork.
 *
 * After --pre-ms machine 2 is killed (SIGKILL). The survivors recover,
 * then the primaries tell the new backups, which copy at the configured
 * pace (--pace-bytes per --pace-us per loop: datarec_bytes,
 * datarec_interval_us). Once every copy is complete the run goes on for
 * --tail-ms, then stops.
 *
 * Figures:
 *   copy window   from the first copy's start to the last one's end;
 *   during        the survivors' transfers/s in the copy window, without
 *                 its part before kill + --stall-ms (the known ~1 s stall
 *                 of commits waiting on a lock reply from the dead
 *                 primary, src/recovery/README.md, which is not data
 *                 recovery's doing);
 *   without       the same survivors' transfers/s from 200 ms after the
 *                 last copy to the end (same machines, no copy);
 *   pace          each new backup's bytes over its copying time, against
 *                 the configured rate; with the READs per second it
 *                 managed against one per interval (the tick rate the host
 *                 allowed).
 * Goals: during >= 90% of without; pace >= 90% of the configured one.
 *
 * Output: the timeline in 10 ms buckets (regions fully replicated,
 * transfers/s) as a gnuplot data file (and a PNG when gnuplot is there)
 * in --out, a summary, then one JSON line (bench/README.md).
 */
#include "benchnode.h"
#include "benchutil.h"
#include "benchcluster.h"
#include "transfers.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <farm/farm.h>
#include <farm/stats.h>
#include <farm/txn.h>

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (scripts/zk-local)"
#endif

#define PROG       "datarec_bench"
#define NMAX       8u
#define MAX_ACCT   320u
#define INIT_BAL   1000
#define JOIN_MS    30000
#define SESSION_MS 4000
#define BUCKET_NS  10000000ull /* 10 ms */
#define MAX_DR     32u
#define VICTIM     2u

enum { ST_NONE, ST_CREATED, ST_DONE, ST_FAILED };
enum { C_WAIT, C_GO, C_STOP, C_QUIT };

struct mstat {
	_Atomic int state;
	int fail_rc;
	char fail_what[48];
	farm_fatptr acct[MAX_ACCT];
	_Atomic uint64_t transfers, failed;
	_Atomic uint64_t t_active, config_id;
	_Atomic bool removed;
	/* Its copies as a new backup, refreshed every ms. */
	_Atomic uint32_t dr_n, dr_done;
	unsigned ndr; /* at the end */
	struct farm_copy_stats dr[MAX_DR];
};

struct shared {
	_Atomic int cmd;
	uint64_t t0;
	uint32_t nb;
	struct mstat m[NMAX];
};

static struct shared *g_sh;
static uint32_t *g_ops; /* [NMAX][nb]: transfers committed per bucket */
static int16_t *g_done; /* [NMAX][nb]: regions copied, -1 unknown */

static struct opts {
	unsigned machines, accounts, fill_mb, depth, pre_ms, tail_ms, stall_ms;
	unsigned pace_bytes, pace_us, ab_ms;
	bool verbose;
	const char *out, *zk_script;
} g_opt = {
        .machines = 5,
        .accounts = 256,
        .fill_mb = 6,
        .depth = 8,
        .pre_ms = 3000,
        .tail_ms = 3000,
        .stall_ms = 1500,
        .pace_bytes = 8192,
        .pace_us = 2000,
        .ab_ms = 500,
        .zk_script = FARM_SOURCE_DIR "/scripts/zk-local",
};

static char g_zk_dir[256], g_zk_connect[64];
static pid_t g_pid[NMAX];

static uint64_t now_ns(void)
{
	return bu_now_ns();
}

static void nap_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* ---- the machine ----------------------------------------------------- */

struct mach {
	uint32_t me;
	farm_node *node;
	farm_loop *loop;
	farm_txm *txm;
	struct mstat *st;
	uint64_t rng;
	farm_fatptr *acc;
	unsigned nacc, busy;
};

static void fail(struct mach *c, const char *what, int rc)
{
	c->st->fail_rc = rc;
	snprintf(c->st->fail_what, sizeof(c->st->fail_what), "%s", what);
	fprintf(stderr, PROG ": machine %u: %s: %s\n", c->me, what,
	        farm_strerror(rc));
	atomic_store(&c->st->state, ST_FAILED);
}

/* Are copies held at @t ns after t0 (the odd --ab-ms windows)? */
static bool held(uint64_t t)
{
	return g_opt.ab_ms && (t / (g_opt.ab_ms * 1000000ull)) % 2 == 1;
}

/* Bucket @b is wholly inside a window of one kind, not its first 20 ms
 * (READs posted before the switch may still land). */
static bool steady(uint64_t b)
{
	uint64_t t = b * BUCKET_NS, w = g_opt.ab_ms * 1000000ull;
	return !g_opt.ab_ms ||
	       (t % w >= 20000000ull && (t + BUCKET_NS - 1) / w == t / w);
}

static bool running(struct mach *c)
{
	return atomic_load(&g_sh->cmd) == C_GO && !atomic_load(&c->st->removed);
}

struct slot {
	struct bx_slot h; /* first: bx_slots_pass */
	struct mach *c;
	struct bx_pair p; /* its transaction and reads */
	unsigned ia, ib, tries;
};

static void slot_start(struct slot *s);

static void slot_start_any(void *s)
{
	slot_start(s);
}

static void slot_end(struct slot *s, int rc)
{
	struct mach *c = s->c;
	if (s->p.tx)
		farm_tx_free(s->p.tx);
	s->p.tx = NULL;
	s->h.busy = false;
	c->busy--;
	if (rc == 0) {
		uint64_t b = (now_ns() - g_sh->t0) / BUCKET_NS;
		if (b < g_sh->nb)
			g_ops[(size_t)c->me * g_sh->nb + b]++;
		s->tries = 0;
	} else if (farm_tx_retryable(rc)) {
		s->h.retry_at = bx_backoff(&s->tries);
		return;
	} else {
		atomic_fetch_add(&c->st->failed, 1);
		s->tries = 0;
	}
	if (running(c))
		slot_start(s);
}

static void commit_cb(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct slot *s = ctx;
	if (outcome == 0)
		atomic_fetch_add(&s->c->st->transfers, 1);
	slot_end(s, outcome);
}

static void reads_done(struct bx_pair *p)
{
	struct slot *s = (struct slot *)((char *)p - offsetof(struct slot, p));
	int rc = p->err;
	if (!rc &&
	    !(rc = bx_pair_write(p, s->c->acc[s->ia].addr,
	                         s->c->acc[s->ib].addr, p->a.balance > 0)))
		rc = farm_tx_commit(p->tx, commit_cb, s);
	if (rc)
		slot_end(s, rc);
}

static void slot_start(struct slot *s)
{
	struct mach *c = s->c;
	s->h.busy = true;
	s->h.retry_at = 0;
	c->busy++;
	if (!s->tries) {
		s->ia = (unsigned)(bu_rand64(&c->rng) % c->nacc);
		do
			s->ib = (unsigned)(bu_rand64(&c->rng) % c->nacc);
		while (s->ib == s->ia);
	}
	int rc = farm_tx_begin(c->txm, c->loop, &s->p.tx);
	if (rc) {
		s->p.tx = NULL;
		slot_end(s, rc);
		return;
	}
	bx_pair_read(&s->p, c->acc[s->ia].addr, c->acc[s->ib].addr);
}

static void publish(struct mach *c, uint64_t b)
{
	farm_txm_stats ts;
	farm_txm_stats_get(c->txm, &ts);
	atomic_store(&c->st->t_active, ts.rec_t_active_ns);
	atomic_store(&c->st->removed, farm_node_removed(c->node));
	atomic_store(&c->st->config_id, farm_node_config_id(c->node));
	struct farm_copy_stats d[MAX_DR];
	unsigned n = BU_MIN(farm_node_copies_get(c->node, d, MAX_DR), MAX_DR);
	unsigned done = 0;
	for (unsigned i = 0; i < n; i++)
		done += d[i].state == FARM_COPY_DONE;
	atomic_store(&c->st->dr_n, n);
	atomic_store(&c->st->dr_done, done);
	if (b < g_sh->nb)
		g_done[(size_t)c->me * g_sh->nb + b] = (int16_t)done;
}

static int workload(struct mach *c)
{
	struct slot *slots = calloc(g_opt.depth, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (unsigned i = 0; i < g_opt.depth; i++) {
		slots[i].c = c;
		slots[i].p.done = reads_done;
		slot_start(&slots[i]);
	}
	uint64_t lastms = UINT64_MAX;
	while (running(c)) {
		uint64_t now = now_ns();
		uint64_t ms = (now - g_sh->t0) / 1000000ull;
		if (ms != lastms) {
			lastms = ms;
			uint64_t b = (now - g_sh->t0) / BUCKET_NS;
			publish(c, b);
		}
		bx_slots_pass(c->loop, slots, sizeof(*slots), g_opt.depth, now,
		              slot_start_any);
	}
	int rc = bx_slots_drain(c->loop, &c->busy);
	if (!rc)
		free(slots); /* else continuations may still use them */
	return rc;
}

static int wait_cmd(struct mach *c, int want)
{
	static const volatile int never = 0;
	for (;;) {
		int cmd = atomic_load(&g_sh->cmd);
		if (cmd >= want)
			return cmd;
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
}

static int machine(uint32_t me, const char *root, const char *zk_root)
{
	struct mach c = {.me = me, .st = &g_sh->m[me]};
	c.rng = now_ns() ^ ((uint64_t)me << 40) ^ 0x9e3779b97f4a7c15ull;
	farm_conf *cfg;
	if (bn_conf_new(PROG, &cfg)) {
		fail(&c, "configuration", -ENOMEM);
		return 3;
	}
	char v[32];
	int rc = bc_node_config(PROG, cfg, me, root, g_zk_connect, zk_root,
	                        SESSION_MS);
	/* Long leases: five machines on a shared 2-core host lapsed 20 ms
	 * ones and removed survivors, which is not what this measures (the
	 * kill is seen through the fabric's death notice). */
	rc |= bn_set(PROG, cfg, "lease_us", "200000");
	snprintf(v, sizeof(v), "%u", g_opt.pace_bytes);
	rc |= bn_set(PROG, cfg, "datarec_bytes", v);
	snprintf(v, sizeof(v), "%u", g_opt.pace_us);
	rc |= bn_set(PROG, cfg, "datarec_interval_us", v);
	/* --ab-ms: copies held in alternate windows (a measurement-only
	 * key), to compare the foreground with and without them. */
	snprintf(v, sizeof(v), "%u", g_opt.ab_ms);
	rc |= bn_set(PROG, cfg, "datarec_hold_ms", v);
	if (rc) {
		farm_conf_free(cfg);
		fail(&c, "configuration", -EINVAL);
		return 3;
	}
	unsigned stage;
	int st = 5;
	rc = bc_node_up(PROG, cfg, me, g_opt.machines, JOIN_MS, &c.node,
	                &c.loop, &stage);
	farm_conf_free(cfg);
	if (rc) {
		static const char *const what[] = {"open", "start", "join"};
		fail(&c, what[stage], rc);
		st = stage ? 5 : 4;
		goto out;
	}
	c.txm = farm_node_txm(c.node);
	if ((rc = bx_create(c.txm, c.loop, g_opt.accounts,
	                    sizeof(struct bx_acct), INIT_BAL, c.st->acct)) ||
	    (rc = bx_create(c.txm, c.loop, g_opt.fill_mb * 1024u, 1000,
	                    INIT_BAL, NULL))) {
		fail(&c, "create", rc);
		goto out;
	}
	atomic_store(&c.st->state, ST_CREATED);
	st = 8;
	if (wait_cmd(&c, C_GO) != C_GO)
		goto out;
	c.nacc = g_opt.machines * g_opt.accounts;
	c.acc = calloc(c.nacc, sizeof(*c.acc));
	if (!c.acc)
		goto out;
	for (unsigned i = 0; i < g_opt.machines; i++)
		memcpy(c.acc + i * g_opt.accounts, g_sh->m[i].acct,
		       g_opt.accounts * sizeof(*c.acc));
	if ((rc = workload(&c))) {
		fail(&c, "workload", rc);
		goto out;
	}
	c.st->ndr =
	        BU_MIN(farm_node_copies_get(c.node, c.st->dr, MAX_DR), MAX_DR);
	atomic_store(&c.st->state, ST_DONE);
	st = wait_cmd(&c, C_QUIT) == C_QUIT ? 0 : 9;
out:
	free(c.acc);
	if (c.loop)
		farm_node_loop_close(c.node, c.loop);
	farm_node_close(c.node);
	return st;
}

/* ---- the parent ------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: " PROG " [options]\n"
	        "  --machines N     cluster size, 4..%u (5)\n"
	        "  --accounts N     accounts per machine, 2..%u (256)\n"
	        "  --fill-mb N      MiB of 1 KiB objects per machine (6)\n"
	        "  --depth N        transfers in flight per machine (8)\n"
	        "  --pre-ms N       steady load before the kill (3000)\n"
	        "  --tail-ms N      load after the last copy (3000)\n"
	        "  --stall-ms N     left out of the copy window after the "
	        "kill (1500)\n"
	        "  --pace-bytes N   datarec_bytes (8192)\n"
	        "  --pace-us N      datarec_interval_us (2000)\n"
	        "  --ab-ms N        copies held every other N ms, to compare "
	        "the\n"
	        "                   foreground with and without them (500; 0: "
	        "off,\n"
	        "                   the copy window against after it)\n"
	        "  --quick          a short run (smoke test)\n"
	        "  --out DIR        timeline files (default: /tmp)\n"
	        "  --verbose        machines' logs to stderr\n",
	        NMAX, MAX_ACCT);
}

/* Transfers/s over the buckets [b0, b1) of kind @kind: 0 copies
 * running, 1 held, -1 any. */
static double mean_rate(const uint32_t *sum, uint64_t b0, uint64_t b1, int kind)
{
	uint64_t n = 0, k = 0;
	for (uint64_t b = b0; b < b1; b++) {
		if (kind >= 0 &&
		    (!steady(b) || held(b * BUCKET_NS) != (kind == 1)))
			continue;
		n += sum[b];
		k++;
	}
	return k ? (double)n / ((double)k * BUCKET_NS / 1e9) : 0;
}

/* Time copies ran in [t0, t1] (ns, CLOCK_MONOTONIC). */
static double run_s(uint64_t t0, uint64_t t1)
{
	if (!g_opt.ab_ms)
		return (t1 - t0) / 1e9;
	uint64_t on = 0;
	for (uint64_t t = t0; t < t1; t += 1000000ull)
		on += !held(t - g_sh->t0);
	return on / 1e3;
}

/* One option: 0 when taken (*i past its value), 2 when unknown or bad
 * (said on stderr), -1 after --help. */
static int parse_opt(int argc, char **argv, int *i)
{
	static const struct {
		const char *name;
		unsigned lo, hi;
		unsigned *dst;
	} nums[] = {
	        {"--machines", 4, NMAX, &g_opt.machines},
	        {"--accounts", 2, MAX_ACCT, &g_opt.accounts},
	        {"--fill-mb", 0, 12, &g_opt.fill_mb},
	        {"--depth", 1, 64, &g_opt.depth},
	        {"--pre-ms", 500, 600000, &g_opt.pre_ms},
	        {"--tail-ms", 500, 600000, &g_opt.tail_ms},
	        {"--stall-ms", 0, 60000, &g_opt.stall_ms},
	        {"--pace-bytes", 64, 1u << 30, &g_opt.pace_bytes},
	        {"--ab-ms", 0, 60000, &g_opt.ab_ms},
	        {"--pace-us", 10, 10000000, &g_opt.pace_us},
	};
	const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
	if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
		usage(stdout);
		return -1;
	}
	if (!strcmp(a, "--quick")) {
		g_opt.pre_ms = 1500;
		g_opt.tail_ms = 1000;
		g_opt.fill_mb = 2;
		return 0;
	}
	if (!strcmp(a, "--verbose")) {
		g_opt.verbose = true;
		return 0;
	}
	int bad = 0;
	size_t k = 0;
	while (k < sizeof(nums) / sizeof(nums[0]) && strcmp(a, nums[k].name))
		k++;
	if (k < sizeof(nums) / sizeof(nums[0])) {
		bad = bu_parse_u(v, nums[k].lo, nums[k].hi, nums[k].dst);
		if (!bad && nums[k].dst == &g_opt.ab_ms && g_opt.ab_ms % 10)
			bad = -1; /* whole 10 ms buckets */
	} else if (!strcmp(a, "--out") && v) {
		g_opt.out = v;
	} else {
		fprintf(stderr, PROG ": unknown option %s\n", a);
		usage(stderr);
		return 2;
	}
	if (bad) {
		fprintf(stderr, PROG ": bad value for %s\n", a);
		return 2;
	}
	(*i)++;
	return 0;
}

/* The memory shared with the machines (before the fork): the block and
 * the per-bucket counts for @nb buckets. */
static int map_shared(uint32_t nb)
{
	size_t len = sizeof(struct shared) +
	             (size_t)NMAX * nb * (sizeof(uint32_t) + sizeof(int16_t));
	void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE,
	                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror(PROG ": mmap");
		return 1;
	}
	g_sh = mem;
	g_sh->nb = nb;
	g_ops = (uint32_t *)(g_sh + 1);
	g_done = (int16_t *)(g_ops + (size_t)NMAX * nb);
	memset(g_done, 0xff, (size_t)NMAX * nb * sizeof(int16_t));
	return 0;
}

/* Until every machine has made its data; 1 when one failed or five
 * minutes went by. */
static int wait_created(void)
{
	uint64_t dl = now_ns() + 300000000000ull;
	for (bool all = false; !all;) {
		int rc = 0;
		all = true;
		for (unsigned i = 0; i < g_opt.machines; i++) {
			int s = atomic_load(&g_sh->m[i].state);
			if (s == ST_FAILED) {
				fprintf(stderr,
				        PROG ": machine %u failed: %s\n", i,
				        g_sh->m[i].fail_what);
				rc = 1;
			}
			all &= s == ST_CREATED;
		}
		if (rc || now_ns() > dl)
			return 1;
		if (!all)
			nap_ms(20);
	}
	return 0;
}

/* The run's moments (monotonic ns) and what the copies did. */
struct times {
	uint64_t t_kill, t_rec, t_first, t_last, t_stop, t_end;
	unsigned ncopies;
};

/* After the kill: recovered, then every copy complete (progress each
 * s); 1 when the copies took over 120 s. */
static int wait_copies(struct times *t)
{
	uint64_t last_say = now_ns();
	uint64_t dl = now_ns() + 120000000000ull;
	for (;;) {
		bool rec = true;
		unsigned n = 0, done = 0;
		for (unsigned i = 0; i < g_opt.machines; i++) {
			if (i == VICTIM)
				continue;
			rec &= atomic_load(&g_sh->m[i].t_active) > t->t_kill;
			n += atomic_load(&g_sh->m[i].dr_n);
			done += atomic_load(&g_sh->m[i].dr_done);
		}
		uint64_t now = now_ns();
		if (rec && !t->t_rec)
			t->t_rec = now;
		if (t->t_rec && now > t->t_rec + 500000000ull && n && done == n)
			return 0;
		if (now > dl) {
			fprintf(stderr,
			        PROG ": %u of %u copies done after "
			             "120 s\n",
			        done, n);
			return 1;
		}
		if (now - last_say > 1000000000ull) {
			printf(PROG ": %.1f s after the kill: %u of %u "
			            "copies complete\n",
			       (now - t->t_kill) / 1e9, done, n);
			fflush(stdout);
			last_say = now;
		}
		nap_ms(10);
	}
}

/* Load, kill the victim, wait for its copies, then the tail. */
static int run_kill(struct times *t)
{
	printf(PROG ": data made; load for %u ms, then machine %u is "
	            "killed\n",
	       g_opt.pre_ms, VICTIM);
	fflush(stdout);
	g_sh->t0 = now_ns();
	if (g_opt.ab_ms) {
		/* The machines hold copies in the odd windows of ab_ms of the
		 * monotonic clock (datarec_hold_ms): t0 on an even window's
		 * start makes held() count the same windows from t0. */
		uint64_t w2 = 2ull * g_opt.ab_ms * 1000000ull;
		g_sh->t0 = (g_sh->t0 / w2 + 1) * w2;
		while (now_ns() < g_sh->t0)
			nap_ms(1);
	}
	atomic_store(&g_sh->cmd, C_GO);
	nap_ms(g_opt.pre_ms);
	t->t_kill = now_ns();
	kill(g_pid[VICTIM], SIGKILL);
	(void)waitpid(g_pid[VICTIM], NULL, 0);
	g_pid[VICTIM] = 0;
	int rc = wait_copies(t);
	nap_ms(g_opt.tail_ms);
	return rc;
}

/* Stop the workload, wait for every machine (30 s each), reap them; 1
 * when one exited badly. */
static int stop_machines(const char *root, struct times *t)
{
	int rc = 0;
	t->t_stop = now_ns();
	atomic_store(&g_sh->cmd, C_STOP);
	for (unsigned i = 0; i < g_opt.machines; i++) {
		if (!g_pid[i])
			continue;
		uint64_t d2 = now_ns() + 30000000000ull;
		while (atomic_load(&g_sh->m[i].state) != ST_DONE &&
		       atomic_load(&g_sh->m[i].state) != ST_FAILED &&
		       now_ns() < d2)
			nap_ms(10);
	}
	t->t_end = now_ns();
	atomic_store(&g_sh->cmd, C_QUIT);
	for (unsigned i = 0; i < g_opt.machines; i++)
		if (g_pid[i]) {
			int st = 0;
			(void)waitpid(g_pid[i], &st, 0);
			if (!WIFEXITED(st) || WEXITSTATUS(st)) {
				fprintf(stderr,
				        PROG ": machine %u exited with %d (log "
				             "%s/m%u.log)\n",
				        i, st, root, i);
				rc = 1;
			}
		}
	return rc;
}

/* Machine @i's copies, each printed; its bytes, READs and span. */
static void machine_copies(unsigned i, struct times *t, uint64_t *bytes,
                           uint64_t *reads, uint64_t *t0, uint64_t *t1)
{
	const struct mstat *m = &g_sh->m[i];
	*bytes = *reads = *t1 = 0;
	*t0 = UINT64_MAX;
	for (unsigned k = 0; k < m->ndr; k++) {
		const struct farm_copy_stats *d = &m->dr[k];
		t->ncopies++;
		*bytes += d->bytes;
		*reads += d->reads;
		*t0 = BU_MIN(*t0, d->t_start_ns);
		*t1 = BU_MAX(*t1, d->t_done_ns);
		printf("machine %u: region %#" PRIx32 ": %" PRIu64
		       " bytes in %" PRIu64 " READs, %.1f ms%s\n",
		       i, d->region, d->bytes, d->reads,
		       d->t_done_ns ? (d->t_done_ns - d->t_start_ns) / 1e6
		                    : 0.0,
		       d->state == FARM_COPY_DONE ? "" : " (not done)");
	}
}

/* Copies: each new backup's bytes over its copying time; the mean pace
 * (bytes/s) and READs per second. */
static void copies(struct times *t, double *pace, double *ticks)
{
	double pace_cfg = g_opt.pace_bytes / (g_opt.pace_us * 1e-6);
	double pace_sum = 0, tick_sum = 0;
	unsigned npace = 0;
	for (unsigned i = 0; i < g_opt.machines; i++) {
		const struct mstat *m = &g_sh->m[i];
		if (i == VICTIM || !m->ndr)
			continue;
		uint64_t bytes, reads, t0, t1;
		machine_copies(i, t, &bytes, &reads, &t0, &t1);
		t->t_first = BU_MIN(t->t_first, t0);
		t->t_last = BU_MAX(t->t_last, t1);
		if (t1 > t0 && bytes) {
			/* One loop per machine here: its copies share it. */
			double s = run_s(t0, t1);
			pace_sum += bytes / s;
			tick_sum += reads / s;
			npace++;
			printf("machine %u: %u copies, %.2f MB/s over %.1f ms "
			       "(configured %.2f MB/s), %.0f READs/s (one "
			       "per interval: %.0f)\n",
			       i, m->ndr, bytes / s / 1e6, s * 1e3,
			       pace_cfg / 1e6, reads / s, 1e6 / g_opt.pace_us);
		}
	}
	*pace = npace ? pace_sum / npace : 0;
	*ticks = npace ? tick_sum / npace : 0;
}

/* The survivors' transfers (sum) and regions copied (done) per bucket. */
static void timeline(uint32_t nb, uint64_t nbk, uint32_t *sum, int *done)
{
	int last[NMAX] = {0};
	for (uint64_t b = 0; b < nbk; b++) {
		for (unsigned i = 0; i < g_opt.machines; i++) {
			if (i == VICTIM)
				continue;
			sum[b] += g_ops[(size_t)i * nb + b];
			int16_t d = g_done[(size_t)i * nb + b];
			if (d >= 0)
				last[i] = d;
			done[b] += last[i];
		}
	}
}

/* The survivors' throughput before the kill, during the copies, without
 * them (held windows or after) and after; bs: the copy window's first
 * bucket. */
struct rates {
	double before, during, without, after;
	uint64_t bs;
};

static void compute_rates(const struct times *t, const uint32_t *sum,
                          uint64_t nbk, struct rates *r)
{
	uint64_t bk = (t->t_kill - g_sh->t0) / BUCKET_NS;
	r->bs = (BU_MAX(t->t_first, t->t_kill + g_opt.stall_ms * 1000000ull) -
	         g_sh->t0) /
	        BUCKET_NS;
	uint64_t be = (t->t_last - g_sh->t0) / BUCKET_NS;
	uint64_t ba = (t->t_last + 200000000ull - g_sh->t0) / BUCKET_NS;
	r->before = mean_rate(sum, bk > 100 ? bk - 100 : 0, bk, -1);
	/* A/B: the windows with copies running against those held, over
	 * the same stretch of time (the host's load drifts by more than the
	 * copies cost). Without --ab-ms: the copy window against after. */
	r->during = mean_rate(sum, r->bs, be, g_opt.ab_ms ? 0 : -1);
	double held_rate = g_opt.ab_ms ? mean_rate(sum, r->bs, be, 1) : 0;
	uint64_t bz = BU_MIN(nbk, (t->t_stop - g_sh->t0) / BUCKET_NS);
	r->after = mean_rate(sum, ba, bz, -1);
	r->without = g_opt.ab_ms ? held_rate : r->after;
}

/* The timeline as a gnuplot data file in @out (@path), and a PNG when
 * gnuplot is there. */
static void write_timeline(const char *out, char *path, size_t plen,
                           const struct times *t, const uint32_t *sum,
                           const int *done, uint64_t nbk)
{
	snprintf(path, plen, "%s/datarec_timeline.dat", out);
	if (mkdir(out, 0755) && errno != EEXIST)
		fprintf(stderr, PROG ": mkdir %s: %s\n", out, strerror(errno));
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return;
	}
	fprintf(f, "# ms_after_kill regions_replicated "
	           "transfers_per_s (survivors, 10 ms buckets)\n");
	for (uint64_t b = 0; b < nbk; b++)
		fprintf(f, "%.0f %d %.0f\n",
		        ((double)b * BUCKET_NS -
		         (double)(t->t_kill - g_sh->t0)) /
		                1e6,
		        done[b], sum[b] / (BUCKET_NS / 1e9));
	fclose(f);
	char cmd[1400];
	snprintf(cmd, sizeof(cmd),
	         "command -v gnuplot >/dev/null && gnuplot -e \""
	         "set terminal png size 900,500; set output "
	         "'%s/datarec_timeline.png'; set xlabel 'ms after the "
	         "kill'; set ylabel 'transfers/s'; set y2label "
	         "'regions re-replicated'; set y2tics; set ytics "
	         "nomirror; plot '%s' using 1:3 with lines title "
	         "'survivors transfers/s', '' using 1:2 axes x1y2 "
	         "with steps lw 2 title 'regions re-replicated'\" "
	         "2>/dev/null",
	         out, path);
	if (system(cmd) == 0)
		printf(PROG ": plot %s/datarec_timeline.png\n", out);
}

static void print_summary(const struct times *t, const struct rates *r,
                          double pace, double ticks, const char *path)
{
	double pace_cfg = g_opt.pace_bytes / (g_opt.pace_us * 1e-6);
	printf(PROG ": kill at %.0f ms; recovered after %.0f ms; %u copies "
	            "from %.0f to %.0f ms after the kill\n",
	       (t->t_kill - g_sh->t0) / 1e6,
	       t->t_rec ? (t->t_rec - t->t_kill) / 1e6 : -1.0, t->ncopies,
	       ((double)t->t_first - (double)t->t_kill) / 1e6,
	       ((double)t->t_last - (double)t->t_kill) / 1e6);
	printf(PROG ": transfers/s: %.0f before the kill (%u machines); "
	            "from %.0f ms after the kill to the last copy: %.0f with "
	            "copies running, %.0f %s: %.1f%%; %.0f after the copies\n",
	       r->before, g_opt.machines,
	       ((double)r->bs * BUCKET_NS - (double)(t->t_kill - g_sh->t0)) /
	               1e6,
	       r->during, r->without,
	       g_opt.ab_ms ? "with them held (alternate windows)"
	                   : "after them",
	       r->without > 0 ? 100.0 * r->during / r->without : 0.0, r->after);
	printf(PROG ": pace %.2f MB/s per new backup (configured %.2f), "
	            "%.0f READs/s (configured %.0f); timeline %s\n",
	       pace / 1e6, pace_cfg / 1e6, ticks, 1e6 / g_opt.pace_us, path);
	unsigned removed = 0;
	uint64_t cmax = 0;
	for (unsigned i = 0; i < g_opt.machines; i++) {
		if (i == VICTIM)
			continue;
		removed += atomic_load(&g_sh->m[i].removed);
		cmax = BU_MAX(cmax, atomic_load(&g_sh->m[i].config_id));
	}
	if (removed)
		fprintf(stderr,
		        PROG
		        ": %u survivor(s) were removed too (a false "
		        "suspicion): the figures are not data recovery's\n",
		        removed);
	printf(PROG ": last configuration %" PRIu64 ", %u survivor(s) "
	            "removed\n",
	       cmax, removed);
}

static void print_json(const struct times *t, const struct rates *r,
                       double pace, double ticks)
{
	double pace_cfg = g_opt.pace_bytes / (g_opt.pace_us * 1e-6);
	double ratio = r->without > 0 ? r->during / r->without : 0;
	double pratio = pace / pace_cfg;
	printf("{\"bench\": \"datarec\", \"machines\": %u, \"fill_mb\": %u, "
	       "\"pace_bytes\": %u, \"pace_us\": %u, \"copies\": %u, "
	       "\"ab_ms\": %u, \"copy_ms\": %.0f, \"tput_before\": %.0f, "
	       "\"tput_during\": %.0f, \"tput_without\": %.0f, "
	       "\"tput_after\": %.0f, \"pace_mbps\": %.3f, "
	       "\"reads_per_s\": %.0f, \"goals\": {\"tput_during_vs_without\": "
	       "{\"value\": %.3f, \"target\": 0.9, \"met\": %s}, "
	       "\"pace_vs_configured\": {\"value\": %.3f, \"target\": 0.9, "
	       "\"met\": %s}}}\n",
	       g_opt.machines, g_opt.fill_mb, g_opt.pace_bytes, g_opt.pace_us,
	       t->ncopies, g_opt.ab_ms,
	       ((double)t->t_last - (double)t->t_first) / 1e6, r->before,
	       r->during, r->without, r->after, pace / 1e6, ticks, ratio,
	       ratio >= 0.9 ? "true" : "false", pratio,
	       pratio >= 0.9 ? "true" : "false");
}

/* The figures from what the machines left in the shared memory. */
static void report(const char *out, uint32_t nb, const struct times *tc)
{
	struct times t = *tc;
	double pace, ticks;
	copies(&t, &pace, &ticks);
	uint64_t nbk = BU_MIN((uint64_t)nb, (t.t_end - g_sh->t0) / BUCKET_NS);
	uint32_t *sum = calloc(nbk + 1, sizeof(*sum));
	int *done = calloc(nbk + 1, sizeof(*done));
	timeline(nb, nbk, sum, done);
	struct rates r;
	compute_rates(&t, sum, nbk, &r);
	char path[512];
	write_timeline(out, path, sizeof(path), &t, sum, done, nbk);
	print_summary(&t, &r, pace, ticks, path);
	print_json(&t, &r, pace, ticks);
	free(sum);
	free(done);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		int o = parse_opt(argc, argv, &i);
		if (o)
			return o < 0 ? 0 : o;
	}
	const char *out = g_opt.out ? g_opt.out : "/tmp";
	/* A run is at most pre + 2 min of copies + tail. */
	uint32_t nb =
	        (uint32_t)((g_opt.pre_ms + 120000u + g_opt.tail_ms + 10000u) /
	                   (BUCKET_NS / 1000000ull));
	if (map_shared(nb))
		return 1;

	snprintf(g_zk_dir, sizeof(g_zk_dir), "/dev/shm/farm-drbench-zk-XXXXXX");
	int zst = bc_zk_start(PROG, g_opt.zk_script, NULL, g_zk_dir,
	                      g_zk_connect, sizeof(g_zk_connect));
	if (zst)
		return zst;
	char root[] = "/dev/shm/farm-drbench-XXXXXX";
	if (!mkdtemp(root)) {
		perror(PROG ": mkdtemp");
		return 1;
	}
	char zk_root[96];
	snprintf(zk_root, sizeof(zk_root), "/libfarm/drbench-%d",
	         (int)getpid());
	printf(PROG
	       ": %u machines, %u accounts and %u MiB of 1 KiB objects "
	       "each, depth %u; pace %u bytes per %u us per loop (%.2f MB/s)\n",
	       g_opt.machines, g_opt.accounts, g_opt.fill_mb, g_opt.depth,
	       g_opt.pace_bytes, g_opt.pace_us,
	       g_opt.pace_bytes / (g_opt.pace_us * 1e-6) / 1e6);
	fflush(stdout);
	for (unsigned i = 0; i < g_opt.machines; i++)
		g_pid[i] = bc_spawn(i, root, zk_root, g_opt.verbose, machine);
	struct times t = {.t_first = UINT64_MAX};
	int rc = wait_created();
	if (!rc)
		rc = run_kill(&t);
	rc |= stop_machines(root, &t);
	bc_zk_stop(PROG, g_opt.zk_script, NULL, g_zk_dir);
	if (rc) {
		fprintf(stderr, PROG ": failed; machines' logs in %s\n", root);
		return 1;
	}
	report(out, nb, &t);
	bu_rm_tree(AT_FDCWD, root, 4);
	return 0;
}
