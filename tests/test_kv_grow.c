/*
 * The KV store grows with the cluster: 3 machine processes joined through
 * a real ZooKeeper (scripts/zk-local), 3 replicas, growth on (config
 * grow = 1), a store of KV_SHARDS shards per machine, each in a region of
 * its own. Every machine runs a workload from the start: the first three
 * put their own keys (values that only grow: a put's sequence number) and
 * every machine gets keys of every shard, each operation blocking, in a
 * loop. Three machines with new ids and empty directories then join one
 * after another; each is late, becomes the extra backup of its share,
 * grows into an ordinary member (primary of part of its share, the
 * shards whose bucket regions it took over among them) and runs the gets
 * too. The next joins once the previous has grown. Then the workload
 * stops. Checks:
 *   - every joiner grew (left the late list) within GROW_MS of joining;
 *   - every machine serves within 20% of even of the 3 x KV_SHARDS
 *     shards (the manager places the shard regions: src/coord/balance.c)
 *     and is the primary of within 20% of even of the regions (the
 *     spread of shards and of primaries is printed);
 *   - no operation failed with an error that is not retryable;
 *   - the lookups never stopped: on each machine the longest time between
 *     two successful gets is printed (and must be below GAP_MAX_MS, a
 *     hang detector on a loaded 2-core host, not a speed figure);
 *   - every key is readable on every machine and holds a value at least
 *     its last acknowledged put and at most its last attempted one (no
 *     acknowledged write lost);
 *   - then the last grower, primary of the shard regions the manager
 *     pinned to it, is killed: the survivors serve every shard again (its
 *     regions fall back to the rings' lists, their first surviving backup
 *     promoted) and every key still reads as above.
 * --broken (FARM_FP_BALANCE_OFF: the manager places nothing, the rings
 * alone spread the shards) must see a machine off the 20% bound (the
 * rings alone keep every machine within it in about 3% of draws).
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 3
#include "nodeproc.h"
#include "kvproc.h"
#include "brokenarg.h"

#include <inttypes.h>
#include <signal.h>

#include "addrspace/addrspace.h"
#include "coord/membership.h"
#include "hashtable/ht.h"
#include "kv/kv.h"
#include "node/node.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define NM    NP_NM
#define NGROW 3u /* machines that join late and grow: 3 -> 6 */
#define NALLM (NM + NGROW)
/* Shards per original machine: 48 in all, 8 per machine once grown. */
#define KV_SHARDS 16u
#define NSHARDS   (NM * KV_SHARDS)
/* Within 20% of even (8 of 48 over 6): 7 to 9 shards. */
#define SPREAD_MIN ((4u * NSHARDS + 5u * NALLM - 1) / (5u * NALLM))
#define SPREAD_MAX (6u * NSHARDS / (5u * NALLM))
#define RSIZE      "8M"
#define NBUCKETS   1024u /* per machine, shared among its shards */
#define NKEYS      64u   /* per writing machine */
#define SESSION_MS 4000
#define LEASE_US   200000u
#define JOIN_MS    60000
#define GROW_MS    120000
#define GAP_MAX_MS 30000
#define VLEN       16u
#define SYNC_NS    (2ull * 1000000000ull)

static char zk_dir[256], zk_connect[64], zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static struct np_cluster cl, late_cl;
static bool broken;

/* ---- the machines ---------------------------------------------------- */

/* 'g' -> 'g': where the machine stands. */
struct state_report {
	uint64_t config;
	bool late;
	unsigned shards, primaries, regions;
};

/* 'S' -> 'S': the workload's figures, then the sequence numbers of the
 * machine's own keys (writers only). */
struct run_report {
	uint64_t gets, gets_ok, puts, puts_ok, retryable, fatal;
	int first_fatal;
	char first_fatal_op; /* 'p' put, 'g' get */
	uint64_t gap_max_ns;
	uint64_t acked[NKEYS], tried[NKEYS];
};

