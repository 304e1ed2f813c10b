/*
 * Membership through a real ZooKeeper (scripts/zk-local starts a private
 * server on a free loopback port): three machine processes join and agree
 * on one view; the configuration manager (lowest id) is killed with
 * SIGKILL and the survivors see a new view without it once its session
 * expires; the server is stopped (connection loss reported, no hang) and
 * restarted on the same data, and the survivors reconnect to a
 * configuration that was not lost (same or newer config id). Then a
 * formed cluster keeps out a machine whose session expired, a dead
 * incarnation's registration is reclaimed, a graceful leave's request
 * (R/leave) lists its machine leaving (test_zk_leave), and a machine of
 * another wire version is not admitted (test_zk_wire) and one that finds
 * the manager of another fails at once (test_zk_wire_join).
 *
 * Exits 77 (skip) when libfarm lacks the ZooKeeper client or java/the
 * ZooKeeper jars are missing. Parent and children talk over pipes; every
 * wait is a condition wait in the child bounded by a timeout, or a poll on
 * a pipe with a deadline.
 *
 * --broken: every machine with a lower id registered builds the next
 * configuration (FARM_FP_ZK_ALL_MANAGE, the rule before), so the third
 * machine reads every registration at a suspicion; the cluster test must
 * see those reads (and runs alone). --broken-wait and --broken-early run
 * the reuse test alone: a new holder of a reused id waits out the removed
 * incarnation's session (FARM_FP_ZK_DISPLACE_WAIT: its join must be found
 * slow), or replaces any other session's registration of its id
 * (FARM_FP_ZK_DISPLACE_EARLY: a paused member that was never removed must
 * be found displaced). --broken-wire runs the wire test alone, the
 * manager admitting any wire version (FARM_FP_ZK_ANY_WIRE): the other
 * build's machine must be found admitted.
 */
#include "testutil.h"

#include <inttypes.h>
#include <poll.h>

#include "brokenarg.h"
#include "coord/membership.h"
#include "util/wire.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define NM         3
#define SESSION_MS 1000
#define WAIT_MS    15000 /* bound on any one wait in a child */
#define REPLY_MS   20000 /* bound on waiting for a child's reply */

static char zk_dir[256];
static char zk_connect[64];
static char zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool broken; /* --broken: FARM_FP_ZK_ALL_MANAGE */
/* --broken-wait, --broken-early: FARM_FP_ZK_DISPLACE_WAIT, _EARLY */
static bool broken_wait, broken_early;
/* --broken-wire: FARM_FP_ZK_ANY_WIRE */
static bool broken_wire;

/* ---- parent <-> child protocol ---------------------------------------- */

struct cmd {
	char op;            /* 'W' wait, 'S' suspect then wait, 'R' re-join
	                       (close, open: a new incarnation), 'Q' quit */
	uint32_t suspect;   /* S: the machine to suspect */
	unsigned n;         /* W: exactly n members, self among them */
	uint64_t min_id;    /* W: config id >= this */
	uint32_t absent;    /* W: this id not in the view (UINT32_MAX: none) */
	uint64_t min_syncs; /* W: syncs >= this */
	uint64_t min_rejoins; /* W: rejoins (new sessions) >= this */
	int wait_ms;          /* W: bound on the wait (0: WAIT_MS) */
	bool lost;       /* W: instead of the above: state is not CONNECTED */
	bool fast_ready; /* W: also membership status fast_ready */
	bool unreg;      /* W: instead: connected, not registered, min_syncs */
};

struct reply {
	int rc;
	uint64_t config_id;
	unsigned n;
	uint32_t ids[NM];
	struct farm_membership_status st;
	double ms;         /* how long the wait took */
	bool self_removed; /* the view lists this machine as removed */
	bool has_cm;
	uint32_t cm;
	uint64_t inc3; /* member 3's incarnation (UINT64_MAX: not a member) */
};

static bool pred(const struct farm_view *v,
                 const struct farm_membership_status *s, void *arg)
{
	const struct cmd *c = arg;
	if (c->lost)
		return s->state != FARM_MEMBERSHIP_CONNECTED;
	if (c->unreg)
		return s->state == FARM_MEMBERSHIP_CONNECTED &&
		       !s->registered && s->syncs >= c->min_syncs;
	return s->state == FARM_MEMBERSHIP_CONNECTED && s->registered &&
	       (v->n == c->n || c->n == 0) && v->config_id >= c->min_id &&
	       s->syncs >= c->min_syncs && s->rejoins >= c->min_rejoins &&
	       (!c->fast_ready || s->fast_ready) &&
	       !farm_view_find(v, c->absent);
}

/* The machines' expect_machines (0: the cluster is never formed). */
static unsigned child_expect;
/* The next machines spawned: reuse_ids, started with empty memory, their
 * session and connect bounds (0: SESSION_MS, 10 s), an endpoint suffix
 * (a replacement's address differs from its id's old holder's). */
static bool child_reuse, child_fresh;
static unsigned child_session_ms, child_connect_ms;
static const char *child_tag = "";

