/*
 * The transaction layer's internals, shared by its files (include/farm/txn.h
 * is the API, txm.h the wiring): optimistic concurrency control with the
 * SOSP'15 commit protocol over logs written with one-sided WRITEs.
 *
 *   log.c          the logs: layout, the writer side (append, reservation,
 *                  truncation marks, the freed word), reading them offline
 *   participant.c  the replica side: the log poller, LOCK, install at
 *                  COMMIT-PRIMARY, ABORT, backup apply at truncation
 *   read.c         reads: transactional, lock-free, local
 *   tx.c           transactions: begin, write, alloc, free, abort, the
 *                  blocking wrappers
 *   commit.c       the coordinator: the commit state machine, distributed
 *                  and single-machine
 *   txm.c          the manager: create, attach, peers, stats, epochs glue
 *
 * Everything here runs on one loop's thread (struct txloop) unless it says
 * otherwise. Internal; not installed.
 */
#ifndef FARM_TXN_TXN_INT_H
#define FARM_TXN_TXN_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txm.h"
#include "util/common.h"

#define MAX_LOOPS    64
#define TX_SLOTS     4096u /* concurrent transactions per loop */
#define TX_POOL      64u   /* finished transaction records kept per loop */
#define TX_POOL_OBJS 64u   /* ... when their object array is this small */
#define LOCK_BUCKETS 1024u
#define CS_RING      (2 * TX_SLOTS) /* commits of a loop in flight, at most */

#define NCLS 17 /* arena classes: 64 B .. 4 MiB */

/* ---- log records ---------------------------------------------------- */

enum rec_type {
	REC_LOCK = 1,
	REC_COMMIT_BACKUP = 2,
	REC_COMMIT_PRIMARY = 3,
	REC_ABORT = 4,
	REC_TRUNC = 5,
	REC_PAD = 6,
};

/*
 * A record: [hdr | nobj objects | their images | nreg region ids (u32) |
 * zeroes | checksum | trailer]. The checksum (rec_sum, 8 bytes before the
 * trailer) covers every byte before it, so a record whose trailer says it
 * landed whole but whose bytes changed since is told from one a kill cut
 * short (restart refuses the first, skips the second). What recovery needs is
 * in the header: @cseq, the transaction's commit sequence on its coordinator's
 * thread (assigned when the commit starts, so they increase in commit order),
 * and @lw, that thread's low-water mark when the record was written: every
 * commit of the thread with a lower sequence had finished (decided, every
 * record written). The region list (LOCK and COMMIT-BACKUP) names every region
 * the transaction writes, so recovery knows which regions must vote. @cfg is
 * the coordinator's configuration when the commit started: a LOCK of an
 * older configuration than the primary's is refused.
 */
struct rec_hdr {
	uint32_t len; /* bytes, a multiple of 64, trailer included */
	uint16_t type;
	uint16_t nobj;
	uint64_t txid;
	uint64_t trunc; /* records of this log before here are done */
	uint64_t cseq;  /* 0: no transaction (TRUNC, PAD) */
	uint64_t lw;    /* commits of this thread below it are finished */
	uint32_t cfg;
	uint16_t nreg;
	uint16_t rsv;
};

struct rec_obj {
	uint64_t addr;
	uint64_t version; /* LOCK: version read; COMMIT-BACKUP: new version */
	uint64_t incarn;  /* LOCK: word expected; COMMIT-BACKUP: new word */
	uint32_t lines;
	uint32_t flags;
};

#define OBJF_NEW  1u
#define OBJF_FREE 2u
/* An array freed by the transaction: its first element carries
 * OBJF_ARRAY and the element count in bits 31..8, the others OBJF_ELEM;
 * the primary frees the whole array once every element is installed. */
#define OBJF_ARRAY   4u
#define OBJF_ELEM    8u
#define OBJF_N_SHIFT 8
/* Any other object the coordinator holds: its slab block's description
 * (farm_alloc_block_info, 15 bits) in bits 30..16, or 0 (allocrec.c). */
#define OBJF_BINFO_SHIFT 16

struct reply {
	uint64_t txid;
	int32_t status;
	uint32_t pad;
};

