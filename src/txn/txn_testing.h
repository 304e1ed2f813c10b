/*
 * Testing hooks of the transaction layer (each implemented in the testing
 * section at the end of the file whose role it tests: read.c, tx.c,
 * commit.c, log.c). For tests only: they expose what the
 * API hides on purpose (versions, transaction ids, the logs) and can
 * break the protocol on request to prove that tests notice. Internal; not
 * installed.
 */
#ifndef FARM_TXN_TXN_TESTING_H
#define FARM_TXN_TXN_TESTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <farm/txn.h>

/* The version of @a this transaction read (object versions step by 4; a
 * committed write of it installs this + 4), or UINT64_MAX when @a is not
 * in the transaction. Valid until farm_tx_free, also after commit. */
uint64_t farm_tx_testing_version(farm_tx *tx, farm_gaddr a);

/* Exercises a commit's participant list (txn_tx.h) on a transaction of
 * its own: @nids machine ids added in a scrambled order, each found again,
 * the list sorted and grown from its inline entries to the heap, flags
 * set only on participants, then cleared; twice (the memory kept). 0, or
 * -1 with what went wrong in @why. */
int farm_txn_testing_participants(unsigned nids, char *why, size_t len);

/* In a hook of FARM_FP_TX_ALLOC_CLAIMED (util/fault.h), on its thread: the
 * address of the object just claimed; FARM_GADDR_NULL elsewhere. */
farm_gaddr farm_tx_testing_claimed(void);
/* The transaction's id (what its log records carry). */
uint64_t farm_tx_testing_id(farm_tx *tx);

/* farm_lf_read_sync that also returns the version it read (*@version,
 * when it returns 0). */
int farm_lf_testing_read_sync(farm_txm *m, farm_loop *loop, farm_gaddr a,
                              uint32_t size, uint64_t want_incarnation,
                              void *buf, uint64_t *version);

/* The log bytes that commits of @loop in progress have reserved in machine
 * @mach's log and not yet written (0 for a bad argument). */
uint64_t farm_txm_testing_log_reserved(farm_txm *m, farm_loop *loop,
                                       uint32_t mach);

/* What farm_txm_memory's @tables should be for @m, computed from the
 * types: with one loop attached and no log record queue yet (@tables), and
 * what one record queue adds (@queue: a log writer's first); @ids machine
 * ids. 0, -EINVAL. */
struct farm_txm_testing_sizes {
	uint64_t tables, queue;
	uint32_t ids;
};
int farm_txm_testing_sizes(const farm_txm *m,
                           struct farm_txm_testing_sizes *out);

/* The low-water marks a whole-cluster restart takes from the previous log
 * file @base (@len bytes; restart.c): @mark[c * 64 + t] for coordinator
 * c's thread t (TXN_MAX_MACHINES * 64 entries), from its whole records and
 * pads. 0, FARM_ECORRUPT (not a log file), -EINVAL. */
int farm_txlog_testing_marks(const uint8_t *base, size_t len, uint64_t *mark);

/* A log file image for farm_txlog_testing_marks and farm_txlog_check, in
 * @base (@len bytes): the superblock of one coordinator with one thread,
 * layout @layout (0: the current one), a ring of @ring bytes after a
 * header area of @hdr_area bytes. Writes the superblock only (so a test
 * can rewrite it with another layout over records it wrote). 0, -EINVAL. */
int farm_txlog_testing_format(uint8_t *base, size_t len, uint32_t layout,
                              uint64_t ring, uint64_t hdr_area);

/* Into that image's ring at @off (the first lap), a whole record of @type
 * (FARM_TXN_TESTING_TRUNCATE or FARM_TXN_TESTING_PAD) of @rlen bytes whose
 * low-water mark is @lw, with its checksum, and its trailer its position
 * (landed) or, @torn, not (a write a kill cut short). Returns the record's
 * offset in @base (its 48-byte header is checksummed), or -EINVAL. */
long farm_txlog_testing_record(uint8_t *base, size_t len, uint64_t off,
                               int type, uint32_t rlen, uint64_t lw, bool torn);

/*
 * Switches that break the protocol on purpose, to prove that tests notice.
 * Compiled only into fault-injection builds (FARM_FAULT_INJECTION, the
 * default with tests); elsewhere they do nothing, and tests that need
 * them skip (farm_fault_built()).
 */
/* Data recovery's bound on a bad block table (copy_retry.c): the reads
 * of it in a row after which a copy gives its source up, and the waits
 * between them added up (ns). */
void farm_txn_testing_datarec_bad_bound(unsigned *reads, uint64_t *wait_ns);
/* Data recovery's pacing of an object a copy stopped at (copy_retry.c):
 * the most reads of it a copy makes in a streak of @ns (its re-reads at
 * the pace, then one after each wait that fits). */
uint64_t farm_txn_testing_datarec_stuck_bound(uint64_t ns);

