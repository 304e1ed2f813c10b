/*
 * The KV linearizability workload (tests/test_kv_multi.c,
 * tests/test_rec_kv.c). A machine keeps W operations in flight (async
 * farm_ht_get / put / del) on a hot set of NKEYS keys: gets (50%), puts
 * (35%: unique value ids, values of 16 to 300 bytes, so inline and
 * indirect) and deletes (15%). Every operation is recorded with
 * CLOCK_MONOTONIC invocation and response times; every value a get returns
 * is checked byte by byte against its id (garbage is counted, never
 * recorded). Defined in kvlin.c, on nodeproc.h and lincheck.h.
 *
 * History: each machine streams its records to <root>/lin-<me> as events
 * (a record's whole state, last one wins). A put or delete is on file
 * before it is issued, so the history of a machine killed with SIGKILL
 * holds every write it may have made (one it had no answer for has no
 * response: it may or may not have happened). kvl_load() folds a
 * machine's file; kvl_check() checks every machine's with lincheck.
 *
 * What an operation's failure means to the checker: a get that failed
 * constrains nothing (dropped); a put or delete that failed may or may not
 * have happened (no response; a delete's result is then unknown). With
 * retries on (lin.retry_ns), an operation that failed retryably
 * (farm_tx_retryable: -EAGAIN while a region is promoted, FARM_EPEERDEAD
 * before the configuration without a dead machine, ...) is issued again on
 * the same key (a put with a new value id) after a backoff that doubles
 * from 1 ms to 64 ms, until retry_ns after its first try. lin_quiet()
 * stops the puts and deletes of one shard for a while (its keys are still
 * read).
 */
#ifndef FARM_TESTS_KVLIN_H
#define FARM_TESTS_KVLIN_H

#include "nodeproc.h"

#include <fcntl.h>
#include <inttypes.h>

#include "hashtable/ht.h"
#include "kv/kv.h"
#include "lincheck.h"

#define NKEYS 20u /* the hot key set */
#define KLEN  16u
#define VMAX  512u
#define MAXW  16u

/* ---- values: a value names itself -------------------------------------- */

uint32_t vlen_of(uint64_t id);

void fill_val(uint8_t *v, uint64_t id);

/* The id a value carries, or 0 when it is not a whole value. */
uint64_t val_id(const uint8_t *v, uint32_t len);

void mkkey(uint8_t *k, const char *tag, unsigned i);

/* The shard (of @nshards, one per machine in id order) of key @i. */
unsigned kvl_shard(unsigned i, unsigned nshards);

/* ---- recording ---------------------------------------------------------- */

/* One recorded operation (kind 0: not issued, or a get without an answer:
 * skipped by the checker). */
struct rec {
	uint32_t client, kind;
	uint64_t key, value;
	uint64_t found;
	uint64_t t_inv, t_resp;
	int32_t status; /* of the operation: 0, -ENOENT, or its error */
	uint32_t idx;   /* its index in the machine's history */
};

struct lin_stats {
	uint64_t gets, found, absent, puts, dels, del_found, del_absent;
	uint64_t get_err, put_err, del_err, garbage, injected, eagain;
	uint64_t undrained;
	uint64_t retries, gave_up, hard; /* hard: errors not retryable */
	uint64_t ns;
	int first_err;
	struct tu_errs errs; /* the first distinct errors, and how often */
};

struct lin;

struct slot {
	struct lin *L;
	unsigned idx;
	int busy;
	size_t rec;
	uint64_t key;
	/* A retry pending (tries > 0): the same kind on the same key at
	 * retry_at; the first try was at t_first. */
	uint32_t kind;
	unsigned tries;
	uint64_t retry_at, t_first;
};

/* What a (broken) client cached of a key. */
struct cache {
	bool valid, overwritten;
	uint64_t value, t;
};

