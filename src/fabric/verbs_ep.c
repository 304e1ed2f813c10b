/*
 * verbs provider: connection setup. Addresses ("ip:port"), the private
 * data of connection messages, and endpoints: an active RC QP each,
 * resolved and connected on a private event channel (synchronous,
 * bounded), then migrated to the listener's channel. See verbs.c's head
 * comment.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "fabric/verbs_int.h"
#include "util/log.h"

/*
 * Parse "ip:port" or "[ipv6]:port" (numeric only: no name lookups that could
 * block). Returns 0 or -EINVAL.
 */
int farm_vb_parse_addr(const char *s, struct sockaddr_storage *ss)
{
	char host[VB_ADDR_MAX];
	const char *port;
	size_t hlen;
	if (!s)
		return -EINVAL;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		hlen = (size_t)(end - s - 1);
		memcpy(host, s + 1, FARM_MIN(hlen, sizeof(host) - 1));
		port = end + 2;
	} else {
		const char *colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		hlen = (size_t)(colon - s);
		memcpy(host, s, FARM_MIN(hlen, sizeof(host) - 1));
		port = colon + 1;
	}
	if (hlen == 0 || hlen >= sizeof(host) || !*port || strlen(port) > 5)
		return -EINVAL;
	host[hlen] = 0;
	/* An IPv6 address needs its brackets: "::1:80" is ambiguous. */
	if (s[0] != '[' && strchr(host, ':'))
		return -EINVAL;
	unsigned long pn = 0;
	for (const char *p = port; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		pn = pn * 10 + (unsigned long)(*p - '0');
	}
	if (pn > 65535)
		return -EINVAL;
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
	if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
		return -EINVAL;
	int rc = -EINVAL;
	if (res->ai_addrlen <= sizeof(*ss)) {
		memset(ss, 0, sizeof(*ss));
		memcpy(ss, res->ai_addr, res->ai_addrlen);
		rc = 0;
	}
	freeaddrinfo(res);
	return rc;
}

bool farm_vb_addr_is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		return in->sin_addr.s_addr == htonl(INADDR_ANY);
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
		        (const struct sockaddr_in6 *)ss;
		return memcmp(&in6->sin6_addr, &in6addr_any,
		              sizeof(in6addr_any)) == 0;
	}
	return false;
}

int farm_vb_format_addr(const struct sockaddr *sa, uint16_t port, char *buf,
                        size_t len)
{
	char ip[INET6_ADDRSTRLEN];
	int n;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		if (!inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip)))
			return -EINVAL;
		n = snprintf(buf, len, "%s:%u", ip, (unsigned)port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
		        (const struct sockaddr_in6 *)sa;
		if (!inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip)))
			return -EINVAL;
		n = snprintf(buf, len, "[%s]:%u", ip, (unsigned)port);
	} else {
		return -EAFNOSUPPORT;
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

void farm_vb_pdata_encode(struct vb_pdata *pd, uint32_t kind, uint32_t from,
                          uint32_t to, uint32_t reason, uint32_t wire)
{
	pd->magic = htole64(VB_MAGIC);
	pd->kind = htole32(kind);
	pd->from = htole32(from);
	pd->to = htole32(to);
	pd->reason = htole32(reason);
	pd->wire = htole32(wire);
	pd->pad = 0;
}

/* Decode private data of @kind; false when it is not ours. */
bool farm_vb_pdata_decode(const void *data, size_t len, uint32_t kind,
                          struct vb_pdata *out)
{
	struct vb_pdata pd;
	if (!data || len < sizeof(pd))
		return false;
	memcpy(&pd, data, sizeof(pd));
	if (le64toh(pd.magic) != VB_MAGIC || le32toh(pd.kind) != kind)
		return false;
	out->magic = VB_MAGIC;
	out->kind = kind;
	out->from = le32toh(pd.from);
	out->to = le32toh(pd.to);
	out->reason = le32toh(pd.reason);
	out->wire = le32toh(pd.wire);
	return true;
}

int farm_vb_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return neg_errno(EIO);
	return 0;
}

/* ---- endpoints ----------------------------------------------------------- */

struct vb_evt {
	enum rdma_cm_event_type type;
	int status;
	uint8_t pdata[64];
	uint8_t pdata_len;
};

/* Wait for the next event on a private (non-blocking) channel, at most
 * @ms. Returns 0 and fills @out, or -ETIMEDOUT / a negative errno. */
