/*
 * Messaging: the ring channels. Sending: frames staged in a local mirror of
 * the remote ring and written with one WRITE per burst, a local queue when
 * the ring is full, doorbells for parked receivers. Receiving: polling
 * rings, checking every frame before delivering any message, handing
 * consumed space back in bulk. Also the same-machine inbox (a wait-free
 * queue per loop). See README.md, "Invariants".
 */
#define _LGPL_SOURCE 1 /* liburcu's wait-free queue, inlined */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "msg/msg_int.h"
#include "util/log.h"
#include "util/tsan.h"

/* Refresh the list of machines whose rings we poll. */
void farm_msg_refresh_peers(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	/* Pairs with the increment in farm_msg_add_peer, made after the
	 * peer's release of ready: a new generation shows its peers ready. */
	uint64_t g = atomic_load_explicit(&msg->peer_gen, memory_order_acquire);
	if (g == loop->peer_gen)
		return;
	loop->peer_gen = g;
	loop->npeers = 0;
	/* Each pairs with the release of ready in farm_msg_add_peer. */
	for (uint32_t m = 0; m < msg->attr.max_machines; m++)
		if (atomic_load_explicit(&msg->peers[m].ready,
		                         memory_order_acquire))
			loop->peer_list[loop->npeers++] = m;
}

/* Connect *@ep to machine @m for @op. A refusal says no live machine is
 * there: FARM_EPEERDEAD. No answer in time (udp on a lossy network or a
 * starved host) is not death, which is for the peer's lease to decide:
 * -ETIMEDOUT, and no new try for CONNECT_RETRY_NS, since each try holds
 * this loop for up to the fabric's connect bound. */
int farm_msg_connect(farm_loop *loop, uint32_t m, struct out_peer *op,
                     farm_ep **ep)
{
	if (op->retry_ns && farm_now_ns() < op->retry_ns)
		return -ETIMEDOUT;
	farm_ep_attr ea = {.sq_depth = EP_DEPTH};
	int rc = farm_ep_connect(loop->msg->fab, loop->cq, m,
	                         loop->msg->peers[m].addr, &ea, ep);
	if (!rc) {
		op->retry_ns = 0;
		return 0;
	}
	*ep = NULL;
	farm_warn("msg: loop %u cannot connect to machine %" PRIu32 ": %s",
	          loop->idx, m, farm_strerror(rc));
	if (rc == -ETIMEDOUT)
		op->retry_ns = farm_now_ns() + CONNECT_RETRY_NS;
	return rc == -ECONNREFUSED ? FARM_EPEERDEAD : rc;
}

/* The endpoint to machine @m, connected on first use. */
int farm_msg_peer_ep(farm_loop *loop, uint32_t m, struct out_peer **out)
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
	/* Pairs with the release of ready in farm_msg_add_peer: the peer's
	 * address and descriptor, written before it, are read below. */
	if (!atomic_load_explicit(&p->ready, memory_order_acquire))
		return -ENOENT;
	int rc = farm_msg_connect(loop, m, op, &op->ep);
	/* Sticky until the peer is replaced: a dead machine, or one of
	 * another build (-EPROTO, logged once by the fabric). */
	if (rc == FARM_EPEERDEAD || rc == -EPROTO)
		op->err = rc;
	return rc;
}

/* The channel to (@m, @r) when it is made and its endpoint usable, as
 * every send after a channel's first finds it; NULL: chan_get decides
 * (makes it, or says why not). */
static inline struct out_chan *chan_ready(farm_loop *loop, uint32_t m,
                                          unsigned r)
{
	struct out_peer *op = &loop->out[m];
	if (FARM_UNLIKELY(!op->chans || op->err || !op->ep))
		return NULL;
	struct out_chan *c = op->chans[r];
	return c && FARM_LIKELY(farm_ep_usable(op->ep)) ? c : NULL;
}