/* 'F' -> 'F': every writer's keys read back (sequence, or an error). */
struct fin_report {
	int status[NM][NKEYS];
	uint64_t seq[NM][NKEYS];
};

struct ch {
	struct np_child np;
	farm_kv *kv;
	uint32_t id; /* machine id (a joiner's is NM + its slot) */
	bool writer;
	struct run_report r;
};

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void mkkey(uint8_t *k, uint32_t m, uint32_t j)
{
	memset(k, 0, 12);
	memcpy(k, "grow", 4);
	memcpy(k + 4, &m, 4);
	memcpy(k + 8, &j, 4);
}

static void mkval(uint8_t *v, uint64_t seq)
{
	memset(v, 0xa5, VLEN);
	memcpy(v, &seq, 8);
}

static void report_state(struct ch *c, struct state_report *s)
{
	memset(s, 0, sizeof(*s));
	s->config = farm_node_config_id(c->np.node);
	struct farm_view *v = malloc(sizeof(*v));
	if (v && !farm_node_view(c->np.node, v))
		s->late = farm_ids_have(v->late, v->nlate, c->id);
	free(v);
	farm_ht *ht = farm_kv_table(c->kv);
	for (unsigned i = 0; i < NSHARDS; i++)
		s->shards += farm_ht_serves(ht, i);
	struct farm_as_held hl[512];
	unsigned n = farm_as_held(farm_node_as(c->np.node), hl, 512);
	s->regions = FARM_MIN(n, 512u);
	for (unsigned i = 0; i < s->regions; i++)
		s->primaries += hl[i].role == FARM_AS_PRIMARY;
}

static void tally(struct ch *c, int rc, char op)
{
	if (!rc || rc == -ENOENT)
		return;
	if (farm_tx_retryable(rc) || rc == -ETIMEDOUT) {
		c->r.retryable++;
		return;
	}
	if (!c->r.fatal++) {
		c->r.first_fatal = rc;
		c->r.first_fatal_op = op;
		fprintf(stderr, "m%u: %s: %s\n", c->id,
		        op == 'p' ? "put" : "get", farm_strerror(rc));
	}
}

/* One put of this machine's key @j (writers), one get of any key. */
static void step(struct ch *c, uint64_t *last_ok)
{
	uint8_t k[12], v[VLEN];
	uint32_t len = 0;
	if (c->writer) {
		uint32_t j = (uint32_t)(rnd(&c->np.rng) % NKEYS);
		uint64_t seq = ++c->r.tried[j] > c->r.acked[j]
		                       ? c->r.tried[j]
		                       : (c->r.tried[j] = c->r.acked[j] + 1);
		mkkey(k, c->id, j);
		mkval(v, seq);
		int rc = farm_kv_put_sync(c->kv, c->np.loop, k, 12, v, VLEN);
		c->r.puts++;
		if (!rc) {
			c->r.puts_ok++;
			c->r.acked[j] = seq;
		}
		tally(c, rc, 'p');
	}
	uint32_t m = (uint32_t)(rnd(&c->np.rng) % NM);
	uint32_t j = (uint32_t)(rnd(&c->np.rng) % NKEYS);
	mkkey(k, m, j);
	int rc = farm_kv_get_sync(c->kv, c->np.loop, k, 12, v, sizeof(v), &len);
	c->r.gets++;
	uint64_t now = np_now_ns();
	if (!rc || rc == -ENOENT) {
		c->r.gets_ok++;
		if (now - *last_ok > c->r.gap_max_ns)
			c->r.gap_max_ns = now - *last_ok;
		*last_ok = now;
	}
	tally(c, rc, 'g');
}

