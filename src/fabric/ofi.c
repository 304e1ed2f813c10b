/*
 * The "ofi" fabric provider: libfarm's fabric over libfabric (OFI), by
 * default its "tcp;ofi_rxm" provider (one-sided READ, WRITE and atomics in
 * software over TCP), or any other libfabric provider with RDM endpoints,
 * RMA and atomics (verbs;ofi_rxm, efa, cxi...). README.md, "ofi", says what
 * libfabric guarantees, what it does not, and how this file makes up for it.
 *
 * Shape. One fabric owns one libfabric domain, one RDM endpoint, one
 * address vector and one libfabric completion queue. A farm_ep is a
 * logical endpoint to one peer on that RDM endpoint: a ring of slots, one
 * per request, in post order. Every libfabric operation asks for a
 * completion; its context is not a pointer but (ep index, ep generation,
 * slot sequence), so a late completion of a destroyed endpoint or of a
 * reused slot is recognised and dropped. Whoever drains the libfabric CQ
 * (a farm_cq_poll of any thread, or the progress thread) records the
 * result in the slot; the endpoint's owner retires slots in post order in
 * farm_cq_poll and reports signaled successes and every failure.
 *
 * Guarantees kept in this file (libfabric does not promise them):
 *   (a) WRITE landing order: a WRITE whose first / last 8 bytes are
 *       8-aligned sends them as separate 8-byte FI_ATOMIC_WRITE operations
 *       around the body (ordered by FI_ORDER_WAW): the target's provider
 *       stores each with one 8-byte store, after the body for the last.
 *       A plain TCP RMA write lands through recv(2) in pieces of any size,
 *       so a polled word can be seen half written.
 *   (b) line-atomic READs (<= OFI_VERIFY_MAX bytes): the READ is issued
 *       twice, the second once the first has completed, and delivered only
 *       when both copies agree byte for byte, else both are issued again
 *       (a torn copy differs from a later one: the writer's version word
 *       changed in between, and versions only grow).
 *   (c) post order across READ then WRITE (FI_ORDER_WAR, which tcp;ofi_rxm
 *       does not offer): a WRITE, CAS or NOTIFY waits while READs of its
 *       endpoint are in flight.
 *   (d) progress while the target's loops are parked: software RMA needs
 *       the target process to run its provider. A progress thread per
 *       fabric sleeps on the CQ's wait object (fi_trywait + poll: no CPU
 *       while idle) and drains it when anything arrives.
 *   (e) peer death within a bound: an error completion from libfabric
 *       (connection reset or refused) marks the peer dead at once; a
 *       request outstanding longer than the timeout (FARM_OFI_TIMEOUT_MS,
 *       default 4000) does too (a cut link sends no reset).
 *   (f) NOTIFY: a small message to the target's fabric, which checks the
 *       word against its registrations and wakes waiters (farm_wake_word).
 *       It travels after the WRITEs before it (FI_ORDER_SAW).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric/ofi_int.h"
#include "util/log.h"

/* ---- addresses --------------------------------------------------------- */

/* ---- control messages -------------------------------------------------- */

/* ---- completion dispatch (drain lock held) ----------------------------- */

