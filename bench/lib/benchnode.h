/*
 * Machine setup the benchmarks that run whole machine processes share
 * (txn_bench, kv_bench, the cluster benchmarks): a configuration built in
 * memory (include/farm/config.h) with its errors said, static peers in
 * sibling data directories, and opening the node (benchnode.c).
 */
#ifndef FARM_BENCH_BENCHNODE_H
#define FARM_BENCH_BENCHNODE_H

#include <stdio.h>

#include <farm/farm.h>

/* A configuration with every key's default in *@out; 0, or -ENOMEM
 * (said on stderr, prefixed with @prog). */
int bn_conf_new(const char *prog, farm_conf **out);

/* Set @k to @v; an error goes to stderr, prefixed with @prog. */
int bn_set(const char *prog, farm_conf *c, const char *k, const char *v);

/* Machines 0..@n-1 but @id as static peers, machine j in @base/mj. */
int bn_peers(const char *prog, farm_conf *c, unsigned id, unsigned n,
             const char *base);

/* Check @c and open machine @id's node in *@out (errors said). @c can be
 * freed once it returns. */
int bn_open(const char *prog, farm_conf *c, unsigned id, farm_node **out);

#endif
