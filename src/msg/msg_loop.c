/*
 * Messaging: the per-thread event loop. Opening and closing a loop, one
 * pass (farm_loop_poll: deferred work, completions, pollers, inbox, rings,
 * timers, then the flush),
 * one-sided operations for the layers above (farm_loop_rdma) on an
 * endpoint of their own, pollers, and parking when idle. See README.md.
 */
#define _LGPL_SOURCE 1 /* liburcu's wait-free queue, inlined */
#include <errno.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "msg/msg_int.h"
#include "msg/msg_testing.h"
#include "util/log.h"

/* ---- loops --------------------------------------------------------------- */

static void pin_thread(unsigned idx)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	int n = CPU_COUNT(&set);
	if (n <= 0)
		return;
	int want = (int)(idx % (unsigned)n), seen = 0;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (seen++ == want) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			if (pthread_setaffinity_np(pthread_self(), sizeof(one),
			                           &one))
				farm_warn("msg: cannot pin loop %u to CPU %d",
				          idx, c);
			return;
		}
	}
}

static void loop_free(farm_loop *loop)
{
	farm_msg_items_free(loop);
	free(loop->out);
	free(loop->in);
	free(loop->peer_list);
	free(loop->refused_logged);
	free(loop->dirty);
	free(loop->calls);
	free(loop->wrs);
	free(loop->pend_peers);
	free(loop->rb_buf);
	if (loop->mirror_area)
		munmap(loop->mirror_area, loop->mirror_area_len);
	free(loop);
}

/* Address space for every channel's send mirror, reserved, not backed
 * (MAP_NORESERVE): a mirror's pages come as frames are staged in it. */
