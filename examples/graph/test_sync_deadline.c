/*
 * Deadlines of the blocking wrappers and farm_replicas, on a 3-machine
 * local cluster with 2 copies of every region (gcluster.h; public API
 * only).
 *
 * replicas: every machine asks farm_replicas where node X (owned by
 * machine 2) lives; all name the same configuration (the one in force),
 * primary and one backup, and bad addresses are refused.
 *
 * deadline: the parent stops machine 2 (SIGSTOP), X's owner and its
 * region's primary; machine 0 then calls, each with a deadline of 200 ms
 * (per call, and as the handle's default): fgraph updates and assoc_get
 * (shipped to X's owner), KV puts (shipped to their shard's owner, one
 * of them machine 2) and a transaction's commit (writing X: a lock at its
 * primary). Each must give up within the deadline and a margin (-ETIMEDOUT;
 * a commit FARM_EUNKNOWN, its outcome unknown and not retryable),
 * not at the owner's 10 s request timeout. Once machine 2 runs again the
 * same calls succeed, and the answers that come late to the calls that
 * gave up are harmless (the sanitizers' builds check the memory), as is
 * that of an assoc_get abandoned while machine 2 was stopped (its output
 * freed at once; awaited through a later answered call on the same ring).
 * The one-sided reads (obj_get, ranges, KV get and mget, a transaction's
 * read) complete without the owner's CPU on shm and are checked to end.
 */
#include "gcluster.h"
#include "graph_int.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define STOPPED     2u
#define DEADLINE_NS (200ull * 1000000ull)
#define MARGIN_NS   (2000ull * 1000000ull) /* two loaded cores */
#define NKEYS       16u

struct answer {
	int32_t err;
	uint32_t primary, nbackups, backup;
	uint64_t config_id;
};

/* Node X: the first id machine STOPPED owns. */
static uint64_t node_x(const fg_graph *g)
{
	uint64_t id = 1;
	while (fg_owner(g, id) != STOPPED)
		id++;
	return id;
}

static int node_ptr(struct gc_machine *mc, uint64_t id, farm_fatptr *p)
{
	uint8_t k[FG_KEY_LEN];
	fg_key(id, k);
	uint32_t len = 0;
	int rc = farm_kv_get_sync(mc->kv, mc->loop, k, FG_KEY_LEN, p,
	                          sizeof(*p), &len);
	return rc ? rc : len == sizeof(*p) ? 0 : -EPROTO;
}

static void key_of(unsigned i, char k[16])
{
	snprintf(k, 16, "dl-%u", i);
}

static int setup(struct gc_machine *mc)
{
	int rc = fg_obj_add_sync(mc->g, mc->loop, node_x(mc->g), 1, 0, "x", 1);
	for (unsigned i = 0; i < NKEYS && !rc; i++) {
		char k[16];
		key_of(i, k);
		rc = farm_kv_put_sync(mc->kv, mc->loop, k, (uint32_t)strlen(k),
		                      "v", 1);
	}
	return rc;
}

static struct answer where(struct gc_machine *mc)
{
	struct answer a = {0};
	farm_fatptr p;
	struct farm_replicas r;
	if ((a.err = node_ptr(mc, node_x(mc->g), &p)))
		return a;
	if ((a.err = farm_replicas(mc->node, p.addr, &r)))
		return a;
	a.primary = r.primary;
	a.nbackups = r.nbackups;
	a.backup = r.nbackups ? r.backups[0] : UINT32_MAX;
	a.config_id = r.config_id;
	if (r.config_id != farm_node_config_id(mc->node) ||
	    r.region != farm_gaddr_region(p.addr))
		a.err = -EPROTO;
	/* bad input */
	if (farm_replicas(mc->node, FARM_GADDR_NULL, &r) != -EINVAL ||
	    farm_replicas(mc->node, farm_gaddr_make(0, 64), &r) != -EINVAL ||
	    farm_replicas(NULL, p.addr, &r) != -EINVAL ||
	    farm_replicas(mc->node, p.addr, NULL) != -EINVAL)
		a.err = -EPROTO;
	return a;
}

/* Whether @rc is @want (-ETIMEDOUT; a commit's FARM_EUNKNOWN) and came
 * within the deadline's margin. */
