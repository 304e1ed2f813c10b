/*
 * NEW-CONFIG (src/node/newconfig.c, src/coord/offer.c): the CM sends the
 * configuration its compare-and-set wrote to the survivors, which take it
 * without waiting for ZooKeeper. 4 machine processes on a real ZooKeeper
 * (scripts/zk-local); once formed, machines 1 to 3 publish every view
 * they read from ZooKeeper only SLOW_MS late (FARM_FP_ZK_SLOW_PUBLISH, a
 * ZooKeeper short of CPU). Machine 3 is killed with SIGKILL: machines 1
 * and 2 must take the configuration without it well before SLOW_MS, from
 * the CM's message (counted as offered, as it applies: the count is read
 * in the configuration callback), and agree with the CM on it.
 * --broken (FARM_FP_NODE_NO_NEW_CONFIG: the CM sends nothing) must see
 * them wait for ZooKeeper, SLOW_MS or more, nothing offered.
 *
 * A join: machines 0 to 2 form, then machine 3 starts; once it applied a
 * view (one without it), ZooKeeper's views come SLOW_MS late there. It
 * must be a member well before SLOW_MS, the configuration that takes it
 * offered by the CM as the CM makes it a peer; --broken: SLOW_MS or more.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or (--broken)
 * without fault injection.
 */
#define NP_NM 4
#include "nodeproc.h"

#include <inttypes.h>
#include <time.h>

#include "brokenarg.h"
#include "coord/membership.h"
#include "node/node.h"
#include "recovery/recovery.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define SESSION_MS 4000
#define LEASE_US   50000u
#define WAIT_MS    15000
#define SLOW_MS    3000u

static char zk_dir[256], zk_connect[64], zk_root[64];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool opt_broken;

struct report {
	uint64_t config_id;
	unsigned n;
	uint32_t cm;
	uint64_t t_view_ns; /* monotonic, when this configuration applied */
	uint64_t offered, offers_refused;
};

struct child {
	farm_node *node;
	_Atomic uint64_t t_view_ns;
	/* The offers counted as the last configuration applied: one
	 * offered must be counted by then, not after the application may
	 * already act on it. */
	_Atomic uint64_t offered;
};

static void on_config(void *ctx, uint64_t id, unsigned members, bool member)
{
	(void)id;
	(void)members;
	(void)member;
	struct child *ch = ctx;
	atomic_store(&ch->t_view_ns, np_now_ns());
	struct farm_membership_status ms;
	if (!farm_membership_status(farm_node_membership(ch->node), &ms))
		atomic_store(&ch->offered, ms.offered);
}

/* The delay point's hook: ZooKeeper's view published SLOW_MS late. */
static void slow_publish(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	struct timespec ts = {.tv_sec = SLOW_MS / 1000,
	                      .tv_nsec = (long)(SLOW_MS % 1000) * 1000000};
	while (nanosleep(&ts, &ts))
		;
}

/* The joiner's: ZooKeeper's views late only once it applied one (its
 * first, without it, makes the CM one of its messaging peers). */
static farm_node *slow_node;
static void slow_member(enum farm_fault_point fp, void *arg)
{
	struct farm_view *v = malloc(sizeof(*v));
	bool slow =
	        v && slow_node && !farm_node_view(slow_node, v) && v->config_id;
	free(v);
	if (slow)
		slow_publish(fp, arg);
}

static void fill(struct np_child *c, struct child *ch, struct report *r)
{
	struct farm_view *v = malloc(sizeof(*v));
	memset(r, 0, sizeof(*r));
	if (!v || farm_node_view(c->node, v)) {
		free(v);
		return;
	}
	r->config_id = v->config_id;
	r->n = v->n;
	r->cm = v->cm;
	r->t_view_ns = atomic_load(&ch->t_view_ns);
	struct farm_membership_status ms;
	if (!farm_membership_status(farm_node_membership(c->node), &ms))
		r->offers_refused = ms.offers_refused;
	r->offered = atomic_load(&ch->offered);
	free(v);
}

/* Wait (serving the loop) until the view has @n members, at most
 * WAIT_MS. */
