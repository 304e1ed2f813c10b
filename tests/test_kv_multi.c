/*
 * The cluster KV store across machine processes. Each machine is
 * a forked process running a farm_node (static membership, 1 loop that the
 * process's main thread drives) and a farm_kv with one shard per machine;
 * the parent coordinates them through pipes and checks what they report.
 *
 *   linearizability  3 machines, each keeping W operations in flight
 *               (async farm_ht_get/put/del) on a hot set of 20 keys for a
 *               few seconds: gets, puts (unique value ids; values of 16
 *               to 300 bytes, so inline and indirect) and deletes. Every
 *               operation is recorded with CLOCK_MONOTONIC invocation and
 *               response times; the parent merges the histories and
 *               checks them with lincheck: 0 violations. Every value a get
 *               returns is checked byte by byte against its id (lookups
 *               during concurrent removes and rewrites: the value or
 *               -ENOENT, never garbage).
 *               --broken: machine 0 answers some gets from a cache that
 *               its own later puts did not invalidate (a stale read): the
 *               checker must report violations.
 *   mget/dir    machine 0 puts 18 of 24 keys, machine 2 multi-gets all 24
 *               (6 absent) and checks every status and value; a name
 *               registered by machine 1 is looked up by machine 0.
 *   death       machine 1 is killed (SIGKILL); from machine 0 gets and a
 *               put for keys of machine 1's shard return an error within
 *               5 s, gets for keys of machine 2's (and 0's) shard still
 *               return their values.
 *   cut         (--cut, across network namespaces only: netns.h) instead
 *               of the kill, machine 1's link goes down (`ip link set
 *               eth0 down` in its namespace: no reset reaches anyone).
 *               Machine 0's first error for machine 1's keys comes within
 *               the fabric's bound (FARM_OFI_TIMEOUT_MS, default 4 s) plus
 *               its heartbeat period and 1 s, the live keys keep their
 *               values. Across namespaces the machines join through
 *               ZooKeeper, so recovery removes machine 1 once its lease
 *               lapses and promotes its regions' backups, which then
 *               serve its shard (src/recovery): after the first error a
 *               get of its keys returns an error or (the new
 *               configuration in) its value, never another value or
 *               none, and the put fails or succeeds, within the bound.
 *               Then the link comes back and machine 1 finds every pair
 *               of its shard intact in its own memory: nothing lost on
 *               either side.
 * --broken-owner: gets go to the owners (FARM_KV_LOOKUP=owner's path),
 *               which answer from values they answered before, never
 *               revalidated (FARM_FP_KV_OWNER_STALE): the checker must
 *               report violations.
 * Options: --seconds S (linearizability run), --inflight W, --broken,
 * --broken-owner, --cut.
 */
#include "kvproc.h"
#include "kvlin.h"

#include <inttypes.h>
#include "kv/kv.h"
#include "util/fault.h"
#include "brokenarg.h"

#define NM            NP_NM
#define RSIZE         "32M"
#define JOIN_MS       30000
#define NBUCKETS      256u
#define MG_N          24u /* keys in the multi-get */
#define DK_N          30u /* keys placed for the death phase */
#define DEAD_BOUND_NS (5ull * 1000000000ull)

static double opt_secs = 3;
static unsigned opt_w = 3;
/* opt_broken_owner (--broken-owner): the owners answer gets from values they
 * answered before (FARM_FP_KV_OWNER_STALE), never revalidated. */
static bool opt_broken, opt_cut, opt_broken_owner;

/* --cut: the first error may come the fabric's death bound
 * (FARM_OFI_TIMEOUT_MS, default 4000) after the cut, plus the heartbeat
 * period (a quarter of the bound) and 1 s of scheduling on a loaded host.
 * A shorter bound than the default made a machine stalled for seconds on
 * a host at load 16 look dead during the linearizability phase. */
static uint64_t cut_bound_ns(void)
{
	const char *e = getenv("FARM_OFI_TIMEOUT_MS");
	uint64_t ms = e && atoi(e) > 0 ? (uint64_t)atoi(e) : 4000;
	return (ms + ms / 4 + 1000) * 1000000ull;
}

/* ---- the cluster (parent side) ------------------------------------------- */

static struct np_cluster G;

