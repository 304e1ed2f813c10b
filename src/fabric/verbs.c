/*
 * verbs provider: the fabric on RDMA hardware through rdma-core
 * (libibverbs for the data path, librdmacm for connection setup).
 * InfiniBand, RoCE, and the software devices rxe and siw.
 *
 * What a fabric owns (ARCHITECTURE.md 2.1):
 *   - one device context, the one librdmacm opened for the device the
 *     listen address is on (or attr->device / the first device when the
 *     listen address is a wildcard), and one protection domain on it: every
 *     registration and queue pair of the fabric lives in that PD;
 *   - a listening rdma_cm_id bound to attr->listen_addr, on an event
 *     channel served by one listener thread. For every peer that connects,
 *     the thread creates a passive RC queue pair (on a small internal CQ:
 *     nothing is ever posted to it) and accepts. The peer's private data
 *     must carry {magic, its machine id, our machine id}; a request naming
 *     another machine id is rejected with a reason the initiator turns into
 *     -EINVAL. The passive QP is the responder of the peer's one-sided
 *     requests: the CM grants it remote WRITE, and READ and ATOMIC as soon
 *     as the peer asked for responder resources (kernel ib_cm rule), which
 *     ep_connect always does;
 *   - endpoints: one active RC QP each, created on a private event channel
 *     (resolve, connect and wait are synchronous and bounded), then
 *     migrated to the listener's channel so that the thread sees the peer
 *     disconnect;
 *   - completion queues: one ibv_cq each, shared by every endpoint attached
 *     to it, grown (ibv_resize_cq) so that it can hold every completion its
 *     endpoints could have outstanding at once: no CQ overrun, ever.
 *
 * Requests. farm_ep_post() turns its list into ibv_send_wr's and rings one
 * doorbell (one ibv_post_send) per VB_BATCH requests. Each request takes a
 * slot of the endpoint's send ring, whose sequence number is the low half
 * of the wr_id given to the NIC (the high half is the endpoint's
 * incarnation, so a late completion of a destroyed endpoint whose QP
 * number was reused is recognised and dropped). A completion for slot s
 * retires every slot up to s: RC reports completions of one send queue in
 * order, so slots before s that were unsignaled have completed, with
 * success unless the QP had already failed. Unsignaled requests thus hold
 * their slot until a later signaled one completes, as the NIC holds their
 * send-queue entries: the provider signals one request in every sq_depth/2
 * by itself (its success is not reported) so that the ring always drains.
 * Requests the provider can fail without the NIC (endpoint closed or in
 * error, peer known gone, local buffer outside its registration, CAS not
 * 8-byte aligned, a key that is no verbs key) never reach the QP: they
 * complete with their status through a per-endpoint software queue that
 * farm_cq_poll() drains first.
 *
 * Ordering guarantees, all given by the hardware:
 *   - an RC QP executes its requests in post order, and completions of one
 *     QP arrive in that order;
 *   - a WRITE's bytes are placed in increasing address order on the NICs
 *     FaRM targets (the paper relies on it for its ring buffers: the last 8
 *     bytes land last); the verbs spec does not promise it, so a device
 *     that does not keep it breaks the msg layer, not this file;
 *   - a READ is served by PCIe DMA reads, which are cache-coherent and
 *     atomic per 64-byte cache line on x86: this is the line atomicity the
 *     object layout relies on, with nothing to emulate here;
 *   - a CAS is atomic with respect to other NIC atomics on the same 8
 *     bytes (IBV_ATOMIC_HCA); atomicity with CPU stores needs
 *     IBV_ATOMIC_GLOB, which libfarm does not require.
 * Differences from shm the code above must accept: a request naming a
 * deregistered key fails with FARM_EREMOTE_ACCESS (the NIC reports key and
 * range errors alike); a software completion (see above) may be reported
 * before the hardware completions of requests posted earlier on the same
 * endpoint (those complete as the NIC reports them; nothing posted after a
 * failure ever succeeds); fault injection is not supported (-ENOTSUP from
 * the generic layer).
 *
 * What may race: the listener thread sets ep->peer_gone (atomic) while
 * posters read it; ep->state is atomic because farm_ep_usable() may be
 * called from any thread. Posting to a FARM_EP_SHARED endpoint is
 * serialised by its mutex (this is how q threads share one QP, the
 * "queue pair shared by q threads" of the paper), and the poller takes the
 * same mutex to retire its slots. A FARM_CQ_SHARED CQ is polled under its
 * mutex. A non-shared CQ and its non-shared endpoints belong to one thread
 * (the contract of fabric.h): connecting or destroying one of its
 * endpoints while another thread polls it is not supported.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "fabric/provider.h"
#include "util/common.h"
#include "util/log.h"

/* Private data of connection messages: "FARMVB01", little endian. */
#define VB_MAGIC 0x313042564d524146ull
/* Kinds: connect (from = initiator, to = the target it expects), accept
 * (from = target, to = initiator), reject (the same, with a reason). */
#define VB_PD_REQ            1u
#define VB_PD_ACC            2u
#define VB_PD_REJ            3u
#define VB_REJ_PROTOCOL      1u /* not a libfarm peer, or another version */
#define VB_REJ_WRONG_MACHINE 2u /* the initiator expected another machine */
#define VB_REJ_DEVICE        3u /* request arrived on another device */
#define VB_REJ_RESOURCES     4u /* no QP could be created */

/* Address and route resolution: the CM's own timeout, and our bound on the
 * wait for its answer (the CM reports an error at its timeout; the slack
 * only matters if it never does). */
#define VB_RESOLVE_MS      2000
#define VB_RESOLVE_WAIT_MS (VB_RESOLVE_MS + 1000)
/* Connection establishment: REQ, REP, RTU. A live peer answers in
 * milliseconds; the IB CM would retry for up to a minute. */
#define VB_CONNECT_WAIT_MS 10000
/* Requests per ibv_post_send (one doorbell), on the stack. */
#define VB_BATCH 32
/* Completions harvested per ibv_poll_cq. */
#define VB_POLL_BATCH       32
#define VB_LISTEN_BACKLOG   128
#define VB_PASSIVE_CQ_DEPTH 16
#define VB_ADDR_MAX         64

#define VB_CONTAINER_OF(ptr, type, member) \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ---- objects ------------------------------------------------------------- */

/* What an rdma_cm_id's context points at, so the listener thread knows
 * whose event it holds. */
enum vb_ctx_kind { VB_CTX_LISTEN = 1, VB_CTX_CONN = 2, VB_CTX_EP = 3 };

struct vb_ctx {
	enum vb_ctx_kind kind;
};

