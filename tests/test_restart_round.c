/*
 * A whole-cluster restart during a transaction-recovery round must decide
 * a removed coordinator's transaction as the round did (src/txn/restart.c,
 * src/txn/recover_decide.c).
 *
 * 4 machines through a private ZooKeeper, 3 replicas, one object per
 * machine:
 *   1. machine 0's object O lies in a region whose replicas are 0 (the
 *      primary P), B and C; the fourth machine is X;
 *   2. B refuses every recovery decision and end of recovery
 *      (FARM_FP_REC_DECIDE_LATE, FARM_FP_REC_DONE_LATE): the round is
 *      under way there for as long as the test needs;
 *   3. C writes O and kills itself once every COMMIT-BACKUP is durable,
 *      before any COMMIT-PRIMARY (farm_txn_testing_crash_after_backup):
 *      P holds the LOCK, B and C the COMMIT-BACKUP;
 *   4. the round decides commit (the records' configuration's backups,
 *      less C removed since, all hold it) and P installs O's new value;
 *      B, holding, has not applied it. In the new configuration X is O's
 *      region's new backup, which never had the COMMIT-BACKUP;
 *   5. P, B and X are stopped, killed, and restarted on their
 *      directories.
 * Checks after the restart: every region at 3 complete replicas, and
 * every copy of O holds the committed value, byte for byte.
 *
 * Before the fix the restart decided with its own configuration's ring
 * (B and X): X lacks the COMMIT-BACKUP, so it aborted what the round had
 * committed and P had installed; B never applied it and its copy stayed
 * old. The fix has two halves, each with its switch, and with either
 * off the copies must differ:
 * --broken-unread: the restart reads only the previous members' rings
 * (FARM_FP_RESTART_NO_PENDING), as before the fix: C, removed, is not
 * one, so its records are read nowhere and B's COMMIT-BACKUP is dropped;
 * --broken-unlogged: the round's decisions are not logged, and survivors
 * empty the removed coordinator's log as soon as they applied them
 * (FARM_FP_REC_DECIDE_UNLOGGED), and the restart decides by its own
 * configuration's backups (FARM_FP_RESTART_OWN_RING, as where no member's
 * history has the records' configuration: src/node/restart_hist.c keeps
 * the last HIST_DEPTH): the restart reads C's records but judges them by
 * B and X, and X never had the COMMIT-BACKUP, so it aborts what P
 * installed (with the history, the records' configuration's backups less
 * C decide commit even unlogged);
 * --broken: both.
 * --keep-records: the setup's commits are not truncated first, and the
 * recovery round sends no TRUNCATE (FARM_FP_TXN_KEEP_RECORDS: it would
 * truncate them; the history is for records a round could not truncate,
 * or older than it). Their records (each machine's creation of its
 * object, a single-machine commit: COMMIT-BACKUPs only) stay in the logs
 * of idle coordinators, and the
 * restart must decide them by the backups of the configuration they carry
 * (the members' configuration histories, src/node/restart_hist.c), less C
 * removed since: the surviving old backup holds the COMMIT-BACKUP, so
 * commit. Then every object's copies must be equal too.
 * --round-truncates: the setup's commits are not truncated first either,
 * but the round may: once it is over, none of their records may be left
 * in the survivors' logs (an idle coordinator's finished commits are
 * truncated at every configuration: none is kept for a restart to judge
 * by an old configuration). --broken-round-truncates: the round's
 * truncation off (FARM_FP_TXN_KEEP_RECORDS): some must be left.
 * --broken-own-ring (with --keep-records): the restart decides them by
 * its own configuration's backups (FARM_FP_RESTART_OWN_RING), as before
 * the fix: where C was a backup, its replacement never had the
 * COMMIT-BACKUP, so the creation is aborted while its primary installed
 * it, and the old backup's copy never gets the object's header (O's
 * copies, or another object's, must differ).
 *
 * --free: C frees O instead of writing it (the commit killed at the same
 * point), and P holds the round's decisions too, so P never installs the
 * free: P holds the LOCK, B the COMMIT-BACKUP, at the power loss. The
 * restart commits it and replays its images (P's LOCK first: its image
 * leaves the incarnation word as it was, src/txn/restart.c); after it
 * no copy of O may hold it allocated, and P's and B's must hold it freed
 * in the incarnation after O's, at the committed version: the slot is
 * free again at the primary (its allocator rebuilt by scan from the
 * headers) and its copies agree. --broken-free: the restart leaves a
 * committed free's slot allocated (FARM_FP_RESTART_KEEP_FREED, the code
 * before the fix): O must be found allocated (a leak).
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 4
#include "rsproc.h"

#include "alloc/objhdr.h"
#include "txn/object.h"
#include "brokenarg.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define RR_SIZE      100u /* 2 lines */
#define RR_LINES     2u
#define RR_P         0u /* the primary of O, and the CM */
#define RR_SURVIVORS (NP_NM - 1)
#define RR_REPL_MS   20000
#define RR_STEP_MS   30000 /* a step's deadline (a failure, not a wait) */
#define RR_NEW       0xee  /* the committed value's bytes */

