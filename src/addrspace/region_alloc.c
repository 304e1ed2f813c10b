/*
 * Region allocation (farm_as_region_alloc): a free region id whose
 * primary in the ring is this machine, the local copy, the backup copies
 * made by its other replicas (FARM_MSGT_AS_CREATE), and the region
 * published once every replica answered; on any failure the copies made
 * are dropped (FARM_MSGT_AS_DROP). Apart from addrspace.c, which holds the
 * machine's view of the space and answers those messages: this file asks.
 */
#include "addrspace/as_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

struct alloc_op {
	farm_as *as;
	farm_as_region_fn cont;
	void *ctx;
	uint32_t region;
	farm_region *local;
	unsigned nrep, pending;
	int status;
	uint32_t reps[FARM_RING_MAX_REPLICAS];
	bool created[FARM_RING_MAX_REPLICAS];
};

static bool taken_cb(void *ctx, uint32_t id)
{
	return farm_as_find(ctx, id) != NULL; /* caller holds the lock */
}

static void alloc_finish(farm_loop *loop, struct alloc_op *op)
{
	farm_as *as = op->as;
	int rc = op->status;
	if (!rc) {
		struct entry e = {.id = op->region,
		                  .kind = E_PRIMARY,
		                  .local = op->local,
		                  .desc = farm_region_desc(op->local)};
		/* Recorded before it is published: no commit can reach a
		 * region a restart would not find. */
		tell_local(as, op->region, op->local, true);
		as_wrlock(as);
		/* A view may have made another machine its primary while the
		 * backups made their copies (growth): not ours to publish. */
		if (!as->ring ||
		    farm_ring_primary(as->ring, op->region) != as->me)
			rc = -EAGAIN;
		else
			rc = farm_as_put(as, &e);
		pthread_rwlock_unlock(&as->lock);
		if (rc)
			tell_local(as, op->region, op->local, false);
	}
	if (rc) {
		/* Roll back: drop the backup copies that were made. */
		for (unsigned i = 1; i < op->nrep; i++) {
			if (!op->created[i])
				continue;
			struct lookup_req q = {.region = op->region};
			int src =
			        farm_msg_send(loop, op->reps[i], 0,
			                      FARM_MSGT_AS_DROP, &q, sizeof(q));
			if (src)
				farm_warn("addrspace: cannot tell machine "
				          "%" PRIu32 " to drop region %" PRIu32
				          ": %s",
				          op->reps[i], op->region,
				          farm_strerror(src));
		}
		farm_region_destroy(op->local);
	}
	op->cont(loop, op->ctx, rc, rc ? 0 : op->region);
	free(op);
}

struct create_call {
	struct alloc_op *op;
	unsigned idx;
};

static void create_done(farm_loop *loop, void *ctx, int status,
                        const void *reply, uint32_t len)
{
	struct create_call *cc = ctx;
	struct alloc_op *op = cc->op;
	if (!status && len != sizeof(struct desc_reply))
		status = FARM_ECORRUPT;
	if (!status)
		op->created[cc->idx] = true;
	else if (!op->status)
		op->status = status;
	free(cc);
	(void)reply;
	if (--op->pending == 0)
		alloc_finish(loop, op);
}

int farm_as_region_alloc(farm_as *as, farm_loop *loop, uint32_t near,
                         farm_as_region_fn cont, void *ctx)
{
	if (!as || !loop || !cont)
		return -EINVAL;
	struct alloc_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->as = as;
	op->cont = cont;
	op->ctx = ctx;
	/* Choose the id and reserve it in the table (as our primary region,
	 * not yet published: lookups see E_PRIMARY only after the backups
	 * hold their copies). */
	as_wrlock(as);
	int rc = as->ring ? 0 : -ENOENT;
	if (!rc && near)
		rc = farm_ring_near_region(as->ring, as->me, near, taken_cb, as,
		                           0, &op->region);
	if (!rc && !near)
		rc = farm_ring_pick_region(as->ring, as->me, &as->seed,
		                           taken_cb, as, 0, &op->region);
	if (!rc) /* the extra backup too: born complete, as the others */
		op->nrep = farm_ring_holders(as->ring, op->region, op->reps);
	if (!rc) {
		struct entry e = {.id = op->region, .kind = E_REMOTE};
		rc = farm_as_put(as, &e); /* a placeholder no lookup answers */
	}
	pthread_rwlock_unlock(&as->lock);
	if (!rc)
		rc = farm_region_create(as->fab, as->region_size, &op->local);
	if (rc) {
		if (op->region) {
			as_wrlock(as);
			farm_as_del(as, op->region);
			pthread_rwlock_unlock(&as->lock);
		}
		free(op);
		return rc;
	}
	op->pending = 1; /* ours, released below */
	for (unsigned i = 1; i < op->nrep; i++) {
		struct create_call *cc = malloc(sizeof(*cc));
		struct create_req q = {.region = op->region,
		                       .primary = as->me,
		                       .size = as->region_size};
		if (!cc) {
			op->status = op->status ? op->status : -ENOMEM;
			continue;
		}
		*cc = (struct create_call){.op = op, .idx = i};
		rc = farm_msg_call(loop, op->reps[i], 0, FARM_MSGT_AS_CREATE,
		                   &q, sizeof(q), as->rpc_timeout_ns,
		                   create_done, cc);
		if (rc) {
			free(cc);
			op->status = op->status ? op->status : rc;
			continue;
		}
		op->pending++;
	}
	if (--op->pending == 0)
		alloc_finish(loop, op);
	return 0;
}
