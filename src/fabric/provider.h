/*
 * Internal provider interface of the fabric (not installed).
 *
 * A provider is a const ops table (as rdma-core's verbs_context_ops): the
 * generic layer (fabric.c) checks arguments that do not depend on the
 * provider, then dispatches. Every object a provider creates starts with the
 * generic struct below as its first member, so a provider casts between its
 * own type and the public handle.
 */
#ifndef FARM_FABRIC_PROVIDER_H
#define FARM_FABRIC_PROVIDER_H

#include <errno.h>
#include <stdatomic.h>

#include <farm/fabric.h>

struct farm_fabric_ops;

struct farm_fabric {
	const struct farm_fabric_ops *ops;
	uint32_t machine_id;
	/* The wire version it speaks (farm_fabric_wire_own, at open): a peer
	 * of another is refused at connect, -EPROTO, whether membership
	 * checked it (ZooKeeper does) or not (static peer lines). */
	uint32_t wire;
};

/* The wire version a fabric opened now speaks: util/wire.h's, or in a
 * test build with FARM_FP_FABRIC_WIRE_NEXT hooked, the next one (a
 * machine of another build). */
uint32_t farm_fabric_wire_own(void);

/* A peer refused for its wire version: logged, naming both. -EPROTO. */
int farm_fabric_wire_refused(const farm_fabric *fab, uint32_t peer,
                             const char *where, uint32_t theirs);

/* The faults injected on an endpoint or on every endpoint to a peer
 * (farm_ep_fault, farm_fabric_fault_peer), read by the provider's data
 * path; fabric.c has checked @f. */
struct farm_faults {
	_Atomic uint64_t delay_ns;
	atomic_int fail, pause;
};

void farm_faults_apply(struct farm_faults *x, enum farm_fault f, uint64_t arg);

struct farm_mem {
	farm_fabric *fab;
	void *addr;
	size_t size;
	bool huge;
	bool pmem;
	/* The file backing it in the data directory (shm; "" elsewhere): what
	 * a restart reopens (src/node/restart.c). */
	char name[64];
};

/* Plain process memory (anon_mem.c), the mem ops of the providers whose
 * peers reach memory only through messages (ofi, udp): anonymous,
 * aligned as the flags ask, backed at once unless FARM_MEM_SPARSE;
 * persisting it is a store fence. */
int farm_fabric_anon_alloc(farm_fabric *fab, size_t size, unsigned flags,
                           farm_mem **out);
void farm_fabric_anon_free(farm_mem *mem);
int farm_fabric_anon_persist(const farm_mem *mem, const void *addr, size_t len);

struct farm_mr {
	farm_fabric *fab;
	void *addr;
	size_t len;
	unsigned access;
	farm_mr_desc desc;
};

/* Whether @wr's local buffer lies inside its registration, one made with
 * @fab that allows local access: verbs' LOC_PROT, which every provider
 * enforces alike. Another fabric's registration says nothing of what this
 * one may touch (and its provider part is another type). Requests that
 * touch no local memory are the caller's to let through. */
static inline bool farm_wr_local_ok(const farm_fabric *fab, const farm_wr *wr)
{
	const farm_mr *lmr = wr->lmr;
	if (!lmr || lmr->fab != fab || !(lmr->access & FARM_ACCESS_LOCAL))
		return false;
	uintptr_t a = (uintptr_t)wr->local, b = (uintptr_t)lmr->addr;
	return a >= b && wr->len <= lmr->len && a - b <= lmr->len - wr->len;
}

struct farm_cq {
	farm_fabric *fab;
};

struct farm_ep {
	farm_fabric *fab;
	farm_cq *cq;
	uint32_t peer;
};

struct farm_fabric_ops {
	const char *name;
	/* Allocate and open; the generic layer has checked @attr's common
	 * fields. Sets (*out)->ops and machine_id. */
	int (*open)(const farm_fabric_attr *attr, farm_fabric **out);
	void (*close)(farm_fabric *fab);
	int (*address)(const farm_fabric *fab, char *buf, size_t len);

	int (*mem_alloc)(farm_fabric *fab, size_t size, unsigned flags,
	                 farm_mem **out);
	/* Map the existing file @path (a restart); NULL: -ENOTSUP. */
	int (*mem_adopt)(farm_fabric *fab, const char *path, size_t size,
	                 unsigned flags, farm_mem **out);
	void (*mem_free)(farm_mem *mem);
	/* A read-only descriptor of the file behind @mem; NULL: -ENOTSUP. */
	int (*mem_open)(const farm_mem *mem);
	int (*mem_persist)(const farm_mem *mem, const void *addr, size_t len);

