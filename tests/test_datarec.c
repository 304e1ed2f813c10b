/*
 * Data recovery: the bank of recbank.h
 * on 5 machines, 3 replicas, copies paced at DR_BYTES per DR_US per loop
 * (slow: 0.5 MB/s, so that copies outlast the workload, which stops 500 ms
 * after the last configuration).
 *
 *   one_kill   machine 2 is killed mid-run;
 *   copy_kill  machine 2 is killed, then, while a new backup is still
 *              copying a region, machine 3 (a second failure during data
 *              recovery).
 *
 * After the survivors' run (the workload paused, every machine waiting
 * for commands), the checks:
 *   - every region any survivor holds returns to 3 complete replicas:
 *     held by exactly the machines its ring names, none of them still
 *     filling (polled until true, at most DR_WAIT_MS);
 *   - every log is truncated (TRUNCATE records forced), then each region's
 *     bytes outside the allocator's block 0 (the header and block table,
 *     which old backups do not get) hash equal at every replica;
 *   - pacing: no new backup read faster than the configured rate (bytes
 *     over its copy's duration, with the 4 intervals of credit a loop may
 *     hold as slack), and no READ was over that credit (the objects here
 *     are all smaller);
 *   - recbank.h's checks: total, no locks, every committed transfer
 *     present, sercheck over every history.
 *   rejoin     4 replicas; machines 2 and 3 killed in turn (every region
 *              short), then machine 5 joins with an empty directory:
 *              it must hold a complete copy of every region, first as
 *              a late machine filling the short replica lists (never a
 *              primary), then, once every copy is complete, as an
 *              ordinary member (growth: the primary of whichever
 *              regions its placement gives it).
 *   grow       3 replicas, region ids from a fixed seed (DR_SEED) and
 *              copies at FaRM's pace; a machine killed (the 4 survivors
 *              leave no region short); each survivor makes DR_COLD
 *              objects no transfer writes again; then machine 5 joins
 *              with an empty directory during the workload: it becomes
 *              the extra backup of its share (ring.h, growth), and once
 *              its copies are complete an ordinary member, the primary
 *              of at least one region a live machine was primary of
 *              (the handoff), all while the workload runs. At the end
 *              it must be the primary of some region and an extra
 *              backup of none, every region at exactly its ring's 3
 *              complete replicas (the old primary refilled as a backup),
 *              every pair of copies equal.
 *
 *   grow_kill  grow's run, with every old primary's new copy held
 *              (farm_txm_datarec_hold) until the grower is killed, after
 *              the handoff: the ring makes the old primary first again
 *              with a filling copy, and the region's other backup is
 *              complete. The old primary must finish its copy from its
 *              demoted one (copy.c), ask for a round
 *              (farm_membership_bump) and be promoted: every region at
 *              exactly its ring's 3 complete replicas again, every pair
 *              of copies equal, the bank's checks as above.
 *   grow_round grow's run with a victim whose death makes a survivor
 *              (X) the primary of a region (R) by promotion, a region
 *              the grower then takes over (X refills it as a backup from
 *              its demoted copy, held from before the join until X's
 *              round for the handoff is over: unpaced, that refill could
 *              complete before the round, and under the old rules that
 *              round gave it up and X copied R again from the grower
 *              before anything was held, a run that proved nothing).
 *              Once X's copy of R is complete, new copies are held, X
 *              asks for a round
 *              (farm_membership_bump) and the grower is killed after it:
 *              X is first in R's list again and must be promoted with
 *              the copy it holds. (A region stays on the promotion list
 *              after its round; the round asked for used to throw X's
 *              complete copy away as one holding recovered locks, and
 *              the held refill left R with no complete first replica:
 *              the growth campaign's seed 505, cycle 14.)
 *   grow_displace
 *              grow's run with the survivors' copies held from the
 *              configuration without the victim until the grower has
 *              grown: a survivor whose new backup copy the grower
 *              displaces is still filling it at the handoff (the
 *              premise: such a copy seen stopped). It must give that
 *              copy up: every copy any machine holds is at one of its
 *              region's replicas, and every pair of copies equal. (Kept,
 *              it was held for good with the bytes copied until then:
 *              grow failed so whenever the handoff came before that
 *              copy was complete.)
 *
 * --broken: new backups drop the COMMIT-BACKUPs that arrive during the
 * copy (and skip the check pass that would repair it); the replicas'
 * hashes must then differ (copy_kill only). --broken-late: placement
 * ignores which machine joined late (FARM_FP_RING_NO_LATE), so the new
 * machine is placed as primary of regions it has no copy of: rejoin's
 * checks must fail. --broken-grow: a growing machine's copy counts as
 * complete as soon as it is opened (FARM_FP_DATAREC_EXTRA_EARLY), before
 * anything is copied: grow's hashes must differ. --broken-handoff: the
 * old primary keeps its copy as primary after the grower took the region
 * over (FARM_FP_AS_NO_DEMOTE): grow's hashes, total, acknowledged
 * transfers or sercheck must fail. --broken-grow-kill: no demoted copy is
 * a source (FARM_FP_AS_NO_DEMOTED_SOURCE): grow_kill's region must stay
 * short (the growth gap this closes). --broken-grow-round: a region left
 * on the promotion list is handled as before the fix
 * (FARM_FP_REC_STALE_PROMO): grow_round's region must be lost.
 * --broken-displaced: a view keeps a filling copy it no longer places
 * here (FARM_FP_AS_KEEP_FILLING): grow_displace must find a copy held
 * off its replicas. --grow-gap: grow's run with the old primary pausing
 * DR_GAP_MS after the handoff's transaction recovery started, before its
 * data recovery fills the copies growth demoted there
 * (FARM_FP_DATAREC_FILL_DEMOTED), so the view's first commits reach it
 * in that pause; its new copy, held since the view, must
 * get them (every pair of copies equal). With --broken
 * (FARM_FP_AS_DEMOTED_OPEN_LATE: the new copy opened by data recovery,
 * after the pause, as before the fix) their COMMIT-BACKUPs find no copy
 * and the old primary's copy, filled from its demoted one, lacks them:
 * the hashes must differ. --check-repair: copy_kill with new backups dropping
 * the COMMIT-BACKUPs that arrive during a copy's first pass only, the
 * check pass kept: the check, which READs only the chunks whose summary
 * differs from the primary's, must find every object they missed
 * (replicas equal, some objects found newer); with --broken
 * (FARM_FP_DATAREC_DIGEST_EQUAL: every chunk taken as equal, none READ)
 * the replicas' hashes must differ. --stale: rejoin with the late
 * machine given the first victim's region files (its manifest's) as
 * stale sources (farm_txm_datarec_stale_add; what a same-id rejoin keeps,
 * src/recovery/README.md) and cold objects made by the survivors after
 * the kills (no transfer writes them again), copies without a check
 * pass, so the first pass is judged alone: replicas equal, every check
 * above, something taken from a source, and the late machine's bytes
 * READ and taken said; with --broken (FARM_FP_DATAREC_STALE_EQUAL: every
 * chunk taken from the source whatever the summaries say) the cold
 * objects are missed and the replicas' hashes must differ. --grow,
 * --grow-kill, --grow-round,
 * --grow-displace, --rejoin, --one-kill: that run alone. Without an option,
 * copy_kill, rejoin, grow and grow_kill: one_kill's kill with undisturbed
 * copies is copy_kill's first and grow's, and grow_round and grow_displace
 * are grow's run with one thing held (make check-long runs the three).
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 5
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "recbank.h"
#include "replicas.h"

#include "addrspace/addrspace.h"
#include "coord/membership.h"
#include "node/restart_int.h"
#include "txn/txn_testing.h"
#include "brokenarg.h"

#define DR_BYTES   1024u
#define DR_US      2000u
#define DR_WAIT_MS 60000
#define DR_MAXREG  RP_MAXREG
#define DR_COLD    64  /* objects each survivor makes before a growth */
#define DR_GAP_MS  300 /* --grow-gap's pause after transaction recovery */
/* grow's region seed (config region_seed): one whose layout gives the
 * late machine, once grown, a live primary's region (grow_victim). */
#define DR_SEED 6

static bool opt_broken;
/* --stale: the late machine of rejoin takes the first killed machine's
 * region files as stale sources; copies have no check pass. */
static bool dr_stale;
#define DR_STALE_FROM 2 /* rejoin's first victim */
/* --check-repair: COMMIT-BACKUPs dropped in a copy's first pass only. */
static bool dr_check_repair;
/* grow_kill: the grower is killed after the handoff, the old primaries'
 * new copies held until then. */
static bool dr_grow_kill;
/* grow_round: a round asked for while the grower is the primary of a
 * region a survivor was promoted in, then the grower killed; the region
 * and that survivor (grow_victim). */
static bool dr_grow_round;
/* grow_displace: the survivors' copies held until the grower has grown
 * (a displaced copy still filling at the handoff). */
static bool dr_grow_displace;
/* grow_crash: the grower kills itself at this crash point of the handoff
 * (FARM_FP_COUNT: none). */
static enum farm_fault_point dr_grow_crash = FARM_FP_COUNT;
static const char *dr_grow_crash_step;
static uint32_t dr_round_region;
static int dr_round_x = -1;
/* What grow's broken run switched off (rb_verdict's words). */
static const char *dr_grow_broken =
        "a growing machine's copies counted complete before they were "
        "copied";

/* 'g' -> 'G': what a machine holds, and its copies (replicas.h). */

/* 'H' -> 'h': region hashes once the logs are truncated. */
struct hash_report {
	unsigned n;
	unsigned pending; /* COMMIT-BACKUPs left in the logs */
	uint32_t region[DR_MAXREG];
	uint64_t hash[DR_MAXREG];
};