static int child_main(uint32_t id, int in, int out)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "/dev/shm/test-zk-m%u%s", id, child_tag);
	struct farm_membership_attr a = {
	        .self_id = id,
	        .endpoint = ep,
	        .zk = zk_connect,
	        .zk_root = zk_root,
	        .session_ms = child_session_ms ? child_session_ms : SESSION_MS,
	        .connect_ms = child_connect_ms ? child_connect_ms : 10000,
	        .expect = child_expect,
	        .fresh = child_fresh,
	        .reuse_ids = child_reuse};
	struct farm_membership *m = NULL;
	int rc = farm_membership_open(&a, &m);
	if (tu_send(out, &rc, sizeof(rc)) || rc)
		return 1;
	struct farm_view *v = malloc(sizeof(*v));
	struct cmd c;
	while (v && tu_recv(in, &c, sizeof(c)) == 0 && c.op != 'Q') {
		struct reply r = {0};
		uint64_t t0 = farm_now_ns();
		if (c.op == 'R') {
			farm_membership_close(m);
			m = NULL;
			r.rc = farm_membership_open(&a, &m);
			if (r.rc) {
				tu_send(out, &r, sizeof(r));
				break;
			}
		}
		if (c.op == 'S')
			r.rc = farm_membership_suspect(m, &c.suspect, 1);
		if (!r.rc)
			r.rc = farm_membership_wait(
			        m, pred, &c, c.wait_ms ? c.wait_ms : WAIT_MS,
			        v);
		r.ms = (double)(farm_now_ns() - t0) / 1e6;
		if (r.rc == -ETIMEDOUT)
			farm_membership_view(m, v);
		r.config_id = v->config_id;
		r.n = v->n;
		r.self_removed = farm_view_removed(v, id);
		r.has_cm = v->has_cm;
		r.cm = v->cm;
		for (unsigned i = 0; i < v->n && i < NM; i++)
			r.ids[i] = v->members[i].id;
		const struct farm_member *m3 = farm_view_find(v, 3);
		r.inc3 = m3 ? m3->incarnation : UINT64_MAX;
		farm_membership_status(m, &r.st);
		if (tu_send(out, &r, sizeof(r)))
			break;
	}
	free(v);
	farm_membership_close(m);
	return 0;
}

struct child {
	uint32_t id;
	pid_t pid;
	int to, from;
};

static struct child kids[NM];
static struct child repl = {.to = -1, .from = -1}; /* test_zk_reuse's */

static int spawn(struct child *k, uint32_t id)
{
	int down[2], up[2];
	if (pipe(down) || pipe(up))
		return -errno;
	pid_t pid = tu_fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(down[1]);
		close(up[0]);
		_exit(child_main(id, down[0], up[1]));
	}
	close(down[0]);
	close(up[1]);
	*k = (struct child){.id = id, .pid = pid, .to = down[1], .from = up[0]};
	return 0;
}

