/*
 * The transaction manager of one machine (txm.h): creating it (the log
 * memory and its superblock), attaching loops (per-loop state, the
 * poller), peers' log descriptors, counters, and the glue to distributed
 * epochs (epoch.c does the work).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/epoch.h"
#include "txn/txn_int.h"
#include "txn/txn_testing.h"
#include "txn/txn_tx.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/stat.h"

#define DEFAULT_LOG   (1u << 20)
#define DEFAULT_ARENA (64u << 20)

/* ---- distributed epochs (epoch.c does the work) ------------------------- */

struct txepoch {
	farm_txm *m;
	uint64_t reclaimed;
	farm_op_fn cont;
	void *ctx;
};

static void txm_epoch_done(farm_loop *loop, void *ctx, int status)
{
	struct txepoch *e = ctx;
	farm_txm *m = e->m;
	farm_stat_add(&m->st.v[status ? S_EPOCHS_FAILED : S_EPOCHS], 1);
	farm_stat_add(&m->st.v[S_EPOCH_RECLAIMED], e->reclaimed);
	farm_op_fn cont = e->cont;
	void *cctx = e->ctx;
	free(e);
	cont(loop, cctx, status);
}

int farm_txm_epoch(farm_txm *m, farm_loop *loop, farm_op_fn cont, void *ctx)
{
	if (!loop_state(m, loop) || !cont)
		return -EINVAL;
	uint32_t *peers = malloc(m->M * sizeof(*peers));
	unsigned np = 0;
	if (!peers)
		return -ENOMEM;
	/* Pairs with the release of nready below (ready_ids[] is seen). */
	unsigned n = atomic_load_explicit(&m->nready, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (m->ready_ids[i] != m->me)
			peers[np++] = m->ready_ids[i];
	struct txepoch *e = calloc(1, sizeof(*e));
	if (!e) {
		free(peers);
		return -ENOMEM;
	}
	*e = (struct txepoch){.m = m, .cont = cont, .ctx = ctx};
	/* The run sends its requests before it returns: @peers is ours. */
	int rc = farm_epoch_run(loop, peers, np, 5000000000ull,
	                        farm_galloc_blockalloc(m->ga), &e->reclaimed,
	                        txm_epoch_done, e);
	free(peers);
	if (rc)
		free(e);
	return rc;
}

static void epoch_auto_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	farm_txm *m = ctx;
	m->epoch_running = false;
	if (status)
		farm_info("txn: background epoch failed (%s); retired memory "
		          "waits for the next",
		          farm_strerror(status));
}

/* Loop 0, every few thousand passes: when free blocks are low and some are
 * retired, start an epoch in the background. */
static void epoch_maybe_start(struct txloop *tl)
{
	farm_txm *m = tl->m;
	if (m->epoch_running || !m->epoch_free_pct)
		return;
	uint64_t now = farm_now_ns();
	if (now - m->epoch_last_check < 10000000ull)
		return;
	m->epoch_last_check = now;
	uint64_t total, in_use, retired;
	farm_blockalloc_blocks(farm_galloc_blockalloc(m->ga), &total, &in_use,
	                       &retired);
	if (!retired)
		return;
	uint64_t free_blocks = total - in_use - retired;
	if (free_blocks * 100 >= total * m->epoch_free_pct &&
	    retired * 100 < total * m->epoch_free_pct)
		return;
	m->epoch_running = true;
	if (farm_txm_epoch(m, tl->loop, epoch_auto_done, m))
		m->epoch_running = false;
}

int farm_txm_epoch_sync(farm_txm *m, farm_loop *loop)
{
	struct sync_res r = {0};
	int rc = farm_txm_epoch(m, loop, sync_op_cb, &r);
	return rc ? rc : wait_loop(loop, &r);
}

/* ---- the manager ------------------------------------------------------ */

static int txn_poll_all(farm_loop *loop, void *ctx)
{
	struct txloop *tl = ctx;
	int got = farm_txn_poll(loop, ctx) + farm_txn_pace_reads(tl);
	if (tl->lock_waiters && (++tl->rand & 1023) == 0)
		farm_txn_scan_deadlines(tl);
	farm_epoch_quiesce();
	if (tl->t == 0 && (++tl->epoch_tick & 4095) == 0)
		epoch_maybe_start(tl);
	return got;
}

