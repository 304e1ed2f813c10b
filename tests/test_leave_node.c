/*
 * Graceful leave (farm_node_leave; src/recovery/README.md, "Graceful
 * leave"): the bank of recbank.h on 4 machines with 2 replicas, copies
 * paced slowly (LV_BYTES per LV_US: the handoff takes seconds).
 *
 *   leave  the CM asks to leave first and is refused (-EPERM, nothing
 *          changes); then machine 2 leaves gracefully while the other
 *          three run the bank (it stops its own workload when asked and
 *          serves until it is let go). farm_node_leave must return 0.
 *
 * Afterwards:
 *   - every region's final 2 replicas each held a complete copy when
 *     they first saw the configuration without the leaver (a successor's
 *     copy missing or still filling at the departure is a region below
 *     2 complete copies);
 *   - every region any survivor holds is complete at exactly its ring's
 *     2 replicas, all survivors, none filling (replicas.h);
 *   - no survivor suspected anyone, and the CM waited no lease (the
 *     leave is no failure);
 *   - recbank.h's checks: total, no locks, every acknowledged transfer
 *     present, sercheck over every history (the leaver's too), and every
 *     machine, the leaver included, exits 0.
 *
 * --broken: the leaver skips the completion check (FARM_FP_LEAVE_EARLY)
 * and asks to go as soon as it is listed leaving: some region must be
 * found short at its departure.
 *
 * Exits 77 (skip) without the ZooKeeper client or server.
 */
#define NP_NM 4
#include "recbank.h"
#include "brokenarg.h"
#include "replicas.h"

#include <pthread.h>

#include "node/node.h"
#include "recovery/recovery.h"

#define LV_LEAVER   2u
#define LV_BYTES    1024u
#define LV_US       2000u
#define LV_LEAVE_MS 120000
#define LV_WAIT_MS  30000

static bool opt_broken;

/* Child: the leave, run on a thread of its own while the main thread
 * serves loop 0 (the completion check's messages run there). */
static pthread_t lv_th;
static bool lv_started, lv_reported;
static atomic_int lv_done;
static int lv_rc;
static uint64_t lv_t0, lv_t1;

static void *lv_main(void *arg)
{
	farm_node *node = arg;
	lv_rc = farm_node_leave(node, LV_LEAVE_MS);
	lv_t1 = np_now_ns();
	atomic_store(&lv_done, 1); /* pairs with the load in lv_step */
	return NULL;
}

/* What the leave answered ('l'). */
struct lv_said {
	int rc;
	bool left;
	uint64_t ms;
};

/* Child: what this machine held when it first saw the configuration
 * without the leaver (first.config 0: not yet), now, and the recovery
 * counters ('g' -> 'G'). */
static struct held_report lv_first;

struct lv_report {
	struct held_report h, first;
	uint64_t suspicions, lease_waits, lease_waits_skipped;
};

static int lv_cmd(struct tx_child *c, int cmd, const farm_fatptr *acc,
                  unsigned nacc)
{
	(void)acc;
	(void)nacc;
	if (cmd == 'L') {
		if (lv_started)
			return -1;
		lv_started = true;
		lv_reported = false;
		atomic_store(&lv_done, 0);
		lv_t0 = np_now_ns();
		return pthread_create(&lv_th, NULL, lv_main, c->np.node) ? -1
		                                                         : 0;
	}
	if (cmd == 'g') {
		struct lv_report *r = calloc(1, sizeof(*r));
		if (!r)
			return -1;
		rp_held(c, &r->h);
		r->first = lv_first;
		struct farm_recovery_stats rs;
		farm_recovery_stats(farm_node_recovery(c->np.node), &rs);
		r->suspicions = rs.suspicions;
		r->lease_waits = rs.lease_waits;
		r->lease_waits_skipped = rs.lease_waits_skipped;
		int rc = np_say(&c->np, 'G', r, sizeof(*r));
		free(r);
		return rc;
	}
	return -1;
}

/* The leave asked for: serve the loop until it answers, then say it;
 * the run ends once this machine left. */
static int lv_leave_step(struct tx_child *c)
{
	static const volatile int never = 0;
	while (!atomic_load(&lv_done))
		(void)farm_loop_wait(c->np.loop, &never, 20000000ull);
	pthread_join(lv_th, NULL);
	lv_started = false;
	lv_reported = true;
	struct lv_said s = {.rc = lv_rc,
	                    .left = farm_node_left(c->np.node),
	                    .ms = (lv_t1 - lv_t0) / 1000000ull};
	if (np_say(&c->np, 'l', &s, sizeof(s)))
		return -1;
	return s.rc == 0;
}

/* Survivors: what they hold at the first sight of the configuration
 * without the leaver. */
static int lv_step(struct tx_child *c, struct run_report *r)
{
	if (lv_started && !lv_reported)
		return lv_leave_step(c);
	if (r->new_config && !lv_first.config) {
		rp_held(c, &lv_first);
		lv_first.config |= !lv_first.config; /* taken */
	}
	return 0;
}

/* Parent: did machine @m hold a complete copy of @region in @first? */
static bool held_complete(const struct held_report *first, uint32_t region)
{
	for (unsigned i = 0; i < first->n; i++)
		if (first->h[i].region == region)
			return !first->h[i].filling;
	return false;
}

/* Parent: every region's replicas in the end (its primary's list) each
 * held a complete copy when they first saw the configuration without
 * the leaver: none ran short at its departure. */
