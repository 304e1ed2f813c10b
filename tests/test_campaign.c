/*
 * The fault campaign on one continuous cluster:
 *
 *   test_campaign [--cycles N] [--seed S] [--faults F,F,...] [--broken]
 *                 [--full-every N] [--list] [--help]
 *
 * One cluster of CP_NM0 machine processes (3 replicas, 3 failure domains:
 * two of two machines and one of one) joined through a 3-server ZooKeeper
 * ensemble (scripts/zk-local start-ensemble) runs, on every machine and
 * all the time, the bank of txproc.h (RB_ACCOUNTS accounts made by each
 * first machine, transfers, lock-free reads, read-only sums; histories
 * streamed for sercheck) and the KV workload of kvlin.h (async gets, puts
 * and deletes on a hot set of keys, retried while retryable; histories
 * streamed for lincheck), interleaved on the machine's one loop. N faults
 * (default 50) are applied to it one after another, drawn from the seed
 * (a shuffled order that runs through every fault before any repeats):
 *
 *   kill_member  kill -9 of a random machine, not the CM
 *   kill_cm      kill -9 of the configuration manager
 *   sigstop      SIGSTOP of a machine (not the CM) until every other one
 *                runs a configuration without it, then SIGCONT: it must
 *                learn it was removed and stop
 *   domain       kill -9 of both machines of a two-machine failure domain
 *   copy_kill    kill -9 of a machine, then of another while a region is
 *                being copied to a new backup (data recovery)
 *   zk_kill      the ZooKeeper ensemble's leader killed, a new leader
 *                awaited, the server restarted; then the next leader the
 *                same way (one server down at a time; the workload goes on)
 *   restart      every machine stopped, then killed (a power loss), then
 *                all restarted on their data directories
 *   restart_copy kill -9 of a machine, then, while a region is being
 *                copied to a new backup, every machine at once, restarted
 *   zombie_reuse (--reuse only, not in the default set) a machine (not
 *                the CM) is quieted (its histories closed: the new
 *                holder goes on in them), SIGSTOPped until every other
 *                one runs without it, its id taken by a new holder that
 *                joins; then SIGCONT: the old process, a zombie of the
 *                id's old incarnation, runs one-sided READs, WRITEs
 *                (poison) and CAS (lock) at three other primaries (each
 *                must fail FARM_EFENCED, after a control that executed
 *                before the stop) and its bank workload for
 *                CP_ZOMBIE_ACT_MS (messages, LOCK and COMMIT records:
 *                none may commit), must learn it was removed, and the
 *                refusals the others counted are printed
 *
 * A machine that left is replaced, to keep the cluster's size, by a NEW
 * machine: a new machine id and an empty data directory, in the failure
 * domain of the one it replaces, which joins the running cluster late
 * (np_await_member) and the KV store without a shard
 * (farm_kv_join_existing_sync), then runs both workloads too.
 *
 * After each fault, with the workloads running: every machine runs a
 * configuration without the machines that left; the replacements join;
 * every region any machine holds returns to 3 complete replicas at
 * exactly the machines its ring names (replicas.h). Then the workloads are
 * paused (every operation in flight answered) and every check runs:
 *   - full replication, again, with the workloads paused;
 *   - no account is left locked, the bank total is conserved, no balance
 *     negative (recbank.h's scan and sum by the lowest machine);
 *   - every transaction reported committed is present (each account's
 *     version is at least the highest one a committed transfer wrote:
 *     a summary of every committed write so far, the highest version
 *     per account, to which each cycle adds only the history records
 *     written since the last pause);
 *   - sercheck: the histories of every machine that ever ran, from the
 *     start of the campaign, are strictly serializable (and the committed
 *     writes its replay finds equal the summary's);
 *   - lincheck: the KV histories of every machine that ever ran, from the
 *     start, are linearizable (this is how every acknowledged put is
 *     checked to be present: reads after it must see it or a later
 *     write);
 *     these two go over the whole history, so their cost grows with the
 *     run: --full-every N runs them after every Nth cycle and after the
 *     last only (0: the last only), the others every cycle;
 *   - every machine's allocator state, rebuilt by scan from its regions,
 *     equals its live state, with no free refused or lost, and no object
 *     of those regions (KV objects too) holds a lock bit (allocscan.h);
 *     a walk of every region, whose number only grows over a run (each
 *     machine that joins makes regions of its own): with sercheck and
 *     lincheck under --full-every;
 *   - every region's copies, once every log is truncated and every free
 *     deferred for a promoted region's adoption is done: each object
 *     (an array's element) allocated at two copies holds the same bytes
 *     at both (cp_check_copies), and no backup lacks an object its
 *     primary holds (cp_missing: data recovery copies each element of
 *     an array in one slab slot; and a committed free's slot is free
 *     again at every copy after a restart, src/txn/restart.c), saying
 *     how many of the first it holds freed with a later incarnation;
 *     objects allocated at a backup only are counted, not failed.
 * Then the workloads resume and the next fault comes.
 *
 * A restarted machine's histories go on in the same files (tx_hist_seal,
 * lin_resume); its KV store installs the shard list it kept with its data
 * directory (farm_kv_join_sync, or farm_kv_join_existing_sync for a
 * machine that joined late). FARM_CAMPAIGN_VERBOSE=1 prints where every
 * copy is before
 * each fault. --order applies the faults of --faults in the order given.
 *
 * Prints a line per cycle (and where its time went: the workloads' run,
 * the fault, the removal, the replacements' join, the whole cluster's
 * configuration, the copies, the pause, each check), then a table of the faults
 * applied and the checks passed, the transactions and KV operations checked,
 * and last one JSON line (goals campaign_cycles_pass, lost_commits and
 * checker_anomalies: the last checks over the whole history). Stops at the
 * first cycle whose checks fail: the failures are listed, the cluster's
 * directory (the histories hist-<machine> and lin-<machine>) is kept and its
 * path printed, and the exit status is 1. 77: ZooKeeper, java or the jars
 * missing.
 *
 * --broken (a test-only switch, fault injection builds only): recovery
 * promotes backups without draining their logs
 * (farm_txn_testing_recovery_no_drain), so commits acknowledged just
 * before a kill are lost; the campaign must report a failed cycle (its
 * exit status is then 0, and 1 when every cycle passed).
 */
#define NP_NM 64 /* one slot per machine id */
#include "allocscan.h"
#include "kvlin.h"
#include "recbank.h"
#include "replicas.h"
#include "zprobe.h"

#include <getopt.h>
#include <time.h>

#include "alloc/alloc.h"
#include "alloc/galloc.h"
#include "kv/kv.h"
#include "node/restart.h"
#include "txn/txn_testing.h"
#include "brokenarg.h"

#define CP_NM0       5 /* machines in the cluster */
#define CP_ZK        3 /* ZooKeeper servers */
#define CP_REPLICAS  3
#define CP_NACC      (CP_NM0 * RB_ACCOUNTS)
#define CP_NBUCKETS  256u
#define CP_W         1u
#define CP_SLICE_NS  2000000ull /* a bank step and a KV operation */
#define CP_LEASE_US  200000u    /* 5 machines on 2 shared cores */
#define CP_JOIN_MS   60000
#define CP_RECONF_MS 30000
#define CP_REPL_MS   60000
#define CP_KV_GIVE   (10ull * 1000000000ull)
#define CP_ELECT_MS  30000
#define CP_DR_BYTES  (32u << 10) /* data recovery: 16 MB/s */
#define CP_DR_US     2000u
/* zombie_reuse: how long the zombie's bank workload runs after SIGCONT,
 * a transfer's retries there, and how long it has to learn it was
 * removed after that. */
#define CP_ZOMBIE_ACT_MS  2000u
#define CP_ZOMBIE_GIVE_NS 500000000ull
#define CP_ZOMBIE_KNOW_MS 10000u
/* The parent's slot for the zombie's process once a new holder has its
 * id's slot (ids stay under CP_NM0 with --reuse). */
#define CP_ZSLOT (NP_NM - 1)

static const char *const cp_zone[3] = {"zone-a", "zone-b", "zone-c"};

/* The machine id each first machine's domain follows: 0, 1: a; 2, 3: b;
 * 4: c. A replacement takes the domain of the machine it replaces. */
static unsigned cp_dom[NP_NM];

enum cp_fault {
	F_KILL_MEMBER,
	F_KILL_CM,
	F_SIGSTOP,
	F_DOMAIN,
	F_COPY_KILL,
	F_ZK_KILL,
	F_RESTART,
	F_RESTART_COPY,
	F_ZOMBIE_REUSE,
	F_COUNT
};
static const char *const cp_fault_name[F_COUNT] = {
        "kill_member", "kill_cm", "sigstop",      "domain",      "copy_kill",
        "zk_kill",     "restart", "restart_copy", "zombie_reuse"};

static unsigned opt_cycles = 50;
static uint64_t opt_seed;
static bool opt_broken;
static bool opt_use[F_COUNT];
/* --order: the faults of --faults in the order given, again and again
 * (a reproducer), instead of shuffled rounds. */
static bool opt_order;
/* Growth (config grow, the library's default): late machines grow into
 * ordinary members, and full replication also waits until none is late.
 * --no-grow: they stay late backups. */
static bool opt_grow = true;
/* --reuse: a replacement takes the id of the machine it replaces (config
 * reuse_ids), as a new incarnation; --old-ids: the old id rule (reuse_ids
 * off), under which such a replacement is refused. */
static bool opt_reuse, opt_old_ids;
/* --broken-removed (a test-only switch, with --reuse): recovery takes an
 * id once removed for removed whatever holder has it now
 * (FARM_FP_REC_REMOVED_STICKY); a cycle must fail. */
static bool opt_broken_removed;
/* --broken-inc (a test-only switch, with zombie_reuse): admitting a new
 * holder of an id lets every holder of it in at the fabric
 * (FARM_FP_FABRIC_ADMIT_ANY); a cycle must fail. */
static bool opt_broken_inc;
/* --broken-slot (a test-only switch): data recovery copies a slab slot's
 * first object only (FARM_FP_DATAREC_SLOT_FIRST), so a new backup lacks
 * the other elements of the KV store's bucket arrays; a cycle that copies
 * a region must fail (cp_missing). */
static bool opt_broken_slot;
/* --hold-end (with --reuse, kill_member): machine CP_HOLD logs and
 * applies the decisions of the first recovery round that removes a
 * machine, then takes the end that would have it empty the removed
 * machine's log as arriving after the next configuration began, and
 * refuses it (FARM_FP_REC_EMPTY_LATE): the round is superseded after
 * every other survivor emptied that log, and CP_HOLD's is recovered only
 * in the round its new holder's admission starts. --broken-kept
 * (FARM_FP_REC_NO_KEPT): the survivors that emptied the log do not vote
 * again, and that round stalls; --broken-handoff
 * (FARM_FP_TXN_NO_HANDOFF): CP_HOLD refuses the round's decisions too
 * (FARM_FP_REC_DECIDE_LATE, FARM_FP_REC_DONE_LATE: no survivor empties
 * the log then), and its log opens to the new holder before the old
 * one's records there are decided.
 * Each must fail a cycle: --broken-handoff through cold objects (the
 * killed machine writes, just before its kill, objects CP_HOLD backs up
 * and nothing writes again: cp_cold_before_kill) and the comparison of
 * every region's copies (cp_check_copies), which finds them differ. */
#define CP_HOLD      1u
#define CP_HOLD_SEED 1u
static bool opt_hold_end, opt_broken_kept, opt_broken_handoff;
/* --slow-replace (with --reuse): every machine applying the view that
 * admits a new holder of a reused id waits CP_SLOW_MS before its loops
 * start their channels with the id afresh (FARM_FP_NODE_REPLACE), which
 * holds open whatever window that step leaves; each new holder's first
 * request to every member must still be answered (cp_first_asks). */
#define CP_SLOW_MS 1500u
static bool opt_slow_replace;
/* --reuse-measure (with --reuse): what a new holder of a killed
 * machine's id would have had to copy, had it kept the old holder's
 * copies and been sent only what changed (src/recovery/README.md,
 * "Same-id restart"). The old holder's object lists of the last checks
 * before its kill (cp_hash_regions' files) are kept as was-<region>-m<id>
 * and compared, at the new holder's first checks, with its lists: objects
 * equal, changed, freed and allocated since, and the chunks (4 KiB, 64
 * KiB, 1 MiB) that hold a difference, against the bytes its data recovery
 * READ. A measurement, not a check: it fails nothing. The old lists are
 * of the last pause, so writes between that pause and the kill count as
 * changes: an upper bound on what a delta copy would send. */
static bool opt_reuse_measure;
/* --keep-dirs (with --reuse): the killed machine starts again on its own
 * directory under its id (config reuse_copies): it rejoins fresh, its old
 * copies kept as stale sources data recovery takes unchanged chunks from
 * (src/node/rejoin.c). What its copies READ and took, summed over the
 * campaign (the new holders' data recovery, as each reports it after
 * its cycle's replication). */
static bool opt_keep_dirs;
/* --broken-stale (a test-only switch, with --keep-dirs): a copy's first
 * pass takes every chunk of its old copy whatever the summaries say
 * (FARM_FP_DATAREC_STALE_EQUAL), and copies have no check pass, which
 * would repair it: a cycle's copy comparison must fail. */
static bool opt_broken_stale;
static uint64_t cp_new_read, cp_new_taken, cp_new_copies;
/* --fill-mb N (for --reuse-measure's data): N MB of CP_FILL_SIZE-byte
 * objects each first machine allocates at the start, CP_FILL_TX to a
 * transaction, never written again: the cold bulk a store holds beside
 * its hot accounts. */
static unsigned opt_fill_mb;
#define CP_FILL_SIZE 1024u
#define CP_FILL_TX   64u
/* In a machine's process (CLOCK_MONOTONIC, which the host's processes
 * share): when it last ended such a hold, and when it, a new holder,
 * sent its first requests (cp_first_asks); 0: never. */
static _Atomic uint64_t cp_held_until;
static uint64_t cp_asked_at;
/* --full-every N: sercheck and lincheck over the whole history, and the
 * allocators rebuilt by a walk of every region, after every Nth cycle's
 * checks and after the last cycle's (0: the last only; default 1: every
 * cycle). Their cost grows with the history or the regions made so far;
 * the checks every cycle keeps (replication, locks, the bank total, every
 * acknowledged commit present from what the cycle added, copies) cost
 * about what a cycle adds, so that a long run's cycles stay as
 * short as its first and a broken invariant still stops the cycle it
 * happens in. */
static unsigned opt_full_every = 1;
static enum cp_fault opt_list[F_COUNT * 4];
static unsigned opt_nlist;

/* ---- the machines ------------------------------------------------------ */

enum { CP_FIRST, CP_LATE, CP_RESTART };

struct cp_arg {
	uint32_t mode;   /* CP_FIRST, CP_LATE, CP_RESTART */
	uint32_t from;   /* a member that joined the KV store (CP_LATE) */
	uint32_t n;      /* the members to wait for (CP_RESTART) */
	uint32_t reused; /* CP_LATE: a new holder of a killed machine's id:
	                    its histories go on in the id's files */
};

/* What a machine says of itself ('v' -> 'V'). */
struct cp_state {
	uint64_t config;
	uint64_t members; /* bits */
	uint64_t late;    /* members that joined late (bits) */
	uint32_t cm;
	bool has_cm, removed;
	uint64_t transfers, kv_ops;
};

/* What a machine did so far ('p', at each pause). */
struct cp_counts {
	struct bank_counts k;
	struct lin_stats lin;
};

/* What a machine counted as refused ('u' -> 'U'): frames stamped with a
 * configuration older than it accepts from their sender, lease messages
 * (bad, stale, foreign), LOCK records and recovery messages of a stale
 * configuration. */
struct cp_refusals {
	uint64_t frames, lease, stale, rec;
};

/* --slow-replace ('t' -> 'T'): when this machine last ended a hold
 * before starting a new holder's channels afresh, and when it (a new
 * holder) sent its first requests; 0: never. */
struct cp_times {
	uint64_t held_until, asked_at;
};

/* What the zombie did after SIGCONT ('Y' -> 'Z'). */
struct cp_zombie {
	struct zp_counts control, after;
	struct bank_counts k;  /* its bank workload after SIGCONT */
	uint64_t sent, frames; /* messages and frames it sent after it */
	uint64_t timeouts, peerdead;
	uint64_t t_know_ms; /* ms after 'Y' it knew it was removed */
	bool removed;
};

struct cp_child {
	struct tx_child tx;
	struct zprobe zp; /* zombie_reuse: prepared before the stop */
	farm_kv *kv;
	struct lin L;
	farm_fatptr *acc;
	unsigned nacc;
	farm_fatptr mine[RB_ACCOUNTS];
	const farm_fatptr *own; /* its own accounts (late: every one) */
	unsigned nown;
	struct bank_counts k;
	int bad; /* a command not understood */
};

static int cp_config(struct np_child *np, struct farm_config *cfg)
{
	farm_config_defaults(cfg);
	cfg->machine_id = np->me;
	cfg->has_machine_id = true;
	snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s",
	         np->cl->dir[np->me]);
	if (farm_parse_size("16M", &cfg->region_size))
		return 2;
	cfg->threads = 1;
	snprintf(cfg->zk, sizeof(cfg->zk), "%s", rb_zk_connect);
	snprintf(cfg->zk_root, sizeof(cfg->zk_root), "%s", rb_zk_root);
	cfg->zk_session_ms = RB_SESSION_MS;
	cfg->zk_connect_timeout_ms = 30000;
	cfg->lease_us = CP_LEASE_US;
	cfg->replicas = CP_REPLICAS;
	/* Formed with CP_NM0 machines: a machine joining later is late. */
	cfg->expect_machines = CP_NM0;
	snprintf(cfg->domain, sizeof(cfg->domain), "%s",
	         cp_zone[cp_dom[np->me]]);
	cfg->datarec_bytes = CP_DR_BYTES;
	cfg->datarec_interval_us = CP_DR_US;
	cfg->grow = opt_grow;
	cfg->reuse_ids = opt_reuse && !opt_old_ids;
	cfg->reuse_copies = opt_keep_dirs;
	/* --hold-end: region ids from a fixed seed, so that the layout, and
	 * with it a region machine CP_HOLD backs up (cp_cold_victims), is
	 * the same every run. */
	if (opt_hold_end)
		cfg->region_seed = CP_HOLD_SEED;
	char err[256];
	if (farm_config_validate(cfg, err, sizeof(err))) {
		fprintf(stderr, "m%u: config: %s\n", np->me, err);
		return 3;
	}
	return 0;
}