/* The attributes with their defaults filled in; -EINVAL when out of
 * range. */
static int attr_resolve(const struct farm_txm_attr *attr,
                        struct farm_txm_attr *a)
{
	*a = attr ? *attr : (struct farm_txm_attr){0};
	if (!a->log_size)
		a->log_size = DEFAULT_LOG;
	if (!farm_is_pow2(a->log_size) || a->log_size < (64u << 10) ||
	    a->log_size > (64u << 20))
		return -EINVAL;
	if (!a->arena_size)
		a->arena_size = DEFAULT_ARENA;
	if (!a->lf_bound_ns)
		a->lf_bound_ns = 1000000ull;
	if (a->epoch_free_pct > 100 &&
	    a->epoch_free_pct != FARM_TXM_EPOCH_MANUAL)
		return -EINVAL;
	return 0;
}

/* The lock-free read bound in ticks: calibrate the tick against the
 * clock over 2 ms, as reads compare cycle counts (cheaper than the
 * clock). */
static uint64_t bound_cycles(uint64_t bound_ns)
{
	uint64_t c0 = farm_cycles(), t0 = farm_now_ns(), t1;
	while ((t1 = farm_now_ns()) - t0 < 2000000)
		farm_cpu_relax();
	uint64_t c1 = farm_cycles();
	double per_ns = (double)(c1 - c0) / (double)(t1 - t0);
	return (uint64_t)((double)bound_ns * (per_ns > 0 ? per_ns : 1));
}

/* Back the first page of each log machine @id's coordinators write here
 * (one a thread): the page our readers poll before any record (a read of
 * a hole in a file takes a page too, and a SIGBUS when the file system
 * is full). The rest of a log is backed by its coordinator before its
 * first record (log.c, farm_loop_back), so a peer costs a page per log
 * until it commits here. */
static int back_log_doors(farm_txm *m, uint32_t id)
{
	uint8_t *base = farm_mem_addr(m->logmem);
	size_t door = FARM_MIN((size_t)m->R, (size_t)sysconf(_SC_PAGESIZE));
	int rc = 0;
	for (unsigned t = 0; !rc && t < m->T; t++)
		rc = farm_mem_back(base + log_ring_off(m, log_index(m, id, t)),
		                   door);
	if (rc)
		farm_err("txn: cannot back machine %" PRIu32 "'s logs: %s", id,
		         farm_strerror(rc));
	return rc;
}

/* The log memory (@total bytes, registered for remote READ and WRITE;
 * its headers and our own logs backed), the handlers and the parts of
 * the layer set up with it. */
static int txm_setup(farm_txm *m, const struct farm_txm_attr *a, uint64_t total)
{
	m->peers = calloc(m->M, sizeof(*m->peers));
	m->peer_ready = calloc(m->M, sizeof(*m->peer_ready));
	m->ready_ids = calloc(m->M, sizeof(*m->ready_ids));
	int rc = m->peers && m->peer_ready && m->ready_ids ? 0 : -ENOMEM;
	if (!rc)
		/* Sparse: a ring per (id, thread), backed only once a
		 * coordinator writes into it. */
		rc = farm_mem_alloc(m->fab, (size_t)total, FARM_MEM_SPARSE,
		                    &m->logmem);
	if (!rc)
		rc = farm_mem_back(farm_mem_addr(m->logmem), m->hdr_area);
	if (!rc)
		rc = back_log_doors(m, m->me);
	if (!rc)
		rc = farm_mr_reg(m->fab, farm_mem_addr(m->logmem),
		                 (size_t)total,
		                 FARM_ACCESS_LOCAL | FARM_ACCESS_REMOTE_READ |
		                         FARM_ACCESS_REMOTE_WRITE,
		                 &m->logmr);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_TX_REPLY,
		                     farm_txn_h_reply, m);
	if (!rc)
		rc = farm_epoch_handle(m->msg);
	if (!rc)
		rc = farm_txn_rec_init(m);
	if (!rc)
		rc = farm_txn_datarec_init(m, a->datarec_bytes,
		                           a->datarec_interval_us,
		                           a->datarec_hold_ms);
	if (!rc && !(rc = farm_epoch_domain_get()))
		m->epoch_domain = true;
	return rc;
}