_Static_assert(sizeof(struct rec_hdr) == 48, "record header");
_Static_assert(sizeof(struct rec_obj) == 32, "record object");

/* ---- per-loop state ------------------------------------------------- */

struct arena {
	uint8_t *base;
	size_t size, used;
	farm_mr *mr;
	void *free[NCLS];
};

/* A record this loop wrote into one log, until its transaction is done
 * and every commit sequence up to its own is (see wq_truncatable). */
struct wq_ent {
	uint64_t pos, end;
	uint64_t cseq; /* its transaction's commit sequence (0: none) */
	bool done;
};

/* This loop's side of its log on machine @m (coordinator role). */
struct writer {
	uint64_t tail;     /* next record position (abs) */
	uint64_t freed;    /* what we know the replica has freed (abs) */
	uint64_t reserved; /* bytes promised to commits in progress */
	uint64_t sent_trunc;
	uint64_t wq_head, wq_tail; /* wq entries [head, tail) */
	struct wq_ent *wq;         /* wq_cap, a power of two; grows */
	uint64_t wq_cap;
	bool reading;       /* a READ of the freed word is out */
	uint64_t freed_buf; /* its destination (in the arena) */
};

/* A log this loop serves (replica role): coordinator (C, this thread). */
struct reader {
	uint64_t head;    /* next record to process */
	uint64_t applied; /* records before here are truncated and zeroed */
	uint64_t lw;      /* the highest commit low-water mark seen */
	bool broken;      /* a malformed record: no longer read */
	bool fenced;      /* its coordinator was removed: recovery owns it */
	bool rec_done;    /* ... and recovery decided and emptied it */
};

/* A transaction whose ABORT record this loop processed: its
 * COMMIT-BACKUP records must never be applied. Kept until the ABORT
 * record itself is truncated (COMMIT-BACKUPs precede it in the log). */
struct abort_ent {
	struct abort_ent *next;
	uint64_t txid;
	uint64_t pos; /* the ABORT record's position */
};

struct lock_ent {
	struct lock_ent *next;
	uint64_t txid;
	const uint8_t *rec; /* the LOCK record, in the log */
};

/* recover.c: a COMMIT-BACKUP for a region being promoted whose
 * transaction is not decided yet; its objects are locked meanwhile. */
struct rec_pend {
	struct rec_pend *next;
	uint64_t txid;
	uint32_t coord;
	uint8_t *rec; /* a copy of its COMMIT-BACKUP (malloc'd) */
	/* Per object of rec: where pend_add took its recovered lock (the
	 * object in the copy it was promoting), or NULL: settling releases
	 * only these, never another pending transaction's lock on the
	 * same object (malloc'd). */
	uint8_t **q;
	bool settled; /* at the log's truncation; awaits the answer */
};

struct txloop {
	farm_txm *m;
	farm_loop *loop;
	unsigned t;
	uint64_t seq;
	struct arena ar;
	farm_tx **slots; /* TX_SLOTS */
	struct lock_ent *locks[LOCK_BUCKETS];
	struct abort_ent *aborts[LOCK_BUCKETS];
	struct writer *w; /* per machine */
	struct reader *r; /* per machine */
	uint64_t rand;
	unsigned lock_waiters;      /* transactions waiting for lock replies */
	struct rd_op *rd_free_list; /* recycled read operations */
	farm_tx *tx_free_list;      /* recycled transactions (TX_POOL) */
	unsigned tx_nfree;
	/* Hot counters, written by this loop only (plain load + store). */
	_Atomic uint64_t c_lf_reads, c_lf_retries, c_tx_reads;
	unsigned inflight;   /* log WRITEs and freed-word READs not completed */
	uint64_t epoch_tick; /* loop 0: passes, for the epoch trigger */
	/* Commit sequences (struct rec_hdr): the next one, the lowest not
	 * finished, and which of [cs_low, cs_next) have finished. */
	uint64_t cs_next, cs_low;
	uint8_t *cs_done;         /* CS_RING */
	struct rec_pend *pend;    /* recover.c */
	struct farm_as_rcache rc; /* where regions are, for reads */
};

/* recover.c: the decider's view of one transaction of a removed
 * coordinator, and the recovered locks of promoted regions. */
