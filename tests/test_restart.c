/*
 * Whole-cluster restart from durable memory (items 3 and 6;
 * src/node/restart.c, src/txn/restart.c).
 *
 *   bank      NP_NM machines through a private ZooKeeper run the bank
 *             workload of txproc.h, streaming their histories. Then one
 *             commit is caught between its acknowledgement and its
 *             install: machine 1's COMMIT-PRIMARY handler stops at the
 *             fault point FARM_FP_TX_ON_PRIMARY (the record landed, so
 *             its coordinator reports the commit; machine 1 never
 *             installs it). Every machine is then killed with SIGKILL at
 *             once, and all are started again on the same data
 *             directories, with every znode of the cluster's root
 *             but the configuration deleted first (the issue: the
 *             restart needs no ZooKeeper state beyond the configuration
 *             znode). After the restart: every account is readable lock-free
 *             (no stale lock), the total is conserved, every write of
 *             every transaction its coordinator reported committed is
 *             present (each account's version is at least the highest
 *             one a committed transfer wrote), the pre-kill histories
 *             are strictly serializable, and a new transfer commits.
 *             --broken: the restart applies no log record
 *             (FARM_FP_RESTART_NO_REPLAY); the caught commit must be
 *             found missing.
 *   slow      the bank case with every restart slowed: the restart's
 *             allocator rebuild keeps its thread busy for RS_SLOW_MS
 *             (FARM_FP_RESTART_SLOW, a CPU-bound delay point, as the
 *             walks of gigabytes are). The restart must run at normal
 *             priority, below the membership's and the leases' real-time
 *             threads that apply views and renew leases, and no lease may
 *             lapse on any machine. --broken-slow: the restart keeps the
 *             real-time priority of the thread that applies the view
 *             (FARM_FP_RESTART_REALTIME, the code before the fix; at
 *             SCHED_FIFO it held the cores from the other machines'
 *             ZooKeeper threads and server, and restart_bench --replicas
 *             3 lost a lease); the priority check must fail.
 *   damaged   one machine with static membership writes an object and
 *             shuts down cleanly; copies of its directory are damaged (a
 *             region file's magic, the manifest's trailer, the log's
 *             size, the wire version the manifest names) or started
 *             as another machine or as a machine of another cluster:
 *             each start is refused with the file and offset named, and
 *             every file is left as
 *             it was (names, sizes, bytes). The intact directory
 *             restarts, with the object's value. --broken-check: the
 *             check is off (FARM_FP_RESTART_NO_CHECK); the damaged region
 *             file must then be accepted, which the test notices.
 *   stale     one machine with static membership commits an array small
 *             enough for one slab slot (the KV store's bucket arrays are
 *             such), then locks four of its elements, the first among
 *             them, as a commit killed between its lock and its install
 *             leaves them (shared: a single-machine commit; exclusive:
 *             a LOCK record), and is killed. After its restart no element
 *             may be locked, and a transaction writing every element
 *             must commit. --broken-stale: the region walk the restart
 *             clears locks with sees a slot's first header only
 *             (FARM_FP_ALLOC_WALK_SLOTS, the walk before the fix); the
 *             elements after the first must be found locked.
 */
#ifndef NP_NM
#define NP_NM                                                       \
	3 /* test_restart4: 4 (the lost case with a machine left to \
	     take the lost copies) */
#endif
#include "txproc.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>

#include "coord/membership.h"
#include "node/restart.h"
#include "node/restart_int.h"
#include "txn/object.h"
#include "replicas.h"
#include "util/fault.h"
#include "util/wire.h"
#include "brokenarg.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define RS_ACCOUNTS   20
#define RS_NACC       (NP_NM * RS_ACCOUNTS)
#define RS_SESSION_MS 1500
#define RS_LEASE_US   50000u
#define RS_JOIN_MS    60000
#define RS_PRE        200  /* transfers per machine before the catch */
#define RS_SLOW_MS    1500 /* the slow case's busy restart, per machine */

/* restart_wait_ms of the lost case: long, for the refused machine's
 * notice, not this wait, must make the others go on without it. */
#define RS_WAIT_MS 20000

static char zk_dir[256], zk_connect[64], zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool broken, broken_check, broken_lost, broken_kv, broken_rings,
        broken_notice, broken_stale, slow, broken_slow;
static struct np_cluster cl;

/* ---- the bank run (child side) ----------------------------------------- */

static struct tx_child *self;
/* The lost case: machine 0 never writes machine 1's accounts, so every
 * commit caught on machine 1 is coordinated by machine 2. */
static bool spare_1;

static void hold(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	/* The COMMIT-PRIMARY landed and is never processed here: its
	 * coordinator reports the commit, the install never happens. */
	(void)np_say(&self->np, 'H', NULL, 0);
	for (;;)
		pause();
}

/* The lost case: machine 2's last commit, a transfer between two of its
 * own accounts (a single-machine commit: COMMIT-BACKUPs at its regions'
 * two backups, no COMMIT-PRIMARY), committed and in the history file.
 * Nothing it coordinates after it carries a low-water mark past it, so
 * only both backups' COMMIT-BACKUPs prove it at the restart. */
static int last_commit(struct tx_child *c, struct bank_counts *k,
                       const farm_fatptr *mine)
{
	uint64_t dl = np_now_ns() + 30000000000ull;
	for (unsigned i = 0; np_now_ns() < dl; i++) {
		farm_gaddr a = mine[i % RS_ACCOUNTS].addr;
		farm_gaddr b = mine[(i + 1) % RS_ACCOUNTS].addr;
		bool declined;
		int rc = transfer(c, k, a, b, 1, &declined);
		if (!rc && !declined) {
			tx_hist_flush(c);
			return 0;
		}
		if (rc && !farm_tx_retryable(rc))
			return -1;
		static const volatile int never = 0;
		(void)farm_loop_wait(c->np.loop, &never, 1000000ull);
	}
	return -1;
}

static int run_role(struct tx_child *c)
{
	farm_fatptr mine[RS_ACCOUNTS];
	farm_fatptr *acc = share_objs(c, "acct", RS_ACCOUNTS, 64, fill_account,
	                              NULL, mine);
	if (!acc)
		return 20;
	struct bank_counts k = {0};
	bool said = false, quiet = false;
	for (;;) {
		if (!said && k.transfers >= RS_PRE) {
			if (np_say(&c->np, 'P', NULL, 0))
				return 21;
			said = true;
		}
		int cmd = np_poll_cmd(&c->np);
		if (cmd == 'A' &&
		    farm_fault_set(FARM_FP_TX_ON_PRIMARY, hold, NULL))
			return 22;
		if (cmd == 'F') { /* everything acknowledged is in the file */
			tx_hist_flush(c);
			if (np_say(&c->np, 'f', NULL, 0))
				return 23;
		}
		if (cmd == 'Q')
			return 0;
		/* The lost case: one last commit, then none. */
		if (cmd == 'L') {
			if (last_commit(c, &k, mine))
				return 24;
			quiet = true;
			if (np_say(&c->np, 'l', NULL, 0))
				return 25;
		}
		if (cmd == 'S') { /* the lost case: coordinate nothing more */
			quiet = true;
			if (np_say(&c->np, 's', NULL, 0))
				return 26;
		}
		if (quiet) { /* serve peers' requests, coordinate nothing */
			static const volatile int never = 0;
			(void)farm_loop_wait(c->np.loop, &never, 1000000ull);
			continue;
		}
		if (spare_1 && c->np.me == 0) {
			farm_fatptr no1[RS_NACC - RS_ACCOUNTS];
			memcpy(no1, acc, RS_ACCOUNTS * sizeof(*acc));
			memcpy(no1 + RS_ACCOUNTS, acc + 2 * RS_ACCOUNTS,
			       (RS_NACC - 2 * RS_ACCOUNTS) * sizeof(*acc));
			bank_step(c, &k, mine, RS_ACCOUNTS, no1,
			          RS_NACC - RS_ACCOUNTS, 2000000000ull);
			continue;
		}
		bank_step(c, &k, mine, RS_ACCOUNTS, acc, RS_NACC,
		          2000000000ull);
	}
}