/* Replicas per region (rejoin: 4, so that 3 survivors leave every region
 * short), and the machine that joins late (rejoin; a new id, NP_NM). */
static unsigned dr_reps = 3;
#define DR_LATE_ID NP_NM
static struct np_cluster late_cl; /* slot 0: the late machine */
static bool late_in;              /* it joined and has not quit */

/* The region seed of the grow test's machines (0: the clock). */
static uint32_t dr_seed;

static void dr_config(uint32_t me, struct farm_config *cfg)
{
	(void)me;
	cfg->replicas = dr_reps;
	/* The cluster is formed with NP_NM machines: one joining later with
	 * empty memory is late (placement appends it where short). */
	cfg->expect_machines = NP_NM;
	cfg->datarec_bytes = DR_BYTES;
	cfg->datarec_interval_us = DR_US;
	/* 5 machines and the copies on a shared 2-core host: 50 ms leases
	 * lapsed falsely under load 12 (a survivor removed). Kills are seen
	 * through the fabric's death notice anyway. */
	cfg->lease_us = 200000;
	/* A late machine grows into an ordinary member (rejoin, grow). */
	cfg->grow = true;
	/* rejoin checks the rule without reused ids: a fresh machine under
	 * a gone id is refused (test_campaign --reuse checks reuse). */
	cfg->reuse_ids = false;
	/* grow: region ids from a fixed seed (FARM_DR_SEED overrides it),
	 * so the layout, and with it the premise grow_victim looks for, is
	 * the same every run. */
	if (dr_seed) {
		cfg->region_seed = dr_seed;
		/* FaRM's pace (8 KB per 2 ms): the grower's copies end in
		 * about a second, so it takes its share over while the
		 * workload runs (the handoff under load). */
		cfg->datarec_bytes = 8 * DR_BYTES;
	}
}

static void count_cb(void *ctx, uint32_t coord, int type, uint64_t txid)
{
	(void)coord;
	(void)txid;
	if (type == FARM_TXN_TESTING_COMMIT_BACKUP)
		(*(unsigned *)ctx)++;
}

/* A cold object's bytes: a pattern of its address (grow). */
static void fill_cold(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	(void)arg;
	uint64_t x = p.addr ^ 0x9e3779b97f4a7c15ull;
	for (uint32_t o = 0; o + 8 <= size; o += 8) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		memcpy((uint8_t *)d + o, &x, 8);
	}
}

static int dr_cmd(struct tx_child *c, int cmd, const farm_fatptr *acc,
                  unsigned nacc)
{
	(void)acc;
	(void)nacc;
	farm_as *as = farm_node_as(c->np.node);
	if (cmd == 'g') {
		struct held_report *r = malloc(sizeof(*r));
		if (!r)
			return -1;
		rp_held(c, r);
		int rc = np_say(&c->np, 'G', r, sizeof(*r));
		free(r);
		return rc;
	}
	if (cmd == 'W') {
		/* Cold data: objects no transfer writes again, so a copy
		 * that skipped them (--broken-grow) cannot be mended by
		 * later commits and its bytes differ. Not in the bank's
		 * history (sercheck knows accounts only). */
		for (unsigned done = 0; done < DR_COLD;) {
			farm_tx *tx;
			if (farm_tx_begin(c->txm, c->np.loop, &tx))
				return -1;
			for (unsigned j = 0; j < 16; j++) {
				farm_fatptr p;
				void *d;
				if (farm_tx_alloc_sync(tx, 200, FARM_GADDR_NULL,
				                       &p, &d)) {
					farm_tx_free(tx);
					return -1;
				}
				fill_cold(d, 200, p, NULL);
			}
			int rc = farm_tx_commit_sync(tx);
			farm_tx_free(tx);
			if (!rc)
				done += 16;
			else if (!farm_tx_retryable(rc))
				return -1;
		}
		return np_say(&c->np, 'w', NULL, 0);
	}
	if (cmd == 'B') { /* ask for a recovery round */
		int rc = farm_membership_bump(farm_node_membership(c->np.node),
		                              farm_as_config_id(as));
		return np_say(&c->np, 'b', &rc, sizeof(rc));
	}
	if (cmd == 'O' || cmd == 'o') { /* hold copies, or let them go */
		farm_txm_datarec_hold(c->txm, cmd == 'O');
		return np_say(&c->np, cmd == 'O' ? 'K' : 'k', NULL, 0);
	}
	if (cmd == 'F') {
		(void)farm_txm_testing_truncate(c->txm, c->np.loop);
		return np_say(&c->np, 'f', NULL, 0);
	}
	if (cmd == 'H') {
		/* Every machine sent its TRUNCATE records ('F' first): wait
		 * until this machine's logs hold no COMMIT-BACKUP. */
		struct hash_report r = {0};
		static const volatile int never = 0;
		uint64_t dl = np_now_ns() + 10000000000ull;
		for (;;) {
			r.pending = 0;
			(void)farm_txm_testing_records(c->txm, count_cb,
			                               &r.pending);
			if (!r.pending || np_now_ns() > dl)
				break;
			(void)farm_loop_wait(c->np.loop, &never, 1000000ull);
		}
		struct farm_as_held hl[DR_MAXREG];
		r.n = FARM_MIN(farm_as_held(as, hl, DR_MAXREG), DR_MAXREG);
		for (unsigned i = 0; i < r.n; i++) {
			enum farm_as_role role;
			farm_region *g =
			        farm_as_local_region(as, hl[i].region, &role);
			r.region[i] = hl[i].region;
			uint64_t h = 1469598103934665603ull; /* FNV-1a */
			const uint8_t *p = g ? farm_region_base(g) : NULL;
			uint64_t size = g ? farm_region_size(g) : 0;
			for (uint64_t o = 1u << 20; p && o < size; o++) {
				h ^= p[o];
				h *= 1099511628211ull;
			}
			r.hash[i] = h;
		}
		return np_say(&c->np, 'h', &r, sizeof(r));
	}
	return -1;
}

/* Machine @i's cluster and slot: NP_NM is the late machine. */
static struct np_cluster *cl_of(unsigned i, unsigned *slot)
{
	*slot = i < NP_NM ? i : 0;
	return i < NP_NM ? &rb_cl : &late_cl;
}

/* Is machine @i (NP_NM: the late one) in the cluster now? */
static bool dr_in(const struct rb_result *res, unsigned i)
{
	return i < NP_NM ? rb_member(res, i) : late_in;
}

static void dr_send(unsigned i, char cmd)
{
	unsigned k;
	struct np_cluster *c = cl_of(i, &k);
	np_send(c, k, cmd);
}

static void dr_expect(unsigned i, char b, int ms)
{
	unsigned k;
	struct np_cluster *c = cl_of(i, &k);
	np_expect(c, k, b, ms);
}

static void dr_recv(unsigned i, void *buf, size_t len, int ms)
{
	unsigned k;
	struct np_cluster *c = cl_of(i, &k);
	np_recv(c, k, buf, len, ms);
}

static struct held_report *ask(unsigned i)
{
	struct held_report *r = malloc(sizeof(*r));
	assert_non_null(r);
	dr_send(i, 'g');
	dr_expect(i, 'G', 30000);
	dr_recv(i, r, sizeof(*r), 1000);
	return r;
}

/* grow_crash's hook in the grower: say 'X' and the point, then die (no
 * other thread of it writes to the test then: it is asked nothing until
 * the test has read this). */
static void late_crash(enum farm_fault_point fp, void *arg)
{
	uint32_t p = (uint32_t)fp;
	(void)np_say(arg, 'X', &p, sizeof(p));
	raise(SIGKILL);
}

/* A stale source given back: its mapping goes (@ctx: its length). */
static void stale_unmap(void *ctx, uint32_t region, const void *base)
{
	(void)region;
	munmap((void *)(uintptr_t)base, (size_t)(uintptr_t)ctx);
}

/* --stale: every region file the manifest in @dir lists, mapped
 * read-only as a stale source of its region (what a same-id rejoin
 * keeps of its old copies: src/recovery/README.md). Returns how many,
 * or -1. */
static int stale_load(farm_txm *m, const char *dir)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/" FARM_MANIFEST_FILE, dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) ||
	    (size_t)st.st_size < sizeof(struct man_hdr)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	uint8_t *buf = malloc((size_t)st.st_size);
	ssize_t got = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	const struct man_hdr *h = (const struct man_hdr *)(void *)buf;
	if (got != st.st_size || h->magic != MAN_MAGIC ||
	    sizeof(*h) + (size_t)h->nregions * sizeof(struct man_region) >
	            (size_t)got) {
		free(buf);
		return -1;
	}
	int n = 0;
	for (uint32_t i = 0; i < h->nregions; i++) {
		struct man_region e;
		memcpy(&e, buf + sizeof(*h) + i * sizeof(e), sizeof(e));
		snprintf(path, sizeof(path), "%s/%s", dir, e.file);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		void *p = fd < 0 ? MAP_FAILED
		                 : mmap(NULL, e.size, PROT_READ, MAP_SHARED, fd,
		                        0);
		if (fd >= 0)
			close(fd);
		if (p == MAP_FAILED)
			continue;
		if (farm_txm_datarec_stale_add(m, e.id, p, stale_unmap,
		                               (void *)(uintptr_t)e.size))
			munmap(p, e.size);
		else
			n++;
	}
	free(buf);
	return n;
}

/* The late machine: joins the running cluster with an empty directory,
 * says 'P' once it is a member, then answers dr_cmd's commands until 'Q'.
 * It runs no workload (it can be no primary). */
