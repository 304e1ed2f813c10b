/*
 * txn_bench's parts (txn_bench.c: the coordinator, options and main;
 * txn_mach.c: a machine process, its objects, latency samples;
 * txn_run.c: the transaction runs and the lock-free and raw READ runs).
 * What txn_bench measures: txn_bench.c's head.
 */
#ifndef FARM_BENCH_TXN_BENCH_H
#define FARM_BENCH_TXN_BENCH_H

#include "benchnode.h"
#include "benchutil.h"
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <farm/farm.h>

#define PROG          "txn_bench"
#define MAXM          3u
#define MAX_TXOBJ     65536u
#define MAX_LFOBJ     (1u << 20)
#define MAX_LFREG     64u
#define MAX_SAMPLES   (1u << 22)
#define MAX_DEPTH     256u
#define MAX_K         8u
#define OBJ_SIZE      64u
#define ALLOC_BATCH   256u
#define NS_PER_S      1000000000ull
#define JOIN_MS       30000
#define GOAL_LF_RATIO 0.7
#define GOAL_P50_US   20.0

enum { GO_WAIT = 0, GO_ALLOC = 1, GO_EXIT = 3 };
enum { ST_START = 0, ST_JOINED = 1, ST_ALLOCATED = 2, ST_FAILED = -1 };

struct opts {
	unsigned machines, replicas, depth, lf_depth, repeat;
	double seconds;
	uint32_t tx_objects, lf_objects, log_size;
	uint64_t region_size;
	bool pin, quick, lf, shared_objs;
	char shapes[256]; /* "" all, else a comma list of shape names */
};

/* Shared between the machine processes (mapped before the fork). */
struct shared {
	_Atomic int go;
	struct {
		_Atomic int state;
		int err;
		uint32_t ntx, nlf, nreg;
		uint32_t reg_id[MAX_LFREG];
		farm_mr_desc reg_desc[MAX_LFREG];
	} m[MAXM];
	farm_gaddr tx[MAXM][MAX_TXOBJ];
	farm_gaddr lf[MAX_LFOBJ];
};

struct samples {
	uint64_t *v;
	size_t n;
};

struct mach {
	uint32_t id;
	farm_node *node;
	farm_loop *loop;
	farm_txm *txm;
	char dir[256];
	/* On machine 1: the registered regions the raw READs read (one of
	 * the region size per region holding lock-free-read objects). */
	farm_region *raw[MAX_LFREG];
	unsigned nraw;
};

/* Where region @region's copies are (farm_replicas, cached: the
 * configuration does not change during a run, and farm_replicas takes
 * the configuration's lock, which the commit path does not); the
 * primary first. 0 when unknown. */
unsigned region_replicas(farm_node *n, uint32_t region,
                         uint32_t rep[FARM_REPLICAS_MAX]);

struct shape {
	char name[32];
	unsigned k;           /* objects written */
	unsigned ro;          /* objects only read (remote) */
	uint32_t mach[MAX_K]; /* machine of each object (written first) */
	bool single;
};

struct run_res {
	double tps, p50_us, p99_us, cp50_us, cp99_us, max_us;
	uint64_t commits, aborts, errors;
	/* per commit: measured (stats delta) and expected (formula) */
	double w, w_exp, msgs, msgs_exp, r, r_exp;
	double trunc; /* explicit TRUNCATE records per commit (not counted
	                 in commit_writes) */
};

struct txslot {
	struct txrun *run;
	unsigned idx; /* objects with index % depth == idx (unless shared) */
	farm_tx *tx;
	unsigned pending;
	int err;
	uint64_t t0, tc;
	farm_gaddr a[MAX_K];
	uint32_t am[MAX_K];
	unsigned ew, emsg, er; /* expected work of this transaction */
	/* In slot_start: a transaction that ended inside it (an error
	 * returned at once) is started again from the run's loop, after a
	 * poll, never from inside its own start (that recursed without
	 * bound while the error lasted). */
	bool starting, deferred;
};

struct txrun {
	struct mach *m;
	const struct shape *sh;
	bool active;
	unsigned inflight, depth;
	unsigned ndeferred; /* slots with deferred set */
	uint64_t rnd;
	uint64_t commits, aborts, errors, increments;
	uint64_t ew, emsg, er;
	int fatal;
	struct samples lat, clat;
	struct txslot slots[MAX_DEPTH];
};

struct txrun;

struct lfslot {
	struct lfrun *run;
	uint64_t t0;
	uint8_t *buf; /* registered (raw) or plain (lf) */
	farm_wr wr;
};

struct lfrun {
	struct mach *m;
	int kind;
	bool active, timed;
	unsigned inflight;
	uint64_t rnd, ops, fatal;
	const farm_gaddr *objs;
	uint32_t nobj;
	/* The raw READs' regions: descs[j] stands for machine 1's region
	 * reg_id[j] (found by a scan of these few, hot entries, as the
	 * lock-free read finds its descriptor in a small per-loop cache). */
	const uint32_t *reg_id;
	uint32_t nreg;
	const farm_mr_desc *descs;
	farm_mr *mr;
	struct samples lat;
	struct lfslot slots[MAX_DEPTH];
};

struct lfrun;

enum { LF_READ = 0, RAW_64 = 1, RAW_128 = 2 };

/* txn_bench.c: set by SIGINT and SIGTERM (stop early); the options; the
 * memory the machine processes share; --data-dir. */
extern volatile sig_atomic_t interrupted;
extern struct opts g_opt;
extern struct shared *g_sh;
extern const char *data_dir;

/* txn_mach.c */
void samp_add(struct samples *s, uint64_t x);
void samp_pcts(struct samples *s, double *p50, double *p99);
int nth_cpu(unsigned i, unsigned *count);
int mach_open(struct mach *m, uint32_t id, const char *base);
void mach_close(struct mach *m);
int wait_state(struct mach *m, int st);
int mach_alloc(struct mach *m);
int child_main(uint32_t id, const char *base, int cpu);

/* txn_run.c */
double ratio_or(double a, double b);
int run_tx(struct mach *m, const struct shape *sh, unsigned depth,
           double seconds, struct txrun *r, struct run_res *out);
double run_lf(struct lfrun *r, int kind, unsigned depth, double seconds,
              bool timed, const farm_gaddr *objs, uint32_t nobj);
extern uint64_t g_increments;

#endif
