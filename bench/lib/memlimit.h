/*
 * The memory system's limit for hashtable lookups, measured in the same
 * run as the lookups it bounds (memlimit.c): a plain loop over a table of
 * the same size and layout (buckets of the same bytes, in memory mapped
 * as the store's is), copying the span a lookup reads (buckets b and b + 1)
 * from a random bucket per lookup, with a given number of lookups in
 * flight and software prefetch, on the calling thread. No hashing, no
 * validation, no messaging: what is left when all of that costs nothing.
 */
#ifndef FARM_BENCH_MEMLIMIT_H
#define FARM_BENCH_MEMLIMIT_H

#include <stdbool.h>
#include <stdint.h>

struct ml_table {
	uint8_t *base;
	uint64_t bytes;    /* mapped */
	uint64_t nbuckets; /* homes: b in [0, nbuckets), b + 1 read too */
	uint32_t bucket_bytes;
};

/* Map and fill a table of @nbuckets + 1 buckets of @bucket_bytes. @dir: a
 * directory to hold it as a file (the shm fabric's way: a file in tmpfs,
 * sized, advised MADV_HUGEPAGE, then populated, so it gets the pages the
 * store's shards get); NULL: anonymous memory (huge wherever THP for
 * anonymous memory is madvise or always, whatever the shards have).
 * 0, or a negated errno (said on stderr). */
int ml_open(struct ml_table *t, uint64_t nbuckets, uint32_t bucket_bytes,
            const char *dir);
void ml_close(struct ml_table *t);

/* Copy the two-bucket span of random homes for @seconds, @depth lookups
 * in flight (1..64: each group's spans prefetched, then copied, as
 * G-Opt's group prefetching does; 1: one at a time, no prefetch).
 * Lookups per second; in *@per_cpu_s (when not NULL) lookups per second
 * of this thread's CPU time, the figure that still means something on a
 * host whose other load takes the core away part of the time. */
double ml_run(const struct ml_table *t, unsigned depth, double seconds,
              double *per_cpu_s);

/* A measurement in slices (ml_slice), taken in turns with another loop
 * so that both meet the same state of a shared host: the lookups, the
 * wall and CPU time of the slices so far, and where the random homes
 * go on from. Zero it before the first slice. */
struct ml_tally {
	uint64_t n, ns, cpu_ns;
	uint64_t ctr;
};

/* ml_run for @seconds, its figures added to @tl. 0, or -ENOMEM. */
int ml_slice(const struct ml_table *t, unsigned depth, double seconds,
             struct ml_tally *tl);

#endif
