/*
 * verbs provider: the listener thread. It serves the fabric's rdma_cm event
 * channel: accepts peers (a passive RC QP each, private data checked),
 * sees a peer disconnect (its passive side goes; our endpoint to it is
 * marked peer_gone, which fails its requests with FARM_EPEERDEAD) and the
 * device's removal. See verbs.c's head comment.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/verbs_int.h"
#include "util/log.h"

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
	if (!farm_vb_pdata_decode(cp->private_data, cp->private_data_len,
	                          VB_PD_REQ, &req)) {
		farm_warn("verbs: rejecting a connection that is not from a "
		          "libfarm machine of this version");
		reason = VB_REJ_PROTOCOL;
		goto reject;
	}
	if (req.wire != fab->base.wire) {
		farm_info("verbs: machine %u speaks wire version %u, this "
		          "one %u: rejected",
		          req.from, req.wire, fab->base.wire);
		reason = VB_REJ_WIRE;
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
	farm_vb_pdata_encode(&acc, VB_PD_ACC, me, req.from, 0, fab->base.wire);
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
	farm_vb_pdata_encode(&rej, VB_PD_REJ, me, req.from, reason,
	                     fab->base.wire);
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
		/* Release: pairs with the acquire loads of peer_gone in
		 * verbs_data.c and farm_vb_ep_usable. */
		if (ep)
			atomic_store_explicit(&ep->peer_gone, 1,
			                      memory_order_release);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		farm_err("verbs: device %s was removed", fab->dev_name);
		atomic_store(&fab->device_lost, 1);
		if (conn)
			drop_conn = true;
		/* Release: pairs with the acquire loads of peer_gone in
		 * verbs_data.c and farm_vb_ep_usable. */
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

void *farm_vb_listener_main(void *arg)
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

void farm_vb_close_conns(struct vb_fabric *fab)
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
