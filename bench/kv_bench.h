/*
 * kv_bench's parts (kv_bench.c: the run and its steps, main; kv_opts.c: the
 * options; kv_cluster.c: the coordinator's cluster of machine processes and
 * the limit; kv_report.c: results and output; kv_mach.c: a machine process
 * and its operations; kv_peer.c: memcached and Redis, their clients;
 * kv_work.c: keys, values, key choice, small helpers). What kv_bench
 * measures: kv_bench.c's head. The same parts, but kv_bench.c, make
 * tests/perf's kv_local_bench, which adds the measurements of the store's
 * internal layout through struct kb_inner.
 */
#ifndef FARM_BENCH_KV_BENCH_H
#define FARM_BENCH_KV_BENCH_H

#include "benchnet.h"
#include "benchnode.h"
#include "benchpages.h"
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

/* The program's name in its messages (kv_local_bench builds these parts
 * with its own). */
#ifndef PROG
#define PROG "kv_bench"
#endif
#define MAXM       8
#define KLEN_MAX   250u /* memcached's limit (the store's is 256) */
#define VLEN_MAX   FARM_KV_MAX_VALUE
#define MGET_N     24u
#define SCAN_MAX   100u /* YCSB E: scans of 1..100 pairs, uniform */
#define SAMP_MAX   (1u << 16)
#define STREAM_LEN (1u << 20)
/* A stream entry: the operation in the top 3 bits, then a key number (a
 * recency rank for YCSB D's reads). Key numbers, inserted ones included,
 * stay below KEY_LIMIT. */
#define OP_SHIFT  29
#define KEY_MASK  ((1u << OP_SHIFT) - 1)
#define KEY_LIMIT (1ull << OP_SHIFT)
enum { OP_READ, OP_UPDATE, OP_INSERT, OP_SCAN, OP_RMW, OP_LOAD };
static inline uint32_t op_of(uint32_t s)
{
	return s >> OP_SHIFT;
}
static inline uint32_t key_of(uint32_t s)
{
	return s & KEY_MASK;
}
static inline uint32_t entry(uint32_t op, uint64_t k)
{
	return op << OP_SHIFT | ((uint32_t)k & KEY_MASK);
}
#define JOIN_MS     30000
#define NS          1000000000ull
#define STALL_NS    (60 * NS)
#define SMALL_KEYS  1000000ull
#define GOAL_RATE   5e6
#define GOAL_PEER_X 10.0
#define GOAL_P50_US 2.0
#define GOAL_SCALE  0.2
/* Against the memory system's limit measured in the same run
 * (bench/lib/memlimit.h): farm's lookups per core. */
#define GOAL_VS_LIMIT 0.3
/* The limit's batch: lookups prefetched and then completed together (also
 * kv_local_bench's plain loop's). */
#define PLAIN_BATCH 16u

/* Workloads: the default set (W_C .. W_LOCAL), then YCSB's core
 * workloads A to F (--mix). */
enum {
	W_C,
	W_B,
	W_A,
	W_ZC,
	W_ZB,
	W_ZA,
	W_MGET,
	W_LOCAL,
	W_YA,
	W_YB,
	W_YC,
	W_YD,
	W_YE,
	W_YF,
	/* Uniform over the keys of the other machines' shards: the unloaded
	 * latency of lookups that cross the fabric (never in a set). */
	W_RC,
	NW
};
enum { D_UNIFORM, D_ZIPF, D_LATEST, D_OWN, D_OTHERS };
struct wdesc {
	const char *name, *key;
	/* percentages of the operations that are not reads */
	int update, insert, scan, rmw;
	int dist; /* of the keys read, updated or scanned from */
};
extern const struct wdesc g_wdesc[NW];

/* CMD_OWN: each machine lists the loaded keys of its shard (for the
 * workloads on them), after the load; CMD_INNER: kv_local_bench's
 * measurement (struct kb_inner). */
enum {
	CMD_NONE,
	CMD_LOAD,
	CMD_OWN,
	CMD_RUN,
	CMD_LAT,
	CMD_LAT_OTHERS,
	CMD_INNER,
	CMD_STREAM, /* draw workload wl's key stream (before a timed run) */
	CMD_QUIT
};
enum { ST_INIT, ST_READY, ST_FAILED };

