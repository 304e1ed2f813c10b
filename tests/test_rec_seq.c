/*
 * Two failures in sequence: the bank of
 * recbank.h on 5 machines, 3 replicas. Once every machine has committed
 * 200 transfers, the parent kills a first machine (SIGKILL), waits until
 * every survivor runs in a configuration without it with its regions
 * active (they commit meanwhile), then kills a second one:
 *
 *   seq_members  machine 2, then machine 3 (neither the CM)
 *   seq_cm       machine 2, then machine 0 (the CM, after one recovery)
 *
 * Then recbank.h's checks: nothing committed is lost (every account
 * readable, the total, committed writes reflected, sercheck over every
 * history), no locks left, the survivors keep committing.
 *
 * A region that lost a replica in the first failure gets a new backup,
 * which data recovery (src/txn/copy.c; test_datarec checks it)
 * fills in the background. The test reports, for every machine's account
 * region, its replica set in each configuration and which survivors hold
 * a copy at the end, so a region left with one copy (or none) shows.
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 5
#include "recbank.h"

#include "addrspace/addrspace.h"

/* Replica sets of each machine's account region in one machine's
 * configuration, and which copies it holds ('g', answered 'G'). */
struct regions {
	uint64_t config;
	uint32_t region[NP_NM];
	unsigned nreps[NP_NM];
	uint32_t reps[NP_NM][FARM_RING_MAX_REPLICAS];
	int role[NP_NM]; /* enum farm_as_role of its copy here */
};

static int seq_cmd(struct tx_child *c, int cmd, const farm_fatptr *acc,
                   unsigned nacc)
{
	(void)nacc;
	if (cmd != 'g')
		return -1;
	farm_as *as = farm_node_as(c->np.node);
	struct regions g = {.config = farm_node_config_id(c->np.node)};
	for (unsigned i = 0; i < NP_NM; i++) {
		g.region[i] = farm_gaddr_region(acc[i * RB_ACCOUNTS].addr);
		g.nreps[i] = farm_as_replicas(as, g.region[i], g.reps[i]);
		enum farm_as_role role = FARM_AS_NONE;
		if (!farm_as_local_region(as, g.region[i], &role))
			role = FARM_AS_NONE;
		g.role[i] = (int)role;
	}
	return np_say(&c->np, 'G', &g, sizeof(g));
}

static struct regions ask(unsigned i)
{
	struct regions g;
	np_send(&rb_cl, i, 'g');
	np_expect(&rb_cl, i, 'G', 30000);
	np_recv(&rb_cl, i, &g, sizeof(g), 1000);
	return g;
}

static void print_reps(const char *when, const struct regions *g)
{
	printf("replica sets %s (configuration %" PRIu64 "):", when, g->config);
	for (unsigned i = 0; i < NP_NM; i++) {
		printf(" region of machine %u {", i);
		for (unsigned k = 0; k < g->nreps[i]; k++)
			printf("%s%" PRIu32, k ? "," : "", g->reps[i][k]);
		printf("}%s", i + 1 < NP_NM ? ";" : "\n");
	}
}

static void two_failures(unsigned first, unsigned second, const char *name)
{
	struct rb_result res;
	rb_start(&res, name);
	struct regions g0 = ask(4);
	rb_reap(&res, first, true);
	rb_tell(&res, first, true);
	rb_wait_recovered(&res);
	double t1 = (double)(np_now_ns() - res.t_kill_ns) / 1e6;
	struct regions g1 = ask(4);
	rb_reap(&res, second, true);
	rb_tell(&res, second, false);
	rb_collect(&res);
	struct regions g[NP_NM];
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(&res, i))
			g[i] = ask(i);
	printf("%s: machine %u killed; every survivor recovered %.1f ms "
	       "later; then machine %u killed\n",
	       name, first, t1, second);
	print_reps("at the start", &g0);
	print_reps("without the first", &g1);
	print_reps("at the end", &g[res.scanner]);
	unsigned one = 0, none = 0;
	for (unsigned r = 0; r < NP_NM; r++) {
		unsigned copies = 0;
		printf("region of machine %u: copies at the end on", r);
		for (unsigned i = 0; i < NP_NM; i++)
			if (rb_member(&res, i) &&
			    g[i].role[r] != (int)FARM_AS_NONE) {
				printf(" %u (%s)", i,
				       g[i].role[r] == (int)FARM_AS_PRIMARY
				               ? "primary"
				               : "backup");
				copies++;
			}
		printf("%s\n", copies ? "" : " none");
		one += copies == 1;
		none += copies == 0;
	}
	printf("%s: %u account region(s) left with one copy, %u with none "
	       "(data recovery may still be copying)\n",
	       name, one, none);
	if (none)
		failed(&res.f, "%u account regions have no copy left", none);
	rb_check(&res);
	rb_verdict(&res, false, NULL);
}

static void test_seq_members(void **state)
{
	(void)state;
	two_failures(2, 3, "seq_members");
}

static void test_seq_cm(void **state)
{
	(void)state;
	two_failures(2, 0, "seq_cm");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_seq_members, rb_teardown),
	        cmocka_unit_test_teardown(test_seq_cm, rb_teardown),
	};
	rb_p.pre_transfers = 200;
	rb_p.post_ms = 2000;
	rb_p.cmd = seq_cmd;
	return rb_main("rec_seq", tests, sizeof(tests) / sizeof(tests[0]));
}
