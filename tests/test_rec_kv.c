/*
 * KV under a kill: 4 machine processes joined
 * through a real ZooKeeper (scripts/zk-local; sessions of 4 s, leases of
 * 50 ms as in test_rec_bank), 3 replicas, a KV store with one shard per
 * machine. Every machine runs test_kv_multi's linearizability workload
 * (tests/harness/kvlin.h: W async gets, puts and deletes in flight on a hot set
 * of keys, values inline and indirect, histories streamed to files), with
 * retries: an operation that fails retryably (farm_tx_retryable: -EAGAIN
 * while a region is being promoted, FARM_EPEERDEAD before the
 * configuration without the dead machine, ...) is issued again after a
 * backoff, and a put or delete that failed is recorded as unknown (it may
 * or may not have happened). Once every machine has completed PRE_OPS
 * operations, machine 0 puts NWIT new keys of machine 1's shard (the
 * witnesses), and the parent kills machine 1 (not the configuration
 * manager; its shard holds 8 of the 20 hot keys) with SIGKILL, in the
 * middle of whatever it was doing. Two runs:
 *   kill_quiet_shard  from just before the witnesses until the kill, no
 *               machine writes the victim's shard (its keys are still
 *               read; the other shards are written): the witnesses are
 *               the victim's last commits, so the last of them at least
 *               is still in the backups' logs at the kill (a backup
 *               applies a commit once a later record of the same log
 *               says it may), and recovery must drain it;
 *   kill_mid_write    writes of every shard go on to the kill: some of
 *               the victim's are in flight, and recovery decides them.
 *
 * Each survivor goes on until its configuration no longer holds the victim
 * (at most RECONF_MS after the kill), then for POST_MS more. Then machine
 * 0 puts NFIN more new keys of the dead machine's shard, and every
 * survivor reads every key. Values are inline and indirect throughout.
 * Checks:
 *   - every survivor applied a configuration without the victim;
 *   - no operation failed with an error that is not retryable, none gave
 *     up, none was left without an answer;
 *   - the dead machine's shard serves again: each of its hot keys took
 *     acknowledged puts issued after the new configuration, and the NFIN
 *     puts after recovery succeed;
 *   - every key, the dead shard's included, is readable by every survivor
 *     (the same answer from each) and holds its last acknowledged value: a
 *     write that no acknowledged write began after the end of, or one
 *     whose outcome is unknown (the witnesses: the value put before the
 *     kill);
 *   - lincheck finds the histories of every machine (the victim's as far
 *     as it got, the witnesses, final puts and reads included)
 *     linearizable.
 *   - allocator recovery (SOSP'15 5.4): the survivors adopted the
 *     victim's promoted regions into their allocators (rec_adopted > 0),
 *     then allocated objects in them and freed objects in them (the dead
 *     shard's long values and chain blocks) with no free refused
 *     (free_failed 0: before, each such free leaked) or lost, no block
 *     description refused by a backup copy; and each survivor's
 *     allocator state at the end, rebuilt by scan from a copy of its
 *     regions, equals the live one (farm_blockalloc_dump: the free lists
 *     agree with every header, so no slot is both free and live).
 *     The checks of values above show no object was allocated twice.
 * Every failed check is reported before the test fails.
 *   --broken  kill_quiet_shard with recovery promoting backups without
 *             draining their logs (farm_txn_testing_recovery_no_drain):
 *             the last witness's committed put is lost, and the checks
 *             above must notice (the last-value check and lincheck do).
 *   --alloc_broken  kill_mid_write with COMMIT-BACKUPs carrying no block
 *             descriptions (farm_txn_testing_no_block_info): backups keep
 *             no block table, so no promoted region can be adopted; the
 *             allocator checks must notice.
 *   --broken_revoke  (FARM_FABRIC=udp) kill_quiet_shard with the udp
 *             fabric's revocation fencing the removed machine without
 *             failing the survivors' requests outstanding to it
 *             (FARM_UDP_KNOB_REVOKE_FLUSH 0): the READs of its memory
 *             posted before the new configuration hold every lookup
 *             slot until the fabric's death bound (seconds), so the dead
 *             shard takes no put in time; the dead-shard check must
 *             notice.
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 4
#include "allocscan.h"
#include "kvlin.h"
#include "kvproc.h"
#include "recproc.h"
#include "util/fault.h"

#include "fabric/udp_testing.h"

#include "kv/kv.h"
#include "node/node.h"
#include "txn/txn_testing.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define NM         NP_NM
#define VICTIM     1u /* not the CM; its shard has 8 of the 20 hot keys */
#define SCANNER    0u /* puts the final keys */
#define RSIZE      "16M"
#define NBUCKETS   256u
#define W          3u
#define SESSION_MS 4000
#define LEASE_US   50000u
#define JOIN_MS    30000
#define PRE_OPS    1500 /* per machine, before the kill */
#define RECONF_MS  10000
#define POST_MS    3000
#define GIVE_UP_NS (10ull * 1000000000ull) /* an operation's retries */
#define NWIT       8u /* puts to the dead shard just before the kill */
#define NFIN       8u /* puts to the dead shard after recovery */
#define NALL       (NKEYS + NWIT + NFIN)

