/*
 * farm_tx_run across machine processes (txproc.h: forked machines, static
 * membership, one loop driven by the process's main thread).
 *
 *   contention  every machine adds 1 to one hot counter (on machine 0)
 *               RUN_ADDS times through farm_tx_run, reading a second,
 *               never-written object in the same transaction. Conflicts
 *               are frequent; each call must commit within its tries, and
 *               the counter must end at exactly NP_NM * RUN_ADDS (a retry
 *               that committed twice, or a commit lost, shows here).
 *   contract    the body's errors: a non-retryable one is returned after
 *               one try and nothing is written; a retryable one is tried
 *               max_tries times; a positive return is -EINVAL.
 * --broken: farm_tx_run gives up after its first try (as a caller without
 * the helper would), so contention must fail.
 */
#include "txproc.h"

#define RSIZE    "16M"
#define JOIN_MS  30000
#define RUN_ADDS 2000u

static bool opt_broken;
static struct np_cluster G;

struct run_ctx {
	farm_gaddr hot, cold;
	unsigned calls; /* bodies run */
	int fail_with;  /* the contract test's forced return */
};

static int add_body(farm_tx *tx, void *arg)
{
	struct run_ctx *r = arg;
	r->calls++;
	const void *h, *c;
	int rc = farm_tx_read_sync(tx, r->cold, 64, &c);
	if (!rc)
		rc = farm_tx_read_sync(tx, r->hot, 64, &h);
	if (rc)
		return rc;
	int64_t v;
	memcpy(&v, h, 8);
	void *w;
	if ((rc = farm_tx_write(tx, r->hot, &w)))
		return rc;
	v += 1;
	memcpy(w, &v, 8);
	return r->fail_with;
}

struct run_stats {
	uint64_t ok, failed, calls;
	int64_t final; /* the counter at the end (machine 0) */
	int contract;  /* 0: the contract checks held */
	uint64_t ns;
};

static void fill_zero(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	(void)p;
	(void)arg;
	memset(d, 0, size);
}

/* The body's error contract, on this machine's own objects. */
static int check_contract(struct tx_child *c, struct run_ctx r)
{
	farm_loop *loop = c->np.loop;
	r.calls = 0;
	r.fail_with = -EPERM;
	if (farm_tx_run(c->txm, loop, add_body, &r, 0) != -EPERM ||
	    r.calls != 1)
		return 1;
	r.calls = 0;
	r.fail_with = FARM_ECONFLICT;
	if (farm_tx_run(c->txm, loop, add_body, &r, 5) != FARM_ECONFLICT ||
	    r.calls != 5)
		return 2;
	r.fail_with = 7;
	if (farm_tx_run(c->txm, loop, add_body, &r, 0) != -EINVAL)
		return 3;
	if (farm_tx_run(c->txm, loop, NULL, &r, 0) != -EINVAL)
		return 4;
	return 0;
}

static int read_counter(struct tx_child *c, farm_gaddr a, int64_t *v)
{
	int64_t buf[8];
	int rc = farm_lf_read_sync(c->txm, c->np.loop, a, 64, UINT64_MAX, buf);
	if (!rc)
		*v = buf[0];
	return rc;
}

static int run_role(struct tx_child *c)
{
	farm_fatptr mine[2];
	farm_fatptr *all = share_objs(c, "run", 2, 64, fill_zero, NULL, mine);
	if (!all)
		return 20;
	/* Machine 0's first object is the hot counter, its second the cold
	 * one; every machine's own pair serves the contract test. */
	struct run_ctx hot = {.hot = all[0].addr, .cold = all[1].addr};
	struct run_ctx own = {.hot = mine[0].addr, .cold = mine[1].addr};
	struct run_stats s = {0};
	s.contract = check_contract(c, own);
	unsigned tries = opt_broken ? 1 : 0;
	uint64_t t0 = np_now_ns();
	for (unsigned i = 0; i < RUN_ADDS; i++) {
		int rc = farm_tx_run(c->txm, c->np.loop, add_body, &hot, tries);
		if (rc == 0)
			s.ok++;
		else
			s.failed++;
	}
	s.ns = np_now_ns() - t0;
	s.calls = hot.calls;
	if (np_say(&c->np, 'D', NULL, 0))
		return 23;
	int cmd = np_wait_cmd(&c->np);
	if (cmd == 'S' && read_counter(c, all[0].addr, &s.final))
		s.final = -1;
	if (cmd == 'S')
		cmd = np_wait_cmd(&c->np);
	free(all);
	return cmd == 'Q' && !np_say(&c->np, 'F', &s, sizeof(s)) ? 0 : 24;
}

static int child_entry(struct np_child *np, void *arg)
{
	(void)arg;
	struct tx_child c = {.np = *np};
	struct farm_config cfg;
	int st = np_config(&c.np, RSIZE, &cfg);
	return st ? st : tx_child_run(&c, &cfg, JOIN_MS, run_role);
}

static int cl_cleanup(void **state)
{
	(void)state;
	np_cleanup(&G);
	return 0;
}

static void test_contention(void **state)
{
	(void)state;
	np_start(&G, "txrun", child_entry, NULL);
	p_setup(&G);
	for (unsigned i = 0; i < NP_NM; i++)
		np_expect(&G, i, 'D', 120000);
	/* Every machine has finished adding before machine 0 reads. */
	np_send(&G, 0, 'S');
	for (unsigned i = 0; i < NP_NM; i++)
		np_send(&G, i, 'Q');
	struct run_stats s[NP_NM];
	for (unsigned i = 0; i < NP_NM; i++) {
		np_expect(&G, i, 'F', 30000);
		np_recv(&G, i, &s[i], sizeof(s[i]), 1000);
	}
	int st[NP_NM];
	np_finish(&G, st);
	uint64_t ok = 0, calls = 0;
	for (unsigned i = 0; i < NP_NM; i++) {
		printf("tx_run: machine %u: %" PRIu64 " committed, %" PRIu64
		       " gave up, %" PRIu64
		       " bodies run, %.2f s, contract %d\n",
		       i, s[i].ok, s[i].failed, s[i].calls,
		       (double)s[i].ns / 1e9, s[i].contract);
		assert_int_equal(st[i], 0);
		assert_int_equal(s[i].contract, 0);
		ok += s[i].ok;
		calls += s[i].calls;
	}
	printf("tx_run: counter %" PRId64 ", %" PRIu64 " commits, %" PRIu64
	       " bodies (%.2f per commit)\n",
	       s[0].final, ok, calls, ok ? (double)calls / (double)ok : 0.0);
	/* Exactly the committed adds: none lost, none applied twice. */
	assert_int_equal(s[0].final, (int64_t)ok);
	/* Under contention every call commits within its tries. */
	assert_int_equal(ok, (uint64_t)NP_NM * RUN_ADDS);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--broken")) {
			opt_broken = true;
		} else {
			fprintf(stderr, "usage: %s [--broken]\n", argv[0]);
			return 2;
		}
	}
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_teardown(test_contention, cl_cleanup),
	};
	return cmocka_run_group_tests(t, NULL, NULL);
}
