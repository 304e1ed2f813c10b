/*
 * Machine setup the benchmarks that run whole machine processes share
 * (txn_bench, kv_bench): configuration keys with their errors said, static
 * peers in sibling data directories, and opening the node. Header-only.
 */
#ifndef FARM_BENCH_BENCHNODE_H
#define FARM_BENCH_BENCHNODE_H

#include <stdio.h>

#include "node/node.h"
#include "util/config.h"

/* Set @k to @v; an error goes to stderr, prefixed with @prog. */
static inline int bn_cfg_set(const char *prog, struct farm_config *c,
                             const char *k, const char *v)
{
	char err[256];
	int rc = farm_config_set(c, k, v, err, sizeof(err));
	if (rc)
		fprintf(stderr, "%s: config %s: %s\n", prog, k, err);
	return rc;
}

/* Machines 0..@n-1 but @id as static peers, machine j in @base/mj. */
static inline int bn_static_peers(const char *prog, struct farm_config *c,
                                  unsigned id, unsigned n, const char *base)
{
	int rc = 0;
	char v[512];
	for (unsigned j = 0; j < n; j++) {
		if (j == id)
			continue;
		snprintf(v, sizeof(v), "%u %s/m%u", j, base, j);
		rc |= bn_cfg_set(prog, c, "peer", v);
	}
	return rc;
}

/* Validate @c and open machine @id's node in *@out (errors said). */
static inline int bn_node_open(const char *prog, struct farm_config *c,
                               unsigned id, farm_node **out)
{
	char err[256];
	int rc = farm_config_validate(c, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "%s: config: %s\n", prog, err);
		return rc;
	}
	if ((rc = farm_node_open(c, out)))
		fprintf(stderr, "%s: machine %u: farm_node_open: %s\n", prog,
		        id, farm_strerror(rc));
	return rc;
}

#endif