static char zk_dir[256], zk_connect[64], zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool opt_broken, opt_alloc_broken, opt_broken_revoke;

/* ---- the machines ---------------------------------------------------- */

/* What a survivor reports at the end of its run ('D'). */
struct run_report {
	struct lin_stats st;
	struct rec_seen seen;
};

/* Puts of new keys of the dead shard, just before the kill ('B') and after
 * recovery ('W'): key indexes in, their outcomes out; the final reads
 * ('F': every key). */
struct fin_put {
	int status;
	uint64_t value;
};

struct fin_get {
	int status; /* 0 found, -ENOENT, or an error */
	uint64_t value;
};

struct ch {
	struct np_child np;
	farm_kv *kv;
	struct lin L;
	struct run_report r;
	bool said;
	uint64_t t_end;
};

/* Put new values to the @n keys the parent names; their outcomes back
 * (answer @cmd). */
static int puts_sync(struct ch *c, char cmd, unsigned n)
{
	uint32_t keys[NALL];
	struct fin_put out[NALL];
	if (n > NALL || tu_recv(c->np.in, keys, 4ull * n))
		return -1;
	for (unsigned i = 0; i < n; i++) {
		struct rec r;
		out[i].status = lin_op_sync(&c->L, LC_PUT, keys[i], &r);
		out[i].value = r.value;
	}
	return np_say(&c->np, cmd, out, n * sizeof(out[0]));
}

/* lin_run's pacing: 'P' after PRE_OPS operations, the witnesses' puts
 * ('B'), the parent's 'K', the configuration without the victim, then
 * POST_MS more. */
static bool rec_go(struct lin *L, void *arg)
{
	struct ch *c = arg;
	struct rec_seen *sn = &c->r.seen;
	uint64_t done = L->st.found + L->st.absent + L->st.puts +
	                L->st.del_found + L->st.del_absent;
	if (!c->said && done >= PRE_OPS) {
		if (np_say(&c->np, 'P', NULL, 0))
			return false;
		c->said = true;
	}
	int cmd = np_poll_cmd(&c->np);
	if (cmd == 'S') { /* no more writes of the victim's shard */
		lin_quiet(L, VICTIM, NM);
		if (np_say(&c->np, 'S', NULL, 0))
			return false;
	} else if (cmd == 'B') {
		if (puts_sync(c, 'B', NWIT))
			return false;
	} else if (cmd == 'K') {
		lin_quiet(L, -1, NM);
		if (rec_told(&c->np, sn))
			return false;
		c->t_end = sn->t_kill_ns + RECONF_MS * 1000000ull;
	} else if (cmd) {
		return false;
	}
	if (rec_watch(&c->np, sn))
		c->t_end = sn->t_seen_ns + POST_MS * 1000000ull;
	return !sn->removed && np_now_ns() < c->t_end;
}

static int alloc_report(struct ch *c);

static int body(void *arg)
{
	struct ch *c = arg;
	farm_ht *ht = farm_kv_table(c->kv);
	if (np_wait_cmd(&c->np) != 'G')
		return 20;
	farm_node_on_config(c->np.node, rec_on_config, NULL);
	if (lin_init(&c->L, &c->np, ht, W, GIVE_UP_NS, false))
		return 21;
	c->L.kv = c->kv;
	c->t_end = UINT64_MAX;
	if (lin_run(&c->L, rec_go, c))
		return 22;
	c->r.st = c->L.st;
	if (np_say(&c->np, 'D', &c->r, sizeof(c->r)))
		return 23;
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		if (cmd == 'W') {
			if (puts_sync(c, 'W', NFIN))
				return 24;
		} else if (cmd == 'F') {
			uint32_t keys[NALL];
			struct fin_get out[NALL];
			if (tu_recv(c->np.in, keys, sizeof(keys)))
				return 26;
			for (unsigned i = 0; i < NALL; i++) {
				struct rec r;
				out[i].status =
				        lin_op_sync(&c->L, LC_GET, keys[i], &r);
				out[i].value = r.found ? r.value : 0;
			}
			if (np_say(&c->np, 'F', out, sizeof(out)))
				return 27;
		} else if (cmd == 'A') {
			if (alloc_report(c))
				return 29;
		} else {
			return cmd == 'Q' && !lin_close(&c->L) ? 0 : 28;
		}
	}
}