static bool gave_up(const char *what, int rc, uint64_t t0, int want)
{
	uint64_t dt = gc_now_ns() - t0;
	bool ok =
	        rc == want && dt >= DEADLINE_NS && dt < DEADLINE_NS + MARGIN_NS;
	fprintf(stderr, "%s: %d after %.1f ms%s\n", what, rc, dt / 1e6,
	        ok ? "" : " (expected to give up at 200 ms)");
	return ok;
}

static bool timed_out(const char *what, int rc, uint64_t t0)
{
	return gave_up(what, rc, t0, -ETIMEDOUT);
}

static int tx_write_x(struct gc_machine *mc, farm_fatptr p, bool timed)
{
	farm_tx *tx;
	const void *d;
	void *w;
	int rc = farm_tx_begin(farm_node_txm(mc->node), mc->loop, &tx);
	if (rc)
		return rc;
	if (!(rc = farm_tx_read_sync(tx, p.addr, p.size, &d)) &&
	    !(rc = farm_tx_write(tx, p.addr, &w))) {
		/* the same bytes: only the locks matter */
		memcpy(w, d, p.size);
		rc = timed ? farm_tx_commit_sync_timed(tx, DEADLINE_NS)
		           : farm_tx_commit_sync(tx);
	}
	farm_tx_free(tx);
	return rc;
}

/* The reads with deadlines while machine 2 is stopped. A call shipped to
 * it (assoc_get) gives up with its operation still in flight: its output
 * is on the heap and freed at once, so a late write into it is a use after
 * free (the sanitizers' builds report it), and its abandoned record is
 * freed by the late completion (a leak otherwise); resumed_calls waits for
 * that completion. The others read one-sided (node map, buckets, object),
 * which the shm fabric completes without the owner's CPU: they must end in
 * time with 0, and cannot be made to give up this way. */
static bool one_sided(const char *what, int rc)
{
	if (rc)
		fprintf(stderr, "%s: %d (expected 0: a one-sided read)\n", what,
		        rc);
	return rc == 0;
}

static bool abandoned_calls(struct gc_machine *mc, farm_fatptr p)
{
	uint64_t x = node_x(mc->g), t0;
	bool ok = true;
	unsigned n;
	int rc;
	struct fg_obj *o = malloc(sizeof(*o));
	struct fg_edge *e = malloc(2 * sizeof(*e));
	t0 = gc_now_ns();
	rc = fg_obj_get_sync_timed(mc->g, mc->loop, x, o, DEADLINE_NS);
	free(o);
	ok &= one_sided("fg_obj_get_sync_timed", rc);
	t0 = gc_now_ns();
	rc = fg_assoc_range_sync_timed(mc->g, mc->loop, x, 1, 0, 10, e, 2, &n,
	                               DEADLINE_NS);
	ok &= one_sided("fg_assoc_range_sync_timed", rc);
	free(e);
	e = malloc(2 * sizeof(*e));
	t0 = gc_now_ns();
	rc = fg_assoc_get_sync_timed(mc->g, mc->loop, x, 1, &x, 1, INT64_MAX,
	                             INT64_MIN, e, 2, &n, DEADLINE_NS);
	free(e);
	ok &= timed_out("fg_assoc_get_sync_timed (abandoned)", rc, t0);
	/* every key, machine 2's shard's among them */
	for (unsigned i = 0; i < NKEYS; i++) {
		char k[16];
		key_of(i, k);
		const void *keys[1] = {k};
		uint32_t klens[1] = {(uint32_t)strlen(k)}, len;
		uint8_t *v = malloc(8);
		t0 = gc_now_ns();
		rc = farm_kv_get_sync_timed(mc->kv, mc->loop, k, klens[0], v, 8,
		                            &len, DEADLINE_NS);
		free(v);
		ok &= one_sided("farm_kv_get_sync_timed", rc);
		v = malloc(8);
		uint32_t *lens = malloc(sizeof(*lens));
		int *st = malloc(sizeof(*st));
		t0 = gc_now_ns();
		rc = farm_kv_mget_sync_timed(mc->kv, mc->loop, 1, keys, klens,
		                             v, 8, lens, st, DEADLINE_NS);
		free(v);
		free(lens);
		free(st);
		ok &= one_sided("farm_kv_mget_sync_timed", rc);
	}
	/* a transaction's read, handed to the transaction's orphans */
	farm_tx *tx;
	const void *d;
	if (farm_tx_begin(farm_node_txm(mc->node), mc->loop, &tx))
		return false;
	t0 = gc_now_ns();
	rc = farm_tx_read_sync_timed(tx, p.addr, p.size, &d, DEADLINE_NS);
	ok &= one_sided("farm_tx_read_sync_timed", rc);
	farm_tx_free(tx); /* frees the wrapper's record once the read ends */
	return ok;
}

