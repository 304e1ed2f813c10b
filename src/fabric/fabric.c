/*
 * Generic fabric layer: provider selection and the checks every provider
 * would otherwise repeat. Hot paths (post, poll) are one indirect call.
 */
#include "fabric/provider.h"
#include "util/futex.h"

#include <errno.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/wire.h"

static const struct farm_fabric_ops *const providers[] = {
        &farm_shm_ops,
        &farm_udp_ops,
#ifdef FARM_HAVE_VERBS
        &farm_verbs_ops,
#endif
#ifdef FARM_HAVE_OFI
        &farm_ofi_ops,
#endif
};

static const struct farm_fabric_ops *find_provider(const char *name)
{
	for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++)
		if (strcmp(providers[i]->name, name) == 0)
			return providers[i];
	return NULL;
}

bool farm_fabric_provider_available(const char *provider)
{
	return provider && find_provider(provider) != NULL;
}

uint32_t farm_fabric_wire_own(void)
{
	return FARM_WIRE_VERSION +
	       (FARM_FAULT_SWITCH(FARM_FP_FABRIC_WIRE_NEXT) ? 1u : 0u);
}

int farm_fabric_wire_refused(const farm_fabric *fab, uint32_t peer,
                             const char *where, uint32_t theirs)
{
	farm_err("%s: machine %" PRIu32 " at %s speaks wire version %" PRIu32
	         ", machine %" PRIu32 " (this one) version %" PRIu32
	         ": builds that differ on the wire cannot share a cluster",
	         fab->ops->name, peer, where, theirs, fab->machine_id,
	         fab->wire);
	return -EPROTO;
}

int farm_fabric_open(const farm_fabric_attr *attr, farm_fabric **out)
{
	if (!attr || !out)
		return -EINVAL;
	const char *name = attr->provider;
	if (!name || !*name)
		name = getenv("FARM_FABRIC");
	if (!name || !*name)
		name = "shm";
	const struct farm_fabric_ops *ops = find_provider(name);
	if (!ops) {
		if (strcmp(name, "verbs") == 0)
			farm_err("fabric provider 'verbs' was not built: "
			         "libibverbs/librdmacm were missing at build "
			         "time");
		else if (strcmp(name, "ofi") == 0)
			farm_err("fabric provider 'ofi' was not built: "
			         "libfabric-dev was missing at build time");
		else
			farm_err("unknown fabric provider '%s' (known: shm, "
			         "udp, verbs, ofi)",
			         name);
		return -EINVAL;
	}
	farm_fabric *fab = NULL;
	int rc = ops->open(attr, &fab);
	if (rc)
		return rc;
	*out = fab;
	return 0;
}

void farm_fabric_close(farm_fabric *fab)
{
	if (fab)
		fab->ops->close(fab);
}

const char *farm_fabric_provider(const farm_fabric *fab)
{
	return fab ? fab->ops->name : NULL;
}

uint32_t farm_fabric_machine_id(const farm_fabric *fab)
{
	return fab ? fab->machine_id : UINT32_MAX;
}

int farm_fabric_address(const farm_fabric *fab, char *buf, size_t len)
{
	if (!fab || (!buf && len))
		return -EINVAL;
	return fab->ops->address(fab, buf, len);
}

int farm_mem_alloc(farm_fabric *fab, size_t size, unsigned flags,
                   farm_mem **out)
{
	if (!fab || !out || size == 0 ||
	    (flags & ~(unsigned)(FARM_MEM_ALIGN_SIZE | FARM_MEM_REQUIRE_HUGE |
	                         FARM_MEM_SPARSE)) ||
	    ((flags & FARM_MEM_SPARSE) && (flags & FARM_MEM_REQUIRE_HUGE)))
		return -EINVAL;
	if ((flags & FARM_MEM_ALIGN_SIZE) && (size & (size - 1)))
		return -EINVAL;
	return fab->ops->mem_alloc(fab, size, flags, out);
}

int farm_mem_adopt(farm_fabric *fab, const char *path, size_t size,
                   unsigned flags, farm_mem **out)
{
	if (!fab || !path || !out || size == 0 ||
	    (flags & ~(unsigned)(FARM_MEM_ALIGN_SIZE | FARM_MEM_REQUIRE_HUGE |
	                         FARM_MEM_SPARSE)) ||
	    ((flags & FARM_MEM_SPARSE) && (flags & FARM_MEM_REQUIRE_HUGE)))
		return -EINVAL;
	if ((flags & FARM_MEM_ALIGN_SIZE) && (size & (size - 1)))
		return -EINVAL;
	if (!fab->ops->mem_adopt)
		return -ENOTSUP;
	return fab->ops->mem_adopt(fab, path, size, flags, out);
}

