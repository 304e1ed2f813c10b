/*
 * Leases between every machine and the configuration manager (lease.h;
 * FaRM SOSP'15 section 5.1).
 *
 * One thread per machine owns the socket and every deadline. It sleeps
 * in ppoll(2) until the next renewal or expiry, or until a datagram or a
 * configuration change (an eventfd) arrives. All state is under one mutex,
 * taken by the thread for each batch of work and by the setters; the
 * callbacks run with it released.
 *
 * Clocks: CLOCK_MONOTONIC on each machine; a lease is only ever judged on
 * the clock of the machine that started its timer, and the holder's timer
 * starts at its request's send, before the grantor's starts at its
 * receipt, so the holder always gives up first (no clock-drift bound is
 * needed on one host; across hosts FaRM's bounded-drift assumption
 * applies).
 */
#include "recovery/lease.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

#define LEASE_MAGIC 0x4c454153u /* "LEAS" */

enum {
	MSG_REQUEST = 1,
	MSG_GRANT_REQUEST = 2,
	MSG_GRANT = 3,
	MSG_PROBE = 4, /* seq: the prober's nonce */
	MSG_PROBE_ACK = 5
};

struct lease_msg {
	uint32_t magic;
	uint16_t type;
	uint16_t pad;
	uint32_t from, to;
	uint64_t config_id;
	uint64_t seq;    /* the requester's */
	uint64_t t_sent; /* the requester's send time, echoed */
	uint64_t cm_seq; /* GRANT+REQUEST / GRANT: the CM's request */
	uint64_t cm_t_sent;
};

struct peer {
	uint32_t id;
	struct sockaddr_in sa;
	/* On the CM: this member's lease at us, and ours at it. */
	uint64_t last_req_ns;   /* its last REQUEST (or the config start) */
	uint64_t granted_until; /* our lease at it: t' + lease */
	uint64_t last_renew_ns; /* for the gap statistics */
	bool suspected;
	/* Why: a renewal withdraws a lapsed-lease suspicion (the probe found
	 * it alive), never a reported one (a death notice is definitive). */
	enum farm_lease_why why;
};

struct farm_lease {
	struct farm_lease_attr a;
	uint64_t lease_ns;
	int sock, evfd;
	char addr[FARM_LEASE_ADDR_MAX];
	pthread_t th;
	pthread_mutex_t mu;
	bool stop, muted;
	bool held;    /* farm_lease_hold: renewals go on, nothing is judged */
	bool retired; /* farm_lease_retire: not a member, nothing runs */

	/* The configuration. */
	uint64_t config_id;
	uint64_t cm_since; /* the first configuration of this CM seen here */
	uint32_t cm;
	bool have_config;
	struct peer peers[FARM_LEASE_MAX_PEERS];
	unsigned npeers;

	/* As a member (not the CM). */
	uint64_t seq;
	uint64_t next_send_ns;
	uint64_t own_until; /* our lease at the CM */
	/* Until when this machine may serve reads (farm_lease_attr.serve_word):
	 * a member, its lease at the CM; the CM, the latest lease a member
	 * granted it. UINT64_MAX before any configuration. */
	_Atomic uint64_t own_serve; /* where serve points without a_.serve */
	_Atomic uint64_t *serve;
	uint64_t cm_until;     /* the CM's lease at us */
	uint64_t own_renew_ns; /* last renewal of our lease */
	bool lost_reported;
	bool own_granted; /* a grant came in this CM's time (to us, or, on
	                     the CM, from any member) */

	/* A probe in progress (farm_lease_probe; one at a time). */
	pthread_mutex_t probe_mu; /* serialises probers */
	pthread_cond_t probe_cv;  /* with mu: an answer arrived */
	uint64_t probe_nonce;
	uint32_t probe_ids[FARM_LEASE_MAX_PEERS];
	bool probe_ok[FARM_LEASE_MAX_PEERS];
	unsigned nprobe;
	/* Machines the fabric saw die (farm_lease_probe_dead; dropped by
	 * farm_lease_set_config when a view leaves them out or names a new
	 * holder): a probe does not wait for their answer. */
	uint32_t dead[FARM_LEASE_MAX_PEERS];
	unsigned ndead;

	struct farm_lease_stats st;
};

static _Atomic bool no_expiry; /* testing */

