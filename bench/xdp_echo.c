/*
 * xdp_echo: what the kernel's UDP path costs on this host, measured by
 * taking it out: net_bench's plain UDP echo (`net_bench --phase echo`)
 * and the same echo over AF_XDP sockets, alternated in one run across
 * the two machine namespaces of scripts/netns-cluster (veth links to a
 * bridge). Same request (64 B of UDP payload), same windows (1 and
 * --window in flight), same accounting: requests per second, per busy
 * core (client and server CPU both counted), p50/p99 round trip with one
 * in flight; a request unanswered for 5 ms is lost and replaced.
 *
 * The AF_XDP echo builds its Ethernet/IPv4/UDP frames by hand (to the
 * server's MAC, read in its namespace), and an XDP program
 * (xdp_echo.bpf.c) redirects only its UDP port to the socket, passing
 * ARP and the rest to the kernel. veth has no zero-copy, so the sockets
 * bind in copy mode; each configuration tried is one row:
 *
 *   drv       the program attached natively (XDP_DRV, veth's own XDP)
 *   skb       generic XDP (XDP_SKB, after the skb is built)
 *   +wakeup   XDP_USE_NEED_WAKEUP: sendto only when the kernel asks
 *   poll      an idle side sleeps in poll() (as the UDP echo does in
 *             recvmmsg)
 *   busy      SO_PREFER_BUSY_POLL and SO_BUSY_POLL: an idle side spins
 *             on recvfrom(MSG_DONTWAIT), which polls the queue's NAPI
 *
 * Copy mode still sends with a system call (sendto: the frame becomes an
 * skb and goes through veth's xmit) and receives through the softirq;
 * what it removes is the socket layer, the UDP/IP receive and the wake-up
 * per datagram. That is the question: is that enough on this host for a
 * transport to reach KV's goal (docs/benchmarks.md, "AF_XDP against
 * kernel UDP")?
 *
 * Needs root; re-runs itself under scripts/netns-cluster run --net-only
 * --machines 2. Built only where libxdp and libbpf are (bench/CMakeLists).
 * Output: a line per measurement, a summary, then one JSON line with
 * "goals".
 */
#include "benchnet.h"
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xdp/xsk.h>

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (scripts/netns-cluster)"
#endif
#ifndef XDP_ECHO_BPF_OBJ
#error "XDP_ECHO_BPF_OBJ must name the compiled xdp_echo.bpf.o"
#endif

#define SRV_PORT 7301 /* not net_bench's 7300: both may be bound */
#define CLI_PORT 7302
#define MSG      64 /* UDP payload, as net_bench's echo */
#define HDR      (14 + 20 + 8)
#define BATCH    32
#define MAXW     256
#define NFRAMES  4096 /* half fill the rx ring, half are the tx pool */
#define FRAME    2048
#define RING     2048

#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

enum wait_mode { W_POLL, W_BUSY };

struct cfg {
	const char *name;
	uint32_t xdp_flags; /* XDP_FLAGS_DRV_MODE or XDP_FLAGS_SKB_MODE */
	bool wakeup;
	enum wait_mode wait;
};

static const struct cfg g_cfgs[] = {
        {"drv+wakeup poll", XDP_FLAGS_DRV_MODE, true, W_POLL},
        {"drv poll", XDP_FLAGS_DRV_MODE, false, W_POLL},
        {"skb+wakeup poll", XDP_FLAGS_SKB_MODE, true, W_POLL},
        {"skb poll", XDP_FLAGS_SKB_MODE, false, W_POLL},
        {"drv+wakeup busy", XDP_FLAGS_DRV_MODE, true, W_BUSY},
        {"skb+wakeup busy", XDP_FLAGS_SKB_MODE, true, W_BUSY},
};
#define NCFG (sizeof(g_cfgs) / sizeof(g_cfgs[0]))

static struct {
	double seconds;
	unsigned window, rounds;
	double memcached; /* memcached's best GETs per server core */
	const char *only; /* --only: the rows whose name holds it */
} g_opt = {.seconds = 2.0, .window = 32, .rounds = 3, .memcached = 558000};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
	               1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/* A process's CPU time (user + system) from /proc, in seconds. */
static double proc_cpu_s(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	unsigned long ut = 0, st = 0;
	int rc = fscanf(f,
	                "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
	                "%*u %lu %lu",
	                &ut, &st);
	fclose(f);
	return rc == 2 ? (double)(ut + st) / (double)sysconf(_SC_CLK_TCK) : 0;
}

/* The MAC of @ifname in the calling process's namespace, as text
 * (/sys/class/net shows the namespace sysfs was mounted in, not this
 * one after setns). 0, or a negative errno. */