static void on_completion(struct ofi_fabric *f, void *ctx, uint64_t flags,
                          size_t len, int err)
{
	uint64_t c = (uint64_t)(uintptr_t)ctx;
	if (c & OFI_CTX_SLOT) {
		uint32_t idx = (uint32_t)(c >> 48) & 0xfff;
		unsigned kind = (unsigned)(c >> 60) & 7;
		uint16_t gen = (uint16_t)(c >> 32);
		uint32_t seq = (uint32_t)c;
		struct ofi_ep *ep = idx < OFI_MAX_EPS ? f->eps[idx] : NULL;
		if (!ep || ep->gen != gen) {
			farm_stat_add(&f->st.stale, 1);
			return;
		}
		struct ofi_slot *s = &ep->slots[seq & ep->mask];
		if (s->seq != seq || s->state != S_POSTED) {
			farm_stat_add(&f->st.stale, 1);
			return;
		}
		if (err) {
			/* A fenced endpoint's failures (the target closed its
			 * connection at a key it closed) are its fence, not
			 * the peer's death. */
			int st = atomic_load(&ep->fenced) ? FARM_EFENCED
			                                  : map_err(err);
			int zero = 0;
			atomic_compare_exchange_strong(&s->err, &zero, st);
			if (is_death(st))
				ofi_peer_kill(f, ep->base.peer, ep->dest);
		}
		if (kind < P_KINDS) {
			atomic_fetch_sub(&s->pend[kind], 1);
			atomic_fetch_sub(&ep->inflight[kind], 1);
		}
		/* Release: pairs with the acquire loads of pending in
		 * ofi_data.c (the completion's results are seen once the
		 * count is). */
		atomic_fetch_sub_explicit(&s->pending, 1, memory_order_release);
		if (!ep->kick && f->nkick < FARM_ARRAY_SIZE(f->kick)) {
			ep->kick = true;
			f->kick[f->nkick++] = ep;
		}
		return;
	}
	struct ofi_octx *o = ctx;
	if (!o)
		return;
	switch (o->kind) {
	case K_RECV: {
		struct ofi_rbuf *r = (struct ofi_rbuf *)o;
		if (!err)
			farm_ofi_on_ctrl(f, &r->msg, len);
		if (err != FI_ECANCELED)
			farm_ofi_post_recv(f, r);
		break;
	}
	case K_SENDFREE: free(o); break;
	case K_HB: {
		struct ofi_hbop *op = (struct ofi_hbop *)o;
		struct ofi_hb *hb = &f->peers[op->peer].hb;
		if (hb->op != op)
			break; /* abandoned: an earlier holder's beat */
		if (err && is_death(map_err(err)))
			ofi_peer_kill(f, op->peer, op->dest);
		atomic_store(&hb->busy, 0);
		break;
	}
	case K_FETCH:
		atomic_store(&((struct ofi_fetch *)o)->status,
		             err ? map_err(err) : 1);
		break;
	case K_HELLO: {
		struct ofi_conn *cn = (struct ofi_conn *)o;
		if (err) {
			int zero = 0;
			atomic_compare_exchange_strong(&cn->status, &zero,
			                               -ECONNREFUSED);
		}
		break;
	}
	default: break;
	}
}

/* Requests held back by a fence (order_ok) wait for completions; their
 * owner may not poll again (nothing signaled outstanding), so whoever
 * drained the completions hands them on. Drain lock held; the endpoint
 * lock only tried (owners take it before trying the drain lock). */
static void kick_waiting(struct ofi_fabric *f)
{
	for (unsigned i = 0; i < f->nkick; i++) {
		struct ofi_ep *ep = f->kick[i];
		ep->kick = false;
		if (pthread_mutex_trylock(&ep->lock) == 0) {
			if (ep->next_post != ep->head)
				farm_ofi_pump(ep);
			pthread_mutex_unlock(&ep->lock);
		}
	}
	f->nkick = 0;
}

/* Read the libfabric CQ until empty; the caller holds f->drain. Returns
 * how many entries were handled. */
int farm_ofi_drain_locked(struct ofi_fabric *f)
{
	int total = 0;
	for (;;) {
		struct fi_cq_msg_entry e[32];
		ssize_t n = fi_cq_read(f->cq, e, 32);
		if (n > 0) {
			for (ssize_t i = 0; i < n; i++)
				on_completion(f, e[i].op_context, e[i].flags,
				              e[i].len, 0);
			total += (int)n;
			continue;
		}
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry ee;
			memset(&ee, 0, sizeof(ee));
			if (fi_cq_readerr(f->cq, &ee, 0) == 1) {
				farm_stat_add(&f->st.errors, 1);
				on_completion(f, ee.op_context, ee.flags,
				              ee.len, ee.err ? ee.err : FI_EIO);
				total++;
			}
			continue;
		}
		break;
	}
	kick_waiting(f);
	return total;
}

