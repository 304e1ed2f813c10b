/*
 * The udp provider's timers and peer deaths, run by the dispatch thread
 * (udp_wire.c) when due: retransmission after the RTO (go-back-N from the
 * oldest unanswered packet), liveness probes every hb_ns, a peer declared
 * dead past the bound and its outstanding requests failed, and the death
 * callback told from this thread only.
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "fabric/udp_int.h"
#include "util/log.h"

/* Endpoint @ep's requests outstanding fail (f->lock and ep->lock held). */
static void fail_ep_locked(struct udp_ep *ep)
{
	for (uint32_t k = ep->tail; k != ep->head; k++) {
		struct udp_slot *s = &ep->slots[k & ep->mask];
		if (s->state == S_QUEUED) {
			if (!s->err)
				s->err = FARM_EPEERDEAD;
			/* Release: pairs with udp_cq_poll's acquire load
			 * (the error is seen with the state). */
			__atomic_store_n(&s->state, S_DONE, __ATOMIC_RELEASE);
			/* Sequence numbers the target never saw are
			 * skipped now: a later post would sit ahead of its
			 * order for ever. */
			ep->sw_failed = true;
		}
	}
	ep->snd_una = ep->snd_nxt = ep->next_pkt;
	ep->acked = 0;
	ep->send_slot = ep->head;
}

bool farm_udp_fail_peer_locked(struct udp_fabric *f, uint32_t peer, bool report)
{
	bool was = !atomic_exchange(&f->peers[peer].dead, 1);
	if (was && report) {
		f->peers[peer].report = true;   /* by the dispatch thread */
		atomic_store(&f->deaths, true); /* pairs with report_deaths */
	}
	for (unsigned i = 0; i < f->eps_hi; i++) {
		struct udp_ep *ep = f->eps[i];
		if (!ep || ep->base.peer != peer)
			continue;
		pthread_mutex_lock(&ep->lock);
		fail_ep_locked(ep);
		pthread_mutex_unlock(&ep->lock);
	}
	return was;
}

static void report_death(struct udp_fabric *f, uint32_t peer)
{
	farm_info("udp: machine %" PRIu32 " unreachable: declared dead", peer);
	pthread_mutex_lock(&f->death_mu);
	if (f->death_fn)
		f->death_fn(f->death_ctx, peer);
	pthread_mutex_unlock(&f->death_mu);
}

/* Tell the death callback, from the dispatch thread only: a poller that
 * drained the socket may hold locks of the layers above. */
static void report_deaths(struct udp_fabric *f)
{
	/* Most passes have nothing to report: one flag, not a lock per
	 * peer. Pairs with the store in farm_udp_fail_peer_locked. */
	if (!atomic_exchange(&f->deaths, false))
		return;
	for (uint32_t m = 0; m < UDP_MAX_PEERS; m++) {
		pthread_mutex_lock(&f->lock);
		bool r = f->peers[m].report;
		f->peers[m].report = false;
		pthread_mutex_unlock(&f->lock);
		if (r)
			report_death(f, m);
	}
}

/* Whether @now is more than @d after @t. Another thread may have stored a
 * @t later than the @now this pass took: that is not "long ago". */
static bool later(uint64_t now, uint64_t t, uint64_t d)
{
	return (int64_t)(now - t) > (int64_t)d;
}

/* One endpoint's timers (f->lock and its lock held): retransmission after
 * the RTO (go-back-N from the oldest unanswered packet) and the death
 * bound. Returns whether it has packets outstanding; sets *dead. */
static bool ep_timers(struct udp_ep *ep, uint64_t now, bool *dead)
{
	if (ep->snd_una == ep->next_pkt)
		return false;
	if (farm_udp_ep_paused(ep)) {
		ep->progress_ns = now; /* held back on purpose */
		return true;
	}
	if (later(now, ep->progress_ns, ep->fab->timeout_ns)) {
		*dead = true;
		return true;
	}
	if (ep->snd_una < ep->snd_nxt && now >= ep->rto_at)
		farm_udp_ep_send(ep, ep->snd_una, UINT64_MAX, true);
	else if (ep->snd_nxt < ep->next_pkt)
		farm_udp_ep_pump(ep); /* unpaused, or the window opened */
	return true;
}