struct rec_cb {
	uint32_t machine, region;
};
struct rec_txn {
	uint64_t txid, cseq;
	uint32_t flags;
	uint32_t tcfg; /* the configuration of its COMMIT-BACKUPs (0: none) */
	bool sent;
	uint32_t *regs;
	unsigned nregs;
	struct rec_cb *cb; /* who holds a COMMIT-BACKUP for which region */
	unsigned ncb;
};
struct rec_rlock {
	uint64_t addr;
	/* The object in the copy the lock was taken in: the copy may be
	 * demoted (growth) before the lock's transaction settles, and is
	 * installed and unlocked there (demoted copies stay mapped). */
	uint8_t *q;
	unsigned n;
};

/* recover.c: recovery's state (decider fields on the decider only). */
struct txrec_state {
	pthread_mutex_t lock;
	_Atomic uint64_t cfg; /* the configuration being recovered into */
	uint32_t decider;
	bool removed[0x40]; /* every machine ever removed */
	bool member[0x40];  /* the survivors of cfg */
	unsigned nsurv;
	uint32_t *promo; /* regions being promoted here */
	unsigned npromo;
	/* promo[0, nelig) are this round's to promote: complete backup
	 * copies this machine was primary of when the round began
	 * (farm_as_promotable); the rest are listed from earlier rounds.
	 * Decided once, so every loop's scan and the promotion agree. */
	unsigned nelig;
	_Atomic unsigned npromo_live;
	_Atomic unsigned applied, scanned; /* loops done with each step */
	_Atomic uint64_t t_config, t_go, t_active; /* farm_txm_stats */
	struct rec_rlock *rl;
	unsigned nrl, caprl;
	uint32_t *adopt; /* promoted regions not yet handed to the allocator */
	unsigned nadopt, capadopt;
	/* The decider. */
	bool go_sent;
	uint64_t applied_from[0x40];
	struct rec_txn *d;
	unsigned nd, capd;
	unsigned ends[0x40 * MAX_LOOPS];
	uint64_t maxlw[0x40 * MAX_LOOPS];
};

struct farm_txm {
	_Atomic uint64_t sync_timeout_ns; /* the *_sync wrappers' default */
	farm_fabric *fab;
	farm_msg *msg;
	farm_as *as;
	farm_galloc *ga;
	uint32_t me, T, M;
	uint64_t R; /* ring bytes per log */
	uint64_t hdr_area;
	uint64_t lf_bound;
	uint64_t lf_bound_cycles; /* lf_bound in farm_cycles() ticks */
	uint32_t arena_size;
	farm_mem *logmem;
	farm_mr *logmr;
	uint8_t *logbase;
	farm_mr_desc logdesc;
	farm_mr_desc *peers;     /* M */
	_Atomic int *peer_ready; /* M */
	/* The machines whose logs we serve, compact, for the pollers. */
	uint32_t ready_ids[0x40];
	_Atomic unsigned nready;
	pthread_mutex_t peer_lock;
	struct txloop *loops[MAX_LOOPS];
	/* Distributed epochs (loop 0 starts the background ones). */
	unsigned epoch_free_pct;
	bool epoch_running; /* a background epoch is in flight */
	bool epoch_domain;  /* holds a farm_epoch_domain_get */
	uint64_t epoch_last_check;
	uint64_t epoch_reclaimed_now; /* the background epoch's result */
	struct {
		_Atomic uint64_t v[48]; /* S_NSTATS of them used */
	} st;
	struct txrec_state rec;
	struct farm_datarec *dr;      /* copy.c: data recovery */
	_Atomic uint64_t serve_until; /* farm_txm_serve_word */
};

/* May this machine serve a read now (its lease holds)? */
static inline bool txn_serving(farm_txm *m)
{
	uint64_t u =
	        atomic_load_explicit(&m->serve_until, memory_order_acquire);
	return u == UINT64_MAX || farm_now_ns() < u;
}

