/*
 * fabric_bench's parts (fabric_bench.c: options, output and main;
 * fabric_run.c: the target, the initiator and the measured runs). What
 * fabric_bench measures: fabric_bench.c's head.
 */
#ifndef FARM_BENCH_FABRIC_BENCH_H
#define FARM_BENCH_FABRIC_BENCH_H

#include "benchnet.h"
#include "benchpages.h"
#include "benchutil.h"
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <farm/farm.h>

#define PROG            "fabric_bench"
#define MAX_SIZES       16
#define MAX_OUTSTANDING 256
#define MAX_REPEAT      15
#define DEFAULT_OFFSETS (1u << 22) /* 256 MiB of distinct lines at 64 B */
#define STALL_NS        (5ull * 1000000000ull)
#define OP_READ         1u
#define OP_WRITE        2u
#define OP_MEMCPY       4u
#define TARGET_ID       1u
#define INITIATOR_ID    0u

struct opts {
	uint64_t region_size;
	uint32_t sizes[MAX_SIZES];
	unsigned nsizes;
	double seconds;
	unsigned outstanding;
	unsigned repeat;
	unsigned samples;
	size_t noffsets;
	unsigned signal_every;
	unsigned ops; /* OP_* */
	bool quick;
	int pin;
	unsigned pages;  /* --pages: BP_* asked for, 0: the default */
	struct bnet net; /* --fabric, --netns */
};

static inline bool is_shm(const struct opts *o)
{
	return bnet_shm(&o->net);
}

/* Sent by the target once it is ready (one write, < PIPE_BUF). */
struct target_msg {
	int32_t status; /* 0, or the negative code it failed with */
	uint32_t huge;
	farm_mr_desc desc;
	char addr[1024];
};

struct result {
	double read_mops[MAX_REPEAT], write_mops[MAX_REPEAT];
	double memcpy_mops[MAX_REPEAT];
	uint64_t read_p50, read_p99, write_p50, write_p99;
	/* CPU ns per request: the target's and ours, in rate runs (median)
	 * and in the latency run (one in flight) */
	double read_tcpu[MAX_REPEAT], write_tcpu[MAX_REPEAT];
	double read_icpu[MAX_REPEAT], write_icpu[MAX_REPEAT];
	double memcpy_icpu[MAX_REPEAT]; /* initiator CPU ns per copy */
	double read_lat_tcpu, write_lat_tcpu;
};

/* One measurement's figures, with the pages it had (written by the
 * initiator into memory shared with main's process, benchpages.h). */
struct page_out {
	bool done;
	unsigned pages; /* BP_4K or BP_2M (shm), 0: not a file (ofi, udp) */
	uint64_t region_bytes;
	bool advised;        /* the target's farm_region_is_huge */
	struct bp_huge huge; /* the initiator's mappings of the region file */
	struct result res[MAX_SIZES];
};

struct bench {
	const struct opts *o;
	farm_fabric *fab;
	farm_cq *cq;
	farm_ep *ep;
	farm_mr *lmr;
	farm_mr_desc rdesc;
	uint8_t *buf; /* outstanding slots of slot bytes, registered */
	size_t slot;
	const uint8_t *map; /* the target's region file, read-only */
	size_t map_len;
	uint32_t *offs; /* noffsets random line-aligned offsets */
	size_t noffs;
	uint64_t *lat; /* samples */
	farm_wr wrs[MAX_OUTSTANDING];
	farm_wc wcs[MAX_OUTSTANDING];
	pid_t target;
	uint64_t ops_done; /* requests the last run completed */
};

/* Set by SIGINT, SIGTERM and SIGHUP (fabric_bench.c): stop early. */
extern volatile sig_atomic_t interrupted;

/* The largest of --sizes. */
uint32_t max_size(const struct opts *o);
/* The median of @v[0..@n-1], @n <= MAX_REPEAT. */
double median(const double *v, unsigned n);

/* The child: serve the region until told to stop (fabric_run.c). */
int target_main(const struct opts *o, const char *base, const char *dir,
                int info_fd, int ctl_fd, pid_t parent);
/* The parent: connect to the target, measure into @out, print the table
 * (fabric_run.c). */
int initiator_main(const struct opts *o, const char *dir,
                   const char *target_dir, int info_fd, pid_t target,
                   struct page_out *out);
/* One measurement's table (fabric_bench.c). */
void print_table(const struct opts *o, const struct result *res);

#endif