static void cp_state_of(struct cp_child *c, struct cp_state *s)
{
	struct farm_view *v = malloc(sizeof(*v));
	memset(s, 0, sizeof(*s));
	if (v && !farm_node_view(c->tx.np.node, v)) {
		s->config = v->config_id;
		s->has_cm = v->has_cm;
		s->cm = v->cm;
		for (unsigned i = 0; i < v->n; i++)
			if (v->members[i].id < 64)
				s->members |= 1ull << v->members[i].id;
		for (unsigned i = 0; i < v->nlate; i++)
			if (v->late[i] < 64)
				s->late |= 1ull << v->late[i];
	}
	free(v);
	s->removed = farm_node_removed(c->tx.np.node);
	s->transfers = c->k.transfers;
	s->kv_ops = c->L.st.found + c->L.st.absent + c->L.st.puts +
	            c->L.st.del_found + c->L.st.del_absent;
}

/* The commands a machine answers running or paused. 1: not one of them. */
static int cp_query(struct cp_child *c, int cmd)
{
	if (cmd == 'v') {
		struct cp_state s;
		cp_state_of(c, &s);
		return np_say(&c->tx.np, 'V', &s, sizeof(s)) ? -1 : 0;
	}
	if (cmd == 'u') {
		struct cp_refusals r = {0};
		farm_msg_stats ms;
		farm_msg_stats_get(farm_node_msg(c->tx.np.node), NULL, &ms);
		struct farm_node_stats ns = {.size = sizeof(ns)};
		farm_txm_stats ts;
		farm_txm_stats_get(c->tx.txm, &ts);
		r.frames = ms.refused_config;
		r.lease = farm_node_stats_get(c->tx.np.node, &ns)
		                  ? UINT64_MAX
		                  : ns.lease.refused;
		r.stale = ts.stale_refused;
		r.rec = ts.rec_refused;
		return np_say(&c->tx.np, 'U', &r, sizeof(r)) ? -1 : 0;
	}
	if (cmd == 't') {
		/* Relaxed: the hook stored it on another thread, before the
		 * view that let this query's cycle go on. */
		struct cp_times t = {
		        .held_until = atomic_load_explicit(
		                &cp_held_until, memory_order_relaxed),
		        .asked_at = cp_asked_at};
		return np_say(&c->tx.np, 'T', &t, sizeof(t)) ? -1 : 0;
	}
	if (cmd == 'g') {
		struct held_report *r = malloc(sizeof(*r));
		if (!r)
			return -1;
		rp_held(&c->tx, r);
		int rc = np_say(&c->tx.np, 'G', r, sizeof(*r));
		free(r);
		return rc ? -1 : 0;
	}
	return 1;
}

/* lin_run's pacing: a bank step between KV operations, until 'P' (pause)
 * or until this machine learns it was removed. */
static bool cp_go(struct lin *L, void *arg)
{
	(void)L;
	struct cp_child *c = arg;
	if (farm_node_removed(c->tx.np.node))
		return false;
	int cmd = np_poll_cmd(&c->tx.np);
	if (cmd == 'P')
		return false;
	if (cmd) {
		int rc = cp_query(c, cmd);
		if (rc) {
			c->bad = cmd;
			return false;
		}
	}
	/* One bank step per slice of CP_SLICE_NS, the rest of it parked on
	 * the loop (serving the peers); lin_run issues one KV operation
	 * between two calls. Paced, so that 5 machines leave the 2-core
	 * host some room and the histories stay small enough for sercheck
	 * and lincheck over the whole campaign. */
	static const volatile int never = 0;
	uint64_t until = np_now_ns() + CP_SLICE_NS;
	bank_step(&c->tx, &c->k, c->own, c->nown, c->acc, c->nacc,
	          RB_GIVE_UP_NS);
	uint64_t now = np_now_ns();
	if (now < until)
		(void)farm_loop_wait(c->tx.np.loop, &never, until - now);
	return true;
}

/* zombie_reuse, 'z' (paused): close both histories (a new holder of
 * this id goes on in them), prepare the one-sided requests and run their
 * control; 'z' and the control's counts. */
static int cp_zombie_prepare(struct cp_child *c)
{
	struct zp_counts control = {0};
	if (lin_close(&c->L) || tx_hist_save(&c->tx))
		return -1;
	if (zp_prepare(&c->zp, &c->tx, c->acc, c->nacc, &control))
		fprintf(stderr, "m%u: zombie: no requests prepared\n",
		        c->tx.np.me);
	return np_say(&c->tx.np, 'z', &control, sizeof(control));
}

/* zombie_reuse, 'Y' (after SIGCONT, its id taken by a new holder): the
 * requests, then its bank workload as if nothing happened (its
 * histories are closed: what it does is judged by its counts and by the
 * others' checks), then it waits to learn it was removed. */
static int cp_zombie_act(struct cp_child *c)
{
	static const volatile int never = 0;
	farm_node *node = c->tx.np.node;
	struct cp_zombie r = {0};
	farm_msg_stats m0, m1;
	farm_msg_stats_get(farm_node_msg(node), NULL, &m0);
	uint64_t t0 = np_now_ns();
	if (c->zp.buf)
		zp_run(&c->zp, &c->tx, &r.after);
	uint64_t known = 0;
	while (np_now_ns() < t0 + CP_ZOMBIE_ACT_MS * 1000000ull) {
		bank_step(&c->tx, &r.k, c->own, c->nown, c->acc, c->nacc,
		          CP_ZOMBIE_GIVE_NS);
		(void)farm_loop_wait(c->tx.np.loop, &never, CP_SLICE_NS);
		if (!known && farm_node_removed(node))
			known = np_now_ns();
	}
	uint64_t dl = np_now_ns() + CP_ZOMBIE_KNOW_MS * 1000000ull;
	while (!farm_node_removed(node) && np_now_ns() < dl)
		(void)farm_loop_wait(c->tx.np.loop, &never, CP_SLICE_NS);
	r.removed = farm_node_removed(node);
	if (!known)
		known = np_now_ns();
	r.t_know_ms = (known - t0) / 1000000ull;
	farm_msg_stats_get(farm_node_msg(node), NULL, &m1);
	r.sent = m1.sent - m0.sent;
	r.frames = m1.frames_sent - m0.frames_sent;
	r.timeouts = m1.timeouts - m0.timeouts;
	r.peerdead = m1.peer_deaths - m0.peer_deaths;
	zp_free(&c->zp);
	return np_say(&c->tx.np, 'Z', &r, sizeof(r)) ? 40 : 0;
}

/* 'H' -> 'h' (paused, after 'F' everywhere): every region this machine
 * holds and its role; its allocated objects (as its copy's block table and
 * headers say: farm_alloc_walk_region), each an offset and a hash of its
 * slot's bytes, sorted by offset, in the cluster's file
 * copy-<region>-m<machine>; once its logs hold no COMMIT-BACKUP (backups
 * apply them at truncation). Free slots are left out: a primary's hold
 * its slab's free-list links, which no backup has. */
struct cp_hashes {
	unsigned n, pending;
	/* Frees deferred until their promoted region's adoption and not
	 * done yet (galloc_adopt.c): their objects stay allocated and
	 * locked at this primary until then. */
	uint64_t deferred;
	uint32_t region[RP_MAXREG];
	int role[RP_MAXREG];
	int64_t objects[RP_MAXREG];
	/* Data recovery's last copy of each region here (0: none): bytes
	 * READ from the primary and its time. */
	uint64_t dr_bytes[RP_MAXREG], dr_ns[RP_MAXREG];
};

/* v: the header word (version and lock bits), w: the incarnation word,
 * lines: what was hashed. */
struct cp_obj {
	uint64_t off, hash, v, w;
	uint32_t lines, pad;
};

struct cp_walk {
	const uint8_t *base;
	struct cp_obj *o;
	size_t n, cap;
};

static void cp_count_backups(void *ctx, uint32_t coord, int type, uint64_t txid)
{
	(void)coord;
	(void)txid;
	if (type == FARM_TXN_TESTING_COMMIT_BACKUP)
		(*(unsigned *)ctx)++;
}

/* One object: its offset and a hash of its slot, a word at a time. */
static void cp_hash_one(struct cp_walk *w, const uint8_t *p, uint32_t lines);

static void cp_hash_object(void *ctx, struct farm_objhdr *obj, uint32_t lines)
{
	const uint8_t *p = (const uint8_t *)obj;
	uint64_t inc;
	memcpy(&inc, p + 8, 8);
	uint32_t el = (uint32_t)((inc >> 1) & 0x3fff) + 1;
	if (el >= lines) {
		cp_hash_one(ctx, p, lines);
		return;
	}
	for (uint32_t l = 0; l + el <= lines; l += el) {
		memcpy(&inc, p + (uint64_t)l * 64 + 8, 8);
		if (inc & 1)
			cp_hash_one(ctx, p + (uint64_t)l * 64, el);
	}
}

static void cp_hash_one(struct cp_walk *w, const uint8_t *p, uint32_t lines)
{
	uint64_t h = 1469598103934665603ull;
	for (uint64_t o = 0; o + 8 <= (uint64_t)lines * 64; o += 8) {
		uint64_t x;
		memcpy(&x, p + o, 8);
		h = (h ^ x) * 1099511628211ull;
		h ^= h >> 29;
	}
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 256;
		struct cp_obj *o = realloc(w->o, cap * sizeof(*o));
		if (!o)
			return;
		w->o = o;
		w->cap = cap;
	}
	uint64_t v, inc;
	memcpy(&v, p, 8);
	memcpy(&inc, p + 8, 8);
	w->o[w->n++] = (struct cp_obj){.off = (uint64_t)(p - w->base),
	                               .hash = h,
	                               .v = v,
	                               .w = inc,
	                               .lines = lines};
}

static int cp_obj_cmp(const void *a, const void *b)
{
	const struct cp_obj *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

static void cp_copy_path(char *path, size_t len, const char *root,
                         uint32_t region, unsigned m)
{
	snprintf(path, len, "%.256s/copy-%08" PRIx32 "-m%u", root, region, m);
}

/* Data recovery's last complete copy of each region of @r here, into
 * r->dr_bytes and r->dr_ns (--reuse-measure's fresh copy). */
static void cp_hash_dr(struct cp_child *c, struct cp_hashes *r)
{
	struct farm_datarec_region *d = calloc(256, sizeof(*d));
	unsigned n =
	        d ? FARM_MIN(farm_txm_datarec_get(c->tx.txm, d, 256), 256u) : 0;
	for (unsigned i = 0; i < r->n; i++)
		for (unsigned k = 0; k < n; k++)
			if (d[k].region == r->region[i] &&
			    d[k].state == FARM_DATAREC_DONE) {
				r->dr_bytes[i] = d[k].bytes;
				r->dr_ns[i] = d[k].t_done_ns - d[k].t_start_ns;
			}
	free(d);
}

static int cp_hash_regions(struct cp_child *c)
{
	static const volatile int never = 0;
	farm_as *as = farm_node_as(c->tx.np.node);
	struct cp_hashes *r = calloc(1, sizeof(*r));
	if (!r)
		return -1;
	uint64_t dl = np_now_ns() + 10000000000ull;
	for (;;) {
		r->pending = 0;
		(void)farm_txm_testing_records(c->tx.txm, cp_count_backups,
		                               &r->pending);
		struct farm_galloc_stats gs;
		farm_galloc_stats(farm_node_galloc(c->tx.np.node), &gs);
		r->deferred = gs.frees_deferred - gs.deferred_freed -
		              gs.deferred_lost;
		if ((!r->pending && !r->deferred) || np_now_ns() > dl)
			break;
		(void)farm_loop_wait(c->tx.np.loop, &never, 1000000ull);
	}
	struct farm_as_held hl[RP_MAXREG];
	r->n = FARM_MIN(farm_as_held(as, hl, RP_MAXREG), RP_MAXREG);
	for (unsigned i = 0; i < r->n; i++) {
		enum farm_as_role role;
		farm_region *g = farm_as_local_region(as, hl[i].region, &role);
		r->region[i] = hl[i].region;
		r->role[i] = (int)hl[i].role;
		struct cp_walk w = {.base = g ? farm_region_base(g) : NULL};
		r->objects[i] = g ? farm_alloc_walk_region(farm_region_base(g),
		                                           farm_region_size(g),
		                                           hl[i].region,
		                                           cp_hash_object, &w)
		                  : -ENOENT;
		if (w.n)
			qsort(w.o, w.n, sizeof(*w.o), cp_obj_cmp);
		char path[320];
		cp_copy_path(path, sizeof(path), c->tx.np.cl->root,
		             hl[i].region, c->tx.np.me);
		if (np_write_file(path, w.o, w.n * sizeof(*w.o)))
			r->objects[i] = -EIO;
		free(w.o);
	}
	cp_hash_dr(c, r);
	int rc = np_say(&c->tx.np, 'h', r, sizeof(*r));
	free(r);
	return rc;
}

/* 'O' -> 'o' (paused, after 'H'): the objects the parent found to differ
 * between two copies of a region, as this machine holds them, for the
 * report. The parent writes the cluster's file "probe" (a cp_probe); the
 * answer is the file probe-m<machine> (a cp_probe_ans). */
#define CP_PROBE_OBJS  4u
#define CP_PROBE_BYTES 512u
struct cp_probe {
	uint32_t region, n;
	uint64_t off[CP_PROBE_OBJS];
};

struct cp_probe_ans {
	int role; /* -1: no copy held */
	bool filling;
	bool demoted; /* a demoted copy (growth) is mapped here */
	bool have_dr; /* a copy of data recovery's record, below */
	struct farm_datarec_region dr;
	uint64_t config;
	uint32_t reps[FARM_RING_MAX_REPLICAS];
	unsigned nreps;
	uint32_t extra;
	uint8_t obj[CP_PROBE_OBJS][CP_PROBE_BYTES];
	uint8_t dem[CP_PROBE_OBJS][CP_PROBE_BYTES]; /* the demoted copy's */
};

static void cp_probe_path(char *path, size_t len, const char *root, unsigned m)
{
	if (m == ~0u)
		snprintf(path, len, "%.256s/probe", root);
	else
		snprintf(path, len, "%.256s/probe-m%u", root, m);
}

/* The bytes of the probe's objects, at this machine's copy and at its
 * demoted copy if it holds one. */
static void cp_probe_objects(farm_as *as, const struct cp_probe *q,
                             const uint8_t *base, struct cp_probe_ans *a)
{
	uint64_t rs = farm_as_region_size(as);
	for (unsigned k = 0; k < q->n && k < CP_PROBE_OBJS; k++) {
		uint64_t off = q->off[k];
		if (off + CP_PROBE_BYTES > rs)
			continue;
		if (base)
			memcpy(a->obj[k], base + off, CP_PROBE_BYTES);
		const void *d = farm_as_demoted_ptr(
		        as, farm_gaddr_make(q->region, off), CP_PROBE_BYTES);
		a->demoted |= d != NULL;
		if (d)
			memcpy(a->dem[k], d, CP_PROBE_BYTES);
	}
}

static int cp_probe_answer(struct cp_child *c)
{
	farm_as *as = farm_node_as(c->tx.np.node);
	char path[320];
	cp_probe_path(path, sizeof(path), c->tx.np.cl->root, ~0u);
	size_t len = 0;
	struct cp_probe *q = np_read_file(path, &len);
	struct cp_probe_ans *a = calloc(1, sizeof(*a));
	if (!q || len != sizeof(*q) || !a) {
		free(q);
		free(a);
		return np_say(&c->tx.np, 'o', NULL, 0);
	}
	enum farm_as_role role;
	farm_region *g = farm_as_local_region(as, q->region, &role);
	a->role = g ? (int)role : -1;
	a->filling = farm_as_backup_filling(as, q->region);
	a->config = farm_node_config_id(c->tx.np.node);
	a->nreps = farm_as_replicas(as, q->region, a->reps);
	a->extra = farm_as_extra(as, q->region);
	struct farm_datarec_region dr[RP_MAXREG];
	unsigned ndr = FARM_MIN(farm_txm_datarec_get(c->tx.txm, dr, RP_MAXREG),
	                        RP_MAXREG);
	for (unsigned k = 0; k < ndr; k++)
		if (dr[k].region == q->region) {
			a->dr = dr[k];
			a->have_dr = true;
		}
	cp_probe_objects(as, q, g ? farm_region_base(g) : NULL, a);
	cp_probe_path(path, sizeof(path), c->tx.np.cl->root, c->tx.np.me);
	int rc = np_write_file(path, a, sizeof(*a));
	free(q);
	free(a);
	return np_say(&c->tx.np, 'o', NULL, 0) || rc ? -1 : 0;
}

/* A cold object's bytes: a pattern of its address. */
static void cp_fill_cold(void *d, uint32_t size, farm_gaddr a)
{
	uint64_t x = a ^ 0x9e3779b97f4a7c15ull;
	for (uint32_t o = 0; o + 8 <= size; o += 8) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		memcpy((uint8_t *)d + o, &x, 8);
	}
}

/* A region machine CP_HOLD backs up (a backup, not its primary) and
 * machine @me holds no copy of. */
static bool cp_cold_region(farm_as *as, uint32_t region, uint32_t me)
{
	uint32_t reps[FARM_RING_MAX_REPLICAS];
	unsigned n = farm_as_replicas(as, region, reps);
	bool backup = false;
	for (unsigned k = 0; k < n; k++) {
		if (reps[k] == me)
			return false;
		backup |= k > 0 && reps[k] == CP_HOLD;
	}
	return backup;
}

/* --hold-end, 'W' (paused; the primary of a region machine CP_HOLD backs
 * up): CP_COLD objects allocated here, their fat pointers in the
 * cluster's file "cold" for the machine about to be killed ('K'). 'w'. */
