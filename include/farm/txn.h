/*
 * libfarm transactions: strictly serializable ACID transactions over the
 * global address space, and lock-free reads, after FaRM (NSDI'14 Figure 6;
 * commit protocol of SOSP'15).
 *
 * A machine has one transaction manager (farm_txm) over its messaging,
 * address space and allocator. A transaction runs on one event loop: it is
 * begun, used and committed on that loop's thread, and every call that
 * waits takes a continuation that runs there. The *_sync wrappers drive the
 * loop until the operation is done, for code that owns a loop and is not
 * inside a handler or continuation.
 *
 * Objects are named by global addresses and read with their size; reads
 * copy the object's application bytes (versions stripped), writes make a
 * private copy that commit installs. Sizes are application bytes, at most
 * FARM_TX_MAX_SIZE. Errors are negative codes; farm_tx_retryable() says
 * which outcomes are worth running the transaction again for.
 */
#ifndef FARM_TXN_H
#define FARM_TXN_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/addr.h>
#include <farm/error.h>
#include <farm/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct farm_txm farm_txm;
typedef struct farm_tx farm_tx;

/* The largest object: 16384 lines of 64 bytes, less versions. */
#define FARM_TX_MAX_SIZE (48u + 62u * 16383u)

/*
 * A fat pointer: an object's address, size, and the incarnation it had
 * when the pointer was made. Reading through a fat pointer whose object
 * was freed (and maybe reused) reports FARM_EFREED, never other data.
 */
typedef struct farm_fatptr {
	farm_gaddr addr;
	uint32_t size;
	uint32_t pad;
	uint64_t incarnation;
} farm_fatptr;

/* ---- transactions -------------------------------------------------------- */

/* Begin a transaction on @loop (its thread). -EINVAL; -EAGAIN (too many
 * open on @loop); -ENOMEM; FARM_EFENCED once this machine knows it was
 * removed from the configuration (farm_node_removed): final, not
 * retryable, as are reads it may no longer serve then; stop using it. */
FARM_API FARM_MUST_CHECK int farm_tx_begin(farm_txm *m, farm_loop *loop,
                                           farm_tx **out);

/* Read completion: @status 0 and the object's bytes (valid until the
 * transaction ends), or an error (the transaction stays usable). */
typedef void (*farm_tx_read_fn)(farm_tx *tx, void *ctx, int status,
                                const void *data, uint32_t size);

/*
 * farm_tx_read() - read @size bytes of the object at @a (one one-sided READ
 * when it is remote; its version joins the read set). A second read of the
 * same object returns the transaction's copy (with its writes). Errors:
 * -EINVAL (bad address or size, or a size past the object), FARM_EFREED
 * (not allocated), -EBUSY (locked for longer than the read's bound:
 * 4096 retries and at least 1 s),
 * FARM_EPEERDEAD.
 */
FARM_API FARM_MUST_CHECK int farm_tx_read(farm_tx *tx, farm_gaddr a,
                                          uint32_t size, farm_tx_read_fn cont,
                                          void *ctx);
/*
 * farm_tx_read_local() - farm_tx_read of an object stored on this machine,
 * done at once (no continuation): for code that may not wait, such as a
 * message handler running a transaction on the objects it owns. -EREMOTE
 * when the object is not local; -EBUSY when it stayed locked.
 */
FARM_API FARM_MUST_CHECK int
farm_tx_read_local(farm_tx *tx, farm_gaddr a, uint32_t size, const void **data);
/* As farm_tx_read, checking the fat pointer's incarnation. */
FARM_API FARM_MUST_CHECK int farm_tx_read_fat(farm_tx *tx, farm_fatptr p,
                                              farm_tx_read_fn cont, void *ctx);

/*
 * farm_tx_write() - a writable copy of an object this transaction has read
 * (-ENOENT otherwise); *@data points at its bytes until the transaction
 * ends. Commit installs it.
 */
FARM_API FARM_MUST_CHECK int farm_tx_write(farm_tx *tx, farm_gaddr a,
                                           void **data);

