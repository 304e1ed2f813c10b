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
 *
 * The headers by role: txn_log.h (the logs and the arena), txn_rec.h
 * (recovery's state), txn_tx.h (transactions, their objects, reads); this
 * one, the manager and a loop's state, includes the first two (a loop
 * holds its logs' writers and readers, the manager recovery's state).
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
#include "util/fault.h"
#include "util/stat.h"

#include "txn/txn_log.h"
#include "txn/txn_rec.h"

#define ROOM_WAITS 16u

/* Counters by S_* (below), S_NSTATS of them used. */
struct txm_counters {
	_Atomic uint64_t v[48];
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
	struct sync_res *sync_spare; /* a blocking wrapper's (txsync.c) */
	/* This loop's counters (farm_txm.lst[t]; txl_count). */
	struct txm_counters *lst;
	/* Commits of this loop's transactions between farm_tx_commit and
	 * their outcome (farm_txm.quiescing): its own line, so counting
	 * costs no cache line shared by every loop. This loop's thread is
	 * its one writer (txl_commit_done). */
	atomic_ulong commits_out;
	unsigned inflight; /* log WRITEs and freed-word READs not completed */
	/* The slots (TX_SLOTS) of commits that found a log short of room
	 * since the last freed-word READ's completion retried the waiting
	 * ones (farm_txn_room_wait); room_all: more than ROOM_WAITS of them,
	 * the whole slot table is scanned. */
	uint32_t room_slot[ROOM_WAITS];
	unsigned nroom;
	bool room_all;
	unsigned npaced;     /* writers with a freed-word READ deferred */
	uint64_t epoch_tick; /* loop 0: passes, for the epoch trigger */
	/* Commit sequences (struct rec_hdr): the next one, the lowest not
	 * finished, and which of [cs_low, cs_next) have finished. */
	uint64_t cs_next, cs_low;
	uint8_t *cs_done;         /* CS_RING */
	struct rec_pend *pend;    /* recover.c */
	struct rec_kept *kept;    /* recover_kept.c */
	struct farm_as_rcache rc; /* where regions are, for reads */
};

struct farm_txm {
	_Atomic uint64_t sync_timeout_ns; /* the *_sync wrappers' default */
	farm_fabric *fab;
	farm_msg *msg;
	farm_as *as;
	/* What every read of the address space needs, kept for the read
	 * path (read.c): the region size and the configuration id's word
	 * rd_start and rd_moved load (addrspace.h: farm_as_config_word). */
	uint64_t region_size;
	const _Atomic uint64_t *as_cfg;
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
	uint32_t *ready_ids; /* M */
	_Atomic unsigned nready;
	pthread_mutex_t peer_lock;
	struct txloop *loops[MAX_LOOPS];
	/* Distributed epochs (loop 0 starts the background ones). */
	unsigned epoch_free_pct;
	bool epoch_running; /* a background epoch is in flight */
	bool epoch_domain;  /* holds a farm_epoch_domain_get */
	uint64_t epoch_last_check;
	uint64_t epoch_reclaimed_now; /* the background epoch's result */
	/* Counters any thread adds to (farm_stat_add): what is counted off
	 * the loops (epochs) or seldom (errors, recovery). */
	struct txm_counters st;
	/* Counters per loop index, each written by that loop's thread alone
	 * (txl_count): what the loops count per operation (commits,
	 * installs, backup applies, reads). A locked add per counter drained
	 * the store buffer on a write path whose stores mostly miss: 8.7%
	 * of the poller's samples under YCSB-A sat after one. Kept here, not
	 * in the txloop, so that farm_txm_stats_read sums them while loops
	 * attach and detach, and a detached loop's counts stay. */
	struct txm_counters lst[MAX_LOOPS];
	struct txrec_state rec;
	/* Told when a transaction is decided (txn_tx.h, farm_txn_on_decided).
	 */
	void (*on_decided)(farm_tx *tx, bool commit);
	struct farm_datarec *dr;      /* copy.c: data recovery */
	_Atomic uint64_t serve_until; /* farm_txm_serve_word */
	/* Graceful leave (farm_txm_quiesce): set, new commits are refused
	 * -ESHUTDOWN. Each loop counts its commits between farm_tx_commit and
	 * their outcome (txloop.commits_out). Sequentially consistent, both:
	 * a commit counts itself before it reads the flag, the quiescer sets
	 * the flag before it reads the counts, so one of them sees the
	 * other. */
	atomic_bool quiescing;
	/* Bytes of the attached loops' per-machine tables and log record
	 * queues (made on first use), for farm_txm_memory. */
	_Atomic uint64_t loop_bytes;
	/* This machine's incarnation of its id (farm_txm_set_incarnation). */
	_Atomic uint32_t self_inc;
	/* farm_txm_set_removed: set once, never cleared. Relaxed: a flag
	 * that only picks an error; what fences the machine is the fabric. */
	atomic_bool removed;
};

