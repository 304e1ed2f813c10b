/*
 * A local ZooKeeper cluster of forked machine processes, as recovery_bench
 * and datarec_bench run it: the private ZooKeeper server
 * (scripts/zk-local, support/zklocal.h), forking a machine, and a machine's
 * common settings and start.
 */
#ifndef FARM_BENCH_BENCHCLUSTER_H
#define FARM_BENCH_BENCHCLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <farm/farm.h>

/* Starts a private ZooKeeper server (@script, with the environment
 * assignments @env in front, NULL: none) with its data in @dir, a
 * mkdtemp template made here; its address goes to @connect. 0 when it
 * runs; 77 when java or the ZooKeeper jars are missing (@dir removed and
 * emptied: a skip); 1 on any other failure (said on stderr; @dir kept,
 * with zk.log, for bc_zk_stop). */
int bc_zk_start(const char *prog, const char *script, const char *env,
                char *dir, char *connect, size_t connect_len);

/* Stops the server of bc_zk_start and removes @dir (nothing when @dir is
 * empty); @dir is emptied. */
void bc_zk_stop(const char *prog, const char *script, const char *env,
                char *dir);

/* Forks machine @i: the child dies with its parent, leaves SIGINT to the
 * parent, writes its stderr to @root/m<i>.log (line-buffered) unless
 * @verbose, and exits with @machine's status. The child's pid, or -1
 * when fork failed. */
pid_t bc_spawn(unsigned i, const char *root, const char *zk_root, bool verbose,
               int (*machine)(uint32_t me, const char *root,
                              const char *zk_root));

/* The settings every machine of these clusters shares: its id, a data
 * directory @root/m<me> (made here), 16 MiB regions, one thread, 3
 * replicas, ZooKeeper at @zk under @zk_root with @session_ms sessions.
 * Nonzero when one failed (said on stderr). */
int bc_node_config(const char *prog, farm_conf *cfg, uint32_t me,
                   const char *root, const char *zk, const char *zk_root,
                   unsigned session_ms);

/* Opens the node (application loops), starts it, opens loop 0 and waits
 * for @members machines. On failure *@stage says where (0 open: *@node
 * is NULL; 1 start or loop; 2 join) and the caller closes what opened. */
int bc_node_up(const char *prog, farm_conf *cfg, uint32_t me, unsigned members,
               unsigned join_ms, farm_node **node, farm_loop **loop,
               unsigned *stage);

#endif
