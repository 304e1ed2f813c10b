/*
 * The udp provider's target side: one-sided requests served as small RPCs
 * (FaSST's approach) by whichever thread drains the socket (the dispatch
 * thread, or a poller that found it free). Each request packet is checked
 * against this machine's registrations before a byte moves, executed once
 * and in sequence order per session (go-back-N receiver: a packet ahead of
 * the expected one is dropped, one behind it is a duplicate answered from
 * the reply cache), and answered. The guarantees the layers above rely on
 * are kept here, where the memory is:
 *   - READ: copied line by line as a seqlock reader of each line's first
 *     word (util/lines.h), as the shm provider does: line-atomic;
 *   - WRITE: a piece's body, then its last 8 bytes with one release store,
 *     and pieces executed in order: the last word lands last;
 *   - CAS: one atomic compare-exchange of an aligned word;
 *   - NOTIFY: farm_wake_word on a word inside a writable registration.
 * The caller holds f->rx (sessions are touched only under it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/udp_int.h"
#include "util/lines.h"

/* A line changing under a READ this many times gives up (-EAGAIN). Lower
 * than shm's: the copy runs under f->rx, which every session waits on. */
#define UDP_LINE_RETRIES 100000u

/* The registration holding [addr, addr + len) with @access under @key, or
 * a status. tab_lock held (read). */
static int resolve(struct udp_fabric *f, uint64_t key, uint64_t addr,
                   uint64_t len, unsigned access)
{
	const struct udp_tent *e = &f->table[key & (UDP_TABLE_N - 1)];
	if (!e->key || e->key != key)
		return FARM_EREMOTE_KEY;
	if (addr < e->addr || addr - e->addr > e->len ||
	    len > e->len - (addr - e->addr))
		return FARM_EREMOTE_ACCESS;
	if ((e->access & access) != access)
		return FARM_EREMOTE_ACCESS;
	return 0;
}

/* Test-only (knob LINE_ATOMIC 0): 8 bytes at a time, highest first,
 * pausing between words, as a DMA engine without line atomicity could (a
 * bare memcpy of a line arrives whole on x86 and would not show that the
 * torn-read test can fail). */
static void read_words_reversed(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t w = n / 8;
	memcpy(dst + w * 8, src + w * 8, n - w * 8);
	while (w--) {
		uint64_t v = atomic_load_explicit(
		        (const _Atomic uint64_t *)(src + w * 8),
		        memory_order_relaxed);
		memcpy(dst + w * 8, &v, 8);
		for (int k = 0; k < 64; k++)
			farm_cpu_relax();
	}
}

/* A piece of a WRITE: the body, then its last 8 bytes as one store when
 * aligned (release: pairs with a reader's acquire load of that word), so a
 * polled last word (a ring frame's trailer) is seen only after the rest.
 * An aligned first word is stored whole, never torn. */
static void write_piece(uint8_t *dst, const uint8_t *src, size_t len,
                        bool unordered)
{
	if (len < 8) {
		memcpy(dst, src, len);
		return;
	}
	size_t body = len - 8;
	uint64_t last;
	memcpy(&last, src + body, 8);
	if (unordered) {
		memcpy(dst + body, &last, 8); /* test-only: last word first */
		atomic_signal_fence(memory_order_seq_cst);
		memcpy(dst, src, body);
		return;
	}
	if (((uintptr_t)dst & 7) == 0 && body >= 8) {
		uint64_t first;
		memcpy(&first, src, 8);
		atomic_store_explicit((_Atomic uint64_t *)dst, first,
		                      memory_order_relaxed);
		memcpy(dst + 8, src + 8, body - 8);
	} else {
		memcpy(dst, src, body);
	}
	if (((uintptr_t)(dst + body) & 7) == 0) {
		/* Pairs with the reader's acquire load of the last word
		 * (wire_load in msg/wire.h, poll_log in txn/participant.c). */
		atomic_store_explicit((_Atomic uint64_t *)(dst + body), last,
		                      memory_order_release);
	} else {
		/* The same order for a last word that is not aligned. No
		 * acquire load pairs with it: the words readers poll (ring
		 * frames, log records) are aligned. */
		atomic_thread_fence(memory_order_release);
		memcpy(dst + body, &last, 8);
	}
}

/* The first piece of a WRITE names the whole request's range (cmp: start,
 * swp: length): it is checked before the piece executes, so a request that
 * a later piece would fail leaves the region untouched. The piece must lie
 * inside the range it names. tab_lock held (read). */