struct vb_pdata {
	uint64_t magic; /* VB_MAGIC */
	uint32_t kind;  /* VB_PD_* */
	uint32_t from;
	uint32_t to;
	uint32_t reason; /* VB_REJ_* */
};
_Static_assert(sizeof(struct vb_pdata) <= 56,
               "fits RDMA_PS_TCP private data on every transport");

struct vb_fabric;

/* The passive side of a peer's connection (listener thread only). */
struct vb_conn {
	struct vb_ctx ctx;
	struct vb_fabric *fab;
	struct rdma_cm_id *id;
	struct vb_conn *next;
	uint32_t peer;
};

struct vb_mem {
	struct farm_mem base;
	struct vb_mem *next;
	void *map_addr; /* what munmap takes */
	size_t map_len;
};

struct vb_mr {
	struct farm_mr base;
	struct vb_mr *next;
	struct ibv_mr *mr;
	uint32_t lkey;
};

/* One request in an endpoint's send ring. */
struct vb_slot {
	uint64_t wr_id; /* the caller's */
	uint32_t len;
	uint16_t opcode;
	uint8_t signaled; /* the caller asked for a completion */
	uint8_t cqe;      /* a completion named this slot: status is valid */
	int32_t status;   /* libfarm code of that completion */
	uint32_t unsig_before; /* ep->unsig before this slot (for rollback) */
};

/* A completion made by the provider, not the NIC. */
struct vb_lwc {
	uint64_t wr_id;
	int32_t status;
	uint16_t opcode;
};

enum { EP_OK = 0, EP_ERROR = 1, EP_CLOSED = 2 };

struct vb_cq;

struct vb_ep {
	struct farm_ep base;
	struct vb_ctx ctx;
	struct vb_fabric *fab;
	struct vb_cq *cq;
	struct vb_ep *next; /* fab->eps */
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	uint32_t qp_num;
	uint32_t incarnation; /* high half of every wr_id */
	uint32_t depth;       /* requests outstanding at most */
	uint32_t mask;        /* ring size - 1 (power of two >= depth) */
	/* Send ring: [head, done) completed, not yet reported; [done, tail)
	 * at the NIC. Sequence numbers wrap at 2^32. */
	uint32_t head, done, tail;
	struct vb_slot *ring;
	/* Software completions: [lhead, ltail), same size as the ring. */
	uint32_t lhead, ltail;
	struct vb_lwc *lring;
	uint32_t unsig;        /* unsignaled requests since the last signaled */
	uint32_t signal_every; /* force a signal after this many */
	uint32_t max_inline;   /* what the device granted */
	uint8_t *bounce;       /* FARM_INLINE_MAX per slot, on first need */
	struct ibv_mr *bounce_mr;
	bool hw_error; /* a NIC completion failed: later ones are flushes */
	bool in_backlog;
	bool shared;
	bool reported;        /* the first failure was logged */
	atomic_int state;     /* EP_*: read by farm_ep_usable() anywhere */
	atomic_int peer_gone; /* set by the listener thread */
	pthread_mutex_t lock; /* FARM_EP_SHARED: post and retire */
};

struct vb_cq {
	struct farm_cq base;
	struct vb_fabric *fab;
	struct vb_cq *next; /* fab->cqs */
	struct ibv_cq *cq;
	bool shared;
	pthread_mutex_t lock; /* the endpoint table; polls when shared */
	struct vb_ep **eps;
	unsigned neps, cap;
	struct vb_ep **tab; /* by QP number, open addressing */
	unsigned tmask;
	unsigned committed; /* sum of the endpoints' depths */
	unsigned backlog;   /* endpoints with completed, unreported slots */
	/* Software completions waiting in endpoints' lrings. Incremented
	 * (release) by posters after they fill the entry, read (acquire) by
	 * the poller before it looks: a hint that saves the scan. */
	atomic_uint local_pending;
};

struct vb_fabric {
	struct farm_fabric base;
	struct vb_ctx lctx; /* the listening id's context */
	char dev_name[IBV_SYSFS_NAME_MAX];
	char addr[VB_ADDR_MAX];      /* farm_fabric_address() */
	struct sockaddr_storage src; /* listen address, port 0 */
	bool src_specific;           /* not a wildcard */
	struct ibv_context **devs;   /* rdma_get_devices(), wildcard only */
	struct ibv_context *ctx;
	struct ibv_device_attr dattr;
	struct ibv_pd *pd;
	struct ibv_cq *pcq; /* passive QPs' CQ: never receives anything */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id;
	uint8_t max_rd_atom;      /* responder resources we grant */
	uint8_t max_init_rd_atom; /* READ/CAS we keep outstanding */
	bool iwarp;
	/* listener thread */
	pthread_t thread;
	bool thread_running;
	int stop_fd;
	struct vb_conn *conns; /* listener thread, then close */
	atomic_int device_lost;
	atomic_uint next_incarnation;
	/* objects, for close */
	pthread_mutex_t lock;
	struct vb_mem *mems;
	struct vb_mr *mrs;
	struct vb_cq *cqs;
	struct vb_ep *eps;
};

static inline struct vb_fabric *to_fab(farm_fabric *f)
{
	return (struct vb_fabric *)f;
}

/* ---- small helpers ------------------------------------------------------- */

static inline void ep_lock(struct vb_ep *ep)
{
	if (ep->shared)
		pthread_mutex_lock(&ep->lock);
}

static inline void ep_unlock(struct vb_ep *ep)
{
	if (ep->shared)
		pthread_mutex_unlock(&ep->lock);
}

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

