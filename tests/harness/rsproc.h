/*
 * Test fixture on top of replicas.h: restartable machines. A cluster of
 * NP_NM machine processes joined through a private ZooKeeper, 3 replicas,
 * whose survivors of a test's failure are stopped, killed together and
 * restarted on their data directories (a power loss), then asked whether
 * every region is back at its replicas (tests/test_restart_copy.c,
 * tests/test_restart_round.c). Defined in rsproc.c; the including test
 * defines NP_NM (nodeproc.h) and sets rs_p before it starts the cluster.
 *
 * Commands every machine serves (rs_serve), before and after the restart:
 *   'g'  what it holds and copies: 'G' and a struct held_report;
 *   'F'  TRUNCATE records for every log it coordinates: 'f';
 *   'h'  (once every machine sent its TRUNCATE records) the records of
 *        transactions left in its logs, once none is or after
 *        rs_p.step_ms: 'H' and a uint64_t;
 *   'Q'  quit;
 * a test serves its own through rs_p.cmd.
 */
#ifndef FARM_TESTS_RSPROC_H
#define FARM_TESTS_RSPROC_H

#include "replicas.h"

/* rs_p.cmd's answer for a command that is not the test's. */
#define RS_UNKNOWN (-1)

/* What a test sets before np_start (the machines inherit it). */
struct rs_params {
	const char *zk_connect, *zk_root; /* the cluster's ZooKeeper */
	uint32_t session_ms, lease_us;
	int join_ms; /* a start's bound */
	int step_ms; /* a step's deadline (a failure, not a wait) */
	/* Test-specific parts of a machine (each may be NULL):
	 * configure     its settings, after rs_config's own;
	 * arm           its test-only switches, before its node opens
	 *               (@restarted: the incarnation after the power loss):
	 *               nonzero fails the machine (exit status 9);
	 * cmd           a command rs_serve does not know: 0 (served),
	 *               RS_UNKNOWN, or the machine's exit status;
	 * first_role    the first incarnation, once the cluster has its
	 *               NP_NM machines and the machine said 'R';
	 * restart_role  the incarnation after the power loss, once the
	 *               restarted cluster has its members back and the
	 *               machine said 'R'. */
	void (*configure)(struct farm_config *cfg);
	int (*arm)(bool restarted);
	int (*cmd)(struct tx_child *c, int cmd);
	int (*first_role)(struct tx_child *c);
	int (*restart_role)(struct tx_child *c);
};
extern struct rs_params rs_p;

/* ---- the machines ---------------------------------------------------- */

/* Machine @np's configuration: 16 MiB regions, 3 replicas, rs_p's
 * ZooKeeper, session and lease, then rs_p.configure. 0, or the child's
 * exit status (np_config). */
int rs_config(struct np_child *np, struct farm_config *cfg);

/* A fill for create_objs: every byte of the object from its address. */
void rs_fill(void *d, uint32_t size, farm_fatptr p, void *arg);

/* Serve the parent's commands (above) until 'Q' (0) or a failure (the
 * machine's exit status). */
int rs_serve(struct tx_child *c);

/* np_entry_fn of the first incarnation (rs_p.first_role). */
int rs_first_machine(struct np_child *np, void *arg);

/* np_entry_fn of the incarnation after the power loss: on the data
 * directory of the first, waits for NP_NM - 1 members (the survivors),
 * then rs_p.restart_role. */
int rs_restarted_machine(struct np_child *np, void *arg);

/* ---- the parent ------------------------------------------------------ */

/* Machine @i's 'g' answer (malloc'ed: the caller frees it). */
struct held_report *rs_ask_held(struct np_cluster *cl, unsigned i);

/* 'F' to every machine of @in (bit i: machine i), then 'h': the records
 * of transactions left in all of their logs (0: none to replay). */
uint64_t rs_truncate(struct np_cluster *cl, uint64_t in);

/* A power loss: every machine of @in stopped first, then killed, reaped,
 * and restarted on its directory (rs_restarted_machine); returns once
 * each said 'R', with the time from the kill to then (ns). */
uint64_t rs_power_loss(struct np_cluster *cl, uint64_t in);

/* Every region at 3 complete replicas at the machines of @in within
 * @ms (rp_replicated): 0, or -1 (why in @why). The regions counted go
 * to *@nregions; with @last (NP_NM entries), the last reports too:
 * last[i] for machine i of @in, malloc'ed (the caller frees them), NULL
 * for the others. */
int rs_await_replicated(struct np_cluster *cl, uint64_t in, unsigned ms,
                        char *why, size_t len, unsigned *nregions,
                        struct held_report **last);

#endif