static int check_whole(struct udp_fabric *f, const struct udp_hdr *h,
                       uint64_t len, unsigned acc)
{
	if (h->raddr != h->cmp || len > h->swp)
		return FARM_ECORRUPT;
	return resolve(f, h->rkey, h->cmp, h->swp, acc);
}

/* Execute one request packet into @reply (header prepared by the caller);
 * returns the status. */
static int execute(struct udp_fabric *f, const struct udp_pkt *p, size_t n,
                   struct udp_pkt *reply)
{
	const struct udp_hdr *h = &p->h;
	uint64_t len = h->op == FARM_WR_READ ? h->rlen : h->len;
	unsigned acc = 0;
	switch (h->op) {
	case FARM_WR_READ:
		acc = FARM_ACCESS_REMOTE_READ;
		if (h->len || h->rlen > UDP_PIECE)
			return FARM_ECORRUPT;
		break;
	case FARM_WR_WRITE: acc = FARM_ACCESS_REMOTE_WRITE; break;
	case FARM_WR_CAS:
		acc = FARM_ACCESS_REMOTE_ATOMIC;
		if (h->len || (h->raddr & 7))
			return FARM_ECORRUPT;
		len = 8;
		break;
	case FARM_WR_NOTIFY:
		acc = FARM_ACCESS_REMOTE_WRITE;
		if (h->len || (h->raddr & 3))
			return FARM_ECORRUPT;
		len = 4;
		break;
	default: return FARM_ECORRUPT;
	}
	(void)n;
	pthread_rwlock_rdlock(&f->tab_lock);
	int st = resolve(f, h->rkey, h->raddr, len, acc);
	if (!st && h->op == FARM_WR_WRITE && h->swp)
		st = check_whole(f, h, len, acc);
	if (st) {
		pthread_rwlock_unlock(&f->tab_lock);
		return st;
	}
	uint8_t *mem = (uint8_t *)(uintptr_t)h->raddr;
	uint32_t tf = 0;
#ifdef FARM_FAULT_INJECTION
	tf = h->tflags;
#endif
	switch (h->op) {
	case FARM_WR_READ:
		if (!(tf & UDP_TF_TEARABLE)) {
			if (FARM_UNLIKELY(!farm_lines_copy(
			            reply->data, mem, len, UDP_LINE_RETRIES))) {
				/* No consistent copy: never answer torn
				 * data as a success. */
				farm_stat_add(&(f)->st.line_giveups, 1);
				st = -EAGAIN;
			}
		} else
			read_words_reversed(reply->data, mem, len);
		reply->h.len = (uint16_t)len;
		break;
	case FARM_WR_WRITE:
		write_piece(mem, p->data, len, tf & UDP_TF_UNORDERED);
		break;
	case FARM_WR_CAS: {
		uint64_t cmp = h->cmp;
		atomic_compare_exchange_strong((_Atomic uint64_t *)mem, &cmp,
		                               h->swp);
		reply->h.cmp = cmp; /* the value found */
		break;
	}
	default: farm_wake_word((const uint32_t *)mem); break;
	}
	pthread_rwlock_unlock(&f->tab_lock);
	return st;
}

static bool same_addr(const struct sockaddr_storage *a, socklen_t al,
                      const struct sockaddr_storage *b, socklen_t bl)
{
	return al == bl && memcmp(a, b, al) == 0;
}

static void reply_hdr(struct udp_fabric *f, const struct udp_hdr *h,
                      struct udp_pkt *reply, uint8_t type)
{
	farm_udp_hdr(f, &reply->h, type, h->from);
	if (type == T_ACCEPT) /* the initiator checks it (on_accept) */
		reply->h.rlen = f->base.wire;
	reply->h.op = h->op;
	reply->h.sess = h->sess;
	reply->h.token = h->token;
	reply->h.cep = h->cep;
	reply->h.seq = h->seq;
}

/* Pairs with the fetch_or in udp.c udp_revoke(), which then takes f->rx
 * (held here) so no request that passed this check outlives the revoke. */
static bool revoked(struct udp_fabric *f, uint32_t m)
{
	return m < UDP_MAX_PEERS &&
	       (atomic_load(&f->revoked[m / 64]) >> (m % 64) & 1);
}

/* Machine @m's admission as a new holder of a reused id (udp_admit), or
 * NULL when it has none. f->rx held (pairs with udp_admit, which writes
 * the table under it). */
static const struct udp_admitted *admission(const struct udp_fabric *f,
                                            uint32_t m)
{
	if (!f->admitted || m >= UDP_MAX_PEERS || !f->admitted[m].alen)
		return NULL;
	return &f->admitted[m];
}

