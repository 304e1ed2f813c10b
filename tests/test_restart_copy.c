/*
 * A data-recovery copy interrupted by a whole-cluster restart must end
 * (docs/architecture.md, "Recovery").
 *
 * 4 machines through a private ZooKeeper, 3 replicas, 16 MiB regions:
 *   1. every machine makes RC_OBJS objects of RC_SIZE bytes (6 lines) in
 *      its own regions; every machine's allocator is kept from adopting
 *      promoted regions (FARM_FP_ALLOC_ADOPT_HOLD), so that frees in them
 *      stay deferred for as long as the test needs;
 *   2. machine 3 is killed: its regions are promoted at their first
 *      surviving backup, and the machine the ring puts after them becomes
 *      a new backup that copies them;
 *   3. machine 0 frees every object of machine 3 (one transaction each):
 *      each free's install at the promoted primary is deferred to the
 *      region's adoption (counted: free_deferred, RC_OBJS of them in all,
 *      or the test says why not): done in the object's header at once,
 *      the adopter's scan not begun; with --scan kept whole, the object
 *      left locked and marked (FARM_OBJHDR_FREE_PENDING) until the
 *      adopter frees it, as while it scans the region
 *      (FARM_FP_ALLOC_DEFER_WHOLE forces that path);
 *   4. every log is truncated (TRUNCATE records, then every survivor's
 *      logs hold no record of a transaction), so no record of the frees
 *      is left for the restart to replay;
 *   5. the three survivors are stopped, killed, and restarted on their
 *      directories.
 * Checks after the restart:
 *   - every region any machine holds is back at 3 complete replicas at
 *     the machines its ring names, none filling, within RC_REPL_MS (the
 *     campaign's symptom: a copy reading one torn object again forever);
 *   - every allocated object of every local copy on every machine is
 *     whole: not locked, every line's version equal to the header's
 *     (before the fix, a deferred free kept the object's OLD version in
 *     its header while its lines had the new one; the restart cleared the
 *     lock and left it torn for good);
 *   - no copy (primary or backup) holds a freed object allocated: each
 *     free's slot is free again at its primary, whose allocator rebuilt
 *     the region by scan at the restart (with --scan, after the restart
 *     freed each marked object's header), as at its backups, which
 *     applied the COMMIT-BACKUP's freed header (before the fixes the
 *     primary kept the whole free for the adoption, which never came,
 *     with no mark, and its slot stayed allocated there: a leak, and
 *     copies that disagree).
 *
 * The bugs, each with its switch:
 * --broken: installs left locked keep the old header version
 * (FARM_FP_TX_INSTALL_OLD_HEADER, the code before the fix) and a free
 * is kept whole for the adoption, unmarked (FARM_FP_ALLOC_DEFER_WHOLE,
 * FARM_FP_ALLOC_NO_FREE_MARK: the object left locked and allocated
 * until then, which the torn header needs); both checks must fail (torn
 * objects, and a copy that cannot pass them), and the test passes only
 * when they do.
 * --broken-leak: a free is kept whole for the adoption with no mark
 * (FARM_FP_ALLOC_DEFER_WHOLE and FARM_FP_ALLOC_NO_FREE_MARK: --scan
 * without its fix, and the code before both fixes): the freed objects
 * must be found allocated at their primaries.
 * --scan-kill: --scan, and before the power loss every adopter is let go
 * and parks in its first deferred free at FARM_FP_ALLOC_FREED_MARKED
 * (the header freed, the mark and the lock still on, the slot not yet
 * reusable): the restart must unlock that object and free the others,
 * and no copy may hold one allocated.
 * --broken-order: --scan-kill with the adopter's order before the fix
 * (FARM_FP_ALLOC_MARK_FIRST: the mark cleared, then the header freed):
 * each parked free's object must be found allocated (leaked).
 * --broken-resume: a restart that gave no machine up starts no data
 * recovery (FARM_FP_NODE_RESTART_NO_COPY, the code before the fix): the
 * copy the restart cut off never starts again, and replication must fail.
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 4
#include "rsproc.h"

#include <stdatomic.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/galloc.h"
#include "alloc/objhdr.h"
#include "node/node.h"
#include "txn/object.h"
#include "brokenarg.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define RC_OBJS      6
#define RC_SIZE      300u /* 6 lines: a torn one shows in its lines */
#define RC_VICTIM    3
#define RC_FREER     0
#define RC_SURVIVORS (NP_NM - 1)
#define RC_REPL_MS   20000
#define RC_STEP_MS   60000 /* a step's deadline (a failure, not a wait) */

