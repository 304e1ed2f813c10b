/*
 * The "udp" fabric provider: libfarm's fabric over plain UDP datagrams, for
 * networks without RDMA, in the manner of eRPC (NSDI'19) and FaSST
 * (OSDI'16). README.md, "udp", gives the design and what it guarantees.
 *
 * Shape. One fabric owns one UDP socket bound to its listen address (the
 * address in the machine's card) and one dispatch thread. A farm_ep is a
 * session to one peer, opened by a CONNECT / ACCEPT exchange with the
 * peer's fabric (which allocates the target's half: a session index and a
 * random token every later packet must carry, the initiator's address, and
 * a cache of its last UDP_WINDOW replies). The one-sided requests the
 * layers above post (READ, WRITE, CAS, NOTIFY) become packets with
 * consecutive sequence numbers; the target executes them as small RPCs
 * against its registrations (udp_serve.c) and answers each. At most
 * UDP_WINDOW packets a session are unanswered (credits: a target never
 * holds more than a window per session); a packet unanswered for
 * UDP_RTO_NS is sent again with everything after it (go-back-N; the target
 * drops packets ahead of the one it expects and answers duplicates from
 * its cache, so each executes once and in order). Requests larger than one
 * packet are split at line boundaries (udp_wire.c, farm_udp_npieces).
 *
 * This file: open / close, memory, registrations, completion queues,
 * faults, revocation, the ops table; udp_ep.c the endpoints and posting.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "fabric/udp_int.h"
#include "util/fault.h"
#include "util/log.h"

/* ---- fabric ------------------------------------------------------------ */

static void udp_close(farm_fabric *fab);

/* The process's open udp fabrics (farm_udp_before_wait). */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static struct udp_fabric *open_list;
static atomic_int open_n;

static void open_add(struct udp_fabric *f)
{
	pthread_mutex_lock(&open_mu);
	f->next_open = open_list;
	open_list = f;
	atomic_fetch_add(&open_n, 1);
	pthread_mutex_unlock(&open_mu);
}

static void open_remove(struct udp_fabric *f)
{
	pthread_mutex_lock(&open_mu);
	for (struct udp_fabric **p = &open_list; *p; p = &(*p)->next_open)
		if (*p == f) {
			*p = f->next_open;
			atomic_fetch_sub(&open_n, 1);
			break;
		}
	pthread_mutex_unlock(&open_mu);
}

/* A thread about to sleep (a loop parking) may have been the poller that
 * received for the dispatch thread: the lease ends now and the dispatch
 * thread waits for datagrams again, so a request to a parked loop (its
 * doorbell) is not left in the socket for the rest of the lease. */
void farm_udp_before_wait(void)
{
	if (!atomic_load_explicit(&open_n, memory_order_relaxed) ||
	    !farm_udp_knob_value(FARM_UDP_KNOB_PARK_HANDBACK))
		return;
	pthread_mutex_lock(&open_mu);
	for (struct udp_fabric *f = open_list; f; f = f->next_open)
		if (atomic_exchange_explicit(&f->lease_ns, 0,
		                             memory_order_relaxed))
			farm_udp_kick(f);
	pthread_mutex_unlock(&open_mu);
}

static uint64_t env_ms(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	return v && atoi(v) > 0 ? (uint64_t)atoi(v) : dflt;
}