static char zk_dir[256], zk_connect[64], zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool broken_unlogged, broken_unread, broken_own, keep_records;
/* --free (and its proof): C's commit frees O. */
static bool free_mode, broken_free;
/* --round-truncates (and its proof): the setup's records are left to the
 * round to truncate. */
static bool round_trunc, broken_round_trunc;
#define RR_TRUNC_MS 5000 /* a bound on the round's truncation (a failure) */
static struct np_cluster cl;
static farm_fatptr *objs; /* every machine's object */

/* 'V' answers: this machine's copy of an object. */
struct rr_copy {
	int held, role, err;
	uint64_t version;
	uint8_t bytes[RR_LINES * 64];
};

/* ---- children -------------------------------------------------------- */

/* This machine's copy of @p, whatever its role. */
static void read_copy(struct tx_child *c, farm_fatptr p, struct rr_copy *out)
{
	enum farm_as_role role;
	memset(out, 0, sizeof(*out));
	farm_region *r = farm_as_local_region(farm_node_as(c->np.node),
	                                      farm_gaddr_region(p.addr), &role);
	uint64_t off = farm_gaddr_offset(p.addr);
	if (!r || off + sizeof(out->bytes) > farm_region_size(r))
		return;
	const uint8_t *q = (const uint8_t *)farm_region_base(r) + off;
	out->held = 1;
	out->role = (int)role;
	out->version = farm_objhdr_load_version(
	        (const struct farm_objhdr *)(const void *)q);
	memcpy(out->bytes, q, sizeof(out->bytes));
}

/* Write RR_NEW over @p (--free: free it); the commit kills this machine once
 * every COMMIT-BACKUP is durable. Returns only if it did not. */
static int write_and_die(struct tx_child *c, farm_fatptr p)
{
	farm_tx *tx;
	int rc = farm_tx_begin(c->txm, c->np.loop, &tx);
	if (rc)
		return rc;
	const void *d;
	rc = farm_tx_read_sync(tx, p.addr, p.size, &d);
	void *w = NULL;
	if (!rc && free_mode)
		rc = farm_tx_free_obj(tx, p.addr);
	else if (!rc)
		rc = farm_tx_write(tx, p.addr, &w);
	if (!rc) {
		if (w)
			memset(w, RR_NEW, RR_SIZE);
		farm_txn_testing_crash_after_backup(true);
		rc = farm_tx_commit_sync(tx);
	}
	farm_tx_free(tx);
	return rc ? rc : -EALREADY;
}

static void count_not_of(void *ctx, uint32_t coord, int type, uint64_t txid)
{
	(void)txid;
	uint32_t *a = ctx; /* {coordinator left out, count} */
	if (type != FARM_TXN_TESTING_TRUNCATE && type != FARM_TXN_TESTING_PAD &&
	    coord != a[0])
		a[1]++;
}

