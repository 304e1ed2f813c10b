/*
 * Reaching memory through the address space (addrspace.h): resolving a
 * global address to local memory or the primary's descriptor, one-sided
 * reads and writes (local copies by loads and stores, remote ones by
 * RDMA after a lookup whose answer is cached), and function shipping to
 * the primary of an address.
 */
#include "addrspace/as_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/log.h"

int farm_as_resolve(farm_as *as, farm_gaddr a, uint64_t len, uint8_t **local,
                    farm_mr_desc *desc)
{
	if (!as || !local || !desc || !len ||
	    !farm_gaddr_valid(a, len, as->region_size))
		return -EINVAL;
	*local = NULL;
	int rc = -EAGAIN;
	pthread_rwlock_rdlock(&as->lock);
	struct entry *e = farm_as_find(as, farm_gaddr_region(a));
	if (e && e->kind == E_PRIMARY) {
		*local = (uint8_t *)farm_region_base(e->local) +
		         farm_gaddr_offset(a);
		rc = 0;
	} else if (e && (e->kind == E_REMOTE || e->kind == E_BACKUP) &&
	           e->desc.len) {
		*desc = e->desc;
		rc = 0;
	}
	pthread_rwlock_unlock(&as->lock);
	if (!rc && !*local) {
		atomic_fetch_add_explicit(&as->st.reads_remote, 1,
		                          memory_order_relaxed);
		atomic_fetch_add_explicit(&as->st.lookups_cached, 1,
		                          memory_order_relaxed);
	}
	return rc;
}

/* A miss of the cache: the locked lookup, remembered under the generation
 * @g read before it (a writer since then makes the entry stale, never
 * wrong) in the first way of the region's set, the entry there moving to
 * the second. Apart from the hit path, which then needs no stack frame. */
static __attribute__((noinline)) int
resolve_miss(farm_as *as, struct farm_as_rcache *c, farm_gaddr a, uint64_t len,
             uint8_t **local, farm_mr_desc *desc, uint64_t g)
{
	int rc = farm_as_resolve(as, a, len, local, desc);
	if (rc)
		return rc;
	uint32_t id = farm_gaddr_region(a);
	struct farm_as_rcache_ent *e = &c->e[id % (FARM_AS_RCACHE / 2) * 2];
	e[1] = e[0];
	e[0] = (struct farm_as_rcache_ent){.id = id, .gen = g};
	if (*local)
		e[0].base = *local - farm_gaddr_offset(a);
	else
		e[0].d = *desc;
	c->misses++;
	return 0;
}

int farm_as_resolve_slow(farm_as *as, struct farm_as_rcache *c, farm_gaddr a,
                         uint64_t len, uint8_t **local, farm_mr_desc *desc)
{
	if (!as || !c || !local || !desc || !len ||
	    !farm_gaddr_valid(a, len, as->region_size))
		return -EINVAL;
	if (c->as != as) {
		/* Its entries are another address space's: tagged with that
		 * one's generations, which may equal this one's. */
		memset(c->e, 0, sizeof(c->e));
		c->gen = &as->gen;
		c->region_size = as->region_size;
		c->as = as;
	}
	/* Acquire, as the hit path's (addrspace.h): pairs with the release
	 * bump of gen in as_wrlock (as_int.h). */
	uint64_t g = atomic_load_explicit(&as->gen, memory_order_acquire);
	const struct farm_as_rcache_ent *e =
	        farm_as_rcache_hit(c, g, farm_gaddr_region(a));
	if (!e)
		return resolve_miss(as, c, a, len, local, desc, g);
	if (e->base) {
		*local = e->base + farm_gaddr_offset(a);
	} else {
		*local = NULL;
		*desc = e->d;
	}
	return 0;
}

/* ---- access -------------------------------------------------------------- */

struct access_op {
	farm_as *as;
	bool write;
	farm_gaddr a;
	void *buf;
	farm_mr *lmr;
	uint32_t len;
	farm_op_fn cont;
	void *ctx;
};

static int post_rdma(farm_loop *loop, const farm_mr_desc *d, bool write,
                     farm_gaddr a, void *buf, farm_mr *lmr, uint32_t len,
                     farm_op_fn cont, void *ctx)
{
	farm_wr wr =
	        write ? farm_wr_write(0, buf, lmr, len, d, farm_gaddr_offset(a))
	              : farm_wr_read(0, buf, lmr, len, d, farm_gaddr_offset(a));
	return farm_loop_rdma(loop, d->machine, &wr, cont, ctx);
}

static void lookup_done(farm_loop *loop, void *ctx, int status,
                        const void *reply, uint32_t len)
{
	struct access_op *op = ctx;
	farm_as *as = op->as;
	struct desc_reply r;
	uint32_t region = farm_gaddr_region(op->a);
	if (!status) {
		if (len != sizeof(r)) {
			status = FARM_ECORRUPT;
		} else {
			memcpy(&r, reply, sizeof(r));
			/* The descriptor must name this region and cover it. */
			if (r.region != region || r.len < as->region_size)
				status = FARM_ECORRUPT;
		}
	}
	if (!status) {
		farm_mr_desc d = {.key = r.key,
		                  .addr = r.addr,
		                  .len = r.len,
		                  .machine = r.machine,
		                  .access = r.access};
		struct entry e = {.id = region, .kind = E_REMOTE, .desc = d};
		as_wrlock(as);
		struct entry *old = farm_as_find(as, region);
		if (old && old->kind == E_BACKUP)
			old->desc = d;
		else if (!old || old->kind == E_REMOTE)
			(void)farm_as_put(
			        as, &e); /* a failed cache insert is harmless */
		pthread_rwlock_unlock(&as->lock);
		status = post_rdma(loop, &d, op->write, op->a, op->buf, op->lmr,
		                   op->len, op->cont, op->ctx);
		if (!status) {
			free(op);
			return;
		}
	}
	op->cont(loop, op->ctx, status);
	free(op);
}

