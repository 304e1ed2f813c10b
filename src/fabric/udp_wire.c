/*
 * The udp provider's wire: sending (sendmmsg, through the test
 * hooks), coalescing (the records sent together to one address packed into
 * shared datagrams), draining the socket (recvmmsg: requests to serve, replies
 * to hand to endpoints, session control), the initiator's go-back-N window
 * (pump) and the dispatch thread, which parks in poll(2) and runs the
 * timers (udp_timers.c) when due.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fabric/udp_int.h"
#include "util/log.h"

/* ---- knobs -------------------------------------------------------------- */

#ifdef FARM_FAULT_INJECTION
static atomic_int knobs[11] = {0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1};

int farm_udp_knob_value(int knob)
{
	return atomic_load_explicit(&knobs[knob], memory_order_relaxed);
}

int farm_udp_testing_set(enum farm_udp_knob knob, int value)
{
	if (knob < FARM_UDP_KNOB_GO_BACK_N || knob > FARM_UDP_KNOB_SLOT_FIRST)
		return -EINVAL;
	return atomic_exchange(&knobs[knob], value);
}
#else
/* A production build cannot switch a guarantee off (duplicate suppression,
 * line atomicity, write order, revocation's teardown) nor lose packets: every
 * knob reads as its default and setting one is refused. */
static const int knob_default[11] = {0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1};

int farm_udp_knob_value(int knob)
{
	return knob_default[knob];
}

int farm_udp_testing_set(enum farm_udp_knob knob, int value)
{
	(void)value;
	if (knob < FARM_UDP_KNOB_GO_BACK_N || knob > FARM_UDP_KNOB_SLOT_FIRST)
		return -EINVAL;
	return -ENOTSUP;
}
#endif

/* ---- sending ------------------------------------------------------------ */

static void send_raw(struct udp_fabric *f, const struct udp_out *out,
                     unsigned n)
{
	struct mmsghdr m[UDP_BATCH * 2 + 1];
	struct iovec iov[UDP_BATCH * 2 + 1];
	unsigned k = 0;
	while (k < n) {
		unsigned b = 0;
		for (; b < FARM_ARRAY_SIZE(m) && k + b < n; b++) {
			const struct udp_out *o = &out[k + b];
			iov[b] = (struct iovec){(void *)o->pkt, o->len};
			m[b].msg_hdr =
			        (struct msghdr){.msg_name = (void *)o->to,
			                        .msg_namelen = o->tlen,
			                        .msg_iov = &iov[b],
			                        .msg_iovlen = 1};
		}
		int r = sendmmsg(f->fd, m, b, MSG_DONTWAIT);
		UDP_TRACE(UDP_EV_SEND, out[k].pkt->h.type);
		farm_stat_add(&(f)->st.tx_calls, 1);
		if (r <= 0) {
			/* A full socket buffer drops them, as a switch
			 * would: retransmission recovers. */
			r = 1;
		} else {
			farm_stat_add(&(f)->st.tx_pkts, (uint64_t)r);
		}
		k += (unsigned)r;
	}
}

#ifdef FARM_FAULT_INJECTION
static _Thread_local uint64_t hook_rng;

static bool roll(int knob)
{
	int pm = farm_udp_knob_value(knob);
	if (!pm)
		return false;
	if (!hook_rng)
		hook_rng = farm_now_ns() | 1;
	return (int)(farm_rand64(&hook_rng) % 1000) < pm;
}

/* The held packet goes out now (behind whatever was sent before). */
void farm_udp_flush_held(struct udp_fabric *f)
{
	pthread_mutex_lock(&f->tx);
	if (f->held_len) {
		struct udp_out o = {&f->held, f->held_len, &f->held_to,
		                    f->held_tlen};
		send_raw(f, &o, 1);
		f->held_len = 0;
	}
	pthread_mutex_unlock(&f->tx);
}
#endif