static void check_departure(struct rb_result *res, struct lv_report **r)
{
	unsigned checked = 0;
	for (unsigned i = 0; i < NP_NM; i++)
		for (unsigned k = 0; r[i] && k < r[i]->h.n; k++) {
			const struct rp_held *e = &r[i]->h.h[k];
			if (e->role != FARM_AS_PRIMARY)
				continue;
			for (unsigned q = 0; q < e->nreps; q++) {
				uint32_t m = e->reps[q];
				checked++;
				if (m < NP_NM && r[m] &&
				    held_complete(&r[m]->first, e->region))
					continue;
				failed(&res->f,
				       "region %#" PRIx32 ": machine %" PRIu32
				       " had no complete copy when the leaver "
				       "departed",
				       e->region, m);
			}
		}
	printf("leave: %u copies checked at the departure\n", checked);
}

static void lv_configure(uint32_t me, struct farm_config *cfg)
{
	(void)me;
	cfg->replicas = 2;
	cfg->datarec_bytes = LV_BYTES;
	cfg->datarec_interval_us = LV_US;
	/* 4 machines and the copies on a shared 2-core host: a lease that
	 * lapses falsely would be a suspicion this test counts. */
	cfg->lease_us = 200000;
}

/* Parent: ask machine @i to leave; its answer. */
static struct lv_said ask_leave(unsigned i)
{
	struct lv_said s;
	np_send(&rb_cl, i, 'L');
	np_expect(&rb_cl, i, 'l', LV_LEAVE_MS + 30000);
	np_recv(&rb_cl, i, &s, sizeof(s), 1000);
	printf("leave: machine %u asked to leave: %s after %" PRIu64 " ms%s\n",
	       i, s.rc ? farm_strerror(s.rc) : "left", s.ms,
	       s.left ? " (farm_node_left)" : "");
	return s;
}

/* Parent: the survivors' reports, polled until every region is at its
 * 2 replicas (or LV_WAIT_MS); the checks into @f. */
static void check_replicas(struct rb_result *res)
{
	struct lv_report *r[NP_MAX] = {0};
	struct held_report *h[NP_MAX] = {0};
	uint64_t in = 0;
	for (unsigned i = 0; i < NP_NM; i++)
		if (rb_member(res, i)) {
			in |= 1ull << i;
			r[i] = calloc(1, sizeof(*r[i]));
			assert_non_null(r[i]);
		}
	char why[256] = "";
	unsigned nreg = 0;
	bool ok = false;
	uint64_t dl = np_now_ns() + LV_WAIT_MS * 1000000ull;
	do {
		for (unsigned i = 0; i < NP_NM; i++)
			if (r[i]) {
				np_send(&rb_cl, i, 'g');
				np_expect(&rb_cl, i, 'G', 10000);
				np_recv(&rb_cl, i, r[i], sizeof(*r[i]), 1000);
				h[i] = &r[i]->h;
			}
		ok = rp_replicated(h, in, 2, 1ull << LV_LEAVER, why,
		                   sizeof(why), &nreg);
		if (!ok)
			np_pause_ms(200);
	} while (!ok && np_now_ns() < dl);
	printf("leave: %u regions; %s\n", nreg,
	       ok ? "every one at its 2 replicas" : why);
	if (!ok)
		failed(&res->f, "regions not at 2 complete replicas: %s", why);
	check_departure(res, r);
	for (unsigned i = 0; i < NP_NM; i++) {
		if (!r[i])
			continue;
		printf("leave: machine %u: %" PRIu64 " suspicions, %" PRIu64
		       " lease waits (%" PRIu64 " skipped)\n",
		       i, r[i]->suspicions, r[i]->lease_waits,
		       r[i]->lease_waits_skipped);
		if (r[i]->suspicions)
			failed(&res->f, "machine %u suspected a machine", i);
		if (r[i]->lease_waits)
			failed(&res->f, "machine %u waited a lease", i);
		free(r[i]);
	}
}

static void test_leave(void **state)
{
	(void)state;
	struct rb_result res;
	rb_start(&res, "leave");
	/* The CM is refused, and nothing changes. */
	struct lv_said s = ask_leave(0);
	if (s.rc != -EPERM || s.left)
		failed(&res.f, "the CM's leave answered %d, not -EPERM", s.rc);
	s = ask_leave(LV_LEAVER);
	if (s.rc || !s.left)
		failed(&res.f, "the leave answered %s", farm_strerror(s.rc));
	res.t_kill_ns = np_now_ns();
	rb_tell(&res, LV_LEAVER, false);
	struct run_report lr;
	np_expect(&rb_cl, LV_LEAVER, 'D', 30000);
	np_recv(&rb_cl, LV_LEAVER, &lr, sizeof(lr), 1000);
	rb_collect(&res);
	check_replicas(&res);
	rb_check(&res);
	rb_verdict(&res, opt_broken,
	           "the leaver went before its successors' copies were "
	           "complete");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_leave, rb_teardown),
	};
	rb_p.cmd = lv_cmd;
	rb_p.step = lv_step;
	rb_p.configure = lv_configure;
	if (argc > 1 && !strcmp(argv[1], "--broken")) {
		if (!farm_fault_built()) {
			printf("skipped: --broken needs fault injection "
			       "(FARM_FAULT_INJECTION=OFF)\n");
			return FARM_TEST_SKIP;
		}
		opt_broken = true;
		/* Inherited by the machines (forked). */
		if (farm_fault_set(FARM_FP_LEAVE_EARLY, tu_switch_on, NULL))
			return 1;
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--broken]\n", argv[0]);
		return 2;
	}
	return rb_main("leave_node", tests, 1);
}
