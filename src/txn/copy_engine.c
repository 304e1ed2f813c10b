/*
 * Data recovery's engine and life cycle (copy.c describes the whole; its
 * opening comment, "The copy", has the pace). One thread per machine,
 * parked while there is nothing to do: it opens the copies COPY asked for
 * (copy_note.c), gives back stale sources no step reads (copy_summary.c),
 * tells the node of a copy completed after its configuration's round
 * began (farm_txm_datarec_on_unserved), resends COPY, and gives each loop
 * its credit per interval, posting a step (farm_txn_dr_step_run, copy.c)
 * to each loop that has none in flight. The life cycle: init (the
 * handlers), each loop's attach (its READ buffer; the first starts the
 * thread) and detach, fini, and the reports and settings
 * (farm_txm_datarec_get, _hold, _on_unserved, _pace).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "alloc/alloc.h"
#include "txn/txn_int.h"
#include "txn/copy_int.h"
#include "util/rt.h"

/* ---- the engine thread ----------------------------------------------- */

/* Copies are held (no new READs, no credit) while farm_txm_datarec_hold
 * says so, or in the odd windows of datarec_hold_ms: a measurement's A/B
 * switch, read at each tick and step; relaxed, since a step taken just
 * before a change is harmless either way. */
bool farm_txn_dr_held(struct farm_datarec *dr, uint64_t now)
{
	if (atomic_load_explicit(&dr->hold, memory_order_relaxed))
		return true;
	return dr->hold_ns && (now / dr->hold_ns) % 2 == 1;
}

static bool has_work(struct farm_datarec *dr)
{
	if (dr->nn || dr->opens)
		return true;
	for (unsigned i = 0; i < dr->nst; i++)
		if (dr->st[i].done)
			return true;
	for (unsigned i = 0; i < dr->nr; i++)
		if (dr->r[i].state < DR_DONE)
			return true;
	return false;
}

/* When every copy in progress waits to read a bad block table or a
 * stuck object again (copy_retry.c) and no COPY is due: the earliest
 * time one may step again, until which the engine parks rather than
 * ticking. 0: a copy can step now, or a COPY is due (resent on the
 * tick). Under dr->lock. */
static uint64_t all_wait_until(const struct farm_datarec *dr, uint64_t now)
{
	if (dr->nn || dr->opens)
		return 0;
	uint64_t until = UINT64_MAX;
	for (unsigned i = 0; i < dr->nr; i++) {
		const struct dr_reg *g = &dr->r[i];
		if (g->state >= DR_DONE)
			continue;
		uint64_t due = farm_txn_dr_due(g);
		if (due <= now)
			return 0;
		until = FARM_MIN(until, due);
	}
	return until == UINT64_MAX ? 0 : until;
}

/* The costly part of a copy's open, the making of its region, at the
 * lowest priority; nothing else: the rest takes locks the loops take
 * (the address space's, dr->lock), and a holder at nice 19 preempted by
 * spinning loops would stall them in turn. */
static void *make_low(void *arg)
{
	struct dr_open *o = arg;
	(void)farm_thread_set_lowest();
	farm_as *as = o->m->as;
	if (farm_region_create(farm_as_fabric(as), farm_as_region_size(as),
	                       &o->made))
		o->made = NULL; /* made at the open, as before */
	return NULL;
}

/* Under dr->lock: open one copy a COPY waits for, before the pace.
 * Whether there was one. The open makes a region: on tmpfs every page of
 * it allocated (posix_fallocate), about 10 ms of CPU for 64 MiB, just as
 * the survivors' loops come back from a recovery, and on a 2-core host
 * it took the CPU from them for that long. Only the COPY's answer waits
 * for it (the copy is paced background work anyway), so the making runs
 * at the lowest priority, on a thread of its own (a thread that lowered
 * its priority may not raise it again), joined here, and the rest of the
 * open here; all of it here when no thread can be made. */
static bool open_one(struct farm_datarec *dr)
{
	struct dr_open *o = dr->opens;
	if (!o)
		return false;
	dr->opens = o->next;
	pthread_mutex_unlock(&dr->lock);
	pthread_t th;
	if (!farm_as_local_region(dr->m->as, o->region, NULL) &&
	    pthread_create(&th, NULL, make_low, o) == 0)
		(void)pthread_join(th, NULL);
	farm_txn_dr_open_run(o);
	pthread_mutex_lock(&dr->lock);
	return true;
}