static char zk_dir[256], zk_connect[64], zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool broken, broken_resume, broken_leak, scan;
/* --scan-kill, --broken-order: --scan with the power cut while each
 * adopter is parked in a deferred free (FARM_FP_ALLOC_FREED_MARKED). */
static bool scan_kill, broken_order;
static struct np_cluster cl;
static farm_fatptr *objs; /* every machine's objects (first incarnation) */

/* 'K' and 'd' answers: frees committed; frees deferred here. */
struct rc_count {
	uint64_t n;
	int err;
};

/* 't' answers: the whole-object scan of every local copy. */
struct rc_scan {
	uint64_t regions, objects, locked, torn;
	int walk_err;
	uint32_t first_region;
	uint64_t first_off, first_version;
	uint16_t first_line;
};

static void rc_configure(struct farm_config *cfg)
{
	/* 32 MB/s a loop: copies take well under a second each. */
	cfg->datarec_bytes = 64u << 10;
	cfg->datarec_interval_us = 2000;
}

/* 'o' answers: this machine's copies of the victim's objects. */
struct rc_slots {
	int held[RC_OBJS], role[RC_OBJS];
	uint64_t incarn[RC_OBJS], version[RC_OBJS];
};

/* ---- children -------------------------------------------------------- */

/* --scan-kill: the adopter parked in its first deferred free until the
 * power loss kills the machine. */
static atomic_int parked;

static void park_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	atomic_store(&parked, 1); /* read by 'p' on the main thread */
	for (;;)
		pause();
}

/* 'A': the adoption let go, parked at the free's crash point: each
 * region of the victim's objects this machine is primary of queued.
 * How many were. */
static uint64_t adopt_parked(struct tx_child *c)
{
	farm_galloc *g = farm_node_galloc(c->np.node);
	if (farm_fault_set(FARM_FP_ALLOC_ADOPT_HOLD, NULL, NULL) ||
	    farm_fault_set(FARM_FP_ALLOC_FREED_MARKED, park_hook, NULL))
		return 0;
	uint64_t n = 0;
	uint32_t done[RC_OBJS];
	for (unsigned i = 0; objs && i < RC_OBJS; i++) {
		uint32_t id =
		        farm_gaddr_region(objs[RC_VICTIM * RC_OBJS + i].addr);
		enum farm_as_role role;
		bool seen = false;
		for (uint64_t k = 0; k < n; k++)
			seen |= done[k] == id;
		if (seen ||
		    !farm_as_local_region(farm_node_as(c->np.node), id,
		                          &role) ||
		    role != FARM_AS_PRIMARY || farm_galloc_adopt(g, id))
			continue;
		done[n++] = id;
	}
	return n;
}

/* This machine's copy of each of the victim's objects, whatever its
 * role: its header's words. */
static void read_slots(struct tx_child *c, struct rc_slots *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; objs && i < RC_OBJS; i++) {
		farm_gaddr a = objs[RC_VICTIM * RC_OBJS + i].addr;
		enum farm_as_role role;
		farm_region *r = farm_as_local_region(
		        farm_node_as(c->np.node), farm_gaddr_region(a), &role);
		uint64_t off = farm_gaddr_offset(a);
		if (!r || off + FARM_OBJHDR_SIZE > farm_region_size(r))
			continue;
		const struct farm_objhdr *h =
		        (const void *)((const uint8_t *)farm_region_base(r) +
		                       off);
		out->held[i] = 1;
		out->role[i] = (int)role;
		out->incarn[i] = farm_objhdr_load_incarn(h);
		out->version[i] = farm_objhdr_load_version(h);
	}
}