enum {
	S_COMMITS,
	S_COMMITS_SINGLE,
	S_AB_CONFLICT,
	S_AB_VALIDATION,
	S_AB_FAILURE,
	S_AB_NOSPACE,
	S_AB_FREED,
	S_LF_READS,
	S_LF_RETRIES,
	S_TX_READS,
	S_C_WRITES,
	S_C_READS,
	S_C_MSGS,
	S_LOG_FULL,
	S_TRUNCATES,
	S_LOCKS_OK,
	S_LOCKS_REFUSED,
	S_INSTALLS,
	S_BACKUP_APPLIES,
	S_BAD_RECORDS,
	S_EPOCHS,
	S_EPOCHS_FAILED,
	S_EPOCH_RECLAIMED,
	S_STALE_REFUSED,  /* records of an older configuration */
	S_BACKUP_SKIPPED, /* COMMIT-BACKUPs of aborted transactions */
	S_BACKUP_NOCOPY,  /* COMMIT-BACKUPs for a region we hold no copy of */
	S_REC_COMMITTED,
	S_REC_ABORTED,
	S_REC_LOCKS,
	S_REC_PROMOTED,
	S_REC_REFUSED,
	S_TRUNC_UNFINISHED,  /* COMMIT-BACKUPs truncated at or above the mark */
	S_LOCK_WAITS_ENDED,  /* LOCK waits on removed machines ended early */
	S_FREE_FAILED,       /* frees at commit the allocator refused (leaks) */
	S_FREE_DEFERRED,     /* frees at commit waiting for their region */
	S_BLOCK_NOTES,       /* block descriptions written into backup copies */
	S_BLOCK_NOTE_ERRORS, /* ... refused (the copy's table disagrees) */
	S_NSTATS
};
_Static_assert(S_NSTATS <= 48, "farm_txm st.v holds the counters");

static inline void stat_add(farm_txm *m, int i, uint64_t n)
{
	atomic_fetch_add_explicit(&m->st.v[i], n, memory_order_relaxed);
}

/* ---- transactions --------------------------------------------------- */

#define TXO_READ  1u
#define TXO_WRITE 2u
#define TXO_NEW   4u
#define TXO_FREE  8u
#define TXO_ARRAY 16u /* the first element of an array (arr_n elements) */
#define TXO_ELEM  32u /* another element of such an array */

struct txobj {
	farm_gaddr a;
	uint32_t size;
	uint32_t lines;
	uint64_t version; /* read, unlocked */
	uint64_t incarn;  /* word read */
	uint32_t primary;
	uint32_t flags;
	uint8_t *data; /* size bytes */
	uint8_t *img;  /* commit: the after-image (arena), lines * 64 */
	uint32_t reps[FARM_RING_MAX_REPLICAS];
	unsigned nrep;
	bool locked;    /* single-machine commit: we hold its lock */
	uint8_t *vbuf;  /* validation READ destination (arena) */
	uint32_t arr_n; /* TXO_ARRAY: elements */
};

enum phase {
	PH_OPEN = 0,
	PH_RESERVE,
	PH_LOCK,
	PH_VALIDATE,
	PH_BACKUP,
	PH_PRIMARY,
	PH_ABORT,
	PH_DONE,
};

/* A record this transaction wrote (for the low-water marks). */
struct txrec {
	uint32_t machine;
	uint64_t seq; /* its wq entry */
};

