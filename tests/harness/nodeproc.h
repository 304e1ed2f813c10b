/*
 * Test fixture: a cluster of NP_NM machine processes, each a forked child
 * that runs a farm_node with static membership (tests/test_txn_multi.c,
 * tests/test_kv_multi.c). The parent drives the machines through a pipe
 * each way: one-byte commands down (np_send), one-byte answers and their
 * payloads up (np_expect, np_recv). What a machine does is the test's: its
 * child entry point gets a struct np_child, which the test's own child
 * state embeds (as a member np). Under scripts/netns-cluster (netns.h)
 * machine i runs in the i-th machine namespace, listens on its address and
 * joins through the cluster's ZooKeeper instead of static peers.
 * Defined in nodeproc.c.
 */
#ifndef FARM_TESTS_NODEPROC_H
#define FARM_TESTS_NODEPROC_H

#include "netns.h"
#include "testutil.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>

#include "node/node.h"

/* The most machines a cluster may have: the harness's arrays are this
 * long. */
#define NP_MAX 64

/* The machines in this test's cluster. The harness is compiled once, so a
 * test's NP_NM reaches it at run time through np_nm, which the constructor
 * below sets before main runs. */
extern unsigned np_nm;

#ifndef FARM_HARNESS_BUILD
#ifndef NP_NM
#define NP_NM 3 /* machines in a cluster (a test may set more) */
#endif
_Static_assert(NP_NM <= NP_MAX, "NP_NM: at most NP_MAX machines");
static void __attribute__((constructor)) np_nm_set(void)
{
	np_nm = NP_NM;
}
#endif

uint64_t np_now_ns(void);

/* ---- the cluster (parent side) ------------------------------------------- */

struct np_cluster {
	char root[256];        /* a temporary directory, removed at the end */
	char dir[NP_MAX][300]; /* machine i's data dir and address: root/mi */
	pid_t pid[NP_MAX];
	int to[NP_MAX], from[NP_MAX]; /* pipes to and from each machine */
};

/* A machine process (child side); the test's child state embeds it. */
struct np_child {
	uint32_t me;
	int in, out; /* commands from the parent, answers to it */
	const struct np_cluster *cl;
	farm_node *node;
	farm_loop *loop;
	uint64_t rng;
};

/* A machine's body: its exit status (0 when all went well). */
typedef int (*np_entry_fn)(struct np_child *c, void *arg);

/* Another cluster of this test whose pipes a machine must not hold (a
 * machine that joins later is forked as a cluster of its own). */
extern struct np_cluster *np_other;

void np_close_pipes(const struct np_cluster *cl);

/* Fork machine @i on @cl's data directory (@cl->dir[i]); it runs
 * @entry(c, @arg) and exits. */
void np_spawn_one(struct np_cluster *cl, uint32_t i, np_entry_fn entry,
                  void *arg);

/* Fork NP_NM machines on @cl's data directories (made by np_start, or
 * left by an earlier incarnation: a restart); machine i runs
 * @entry(c, @arg) and exits. */
void np_spawn(struct np_cluster *cl, np_entry_fn entry, void *arg);

/* Fork NP_NM machines with data dirs under a new temporary directory
 * (@tag names it); machine i runs @entry(c, @arg) and exits. */
void np_start(struct np_cluster *cl, const char *tag, np_entry_fn entry,
              void *arg);
/* Read @len bytes from machine @i within @ms, or 20 s if @ms is less (fails
 * the test otherwise): a hang detector, not a speed check. */
void np_recv(struct np_cluster *cl, unsigned i, void *buf, size_t len, int ms);

void np_expect(struct np_cluster *cl, unsigned i, char want, int ms);

void np_send(struct np_cluster *cl, unsigned i, char cmd);

/* Let every machine finish (after 'Q') and reap it: exit statuses. */
void np_finish(struct np_cluster *cl, int *st);

/* Say 'Q' to every machine, let each finish and reap it: fails the test
 * unless every one exited 0. */
void np_quit_all(struct np_cluster *cl);

/* For a teardown, also after a failed assertion: no process or file stays. */
void np_cleanup(struct np_cluster *cl);

/* Reap machine @i, which a SIGKILL must have ended (fails the test
 * otherwise), and close its pipes. */
void np_reap_killed(struct np_cluster *cl, unsigned i);

/* The parent's pause between two polls of the machines' state (@ms,
 * resumed after a signal). */
void np_pause_ms(unsigned ms);

/* ---- the machine (child side) -------------------------------------------- */

/* Lease length across namespaces: generous, so that a loaded host's
 * scheduling does not look like a failure (recovery removes a machine
 * whose lease lapses). */
#define NP_NETNS_LEASE_US 200000u

/* Across namespaces (netns.h): listen and hold leases on the machine's
 * own address, join through the cluster's ZooKeeper under a root of this
 * cluster's own. 0, or 3 (the environment is incomplete). */
int np_config_netns(const struct np_child *c, struct farm_config *cfg);

/* Machine @c's configuration: its data dir, regions of @rsize, 1 thread,
 * the other machines as static peers (across namespaces: np_config_netns).
 * 0, or the child's exit status: 2 (bad @rsize), 3 (an invalid
 * configuration). */
int np_config(const struct np_child *c, const char *rsize,
              struct farm_config *cfg);

/* np_config for a cluster joined through ZooKeeper at @zk under @root
 * (no static peers), with sessions of @session_ms and leases of
 * @lease_us. */
int np_config_zk(const struct np_child *c, const char *rsize, const char *zk,
                 const char *root, uint32_t session_ms, uint32_t lease_us,
                 struct farm_config *cfg);

/* Across namespaces: every member of @c's view publishes a fabric address
 * on its own namespace's network (machine 0 says them). 0, or -1. */
int np_check_netns(struct np_child *c);

/* The machine is up: seed its random numbers and say 'R'. */
int np_ready(struct np_child *c);

/* A command byte from the parent, if one is there: 0 none, -1 gone. */
int np_poll_cmd(struct np_child *c);

/* Serve the loop (peers' requests) until the parent says something. */
int np_wait_cmd(struct np_child *c);

/* Drive @loop until machine @id is in @node's view (0), the node says it
 * is not admitted (-EEXIST: farm_node_refused), or @ms pass (-ETIMEDOUT).
 * For a machine that joins a running cluster. */
int np_await_member(farm_node *node, farm_loop *loop, uint32_t id, int ms);

/* Answer @b to the parent, then @len bytes of @data. */
int np_say(struct np_child *c, char b, const void *data, size_t len);

/* ---- files the machines and the parent share ----------------------------- */

/* Write @path whole (through a temporary file and a rename). */
int np_write_file(const char *path, const void *buf, size_t len);

/* A whole file into malloc'ed memory (NULL, length 0: none). */
void *np_read_file(const char *path, size_t *len);

#endif