/* The allocator's state, live and rebuilt by scan (allocscan.h; the
 * machine is quiet: the workload is over). */
static int alloc_report(struct ch *c)
{
	struct alloc_report a;
	alloc_scan(c->np.node, &a);
	return np_say(&c->np, 'A', &a, sizeof(a));
}

static int machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct ch *c = calloc(1, sizeof(*c));
	if (!c)
		return 9;
	c->np = *np;
	struct farm_config cfg;
	int st = np_config_zk(np, RSIZE, zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (!st) {
		cfg.replicas = 3;
		/* Formed with NM machines: one joining later is late. */
		cfg.expect_machines = NM;
		st = kvp_run_config(&c->np, &cfg, NULL, NBUCKETS, JOIN_MS,
		                    &c->kv, body, c);
	}
	free(c);
	return st;
}

/* A machine with a new id (LATE_ID) joins the running cluster with an
 * empty directory after recovery (rejoin and growth): late, it holds no
 * primary region, so it joins the KV store without a shard of its own
 * (farm_kv_join_existing_sync, the list from machine SCANNER), says 'R',
 * then answers 'F' (reads every key named, as the survivors do) until
 * 'Q'. */
#define LATE_ID NM
static struct np_cluster late_cl; /* slot 0 */

static int late_reader(struct np_child *np, void *arg)
{
	(void)arg;
	struct farm_config cfg;
	int st = np_config_zk(np, RSIZE, zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (st)
		return st;
	cfg.machine_id = LATE_ID;
	cfg.replicas = 3;
	cfg.expect_machines = NM;
	/* A reader that leaves once it has read: it stays late (a grown
	 * primary's departure would be another failure to recover). */
	cfg.grow = false;
	farm_kv *kv = NULL;
	if (farm_node_open(&cfg, &np->node))
		return 4;
	st = 5;
	if (farm_kv_create(np->node, NULL, NBUCKETS, &kv))
		goto out;
	farm_node_set_app_loops(np->node, true);
	st = 6;
	if (farm_node_start(np->node, JOIN_MS) ||
	    farm_node_loop_open(np->node, 0, &np->loop))
		goto out;
	st = 7;
	st = np_await_member(np->node, np->loop, LATE_ID, JOIN_MS) ? 7 : 0;
	if (st || farm_kv_attach(kv, np->loop)) {
		st = 7;
		goto out;
	}
	int rc = farm_kv_join_existing_sync(kv, np->loop, SCANNER, JOIN_MS);
	if (rc) {
		fprintf(stderr, "late: join: %s\n", farm_strerror(rc));
		st = 8;
		goto out;
	}
	st = np_say(np, 'R', NULL, 0) ? 9 : 0;
	while (!st) {
		int cmd = np_wait_cmd(np);
		if (cmd != 'F')
			break;
		uint32_t keys[NALL];
		struct fin_get out[NALL];
		if (tu_recv(np->in, keys, sizeof(keys))) {
			st = 10;
			break;
		}
		for (unsigned i = 0; i < NALL; i++) {
			uint8_t k[KLEN], val[VMAX];
			uint32_t len = 0;
			mkkey(k, "lin", keys[i]);
			out[i].status = farm_kv_get_sync(
			        kv, np->loop, k, KLEN, val, sizeof(val), &len);
			out[i].value = out[i].status ? 0 : val_id(val, len);
		}
		if (np_say(np, 'F', out, sizeof(out)))
			st = 11;
	}
out:
	if (np->loop) {
		farm_kv_detach(kv, np->loop);
		farm_node_loop_close(np->node, np->loop);
	}
	farm_node_close(np->node);
	farm_kv_destroy(kv);
	return st;
}

/* ---- the parent ------------------------------------------------------ */

static struct np_cluster cl;

/* Every machine's folded history. */
struct hist {
	struct rec *r[NM];
	size_t n[NM];
};

/* May the final read @g of key @key be its last write? The candidates are
 * the writes that no acknowledged write began after the end of (a write
 * whose outcome is unknown never ended), and absent when no write was
 * acknowledged. *@last: the acknowledged write that ended last (NULL:
 * none). */
static bool final_ok(const struct hist *h, uint64_t key,
                     const struct fin_get *g, const struct rec **last)
{
	uint64_t t_last_inv = 0; /* the latest start of an acked write */
	*last = NULL;
	for (unsigned i = 0; i < NM; i++)
		for (size_t k = 0; k < h->n[i]; k++) {
			const struct rec *w = &h->r[i][k];
			if (w->key != key || !w->kind || w->kind == LC_GET ||
			    w->t_resp == LC_NO_RESPONSE)
				continue;
			t_last_inv = FARM_MAX(t_last_inv, w->t_inv);
			if (!*last || w->t_resp > (*last)->t_resp)
				*last = w;
		}
	if (!*last && g->status == -ENOENT)
		return true;
	for (unsigned i = 0; i < NM; i++)
		for (size_t k = 0; k < h->n[i]; k++) {
			const struct rec *w = &h->r[i][k];
			if (w->key != key || !w->kind || w->kind == LC_GET ||
			    w->t_resp < t_last_inv)
				continue; /* superseded (t_resp: inf if unknown)
				           */
			bool put = w->kind == LC_PUT;
			if (g->status == 0 ? put && w->value == g->value : !put)
				return true;
		}
	return false;
}

static void report_run(unsigned i, const struct run_report *r, struct fails *f)
{
	print_lin(i, &r->st);
	(void)rec_check_seen(f, i, &r->seen, RECONF_MS);
	char errs[256];
	if (r->st.hard || r->st.gave_up || r->st.undrained || r->st.garbage)
		failed(f,
		       "machine %u: %" PRIu64 " errors not retryable, %" PRIu64
		       " operations given up after %.0f s of retries, %" PRIu64
		       " left without an answer, %" PRIu64
		       " garbage values (errors: %s)",
		       i, r->st.hard, r->st.gave_up, (double)GIVE_UP_NS / 1e9,
		       r->st.undrained, r->st.garbage,
		       tu_errs_str(&r->st.errs, errs, sizeof(errs)));
}

/* Puts of the dead shard's hot keys acknowledged after the survivors'
 * new configuration; the first one's time after the kill. */
static void report_dead_shard(const struct hist *h, const struct run_report *rr,
                              uint64_t t_kill, struct fails *f)
{
	unsigned nk = 0, starved = 0;
	uint64_t first = UINT64_MAX, total = 0, failed_puts = 0;
	char list[256] = "";
	size_t o = 0;
	for (unsigned key = 0; key < NKEYS; key++) {
		if (kvl_shard(key, NM) != VICTIM)
			continue;
		nk++;
		uint64_t n = 0;
		for (unsigned i = 0; i < NM; i++) {
			if (i == VICTIM || !rr[i].seen.new_config)
				continue;
			for (size_t k = 0; k < h->n[i]; k++) {
				const struct rec *w = &h->r[i][k];
				if (w->key != key ||
				    w->t_inv < rr[i].seen.t_cfg_ns)
					continue;
				if (w->kind != LC_PUT)
					continue;
				if (w->status == 0) {
					n++;
					first = FARM_MIN(first, w->t_resp);
				} else {
					failed_puts++;
				}
			}
		}
		total += n;
		if (!n && o < sizeof(list))
			o += (size_t)snprintf(list + o, sizeof(list) - o,
			                      " lin-%03u", key);
		starved += !n;
	}
	printf("dead shard: %u of the %u hot keys are machine %u's; after the "
	       "new configuration, %" PRIu64 " puts of them acknowledged "
	       "(%" PRIu64 " failed), the first %.1f ms after the kill\n",
	       nk, NKEYS, VICTIM, total, failed_puts,
	       first == UINT64_MAX ? -1.0 : (double)(first - t_kill) / 1e6);
	if (!nk)
		failed(f, "no hot key is in machine %u's shard", VICTIM);
	if (starved)
		failed(f,
		       "%u of machine %u's %u hot keys took no acknowledged "
		       "put after the new configuration:%s",
		       starved, VICTIM, nk, list);
}

/* Allocator recovery: the victim's regions adopted, then used. */
static void report_alloc(const struct alloc_report *ar, struct fails *f)
{
	uint64_t adopted = 0, allocs = 0, frees = 0, deferred = 0, notes = 0;
	uint64_t max_ns = 0;
	for (unsigned i = 0; i < NM; i++) {
		if (i == VICTIM)
			continue;
		const struct alloc_report *a = &ar[i];
		printf("machine %u allocator: %" PRIu64 " region(s) adopted "
		       "(%" PRIu64 " refused, %" PRIu64 " skipped; rebuild "
		       "max %.2f ms), %" PRIu64 " allocations and %" PRIu64
		       " frees in them since, %" PRIu64 " frees deferred "
		       "(%" PRIu64 " lost), %" PRIu64 " frees refused, %" PRIu64
		       " blocks noted in backup copies (%" PRIu64
		       " refused), %" PRIu64
		       " blocks unusable; state of %" PRIu64
		       " regions rebuilt by scan %s the live one (dumps %d/%d, "
		       "%" PRIu64 " bytes)\n",
		       i, a->gs.adopted, a->gs.adopt_failed,
		       a->gs.adopt_skipped, (double)a->gs.adopt_max_ns / 1e6,
		       a->gs.adopted_allocs, a->gs.adopted_frees,
		       a->st.free_deferred, a->st.deferred_lost,
		       a->st.free_failed, a->st.block_notes,
		       a->st.block_note_errors, a->gs.local.blocks_unusable,
		       a->regions, a->equal ? "equals" : "DIFFERS FROM",
		       a->live_rc, a->rebuilt_rc, a->dump_bytes);
		adopted += a->gs.adopted;
		allocs += a->gs.adopted_allocs;
		frees += a->gs.adopted_frees + a->st.free_deferred;
		deferred += a->st.free_deferred;
		notes += a->st.block_notes;
		max_ns = FARM_MAX(max_ns, a->gs.adopt_max_ns);
		alloc_check(i, a, f);
	}
	printf("allocator recovery: %" PRIu64 " region(s) adopted (rebuild "
	       "at most %.2f ms), then %" PRIu64 " objects allocated and "
	       "%" PRIu64 " freed in them (%" PRIu64 " deferred until "
	       "adopted); %" PRIu64 " block descriptions noted\n",
	       adopted, (double)max_ns / 1e6, allocs, frees, deferred, notes);
	if (!adopted)
		failed(f, "no survivor adopted a promoted region");
	if (adopted && (!allocs || !frees))
		failed(f,
		       "the adopted regions took %" PRIu64 " allocations and "
		       "%" PRIu64 " frees: the workload did not use them",
		       allocs, frees);
}

/* Machine @i puts new values to @n keys: their outcomes. */
static void p_puts(unsigned i, char cmd, const uint32_t *keys, unsigned n,
                   struct fin_put *out)
{
	np_send(&cl, i, cmd);
	assert_int_equal(tu_send(cl.to[i], keys, 4ull * n), 0);
	np_expect(&cl, i, cmd, 60000 + (int)n * 10000);
	np_recv(&cl, i, out, n * sizeof(*out), 1000);
}

/* Count the failed puts of @fp (a line for each of the first 3). */
static void check_puts(const struct fin_put *fp, const uint32_t *keys,
                       unsigned n, const char *when, struct fails *f)
{
	unsigned bad = 0;
	for (unsigned j = 0; j < n; j++)
		if (fp[j].status && bad++ < 3)
			failed(f,
			       "put of lin-%03u (machine %u's shard) by "
			       "machine "
			       "%u %s: %s",
			       keys[j], VICTIM, SCANNER, when,
			       farm_strerror(fp[j].status));
	if (bad > 3)
		failed(f, "%u of %u puts to machine %u's shard %s failed", bad,
		       n, VICTIM, when);
	printf("machine %u put %u new keys of machine %u's shard %s: %u "
	       "failed\n",
	       SCANNER, n, VICTIM, when, bad);
}

/* One kv_under_kill run: what the parent sent and got back. */
struct kvk {
	const char *name;
	uint32_t keys[NALL]; /* the workload's, then NWIT + NFIN new ones */
	const uint32_t *wit, *fin;
	struct fin_put wp[NWIT], fp[NFIN];
	struct kill_msg km;
	struct run_report rr[NM];
	double run_s, late_ms;
	struct fin_get fg[NM][NALL], lg[NALL];
	int late_st, st[NM];
	struct alloc_report ar[NM];
	struct hist h;
	struct fails f;
};

/* New keys of the victim's shard: NWIT witnesses, put just before the
 * kill, and NFIN for after recovery. */
static void kvk_keys(struct kvk *x)
{
	uint32_t nk = 0;
	for (unsigned i = 0; i < NKEYS; i++)
		x->keys[i] = i;
	for (uint32_t k = NKEYS; nk < NWIT + NFIN && k < 100000; k++)
		if (kvl_shard(k, NM) == VICTIM)
			x->keys[NKEYS + nk++] = k;
	assert_int_equal(nk, NWIT + NFIN);
	x->wit = x->keys + NKEYS;
	x->fin = x->keys + NKEYS + NWIT;
}

/* The cluster up and running its workload (@quiet: stopped writing the
 * victim's shard), the witnesses put, the victim killed, the survivors'
 * runs reported. */
static void kvk_kill(struct kvk *x, bool quiet)
{
	np_start(&cl, "reckv", machine, NULL);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&cl, i, 'R', 60000);
	for (unsigned i = 0; i < NM; i++)
		np_send(&cl, i, 'G');
	for (unsigned i = 0; i < NM; i++)
		np_expect(&cl, i, 'P', 60000);
	for (unsigned i = 0; quiet && i < NM; i++)
		np_send(&cl, i, 'S');
	for (unsigned i = 0; quiet && i < NM; i++)
		np_expect(&cl, i, 'S', 60000);
	kvk_keys(x);
	p_puts(SCANNER, 'B', x->wit, NWIT, x->wp);
	x->km = rec_kill(&cl, VICTIM);
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM) {
			np_expect(&cl, i, 'D', RECONF_MS + POST_MS + 60000);
			np_recv(&cl, i, &x->rr[i], sizeof(x->rr[i]), 1000);
		}
	x->run_s = (double)(np_now_ns() - x->km.t_kill_ns) / 1e9;
}

