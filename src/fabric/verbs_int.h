/*
 * Internal to the verbs provider: its objects, the helpers its files share,
 * and the functions one file calls in another. verbs.c: the head comment
 * (what a fabric owns, requests, ordering, what may race), device and
 * protection domain (open / close), memory and registration, the ops
 * table; verbs_listen.c: the listener thread (passive side of connections,
 * the peers' disconnect and device removal: the death notice);
 * verbs_ep.c: addresses, connection private data, endpoint (QP) setup and
 * teardown; verbs_data.c: completion queues and the data path (post,
 * poll). See README-verbs.md.
 */
#ifndef FARM_FABRIC_VERBS_INT_H
#define FARM_FABRIC_VERBS_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "fabric/provider.h"
#include "util/common.h"

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
#define VB_REJ_WIRE          5u /* another wire version (another build) */

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
	uint32_t wire;   /* the sender's wire version */
	uint32_t pad;
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

static inline uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

static inline uint8_t clamp_u8(int v)
{
	return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* errno after a call documented as "-1 (or NULL) and errno set"; never 0. */
static inline int neg_errno(int fallback)
{
	return errno > 0 ? -errno : -fallback;
}

/* ---- across files -------------------------------------------------------- */

/* verbs_ep.c: addresses and connection private data */
int farm_vb_parse_addr(const char *s, struct sockaddr_storage *ss);
bool farm_vb_addr_is_wildcard(const struct sockaddr_storage *ss);
int farm_vb_format_addr(const struct sockaddr *sa, uint16_t port, char *buf,
                        size_t len);
void farm_vb_pdata_encode(struct vb_pdata *pd, uint32_t kind, uint32_t from,
                          uint32_t to, uint32_t reason, uint32_t wire);
bool farm_vb_pdata_decode(const void *data, size_t len, uint32_t kind,
                          struct vb_pdata *out);
int farm_vb_set_nonblock(int fd);

/* verbs_ep.c: endpoints */
int farm_vb_ep_connect(farm_fabric *f, farm_cq *c, uint32_t peer_id,
                       const char *peer_addr, const farm_ep_attr *attr,
                       farm_ep **out);
void farm_vb_ep_disconnect(farm_ep *e);
void farm_vb_ep_destroy(farm_ep *e);
bool farm_vb_ep_usable(const farm_ep *e);

/* verbs_listen.c: the listener thread */
void *farm_vb_listener_main(void *arg);
void farm_vb_close_conns(struct vb_fabric *fab);

/* verbs_data.c: completion queues and the data path */
int farm_vb_cq_create(farm_fabric *f, unsigned depth, unsigned flags,
                      farm_cq **out);
int farm_vb_cq_destroy(farm_cq *c);
int farm_vb_cq_reserve(struct vb_cq *cq, unsigned depth);
int farm_vb_cq_attach(struct vb_cq *cq, struct vb_ep *ep);
void farm_vb_cq_detach(struct vb_cq *cq, struct vb_ep *ep);
int farm_vb_cq_poll(farm_cq *c, int n, farm_wc *wc);
int farm_vb_ep_post(farm_ep *e, farm_wr *list, farm_wr **bad);

#endif