/* Each loop's credit for the time that passed (@add bytes) and, to each
 * loop with no step in flight, a step of a copy of its that may step now
 * (one in backoff waits: copy_retry.c), within the credit. Under
 * dr->lock. */
static void post_steps(struct farm_datarec *dr, uint64_t now_ns, int64_t add)
{
	farm_txm *m = dr->m;
	for (unsigned t = 0; t < m->T && t < MAX_LOOPS; t++) {
		struct dr_loop *lp = &dr->lp[t];
		lp->credit = FARM_MIN(lp->credit + add,
		                      (int64_t)DR_BURST * dr->bytes);
		if (lp->busy || !lp->loop)
			continue;
		for (unsigned k = 0; k < dr->nr; k++) {
			struct dr_reg *g = &dr->r[(lp->rr + k) % dr->nr];
			if (g->loop != t || g->state >= DR_DONE ||
			    farm_txn_dr_due(g) > now_ns)
				continue;
			/* A copy from our demoted copy reads no
			 * one's memory: no credit needed. */
			if (lp->credit <= 0 &&
			    (g->remote ||
			     !farm_as_demoted_source(m->as, g->id)))
				continue;
			struct dr_step *s = calloc(1, sizeof(*s));
			if (!s)
				break;
			*s = (struct dr_step){.dr = dr,
			                      .region = g->id,
			                      .loop = t,
			                      .budget = lp->credit};
			lp->busy = true;
			lp->region = g->id;
			lp->rr = (lp->rr + k + 1) % dr->nr;
			if (farm_loop_post(lp->loop, farm_txn_dr_step_run, s)) {
				lp->busy = false;
				free(s);
			}
			break;
		}
	}
}

static void *engine(void *arg)
{
	struct farm_datarec *dr = arg;
	struct timespec next;
	/* Copies are paced background work: never ahead of the loops. */
	(void)farm_thread_set_normal();
	clock_gettime(CLOCK_MONOTONIC, &next);
	uint64_t last = farm_now_ns(); /* credit given up to here */
	pthread_mutex_lock(&dr->lock);
	while (!dr->stop) {
		if (open_one(dr) || farm_txn_dr_stale_reap(dr))
			continue;
		if (dr->unserved) {
			uint64_t cfg = dr->unserved;
			dr->unserved = 0;
			farm_txm_unserved_fn fn = dr->on_unserved;
			void *ctx = dr->unserved_ctx;
			pthread_mutex_unlock(&dr->lock);
			if (fn)
				fn(ctx, cfg);
			pthread_mutex_lock(&dr->lock);
			continue;
		}
		if (!has_work(dr)) {
			pthread_cond_wait(&dr->cond, &dr->lock);
			clock_gettime(CLOCK_MONOTONIC, &next);
			last = farm_now_ns();
			continue;
		}
		farm_txn_dr_notes_post(dr, farm_now_ns());
		/* At most one step in flight per loop, each within the
		 * loop's credit: the pace. */
		/* Credit for the time that passed, not per wake-up: a
		 * thread that wakes late (a busy host) loses no pace. */
		uint64_t now_ns = farm_now_ns();
		int64_t add =
		        (int64_t)((double)dr->bytes * (double)(now_ns - last) /
		                  ((double)dr->interval_us * 1000.0));
		last = now_ns;
		if (!farm_txn_dr_held(dr, now_ns))
			post_steps(dr, now_ns, add);
		uint64_t until = all_wait_until(dr, farm_now_ns());
		if (until) {
			/* Parked (dr->cond's clock is CLOCK_MONOTONIC, as
			 * farm_now_ns): a COPY or stop signals it. */
			struct timespec ts = {
			        .tv_sec = (time_t)(until / 1000000000ull),
			        .tv_nsec = (long)(until % 1000000000ull)};
			(void)pthread_cond_timedwait(&dr->cond, &dr->lock, &ts);
			clock_gettime(CLOCK_MONOTONIC, &next);
			continue;
		}
		next.tv_nsec += (long)dr->interval_us * 1000;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		/* The pace, not a synchronisation: wake at the next tick
		 * (or at once on stop). */
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec ||
		    (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
			next = now; /* late: no burst to catch up */
		pthread_mutex_unlock(&dr->lock);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next,
		                       NULL) == EINTR)
			;
		pthread_mutex_lock(&dr->lock);
	}
	pthread_mutex_unlock(&dr->lock);
	return NULL;
}