static int wait_event(struct rdma_event_channel *ch, int ms, struct vb_evt *out)
{
	uint64_t deadline = farm_now_ns() + (uint64_t)ms * 1000000u;
	memset(out, 0, sizeof(*out));
	for (;;) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(ch, &ev) == 0) {
			out->type = ev->event;
			out->status = ev->status;
			out->pdata_len = 0;
			const struct rdma_conn_param *cp = &ev->param.conn;
			if (cp->private_data && cp->private_data_len) {
				out->pdata_len = (uint8_t)FARM_MIN(
				        (size_t)cp->private_data_len,
				        sizeof(out->pdata));
				memcpy(out->pdata, cp->private_data,
				       out->pdata_len);
			}
			if (rdma_ack_cm_event(ev))
				farm_warn("verbs: rdma_ack_cm_event: %s",
				          strerror(errno));
			return 0;
		}
		if (errno != EAGAIN && errno != EINTR)
			return neg_errno(EIO);
		uint64_t now = farm_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		int left = (int)((deadline - now + 999999u) / 1000000u);
		struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
		if (poll(&pfd, 1, left) < 0 && errno != EINTR)
			return neg_errno(EIO);
	}
}

/* Wait for @want; any other event or an error is a failure to connect. */
static int expect_event(struct rdma_event_channel *ch, int ms,
                        enum rdma_cm_event_type want, const char *peer_addr,
                        struct vb_evt *ev)
{
	int rc = wait_event(ch, ms, ev);
	if (rc) {
		farm_info("verbs: %s: no %s within %d ms (%s)", peer_addr,
		          rdma_event_str(want), ms, strerror(-rc));
		return rc;
	}
	if (ev->type != want) {
		farm_info("verbs: %s: %s (status %d)", peer_addr,
		          rdma_event_str(ev->type), ev->status);
		return -ECONNREFUSED;
	}
	return 0;
}

/* Create the QP, asking for FARM_INLINE_MAX inline bytes and settling for
 * what the device grants. */
static int create_qp(struct vb_ep *ep, struct vb_cq *cq)
{
	static const uint32_t tries[] = {FARM_INLINE_MAX, 128, 64, 32, 0};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(tries); i++) {
		struct ibv_qp_init_attr qa;
		memset(&qa, 0, sizeof(qa));
		qa.qp_context = ep;
		qa.send_cq = cq->cq;
		qa.recv_cq = cq->cq; /* no receive is ever posted */
		qa.qp_type = IBV_QPT_RC;
		qa.sq_sig_all = 0; /* selective signaling */
		qa.cap.max_send_wr = ep->depth;
		qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		qa.cap.max_inline_data = tries[i];
		if (rdma_create_qp(ep->id, ep->fab->pd, &qa) == 0) {
			ep->qp = ep->id->qp;
			ep->qp_num = ep->qp->qp_num;
			/* rdma_create_qp(3) returns the granted caps. */
			ep->max_inline = qa.cap.max_inline_data;
			return 0;
		}
		if (errno != EINVAL && errno != ENOMEM)
			break;
	}
	int rc = neg_errno(ENOMEM);
	farm_err("verbs: rdma_create_qp (sq_depth %u): %s", ep->depth,
	         strerror(-rc));
	return rc;
}

