/*
 * bt_bench: the B-tree (src/btree) against the same tree in one process
 * (the in-memory limit), Redis sorted sets and MariaDB (InnoDB primary
 * key ranges), in one run. Shared by bt_bench.c (driver, report), bt_farm.c
 * (libfarm on two machine processes), bt_mem.c (the in-memory limit) and
 * bt_peers.c (Redis, MariaDB).
 *
 * Keys: n keys loaded, key i = 2 i (8 bytes, big-endian in the trees);
 * inserts add odd keys. Values: 8 bytes (key ^ a constant).
 */
#ifndef FARM_BENCH_BT_BENCH_H
#define FARM_BENCH_BT_BENCH_H

#include <stdbool.h>
#include <stdint.h>

enum bb_wl { BB_LOOKUP, BB_INSERT, BB_YCSBE, BB_NWL };
enum bb_op { BB_GET, BB_PUT, BB_SCAN };

#define BB_VAL(k)   ((k) ^ 0x5bd1e995u)
#define BB_SCAN_MAX 100u
#define BB_PIPELINE 64u /* Redis commands per flush */

/* A workload's operation stream. */
struct bb_gen {
	uint64_t n; /* keys loaded */
	bool zipf;  /* Zipf 0.99 (scrambled), else uniform */
	double zetan, alpha, eta, theta;
	uint64_t rng, ins;
	enum bb_wl wl;
};

struct bb_opd {
	enum bb_op op;
	uint64_t key;
	uint32_t len; /* scans: entries wanted */
};

/* What one run measured. */
struct bb_res {
	uint64_t ops, entries, misses; /* misses: lookups of loaded keys
	                                  that found nothing */
	uint64_t wall_ns, cpu_ns;      /* cpu: every process of the system */
	double reads_per_lookup;       /* libfarm only */
};

void bb_gen_init(struct bb_gen *g, uint64_t n, bool zipf, enum bb_wl wl,
                 uint64_t seed);
void bb_gen_next(struct bb_gen *g, struct bb_opd *o);
uint64_t bb_now_ns(void);

/* A system under test: synchronous operations (Redis pipelines its own). */
struct bb_sys {
	const char *name;
	void *ctx;
	int (*get)(void *ctx, uint64_t k, uint64_t *v); /* 0, -ENOENT */
	int (*put)(void *ctx, uint64_t k, uint64_t v);
	long (*scan)(void *ctx, uint64_t k, uint32_t n); /* entries */
	/* Optional: the whole run, for systems that pipeline. */
	int (*run)(void *ctx, struct bb_gen *g, double secs, struct bb_res *r);
	uint64_t (*cpu_ns)(void *ctx); /* CPU of the system's processes */
};

/* Run @secs of @g's operations on @s synchronously. 0 or an error. */
int bb_run_sync(const struct bb_sys *s, struct bb_gen *g, double secs,
                struct bb_res *r);

/* The systems: start, load @n keys, describe; stop. */
int bb_farm_start(uint64_t n, struct bb_sys *s, const char *tmp);
void bb_farm_stop(void);
/* Reads (leaf and internal) per lookup since the last call. */
double bb_farm_reads_per_lookup(void);
int bb_mem_start(uint64_t n, struct bb_sys *s);
void bb_mem_stop(void);
int bb_redis_start(uint64_t n, struct bb_sys *s);
void bb_redis_stop(void);
int bb_maria_start(uint64_t n, struct bb_sys *s);
void bb_maria_stop(void);

#endif