/* Free @p in one transaction, retried while retryable. */
static int free_one(struct tx_child *c, farm_fatptr p)
{
	int rc = -EAGAIN;
	uint64_t dl = np_now_ns() + RC_STEP_MS * 1000000ull;
	while (farm_tx_retryable(rc) && np_now_ns() < dl) {
		farm_tx *tx;
		rc = farm_tx_begin(c->txm, c->np.loop, &tx);
		if (rc)
			continue;
		const void *d;
		rc = farm_tx_read_sync(tx, p.addr, p.size, &d);
		if (!rc)
			rc = farm_tx_free_obj(tx, p.addr);
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
	}
	return rc;
}

static void scan_copies(struct tx_child *c, struct rc_scan *s);

/* The test's commands: 'K' (free the victim's objects), 'd' (frees
 * deferred here), 't' (after the restart: scan every local copy), 'o'
 * (after the restart: the copies of the victim's objects here). */
static int rc_cmd(struct tx_child *c, int cmd)
{
	struct rc_count r = {0};
	if (cmd == 'K' && objs) {
		for (unsigned i = 0; i < RC_OBJS && !r.err; i++) {
			r.err = free_one(c, objs[RC_VICTIM * RC_OBJS + i]);
			r.n += !r.err;
		}
		return np_say(&c->np, 'k', &r, sizeof(r)) ? 21 : 0;
	}
	if (cmd == 'd') {
		farm_txm_stats st;
		farm_txm_stats_get(c->txm, &st);
		r.n = st.free_deferred;
		return np_say(&c->np, 'D', &r, sizeof(r)) ? 22 : 0;
	}
	if (cmd == 't') {
		struct rc_scan s;
		scan_copies(c, &s);
		return np_say(&c->np, 'T', &s, sizeof(s)) ? 23 : 0;
	}
	if (cmd == 'A') {
		r.n = adopt_parked(c);
		return np_say(&c->np, 'a', &r, sizeof(r)) ? 25 : 0;
	}
	if (cmd == 'p') {
		r.n = (uint64_t)atomic_load(&parked);
		return np_say(&c->np, 'P', &r, sizeof(r)) ? 26 : 0;
	}
	if (cmd == 'o') {
		struct rc_slots o;
		read_slots(c, &o);
		return np_say(&c->np, 'O', &o, sizeof(o)) ? 24 : 0;
	}
	return RS_UNKNOWN;
}

/* Before the restart: make the objects, then serve the parent. */
static int first_role(struct tx_child *c)
{
	farm_fatptr mine[RC_OBJS];
	objs = share_objs(c, "obj", RC_OBJS, RC_SIZE, rs_fill, NULL, mine);
	if (!objs)
		return 20;
	int st = rs_serve(c);
	free(objs);
	objs = NULL;
	return st;
}

/* After the restart: the objects again (the victim's among them). */
static int restart_role(struct tx_child *c)
{
	unsigned n = 0;
	objs = load_objs(c, "obj", &n);
	int st = !objs || n != NP_NM * RC_OBJS ? 8 : rs_serve(c);
	free(objs);
	objs = NULL;
	return st;
}