static int fin_read(struct ch *c)
{
	struct fin_report *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	for (uint32_t m = 0; m < NM; m++)
		for (uint32_t j = 0; j < NKEYS; j++) {
			uint8_t k[12], v[VLEN];
			uint32_t len = 0;
			mkkey(k, m, j);
			int rc;
			for (int t = 0; t < 50; t++) {
				rc = farm_kv_get_sync(c->kv, c->np.loop, k, 12,
				                      v, sizeof(v), &len);
				if (rc != -EAGAIN && rc != -ETIMEDOUT &&
				    rc != FARM_EPEERDEAD)
					break;
			}
			f->status[m][j] = rc;
			if (!rc && len == VLEN)
				memcpy(&f->seq[m][j], v, 8);
			else if (!rc)
				f->status[m][j] = FARM_ECORRUPT;
		}
	int rc = np_say(&c->np, 'F', f, sizeof(*f));
	free(f);
	return rc;
}

/* Commands: 'G' start the workload, 'g' the state, 'S' stop it (report),
 * 'F' read every key, 'Q' quit. */
static int body(void *arg)
{
	struct ch *c = arg;
	farm_kv_set_sync_timeout(c->kv, SYNC_NS);
	bool running = false;
	uint64_t last_ok = 0;
	for (;;) {
		int cmd = running ? np_poll_cmd(&c->np) : np_wait_cmd(&c->np);
		if (cmd < 0)
			return 20;
		if (cmd == 0) {
			step(c, &last_ok);
			continue;
		}
		if (cmd == 'G') {
			running = true;
			last_ok = np_now_ns();
		} else if (cmd == 'g') {
			struct state_report s;
			report_state(c, &s);
			if (np_say(&c->np, 'g', &s, sizeof(s)))
				return 21;
		} else if (cmd == 'S') {
			running = false;
			if (np_say(&c->np, 'S', &c->r, sizeof(c->r)))
				return 22;
		} else if (cmd == 'F') {
			if (fin_read(c))
				return 23;
		} else {
			return cmd == 'Q' ? 0 : 24;
		}
	}
}

static int config(struct np_child *np, struct farm_config *cfg)
{
	int st = np_config_zk(np, RSIZE, zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, cfg);
	if (st)
		return st;
	cfg->replicas = 3;
	/* Formed with NM machines: one joining later is late, then grows. */
	cfg->expect_machines = NM;
	cfg->kv_shards = KV_SHARDS;
	cfg->grow = true;
	return 0;
}

static int machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct ch *c = calloc(1, sizeof(*c));
	if (!c)
		return 9;
	c->np = *np;
	c->id = np->me;
	c->writer = true;
	struct farm_config cfg;
	int st = config(np, &cfg);
	if (!st)
		st = kvp_run_config(&c->np, &cfg, NULL, NBUCKETS, JOIN_MS,
		                    &c->kv, body, c);
	free(c);
	return st;
}

/* A joiner (slot i of late_cl, machine id NM + i): an empty directory,
 * late, the store's shard list from machine 0. */
static int joiner(struct np_child *np, void *arg)
{
	(void)arg;
	struct ch *c = calloc(1, sizeof(*c));
	if (!c)
		return 9;
	c->np = *np;
	c->id = NM + np->me;
	struct farm_config cfg;
	int st = config(np, &cfg);
	if (st)
		goto done;
	cfg.machine_id = c->id;
	st = 4;
	if (farm_node_open(&cfg, &c->np.node))
		goto done;
	st = 5;
	if (farm_kv_create(c->np.node, NULL, NBUCKETS, &c->kv))
		goto out;
	farm_node_set_app_loops(c->np.node, true);
	st = 6;
	if (farm_node_start(c->np.node, JOIN_MS) ||
	    farm_node_loop_open(c->np.node, 0, &c->np.loop))
		goto out;
	st = 7;
	if (np_await_member(c->np.node, c->np.loop, c->id, JOIN_MS) ||
	    farm_kv_attach(c->kv, c->np.loop))
		goto out;
	int rc = farm_kv_join_existing_sync(c->kv, c->np.loop, 0, JOIN_MS);
	if (rc) {
		fprintf(stderr, "m%u: join: %s\n", c->id, farm_strerror(rc));
		st = 8;
		goto out;
	}
	st = np_ready(&c->np) ? 9 : body(c);
out:
	if (c->np.loop) {
		farm_kv_detach(c->kv, c->np.loop);
		farm_node_loop_close(c->np.node, c->np.loop);
	}
	farm_node_close(c->np.node);
	farm_kv_destroy(c->kv);
done:
	free(c);
	return st;
}

