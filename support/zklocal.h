/*
 * Running scripts/zk-local (a private ZooKeeper server) from C: shared by
 * the tests (testutil.h) and bench/lib/benchcluster.c. Defined in zklocal.c
 * (farm_support: libc only, no test framework).
 */
#ifndef FARM_SUPPORT_ZKLOCAL_H
#define FARM_SUPPORT_ZKLOCAL_H

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* Run zk-local @script with @verb on @dir (a private ZooKeeper server, or
 * an ensemble's directory or member), then @arg when non-NULL (the size of
 * start-ensemble), with the environment assignments @env in front ("" or
 * NULL: none, e.g. "ZK_LOCAL_SYNC=yes"). Returns its exit status (3: java
 * or the jars are missing, a skip), and its first stdout line (start:
 * "127.0.0.1:PORT"; start-ensemble: "127.0.0.1:P1,127.0.0.1:P2,...";
 * mode: "leader", ...) in @line when non-NULL. */
int zkl_run_arg(const char *env, const char *script, const char *verb,
                const char *dir, const char *arg, char *line, size_t len);

/* zkl_run_arg without an argument after @dir. */
int zkl_run(const char *env, const char *script, const char *verb,
            const char *dir, char *line, size_t len);

/* Run @verb (start, stop, kill, mode) on member @k of the ensemble in
 * @dir (its directory @dir/@k). */
int zkl_member(const char *script, const char *verb, const char *dir,
               unsigned k, char *line, size_t len);

/* The member of the ensemble in @dir (@n members) that leads now: 1..@n,
 * or 0 when none says so. */
unsigned zkl_leader(const char *script, const char *dir, unsigned n);

#endif