static int if_mac(const char *ifname, char *buf, size_t len)
{
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	int rc = ioctl(fd, SIOCGIFHWADDR, &ifr) ? -errno : 0;
	close(fd);
	const unsigned char *m = (const unsigned char *)ifr.ifr_hwaddr.sa_data;
	if (!rc)
		snprintf(buf, len, "%02x:%02x:%02x:%02x:%02x:%02x\n", m[0],
		         m[1], m[2], m[3], m[4], m[5]);
	return rc;
}

static const char *iface(void)
{
	const char *n = getenv("FARM_NETNS_IFACE");
	return n ? n : "eth0";
}

/* The CPU seconds all ksoftirqd threads have used: softirq work the
 * kernel defers to them is charged to neither echo process, so each
 * row says how much of it its runs caused (other load's included). */
static double ksoftirqd_s(void)
{
	static pid_t pids[256];
	static unsigned n;
	static bool scanned;
	if (!scanned) {
		scanned = true;
		for (pid_t p = 1; p < 4096 && n < 256; p++) {
			char path[64], comm[32] = "";
			snprintf(path, sizeof(path), "/proc/%d/comm", (int)p);
			FILE *f = fopen(path, "r");
			if (!f)
				continue;
			if (fgets(comm, sizeof(comm), f) &&
			    strncmp(comm, "ksoftirqd/", 10) == 0)
				pids[n++] = p;
			fclose(f);
		}
	}
	double t = 0;
	for (unsigned i = 0; i < n; i++)
		t += proc_cpu_s(pids[i]);
	return t;
}

/* ---- one AF_XDP endpoint --------------------------------------------------- */

struct xs {
	const struct cfg *cfg;
	char *area;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fill, tx;
	struct xsk_ring_cons comp, rx;
	struct bpf_object *obj;
	int fd, ifindex;
	uint64_t pool[NFRAMES / 2]; /* free tx frames (the client's) */
	unsigned npool;
};

/* The XDP program on @ifname, redirecting UDP port @port: 0, or a
 * negative errno (said on stderr). */
static int xs_attach(struct xs *x, const char *ifname, uint16_t port)
{
	x->ifindex = (int)if_nametoindex(ifname);
	if (!x->ifindex)
		return fprintf(stderr, "xdp_echo: no %s\n", ifname), -ENODEV;
	x->obj = bpf_object__open_file(XDP_ECHO_BPF_OBJ, NULL);
	int rc = libbpf_get_error(x->obj);
	if (rc) {
		x->obj = NULL;
		fprintf(stderr, "xdp_echo: open %s: %s\n", XDP_ECHO_BPF_OBJ,
		        strerror(-rc));
		return rc;
	}
	if ((rc = bpf_object__load(x->obj))) {
		fprintf(stderr, "xdp_echo: load: %s\n", strerror(-rc));
		return rc;
	}
	struct bpf_program *p =
	        bpf_object__find_program_by_name(x->obj, "xdp_echo_port");
	uint32_t k = 0, v = htons(port);
	int pm = bpf_object__find_map_fd_by_name(x->obj, "port");
	if (!p || pm < 0 || bpf_map_update_elem(pm, &k, &v, 0))
		return fprintf(stderr, "xdp_echo: bad program\n"), -EINVAL;
	rc = bpf_xdp_attach(x->ifindex, bpf_program__fd(p),
	                    x->cfg->xdp_flags | XDP_FLAGS_UPDATE_IF_NOEXIST,
	                    NULL);
	if (rc) {
		fprintf(stderr, "xdp_echo: attach (%s) to %s: %s\n",
		        x->cfg->name, ifname, strerror(-rc));
		x->ifindex = -x->ifindex; /* nothing to detach */
	}
	return rc;
}

/* The umem, the socket on queue 0 in the xsks map, the fill ring
 * stocked: 0, or a negative errno (said on stderr). */
