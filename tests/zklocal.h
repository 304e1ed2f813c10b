/*
 * Running scripts/zk-local (a private ZooKeeper server) from C: shared by
 * the tests (testutil.h) and bench/lib/benchcluster.c. Header-only, no test
 * framework.
 */
#ifndef FARM_TESTS_ZKLOCAL_H
#define FARM_TESTS_ZKLOCAL_H

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
static inline int zkl_run_arg(const char *env, const char *script,
                              const char *verb, const char *dir,
                              const char *arg, char *line, size_t len)
{
	char cmd[800];
	snprintf(cmd, sizeof(cmd), "%s%s'%s' %s '%s'%s%s", env ? env : "",
	         env && *env ? " " : "", script, verb, dir, arg ? " " : "",
	         arg ? arg : "");
	fflush(NULL);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char buf[512] = "";
	if (fgets(buf, sizeof(buf), p))
		buf[strcspn(buf, "\n")] = 0;
	while (fgetc(p) != EOF)
		;
	int st = pclose(p);
	if (line)
		snprintf(line, len, "%s", buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* zkl_run_arg without an argument after @dir. */
static inline int zkl_run(const char *env, const char *script, const char *verb,
                          const char *dir, char *line, size_t len)
{
	return zkl_run_arg(env, script, verb, dir, NULL, line, len);
}

/* Run @verb (start, stop, kill, mode) on member @k of the ensemble in
 * @dir (its directory @dir/@k). */
static inline int zkl_member(const char *script, const char *verb,
                             const char *dir, unsigned k, char *line,
                             size_t len)
{
	char m[300];
	snprintf(m, sizeof(m), "%s/%u", dir, k);
	return zkl_run(NULL, script, verb, m, line, len);
}

/* The member of the ensemble in @dir (@n members) that leads now: 1..@n,
 * or 0 when none says so. */
static inline unsigned zkl_leader(const char *script, const char *dir,
                                  unsigned n)
{
	for (unsigned k = 1; k <= n; k++) {
		char mode[32];
		if (zkl_member(script, "mode", dir, k, mode, sizeof(mode)) ==
		            0 &&
		    !strcmp(mode, "leader"))
			return k;
	}
	return 0;
}

#endif