void farm_udp_send(struct udp_fabric *f, const struct udp_out *out, unsigned n)
{
#ifdef FARM_FAULT_INJECTION
	if (farm_udp_knob_value(FARM_UDP_KNOB_DROP) ||
	    farm_udp_knob_value(FARM_UDP_KNOB_DUP) ||
	    farm_udp_knob_value(FARM_UDP_KNOB_REORDER)) {
		struct udp_out v[UDP_BATCH * 2] = {{0}};
		unsigned m = 0;
		bool flush = false;
		for (unsigned i = 0; i < n && m + 2 <= FARM_ARRAY_SIZE(v);
		     i++) {
			if (roll(FARM_UDP_KNOB_DROP)) {
				farm_stat_add(&(f)->st.hook_drops, 1);
				continue;
			}
			if (roll(FARM_UDP_KNOB_REORDER)) {
				pthread_mutex_lock(&f->tx);
				bool free_slot = f->held_len == 0;
				if (free_slot) {
					memcpy(&f->held, out[i].pkt,
					       out[i].len);
					f->held_len = out[i].len;
					memcpy(&f->held_to, out[i].to,
					       out[i].tlen);
					f->held_tlen = out[i].tlen;
				}
				pthread_mutex_unlock(&f->tx);
				if (free_slot) {
					farm_stat_add(&(f)->st.hook_reorders,
					              1);
					continue;
				}
			}
			v[m++] = out[i];
			flush = true;
			if (roll(FARM_UDP_KNOB_DUP)) {
				farm_stat_add(&(f)->st.hook_dups, 1);
				v[m++] = out[i];
			}
		}
		if (m)
			send_raw(f, v, m);
		if (flush)
			farm_udp_flush_held(f);
		return;
	}
#endif
	send_raw(f, out, n);
}

/* ---- coalescing --------------------------------------------------------- */

void farm_udp_packer_init(struct udp_packer *pk, uint8_t (*dg)[UDP_DGRAM_MAX],
                          struct udp_out *out, unsigned cap, bool coalesce)
{
	*pk = (struct udp_packer){
	        .dg = dg, .out = out, .cap = cap, .coalesce = coalesce};
}

void farm_udp_packer_flush(struct udp_fabric *f, struct udp_packer *pk)
{
	if (pk->n)
		farm_udp_send(f, pk->out, pk->n);
	pk->n = 0;
}

/* Room for a record of @len bytes to @to: after the last one when it fits
 * in the same datagram (one system call, one wake-up of the receiver, for
 * many records), else at the start of a new datagram. The caller writes
 * the record there before the next call. */
struct udp_pkt *farm_udp_packer_add(struct udp_fabric *f, struct udp_packer *pk,
                                    size_t len,
                                    const struct sockaddr_storage *to,
                                    socklen_t tlen)
{
	struct udp_out *o = pk->n ? &pk->out[pk->n - 1] : NULL;
	if (o && pk->coalesce && o->tlen == tlen &&
	    (o->to == to || memcmp(o->to, to, tlen) == 0) &&
	    UDP_ALIGN8(o->len) + len <= UDP_DGRAM_MAX) {
		uint8_t *d = pk->dg[pk->n - 1];
		((struct udp_pkt *)(d + pk->last))->h.type |= UDP_MORE;
		/* The padding goes out zeroed: the buffers are reused across
		 * peers, and no byte of one peer's reply may reach another. */
		memset(d + o->len, 0, UDP_ALIGN8(o->len) - o->len);
		pk->last = UDP_ALIGN8(o->len);
		o->len = pk->last + len;
		return (struct udp_pkt *)(d + pk->last);
	}
	if (pk->n == pk->cap)
		farm_udp_packer_flush(f, pk);
	pk->out[pk->n] = (struct udp_out){(const struct udp_pkt *)pk->dg[pk->n],
	                                  len, to, tlen};
	pk->last = 0;
	return (struct udp_pkt *)pk->dg[pk->n++];
}

/* ---- pieces ------------------------------------------------------------- */

/* A request is split at line boundaries into pieces of at most UDP_PIECE
 * bytes, one per packet: a line never spans two packets (so a READ stays
 * line-atomic), and pieces execute in order (so a WRITE's last word lands
 * last). */
uint32_t farm_udp_npieces(uint64_t raddr, uint32_t len)
{
	if (len == 0)
		return 1;
	uint64_t a = raddr & ~(uint64_t)(FARM_CACHE_LINE - 1);
	return (uint32_t)((raddr + len - a + UDP_PIECE - 1) / UDP_PIECE);
}

void farm_udp_piece(uint64_t raddr, uint32_t len, uint32_t k, uint64_t *off,
                    uint32_t *plen)
{
	uint64_t a = raddr & ~(uint64_t)(FARM_CACHE_LINE - 1);
	uint64_t b0 = FARM_MAX(raddr, a + (uint64_t)k * UDP_PIECE);
	uint64_t b1 = FARM_MIN(raddr + len, a + (uint64_t)(k + 1) * UDP_PIECE);
	*off = b0 - raddr;
	*plen = (uint32_t)(b1 - b0);
}

