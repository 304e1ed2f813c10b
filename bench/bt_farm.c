/*
 * bt_bench's libfarm system: two machine processes on this host (shm
 * fabric, static membership, 2 replicas). Machine 1 (a child process)
 * makes the tree and loads it, so every node starts on machine 1; machine
 * 0 (this process, one loop on its own thread) opens the tree by name and
 * runs the workloads: with a warm cache, a lookup is one READ of a leaf
 * on machine 1. Inserts split on machine 0.
 */
#include "bt_bench.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchnode.h"
#include "benchutil.h"

#define PROG     "bt_bench"
#define JOIN_MS  30000
#define LOAD_TXN 2048 /* sorted entries per loading transaction */
/* Machine 1 only serves (the leaves' LOCKs and COMMIT-PRIMARYs): it parks
 * 10 us after its last message rather than the default 200 us, which
 * during YCSB-E (an insert every ~0.5 ms) spent about 100 us of spinning
 * per insert there, half of the run's CPU. 10 us still catches a commit's
 * COMMIT-PRIMARY right after its LOCK reply on a quiet host. */
#define SERVER_PARK_US "10"
/* Machine 0's LOCK records wait up to 1 ms for company before their
 * doorbell (lazy_bell_us), so one wake-up of machine 1 takes the LOCKs
 * of several inserts (YCSB-E starts one every 100-250 us) instead of one
 * each: a wake-up costs both processes a futex and a context switch,
 * most of an insert's CPU. The price is up to 1 ms more commit latency
 * while machine 0 is busy (pipelined inserts count at their commit, as
 * Redis's count at their pipeline's reply); a loop that waits for an
 * answer rings at once. */
#define CLIENT_BELL_US "1000"

struct mach {
	farm_node *node;
	farm_kv *kv;
	farm_loop *loop;
	farm_bt *bt;
};

static struct mach g_mach;
static pid_t child = -1;
static int to_child = -1;
static farm_bt_stats last;

static int open_machine(unsigned id, const char *base, struct mach *m)
{
	farm_conf *c;
	if (bn_conf_new(PROG, &c))
		return -ENOMEM;
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/m%u", base, id);
	mkdir(dir, 0700);
	char idv[16];
	snprintf(idv, sizeof(idv), "%u", id);
	int rc = bn_set(PROG, c, "machine_id", idv) |
	         bn_set(PROG, c, "data_dir", dir) |
	         bn_set(PROG, c, "region_size", "256M") |
	         bn_set(PROG, c, "threads", "1") |
	         bn_set(PROG, c, "replicas", "2") |
	         bn_set(PROG, c, "park_after_us",
	                id == 1 ? SERVER_PARK_US : "200") |
	         bn_set(PROG, c, "lazy_bell_us",
	                id == 0 ? CLIENT_BELL_US : "0") |
	         bn_peers(PROG, c, id, 2, base);
	rc = rc ? -EINVAL : bn_open(PROG, c, id, &m->node);
	farm_conf_free(c);
	if (rc)
		return rc;
	if ((rc = farm_kv_create(m->node, NULL, 1024, &m->kv)))
		return rc;
	farm_node_set_app_loops(m->node, true);
	if ((rc = farm_node_start(m->node, JOIN_MS)) ||
	    (rc = farm_node_loop_open(m->node, 0, &m->loop)) ||
	    (rc = farm_node_wait_members(m->node, 2, JOIN_MS)) ||
	    (rc = farm_kv_attach(m->kv, m->loop)))
		return rc;
	return farm_kv_join_sync(m->kv, m->loop, 2, JOIN_MS);
}

static void close_machine(struct mach *m)
{
	farm_bt_close(m->bt);
	if (m->loop) {
		farm_kv_detach(m->kv, m->loop);
		farm_node_loop_close(m->node, m->loop);
	}
	farm_node_close(m->node);
	farm_kv_destroy(m->kv);
	*m = (struct mach){0};
}

/* Machine 1: n keys in sorted order, bulk-appended (farm_bt_append),
 * LOAD_TXN to a transaction: each leaf is written once, three quarters
 * full, instead of a descent and a leaf copy per key. */
