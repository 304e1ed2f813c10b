/*
 * The fault campaign (campaign.h): the run, its report, and the
 * options.
 */
#include "campaign.h"

static const char *const cp_fault_name[F_COUNT] = {
        "kill_member", "kill_cm", "sigstop",      "domain",      "copy_kill",
        "zk_kill",     "restart", "restart_copy", "zombie_reuse"};
static uint64_t opt_seed;
static bool opt_broken;
/* --broken-removed (a test-only switch, with --reuse): recovery takes an
 * id once removed for removed whatever holder has it now
 * (FARM_FP_REC_REMOVED_STICKY); a cycle must fail. */
static bool opt_broken_removed;
/* --broken-inc (a test-only switch, with zombie_reuse): admitting a new
 * holder of an id lets every holder of it in at the fabric
 * (FARM_FP_FABRIC_ADMIT_ANY); a cycle must fail. */
static bool opt_broken_inc;
/* --broken-slot (a test-only switch): data recovery copies a slab slot's
 * first object only (FARM_FP_DATAREC_SLOT_FIRST), so a new backup lacks
 * the other elements of the KV store's bucket arrays; a cycle that copies
 * a region must fail (cp_missing). */
static bool opt_broken_slot;
/* --broken-kept (with --hold-end: campaign.h). */
static bool opt_broken_kept;
/* --broken-stale (a test-only switch, with --keep-dirs): a copy's first
 * pass takes every chunk of its old copy whatever the summaries say
 * (FARM_FP_DATAREC_STALE_EQUAL), and copies have no check pass, which
 * would repair it: a cycle's copy comparison must fail. */
static bool opt_broken_stale;
/* --full-every N: sercheck and lincheck over the whole history, and the
 * allocators rebuilt by a walk of every region, after every Nth cycle's
 * checks and after the last cycle's (0: the last only; default 1: every
 * cycle). Their cost grows with the history or the regions made so far;
 * the checks every cycle keeps (replication, locks, the bank total, every
 * acknowledged commit present from what the cycle added, copies) cost
 * about what a cycle adds, so that a long run's cycles stay as
 * short as its first and a broken invariant still stops the cycle it
 * happens in. */
static unsigned opt_full_every = 1;
static bool cp_done; /* the campaign ended: no history to keep */

/* The options the other files read (campaign.h). */
unsigned opt_cycles = 50;
bool opt_use[F_COUNT];
bool opt_order;
bool opt_grow = true;
bool opt_reuse, opt_old_ids;
bool opt_hold_end, opt_broken_handoff;
bool opt_slow_replace;
bool opt_reuse_measure;
bool opt_keep_dirs;
unsigned opt_fill_mb;
enum cp_fault opt_list[F_COUNT * 4];
unsigned opt_nlist;

/* The cycles run, one line each, then the count per fault. */
static void cp_print_cycles(const struct cp_cycle *cy, unsigned done)
{
	printf("\ncycle  fault        what                                    "
	       "              seconds  checks  result\n");
	for (unsigned c = 0; c < done; c++)
		printf("%5u  %-12s %-54s %7.1f  %4u/%u  %s\n", c + 1,
		       cp_fault_name[cy[c].fault], cy[c].what, cy[c].secs,
		       cy[c].checks, cy[c].due ? cy[c].due : 7,
		       cy[c].ok ? "passed" : "FAILED");
	printf("\nfault          cycles  passed\n");
	for (unsigned k = 0; k < F_COUNT; k++) {
		unsigned n = 0, p = 0;
		for (unsigned c = 0; c < done; c++)
			if (cy[c].fault == (enum cp_fault)k) {
				n++;
				p += cy[c].ok;
			}
		if (n)
			printf("%-14s %6u  %6u\n", cp_fault_name[k], n, p);
	}
}

