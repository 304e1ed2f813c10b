/*
 * A whole failure domain killed at once:
 * the bank of recbank.h on 5 machines in 3 failure domains,
 *
 *   zone-a: machines 0 and 1    zone-b: machines 2 and 3    zone-c: 4
 *
 * with 2 replicas per region, so that a region survives the loss of a
 * domain only if placement put its replicas in two domains (with plain
 * consistent hashing about one region in five has both in one domain).
 * Once every machine has committed 200 transfers, the parent checks that
 * every machine's configuration carries every member's domain and that
 * every account region's replicas are in distinct domains, then kills
 * both machines of one domain with SIGKILL, back to back:
 *
 *   kill_zone_b  machines 2 and 3
 *   kill_zone_a  machines 0 and 1 (the CM among them)
 *
 * Then: the configuration lists the victims as departed machines with
 * their domains (placement keeps walking over them), every account region
 * still has a copy and its primary in the new configuration serves it,
 * and recbank.h's checks (the total, every
 * account readable and unlocked, every committed write present, sercheck
 * over every history, the survivors keep committing).
 *
 * --broken: placement ignores domains (the test-only switch
 * FARM_FP_RING_NO_DOMAINS, inherited by the machines), and the zone that
 * holds both replicas of some account region is killed when there is one
 * (the region ids are random: in some runs none is, and the run then
 * says so). The checks must notice. Not a ctest for that reason:
 * test_domains --broken is the deterministic one.
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 5
#include "recbank.h"

#include "addrspace/addrspace.h"
#include "brokenarg.h"

static const char *const zone[NP_NM] = {"zone-a", "zone-a", "zone-b", "zone-b",
                                        "zone-c"};
static bool opt_broken;

static void configure(uint32_t me, struct farm_config *cfg)
{
	cfg->replicas = 2;
	snprintf(cfg->domain, sizeof(cfg->domain), "%s", zone[me]);
}

/* One machine's configuration and account regions ('g', answered 'G'). */
struct regions {
	uint64_t config;
	unsigned members;
	bool domains_known; /* every member's domain as configured */
	uint64_t departed;  /* machines listed as departed (bits), with
	                       their domains as configured */
	uint32_t region[NP_NM];
	unsigned nreps[NP_NM];
	uint32_t reps[NP_NM][FARM_RING_MAX_REPLICAS];
	int role[NP_NM]; /* enum farm_as_role of its copy here */
};

static int dom_cmd(struct tx_child *c, int cmd, const farm_fatptr *acc,
                   unsigned nacc)
{
	(void)nacc;
	if (cmd != 'g')
		return -1;
	farm_as *as = farm_node_as(c->np.node);
	struct regions g = {.config = farm_node_config_id(c->np.node)};
	struct farm_view *v = malloc(sizeof(*v));
	g.domains_known = v && !farm_node_view(c->np.node, v);
	for (unsigned i = 0; g.domains_known && i < v->n; i++)
		g.domains_known =
		        v->members[i].id < NP_NM &&
		        !strcmp(v->members[i].domain, zone[v->members[i].id]);
	for (unsigned i = 0; g.domains_known && i < v->ndeparted; i++)
		if (v->departed[i].id < NP_NM &&
		    !strcmp(v->departed[i].domain, zone[v->departed[i].id]))
			g.departed |= 1ull << v->departed[i].id;
	g.members = v ? v->n : 0;
	free(v);
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
			printf("%s%" PRIu32 " %s", k ? ", " : "", g->reps[i][k],
			       g->reps[i][k] < NP_NM ? zone[g->reps[i][k]]
			                             : "?");
		printf("}%s", i + 1 < NP_NM ? ";" : "\n");
	}
}

/* Account regions whose replicas share a domain (in @g). */
static unsigned shared_domain(const struct regions *g, const char **which)
{
	unsigned n = 0;
	for (unsigned r = 0; r < NP_NM; r++)
		for (unsigned a = 0; a < g->nreps[r]; a++)
			for (unsigned b = 0; b < a; b++)
				if (g->reps[r][a] < NP_NM &&
				    g->reps[r][b] < NP_NM &&
				    !strcmp(zone[g->reps[r][a]],
				            zone[g->reps[r][b]])) {
					*which = zone[g->reps[r][a]];
					n++;
				}
	return n;
}

/*
 * Before the kill: every machine's configuration carries every member's
 * domain, and no account region has both replicas in one domain (@g0,
 * machine 4's view). Returns the zone to kill: @z, or with --broken the
 * zone that holds a whole region when there is one.
 */