static int late_machine(struct np_child *np, void *arg)
{
	uint32_t id = *(const uint32_t *)arg;
	struct tx_child c = {.np = *np};
	struct farm_config cfg;
	int st = np_config_zk(np, "16M", rb_zk_connect, rb_zk_root,
	                      RB_SESSION_MS, RB_LEASE_US, &cfg);
	if (st)
		return st;
	cfg.machine_id = id;
	dr_config(id, &cfg);
	c.np.me = id;
	if (farm_node_open(&cfg, &c.np.node))
		return 4;
	farm_node_set_app_loops(c.np.node, true);
	st = 10;
	if (dr_stale && id == DR_LATE_ID &&
	    stale_load(farm_node_txm(c.np.node), rb_cl.dir[DR_STALE_FROM]) <= 0)
		goto out;
	st = 5;
	if (farm_node_start(c.np.node, RB_JOIN_MS) ||
	    farm_node_loop_open(c.np.node, 0, &c.np.loop))
		goto out;
	c.txm = farm_node_txm(c.np.node);
	st = 6;
	/* NP_NM: the cluster's size when it formed, not now (two machines
	 * left): a late machine waits only to be a member. */
	int rc = farm_node_wait_members(c.np.node, NP_NM, RB_JOIN_MS);
	if (rc == -EEXIST) { /* a gone id, fresh: not admitted */
		st = np_say(&c.np, 'X', NULL, 0) ? 8 : 0;
		goto out;
	}
	st = rc ? 6 : 0;
	if (st || np_say(&c.np, 'P', NULL, 0))
		goto out;
	if (dr_grow_crash != FARM_FP_COUNT &&
	    farm_fault_set(dr_grow_crash, late_crash, &c.np)) {
		st = 9;
		goto out;
	}
	for (;;) {
		int cmd = np_wait_cmd(&c.np);
		if (cmd == 'Q' || cmd < 0)
			break;
		if (dr_cmd(&c, cmd, NULL, 0)) {
			st = 7;
			break;
		}
	}
out:
	if (c.np.loop)
		farm_node_loop_close(c.np.node, c.np.loop);
	farm_node_close(c.np.node);
	return st;
}

/* --grow-gap: set (in memory every machine shares, mapped before they
 * are forked) once the old primary's pause is over. */
static _Atomic int *dr_gap_over;

/* --grow-gap: a pause that widens a race window (not a synchronization:
 * the run is correct with any length of it), at the old primary. */
static void gap_pause(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	struct timespec ts = {.tv_sec = DR_GAP_MS / 1000,
	                      .tv_nsec = (DR_GAP_MS % 1000) * 1000000L};
	nanosleep(&ts, NULL);
	atomic_store(dr_gap_over, 1);
}

/* --grow-gap: the workload ends once the pause is over, so that the
 * objects the view's first commits wrote during it are not all written
 * again afterwards (a later image would repair a copy that missed one,
 * and the bytes compared at the end would hide the loss). */
static int gap_step(struct tx_child *c, struct run_report *r)
{
	(void)c;
	(void)r;
	return atomic_load(dr_gap_over);
}

/* Start a machine with id @id and an empty directory under the cluster's
 * root; it says @want: 'P' (a member) or 'X' (not admitted, then it
 * exits). */
static void late_start(uint32_t id, char want)
{
	static uint32_t ids[2];
	uint32_t *arg = &ids[want == 'P'];
	*arg = id;
	memset(&late_cl, 0, sizeof(late_cl));
	for (unsigned i = 0; i < NP_NM; i++)
		late_cl.to[i] = late_cl.from[i] = -1;
	snprintf(late_cl.dir[0], sizeof(late_cl.dir[0]), "%s/late-%u",
	         rb_cl.root, id);
	assert_int_equal(mkdir(late_cl.dir[0], 0700), 0);
	np_other = &rb_cl;
	np_spawn_one(&late_cl, 0, late_machine, arg);
	np_other = NULL;
	np_expect(&late_cl, 0, want, RB_JOIN_MS + 30000);
	if (want == 'P') {
		late_in = true;
		return;
	}
	int st = tu_reap(late_cl.pid[0]);
	late_cl.pid[0] = 0;
	np_cleanup(&late_cl);
	assert_int_equal(st, 0);
}

static int dr_teardown(void **state)
{
	np_cleanup(&late_cl);
	late_in = false;
	return rb_teardown(state);
}

/* Does any survivor copy a region now (bytes read, not done)? */
static bool copying(struct rb_result *res)
{
	bool any = false;
	for (unsigned i = 0; i < NP_NM && !any; i++) {
		if (!rb_member(res, i))
			continue;
		struct held_report *r = ask(i);
		any = rp_copying(r);
		free(r);
	}
	return any;
}

/* Every region any machine holds is complete at exactly its replicas
 * (@r[i] for machine i; NP_NM: the late one, never a primary while it is
 * late). */
static bool grown(const struct held_report *g, bool primary);

/* @grow: the late machine may have grown into an ordinary member. */
static bool replicated(struct held_report **r, struct rb_result *res, char *why,
                       size_t len, unsigned *nregions, bool grow)
{
	uint64_t in = 0;
	for (unsigned i = 0; i <= NP_NM; i++)
		if (dr_in(res, i))
			in |= 1ull << i;
	struct held_report *all[64] = {0};
	memcpy(all, r, (NP_NM + 1) * sizeof(*r));
	uint64_t late = grow && grown(r[NP_NM], false) ? 0 : 1ull << DR_LATE_ID;
	return rp_replicated(all, in, dr_reps, late, why, len, nregions);
}

/*
 * Growth: which machine to kill so that the late machine, once the others
 * form the configuration, is the extra backup of at least one region
 * whose primary lives on (and so holds that primary's cold objects).
 * Region ids are drawn at random, so a fixed victim would leave the
 * premise to chance (the late machine's share is about 3/5 of 5 regions:
 * none about 1 run in 100). The placement is computed here as every
 * machine will (no domains: ring.h over the members, the late one rank
 * 1), from what the machines hold now. Returns -1 when no victim does.
 */
/* Whether the late machine has grown (an ordinary member: no longer late,
 * the extra backup of nothing) and is the primary of at least one region
 * (@primary) or of any number. */
static bool grown(const struct held_report *g, bool primary)
{
	unsigned prim = 0;
	if (!g || g->late)
		return false;
	for (unsigned k = 0; k < g->n; k++) {
		if (g->h[k].extra == DR_LATE_ID)
			return false;
		prim += g->h[k].role == (int)FARM_AS_PRIMARY;
	}
	return prim > 0 || !primary;
}

static int grow_victim(void)
{
	uint32_t reg[DR_MAXREG], prim[DR_MAXREG];
	unsigned nr = 0;
	for (unsigned i = 0; i < NP_NM; i++) {
		struct held_report *h = ask(i);
		for (unsigned k = 0; k < h->n && nr < DR_MAXREG; k++)
			if (h->h[k].role == (int)FARM_AS_PRIMARY) {
				reg[nr] = h->h[k].region;
				prim[nr++] = i;
			}
		free(h);
	}
	printf("grow: regions (primary):");
	for (unsigned k = 0; k < nr; k++)
		printf(" %#" PRIx32 " (%u)", reg[k], prim[k]);
	printf("\n");
	static const unsigned order[] = {2, 3, 4, 1, 0};
	for (unsigned o = 0; o < FARM_ARRAY_SIZE(order); o++) {
		unsigned v = order[o];
		struct farm_ring_machine ms[NP_NM];
		unsigned n = 0;
		for (unsigned i = 0; i < NP_NM; i++)
			if (i != v)
				ms[n++] = (struct farm_ring_machine){.id = i};
		ms[n++] =
		        (struct farm_ring_machine){.id = DR_LATE_ID, .late = 1};
		struct farm_ring_attr a = {.replicas = dr_reps};
		farm_ring *g = NULL;
		assert_int_equal(farm_ring_build_domains(ms, n, &a, &g), 0);
		/* Once grown, an ordinary member (not late): the primary
		 * of some of them, taking over from a live primary. */
		ms[n - 1].late = 0;
		farm_ring *o2 = NULL;
		assert_int_equal(farm_ring_build_domains(ms, n, &a, &o2), 0);
		unsigned hit = 0, lead = 0, promoted = 0;
		for (unsigned k = 0; k < nr; k++) {
			hit += prim[k] != v &&
			       farm_ring_extra(g, reg[k]) == DR_LATE_ID;
			lead += prim[k] != v &&
			        farm_ring_primary(o2, reg[k]) == DR_LATE_ID;
			/* grow_round: v's region, promoted at the next
			 * replica (X), then taken over by the grower. */
			if (prim[k] == v &&
			    farm_ring_primary(o2, reg[k]) == DR_LATE_ID &&
			    !promoted++) {
				dr_round_region = reg[k];
				dr_round_x = (int)farm_ring_primary(g, reg[k]);
			}
		}
		farm_ring_free(g);
		farm_ring_free(o2);
		if (dr_grow_round && promoted) {
			printf("grow_round: killing machine %u makes machine "
			       "%d the primary of region %#" PRIx32
			       " by promotion; once grown, machine %u takes it "
			       "over\n",
			       v, dr_round_x, dr_round_region, DR_LATE_ID);
			return (int)v;
		}
		if (!dr_grow_round && hit && lead) {
			printf("grow: %u regions; killing machine %u makes "
			       "machine %u the extra backup of %u of its "
			       "survivors' regions, and, once grown, the "
			       "primary of %u in place of a live one\n",
			       nr, v, DR_LATE_ID, hit, lead);
			return (int)v;
		}
	}
	return -1;
}