static int open_socket(struct udp_fabric *f, const char *listen)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	if (farm_udp_parse_addr(listen, &ss, &sl)) {
		farm_err("udp: listen address '%s' is not ip:port", listen);
		return -EINVAL;
	}
	f->fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
	               0);
	if (f->fd < 0)
		return -errno;
	/* Room for every session's window at once (the kernel caps it at
	 * net.core.[rw]mem_max). */
	int sz = 4 << 20;
	(void)setsockopt(f->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	(void)setsockopt(f->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	if (bind(f->fd, (struct sockaddr *)&ss, sl)) {
		int e = -errno;
		farm_err("udp: bind %s: %s", listen, strerror(errno));
		return e;
	}
	sl = sizeof(ss);
	if (getsockname(f->fd, (struct sockaddr *)&ss, &sl))
		return -errno;
	farm_udp_format_addr(&ss, f->addr, sizeof(f->addr));
	return 0;
}

/* Test builds: FARM_UDP_HOOKS="drop,dup,reorder" (per mille of the
 * packets this process sends) turns the hooks on for a whole test, so the
 * layers above run over a lossy network. */
static void hooks_from_env(void)
{
#ifdef FARM_FAULT_INJECTION
	const char *h = getenv("FARM_UDP_HOOKS");
	int d = 0, u = 0, r = 0;
	if (h && sscanf(h, "%d,%d,%d", &d, &u, &r) == 3 && d >= 0 &&
	    d <= 1000 && u >= 0 && u <= 1000 && r >= 0 && r <= 1000) {
		farm_udp_testing_set(FARM_UDP_KNOB_DROP, d);
		farm_udp_testing_set(FARM_UDP_KNOB_DUP, u);
		farm_udp_testing_set(FARM_UDP_KNOB_REORDER, r);
	}
#endif
}

/* Test builds: with FARM_UDP_HOOKS_LOG set, a closing fabric appends how
 * many packets its hooks dropped to that file (one line, O_APPEND, so the
 * machines of one test add up), so a lossy test can prove it was lossy. */
static void hooks_tally(const struct udp_fabric *f)
{
#ifdef FARM_FAULT_INJECTION
	const char *path = getenv("FARM_UDP_HOOKS_LOG");
	if (!path || !*path)
		return;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	char line[32];
	int n = snprintf(line, sizeof(line), "%" PRIu64 "\n",
	                 __atomic_load_n(&f->st.hook_drops, __ATOMIC_RELAXED));
	if (write(fd, line, (size_t)n) != n)
		farm_warn("udp: FARM_UDP_HOOKS_LOG: %s", strerror(errno));
	close(fd);
#else
	(void)f;
#endif
}

static int udp_open(const farm_fabric_attr *attr, farm_fabric **out)
{
	hooks_from_env();
#ifdef FARM_FAULT_INJECTION
	farm_udp_trace_open();
#endif
	struct udp_fabric *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->base.ops = &farm_udp_ops;
	f->base.machine_id = attr->machine_id;
	f->base.wire = farm_fabric_wire_own();
	f->fd = f->stop_fd = f->kick_fd = -1;
	pthread_mutex_init(&f->rx, NULL);
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->conn_mu, NULL);
	pthread_mutex_init(&f->death_mu, NULL);
	pthread_mutex_init(&f->tx, NULL);
	pthread_rwlock_init(&f->tab_lock, NULL);
	f->timeout_ns = env_ms("FARM_UDP_TIMEOUT_MS", 4000) * 1000000ull;
	f->hb_ns = FARM_MAX(f->timeout_ns / 4, 20000000ull);
	/* FARM_UDP_COALESCE=0: one record a datagram (to measure what
	 * coalescing saves); every receiver takes both. */
	const char *co = getenv("FARM_UDP_COALESCE");
	f->coalesce = !(co && strcmp(co, "0") == 0);
	/* FARM_UDP_SPIN_US: how long a poller with requests outstanding
	 * finds nothing before it sleeps in the kernel for a datagram; -1:
	 * never (spin, as before). FARM_UDP_SLEEP_US bounds one sleep (a
	 * loop sleeping here misses its other work that long at most). */
	const char *sp = getenv("FARM_UDP_SPIN_US");
	f->spin_ns = sp && *sp ? (int64_t)strtoll(sp, NULL, 10) * 1000 : 20000;
	f->sleep_ns = env_ms("FARM_UDP_SLEEP_US", 1000) * 1000ull;
	if (getrandom(&f->inc, sizeof(f->inc), 0) != sizeof(f->inc))
		f->inc = farm_now_ns() ^ ((uint64_t)getpid() << 32);
	f->inc |= 1;
	f->table = calloc(UDP_TABLE_N, sizeof(*f->table));
	f->peers = calloc(UDP_MAX_PEERS, sizeof(*f->peers));
	f->sess = calloc(UDP_MAX_SESS, sizeof(*f->sess));
	int rc = -ENOMEM;
	if (!f->table || !f->peers || !f->sess || farm_udp_rx_alloc(f))
		goto fail;
	const char *listen = attr->listen_addr && *attr->listen_addr
	                             ? attr->listen_addr
	                             : "127.0.0.1:0";
	if ((rc = open_socket(f, listen)))
		goto fail;
	f->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	f->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	rc = -ENOMEM;
	if (f->stop_fd < 0 || f->kick_fd < 0 ||
	    pthread_create(&f->thread, NULL, farm_udp_dispatch_main, f))
		goto fail;
	f->started = true;
	open_add(f);
	farm_dbg("udp: machine %" PRIu32 " on %s", attr->machine_id, f->addr);
	*out = &f->base;
	return 0;
fail:
	udp_close(&f->base);
	return rc;
}

