/*
 * Messaging: a list of READs to one machine posted at once
 * (farm_loop_rdma_reads), the endpoints checked and the provider called
 * once for the list. See README.md.
 */
#include <errno.h>
#include <stdlib.h>

#include "msg/msg_int.h"

/* @n rdma_ops for farm_loop_rdma_reads in @os, each for its READ in @wrs,
 * the READs chained into one list; -ENOMEM: none taken. */
static int reads_prepare(farm_loop *loop, uint32_t machine, farm_wr *wrs,
                         unsigned n, farm_op_fn cont, void *const *ctxs,
                         struct rdma_op **os)
{
	for (unsigned i = 0; i < n; i++) {
		os[i] = farm_msg_op_get(loop, machine, &wrs[i], cont, ctxs[i]);
		if (!os[i]) {
			while (i--)
				farm_msg_op_put(loop, os[i]);
			return -ENOMEM;
		}
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	return 0;
}

int farm_loop_rdma_reads(farm_loop *loop, uint32_t machine, farm_wr *wrs,
                         unsigned n, farm_op_fn cont, void *const *ctxs,
                         unsigned *posted)
{
	if (!posted)
		return -EINVAL;
	*posted = 0;
	if (!loop || (n && (!wrs || !ctxs)))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!farm_msg_rdma_args_ok(loop, machine, -1, &wrs[i], cont) ||
		    wrs[i].opcode != FARM_WR_READ ||
		    (wrs[i].flags & FARM_WR_INLINE))
			return -EINVAL;
	if (!n)
		return 0;
	if (loop->msg->batch_reads) { /* queued one by one anyway (udp) */
		for (unsigned i = 0; i < n; i++) {
			int rc = farm_loop_rdma(loop, machine, &wrs[i], cont,
			                        ctxs[i]);
			if (rc)
				return rc;
			++*posted;
		}
		return 0;
	}
	struct out_peer *op;
	int rc = farm_msg_peer_rep(loop, machine, &op);
	if (rc)
		return rc;
	struct rdma_op *os[FARM_LOOP_READS_MAX];
	unsigned done = 0;
	/* In lists of at most FARM_LOOP_READS_MAX (the ops' array here). */
	while (done < n) {
		unsigned k = FARM_MIN(n - done, FARM_LOOP_READS_MAX), got = k;
		farm_wr *w = wrs + done;
		if ((rc = reads_prepare(loop, machine, w, k, cont, ctxs + done,
		                        os)))
			return rc;
		farm_wr *bad = NULL;
		rc = farm_ep_post(op->rep, w, &bad);
		if (rc)
			got = bad ? (unsigned)(bad - w) : 0;
		for (unsigned i = 0; i < k; i++) {
			w[i].next = NULL;
			if (i < got) {
				farm_msg_ops_link(loop, op, os[i]);
			} else {
				farm_msg_op_put(loop, os[i]);
			}
		}
		done += got;
		*posted = done;
		if (rc)
			return rc;
	}
	return 0;
}