static int config(struct np_child *np, struct farm_config *cfg)
{
	int st = np_config_zk(np, "16M", zk_connect, zk_root, RS_SESSION_MS,
	                      RS_LEASE_US, cfg);
	cfg->replicas = 3;
	/* Only the lost case gives machines up: elsewhere a machine whose
	 * old ZooKeeper session outlived the kill must be waited for (given
	 * up after 1.5 s, it failed test_restart --broken once). */
	cfg->restart_wait_ms = spare_1 ? RS_WAIT_MS : 0;
	/* Copies after a restart without a lost machine: 16 MiB regions
	 * at 32 MB/s a loop (the default 4 MB/s would take seconds). */
	cfg->datarec_bytes = 64u << 10;
	cfg->datarec_interval_us = 2000;
	return st;
}

static int run_machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct tx_child c = {.np = *np};
	self = &c;
	struct farm_config cfg;
	int st = config(np, &cfg);
	if (st)
		return st;
	if (tx_hist_stream(&c))
		return 8;
	return tx_child_run(&c, &cfg, RS_JOIN_MS, run_role);
}

/* ---- after the restart (child side) -------------------------------------- */

struct scan {
	int rc[RS_NACC];
	int64_t bal[RS_NACC];
	uint64_t ver[RS_NACC];
	int sum_rc, transfer_rc;
	int64_t sum;
	struct farm_restart_stats st;
	/* The slow case: the restart's scheduling policy where it was
	 * slowed (-1: never reached), and the leases that lapsed here. */
	int slow_policy;
	uint64_t lapsed;
};

static _Atomic int slow_policy = -1;

/* FARM_FP_RESTART_SLOW: the restart's thread, as busy as a rebuild of
 * gigabytes, its scheduling policy noted. */
static void slow_spin(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	int pol = -1;
	struct sched_param sp;
	if (pthread_getschedparam(pthread_self(), &pol, &sp))
		pol = -1;
	atomic_store(&slow_policy, pol);
	uint64_t end = np_now_ns() + (uint64_t)RS_SLOW_MS * 1000000ull;
	while (np_now_ns() < end)
		;
}

static int check_role(struct tx_child *c)
{
	unsigned n = 0;
	farm_fatptr *acc = load_objs(c, "acct", &n);
	struct scan *s = calloc(1, sizeof(*s));
	if (!acc || n != RS_NACC || !s)
		return 30;
	farm_node_restart_stats(c->np.node, &s->st);
	s->slow_policy = atomic_load(&slow_policy);
	struct farm_node_stats ns = {.size = sizeof(ns)};
	if (!farm_node_stats_get(c->np.node, &ns))
		s->lapsed = ns.lease.expiries + ns.lease.lost;
	if (c->np.me == 0) {
		for (unsigned i = 0; i < RS_NACC; i++)
			s->rc[i] = lf_account(c, acc[i].addr, &s->bal[i],
			                      &s->ver[i]);
		struct bank_counts k = {0};
		int64_t minb;
		s->sum_rc = -EAGAIN;
		for (unsigned t = 0; t < 20 && farm_tx_retryable(s->sum_rc);
		     t++)
			s->sum_rc = ro_sum(c, &k, acc, RS_NACC, RS_NACC,
			                   &s->sum, &minb);
		bool declined;
		s->transfer_rc = -EAGAIN;
		for (unsigned t = 0;
		     t < 20 && farm_tx_retryable(s->transfer_rc); t++)
			s->transfer_rc =
			        transfer(c, &k, acc[0].addr,
			                 acc[RS_NACC - 1].addr, 0, &declined);
	}
	int st = np_say(&c->np, 's', s, sizeof(*s)) ? 31 : 0;
	free(s);
	free(acc);
	int cmd = st ? 0 : np_wait_cmd(&c->np);
	while (cmd == 'g') { /* -> 'G': what it holds (replicas.h) */
		struct held_report *r = calloc(1, sizeof(*r));
		if (!r)
			return 34;
		rp_held(c, r);
		int rc = np_say(&c->np, 'G', r, sizeof(*r));
		free(r);
		if (rc)
			return 35;
		cmd = np_wait_cmd(&c->np);
	}
	if (cmd == 'Z') { /* a clean whole-cluster shutdown, in two steps */
		farm_node_quiesce(c->np.node);
		if (np_say(&c->np, 'z', NULL, 0) || np_wait_cmd(&c->np) != 'Q')
			return 33;
		farm_node_loop_close(c->np.node, c->np.loop);
		farm_node_shutdown(c->np.node);
		_exit(0); /* the node is gone: not tx_child_run's close */
	}
	if (!st && cmd != 'Q')
		st = 32;
	return st;
}

static int check_machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct tx_child c = {.np = *np};
	struct farm_config cfg;
	int st = config(np, &cfg);
	if (st)
		return st;
	if (broken &&
	    farm_fault_set(FARM_FP_RESTART_NO_REPLAY, tu_switch_on, NULL))
		return 9;
	if (broken_lost &&
	    farm_fault_set(FARM_FP_RESTART_LOST_STRICT, tu_switch_on, NULL))
		return 9;
	if (broken_rings &&
	    farm_fault_set(FARM_FP_RESTART_VIEW_RINGS, tu_switch_on, NULL))
		return 9;
	if (slow && farm_fault_set(FARM_FP_RESTART_SLOW, slow_spin, NULL))
		return 9;
	if (broken_slow &&
	    farm_fault_set(FARM_FP_RESTART_REALTIME, tu_switch_on, NULL))
		return 9;
	return tx_child_run(&c, &cfg, RS_JOIN_MS, check_role);
}

/* ---- the bank test (parent) ---------------------------------------------- */

struct committed {
	const farm_fatptr *acc;
	uint64_t max[RS_NACC];
};

static void on_write(void *ctx, uint64_t key, uint64_t version)
{
	struct committed *cm = ctx;
	for (unsigned i = 0; i < RS_NACC; i++)
		if (cm->acc[i].addr == key && version > cm->max[i])
			cm->max[i] = version;
}

/* The bank until one commit is caught on machine 1 (acknowledged, not
 * installed), then every machine killed at once. What was acknowledged
 * into @cm (accounts into @acc), the pre-kill histories' anomalies into
 * *@anomalies, the transactions open at the kill into *@cut. */
static uint64_t bank_then_kill(struct committed *cm, farm_fatptr *acc,
                               int *anomalies, uint64_t *cut, bool spare)
{
	spare_1 = spare; /* the machines inherit it */
	np_start(&cl, "restart", run_machine, NULL);
	p_setup(&cl);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'P', 120000);
	/* Catch one commit between its acknowledgement and its install. */
	np_send(&cl, 1, 'A');
	np_expect(&cl, 1, 'H', 60000);
	/* The lost case: the others stop coordinating (a later transfer
	 * would write the accounts again, its images hiding a lost write),
	 * then machine 2 (lost at the restart) commits once more on its own
	 * accounts and then coordinates nothing. */
	if (spare) {
		for (unsigned i = 0; i < NP_NM; i++)
			if (i != 1 && i != 2) {
				np_send(&cl, i, 'S');
				np_expect(&cl, i, 's', 60000);
			}
		np_send(&cl, 2, 'L');
		np_expect(&cl, 2, 'l', 60000);
	}
	for (unsigned i = 0; i < NP_NM; i++)
		if (i != 1) {
			np_send(&cl, i, 'F');
			np_expect(&cl, i, 'f', 30000);
		}
	/* Every machine at once: stopped first (each waited on until it
	 * has stopped), so none sees another die and reconfigures in
	 * between (a power loss takes all at once). */
	for (unsigned i = 0; i < NP_NM; i++)
		assert_int_equal(tu_stop(cl.pid[i]), 0);
	for (unsigned i = 0; i < NP_NM; i++)
		assert_int_equal(kill(cl.pid[i], SIGKILL), 0);
	uint64_t t_kill = np_now_ns();
	for (unsigned i = 0; i < NP_NM; i++) {
		assert_int_equal(tu_reap(cl.pid[i]), 128 + SIGKILL);
		cl.pid[i] = 0;
		close(cl.to[i]);
		close(cl.from[i]);
		cl.to[i] = cl.from[i] = -1;
	}
	/* What was acknowledged before the kill. */
	size_t len;
	char path[600];
	unsigned na = 0;
	for (unsigned i = 0; i < NP_NM; i++) {
		snprintf(path, sizeof(path), "%s/acct-%u", cl.root, i);
		farm_fatptr *p = np_read_file(path, &len);
		assert_non_null(p);
		assert_int_equal(len, RS_ACCOUNTS * sizeof(*p));
		memcpy(acc + na, p, len);
		na += RS_ACCOUNTS;
		free(p);
	}
	cm->acc = acc;
	sc_report rep;
	*anomalies = tx_check_history(&cl, (1ull << NP_NM) - 1, &rep, cut,
	                              on_write, cm);
	return t_kill;
}