/* ---- the initiator's window ---------------------------------------------- */

static size_t build_pkt(struct udp_ep *ep, const struct udp_slot *s, uint64_t q,
                        struct udp_pkt *p)
{
	uint64_t off;
	uint32_t plen;
	farm_udp_piece(s->raddr, s->len, (uint32_t)(q - s->pkt_first), &off,
	               &plen);
	farm_udp_hdr(ep->fab, &p->h, T_REQ, ep->base.peer);
	p->h.op = (uint8_t)s->opcode;
	p->h.sess = ep->sess;
	p->h.token = ep->token;
	p->h.cep = ep->idx << 16 | ep->gen;
	p->h.seq = q;
	p->h.raddr = s->raddr + off;
	p->h.rkey = s->rkey;
#ifdef FARM_FAULT_INJECTION
	if (!farm_udp_knob_value(FARM_UDP_KNOB_ORDERED_WRITES))
		p->h.tflags |= UDP_TF_UNORDERED;
	if (!farm_udp_knob_value(FARM_UDP_KNOB_LINE_ATOMIC))
		p->h.tflags |= UDP_TF_TEARABLE;
#endif
	switch (s->opcode) {
	case FARM_WR_READ: p->h.rlen = plen; break;
	case FARM_WR_WRITE:
		p->h.len = (uint16_t)plen;
		memcpy(p->data, (const uint8_t *)s->local + off, plen);
		/* The first piece carries the whole request's range (cmp:
		 * start, swp: length, unused by a WRITE), so the target
		 * refuses a request that would fail on a later piece
		 * before any byte of it lands. */
		if (q == s->pkt_first) {
			p->h.cmp = s->raddr;
			p->h.swp = s->len;
		}
		break;
	case FARM_WR_CAS:
		p->h.cmp = s->cmp;
		p->h.swp = s->swp;
		break;
	default: break;
	}
	return UDP_HDR + p->h.len;
}

/* The length of packet @q's record (build_pkt's result). */
static size_t rec_len(const struct udp_slot *s, uint64_t q)
{
	if (s->opcode != FARM_WR_WRITE)
		return UDP_HDR;
	uint64_t off;
	uint32_t plen;
	farm_udp_piece(s->raddr, s->len, (uint32_t)(q - s->pkt_first), &off,
	               &plen);
	return UDP_HDR + plen;
}

bool farm_udp_ep_paused(const struct udp_ep *ep)
{
	const struct udp_fabric *f = ep->fab;
	return atomic_load(&ep->faults.pause) ||
	       (ep->base.peer < UDP_MAX_PEERS &&
	        atomic_load(&f->peers[ep->base.peer].faults.pause));
}

/* Send what the window allows: first the packets in [from, snd_nxt) not
 * answered yet (a retransmission: the RTO backs off when @timeout), then
 * new ones. Endpoint lock held. */
void farm_udp_ep_send(struct udp_ep *ep, uint64_t from, uint64_t end,
                      bool timeout)
{
	if (farm_udp_ep_paused(ep))
		return;
	static _Thread_local uint8_t dg[UDP_BATCH + 1][UDP_DGRAM_MAX]
	        __attribute__((aligned(8)));
	struct udp_out out[UDP_BATCH];
	struct udp_packer pk;
	farm_udp_packer_init(&pk, dg, out, UDP_BATCH, ep->fab->coalesce);
	/* The timer is armed by the first packet outstanding, re-armed by a
	 * retransmission (and by progress, on_reply). */
	bool arm = ep->snd_una == ep->snd_nxt || from < ep->snd_nxt;
	for (uint64_t q = from; q < FARM_MIN(end, ep->snd_nxt); q++) {
		if (ep->acked >> (q - ep->snd_una) & 1)
			continue;
		const struct udp_slot *s =
		        &ep->slots[ep->win_slot[q % UDP_WINDOW] & ep->mask];
		build_pkt(ep, s, q,
		          farm_udp_packer_add(ep->fab, &pk, rec_len(s, q),
		                              &ep->dest, ep->dlen));
		farm_stat_add(&(ep->fab)->st.retransmits, 1);
	}
	/* The cursor may lag behind the oldest request (retired since): its
	 * slot may hold a newer request by now. */
	if ((int32_t)(ep->send_slot - ep->tail) < 0)
		ep->send_slot = ep->tail;
	while (ep->snd_nxt < ep->next_pkt &&
	       ep->snd_nxt < ep->snd_una + UDP_WINDOW) {
		struct udp_slot *s = &ep->slots[ep->send_slot & ep->mask];
		if (s->state != S_QUEUED ||
		    ep->snd_nxt >= s->pkt_first + s->npk) {
			ep->send_slot++;
			continue;
		}
		uint64_t q = ep->snd_nxt++;
		ep->win_slot[q % UDP_WINDOW] = ep->send_slot;
		build_pkt(ep, s, q,
		          farm_udp_packer_add(ep->fab, &pk, rec_len(s, q),
		                              &ep->dest, ep->dlen));
	}
	farm_udp_packer_flush(ep->fab, &pk);
	if (timeout && from < ep->snd_nxt) /* a retransmission: back off */
		ep->rto_ns = FARM_MIN(ep->rto_ns * 2, UDP_RTO_MAX_NS);
	if (arm)
		ep->rto_at = farm_now_ns() + ep->rto_ns;
}

