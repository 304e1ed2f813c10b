/*
 * Machines in network namespaces, for the tests that run under
 * `scripts/netns-cluster run --net-only` (ctest label netns). The script
 * creates one namespace per machine, one for clients and one with a
 * ZooKeeper server, all joined by veth links to a bridge, and says where
 * they are in the environment:
 *   FARM_NETNS_MACHINES  namespace names, one per machine, in order
 *   FARM_NETNS_ADDRS     their IPv4 addresses, same order
 *   FARM_NETNS_CLIENT    the clients' namespace (FARM_NETNS_CLIENT_ADDR)
 *   FARM_NETNS_ZK        ZooKeeper's host:port
 *   FARM_NETNS_IFACE     each namespace's link (eth0)
 * A forked machine enters its namespace with setns(2) (what `ip netns exec`
 * does) before it opens anything, so its sockets live there and its fabric
 * traffic crosses the veth links; nothing but the test's own pipes and
 * history files joins it to the parent. Without FARM_NETNS_MACHINES the
 * tests run as before (one host, loopback or shm). The benchmarks' --netns
 * (bench/lib/benchnet.h) runs on it too. Defined in netns.c (farm_support:
 * libc only).
 */
#ifndef FARM_SUPPORT_NETNS_H
#define FARM_SUPPORT_NETNS_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Running under netns-cluster: the machines go to namespaces. */
bool tn_active(void);

/* Word @i (0-based, space-separated) of environment variable @var into
 * @out: 0, or -ENOENT. */
int tn_word(const char *var, unsigned i, char *out, size_t len);

/* How many machine namespaces there are. */
unsigned tn_count(void);

/* This thread (a forked child: the process) into namespace @ns. */
int tn_enter(const char *ns);

/* Into machine @i's namespace (an error said on stderr). */
int tn_enter_machine(unsigned i);

/* Into the clients' namespace. */
int tn_enter_client(void);

/* Machine @i's IPv4 address. */
int tn_addr(unsigned i, char *buf, size_t len);

/* Machine @i's link up or down (`ip -n NS link set eth0 up|down`): a
 * cable put back or pulled. 0, or -EIO. */
int tn_link(unsigned i, bool up);

/* In netns mode, @n machine namespaces and a network provider are needed:
 * anything else is a setup error (exit 2, said on stderr). */
void tn_require(unsigned n);

#endif