/* Machine 0's scan after a restart against what was acknowledged. */
static void check_scan(struct fails *f, const struct scan *s0,
                       const struct committed *cm, int anomalies)
{
	int64_t sum = 0;
	unsigned locked = 0, missing = 0, first_missing = RS_NACC;
	for (unsigned i = 0; i < RS_NACC; i++) {
		if (s0->rc[i]) {
			locked++;
			continue;
		}
		sum += s0->bal[i];
		if (s0->ver[i] < cm->max[i]) {
			missing++;
			if (first_missing == RS_NACC)
				first_missing = i;
		}
	}
	if (anomalies)
		failed(f, "the pre-kill histories have %d anomalies",
		       anomalies);
	if (locked)
		failed(f,
		       "%u accounts unreadable (locked) after the "
		       "restart",
		       locked);
	if (missing)
		failed(f,
		       "%u accounts lack an acknowledged write (account "
		       "%u: version %" PRIu64 ", committed %" PRIu64 ")",
		       missing, first_missing,
		       first_missing < RS_NACC ? s0->ver[first_missing] : 0,
		       first_missing < RS_NACC ? cm->max[first_missing] : 0);
	if (!locked && sum != (int64_t)RS_NACC * INIT_BALANCE)
		failed(f, "total %" PRId64 ", expected %" PRId64, sum,
		       (int64_t)RS_NACC * INIT_BALANCE);
	if (s0->sum_rc || s0->sum != (int64_t)RS_NACC * INIT_BALANCE)
		failed(f, "read-only sum after the restart: %s, %" PRId64,
		       farm_strerror(s0->sum_rc), s0->sum);
	if (s0->transfer_rc)
		failed(f, "a transfer after the restart: %s",
		       farm_strerror(s0->transfer_rc));
}

static void print_stats(unsigned i, const struct farm_restart_stats *t)
{
	printf("restart: machine %u: %" PRIu64 " regions (%" PRIu64
	       " MiB) adopted in %.1f ms; %" PRIu64 " records of %" PRIu64
	       " transactions (%" PRIu64 " committed, %" PRIu64
	       " aborted), %" PRIu64 " images applied, %" PRIu64 " of %" PRIu64
	       " objects unlocked in %.1f ms; barrier %.1f "
	       "ms; %" PRIu64 " previous member(s) given up\n",
	       i, t->regions, t->bytes >> 20, t->adopt_ns / 1e6, t->records,
	       t->txns, t->committed, t->aborted, t->images, t->unlocked,
	       t->objects, t->replay_ns / 1e6, t->barrier_ns / 1e6, t->lost);
}

#ifdef FARM_HAVE_ZK
#include <pthread.h>
#include <time.h>
#ifndef THREADED
#define THREADED /* the synchronous API of zookeeper_mt */
#endif
#include <zookeeper/zookeeper.h>

struct zk_up {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool up;
};

static void zk_watch_connected(zhandle_t *zh, int type, int state,
                               const char *path, void *ctx)
{
	(void)zh, (void)path;
	struct zk_up *u = ctx;
	if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
		pthread_mutex_lock(&u->lock);
		u->up = true;
		pthread_cond_signal(&u->cond);
		pthread_mutex_unlock(&u->lock);
	}
}

/* Delete every znode under @path but @keep (and @path itself, unless it
 * is @root): the number deleted, or -1. */
static int zk_prune(zhandle_t *zh, const char *path, const char *keep,
                    const char *root)
{
	if (!strcmp(path, keep))
		return 0;
	struct String_vector ch = {0};
	int n = 0;
	if (zoo_get_children(zh, path, 0, &ch) != ZOK)
		return -1;
	for (int i = 0; i < ch.count && n >= 0; i++) {
		char sub[512];
		snprintf(sub, sizeof(sub), "%s/%s", path, ch.data[i]);
		int k = zk_prune(zh, sub, keep, root);
		n = k < 0 ? -1 : n + k;
	}
	deallocate_String_vector(&ch);
	if (n >= 0 && strcmp(path, root)) {
		int zrc = zoo_delete(zh, path, -1);
		n = zrc == ZOK || zrc == ZNONODE ? n + 1 : -1;
	}
	return n;
}

/* The restart needs no ZooKeeper state beyond what the
 * configuration znode holds. With every machine dead, delete every znode
 * of the cluster's root but its configuration znode (registrations of the
 * dead sessions, the members' parent, the marks): the restart must do with
 * that. The number deleted, or -1. */
static int zk_keep_only_config(void)
{
	struct zk_up u = {.lock = PTHREAD_MUTEX_INITIALIZER,
	                  .cond = PTHREAD_COND_INITIALIZER};
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	zhandle_t *zh = zookeeper_init(zk_connect, zk_watch_connected, 10000,
	                               NULL, &u, 0);
	if (!zh)
		return -1;
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	pthread_mutex_lock(&u.lock);
	while (!u.up && pthread_cond_timedwait(&u.cond, &u.lock, &dl) == 0)
		;
	bool up = u.up;
	pthread_mutex_unlock(&u.lock);
	char keep[160];
	snprintf(keep, sizeof(keep), "%s/config", zk_root);
	int n = up ? zk_prune(zh, zk_root, keep, zk_root) : -1;
	struct Stat st;
	if (n >= 0 && zoo_exists(zh, keep, 0, &st) != ZOK)
		n = -1; /* the configuration itself must be there */
	zookeeper_close(zh);
	return n;
}
#else
static int zk_keep_only_config(void)
{
	return -1;
}
#endif

static void verdict(const char *opt, const char *off, const struct fails *f);

/* @len bytes from machine @i into @buf by @dl; false when it went away
 * or said nothing by then. */