/* 'j' and a coordinator's id: the transaction records of the other
 * coordinators left in the logs this machine holds, once none is left or
 * RR_TRUNC_MS passed (the loop serves the peers meanwhile: their TRUNCATE
 * records empty these logs). */
static int records_not_of(struct tx_child *c)
{
	static const volatile int never = 0;
	uint32_t a[2] = {(uint32_t)np_wait_cmd(&c->np), 0};
	uint64_t dl = np_now_ns() + RR_TRUNC_MS * 1000000ull;
	for (;;) {
		a[1] = 0;
		(void)farm_txm_testing_records(c->txm, count_not_of, a);
		if (!a[1] || np_now_ns() > dl)
			break;
		(void)farm_loop_wait(c->np.loop, &never, 1000000ull);
	}
	return np_say(&c->np, 'J', &a[1], sizeof(a[1])) ? 28 : 0;
}

/* The test's commands: 'L' (hold every recovery decision and end),
 * and, with an object's index as a second byte ('0' + index), 'W'
 * (write it and die) and 'v' (this machine's copy); 'j' (records_not_of). */
static int rr_cmd(struct tx_child *c, int cmd)
{
	if (cmd == 'L') {
		bool bad = farm_fault_set(FARM_FP_REC_DECIDE_LATE, tu_switch_on,
		                          NULL) ||
		           farm_fault_set(FARM_FP_REC_DONE_LATE, tu_switch_on,
		                          NULL) ||
		           np_say(&c->np, 'l', NULL, 0);
		return bad ? 24 : 0;
	}
	if (cmd == 'j')
		return records_not_of(c);
	if (cmd != 'W' && cmd != 'v')
		return RS_UNKNOWN;
	int k = np_wait_cmd(&c->np) - '0';
	if (!objs || k < 0 || (unsigned)k >= NP_NM)
		return 25;
	if (cmd == 'W') {
		int rc = write_and_die(c, objs[k]);
		return np_say(&c->np, 'w', &rc, sizeof(rc)) ? 26 : 0;
	}
	struct rr_copy x;
	read_copy(c, objs[k], &x);
	return np_say(&c->np, 'V', &x, sizeof(x)) ? 27 : 0;
}

static int first_role(struct tx_child *c)
{
	farm_fatptr mine[1];
	objs = share_objs(c, "obj", 1, RR_SIZE, rs_fill, NULL, mine);
	if (!objs)
		return 20;
	int st = rs_serve(c);
	free(objs);
	objs = NULL;
	return st;
}

static int restart_role(struct tx_child *c)
{
	unsigned n = 0;
	objs = load_objs(c, "obj", &n);
	int st = !objs || n != NP_NM ? 8 : rs_serve(c);
	free(objs);
	objs = NULL;
	return st;
}

static int rr_arm(bool restarted)
{
	(void)restarted; /* both halves of the fix, in both incarnations */
	return (broken_unlogged && (farm_fault_set(FARM_FP_REC_DECIDE_UNLOGGED,
	                                           tu_switch_on, NULL) ||
	                            farm_fault_set(FARM_FP_RESTART_OWN_RING,
	                                           tu_switch_on, NULL))) ||
	       (broken_unread && farm_fault_set(FARM_FP_RESTART_NO_PENDING,
	                                        tu_switch_on, NULL)) ||
	       (broken_own &&
	        farm_fault_set(FARM_FP_RESTART_OWN_RING, tu_switch_on, NULL)) ||
	       ((keep_records || broken_round_trunc) &&
	        farm_fault_set(FARM_FP_TXN_KEEP_RECORDS, tu_switch_on, NULL)) ||
	       (broken_free &&
	        farm_fault_set(FARM_FP_RESTART_KEEP_FREED, tu_switch_on, NULL));
}

/* ---- the parent ------------------------------------------------------- */

/* Machine @i kills itself within RR_STEP_MS (else the test fails, with
 * what its commit returned when it said). */
