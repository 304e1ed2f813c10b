/*
 * Messaging: rings written with one-sided WRITEs, event loops, RPC.
 * See include/farm/msg.h for the contract, src/msg/README.md for the
 * design and wire.h for the format.
 */
#define _LGPL_SOURCE 1 /* liburcu's wait-free queue, inlined */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/wfcqueue.h>

#include <farm/msg.h>

#include "msg/msg_testing.h"
#include "msg/wire.h"
#include "util/common.h"
#include "util/log.h"

#define MSG_MAGIC          0x3167736d6d726166ull /* "farmmsg1" */
#define MSG_HDR_BYTES      4096u
#define DEFAULT_RING       (256u << 10)
#define MIN_RING           (4u << 10)
#define MAX_RING           (64u << 20)
#define EP_DEPTH           1024u
#define CQ_BATCH           32
#define MAX_POLLERS        8
#define FRAMES_PER_POLL    64u
#define WR_BATCH           64u
#define SCAN_EVERY         256u /* passes between timer scans when busy */
#define PARK_MAX_NS        200000000ull /* longest park with nothing pending */
#define PARK_CALLS_NS      10000000ull  /* longest park while calls wait */
#define DEFAULT_TIMEOUT_NS 1000000000ull

/* ---- layout of a machine's message region -------------------------------
 *   [0, 4096)              header (struct region_hdr)
 *   park words             one 64-B line per local thread
 *   head-back words        one line per (local sender thread t, remote
 *                          machine m, remote thread r): where machine m's
 *                          thread r writes how far it has consumed the
 *                          ring t -> (m, r)
 *   rings                  one per (local receiver thread r, sender machine
 *                          m, sender thread t), ring_size each, 4 KiB aligned
 * Every machine computes every machine's layout from the shared attributes.
 */
struct region_hdr {
	uint64_t magic;
	uint32_t nthreads, max_machines, ring_size, machine;
};

struct layout {
	unsigned T, M;
	uint32_t R;
	uint64_t park_off, head_off, ring_off, total;
};

static void layout_init(struct layout *l, unsigned T, unsigned M, uint32_t R)
{
	l->T = T;
	l->M = M;
	l->R = R;
	l->park_off = MSG_HDR_BYTES;
	l->head_off = l->park_off + (uint64_t)T * FARM_CL;
	uint64_t end = l->head_off + (uint64_t)T * M * T * FARM_CL;
	l->ring_off = (end + 4095) & ~4095ull;
	l->total = l->ring_off + (uint64_t)T * M * T * R;
}

static inline uint64_t park_at(const struct layout *l, unsigned r)
{
	return l->park_off + (uint64_t)r * FARM_CL;
}

static inline uint64_t head_at(const struct layout *l, unsigned t, uint32_t m,
                               unsigned r)
{
	return l->head_off + (((uint64_t)t * l->M + m) * l->T + r) * FARM_CL;
}

static inline uint64_t ring_at(const struct layout *l, unsigned r, uint32_t m,
                               unsigned t)
{
	return l->ring_off + (((uint64_t)r * l->M + m) * l->T + t) * l->R;
}

/* ---- counters ------------------------------------------------------------ */

/* One writer (the loop); readers on other threads load relaxed. */
struct stats {
	_Atomic uint64_t v[12];
};
enum {
	S_SENT,
	S_RECEIVED,
	S_FRAMES_SENT,
	S_FRAMES_RECV,
	S_QUEUED,
	S_NOBUFS,
	S_MALFORMED,
	S_STALE,
	S_TIMEOUTS,
	S_PEER_DEATHS,
	S_PARKS,
	S_WAKEUPS,
};
_Static_assert(sizeof(farm_msg_stats) == 12 * sizeof(uint64_t), "stats");

static inline void stat_add(struct stats *s, int i, uint64_t n)
{
	atomic_store_explicit(
	        &s->v[i],
	        atomic_load_explicit(&s->v[i], memory_order_relaxed) + n,
	        memory_order_relaxed);
}

/* ---- machine-wide state -------------------------------------------------- */

struct peer_info {
	_Atomic int ready; /* release after the fields below are set */
	char addr[256];
	farm_mr_desc desc;
};

/* Work items and same-machine messages, queued to a loop by any thread. */
struct inbox_item {
	struct cds_wfcq_node node;
	farm_work_fn fn; /* NULL: a message */
	void *ctx;
	struct wire_msg m;
	uint8_t payload[];
};

struct inbox {
	struct cds_wfcq_head head;
	struct cds_wfcq_tail tail;
};

struct handler {
	farm_msg_handler_fn fn;
	void *arg;
};

struct farm_msg {
	farm_fabric *fab;
	uint32_t me;
	farm_msg_attr attr;
	struct layout lay;
	uint32_t max_frame;
	bool notify; /* ring doorbells for parked receivers */
	farm_mem *mem;
	uint8_t *base;
	farm_mr *mr;
	farm_mr_desc desc;
	struct handler *handlers; /* FARM_MSG_TYPES */
	uint64_t types[FARM_MSG_TYPES / 64];
	pthread_mutex_t lock;
	_Atomic uint64_t peer_gen;
	struct peer_info *peers;  /* max_machines */
	struct inbox *inboxes;    /* nthreads */
	struct farm_loop **loops; /* nthreads, under lock */
};

/* ---- per-loop state -------------------------------------------------------
 */

struct pend { /* a message waiting for ring space */
	struct pend *next;
	struct wire_msg m;
	uint8_t payload[];
};

/* Sending side of the ring (this loop) -> (machine m, thread r). */
struct out_chan {
	uint32_t m;
	unsigned r;
	uint8_t *mirror; /* our copy of the ring: frames are built here */
	farm_mr *mirror_mr;
	uint64_t ring_raddr, park_raddr;
	const _Atomic uint64_t *head_word; /* written by the receiver */
	uint64_t head;                     /* lagging copy of *head_word */
	uint64_t tail;   /* bytes staged (abs), excluding an open trailer */
	uint64_t posted; /* bytes posted (abs) */
	uint64_t frame;  /* abs offset of the open frame; UINT64_MAX: none */
	uint32_t seq;    /* seq of the next frame */
	bool dirty;
	struct pend *qhead, *qtail;
	uint32_t qlen;
};

struct out_peer {
	farm_ep *ep;
	int err; /* sticky: the endpoint failed (peer dead or closed) */
	/* One-sided operations of the layers above (farm_loop_rdma) use an
	 * endpoint of their own: a bad address there puts that endpoint in
	 * the error state (as a verbs QP), which must not stop messaging.
	 * It is replaced once its outstanding operations have completed. */
	farm_ep *rep;
	unsigned rops;           /* outstanding on rep */
	struct out_chan **chans; /* nthreads, lazily */
};

/* Receiving side of the ring (machine m, thread t) -> this loop. */
struct in_chan {
	uint8_t *ring;
	uint64_t head;     /* consumed (abs) */
	uint64_t returned; /* handed back to the sender (abs) */
	uint32_t seq;
	bool broken;
};

struct call {
	uint64_t id; /* 0: free */
	farm_rpc_fn cont;
	void *ctx;
	uint64_t deadline;
	uint32_t machine;
	uint32_t next_free;
	uint32_t prev, next; /* active list */
};

#define NIL UINT32_MAX

