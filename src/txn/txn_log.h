/*
 * The transaction logs (log.c, participant.c, restart.c): the records and
 * their layout in a log, the writer's and the reader's side of one log,
 * and the arena, the registered memory records are staged in. Internal
 * to src/txn.
 */
#ifndef FARM_TXN_TXN_LOG_H
#define FARM_TXN_TXN_LOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txm.h"
#include "util/common.h"

/* Limits every file of the layer shares. */
#define MAX_LOOPS     64
#define TX_SLOTS      4096u /* concurrent transactions per loop */
#define TX_POOL       64u   /* finished transaction records kept per loop */
#define TX_POOL_OBJS  64u   /* ... when their object array is this small */
#define TX_POOL_PARTS 64u   /* ... keeping a participant list this small */
#define LOCK_BUCKETS  1024u
#define CS_RING       (2 * TX_SLOTS) /* commits of a loop in flight, at most */

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

/* ---- the writer's and the reader's side of a log ------------------- */

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

#define WQ_CAP 1024u /* first record queue of a log writer; grows */

/* This loop's side of its log on machine @m (coordinator role). */
struct writer {
	uint64_t tail;     /* next record position (abs) */
	uint64_t freed;    /* what we know the replica has freed (abs) */
	uint64_t reserved; /* bytes promised to commits in progress */
	uint64_t sent_trunc;
	uint64_t wq_head, wq_tail; /* wq entries [head, tail) */
	struct wq_ent *wq; /* wq_cap, a power of two; grows; NULL until used */
	uint64_t wq_cap;
	bool reading; /* a READ of the freed word is out */
	/* Pacing of those READs while they find no room freed
	 * (freed_read_done): the gap before the next (doubling, 0 when no
	 * commit waits), the earliest time it may go, and when a READ asked
	 * for before then goes (0: none deferred; the poller sends it,
	 * farm_txn_pace_reads). */
	uint32_t pace_ns;
	uint64_t read_ok_at, read_at;
	/* The replica opened the log to this machine's incarnation (its
	 * header says so: farm_txn_writer_open). */
	bool open;
	/* The log there takes memory: backed by this loop before its first
	 * record (the participant backs only its first page). */
	bool backed;
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
	/* The incarnation of the coordinator whose records it reads, and
	 * (when @reopen) the incarnation of a new holder of the id whose
	 * records come once the old holder's are recovered and zeroed
	 * (farm_txm_forget_peer, farm_txn_log_reopen). */
	uint64_t inc, next_inc;
	bool reopen;
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

/* ---- arena: registered staging memory ------------------------------- */

/* The class of @n bytes: the smallest c with 64 << c >= n, or -1 past
 * the largest. A count of leading zeros, not a loop: every read gets and
 * puts an image. */
static inline int arena_cls(size_t n)
{
	if (n <= 64)
		return 0;
	if (n <= 128)
		return 1; /* a small object's two lines: no count */
	int c = 64 - __builtin_clzll((unsigned long long)((n - 1) >> 6));
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
#pragma GCC unroll 8 /* no lane counter among the multiplies (-O2) */
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
	/* Release: pairs with the acquire load of the trailer in the log
	 * scan (participant.c), which then never takes the record whole. */
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
extern _Atomic bool farm_txn_testing_trunc_early_on; /* farm_txn_testing_... */
extern _Atomic bool farm_txn_testing_keep_lock_waits_on;
#endif

static inline bool wq_truncatable(const struct wq_ent *e, uint64_t cs_low)
{
#ifdef FARM_FAULT_INJECTION
	if (atomic_load_explicit(&farm_txn_testing_trunc_early_on,
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

/* Record-completion kinds (what a log WRITE's completion means to a
 * transaction; commit.c). */
enum { K_LOCK = 1, K_BACKUP, K_PRIMARY, K_ABORT };

struct txloop;

/* log.c: commit sequences (struct rec_hdr). */
int farm_txn_cseq_take(struct txloop *tl, uint64_t *out);
void farm_txn_cseq_done(struct txloop *tl, uint64_t cseq);

/* log.c: the writer side. */
int farm_txn_log_append(struct txloop *tl, uint32_t mach, void *buf, size_t len,
                        farm_tx *tx, int kind, uint64_t *seq_out);
void farm_txn_maybe_truncate(struct txloop *tl, uint32_t mach,
                             bool short_of_room);
/* A TRUNCATE record to every log this loop writes (of the machines
 * @member flags, M of them; NULL: every ready one) whose low-water mark
 * moved since it last said: a recovery round's, so that no log keeps an
 * idle coordinator's finished records into later configurations (a
 * whole-cluster restart judges those by the configuration history, which
 * reaches back HIST_DEPTH configurations only: src/node/restart_hist.c).
 * Returns how many were sent. On the loop's thread. */
int farm_txn_truncate_all(struct txloop *tl, const bool *member);
void farm_txn_refresh_freed(struct txloop *tl, uint32_t mach);
/* Commit @tx waits for room: the next freed-word READ's completion
 * retries it (farm_txn_tx_reserve). */
void farm_txn_room_wait(struct txloop *tl, farm_tx *tx);
/* The poller's part of pacing: send the freed-word READs now due; 1 when
 * one was sent, and asks the loop to wake for the next one. */
int farm_txn_pace_reads(struct txloop *tl);

int farm_txn_log_record_at(const uint8_t *ring, uint64_t R, uint64_t off,
                           struct rec_hdr *h, uint64_t *pos);
/* Is a log file's superblock geometry (machines, threads, ring size, the
 * header area and the total they make) one this build writes? The magic
 * and layout are the caller's to check. */
bool farm_txn_log_geometry_ok(const struct log_super *sb);

#endif