/* A commit of @tl counted in commits_out has its outcome (or was refused
 * before it began). Only @tl's thread writes the count (farm_tx_commit's
 * increment too), so a load and a store, no locked instruction: the
 * increment must be a sequentially consistent read-modify-write, ordered
 * before its read of the quiescing flag (farm_txm.quiescing), the drop
 * need not. Release: pairs with the load in farm_txm_commits_out, so a
 * leaver that sees the count drop sees what the commit did before. */
static inline void txl_commit_done(struct txloop *tl)
{
	unsigned long n =
	        atomic_load_explicit(&tl->commits_out, memory_order_relaxed);
	atomic_store_explicit(&tl->commits_out, n - 1, memory_order_release);
}

/* May this machine serve a read now (its lease holds)? Acquire: pairs with
 * the release stores of the serve word in recovery/lease.c. */
static inline bool txn_serving(farm_txm *m)
{
	return farm_txm_lease_held(&m->serve_until);
}

/* Whether this machine knows it was removed (farm_txm_set_removed). */
static inline bool txn_removed(farm_txm *m)
{
	return atomic_load_explicit(&m->removed, memory_order_relaxed);
}

/* Whether its transactions and reads fail FARM_EFENCED: removed, unless
 * testing the old, retryable answers (FARM_FP_REMOVED_LOUD). */
static inline bool txn_fenced(farm_txm *m)
{
	return txn_removed(m) && !FARM_FAULT_SWITCH(FARM_FP_REMOVED_LOUD);
}

/* The error of a read this machine may not serve: FARM_EFENCED once it
 * knows it was removed (final: retrying cannot help), else FARM_ELEASE
 * (retryable: the lease may be renewed). */
static inline int txn_not_serving(farm_txm *m)
{
	return txn_fenced(m) ? FARM_EFENCED : FARM_ELEASE;
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
	S_LOCK_WAITS_ENDED,  /* LOCK waits on dead machines ended early */
	S_FREE_FAILED,       /* frees at commit the allocator refused (leaks) */
	S_FREE_DEFERRED,     /* frees at commit waiting for their region */
	S_BLOCK_NOTES,       /* block descriptions written into backup copies */
	S_BLOCK_NOTE_ERRORS, /* ... refused (the copy's table disagrees) */
	S_REC_DEC_UNLOCKED,  /* decisions that found no LOCK held here */
	S_NSTATS
};
_Static_assert(S_NSTATS <= 48, "struct txm_counters holds the counters");

/* Add @n to this loop's counter @s (S_*). Only @tl's own thread calls it:
 * its slab has that one writer, so a relaxed load and store (util/stat.h,
 * farm_stat_add_owned), no locked instruction; farm_txm_stats_read on
 * another thread sees whole values and sums the slabs. */
static inline void txl_count(struct txloop *tl, unsigned s, uint64_t n)
{
	farm_stat_add_owned(&tl->lst->v[s], n);
}

/* ---- logs: where a log lives in the log memory ---------------------- */

static inline uint64_t log_index(const farm_txm *m, uint32_t coord, unsigned t)
{
	return (uint64_t)coord * m->T + t;
}
static inline uint64_t log_hdr_off(const farm_txm *m, uint64_t i)
{
	(void)m;
	return 64 + i * 64;
}
/* Word 2 of a log's header: nonzero while records of its coordinator may
 * be in it (set when the coordinator becomes a peer, cleared when
 * recovery empties a removed holder's log). A whole-cluster restart reads
 * the rings of every coordinator any member's log marks so, removed ones
 * too (restart.c, farm_txlog_pending). */
