/*
 * Test fixture on top of txproc.h: the bank under failures, shared by
 * test_rec_bank.c (kill -9), test_rec_crash.c (a machine kills itself at one
 * step of a commit), test_rec_zombie.c (SIGSTOP past the lease, then SIGCONT)
 * and test_rec_seq.c (two kills in sequence). Defined in recbank.c; the
 * including test defines NP_NM (nodeproc.h).
 *
 * NP_NM machine processes joined through a real ZooKeeper
 * (scripts/zk-local; sessions of 4 s, leases of 50 ms), 3 replicas,
 * RB_ACCOUNTS accounts made by each machine on itself, so every machine is
 * the primary of some. Every machine runs the bank workload of txproc.h
 * and streams its history to a file. Once every machine has committed
 * rb_p.pre_transfers transfers (each says 'P'), the test does its failure
 * and tells the machines of the configuration which machine left ('K').
 * Each of those goes on until its configuration no longer holds any
 * machine it was told of (at most RB_RECONF_MS after the last), then for
 * rb_p.post_ms more, and reports ('D'). Then (rb_check):
 *   - every survivor applied a configuration without the machines that
 *     left, and committed transfers after it;
 *   - no account is left locked: the lowest survivor reads every account
 *     lock-free (a locked one answers -EBUSY after the read's 1 s bound);
 *   - one read-only transaction of that survivor sums every account: the
 *     initial total, no balance negative;
 *   - every transaction reported committed is reflected: each account's
 *     final version is at least the highest one a committed transfer
 *     wrote into it;
 *   - the history of every machine is strictly serializable (sercheck):
 *     what a killed machine had begun to commit when it died is unknown.
 * Every failed check is reported (which one, machines, counts).
 *
 * Commands to a machine: 'K' (struct rb_kill), 'A' (struct rb_arm: kill
 * yourself at a fault-injection point; the machine says 'X' and the point
 * first), 'S' (scan), 'Q' (quit); a test adds its own (rb_hooks).
 */
#ifndef FARM_TESTS_RECBANK_H
#define FARM_TESTS_RECBANK_H

#include "txproc.h"

#include <stdarg.h>

#include "node/node.h"
#include "util/fault.h"

#define RB_ACCOUNTS   50                    /* per machine */
#define RB_NACC       (np_nm * RB_ACCOUNTS) /* the accounts of this test */
#define RB_MAXACC     (NP_MAX * RB_ACCOUNTS)
#define RB_SESSION_MS 4000
#define RB_LEASE_US   50000u
#define RB_JOIN_MS    30000
#define RB_RECONF_MS  10000
#define RB_GIVE_UP_NS 2000000000ull /* a transfer's retries, at most */
#define RB_MAX_LOCKED 8             /* the scan stops after so many */
#define RB_SUM_TRIES  10

struct run_report;

/* What a test sets before rb_start (the machines inherit it). */
struct rb_params {
	unsigned pre_transfers; /* per machine, before the failure */
	unsigned post_ms;       /* survivors' run after the configuration */
	/* When nonzero: the run after the configuration without the first
	 * machine told of, if it is the only one so far (a test that acts
	 * again during that run). */
	unsigned first_post_ms;
	/* Test-specific parts of a machine's run (each may be NULL):
	 * cmd      a command run() does not know: 0, or -1 (fail);
	 * step     before each bank step: nonzero ends the run;
	 * end      after 'D', before waiting for 'S'/'Q': 0, or -1. */
	int (*cmd)(struct tx_child *c, int cmd, const farm_fatptr *acc,
	           unsigned nacc);
	int (*step)(struct tx_child *c, struct run_report *r);
	int (*end)(struct tx_child *c, const farm_fatptr *acc, unsigned nacc);
	/* configure: machine @me's configuration, before it starts (after
	 * recbank.h's own settings; test_rec_domains: domains, replicas). */
	void (*configure)(uint32_t me, struct farm_config *cfg);
};
extern struct rb_params rb_p;

/* The fault campaign's seed (tests/fault_campaign.sh sets FARM_FAULT_SEED):
 * a draw in [lo, hi] from it, the same sequence for the same seed; @dflt
 * when no seed is set, so the suite's own runs stay as they were. */
unsigned rb_seeded(unsigned lo, unsigned hi, unsigned dflt);

extern char rb_zk_dir[256], rb_zk_connect[256], rb_zk_root[96];
extern const char *rb_zk_script;

/* ---- the machines ---------------------------------------------------- */

/* 'K': machine @victim left; @notify: say 'N' once a configuration
 * without it (and every one told before) is applied and its recovery has
 * made this machine's regions active. */
struct rb_kill {
	uint32_t victim, notify;
	uint64_t t_kill_ns;
};

/* 'A': kill yourself (SIGKILL) the first time a fault point is reached,
 * after saying 'X' and the point (uint32_t). */
struct rb_arm {
	uint32_t point;
};

/* What a machine reports at the end of its run ('D'). */
struct run_report {
	struct bank_counts k;      /* the whole run */
	struct bank_counts at_cfg; /* k when the last new configuration came */
	bool told, new_config, removed;
	uint64_t config_at_kill, config_new;
	unsigned members_new;
	uint64_t gone; /* the machines it was told of (bits) */
	/* When the last kill was, when the configuration without the
	 * machines was applied here, and when the workload saw it (counts
	 * "after" start there). */
	uint64_t t_kill_ns, t_cfg_ns, t_seen_ns;
	farm_txm_stats st; /* at the end of the run */
};