static bool slow_read(unsigned i, void *buf, size_t len, uint64_t dl)
{
	char *p = buf;
	while (len) {
		uint64_t now = np_now_ns();
		if (now >= dl)
			return false;
		struct pollfd pf = {.fd = cl.from[i], .events = POLLIN};
		int r = poll(&pf, 1, (int)((dl - now) / 1000000ull) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		ssize_t n = read(cl.from[i], p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* The slow case's first restart: every machine's 'R' and its scan into
 * @s, as np_expect would, except that a machine that does not restart
 * is a check failed in @f (false). */
static bool slow_reports(struct scan *s, struct fails *f)
{
	uint64_t dl = np_now_ns() + (RS_JOIN_MS + 90000ull) * 1000000ull;
	bool all = true;
	for (unsigned i = 0; i < NP_NM; i++) {
		char b[2] = {0};
		if (!slow_read(i, &b[0], 1, dl) || b[0] != 'R' ||
		    !slow_read(i, &b[1], 1, dl) || b[1] != 's' ||
		    !slow_read(i, &s[i], sizeof(s[i]), dl)) {
			failed(f,
			       "machine %u did not restart with its "
			       "restart slowed",
			       i);
			all = false;
		}
	}
	return all;
}

/* The slow case's checks on the first restart's reports @s: it ran at
 * normal priority and cost no lease. True when the case cannot be
 * judged here (skipped: no real-time priority to keep). */
static bool check_slow(struct fails *f, const struct scan *s)
{
	for (unsigned i = 0; i < NP_NM; i++) {
		printf("slow restart: machine %u at policy %d, %" PRIu64
		       " leases lapsed\n",
		       i, s[i].slow_policy, s[i].lapsed);
		if (broken_slow && s[i].slow_policy == SCHED_OTHER) {
			printf("skipped: no real-time priority here, nothing "
			       "for --broken-slow to keep\n");
			skip();
			return true;
		}
		if (s[i].slow_policy < 0)
			failed(f,
			       "machine %u: its restart never reached the "
			       "allocator's rebuild",
			       i);
		else if (s[i].slow_policy != SCHED_OTHER)
			failed(f,
			       "machine %u: its restart ran at policy %d, "
			       "not at normal priority",
			       i, s[i].slow_policy);
		if (s[i].lapsed)
			failed(f,
			       "machine %u: %" PRIu64 " lease(s) lapsed "
			       "while the restarts were slow",
			       i, s[i].lapsed);
	}
	return false;
}

/* Every machine's scan after it restarted and serves. */
static void bank_scans(struct scan *s)
{
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', RS_JOIN_MS + 30000);
	for (unsigned i = 0; i < NP_NM; i++) {
		np_expect(&cl, i, 's', 60000);
		np_recv(&cl, i, &s[i], sizeof(s[i]), 10000);
	}
}

/* Every machine stopped (after a clean shutdown with @clean), their exit
 * statuses or'ed. */
static int bank_stop(bool clean)
{
	for (unsigned i = 0; clean && i < NP_NM; i++)
		np_send(&cl, i, 'Z');
	for (unsigned i = 0; clean && i < NP_NM; i++)
		np_expect(&cl, i, 'z', 30000);
	for (unsigned i = 0; i < NP_NM; i++)
		np_send(&cl, i, 'Q');
	int sts[NP_NM], st = 0;
	np_finish(&cl, sts);
	for (unsigned i = 0; i < NP_NM; i++)
		st |= sts[i];
	return st;
}

/* After the clean shutdown and restart (@s2): everything the first
 * restart (@s) saw, and its own transfer (account 0 and the last one
 * moved on). */
static void bank_check_clean(const struct scan *s, const struct scan *s2,
                             struct fails *f)
{
	unsigned older = 0;
	int64_t sum2 = 0;
	for (unsigned i = 0; i < RS_NACC; i++) {
		if (s2[0].rc[i] || s2[0].ver[i] < s[0].ver[i])
			older++;
		sum2 += s2[0].bal[i];
	}
	for (unsigned i = 0; i < NP_NM; i++)
		if (!s2[i].st.restarted)
			failed(f,
			       "machine %u did not restart after the clean "
			       "shutdown",
			       i);
	printf("clean shutdown, restart: %" PRIu64 " records decided, "
	       "%" PRIu64 " locks cleared on machine 0; total %" PRId64 "\n",
	       s2[0].st.records, s2[0].st.unlocked, sum2);
	if (older || sum2 != (int64_t)RS_NACC * INIT_BALANCE ||
	    s2[0].transfer_rc || s2[0].ver[0] <= s[0].ver[0])
		failed(f,
		       "after the clean shutdown: %u accounts older or "
		       "unreadable, total %" PRId64 ", transfer %s, account 0 "
		       "at version %" PRIu64 " (was %" PRIu64 ")",
		       older, sum2, farm_strerror(s2[0].transfer_rc),
		       s2[0].ver[0], s[0].ver[0]);
}

/* --slow: a restart that fails is a check failed, not the case's end:
 * --broken-slow's machines lose their leases. The first restart is the
 * case (the clean one after it is test_bank's own). */
static void bank_slow(struct scan *s, const struct committed *cm, int anomalies)
{
	struct fails fs = {0};
	if (slow_reports(s, &fs) && !check_slow(&fs, s))
		check_scan(&fs, &s[0], cm, anomalies);
	np_cleanup(&cl);
	verdict(broken_slow ? "--broken-slow" : NULL,
	        "the restart ran at real-time priority", &fs);
}

static void test_bank(void **state)
{
	(void)state;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/restart-%d",
	         (int)getpid());
	struct committed cm = {0};
	farm_fatptr acc[RS_NACC];
	int anomalies;
	uint64_t cut = 0;
	uint64_t t_kill = bank_then_kill(&cm, acc, &anomalies, &cut, false);
	int pruned = zk_keep_only_config();
	printf("restart: ZooKeeper: %d znodes of %s deleted, only its "
	       "configuration znode kept\n",
	       pruned, zk_root);
	assert_true(pruned >= 0);

	np_spawn(&cl, check_machine, NULL); /* again, same dirs */
	struct scan s[NP_NM];
	if (slow) {
		bank_slow(s, &cm, anomalies);
		return;
	}
	bank_scans(s);
	uint64_t t_up = np_now_ns();
	/* Then a clean shutdown of every machine, and a restart from it. */
	int st = bank_stop(true);
	np_spawn(&cl, check_machine, NULL); /* again, same dirs */
	struct scan s2[NP_NM];
	bank_scans(s2);
	st |= bank_stop(false);

	struct fails f = {0};
	for (unsigned i = 0; i < NP_NM; i++) {
		print_stats(i, &s[i].st);
		if (!s[i].st.restarted)
			failed(&f,
			       "machine %u did not restart from its directory",
			       i);
	}
	printf("restart: kill to every machine serving %.0f ms (sessions "
	       "of %d ms; the dead incarnations' registrations deleted, not "
	       "waited out); %u transactions open at the kill\n",
	       (t_up - t_kill) / 1e6, RS_SESSION_MS, (unsigned)cut);
	if (st)
		failed(&f, "a machine exited with status %d", st);
	bank_check_clean(s, s2, &f);
	check_scan(&f, &s[0], &cm, anomalies);
	np_cleanup(&cl);
	if (broken && !f.n)
		fail_msg("--broken: the restart applied no record and every "
		         "check passed: the test cannot see a lost commit");
	if (broken)
		printf("--broken: %u check(s) failed, as they must:\n%s", f.n,
		       f.text);
	else
		verdict(NULL, NULL, &f);
}

/* A case's end: with a fix switched off (@opt, its option; NULL: none)
 * some check must have failed (@off says what was off), else none may. */
static void verdict(const char *opt, const char *off, const struct fails *f)
{
	if (!opt) {
		if (f->n)
			fail_msg("%u check(s) failed:\n%s", f->n, f->text);
		return;
	}
	if (!f->n)
		fail_msg("%s: %s and nothing noticed", opt, off);
	printf("%s: %u check(s) failed, as they must:\n%s", opt, f->n, f->text);
}

/* ---- the damaged directory (one machine, static membership) -------------- */

static char dd_root[160];
#define DD_KEY "restart-key"
#define DD_VAL "kept across the restart"

/* dd_config as a machine of another cluster (a ZooKeeper root; the
 * directories here are of a static cluster). */
static bool dd_other_cluster;

static void dd_config(const char *dir, uint32_t id, struct farm_config *cfg)
{
	farm_config_defaults(cfg);
	if (dd_other_cluster) { /* refused before any connection */
		snprintf(cfg->zk, sizeof(cfg->zk), "127.0.0.1:9");
		snprintf(cfg->zk_root, sizeof(cfg->zk_root), "/libfarm/other");
	}
	cfg->has_machine_id = true;
	cfg->machine_id = id;
	cfg->region_size = 16u << 20;
	cfg->replicas = 1;
	snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s", dir);
	snprintf(cfg->fabric, sizeof(cfg->fabric), "shm");
}

/* Machine 0 of @dir started alone with a KV store and loop 0. */
static void dd_start(const char *dir, farm_node **n, farm_kv **kv,
                     farm_loop **loop)
{
	struct farm_config cfg;
	dd_config(dir, 0, &cfg);
	assert_int_equal(farm_node_open(&cfg, n), 0);
	assert_int_equal(farm_kv_create(*n, NULL, 1024, kv), 0);
	farm_node_set_app_loops(*n, true);
	assert_int_equal(farm_node_start(*n, 10000), 0);
	assert_int_equal(farm_node_loop_open(*n, 0, loop), 0);
	assert_int_equal(farm_node_wait_members(*n, 1, 10000), 0);
}

/* Write @value into a new object of machine 0 at @dir; shut down. */
static void dd_make(const char *dir, farm_gaddr *out, uint64_t value)
{
	farm_node *n;
	farm_kv *kv;
	farm_loop *loop;
	dd_start(dir, &n, &kv, &loop);
	farm_tx *tx;
	assert_int_equal(farm_tx_begin(farm_node_txm(n), loop, &tx), 0);
	void *d;
	farm_fatptr p;
	assert_int_equal(farm_tx_alloc_sync(tx, 64, FARM_GADDR_NULL, &p, &d),
	                 0);
	memcpy(d, &value, 8);
	assert_int_equal(farm_tx_commit_sync(tx), 0);
	farm_tx_free(tx);
	*out = p.addr;
	/* A key in the KV store: its shard list is kept for the restart. */
	assert_int_equal(farm_kv_attach(kv, loop), 0);
	assert_int_equal(farm_kv_join_sync(kv, loop, 1, 10000), 0);
	assert_int_equal(farm_kv_put_sync(kv, loop, DD_KEY, sizeof(DD_KEY),
	                                  DD_VAL, sizeof(DD_VAL)),
	                 0);
	farm_kv_detach(kv, loop);
	farm_kv_destroy(kv);
	farm_node_loop_close(n, loop);
	farm_node_shutdown(n);
}

/* A directory's files: names, sizes, content checksums. */
struct snap {
	unsigned n;
	char name[32][80];
	uint64_t size[32], sum[32];
};

static void snap_take(const char *dir, struct snap *s)
{
	memset(s, 0, sizeof(*s));
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && s->n < 32) {
			char p[600];
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			size_t len;
			uint8_t *b = np_read_file(p, &len);
			uint64_t h = 0xcbf29ce484222325ull;
			for (size_t i = 0; b && i < len; i++)
				h = (h ^ b[i]) * 0x100000001b3ull;
			free(b);
			snprintf(s->name[s->n], sizeof(s->name[0]), "%.79s",
			         e->d_name);
			s->size[s->n] = len;
			s->sum[s->n++] = h;
		}
	closedir(d);
}

static bool snap_same(const struct snap *a, const struct snap *b)
{
	if (a->n != b->n)
		return false;
	for (unsigned i = 0; i < a->n; i++) {
		bool found = false;
		for (unsigned j = 0; j < b->n && !found; j++)
			found = !strcmp(a->name[i], b->name[j]) &&
			        a->size[i] == b->size[j] &&
			        a->sum[i] == b->sum[j];
		if (!found)
			return false;
	}
	return true;
}

static void copy_dir(const char *from, const char *to)
{
	char cmd[1400];
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", from, to);
	assert_int_equal(system(cmd), 0);
}

/* The first file of @dir whose name ends with @suffix and starts "mem-". */
static bool find_file(const char *dir, const char *suffix, bool log, char *out,
                      size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;
	while (d && !found && (e = readdir(d))) {
		size_t l = strlen(e->d_name), sl = strlen(suffix);
		if (strncmp(e->d_name, "mem-", 4) || l < sl ||
		    strcmp(e->d_name + l - sl, suffix))
			continue;
		char p[600];
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		uint64_t w = 0;
		FILE *f = fopen(p, "rb");
		if (f) {
			if (fread(&w, 8, 1, f) != 1)
				w = 0;
			fclose(f);
		}
		/* The log starts "FARMTXL1"; a primary region "FARMAPC1". */
		bool is_log = w == 0x314c58544d524146ull;
		bool is_reg = w == 0x314350414d524146ull;
		if ((log && is_log) || (!log && is_reg)) {
			snprintf(out, len, "%s", p);
			found = true;
		}
	}
	if (d)
		closedir(d);
	return found;
}

/* Start machine @id on @dir: farm_restart_open's verdict (and text), then
 * farm_node_open's; the directory must be unchanged by both. */
static int dd_try(const char *dir, uint32_t id, char *err, size_t len)
{
	struct snap before, after;
	snap_take(dir, &before);
	struct farm_config cfg;
	dd_config(dir, id, &cfg);
	struct farm_restart *rs = NULL;
	int rc = farm_restart_open(&cfg, &rs, err, len);
	if (!rc) { /* accepted: the start would go on; undo the set-aside */
		farm_restart_close(rs);
		return 0;
	}
	farm_node *n = NULL;
	int nrc = farm_node_open(&cfg, &n);
	if (!nrc)
		farm_node_close(n);
	snap_take(dir, &after);
	if (!snap_same(&before, &after))
		fail_msg("%s: the refused start changed the directory", dir);
	assert_int_equal(nrc, rc);
	return rc;
}

/* The first whole record of the log file @path (its trailer and checksum
 * sound): its offset in the file and its length; false with none. */
struct first_rec {
	bool found;
	struct farm_txlog_rec r;
};

static void first_rec_fn(void *ctx, const struct farm_txlog_rec *r)
{
	struct first_rec *f = ctx;
	if (!f->found && r->len >= 128) {
		f->found = true;
		f->r = *r;
	}
}

static bool log_first_record(const char *path, uint64_t *off, uint32_t *len)
{
	struct first_rec f = {0};
	struct farm_txlog_info in;
	if (farm_txlog_scan_file(path, first_rec_fn, &f, &in) <= 0 || !f.found)
		return false;
	/* The superblock, one 64-byte header per (coordinator, thread) log,
	 * page-aligned; then the rings (src/txn/txn_int.h). */
	uint64_t hdr_area = (64 + (uint64_t)in.M * in.T * 64 + 4095) & ~4095ull;
	*off = hdr_area + ((uint64_t)f.r.coord * in.T + f.r.thread) * in.R +
	       f.r.pos % in.R;
	*len = f.r.len;
	return true;
}

/* A copy of the good directory @good named @name, in @d. */
static void dd_copy(const char *good, const char *name, char *d, size_t len)
{
	snprintf(d, len, "%s/%s", dd_root, name);
	copy_dir(good, d);
}

/* Whether the refusal @rc, @err is @want and names both @a and @b. */
static bool dd_refused(int rc, const char *err, int want, const char *a,
                       const char *b)
{
	return rc == want && strstr(err, a) && strstr(err, b);
}

/* A region file's magic. */
static void dd_magic(const char *good, struct fails *fl)
{
	char d[200], f[700], err[768];
	dd_copy(good, "magic", d, sizeof(d));
	assert_true(find_file(d, ".region.old", false, f, sizeof(f)));
	FILE *w = fopen(f, "r+b");
	assert_non_null(w);
	assert_int_equal(fwrite("garbage!", 8, 1, w), 1);
	fclose(w);
	int rc = dd_try(d, 0, err, sizeof(err));
	printf("damaged region magic: %s\n", rc ? err : "accepted");
	if (!dd_refused(rc, err, FARM_ECORRUPT, strrchr(f, '/') + 1,
	                "offset 0"))
		failed(fl, "a region file with a bad magic: %s (%s)",
		       farm_strerror(rc), rc ? err : "accepted");
}

/* The manifest's trailer, torn. */
static void dd_torn(const char *good, struct fails *fl)
{
	char d[200], f[700], err[768];
	dd_copy(good, "torn", d, sizeof(d));
	snprintf(f, sizeof(f), "%s/%s", d, FARM_MANIFEST_FILE);
	struct stat st;
	assert_int_equal(stat(f, &st), 0);
	assert_int_equal(truncate(f, st.st_size - 10), 0);
	int rc = dd_try(d, 0, err, sizeof(err));
	printf("torn manifest: %s\n", rc ? err : "accepted");
	if (!dd_refused(rc, err, FARM_ECORRUPT, FARM_MANIFEST_FILE, "offset"))
		failed(fl, "a torn manifest: %s (%s)", farm_strerror(rc),
		       rc ? err : "accepted");
}

/* The manifest says another wire version wrote the directory (its sum
 * made good again): the data's layouts may differ from this build's. */
static void dd_wire(const char *good, struct fails *fl)
{
	char d[200], f[700], err[768];
	dd_copy(good, "wire", d, sizeof(d));
	snprintf(f, sizeof(f), "%s/%s", d, FARM_MANIFEST_FILE);
	struct stat st;
	assert_int_equal(stat(f, &st), 0);
	size_t n = (size_t)st.st_size;
	uint8_t *b = malloc(n);
	assert_non_null(b);
	int fd = open(f, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, b, n, 0), (ssize_t)n);
	struct man_hdr *h = (struct man_hdr *)(void *)b;
	h->wire = FARM_WIRE_VERSION + 1;
	struct man_tail t;
	memcpy(&t, b + n - sizeof(t), sizeof(t));
	t.sum = farm_rst_fnv1a(b, n - sizeof(t));
	memcpy(b + n - sizeof(t), &t, sizeof(t));
	assert_int_equal(pwrite(fd, b, n, 0), (ssize_t)n);
	close(fd);
	free(b);
	int rc = dd_try(d, 0, err, sizeof(err));
	printf("another wire version's: %s\n", rc ? err : "accepted");
	if (!dd_refused(rc, err, -EPROTO, FARM_MANIFEST_FILE, "wire version"))
		failed(fl, "another wire version's directory: %s (%s)",
		       farm_strerror(rc), rc ? err : "accepted");
}

/* The log's size. */
static void dd_logsize(const char *good, struct fails *fl)
{
	char d[200], f[700], err[768];
	dd_copy(good, "logsize", d, sizeof(d));
	assert_true(find_file(d, ".region.old", true, f, sizeof(f)));
	struct stat st;
	assert_int_equal(stat(f, &st), 0);
	assert_int_equal(truncate(f, st.st_size - 4096), 0);
	int rc = dd_try(d, 0, err, sizeof(err));
	printf("short log: %s\n", rc ? err : "accepted");
	const char *base = strrchr(f, '/') + 1;
	char logname[128];
	snprintf(logname, sizeof(logname), "%.*s", (int)(strlen(base) - 4),
	         base); /* without ".old" */
	if (!dd_refused(rc, err, FARM_ECORRUPT, logname, "size mismatch"))
		failed(fl, "a short log: %s (%s)", farm_strerror(rc),
		       rc ? err : "accepted");
}

/* Another machine's directory, and another cluster's. */
static void dd_foreign(const char *good, struct fails *fl)
{
	char d[200], err[768];
	dd_copy(good, "other", d, sizeof(d));
	int rc = dd_try(d, 1, err, sizeof(err));
	printf("another machine's: %s\n", rc ? err : "accepted");
	if (!dd_refused(rc, err, -EXDEV, "belongs to machine 0", ""))
		failed(fl, "another machine's directory: %s (%s)",
		       farm_strerror(rc), rc ? err : "accepted");
	dd_copy(good, "cluster", d, sizeof(d));
	dd_other_cluster = true;
	rc = dd_try(d, 0, err, sizeof(err));
	dd_other_cluster = false;
	printf("another cluster's: %s\n", rc ? err : "accepted");
	if (!dd_refused(rc, err, -EXDEV, "belongs to cluster", ""))
		failed(fl, "another cluster's directory: %s (%s)",
		       farm_strerror(rc), rc ? err : "accepted");
}

/* The KV store on the restarted machine finds its shard again (the list
 * was kept) and the key put before. */
static void dd_intact_kv(farm_kv *kv, farm_loop *loop, struct fails *fl)
{
	char val[64] = "";
	uint32_t vlen = 0;
	assert_int_equal(farm_kv_attach(kv, loop), 0);
	int rc = farm_kv_join_sync(kv, loop, 1, 10000);
	if (!rc)
		rc = farm_kv_get_sync(kv, loop, DD_KEY, sizeof(DD_KEY), val,
		                      sizeof(val), &vlen);
	printf("intact: the KV store's key: %s%s%s\n", farm_strerror(rc),
	       rc ? "" : ", ", rc ? "" : val);
	if (rc || vlen != sizeof(DD_VAL) || memcmp(val, DD_VAL, vlen))
		failed(fl, "the KV store after the restart: get %s, %u bytes",
		       farm_strerror(rc), vlen);
	farm_kv_detach(kv, loop);
}

/* The intact directory @good restarts with the object @obj and the KV
 * store's key. */
static void dd_intact(const char *good, farm_gaddr obj, struct fails *fl)
{
	farm_node *n;
	farm_kv *kv;
	farm_loop *loop;
	dd_start(good, &n, &kv, &loop);
	struct farm_restart_stats rst;
	farm_node_restart_stats(n, &rst);
	farm_tx *tx;
	assert_int_equal(farm_tx_begin(farm_node_txm(n), loop, &tx), 0);
	const void *v;
	int rc = farm_tx_read_sync(tx, obj, 64, &v);
	uint64_t got = 0;
	if (!rc)
		memcpy(&got, v, 8);
	farm_tx_free(tx);
	printf("intact: restarted %d, %" PRIu64 " regions, object %s: %#" PRIx64
	       "\n",
	       rst.restarted, rst.regions, farm_strerror(rc), got);
	if (!rst.restarted || rc || got != 0x5eed)
		failed(fl,
		       "the intact directory: restarted %d, read %s, value "
		       "%#" PRIx64,
		       rst.restarted, farm_strerror(rc), got);
	dd_intact_kv(kv, loop, fl);
	farm_kv_destroy(kv);
	farm_node_loop_close(n, loop);
	farm_node_close(n);
}

static void test_damaged(void **state)
{
	(void)state;
	tu_tmpdir(dd_root, sizeof(dd_root), "restart-dd");
	char good[200];
	snprintf(good, sizeof(good), "%s/good", dd_root);
	farm_gaddr obj;
	dd_make(good, &obj, 0x5eed);
	struct fails fl = {0};
	dd_magic(good, &fl);
	dd_torn(good, &fl);
	dd_wire(good, &fl);
	dd_logsize(good, &fl);
	dd_foreign(good, &fl);
	if (!broken_check)
		dd_intact(good, obj, &fl);
	tu_rmtree(dd_root);
	dd_root[0] = 0;
	if (broken_kv)
		verdict("--broken-kv",
		        "the KV store ignored its kept shard list", &fl);
	else
		verdict(broken_check ? "--broken-check" : NULL,
		        "the check was off", &fl);
}

/* ---- stale locks in array elements (one machine, static membership) ---- */

#define SL_N  8  /* elements: 512 bytes, one slab slot */
#define SL_ES 48 /* bytes each: one line */

/* The elements locked before the kill, and how. */
static const struct {
	unsigned elem;
	uint64_t bit;
} sl_lock[] = {{0, OBJ_LOCK_EXCL},
               {1, OBJ_LOCK_SHARED},
               {4, OBJ_LOCK_SHARED},
               {6, OBJ_LOCK_EXCL}};

struct sl_alloc {
	volatile int done;
	int status;
	farm_fatptr fp;
};

static void sl_alloc_cb(farm_tx *tx, void *ctx, int status, farm_fatptr p,
                        void *data)
{
	(void)tx;
	(void)data;
	struct sl_alloc *r = ctx;
	r->status = status;
	r->fp = p;
	r->done = 1;
}

/* The child: the array committed at @dir, its elements locked, its first
 * element's fat pointer written to @fd, then killed. An exit status: why
 * it got no further. */
static int sl_make(const char *dir, int fd)
{
	struct farm_config cfg;
	dd_config(dir, 0, &cfg);
	farm_node *n;
	farm_loop *loop;
	if (farm_node_open(&cfg, &n))
		return 2;
	farm_node_set_app_loops(n, true);
	if (farm_node_start(n, 10000) || farm_node_loop_open(n, 0, &loop) ||
	    farm_node_wait_members(n, 1, 10000))
		return 3;
	farm_tx *tx;
	struct sl_alloc r = {0};
	if (farm_tx_begin(farm_node_txm(n), loop, &tx) ||
	    farm_tx_alloc_array(tx, SL_ES, SL_N, FARM_GADDR_NULL, sl_alloc_cb,
	                        &r))
		return 4;
	static const volatile int never = 0;
	while (!r.done)
		(void)farm_loop_wait(loop, &never, 1000000ull);
	if (r.status || farm_tx_commit_sync(tx))
		return 5;
	farm_tx_free(tx);
	/* What a commit killed between its lock and its install leaves: a
	 * CAS of each header from its version, as the participant's LOCK
	 * and a single-machine commit take them. */
	for (unsigned k = 0; k < sizeof(sl_lock) / sizeof(sl_lock[0]); k++) {
		_Atomic uint64_t *h = farm_as_local_ptr(
		        farm_node_as(n),
		        r.fp.addr + sl_lock[k].elem * farm_array_stride(SL_ES),
		        64);
		uint64_t v = h ? atomic_load(h) : OBJ_LOCK_MASK;
		if ((v & OBJ_LOCK_MASK) ||
		    !atomic_compare_exchange_strong(h, &v, v | sl_lock[k].bit))
			return 6;
	}
	if (tu_send(fd, &r.fp, sizeof(r.fp)))
		return 7;
	kill(getpid(), SIGKILL);
	return 8;
}

/* After the restart at @dir: the elements of the array at @a still
 * locked, and a transaction writing every element (failures into @f). */
static void sl_check(const char *dir, farm_fatptr a, struct fails *f)
{
	struct farm_config cfg;
	dd_config(dir, 0, &cfg);
	farm_node *n;
	assert_int_equal(farm_node_open(&cfg, &n), 0);
	farm_node_set_app_loops(n, true);
	farm_loop *loop;
	assert_int_equal(farm_node_start(n, 10000), 0);
	assert_int_equal(farm_node_loop_open(n, 0, &loop), 0);
	assert_int_equal(farm_node_wait_members(n, 1, 10000), 0);
	struct farm_restart_stats rst;
	farm_node_restart_stats(n, &rst);
	uint64_t stride = farm_array_stride(SL_ES);
	char which[64] = "";
	unsigned locked = 0;
	for (unsigned i = 0; i < SL_N; i++) {
		_Atomic uint64_t *h = farm_as_local_ptr(
		        farm_node_as(n), a.addr + i * stride, 64);
		assert_non_null(h);
		if (atomic_load(h) & OBJ_LOCK_MASK)
			snprintf(which + strlen(which),
			         sizeof(which) - strlen(which), " %u", i);
		locked += (atomic_load(h) & OBJ_LOCK_MASK) != 0;
	}
	/* A stale lock refuses every writer (a shared one too: lock-free
	 * reads pass it). */
	farm_tx *tx;
	assert_int_equal(farm_tx_begin(farm_node_txm(n), loop, &tx), 0);
	int rc = 0;
	for (unsigned i = 0; i < SL_N && !rc; i++) {
		const void *v;
		void *w;
		rc = farm_tx_read_sync(tx, a.addr + i * stride, SL_ES, &v);
		if (!rc)
			rc = farm_tx_write(tx, a.addr + i * stride, &w);
		if (!rc)
			memset(w, (int)i + 1, SL_ES);
	}
	if (!rc)
		rc = farm_tx_commit_sync(tx);
	farm_tx_free(tx);
	printf("stale: restarted %d, %" PRIu64 " objects walked, %" PRIu64
	       " locks cleared; %u of %u elements locked after it%s%s; "
	       "writing every element: %s\n",
	       rst.restarted, rst.objects, rst.unlocked, locked, SL_N,
	       locked ? ":" : "", which, farm_strerror(rc));
	if (!rst.restarted)
		failed(f, "the machine did not restart from its directory");
	if (locked)
		failed(f,
		       "%u array elements still locked after the restart "
		       "(elements%s)",
		       locked, which);
	if (rc)
		failed(f, "a transaction writing every element: %s",
		       farm_strerror(rc));
	farm_node_loop_close(n, loop);
	farm_node_close(n);
}

static void test_stale(void **state)
{
	(void)state;
	tu_tmpdir(dd_root, sizeof(dd_root), "restart-sl");
	char dir[200];
	snprintf(dir, sizeof(dir), "%s/m0", dd_root);
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = tu_fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		_exit(sl_make(dir, fds[1]));
	}
	close(fds[1]);
	farm_fatptr a;
	int got = tu_recv(fds[0], &a, sizeof(a));
	close(fds[0]);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (got || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		fail_msg("the machine that locks the elements: exit %d, "
		         "signal %d",
		         WIFEXITED(st) ? WEXITSTATUS(st) : -1,
		         WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	struct fails fl = {0};
	sl_check(dir, a, &fl);
	tu_rmtree(dd_root);
	dd_root[0] = 0;
	verdict(broken_stale ? "--broken-stale" : NULL,
	        "the walk saw slots only", &fl);
}

/* ---- a machine lost at the restart (its directory damaged) ------------- */

/*
 * lost: the bank run and the kill of test_bank (machine 0 leaves machine
 * 1's accounts alone, so the commit caught on machine 1 is machine 2's;
 * after the catch, the others stop coordinating and machine 2 commits
 * one transfer between two of its own accounts and then coordinates
 * nothing, so that commit is proven only by its COMMIT-BACKUPs at both
 * surviving backups, each in another machine's log), then one byte of a
 * whole record in machine 2's log file is changed (its checksum no longer
 * matches) before every machine starts again. Machine 2 refuses its
 * directory (exit 4, nothing in it changed) and leaves a refusal notice
 * (machine 1 finds a stale one of its own, which it must delete, and
 * must not be given up for); the others give machine 2 up at once, as if
 * it had failed (long before
 * restart_wait_ms, RS_WAIT_MS, which the test checks), and restart
 * without it: the
 * configuration lists it lost, its regions' backups are promoted, and its
 * log is gone, so what it coordinated is decided from the others' logs.
 * Then every check of test_bank's first restart (no lock left, the total,
 * every acknowledged write, serializable histories, a new transfer), and
 * a fresh machine under id 2 is refused (-EEXIST: exit 6).
 * --broken-lost: the restart treats the lost machine's log as merely
 * absent (FARM_FP_RESTART_LOST_STRICT: its coordinator rings are not read
 * from the others' logs and its COMMIT-BACKUPs are still asked for), so
 * the caught commit, which machine 2 coordinated, is not installed.
 * --broken-notice: the refused machine leaves no notice
 * (FARM_FP_RESTART_NO_NOTICE): the others wait restart_wait_ms for it,
 * which the test must notice.
 * --broken-rings: each machine reads only the restarting members'
 * coordinator rings of the others' logs (FARM_FP_RESTART_VIEW_RINGS, the
 * bug this test was written for), so it sees machine 2's records in its
 * own log alone: machine 2's last commit, whose COMMIT-BACKUPs are at two
 * machines, is aborted everywhere and must be found missing.
 */
/* One byte of the body of the first record in machine @m's log, past its
 * header: the trailer still says the record landed whole, the checksum
 * says it changed since. */
static void lost_damage_log(unsigned m)
{
	char logf[600];
	assert_true(find_file(cl.dir[m], "", true, logf, sizeof(logf)));
	uint64_t roff = 0;
	uint32_t rlen = 0;
	assert_true(log_first_record(logf, &roff, &rlen));
	int fd = open(logf, O_RDWR);
	assert_true(fd >= 0);
	uint8_t byte;
	assert_int_equal(pread(fd, &byte, 1, (off_t)(roff + 64)), 1);
	byte ^= 0x10;
	assert_int_equal(pwrite(fd, &byte, 1, (off_t)(roff + 64)), 1);
	close(fd);
	printf("lost: machine %u's log %s: a byte of the %u-byte record at "
	       "offset %" PRIu64 " changed\n",
	       m, strrchr(logf, '/') + 1, rlen, roff);
}

/* Every region back to 3 replicas among the machines but @lost (data
 * recovery makes its regions' copies where a machine is left to take
 * them), polled for up to 60 s from @t_up. */
static bool lost_await_replicated(unsigned lost, uint64_t t_up, char *why,
                                  size_t wlen)
{
	bool full = false;
	unsigned nreg = 0;
	struct held_report *r[64] = {0};
	uint64_t in = ((1ull << NP_NM) - 1) & ~(1ull << lost);
	uint64_t dl = t_up + 60000000000ull;
	while (!full && np_now_ns() < dl) {
		for (unsigned i = 0; i < NP_NM; i++) {
			if (i == lost)
				continue;
			free(r[i]);
			r[i] = malloc(sizeof(*r[i]));
			assert_non_null(r[i]);
			np_send(&cl, i, 'g');
			np_expect(&cl, i, 'G', 30000);
			np_recv(&cl, i, r[i], sizeof(*r[i]), 1000);
		}
		full = rp_replicated(r, in, 3, 0, why, wlen, &nreg);
		if (!full) {
			struct timespec ts = {0, 20000000};
			nanosleep(&ts, NULL); /* between two polls */
		}
	}
	for (unsigned i = 0; i < NP_NM; i++)
		free(r[i]);
	printf("lost: %u regions; fully replicated: %s (%.0f ms after the "
	       "restart)%s%s\n",
	       nreg, full ? "yes" : "NO", (np_now_ns() - t_up) / 1e6,
	       full ? "" : ": ", why);
	return full;
}

/* Machine @lost started under its id again with an empty directory (the
 * damaged one set aside): its exit status. */
static int lost_fresh(unsigned lost)
{
	char aside[700];
	snprintf(aside, sizeof(aside), "%s.damaged", cl.dir[lost]);
	assert_int_equal(rename(cl.dir[lost], aside), 0);
	assert_int_equal(mkdir(cl.dir[lost], 0700), 0);
	close(cl.to[lost]);
	close(cl.from[lost]);
	np_spawn_one(&cl, lost, check_machine, NULL);
	int st = tu_reap(cl.pid[lost]);
	cl.pid[lost] = 0;
	close(cl.to[lost]);
	close(cl.from[lost]);
	cl.to[lost] = cl.from[lost] = -1;
	tu_rmtree(aside);
	return st;
}

/* The lost case's checks @f, and what its proofs require of them:
 * @waited, the others waited restart_wait_ms for the refused machine. */
static void lost_verdict(const struct fails *f, bool waited)
{
	const char *proof = broken_lost     ? "--broken-lost"
	                    : broken_rings  ? "--broken-rings"
	                    : broken_notice ? "--broken-notice"
	                                    : NULL;
	if (broken_lost && !f->n)
		fail_msg("--broken-lost: the lost machine's log was treated "
		         "as absent and every check passed");
	if (broken_rings && !f->n)
		fail_msg("--broken-rings: the lost coordinator's rings were "
		         "read from each machine's own log only and every "
		         "check passed");
	if (broken_notice && !waited)
		fail_msg("--broken-notice: no refusal notice was left and the "
		         "others did not wait restart_wait_ms for the refused "
		         "machine");
	if (proof)
		printf("%s: %u check(s) failed, as they must:\n%s", proof, f->n,
		       f->text);
	else if (f->n)
		fail_msg("%u check(s) failed:\n%s", f->n, f->text);
}

static void test_lost(void **state)
{
	(void)state;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/restart-lost-%d",
	         (int)getpid());
	struct committed cm = {0};
	farm_fatptr acc[RS_NACC];
	int anomalies;
	uint64_t cut = 0;
	uint64_t t_kill = bank_then_kill(&cm, acc, &anomalies, &cut, true);
	/* Machine 2: the coordinator of the commit caught on machine 1
	 * (acknowledged, not installed there). Its records are in the
	 * others' logs only; the restart must read its coordinator rings
	 * there to install it. */
	const unsigned lost = 2;
	lost_damage_log(lost);
	struct snap before, after;
	snap_take(cl.dir[lost], &before);
	/* A stale notice for machine 1, whose directory is sound (as an
	 * earlier attempt that refused it would have left): machine 1
	 * deletes it when its directory passes, and the others must not give
	 * machine 1 up for it. */
	int nrc =
	        farm_zk_note_refused(zk_connect, zk_root, 1,
	                             "test: a notice from an earlier attempt");
	printf("lost: a stale refusal notice for machine 1: %s\n",
	       farm_strerror(nrc));
	assert_int_equal(nrc, 0);

	uint64_t t_start = np_now_ns();
	np_spawn(&cl, check_machine, NULL); /* again, same dirs */
	struct scan s[NP_NM];
	int st_lost = tu_reap(cl.pid[lost]);
	cl.pid[lost] = 0;
	snap_take(cl.dir[lost], &after);
	for (unsigned i = 0; i < NP_NM; i++)
		if (i != lost)
			np_expect(&cl, i, 'R', RS_JOIN_MS + 30000);
	for (unsigned i = 0; i < NP_NM; i++)
		if (i != lost) {
			np_expect(&cl, i, 's', 60000);
			np_recv(&cl, i, &s[i], sizeof(s[i]), 10000);
		}
	uint64_t t_up = np_now_ns();
	char why[256] = "";
	bool full = NP_NM <= 3 ||
	            lost_await_replicated(lost, t_up, why, sizeof(why));
	int st_fresh = lost_fresh(lost);
	for (unsigned i = 0; i < NP_NM; i++)
		if (i != lost)
			np_send(&cl, i, 'Q');
	int sts[NP_NM], st = 0;
	np_finish(&cl, sts);
	for (unsigned i = 0; i < NP_NM; i++)
		if (i != lost)
			st |= sts[i];

	struct fails f = {0};
	printf("lost: machine %u refused its directory (exit %d; 4: "
	       "farm_node_open failed), its files %s\n",
	       lost, st_lost,
	       snap_same(&before, &after) ? "unchanged" : "CHANGED");
	if (st_lost != 4)
		failed(&f,
		       "machine %u on its damaged directory exited %d, "
		       "not 4 (refused)",
		       lost, st_lost);
	if (!snap_same(&before, &after))
		failed(&f, "the refused start changed machine %u's files",
		       lost);
	for (unsigned i = 0; i < NP_NM; i++) {
		if (i == lost)
			continue;
		print_stats(i, &s[i].st);
		if (!s[i].st.restarted || s[i].st.lost != 1)
			failed(&f,
			       "machine %u: restarted %d, %" PRIu64
			       " previous members given up (want 1)",
			       i, s[i].st.restarted, s[i].st.lost);
	}
	double up_ms = (t_up - t_start) / 1e6;
	printf("lost: kill to the others serving %.0f ms, start to serving "
	       "%.0f ms (restart_wait_ms %d); %u transactions open at the "
	       "kill; a fresh machine %u exited %d (6: not admitted)\n",
	       (t_up - t_kill) / 1e6, up_ms, RS_WAIT_MS, (unsigned)cut, lost,
	       st_fresh);
	bool waited = up_ms >= RS_WAIT_MS;
	if (waited)
		failed(&f,
		       "the others served %.0f ms after their start: they "
		       "waited restart_wait_ms (%d ms) for machine %u, not "
		       "for its refusal notice",
		       up_ms, RS_WAIT_MS, lost);
	if (!full)
		failed(&f, "not fully replicated within 60 s: %s", why);
	if (st_fresh != 6)
		failed(&f,
		       "a fresh machine under the lost id exited %d, not 6 "
		       "(refused)",
		       st_fresh);
	if (st)
		failed(&f, "a machine exited with status %d", st);
	check_scan(&f, &s[0], &cm, anomalies);
	np_cleanup(&cl);
	lost_verdict(&f, waited);
}

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	if (dd_root[0])
		tu_rmtree(dd_root);
	return 0;
}

