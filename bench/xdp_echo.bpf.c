/*
 * xdp_echo's XDP program (compiled with clang -target bpf at build time):
 * IPv4 UDP datagrams to the one port in `port` go to the AF_XDP socket of
 * their receive queue; everything else (ARP, TCP, other ports) passes to
 * the kernel's stack, so the namespace's own traffic is untouched.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* Key 0: the UDP port (network order) redirected to the socket. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} port SEC(".maps");

SEC("xdp")
int xdp_echo_port(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	__u32 k = 0;
	__u32 *p = bpf_map_lookup_elem(&port, &k);
	if (!p || udp->dest != (__u16)*p)
		return XDP_PASS;
	/* No socket on this queue: the kernel gets it (XDP_PASS). */
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
