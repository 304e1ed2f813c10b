/*
 * recovery_bench, private to its files: options, the memory the parent
 * and the machine processes share, a run's timeline, and the functions one
 * file calls in another. recovery_bench.c: the head comment (what is
 * measured and checked), options, main and its summary; recovery_mach.c:
 * a machine process (accounts, the workload, the final scan);
 * recovery_run.c: the cluster driver (ZooKeeper, forking the machines,
 * one run: load, kill, wait, stop, checks); recovery_timeline.c: the
 * timeline analysis (ms after the kill, the 80% window, the commit-log
 * check); recovery_report.c: distributions, a run's line, the plot.
 */
#ifndef FARM_BENCH_RECOVERY_BENCH_H
#define FARM_BENCH_RECOVERY_BENCH_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <farm/farm.h>
#include <farm/stats.h>
#include <farm/txn.h>

#include "benchutil.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (scripts/zk-local)"
#endif

#define PROG "recovery_bench"
#define NM   4u
/* Accounts per machine, at most: the final sum reads every account in one
 * read-only transaction, whose validation posts one READ per remote object
 * at once; more than the endpoint's 1024 at one machine fail with -EAGAIN
 * (msg_int.h EP_DEPTH), and a machine that took over the victim's regions
 * holds about 2 machines' worth. */
#define MAX_ACCT   320u
#define INIT_BAL   1000
#define MAX_RUNS   200u
#define JOIN_MS    30000
#define RECOV_MS   10000 /* a run fails without recovery within this */
#define SESSION_MS 4000
#define NSCEN      3

enum scen { SC_MEMBER, SC_CM, SC_STOP };
extern const char *const scen_name[NSCEN];

/* Machine states (struct mstat.state). */
enum { ST_NONE, ST_CREATED, ST_DONE, ST_SCANNED, ST_FAILED };
/* Commands (struct shared.cmd). */
enum { C_WAIT, C_GO, C_STOP, C_SCAN, C_QUIT };

/* What one machine publishes (only it writes its slot). */
struct mstat {
	_Atomic int state;
	int fail_rc;
	char fail_what[48];
	uint32_t nacct;
	farm_fatptr acct[MAX_ACCT];
	/* The workload. */
	_Atomic uint64_t transfers, lookups, declined, retries, failed;
	_Atomic int inflight;   /* transfers inside their commit */
	_Atomic uint32_t nclog; /* entries in its commit log */
	int first_err;
	char first_err_what[64]; /* which operation, when */
	/* Retried outcomes by code (the first NERR codes seen). */
	int rcode[8], rphase[8];
	uint64_t rcount[8];
	int64_t rlast_ms[8]; /* the last one, ms after go */
	/* Operations that took over 100 ms (debugging): the first 16. */
	struct slow {
		int64_t start_ms; /* after t0 */
		uint32_t ms;
		int rc, lookup, phase;
		uint32_t acct_a, acct_b;
	} slow[16];
	unsigned nslow;
	/* Refreshed every ms by the workload. */
	_Atomic uint64_t t_active, config_id, suspicions;
	_Atomic uint32_t cm;
	_Atomic bool removed;
	/* At the end. */
	struct farm_node_stats ns; /* leases, recovery, membership */
	struct farm_txm_stats ts;
};

struct shared {
	_Atomic int cmd;
	uint64_t t0; /* bucket 0 starts here */
	uint32_t nbuckets;
	uint32_t scanner;
	struct mstat m[NM];
	/* The highest counter each machine's committed transfers wrote into
	 * each account (index: machine * nacct + slot). */
	uint64_t maxw[NM][NM * MAX_ACCT];
	/* The scanner's result. */
	int sum_rc;
	char sum_where[32]; /* which call failed */
	unsigned sum_tries, lf_read, lf_locked, lf_other;
	uint32_t locked_acct[4]; /* the first accounts found locked */
	int lf_err;
	int64_t total;
	uint64_t ctr[NM * MAX_ACCT];
};

/* Per-ms counts: ops[m][b] (transfers and lookups), xfers[m][b]. */
extern uint32_t *g_ops, *g_xfers;

