/*
 * The ofi provider's data path: a request becomes the libfabric
 * operations that carry it (WRITE pieces (a), READ verification (b)),
 * they go in post order as the fences allow (c), and finished requests
 * are retired in order with the bound on an answer (e). The guarantees
 * (a)-(f) are those listed at the head of ofi.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric/ofi_int.h"
#include "util/log.h"

static _Atomic int knob_ordered_writes = 1, knob_line_atomic = 1;
_Atomic int farm_ofi_knob_holder = 1;

int farm_ofi_testing_set(enum farm_ofi_knob knob, int value)
{
	_Atomic int *k =
	        knob == FARM_OFI_KNOB_ORDERED_WRITES ? &knob_ordered_writes
	        : knob == FARM_OFI_KNOB_HOLDER       ? &farm_ofi_knob_holder
	        : knob == FARM_OFI_KNOB_FENCE        ? &farm_ofi_knob_fence
	        : knob == FARM_OFI_KNOB_HEED_FENCE   ? &farm_ofi_knob_heed_fence
	                                             : &knob_line_atomic;
	return atomic_exchange(k, value);
}

/* ---- the data path ----------------------------------------------------- */

static void *ldesc(const struct ofi_fabric *f, farm_mr *lmr)
{
	return f->mr_local && lmr ? ((struct ofi_mr *)lmr)->ldesc : NULL;
}

/* Where libfabric wants the remote address: virtual, or an offset into
 * the registration (its base from the peer's table). */
static uint64_t remote_addr(const struct ofi_ep *ep, uint64_t raddr,
                            uint64_t rkey)
{
	if (ep->fab->virt_addr || !ep->cache)
		return raddr;
	return raddr - ep->cache[rkey & (OFI_TABLE_N - 1)].addr;
}

