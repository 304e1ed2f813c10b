/*
 * Plain process memory, for the providers whose peers reach it only
 * through messages (ofi, udp): anonymous, aligned as the flags ask, with
 * transparent huge pages advised (best effort) and backed at once unless
 * sparse. Persisting it is a store fence: DRAM, battery-backed in FaRM's
 * model.
 */
#include "fabric/provider.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "util/common.h"

#define ANON_HUGE (2u << 20)

struct anon_mem {
	struct farm_mem base;
	void *map;
	size_t maplen;
};

/* Back @len bytes at @p now: MADV_POPULATE_WRITE where the kernel has it,
 * else a write to each page. */
static void anon_populate(uint8_t *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	for (size_t k = 0; k < len; k += 4096)
		((volatile uint8_t *)p)[k] = 0;
}

int farm_fabric_anon_alloc(farm_fabric *fab, size_t size, unsigned flags,
                           farm_mem **out)
{
	if (flags & FARM_MEM_REQUIRE_HUGE)
		return -ENOTSUP; /* transparent huge pages are best effort */
	size_t align = (flags & FARM_MEM_ALIGN_SIZE) ? size : 4096;
	size_t len = (size + 4095) & ~(size_t)4095;
	if (len < size || len + align < len)
		return -ENOMEM;
	size_t maplen = len + align;
	uint8_t *map = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
	                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (map == MAP_FAILED)
		return -errno;
	uint8_t *p = (uint8_t *)(((uintptr_t)map + align - 1) &
	                         ~(uintptr_t)(align - 1));
	if (!(flags & FARM_MEM_SPARSE)) { /* sparse: backed on first write */
		if (len >= ANON_HUGE)
			(void)madvise(p, len, MADV_HUGEPAGE);
		anon_populate(p, len);
	}
	struct anon_mem *m = calloc(1, sizeof(*m));
	if (!m) {
		munmap(map, maplen);
		return -ENOMEM;
	}
	m->base.fab = fab;
	m->base.addr = p;
	m->base.size = size;
	m->map = map;
	m->maplen = maplen;
	*out = &m->base;
	return 0;
}

void farm_fabric_anon_free(farm_mem *mem)
{
	struct anon_mem *m = (struct anon_mem *)mem;
	munmap(m->map, m->maplen);
	free(m);
}

int farm_fabric_anon_persist(const farm_mem *mem, const void *addr, size_t len)
{
	(void)mem;
	(void)addr;
	(void)len;
	farm_store_fence();
	return 0;
}
