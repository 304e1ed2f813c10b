/*
 * Zombie: the bank of recbank.h on 4 machines;
 * once every machine has committed 300 transfers, machine 3 (not the CM)
 * is stopped with SIGSTOP, well past its 50 ms lease: the others suspect
 * it, reconfigure without it, promote its regions and recover its
 * transactions. Once every survivor runs in that configuration with its
 * regions active, the parent sends SIGCONT. Then:
 *
 *   - fenced: before the stop, the zombie prepared one-sided requests to
 *     survivors' accounts (a READ of the header, a WRITE of line 0 with a
 *     balance of 1,000,000, a CAS of the header to locked) and ran them
 *     once as a control (every one executed). Right after SIGCONT it runs
 *     them again: every one must fail with FARM_EFENCED; none may execute
 *     (0 applied);
 *   - it commits nothing: no transfer the zombie began after SIGCONT
 *     commits (its history);
 *   - it learns it was removed (farm_node_removed) and stops, within
 *     ZOMBIE_MS of SIGCONT;
 *   - recbank.h's checks over every machine, the zombie's history included
 *     (its transactions that spanned the stop end as it was told);
 *   - quiet: once it knows (its lease retired), it gets a death notice
 *     of machine 0 (as test_rec_cascade's kill brings it) and its
 *     application retries for QUIET_MS, every millisecond, whatever the
 *     error (a transfer of two of its own accounts, an allocation
 *     committed): every attempt fails FARM_EFENCED, final
 *     (farm_tx_retryable false); its lease thread sends nothing, its
 *     recovery drops the notice and suspects and probes nobody; the
 *     library writes at most QUIET_LINES log lines meanwhile.
 *
 * On shm a request that passed its revocation check just before SIGSTOP
 * still lands after SIGCONT (the check is per doorbell); the zombie's
 * transactions that spanned the stop are counted, with their outcomes,
 * to show whether that ever reaches a client.
 *
 * --broken: a view that drops machines does not fence them (the switch
 * point FARM_FP_NODE_NO_FENCE); the checks must notice.
 * --broken-loud: a removed machine acts as before it went quiet
 * (FARM_FP_REMOVED_LOUD); the quiet checks must notice.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or without
 * fault injection (--broken only).
 */
#define NP_NM 4
#include "recbank.h"
#include "zprobe.h"

#include <signal.h>

#include "recovery/recovery.h"
#include "util/log.h"
#include "brokenarg.h"

#define ZOMBIE      3
#define ZOMBIE_MS   5000 /* after SIGCONT it must have stopped within */
#define NLOCAL      5    /* lock-free reads of its own accounts */
#define QUIET_MS    1000 /* its application retries this long, removed */
#define QUIET_LINES 8    /* library log lines it may write meanwhile */

static bool opt_loud; /* --broken-loud (inherited by the machines) */

/* The zombie's retries once it knows it was removed: attempts, those
 * that failed FARM_EFENCED, the first other outcome; what grew over the
 * window. */
struct quiet {
	bool ran, retired; /* its lease retired before the window */
	uint64_t tries, fenced, other;
	int other_err;
	uint64_t lines, sent, suspicions, probes, dropped;
};

/* What the zombie reports after its 'D' ('Z'). */
struct zombie_report {
	struct zp_counts before, after;
	uint64_t t_cont_ns, t_probed_ns, t_end_ns;
	uint64_t t_removed_ns;   /* farm_node_on_config said: not a member */
	unsigned local_served;   /* of NLOCAL lock-free reads of its own */
	unsigned removed_served; /* the same once it knew it was removed */
	int local_err;
	bool resumed, removed;
	struct quiet q;
};

/* ---- the zombie (child side) ------------------------------------------ */

static struct {
	bool prepared, probed;
	struct zprobe zp;        /* its one-sided requests to other primaries */
	const farm_fatptr *mine; /* its own accounts (RB_ACCOUNTS) */
	struct zombie_report rep;
} Z;

static _Atomic uint64_t z_cont_ns;

static void on_cont(int sig)
{
	(void)sig;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	atomic_store(&z_cont_ns, (uint64_t)ts.tv_sec * 1000000000ull +
	                                 (uint64_t)ts.tv_nsec);
}

/* 'z': pick one account of each other machine but one, resolve it, and
 * run the requests once (the control): a READ, and a CAS of the header
 * to itself (no change); no WRITE. */