/* A one-sided operation posted through a loop (farm_loop_rdma). Its
 * address is the work request id; msg's own requests use id 0. */
struct rdma_op {
	farm_op_fn cont;
	void *ctx;
	uint32_t machine;
	struct rdma_op *prev, *next; /* outstanding list */
};

struct farm_loop {
	farm_msg *msg;
	unsigned idx;
	pthread_t owner;
	farm_cq *cq;
	struct out_peer *out; /* max_machines */
	struct in_chan *in;   /* max_machines * nthreads */
	uint32_t *peer_list;  /* machines we poll */
	unsigned npeers;
	uint64_t peer_gen;
	struct out_chan **dirty;
	unsigned ndirty;
	_Atomic uint32_t *park; /* our park word, in the region */
	struct call *calls;
	uint32_t free_call, active, nactive;
	uint64_t call_gen;
	unsigned ticks;
	uint64_t idle_since;
	_Atomic int stop;
	bool polling; /* inside farm_loop_poll: handlers may not re-enter */
	farm_wr *wrs; /* WR_BATCH + 1 */
	struct poller {
		farm_poll_fn poll;
		farm_pending_fn pending;
		void *ctx;
	} pollers[MAX_POLLERS];
	unsigned npollers;
	struct rdma_op *ops;      /* outstanding one-sided operations */
	struct rdma_op *ops_free; /* recycled records */
	unsigned nops;
	/* farm_loop_defer: owner-only FIFO and recycled items. */
	struct defer_item *dq_head, **dq_tail, *dq_free;
	struct stats stats;
};

struct defer_item {
	farm_work_fn fn;
	void *ctx;
	struct defer_item *next;
};

static inline bool on_owner(const farm_loop *loop)
{
	return pthread_equal(loop->owner, pthread_self());
}

/* ---- creation ---------------------------------------------------------------
 */

int farm_msg_create(farm_fabric *fab, const farm_msg_attr *attr, farm_msg **out)
{
	if (!fab || !out)
		return -EINVAL;
	farm_msg_attr a = attr ? *attr : (farm_msg_attr){0};
	if (!a.nthreads)
		a.nthreads = 1;
	if (!a.max_machines)
		a.max_machines = 16;
	if (!a.ring_size)
		a.ring_size = DEFAULT_RING;
	if (!a.sendq_max)
		a.sendq_max = 4096;
	if (!a.max_calls)
		a.max_calls = 4096;
	if (!a.park_after_ns)
		a.park_after_ns = 200000;
	if (a.nthreads > 64 || a.max_machines > 1024 ||
	    !farm_is_pow2(a.ring_size) || a.ring_size < MIN_RING ||
	    a.ring_size > MAX_RING || a.max_calls > (1u << 24))
		return -EINVAL;
	uint32_t me = farm_fabric_machine_id(fab);
	if (me >= a.max_machines)
		return -EINVAL;
	/* verbs has no doorbell (shm and ofi have FARM_WR_NOTIFY). */
	bool verbs = strcmp(farm_fabric_provider(fab), "verbs") == 0;
	if (verbs && !a.busy_poll) {
		farm_info("msg: the %s provider has no doorbell for parked "
		          "threads: loops poll continuously",
		          farm_fabric_provider(fab));
		a.busy_poll = true;
	}
	farm_msg *msg = calloc(1, sizeof(*msg));
	if (!msg)
		return -ENOMEM;
	msg->fab = fab;
	msg->me = me;
	msg->attr = a;
	msg->notify = !a.busy_poll;
	layout_init(&msg->lay, a.nthreads, a.max_machines, a.ring_size);
	msg->max_frame = a.ring_size / 8;
	pthread_mutex_init(&msg->lock, NULL);
	int rc = -ENOMEM;
	msg->handlers = calloc(FARM_MSG_TYPES, sizeof(*msg->handlers));
	msg->peers = calloc(a.max_machines, sizeof(*msg->peers));
	msg->inboxes = calloc(a.nthreads, sizeof(*msg->inboxes));
	msg->loops = calloc(a.nthreads, sizeof(*msg->loops));
	if (!msg->handlers || !msg->peers || !msg->inboxes || !msg->loops)
		goto fail;
	for (unsigned i = 0; i < a.nthreads; i++)
		cds_wfcq_init(&msg->inboxes[i].head, &msg->inboxes[i].tail);
	rc = farm_mem_alloc(fab, msg->lay.total, 0, &msg->mem);
	if (rc)
		goto fail;
	msg->base = farm_mem_addr(msg->mem);
	rc = farm_mr_reg(fab, msg->base, msg->lay.total,
	                 FARM_ACCESS_LOCAL | FARM_ACCESS_REMOTE_WRITE |
	                         FARM_ACCESS_REMOTE_READ,
	                 &msg->mr);
	if (rc)
		goto fail;
	msg->desc = farm_mr_describe(msg->mr);
	struct region_hdr h = {MSG_MAGIC, a.nthreads, a.max_machines,
	                       a.ring_size, me};
	memcpy(msg->base, &h, sizeof(h));
	*out = msg;
	return 0;
fail:
	if (msg->mr)
		farm_mr_dereg(msg->mr);
	if (msg->mem)
		farm_mem_free(msg->mem);
	free(msg->handlers);
	free(msg->peers);
	free(msg->inboxes);
	free(msg->loops);
	pthread_mutex_destroy(&msg->lock);
	free(msg);
	return rc;
}

int farm_msg_destroy(farm_msg *msg)
{
	if (!msg)
		return -EINVAL;
	pthread_mutex_lock(&msg->lock);
	for (unsigned i = 0; i < msg->attr.nthreads; i++) {
		if (msg->loops[i]) {
			pthread_mutex_unlock(&msg->lock);
			return -EBUSY;
		}
	}
	pthread_mutex_unlock(&msg->lock);
	for (unsigned i = 0; i < msg->attr.nthreads; i++) {
		struct cds_wfcq_node *n;
		while ((n = __cds_wfcq_dequeue_blocking(
		                &msg->inboxes[i].head,
		                &msg->inboxes[i].tail))) {
			struct inbox_item *it =
			        caa_container_of(n, struct inbox_item, node);
			free(it);
		}
	}
	farm_mr_dereg(msg->mr);
	farm_mem_free(msg->mem);
	free(msg->handlers);
	free(msg->peers);
	free(msg->inboxes);
	free(msg->loops);
	pthread_mutex_destroy(&msg->lock);
	free(msg);
	return 0;
}

farm_mr_desc farm_msg_desc(const farm_msg *msg)
{
	return msg->desc;
}
uint32_t farm_msg_machine_id(const farm_msg *msg)
{
	return msg->me;
}
unsigned farm_msg_max_machines(const farm_msg *msg)
{
	return msg ? msg->attr.max_machines : 0;
}

unsigned farm_msg_nthreads(const farm_msg *msg)
{
	return msg->attr.nthreads;
}

uint32_t farm_msg_max_payload(const farm_msg *msg)
{
	return msg->max_frame - WIRE_FRAME_OVERHEAD - WIRE_MSG_HDR;
}