/* What a campaign's checks went over, from its cycles. */
struct cp_sum {
	unsigned done, passed;
	double secs;
	uint64_t committed, kvops; /* the last checks that passed */
	uint64_t lost, anomalies;  /* the last checks that ran */
	bool checked;              /* the last cycle's checks ran */
	bool ok;
};

static void cp_summarize(const struct cp_cycle *cy, struct cp_sum *s)
{
	for (unsigned c = 0; c < s->done; c++) {
		s->passed += cy[c].ok;
		if (cy[c].ok) {
			s->committed = cy[c].committed;
			s->kvops = cy[c].kv_ops;
		}
		/* Each check goes over the whole history since the start. */
		if (cy[c].ran)
			s->anomalies = cy[c].anomalies;
		if (cy[c].due) /* step 3 ran: over everything so far */
			s->lost = cy[c].lost;
	}
	/* Met only when the last cycle's checks ran: a cycle that failed
	 * before them proves nothing either way. */
	s->checked = s->done && cy[s->done - 1].ran;
	s->ok = s->passed == opt_cycles;
}

/* The summary and, last, the JSON line. False when the checks failed or
 * (--keep-dirs) no copy took anything from an old copy. */
static bool cp_report(const struct cp_sum *s, const struct fails *f)
{
	printf("\ncampaign: %u of %u cycles passed in %.0f s (seed %" PRIu64
	       "); the last passed checks went over %" PRIu64
	       " committed bank transactions (sercheck) and %" PRIu64
	       " KV operations (lincheck) of %u machines\n",
	       s->passed, opt_cycles, s->secs, opt_seed, s->committed, s->kvops,
	       cp_count(cp_used));
	bool ok = s->ok;
	if (opt_reuse)
		printf("campaign: the new holders' %" PRIu64 " copies READ "
		       "%" PRIu64 " bytes and took %" PRIu64 " from their old "
		       "copies\n",
		       cp_new_copies, cp_new_read, cp_new_taken);
	bool none_taken = ok && opt_keep_dirs && !cp_new_taken;
	if (none_taken) {
		ok = false;
		printf("campaign --keep-dirs: no copy took anything from a "
		       "machine's old copies\n");
	}
	if (!ok && !none_taken) {
		printf("campaign: cycle %u failed:\n%s", s->done, f->text);
		if (!opt_broken)
			printf("campaign: histories kept in %s "
			       "(hist-<machine>: bank, lin-<machine>: KV)\n",
			       rb_cl.root);
	}
	printf("{\"bench\": \"fault_campaign_continuous\", \"seed\": %" PRIu64
	       ", \"cycles\": %u, \"passed\": %u, \"seconds\": %.0f, "
	       "\"committed_checked\": %" PRIu64
	       ", \"kv_ops_checked\": %" PRIu64
	       ", \"goals\": {\"campaign_cycles_pass\": {\"value\": %u, "
	       "\"target\": %u, \"met\": %s}, \"lost_commits\": "
	       "{\"value\": %" PRIu64 ", \"target\": 0, \"met\": %s}, "
	       "\"checker_anomalies\": {\"value\": %" PRIu64
	       ", \"target\": 0, \"met\": %s}}}\n",
	       opt_seed, opt_cycles, s->passed, s->secs, s->committed, s->kvops,
	       s->passed, opt_cycles, ok ? "true" : "false", s->lost,
	       s->checked && !s->lost ? "true" : "false", s->anomalies,
	       s->checked && !s->anomalies ? "true" : "false");
	fflush(stdout);
	return ok;
}

/* The proof run asked for (a switch that breaks the code, whose campaign
 * must fail), the first of the table that is on; NULL for none. */
struct cp_proof {
	bool on;
	const char *name, *broke;
};