/* Write the log superblock (what a restart reads the logs by) and make
 * this machine's own logs ready. */
static void txm_publish(farm_txm *m, uint64_t total)
{
	m->logbase = farm_mem_addr(m->logmem);
	struct log_super sb = {.magic = LOG_SUPER_MAGIC,
	                       .layout = LOG_LAYOUT,
	                       .machine = m->me,
	                       .M = m->M,
	                       .T = m->T,
	                       .R = m->R,
	                       .hdr_area = m->hdr_area,
	                       .total = total};
	memcpy(m->logbase, &sb, sizeof(sb));
	int rc = farm_mem_persist(m->logmem, m->logbase, sizeof(sb));
	if (rc)
		farm_warn("txn: cannot make the log superblock durable: %s",
		          farm_strerror(rc));
	m->logdesc = farm_mr_describe(m->logmr);
	m->peers[m->me] = m->logdesc;
	atomic_store(&m->peer_ready[m->me], 1);
	m->ready_ids[0] = m->me;
	atomic_store(&m->nready, 1);
}

int farm_txm_create(farm_fabric *fab, farm_msg *msg, farm_as *as,
                    farm_galloc *ga, const struct farm_txm_attr *attr,
                    farm_txm **out)
{
	if (!fab || !msg || !as || !ga || !out)
		return -EINVAL;
	struct farm_txm_attr a;
	if (attr_resolve(attr, &a))
		return -EINVAL;
	farm_txm *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->fab = fab;
	m->msg = msg;
	m->as = as;
	m->region_size = farm_as_region_size(as);
	m->as_cfg = farm_as_config_word(as);
	m->ga = ga;
	m->me = farm_msg_machine_id(msg);
	m->T = farm_msg_nthreads(msg);
	m->M = FARM_MIN(farm_msg_max_machines(msg), TXN_MAX_MACHINES);
	m->R = a.log_size;
	m->lf_bound = a.lf_bound_ns;
	m->arena_size = a.arena_size;
	m->epoch_free_pct = a.epoch_free_pct ? a.epoch_free_pct : 25;
	if (a.epoch_free_pct == FARM_TXM_EPOCH_MANUAL)
		m->epoch_free_pct = 0;
	pthread_mutex_init(&m->peer_lock, NULL);
	pthread_mutex_init(&m->rec.lock, NULL);
	atomic_init(&m->serve_until, UINT64_MAX);
	m->lf_bound_cycles = bound_cycles(m->lf_bound);
	if (m->T > MAX_LOOPS || m->me >= m->M) {
		free(m);
		return -EINVAL;
	}
	uint64_t nlogs = (uint64_t)m->M * m->T;
	m->hdr_area = (64 + nlogs * 64 + 4095) & ~4095ull;
	uint64_t total = m->hdr_area + nlogs * m->R;
	int rc = txm_setup(m, &a, total);
	if (rc) {
		farm_err("txn: cannot set up logs (%" PRIu64 " bytes): %s",
		         total, farm_strerror(rc));
		farm_txm_destroy(m);
		return rc;
	}
	txm_publish(m, total);
	*out = m;
	return 0;
}

void farm_txm_destroy(farm_txm *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < MAX_LOOPS; i++)
		if (m->loops[i])
			farm_warn("txn: loop %u still attached at destroy", i);
	if (m->logmr)
		farm_mr_dereg(m->logmr);
	if (m->logmem)
		farm_mem_free(m->logmem);
	if (m->epoch_domain)
		farm_epoch_domain_put();
	farm_txn_rec_fini(m);
	farm_txn_datarec_fini(m);
	free(m->peers);
	free(m->peer_ready);
	free(m->ready_ids);
	free(m);
}

void farm_txm_memory(farm_txm *m, uint64_t *logs, uint64_t *resident,
                     uint64_t *tables)
{
	*logs = m ? m->hdr_area + (uint64_t)m->M * m->T * m->R : 0;
	*resident = m ? farm_mem_resident(m->logmem) : 0;
	*tables = m ? (uint64_t)m->M * (sizeof(*m->peers) +
	                                sizeof(*m->peer_ready)) +
	                          atomic_load_explicit(&m->loop_bytes,
	                                               memory_order_relaxed)
	            : 0;
}