void farm_udp_ep_pump(struct udp_ep *ep)
{
	farm_udp_ep_send(ep, ep->snd_nxt, ep->snd_nxt, false);
}

/* Packet @q is missing at the target (its NACK: resend everything from
 * it) or its reply is (a later one came: resend those before @end). Only
 * when it is the oldest unanswered, once per such packet (a NACK
 * duplicated or late resends nothing more; a resend lost again waits for
 * the RTO). */
static void on_nack(struct udp_ep *ep, uint64_t q, uint64_t end)
{
	if (q != ep->snd_una || q >= ep->snd_nxt || ep->nack_q == q + 1 ||
	    farm_udp_ep_paused(ep))
		return;
	ep->nack_q = q + 1;
	farm_stat_add(&(ep->fab)->st.fast_resends, 1);
	farm_udp_ep_send(ep, q, end, false);
}

/* Packet @q is answered: the window slides over what is answered from its
 * oldest, the timer restarts on progress, a hole below @q is resent, and
 * what the window now allows goes out. */
static void acked(struct udp_ep *ep, uint64_t q)
{
	ep->acked |= 1ull << (q - ep->snd_una);
	uint64_t before = ep->snd_una;
	while (ep->acked & 1) {
		ep->acked >>= 1;
		ep->snd_una++;
	}
	uint64_t now = farm_now_ns();
	ep->progress_ns = now;
	if (ep->snd_una != before) {
		ep->rto_ns = UDP_RTO_NS;
		ep->rto_at = now + UDP_RTO_NS;
	}
	/* A reply past an unanswered packet: the target executes in order,
	 * so that packet's reply was lost (or is late): resend it now, as on
	 * a NACK (the target answers it from its reply cache). */
	if (ep->snd_una < q)
		on_nack(ep, ep->snd_una, q);
	farm_udp_ep_pump(ep);
}

/* A reply for packet @q of @ep (endpoint lock held). */
static void on_reply(struct udp_ep *ep, const struct udp_pkt *p, uint64_t q)
{
	struct udp_fabric *f = ep->fab;
	if (q < ep->snd_una || q >= ep->snd_nxt ||
	    (ep->acked >> (q - ep->snd_una) & 1)) {
		farm_stat_add(&(f)->st.stale_replies, 1);
		return;
	}
	struct udp_slot *s =
	        &ep->slots[ep->win_slot[q % UDP_WINDOW] & ep->mask];
	if (s->state != S_QUEUED || q < s->pkt_first ||
	    q >= s->pkt_first + s->npk || p->h.op != s->opcode) {
		farm_stat_add(&(f)->st.stale_replies, 1);
		return;
	}
	uint64_t off;
	uint32_t plen;
	farm_udp_piece(s->raddr, s->len, (uint32_t)(q - s->pkt_first), &off,
	               &plen);
	int st = p->h.status;
	if (!st && s->opcode == FARM_WR_READ && p->h.len != plen)
		st = FARM_ECORRUPT;
	else if (!st && s->opcode != FARM_WR_READ && p->h.len)
		st = FARM_ECORRUPT;
	if (st > 0)
		st = FARM_ECORRUPT;
	if (st && !s->err)
		s->err = st;
	else if (!st && s->opcode == FARM_WR_READ)
		memcpy((uint8_t *)s->local + off, p->data, plen);
	else if (!st && s->opcode == FARM_WR_CAS)
		memcpy(s->local, &p->h.cmp, 8);
	if (++s->ndone == s->npk) { /* pairs with udp_cq_poll's hint */
		__atomic_store_n(&s->state, S_DONE, __ATOMIC_RELEASE);
		UDP_TRACE(UDP_EV_DONE, q);
	}
	acked(ep, q);
}