static const struct cp_proof *cp_proof_run(void)
{
	static struct cp_proof p[8];
	p[0] = (struct cp_proof){opt_broken, "--broken",
	                         "recovery promoted backups without draining "
	                         "their logs"};
	p[1] = (struct cp_proof){opt_broken_removed, "--broken-removed",
	                         "recovery took reused ids for removed"};
	p[2] = (struct cp_proof){opt_broken_stale, "--broken-stale",
	                         "copies took every chunk of their old copies"};
	p[3] = (struct cp_proof){opt_broken_slot, "--broken-slot",
	                         "data recovery copied each slab slot's first "
	                         "object only"};
	p[4] = (struct cp_proof){opt_broken_inc, "--broken-inc",
	                         "every holder of a reused id was let in"};
	p[5] = (struct cp_proof){opt_broken_kept, "--hold-end --broken-kept",
	                         "survivors kept no decision they applied"};
	p[6] = (struct cp_proof){opt_broken_handoff,
	                         "--hold-end --broken-handoff",
	                         "a superseded round's decisions were taken "
	                         "nowhere"};
	p[7] = (struct cp_proof){opt_reuse && opt_old_ids, "--reuse --old-ids",
	                         "a machine under a lost machine's id was "
	                         "admitted with the old id rule"};
	for (unsigned i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		if (p[i].on)
			return &p[i];
	return NULL;
}

static void test_campaign(void **state)
{
	(void)state;
	cp_rng = opt_seed * 0x9e3779b97f4a7c15ull + 1;
	enum cp_fault order[1024];
	cp_order(order);
	printf("campaign: %u cycles, seed %" PRIu64 ", one cluster of %u "
	       "machines (3 replicas, 3 domains), ZooKeeper ensemble %s%s\n",
	       opt_cycles, opt_seed, CP_NM0, rb_zk_connect,
	       opt_broken ? "; --broken: recovery does not drain logs" : "");
	uint64_t t0 = np_now_ns();
	cp_start();
	printf("campaign: the cluster is up in %s (%.1f s)\n", rb_cl.root,
	       (double)(np_now_ns() - t0) / 1e9);
	fflush(stdout);
	struct cp_cycle *cy = calloc(opt_cycles, sizeof(*cy));
	assert_non_null(cy);
	struct fails f = {0};
	struct cp_sum sum = {0};
	for (unsigned c = 0; c < opt_cycles; c++) {
		cy[c].full = c + 1 == opt_cycles ||
		             (opt_full_every && (c + 1) % opt_full_every == 0);
		cp_cycle(c + 1, order[c], &cy[c], &f);
		sum.done++;
		printf("[%u/%u] %-12s %-52s %6.1fs  %s (%u of %u checks)\n",
		       c + 1, opt_cycles, cp_fault_name[cy[c].fault],
		       cy[c].what, cy[c].secs, cy[c].ok ? "passed" : "FAILED",
		       cy[c].checks, cy[c].due ? cy[c].due : 7);
		fflush(stdout);
		if (!cy[c].ok)
			break;
	}
	sum.secs = (double)(np_now_ns() - t0) / 1e9;
	cp_print_cycles(cy, sum.done);
	cp_summarize(cy, &sum);
	bool ok = cp_report(&sum, &f);
	free(cy);
	const struct cp_proof *proof = cp_proof_run();
	if (proof) {
		if (ok)
			fail_msg("campaign %s: %s, and no check noticed in %u "
			         "cycles",
			         proof->name, proof->broke, opt_cycles);
		printf("campaign %s: cycle %u failed, as it must\n",
		       proof->name, sum.done);
		cp_done = true; /* the teardown removes the cluster */
		return;
	}
	if (!ok) {
		rb_cl.root[0] = 0; /* kept */
		fail_msg("campaign: cycle %u of %u failed", sum.done,
		         opt_cycles);
	}
	cp_stop();
	cp_done = true;
}

static int cp_teardown(void **state)
{
	(void)state;
	if (!cp_done && rb_cl.root[0]) {
		/* A failed assertion: keep the histories. */
		printf("campaign: histories kept in %s\n", rb_cl.root);
		rb_cl.root[0] = 0;
	}
	np_cleanup(&rb_cl);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: test_campaign [--cycles N] [--seed S] [--faults "
	        "F,F,...] [--order] [--broken] [--prev-ring] [--grow | "
	        "--no-grow] "
	        "[--list] [--help]\n"
	        "  One cluster under the bank and KV workloads takes N faults "
	        "(default 50)\n  in a row, each followed by full replication "
	        "and every check.\n"
	        "  --prev-ring: recovery judges a removed coordinator's "
	        "commit by the view\n  before the current one "
	        "(FARM_FP_REC_PREV_RING; the bug seed 1128 found).\n"
	        "  --grow (the default): machines that join late grow into "
	        "ordinary members\n  (config grow); --no-grow: they stay "
	        "late backups.\n"
	        "  --reuse: a killed machine is replaced under its own id "
	        "(config reuse_ids),\n  a new incarnation; with --old-ids "
	        "the old rule (reuse_ids off) must refuse it;\n  with "
	        "--broken-removed recovery takes a reused id for removed\n"
	        "  whichever holder has it (a cycle must fail).\n"
	        "  --broken-inc (with zombie_reuse): every holder of a reused "
	        "id is let in\n  at the fabric (a cycle must fail).\n"
	        "  --broken-slot: data recovery copies a slab slot's first "
	        "object only\n  (a cycle that copies a region must fail).\n"
	        "  --hold-end (with --reuse): machine 1 refuses the first "
	        "round's decisions\n  and end as stale; --broken-kept: the "
	        "others do not vote them again\n  (a cycle must fail); "
	        "--broken-handoff: machine 1's log opens to the\n  new "
	        "holder before its old records are decided.\n"
	        "  --slow-replace (with --reuse): machines wait 1.5 s before "
	        "their loops\n  start a new holder's channels afresh; its "
	        "first requests must be answered.\n"
	        "  --full-every N: sercheck, lincheck (whole histories) and "
	        "the allocators'\n  walk after every Nth cycle and the last "
	        "(0: the last only; default 1);\n  the other checks, every "
	        "acknowledged commit present among them, every cycle.\n"
	        "  --reuse-measure (with --reuse): what each new holder "
	        "would have copied\n  had it kept its old holder's copies "
	        "(a measurement: fails nothing).\n"
	        "  --fill-mb N: N MB of 1 KiB objects each first machine "
	        "allocates at the\n  start and never writes again.\n"
	        "  --keep-dirs (with --reuse): the killed machine starts "
	        "again on its own\n  directory (config reuse_copies): "
	        "its copies take unchanged chunks from\n  its old ones; "
	        "fails if none took anything; --broken-stale: they take "
	        "every\n  chunk, with no check pass (a cycle must fail).\n");
}

/* A number option's value: 0, or -1 with the error said. */
static int num_arg(const char *arg, unsigned lo, unsigned hi, const char *what,
                   unsigned *out)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 10);
	if (*end || !*arg || v < lo || v > hi) {
		fprintf(stderr, "test_campaign: --%s: %u to %u\n", what, lo,
		        hi);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

/* A --broken-* proof switch: its fault point hooked (@fp, or none), its
 * flag set. 0, or FARM_TEST_SKIP without fault injection. */
static int proof_switch(const char *name, int fp, bool *flag)
{
	if (!farm_fault_built() ||
	    (fp >= 0 &&
	     farm_fault_set((enum farm_fault_point)fp, tu_switch_on, NULL))) {
		printf("skipped: %s needs fault injection\n", name);
		return FARM_TEST_SKIP;
	}
	*flag = true;
	return 0;
}

/* The options that hook a fault point or need fault injection: -1 not
 * one of them, else 0 or main's exit status. */
static int take_switch(int o)
{
	switch (o) {
	case 'p':
		if (!farm_fault_built() ||
		    farm_fault_set(FARM_FP_REC_PREV_RING, tu_switch_on, NULL)) {
			fprintf(stderr, "test_campaign: --prev-ring needs "
			                "fault injection\n");
			return 2;
		}
		return 0;
	case 'S': {
		int rc = proof_switch("--broken-stale",
		                      FARM_FP_DATAREC_STALE_EQUAL,
		                      &opt_broken_stale);
		if (!rc)
			farm_txn_testing_datarec_no_check(true);
		return rc;
	}
	case 'D':
		return proof_switch("--broken-removed",
		                    FARM_FP_REC_REMOVED_STICKY,
		                    &opt_broken_removed);
	case 'B':
		return proof_switch("--broken-slot", FARM_FP_DATAREC_SLOT_FIRST,
		                    &opt_broken_slot);
	case 'I':
		return proof_switch("--broken-inc", FARM_FP_FABRIC_ADMIT_ANY,
		                    &opt_broken_inc);
	case 'H': return proof_switch("--hold-end", -1, &opt_hold_end);
	case 'K':
		return proof_switch("--broken-kept", FARM_FP_REC_NO_KEPT,
		                    &opt_broken_kept);
	case 'N':
		return proof_switch("--broken-handoff", FARM_FP_TXN_NO_HANDOFF,
		                    &opt_broken_handoff);
	case 'W':
		/* Inherited by every machine process. */
		if (farm_fault_set(FARM_FP_NODE_REPLACE, cp_slow_replace,
		                   NULL)) {
			printf("skipped: --slow-replace needs fault "
			       "injection\n");
			return FARM_TEST_SKIP;
		}
		opt_slow_replace = true;
		return 0;
	default: return -1;
	}
}

/* One option of main's: 0 to go on, 1 to exit 0 (--list, --help), else
 * main's exit status; @faults set by --faults. */
static int take_option(int o, const char *arg, const char **faults)
{
	unsigned v;
	int rc = take_switch(o);
	if (rc >= 0)
		return rc;
	switch (o) {
	case 'c':
		if (num_arg(arg, 1, 1024, "cycles", &opt_cycles))
			return 2;
		break;
	case 's': {
		char *end;
		opt_seed = strtoull(arg, &end, 10);
		if (*end) {
			fprintf(stderr, "test_campaign: --seed needs a "
			                "number\n");
			return 2;
		}
		break;
	}
	case 'f': *faults = arg; break;
	case 'F':
		if (num_arg(arg, 0, UINT32_MAX, "full-every", &v))
			return 2;
		opt_full_every = v;
		break;
	case 'M':
		if (num_arg(arg, 0, 64, "fill-mb", &opt_fill_mb))
			return 2;
		break;
	case 'b': opt_broken = true; break;
	case 'o': opt_order = true; break;
	case 'g': opt_grow = true; break;
	case 'G': opt_grow = false; break;
	case 'r': opt_reuse = true; break;
	case 'U': opt_reuse_measure = true; break;
	case 'k': opt_keep_dirs = true; break;
	case 'O': opt_old_ids = true; break;
	case 'l':
		for (unsigned i = 0; i < F_COUNT; i++)
			printf("%s\n", cp_fault_name[i]);
		return 1;
	case 'h': usage(stdout); return 1;
	default: usage(stderr); return 2;
	}
	return 0;
}

/* --faults' list (none: every fault but zombie_reuse) into opt_use and
 * opt_list. 0, or 2 with the error said. */
static int take_faults(const char *faults)
{
	if (!faults) {
		for (unsigned i = 0; i < F_COUNT; i++)
			opt_use[i] = i != F_ZOMBIE_REUSE;
		return 0;
	}
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", faults);
	for (char *sp, *t = strtok_r(buf, ",", &sp); t;
	     t = strtok_r(NULL, ",", &sp)) {
		unsigned i = 0;
		while (i < F_COUNT && strcmp(t, cp_fault_name[i]))
			i++;
		if (i == F_COUNT) {
			fprintf(stderr,
			        "test_campaign: no fault '%s' (see --list)\n",
			        t);
			return 2;
		}
		opt_use[i] = true;
		if (opt_nlist < F_COUNT * 4)
			opt_list[opt_nlist++] = (enum cp_fault)i;
	}
	return 0;
}

/* Options that need others: 0, or 2 with the error said. */
static int check_options(void)
{
	const bool reuse = opt_reuse && !opt_old_ids;
	const char *why = NULL;
	if (opt_use[F_ZOMBIE_REUSE] && !reuse)
		why = "zombie_reuse needs --reuse (ids reused)";
	else if ((opt_broken_kept || opt_broken_handoff) && !opt_hold_end)
		why = "--broken-kept and --broken-handoff need --hold-end";
	else if (opt_slow_replace && !reuse)
		why = "--slow-replace needs --reuse";
	else if (opt_broken_stale && !opt_keep_dirs)
		why = "--broken-stale needs --keep-dirs";
	else if (opt_keep_dirs && !reuse)
		why = "--keep-dirs needs --reuse";
	else if (opt_reuse_measure && !reuse)
		why = "--reuse-measure needs --reuse";
	else if (opt_hold_end && !reuse)
		why = "--hold-end needs --reuse";
	else if (opt_order && !opt_nlist)
		why = "--order needs --faults";
	if (why)
		fprintf(stderr, "test_campaign: %s\n", why);
	return why ? 2 : 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"cycles", 1, NULL, 'c'},
	                                   {"seed", 1, NULL, 's'},
	                                   {"faults", 1, NULL, 'f'},
	                                   {"broken", 0, NULL, 'b'},
	                                   {"order", 0, NULL, 'o'},
	                                   {"list", 0, NULL, 'l'},
	                                   {"help", 0, NULL, 'h'},
	                                   {"prev-ring", 0, NULL, 'p'},
	                                   {"grow", 0, NULL, 'g'},
	                                   {"no-grow", 0, NULL, 'G'},
	                                   {"reuse", 0, NULL, 'r'},
	                                   {"old-ids", 0, NULL, 'O'},
	                                   {"broken-removed", 0, NULL, 'D'},
	                                   {"broken-inc", 0, NULL, 'I'},
	                                   {"broken-slot", 0, NULL, 'B'},
	                                   {"hold-end", 0, NULL, 'H'},
	                                   {"broken-kept", 0, NULL, 'K'},
	                                   {"broken-handoff", 0, NULL, 'N'},
	                                   {"slow-replace", 0, NULL, 'W'},
	                                   {"full-every", 1, NULL, 'F'},
	                                   {"reuse-measure", 0, NULL, 'U'},
	                                   {"fill-mb", 1, NULL, 'M'},
	                                   {"keep-dirs", 0, NULL, 'k'},
	                                   {"broken-stale", 0, NULL, 'S'},
	                                   {0}};
	opt_seed = (uint64_t)time(NULL) % 100000;
	const char *faults = NULL;
	int o;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int rc = take_option(o, optarg, &faults);
		if (rc)
			return rc == 1 ? 0 : rc;
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	int rc = take_faults(faults);
	if (!rc)
		rc = check_options();
	if (rc)
		return rc;
	if (opt_broken) {
		/* A test-only switch: promoted backups serve without their
		 * logs drained. The checks must notice. */
		if (!farm_fault_built()) {
			printf("skipped: --broken needs fault injection "
			       "(FARM_FAULT_INJECTION=OFF)\n");
			return FARM_TEST_SKIP;
		}
		farm_txn_testing_recovery_no_drain(true);
	}
	/* A machine gone closes its pipe: fail on the write's error. */
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_campaign, cp_teardown),
	};
	return rb_main_n("campaign", tests, 1, CP_ZK);
}
