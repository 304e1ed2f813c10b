/*
 * Logs (SOSP'15 section 4): one ring per (coordinator machine, coordinator
 * thread) on every machine, in one registered memory (a file in the data
 * directory mapped with libpmem): a 64-byte superblock, one 64-byte header
 * per log (the word where the replica publishes how far the log is free),
 * then the rings.
 *
 * Records: 64-byte aligned, [hdr | objects | images | trailer]; the
 * trailer (last 8 bytes) is the record's position + 1, and a WRITE's last
 * 8 bytes land last, so a record whose trailer matches is whole.
 *
 * This file is the writer side (a coordinator's loop appending to its log
 * on each machine: room, pads, low-water marks, TRUNCATE records, reading
 * the replica's freed word) and reading the logs without a running machine
 * (farm_txlog_scan_*). The replica side is participant.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/txn_testing.h"
#include "util/log.h"
#include "util/mem.h"

/* ---- commit sequences ------------------------------------------------ */

/* A commit's sequence, in the order commits start: -EAGAIN when the
 * oldest unfinished commit is CS_RING behind (it waits on a dead peer). */
int farm_txn_cseq_take(struct txloop *tl, uint64_t *out)
{
	if (tl->cs_next - tl->cs_low >= CS_RING)
		return -EAGAIN;
	tl->cs_done[tl->cs_next % CS_RING] = 0;
	*out = tl->cs_next++;
	return 0;
}

/* A commit finished: decided and every record written. */
void farm_txn_cseq_done(struct txloop *tl, uint64_t cseq)
{
	if (cseq < tl->cs_low || cseq >= tl->cs_next)
		return;
	tl->cs_done[cseq % CS_RING] = 1;
	while (tl->cs_low < tl->cs_next && tl->cs_done[tl->cs_low % CS_RING])
		tl->cs_low++;
}

/* ---- the writer side ------------------------------------------------ */

static uint64_t low_water(const struct txloop *tl, const struct writer *w)
{
	for (uint64_t s = w->wq_head; s != w->wq_tail; s++)
		if (!wq_truncatable(&w->wq[s % w->wq_cap], tl->cs_low))
			return w->wq[s % w->wq_cap].pos;
	return w->tail;
}

/* Room for one more queue entry: the queue grows (entries keep their
 * sequence numbers) rather than ever overwriting a live one, whose loss
 * would let a low-water mark pass records still in use. It is made on
 * the first record to its log: a loop holds queues only for the
 * machines it writes to, not for every machine id. */
static int wq_reserve(farm_txm *m, struct writer *w, unsigned n)
{
	if (w->wq_tail - w->wq_head + n <= w->wq_cap)
		return 0;
	uint64_t ncap = w->wq_cap ? w->wq_cap * 2 : WQ_CAP;
	while (w->wq_tail - w->wq_head + n > ncap)
		ncap *= 2;
	struct wq_ent *nq = malloc(ncap * sizeof(*nq));
	if (!nq)
		return -ENOMEM;
	for (uint64_t s = w->wq_head; s != w->wq_tail; s++)
		nq[s % ncap] = w->wq[s % w->wq_cap];
	free(w->wq);
	w->wq = nq;
	/* Relaxed: a count farm_txm_memory reads. */
	atomic_fetch_add_explicit(&m->loop_bytes,
	                          (ncap - w->wq_cap) * sizeof(*nq),
	                          memory_order_relaxed);
	w->wq_cap = ncap;
	return 0;
}

struct wr_ctx {
	struct txloop *tl;
	farm_tx *tx; /* NULL: no one waits (TRUNC, PAD) */
	void *buf;
	size_t len;
	int kind; /* what the completion means to tx */
	uint32_t mach;
};

static void write_done(farm_loop *loop, void *ctx, int status)
{
	struct wr_ctx *c = ctx;
	c->tl->inflight--;
	arena_put(&c->tl->ar, c->buf, c->len);
	if (c->tx)
		farm_txn_tx_record_done(loop, c->tx, c->kind, c->mach, status);
	else if (status)
		farm_warn("txn: log write failed: %s", farm_strerror(status));
	free(c);
}