static int slot_scratch(struct ofi_ep *ep, struct ofi_slot *s)
{
	if (s->scratch)
		return 0;
	s->scratch = aligned_alloc(64, OFI_VERIFY_MAX);
	if (!s->scratch)
		return -ENOMEM;
	if (ep->fab->mr_local &&
	    fi_mr_reg(ep->fab->domain, s->scratch, OFI_VERIFY_MAX, FI_READ, 0,
	              0, 0, &s->scr_mr, NULL)) {
		free(s->scratch);
		s->scratch = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Piece @k of a request, to libfabric. Returns 0, -FI_EAGAIN, or another
 * libfabric error. */
static ssize_t post_piece(struct ofi_ep *ep, struct ofi_slot *s, unsigned k)
{
	struct ofi_fabric *f = ep->fab;
	unsigned pk = k < FARM_ARRAY_SIZE(s->pc) ? k : 0; /* rev8 */
	unsigned kind = s->pc[pk].kind;
	void *ctx = (void *)(uintptr_t)ofi_slot_ctx(ep, s->seq, kind);
	uint32_t off = s->pc[pk].off, len = s->pc[pk].len;
	uint64_t ra = remote_addr(ep, s->raddr, s->rkey) + off;
	uint64_t rk = ofi_rkey(ep, s->rkey);
	uint8_t *lp = (uint8_t *)s->local + off;
	switch (kind) {
	case P_READ:
		if (s->rev8) { /* test-only: word by word, highest first */
			uint32_t o = s->len - 8 * (k + 1);
			return fi_read(f->ep, (uint8_t *)s->local + o, 8,
			               s->ldesc, ep->dest, ra + o, rk, ctx);
		}
		if (k == 1) /* (b): the verification copy */
			return fi_read(f->ep, s->scratch, len,
			               s->scr_mr ? fi_mr_desc(s->scr_mr) : NULL,
			               ep->dest, ra, rk, ctx);
		return fi_read(f->ep, lp, len, s->ldesc, ep->dest, ra, rk, ctx);
	case P_WRITE:
		return fi_write(f->ep, lp, len, s->ldesc, ep->dest, ra, rk,
		                ctx);
	case P_AWRITE:
		return fi_atomic(f->ep, lp, 1, s->ldesc, ep->dest, ra, rk,
		                 FI_UINT64, FI_ATOMIC_WRITE, ctx);
	case P_CAS:
		return fi_compare_atomic(f->ep, &s->swp, 1, ep->slots_desc,
		                         &s->cmp, ep->slots_desc, lp, s->ldesc,
		                         ep->dest, ra, rk, FI_UINT64, FI_CSWAP,
		                         ctx);
	default:
		return fi_send(f->ep, &s->ctl, sizeof(s->ctl), ep->slots_desc,
		               ep->dest, ctx);
	}
}

static void piece(struct ofi_slot *s, unsigned *k, uint32_t off, uint32_t len,
                  unsigned kind)
{
	if (*k >= FARM_ARRAY_SIZE(s->pc)) { /* rev8: every piece alike */
		(*k)++;
		return;
	}
	s->pc[*k].off = off;
	s->pc[*k].len = len;
	s->pc[(*k)++].kind = (uint8_t)kind;
}

/* Split a WRITE (a): the body as one RMA write, then an 8-aligned first
 * word and last word as 8-byte atomic writes (the first only when the
 * WRITE has more than one word). The body completes before the atomics go
 * (they are not ordered with RMA, see order_ok); the two atomics are
 * ordered with each other. Unaligned ends travel inside the body: bytes
 * land in increasing address order, only the tearing of a polled word
 * needs the atomic. */
static unsigned write_pieces(struct ofi_slot *s)
{
	uint32_t n = s->len;
	unsigned k = 0;
	bool ordered = atomic_load_explicit(&knob_ordered_writes,
	                                    memory_order_relaxed);
	if (!ordered && n >= 16 && ((s->raddr + n) & 7) == 0) {
		/* Test-only: the last word lands first, an order libfabric
		 * allows when nothing fences RMA against atomics. */
		piece(s, &k, n - 8, 8, P_AWRITE);
		piece(s, &k, 0, n - 8, P_WRITE);
		return k;
	}
	if (n < 8 || !ordered) {
		piece(s, &k, 0, n, P_WRITE);
		return k;
	}
	bool head = (s->raddr & 7) == 0 && n >= 16;
	bool tail = ((s->raddr + n) & 7) == 0;
	uint32_t b0 = head ? 8 : 0, b1 = tail ? n - 8 : n;
	if (b1 > b0)
		piece(s, &k, b0, b1 - b0, P_WRITE);
	if (head)
		piece(s, &k, 0, 8, P_AWRITE);
	if (tail)
		piece(s, &k, n - 8, 8, P_AWRITE);
	return k;
}

/*
 * Whether a piece of kind @n may go while pieces of kind @i are in flight
 * on the same endpoint: only when the provider orders them (msg_order).
 * tcp;ofi_rxm with atomics grants RMA-RMA (RAR, RAW, WAW) and
 * atomic-atomic (RAR, RAW, WAW) order and anything after a send; not
 * RMA-atomic, not write-after-read, not send-after-anything (NOTIFY after
 * WRITEs). Everything else waits for the in-flight pieces to complete.
 */
static bool order_ok(uint64_t granted, unsigned n, unsigned i)
{
	static const bool rd[P_KINDS] = {1, 0, 0, 1, 0};
	static const bool wr[P_KINDS] = {0, 1, 1, 1, 0};
	bool n_rma = n <= P_WRITE, i_rma = i <= P_WRITE;
	bool n_at = n == P_AWRITE || n == P_CAS;
	bool i_at = i == P_AWRITE || i == P_CAS;
	uint64_t need = 0;
	if (n == P_SEND || i == P_SEND) {
		if (i == P_SEND)
			need |= n == P_SEND
			                ? FI_ORDER_SAS
			                : (rd[n] ? FI_ORDER_RAS : 0) |
			                          (wr[n] ? FI_ORDER_WAS : 0);
		else
			need |= (rd[i] ? FI_ORDER_SAR : 0) |
			        (wr[i] ? FI_ORDER_SAW : 0);
		return (granted & need) == need;
	}
	struct {
		bool on;
		uint64_t all, rma, at;
	} rule[4] = {
	        {rd[n] && rd[i], FI_ORDER_RAR, FI_ORDER_RMA_RAR,
	         FI_ORDER_ATOMIC_RAR},
	        {rd[n] && wr[i], FI_ORDER_RAW, FI_ORDER_RMA_RAW,
	         FI_ORDER_ATOMIC_RAW},
	        {wr[n] && rd[i], FI_ORDER_WAR, FI_ORDER_RMA_WAR,
	         FI_ORDER_ATOMIC_WAR},
	        {wr[n] && wr[i], FI_ORDER_WAW, FI_ORDER_RMA_WAW,
	         FI_ORDER_ATOMIC_WAW},
	};
	for (unsigned r = 0; r < 4; r++) {
		if (!rule[r].on)
			continue;
		bool ok = (granted & rule[r].all) ||
		          (n_rma && i_rma && (granted & rule[r].rma)) ||
		          (n_at && i_at && (granted & rule[r].at));
		if (!ok)
			return false;
	}
	return true;
}

/* (c): may a piece of kind @kind go now? */
static bool may_post(const struct ofi_ep *ep, unsigned kind)
{
	for (unsigned i = 0; i < P_KINDS; i++)
		if (atomic_load_explicit(&ep->inflight[i],
		                         memory_order_relaxed) > 0 &&
		    !order_ok(ep->fab->order, kind, i))
			return false;
	return true;
}

static bool ep_paused(const struct ofi_ep *ep)
{
	return atomic_load(&ep->faults.pause) ||
	       (ep->base.peer < OFI_MAX_PEERS &&
	        atomic_load(&ep->fab->peers[ep->base.peer].faults.pause));
}

/* (b): a line-atomic READ whose first copy is posted and whose second
 * waits for it (farm_ofi_pump posts the second once the first has completed).
 */
static bool verify_waiting(const struct ofi_slot *s)
{
	return s->state == S_POSTED && s->opcode == FARM_WR_READ && !s->rev8 &&
	       s->npieces == 2 && s->posted == 1;
}

/* Hand queued requests to libfabric, in order, as far as it takes them
 * and the order rules allow. */
void farm_ofi_pump(struct ofi_ep *ep)
{
	if (ep_paused(ep))
		return;
	while (ep->next_post != ep->head) {
		struct ofi_slot *s = &ep->slots[ep->next_post & ep->mask];
		if (s->state == S_QUEUED && s->posted == 0 &&
		    ofi_peer_dead(ep)) {
			/* Queued behind requests that found the peer dead. */
			atomic_store(&s->err, FARM_EPEERDEAD);
			s->state = S_DONE;
		}
		while (s->state != S_DONE && s->posted < s->npieces) {
			unsigned kind = s->pc[s->posted < FARM_ARRAY_SIZE(s->pc)
			                              ? s->posted
			                              : 0]
			                        .kind;
			if (!may_post(ep, kind))
				return;
			/* (b): the verification copy goes only once the first
			 * is whole. Issued together, the target's provider may
			 * copy both in pieces, interleaved (a send that does
			 * not fit the socket goes out later), so the two can
			 * be torn alike and agree; copied strictly after the
			 * first, any word the writer changed in between differs
			 * (line versions only grow). The completion kicks the
			 * endpoint (kick_waiting), which pumps it again. */
			/* Acquire: pairs with the release decrement of
			 * pending at completion (ofi.c). */
			if (verify_waiting(s) &&
			    atomic_load_explicit(&s->pending,
			                         memory_order_acquire) > 0)
				return;
			if (!s->started) { /* the bound (e) starts here */
				s->started = true;
				s->posted_ns = farm_now_ns();
			}
			atomic_fetch_add(&s->pending, 1);
			atomic_fetch_add(&s->pend[kind], 1);
			atomic_fetch_add(&ep->inflight[kind], 1);
			s->state = S_POSTED;
			ssize_t rc = post_piece(ep, s, s->posted);
			if (rc == 0) {
				s->posted++;
				continue;
			}
			atomic_fetch_sub(&s->pend[kind], 1);
			atomic_fetch_sub(&ep->inflight[kind], 1);
			atomic_fetch_sub(&s->pending, 1);
			if (s->posted == 0)
				s->state = S_QUEUED;
			if (rc == -FI_EAGAIN && farm_now_ns() - s->posted_ns <
			                                ep->fab->timeout_ns) {
				farm_ofi_drain_try(ep->fab);
				return;
			}
			if (rc == -FI_EAGAIN) {
				/* (e): libfabric refused it for the whole
				 * bound (a peer it cannot reach). */
				rc = -FI_ETIMEDOUT;
				farm_stat_add(&ep->fab->st.timeouts, 1);
			}
			if (map_err((int)-rc) == FARM_EPEERDEAD)
				ofi_peer_kill(ep->fab, ep->base.peer, ep->dest);
			int zero = 0;
			atomic_compare_exchange_strong(&s->err, &zero,
			                               map_err((int)-rc));
			s->state = S_POSTED;
			s->posted = s->npieces;
		}
		if (s->tries == 0)
			farm_stat_add(&ep->fab->st.ops, 1);
		ep->next_post++;
	}
}

/* Check the local buffer against its registration (verbs' LOC_PROT); a
 * request that touches no local memory needs none. */
static bool local_ok(const struct ofi_ep *ep, const farm_wr *wr)
{
	if (wr->len == 0 || wr->opcode == FARM_WR_NOTIFY ||
	    (wr->opcode == FARM_WR_WRITE && (wr->flags & FARM_WR_INLINE)))
		return true;
	return farm_wr_local_ok(&ep->fab->base, wr);
}

static bool line_atomic_on(void)
{
	return atomic_load_explicit(&knob_line_atomic, memory_order_relaxed);
}

/* Copy the request into its slot and reset the slot's progress. */
static void slot_fill(struct ofi_ep *ep, struct ofi_slot *s, const farm_wr *wr)
{
	s->seq = ep->head;
	s->wr_id = wr->wr_id;
	s->opcode = wr->opcode;
	s->flags = wr->flags;
	s->len = wr->len;
	s->local = wr->local;
	s->ldesc = ldesc(ep->fab, wr->lmr);
	s->raddr = wr->raddr;
	s->rkey = wr->rkey;
	s->cmp = wr->compare;
	s->swp = wr->swap;
	s->posted = 0;
	s->tries = 0;
	s->started = false;
	s->posted_ns = farm_now_ns();
	atomic_store(&s->pending, 0);
	for (unsigned k = 0; k < P_KINDS; k++)
		atomic_store(&s->pend[k], 0);
	atomic_store(&s->err, 0);
}

/* A failure known without the peer, in the order verbs would report it:
 * the endpoint's state first, then injected faults, then the request's
 * own buffers and keys. 0 when the request may go. */
static int known_failure(struct ofi_ep *ep, const farm_wr *wr)
{
	if (ep->closed)
		return -ENOTCONN;
	if (ep->err_state || ep->sw_failed)
		return FARM_EFLUSHED;
	if (atomic_load(&ep->fenced))
		return FARM_EFENCED;
	if (ofi_peer_dead(ep))
		return FARM_EPEERDEAD;
	if (atomic_load(&ep->faults.fail) ||
	    (ep->base.peer < OFI_MAX_PEERS &&
	     atomic_load(&ep->fab->peers[ep->base.peer].faults.fail)))
		return FARM_EINJECTED;
	if (!local_ok(ep, wr))
		return FARM_ELOCAL_ACCESS;
	if (wr->opcode == FARM_WR_CAS && (wr->raddr & 7))
		return -EINVAL;
	if (wr->len || wr->opcode == FARM_WR_NOTIFY)
		return farm_ofi_check_remote(ep, wr);
	return 0;
}

/* The pieces of a READ: one, plus its verification copy (b) when it is
 * line-atomic. Test-only, with line atomicity off: its words copied
 * apart, highest first, with no verification. */
static void read_pieces(struct ofi_slot *s, const farm_wr *wr, unsigned *np)
{
	if (!line_atomic_on() && wr->len % 8 == 0 && wr->len <= 1024) {
		s->rev8 = true;
		for (uint32_t o = 0; o < wr->len; o += 8)
			piece(s, np, 0, 8, P_READ);
		return;
	}
	piece(s, np, 0, wr->len, P_READ);
	if (wr->len <= OFI_VERIFY_MAX && s->scratch && line_atomic_on())
		piece(s, np, 0, wr->len, P_READ); /* (b) */
}

/* A NOTIFY is one control message to the target's fabric (f). */
static void notify_piece(struct ofi_ep *ep, struct ofi_slot *s,
                         const farm_wr *wr, unsigned *np)
{
	piece(s, np, 0, 0, P_SEND);
	memset(&s->ctl, 0, sizeof(s->ctl));
	s->ctl.magic = OFI_CTRL_MAGIC;
	s->ctl.type = CTRL_NOTIFY;
	s->ctl.from = ep->fab->base.machine_id;
	s->ctl.to = ep->base.peer;
	s->ctl.key = wr->rkey;
	s->ctl.addr = wr->raddr;
	s->ctl.cookie = ep->tag; /* the target drops a fenced holder's */
}

/* Split the request into the libfabric operations that carry it. */
static unsigned plan_pieces(struct ofi_ep *ep, struct ofi_slot *s,
                            const farm_wr *wr)
{
	unsigned np = 0;
	if (wr->opcode == FARM_WR_WRITE) {
		if (wr->flags & FARM_WR_INLINE) {
			memcpy(s->inl, wr->local, wr->len);
			s->local = s->inl;
			s->ldesc = ep->slots_desc;
		}
		np = write_pieces(s);
	} else if (wr->opcode == FARM_WR_READ) {
		read_pieces(s, wr, &np);
	} else if (wr->opcode == FARM_WR_CAS) {
		piece(s, &np, 0, 8, P_CAS);
	} else if (wr->opcode == FARM_WR_NOTIFY) {
		notify_piece(ep, s, wr, &np);
	}
	return np;
}

/* Queue one checked request in the next slot. */
static int queue_request(struct ofi_ep *ep, const farm_wr *wr)
{
	struct ofi_slot *s = &ep->slots[ep->head & ep->mask];
	int rc;
	if (wr->opcode == FARM_WR_READ && wr->len &&
	    wr->len <= OFI_VERIFY_MAX && line_atomic_on() &&
	    (rc = slot_scratch(ep, s)))
		return rc;
	slot_fill(ep, s, wr);
	unsigned np = 0;
	s->rev8 = false;
	int sw = known_failure(ep, wr);
	if (sw)
		ep->sw_failed = true; /* later requests: flushed */
	else
		np = plan_pieces(ep, s, wr);
	s->npieces = (uint8_t)np;
	if (wr->len == 0 && wr->opcode != FARM_WR_NOTIFY && !sw) {
		s->state = S_DONE; /* nothing to move */
	} else if (sw) {
		atomic_store(&s->err, sw);
		s->state = S_DONE;
	} else {
		s->state = S_QUEUED;
	}
	ep->head++;
	return 0;
}

int farm_ofi_ep_post(farm_ep *fep, farm_wr *list, farm_wr **bad)
{
	struct ofi_ep *ep = (struct ofi_ep *)fep;
	ofi_ep_lock(ep);
	int rc = 0;
	farm_wr *wr;
	for (wr = list; wr; wr = wr->next) {
		if ((rc = farm_wr_check(wr)))
			break;
		if (ep->head - ep->tail >= ep->depth) {
			rc = -EAGAIN;
			break;
		}
		if ((rc = queue_request(ep, wr)))
			break;
	}
	farm_ofi_pump(ep);
	ofi_ep_unlock(ep);
	if (rc && bad)
		*bad = wr;
	return rc;
}

/* (b) then (e): the first copy of a READ waiting to be verified got no
 * answer within the bound (a cut link sends no reset). Its second copy
 * never goes; the slot counts as handed, so the bound in retire() fails
 * it like any other request (it was stuck at next_post, which retire's
 * loop never reaches). */
static void expire_waiting_verify(struct ofi_ep *ep)
{
	if (ep->next_post == ep->head)
		return;
	struct ofi_slot *w = &ep->slots[ep->next_post & ep->mask];
	/* Acquire: pairs with the release decrement at completion (ofi.c). */
	if (verify_waiting(w) &&
	    atomic_load_explicit(&w->pending, memory_order_acquire) > 0 &&
	    farm_now_ns() - w->posted_ns >= ep->fab->timeout_ns) {
		w->posted = w->npieces;
		ep->next_post++;
	}
}

/* (e): no answer within the bound. Drain once more; if still nothing,
 * the slot fails with the peer dead, and its late completions are made
 * stale. */
static void time_out_slot(struct ofi_ep *ep, struct ofi_slot *s)
{
	struct ofi_fabric *f = ep->fab;
	pthread_mutex_lock(&f->drain);
	farm_ofi_drain_locked(f);
	if (atomic_load(&s->pending) > 0) {
		s->seq ^= 0x80000000u; /* late ones: stale */
		int zero = 0;
		atomic_compare_exchange_strong(&s->err, &zero, FARM_EPEERDEAD);
		ofi_peer_kill(f, ep->base.peer, ep->dest);
		for (unsigned k = 0; k < P_KINDS; k++)
			atomic_fetch_sub(&ep->inflight[k],
			                 atomic_load(&s->pend[k]));
		farm_stat_add(&f->st.timeouts, 1);
	}
	pthread_mutex_unlock(&f->drain);
}

/* (b): the two copies of a verified READ differ. */
static bool copies_differ(const struct ofi_slot *s)
{
	return s->opcode == FARM_WR_READ && s->npieces == 2 && !s->rev8 &&
	       !atomic_load(&s->err) &&
	       memcmp(s->local, s->scratch, s->len) != 0;
}

/* (b): a writer raced the READ; read both again, as often as it takes
 * (never delivered unverified: after a cap, a hot object read while the
 * target was descheduled came back torn). The peer answered: the bound
 * (e) starts again. */
static void reissue_read(struct ofi_ep *ep, struct ofi_slot *s)
{
	if (s->tries < UINT8_MAX)
		s->tries++;
	s->posted = 0;
	s->started = false;
	s->state = S_QUEUED;
	ep->next_post = ep->tail;
	farm_stat_add(&ep->fab->st.read_retries, 1);
	farm_ofi_pump(ep);
}

/* Injected delay: the slot is held back until it has aged @delay. */
static bool delay_holds(const struct ofi_ep *ep, const struct ofi_slot *s,
                        uint64_t *now)
{
	uint64_t delay = atomic_load(&ep->faults.delay_ns);
	if (ep->base.peer < OFI_MAX_PEERS)
		delay = FARM_MAX(delay,
		                 atomic_load(&ep->fab->peers[ep->base.peer]
		                                      .faults.delay_ns));
	if (!delay)
		return false;
	if (!*now)
		*now = farm_now_ns();
	return *now - s->posted_ns < delay;
}

/* The status to report: the endpoint's state overrides the slot's. */
static int slot_status(struct ofi_ep *ep, const struct ofi_slot *s)
{
	int st = atomic_load(&s->err);
	if (ep->closed)
		st = -ENOTCONN;
	else if (ep->err_state)
		st = FARM_EFLUSHED;
	else if (st == FARM_EFLUSHED && ofi_peer_dead(ep))
		st = FARM_EPEERDEAD;
	return st;
}

static void fill_wc(const struct ofi_ep *ep, const struct ofi_slot *s, int st,
                    farm_wc *w)
{
	w->wr_id = s->wr_id;
	w->status = st;
	w->opcode = s->opcode;
	w->pad = 0;
	w->peer = ep->base.peer;
	w->len = st ? 0 : (s->opcode == FARM_WR_NOTIFY ? 0 : s->len);
}

/* Retire one endpoint's finished requests in order into @wc. */
static int retire(struct ofi_ep *ep, int n, farm_wc *wc)
{
	struct ofi_fabric *f = ep->fab;
	int got = 0;
	uint64_t now = 0;
	expire_waiting_verify(ep);
	while (got < n && ep->tail != ep->next_post) {
		struct ofi_slot *s = &ep->slots[ep->tail & ep->mask];
		if (s->state == S_POSTED) {
			if (s->posted < s->npieces) /* still being handed */
				break;
			/* Acquire: pairs with the release decrement at
			 * completion (ofi.c). */
			if (atomic_load_explicit(&s->pending,
			                         memory_order_acquire) > 0) {
				if (!now)
					now = farm_now_ns();
				if (now - s->posted_ns < f->timeout_ns)
					break;
				time_out_slot(ep, s);
			}
			if (copies_differ(s)) {
				reissue_read(ep, s);
				break;
			}
		}
		if (delay_holds(ep, s, &now))
			break;
		int st = slot_status(ep, s);
		if (st)
			ep->err_state = true;
		if (st || (s->flags & FARM_WR_SIGNALED))
			fill_wc(ep, s, st, &wc[got++]);
		s->state = S_FREE;
		ep->tail++;
	}
	return got;
}

int farm_ofi_cq_poll(farm_cq *fcq, int n, farm_wc *wc)
{
	struct ofi_cq *c = (struct ofi_cq *)fcq;
	struct ofi_fabric *f = F(fcq->fab);
	if (c->shared)
		pthread_mutex_lock(&c->lock);
	farm_ofi_drain_try(f);
	int got = 0;
	for (struct ofi_ep *ep = c->eps; ep && got < n; ep = ep->cq_next) {
		ofi_ep_lock(ep);
		farm_ofi_pump(ep);
		got += retire(ep, n - got, wc + got);
		ofi_ep_unlock(ep);
	}
	if (c->shared)
		pthread_mutex_unlock(&c->lock);
	return got;
}
