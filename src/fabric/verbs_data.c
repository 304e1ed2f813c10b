/*
 * verbs provider: completion queues and the data path (farm_ep_post turns
 * requests into ibv_send_wr's, farm_cq_poll retires the send ring in
 * order). See verbs.c's head comment, "Requests".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/verbs_int.h"
#include "util/log.h"

/* ---- completion status --------------------------------------------------- */

static int wc_status(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS: return 0;
	case IBV_WC_REM_ACCESS_ERR: return FARM_EREMOTE_ACCESS;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_LEN_ERR: return FARM_ELOCAL_ACCESS;
	case IBV_WC_WR_FLUSH_ERR: return FARM_EFLUSHED;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR: return FARM_EPEERDEAD;
	case IBV_WC_REM_INV_REQ_ERR: return -EINVAL;
	default: return -EIO;
	}
}

/* ---- completion queues --------------------------------------------------- */

int farm_vb_cq_create(farm_fabric *f, unsigned depth, unsigned flags,
                      farm_cq **out)
{
	struct vb_fabric *fab = to_fab(f);
	int want = depth > (unsigned)fab->dattr.max_cqe ? fab->dattr.max_cqe
	                                                : (int)depth;
	if ((unsigned)want < depth)
		farm_warn("verbs: CQ depth %u above the device's %d; using %d",
		          depth, fab->dattr.max_cqe, want);
	struct vb_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	errno = 0;
	cq->cq = ibv_create_cq(fab->ctx, want, cq, NULL, 0);
	if (!cq->cq) {
		int rc = neg_errno(ENOMEM);
		farm_err("verbs: ibv_create_cq(%d): %s", want, strerror(-rc));
		free(cq);
		return rc;
	}
	cq->base.fab = f;
	cq->fab = fab;
	cq->shared = flags & FARM_CQ_SHARED;
	atomic_init(&cq->local_pending, 0);
	pthread_mutex_init(&cq->lock, NULL);
	pthread_mutex_lock(&fab->lock);
	cq->next = fab->cqs;
	fab->cqs = cq;
	pthread_mutex_unlock(&fab->lock);
	*out = &cq->base;
	return 0;
}