static int rc_arm(bool restarted)
{
	if (restarted)
		return broken_resume &&
		       farm_fault_set(FARM_FP_NODE_RESTART_NO_COPY,
		                      tu_switch_on, NULL);
	/* Promoted regions stay unadopted: their frees stay deferred. */
	return farm_fault_set(FARM_FP_ALLOC_ADOPT_HOLD, tu_switch_on, NULL) ||
	       (broken && farm_fault_set(FARM_FP_TX_INSTALL_OLD_HEADER,
	                                 tu_switch_on, NULL)) ||
	       ((broken || broken_leak || scan) &&
	        farm_fault_set(FARM_FP_ALLOC_DEFER_WHOLE, tu_switch_on,
	                       NULL)) ||
	       ((broken || broken_leak) &&
	        farm_fault_set(FARM_FP_ALLOC_NO_FREE_MARK, tu_switch_on,
	                       NULL)) ||
	       (broken_order &&
	        farm_fault_set(FARM_FP_ALLOC_MARK_FIRST, tu_switch_on, NULL));
}

struct walk_ctx {
	struct rc_scan *s;
	uint32_t region;
	uint8_t *base;
};

static void check_obj(void *ctx, struct farm_objhdr *obj, uint32_t slot_lines)
{
	struct walk_ctx *w = ctx;
	struct rc_scan *s = w->s;
	uint64_t v = farm_objhdr_load_version(obj);
	uint64_t inc = farm_objhdr_load_incarn(obj);
	unsigned lines = FARM_MIN(farm_incarn_lines(inc), slot_lines);
	s->objects++;
	if (v & (OBJ_LOCK_MASK | FARM_OBJHDR_FREE_PENDING)) {
		s->locked++;
		return;
	}
	for (unsigned l = 1; l < lines; l++) {
		uint16_t x;
		memcpy(&x, (uint8_t *)obj + 64u * l, 2);
		if (x == obj_v16(v))
			continue;
		if (!s->torn++) {
			s->first_region = w->region;
			s->first_off = (uint64_t)((uint8_t *)obj - w->base);
			s->first_version = v;
			s->first_line = x;
		}
		return;
	}
}

/* Every allocated object of every local copy: whole? */
static void scan_copies(struct tx_child *c, struct rc_scan *s)
{
	farm_as *as = farm_node_as(c->np.node);
	struct farm_as_held hl[RP_MAXREG];
	unsigned n = FARM_MIN(farm_as_held(as, hl, RP_MAXREG), RP_MAXREG);
	memset(s, 0, sizeof(*s));
	for (unsigned i = 0; i < n; i++) {
		farm_region *r = farm_as_local_region(as, hl[i].region, NULL);
		if (!r)
			continue;
		struct walk_ctx w = {.s = s,
		                     .region = hl[i].region,
		                     .base = farm_region_base(r)};
		int rc = farm_alloc_walk_region(w.base, farm_region_size(r),
		                                hl[i].region, check_obj, &w);
		if (rc < 0 && !s->walk_err)
			s->walk_err = rc;
		s->regions++;
	}
}

/* ---- the parent ------------------------------------------------------- */

static struct rc_count ask_count(unsigned i, char cmd, char want)
{
	struct rc_count r;
	np_send(&cl, i, cmd);
	np_expect(&cl, i, want, RC_STEP_MS + 10000);
	np_recv(&cl, i, &r, sizeof(r), 1000);
	return r;
}

/* Every survivor's scan of its copies ('t'): failures into @f; returns
 * the torn objects found. */
static uint64_t scan_survivors(struct fails *f)
{
	uint64_t torn = 0, locked = 0, objects = 0;
	for (unsigned i = 0; i < RC_SURVIVORS; i++) {
		struct rc_scan s;
		np_send(&cl, i, 't');
		np_expect(&cl, i, 'T', 30000);
		np_recv(&cl, i, &s, sizeof(s), 1000);
		objects += s.objects;
		torn += s.torn;
		locked += s.locked;
		if (s.walk_err)
			failed(f, "machine %u: a copy's block table: %s", i,
			       farm_strerror(s.walk_err));
		if (s.torn)
			failed(f,
			       "machine %u: %" PRIu64 " torn objects (first: "
			       "region %#" PRIx32 " offset %#" PRIx64
			       ", header version %#" PRIx64 ", a line's %#x)",
			       i, s.torn, s.first_region, s.first_off,
			       s.first_version, (unsigned)s.first_line);
		if (s.locked)
			failed(f,
			       "machine %u: %" PRIu64 " objects left locked "
			       "(or marked free-pending) after the restart",
			       i, s.locked);
	}
	printf("restart-copy: %" PRIu64 " objects scanned on %d machines: "
	       "%" PRIu64 " torn, %" PRIu64 " locked\n",
	       objects, RC_SURVIVORS, torn, locked);
	return torn;
}