static int load(struct mach *m, uint64_t n)
{
	farm_txm *txm = farm_node_txm(m->node);
	static struct farm_bt_entry e[LOAD_TXN];
	static uint8_t kb[LOAD_TXN][8];
	static uint64_t v[LOAD_TXN];
	for (uint64_t i = 0; i < n;) {
		size_t k = 0;
		for (uint64_t j = i; j < n && k < LOAD_TXN; j++, k++) {
			farm_bt_key_u64(2 * j, kb[k]);
			v[k] = BB_VAL(2 * j);
			e[k] = (struct farm_bt_entry){.key = kb[k],
			                              .klen = 8,
			                              .val = &v[k],
			                              .vlen = 8};
		}
		farm_tx *tx = NULL;
		int rc = farm_tx_begin(txm, m->loop, &tx);
		if (!rc)
			rc = farm_bt_append(m->bt, tx, m->loop, e, k);
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (rc && !farm_tx_retryable(rc))
			return rc;
		if (!rc)
			i += k;
	}
	return 0;
}

/* Machine 1's process: make, load, say 'R', serve until the pipe ends. */
static int machine1(const char *base, uint64_t n, int in, int out)
{
	struct mach m = {0};
	int rc = open_machine(1, base, &m);
	struct farm_bt_attr a = {.key_max = 8, .val_max = 8};
	if (!rc)
		rc = farm_bt_create_sync(m.kv, farm_node_txm(m.node), m.loop,
		                         "bench", &a, &m.bt);
	uint64_t t0 = bb_now_ns();
	if (!rc)
		rc = load(&m, n);
	if (rc)
		fprintf(stderr, PROG ": machine 1: %s\n", farm_strerror(rc));
	else
		printf("# libfarm machine 1: %llu keys appended in %.1f s "
		       "(%.0f keys/s)\n",
		       (unsigned long long)n, (double)(bb_now_ns() - t0) / 1e9,
		       (double)n / ((double)(bb_now_ns() - t0) / 1e9));
	fflush(stdout);
	char b = rc ? 'E' : 'R';
	if (write(out, &b, 1) != 1)
		rc = -EIO;
	static const volatile int never = 0;
	farm_msg_stats s0, s1;
	farm_msg_stats_get(farm_node_msg(m.node), m.loop, &s0);
	for (;;) {
		struct pollfd p = {.fd = in, .events = POLLIN};
		if (poll(&p, 1, 0) > 0)
			break;
		(void)farm_loop_wait(m.loop, &never, 100000000ull);
	}
	/* How often serving slept: each park is a wake to pay for. */
	farm_msg_stats_get(farm_node_msg(m.node), m.loop, &s1);
	printf("# libfarm machine 1: served the workloads with %llu parks, "
	       "%llu messages sent\n",
	       (unsigned long long)(s1.parks - s0.parks),
	       (unsigned long long)(s1.sent - s0.sent));
	fflush(stdout);
	close_machine(&m);
	return rc ? 1 : 0;
}

static int farm_get(void *ctx, uint64_t k, uint64_t *v)
{
	(void)ctx;
	uint8_t kb[8];
	uint32_t len;
	farm_bt_key_u64(k, kb);
	return farm_bt_get(g_mach.bt, NULL, g_mach.loop, kb, 8, v, 8, &len);
}

static int farm_put(void *ctx, uint64_t k, uint64_t v)
{
	(void)ctx;
	uint8_t kb[8];
	farm_bt_key_u64(k, kb);
	return farm_bt_put(g_mach.bt, NULL, g_mach.loop, kb, 8, &v, 8);
}

static bool sum_cb(void *ctx, const void *k, uint32_t kl, const void *v,
                   uint32_t vl)
{
	(void)k, (void)kl, (void)vl;
	uint64_t x;
	memcpy(&x, v, sizeof(x)); /* values are unaligned in the leaf */
	*(uint64_t *)ctx += x;
	return true;
}

static long farm_scan(void *ctx, uint64_t k, uint32_t n)
{
	(void)ctx;
	uint8_t kb[8];
	uint64_t sum = 0;
	farm_bt_key_u64(k, kb);
	struct farm_bt_range r = {.start = kb, .start_len = 8, .limit = n};
	return farm_bt_scan(g_mach.bt, NULL, g_mach.loop, &r, sum_cb, &sum);
}

/*
 * Inserts pipelined as Redis's are: each is a transaction of its own
 * (locate and write the leaf, split if it must), committed asynchronously,
 * up to BB_PIPELINE commits in flight, as that many clients with one
 * insert each would have; an insert counts once its commit is reported.
 * Lookups and scans stay synchronous (lock-free READs, no round trip
 * that a pipeline would hide). A retryable outcome runs the insert again.
 */
struct pend {
	uint64_t key;
	int outcome;
	bool busy, done;
};

