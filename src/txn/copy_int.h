/*
 * Shared by the files of data recovery: copy.c (the table of regions
 * being copied, the copy steps), copy_summary.c (the chunk summaries of
 * the check pass and the stale sources), copy_engine.c (the engine
 * thread, the life cycle) and copy_note.c (the primary's side: telling
 * new backups to copy, COPY, and answering DIGEST). Only those files
 * include it.
 */
#ifndef FARM_TXN_COPY_INT_H
#define FARM_TXN_COPY_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc/alloc.h"
#include "txn/txn_int.h"

#define DR_MAX_SPAN    (FARM_ALLOC_MAX_OBJECT + 64) /* one object at most */
#define DR_NOTE_EVERY  (100ull * 1000000ull)        /* COPY resends, ns */
#define DR_RPC_TIMEOUT (2ull * 1000000000ull)
#define DR_BURST       4 /* intervals of credit a loop may hold */
/* An object a step stops at (locked or torn at the source: copy.c,
 * apply_obj), read again (copy_retry.c, farm_txn_dr_stuck): the first
 * DR_STUCK_FAST re-reads in a row come at the pace (an install takes
 * microseconds, a single-machine commit's shared lock lasts until its
 * COMMIT-BACKUPs are written), later ones after the waits a bad table
 * gets (DR_BAD_WAIT_NS doubling up to DR_BAD_WAIT_MAX_NS), for as long
 * as it stays so at a primary. Said at DR_STUCK_SAY_NS into the streak,
 * then at most once per DR_STUCK_SUMMARY_NS, and when the copy gets on
 * again. An object of our demoted copy stopped at for DR_LOCAL_STUCK_NS
 * is read from the primary instead (an older configuration's lock there
 * lasts until its transaction is decided; one that lasts longer, e.g. a
 * free deferred until an adoption that never comes, is read from the
 * primary). */
#define DR_STUCK_FAST       8u
#define DR_STUCK_SAY_NS     (1000ull * 1000000ull)
#define DR_STUCK_SUMMARY_NS (60000ull * 1000000ull)
#define DR_LOCAL_STUCK_NS   (1000ull * 1000000ull)
/* A block table read bad (farm_alloc_block_layout refused it: a table
 * being written while READ, which a re-read settles, or one damaged for
 * good): the first DR_BAD_FAST reads of it in a row are followed by a
 * re-read at once, later ones by a wait that doubles from DR_BAD_WAIT_NS
 * up to DR_BAD_WAIT_MAX_NS; at the DR_BAD_MAX-th (3.25 s of waits in all)
 * a demoted copy is given up for the primary, and the primary's table is
 * taken for stalled: read again once per DR_BAD_STALL_NS until it reads
 * whole. A line is logged at the first in a copy, then at most one
 * summary per DR_BAD_SAY_NS while it stays bad, per DR_BAD_STALL_SAY_NS
 * once stalled (copy_retry.c). */
#define DR_BAD_FAST         4u
#define DR_BAD_MAX          24u
#define DR_BAD_WAIT_NS      (2ull * 1000000ull)
#define DR_BAD_WAIT_MAX_NS  (250ull * 1000000ull)
#define DR_BAD_STALL_NS     (1000ull * 1000000ull)
#define DR_BAD_SAY_NS       (1000ull * 1000000ull)
#define DR_BAD_STALL_SAY_NS (60000ull * 1000000ull)
/* Chunks one summary request of the check pass names at most (a mask of
 * them is one word); fewer where the message payload is smaller. */
#define DR_DIGEST_MAX 64u

enum { DR_COPY = 0, DR_CHECK, DR_DONE, DR_LOST };