/* Read a whole value from a child within REPLY_MS. */
static int recv_bounded(int fd, void *buf, size_t len)
{
	char *p = buf;
	uint64_t dl = farm_now_ns() + (uint64_t)REPLY_MS * 1000000;
	while (len) {
		uint64_t now = farm_now_ns();
		if (now >= dl)
			return -ETIMEDOUT;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int n = poll(&pfd, 1, (int)((dl - now) / 1000000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			continue;
		ssize_t got = read(fd, p, len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -EPIPE;
		p += got;
		len -= (size_t)got;
	}
	return 0;
}

/* Machines 1..NM, each answering farm_membership_open's result (0). */
static void spawn_all(void)
{
	for (int i = 0; i < NM; i++)
		assert_int_equal(spawn(&kids[i], (uint32_t)i + 1), 0);
	for (int i = 0; i < NM; i++) {
		int rc = -1;
		assert_int_equal(recv_bounded(kids[i].from, &rc, sizeof(rc)),
		                 0);
		assert_int_equal(rc, 0);
	}
}

static void ask(struct child *k, const struct cmd *c)
{
	assert_int_equal(tu_send(k->to, c, sizeof(*c)), 0);
}

static void answer(struct child *k, struct reply *r)
{
	assert_int_equal(recv_bounded(k->from, r, sizeof(*r)), 0);
	if (r->rc)
		fprintf(stderr,
		        "machine %u: wait: %s (view %" PRIu64 ", %u members, "
		        "state %s)\n",
		        k->id, farm_strerror(r->rc), r->config_id, r->n,
		        farm_membership_state_name(r->st.state));
	assert_int_equal(r->rc, 0);
}

static void kill_child(struct child *k)
{
	if (k->pid > 0) {
		kill(k->pid, SIGKILL);
		tu_reap(k->pid);
		k->pid = 0;
	}
	if (k->to > 0)
		close(k->to);
	if (k->from > 0)
		close(k->from);
	k->to = k->from = -1;
}

static void kill_kids(void)
{
	kill_child(&repl);
	for (int i = 0; i < NM; i++)
		kill_child(&kids[i]);
}

/* Run zk-local; returns its exit status, the first stdout line in @line. */
static int zk_local(const char *verb, char *line, size_t len)
{
	return tu_zk_local(zk_script, verb, zk_dir, line, len);
}

static double since_ms(uint64_t t0)
{
	return (double)(farm_now_ns() - t0) / 1e6;
}

/* The manager's command that suspects machine 3, once the cluster is at
 * configuration @c1: the two others stay, 3 listed removed. */
static struct cmd suspect3(uint64_t c1)
{
	return (struct cmd){.op = 'S',
	                    .suspect = 3,
	                    .n = NM - 1,
	                    .min_id = c1 + 1,
	                    .absent = 3};
}

/* 1. Three machines join at once: one configuration, the same
 * everywhere, machine 1 its manager. Returns its id; machine 3's
 * registration reads so far in @reg3. */
static uint64_t zk_join(uint64_t t_all, uint64_t *reg3)
{
	spawn_all();
	struct cmd c = {.op = 'W', .n = NM, .absent = UINT32_MAX};
	struct reply r[NM];
	for (int i = 0; i < NM; i++)
		ask(&kids[i], &c);
	uint64_t cas = 0, writes = 0;
	for (int i = 0; i < NM; i++) {
		answer(&kids[i], &r[i]);
		assert_int_equal(r[i].n, NM);
		for (unsigned j = 0; j < NM; j++)
			assert_int_equal(r[i].ids[j], j + 1);
		cas += r[i].st.cas_conflicts;
		writes += r[i].st.config_writes;
	}
	/* One configuration, the same everywhere: the first view with three
	 * members is the last one while nobody leaves. */
	for (int i = 1; i < NM; i++)
		assert_int_equal(r[i].config_id, r[0].config_id);
	uint64_t c1 = r[0].config_id;
	*reg3 = r[2].st.reg_reads;
	printf("join: 3 machines see config %" PRIu64 " with 3 members after "
	       "%.0f ms (%" PRIu64 " configuration writes, %" PRIu64
	       " lost compare-and-sets)\n",
	       c1, since_ms(t_all), writes, cas);

	for (int i = 0; i < NM; i++) {
		assert_true(r[i].has_cm);
		assert_int_equal(r[i].cm, 1);
	}
	return c1;
}

/* The suspicion's answers @r (from configuration @c1, machine 3 having
 * read @reg3 registrations before, the CM having written @writes0
 * configurations): machine 3 left out and sees itself removed, written
 * by the CM alone with one fast write. */
static void check_suspicion(const struct reply r[NM], uint64_t c1,
                            uint64_t reg3, uint64_t writes0)
{
	for (int i = 0; i < NM; i++) {
		assert_int_equal(r[i].config_id, r[0].config_id);
		assert_int_equal(r[i].n, 2);
	}
	assert_true(r[2].self_removed);
	assert_false(r[0].self_removed);
	/* Only the manager and its successor read every registration at a
	 * configuration change: machine 3, with both live below it, read
	 * none for the suspicion's (by all, M reads at each of M machines). */
	if (broken) {
		if (r[2].st.reg_reads == reg3)
			fail_msg("--broken: machine 3 read no registration");
		printf("--broken: machine 3 read every registration %" PRIu64
		       " times more, as expected\n",
		       r[2].st.reg_reads - reg3);
	} else {
		assert_int_equal(r[2].st.reg_reads, reg3);
	}
	assert_true(r[1].st.reg_reads > 0);
	assert_true(r[0].st.suspects == 1);
	assert_int_equal(r[0].st.fast_writes, 1);
	assert_int_equal(r[0].st.config_writes, writes0 + 1);
	assert_int_equal(r[0].config_id, c1 + 1);
}

/*
 * 1b. Recovery suspects machine 3 (its lease lapsed): the CM leaves it
 * out at once, not after a session timeout, and lists its incarnation
 * as removed; machine 3 is still registered but sees itself removed.
 * Returns the suspicion's configuration.
 */
static uint64_t zk_suspect(uint64_t c1, uint64_t reg3)
{
	struct reply r[NM];
	/* Once the CM's last sync found nothing to write, its reads stay
	 * current until a watch fires: the suspicion's configuration is
	 * written from them, with the compare-and-set alone. */
	struct cmd c = {.op = 'W',
	                .n = NM,
	                .min_id = c1,
	                .absent = UINT32_MAX,
	                .fast_ready = true};
	ask(&kids[0], &c);
	answer(&kids[0], &r[0]);
	assert_int_equal(r[0].rc, 0);
	uint64_t writes0 = r[0].st.config_writes;
	assert_int_equal(r[0].st.fast_writes, 0);
	uint64_t t_sus = farm_now_ns();
	c = suspect3(c1);
	ask(&kids[0], &c);
	c.op = 'W';
	ask(&kids[1], &c);
	c = (struct cmd){.op = 'W', .n = 0, .min_id = c1 + 1, .absent = 3};
	ask(&kids[2], &c);
	for (int i = 0; i < NM; i++)
		answer(&kids[i], &r[i]);
	double sus_ms = since_ms(t_sus);
	check_suspicion(r, c1, reg3, writes0);
	uint64_t cs = r[0].config_id;
	/* The full sync its own write's watch brings finds the same
	 * configuration: nothing written again (what the fast write built
	 * is what the full read would have). */
	c = (struct cmd){.op = 'W',
	                 .n = NM - 1,
	                 .min_id = cs,
	                 .absent = 3,
	                 .min_syncs = r[0].st.syncs + 1,
	                 .fast_ready = true};
	ask(&kids[0], &c);
	answer(&kids[0], &r[0]);
	assert_int_equal(r[0].rc, 0);
	assert_int_equal(r[0].config_id, cs);
	assert_int_equal(r[0].st.config_writes, writes0 + 1);
	printf("suspect: written from the CM's last read (one round trip: "
	       "%.2f ms from the sync's start to the compare-and-set's "
	       "return), and not again by the full sync after it\n",
	       (double)(r[0].st.t_write_ns - r[0].st.t_write_begin_ns) / 1e6);
	printf("suspect: config %" PRIu64 " without machine 3 seen by all "
	       "%.1f ms after the CM was told (machine 3 still registered, "
	       "sees itself removed)\n",
	       cs, sus_ms);
	assert_true(sus_ms < 10000);
	return cs;
}

/* 1c. Machine 3 comes back as a new incarnation after configuration
 * @cs; returns the configuration it is back in. */
static uint64_t zk_rejoin(uint64_t cs)
{
	struct reply r[NM];
	struct cmd c = {
	        .op = 'R', .n = NM, .min_id = cs + 1, .absent = UINT32_MAX};
	ask(&kids[2], &c);
	c.op = 'W';
	for (int i = 0; i < 2; i++)
		ask(&kids[i], &c);
	for (int i = 0; i < NM; i++) {
		answer(&kids[i], &r[i]);
		assert_int_equal(r[i].n, NM);
		assert_false(r[i].self_removed);
	}
	uint64_t c1 = r[0].config_id;
	printf("rejoin: machine 3 back as a new incarnation in config "
	       "%" PRIu64 "\n",
	       c1);
	return c1;
}

/* 2. Kill the configuration manager (machine 1, the lowest id), in
 * configuration @c1; returns the survivors' configuration. */
static uint64_t zk_kill_cm(uint64_t c1)
{
	struct reply r[NM];
	uint64_t t_kill = farm_now_ns();
	assert_int_equal(kill(kids[0].pid, SIGKILL), 0);
	assert_int_equal(tu_reap(kids[0].pid), 128 + SIGKILL);
	kids[0].pid = 0;
	struct cmd c = {.op = 'W', .n = NM - 1, .min_id = c1 + 1, .absent = 1};
	for (int i = 1; i < NM; i++)
		ask(&kids[i], &c);
	for (int i = 1; i < NM; i++) {
		answer(&kids[i], &r[i]);
		assert_int_equal(r[i].n, 2);
		assert_true(r[i].config_id > c1);
	}
	double dep_ms = since_ms(t_kill);
	assert_int_equal(r[1].config_id, r[2].config_id);
	uint64_t c2 = r[1].config_id;
	printf("departure: survivors see config %" PRIu64 " without machine 1 "
	       "%.0f ms after kill -9 (session timeout %d ms)\n",
	       c2, dep_ms, SESSION_MS);
	assert_true(dep_ms < 10000);
	assert_true(r[1].st.config_writes > 0); /* machine 2 took over */
	return c2;
}

/*
 * 3. Session expiry: freeze machine 3 (SIGSTOP) until machine 2 sees it
 * leave (after configuration @c2), then let it run: it learns that its
 * session expired and re-joins with a new one, which makes a new
 * configuration (returned).
 */
static uint64_t zk_expiry(uint64_t c2)
{
	struct reply r[NM];
	uint64_t t_stop3 = farm_now_ns();
	assert_int_equal(kill(kids[2].pid, SIGSTOP), 0);
	struct cmd c = {.op = 'W', .n = 1, .min_id = c2 + 1, .absent = 3};
	ask(&kids[1], &c);
	answer(&kids[1], &r[1]);
	uint64_t c3 = r[1].config_id;
	double gone_ms = since_ms(t_stop3);
	uint64_t t_cont = farm_now_ns();
	assert_int_equal(kill(kids[2].pid, SIGCONT), 0);
	c = (struct cmd){.op = 'W', .n = 2, .min_id = c3 + 1, .absent = 1};
	for (int i = 1; i < NM; i++)
		ask(&kids[i], &c);
	for (int i = 1; i < NM; i++)
		answer(&kids[i], &r[i]);
	assert_int_equal(r[1].config_id, r[2].config_id);
	assert_true(r[2].st.expired >= 1);
	assert_true(r[2].st.rejoins >= 1);
	assert_int_equal(r[1].st.expired, 0);
	printf("expiry: machine 3 frozen, seen gone after %.0f ms (config "
	       "%" PRIu64
	       "); after SIGCONT it re-joined with a new session in %.0f ms "
	       "(config %" PRIu64 ")\n",
	       gone_ms, c3, since_ms(t_cont), r[2].config_id);
	return r[1].config_id;
}

/* 4. Stop the server: the loss is reported, nothing hangs. Each
 * survivor's sync count then in @syncs. */
static void zk_server_stop(uint64_t syncs[NM])
{
	struct reply r[NM];
	uint64_t t_stop = farm_now_ns();
	assert_int_equal(zk_local("stop", NULL, 0), 0);
	struct cmd c = {.op = 'W', .lost = true};
	for (int i = 1; i < NM; i++)
		ask(&kids[i], &c);
	for (int i = 1; i < NM; i++) {
		answer(&kids[i], &r[i]);
		assert_int_not_equal(r[i].st.state, FARM_MEMBERSHIP_CONNECTED);
		assert_true(r[i].st.conn_lost >= 1);
		syncs[i] = r[i].st.syncs;
	}
	printf("server stopped: loss reported by both survivors %.0f ms after "
	       "the stop began\n",
	       since_ms(t_stop));
}

/* 5. Restart it on the same data and port: the survivors reconnect to
 * configuration @c2 or newer. */
static void zk_server_restart(uint64_t c2, const uint64_t syncs[NM])
{
	struct reply r[NM];
	char line[128];
	uint64_t t_start = farm_now_ns();
	assert_int_equal(zk_local("start", line, sizeof(line)), 0);
	assert_string_equal(line, zk_connect);
	struct cmd c = {.op = 'W', .n = NM - 1, .min_id = c2, .absent = 1};
	for (int i = 1; i < NM; i++) {
		c.min_syncs = syncs[i] + 1;
		ask(&kids[i], &c);
	}
	uint64_t top = 0;
	for (int i = 1; i < NM; i++) {
		answer(&kids[i], &r[i]);
		assert_true(r[i].config_id >= c2);
		if (r[i].config_id > top)
			top = r[i].config_id;
	}
	/* Both settle on one configuration (newer if sessions expired). */
	c = (struct cmd){.op = 'W', .n = NM - 1, .min_id = top, .absent = 1};
	for (int i = 1; i < NM; i++)
		ask(&kids[i], &c);
	for (int i = 1; i < NM; i++) {
		answer(&kids[i], &r[i]);
		assert_int_equal(r[i].ids[0], 2);
		assert_int_equal(r[i].ids[1], 3);
	}
	printf("restart: survivors reconnected %.0f ms after the start began; "
	       "config %" PRIu64 " (was %" PRIu64
	       "); sessions expired: %" PRIu64 ", %" PRIu64
	       "; connection losses: %" PRIu64 ", %" PRIu64 "\n",
	       since_ms(t_start), r[1].config_id, c2, r[1].st.expired,
	       r[2].st.expired, r[1].st.conn_lost, r[2].st.conn_lost);
}

static void test_zk_cluster(void **state)
{
	(void)state;
	uint64_t t_all = farm_now_ns();
	for (int i = 0; i < NM; i++)
		kids[i].to = kids[i].from = -1;
	uint64_t reg3;
	uint64_t c1 = zk_join(t_all, &reg3);
	c1 = zk_rejoin(zk_suspect(c1, reg3));
	uint64_t c2 = zk_expiry(zk_kill_cm(c1));
	uint64_t syncs[NM];
	zk_server_stop(syncs);
	zk_server_restart(c2, syncs);

	/* 6. Leave cleanly. */
	struct cmd c = {.op = 'Q'};
	for (int i = 1; i < NM; i++) {
		ask(&kids[i], &c);
		assert_int_equal(tu_reap(kids[i].pid), 0);
		kids[i].pid = 0;
	}
	kill_kids();
	printf("total %.0f ms\n", since_ms(t_all));
}

static int teardown(void **state)
{
	(void)state;
	kill_kids();
	return 0;
}

/*
 * A formed cluster (expect_machines = NM): machine 3 frozen until its
 * session expires and the others leave it out (its id is then gone), then
 * let run. It registers again with a new session, marked stale, and the
 * manager must not take it back: its memory is from before (in a running
 * cluster its regions were recovered elsewhere). Unformed (test_zk_cluster,
 * step 3), the same machine is taken back.
 */
static void test_zk_formed(void **state)
{
	(void)state;
	child_expect = NM;
	char root[sizeof(zk_root)];
	snprintf(root, sizeof(root), "%s", zk_root);
	snprintf(zk_root, sizeof(zk_root), "%.80s-formed", root);
	for (int i = 0; i < NM; i++)
		kids[i].to = kids[i].from = -1;
	spawn_all();
	snprintf(zk_root, sizeof(zk_root), "%s", root);
	child_expect = 0;
	struct cmd c = {.op = 'W', .n = NM, .absent = UINT32_MAX};
	struct reply r[NM];
	for (int i = 0; i < NM; i++)
		ask(&kids[i], &c);
	for (int i = 0; i < NM; i++)
		answer(&kids[i], &r[i]);
	assert_int_equal(kill(kids[2].pid, SIGSTOP), 0);
	c = (struct cmd){.op = 'W', .n = NM - 1, .absent = 3};
	ask(&kids[0], &c);
	answer(&kids[0], &r[0]);
	uint64_t cfg = r[0].config_id;
	uint64_t t_cont = farm_now_ns();
	assert_int_equal(kill(kids[2].pid, SIGCONT), 0);
	/* Machine 3 learns its session expired and registers again. */
	c = (struct cmd){
	        .op = 'W', .n = 0, .min_rejoins = 1, .absent = UINT32_MAX};
	ask(&kids[2], &c);
	answer(&kids[2], &r[2]);
	double reg_ms = since_ms(t_cont);
	/* Registered again: taken back, the manager's view would have NM
	 * members within tens of ms (test_zk_cluster's re-join took 23 ms);
	 * kept out, it does not within 40 times that. */
	c = (struct cmd){.op = 'W', .n = NM, .wait_ms = 1000};
	ask(&kids[0], &c);
	assert_int_equal(recv_bounded(kids[0].from, &r[0], sizeof(r[0])), 0);
	printf("formed: machine 3 frozen past its session, left out in "
	       "config %" PRIu64 "; after SIGCONT it registered again (%" PRIu64
	       " new session) %.0f ms later; the manager's view 1 s after "
	       "that: config %" PRIu64 ", %u members (%s)\n",
	       cfg, r[2].st.rejoins, reg_ms, r[0].config_id, r[0].n,
	       farm_strerror(r[0].rc));
	assert_true(r[2].st.rejoins >= 1);
	assert_int_equal(r[0].rc, -ETIMEDOUT);
	assert_int_equal(r[0].n, NM - 1);
	kill_kids();
}

/* The replacement under id 3 (repl): spawned with empty memory and
 * reuse_ids, its session @session_ms and connect bound @connect_ms; its
 * farm_membership_open's result. */
static int spawn_repl(unsigned session_ms, unsigned connect_ms)
{
	child_session_ms = session_ms;
	child_connect_ms = connect_ms;
	child_tag = "-new";
	int rc = spawn(&repl, 3);
	child_tag = "";
	assert_int_equal(rc, 0);
	int orc = -1;
	assert_int_equal(recv_bounded(repl.from, &orc, sizeof(orc)), 0);
	return orc;
}

/* test_zk_reuse's end: the machines killed, the spawn settings and the
 * root (@root) as they were. */
static void reuse_end(const char *root)
{
	kill_kids();
	child_expect = 0;
	child_reuse = child_fresh = false;
	child_session_ms = child_connect_ms = 0;
	snprintf(zk_root, sizeof(zk_root), "%s", root);
}

/*
 * A reused id's new holder (reuse_ids, a formed cluster, 10 s sessions).
 * 1. Machine 3 paused (SIGSTOP), never suspected: a fresh machine under id
 *    3 must not displace its registration; its open ends -EADDRINUSE and
 *    the configuration stays as it was.
 * 2. Machine 3 paused again and suspected: the configuration removes its
 *    incarnation, whose registration lives on with its session (10 s).
 *    A fresh machine under id 3 replaces that registration at once
 *    (displaced 1) and is admitted as a new incarnation well within the
 *    session: measured from the removal's configuration to the first view
 *    naming the new holder.
 * 3. The old holder let run again (a zombie of the removed incarnation):
 *    it must not register again while the new holder lives, and nothing
 *    changes the configuration.
 */
static void test_zk_reuse(void **state)
{
	(void)state;
	const unsigned session = 10000;
	char root[sizeof(zk_root)];
	snprintf(root, sizeof(root), "%s", zk_root);
	snprintf(zk_root, sizeof(zk_root), "%.80s-reuse", root);
	child_expect = NM;
	child_reuse = child_fresh = true;
	child_session_ms = session;
	for (int i = 0; i < NM; i++)
		kids[i].to = kids[i].from = -1;
	spawn_all();
	struct cmd c = {.op = 'W', .n = NM, .absent = UINT32_MAX};
	struct reply r[NM], rr;
	for (int i = 0; i < NM; i++)
		ask(&kids[i], &c);
	for (int i = 0; i < NM; i++)
		answer(&kids[i], &r[i]);
	uint64_t c1 = r[0].config_id;
	assert_int_equal(r[0].inc3, 0);

	/* 1. Paused, not removed: never displaced. */
	assert_int_equal(kill(kids[2].pid, SIGSTOP), 0);
	uint64_t t0 = farm_now_ns();
	int orc = spawn_repl(1000, 1000);
	double held_ms = since_ms(t0);
	assert_int_equal(kill(kids[2].pid, SIGCONT), 0);
	c = (struct cmd){.op = 'W', .n = NM, .absent = UINT32_MAX};
	ask(&kids[0], &c);
	answer(&kids[0], &r[0]);
	printf("reuse: a fresh machine under id 3 while its member was paused "
	       "(not removed): open %s after %.0f ms; the manager's view: "
	       "config %" PRIu64 " (was %" PRIu64 "), member 3's incarnation "
	       "%" PRIu64 "\n",
	       farm_strerror(orc), held_ms, r[0].config_id, c1, r[0].inc3);
	if (broken_early) {
		if (orc == -EADDRINUSE && r[0].inc3 == 0)
			fail_msg("--broken-early: the paused member was not "
			         "displaced, and no check noticed");
		printf("--broken-early: the paused member's registration was "
		       "displaced; the check fails, as it must\n");
		reuse_end(root);
		return;
	}
	assert_int_equal(orc, -EADDRINUSE);
	assert_int_equal(r[0].config_id, c1);
	assert_int_equal(r[0].inc3, 0);
	tu_reap(repl.pid);
	repl.pid = 0;
	close(repl.to);
	close(repl.from);
	repl.to = repl.from = -1;

	/* 2. Paused and removed: its registration replaced at once. */
	c = (struct cmd){.op = 'W', .n = NM, .absent = UINT32_MAX};
	ask(&kids[2], &c);
	answer(&kids[2], &r[2]);
	uint64_t syncs3 = r[2].st.syncs; /* its last before the pause */
	assert_int_equal(kill(kids[2].pid, SIGSTOP), 0);
	c = suspect3(c1);
	ask(&kids[0], &c);
	answer(&kids[0], &r[0]);
	uint64_t t_removed = farm_now_ns();
	uint64_t c2 = r[0].config_id;
	orc = spawn_repl(session, 10000);
	assert_int_equal(orc, 0);
	c = (struct cmd){
	        .op = 'W', .n = NM, .min_id = c2 + 1, .absent = UINT32_MAX};
	ask(&repl, &c);
	answer(&repl, &rr);
	double join_ms = since_ms(t_removed);
	printf("reuse: machine 3 paused and removed in config %" PRIu64
	       "; a fresh machine under id 3 replaced its registration "
	       "(displaced %" PRIu64 ") and saw itself a member, incarnation "
	       "%" PRIu64 " in config %" PRIu64 ", %.0f ms after the removal "
	       "(session %u ms)\n",
	       c2, rr.st.displaced, rr.inc3, rr.config_id, join_ms, session);
	if (broken_wait) {
		if (join_ms < session / 2)
			fail_msg("--broken-wait: the join took %.0f ms, and no "
			         "check noticed",
			         join_ms);
		printf("--broken-wait: the new holder waited for the removed "
		       "incarnation's session; the check fails, as it must\n");
		reuse_end(root);
		return;
	}
	assert_true(join_ms < session / 2);
	assert_int_equal(rr.st.displaced, 1);
	assert_true(rr.inc3 > c2 && rr.inc3 != UINT64_MAX);

	/* 3. The removed incarnation runs again: once a sync of its own has
	 * found its registration gone (the one before the pause said it
	 * was registered), it stays unregistered. */
	assert_int_equal(kill(kids[2].pid, SIGCONT), 0);
	c = (struct cmd){.op = 'W', .unreg = true, .min_syncs = syncs3 + 1};
	ask(&kids[2], &c);
	answer(&kids[2], &r[2]);
	c = (struct cmd){
	        .op = 'W', .n = 0, .absent = UINT32_MAX, .wait_ms = 1000};
	ask(&kids[2], &c);
	assert_int_equal(recv_bounded(kids[2].from, &r[2], sizeof(r[2])), 0);
	c = (struct cmd){.op = 'W',
	                 .n = NM,
	                 .min_id = rr.config_id,
	                 .absent = UINT32_MAX};
	ask(&kids[0], &c);
	answer(&kids[0], &r[0]);
	printf("reuse: the old holder let run: %s registered (%s); the "
	       "manager's view: config %" PRIu64 ", member 3's incarnation "
	       "%" PRIu64 "\n",
	       r[2].st.registered ? "still" : "not", farm_strerror(r[2].rc),
	       r[0].config_id, r[0].inc3);
	assert_int_equal(r[2].rc, -ETIMEDOUT);
	assert_false(r[2].st.registered);
	assert_int_equal(r[0].config_id, rr.config_id);
	assert_int_equal(r[0].inc3, rr.inc3);
	reuse_end(root);
}

/* One registration of id 9 (@address, session @session_ms) in this
 * process; how farm_membership_open ended and the handle. */
static int reg9(const char *address, const char *endpoint, unsigned session_ms,
                unsigned connect_ms, struct farm_membership **m)
{
	struct farm_membership_attr a = {.self_id = 9,
	                                 .endpoint = endpoint,
	                                 .address = address,
	                                 .zk = zk_connect,
	                                 .zk_root = zk_root,
	                                 .session_ms = session_ms,
	                                 .connect_ms = connect_ms};
	*m = NULL;
	return farm_membership_open(&a, m);
}

/*
 * A dead incarnation's registration: machine 9 registers from a child
 * process with a 10 s session and is killed with SIGKILL (its ephemeral
 * znode outlives it). Another process under id 9 with another address
 * waits it out (-EADDRINUSE within connect + session time); one with the
 * same address (the data directory or port it now holds) deletes it at
 * once and joins (reclaimed 1), long before the session could expire.
 */
static void test_zk_reclaim(void **state)
{
	(void)state;
	char root[sizeof(zk_root)];
	snprintf(root, sizeof(root), "%s", zk_root);
	snprintf(zk_root, sizeof(zk_root), "%.80s-reclaim", root);
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = tu_fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		struct farm_membership *m;
		int rc = reg9("/dev/shm/m9", "/dev/shm/m9 msg=1", 10000, 10000,
		              &m);
		(void)tu_send(p[1], &rc, sizeof(rc));
		for (;;)
			pause();
	}
	close(p[1]);
	int rc = -1;
	assert_int_equal(tu_recv(p[0], &rc, sizeof(rc)), 0);
	close(p[0]);
	assert_int_equal(rc, 0);
	assert_int_equal(kill(pid, SIGKILL), 0);
	tu_reap(pid);
	uint64_t t0 = farm_now_ns();
	struct farm_membership *m;
	/* Another address: not ours to delete. */
	assert_int_equal(
	        reg9("/dev/shm/m9b", "/dev/shm/m9b msg=2", 1000, 500, &m),
	        -EADDRINUSE);
	/* The same address, which this process now holds. */
	assert_int_equal(
	        reg9("/dev/shm/m9", "/dev/shm/m9 msg=3", 1000, 5000, &m), 0);
	double ms = (farm_now_ns() - t0) / 1e6;
	struct farm_membership_status st;
	assert_int_equal(farm_membership_status(m, &st), 0);
	printf("reclaim: the killed incarnation's registration (10 s "
	       "session) replaced and id 9 registered %.0f ms after the kill; "
	       "reclaimed %" PRIu64 "\n",
	       ms, st.reclaimed);
	assert_int_equal(st.reclaimed, 1);
	assert_true(st.registered);
	farm_membership_close(m);
	snprintf(zk_root, sizeof(zk_root), "%s", root);
}

/* --broken-wait, --broken-early: that switch on, *@which true; 0, or an
 * exit status for main (no such argument: 2 after usage; no fault
 * injection: skip). 1: not one of them. */
static int reuse_broken_arg(int argc, char **argv)
{
	if (argc != 2)
		return 1;
	enum farm_fault_point fp;
	if (!strcmp(argv[1], "--broken-wait")) {
		fp = FARM_FP_ZK_DISPLACE_WAIT;
		broken_wait = true;
	} else if (!strcmp(argv[1], "--broken-early")) {
		fp = FARM_FP_ZK_DISPLACE_EARLY;
		broken_early = true;
	} else if (!strcmp(argv[1], "--broken-wire")) {
		fp = FARM_FP_ZK_ANY_WIRE;
		broken_wire = true;
	} else {
		return 1;
	}
	if (farm_fault_set(fp, tu_switch_on, NULL)) {
		printf("skipped: built without fault injection\n");
		return FARM_TEST_SKIP;
	}
	return 0;
}

/* One registration of @id in this process (a session of its own). */
static struct farm_membership *reg_in(uint32_t id, unsigned expect)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "/dev/shm/test-zk-leave-m%u", (unsigned)id);
	struct farm_membership_attr a = {.self_id = id,
	                                 .endpoint = ep,
	                                 .zk = zk_connect,
	                                 .zk_root = zk_root,
	                                 .session_ms = 4000,
	                                 .connect_ms = 10000,
	                                 .expect = expect};
	struct farm_membership *m = NULL;
	assert_int_equal(farm_membership_open(&a, &m), 0);
	return m;
}

