/*
 * Machine setup the benchmarks share (benchnode.h).
 */
#include "benchnode.h"

int bn_cfg_set(const char *prog, struct farm_config *c, const char *k,
               const char *v)
{
	char err[256];
	int rc = farm_config_set(c, k, v, err, sizeof(err));
	if (rc)
		fprintf(stderr, "%s: config %s: %s\n", prog, k, err);
	return rc;
}

int bn_static_peers(const char *prog, struct farm_config *c, unsigned id,
                    unsigned n, const char *base)
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

int bn_node_open(const char *prog, struct farm_config *c, unsigned id,
                 farm_node **out)
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
