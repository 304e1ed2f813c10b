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
 * tests run as before (one host, loopback or shm). Header-only.
 */
#ifndef FARM_TESTS_NETNS_H
#define FARM_TESTS_NETNS_H

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
static inline bool tn_active(void)
{
	const char *s = getenv("FARM_NETNS_MACHINES");
	return s && *s;
}

/* Word @i (0-based, space-separated) of environment variable @var into
 * @out: 0, or -ENOENT. */
static inline int tn_word(const char *var, unsigned i, char *out, size_t len)
{
	const char *s = getenv(var);
	if (!s)
		return -ENOENT;
	for (unsigned k = 0;; k++) {
		while (*s == ' ')
			s++;
		if (!*s)
			return -ENOENT;
		size_t n = strcspn(s, " ");
		if (k == i) {
			if (n >= len)
				return -ENAMETOOLONG;
			memcpy(out, s, n);
			out[n] = 0;
			return 0;
		}
		s += n;
	}
}

/* How many machine namespaces there are. */
static inline unsigned tn_count(void)
{
	char w[128];
	unsigned n = 0;
	while (tn_word("FARM_NETNS_MACHINES", n, w, sizeof(w)) == 0)
		n++;
	return n;
}

/* This thread (a forked child: the process) into namespace @ns. */
static inline int tn_enter(const char *ns)
{
	char path[256];
	snprintf(path, sizeof(path), "/run/netns/%s", ns);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = setns(fd, CLONE_NEWNET) ? -errno : 0;
	close(fd);
	return rc;
}

/* Into machine @i's namespace (an error said on stderr). */
static inline int tn_enter_machine(unsigned i)
{
	char ns[128];
	int rc = tn_word("FARM_NETNS_MACHINES", i, ns, sizeof(ns));
	if (!rc)
		rc = tn_enter(ns);
	if (rc)
		fprintf(stderr,
		        "netns: machine %u cannot enter its namespace: "
		        "%s\n",
		        i, strerror(-rc));
	return rc;
}

/* Into the clients' namespace. */
static inline int tn_enter_client(void)
{
	const char *ns = getenv("FARM_NETNS_CLIENT");
	int rc = ns && *ns ? tn_enter(ns) : -ENOENT;
	if (rc)
		fprintf(stderr,
		        "netns: cannot enter the clients' namespace: "
		        "%s\n",
		        strerror(-rc));
	return rc;
}

/* Machine @i's IPv4 address. */
static inline int tn_addr(unsigned i, char *buf, size_t len)
{
	return tn_word("FARM_NETNS_ADDRS", i, buf, len);
}

/* Machine @i's link up or down (`ip -n NS link set eth0 up|down`): a
 * cable put back or pulled. 0, or -EIO. */
static inline int tn_link(unsigned i, bool up)
{
	char ns[128], cmd[400];
	const char *ifc = getenv("FARM_NETNS_IFACE");
	if (tn_word("FARM_NETNS_MACHINES", i, ns, sizeof(ns)))
		return -ENOENT;
	snprintf(cmd, sizeof(cmd), "ip -n '%s' link set '%s' %s", ns,
	         ifc && *ifc ? ifc : "eth0", up ? "up" : "down");
	fflush(NULL);
	int st = system(cmd);
	return st == 0 ? 0 : -EIO;
}

/* In netns mode, @n machine namespaces and a network provider are needed:
 * anything else is a setup error (exit 2, said on stderr). */
static inline void tn_require(unsigned n)
{
	if (!tn_active())
		return;
	const char *p = getenv("FARM_FABRIC");
	if (!p || (strcmp(p, "ofi") != 0 && strcmp(p, "udp") != 0)) {
		fprintf(stderr, "netns: FARM_FABRIC must be ofi or udp across "
		                "namespaces (shm needs one host)\n");
		exit(2);
	}
	if (tn_count() < n) {
		fprintf(stderr,
		        "netns: %u machine namespaces, this test needs %u "
		        "(netns-cluster run --machines %u)\n",
		        tn_count(), n, n);
		exit(2);
	}
}

#endif
