/*
 * The transaction manager of one machine: creation and wiring (the
 * transaction API itself is include/farm/txn.h). Internal; not installed.
 *
 * Logs: every machine holds one log per (coordinator machine, coordinator
 * thread), a ring in one registered memory (a file mapped with libpmem in
 * the data directory) that coordinators append records to with durable
 * one-sided WRITEs, and that this machine's loop of the same thread index
 * polls. Peers need its descriptor (farm_txm_log_desc) to write there.
 */
#ifndef FARM_TXN_TXM_H
#define FARM_TXN_TXM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <farm/txn.h>

#include "addrspace/addrspace.h"
#include "alloc/galloc.h"
#include "txn/epoch.h"

#define FARM_MSGT_TX_REPLY 0xf120u /* primary -> coordinator: lock result */
/* Transaction recovery (recover.c); 0xf121 is epochs'. */
#define FARM_MSGT_REC_QUERY   0xf122u /* promoted primary -> coordinator */
#define FARM_MSGT_REC_ANSWER  0xf123u /* coordinator -> promoted primary */
#define FARM_MSGT_REC_VOTE    0xf124u /* survivor -> decider */
#define FARM_MSGT_REC_END     0xf125u /* survivor -> decider: votes sent */
#define FARM_MSGT_REC_DECIDE  0xf126u /* decider -> survivors */
#define FARM_MSGT_REC_DONE    0xf127u /* decider -> survivors: log decided */
#define FARM_MSGT_REC_APPLIED 0xf128u /* survivor -> decider: took cfg */
#define FARM_MSGT_REC_GO      0xf129u /* decider -> survivors: recover */
#define FARM_MSGT_TX_COPY     0xf12au /* primary -> new backup: copy */
#define FARM_MSGT_TX_DIGEST   0xf12bu /* new backup -> primary: summaries */

/* Their payloads: txn/recover_wire.h (tests forge them). */
#include "txn/recover_wire.h"
#include "txn/txid.h"
#include "util/common.h"

struct farm_txm_attr {
	uint32_t log_size;    /* bytes of each log ring, a power of two,
	                         64 KiB .. 64 MiB (0: 1 MiB) */
	uint32_t arena_size;  /* per-loop registered staging memory
	                         (0: 64 MiB, reserved, touched on use) */
	uint64_t lf_bound_ns; /* reads slower than this are retried (0: 1 ms) */
	/* Background epochs: loop 0 starts one when retired blocks exist and
	 * free blocks are under this percentage of all blocks, or retired
	 * ones over it (0: 25; FARM_TXM_EPOCH_MANUAL: only farm_txm_epoch). */
	unsigned epoch_free_pct;
	/* Data recovery's pace (copy.c): at most datarec_bytes READ per
	 * loop every datarec_interval_us (0: FaRM's 8 KiB per 2 ms). */
	uint32_t datarec_bytes, datarec_interval_us;
	/* Measurement only: copies held in the odd windows of this many ms
	 * of CLOCK_MONOTONIC (0: never; config key datarec_hold_ms). */
	uint32_t datarec_hold_ms;
};
#define FARM_DATAREC_DEFAULT_BYTES       8192u
#define FARM_DATAREC_DEFAULT_INTERVAL_US 2000u
#define FARM_TXM_EPOCH_MANUAL            1000u

int farm_txm_create(farm_fabric *fab, farm_msg *msg, farm_as *as,
                    farm_galloc *ga, const struct farm_txm_attr *attr,
                    farm_txm **out);
/* After every loop has detached (closed). */
void farm_txm_destroy(farm_txm *m);
/* On loop @loop's thread, before it runs transactions or serves logs. */
int farm_txm_attach(farm_txm *m, farm_loop *loop);
/* On the loop's thread, before it closes. */
void farm_txm_detach(farm_txm *m, farm_loop *loop);