/* ---- receiving ---------------------------------------------------------- */

struct udp_rxbuf {
	struct {
		struct udp_pkt p;
		uint8_t extra[64]; /* an oversized datagram shows as such */
	} in[UDP_BATCH];
	struct sockaddr_storage from[UDP_BATCH];
	struct udp_pkt reply; /* one record's, before it is packed */
	uint8_t dg[UDP_BATCH + 1][UDP_DGRAM_MAX] __attribute__((aligned(8)));
	struct udp_out out[UDP_BATCH];
};

int farm_udp_rx_alloc(struct udp_fabric *f)
{
	f->rxb = calloc(1, sizeof(*f->rxb));
	return f->rxb ? 0 : -ENOMEM;
}

/* Without f->lock (a request served): the peer's fields are read and
 * written as single words; pairs with the loads in peer_timers. */
static void heard(struct udp_fabric *f, const struct udp_hdr *h)
{
	if (h->from < UDP_MAX_PEERS &&
	    __atomic_load_n(&f->peers[h->from].inc, __ATOMIC_RELAXED) == h->inc)
		__atomic_store_n(&f->peers[h->from].rx_ns, farm_now_ns(),
		                 __ATOMIC_RELAXED);
}

static void on_resp(struct udp_fabric *f, const struct udp_pkt *p)
{
	uint32_t idx = p->h.cep >> 16, gen = p->h.cep & 0xffff;
	pthread_mutex_lock(&f->lock);
	struct udp_ep *ep = idx < UDP_MAX_EPS ? f->eps[idx] : NULL;
	if (!ep || ep->gen != gen || ep->base.peer != p->h.from ||
	    ep->sess != p->h.sess || ep->token != p->h.token ||
	    f->peers[ep->base.peer].inc != p->h.inc) {
		pthread_mutex_unlock(&f->lock);
		farm_stat_add(&(f)->st.bad_session, 1);
		return;
	}
	heard(f, &p->h);
	pthread_mutex_lock(&ep->lock);
	if ((p->h.type & ~UDP_MORE) == T_NACK)
		on_nack(ep, p->h.seq, UINT64_MAX);
	else
		on_reply(ep, p, p->h.seq);
	pthread_mutex_unlock(&ep->lock);
	pthread_mutex_unlock(&f->lock);
}

static void on_accept(struct udp_fabric *f, const struct udp_hdr *h)
{
	pthread_mutex_lock(&f->lock);
	struct udp_conn *c = f->conn;
	if (c && c->cep == h->cep && !atomic_load(&c->done)) {
		c->sess = h->sess;
		c->token = h->token;
		c->inc = h->inc;
		/* An ACCEPT's rlen: the target's wire version (an older
		 * build's, 0, is refused as any other). */
		c->wire = h->rlen;
		c->status = h->status < 0             ? h->status
		            : h->rlen != f->base.wire ? -EPROTO
		                                      : 0;
		atomic_store(&c->done, 1);
	}
	pthread_mutex_unlock(&f->lock);
}

static void on_pong(struct udp_fabric *f, const struct udp_hdr *h,
                    const struct sockaddr_storage *from, socklen_t flen)
{
	if (h->from >= UDP_MAX_PEERS)
		return;
	pthread_mutex_lock(&f->lock);
	struct udp_peer *pe = &f->peers[h->from];
	/* Another incarnation at the peer's address restarted it; one
	 * elsewhere is an earlier holder of a reused id (a zombie answering
	 * probes it got while stopped), no news of the holder. */
	if (pe->inc == h->inc)
		__atomic_store_n(&pe->rx_ns, farm_now_ns(), __ATOMIC_RELAXED);
	else if (pe->neps && !atomic_load(&pe->dead) &&
	         farm_udp_addr_admits(&pe->addr, pe->alen, from, flen))
		__atomic_store_n(&pe->rx_ns, 0,
		                 __ATOMIC_RELAXED); /* restarted */
	pthread_mutex_unlock(&f->lock);
}

/* A peer's fabric closed (its farewell, as a TCP reset would be): its
 * requests outstanding fail now, not after the bound; its sessions go. */