static void ep_free(struct vb_ep *ep)
{
	if (ep->bounce_mr && ibv_dereg_mr(ep->bounce_mr))
		farm_warn("verbs: ibv_dereg_mr (bounce buffer) failed");
	free(ep->bounce);
	free(ep->lring);
	free(ep->ring);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

/* The device bounds the send queue; ask for more and get the device's. */
static uint32_t clamp_sq_depth(const struct vb_fabric *fab, uint32_t depth)
{
	if (depth > (uint32_t)fab->dattr.max_qp_wr) {
		farm_warn("verbs: sq_depth %u above the device's %d; using %d",
		          depth, fab->dattr.max_qp_wr, fab->dattr.max_qp_wr);
		depth = (uint32_t)fab->dattr.max_qp_wr;
	}
	return depth;
}

/* Allocate an endpoint and its rings; nothing on the device yet. */
static struct vb_ep *ep_new(farm_fabric *f, farm_cq *c, uint32_t peer_id,
                            uint32_t depth, const farm_ep_attr *attr)
{
	struct vb_fabric *fab = to_fab(f);
	struct vb_ep *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return NULL;
	uint32_t size = pow2_at_least(depth);
	ep->ring = calloc(size, sizeof(*ep->ring));
	ep->lring = calloc(size, sizeof(*ep->lring));
	pthread_mutex_init(&ep->lock, NULL);
	if (!ep->ring || !ep->lring) {
		ep_free(ep);
		return NULL;
	}
	ep->base.fab = f;
	ep->base.cq = c;
	ep->base.peer = peer_id;
	ep->ctx.kind = VB_CTX_EP;
	ep->fab = fab;
	ep->cq = (struct vb_cq *)c;
	ep->depth = depth;
	ep->mask = size - 1;
	ep->signal_every = FARM_MAX(depth / 2, 1u);
	ep->shared = attr->flags & FARM_EP_SHARED;
	ep->incarnation = atomic_fetch_add(&fab->next_incarnation, 1);
	atomic_init(&ep->state, EP_OK);
	atomic_init(&ep->peer_gone, 0);
	return ep;
}

/* A private, non-blocking channel: connecting waits with a deadline, and
 * the listener thread must not see this id's events until it is ours. */
static int open_private_channel(struct rdma_event_channel **out)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return neg_errno(ENOMEM);
	int rc = farm_vb_set_nonblock(ch->fd);
	if (rc) {
		rdma_destroy_event_channel(ch);
		return rc;
	}
	*out = ch;
	return 0;
}

/* Resolve the peer's address, then the route to it, on ep->id. The peer
 * must be reached through this fabric's device: the PD and CQ are its. */
static int resolve_peer(struct vb_ep *ep, struct rdma_event_channel *ch,
                        struct sockaddr_storage *dst, const char *peer_addr)
{
	struct vb_fabric *fab = ep->fab;
	struct vb_evt ev;
	/* From our listen address when it names one: same device. */
	struct sockaddr *src =
	        fab->src_specific && fab->src.ss_family == dst->ss_family
	                ? (struct sockaddr *)&fab->src
	                : NULL;
	if (rdma_resolve_addr(ep->id, src, (struct sockaddr *)dst,
	                      VB_RESOLVE_MS)) {
		int rc = neg_errno(EINVAL);
		farm_info("verbs: rdma_resolve_addr(%s): %s", peer_addr,
		          strerror(-rc));
		if (rc != -EINVAL && rc != -ENOMEM)
			rc = -ECONNREFUSED;
		return rc;
	}
	int rc = expect_event(ch, VB_RESOLVE_WAIT_MS,
	                      RDMA_CM_EVENT_ADDR_RESOLVED, peer_addr, &ev);
	if (rc)
		return rc;
	if (ep->id->verbs != fab->ctx) {
		farm_err("verbs: %s is reached through device %s, but this "
		         "fabric uses %s",
		         peer_addr,
		         ep->id->verbs
		                 ? ibv_get_device_name(ep->id->verbs->device)
		                 : "?",
		         fab->dev_name);
		return -ENETUNREACH;
	}
	if (rdma_resolve_route(ep->id, VB_RESOLVE_MS)) {
		rc = neg_errno(EIO);
		farm_info("verbs: rdma_resolve_route(%s): %s", peer_addr,
		          strerror(-rc));
		return -ECONNREFUSED;
	}
	return expect_event(ch, VB_RESOLVE_WAIT_MS,
	                    RDMA_CM_EVENT_ROUTE_RESOLVED, peer_addr, &ev);
}

static void cq_unreserve(struct vb_cq *cq, uint32_t depth)
{
	pthread_mutex_lock(&cq->lock);
	cq->committed -= depth;
	pthread_mutex_unlock(&cq->lock);
}

/* Reserve room on the CQ for the send queue, create the QP and attach it
 * to the CQ. On failure, undoes its own steps. */
static int attach_qp(struct vb_ep *ep, struct vb_cq *cq, uint32_t depth)
{
	pthread_mutex_lock(&cq->lock);
	int rc = farm_vb_cq_reserve(cq, depth);
	pthread_mutex_unlock(&cq->lock);
	if (rc)
		return rc;
	rc = create_qp(ep, cq);
	if (rc) {
		cq_unreserve(cq, depth);
		return rc;
	}
	pthread_mutex_lock(&cq->lock);
	rc = farm_vb_cq_attach(cq, ep);
	pthread_mutex_unlock(&cq->lock);
	if (rc) {
		rdma_destroy_qp(ep->id);
		cq_unreserve(cq, depth);
	}
	return rc;
}