static int chan_get(farm_loop *loop, uint32_t m, unsigned r,
                    struct out_chan **out)
{
	struct out_peer *op;
	int rc = farm_msg_peer_ep(loop, m, &op);
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
	/* The receiver backed only the ring's first page (msg.c,
	 * back_in_doors): the rest takes memory now, where a full file
	 * system is an error for this send, not a SIGBUS at a frame. */
	const farm_mr_desc *pd = &msg->peers[m].desc;
	rc = farm_ep_back(op->ep, pd, ring_at(l, r, msg->me, loop->idx), l->R);
	if (rc) {
		static atomic_int warned;
		if (!atomic_exchange_explicit(&warned, 1, memory_order_relaxed))
			farm_err("msg: cannot back our ring at machine %" PRIu32
			         ": %s (logged once)",
			         m, farm_strerror(rc));
		return rc;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	/* Zero and unbacked (farm_msg_chan_free drops its pages): it takes
	 * memory as frames are staged, up to R; on verbs registration pins
	 * it whole. */
	c->mirror = loop->mirror_area + ((size_t)m * l->T + r) * l->R;
	rc = farm_mr_reg(msg->fab, c->mirror, l->R, FARM_ACCESS_LOCAL,
	                 &c->mirror_mr);
	if (rc) {
		free(c);
		return rc;
	}
	c->m = m;
	c->r = r;
	c->ring_raddr = pd->addr + ring_at(l, r, msg->me, loop->idx);
	c->park_raddr = pd->addr + park_at(l, r);
	c->head_word =
	        (const _Atomic uint64_t *)(const void *)(msg->base +
	                                                 head_at(l, loop->idx,
	                                                         m, r));
	/* Pairs with the receiver's release fence in hand_back, before the
	 * WRITE of its head into this word. */
	c->head = atomic_load_explicit(c->head_word, memory_order_acquire);
	c->tail = c->posted = c->head;
	c->frame = UINT64_MAX;
	c->seq = 1;
	op->chans[r] = c;
	atomic_fetch_add_explicit(&loop->mirror_bytes, l->R,
	                          memory_order_relaxed);
	*out = c;
	return 0;
}

void farm_msg_chan_free(farm_loop *loop, struct out_chan *c)
{
	while (c->qhead) {
		struct pend *p = c->qhead;
		c->qhead = p->next;
		free(p);
	}
	farm_mr_dereg(c->mirror_mr);
	/* Its pages go: a channel made again here starts from zeroes. */
	(void)madvise(c->mirror, loop->msg->lay.R, MADV_DONTNEED);
	free(c);
}

/* ---- sending ------------------------------------------------------------- */

/* Whether @need more bytes fit up to abs position @end, given the head. */
static inline bool fits(struct out_chan *c, uint32_t R, uint64_t end)
{
	if (end - c->head <= R)
		return true;
	/* Pairs with the receiver's release fence in hand_back: the room up
	 * to the head it returned is zeroed before we write into it. */
	c->head = atomic_load_explicit(c->head_word, memory_order_acquire);
	return end - c->head <= R;
}

/* Close the open frame: configuration word, trailer, final header. */
static void frame_close(farm_msg *msg, struct out_chan *c, uint32_t R)
{
	if (c->frame == UINT64_MAX)
		return;
	uint32_t off = (uint32_t)(c->frame & (R - 1));
	uint32_t len = (uint32_t)(c->tail - c->frame) + 8;
	uint64_t h = wire_header(c->seq++, len);
	uint64_t cfg = atomic_load_explicit(&msg->cfg, memory_order_relaxed);
	memcpy(c->mirror + off, &h, 8);
	memcpy(c->mirror + off + 8, &cfg, 8);
	uint64_t t = h ^ WIRE_TRAILER_MAGIC;
	memcpy(c->mirror + off + len - 8, &t, 8);
	/* The next frame starts on the next line (wire.h). The head is
	 * always at a frame's start (a multiple of the line) and R a
	 * multiple of it, so this never passes head + R when the frame's
	 * end did not. */
	c->tail = c->frame + wire_frame_span(len);
	c->frame = UINT64_MAX;
}

/* Stage one message in the ring mirror: where its header went, or NULL
 * when there is no room (nothing staged). Inlined into each send: a call
 * here was a tenth of a reply's instructions. */
static inline __attribute__((always_inline)) uint8_t *
chan_append(farm_msg *msg, struct out_chan *c, const struct wire_msg *m,
            const void *payload)
{
	uint32_t R = msg->lay.R, stride = wire_msg_stride(m->len);
	if (c->frame != UINT64_MAX) {
		uint32_t flen = (uint32_t)(c->tail - c->frame);
		uint32_t off = (uint32_t)(c->frame & (R - 1));
		if (flen + stride + 8 <= msg->max_frame &&
		    off + flen + stride + 8 <= R &&
		    fits(c, R, c->tail + stride + 8))
			goto put;
		frame_close(msg, c, R);
	}
	/* A new frame: header, configuration word, the message, trailer;
	 * wrap if it would cross the end of the ring. */
	uint32_t need = WIRE_FRAME_OVERHEAD + stride;
	uint32_t off = (uint32_t)(c->tail & (R - 1));
	if (off + need > R) {
		uint64_t end = c->tail + (R - off) + need;
		if (!fits(c, R, end))
			return NULL;
		uint64_t w = wire_header(c->seq++, WIRE_WRAP_LEN);
		memcpy(c->mirror + off, &w, 8);
		c->tail += R - off;
	} else if (!fits(c, R, c->tail + need)) {
		return NULL;
	}
	c->frame = c->tail;
	c->tail += WIRE_FRAME_BODY;
put:;
	uint8_t *p = c->mirror + (uint32_t)(c->tail & (R - 1));
	memcpy(p, m, WIRE_MSG_HDR);
	/* NULL: the caller writes the payload in place (reply_begin). */
	if (m->len && payload)
		memcpy(p + WIRE_MSG_HDR, payload, m->len);
	uint32_t pad = wire_align8(m->len) - m->len;
	if (pad)
		memset(p + WIRE_MSG_HDR + m->len, 0, pad);
	c->tail += stride;
	return p;
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

/* A post refused: -EAGAIN (the send queue full) leaves the frames staged
 * for the next flush; anything else fails the endpoint. */
static void post_failed(struct out_peer *op, uint32_t m, int rc)
{
	if (rc == -EAGAIN)
		return;
	farm_warn("msg: post to machine %" PRIu32 ": %s", m, farm_strerror(rc));
	op->err = rc;
}

/* The usual flush of a channel: one frame staged (a reply, or a pass's
 * messages to one thread) and no doorbell to ring (receivers that never
 * park). One WRITE, without chan_post's list. False: not that case. */
static bool chan_post_one(farm_loop *loop, struct out_chan *c,
                          struct out_peer *op)
{
	farm_msg *msg = loop->msg;
	uint32_t off = (uint32_t)(c->posted & (msg->lay.R - 1));
	uint64_t h;
	memcpy(&h, c->mirror + off, 8);
	uint32_t len = (uint32_t)h, span = wire_frame_span(len);
	if (msg->notify || len == WIRE_WRAP_LEN || c->posted + span != c->tail)
		return false;
	farm_wr wr = {.opcode = FARM_WR_WRITE,
	              .len = len,
	              .local = c->mirror + off,
	              .lmr = c->mirror_mr,
	              .raddr = c->ring_raddr + off,
	              .rkey = msg->peers[c->m].desc.key};
	int rc = farm_ep_post(op->ep, &wr, NULL);
	if (FARM_UNLIKELY(rc)) {
		post_failed(op, c->m, rc);
		return true;
	}
	c->posted += span;
	farm_stat_add_owned(&loop->stats.v[S_FRAMES_SENT], 1);
	return true;
}

/* Post what is staged: one WRITE per frame or wrap marker, then (when
 * receivers may park) a doorbell; one post for the lot. */
static void chan_post(farm_loop *loop, struct out_chan *c)
{
	farm_msg *msg = loop->msg;
	uint32_t R = msg->lay.R;
	struct out_peer *op = &loop->out[c->m];
	if (op->err || !op->ep || c->posted == c->tail)
		return;
	if (chan_post_one(loop, c, op))
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
			adv[n - 1] = wire_frame_span(len);
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
		post_failed(op, c->m, rc);
	}
	/* Advance over the frames that were queued. */
	for (unsigned i = 0; i < done && w[i].opcode == FARM_WR_WRITE; i++) {
		c->posted += adv[i];
		farm_stat_add_owned(&loop->stats.v[S_FRAMES_SENT], 1);
	}
	if (msg->notify && done == n)
		farm_stat_add_owned(&loop->stats.v[S_WAKEUPS], 1);
}

void farm_loop_flush(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	/* An open in-place reply's bytes are not all written: they leave
	 * with the pass's flush, after farm_msg_reply_end. */
	if (FARM_UNLIKELY(loop->rb != RB_NONE))
		return;
	unsigned keep = 0;
	for (unsigned i = 0; i < loop->ndirty; i++) {
		struct out_chan *c = loop->dirty[i];
		chan_drain(msg, c);
		frame_close(msg, c, msg->lay.R);
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

struct inbox_item *farm_msg_item_new(uint32_t len)
{
	struct inbox_item *it = malloc(sizeof(*it) + len);
	if (it) {
		cds_wfcq_node_init(&it->node);
		it->cap = len;
	}
	return it;
}

/* Items a loop keeps for its own messages, at most, and the payload room
 * a fresh one gets (a shipped write and its answer fit): a message that
 * needs more takes a larger one, which is kept like any other. */
#define ITEM_KEEP 64u
#define ITEM_ROOM 256u

/* The item after @it on a loop's own list (its messages to itself, its
 * kept items: linked through node.next), or NULL. */
static inline struct inbox_item *item_after(const struct inbox_item *it)
{
	return it->node.next ? caa_container_of(it->node.next,
	                                        struct inbox_item, node)
	                     : NULL;
}

/* An item for a message of @len bytes the loop sends itself: from its
 * free list when the head has the room; NULL out of memory. */
static struct inbox_item *self_item(farm_loop *loop, uint32_t len)
{
	struct inbox_item *it = loop->free_items;
	if (it && it->cap >= len) {
		loop->free_items = item_after(it);
		loop->nfree_items--;
		return it;
	}
	return farm_msg_item_new(len > ITEM_ROOM ? len : ITEM_ROOM);
}

/* @it run: kept for the loop's own messages when it has their room and
 * the list is short, else freed. Any thread's item may be kept: only
 * this loop's thread takes them. */
static void item_done(farm_loop *loop, struct inbox_item *it)
{
	if (it->cap < ITEM_ROOM || loop->nfree_items >= ITEM_KEEP) {
		free(it);
		return;
	}
	it->node.next = loop->free_items ? &loop->free_items->node : NULL;
	loop->free_items = it;
	loop->nfree_items++;
}

void farm_msg_items_free(farm_loop *loop)
{
	while (loop->free_items) {
		struct inbox_item *it = loop->free_items;
		loop->free_items = item_after(it);
		free(it);
	}
	loop->nfree_items = 0;
}

/* Queue on loop @r of this machine and wake it if parked. */
void farm_msg_inbox_push(farm_msg *msg, unsigned r, struct inbox_item *it)
{
	FARM_TSAN_RELEASE(it); /* pairs with FARM_TSAN_ACQUIRE in
	                          farm_msg_poll_inbox (and msg.c's drain) */
	cds_wfcq_enqueue(&msg->inboxes[r].head, &msg->inboxes[r].tail,
	                 &it->node);
	/* Dekker with park() (msg_loop.c), pairs with its store of the park
	 * word and full fence: enqueue, full barrier, load its word. Either
	 * the loop sees the item before it sleeps or we see it parked. */
	atomic_thread_fence(memory_order_seq_cst);
	const uint32_t *w =
	        (const uint32_t *)(const void *)(msg->base +
	                                         park_at(&msg->lay, r));
	if (__atomic_load_n(w, __ATOMIC_SEQ_CST))
		farm_wake_word(w);
}

/*
 * A message the loop sends itself (a machine's request to a shard it
 * serves, and the answer): on the loop's own queue, which only its
 * thread touches. Through the inbox it took two atomic exchanges and a
 * full fence (the enqueue, the wake check, the take), half of YCSB-A's
 * shipped writes each way on two machines. Delivered after the inbox's
 * items of the same pass, so an item another thread queued before this
 * one was sent still goes first.
 */
static void self_push(farm_loop *loop, struct inbox_item *it)
{
	it->node.next = NULL;
	if (loop->self_tail)
		loop->self_tail->node.next = &it->node;
	else
		loop->self_head = it;
	loop->self_tail = it;
}

/* A message to a loop of this machine: through its inbox (its own
 * queue when it is the sender's). */
static int send_local(farm_loop *loop, unsigned thread,
                      const struct wire_msg *m, const void *payload)
{
	farm_msg *msg = loop->msg;
	if ((m->kind == WIRE_ONEWAY || m->kind == WIRE_REQUEST) &&
	    !wire_type_known(msg->types, m->type))
		return -EINVAL;
	bool own = thread == loop->idx;
	struct inbox_item *it =
	        own ? self_item(loop, m->len) : farm_msg_item_new(m->len);
	if (!it)
		return -ENOMEM;
	it->fn = NULL;
	it->ctx = NULL;
	it->m = *m;
	if (m->len)
		memcpy(it->payload, payload, m->len);
	if (own)
		self_push(loop, it);
	else
		farm_msg_inbox_push(msg, thread, it);
	farm_stat_add_owned(&loop->stats.v[S_SENT], 1);
	return 0;
}

/* Queue @m behind the messages waiting for room on @c. */
static int chan_queue(farm_loop *loop, struct out_chan *c,
                      const struct wire_msg *m, const void *payload)
{
	if (c->qlen >= loop->msg->attr.sendq_max) {
		farm_stat_add_owned(&loop->stats.v[S_NOBUFS], 1);
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
	farm_stat_add_owned(&loop->stats.v[S_QUEUED], 1);
	farm_stat_add_owned(&loop->stats.v[S_SENT], 1);
	return 0;
}

/* Whether machine @m was removed (farm_msg_peer_min_config UINT32_MAX):
 * it would not read what we send. */
static inline bool removed(const farm_msg *msg, uint32_t m)
{
	return m < msg->attr.max_machines &&
	       atomic_load_explicit(&msg->min_cfg[m], memory_order_relaxed) ==
	               UINT32_MAX;
}

int farm_msg_send_wire(farm_loop *loop, uint32_t machine, unsigned thread,
                       const struct wire_msg *m, const void *payload)
{
	farm_msg *msg = loop->msg;
	/* A reply is open in place (farm_msg_reply_begin): a message staged
	 * now would go out with its bytes unwritten, or before it. */
	if (FARM_UNLIKELY(loop->rb != RB_NONE))
		return -EBUSY;
	if (machine == msg->me)
		return send_local(loop, thread, m, payload);
	if (removed(msg, machine))
		return FARM_EPEERDEAD;
	struct out_chan *c = chan_ready(loop, machine, thread);
	if (FARM_UNLIKELY(!c)) {
		int rc = chan_get(loop, machine, thread, &c);
		if (rc)
			return rc;
	}
	if (FARM_LIKELY(!c->qhead) && chan_append(msg, c, m, payload)) {
		mark_dirty(loop, c);
		farm_stat_add_owned(&loop->stats.v[S_SENT], 1);
		return 0;
	}
	return chan_queue(loop, c, m, payload);
}

uint8_t *farm_msg_stage_in_place(farm_loop *loop, uint32_t machine,
                                 unsigned thread, const struct wire_msg *m)
{
	farm_msg *msg = loop->msg;
	if (machine == msg->me || removed(msg, machine))
		return NULL;
	struct out_chan *c = chan_ready(loop, machine, thread);
	if (!c || c->qhead)
		return NULL;
	uint8_t *p = chan_append(msg, c, m, NULL);
	if (!p)
		return NULL;
	mark_dirty(loop, c);
	farm_stat_add_owned(&loop->stats.v[S_SENT], 1);
	return p + WIRE_MSG_HDR;
}

int farm_msg_send(farm_loop *loop, uint32_t machine, unsigned thread,
                  uint16_t type, const void *payload, uint32_t len)
{
	if (!loop || (len && !payload))
		return -EINVAL;
	int rc = farm_msg_check_dest(loop, machine, thread, len);
	if (rc)
		return rc;
	struct wire_msg m = {.len = len,
	                     .type = type,
	                     .kind = WIRE_ONEWAY,
	                     .src_thread = (uint8_t)loop->idx};
	return farm_msg_send_wire(loop, machine, thread, &m, payload);
}

/* ---- receiving ----------------------------------------------------------- */

static void deliver(farm_loop *loop, uint32_t src, const struct wire_msg *m,
                    const uint8_t *payload)
{
	farm_msg *msg = loop->msg;
	farm_stat_add_owned(&loop->stats.v[S_RECEIVED], 1);
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
		if (FARM_UNLIKELY(loop->rb != RB_NONE))
			farm_msg_reply_forgotten(loop);
		return;
	}
	uint32_t i = (uint32_t)(m->call_id & 0xffffff);
	if (i >= msg->attr.max_calls || loop->calls[i].id != m->call_id) {
		farm_stat_add_owned(&loop->stats.v[S_STALE], 1);
		return;
	}
	if (m->kind == WIRE_REPLY) {
		farm_msg_call_done(loop, i, 0, payload, m->len);
	} else {
		int32_t st;
		memcpy(&st, payload, 4);
		farm_msg_call_done(loop, i, st, NULL, 0);
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
	/* The zeroes are visible before the sender can learn of the room:
	 * pairs with the sender's acquire of its head word (fits,
	 * msg_chan_get). */
	farm_store_fence();
	atomic_thread_fence(memory_order_release);
	struct out_peer *op;
	if (farm_msg_peer_ep(loop, m, &op))
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
	farm_stat_add_owned(&loop->stats.v[S_MALFORMED], 1);
	farm_err("msg: loop %u: channel from machine %" PRIu32 " thread %u "
	         "is broken (%s at ring offset %" PRIu64 "); it is no longer "
	         "read",
	         loop->idx, m, t, why, c->head & (loop->msg->lay.R - 1));
}

/* A frame from machine @m stamped with configuration @cfg, older than
 * the @min this machine accepts from it: counted; logged for the first
 * refused frame of each threshold. */
static void refuse_frame(farm_loop *loop, uint32_t m, uint32_t cfg,
                         uint32_t min)
{
	farm_stat_add_owned(&loop->stats.v[S_REFUSED_CONFIG], 1);
	if (loop->refused_logged[m] == min)
		return;
	loop->refused_logged[m] = min;
	if (min == UINT32_MAX)
		farm_warn(
		        "msg: loop %u: refusing messages from machine %" PRIu32
		        ": it was removed from the configuration",
		        loop->idx, m);
	else
		farm_warn(
		        "msg: loop %u: refusing messages from machine %" PRIu32
		        " stamped with configuration %" PRIu32
		        " (accepted from %" PRIu32 ")",
		        loop->idx, m, cfg, min);
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
		if (k == WIRE_EMPTY) {
			/* The next frame's second line too, while we wait:
			 * when it lands, its header and the rest arrive
			 * together (a frame of a small message spans two
			 * lines; read one after the other, the second costs
			 * another transfer between the cores). */
			__builtin_prefetch(
			        c->ring + (((off & ~63u) + 64) & (R - 1)), 0,
			        3);
			break;
		}
		if (k == WIRE_PARTIAL)
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
		const uint8_t *body = c->ring + off + WIRE_FRAME_BODY;
		uint32_t blen = len - WIRE_FRAME_OVERHEAD;
		int64_t fcfg = wire_frame_config(c->ring, off);
		if (fcfg < 0 || wire_check_body(body, blen, msg->attr.nthreads,
		                                msg->types) < 0) {
			break_chan(loop, m, t, c, "malformed message");
			return got;
		}
		farm_stat_add_owned(&loop->stats.v[S_FRAMES_RECV], 1);
		/* Pairs with the release in farm_msg_peer_min_config. */
		uint32_t min = atomic_load_explicit(&msg->min_cfg[m],
		                                    memory_order_acquire);
		if (FARM_UNLIKELY((uint64_t)fcfg < min)) {
			/* A removed machine (or an older incarnation of a
			 * returning one): consumed, not delivered. */
			refuse_frame(loop, m, (uint32_t)fcfg, min);
			c->head += wire_frame_span(len);
			if (c->head - c->returned >= R / 2)
				hand_back(loop, m, t, c);
			continue;
		}
		for (uint32_t o = 0; o < blen;) {
			struct wire_msg wm;
			memcpy(&wm, body + o, sizeof(wm));
			deliver(loop, m, &wm, body + o + WIRE_MSG_HDR);
			o += wire_msg_stride(wm.len);
			got++;
		}
		c->head += wire_frame_span(len);
		if (c->head - c->returned >= R / 2)
			hand_back(loop, m, t, c);
	}
	return got;
}

void farm_msg_forget_in(farm_loop *loop, uint32_t m)
{
	farm_msg *msg = loop->msg;
	uint32_t R = msg->lay.R;
	unsigned T = msg->attr.nthreads;
	for (unsigned t = 0; t < T; t++) {
		struct in_chan *c = &loop->in[m * T + t];
		/* What the old holder wrote was consumed (refused since it
		 * was removed); what is consumed and not handed back yet is
		 * zeroed now. The new holder writes from the ring's start
		 * with its first sequence number, which is where reading
		 * starts again: frames it wrote already stay. */
		for (uint64_t from = c->returned; from != c->head;) {
			uint32_t off = (uint32_t)(from & (R - 1));
			uint64_t n =
			        FARM_MIN(c->head - from, (uint64_t)(R - off));
			memset(c->ring + off, 0, (size_t)n);
			from += n;
		}
		c->head = c->returned = 0;
		c->seq = 1;
		c->broken = false;
		/* The words where @m's threads say how far they consumed our
		 * rings to them: the new holder consumed nothing yet. A new
		 * channel reads its start there (chan_get). */
		_Atomic uint64_t *w =
		        (_Atomic uint64_t *)(void *)(msg->base +
		                                     head_at(&msg->lay,
		                                             loop->idx, m, t));
		atomic_store_explicit(w, 0, memory_order_relaxed);
	}
	loop->refused_logged[m] = 0;
}

int farm_msg_poll_rings(farm_loop *loop)
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
			if (c->head - c->returned >= msg->lay.R / 8)
				loop->hand_back_due = true;
		}
	}
	return got;
}