/* A machine process (child side). */
struct ch {
	struct np_child np; /* me, pipes, node, loop (nodeproc.h) */
	farm_kv *kv;
	farm_ht *ht;
};

typedef int (*role_fn)(struct ch *c);

struct body {
	struct ch *c;
	role_fn role;
};

static int run_body(void *arg)
{
	struct body *b = arg;
	b->c->ht = farm_kv_table(b->c->kv);
	return b->role(b->c);
}

static int child_main(struct ch *c, role_fn role)
{
	struct body b = {c, role};
	return kvp_run(&c->np, RSIZE, NULL, NBUCKETS, JOIN_MS, &c->kv, run_body,
	               &b);
}

/* Machine i's body: child_main with the role np_start was given. */
static int child_entry(struct np_child *np, void *arg)
{
	struct ch c = {.np = *np};
	return child_main(&c, *(role_fn *)arg);
}

static void cl_start(struct np_cluster *cl, role_fn role)
{
	np_start(cl, "kvm", child_entry, &role);
}

/* Teardown, also after a failed assertion: no process or file stays. */
static int cl_cleanup(void **state)
{
	(void)state;
	np_cleanup(&G);
	return 0;
}

/* ---- multi-get, directory, death (child side) ---------------------------- */

struct mg_stats {
	uint32_t ok, absent, wrong;
	int first_bad;
	uint64_t ns;
};

struct dir_stats {
	int lookup_rc, missing_rc;
	farm_fatptr got;
};

struct death_stats {
	/* Until the death is seen: gets of the dead shard's keys. */
	uint32_t before_ok, before_bad;
	uint64_t detect_ns; /* from the kill to the first error */
	int detect_rc;
	/* Then each of its keys once, a put, and the live keys. */
	uint32_t dead_keys, dead_err, dead_ok, dead_absent, dead_wrong;
	uint32_t live_keys, live_ok, live_bad;
	int dead_rc, put_rc, live_rc;
	uint64_t max_dead_ns, put_ns;
};

static const farm_fatptr DIR_P = {
        .addr = 0x123456780ull, .size = 64, .incarnation = 42};

static uint64_t mg_id(unsigned i)
{
	return 0xab0000000ull + i;
}
/* Death keys' values are inline (iteration sees inline pairs only). */
static uint64_t dk_id(unsigned i)
{
	uint64_t id = 0xcd0000000ull + (uint64_t)i * 16u;
	while (vlen_of(id) > 32)
		id++;
	return id;
}

static int mg_puts(struct ch *c)
{
	uint8_t k[KLEN], v[VMAX];
	for (unsigned i = 0; i < MG_N; i++) {
		if (i % 4 == 3)
			continue;
		mkkey(k, "mget", i);
		fill_val(v, mg_id(i));
		int rc = farm_kv_put_sync(c->kv, c->np.loop, k, KLEN, v,
		                          vlen_of(mg_id(i)));
		if (rc)
			return rc;
	}
	/* Small inline pairs whose placement the shards report (iteration
	 * sees inline pairs only). */
	for (unsigned i = 0; i < DK_N; i++) {
		mkkey(k, "dead", i);
		fill_val(v, dk_id(i));
		int rc = farm_kv_put_sync(c->kv, c->np.loop, k, KLEN, v,
		                          vlen_of(dk_id(i)));
		if (rc)
			return rc;
	}
	return 0;
}

static volatile int mg_done;
static void mg_cb(farm_loop *loop, void *ctx)
{
	(void)loop;
	(void)ctx;
	mg_done = 1;
}

static int mg_get(struct ch *c, struct mg_stats *s)
{
	uint8_t keys[MG_N][KLEN];
	const void *kp[MG_N];
	uint32_t kl[MG_N], lens[MG_N];
	int status[MG_N];
	uint8_t *vals = malloc((size_t)MG_N * VMAX);
	if (!vals)
		return -ENOMEM;
	for (unsigned i = 0; i < MG_N; i++) {
		mkkey(keys[i], "mget", i);
		kp[i] = keys[i];
		kl[i] = KLEN;
	}
	uint64_t t0 = np_now_ns();
	mg_done = 0;
	int rc = farm_kv_mget(c->kv, c->np.loop, MG_N, kp, kl, vals, VMAX, lens,
	                      status, mg_cb, NULL);
	if (!rc)
		rc = farm_loop_wait(c->np.loop, &mg_done,
		                    10ull * 1000000000ull);
	s->ns = np_now_ns() - t0;
	for (unsigned i = 0; !rc && i < MG_N; i++) {
		bool want = i % 4 != 3;
		if (want && status[i] == 0 &&
		    val_id(vals + (size_t)i * VMAX, lens[i]) == mg_id(i))
			s->ok++;
		else if (!want && status[i] == -ENOENT)
			s->absent++;
		else {
			s->wrong++;
			if (!s->first_bad)
				s->first_bad = status[i] ? status[i] : 1;
		}
	}
	free(vals);
	return rc;
}

