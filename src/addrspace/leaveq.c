/*
 * Graceful leave: has the leaver's handoff completed? (addrspace.h,
 * farm_as_leave_check). The leaver asks every other member for the
 * regions it is primary of that have successors (ring.h) and for the
 * successors' copies it holds complete; it answers the same for itself,
 * and checks that every listed region has each successor's copy
 * complete. The primaries list the regions (not the successors) because
 * a successor that has not yet been sent COPY holds nothing to report.
 */
#include "addrspace/as_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/log.h"

/* ---- the question --------------------------------------------------------
 *
 * LEAVEQ {cfg, leaver} asks a machine, in configuration cfg, for
 *   P: the regions it is primary of that have successors, and
 *   C: the regions it holds as a successor, complete (not filling).
 * Reply: np, then np region ids, then nc, then nc region ids; -EAGAIN
 * while this machine has not applied cfg or still promotes a region with
 * successors that it is to be primary of (P would be short), -ESTALE when
 * it has a later configuration. */
struct leaveq_req {
	uint64_t cfg;
	uint32_t leaver, pad;
};

/* Does the ring list @me among @region's successors? */
static bool successor_here(const farm_ring *ring, uint32_t region, uint32_t me)
{
	uint32_t s[FARM_RING_MAX_REPLICAS];
	unsigned ns = farm_ring_successors(ring, region, s);
	for (unsigned k = 0; k < ns; k++)
		if (s[k] == me)
			return true;
	return false;
}

/* This machine's P and C (above) into @p and @c (room for @max each), in
 * configuration @cfg. Under as->lock (read). */
static int leave_lists(const farm_as *as, uint64_t cfg, uint32_t *p,
                       uint32_t *np, uint32_t *c, uint32_t *nc, uint32_t max)
{
	uint64_t now =
	        atomic_load_explicit(&as->config_id, memory_order_relaxed);
	if (now != cfg)
		return now < cfg ? -EAGAIN : -ESTALE;
	*np = *nc = 0;
	uint32_t s[FARM_RING_MAX_REPLICAS];
	for (uint32_t i = 0; as->ring && i < as->cap; i++) {
		const struct entry *e = &as->tab[i];
		if (!e->id || e->kind == E_REMOTE)
			continue;
		bool prim = farm_ring_primary(as->ring, e->id) == as->me;
		if (prim && farm_ring_successors(as->ring, e->id, s)) {
			if (e->kind != E_PRIMARY)
				return -EAGAIN; /* being promoted */
			if (*np == max)
				return -E2BIG;
			p[(*np)++] = e->id;
		}
		if (e->kind == E_BACKUP && !e->filling &&
		    successor_here(as->ring, e->id, as->me)) {
			if (*nc == max)
				return -E2BIG;
			c[(*nc)++] = e->id;
		}
	}
	return 0;
}

