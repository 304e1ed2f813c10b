/*
 * kv_local_bench's parts: kv_local_bench.c (the run, its summary and JSON
 * line), kv_local_mach.c (a machine's side: the shard descriptors, the
 * plain local loop, YCSB E's scan), on kv_bench's parts (bench/kv_bench.h:
 * the options, the cluster, a machine, the workloads).
 */
#ifndef FARM_TESTS_PERF_KV_LOCAL_H
#define FARM_TESTS_PERF_KV_LOCAL_H

#include "kv_bench.h"

/* The plain loop's goals: farm's lookups per core against it, and it
 * against the memory system's limit (bench/lib/memlimit.h) per CPU-second,
 * both in the same run. */
#define GOAL_LOCAL          0.5
#define GOAL_LOCAL_VS_LIMIT 0.7

/* Machine 0's CMD_INNER, by the command's workload field: a turn of the
 * plain loop, a turn of the limit with PLAIN_BATCH in flight (on the
 * same CPU, in the same process, so that both meet the same state of
 * the host; the table made at the first turn, the turns' figures so far
 * into g_sh->res[0]), or the limit's table unmapped. */
enum { KL_PLAIN = 0, KL_LIMIT = 1, KL_LIMIT_END = 2 };
/* The turns of each that a run takes, alternating. */
#define KL_TURNS 10u

/* The shards' descriptors (struct farm_ht_shard, MAXM of them) in a page
 * the machine processes share: made before they are forked. */
struct farm_ht_shard;
extern struct farm_ht_shard *kl_sd;

#endif