static void await_death(unsigned i)
{
	uint64_t dl = np_now_ns() + RR_STEP_MS * 1000000ull;
	int st;
	pid_t got;
	while ((got = waitpid(cl.pid[i], &st, WNOHANG)) == 0 &&
	       np_now_ns() < dl)
		np_pause_ms(10);
	if (got != cl.pid[i])
		fail_msg("machine %u did not die at its commit's "
		         "COMMIT-BACKUPs: the test did not set its case up",
		         i);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	cl.pid[i] = 0;
	close(cl.to[i]);
	close(cl.from[i]);
	cl.to[i] = cl.from[i] = -1;
}

static struct rr_copy ask_copy(unsigned i, unsigned k)
{
	struct rr_copy x;
	np_send(&cl, i, 'v');
	np_send(&cl, i, (char)('0' + k));
	np_expect(&cl, i, 'V', 10000);
	np_recv(&cl, i, &x, sizeof(x), 1000);
	return x;
}

/* O's replicas (from its primary's report): the backups into @b. */
static bool o_backups(uint32_t region, uint32_t b[2])
{
	struct held_report *h = rs_ask_held(&cl, RR_P);
	bool ok = false;
	for (unsigned i = 0; i < h->n && !ok; i++)
		if (h->h[i].region == region && h->h[i].nreps >= 3 &&
		    h->h[i].reps[0] == RR_P) {
			b[0] = h->h[i].reps[1];
			b[1] = h->h[i].reps[2];
			ok = true;
		}
	free(h);
	return ok;
}

static bool same_copy(const struct rr_copy *a, const struct rr_copy *b)
{
	return (a->version & ~(uint64_t)OBJ_LOCK_MASK) ==
	               (b->version & ~(uint64_t)OBJ_LOCK_MASK) &&
	       !memcmp(a->bytes + 8, b->bytes + 8, sizeof(a->bytes) - 8);
}

/* Every application byte of O (48 in line 0, the rest after line 1's
 * version) is the committed value's. */
static bool holds_new(const struct rr_copy *x)
{
	for (unsigned i = 16; i < 64; i++)
		if (x->bytes[i] != RR_NEW)
			return false;
	for (unsigned i = 64 + 2; i < 64 + 2 + (RR_SIZE - 48); i++)
		if (x->bytes[i] != RR_NEW)
			return false;
	return true;
}

/* --free: whether the survivors @surv all apply one configuration, in
 * which @c is no replica of @region at the primary: C's removal applied
 * everywhere (the restart needs every manifest to name the same
 * members, src/node/restart.c). */
static bool removal_applied(const unsigned *surv, uint32_t region, unsigned c)
{
	uint64_t cfg = 0;
	bool ok = true;
	for (unsigned i = 0; i < RR_SURVIVORS && ok; i++) {
		struct held_report *h = rs_ask_held(&cl, surv[i]);
		ok = !i || h->config == cfg;
		cfg = h->config;
		for (unsigned k = 0; k < h->n && ok && surv[i] == RR_P; k++)
			for (unsigned r = 0;
			     h->h[k].region == region && r < h->h[k].nreps; r++)
				ok = ok && h->h[k].reps[r] != c;
		free(h);
	}
	return ok;
}

/* O's incarnation word before C's commit. */
static uint64_t o_incarn;

/* Steps 1 to 4: O's backups into *@b and *@c (the one that writes and
 * dies). Fails the test when the case cannot be set up. */