void farm_as_h_leaveq(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_as *as = arg;
	struct leaveq_req q;
	if (in->len != sizeof(q) || !in->token.call_id) {
		farm_as_bad_request(as, loop, in, "leave query");
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	if (q.leaver != in->src_machine || q.pad) {
		farm_as_bad_request(as, loop, in, "leave query");
		return;
	}
	/* Both lists in one reply: each gets half the room. */
	uint32_t max = (farm_msg_max_payload(farm_loop_msg(loop)) - 8) / 8;
	uint32_t *out = malloc(8ull * max + 8);
	if (!out) {
		farm_as_reply_err(loop, &in->token, -ENOMEM);
		return;
	}
	uint32_t np = 0, nc = 0;
	uint32_t *c = out + 2 + max;
	pthread_rwlock_rdlock(&as->lock);
	int rc = leave_lists(as, q.cfg, out + 1, &np, c, &nc, max);
	pthread_rwlock_unlock(&as->lock);
	if (rc) {
		farm_as_reply_err(loop, &in->token, rc);
	} else {
		out[0] = np;
		out[1 + np] = nc;
		memmove(&out[2 + np], c, 4ull * nc);
		farm_as_reply(loop, &in->token, out, 4 * (np + nc + 2));
	}
	free(out);
}

/* ---- the leaver's side --------------------------------------------------- */

struct held_pair {
	uint32_t machine, region;
};

struct leave_op {
	farm_as *as;
	uint64_t cfg;
	farm_op_fn cont;
	void *ctx;
	unsigned pending;
	int status;
	uint32_t *regions; /* every P listed */
	unsigned nregions, capr;
	struct held_pair *held; /* every C listed, with its machine */
	unsigned nheld, caph;
};

static int grow_array(void **a, unsigned *cap, unsigned want, size_t elem)
{
	if (want <= *cap)
		return 0;
	unsigned ncap = *cap ? *cap : 64;
	while (ncap < want)
		ncap *= 2;
	void *b = realloc(*a, ncap * elem);
	if (!b)
		return -ENOMEM;
	*a = b;
	*cap = ncap;
	return 0;
}

/* @machine's lists @p (@np) and @c (@nc) into @op. */
static int leave_add(struct leave_op *op, uint32_t machine, const uint32_t *p,
                     uint32_t np, const uint32_t *c, uint32_t nc)
{
	if (grow_array((void **)&op->regions, &op->capr, op->nregions + np,
	               sizeof(op->regions[0])) ||
	    grow_array((void **)&op->held, &op->caph, op->nheld + nc,
	               sizeof(op->held[0])))
		return -ENOMEM;
	/* No P and none before: op->regions is still NULL, and memcpy
	 * takes no NULL even for 0 bytes. */
	if (np)
		memcpy(&op->regions[op->nregions], p, 4ull * np);
	op->nregions += np;
	for (uint32_t i = 0; i < nc; i++)
		op->held[op->nheld++] =
		        (struct held_pair){.machine = machine, .region = c[i]};
	return 0;
}

static bool held_by(const struct leave_op *op, uint32_t machine,
                    uint32_t region)
{
	for (unsigned i = 0; i < op->nheld; i++)
		if (op->held[i].machine == machine &&
		    op->held[i].region == region)
			return true;
	return false;
}

/* Every listed region has each of its successors' copies complete. */
static int leave_complete(struct leave_op *op)
{
	farm_as *as = op->as;
	int rc = 0;
	uint32_t s[FARM_RING_MAX_REPLICAS];
	pthread_rwlock_rdlock(&as->lock);
	if (atomic_load_explicit(&as->config_id, memory_order_relaxed) !=
	    op->cfg)
		rc = -ESTALE;
	for (unsigned i = 0; !rc && as->ring && i < op->nregions; i++) {
		unsigned ns = farm_ring_successors(as->ring, op->regions[i], s);
		for (unsigned k = 0; k < ns && !rc; k++)
			if (!held_by(op, s[k], op->regions[i]))
				rc = -EAGAIN;
	}
	pthread_rwlock_unlock(&as->lock);
	return rc;
}

static void leave_free(struct leave_op *op)
{
	free(op->regions);
	free(op->held);
	free(op);
}

static void leave_end(farm_loop *loop, struct leave_op *op)
{
	if (--op->pending)
		return;
	int rc = op->status;
	if (!rc)
		rc = leave_complete(op);
	op->cont(loop, op->ctx, rc);
	leave_free(op);
}

/* The reply @buf (@len bytes): np, P, nc, C. 0 or FARM_ECORRUPT. */
static int leave_parse(struct leave_op *op, uint32_t machine,
                       const uint8_t *buf, uint32_t len)
{
	uint32_t np, nc;
	if (len < 8 || len % 4)
		return FARM_ECORRUPT;
	memcpy(&np, buf, 4);
	if (np > len / 4 - 2)
		return FARM_ECORRUPT;
	memcpy(&nc, buf + 4 + 4ull * np, 4);
	if (4ull * (np + nc + 2) != len)
		return FARM_ECORRUPT;
	uint32_t *w = malloc(4ull * (np + nc) + 4);
	if (!w)
		return -ENOMEM;
	memcpy(w, buf + 4, 4ull * np);
	memcpy(w + np, buf + 8 + 4ull * np, 4ull * nc);
	int rc = leave_add(op, machine, w, np, w + np, nc);
	free(w);
	return rc;
}

struct leave_ask {
	struct leave_op *op;
	uint32_t machine;
};

static void leave_reply(farm_loop *loop, void *ctx, int status,
                        const void *reply_buf, uint32_t len)
{
	struct leave_ask *a = ctx;
	struct leave_op *op = a->op;
	if (!status)
		status = leave_parse(op, a->machine, reply_buf, len);
	free(a);
	/* The first answer that is not "complete" wins, an error over
	 * -EAGAIN and -ESTALE (both: ask again later). */
	bool soft = status == -EAGAIN || status == -ESTALE;
	if (status && (!op->status || !soft))
		op->status = status;
	leave_end(loop, op);
}

/* This machine's own lists into @op. */
static int leave_own(struct leave_op *op)
{
	farm_as *as = op->as;
	uint32_t max = as->cap + 1;
	uint32_t *w = malloc(8ull * max);
	if (!w)
		return -ENOMEM;
	uint32_t np = 0, nc = 0;
	pthread_rwlock_rdlock(&as->lock);
	int rc = leave_lists(as, op->cfg, w, &np, w + max, &nc, max);
	pthread_rwlock_unlock(&as->lock);
	if (!rc)
		rc = leave_add(op, as->me, w, np, w + max, nc);
	free(w);
	return rc;
}

static int leave_ask_one(struct leave_op *op, farm_loop *loop, uint32_t to)
{
	struct leave_ask *a = malloc(sizeof(*a));
	if (!a)
		return -ENOMEM;
	*a = (struct leave_ask){.op = op, .machine = to};
	struct leaveq_req q = {.cfg = op->cfg, .leaver = op->as->me};
	int rc = farm_msg_call(loop, to, 0, FARM_MSGT_AS_LEAVEQ, &q, sizeof(q),
	                       op->as->rpc_timeout_ns, leave_reply, a);
	if (rc)
		free(a);
	return rc;
}

int farm_as_leave_check(farm_as *as, farm_loop *loop, uint64_t cfg,
                        const uint32_t *members, unsigned n, farm_op_fn cont,
                        void *ctx)
{
	if (!as || !loop || !cont || !cfg || (n && !members))
		return -EINVAL;
	if (farm_as_config_id(as) != cfg)
		return -ESTALE;
	struct leave_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct leave_op){
	        .as = as, .cfg = cfg, .cont = cont, .ctx = ctx, .pending = 1};
	int rc = leave_own(op);
	if (rc) {
		leave_free(op);
		return rc;
	}
	for (unsigned i = 0; i < n && !rc; i++) {
		if (members[i] == as->me)
			continue;
		op->pending++;
		rc = leave_ask_one(op, loop, members[i]);
		if (rc)
			op->pending--;
	}
	if (rc) {
		op->status = rc;
		if (op->pending == 1) {
			leave_free(op);
			return rc;
		}
	}
	leave_end(loop, op); /* the caller's own share of pending */
	return 0;
}