static void udp_close(farm_fabric *fab)
{
	struct udp_fabric *f = UF(fab);
	if (f->started) {
		open_remove(f);
		uint64_t one = 1;
		if (write(f->stop_fd, &one, sizeof(one)) < 0)
			farm_warn("udp: waking the dispatch thread: %s",
			          strerror(errno));
		pthread_join(f->thread, NULL);
		farm_udp_bye(f);
		hooks_tally(f);
#ifdef FARM_FAULT_INJECTION
		farm_udp_trace_dump();
#endif
	}
	for (unsigned k = 0; k < UDP_MAX_EPS; k++)
		if (f->eps[k])
			f->base.ops->ep_destroy(&f->eps[k]->base);
	if (f->stop_fd >= 0)
		close(f->stop_fd);
	if (f->kick_fd >= 0)
		close(f->kick_fd);
	if (f->fd >= 0)
		close(f->fd);
	if (f->sess)
		for (unsigned k = 0; k < UDP_MAX_SESS; k++)
			free(f->sess[k].cache);
	free(f->sess);
	free(f->peers);
	free(f->table);
	free(f->admitted);
	free(f->rxb);
	pthread_rwlock_destroy(&f->tab_lock);
	pthread_mutex_destroy(&f->rx);
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->conn_mu);
	pthread_mutex_destroy(&f->death_mu);
	pthread_mutex_destroy(&f->tx);
	free(f);
}

static int udp_address(const farm_fabric *fab, char *buf, size_t len)
{
	const struct udp_fabric *f = (const struct udp_fabric *)fab;
	size_t n = strlen(f->addr);
	if (n + 1 > len)
		return -ENOSPC;
	memcpy(buf, f->addr, n + 1);
	return (int)n;
}

/* ---- registrations ----------------------------------------------------- */

/* Keys are (generation << 12 | slot): a key of a registration since gone
 * names a slot whose generation moved on, and is refused. */
static int udp_mr_reg(farm_fabric *fab, void *addr, size_t len, unsigned access,
                      farm_mr **out)
{
	struct udp_fabric *f = UF(fab);
	struct udp_mr *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	pthread_rwlock_wrlock(&f->tab_lock);
	uint32_t slot = 1;
	while (slot < UDP_TABLE_N && f->table[slot].key)
		slot++;
	if (slot == UDP_TABLE_N) {
		pthread_rwlock_unlock(&f->tab_lock);
		free(m);
		return -ENOSPC;
	}
	uint16_t gen = ++f->slot_gen[slot];
	if (!gen)
		gen = f->slot_gen[slot] = 1;
	uint64_t key = (uint64_t)gen << 12 | slot;
	f->table[slot] = (struct udp_tent){key, (uintptr_t)addr, len, access};
	pthread_rwlock_unlock(&f->tab_lock);
	m->slot = slot;
	m->base.fab = fab;
	m->base.addr = addr;
	m->base.len = len;
	m->base.access = access;
	m->base.desc = (farm_mr_desc){.key = key,
	                              .addr = (uintptr_t)addr,
	                              .len = len,
	                              .machine = fab->machine_id,
	                              .access = access};
	*out = &m->base;
	return 0;
}