/* --broken-late's victims: a pair of machines (not the manager, 0)
 * whose departure leaves some region the late machine would be the
 * primary of, were it an ordinary member: otherwise, with as many
 * replicas as machines left, the late machine holds every region either
 * way and the broken placement leaves no trace (the proof passed or
 * failed with the regions drawn). 0 and the pair, or -1. */
static int late_victims(unsigned *first, unsigned *second)
{
	uint32_t reg[DR_MAXREG];
	unsigned nr = 0;
	for (unsigned i = 0; i < NP_NM; i++) {
		struct held_report *h = ask(i);
		for (unsigned k = 0; k < h->n && nr < DR_MAXREG; k++)
			if (h->h[k].role == (int)FARM_AS_PRIMARY)
				reg[nr++] = h->h[k].region;
		free(h);
	}
	static const unsigned pairs[][2] = {{2, 3}, {2, 4}, {3, 4},
	                                    {1, 2}, {1, 3}, {1, 4}};
	for (size_t p = 0; p < FARM_ARRAY_SIZE(pairs); p++) {
		struct farm_ring_machine ms[NP_NM];
		unsigned n = 0, lead = 0;
		for (unsigned i = 0; i < NP_NM; i++)
			if (i != pairs[p][0] && i != pairs[p][1])
				ms[n++] = (struct farm_ring_machine){.id = i};
		ms[n++] = (struct farm_ring_machine){.id = DR_LATE_ID};
		struct farm_ring_attr a = {.replicas = dr_reps};
		farm_ring *g = NULL;
		assert_int_equal(farm_ring_build_domains(ms, n, &a, &g), 0);
		for (unsigned k = 0; k < nr; k++)
			lead += farm_ring_primary(g, reg[k]) == DR_LATE_ID;
		farm_ring_free(g);
		if (lead) {
			printf("rejoin --broken-late: killing machines %u and "
			       "%u leaves %u of %u regions whose primary "
			       "machine %u would be, were it not late\n",
			       pairs[p][0], pairs[p][1], lead, nr, DR_LATE_ID);
			*first = pairs[p][0];
			*second = pairs[p][1];
			return 0;
		}
	}
	return -1;
}

/* Machine @i's report once its round for a configuration it took after
 * @t is over, or NULL past @dl. */
static struct held_report *round_after(unsigned i, uint64_t t, uint64_t dl)
{
	for (;;) {
		struct held_report *r = ask(i);
		if (r->rec_t_config_ns > t &&
		    r->rec_t_active_ns > r->rec_t_config_ns)
			return r;
		free(r);
		if (np_now_ns() > dl)
			return NULL;
		np_pause_ms(20);
	}
}

static bool grower_gone(struct rb_result *res, uint64_t t);

/* Kill the late machine (grown); wait up to 30 s for every survivor to
 * run a configuration whose ring no longer names it. Returns whether
 * they all do; *@t: when it was killed. */
static bool grower_killed(struct rb_result *res, uint64_t *t)
{
	/* Before the kill: the survivors learn of the death from its pidfd
	 * and may begin their round before this process, descheduled on a
	 * loaded host, is back from reaping it; a time taken after the reap
	 * then came after the round's own, and round_after waited for a
	 * later round that never came. */
	*t = np_now_ns();
	assert_int_equal(kill(late_cl.pid[0], SIGKILL), 0);
	return grower_gone(res, *t);
}

/* The late machine, killed at @t: reap it; wait up to 30 s for every
 * survivor to run a configuration whose ring no longer names it, as a
 * replica or an extra backup. */
static bool grower_gone(struct rb_result *res, uint64_t t)
{
	assert_int_equal(tu_reap(late_cl.pid[0]), 128 + SIGKILL);
	late_cl.pid[0] = 0;
	late_in = false;
	bool moved = false;
	while (!moved && np_now_ns() < t + 30000000000ull) {
		moved = true;
		for (unsigned i = 0; i < NP_NM && moved; i++) {
			if (!rb_member(res, i))
				continue;
			struct held_report *r = ask(i);
			for (unsigned k = 0; k < r->n; k++) {
				moved &= r->h[k].extra != DR_LATE_ID;
				for (unsigned q = 0; q < r->h[k].nreps; q++)
					moved &= r->h[k].reps[q] != DR_LATE_ID;
			}
			free(r);
		}
		if (!moved)
			np_pause_ms(20);
	}
	return moved;
}

/*
 * grow_displace, after the survivors' run: once machine NP_NM has grown,
 * the survivors' copies go on (held since the victim's configuration, so
 * a copy the handoff displaced was still filling then).
 */
static void grow_displace(struct rb_result *res)
{
	uint64_t t = np_now_ns(), dl = t + 30000000000ull;
	bool ok = false;
	while (!ok && np_now_ns() < dl) {
		struct held_report *g = ask(NP_NM);
		ok = grown(g, true);
		free(g);
		if (!ok)
			np_pause_ms(20);
	}
	if (!ok)
		failed(&res->f,
		       "grow_displace: machine %u did not grow "
		       "within 30 s with the survivors' copies held",
		       DR_LATE_ID);
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(res, i)) {
			dr_send(i, 'o');
			dr_expect(i, 'k', 30000);
		}
	printf("grow_displace: machine %u grown %.0f ms after the "
	       "survivors' run; their copies go on\n",
	       DR_LATE_ID, (double)(np_now_ns() - t) / 1e6);
}

/* Every copy a machine holds is at one of its region's replicas (@r[i]:
 * machine i's report); a copy held elsewhere is one a view no longer
 * placing it there failed to give up. With @displace, the premise too:
 * some survivor's copy was stopped so (a displaced filling copy). */
static void held_at_replicas(struct held_report **r, bool displace,
                             struct fails *f)
{
	unsigned off = 0, stopped = 0;
	for (unsigned i = 0; i <= NP_NM; i++) {
		for (unsigned k = 0; r[i] && k < r[i]->n; k++) {
			const struct rp_held *h = &r[i]->h[k];
			bool at = false;
			for (unsigned x = 0; x < h->nreps; x++)
				at |= h->reps[x] == i;
			if (!at && off++ < 4)
				failed(f,
				       "machine %u holds a %s copy of region "
				       "%#" PRIx32 ", not one of its replicas",
				       i, h->filling ? "filling" : "complete",
				       h->region);
		}
		for (unsigned k = 0; i < NP_NM && r[i] && k < r[i]->ndr; k++)
			stopped += r[i]->dr[k].state == FARM_DATAREC_LOST;
	}
	printf("copies held off their region's replicas: %u; survivors' "
	       "copies stopped: %u\n",
	       off, stopped);
	if (displace && !stopped)
		failed(f, "grow_displace: no survivor's copy was stopped by "
		          "the handoff: the premise did not hold");
}

/* A region machine NP_NM took over from a live primary (its id in
 * @old), whose new copy there is held filling, once it has grown (asked
 * until @dl); 0 if none. */
static uint32_t taken_region(struct rb_result *res, uint64_t dl, int *old)
{
	uint32_t region = 0;
	while (!region && np_now_ns() < dl) {
		struct held_report *g = ask(NP_NM);
		for (unsigned i = 0; grown(g, true) && i < NP_NM && !region;
		     i++) {
			if (!rb_member(res, i))
				continue;
			struct held_report *r = ask(i);
			for (unsigned k = 0; k < r->n && !region; k++)
				if (r->h[k].filling && r->h[k].nreps &&
				    r->h[k].reps[0] == DR_LATE_ID &&
				    r->config == g->config) {
					region = r->h[k].region;
					*old = (int)i;
				}
			free(r);
		}
		free(g);
		if (!region)
			np_pause_ms(20);
	}
	return region;
}

/*
 * grow_kill, after the survivors' run: once machine NP_NM has grown and
 * taken a region over from a live primary, whose new copy of it is held
 * filling, kill it; once every survivor runs a configuration without it
 * (the old primary first in that region's list again, its copy
 * filling), let the copies go. The checks that follow (run_mode) must
 * find every region replicated again.
 */
static void grow_kill(struct rb_result *res)
{
	struct fails *f = &res->f;
	uint64_t dl = np_now_ns() + 30000000000ull;
	int old = -1;
	uint32_t region = taken_region(res, dl, &old);
	if (!region) {
		failed(f,
		       "machine %u never took a region over from a live "
		       "primary whose new copy was held filling",
		       DR_LATE_ID);
		return;
	}
	uint64_t t;
	bool moved = grower_killed(res, &t);
	/* And the old primary's round for that configuration over (its
	 * promotions made), so that only a round asked for later can
	 * promote the copy it finishes. */
	struct held_report *r =
	        moved ? round_after((unsigned)old, t, dl + 60000000000ull)
	              : NULL;
	bool first = false, filling = false, over = r != NULL;
	for (unsigned k = 0; r && k < r->n; k++)
		if (r->h[k].region == region) {
			first = r->h[k].nreps &&
			        r->h[k].reps[0] == (uint32_t)old;
			filling = r->h[k].filling;
		}
	free(r);
	printf("grow_kill: machine %u, primary of region %#" PRIx32
	       " (taken over from machine %d, whose new copy is held), "
	       "killed; %.0f ms later every survivor runs a configuration "
	       "without it and machine %d's round is over: it is %s of "
	       "the region with a %s copy\n",
	       DR_LATE_ID, region, old, (double)(np_now_ns() - t) / 1e6, old,
	       first ? "the primary" : "NOT the primary",
	       filling ? "filling" : "complete");
	if (!moved || !over || !first || !filling)
		failed(f, "the premise did not hold: the old primary is not "
		          "first in the region's list with a filling copy once "
		          "its round is over");
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(res, i)) {
			dr_send(i, 'o');
			dr_expect(i, 'k', 30000);
		}
}