static uint8_t clamp_u8(int v)
{
	return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* errno after a call documented as "-1 (or NULL) and errno set"; never 0. */
static int neg_errno(int fallback)
{
	return errno > 0 ? -errno : -fallback;
}

/*
 * Parse "ip:port" or "[ipv6]:port" (numeric only: no name lookups that could
 * block). Returns 0 or -EINVAL.
 */
static int parse_addr(const char *s, struct sockaddr_storage *ss)
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

static bool addr_is_wildcard(const struct sockaddr_storage *ss)
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

static int format_addr(const struct sockaddr *sa, uint16_t port, char *buf,
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

static void pdata_encode(struct vb_pdata *pd, uint32_t kind, uint32_t from,
                         uint32_t to, uint32_t reason)
{
	pd->magic = htole64(VB_MAGIC);
	pd->kind = htole32(kind);
	pd->from = htole32(from);
	pd->to = htole32(to);
	pd->reason = htole32(reason);
}

/* Decode private data of @kind; false when it is not ours. */
static bool pdata_decode(const void *data, size_t len, uint32_t kind,
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
	return true;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return neg_errno(EIO);
	return 0;
}

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

/* ---- the listener thread ------------------------------------------------- */

static void conn_unlink(struct vb_conn *conn)
{
	struct vb_fabric *fab = conn->fab;
	for (struct vb_conn **pp = &fab->conns; *pp; pp = &(*pp)->next) {
		if (*pp == conn) {
			*pp = conn->next;
			break;
		}
	}
}

/* Unlinked already; its events all acked. */
static void conn_destroy(struct vb_conn *conn)
{
	if (conn->id->qp)
		rdma_destroy_qp(conn->id);
	/* All of its events have been acked: this does not block. */
	if (rdma_destroy_id(conn->id))
		farm_warn("verbs: rdma_destroy_id (machine %u): %s", conn->peer,
		          strerror(errno));
	free(conn);
}

/*
 * A peer asks to connect. On success the id has a passive QP and belongs to
 * a new vb_conn; on failure the request has been rejected and the caller
 * destroys the id once the event is acked. Listener thread only.
 */
static int accept_request(struct vb_fabric *fab, struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = ev->id;
	const struct rdma_conn_param *cp = &ev->param.conn;
	uint32_t me = fab->base.machine_id, reason;
	struct vb_pdata req = {0};
	struct vb_conn *conn = NULL;
	if (!pdata_decode(cp->private_data, cp->private_data_len, VB_PD_REQ,
	                  &req)) {
		farm_warn("verbs: rejecting a connection that is not from a "
		          "libfarm machine of this version");
		reason = VB_REJ_PROTOCOL;
		goto reject;
	}
	if (req.to != me) {
		farm_info("verbs: machine %u asked for machine %u, this is %u: "
		          "rejected",
		          req.from, req.to, me);
		reason = VB_REJ_WRONG_MACHINE;
		goto reject;
	}
	if (id->verbs != fab->ctx) {
		farm_warn("verbs: connection from machine %u arrived on device "
		          "%s, not %s: rejected",
		          req.from,
		          id->verbs ? ibv_get_device_name(id->verbs->device)
		                    : "?",
		          fab->dev_name);
		reason = VB_REJ_DEVICE;
		goto reject;
	}
	conn = calloc(1, sizeof(*conn));
	if (!conn) {
		reason = VB_REJ_RESOURCES;
		goto reject;
	}
	conn->ctx.kind = VB_CTX_CONN;
	conn->fab = fab;
	conn->id = id;
	conn->peer = req.from;
	/* Nothing is posted on a passive QP: it only answers the peer's
	 * READ/WRITE/CAS. One entry each for providers that refuse zero. */
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = fab->pcq;
	qa.recv_cq = fab->pcq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 0;
	qa.cap.max_send_wr = 1;
	qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, fab->pd, &qa)) {
		farm_err("verbs: cannot create a QP for machine %u: %s",
		         req.from, strerror(errno));
		reason = VB_REJ_RESOURCES;
		goto reject;
	}
	if (cp->responder_resources == 0)
		farm_warn("verbs: machine %u asked for no responder resources: "
		          "it will not be able to READ or CAS here",
		          req.from);
	struct vb_pdata acc;
	pdata_encode(&acc, VB_PD_ACC, me, req.from, 0);
	struct rdma_conn_param ap;
	memset(&ap, 0, sizeof(ap));
	ap.private_data = &acc;
	ap.private_data_len = sizeof(acc);
	/* Event values are the peer's: its initiator depth is what it asks
	 * us to answer; its responder resources cap what we may initiate. */
	ap.responder_resources =
	        FARM_MIN(cp->responder_resources, fab->max_rd_atom);
	ap.initiator_depth =
	        FARM_MIN(cp->initiator_depth, fab->max_init_rd_atom);
	ap.rnr_retry_count = 7;
	id->context = &conn->ctx;
	if (rdma_accept(id, &ap)) {
		farm_err("verbs: rdma_accept (machine %u): %s", req.from,
		         strerror(errno));
		rdma_destroy_qp(id);
		id->context = &fab->lctx;
		reason = VB_REJ_RESOURCES;
		goto reject;
	}
	conn->next = fab->conns;
	fab->conns = conn;
	farm_dbg("verbs: accepting machine %u", req.from);
	return 0;
reject:;
	struct vb_pdata rej;
	pdata_encode(&rej, VB_PD_REJ, me, req.from, reason);
	if (rdma_reject(id, &rej, sizeof(rej)))
		farm_dbg("verbs: rdma_reject: %s", strerror(errno));
	free(conn);
	return -1;
}

static void handle_event(struct vb_fabric *fab, struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = ev->id;
	enum rdma_cm_event_type type = ev->event;
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		int rc = accept_request(fab, ev);
		/* rdma_destroy_id() waits for the id's events to be acked. */
		if (rdma_ack_cm_event(ev))
			farm_warn("verbs: rdma_ack_cm_event: %s",
			          strerror(errno));
		if (rc && rdma_destroy_id(id))
			farm_warn("verbs: rdma_destroy_id: %s",
			          strerror(errno));
		return;
	}
	struct vb_ctx *ctx = id ? id->context : NULL;
	struct vb_conn *conn = NULL;
	struct vb_ep *ep = NULL;
	if (ctx && ctx->kind == VB_CTX_CONN)
		conn = VB_CONTAINER_OF(ctx, struct vb_conn, ctx);
	else if (ctx && ctx->kind == VB_CTX_EP)
		ep = VB_CONTAINER_OF(ctx, struct vb_ep, ctx);
	bool drop_conn = false;
	switch (type) {
	case RDMA_CM_EVENT_ESTABLISHED:
		if (conn)
			farm_info("verbs: machine %u connected to us",
			          conn->peer);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (conn) {
			farm_info("verbs: machine %u disconnected", conn->peer);
			/* Both sides call it (rdma_disconnect(3)); fails
			 * harmlessly when we are the side that started. */
			if (rdma_disconnect(id))
				farm_dbg("verbs: rdma_disconnect: %s",
				         strerror(errno));
			drop_conn = true;
		}
		if (ep) {
			/* Pairs with the loads in post and farm_ep_usable();
			 * the ep outlives this: ep_destroy's rdma_destroy_id
			 * waits for our ack below. */
			atomic_store_explicit(&ep->peer_gone, 1,
			                      memory_order_release);
			farm_info("verbs: machine %u closed its side",
			          ep->base.peer);
		}
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		if (conn) {
			farm_info("verbs: connection of machine %u failed: %s",
			          conn->peer, rdma_event_str(type));
			drop_conn = true;
		}
		if (ep)
			atomic_store_explicit(&ep->peer_gone, 1,
			                      memory_order_release);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		farm_err("verbs: device %s was removed", fab->dev_name);
		atomic_store(&fab->device_lost, 1);
		if (conn)
			drop_conn = true;
		if (ep)
			atomic_store_explicit(&ep->peer_gone, 1,
			                      memory_order_release);
		break;
	default: /* TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do */
		farm_dbg("verbs: cm event %s", rdma_event_str(type));
		break;
	}
	if (rdma_ack_cm_event(ev))
		farm_warn("verbs: rdma_ack_cm_event: %s", strerror(errno));
	if (drop_conn) {
		conn_unlink(conn);
		conn_destroy(conn);
	}
}

