/*
 * The udp provider's endpoints (udp.c has the fabric; README.md, "udp"):
 * a session to one peer opened by the CONNECT / ACCEPT exchange, its
 * slot in the fabric's table, and posting requests into its window.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/udp_int.h"
#include "util/log.h"

/* Its peer is dead, or the peer's id has a later holder than the one the
 * endpoint connected to (a reused id: the old holder's endpoints never
 * serve again, and their deaths are not the id's). */
static bool peer_dead(const struct udp_ep *ep)
{
	if (ep->base.peer >= UDP_MAX_PEERS)
		return false;
	const struct udp_peer *pe = &ep->fab->peers[ep->base.peer];
	return atomic_load(&pe->dead) ||
	       __atomic_load_n(&pe->inc, __ATOMIC_RELAXED) != ep->inc;
}

/* The CONNECT / ACCEPT exchange: the target's session index and token for
 * endpoint @cep, and the target's incarnation. Retried with a doubling
 * gap (a datagram can be lost) up to the connect bound. */
static int handshake(struct udp_fabric *f, uint32_t peer, uint32_t cep,
                     const struct sockaddr_storage *to, socklen_t tlen,
                     struct udp_conn *c)
{
	c->cep = cep;
	atomic_store(&c->done, 0);
	pthread_mutex_lock(&f->conn_mu);
	pthread_mutex_lock(&f->lock);
	f->conn = c;
	pthread_mutex_unlock(&f->lock);
	struct udp_pkt p;
	farm_udp_hdr(f, &p.h, T_CONNECT, peer);
	p.h.cep = cep;
	p.h.rlen = f->base.wire; /* a CONNECT's: our wire version */
	uint64_t bound = FARM_MIN(UDP_CONNECT_NS, f->timeout_ns);
	uint64_t t0 = farm_now_ns(), gap = 2000000ull;
	struct udp_out o = {&p, UDP_HDR, to, tlen};
	while (!atomic_load(&c->done) && farm_now_ns() - t0 < bound) {
		farm_udp_send(f, &o, 1);
		uint64_t until = farm_now_ns() + gap;
		while (!atomic_load(&c->done) && farm_now_ns() < until)
			farm_wait_word((const uint32_t *)&c->done, 0,
			               until - farm_now_ns());
		gap = FARM_MIN(gap * 2, 100000000ull);
	}
	pthread_mutex_lock(&f->lock);
	f->conn = NULL;
	pthread_mutex_unlock(&f->lock);
	pthread_mutex_unlock(&f->conn_mu);
	/* No answer is not a refusal: on a lossy network or a starved host
	 * the peer may well be alive. Whether it is dead is for its lease to
	 * say; the caller may connect again later. */
	if (!atomic_load(&c->done))
		return -ETIMEDOUT;
	return c->status;
}

/* A free slot of the endpoint table for @ep (its idx and gen), taken
 * under f->lock before the handshake: a connect by another thread
 * meanwhile must not pick the same one. Two endpoints of one slot left
 * one of them out of the table, the later connect's overwriting it or
 * the other's destroy clearing it: its replies were dropped as another's
 * (bad_session) and its timers never ran, so its requests waited for
 * ever (a new holder's READs, while the probes that wait for its
 * admission connected and closed endpoints). In the table before its
 * session is set up, it has nothing outstanding, so the timers pass it
 * by, and no reply matches its token (0) yet. -ENOSPC: the table is
 * full. */
static int ep_slot_take(struct udp_fabric *f, struct udp_ep *ep)
{
	pthread_mutex_lock(&f->lock);
	unsigned idx = 0;
	while (idx < UDP_MAX_EPS && f->eps[idx])
		idx++;
	if (idx < UDP_MAX_EPS) {
		ep->idx = idx;
		ep->gen = ++f->ep_gen[idx];
		if (farm_udp_knob_value(FARM_UDP_KNOB_SLOT_FIRST)) {
			f->eps[idx] = ep;
			f->eps_hi = FARM_MAX(f->eps_hi, idx + 1);
		}
	}
	pthread_mutex_unlock(&f->lock);
	return idx < UDP_MAX_EPS ? 0 : -ENOSPC;
}

/* @ep's slot given back (its connect failed). */
static void ep_slot_drop(struct udp_fabric *f, struct udp_ep *ep)
{
	pthread_mutex_lock(&f->lock);
	if (ep->idx < UDP_MAX_EPS && f->eps[ep->idx] == ep)
		f->eps[ep->idx] = NULL;
	pthread_mutex_unlock(&f->lock);
}

