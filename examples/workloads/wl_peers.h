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
	double cpu_tput;   /* the in-memory limit: per CPU-second of its
	                    * thread (tput is per wall second, which a
	                    * loaded host shrinks; this is not) */
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

/* The failure timeline (wl_timeline.c): what it measured. Times are ms
 * after the kill (NAN: not seen). */
struct wl_tl {
	unsigned lease_ms;  /* the run's lease */
	unsigned window_ms; /* the window 80% is judged on */
	double before;      /* committed txn/ms in the 500 ms before */
	double suspect;     /* the first survivor suspected the victim */
	double zk_written;  /* the CM's configuration write returned */
	double view_first;  /* the first survivor's recovery took it */
	double config_last; /* the last survivor's transactions took it */
	double go;          /* REC_GO (the last survivor to get it) */
	double active;      /* the last promoted region became active */
	double dip;         /* throughput first below 80% */
	double back80;      /* the first window back at 80% that stays */
	double suspect_to_80, kill_to_80;
	uint64_t promoted, locks; /* regions promoted, locks recovered */
};

/* ZooKeeper from @scripts/zk-local, TATP on 4 machines with leases of
 * @lease_ms, one killed; the PNG and its data into @out; what it measured
 * into @tl. 0, or an error (nothing measured). */
int wl_timeline(const char *scripts, const char *out, unsigned lease_ms,
                struct wl_tl *tl);

#endif