struct opts {
	unsigned machines, depth, load_depth, sample_every;
	uint64_t keys, log_size;
	double seconds, occupancy;
	bool quick, peers, small, pin;
	bool single_gets;  /* --single-gets: farm_kv_get per op, no window */
	bool alt_gets;     /* --alt-gets: window and single gets take turns */
	bool demo;         /* --demo: make demo's short run (print_demo) */
	char zk[256];      /* --zk: ZooKeeper membership */
	char zk_root[256]; /* per cluster start, under /libfarm */
	unsigned ksize, vsize; /* --key-size, --value-size */
	double theta;          /* --zipf */
	bool mix[NW];          /* --mix: the YCSB workloads to run */
	bool any_mix;
	struct bnet net; /* --fabric, --netns (benchnet.h) */
	char lookup[8];  /* --lookup: the machines' kv_lookup ("": auto) */
	unsigned pages;  /* --pages: BP_* asked for, 0: the default */
	bool secs_set;   /* --seconds given */
};
extern struct opts g_opt;

/* Inserted keys (YCSB D and E), numbered from the loaded ones on: the
 * next number, and the acknowledged ones as YCSB's
 * AcknowledgedCounterGenerator keeps them: every insert below @limit is
 * done (D reads only those), later ones are marked in a window. */
#define ACK_WINDOW (1u << 16)
struct inserts {
	_Atomic uint64_t next, limit;
	_Atomic int lock;
	_Atomic uint8_t done[ACK_WINDOW / 8];
};
/* Insert number @n is done. -EOVERFLOW when it is ACK_WINDOW past the
 * limit (cannot be: fewer are in flight). */
int kb_ins_ack(struct inserts *in, uint64_t n);

struct mres {
	uint64_t ops, gets, puts, keys, errors, notfound, ns;
	uint64_t inserts, scans, scan_pairs, rmws;
	uint64_t chain_fallbacks;
	uint64_t cpu_ns; /* CMD_INNER: its thread's CPU time */
	uint32_t nsamp;
	uint64_t samp[SAMP_MAX];
};

struct shared {
	_Atomic int seq; /* command number; machines act on a new one */
	/* Milliseconds, or 0: while this process measures the limit or a
	 * peer runs, machines with no command nap that long between idle
	 * passes (kb_machine_main). */
	_Atomic int nap;
	int cmd, wl;
	uint64_t nkeys;
	uint64_t go_ns, dur_ns, warm_ns;
	double zeta_n;      /* zipf: kb_zeta(nkeys, g_opt.theta) */
	struct inserts ins; /* YCSB D and E, over the cluster's life */
	struct {
		_Atomic int state, done;
		int err;
		_Atomic uint64_t loaded;
	} m[MAXM];
	farm_kv_table_stats hst[MAXM];
	farm_txm_stats tst[MAXM]; /* each machine's, after its last command */
	struct mres res[MAXM];
};
extern struct shared *g_sh;

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* The 8 nibbles of @x as 8 lower-case hex digits, nibble j (bits 4j..4j+3)
 * in byte j: each nibble spread to a byte of its own, then '0' added, and
 * 'a' - '0' - 10 more to the bytes whose nibble is 10 or more (the carry
 * out of nibble + 6). The bytes make_key's table loop writes, at a third
 * of its cost: every get of the machines' loops makes its key, and the
 * machines' CPU time is the figure's denominator. */
static inline uint64_t hex8(uint32_t x)
{
	uint64_t v = x;
	v = (v | (v << 16)) & 0x0000ffff0000ffffull;
	v = (v | (v << 8)) & 0x00ff00ff00ff00ffull;
	v = (v | (v << 4)) & 0x0f0f0f0f0f0f0f0full;
	uint64_t ten =
	        ((v + 0x0606060606060606ull) >> 4) & 0x0101010101010101ull;
	return v + 0x3030303030303030ull + ten * (uint64_t)('a' - '0' - 10);
}

/* Key @i, g_opt.ksize printable bytes, distinct for distinct @i: 16 hex
 * digits of a mix of @i (the default 16-byte key), longer keys padded
 * with more hex digits of further mixes; shorter ones (8..15) end with @i
 * in 5 base-64 digits (i < 2^30). */