/* One WRITE of @buf into this loop's log on @mach at ring offset @off:
 * durable when it completes; completion to write_done. Our own log is
 * written with stores (and persisted), completing on a later pass. */
static int post_write(struct txloop *tl, uint32_t mach, uint64_t off, void *buf,
                      size_t len, farm_tx *tx, int kind)
{
	farm_txm *m = tl->m;
	struct wr_ctx *c = malloc(sizeof(*c));
	if (!c) {
		arena_put(&tl->ar, buf, len);
		return -ENOMEM;
	}
	*c = (struct wr_ctx){.tl = tl,
	                     .tx = tx,
	                     .buf = buf,
	                     .len = len,
	                     .kind = kind,
	                     .mach = mach};
	uint64_t roff = log_ring_off(m, log_index(m, m->me, tl->t)) + off;
	int rc;
	if (mach == m->me) {
		uint8_t *dst = m->logbase + roff;
		/* Everything but the last word, then the last word: the reader
		 * (this very loop, later) never sees a record without its
		 * trailer anyway, but the order keeps the rule uniform. */
		memcpy(dst, buf, len - 8);
		/* Pairs with the acquire load of the trailer in the log scan
		 * (participant.c). */
		atomic_thread_fence(memory_order_release);
		memcpy(dst + len - 8, (uint8_t *)buf + len - 8, 8);
		rc = farm_mem_persist(m->logmem, dst, len);
		if (!rc)
			rc = farm_loop_post(tl->loop, write_done, c);
	} else {
		farm_wr wr = farm_wr_write(0, buf, tl->ar.mr, (uint32_t)len,
		                           &m->peers[mach], roff);
		wr.flags |= FARM_WR_PERSIST;
		/* A LOCK record's doorbell may wait for others to the same
		 * replica (messaging's lazy_bell_ns): until the primary
		 * takes it no lock is held, so the wait delays only this
		 * commit, and one wake-up serves several. Records that
		 * release locks (COMMIT-PRIMARY, ABORT) ring at once. The
		 * others (COMMIT-BACKUP, TRUNCATE, pads) ring no bell: the
		 * commit waits only for the WRITE's completion, and the
		 * replica's loop reads them when it next polls; a parked one
		 * is woken by the freed-word READ of a writer short of room
		 * (farm_txn_refresh_freed), the only thing that waits for
		 * it to read them. A wake-up per COMMIT-BACKUP cost every
		 * backup of a remote commit a futex sleep and wake. */
		if (kind == K_LOCK)
			rc = farm_loop_rdma_lazy(tl->loop, mach, tl->t, &wr,
			                         write_done, c);
		else if (kind == K_PRIMARY || kind == K_ABORT)
			rc = farm_loop_rdma_wake(tl->loop, mach, tl->t, &wr,
			                         write_done, c);
		else
			rc = farm_loop_rdma(tl->loop, mach, &wr, write_done, c);
	}
	if (rc) {
		arena_put(&tl->ar, buf, len);
		free(c);
	} else {
		tl->inflight++;
	}
	return rc;
}

/* Before the first record to our log on @mach: the participant backed
 * only its first page (txm.c, back_log_doors), the rest takes memory
 * now, so a full file system there fails this record, never as a
 * SIGBUS. */
static int writer_back(struct txloop *tl, struct writer *w, uint32_t mach)
{
	if (FARM_LIKELY(w->backed))
		return 0;
	farm_txm *m = tl->m;
	uint64_t ro = log_ring_off(m, log_index(m, m->me, tl->t));
	int rc = mach == m->me ? farm_mem_back(m->logbase + ro, m->R)
	                       : farm_loop_back(tl->loop, mach, &m->peers[mach],
	                                        ro, m->R);
	w->backed = rc == 0;
	return rc;
}