/* The descriptor peers write this machine's logs with. */
farm_mr_desc farm_txm_log_desc(const farm_txm *m);
/* Memory in bytes (a snapshot, any thread): @logs, the log arena (a ring
 * per (coordinator id, thread) here, registered); @resident, what of it
 * is in memory: the arena is sparse (FARM_MEM_SPARSE), so only rings a
 * coordinator wrote to cost memory; @tables, what is sized by machine
 * ids: the peers' descriptors, each attached loop's writer and reader
 * tables, and the record queues of the logs it has written to. */
void farm_txm_memory(farm_txm *m, uint64_t *logs, uint64_t *resident,
                     uint64_t *tables);
/* Make machine @id's logs writable from here (any thread); its holder is
 * of incarnation @inc (0: the id's first; its logs here open to it).
 * -EEXIST: added already, with other logs or another incarnation (a new
 * holder: farm_txm_replace_peer). */
int farm_txm_add_peer(farm_txm *m, uint32_t id, uint32_t inc,
                      const farm_mr_desc *logs);
/* Machine @id is a new holder of its id (incarnation @inc, new logs at
 * @logs): this machine's records for it go there from now on. Every
 * loop must then run farm_txm_forget_peer on its own thread before it
 * writes there again (any thread). */
int farm_txm_replace_peer(farm_txm *m, uint32_t id, uint32_t inc,
                          const farm_mr_desc *logs);
/* On @loop's thread: its log on @id (a new holder) starts afresh, at
 * position 0; its log of @id here opens to the new holder once recovery
 * has decided and emptied the old holder's records there (at once when
 * it has, or when the log holds none), and until then the new holder's
 * commits that write here wait. */
int farm_txm_forget_peer(farm_txm *m, farm_loop *loop, uint32_t id);
/* This machine holds its id as incarnation @inc (0: the id's first
 * holder). Before its first transaction; with @inc above 0 its loops
 * write a log only once that log is open to @inc. */
void farm_txm_set_incarnation(farm_txm *m, uint32_t inc);
/* This machine learned it was removed from the configuration (the node,
 * when recovery or a view says so): from now on farm_tx_begin answers
 * FARM_EFENCED, as do reads it may not serve (not FARM_ELEASE, which is
 * retryable), so an application stops instead of retrying forever. Any
 * thread; once, for good. NULL is fine. */
void farm_txm_set_removed(farm_txm *m);

/*
 * farm_txm_serve_word() - reads (lock-free and transactional) succeed
 * only while CLOCK_MONOTONIC is below this word, else FARM_ELEASE: a
 * machine paused past its lease, perhaps removed, must not return what
 * its local copies say. UINT64_MAX (the default): always. The lease
 * module keeps it (farm_lease_attr.serve_word).
 */
_Atomic uint64_t *farm_txm_serve_word(farm_txm *m);
/*
 * farm_txm_lease_held() - whether the lease behind serve word @w (NULL:
 * none, always) held at a moment after the caller's copy. The clock is
 * read before the word: a thread that loses its core between the two then
 * compares that moment with a newer word, never a stale word with a later
 * clock, which on a loaded host took a live lease for a lapsed one
 * (FARM_ELEASE from a healthy machine). A word renewed after a lapse is
 * accepted, which is safe because no value the lease thread ever stores
 * outlasts the moment this machine's regions can move: the CM stops
 * granting once it takes a view without this machine, and the decider
 * waits out one lease before reconfiguring (node/view.c, lease_wait).
 */
static inline bool farm_txm_lease_held(_Atomic uint64_t *w)
{
	/* Orders the caller's copy before the clock read (the vDSO's clock
	 * is not formally ordered after earlier loads on every CPU) and
	 * before the first load of the word. No release pairs with this
	 * fence: it is here for that order, not to synchronize (the
	 * word's loads below have their partner, recovery/lease.c). */
	atomic_thread_fence(memory_order_acquire);
	if (!w)
		return true;
	/* No lease (static membership, or before the first configuration):
	 * "always", seen after the copy, is a moment after it at which the
	 * lease held, with no clock to compare (a clock read was a seventh
	 * of a KV lookup's CPU on shm). Pairs with the lease thread's
	 * release store of the word. */
	uint64_t u = atomic_load_explicit(w, memory_order_acquire);
	if (u == UINT64_MAX)
		return true;
	uint64_t now = farm_now_ns();
	/* The word again, after the clock (the order the comment above
	 * asks for); pairs with the same release store. */
	u = atomic_load_explicit(w, memory_order_acquire);
	return u == UINT64_MAX || now < u;
}