static int as_access(farm_as *as, farm_loop *loop, bool write, farm_gaddr a,
                     void *buf, farm_mr *lmr, uint32_t len, farm_op_fn cont,
                     void *ctx)
{
	if (!as || !loop || !buf || !cont || len == 0 ||
	    !farm_gaddr_valid(a, len, as->region_size))
		return -EINVAL;
	uint32_t region = farm_gaddr_region(a);
	pthread_rwlock_rdlock(&as->lock);
	struct entry *e = farm_as_find(as, region);
	int kind = e ? e->kind : E_FREE;
	farm_mr_desc d = e ? e->desc : (farm_mr_desc){0};
	uint8_t *base = kind == E_PRIMARY ? farm_region_base(e->local) : NULL;
	uint32_t primary =
	        as->ring ? farm_ring_primary(as->ring, region) : as->me;
	bool have_view = as->ring != NULL;
	pthread_rwlock_unlock(&as->lock);
	if (base) {
		/* Ours: loads and stores. The region stays while the machine
		 * runs (regions are not freed in this version). */
		uint8_t *p = base + farm_gaddr_offset(a);
		if (write)
			memcpy(p, buf, len);
		else
			memcpy(buf, p, len);
		atomic_fetch_add(
		        write ? &as->st.writes_local : &as->st.reads_local, 1);
		return farm_loop_post(loop, cont, ctx);
	}
	atomic_fetch_add(write ? &as->st.writes_remote : &as->st.reads_remote,
	                 1);
	if ((kind == E_REMOTE || kind == E_BACKUP) && d.len) {
		atomic_fetch_add(&as->st.lookups_cached, 1);
		return post_rdma(loop, &d, write, a, buf, lmr, len, cont, ctx);
	}
	if (have_view && primary == as->me && kind == E_BACKUP)
		return -EAGAIN; /* recovery is promoting our copy */
	if (!have_view || primary == as->me)
		return -ENOENT;
	struct access_op *op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct access_op){.as = as,
	                         .write = write,
	                         .a = a,
	                         .buf = buf,
	                         .lmr = lmr,
	                         .len = len,
	                         .cont = cont,
	                         .ctx = ctx};
	struct lookup_req q = {.region = region};
	atomic_fetch_add(&as->st.lookups_sent, 1);
	int rc = farm_msg_call(loop, primary, 0, FARM_MSGT_AS_LOOKUP, &q,
	                       sizeof(q), as->rpc_timeout_ns, lookup_done, op);
	if (rc)
		free(op);
	return rc;
}

int farm_as_read(farm_as *as, farm_loop *loop, farm_gaddr a, void *buf,
                 farm_mr *lmr, uint32_t len, farm_op_fn cont, void *ctx)
{
	return as_access(as, loop, false, a, buf, lmr, len, cont, ctx);
}

int farm_as_write(farm_as *as, farm_loop *loop, farm_gaddr a, const void *buf,
                  farm_mr *lmr, uint32_t len, farm_op_fn cont, void *ctx)
{
	return as_access(as, loop, true, a, (void *)buf, lmr, len, cont, ctx);
}

/* ---- function shipping --------------------------------------------------- */

unsigned farm_as_thread_of(const farm_as *as, farm_gaddr a)
{
	unsigned t = farm_msg_nthreads(as->msg);
	return t ? farm_ring_pos(farm_gaddr_region(a)) % t : 0;
}

static int owner_of(farm_as *as, farm_gaddr a, uint32_t *machine)
{
	if (!farm_gaddr_valid(a, 0, as->region_size))
		return -EINVAL;
	return farm_as_primary_of(as, farm_gaddr_region(a), machine);
}

int farm_as_ship(farm_as *as, farm_loop *loop, farm_gaddr a, uint16_t type,
                 const void *payload, uint32_t len)
{
	if (!as || !loop)
		return -EINVAL;
	uint32_t m;
	int rc = owner_of(as, a, &m);
	if (rc)
		return rc;
	return farm_msg_send(loop, m, farm_as_thread_of(as, a), type, payload,
	                     len);
}

int farm_as_call(farm_as *as, farm_loop *loop, farm_gaddr a, uint16_t type,
                 const void *req, uint32_t len, uint64_t timeout_ns,
                 farm_rpc_fn cont, void *ctx)
{
	if (!as || !loop)
		return -EINVAL;
	uint32_t m;
	int rc = owner_of(as, a, &m);
	if (rc)
		return rc;
	return farm_msg_call(loop, m, farm_as_thread_of(as, a), type, req, len,
	                     timeout_ns, cont, ctx);
}