struct dr_reg {
	uint32_t id;
	unsigned loop;
	int state;
	uint64_t next; /* offset where this pass goes on */
	uint64_t cfg;  /* the configuration that made it a new backup */
	uint64_t bytes, steps, retries, fixed;
	uint64_t local; /* bytes taken from our demoted copy */
	/* A stale source of the region (farm_txm_datarec_stale_add), set in
	 * the first pass once the primary's header was read and found the
	 * source's: its chunks whose summary equals the primary's are taken
	 * from it, not READ. NULL: none, or not this pass. */
	const uint8_t *stale;
	uint64_t from_stale; /* bytes taken from a stale source */
	/* Not from our demoted copy any more: an object stayed locked
	 * there too long (DR_LOCAL_STUCK_NS), or its table stayed bad. */
	bool remote;
	uint64_t t_start, t_done;
	uint8_t *meta;  /* the primary's header and table, as last read */
	bool have_meta; /* read in this pass */
	/* A primary without a header (a promoted copy no block was ever
	 * described to): runs inferred from their first object's header
	 * (farm_alloc_block_infer), probed with a 64-byte READ. */
	struct farm_alloc_layout run; /* kind SLOTS: the current run */
	uint32_t probe_block;
	uint64_t probe_w;
	bool probe_ok;
	uint64_t inferred; /* runs inferred */
	int last_err;
	/* Steps in a row that stopped at the object at @stuck_off (torn or
	 * locked at the source), the first at @stuck_t0; no step before
	 * @stuck_at (the wait); last said at @stuck_said (0: not said in
	 * this streak), @stuck_unsaid re-reads since (copy_retry.c). */
	uint64_t stuck_off, stuck_n, stuck_t0, stuck_at, stuck_said,
	        stuck_unsaid;
	/* The check pass: the primary's summaries of chunks [dg_off, dg_off
	 * + dg_n * FARM_DIGEST_CHUNK) compared with this copy's; bit i of
	 * @dg_differ: chunk i differs or cannot be judged, so it is READ.
	 * dg_n 0: none held. @pass counts passes, so that an answer for an
	 * earlier one is dropped. */
	uint64_t dg_off, dg_differ;
	unsigned dg_n;
	unsigned pass;
	uint64_t summary; /* bytes of summaries received */
	uint64_t equal;   /* chunks the check found equal: not READ */
	/* The block table found bad (copy_retry.c): @bad_n reads of it in
	 * a row, the first at @bad_t0, the last refused at block
	 * @bad_block with @bad_err; no step before @bad_at (the wait).
	 * @bad_total in this copy; the last line about it logged at
	 * @bad_said, @bad_unsaid reads since; @bad_stalled: past the
	 * bound, read once per DR_BAD_STALL_NS. */
	uint32_t bad_block;
	unsigned bad_n;
	bool bad_stalled;
	int bad_err;
	uint64_t bad_t0, bad_at, bad_total, bad_said, bad_unsaid;
};

/* A stale source (farm_txm_datarec_stale_add): read-only memory that once
 * held a copy of @region, handed back through @release once the region's
 * copy here is complete or lost, or the owner dropped it, and no step
 * reads it any more. */
struct dr_stale {
	uint32_t region;
	bool done; /* no new copy takes it; released when no step reads it */
	const uint8_t *base;
	farm_txm_stale_fn release;
	void *ctx;
};

struct dr_note {
	uint32_t region, to;
	uint64_t cfg;
	bool inflight;
	uint64_t t_sent;
};

struct dr_loop {
	farm_loop *loop; /* set with buf, under dr->lock */
	uint8_t *buf;
	size_t cap; /* of buf */
	farm_mr *mr;
	bool busy;       /* a step posted or in flight (under dr->lock) */
	uint32_t region; /* of that step */
	/* Bytes this loop may still READ: + datarec_bytes per interval, at
	 * most DR_BURST intervals' worth (a step that ran late catches up
	 * a little, the average never passes the pace). */
	int64_t credit;
	unsigned rr;
};

/* A COPY whose copy is not open yet: the engine opens it (making and
 * registering a region takes milliseconds, too long for a loop) and the
 * receiving loop answers (dr_open_done). */