int farm_msg_add_peer(farm_msg *msg, uint32_t id, const char *addr,
                      const farm_mr_desc *desc)
{
	if (!msg || !addr || !desc || id == msg->me ||
	    id >= msg->attr.max_machines || strlen(addr) >= 256)
		return -EINVAL;
	if (desc->len != msg->lay.total || desc->machine != id) {
		farm_err("msg: machine %" PRIu32
		         "'s message region has %" PRIu64
		         " bytes, ours %" PRIu64 ": the machines run different "
		         "nthreads, max_machines or ring_size",
		         id, desc->len, msg->lay.total);
		return -EINVAL;
	}
	struct peer_info *p = &msg->peers[id];
	pthread_mutex_lock(&msg->lock);
	int rc = 0;
	if (atomic_load(&p->ready)) {
		rc = memcmp(&p->desc, desc, sizeof(*desc)) ? -EEXIST : 0;
	} else {
		snprintf(p->addr, sizeof(p->addr), "%s", addr);
		p->desc = *desc;
		atomic_store_explicit(&p->ready, 1, memory_order_release);
		atomic_fetch_add(&msg->peer_gen, 1);
	}
	pthread_mutex_unlock(&msg->lock);
	return rc;
}

int farm_msg_handle(farm_msg *msg, uint16_t type, farm_msg_handler_fn fn,
                    void *arg)
{
	if (!msg || !fn)
		return -EINVAL;
	pthread_mutex_lock(&msg->lock);
	int rc = 0;
	if (msg->handlers[type].fn) {
		rc = -EEXIST;
	} else {
		msg->handlers[type] = (struct handler){fn, arg};
		__atomic_or_fetch(&msg->types[type >> 6], 1ull << (type & 63),
		                  __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&msg->lock);
	return rc;
}

/* ---- loops ----------------------------------------------------------------
 */

static void pin_thread(unsigned idx)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	int n = CPU_COUNT(&set);
	if (n <= 0)
		return;
	int want = (int)(idx % (unsigned)n), seen = 0;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (seen++ == want) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			if (pthread_setaffinity_np(pthread_self(), sizeof(one),
			                           &one))
				farm_warn("msg: cannot pin loop %u to CPU %d",
				          idx, c);
			return;
		}
	}
}

static void loop_free(farm_loop *loop)
{
	free(loop->out);
	free(loop->in);
	free(loop->peer_list);
	free(loop->dirty);
	free(loop->calls);
	free(loop->wrs);
	free(loop);
}

int farm_loop_open(farm_msg *msg, unsigned idx, farm_loop **out)
{
	if (!msg || !out || idx >= msg->attr.nthreads)
		return -EINVAL;
	const farm_msg_attr *a = &msg->attr;
	farm_loop *loop = calloc(1, sizeof(*loop));
	if (!loop)
		return -ENOMEM;
	loop->msg = msg;
	loop->idx = idx;
	loop->owner = pthread_self();
	loop->out = calloc(a->max_machines, sizeof(*loop->out));
	loop->in = calloc((size_t)a->max_machines * a->nthreads,
	                  sizeof(*loop->in));
	loop->peer_list = calloc(a->max_machines, sizeof(*loop->peer_list));
	loop->dirty = calloc((size_t)a->max_machines * a->nthreads,
	                     sizeof(*loop->dirty));
	loop->calls = calloc(a->max_calls, sizeof(*loop->calls));
	loop->wrs = calloc(WR_BATCH + 1, sizeof(*loop->wrs));
	int rc = -ENOMEM;
	if (!loop->out || !loop->in || !loop->peer_list || !loop->dirty ||
	    !loop->calls || !loop->wrs)
		goto fail;
	for (uint32_t m = 0; m < a->max_machines; m++) {
		for (unsigned t = 0; t < a->nthreads; t++) {
			struct in_chan *c = &loop->in[m * a->nthreads + t];
			c->ring = msg->base + ring_at(&msg->lay, idx, m, t);
			c->seq = 1;
		}
	}
	for (uint32_t i = 0; i < a->max_calls; i++)
		loop->calls[i].next_free = i + 1 < a->max_calls ? i + 1 : NIL;
	loop->free_call = 0;
	loop->active = NIL;
	loop->peer_gen = UINT64_MAX;
	loop->park = (_Atomic uint32_t *)(void *)(msg->base +
	                                          park_at(&msg->lay, idx));
	rc = farm_cq_create(msg->fab, 4096, 0, &loop->cq);
	if (rc)
		goto fail;
	pthread_mutex_lock(&msg->lock);
	if (msg->loops[idx]) {
		pthread_mutex_unlock(&msg->lock);
		rc = -EBUSY;
		goto fail;
	}
	msg->loops[idx] = loop;
	pthread_mutex_unlock(&msg->lock);
	if (a->pin)
		pin_thread(idx);
	*out = loop;
	return 0;
fail:
	if (loop->cq && farm_cq_destroy(loop->cq))
		farm_warn("msg: cq_destroy failed");
	loop_free(loop);
	return rc;
}

unsigned farm_loop_index(const farm_loop *loop)
{
	return loop->idx;
}
farm_msg *farm_loop_msg(const farm_loop *loop)
{
	return loop->msg;
}

/* Refresh the list of machines whose rings we poll. */
static void refresh_peers(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	uint64_t g = atomic_load_explicit(&msg->peer_gen, memory_order_acquire);
	if (g == loop->peer_gen)
		return;
	loop->peer_gen = g;
	loop->npeers = 0;
	for (uint32_t m = 0; m < msg->attr.max_machines; m++)
		if (atomic_load_explicit(&msg->peers[m].ready,
		                         memory_order_acquire))
			loop->peer_list[loop->npeers++] = m;
}

/* The endpoint to machine @m, connected on first use. */
static int peer_ep(farm_loop *loop, uint32_t m, struct out_peer **out)
{
	struct out_peer *op = &loop->out[m];
	*out = op;
	if (op->err)
		return op->err;
	if (op->ep) {
		if (FARM_UNLIKELY(!farm_ep_usable(op->ep)))
			return op->err = FARM_EPEERDEAD;
		return 0;
	}
	farm_msg *msg = loop->msg;
	struct peer_info *p = &msg->peers[m];
	if (!atomic_load_explicit(&p->ready, memory_order_acquire))
		return -ENOENT;
	farm_ep_attr ea = {.sq_depth = EP_DEPTH};
	int rc = farm_ep_connect(msg->fab, loop->cq, m, p->addr, &ea, &op->ep);
	if (rc) {
		farm_warn("msg: loop %u cannot connect to machine %" PRIu32
		          ": %s",
		          loop->idx, m, farm_strerror(rc));
		op->ep = NULL;
		if (rc == -ECONNREFUSED)
			rc = op->err = FARM_EPEERDEAD;
		return rc;
	}
	return 0;
}