void farm_ofi_drain_try(struct ofi_fabric *f)
{
	if (pthread_mutex_trylock(&f->drain) == 0) {
		farm_ofi_drain_locked(f);
		pthread_mutex_unlock(&f->drain);
	}
}

/* The progress thread: sleeps on the CQ's fd, drains when woken. */
static void *progress_main(void *arg)
{
	struct ofi_fabric *f = arg;
	struct pollfd p[2] = {{.fd = f->stop_fd, .events = POLLIN},
	                      {.fd = f->cq_fd, .events = POLLIN}};
	for (;;) {
		pthread_mutex_lock(&f->drain);
		farm_ofi_drain_locked(f);
		farm_ofi_hb_tick(f);
		bool acks = f->acks && farm_ofi_acks_retry(f);
		pthread_mutex_unlock(&f->drain);
		int timeout = 50;
		if (f->cq_wait) {
			struct fid *fids[1] = {&f->cq->fid};
			if (fi_trywait(f->fabric, fids, 1) != FI_SUCCESS)
				continue;
			timeout = (int)FARM_MIN(200u, f->hb_ns / 1000000u);
			if (acks) /* deferred ACKs: retry soon */
				timeout = 1;
		}
		farm_stat_add(&f->st.progress_sleeps, 1);
		int n = poll(p, f->cq_wait ? 2 : 1, f->cq_wait ? timeout : 0);
		if (n > 0 && (p[0].revents & POLLIN))
			break;
		if (!f->cq_wait)
			usleep(50);
	}
	return NULL;
}

/* ---- fabric ------------------------------------------------------------ */

static void ofi_close(farm_fabric *fab);
static void ep_free(struct ofi_ep *ep);

/* The fabric with its settings: the peer timeout and heartbeat from the
 * environment, the provider from the attributes, else the environment,
 * else the default. Returns the provider's name in @prov. */
static struct ofi_fabric *fabric_new(const farm_fabric_attr *attr,
                                     const char **prov)
{
	struct ofi_fabric *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->base.ops = &farm_ofi_ops;
	f->base.machine_id = attr->machine_id;
	f->base.wire = farm_fabric_wire_own();
	f->cq_fd = f->stop_fd = -1;
	pthread_mutex_init(&f->drain, NULL);
	pthread_mutex_init(&f->lock, NULL);
	/* Holder tags start anywhere: a tag is never given twice by one
	 * fabric (ofi_fence.c). */
	uint64_t seed = farm_now_ns() ^ (uint64_t)(uintptr_t)f;
	f->tag_next = (uint32_t)farm_rand64(&seed);
	const char *to = getenv("FARM_OFI_TIMEOUT_MS");
	f->timeout_ns =
	        (to && atoi(to) > 0 ? (uint64_t)atoi(to) : 4000) * 1000000ull;
	f->hb_ns = FARM_MAX(f->timeout_ns / 4, 20000000ull);
	const char *p = attr->ofi_provider;
	if (!p || !*p)
		p = getenv("FARM_OFI_PROVIDER");
	if (!p || !*p)
		p = OFI_DEFAULT_PROVIDER;
	snprintf(f->prov, sizeof(f->prov), "%s", p);
	*prov = p;
	return f;
}

/* What we ask of libfabric: @prov with RDM endpoints, RMA and atomics,
 * bound to @ss. */
static void fill_hints(struct fi_info *hints, const char *prov,
                       const struct sockaddr_storage *ss, socklen_t sl)
{
	hints->caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE |
	              FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE;
	hints->mode = 0;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
	                              FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	/* A WRITE completes once it is in the target's memory, as on RC
	 * verbs (the default, transmit complete, would report a WRITE still
	 * in a socket buffer). */
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	/* No msg_order in the hints: ofi_rxm refuses any with atomics. What
	 * the provider grants is read back and the rest fenced (order_ok). */
	hints->addr_format =
	        ss->ss_family == AF_INET ? FI_SOCKADDR_IN : FI_SOCKADDR_IN6;
	hints->src_addr = malloc(sl);
	hints->src_addrlen = sl;
	memcpy(hints->src_addr, ss, sl);
	hints->fabric_attr->prov_name = strdup(prov);
}