static void wait_view(struct np_child *c, unsigned n)
{
	static const volatile int never = 0;
	uint64_t dl = np_now_ns() + WAIT_MS * 1000000ull;
	struct farm_view *v = malloc(sizeof(*v));
	while (v && np_now_ns() < dl) {
		if (!farm_node_view(c->node, v) && v->n == n)
			break;
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
	free(v);
}

static int machine(struct np_child *c, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	int rc = np_config_zk(c, "16M", zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (rc)
		return rc;
	struct child ch = {0};
	if ((rc = farm_node_open(&cfg, &c->node))) {
		fprintf(stderr, "m%u: open: %s\n", c->me, farm_strerror(rc));
		return 4;
	}
	ch.node = c->node;
	farm_node_on_config(c->node, on_config, &ch);
	farm_node_set_app_loops(c->node, true);
	if (farm_node_start(c->node, 10000) ||
	    farm_node_loop_open(c->node, 0, &c->loop))
		return 5;
	wait_view(c, NP_NM);
	/* Formed: from now on ZooKeeper's views come late here. */
	if (c->me != 0 &&
	    farm_fault_set(FARM_FP_ZK_SLOW_PUBLISH, slow_publish, NULL))
		return 6;
	if (np_ready(c))
		return 7;
	for (;;) {
		int b = np_wait_cmd(c);
		if (b == 'Q' || b < 0)
			break;
		if (b >= '1' && b <= '0' + NP_NM)
			wait_view(c, (unsigned)(b - '0'));
		struct report r;
		fill(c, &ch, &r);
		if (np_say(c, 'V', &r, sizeof(r)))
			break;
	}
	/* The worker may sleep in the hook: it closes after it. */
	(void)farm_fault_set(FARM_FP_ZK_SLOW_PUBLISH, NULL, NULL);
	farm_node_loop_close(c->node, c->loop);
	farm_node_close(c->node);
	return 0;
}

/* The join test's machines: 0 to 2 form first; 3 starts on 'J', reports
 * when it is a member ('V': t_view_ns is from its open until it saw
 * itself a member). */
static int joiner(struct np_child *c, struct farm_config *cfg)
{
	struct child ch = {0}; /* fill's; the time is taken here */
	if (np_ready(c))
		return 7;
	char b = 0;
	if (read(c->in, &b, 1) != 1 || b != 'J')
		return 8;
	uint64_t t0 = np_now_ns();
	if (farm_node_open(cfg, &c->node))
		return 4;
	ch.node = c->node;
	farm_node_on_config(c->node, on_config, &ch);
	farm_node_set_app_loops(c->node, true);
	slow_node = c->node;
	if (farm_fault_set(FARM_FP_ZK_SLOW_PUBLISH, slow_member, NULL))
		return 6;
	if (farm_node_start(c->node, 10000) ||
	    farm_node_loop_open(c->node, 0, &c->loop))
		return 5;
	int rc = np_await_member(c->node, c->loop, c->me, WAIT_MS);
	uint64_t t1 = np_now_ns();
	struct report r;
	fill(c, &ch, &r);
	r.t_view_ns = rc ? 0 : t1 - t0;
	if (np_say(c, 'V', &r, sizeof(r)))
		return 9;
	(void)np_wait_cmd(c);
	(void)farm_fault_set(FARM_FP_ZK_SLOW_PUBLISH, NULL, NULL);
	farm_node_loop_close(c->node, c->loop);
	farm_node_close(c->node);
	return 0;
}

static int machine_join(struct np_child *c, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	int rc = np_config_zk(c, "16M", zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (rc)
		return rc;
	if (c->me == NP_NM - 1)
		return joiner(c, &cfg);
	if ((rc = farm_node_open(&cfg, &c->node))) {
		fprintf(stderr, "m%u: open: %s\n", c->me, farm_strerror(rc));
		return 4;
	}
	farm_node_set_app_loops(c->node, true);
	if (farm_node_start(c->node, 10000) ||
	    farm_node_loop_open(c->node, 0, &c->loop))
		return 5;
	wait_view(c, NP_NM - 1);
	if (np_ready(c))
		return 7;
	while (np_wait_cmd(c) != 'Q')
		;
	farm_node_loop_close(c->node, c->loop);
	farm_node_close(c->node);
	return 0;
}

static struct report ask(struct np_cluster *cl, unsigned i, char cmd)
{
	struct report r;
	np_send(cl, i, cmd);
	np_expect(cl, i, 'V', WAIT_MS + 5000);
	np_recv(cl, i, &r, sizeof(r), 1000);
	return r;
}

static struct np_cluster cl;

static void test_new_config(void **state)
{
	(void)state;
	np_start(&cl, opt_broken ? "rec_newconfig_broken" : "rec_newconfig",
	         machine, NULL);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', 60000);
	struct report r[NP_NM];
	for (unsigned i = 0; i < NP_NM; i++) {
		r[i] = ask(&cl, i, 'V');
		assert_int_equal(r[i].n, NP_NM);
		assert_int_equal(r[i].cm, 0);
	}
	uint64_t c0 = r[0].config_id;
	uint64_t t_kill = np_now_ns();
	assert_int_equal(kill(cl.pid[3], SIGKILL), 0);
	tu_reap(cl.pid[3]);
	cl.pid[3] = 0;
	for (unsigned i = 0; i < 3; i++) {
		r[i] = ask(&cl, i, '3');
		assert_int_equal(r[i].n, 3);
		assert_true(r[i].config_id > c0);
	}
	for (unsigned i = 1; i < 3; i++) {
		double ms = (double)(r[i].t_view_ns - t_kill) / 1e6;
		printf("%smachine %u took configuration %" PRIu64 " %.1f ms "
		       "after the kill (CM %.1f ms; ZooKeeper's view %u ms "
		       "late here), %" PRIu64 " offered\n",
		       opt_broken ? "broken rule: " : "", i, r[i].config_id, ms,
		       (double)(r[0].t_view_ns - t_kill) / 1e6, SLOW_MS,
		       r[i].offered);
		assert_int_equal(r[i].config_id, r[0].config_id);
		assert_int_equal(r[i].offers_refused, 0);
		if (opt_broken) {
			assert_int_equal(r[i].offered, 0);
			assert_true(ms >= SLOW_MS);
		} else {
			assert_true(r[i].offered >= 1);
			assert_true(ms < SLOW_MS / 2);
		}
	}
	for (unsigned i = 0; i < 3; i++)
		np_send(&cl, i, 'Q');
	int st[NP_NM];
	np_finish(&cl, st);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(st[i], 0);
	np_cleanup(&cl);
}

static void test_join(void **state)
{
	(void)state;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-newconfig-j%d",
	         (int)getpid());
	np_start(&cl, opt_broken ? "rec_newconfig_jbroken" : "rec_newconfig_j",
	         machine_join, NULL);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', 60000);
	np_send(&cl, NP_NM - 1, 'J');
	np_expect(&cl, NP_NM - 1, 'V', WAIT_MS + 5000);
	struct report r;
	np_recv(&cl, NP_NM - 1, &r, sizeof(r), 1000);
	double ms = (double)r.t_view_ns / 1e6;
	printf("%sthe joiner was a member of configuration %" PRIu64
	       " (%u machines) %.1f ms after its open (ZooKeeper's views %u "
	       "ms late there), %" PRIu64 " offered\n",
	       opt_broken ? "broken rule: " : "", r.config_id, r.n, ms, SLOW_MS,
	       r.offered);
	assert_int_equal(r.n, NP_NM);
	assert_true(r.t_view_ns > 0);
	assert_int_equal(r.offers_refused, 0);
	if (opt_broken) {
		assert_int_equal(r.offered, 0);
		assert_true(ms >= SLOW_MS);
	} else {
		assert_true(r.offered >= 1);
		assert_true(ms < SLOW_MS / 2);
	}
	np_quit_all(&cl);
	np_cleanup(&cl);
}

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	return 0;
}

int main(int argc, char **argv)
{
	int brc = tu_broken_arg(argc, argv, FARM_FP_NODE_NO_NEW_CONFIG,
	                        &opt_broken);
	if (brc)
		return brc;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-newconfig-%d",
	         (int)getpid());
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_new_config, teardown),
	        cmocka_unit_test_teardown(test_join, teardown),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "rec_newconfig", tests,
	                 sizeof(tests) / sizeof(tests[0]));
}