/* The final scan and sum of one survivor ('s'). */
struct scan_report {
	unsigned n, read, locked, other;
	int other_err;
	/* By the machine that made the account (its first primary). */
	unsigned locked_by[NP_MAX], other_by[NP_MAX];
	bool stopped; /* RB_MAX_LOCKED locked accounts: the rest not read */
	farm_gaddr locked_at[RB_MAX_LOCKED];
	farm_gaddr addr[RB_MAXACC];
	int64_t balance[RB_MAXACC];
	uint64_t version[RB_MAXACC]; /* UINT64_MAX: not read */
	int sum_status;
	unsigned sum_tries;
	int64_t total, min_balance;
	uint64_t negative;
};

extern struct tx_child *rb_self; /* this machine (child side) */

/* When each configuration was applied here (by id % 16; 0: not seen). */
extern _Atomic uint64_t rb_cfg_t[16];

/* When this machine learned it is not a member any more (0: never). */
extern _Atomic uint64_t rb_left_ns;

void rb_on_config(void *ctx, uint64_t id, unsigned members, bool member);

/* Does this machine's configuration leave out every machine of @gone?
 * Fills the configuration's id and size in @r when it does. */
bool rb_config_without(struct tx_child *c, uint64_t gone, struct run_report *r);

/* The crash hook: tell the parent which point, then die. */
void rb_crash(enum farm_fault_point fp, void *arg);

/* The run: the bank workload until rb_p.post_ms after the configuration
 * without the machines told of (or RB_RECONF_MS after the last kill
 * without it), or until rb_p.step ends it. */
int rb_run(struct tx_child *c, const farm_fatptr *mine, const farm_fatptr *acc,
           unsigned nacc, struct run_report *r);

/* Every account read lock-free (recorded), then summed in one read-only
 * transaction. */
void rb_scan(struct tx_child *c, const farm_fatptr *acc, unsigned nacc,
             struct scan_report *s);

/* After the run: 'S', 'Q' or a failure (-1); the test's own commands are
 * run meanwhile (rb_p.cmd). */
int rb_wait_cmd(struct tx_child *c, const farm_fatptr *acc, unsigned nacc);

int rb_bank(struct tx_child *c);

int rb_machine(struct np_child *np, void *arg);

/* ---- the parent ------------------------------------------------------ */

extern struct np_cluster rb_cl;

/* One run of the parent: which machines left, and what came back. */
struct rb_result {
	const char *name;
	uint64_t killed; /* SIGKILLed (their histories may end open) */
	uint64_t out;    /* not in the final configuration (killed, zombie) */
	uint64_t t_kill_ns;
	struct run_report r[NP_MAX]; /* of the survivors */
	struct scan_report *s;
	unsigned scanner;
	sc_report rep;
	uint64_t cut; /* transactions the killed machines left open */
	double run_s;
	bool collected;
	struct fails f;
};

/* The cluster up, accounts shared, every machine past 'P'. */
void rb_start(struct rb_result *res, const char *name);

bool rb_member(const struct rb_result *res, unsigned i);

/* Tell the machines of the configuration that @victim left (it is out of
 * it from now on). */
void rb_tell(struct rb_result *res, unsigned victim, bool notify);

/* Machine @victim has died (or is being killed now): reap it. */
void rb_reap(struct rb_result *res, unsigned victim, bool kill_it);

/* Every machine of the configuration said 'N' (rb_kill.notify). */
void rb_wait_recovered(struct rb_result *res);

/* The index of account @key in a scan (its maker: / RB_ACCOUNTS), or
 * RB_NACC. */
unsigned rb_account(const struct scan_report *s, uint64_t key);

/* The highest version a committed transaction wrote into each account. */
struct committed {
	const struct scan_report *s;
	uint64_t maxv[RB_MAXACC];
	uint64_t unknown_keys; /* writes to keys that are not accounts */
};

void on_write(void *ctx, uint64_t key, uint64_t version);

/* The accounts whose final version is older than a write a transaction
 * reported committed made (@w filled by tx_check_history's on_write),
 * plus committed writes of objects that are not accounts: 0 when every
 * acknowledged commit is present. Failures into @f (when given). */
unsigned rb_committed_lost(const struct committed *w, struct fails *f);

/* Every write of a transaction reported committed is in the final
 * versions: failures into @f; returns whether it held. */
bool rb_committed_present(const struct committed *w, struct fails *f);

void report_run(unsigned i, const struct run_report *r, struct fails *f);

/* "made by machine 2: 50, ..." */
const char *by_maker(const unsigned *n, char *buf, size_t len);

void report_scan(const struct scan_report *s, unsigned scanner,
                 struct fails *f);

/*
 * After the failures: every machine of the configuration reports (its 'D':
 * rb_collect, which a test may call first to ask the machines more), the
 * lowest scans, every machine left quits; then the checks (failures in
 * res->f). A test that keeps a machine outside the configuration alive
 * (a zombie) reads its 'D' itself before this.
 */
void rb_collect(struct rb_result *res);

void rb_check(struct rb_result *res);

/* The end of a run: files gone; fails the test when a check failed,
 * unless @broken (then it fails when none did). With FARM_HIST_DIR set,
 * the machines' histories are copied there first, passed or failed (a rare
 * sercheck report is then replayed: test_sercheck --replay). */
void rb_verdict(struct rb_result *res, bool broken, const char *why);

int rb_teardown(void **state);

/* A test's main: @tests with a private ZooKeeper server, or with an
 * ensemble of @nservers (rb_zk_dir/1 .. ; test_rec_zkens). */
int rb_main_n(const char *name, const struct CMUnitTest *tests, size_t n,
              unsigned nservers);

int rb_main(const char *name, const struct CMUnitTest *tests, size_t n);

#endif