/* Machine @i of @c reads every key into @out ('F'). */
static void kvk_read_all(struct np_cluster *c, unsigned i, const uint32_t *keys,
                         struct fin_get *out)
{
	np_send(c, i, 'F');
	assert_int_equal(tu_send(c->to[i], keys, NALL * sizeof(*keys)), 0);
	np_expect(c, i, 'F', 60000 + NALL * 1000);
	np_recv(c, i, out, NALL * sizeof(*out), 1000);
}

/* Rejoin and growth: a machine with a new id and an empty directory
 * joins the running store late and reads every key too. */
static void kvk_late(struct kvk *x)
{
	uint64_t t_late = np_now_ns();
	memset(&late_cl, 0, sizeof(late_cl));
	for (unsigned i = 0; i < NM; i++)
		late_cl.to[i] = late_cl.from[i] = -1;
	snprintf(late_cl.dir[0], sizeof(late_cl.dir[0]), "%s/late", cl.root);
	assert_int_equal(mkdir(late_cl.dir[0], 0700), 0);
	np_other = &cl;
	np_spawn_one(&late_cl, 0, late_reader, NULL);
	np_other = NULL;
	np_expect(&late_cl, 0, 'R', JOIN_MS + 30000);
	x->late_ms = (double)(np_now_ns() - t_late) / 1e6;
	kvk_read_all(&late_cl, 0, x->keys, x->lg);
	np_send(&late_cl, 0, 'Q');
	x->late_st = tu_reap(late_cl.pid[0]);
	late_cl.pid[0] = 0;
	np_cleanup(&late_cl);
}

