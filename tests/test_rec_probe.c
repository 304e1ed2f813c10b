/*
 * The reconfiguration probe is a one-sided READ (FaRM SOSP'15 5.2): the
 * prober READs every member it does not suspect, and those whose memory
 * does not answer leave the configuration with the suspect. 5 machine
 * processes joined through a real ZooKeeper (scripts/zk-local), 50 ms
 * leases:
 *
 *   machine 0 (the CM) loses its fabric to machine 3 (an injected fault
 *   on its side: every READ, WRITE and CAS it sends to 3 fails), while 3's
 *   lease, on its own channel, goes on; then machine 4 is killed. The
 *   CM's probe must find 3 unreachable and ask to remove it with 4, so
 *   the survivors end in configuration {0, 1, 2} with 3 and 4 removed,
 *   and 3 finds itself removed.
 *
 * --broken probes the members on the lease channel instead (the switch
 * FARM_FP_REC_LEASE_PROBE, the rule before the READ probe): 3 answers
 * there, so the CM asks to remove 4 alone and keeps a member whose memory
 * it cannot reach. The test passes only if it sees that.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or (--broken)
 * without fault injection.
 */
#define NP_NM 5
#include "nodeproc.h"

#include <inttypes.h>

#include "coord/membership.h"
#include "recovery/recovery.h"
#include "brokenarg.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define SESSION_MS 4000
#define LEASE_US   50000u /* as test_recovery: no false suspicion at load */
#define WAIT_MS    15000
#define CUT        3 /* the member the CM cannot reach */
#define VICTIM     4 /* the member killed */

static char zk_dir[256], zk_connect[64], zk_root[64];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool opt_broken;

struct report {
	uint64_t config_id;
	unsigned n;
	uint32_t ids[NP_NM];
	uint32_t cm;
	unsigned nremoved;
	uint32_t removed[NP_NM];
	bool removed_self;
	int cut_rc; /* the answer to 'X' */
	struct farm_recovery_stats st;
};

