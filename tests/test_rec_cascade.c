/*
 * A kill after a false suspicion's reconfiguration: the bank of recbank.h
 * on 4 machines (3 replicas, 50 ms leases). Once every machine has
 * committed 20 transfers, one machine is stopped (SIGSTOP) well past its
 * lease: the others suspect it and reconfigure without it, as after a
 * false suspicion on a loaded host (a machine starved of the CPU for a
 * lease is removed though it lives). Once every other member runs in that
 * configuration with its regions active, it gets SIGCONT: a removed
 * machine that lives on, still registered in ZooKeeper, whose lease
 * thread judges the configuration it believes in until the view without
 * it arrives; then it goes quiet (no renewal, no suspicion, no probe:
 * test_rec_zombie's quiet checks). Then another machine is killed
 * (SIGKILL): three machines of that configuration, two alive, a majority.
 * The test asserts:
 *
 *   - every other member runs without the stopped machine, its regions
 *     active, within STOP_MAX_MS of SIGSTOP;
 *   - the resumed machine serves none of the lock-free reads of its own
 *     accounts it makes at once after SIGCONT (its lease lapsed long ago
 *     and its regions were promoted elsewhere), commits no transaction
 *     with reads it began after SIGCONT (its history), and learns it was
 *     removed within RESUME_MS;
 *   - every survivor applies a configuration without either machine
 *     within RB_RECONF_MS (10 s, recovery_bench's bound) of the kill, the
 *     same one at each, with every survivor a member;
 *   - recbank.h's checks: every account readable, the total, every
 *     committed write present, no lock left, the histories (the resumed
 *     machine's included) strictly serializable, the survivors commit in
 *     the new configuration.
 *
 * Cases (one cluster each; an argument picks one, none runs all):
 *   member  stop 3, kill 2: the configuration {0, 1, 2}, the CM lives;
 *   cm      stop 0 (the CM), kill 2: machine 1 manages {1, 2, 3} while
 *           the resumed machine 0, the lowest id, stays registered. Its
 *           recovery log line is that of a CI run of recovery_bench_smoke
 *           (machine 1: "configuration 2: 1 machine(s) to remove (first
 *           2); 2 of 3 answered the probe"; machine 0, removed, used to
 *           add "0 of 3 ... no majority" from the kill's death notice:
 *           it drops that suspicion now);
 *   newcm   stop 0, kill 1: the machine that wrote the last
 *           configuration is the one killed;
 *   early   stop 0 once every machine has committed one transfer: a
 *           survivor may then still have to look up where a region of
 *           machine 0 lives, from machine 0, just as it stops. Such a
 *           call used to wait out its 10 s bound after the
 *           configuration removed machine 0 (no death notice comes for
 *           a process that lives), holding the survivor's application;
 *           past the 4 s session the stopped machine registered anew
 *           when continued (test_msg --broken-removed proves the fix).
 * Each machine's recovery counters are printed at the end.
 *
 * cm --broken: the CM's serve word only grows from its join grace (a
 * second from its first configuration), as before its first grant ended
 * the grace (FARM_FP_LEASE_CM_GRACE). The CM is stopped within that
 * second (1 transfer per machine, then about 200 ms stopped), so after
 * SIGCONT it serves its old copies: the checks above must notice.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or without
 * fault injection (--broken only).
 */
#define NP_NM 4
#include "recbank.h"

#include <signal.h>

#include "recovery/recovery.h"
#include "brokenarg.h"

#define RESUME_MS 5000 /* after SIGCONT the stopped machine stops within */
#define NLOCAL    5    /* its lock-free reads of its own accounts then */
/* From SIGSTOP, every other member runs without the stopped machine, its
 * regions active, within (about 200 ms on a quiet host); below the 4 s
 * ZooKeeper session (RB_SESSION_MS), past which the stopped machine's
 * session expires and it registers anew when continued. */
#define STOP_MAX_MS 3000

/* What a machine says of its recovery ('r', answered 'R'). */
struct rec_report {
	uint64_t config, suspicions, probes, requests, no_majority, withdrawn;
	uint64_t removed;
	uint32_t cm;
};

/* What the stopped machine says after its 'D' ('Z'): its lock-free reads
 * of its own accounts at once after SIGCONT, and how long its serve word
 * still held then (negative: lapsed). */
struct resume_report {
	bool resumed;
	unsigned served; /* of NLOCAL */
	int err;         /* the first refusal's */
	int64_t serve_left_ns;
};

static struct {
	bool armed, checked;
	const farm_fatptr *mine; /* its own accounts (RB_ACCOUNTS) */
	struct resume_report rep;
} Z;

static _Atomic uint64_t z_cont_ns;

static void on_cont(int sig)
{
	(void)sig;
	atomic_store(&z_cont_ns, np_now_ns());
}

