/*
 * fwl: FaRM's OLTP workloads (TATP, SmallBank) as an application of
 * libfarm's public API (README.md). This header is what the tool, the
 * tests and the benchmark use: options, one run on a local cluster of
 * forked machine processes, and its results.
 */
#ifndef FWL_WL_H
#define FWL_WL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum wl_kind { WL_TATP = 1, WL_BANK = 2, WL_TPCC = 3 };

/* Transaction types: TATP's seven, SmallBank's six, TPC-C's five. */
enum wl_txn {
	WT_GET_SUB,
	WT_GET_NEWDEST,
	WT_GET_ACCESS,
	WT_UPD_SUB,
	WT_UPD_LOC,
	WT_INS_CF,
	WT_DEL_CF,
	WT_AMALGAMATE,
	WT_BALANCE,
	WT_DEPOSIT,
	WT_SEND_PAYMENT,
	WT_TRANSACT_SAV,
	WT_WRITE_CHECK,
	WT_NEW_ORDER,
	WT_PAYMENT,
	WT_ORDER_STATUS,
	WT_DELIVERY,
	WT_STOCK_LEVEL,
	WT_NTYPES
};

#define WL_MAX_MACHINES    8
#define WL_MAX_THREADS     16
#define WL_MAX_BANK_WINDOW 64
/* Latency histogram: 100 ns buckets below 100 us, then 10 us buckets up
 * to 200 ms, then one overflow bucket (wl_hist_bucket). */
#define WL_HIST_BUCKETS 21001

struct wl_opts {
	enum wl_kind kind;
	unsigned machines, threads;
	uint64_t scale;          /* TATP subscribers, SmallBank accounts,
	                            TPC-C warehouses */
	uint32_t items;          /* TPC-C: items (the spec: 100,000) */
	uint32_t customers;      /* TPC-C: customers per district (3,000) */
	unsigned mix[WT_NTYPES]; /* percentages of the workload's types */
	uint64_t duration_ms;
	uint64_t seed;
	unsigned replicas;
	const char *fabric;  /* shm (default), ofi */
	bool partitioned;    /* clients pick ids their machine owns */
	unsigned hot_pct;    /* SmallBank: accounts in the hotspot (% of all) */
	unsigned hot_prob;   /* SmallBank: % of picks that go to the hotspot */
	bool audit;          /* SmallBank: per-client ledger rows (tests) */
	const char *history; /* directory for per-client histories, or NULL */
	int kill_machine;    /* -1: none */
	uint64_t kill_at_ms; /* after the run starts */
	const char *zk;      /* ZooKeeper host:port (needed for recovery) */
	unsigned lease_ms;   /* recovery's lease with zk (failure detection) */
	const char *region_size;
	bool busy_poll;
	int park_after_us; /* < 0: the configuration's default */
	/* TATP: shipped updates a client thread keeps in flight while it
	 * runs the next transactions (1: it waits for each answer), at most
	 * one per owner. */
	unsigned ship_window;
	/* SmallBank: transactions a client thread keeps in flight on its
	 * loop (1: it waits for each; wl_bank_win.c). */
	unsigned bank_window;
	uint64_t tick_us; /* > 0: per-tick commit counts (the timeline) */
	bool quiet;
};

/* Recovery after a kill as one machine saw it (CLOCK_MONOTONIC ns, one
 * clock on one host; 0: not seen there): the timeline's phases. */
struct wl_rec_times {
	uint64_t run_start;            /* its clients started */
	uint64_t suspect;              /* its first suspicion of the victim */
	uint64_t zk_begin, zk_written; /* the configuration it wrote */
	uint64_t view;                 /* its recovery took the configuration */
	uint64_t config; /* its transaction layer took the configuration */
	uint64_t go;     /* REC_GO: every survivor had taken it */
	uint64_t active; /* its promoted regions became active */
	uint64_t promoted, locks; /* regions promoted, locks recovered */
};

struct wl_result {
	uint64_t commits[WT_NTYPES]; /* acknowledged, including user aborts */
	uint64_t fails[WT_NTYPES];   /* ended by the logic (TATP misses,
	                                SmallBank's insufficient funds) */
	uint64_t retries;            /* retryable aborts, run again */
	uint64_t errors;             /* transactions given up */
	uint64_t shipped, ship_fallbacks;
	uint64_t hist[WL_HIST_BUCKETS];
	double seconds; /* measured run time */
	double cpu_s;   /* CPU time the machine processes spent in the run
	                   (every thread; load and check not counted) */
	unsigned cores; /* client threads in all */
	/* Invariants (after the run): 0 all held, else what failed in msg. */
	int check;
	char msg[256];
	uint64_t rows[4]; /* TATP: subscriber, access_info, special_facility,
	                     call_forwarding; SmallBank: accounts; TPC-C:
	                     orders, new-orders, order lines, districts */
	int64_t total;    /* SmallBank: final total balance */
	uint64_t load_ms;
	uint64_t initial[4]; /* what the load made (rows; SmallBank: accounts,
	                        total balance) */
	/* SmallBank audit: per client, the transactions it was told had
	 * committed that changed rows (run), and what its ledger row says
	 * (check). Equal for every client that lived: every acknowledged
	 * transaction is present and nothing it was told failed is. */
	uint64_t acked[WL_MAX_MACHINES][WL_MAX_THREADS];
	uint64_t ledger[WL_MAX_MACHINES][WL_MAX_THREADS];
	int64_t ledger_delta; /* what the ledgers say was added */
	int64_t acked_delta;  /* what acknowledged transactions added */
	/* Timeline: commits per tick (all machines), ticks, and the
	 * suspicion time (the tick in which the kill happened), or 0. */
	uint64_t *ticks;
	unsigned nticks;
	unsigned kill_tick;
	uint64_t tick_us;
	/* A kill: when it was sent, and each machine's view of what
	 * followed (the survivors'). */
	uint64_t kill_ns;
	struct wl_rec_times rec[WL_MAX_MACHINES];
};

/* Defaults (the standard mix of @kind, 3 machines, 3 replicas, ...). */
void wl_opts_default(struct wl_opts *o, enum wl_kind kind);
/* Set the mix from a name ("standard", "read-only", "write-heavy") or a
 * list "p1,p2,...,pn" of the workload's n percentages summing to 100.
 * 0, or -EINVAL with the reason in @err. */
int wl_mix_parse(struct wl_opts *o, const char *s, char *err, size_t len);
/* Everything checkable before anything starts: the machines, threads,
 * mix, and that the scale fits this host's memory. 0 or -EINVAL/-ENOMEM
 * with the reason in @err. */
int wl_validate(const struct wl_opts *o, char *err, size_t len);
/* Load, run, check on a fresh local cluster. 0 when everything ran and
 * the invariants held (r->check), negative on a failure to run (the
 * reason in r->msg). */
int wl_run(const struct wl_opts *o, struct wl_result *r);
void wl_result_free(struct wl_result *r);

static inline unsigned wl_hist_bucket(uint64_t ns)
{
	if (ns < 100000)
		return (unsigned)(ns / 100);
	uint64_t b = 1000 + (ns - 100000) / 10000;
	return b < WL_HIST_BUCKETS - 1 ? (unsigned)b : WL_HIST_BUCKETS - 1;
}
/* Latency percentile (0..1) of a histogram, in microseconds. */
double wl_hist_pct(const uint64_t *hist, double p);
const char *wl_txn_name(enum wl_txn t);
/* The first and one-past-last type of @kind. */
void wl_types(enum wl_kind kind, int *from, int *to);

#endif
