/*
 * Growth: the grower's share (addrspace.h, farm_as_grow_check). The
 * grower asks every other member which of the regions it is primary of
 * the grower holds a copy of, and checks that each such copy is complete
 * here.
 */
#include "addrspace/as_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/log.h"

/* ---- growth: the grower's share ------------------------------------------
 *
 * GROWQ {cfg, grower} asks a machine for the regions it is primary of in
 * configuration cfg that the grower holds a copy of (as their extra
 * backup, or as a replica where the others left them short). Reply: a
 * count, then
 * that many region ids; -EAGAIN while this machine has not applied cfg or
 * still promotes a region it is to be primary of (the list would be
 * short), -ESTALE when it has a later configuration. */
struct growq_req {
	uint64_t cfg;
	uint32_t grower, pad;
};

void farm_as_h_growq(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_as *as = arg;
	struct growq_req q;
	if (in->len != sizeof(q) || !in->token.call_id) {
		farm_as_bad_request(as, loop, in, "growth query");
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	if (q.grower != in->src_machine || q.pad) {
		farm_as_bad_request(as, loop, in, "growth query");
		return;
	}
	uint32_t max = (farm_msg_max_payload(farm_loop_msg(loop)) - 4) / 4;
	uint32_t *out = malloc(4ull * (max + 1));
	if (!out) {
		farm_as_reply_err(loop, &in->token, -ENOMEM);
		return;
	}
	uint32_t n = 0;
	int rc = 0;
	pthread_rwlock_rdlock(&as->lock);
	uint64_t cfg =
	        atomic_load_explicit(&as->config_id, memory_order_relaxed);
	if (cfg != q.cfg)
		rc = cfg < q.cfg ? -EAGAIN : -ESTALE;
	for (uint32_t i = 0; !rc && as->ring && i < as->cap; i++) {
		const struct entry *e = &as->tab[i];
		if (!e->id || e->kind == E_REMOTE ||
		    farm_ring_primary(as->ring, e->id) != as->me)
			continue;
		/* Every copy the grower is to hold: its extra ones, and the
		 * replicas it fills where the others left a region short. */
		uint32_t h[FARM_RING_MAX_REPLICAS];
		unsigned nh = farm_ring_holders(as->ring, e->id, h), k = 0;
		while (k < nh && h[k] != q.grower)
			k++;
		if (k == nh)
			continue;
		if (e->kind != E_PRIMARY)
			rc = -EAGAIN; /* being promoted: not listed yet */
		else if (n == max)
			rc = -E2BIG;
		else
			out[1 + n++] = e->id;
	}
	pthread_rwlock_unlock(&as->lock);
	out[0] = n;
	if (rc)
		farm_as_reply_err(loop, &in->token, rc);
	else
		farm_as_reply(loop, &in->token, out, 4 * (n + 1));
	free(out);
}

struct grow_op {
	farm_as *as;
	uint64_t cfg;
	farm_op_fn cont;
	void *ctx;
	unsigned pending;
	int status;
	uint64_t regions; /* listed and complete here */
};

static void grow_end(farm_loop *loop, struct grow_op *op)
{
	if (--op->pending)
		return;
	int rc = op->status;
	if (!rc && farm_as_config_id(op->as) != op->cfg)
		rc = -ESTALE;
	op->cont(loop, op->ctx, rc);
	free(op);
}

static void grow_reply(farm_loop *loop, void *ctx, int status,
                       const void *reply_buf, uint32_t len)
{
	struct grow_op *op = ctx;
	farm_as *as = op->as;
	uint32_t n = 0;
	if (!status && (len < 4 || len % 4))
		status = FARM_ECORRUPT;
	if (!status) {
		memcpy(&n, reply_buf, 4);
		if (4ull * (n + 1) != len)
			status = FARM_ECORRUPT;
	}
	for (uint32_t i = 0; !status && i < n; i++) {
		uint32_t id;
		memcpy(&id, (const uint8_t *)reply_buf + 4 * (i + 1), 4);
		pthread_rwlock_rdlock(&as->lock);
		const struct entry *e = farm_as_find(as, id);
		bool ok = e && e->kind == E_BACKUP && !e->filling;
		pthread_rwlock_unlock(&as->lock);
		if (!ok)
			status = -EAGAIN; /* not complete here yet */
		else
			op->regions++;
	}
	/* The first answer that is not "complete" wins, an error over
	 * -EAGAIN and -ESTALE (both: ask again later). */
	bool soft = status == -EAGAIN || status == -ESTALE;
	if (status && (!op->status || !soft))
		op->status = status;
	grow_end(loop, op);
}

int farm_as_grow_check(farm_as *as, farm_loop *loop, uint64_t cfg,
                       const uint32_t *members, unsigned n, farm_op_fn cont,
                       void *ctx)
{
	if (!as || !loop || !cont || !cfg || (n && !members))
		return -EINVAL;
	if (farm_as_config_id(as) != cfg)
		return -ESTALE;
	struct grow_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct grow_op){
	        .as = as, .cfg = cfg, .cont = cont, .ctx = ctx, .pending = 1};
	struct growq_req q = {.cfg = cfg, .grower = as->me};
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		if (members[i] == as->me)
			continue;
		op->pending++;
		rc = farm_msg_call(loop, members[i], 0, FARM_MSGT_AS_GROWQ, &q,
		                   sizeof(q), as->rpc_timeout_ns, grow_reply,
		                   op);
		if (rc)
			op->pending--;
	}
	if (rc) {
		op->status = rc;
		if (op->pending == 1) {
			free(op);
			return rc;
		}
	}
	grow_end(loop, op); /* the caller's own share of pending */
	return 0;
}