/* The view lists exactly the leaving ids of @arg (a struct farm_view's
 * leaving list and member count; n 0: any). */
static bool leaving_is(const struct farm_view *v,
                       const struct farm_membership_status *s, void *arg)
{
	const struct farm_view *want = arg;
	(void)s;
	return (!want->n || v->n == want->n) && v->nleaving == want->nleaving &&
	       !memcmp(v->leaving, want->leaving,
	               want->nleaving * sizeof(want->leaving[0]));
}

/*
 * Graceful leave, the membership's part (src/recovery/README.md): 4
 * machines (one process, a session each) form; machine 4 asks to leave
 * naming an older configuration: ignored (its check was against other
 * members); naming the one in force: the next configuration lists it
 * leaving, and a second request changes nothing. Once it closes (the
 * departure), the configuration without it lists nobody leaving.
 */
static void test_zk_leave(void **state)
{
	(void)state;
	char root[sizeof(zk_root)];
	snprintf(root, sizeof(root), "%s", zk_root);
	snprintf(zk_root, sizeof(zk_root), "%.80s-leave", root);
	struct farm_membership *m[4];
	for (uint32_t i = 0; i < 4; i++)
		m[i] = reg_in(i + 1, 4);
	struct farm_view *v = calloc(2, sizeof(*v));
	assert_non_null(v);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(
		        farm_membership_wait_members(m[i], 4, WAIT_MS, &v[0]),
		        0);
	assert_int_equal(farm_view_may_leave(&v[0], 4, 3), 0);
	uint64_t cfg = v[0].config_id;
	assert_true(cfg > 1);
	/* An older configuration's request: nothing within 1 s. */
	assert_int_equal(farm_membership_leave(m[3], cfg - 1), 0);
	v[1] = (struct farm_view){.n = 4, .nleaving = 1, .leaving = {4}};
	assert_int_equal(
	        farm_membership_wait(m[0], leaving_is, &v[1], 1000, NULL),
	        -ETIMEDOUT);
	uint64_t t0 = farm_now_ns();
	assert_int_equal(farm_membership_leave(m[3], cfg), 0);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(farm_membership_wait(m[i], leaving_is, &v[1],
		                                      WAIT_MS, &v[0]),
		                 0);
	printf("leave: machine 4 listed leaving in configuration %" PRIu64
	       " (asked in %" PRIu64 ") %.0f ms after it asked\n",
	       v[0].config_id, cfg, since_ms(t0));
	assert_true(v[0].config_id > cfg);
	/* Asked again: leaving already, may leave (idempotent), and no new
	 * configuration comes of it. */
	uint64_t lcfg = v[0].config_id;
	assert_int_equal(farm_view_may_leave(&v[0], 4, 3), 0);
	/* Another would leave fewer than 3: refused before asking. */
	assert_int_equal(farm_view_may_leave(&v[0], 3, 3), -EBUSY);
	assert_int_equal(farm_membership_leave(m[3], lcfg), 0);
	assert_int_equal(farm_membership_wait_newer(m[0], lcfg, 1000, NULL),
	                 -ETIMEDOUT);
	/* It departs: nobody is leaving in the configuration without it. */
	farm_membership_close(m[3]);
	v[1] = (struct farm_view){.n = 3};
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(farm_membership_wait(m[i], leaving_is, &v[1],
		                                      WAIT_MS, &v[0]),
		                 0);
	assert_null(farm_view_find(&v[0], 4));
	for (unsigned i = 0; i < 3; i++)
		farm_membership_close(m[i]);
	free(v);
	snprintf(zk_root, sizeof(zk_root), "%s", root);
}