farm_mr_desc farm_txm_log_desc(const farm_txm *m)
{
	return m ? m->logdesc : (farm_mr_desc){0};
}

/* The word of log (@id, @t)'s header that says which incarnation of @id
 * the log is open to (farm_txn_writer_open). */
static _Atomic uint64_t *open_word(farm_txm *m, uint32_t id, unsigned t)
{
	return (_Atomic uint64_t *)(void *)(m->logbase +
	                                    log_hdr_off(m,
	                                                log_index(m, id, t)) +
	                                    8);
}

void farm_txn_log_mark_pending(farm_txm *m, uint32_t id, unsigned t, bool on)
{
	uint8_t *w = m->logbase + log_hdr_off(m, log_index(m, id, t)) +
	             LOG_HDR_PENDING;
	/* Read only at rest (a restart reads the file): relaxed. */
	atomic_store_explicit((_Atomic uint64_t *)(void *)w, on ? 1 : 0,
	                      memory_order_relaxed);
	if (farm_mem_persist(m->logmem, w, 8))
		farm_warn("txn: log header of machine %" PRIu32
		          " not persisted",
		          id);
}

int farm_txm_add_peer(farm_txm *m, uint32_t id, uint32_t inc,
                      const farm_mr_desc *logs)
{
	if (!m || !logs || id >= m->M || id == m->me)
		return -EINVAL;
	uint64_t nlogs = (uint64_t)m->M * m->T;
	if (logs->len != m->hdr_area + nlogs * m->R)
		return -EINVAL; /* another log size or thread count */
	farm_mr_desc d = *logs;
	d.machine = id;
	pthread_mutex_lock(&m->peer_lock);
	int rc = 0;
	if (atomic_load(&m->peer_ready[id])) {
		/* Another incarnation is another holder even where its
		 * descriptor is the same (a provider whose keys and
		 * addresses repeat from process to process, as udp's do
		 * for processes forked alike). */
		pthread_mutex_lock(&m->rec.lock);
		bool other = m->rec.inc[id] != inc;
		pthread_mutex_unlock(&m->rec.lock);
		rc = other || memcmp(&m->peers[id], &d, sizeof(d)) ? -EEXIST
		                                                   : 0;
	} else if (!(rc = back_log_doors(m, id))) {
		m->peers[id] = d;
		/* Its logs here are empty: open them to the holder now.
		 * Release: pairs with the acquire in farm_txn_writer_open's
		 * READ (the header word before any record). */
		for (unsigned t = 0; t < m->T; t++) {
			atomic_store_explicit(open_word(m, id, t), inc,
			                      memory_order_release);
			farm_txn_log_mark_pending(m, id, t, true);
		}
		pthread_mutex_lock(&m->rec.lock);
		m->rec.inc[id] = inc;
		pthread_mutex_unlock(&m->rec.lock);
		/* Pairs with the acquire of peer_ready in commit.c: the
		 * descriptor above is set before it. */
		atomic_store_explicit(&m->peer_ready[id], 1,
		                      memory_order_release);
		unsigned n =
		        atomic_load_explicit(&m->nready, memory_order_relaxed);
		m->ready_ids[n] = id;
		/* Pairs with the acquires of nready in participant.c and
		 * txm.c: the id is listed before the count covers it. */
		atomic_store_explicit(&m->nready, n + 1, memory_order_release);
	}
	pthread_mutex_unlock(&m->peer_lock);
	return rc;
}

/* A loop's tables sized by machine ids (their record queues apart). */
static uint64_t loop_table_bytes(const farm_txm *m)
{
	return sizeof(struct txloop) +
	       (uint64_t)m->M * (sizeof(struct writer) + sizeof(struct reader));
}