#define LOG_HDR_PENDING 16u
static inline uint64_t log_ring_off(const farm_txm *m, uint64_t i)
{
	return m->hdr_area + i * m->R;
}

/* Where log position @pos falls in its ring. The ring's size is a power
 * of two (farm_txm_create refuses any other), so a mask: a division by
 * it, in every log's poll on every pass of the loop, was 40% of the
 * poller's own time in a read-only profile (docs/benchmarks.md,
 * kv_bench). */
static inline uint64_t log_pos(const farm_txm *m, uint64_t pos)
{
	return pos & (m->R - 1);
}

/* May this loop write its log on @mach (writer @w)? A machine that holds
 * a reused id (a new incarnation) writes only once the log there is open
 * to it: emptied of the id's old holder's records (txm.c,
 * farm_txn_log_reopen). An id's first holder, and our own log, always. */
static inline bool farm_txn_writer_open(farm_txm *m, const struct writer *w,
                                        uint32_t mach)
{
	return w->open || mach == m->me ||
	       !atomic_load_explicit(&m->self_inc, memory_order_relaxed);
}

/* txm.c: log (@coord, @tl's thread) here opens to the new holder of
 * @coord (tl->r[coord].next_inc): the old holder's state goes. */
void farm_txn_log_reopen(struct txloop *tl, uint32_t coord);
/* txm.c: log (@id, @t)'s header word LOG_HDR_PENDING set or cleared,
 * persisted. */
void farm_txn_log_mark_pending(farm_txm *m, uint32_t id, unsigned t, bool on);

static inline bool has_room(const farm_txm *m, const struct writer *w,
                            uint64_t need)
{
	return (w->tail - w->freed) + w->reserved + 2 * need + 128 <= m->R;
}

static inline struct txloop *loop_state(farm_txm *m, farm_loop *loop)
{
	if (!m || !loop)
		return NULL;
	unsigned i = farm_loop_index(loop);
	struct txloop *tl = i < MAX_LOOPS ? m->loops[i] : NULL;
	return tl && tl->loop == loop ? tl : NULL;
}

/* participant.c: the log poller (the loop's poller, with txm.c's). */
int farm_txn_poll(farm_loop *loop, void *ctx);
bool farm_txn_pending(farm_loop *loop, void *ctx);

/* participant.c: what recovery shares */
bool farm_txn_aborted(struct txloop *tl, uint64_t txid);
void farm_txn_note_abort(struct txloop *tl, uint64_t txid, uint64_t pos);
bool farm_txn_copy_apply(uint8_t *p, unsigned lines, const uint8_t *img,
                         bool held);

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

/* copy.c: data recovery. adopt: @region, of which we hold no copy (the
 * primary said COPY, or recovery gave our copy up): when this machine is
 * a new backup of it, open the copy (filling; on the copy engine's
 * thread or off the clients' path, never for a COMMIT-BACKUP on a loop),
 * and with @start start copying; returns whether a copy is held now.
 * skip_apply: the test-only switch (FARM_FAULT_INJECTION) that drops
 * COMMIT-BACKUPs to filling copies. */
int farm_txn_datarec_init(farm_txm *m, uint32_t bytes, uint32_t interval_us,
                          uint32_t hold_ms);
int farm_txn_datarec_attach(farm_txm *m, struct txloop *tl);
void farm_txn_datarec_detach(farm_txm *m, struct txloop *tl);
void farm_txn_datarec_fini(farm_txm *m);
bool farm_txn_datarec_adopt(farm_txm *m, uint32_t region, bool start);
/* The same with @made, a region the caller made for the copy (NULL: made
 * here), taken over. */
bool farm_txn_datarec_adopt_made(farm_txm *m, uint32_t region, bool start,
                                 farm_region *made);
bool farm_txn_datarec_skip_apply(farm_txm *m, uint32_t region);
void farm_txn_datarec_sums(farm_txm *m, farm_txm_stats *out);

bool farm_txn_decide_primary(struct txloop *tl, uint64_t txid, bool commit);
#ifdef FARM_FAULT_INJECTION
void farm_txn_testing_install_rec(struct txloop *tl, const uint8_t *rec);
#endif

#endif