/*
 * For a caller that starts many lock-free operations on one loop (a batch
 * of lookups): farm_txm_loop_attached() is farm_lf_begin's check, made
 * once (whether @loop is attached to @m: farm_txm_attach); then
 * farm_lf_begin_attached() and farm_lf_end_inline() are farm_lf_begin
 * and farm_lf_end without the check or a call, on that loop's thread.
 */
bool farm_txm_loop_attached(farm_txm *m, farm_loop *loop);
static inline void farm_lf_begin_attached(farm_lf_op *op)
{
	op->parity = farm_epoch_op_begin();
	op->open = 1;
}
static inline void farm_lf_end_inline(farm_lf_op *op)
{
	if (op->open) {
		op->open = 0;
		farm_epoch_op_end(op->parity);
	}
}

/*
 * Data recovery (copy.c). farm_txm_datarec_view(): after a configuration
 * change (after farm_txm_reconfigure), tell the new backups of the
 * regions this machine is primary of to copy them, and stop copies this
 * machine can no longer finish. farm_txm_datarec_get(): the regions this
 * machine has copied or is copying as a new backup (up to @max in @out;
 * returns how many). farm_txm_datarec_pace(): the configured pace.
 */
enum farm_datarec_state {
	FARM_DATAREC_COPYING = 0,
	FARM_DATAREC_CHECKING, /* copied; every object read again */
	FARM_DATAREC_DONE,     /* complete and checked: a replica */
	FARM_DATAREC_LOST,     /* stopped: not a replica here any more, or
	                          no complete replica was left to copy */
};
struct farm_datarec_region {
	uint32_t region;
	enum farm_datarec_state state;
	uint64_t bytes;    /* READ from the primary, both passes */
	uint64_t local;    /* copied from this machine's demoted copy
	                      (growth; farm_as_demoted_source), unpaced */
	uint64_t stale;    /* taken from a stale source: chunks whose
	                      summary equals the primary's, unpaced */
	uint64_t reads;    /* READs that completed */
	uint64_t retries;  /* READs failed, stopped at a torn object, or
	                      of a block table found bad */
	uint64_t fixed;    /* objects the check found newer at the primary */
	uint64_t summary;  /* bytes of chunk summaries the check received */
	uint64_t equal;    /* chunks the check found equal (not READ) */
	uint64_t inferred; /* runs whose layout was inferred (a primary
	                      without its block table) */
	uint64_t t_start_ns, t_done_ns; /* CLOCK_MONOTONIC; done: 0 yet */
	int last_err;
};
void farm_txm_datarec_view(farm_txm *m);
unsigned farm_txm_datarec_get(farm_txm *m, struct farm_datarec_region *out,
                              unsigned max);
void farm_txm_datarec_pace(farm_txm *m, uint32_t *bytes, uint32_t *interval_us);
/* Hold copies (no new READs, no credit) while @hold: for benchmarks that
 * compare the foreground with and without copies in alternate windows. */
void farm_txm_datarec_hold(farm_txm *m, bool hold);
/* Told (on data recovery's thread) when this machine completes a copy of
 * a region the ring of configuration @cfg makes it primary of: no round
 * of that configuration promotes it any more (its copy was filling when
 * the round began), so the node asks for one (farm_membership_bump). */
typedef void (*farm_txm_unserved_fn)(void *ctx, uint64_t cfg);
void farm_txm_datarec_on_unserved(farm_txm *m, farm_txm_unserved_fn fn,
                                  void *ctx);