static void set_up(unsigned *b, unsigned *c, unsigned *x, uint64_t *v_new)
{
	char path[512];
	size_t len = 0;
	snprintf(path, sizeof(path), "%s/obj-%u", cl.root, RR_P);
	farm_fatptr *o = np_read_file(path, &len);
	assert_non_null(o);
	assert_int_equal(len, sizeof(*o));
	uint32_t reg = farm_gaddr_region(o->addr);
	free(o);
	uint32_t bk[2] = {0, 0};
	assert_true(o_backups(reg, bk));
	*b = bk[0];
	*c = bk[1];
	*x = 6 - RR_P - *b - *c; /* the fourth of 0..3 */
	printf("restart-round: O in region %#" PRIx32 ": primary %u, backups "
	       "%u (holds decisions) and %u (writes, dies); %u the new "
	       "backup\n",
	       reg, RR_P, *b, *c, *x);
	/* No record of the setup's commits left: only C's is decided at
	 * the restart. (Left, a commit of an idle coordinator whose
	 * region's backups changed since would be too: --keep-records.) */
	uint64_t left = keep_records || round_trunc
	                        ? 0
	                        : rs_truncate(&cl, (1ull << NP_NM) - 1);
	if (left)
		fail_msg("%" PRIu64 " transaction records left in the logs "
		         "after truncation: the test did not set its case up",
		         left);
	struct rr_copy before = ask_copy(RR_P, RR_P);
	assert_true(before.held);
	memcpy(&o_incarn, before.bytes + 8, 8);
	np_send(&cl, *b, 'L');
	np_expect(&cl, *b, 'l', 10000);
	if (free_mode) { /* P never installs the free either */
		np_send(&cl, RR_P, 'L');
		np_expect(&cl, RR_P, 'l', 10000);
	}
	np_send(&cl, *c, 'W');
	np_send(&cl, *c, (char)('0' + RR_P));
	await_death(*c);
	*v_new = (before.version & ~(uint64_t)OBJ_LOCK_MASK) + TX_VSTEP;
	if (free_mode) {
		const unsigned surv[RR_SURVIVORS] = {RR_P, *b, *x};
		uint64_t dl = np_now_ns() + RR_STEP_MS * 1000000ull;
		bool applied;
		while (!(applied = removal_applied(surv, reg, *c)) &&
		       np_now_ns() < dl)
			np_pause_ms(20);
		if (!applied)
			fail_msg("machine %u's removal not applied by every "
			         "survivor within %d ms: the test did not set "
			         "its case up",
			         *c, RR_STEP_MS);
		struct rr_copy at_p = ask_copy(RR_P, RR_P);
		if ((at_p.version & ~(uint64_t)OBJ_LOCK_MASK) == *v_new)
			fail_msg("the free is installed at O's primary before "
			         "the power loss: the test did not set its "
			         "case up");
		return;
	}
	/* The round commits O at P (its LOCK installed). */
	uint64_t dl = np_now_ns() + RR_STEP_MS * 1000000ull;
	struct rr_copy at_p;
	for (;;) {
		at_p = ask_copy(RR_P, RR_P);
		if (at_p.version == *v_new || np_now_ns() > dl)
			break;
		np_pause_ms(20);
	}
	if (at_p.version != *v_new || !holds_new(&at_p))
		fail_msg("the round did not install O at its primary within "
		         "%d ms (version %#" PRIx64 ", want %#" PRIx64
		         "): the test did not set its case up",
		         RR_STEP_MS, at_p.version, *v_new);
	struct rr_copy at_b = ask_copy(*b, RR_P);
	if (!at_b.held || at_b.version == *v_new)
		fail_msg("machine %u's copy of O (held %d, version %#" PRIx64
		         ") is not the backup holding the round's decision: "
		         "the test did not set its case up",
		         *b, at_b.held, at_b.version);
}

/* --keep-records: every object's copies at the survivors are equal (the
 * idle coordinators' creations decided alike everywhere). */
static void check_all_objects(const unsigned *surv, struct fails *f)
{
	for (unsigned k = 0; k < NP_NM; k++) {
		struct rr_copy first = {0};
		unsigned from = NP_NM;
		for (unsigned i = 0; i < RR_SURVIVORS; i++) {
			struct rr_copy y = ask_copy(surv[i], k);
			if (!y.held)
				continue;
			if (from == NP_NM) {
				first = y;
				from = surv[i];
			} else if (!same_copy(&first, &y)) {
				failed(f,
				       "object %u: machine %u's copy differs "
				       "from machine %u's (versions %#" PRIx64
				       ", %#" PRIx64 ")",
				       k, surv[i], from, first.version,
				       y.version);
			}
		}
	}
}