/* ---- life cycle ------------------------------------------------------ */

int farm_txn_datarec_init(farm_txm *m, uint32_t bytes, uint32_t interval_us,
                          uint32_t hold_ms)
{
	struct farm_datarec *dr = calloc(1, sizeof(*dr));
	if (!dr)
		return -ENOMEM;
	dr->m = m;
	dr->bytes = bytes ? bytes : FARM_DATAREC_DEFAULT_BYTES;
	dr->interval_us =
	        interval_us ? interval_us : FARM_DATAREC_DEFAULT_INTERVAL_US;
	dr->hold_ns = (uint64_t)hold_ms * 1000000ull;
	dr->region_size = farm_as_region_size(m->as);
	dr->meta_bytes = farm_alloc_meta_bytes(dr->region_size);
	if (pthread_mutex_init(&dr->lock, NULL)) {
		free(dr);
		return -ENOMEM;
	}
	/* Monotonic: the engine parks on it until a bad block table's
	 * re-read is due (farm_now_ns's clock). */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&dr->cond, &ca);
	pthread_condattr_destroy(&ca);
	/* As many chunks as an answer (a word, then one a chunk) fits. */
	uint32_t maxp = farm_msg_max_payload(m->msg);
	dr->dg_max = maxp >= 16 ? FARM_MIN(maxp / 8 - 1, DR_DIGEST_MAX) : 0;
	int rc = farm_msg_handle(m->msg, FARM_MSGT_TX_COPY, farm_txn_dr_h_copy,
	                         m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_TX_DIGEST,
		                     farm_txn_dr_h_digest, m);
	if (rc) {
		pthread_cond_destroy(&dr->cond);
		pthread_mutex_destroy(&dr->lock);
		free(dr);
		return rc;
	}
	m->dr = dr;
	return 0;
}

int farm_txn_datarec_attach(farm_txm *m, struct txloop *tl)
{
	struct farm_datarec *dr = m->dr;
	if (!dr || tl->t >= MAX_LOOPS)
		return 0;
	struct dr_loop *lp = &dr->lp[tl->t];
	size_t cap =
	        FARM_MAX((size_t)dr->bytes * DR_BURST, (size_t)DR_MAX_SPAN);
	cap = FARM_MAX(cap, (size_t)dr->meta_bytes);
	cap = (cap + 4095) & ~(size_t)4095;
	uint8_t *buf = aligned_alloc(4096, cap);
	farm_mr *mr = NULL;
	if (!buf)
		return -ENOMEM;
	int rc = farm_mr_reg(m->fab, buf, cap, FARM_ACCESS_LOCAL, &mr);
	if (rc) {
		free(buf);
		return rc;
	}
	pthread_mutex_lock(&dr->lock);
	lp->buf = buf;
	lp->cap = cap;
	lp->mr = mr;
	lp->loop = tl->loop;
	if (!dr->started && !dr->stop) {
		rc = pthread_create(&dr->thr, NULL, engine, dr) ? -EAGAIN : 0;
		dr->started = !rc;
	}
	pthread_mutex_unlock(&dr->lock);
	return rc;
}

void farm_txn_datarec_detach(farm_txm *m, struct txloop *tl)
{
	struct farm_datarec *dr = m->dr;
	if (!dr)
		return;
	pthread_mutex_lock(&dr->lock);
	bool join = dr->started && !dr->stop;
	dr->stop = true;
	pthread_cond_broadcast(&dr->cond);
	pthread_mutex_unlock(&dr->lock);
	if (join)
		pthread_join(dr->thr, NULL);
	if (tl->t >= MAX_LOOPS)
		return;
	/* A step posted to this loop or a READ of it in flight: let it end
	 * (the loop's close would run it cancelled after the buffer went). */
	uint64_t dl = farm_now_ns() + 2000000000ull;
	for (;;) {
		pthread_mutex_lock(&dr->lock);
		bool busy = dr->lp[tl->t].busy;
		pthread_mutex_unlock(&dr->lock);
		if (!busy || farm_now_ns() > dl)
			break;
		(void)farm_loop_poll(tl->loop);
	}
	struct dr_loop *lp = &dr->lp[tl->t];
	pthread_mutex_lock(&dr->lock);
	lp->loop = NULL;
	pthread_mutex_unlock(&dr->lock);
	if (lp->mr)
		farm_mr_dereg(lp->mr);
	free(lp->buf);
	lp->mr = NULL;
	lp->buf = NULL;
}