#define CP_COLD 16u
static int cp_make_cold(struct cp_child *c)
{
	farm_fatptr p[CP_COLD];
	unsigned n = 0;
	farm_tx *tx;
	if (farm_tx_begin(c->tx.txm, c->tx.np.loop, &tx))
		return -1;
	for (; n < CP_COLD; n++) {
		void *d;
		if (farm_tx_alloc_sync(tx, 256, FARM_GADDR_NULL, &p[n], &d))
			break;
		memset(d, 0x5a, 256);
	}
	int rc = n ? farm_tx_commit_sync(tx) : -ENOMEM;
	farm_tx_free(tx);
	char path[320];
	snprintf(path, sizeof(path), "%.300s/cold", c->tx.np.cl->root);
	if (rc || np_write_file(path, p, n * sizeof(p[0])))
		n = 0;
	return np_say(&c->tx.np, 'w', &n, sizeof(n));
}

/* --hold-end, 'K' (paused, about to be killed): every object of "cold" in
 * a region CP_HOLD backs up and this machine holds no copy of, written
 * here in a transaction of its own and never again. Their COMMIT-BACKUPs
 * wait at CP_HOLD for truncation when the kill comes, so CP_HOLD's copies
 * get these images only from recovery; later transfers write nothing
 * over them. 'k' and how many. */
static int cp_write_cold(struct cp_child *c)
{
	farm_as *as = farm_node_as(c->tx.np.node);
	char path[320];
	snprintf(path, sizeof(path), "%.300s/cold", c->tx.np.cl->root);
	size_t len = 0;
	farm_fatptr *p = np_read_file(path, &len);
	unsigned made = 0;
	for (size_t i = 0; p && i < len / sizeof(*p); i++) {
		if (!cp_cold_region(as, farm_gaddr_region(p[i].addr),
		                    c->tx.np.me))
			continue;
		farm_tx *tx;
		const void *old;
		void *d;
		if (farm_tx_begin(c->tx.txm, c->tx.np.loop, &tx))
			break;
		int rc = farm_tx_read_sync(tx, p[i].addr, 256, &old);
		if (!rc)
			rc = farm_tx_write(tx, p[i].addr, &d);
		if (!rc) {
			cp_fill_cold(d, 256, p[i].addr);
			rc = farm_tx_commit_sync(tx);
		}
		farm_tx_free(tx);
		made += !rc;
	}
	free(p);
	return np_say(&c->tx.np, 'k', &made, sizeof(made));
}

/* The replica commands a paused machine answers: 'F' (TRUNCATE records
 * now), 'H', 'W', 'K', 'O'. 1: not one of them. */
static int cp_replica_cmd(struct cp_child *c, int cmd)
{
	if (cmd == 'F') {
		(void)farm_txm_testing_truncate(c->tx.txm, c->tx.np.loop);
		return np_say(&c->tx.np, 'f', NULL, 0) ? -1 : 0;
	}
	if (cmd == 'H')
		return cp_hash_regions(c) ? -1 : 0;
	if (cmd == 'W')
		return cp_make_cold(c) ? -1 : 0;
	if (cmd == 'K')
		return cp_write_cold(c) ? -1 : 0;
	if (cmd == 'O')
		return cp_probe_answer(c) ? -1 : 0;
	return 1;
}

/* Both workloads, paused and resumed at the parent's word, until 'Q'. */
static int cp_work(struct cp_child *c)
{
	for (;;) {
		if (lin_run(&c->L, cp_go, c))
			return 30;
		tx_hist_flush(&c->tx);
		if (c->bad)
			return 31;
		struct cp_counts n = {.k = c->k, .lin = c->L.st};
		if (farm_node_removed(c->tx.np.node)) {
			/* A zombie: say so, then stop. */
			if (lin_close(&c->L) || tx_hist_save(&c->tx) ||
			    np_say(&c->tx.np, 'Z', &n, sizeof(n)))
				return 32;
			return 0;
		}
		if (np_say(&c->tx.np, 'p', &n, sizeof(n)))
			return 33;
		for (;;) { /* paused */
			int cmd = np_wait_cmd(&c->tx.np);
			int rc = cp_query(c, cmd);
			if (rc > 0)
				rc = cp_replica_cmd(c, cmd);
			if (rc < 0)
				return 34;
			if (rc == 0)
				continue;
			if (cmd == 'S') {
				struct scan_report *s = calloc(1, sizeof(*s));
				if (!s)
					return 35;
				rb_scan(&c->tx, c->acc, c->nacc, s);
				rc = np_say(&c->tx.np, 's', s, sizeof(*s));
				free(s);
				if (rc)
					return 36;
			} else if (cmd == 'A') {
				struct alloc_report a;
				alloc_scan(c->tx.np.node, &a);
				if (np_say(&c->tx.np, 'A', &a, sizeof(a)))
					return 37;
			} else if (cmd == 'z') {
				if (cp_zombie_prepare(c))
					return 41;
			} else if (cmd == 'Y') {
				return cp_zombie_act(c);
			} else if (cmd == 'r') {
				break;
			} else if (cmd == 'Q') {
				return lin_close(&c->L) || tx_hist_save(&c->tx)
				               ? 38
				               : 0;
			} else {
				return 39;
			}
		}
	}
}

/* A new holder of a reused id, just admitted: one request to every other
 * member at once (FARM_MSGT_KV_SHARDS; not joined yet is an answer too),
 * each asked once, never again: a member that let this machine's frames
 * in before it started its channels with the id afresh answers on the old
 * holder's channel, and that answer never comes. 0, or -1 (said why). */
#define CP_ASK_NS (10ull * 1000000000ull)
struct cp_ask {
	volatile int done;
	int status;
};

static void cp_ask_reply(farm_loop *loop, void *ctx, int status,
                         const void *reply, uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct cp_ask *a = ctx;
	a->status = status;
	a->done = 1;
}

static int cp_first_asks(struct np_child *p)
{
	struct farm_view *v = malloc(sizeof(*v));
	struct cp_ask *ask = calloc(FARM_VIEW_MAX, sizeof(*ask));
	int bad = !v || !ask || farm_node_view(p->node, v);
	cp_asked_at = np_now_ns();
	for (unsigned i = 0; !bad && i < v->n; i++) {
		if (v->members[i].id == p->me) {
			ask[i].done = 1;
			continue;
		}
		ask[i].status = farm_msg_call(p->loop, v->members[i].id, 0,
		                              FARM_MSGT_KV_SHARDS, NULL, 0,
		                              CP_ASK_NS, cp_ask_reply, &ask[i]);
		ask[i].done = ask[i].status != 0;
	}
	for (unsigned i = 0; !bad && i < v->n; i++) {
		if (!ask[i].done)
			(void)farm_loop_wait(p->loop, &ask[i].done,
			                     CP_ASK_NS + 1000000000ull);
		int st = ask[i].done ? ask[i].status : -ETIMEDOUT;
		if (st && st != -EAGAIN) {
			fprintf(stderr,
			        "m%u: a new holder of its id: machine %u did "
			        "not answer its first request: %s\n",
			        p->me, v->members[i].id, farm_strerror(st));
			bad = 1;
		}
	}
	free(ask);
	free(v);
	return bad ? -1 : 0;
}

static void pause_ms(unsigned ms);

/* --slow-replace: FARM_FP_NODE_REPLACE's hook. */
static void cp_slow_replace(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	pause_ms(CP_SLOW_MS);
	/* Relaxed: read on the loop's thread ('t'), long after. */
	atomic_store_explicit(&cp_held_until, np_now_ns(),
	                      memory_order_relaxed);
}

/* --hold-end: FARM_FP_REC_DECIDE_LATE is a plain switch; this is the
 * hook of CP_HOLD's other point, and the first end of recovery it
 * refuses unhooks both (one round held). */
static void cp_hold_done(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	(void)farm_fault_set(FARM_FP_REC_DECIDE_LATE, NULL, NULL);
	(void)farm_fault_set(FARM_FP_REC_DONE_LATE, NULL, NULL);
	fprintf(stderr, "m%u: a recovery round's end held past it\n", CP_HOLD);
}

static void cp_hold_empty(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	(void)farm_fault_set(FARM_FP_REC_EMPTY_LATE, NULL, NULL);
	fprintf(stderr, "m%u: a recovery round's end held past it\n", CP_HOLD);
}

/* --hold-end: CP_HOLD's hooks (above). */
static int cp_hold_set(void)
{
	if (!opt_broken_handoff)
		return farm_fault_set(FARM_FP_REC_EMPTY_LATE, cp_hold_empty,
		                      NULL);
	return farm_fault_set(FARM_FP_REC_DECIDE_LATE, tu_switch_on, NULL) ||
	       farm_fault_set(FARM_FP_REC_DONE_LATE, cp_hold_done, NULL);
}

/* --fill-mb: the cold objects, allocated in this machine's regions. */
static int cp_fill(struct cp_child *c)
{
	uint64_t n = ((uint64_t)opt_fill_mb << 20) / CP_FILL_SIZE;
	for (uint64_t done = 0; done < n;) {
		farm_tx *tx;
		if (farm_tx_begin(c->tx.txm, c->tx.np.loop, &tx))
			return -1;
		unsigned k = 0;
		int rc = 0;
		for (; k < CP_FILL_TX && done + k < n && !rc; k++) {
			farm_fatptr p;
			void *d;
			rc = farm_tx_alloc_sync(tx, CP_FILL_SIZE,
			                        FARM_GADDR_NULL, &p, &d);
			if (!rc)
				memset(d, (int)((done + k) & 0xff),
				       CP_FILL_SIZE);
		}
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (rc && !farm_tx_retryable(rc))
			return -1;
		done += rc ? 0 : k;
	}
	return 0;
}

/* A machine's steps return this to go on, or the exit status to end
 * with. */
#define CP_GO (-1)

/* One of the first machines: the cluster formed, the store's shards
 * made. */
static int cp_join_first(struct cp_child *c)
{
	struct np_child *p = &c->tx.np;
	if (farm_node_wait_members(p->node, CP_NM0, CP_JOIN_MS) ||
	    farm_kv_attach(c->kv, p->loop))
		return 7;
	int rc = farm_kv_join_sync(c->kv, p->loop, CP_NM0, CP_JOIN_MS);
	if (rc) {
		fprintf(stderr, "m%u: kv join: %s\n", p->me, farm_strerror(rc));
		return 8;
	}
	return CP_GO;
}

/* A machine restarted from its directory: the store installs the shard
 * list it kept there (src/kv/README.md). */
static int cp_join_restart(struct cp_child *c, const struct cp_arg *a)
{
	struct np_child *p = &c->tx.np;
	if (farm_node_wait_members(p->node, a->n, CP_JOIN_MS) ||
	    farm_kv_attach(c->kv, p->loop))
		return 7;
	struct farm_restart_stats rs;
	farm_node_restart_stats(p->node, &rs);
	if (!rs.restarted) {
		fprintf(stderr, "m%u: not restarted from its data directory\n",
		        p->me);
		return 16;
	}
	int rc = p->me < CP_NM0
	                 ? farm_kv_join_sync(c->kv, p->loop, CP_NM0, CP_JOIN_MS)
	                 : farm_kv_join_existing_sync(c->kv, p->loop, 0,
	                                              CP_JOIN_MS);
	if (rc) {
		fprintf(stderr, "m%u: kv shards: %s\n", p->me,
		        farm_strerror(rc));
		return 8;
	}
	return CP_GO;
}

/* A machine added to the running cluster (a new id or a reused one). */
static int cp_join_late(struct cp_child *c, const struct cp_arg *a)
{
	struct np_child *p = &c->tx.np;
	int rc = np_await_member(p->node, p->loop, p->me, CP_JOIN_MS);
	if (rc == -EEXIST) /* not admitted: say so */
		return np_say(p, 'X', NULL, 0) ? 10 : 0;
	if (rc || farm_kv_attach(c->kv, p->loop))
		return 7;
	if (a->reused && cp_first_asks(p))
		return 17;
	rc = farm_kv_join_existing_sync(c->kv, p->loop, a->from, CP_JOIN_MS);
	if (rc) {
		fprintf(stderr, "m%u: kv join (from %u): %s\n", p->me, a->from,
		        farm_strerror(rc));
		return 8;
	}
	return CP_GO;
}

/* Joined: the histories opened, the accounts made (first machines) and
 * loaded once the parent says go, the KV workload's state set up. */
static int cp_prepare(struct cp_child *c, const struct cp_arg *a)
{
	struct np_child *p = &c->tx.np;
	bool resume = a->mode == CP_RESTART || a->reused;
	if ((resume ? tx_hist_resume(&c->tx) : tx_hist_stream(&c->tx)) ||
	    np_ready(p))
		return 11;
	if (a->mode == CP_FIRST) {
		if (create_objs(&c->tx, "acct", RB_ACCOUNTS, 64, fill_account,
		                NULL, c->mine))
			return 12;
		c->own = c->mine;
		c->nown = RB_ACCOUNTS;
		if (opt_fill_mb && cp_fill(c))
			return 12;
	}
	if (np_say(p, 'C', NULL, 0) || np_wait_cmd(p) != 'G')
		return 13;
	c->acc = load_objs(&c->tx, "acct", &c->nacc);
	if (!c->acc || c->nacc != CP_NACC)
		return 14;
	if (a->mode != CP_FIRST) {
		c->own = c->acc;
		c->nown = c->nacc;
	}
	if (resume ? lin_resume(&c->L, p, farm_kv_table(c->kv), CP_W,
	                        CP_KV_GIVE)
	           : lin_init(&c->L, p, farm_kv_table(c->kv), CP_W, CP_KV_GIVE,
	                      false))
		return 15;
	return CP_GO;
}

static int cp_machine(struct np_child *np, void *arg)
{
	const struct cp_arg *a = arg;
	if (opt_hold_end && a->mode == CP_FIRST && np->me == CP_HOLD &&
	    cp_hold_set())
		return 9;
	struct cp_child *c = calloc(1, sizeof(*c));
	if (!c)
		return 9;
	c->tx.np = *np;
	struct np_child *p = &c->tx.np;
	struct farm_config cfg;
	int st = cp_config(np, &cfg);
	if (st)
		goto out_free;
	st = 4;
	if (farm_node_open(&cfg, &p->node))
		goto out_free;
	st = 5;
	if (farm_kv_create(p->node, NULL, CP_NBUCKETS, &c->kv))
		goto out;
	farm_node_set_app_loops(p->node, true);
	st = 6;
	if (farm_node_start(p->node, CP_JOIN_MS) ||
	    farm_node_loop_open(p->node, 0, &p->loop))
		goto out;
	c->tx.txm = farm_node_txm(p->node);
	st = a->mode == CP_FIRST     ? cp_join_first(c)
	     : a->mode == CP_RESTART ? cp_join_restart(c, a)
	                             : cp_join_late(c, a);
	if (st == CP_GO)
		st = cp_prepare(c, a);
	if (st == CP_GO)
		st = cp_work(c);
out:
	if (p->loop) {
		farm_kv_detach(c->kv, p->loop);
		farm_node_loop_close(p->node, p->loop);
	}
	farm_node_close(p->node);
	farm_kv_destroy(c->kv);
	free(c->acc);
	free(c->tx.h);
	if (c->tx.hfd > 0)
		close(c->tx.hfd);
out_free:
	free(c);
	return st;
}

/* ---- the parent: the cluster ------------------------------------------- */

static uint64_t cp_live;   /* machines running (bits) */
static uint64_t cp_used;   /* machines that ever ran the workloads */
static uint64_t cp_killed; /* killed with SIGKILL: histories may end open */
static uint32_t cp_next;   /* the next new machine id */
static bool cp_done;       /* the campaign ended: no history to keep */
static struct cp_arg cp_args[NP_NM];

static void pause_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static bool cp_is(uint64_t mask, unsigned i)
{
	return i < 64 && ((mask >> i) & 1);
}

static unsigned cp_count(uint64_t mask)
{
	return (unsigned)__builtin_popcountll(mask);
}

static unsigned cp_lowest(uint64_t mask)
{
	return mask ? (unsigned)__builtin_ctzll(mask) : NP_NM;
}

/* The @k-th machine of @mask. */
static unsigned cp_nth(uint64_t mask, unsigned k)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(mask, i) && k-- == 0)
			return i;
	return NP_NM;
}

static unsigned cp_gen[NP_NM]; /* holders of each id so far */

static void cp_dir(unsigned id)
{
	char d[sizeof(rb_cl.dir[id])];
	if (cp_gen[id]++)
		snprintf(d, sizeof(d), "%.240s/m%u.%u", rb_cl.root, id,
		         cp_gen[id] - 1);
	else
		snprintf(d, sizeof(d), "%.250s/m%u", rb_cl.root, id);
	memcpy(rb_cl.dir[id], d, sizeof(d));
	assert_int_equal(mkdir(rb_cl.dir[id], 0700), 0);
}

static struct cp_state cp_ask_state(unsigned i)
{
	struct cp_state s;
	np_send(&rb_cl, i, 'v');
	np_expect(&rb_cl, i, 'V', 30000);
	np_recv(&rb_cl, i, &s, sizeof(s), 1000);
	return s;
}

static struct held_report *cp_ask_held(unsigned i)
{
	struct held_report *r = malloc(sizeof(*r));
	assert_non_null(r);
	np_send(&rb_cl, i, 'g');
	np_expect(&rb_cl, i, 'G', 30000);
	np_recv(&rb_cl, i, r, sizeof(*r), 1000);
	return r;
}

/* --reuse: what the new holder @i of a killed machine's id copied in
 * cycle @c: bytes its data recovery READ and those it took from its old
 * copies (--keep-dirs), its copies complete. */
static void cp_new_holder_copies(unsigned c, unsigned i)
{
	struct held_report *r = cp_ask_held(i);
	uint64_t rd = 0, tk = 0, sm = 0;
	unsigned n = 0;
	for (unsigned k = 0; k < r->ndr && k < RP_MAXREG; k++) {
		const struct farm_datarec_region *d = &r->dr[k];
		if (d->state != FARM_DATAREC_DONE)
			continue;
		n++;
		rd += d->bytes;
		tk += d->stale;
		sm += d->summary;
	}
	free(r);
	cp_new_read += rd;
	cp_new_taken += tk;
	cp_new_copies += n;
	printf("cycle %u: new holder of id %u: %u copies READ %" PRIu64
	       " bytes (%" PRIu64 " of them summaries) and took %" PRIu64
	       " from its old copies\n",
	       c, i, n, rd, sm, tk);
}