int farm_lease_testing_no_expiry(bool on)
{
	if (!farm_fault_built())
		return -ENOTSUP;
	atomic_store(&no_expiry, on);
	return 0;
}

static _Atomic bool any_source; /* testing */

int farm_lease_testing_any_source(bool on)
{
	if (!farm_fault_built())
		return -ENOTSUP;
	atomic_store(&any_source, on);
	return 0;
}

static uint64_t now_ns(void)
{
	return farm_now_ns();
}

static int parse_addr(const char *s, struct sockaddr_in *sa)
{
	char host[32];
	unsigned port;
	if (!s || strncmp(s, "udp:", 4))
		return -EINVAL;
	const char *c = strrchr(s + 4, ':');
	if (!c || (size_t)(c - (s + 4)) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s + 4, (size_t)(c - (s + 4)));
	host[c - (s + 4)] = 0;
	char *end;
	unsigned long p = strtoul(c + 1, &end, 10);
	if (*end || !p || p > 65535)
		return -EINVAL;
	port = (unsigned)p;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return -EINVAL;
	return 0;
}

static struct peer *find_peer(farm_lease *l, uint32_t id)
{
	for (unsigned i = 0; i < l->npeers; i++)
		if (l->peers[i].id == id)
			return &l->peers[i];
	return NULL;
}

static bool is_cm(const farm_lease *l)
{
	return l->have_config && l->cm == l->a.self_id;
}

static void send_msg(farm_lease *l, const struct peer *p, int type,
                     uint64_t seq, uint64_t t_sent, uint64_t cm_seq,
                     uint64_t cm_t)
{
	struct lease_msg m = {.magic = LEASE_MAGIC,
	                      .type = (uint16_t)type,
	                      .from = l->a.self_id,
	                      .to = p->id,
	                      .config_id = l->config_id,
	                      .seq = seq,
	                      .t_sent = t_sent,
	                      .cm_seq = cm_seq,
	                      .cm_t_sent = cm_t};
	/* A lost datagram is a missed renewal, which the next one covers
	 * (renewals come 5 times per lease). */
	if (sendto(l->sock, &m, sizeof(m), MSG_DONTWAIT,
	           (const struct sockaddr *)&p->sa,
	           sizeof(p->sa)) == (ssize_t)sizeof(m))
		l->st.sent++;
}

static void note_renewal(farm_lease *l, uint64_t *last, uint64_t now)
{
	l->st.renewals++;
	if (*last) {
		uint64_t gap = now - *last;
		if (gap > l->lease_ns / 2)
			l->st.late++;
		if (gap / 1000 > l->st.max_gap_us)
			l->st.max_gap_us = gap / 1000;
	}
	*last = now;
}

/* Deferred callbacks, run with the lock released. */
struct events {
	uint32_t suspect[FARM_LEASE_MAX_PEERS];
	enum farm_lease_why why[FARM_LEASE_MAX_PEERS];
	unsigned nsuspect;
	bool lost;
	uint64_t lost_config;
};

static void suspect_locked(farm_lease *l, struct peer *p,
                           enum farm_lease_why why, struct events *ev)
{
	if (p->suspected)
		return;
	p->suspected = true;
	p->why = why;
	if (why == FARM_LEASE_EXPIRED)
		l->st.expiries++;
	else
		l->st.reported++;
	if (ev->nsuspect < FARM_LEASE_MAX_PEERS) {
		ev->suspect[ev->nsuspect] = p->id;
		ev->why[ev->nsuspect++] = why;
	}
}

/* A member's answer to our probe: that member's lease thread runs. */
static void on_probe_ack(farm_lease *l, const struct lease_msg *m)
{
	for (unsigned i = 0; i < l->nprobe; i++)
		if (l->probe_ids[i] == m->from && m->seq == l->probe_nonce) {
			l->probe_ok[i] = true;
			pthread_cond_broadcast(&l->probe_cv);
		}
}

/* Each of the following takes a message of a member @p of the current
 * configuration and returns false to refuse it. */

/* REQUEST: we are the CM; grant, and request ours. */
static bool on_request(farm_lease *l, struct peer *p, const struct lease_msg *m,
                       uint64_t now)
{
	if (!is_cm(l))
		return false;
	note_renewal(l, &p->last_renew_ns, now);
	p->last_req_ns = now;
	/* Renewing, so alive: a suspicion the probe withdrew ends here, and
	 * a later lapse is a suspicion again. */
	if (p->why == FARM_LEASE_EXPIRED)
		p->suspected = false;
	send_msg(l, p, MSG_GRANT_REQUEST, m->seq, m->t_sent, ++l->seq, now);
	return true;
}