/* Whether machine @m's request from @from may run: an id admitted as a
 * new holder's only from the address it was admitted at; its old holder,
 * a zombie still running elsewhere, is fenced. f->rx held. */
static bool admitted_at(const struct udp_fabric *f, uint32_t m,
                        const struct sockaddr_storage *from, socklen_t flen)
{
	const struct udp_admitted *a = admission(f, m);
	return !a || farm_udp_addr_admits(&a->addr, a->alen, from, flen);
}

void farm_udp_serve_req(struct udp_fabric *f, const struct udp_pkt *p, size_t n,
                        const struct sockaddr_storage *from, socklen_t flen,
                        struct udp_pkt *reply, size_t *rlen)
{
	const struct udp_hdr *h = &p->h;
	*rlen = 0;
	struct udp_sess *s = h->sess < UDP_MAX_SESS ? &f->sess[h->sess] : NULL;
	if (!s || !s->used || s->token != h->token || s->peer != h->from ||
	    s->peer_inc != h->inc || s->cep != h->cep ||
	    !same_addr(&s->addr, s->alen, from, flen)) {
		farm_stat_add(&(f)->st.bad_session, 1);
		if (!s || !s->used || s->token != h->token) {
			/* Unknown or stale (closed, or given up when the
			 * table was full): that endpoint fails with
			 * -ENOTCONN, not the peer by silence. A live
			 * session's id and token from elsewhere (a forgery)
			 * get nothing. */
			reply_hdr(f, h, reply, T_RESP);
			reply->h.status = -ENOTCONN;
			*rlen = UDP_HDR;
		}
		return;
	}
	s->seen_ns = farm_now_ns();
	if (revoked(f, h->from) || !admitted_at(f, h->from, from, flen)) {
		/* A removed machine, or the old holder of a reused id:
		 * nothing executes; it learns why. */
		farm_stat_add(&(f)->st.fenced, 1);
		reply_hdr(f, h, reply, T_RESP);
		reply->h.status = FARM_EFENCED;
		*rlen = UDP_HDR;
		return;
	}
	bool gbn = farm_udp_knob_value(FARM_UDP_KNOB_GO_BACK_N);
	if (gbn && h->seq != s->expect) {
		struct udp_cached *c = &s->cache[h->seq % UDP_WINDOW];
		if (h->seq > s->expect) {
			farm_stat_add(&(f)->st.out_of_order, 1);
			/* A gap: say once which packet is missing, so the
			 * initiator resends now, not after its RTO. */
			if (s->nacked != s->expect + 1) {
				s->nacked = s->expect + 1;
				farm_stat_add(&(f)->st.nacks, 1);
				reply_hdr(f, h, reply, T_NACK);
				reply->h.seq = s->expect;
				*rlen = UDP_HDR;
			}
		} else if (c->seq == h->seq && c->len) {
			farm_stat_add(&(f)->st.replayed, 1);
			memcpy(reply, &c->pkt, c->len);
			*rlen = c->len;
		} else {
			farm_stat_add(&(f)->st.too_old, 1);
		}
		return;
	}
	reply_hdr(f, h, reply, T_RESP);
	/* After a failure the session executes nothing more (a verbs QP in
	 * the error state): later requests are flushed. */
	int st = s->failed ? FARM_EFLUSHED : execute(f, p, n, reply);
	if (st) {
		s->failed = true;
		reply->h.len = 0;
	}
	reply->h.status = st;
	farm_stat_add(&(f)->st.served, 1);
	UDP_TRACE(UDP_EV_SERVED, h->seq);
	*rlen = UDP_HDR + reply->h.len;
	if (!gbn)
		return;
	struct udp_cached *c = &s->cache[h->seq % UDP_WINDOW];
	c->seq = h->seq;
	c->len = (uint16_t)*rlen;
	memcpy(&c->pkt, reply, *rlen);
	s->expect++;
}

/* A full table gives up only a session idle past the timeout (the one idle
 * longest): an initiator with a request in flight retransmits it well
 * within the timeout, so such a session has nothing in flight, and its
 * endpoint, if it posts again, gets -ENOTCONN on that endpoint alone. A
 * session in use is never taken: its endpoint's packets would be dropped
 * and the peer declared dead. -1 when none qualifies. */
static int evictable(struct udp_fabric *f, uint64_t now)
{
	int pick = -1;
	uint64_t oldest = now;
	for (unsigned i = 0; i < UDP_MAX_SESS; i++) {
		uint64_t seen = f->sess[i].seen_ns;
		if (now - seen > f->timeout_ns && seen <= oldest) {
			oldest = seen;
			pick = (int)i;
		}
	}
	return pick;
}

