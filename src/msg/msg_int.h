/*
 * Internal to messaging: the region layout, the machine-wide and per-loop
 * state, counters, and the functions one file calls in another. msg.c:
 * the machine-wide object (create, peers, handlers, counters); msg_ring.c:
 * the ring channels (sending: frames, queues, doorbells; receiving:
 * polling, checking, delivering, handing space back; the same-machine
 * inbox); msg_rpc.c: calls, replies and their deadlines; msg_loop.c: the
 * per-thread event loop (open / close, one-sided operations for the
 * layers above, pollers, deferred work, parking). Every file that
 * includes this one defines _LGPL_SOURCE first (liburcu's wait-free
 * queue, inlined).
 */
#ifndef FARM_MSG_MSG_INT_H
#define FARM_MSG_MSG_INT_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <urcu/wfcqueue.h>

#include <farm/msg.h>

#include "msg/wire.h"
#include "util/common.h"
#include "util/stat.h"

#define MSG_MAGIC       0x3167736d6d726166ull /* "farmmsg1" */
#define MSG_HDR_BYTES   4096u
#define DEFAULT_RING    (256u << 10)
#define MIN_RING        (4u << 10)
#define MAX_RING        (64u << 20)
#define EP_DEPTH        1024u
#define CQ_BATCH        32
#define MAX_POLLERS     8
#define MAX_OWED_BELLS  16 /* farm_loop_rdma_lazy's owed doorbells */
#define FRAMES_PER_POLL 64u
#define WR_BATCH        64u
/* READs farm_loop_rdma_reads posts in one list (its ops on the stack). */
#define FARM_LOOP_READS_MAX 64u
#define SCAN_EVERY          256u /* passes between timer scans when busy */
#define PARK_MAX_NS         200000000ull /* longest park with nothing pending */
#define PARK_CALLS_NS       10000000ull  /* longest park while calls wait */
#define DEFAULT_TIMEOUT_NS  1000000000ull
#define CONNECT_RETRY_NS    100000000ull /* after a connect that timed out */

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

/* One writer (the loop: farm_stat_add_owned); readers on other threads
 * load relaxed. */
struct stats {
	_Atomic uint64_t v[13];
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
	S_REFUSED_CONFIG,
};
_Static_assert(sizeof(farm_msg_stats) == 13 * sizeof(uint64_t), "stats");

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
	uint32_t cap; /* payload bytes it has room for */
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
	bool notify;      /* ring doorbells for parked receivers */
	bool batch_reads; /* a pass's READs to one machine: one post (udp) */
	farm_mem *mem;
	uint8_t *base;
	farm_mr *mr;
	farm_mr_desc desc;
	struct handler *handlers; /* FARM_MSG_TYPES */
	uint64_t types[FARM_MSG_TYPES / 64];
	pthread_mutex_t lock;
	_Atomic uint64_t peer_gen;
	struct peer_info *peers; /* max_machines */
	/* Configurations (farm_msg_set_config): the id this machine stamps
	 * on its frames, and per sender the lowest id accepted from it
	 * (UINT32_MAX: removed, nothing accepted; 0: anything). */
	_Atomic uint32_t cfg;
	_Atomic uint32_t *min_cfg; /* max_machines */
	struct inbox *inboxes;     /* nthreads */
	struct farm_loop **loops;  /* nthreads, under lock */
	/* The reconfiguration probe (msg_probe.c), made on first use. */
	pthread_mutex_t probe_mu;
	struct msg_probe *probe; /* under probe_mu */
};

/* ---- per-loop state ------------------------------------------------------ */

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
	uint64_t retry_ns; /* a connect that timed out is not tried again
	                      before this (farm_msg_connect) */
	/* One-sided operations of the layers above (farm_loop_rdma) use an
	 * endpoint of their own: a bad address there puts that endpoint in
	 * the error state (as a verbs QP), which must not stop messaging.
	 * It is replaced once its outstanding operations have completed. */
	farm_ep *rep;
	unsigned rops; /* outstanding on rep */
	bool rep_old;  /* rep reaches an old holder of the id: replaced once
	                  rops drain (farm_loop_forget_peer) */
	/* The loop pass (farm_loop.pass) in which ep and rep were last found
	 * usable by rdma_post; 0: check at the next one-sided operation. */
	uint64_t rep_pass;
	/* READs of this pass not yet posted on rep (batch_reads): one list,
	 * one doorbell, at the end of the pass. Counted in rops. */
	farm_wr *pend, **pend_tail;
	unsigned npend;
	bool pend_listed;        /* in the loop's pend_peers */
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
	/* A new call holds CALL_UNSTAMPED | its timeout until its loop's
	 * next scan (farm_msg_scan_calls: every SCAN_EVERY busy passes, and
	 * every idle one) starts its clock: a timeout runs from at most
	 * that many passes after the call. */
	uint64_t deadline;
	uint32_t machine;
	uint32_t next_free;
	uint32_t prev, next; /* active list */
};