/* The configuration manager, as the lowest live machine sees it. */
static unsigned cp_cm(void)
{
	struct cp_state s = cp_ask_state(cp_lowest(cp_live));
	return s.has_cm ? s.cm : cp_lowest(cp_live);
}

static void cp_start(void)
{
	memset(&rb_cl, 0, sizeof(rb_cl));
	for (unsigned i = 0; i < NP_NM; i++)
		rb_cl.to[i] = rb_cl.from[i] = -1;
	tu_tmpdir(rb_cl.root, sizeof(rb_cl.root), "campaign");
	snprintf(rb_zk_root, sizeof(rb_zk_root), "/libfarm/campaign-%d",
	         (int)getpid());
	for (unsigned i = 0; i < CP_NM0; i++) {
		cp_dom[i] = i / 2;
		cp_dir(i);
		cp_args[i] = (struct cp_arg){.mode = CP_FIRST};
	}
	for (unsigned i = 0; i < CP_NM0; i++)
		np_spawn_one(&rb_cl, i, cp_machine, &cp_args[i]);
	for (unsigned i = 0; i < CP_NM0; i++)
		np_expect(&rb_cl, i, 'R', CP_JOIN_MS + 30000);
	for (unsigned i = 0; i < CP_NM0; i++)
		np_expect(&rb_cl, i, 'C', 60000);
	for (unsigned i = 0; i < CP_NM0; i++)
		np_send(&rb_cl, i, 'G');
	cp_live = cp_used = (1ull << CP_NM0) - 1;
	cp_next = CP_NM0;
}

/* Machine @i killed with SIGKILL, reaped. */
static void cp_kill(unsigned i)
{
	assert_int_equal(kill(rb_cl.pid[i], SIGKILL), 0);
	assert_int_equal(tu_reap(rb_cl.pid[i]), 128 + SIGKILL);
	rb_cl.pid[i] = 0;
	close(rb_cl.to[i]);
	close(rb_cl.from[i]);
	rb_cl.to[i] = rb_cl.from[i] = -1;
	cp_live &= ~(1ull << i);
	cp_killed |= 1ull << i;
}

/* Every live machine runs a configuration of exactly the live machines
 * (within @ms): 0, or -1 with the reason in @why. */
static int cp_await_config(unsigned ms, char *why, size_t len)
{
	uint64_t dl = np_now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < 64 && all; i++) {
			if (!cp_is(cp_live, i))
				continue;
			struct cp_state s = cp_ask_state(i);
			if (s.removed || s.members != cp_live) {
				all = false;
				snprintf(why, len,
				         "machine %u: configuration %" PRIu64
				         " has members %#" PRIx64
				         ", expected %#" PRIx64 "%s",
				         i, s.config, s.members, cp_live,
				         s.removed ? " (it was removed)" : "");
			}
		}
		if (all)
			return 0;
		if (np_now_ns() > dl)
			return -1;
		pause_ms(20);
	}
}

/* A new machine (a new id, an empty directory) in domain @dom joins the
 * running cluster and starts its workloads. */
static unsigned cp_add(unsigned dom)
{
	unsigned id = cp_next++;
	assert_true(id < NP_NM);
	cp_dom[id] = dom;
	cp_dir(id);
	cp_args[id] =
	        (struct cp_arg){.mode = CP_LATE, .from = cp_lowest(cp_live)};
	np_spawn_one(&rb_cl, id, cp_machine, &cp_args[id]);
	np_expect(&rb_cl, id, 'R', CP_JOIN_MS + 30000);
	np_expect(&rb_cl, id, 'C', 60000);
	np_send(&rb_cl, id, 'G');
	cp_live |= 1ull << id;
	cp_used |= 1ull << id;
	return id;
}

/* --reuse: a new holder of killed machine @id's id (an empty directory,
 * the same domain) joins late and starts its workloads; its histories go
 * on in the id's files, the killed holder's sealed first. false: it was
 * not admitted (the old id rule). */
static bool cp_add_reused(unsigned id)
{
	assert_true(tx_hist_seal(&rb_cl, id) >= 0);
	cp_killed &= ~(1ull << id);
	if (!opt_keep_dirs) /* else its old directory, as the kill left it */
		cp_dir(id);
	cp_args[id] = (struct cp_arg){
	        .mode = CP_LATE, .from = cp_lowest(cp_live), .reused = 1};
	np_spawn_one(&rb_cl, id, cp_machine, &cp_args[id]);
	char t = 0;
	np_recv(&rb_cl, id, &t, 1, CP_JOIN_MS + 30000);
	if (t == 'X') {
		assert_int_equal(tu_reap(rb_cl.pid[id]), 0);
		rb_cl.pid[id] = 0;
		close(rb_cl.to[id]);
		close(rb_cl.from[id]);
		rb_cl.to[id] = rb_cl.from[id] = -1;
		return false;
	}
	assert_int_equal(t, 'R');
	np_expect(&rb_cl, id, 'C', 60000);
	np_send(&rb_cl, id, 'G');
	cp_live |= 1ull << id;
	cp_used |= 1ull << id;
	return true;
}

/* What every live machine holds, and its view (when replication did not
 * come back: for the report). */
static void cp_dump_held(void)
{
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct cp_state st = cp_ask_state(i);
		struct held_report *r = cp_ask_held(i);
		printf("machine %u: configuration %" PRIu64
		       ", members %#" PRIx64 ", late %#" PRIx64
		       ", CM %u; holds",
		       i, st.config, st.members, st.late, st.cm);
		for (unsigned k = 0; k < r->n; k++) {
			const struct rp_held *h = &r->h[k];
			printf(" %#" PRIx32 "(%s%s:", h->region,
			       h->role == FARM_AS_PRIMARY ? "P" : "B",
			       h->filling ? ",filling" : "");
			for (unsigned x = 0; x < h->nreps; x++)
				printf("%s%" PRIu32, x ? "," : "", h->reps[x]);
			printf(")");
		}
		printf("; copies:");
		for (unsigned k = 0; k < r->ndr; k++)
			printf(" %#" PRIx32 "(state %d, %" PRIu64
			       " bytes, %" PRIu64 " reads, %" PRIu64
			       " again, last error %d)",
			       r->dr[k].region, (int)r->dr[k].state,
			       r->dr[k].bytes, r->dr[k].reads, r->dr[k].retries,
			       r->dr[k].last_err);
		printf("\n");
		free(r);
	}
}

/* Every region back at CP_REPLICAS complete replicas (within @ms): 0, or
 * -1 with the reason in @why. Regions counted in *@nreg. */
static int cp_await_replicated(unsigned ms, char *why, size_t len,
                               unsigned *nreg)
{
	uint64_t dl = np_now_ns() + (uint64_t)ms * 1000000ull;
	struct held_report *r[64] = {0};
	int rc;
	for (;;) {
		for (unsigned i = 0; i < 64; i++) {
			free(r[i]);
			r[i] = cp_is(cp_live, i) ? cp_ask_held(i) : NULL;
		}
		bool ok = rp_replicated(r, cp_live, CP_REPLICAS, 0, why, len,
		                        nreg);
		for (unsigned i = 0; ok && opt_grow && i < 64; i++)
			if (r[i] && r[i]->late) {
				ok = false;
				snprintf(why, len,
				         "machine %u is still late (growing)",
				         i);
			}
		if (ok || np_now_ns() > dl) {
			rc = ok ? 0 : -1;
			break;
		}
		pause_ms(20);
	}
	for (unsigned i = 0; i < 64; i++)
		free(r[i]);
	return rc;
}

/* ---- the parent: the faults -------------------------------------------- */

static uint64_t cp_rng;

static unsigned cp_draw(unsigned n)
{
	return (unsigned)(farm_rand64(&cp_rng) % n);
}

/* One cycle: what was done, how it went. */
struct cp_cycle {
	enum cp_fault fault;
	char what[96];
	double secs;
	unsigned checks; /* passed */
	uint64_t txns, committed, kv_ops;
	/* Over the whole history at this cycle's checks: accounts whose
	 * acknowledged commit is missing; sercheck anomalies and lincheck
	 * keys without a linearization (a checker's error counts 1). */
	uint64_t lost, anomalies;
	bool ran;  /* the checks over the whole history ran */
	bool full; /* they were due (--full-every) */
	bool ok;
	unsigned due; /* checks due */
	/* Where the cycle's time went (ms), CP_PH_* */
	double ph[8];
};

/* A cycle's phases: the workloads run, the fault (kill and reap),
 * every live machine in a configuration without the ones gone
 * (suspicion and recovery), the replacements up, every machine in a
 * configuration with them, every region at full replication (copies
 * filled), the pause, the checks. */
enum {
	CP_PH_RUN,
	CP_PH_FAULT,
	CP_PH_REMOVED,
	CP_PH_JOIN,
	CP_PH_WHOLE,
	CP_PH_COPIES,
	CP_PH_PAUSE,
	CP_PH_CHECKS
};

static void zk_do(struct fails *f, const char *verb, unsigned k)
{
	char line[128];
	int st = tu_zk_member(rb_zk_script, rb_zk_dir, k, verb, line,
	                      sizeof(line));
	if (st)
		failed(f,
		       "zk-local %s of ZooKeeper server %u: %d (log: %s/%u/"
		       "zk.log)",
		       verb, k, st, rb_zk_dir, k);
}

static unsigned zk_wait_leader(unsigned not )
{
	uint64_t dl = np_now_ns() + CP_ELECT_MS * 1000000ull;
	for (;;) {
		unsigned k = zkl_leader(rb_zk_script, rb_zk_dir, CP_ZK);
		if ((k && k != not ) || np_now_ns() >= dl)
			return k != not ? k : 0;
		pause_ms(20);
	}
}

/* A live machine whose loss must be followed by a copy: a replica of a
 * region that has no extra backup (the region's next replica then holds
 * no copy of it). Where a late machine grows into a region as its extra
 * (ring.h, growth), the loss of a replica may make the extra a replica
 * with its copy complete, and no copy follows: the campaign found cycle
 * 4 of seed 66838 (restart_copy) waiting 20 s for one. Else any machine
 * that holds a region (a late machine may hold none: then no copy would
 * follow its loss). */
static unsigned cp_copy_victim(void)
{
	uint64_t sure = 0, holders = 0;
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct held_report *r = cp_ask_held(i);
		if (r->n)
			holders |= 1ull << i;
		for (unsigned k = 0; k < r->n; k++)
			if (r->h[k].extra == FARM_RING_NO_EXTRA &&
			    r->h[k].nreps == CP_REPLICAS)
				sure |= 1ull << i;
		free(r);
	}
	assert_true(holders != 0);
	uint64_t from = sure ? sure : holders;
	return cp_nth(from, cp_draw(cp_count(from)));
}

/* Until some live machine copies a region (data recovery): whether one
 * was seen within 20 s. */
static bool cp_await_copying(void)
{
	uint64_t dl = np_now_ns() + 20000000000ull;
	while (np_now_ns() < dl) {
		for (unsigned i = 0; i < 64; i++) {
			if (!cp_is(cp_live, i))
				continue;
			struct held_report *r = cp_ask_held(i);
			bool copying = rp_copying(r);
			free(r);
			if (copying)
				return true;
		}
		pause_ms(2);
	}
	return false;
}

/* A machine that holds a region killed (into *@v and *@gone), its
 * configuration awaited, then a copy awaited: 0 when one was seen in
 * progress; 2 when none was and every region is complete already (at
 * exactly its replicas, all machines in one configuration: none was
 * needed, or one ran between two looks; either way the fault's premise
 * failed, not the system); 1 when none was and replicas are still short
 * (what every machine holds is printed); -1 (failed into @f) when no
 * configuration without it came. Before a second fault that must come
 * during data recovery. */
static int cp_kill_until_copying(unsigned *v, uint64_t *gone, struct fails *f)
{
	char why[256];
	*v = cp_copy_victim();
	cp_kill(*v);
	*gone = 1ull << *v;
	if (cp_await_config(CP_RECONF_MS, why, sizeof(why))) {
		failed(f, "no configuration without machine %u: %s", *v, why);
		return -1;
	}
	/* Once some new backup has read part of a region. */
	if (cp_await_copying())
		return 0;
	unsigned nreg;
	if (!cp_await_replicated(0, why, sizeof(why), &nreg)) {
		printf("campaign: no copy seen in progress after machine %u's "
		       "kill, and %u regions are complete at their "
		       "replicas\n",
		       *v, nreg);
		return 2;
	}
	printf("campaign: no copy after machine %u's kill, and %s\n", *v, why);
	cp_dump_held();
	return 1;
}

/* Every live machine at once: stopped first, each waited on until it
 * has stopped (tu_stop), so that none sees another die and reconfigures
 * in between (a power loss takes all at once; test_restart does the
 * same), killed, then restarted on its directory;
 * their histories go on in the same files. The machines in *@n, the
 * transactions left open in *@sealed; the time until all were up. */
static double cp_restart_all(unsigned *n, unsigned *sealed)
{
	uint64_t all = cp_live;
	*n = cp_count(all);
	*sealed = 0;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			assert_int_equal(tu_stop(rb_cl.pid[i]), 0);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			cp_kill(i);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i)) {
			int rc = tx_hist_seal(&rb_cl, i);
			assert_true(rc >= 0);
			*sealed += (unsigned)rc;
			cp_killed &= ~(1ull << i);
		}
	uint64_t t = np_now_ns();
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i)) {
			cp_args[i] =
			        (struct cp_arg){.mode = CP_RESTART, .n = *n};
			np_spawn_one(&rb_cl, i, cp_machine, &cp_args[i]);
		}
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			np_expect(&rb_cl, i, 'R', CP_JOIN_MS + 30000);
	double up = (double)(np_now_ns() - t) / 1e6;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			np_expect(&rb_cl, i, 'C', 60000);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			np_send(&rb_cl, i, 'G');
	cp_live = all;
	return up;
}

/* The refusals every live machine counted, summed, in @r. */
static void cp_refusals_sum(struct cp_refusals *r)
{
	memset(r, 0, sizeof(*r));
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			struct cp_refusals x;
			np_send(&rb_cl, i, 'u');
			np_expect(&rb_cl, i, 'U', 30000);
			np_recv(&rb_cl, i, &x, sizeof(x), 1000);
			r->frames += x.frames;
			r->lease += x.lease;
			r->stale += x.stale;
			r->rec += x.rec;
		}
}

/* The process in slot @from moves to slot @to (the parent's pipes and
 * pid), which frees @from's for a new holder of its id. */
static void cp_slot_move(unsigned from, unsigned to)
{
	rb_cl.pid[to] = rb_cl.pid[from];
	rb_cl.to[to] = rb_cl.to[from];
	rb_cl.from[to] = rb_cl.from[from];
	rb_cl.pid[from] = 0;
	rb_cl.to[from] = rb_cl.from[from] = -1;
}

/* The zombie's counts against what it must have done: every request
 * after SIGCONT fenced, no transfer committed, its removal known. */
static void cp_zombie_judge(unsigned v, const struct cp_zombie *z,
                            struct fails *f)
{
	zp_print("before the stop (control)", &z->control);
	zp_print("after SIGCONT", &z->after);
	printf("zombie %u after SIGCONT: %" PRIu64
	       " transfers committed, %" PRIu64 " attempts, %" PRIu64
	       " given up; %" PRIu64 " messages and %" PRIu64
	       " frames sent, %" PRIu64 " calls timed out, %" PRIu64
	       " peer deaths; %s removed "
	       "%" PRIu64 " ms after it began\n",
	       v, z->k.transfers, z->k.attempts, z->k.failed, z->sent,
	       z->frames, z->timeouts, z->peerdead,
	       z->removed ? "knew it was" : "did NOT know it was",
	       z->t_know_ms);
	if (z->control.executed[ZP_READ] != ZP_TARGETS ||
	    z->control.executed[ZP_CAS] != ZP_TARGETS)
		failed(f,
		       "zombie %u: the control requests before the stop "
		       "did not all execute: the probes prove nothing",
		       v);
	for (int op = 0; op < ZP_NOPS; op++)
		if (z->after.fenced[op] != ZP_TARGETS || z->after.executed[op])
			failed(f,
			       "zombie %u: %u of %u %ss after SIGCONT "
			       "fenced, %u executed",
			       v, z->after.fenced[op], ZP_TARGETS,
			       zp_op_name(op), z->after.executed[op]);
	if (z->k.transfers)
		failed(f,
		       "zombie %u committed %" PRIu64 " transfers after "
		       "its id was taken",
		       v, z->k.transfers);
	if (!z->removed)
		failed(f, "zombie %u did not learn it was removed", v);
}

/* The zombie in slot @slot (machine @v) has said it stopped: reap it and
 * close its pipes; it must have exited cleanly. */
static void cp_reap_zombie(unsigned slot, unsigned v, struct fails *f)
{
	int st = tu_reap(rb_cl.pid[slot]);
	rb_cl.pid[slot] = 0;
	close(rb_cl.to[slot]);
	close(rb_cl.from[slot]);
	rb_cl.to[slot] = rb_cl.from[slot] = -1;
	if (st)
		failed(f, "machine %u (the zombie) exited with %d", v, st);
}