/* GRANT+REQUEST from the CM: our lease, and its request. */
static bool on_grant_request(farm_lease *l, struct peer *p,
                             const struct lease_msg *m, uint64_t now)
{
	if (is_cm(l) || m->from != l->cm || m->t_sent > now)
		return false;
	/* The first grant ends the join grace; later ones extend. */
	if (!l->own_granted || m->t_sent + l->lease_ns > l->own_until) {
		l->own_until = m->t_sent + l->lease_ns;
		l->own_granted = true;
		note_renewal(l, &l->own_renew_ns, now);
		/* Release: pairs with the acquire load of the serve word in
		 * txn_serving (txn/txn_int.h). */
		atomic_store_explicit(l->serve, l->own_until,
		                      memory_order_release);
	}
	l->cm_until = now + l->lease_ns;
	if (p->why == FARM_LEASE_EXPIRED) /* alive: see on_request */
		p->suspected = false;
	send_msg(l, p, MSG_GRANT, m->seq, m->t_sent, m->cm_seq, m->cm_t_sent);
	return true;
}

/* GRANT: a member granted the CM's lease. */
static bool on_grant(farm_lease *l, struct peer *p, const struct lease_msg *m,
                     uint64_t now)
{
	if (!is_cm(l) || m->cm_t_sent > now)
		return false;
	if (m->cm_t_sent + l->lease_ns > p->granted_until)
		p->granted_until = m->cm_t_sent + l->lease_ns;
	/* The first grant in this CM's time ends the join grace, as a
	 * member's first grant does (on_grant_request): the grace is a
	 * second, and a CM stopped within it and removed would serve its
	 * old copies after SIGCONT until it ended, long after the new CM's
	 * wait of one lease length let recovery move its regions. Later
	 * grants extend. */
	bool first =
	        !l->own_granted && !FARM_FAULT_SWITCH(FARM_FP_LEASE_CM_GRACE);
	if (first || p->granted_until > atomic_load_explicit(
	                                        l->serve, memory_order_relaxed))
		/* Release: pairs with txn_serving's acquire load. */
		atomic_store_explicit(l->serve, p->granted_until,
		                      memory_order_release);
	l->own_granted = true;
	return true;
}

static bool (*const member_msg[])(farm_lease *, struct peer *,
                                  const struct lease_msg *, uint64_t) = {
        [MSG_REQUEST] = on_request,
        [MSG_GRANT_REQUEST] = on_grant_request,
        [MSG_GRANT] = on_grant,
};

/* Whether a datagram from @from comes from member @p's lease socket (its
 * card's address: a socket bound to one address sends from it). A new
 * holder of a reused id has a socket of its own, so an old holder's
 * datagrams, a zombie's, are refused even when they name the id and the
 * configuration in force. */
static bool from_peer(const struct peer *p, const struct sockaddr_in *from)
{
	if (atomic_load_explicit(&any_source, memory_order_relaxed))
		return true;
	return from->sin_port == p->sa.sin_port &&
	       (p->sa.sin_addr.s_addr == htonl(INADDR_ANY) ||
	        from->sin_addr.s_addr == p->sa.sin_addr.s_addr);
}

static void handle_msg(farm_lease *l, const struct lease_msg *m,
                       const struct sockaddr_in *from, uint64_t now,
                       struct events *ev)
{
	if (l->muted)
		return;
	bool ours = m->magic == LEASE_MAGIC && m->to == l->a.self_id;
	if (ours && m->type == MSG_PROBE) {
		/* Answered by any member, in any configuration: a probe asks
		 * only whether this machine's lease thread runs. */
		struct peer tmp = {.id = m->from, .sa = *from};
		send_msg(l, &tmp, MSG_PROBE_ACK, m->seq, 0, 0, 0);
		return;
	}
	if (ours && m->type == MSG_PROBE_ACK) {
		on_probe_ack(l, m);
		return;
	}
	struct peer *p;
	if (!ours || !l->have_config || l->retired ||
	    m->config_id < l->cm_since || !(p = find_peer(l, m->from)) ||
	    !from_peer(p, from) || m->type >= FARM_ARRAY_SIZE(member_msg) ||
	    !member_msg[m->type] || !member_msg[m->type](l, p, m, now))
		l->st.refused++;
}