int farm_txm_replace_peer(farm_txm *m, uint32_t id, uint32_t inc,
                          const farm_mr_desc *logs)
{
	if (!m || !logs || id >= m->M || id == m->me)
		return -EINVAL;
	if (logs->len != m->hdr_area + (uint64_t)m->M * m->T * m->R)
		return -EINVAL;
	pthread_mutex_lock(&m->peer_lock);
	bool ready = atomic_load(&m->peer_ready[id]);
	if (ready) {
		/* The new holder is live; the old one's records (if any)
		 * stay recovery's (reader_dead: their reader's incarnation). */
		pthread_mutex_lock(&m->rec.lock);
		m->rec.inc[id] = inc;
		pthread_mutex_unlock(&m->rec.lock);
		/* A loop that has not forgotten the peer yet may read the
		 * descriptor meanwhile: its WRITEs then reach the new logs
		 * at old positions, which the new holder's reader never
		 * takes (a record's trailer holds its position). */
		m->peers[id] = *logs;
		m->peers[id].machine = id;
	}
	pthread_mutex_unlock(&m->peer_lock);
	return ready ? 0 : farm_txm_add_peer(m, id, inc, logs);
}

void farm_txm_set_incarnation(farm_txm *m, uint32_t inc)
{
	if (m)
		atomic_store_explicit(&m->self_inc, inc, memory_order_relaxed);
}

void farm_txm_set_removed(farm_txm *m)
{
	if (m)
		atomic_store_explicit(&m->removed, true, memory_order_relaxed);
}

/* Loop @tl's transaction state of @coord's transactions: their ids come
 * again from a new holder (they are machine, thread and a sequence that
 * starts afresh), so what is left of the old holder's goes. */
static void forget_txids(struct txloop *tl, uint32_t coord)
{
	for (unsigned b = 0; b < LOCK_BUCKETS; b++) {
		for (struct lock_ent **pp = &tl->locks[b]; *pp;) {
			struct lock_ent *e = *pp;
			if (txid_machine(e->txid) != coord) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			free(e);
		}
		for (struct abort_ent **pp = &tl->aborts[b]; *pp;) {
			struct abort_ent *e = *pp;
			if (txid_machine(e->txid) != coord) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			free(e);
		}
	}
}

void farm_txn_log_reopen(struct txloop *tl, uint32_t coord)
{
	farm_txm *m = tl->m;
	struct reader *rd = &tl->r[coord];
	uint64_t inc = rd->next_inc;
	uint64_t li = log_index(m, coord, tl->t);
	forget_txids(tl, coord);
	/* Whatever the old holder left (records recovery zeroed, one cut
	 * off in flight, which a new record at its position could complete
	 * by its trailer) goes, before the new holder may write. */
	memset(m->logbase + log_ring_off(m, li), 0, m->R);
	*rd = (struct reader){.inc = inc};
	atomic_store_explicit(
	        (_Atomic uint64_t *)(void *)(m->logbase + log_hdr_off(m, li)),
	        0, memory_order_relaxed);
	/* Release: pairs with the acquire in the new holder's READ
	 * (freed_read_done): the zeroed ring and freed word before it
	 * writes. */
	atomic_store_explicit(open_word(m, coord, tl->t), inc,
	                      memory_order_release);
	farm_txn_log_mark_pending(m, coord, tl->t, true);
	farm_info("txn: log of machine %" PRIu32 " thread %u opened to its "
	          "holder of incarnation %" PRIu64,
	          coord, tl->t, inc);
}