int farm_vb_cq_destroy(farm_cq *c)
{
	struct vb_cq *cq = (struct vb_cq *)c;
	struct vb_fabric *fab = cq->fab;
	pthread_mutex_lock(&cq->lock);
	unsigned n = cq->neps;
	pthread_mutex_unlock(&cq->lock);
	if (n)
		return -EBUSY;
	int rc = ibv_destroy_cq(cq->cq);
	if (rc) {
		farm_err("verbs: ibv_destroy_cq: %s", strerror(rc));
		return -rc;
	}
	pthread_mutex_lock(&fab->lock);
	for (struct vb_cq **pp = &fab->cqs; *pp; pp = &(*pp)->next) {
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	pthread_mutex_destroy(&cq->lock);
	free(cq->eps);
	free(cq->tab);
	free(cq);
	return 0;
}

static inline unsigned qpn_hash(uint32_t qpn)
{
	uint32_t h = qpn ^ (qpn >> 16);
	h *= 0x45d9f3bu;
	return h ^ (h >> 16);
}

static struct vb_ep *cq_lookup(const struct vb_cq *cq, uint32_t qpn)
{
	if (!cq->tab)
		return NULL;
	/* The table is at most half full: the probe ends at a hole. */
	for (unsigned i = qpn_hash(qpn) & cq->tmask;; i = (i + 1) & cq->tmask) {
		struct vb_ep *ep = cq->tab[i];
		if (!ep || ep->qp_num == qpn)
			return ep;
	}
}

static void tab_fill(struct vb_cq *cq)
{
	memset(cq->tab, 0, (cq->tmask + 1) * sizeof(*cq->tab));
	for (unsigned k = 0; k < cq->neps; k++) {
		unsigned i = qpn_hash(cq->eps[k]->qp_num) & cq->tmask;
		while (cq->tab[i])
			i = (i + 1) & cq->tmask;
		cq->tab[i] = cq->eps[k];
	}
}

/* Attach @ep (cq->lock held). */
int farm_vb_cq_attach(struct vb_cq *cq, struct vb_ep *ep)
{
	if (cq->neps == cq->cap) {
		unsigned cap = cq->cap ? cq->cap * 2 : 8;
		struct vb_ep **eps = realloc(cq->eps, cap * sizeof(*eps));
		if (!eps)
			return -ENOMEM;
		cq->eps = eps;
		cq->cap = cap;
	}
	unsigned need = pow2_at_least(2 * (cq->neps + 1));
	if (need < 16)
		need = 16;
	if (!cq->tab || need > cq->tmask + 1) {
		struct vb_ep **tab = calloc(need, sizeof(*tab));
		if (!tab)
			return -ENOMEM;
		free(cq->tab);
		cq->tab = tab;
		cq->tmask = need - 1;
	}
	cq->eps[cq->neps++] = ep;
	tab_fill(cq);
	return 0;
}

/* Detach @ep (cq->lock held); never fails. */
void farm_vb_cq_detach(struct vb_cq *cq, struct vb_ep *ep)
{
	for (unsigned i = 0; i < cq->neps; i++) {
		if (cq->eps[i] == ep) {
			cq->eps[i] = cq->eps[--cq->neps];
			break;
		}
	}
	if (cq->tab)
		tab_fill(cq);
}

/*
 * Make room in the CQ for @depth more completions (cq->lock held): every
 * outstanding request yields at most one CQE, so the sum of the endpoints'
 * depths bounds what the CQ must hold.
 */
int farm_vb_cq_reserve(struct vb_cq *cq, unsigned depth)
{
	unsigned need = cq->committed + depth;
	if (need < cq->committed)
		return -ENOSPC;
	if (need > (unsigned)cq->cq->cqe) {
		if (need > (unsigned)cq->fab->dattr.max_cqe) {
			farm_err("verbs: a CQ cannot hold %u completions "
			         "(device "
			         "maximum %d): attach fewer endpoints or use "
			         "smaller sq_depth",
			         need, cq->fab->dattr.max_cqe);
			return -ENOSPC;
		}
		int rc = ibv_resize_cq(cq->cq, (int)need);
		if (rc) {
			farm_err("verbs: cannot grow a CQ to %u entries: %s; "
			         "create it with that depth",
			         need, strerror(rc));
			return -ENOSPC;
		}
	}
	cq->committed = need;
	return 0;
}

/* ---- the data path ------------------------------------------------------- */

static inline bool local_ok(const struct vb_ep *ep, const farm_wr *wr)
{
	return farm_wr_local_ok(ep->base.fab, wr);
}

/*
 * Can @wr go to the NIC? 0 if so; otherwise the status it completes with,
 * in software. Changes nothing: the caller puts the endpoint in the error
 * state (ep_fail) once the request is committed.
 */
static int sw_status(const struct vb_ep *ep, const farm_wr *wr)
{
	int st = atomic_load_explicit(&ep->state, memory_order_relaxed);
	if (st == EP_CLOSED)
		return -ENOTCONN;
	if (st == EP_ERROR)
		return FARM_EFLUSHED;
	/* Pairs with the listener's release store. */
	if (atomic_load_explicit(&ep->peer_gone, memory_order_acquire) ||
	    atomic_load_explicit(&ep->fab->device_lost, memory_order_relaxed))
		return FARM_EPEERDEAD;
	if (wr->len && !(wr->flags & FARM_WR_INLINE) && !local_ok(ep, wr))
		return FARM_ELOCAL_ACCESS;
	if (wr->opcode == FARM_WR_CAS && (wr->raddr & 7))
		return -EINVAL;
	if (wr->len && wr->rkey > UINT32_MAX)
		return FARM_EREMOTE_KEY; /* no verbs rkey looks like this */
	return 0;
}

/* A request failed: later ones are flushed, as on a QP in error. A closed
 * endpoint stays closed. */
static void ep_fail(struct vb_ep *ep)
{
	int ok = EP_OK;
	atomic_compare_exchange_strong(&ep->state, &ok, EP_ERROR);
}

static void push_local(struct vb_ep *ep, const farm_wr *wr, int status)
{
	struct vb_lwc *l = &ep->lring[ep->ltail & ep->mask];
	l->wr_id = wr->wr_id;
	l->status = status;
	l->opcode = wr->opcode;
	ep->ltail++;
	/* R1: publishes the entry; pairs with A1 in farm_vb_cq_poll(). */
	atomic_fetch_add_explicit(&ep->cq->local_pending, 1,
	                          memory_order_release);
}

static int bounce_init(struct vb_ep *ep)
{
	size_t sz = (size_t)(ep->mask + 1) * FARM_INLINE_MAX;
	ep->bounce = malloc(sz);
	if (!ep->bounce)
		return -ENOMEM;
	/* The NIC only reads it: local read access is always granted. */
	errno = 0;
	ep->bounce_mr = ibv_reg_mr(ep->fab->pd, ep->bounce, sz, 0);
	if (!ep->bounce_mr) {
		int rc = neg_errno(ENOMEM);
		free(ep->bounce);
		ep->bounce = NULL;
		return rc;
	}
	return 0;
}

/* Fill @h for @wr in the next ring slot and take the slot. */
static int fill_wr(struct vb_ep *ep, const farm_wr *wr, struct ibv_send_wr *h,
                   struct ibv_sge *sg)
{
	uint32_t seq = ep->tail;
	struct vb_slot *s = &ep->ring[seq & ep->mask];
	memset(h, 0, sizeof(*h));
	h->wr_id = ((uint64_t)ep->incarnation << 32) | seq;
	h->sg_list = sg;
	h->num_sge = wr->len ? 1 : 0;
	sg->addr = (uint64_t)(uintptr_t)wr->local;
	sg->length = wr->len;
	/* An lmr is only read when it was checked to be ours (local_ok):
	 * inline requests and empty ones may carry anything there. */
	sg->lkey = wr->len && !(wr->flags & FARM_WR_INLINE)
	                   ? ((const struct vb_mr *)wr->lmr)->lkey
	                   : 0;
	switch (wr->opcode) {
	case FARM_WR_READ:
		h->opcode = IBV_WR_RDMA_READ;
		h->wr.rdma.remote_addr = wr->raddr;
		h->wr.rdma.rkey = (uint32_t)wr->rkey;
		break;
	case FARM_WR_WRITE:
		h->opcode = IBV_WR_RDMA_WRITE;
		h->wr.rdma.remote_addr = wr->raddr;
		h->wr.rdma.rkey = (uint32_t)wr->rkey;
		if ((wr->flags & FARM_WR_INLINE) && wr->len) {
			if (wr->len <= ep->max_inline) {
				/* Copied into the WQE by ibv_post_send;
				 * the lkey is not checked. */
				h->send_flags |= IBV_SEND_INLINE;
			} else {
				/* The device inlines less: copy now into
				 * this slot's bounce buffer, same meaning. */
				if (!ep->bounce) {
					int rc = bounce_init(ep);
					if (rc)
						return rc;
				}
				uint8_t *b =
				        ep->bounce + (size_t)(seq & ep->mask) *
				                             FARM_INLINE_MAX;
				memcpy(b, wr->local, wr->len);
				sg->addr = (uint64_t)(uintptr_t)b;
				sg->lkey = ep->bounce_mr->lkey;
			}
		}
		break;
	case FARM_WR_CAS:
		h->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		h->wr.atomic.remote_addr = wr->raddr;
		h->wr.atomic.compare_add = wr->compare;
		h->wr.atomic.swap = wr->swap;
		h->wr.atomic.rkey = (uint32_t)wr->rkey;
		break;
	}
	s->wr_id = wr->wr_id;
	s->len = wr->len;
	s->opcode = wr->opcode;
	s->signaled = (wr->flags & FARM_WR_SIGNALED) != 0;
	s->cqe = 0;
	s->status = 0;
	s->unsig_before = ep->unsig;
	/* Selective signaling, and one forced signal per signal_every
	 * unsignaled requests so their slots come back. */
	if (s->signaled || ++ep->unsig >= ep->signal_every) {
		h->send_flags |= IBV_SEND_SIGNALED;
		ep->unsig = 0;
	}
	ep->tail++;
	return 0;
}

/*
 * Ring the doorbell for hw[0..nb) (slots tail-nb .. tail-1). Returns 0, or
 * the error with *failed set to the index of the first request not posted;
 * its slot and those after it are given back.
 */
static int post_batch(struct vb_ep *ep, struct ibv_send_wr *hw, int nb,
                      int *failed)
{
	for (int i = 0; i < nb - 1; i++)
		hw[i].next = &hw[i + 1];
	hw[nb - 1].next = NULL;
	struct ibv_send_wr *bad = NULL;
	/* ibv_post_send(3): 0, or an errno value (not -1 and errno). */
	int rc = ibv_post_send(ep->qp, hw, &bad);
	if (FARM_LIKELY(rc == 0))
		return 0;
	int idx = bad ? (int)(bad - hw) : 0;
	if (idx < 0 || idx >= nb) {
		farm_err("verbs: ibv_post_send returned a bad_wr outside the "
		         "list");
		idx = 0;
	}
	uint32_t first = ep->tail - (uint32_t)nb + (uint32_t)idx;
	ep->unsig = ep->ring[first & ep->mask].unsig_before;
	ep->tail = first;
	*failed = idx;
	farm_dbg("verbs: ibv_post_send: %s", strerror(rc));
	/* ENOMEM: the send queue is full (our accounting should prevent it). */
	return rc == ENOMEM ? -EAGAIN : -rc;
}

int farm_vb_ep_post(farm_ep *e, farm_wr *list, farm_wr **bad)
{
	struct vb_ep *ep = (struct vb_ep *)e;
	struct ibv_send_wr hw[VB_BATCH];
	struct ibv_sge sge[VB_BATCH];
	farm_wr *src[VB_BATCH];
	int nb = 0, rc = 0, failed = 0;
	farm_wr *wr = list;
	ep_lock(ep);
	for (; wr; wr = wr->next) {
		rc = farm_wr_check(wr);
		if (!rc && wr->opcode == FARM_WR_NOTIFY)
			rc = -ENOTSUP; /* no doorbell on a NIC: poll instead */
		if (rc)
			break;
		if ((ep->tail - ep->head) + (ep->ltail - ep->lhead) >=
		    ep->depth) {
			rc = -EAGAIN;
			break;
		}
		int st = sw_status(ep, wr);
		if (st) {
			/* Everything before it reaches the NIC first, so
			 * that a post failure there cannot leave a software
			 * completion for a request after it. */
			if (nb) {
				rc = post_batch(ep, hw, nb, &failed);
				if (rc) {
					wr = src[failed];
					nb = 0;
					break;
				}
				nb = 0;
			}
			ep_fail(ep);
			push_local(ep, wr, st);
			continue;
		}
		if (nb == VB_BATCH) {
			rc = post_batch(ep, hw, nb, &failed);
			if (rc) {
				wr = src[failed];
				nb = 0;
				break;
			}
			nb = 0;
		}
		rc = fill_wr(ep, wr, &hw[nb], &sge[nb]);
		if (rc)
			break;
		src[nb++] = wr;
	}
	if (nb) {
		int prc = post_batch(ep, hw, nb, &failed);
		if (prc) {
			/* Earlier than whatever stopped the loop. */
			rc = prc;
			wr = src[failed];
		}
	}
	ep_unlock(ep);
	if (bad)
		*bad = rc ? wr : NULL;
	return rc;
}

/* Record a NIC completion (ep locked). */
static void note_cqe(struct vb_ep *ep, const struct ibv_wc *w)
{
	uint32_t seq = (uint32_t)w->wr_id;
	/* Only [done, tail) can complete; anything else is stale. */
	if (seq - ep->done >= ep->tail - ep->done) {
		farm_dbg(
		        "verbs: dropping a completion for slot %u (machine %u)",
		        seq, ep->base.peer);
		return;
	}
	struct vb_slot *s = &ep->ring[seq & ep->mask];
	s->cqe = 1;
	s->status = wc_status(w->status);
	if (w->status != IBV_WC_SUCCESS && w->status != IBV_WC_WR_FLUSH_ERR &&
	    !ep->reported) {
		ep->reported = true;
		farm_info("verbs: request to machine %u failed: %s (vendor "
		          "error 0x%x)",
		          ep->base.peer, ibv_wc_status_str(w->status),
		          w->vendor_err);
	}
	/* RC completes in order: every slot before it is done too. */
	ep->done = seq + 1;
}

/* Report completed slots in order, up to @n (ep locked). */
static int ep_harvest(struct vb_ep *ep, int n, farm_wc *wc)
{
	int got = 0;
	bool closed = atomic_load_explicit(&ep->state, memory_order_relaxed) ==
	              EP_CLOSED;
	while (got < n && ep->head != ep->done) {
		struct vb_slot *s = &ep->ring[ep->head & ep->mask];
		/* Without a CQE of its own, a slot before one that has a CQE
		 * succeeded, unless the QP had failed before it. */
		int st = s->cqe ? s->status : 0;
		if (ep->hw_error) {
			st = FARM_EFLUSHED;
		} else if (st) {
			/* The first failure. A flush first means the QP was
			 * put in error under us: the peer left. */
			/* Acquire: pairs with the listener's release store
			 * of peer_gone (verbs_listen.c). */
			if (st == FARM_EFLUSHED &&
			    atomic_load_explicit(&ep->peer_gone,
			                         memory_order_acquire))
				st = FARM_EPEERDEAD;
			ep->hw_error = true;
			ep_fail(ep);
		}
		if (closed)
			st = -ENOTCONN;
		if (st || s->signaled)
			wc[got++] = (farm_wc){.wr_id = s->wr_id,
			                      .status = st,
			                      .opcode = s->opcode,
			                      .peer = ep->base.peer,
			                      .len = st ? 0 : s->len};
		ep->head++;
	}
	return got;
}

static int drain_local(struct vb_cq *cq, int n, farm_wc *wc)
{
	int got = 0;
	for (unsigned i = 0; i < cq->neps && got < n; i++) {
		struct vb_ep *ep = cq->eps[i];
		if (ep->lhead == ep->ltail && !ep->shared)
			continue;
		ep_lock(ep);
		unsigned popped = 0;
		while (ep->lhead != ep->ltail && got < n) {
			const struct vb_lwc *l =
			        &ep->lring[ep->lhead & ep->mask];
			wc[got++] = (farm_wc){.wr_id = l->wr_id,
			                      .status = l->status,
			                      .opcode = l->opcode,
			                      .peer = ep->base.peer,
			                      .len = 0};
			ep->lhead++;
			popped++;
		}
		ep_unlock(ep);
		if (popped)
			atomic_fetch_sub_explicit(&cq->local_pending, popped,
			                          memory_order_relaxed);
	}
	return got;
}

static int drain_backlog(struct vb_cq *cq, int n, farm_wc *wc)
{
	int got = 0;
	for (unsigned i = 0; i < cq->neps && got < n; i++) {
		struct vb_ep *ep = cq->eps[i];
		if (!ep->in_backlog)
			continue;
		ep_lock(ep);
		got += ep_harvest(ep, n - got, wc + got);
		if (ep->head == ep->done) {
			ep->in_backlog = false;
			cq->backlog--;
		}
		ep_unlock(ep);
	}
	return got;
}

int farm_vb_cq_poll(farm_cq *c, int n, farm_wc *wc)
{
	struct vb_cq *cq = (struct vb_cq *)c;
	int got = 0;
	if (cq->shared)
		pthread_mutex_lock(&cq->lock);
	/* Completions already taken from the NIC but not yet reported
	 * (an earlier call had no room), then software ones. */
	if (FARM_UNLIKELY(cq->backlog))
		got += drain_backlog(cq, n, wc);
	/* A1: pairs with R1 in push_local(). */
	if (FARM_UNLIKELY(atomic_load_explicit(&cq->local_pending,
	                                       memory_order_acquire)) &&
	    got < n)
		got += drain_local(cq, n - got, wc + got);
	while (got < n) {
		struct ibv_wc hw[VB_POLL_BATCH];
		int want = FARM_MIN(n - got, VB_POLL_BATCH);
		/* ibv_poll_cq(3): a count >= 0, or negative on failure. */
		int k = ibv_poll_cq(cq->cq, want, hw);
		if (FARM_UNLIKELY(k < 0)) {
			farm_err("verbs: ibv_poll_cq failed (%d): CQ overrun?",
			         k);
			if (!got)
				got = -EIO;
			break;
		}
		for (int i = 0; i < k; i++) {
			struct vb_ep *ep = cq_lookup(cq, hw[i].qp_num);
			/* Late completions of a destroyed endpoint (the QP
			 * number may have been reused): dropped. */
			if (!ep ||
			    (uint32_t)(hw[i].wr_id >> 32) != ep->incarnation)
				continue;
			ep_lock(ep);
			note_cqe(ep, &hw[i]);
			if (got < n)
				got += ep_harvest(ep, n - got, wc + got);
			if (ep->head != ep->done && !ep->in_backlog) {
				ep->in_backlog = true;
				cq->backlog++;
			}
			ep_unlock(ep);
		}
		if (k < want)
			break;
	}
	if (cq->shared)
		pthread_mutex_unlock(&cq->lock);
	return got;
}