static int stopped_calls(struct gc_machine *mc)
{
	uint64_t x = node_x(mc->g), t0;
	bool ok = true;
	farm_fatptr p;
	int rc = node_ptr(mc, x, &p); /* one-sided: no owner needed */
	if (rc)
		return rc;
	/* fgraph, per call */
	t0 = gc_now_ns();
	rc = fg_obj_update_sync_timed(mc->g, mc->loop, x, 1, 0, "y", 1,
	                              DEADLINE_NS);
	ok &= timed_out("fg_obj_update_sync_timed", rc, t0);
	/* fgraph, the handle's default */
	fg_set_sync_timeout(mc->g, DEADLINE_NS);
	struct fg_edge e[2];
	unsigned n = 7;
	uint64_t id2 = 5;
	t0 = gc_now_ns();
	rc = fg_assoc_get_sync(mc->g, mc->loop, x, 1, &id2, 1, INT64_MAX,
	                       INT64_MIN, e, 2, &n);
	ok &= timed_out("fg_assoc_get_sync", rc, t0) && n == 7;
	t0 = gc_now_ns();
	rc = fg_assoc_add_sync(mc->g, mc->loop, x, 1, 5, 1, "e", 1);
	ok &= timed_out("fg_assoc_add_sync", rc, t0);
	fg_set_sync_timeout(mc->g, 0);
	/* KV, the store's default: the keys of machine 2's shard time out */
	farm_kv_set_sync_timeout(mc->kv, DEADLINE_NS);
	unsigned timeouts = 0;
	for (unsigned i = 0; i < NKEYS; i++) {
		char k[16];
		key_of(i, k);
		t0 = gc_now_ns();
		rc = farm_kv_put_sync(mc->kv, mc->loop, k, (uint32_t)strlen(k),
		                      "w", 1);
		if (rc == -ETIMEDOUT) {
			ok &= timed_out("farm_kv_put_sync", rc, t0);
			timeouts++;
		} else if (rc) {
			ok = false;
		}
	}
	farm_kv_set_sync_timeout(mc->kv, 0);
	fprintf(stderr, "farm_kv_put_sync: %u of %u keys timed out\n", timeouts,
	        NKEYS);
	ok &= timeouts > 0;
	/* a transaction, per call, then the manager's default */
	t0 = gc_now_ns();
	ok &= gave_up("farm_tx_commit_sync_timed", tx_write_x(mc, p, true), t0,
	              FARM_EUNKNOWN);
	farm_txm_set_sync_timeout(farm_node_txm(mc->node), DEADLINE_NS);
	t0 = gc_now_ns();
	ok &= gave_up("farm_tx_commit_sync", tx_write_x(mc, p, false), t0,
	              FARM_EUNKNOWN);
	ok &= !farm_tx_retryable(FARM_EUNKNOWN);
	farm_txm_set_sync_timeout(farm_node_txm(mc->node), 0);
	ok &= abandoned_calls(mc, p);
	return ok ? 0 : -EPROTO;
}

/* About 6 s of farm_tx_run's backoff (16 ms at most between tries):
 * room for the abandoned commits to resolve on two loaded cores. */
#define RESUME_TRIES 400u

struct xw {
	struct gc_machine *mc;
	uint64_t x;
};

/* Rewrite X's bytes as they are: only the locks matter. X's pointer is
 * looked up in each try, since the update before may have moved it (a
 * read of the freed copy is a conflict: the next try finds the new one). */
static int write_x_body(farm_tx *tx, void *ctx)
{
	struct xw *c = ctx;
	farm_fatptr p;
	const void *d;
	void *w;
	int rc = node_ptr(c->mc, c->x, &p);
	if (rc)
		return rc;
	if ((rc = farm_tx_read_sync(tx, p.addr, p.size, &d)))
		return rc == FARM_EFREED ? FARM_EVALIDATION : rc;
	if ((rc = farm_tx_write(tx, p.addr, &w)))
		return rc;
	memcpy(w, d, p.size);
	return 0;
}