int farm_txm_forget_peer(farm_txm *m, farm_loop *loop, uint32_t id)
{
	if (!m || !loop || id >= m->M || id == m->me)
		return -EINVAL;
	unsigned t = farm_loop_index(loop);
	struct txloop *tl = t < m->T ? m->loops[t] : NULL;
	if (!tl || tl->loop != loop)
		return -EINVAL;
	/* Our log there: the new holder's is empty. Commits that reserved
	 * room in the old one release it (reserved stays); a READ of the
	 * old freed word that completes later is above the new tail and
	 * ignored (freed_read_done). */
	struct writer *w = &tl->w[id];
	w->tail = w->freed = w->sent_trunc = 0;
	w->wq_head = w->wq_tail = 0;
	w->reading = false;
	w->pace_ns = 0; /* a deferred READ still goes (read_at) */
	w->read_ok_at = 0;
	w->open = false;
	w->backed = false; /* the new holder's logs are new memory */
	/* Its log here: the new holder's records go where the old holder's
	 * were, so the log opens to it (its header's open word) only once
	 * recovery has decided the old holder's and zeroed them
	 * (farm_txn_log_reopen, now or at recovery's REC_DONE). Until then
	 * the new holder's commits wait for room (farm_txn_writer_open),
	 * and the reader stays the old holder's: recovery reads it. */
	struct reader *rd = &tl->r[id];
	pthread_mutex_lock(&m->rec.lock);
	rd->next_inc = m->rec.inc[id];
	bool removed = id < m->M && m->rec.gone[id] > rd->inc;
	pthread_mutex_unlock(&m->rec.lock);
	if (rd->next_inc <= rd->inc)
		return 0; /* not a new holder: nothing to reopen */
	_Atomic uint32_t *first =
	        (_Atomic uint32_t *)(void *)(m->logbase +
	                                     log_ring_off(m,
	                                                  log_index(m, id, t)));
	/* The first word of the record at the log's start. No release
	 * store pairs with this acquire: a WRITE stores a record's first
	 * word relaxed (write_ordered, fabric/shm_data.c), records are
	 * zeroed on this loop's thread (truncate_to, recovery's emptying,
	 * farm_txn_log_reopen), and only whether the word is zero matters
	 * here: nothing is read after it. */
	bool empty = rd->head == 0 &&
	             !atomic_load_explicit(first, memory_order_acquire);
	/* An empty log of a removed holder that no round emptied: voted
	 * as emptied in later rounds, for the survivors still at it. */
	if (empty && !rd->rec_done && removed)
		farm_txn_rec_kept_done(tl, id, rd->lw);
	if (rd->rec_done || empty || FARM_FAULT_SWITCH(FARM_FP_TXN_NO_HANDOFF))
		farm_txn_log_reopen(tl, id);
	else
		rd->reopen = true;
	return 0;
}

int farm_txm_attach(farm_txm *m, farm_loop *loop)
{
	if (!m || !loop)
		return -EINVAL;
	unsigned t = farm_loop_index(loop);
	if (t >= m->T || m->loops[t])
		return -EINVAL;
	struct txloop *tl = calloc(1, sizeof(*tl));
	if (!tl)
		return -ENOMEM;
	tl->m = m;
	tl->loop = loop;
	tl->t = t;
	tl->lst = &m->lst[t];
	tl->rand = farm_now_ns() ^ ((uint64_t)m->me << 32) ^ t;
	tl->slots = calloc(TX_SLOTS, sizeof(*tl->slots));
	tl->w = calloc(m->M, sizeof(*tl->w));
	tl->r = calloc(m->M, sizeof(*tl->r));
	tl->cs_done = calloc(CS_RING, 1);
	tl->cs_next = tl->cs_low = 1;
	int rc = tl->slots && tl->w && tl->r && tl->cs_done ? 0 : -ENOMEM;
	if (!rc) {
		tl->ar.size = m->arena_size;
		tl->ar.base = aligned_alloc(4096, tl->ar.size);
		rc = tl->ar.base ? farm_mr_reg(m->fab, tl->ar.base, tl->ar.size,
		                               FARM_ACCESS_LOCAL, &tl->ar.mr)
		                 : -ENOMEM;
	}
	bool entered = false;
	if (!rc && !(rc = farm_epoch_thread_enter(loop)))
		entered = true;
	if (!rc)
		rc = farm_loop_add_poller(loop, txn_poll_all, farm_txn_pending,
		                          tl);
	if (rc) {
		if (entered)
			farm_epoch_thread_leave(loop);
		if (tl->ar.mr)
			farm_mr_dereg(tl->ar.mr);
		free(tl->ar.base);
		for (uint32_t i = 0; tl->w && i < m->M; i++)
			free(tl->w[i].wq);
		free(tl->w);
		free(tl->r);
		free(tl->cs_done);
		free(tl->slots);
		free(tl);
		return rc;
	}
	/* Under rec.lock: the membership's thread posts a new
	 * configuration to every attached loop (rec_post_loops). */
	pthread_mutex_lock(&m->rec.lock);
	m->loops[t] = tl;
	pthread_mutex_unlock(&m->rec.lock);
	/* Relaxed: a count farm_txm_memory reads. */
	atomic_fetch_add_explicit(&m->loop_bytes, loop_table_bytes(m),
	                          memory_order_relaxed);
	rc = farm_txn_datarec_attach(m, tl);
	if (rc) /* the machine runs; this loop copies nothing */
		farm_warn("txn: loop %u: no data recovery: %s", t,
		          farm_strerror(rc));
	return 0;
}