enum { RB_NONE, RB_IN_PLACE, RB_BUFFERED };

#define NIL            UINT32_MAX
#define CALL_UNSTAMPED (1ull << 63) /* beyond any clock: never due */

/* A one-sided operation posted through a loop (farm_loop_rdma). Its
 * address is the work request id; msg's own requests use id 0. */
struct rdma_op {
	farm_op_fn cont;
	void *ctx;
	uint32_t machine;
	int status;                  /* failed before it was posted */
	struct rdma_op *prev, *next; /* outstanding list */
	struct rdma_op *fnext;       /* failed list */
	farm_wr wr;                  /* its request while batched */
};

struct farm_loop {
	farm_msg *msg;
	unsigned idx;
	pthread_t owner;
	farm_cq *cq;
	struct out_peer *out;     /* max_machines */
	struct in_chan *in;       /* max_machines * nthreads */
	uint32_t *peer_list;      /* machines we poll */
	uint32_t *refused_logged; /* per machine: threshold last logged */
	unsigned npeers;
	uint64_t peer_gen;
	struct out_chan **dirty;
	unsigned ndirty;
	_Atomic uint32_t *park; /* our park word, in the region */
	struct call *calls;
	uint32_t free_call, active, nactive;
	uint64_t call_gen;
	unsigned ticks;
	/* Passes begun, from 1: the one-sided endpoints' checks hold for one
	 * (out_peer.rep_pass). */
	uint64_t pass;
	uint64_t idle_since;
	uint64_t wake_at; /* farm_loop_wake_by: park no longer (0: none) */
	_Atomic int stop;
	bool polling; /* inside farm_loop_poll: handlers may not re-enter */
	/* Messages this loop sends itself, in order, handed over after the
	 * inbox's on each pass (farm_msg_poll_inbox): its own thread queues
	 * and takes them, so they need none of the inbox's atomics. Linked
	 * through node.next. */
	struct inbox_item *self_head, *self_tail;
	/* Items kept for the messages it sends itself (self_item), linked
	 * through node.next: a request to a shard it serves and its answer
	 * took a malloc and a free each. */
	struct inbox_item *free_items;
	unsigned nfree_items;
	bool hand_back_due; /* a ring consumed an eighth: farm_msg_hand_back_due
	                       after the flush */
	/* farm_msg_reply_begin's open reply (RB_*): staged in a send mirror
	 * (the caller writes its payload there), or to be sent from rb_buf
	 * (max payload bytes, made on first use) at farm_msg_reply_end. */
	uint8_t rb;
	uint8_t *rb_buf;
	struct wire_msg rb_m;
	uint32_t rb_machine;
	unsigned rb_thread;
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
	/* Doorbells farm_loop_rdma_lazy owes: (machine, thread) pairs, and
	 * when the first was owed (0: none). */
	struct owed_bell {
		uint32_t machine, thread;
	} owed[MAX_OWED_BELLS];
	unsigned nowed;
	bool owed_urgent; /* one is due at the end of this pass */
	uint64_t owed_since;
	uint32_t *pend_peers; /* machines with batched READs (max_machines) */
	unsigned npend_peers;
	struct rdma_op *failed; /* batched, their post failed: completed at
	                           the next pass */
	/* farm_loop_defer: owner-only FIFO and recycled items. */
	struct defer_item *dq_head, **dq_tail, *dq_free;
	struct stats stats;
	/* Bytes of this loop's send mirrors made (ring_size each); written
	 * by the loop only, read relaxed by farm_msg_memory. */
	_Atomic uint64_t mirror_bytes;
	/* Address space for a send mirror per (machine, thread), anonymous
	 * and sparse: channel (m, r)'s mirror is the slice at
	 * (m * nthreads + r) * ring_size, which takes memory as frames are
	 * staged in it (README.md, "Memory"). */
	uint8_t *mirror_area;
	size_t mirror_area_len;
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

/* ---- across files -------------------------------------------------------- */

/* msg_ring.c: channels, sending, receiving, the inbox */
void farm_msg_refresh_peers(farm_loop *loop);
int farm_msg_peer_ep(farm_loop *loop, uint32_t m, struct out_peer **out);
int farm_msg_connect(farm_loop *loop, uint32_t m, struct out_peer *op,
                     farm_ep **ep);
void farm_msg_chan_free(farm_loop *loop, struct out_chan *c);
/* msg_probe.c: free the probe's endpoints and queue (at destroy). */
void farm_msg_probe_free(farm_msg *msg);
struct inbox_item *farm_msg_item_new(uint32_t len);
/* The items @loop keeps for its own messages, freed (at its close). */
void farm_msg_items_free(farm_loop *loop);
void farm_msg_inbox_push(farm_msg *msg, unsigned r, struct inbox_item *it);
int farm_msg_send_wire(farm_loop *loop, uint32_t machine, unsigned thread,
                       const struct wire_msg *m, const void *payload);
/* Stage @m (a reply) on the ring to (@machine, @thread) with its payload
 * left for the caller to write: where the payload goes, in the send
 * mirror; NULL when it cannot be staged in place (this machine, a channel
 * not made yet or not usable, messages queued for room, no room). */
uint8_t *farm_msg_stage_in_place(farm_loop *loop, uint32_t machine,
                                 unsigned thread, const struct wire_msg *m);
/* Arguments of a send that need no channel: 0 or the error. Inline: on
 * every call and reply. */
static inline int farm_msg_check_dest(const farm_loop *loop, uint32_t machine,
                                      unsigned thread, uint32_t len)
{
	const farm_msg *msg = loop->msg;
	if (thread >= msg->attr.nthreads)
		return -EINVAL;
	if (machine >= msg->attr.max_machines)
		return -ENOENT;
	/* farm_msg_max_payload, without a call on every send */
	if (len > msg->max_frame - WIRE_FRAME_OVERHEAD - WIRE_MSG_HDR)
		return -EMSGSIZE;
	return 0;
}
int farm_msg_poll_rings(farm_loop *loop);
/* The rings this loop receives from machine @m start afresh (a new
 * incarnation, farm_loop_forget_peer). */
void farm_msg_forget_in(farm_loop *loop, uint32_t m);
void farm_msg_hand_back_all(farm_loop *loop);
void farm_msg_hand_back_due(farm_loop *loop);
int farm_msg_poll_inbox(farm_loop *loop, int status);

/* msg_rpc.c: calls */
/* A handler or continuation returned with a reply begun
 * (farm_msg_reply_begin) and not ended: end it, so the loop's sends and
 * flushes go on; warned once. */
void farm_msg_reply_forgotten(farm_loop *loop);
void farm_msg_call_done(farm_loop *loop, uint32_t i, int status,
                        const void *reply, uint32_t len);
int farm_msg_scan_calls(farm_loop *loop, uint64_t now);

/* msg_loop.c and msg_reads.c: one-sided operations. */
/* @op's endpoint for one-sided operations, made ready (msg_loop.c). */
int farm_msg_rep_ready(farm_loop *loop, uint32_t machine, struct out_peer *op);
/* @o joins the loop's outstanding operations (to @op's machine). */
static inline void farm_msg_ops_link(farm_loop *loop, struct out_peer *op,
                                     struct rdma_op *o)
{
	o->prev = NULL;
	o->next = loop->ops;
	if (loop->ops)
		loop->ops->prev = o;
	loop->ops = o;
	loop->nops++;
	op->rops++;
}

/* A record for a one-sided operation to @machine whose continuation is
 * @cont(@ctx), from the loop's free list or fresh, and @wr marked as its
 * (wr_id, SIGNALED); NULL: out of memory. */
static inline struct rdma_op *farm_msg_op_get(farm_loop *loop, uint32_t machine,
                                              farm_wr *wr, farm_op_fn cont,
                                              void *ctx)
{
	struct rdma_op *o = loop->ops_free;
	if (o)
		loop->ops_free = o->next;
	else if (!(o = malloc(sizeof(*o))))
		return NULL;
	o->cont = cont;
	o->ctx = ctx;
	o->machine = machine;
	o->status = 0;
	wr->wr_id = (uint64_t)(uintptr_t)o;
	wr->flags |= FARM_WR_SIGNALED;
	return o;
}

/* @o back on the loop's free list (not, or no longer, outstanding). */
static inline void farm_msg_op_put(farm_loop *loop, struct rdma_op *o)
{
	o->next = loop->ops_free;
	loop->ops_free = o;
}

static inline bool farm_msg_rdma_args_ok(const farm_loop *loop,
                                         uint32_t machine, int wake_thread,
                                         const farm_wr *wr, farm_op_fn cont)
{
	if (!loop || !wr || !cont || machine >= loop->msg->attr.max_machines ||
	    machine == loop->msg->me)
		return false;
	if (wake_thread >= (int)loop->msg->attr.nthreads)
		return false;
	return wr->opcode == FARM_WR_READ || wr->opcode == FARM_WR_WRITE ||
	       wr->opcode == FARM_WR_CAS;
}

/* Machine @machine's out_peer with its endpoints checked (the messaging
 * one's, then the one-sided one's, each through the provider) once a
 * pass, not per operation: an endpoint that fails later in the pass
 * fails the operations posted on it, as it fails those posted just
 * before, and the next pass's first operation replaces it. A sticky
 * error (op->err) stops them at once. */
static inline int farm_msg_peer_rep(farm_loop *loop, uint32_t machine,
                                    struct out_peer **out)
{
	struct out_peer *op = *out = &loop->out[machine];
	if (FARM_LIKELY(op->rep_pass == loop->pass && !op->err))
		return 0;
	int rc = farm_msg_peer_ep(loop, machine, &op);
	if (!rc)
		rc = farm_msg_rep_ready(loop, machine, op);
	if (!rc)
		op->rep_pass = loop->pass;
	return rc;
}

#endif
