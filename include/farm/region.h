/*
 * libfarm regions: the unit of memory the address space is made of.
 *
 * A region is a power-of-two block of memory (default 2 GiB; 1 MiB up to
 * 4 GiB, since a global address carries a 32-bit offset), aligned to its
 * size in the virtual address space, backed by huge pages where the machine
 * has them, and registered with the fabric so peers can READ, WRITE and CAS
 * it. The address space layer (region ids, replicas) builds on this.
 */
#ifndef FARM_REGION_H
#define FARM_REGION_H

#include <farm/fabric.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FARM_REGION_DEFAULT_SIZE (2ull << 30)
#define FARM_REGION_MIN_SIZE     (1ull << 20)
#define FARM_REGION_MAX_SIZE     (1ull << 32)

typedef struct farm_region farm_region;

/*
 * farm_region_create() - allocate and register a region of @size bytes.
 * Returns 0 and sets *out; -EINVAL when @size is not a power of two in
 * [FARM_REGION_MIN_SIZE, FARM_REGION_MAX_SIZE]; -ENOSPC when the backing
 * file system is full; other negative codes from the fabric.
 */
FARM_API FARM_MUST_CHECK int farm_region_create(farm_fabric *fab, uint64_t size,
                                                farm_region **out);
FARM_API void farm_region_destroy(farm_region *r);
FARM_API void *farm_region_base(const farm_region *r);
FARM_API uint64_t farm_region_size(const farm_region *r);
FARM_API bool farm_region_is_huge(const farm_region *r);
FARM_API farm_mr *farm_region_mr(const farm_region *r);
FARM_API farm_mem *farm_region_mem(const farm_region *r);
/* What a peer needs to reach the region. */
FARM_API farm_mr_desc farm_region_desc(const farm_region *r);

#ifdef __cplusplus
}
#endif
#endif
