#include "netns.h"

bool tn_active(void)
{
	const char *s = getenv("FARM_NETNS_MACHINES");
	return s && *s;
}

int tn_word(const char *var, unsigned i, char *out, size_t len)
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

unsigned tn_count(void)
{
	char w[128];
	unsigned n = 0;
	while (tn_word("FARM_NETNS_MACHINES", n, w, sizeof(w)) == 0)
		n++;
	return n;
}

int tn_enter(const char *ns)
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

int tn_enter_machine(unsigned i)
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

int tn_enter_client(void)
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

int tn_addr(unsigned i, char *buf, size_t len)
{
	return tn_word("FARM_NETNS_ADDRS", i, buf, len);
}

int tn_link(unsigned i, bool up)
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

void tn_require(unsigned n)
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
