/*
 * The network a benchmark's machines use (--fabric, --netns): shm (one
 * host, shared memory; the default), ofi over loopback, or ofi across
 * network namespaces, machine i in the i-th machine namespace of
 * scripts/netns-cluster (run --net-only; tests/netns.h). benchnet.c.
 */
#ifndef FARM_BENCH_BENCHNET_H
#define FARM_BENCH_BENCHNET_H

#include <stdbool.h>
#include <stddef.h>
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
int bnet_set_fabric(struct bnet *n, const char *v);

bool bnet_shm(const struct bnet *n);

/* After the options: --netns means ofi (or udp) and needs @machines namespaces;
 * the provider must be built. 0, or -1 (said on stderr, with @prog). */
int bnet_check(struct bnet *n, const char *prog, unsigned machines);

/* "shared memory", "loopback" or "netns" (for the output). */
const char *bnet_network(const struct bnet *n);

/* Machine @i's listen address (port 0: any): its namespace's with --netns,
 * else loopback; NULL on shm. */
const char *bnet_listen(const struct bnet *n, unsigned i, char *buf,
                        size_t len);

/* The calling process (single-threaded) into machine @i's namespace; 0
 * without --netns. */
int bnet_enter(const struct bnet *n, unsigned i);

#endif
