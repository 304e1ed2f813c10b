/*
 * Membership through a real ZooKeeper (scripts/zk-local starts a private
 * server on a free loopback port): three machine processes join and agree
 * on one view; the configuration manager (lowest id) is killed with
 * SIGKILL and the survivors see a new view without it once its session
 * expires; the server is stopped (connection loss reported, no hang) and
 * restarted on the same data, and the survivors reconnect to a
 * configuration that was not lost (same or newer config id). Then a
 * formed cluster keeps out a machine whose session expired, a dead
 * incarnation's registration is reclaimed, and a graceful leave's request
 * (R/leave) lists its machine leaving (test_zk_leave).
 *
 * Exits 77 (skip) when libfarm lacks the ZooKeeper client or java/the
 * ZooKeeper jars are missing. Parent and children talk over pipes; every
 * wait is a condition wait in the child bounded by a timeout, or a poll on
 * a pipe with a deadline.
 *
 * --broken: every machine with a lower id registered builds the next
 * configuration (FARM_FP_ZK_ALL_MANAGE, the rule before), so the third
 * machine reads every registration at a suspicion; the cluster test must
 * see those reads (and runs alone).
 */
#include "testutil.h"

#include <inttypes.h>
#include <poll.h>

#include "brokenarg.h"
#include "coord/membership.h"

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
};

static bool pred(const struct farm_view *v,
                 const struct farm_membership_status *s, void *arg)
{
	const struct cmd *c = arg;
	if (c->lost)
		return s->state != FARM_MEMBERSHIP_CONNECTED;
	return s->state == FARM_MEMBERSHIP_CONNECTED && s->registered &&
	       (v->n == c->n || c->n == 0) && v->config_id >= c->min_id &&
	       s->syncs >= c->min_syncs && s->rejoins >= c->min_rejoins &&
	       (!c->fast_ready || s->fast_ready) &&
	       !farm_view_find(v, c->absent);
}

/* The machines' expect_machines (0: the cluster is never formed). */
static unsigned child_expect;

static int child_main(uint32_t id, int in, int out)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "/dev/shm/test-zk-m%u", id);
	struct farm_membership_attr a = {.self_id = id,
	                                 .endpoint = ep,
	                                 .zk = zk_connect,
	                                 .zk_root = zk_root,
	                                 .session_ms = SESSION_MS,
	                                 .connect_ms = 10000,
	                                 .expect = child_expect};
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

static int spawn(struct child *k, uint32_t id)
{
	int down[2], up[2];
	if (pipe(down) || pipe(up))
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
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

static void kill_kids(void)
{
	for (int i = 0; i < NM; i++) {
		if (kids[i].pid > 0) {
			kill(kids[i].pid, SIGKILL);
			tu_reap(kids[i].pid);
			kids[i].pid = 0;
		}
		if (kids[i].to > 0)
			close(kids[i].to);
		if (kids[i].from > 0)
			close(kids[i].from);
		kids[i].to = kids[i].from = -1;
	}
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

static void test_zk_cluster(void **state)
{
	(void)state;
	uint64_t t_all = farm_now_ns();
	for (int i = 0; i < NM; i++)
		kids[i].to = kids[i].from = -1;
	/* 1. Three machines join at once. */
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
	uint64_t reg3 = r[2].st.reg_reads;
	printf("join: 3 machines see config %" PRIu64 " with 3 members after "
	       "%.0f ms (%" PRIu64 " configuration writes, %" PRIu64
	       " lost compare-and-sets)\n",
	       c1, since_ms(t_all), writes, cas);

	for (int i = 0; i < NM; i++) {
		assert_true(r[i].has_cm);
		assert_int_equal(r[i].cm, 1);
	}

	/* 1b. Recovery suspects machine 3 (its lease lapsed): the CM leaves
	 * it out at once, not after a session timeout, and lists its
	 * incarnation as removed; machine 3 is still registered but sees
	 * itself removed. Then it comes back as a new incarnation. */
	/* Once the CM's last sync found nothing to write, its reads stay
	 * current until a watch fires: the suspicion's configuration is
	 * written from them, with the compare-and-set alone. */
	c = (struct cmd){.op = 'W',
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
	c = (struct cmd){.op = 'S',
	                 .suspect = 3,
	                 .n = NM - 1,
	                 .min_id = c1 + 1,
	                 .absent = 3};
	ask(&kids[0], &c);
	c.op = 'W';
	ask(&kids[1], &c);
	c = (struct cmd){.op = 'W', .n = 0, .min_id = c1 + 1, .absent = 3};
	ask(&kids[2], &c);
	for (int i = 0; i < NM; i++)
		answer(&kids[i], &r[i]);
	double sus_ms = since_ms(t_sus);
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
	uint64_t cs = r[0].config_id;
	assert_int_equal(cs, c1 + 1);
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
	c = (struct cmd){
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
	c1 = r[0].config_id;
	printf("rejoin: machine 3 back as a new incarnation in config "
	       "%" PRIu64 "\n",
	       c1);

	/* 2. Kill the configuration manager (machine 1, the lowest id). */
	uint64_t t_kill = farm_now_ns();
	assert_int_equal(kill(kids[0].pid, SIGKILL), 0);
	assert_int_equal(tu_reap(kids[0].pid), 128 + SIGKILL);
	kids[0].pid = 0;
	c = (struct cmd){.op = 'W', .n = NM - 1, .min_id = c1 + 1, .absent = 1};
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

	/* 3. Session expiry: freeze machine 3 (SIGSTOP) until machine 2 sees
	 * it leave, then let it run: it learns that its session expired and
	 * re-joins with a new one, which makes a new configuration. */
	uint64_t t_stop3 = farm_now_ns();
	assert_int_equal(kill(kids[2].pid, SIGSTOP), 0);
	c = (struct cmd){.op = 'W', .n = 1, .min_id = c2 + 1, .absent = 3};
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
	c2 = r[1].config_id;

	/* 4. Stop the server: the loss is reported, nothing hangs. */
	uint64_t syncs[NM];
	uint64_t t_stop = farm_now_ns();
	assert_int_equal(zk_local("stop", NULL, 0), 0);
	c = (struct cmd){.op = 'W', .lost = true};
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

	/* 5. Restart it on the same data and port. */
	char line[128];
	uint64_t t_start = farm_now_ns();
	assert_int_equal(zk_local("start", line, sizeof(line)), 0);
	assert_string_equal(line, zk_connect);
	c = (struct cmd){.op = 'W', .n = NM - 1, .min_id = c2, .absent = 1};
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

	/* 6. Leave cleanly. */
	c = (struct cmd){.op = 'Q'};
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
	fflush(NULL);
	pid_t pid = fork();
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

int main(int argc, char **argv)
{
	int bst = tu_broken_arg(argc, argv, FARM_FP_ZK_ALL_MANAGE, &broken);
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
	        cmocka_unit_test_teardown(test_zk_leave, teardown),
	};
	int rc = broken ? _cmocka_run_group_tests("zk", tests, 1, NULL, NULL)
	                : cmocka_run_group_tests_name("zk", tests, NULL, NULL);
	kill_kids();
	tu_zk_stop(zk_script, zk_dir);
	return rc;
}