struct iter_ctx {
	uint32_t mask; /* death keys in the shard */
	uint32_t ok;   /* ... whose value is the one put */
};

static bool iter_fn(void *ctx, const void *key, uint32_t klen, const void *val,
                    uint32_t vlen)
{
	struct iter_ctx *x = ctx;
	unsigned i;
	if (klen == KLEN && sscanf((const char *)key, "dead-%03u", &i) == 1 &&
	    i < DK_N) {
		x->mask |= 1u << i;
		if (val_id(val, vlen) == dk_id(i))
			x->ok |= 1u << i;
	}
	return true;
}

static int death_gets(struct ch *c, uint32_t mask_dead, uint32_t mask_live,
                      uint64_t t_kill, struct death_stats *s)
{
	uint8_t k[KLEN], v[VMAX];
	/* The shm provider learns of the death from a pidfd watchdog thread
	 * (ARCHITECTURE.md 2.1 (d)): until it has run, a one-sided read of
	 * the dead machine's memory still returns what it held. Such reads
	 * must be whole values; once it is seen, every get fails. */
	for (unsigned i = 0; mask_dead && !s->detect_rc; i = (i + 1) % DK_N) {
		if (!(mask_dead >> i & 1))
			continue;
		mkkey(k, "dead", i);
		uint32_t len = 0;
		int rc = farm_kv_get_sync(c->kv, c->np.loop, k, KLEN, v, VMAX,
		                          &len);
		if (rc == 0 && val_id(v, len) == dk_id(i)) {
			s->before_ok++;
		} else if (rc == 0 || rc == -ENOENT) {
			s->before_bad++;
		} else {
			s->detect_rc = rc;
			break;
		}
		if (np_now_ns() - t_kill > 2 * DEAD_BOUND_NS)
			break;
	}
	s->detect_ns = np_now_ns() - t_kill;
	for (unsigned i = 0; i < DK_N; i++) {
		bool dead = mask_dead >> i & 1;
		if (!dead && !(mask_live >> i & 1))
			continue;
		mkkey(k, "dead", i);
		uint32_t len = 0;
		uint64_t t0 = np_now_ns();
		int rc = farm_kv_get_sync(c->kv, c->np.loop, k, KLEN, v, VMAX,
		                          &len);
		uint64_t dt = np_now_ns() - t0;
		if (dead) {
			s->dead_keys++;
			s->max_dead_ns = FARM_MAX(s->max_dead_ns, dt);
			if (rc == 0 && val_id(v, len) == dk_id(i))
				s->dead_ok++;
			else if (rc == 0)
				s->dead_wrong++;
			else if (rc == -ENOENT)
				s->dead_absent++;
			else
				s->dead_err++;
			if (rc && !s->dead_rc)
				s->dead_rc = rc;
		} else {
			s->live_keys++;
			if (rc == 0 && val_id(v, len) == dk_id(i))
				s->live_ok++;
			else {
				s->live_bad++;
				if (!s->live_rc)
					s->live_rc = rc ? rc : 1;
			}
		}
	}
	/* A write to the dead shard: an error too, within the bound. */
	for (unsigned i = 0; i < DK_N; i++) {
		if (!(mask_dead >> i & 1))
			continue;
		mkkey(k, "dead", i);
		fill_val(v, dk_id(i + 100));
		uint64_t t0 = np_now_ns();
		s->put_rc = farm_kv_put_sync(c->kv, c->np.loop, k, KLEN, v,
		                             vlen_of(dk_id(i + 100)));
		s->put_ns = np_now_ns() - t0;
		break;
	}
	return 0;
}