/* The loop leaves the table under rec.lock: once this returns the
 * membership's thread posts it no configuration (rec_post_loops), so it
 * never reads @tl, which the caller frees, nor the loop, which its close
 * frees. A post that came before is run, cancelled, by that close. */
static void txm_unpublish_loop(farm_txm *m, struct txloop *tl)
{
	pthread_mutex_lock(&m->rec.lock);
	m->loops[tl->t] = NULL;
	pthread_mutex_unlock(&m->rec.lock);
}

void farm_txm_detach(farm_txm *m, farm_loop *loop)
{
	struct txloop *tl = loop_state(m, loop);
	if (!tl)
		return;
	farm_txn_datarec_detach(m, tl);
	/* Completions of log WRITEs (a commit is reported at its first
	 * COMMIT-PRIMARY; TRUNC records) and freed-word READs still to come
	 * use this state: let them land first. The loop's close would run
	 * them (cancelled) after we freed it. A READ deferred by pacing
	 * (farm_txn_pace_reads) is one still to go: its commit waits on it. */
	uint64_t dl = farm_now_ns() + 2000000000ull;
	while ((tl->inflight || tl->npaced) && farm_now_ns() < dl)
		(void)farm_loop_poll(loop);
	/* So do the completions of a transaction still open (one committing
	 * with a participant that died, say): the close runs them too. */
	unsigned open = 0;
	for (unsigned i = 0; i < TX_SLOTS; i++)
		open += tl->slots[i] != NULL;
	if (tl->inflight || open) {
		farm_warn("txn: loop %u detached with %u log operations in "
		          "flight and %u transactions open: its state is "
		          "leaked",
		          tl->t, tl->inflight, open);
		txm_unpublish_loop(m, tl);
		farm_epoch_thread_leave(loop);
		return;
	}
	for (unsigned b = 0; b < LOCK_BUCKETS; b++) {
		while (tl->locks[b]) {
			struct lock_ent *e = tl->locks[b];
			tl->locks[b] = e->next;
			free(e);
		}
		while (tl->aborts[b]) {
			struct abort_ent *e = tl->aborts[b];
			tl->aborts[b] = e->next;
			free(e);
		}
	}
	farm_txn_rec_detach(tl);
	txm_unpublish_loop(m, tl);
	while (tl->rd_free_list) {
		struct rd_op *op = tl->rd_free_list;
		tl->rd_free_list = op->next_free;
		free(op);
	}
	while (tl->tx_free_list) {
		farm_tx *tx = tl->tx_free_list;
		tl->tx_free_list = tx->next_free;
		farm_txn_tx_pool_drop(tx);
	}
	free(tl->sync_spare);
	farm_mr_dereg(tl->ar.mr);
	free(tl->ar.base);
	uint64_t bytes = loop_table_bytes(m);
	for (uint32_t i = 0; i < m->M; i++) {
		bytes += tl->w[i].wq_cap * sizeof(struct wq_ent);
		free(tl->w[i].wq);
	}
	/* Relaxed: a count farm_txm_memory reads. */
	atomic_fetch_sub_explicit(&m->loop_bytes, bytes, memory_order_relaxed);
	free(tl->w);
	free(tl->r);
	free(tl->cs_done);
	free(tl->slots);
	free(tl);
	farm_epoch_thread_leave(loop);
}