struct dr_open {
	struct dr_open *next;
	farm_txm *m;
	farm_loop *loop;
	struct farm_msg_token token;
	uint32_t region;
	int rc;
	farm_region *made; /* made off the engine for the copy, or NULL */
};

struct farm_datarec {
	farm_txm *m;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thr;
	bool started, stop;
	_Atomic bool hold; /* farm_txm_datarec_hold: no READs, no credit */
	uint64_t hold_ns;  /* datarec_hold_ms: held in its odd windows */
	struct dr_reg *r;
	unsigned nr, capr;
	struct dr_note *nt;
	unsigned nn, capn;
	uint32_t bytes, interval_us;
	uint64_t meta_bytes, region_size;
	unsigned dg_max; /* chunks a DIGEST names at most (0: none) */
	/* farm_txm_datarec_on_unserved; @unserved: the configuration a copy
	 * completed in whose ring makes us its primary (0: none), told by
	 * the engine outside the lock. */
	farm_txm_unserved_fn on_unserved;
	void *unserved_ctx;
	uint64_t unserved;
	struct dr_loop lp[MAX_LOOPS];
	struct dr_open *opens; /* under lock: copies the engine opens */
	struct dr_stale *st;   /* under lock: stale sources */
	unsigned nst, capst;
	/* Copies whose primary's block table stayed bad past the bound
	 * (copy_retry.c; farm_txm_stats.datarec_stalled). */
	uint64_t stalled;
	/* Re-reads of an object a step stopped at (copy_retry.c;
	 * farm_txm_stats.datarec_stuck_reads). */
	uint64_t stuck_reads;
};

struct copy_msg {
	uint32_t region, pad;
	uint64_t cfg;
};

/* DIGEST: a new backup asks the primary for the summaries of chunks
 * [off, off + n * FARM_DIGEST_CHUNK) of its copy (farm_txn_chunk_digest).
 * The answer: a word whose bit i says chunk i could not be judged, then
 * n digests. */
struct digest_msg {
	uint32_t region, n;
	uint64_t cfg, off;
};

/* One step of a copy, on the region's loop (copy.c): a READ, a DIGEST
 * (copy_summary.c) or a local step, posted by the engine (copy_engine.c)
 * or again by the step before. */
struct dr_step {
	struct farm_datarec *dr;
	uint32_t region;
	unsigned loop;
	int64_t budget; /* the loop's credit when posted */
	/* From our demoted copy (farm_as_demoted_source), not a READ:
	 * unpaced, one step after another on the loop. */
	const uint8_t *src;
	/* @src is a stale source (farm_txn_dr_check_plan): chunks whose
	 * summaries equal the primary's, not a demoted copy. */
	bool stale;
	/* Posted again by step_done after a local step: it may take local
	 * memory only (a READ waits for the engine and the pace). */
	bool rerun;
	bool meta;  /* this READ is the header and table */
	bool probe; /* this READ is a block's first line (no header) */
	/* Not a READ: the primary's summaries of @len chunks from @off
	 * (the check pass), for pass @pass of the copy. */
	bool digest;
	unsigned pass;
	bool inferred; /* s->lay is not the table's (step_layout) */
	/* Nothing to read now: the table waits for its re-read, or the
	 * copy gave its source up (copy_retry.c). */
	bool wait;
	uint64_t off; /* of the READ */
	uint32_t len;
	/* The check pass: only slots that start before this are READ
	 * (0: no bound); the chunks from there were found equal. */
	uint64_t lim;
	struct farm_alloc_layout lay;
};

/* copy.c */
struct dr_reg *farm_txn_dr_reg_find(struct farm_datarec *dr, uint32_t id);
int farm_txn_dr_reg_add(struct farm_datarec *dr, uint32_t id, uint64_t cfg);
bool farm_txn_dr_new_backup_here(farm_txm *m, uint32_t region);
/* A step (@ctx) on its loop: plan and post its READ or DIGEST, or end the
 * pass; posted by the engine (farm_loop_post's callback). */