/* ---- the parent ------------------------------------------------------ */

static struct np_cluster *cl_of(unsigned m, unsigned *slot)
{
	*slot = m < NM ? m : m - NM;
	return m < NM ? &cl : &late_cl;
}

static void state_of(unsigned m, struct state_report *s)
{
	unsigned i;
	struct np_cluster *c = cl_of(m, &i);
	np_send(c, i, 'g');
	np_expect(c, i, 'g', 20000);
	np_recv(c, i, s, sizeof(*s), 1000);
}

static void pause_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Joiner @g: spawned, joined, running, then grown (out of the late list
 * in its own configuration). Returns the ms it took to grow. */
static double join_and_grow(unsigned g)
{
	snprintf(late_cl.dir[g], sizeof(late_cl.dir[g]), "%s/j%u", cl.root, g);
	assert_int_equal(mkdir(late_cl.dir[g], 0700), 0);
	np_other = &cl;
	np_spawn_one(&late_cl, g, joiner, NULL);
	np_other = NULL;
	np_expect(&late_cl, g, 'R', JOIN_MS + 30000);
	np_send(&late_cl, g, 'G');
	uint64_t t0 = np_now_ns();
	struct state_report s;
	for (;;) {
		state_of(NM + g, &s);
		if (!s.late)
			break;
		if (np_now_ns() - t0 > GROW_MS * 1000000ull)
			fail_msg("machine %u did not grow in %d ms", NM + g,
			         GROW_MS);
		/* The parent's poll interval, not a synchronization. */
		pause_ms(200);
	}
	double ms = (double)(np_now_ns() - t0) / 1e6;
	printf("machine %u grew %.0f ms after joining (configuration %" PRIu64
	       ")\n",
	       NM + g, ms, s.config);
	return ms;
}

/* Every machine in one configuration, each shard served by exactly one:
 * the handoffs have settled. */
static void settle(struct state_report *s)
{
	uint64_t t0 = np_now_ns();
	for (;;) {
		unsigned shards = 0;
		bool same = true;
		for (unsigned m = 0; m < NALLM; m++) {
			state_of(m, &s[m]);
			shards += s[m].shards;
			same = same && s[m].config == s[0].config && !s[m].late;
		}
		if (same && shards == NSHARDS)
			return;
		if (np_now_ns() - t0 > GROW_MS * 1000000ull)
			fail_msg("not settled: %u shards served", shards);
		pause_ms(200);
	}
}

static void check_final(const struct run_report *rr, const struct fin_report *f,
                        unsigned reader, unsigned *bad)
{
	for (unsigned m = 0; m < NM; m++)
		for (unsigned j = 0; j < NKEYS; j++) {
			int st = f->status[m][j];
			uint64_t s = f->seq[m][j];
			bool ok = st == 0 ? s >= rr[m].acked[j] &&
			                            s <= rr[m].tried[j]
			                  : st == -ENOENT && !rr[m].tried[j];
			if (!ok && (*bad)++ < 10)
				printf("machine %u reads key (%u, %u): status "
				       "%d, sequence %" PRIu64
				       "; acknowledged %" PRIu64
				       ", tried %" PRIu64 "\n",
				       reader, m, j, st, s, rr[m].acked[j],
				       rr[m].tried[j]);
		}
}

/* The figures of every machine, and its checks; the failed checks'
 * counts in @out: bad reads, machines with a fatal error, machines off
 * the spread. */
struct verdict {
	unsigned bad, fatal, spread_bad;
	uint64_t gap_max;
	unsigned smin, smax, pmin, pmax;
};