void farm_txm_stats_read(farm_txm *m, farm_txm_stats *out, size_t size)
{
	if (!m || !out)
		return;
	/* Each counter is the shared one plus every loop index's (txl_count;
	 * a loop attaches only below T; a counter orders nothing, so relaxed,
	 * util/stat.h). */
	uint64_t v[S_NSTATS];
	for (int i = 0; i < S_NSTATS; i++) {
		v[i] = atomic_load_explicit(&m->st.v[i], memory_order_relaxed);
		for (unsigned k = 0; k < m->T; k++)
			v[i] += atomic_load_explicit(&m->lst[k].v[i],
			                             memory_order_relaxed);
	}
	farm_txm_stats s = {.commits = v[S_COMMITS],
	                    .commits_single = v[S_COMMITS_SINGLE],
	                    .aborts_conflict = v[S_AB_CONFLICT],
	                    .aborts_validation = v[S_AB_VALIDATION],
	                    .aborts_failure = v[S_AB_FAILURE],
	                    .aborts_nospace = v[S_AB_NOSPACE],
	                    .aborts_freed = v[S_AB_FREED],
	                    .lf_reads = v[S_LF_READS],
	                    .lf_retries = v[S_LF_RETRIES],
	                    .tx_reads = v[S_TX_READS],
	                    .commit_writes = v[S_C_WRITES],
	                    .commit_reads = v[S_C_READS],
	                    .commit_msgs = v[S_C_MSGS],
	                    .log_full = v[S_LOG_FULL],
	                    .truncates = v[S_TRUNCATES],
	                    .locks_granted = v[S_LOCKS_OK],
	                    .locks_refused = v[S_LOCKS_REFUSED],
	                    .installs = v[S_INSTALLS],
	                    .backup_applies = v[S_BACKUP_APPLIES],
	                    .bad_records = v[S_BAD_RECORDS],
	                    .epochs = v[S_EPOCHS],
	                    .epochs_failed = v[S_EPOCHS_FAILED],
	                    .epoch_blocks_reclaimed = v[S_EPOCH_RECLAIMED],
	                    .stale_refused = v[S_STALE_REFUSED],
	                    .backup_skipped = v[S_BACKUP_SKIPPED],
	                    .backup_nocopy = v[S_BACKUP_NOCOPY],
	                    .rec_committed = v[S_REC_COMMITTED],
	                    .rec_aborted = v[S_REC_ABORTED],
	                    .rec_locks = v[S_REC_LOCKS],
	                    .rec_promoted = v[S_REC_PROMOTED],
	                    .rec_refused = v[S_REC_REFUSED],
	                    .rec_t_config_ns = atomic_load(&m->rec.t_config),
	                    .rec_t_go_ns = atomic_load(&m->rec.t_go),
	                    .rec_t_active_ns = atomic_load(&m->rec.t_active),
	                    .trunc_unfinished = v[S_TRUNC_UNFINISHED],
	                    .lock_waits_ended = v[S_LOCK_WAITS_ENDED],
	                    .free_failed = v[S_FREE_FAILED],
	                    .free_deferred = v[S_FREE_DEFERRED],
	                    .block_notes = v[S_BLOCK_NOTES],
	                    .block_note_errors = v[S_BLOCK_NOTE_ERRORS],
	                    .rec_decided_unlocked = v[S_REC_DEC_UNLOCKED]};
	struct farm_galloc_stats gs;
	farm_galloc_stats(m->ga, &gs);
	s.rec_adopted = gs.adopted;
	s.rec_adopt_failed = gs.adopt_failed;
	s.rec_adopt_ns = gs.adopt_ns;
	s.rec_adopt_max_ns = gs.adopt_max_ns;
	s.deferred_lost = gs.deferred_lost;
	farm_txn_datarec_sums(m, &s);
	farm_stats_copy(out, size, &s, sizeof(s));
}

_Atomic uint64_t *farm_txm_serve_word(farm_txm *m)
{
	return m ? &m->serve_until : NULL;
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

int farm_txm_testing_sizes(const farm_txm *m,
                           struct farm_txm_testing_sizes *out)
{
	if (!m || !out)
		return -EINVAL;
	/* From the types, not from the counts farm_txm_memory adds: the
	 * test compares the two. */
	out->ids = m->M;
	out->tables =
	        (uint64_t)m->M * (sizeof(*m->peers) + sizeof(*m->peer_ready)) +
	        sizeof(struct txloop) +
	        (uint64_t)m->M *
	                (sizeof(struct writer) + sizeof(struct reader));
	out->queue = WQ_CAP * sizeof(struct wq_ent);
	return 0;
}
