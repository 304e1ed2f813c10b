#include "zklocal.h"

int zkl_run_arg(const char *env, const char *script, const char *verb,
                const char *dir, const char *arg, char *line, size_t len)
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

int zkl_run(const char *env, const char *script, const char *verb,
            const char *dir, char *line, size_t len)
{
	return zkl_run_arg(env, script, verb, dir, NULL, line, len);
}

int zkl_member(const char *script, const char *verb, const char *dir,
               unsigned k, char *line, size_t len)
{
	char m[300];
	snprintf(m, sizeof(m), "%s/%u", dir, k);
	return zkl_run(NULL, script, verb, m, line, len);
}

unsigned zkl_leader(const char *script, const char *dir, unsigned n)
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