static void *listener_main(void *arg)
{
	struct vb_fabric *fab = arg;
	for (;;) {
		struct pollfd pfd[2] = {
		        {.fd = fab->ch->fd, .events = POLLIN},
		        {.fd = fab->stop_fd, .events = POLLIN},
		};
		int r = poll(pfd, 2, -1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			farm_err("verbs: listener poll: %s", strerror(errno));
			return NULL;
		}
		if (pfd[1].revents)
			return NULL;
		if (pfd[0].revents & (POLLERR | POLLNVAL | POLLHUP)) {
			farm_err("verbs: the rdma_cm event channel failed; no "
			         "more connections are accepted");
			return NULL;
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		/* The channel fd is non-blocking: drain until EAGAIN. */
		for (;;) {
			struct rdma_cm_event *ev;
			if (rdma_get_cm_event(fab->ch, &ev) == 0) {
				handle_event(fab, ev);
				continue;
			}
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) /* == EWOULDBLOCK on Linux */
				farm_warn("verbs: rdma_get_cm_event: %s",
				          strerror(errno));
			break;
		}
	}
}

/* ---- open / close -------------------------------------------------------- */

static void vb_ep_destroy(farm_ep *e);
static int vb_cq_destroy(farm_cq *c);
static void vb_mr_dereg(farm_mr *m);
static void vb_mem_free(farm_mem *m);

/*
 * Is there a device, and which one is meant? Runs first, and alone, on a
 * machine without RDMA: it takes nothing it does not give back.
 */
static int probe_device(const char *want, char *name, size_t len)
{
	int n = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		int e = errno;
		if (e == ENOSYS)
			farm_info(
			        "verbs: no RDMA device: the kernel has no RDMA "
			        "support (no ib_uverbs)");
		else
			farm_info("verbs: no RDMA device: ibv_get_device_list: "
			          "%s",
			          e ? strerror(e) : "failed");
		return FARM_ENODEVICE;
	}
	int rc = FARM_ENODEVICE;
	if (n <= 0 || !list[0]) {
		farm_info("verbs: no RDMA device found (is a driver loaded: "
		          "mlx5_ib, rdma_rxe, siw?)");
		goto out;
	}
	for (int i = 0; i < n && list[i]; i++) {
		const char *dn = ibv_get_device_name(list[i]);
		if (!dn || (want && strcmp(dn, want) != 0))
			continue;
		snprintf(name, len, "%s", dn);
		rc = 0;
		break;
	}
	if (rc) {
		char have[256] = "";
		size_t used = 0;
		for (int i = 0; i < n && list[i] && used < sizeof(have); i++) {
			int w = snprintf(have + used, sizeof(have) - used,
			                 "%s%s", i ? ", " : "",
			                 ibv_get_device_name(list[i]));
			if (w < 0)
				break;
			used += (size_t)w;
		}
		farm_err("verbs: no RDMA device named '%s' (have: %s)", want,
		         have);
	}
out:
	ibv_free_device_list(list);
	return rc;
}

/* The context librdmacm opened for device @name (wildcard listens). */
static int find_cm_context(struct vb_fabric *fab, const char *name)
{
	int n = 0;
	fab->devs = rdma_get_devices(&n);
	if (!fab->devs) {
		farm_err("verbs: rdma_get_devices: %s", strerror(errno));
		return FARM_ENODEVICE;
	}
	for (int i = 0; i < n && fab->devs[i]; i++) {
		if (strcmp(ibv_get_device_name(fab->devs[i]->device), name) ==
		    0) {
			fab->ctx = fab->devs[i];
			return 0;
		}
	}
	farm_err("verbs: librdmacm does not see device %s", name);
	return FARM_ENODEVICE;
}

static void close_conns(struct vb_fabric *fab)
{
	while (fab->conns) {
		struct vb_conn *conn = fab->conns;
		fab->conns = conn->next;
		/* Peers see us gone now rather than at their next timeout. */
		if (rdma_disconnect(conn->id))
			farm_dbg("verbs: rdma_disconnect: %s", strerror(errno));
		conn_destroy(conn);
	}
}

static void vb_close_fabric(farm_fabric *f)
{
	struct vb_fabric *fab = to_fab(f);
	if (fab->thread_running) {
		uint64_t one = 1;
		ssize_t w = write(fab->stop_fd, &one, sizeof(one));
		(void)w;
		pthread_join(fab->thread, NULL);
		fab->thread_running = false;
	}
	/* Whatever the caller left, in dependency order: QPs before CQs,
	 * registrations before memory and the PD. Each is taken off its
	 * list here; the destroy functions then find nothing to unlink. */
	if (fab->eps)
		farm_warn(
		        "verbs: closing with endpoints left; destroying them");
	while (fab->eps) {
		struct vb_ep *ep = fab->eps;
		fab->eps = ep->next;
		vb_ep_destroy(&ep->base);
	}
	if (fab->cqs)
		farm_warn("verbs: closing with completion queues left");
	while (fab->cqs) {
		struct vb_cq *cq = fab->cqs;
		fab->cqs = cq->next;
		if (vb_cq_destroy(&cq->base)) {
			/* The device CQ is leaked (the kernel reclaims it
			 * with the process); ours goes. */
			pthread_mutex_destroy(&cq->lock);
			free(cq->eps);
			free(cq->tab);
			free(cq);
		}
	}
	if (fab->mrs)
		farm_warn("verbs: closing with registrations left");
	while (fab->mrs) {
		struct vb_mr *mr = fab->mrs;
		fab->mrs = mr->next;
		vb_mr_dereg(&mr->base);
	}
	if (fab->mems)
		farm_warn("verbs: closing with memory still allocated; freeing "
		          "it");
	while (fab->mems) {
		struct vb_mem *m = fab->mems;
		fab->mems = m->next;
		vb_mem_free(&m->base);
	}
	close_conns(fab);
	if (rdma_destroy_id(fab->listen_id))
		farm_warn("verbs: rdma_destroy_id (listener): %s",
		          strerror(errno));
	int rc = ibv_destroy_cq(fab->pcq);
	if (rc)
		farm_warn("verbs: ibv_destroy_cq: %s", strerror(rc));
	rc = ibv_dealloc_pd(fab->pd);
	if (rc)
		farm_warn("verbs: ibv_dealloc_pd: %s", strerror(rc));
	rdma_destroy_event_channel(fab->ch);
	if (fab->devs)
		rdma_free_devices(fab->devs);
	close(fab->stop_fd);
	pthread_mutex_destroy(&fab->lock);
	free(fab);
}

