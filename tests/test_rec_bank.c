/*
 * Bank under a kill: the bank of recbank.h on 4
 * machines; once every machine has committed 300 transfers, the parent
 * kills one with SIGKILL, in the middle of whatever it was doing:
 *
 *   kill_member  machine 2 (not the configuration manager; with
 *                FARM_FAULT_SEED set, any of 1-3)
 *   kill_cm      machine 0 (the CM, the lowest id)
 *
 * then recbank.h's checks (total, no locks, committed writes reflected,
 * sercheck over every history, survivors keep committing). Without
 * transaction-state recovery it fails: the victim's accounts stay
 * unreadable (FARM_EPEERDEAD: no backup is promoted), objects its
 * in-flight transactions locked stay locked, so the final sum fails.
 * --broken: recovery promotes backups without draining their logs or
 * recovering locks (a test-only switch); the checks must notice.
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 4
#include "recbank.h"

static bool opt_broken;

static void bank_under_kill(unsigned victim, const char *name)
{
	struct rb_result res;
	rb_start(&res, name);
	if (opt_broken) { /* the victim ends with a committed local write */
		np_send(&rb_cl, victim, 'Z');
		np_expect(&rb_cl, victim, 'z', 30000);
	}
	rb_reap(&res, victim, true);
	rb_tell(&res, victim, false);
	rb_check(&res);
	rb_verdict(&res, opt_broken,
	           "recovery promoted backups without draining their logs "
	           "or recovering locks");
}

static void test_kill_member(void **state)
{
	(void)state;
	/* machine 2, or any member but the CM in a fault campaign */
	bank_under_kill(rb_seeded(1, NP_NM - 1, 2), "kill_member");
}

static void test_kill_cm(void **state)
{
	(void)state;
	bank_under_kill(0, "kill_cm");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_kill_member, rb_teardown),
	        cmocka_unit_test_teardown(test_kill_cm, rb_teardown),
	};
	size_t n = sizeof(tests) / sizeof(tests[0]);
	if (argc > 1 && !strcmp(argv[1], "--broken")) {
		/* A test-only switch: promoted backups serve without their
		 * logs drained or locks recovered. The checks must notice. */
		if (!farm_fault_built()) {
			printf("skipped: --broken needs fault injection "
			       "(FARM_FAULT_INJECTION=OFF)\n");
			return FARM_TEST_SKIP;
		}
		opt_broken = true;
		farm_txn_testing_recovery_no_drain(true);
		n = 1;
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--broken]\n", argv[0]);
		return 2;
	}
	return rb_main("rec_bank", tests, n);
}