/*
 * Append the record in @buf (@len bytes, a multiple of 64; type, nobj,
 * txid and body filled) to this loop's log on @mach. The caller reserved
 * the room (released here). Fills in the low-water mark and the trailer,
 * pads to the ring's end first when the record does not fit before it.
 * Completion goes to farm_txn_tx_record_done(tx, kind). *@seq_out: the record's
 * queue entry, to mark done when the transaction is. Returns 0, or an
 * error with nothing sent for this record.
 */
void farm_txn_refresh_freed(struct txloop *tl, uint32_t mach);

int farm_txn_log_append(struct txloop *tl, uint32_t mach, void *buf, size_t len,
                        farm_tx *tx, int kind, uint64_t *seq_out)
{
	farm_txm *m = tl->m;
	struct writer *w = &tl->w[mach];
	uint64_t off = log_pos(m, w->tail);
	if (!farm_txn_writer_open(m, w, mach)) {
		farm_txn_refresh_freed(tl, mach);
		arena_put(&tl->ar, buf, len);
		return -EAGAIN;
	}
	/* Never write over space the replica has not freed, whatever the
	 * reservations say: that would destroy records still in use. */
	uint64_t total = len + (off + len > m->R ? m->R - off : 0);
	if (w->tail + total - w->freed > m->R) {
		farm_txn_refresh_freed(tl, mach);
		if (w->tail + total - w->freed > m->R) {
			arena_put(&tl->ar, buf, len);
			return -EAGAIN;
		}
	}
	int brc = writer_back(tl, w, mach);
	if (brc) {
		arena_put(&tl->ar, buf, len);
		return brc;
	}
	/* Queue room for a pad and the record, before anything is sent. */
	if (wq_reserve(m, w, 2)) {
		arena_put(&tl->ar, buf, len);
		return -ENOMEM;
	}
	if (off + len > m->R) {
		uint64_t plen = m->R - off;
		uint8_t *pb = arena_get(&tl->ar, 64);
		if (!pb) {
			arena_put(&tl->ar, buf, len);
			return -ENOMEM;
		}
		memset(pb, 0, 64);
		struct rec_hdr ph = {.len = (uint32_t)plen,
		                     .type = REC_PAD,
		                     .trunc = low_water(tl, w),
		                     .lw = tl->cs_low};
		memcpy(pb, &ph, sizeof(ph));
		uint64_t sum = rec_sum(pb, 48);
		memcpy(pb + 48, &sum, 8);
		uint64_t tr = w->tail + 1;
		memcpy(pb + 56, &tr, 8); /* a pad's trailer: its first line's */
		int rc = post_write(tl, mach, off, pb, 64, NULL, 0);
		if (rc) {
			arena_put(&tl->ar, buf, len);
			return rc;
		}
		uint64_t s = w->wq_tail++;
		w->wq[s % w->wq_cap] = (struct wq_ent){
		        .pos = w->tail, .end = w->tail + plen, .done = true};
		w->tail += plen;
		off = 0;
	}
	struct rec_hdr *h = buf;
	h->len = (uint32_t)len;
	h->trunc = low_water(tl, w);
	h->lw = tl->cs_low;
	w->sent_trunc = FARM_MAX(w->sent_trunc, h->trunc);
	/* Every byte is final now: the checksum, then the trailer. */
	uint64_t sum = rec_sum(buf, len - 16);
	memcpy((uint8_t *)buf + len - 16, &sum, 8);
	uint64_t tr = w->tail + 1;
	memcpy((uint8_t *)buf + len - 8, &tr, 8);
	uint64_t s = w->wq_tail;
	int rc = post_write(tl, mach, off, buf, len, tx, kind);
	if (rc)
		return rc;
	if (tx) /* TRUNCATE records are not reserved */
		w->reserved -= FARM_MIN(w->reserved, len);
	w->wq_tail++;
	w->wq[s % w->wq_cap] = (struct wq_ent){.pos = w->tail,
	                                       .end = w->tail + len,
	                                       .cseq = tx ? tx->cseq : 0,
	                                       .done = tx == NULL};
	w->tail += len;
	if (seq_out)
		*seq_out = s;
	return 0;
}