/* How many of the victim's objects their primaries hold marked
 * free-pending ('o' of every survivor). */
static unsigned count_marked(void)
{
	unsigned marked = 0;
	for (unsigned i = 0; i < RC_SURVIVORS; i++) {
		struct rc_slots o;
		np_send(&cl, i, 'o');
		np_expect(&cl, i, 'O', 30000);
		np_recv(&cl, i, &o, sizeof(o), 1000);
		for (unsigned k = 0; k < RC_OBJS; k++)
			marked += o.held[k] && o.role[k] == FARM_AS_PRIMARY &&
			          (o.version[k] & FARM_OBJHDR_FREE_PENDING);
	}
	return marked;
}

/* --scan-kill: 'A' to every survivor, then 'p' until each that queued
 * an adoption is parked (failures into @f). How many are. */
static unsigned park_adopters(struct fails *f)
{
	bool want[RC_SURVIVORS] = {0};
	unsigned nwant = 0, n = 0;
	for (unsigned i = 0; i < RC_SURVIVORS; i++) {
		struct rc_count a = ask_count(i, 'A', 'a');
		want[i] = a.n > 0;
		nwant += want[i];
	}
	uint64_t dl = np_now_ns() + RC_STEP_MS * 1000000ull;
	for (;;) {
		n = 0;
		for (unsigned i = 0; i < RC_SURVIVORS; i++)
			n += want[i] && ask_count(i, 'p', 'P').n;
		if (n == nwant || np_now_ns() > dl)
			break;
		np_pause_ms(20);
	}
	printf("restart-copy: %u of %u adopters parked in a deferred free\n", n,
	       nwant);
	if (!nwant || n != nwant)
		failed(f,
		       "%u of %u adopters parked in a deferred free: the "
		       "test did not set its case up",
		       n, nwant);
	return n;
}

/* Every survivor's copies of the victim's objects ('o'), each freed
 * before the restart: none may hold one allocated (failures into @f).
 * Returns the copies that do. */
static unsigned check_freed(struct fails *f)
{
	unsigned leaked = 0, copies = 0, at_primary = 0;
	for (unsigned i = 0; i < RC_SURVIVORS; i++) {
		struct rc_slots o;
		np_send(&cl, i, 'o');
		np_expect(&cl, i, 'O', 30000);
		np_recv(&cl, i, &o, sizeof(o), 1000);
		for (unsigned k = 0; k < RC_OBJS; k++) {
			if (!o.held[k])
				continue;
			copies++;
			if (!farm_incarn_allocated(o.incarn[k]))
				continue;
			leaked++;
			at_primary += o.role[k] == FARM_AS_PRIMARY;
			failed(f,
			       "machine %u (%s): freed object %u still "
			       "allocated (incarnation %" PRIu64 ")",
			       i,
			       o.role[k] == FARM_AS_PRIMARY ? "primary"
			                                    : "backup",
			       k, farm_incarn_count(o.incarn[k]));
		}
	}
	printf("restart-copy: %u copies of the %d freed objects, %u "
	       "allocated (%u at a primary)\n",
	       copies, RC_OBJS, leaked, at_primary);
	return leaked;
}

/* What steps 2-4b set up: the frees deferred and marked, the adopters
 * parked. */
struct rc_case {
	uint64_t deferred;
	unsigned marked, nparked;
};