/* Hand back the rings that consumed an eighth and are empty now. After
 * the pass's flush (farm_loop_poll): zeroing an eighth of a ring takes
 * microseconds, which the answers staged in the pass do not wait for. */
void farm_msg_hand_back_due(farm_loop *loop)
{
	farm_msg *msg = loop->msg;
	unsigned T = msg->attr.nthreads;
	uint32_t R = msg->lay.R;
	loop->hand_back_due = false;
	for (unsigned i = 0; i < loop->npeers; i++) {
		uint32_t m = loop->peer_list[i];
		for (unsigned t = 0; t < T; t++) {
			struct in_chan *c = &loop->in[m * T + t];
			if (!c->broken && c->head - c->returned >= R / 8 &&
			    wire_load(c->ring + (c->head & (R - 1))) == 0)
				hand_back(loop, m, t, c);
		}
	}
}

void farm_msg_hand_back_all(farm_loop *loop)
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

/* One item taken from an inbox: run, delivered (dropped when @status
 * says the loop is closing), freed. */
static void inbox_run(farm_loop *loop, struct inbox_item *it, int status)
{
	if (it->fn)
		it->fn(loop, it->ctx, status);
	else if (status == 0)
		deliver(loop, loop->msg->me, &it->m, it->payload);
	item_done(loop, it);
}