static int vb_open_fabric(const farm_fabric_attr *attr, farm_fabric **out)
{
	char name[IBV_SYSFS_NAME_MAX];
	const char *want = attr->device && *attr->device ? attr->device : NULL;
	/* The device first: "no device here" is what a machine without RDMA
	 * answers whatever else the attributes say (tests skip on it). */
	int rc = probe_device(want, name, sizeof(name));
	if (rc)
		return rc;
	if (!attr->listen_addr || !*attr->listen_addr) {
		farm_err("verbs: listen_addr (\"ip:port\", port 0 for any) is "
		         "required");
		return -EINVAL;
	}
	struct sockaddr_storage la;
	if (parse_addr(attr->listen_addr, &la)) {
		farm_err("verbs: bad listen address '%s' (want ip:port or "
		         "[ipv6]:port)",
		         attr->listen_addr);
		return -EINVAL;
	}
	struct vb_fabric *fab = calloc(1, sizeof(*fab));
	if (!fab)
		return -ENOMEM;
	fab->base.ops = &farm_verbs_ops;
	fab->base.machine_id = attr->machine_id;
	fab->lctx.kind = VB_CTX_LISTEN;
	fab->stop_fd = -1;
	atomic_init(&fab->next_incarnation, 1);
	pthread_mutex_init(&fab->lock, NULL);

	fab->ch = rdma_create_event_channel();
	if (!fab->ch) {
		rc = errno == ENODEV || errno == ENOENT ? FARM_ENODEVICE
		                                        : neg_errno(ENOMEM);
		farm_err("verbs: cannot open the rdma_cm event channel: %s%s",
		         strerror(errno),
		         rc == FARM_ENODEVICE ? " (is rdma_ucm loaded?)" : "");
		goto fail_fab;
	}
	if (rdma_create_id(fab->ch, &fab->listen_id, &fab->lctx, RDMA_PS_TCP)) {
		rc = neg_errno(ENOMEM);
		farm_err("verbs: rdma_create_id: %s", strerror(-rc));
		goto fail_ch;
	}
	if (rdma_bind_addr(fab->listen_id, (struct sockaddr *)&la)) {
		rc = neg_errno(EADDRNOTAVAIL);
		if (rc == -ENODEV) {
			farm_err(
			        "verbs: %s is not an address of an RDMA device",
			        attr->listen_addr);
			rc = FARM_ENODEVICE;
		} else {
			farm_err("verbs: cannot bind %s: %s", attr->listen_addr,
			         strerror(-rc));
		}
		goto fail_id;
	}
	fab->src_specific = !addr_is_wildcard(&la);
	if (fab->src_specific) {
		fab->src = la;
		if (la.ss_family == AF_INET)
			((struct sockaddr_in *)&fab->src)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&fab->src)->sin6_port = 0;
	}
	if (fab->listen_id->verbs) {
		/* Bound to an address: the device is the address's. */
		const char *dn =
		        ibv_get_device_name(fab->listen_id->verbs->device);
		if (want && (!dn || strcmp(dn, want) != 0)) {
			farm_err("verbs: %s is on device %s, not %s",
			         attr->listen_addr, dn ? dn : "?", want);
			rc = -EINVAL;
			goto fail_id;
		}
		fab->ctx = fab->listen_id->verbs;
		snprintf(fab->dev_name, sizeof(fab->dev_name), "%s",
		         dn ? dn : name);
	} else {
		rc = find_cm_context(fab, name);
		if (rc)
			goto fail_devs;
		snprintf(fab->dev_name, sizeof(fab->dev_name), "%s", name);
	}
	rc = ibv_query_device(fab->ctx, &fab->dattr);
	if (rc) {
		farm_err("verbs: ibv_query_device(%s): %s", fab->dev_name,
		         strerror(rc));
		rc = -rc;
		goto fail_devs;
	}
	fab->max_rd_atom = clamp_u8(fab->dattr.max_qp_rd_atom);
	fab->max_init_rd_atom = clamp_u8(fab->dattr.max_qp_init_rd_atom);
	fab->iwarp = fab->ctx->device->transport_type == IBV_TRANSPORT_IWARP;
	errno = 0; /* ibv_alloc_pd(3) documents NULL only */
	fab->pd = ibv_alloc_pd(fab->ctx);
	if (!fab->pd) {
		rc = neg_errno(ENOMEM);
		farm_err("verbs: ibv_alloc_pd: %s", strerror(-rc));
		goto fail_devs;
	}
	errno = 0;
	fab->pcq = ibv_create_cq(fab->ctx, VB_PASSIVE_CQ_DEPTH, NULL, NULL, 0);
	if (!fab->pcq) {
		rc = neg_errno(ENOMEM);
		farm_err("verbs: ibv_create_cq: %s", strerror(-rc));
		goto fail_pd;
	}
	if (rdma_listen(fab->listen_id, VB_LISTEN_BACKLOG)) {
		rc = neg_errno(EIO);
		farm_err("verbs: rdma_listen on %s: %s", attr->listen_addr,
		         strerror(-rc));
		goto fail_pcq;
	}
	rc = format_addr(rdma_get_local_addr(fab->listen_id),
	                 ntohs(rdma_get_src_port(fab->listen_id)), fab->addr,
	                 sizeof(fab->addr));
	if (rc)
		goto fail_pcq;
	if (!fab->src_specific)
		farm_warn(
		        "verbs: listening on the wildcard %s: peers need a "
		        "concrete address, which farm_fabric_address() cannot "
		        "give; listen on the device's IP",
		        fab->addr);
	fab->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fab->stop_fd < 0) {
		rc = neg_errno(EMFILE);
		goto fail_pcq;
	}
	rc = set_nonblock(fab->ch->fd);
	if (rc)
		goto fail_efd;
	rc = pthread_create(&fab->thread, NULL, listener_main, fab);
	if (rc) {
		rc = -rc;
		goto fail_efd;
	}
	fab->thread_running = true;
	farm_info("verbs: machine %u on %s, listening on %s", attr->machine_id,
	          fab->dev_name, fab->addr);
	*out = &fab->base;
	return 0;

	/* Unwinding: a failure to release is not actionable here, and the
	 * first error is the one returned. */
fail_efd:
	close(fab->stop_fd);
fail_pcq:
	(void)ibv_destroy_cq(fab->pcq);
fail_pd:
	(void)ibv_dealloc_pd(fab->pd);
fail_devs:
	if (fab->devs)
		rdma_free_devices(fab->devs);