/* The survivors' allocator reports, then the cluster ends. */
static void kvk_finish(struct kvk *x)
{
	for (unsigned i = 0; i < NM; i++) {
		if (i == VICTIM)
			continue;
		np_send(&cl, i, 'A');
		np_expect(&cl, i, 'A', 120000);
		np_recv(&cl, i, &x->ar[i], sizeof(x->ar[i]), 1000);
	}
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			np_send(&cl, i, 'Q');
	np_finish(&cl, x->st);
}

/* Key @j as the survivors read it: their first answer (NULL: none
 * read it), each failed read and each different answer counted. */
static const struct fin_get *kvk_survivors_read(struct kvk *x, unsigned j,
                                                unsigned *unread,
                                                unsigned *differ)
{
	const struct fin_get *first = NULL;
	for (unsigned i = 0; i < NM; i++) {
		if (i == VICTIM)
			continue;
		const struct fin_get *g = &x->fg[i][j];
		if (g->status && g->status != -ENOENT) {
			if ((*unread)++ < 3)
				failed(&x->f,
				       "machine %u cannot read lin-%03u (shard "
				       "%u): %s",
				       i, x->keys[j], kvl_shard(x->keys[j], NM),
				       farm_strerror(g->status));
			continue;
		}
		if (!first) {
			first = g;
		} else if ((g->status != first->status ||
		            g->value != first->value) &&
		           (*differ)++ < 3) {
			failed(&x->f,
			       "survivors read lin-%03u differently (%s "
			       "%#" PRIx64 " at machine %u)",
			       x->keys[j], farm_strerror(g->status), g->value,
			       i);
		}
	}
	return first;
}