/* A small record with no objects (COMMIT-PRIMARY, ABORT, TRUNC). */
static int log_small(struct txloop *tl, uint32_t mach, int type, uint64_t txid,
                     farm_tx *tx, int kind, uint64_t *seq_out)
{
	uint8_t *b = arena_get(&tl->ar, 64);
	if (!b)
		return -ENOMEM;
	memset(b, 0, 64);
	struct rec_hdr h = {.type = (uint16_t)type, .txid = txid};
	memcpy(b, &h, sizeof(h));
	return farm_txn_log_append(tl, mach, b, 64, tx, kind, seq_out);
}

/* Lazily tell replicas how far records are done: when a log is half full
 * (or @short_of_room: a commit waits for room in it) and its low-water
 * mark has moved since we last said (log cleaning). */
void farm_txn_maybe_truncate(struct txloop *tl, uint32_t mach,
                             bool short_of_room)
{
	farm_txm *m = tl->m;
	struct writer *w = &tl->w[mach];
	wq_pop_done(w, tl->cs_low);
	/* Half full counts what the replica has not been told it may free
	 * (our view of its freed mark is refreshed only when short of room,
	 * so it would say "half full" long after the space came back). A
	 * commit short of room cannot wait for half full: the replica frees
	 * only up to the mark the last record carried, which stops before
	 * that record, and while the commit waits no record of this thread
	 * goes to that log to carry a newer one. A commit needing more than
	 * the log's free part after one record under half the log would
	 * wait for good (test_txn's trunc_for_room). */
	uint64_t lw = low_water(tl, w);
	if (lw <= w->sent_trunc ||
	    (!short_of_room && (w->tail - w->sent_trunc) * 2 < m->R))
		return;
	/* A 64-byte record never needs a pad (positions are 64-aligned). */
	if ((w->tail - w->freed) + w->reserved + 64 > m->R ||
	    wq_reserve(m, w, 1))
		return;
	if (log_small(tl, mach, REC_TRUNC, 0, NULL, 0, NULL) == 0)
		txl_count(tl, S_TRUNCATES, 1);
}

/* ---- the replica's freed word ---------------------------------------- */

#ifdef FARM_FAULT_INJECTION
static _Atomic bool testing_no_room_bell;

void farm_txn_testing_no_room_bell(bool on)
{
	atomic_store(&testing_no_room_bell, on);
}

static bool room_bell(void)
{
	return !atomic_load_explicit(&testing_no_room_bell,
	                             memory_order_relaxed);
}

static _Atomic bool testing_hold_paced;

void farm_txn_testing_hold_paced(bool on)
{
	atomic_store(&testing_hold_paced, on);
}

static bool paced_held(void)
{
	return atomic_load_explicit(&testing_hold_paced, memory_order_relaxed);
}

static _Atomic bool testing_fail_paced, testing_keep_failed;

void farm_txn_testing_fail_paced(bool fail, bool keep)
{
	atomic_store(&testing_keep_failed, keep);
	atomic_store(&testing_fail_paced, fail);
}

static bool paced_fails(void)
{
	return atomic_load_explicit(&testing_fail_paced, memory_order_relaxed);
}

static bool failed_kept(void)
{
	return atomic_load_explicit(&testing_keep_failed, memory_order_relaxed);
}
#else
static bool room_bell(void)
{
	return true;
}

static bool paced_held(void)
{
	return false;
}

static bool paced_fails(void)
{
	return false;
}

static bool failed_kept(void)
{
	return false;
}
#endif

static void freed_read_done(farm_loop *loop, void *ctx, int status);

/* The gap between freed-word READs that find nothing freed doubles from
 * PACE_MIN_NS to PACE_MAX_NS while a commit waits for room: sent back to
 * back, they kept the waiting loop busy, and on a shared core it took
 * the time from the very loop whose truncation it waited for. The bound
 * is how late a wait may end after the room is freed. */