/*
 * farm_tx_write_fits() - whether @nobj more written objects of @size
 * bytes each (new ones this transaction allocates, or objects on machines
 * it already writes) still fit a commit: every log record of a commit to
 * one machine must fit half of that machine's log (log_size), and a
 * commit over it fails with -E2BIG, after the work that built it. This
 * counts the write set so far and assumes the worst spread (every object
 * in one log), so 0 means the commit will not be refused for size; it
 * changes nothing. Returns 0, -E2BIG, -EINVAL (NULL, or @size 0 or over
 * FARM_TX_MAX_SIZE with @nobj), FARM_ECLOSED (commit already called).
 */
FARM_API FARM_MUST_CHECK int farm_tx_write_fits(const farm_tx *tx,
                                                uint32_t nobj, uint32_t size);

/* Allocation completion: the new object's fat pointer and writable bytes
 * (zeroed), or an error. */
typedef void (*farm_tx_alloc_fn)(farm_tx *tx, void *ctx, int status,
                                 farm_fatptr p, void *data);
/*
 * farm_tx_alloc() - a new object of @size bytes, near @hint
 * (FARM_GADDR_NULL: anywhere), part of the write set: it exists for others
 * once the transaction commits and is freed if it aborts. @cont's status
 * is -EAGAIN (retryable: farm_tx_retryable) when the region it was made
 * in left this machine meanwhile (growth made another machine its
 * primary); the same for arrays.
 */
FARM_API FARM_MUST_CHECK int farm_tx_alloc(farm_tx *tx, uint32_t size,
                                           farm_gaddr hint,
                                           farm_tx_alloc_fn cont, void *ctx);
/* Free an object this transaction has read, when it commits (arrays:
 * farm_tx_free_array, never an element alone). */
FARM_API FARM_MUST_CHECK int farm_tx_free_obj(farm_tx *tx, farm_gaddr a);

/*
 * Arrays: @n objects of @elem_size application bytes each, back to back
 * in memory (element i at first.addr + i * farm_array_stride(elem_size)),
 * every element an object of its own (versions, incarnation), so elements
 * are read and written like any object, and a range of them is read with
 * one READ (farm_lf_read_array).
 *
 * farm_tx_alloc_array() - a new array on this machine (near @hint when it
 * is local), every element zeroed and part of the write set; @cont gets
 * element 0's fat pointer and bytes (farm_tx_write gives the others). It
 * exists for others once the transaction commits and is freed whole if it
 * aborts. At most 1 MiB stored (-E2BIG); the commit's records must also
 * fit half a log (-E2BIG from farm_tx_commit).
 * farm_tx_free_array() - free the whole array when the transaction
 * commits; every element must have been read by it (-ENOENT otherwise),
 * -EINVAL when they do not match @first (size, incarnation).
 */
FARM_API FARM_MUST_CHECK int
farm_tx_alloc_array(farm_tx *tx, uint32_t elem_size, uint32_t n,
                    farm_gaddr hint, farm_tx_alloc_fn cont, void *ctx);
FARM_API FARM_MUST_CHECK int farm_tx_free_array(farm_tx *tx, farm_fatptr first,
                                                uint32_t n);
/* Bytes from one element to the next: whole lines with their versions. */
static inline uint64_t farm_array_stride(uint32_t elem_size)
{
	return elem_size <= 48 ? 64 : 64ull * (1 + (elem_size - 48 + 61) / 62);
}

/*
 * farm_tx_commit() - commit. @cont runs once, on the transaction's loop,
 * never before this returns, with the outcome: 0 committed;
 * FARM_ECONFLICT (a lock was refused), FARM_EVALIDATION (a read changed),
 * FARM_EPEERDEAD or -ETIMEDOUT (a participant did not answer), -ENOSPC (no
 * log room), FARM_EFREED (an object was freed meanwhile). Errors returned
 * here (nothing happened): -EBUSY (reads in flight), FARM_ECLOSED (already
 * committed or aborted), -E2BIG (the commit needs more than half a log),
 * FARM_EPEERDEAD (a participant is unknown), -ESHUTDOWN (this machine is
 * leaving gracefully and has quiesced: farm_node_leave).
 */
typedef void (*farm_tx_commit_fn)(farm_loop *loop, void *ctx, int outcome);
FARM_API FARM_MUST_CHECK int farm_tx_commit(farm_tx *tx, farm_tx_commit_fn cont,
                                            void *ctx);