/* Machine 2 runs again: the same calls succeed (retried while the ones
 * that gave up still hold what they locked). */
static int resumed_calls(struct gc_machine *mc)
{
	uint64_t x = node_x(mc->g);
	int rc = fg_obj_update_sync(mc->g, mc->loop, x, 1, 0, "z", 1);
	if (!rc)
		rc = farm_kv_put_sync(mc->kv, mc->loop, "dl-0", 4, "z", 1);
	/* Retried with backoff while the commits that gave up still hold
	 * their locks; the last try's outcome is the test's. */
	struct xw c = {mc, x};
	if (!rc)
		rc = farm_tx_run(farm_node_txm(mc->node), mc->loop,
		                 write_x_body, &c, RESUME_TRIES);
	/* The abandoned assoc_get's answer comes from machine 2 on the same
	 * ring, ahead of this one's: once this one is answered, that one's
	 * completion has run (and freed its record). */
	struct fg_edge e[2];
	unsigned n;
	if (!rc)
		rc = fg_assoc_get_sync(mc->g, mc->loop, x, 1, &x, 1, INT64_MAX,
		                       INT64_MIN, e, 2, &n);
	struct fg_obj o;
	if (!rc)
		rc = fg_obj_get_sync(mc->g, mc->loop, x, &o);
	if (!rc && (o.len != 1 || o.data[0] != 'z'))
		rc = -EPROTO;
	return rc;
}

static int body(struct gc_machine *mc, void *arg)
{
	(void)arg;
	for (;;) {
		char cmd;
		if (gc_wait_cmd(mc, &cmd, 1))
			break;
		struct answer a = {0};
		if (cmd == 'I')
			a.err = setup(mc);
		else if (cmd == 'R')
			a = where(mc);
		else if (cmd == 'T')
			a.err = stopped_calls(mc);
		else if (cmd == 'A')
			a.err = resumed_calls(mc);
		if (gc_write_all(mc->out, &a, sizeof(a)))
			break;
	}
	return 0;
}

/* ---- parent ------------------------------------------------------------- */

static struct answer ask(struct gc_cluster *cl, unsigned m, char cmd)
{
	struct answer a = {.err = -1};
	assert_int_equal(gc_write_all(cl->to[m], &cmd, 1), 0);
	assert_int_equal(gc_read_all(cl->from[m], &a, sizeof(a), 60000), 0);
	if (a.err)
		fail_msg("machine %u: '%c' failed: %d", m, cmd, a.err);
	return a;
}

static void test_deadline_and_replicas(void **state)
{
	(void)state;
	static struct gc_cluster cl;
	gc_live = &cl;
	gc_o.replicas = 2;
	assert_int_equal(gc_start(&cl, "deadline", NULL, body, NULL), 0);
	ask(&cl, 0, 'I');
	struct answer w[GC_NM];
	for (unsigned m = 0; m < GC_NM; m++) {
		w[m] = ask(&cl, m, 'R');
		printf("machine %u: config %" PRIu64 ", primary %u, %u "
		       "backup(s), first %u\n",
		       m, w[m].config_id, w[m].primary, w[m].nbackups,
		       w[m].backup);
		assert_int_equal(w[m].nbackups, 1);
		assert_true(w[m].primary < GC_NM && w[m].backup < GC_NM);
		assert_int_not_equal(w[m].primary, w[m].backup);
		assert_int_equal(w[m].primary, w[0].primary);
		assert_int_equal(w[m].backup, w[0].backup);
		assert_true(w[m].config_id == w[0].config_id);
	}
	/* the owner allocates its nodes in its own regions */
	assert_int_equal(w[0].primary, STOPPED);
	assert_int_equal(kill(cl.pid[STOPPED], SIGSTOP), 0);
	struct answer a = {.err = -1};
	char cmd = 'T';
	assert_int_equal(gc_write_all(cl.to[0], &cmd, 1), 0);
	int r = gc_read_all(cl.from[0], &a, sizeof(a), 60000);
	assert_int_equal(kill(cl.pid[STOPPED], SIGCONT), 0);
	assert_int_equal(r, 0);
	assert_int_equal(a.err, 0);
	ask(&cl, 0, 'A');
	assert_int_equal(gc_finish(&cl), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_deadline_and_replicas,
	                                  gc_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