#ifdef FARM_FAULT_INJECTION
/* Process-wide: when on, a distributed commit's coordinator kills its own
 * process (SIGKILL) once every COMMIT-BACKUP write has completed, before
 * it writes COMMIT-PRIMARY. */
void farm_txn_testing_crash_after_backup(bool on);

/* Process-wide: when on, distributed commits skip VALIDATE (a deliberately
 * broken protocol: read-only objects are never checked). */
void farm_txn_testing_skip_validation(bool on);

/* Process-wide: when on, recovery promotes backup copies without draining
 * their logs or recovering locks (a deliberately broken protocol:
 * committed writes still in the logs are lost, half-decided ones seen). */
void farm_txn_testing_recovery_no_drain(bool on);

/* Process-wide: when on, coordinators let replicas truncate a record as
 * soon as its transaction is done, even above the low-water mark (the
 * rule before recovery_bench found it losing commits): replicas then count
 * trunc_unfinished (farm_txm_stats), and recovery may abort a reported
 * commit one backup truncated. */
void farm_txn_testing_trunc_early(bool on);
/* Process-wide: when on, neither a new configuration
 * (farm_txn_end_lock_waits) nor a death notice failing the LOCK record
 * ends the waits of commits for LOCK replies from dead machines: they
 * wait out the reply deadline, holding their locks, as before. */
void farm_txn_testing_keep_lock_waits(bool on);
/* Process-wide: when on, COMMIT-BACKUP records carry no block
 * descriptions (allocrec.c): backups' copies keep no block table, and a
 * promoted region cannot be adopted by its new primary's allocator. */
void farm_txn_testing_no_block_info(bool on);

/* Process-wide: when on, COMMIT-BACKUPs for a copy that data recovery is
 * still filling are dropped (copy.c), and the copy skips its check pass,
 * so the copy misses commits; test_datarec --broken must notice. */
void farm_txn_testing_datarec_skip_apply(bool on);
/* Process-wide: when on, COMMIT-BACKUPs for a copy in its first pass are
 * dropped and the check pass kept: the check must find what they missed
 * (test_datarec --check-repair). */
void farm_txn_testing_datarec_skip_first(bool on);
/* Process-wide: when on, a copy has no check pass: complete after its
 * first, so a test judges the first pass alone (test_datarec --stale). */
void farm_txn_testing_datarec_no_check(bool on);

/* Process-wide: when on, a coordinator short of log room READs the
 * replica's freed word without a doorbell (as before records that need no
 * answer stopped ringing one): a parked replica then frees no room until
 * its timed check, and the commit waits (test_txn_multi --broken_room). */
void farm_txn_testing_no_room_bell(bool on);
/* Process-wide: while on, a freed-word READ deferred by pacing (log.c,
 * farm_txn_pace_reads) is not sent when due: the commit short of room
 * waits for it (test_txn_multi --broken_pace). */
void farm_txn_testing_hold_paced(bool on);
/* Process-wide: while @fail is on, a paced freed-word READ fails to send
 * when due, as to a dead replica; with @keep too it stays deferred, as
 * before such a failure retried the commits waiting on it (they then
 * waited for good: test_txn_multi --dead_pace, --broken_dead_pace). */
void farm_txn_testing_fail_paced(bool fail, bool keep);
#else
static inline void farm_txn_testing_crash_after_backup(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_skip_validation(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_recovery_no_drain(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_trunc_early(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_keep_lock_waits(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_no_block_info(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_datarec_skip_apply(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_datarec_skip_first(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_datarec_no_check(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_no_room_bell(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_hold_paced(bool on)
{
	(void)on;
}
static inline void farm_txn_testing_fail_paced(bool fail, bool keep)
{
	(void)fail;
	(void)keep;
}
#endif

/* Record types farm_txm_testing_records reports. */
enum {
	FARM_TXN_TESTING_LOCK = 1,
	FARM_TXN_TESTING_COMMIT_BACKUP = 2,
	FARM_TXN_TESTING_COMMIT_PRIMARY = 3,
	FARM_TXN_TESTING_ABORT = 4,
	FARM_TXN_TESTING_TRUNCATE = 5,
	FARM_TXN_TESTING_PAD = 6, /* farm_txlog_testing_record only */
};

/*
 * Call @fn for every whole record present in this machine's logs (every
 * coordinator's log served by an attached loop), from the position its
 * loop has applied (truncated) up to the last whole record, whether the
 * loop has processed it yet or not; pads are skipped. Call on the loops'
 * thread (or while they are not polled). Returns the number of records.
 */
int farm_txm_testing_records(farm_txm *m,
                             void (*fn)(void *ctx, uint32_t coord, int type,
                                        uint64_t txid),
                             void *ctx);

/* On loop @loop's thread: a TRUNCATE record to every log this loop writes
 * whose low-water mark moved since it last said, so that replicas apply
 * every finished COMMIT-BACKUP (log.c). Returns how many were sent. */
int farm_txm_testing_truncate(farm_txm *m, farm_loop *loop);

#endif