/*
 * farm_txm_datarec_stale_add() - @base (the region size, read-only, kept
 * mapped by the caller) once held a copy of @region: a same-id rejoin's
 * old copy (src/recovery/README.md, "Same-id restart"). A copy of
 * @region here that starts after this takes, in its first pass, the
 * chunks whose summary equals the primary's from @base instead of READing
 * them (copy.c); the source is never a replica, never served. @release
 * (on data recovery's thread, or in farm_txm_destroy) gets it back once the
 * region's copy is complete or lost, or after farm_txm_datarec_stale_drop,
 * when no step reads it any more. -EEXIST: one for @region already;
 * -ENODEV: no data recovery.
 */
typedef void (*farm_txm_stale_fn)(void *ctx, uint32_t region, const void *base);
int farm_txm_datarec_stale_add(farm_txm *m, uint32_t region, const void *base,
                               farm_txm_stale_fn release, void *ctx);
/* The caller no longer wants @region's stale source kept (growth ended
 * without this machine holding the region): released as above. */
void farm_txm_datarec_stale_drop(farm_txm *m, uint32_t region);
/* Regions with a stale source not yet released. */
unsigned farm_txm_datarec_stale_count(farm_txm *m);

/*
 * farm_txm_quiesce() - graceful leave (src/recovery/README.md): from now
 * on (@on) farm_tx_commit refuses -ESHUTDOWN; with !@on commits are let in
 * again (a leave that gave up). farm_txm_commits_out() - commits begun
 * and not yet reported: once it is 0 after the quiesce, none of this
 * machine's is in flight or starts.
 */
void farm_txm_quiesce(farm_txm *m, bool on);
unsigned long farm_txm_commits_out(farm_txm *m);

/*
 * farm_txm_reconfigure() - the configuration became @cfg, with @members
 * (this machine among them) and without @removed (fenced already: they
 * can no longer write here), and @decider (its CM) deciding the removed
 * coordinators' transactions. Call it after the address space took the
 * view (farm_as_set_view), from any thread. Recovers the transaction
 * state (recover.c): regions this machine now is primary of are promoted
 * once their logs are drained and their locks recovered; every
 * transaction that was committing is decided. Returns 0 once it is
 * started; -ESTALE for a configuration not newer than the last.
 */
int farm_txm_reconfigure(farm_txm *m, uint64_t cfg, const uint32_t *removed,
                         unsigned nremoved, const uint32_t *members,
                         unsigned nmembers, uint32_t decider);

/*
 * Reading logs without a running machine (after a restart, or from a
 * tool): the log memory is a file in the machine's data directory that
 * starts with a superblock. farm_txlog_scan_file() calls @fn for every
 * whole record still in the logs (not truncated yet), in log order within
 * each (coordinator, thread) log; returns how many, -ENOMSG when @path is
 * not a log file, FARM_ECORRUPT for a damaged superblock or a record
 * whose trailer says it is whole but whose checksum does not match,
 * -errno.
 * farm_txlog_scan_dir() does it for the log file among a data directory's
 * *.region files (-ENOENT: none).
 */
struct farm_txlog_info {
	uint32_t machine, M, T;
	uint64_t R;
};
struct farm_txlog_rec {
	uint32_t coord, thread; /* whose log */
	int type;               /* FARM_TXN_TESTING_LOCK ... (txn_testing.h) */
	uint16_t nobj;
	uint32_t len;
	uint64_t txid;
	uint64_t pos; /* position in the log's stream */
};
typedef void (*farm_txlog_fn)(void *ctx, const struct farm_txlog_rec *r);
int farm_txlog_scan_file(const char *path, farm_txlog_fn fn, void *ctx,
                         struct farm_txlog_info *info);
int farm_txlog_scan_dir(const char *dir, farm_txlog_fn fn, void *ctx,
                        struct farm_txlog_info *info);

