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
#ifndef FARM_TESTS_CAMPAIGN_H
#define FARM_TESTS_CAMPAIGN_H

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

extern const char *const cp_zone[3];

/* The machine id each first machine's domain follows: 0, 1: a; 2, 3: b;
 * 4: c. A replacement takes the domain of the machine it replaces. */
extern unsigned cp_dom[NP_NM];

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

extern unsigned opt_cycles;
extern bool opt_use[F_COUNT];
/* --order: the faults of --faults in the order given, again and again
 * (a reproducer), instead of shuffled rounds. */
extern bool opt_order;
/* Growth (config grow, the library's default): late machines grow into
 * ordinary members, and full replication also waits until none is late.
 * --no-grow: they stay late backups. */
extern bool opt_grow;
/* --reuse: a replacement takes the id of the machine it replaces (config
 * reuse_ids), as a new incarnation; --old-ids: the old id rule (reuse_ids
 * off), under which such a replacement is refused. */
extern bool opt_reuse, opt_old_ids;
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
extern bool opt_hold_end, opt_broken_handoff;
/* --slow-replace (with --reuse): every machine applying the view that
 * admits a new holder of a reused id waits CP_SLOW_MS before its loops
 * start their channels with the id afresh (FARM_FP_NODE_REPLACE), which
 * holds open whatever window that step leaves; each new holder's first
 * request to every member must still be answered (cp_first_asks). */
#define CP_SLOW_MS 1500u
extern bool opt_slow_replace;
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
extern bool opt_reuse_measure;
/* --keep-dirs (with --reuse): the killed machine starts again on its own
 * directory under its id (config reuse_copies): it rejoins fresh, its old
 * copies kept as stale sources data recovery takes unchanged chunks from
 * (src/node/rejoin.c). What its copies READ and took, summed over the
 * campaign (the new holders' data recovery, as each reports it after
 * its cycle's replication). */
extern bool opt_keep_dirs;
extern uint64_t cp_new_read, cp_new_taken, cp_new_copies;
/* --fill-mb N (for --reuse-measure's data): N MB of CP_FILL_SIZE-byte
 * objects each first machine allocates at the start, CP_FILL_TX to a
 * transaction, never written again: the cold bulk a store holds beside
 * its hot accounts. */
extern unsigned opt_fill_mb;
#define CP_FILL_SIZE 1024u
#define CP_FILL_TX   64u
extern enum cp_fault opt_list[F_COUNT * 4];
extern unsigned opt_nlist;

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

/* The cluster, as the parent keeps it (cluster.c). */
extern uint64_t cp_live;   /* machines running (bits) */
extern uint64_t cp_used;   /* machines that ever ran the workloads */
extern uint64_t cp_killed; /* killed with SIGKILL: histories may end open */
extern struct cp_arg cp_args[NP_NM];

/* machine.c: a machine process */
int cp_machine(struct np_child *np, void *arg);
void cp_slow_replace(enum farm_fault_point fp, void *arg);

/* machine_copies.c: what a paused machine says of its copies */
void cp_copy_path(char *path, size_t len, const char *root, uint32_t region,
                  unsigned m);
void cp_probe_path(char *path, size_t len, const char *root, unsigned m);
int cp_replica_cmd(struct cp_child *c, int cmd);

/* cluster.c: the parent: the cluster */
void pause_ms(unsigned ms);
bool cp_is(uint64_t mask, unsigned i);
unsigned cp_count(uint64_t mask);
unsigned cp_lowest(uint64_t mask);
unsigned cp_nth(uint64_t mask, unsigned k);
struct held_report *cp_ask_held(unsigned i);
void cp_new_holder_copies(unsigned c, unsigned i);
unsigned cp_cm(void);
void cp_start(void);
void cp_kill(unsigned i);
int cp_await_config(unsigned ms, char *why, size_t len);
unsigned cp_add(unsigned dom);
bool cp_add_reused(unsigned id);
void cp_dump_held(void);
int cp_await_replicated(unsigned ms, char *why, size_t len, unsigned *nreg);
void cp_stop(void);

/* faults.c: the parent: the faults */
extern uint64_t cp_rng;
unsigned cp_draw(unsigned n);
void cp_fault(enum cp_fault fl, struct cp_cycle *cy, uint64_t *gone,
              struct fails *f);
void cp_order(enum cp_fault *order);

/* checks.c: the parent: the checks */
void cp_pause(struct cp_counts *n);
void cp_resume(void);
double cp_ms_since(uint64_t *tp);
void cp_check(struct cp_cycle *cy, struct fails *f);

/* copies.c: the parent: every region's copies compared */
void cp_check_copies(struct fails *f);

/* reuse_measure.c: --reuse-measure */
void cp_rm_keep(unsigned id);
void cp_rm_report(const struct cp_hashes *h);

/* cycle.c: one cycle */
void cp_cycle(unsigned c, enum cp_fault fl, struct cp_cycle *cy,
              struct fails *f);

#endif