#define PACE_MIN_NS 4000u
#define PACE_MAX_NS 1000000u

/* Send the READ of the freed word at @mach; false when it could not be. */
static bool send_freed_read(struct txloop *tl, uint32_t mach)
{
	farm_txm *m = tl->m;
	struct writer *w = &tl->w[mach];
	uint64_t hoff = log_hdr_off(m, log_index(m, m->me, tl->t));
	uint64_t *buf = arena_get(&tl->ar, 64);
	if (!buf)
		return false;
	/* The freed word and the open word after it (farm_txn_writer_open). */
	farm_wr wr = farm_wr_read(0, buf, tl->ar.mr, 16, &m->peers[mach], hoff);
	struct wr_ctx *c = malloc(sizeof(*c));
	if (!c) {
		arena_put(&tl->ar, buf, 64);
		return false;
	}
	*c = (struct wr_ctx){
	        .tl = tl, .buf = buf, .len = 64, .kind = (int)mach};
	/* With the READ, a doorbell: the replica's loop frees room only
	 * when it reads the log, and records that need no answer ring none
	 * (post_write), so a parked replica would leave us short of room
	 * until its timed check. */
	int rc = room_bell() ? farm_loop_rdma_wake(tl->loop, mach, tl->t, &wr,
	                                           freed_read_done, c)
	                     : farm_loop_rdma(tl->loop, mach, &wr,
	                                      freed_read_done, c);
	if (rc) {
		arena_put(&tl->ar, buf, 64);
		free(c);
		return false;
	}
	tl->inflight++;
	w->reading = true;
	return true;
}

/* Ask machine @mach how far our log there is free (a READ of its word),
 * at once or, while READs find nothing freed, once the pace allows (the
 * poller sends it: farm_txn_pace_reads). */
void farm_txn_refresh_freed(struct txloop *tl, uint32_t mach)
{
	farm_txm *m = tl->m;
	struct writer *w = &tl->w[mach];
	if (mach == m->me) {
		uint64_t hoff = log_hdr_off(m, log_index(m, m->me, tl->t));
		/* Acquire: pairs with the release store of the freed word
		 * by our own log's reader (participant.c, truncate_to). */
		w->freed = atomic_load_explicit(
		        (_Atomic uint64_t *)(void *)(m->logbase + hoff),
		        memory_order_acquire);
		return;
	}
	if (w->reading || w->read_at)
		return;
	if (w->read_ok_at && farm_now_ns() < w->read_ok_at) {
		w->read_at = w->read_ok_at;
		tl->npaced++;
		farm_loop_wake_by(tl->loop, w->read_at);
		return;
	}
	(void)send_freed_read(tl, mach);
}

static void retry_room_waiters(struct txloop *tl);

int farm_txn_pace_reads(struct txloop *tl)
{
	if (FARM_LIKELY(!tl->npaced))
		return 0;
	uint64_t now = farm_now_ns(), next = 0;
	unsigned left = tl->npaced;
	int sent = 0;
	bool failed = false;
	for (uint32_t i = 0; i < tl->m->M && left; i++) {
		struct writer *w = &tl->w[i];
		if (!w->read_at)
			continue;
		left--;
		if (now >= w->read_at && !paced_held()) {
			bool ok = !paced_fails() && send_freed_read(tl, i);
			if (!ok && failed_kept()) { /* testing: as before */
				w->read_at = now + PACE_MIN_NS;
				next = next ? FARM_MIN(next, w->read_at)
				            : w->read_at;
				continue;
			}
			w->read_at = 0;
			tl->npaced--;
			sent |= ok;
			/* Not sent (the peer dead, no memory): no completion
			 * will retry the commits waiting on it, and only a
			 * retry checks their deadline, so they go again now
			 * and, short of room still, each pass until it
			 * passes (farm_txn_tx_reserve). Kept deferred, they
			 * waited for good on a READ that could never go. */
			if (!ok)
				w->read_ok_at = 0;
			failed |= !ok;
			continue;
		}
		if (!next || w->read_at < next)
			next = w->read_at;
	}
	if (next)
		farm_loop_wake_by(tl->loop, next);
	if (failed)
		retry_room_waiters(tl);
	return sent;
}