/* End the transaction without committing (before farm_tx_commit; objects
 * it allocated are freed). FARM_ECLOSED after a commit, -EBUSY with reads
 * in flight. */
FARM_API int farm_tx_abort(farm_tx *tx);
/*
 * farm_tx_free() - release the handle. Every transaction is freed, after
 * its commit or abort or instead of them (then it is aborted); a commit in
 * flight finishes first. Calls on an ended transaction return FARM_ECLOSED.
 */
FARM_API void farm_tx_free(farm_tx *tx);

/* Whether running the transaction again may succeed: conflicts, and
 * failures of a participant (FARM_EPEERDEAD, -ETIMEDOUT), which a commit
 * reports only once it is sure not to have committed; after recovery
 * installs the next configuration the retry succeeds. False for
 * FARM_EUNKNOWN, a blocking commit given up at its deadline: it may have
 * committed, and a retry could commit twice. False for FARM_EFENCED: this
 * machine was removed, and nothing it begins will commit. */
FARM_API bool farm_tx_retryable(int outcome);

/* ---- blocking wrappers (drive the loop; not from handlers) --------------- */

/*
 * Each waits at most its deadline: the transaction manager's default
 * (farm_txm_set_sync_timeout; 0, the initial value, is no limit of the
 * wrapper's own) or, for the *_timed variants, @timeout_ns (0: no limit).
 * Past it the wrapper returns -ETIMEDOUT (a commit's: FARM_EUNKNOWN) and
 * the operation goes on; its
 * outcome is then what the asynchronous call defines and is not reported:
 * a read or allocation may still complete (the transaction stays in use:
 * farm_tx_free it, or wait for nothing more from it), and a commit's
 * outcome is UNKNOWN (it may commit later, or may have committed: read the
 * objects again in a new transaction to learn). Either way the
 * transaction must still be freed with farm_tx_free, which a commit in
 * flight outlives. The commit wrapper's own deadline is FARM_EUNKNOWN,
 * which farm_tx_retryable refuses (running the transaction again could
 * commit it twice); an -ETIMEDOUT a commit itself reports (a participant
 * did not answer, and it is sure not to have committed) stays retryable.
 */

/* Set the deadline of the blocking wrappers of @m's transactions (ns, 0:
 * none); any thread, for the calls that start after it. */
FARM_API void farm_txm_set_sync_timeout(farm_txm *m, uint64_t timeout_ns);

/* *@data stays valid until the transaction ends. */
FARM_API FARM_MUST_CHECK int
farm_tx_read_sync(farm_tx *tx, farm_gaddr a, uint32_t size, const void **data);
FARM_API FARM_MUST_CHECK int farm_tx_alloc_sync(farm_tx *tx, uint32_t size,
                                                farm_gaddr hint, farm_fatptr *p,
                                                void **data);
FARM_API FARM_MUST_CHECK int farm_tx_commit_sync(farm_tx *tx);
FARM_API FARM_MUST_CHECK int farm_tx_read_sync_timed(farm_tx *tx, farm_gaddr a,
                                                     uint32_t size,
                                                     const void **data,
                                                     uint64_t timeout_ns);
FARM_API FARM_MUST_CHECK int
farm_tx_alloc_sync_timed(farm_tx *tx, uint32_t size, farm_gaddr hint,
                         farm_fatptr *p, void **data, uint64_t timeout_ns);
FARM_API FARM_MUST_CHECK int farm_tx_commit_sync_timed(farm_tx *tx,
                                                       uint64_t timeout_ns);

/* A transaction's work: reads and writes through the *_sync calls on @tx.
 * Returns 0 to commit, or a negative code to abort with it (a retryable
 * one, such as a read's FARM_EVALIDATION, is tried again). It must not
 * commit, abort or free @tx, and may run several times. */
typedef int (*farm_tx_body_fn)(farm_tx *tx, void *ctx);

/* Tries farm_tx_run makes when @max_tries is 0. */
#define FARM_TX_RUN_TRIES 64u