static inline void make_key(uint64_t i, uint8_t *k)
{
	static const char hx[] = "0123456789abcdef";
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                          "abcdefghijklmnopqrstuvwxyz0123456789-_";
	uint64_t x = mix64(i * 2 + 1);
	unsigned n = g_opt.ksize, h = n >= 16 ? 16 : n - 5;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (n == 16) { /* the default: hex8's bytes in order */
		uint64_t lo = hex8((uint32_t)x), hi = hex8((uint32_t)(x >> 32));
		memcpy(k, &lo, 8);
		memcpy(k + 8, &hi, 8);
		return;
	}
#endif
	for (unsigned j = 0; j < h; j++)
		k[j] = (uint8_t)hx[(x >> (4 * j)) & 15];
	for (unsigned j = 16; j < n; j++) {
		if ((j & 15) == 0)
			x = mix64(x);
		k[j] = (uint8_t)hx[(x >> (4 * (j & 15))) & 15];
	}
	for (unsigned j = 0; n < 16 && j < 5; j++)
		k[h + j] = (uint8_t)b64[(i >> (6 * j)) & 63];
}

/* Value of key @i, g_opt.vsize bytes: @i, then a pattern that moves with
 * @gen (byte j is 'a' + (j + gen) % 26), copied 26 bytes at a time from
 * the alphabet twice over: a division per byte was 3% of a YCSB-A
 * operation's instructions, counted against the machines' cores. */
static inline void make_val(uint64_t i, uint32_t gen, uint8_t *v)
{
	static const char az2[] = "abcdefghijklmnopqrstuvwxyz"
	                          "abcdefghijklmnopqrstuvwxyz";
	memcpy(v, &i, 8);
	for (unsigned j = 8, n; j < g_opt.vsize; j += n) {
		n = g_opt.vsize - j < 26 ? g_opt.vsize - j : 26;
		memcpy(v + j, az2 + (j + gen) % 26, n);
	}
}

static inline bool val_ok(uint64_t i, const void *v, uint32_t len)
{
	return len == g_opt.vsize && memcmp(v, &i, 8) == 0;
}

/* YCSB's zipfian generator (Gray et al.), theta --zipf (0.99), ranks
 * scrambled over the key space by a hash so hot keys fall on every
 * shard (kb_zipf_rank: unscrambled, for YCSB D's recency). */
struct zipf {
	uint64_t n;
	double theta, alpha, zetan, eta, half_pow;
};

struct fig {
	bool have;
	double ops, keys, gets, puts; /* per second, all threads */
	double inserts, scans, scan_pairs, rmws;
	double p50_ns, p99_ns;
	uint64_t errors, notfound;
	/* CPU cores the servers used during the run (farm: every machine
	 * process, progress threads included; peers: the server process),
	 * and the peers' client threads */
	double cores, client_cores;
};

enum { P_MC, P_REDIS, NPEER };
enum { M_PIPE, M_SINGLE, NMODE };
extern const char *const pname[NPEER];
extern const char *const mname[NMODE];

struct results {
	/* lat1: unloaded, every key; lat1o: keys of other machines only */
	struct fig farm[NW], small_c, small_zc, lat1, lat1o;
	/* The limit loop (memlimit.h) over a table of the cluster's size:
	 * PLAIN_BATCH in flight, --depth in flight (farm's engine's), one at
	 * a time; the table's bytes and its span. */
	double limit_plain, limit_depth, limit_one;
	/* per second of the loop's CPU time */
	/* limit_depth_cpu: in turns with uniform C where limit_farm_cpu,
	 * that run's lookups per second of the machines' CPU time, is
	 * not 0 (kb_run_limit) */
	double limit_depth_cpu, limit_plain_cpu, limit_farm_cpu;
	uint64_t limit_bytes;
	uint32_t limit_span;
	uint64_t small_keys;
	struct fig peer[NPEER][NMODE][NW];
	struct fig peer_lat1[NPEER]; /* one connection, one GET in flight */
	bool peer_ok[NPEER];
	double load_s, load_rate, peer_load_s[NPEER];
	farm_kv_table_stats hst;
	int ncpu, cores;
	double total_s;
	/* The pages of the machines' region files (BP_*; 0: not files, ofi)
	 * and what smaps showed of them after the load: every machine's
	 * mappings under the cluster's directory; the limit table's. */
	unsigned pages;
	struct bp_huge huge, limit_huge;
};

/* kv_cluster.c */
extern volatile sig_atomic_t interrupted;
extern uint64_t *g_samp; /* latency samples of all threads, for pcts */
extern struct results g_res;

/* The signals, the shared page (g_sh), the samples; where the machines'
 * directories go (*@tmp). 0, or 1 (said on stderr). */