/* After a freed-word READ (@status, @moved: it found room freed or the
 * log opened): the gap before the next one. */
static void pace_next(struct writer *w, int status, bool moved)
{
	if (status) { /* a closing loop or a dead peer: as before, at once */
		w->pace_ns = 0;
		w->read_ok_at = 0;
		return;
	}
	if (!moved)
		w->pace_ns = w->pace_ns ? FARM_MIN(2 * w->pace_ns, PACE_MAX_NS)
		                        : PACE_MIN_NS;
	w->read_ok_at = w->pace_ns ? farm_now_ns() + w->pace_ns : 0;
}

static void freed_read_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct wr_ctx *c = ctx;
	struct txloop *tl = c->tl;
	struct writer *w = &tl->w[c->kind];
	tl->inflight--;
	w->reading = false;
	bool moved = false;
	if (!status) {
		uint64_t f, inc;
		memcpy(&f, c->buf, 8);
		memcpy(&inc, (uint8_t *)c->buf + 8, 8);
		farm_txm *m = tl->m;
		if (!farm_txn_writer_open(m, w, (uint32_t)c->kind)) {
			/* The replica opened its log to this incarnation only
			 * after it zeroed it and its freed word (pairs with
			 * the release in farm_txn_log_reopen and
			 * farm_txm_add_peer): the log is empty. */
			if (inc == atomic_load_explicit(&m->self_inc,
			                                memory_order_relaxed)) {
				atomic_thread_fence(memory_order_acquire);
				w->open = moved = true;
			}
		} else if (f > w->freed && f <= w->tail) {
			w->freed = f;
			moved = true;
		}
	}
	pace_next(w, status, moved);
	arena_put(&tl->ar, c->buf, c->len);
	free(c);
	retry_room_waiters(tl);
	if (!tl->nroom && !tl->room_all) { /* no commit waits: no pace */
		w->pace_ns = 0;
		w->read_ok_at = 0;
	}
}

/* Transactions waiting for room try again; each that still finds none
 * says so again (farm_txn_tx_reserve). A scan of the slot table per
 * completion cost a fifth of a loaded run's CPU with none waiting, and
 * 13% of a partitioned TATP run's with some: only the waiting ones' slots
 * are looked at. */
static void retry_room_waiters(struct txloop *tl)
{
	unsigned n = tl->nroom;
	bool all = tl->room_all;
	uint32_t slot[ROOM_WAITS];
	memcpy(slot, tl->room_slot, n * sizeof(slot[0]));
	tl->nroom = 0;
	tl->room_all = false;
	for (unsigned i = 0; i < (all ? TX_SLOTS : n); i++) {
		farm_tx *tx = tl->slots[all ? i : slot[i]];
		if (tx && tx->ph == PH_RESERVE)
			farm_txn_tx_reserve(tx);
	}
}

void farm_txn_room_wait(struct txloop *tl, farm_tx *tx)
{
	uint32_t s = (uint32_t)(txid_seq(tx->id) % TX_SLOTS);
	for (unsigned i = 0; i < tl->nroom; i++)
		if (tl->room_slot[i] == s)
			return;
	if (tl->nroom < ROOM_WAITS)
		tl->room_slot[tl->nroom++] = s;
	else
		tl->room_all = true;
}