void farm_mem_free(farm_mem *mem)
{
	if (mem)
		mem->fab->ops->mem_free(mem);
}

int farm_mem_open_file(const farm_mem *mem)
{
	if (!mem)
		return -EINVAL;
	if (!mem->fab->ops->mem_open)
		return -ENOTSUP;
	return mem->fab->ops->mem_open(mem);
}

const char *farm_mem_file(const farm_mem *mem)
{
	return mem ? mem->name : "";
}

void *farm_mem_addr(const farm_mem *mem)
{
	return mem ? mem->addr : NULL;
}
size_t farm_mem_size(const farm_mem *mem)
{
	return mem ? mem->size : 0;
}

uint64_t farm_mem_resident(const farm_mem *mem)
{
	if (!mem || !mem->addr || !mem->size)
		return 0;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)mem->addr & ~(uintptr_t)(page - 1);
	size_t len = (uintptr_t)mem->addr + mem->size - a;
	size_t np = (len + page - 1) / page;
	/* In slices, so a large sparse region needs no large vector. */
	unsigned char vec[4096];
	uint64_t n = 0;
	for (size_t i = 0; i < np; i += sizeof(vec)) {
		size_t k = FARM_MIN(np - i, sizeof(vec));
		if (mincore((void *)(a + i * page), k * page, vec))
			return 0;
		for (size_t j = 0; j < k; j++)
			n += vec[j] & 1;
	}
	return n * page;
}
bool farm_mem_is_huge(const farm_mem *mem)
{
	return mem && mem->huge;
}
bool farm_mem_is_pmem(const farm_mem *mem)
{
	return mem && mem->pmem;
}

int farm_mem_persist(const farm_mem *mem, const void *addr, size_t len)
{
	if (!mem)
		return -EINVAL;
	uintptr_t a = (uintptr_t)addr, base = (uintptr_t)mem->addr;
	if (a < base || len > mem->size || a - base > mem->size - len)
		return -EINVAL;
	return mem->fab->ops->mem_persist(mem, addr, len);
}

int farm_mr_reg(farm_fabric *fab, void *addr, size_t len, unsigned access,
                farm_mr **out)
{
	if (!fab || !addr || !out || len == 0 || access == 0 ||
	    (access & ~(unsigned)FARM_ACCESS_ALL) ||
	    (uintptr_t)addr + len < (uintptr_t)addr)
		return -EINVAL;
	return fab->ops->mr_reg(fab, addr, len, access, out);
}

void farm_mr_dereg(farm_mr *mr)
{
	if (mr)
		mr->fab->ops->mr_dereg(mr);
}

farm_mr_desc farm_mr_describe(const farm_mr *mr)
{
	if (!mr) {
		farm_mr_desc none = {0};
		return none;
	}
	return mr->desc;
}

int farm_cq_create(farm_fabric *fab, unsigned depth, unsigned flags,
                   farm_cq **out)
{
	if (!fab || !out || (flags & ~(unsigned)FARM_CQ_SHARED))
		return -EINVAL;
	return fab->ops->cq_create(fab, depth ? depth : 1024, flags, out);
}

int farm_cq_destroy(farm_cq *cq)
{
	if (!cq)
		return -EINVAL;
	return cq->fab->ops->cq_destroy(cq);
}

int farm_cq_poll(farm_cq *cq, int n, farm_wc *wc)
{
	if (FARM_UNLIKELY(!cq || n < 0 || (n && !wc)))
		return -EINVAL;
	return cq->fab->ops->cq_poll(cq, n, wc);
}

int farm_ep_connect(farm_fabric *fab, farm_cq *cq, uint32_t peer_id,
                    const char *peer_addr, const farm_ep_attr *attr,
                    farm_ep **out)
{
	if (!fab || !cq || cq->fab != fab || !peer_addr || !*peer_addr || !out)
		return -EINVAL;
	if (attr && (attr->flags & ~(unsigned)FARM_EP_SHARED))
		return -EINVAL;
	farm_ep_attr a = {.sq_depth = 256, .flags = 0};
	if (attr) {
		a = *attr;
		if (a.sq_depth == 0)
			a.sq_depth = 256;
	}
	if (a.sq_depth > 65536)
		return -EINVAL;
	return fab->ops->ep_connect(fab, cq, peer_id, peer_addr, &a, out);
}