int farm_udp_ep_connect(farm_fabric *fab, farm_cq *cq, uint32_t peer_id,
                        const char *peer_addr, const farm_ep_attr *attr,
                        farm_ep **out)
{
	struct udp_fabric *f = UF(fab);
	struct sockaddr_storage to;
	socklen_t tlen;
	if (!peer_addr || farm_udp_parse_addr(peer_addr, &to, &tlen) ||
	    peer_id >= UDP_MAX_PEERS || peer_id == fab->machine_id)
		return -ECONNREFUSED;
	struct udp_ep *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	unsigned d = 1;
	while (d < attr->sq_depth)
		d <<= 1;
	ep->slots = calloc(d, sizeof(*ep->slots));
	if (!ep->slots) {
		free(ep);
		return -ENOMEM;
	}
	ep->base.fab = fab;
	ep->base.cq = cq;
	ep->base.peer = peer_id;
	ep->fab = f;
	ep->depth = attr->sq_depth;
	ep->mask = d - 1;
	ep->dest = to;
	ep->dlen = tlen;
	pthread_mutex_init(&ep->lock, NULL);
	int rc = ep_slot_take(f, ep);
	unsigned idx = ep->idx;
	struct udp_conn c = {0};
	if (!rc)
		rc = handshake(f, peer_id, idx << 16 | ep->gen, &to, tlen, &c);
	if (rc == -EPROTO)
		farm_fabric_wire_refused(fab, peer_id, peer_addr, c.wire);
	if (rc) {
		ep_slot_drop(f, ep);
		free(ep->slots);
		free(ep);
		return rc;
	}
	/* Under f->lock: the endpoint is in the table already (its slot
	 * taken before the handshake), and the timers and reply handlers
	 * read its session under that lock. */
	pthread_mutex_lock(&f->lock);
	ep->sess = c.sess;
	ep->token = c.token;
	ep->inc = c.inc;
	ep->progress_ns = farm_now_ns();
	ep->rto_ns = UDP_RTO_NS;
	struct udp_peer *pe = &f->peers[peer_id];
	if (pe->inc != c.inc || atomic_load(&pe->dead)) {
		/* A new connection is a new chance (a restarted machine). */
		__atomic_store_n(&pe->inc, c.inc, __ATOMIC_RELAXED);
		atomic_store(&pe->dead, 0);
	}
	pe->addr = to;
	pe->alen = tlen;
	__atomic_store_n(&pe->rx_ns, farm_now_ns(), __ATOMIC_RELAXED);
	pe->neps++;
	f->peers_hi = FARM_MAX(f->peers_hi, peer_id + 1);
	f->eps[idx] = ep;
	f->eps_hi = FARM_MAX(f->eps_hi, idx + 1);
	pthread_mutex_unlock(&f->lock);
	struct udp_cq *q = (struct udp_cq *)cq;
	if (q->shared)
		pthread_mutex_lock(&q->lock);
	ep->cq_next = q->eps;
	q->eps = ep;
	if (q->shared)
		pthread_mutex_unlock(&q->lock);
	*out = &ep->base;
	return 0;
}

void farm_udp_ep_disconnect(farm_ep *fep)
{
	struct udp_ep *ep = (struct udp_ep *)fep;
	pthread_mutex_lock(&ep->lock);
	ep->closed = true;
	pthread_mutex_unlock(&ep->lock);
}

void farm_udp_ep_destroy(farm_ep *fep)
{
	struct udp_ep *ep = (struct udp_ep *)fep;
	struct udp_fabric *f = ep->fab;
	struct udp_cq *c = (struct udp_cq *)fep->cq;
	if (c->shared)
		pthread_mutex_lock(&c->lock);
	for (struct udp_ep **p = &c->eps; *p; p = &(*p)->cq_next)
		if (*p == ep) {
			*p = ep->cq_next;
			break;
		}
	if (c->shared)
		pthread_mutex_unlock(&c->lock);
	/* Under f->lock, which every reply's handler holds while it uses
	 * the endpoint: none does once it is out of the table. */
	pthread_mutex_lock(&f->lock);
	if (f->eps[ep->idx] == ep)
		f->eps[ep->idx] = NULL;
	if (ep->base.peer < UDP_MAX_PEERS && f->peers[ep->base.peer].neps)
		f->peers[ep->base.peer].neps--;
	pthread_mutex_unlock(&f->lock);
	/* The target's half goes too (best effort: an unanswered session is
	 * also reused when its table fills). */
	struct udp_pkt p;
	farm_udp_hdr(f, &p.h, T_CLOSE, ep->base.peer);
	p.h.sess = ep->sess;
	p.h.token = ep->token;
	p.h.cep = ep->idx << 16 | ep->gen;
	struct udp_out o = {&p, UDP_HDR, &ep->dest, ep->dlen};
	if (f->started)
		farm_udp_send(f, &o, 1);
	pthread_mutex_destroy(&ep->lock);
	free(ep->slots);
	free(ep);
}