/* zombie_reuse (cp_fault): see the head of the file. */
static void cp_zombie_reuse(struct cp_cycle *cy, struct fails *f)
{
	unsigned cm = cp_cm();
	uint64_t others = cp_live & ~(1ull << cm);
	unsigned v = cp_nth(others, cp_draw(cp_count(others)));
	char why[256] = "";
	struct cp_counts n;
	struct cp_zombie z = {0};
	np_send(&rb_cl, v, 'P');
	np_expect(&rb_cl, v, 'p', 60000);
	np_recv(&rb_cl, v, &n, sizeof(n), 1000);
	np_send(&rb_cl, v, 'z');
	np_expect(&rb_cl, v, 'z', 60000);
	np_recv(&rb_cl, v, &z.control, sizeof(z.control), 1000);
	uint64_t t = np_now_ns();
	assert_int_equal(tu_stop(rb_cl.pid[v]), 0);
	cp_live &= ~(1ull << v);
	cp_slot_move(v, CP_ZSLOT);
	if (cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f,
		       "machine %u stopped: no configuration without it "
		       "within %d ms: %s",
		       v, CP_RECONF_MS, why);
	else if (!cp_add_reused(v))
		failed(f, "a new holder of id %u was not admitted", v);
	else if (cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f, "after id %u's new holder joined: %s", v, why);
	double stopped = (double)(np_now_ns() - t) / 1e6;
	struct cp_refusals r0, r1;
	cp_refusals_sum(&r0);
	assert_int_equal(kill(rb_cl.pid[CP_ZSLOT], SIGCONT), 0);
	np_send(&rb_cl, CP_ZSLOT, 'Y');
	np_expect(&rb_cl, CP_ZSLOT, 'Z',
	          CP_ZOMBIE_ACT_MS + CP_ZOMBIE_KNOW_MS + 60000);
	struct zp_counts control = z.control;
	np_recv(&rb_cl, CP_ZSLOT, &z, sizeof(z), 1000);
	z.control = control;
	cp_reap_zombie(CP_ZSLOT, v, f);
	snprintf(cy->what, sizeof(cy->what),
	         "SIGSTOP machine %u %.0f ms, id reused, SIGCONT", v, stopped);
	/* A zombie let in may have broken the others (their channels, their
	 * logs): judged first, and nothing more asked of them then. */
	unsigned nf = f->n;
	cp_zombie_judge(v, &z, f);
	if (f->n != nf)
		return;
	cp_refusals_sum(&r1);
	printf("zombie %u: the others refused %" PRIu64 " frames, %" PRIu64
	       " lease messages, %" PRIu64 " stale LOCK records, %" PRIu64
	       " recovery messages meanwhile\n",
	       v, r1.frames - r0.frames, r1.lease - r0.lease,
	       r1.stale - r0.stale, r1.rec - r0.rec);
	/* Its frames and log records are fenced at the fabric (shm): they
	 * never reach the others' counters. Its lease REQUESTs do, and must
	 * be counted refused at the CM. */
	if (r1.lease == r0.lease)
		failed(f,
		       "zombie %u: no lease message was refused while it "
		       "ran: its lease REQUESTs went unseen or were taken",
		       v);
}

/* sigstop (cp_fault): see the head of the file. */
static void cp_sigstop(uint64_t others, struct cp_cycle *cy, uint64_t *gone,
                       struct fails *f)
{
	char why[256] = "";
	unsigned v = cp_nth(others, cp_draw(cp_count(others)));
	uint64_t t = np_now_ns();
	assert_int_equal(tu_stop(rb_cl.pid[v]), 0);
	cp_live &= ~(1ull << v);
	int rc = cp_await_config(CP_RECONF_MS, why, sizeof(why));
	double stopped = (double)(np_now_ns() - t) / 1e6;
	assert_int_equal(kill(rb_cl.pid[v], SIGCONT), 0);
	if (rc)
		failed(f,
		       "machine %u stopped: no configuration "
		       "without it within %d ms: %s",
		       v, CP_RECONF_MS, why);
	/* It must learn it was removed, and stop. */
	struct cp_counts n;
	np_expect(&rb_cl, v, 'Z', 60000);
	np_recv(&rb_cl, v, &n, sizeof(n), 1000);
	cp_reap_zombie(v, v, f);
	*gone = 1ull << v;
	snprintf(cy->what, sizeof(cy->what),
	         "SIGSTOP machine %u %.0f ms, SIGCONT", v, stopped);
}

/* --hold-end: those of @others that hold no copy of some region machine
 * CP_HOLD backs up (cold objects can go there), and in *@prim for each
 * such machine the primary of one such region; @others when none does. */
static uint64_t cp_cold_victims(uint64_t others, unsigned *prim)
{
	struct held_report *r = cp_ask_held(CP_HOLD);
	uint64_t can = 0;
	for (unsigned k = 0; k < r->n; k++) {
		const struct rp_held *h = &r->h[k];
		if (h->nreps < 2 || h->reps[0] == CP_HOLD || h->reps[0] >= 64 ||
		    !cp_is(cp_live, h->reps[0]))
			continue;
		uint64_t in = 0;
		for (unsigned x = 0; x < h->nreps; x++)
			in |= h->reps[x] < 64 ? 1ull << h->reps[x] : 0;
		for (unsigned v = 0; v < 64; v++)
			if (cp_is(others & ~in & ~can, v))
				prim[v] = h->reps[0];
		can |= others & ~in;
	}
	free(r);
	return can ? can : others;
}

/* --hold-end: machine @v, about to be killed, writes the cold objects
 * machine @p (the primary of a region CP_HOLD backs up and @v holds no
 * copy of) made (cp_make_cold, cp_write_cold), both paused meanwhile:
 * the images CP_HOLD gets only if recovery applies the COMMIT-BACKUPs its
 * log of @v holds, which the comparison of copies then checks. */
static void cp_cold_before_kill(unsigned v, unsigned p)
{
	struct cp_counts n;
	unsigned made = 0, wrote = 0;
	if (p < 64 && p != v) {
		np_send(&rb_cl, p, 'P');
		np_expect(&rb_cl, p, 'p', 60000);
		np_recv(&rb_cl, p, &n, sizeof(n), 1000);
		np_send(&rb_cl, p, 'W');
		np_expect(&rb_cl, p, 'w', 60000);
		np_recv(&rb_cl, p, &made, sizeof(made), 1000);
		np_send(&rb_cl, p, 'r');
	}
	np_send(&rb_cl, v, 'P');
	np_expect(&rb_cl, v, 'p', 60000);
	np_recv(&rb_cl, v, &n, sizeof(n), 1000);
	np_send(&rb_cl, v, 'K');
	np_expect(&rb_cl, v, 'k', 60000);
	np_recv(&rb_cl, v, &wrote, sizeof(wrote), 1000);
	printf("campaign: machine %u made %u cold objects, machine %u wrote "
	       "%u of them (backed up at machine %u), then is killed\n",
	       p, made, v, wrote, CP_HOLD);
}

/* Apply fault @fl; the machines that left in *@gone (to be replaced, in
 * their domains). Failures in @f. */
/* Both live machines of a domain that has two (a and b, by the layout),
 * killed at once. */
static void cp_fault_domain(unsigned cm, struct cp_cycle *cy, uint64_t *gone)
{
	unsigned pick[3], n = 0;
	for (unsigned d = 0; d < 3; d++) {
		unsigned k = 0;
		for (unsigned i = 0; i < 64; i++)
			k += cp_is(cp_live, i) && cp_dom[i] == d;
		if (k == 2)
			pick[n++] = d;
	}
	assert_true(n > 0);
	unsigned d = pick[cp_draw(n)], a = NP_NM, b = NP_NM;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i) && cp_dom[i] == d)
			*(a == NP_NM ? &a : &b) = i;
	cp_kill(a);
	cp_kill(b);
	*gone = (1ull << a) | (1ull << b);
	snprintf(cy->what, sizeof(cy->what), "kill -9 %s (machines %u, %u)%s",
	         cp_zone[d], a, b,
	         a == cm || b == cm ? ", the CM among them" : "");
}

/* A machine killed, and a second one (F_COPY_KILL) or all (F_RESTART_COPY:
 * killed and restarted) while the first one's data is being copied. */
static void cp_fault_copying(enum cp_fault fl, struct cp_cycle *cy,
                             uint64_t *gone, struct fails *f)
{
	unsigned v;
	int c = cp_kill_until_copying(&v, gone, f);
	if (c < 0)
		return;
	const char *how =
	        c == 2 ? "(no copy seen, none short)" : "while copying";
	if (fl == F_COPY_KILL) {
		unsigned w = cp_nth(cp_live, cp_draw(cp_count(cp_live)));
		cp_kill(w);
		*gone |= 1ull << w;
		snprintf(cy->what, sizeof(cy->what),
		         "kill -9 machine %u, machine %u %s", v, w, how);
	} else {
		unsigned n, sealed;
		double up = cp_restart_all(&n, &sealed);
		snprintf(cy->what, sizeof(cy->what),
		         "kill -9 machine %u, all %u restarted %s (up in "
		         "%.0f ms)",
		         v, n, how, up);
	}
	if (c == 1)
		failed(f,
		       "no copy was seen in progress after machine %u's kill: "
		       "the %s did not come during data recovery",
		       v, fl == F_COPY_KILL ? "second kill" : "restart");
}

/* The ZooKeeper leader killed until another leads, restarted; then the
 * new leader the same way. */
static void cp_fault_zk(struct cp_cycle *cy, struct fails *f)
{
	unsigned k1 = zk_wait_leader(0);
	if (!k1) {
		failed(f, "no ZooKeeper server leads");
		return;
	}
	zk_do(f, "kill", k1);
	if (!zk_wait_leader(k1))
		failed(f,
		       "no ZooKeeper server led within %d ms of server %u's "
		       "kill",
		       CP_ELECT_MS, k1);
	zk_do(f, "start", k1);
	unsigned k2 = zk_wait_leader(0);
	if (!k2) {
		failed(f, "no ZooKeeper server leads after server %u's restart",
		       k1);
		return;
	}
	zk_do(f, "kill", k2);
	if (!zk_wait_leader(k2))
		failed(f,
		       "no ZooKeeper server led within %d ms of server %u's "
		       "kill",
		       CP_ELECT_MS, k2);
	zk_do(f, "start", k2);
	snprintf(cy->what, sizeof(cy->what),
	         "ZooKeeper servers %u, then %u killed, restarted", k1, k2);
}

static void cp_fault(enum cp_fault fl, struct cp_cycle *cy, uint64_t *gone,
                     struct fails *f)
{
	unsigned cm = cp_cm();
	uint64_t others = cp_live & ~(1ull << cm);
	if (opt_hold_end && others != 1ull << CP_HOLD)
		others &= ~(1ull << CP_HOLD); /* it must see the round */
	unsigned prim[64];
	for (unsigned i = 0; i < 64; i++)
		prim[i] = NP_NM;
	if (opt_hold_end)
		others = cp_cold_victims(others, prim);
	*gone = 0;
	switch (fl) {
	case F_KILL_MEMBER:
	case F_KILL_CM: {
		unsigned v =
		        fl == F_KILL_CM
		                ? cm
		                : cp_nth(others, cp_draw(cp_count(others)));
		if (opt_hold_end)
			cp_cold_before_kill(v, prim[v]);
		cp_kill(v);
		*gone = 1ull << v;
		snprintf(cy->what, sizeof(cy->what), "kill -9 machine %u%s", v,
		         v == cm ? " (CM)" : "");
		break;
	}
	case F_SIGSTOP: cp_sigstop(others, cy, gone, f); break;
	case F_DOMAIN: cp_fault_domain(cm, cy, gone); break;
	case F_COPY_KILL:
	case F_RESTART_COPY: cp_fault_copying(fl, cy, gone, f); break;
	case F_RESTART: {
		unsigned n, sealed;
		double up = cp_restart_all(&n, &sealed);
		snprintf(cy->what, sizeof(cy->what),
		         "kill -9 all %u, restart (up in %.0f ms; %u open "
		         "txns)",
		         n, up, sealed);
		break;
	}
	case F_ZK_KILL: cp_fault_zk(cy, f); break;
	case F_ZOMBIE_REUSE: cp_zombie_reuse(cy, f); break;
	default: fail_msg("no fault %d", (int)fl);
	}
}

/* ---- the parent: the checks --------------------------------------------- */

/* Pause every live machine (every operation in flight answered); their
 * counts in @n. */
static void cp_pause(struct cp_counts *n)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'P');
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			np_expect(&rb_cl, i, 'p', 60000);
			np_recv(&rb_cl, i, &n[i], sizeof(n[i]), 1000);
		}
}

static void cp_resume(void)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'r');
}

static const char *cp_role(int role)
{
	return role == FARM_AS_PRIMARY ? "primary" : "backup";
}

/* Objects that differ between two copies, for the report: the first
 * CP_PROBE_OBJS of them, each as both copies' lists have it. */
struct cp_differ {
	unsigned n;
	struct cp_obj a[CP_PROBE_OBJS], b[CP_PROBE_OBJS];
	/* The first objects allocated at one copy only: [0] at the first
	 * machine, [1] at the second. */
	struct cp_obj only[2][CP_PROBE_OBJS];
};

/* Two copies of region @g, at machines @i and @j: the objects allocated
 * at both whose bytes differ (returned; the first ones in @dd), and in
 * one[0] those allocated at @i only, in one[1] at @j only. -1: a list
 * missing. */
static long cp_diff_copies(uint32_t g, unsigned i, unsigned j, long one[2],
                           struct cp_differ *dd)
{
	char pi[320], pj[320];
	cp_copy_path(pi, sizeof(pi), rb_cl.root, g, i);
	cp_copy_path(pj, sizeof(pj), rb_cl.root, g, j);
	size_t li = 0, lj = 0;
	struct cp_obj *a = np_read_file(pi, &li), *b = np_read_file(pj, &lj);
	size_t na = li / sizeof(*a), nb = lj / sizeof(*b), x = 0, y = 0;
	long differ = (!a && li) || (!b && lj) ? -1 : 0;
	one[0] = one[1] = 0;
	dd->n = 0;
	while (differ >= 0 && (x < na || y < nb)) {
		if (y == nb || (x < na && a[x].off < b[y].off)) {
			if (one[0] < (long)CP_PROBE_OBJS)
				dd->only[0][one[0]] = a[x];
			one[0]++;
			x++;
		} else if (x == na || b[y].off < a[x].off) {
			if (one[1] < (long)CP_PROBE_OBJS)
				dd->only[1][one[1]] = b[y];
			one[1]++;
			y++;
		} else {
			if (a[x].hash != b[y].hash && dd->n < CP_PROBE_OBJS) {
				dd->a[dd->n] = a[x];
				dd->b[dd->n++] = b[y];
			}
			differ += a[x++].hash != b[y++].hash;
		}
	}
	free(a);
	free(b);
	return differ;
}

/* ---- --reuse-measure -------------------------------------------------- */

#define CP_RM_SIZES  3
#define CP_RM_REGION (16u << 20) /* the campaign's region size (config) */
#define CP_RM_MAP    (CP_RM_REGION / 4096u / 8u)
static const uint32_t cp_rm_chunk[CP_RM_SIZES] = {4096u, 65536u, 1u << 20};

/* What a new holder's copies differ by from its old holder's. */
struct cp_rm {
	long same, changed, freed, added;
	uint64_t obj_bytes;          /* changed and allocated objects */
	uint64_t dirty[CP_RM_SIZES]; /* chunks that hold a difference */
	uint64_t used[CP_RM_SIZES];  /* chunks that hold an object */
	uint64_t fresh, fresh_ns;    /* the fresh copies' READs, time */
	uint64_t live_bytes;         /* objects allocated at the new copy */
	unsigned regions, copied;    /* compared; copied by the new holder */
};
static struct cp_rm cp_rm_all; /* over the run */
/* Each machine's regions at the last checks, and those of a killed one
 * kept as was-<region>-m<id> for its new holder's checks. */
static uint32_t cp_rm_last[NP_NM][RP_MAXREG], cp_rm_kept[NP_NM][RP_MAXREG];
static unsigned cp_rm_nlast[NP_NM], cp_rm_nkept[NP_NM];

static void cp_was_path(char *path, size_t len, uint32_t region, unsigned m)
{
	snprintf(path, len, "%.256s/was-%08" PRIx32 "-m%u", rb_cl.root, region,
	         m);
}

/* Killed machine @id's lists of the last checks, kept for its new
 * holder's (which writes the same names). */
static void cp_rm_keep(unsigned id)
{
	cp_rm_nkept[id] = 0;
	for (unsigned k = 0; k < cp_rm_nlast[id]; k++) {
		char from[320], to[320];
		cp_copy_path(from, sizeof(from), rb_cl.root, cp_rm_last[id][k],
		             id);
		cp_was_path(to, sizeof(to), cp_rm_last[id][k], id);
		if (!rename(from, to))
			cp_rm_kept[id][cp_rm_nkept[id]++] = cp_rm_last[id][k];
	}
}

/* The chunks of every size that [@off, @off + @len) touches, marked in
 * @map; those not marked before counted in @n. */
static void cp_rm_mark(uint8_t (*map)[CP_RM_MAP], uint64_t off, uint64_t len,
                       uint64_t *n)
{
	for (unsigned z = 0; z < CP_RM_SIZES; z++) {
		uint64_t c0 = off / cp_rm_chunk[z];
		uint64_t c1 = (off + len - 1) / cp_rm_chunk[z];
		for (uint64_t c = c0; c <= c1 && c < CP_RM_MAP * 8u; c++) {
			if (map[z][c / 8] & (1u << (c % 8)))
				continue;
			map[z][c / 8] |= (uint8_t)(1u << (c % 8));
			n[z]++;
		}
	}
}

/* Region @g: the old holder's list against new holder @m's, into @r. */
static void cp_rm_region(uint32_t g, unsigned m, struct cp_rm *r)
{
	static uint8_t dirty[CP_RM_SIZES][CP_RM_MAP],
	        used[CP_RM_SIZES][CP_RM_MAP];
	char pw[320], pn[320];
	cp_was_path(pw, sizeof(pw), g, m);
	cp_copy_path(pn, sizeof(pn), rb_cl.root, g, m);
	size_t la = 0, lb = 0;
	struct cp_obj *a = np_read_file(pw, &la), *b = np_read_file(pn, &lb);
	size_t na = a ? la / sizeof(*a) : 0, nb = b ? lb / sizeof(*b) : 0;
	memset(dirty, 0, sizeof(dirty));
	memset(used, 0, sizeof(used));
	for (size_t x = 0, y = 0; x < na || y < nb;) {
		const struct cp_obj *o;
		bool diff = true, freed = false;
		if (y == nb || (x < na && a[x].off < b[y].off)) {
			o = &a[x++];
			freed = true; /* its header alone would say so */
			r->freed++;
		} else if (x == na || b[y].off < a[x].off) {
			o = &b[y++];
			r->added++;
			r->live_bytes += (uint64_t)o->lines * 64u;
		} else {
			diff = a[x].hash != b[y].hash ||
			       a[x].lines != b[y].lines;
			o = &b[y++];
			x++;
			r->live_bytes += (uint64_t)o->lines * 64u;
			r->changed += diff;
			r->same += !diff;
		}
		if (diff && !freed)
			r->obj_bytes += (uint64_t)o->lines * 64u;
		cp_rm_mark(used, o->off, (uint64_t)o->lines * 64u, r->used);
		if (diff)
			cp_rm_mark(dirty, o->off, (uint64_t)o->lines * 64u,
			           r->dirty);
	}
	free(a);
	free(b);
}