void farm_ep_disconnect(farm_ep *ep)
{
	if (ep)
		ep->fab->ops->ep_disconnect(ep);
}

void farm_ep_destroy(farm_ep *ep)
{
	if (ep)
		ep->fab->ops->ep_destroy(ep);
}

uint32_t farm_ep_peer(const farm_ep *ep)
{
	return ep ? ep->peer : UINT32_MAX;
}

bool farm_ep_usable(const farm_ep *ep)
{
	return ep && ep->fab->ops->ep_usable(ep);
}

int farm_ep_post(farm_ep *ep, farm_wr *list, farm_wr **bad)
{
	if (!ep || !list) {
		if (bad)
			*bad = list;
		return -EINVAL;
	}
	return ep->fab->ops->ep_post(ep, list, bad);
}

int farm_ep_back(farm_ep *ep, const farm_mr_desc *desc, uint64_t offset,
                 uint64_t len)
{
	if (!ep || !desc || offset > desc->len || len > desc->len - offset)
		return -EINVAL;
	if (!len || !ep->fab->ops->ep_back)
		return 0;
	return ep->fab->ops->ep_back(ep, desc->addr + offset, len, desc->key);
}

int farm_ep_fault(farm_ep *ep, enum farm_fault f, uint64_t arg)
{
	if (!ep || (unsigned)f > FARM_FAULT_PAUSE)
		return -EINVAL;
	if (!ep->fab->ops->ep_fault)
		return -ENOTSUP;
	return ep->fab->ops->ep_fault(ep, f, arg);
}

int farm_fabric_on_peer_death(farm_fabric *fab, farm_peer_death_fn fn,
                              void *ctx)
{
	if (!fab)
		return -EINVAL;
	if (!fab->ops->on_peer_death)
		return -ENOTSUP;
	return fab->ops->on_peer_death(fab, fn, ctx);
}

int farm_fabric_revoke(farm_fabric *fab, uint32_t peer_id)
{
	if (!fab || peer_id == fab->machine_id)
		return -EINVAL;
	if (!fab->ops->revoke)
		return -ENOTSUP;
	return fab->ops->revoke(fab, peer_id);
}

int farm_fabric_admit(farm_fabric *fab, uint32_t peer_id, const char *addr)
{
	if (!fab || !addr || peer_id == fab->machine_id)
		return -EINVAL;
	if (!fab->ops->admit)
		return -ENOTSUP;
	return fab->ops->admit(fab, peer_id, addr);
}

void farm_faults_apply(struct farm_faults *x, enum farm_fault f, uint64_t arg)
{
	switch (f) {
	case FARM_FAULT_CLEAR:
		atomic_store(&x->delay_ns, 0);
		atomic_store(&x->fail, 0);
		atomic_store(&x->pause, 0);
		break;
	case FARM_FAULT_DELAY: atomic_store(&x->delay_ns, arg); break;
	case FARM_FAULT_FAIL: atomic_store(&x->fail, arg != 0); break;
	case FARM_FAULT_PAUSE: atomic_store(&x->pause, arg != 0); break;
	}
}

int farm_fabric_fault_peer(farm_fabric *fab, uint32_t peer_id,
                           enum farm_fault f, uint64_t arg)
{
	if (!fab || (unsigned)f > FARM_FAULT_PAUSE)
		return -EINVAL;
	if (!fab->ops->fault_peer)
		return -ENOTSUP;
	return fab->ops->fault_peer(fab, peer_id, f, arg);
}

int farm_wait_word(const uint32_t *addr, uint32_t expected, uint64_t timeout_ns)
{
	if (!addr)
		return -EINVAL;
	farm_udp_before_wait();
	return farm_futex_wait(addr, expected, timeout_ns);
}

void farm_wake_word(const uint32_t *addr)
{
	/* The word lives in writable memory (farm_mem_alloc); the const is
	 * the waiter-side view of it. */
	uint32_t *w = (uint32_t *)(uintptr_t)addr;
	if (w && __atomic_exchange_n(w, 0, __ATOMIC_SEQ_CST) != 0)
		farm_futex_wake(w);
}
