/*
 * The network a benchmark's machines use (--fabric, --netns): shm (one
 * host, shared memory; the default), ofi over loopback, or ofi across
 * network namespaces, machine i in the i-th machine namespace of
 * scripts/netns-cluster (run --net-only; tests/netns.h). Header-only.
 */
#ifndef FARM_BENCH_BENCHNET_H
#define FARM_BENCH_BENCHNET_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <farm/farm.h>

#include "netns.h"

struct bnet {
	char fabric[8]; /* shm, ofi or udp */
	bool netns;     /* ofi or udp across network namespaces */
};

#define BNET_DEFAULT            \
	{                       \
		.fabric = "shm" \
	}

/* --fabric @v: 0, or -1 (not a provider a benchmark runs on). */
static inline int bnet_set_fabric(struct bnet *n, const char *v)
{
	if (strcmp(v, "shm") != 0 && strcmp(v, "ofi") != 0 &&
	    strcmp(v, "udp") != 0)
		return -1;
	snprintf(n->fabric, sizeof(n->fabric), "%s", v);
	return 0;
}

static inline bool bnet_shm(const struct bnet *n)
{
	return strcmp(n->fabric, "shm") == 0;
}

/* After the options: --netns means ofi (or udp) and needs @machines namespaces;
 * the provider must be built. 0, or -1 (said on stderr, with @prog). */
static inline int bnet_check(struct bnet *n, const char *prog,
                             unsigned machines)
{
	if (n->netns) {
		/* ofi unless udp was asked for: shm needs one host. */
		if (bnet_shm(n))
			snprintf(n->fabric, sizeof(n->fabric), "ofi");
		if (!tn_active() || tn_count() < machines) {
			fprintf(stderr,
			        "%s: --netns needs %u machine namespaces: run "
			        "it under scripts/netns-cluster run --net-only "
			        "--machines %u -- %s --netns ...\n",
			        prog, machines, machines, prog);
			return -1;
		}
	}
	if (!farm_fabric_provider_available(n->fabric)) {
		fprintf(stderr, "%s: the %s provider was not built\n", prog,
		        n->fabric);
		return -1;
	}
	return 0;
}

/* "shared memory", "loopback" or "netns" (for the output). */
static inline const char *bnet_network(const struct bnet *n)
{
	return bnet_shm(n) ? "shared memory" : n->netns ? "netns" : "loopback";
}

/* Machine @i's listen address (port 0: any): its namespace's with --netns,
 * else loopback; NULL on shm. */
static inline const char *bnet_listen(const struct bnet *n, unsigned i,
                                      char *buf, size_t len)
{
	char ip[64];
	if (bnet_shm(n))
		return NULL;
	if (n->netns && tn_addr(i, ip, sizeof(ip)) == 0)
		snprintf(buf, len, "%s:0", ip);
	else
		snprintf(buf, len, "127.0.0.1:0");
	return buf;
}

/* The calling process (single-threaded) into machine @i's namespace; 0
 * without --netns. */
static inline int bnet_enter(const struct bnet *n, unsigned i)
{
	return n->netns ? tn_enter_machine(i) : 0;
}

#endif