/* Undo attach_qp(). */
static void detach_qp(struct vb_ep *ep, struct vb_cq *cq, uint32_t depth)
{
	pthread_mutex_lock(&cq->lock);
	farm_vb_cq_detach(cq, ep);
	pthread_mutex_unlock(&cq->lock);
	rdma_destroy_qp(ep->id);
	cq_unreserve(cq, depth);
}

static void disconnect_quietly(struct vb_ep *ep)
{
	if (rdma_disconnect(ep->id))
		farm_dbg("verbs: rdma_disconnect: %s", strerror(errno));
}

/* Send the connect request, naming who we are and whom we want. */
static int send_request(struct vb_ep *ep, uint32_t peer_id,
                        const char *peer_addr)
{
	struct vb_fabric *fab = ep->fab;
	struct vb_pdata req;
	farm_vb_pdata_encode(&req, VB_PD_REQ, ep->base.fab->machine_id, peer_id,
	                     0, ep->base.fab->wire);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &req;
	cp.private_data_len = sizeof(req);
	/* As many READ/CAS in flight as the device allows (the peer's
	 * accept lowers it to what it can answer), and as many of the
	 * peer's as we can answer (it never sends any). */
	cp.initiator_depth = fab->max_init_rd_atom;
	cp.responder_resources = fab->max_rd_atom;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(ep->id, &cp)) {
		int rc = neg_errno(EIO);
		farm_info("verbs: rdma_connect(%s): %s", peer_addr,
		          strerror(-rc));
		return -ECONNREFUSED;
	}
	return 0;
}

/* Wait for the peer's answer. A refusal naming another machine is a
 * configuration error (-EINVAL), not a peer that is down. An accept that
 * does not name the pair we asked for is disconnected here. */
static int await_accept(struct vb_ep *ep, struct rdma_event_channel *ch,
                        uint32_t peer_id, const char *peer_addr)
{
	struct vb_evt ev;
	struct vb_pdata pd;
	int rc = wait_event(ch, VB_CONNECT_WAIT_MS, &ev);
	if (rc) {
		farm_info("verbs: %s: no answer within %d ms", peer_addr,
		          VB_CONNECT_WAIT_MS);
		return rc;
	}
	if (ev.type == RDMA_CM_EVENT_REJECTED &&
	    farm_vb_pdata_decode(ev.pdata, ev.pdata_len, VB_PD_REJ, &pd) &&
	    pd.reason == VB_REJ_WRONG_MACHINE) {
		farm_err("verbs: the machine at %s is %u, not %u", peer_addr,
		         pd.from, peer_id);
		return -EINVAL;
	}
	if (ev.type == RDMA_CM_EVENT_REJECTED &&
	    farm_vb_pdata_decode(ev.pdata, ev.pdata_len, VB_PD_REJ, &pd) &&
	    pd.reason == VB_REJ_WIRE)
		return farm_fabric_wire_refused(ep->base.fab, peer_id,
		                                peer_addr, pd.wire);
	if (ev.type != RDMA_CM_EVENT_ESTABLISHED) {
		farm_info(
		        "verbs: connecting to machine %u at %s: %s (status %d)",
		        peer_id, peer_addr, rdma_event_str(ev.type), ev.status);
		return -ECONNREFUSED;
	}
	if (!farm_vb_pdata_decode(ev.pdata, ev.pdata_len, VB_PD_ACC, &pd) ||
	    pd.from != peer_id || pd.to != ep->base.fab->machine_id) {
		farm_err(
		        "verbs: the machine at %s did not answer as machine %u",
		        peer_addr, peer_id);
		disconnect_quietly(ep);
		return -EINVAL;
	}
	if (pd.wire != ep->base.fab->wire) {
		disconnect_quietly(ep);
		return farm_fabric_wire_refused(ep->base.fab, peer_id,
		                                peer_addr, pd.wire);
	}
	return 0;
}