	int (*mr_reg)(farm_fabric *fab, void *addr, size_t len, unsigned access,
	              farm_mr **out);
	void (*mr_dereg)(farm_mr *mr);

	int (*cq_create)(farm_fabric *fab, unsigned depth, unsigned flags,
	                 farm_cq **out);
	int (*cq_destroy)(farm_cq *cq);
	int (*cq_poll)(farm_cq *cq, int n, farm_wc *wc);

	int (*ep_connect)(farm_fabric *fab, farm_cq *cq, uint32_t peer_id,
	                  const char *peer_addr, const farm_ep_attr *attr,
	                  farm_ep **out);
	void (*ep_disconnect)(farm_ep *ep);
	void (*ep_destroy)(farm_ep *ep);
	bool (*ep_usable)(const farm_ep *ep);
	int (*ep_post)(farm_ep *ep, farm_wr *list, farm_wr **bad);

	/* Optional (NULL: 0, nothing to back: the target's memory is
	 * anonymous, or pinned whole): farm_ep_back. */
	int (*ep_back)(farm_ep *ep, uint64_t raddr, uint64_t len,
	               uint64_t rkey);
	/* Optional: NULL means -ENOTSUP. */
	int (*ep_fault)(farm_ep *ep, enum farm_fault f, uint64_t arg);
	/* Optional (NULL: -ENOTSUP): machine @peer_id's one-sided requests to
	 * this machine's memory fail from now on (FARM_EFENCED). */
	int (*revoke)(farm_fabric *fab, uint32_t peer_id);
	/* Optional (NULL: -ENOTSUP): farm_fabric_admit. */
	int (*admit)(farm_fabric *fab, uint32_t peer_id, const char *addr);
	/* Optional (NULL: -ENOTSUP): farm_fabric_on_peer_death. */
	int (*on_peer_death)(farm_fabric *fab, farm_peer_death_fn fn,
	                     void *ctx);
	int (*fault_peer)(farm_fabric *fab, uint32_t peer_id, enum farm_fault f,
	                  uint64_t arg);
};

extern const struct farm_fabric_ops farm_shm_ops;
extern const struct farm_fabric_ops farm_udp_ops;
#ifdef FARM_HAVE_VERBS
extern const struct farm_fabric_ops farm_verbs_ops;
#endif
#ifdef FARM_HAVE_OFI
extern const struct farm_fabric_ops farm_ofi_ops;
#endif

/* A thread of this process is about to sleep in farm_wait_word (a loop
 * parks): udp fabrics whose pollers received for the dispatch thread hand
 * the socket back to it now (udp.c). */
void farm_udp_before_wait(void);

/* Checks shared by providers: is a request well formed (post-time errors
 * only)? Returns 0 or -EINVAL. */
static inline int farm_wr_check(const farm_wr *wr)
{
	switch (wr->opcode) {
	case FARM_WR_READ:
		if (wr->flags & (FARM_WR_INLINE | FARM_WR_PERSIST))
			return -EINVAL;
		break;
	case FARM_WR_WRITE:
		if ((wr->flags & FARM_WR_INLINE) && wr->len > FARM_INLINE_MAX)
			return -EINVAL;
		break;
	case FARM_WR_CAS:
		if (wr->len != 8 ||
		    (wr->flags & (FARM_WR_INLINE | FARM_WR_PERSIST)))
			return -EINVAL;
		break;
	case FARM_WR_NOTIFY:
		if (wr->len != 4 || (wr->flags & FARM_WR_INLINE) ||
		    (wr->raddr & 3))
			return -EINVAL;
		return (wr->flags & ~(unsigned)FARM_WR_SIGNALED) ? -EINVAL : 0;
	default: return -EINVAL;
	}
	if (wr->flags &
	    ~(unsigned)(FARM_WR_SIGNALED | FARM_WR_INLINE | FARM_WR_PERSIST))
		return -EINVAL;
	if (wr->len > FARM_FABRIC_MAX_OP || (wr->len && !wr->local))
		return -EINVAL;
	return 0;
}

#endif /* FARM_FABRIC_PROVIDER_H */
