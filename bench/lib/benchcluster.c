/*
 * A local ZooKeeper cluster of forked machine processes (benchcluster.h).
 */
#include "benchcluster.h"

#include "benchnode.h"
#include "benchutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node/node.h"
#include "zklocal.h"

int bc_zk_start(const char *prog, const char *script, const char *env,
                char *dir, char *connect, size_t connect_len)
{
	if (!mkdtemp(dir)) {
		fprintf(stderr, "%s: mkdtemp %s: %s\n", prog, dir,
		        strerror(errno));
		dir[0] = 0;
		return 1;
	}
	int st = zkl_run(env, script, "start", dir, connect, connect_len);
	if (st == 0)
		return 0;
	if (st == 3)
		fprintf(stderr,
		        "%s: java or the ZooKeeper jars are not installed "
		        "(scripts/install-deps)\n",
		        prog);
	else
		fprintf(stderr,
		        "%s: zk-local start failed (%d); see %s/zk.log\n", prog,
		        st, dir);
	(void)zkl_run(env, script, "stop", dir, NULL, 0);
	if (st != 3)
		return 1;
	bu_rm_tree(AT_FDCWD, dir, 3);
	dir[0] = 0;
	return 77;
}

void bc_zk_stop(const char *prog, const char *script, const char *env,
                char *dir)
{
	if (!dir[0])
		return;
	if (zkl_run(env, script, "stop", dir, NULL, 0))
		fprintf(stderr, "%s: zk-local stop failed\n", prog);
	bu_rm_tree(AT_FDCWD, dir, 4);
	dir[0] = 0;
}

pid_t bc_spawn(unsigned i, const char *root, const char *zk_root, bool verbose,
               int (*machine)(uint32_t me, const char *root,
                              const char *zk_root))
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_DFL);
	if (!verbose) {
		char path[320];
		snprintf(path, sizeof(path), "%s/m%u.log", root, i);
		if (!freopen(path, "w", stderr))
			_exit(2);
		setvbuf(stderr, NULL, _IOLBF, 0);
	}
	_exit(machine(i, root, zk_root));
}

int bc_node_config(const char *prog, struct farm_config *cfg, uint32_t me,
                   const char *root, const char *zk, const char *zk_root,
                   unsigned session_ms)
{
	char v[320];
	int rc = 0;
	snprintf(v, sizeof(v), "%u", me);
	rc |= bn_cfg_set(prog, cfg, "machine_id", v);
	snprintf(v, sizeof(v), "%s/m%u", root, me);
	if (mkdir(v, 0700) && errno != EEXIST)
		rc = -errno;
	rc |= bn_cfg_set(prog, cfg, "data_dir", v);
	rc |= bn_cfg_set(prog, cfg, "region_size", "16M");
	rc |= bn_cfg_set(prog, cfg, "threads", "1");
	rc |= bn_cfg_set(prog, cfg, "replicas", "3");
	rc |= bn_cfg_set(prog, cfg, "zk", zk);
	rc |= bn_cfg_set(prog, cfg, "zk_root", zk_root);
	snprintf(v, sizeof(v), "%u", session_ms);
	rc |= bn_cfg_set(prog, cfg, "zk_session_ms", v);
	return rc;
}

int bc_node_up(const char *prog, struct farm_config *cfg, uint32_t me,
               unsigned members, unsigned join_ms, farm_node **node,
               farm_loop **loop, unsigned *stage)
{
	int rc;
	*stage = 0;
	if ((rc = bn_node_open(prog, cfg, me, node)))
		return rc;
	farm_node_set_app_loops(*node, true);
	*stage = 1;
	if ((rc = farm_node_start(*node, join_ms)) ||
	    (rc = farm_node_loop_open(*node, 0, loop)))
		return rc;
	*stage = 2;
	return farm_node_wait_members(*node, members, join_ms);
}
