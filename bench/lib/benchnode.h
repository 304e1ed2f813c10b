/*
 * Machine setup the benchmarks that run whole machine processes share
 * (txn_bench, kv_bench, bt_bench, the cluster benchmarks): configuration
 * keys with their errors said, static peers in sibling data directories,
 * and opening the node (benchnode.c). A configuration is built in memory
 * here, which the public API does not offer (include/farm/node.h opens a
 * machine from a file): this header and benchnode.c are bench/lib's one
 * door to the internal node/node.h and util/config.h (bench/README.md).
 */
#ifndef FARM_BENCH_BENCHNODE_H
#define FARM_BENCH_BENCHNODE_H

#include <stdio.h>

#include "node/node.h"
#include "util/config.h"

/* Set @k to @v; an error goes to stderr, prefixed with @prog. */
int bn_cfg_set(const char *prog, struct farm_config *c, const char *k,
               const char *v);

/* Machines 0..@n-1 but @id as static peers, machine j in @base/mj. */
int bn_static_peers(const char *prog, struct farm_config *c, unsigned id,
                    unsigned n, const char *base);

/* Validate @c and open machine @id's node in *@out (errors said). */
int bn_node_open(const char *prog, struct farm_config *c, unsigned id,
                 farm_node **out);

#endif