/* The command line: a case run alone, or a switch that breaks the code
 * (its fault point, or -1 where the test itself breaks something). */
static bool only_damaged, only_lost, only_stale;

static const struct rs_opt {
	const char *name;
	bool *flag, *alone; /* @alone: the case it runs alone, or NULL */
	int fp;
	bool fault; /* needs a build with fault injection */
} rs_opts[] = {
        {"--broken", &broken, NULL, -1, true},
        {"--broken-lost", &broken_lost, NULL, FARM_FP_RESTART_LOST_STRICT,
         true},
        {"--broken-rings", &broken_rings, NULL, FARM_FP_RESTART_VIEW_RINGS,
         true},
        {"--broken-notice", &broken_notice, NULL, FARM_FP_RESTART_NO_NOTICE,
         true},
        {"--lost", &only_lost, NULL, -1, false},
        {"--broken-check", &broken_check, &only_damaged,
         FARM_FP_RESTART_NO_CHECK, true},
        {"--broken-kv", &broken_kv, &only_damaged, FARM_FP_KV_NO_KEPT, true},
        {"--damaged", &only_damaged, NULL, -1, false},
        {"--stale", &only_stale, NULL, -1, false},
        {"--broken-stale", &broken_stale, &only_stale, FARM_FP_ALLOC_WALK_SLOTS,
         true},
        {"--slow", &slow, NULL, -1, true},
        {"--broken-slow", &broken_slow, &slow, -1, true},
};
#define RS_NOPTS (sizeof(rs_opts) / sizeof(rs_opts[0]))