fail_id:
	(void)rdma_destroy_id(fab->listen_id);
fail_ch:
	rdma_destroy_event_channel(fab->ch);
fail_fab:
	pthread_mutex_destroy(&fab->lock);
	free(fab);
	return rc;
}

static int vb_address(const farm_fabric *f, char *buf, size_t len)
{
	const struct vb_fabric *fab = (const struct vb_fabric *)f;
	size_t n = strlen(fab->addr);
	if (n + 1 > len)
		return -ENOSPC;
	memcpy(buf, fab->addr, n + 1);
	return (int)n;
}

/* ---- memory -------------------------------------------------------------- */

static long read_long(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long v = -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static bool thp_available(void)
{
	char buf[128];
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* The selected mode is in brackets: "always [madvise] never". */
	return strstr(buf, "[always]") || strstr(buf, "[madvise]");
}

static size_t hugepage_size(void)
{
	size_t sz = 2u << 20;
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return sz;
	char line[128];
	while (fgets(line, sizeof(line), f)) {
		unsigned long kb;
		if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1) {
			if (kb && farm_is_pow2(kb))
				sz = (size_t)kb << 10;
			break;
		}
	}
	fclose(f);
	return sz;
}

/*
 * Map @len bytes (a multiple of the page size in use) at an address aligned
 * to @align, with @extra mmap flags (MAP_HUGETLB). Returns the address or
 * MAP_FAILED with errno set.
 */
static void *map_aligned(size_t len, size_t align, int extra)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int fl = MAP_PRIVATE | MAP_ANONYMOUS | extra;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	if (align <= page)
		return mmap(NULL, len, prot, fl, -1, 0);
	if (len + align < len) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	/* Reserve len + align of address space, place the mapping at the
	 * aligned address inside it, give back the rest. */
	size_t span = len + align;
	uint8_t *res = mmap(NULL, span, PROT_NONE,
	                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (res == MAP_FAILED)
		return MAP_FAILED;
	uint8_t *al = (uint8_t *)(((uintptr_t)res + align - 1) &
	                          ~(uintptr_t)(align - 1));
	void *p = mmap(al, len, prot, fl | MAP_FIXED, -1, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		munmap(res, span);
		errno = e;
		return MAP_FAILED;
	}
	if (al > res)
		munmap(res, (size_t)(al - res));
	if (res + span > al + len)
		munmap(al + len, (size_t)(res + span - (al + len)));
	return p;
}

/* Fault every page in now, so a shortage is an error here, not a fault
 * later (ibv_reg_mr would pin them anyway). */
