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

/* The shards' descriptors (struct farm_ht_shard, MAXM of them) in a page
 * the machine processes share: made before they are forked. */
struct farm_ht_shard;
extern struct farm_ht_shard *kl_sd;

#endif