int farm_vb_ep_connect(farm_fabric *f, farm_cq *c, uint32_t peer_id,
                       const char *peer_addr, const farm_ep_attr *attr,
                       farm_ep **out)
{
	struct vb_fabric *fab = to_fab(f);
	struct vb_cq *cq = (struct vb_cq *)c;
	struct sockaddr_storage dst;
	if (farm_vb_parse_addr(peer_addr, &dst)) {
		farm_err("verbs: bad peer address '%s' (want ip:port)",
		         peer_addr);
		return -EINVAL;
	}
	uint32_t depth = clamp_sq_depth(fab, attr->sq_depth);
	struct vb_ep *ep = ep_new(f, c, peer_id, depth, attr);
	if (!ep)
		return -ENOMEM;

	struct rdma_event_channel *ch;
	int rc = open_private_channel(&ch);
	if (rc)
		goto fail_ep;
	if (rdma_create_id(ch, &ep->id, &ep->ctx, RDMA_PS_TCP)) {
		rc = neg_errno(ENOMEM);
		goto fail_ch;
	}
	rc = resolve_peer(ep, ch, &dst, peer_addr);
	if (rc)
		goto fail_id;
	rc = attach_qp(ep, cq, depth);
	if (rc)
		goto fail_id;
	rc = send_request(ep, peer_id, peer_addr);
	if (!rc)
		rc = await_accept(ep, ch, peer_id, peer_addr);
	if (rc)
		goto fail_attach;
	/* From here the listener thread sees this id's events (the peer
	 * disconnecting). Blocks only while events are unacked: none are. */
	if (rdma_migrate_id(ep->id, fab->ch)) {
		rc = neg_errno(EIO);
		farm_err("verbs: rdma_migrate_id: %s", strerror(-rc));
		disconnect_quietly(ep);
		goto fail_attach;
	}
	rdma_destroy_event_channel(ch);
	pthread_mutex_lock(&fab->lock);
	ep->next = fab->eps;
	fab->eps = ep;
	pthread_mutex_unlock(&fab->lock);
	farm_dbg("verbs: connected to machine %u at %s (qp %u, inline %u)",
	         peer_id, peer_addr, ep->qp_num, ep->max_inline);
	*out = &ep->base;
	return 0;

fail_attach:
	detach_qp(ep, cq, depth);
fail_id:
	/* Cancels whatever is outstanding; every event we took was acked. */
	if (rdma_destroy_id(ep->id))
		farm_warn("verbs: rdma_destroy_id: %s", strerror(errno));
fail_ch:
	rdma_destroy_event_channel(ch);
fail_ep:
	ep_free(ep);
	return rc;
}

void farm_vb_ep_disconnect(farm_ep *e)
{
	struct vb_ep *ep = (struct vb_ep *)e;
	ep_lock(ep);
	if (atomic_exchange(&ep->state, EP_CLOSED) != EP_CLOSED) {
		/* Moves the QP to error: what is queued flushes, and is
		 * reported as -ENOTCONN (ep_harvest). */
		if (rdma_disconnect(ep->id))
			farm_dbg("verbs: rdma_disconnect: %s", strerror(errno));
	}
	ep_unlock(ep);
}

void farm_vb_ep_destroy(farm_ep *e)
{
	struct vb_ep *ep = (struct vb_ep *)e;
	struct vb_cq *cq = ep->cq;
	struct vb_fabric *fab = ep->fab;
	pthread_mutex_lock(&cq->lock);
	farm_vb_cq_detach(cq, ep);
	cq->committed -= ep->depth;
	if (ep->in_backlog)
		cq->backlog--;
	pthread_mutex_unlock(&cq->lock);
	/* Its software completions are dropped with it. */
	if (ep->ltail != ep->lhead)
		atomic_fetch_sub(&cq->local_pending, ep->ltail - ep->lhead);
	if (atomic_load(&ep->state) != EP_CLOSED && rdma_disconnect(ep->id))
		farm_dbg("verbs: rdma_disconnect: %s", strerror(errno));
	/* Late CQEs of this QP, if the provider leaves them in the CQ, find
	 * no endpoint (or another incarnation) and are dropped. */
	rdma_destroy_qp(ep->id);
	/* Waits for the listener to ack any event it holds for this id. */
	if (rdma_destroy_id(ep->id))
		farm_warn("verbs: rdma_destroy_id: %s", strerror(errno));
	pthread_mutex_lock(&fab->lock);
	for (struct vb_ep **pp = &fab->eps; *pp; pp = &(*pp)->next) {
		if (*pp == ep) {
			*pp = ep->next;
			break;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	ep_free(ep);
}

bool farm_vb_ep_usable(const farm_ep *e)
{
	const struct vb_ep *ep = (const struct vb_ep *)e;
	return atomic_load_explicit(&ep->state, memory_order_relaxed) ==
	               EP_OK &&
	       /* acquire: pairs with the listener's release store */
	       !atomic_load_explicit(&ep->peer_gone, memory_order_acquire) &&
	       !atomic_load_explicit(&ep->fab->device_lost,
	                             memory_order_relaxed);
}
