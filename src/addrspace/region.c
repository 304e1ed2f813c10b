/*
 * Regions: size-aligned, registered memory (include/farm/region.h).
 * The fabric provides the memory (file-backed for shm, anonymous for verbs,
 * huge pages when it can) and the registration; this file enforces the
 * region rules on top.
 */
#include <farm/region.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "addrspace/addrspace.h"
#include "util/common.h"
#include "util/log.h"

struct farm_region {
	farm_mem *mem;
	farm_mr *mr;
	uint64_t size;
};

int farm_region_create(farm_fabric *fab, uint64_t size, farm_region **out)
{
	if (!fab || !out || !farm_is_pow2(size) ||
	    size < FARM_REGION_MIN_SIZE || size > FARM_REGION_MAX_SIZE ||
	    size > SIZE_MAX / 2)
		return -EINVAL;
	farm_region *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->size = size;
	int rc =
	        farm_mem_alloc(fab, (size_t)size, FARM_MEM_ALIGN_SIZE, &r->mem);
	if (rc) {
		farm_err("region: cannot allocate %" PRIu64 " bytes: %s", size,
		         farm_strerror(rc));
		goto fail;
	}
	rc = farm_mr_reg(fab, farm_mem_addr(r->mem), (size_t)size,
	                 FARM_ACCESS_ALL, &r->mr);
	if (rc) {
		farm_err("region: cannot register %" PRIu64 " bytes: %s", size,
		         farm_strerror(rc));
		goto fail_mem;
	}
	*out = r;
	return 0;
fail_mem:
	farm_mem_free(r->mem);
fail:
	free(r);
	return rc;
}

int farm_region_adopt(farm_fabric *fab, const char *path, uint64_t size,
                      farm_region **out)
{
	if (!fab || !path || !out || !farm_is_pow2(size) ||
	    size < FARM_REGION_MIN_SIZE || size > FARM_REGION_MAX_SIZE ||
	    size > SIZE_MAX / 2)
		return -EINVAL;
	farm_region *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->size = size;
	int rc = farm_mem_adopt(fab, path, (size_t)size, FARM_MEM_ALIGN_SIZE,
	                        &r->mem);
	if (!rc) {
		rc = farm_mr_reg(fab, farm_mem_addr(r->mem), (size_t)size,
		                 FARM_ACCESS_ALL, &r->mr);
		if (rc)
			farm_mem_free(r->mem);
	}
	if (rc) {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void farm_region_destroy(farm_region *r)
{
	if (!r)
		return;
	farm_mr_dereg(r->mr);
	farm_mem_free(r->mem);
	free(r);
}

void *farm_region_base(const farm_region *r)
{
	return r ? farm_mem_addr(r->mem) : NULL;
}
uint64_t farm_region_size(const farm_region *r)
{
	return r ? r->size : 0;
}
bool farm_region_is_huge(const farm_region *r)
{
	return r && farm_mem_is_huge(r->mem);
}
farm_mr *farm_region_mr(const farm_region *r)
{
	return r ? r->mr : NULL;
}
farm_mem *farm_region_mem(const farm_region *r)
{
	return r ? r->mem : NULL;
}

farm_mr_desc farm_region_desc(const farm_region *r)
{
	return farm_mr_describe(r ? r->mr : NULL);
}