/*
 * farm_tx_run() - run @body in a transaction on @loop and commit it, again
 * while the outcome is retryable (farm_tx_retryable), at most @max_tries
 * times (0: FARM_TX_RUN_TRIES), with randomized exponential backoff between
 * tries (2 us doubling to 16 ms; the loop keeps serving meanwhile, so 64
 * tries span about a second: long enough for recovery to install a new
 * configuration after a machine fails).
 *
 * The body's *_sync reads and allocations wait at most the manager's
 * deadline (farm_txm_set_sync_timeout; -ETIMEDOUT then aborts the try and
 * is retried), its commit without one: a commit abandoned at a deadline
 * has an unknown outcome, and trying again could commit the body twice.
 *
 * Returns 0 once a try committed; the body's error when it is not
 * retryable (that try aborted); the last try's outcome when every try
 * failed. -EINVAL for a NULL argument or a body that returned a positive
 * value. A blocking wrapper: not from a handler or continuation
 * (-EDEADLK).
 */
FARM_API FARM_MUST_CHECK int farm_tx_run(farm_txm *m, farm_loop *loop,
                                         farm_tx_body_fn body, void *ctx,
                                         unsigned max_tries);

/* ---- lock-free reads ----------------------------------------------------- */

/*
 * farm_lf_read() - read @size bytes of the object at @a into @buf with one
 * one-sided READ (a local copy when it is local), retried with randomized
 * backoff while it is being installed; serializable with transactions.
 * @want_incarnation UINT64_MAX: any; else FARM_EFREED when it differs.
 * Errors as farm_tx_read.
 */
FARM_API FARM_MUST_CHECK int farm_lf_read(farm_txm *m, farm_loop *loop,
                                          farm_gaddr a, uint32_t size,
                                          uint64_t want_incarnation, void *buf,
                                          farm_op_fn cont, void *ctx);
/*
 * farm_lf_read_array() - elements @from .. @from + @count - 1 of the array
 * whose element 0 @first names, with one one-sided READ, each element
 * validated as farm_lf_read validates an object (and against @first's
 * incarnation: FARM_EFREED once the array is freed); @buf receives
 * @count * first.size bytes. -E2BIG past 1 MiB in one read, -EINVAL for a
 * range outside the region.
 */
FARM_API FARM_MUST_CHECK int farm_lf_read_array(farm_txm *m, farm_loop *loop,
                                                farm_fatptr first,
                                                uint32_t from, uint32_t count,
                                                void *buf, farm_op_fn cont,
                                                void *ctx);
FARM_API FARM_MUST_CHECK int farm_lf_read_sync(farm_txm *m, farm_loop *loop,
                                               farm_gaddr a, uint32_t size,
                                               uint64_t want_incarnation,
                                               void *buf);

/*
 * Lock-free operations: a lookup that follows pointers through several
 * lock-free reads (each farm_lf_read is one operation by itself) brackets
 * them with farm_lf_begin / farm_lf_end on its loop's thread, so memory it
 * may still reach is not reused for another size class meanwhile
 * (epochs). Operations should be short: an open one delays every epoch.
 */
typedef struct farm_lf_op {
	unsigned parity, open;
} farm_lf_op;
FARM_API FARM_MUST_CHECK int farm_lf_begin(farm_txm *m, farm_loop *loop,
                                           farm_lf_op *op);
FARM_API void farm_lf_end(farm_lf_op *op);

/* ---- epochs -------------------------------------------------------------- */

/*
 * farm_txm_epoch() - end an epoch now on every machine this one knows
 * (normally run in the background when free memory is low): once every
 * thread of every machine has finished the transactions and lock-free
 * operations it had open, memory retired before the call (freed large
 * arrays) is reused, for any size. @cont gets 0, or FARM_EPEERDEAD /
 * -ETIMEDOUT (a machine did not answer in 5 s; nothing is reused).
 */
FARM_API FARM_MUST_CHECK int farm_txm_epoch(farm_txm *m, farm_loop *loop,
                                            farm_op_fn cont, void *ctx);
FARM_API FARM_MUST_CHECK int farm_txm_epoch_sync(farm_txm *m, farm_loop *loop);

/* ---- counters ------------------------------------------------------------ */