static int z_prepare(struct tx_child *c, const farm_fatptr *acc, unsigned nacc)
{
	if (zp_prepare(&Z.zp, c, acc, nacc, &Z.rep.before))
		return -1;
	struct sigaction sa = {.sa_handler = on_cont};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGCONT, &sa, NULL))
		return -1;
	Z.prepared = true;
	return 0;
}

static int z_cmd(struct tx_child *c, int cmd, const farm_fatptr *acc,
                 unsigned nacc)
{
	if (cmd != 'z')
		return -1;
	Z.mine = acc + (size_t)c->np.me * RB_ACCOUNTS;
	int rc = z_prepare(c, acc, nacc);
	return np_say(&c->np, rc ? 'f' : 'z', &Z.rep.before,
	              sizeof(Z.rep.before))
	               ? -1
	               : 0;
}

/* NLOCAL lock-free reads of its own accounts: how many were served. */
static unsigned read_own(struct tx_child *c)
{
	unsigned served = 0;
	for (unsigned i = 0; i < NLOCAL; i++) {
		int64_t b;
		uint64_t v;
		int rc = lf_account(c, Z.mine[i].addr, &b, &v);
		if (!rc)
			served++;
		else if (!Z.rep.local_err)
			Z.rep.local_err = rc;
	}
	return served;
}

/* Before each bank step: once resumed, the requests again (at once),
 * then the workload until it is removed (rb_run ends the run) or
 * ZOMBIE_MS. */
static int z_step(struct tx_child *c, struct run_report *r)
{
	(void)r;
	uint64_t t = atomic_load(&z_cont_ns);
	if (!Z.prepared || !t)
		return 0;
	if (!Z.probed) {
		Z.probed = true;
		Z.rep.resumed = true;
		Z.rep.t_cont_ns = t;
		zp_run(&Z.zp, c, &Z.rep.after);
		Z.rep.t_probed_ns = np_now_ns();
		/* What its application would do next: read its own
		 * accounts, lock-free (local copies it no longer owns). */
		Z.rep.local_served = read_own(c);
	}
	return np_now_ns() > t + ZOMBIE_MS * 1000000ull;
}

/* One attempt of its application: a transfer between two of its own
 * accounts, or an allocation near them, committed. */
static int z_attempt(struct tx_child *c, bool alloc)
{
	farm_tx *tx;
	int rc = farm_tx_begin(c->txm, c->np.loop, &tx);
	if (rc)
		return rc;
	const void *d;
	void *w;
	farm_fatptr p;
	if (alloc)
		rc = farm_tx_alloc_sync(tx, 64, Z.mine[0].addr, &p, &w);
	else if (!(rc = farm_tx_read_sync(tx, Z.mine[0].addr, 64, &d)) &&
	         !(rc = farm_tx_read_sync(tx, Z.mine[1].addr, 64, &d)))
		rc = farm_tx_write(tx, Z.mine[0].addr, &w);
	if (!rc)
		rc = farm_tx_commit_sync(tx);
	farm_tx_free(tx);
	return rc;
}

static void z_counters(struct tx_child *c, struct farm_recovery_stats *rs)
{
	farm_recovery_stats(farm_node_recovery(c->np.node), rs);
}

/* Once removed: wait (1 s at most) until its recovery counted the removal
 * and, unless loud, retired its lease; then QUIET_MS of retries, one a
 * millisecond, whatever the outcome. */
static void z_quiet(struct tx_child *c, struct quiet *q)
{
	static const volatile int never = 0;
	struct farm_recovery_stats *rs = malloc(2 * sizeof(*rs));
	if (!rs)
		return;
	uint64_t t = np_now_ns() + 1000000000ull;
	for (;;) {
		z_counters(c, &rs[0]);
		q->retired = rs[0].lease.retired > 0;
		if ((rs[0].removed && (q->retired || opt_loud)) ||
		    np_now_ns() > t)
			break;
		(void)farm_loop_wait(c->np.loop, &never, 1000000ull);
	}
	uint64_t lines = farm_log_lines();
	/* What test_rec_cascade's kill brings it: the fabric's death notice
	 * of a member of the configuration it is no longer in. */
	farm_recovery_peer_dead(farm_node_recovery(c->np.node), 0);
	t = np_now_ns() + QUIET_MS * 1000000ull;
	while (np_now_ns() < t) {
		int rc = z_attempt(c, q->tries & 1);
		q->tries++;
		if (rc == FARM_EFENCED)
			q->fenced++;
		else if (!q->other++)
			q->other_err = rc;
		(void)farm_loop_wait(c->np.loop, &never, 1000000ull);
	}
	q->lines = farm_log_lines() - lines;
	z_counters(c, &rs[1]);
	q->sent = rs[1].lease.sent - rs[0].lease.sent;
	q->suspicions = rs[1].suspicions - rs[0].suspicions;
	q->probes = rs[1].probes - rs[0].probes;
	q->dropped = rs[1].dropped - rs[0].dropped;
	q->ran = true;
	free(rs);
}