/* What the provider granted: memory registration modes and ordering. */
static void read_grants(struct ofi_fabric *f, const char *prov)
{
	struct fi_info *i = f->info;
	f->mr_local = i->domain_attr->mr_mode & FI_MR_LOCAL;
	f->virt_addr = i->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
	f->prov_key = i->domain_attr->mr_mode & FI_MR_PROV_KEY;
	f->order = i->tx_attr->msg_order;
	if (!(i->tx_attr->op_flags & FI_DELIVERY_COMPLETE))
		farm_warn("ofi: %s does not complete WRITEs on delivery", prov);
}

/* The CQ, with a wait fd when the provider has one: the progress thread
 * then sleeps in poll(2) instead of spinning. */
static int open_cq(struct ofi_fabric *f, const char *prov)
{
	struct fi_cq_attr cqa = {
	        .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD, .size = 0};
	f->cq_wait = true;
	if (fi_cq_open(f->domain, &cqa, &f->cq, NULL)) {
		cqa.wait_obj = FI_WAIT_NONE;
		f->cq_wait = false;
		int rc = fi_cq_open(f->domain, &cqa, &f->cq, NULL);
		if (rc)
			return rc;
		farm_warn("ofi: provider %s has no CQ wait fd: the progress "
		          "thread polls (costs CPU while idle)",
		          prov);
	}
	if (f->cq_wait &&
	    fi_control(&f->cq->fid, FI_GETWAIT, &f->cq_fd) != FI_SUCCESS) {
		f->cq_wait = false;
		f->cq_fd = -1;
	}
	return 0;
}

/* The RDM endpoint, bound and enabled, and the address peers are given. */
static int open_endpoint(struct ofi_fabric *f)
{
	int rc;
	if ((rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)) ||
	    (rc = fi_ep_bind(f->ep, &f->av->fid, 0)) ||
	    (rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_enable(f->ep)))
		return rc;
	char name[128];
	size_t nl = sizeof(name);
	if ((rc = fi_getname(&f->ep->fid, name, &nl)))
		return rc;
	if (farm_ofi_format_addr(name, f->addr, sizeof(f->addr)) < 0)
		return -FI_EINVAL;
	return 0;
}

/* Without provider keys, peers validate a key against this fabric's
 * table of registrations, which they READ: register the table itself as
 * entry 0. */
static int open_key_table(struct ofi_fabric *f)
{
	size_t tl = sizeof(struct ofi_tent) * OFI_TABLE_N;
	f->table = aligned_alloc(4096, tl);
	if (!f->table)
		return -FI_ENOMEM;
	memset(f->table, 0, tl);
	f->slot_gen[0] = 1;
	uint64_t tkey = 1ull << 12;
	/* No registration under the plain key: peers READ it with their
	 * own (ofi_fence.c), as every registration. */
	f->table[0] = (struct ofi_tent){.key = tkey,
	                                .addr = (uintptr_t)f->table,
	                                .len = tl,
	                                .access = FARM_ACCESS_REMOTE_READ};
	return 0;
}

/* Domain, address vector, CQ, endpoint, receive buffers and key table. */
static int open_resources(struct ofi_fabric *f, const char *prov)
{
	struct fi_info *i = f->info;
	int rc;
	if ((rc = fi_fabric(i->fabric_attr, &f->fabric, NULL)) ||
	    (rc = fi_domain(f->fabric, i, &f->domain, NULL)))
		return rc;
	struct fi_av_attr ava = {.type = FI_AV_UNSPEC};
	if ((rc = fi_av_open(f->domain, &ava, &f->av, NULL)) ||
	    (rc = open_cq(f, prov)) || (rc = open_endpoint(f)))
		return rc;
	if (f->mr_local &&
	    (rc = fi_mr_reg(f->domain, f->rbufs, sizeof(f->rbufs), FI_RECV, 0,
	                    0, 0, &f->rbufs_mr, NULL)))
		return rc;
	f->validate = !f->prov_key;
	if (f->validate)
		return open_key_table(f);
	return 0;
}