/* A new session for the CONNECT @h from @from. */
static void accept_conn(struct udp_fabric *f, const struct udp_hdr *h,
                        const struct sockaddr_storage *from, socklen_t flen,
                        struct udp_pkt *reply, size_t *rlen)
{
	if (h->rlen != f->base.wire) {
		/* Another build: no session. The initiator logs it, naming
		 * both versions (our ACCEPT carries ours). */
		farm_stat_add(&(f)->st.conn_refused, 1);
		reply_hdr(f, h, reply, T_ACCEPT);
		reply->h.status = -EPROTO;
		*rlen = UDP_HDR;
		return;
	}
	uint64_t now = farm_now_ns();
	bool fenced =
	        revoked(f, h->from) || !admitted_at(f, h->from, from, flen);
	bool admitted = admission(f, h->from) != NULL;
	int pick = -1;
	for (unsigned i = 0; i < UDP_MAX_SESS; i++) {
		struct udp_sess *s = &f->sess[i];
		if (s->used && s->peer == h->from && s->cep == h->cep &&
		    s->peer_inc == h->inc) {
			pick = (int)i; /* a retried CONNECT: same answer */
			break;
		}
		/* Its previous incarnation's go (a restart), but neither
		 * for a fenced CONNECT (an old holder of a reused id, a
		 * zombie, must not close the new holder's sessions) nor,
		 * for an admitted new holder, where they are elsewhere (the
		 * zombie's: its requests there learn FARM_EFENCED). */
		if (s->used && s->peer == h->from && s->peer_inc != h->inc &&
		    !fenced &&
		    (!admitted || same_addr(&s->addr, s->alen, from, flen)))
			s->used = false;
		if (!s->used && pick < 0)
			pick = (int)i;
	}
	if (pick < 0)
		pick = evictable(f, now);
	if (pick < 0) { /* full of live sessions: this connect fails */
		farm_stat_add(&(f)->st.conn_refused, 1);
		reply_hdr(f, h, reply, T_ACCEPT);
		reply->h.status = -ENOSPC;
		*rlen = UDP_HDR;
		return;
	}
	struct udp_sess *s = &f->sess[pick];
	if (!s->cache)
		s->cache = calloc(UDP_WINDOW, sizeof(*s->cache));
	if (!s->cache) {
		s->used = false;
		return;
	}
	if (!(s->used && s->peer == h->from && s->cep == h->cep &&
	      s->peer_inc == h->inc)) {
		uint64_t r = farm_now_ns() ^ (f->inc * 0x9e3779b97f4a7c15ull) ^
		             (uint64_t)pick << 40;
		s->used = true;
		s->failed = false;
		s->token = (uint32_t)(farm_rand64(&r) | 1);
		s->peer = h->from;
		s->peer_inc = h->inc;
		s->cep = h->cep;
		s->expect = 0;
		s->nacked = 0;
		memset(s->cache, 0, UDP_WINDOW * sizeof(*s->cache));
	}
	memcpy(&s->addr, from, flen);
	s->alen = flen;
	s->seen_ns = now;
	reply_hdr(f, h, reply, T_ACCEPT);
	reply->h.sess = (uint32_t)pick;
	reply->h.token = s->token;
	*rlen = UDP_HDR;
}

void farm_udp_serve_ctl(struct udp_fabric *f, const struct udp_pkt *p, size_t n,
                        const struct sockaddr_storage *from, socklen_t flen,
                        struct udp_pkt *reply, size_t *rlen)
{
	const struct udp_hdr *h = &p->h;
	*rlen = 0;
	(void)n;
	if (h->len) {
		farm_stat_add(&(f)->st.malformed, 1);
		return;
	}
	/* A control record may sit in a chain (UDP_MORE): read its type. */
	switch (h->type & ~UDP_MORE) {
	case T_CONNECT:
		/* Even from a revoked machine: its requests are refused one
		 * by one (FARM_EFENCED), so it learns why. */
		accept_conn(f, h, from, flen, reply, rlen);
		return;
	case T_PING:
		reply_hdr(f, h, reply, T_PONG);
		*rlen = UDP_HDR;
		return;
	case T_CLOSE: {
		struct udp_sess *s =
		        h->sess < UDP_MAX_SESS ? &f->sess[h->sess] : NULL;
		if (s && s->used && s->token == h->token &&
		    s->peer == h->from && s->peer_inc == h->inc &&
		    same_addr(&s->addr, s->alen, from, flen))
			s->used = false;
		else
			farm_stat_add(&(f)->st.bad_session, 1);
		return;
	}
	default: farm_stat_add(&(f)->st.malformed, 1); return;
	}
}