static int z_end(struct tx_child *c, const farm_fatptr *acc, unsigned nacc)
{
	(void)acc;
	(void)nacc;
	if (!Z.prepared)
		return 0;
	Z.rep.t_end_ns = np_now_ns();
	Z.rep.removed = farm_node_removed(c->np.node);
	Z.rep.t_removed_ns = atomic_load(&rb_left_ns);
	if (Z.rep.removed)
		Z.rep.removed_served = read_own(c);
	if (Z.rep.removed)
		z_quiet(c, &Z.rep.q);
	return np_say(&c->np, 'Z', &Z.rep, sizeof(Z.rep));
}

/* ---- the parent -------------------------------------------------------- */

static bool opt_broken;

/* What the zombie's history says about its transactions around the stop
 * (times in ns, CLOCK_MONOTONIC as the history's). */
struct zhist {
	unsigned spanned, spanned_committed, spanned_aborted;
	unsigned after_write_committed, after_write_aborted;
	unsigned after_read_committed;
	uint64_t ex_key[4], ex_ver[4]; /* reads of those, the first few */
	unsigned nex;
};

static void zombie_history(uint64_t t_stop, uint64_t t_cont, struct zhist *z)
{
	char path[512];
	size_t len;
	tx_hist_path(&rb_cl, ZOMBIE, path, sizeof(path));
	uint64_t *v = np_read_file(path, &len);
	assert_non_null(v);
	size_t n = len / 24 * 3;
	uint64_t t_inv = 0;
	bool writes = false;
	size_t first = 0;
	for (size_t k = 0; k < n; k += 3) {
		if (v[k] == H_BEGIN) {
			t_inv = v[k + 1];
			writes = false;
			first = k;
		} else if (v[k] == H_WRITE) {
			writes = true;
		} else if (v[k] == H_END) {
			bool ok = v[k + 2] == SC_COMMITTED;
			if (t_inv < t_stop && v[k + 1] > t_cont) {
				z->spanned++;
				ok ? z->spanned_committed++
				   : z->spanned_aborted++;
			} else if (t_inv > t_cont && writes) {
				ok ? z->after_write_committed++
				   : z->after_write_aborted++;
			} else if (t_inv > t_cont && ok) {
				z->after_read_committed++;
				for (size_t j = first; j < k && z->nex < 4;
				     j += 3)
					if (v[j] == H_READ) {
						z->ex_key[z->nex] = v[j + 1];
						z->ex_ver[z->nex++] = v[j + 2];
					}
				v[k + 2] =
				        SC_ABORTED; /* for the second check */
			}
		}
	}
	/* The history without those reads (their outcomes aborted: their
	 * reads are not checked), for a second check that says whether
	 * they are what broke it. */
	assert_int_equal(np_write_file(path, v, n * 8), 0);
	free(v);
}

/* The quiet checks: its application's retries once it knew. */
static void check_quiet(struct fails *f, const struct zombie_report *zr)
{
	const struct quiet *q = &zr->q;
	if (!zr->removed)
		return; /* failed above */
	printf("zombie quiet: lease %s; %" PRIu64 " attempts in %d ms, %" PRIu64
	       " FARM_EFENCED, %" PRIu64 " other (first: %s); meanwhile "
	       "%" PRIu64 " log lines, %" PRIu64 " lease datagrams sent, "
	       "%" PRIu64 " suspicions, %" PRIu64 " probes, %" PRIu64
	       " suspicions dropped\n",
	       q->retired ? "retired" : "NOT retired", q->tries, QUIET_MS,
	       q->fenced, q->other,
	       q->other ? farm_strerror(q->other_err) : "-", q->lines, q->sent,
	       q->suspicions, q->probes, q->dropped);
	if (!q->ran || !q->tries) {
		failed(f,
		       "the zombie's application did not retry once removed");
		return;
	}
	if (q->other || farm_tx_retryable(FARM_EFENCED))
		failed(f,
		       "%" PRIu64 " of %" PRIu64 " attempts on the removed "
		       "machine failed otherwise than FARM_EFENCED (first: %s)",
		       q->other, q->tries, farm_strerror(q->other_err));
	if (!q->retired || q->sent)
		failed(f,
		       "the removed machine's lease is %s: %" PRIu64
		       " datagrams sent in %d ms",
		       q->retired ? "retired" : "not retired", q->sent,
		       QUIET_MS);
	if (q->suspicions || q->probes || !q->dropped)
		failed(f,
		       "the removed machine suspected %" PRIu64 " and probed "
		       "%" PRIu64 " times in %d ms, %" PRIu64 " suspicions "
		       "dropped (a death notice of machine 0 among them)",
		       q->suspicions, q->probes, QUIET_MS, q->dropped);
	if (q->lines > QUIET_LINES)
		failed(f,
		       "the removed machine wrote %" PRIu64 " log lines in %d "
		       "ms of its application's retries (at most %d)",
		       q->lines, QUIET_MS, QUIET_LINES);
}