/* @r's entry for @region, or NULL. */
static const struct rp_held *held_of(const struct held_report *r,
                                     uint32_t region)
{
	for (unsigned k = 0; r && k < r->n; k++)
		if (r->h[k].region == region)
			return &r->h[k];
	return NULL;
}

/* Is @h a complete backup copy behind the grower (first in its list)? */
static bool behind_grower(const struct rp_held *h)
{
	return h && !h->filling && h->role == (int)FARM_AS_BACKUP &&
	       h->nreps > 1 && h->reps[0] == DR_LATE_ID;
}

/*
 * grow_round: wait up to 30 s until machine NP_NM has grown and machine
 * @x, its copies held since before the join, runs the same configuration
 * with its round for it over, holding a filling copy of @region behind
 * the grower (the refill from its demoted copy, held). *@cfg: that
 * configuration.
 */
static bool handoff_round_over(unsigned x, uint32_t region, uint64_t *cfg)
{
	uint64_t dl = np_now_ns() + 30000000000ull;
	bool ready = false;
	while (!ready && np_now_ns() < dl) {
		struct held_report *g = ask(NP_NM);
		struct held_report *r = ask(x);
		const struct rp_held *h = held_of(r, region);
		ready = grown(g, true) && r->config == g->config &&
		        r->rec_t_active_ns > r->rec_t_config_ns && h &&
		        h->filling && h->role == (int)FARM_AS_BACKUP &&
		        h->nreps > 1 && h->reps[0] == DR_LATE_ID;
		*cfg = r->config;
		free(g);
		free(r);
		if (!ready)
			np_pause_ms(20);
	}
	return ready;
}

/* grow_round: wait up to 30 s for machine @x's copy of @region, its
 * copies let go, to be complete behind the grower while @x still runs
 * configuration @cfg. NULL once it is, else why not. */
static const char *refilled_late(unsigned x, uint32_t region, uint64_t cfg)
{
	uint64_t dl = np_now_ns() + 30000000000ull;
	for (;;) {
		struct held_report *r = ask(x);
		bool done = behind_grower(held_of(r, region));
		bool same = r->config == cfg;
		free(r);
		if (!same)
			return "before another configuration came (the "
			       "premise: no round met it complete before "
			       "the one asked for)";
		if (done)
			return NULL;
		if (np_now_ns() > dl)
			return "within 30 s of its copies let go";
		np_pause_ms(20);
	}
}

/*
 * grow_round, after the survivors' run: once machine NP_NM has grown and
 * taken over region R, which machine X was promoted in when the victim
 * died, and X's round for that configuration is over with its new copy
 * of R still filling (held), X's copies go; once that copy is complete
 * (from X's demoted one), in the same configuration: new copies held, X
 * asks for a round; once that round is over at X, X's copy must still be
 * complete.
 * Then the grower is killed (X first in R's list again) and, once every
 * survivor runs a configuration without it and X's round for it is over,
 * the copies go. The checks that follow (run_mode) must find every
 * region replicated again: R promoted at X with the copy it kept.
 */
static void grow_round(struct rb_result *res)
{
	struct fails *f = &res->f;
	unsigned x = (unsigned)dr_round_x;
	uint32_t region = dr_round_region;
	uint64_t cfg = 0;
	bool cfg_ok = handoff_round_over(x, region, &cfg);
	if (!cfg_ok) {
		failed(f,
		       "machine %u never held a filling copy of region "
		       "%#" PRIx32 " behind the grown machine %u with its "
		       "round for that configuration over",
		       x, region, DR_LATE_ID);
	}
	dr_send(x, 'o');
	dr_expect(x, 'k', 30000);
	if (!cfg_ok)
		return;
	const char *late = refilled_late(x, region, cfg);
	if (late) {
		failed(f,
		       "machine %u's copy of region %#" PRIx32 " was not "
		       "complete behind the grown machine %u %s",
		       x, region, DR_LATE_ID, late);
		return;
	}
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(res, i)) {
			dr_send(i, 'O');
			dr_expect(i, 'K', 30000);
		}
	uint64_t t = np_now_ns();
	int rc = -1;
	dr_send(x, 'B');
	dr_expect(x, 'b', 30000);
	dr_recv(x, &rc, sizeof(rc), 1000);
	if (rc)
		failed(f, "machine %u could not ask for a round: %s", x,
		       farm_strerror(rc));
	struct held_report *r = round_after(x, t, t + 60000000000ull);
	const struct rp_held *h = held_of(r, region);
	printf("grow_round: machine %u asked for a round; %.0f ms later it "
	       "is over there (configuration %" PRIu64 ", round asked for "
	       "in %" PRIu64 "): its copy of region %#" PRIx32 " is %s\n",
	       x, (double)(np_now_ns() - t) / 1e6, r ? r->config : 0,
	       r ? r->bump : 0, region,
	       !h           ? "gone"
	       : h->filling ? "filling (thrown away)"
	                    : "complete");
	if (!r || !r->bump)
		failed(f, "no round asked for came within 60 s");
	else if (!behind_grower(h))
		failed(f,
		       "machine %u no longer holds a complete copy of region "
		       "%#" PRIx32 " after a round it asked for",
		       x, region);
	free(r);
	bool moved = grower_killed(res, &t);
	r = moved ? round_after(x, t, t + 60000000000ull) : NULL;
	h = held_of(r, region);
	printf("grow_round: machine %u killed; %.0f ms later every survivor "
	       "runs a configuration without it and machine %u's round is "
	       "over: it is %s of region %#" PRIx32 "\n",
	       DR_LATE_ID, (double)(np_now_ns() - t) / 1e6, x,
	       h && h->nreps && h->reps[0] == x ? "first" : "NOT first",
	       region);
	if (!r)
		failed(f, "the survivors did not all run a configuration "
		          "without the grower within 30 s");
	free(r);
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(res, i)) {
			dr_send(i, 'o');
			dr_expect(i, 'k', 30000);
		}
}

/*
 * grow_crash: the grower killed itself at its crash point (dr_grow_crash:
 * while its extra copies fill, once its R/grow mark is written, or once
 * its first round as a member promoted its share). Once every survivor
 * runs a configuration without it, the checks that follow (run_mode)
 * must find every region at its ring's complete replicas again, every
 * pair of copies equal and the bank intact: no step of the handoff may
 * lose a region or a commit.
 */
static void grow_crash(struct rb_result *res)
{
	uint32_t p = UINT32_MAX;
	np_expect(&late_cl, 0, 'X', 60000);
	np_recv(&late_cl, 0, &p, sizeof(p), 1000);
	uint64_t t = np_now_ns();
	bool moved = grower_gone(res, t);
	printf("grow_crash: machine %u killed itself %s (point %" PRIu32
	       "); %.0f ms later every survivor runs a configuration "
	       "without it: %s\n",
	       DR_LATE_ID, dr_grow_crash_step, p,
	       (double)(np_now_ns() - t) / 1e6, moved ? "yes" : "NO");
	if (p != (uint32_t)dr_grow_crash)
		failed(&res->f,
		       "the grower died at point %" PRIu32
		       ", not at its crash point",
		       p);
	if (!moved)
		failed(&res->f, "the survivors did not all run a "
		                "configuration without the grower within 30 s");
}

/* What a run does and has seen, shared by its phases (run_mode). */
struct dr_run {
	struct rb_result res;
	unsigned first;
	int second;
	bool rejoin, grow, killed_during;
	const char *name;
	struct held_report *r[NP_NM + 1]; /* once replicated (dr_wait_full) */
	unsigned nreg;
	uint64_t t_stopped; /* every survivor said 'D' */
};

/* Each survivor told @cmd, then each answering @ack. */
static void dr_all(struct dr_run *x, char cmd, char ack)
{
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(&x->res, i))
			dr_send(i, cmd);
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(&x->res, i))
			dr_expect(i, ack, 30000);
}

/* Each survivor let go past its hold ('O', answered 'K'). */
static void dr_let_go(struct dr_run *x)
{
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(&x->res, i)) {
			dr_send(i, 'O');
			dr_expect(i, 'K', 30000);
		}
}

/* grow: once the first kill is recovered, the late machine joins. */
static void dr_grow_join(struct dr_run *x)
{
	dr_all(x, 'W', 'w');
	if (dr_grow_kill)
		dr_let_go(x);
	/* grow_round: X's refill of R from its demoted copy is unpaced; let
	 * go before X's round for the handoff, it could complete before that
	 * round and be given up there, while copies still ran (grow_round).
	 */
	if (dr_grow_round) {
		dr_send((unsigned)dr_round_x, 'O');
		dr_expect((unsigned)dr_round_x, 'K', 30000);
	}
	uint64_t t = np_now_ns();
	late_start(DR_LATE_ID, 'P');
	printf("%s: machine %u gone, no region short of its %u "
	       "replicas; machine %u joined late %.0f ms after its start\n",
	       x->name, x->first, dr_reps, DR_LATE_ID,
	       (double)(np_now_ns() - t) / 1e6);
}

/* rejoin: the second kill recovered, the first's id refused, then the
 * late machine joins. */