bool farm_udp_ep_usable(const farm_ep *fep)
{
	const struct udp_ep *ep = (const struct udp_ep *)fep;
	return !ep->err_state && !ep->closed && !peer_dead(ep);
}

/* Check the local buffer against its registration (verbs' LOC_PROT),
 * made with this endpoint's fabric: another fabric's registration says
 * nothing of what this one may touch (verbs would fail the lkey). */
static bool local_ok(const struct udp_ep *ep, const farm_wr *wr)
{
	if (wr->len == 0 || wr->opcode == FARM_WR_NOTIFY ||
	    (wr->opcode == FARM_WR_WRITE && (wr->flags & FARM_WR_INLINE)))
		return true;
	return farm_wr_local_ok(&ep->fab->base, wr);
}

/* A failure known without the peer, or 0. */
static int local_status(const struct udp_ep *ep, const farm_wr *wr)
{
	const struct udp_fabric *f = ep->fab;
	if (ep->closed)
		return -ENOTCONN;
	if (ep->err_state || ep->sw_failed)
		return FARM_EFLUSHED;
	if (peer_dead(ep))
		return FARM_EPEERDEAD;
	if (atomic_load(&ep->faults.fail) ||
	    (ep->base.peer < UDP_MAX_PEERS &&
	     atomic_load(&f->peers[ep->base.peer].faults.fail)))
		return FARM_EINJECTED;
	if (!local_ok(ep, wr))
		return FARM_ELOCAL_ACCESS;
	if (wr->opcode == FARM_WR_CAS && (wr->raddr & 7))
		return -EINVAL;
	return 0;
}

int farm_udp_ep_post(farm_ep *fep, farm_wr *list, farm_wr **bad)
{
	struct udp_ep *ep = (struct udp_ep *)fep;
	pthread_mutex_lock(&ep->lock);
	UDP_TRACE(UDP_EV_POST, ep->next_pkt);
	int rc = 0;
	farm_wr *wr;
	for (wr = list; wr; wr = wr->next) {
		if ((rc = farm_wr_check(wr)))
			break;
		if (ep->head - ep->tail >= ep->depth) {
			rc = -EAGAIN;
			break;
		}
		struct udp_slot *s = &ep->slots[ep->head & ep->mask];
		s->wr_id = wr->wr_id;
		s->opcode = wr->opcode;
		s->flags = wr->flags;
		s->len = wr->len;
		s->local = wr->local;
		s->raddr = wr->raddr;
		s->rkey = wr->rkey;
		s->cmp = wr->compare;
		s->swp = wr->swap;
		s->posted_ns = farm_now_ns();
		s->ndone = 0;
		s->npk = 0;
		s->err = local_status(ep, wr);
		if (s->err)
			ep->sw_failed = true; /* later requests: flushed */
		if (!s->err && wr->opcode == FARM_WR_WRITE &&
		    (wr->flags & FARM_WR_INLINE)) {
			memcpy(s->inl, wr->local, wr->len);
			s->local = s->inl;
		}
		if (s->err || (wr->len == 0 && wr->opcode != FARM_WR_NOTIFY)) {
			/* Release: pairs with udp_cq_poll's acquire load. */
			__atomic_store_n(&s->state, S_DONE, __ATOMIC_RELEASE);
		} else {
			s->npk = farm_udp_npieces(wr->raddr, wr->len);
			s->pkt_first = ep->next_pkt;
			ep->next_pkt += s->npk;
			s->state = S_QUEUED;
			farm_stat_add(&(ep->fab)->st.ops, 1);
		}
		ep->head++;
	}
	/* The bound starts now. The dispatch thread is not woken: its
	 * poller does that after a tick without replies (idle_poll). */
	if (ep->snd_una == ep->snd_nxt)
		ep->progress_ns = farm_now_ns();
	farm_udp_ep_pump(ep);
	pthread_mutex_unlock(&ep->lock);
	if (rc && bad)
		*bad = wr;
	return rc;
}