static int say_recovery(struct tx_child *c)
{
	struct farm_recovery_stats *st = calloc(1, sizeof(*st));
	if (!st)
		return -1;
	farm_recovery_stats(farm_node_recovery(c->np.node), st);
	struct rec_report r = {.config = farm_node_config_id(c->np.node),
	                       .suspicions = st->suspicions,
	                       .probes = st->probes,
	                       .requests = st->requests,
	                       .no_majority = st->no_majority,
	                       .withdrawn = st->withdrawn,
	                       .removed = st->removed,
	                       .cm = st->cm};
	free(st);
	return np_say(&c->np, 'R', &r, sizeof(r));
}

/* 'c': this machine is about to be stopped: note SIGCONT. 'r': its
 * recovery counters. */
static int cascade_cmd(struct tx_child *c, int cmd, const farm_fatptr *acc,
                       unsigned nacc)
{
	(void)nacc;
	if (cmd == 'r')
		return say_recovery(c);
	if (cmd != 'c')
		return -1;
	Z.mine = acc + (size_t)c->np.me * RB_ACCOUNTS;
	struct sigaction sa = {.sa_handler = on_cont};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGCONT, &sa, NULL))
		return -1;
	Z.armed = true;
	return np_say(&c->np, 'c', NULL, 0);
}

/* Before each bank step: once resumed, read its own accounts lock-free
 * at once, before anything tells it it was removed. It no longer owns
 * them, and its lease lapsed long ago: each read must be refused. */
static int cascade_step(struct tx_child *c, struct run_report *r)
{
	(void)r;
	if (!Z.armed || Z.checked || !atomic_load(&z_cont_ns))
		return 0;
	Z.checked = true;
	Z.rep.resumed = true;
	uint64_t now = np_now_ns();
	uint64_t u = atomic_load(farm_txm_serve_word(c->txm));
	Z.rep.serve_left_ns = u == UINT64_MAX ? INT64_MAX : (int64_t)(u - now);
	const farm_fatptr *mine = Z.mine;
	for (unsigned i = 0; i < NLOCAL; i++) {
		int64_t b;
		uint64_t v;
		int rc = lf_account(c, mine[i].addr, &b, &v);
		if (!rc)
			Z.rep.served++;
		else if (!Z.rep.err)
			Z.rep.err = rc;
	}
	return 0;
}

static int cascade_end(struct tx_child *c, const farm_fatptr *acc,
                       unsigned nacc)
{
	(void)acc;
	(void)nacc;
	if (!Z.armed)
		return 0;
	return np_say(&c->np, 'Z', &Z.rep, sizeof(Z.rep));
}

static void print_recovery(unsigned i)
{
	struct rec_report r;
	np_send(&rb_cl, i, 'r');
	np_expect(&rb_cl, i, 'R', 10000);
	np_recv(&rb_cl, i, &r, sizeof(r), 1000);
	printf("machine %u: configuration %" PRIu64 " (CM %" PRIu32
	       "); recovery: %" PRIu64 " suspicions, %" PRIu64
	       " probes (%" PRIu64 " asked for removals, %" PRIu64
	       " without a majority, %" PRIu64 " suspects withdrawn), "
	       "removed %" PRIu64 " time(s)\n",
	       i, r.config, r.cm, r.suspicions, r.probes, r.requests,
	       r.no_majority, r.withdrawn, r.removed);
}

static bool opt_broken;

/* Transactions machine @i began after @t_cont that committed having
 * read something: a removed machine's (its reads are of copies it no
 * longer owns, or fenced). */
static unsigned committed_reads_after(unsigned i, uint64_t t_cont)
{
	char path[512];
	size_t len;
	tx_hist_path(&rb_cl, i, path, sizeof(path));
	uint64_t *v = np_read_file(path, &len);
	assert_non_null(v);
	size_t n = len / 24 * 3;
	unsigned committed = 0;
	bool after = false, reads = false;
	for (size_t k = 0; k < n; k += 3) {
		if (v[k] == H_BEGIN) {
			after = v[k + 1] > t_cont;
			reads = false;
		} else if (v[k] == H_READ) {
			reads = true;
		} else if (v[k] == H_END) {
			committed += after && reads && v[k + 2] == SC_COMMITTED;
		}
	}
	free(v);
	return committed;
}

/* Stop @victim past its lease until every other member runs without it
 * with its regions active, then continue it: it must refuse to serve,
 * commit nothing and learn it was removed. */