static void dr_rejoin(struct dr_run *x)
{
	rb_reap(&x->res, (unsigned)x->second, true);
	rb_tell(&x->res, (unsigned)x->second, true);
	rb_wait_recovered(&x->res);
	/* The killed machine's id with an empty directory: not admitted
	 * (reuse_ids = 0, dr_config). */
	uint64_t t = np_now_ns();
	late_start(x->first, 'X');
	printf("%s: a machine with id %u (gone) and an empty directory: not "
	       "admitted, told so %.0f ms after its start\n",
	       x->name, x->first, (double)(np_now_ns() - t) / 1e6);
	/* --stale: objects made while the old copies were away, which no
	 * transfer writes again: only READs bring them (a chunk taken stale
	 * wrongly leaves them out for good). */
	if (dr_stale)
		dr_all(x, 'W', 'w');
	t = np_now_ns();
	late_start(DR_LATE_ID, 'P');
	printf("%s: machines %u and %d gone, every region short of its %u "
	       "replicas; machine %u joined late %.0f ms after its start\n",
	       x->name, x->first, x->second, dr_reps, DR_LATE_ID,
	       (double)(np_now_ns() - t) / 1e6);
}

/* The kills and joins of the run, until the survivors' workload ends. */
static void dr_kills(struct dr_run *x)
{
	rb_reap(&x->res, x->first, true);
	rb_tell(&x->res, x->first, true);
	rb_wait_recovered(&x->res);
	if (dr_grow_displace)
		dr_let_go(x);
	if (x->grow) {
		dr_grow_join(x);
	} else if (x->rejoin) {
		dr_rejoin(x);
	} else if (x->second >= 0) {
		/* Kill once some new backup has read part of a region. */
		uint64_t dl = np_now_ns() + 20000000000ull;
		while (!(x->killed_during = copying(&x->res)) &&
		       np_now_ns() < dl)
			np_pause_ms(5);
		rb_reap(&x->res, (unsigned)x->second, true);
		rb_tell(&x->res, (unsigned)x->second, false);
	}
	rb_collect(&x->res);
	x->t_stopped = np_now_ns();
}

/* Whether the run's growth or rejoin is to end with the late machine an
 * ordinary member (the runs that kill or hold it do not). */
static bool dr_expect_grown(const struct dr_run *x)
{
	return (x->grow || x->rejoin) && !dr_grow_kill && !dr_grow_round &&
	       dr_grow_crash == FARM_FP_COUNT;
}

/* Full replication, the workload paused: x->r the last reports. */
static void dr_wait_full(struct dr_run *x)
{
	struct fails *f = &x->res.f;
	char why[256] = "";
	unsigned wait_ms =
	        opt_broken && (x->rejoin || dr_grow_kill || dr_grow_round ||
	                       dr_grow_crash != FARM_FP_COUNT)
	                ? 10000
	                : DR_WAIT_MS;
	uint64_t t0 = np_now_ns(), dl = t0 + wait_ms * 1000000ull;
	bool ok = false;
	for (;;) {
		for (unsigned i = 0; i <= NP_NM; i++) {
			free(x->r[i]);
			x->r[i] = dr_in(&x->res, i) ? ask(i) : NULL;
		}
		ok = replicated(x->r, &x->res, why, sizeof(why), &x->nreg,
		                x->grow || x->rejoin);
		/* A late machine grows into an ordinary member once its
		 * copies are complete: wait for that configuration too. */
		if (ok && dr_expect_grown(x) && !grown(x->r[NP_NM], x->grow)) {
			ok = false;
			snprintf(why, sizeof(why),
			         "machine %u has not grown into an ordinary "
			         "member%s",
			         DR_LATE_ID,
			         x->grow ? ", the primary of its share" : "");
		}
		if (ok || np_now_ns() > dl)
			break;
		np_pause_ms(20);
	}
	printf("%s: %u regions; fully replicated: %s (%.0f ms after the "
	       "survivors' run)%s%s\n",
	       x->name, x->nreg, ok ? "yes" : "NO",
	       (double)(np_now_ns() - t0) / 1e6, ok ? "" : ": ", why);
	if (!ok)
		failed(f, "not fully replicated within %u ms: %s", wait_ms,
		       why);
	if (!dr_grow_kill || !ok)
		return;
	/* The copy was completed after its round (held until then): only a
	 * round asked for can have promoted it. */
	uint64_t bump = 0;
	for (unsigned i = 0; i < NP_NM; i++)
		if (x->r[i] && x->r[i]->bump > bump)
			bump = x->r[i]->bump;
	printf("%s: the survivors' configuration names a round asked for in "
	       "configuration %" PRIu64 "\n",
	       x->name, bump);
	if (!bump)
		failed(f, "replicated again without a round asked for "
		          "(farm_view.bump): the premise did not hold");
}

/* Counts over the new backups' copies (dr_copies). */
struct dr_copied {
	unsigned copies, late, at_late;
	uint64_t fixed;
};

/* Machine @i's copies: printed, paced, counted into @k. */
static void dr_copies_of(struct dr_run *x, unsigned i, struct dr_copied *k)
{
	const struct held_report *h = x->r[i];
	struct fails *f = &x->res.f;
	double limit = (double)h->pace_bytes * h->threads / (h->pace_us * 1e-6);
	for (unsigned j = 0; j < h->ndr; j++) {
		const struct farm_datarec_region *d = &h->dr[j];
		double s =
		        d->t_done_ns
		                ? (double)(d->t_done_ns - d->t_start_ns) / 1e9
		                : 0;
		/* A loop may hold 4 intervals of credit (copy.c DR_BURST):
		 * so much slack. */
		double rate = d->bytes / (s + 4 * h->pace_us * 1e-6);
		printf("machine %u: region %#" PRIx32 " %s: %" PRIu64
		       " bytes in %" PRIu64 " reads, %.1f ms, %.2f MB/s "
		       "(limit %.2f), %" PRIu64 " newer at the check, "
		       "%" PRIu64 " chunks equal by %" PRIu64
		       " bytes of summaries, %" PRIu64 " reads again (last "
		       "error %s), %" PRIu64 " runs inferred\n",
		       i, d->region,
		       d->state == FARM_DATAREC_DONE   ? "done"
		       : d->state == FARM_DATAREC_LOST ? "stopped"
		                                       : "copying",
		       d->bytes, d->reads, s * 1e3, rate / 1e6, limit / 1e6,
		       d->fixed, d->equal, d->summary, d->retries,
		       farm_strerror(d->last_err), d->inferred);
		k->fixed += d->fixed;
		if (d->state != FARM_DATAREC_DONE)
			continue;
		k->copies++;
		k->late += d->t_done_ns > x->t_stopped;
		k->at_late += i == DR_LATE_ID;
		if (rate > limit)
			failed(f,
			       "machine %u copied region %#" PRIx32
			       " at %.2f MB/s, over the pace of %.2f MB/s",
			       i, d->region, rate / 1e6, limit / 1e6);
		if (d->reads &&
		    d->bytes > (uint64_t)d->reads * 4 * h->pace_bytes)
			failed(f,
			       "machine %u read region %#" PRIx32
			       " in READs over 4 x %" PRIu32 " bytes",
			       i, d->region, h->pace_bytes);
	}
}

/* --stale: what the stale sources saved, bytes READ against bytes taken
 * from them at the late machine. */
static void dr_stale_saved(struct dr_run *x)
{
	const struct held_report *h = x->r[NP_NM];
	uint64_t rd = 0, tk = 0;
	for (unsigned k = 0; k < h->ndr; k++) {
		rd += h->dr[k].bytes;
		tk += h->dr[k].stale;
	}
	printf("%s: the late machine READ %" PRIu64 " bytes and took %" PRIu64
	       " from machine %u's old copies\n",
	       x->name, rd, tk, DR_STALE_FROM);
	if (!tk)
		failed(&x->res.f, "nothing was taken from a stale source");
}

/* grow: what the late machine holds once grown: its share as an ordinary
 * member (replicated(): held by exactly the ring's replicas, complete),
 * the primary of some of it. */
static void dr_grown_share(struct dr_run *x, unsigned at_late)
{
	const struct held_report *h = x->r[NP_NM];
	unsigned prim = 0, back = 0;
	for (unsigned k = 0; k < h->n; k++) {
		if (h->h[k].role == (int)FARM_AS_PRIMARY)
			prim++;
		else
			back++;
	}
	printf("%s: the grown machine is the primary of %u and a backup of "
	       "%u of %u regions; it copied %u\n",
	       x->name, prim, back, x->nreg, at_late);
	if (!grown(h, true))
		failed(&x->res.f,
		       "the growing machine did not become the primary of its "
		       "share (primary of %u of %u regions)",
		       prim, x->nreg);
}

/* Pacing, and what each new backup did. */
static void dr_copies(struct dr_run *x)
{
	struct fails *f = &x->res.f;
	struct dr_copied k = {0};
	for (unsigned i = 0; i <= NP_NM; i++)
		if (x->r[i])
			dr_copies_of(x, i, &k);
	if (!k.copies)
		failed(f, "no region was copied to a new backup");
	/* What the dropped records missed, found by the check: the premise
	 * of --check-repair (its broken run finds nothing). */
	if (dr_check_repair && !opt_broken && !k.fixed)
		failed(f, "the check pass found no object newer at the "
		          "primary: no commit was dropped in a first pass");
	if (dr_stale && x->r[NP_NM])
		dr_stale_saved(x);
	if (x->rejoin && k.at_late != x->nreg)
		failed(f,
		       "the late machine completed %u copies, the cluster "
		       "holds %u regions",
		       k.at_late, x->nreg);
	if (x->grow && x->r[NP_NM])
		dr_grown_share(x, k.at_late);
	/* Commits during a copy that ends after the workload are never
	 * rewritten later: what --broken relies on to be seen. */
	printf("%s: %u of %u copies completed after the workload stopped\n",
	       x->name, k.late, k.copies);
}

/* The regions machines @i and @j (their reports @a, @b) both hold:
 * counted into *@compared; those whose bytes differ (the first few
 * failed into @f, @so_far before) returned. */