/*
 * What lies at @off of a ring of @R bytes? 1: a whole transaction record
 * (not a pad): its header is sane, its trailer holds its position + 1
 * and its checksum matches; 2: a whole pad (the same, its first line);
 * 0: neither: a record whose trailer does not match was in flight when
 * its writer stopped (never landed, never acknowledged; the trailer
 * lands last), and truncation zeroes what it frees; FARM_ECORRUPT: a
 * record or pad whose trailer says it landed whole but whose checksum
 * does not match its bytes: damaged since (or a bad header that claims a
 * trailer). *@h is the header unless 0, and *@pos (when not NULL) the
 * position in the log (its trailer - 1). For scans of files at rest
 * (farm_txlog_scan_file, whole-cluster restart).
 */
int farm_txn_log_record_at(const uint8_t *ring, uint64_t R, uint64_t off,
                           struct rec_hdr *h, uint64_t *pos)
{
	memcpy(h, ring + off, sizeof(*h));
	if (!h->len || h->len % 64 || h->len > R - off || h->type < REC_LOCK ||
	    h->type > REC_PAD)
		return 0;
	uint64_t tr;
	memcpy(&tr, ring + off + (h->type == REC_PAD ? 56 : h->len - 8), 8);
	if (!tr || (tr - 1) % R != off)
		return 0;
	if (pos)
		*pos = tr - 1;
	uint64_t so = rec_sum_off(h->type, h->len), sum;
	memcpy(&sum, ring + off + so, 8);
	if (sum != rec_sum(ring + off, so))
		return FARM_ECORRUPT;
	if (h->type == REC_PAD)
		return 2;
	return rec_size(h->nobj, 0, h->nreg) <= h->len ? 1 : FARM_ECORRUPT;
}

/* ---- reading logs after a restart ------------------------------------- */

bool farm_txn_log_geometry_ok(const struct log_super *sb)
{
	return sb->M && sb->M <= TXN_MAX_MACHINES && sb->T &&
	       sb->T <= MAX_LOOPS && sb->machine < sb->M &&
	       farm_is_pow2(sb->R) && sb->R >= (64u << 10) &&
	       sb->R <= (64u << 20) &&
	       sb->hdr_area == ((64 + (uint64_t)sb->M * sb->T * 64 + 4095) &
	                        ~4095ull) &&
	       sb->total == sb->hdr_area + (uint64_t)sb->M * sb->T * sb->R;
}

int farm_txlog_scan_file(const char *path, farm_txlog_fn fn, void *ctx,
                         struct farm_txlog_info *info)
{
	if (!path || !fn)
		return -EINVAL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	struct log_super sb;
	int rc = 0;
	if (fstat(fd, &st))
		rc = -errno;
	else if (st.st_size < (off_t)sizeof(sb) ||
	         pread(fd, &sb, sizeof(sb), 0) != (ssize_t)sizeof(sb) ||
	         sb.magic != LOG_SUPER_MAGIC)
		rc = -ENOMSG; /* not a log file */
	else if (sb.layout != LOG_LAYOUT || !farm_txn_log_geometry_ok(&sb) ||
	         (uint64_t)st.st_size < sb.total)
		rc = FARM_ECORRUPT;
	if (rc) {
		close(fd);
		return rc;
	}
	uint8_t *base = mmap(NULL, sb.total, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return -errno;
	if (info)
		*info = (struct farm_txlog_info){
		        .machine = sb.machine, .M = sb.M, .T = sb.T, .R = sb.R};
	int n = 0;
	for (uint32_t c = 0; c < sb.M; c++)
		for (uint32_t t = 0; t < sb.T; t++) {
			const uint8_t *ring = base + sb.hdr_area +
			                      ((uint64_t)c * sb.T + t) * sb.R;
			/* A record is whole when its trailer holds its position
			 * + 1; truncation zeroes what it frees, so what is left
			 * are the records not yet truncated. */
			for (uint64_t off = 0; off < sb.R; off += 64) {
				struct rec_hdr h;
				uint64_t pos;
				int k = farm_txn_log_record_at(ring, sb.R, off,
				                               &h, &pos);
				if (k < 0) {
					munmap(base, sb.total);
					return k; /* damaged */
				}
				if (k != 1)
					continue;
				struct farm_txlog_rec r = {.coord = c,
				                           .thread = t,
				                           .type = h.type,
				                           .nobj = h.nobj,
				                           .len = h.len,
				                           .txid = h.txid,
				                           .pos = pos};
				fn(ctx, &r);
				n++;
				off += h.len - 64;
			}
		}
	munmap(base, sb.total);
	return n;
}

int farm_txlog_scan_dir(const char *dir, farm_txlog_fn fn, void *ctx,
                        struct farm_txlog_info *info)
{
	if (!dir || !fn)
		return -EINVAL;
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	int rc = -ENOENT;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 7 || strcmp(e->d_name + l - 7, ".region"))
			continue;
		char path[4096];
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >=
		    (int)sizeof(path))
			continue;
		int n = farm_txlog_scan_file(path, fn, ctx, info);
		if (n == -ENOMSG)
			continue; /* a data region, not the logs */
		rc = n;
		break;
	}
	closedir(d);
	return rc;
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