static void cp_rm_add(struct cp_rm *to, const struct cp_rm *r)
{
	to->same += r->same;
	to->changed += r->changed;
	to->freed += r->freed;
	to->added += r->added;
	to->obj_bytes += r->obj_bytes;
	for (unsigned z = 0; z < CP_RM_SIZES; z++) {
		to->dirty[z] += r->dirty[z];
		to->used[z] += r->used[z];
	}
	to->fresh += r->fresh;
	to->fresh_ns += r->fresh_ns;
	to->live_bytes += r->live_bytes;
	to->regions += r->regions;
	to->copied += r->copied;
}

static void cp_rm_say(const char *who, const struct cp_rm *r)
{
	double mb = 1e6;
	printf("reuse-measure: %s: %u regions held before and after (%u "
	       "copied afresh): the fresh copies READ %.2f MB in %.0f ms "
	       "(summed), its objects in use being %.3f MB; the old copies: "
	       "%ld objects equal, %ld changed, "
	       "%ld freed, %ld allocated since; a delta copy would READ "
	       "%.3f MB of objects, or in chunks of 4 KiB %.2f MB, 64 KiB "
	       "%.2f MB, 1 MiB %.2f MB, each with 16 B a chunk in use of "
	       "summary (%.3f MB at 4 KiB)\n",
	       who, r->regions, r->copied, (double)r->fresh / mb,
	       (double)r->fresh_ns / 1e6, (double)r->live_bytes / mb, r->same,
	       r->changed, r->freed, r->added, (double)r->obj_bytes / mb,
	       (double)r->dirty[0] * cp_rm_chunk[0] / mb,
	       (double)r->dirty[1] * cp_rm_chunk[1] / mb,
	       (double)r->dirty[2] * cp_rm_chunk[2] / mb,
	       (double)r->used[0] * 16.0 / mb);
}

/* At the checks: each new holder whose old holder's lists were kept,
 * compared; every machine's regions remembered for the next kill. */
static void cp_rm_report(const struct cp_hashes *h)
{
	for (unsigned i = 0; i < NP_NM; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct cp_rm r = {0};
		for (unsigned k = 0; cp_rm_nkept[i] && k < h[i].n; k++) {
			r.copied += h[i].dr_bytes[k] != 0;
			bool kept = false;
			for (unsigned q = 0; q < cp_rm_nkept[i]; q++)
				kept |= cp_rm_kept[i][q] == h[i].region[k];
			if (!kept)
				continue;
			cp_rm_region(h[i].region[k], i, &r);
			r.fresh += h[i].dr_bytes[k];
			r.fresh_ns += h[i].dr_ns[k];
			r.regions++;
		}
		for (unsigned q = 0; q < cp_rm_nkept[i]; q++) {
			char pw[320];
			cp_was_path(pw, sizeof(pw), cp_rm_kept[i][q], i);
			(void)unlink(pw);
		}
		if (cp_rm_nkept[i]) {
			char who[64];
			snprintf(who, sizeof(who), "new holder of id %u", i);
			cp_rm_say(who, &r);
			cp_rm_add(&cp_rm_all, &r);
			cp_rm_say("so far", &cp_rm_all);
		}
		cp_rm_nkept[i] = 0;
		cp_rm_nlast[i] = FARM_MIN(h[i].n, RP_MAXREG);
		memcpy(cp_rm_last[i], h[i].region,
		       cp_rm_nlast[i] * sizeof(uint32_t));
	}
}

/* Machine @m's probe answer (its file), or NULL. */
static struct cp_probe_ans *cp_probe_ask(unsigned m)
{
	char path[320];
	cp_probe_path(path, sizeof(path), rb_cl.root, m);
	(void)unlink(path);
	np_send(&rb_cl, m, 'O');
	np_expect(&rb_cl, m, 'o', 30000);
	size_t len = 0;
	struct cp_probe_ans *a = np_read_file(path, &len);
	if (a && len != sizeof(*a)) {
		free(a);
		a = NULL;
	}
	return a;
}

/* How machine @m holds the region: role, filling or complete, its
 * replicas as it sees them, a demoted copy, data recovery's record. */
static void cp_probe_say_copy(unsigned m, const struct cp_probe_ans *a)
{
	printf("    machine %u (configuration %" PRIu64 "): %s%s%s; replicas",
	       m, a->config,
	       a->role < 0                  ? "no copy"
	       : a->role == FARM_AS_PRIMARY ? "primary"
	                                    : "backup",
	       a->role == FARM_AS_BACKUP
	               ? (a->filling ? " (filling)" : " (complete)")
	               : "",
	       a->demoted ? ", a demoted copy mapped" : "");
	for (unsigned x = 0; x < a->nreps && x < FARM_RING_MAX_REPLICAS; x++)
		printf("%s%" PRIu32, x ? "," : " ", a->reps[x]);
	if (a->extra != FARM_RING_NO_EXTRA)
		printf(" (extra %" PRIu32 ")", a->extra);
	if (a->have_dr)
		printf("; its copy: state %d, %" PRIu64 " bytes read, %" PRIu64
		       " from the demoted copy, %" PRIu64 " fixed at the "
		       "check, %" PRIu64 " again, last error %d",
		       (int)a->dr.state, a->dr.bytes, a->dr.local, a->dr.fixed,
		       a->dr.retries, a->dr.last_err);
	else
		printf("; never copied here");
	printf("\n");
}

/* 16 bytes of @p from @at, in hex. */
static void cp_hex16(const char *who, const uint8_t *p, unsigned at)
{
	printf("      %-12s +%-4u", who, at);
	for (unsigned k = 0; k < 16; k++)
		printf(" %02x", p[at + k]);
	printf("\n");
}

/* 16 bytes of object @k from @at at both copies, and at a demoted copy
 * where one is mapped. */
static void cp_probe_rows(const struct cp_probe_ans *ai,
                          const struct cp_probe_ans *aj, unsigned k, unsigned i,
                          unsigned j, unsigned at)
{
	char w[4][32];
	snprintf(w[0], sizeof(w[0]), "m%u", i);
	snprintf(w[1], sizeof(w[1]), "m%u", j);
	snprintf(w[2], sizeof(w[2]), "m%u demoted", i);
	snprintf(w[3], sizeof(w[3]), "m%u demoted", j);
	cp_hex16(w[0], ai->obj[k], at);
	cp_hex16(w[1], aj->obj[k], at);
	if (ai->demoted)
		cp_hex16(w[2], ai->dem[k], at);
	if (aj->demoted)
		cp_hex16(w[3], aj->dem[k], at);
}

/* One object that differs: both header words, the first differing byte,
 * 16 bytes from there at each copy (and at a demoted copy), and so for
 * the body. */
static void cp_probe_say_obj(const struct cp_differ *dd, unsigned k, unsigned i,
                             unsigned j, const struct cp_probe_ans *ai,
                             const struct cp_probe_ans *aj)
{
	const struct cp_obj *x = &dd->a[k], *y = &dd->b[k];
	printf("    object +%#" PRIx64 ": machine %u header %#" PRIx64
	       " (version %#" PRIx64 ", lock %u) incarnation %#" PRIx64
	       ", %u lines; machine %u header %#" PRIx64 " (version %#" PRIx64
	       ", lock %u) incarnation %#" PRIx64 ", %u lines\n",
	       x->off, i, x->v, x->v >> 2, (unsigned)(x->v & 3), x->w, x->lines,
	       j, y->v, y->v >> 2, (unsigned)(y->v & 3), y->w, y->lines);
	if (!ai || !aj)
		return;
	unsigned len =
	        FARM_MIN(FARM_MIN(x->lines, y->lines) * 64u, CP_PROBE_BYTES);
	/* The first difference in the header (version, incarnation), then
	 * the first in the body. */
	for (unsigned from = 0, at; from < len; from = 16) {
		at = from;
		while (at < len && ai->obj[k][at] == aj->obj[k][at])
			at++;
		if (at == len) {
			printf("      bytes %u..%u equal now\n", from, len);
			break;
		}
		cp_probe_rows(ai, aj, k, i, j,
		              FARM_MIN(at & ~7u, CP_PROBE_BYTES - 16));
		if (at >= 16)
			break;
	}
}

/* Say what differs between the copies of region @g at machines @i and
 * @j, and how each holds the region (paused machines). */
static void cp_explain(uint32_t g, unsigned i, unsigned j,
                       const struct cp_differ *dd)
{
	struct cp_probe q = {.region = g, .n = dd->n};
	for (unsigned k = 0; k < dd->n; k++)
		q.off[k] = dd->a[k].off;
	char path[320];
	cp_probe_path(path, sizeof(path), rb_cl.root, ~0u);
	if (np_write_file(path, &q, sizeof(q)))
		return;
	struct cp_probe_ans *ai = cp_probe_ask(i), *aj = cp_probe_ask(j);
	printf("  region %#" PRIx32 ", machines %u and %u:\n", g, i, j);
	if (ai)
		cp_probe_say_copy(i, ai);
	if (aj)
		cp_probe_say_copy(j, aj);
	for (unsigned k = 0; k < dd->n; k++)
		cp_probe_say_obj(dd, k, i, j, ai, aj);
	free(ai);
	free(aj);
}

/* Of the objects allocated at one of machines @i and @j only (@one and
 * dd->only, as cp_diff_copies found them), those the primary of region
 * @g holds and its backup lacks fail the pair in @f; the first few are
 * looked up at the backup ('O'), and the failure says how many of them
 * it holds freed with a later incarnation (a committed free the primary
 * installed but whose slot it did not free: a leak; the last case known,
 * a free deferred while the adopter scanned its promoted region, its
 * records truncated before a restart_copy's power loss, is freed by the
 * restart since, src/txn/restart.c). Once every log is truncated a
 * complete backup
 * holds every object its primary does: a commit's allocations reach it
 * as COMMIT-BACKUP images, the rest through data recovery's copy (an
 * array's elements in one slab slot each: never written again, a copy of
 * the slot's first object alone left them out). Returns the objects
 * missing, leaks included. */
static long cp_missing(uint32_t g, unsigned i, int ri, unsigned j, int rj,
                       const long one[2], const struct cp_differ *dd,
                       struct fails *f)
{
	int p = ri == FARM_AS_PRIMARY && rj == FARM_AS_BACKUP   ? 0
	        : rj == FARM_AS_PRIMARY && ri == FARM_AS_BACKUP ? 1
	                                                        : -1;
	if (p < 0 || !one[p])
		return 0;
	unsigned prim = p ? j : i, back = p ? i : j;
	struct cp_probe q = {
	        .region = g,
	        .n = (uint32_t)FARM_MIN(one[p], (long)CP_PROBE_OBJS)};
	for (unsigned k = 0; k < q.n; k++)
		q.off[k] = dd->only[p][k].off;
	char path[320];
	cp_probe_path(path, sizeof(path), rb_cl.root, ~0u);
	struct cp_probe_ans *a =
	        np_write_file(path, &q, sizeof(q)) ? NULL : cp_probe_ask(back);
	unsigned leaks = 0;
	for (unsigned k = 0; a && k < q.n; k++) {
		uint64_t wb;
		memcpy(&wb, a->obj[k] + 8, 8);
		leaks += !farm_incarn_allocated(wb) &&
		         farm_incarn_count(wb) >
		                 farm_incarn_count(dd->only[p][k].w);
	}
	free(a);
	failed(f,
	       "region %#" PRIx32 ": %ld objects allocated at the primary "
	       "(machine %u) missing at its backup (machine %u), the first "
	       "at offset %#" PRIx64 "; %u of the first %" PRIu32
	       " held freed there with a later incarnation (a committed "
	       "free whose slot the primary kept)",
	       g, one[p], prim, back, q.off[0], leaks, q.n);
	return one[p];
}

/* Every region's copies (primary and backups): the objects allocated at
 * both hold the same bytes, once every log is truncated, and a backup
 * lacks none its primary holds (cp_missing). An object allocated at a
 * backup only is counted, not failed. Failures in @f. */
static void cp_check_copies(struct fails *f)
{
	struct cp_hashes *h = calloc(NP_NM, sizeof(*h));
	assert_non_null(h);
	uint64_t t0 = np_now_ns();
	for (int step = 0; step < 2; step++) {
		for (unsigned i = 0; i < 64; i++)
			if (cp_is(cp_live, i))
				np_send(&rb_cl, i, step ? 'H' : 'F');
		for (unsigned i = 0; i < 64; i++)
			if (cp_is(cp_live, i))
				np_expect(&rb_cl, i, step ? 'h' : 'f', 60000);
	}
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			np_recv(&rb_cl, i, &h[i], sizeof(h[i]), 5000);
			if (h[i].pending)
				failed(f,
				       "machine %u: %u COMMIT-BACKUPs not "
				       "truncated after 10 s",
				       i, h[i].pending);
			if (h[i].deferred)
				failed(f,
				       "machine %u: %" PRIu64
				       " committed frees "
				       "still deferred for their region's "
				       "adoption after 10 s (objects allocated "
				       "and locked at the primary)",
				       i, h[i].deferred);
		}
	unsigned pairs = 0, bad = 0;
	long differ = 0, only = 0, missing = 0;
	for (unsigned i = 0; i < 64; i++)
		for (unsigned k = 0; cp_is(cp_live, i) && k < h[i].n; k++)
			for (unsigned j = i + 1; j < 64; j++)
				for (unsigned q = 0;
				     cp_is(cp_live, j) && q < h[j].n; q++) {
					uint32_t g = h[i].region[k];
					if (h[j].region[q] != g)
						continue;
					long one[2] = {0, 0};
					struct cp_differ dd;
					long d = cp_diff_copies(g, i, j, one,
					                        &dd);
					pairs++;
					only += one[0] + one[1];
					missing += cp_missing(
					        g, i, h[i].role[k], j,
					        h[j].role[q], one, &dd, f);
					if (d == 0)
						continue;
					differ += d > 0 ? d : 0;
					if (bad++ >= 4)
						continue;
					failed(f,
					       "region %#" PRIx32
					       ": %ld objects "
					       "differ between machine %u (%s) "
					       "and machine %u (%s)",
					       g, d, i, cp_role(h[i].role[k]),
					       j, cp_role(h[j].role[q]));
					cp_explain(g, i, j, &dd);
				}
	printf("copies: %u pairs of copies compared, %ld objects differ, "
	       "%ld allocated at one copy only (%ld of them missing at a "
	       "backup), in %.0f ms\n",
	       pairs, differ, only, missing, (double)(np_now_ns() - t0) / 1e6);
	if (opt_reuse_measure)
		cp_rm_report(h);
	free(h);
}

/* Every committed write so far: the highest version per object, from
 * each machine's history records read once (tx_hist_committed_since). A
 * bounded summary: the objects transfers write are the accounts. */
#define CP_WKEYS 1024
static struct {
	uint64_t key[CP_WKEYS], maxv[CP_WKEYS], writes[CP_WKEYS];
	unsigned n;
	uint64_t overflow; /* writes of objects past CP_WKEYS */
	uint64_t off[NP_NM];
	uint64_t txns;
} cp_w;

static void cp_w_write(void *ctx, uint64_t key, uint64_t version)
{
	(void)ctx;
	unsigned i = 0;
	while (i < cp_w.n && cp_w.key[i] != key)
		i++;
	if (i == CP_WKEYS) {
		cp_w.overflow++;
		return;
	}
	if (i == cp_w.n)
		cp_w.key[cp_w.n++] = key;
	cp_w.maxv[i] = FARM_MAX(cp_w.maxv[i], version);
	cp_w.writes[i]++;
}

/* 3. Every write of a transaction reported committed, in any machine's
 * history so far, is present in scan @s (each account's version at least
 * the highest one written): lost accounts, plus committed writes of
 * objects that are not accounts. Reads only what the histories added
 * since the last pause. */
static unsigned cp_check_committed(const struct scan_report *s,
                                   struct committed *w, struct fails *f)
{
	uint64_t t0 = np_now_ns(), before = cp_w.txns;
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_used, i))
			continue;
		long k = tx_hist_committed_since(&rb_cl, i, &cp_w.off[i],
		                                 cp_w_write, NULL);
		if (k < 0)
			failed(f,
			       "machine %u: history unreadable after byte "
			       "%" PRIu64,
			       i, cp_w.off[i]);
		else
			cp_w.txns += (uint64_t)k;
	}
	w->s = s;
	for (unsigned k = 0; k < cp_w.n; k++) {
		unsigned a = rb_account(s, cp_w.key[k]);
		if (a < s->n)
			w->maxv[a] = cp_w.maxv[k];
		else
			w->unknown_keys += cp_w.writes[k];
	}
	w->unknown_keys += cp_w.overflow;
	unsigned lost = rb_committed_lost(w, f);
	printf("committed: %" PRIu64 " new transactions read (%" PRIu64
	       " so far), %u objects written; %u accounts lost a committed "
	       "write, in %.0f ms\n",
	       cp_w.txns - before, cp_w.txns, cp_w.n, lost,
	       (double)(np_now_ns() - t0) / 1e6);
	return lost;
}

/* The highest committed versions the whole histories' replay found (@w)
 * equal those step 3 gathered from each cycle's new records (@wi): the
 * summary misses no record and counts none twice. */