static bool has_member(const struct farm_view *v,
                       const struct farm_membership_status *s, void *arg)
{
	(void)s;
	return farm_view_find(v, *(const uint32_t *)arg) != NULL;
}

/*
 * A machine of another build: machine 9 registers with a card naming the
 * next wire version (FARM_FP_ZK_CARD_WIRE while it registers), then
 * machine 2 with this build's. The manager (machine 1) reads every
 * registration for the configuration that admits machine 2, 9's among
 * them (created first), and must leave 9 out of it. --broken-wire
 * (FARM_FP_ZK_ANY_WIRE: any version admitted) must find 9 in it.
 */
static void test_zk_wire(void **state)
{
	(void)state;
	char root[sizeof(zk_root)];
	snprintf(root, sizeof(root), "%s", zk_root);
	snprintf(zk_root, sizeof(zk_root), "%.80s-wire", root);
	struct farm_membership *m1 = reg_in(1, 0);
	assert_int_equal(farm_membership_wait_members(m1, 1, WAIT_MS, NULL), 0);
	int rc = farm_fault_set(FARM_FP_ZK_CARD_WIRE, tu_switch_on, NULL);
	if (rc == -ENOTSUP) {
		farm_membership_close(m1);
		snprintf(zk_root, sizeof(zk_root), "%s", root);
		skip();
	}
	struct farm_membership *m9 = reg_in(9, 0);
	(void)farm_fault_set(FARM_FP_ZK_CARD_WIRE, NULL, NULL);
	struct farm_membership *m2 = reg_in(2, 0);
	struct farm_view *v = malloc(sizeof(*v));
	assert_non_null(v);
	uint32_t two = 2;
	assert_int_equal(farm_membership_wait(m1, has_member, &two, WAIT_MS, v),
	                 0);
	printf("wire: configuration %" PRIu64 " admits machine 2 with %u "
	       "members; machine 9 (wire version %u) %s\n",
	       v->config_id, v->n, FARM_WIRE_VERSION + 1,
	       farm_view_find(v, 9) ? "admitted" : "left out");
	if (broken_wire) {
		if (!farm_view_find(v, 9))
			fail_msg("--broken-wire: machine 9 left out all the "
			         "same");
	} else {
		assert_null(farm_view_find(v, 9));
		assert_int_equal(v->n, 2);
	}
	free(v);
	farm_membership_close(m2);
	farm_membership_close(m9);
	farm_membership_close(m1);
	snprintf(zk_root, sizeof(zk_root), "%s", root);
}