static int populate(void *addr, size_t len, size_t page)
{
#ifdef MADV_POPULATE_WRITE
	if (madvise(addr, len, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno != EINVAL) /* ENOMEM, EFAULT, EHWPOISON: no memory */
		return -ENOMEM;
#endif
	/* Older kernels: touch each page (already zero: the store keeps it). */
	for (size_t off = 0; off < len; off += page)
		((volatile uint8_t *)addr)[off] = 0;
	return 0;
}

static int vb_mem_alloc(farm_fabric *f, size_t size, unsigned flags,
                        farm_mem **out)
{
	struct vb_fabric *fab = to_fab(f);
	static atomic_int logged;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t hp = hugepage_size();
	bool align_size = flags & FARM_MEM_ALIGN_SIZE;
	struct vb_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	void *addr = MAP_FAILED;
	size_t len = 0;
	bool huge = false;
	const char *why = NULL;

	/* hugetlb pages when the pool has some: reserved at mmap, so a
	 * shortage shows here (and we fall back) rather than as SIGBUS. */
	if (read_long("/proc/sys/vm/nr_hugepages") <= 0) {
		why = "vm.nr_hugepages is 0";
	} else if (size > SIZE_MAX - hp) {
		why = "size too large";
	} else {
		len = (size + hp - 1) & ~(hp - 1);
		addr = map_aligned(len, align_size ? FARM_MAX(size, hp) : hp,
		                   MAP_HUGETLB);
		if (addr != MAP_FAILED)
			huge = true;
		else
			why = "the hugetlb pool is too small";
	}
	if (addr == MAP_FAILED) {
		bool thp = thp_available();
		if ((flags & FARM_MEM_REQUIRE_HUGE) && !thp) {
			farm_err("verbs: huge pages required but none can be "
			         "had "
			         "(%s, and transparent huge pages are off)",
			         why);
			free(m);
			return -ENOTSUP;
		}
		if (size > SIZE_MAX - hp) {
			free(m);
			return -ENOMEM;
		}
		/* THP backs whole aligned 2 MiB ranges only: a region that
		 * must be huge is rounded up to one. */
		size_t gran =
		        thp && (flags & FARM_MEM_REQUIRE_HUGE) ? hp : page;
		len = (size + gran - 1) & ~(gran - 1);
		/* 2 MiB-aligned so that THP can back the whole range. */
		size_t al = thp && len >= hp ? hp : page;
		if (align_size)
			al = FARM_MAX(al, size);
		addr = map_aligned(len, al, 0);
		if (addr == MAP_FAILED) {
			int rc = neg_errno(ENOMEM);
			free(m);
			return rc;
		}
		/* Best effort, as THP is: the kernel backs the range with
		 * huge pages when it can find them. */
		if (thp && len >= hp && madvise(addr, len, MADV_HUGEPAGE) == 0)
			huge = true;
		if (!atomic_exchange(&logged, 1))
			farm_info("verbs: no hugetlb pages (%s): using %s", why,
			          huge ? "transparent huge pages"
			               : "4 KiB pages (transparent huge pages "
			                 "are off)");
		if ((flags & FARM_MEM_REQUIRE_HUGE) && !huge) {
			munmap(addr, len);
			free(m);
			return -ENOTSUP;
		}
	}
	int rc = populate(addr, len, page);
	if (rc) {
		farm_err("verbs: cannot back %zu bytes of memory", size);
		munmap(addr, len);
		free(m);
		return rc;
	}
	m->base.fab = f;
	m->base.addr = addr;
	m->base.size = size;
	m->base.huge = huge;
	m->base.pmem = false;
	m->map_addr = addr;
	m->map_len = len;
	pthread_mutex_lock(&fab->lock);
	m->next = fab->mems;
	fab->mems = m;
	pthread_mutex_unlock(&fab->lock);
	*out = &m->base;
	return 0;
}

static void vb_mem_free(farm_mem *mm)
{
	struct vb_mem *m = (struct vb_mem *)mm;
	struct vb_fabric *fab = to_fab(mm->fab);
	pthread_mutex_lock(&fab->lock);
	for (struct vb_mem **pp = &fab->mems; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	/* A registration still covering it keeps the pages pinned until
	 * it is deregistered; the mapping goes now. */
	if (munmap(m->map_addr, m->map_len))
		farm_warn("verbs: munmap: %s", strerror(errno));
	free(m);
}

/* Memory is DRAM: durability is the model's battery-backed DRAM, so a
 * store fence (our stores ordered before whatever follows) is all there is
 * to do. A NIC's writes into this memory are not covered (FaRM flushes
 * them with a READ, above this layer). */
static int vb_mem_persist(const farm_mem *mem, const void *addr, size_t len)
{
	(void)mem;
	(void)addr;
	(void)len;
	farm_store_fence();
	return 0;
}

/* ---- registration -------------------------------------------------------- */

static int vb_mr_reg(farm_fabric *f, void *addr, size_t len, unsigned access,
                     farm_mr **out)
{
	struct vb_fabric *fab = to_fab(f);
	int acc = 0;
	if (access & FARM_ACCESS_LOCAL) {
		acc |= IBV_ACCESS_LOCAL_WRITE; /* READ and CAS results land here
		                                */
		/* iWARP places READ responses as tagged writes: the sink
		 * needs remote write access. */
		if (fab->iwarp)
			acc |= IBV_ACCESS_REMOTE_WRITE;
	}
	if (access & FARM_ACCESS_REMOTE_READ)
		acc |= IBV_ACCESS_REMOTE_READ;
	/* ibv_reg_mr(3): remote write or atomic needs local write too. */
	if (access & FARM_ACCESS_REMOTE_WRITE)
		acc |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	if (access & FARM_ACCESS_REMOTE_ATOMIC) {
		if (fab->dattr.atomic_cap == IBV_ATOMIC_NONE) {
			farm_err("verbs: device %s has no atomics",
			         fab->dev_name);
			return -ENOTSUP;
		}
		acc |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
	}
	struct vb_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	errno = 0;
	mr->mr = ibv_reg_mr(fab->pd, addr, len, acc);
	if (!mr->mr) {
		int rc = neg_errno(ENOMEM);
		farm_err("verbs: ibv_reg_mr(%zu bytes): %s%s", len,
		         strerror(-rc),
		         rc == -ENOMEM || rc == -EPERM
		                 ? " (pinned memory is limited by ulimit -l)"
		                 : "");
		free(mr);
		return rc;
	}
	mr->lkey = mr->mr->lkey;
	mr->base.fab = f;
	mr->base.addr = addr;
	mr->base.len = len;
	mr->base.access = access;
	mr->base.desc = (farm_mr_desc){.key = mr->mr->rkey,
	                               .addr = (uint64_t)(uintptr_t)addr,
	                               .len = len,
	                               .machine = f->machine_id,
	                               .access = access};
	pthread_mutex_lock(&fab->lock);
	mr->next = fab->mrs;
	fab->mrs = mr;
	pthread_mutex_unlock(&fab->lock);
	*out = &mr->base;
	return 0;
}

static void vb_mr_dereg(farm_mr *m)
{
	struct vb_mr *mr = (struct vb_mr *)m;
	struct vb_fabric *fab = to_fab(m->fab);
	pthread_mutex_lock(&fab->lock);
	for (struct vb_mr **pp = &fab->mrs; *pp; pp = &(*pp)->next) {
		if (*pp == mr) {
			*pp = mr->next;
			break;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	int rc = ibv_dereg_mr(mr->mr);
	if (rc)
		farm_err("verbs: ibv_dereg_mr: %s (registration leaked)",
		         strerror(rc));
	free(mr);
}

/* ---- completion queues --------------------------------------------------- */

static int vb_cq_create(farm_fabric *f, unsigned depth, unsigned flags,
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

static int vb_cq_destroy(farm_cq *c)
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
static int cq_attach(struct vb_cq *cq, struct vb_ep *ep)
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
static void cq_detach(struct vb_cq *cq, struct vb_ep *ep)
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
static int cq_reserve(struct vb_cq *cq, unsigned depth)
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
	const farm_mr *lmr = wr->lmr;
	if (!lmr || lmr->fab != ep->base.fab ||
	    !(lmr->access & FARM_ACCESS_LOCAL))
		return false;
	uintptr_t a = (uintptr_t)wr->local, b = (uintptr_t)lmr->addr;
	return a >= b && wr->len <= lmr->len && a - b <= lmr->len - wr->len;
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
	/* R1: publishes the entry; pairs with A1 in vb_cq_poll(). */
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

static int vb_ep_post(farm_ep *e, farm_wr *list, farm_wr **bad)
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

static int vb_cq_poll(farm_cq *c, int n, farm_wc *wc)
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

static int vb_ep_connect(farm_fabric *f, farm_cq *c, uint32_t peer_id,
                         const char *peer_addr, const farm_ep_attr *attr,
                         farm_ep **out)
{
	struct vb_fabric *fab = to_fab(f);
	struct vb_cq *cq = (struct vb_cq *)c;
	struct sockaddr_storage dst;
	if (parse_addr(peer_addr, &dst)) {
		farm_err("verbs: bad peer address '%s' (want ip:port)",
		         peer_addr);
		return -EINVAL;
	}
	uint32_t depth = attr->sq_depth;
	if (depth > (uint32_t)fab->dattr.max_qp_wr) {
		farm_warn("verbs: sq_depth %u above the device's %d; using %d",
		          depth, fab->dattr.max_qp_wr, fab->dattr.max_qp_wr);
		depth = (uint32_t)fab->dattr.max_qp_wr;
	}
	struct vb_ep *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	uint32_t size = pow2_at_least(depth);
	ep->ring = calloc(size, sizeof(*ep->ring));
	ep->lring = calloc(size, sizeof(*ep->lring));
	pthread_mutex_init(&ep->lock, NULL);
	if (!ep->ring || !ep->lring) {
		ep_free(ep);
		return -ENOMEM;
	}
	ep->base.fab = f;
	ep->base.cq = c;
	ep->base.peer = peer_id;
	ep->ctx.kind = VB_CTX_EP;
	ep->fab = fab;
	ep->cq = cq;
	ep->depth = depth;
	ep->mask = size - 1;
	ep->signal_every = FARM_MAX(depth / 2, 1u);
	ep->shared = attr->flags & FARM_EP_SHARED;
	ep->incarnation = atomic_fetch_add(&fab->next_incarnation, 1);
	atomic_init(&ep->state, EP_OK);
	atomic_init(&ep->peer_gone, 0);

	int rc;
	struct vb_evt ev;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		rc = neg_errno(ENOMEM);
		goto fail_ep;
	}
	rc = set_nonblock(ch->fd);
	if (rc)
		goto fail_ch;
	if (rdma_create_id(ch, &ep->id, &ep->ctx, RDMA_PS_TCP)) {
		rc = neg_errno(ENOMEM);
		goto fail_ch;
	}
	/* From our listen address when it names one: same device. */
	struct sockaddr *src =
	        fab->src_specific && fab->src.ss_family == dst.ss_family
	                ? (struct sockaddr *)&fab->src
	                : NULL;
	if (rdma_resolve_addr(ep->id, src, (struct sockaddr *)&dst,
	                      VB_RESOLVE_MS)) {
		rc = neg_errno(EINVAL);
		farm_info("verbs: rdma_resolve_addr(%s): %s", peer_addr,
		          strerror(-rc));
		if (rc != -EINVAL && rc != -ENOMEM)
			rc = -ECONNREFUSED;
		goto fail_id;
	}
	rc = expect_event(ch, VB_RESOLVE_WAIT_MS, RDMA_CM_EVENT_ADDR_RESOLVED,
	                  peer_addr, &ev);
	if (rc)
		goto fail_id;
	if (ep->id->verbs != fab->ctx) {
		farm_err("verbs: %s is reached through device %s, but this "
		         "fabric uses %s",
		         peer_addr,
		         ep->id->verbs
		                 ? ibv_get_device_name(ep->id->verbs->device)
		                 : "?",
		         fab->dev_name);
		rc = -ENETUNREACH;
		goto fail_id;
	}
	if (rdma_resolve_route(ep->id, VB_RESOLVE_MS)) {
		rc = neg_errno(EIO);
		farm_info("verbs: rdma_resolve_route(%s): %s", peer_addr,
		          strerror(-rc));
		rc = -ECONNREFUSED;
		goto fail_id;
	}
	rc = expect_event(ch, VB_RESOLVE_WAIT_MS, RDMA_CM_EVENT_ROUTE_RESOLVED,
	                  peer_addr, &ev);
	if (rc)
		goto fail_id;

	pthread_mutex_lock(&cq->lock);
	rc = cq_reserve(cq, depth);
	pthread_mutex_unlock(&cq->lock);
	if (rc)
		goto fail_id;
	rc = create_qp(ep, cq);
	if (rc)
		goto fail_reserve;
	pthread_mutex_lock(&cq->lock);
	rc = cq_attach(cq, ep);
	pthread_mutex_unlock(&cq->lock);
	if (rc)
		goto fail_qp;

	struct vb_pdata req;
	pdata_encode(&req, VB_PD_REQ, f->machine_id, peer_id, 0);
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
		rc = neg_errno(EIO);
		farm_info("verbs: rdma_connect(%s): %s", peer_addr,
		          strerror(-rc));
		rc = -ECONNREFUSED;
		goto fail_attach;
	}
	rc = wait_event(ch, VB_CONNECT_WAIT_MS, &ev);
	if (rc) {
		farm_info("verbs: %s: no answer within %d ms", peer_addr,
		          VB_CONNECT_WAIT_MS);
		goto fail_attach;
	}
	struct vb_pdata pd;
	if (ev.type == RDMA_CM_EVENT_REJECTED &&
	    pdata_decode(ev.pdata, ev.pdata_len, VB_PD_REJ, &pd) &&
	    pd.reason == VB_REJ_WRONG_MACHINE) {
		farm_err("verbs: the machine at %s is %u, not %u", peer_addr,
		         pd.from, peer_id);
		rc = -EINVAL;
		goto fail_attach;
	}
	if (ev.type != RDMA_CM_EVENT_ESTABLISHED) {
		farm_info(
		        "verbs: connecting to machine %u at %s: %s (status %d)",
		        peer_id, peer_addr, rdma_event_str(ev.type), ev.status);
		rc = -ECONNREFUSED;
		goto fail_attach;
	}
	if (!pdata_decode(ev.pdata, ev.pdata_len, VB_PD_ACC, &pd) ||
	    pd.from != peer_id || pd.to != f->machine_id) {
		farm_err(
		        "verbs: the machine at %s did not answer as machine %u",
		        peer_addr, peer_id);
		rc = -EINVAL;
		goto fail_connected;
	}
	/* From here the listener thread sees this id's events (the peer
	 * disconnecting). Blocks only while events are unacked: none are. */
	if (rdma_migrate_id(ep->id, fab->ch)) {
		rc = neg_errno(EIO);
		farm_err("verbs: rdma_migrate_id: %s", strerror(-rc));
		goto fail_connected;
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

fail_connected:
	if (rdma_disconnect(ep->id))
		farm_dbg("verbs: rdma_disconnect: %s", strerror(errno));
fail_attach:
	pthread_mutex_lock(&cq->lock);
	cq_detach(cq, ep);
	pthread_mutex_unlock(&cq->lock);
fail_qp:
	rdma_destroy_qp(ep->id);
fail_reserve:
	pthread_mutex_lock(&cq->lock);
	cq->committed -= depth;
	pthread_mutex_unlock(&cq->lock);
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

static void vb_ep_disconnect(farm_ep *e)
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

static void vb_ep_destroy(farm_ep *e)
{
	struct vb_ep *ep = (struct vb_ep *)e;
	struct vb_cq *cq = ep->cq;
	struct vb_fabric *fab = ep->fab;
	pthread_mutex_lock(&cq->lock);
	cq_detach(cq, ep);
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

static bool vb_ep_usable(const farm_ep *e)
{
	const struct vb_ep *ep = (const struct vb_ep *)e;
	return atomic_load_explicit(&ep->state, memory_order_relaxed) ==
	               EP_OK &&
	       !atomic_load_explicit(&ep->peer_gone, memory_order_acquire) &&
	       !atomic_load_explicit(&ep->fab->device_lost,
	                             memory_order_relaxed);
}

const struct farm_fabric_ops farm_verbs_ops = {
        .name = "verbs",
        .open = vb_open_fabric,
        .close = vb_close_fabric,
        .address = vb_address,
        .mem_alloc = vb_mem_alloc,
        .mem_free = vb_mem_free,
        .mem_persist = vb_mem_persist,
        .mr_reg = vb_mr_reg,
        .mr_dereg = vb_mr_dereg,
        .cq_create = vb_cq_create,
        .cq_destroy = vb_cq_destroy,
        .cq_poll = vb_cq_poll,
        .ep_connect = vb_ep_connect,
        .ep_disconnect = vb_ep_disconnect,
        .ep_destroy = vb_ep_destroy,
        .ep_usable = vb_ep_usable,
        .ep_post = vb_ep_post,
        /* Fault injection needs a NIC that can be told to fail or stall:
         * unsupported (the generic layer answers -ENOTSUP). */
        .ep_fault = NULL,
        .fault_peer = NULL,
};