static void report_machine(unsigned m, const struct state_report *s,
                           const struct run_report *rr, struct verdict *v)
{
	printf("machine %u: %u shards, primary of %u of %u regions held; "
	       "gets %" PRIu64 " (%" PRIu64 " answered), puts %" PRIu64
	       " (%" PRIu64 " acknowledged), retryable errors %" PRIu64
	       ", longest gap between answered gets %.1f ms\n",
	       m, s->shards, s->primaries, s->regions, rr->gets, rr->gets_ok,
	       rr->puts, rr->puts_ok, rr->retryable,
	       (double)rr->gap_max_ns / 1e6);
	if (rr->fatal) {
		printf("machine %u: %" PRIu64 " errors not retryable, the "
		       "first a %s's %s\n",
		       m, rr->fatal, rr->first_fatal_op == 'p' ? "put" : "get",
		       farm_strerror(rr->first_fatal));
		v->fatal++;
	}
	v->gap_max = FARM_MAX(v->gap_max, rr->gap_max_ns);
	v->smin = FARM_MIN(v->smin, s->shards);
	v->smax = FARM_MAX(v->smax, s->shards);
	v->pmin = FARM_MIN(v->pmin, s->primaries);
	v->pmax = FARM_MAX(v->pmax, s->primaries);
	v->spread_bad += s->shards < SPREAD_MIN || s->shards > SPREAD_MAX ||
	                 !rr->gets_ok;
}

/* Stop the workload everywhere (the reports into @rr, NALLM of them),
 * then read every key on every machine. */
static void stop_and_check(const struct state_report *s, struct verdict *v,
                           struct run_report *rr)
{
	struct fin_report *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	for (unsigned m = 0; m < NALLM; m++) {
		unsigned i;
		struct np_cluster *c = cl_of(m, &i);
		np_send(c, i, 'S');
		np_expect(c, i, 'S', 30000);
		np_recv(c, i, &rr[m], sizeof(rr[m]), 1000);
	}
	*v = (struct verdict){.smin = UINT32_MAX, .pmin = UINT32_MAX};
	for (unsigned m = 0; m < NALLM; m++) {
		unsigned i;
		struct np_cluster *c = cl_of(m, &i);
		np_send(c, i, 'F');
		np_expect(c, i, 'F', 120000);
		np_recv(c, i, f, sizeof(*f), 1000);
		check_final(rr, f, m, &v->bad);
		report_machine(m, &s[m], &rr[m], v);
	}
	/* Primaries: within 20% of even of all the regions' primaries. */
	unsigned total = 0;
	for (unsigned m = 0; m < NALLM; m++)
		total += s[m].primaries;
	for (unsigned m = 0; m < NALLM; m++)
		v->spread_bad += 5u * NALLM * s[m].primaries < 4u * total ||
		                 5u * NALLM * s[m].primaries > 6u * total;
	free(f);
}

/* The last grower (primary of the regions pinned to it) fails: once the
 * survivors share a configuration in which they serve every shard, every
 * key still reads (machine 0 reads them). Returns the bad reads. */
static unsigned kill_grown(const struct run_report *rr)
{
	unsigned dead = NALLM - 1, slot = NGROW - 1, bad = 0;
	assert_int_equal(kill(late_cl.pid[slot], SIGKILL), 0);
	(void)tu_reap(late_cl.pid[slot]);
	late_cl.pid[slot] = 0;
	uint64_t t0 = np_now_ns();
	struct state_report s[NALLM];
	unsigned shards, lo, hi;
	for (;;) {
		bool same = true;
		shards = 0, lo = UINT32_MAX, hi = 0;
		for (unsigned m = 0; m < dead; m++) {
			state_of(m, &s[m]);
			shards += s[m].shards;
			lo = FARM_MIN(lo, s[m].shards);
			hi = FARM_MAX(hi, s[m].shards);
			same = same && s[m].config == s[0].config;
		}
		if (same && shards == NSHARDS)
			break;
		if (np_now_ns() - t0 > GROW_MS * 1000000ull)
			fail_msg("machine %u's shards not taken over: %u "
			         "shards served",
			         dead, shards);
		/* The parent's poll interval, not a synchronization. */
		pause_ms(200);
	}
	struct fin_report *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	np_send(&cl, 0, 'F');
	np_expect(&cl, 0, 'F', 120000);
	np_recv(&cl, 0, f, sizeof(*f), 1000);
	check_final(rr, f, 0, &bad);
	free(f);
	printf("machine %u killed: its shards served again after %.1f s "
	       "(configuration %" PRIu64 "), %u to %u per survivor; %u bad "
	       "reads\n",
	       dead, (double)(np_now_ns() - t0) / 1e9, s[0].config, lo, hi,
	       bad);
	return bad;
}