/* Renewals due and leases lapsed; returns the next deadline. */
static uint64_t tick(farm_lease *l, uint64_t now, struct events *ev)
{
	uint64_t next = now + l->lease_ns; /* idle: look again a lease on */
	if (!l->have_config || l->muted || l->retired)
		return next;
	/* Testing: nothing lapses; renewals still go out. */
	bool expire = !atomic_load_explicit(&no_expiry, memory_order_relaxed) &&
	              !l->held;
	if (is_cm(l)) {
		for (unsigned i = 0; i < l->npeers; i++) {
			struct peer *p = &l->peers[i];
			if (p->id == l->a.self_id || p->suspected)
				continue;
			uint64_t exp = p->last_req_ns + l->lease_ns;
			if (!expire)
				continue;
			if (now >= exp)
				suspect_locked(l, p, FARM_LEASE_EXPIRED, ev);
			else if (exp < next)
				next = exp;
		}
		return next;
	}
	struct peer *cm = find_peer(l, l->cm);
	if (!cm)
		return next;
	if (now >= l->next_send_ns) {
		send_msg(l, cm, MSG_REQUEST, ++l->seq, now, 0, 0);
		l->next_send_ns = now + l->lease_ns / 5;
	}
	if (l->next_send_ns < next)
		next = l->next_send_ns;
	if (!cm->suspected && expire) {
		if (now >= l->cm_until)
			suspect_locked(l, cm, FARM_LEASE_EXPIRED, ev);
		else if (l->cm_until < next)
			next = l->cm_until;
	}
	if (!l->lost_reported && expire) {
		if (now >= l->own_until) {
			l->lost_reported = true;
			l->st.lost++;
			ev->lost = true;
			ev->lost_config = l->config_id;
		} else if (l->own_until < next) {
			next = l->own_until;
		}
	}
	return next;
}

static void run_events(farm_lease *l, const struct events *ev)
{
	for (unsigned i = 0; i < ev->nsuspect; i++) {
		farm_warn("lease %" PRIu32 ": machine %" PRIu32 " suspected "
		          "(%s)",
		          l->a.self_id, ev->suspect[i],
		          ev->why[i] == FARM_LEASE_EXPIRED ? "lease expired"
		                                           : "reported");
		if (l->a.on_suspect)
			l->a.on_suspect(l->a.ctx, ev->suspect[i], ev->why[i]);
	}
	if (ev->lost) {
		farm_warn("lease %" PRIu32 ": lost its lease at the CM in "
		          "configuration %" PRIu64,
		          l->a.self_id, ev->lost_config);
		if (l->a.on_lost)
			l->a.on_lost(l->a.ctx, ev->lost_config);
	}
}

static void set_realtime(farm_lease *l)
{
	if (l->a.no_realtime)
		return;
	int rc = farm_thread_set_detector_realtime();
	pthread_mutex_lock(&l->mu);
	l->st.realtime = rc == 0;
	pthread_mutex_unlock(&l->mu);
	if (rc)
		farm_info("lease %" PRIu32 ": no SCHED_FIFO (%s); renewals "
		          "run at normal priority",
		          l->a.self_id, strerror(rc));
}

