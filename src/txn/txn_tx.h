/*
 * Transactions and their objects (tx.c, commit.c, read.c, allocrec.c):
 * the transaction record, its object set, reads in flight, the blocking
 * wrappers' waiter. Internal to src/txn.
 */
#ifndef FARM_TXN_TXN_TX_H
#define FARM_TXN_TXN_TX_H

#include <errno.h>
#include <stddef.h>

#include "alloc/objhdr.h"
#include "txn/txn_int.h"

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

/*
 * A machine a commit touches (a participant): the log room reserved there
 * and what was sent. The list is sized by the machines one commit touches,
 * not by the machine id space: a commit on 1-4 machines finds its entries
 * in a few compares and allocates nothing.
 */
#define TXP_LOCKED  1u  /* a LOCK record was sent there */
#define TXP_CB      2u  /* a COMMIT-BACKUP was sent there */
#define TXP_CB_ROOM 4u  /* room for an ABORT there is reserved */
#define TXP_DECIDED 8u  /* its COMMIT-PRIMARY or ABORT landed there */
#define TXP_SEEN    16u /* scratch: visited by the current pass */
#define TXP_SEENP   32u /* scratch: ... of the outer pass (primaries) */

struct txpart {
	uint32_t mach;
	uint32_t flags; /* TXP_* */
	uint64_t need;  /* log bytes reserved */
	uint64_t used;  /* of which written */
};

#define TXP_INLINE 8u

struct farm_tx {
	farm_txm *m;
	struct txloop *tl;
	uint64_t id;
	struct txobj *o;
	unsigned n, cap;
	/* A bit (tx_obj_bit) for the address of every object ever added:
	 * tx_find scans only when its bit is set. Never cleared while the
	 * transaction lives (an object added and taken back leaves a bit
	 * that only costs a scan). */
	uint64_t omask;
	unsigned reads_out; /* reads in flight */
	enum phase ph;
	unsigned pending;
	int outcome;
	bool reported, single;
	bool counted; /* in farm_txm.commits_out until reported */
	farm_tx_commit_fn cont;
	void *ctx;
	/* The machines the commit touches, by ascending id: in pinl, or in
	 * pheap once more than TXP_INLINE (tx_parts). */
	struct txpart pinl[TXP_INLINE];
	struct txpart *pheap;
	unsigned nparts, capheap;
	int abort_outcome; /* PH_ABORT: reported once ABORTs landed */
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
	unsigned nregs, capregs;
	/* Promoted primaries waiting for its decision (recover.c). */
	struct rec_waiter {
		uint64_t cfg;
		uint32_t machine;
		uint16_t thread;
	} waiters[8];
	unsigned nwaiters;
	farm_tx *next_free; /* in its loop's tx_free_list */
	/* Its objects' data (struct txdata): the newest chunk first. */
	struct txdata *data;
	/* Emptied TXD_CHUNK chunks a recycled record keeps beyond its head
	 * (at most TXD_SPARE), for the next ones it needs. */
	struct txdata *data_spare;
	unsigned nspare;
};

/* ---- transactions: their objects' data ------------------------------ */

/*
 * The bytes of a transaction's objects (txobj.data), which the application
 * holds pointers into until the transaction is freed: carved from chunks
 * the transaction owns, all freed with it (farm_txn_tx_free), never one
 * object's alone. Not in the object array: that moves as it grows. A
 * chunk of TXD_CHUNK bytes takes the small objects one after another; an
 * object over TXD_BIG gets a chunk of its own. A recycled transaction
 * record keeps one TXD_CHUNK chunk, so a short transaction's reads
 * allocate nothing (malloc and free per read were a visible part of a
 * read's cost: TATP's GET_NEW_DESTINATION, perf), and up to TXD_SPARE
 * more for one that reads more (a hashtable write batch's bucket pairs:
 * a chunk's malloc, past the per-thread cache, and its free were a
 * tenth of YCSB-A's allocation instructions).
 */
#define TXD_CHUNK 2048u
#define TXD_BIG   512u
#define TXD_SPARE 3u

struct txdata {
	struct txdata *next;
	uint32_t used, cap;
	_Alignas(max_align_t) uint8_t buf[]; /* cap bytes */
};