/* Post the receive buffers and start the progress thread. */
static int start_progress(struct ofi_fabric *f)
{
	for (int k = 0; k < OFI_RECVS; k++)
		farm_ofi_post_recv(f, &f->rbufs[k]);
	f->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (f->stop_fd < 0 ||
	    pthread_create(&f->progress, NULL, progress_main, f))
		return -FI_ENOMEM;
	f->progress_started = true;
	return 0;
}

static int ofi_open(const farm_fabric_attr *attr, farm_fabric **out)
{
	const char *prov;
	struct ofi_fabric *f = fabric_new(attr, &prov);
	if (!f)
		return -ENOMEM;
	const char *listen = attr->listen_addr && *attr->listen_addr
	                             ? attr->listen_addr
	                             : "127.0.0.1:0";
	struct sockaddr_storage ss;
	socklen_t sl;
	if (farm_ofi_parse_addr(listen, &ss, &sl)) {
		farm_err("ofi: listen address '%s' is not ip:port", listen);
		free(f);
		return -EINVAL;
	}
	struct fi_info *hints = fi_allocinfo();
	if (!hints) {
		free(f);
		return -ENOMEM;
	}
	fill_hints(hints, prov, &ss, sl);
	int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &f->info);
	fi_freeinfo(hints);
	if (rc) {
		farm_info("ofi: no libfabric provider '%s' with RDM endpoints, "
		          "RMA and atomics on %s: %s",
		          prov, listen, fi_strerror(-rc));
		free(f);
		return FARM_ENODEVICE;
	}
	read_grants(f, prov);
	rc = open_resources(f, prov);
	if (!rc)
		rc = start_progress(f);
	if (rc) {
		farm_err("ofi: opening %s on %s: %s", prov, listen,
		         fi_strerror(-rc));
		rc = fi_to_errno(rc);
		ofi_close(&f->base);
		return rc;
	}
	farm_dbg("ofi: machine %" PRIu32 " on %s (%s, mr_mode%s%s%s)",
	         attr->machine_id, f->addr, prov, f->mr_local ? " local" : "",
	         f->virt_addr ? " virt_addr" : "",
	         f->prov_key ? " prov_key" : "");
	*out = &f->base;
	return 0;
}

