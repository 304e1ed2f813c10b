/*
 * fwl internals: the layout of the rows in the cluster's memory, the keys
 * of the KV store that index them, the machine and client contexts, and
 * the interface between the machine driver (wl_machine.c) and the
 * workloads (wl_tatp.c, wl_bank.c). Public API of libfarm only.
 */
#ifndef FWL_WL_INT_H
#define FWL_WL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <farm/farm.h>

#include "wl.h"

/* Message types of shipped updates (application range). */
#define WL_MSG_SHIP 200

/* ---- keys ---------------------------------------------------------------
 * A key is a table letter, then the id in 8 bytes, then a sub-key byte:
 * the KV store maps it to the row's fat pointer. 'N' (TATP's sub_nbr)
 * maps the 15-digit number to the subscriber id instead. */
struct wl_key {
	uint8_t b[16];
	uint32_t len;
};

static inline struct wl_key wl_key_make(char table, uint64_t id, uint8_t sub)
{
	struct wl_key k = {.len = 10};
	k.b[0] = (uint8_t)table;
	for (int i = 0; i < 8; i++)
		k.b[1 + i] = (uint8_t)(id >> (8 * i));
	k.b[9] = sub;
	return k;
}

/* ---- rows ---------------------------------------------------------------
 * TATP (spec 2.x); strings are fixed-size, not terminated. */
struct tatp_sub {
	uint64_t s_id;
	char sub_nbr[16];
	uint16_t bits; /* bit_1 .. bit_10 */
	uint8_t hex[10];
	uint8_t byte2[10];
	uint32_t msc_location, vlr_location;
};
struct tatp_ai {
	uint8_t data1, data2;
	char data3[3], data4[5];
};
struct tatp_sf {
	uint8_t is_active, error_cntrl, data_a;
	char data_b[5];
};
/* Call forwarding of one (s_id, sf_type): its three possible start
 * times (0, 8, 16) as slots, so an insert or delete is an update of one
 * object whose address never changes (the index needs no insert). */
struct tatp_cf {
	struct {
		uint8_t present, end_time;
		char numberx[15];
	} slot[3];
};
/* SmallBank: a savings or checking row. ver counts its committed writes
 * (the histories' version order). */
struct bank_row {
	int64_t bal;
	uint64_t ver;
};
/* A client's ledger (audit mode): what its committed transactions added
 * to the total, and how many committed; written by the same
 * transactions. */
struct bank_ledger {
	int64_t delta;
	uint64_t commits, ver;
};

/* ---- machine and clients ------------------------------------------------ */

struct wl_machine;

enum { WL_PH_LOOKUP, WL_PH_READ, WL_PH_COMMIT, WL_PH_BACKOFF, WL_NPHASES };

struct wl_client {
	struct wl_machine *m;
	unsigned idx; /* thread */
	farm_loop *loop;
	uint64_t rng;
	struct wl_result res;       /* counts only (no ticks) */
	bool dead[WL_MAX_MACHINES]; /* owners a ship to has failed */
	farm_fatptr ledger;
	/* TATP: this client's ledger at each owner (found at first use) and
	 * the id of its last shipped update. */
	farm_fatptr tledger[WL_MAX_MACHINES];
	uint64_t ship_seq;
	void *ships; /* TATP: shipped updates in flight (--ship-window) */
	void *app;   /* the workload's per-client state (TPC-C) */
	struct wl_rowcache *rows; /* SmallBank: what its lookups found */
	int hist_fd;
	uint64_t hist_seq;
	/* FWL_SLOW_MS: where the current transaction's time went (SmallBank:
	 * KV lookups, reads, commits, backoffs between attempts); zeroed
	 * before each transaction, printed with a slow one. */
	uint64_t phase_ns[WL_NPHASES];
	pthread_t th;
	volatile int go; /* set by a work item on this loop */
	atomic_int done;
};

struct wl_machine {
	const struct wl_opts *o;
	unsigned me;
	farm_node *node;
	farm_kv *kv;
	farm_txm *txm;
	const char *root;
	struct wl_client cl[WL_MAX_THREADS];
	uint64_t run_start_ns;
	uint64_t run_cpu_ns;     /* the process's CPU time during the run */
	_Atomic uint64_t *ticks; /* per tick commits, this machine */
	unsigned nticks;
	uint64_t loaded[4];      /* rows this machine loaded */
	unsigned puts_in_flight; /* the load's (wl_kv_put) */
	int put_err;
	void *app; /* the workload's per-machine state (TPC-C's trees) */
};

/* The machine that owns (loads, serves shipped updates of) id. */
static inline unsigned wl_owner(const struct wl_opts *o, uint64_t id)
{
	return (unsigned)(id % o->machines);
}

static inline uint64_t wl_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time (the in-memory limit's one thread). */
static inline uint64_t wl_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* @n transactions per CPU-second of this thread since @cpu0 (0: none). */
static inline double wl_thread_cpu_rate(uint64_t n, uint64_t cpu0)
{
	uint64_t ns = wl_thread_cpu_ns() - cpu0;
	return ns ? n * 1e9 / (double)ns : 0;
}

static inline uint64_t wl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t wl_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}
/* Uniform in [lo, hi]. */
static inline uint64_t wl_uni(uint64_t *s, uint64_t lo, uint64_t hi)
{
	return lo + wl_rand(s) % (hi - lo + 1);
}