static void udp_mr_dereg(farm_mr *mr)
{
	struct udp_mr *m = (struct udp_mr *)mr;
	struct udp_fabric *f = UF(mr->fab);
	/* Writer side of tab_lock: a request being served holds it (read)
	 * while it touches the memory, so none does once this returns. */
	pthread_rwlock_wrlock(&f->tab_lock);
	memset(&f->table[m->slot], 0, sizeof(f->table[m->slot]));
	pthread_rwlock_unlock(&f->tab_lock);
	free(m);
}

/* ---- completion queues ------------------------------------------------- */

static int udp_cq_create(farm_fabric *fab, unsigned depth, unsigned flags,
                         farm_cq **out)
{
	(void)depth;
	struct udp_cq *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base.fab = fab;
	c->shared = flags & FARM_CQ_SHARED;
	pthread_mutex_init(&c->lock, NULL);
	*out = &c->base;
	return 0;
}

static int udp_cq_destroy(farm_cq *cq)
{
	struct udp_cq *c = (struct udp_cq *)cq;
	if (c->eps)
		return -EBUSY;
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

static uint64_t ep_delay(const struct udp_ep *ep)
{
	uint64_t d = atomic_load(&ep->faults.delay_ns);
	if (ep->base.peer < UDP_MAX_PEERS)
		d = FARM_MAX(d, atomic_load(&ep->fab->peers[ep->base.peer]
		                                     .faults.delay_ns));
	return d;
}

/* Retire @ep's finished requests in post order into @wc (its lock held). */
static int retire(struct udp_ep *ep, int n, farm_wc *wc)
{
	int got = 0;
	uint64_t delay = ep_delay(ep), now = delay ? farm_now_ns() : 0;
	while (got < n && ep->tail != ep->head) {
		struct udp_slot *s = &ep->slots[ep->tail & ep->mask];
		if (s->state != S_DONE)
			break;
		if (delay && now - s->posted_ns < delay)
			break;
		int st = s->err;
		if (ep->closed)
			st = -ENOTCONN;
		else if (ep->err_state)
			st = FARM_EFLUSHED;
		if (st)
			ep->err_state = true;
		if (st || (s->flags & FARM_WR_SIGNALED)) {
			farm_wc *w = &wc[got++];
			w->wr_id = s->wr_id;
			w->status = st;
			w->opcode = s->opcode;
			w->pad = 0;
			w->peer = ep->base.peer;
			w->len = st || s->opcode == FARM_WR_NOTIFY ? 0 : s->len;
		}
		s->state = S_FREE;
		ep->tail++;
	}
	return got;
}

/* Retire up to @n finished requests of @c's endpoints into @wc. */
static int retire_all(struct udp_cq *c, int n, farm_wc *wc)
{
	int got = 0;
	for (struct udp_ep *ep = c->eps; ep && got < n; ep = ep->cq_next) {
		/* Only an endpoint whose oldest request is done is locked:
		 * a poller spinning on the lock would starve the reply
		 * handler waiting for it (a mutex is not fair). A hint, read
		 * again under the lock; pairs with the release in on_reply
		 * and udp_ep_post. */
		if (ep->tail == ep->head ||
		    __atomic_load_n(&ep->slots[ep->tail & ep->mask].state,
		                    __ATOMIC_ACQUIRE) != S_DONE)
			continue;
		pthread_mutex_lock(&ep->lock);
		got += retire(ep, n - got, wc + got);
		pthread_mutex_unlock(&ep->lock);
	}
	return got;
}

/* Whether an endpoint of @arg (a udp_cq) has its oldest request done
 * (farm_udp_rx_sleep's check; the acquire pairs with the release in
 * on_reply and udp_ep_post). */
static bool cq_done(void *arg)
{
	const struct udp_cq *c = arg;
	for (const struct udp_ep *ep = c->eps; ep; ep = ep->cq_next)
		if (ep->tail != ep->head &&
		    __atomic_load_n(&ep->slots[ep->tail & ep->mask].state,
		                    __ATOMIC_ACQUIRE) == S_DONE)
			return true;
	return false;
}

/* A poller of @c waiting for replies found nothing, again: after a timer
 * tick of that it wakes the dispatch thread, once, so the timers run on
 * the busy tick (retransmission after the RTO; the idle tick is up to 200
 * ms). Posts do not wake it: a wake-up of another thread per request cost
 * more than a round trip on this host (docs/benchmarks.md). Returns
 * whether it has spun long enough to sleep for a datagram: spinning costs
 * a core the other side may need (both run on the same few cores here, and
 * a target in a VM is descheduled for longer than a round trip), and a
 * reply wakes the sleeper as it would a plain UDP client in recvmmsg. A
 * shared queue's pollers do not sleep (its lock is held across the
 * poll). */
static bool idle_poll(struct udp_cq *c, struct udp_fabric *f)
{
	uint64_t now = farm_now_ns();
	if (!c->idle_since)
		c->idle_since = now;
	uint64_t idle = now - c->idle_since;
	if (idle >= UDP_TICK_NS && !c->kicked) {
		c->kicked = true;
		/* Pairs with farm_udp_timers_if_due's exchange. */
		if (!atomic_exchange(&f->kick, true))
			farm_udp_kick(f);
	}
	return f->spin_ns >= 0 && !c->shared && idle >= (uint64_t)f->spin_ns;
}

static int udp_cq_poll(farm_cq *fcq, int n, farm_wc *wc)
{
	struct udp_cq *c = (struct udp_cq *)fcq;
	struct udp_fabric *f = UF(fcq->fab);
	if (c->shared)
		pthread_mutex_lock(&c->lock);
	/* A poller waiting for replies reads them itself when the dispatch
	 * thread is not (one wake-up less per round trip). */
	bool waiting = false;
	for (struct udp_ep *ep = c->eps; ep && !waiting; ep = ep->cq_next)
		waiting = ep->tail != ep->head;
	/* One that is not serves peers' requests instead of the dispatch
	 * thread (README.md, "udp": who receives). */
	unsigned rx = waiting ? farm_udp_rx_drain(f)
	                      : farm_udp_rx_drain_idle(f, &c->polled_ns);
	int got = retire_all(c, n, wc);
	if (!got && !rx && waiting && idle_poll(c, f)) {
		if (farm_udp_rx_sleep(f, f->sleep_ns, cq_done, c))
			got = retire_all(c, n, wc);
	}
	if (got)
		UDP_TRACE(UDP_EV_RETIRE, got);
	if (got || rx || !waiting) {
		c->idle_since = 0;
		c->kicked = false;
	}
	if (c->shared)
		pthread_mutex_unlock(&c->lock);
	return got;
}

/* ---- faults, fencing, death -------------------------------------------- */

static int udp_ep_fault(farm_ep *fep, enum farm_fault fl, uint64_t arg)
{
	farm_faults_apply(&((struct udp_ep *)fep)->faults, fl, arg);
	return 0;
}

static int udp_fault_peer(farm_fabric *fab, uint32_t peer_id,
                          enum farm_fault fl, uint64_t arg)
{
	struct udp_fabric *f = UF(fab);
	if (peer_id >= UDP_MAX_PEERS)
		return -ENOENT;
	pthread_mutex_lock(&f->lock);
	bool found = f->peers[peer_id].neps > 0;
	pthread_mutex_unlock(&f->lock);
	if (!found)
		return -ENOENT;
	farm_faults_apply(&f->peers[peer_id].faults, fl, arg);
	return 0;
}

static int udp_revoke(farm_fabric *fab, uint32_t peer_id)
{
	struct udp_fabric *f = UF(fab);
	if (peer_id >= UDP_MAX_PEERS)
		return -ERANGE;
	/* Pairs with the load in udp_serve.c revoked(), made under f->rx
	 * before each request executes. */
	atomic_fetch_or(&f->revoked[peer_id / 64], 1ull << (peer_id % 64));
	/* A request that passed revoked() just before the bit was set is
	 * still executing under f->rx: taking and dropping rx waits for it,
	 * so none of that machine's requests runs after we return. Every
	 * request executes under rx, and revoke is never called with rx held
	 * (death callbacks run from the timers, outside rx). */
	pthread_mutex_lock(&f->rx);
	pthread_mutex_unlock(&f->rx);
	/* Our side of its sessions is torn down too, as FaRM tears down a
	 * removed machine's queue pairs: what we have outstanding to it
	 * fails now (FARM_EPEERDEAD; later posts too, until a new
	 * connection). A SIGKILLed peer says no goodbye, so nothing else
	 * would fail those requests before the death bound
	 * (FARM_UDP_TIMEOUT_MS, seconds), long after the configuration
	 * without it (a lease): a READ of its memory posted before the
	 * removal held the caller, a KV lookup, that long. Not reported to
	 * the death callback: the caller removed it. */
	if (farm_udp_knob_value(FARM_UDP_KNOB_REVOKE_FLUSH)) {
		pthread_mutex_lock(&f->lock);
		(void)farm_udp_fail_peer_locked(f, peer_id, false);
		pthread_mutex_unlock(&f->lock);
	}
	return 0;
}

/* A new holder of @peer_id (a reused id) at @addr: its requests run
 * again, those from anywhere else stay fenced (the old holder may still
 * run, a zombie; a new holder's socket is a new address while it does).
 * Under rx, which every request executes under: none runs half judged. */
static int udp_admit(farm_fabric *fab, uint32_t peer_id, const char *addr)
{
	struct udp_fabric *f = UF(fab);
	struct sockaddr_storage ss;
	socklen_t sl;
	if (peer_id >= UDP_MAX_PEERS)
		return -ERANGE;
	if (farm_udp_parse_addr(addr, &ss, &sl))
		return -EINVAL;
	if (FARM_FAULT_SWITCH(FARM_FP_FABRIC_ADMIT_ANY))
		sl = 0; /* testing: no address, every holder let in */
	pthread_mutex_lock(&f->rx);
	if (!f->admitted)
		f->admitted = calloc(UDP_MAX_PEERS, sizeof(*f->admitted));
	if (!f->admitted) {
		pthread_mutex_unlock(&f->rx);
		return -ENOMEM;
	}
	f->admitted[peer_id].addr = ss;
	f->admitted[peer_id].alen = sl;
	/* Pairs with the load in udp_serve.c revoked(), under rx too. */
	atomic_fetch_and(&f->revoked[peer_id / 64], ~(1ull << (peer_id % 64)));
	pthread_mutex_unlock(&f->rx);
	return 0;
}

static int udp_on_peer_death(farm_fabric *fab, farm_peer_death_fn fn, void *ctx)
{
	struct udp_fabric *f = UF(fab);
	pthread_mutex_lock(&f->death_mu);
	f->death_fn = fn;
	f->death_ctx = ctx;
	pthread_mutex_unlock(&f->death_mu);
	return 0;
}

int farm_udp_stats(const farm_fabric *fab, struct farm_udp_stats *out)
{
	if (!fab || !out || fab->ops != &farm_udp_ops)
		return -EINVAL;
	const struct udp_fabric *f = (const struct udp_fabric *)fab;
	const uint64_t *src = (const uint64_t *)&f->st;
	uint64_t *dst = (uint64_t *)out;
	for (size_t k = 0; k < sizeof(*out) / 8; k++)
		dst[k] = __atomic_load_n(&src[k], __ATOMIC_RELAXED);
	return 0;
}

const struct farm_fabric_ops farm_udp_ops = {
        .name = "udp",
        .open = udp_open,
        .close = udp_close,
        .address = udp_address,
        .mem_alloc = farm_fabric_anon_alloc,
        .mem_free = farm_fabric_anon_free,
        .mem_persist = farm_fabric_anon_persist,
        .mr_reg = udp_mr_reg,
        .mr_dereg = udp_mr_dereg,
        .cq_create = udp_cq_create,
        .cq_destroy = udp_cq_destroy,
        .cq_poll = udp_cq_poll,
        .ep_connect = farm_udp_ep_connect,
        .ep_disconnect = farm_udp_ep_disconnect,
        .ep_destroy = farm_udp_ep_destroy,
        .ep_usable = farm_udp_ep_usable,
        .ep_post = farm_udp_ep_post,
        .ep_fault = udp_ep_fault,
        .revoke = udp_revoke,
        .admit = udp_admit,
        .on_peer_death = udp_on_peer_death,
        .fault_peer = udp_fault_peer,
};