static void on_bye(struct udp_fabric *f, const struct udp_hdr *h)
{
	if (h->from >= UDP_MAX_PEERS)
		return;
	for (unsigned i = 0; i < UDP_MAX_SESS; i++)
		if (f->sess[i].used && f->sess[i].peer == h->from &&
		    f->sess[i].peer_inc == h->inc)
			f->sess[i].used = false;
	pthread_mutex_lock(&f->lock);
	if (f->peers[h->from].inc == h->inc && f->peers[h->from].neps)
		farm_udp_fail_peer_locked(f, h->from, true);
	pthread_mutex_unlock(&f->lock);
}

/* Say goodbye to every machine this one has sessions with (either side),
 * best effort; the dispatch thread has stopped. */
void farm_udp_bye(struct udp_fabric *f)
{
	struct udp_pkt p;
	farm_udp_hdr(f, &p.h, T_BYE, 0);
	for (uint32_t m = 0; m < UDP_MAX_PEERS; m++)
		if (f->peers[m].neps) {
			p.h.to = m;
			struct udp_out o = {&p, UDP_HDR, &f->peers[m].addr,
			                    f->peers[m].alen};
			send_raw(f, &o, 1);
		}
	for (unsigned i = 0; i < UDP_MAX_SESS; i++)
		if (f->sess[i].used) {
			p.h.to = f->sess[i].peer;
			struct udp_out o = {&p, UDP_HDR, &f->sess[i].addr,
			                    f->sess[i].alen};
			send_raw(f, &o, 1);
		}
}

/* One datagram: checked, then served or handed on. Returns the reply's
 * length (in *reply), 0 for none. */
static size_t on_dgram(struct udp_fabric *f, const struct udp_pkt *p, size_t n,
                       int mflags, const struct sockaddr_storage *from,
                       socklen_t flen, struct udp_pkt *reply)
{
	const struct udp_hdr *h = &p->h;
	if (n == UDP_HDR && h->type == T_CONNECT && !h->len &&
	    h->to != f->base.machine_id) {
		/* Someone else's address: say so, the caller's card is
		 * wrong (farm_ep_connect: -EINVAL). */
		farm_stat_add(&(f)->st.malformed, 1);
		memset(&reply->h, 0, sizeof(reply->h));
		reply->h.magic = UDP_MAGIC;
		reply->h.type = T_ACCEPT;
		reply->h.from = f->base.machine_id;
		reply->h.to = h->from;
		reply->h.cep = h->cep;
		reply->h.status = -EINVAL;
		return UDP_HDR;
	}
	(void)mflags; /* the datagram's: checked by split() */
	if (h->to != f->base.machine_id || h->from == f->base.machine_id) {
		farm_stat_add(&(f)->st.malformed, 1);
		return 0;
	}
	size_t rlen = 0;
	switch (h->type & ~UDP_MORE) {
	case T_REQ:
		farm_udp_serve_req(f, p, n, from, flen, reply, &rlen);
		if (rlen)
			heard(f, h);
		return rlen;
	case T_RESP:
	case T_NACK: on_resp(f, p); return 0;
	case T_ACCEPT: on_accept(f, h); return 0;
	case T_PONG: on_pong(f, h, from, flen); return 0;
	case T_BYE: on_bye(f, h); return 0;
	case T_CONNECT:
	case T_PING:
	case T_CLOSE:
		farm_udp_serve_ctl(f, p, n, from, flen, reply, &rlen);
		return rlen;
	default: farm_stat_add(&(f)->st.malformed, 1); return 0;
	}
}

/* The records of a datagram of @n bytes: their offsets and lengths, or 0
 * when anything is wrong with it (nothing of it is then served, and it
 * counts once as malformed). Each record is a header and its payload,
 * at an 8-byte aligned offset; each but the last has UDP_MORE in its
 * type, and the last ends the datagram exactly. */
static unsigned split(const uint8_t *d, size_t n, int mflags, socklen_t flen,
                      uint32_t *off, uint32_t *len)
{
	if (n > UDP_DGRAM_MAX || (mflags & MSG_TRUNC) ||
	    flen > sizeof(struct sockaddr_storage))
		return 0;
	size_t at = 0;
	for (unsigned k = 0; k < UDP_RECS_MAX; k++) {
		const struct udp_hdr *h = (const struct udp_hdr *)(d + at);
		if (n - at < UDP_HDR || h->magic != UDP_MAGIC ||
		    UDP_HDR + (size_t)h->len > n - at)
			return 0;
		off[k] = (uint32_t)at;
		len[k] = UDP_HDR + h->len;
		if (!(h->type & UDP_MORE))
			return at + len[k] == n ? k + 1 : 0;
		at += UDP_ALIGN8(len[k]);
		if (at > n)
			return 0;
	}
	return 0;
}

