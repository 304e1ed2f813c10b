/*
 * Machine setup the benchmarks share (benchnode.h).
 */
#include "benchnode.h"

#include <errno.h>

int bn_conf_new(const char *prog, farm_conf **out)
{
	int rc = farm_conf_new(out);
	if (rc)
		fprintf(stderr, "%s: configuration: %s\n", prog,
		        farm_strerror(rc));
	return rc;
}

int bn_set(const char *prog, farm_conf *c, const char *k, const char *v)
{
	int rc = farm_conf_set(c, k, v);
	if (rc)
		fprintf(stderr, "%s: config %s: %s\n", prog, k,
		        farm_conf_error(c));
	return rc;
}

int bn_peers(const char *prog, farm_conf *c, unsigned id, unsigned n,
             const char *base)
{
	int rc = 0;
	char v[512];
	for (unsigned j = 0; j < n; j++) {
		if (j == id)
			continue;
		snprintf(v, sizeof(v), "%u %s/m%u", j, base, j);
		rc |= bn_set(prog, c, "peer", v);
	}
	return rc;
}

int bn_open(const char *prog, farm_conf *c, unsigned id, farm_node **out)
{
	int rc = farm_conf_check(c);
	if (rc) {
		fprintf(stderr, "%s: config: %s\n", prog, farm_conf_error(c));
		return rc;
	}
	if ((rc = farm_node_open_conf(c, out)))
		fprintf(stderr, "%s: machine %u: farm_node_open: %s\n", prog,
		        id, farm_strerror(rc));
	return rc;
}