/* Key @j read as @first, not its last acknowledged value: failed, with
 * that write. */
static void kvk_stale(struct kvk *x, unsigned j, const struct fin_get *first,
                      const struct rec *last)
{
	char lw[160] = "none";
	if (last)
		snprintf(lw, sizeof(lw),
		         "%s %#" PRIx64 " by client %u, ended %.1f ms after "
		         "the kill",
		         last->kind == LC_PUT ? "put" : "delete", last->value,
		         last->client,
		         ((double)last->t_resp - (double)x->km.t_kill_ns) /
		                 1e6);
	failed(&x->f,
	       "lin-%03u (shard %u) reads %s %#" PRIx64
	       ", not its last acknowledged value (the last acknowledged "
	       "write: %s)",
	       x->keys[j], kvl_shard(x->keys[j], NM),
	       first->status ? "absent" : "value", first->value, lw);
}

/* Every key read alike by the survivors, as its last acknowledged
 * write left it. */
static void kvk_check_final(struct kvk *x)
{
	unsigned unread = 0, differ = 0, stale = 0, ndead = 0;
	for (unsigned j = 0; j < NALL; j++) {
		ndead += kvl_shard(x->keys[j], NM) == VICTIM;
		const struct fin_get *first =
		        kvk_survivors_read(x, j, &unread, &differ);
		const struct rec *last;
		if (first && !final_ok(&x->h, x->keys[j], first, &last) &&
		    stale++ < 4)
			kvk_stale(x, j, first, last);
	}
	if (unread > 3)
		failed(&x->f, "%u reads in all failed", unread);
	if (stale > 4)
		failed(&x->f,
		       "%u keys in all lost their last acknowledged value",
		       stale);
	printf("final: %u keys (%u of machine %u's shard) read by each of the "
	       "%u survivors: %u failed, %u answered differently, %u lost "
	       "their last acknowledged value\n",
	       NALL, ndead, VICTIM, NM - 1, unread, differ, stale);
}