static const char *run_name(void)
{
	if (opt_loud)
		return "zombie_loud";
	return opt_broken ? "zombie_broken" : "zombie";
}

/* What a --broken run broke, for its verdict; NULL: not one. */
static const char *broken_why(void)
{
	if (opt_loud)
		return "a removed machine was as loud as before";
	if (opt_broken)
		return "a removed machine was not fenced (no revocation)";
	return NULL;
}

static void test_zombie(void **state)
{
	(void)state;
	struct rb_result res;
	rb_start(&res, run_name());
	np_send(&rb_cl, ZOMBIE, 'z');
	struct zombie_report zr;
	char ok = 0;
	np_recv(&rb_cl, ZOMBIE, &ok, 1, 30000);
	np_recv(&rb_cl, ZOMBIE, &zr.before, sizeof(zr.before), 1000);
	assert_int_equal(ok, 'z');
	uint64_t t_stop = res.t_kill_ns = np_now_ns();
	assert_int_equal(kill(rb_cl.pid[ZOMBIE], SIGSTOP), 0);
	rb_tell(&res, ZOMBIE, true);
	rb_wait_recovered(&res);
	uint64_t t_cont = np_now_ns();
	assert_int_equal(kill(rb_cl.pid[ZOMBIE], SIGCONT), 0);
	printf("zombie: machine %u stopped for %.1f ms; every survivor ran "
	       "without it, its regions active, before SIGCONT\n",
	       ZOMBIE, (double)(t_cont - t_stop) / 1e6);
	struct run_report zrun;
	np_expect(&rb_cl, ZOMBIE, 'D', ZOMBIE_MS + 30000);
	np_recv(&rb_cl, ZOMBIE, &zrun, sizeof(zrun), 1000);
	np_expect(&rb_cl, ZOMBIE, 'Z', 5000 + 2 * QUIET_MS + 10000);
	np_recv(&rb_cl, ZOMBIE, &zr, sizeof(zr), 1000);
	rb_check(&res);

	struct fails *f = &res.f;
	zp_print("before the stop (control)", &zr.before);
	zp_print("after SIGCONT", &zr.after);
	char errs[512];
	printf("zombie: resumed %s, requests done %.1f ms after SIGCONT; "
	       "%u of %u lock-free reads of its own accounts served after "
	       "SIGCONT, %u of %u once it knew it was removed (else: %s); "
	       "a configuration without it seen %.1f ms "
	       "after SIGCONT; run ended %.1f ms after it, %s; its bank "
	       "errors: %s\n",
	       zr.resumed ? "yes" : "no",
	       (double)(zr.t_probed_ns - zr.t_cont_ns) / 1e6, zr.local_served,
	       NLOCAL, zr.removed_served, NLOCAL,
	       zr.local_err ? farm_strerror(zr.local_err) : "-",
	       zr.t_removed_ns ? (double)((int64_t)zr.t_removed_ns -
	                                  (int64_t)zr.t_cont_ns) /
	                                 1e6
	                       : -1.0,
	       (double)(zr.t_end_ns - zr.t_cont_ns) / 1e6,
	       zr.removed ? "removed (farm_node_removed)" : "NOT removed",
	       tu_errs_str(&zrun.k.errs, errs, sizeof(errs)));
	if (zr.before.executed[ZP_READ] != ZP_TARGETS ||
	    zr.before.executed[ZP_CAS] != ZP_TARGETS)
		failed(f, "the control requests before the stop did not all "
		          "execute: the probes prove nothing");
	if (!zr.resumed)
		failed(f, "the zombie never saw SIGCONT");
	unsigned applied = 0;
	for (int op = 0; op < ZP_NOPS; op++) {
		applied += zr.after.executed[op];
		if (zr.after.fenced[op] != ZP_TARGETS)
			failed(f,
			       "%u of %u %ss after SIGCONT failed with "
			       "FARM_EFENCED (%u executed, %u other: %s)",
			       zr.after.fenced[op], ZP_TARGETS, zp_op_name(op),
			       zr.after.executed[op], zr.after.other[op],
			       farm_strerror(zr.after.other_err));
	}
	if (applied)
		failed(f,
		       "%u of the zombie's requests after SIGCONT executed in "
		       "survivors' memory",
		       applied);
	/* It may learn from recovery's notice (FARM_RECOVERY_REMOVED,
	 * farm_node_removed) before the configuration without it reaches
	 * it (rb_left_ns); the run ends at once then, and the end of the
	 * run bounds when it knew. */
	uint64_t t_knew = zr.t_removed_ns ? zr.t_removed_ns
	                  : zr.removed    ? zr.t_end_ns
	                                  : 0;
	printf("zombie: it knew it was removed %.1f ms after SIGCONT (%s)\n",
	       t_knew ? (double)((int64_t)t_knew - (int64_t)zr.t_cont_ns) / 1e6
	              : -1.0,
	       zr.t_removed_ns ? "a configuration without it"
	       : zr.removed    ? "recovery's notice, by the end of its run"
	                       : "never");
	if (!zr.removed || !t_knew ||
	    t_knew > zr.t_cont_ns + ZOMBIE_MS * 1000000ull)
		failed(f,
		       "the zombie did not learn it was removed within %d ms "
		       "of SIGCONT",
		       ZOMBIE_MS);
	struct zhist zh = {0};
	zombie_history(t_stop, t_cont, &zh);
	printf("zombie's history: %u transactions spanned the stop (%u "
	       "committed, %u aborted); begun after SIGCONT: %u transfers "
	       "committed, %u aborted, %u reads committed\n",
	       zh.spanned, zh.spanned_committed, zh.spanned_aborted,
	       zh.after_write_committed, zh.after_write_aborted,
	       zh.after_read_committed);
	sc_report rep2;
	int without =
	        tx_check_history(&rb_cl, res.killed, &rep2, NULL, NULL, NULL);
	printf("zombie: sercheck without the %u reads it served after "
	       "SIGCONT: %d anomalies (with them: %" PRIu64 ")\n",
	       zh.after_read_committed, without, res.rep.total);
	if (res.rep.total && !without)
		failed(f,
		       "the zombie served %u reads after SIGCONT from copies "
		       "it no longer owned: every anomaly involves them",
		       zh.after_read_committed);
	for (unsigned i = 0; i < zh.nex; i++) {
		unsigned a = rb_account(res.s, zh.ex_key[i]);
		printf("zombie's read after SIGCONT: account %#" PRIx64
		       " (made by machine %u) at version %" PRIu64
		       "; its final version %" PRIu64 "\n",
		       zh.ex_key[i], a / RB_ACCOUNTS, zh.ex_ver[i],
		       a < RB_NACC ? res.s->version[a] : 0);
	}
	if (zh.after_write_committed)
		failed(f,
		       "the zombie committed %u transfers it began after "
		       "SIGCONT",
		       zh.after_write_committed);
	check_quiet(f, &zr);
	rb_verdict(&res, broken_why() != NULL, broken_why());
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_zombie, rb_teardown),
	};
	if (argc > 1 && !strcmp(argv[1], "--broken")) {
		opt_broken = true;
		/* Inherited by the machines (forked). */
		if (farm_fault_set(FARM_FP_NODE_NO_FENCE, tu_switch_on, NULL)) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
	} else if (argc > 1 && !strcmp(argv[1], "--broken-loud")) {
		opt_loud = true;
		if (farm_fault_set(FARM_FP_REMOVED_LOUD, tu_switch_on, NULL)) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--broken|--broken-loud]\n",
		        argv[0]);
		return 2;
	}
	rb_p.cmd = z_cmd;
	rb_p.step = z_step;
	rb_p.end = z_end;
	return rb_main("rec_zombie", tests, 1);
}
