/*
 * ht_bench's reference point against the memory system's limit in the
 * same run (ht_limit.c, over bench/lib/memlimit.h).
 */
#ifndef FARM_BENCH_HT_LIMIT_H
#define FARM_BENCH_HT_LIMIT_H

#include <stdint.h>

struct ht_limit {
	double rate, limit, limit_one; /* lookups/s; 0: not measured */
	uint64_t bytes;                /* the limit's table */
	uint32_t span;                 /* bytes copied per lookup */
};

/* @lookups done in @get_s seconds, against the limit loop over a table of
 * @nbuckets buckets of @bucket_bytes (in /dev/shm as the shards are),
 * @window in flight and one at a time, @secs each; prints a line. 0, or a
 * negated errno. */
int ht_limit_measure(struct ht_limit *l, uint64_t lookups, double get_s,
                     uint64_t nbuckets, uint32_t bucket_bytes, unsigned window,
                     double secs);

/* The JSON line's pieces: `"limit": {...}`, and `, "kv_lookups_vs_limit":
 * {...}` (target 0.3) for the goals. */
void ht_limit_json(const struct ht_limit *l);
void ht_limit_goal_json(const struct ht_limit *l);

#endif