/* --round-truncates: once the round is over, no record of the setup's
 * commits (each machine's creation, by P, B and X; C is dead) is left
 * in the survivors' logs: the round's TRUNCATE records emptied them.
 * With the round's truncation off (--broken-round-truncates) some must
 * be left. */
static void check_round_truncated(unsigned b, unsigned c, unsigned x)
{
	const unsigned surv[RR_SURVIVORS] = {RR_P, b, x};
	uint32_t left = 0;
	for (unsigned i = 0; i < RR_SURVIVORS; i++) {
		uint32_t n = 0;
		np_send(&cl, surv[i], 'j');
		np_send(&cl, surv[i], (char)c);
		np_expect(&cl, surv[i], 'J', RR_TRUNC_MS + 10000);
		np_recv(&cl, surv[i], &n, sizeof(n), 1000);
		left += n;
	}
	printf("restart-round: %" PRIu32 " record(s) of the setup's commits "
	       "left in the survivors' logs after the round%s\n",
	       left, broken_round_trunc ? " (its truncation off)" : "");
	if (broken_round_trunc && !left)
		fail_msg("--broken-round-truncates: no record left with the "
		         "round's truncation off: the test did not set its "
		         "case up");
	if (!broken_round_trunc && left)
		fail_msg("%" PRIu32 " record(s) of idle coordinators' finished "
		         "commits left in the logs %d ms after the round",
		         left, RR_TRUNC_MS);
}

/* --free: after the restart, no survivor's copy of O is allocated; P's
 * and B's hold it freed, in the incarnation after O's, at @v_new (the
 * free's version). Failures into @f. */
static void check_freed(const unsigned *surv, unsigned b, uint64_t v_new,
                        struct fails *f)
{
	uint64_t want = farm_incarn_freed(o_incarn);
	for (unsigned i = 0; i < RR_SURVIVORS; i++) {
		struct rr_copy y = ask_copy(surv[i], RR_P);
		uint64_t w;
		memcpy(&w, y.bytes + 8, 8);
		printf("restart-round: machine %u: %s copy of O, version "
		       "%#" PRIx64 ", %s, incarnation %" PRIu64
		       " (O's: %" PRIu64 ")\n",
		       surv[i], y.held ? "a" : "no", y.version,
		       farm_incarn_allocated(w) ? "allocated" : "free",
		       farm_incarn_count(w), farm_incarn_count(o_incarn));
		if (y.held && farm_incarn_allocated(w))
			failed(f,
			       "machine %u's copy of O: allocated, "
			       "incarnation %" PRIu64 ", after its free "
			       "committed (a leak)",
			       surv[i], farm_incarn_count(w));
		else if ((surv[i] == RR_P || surv[i] == b) &&
		         (!y.held || w != want || y.version != v_new))
			failed(f,
			       "machine %u's copy of O: held %d, version "
			       "%#" PRIx64 ", incarnation word %#" PRIx64
			       "; the free committed version %#" PRIx64
			       ", word %#" PRIx64,
			       surv[i], y.held, y.version, w, v_new, want);
	}
}