/* Until every free is deferred at its promoted primary, or RC_STEP_MS:
 * each is installed there when the COMMIT-PRIMARY is processed, after
 * the commit is reported. */
static uint64_t await_deferred(void)
{
	uint64_t deferred = 0;
	uint64_t dl = np_now_ns() + RC_STEP_MS * 1000000ull;
	for (;;) {
		deferred = 0;
		for (unsigned i = 0; i < RC_SURVIVORS; i++)
			deferred += ask_count(i, 'd', 'D').n;
		if (deferred >= RC_OBJS || np_now_ns() > dl)
			return deferred;
		np_pause_ms(20);
	}
}

/* 2. The victim killed; 3. its objects freed by machine 0; 4. no record
 * of the frees left to replay at the restart; 4b. with --scan-kill,
 * every adopter parked. */
static void set_case_up(struct fails *setup, struct rc_case *rc)
{
	assert_int_equal(kill(cl.pid[RC_VICTIM], SIGKILL), 0);
	np_reap_killed(&cl, RC_VICTIM);
	struct rc_count k = ask_count(RC_FREER, 'K', 'k');
	if (k.err || k.n != RC_OBJS)
		failed(setup, "%" PRIu64 " of %d frees committed (last: %s)",
		       k.n, RC_OBJS, farm_strerror(k.err));
	rc->deferred = await_deferred();
	if (rc->deferred != RC_OBJS)
		failed(setup,
		       "%" PRIu64 " of %d frees deferred at their promoted "
		       "primaries: the test did not set its case up",
		       rc->deferred, RC_OBJS);
	/* With --scan each deferred free marked its object at the primary
	 * (--broken-leak: the switch leaves none), none without. */
	rc->marked = count_marked();
	if (rc->marked != (scan && !broken_leak ? RC_OBJS : 0))
		failed(setup,
		       "%u of %d freed objects marked free-pending at their "
		       "primaries: the test did not set its case up",
		       rc->marked, RC_OBJS);
	uint64_t left = rs_truncate(&cl, (1ull << RC_SURVIVORS) - 1);
	if (left)
		failed(setup,
		       "%" PRIu64 " transaction records left in the logs "
		       "after truncation: the test did not set its case up",
		       left);
	/* --scan-kill: every adopter let go, parked in its first deferred
	 * free (the header freed, the mark and lock still on;
	 * --broken-order: the mark off, the header still allocated). */
	rc->nparked = scan_kill ? park_adopters(setup) : 0;
}

/* 5. A power loss: every survivor stopped first, killed, then all
 * restarted on their directories; then until every region is
 * replicated. Nonzero (and @f told) when they were not in time. */
static int restart_and_await(struct fails *f, const struct rc_case *rc)
{
	uint64_t survivors = (1ull << RC_SURVIVORS) - 1;
	uint64_t t_restart = rs_power_loss(&cl, survivors);
	uint64_t t_up = np_now_ns();
	char why[512];
	unsigned nreg = 0;
	struct held_report *last[NP_NM] = {0};
	int repl = rs_await_replicated(&cl, survivors, RC_REPL_MS, why,
	                               sizeof(why), &nreg, last);
	double repl_ms = (double)(np_now_ns() - t_up) / 1e6;
	printf("restart-copy: %d frees deferred, %u marked; restarted %.0f ms "
	       "after the kill; %u regions %s %.0f ms after\n",
	       (int)rc->deferred, rc->marked, (double)t_restart / 1e6, nreg,
	       repl ? "NOT fully replicated" : "fully replicated", repl_ms);
	for (unsigned i = 0; i < RC_SURVIVORS; i++) {
		for (unsigned j = 0; j < last[i]->ndr; j++) {
			const struct farm_datarec_region *d = &last[i]->dr[j];
			printf("  machine %u copies region %#" PRIx32
			       ": state %d, %" PRIu64 " bytes in %" PRIu64
			       " reads, %" PRIu64 " read again\n",
			       i, d->region, (int)d->state, d->bytes, d->reads,
			       d->retries);
		}
		free(last[i]);
	}
	if (repl)
		failed(f, "not fully replicated %d ms after the restart: %s",
		       RC_REPL_MS, why);
	return repl;
}

