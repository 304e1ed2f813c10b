/*
 * Helpers shared by the tests: temporary directories, forked machine
 * processes, synchronous fabric requests. Defined in testutil.c.
 */
#ifndef FARM_TESTS_TESTUTIL_H
#define FARM_TESTS_TESTUTIL_H

#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <farm/farm.h>

#include "util/common.h"
#include "util/fault.h"
#include "tmpdir.h"
#include "zklocal.h"

/* ctest treats this exit code as "skipped" (SKIP_RETURN_CODE). */
#define FARM_TEST_SKIP 77

/* The provider the tests run on: $FARM_FABRIC (ctest sets it for the
 * "_ofi" variants), else shm. Forked machines inherit it. */
const char *tu_provider(void);

bool tu_is_shm(void);

/* What farm_ep_connect returns for an address where no machine answers:
 * -ETIMEDOUT on udp, which cannot tell silence from death, else
 * -ECONNREFUSED. */
int tu_unreachable(void);

/* Exit 77 (skipped) when the chosen provider is not built here. */
void tu_require_provider(void);

/*
 * A run over the lossy udp network (FARM_UDP_HOOKS set) proves nothing if
 * no packet was lost. tu_lossy_begin(), in main before any machine starts:
 * false when not lossy; exits 77 (skipped) in a build without fault
 * injection (the hooks are not compiled there); else every udp fabric of
 * the test tallies its dropped packets into a file at close.
 * tu_lossy_dropped(), at the end: the packets the hooks dropped, all
 * machines that closed their fabric together.
 */
extern char tu_lossy_log[256];

bool tu_lossy_begin(void);

unsigned long long tu_lossy_dropped(void);

/* A lossy run's verdict: @rc, or 1 when the hooks dropped nothing. */
int tu_lossy_end(bool lossy, int rc);

/* Open a fabric for machine @id in @dir (shm; network providers listen on
 * a free loopback port). */
farm_fabric *tu_open(uint32_t id, const char *dir);

/* Poll @cq until one completion arrives or @timeout_ms passes. Returns 1
 * with *wc set, or 0 on timeout. */
int tu_wait_wc(farm_cq *cq, farm_wc *wc, unsigned timeout_ms);

/* Post one request and wait for its completion; returns its status, or
 * -ETIMEDOUT. */
int tu_do(farm_ep *ep, farm_cq *cq, farm_wr wr);

/* Pipes for parent/child handshakes: write and read whole values. */
int tu_send(int fd, const void *buf, size_t len);

int tu_recv(int fd, void *buf, size_t len);

/* Reap a child and return its exit status (or 128+signal). */
int tu_reap(pid_t pid);
/* SIGSTOP child @pid and wait until it has stopped: 0, or -1 (it exited,
 * or waitpid failed). kill(2) returns once the stop is queued, and one
 * thread of the target takes it; until that thread runs, the others go
 * on (real-time ones first on a loaded host). A test that stops machines
 * so that none sees what it does next must wait for the stop itself. */
int tu_stop(pid_t pid);

/* Run scripts/zk-local @script with @verb on @dir (zklocal.h). */
int tu_zk_local(const char *script, const char *verb, const char *dir,
                char *line, size_t len);

/* A test's private ZooKeeper server (scripts/zk-local @script), its state
 * in a new temporary directory (its path in @dir): started, its connect
 * string in @connect. @nservers 0: one standalone server; else an
 * ensemble of that many (members @dir/1 .. @dir/@nservers; @connect
 * names them all). Returns 0; FARM_TEST_SKIP when java or the jars are
 * missing (said on stdout); 1 when it failed (its logs on stderr). On
 * anything but 0 nothing is left running or on disk. */
int tu_zk_start_n(const char *script, char *dir, size_t dlen, unsigned nservers,
                  char *connect, size_t clen);

int tu_zk_start(const char *script, char *dir, size_t dlen, char *connect,
                size_t clen);

/* Stop what tu_zk_start_n started (@nservers as there) and remove its
 * directory. */
void tu_zk_stop_n(const char *script, const char *dir, unsigned nservers);

void tu_zk_stop(const char *script, const char *dir);

/* Member @k of the ensemble in @dir: "kill" (SIGKILL, waits until it has
 * exited), "start" (on its ports and data; waits until it serves when a
 * quorum runs), "stop", or "mode" (its first line in @line). Returns
 * zk-local's exit status. */
int tu_zk_member(const char *script, const char *dir, unsigned k,
                 const char *verb, char *line, size_t len);

/* A ZooKeeper test's main: @tests (@n of them, group @name; only those
 * matching $FARM_TEST_ONLY when set) with a private server or ensemble
 * (tu_zk_start_n; the ensemble's start time printed), or a skip (77)
 * without the client library, java or the jars. */
int tu_zk_run_n(const char *script, char *dir, size_t dlen, unsigned nservers,
                char *connect, size_t clen, const char *name,
                const struct CMUnitTest *tests, size_t n);

int tu_zk_run(const char *script, char *dir, size_t dlen, char *connect,
              size_t clen, const char *name, const struct CMUnitTest *tests,
              size_t n);

/* ---- error tallies ------------------------------------------------------ */

#define TU_NERR 6

/* The first TU_NERR distinct error codes counted, and how often each
 * came. */
struct tu_errs {
	int err[TU_NERR];
	uint64_t n[TU_NERR];
};

/* Count error @rc; returns the errors counted in all. */
uint64_t tu_errs_add(struct tu_errs *e, int rc);

/* "code x N, ..." for a report ("none" when nothing was counted). */
const char *tu_errs_str(const struct tu_errs *e, char *buf, size_t len);

/* The checks that failed, one line each (a test reports them all before
 * it fails: tests/recbank.h, tests/recproc.h). */
struct fails {
	char text[4096];
	size_t len;
	unsigned n;
};

void failed(struct fails *f, const char *fmt, ...);

/* ---- forked machine processes ------------------------------------------ */

struct tu_machine {
	uint32_t id;
	pid_t pid;
	int to, from; /* pipes: parent -> child, child -> parent */
	char dir[256];
	char addr[256];
	farm_mr_desc desc; /* its region */
};

/* What a child machine runs once its region is published: @in and @out
 * talk to the parent. Returns the child's exit status. */
typedef int (*tu_machine_fn)(farm_fabric *fab, farm_region *r, int in, int out,
                             void *arg);

/*
 * fork() for a test's child process: stdio flushed first (no output
 * twice), and the child killed with the test (a child spinning in a
 * test's code outlived a test process killed by ctest's timeout). A child
 * whose parent died before it asked for that exits at once. As fork():
 * 0 in the child, its pid or -1 (errno) in the parent.
 */
pid_t tu_fork(void);

/*
 * Fork machine @id with a region of @rsize bytes; the child opens its
 * fabric in a fresh directory, publishes (address, descriptor) to the
 * parent, then runs @fn (NULL: wait until the parent closes m->to), and
 * exits. Returns 0 once the machine is published.
 */
int tu_spawn(struct tu_machine *m, uint32_t id, uint64_t rsize,
             tu_machine_fn fn, void *arg);

/* Let the machine finish and reap it; returns its exit status. */
int tu_finish(struct tu_machine *m);

#endif