static void stop_past_lease(struct rb_result *res, unsigned victim)
{
	struct fails *f = &res->f;
	np_send(&rb_cl, victim, 'c');
	np_expect(&rb_cl, victim, 'c', 10000);
	res->t_kill_ns = np_now_ns();
	assert_int_equal(kill(rb_cl.pid[victim], SIGSTOP), 0);
	rb_tell(res, victim, true);
	rb_wait_recovered(res);
	uint64_t t_cont = np_now_ns();
	assert_int_equal(kill(rb_cl.pid[victim], SIGCONT), 0);
	if (t_cont - res->t_kill_ns > STOP_MAX_MS * 1000000ull)
		failed(f,
		       "the others ran without machine %u, their regions "
		       "active, only %.1f ms after its SIGSTOP (bound %d ms)",
		       victim, (double)(t_cont - res->t_kill_ns) / 1e6,
		       STOP_MAX_MS);
	printf("%s: machine %u stopped for %.1f ms; every other member ran "
	       "without it, its regions active, before SIGCONT\n",
	       res->name, victim, (double)(t_cont - res->t_kill_ns) / 1e6);
	struct run_report zr;
	struct resume_report rr;
	np_expect(&rb_cl, victim, 'D', RESUME_MS);
	np_recv(&rb_cl, victim, &zr, sizeof(zr), 1000);
	np_expect(&rb_cl, victim, 'Z', 1000);
	np_recv(&rb_cl, victim, &rr, sizeof(rr), 1000);
	unsigned after = committed_reads_after(victim, t_cont);
	printf("%s: machine %u after SIGCONT: its serve word %s %.1f ms; "
	       "%u of %u lock-free reads of its own accounts served "
	       "(refused: %s); %u transactions with reads committed\n",
	       res->name, victim,
	       rr.serve_left_ns >= 0 ? "held for" : "had lapsed",
	       (double)(rr.serve_left_ns >= 0 ? rr.serve_left_ns
	                                      : -rr.serve_left_ns) /
	               1e6,
	       rr.served, NLOCAL, rr.err ? farm_strerror(rr.err) : "-", after);
	if (!rr.resumed)
		failed(f, "machine %u never saw SIGCONT", victim);
	if (rr.served)
		failed(f,
		       "machine %u, removed, served %u lock-free reads of "
		       "copies it no longer owns after SIGCONT",
		       victim, rr.served);
	if (after)
		failed(f,
		       "machine %u, removed, committed %u transactions with "
		       "reads it began after SIGCONT",
		       victim, after);
	if (!zr.removed)
		failed(f,
		       "machine %u, resumed, ended its run without knowing it "
		       "was removed",
		       victim);
}

/* Every survivor in one configuration, each of them a member of it. */
static void check_one_config(struct rb_result *res, unsigned survivors)
{
	uint64_t cfg = 0;
	for (unsigned i = 0; i < NP_NM; i++) {
		const struct run_report *r = &res->r[i];
		if (!rb_member(res, i) || !r->new_config)
			continue;
		if (!cfg)
			cfg = r->config_new;
		if (r->config_new != cfg)
			failed(&res->f,
			       "machine %u took configuration %" PRIu64
			       ", another survivor %" PRIu64 " first",
			       i, r->config_new, cfg);
		if (r->members_new != survivors)
			failed(&res->f,
			       "machine %u: configuration %" PRIu64
			       " has %u members, not the %u survivors",
			       i, r->config_new, r->members_new, survivors);
	}
}

static void cascade(unsigned stop, unsigned victim, unsigned pre,
                    const char *name)
{
	struct rb_result res;
	rb_p.pre_transfers = pre;
	rb_start(&res, name);
	stop_past_lease(&res, stop);
	rb_reap(&res, victim, true);
	rb_tell(&res, victim, false);
	rb_collect(&res);
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_cl.pid[i] > 0)
			print_recovery(i);
	check_one_config(&res, NP_NM - 2);
	rb_check(&res);
	rb_verdict(&res, opt_broken,
	           "the CM's join grace outlived its removal");
}

static void test_member(void **state)
{
	(void)state;
	cascade(3, 2, 20, "cascade_member");
}

static void test_cm(void **state)
{
	(void)state;
	cascade(0, 2, opt_broken ? 1 : 20, "cascade_cm");
}

static void test_newcm(void **state)
{
	(void)state;
	cascade(0, 1, 20, "cascade_newcm");
}

static void test_early(void **state)
{
	(void)state;
	cascade(0, 2, 1, "cascade_early");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest all[] = {
	        cmocka_unit_test_teardown(test_member, rb_teardown),
	        cmocka_unit_test_teardown(test_cm, rb_teardown),
	        cmocka_unit_test_teardown(test_newcm, rb_teardown),
	        cmocka_unit_test_teardown(test_early, rb_teardown),
	};
	static const char *const names[] = {"member", "cm", "newcm", "early"};
	size_t first = 0, n = 4;
	if (argc > 1) {
		for (first = 0; first < 4 && strcmp(argv[1], names[first]);
		     first++)
			;
		n = 1;
	}
	opt_broken = argc > 2 && first == 1 && !strcmp(argv[2], "--broken");
	if (argc > 3 || first == 4 || (argc > 2 && !opt_broken)) {
		fprintf(stderr,
		        "usage: %s [member|cm|newcm|early | cm --broken]\n",
		        argv[0]);
		return 2;
	}
	/* Inherited by the machines (forked). */
	if (opt_broken &&
	    farm_fault_set(FARM_FP_LEASE_CM_GRACE, tu_switch_on, NULL)) {
		printf("skipped: built without fault injection\n");
		return FARM_TEST_SKIP;
	}
	rb_p.pre_transfers = 20;
	rb_p.post_ms = 1000;
	/* The members' run goes on after the first configuration until the
	 * kill is told. */
	rb_p.first_post_ms = 60000;
	rb_p.cmd = cascade_cmd;
	rb_p.step = cascade_step;
	rb_p.end = cascade_end;
	return rb_main("rec_cascade", all + first, n);
}