static int mirror_area_map(farm_loop *loop)
{
	const farm_msg_attr *a = &loop->msg->attr;
	loop->mirror_area_len =
	        (size_t)a->max_machines * a->nthreads * a->ring_size;
	void *p = mmap(NULL, loop->mirror_area_len, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	loop->mirror_area = p;
	/* Small pages: a huge page would back 2 MiB around each mirror. */
	(void)madvise(p, loop->mirror_area_len, MADV_NOHUGEPAGE);
	return 0;
}

int farm_loop_open(farm_msg *msg, unsigned idx, farm_loop **out)
{
	if (!msg || !out || idx >= msg->attr.nthreads)
		return -EINVAL;
	const farm_msg_attr *a = &msg->attr;
	farm_loop *loop = calloc(1, sizeof(*loop));
	if (!loop)
		return -ENOMEM;
	loop->msg = msg;
	loop->idx = idx;
	loop->owner = pthread_self();
	loop->out = calloc(a->max_machines, sizeof(*loop->out));
	loop->in = calloc((size_t)a->max_machines * a->nthreads,
	                  sizeof(*loop->in));
	loop->peer_list = calloc(a->max_machines, sizeof(*loop->peer_list));
	loop->refused_logged =
	        calloc(a->max_machines, sizeof(*loop->refused_logged));
	loop->dirty = calloc((size_t)a->max_machines * a->nthreads,
	                     sizeof(*loop->dirty));
	loop->calls = calloc(a->max_calls, sizeof(*loop->calls));
	loop->wrs = calloc(WR_BATCH + 1, sizeof(*loop->wrs));
	loop->pend_peers = calloc(a->max_machines, sizeof(*loop->pend_peers));
	int rc = -ENOMEM;
	if (!loop->out || !loop->in || !loop->peer_list ||
	    !loop->refused_logged || !loop->dirty || !loop->calls ||
	    !loop->wrs || !loop->pend_peers)
		goto fail;
	for (uint32_t m = 0; m < a->max_machines; m++) {
		for (unsigned t = 0; t < a->nthreads; t++) {
			struct in_chan *c = &loop->in[m * a->nthreads + t];
			c->ring = msg->base + ring_at(&msg->lay, idx, m, t);
			c->seq = 1;
		}
	}
	if ((rc = mirror_area_map(loop)))
		goto fail;
	for (uint32_t i = 0; i < a->max_calls; i++)
		loop->calls[i].next_free = i + 1 < a->max_calls ? i + 1 : NIL;
	loop->free_call = 0;
	loop->active = NIL;
	loop->peer_gen = UINT64_MAX;
	loop->pass = 1;
	loop->park = (_Atomic uint32_t *)(void *)(msg->base +
	                                          park_at(&msg->lay, idx));
	rc = farm_cq_create(msg->fab, 4096, 0, &loop->cq);
	if (rc)
		goto fail;
	pthread_mutex_lock(&msg->lock);
	if (msg->loops[idx]) {
		pthread_mutex_unlock(&msg->lock);
		rc = -EBUSY;
		goto fail;
	}
	msg->loops[idx] = loop;
	pthread_mutex_unlock(&msg->lock);
	if (a->pin)
		pin_thread(idx);
	*out = loop;
	return 0;
fail:
	if (loop->cq && farm_cq_destroy(loop->cq))
		farm_warn("msg: cq_destroy failed");
	loop_free(loop);
	return rc;
}

unsigned farm_loop_index(const farm_loop *loop)
{
	return loop->idx;
}
farm_msg *farm_loop_msg(const farm_loop *loop)
{
	return loop->msg;
}
static void rdma_done(farm_loop *loop, struct rdma_op *o, int status)
{
	if (o->prev)
		o->prev->next = o->next;
	else
		loop->ops = o->next;
	if (o->next)
		o->next->prev = o->prev;
	loop->nops--;
	loop->out[o->machine].rops--;
	farm_op_fn cont = o->cont;
	void *ctx = o->ctx;
	farm_msg_op_put(loop, o);
	cont(loop, ctx, status);
}

/* @op's endpoint for one-sided operations, connected (again) when it has
 * none, failed, or reaches an old holder of the id (rep_old), once the
 * operations outstanding on it have drained (-EAGAIN until then). */
int farm_msg_rep_ready(farm_loop *loop, uint32_t machine, struct out_peer *op)
{
	if (op->rep && (op->rep_old || !farm_ep_usable(op->rep))) {
		if (op->rops)
			return -EAGAIN; /* the failed one's (or the old
			                   holder's) followers drain */
		farm_ep_destroy(op->rep);
		op->rep = NULL;
		op->rep_old = false;
		op->rep_pass = 0;
	}
	if (op->rep)
		return 0;
	return farm_msg_connect(loop, machine, op, &op->rep);
}

/* Ring every doorbell this loop owes (farm_loop_rdma_lazy, and bells of
 * WRITEs posted in a pass). Each goes through the endpoint its WRITEs
 * went through, so it runs after them: FARM_WR_NOTIFY's Dekker with
 * park() (pairs with its store of the park word and full fence) then
 * holds as for a bell in the WRITE's own doorbell. A bell the endpoint
 * refuses is dropped as rdma_post drops one: the receiver wakes at its
 * next timed check. */
static void ring_owed(farm_loop *loop)
{
	unsigned n = loop->nowed;
	loop->nowed = 0;
	loop->owed_since = 0;
	loop->owed_urgent = false;
	for (unsigned i = 0; i < n; i++) {
		const struct owed_bell *b = &loop->owed[i];
		struct out_peer *op = &loop->out[b->machine];
		if (!op->rep)
			continue; /* forgotten since: a new receiver */
		const farm_mr_desc *pd = &loop->msg->peers[b->machine].desc;
		farm_wr bell = farm_wr_notify(
		        0, pd, park_at(&loop->msg->lay, b->thread));
		farm_wr *bad = NULL;
		if (farm_ep_post(op->rep, &bell, &bad))
			continue; /* dropped, as the comment above says */
	}
}

/* Owe loop @thread of @machine a doorbell (once however many WRITEs);
 * @urgent: at the end of this pass. */
static void owe_bell(farm_loop *loop, uint32_t machine, unsigned thread,
                     bool urgent)
{
	loop->owed_urgent |= urgent;
	for (unsigned i = 0; i < loop->nowed; i++)
		if (loop->owed[i].machine == machine &&
		    loop->owed[i].thread == thread)
			return;
	if (loop->nowed == MAX_OWED_BELLS)
		ring_owed(loop);
	if (!loop->nowed)
		loop->owed_since = farm_now_ns();
	loop->owed[loop->nowed++] =
	        (struct owed_bell){.machine = machine, .thread = thread};
}

/* ---- batched READs ------------------------------------------------------
 *
 * On udp a list posted at once travels as records of one datagram, where
 * READs posted one by one (a KV lookup posts one) take a datagram and a
 * wake-up of the target each. So with batch_reads a READ is queued on its
 * machine's list and the lists are posted at the end of the pass (and at
 * the start of the next, for READs posted between passes): the READs a
 * pass's handlers and continuations issue to one machine share datagrams.
 * Only READs wait: they change nothing, and a request of another kind to
 * that machine posts the list first, so the endpoint's order is the order
 * of the calls. */

#define PEND_MAX 32u /* a session's window of packets (udp) */

#ifdef FARM_FAULT_INJECTION
static atomic_int unordered_batch;

int farm_msg_testing_unordered_batch(int on)
{
	return atomic_exchange(&unordered_batch, on);
}

static bool post_batch_first(void)
{
	return !atomic_load_explicit(&unordered_batch, memory_order_relaxed);
}

static _Atomic uint64_t testing_park_max;

int64_t farm_msg_testing_park_max(uint64_t ns)
{
	return (int64_t)atomic_exchange(&testing_park_max, ns);
}

static uint64_t park_max_ns(void)
{
	uint64_t t =
	        atomic_load_explicit(&testing_park_max, memory_order_relaxed);
	return t ? t : PARK_MAX_NS;
}
#else
int farm_msg_testing_unordered_batch(int on)
{
	(void)on;
	return -ENOTSUP;
}

int64_t farm_msg_testing_park_max(uint64_t ns)
{
	(void)ns;
	return -ENOTSUP;
}

static uint64_t park_max_ns(void)
{
	return PARK_MAX_NS;
}

static bool post_batch_first(void)
{
	return true;
}
#endif

/* Post machine @m's batched READs as one list. Those the endpoint cannot
 * take now (-EAGAIN: its queue is full) stay batched for the next pass;
 * those it refuses otherwise fail at the next pass (loop->failed), so no
 * continuation runs inside the farm_loop_rdma call that flushed. Returns
 * whether READs are still batched. */
static bool flush_peer(farm_loop *loop, uint32_t m)
{
	struct out_peer *op = &loop->out[m];
	if (!op->pend)
		return false;
	farm_wr *bad = NULL;
	int rc = farm_ep_post(op->rep, op->pend, &bad);
	if (!rc)
		bad = NULL;
	else if (!bad)
		bad = op->pend; /* none taken */
	if (rc && rc != -EAGAIN) {
		for (farm_wr *w = bad; w;) {
			struct rdma_op *o =
			        (struct rdma_op *)(uintptr_t)w->wr_id;
			w = w->next;
			o->status = rc;
			o->fnext = loop->failed;
			loop->failed = o;
		}
		bad = NULL;
	}
	unsigned left = 0;
	for (farm_wr *w = bad; w; w = w->next)
		left++;
	op->pend = bad;
	op->npend = left;
	if (!bad)
		op->pend_tail = &op->pend;
	return bad != NULL;
}

/* Post every machine's batched READs. */
static void flush_reads(farm_loop *loop)
{
	unsigned keep = 0;
	for (unsigned i = 0; i < loop->npend_peers; i++) {
		uint32_t m = loop->pend_peers[i];
		if (flush_peer(loop, m))
			loop->pend_peers[keep++] = m;
		else
			loop->out[m].pend_listed = false;
	}
	loop->npend_peers = keep;
}

/* Complete the batched READs whose post failed (inside a pass). */
static int fail_batched(farm_loop *loop)
{
	int n = 0;
	while (loop->failed) {
		struct rdma_op *o = loop->failed;
		loop->failed = o->fnext;
		rdma_done(loop, o, o->status);
		n++;
	}
	return n;
}

/* Queue READ @o on machine @m's list. */
static void batch_read(farm_loop *loop, uint32_t m, struct out_peer *op,
                       struct rdma_op *o)
{
	o->wr.next = NULL;
	if (!op->pend)
		op->pend_tail = &op->pend;
	*op->pend_tail = &o->wr;
	op->pend_tail = &o->wr.next;
	op->npend++;
	if (!op->pend_listed) {
		op->pend_listed = true;
		loop->pend_peers[loop->npend_peers++] = m;
	}
	if (op->npend >= PEND_MAX)
		(void)flush_peer(loop, m); /* a full window: no need to wait */
}

/* Inline in each entry point: farm_loop_rdma's constants (no doorbell,
 * not lazy) then drop the bell's logic from a READ's post. */
static inline __attribute__((always_inline)) int
rdma_post(farm_loop *loop, uint32_t machine, int wake_thread, bool lazy,
          farm_wr *wr, farm_op_fn cont, void *ctx)
{
	if (!farm_msg_rdma_args_ok(loop, machine, wake_thread, wr, cont))
		return -EINVAL;
	struct out_peer *op;
	int rc = farm_msg_peer_rep(loop, machine, &op);
	if (rc)
		return rc;
	struct rdma_op *o = farm_msg_op_get(loop, machine, wr, cont, ctx);
	if (!o)
		return -ENOMEM;
	wr->next = NULL;
	if (loop->msg->batch_reads && wr->opcode == FARM_WR_READ &&
	    wake_thread < 0 && !(wr->flags & FARM_WR_INLINE)) {
		o->wr = *wr;
		farm_msg_ops_link(loop, op, o);
		batch_read(loop, machine, op, o);
		return 0;
	}
	/* After this machine's batched READs, as the calls came. */
	if (op->pend && post_batch_first() && flush_peer(loop, machine)) {
		farm_msg_op_put(loop, o);
		return -EAGAIN; /* its queue is full: as a full queue below */
	}
	farm_wr bell;
	/* Inside a pass, a doorbell waits for the pass's end, so the
	 * WRITEs a pass posts to one loop wake it once: rung one by one,
	 * each wake-up of a receiver sharing our core preempts us before
	 * the next WRITE, and the receiver parks again in between. */
	lazy = lazy && loop->msg->attr.lazy_bell_ns;
	bool owe = wake_thread >= 0 && loop->msg->notify &&
	           (lazy || loop->polling);
	if (wake_thread >= 0 && loop->msg->notify && !owe) {
		/* After the WRITE, in the same doorbell: a parked receiver
		 * wakes and finds it. */
		const farm_mr_desc *pd = &loop->msg->peers[machine].desc;
		bell = farm_wr_notify(
		        0, pd, park_at(&loop->msg->lay, (unsigned)wake_thread));
		wr->next = &bell;
	}
	farm_wr *bad = NULL;
	rc = farm_ep_post(op->rep, wr, &bad);
	if (rc && bad == wr->next)
		rc = 0; /* the request is queued, only its doorbell is not: a
		           parked receiver wakes at its next timed check */
	wr->next = NULL;
	if (rc) {
		farm_msg_op_put(loop, o);
		return rc;
	}
	farm_msg_ops_link(loop, op, o);
	if (owe)
		owe_bell(loop, machine, (unsigned)wake_thread, !lazy);
	return 0;
}

/* The out_peer of machine @m starts afresh: its channels (and their
 * places in the dirty list) freed, its endpoints closed; a one-sided
 * endpoint with operations outstanding is closed once they complete
 * (rdma_post, rep_old). */
static void forget_out(farm_loop *loop, uint32_t m)
{
	farm_msg *msg = loop->msg;
	struct out_peer *op = &loop->out[m];
	/* Batched READs go to the endpoint they were issued for (the old
	 * holder's, outstanding there as if posted before): none is left
	 * behind for a new one. What it cannot take fails. */
	if (flush_peer(loop, m)) {
		for (farm_wr *w = op->pend; w; w = w->next) {
			struct rdma_op *o =
			        (struct rdma_op *)(uintptr_t)w->wr_id;
			o->status = FARM_EPEERDEAD;
			o->fnext = loop->failed;
			loop->failed = o;
		}
		op->pend = NULL;
		op->pend_tail = &op->pend;
		op->npend = 0;
	}
	unsigned keep = 0;
	for (unsigned i = 0; i < loop->ndirty; i++)
		if (loop->dirty[i]->m != m)
			loop->dirty[keep++] = loop->dirty[i];
	loop->ndirty = keep;
	if (op->chans)
		for (unsigned r = 0; r < msg->attr.nthreads; r++) {
			if (op->chans[r]) {
				farm_msg_chan_free(loop, op->chans[r]);
				/* Relaxed: the count farm_msg_memory reads. */
				atomic_fetch_sub_explicit(&loop->mirror_bytes,
				                          msg->lay.R,
				                          memory_order_relaxed);
			}
			op->chans[r] = NULL;
		}
	if (op->ep)
		farm_ep_destroy(op->ep);
	op->ep = NULL;
	op->err = 0;
	op->retry_ns = 0;
	if (op->rep && !op->rops) {
		farm_ep_destroy(op->rep);
		op->rep = NULL;
	}
	op->rep_old = op->rep != NULL;
	op->rep_pass = 0;
}

int farm_loop_forget_peer(farm_loop *loop, uint32_t id)
{
	if (!loop || !on_owner(loop) || id >= loop->msg->attr.max_machines ||
	    id == loop->msg->me)
		return -EINVAL;
	forget_out(loop, id);
	farm_msg_forget_in(loop, id);
	return 0;
}

int farm_loop_rdma(farm_loop *loop, uint32_t machine, farm_wr *wr,
                   farm_op_fn cont, void *ctx)
{
	return rdma_post(loop, machine, -1, false, wr, cont, ctx);
}

int farm_loop_rdma_wake(farm_loop *loop, uint32_t machine, unsigned thread,
                        farm_wr *wr, farm_op_fn cont, void *ctx)
{
	if (thread > INT32_MAX)
		return -EINVAL;
	return rdma_post(loop, machine, (int)thread, false, wr, cont, ctx);
}

int farm_loop_rdma_lazy(farm_loop *loop, uint32_t machine, unsigned thread,
                        farm_wr *wr, farm_op_fn cont, void *ctx)
{
	if (thread > INT32_MAX)
		return -EINVAL;
	return rdma_post(loop, machine, (int)thread, true, wr, cont, ctx);
}

int farm_loop_back(farm_loop *loop, uint32_t machine, const farm_mr_desc *desc,
                   uint64_t offset, uint64_t len)
{
	if (!loop || !desc || machine >= loop->msg->attr.max_machines ||
	    machine == loop->msg->me)
		return -EINVAL;
	struct out_peer *op;
	int rc = farm_msg_peer_ep(loop, machine, &op);
	/* Messaging's endpoint: backing posts nothing, so a failed
	 * one-sided endpoint (rep) need not drain first. */
	return rc ? rc : farm_ep_back(op->ep, desc, offset, len);
}

int farm_loop_add_poller(farm_loop *loop, farm_poll_fn poll,
                         farm_pending_fn pending, void *ctx)
{
	if (!loop || !poll || !pending)
		return -EINVAL;
	if (loop->npollers == MAX_POLLERS)
		return -ENOSPC;
	loop->pollers[loop->npollers++] =
	        (struct poller){.poll = poll, .pending = pending, .ctx = ctx};
	return 0;
}

static int poll_cq(farm_loop *loop)
{
	farm_wc wc[CQ_BATCH];
	int n = farm_cq_poll(loop->cq, CQ_BATCH, wc);
	for (int i = 0; i < n; i++) {
		if (wc[i].wr_id) {
			/* FARM_EFLUSHED: an earlier operation on the endpoint
			 * failed; this one did not run (the caller may retry:
			 * the endpoint is replaced). */
			rdma_done(loop,
			          (struct rdma_op *)(uintptr_t)wc[i].wr_id,
			          wc[i].status);
			continue;
		}
		if (wc[i].status == 0)
			continue;
		struct out_peer *op = &loop->out[wc[i].peer];
		if (!op->err) {
			farm_warn("msg: loop %u: machine %" PRIu32 ": %s",
			          loop->idx, wc[i].peer,
			          farm_strerror(wc[i].status));
			op->err = wc[i].status == FARM_EFLUSHED ? FARM_EPEERDEAD
			                                        : wc[i].status;
		}
	}
	return n > 0 ? n : 0;
}

int farm_loop_defer(farm_loop *loop, farm_work_fn fn, void *ctx)
{
	if (!loop || !fn)
		return -EINVAL;
	struct defer_item *d = loop->dq_free;
	if (d)
		loop->dq_free = d->next;
	else if (!(d = malloc(sizeof(*d))))
		return -ENOMEM;
	d->fn = fn;
	d->ctx = ctx;
	d->next = NULL;
	if (!loop->dq_head)
		loop->dq_tail = &loop->dq_head;
	*loop->dq_tail = d;
	loop->dq_tail = &d->next;
	return 0;
}

/* Run the items deferred before this pass (later ones wait for the next). */
static int run_deferred(farm_loop *loop, int status)
{
	struct defer_item *d = loop->dq_head;
	loop->dq_head = NULL;
	int n = 0;
	while (d) {
		struct defer_item *next = d->next;
		farm_work_fn fn = d->fn;
		void *ctx = d->ctx;
		d->next = loop->dq_free;
		loop->dq_free = d;
		fn(loop, ctx, status);
		d = next;
		n++;
	}
	return n;
}

int farm_loop_poll(farm_loop *loop)
{
	if (!loop || loop->polling)
		return 0;
	loop->polling = true;
	loop->pass++;
	if (loop->npend_peers)
		flush_reads(loop); /* posted between passes */
	int got = loop->failed ? fail_batched(loop) : 0;
	got += loop->dq_head ? run_deferred(loop, 0) : 0;
	farm_msg_refresh_peers(loop);
	got += poll_cq(loop);
	for (unsigned i = 0; i < loop->npollers; i++)
		got += loop->pollers[i].poll(loop, loop->pollers[i].ctx);
	got += farm_msg_poll_inbox(loop, 0);
	/* The rings last, just before the flush: a request's reply (or a
	 * reply's next call) is posted with little run in between, and
	 * everything the pass staged still goes out as one frame per
	 * channel. The scan after them: a reply that is there completes
	 * its call before the call's deadline is checked. */
	got += farm_msg_poll_rings(loop);
	if (loop->nactive && (++loop->ticks % SCAN_EVERY) == 0)
		got += farm_msg_scan_calls(loop, farm_now_ns());
	if (loop->ndirty)
		farm_loop_flush(loop);
	if (loop->hand_back_due)
		farm_msg_hand_back_due(loop);
	if (loop->npend_peers)
		flush_reads(loop);
	if (loop->nowed &&
	    (loop->owed_urgent ||
	     farm_now_ns() - loop->owed_since >= loop->msg->attr.lazy_bell_ns))
		ring_owed(loop);
	loop->polling = false;
	return got;
}

/* Whether anything is waiting for us (checked after raising the park
 * word, so a sender that missed the word is seen here). */
static bool work_pending(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	struct inbox *ib = &msg->inboxes[loop->idx];
	if (loop->self_head || !cds_wfcq_empty(&ib->head, &ib->tail))
		return true;
	unsigned T = msg->attr.nthreads;
	for (unsigned i = 0; i < loop->npeers; i++) {
		uint32_t m = loop->peer_list[i];
		for (unsigned t = 0; t < T; t++) {
			struct in_chan *c = &loop->in[m * T + t];
			if (!c->broken &&
			    wire_load(c->ring + (c->head & (msg->lay.R - 1))))
				return true;
		}
	}
	for (unsigned i = 0; i < loop->npollers; i++)
		if (loop->pollers[i].pending(loop, loop->pollers[i].ctx))
			return true;
	/* Last: a pending() above may have deferred something. */
	return loop->dq_head || atomic_load(&loop->stop) != 0;
}

/* Park until a doorbell, a posted item, or @max_ns. */
static void park(farm_loop *loop, uint64_t max_ns)
{
	if (loop->nowed)
		ring_owed(loop); /* never sleep on a bell owed */
	farm_msg_hand_back_all(loop);
	if (loop->ndirty)
		farm_loop_flush(loop);
	if (loop->ndirty)
		return; /* sends still wait for room: keep polling */
	/* Dekker with farm_msg_inbox_push and farm_loop_stop (pairs with their
	 * full fences): store the park word, full fence, then look for work.
	 * Either a producer sees the word and wakes us, or we see its item. */
	atomic_store_explicit(loop->park, 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	if (!work_pending(loop)) {
		farm_stat_add_owned(&loop->stats.v[S_PARKS], 1);
		farm_wait_word((const uint32_t *)(const void *)loop->park, 1,
		               max_ns);
	}
	atomic_store_explicit(loop->park, 0, memory_order_relaxed);
}

/* After an empty pass: decide whether to park. */
static void idle(farm_loop *loop, uint64_t deadline)
{
	farm_msg *msg = loop->msg;
	uint64_t now = farm_now_ns();
	if (loop->nactive)
		farm_msg_scan_calls(loop, now);
	/* Out of work with bells owed: the caller waits for an answer that
	 * may need the receiver awake (farm_loop_rdma_lazy). */
	if (loop->nowed && !loop->nops)
		ring_owed(loop);
	if (msg->attr.busy_poll || loop->nops) {
		farm_cpu_relax();
		return;
	}
	if (!loop->idle_since) {
		loop->idle_since = now;
		return;
	}
	if (now - loop->idle_since < msg->attr.park_after_ns) {
		farm_cpu_relax();
		return;
	}
	uint64_t max = loop->nactive ? PARK_CALLS_NS : park_max_ns();
	if (loop->wake_at) {
		/* A poller's paced retry is due then: the pass after it
		 * runs the poller. */
		if (now >= loop->wake_at) {
			loop->wake_at = 0;
			return;
		}
		max = FARM_MIN(max, loop->wake_at - now);
	}
	if (deadline) {
		if (now >= deadline)
			return;
		max = FARM_MIN(max, deadline - now);
	}
	park(loop, max);
	loop->idle_since = 0;
}

void farm_loop_run(farm_loop *loop)
{
	if (!loop || loop->polling)
		return;
	/* Acquire: pairs with the release store of stop in farm_loop_stop. */
	while (!atomic_load_explicit(&loop->stop, memory_order_acquire)) {
		if (farm_loop_poll(loop))
			loop->idle_since = 0;
		else
			idle(loop, 0);
	}
	atomic_store(&loop->stop, 0);
}

void farm_loop_stop(farm_loop *loop)
{
	if (!loop)
		return;
	/* The park word lives in the messaging layer's memory, which
	 * outlives the loop; the loop itself may be closed (freed) by its
	 * thread as soon as that thread sees stop, so it is not touched
	 * after the store. Dekker with park(): pairs with its store of the
	 * park word and full fence. */
	_Atomic uint32_t *pw = loop->park;
	atomic_store_explicit(&loop->stop, 1, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(pw))
		farm_wake_word((const uint32_t *)(const void *)pw);
}

int farm_loop_wait(farm_loop *loop, const volatile int *flag,
                   uint64_t timeout_ns)
{
	if (!loop || !flag)
		return -EINVAL;
	if (loop->polling)
		return -EDEADLK; /* from a handler or continuation */
	uint64_t deadline = timeout_ns ? farm_now_ns() + timeout_ns : 0;
	unsigned n = 0;
	/* At least one pass, so a caller looping on an already-set flag
	 * still sends what it queued. */
	for (;;) {
		if (farm_loop_poll(loop))
			loop->idle_since = 0;
		else if (!*flag)
			idle(loop, deadline);
		if (*flag)
			return 0;
		if (deadline && (++n & 63) == 0 && farm_now_ns() >= deadline)
			return *flag ? 0 : -ETIMEDOUT;
	}
}

void farm_loop_wake_by(farm_loop *loop, uint64_t at_ns)
{
	if (loop && at_ns && (!loop->wake_at || at_ns < loop->wake_at))
		loop->wake_at = at_ns;
}

bool farm_loop_can_wait(const farm_loop *loop)
{
	return loop && !loop->polling;
}

int farm_loop_post(farm_loop *loop, farm_work_fn fn, void *ctx)
{
	if (!loop || !fn)
		return -EINVAL;
	struct inbox_item *it = farm_msg_item_new(0);
	if (!it)
		return -ENOMEM;
	it->fn = fn;
	it->ctx = ctx;
	farm_msg_inbox_push(loop->msg, loop->idx, it);
	return 0;
}

void farm_loop_close(farm_loop *loop)
{
	if (!loop)
		return;
	farm_msg *msg = loop->msg;
	if (!on_owner(loop))
		farm_warn("msg: loop %u closed by another thread", loop->idx);
	if (loop->nowed)
		ring_owed(loop); /* its receivers need not wait a timed check */
	while (loop->active != NIL)
		farm_msg_call_done(loop, loop->active, -ECANCELED, NULL, 0);
	/* Batched READs never posted are cancelled with the rest. */
	for (unsigned i = 0; i < loop->npend_peers; i++) {
		struct out_peer *op = &loop->out[loop->pend_peers[i]];
		op->pend = NULL;
		op->npend = 0;
		op->pend_listed = false;
	}
	loop->npend_peers = 0;
	loop->failed = NULL;
	while (loop->ops)
		rdma_done(loop, loop->ops, -ECANCELED);
	while (loop->dq_head)
		(void)run_deferred(loop, -ECANCELED);
	while (loop->dq_free) {
		struct defer_item *d = loop->dq_free;
		loop->dq_free = d->next;
		free(d);
	}
	while (loop->ops_free) {
		struct rdma_op *o = loop->ops_free;
		loop->ops_free = o->next;
		free(o);
	}
	pthread_mutex_lock(&msg->lock);
	msg->loops[loop->idx] = NULL;
	pthread_mutex_unlock(&msg->lock);
	farm_msg_poll_inbox(loop, -ECANCELED);
	for (uint32_t m = 0; m < msg->attr.max_machines; m++) {
		struct out_peer *op = &loop->out[m];
		if (op->chans) {
			for (unsigned r = 0; r < msg->attr.nthreads; r++)
				if (op->chans[r])
					farm_msg_chan_free(loop, op->chans[r]);
			free(op->chans);
		}
		if (op->ep)
			farm_ep_destroy(op->ep);
		if (op->rep)
			farm_ep_destroy(op->rep);
	}
	if (farm_cq_destroy(loop->cq))
		farm_warn("msg: loop %u: cq_destroy failed", loop->idx);
	loop_free(loop);
}