/* tx.c: @size bytes (aligned as malloc's) that live as long as @tx,
 * uninitialized; NULL out of memory. */
uint8_t *farm_txn_data_get(farm_tx *tx, uint32_t size);

/* ---- reads in flight ------------------------------------------------ */

/* A lock-free read's caller (kept inside its rd_op: no allocation). */
struct lf_ctx {
	void *buf;
	farm_op_fn cont;
	void *ctx;
	uint64_t *version_out; /* testing: the version read */
};

/* A transactional read's caller (kept inside its rd_op, as lf_ctx). A
 * read of an object already in the read set carries @data (the object's
 * own, which does not move) in a record of its own, no READ behind it. */
struct txrd_ctx {
	farm_tx *tx;
	farm_tx_read_fn cont;
	void *ctx;
	const uint8_t *data; /* cached reads */
};

struct rd_op {
	struct txloop *tl;
	struct rd_op *next_free;
	union {
		struct lf_ctx lf;   /* lock-free reads */
		struct txrd_ctx tr; /* transactional reads */
	};
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

/* ---- transactions: the object set ----------------------------------- */

static inline uint64_t tx_obj_bit(farm_gaddr a)
{
	return 1ull << (((a >> 6) * 0x9e3779b97f4a7c15ull) >> 58);
}

/* The object at @a among the transaction's, or NULL: most reads and
 * writes name an object not yet there (a put's buckets in a batch of
 * puts), which the filter answers without the scan. */
static inline struct txobj *tx_find(farm_tx *tx, farm_gaddr a)
{
	if (!(tx->omask & tx_obj_bit(a)))
		return NULL;
	for (unsigned i = 0; i < tx->n; i++)
		if (tx->o[i].a == a)
			return &tx->o[i];
	return NULL;
}

/* ---- transactions: the participants --------------------------------- */

static inline struct txpart *tx_parts(farm_tx *tx)
{
	return tx->pheap ? tx->pheap : tx->pinl;
}

/* Where machine @mach is, or would be inserted, in the sorted list. A
 * short list (the common case) is searched linearly. */
static inline unsigned tx_part_pos(farm_tx *tx, uint32_t mach)
{
	const struct txpart *p = tx_parts(tx);
	unsigned lo = 0, hi = tx->nparts;
	while (hi - lo > 8) {
		unsigned mid = lo + (hi - lo) / 2;
		if (p[mid].mach < mach)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (lo < hi && p[lo].mach < mach)
		lo++;
	return lo;
}

/* Machine @mach's entry, or NULL if the commit does not touch it. */
static inline struct txpart *tx_part(farm_tx *tx, uint32_t mach)
{
	unsigned i = tx_part_pos(tx, mach);
	struct txpart *p = tx_parts(tx);
	return i < tx->nparts && p[i].mach == mach ? &p[i] : NULL;
}

/* tx.c: room for one more entry (-ENOMEM). */
int farm_txn_parts_grow(farm_tx *tx);

/* Machine @mach's entry, added if new; NULL only out of memory. */
static inline struct txpart *tx_part_get(farm_tx *tx, uint32_t mach)
{
	unsigned i = tx_part_pos(tx, mach);
	struct txpart *p = tx_parts(tx);
	if (i < tx->nparts && p[i].mach == mach)
		return &p[i];
	unsigned cap = tx->pheap ? tx->capheap : TXP_INLINE;
	if (tx->nparts == cap) {
		if (farm_txn_parts_grow(tx))
			return NULL;
		p = tx_parts(tx);
	}
	memmove(&p[i + 1], &p[i], (tx->nparts - i) * sizeof(*p));
	p[i] = (struct txpart){.mach = mach};
	tx->nparts++;
	return &p[i];
}

/* Sets @flag at machine @mach, a participant already (its log room was
 * counted before anything was sent there); never adds one, so a caller
 * may be iterating the list. */
static inline void tx_part_mark(farm_tx *tx, uint32_t mach, uint32_t flag)
{
	struct txpart *p = tx_part(tx, mach);
	if (p)
		p->flags |= flag;
}

static inline bool tx_part_has(farm_tx *tx, uint32_t mach, uint32_t flag)
{
	const struct txpart *p = tx_part(tx, mach);
	return p && (p->flags & flag);
}

/* Clears the scratch flag @seen (TXP_SEEN or TXP_SEENP) before a pass. */
static inline void tx_parts_unsee(farm_tx *tx, uint32_t seen)
{
	struct txpart *p = tx_parts(tx);
	for (unsigned i = 0; i < tx->nparts; i++)
		p[i].flags &= ~seen;
}

/* Forget every participant (the room counted, the flags): the list's
 * memory stays for the next commit of this record. */
static inline void tx_need_clear(farm_tx *tx)
{
	tx->nparts = 0;
}

/* Whether the transaction writes @o. */
static inline bool txo_is_write(const struct txobj *o)
{
	return (o->flags & TXO_WRITE) != 0;
}

/* The incarnation @o will have once committed: a freed object's next. */
static inline uint64_t txo_new_incarn(const struct txobj *o)
{
	return (o->flags & TXO_FREE) ? farm_incarn_freed(o->incarn) : o->incarn;
}

/* A new entry for the object at @a (the caller fills it, @a included). */
static inline struct txobj *tx_add(farm_tx *tx, farm_gaddr a)
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
	tx->omask |= tx_obj_bit(a);
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
void farm_txn_sync_orphans_free(farm_tx *tx);

/* allocrec.c: block descriptions carried to backups */
uint32_t farm_txn_alloc_flags(farm_txm *m, const struct txobj *o);
void farm_txn_alloc_note(struct txloop *tl, const uint8_t *rec);
bool farm_txn_free_at_commit(farm_txm *m, struct txloop *tl, farm_gaddr a,
                             uint64_t nv);

/* tx.c */
void farm_txn_tx_free(farm_tx *tx);
/* A record of the loop's tx_free_list freed, with what it keeps. */
void farm_txn_tx_pool_drop(farm_tx *tx);
bool farm_txn_tx_gone(farm_tx *tx);
/* A new object the transaction does not keep goes back: freed, then
 * unlocked (tx.c has the rule). */
void farm_txn_new_give_back(farm_txm *m, farm_loop *loop, farm_gaddr a,
                            uint64_t elem_bytes, uint32_t n,
                            _Atomic uint64_t *hv, uint64_t version);
/* An element of a new array going back, after farm_txn_new_give_back
 * freed the array: its header @hv (NULL: none here) unlocked at @version.
 * Release: pairs with the acquire of the header by the next allocation
 * here and by data recovery. */
static inline void farm_txn_new_unlock(_Atomic uint64_t *hv, uint64_t version)
{
	if (hv)
		atomic_store_explicit(hv, version, memory_order_release);
}

/* commit.c */
void farm_txn_tx_record_done(farm_loop *loop, farm_tx *tx, int kind,
                             uint32_t mach, int status);
void farm_txn_tx_finish(farm_tx *tx);
void farm_txn_scan_deadlines(struct txloop *tl);
void farm_txn_end_lock_waits(struct txloop *tl, const bool *removed);
void farm_txn_h_reply(farm_loop *loop, const farm_msg_in *in, void *arg);
uint64_t farm_txn_rec_bytes(farm_tx *tx, int type, uint32_t p, uint32_t b,
                            unsigned *nobj);
void farm_txn_tx_report(farm_tx *tx, int outcome);
void farm_txn_phase_validate(farm_tx *tx);
void farm_txn_tx_start_phases(farm_tx *tx);
void farm_txn_tx_step(farm_tx *tx);

/* commit_single.c: the single-machine phases (lock shared, then install
 * and unlock; unlock the first @upto objects on failure). */
void farm_txn_single_lock(farm_tx *tx);
void farm_txn_single_install(farm_tx *tx);
void farm_txn_single_unlock(farm_tx *tx, unsigned upto);

/* commit_start.c */
void farm_txn_tx_reserve(farm_tx *tx);

/*
 * What a transaction's decision must tell other parts of the layer: set
 * by them (recover.c registers the promoted primaries' waiters with
 * farm_txn_on_decided), called by the coordinator (commit.c) when @tx is
 * decided: commit at COMMIT-PRIMARY, abort at ABORT.
 */
typedef void (*txn_decided_fn)(farm_tx *tx, bool commit);
void farm_txn_on_decided(farm_txm *m, txn_decided_fn fn);
void farm_txn_tell_decided(farm_tx *tx, bool commit);

#endif