struct farm_tx {
	farm_txm *m;
	struct txloop *tl;
	uint64_t id;
	struct txobj *o;
	unsigned n, cap;
	unsigned reads_out; /* reads in flight */
	enum phase ph;
	unsigned pending;
	int outcome;
	bool reported, single;
	farm_tx_commit_fn cont;
	void *ctx;
	uint64_t need[0x40]; /* log bytes reserved per machine (M <= 64) */
	uint64_t need_mask;  /* bit m: need[m] != 0 (tx_need_add) */
	uint64_t used[0x40];
	bool locked_at[0x40];
	bool cb_at[0x40];      /* a COMMIT-BACKUP was sent there */
	bool cb_room[0x40];    /* room for an ABORT there is reserved */
	int abort_outcome;     /* PH_ABORT: reported once ABORTs landed */
	bool decided_at[0x40]; /* its COMMIT-PRIMARY or ABORT landed there */
	unsigned wait_writes, wait_replies, wait_reads;
	/* PH_VALIDATE: the next object to validate; when the send queue
	 * was full with none of ours in flight, since when (a deferred
	 * retry counts in wait_reads). */
	unsigned vnext;
	uint64_t vfull_t0;
	int fail;                  /* first failure of the phase */
	uint64_t deadline;         /* waiting for replies until */
	unsigned committed_writes; /* COMMIT-PRIMARY writes that landed */
	bool in_call;              /* inside farm_tx_commit: defer callbacks */
	bool released;             /* farm_tx_free was called */
	/* Records of blocking wrappers that gave up (txsync.c), freed with
	 * the transaction: their operations may still complete into them. */
	struct sync_res *orphans;
	bool retry_posted; /* a reserve_again work item is queued */
	bool deferred_report, deferred_finish;
	unsigned space_tries;
	struct txrec *recs;
	unsigned nrecs, caprecs;
	uint64_t n_writes, n_reads, n_msgs;
	unsigned ep;    /* epoch bucket (farm_epoch_op_begin) */
	uint64_t cseq;  /* commit sequence (0: none taken) */
	uint32_t cfg;   /* configuration when the commit started */
	uint32_t *regs; /* the regions it writes (records' region list) */
	unsigned nregs;
	/* Promoted primaries waiting for its decision (recover.c). */
	struct rec_waiter {
		uint64_t cfg;
		uint32_t machine;
		uint16_t thread;
	} waiters[8];
	unsigned nwaiters;
	farm_tx *next_free; /* in its loop's tx_free_list */
};

/* ---- arena: registered staging memory ------------------------------- */

static inline int arena_cls(size_t n)
{
	int c = 0;
	while (((size_t)64 << c) < n)
		c++;
	return c < NCLS ? c : -1;
}

static inline void *arena_get(struct arena *a, size_t n)
{
	int c = arena_cls(n);
	if (c < 0)
		return NULL;
	void *p = a->free[c];
	if (p) {
		memcpy(&a->free[c], p, sizeof(void *));
		return p;
	}
	size_t sz = (size_t)64 << c;
	if (a->used + sz > a->size)
		return NULL;
	p = a->base + a->used;
	a->used += sz;
	return p;
}

static inline void arena_put(struct arena *a, void *p, size_t n)
{
	int c = arena_cls(n);
	if (!p || c < 0)
		return;
	memcpy(p, &a->free[c], sizeof(void *));
	a->free[c] = p;
}

/* ---- logs: layout --------------------------------------------------- */

static inline uint64_t log_index(const farm_txm *m, uint32_t coord, unsigned t)
{
	return (uint64_t)coord * m->T + t;
}
/* The log memory: a 64-byte superblock (struct log_super: what a
 * restarted machine, or a tool, needs to read the logs without the rest of
 * the machine), one 64-byte header per log, the rings. */
#define LOG_SUPER_MAGIC 0x314c58544d524146ull /* "FARMTXL1" */
/* 2: 48-byte record headers; 3: records and pads carry a checksum
 * (rec_sum) before their trailer. A log of another layout is refused. */
#define LOG_LAYOUT 3u

struct log_super {
	uint64_t magic;
	uint32_t layout; /* LOG_LAYOUT */
	uint32_t machine;
	uint32_t M, T;
	uint64_t R;
	uint64_t hdr_area;
	uint64_t total;
	uint64_t pad[2];
};
_Static_assert(sizeof(struct log_super) == 64, "log superblock");

static inline uint64_t log_hdr_off(const farm_txm *m, uint64_t i)
{
	(void)m;
	return 64 + i * 64;
}
static inline uint64_t log_ring_off(const farm_txm *m, uint64_t i)
{
	return m->hdr_area + i * m->R;
}

static inline uint64_t rec_size(unsigned nobj, uint64_t img_bytes,
                                unsigned nreg)
{
	uint64_t n = sizeof(struct rec_hdr) +
	             (uint64_t)nobj * sizeof(struct rec_obj) + img_bytes +
	             4ull * nreg + 16; /* checksum, trailer */
	return (n + 63) & ~63ull;
}

