/*
 * Running scripts/zk-local (a private ZooKeeper server) from C: shared by
 * the tests (testutil.h) and bench/benchcluster.c. Header-only, no test
 * framework.
 */
#ifndef FARM_TESTS_ZKLOCAL_H
#define FARM_TESTS_ZKLOCAL_H

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* Run zk-local @script with @verb on @dir (a private ZooKeeper server),
 * with the environment assignments @env in front ("" or NULL: none, e.g.
 * "ZK_LOCAL_SYNC=yes"). Returns its exit status (3: java or the jars are
 * missing, a skip), and its first stdout line (start: "127.0.0.1:PORT")
 * in @line when non-NULL. */
static inline int zkl_run(const char *env, const char *script, const char *verb,
                          const char *dir, char *line, size_t len)
{
	char cmd[800];
	snprintf(cmd, sizeof(cmd), "%s%s'%s' %s '%s'", env ? env : "",
	         env && *env ? " " : "", script, verb, dir);
	fflush(NULL);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char buf[128] = "";
	if (fgets(buf, sizeof(buf), p))
		buf[strcspn(buf, "\n")] = 0;
	while (fgetc(p) != EOF)
		;
	int st = pclose(p);
	if (line)
		snprintf(line, len, "%s", buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

#endif