static struct pend pend[BB_PIPELINE];
static unsigned inflight;
static volatile int commit_seen; /* farm_loop_wait's flag */

static void put_done(farm_loop *loop, void *ctx, int outcome)
{
	(void)loop;
	struct pend *p = ctx;
	p->outcome = outcome;
	p->done = true;
	inflight--;
	commit_seen = 1;
}

/* Start @p's insert: its transaction up to the commit, tried again while
 * the part before the commit fails retryably. */
static int put_start(struct pend *p)
{
	farm_txm *txm = farm_node_txm(g_mach.node);
	for (unsigned t = 0; t < FARM_TX_RUN_TRIES; t++) {
		farm_tx *tx = NULL;
		int rc = farm_tx_begin(txm, g_mach.loop, &tx);
		if (rc)
			return rc;
		uint8_t kb[8];
		uint64_t v = BB_VAL(p->key);
		farm_bt_key_u64(p->key, kb);
		rc = farm_bt_put(g_mach.bt, tx, g_mach.loop, kb, 8, &v, 8);
		if (!rc) {
			*p = (struct pend){.key = p->key, .busy = true};
			inflight++;
			rc = farm_tx_commit(tx, put_done, p);
			if (rc) {
				p->busy = false;
				inflight--;
			}
		}
		farm_tx_free(tx); /* a commit in flight outlives it */
		if (!rc)
			return 0;
		if (!farm_tx_retryable(rc))
			return rc;
	}
	return -EBUSY;
}

/* Count the commits reported, start the retryable ones again. */
static int harvest(struct bb_res *r)
{
	commit_seen = 0;
	for (unsigned i = 0; i < BB_PIPELINE; i++) {
		struct pend *p = &pend[i];
		if (!p->busy || !p->done)
			continue;
		p->busy = false;
		if (!p->outcome) {
			r->ops++;
			continue;
		}
		if (!farm_tx_retryable(p->outcome))
			return p->outcome;
		int rc = put_start(p);
		if (rc)
			return rc;
	}
	return 0;
}

/* A free slot for an insert, waiting for a commit while all are busy. */
static int free_slot(struct bb_res *r, struct pend **out)
{
	for (;;) {
		int rc = harvest(r);
		if (rc)
			return rc;
		for (unsigned i = 0; i < BB_PIPELINE; i++)
			if (!pend[i].busy) {
				*out = &pend[i];
				return 0;
			}
		rc = farm_loop_wait(g_mach.loop, &commit_seen, 0);
		if (rc)
			return rc;
	}
}

static int farm_one(struct bb_gen *g, struct bb_res *r)
{
	struct bb_opd o;
	bb_gen_next(g, &o);
	if (o.op == BB_PUT) {
		struct pend *p;
		int rc = free_slot(r, &p);
		if (!rc) {
			p->key = o.key;
			rc = put_start(p);
		}
		return rc;
	}
	long n;
	if (o.op == BB_GET) {
		uint64_t v;
		n = farm_get(NULL, o.key, &v);
		if (n && n != -ENOENT)
			return (int)n;
		r->misses += n != 0 || v != BB_VAL(o.key);
		n = 0;
	} else {
		n = farm_scan(NULL, o.key, o.len);
		r->entries += n > 0 ? (uint64_t)n : 0;
	}
	if (n < 0)
		return (int)n;
	r->ops++;
	return commit_seen ? harvest(r) : 0;
}

static int farm_run(void *ctx, struct bb_gen *g, double secs, struct bb_res *r)
{
	(void)ctx;
	uint64_t t0 = bb_now_ns(), end = t0 + (uint64_t)(secs * 1e9);
	int rc = 0;
	while (!rc && bb_now_ns() < end)
		for (int i = 0; !rc && i < 16; i++)
			rc = farm_one(g, r);
	while (!rc && inflight) { /* drain: the run ends when they commit */
		int w = farm_loop_wait(g_mach.loop, &commit_seen, 0);
		rc = w ? w : harvest(r);
	}
	r->wall_ns = bb_now_ns() - t0;
	return rc;
}

static uint64_t farm_cpu(void *ctx)
{
	(void)ctx;
	return bu_proc_cpu_ns(0) + (child > 0 ? bu_proc_cpu_ns(child) : 0);
}