static void *lease_main(void *arg)
{
	farm_lease *l = arg;
	set_realtime(l);
	struct pollfd pf[2] = {{.fd = l->sock, .events = POLLIN},
	                       {.fd = l->evfd, .events = POLLIN}};
	pthread_mutex_lock(&l->mu);
	while (!l->stop) {
		struct events ev = {0};
		uint64_t now = now_ns();
		uint64_t next = tick(l, now, &ev);
		pthread_mutex_unlock(&l->mu);
		run_events(l, &ev);
		now = now_ns();
		uint64_t wait = next > now ? next - now : 0;
		struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
		                      .tv_nsec = (long)(wait % 1000000000ull)};
		int n = ppoll(pf, 2, &ts, NULL);
		if (n < 0 && errno != EINTR)
			farm_warn("lease: ppoll: %s", strerror(errno));
		if (n > 0 && (pf[1].revents & POLLIN)) {
			uint64_t v;
			if (read(l->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				farm_warn("lease: eventfd: %s",
				          strerror(errno));
		}
		struct events ev2 = {0};
		pthread_mutex_lock(&l->mu);
		for (;;) {
			struct lease_msg m;
			struct sockaddr_in from;
			socklen_t fl = sizeof(from);
			ssize_t r = recvfrom(l->sock, &m, sizeof(m),
			                     MSG_DONTWAIT | MSG_TRUNC,
			                     (struct sockaddr *)&from, &fl);
			if (r < 0)
				break;
			l->st.received++;
			if (r != (ssize_t)sizeof(m)) {
				l->st.refused++;
				continue;
			}
			handle_msg(l, &m, &from, now_ns(), &ev2);
		}
		if (ev2.nsuspect || ev2.lost) {
			pthread_mutex_unlock(&l->mu);
			run_events(l, &ev2);
			pthread_mutex_lock(&l->mu);
		}
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

static void wake(farm_lease *l)
{
	uint64_t one = 1;
	if (write(l->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		farm_warn("lease: cannot wake the lease thread: %s",
		          strerror(errno));
}

int farm_lease_open(const struct farm_lease_attr *a, farm_lease **out)
{
	if (!a || !out || (a->lease_us && a->lease_us < 1000))
		return -EINVAL;
	farm_lease *l = calloc(1, sizeof(*l));
	if (l) {
		l->serve = a->serve_word ? a->serve_word : &l->own_serve;
		atomic_store(l->serve, UINT64_MAX);
	}
	if (!l)
		return -ENOMEM;
	l->a = *a;
	l->lease_ns =
	        (uint64_t)(a->lease_us ? a->lease_us : FARM_LEASE_DEFAULT_US) *
	        1000ull;
	l->sock = l->evfd = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->probe_mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->probe_cv, &ca);
	pthread_condattr_destroy(&ca);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int rc = 0;
	if (inet_pton(AF_INET, a->bind ? a->bind : "127.0.0.1", &sa.sin_addr) !=
	    1) {
		rc = -EINVAL;
		goto fail;
	}
	l->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->sock < 0 || l->evfd < 0 ||
	    bind(l->sock, (struct sockaddr *)&sa, sizeof(sa))) {
		rc = -errno;
		goto fail;
	}
	socklen_t sl = sizeof(sa);
	if (getsockname(l->sock, (struct sockaddr *)&sa, &sl)) {
		rc = -errno;
		goto fail;
	}
	char host[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &sa.sin_addr, host, sizeof(host));
	snprintf(l->addr, sizeof(l->addr), "udp:%s:%u", host,
	         (unsigned)ntohs(sa.sin_port));
	if ((rc = -pthread_create(&l->th, NULL, lease_main, l)))
		goto fail;
	*out = l;
	return 0;
fail:
	if (l->sock >= 0)
		close(l->sock);
	if (l->evfd >= 0)
		close(l->evfd);
	pthread_cond_destroy(&l->probe_cv);
	pthread_mutex_destroy(&l->probe_mu);
	pthread_mutex_destroy(&l->mu);
	free(l);
	return rc;
}

void farm_lease_close(farm_lease *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	pthread_mutex_unlock(&l->mu);
	wake(l);
	pthread_join(l->th, NULL);
	close(l->sock);
	close(l->evfd);
	pthread_cond_destroy(&l->probe_cv);
	pthread_mutex_destroy(&l->probe_mu);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

const char *farm_lease_addr(const farm_lease *l)
{
	return l ? l->addr : "";
}

/* Under l->mu, before the peers become @np: a death notice stands while
 * the machine is listed under the same lease address (the same holder);
 * one the view leaves out, or a new holder of its id, no longer. */
static void keep_dead(farm_lease *l, const struct peer *np, unsigned k)
{
	unsigned kd = 0;
	for (unsigned i = 0; i < l->ndead; i++) {
		const struct peer *old = find_peer(l, l->dead[i]);
		for (unsigned j = 0; old && j < k; j++)
			if (np[j].id == l->dead[i] &&
			    !memcmp(&old->sa, &np[j].sa, sizeof(old->sa)))
				l->dead[kd++] = l->dead[i];
	}
	l->ndead = kd;
}

int farm_lease_set_config(farm_lease *l, uint64_t config_id, uint32_t cm,
                          const struct farm_lease_peer *peers, unsigned n)
{
	if (!l || (n && !peers) || n > FARM_LEASE_MAX_PEERS)
		return -EINVAL;
	struct peer np[FARM_LEASE_MAX_PEERS];
	unsigned k = 0;
	bool cm_listed = cm == l->a.self_id;
	for (unsigned i = 0; i < n; i++) {
		if (peers[i].id == l->a.self_id)
			continue;
		struct peer *p = &np[k];
		memset(p, 0, sizeof(*p));
		p->id = peers[i].id;
		if (parse_addr(peers[i].addr, &p->sa))
			return -EINVAL;
		cm_listed |= p->id == cm;
		k++;
	}
	if (!cm_listed)
		return -EINVAL;
	pthread_mutex_lock(&l->mu);
	if (l->have_config && config_id < l->config_id) {
		pthread_mutex_unlock(&l->mu);
		return -ESTALE;
	}
	uint64_t now = now_ns();
	uint64_t grace = FARM_LEASE_JOIN_GRACE_NS > l->lease_ns
	                         ? FARM_LEASE_JOIN_GRACE_NS
	                         : l->lease_ns;
	bool same_cm = l->have_config && l->cm == cm;
	for (unsigned i = 0; i < k; i++) {
		struct peer *old = find_peer(l, np[i].id);
		/* A member keeps its running lease when the CM stays; a
		 * new holder of its id (another lease address) starts a
		 * new one. */
		if (same_cm && old && !old->suspected &&
		    !memcmp(&old->sa, &np[i].sa, sizeof(old->sa))) {
			np[i].last_req_ns = old->last_req_ns;
			np[i].granted_until = old->granted_until;
			np[i].last_renew_ns = old->last_renew_ns;
		} else {
			np[i].last_req_ns = now + grace - l->lease_ns;
		}
	}
	keep_dead(l, np, k);
	memcpy(l->peers, np, k * sizeof(np[0]));
	l->npeers = k;
	if (!same_cm || !l->have_config) {
		/* A new relationship: a grace for the first handshake
		 * (release: pairs with txn_serving's acquire load). */
		atomic_store_explicit(l->serve, now + grace,
		                      memory_order_release);
		l->own_until = now + grace;
		l->own_granted = false;
		l->cm_until = now + grace;
		l->cm_since = config_id;
		l->own_renew_ns = 0;
	}
	l->lost_reported = false;
	l->retired = false;
	l->next_send_ns = now;
	l->config_id = config_id;
	l->cm = cm;
	l->have_config = true;
	/* Alone: nobody to lease from (release: pairs with txn_serving's
	 * acquire load). */
	if (cm == l->a.self_id && k == 0)
		atomic_store_explicit(l->serve, UINT64_MAX,
		                      memory_order_release);
	pthread_mutex_unlock(&l->mu);
	wake(l);
	return 0;
}

static bool probe_is_dead(const farm_lease *l, uint32_t id)
{
	for (unsigned i = 0; i < l->ndead; i++)
		if (l->dead[i] == id)
			return true;
	return false;
}

/* Under l->mu: the probed machines that answered (@got) and those whose
 * answer no longer counts (the fabric saw them die). */
static unsigned probe_settled(const farm_lease *l, unsigned *got)
{
	unsigned settled = 0;
	*got = 0;
	for (unsigned i = 0; i < l->nprobe; i++) {
		*got += l->probe_ok[i];
		settled += l->probe_ok[i] ||
		           (probe_is_dead(l, l->probe_ids[i]) &&
		            !FARM_FAULT_SWITCH(FARM_FP_LEASE_PROBE_WAIT_DEAD));
	}
	return settled;
}

int farm_lease_probe(farm_lease *l, const struct farm_lease_peer *peers,
                     unsigned n, uint64_t timeout_ns, bool *answered)
{
	if (!l || !answered || (n && !peers) || n > FARM_LEASE_MAX_PEERS)
		return -EINVAL;
	struct peer tmp[FARM_LEASE_MAX_PEERS];
	for (unsigned i = 0; i < n; i++) {
		tmp[i] = (struct peer){.id = peers[i].id};
		if (parse_addr(peers[i].addr, &tmp[i].sa))
			return -EINVAL;
	}
	pthread_mutex_lock(&l->probe_mu);
	pthread_mutex_lock(&l->mu);
	l->probe_nonce = ((uint64_t)l->a.self_id << 48) ^ now_ns();
	l->nprobe = n;
	for (unsigned i = 0; i < n; i++) {
		l->probe_ids[i] = peers[i].id;
		l->probe_ok[i] = peers[i].id == l->a.self_id;
		if (!l->probe_ok[i])
			send_msg(l, &tmp[i], MSG_PROBE, l->probe_nonce, 0, 0,
			         0);
	}
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	uint64_t t = (uint64_t)dl.tv_nsec + timeout_ns;
	dl.tv_sec += (time_t)(t / 1000000000ull);
	dl.tv_nsec = (long)(t % 1000000000ull);
	unsigned got = 0;
	/* Until every machine answered or is known dead (a death notice
	 * during the probe ends its wait: a dead process never answers,
	 * and waiting out the bound, two lease lengths, only delays the
	 * new configuration). */
	while (probe_settled(l, &got) < n &&
	       pthread_cond_timedwait(&l->probe_cv, &l->mu, &dl) != ETIMEDOUT)
		;
	got = 0;
	for (unsigned i = 0; i < n; i++) {
		answered[i] = l->probe_ok[i];
		got += answered[i];
	}
	l->nprobe = 0;
	l->probe_nonce = 0;
	pthread_mutex_unlock(&l->mu);
	pthread_mutex_unlock(&l->probe_mu);
	return (int)got;
}

void farm_lease_probe_dead(farm_lease *l, uint32_t machine)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	if (!probe_is_dead(l, machine) && l->ndead < FARM_LEASE_MAX_PEERS)
		l->dead[l->ndead++] = machine;
	/* Pairs with the wait in farm_lease_probe. */
	pthread_cond_broadcast(&l->probe_cv);
	pthread_mutex_unlock(&l->mu);
}

int farm_lease_suspect(farm_lease *l, uint32_t machine)
{
	if (!l)
		return -EINVAL;
	struct events ev = {0};
	pthread_mutex_lock(&l->mu);
	struct peer *p = find_peer(l, machine);
	/* A member holds leases only with the CM; a retired machine, with
	 * nobody. */
	bool held = p && !l->retired && (is_cm(l) || machine == l->cm);
	if (held)
		suspect_locked(l, p, FARM_LEASE_REPORTED, &ev);
	pthread_mutex_unlock(&l->mu);
	if (!held)
		return -ENOENT;
	run_events(l, &ev);
	return 0;
}

void farm_lease_retire(farm_lease *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	if (l->have_config && !l->retired) {
		l->retired = true;
		l->st.retired++;
	}
	pthread_mutex_unlock(&l->mu);
	/* Not woken: its next tick, at most a lease away, finds it retired
	 * and sends nothing more. */
}

void farm_lease_hold(farm_lease *l, bool on)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	if (!on && l->held) {
		/* Judged again from a grace, as a new relationship is. */
		uint64_t now = now_ns();
		uint64_t grace = FARM_LEASE_JOIN_GRACE_NS > l->lease_ns
		                         ? FARM_LEASE_JOIN_GRACE_NS
		                         : l->lease_ns;
		for (unsigned i = 0; i < l->npeers; i++)
			if (l->peers[i].last_req_ns + l->lease_ns < now + grace)
				l->peers[i].last_req_ns =
				        now + grace - l->lease_ns;
		if (l->cm_until < now + grace)
			l->cm_until = now + grace;
		if (!is_cm(l) && l->own_until < now + grace) {
			l->own_until = now + grace;
			/* Release: pairs with txn_serving's acquire load. */
			atomic_store_explicit(l->serve, l->own_until,
			                      memory_order_release);
		}
		l->lost_reported = false;
	}
	l->held = on;
	pthread_mutex_unlock(&l->mu);
	wake(l);
}

bool farm_lease_valid(farm_lease *l)
{
	if (!l)
		return false;
	pthread_mutex_lock(&l->mu);
	bool v = l->have_config &&
	         (is_cm(l) || (now_ns() < l->own_until && !l->muted));
	pthread_mutex_unlock(&l->mu);
	return v;
}

void farm_lease_stats(farm_lease *l, struct farm_lease_stats *out)
{
	if (!l || !out)
		return;
	pthread_mutex_lock(&l->mu);
	*out = l->st;
	pthread_mutex_unlock(&l->mu);
}

void farm_lease_testing_mute(farm_lease *l, bool on)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->muted = on;
	pthread_mutex_unlock(&l->mu);
	wake(l);
}