static void test_grow_3_to_6(void **state)
{
	(void)state;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-kv-grow-%d",
	         (int)getpid());
	memset(&late_cl, 0, sizeof(late_cl));
	for (unsigned i = 0; i < NP_MAX; i++)
		late_cl.to[i] = late_cl.from[i] = -1;
	uint64_t t0 = np_now_ns();
	np_start(&cl, "kvgrow", machine, NULL);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&cl, i, 'R', JOIN_MS + 30000);
	for (unsigned i = 0; i < NM; i++)
		np_send(&cl, i, 'G');
	struct state_report s[NALLM];
	for (unsigned m = 0; m < NM; m++)
		state_of(m, &s[m]);
	printf("3 machines: shards served %u %u %u, primaries %u %u %u\n",
	       s[0].shards, s[1].shards, s[2].shards, s[0].primaries,
	       s[1].primaries, s[2].primaries);
	for (unsigned g = 0; g < NGROW; g++)
		(void)join_and_grow(g);
	settle(s);
	struct verdict v;
	struct run_report *rr = calloc(NALLM, sizeof(*rr));
	assert_non_null(rr);
	stop_and_check(s, &v, rr);
	printf("kv_grow: %u shards over %u machines: %u to %u each (even: "
	       "%u; bound %u..%u); region primaries %u to %u each; longest "
	       "lookup gap %.1f ms; %u bad reads; %.1f s\n",
	       NSHARDS, NALLM, v.smin, v.smax, NSHARDS / NALLM, SPREAD_MIN,
	       SPREAD_MAX, v.pmin, v.pmax, (double)v.gap_max / 1e6, v.bad,
	       (double)(np_now_ns() - t0) / 1e9);
	unsigned bad_after = kill_grown(rr);
	free(rr);
	for (unsigned m = 0; m < NALLM - 1; m++) {
		unsigned i;
		struct np_cluster *c = cl_of(m, &i);
		np_send(c, i, 'Q');
	}
	int st[NP_MAX] = {0};
	np_finish(&cl, st);
	for (unsigned g = 0; g < NGROW - 1; g++) {
		st[NM + g] = tu_reap(late_cl.pid[g]);
		late_cl.pid[g] = 0;
	}
	for (unsigned m = 0; m < NALLM; m++)
		if (st[m])
			printf("machine %u exited %d\n", m, st[m]);
	for (unsigned m = 0; m < NALLM; m++)
		assert_int_equal(st[m], 0);
	assert_int_equal(v.fatal, 0);
	assert_int_equal(v.bad, 0);
	assert_int_equal(bad_after, 0);
	if (broken) {
		if (!v.spread_bad)
			fail_msg("--broken: the rings alone placed the shards, "
			         "yet every machine is within 20%% of even");
		printf("--broken: %u shard or primary counts off the bound, as "
		       "the rings alone leave them\n",
		       v.spread_bad);
	} else {
		assert_int_equal(v.spread_bad, 0);
	}
	assert_true(v.gap_max < GAP_MAX_MS * 1000000ull);
}

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&late_cl);
	np_cleanup(&cl);
	return 0;
}

int main(int argc, char **argv)
{
	int st = tu_broken_arg(argc, argv, FARM_FP_BALANCE_OFF, &broken);
	if (st)
		return st;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_grow_3_to_6, teardown),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "kv_grow", tests, 1);
}