double bb_farm_reads_per_lookup(void)
{
	farm_bt_stats s;
	farm_bt_stats_get(g_mach.bt, &s);
	uint64_t l = s.lookups - last.lookups;
	double r = l ? (double)(s.leaf_reads - last.leaf_reads + s.inner_reads -
	                        last.inner_reads) /
	                           (double)l
	             : 0;
	last = s;
	return r;
}

/* Machine 0's cache of internal nodes, warmed once: a lookup every
 * WARM_STRIDE keys passes through every node of level 1 (each covers
 * about 30 leaves of 36 keys after the load), where a random warm-up
 * needs several times the lookups (each node met by chance) and, at 10M
 * keys, more than a workload's quarter-second warm-up gives. */
#define WARM_STRIDE 512u

static int warm_cache(uint64_t n)
{
	uint64_t t0 = bb_now_ns(), looks = 0;
	for (uint64_t i = 0; i < n; i += WARM_STRIDE, looks++) {
		uint64_t v;
		int rc = farm_get(NULL, 2 * i, &v);
		if (rc)
			return rc;
	}
	(void)bb_farm_reads_per_lookup(); /* not the workloads' */
	printf("# libfarm machine 0: cache warmed by %llu lookups (one per "
	       "%u keys) in %.1f s\n",
	       (unsigned long long)looks, WARM_STRIDE,
	       (double)(bb_now_ns() - t0) / 1e9);
	return 0;
}

int bb_farm_start(uint64_t n, struct bb_sys *s, const char *base)
{
	int down[2], up[2];
	if (pipe(down) || pipe(up))
		return -errno;
	fflush(NULL);
	child = fork();
	if (child < 0)
		return -errno;
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(down[1]);
		close(up[0]);
		_exit(machine1(base, n, down[0], up[1]));
	}
	close(down[0]);
	close(up[1]);
	to_child = down[1];
	int rc = open_machine(0, base, &g_mach);
	char b = 0;
	static const volatile int never = 0;
	while (!rc) { /* serve machine 1's requests while it loads */
		struct pollfd p = {.fd = up[0], .events = POLLIN};
		if (poll(&p, 1, 0) > 0)
			break;
		(void)farm_loop_wait(g_mach.loop, &never, 10000000ull);
	}
	if (!rc && (read(up[0], &b, 1) != 1 || b != 'R'))
		rc = -EIO;
	close(up[0]);
	if (!rc)
		rc = farm_bt_open_sync(g_mach.kv, farm_node_txm(g_mach.node),
		                       g_mach.loop, "bench", &g_mach.bt);
	if (!rc)
		rc = warm_cache(n);
	if (rc)
		return rc;
	*s = (struct bb_sys){.name = "libfarm",
	                     .get = farm_get,
	                     .put = farm_put,
	                     .scan = farm_scan,
	                     .run = farm_run,
	                     .cpu_ns = farm_cpu};
	return 0;
}

void bb_farm_stop(void)
{
	if (g_mach.bt) {
		farm_txm_stats t;
		farm_bt_stats b;
		farm_txm_stats_get(farm_node_txm(g_mach.node), &t);
		farm_bt_stats_get(g_mach.bt, &b);
		printf("# libfarm machine 0: %llu commits (%llu WRITEs, "
		       "%llu messages), %llu aborted (conflict, validation); "
		       "%llu lock-free reads, %llu retried (object locked); "
		       "B-tree: %llu lookups, %llu "
		       "leaf and %llu internal READs, %llu cache hits, %llu "
		       "fence misses, %llu splits\n",
		       (unsigned long long)t.commits,
		       (unsigned long long)t.commit_writes,
		       (unsigned long long)t.commit_msgs,
		       (unsigned long long)(t.aborts_conflict +
		                            t.aborts_validation),
		       (unsigned long long)t.lf_reads,
		       (unsigned long long)t.lf_retries,
		       (unsigned long long)b.lookups,
		       (unsigned long long)b.leaf_reads,
		       (unsigned long long)b.inner_reads,
		       (unsigned long long)b.cache_hits,
		       (unsigned long long)b.fence_misses,
		       (unsigned long long)b.splits);
	}
	if (to_child >= 0)
		close(to_child); /* machine 1 stops serving */
	to_child = -1;
	static const volatile int never = 0;
	if (child > 0) {
		/* Serve it while it leaves: it closes its node first. */
		while (waitpid(child, NULL, WNOHANG) != child && g_mach.loop)
			(void)farm_loop_wait(g_mach.loop, &never, 10000000ull);
		if (!g_mach.loop)
			waitpid(child, NULL, 0);
	}
	child = -1;
	close_machine(&g_mach);
}