static unsigned hash_pairs(const struct hash_report *a,
                           const struct hash_report *b, unsigned i, unsigned j,
                           unsigned *compared, unsigned so_far, struct fails *f)
{
	unsigned differ = 0;
	for (unsigned k = 0; k < a->n; k++)
		for (unsigned q = 0; q < b->n; q++) {
			if (b->region[q] != a->region[k])
				continue;
			(*compared)++;
			if (b->hash[q] == a->hash[k])
				continue;
			if (so_far + differ++ < 4)
				failed(f,
				       "region %#" PRIx32 ": bytes differ "
				       "between machines %u and %u",
				       a->region[k], i, j);
		}
	return differ;
}

/* Equal bytes at every replica, once every log is truncated. */
static void dr_equal_bytes(struct dr_run *x)
{
	struct fails *f = &x->res.f;
	struct hash_report hr[NP_NM + 1];
	for (unsigned i = 0; i <= NP_NM; i++)
		if (dr_in(&x->res, i))
			dr_send(i, 'F');
	for (unsigned i = 0; i <= NP_NM; i++)
		if (dr_in(&x->res, i))
			dr_expect(i, 'f', 30000);
	for (unsigned i = 0; i <= NP_NM; i++)
		if (dr_in(&x->res, i))
			dr_send(i, 'H');
	for (unsigned i = 0; i <= NP_NM; i++)
		if (dr_in(&x->res, i)) {
			dr_expect(i, 'h', 60000);
			dr_recv(i, &hr[i], sizeof(hr[i]), 5000);
			if (hr[i].pending)
				failed(f,
				       "machine %u: %u COMMIT-BACKUPs not "
				       "truncated after 10 s",
				       i, hr[i].pending);
		}
	unsigned differ = 0, compared = 0;
	for (unsigned i = 0; i <= NP_NM; i++)
		for (unsigned j = i + 1; dr_in(&x->res, i) && j <= NP_NM; j++)
			if (dr_in(&x->res, j))
				differ += hash_pairs(&hr[i], &hr[j], i, j,
				                     &compared, differ, f);
	printf("%s: %u replica pairs compared, %u differ\n", x->name, compared,
	       differ);
}

/* What the run's --broken build breaks (rb_verdict). */
static const char *dr_broken_what(const struct dr_run *x)
{
	if (x->grow)
		return dr_grow_broken;
	if (x->rejoin && dr_stale)
		return "the first pass took every chunk of the stale sources "
		       "whatever their summaries said";
	if (x->rejoin)
		return "placement ignored which machine joined late";
	if (dr_check_repair)
		return "the check pass took every chunk as equal";
	return "new backups dropped the commits that came during the copy";
}

/* @first killed; then @second (-1: none) while a copy is under way, or,
 * with @rejoin, right after the first's recovery, and then a machine
 * joins late (a new id, empty memory) while the workload goes on. With
 * @grow (and no @second), a machine joins late once the first kill is
 * recovered, when no region is short: it grows into its share as an
 * extra backup. */
static void run_mode(unsigned first, int second, bool rejoin, bool grow,
                     const char *name)
{
	static struct dr_run x;
	x = (struct dr_run){.first = first,
	                    .second = second,
	                    .rejoin = rejoin,
	                    .grow = grow,
	                    .name = name};
	rb_start(&x.res, name);
	if (grow) {
		int v = grow_victim();
		if (v < 0) {
			failed(&x.res.f,
			       "no machine's departure makes machine %u grow "
			       "into a surviving primary's region (the "
			       "regions drawn this run)",
			       DR_LATE_ID);
			v = 2;
		}
		x.first = (unsigned)v;
	}
	if (rejoin && opt_broken && !dr_stale) {
		unsigned a, b;
		if (late_victims(&a, &b))
			failed(&x.res.f,
			       "no pair of machines leaves a region the late "
			       "machine would lead (the regions drawn this "
			       "run): the proof cannot show");
		else
			x.first = a, x.second = (int)b;
	}
	dr_kills(&x);
	struct fails *f = &x.res.f;
	if (second >= 0 && !rejoin && !x.killed_during)
		failed(f, "no copy was seen in progress: the second kill did "
		          "not come during data recovery");
	if (dr_grow_kill)
		grow_kill(&x.res);
	if (dr_grow_round)
		grow_round(&x.res);
	if (dr_grow_displace)
		grow_displace(&x.res);
	if (dr_grow_crash != FARM_FP_COUNT)
		grow_crash(&x.res);
	dr_wait_full(&x);
	if (grow)
		held_at_replicas(x.r, dr_grow_displace, f);
	dr_copies(&x);
	dr_equal_bytes(&x);
	for (unsigned i = 0; i <= NP_NM; i++)
		free(x.r[i]);
	if (late_in) { /* before the cluster's files go */
		dr_send(NP_NM, 'Q');
		int st = tu_reap(late_cl.pid[0]);
		late_cl.pid[0] = 0;
		late_in = false;
		if (st)
			failed(f, "the late machine exited with %d", st);
	}
	rb_check(&x.res);
	rb_verdict(&x.res, opt_broken, dr_broken_what(&x));
}

static void run(unsigned first, int second, bool rejoin, const char *name)
{
	run_mode(first, second, rejoin, false, name);
}

static void test_one_kill(void **state)
{
	(void)state;
	run(2, -1, false, "one_kill");
}

static void test_copy_kill(void **state)
{
	(void)state;
	/* The survivors keep running until the second kill (the copy is
	 * seen in progress first), then 500 ms. */
	rb_p.first_post_ms = 30000;
	run(2, 3, false, "copy_kill");
	rb_p.first_post_ms = 0;
}

/*
 * Rejoin and growth: 4 replicas; machines 2 and 3 are
 * killed, one after the other, so the 3 survivors leave every region
 * short; then a machine with a new id and an empty directory joins the
 * running cluster. It must become a backup of every region (never a
 * primary), its copies complete and equal to the others', the bank
 * intact.
 */
static void test_rejoin(void **state)
{
	(void)state;
	dr_reps = 4;
	rb_p.first_post_ms = 30000;
	rb_p.post_ms = 3000; /* the join comes during the workload */
	run(DR_STALE_FROM, 3, true,
	    dr_stale     ? (opt_broken ? "rejoin --stale --broken"
	                               : "rejoin --stale")
	    : opt_broken ? "rejoin --broken-late"
	                 : "rejoin");
	rb_p.first_post_ms = 0;
	rb_p.post_ms = 500;
	dr_reps = 3;
}

/*
 * Growth (its first step): 3 replicas; a machine is
 * killed (grow_victim: machine 2 unless its departure would leave the
 * late machine no surviving primary's region to grow into), and the 4
 * survivors leave no region short; then a machine with
 * a new id and an empty directory joins during the workload. It must
 * become the extra backup of its share and, its copies complete, an
 * ordinary member: the primary of part of it in place of live primaries,
 * every copy equal to the others', the bank intact.
 */
static void test_grow(void **state)
{
	(void)state;
	/* The survivors run 6 s after the configuration without machine
	 * 2: the join (about 1 s) and part of the copies come during the
	 * workload. */
	rb_p.first_post_ms = 6000;
	const char *seed = getenv("FARM_DR_SEED");
	dr_seed = seed && *seed ? (uint32_t)strtoul(seed, NULL, 10) : DR_SEED;
	printf("grow: region seed %" PRIu32 "\n", dr_seed);
	run_mode(2, -1, false, true,
	         dr_grow_kill
	                 ? (opt_broken ? "grow_kill (broken)" : "grow_kill")
	         : dr_grow_round
	                 ? (opt_broken ? "grow_round (broken)" : "grow_round")
	         : dr_grow_displace ? (opt_broken ? "grow_displace (broken)"
	                                          : "grow_displace")
	         : dr_grow_crash != FARM_FP_COUNT ? "grow_crash"
	         : opt_broken                     ? "grow (broken)"
	                                          : "grow");
	rb_p.first_post_ms = 0;
	dr_seed = 0;
}

/*
 * The growth gap (src/recovery/README.md): grow's run, then the grower
 * dies while the old primary's new copy is still filling (held so). The
 * old primary finishes it from its demoted copy and is promoted.
 */
static void test_grow_kill(void **state)
{
	dr_grow_kill = true;
	test_grow(state);
	dr_grow_kill = false;
}

/*
 * A region the grower took over from a survivor promoted in it keeps
 * that survivor's refilled copy through a later round: the second
 * variant of the growth gap (the campaign's seed 505, cycle 14).
 */
static void test_grow_round(void **state)
{
	dr_grow_round = true;
	test_grow(state);
	dr_grow_round = false;
	dr_round_x = -1;
	dr_round_region = 0;
}

/*
 * A survivor's new backup copy that the handoff displaces while it is
 * still filling is given up (grow failed whenever the handoff came
 * before that copy was complete).
 */
static void test_grow_displace(void **state)
{
	dr_grow_displace = true;
	test_grow(state);
	dr_grow_displace = false;
}

/*
 * The grower dies at a step of the handoff by its own crash point
 * (--grow-crash STEP): no region lost, every commit present.
 */
static void test_grow_crash(void **state)
{
	test_grow(state);
}

/* --grow-crash's steps. */
static const struct {
	const char *name, *says;
	enum farm_fault_point fp;
} dr_steps[] = {
        {"filling", "while its extra copies filled", FARM_FP_DATAREC_STEP},
        {"marked", "once its R/grow mark was written", FARM_FP_ZK_MARK_WRITTEN},
        {"promoted", "in its first round as a member, its share promoted",
         FARM_FP_REC_PROMOTED},
};