static void cp_check_summary(const struct committed *w,
                             const struct committed *wi, struct fails *f)
{
	unsigned differ = 0;
	for (unsigned a = 0; a < w->s->n; a++)
		if (w->maxv[a] != wi->maxv[a] && differ++ < 4)
			failed(f,
			       "account %#" PRIx64 ": the whole history's "
			       "highest committed version %" PRIu64
			       ", the cycles' summary's %" PRIu64,
			       w->s->addr[a], w->maxv[a], wi->maxv[a]);
	if (w->unknown_keys != wi->unknown_keys)
		failed(f,
		       "committed writes of unknown objects: %" PRIu64
		       " in the whole history, %" PRIu64 " in the summary",
		       w->unknown_keys, wi->unknown_keys);
}

/* 4. sercheck over every machine's whole history; the committed writes it
 * replays must be present too, and equal step 3's summary (@wi). */
static void cp_check_ser(struct cp_cycle *cy, const struct scan_report *s,
                         const struct committed *wi, struct fails *f)
{
	struct committed *w = calloc(1, sizeof(*w));
	assert_non_null(w);
	w->s = s;
	sc_report rep;
	uint64_t cut = 0;
	uint64_t t0 = np_now_ns();
	int anomalies = tx_check_history(&rb_cl, cp_killed | ~cp_used, &rep,
	                                 &cut, on_write, w);
	double sc_ms = (double)(np_now_ns() - t0) / 1e6;
	unsigned n0 = f->n;
	unsigned lost = rb_committed_lost(w, f);
	cp_check_summary(w, wi, f);
	cy->lost = FARM_MAX(cy->lost, (uint64_t)lost);
	cy->anomalies = anomalies > 0 ? (uint64_t)anomalies : anomalies < 0;
	cy->ran = true;
	if (anomalies) {
		sc_report_print(stdout, &rep);
		failed(f,
		       "sercheck: %d anomalies in the history (%" PRIu64
		       " transactions, %" PRIu64 " committed)",
		       anomalies, rep.ntxns, rep.ncommitted);
	} else if (f->n == n0) {
		cy->checks++;
	}
	cy->txns = rep.ntxns;
	cy->committed = rep.ncommitted;
	printf("sercheck: %" PRIu64 " txns (%" PRIu64 " committed, %" PRIu64
	       " unknown at kills) of %u machines: %s in %.0f ms\n",
	       rep.ntxns, rep.ncommitted, cut, cp_count(cp_used),
	       anomalies ? "ANOMALIES" : "strictly serializable", sc_ms);
	free(w);
}

/* 5. lincheck over every KV history (this is how every acknowledged put
 * is checked present). */
static void cp_check_lin(struct cp_cycle *cy, struct fails *f)
{
	lc_report lr;
	uint64_t nrec = 0;
	uint64_t t0 = np_now_ns();
	int rc = kvl_check_some(&rb_cl, cp_used, &lr, &nrec, 600000);
	printf("lincheck: %" PRIu64 " ops of %u machines: %s in %.0f ms\n",
	       nrec, cp_count(cp_used),
	       rc == 0  ? "linearizable"
	       : rc > 0 ? "VIOLATIONS"
	                : farm_strerror(rc),
	       (double)(np_now_ns() - t0) / 1e6);
	if (rc)
		cy->anomalies += rc > 0 ? FARM_MAX(lr.nviolations, 1) : 1;
	if (rc) {
		lc_report_print(stdout, &lr);
		failed(f,
		       "lincheck: %d (%" PRIu64 " keys without a "
		       "linearization, %" PRIu64 " not checked in time)",
		       rc, lr.nviolations, lr.ntimedout + lr.nunchecked);
	} else {
		cy->checks++;
	}
	cy->kv_ops = nrec;
}

/* 6. the allocators, rebuilt by scan; no object left locked */
static void cp_check_allocs(struct cp_cycle *cy, struct fails *f)
{
	unsigned n0 = f->n;
	uint64_t objects = 0, locked = 0;
	/* Every machine scans at once: each answers on its own pipe. */
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'A');
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct alloc_report a;
		np_expect(&rb_cl, i, 'A', 120000);
		np_recv(&rb_cl, i, &a, sizeof(a), 1000);
		alloc_check(i, &a, f);
		objects += a.objects;
		locked += a.locked;
	}
	printf("allocators: rebuilt by scan on %u machines; %" PRIu64
	       " objects walked, %" PRIu64 " locked\n",
	       cp_count(cp_live), objects, locked);
	cy->checks += f->n == n0;
}

/* Milliseconds since *@tp; *@tp moves on. */
static double cp_ms_since(uint64_t *tp)
{
	uint64_t now = np_now_ns();
	double ms = (double)(now - *tp) / 1e6;
	*tp = now;
	return ms;
}

/* Every check, the workloads paused; a failed one in @f. sercheck and
 * lincheck only where cy->full. */
static void cp_check(struct cp_cycle *cy, struct fails *f)
{
	unsigned nreg = 0;
	char why[256];
	double ms[7] = {0};
	uint64_t tp = np_now_ns();
	cy->due = cy->full ? 7 : 4;
	/* 1. full replication, paused */
	if (cp_await_replicated(10000, why, sizeof(why), &nreg))
		failed(f, "paused: not fully replicated: %s", why);
	else
		cy->checks++;
	ms[0] = cp_ms_since(&tp);

	/* 2. locks, total, no negative balance */
	unsigned scanner = cp_lowest(cp_live);
	struct scan_report *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	np_send(&rb_cl, scanner, 'S');
	np_expect(&rb_cl, scanner, 's',
	          (RB_MAX_LOCKED + RB_SUM_TRIES) * 3000 + 60000);
	np_recv(&rb_cl, scanner, s, sizeof(*s), 5000);
	unsigned n0 = f->n;
	report_scan(s, scanner, f);
	cy->checks += f->n == n0;
	ms[1] = cp_ms_since(&tp);

	/* 3. every acknowledged commit present, from what is new */
	struct committed *wi = calloc(1, sizeof(*wi));
	assert_non_null(wi);
	unsigned lost = cp_check_committed(s, wi, f);
	cy->checks += !lost;
	cy->lost = lost;
	ms[2] = cp_ms_since(&tp);

	/* 4, 5. over the whole histories, where due */
	if (cy->full) {
		cp_check_ser(cy, s, wi, f);
		ms[3] = cp_ms_since(&tp);
		cp_check_lin(cy, f);
		ms[4] = cp_ms_since(&tp);
	}
	free(wi);
	free(s);

	/* 6. where due: a scan of every byte of every region, and regions
	 * only add up over a run (each new machine makes its own) */
	if (cy->full)
		cp_check_allocs(cy, f);
	ms[5] = cp_ms_since(&tp);

	/* 7. every region's copies equal, byte for byte */
	n0 = f->n;
	cp_check_copies(f);
	cy->checks += f->n == n0;
	ms[6] = cp_ms_since(&tp);
	printf("checks: ms: replicated %.0f, scan %.0f, committed %.0f, "
	       "sercheck %.0f, lincheck %.0f, allocators %.0f, copies %.0f\n",
	       ms[0], ms[1], ms[2], ms[3], ms[4], ms[5], ms[6]);
}

/* Remove the directories of the machines in @gone, and those whose
 * removal failed before. A gone machine may still be running (a SIGSTOPped
 * one, resumed, notices its removal and exits on its own) and creating
 * files there, so a removal that fails is tried again at the next cycle,
 * by path (a new holder of the id has a directory of its own): it frees
 * memory, it checks nothing. */
static void cp_remove_dirs(uint64_t gone)
{
	static char left[64][sizeof(rb_cl.dir[0])]; /* to try again */
	for (unsigned i = 0; i < 64; i++) {
		if (left[i][0] && !tu_rmtree(left[i]))
			left[i][0] = '\0';
		if (!cp_is(gone, i) || !tu_rmtree(rb_cl.dir[i]))
			continue;
		printf("campaign: machine %u's directory %s not removed yet "
		       "(still running?): again next cycle\n",
		       i, rb_cl.dir[i]);
		memcpy(left[i], rb_cl.dir[i], sizeof(left[i]));
	}
}

static struct cp_times cp_ask_times(unsigned i)
{
	struct cp_times t;
	np_send(&rb_cl, i, 't');
	np_expect(&rb_cl, i, 'T', 30000);
	np_recv(&rb_cl, i, &t, sizeof(t), 1000);
	return t;
}

/* --slow-replace: each new holder of an id in @gone sent its first
 * requests only after every other member had ended its hold, that is
 * once that member's loops could start their channels with it afresh:
 * a request let in before would be answered on the old holder's channel
 * wherever the old holder had sent nothing (the answer is lost). */
static void cp_check_holds(uint64_t gone, struct fails *f)
{
	for (unsigned r = 0; r < 64; r++) {
		if (!cp_is(gone, r) || !cp_is(cp_live, r))
			continue;
		uint64_t asked = cp_ask_times(r).asked_at;
		for (unsigned i = 0; i < 64; i++) {
			if (i == r || !cp_is(cp_live, i))
				continue;
			uint64_t held = cp_ask_times(i).held_until;
			if (!asked || held > asked)
				failed(f,
				       "machine %u (a new holder of its id) "
				       "sent its first requests %.0f ms "
				       "before machine %u started its "
				       "channels with it afresh",
				       r,
				       asked ? (double)(held - asked) / 1e6
				             : 0.0,
				       i);
		}
	}
}

/* The phase that ends now (CP_PH_*) took from *@tp; *@tp moves on. */
static double cp_phase(struct cp_cycle *cy, unsigned ph, uint64_t *tp)
{
	return cy->ph[ph] = cp_ms_since(tp);
}

/* Where cycle @c's time went. */
static void cp_print_phases(unsigned c, const struct cp_cycle *cy)
{
	printf("cycle %u: ms: run %.0f, fault %.0f, removed %.0f, joined "
	       "%.0f, whole %.0f, copies %.0f, pause %.0f, checks %.0f%s\n",
	       c, cy->ph[CP_PH_RUN], cy->ph[CP_PH_FAULT], cy->ph[CP_PH_REMOVED],
	       cy->ph[CP_PH_JOIN], cy->ph[CP_PH_WHOLE], cy->ph[CP_PH_COPIES],
	       cy->ph[CP_PH_PAUSE], cy->ph[CP_PH_CHECKS],
	       cy->full ? " (whole histories)" : "");
}

/* One cycle: the fault, the cluster made whole again, the checks. */
/* Replacements for the machines @gone: new ids, empty directories, the
 * same domains (or, --reuse, their own ids again). The gone machines'
 * directories go first: none of them runs again, and 500 cycles of 16 MB
 * regions would fill /dev/shm (about 70 MB a cycle). @added: what was
 * added, for the log. */
static void cp_replace(uint64_t gone, char *added, size_t cap, struct fails *f)
{
	cp_remove_dirs(opt_keep_dirs ? 0 : gone);
	for (unsigned i = 0; opt_reuse_measure && i < NP_NM; i++)
		if (cp_is(gone, i))
			cp_rm_keep(i);
	size_t o = 0;
	added[0] = 0;
	for (unsigned i = 0; !f->n && i < 64; i++)
		if (cp_is(gone, i) && opt_reuse) {
			if (!cp_add_reused(i))
				failed(f,
				       "a new holder of id %u was not "
				       "admitted",
				       i);
			o += (size_t)snprintf(added + o, cap - o, "%s%u'",
			                      o ? "," : "", i);
		} else if (cp_is(gone, i)) {
			unsigned id = cp_add(cp_dom[i]);
			o += (size_t)snprintf(added + o, cap - o, "%s%u",
			                      o ? "," : "", id);
		}
}

/* The live machines' counters (@n, paused) so far, for the log. */
static void cp_print_counts(unsigned c, const struct cp_counts *n)
{
	uint64_t tr = 0, kv = 0, failedtx = 0;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			tr += n[i].k.transfers;
			failedtx += n[i].k.failed;
			kv += n[i].lin.found + n[i].lin.absent + n[i].lin.puts +
			      n[i].lin.del_found + n[i].lin.del_absent;
		}
	printf("cycle %u: the live machines so far: %" PRIu64
	       " transfers committed (%" PRIu64 " given up), %" PRIu64
	       " KV operations answered\n",
	       c, tr, failedtx, kv);
}

/* After the fault: the configuration without the gone machines, their
 * replacements joined, every region fully replicated again. */
static void cp_recover(unsigned c, uint64_t gone, struct cp_cycle *cy,
                       uint64_t *tp, struct fails *f)
{
	char why[256] = "", added[64];
	if (!f->n && cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f, "after the fault: %s", why);
	cp_phase(cy, CP_PH_REMOVED, tp);
	cp_replace(gone, added, sizeof(added), f);
	cp_phase(cy, CP_PH_JOIN, tp);
	if (!f->n && cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f, "after the replacements joined: %s", why);
	if (!f->n && opt_slow_replace)
		cp_check_holds(gone, f);
	cp_phase(cy, CP_PH_WHOLE, tp);
	unsigned nreg = 0;
	if (!f->n && cp_await_replicated(CP_REPL_MS, why, sizeof(why), &nreg)) {
		failed(f, "not fully replicated within %d ms: %s", CP_REPL_MS,
		       why);
		cp_dump_held();
	}
	double rep_ms = cp_phase(cy, CP_PH_COPIES, tp);
	if (getenv("FARM_CAMPAIGN_VERBOSE"))
		cp_dump_held(); /* and after the cluster is whole again */
	for (unsigned i = 0; !f->n && opt_reuse && i < 64; i++)
		if (cp_is(gone, i) && cp_is(cp_live, i))
			cp_new_holder_copies(c, i);
	printf("cycle %u: %s; replaced by %s; %u regions fully replicated "
	       "%.0f ms after the cluster was whole again\n",
	       c, cy->what, added[0] ? added : "none", nreg, rep_ms);
}

static void cp_cycle(unsigned c, enum cp_fault fl, struct cp_cycle *cy,
                     struct fails *f)
{
	uint64_t t0 = np_now_ns(), tp = t0;
	cy->fault = fl;
	/* The workloads run a while first: 0.3 to 1.5 s. */
	pause_ms(300 + cp_draw(1200));
	cp_phase(cy, CP_PH_RUN, &tp);
	uint64_t gone;
	if (getenv("FARM_CAMPAIGN_VERBOSE"))
		cp_dump_held(); /* where every copy is, before the fault */
	cp_fault(fl, cy, &gone, f);
	cp_phase(cy, CP_PH_FAULT, &tp);
	bool fault_failed = f->n > 0;
	cp_recover(c, gone, cy, &tp, f);
	struct cp_counts *n = calloc(NP_NM, sizeof(*n));
	assert_non_null(n);
	/* A fault that failed may have left machines gone: the campaign
	 * stops at this cycle, nothing is paused. */
	bool paused = !fault_failed;
	if (paused)
		cp_pause(n);
	cp_phase(cy, CP_PH_PAUSE, &tp);
	if (!f->n)
		cp_check(cy, f);
	cp_phase(cy, CP_PH_CHECKS, &tp);
	cp_print_counts(c, n);
	free(n);
	if (paused)
		cp_resume();
	cy->secs = (double)(np_now_ns() - t0) / 1e9;
	cy->ok = f->n == 0;
	cp_print_phases(c, cy);
}

static void cp_stop(void)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'P');
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			struct cp_counts n;
			np_expect(&rb_cl, i, 'p', 60000);
			np_recv(&rb_cl, i, &n, sizeof(n), 1000);
			np_send(&rb_cl, i, 'Q');
		}
	int st[NP_NM];
	np_finish(&rb_cl, st);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i) && st[i])
			fail_msg("machine %u exited with status %d", i, st[i]);
	cp_live = 0;
}

/* The faults' order: every fault in use once per round, shuffled (or the
 * list given, in its order, with --order). */
static void cp_order(enum cp_fault *order)
{
	unsigned nuse = 0, nord = 0;
	enum cp_fault use[F_COUNT];
	for (unsigned i = 0; i < F_COUNT; i++)
		if (opt_use[i])
			use[nuse++] = (enum cp_fault)i;
	assert_true(nuse > 0 && opt_cycles <= 1024);
	while (opt_order && nord < opt_cycles) {
		order[nord] = opt_list[nord % opt_nlist];
		nord++;
	}
	while (nord < opt_cycles) {
		enum cp_fault r[F_COUNT];
		memcpy(r, use, sizeof(r));
		for (unsigned i = nuse - 1; i > 0; i--) {
			unsigned j = cp_draw(i + 1);
			enum cp_fault t = r[i];
			r[i] = r[j];
			r[j] = t;
		}
		for (unsigned i = 0; i < nuse && nord < opt_cycles; i++)
			order[nord++] = r[i];
	}
}

/* The cycles run, one line each, then the count per fault. */
static void cp_print_cycles(const struct cp_cycle *cy, unsigned done)
{
	printf("\ncycle  fault        what                                    "
	       "              seconds  checks  result\n");
	for (unsigned c = 0; c < done; c++)
		printf("%5u  %-12s %-54s %7.1f  %4u/%u  %s\n", c + 1,
		       cp_fault_name[cy[c].fault], cy[c].what, cy[c].secs,
		       cy[c].checks, cy[c].due ? cy[c].due : 7,
		       cy[c].ok ? "passed" : "FAILED");
	printf("\nfault          cycles  passed\n");
	for (unsigned k = 0; k < F_COUNT; k++) {
		unsigned n = 0, p = 0;
		for (unsigned c = 0; c < done; c++)
			if (cy[c].fault == (enum cp_fault)k) {
				n++;
				p += cy[c].ok;
			}
		if (n)
			printf("%-14s %6u  %6u\n", cp_fault_name[k], n, p);
	}
}

/* What a campaign's checks went over, from its cycles. */
struct cp_sum {
	unsigned done, passed;
	double secs;
	uint64_t committed, kvops; /* the last checks that passed */
	uint64_t lost, anomalies;  /* the last checks that ran */
	bool checked;              /* the last cycle's checks ran */
	bool ok;
};

static void cp_summarize(const struct cp_cycle *cy, struct cp_sum *s)
{
	for (unsigned c = 0; c < s->done; c++) {
		s->passed += cy[c].ok;
		if (cy[c].ok) {
			s->committed = cy[c].committed;
			s->kvops = cy[c].kv_ops;
		}
		/* Each check goes over the whole history since the start. */
		if (cy[c].ran)
			s->anomalies = cy[c].anomalies;
		if (cy[c].due) /* step 3 ran: over everything so far */
			s->lost = cy[c].lost;
	}
	/* Met only when the last cycle's checks ran: a cycle that failed
	 * before them proves nothing either way. */
	s->checked = s->done && cy[s->done - 1].ran;
	s->ok = s->passed == opt_cycles;
}