/* The late machine reads what the survivors read. */
static void kvk_check_late(struct kvk *x)
{
	unsigned late_differ = 0;
	const unsigned ref = VICTIM == 0 ? 1 : 0;
	for (unsigned j = 0; j < NALL; j++)
		if ((x->lg[j].status != x->fg[ref][j].status ||
		     x->lg[j].value != x->fg[ref][j].value) &&
		    late_differ++ < 3)
			failed(&x->f,
			       "machine %u (joined late) reads lin-%03u as %s "
			       "%#" PRIx64 ", machine %u as %s %#" PRIx64,
			       LATE_ID, x->keys[j],
			       farm_strerror(x->lg[j].status), x->lg[j].value,
			       ref, farm_strerror(x->fg[ref][j].status),
			       x->fg[ref][j].value);
	if (x->late_st)
		failed(&x->f, "machine %u (joined late) exited with %d",
		       LATE_ID, x->late_st);
	printf("late: machine %u joined the running store %.0f ms after its "
	       "start and read the %u keys: %u differ from machine %u's\n",
	       LATE_ID, x->late_ms, NALL, late_differ, ref);
}

/* The runs, the dead shard, the allocators and the puts: reported and
 * checked. */
static void kvk_check_runs(struct kvk *x, bool quiet)
{
	printf("%s: machine %u killed after every machine completed %d "
	       "operations%s; survivors ran %.1f s after the kill\n",
	       x->name, VICTIM, PRE_OPS,
	       quiet ? " and stopped writing its shard" : "", x->run_s);
	for (unsigned i = 0; i < NM; i++) {
		if (i == VICTIM)
			continue;
		if (x->st[i])
			failed(&x->f, "machine %u exited with status %d", i,
			       x->st[i]);
		report_run(i, &x->rr[i], &x->f);
	}
	for (unsigned i = 0; i < NM; i++) {
		x->h.r[i] = kvl_load(&cl, i, &x->h.n[i]);
		if (!x->h.r[i])
			failed(&x->f, "machine %u left no history", i);
	}
	report_dead_shard(&x->h, x->rr, x->km.t_kill_ns, &x->f);
	report_alloc(x->ar, &x->f);
	check_puts(x->wp, x->wit, NWIT, "just before the kill", &x->f);
	check_puts(x->fp, x->fin, NFIN, "after recovery", &x->f);
}

/* Every machine's history linearizable. */
static void kvk_lincheck(struct kvk *x)
{
	lc_report rep;
	uint64_t nrec;
	int rc = kvl_check(&cl, &rep, &nrec);
	lc_report_print(stdout, &rep);
	printf("lincheck: %" PRIu64 " operations of %u machines: %d\n", nrec,
	       NM, rc);
	if (rc)
		failed(&x->f,
		       "lincheck: %d (%" PRIu64 " keys without a "
		       "linearization, %" PRIu64 " not checked in time)",
		       rc, rep.nviolations, rep.ntimedout + rep.nunchecked);
}