static int chan_get(farm_loop *loop, uint32_t m, unsigned r,
                    struct out_chan **out)
{
	struct out_peer *op;
	int rc = peer_ep(loop, m, &op);
	if (rc)
		return rc;
	if (!op->chans) {
		op->chans =
		        calloc(loop->msg->attr.nthreads, sizeof(*op->chans));
		if (!op->chans)
			return -ENOMEM;
	}
	struct out_chan *c = op->chans[r];
	if (c) {
		*out = c;
		return 0;
	}
	farm_msg *msg = loop->msg;
	const struct layout *l = &msg->lay;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (posix_memalign((void **)&c->mirror, 4096, l->R)) {
		free(c);
		return -ENOMEM;
	}
	memset(c->mirror, 0, l->R);
	rc = farm_mr_reg(msg->fab, c->mirror, l->R, FARM_ACCESS_LOCAL,
	                 &c->mirror_mr);
	if (rc) {
		free(c->mirror);
		free(c);
		return rc;
	}
	const farm_mr_desc *pd = &msg->peers[m].desc;
	c->m = m;
	c->r = r;
	c->ring_raddr = pd->addr + ring_at(l, r, msg->me, loop->idx);
	c->park_raddr = pd->addr + park_at(l, r);
	c->head_word =
	        (const _Atomic uint64_t *)(const void *)(msg->base +
	                                                 head_at(l, loop->idx,
	                                                         m, r));
	c->head = atomic_load_explicit(c->head_word, memory_order_acquire);
	c->tail = c->posted = c->head;
	c->frame = UINT64_MAX;
	c->seq = 1;
	op->chans[r] = c;
	*out = c;
	return 0;
}

static void chan_free(struct out_chan *c)
{
	while (c->qhead) {
		struct pend *p = c->qhead;
		c->qhead = p->next;
		free(p);
	}
	farm_mr_dereg(c->mirror_mr);
	free(c->mirror);
	free(c);
}

/* ---- sending ----------------------------------------------------------------
 */

/* Whether @need more bytes fit up to abs position @end, given the head. */
static inline bool fits(struct out_chan *c, uint32_t R, uint64_t end)
{
	if (end - c->head <= R)
		return true;
	c->head = atomic_load_explicit(c->head_word, memory_order_acquire);
	return end - c->head <= R;
}

/* Close the open frame: trailer, final header. */
static void frame_close(struct out_chan *c, uint32_t R)
{
	if (c->frame == UINT64_MAX)
		return;
	uint32_t off = (uint32_t)(c->frame & (R - 1));
	uint32_t len = (uint32_t)(c->tail - c->frame) + 8;
	uint64_t h = wire_header(c->seq++, len);
	memcpy(c->mirror + off, &h, 8);
	uint64_t t = h ^ WIRE_TRAILER_MAGIC;
	memcpy(c->mirror + off + len - 8, &t, 8);
	c->tail += 8;
	c->frame = UINT64_MAX;
}

/* Stage one message in the ring mirror. False: no room (nothing staged). */
static bool chan_append(farm_msg *msg, struct out_chan *c,
                        const struct wire_msg *m, const void *payload)
{
	uint32_t R = msg->lay.R, stride = wire_msg_stride(m->len);
	if (c->frame != UINT64_MAX) {
		uint32_t flen = (uint32_t)(c->tail - c->frame);
		uint32_t off = (uint32_t)(c->frame & (R - 1));
		if (flen + stride + 8 <= msg->max_frame &&
		    off + flen + stride + 8 <= R &&
		    fits(c, R, c->tail + stride + 8))
			goto put;
		frame_close(c, R);
	}
	/* A new frame: header, the message, trailer; wrap if it would cross
	 * the end of the ring. */
	uint32_t need = 8 + stride + 8;
	uint32_t off = (uint32_t)(c->tail & (R - 1));
	if (off + need > R) {
		uint64_t end = c->tail + (R - off) + need;
		if (!fits(c, R, end))
			return false;
		uint64_t w = wire_header(c->seq++, WIRE_WRAP_LEN);
		memcpy(c->mirror + off, &w, 8);
		c->tail += R - off;
	} else if (!fits(c, R, c->tail + need)) {
		return false;
	}
	c->frame = c->tail;
	c->tail += 8;
put:;
	uint8_t *p = c->mirror + (uint32_t)(c->tail & (R - 1));
	memcpy(p, m, WIRE_MSG_HDR);
	if (m->len)
		memcpy(p + WIRE_MSG_HDR, payload, m->len);
	uint32_t pad = wire_align8(m->len) - m->len;
	if (pad)
		memset(p + WIRE_MSG_HDR + m->len, 0, pad);
	c->tail += stride;
	return true;
}

static inline void mark_dirty(farm_loop *loop, struct out_chan *c)
{
	if (!c->dirty) {
		c->dirty = true;
		loop->dirty[loop->ndirty++] = c;
	}
}

/* Move queued messages into the ring while they fit. */
static void chan_drain(farm_msg *msg, struct out_chan *c)
{
	while (c->qhead) {
		struct pend *p = c->qhead;
		if (!chan_append(msg, c, &p->m, p->payload))
			return;
		c->qhead = p->next;
		if (!c->qhead)
			c->qtail = NULL;
		c->qlen--;
		free(p);
	}
}

/* Post what is staged: one WRITE per frame or wrap marker, then (when
 * receivers may park) a doorbell; one post for the lot. */
static void chan_post(farm_loop *loop, struct out_chan *c)
{
	farm_msg *msg = loop->msg;
	uint32_t R = msg->lay.R;
	struct out_peer *op = &loop->out[c->m];
	if (op->err || !op->ep)
		return;
	unsigned n = 0;
	uint64_t pos = c->posted;
	uint32_t adv[WR_BATCH];
	farm_wr *w = loop->wrs;
	while (pos != c->tail && n < WR_BATCH) {
		uint32_t off = (uint32_t)(pos & (R - 1));
		uint64_t h;
		memcpy(&h, c->mirror + off, 8);
		uint32_t len = (uint32_t)h;
		farm_wr *wr = &w[n++];
		*wr = (farm_wr){0};
		wr->opcode = FARM_WR_WRITE;
		wr->local = c->mirror + off;
		wr->lmr = c->mirror_mr;
		wr->raddr = c->ring_raddr + off;
		wr->rkey = msg->peers[c->m].desc.key;
		if (len == WIRE_WRAP_LEN) {
			wr->len = 8;
			adv[n - 1] = R - off;
		} else {
			wr->len = len;
			adv[n - 1] = len;
		}
		pos += adv[n - 1];
	}
	if (!n)
		return;
	if (msg->notify) {
		farm_wr *wr = &w[n++];
		*wr = farm_wr_notify(0, &msg->peers[c->m].desc,
		                     c->park_raddr -
		                             msg->peers[c->m].desc.addr);
	}
	for (unsigned i = 0; i + 1 < n; i++)
		w[i].next = &w[i + 1];
	w[n - 1].next = NULL;
	farm_wr *bad = NULL;
	int rc = farm_ep_post(op->ep, w, &bad);
	unsigned done = n;
	if (rc) {
		done = bad ? (unsigned)(bad - w) : 0;
		if (rc != -EAGAIN) {
			farm_warn("msg: post to machine %" PRIu32 ": %s", c->m,
			          farm_strerror(rc));
			op->err = rc;
		}
	}
	/* Advance over the frames that were queued. */
	for (unsigned i = 0; i < done && w[i].opcode == FARM_WR_WRITE; i++) {
		c->posted += adv[i];
		stat_add(&loop->stats, S_FRAMES_SENT, 1);
	}
	if (msg->notify && done == n)
		stat_add(&loop->stats, S_WAKEUPS, 1);
}

void farm_loop_flush(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	unsigned keep = 0;
	for (unsigned i = 0; i < loop->ndirty; i++) {
		struct out_chan *c = loop->dirty[i];
		chan_drain(msg, c);
		frame_close(c, msg->lay.R);
		chan_post(loop, c);
		if (c->qhead || c->posted != c->tail)
			loop->dirty[keep++] = c; /* waiting for room or SQ */
		else
			c->dirty = false;
	}
	loop->ndirty = keep;
}