void farm_txn_datarec_fini(farm_txm *m)
{
	struct farm_datarec *dr = m->dr;
	if (!dr)
		return;
	for (unsigned i = 0; i < dr->nr; i++)
		free(dr->r[i].meta);
	/* The engine stopped and every loop detached: no step reads one. */
	for (unsigned i = 0; i < dr->nst; i++)
		if (dr->st[i].release)
			dr->st[i].release(dr->st[i].ctx, dr->st[i].region,
			                  dr->st[i].base);
	free(dr->st);
	/* COPYs the stopped engine did not open: the primary asks again. */
	while (dr->opens) {
		struct dr_open *o = dr->opens;
		dr->opens = o->next;
		free(o);
	}
	free(dr->r);
	free(dr->nt);
	pthread_cond_destroy(&dr->cond);
	pthread_mutex_destroy(&dr->lock);
	free(dr);
	m->dr = NULL;
}

unsigned farm_txm_datarec_get(farm_txm *m, struct farm_datarec_region *out,
                              unsigned max)
{
	struct farm_datarec *dr = m ? m->dr : NULL;
	if (!dr)
		return 0;
	pthread_mutex_lock(&dr->lock);
	unsigned n = dr->nr;
	for (unsigned i = 0; i < n && i < max && out; i++) {
		const struct dr_reg *g = &dr->r[i];
		out[i] = (struct farm_datarec_region){
		        .region = g->id,
		        .state = g->state == DR_COPY    ? FARM_DATAREC_COPYING
		                 : g->state == DR_CHECK ? FARM_DATAREC_CHECKING
		                 : g->state == DR_DONE  ? FARM_DATAREC_DONE
		                                        : FARM_DATAREC_LOST,
		        .bytes = g->bytes,
		        .local = g->local,
		        .stale = g->from_stale,
		        .reads = g->steps,
		        .retries = g->retries,
		        .fixed = g->fixed,
		        .summary = g->summary,
		        .equal = g->equal,
		        .inferred = g->inferred,
		        .t_start_ns = g->t_start,
		        .t_done_ns = g->t_done,
		        .last_err = g->last_err};
	}
	pthread_mutex_unlock(&dr->lock);
	return n;
}

void farm_txn_datarec_sums(farm_txm *m, farm_txm_stats *out)
{
	struct farm_datarec *dr = m->dr;
	if (!dr)
		return;
	pthread_mutex_lock(&dr->lock);
	for (unsigned i = 0; i < dr->nr; i++) {
		const struct dr_reg *g = &dr->r[i];
		out->datarec_bytes += g->bytes;
		if (g->state == DR_DONE)
			out->datarec_done++;
		else if (g->state == DR_LOST)
			out->datarec_lost++;
		else
			out->datarec_copying++;
	}
	out->datarec_stalled = dr->stalled;
	out->datarec_stuck_reads = dr->stuck_reads;
	pthread_mutex_unlock(&dr->lock);
}

void farm_txm_datarec_hold(farm_txm *m, bool hold)
{
	if (m && m->dr) /* read by the engine at its next tick */
		atomic_store_explicit(&m->dr->hold, hold, memory_order_relaxed);
}

void farm_txm_datarec_on_unserved(farm_txm *m, farm_txm_unserved_fn fn,
                                  void *ctx)
{
	struct farm_datarec *dr = m ? m->dr : NULL;
	if (!dr)
		return;
	pthread_mutex_lock(&dr->lock);
	dr->on_unserved = fn;
	dr->unserved_ctx = ctx;
	pthread_mutex_unlock(&dr->lock);
}

void farm_txm_datarec_pace(farm_txm *m, uint32_t *bytes, uint32_t *interval_us)
{
	struct farm_datarec *dr = m ? m->dr : NULL;
	*bytes = dr ? dr->bytes : 0;
	*interval_us = dr ? dr->interval_us : 0;
}