/*
 * The other side: the manager (machine 1) registered with a card of the
 * next wire version (and admitting any: FARM_FP_ZK_ANY_WIRE), machine 2
 * of this build must fail its open with -EPROTO at once, not wait to be
 * admitted until its bound.
 */
static void test_zk_wire_join(void **state)
{
	(void)state;
	char root[sizeof(zk_root)];
	snprintf(root, sizeof(root), "%s", zk_root);
	snprintf(zk_root, sizeof(zk_root), "%.80s-wirejoin", root);
	if (farm_fault_set(FARM_FP_ZK_ANY_WIRE, tu_switch_on, NULL) == -ENOTSUP)
		skip();
	assert_int_equal(
	        farm_fault_set(FARM_FP_ZK_CARD_WIRE, tu_switch_on, NULL), 0);
	struct farm_membership *m1 = reg_in(1, 0);
	(void)farm_fault_set(FARM_FP_ZK_CARD_WIRE, NULL, NULL);
	assert_int_equal(farm_membership_wait_members(m1, 1, WAIT_MS, NULL), 0);
	char ep[64] = "/dev/shm/test-zk-wire-m2";
	struct farm_membership_attr a = {.self_id = 2,
	                                 .endpoint = ep,
	                                 .zk = zk_connect,
	                                 .zk_root = zk_root,
	                                 .session_ms = 4000,
	                                 .connect_ms = 10000};
	struct farm_membership *m2 = NULL;
	uint64_t t0 = farm_now_ns();
	int rc = farm_membership_open(&a, &m2);
	printf("wire: machine 2's open against a manager of wire version %u: "
	       "%s in %.0f ms\n",
	       FARM_WIRE_VERSION + 1, farm_strerror(rc), since_ms(t0));
	if (!rc)
		farm_membership_close(m2);
	(void)farm_fault_set(FARM_FP_ZK_ANY_WIRE, NULL, NULL);
	farm_membership_close(m1);
	snprintf(zk_root, sizeof(zk_root), "%s", root);
	assert_int_equal(rc, -EPROTO);
}

