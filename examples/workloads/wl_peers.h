/*
 * workload_bench's peers: what one measured configuration gives, and the
 * two peers run beside libfarm: PostgreSQL (wl_pg.c) and the in-memory
 * limit (wl_mem.c), with the same schema, transactions and mix.
 */
#ifndef FWL_WL_PEERS_H
#define FWL_WL_PEERS_H

#include "wl.h"

struct wl_bres {
	double tput;       /* transactions per second (all types) */
	double new_orders; /* TPC-C: committed NewOrders per second */
	double p50, p99;   /* microseconds */
	double abort_pct;  /* retried attempts per 100 attempts */
	unsigned cores;    /* cores the run could use */
	unsigned clients;
	char note[128];
};

/* The in-memory limit: @o's workload, mix and scale in this process on
 * plain hash tables, one thread, no replication, no messages. */
int wl_mem_run(const struct wl_opts *o, struct wl_bres *out);
/* TPC-C's (wl_mem_tpcc.c), which wl_mem_run calls for it. */
int wl_mem_tpcc_run(const struct wl_opts *o, struct wl_bres *out);

/* PostgreSQL: a private server on tmpfs (started and stopped here), the
 * same tables and transactions as prepared statements and server-side
 * functions. */
struct wl_pg;
int wl_pg_start(struct wl_pg **out, char *err, size_t len);
/* Make @o's tables (dropping earlier ones) and load them. */
int wl_pg_load(struct wl_pg *pg, const struct wl_opts *o);
/* Run with @clients connections, synchronous_commit on or off. */
int wl_pg_run(struct wl_pg *pg, const struct wl_opts *o, unsigned clients,
              bool sync_commit, struct wl_bres *out);
void wl_pg_stop(struct wl_pg *pg);

/* The failure timeline (wl_timeline.c): ZooKeeper from @scripts/zk-local,
 * TATP on 4 machines, one killed; the PNG and its data into @out. 0 and
 * the milliseconds from the kill to 80% of *@before (per ms) again: NAN
 * when no dip was seen or the throughput never came back (nothing
 * measured). */
int wl_timeline(const char *scripts, const char *out, double *kill_to_80,
                double *before);

#endif