struct lin {
	struct np_child *np;
	farm_ht *ht;
	/* Set after lin_init: gets go through farm_kv_get, so through the
	 * store's lookup path (READ or owner-served); NULL: farm_ht_get. */
	farm_kv *kv;
	unsigned w;        /* operations in flight */
	bool broken;       /* machine 0 answers some gets from a stale cache */
	uint64_t retry_ns; /* retry retryable failures this long (0: never) */
	int quiet;         /* no new puts or deletes of this shard (-1: none) */
	unsigned nshards;  /* of the table (for quiet) */
	struct rec *r;
	size_t n, cap;
	uint32_t base; /* records of earlier incarnations (lin_resume) */
	int oom, ioerr;
	int fd;         /* the history file */
	struct rec *ev; /* events not yet written */
	size_t nev, evcap;
	volatile int wake; /* an operation completed */
	uint64_t next_id;
	struct slot s[MAXW];
	struct cache cache[NKEYS];
	struct lin_stats st;
};

void kvl_path(const struct np_cluster *cl, unsigned i, char *path, size_t len);

/* A workload of @w operations in flight on machine @np (its table @ht),
 * streaming to its history file. 0, or -1 (the file). */
int lin_init(struct lin *L, struct np_child *np, farm_ht *ht, unsigned w,
             uint64_t retry_ns, bool broken);

/* lin_init for a machine restarted on its data directory: its history
 * goes on after what its earlier incarnations wrote (their operations
 * without an answer stay unknown), with new record indexes and value
 * ids. */
int lin_resume(struct lin *L, struct np_child *np, farm_ht *ht, unsigned w,
               uint64_t retry_ns);

/* Record @i's current state (written at the next flush). */
void kvl_note(struct lin *L, size_t i);

void kvl_flush(struct lin *L);

/* The end of the workload: the history written whole. 0, or -1. */
int lin_close(struct lin *L);

size_t rec_add(struct lin *L, struct rec r);

/* Count error @rc; a retryable one of slot @s (NULL: none) is tried again
 * when retries are on. */
void lin_failed(struct lin *L, struct slot *s, int rc);

/* Slot @s's operation answered @status: its record (NULL: none), the time
 * in *@t. */
struct rec *lin_answered(struct slot *s, int status, uint64_t *t);

void lin_get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                uint32_t len);

void lin_op_cb(farm_loop *loop, void *ctx, int status);

/* Issue operation @kind (LC_GET, LC_PUT, LC_DEL) on key @key from slot
 * @s. */
void lin_issue(struct lin *L, struct slot *s, uint32_t kind, uint64_t key);

/* Would a put or delete of @key break the quiet? */
bool lin_hushed(const struct lin *L, uint64_t key);

/* A new random operation from slot @s, or its pending retry (dropped when
 * it would break the quiet). */
void lin_start(struct lin *L, struct slot *s);

/* Serve the loop until an operation completes, at most @ns (0: one
 * pass). */
void lin_serve(struct lin *L, uint64_t ns);

/* How long until slot @s can start (0: now; UINT64_MAX: busy). */
uint64_t lin_due(const struct slot *s, uint64_t now);

/*
 * Run the workload until @go (called about every millisecond) returns
 * false, then drain: every operation in flight gets its answer (puts time
 * out in 10 s); pending retries are dropped. Returns 0, or -ENOMEM.
 */
int lin_run(struct lin *L, bool (*go)(struct lin *L, void *arg), void *arg);

/*
 * One operation, waited for (retried as lin_run retries, from slot
 * MAXW - 1): @kind on key @key (any index: the hot set's or others named
 * the same way). Returns the last try's status; its record in *@r.
 */
int lin_op_sync(struct lin *L, uint32_t kind, uint64_t key, struct rec *r);

/* From now on no new puts or deletes of shard @shard (of @nshards; -1:
 * writes everywhere again); returns once none is in flight. */
void lin_quiet(struct lin *L, int shard, unsigned nshards);

/* ---- the parent side ---------------------------------------------------- */

/* Machine @i's history, folded (each record's last event); NULL and 0
 * when it has none. */
struct rec *kvl_load(const struct np_cluster *cl, unsigned i, size_t *n);

/* Check the histories of the machines of @which (bit i: machine i; ids
 * below 64 and NP_NM) with lincheck (budget @budget_ms); *@nrec:
 * operations checked. Returns lc_check's result. */
int kvl_check_some(const struct np_cluster *cl, uint64_t which, lc_report *rep,
                   uint64_t *nrec, unsigned budget_ms);

/* Every machine's history (budget 60 s). */
int kvl_check(const struct np_cluster *cl, lc_report *rep, uint64_t *nrec);

void print_lin(unsigned i, const struct lin_stats *s);

#endif