/*
 * A record's checksum: a 64-bit hash of its first @n bytes (@n a multiple
 * of 8: a record's length - 16; a pad's 48, its header). Eight lanes, each
 * word xored in and the lane multiplied by an odd constant (a bijection of
 * the lane for every word, so a change confined to one lane always
 * changes the result), then the lanes mixed: about 8 bytes a cycle, on
 * the commit path once per record sent. Detects damage, not forgery.
 */
static inline uint64_t rec_sum(const uint8_t *p, uint64_t n)
{
	const uint64_t K = 0x9e3779b97f4a7c15ull;
	uint64_t h[8];
	for (unsigned k = 0; k < 8; k++)
		h[k] = (n + k) * 0xc2b2ae3d27d4eb4full;
	uint64_t i = 0, w;
	for (; i + 64 <= n; i += 64)
		for (unsigned k = 0; k < 8; k++) {
			memcpy(&w, p + i + 8 * k, 8);
			h[k] = (h[k] ^ w) * K;
		}
	for (unsigned k = 0; i + 8 <= n; i += 8, k++) {
		memcpy(&w, p + i, 8);
		h[k] = (h[k] ^ w) * K;
	}
	uint64_t r = 0;
	for (unsigned k = 0; k < 8; k++) {
		r = (r ^ h[k] ^ (h[k] >> 31)) * 0xff51afd7ed558ccdull;
		r ^= r >> 29;
	}
	return r;
}

/* Where a record's (or a pad's) checksum lies: 8 bytes before its
 * trailer; what it covers is everything before it. */
static inline uint64_t rec_sum_off(uint16_t type, uint32_t len)
{
	return type == REC_PAD ? 48 : (uint64_t)len - 16;
}

/* Zero a record of @len bytes (type @type) that truncation frees: its
 * trailer first, so that a kill in the middle leaves a record no scan
 * takes for whole (memset's store order is not ours to know), never one
 * whole by its trailer with a checksum the zeroes broke. */
static inline void rec_zero(uint8_t *rec, uint16_t type, uint32_t len)
{
	atomic_store_explicit(
	        (_Atomic uint64_t *)(void *)(rec +
	                                     (type == REC_PAD ? 56 : len - 8)),
	        0, memory_order_release);
	memset(rec, 0, len);
}

/*
 * May a replica truncate past this record? Only when its transaction is
 * done and its commit sequence is below @cs_low, the low-water mark the
 * records carry: a replica that truncated a COMMIT-BACKUP (and applied
 * it) has then always seen a mark above its sequence. Recovery relies on
 * it: a transaction one surviving backup truncated and another still
 * holds is known finished by that mark (recover.c), not judged by the
 * missing COMMIT-BACKUP (it was, and a reported commit was lost).
 */
#ifdef FARM_FAULT_INJECTION
extern _Atomic bool txn_testing_trunc_early; /* farm_txn_testing_... */
extern _Atomic bool txn_testing_keep_lock_waits;
#endif

static inline bool wq_truncatable(const struct wq_ent *e, uint64_t cs_low)
{
#ifdef FARM_FAULT_INJECTION
	if (atomic_load_explicit(&txn_testing_trunc_early,
	                         memory_order_relaxed))
		return e->done; /* testing: the old, broken rule */
#endif
	return e->done && (!e->cseq || e->cseq < cs_low);
}

static inline void wq_pop_done(struct writer *w, uint64_t cs_low)
{
	while (w->wq_head != w->wq_tail &&
	       wq_truncatable(&w->wq[w->wq_head % w->wq_cap], cs_low))
		w->wq_head++;
}

/* Room for @need more bytes (and a pad) in @w's log? */
static inline bool has_room(const farm_txm *m, const struct writer *w,
                            uint64_t need)
{
	return (w->tail - w->freed) + w->reserved + 2 * need + 128 <= m->R;
}

/* ---- reads ---------------------------------------------------------- */