int kb_setup(const char **tmp);

/* The line that opens a run's output: the machines, CPUs, keys, depth
 * and "S s per @per" (workload or measurement). */
void kb_say_start(const char *per);

/* After a run that returned @rc: 0 to go on; else the exit status, said on
 * stderr: 130 when interrupted ("PROG: interrupted@note"), 1 when @rc is
 * an error. */
int kb_exit_status(int rc, const char *note);

struct cluster {
	char base[256];
	pid_t pid[MAXM];
	unsigned n;
	uint64_t nkeys;
	bool warmed; /* a measured command has run (kb_cluster_cmd) */
};
/* Start g_opt.machines machine processes with @nkeys keys' room under
 * @tmp, again up to 3 times when joining timed out. 0 or an error (said). */
int kb_cluster_start(struct cluster *c, uint64_t nkeys, const char *tmp);
/* Post a command; wait until every machine has done it. */
int kb_cluster_cmd(struct cluster *c, int cmd, int wl, double secs,
                   bool progress);
void kb_cluster_stop(struct cluster *c);
/* Load the keys (g_res.load_s and load_rate when @full). */
int kb_cluster_load(struct cluster *c, bool full);
/* Run workload @w for --seconds into @f (its rate, the machines' cores)
 * and say so. */
int kb_cluster_run(struct cluster *c, int w, struct fig *f);
/* The same for @secs. */
int kb_cluster_run_for(struct cluster *c, int w, double secs, struct fig *f);
/* The machines' results into @f (all of them). */
void kb_collect(unsigned n, struct fig *f);
/* CPU time so far of the processes @pid[0..n-1], in ns. */
uint64_t kb_cpu_of(const pid_t *pid, unsigned n);
/* The limit loop over a table of the cluster's shards' size and layout,
 * into g_res. @with_c (kv_bench): --depth in flight is measured in turns
 * with uniform C on @c (limit_farm_cpu). Else (kv_local_bench) the
 * caller measured 16 in flight (limit_plain, limit_plain_cpu) in turns
 * with its plain loop, and --depth is measured once. */
int kb_run_limit(struct cluster *c, bool with_c);
/* About the bytes the machines and the limit keep under /dev/shm at
 * --keys (for the private tmpfs's size, benchpages.h). */
uint64_t kb_shm_need(void);

/* kv_opts.c: the options into g_opt (@usage: --help's text); 0, or
 * -EINVAL (said on stderr). */
int kb_parse_opts(int argc, char **argv, void (*usage)(FILE *));

/* kv_report.c: the summary and the JSON line of a run (print_all), or
 * the demo's lines (print_demo). */
void print_all(void);
/* With --pages both: each page size's farm figures (in order measured),
 * for the summary and the JSON line; g_res holds the judged one's. */
extern const struct results *g_pages_res[2];
void print_demo(bool mc_skipped);
/* A workload's figures as a JSON member (@ycsb: with inserts, scans,
 * read-modify-writes and reads not found), and a goal. */
void kb_jfig(const char *name, const struct fig *f, bool ycsb, bool comma);
void kb_jgoal(const char *name, double v, bool have, double target, bool met,
              const char *cmp, bool comma);

/* kv_work.c */
double kb_zeta(uint64_t n, double theta);
void kb_zipf_init(struct zipf *z, uint64_t n, double zetan);
uint64_t kb_zipf_rank(const struct zipf *z, uint64_t *rng);
uint64_t kb_zipf_next(const struct zipf *z, uint64_t *rng);
/* A stream of operations (entry()) for workload @wl over @nkeys keys
 * (D_OWN: over the @nown key numbers in @own, with their zeta @zetan). */
void kb_gen_stream(uint32_t *s, unsigned len, int wl, uint64_t nkeys,
                   double zetan, uint64_t seed, const uint32_t *own,
                   uint64_t nown);
/* YCSB D's read: the key @rank places before the latest of @inserted
 * keys inserted after the @nkeys loaded ones. */
static inline uint64_t latest_key(uint64_t nkeys, uint64_t inserted,
                                  uint64_t rank)
{
	uint64_t n = nkeys + inserted;
	return rank < n ? n - 1 - rank : 0;
}
/* The inline sizes of the table's slots for g_opt.ksize and g_opt.vsize: keys
 * up to 64 bytes and values up to VAL_INLINE_MAX in the bucket, longer ones in
 * an object of their own. Not the table's 1 KiB limit: every put rewrites the
 * buckets around its key, the owner combines up to 64 puts in one transaction,
 * and with 4 KiB buckets such a transaction outgrew the log (commits waited for
 * room, retried, and puts timed out at 10 s: bench/README.md, YCSB's knobs).
 */