/* @quiet: the workload stops writing the victim's shard before the
 * witnesses are put (so theirs are its last commits), and starts again
 * once it is killed. */
static void kv_under_kill(bool quiet, const char *name)
{
	static struct kvk x;
	x = (struct kvk){.name = name};
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-rec-kv-%d-%s%s",
	         (int)getpid(), name,
	         opt_broken || opt_broken_revoke ? "-broken" : "");
	uint64_t t0 = np_now_ns();
	kvk_kill(&x, quiet);
	/* The final puts to the dead shard, then every survivor reads all. */
	p_puts(SCANNER, 'W', x.fin, NFIN, x.fp);
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			kvk_read_all(&cl, i, x.keys, x.fg[i]);
	kvk_late(&x);
	kvk_finish(&x);
	kvk_check_runs(&x, quiet);
	kvk_check_final(&x);
	kvk_check_late(&x);
	kvk_lincheck(&x);
	for (unsigned i = 0; i < NM; i++)
		free(x.h.r[i]);
	tu_rmtree(cl.root);
	cl.root[0] = 0;
	printf("%s%s: %.1f s in all\n", name,
	       opt_broken          ? " --broken"
	       : opt_alloc_broken  ? " --alloc_broken"
	       : opt_broken_revoke ? " --broken_revoke"
	                           : "",
	       (double)(np_now_ns() - t0) / 1e9);
	rec_verdict(&x.f, name, VICTIM,
	            opt_broken || opt_alloc_broken || opt_broken_revoke,
	            opt_alloc_broken ? "backups kept no block table"
	            : opt_broken_revoke
	                    ? "revocation left the survivors' requests to the "
	                      "removed machine outstanding"
	                    : "recovery promoted backups without draining "
	                      "their logs");
}

/* Writes of the victim's shard in flight at the kill. */
static void test_kill_mid_write(void **state)
{
	(void)state;
	kv_under_kill(false, "kill_mid_write");
}

/* The witnesses are the victim's last commits: still in the backups'
 * logs at the kill (every later commit would have let them be applied). */
static void test_kill_quiet_shard(void **state)
{
	(void)state;
	kv_under_kill(true, "kill_quiet_shard");
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
	if (argc > 1 && !strcmp(argv[1], "--broken")) {
		/* A test-only switch: promoted backups serve without their
		 * logs drained. The checks must notice. */
		if (!farm_fault_built()) {
			printf("skipped: --broken needs fault injection "
			       "(FARM_FAULT_INJECTION=OFF)\n");
			return FARM_TEST_SKIP;
		}
		opt_broken = true;
		farm_txn_testing_recovery_no_drain(true);
	} else if (argc > 1 && !strcmp(argv[1], "--alloc_broken")) {
		/* A test-only switch: COMMIT-BACKUPs carry no block
		 * descriptions. The allocator checks must notice. */
#ifdef FARM_FAULT_INJECTION
		opt_alloc_broken = true;
		farm_txn_testing_no_block_info(true);
#else
		printf("skipped: built without fault injection "
		       "(FARM_FAULT_INJECTION=OFF)\n");
		return FARM_TEST_SKIP;
#endif
	} else if (argc > 1 && !strcmp(argv[1], "--broken_revoke")) {
		/* A test-only switch of the udp fabric: revocation fences
		 * the removed machine but leaves our requests to it
		 * outstanding. The dead-shard check must notice. */
		const char *fab = getenv("FARM_FABRIC");
		if (!fab || strcmp(fab, "udp") != 0 ||
		    farm_udp_testing_set(FARM_UDP_KNOB_REVOKE_FLUSH, 0) < 0) {
			printf("skipped: --broken_revoke needs FARM_FABRIC=udp "
			       "and fault injection\n");
			return FARM_TEST_SKIP;
		}
		opt_broken_revoke = true;
	} else if (argc > 1) {
		fprintf(stderr,
		        "usage: %s [--broken | --alloc_broken | "
		        "--broken_revoke]\n",
		        argv[0]);
		return 2;
	}
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_kill_quiet_shard, teardown),
	        cmocka_unit_test_teardown(test_kill_mid_write, teardown),
	};
	/* --broken: the run whose witnesses must be drained;
	 * --alloc_broken: the run with writes everywhere. */
	const struct CMUnitTest *run = opt_alloc_broken ? tests + 1 : tests;
	size_t n = opt_broken || opt_alloc_broken || opt_broken_revoke
	                   ? 1
	                   : sizeof(tests) / sizeof(tests[0]);
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "rec_kv", run, n);
}