/* A counter only this loop writes: a plain load and store. */
static inline void cnt_inc(_Atomic uint64_t *c)
{
	atomic_store_explicit(c,
	                      atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

/* A lock-free read's caller (kept inside its rd_op: no allocation). */
struct lf_ctx {
	void *buf;
	farm_op_fn cont;
	void *ctx;
	uint64_t *version_out; /* testing: the version read */
};

struct rd_op {
	struct txloop *tl;
	struct rd_op *next_free;
	struct lf_ctx lf;
	farm_gaddr a;
	uint32_t size, lines;
	uint64_t want; /* incarnation count, or UINT64_MAX */
	uint8_t *img;
	unsigned tries;
	uint64_t t0;
	uint64_t busy_t0; /* ns of the first retry (0: none yet) */
	uint64_t cfg;     /* the configuration the copy was resolved in */
	int status;
	uint64_t version, incarn;
	unsigned ep;  /* lock-free reads: epoch bucket */
	unsigned nel; /* array reads: elements of lines / nel lines each */
	void (*done)(struct rd_op *op);
	void *ctx;
	void *ctx2;
};

static inline struct txloop *loop_state(farm_txm *m, farm_loop *loop)
{
	if (!m || !loop)
		return NULL;
	unsigned i = farm_loop_index(loop);
	struct txloop *tl = i < MAX_LOOPS ? m->loops[i] : NULL;
	return tl && tl->loop == loop ? tl : NULL;
}

/* ---- transactions: the object set ----------------------------------- */

static inline struct txobj *tx_find(farm_tx *tx, farm_gaddr a)
{
	for (unsigned i = 0; i < tx->n; i++)
		if (tx->o[i].a == a)
			return &tx->o[i];
	return NULL;
}

/* Log room for @bytes more in machine @mach's log (@mach < 0x40). The
 * mask lets the loops over a commit's logs visit only those it uses: M is
 * the message layer's machine limit (64), and a single-machine commit
 * without backups, the most common kind, uses none. */
static inline void tx_need_add(farm_tx *tx, uint32_t mach, uint64_t bytes)
{
	tx->need[mach] += bytes;
	tx->need_mask |= 1ull << mach;
}

static inline void tx_need_clear(farm_tx *tx)
{
	memset(tx->need, 0, sizeof(tx->need));
	tx->need_mask = 0;
}

static inline struct txobj *tx_add(farm_tx *tx)
{
	if (tx->n == tx->cap) {
		unsigned nc = tx->cap ? tx->cap * 2 : 8;
		struct txobj *no = realloc(tx->o, nc * sizeof(*no));
		if (!no)
			return NULL;
		tx->o = no;
		tx->cap = nc;
	}
	struct txobj *o = &tx->o[tx->n++];
	memset(o, 0, sizeof(*o));
	return o;
}

/* ---- waiting on a loop (the blocking wrappers) ---------------------- */

struct sync_res {
	volatile int done;
	int status;
	const void *data;
	farm_fatptr fp;
	void *wdata;
	struct sync_res *next; /* farm_tx.orphans */
};

static inline int wait_loop(farm_loop *loop, struct sync_res *r)
{
	int rc = farm_loop_wait(loop, &r->done, 0);
	return rc ? rc : r->status;
}

static inline void sync_op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct sync_res *r = ctx;
	r->status = status;
	r->done = 1;
}

/* txsync.c: free the records of blocking wrappers that gave up. */
void txn_sync_orphans_free(farm_tx *tx);

/* ---- shared between the files ---------------------------------------- */

/* Record-completion kinds (what a log WRITE's completion means to a
 * transaction; commit.c). */
enum { K_LOCK = 1, K_BACKUP, K_PRIMARY, K_ABORT };

/* log.c: commit sequences (struct rec_hdr). */
int txn_cseq_take(struct txloop *tl, uint64_t *out);
void txn_cseq_done(struct txloop *tl, uint64_t cseq);

/* log.c: the writer side. */
int txn_log_append(struct txloop *tl, uint32_t mach, void *buf, size_t len,
                   farm_tx *tx, int kind, uint64_t *seq_out);
void txn_maybe_truncate(struct txloop *tl, uint32_t mach);
void txn_refresh_freed(struct txloop *tl, uint32_t mach);

/* participant.c: the log poller (the loop's poller, with txm.c's). */
int txn_poll(farm_loop *loop, void *ctx);
bool txn_pending(farm_loop *loop, void *ctx);

/* participant.c: what recovery shares */
bool txn_aborted(struct txloop *tl, uint64_t txid);
void txn_note_abort(struct txloop *tl, uint64_t txid, uint64_t pos);
bool txn_copy_apply(uint8_t *p, unsigned lines, const uint8_t *img, bool held);

/* Where an older configuration's transaction installs or unlocks an
 * object it locked here: our primary copy, or, when a view since made
 * another machine the region's primary (growth), the demoted copy it
 * locked it in (farm_as_demoted_ptr: readers still in that configuration
 * read it, so committed writes must reach it). *@demoted says which (the
 * allocator has given a demoted region up: no free there). NULL when
 * neither. Never for a LOCK: a primary locks only its own copy. */
static inline uint8_t *txn_own_ptr(farm_txm *m, farm_gaddr a, uint64_t len,
                                   bool *demoted)
{
	uint8_t *p = farm_as_local_ptr(m->as, a, len);
	*demoted = false;
	if (!p) {
		p = farm_as_demoted_ptr(m->as, a, len);
		*demoted = p != NULL;
	}
	return p;
}

/* copy.c: data recovery. adopt: a COMMIT-BACKUP for @region, of which we
 * hold no copy: when this machine is a new backup of it, open the copy
 * (filling), and with @start (the primary said COPY) start copying;
 * returns whether a copy is held now.
 * skip_apply: the test-only switch (FARM_FAULT_INJECTION) that drops
 * COMMIT-BACKUPs to filling copies. */
int txn_datarec_init(farm_txm *m, uint32_t bytes, uint32_t interval_us);
int txn_datarec_attach(farm_txm *m, struct txloop *tl);
void txn_datarec_detach(farm_txm *m, struct txloop *tl);
void txn_datarec_fini(farm_txm *m);
bool txn_datarec_adopt(farm_txm *m, uint32_t region, bool start);
bool txn_datarec_skip_apply(farm_txm *m, uint32_t region);
void txn_datarec_sums(farm_txm *m, farm_txm_stats *out);

void txn_decide_primary(struct txloop *tl, uint64_t txid, bool commit);

/* allocrec.c: block descriptions carried to backups */
uint32_t txn_alloc_flags(farm_txm *m, const struct txobj *o);
void txn_alloc_note(struct txloop *tl, const uint8_t *rec);
bool txn_free_at_commit(farm_txm *m, struct txloop *tl, farm_gaddr a,
                        uint64_t nv);

/* recover.c */
int txn_rec_init(farm_txm *m);
void txn_rec_fini(farm_txm *m);
void txn_rec_detach(struct txloop *tl);
void txn_rec_truncated(struct txloop *tl, uint64_t txid);
void txn_rec_decided(farm_tx *tx, bool commit);
/* recover.c: whether every loop of this machine has taken configuration
 * @cfg or a later one (the round's barrier): no handler or commit that
 * saw an older one is still between its check and its lock. */
bool txn_rec_taken(farm_txm *m, uint64_t cfg);
bool txn_rec_promoting(farm_txm *m, uint32_t region);
bool txn_rec_truncate_apply(farm_txm *m, uint64_t addr, uint8_t *q,
                            unsigned lines, const uint8_t *img);

/* tx.c */
void txn_tx_free(farm_tx *tx);
bool txn_tx_gone(farm_tx *tx);

/* commit.c */
void txn_tx_record_done(farm_loop *loop, farm_tx *tx, int kind, uint32_t mach,
                        int status);
void txn_tx_reserve(farm_tx *tx);
void txn_tx_finish(farm_tx *tx);
void txn_scan_deadlines(struct txloop *tl);
void txn_end_lock_waits(struct txloop *tl, const bool *removed);
int txn_log_record_at(const uint8_t *ring, uint64_t R, uint64_t off,
                      struct rec_hdr *h, uint64_t *pos);
/* Is a log file's superblock geometry (machines, threads, ring size, the
 * header area and the total they make) one this build writes? The magic
 * and layout are the caller's to check. */
bool txn_log_geometry_ok(const struct log_super *sb);
void txn_h_reply(farm_loop *loop, const farm_msg_in *in, void *arg);

#endif