int main(int argc, char **argv)
{
	int bst = reuse_broken_arg(argc, argv);
	if (bst == 1)
		bst = tu_broken_arg(argc, argv, FARM_FP_ZK_ALL_MANAGE, &broken);
	if (bst)
		return bst;
#ifndef FARM_HAVE_ZK
	printf("skipped: libfarm built without the ZooKeeper client "
	       "(libzookeeper-mt-dev)\n");
	return FARM_TEST_SKIP;
#endif
	int st = tu_zk_start(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                     sizeof(zk_connect));
	if (st)
		return st;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-zk-%d",
	         (int)getpid());
	printf("ZooKeeper at %s, root %s\n", zk_connect, zk_root);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_zk_cluster, teardown),
	        cmocka_unit_test_teardown(test_zk_formed, teardown),
	        cmocka_unit_test_teardown(test_zk_reclaim, teardown),
	        cmocka_unit_test_teardown(test_zk_reuse, teardown),
	        cmocka_unit_test_teardown(test_zk_leave, teardown),
	        cmocka_unit_test_teardown(test_zk_wire, teardown),
	        cmocka_unit_test_teardown(test_zk_wire_join, teardown),
	};
	int rc;
	if (broken)
		rc = _cmocka_run_group_tests("zk", tests, 1, NULL, NULL);
	else if (broken_wait || broken_early)
		rc = _cmocka_run_group_tests("zk", &tests[3], 1, NULL, NULL);
	else if (broken_wire)
		rc = _cmocka_run_group_tests("zk", &tests[5], 1, NULL, NULL);
	else
		rc = cmocka_run_group_tests_name("zk", tests, NULL, NULL);
	kill_kids();
	tu_zk_stop(zk_script, zk_dir);
	return rc;
}