/* ---- the machines' script ------------------------------------------------ */

/* The linearizability run goes on until its deadline, and past it (to a
 * hard stop the parent's wait allows) until this machine has seen what
 * the parent checks: gets that found and that missed, puts, deletes that
 * found. On a slow host a few seconds can hold only a handful of
 * operations. */
struct lin_until {
	uint64_t dl, hard;
};

static bool until(struct lin *L, void *arg)
{
	const struct lin_until *u = arg;
	uint64_t now = np_now_ns();
	if (now < u->dl)
		return true;
	const struct lin_stats *st = &L->st;
	bool seen = st->found && st->absent && st->puts && st->del_found;
	return !seen && now < u->hard;
}

static int kv_role(struct ch *c)
{
	if (np_wait_cmd(&c->np) != 'G')
		return 20;
	struct lin L;
	if (lin_init(&L, &c->np, c->ht, opt_w, 0, opt_broken))
		return 21;
	L.kv = c->kv;
	if (opt_broken_owner &&
	    (farm_fault_set(FARM_FP_KV_OWNER_STALE, tu_switch_on, NULL) ||
	     farm_kv_set_lookup(c->kv, FARM_KV_LOOKUP_OWNER)))
		return 24;
	struct lin_until u = {.dl = np_now_ns() + (uint64_t)(opt_secs * 1e9)};
	u.hard = u.dl + 30000000000ull;
	int lrc = lin_run(&L, until, &u);
	if (lin_close(&L) || lrc)
		return 22;
	if (np_say(&c->np, 'D', &L.st, sizeof(L.st)))
		return 23;
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		switch (cmd) {
		case 'Q': return 0;
		case 'P': { /* machine 0: the multi-get's and death's keys */
			int rc = mg_puts(c);
			if (np_say(&c->np, 'P', &rc, sizeof(rc)))
				return 24;
			break;
		}
		case 'M': { /* machine 2: multi-get */
			struct mg_stats s = {0};
			int rc = mg_get(c, &s);
			if (np_say(&c->np, 'M', &rc, sizeof(rc)) ||
			    tu_send(c->np.out, &s, sizeof(s)))
				return 25;
			break;
		}
		case 'N': { /* machine 1: name an object */
			int rc = farm_kv_name_sync(c->kv, c->np.loop,
			                           "kv-multi/root", DIR_P);
			if (np_say(&c->np, 'N', &rc, sizeof(rc)))
				return 26;
			break;
		}
		case 'L': { /* machine 0: look names up */
			struct dir_stats s = {0};
			s.lookup_rc = farm_kv_lookup_sync(
			        c->kv, c->np.loop, "kv-multi/root", &s.got);
			farm_fatptr none;
			s.missing_rc = farm_kv_lookup_sync(
			        c->kv, c->np.loop, "kv-multi/none", &none);
			if (np_say(&c->np, 'L', &s, sizeof(s)))
				return 27;
			break;
		}
		case 'I': { /* which death keys does my shard hold, and
			     * which with their values? */
			struct iter_ctx x = {0};
			long n = farm_ht_iterate_local(c->ht, c->np.me, iter_fn,
			                               &x);
			if (n < 0)
				x.mask = x.ok = 0;
			if (np_say(&c->np, 'I', &x, sizeof(x)))
				return 28;
			break;
		}
		case 'K': { /* machine 0, after machine 1 died */
			uint32_t m[2];
			uint64_t t_kill;
			if (tu_recv(c->np.in, m, sizeof(m)) ||
			    tu_recv(c->np.in, &t_kill, sizeof(t_kill)))
				return 29;
			struct death_stats s = {0};
			death_gets(c, m[0], m[1], t_kill, &s);
			if (np_say(&c->np, 'K', &s, sizeof(s)))
				return 30;
			break;
		}
		default: return 31;
		}
	}
}

/* ---- the parent ---------------------------------------------------------- */

/* Every machine told to quit, and reaped. */
static void quit_all(void)
{
	for (unsigned i = 0; i < NM; i++)
		np_send(&G, i, 'Q');
	int st[NM];
	np_finish(&G, st);
}

/* The machines' run stats (in @s) and the check of their merged
 * histories (in @rep); returns the checker's result. */