unsigned farm_loop_unsent(const farm_loop *loop)
{
	return loop ? loop->ndirty : 0;
}

static struct inbox_item *item_new(uint32_t len)
{
	struct inbox_item *it = malloc(sizeof(*it) + len);
	if (it)
		cds_wfcq_node_init(&it->node);
	return it;
}

/* Queue on loop @r of this machine and wake it if parked. */
static void inbox_push(farm_msg *msg, unsigned r, struct inbox_item *it)
{
	cds_wfcq_enqueue(&msg->inboxes[r].head, &msg->inboxes[r].tail,
	                 &it->node);
	/* Dekker with park(): enqueue, full barrier, load its word. */
	atomic_thread_fence(memory_order_seq_cst);
	const uint32_t *w =
	        (const uint32_t *)(const void *)(msg->base +
	                                         park_at(&msg->lay, r));
	if (__atomic_load_n(w, __ATOMIC_SEQ_CST))
		farm_wake_word(w);
}

static int send_wire(farm_loop *loop, uint32_t machine, unsigned thread,
                     const struct wire_msg *m, const void *payload)
{
	farm_msg *msg = loop->msg;
	if (machine == msg->me) {
		if ((m->kind == WIRE_ONEWAY || m->kind == WIRE_REQUEST) &&
		    !wire_type_known(msg->types, m->type))
			return -EINVAL;
		struct inbox_item *it = item_new(m->len);
		if (!it)
			return -ENOMEM;
		it->fn = NULL;
		it->ctx = NULL;
		it->m = *m;
		if (m->len)
			memcpy(it->payload, payload, m->len);
		inbox_push(msg, thread, it);
		stat_add(&loop->stats, S_SENT, 1);
		return 0;
	}
	struct out_chan *c;
	int rc = chan_get(loop, machine, thread, &c);
	if (rc)
		return rc;
	if (FARM_LIKELY(!c->qhead) && chan_append(msg, c, m, payload)) {
		mark_dirty(loop, c);
		stat_add(&loop->stats, S_SENT, 1);
		return 0;
	}
	if (c->qlen >= msg->attr.sendq_max) {
		stat_add(&loop->stats, S_NOBUFS, 1);
		return -ENOBUFS;
	}
	struct pend *p = malloc(sizeof(*p) + m->len);
	if (!p)
		return -ENOMEM;
	p->next = NULL;
	p->m = *m;
	if (m->len)
		memcpy(p->payload, payload, m->len);
	if (c->qtail)
		c->qtail->next = p;
	else
		c->qhead = p;
	c->qtail = p;
	c->qlen++;
	mark_dirty(loop, c);
	stat_add(&loop->stats, S_QUEUED, 1);
	stat_add(&loop->stats, S_SENT, 1);
	return 0;
}

static int check_dest(farm_loop *loop, uint32_t machine, unsigned thread,
                      uint32_t len)
{
	farm_msg *msg = loop->msg;
	if (thread >= msg->attr.nthreads)
		return -EINVAL;
	if (machine >= msg->attr.max_machines)
		return -ENOENT;
	if (len > farm_msg_max_payload(msg))
		return -EMSGSIZE;
	return 0;
}

int farm_msg_send(farm_loop *loop, uint32_t machine, unsigned thread,
                  uint16_t type, const void *payload, uint32_t len)
{
	if (!loop || (len && !payload))
		return -EINVAL;
	int rc = check_dest(loop, machine, thread, len);
	if (rc)
		return rc;
	struct wire_msg m = {.len = len,
	                     .type = type,
	                     .kind = WIRE_ONEWAY,
	                     .src_thread = (uint8_t)loop->idx};
	return send_wire(loop, machine, thread, &m, payload);
}

/* ---- RPC -------------------------------------------------------------------
 */

static void call_unlink(farm_loop *loop, uint32_t i)
{
	struct call *c = &loop->calls[i];
	if (c->prev != NIL)
		loop->calls[c->prev].next = c->next;
	else
		loop->active = c->next;
	if (c->next != NIL)
		loop->calls[c->next].prev = c->prev;
	c->id = 0;
	c->next_free = loop->free_call;
	loop->free_call = i;
	loop->nactive--;
}

/* Complete call @i with @status (and a reply when 0). */
static void call_done(farm_loop *loop, uint32_t i, int status,
                      const void *reply, uint32_t len)
{
	struct call *c = &loop->calls[i];
	farm_rpc_fn cont = c->cont;
	void *ctx = c->ctx;
	call_unlink(loop, i);
	cont(loop, ctx, status, reply, len);
}

int farm_msg_call(farm_loop *loop, uint32_t machine, unsigned thread,
                  uint16_t type, const void *req, uint32_t len,
                  uint64_t timeout_ns, farm_rpc_fn cont, void *ctx)
{
	if (!loop || !cont || (len && !req))
		return -EINVAL;
	int rc = check_dest(loop, machine, thread, len);
	if (rc)
		return rc;
	if (loop->free_call == NIL)
		return -EAGAIN;
	uint32_t i = loop->free_call;
	struct call *c = &loop->calls[i];
	/* id: a generation above the slot index; never 0. */
	uint64_t id = (++loop->call_gen << 24) | i;
	struct wire_msg m = {.len = len,
	                     .type = type,
	                     .kind = WIRE_REQUEST,
	                     .src_thread = (uint8_t)loop->idx,
	                     .call_id = id};
	rc = send_wire(loop, machine, thread, &m, req);
	if (rc)
		return rc;
	loop->free_call = c->next_free;
	c->id = id;
	c->cont = cont;
	c->ctx = ctx;
	c->machine = machine;
	c->deadline =
	        farm_now_ns() + (timeout_ns ? timeout_ns : DEFAULT_TIMEOUT_NS);
	c->prev = NIL;
	c->next = loop->active;
	if (c->next != NIL)
		loop->calls[c->next].prev = i;
	loop->active = i;
	loop->nactive++;
	return 0;
}

static int reply_wire(farm_loop *loop, const struct farm_msg_token *tok,
                      uint8_t kind, const void *p, uint32_t len)
{
	if (!loop || !tok || !tok->call_id || (len && !p))
		return -EINVAL;
	int rc = check_dest(loop, tok->machine, tok->thread, len);
	if (rc)
		return rc;
	struct wire_msg m = {.len = len,
	                     .type = tok->type,
	                     .kind = kind,
	                     .src_thread = (uint8_t)loop->idx,
	                     .call_id = tok->call_id};
	return send_wire(loop, tok->machine, tok->thread, &m, p);
}

int farm_msg_reply(farm_loop *loop, const struct farm_msg_token *tok,
                   const void *reply, uint32_t len)
{
	return reply_wire(loop, tok, WIRE_REPLY, reply, len);
}

int farm_msg_reply_error(farm_loop *loop, const struct farm_msg_token *tok,
                         int status)
{
	if (status >= 0)
		return -EINVAL;
	int32_t st = status;
	return reply_wire(loop, tok, WIRE_REPLY_ERR, &st, 4);
}

