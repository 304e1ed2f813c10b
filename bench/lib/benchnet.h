/*
 * The network a benchmark's machines use (--fabric, --netns): shm (one
 * host, shared memory; the default), ofi over loopback, or ofi across
 * network namespaces, machine i in the i-th machine namespace of
 * scripts/netns-cluster (run --net-only; support/netns.h, which only
 * benchnet.c includes). benchnet.c.
 */
#ifndef FARM_BENCH_BENCHNET_H
#define FARM_BENCH_BENCHNET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <farm/farm.h>

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

/* The calling process into the clients' namespace; 0 without --netns. */
int bnet_enter_client(const struct bnet *n);

/* Under scripts/netns-cluster, whatever the options: how many machine
 * namespaces there are (0 outside it); machine @i's IPv4 address (0, or
 * -ENOENT); the calling process into machine @i's namespace (0, or an
 * error said on stderr). */
unsigned bnet_machines(void);
int bnet_addr(unsigned i, char *buf, size_t len);
int bnet_enter_machine(unsigned i);

#endif
