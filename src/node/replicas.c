/*
 * farm_replicas(): where an object's region lives in the configuration in
 * force on this machine (node.h), for applications that place work or
 * reason about failures.
 */
#include "node/node_int.h"

#include <errno.h>
#include <string.h>

#include "addrspace/ring.h"

_Static_assert(FARM_REPLICAS_MAX >= FARM_RING_MAX_REPLICAS + 1,
               "the replicas and an extra backup fit");

int farm_replicas(farm_node *n, farm_gaddr a, struct farm_replicas *out)
{
	if (!n || !out || !n->as)
		return -EINVAL;
	uint32_t region = farm_gaddr_region(a);
	if (!farm_gaddr_valid(a, 0, farm_as_region_size(n->as)))
		return -EINVAL;
	uint32_t ids[FARM_RING_MAX_REPLICAS + 1];
	/* The replicas in the view of this id, looked up under the address
	 * space's lock: the id and the machines of one view even when a new
	 * configuration is applied meanwhile (then the view before, which
	 * the address space keeps). */
	uint64_t cfg = farm_as_config_id(n->as);
	if (!cfg)
		return -ENOENT;
	unsigned k = farm_as_replicas_at(n->as, (uint32_t)cfg, region, ids);
	if (!k) /* no machine places it: a region past the cluster's last */
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->config_id = cfg;
	out->region = region;
	out->primary = ids[0];
	out->nbackups = k - 1;
	memcpy(out->backups, ids + 1, (k - 1) * sizeof(ids[0]));
	return 0;
}