/* Fail calls that timed out or whose peer died. */
static int scan_calls(farm_loop *loop, uint64_t now)
{
	int n = 0;
	for (uint32_t i = loop->active; i != NIL;) {
		struct call *c = &loop->calls[i];
		uint32_t next = c->next;
		int st = 0;
		if (c->machine != loop->msg->me) {
			struct out_peer *op = &loop->out[c->machine];
			if (op->err || (op->ep && !farm_ep_usable(op->ep))) {
				if (!op->err)
					op->err = FARM_EPEERDEAD;
				st = FARM_EPEERDEAD;
			}
		}
		if (!st && now >= c->deadline)
			st = -ETIMEDOUT;
		if (st) {
			stat_add(&loop->stats,
			         st == -ETIMEDOUT ? S_TIMEOUTS : S_PEER_DEATHS,
			         1);
			call_done(loop, i, st, NULL, 0);
			n++;
		}
		i = next;
	}
	return n;
}

/* ---- receiving
 * ---------------------------------------------------------------- */

static void deliver(farm_loop *loop, uint32_t src, const struct wire_msg *m,
                    const uint8_t *payload)
{
	farm_msg *msg = loop->msg;
	stat_add(&loop->stats, S_RECEIVED, 1);
	if (m->kind == WIRE_ONEWAY || m->kind == WIRE_REQUEST) {
		const struct handler *h = &msg->handlers[m->type];
		farm_msg_in in = {.src_machine = src,
		                  .src_thread = m->src_thread,
		                  .type = m->type,
		                  .payload = payload,
		                  .len = m->len,
		                  .token = {.call_id = m->call_id,
		                            .machine = src,
		                            .thread = m->src_thread,
		                            .type = m->type}};
		h->fn(loop, &in, h->arg);
		return;
	}
	uint32_t i = (uint32_t)(m->call_id & 0xffffff);
	if (i >= msg->attr.max_calls || loop->calls[i].id != m->call_id) {
		stat_add(&loop->stats, S_STALE, 1);
		return;
	}
	if (m->kind == WIRE_REPLY) {
		call_done(loop, i, 0, payload, m->len);
	} else {
		int32_t st;
		memcpy(&st, payload, 4);
		call_done(loop, i, st, NULL, 0);
	}
}

/* Zero what was consumed and tell the sender (machine m, thread t). */
static void hand_back(farm_loop *loop, uint32_t m, unsigned t,
                      struct in_chan *c)
{
	farm_msg *msg = loop->msg;
	uint32_t R = msg->lay.R;
	if (c->head == c->returned)
		return;
	uint64_t from = c->returned;
	while (from != c->head) {
		uint32_t off = (uint32_t)(from & (R - 1));
		uint64_t n = FARM_MIN(c->head - from, (uint64_t)(R - off));
		memset(c->ring + off, 0, (size_t)n);
		from += n;
	}
	/* The zeroes are visible before the sender can learn of the room. */
	farm_store_fence();
	atomic_thread_fence(memory_order_release);
	struct out_peer *op;
	if (peer_ep(loop, m, &op))
		return; /* dead or unknown: nobody to tell */
	uint64_t v = c->head;
	const farm_mr_desc *pd = &msg->peers[m].desc;
	farm_wr wr = farm_wr_write(0, &v, NULL, 8, pd,
	                           head_at(&msg->lay, t, msg->me, loop->idx));
	wr.flags = FARM_WR_INLINE;
	int rc = farm_ep_post(op->ep, &wr, NULL);
	if (rc == 0)
		c->returned = c->head;
	else if (rc != -EAGAIN)
		op->err = rc;
}

static void break_chan(farm_loop *loop, uint32_t m, unsigned t,
                       struct in_chan *c, const char *why)
{
	c->broken = true;
	stat_add(&loop->stats, S_MALFORMED, 1);
	farm_err("msg: loop %u: channel from machine %" PRIu32 " thread %u "
	         "is broken (%s at ring offset %" PRIu64 "); it is no longer "
	         "read",
	         loop->idx, m, t, why, c->head & (loop->msg->lay.R - 1));
}

/* Handle the frames waiting in one ring. Returns messages delivered. */
static int poll_ring(farm_loop *loop, uint32_t m, unsigned t, struct in_chan *c)
{
	farm_msg *msg = loop->msg;
	uint32_t R = msg->lay.R;
	int got = 0;
	for (unsigned f = 0; f < FRAMES_PER_POLL; f++) {
		uint32_t off = (uint32_t)(c->head & (R - 1)), len = 0;
		enum wire_peek k = wire_peek(c->ring, R, off, c->seq,
		                             msg->max_frame, &len);
		if (k == WIRE_EMPTY || k == WIRE_PARTIAL)
			break;
		if (k == WIRE_CORRUPT) {
			break_chan(loop, m, t, c,
			           "bad frame header or trailer");
			return got;
		}
		c->seq++;
		if (k == WIRE_WRAP) {
			c->head += R - off;
			continue;
		}
		const uint8_t *body = c->ring + off + 8;
		uint32_t blen = len - WIRE_FRAME_OVERHEAD;
		if (wire_check_body(body, blen, msg->attr.nthreads,
		                    msg->types) < 0) {
			break_chan(loop, m, t, c, "malformed message");
			return got;
		}
		stat_add(&loop->stats, S_FRAMES_RECV, 1);
		for (uint32_t o = 0; o < blen;) {
			struct wire_msg wm;
			memcpy(&wm, body + o, sizeof(wm));
			deliver(loop, m, &wm, body + o + WIRE_MSG_HDR);
			o += wire_msg_stride(wm.len);
			got++;
		}
		c->head += len;
		if (c->head - c->returned >= R / 2)
			hand_back(loop, m, t, c);
	}
	return got;
}

static int poll_rings(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	unsigned T = msg->attr.nthreads;
	int got = 0;
	for (unsigned i = 0; i < loop->npeers; i++) {
		uint32_t m = loop->peer_list[i];
		for (unsigned t = 0; t < T; t++) {
			struct in_chan *c = &loop->in[m * T + t];
			if (FARM_UNLIKELY(c->broken))
				continue;
			got += poll_ring(loop, m, t, c);
			if (c->head - c->returned >= msg->lay.R / 8 &&
			    wire_load(c->ring + (c->head & (msg->lay.R - 1))) ==
			            0)
				hand_back(loop, m, t, c);
		}
	}
	return got;
}

static void hand_back_all(farm_loop *loop)
{
	unsigned T = loop->msg->attr.nthreads;
	for (unsigned i = 0; i < loop->npeers; i++) {
		uint32_t m = loop->peer_list[i];
		for (unsigned t = 0; t < T; t++) {
			struct in_chan *c = &loop->in[m * T + t];
			if (!c->broken)
				hand_back(loop, m, t, c);
		}
	}
}

static int poll_inbox(farm_loop *loop, int status)
{
	farm_msg *msg = loop->msg;
	struct inbox *ib = &msg->inboxes[loop->idx];
	int got = 0;
	if (cds_wfcq_empty(&ib->head, &ib->tail))
		return 0;
	/* Take what is there now; items queued while they run wait for the
	 * next pass (a work item that re-posts itself cannot starve us). */
	struct cds_wfcq_head h;
	struct cds_wfcq_tail t;
	cds_wfcq_init(&h, &t);
	__cds_wfcq_splice_blocking(&h, &t, &ib->head, &ib->tail);
	struct cds_wfcq_node *n;
	while ((n = __cds_wfcq_dequeue_blocking(&h, &t))) {
		struct inbox_item *it =
		        caa_container_of(n, struct inbox_item, node);
		if (it->fn)
			it->fn(loop, it->ctx, status);
		else if (status == 0)
			deliver(loop, msg->me, &it->m, it->payload);
		free(it);
		got++;
	}
	return got;
}