/* Peers' liveness: a probe every hb_ns to each peer this machine has
 * endpoints to; nothing heard for the bound: dead. f->lock held. */
static void peer_timers(struct udp_fabric *f, uint64_t now, uint32_t *dead,
                        unsigned *ndead)
{
	for (uint32_t m = 0; m < f->peers_hi; m++) {
		struct udp_peer *pe = &f->peers[m];
		if (!pe->neps || atomic_load(&pe->dead))
			continue;
		if (later(now, __atomic_load_n(&pe->rx_ns, __ATOMIC_RELAXED),
		          f->timeout_ns)) {
			if (*ndead < 16)
				dead[(*ndead)++] = m;
			continue;
		}
		if (!later(now, pe->ping_ns, f->hb_ns))
			continue;
		pe->ping_ns = now;
		struct udp_pkt p;
		farm_udp_hdr(f, &p.h, T_PING, m);
		struct udp_out o = {&p, UDP_HDR, &pe->addr, pe->alen};
		farm_udp_send(f, &o, 1);
		farm_stat_add(&(f)->st.pings, 1);
	}
}

/* Returns how long until the next pass is due, in ns. */
static uint64_t timers(struct udp_fabric *f, uint64_t now)
{
	uint32_t dead[16];
	unsigned ndead = 0;
	bool busy = false;
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->eps_hi; i++) {
		struct udp_ep *ep = f->eps[i];
		if (!ep)
			continue;
		bool d = false;
		if (pthread_mutex_trylock(&ep->lock)) {
			busy = true; /* its owner posts: next pass */
			continue;
		}
		busy |= ep_timers(ep, now, &d);
		uint32_t pr = ep->base.peer;
		/* An endpoint to an earlier holder of a reused id (one
		 * stopped, a zombie): it fails alone; the id's holder is
		 * another machine, alive. */
		if (d && pr < UDP_MAX_PEERS && f->peers[pr].inc != ep->inc) {
			fail_ep_locked(ep);
			d = false;
		}
		pthread_mutex_unlock(&ep->lock);
		if (d && pr < UDP_MAX_PEERS && ndead < 16)
			dead[ndead++] = pr;
	}
	peer_timers(f, now, dead, &ndead);
	for (unsigned k = 0; k < ndead; k++)
		if (farm_udp_fail_peer_locked(f, dead[k], true))
			farm_stat_add(&(f)->st.timeouts, 1);
	pthread_mutex_unlock(&f->lock);
	report_deaths(f);
#ifdef FARM_FAULT_INJECTION
	farm_udp_flush_held(f);
#endif
	farm_stat_add(&(f)->st.timer_passes, 1);
	/* Idle, half the probe interval: a probe then goes out at most 1.5
	 * intervals after the last, 2.5 or more of them within the bound. */
	return busy ? UDP_TICK_NS : FARM_MIN(UDP_IDLE_TICK_NS, f->hb_ns / 2);
}

/* The timers run when due, not on every wake-up: under load the dispatch
 * thread wakes for every few datagrams, and a pass walks every endpoint
 * and peer under f->lock. Their resolution is a tick (the RTO is 5 ms,
 * the death bound seconds). Returns how long poll(2) may sleep, in ms. */
int farm_udp_timers_if_due(struct udp_fabric *f)
{
	uint64_t now = farm_now_ns();
	/* Pairs with idle_poll's exchange (udp.c): a poller waited a tick
	 * without replies, so the timers go to the busy tick now. */
	if (atomic_load_explicit(&f->kick, memory_order_relaxed) &&
	    atomic_exchange(&f->kick, false))
		f->timers_at = now;
	if ((int64_t)(now - f->timers_at) >= 0)
		f->timers_at = now + timers(f, now);
	uint64_t left = f->timers_at - now;
	return (int)FARM_MAX(1u, (left + 999999u) / 1000000u);
}

void farm_udp_kick(struct udp_fabric *f)
{
	uint64_t one = 1;
	UDP_TRACE(UDP_EV_KICK, 0);
	if (write(f->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		farm_warn("udp: waking the dispatch thread: %s",
		          strerror(errno));
}