int farm_msg_poll_inbox(farm_loop *loop, int status)
{
	farm_msg *msg = loop->msg;
	struct inbox *ib = &msg->inboxes[loop->idx];
	int got = 0;
	/* Take what is there now, the inbox's first, then the loop's own
	 * (self_push); items queued while they run wait for the next pass
	 * (a work item that re-posts itself cannot starve us). */
	struct inbox_item *own = loop->self_head;
	loop->self_head = loop->self_tail = NULL;
	if (!cds_wfcq_empty(&ib->head, &ib->tail)) {
		struct cds_wfcq_head h;
		struct cds_wfcq_tail t;
		cds_wfcq_init(&h, &t);
		__cds_wfcq_splice_blocking(&h, &t, &ib->head, &ib->tail);
		struct cds_wfcq_node *n;
		while ((n = __cds_wfcq_dequeue_blocking(&h, &t))) {
			struct inbox_item *it =
			        caa_container_of(n, struct inbox_item, node);
			/* pairs with farm_msg_inbox_push's */
			FARM_TSAN_ACQUIRE(it);
			inbox_run(loop, it, status);
			got++;
		}
	}
	while (own) {
		struct inbox_item *it = own;
		own = item_after(it);
		inbox_run(loop, it, status);
		got++;
	}
	return got;
}