static int lin_collect(struct lin_stats s[NM], lc_report *rep)
{
	int waitms = (int)(opt_secs * 1000) + 60000;
	for (unsigned i = 0; i < NM; i++) {
		np_expect(&G, i, 'D', waitms);
		np_recv(&G, i, &s[i], sizeof(s[i]), 1000);
	}
	uint64_t nrec;
	int rc = kvl_check(&G, rep, &nrec);
	uint64_t ops = 0, puts = 0, dels = 0, gets = 0;
	for (unsigned i = 0; i < NM; i++) {
		print_lin(i, &s[i]);
		ops += s[i].gets + s[i].puts + s[i].dels;
		gets += s[i].gets;
		puts += s[i].puts;
		dels += s[i].dels;
	}
	printf("lin: %" PRIu64 " operations (%" PRIu64 " gets, %" PRIu64
	       " puts, %" PRIu64 " deletes) over %u keys from %u machines x %u "
	       "in flight; %" PRIu64 " recorded; lincheck: %d\n",
	       ops, gets, puts, dels, NKEYS, NM, opt_w, nrec, rc);
	lc_report_print(stdout, rep);
	fflush(stdout);
	return rc;
}

/*
 * 1. Linearizability: the merged histories check. With --broken-owner or
 * --broken the checker must find violations, and the run ends there
 * (returns true).
 */