static void test_restart_round(void **state)
{
	(void)state;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/restart-round-%d",
	         (int)getpid());
	np_start(&cl, "restart-round", rs_first_machine, NULL);
	p_setup(&cl);
	unsigned b, c, x;
	uint64_t v_new;
	set_up(&b, &c, &x, &v_new);
	if (round_trunc)
		check_round_truncated(b, c, x);

	/* 5. A power loss while B still holds the round's decisions. */
	unsigned surv[RR_SURVIVORS] = {RR_P, b, x};
	uint64_t in = 0;
	for (unsigned i = 0; i < RR_SURVIVORS; i++)
		in |= 1ull << surv[i];
	(void)rs_power_loss(&cl, in);

	struct fails f = {0};
	char why[512];
	unsigned nreg = 0;
	if (rs_await_replicated(&cl, in, RR_REPL_MS, why, sizeof(why), &nreg,
	                        NULL))
		failed(&f, "not fully replicated %d ms after the restart: %s",
		       RR_REPL_MS, why);
	struct rr_copy p = ask_copy(RR_P, RR_P);
	if (free_mode)
		check_freed(surv, b, v_new, &f);
	for (unsigned i = 0; i < RR_SURVIVORS && !free_mode; i++) {
		struct rr_copy y = ask_copy(surv[i], RR_P);
		printf("restart-round: machine %u: %s copy of O, version "
		       "%#" PRIx64 ", %s value\n",
		       surv[i], y.held ? "a" : "no", y.version,
		       holds_new(&y) ? "the committed" : "an older");
		if (!y.held)
			failed(&f, "machine %u holds no copy of O", surv[i]);
		else if (y.version != v_new || !holds_new(&y))
			failed(&f,
			       "machine %u's copy of O: version %#" PRIx64
			       ", %s value; the round committed version "
			       "%#" PRIx64,
			       surv[i], y.version,
			       holds_new(&y) ? "the committed" : "an older",
			       v_new);
		else if (!same_copy(&p, &y))
			failed(&f,
			       "machine %u's copy of O differs from the "
			       "primary's",
			       surv[i]);
	}
	if (keep_records)
		check_all_objects(surv, &f);
	for (unsigned i = 0; i < RR_SURVIVORS; i++)
		np_send(&cl, surv[i], 'Q');
	for (unsigned i = 0; i < RR_SURVIVORS; i++) {
		int st = tu_reap(cl.pid[surv[i]]);
		cl.pid[surv[i]] = 0;
		if (st)
			failed(&f, "machine %u exited with status %d", surv[i],
			       st);
	}
	np_cleanup(&cl);
	if (broken_unlogged || broken_unread || broken_own || broken_free) {
		if (!f.n)
			fail_msg("--broken...: nothing noticed with the fix "
			         "off (the restart decided and freed O as "
			         "the fix does)");
		printf("--broken...: %u check(s) failed, as they must:\n%s",
		       f.n, f.text);
		return;
	}
	if (f.n)
		fail_msg("%u check(s) failed:\n%s", f.n, f.text);
}

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--broken")) {
			broken_unlogged = broken_unread = true;
		} else if (!strcmp(argv[i], "--broken-unlogged")) {
			broken_unlogged = true;
		} else if (!strcmp(argv[i], "--broken-unread")) {
			broken_unread = true;
		} else if (!strcmp(argv[i], "--keep-records")) {
			keep_records = true;
		} else if (!strcmp(argv[i], "--broken-own-ring")) {
			broken_own = keep_records = true;
		} else if (!strcmp(argv[i], "--round-truncates")) {
			round_trunc = true;
		} else if (!strcmp(argv[i], "--broken-round-truncates")) {
			round_trunc = broken_round_trunc = true;
		} else if (!strcmp(argv[i], "--free")) {
			free_mode = true;
		} else if (!strcmp(argv[i], "--broken-free")) {
			free_mode = broken_free = true;
		} else {
			printf("usage: %s [--broken | --broken-unlogged | "
			       "--broken-unread] [--keep-records | "
			       "--broken-own-ring | --round-truncates | "
			       "--broken-round-truncates | --free | "
			       "--broken-free]\n",
			       argv[0]);
			return strcmp(argv[i], "--help") ? 2 : 0;
		}
	}
	if (!farm_fault_built()) {
		printf("skipped: built without fault injection\n");
		return FARM_TEST_SKIP;
	}
	rs_p = (struct rs_params){.zk_connect = zk_connect,
	                          .zk_root = zk_root,
	                          .session_ms = 1500,
	                          .lease_us = 100000u,
	                          .join_ms = 60000,
	                          .step_ms = RR_STEP_MS,
	                          .arm = rr_arm,
	                          .cmd = rr_cmd,
	                          .first_role = first_role,
	                          .restart_role = restart_role};
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_restart_round, teardown)};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "restart_round", tests, 1);
}
