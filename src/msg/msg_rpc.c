/*
 * Messaging: RPC. Calls take a slot (id = generation << 24 | slot), are
 * sent as messages and end with the reply, the peer's death, their
 * deadline or the loop's close; replies to a slot whose id changed are
 * dropped. See README.md, "Calls".
 */
#define _LGPL_SOURCE 1 /* liburcu's wait-free queue, inlined */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "msg/msg_int.h"
#include "util/fault.h"
#include "util/log.h"

/* ---- RPC ----------------------------------------------------------------- */

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
void farm_msg_call_done(farm_loop *loop, uint32_t i, int status,
                        const void *reply, uint32_t len)
{
	struct call *c = &loop->calls[i];
	farm_rpc_fn cont = c->cont;
	void *ctx = c->ctx;
	call_unlink(loop, i);
	cont(loop, ctx, status, reply, len);
	if (FARM_UNLIKELY(loop->rb != RB_NONE))
		farm_msg_reply_forgotten(loop);
}

int farm_msg_call(farm_loop *loop, uint32_t machine, unsigned thread,
                  uint16_t type, const void *req, uint32_t len,
                  uint64_t timeout_ns, farm_rpc_fn cont, void *ctx)
{
	if (!loop || !cont || (len && !req))
		return -EINVAL;
	int rc = farm_msg_check_dest(loop, machine, thread, len);
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
	rc = farm_msg_send_wire(loop, machine, thread, &m, req);
	if (rc)
		return rc;
	loop->free_call = c->next_free;
	c->id = id;
	c->cont = cont;
	c->ctx = ctx;
	c->machine = machine;
	uint64_t t = timeout_ns ? FARM_MIN(timeout_ns, CALL_UNSTAMPED - 1)
	                        : DEFAULT_TIMEOUT_NS;
	/* Its deadline is stamped at the loop's next scan of its calls
	 * (farm_msg_scan_calls): one clock read for every call since the
	 * last scan, not one a call (2% of YCSB-A's CPU in perf) or one a
	 * pass (0.85%). */
	c->deadline = CALL_UNSTAMPED | t;
	c->prev = NIL;
	c->next = loop->active;
	if (c->next != NIL)
		loop->calls[c->next].prev = i;
	loop->active = i;
	loop->nactive++;
	return 0;
}

/* A reply's header for @tok, after its checks: 0 or the error. */
static int reply_msg(farm_loop *loop, const struct farm_msg_token *tok,
                     uint8_t kind, uint32_t len, struct wire_msg *m)
{
	if (!loop || !tok || !tok->call_id)
		return -EINVAL;
	int rc = farm_msg_check_dest(loop, tok->machine, tok->thread, len);
	if (rc)
		return rc;
	*m = (struct wire_msg){.len = len,
	                       .type = tok->type,
	                       .kind = kind,
	                       .src_thread = (uint8_t)loop->idx,
	                       .call_id = tok->call_id};
	return 0;
}

static int reply_wire(farm_loop *loop, const struct farm_msg_token *tok,
                      uint8_t kind, const void *p, uint32_t len)
{
	struct wire_msg m;
	int rc = len && !p ? -EINVAL : reply_msg(loop, tok, kind, len, &m);
	return rc ? rc
	          : farm_msg_send_wire(loop, tok->machine, tok->thread, &m, p);
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

void *farm_msg_reply_begin(farm_loop *loop, const struct farm_msg_token *tok,
                           uint32_t len, int *err)
{
	struct wire_msg m;
	int rc = reply_msg(loop, tok, WIRE_REPLY, len, &m);
	if (!rc && loop->rb != RB_NONE)
		rc = -EBUSY;
	if (rc)
		goto fail;
	uint8_t *p =
	        farm_msg_stage_in_place(loop, tok->machine, tok->thread, &m);
	if (p) {
		loop->rb = RB_IN_PLACE;
		return p;
	}
	/* Not in place (this machine, a first message, a full ring): the
	 * payload is written here and sent as farm_msg_reply sends it. */
	if (!loop->rb_buf &&
	    !(loop->rb_buf = malloc(farm_msg_max_payload(loop->msg) + 1))) {
		rc = -ENOMEM;
		goto fail;
	}
	loop->rb = RB_BUFFERED;
	loop->rb_m = m;
	loop->rb_machine = tok->machine;
	loop->rb_thread = tok->thread;
	return loop->rb_buf;
fail:
	if (err)
		*err = rc;
	return NULL;
}

int farm_msg_reply_end(farm_loop *loop)
{
	if (!loop || loop->rb == RB_NONE)
		return -EINVAL;
	bool buffered = loop->rb == RB_BUFFERED;
	loop->rb = RB_NONE;
	return buffered ? farm_msg_send_wire(loop, loop->rb_machine,
	                                     loop->rb_thread, &loop->rb_m,
	                                     loop->rb_buf)
	                : 0;
}

void farm_msg_reply_forgotten(farm_loop *loop)
{
	static atomic_int warned;
	if (!atomic_exchange_explicit(&warned, 1, memory_order_relaxed))
		farm_warn("msg: loop %u: a handler or continuation returned "
		          "with a reply begun and not ended; ended for it "
		          "(logged once)",
		          loop->idx);
	int rc = farm_msg_reply_end(loop);
	if (rc)
		farm_warn("msg: loop %u: that reply: %s", loop->idx,
		          farm_strerror(rc));
}

/* Is machine @m removed (farm_msg_peer_min_config UINT32_MAX)? Its
 * frames are refused, so no reply of its can complete a call: a call to
 * it ends now, as a new one fails at once (farm_msg_send_wire), not at
 * its deadline. A machine stopped past its lease and removed lives on,
 * so no death notice ends the call; an address-space lookup sent to it
 * just before it stopped held its caller for the lookup's 10 s. */
static bool call_to_removed(const farm_msg *msg, uint32_t m)
{
	if (FARM_FAULT_SWITCH(FARM_FP_MSG_CALL_REMOVED_WAIT))
		return false; /* testing: to the deadline, as before */
	/* Relaxed: a scan that misses a store just made sees it at the
	 * next one. */
	return atomic_load_explicit(&msg->min_cfg[m], memory_order_relaxed) ==
	       UINT32_MAX;
}

/* Fail calls that timed out, whose peer died or was removed; start the
 * clock of those made since the last scan. */
int farm_msg_scan_calls(farm_loop *loop, uint64_t now)
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
			} else if (call_to_removed(loop->msg, c->machine)) {
				st = FARM_EPEERDEAD;
			}
		}
		if (!st) {
			if (c->deadline & CALL_UNSTAMPED)
				c->deadline =
				        now + (c->deadline & ~CALL_UNSTAMPED);
			else if (now >= c->deadline)
				st = -ETIMEDOUT;
		}
		if (st) {
			farm_stat_add_owned(
			        &loop->stats
			                 .v[st == -ETIMEDOUT ? S_TIMEOUTS
			                                     : S_PEER_DEATHS],
			        1);
			farm_msg_call_done(loop, i, st, NULL, 0);
			n++;
		}
		i = next;
	}
	return n;
}