static void rdma_done(farm_loop *loop, struct rdma_op *o, int status)
{
	if (o->prev)
		o->prev->next = o->next;
	else
		loop->ops = o->next;
	if (o->next)
		o->next->prev = o->prev;
	loop->nops--;
	loop->out[o->machine].rops--;
	farm_op_fn cont = o->cont;
	void *ctx = o->ctx;
	o->next = loop->ops_free;
	loop->ops_free = o;
	cont(loop, ctx, status);
}

static int rdma_post(farm_loop *loop, uint32_t machine, int wake_thread,
                     farm_wr *wr, farm_op_fn cont, void *ctx)
{
	if (!loop || !wr || !cont || machine >= loop->msg->attr.max_machines ||
	    machine == loop->msg->me)
		return -EINVAL;
	if (wake_thread >= (int)loop->msg->attr.nthreads)
		return -EINVAL;
	if (wr->opcode != FARM_WR_READ && wr->opcode != FARM_WR_WRITE &&
	    wr->opcode != FARM_WR_CAS)
		return -EINVAL;
	struct out_peer *op;
	int rc = peer_ep(loop, machine, &op);
	if (rc)
		return rc;
	if (op->rep && !farm_ep_usable(op->rep)) {
		if (op->rops)
			return -EAGAIN; /* the failed one's followers drain */
		farm_ep_destroy(op->rep);
		op->rep = NULL;
	}
	if (!op->rep) {
		farm_ep_attr ea = {.sq_depth = EP_DEPTH};
		rc = farm_ep_connect(loop->msg->fab, loop->cq, machine,
		                     loop->msg->peers[machine].addr, &ea,
		                     &op->rep);
		if (rc) {
			op->rep = NULL;
			return rc == -ECONNREFUSED ? FARM_EPEERDEAD : rc;
		}
	}
	struct rdma_op *o = loop->ops_free;
	if (o)
		loop->ops_free = o->next;
	else if (!(o = malloc(sizeof(*o))))
		return -ENOMEM;
	o->cont = cont;
	o->ctx = ctx;
	o->machine = machine;
	wr->next = NULL;
	wr->wr_id = (uint64_t)(uintptr_t)o;
	wr->flags |= FARM_WR_SIGNALED;
	farm_wr bell;
	if (wake_thread >= 0 && loop->msg->notify) {
		/* After the WRITE, in the same doorbell: a parked receiver
		 * wakes and finds it. */
		const farm_mr_desc *pd = &loop->msg->peers[machine].desc;
		bell = farm_wr_notify(
		        0, pd, park_at(&loop->msg->lay, (unsigned)wake_thread));
		wr->next = &bell;
	}
	farm_wr *bad = NULL;
	rc = farm_ep_post(op->rep, wr, &bad);
	if (rc && bad == wr->next)
		rc = 0; /* the request is queued, only its doorbell is not: a
		           parked receiver wakes at its next timed check */
	wr->next = NULL;
	if (rc) {
		o->next = loop->ops_free;
		loop->ops_free = o;
		return rc;
	}
	o->prev = NULL;
	o->next = loop->ops;
	if (loop->ops)
		loop->ops->prev = o;
	loop->ops = o;
	loop->nops++;
	op->rops++;
	return 0;
}

int farm_loop_rdma(farm_loop *loop, uint32_t machine, farm_wr *wr,
                   farm_op_fn cont, void *ctx)
{
	return rdma_post(loop, machine, -1, wr, cont, ctx);
}

int farm_loop_rdma_wake(farm_loop *loop, uint32_t machine, unsigned thread,
                        farm_wr *wr, farm_op_fn cont, void *ctx)
{
	if (thread > INT32_MAX)
		return -EINVAL;
	return rdma_post(loop, machine, (int)thread, wr, cont, ctx);
}

int farm_loop_add_poller(farm_loop *loop, farm_poll_fn poll,
                         farm_pending_fn pending, void *ctx)
{
	if (!loop || !poll || !pending)
		return -EINVAL;
	if (loop->npollers == MAX_POLLERS)
		return -ENOSPC;
	loop->pollers[loop->npollers++] =
	        (struct poller){.poll = poll, .pending = pending, .ctx = ctx};
	return 0;
}

static int poll_cq(farm_loop *loop)
{
	farm_wc wc[CQ_BATCH];
	int n = farm_cq_poll(loop->cq, CQ_BATCH, wc);
	for (int i = 0; i < n; i++) {
		if (wc[i].wr_id) {
			/* FARM_EFLUSHED: an earlier operation on the endpoint
			 * failed; this one did not run (the caller may retry:
			 * the endpoint is replaced). */
			rdma_done(loop,
			          (struct rdma_op *)(uintptr_t)wc[i].wr_id,
			          wc[i].status);
			continue;
		}
		if (wc[i].status == 0)
			continue;
		struct out_peer *op = &loop->out[wc[i].peer];
		if (!op->err) {
			farm_warn("msg: loop %u: machine %" PRIu32 ": %s",
			          loop->idx, wc[i].peer,
			          farm_strerror(wc[i].status));
			op->err = wc[i].status == FARM_EFLUSHED ? FARM_EPEERDEAD
			                                        : wc[i].status;
		}
	}
	return n > 0 ? n : 0;
}

int farm_loop_defer(farm_loop *loop, farm_work_fn fn, void *ctx)
{
	if (!loop || !fn)
		return -EINVAL;
	struct defer_item *d = loop->dq_free;
	if (d)
		loop->dq_free = d->next;
	else if (!(d = malloc(sizeof(*d))))
		return -ENOMEM;
	d->fn = fn;
	d->ctx = ctx;
	d->next = NULL;
	if (!loop->dq_head)
		loop->dq_tail = &loop->dq_head;
	*loop->dq_tail = d;
	loop->dq_tail = &d->next;
	return 0;
}

/* Run the items deferred before this pass (later ones wait for the next). */
static int run_deferred(farm_loop *loop, int status)
{
	struct defer_item *d = loop->dq_head;
	loop->dq_head = NULL;
	int n = 0;
	while (d) {
		struct defer_item *next = d->next;
		farm_work_fn fn = d->fn;
		void *ctx = d->ctx;
		d->next = loop->dq_free;
		loop->dq_free = d;
		fn(loop, ctx, status);
		d = next;
		n++;
	}
	return n;
}

int farm_loop_poll(farm_loop *loop)
{
	if (!loop || loop->polling)
		return 0;
	loop->polling = true;
	int got = loop->dq_head ? run_deferred(loop, 0) : 0;
	refresh_peers(loop);
	got += poll_cq(loop);
	got += poll_rings(loop);
	for (unsigned i = 0; i < loop->npollers; i++)
		got += loop->pollers[i].poll(loop, loop->pollers[i].ctx);
	got += poll_inbox(loop, 0);
	if (loop->nactive && (++loop->ticks % SCAN_EVERY) == 0)
		got += scan_calls(loop, farm_now_ns());
	if (loop->ndirty)
		farm_loop_flush(loop);
	loop->polling = false;
	return got;
}