/* 0, or an exit status for main (usage, --help, a skip, a hook refused). */
static int rs_args(int argc, char **argv)
{
	bool fault = false;
	for (int i = 1; i < argc; i++) {
		unsigned k = 0;
		while (k < RS_NOPTS && strcmp(argv[i], rs_opts[k].name))
			k++;
		if (k == RS_NOPTS) {
			printf("usage: %s [--broken | --broken-lost | "
			       "--broken-rings | --broken-notice | "
			       "--broken-check | --broken-kv | --damaged | "
			       "--lost | --stale | --broken-stale | --slow | "
			       "--broken-slow]\n",
			       argv[0]);
			return strcmp(argv[i], "--help") ? 2 : 0;
		}
		*rs_opts[k].flag = true;
		if (rs_opts[k].alone)
			*rs_opts[k].alone = true;
		fault |= rs_opts[k].fault;
	}
	if (fault && !farm_fault_built()) {
		printf("skipped: built without fault injection\n");
		return FARM_TEST_SKIP;
	}
	for (unsigned k = 0; k < RS_NOPTS; k++)
		if (*rs_opts[k].flag && rs_opts[k].fp >= 0 &&
		    farm_fault_set((enum farm_fault_point)rs_opts[k].fp,
		                   tu_switch_on, NULL))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	int rc = rs_args(argc, argv);
	if (rc || (argc > 1 && !strcmp(argv[1], "--help")))
		return rc;
	const struct CMUnitTest stale[] = {
	        cmocka_unit_test_teardown(test_stale, teardown)};
	if (only_stale)
		return cmocka_run_group_tests_name("restart", stale, NULL,
		                                   NULL);
	const struct CMUnitTest damaged[] = {
	        cmocka_unit_test_teardown(test_damaged, teardown)};
	if (only_damaged)
		return cmocka_run_group_tests_name("restart", damaged, NULL,
		                                   NULL);
	const struct CMUnitTest bank[] = {
	        cmocka_unit_test_teardown(test_bank, teardown),
	        cmocka_unit_test_teardown(test_lost, teardown)};
	/* The bank case, or (a switch of the lost case, or --lost) the lost
	 * one; --broken and --slow are the bank case's. */
	bool lost = !broken && !slow &&
	            (broken_lost || broken_rings || broken_notice || only_lost);
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "restart", bank + lost, 1);
}