/* A broken run's verdict: its checks must have failed as the switch
 * makes them. */
static void judge_broken(const struct fails *f, int repl, uint64_t torn,
                         unsigned leaked, unsigned nparked)
{
	const char *sw = broken_resume  ? "--broken-resume"
	                 : broken_order ? "--broken-order"
	                 : broken_leak  ? "--broken-leak"
	                                : "--broken";
	if (broken_resume) {
		if (!repl)
			fail_msg("--broken-resume: no data recovery after the "
			         "restart, and every region was replicated "
			         "anyway\n%s",
			         f->text);
	} else if (broken_order) {
		if (leaked < nparked)
			fail_msg("--broken-order: %u of the %u parked frees "
			         "found leaked with the mark cleared first\n%s",
			         leaked, nparked, f->text);
	} else if (broken_leak) {
		if (!leaked)
			fail_msg("--broken-leak: no freed object found "
			         "allocated with the frees kept whole\n%s",
			         f->text);
	} else if (!repl || !torn) {
		fail_msg("--broken: the deferred frees' old headers "
		         "went unnoticed (replicated: %s, %" PRIu64
		         " torn objects)\n%s",
		         repl ? "no" : "yes", torn, f->text);
	}
	printf("%s: %u check(s) failed, as they must:\n%s", sw, f->n, f->text);
}

static void test_restart_copy(void **state)
{
	(void)state;
	/* @setup: the case was not set up (fails in either mode); @f: the
	 * checks after the restart. */
	struct fails setup = {0}, f = {0};
	snprintf(zk_root, sizeof(zk_root), "/libfarm/restart-copy-%d",
	         (int)getpid());
	np_start(&cl, "restart-copy", rs_first_machine, NULL);
	p_setup(&cl);
	struct rc_case rc = {0};
	set_case_up(&setup, &rc);
	int repl = restart_and_await(&f, &rc);
	uint64_t torn = scan_survivors(&f);
	unsigned leaked = check_freed(&f);
	for (unsigned i = 0; i < RC_SURVIVORS; i++)
		np_send(&cl, i, 'Q');
	for (unsigned i = 0; i < RC_SURVIVORS; i++) {
		int st = tu_reap(cl.pid[i]);
		cl.pid[i] = 0;
		if (st)
			failed(&setup, "machine %u exited with status %d", i,
			       st);
	}
	np_cleanup(&cl);
	if (setup.n)
		fail_msg("%u step(s) failed:\n%s%s", setup.n, setup.text,
		         f.text);
	if (broken_resume || broken_order || broken_leak || broken)
		judge_broken(&f, repl, torn, leaked, rc.nparked);
	else if (f.n)
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
			broken = true;
		} else if (!strcmp(argv[i], "--broken-resume")) {
			broken_resume = true;
		} else if (!strcmp(argv[i], "--broken-leak")) {
			broken_leak = true;
		} else if (!strcmp(argv[i], "--scan")) {
			scan = true;
		} else if (!strcmp(argv[i], "--scan-kill")) {
			scan = scan_kill = true;
		} else if (!strcmp(argv[i], "--broken-order")) {
			scan = scan_kill = broken_order = true;
		} else {
			printf("usage: %s [--scan | --scan-kill] [--broken | "
			       "--broken-resume | --broken-leak | "
			       "--broken-order]\n",
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
	                          .step_ms = RC_STEP_MS,
	                          .configure = rc_configure,
	                          .arm = rc_arm,
	                          .cmd = rc_cmd,
	                          .first_role = first_role,
	                          .restart_role = restart_role};
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_restart_copy, teardown)};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "restart_copy", tests, 1);
}