/* The summary and, last, the JSON line. False when the checks failed or
 * (--keep-dirs) no copy took anything from an old copy. */
static bool cp_report(const struct cp_sum *s, const struct fails *f)
{
	printf("\ncampaign: %u of %u cycles passed in %.0f s (seed %" PRIu64
	       "); the last passed checks went over %" PRIu64
	       " committed bank transactions (sercheck) and %" PRIu64
	       " KV operations (lincheck) of %u machines\n",
	       s->passed, opt_cycles, s->secs, opt_seed, s->committed, s->kvops,
	       cp_count(cp_used));
	bool ok = s->ok;
	if (opt_reuse)
		printf("campaign: the new holders' %" PRIu64 " copies READ "
		       "%" PRIu64 " bytes and took %" PRIu64 " from their old "
		       "copies\n",
		       cp_new_copies, cp_new_read, cp_new_taken);
	bool none_taken = ok && opt_keep_dirs && !cp_new_taken;
	if (none_taken) {
		ok = false;
		printf("campaign --keep-dirs: no copy took anything from a "
		       "machine's old copies\n");
	}
	if (!ok && !none_taken) {
		printf("campaign: cycle %u failed:\n%s", s->done, f->text);
		if (!opt_broken)
			printf("campaign: histories kept in %s "
			       "(hist-<machine>: bank, lin-<machine>: KV)\n",
			       rb_cl.root);
	}
	printf("{\"bench\": \"fault_campaign_continuous\", \"seed\": %" PRIu64
	       ", \"cycles\": %u, \"passed\": %u, \"seconds\": %.0f, "
	       "\"committed_checked\": %" PRIu64
	       ", \"kv_ops_checked\": %" PRIu64
	       ", \"goals\": {\"campaign_cycles_pass\": {\"value\": %u, "
	       "\"target\": %u, \"met\": %s}, \"lost_commits\": "
	       "{\"value\": %" PRIu64 ", \"target\": 0, \"met\": %s}, "
	       "\"checker_anomalies\": {\"value\": %" PRIu64
	       ", \"target\": 0, \"met\": %s}}}\n",
	       opt_seed, opt_cycles, s->passed, s->secs, s->committed, s->kvops,
	       s->passed, opt_cycles, ok ? "true" : "false", s->lost,
	       s->checked && !s->lost ? "true" : "false", s->anomalies,
	       s->checked && !s->anomalies ? "true" : "false");
	fflush(stdout);
	return ok;
}

/* The proof run asked for (a switch that breaks the code, whose campaign
 * must fail), the first of the table that is on; NULL for none. */
struct cp_proof {
	bool on;
	const char *name, *broke;
};

static const struct cp_proof *cp_proof_run(void)
{
	static struct cp_proof p[8];
	p[0] = (struct cp_proof){opt_broken, "--broken",
	                         "recovery promoted backups without draining "
	                         "their logs"};
	p[1] = (struct cp_proof){opt_broken_removed, "--broken-removed",
	                         "recovery took reused ids for removed"};
	p[2] = (struct cp_proof){opt_broken_stale, "--broken-stale",
	                         "copies took every chunk of their old copies"};
	p[3] = (struct cp_proof){opt_broken_slot, "--broken-slot",
	                         "data recovery copied each slab slot's first "
	                         "object only"};
	p[4] = (struct cp_proof){opt_broken_inc, "--broken-inc",
	                         "every holder of a reused id was let in"};
	p[5] = (struct cp_proof){opt_broken_kept, "--hold-end --broken-kept",
	                         "survivors kept no decision they applied"};
	p[6] = (struct cp_proof){opt_broken_handoff,
	                         "--hold-end --broken-handoff",
	                         "a superseded round's decisions were taken "
	                         "nowhere"};
	p[7] = (struct cp_proof){opt_reuse && opt_old_ids, "--reuse --old-ids",
	                         "a machine under a lost machine's id was "
	                         "admitted with the old id rule"};
	for (unsigned i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		if (p[i].on)
			return &p[i];
	return NULL;
}

static void test_campaign(void **state)
{
	(void)state;
	cp_rng = opt_seed * 0x9e3779b97f4a7c15ull + 1;
	enum cp_fault order[1024];
	cp_order(order);
	printf("campaign: %u cycles, seed %" PRIu64 ", one cluster of %u "
	       "machines (3 replicas, 3 domains), ZooKeeper ensemble %s%s\n",
	       opt_cycles, opt_seed, CP_NM0, rb_zk_connect,
	       opt_broken ? "; --broken: recovery does not drain logs" : "");
	uint64_t t0 = np_now_ns();
	cp_start();
	printf("campaign: the cluster is up in %s (%.1f s)\n", rb_cl.root,
	       (double)(np_now_ns() - t0) / 1e9);
	fflush(stdout);
	struct cp_cycle *cy = calloc(opt_cycles, sizeof(*cy));
	assert_non_null(cy);
	struct fails f = {0};
	struct cp_sum sum = {0};
	for (unsigned c = 0; c < opt_cycles; c++) {
		cy[c].full = c + 1 == opt_cycles ||
		             (opt_full_every && (c + 1) % opt_full_every == 0);
		cp_cycle(c + 1, order[c], &cy[c], &f);
		sum.done++;
		printf("[%u/%u] %-12s %-52s %6.1fs  %s (%u of %u checks)\n",
		       c + 1, opt_cycles, cp_fault_name[cy[c].fault],
		       cy[c].what, cy[c].secs, cy[c].ok ? "passed" : "FAILED",
		       cy[c].checks, cy[c].due ? cy[c].due : 7);
		fflush(stdout);
		if (!cy[c].ok)
			break;
	}
	sum.secs = (double)(np_now_ns() - t0) / 1e9;
	cp_print_cycles(cy, sum.done);
	cp_summarize(cy, &sum);
	bool ok = cp_report(&sum, &f);
	free(cy);
	const struct cp_proof *proof = cp_proof_run();
	if (proof) {
		if (ok)
			fail_msg("campaign %s: %s, and no check noticed in %u "
			         "cycles",
			         proof->name, proof->broke, opt_cycles);
		printf("campaign %s: cycle %u failed, as it must\n",
		       proof->name, sum.done);
		cp_done = true; /* the teardown removes the cluster */
		return;
	}
	if (!ok) {
		rb_cl.root[0] = 0; /* kept */
		fail_msg("campaign: cycle %u of %u failed", sum.done,
		         opt_cycles);
	}
	cp_stop();
	cp_done = true;
}

static int cp_teardown(void **state)
{
	(void)state;
	if (!cp_done && rb_cl.root[0]) {
		/* A failed assertion: keep the histories. */
		printf("campaign: histories kept in %s\n", rb_cl.root);
		rb_cl.root[0] = 0;
	}
	np_cleanup(&rb_cl);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: test_campaign [--cycles N] [--seed S] [--faults "
	        "F,F,...] [--order] [--broken] [--prev-ring] [--grow | "
	        "--no-grow] "
	        "[--list] [--help]\n"
	        "  One cluster under the bank and KV workloads takes N faults "
	        "(default 50)\n  in a row, each followed by full replication "
	        "and every check.\n"
	        "  --prev-ring: recovery judges a removed coordinator's "
	        "commit by the view\n  before the current one "
	        "(FARM_FP_REC_PREV_RING; the bug seed 1128 found).\n"
	        "  --grow (the default): machines that join late grow into "
	        "ordinary members\n  (config grow); --no-grow: they stay "
	        "late backups.\n"
	        "  --reuse: a killed machine is replaced under its own id "
	        "(config reuse_ids),\n  a new incarnation; with --old-ids "
	        "the old rule (reuse_ids off) must refuse it;\n  with "
	        "--broken-removed recovery takes a reused id for removed\n"
	        "  whichever holder has it (a cycle must fail).\n"
	        "  --broken-inc (with zombie_reuse): every holder of a reused "
	        "id is let in\n  at the fabric (a cycle must fail).\n"
	        "  --broken-slot: data recovery copies a slab slot's first "
	        "object only\n  (a cycle that copies a region must fail).\n"
	        "  --hold-end (with --reuse): machine 1 refuses the first "
	        "round's decisions\n  and end as stale; --broken-kept: the "
	        "others do not vote them again\n  (a cycle must fail); "
	        "--broken-handoff: machine 1's log opens to the\n  new "
	        "holder before its old records are decided.\n"
	        "  --slow-replace (with --reuse): machines wait 1.5 s before "
	        "their loops\n  start a new holder's channels afresh; its "
	        "first requests must be answered.\n"
	        "  --full-every N: sercheck, lincheck (whole histories) and "
	        "the allocators'\n  walk after every Nth cycle and the last "
	        "(0: the last only; default 1);\n  the other checks, every "
	        "acknowledged commit present among them, every cycle.\n"
	        "  --reuse-measure (with --reuse): what each new holder "
	        "would have copied\n  had it kept its old holder's copies "
	        "(a measurement: fails nothing).\n"
	        "  --fill-mb N: N MB of 1 KiB objects each first machine "
	        "allocates at the\n  start and never writes again.\n"
	        "  --keep-dirs (with --reuse): the killed machine starts "
	        "again on its own\n  directory (config reuse_copies): "
	        "its copies take unchanged chunks from\n  its old ones; "
	        "fails if none took anything; --broken-stale: they take "
	        "every\n  chunk, with no check pass (a cycle must fail).\n");
}

/* A number option's value: 0, or -1 with the error said. */
static int num_arg(const char *arg, unsigned lo, unsigned hi, const char *what,
                   unsigned *out)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 10);
	if (*end || !*arg || v < lo || v > hi) {
		fprintf(stderr, "test_campaign: --%s: %u to %u\n", what, lo,
		        hi);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

/* A --broken-* proof switch: its fault point hooked (@fp, or none), its
 * flag set. 0, or FARM_TEST_SKIP without fault injection. */
static int proof_switch(const char *name, int fp, bool *flag)
{
	if (!farm_fault_built() ||
	    (fp >= 0 &&
	     farm_fault_set((enum farm_fault_point)fp, tu_switch_on, NULL))) {
		printf("skipped: %s needs fault injection\n", name);
		return FARM_TEST_SKIP;
	}
	*flag = true;
	return 0;
}

/* The options that hook a fault point or need fault injection: -1 not
 * one of them, else 0 or main's exit status. */
static int take_switch(int o)
{
	switch (o) {
	case 'p':
		if (!farm_fault_built() ||
		    farm_fault_set(FARM_FP_REC_PREV_RING, tu_switch_on, NULL)) {
			fprintf(stderr, "test_campaign: --prev-ring needs "
			                "fault injection\n");
			return 2;
		}
		return 0;
	case 'S': {
		int rc = proof_switch("--broken-stale",
		                      FARM_FP_DATAREC_STALE_EQUAL,
		                      &opt_broken_stale);
		if (!rc)
			farm_txn_testing_datarec_no_check(true);
		return rc;
	}
	case 'D':
		return proof_switch("--broken-removed",
		                    FARM_FP_REC_REMOVED_STICKY,
		                    &opt_broken_removed);
	case 'B':
		return proof_switch("--broken-slot", FARM_FP_DATAREC_SLOT_FIRST,
		                    &opt_broken_slot);
	case 'I':
		return proof_switch("--broken-inc", FARM_FP_FABRIC_ADMIT_ANY,
		                    &opt_broken_inc);
	case 'H': return proof_switch("--hold-end", -1, &opt_hold_end);
	case 'K':
		return proof_switch("--broken-kept", FARM_FP_REC_NO_KEPT,
		                    &opt_broken_kept);
	case 'N':
		return proof_switch("--broken-handoff", FARM_FP_TXN_NO_HANDOFF,
		                    &opt_broken_handoff);
	case 'W':
		/* Inherited by every machine process. */
		if (farm_fault_set(FARM_FP_NODE_REPLACE, cp_slow_replace,
		                   NULL)) {
			printf("skipped: --slow-replace needs fault "
			       "injection\n");
			return FARM_TEST_SKIP;
		}
		opt_slow_replace = true;
		return 0;
	default: return -1;
	}
}

/* One option of main's: 0 to go on, 1 to exit 0 (--list, --help), else
 * main's exit status; @faults set by --faults. */
static int take_option(int o, const char *arg, const char **faults)
{
	unsigned v;
	int rc = take_switch(o);
	if (rc >= 0)
		return rc;
	switch (o) {
	case 'c':
		if (num_arg(arg, 1, 1024, "cycles", &opt_cycles))
			return 2;
		break;
	case 's': {
		char *end;
		opt_seed = strtoull(arg, &end, 10);
		if (*end) {
			fprintf(stderr, "test_campaign: --seed needs a "
			                "number\n");
			return 2;
		}
		break;
	}
	case 'f': *faults = arg; break;
	case 'F':
		if (num_arg(arg, 0, UINT32_MAX, "full-every", &v))
			return 2;
		opt_full_every = v;
		break;
	case 'M':
		if (num_arg(arg, 0, 64, "fill-mb", &opt_fill_mb))
			return 2;
		break;
	case 'b': opt_broken = true; break;
	case 'o': opt_order = true; break;
	case 'g': opt_grow = true; break;
	case 'G': opt_grow = false; break;
	case 'r': opt_reuse = true; break;
	case 'U': opt_reuse_measure = true; break;
	case 'k': opt_keep_dirs = true; break;
	case 'O': opt_old_ids = true; break;
	case 'l':
		for (unsigned i = 0; i < F_COUNT; i++)
			printf("%s\n", cp_fault_name[i]);
		return 1;
	case 'h': usage(stdout); return 1;
	default: usage(stderr); return 2;
	}
	return 0;
}

/* --faults' list (none: every fault but zombie_reuse) into opt_use and
 * opt_list. 0, or 2 with the error said. */
static int take_faults(const char *faults)
{
	if (!faults) {
		for (unsigned i = 0; i < F_COUNT; i++)
			opt_use[i] = i != F_ZOMBIE_REUSE;
		return 0;
	}
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", faults);
	for (char *sp, *t = strtok_r(buf, ",", &sp); t;
	     t = strtok_r(NULL, ",", &sp)) {
		unsigned i = 0;
		while (i < F_COUNT && strcmp(t, cp_fault_name[i]))
			i++;
		if (i == F_COUNT) {
			fprintf(stderr,
			        "test_campaign: no fault '%s' (see --list)\n",
			        t);
			return 2;
		}
		opt_use[i] = true;
		if (opt_nlist < F_COUNT * 4)
			opt_list[opt_nlist++] = (enum cp_fault)i;
	}
	return 0;
}

/* Options that need others: 0, or 2 with the error said. */
static int check_options(void)
{
	const bool reuse = opt_reuse && !opt_old_ids;
	const char *why = NULL;
	if (opt_use[F_ZOMBIE_REUSE] && !reuse)
		why = "zombie_reuse needs --reuse (ids reused)";
	else if ((opt_broken_kept || opt_broken_handoff) && !opt_hold_end)
		why = "--broken-kept and --broken-handoff need --hold-end";
	else if (opt_slow_replace && !reuse)
		why = "--slow-replace needs --reuse";
	else if (opt_broken_stale && !opt_keep_dirs)
		why = "--broken-stale needs --keep-dirs";
	else if (opt_keep_dirs && !reuse)
		why = "--keep-dirs needs --reuse";
	else if (opt_reuse_measure && !reuse)
		why = "--reuse-measure needs --reuse";
	else if (opt_hold_end && !reuse)
		why = "--hold-end needs --reuse";
	else if (opt_order && !opt_nlist)
		why = "--order needs --faults";
	if (why)
		fprintf(stderr, "test_campaign: %s\n", why);
	return why ? 2 : 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"cycles", 1, NULL, 'c'},
	                                   {"seed", 1, NULL, 's'},
	                                   {"faults", 1, NULL, 'f'},
	                                   {"broken", 0, NULL, 'b'},
	                                   {"order", 0, NULL, 'o'},
	                                   {"list", 0, NULL, 'l'},
	                                   {"help", 0, NULL, 'h'},
	                                   {"prev-ring", 0, NULL, 'p'},
	                                   {"grow", 0, NULL, 'g'},
	                                   {"no-grow", 0, NULL, 'G'},
	                                   {"reuse", 0, NULL, 'r'},
	                                   {"old-ids", 0, NULL, 'O'},
	                                   {"broken-removed", 0, NULL, 'D'},
	                                   {"broken-inc", 0, NULL, 'I'},
	                                   {"broken-slot", 0, NULL, 'B'},
	                                   {"hold-end", 0, NULL, 'H'},
	                                   {"broken-kept", 0, NULL, 'K'},
	                                   {"broken-handoff", 0, NULL, 'N'},
	                                   {"slow-replace", 0, NULL, 'W'},
	                                   {"full-every", 1, NULL, 'F'},
	                                   {"reuse-measure", 0, NULL, 'U'},
	                                   {"fill-mb", 1, NULL, 'M'},
	                                   {"keep-dirs", 0, NULL, 'k'},
	                                   {"broken-stale", 0, NULL, 'S'},
	                                   {0}};
	opt_seed = (uint64_t)time(NULL) % 100000;
	const char *faults = NULL;
	int o;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int rc = take_option(o, optarg, &faults);
		if (rc)
			return rc == 1 ? 0 : rc;
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	int rc = take_faults(faults);
	if (!rc)
		rc = check_options();
	if (rc)
		return rc;
	if (opt_broken) {
		/* A test-only switch: promoted backups serve without their
		 * logs drained. The checks must notice. */
		if (!farm_fault_built()) {
			printf("skipped: --broken needs fault injection "
			       "(FARM_FAULT_INJECTION=OFF)\n");
			return FARM_TEST_SKIP;
		}
		farm_txn_testing_recovery_no_drain(true);
	}
	/* A machine gone closes its pipe: fail on the write's error. */
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_campaign, cp_teardown),
	};
	return rb_main_n("campaign", tests, 1, CP_ZK);
}