static int xs_socket(struct xs *x, const char *ifname)
{
	size_t sz = (size_t)NFRAMES * FRAME;
	x->area = mmap(NULL, sz, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (x->area == MAP_FAILED) {
		x->area = NULL;
		return -ENOMEM;
	}
	struct xsk_umem_config uc = {
	        .fill_size = RING, .comp_size = RING, .frame_size = FRAME};
	int rc = xsk_umem__create(&x->umem, x->area, sz, &x->fill, &x->comp,
	                          &uc);
	if (rc)
		return fprintf(stderr, "xdp_echo: umem: %s\n", strerror(-rc)),
		       rc;
	struct xsk_socket_config sc = {
	        .rx_size = RING,
	        .tx_size = RING,
	        .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
	        .xdp_flags = x->cfg->xdp_flags,
	        .bind_flags =
	                XDP_COPY | (x->cfg->wakeup ? XDP_USE_NEED_WAKEUP : 0)};
	/* The last socket on the queue leaves it in a deferred work item:
	 * until then binding says EBUSY. */
	for (int i = 0; i < 200; i++) {
		rc = xsk_socket__create(&x->xsk, ifname, 0, x->umem, &x->rx,
		                        &x->tx, &sc);
		if (rc != -EBUSY)
			break;
		nanosleep(&(struct timespec){0, 10000000}, NULL);
	}
	if (rc)
		return fprintf(stderr, "xdp_echo: socket (%s): %s\n",
		               x->cfg->name, strerror(-rc)),
		       rc;
	x->fd = xsk_socket__fd(x->xsk);
	int xm = bpf_object__find_map_fd_by_name(x->obj, "xsks");
	if ((rc = xsk_socket__update_xskmap(x->xsk, xm)))
		return fprintf(stderr, "xdp_echo: xskmap: %s\n", strerror(-rc)),
		       rc;
	uint32_t idx;
	if (xsk_ring_prod__reserve(&x->fill, NFRAMES / 2, &idx) != NFRAMES / 2)
		return -ENOSPC;
	for (unsigned i = 0; i < NFRAMES / 2; i++)
		*xsk_ring_prod__fill_addr(&x->fill, idx + i) =
		        (uint64_t)i * FRAME;
	xsk_ring_prod__submit(&x->fill, NFRAMES / 2);
	for (unsigned i = 0; i < NFRAMES / 2; i++)
		x->pool[i] = (uint64_t)(NFRAMES / 2 + i) * FRAME;
	x->npool = NFRAMES / 2;
	return 0;
}

/* Busy polling asked of the socket (W_BUSY): a recvfrom or sendto on
 * it then polls the queue's NAPI instead of waiting for the softirq. */
static int xs_busy(struct xs *x)
{
	int one = 1, us = 20, budget = BATCH;
	if ((getenv("XDP_ECHO_PREFER") &&
	     setsockopt(x->fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one,
	                sizeof(one))) ||
	    setsockopt(x->fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) ||
	    setsockopt(x->fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget,
	               sizeof(budget))) {
		int e = errno;
		fprintf(stderr, "xdp_echo: busy poll: %s\n", strerror(e));
		return -e;
	}
	return 0;
}

/* The socket's drop counters, said on stderr when any is not 0: where
 * lost requests went. */
static void xs_stats(const struct xs *x, const char *who)
{
	struct xdp_statistics st = {0};
	socklen_t len = sizeof(st);
	if (!x->fd || getsockopt(x->fd, SOL_XDP, XDP_STATISTICS, &st, &len))
		return;
	if (st.rx_dropped || st.rx_invalid_descs || st.tx_invalid_descs ||
	    st.rx_ring_full || st.rx_fill_ring_empty_descs)
		fprintf(stderr,
		        "xdp_echo: %s (%s): rx dropped %llu, invalid %llu, "
		        "ring full %llu, fill empty %llu; tx invalid %llu\n",
		        who, x->cfg->name, (unsigned long long)st.rx_dropped,
		        (unsigned long long)st.rx_invalid_descs,
		        (unsigned long long)st.rx_ring_full,
		        (unsigned long long)st.rx_fill_ring_empty_descs,
		        (unsigned long long)st.tx_invalid_descs);
}

static void xs_close(struct xs *x)
{
	if (x->xsk)
		xsk_socket__delete(x->xsk);
	if (x->umem)
		xsk_umem__delete(x->umem);
	if (x->area)
		munmap(x->area, (size_t)NFRAMES * FRAME);
	if (x->ifindex > 0)
		bpf_xdp_detach(x->ifindex, x->cfg->xdp_flags, NULL);
	if (x->obj)
		bpf_object__close(x->obj);
	memset(x, 0, sizeof(*x));
}

static int xs_open(struct xs *x, const struct cfg *c, uint16_t port)
{
	const char *ifname = iface();
	memset(x, 0, sizeof(*x));
	x->cfg = c;
	int rc = xs_attach(x, ifname, port);
	if (!rc)
		rc = xs_socket(x, ifname);
	if (!rc && c->wait == W_BUSY)
		rc = xs_busy(x);
	if (rc)
		xs_close(x);
	return rc;
}

/* Copy mode transmits only in a system call: sendto, unless need_wakeup
 * is on and the kernel says it is not needed. */
static void xs_kick(struct xs *x)
{
	if (!x->cfg->wakeup || xsk_ring_prod__needs_wakeup(&x->tx))
		(void)sendto(x->fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
}

/* Sent frames back: to the fill ring (@to_fill: the server answers in
 * the request's frame) or to the tx pool. */
static void xs_reap(struct xs *x, bool to_fill)
{
	uint32_t ci, fi = 0;
	uint32_t n = xsk_ring_cons__peek(&x->comp, RING, &ci);
	if (!n)
		return;
	/* The fill ring holds every rx frame: reserving never fails. */
	if (to_fill && xsk_ring_prod__reserve(&x->fill, n, &fi) != n)
		return xsk_ring_cons__cancel(&x->comp, n);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t a = *xsk_ring_cons__comp_addr(&x->comp, ci + i);
		if (to_fill)
			*xsk_ring_prod__fill_addr(&x->fill, fi + i) = a;
		else
			x->pool[x->npool++] = a;
	}
	if (to_fill)
		xsk_ring_prod__submit(&x->fill, n);
	xsk_ring_cons__release(&x->comp, n);
}

/* Frames submitted that the kernel has not taken yet: a sendto that
 * found veth busy (EAGAIN) left them on the ring, and only another
 * sendto sends them. */
static bool xs_tx_pending(const struct xs *x)
{
	/* pairs with the kernel's release of the consumer index */
	return __atomic_load_n(x->tx.consumer, __ATOMIC_ACQUIRE) !=
	       *x->tx.producer;
}

/* Nothing received: sleep in poll (up to @ms) or busy-poll once; first
 * the frames left on the tx ring sent. */
static void xs_idle(struct xs *x, int ms)
{
	if (xs_tx_pending(x)) {
		(void)sendto(x->fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
		return;
	}
	if (x->cfg->wait == W_BUSY) {
		(void)recvfrom(x->fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
		return;
	}
	struct pollfd p = {.fd = x->fd, .events = POLLIN};
	(void)poll(&p, 1, ms);
}

/* ---- the server -------------------------------------------------------------
 */

static volatile sig_atomic_t g_stop;

static void on_term(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* Answer @n received frames in place: addresses and ports swapped (the
 * IPv4 checksum is unchanged by a swap; UDP's is 0, none). */
static void srv_answer(struct xs *x, uint32_t ri, uint32_t n)
{
	uint32_t ti;
	while (xsk_ring_prod__reserve(&x->tx, n, &ti) != n) {
		xs_kick(x);
		xs_reap(x, true);
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *d =
		        xsk_ring_cons__rx_desc(&x->rx, ri + i);
		unsigned char *f = xsk_umem__get_data(x->area, d->addr);
		unsigned char mac[6];
		memcpy(mac, f, 6);
		memcpy(f, f + 6, 6);
		memcpy(f + 6, mac, 6);
		struct iphdr *ip = (struct iphdr *)(f + 14);
		uint32_t a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		struct udphdr *u = (struct udphdr *)(ip + 1);
		uint16_t p = u->source;
		u->source = u->dest;
		u->dest = p;
		*xsk_ring_prod__tx_desc(&x->tx, ti + i) =
		        (struct xdp_desc){.addr = d->addr, .len = d->len};
	}
	xsk_ring_prod__submit(&x->tx, n);
	xsk_ring_cons__release(&x->rx, n);
	xs_kick(x);
}

/* In machine 0's namespace: the socket, then its MAC (or an error) on
 * @wfd, then echo until SIGTERM; the program detached on the way out. */
static void server(const struct cfg *c, int wfd)
{
	struct xs x;
	char mac[32] = "";
	signal(SIGTERM, on_term);
	if (bnet_enter_machine(0) || if_mac(iface(), mac, sizeof(mac)) ||
	    xs_open(&x, c, SRV_PORT)) {
		(void)!write(wfd, "error\n", 6);
		_exit(1);
	}
	(void)!write(wfd, mac, strlen(mac));
	close(wfd);
	while (!g_stop) {
		uint32_t ri, n = xsk_ring_cons__peek(&x.rx, BATCH, &ri);
		if (n)
			srv_answer(&x, ri, n);
		xs_reap(&x, true);
		if (!n)
			xs_idle(&x, 100);
	}
	xs_stats(&x, "server");
	xs_close(&x);
	_exit(0);
}

/* ---- the client -------------------------------------------------------------
 */

struct res {
	double rps, cpu_client_s, wall_s;
	uint64_t p50_ns, p99_ns, lost;
};

struct slot {
	uint64_t seq, at; /* at 0: free */
};

static uint16_t ip_csum(const void *p, size_t n)
{
	const uint16_t *w = p;
	uint32_t s = 0;
	for (size_t i = 0; i < n / 2; i++)
		s += w[i];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* The request's headers: client @cmac/@cip to server @smac/@sip. */
static void frame_template(unsigned char *t, const unsigned char *cmac,
                           const unsigned char *smac, const char *cip,
                           const char *sip)
{
	memset(t, 0, HDR + MSG);
	memcpy(t, smac, 6);
	memcpy(t + 6, cmac, 6);
	t[12] = 0x08; /* ETH_P_IP */
	struct iphdr *ip = (struct iphdr *)(t + 14);
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(20 + 8 + MSG);
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	inet_pton(AF_INET, cip, &ip->saddr);
	inet_pton(AF_INET, sip, &ip->daddr);
	ip->check = ip_csum(ip, 20);
	struct udphdr *u = (struct udphdr *)(ip + 1);
	u->source = htons(CLI_PORT);
	u->dest = htons(SRV_PORT);
	u->len = htons(8 + MSG);
}

struct cli {
	struct xs x;
	unsigned char tmpl[HDR + MSG];
	struct slot sl[MAXW];
	uint64_t seq;
	unsigned out;
};

/* Up to @k requests more in flight (as many as the tx pool allows). */
static void cli_send(struct cli *c, unsigned k)
{
	uint32_t ti;
	xs_reap(&c->x, false);
	k = k < c->x.npool ? k : c->x.npool;
	if (!k || xsk_ring_prod__reserve(&c->x.tx, k, &ti) != k)
		return;
	for (unsigned i = 0; i < k; i++) {
		uint64_t a = c->x.pool[--c->x.npool], s = c->seq++;
		unsigned char *f = xsk_umem__get_data(c->x.area, a);
		memcpy(f, c->tmpl, sizeof(c->tmpl));
		memcpy(f + HDR, &s, sizeof(s));
		c->sl[s % MAXW] = (struct slot){s, now_ns()};
		*xsk_ring_prod__tx_desc(&c->x.tx, ti + i) =
		        (struct xdp_desc){.addr = a, .len = sizeof(c->tmpl)};
	}
	xsk_ring_prod__submit(&c->x.tx, k);
	c->out += k;
	xs_kick(&c->x);
}

/* Answers received: their slots freed, latencies kept with one in flight;
 * the frames back to the fill ring. The number of answers. */
static unsigned cli_recv(struct cli *c, unsigned w, uint64_t *lat,
                         uint64_t *nlat)
{
	uint32_t ri, fi, got = 0;
	uint32_t n = xsk_ring_cons__peek(&c->x.rx, BATCH, &ri);
	if (!n)
		return 0;
	uint64_t t = now_ns();
	while (xsk_ring_prod__reserve(&c->x.fill, n, &fi) != n)
		; /* the fill ring holds every rx frame: never taken */
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *d =
		        xsk_ring_cons__rx_desc(&c->x.rx, ri + i);
		uint64_t s;
		memcpy(&s, (char *)xsk_umem__get_data(c->x.area, d->addr) + HDR,
		       sizeof(s));
		*xsk_ring_prod__fill_addr(&c->x.fill, fi + i) = d->addr;
		struct slot *q = &c->sl[s % MAXW];
		if (d->len < HDR + sizeof(s) || !q->at || q->seq != s)
			continue; /* already taken as lost */
		if (w == 1 && *nlat < (1u << 20))
			lat[(*nlat)++] = t - q->at;
		q->at = 0;
		c->out--;
		got++;
	}
	xsk_ring_prod__submit(&c->x.fill, n);
	xsk_ring_cons__release(&c->x.rx, n);
	return got;
}

/* As net_bench: a request unanswered for 5 ms is lost and replaced. */
static void cli_expire(struct cli *c, uint64_t *lost)
{
	uint64_t t = now_ns();
	for (unsigned i = 0; i < MAXW; i++) {
		if (c->sl[i].at && t - c->sl[i].at > 5000000) {
			c->sl[i].at = 0;
			(*lost)++;
			c->out--;
		}
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* @w requests in flight for @secs over the open socket. */
static void cli_run(struct cli *c, unsigned w, double secs, struct res *r)
{
	static uint64_t lat[1 << 20];
	uint64_t nlat = 0, done = 0;
	memset(c->sl, 0, sizeof(c->sl));
	c->out = 0;
	*r = (struct res){0};
	uint64_t c0 = cpu_ns(), t0 = now_ns();
	uint64_t end = t0 + (uint64_t)(secs * 1e9), tick = 0;
	while (now_ns() < end) {
		if (c->out < w)
			cli_send(c, w - c->out);
		unsigned got = cli_recv(c, w, lat, &nlat);
		done += got;
		if (!got)
			xs_idle(&c->x, 1);
		if ((++tick & 63) == 0 || !got)
			cli_expire(c, &r->lost);
	}
	r->wall_s = (double)(now_ns() - t0) / 1e9;
	r->cpu_client_s = (double)(cpu_ns() - c0) / 1e9;
	r->rps = (double)done / r->wall_s;
	if (nlat) {
		qsort(lat, nlat, sizeof(lat[0]), cmp_u64);
		r->p50_ns = lat[nlat / 2];
		r->p99_ns = lat[nlat * 99 / 100];
	}
}

static int parse_mac(const char *s, unsigned char *m)
{
	unsigned v[6];
	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4],
	           &v[5]) != 6)
		return -EINVAL;
	for (int i = 0; i < 6; i++)
		m[i] = (unsigned char)v[i];
	return 0;
}

/* The client's side, in machine 1's namespace, once the server said its
 * MAC: the socket, a 0.1 s warm-up, then the window's run. */
static int cli_measure(const struct cfg *cf, const char *smac_s, unsigned w,
                       pid_t srv, struct res *r, double *cpu_srv)
{
	static struct cli c;
	unsigned char smac[6], cmac[6];
	char mac[32] = "", sip[64], cip[64];
	if (if_mac(iface(), mac, sizeof(mac)) || parse_mac(mac, cmac) ||
	    parse_mac(smac_s, smac) || bnet_addr(0, sip, sizeof(sip)) ||
	    bnet_addr(1, cip, sizeof(cip)))
		return -EINVAL;
	frame_template(c.tmpl, cmac, smac, cip, sip);
	int rc = xs_open(&c.x, cf, CLI_PORT);
	if (rc)
		return rc;
	struct res warm;
	cli_run(&c, w, 0.1, &warm);
	double s0 = proc_cpu_s(srv);
	cli_run(&c, w, g_opt.seconds, r);
	*cpu_srv = proc_cpu_s(srv) - s0;
	xs_stats(&c.x, "client");
	xs_close(&c.x);
	return 0;
}

/* One AF_XDP measurement: the server forked into machine 0's namespace,
 * the client here in machine 1's; *@cpu_srv: the server's CPU during
 * the run. 0, or a negative errno. */
static int xdp_run(const struct cfg *cf, unsigned w, struct res *r,
                   double *cpu_srv)
{
	int p[2];
	if (pipe(p))
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		server(cf, p[1]);
	}
	close(p[1]);
	char smac[64] = "";
	ssize_t n = pid > 0 ? read(p[0], smac, sizeof(smac) - 1) : -1;
	close(p[0]);
	int rc = -EIO;
	if (n > 0 && strncmp(smac, "error", 5) != 0 &&
	    bnet_enter_machine(1) == 0) {
		rc = cli_measure(cf, smac, w, pid, r, cpu_srv);
	}
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	return rc;
}

/* ---- the comparison -----------------------------------------------------------
 */

/* One window's figures. */
struct fig {
	double rps, per_core, p50_us, p99_us, lost;
	double softirq; /* ksoftirqd's CPU share during the row's runs */
};

/* Rows: [0] the UDP echo, [1..NCFG] the AF_XDP configurations; each
 * round's figures at 1 in flight and at --window. */
#define MAXR 16
static struct fig g_f1[NCFG + 1][MAXR], g_fw[NCFG + 1][MAXR];
static char self_dir[512];

static double jnum(const char *s, const char *key)
{
	char k[128];
	snprintf(k, sizeof(k), "\"%s\": ", key);
	const char *p = strstr(s, k);
	return p ? strtod(p + strlen(k), NULL) : -1;
}

/* net_bench's UDP echo, as it runs (its ECHO line read back). */
static int udp_round(unsigned r)
{
	char cmd[1024], line[1024], ok = 0;
	snprintf(cmd, sizeof(cmd),
	         "%s/net_bench --phase echo --seconds %g --window %u 2>&1",
	         self_dir, g_opt.seconds, g_opt.window);
	double k0 = ksoftirqd_s(), t0 = (double)now_ns() / 1e9;
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		if (strncmp(line, "ECHO ", 5) != 0) {
			fputs(line, stderr);
			continue;
		}
		ok = 1;
		g_f1[0][r] = (struct fig){
		        jnum(line, "rps1"),         jnum(line, "per_core1"),
		        jnum(line, "p50_ns") / 1e3, jnum(line, "p99_ns") / 1e3,
		        jnum(line, "lost"),         0};
		g_fw[0][r] = (struct fig){jnum(line, "rpsw"),
		                          jnum(line, "per_corew"),
		                          0,
		                          0,
		                          0,
		                          0};
	}
	int st = pclose(p);
	g_f1[0][r].softirq =
	        (ksoftirqd_s() - k0) / ((double)now_ns() / 1e9 - t0);
	return st == 0 && ok ? 0 : -1;
}

static int xdp_round(unsigned r, unsigned i)
{
	const struct cfg *c = &g_cfgs[i];
	struct res a, b;
	double s1 = 0, sw = 0;
	double k0 = ksoftirqd_s(), t0 = (double)now_ns() / 1e9;
	int rc = xdp_run(c, 1, &a, &s1);
	if (!rc)
		rc = xdp_run(c, g_opt.window, &b, &sw);
	if (rc)
		return rc;
	g_f1[1 + i][r] = (struct fig){a.rps,
	                              a.rps * a.wall_s / (a.cpu_client_s + s1),
	                              (double)a.p50_ns / 1e3,
	                              (double)a.p99_ns / 1e3,
	                              (double)a.lost,
	                              0};
	g_fw[1 + i][r] = (struct fig){b.rps,
	                              b.rps * b.wall_s / (b.cpu_client_s + sw),
	                              0,
	                              0,
	                              (double)b.lost,
	                              0};
	g_f1[1 + i][r].softirq =
	        (ksoftirqd_s() - k0) / ((double)now_ns() / 1e9 - t0);
	return 0;
}

static const char *row_name(unsigned i)
{
	return i ? g_cfgs[i - 1].name : "udp (net_bench echo)";
}

static void print_row(unsigned i, unsigned r)
{
	const struct fig *a = &g_f1[i][r], *b = &g_fw[i][r];
	printf("round %u %-20s 1: %7.0f req/s p50 %6.1f us p99 %7.1f us "
	       "%7.0f /core | %u: %7.0f req/s %7.0f /core %.2f us | lost %.0f "
	       "ksoftirqd %.0f%%\n",
	       r + 1, row_name(i), a->rps, a->p50_us, a->p99_us, a->per_core,
	       g_opt.window, b->rps, b->per_core,
	       b->per_core > 0 ? 1e6 / b->per_core : 0, a->lost + b->lost,
	       100 * a->softirq);
}

/* The median over the rounds of field @off of row @i's figures. */
static double median(const struct fig (*f)[MAXR], unsigned i, size_t off,
                     unsigned n)
{
	double v[MAXR] = {0};
	for (unsigned r = 0; r < n; r++)
		memcpy(&v[r], (const char *)&f[i][r] + off, sizeof(double));
	for (unsigned a = 1; a < n; a++)
		for (unsigned b = a; b > 0 && v[b - 1] > v[b]; b--) {
			double t = v[b];
			v[b] = v[b - 1];
			v[b - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MED(f, i, field) median(f, i, offsetof(struct fig, field), n)

/* KV lookups per busy core that echo rate @pc allows: half the lookups
 * are local (about 1 us, kv_bench's own-shard row), half a remote
 * request, and nothing else counted: an upper bound. */
static double lookups_bound(double pc)
{
	return pc > 0 ? 1e9 / ((1e9 / pc + 1000.0) / 2) : 0;
}

static void summary(unsigned n, double load)
{
	unsigned best = 1;
	printf("\nmedians over %u rounds (load %.1f at the start):\n", n, load);
	for (unsigned i = 0; i <= NCFG; i++) {
		if (i && MED(g_f1, i, rps) == 0 && MED(g_fw, i, rps) == 0)
			continue; /* not run (--only), or failed */
		printf("%-22s 1 in flight %8.0f req/s p50 %6.1f us %8.0f "
		       "/core; "
		       "%u in flight %8.0f req/s %8.0f /core (%.2fx udp)\n",
		       row_name(i), MED(g_f1, i, rps), MED(g_f1, i, p50_us),
		       MED(g_f1, i, per_core), g_opt.window, MED(g_fw, i, rps),
		       MED(g_fw, i, per_core),
		       MED(g_fw, i, per_core) / MED(g_fw, 0, per_core));
		if (i && MED(g_fw, i, per_core) > MED(g_fw, best, per_core))
			best = i;
	}
	double u = MED(g_fw, 0, per_core), x = MED(g_fw, best, per_core);
	double lb = lookups_bound(x);
	printf("best AF_XDP (%s): %.2fx the UDP echo per busy core; KV "
	       "lookups per busy core at most %.0f: %.2fx memcached's best "
	       "(%.0f per core; the goal is 2x)\n",
	       row_name(best), x / u, lb, lb / g_opt.memcached,
	       g_opt.memcached);
	printf("{\"bench\": \"xdp_echo\", \"load_avg\": %.2f, \"rounds\": %u, "
	       "\"window\": %u, \"udp_per_core\": %.0f, \"udp_p50_us\": %.1f, "
	       "\"xdp_best\": \"%s\", \"xdp_per_core\": %.0f, "
	       "\"xdp_p50_us\": %.1f, \"lookups_bound_udp\": %.0f, "
	       "\"lookups_bound_xdp\": %.0f, \"memcached_per_core\": %.0f, "
	       "\"goals\": {",
	       load, n, g_opt.window, u, MED(g_f1, 0, p50_us), row_name(best),
	       x, MED(g_f1, best, p50_us), lookups_bound(u), lb,
	       g_opt.memcached);
	printf("\"xdp_echo_per_core_vs_udp_echo\": {\"value\": %.4g, "
	       "\"target\": 1, \"met\": %s}, ",
	       x / u, x > u ? "true" : "false");
	printf("\"xdp_lookups_bound_vs_memcached_best\": {\"value\": %.4g, "
	       "\"target\": 2, \"met\": %s}}}\n",
	       lb / g_opt.memcached,
	       lb >= 2 * g_opt.memcached ? "true" : "false");
}

/* Under netns-cluster: the rounds, each the UDP echo then every AF_XDP
 * configuration. */
static int compare(void)
{
	double load = 0;
	getloadavg(&load, 1);
	unsigned n = 0, ran = 0;
	int bad = 0;
	for (unsigned r = 0; r < g_opt.rounds; r++, n++) {
		if (udp_round(r)) {
			fprintf(stderr, "xdp_echo: net_bench's echo failed\n");
			return 1;
		}
		print_row(0, r);
		for (unsigned i = 0; i < NCFG; i++) {
			if (g_opt.only && !strstr(g_cfgs[i].name, g_opt.only))
				continue;
			int rc = xdp_round(r, i);
			if (rc) {
				fprintf(stderr, "xdp_echo: %s: %s\n",
				        g_cfgs[i].name, strerror(-rc));
				bad = 1;
				continue;
			}
			print_row(1 + i, r);
			ran++;
		}
		/* No configuration ran at all: no AF_XDP here (a kernel
		 * without XDP sockets, no BPF): skipped, the reasons above. */
		if (!ran) {
			fprintf(stderr, "xdp_echo: skipped: AF_XDP does not "
			                "work here (above)\n");
			return 77;
		}
	}
	summary(n, load);
	return bad;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: xdp_echo [OPTIONS]\n"
	        "\n"
	        "A 64 B UDP echo over AF_XDP sockets (copy mode, native and\n"
	        "generic XDP, with and without need_wakeup, sleeping or\n"
	        "busy-polling) against net_bench's kernel UDP echo, "
	        "alternated\n"
	        "in one run across two network namespaces (root; it runs\n"
	        "itself under scripts/netns-cluster). Prints each round, the\n"
	        "medians, then one JSON line (last).\n"
	        "\n"
	        "  --seconds S    each measurement's length (default 2)\n"
	        "  --window W     requests in flight, the rate runs (default "
	        "32)\n"
	        "  --rounds N     rounds, each every row once (default 3)\n"
	        "  --memcached R  memcached's best GETs per server core, for\n"
	        "                 the KV bound (default 558000)\n"
	        "  --only TEXT    only the AF_XDP rows whose name holds TEXT\n"
	        "                 (e.g. \"skb poll\"; the UDP echo always "
	        "runs)\n"
	        "  -h, --help     this text\n");
}

static int parse(int argc, char **argv)
{
	static const struct option lo[] = {
	        {"seconds", required_argument, NULL, 's'},
	        {"window", required_argument, NULL, 'w'},
	        {"rounds", required_argument, NULL, 'r'},
	        {"memcached", required_argument, NULL, 'm'},
	        {"only", required_argument, NULL, 'o'},
	        {"help", no_argument, NULL, 'h'},
	        {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		char *end = NULL;
		switch (c) {
		case 's': g_opt.seconds = strtod(optarg, &end); break;
		case 'w':
			g_opt.window = (unsigned)strtoul(optarg, &end, 10);
			break;
		case 'r':
			g_opt.rounds = (unsigned)strtoul(optarg, &end, 10);
			break;
		case 'm': g_opt.memcached = strtod(optarg, &end); break;
		case 'o':
			g_opt.only = optarg;
			end = optarg + strlen(optarg);
			break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
		if (*end)
			return -1;
	}
	if (!(g_opt.seconds >= 0.1 && g_opt.seconds <= 60) ||
	    g_opt.window < 1 || g_opt.window > MAXW || g_opt.rounds < 1 ||
	    g_opt.rounds > MAXR || !(g_opt.memcached > 0))
		return -1;
	bool any = !g_opt.only;
	for (unsigned i = 0; i < NCFG && !any; i++)
		any = strstr(g_cfgs[i].name, g_opt.only) != NULL;
	if (!any)
		return -1; /* --only names no row */
	return optind == argc ? 0 : -1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (parse(argc, argv)) {
		usage(stderr);
		return 2;
	}
	ssize_t n = readlink("/proc/self/exe", self_dir, sizeof(self_dir) - 1);
	if (n <= 0)
		return 1;
	self_dir[n] = 0;
	if (bnet_machines() >= 2) {
		*strrchr(self_dir, '/') = 0;
		return compare();
	}
	if (geteuid() != 0) {
		fprintf(stderr, "xdp_echo: skipped: needs root (network "
		                "namespaces, XDP programs)\n");
		return 77;
	}
	/* Once more, inside two fresh namespaces. */
	char *av[64];
	if (argc > 56)
		return usage(stderr), 2;
	int k = 0;
	av[k++] = FARM_SOURCE_DIR "/scripts/netns-cluster";
	av[k++] = "run";
	av[k++] = "--net-only";
	av[k++] = "--machines";
	av[k++] = "2";
	av[k++] = "--";
	av[k++] = self_dir;
	for (int i = 1; i < argc; i++)
		av[k++] = argv[i];
	av[k] = NULL;
	execv(av[0], av);
	perror("xdp_echo: netns-cluster");
	return 1;
}