static const char *check_before(struct rb_result *res, const char *z,
                                const char *name, const struct regions *g0)
{
	for (unsigned i = 0; i < NP_NM; i++)
		if (!ask(i).domains_known)
			failed(&res->f,
			       "machine %u's configuration lacks a member's "
			       "failure domain",
			       i);
	const char *same = NULL;
	unsigned nsame = shared_domain(g0, &same);
	if (nsame)
		failed(&res->f,
		       "%u account region(s) with both replicas in one "
		       "failure domain (%s) before the kill",
		       nsame, same);
	if (opt_broken && same)
		return same; /* the zone that holds a whole region */
	if (opt_broken)
		printf("%s --broken: placement put no account region in one "
		       "domain this run; killing %s anyway\n",
		       name, z);
	return z;
}

/* Kills every machine of zone @z at once and tells the survivors;
 * returns how many (their ids in @victims). */
static unsigned kill_victims(struct rb_result *res, const char *z,
                             unsigned victims[NP_NM])
{
	unsigned nv = 0;
	for (unsigned i = 0; i < NP_NM; i++)
		if (!strcmp(zone[i], z))
			victims[nv++] = i;
	/* At once: both signals before either is reaped. */
	uint64_t t_kill = np_now_ns();
	for (unsigned k = 0; k < nv; k++)
		assert_int_equal(kill(rb_cl.pid[victims[k]], SIGKILL), 0);
	for (unsigned k = 0; k < nv; k++)
		rb_reap(res, victims[k], false);
	res->t_kill_ns = t_kill;
	/* Tell only the survivors, of every victim. */
	for (unsigned k = 0; k < nv; k++)
		res->out |= 1ull << victims[k];
	for (unsigned k = 0; k < nv; k++)
		rb_tell(res, victims[k], false);
	return nv;
}

/*
 * After the kill (@g: each survivor's view): the configuration lists the
 * victims as departed with their domains, every account region still
 * has a copy, and its new primary is a survivor serving it as primary.
 */
static void check_after(struct rb_result *res, const struct regions g[NP_NM])
{
	if (g[res->scanner].departed != res->killed)
		failed(&res->f,
		       "the configuration lists machines %#" PRIx64
		       " as departed with their domains, expected %#" PRIx64,
		       g[res->scanner].departed, res->killed);
	unsigned none = 0, bad_primary = 0;
	for (unsigned r = 0; r < NP_NM; r++) {
		unsigned copies = 0;
		printf("region of machine %u: copies at the end on", r);
		for (unsigned i = 0; i < NP_NM; i++)
			if (rb_member(res, i) &&
			    g[i].role[r] != (int)FARM_AS_NONE) {
				printf(" %u (%s)", i,
				       g[i].role[r] == (int)FARM_AS_PRIMARY
				               ? "primary"
				               : "backup");
				copies++;
			}
		printf("%s\n", copies ? "" : " none");
		none += copies == 0;
		/* The new primary is a survivor that held a copy. */
		uint32_t p = g[res->scanner].reps[r][0];
		bad_primary += copies && (p >= NP_NM || !rb_member(res, p) ||
		                          g[p].role[r] != (int)FARM_AS_PRIMARY);
	}
	if (none)
		failed(&res->f, "%u account region(s) have no copy left", none);
	if (bad_primary)
		failed(&res->f,
		       "%u account region(s) whose new primary does not "
		       "serve them as primary",
		       bad_primary);
}

static void kill_zone(const char *z, const char *name)
{
	struct rb_result res;
	rb_start(&res, name);
	struct regions g0 = ask(4);
	z = check_before(&res, z, name, &g0);
	unsigned victims[NP_NM];
	unsigned nv = kill_victims(&res, z, victims);
	rb_collect(&res);
	struct regions g[NP_NM];
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(&res, i))
			g[i] = ask(i);
	printf("%s: %s (machines", name, z);
	for (unsigned k = 0; k < nv; k++)
		printf(" %u", victims[k]);
	printf(") killed at once\n");
	print_reps("at the start", &g0);
	print_reps("at the end", &g[res.scanner]);
	check_after(&res, g);
	rb_check(&res);
	rb_verdict(&res, opt_broken,
	           "placement ignored failure domains and the zone holding a "
	           "whole region was killed");
}

static void test_kill_zone_b(void **state)
{
	(void)state;
	kill_zone("zone-b", "kill_zone_b");
}

static void test_kill_zone_a(void **state)
{
	(void)state;
	kill_zone("zone-a", "kill_zone_a");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_kill_zone_b, rb_teardown),
	        cmocka_unit_test_teardown(test_kill_zone_a, rb_teardown),
	};
	size_t n = sizeof(tests) / sizeof(tests[0]);
	if (argc > 1 && !strcmp(argv[1], "--broken")) {
		/* Inherited by the machines (forked). */
		if (farm_fault_set(FARM_FP_RING_NO_DOMAINS, tu_switch_on,
		                   NULL)) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
		opt_broken = true;
		n = 1;
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--broken]\n", argv[0]);
		return 2;
	}
	rb_p.pre_transfers = 200;
	rb_p.post_ms = 2000;
	rb_p.cmd = dom_cmd;
	rb_p.configure = configure;
	return rb_main("rec_domains", tests, n);
}