static bool has(const uint32_t *ids, unsigned n, uint32_t id)
{
	for (unsigned i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static void fill(struct np_child *c, struct report *r, int cut_rc)
{
	struct farm_view *v = malloc(sizeof(*v));
	memset(r, 0, sizeof(*r));
	r->cut_rc = cut_rc;
	if (!v || farm_node_view(c->node, v)) {
		free(v);
		return;
	}
	r->config_id = v->config_id;
	r->n = v->n;
	for (unsigned i = 0; i < v->n && i < NP_NM; i++)
		r->ids[i] = v->members[i].id;
	r->cm = v->cm;
	r->nremoved = v->nremoved;
	for (unsigned i = 0; i < v->nremoved && i < NP_NM; i++)
		r->removed[i] = v->removed[i].id;
	r->removed_self = farm_node_removed(c->node);
	farm_recovery_stats(farm_node_recovery(c->node), &r->st);
	free(v);
}

/* Serve the loop until @done(view) or this machine was removed, at most
 * WAIT_MS. */
static void wait_until(struct np_child *c,
                       bool (*done)(struct np_child *,
                                    const struct farm_view *))
{
	static const volatile int never = 0;
	uint64_t dl = np_now_ns() + WAIT_MS * 1000000ull;
	struct farm_view *v = malloc(sizeof(*v));
	while (v && np_now_ns() < dl) {
		if (!farm_node_view(c->node, v) &&
		    (done(c, v) || farm_node_removed(c->node)))
			break;
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
	free(v);
}

static bool all_in(struct np_child *c, const struct farm_view *v)
{
	(void)c;
	return v->n == NP_NM;
}

/* The victim is out, and this machine's probe of its suspicion ended. */
static bool victim_out(struct np_child *c, const struct farm_view *v)
{
	struct farm_recovery_stats st;
	farm_recovery_stats(farm_node_recovery(c->node), &st);
	return !farm_view_find(v, VICTIM) && st.probes >= 1 &&
	       st.t_probed_ns >= st.t_suspect_ns;
}

static bool cut_out(struct np_child *c, const struct farm_view *v)
{
	(void)c;
	return !farm_view_find(v, VICTIM) && !farm_view_find(v, CUT);
}

static int machine(struct np_child *c, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	int rc = np_config_zk(c, "16M", zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (rc)
		return rc;
	if ((rc = farm_node_open(&cfg, &c->node))) {
		fprintf(stderr, "m%u: open: %s\n", c->me, farm_strerror(rc));
		return 4;
	}
	farm_node_set_app_loops(c->node, true);
	if (farm_node_start(c->node, 10000) ||
	    farm_node_loop_open(c->node, 0, &c->loop))
		return 5;
	wait_until(c, all_in);
	if (np_ready(c))
		return 6;
	for (;;) {
		int b = np_wait_cmd(c), cut_rc = 0;
		if (b == 'Q' || b < 0)
			break;
		if (b == 'X') {
			/* Cut this machine's fabric to CUT, once a probe
			 * READ it (which also maps the peer the fault
			 * names). */
			uint32_t id = CUT;
			bool ok = false;
			cut_rc = farm_msg_probe(farm_node_msg(c->node), &id, 1,
			                        1000000000ull, &ok);
			cut_rc = cut_rc != 1 || !ok
			                 ? -EIO
			                 : farm_fabric_fault_peer(
			                           farm_node_fabric(c->node),
			                           CUT, FARM_FAULT_FAIL, 1);
		}
		if (b == 'k')
			wait_until(c, victim_out);
		if (b == 'c')
			wait_until(c, cut_out);
		struct report r;
		fill(c, &r, cut_rc);
		if (np_say(c, 'V', &r, sizeof(r)))
			break;
	}
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

static void test_probe(void **state)
{
	(void)state;
	np_start(&cl, opt_broken ? "rec_probe_broken" : "rec_probe", machine,
	         NULL);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&cl, i, 'R', 60000);
	struct report r[NP_NM];
	for (unsigned i = 0; i < NP_NM; i++) {
		r[i] = ask(&cl, i, 'V');
		assert_int_equal(r[i].n, NP_NM);
		assert_int_equal(r[i].cm, 0);
	}
	uint64_t c0 = r[0].config_id;
	r[0] = ask(&cl, 0, 'X');
	assert_int_equal(r[0].cut_rc, 0);

	assert_int_equal(kill(cl.pid[VICTIM], SIGKILL), 0);
	tu_reap(cl.pid[VICTIM]);
	cl.pid[VICTIM] = 0;
	/* The CM's first configuration without the victim once its probe
	 * ended, and the probe's counts: whether it READ machine 3 and found
	 * it silent. */
	r[0] = ask(&cl, 0, 'k');
	assert_true(r[0].config_id > c0);
	assert_false(has(r[0].ids, r[0].n, VICTIM));
	printf("configuration %" PRIu64 ": %u members; the CM probed %" PRIu64
	       " time(s), %" PRIu64 " member(s) by READ, %" PRIu64 " silent\n",
	       r[0].config_id, r[0].n, r[0].st.probes, r[0].st.read_probes,
	       r[0].st.read_silent);
	if (opt_broken) {
		/* The old rule: nobody READs, so nobody finds 3 silent. Its
		 * lease answers, and it stays although the CM cannot reach
		 * it. */
		bool kept =
		        has(r[0].ids, r[0].n, CUT) && r[0].st.read_probes == 0;
		printf("%s\n", kept ? "broken rule: machine 3 kept though the "
		                      "CM cannot reach its memory (as expected)"
		                    : "broken rule: machine 3 was removed");
		assert_true(kept);
	} else {
		assert_true(r[0].st.read_silent >= 1);
		for (unsigned i = 0; i < 3; i++) {
			r[i] = ask(&cl, i, 'c');
			assert_int_equal(r[i].n, 3);
			assert_false(has(r[i].ids, r[i].n, CUT));
			assert_true(has(r[i].removed, r[i].nremoved, CUT));
			assert_true(has(r[i].removed, r[i].nremoved, VICTIM));
			assert_int_equal(r[i].cm, 0);
		}
		assert_int_equal(r[1].config_id, r[0].config_id);
		assert_int_equal(r[2].config_id, r[0].config_id);
		struct report z = ask(&cl, CUT, 'c');
		assert_true(z.removed_self);
		printf("configuration %" PRIu64 " = {0, 1, 2}: machine 3 "
		       "(unreachable by READ, lease alive) removed with the "
		       "killed machine 4, and it knows\n",
		       r[0].config_id);
	}
	for (unsigned i = 0; i < VICTIM; i++)
		np_send(&cl, i, 'Q');
	int st[NP_NM];
	np_finish(&cl, st);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(st[i], 0);
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
	int st =
	        tu_broken_arg(argc, argv, FARM_FP_REC_LEASE_PROBE, &opt_broken);
	if (st)
		return st;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-rec-probe-%d",
	         (int)getpid());
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_probe, teardown),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "rec_probe", tests,
	                 sizeof(tests) / sizeof(tests[0]));
}