#define VAL_INLINE_MAX 128u
uint32_t kb_key_inline(void);
uint32_t kb_val_inline(void);
void kb_pcts(uint64_t *v, size_t n, double *p50, double *p99);
int kb_ncpus_allowed(int *first);
void kb_nap_ms(long ms);
bool kb_in_path(const char *prog);
/* Buckets per machine for @nkeys at --occupancy, and its region size. */
uint32_t kb_buckets_for(uint64_t nkeys);
uint64_t kb_region_for(uint32_t nb, uint64_t nkeys);
/* What a bucket takes for those inline sizes (src/hashtable's layout). */
uint32_t kb_bucket_bytes(void);

/* kv_mach.c: machine @id's process (forked by the coordinator). */
int kb_machine_main(uint32_t id, const char *base, uint64_t nkeys, int cpu);

/* A machine process's node and store. */
struct mach {
	uint32_t id;
	farm_node *node;
	farm_loop *loop;
	farm_kv *kv;
	uint64_t nkeys;
	const char *base; /* the cluster's directory (kb_machine_main) */
	uint32_t *stream;
	int stream_wl; /* the workload m->stream was made for, + 1 */
	uint32_t *own; /* key numbers of this machine's shard */
	uint64_t nown;
	double zeta_own; /* zipf over them (YCSB E's scan starts) */
};
/* m->stream for workload @wl. 0, -ENOMEM, -ENOENT (no key of its own). */
int kb_make_stream(struct mach *m, int wl);

/* What kv_local_bench (tests/perf) adds, on the store's internal layout
 * (NULL in kv_bench, which has the public API alone): on each machine once
 * the store joined (@ready), machine 0's CMD_INNER (@cmd, for @dur ns, its
 * figures into g_sh->res[0]), and YCSB E's scan (@scan_from: the pairs of
 * this machine's shard from the home bucket of @key on, in the table's
 * order, as farm_kv_iterate_local visits them; the pairs visited or an
 * error). */
struct kb_inner {
	int (*ready)(struct mach *m);
	int (*cmd)(struct mach *m, uint64_t dur);
	long (*scan_from)(struct mach *m, const void *key, uint32_t klen,
	                  farm_kv_iter_fn fn, void *ctx);
};
extern const struct kb_inner *const kb_inner;

/* Whether workload @w runs (on a peer: @peer): the default set, or the
 * --mix workloads (YCSB E not on the peers: they have no scan). */
bool kb_runs(int w, bool peer);

/* kv_peer.c: load @which (P_MC, P_REDIS) and run the workloads on it
 * (with --netns in machine 0's namespace, after kb_peer_netns):
 * kb_peer_open, kb_peer_settle, kb_peer_run for each mode and workload
 * kb_peer_wants, kb_peer_close. */
int kb_run_peer(int which, const char *tmp);
/* Start @which and load the keys. 0, or a negative code (said on
 * stderr; nothing left running). */
int kb_peer_open(int which, const char *tmp);
/* Warm the open @which up (pipelined uniform C, not counted) until its
 * rate stops climbing, or 30 s. 0, or a negative code. */
int kb_peer_settle(int which);
/* Stop the open @which's process (@hold) or let it go on: left running,
 * the peers took a quarter of the machines' CPU in two workloads. */
void kb_peer_hold(int which, bool hold);
/* Whether the peers run workload @w in mode @mode (M_PIPE, M_SINGLE). */
bool kb_peer_wants(int mode, int w);
/* One run of workload @w in @mode on the open @which for @secs, into
 * @f, and say so. 0, or a negative code (said). */
int kb_peer_run(int which, int mode, int w, double secs, struct fig *f);
/* After the runs (@rc: their outcome): the unloaded GET (not --demo or
 * --mix) when @rc is 0, then stop @which. g_res.peer_ok[which] set when
 * all went well. The outcome. */
int kb_peer_close(int which, int rc);
/* --netns: the peers listen on machine 0's address, not loopback. 0, or
 * -EINVAL (said on stderr). */
int kb_peer_netns(void);

#endif