/* Datagram @i of a batch: its records served or handed on in order, the
 * replies packed for its sender. */
static void on_datagram(struct udp_fabric *f, struct udp_rxbuf *b, unsigned i,
                        const struct mmsghdr *m, struct udp_packer *pk)
{
	uint32_t off[UDP_RECS_MAX], len[UDP_RECS_MAX];
	const uint8_t *d = (const uint8_t *)&b->in[i];
	unsigned nr = split(d, m->msg_len, m->msg_hdr.msg_flags,
	                    m->msg_hdr.msg_namelen, off, len);
	if (!nr)
		farm_stat_add(&(f)->st.malformed, 1);
	for (unsigned k = 0; k < nr; k++) {
		size_t rl = on_dgram(f, (const struct udp_pkt *)(d + off[k]),
		                     len[k], 0, &b->from[i],
		                     m->msg_hdr.msg_namelen, &b->reply);
		if (rl)
			memcpy(farm_udp_packer_add(f, pk, rl, &b->from[i],
			                           m->msg_hdr.msg_namelen),
			       &b->reply, rl);
	}
}

/* Whether this thread is a fabric's dispatch thread (the trace says who
 * received a datagram). */
static _Thread_local bool in_dispatch;

/* Read the socket until it is empty; replies go in one sendmmsg per
 * batch received. Caller holds f->rx. Returns the datagrams read. */
static unsigned rx_drain_locked(struct udp_fabric *f)
{
	struct udp_rxbuf *b = f->rxb;
	unsigned got = 0;
	for (;;) {
		struct mmsghdr m[UDP_BATCH];
		struct iovec iov[UDP_BATCH];
		for (unsigned i = 0; i < UDP_BATCH; i++) {
			iov[i] = (struct iovec){&b->in[i], sizeof(b->in[i])};
			m[i].msg_hdr = (struct msghdr){
			        .msg_name = &b->from[i],
			        .msg_namelen = sizeof(b->from[i]),
			        .msg_iov = &iov[i],
			        .msg_iovlen = 1};
		}
		int r = recvmmsg(f->fd, m, UDP_BATCH, MSG_DONTWAIT, NULL);
		if (r <= 0) {
			farm_stat_add(&(f)->st.empty_drains, 1);
			return got;
		}
		got += (unsigned)r;
		UDP_TRACE(UDP_EV_RECV, in_dispatch);
		farm_stat_add(&(f)->st.rx_calls, 1);
		farm_stat_add(&(f)->st.rx_pkts, (uint64_t)r);
		struct udp_packer pk;
		farm_udp_packer_init(&pk, b->dg, b->out, UDP_BATCH,
		                     f->coalesce);
		for (int i = 0; i < r; i++)
			on_datagram(f, b, (unsigned)i, &m[i], &pk);
		farm_udp_packer_flush(f, &pk);
		if (r < (int)UDP_BATCH)
			return got;
	}
}

/* A poller drains: the lease (UDP_LEASE_NS) starts again, so the
 * dispatch thread is not woken for the datagrams it receives. */
unsigned farm_udp_rx_drain(struct udp_fabric *f)
{
	unsigned got = 0;
	if (pthread_mutex_trylock(&f->rx) == 0) {
		uint64_t lease =
		        (uint64_t)farm_udp_knob_value(FARM_UDP_KNOB_LEASE_MS) *
		        UDP_LEASE_NS;
		atomic_store_explicit(&f->lease_ns, farm_now_ns() + lease,
		                      memory_order_relaxed);
		got = rx_drain_locked(f);
		pthread_mutex_unlock(&f->rx);
	}
	return got;
}

/* A poller with nothing outstanding serves what arrives, as the thread
 * that owns the sessions does in eRPC: a request is then answered by the
 * loop that polls anyway, not by a dispatch thread woken for it (which
 * shares the loop's core: a wake-up and a preemption, tens of
 * microseconds here). At most every UDP_IDLE_DRAIN_NS a fabric while the
 * poller spins (back within UDP_SPIN_GAP_NS of its last poll, *@polled_ns,
 * its queue's), every UDP_BUSY_DRAIN_NS while it has other work between
 * polls, which the system calls would slow. */