static bool kv_lin(void)
{
	struct lin_stats s[NM];
	lc_report rep;
	int rc = lin_collect(s, &rep);
	if (opt_broken_owner) {
		assert_true(rc > 0);
		assert_true(rep.nviolations > 0);
		printf("broken-owner: owners answered from stale values, the "
		       "checker reports %" PRIu64 " keys without a "
		       "linearization\n",
		       rep.nviolations);
		quit_all();
		return true;
	}
	if (opt_broken) {
		assert_true(s[0].injected > 0);
		assert_true(rc > 0);
		assert_true(rep.nviolations > 0);
		printf("broken: %" PRIu64 " stale reads injected, the checker "
		       "reports %" PRIu64 " keys without a linearization\n",
		       s[0].injected, rep.nviolations);
		quit_all();
		return true;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(rep.nviolations, 0);
	for (unsigned i = 0; i < NM; i++) {
		assert_int_equal(s[i].garbage, 0);
		assert_int_equal(s[i].undrained, 0);
		assert_true(s[i].found > 0 && s[i].absent > 0);
		assert_true(s[i].puts > 0 && s[i].del_found > 0);
		/* Errors (timeouts under load) are rare. */
		assert_true(s[i].get_err + s[i].put_err + s[i].del_err <=
		            1 + (s[i].gets + s[i].puts + s[i].dels) / 100);
	}
	return false;
}

/* 2. Multi-get and the directory. */
static void kv_mget_dir(void)
{
	int rc;
	np_send(&G, 0, 'P');
	np_expect(&G, 0, 'P', 60000);
	np_recv(&G, 0, &rc, sizeof(rc), 1000);
	assert_int_equal(rc, 0);
	np_send(&G, 2, 'M');
	np_expect(&G, 2, 'M', 60000);
	struct mg_stats mg;
	np_recv(&G, 2, &rc, sizeof(rc), 1000);
	np_recv(&G, 2, &mg, sizeof(mg), 1000);
	printf("mget: machine 2, %u keys in one multi-get: %u values right, %u "
	       "absent as expected, %u wrong (first %d), %.1f us\n",
	       MG_N, mg.ok, mg.absent, mg.wrong, mg.first_bad,
	       (double)mg.ns / 1e3);
	assert_int_equal(rc, 0);
	assert_int_equal(mg.ok, MG_N - MG_N / 4);
	assert_int_equal(mg.absent, MG_N / 4);
	assert_int_equal(mg.wrong, 0);
	np_send(&G, 1, 'N');
	np_expect(&G, 1, 'N', 60000);
	np_recv(&G, 1, &rc, sizeof(rc), 1000);
	assert_int_equal(rc, 0);
	np_send(&G, 0, 'L');
	np_expect(&G, 0, 'L', 60000);
	struct dir_stats ds;
	np_recv(&G, 0, &ds, sizeof(ds), 1000);
	printf("dir: name registered by machine 1, looked up by machine 0: %s "
	       "(%#" PRIx64 ", %u, %" PRIu64 "); a missing name: %s\n",
	       farm_strerror(ds.lookup_rc), ds.got.addr, ds.got.size,
	       ds.got.incarnation, farm_strerror(ds.missing_rc));
	assert_int_equal(ds.lookup_rc, 0);
	assert_int_equal(ds.got.addr, DIR_P.addr);
	assert_int_equal(ds.got.size, DIR_P.size);
	assert_int_equal(ds.got.incarnation, DIR_P.incarnation);
	assert_int_equal(ds.missing_rc, -ENOENT);
}

/* Which death keys each machine's shard holds (in @mask): all of them,
 * each once, machines 1 and 2 some; each with its value. */
static void death_keys(uint32_t mask[NM])
{
	for (unsigned i = 0; i < NM; i++) {
		struct iter_ctx x;
		np_send(&G, i, 'I');
		np_expect(&G, i, 'I', 60000);
		np_recv(&G, i, &x, sizeof(x), 1000);
		mask[i] = x.mask;
		assert_int_equal(x.ok, x.mask);
	}
	printf("death: the %u keys lie %d / %d / %d on machines 0 / 1 / 2\n",
	       DK_N, __builtin_popcount(mask[0]), __builtin_popcount(mask[1]),
	       __builtin_popcount(mask[2]));
	assert_int_equal(mask[0] | mask[1] | mask[2], (1u << DK_N) - 1);
	assert_int_equal(mask[0] & mask[1], 0);
	assert_int_equal(mask[1] & mask[2], 0);
	assert_true(mask[1] != 0 && mask[2] != 0);
}

/* Machine 0's gets and put after machine 1's death (@d), machine 1
 * having held the keys of @mask1: the death seen within @bound, the dead
 * shard's gets errors (or, recovered, right), the live keys' right. */
static void check_death(const struct death_stats *d, uint32_t mask1,
                        uint64_t bound)
{
	assert_true(d->detect_rc != 0);
	assert_true(d->detect_ns < bound);
	assert_int_equal(d->before_bad, 0);
	assert_int_equal(d->dead_keys, __builtin_popcount(mask1));
	assert_int_equal(d->dead_wrong, 0);
	assert_int_equal(d->dead_absent, 0);
	if (tn_active()) {
		/* Membership through ZooKeeper: recovery may have removed
		 * machine 1 and promoted its shard's backups by now. */
		printf("death: %s\n",
		       d->dead_ok == d->dead_keys
		               ? "recovered: machine 1's shard served by the "
		                 "promoted backups"
		       : d->dead_err == d->dead_keys
		               ? "not recovered yet: every get an error"
		               : "recovered during the gets");
		assert_int_equal(d->dead_err + d->dead_ok, d->dead_keys);
	} else {
		/* Static membership: no recovery, every get an error. */
		assert_int_equal(d->dead_err, d->dead_keys);
		assert_true(d->put_rc != 0);
	}
	assert_true(d->max_dead_ns < bound);
	assert_true(d->put_ns < bound);
	assert_int_equal(d->live_ok, d->live_keys);
	assert_int_equal(d->live_bad, 0);
}

/* 3. A shard whose machine died (or, --cut, whose link is down), the
 * death keys lying as @mask says. */
static void kv_death(const uint32_t mask[NM])
{
	uint64_t tk = np_now_ns();
	if (opt_cut) {
		assert_int_equal(tn_link(1, false), 0);
	} else {
		kill(G.pid[1], SIGKILL);
		int st1 = tu_reap(G.pid[1]);
		G.pid[1] = 0;
		assert_int_equal(st1, 128 + SIGKILL);
	}
	const char *what = opt_cut ? "link cut" : "killed";
	uint64_t bound = opt_cut ? cut_bound_ns() : DEAD_BOUND_NS;
	uint32_t m[2] = {mask[1], mask[2] | mask[0]};
	np_send(&G, 0, 'K');
	assert_int_equal(tu_send(G.to[0], m, sizeof(m)), 0);
	assert_int_equal(tu_send(G.to[0], &tk, sizeof(tk)), 0);
	np_expect(&G, 0, 'K', 30000);
	struct death_stats d;
	np_recv(&G, 0, &d, sizeof(d), 1000);
	printf("death: machine 1 %s; machine 0 saw it %.2f ms after (%s; "
	       "bound %.0f ms), after %u gets of its keys that returned "
	       "their values (%u wrong)\n",
	       what, (double)d.detect_ns / 1e6, farm_strerror(d.detect_rc),
	       (double)bound / 1e6, d.before_ok, d.before_bad);
	printf("death: then from machine 0: %u gets of its keys: "
	       "%u errors (%s), %u found, %u absent, %u wrong, slowest %.1f "
	       "ms; a put: %s in %.1f ms; %u gets of live keys: %u right, %u "
	       "wrong (%s); %.1f ms in all\n",
	       d.dead_keys, d.dead_err, farm_strerror(d.dead_rc), d.dead_ok,
	       d.dead_absent, d.dead_wrong, (double)d.max_dead_ns / 1e6,
	       farm_strerror(d.put_rc), (double)d.put_ns / 1e6, d.live_keys,
	       d.live_ok, d.live_bad, farm_strerror(d.live_rc),
	       (double)(np_now_ns() - tk) / 1e6);
	check_death(&d, mask[1], bound);
}

/* --cut: the cable back: every machine, the cut one included, still
 * holds its shard's pairs with their values. */
static void cut_back(const uint32_t mask[NM])
{
	assert_int_equal(tn_link(1, true), 0);
	for (unsigned i = 0; i < NM; i++) {
		struct iter_ctx x;
		np_send(&G, i, 'I');
		np_expect(&G, i, 'I', 60000);
		np_recv(&G, i, &x, sizeof(x), 1000);
		printf("cut: link back; machine %u holds %d of its %d "
		       "keys with their values\n",
		       i, __builtin_popcount(x.ok),
		       __builtin_popcount(mask[i]));
		assert_int_equal(x.mask, mask[i]);
		assert_int_equal(x.ok, mask[i]);
	}
	np_send(&G, 1, 'Q');
}

/* Merge the machines' histories and check them. */
static void test_kv(void **state)
{
	(void)state;
	uint64_t t_start = np_now_ns();
	cl_start(&G, kv_role);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&G, i, 'R', 60000);
	for (unsigned i = 0; i < NM; i++)
		np_send(&G, i, 'G');
	if (kv_lin())
		return;
	kv_mget_dir();
	uint32_t mask[NM];
	death_keys(mask);
	kv_death(mask);
	if (opt_cut)
		cut_back(mask);
	np_send(&G, 0, 'Q');
	np_send(&G, 2, 'Q');
	int st[NM];
	np_finish(&G, st);
	printf("kv_multi: machines exit %d / %d / %d; %.1f s in all\n", st[0],
	       st[1], st[2], (double)(np_now_ns() - t_start) / 1e9);
	assert_int_equal(st[0], 0);
	if (opt_cut)
		assert_int_equal(st[1], 0);
	assert_int_equal(st[2], 0);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--broken")) {
			opt_broken = true;
			continue;
		}
		if (!strcmp(a, "--broken-owner")) {
			opt_broken_owner = true;
			continue;
		}
		if (!strcmp(a, "--cut")) {
			opt_cut = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "%s: bad option %s\n", argv[0], a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--seconds"))
			opt_secs = strtod(v, NULL);
		else if (!strcmp(a, "--inflight"))
			opt_w = (unsigned)strtoul(v, NULL, 0);
		else {
			fprintf(stderr, "%s: bad option %s\n", argv[0], a);
			return 2;
		}
	}
	if (opt_broken_owner && !farm_fault_built()) {
		printf("skipped: --broken-owner needs a build with fault "
		       "injection\n");
		return FARM_TEST_SKIP;
	}
	if (opt_cut && !tn_active()) {
		printf("SKIPPED: --cut cuts a machine's link: it runs across "
		       "network namespaces (scripts/netns-cluster run "
		       "--net-only)\n");
		return FARM_TEST_SKIP;
	}
	if (opt_w < 1)
		opt_w = 1;
	if (opt_w > MAXW - 1)
		opt_w = MAXW - 1;
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_teardown(test_kv, cl_cleanup),
	};
	bool lossy = tu_lossy_begin();
	return tu_lossy_end(
	        lossy, cmocka_run_group_tests_name("kv_multi", t, NULL, NULL));
}
