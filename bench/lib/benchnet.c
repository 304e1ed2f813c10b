/*
 * The network a benchmark's machines use (benchnet.h).
 */
#include "benchnet.h"

#include "netns.h"

int bnet_set_fabric(struct bnet *n, const char *v)
{
	if (strcmp(v, "shm") != 0 && strcmp(v, "ofi") != 0 &&
	    strcmp(v, "udp") != 0)
		return -1;
	snprintf(n->fabric, sizeof(n->fabric), "%s", v);
	return 0;
}

bool bnet_shm(const struct bnet *n)
{
	return strcmp(n->fabric, "shm") == 0;
}

int bnet_check(struct bnet *n, const char *prog, unsigned machines)
{
	if (n->netns) {
		/* ofi unless udp was asked for: shm needs one host. */
		if (bnet_shm(n))
			snprintf(n->fabric, sizeof(n->fabric), "ofi");
		if (!tn_active() || tn_count() < machines) {
			fprintf(stderr,
			        "%s: --netns needs %u machine namespaces: run "
			        "it under scripts/netns-cluster run --net-only "
			        "--machines %u -- %s --netns ...\n",
			        prog, machines, machines, prog);
			return -1;
		}
	}
	if (!farm_fabric_provider_available(n->fabric)) {
		fprintf(stderr, "%s: the %s provider was not built\n", prog,
		        n->fabric);
		return -1;
	}
	return 0;
}

const char *bnet_network(const struct bnet *n)
{
	return bnet_shm(n) ? "shared memory" : n->netns ? "netns" : "loopback";
}

const char *bnet_listen(const struct bnet *n, unsigned i, char *buf, size_t len)
{
	char ip[64];
	if (bnet_shm(n))
		return NULL;
	if (n->netns && tn_addr(i, ip, sizeof(ip)) == 0)
		snprintf(buf, len, "%s:0", ip);
	else
		snprintf(buf, len, "127.0.0.1:0");
	return buf;
}

int bnet_enter(const struct bnet *n, unsigned i)
{
	return n->netns ? tn_enter_machine(i) : 0;
}

int bnet_enter_client(const struct bnet *n)
{
	return n->netns ? tn_enter_client() : 0;
}

unsigned bnet_machines(void)
{
	return tn_count();
}

int bnet_addr(unsigned i, char *buf, size_t len)
{
	return tn_addr(i, buf, len);
}

int bnet_enter_machine(unsigned i)
{
	return tn_enter_machine(i);
}
