/*
 * kv_bench's parts (kv_bench.c: options, the coordinator, results and
 * output; kv_mach.c: a machine process and its operations; kv_peer.c:
 * memcached and Redis, their clients; kv_work.c: keys, values, key
 * choice, small helpers). What kv_bench measures: kv_bench.c's head.
 */
#ifndef FARM_BENCH_KV_BENCH_H
#define FARM_BENCH_KV_BENCH_H

#include "benchnode.h"
#include "benchutil.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <farm/farm.h>

#include "hashtable/ht.h"
#include "kv/kv.h"
#include "node/node.h"
#include "txn/object.h"
#include "util/common.h"
#include "util/config.h"
#include "util/lines.h"

#define PROG        "kv_bench"
#define MAXM        8
#define KLEN        16u
#define VLEN        32u
#define MGET_N      24u
#define SAMP_MAX    (1u << 16)
#define STREAM_LEN  (1u << 20)
#define PUT_BIT     0x80000000u
#define JOIN_MS     30000
#define NS          1000000000ull
#define STALL_NS    (60 * NS)
#define SMALL_KEYS  1000000ull
#define GOAL_RATE   5e6
#define GOAL_PEER_X 10.0
#define GOAL_P50_US 2.0
#define GOAL_LOCAL  0.5
#define GOAL_SCALE  0.2

enum { W_C, W_B, W_A, W_ZC, W_ZB, W_ZA, W_MGET, W_LOCAL, NW };
extern const char *const wname[NW];
extern const char *const wkey[NW];
extern const int wput_pct[NW];
extern const bool wzipf[NW];

enum { CMD_NONE, CMD_LOAD, CMD_RUN, CMD_LAT, CMD_PLAIN, CMD_QUIT };
enum { ST_INIT, ST_READY, ST_FAILED };

struct opts {
	unsigned machines, depth, load_depth, sample_every;
	uint64_t keys, log_size;
	double seconds, occupancy;
	bool quick, peers, small, pin;
	bool demo; /* --demo: make demo's short run (print_demo) */
	char zk[FARM_CONFIG_STR];      /* --zk: ZooKeeper membership */
	char zk_root[FARM_CONFIG_STR]; /* per cluster_start, under /libfarm */
};
extern struct opts O;

struct mres {
	uint64_t ops, gets, puts, keys, errors, notfound, ns;
	uint64_t chain_fallbacks;
	uint32_t nsamp;
	uint64_t samp[SAMP_MAX];
};

struct shared {
	_Atomic int seq; /* command number; machines act on a new one */
	int cmd, wl;
	uint64_t nkeys;
	uint64_t go_ns, dur_ns, warm_ns;
	double zeta_n; /* zipf: kb_zeta(nkeys, 0.99) */
	struct {
		_Atomic int state, done;
		int err;
		_Atomic uint64_t loaded;
	} m[MAXM];
	struct farm_ht_shard sd[MAXM];
	struct farm_ht_stats hst[MAXM];
	struct mres res[MAXM];
};
extern struct shared *SH;

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static inline void make_key(uint64_t i, uint8_t *k)
{
	static const char hx[] = "0123456789abcdef";
	uint64_t x = mix64(i * 2 + 1);
	for (int j = 0; j < 16; j++)
		k[j] = (uint8_t)hx[(x >> (4 * j)) & 15];
}

static inline void make_val(uint64_t i, uint32_t gen, uint8_t *v)
{
	memcpy(v, &i, 8);
	for (unsigned j = 8; j < VLEN; j++)
		v[j] = (uint8_t)('a' + (j + gen) % 26);
}

static inline bool val_ok(uint64_t i, const void *v, uint32_t len)
{
	return len == VLEN && memcmp(v, &i, 8) == 0;
}

/* YCSB's zipfian generator (Gray et al.), theta 0.99, ranks scrambled
 * over the key space by a hash so hot keys fall on every shard. */
struct zipf {
	uint64_t n;
	double theta, alpha, zetan, eta, half_pow;
};

struct fig {
	bool have;
	double ops, keys, gets, puts; /* per second, all threads */
	double p50_ns, p99_ns;
	uint64_t errors, notfound;
};

enum { P_MC, P_REDIS, NPEER };
enum { M_PIPE, M_SINGLE, NMODE };
extern const char *const pname[NPEER];
extern const char *const mname[NMODE];

struct results {
	struct fig farm[NW], small_c, small_zc, lat1;
	double plain_rate, plain_fallback_frac;
	uint64_t small_keys;
	struct fig peer[NPEER][NMODE][NW];
	bool peer_ok[NPEER];
	double load_s, load_rate, peer_load_s[NPEER];
	struct farm_ht_stats hst;
	int ncpu, cores;
	double total_s;
};

/* kv_bench.c */
extern volatile sig_atomic_t interrupted;
extern uint64_t *g_samp; /* latency samples of all threads, for pcts */
extern struct results R;

/* kv_work.c */
double kb_zeta(uint64_t n, double theta);
void kb_zipf_init(struct zipf *z, uint64_t n, double zetan);
uint64_t kb_zipf_next(const struct zipf *z, uint64_t *rng);
void kb_gen_stream(uint32_t *s, unsigned len, int wl, uint64_t nkeys,
                   double zetan, uint64_t seed);
unsigned kb_shard_of_key(uint64_t i, unsigned n);
void kb_pcts(uint64_t *v, size_t n, double *p50, double *p99);
int kb_ncpus_allowed(int *first);
void kb_nap_ms(long ms);
bool kb_in_path(const char *prog);
/* Buckets per machine for @nkeys at --occupancy, and its region size. */
uint32_t kb_buckets_for(uint64_t nkeys);
uint64_t kb_region_for(uint32_t nb);

/* kv_mach.c: machine @id's process (forked by the coordinator). */
int kb_machine_main(uint32_t id, const char *base, uint64_t nkeys, int cpu);

/* kv_peer.c: load @which (P_MC, P_REDIS) and run the workloads on it. */
int kb_run_peer(int which, const char *tmp);

#endif