/* A reply that could not be sent: the caller's call times out, and it
 * runs the update itself. */
static inline void wl_unanswered(int rc)
{
	(void)rc;
}

/* ---- helpers (wl_machine.c) --------------------------------------------- */

/* Look @k up: 0 and its fat pointer (or id), -ENOENT, or an error. */
int wl_kv_ptr(struct wl_client *c, const struct wl_key *k, void *val,
              uint32_t size);
/* ---- row cache (wl_rowcache.c) --------------------------------------------
 * What a client's KV lookups found, kept under a nonzero @key of the
 * caller's: a row's fat pointer (or a value of up to its size), or that
 * the index has none. For rows that never move in a run; a collision
 * only evicts. NULL caches (no memory) keep nothing. */
struct wl_rowcache;
/* A cache of about @keys entries, at most 2^@max_bits; NULL without
 * memory. */
struct wl_rowcache *wl_rowcache_new(uint64_t keys, unsigned max_bits);
void wl_rowcache_free(struct wl_rowcache *rc);
/* @key's kept value (@size bytes into @val): 0, -ENOENT (none in the
 * index), or 1 (not kept). */
int wl_rowcache_find(struct wl_rowcache *rc, uint64_t key, void *val,
                     uint32_t size);
/* @k looked up in the index, and what it says kept under @key: 0,
 * -ENOENT, or an error (kept only for 0 and -ENOENT). */
int wl_rowcache_fill(struct wl_client *c, struct wl_rowcache *rc, uint64_t key,
                     const struct wl_key *k, void *val, uint32_t size);
/* wl_rowcache_find, then wl_rowcache_fill when not kept. */
int wl_rowcache_get(struct wl_client *c, struct wl_rowcache *rc, uint64_t key,
                    const struct wl_key *k, void *val, uint32_t size);
/* Forget @key (its row was found freed). */
void wl_rowcache_forget(struct wl_rowcache *rc, uint64_t key);

/* Before running a transaction again: serve the loop a while, longer
 * after more attempts (a recovery answers -EAGAIN until it is done). */
void wl_backoff(struct wl_client *c, unsigned attempt);
/* A lock-free read of @size bytes at @p, retried while it fails
 * retryably (a recovery, a loaded host). */
int wl_lf_read(struct wl_client *c, farm_fatptr p, void *buf, uint32_t size);
/* Queue a put (the load's; at most 32 bytes of value): 0, or the first
 * error of this or an earlier put. wl_kv_flush waits for all of them. */
int wl_kv_put(struct wl_machine *m, farm_loop *loop, const struct wl_key *k,
              const void *val, uint32_t size);
int wl_kv_flush(struct wl_machine *m, farm_loop *loop);
/* Ship @req to the owner @to; 0 and its one-int reply in *@answer, or
 * an error (the caller then runs the update itself). */
int wl_ship(struct wl_client *c, unsigned to, const void *req, uint32_t len,
            int *answer);
/* Record one transaction's outcome and latency. */
void wl_count(struct wl_client *c, enum wl_txn t, int outcome, uint64_t t0_ns);
/* The same for a transaction that ended at @end_ns. */
void wl_count_at(struct wl_client *c, enum wl_txn t, int outcome,
                 uint64_t t0_ns, uint64_t end_ns);
bool wl_retryable(int rc);

/* ---- workloads ---------------------------------------------------------- */

struct wl_ops {
	/* Load this machine's share (ids it owns) on @loop. */
	int (*load)(struct wl_machine *m, farm_loop *loop);
	/* One transaction of type @t, retried until it ends: 0 (committed),
	 * 1 (ended by its logic), or an error. */
	int (*txn)(struct wl_client *c, enum wl_txn t);
	/* A shipped update, in a handler on the owner: reply to @in. */
	void (*ship)(struct wl_machine *m, farm_loop *loop,
	             const farm_msg_in *in);
	/* Count every row (machine 0, after the run): into r->rows/total. */
	int (*check)(struct wl_machine *m, farm_loop *loop,
	             struct wl_result *r);
	/* Free the workload's state (m->app, each client's app) before the
	 * node closes; NULL: none. */
	void (*fini)(struct wl_machine *m);
	/* Count the transactions txn() left in flight (WL_INFLIGHT) that
	 * have ended; @all: wait for every one. NULL: txn() never does. */
	void (*reap)(struct wl_client *c, bool all);
};

/* txn()'s outcome for a transaction still in flight: reap() counts it. */
#define WL_INFLIGHT 2
/* txn()'s outcome when an earlier transaction it left in flight ended
 * with an error that is not retryable (counted and reported then): the
 * client stops, as after such an error returned. */
#define WL_GIVEN_UP 3

extern const struct wl_ops wl_tatp_ops, wl_bank_ops, wl_tpcc_ops;

/* Pick an id: partitioned, one this machine owns. */
uint64_t wl_pick_id(struct wl_client *c, uint64_t id);

#endif