/*
 * Whole-cluster restart (restart.c; its opening comment is the rule).
 * farm_txlog_check(): is @base (@len bytes, a previous log file named
 * @what) a whole log file: its superblock (magic, layout, size) sound and
 * every record and pad that landed whole (its trailer) matching its
 * checksum? 0, or FARM_ECORRUPT with @err naming @what and the offset (a
 * record a kill cut short, trailer missing, was never acknowledged: not
 * damage, skipped). farm_txm_restart_apply(): decide every transaction in the
 * previous log files of every member (@logs: the same set on every
 * machine), apply the committed ones' images to this machine's copies of
 * them, then unlock every object of @regions (this machine's copies),
 * each read by its file @fds[i] (open for reading; -1 or @fds NULL: by its
 * memory).
 * Call it after the view with every member is applied and before any
 * transaction starts; @lost: NULL, or the members that did not come back.
 * 0; FARM_ECORRUPT (@err says where); -ENOMEM.
 */
struct farm_txrestart_log {
	const uint8_t *base;
	size_t len;
	const char *what; /* for messages: machine and file */
	/* The coordinators whose rings to read (txn_coord_in; NULL: all):
	 * the members, the other rings are empty and were not copied. */
	const uint64_t *coords;
};
/* A configuration that records may carry (the previous members'
 * histories, src/node/restart_hist.c): @cfg its id, @ring its placement,
 * @ids[0..n) its members and @inc[0..n) which holder of each id was the
 * member then (farm_member.incarnation). */
struct farm_txrestart_conf {
	uint64_t cfg;
	const farm_ring *ring;
	const uint32_t *ids, *inc;
	unsigned n;
};
/* What the decision knows of placements besides this machine's ring.
 * A restart without some previous members (farm_membership_forsake):
 * their logs are gone. @ring: the previous configuration's placement
 * (with them); @ids[0..n): the members given up. A transaction is then
 * committed on the COMMIT-BACKUP records of every backup that came back,
 * as long as each region it writes has one.
 * @confs[0..nconfs): configurations records may carry; @now_ids and
 * @now_inc[0..now_n): the members the restart runs with and their
 * incarnations. A transaction known only by COMMIT-BACKUPs of a listed
 * configuration is judged by that configuration's backups, less those
 * whose holder is not a member now (removed since: its log is not read),
 * as a recovery round judges it. */
struct farm_txrestart_lost {
	const farm_ring *ring;
	const uint32_t *ids;
	unsigned n;
	const struct farm_txrestart_conf *confs;
	unsigned nconfs;
	const uint32_t *now_ids, *now_inc;
	unsigned now_n;
};
struct farm_txrestart_stats {
	uint64_t records, txns, committed, aborted, images, objects, unlocked;
	uint64_t freed;  /* committed frees' slots freed in their headers */
	uint64_t marked; /* of them, found marked free-pending (deferred
	                    while the adopter scanned: restart.c) */
};
/* The log memory's file in the data directory ("" without one). */
const char *farm_txm_log_file(const farm_txm *m);
int farm_txlog_check(const uint8_t *base, size_t len, const char *what,
                     char *err, size_t errlen);
/* farm_txlog_check_fd(): the same for the file @fd (@len bytes), read by
 * pread, ring by ring, where it holds data (SEEK_DATA): a log file has a
 * ring for every possible coordinator, nearly all holes, and a mapping
 * read through them made tmpfs fill every one with zero pages (256 MiB a
 * machine at 4 MiB rings, seconds at a restart). 0, FARM_ECORRUPT, or a
 * negative errno when the file cannot be read (not damage). */
int farm_txlog_check_fd(int fd, uint64_t len, const char *what, char *err,
                        size_t errlen);
/* farm_txlog_pending(): add to @coords (txn_coord_put) every coordinator
 * whose records the log file @base (@len bytes; its superblock and log
 * headers are enough) may still hold: the previous members, and removed
 * coordinators whose recovery round had not emptied their logs here. 0,
 * or FARM_ECORRUPT (a superblock that does not add up: farm_txlog_check
 * names it). */
int farm_txlog_pending(const uint8_t *base, size_t len, uint64_t *coords);
int farm_txm_restart_apply(farm_txm *m, const struct farm_txrestart_log *logs,
                           unsigned nlogs, const uint32_t *regions,
                           const int *fds, unsigned nregions,
                           const struct farm_txrestart_lost *lost,
                           struct farm_txrestart_stats *st, char *err,
                           size_t errlen);

#endif