static void ofi_close(farm_fabric *fab)
{
	struct ofi_fabric *f = F(fab);
	if (f->progress_started) {
		uint64_t one = 1;
		if (write(f->stop_fd, &one, sizeof(one)) < 0)
			farm_warn("ofi: waking the progress thread: %s",
			          strerror(errno));
		pthread_join(f->progress, NULL);
	}
	if (f->stop_fd >= 0)
		close(f->stop_fd);
	for (unsigned k = 0; k < OFI_MAX_EPS; k++)
		if (f->eps[k])
			f->base.ops->ep_destroy(&f->eps[k]->base);
	if (f->ep)
		fi_close(&f->ep->fid);
	/* Sends still in the queue were flushed with the endpoint. */
	if (f->rbufs_mr)
		fi_close(&f->rbufs_mr->fid);
	while (f->mrs) {
		struct ofi_mr *m = f->mrs;
		f->mrs = m->next;
		if (m->mr)
			fi_close(&m->mr->fid);
		free(m);
	}
	farm_ofi_holders_free(f);
	if (f->table_mr)
		fi_close(&f->table_mr->fid);
	free(f->table);
	if (f->cq)
		fi_close(&f->cq->fid);
	if (f->av)
		fi_close(&f->av->fid);
	if (f->domain)
		fi_close(&f->domain->fid);
	if (f->fabric)
		fi_close(&f->fabric->fid);
	if (f->info)
		fi_freeinfo(f->info);
	while (f->orphans) {
		struct ofi_ep *ep = f->orphans;
		f->orphans = ep->cq_next;
		ep_free(ep);
	}
	for (unsigned p = 0; p < OFI_MAX_PEERS; p++)
		free(f->peers[p].hb.op);
	while (f->hb_old) {
		struct ofi_hbop *op = f->hb_old;
		f->hb_old = op->next;
		free(op);
	}
	while (f->conns) {
		struct ofi_conn *c = f->conns;
		f->conns = c->next;
		free(c);
	}
	farm_ofi_acks_free(f);
	pthread_mutex_destroy(&f->drain);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static int ofi_address(const farm_fabric *fab, char *buf, size_t len)
{
	const struct ofi_fabric *f = (const struct ofi_fabric *)fab;
	size_t n = strlen(f->addr);
	if (n + 1 > len)
		return -ENOSPC;
	memcpy(buf, f->addr, n + 1);
	return (int)n;
}

/* ---- completion queues ------------------------------------------------- */

static int ofi_cq_create(farm_fabric *fab, unsigned depth, unsigned flags,
                         farm_cq **out)
{
	struct ofi_cq *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base.fab = fab;
	c->shared = flags & FARM_CQ_SHARED;
	pthread_mutex_init(&c->lock, NULL);
	*out = &c->base;
	return 0;
}

static int ofi_cq_destroy(farm_cq *cq)
{
	struct ofi_cq *c = (struct ofi_cq *)cq;
	if (c->eps)
		return -EBUSY;
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

/* ---- endpoints --------------------------------------------------------- */

/* The id of @pe has a new holder (another address): its beats so far
 * went to the earlier one, which may never answer (a killed process's
 * connection is not reported), and counted against the new one they
 * would mark it dead at the next round. The outstanding beat's operation
 * is kept, unused, until the fabric closes (libfabric may still complete
 * it). Drain lock held. */
static void hb_abandon(struct ofi_fabric *f, struct ofi_peer *pe)
{
	if (atomic_load(&pe->hb.busy) && pe->hb.op) {
		pe->hb.op->next = f->hb_old;
		f->hb_old = pe->hb.op;
		pe->hb.op = NULL;
	}
	atomic_store(&pe->hb.busy, 0);
	pe->hb.trying = false;
}

/* @ep, just connected, counts for its peer @pe; the heartbeat goes where
 * it goes (the id's current holder). Drain lock held. */
static void peer_add_ep(struct ofi_fabric *f, struct ofi_peer *pe,
                        const struct ofi_ep *ep)
{
	pe->neps++;
	if (!ep->tab_len)
		return;
	if (pe->hb.known && pe->hb.dest != ep->dest &&
	    atomic_load(&farm_ofi_knob_holder))
		hb_abandon(f, pe);
	if (!atomic_load(&pe->hb.busy)) {
		pe->hb.dest = ep->dest;
		pe->hb.key = ep->tab_key;
		pe->hb.addr = ep->tab_addr;
		pe->hb.known = true;
	}
}

static int ofi_ep_connect(farm_fabric *fab, farm_cq *cq, uint32_t peer_id,
                          const char *peer_addr, const farm_ep_attr *attr,
                          farm_ep **out)
{
	struct ofi_fabric *f = F(fab);
	fi_addr_t dest;
	int rc = farm_ofi_av_lookup(f, peer_addr, &dest);
	if (rc)
		return rc == -EINVAL ? -ECONNREFUSED : rc;
	uint64_t tab[3] = {0, 0, 0};
	/* Fenced (a revoked id, or not its admitted holder): the endpoint
	 * is made and its requests fail FARM_EFENCED, as on shm and udp. */
	uint32_t wire = 0;
	rc = farm_ofi_hello(f, peer_id, dest, tab, &wire);
	if (rc == -EPROTO)
		return farm_fabric_wire_refused(fab, peer_id, peer_addr, wire);
	bool fenced = rc == FARM_EFENCED;
	if (rc && !fenced)
		return rc;
	if (peer_id < OFI_MAX_PEERS) {
		/* The id's holder, which answered, is at @dest from now on
		 * (the address first, so that an earlier holder's endpoint
		 * timing out meanwhile does not kill it; a failed connect to
		 * an earlier holder's address changes nothing), and a new
		 * connection is a new chance (a restarted machine). */
		atomic_store(&f->peers[peer_id].dest, dest);
		atomic_store(&f->peers[peer_id].dead, 0);
	}
	struct ofi_ep *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->base.fab = fab;
	ep->base.cq = cq;
	ep->base.peer = peer_id;
	ep->fab = f;
	ep->dest = dest;
	ep->tab_key = tab[0];
	ep->tab_addr = tab[1];
	ep->tab_len =
	        tab[2] <= sizeof(struct ofi_tent) * OFI_TABLE_N ? tab[2] : 0;
	ep->tag = (uint32_t)(tab[0] >> 32);
	atomic_store(&ep->fenced, fenced);
	ep->shared = attr->flags & FARM_EP_SHARED;
	pthread_mutex_init(&ep->lock, NULL);
	unsigned d = 1;
	while (d < attr->sq_depth)
		d <<= 1;
	ep->depth = attr->sq_depth;
	ep->mask = d - 1;
	ep->slots_len = sizeof(struct ofi_slot) * d;
	ep->slots = aligned_alloc(64, (ep->slots_len + 63) & ~(size_t)63);
	if (!ep->slots) {
		free(ep);
		return -ENOMEM;
	}
	memset(ep->slots, 0, ep->slots_len);
	if (f->mr_local) {
		if (fi_mr_reg(f->domain, ep->slots, ep->slots_len,
		              FI_READ | FI_WRITE | FI_SEND, 0, 0, 0,
		              &ep->slots_mr, NULL)) {
			free(ep->slots);
			free(ep);
			return -ENOMEM;
		}
		ep->slots_desc = fi_mr_desc(ep->slots_mr);
	}
	struct ofi_cq *c = (struct ofi_cq *)cq;
	pthread_mutex_lock(&f->drain);
	unsigned idx = 0;
	while (idx < OFI_MAX_EPS && f->eps[idx])
		idx++;
	if (idx == OFI_MAX_EPS) {
		pthread_mutex_unlock(&f->drain);
		if (ep->slots_mr)
			fi_close(&ep->slots_mr->fid);
		free(ep->slots);
		free(ep);
		return -ENOSPC;
	}
	ep->idx = idx;
	ep->gen = ++f->ep_gen[idx];
	f->eps[idx] = ep;
	if (peer_id < OFI_MAX_PEERS)
		peer_add_ep(f, &f->peers[peer_id], ep);
	pthread_mutex_unlock(&f->drain);
	if (c->shared)
		pthread_mutex_lock(&c->lock);
	ep->cq_next = c->eps;
	c->eps = ep;
	c->neps++;
	if (c->shared)
		pthread_mutex_unlock(&c->lock);
	*out = &ep->base;
	return 0;
}

static void ofi_ep_disconnect(farm_ep *fep)
{
	struct ofi_ep *ep = (struct ofi_ep *)fep;
	ofi_ep_lock(ep);
	ep->closed = true;
	ofi_ep_unlock(ep);
}

static void ofi_ep_destroy(farm_ep *fep)
{
	struct ofi_ep *ep = (struct ofi_ep *)fep;
	struct ofi_fabric *f = ep->fab;
	struct ofi_cq *c = (struct ofi_cq *)fep->cq;
	if (c->shared)
		pthread_mutex_lock(&c->lock);
	for (struct ofi_ep **p = &c->eps; *p; p = &(*p)->cq_next)
		if (*p == ep) {
			*p = ep->cq_next;
			c->neps--;
			break;
		}
	if (c->shared)
		pthread_mutex_unlock(&c->lock);
	/* Operations still in libfabric write into the slots (READ
	 * verification copies): let them finish, a bounded time, before the
	 * slots go. Past the bound (a dead peer that never answers) the
	 * slots are kept until the fabric closes. */
	uint64_t deadline = farm_now_ns() + 100000000ull;
	bool busy = true;
	while (busy) {
		busy = ep->fetch_lost;
		for (uint32_t q = ep->tail; q != ep->next_post; q++) {
			struct ofi_slot *s = &ep->slots[q & ep->mask];
			busy |= s->state == S_POSTED &&
			        atomic_load(&s->pending) > 0;
		}
		if (!busy || farm_now_ns() > deadline)
			break;
		farm_ofi_drain_try(f);
	}
	pthread_mutex_lock(&f->drain);
	f->eps[ep->idx] = NULL;
	if (ep->base.peer < OFI_MAX_PEERS)
		f->peers[ep->base.peer].neps--;
	if (busy) {
		ep->cq_next = f->orphans;
		f->orphans = ep;
	}
	pthread_mutex_unlock(&f->drain);
	if (!busy)
		ep_free(ep);
}

static void ep_free(struct ofi_ep *ep)
{
	if (ep->slots_mr)
		fi_close(&ep->slots_mr->fid);
	for (unsigned k = 0; k <= ep->mask; k++) {
		if (ep->slots[k].scr_mr)
			fi_close(&ep->slots[k].scr_mr->fid);
		free(ep->slots[k].scratch);
	}
	free(ep->slots);
	if (ep->cache_mr)
		fi_close(&ep->cache_mr->fid);
	free(ep->cache);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

static bool ofi_ep_usable(const farm_ep *fep)
{
	const struct ofi_ep *ep = (const struct ofi_ep *)fep;
	return !ep->err_state && !ep->closed && !ofi_peer_dead(ep);
}

static int ofi_ep_fault(farm_ep *fep, enum farm_fault fl, uint64_t arg)
{
	farm_faults_apply(&((struct ofi_ep *)fep)->faults, fl, arg);
	return 0;
}

static int ofi_fault_peer(farm_fabric *fab, uint32_t peer_id,
                          enum farm_fault fl, uint64_t arg)
{
	struct ofi_fabric *f = F(fab);
	bool found = false;
	pthread_mutex_lock(&f->drain);
	for (unsigned k = 0; k < OFI_MAX_EPS; k++)
		found |= f->eps[k] && f->eps[k]->base.peer == peer_id;
	pthread_mutex_unlock(&f->drain);
	if (!found || peer_id >= OFI_MAX_PEERS)
		return -ENOENT;
	farm_faults_apply(&f->peers[peer_id].faults, fl, arg);
	return 0;
}

int farm_ofi_stats(const farm_fabric *fab, struct farm_ofi_stats *out)
{
	if (!fab || !out || fab->ops != &farm_ofi_ops)
		return -EINVAL;
	const struct ofi_fabric *f = (const struct ofi_fabric *)fab;
	memcpy(out, &f->st, sizeof(*out));
	return 0;
}

const struct farm_fabric_ops farm_ofi_ops = {
        .name = "ofi",
        .open = ofi_open,
        .close = ofi_close,
        .address = ofi_address,
        .mem_alloc = farm_fabric_anon_alloc,
        .mem_free = farm_fabric_anon_free,
        .mem_persist = farm_fabric_anon_persist,
        .mr_reg = farm_ofi_mr_reg,
        .mr_dereg = farm_ofi_mr_dereg,
        .cq_create = ofi_cq_create,
        .cq_destroy = ofi_cq_destroy,
        .cq_poll = farm_ofi_cq_poll,
        .ep_connect = ofi_ep_connect,
        .ep_disconnect = ofi_ep_disconnect,
        .ep_destroy = ofi_ep_destroy,
        .ep_usable = ofi_ep_usable,
        .ep_post = farm_ofi_ep_post,
        .ep_fault = ofi_ep_fault,
        .fault_peer = ofi_fault_peer,
        .revoke = farm_ofi_revoke,
        .admit = farm_ofi_admit,
};