/* @step's crash point into dr_grow_crash: 0, or -1 (no such step). */
static int grow_crash_step(const char *step)
{
	for (unsigned k = 0; step && k < FARM_ARRAY_SIZE(dr_steps); k++)
		if (!strcmp(step, dr_steps[k].name)) {
			dr_grow_crash = dr_steps[k].fp;
			dr_grow_crash_step = dr_steps[k].says;
			return 0;
		}
	return -1;
}

/* The proofs that hook one fault point (with tu_switch_on) and run one case:
 * a test-only switch the case's checks must notice. */
struct dr_proof {
	const char *arg;
	enum farm_fault_point fp;
	unsigned test;    /* index in main's tests[] */
	const char *what; /* what the switch breaks (dr_grow_broken) */
};

static const struct dr_proof dr_proofs[] = {
        /* placement ignores which machine joined late: rejoin */
        {"--broken-late", FARM_FP_RING_NO_LATE, 2, NULL},
        /* a growing machine's copy counts as complete before it is
         * copied: grow */
        {"--broken-grow", FARM_FP_DATAREC_EXTRA_EARLY, 3, NULL},
        /* a view that makes the grower primary does not demote the old
         * primary's copy (two primaries): grow */
        {"--broken-handoff", FARM_FP_AS_NO_DEMOTE, 3,
         "the old primary kept its copy as primary once the grower took "
         "the region over"},
        /* no demoted copy is a source for data recovery: grow_kill's
         * region must stay short */
        {"--broken-grow-kill", FARM_FP_AS_NO_DEMOTED_SOURCE, 4,
         "no demoted copy was a source for data recovery (the old "
         "primary could not finish its copy once the grower died)"},
        /* a region left on the promotion list is handled as before the
         * fix: grow_round's region must be lost */
        {"--broken-grow-round", FARM_FP_REC_STALE_PROMO, 5,
         "a region left on the promotion list took recovered locks as a "
         "plain backup and its complete copy was thrown away"},
        /* a view keeps a filling copy it no longer places here:
         * grow_displace */
        {"--broken-displaced", FARM_FP_AS_KEEP_FILLING, 6,
         "a view kept a filling copy it no longer placed here"},
};

/* The cases run alone by name. */
static const struct {
	const char *arg;
	unsigned test;
} dr_alone[] = {
        {"--grow-displace", 6}, {"--grow-round", 5}, {"--grow-kill", 4},
        {"--grow", 3},          {"--rejoin", 2},     {"--one-kill", 1},
};

static int dr_skip(const char *arg)
{
	printf("skipped: %s needs fault injection (FARM_FAULT_INJECTION=OFF)\n",
	       arg);
	return FARM_TEST_SKIP;
}

/* --grow-gap [--broken]: the old primary pauses before data recovery
 * opens or fills the copy growth demoted there; grow alone. */
static int dr_arg_grow_gap(int argc, char **argv, int *pick)
{
	dr_gap_over = mmap(NULL, sizeof(*dr_gap_over), PROT_READ | PROT_WRITE,
	                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (dr_gap_over == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	rb_p.step = gap_step;
	if (farm_fault_set(FARM_FP_DATAREC_FILL_DEMOTED, gap_pause, NULL))
		return dr_skip(argv[1]);
	if (argc > 2 && !strcmp(argv[2], "--broken")) {
		/* A test-only switch: the old primary's new copy opened by
		 * data recovery, after the pause. */
		(void)farm_fault_set(FARM_FP_AS_DEMOTED_OPEN_LATE, tu_switch_on,
		                     NULL);
		opt_broken = true;
		dr_grow_broken = "the old primary's new copy was opened after "
		                 "the view's first commits (their "
		                 "COMMIT-BACKUPs not applied there)";
	}
	*pick = 3;
	return 0;
}

/* --grow-crash STEP [--broken]: grow_crash alone. */
static int dr_arg_grow_crash(int argc, char **argv, int *pick)
{
	if (!farm_fault_built())
		return dr_skip(argv[1]);
	if (grow_crash_step(argc > 2 ? argv[2] : NULL)) {
		fprintf(stderr,
		        "%s: --grow-crash takes filling, marked or promoted\n",
		        argv[0]);
		return 2;
	}
	if (argc > 3 && !strcmp(argv[3], "--broken")) {
		/* A test-only switch: no demoted copy is a source
		 * (grow_kill's proof); a grower that dies once the handoff
		 * began must leave a region short. */
		(void)farm_fault_set(FARM_FP_AS_NO_DEMOTED_SOURCE, tu_switch_on,
		                     NULL);
		opt_broken = true;
		dr_grow_broken = "no demoted copy was a source for data "
		                 "recovery";
	}
	*pick = 7;
	return 0;
}

/* --stale, --check-repair (each [--broken]) and --broken: the first
 * pass judged alone (rejoin), the check pass repairing (copy_kill), or
 * COMMIT-BACKUPs not applied during copies (copy_kill). -1: not one of
 * them. */
static int dr_arg_copy_modes(int argc, char **argv, int *pick)
{
	const char *a = argv[1];
	bool broken = argc > 2 && !strcmp(argv[2], "--broken");
	if (strcmp(a, "--stale") && strcmp(a, "--check-repair") &&
	    strcmp(a, "--broken"))
		return -1;
	if (!farm_fault_built())
		return dr_skip(a);
	*pick = 0; /* copy_kill */
	if (!strcmp(a, "--broken")) {
		opt_broken = true;
		farm_txn_testing_datarec_skip_apply(true);
	} else if (!strcmp(a, "--stale")) {
		/* The first pass judged alone: a check would repair what a
		 * wrongly taken chunk left stale. */
		dr_stale = true;
		farm_txn_testing_datarec_no_check(true);
		if (broken)
			(void)farm_fault_set(FARM_FP_DATAREC_STALE_EQUAL,
			                     tu_switch_on, NULL);
		*pick = 2; /* rejoin */
	} else {
		dr_check_repair = true;
		farm_txn_testing_datarec_skip_first(true);
		if (broken)
			(void)farm_fault_set(FARM_FP_DATAREC_DIGEST_EQUAL,
			                     tu_switch_on, NULL);
	}
	opt_broken |= broken;
	return 0;
}

/* The command line: the case to run alone (*@pick), or -1: the default
 * set. 0, or main's exit status. */
static int dr_args(int argc, char **argv, int *pick)
{
	*pick = -1;
	if (argc < 2)
		return 0;
	const char *a = argv[1];
	for (size_t i = 0; i < sizeof(dr_proofs) / sizeof(dr_proofs[0]); i++)
		if (!strcmp(a, dr_proofs[i].arg)) {
			if (farm_fault_set(dr_proofs[i].fp, tu_switch_on, NULL))
				return dr_skip(a);
			opt_broken = true;
			if (dr_proofs[i].what)
				dr_grow_broken = dr_proofs[i].what;
			*pick = (int)dr_proofs[i].test;
			return 0;
		}
	for (size_t i = 0; i < sizeof(dr_alone) / sizeof(dr_alone[0]); i++)
		if (!strcmp(a, dr_alone[i].arg)) {
			*pick = (int)dr_alone[i].test;
			return 0;
		}
	if (!strcmp(a, "--grow-gap"))
		return dr_arg_grow_gap(argc, argv, pick);
	if (!strcmp(a, "--grow-crash"))
		return dr_arg_grow_crash(argc, argv, pick);
	int rc = dr_arg_copy_modes(argc, argv, pick);
	if (rc >= 0)
		return rc;
	fprintf(stderr,
	        "usage: %s [--broken | --broken-late | --broken-grow | "
	        "--broken-handoff | --broken-grow-kill | --broken-grow-round "
	        "| --broken-displaced | --grow | --grow-kill | --grow-round | "
	        "--grow-displace | --rejoin | --one-kill | --grow-crash "
	        "filling|marked|promoted [--broken] | --check-repair "
	        "[--broken] | --stale [--broken] | --grow-gap [--broken]]\n",
	        argv[0]);
	return 2;
}

int main(int argc, char **argv)
{
	struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_copy_kill, dr_teardown),
	        cmocka_unit_test_teardown(test_one_kill, dr_teardown),
	        cmocka_unit_test_teardown(test_rejoin, dr_teardown),
	        cmocka_unit_test_teardown(test_grow, dr_teardown),
	        cmocka_unit_test_teardown(test_grow_kill, dr_teardown),
	        cmocka_unit_test_teardown(test_grow_round, dr_teardown),
	        cmocka_unit_test_teardown(test_grow_displace, dr_teardown),
	        cmocka_unit_test_teardown(test_grow_crash, dr_teardown),
	};
	size_t n = sizeof(tests) / sizeof(tests[0]);
	int pick;
	int rc = dr_args(argc, argv, &pick);
	if (rc)
		return rc;
	if (pick >= 0) {
		tests[0] = tests[pick];
		n = 1;
	} else {
		/* copy_kill, rejoin, grow and grow_kill: not one_kill,
		 * which copy_kill's first kill and grow's run contain, nor
		 * grow_round and grow_displace, grow's run with one thing
		 * held (make check-long runs the three alone), nor
		 * grow_crash, which takes its step. */
		memmove(&tests[1], &tests[2], 4 * sizeof(tests[0]));
		n = 4;
	}
	/* A machine removed by mistake closes its pipe: fail on the
	 * write's error, not on the signal. */
	signal(SIGPIPE, SIG_IGN);
	rb_p.pre_transfers = 200;
	rb_p.post_ms = 500;
	rb_p.cmd = dr_cmd;
	rb_p.configure = dr_config;
	return rb_main("datarec", tests, n);
}