#ifdef FARM_FAULT_INJECTION
_Atomic bool farm_txn_testing_trunc_early_on;

void farm_txn_testing_trunc_early(bool on)
{
	atomic_store(&farm_txn_testing_trunc_early_on, on);
}
#endif

int farm_txm_testing_records(farm_txm *m,
                             void (*fn)(void *ctx, uint32_t coord, int type,
                                        uint64_t txid),
                             void *ctx)
{
	if (!m || !fn)
		return -EINVAL;
	int n = 0;
	for (unsigned t = 0; t < m->T && t < MAX_LOOPS; t++) {
		struct txloop *tl = m->loops[t];
		if (!tl)
			continue;
		for (uint32_t c = 0; c < m->M; c++) {
			const uint8_t *ring =
			        m->logbase +
			        log_ring_off(m, log_index(m, c, t));
			/* Whole records from the applied position on, as the
			 * poller recognizes them (trailer = position + 1). */
			uint64_t pos = tl->r[c].applied;
			for (uint64_t seen = 0; seen < m->R;) {
				const uint8_t *rec = ring + log_pos(m, pos);
				struct rec_hdr h;
				memcpy(&h, rec, sizeof(h));
				if (h.len == 0 || h.len % 64 ||
				    h.len > m->R - log_pos(m, pos))
					break;
				uint64_t tr;
				memcpy(&tr,
				       rec + (h.type == REC_PAD ? 56
				                                : h.len - 8),
				       8);
				if (tr != pos + 1)
					break;
				if (h.type != REC_PAD) {
					fn(ctx, c, h.type, h.txid);
					n++;
				}
				pos += h.len;
				seen += h.len;
			}
		}
	}
	return n;
}

int farm_txn_truncate_all(struct txloop *tl, const bool *member)
{
	farm_txm *m = tl->m;
	int sent = 0;
	for (uint32_t mach = 0; mach < m->M; mach++) {
		/* Acquire: pairs with the release of peer_ready in txm.c. */
		if (mach != m->me &&
		    !atomic_load_explicit(&m->peer_ready[mach],
		                          memory_order_acquire))
			continue;
		if (member && !member[mach])
			continue;
		struct writer *w = &tl->w[mach];
		wq_pop_done(w, tl->cs_low);
		if (low_water(tl, w) <= w->sent_trunc)
			continue;
		if ((w->tail - w->freed) + w->reserved + 64 > m->R ||
		    wq_reserve(m, w, 1))
			continue;
		if (log_small(tl, mach, REC_TRUNC, 0, NULL, 0, NULL) == 0)
			sent++;
	}
	txl_count(tl, S_TRUNCATES, (uint64_t)sent);
	return sent;
}

/* txn_testing.h: TRUNCATE records now, to every log whose low-water mark
 * moved, so replicas apply what finished (tests compare replicas). */
int farm_txm_testing_truncate(farm_txm *m, farm_loop *loop)
{
	struct txloop *tl = m ? loop_state(m, loop) : NULL;
	return tl ? farm_txn_truncate_all(tl, NULL) : -EINVAL;
}