/* Whether anything is waiting for us (checked after raising the park
 * word, so a sender that missed the word is seen here). */
static bool work_pending(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	struct inbox *ib = &msg->inboxes[loop->idx];
	if (!cds_wfcq_empty(&ib->head, &ib->tail))
		return true;
	unsigned T = msg->attr.nthreads;
	for (unsigned i = 0; i < loop->npeers; i++) {
		uint32_t m = loop->peer_list[i];
		for (unsigned t = 0; t < T; t++) {
			struct in_chan *c = &loop->in[m * T + t];
			if (!c->broken &&
			    wire_load(c->ring + (c->head & (msg->lay.R - 1))))
				return true;
		}
	}
	for (unsigned i = 0; i < loop->npollers; i++)
		if (loop->pollers[i].pending(loop, loop->pollers[i].ctx))
			return true;
	/* Last: a pending() above may have deferred something. */
	return loop->dq_head || atomic_load(&loop->stop) != 0;
}

/* Park until a doorbell, a posted item, or @max_ns. */
static void park(farm_loop *loop, uint64_t max_ns)
{
	hand_back_all(loop);
	if (loop->ndirty)
		farm_loop_flush(loop);
	if (loop->ndirty)
		return; /* sends still wait for room: keep polling */
	atomic_store_explicit(loop->park, 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	if (!work_pending(loop)) {
		stat_add(&loop->stats, S_PARKS, 1);
		farm_wait_word((const uint32_t *)(const void *)loop->park, 1,
		               max_ns);
	}
	atomic_store_explicit(loop->park, 0, memory_order_relaxed);
}

/* After an empty pass: decide whether to park. */
static void idle(farm_loop *loop, uint64_t deadline)
{
	farm_msg *msg = loop->msg;
	uint64_t now = farm_now_ns();
	if (loop->nactive)
		scan_calls(loop, now);
	if (msg->attr.busy_poll || loop->nops) {
		farm_cpu_relax();
		return;
	}
	if (!loop->idle_since) {
		loop->idle_since = now;
		return;
	}
	if (now - loop->idle_since < msg->attr.park_after_ns) {
		farm_cpu_relax();
		return;
	}
	uint64_t max = loop->nactive ? PARK_CALLS_NS : PARK_MAX_NS;
	if (deadline) {
		if (now >= deadline)
			return;
		max = FARM_MIN(max, deadline - now);
	}
	park(loop, max);
	loop->idle_since = 0;
}

void farm_loop_run(farm_loop *loop)
{
	if (!loop || loop->polling)
		return;
	while (!atomic_load_explicit(&loop->stop, memory_order_acquire)) {
		if (farm_loop_poll(loop))
			loop->idle_since = 0;
		else
			idle(loop, 0);
	}
	atomic_store(&loop->stop, 0);
}

void farm_loop_stop(farm_loop *loop)
{
	if (!loop)
		return;
	atomic_store_explicit(&loop->stop, 1, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(loop->park))
		farm_wake_word((const uint32_t *)(const void *)loop->park);
}

int farm_loop_wait(farm_loop *loop, const volatile int *flag,
                   uint64_t timeout_ns)
{
	if (!loop || !flag)
		return -EINVAL;
	if (loop->polling)
		return -EDEADLK; /* from a handler or continuation */
	uint64_t deadline = timeout_ns ? farm_now_ns() + timeout_ns : 0;
	unsigned n = 0;
	/* At least one pass, so a caller looping on an already-set flag
	 * still sends what it queued. */
	for (;;) {
		if (farm_loop_poll(loop))
			loop->idle_since = 0;
		else if (!*flag)
			idle(loop, deadline);
		if (*flag)
			return 0;
		if (deadline && (++n & 63) == 0 && farm_now_ns() >= deadline)
			return *flag ? 0 : -ETIMEDOUT;
	}
}

int farm_loop_post(farm_loop *loop, farm_work_fn fn, void *ctx)
{
	if (!loop || !fn)
		return -EINVAL;
	struct inbox_item *it = item_new(0);
	if (!it)
		return -ENOMEM;
	it->fn = fn;
	it->ctx = ctx;
	inbox_push(loop->msg, loop->idx, it);
	return 0;
}

void farm_loop_close(farm_loop *loop)
{
	if (!loop)
		return;
	farm_msg *msg = loop->msg;
	if (!on_owner(loop))
		farm_warn("msg: loop %u closed by another thread", loop->idx);
	while (loop->active != NIL)
		call_done(loop, loop->active, -ECANCELED, NULL, 0);
	while (loop->ops)
		rdma_done(loop, loop->ops, -ECANCELED);
	while (loop->dq_head)
		(void)run_deferred(loop, -ECANCELED);
	while (loop->dq_free) {
		struct defer_item *d = loop->dq_free;
		loop->dq_free = d->next;
		free(d);
	}
	while (loop->ops_free) {
		struct rdma_op *o = loop->ops_free;
		loop->ops_free = o->next;
		free(o);
	}
	pthread_mutex_lock(&msg->lock);
	msg->loops[loop->idx] = NULL;
	pthread_mutex_unlock(&msg->lock);
	poll_inbox(loop, -ECANCELED);
	for (uint32_t m = 0; m < msg->attr.max_machines; m++) {
		struct out_peer *op = &loop->out[m];
		if (op->chans) {
			for (unsigned r = 0; r < msg->attr.nthreads; r++)
				if (op->chans[r])
					chan_free(op->chans[r]);
			free(op->chans);
		}
		if (op->ep)
			farm_ep_destroy(op->ep);
		if (op->rep)
			farm_ep_destroy(op->rep);
	}
	if (farm_cq_destroy(loop->cq))
		farm_warn("msg: loop %u: cq_destroy failed", loop->idx);
	loop_free(loop);
}

void farm_msg_stats_get(const farm_msg *msg, const farm_loop *loop,
                        farm_msg_stats *out)
{
	uint64_t v[12] = {0};
	if (loop) {
		for (int i = 0; i < 12; i++)
			v[i] = atomic_load_explicit(&loop->stats.v[i],
			                            memory_order_relaxed);
	} else if (msg) {
		farm_msg *mm = (farm_msg *)msg;
		pthread_mutex_lock(&mm->lock);
		for (unsigned l = 0; l < mm->attr.nthreads; l++) {
			if (!mm->loops[l])
				continue;
			for (int i = 0; i < 12; i++)
				v[i] += atomic_load_explicit(
				        &mm->loops[l]->stats.v[i],
				        memory_order_relaxed);
		}
		pthread_mutex_unlock(&mm->lock);
	}
	memcpy(out, v, sizeof(v));
}

uint8_t *farm_msg_testing_ring(farm_msg *msg, unsigned r, uint32_t m,
                               unsigned t, uint32_t *size, uint64_t *head)
{
	*size = msg->lay.R;
	*head = 0;
	pthread_mutex_lock(&msg->lock);
	farm_loop *loop = msg->loops[r];
	if (loop)
		*head = loop->in[m * msg->attr.nthreads + t].head;
	pthread_mutex_unlock(&msg->lock);
	return msg->base + ring_at(&msg->lay, r, m, t);
}

uint64_t farm_msg_testing_park_offset(const farm_msg *msg, unsigned r)
{
	return park_at(&msg->lay, r);
}