void farm_txn_dr_step_run(farm_loop *loop, void *ctx, int status);
/* The end of step @s: its loop may take another; frees @s. */
void farm_txn_dr_step_end(struct farm_datarec *dr, struct dr_step *s);

/* copy_summary.c (under dr->lock unless said) */
/* Which chunks of the run s->lay the check pass, or a first pass with a
 * stale source, READs: 1 when @s is planned as a DIGEST, -1 when g->next
 * moved past equal chunks (plan again), else 0 with s->lim (and s->src
 * for a stale source's chunks). */
int farm_txn_dr_check_plan(struct farm_datarec *dr, struct dr_step *s,
                           struct dr_reg *g);
/* Not under dr->lock: ask the primary for the summaries of DIGEST step
 * @s's chunks; the answer (or none) ends @s. */
void farm_txn_dr_digest_post(farm_loop *loop, struct dr_step *s);
/* A step from a stale source stopped at the object at @off: its chunk is
 * READ instead. */
void farm_txn_dr_stale_stop(struct dr_reg *g, uint64_t off);
/* @g's copy takes nothing more from its stale source. */
void farm_txn_dr_stale_end(struct farm_datarec *dr, struct dr_reg *g);
/* The stale source the first pass of @g may take chunks from, once the
 * primary's header and table are read (NULL: none, or not the same
 * region). */
const uint8_t *farm_txn_dr_stale_take(struct farm_datarec *dr,
                                      struct dr_reg *g);
/* On the engine thread: give back one stale source no copy takes and no
 * step reads (drops dr->lock for its release). Whether there was one. */
bool farm_txn_dr_stale_reap(struct farm_datarec *dr);

/* copy_retry.c (under dr->lock) */
enum { DR_BAD_NOW = 0, DR_BAD_LATER };
/* The table of @g read in this pass was refused at block @b with @err,
 * at @now; @local: it came from our demoted copy, and another source
 * (the primary) is there to read. DR_BAD_NOW: read it again at once;
 * DR_BAD_LATER: not before g->bad_at (or, @local, from the primary). */
int farm_txn_dr_bad_table(struct farm_datarec *dr, struct dr_reg *g, uint32_t b,
                          int err, bool local, uint64_t now);
/* The table gave a block's layout again: the bad streak ends. */
void farm_txn_dr_bad_settled(struct dr_reg *g, uint64_t now);
/* A step of @g stopped at its first object, at @off, at @now: counted,
 * said (rate-limited) and, past DR_STUCK_FAST in a row, g->stuck_at set
 * (the engine skips the copy until then). @local: the step read our
 * demoted copy and the primary is there to read: past DR_LOCAL_STUCK_NS
 * the copy goes on from the primary (g->remote). */
void farm_txn_dr_stuck(struct farm_datarec *dr, struct dr_reg *g, uint64_t off,
                       bool local, uint64_t now);
/* A step of @g got past the object it had stopped at: the streak ends. */
void farm_txn_dr_stuck_settled(struct dr_reg *g, uint64_t now);
/* When @g may step again (0: now): the later of a bad table's wait and
 * a stuck object's. */
static inline uint64_t farm_txn_dr_due(const struct dr_reg *g)
{
	return g->bad_at > g->stuck_at ? g->bad_at : g->stuck_at;
}

/* copy_engine.c */
/* Whether copies are held now (farm_txm_datarec_hold, datarec_hold_ms):
 * no new READs, no credit. */
bool farm_txn_dr_held(struct farm_datarec *dr, uint64_t now);

/* copy_note.c */
/* On the engine thread: open @o's copy, then let its loop answer. */
void farm_txn_dr_open_run(struct dr_open *o);
void farm_txn_dr_notes_post(struct farm_datarec *dr, uint64_t now);
void farm_txn_dr_h_copy(farm_loop *loop, const farm_msg_in *in, void *arg);
/* DIGEST at the primary: the summaries of its live copy's chunks. */
void farm_txn_dr_h_digest(farm_loop *loop, const farm_msg_in *in, void *arg);

#endif