unsigned farm_udp_rx_drain_idle(struct udp_fabric *f, uint64_t *polled_ns)
{
	uint64_t now = farm_now_ns();
	uint64_t every = now - *polled_ns < UDP_SPIN_GAP_NS ? UDP_IDLE_DRAIN_NS
	                                                    : UDP_BUSY_DRAIN_NS;
	*polled_ns = now;
	if (now - atomic_load_explicit(&f->idle_drain_ns,
	                               memory_order_relaxed) <
	    every)
		return 0;
	atomic_store_explicit(&f->idle_drain_ns, now, memory_order_relaxed);
	unsigned got = farm_udp_rx_drain(f);
	*polled_ns = farm_now_ns();
	return got;
}

/* A poller with requests outstanding and nothing arriving sleeps in the
 * kernel until a datagram comes (as a plain UDP client sleeps in
 * recvmmsg) or @max_ns passes, then drains. It holds f->rx meanwhile, so
 * the dispatch thread is not woken for the same datagram (it keeps the
 * timers on its tick). Returns the datagrams read; 0 at once when another
 * thread holds the receive side; 1 without sleeping when @done(@arg)
 * says a request of the poller's finished: another thread drained its
 * reply after the poller last looked and before it took f->rx (replies
 * complete only under f->rx, so none can finish unseen once it holds
 * it), and the socket would keep it asleep for @max_ns. */
unsigned farm_udp_rx_sleep(struct udp_fabric *f, uint64_t max_ns,
                           bool (*done)(void *), void *arg)
{
	if (pthread_mutex_trylock(&f->rx))
		return 0;
	if (done && done(arg)) {
		pthread_mutex_unlock(&f->rx);
		return 1;
	}
	struct pollfd p = {.fd = f->fd, .events = POLLIN};
	struct timespec ts = {.tv_sec = (time_t)(max_ns / 1000000000ull),
	                      .tv_nsec = (long)(max_ns % 1000000000ull)};
	farm_stat_add(&(f)->st.poller_sleeps, 1);
	unsigned got = 0;
	UDP_TRACE(UDP_EV_SLEEP, 0);
	int pr = ppoll(&p, 1, &ts, NULL);
	UDP_TRACE(UDP_EV_WOKE, pr);
	if (pr > 0)
		got = rx_drain_locked(f);
	pthread_mutex_unlock(&f->rx);
	return got;
}

/* ---- timers: retransmission, liveness ------------------------------------ */

/* Fail everything outstanding to @peer (f->lock held); true when it was
 * alive until now. @report: its death goes to the death callback (not
 * when the layers above removed it themselves: farm_fabric_revoke). */
void *farm_udp_dispatch_main(void *arg)
{
	struct udp_fabric *f = arg;
	in_dispatch = true;
	struct pollfd p[3] = {{.fd = f->stop_fd, .events = POLLIN},
	                      {.fd = f->kick_fd, .events = POLLIN},
	                      {.fd = f->fd, .events = POLLIN}};
	for (;;) {
		/* A poller draining the socket holds rx: it serves what
		 * arrives, and this thread keeps the timers, not waiting
		 * behind a lock a spinning poller takes again and again (a
		 * mutex is not fair). A poller that drained within the lease
		 * receives too: this thread does not wait for datagrams then,
		 * so it is not woken for theirs (it shares their core), and
		 * takes the socket back when the lease runs out or a thread
		 * parks (farm_udp_before_wait). */
		bool drained = pthread_mutex_trylock(&f->rx) == 0;
		if (drained) {
			rx_drain_locked(f);
			pthread_mutex_unlock(&f->rx);
		}
		int ms = farm_udp_timers_if_due(f);
		uint64_t lease = atomic_load_explicit(&f->lease_ns,
		                                      memory_order_relaxed);
		int64_t left = (int64_t)(lease - farm_now_ns());
		bool watch = drained && (!lease || left <= 0);
		if (drained && !watch)
			ms = FARM_MIN(ms, (int)((left + 999999) / 1000000));
		farm_stat_add(&(f)->st.dispatch_sleeps, 1);
		int n = poll(p, watch ? 3 : 2, drained ? ms : 1);
		UDP_TRACE(UDP_EV_DWAKE, n);
		if (n > 0 && (p[0].revents & POLLIN))
			break;
		if (n > 0 && (p[1].revents & POLLIN)) {
			uint64_t v;
			if (read(f->kick_fd, &v, sizeof(v)) < 0 &&
			    errno != EAGAIN)
				farm_warn("udp: kick: %s", strerror(errno));
		}
	}
	return NULL;
}