/* Every transfer a machine was told committed: the two accounts and the
 * counter values it wrote into them (CLOG_CAP per machine, in a shared
 * mapping; a machine past it stops logging and the check says so). */
struct clog {
	uint16_t ia, ib;
	uint32_t ca, cb;
	uint32_t t_begin, t_end; /* us after t0: started, told committed */
};
#define CLOG_CAP (1u << 19)
extern struct clog *g_clog; /* [NM][CLOG_CAP] */
extern struct shared *g_sh;

struct opts {
	unsigned runs, cm_runs, stop_runs;
	unsigned accounts, depth, lease_us, pre_ms, post_ms, base_ms;
	unsigned window_ms;
	unsigned fs_secs;
	bool busy_poll, zk_disk, verbose, quick;
	const char *zk_dir_base, *zk_script, *out;
	uint64_t seed;
};
extern struct opts g_opt;

extern volatile sig_atomic_t interrupted;
extern pid_t g_pid[NM];
extern char g_zk_dir[256], g_zk_connect[64];

static inline uint64_t now_ns(void)
{
	return bu_now_ns();
}

static inline void nap_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Timeline steps, ms after the kill (NAN: not seen):
 *   suspect       the first suspicion of the victim (any survivor)
 *   probe         the end of the first probe that asked to remove it
 *   zk            the compare-and-set of the configuration without it
 *   config_first, config_last  the first and the last survivor took it
 *   txn_recover   the last survivor's transaction layer took it (after
 *                 the CM's lease wait)
 *   commit        REC_GO: every survivor had (NEW-CONFIG-COMMIT)
 *   active        the last survivor's promoted regions became active
 *   80pct         survivors back to 80% of their pre-failure rate */
enum {
	T_SUSPECT,
	T_PROBE,
	T_ZK,
	T_CFG_FIRST,
	T_CFG_LAST,
	T_TXREC,
	T_COMMIT,
	T_ACTIVE,
	T_80,
	NT
};
extern const char *const t_name[NT];

struct run {
	enum scen sc;
	unsigned victim;
	bool ok;         /* recovered, checks run */
	char why[512];   /* what failed */
	double t[NT];    /* ms after the kill */
	double pre_rate; /* survivors' ops per ms before the kill */
	unsigned win;    /* ms: the window 80% is judged over */
	bool win_ok;     /* 90% of the steady state's windows pass */
	double pre_secs; /* steady load before the kill */
	uint64_t false_susp;
	uint64_t lost, phantom, unlocked_checks; /* commits */
	uint64_t zombie;  /* a stopped victim's commits after SIGCONT */
	bool zombie_hung; /* ... its operations had not ended 1 s after */
	uint64_t clog_lost, clog_unreported; /* check_clog */
	double t80_from_suspect;
	uint64_t transfers;
	/* The throughput around the kill (for the plot): from kill - 200. */
	unsigned nplot;
	uint32_t *plot_ops, *plot_xfers;
};

struct dist {
	unsigned n;
	double med, p90, max;
};

/* ---- across files -------------------------------------------------------- */

/* recovery_mach.c */
int machine(uint32_t me, const char *root, const char *zk_root);

/* recovery_run.c */
int zk_start(void);
void zk_stop(void);
void kill_all(void);
int one_run(unsigned idx, enum scen sc, unsigned pre_ms, struct run *r);

/* recovery_timeline.c */
double ms_after(uint64_t t, uint64_t t_kill);
double tmin(double a, double b);
double tmax(double a, double b);
uint32_t surv_ops(unsigned victim, uint64_t b, const uint32_t *arr);
unsigned calibrate(unsigned victim, uint64_t b0, uint64_t b1, double rate,
                   bool *ok);
uint64_t check_clog(unsigned nacc, uint64_t t_kill_us, uint64_t *unreported,
                    char *why, size_t wl, bool *complete);

/* recovery_report.c */
struct dist distribution(const double *v, unsigned n);
void json_num(FILE *f, double v);
void print_run(unsigned i, const struct run *r);
void write_plot(const struct run *r, unsigned idx);

#endif