typedef struct farm_txm_stats {
	uint64_t commits, commits_single; /* single-machine commits */
	uint64_t aborts_conflict, aborts_validation, aborts_failure,
	        aborts_nospace, aborts_freed;
	uint64_t lf_reads, lf_retries; /* lock-free reads and their retries */
	uint64_t tx_reads;
	/* Protocol work of committed transactions (remote operations only):
	 * one-sided WRITEs (log records), one-sided READs (validation) and
	 * messages (lock replies received). */
	uint64_t commit_writes, commit_reads, commit_msgs;
	uint64_t log_full;  /* reservations that had to wait for space */
	uint64_t truncates; /* explicit TRUNCATE records */
	/* On this machine as primary or backup: */
	uint64_t locks_granted, locks_refused, installs, backup_applies;
	uint64_t bad_records; /* malformed log records (logged, skipped) */
	/* Distributed epochs this machine ran, failed, and the 1 MiB blocks
	 * they made reusable. */
	uint64_t epochs, epochs_failed, epoch_blocks_reclaimed;
	/* Fencing and recovery: LOCK records of an older configuration
	 * refused; COMMIT-BACKUPs skipped (their transaction aborted) or
	 * for a region this machine holds no copy of; transactions recovery
	 * decided here as committed and aborted; locks recovered at promoted
	 * primaries; regions promoted; recovery messages refused. */
	uint64_t stale_refused, backup_skipped, backup_nocopy;
	uint64_t rec_committed, rec_aborted, rec_locks, rec_promoted,
	        rec_refused;
	/* The last recovery's timeline (CLOCK_MONOTONIC ns, 0: none yet):
	 * this machine took the configuration, every survivor had (REC_GO),
	 * its promoted regions became active. */
	uint64_t rec_t_config_ns, rec_t_go_ns, rec_t_active_ns;
	/* COMMIT-BACKUPs this machine truncated before their coordinator's
	 * low-water mark passed them: an invariant, always 0 (recovery
	 * could abort such a commit after it was reported). */
	uint64_t trunc_unfinished;
	/* Commits that stopped waiting for a LOCK reply from a machine a new
	 * configuration removed (they abort, retryable, at once). */
	uint64_t lock_waits_ended;
	/* Allocator recovery (SOSP'15 5.4): frees at commit the allocator
	 * refused (each a leaked object; 0 expected), frees deferred until
	 * their promoted region was adopted, block descriptions written into
	 * backup copies and refused there; promoted regions adopted by this
	 * machine's allocator (rebuilt by scan), refused, their rebuild time
	 * in all and the longest, and deferred frees that were lost. */
	uint64_t free_failed, free_deferred, block_notes, block_note_errors;
	uint64_t rec_adopted, rec_adopt_failed, rec_adopt_ns, rec_adopt_max_ns,
	        deferred_lost;
	/* Data recovery here as a new backup (src/txn/copy.c): copies of
	 * regions being made (copied or checked), complete, stopped (not a
	 * replica here any more, or no complete replica left); bytes READ
	 * for them. */
	uint64_t datarec_copying, datarec_done, datarec_lost, datarec_bytes;
	/* Recovery's decisions for a removed coordinator's transactions that
	 * found no LOCK of it held here (every survivor gets each decision):
	 * this machine was no primary of it, or its COMMIT-PRIMARY or ABORT
	 * was processed before. Nothing is installed again (the objects may
	 * hold newer commits since); the common case, not an error. */
	uint64_t rec_decided_unlocked;
	/* Data recovery copies here whose primary's block table stayed
	 * unreadable past the bound (src/txn/copy_retry.c): each stays
	 * copying, its table read again once a second until it reads
	 * whole; the region is a replica short meanwhile. */
	uint64_t datarec_stalled;
	/* Data recovery's re-reads here of an object a copy stopped at,
	 * locked or torn at its source (src/txn/copy_retry.c): paced, a
	 * few at once, then after waits growing to 250 ms. */
	uint64_t datarec_stuck_reads;
} farm_txm_stats;

/* @size: sizeof(*@out) as the caller was compiled, which the inline
 * farm_txm_stats_get passes. The struct only grows at its end: the
 * library fills the fields both know and zeroes any it does not. */
FARM_API void farm_txm_stats_read(farm_txm *m, farm_txm_stats *out,
                                  size_t size);
static inline void farm_txm_stats_get(farm_txm *m, farm_txm_stats *out)
{
	farm_txm_stats_read(m, out, sizeof(*out));
}

#ifdef __cplusplus
}
#endif
#endif /* FARM_TXN_H */
