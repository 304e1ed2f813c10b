/*
 * Bad input over the network to a machine on the ofi provider.
 * The target is a forked machine: its fabric, a 1 MiB region holding a
 * known pattern (its last 4 KiB a scratch area peers may write), served by
 * the provider's progress thread while the machine's own thread sits in
 * read(2). Peers that bypass libfarm attack it:
 *   tcp      plain TCP connections to its libfabric port: random bytes,
 *            bytes of all ones (a header claiming huge sizes), and one
 *            connection left open and silent until the end;
 *   control  messages of every wrong shape sent to its RDM endpoint with
 *            fi_send: too short, bad magic, bad type, HELLO with an
 *            unparsable reply address, NOTIFY with an unknown key, outside
 *            the region, misaligned; then the HELLO of a peer at an address
 *            where nobody listens (its ACK once kept the target's progress
 *            thread busy for minutes: it is now deferred); then, from a
 *            second attacker, messages too long (truncated at the target,
 *            one large enough for ofi_rxm's rendezvous);
 *   rma      fi_read, fi_write and fi_atomic (libfabric's own calls, no
 *            libfarm check before them) with an unregistered key, past the
 *            region's end, before its start, with an address + length that
 *            wraps, and writes to the registration table (read-only).
 * A raw RMA must never succeed: it completes with an error, or tcp;ofi_rxm
 * drops the attacker's connection and the request never completes (no
 * status reaches the attacker: what libfabric does, README.md "ofi").
 * Through libfarm the same requests fail at the initiator with
 * FARM_EREMOTE_KEY / FARM_EREMOTE_ACCESS (farm phase).
 * After every phase a fresh, well-behaved peer READs the whole region and
 * finds the pattern, WRITEs the scratch area and reads it back; at the end
 * the target finds its own memory intact (pattern, plus what the good
 * peers wrote) and has counted the control messages it refused.
 * Under scripts/netns-cluster (netns.h) the target, the good peers and the
 * attacker run in three namespaces (machines 0, 1, 2): the attacks cross
 * the veth links. Otherwise everything is on loopback.
 */
#include "netns.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric/ofi_int.h"
#include "fabric/ofi_testing.h"

#define RSIZE      (1u << 20)
#define SCRATCH    4096u /* the region's last bytes: the good peers' */
#define RAW_WAIT_S 3     /* how long an attacker waits for a status */

enum { T_TARGET = 0, T_GOOD = 1, T_BAD = 2 }; /* namespace per role */

/* ---- shared -------------------------------------------------------------- */

static uint8_t pat(size_t i)
{
	return (uint8_t)(i * 131u + (i >> 12) * 7u + 0x5a);
}

/* The listen address of a process of role @role: its namespace's address
 * across namespaces, else loopback; port 0 (any). */
static void listen_of(unsigned role, char *buf, size_t len)
{
	char ip[64];
	if (tn_active() && tn_addr(role, ip, sizeof(ip)) == 0)
		snprintf(buf, len, "%s:0", ip);
	else
		snprintf(buf, len, "127.0.0.1:0");
}

static farm_fabric *open_fab(unsigned role, uint32_t id, const char *dir)
{
	char listen[96];
	listen_of(role, listen, sizeof(listen));
	farm_fabric_attr a = {.provider = "ofi",
	                      .machine_id = id,
	                      .data_dir = dir,
	                      .listen_addr = listen};
	farm_fabric *f = NULL;
	int rc = farm_fabric_open(&a, &f);
	if (rc)
		fprintf(stderr, "farm_fabric_open(ofi, %s): %s\n", listen,
		        farm_strerror(rc));
	return f;
}

/* Fork a child in role @role's namespace running @fn(@arg); *@pid. */
static int spawn(unsigned role, int (*fn)(void *), void *arg, pid_t *pid)
{
	*pid = tu_fork();
	if (*pid < 0)
		return -errno;
	if (*pid == 0) {
		const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
		for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++)
			signal(sigs[k], SIG_DFL);
		if (tn_active() && tn_enter_machine(role))
			_exit(12);
		_exit(fn(arg));
	}
	return 0;
}

/* ---- the target ---------------------------------------------------------- */

struct target_info {
	char addr[128];
	farm_mr_desc desc;  /* the region */
	farm_mr_desc table; /* the registration table (entry 0) */
};

struct target_report {
	uint64_t changed; /* bytes outside the scratch area changed */
	uint64_t first;   /* the first of them */
	struct farm_ofi_stats st;
};

static int to_target[2], from_target[2];
/* The target's directory: the parent's, removed in the teardown even
 * when the target was killed. */
static char target_dir[256];

static int target_main(void *arg)
{
	(void)arg;
	close(to_target[1]);
	close(from_target[0]);
	const char *dir = target_dir;
	int st = 1;
	farm_fabric *f = open_fab(T_TARGET, 1, dir);
	farm_region *r = NULL;
	if (!f || farm_region_create(f, RSIZE, &r))
		goto out;
	uint8_t *b = farm_region_base(r);
	for (size_t i = 0; i < RSIZE; i++)
		b[i] = pat(i);
	struct target_info ti = {.desc = farm_region_desc(r)};
	if (farm_fabric_address(f, ti.addr, sizeof(ti.addr)) <= 0)
		goto out;
	struct ofi_fabric *of = (struct ofi_fabric *)f;
	if (of->table)
		ti.table = (farm_mr_desc){.key = of->table[0].key,
		                          .addr = of->table[0].addr,
		                          .len = of->table[0].len};
	if (tu_send(from_target[1], &ti, sizeof(ti)))
		goto out;
	/* Served by the progress thread; this thread waits for commands. */
	char cmd;
	while (tu_recv(to_target[0], &cmd, 1) == 0 && cmd == 'C') {
		struct target_report rep = {0};
		for (size_t i = 0; i < RSIZE - SCRATCH; i++)
			if (b[i] != pat(i) && !rep.changed++)
				rep.first = i;
		farm_ofi_stats(f, &rep.st);
		if (tu_send(from_target[1], &rep, sizeof(rep)))
			goto out;
	}
	st = 0;
out:
	farm_region_destroy(r);
	if (f)
		farm_fabric_close(f);
	return st;
}

/* ---- a well-behaved peer ------------------------------------------------- */

struct good_arg {
	const struct target_info *ti;
	bool farm_bad; /* also the bad requests through libfarm */
};

/* The good peer's fabric, its endpoint to the target and its buffer. */
struct good_peer {
	const struct target_info *ti;
	farm_fabric *f;
	farm_cq *cq;
	farm_ep *ep;
	farm_mr *lmr;
	uint8_t *buf;   /* 16 KiB */
	farm_mr_desc d; /* the target's region */
};

/* The whole region, 4 KiB at a time: the pattern. 0, or the step that
 * failed (11, 12). */
static int good_read_all(struct good_peer *g)
{
	for (size_t off = 0; off < RSIZE - SCRATCH; off += 4096) {
		if (tu_do(g->ep, g->cq,
		          farm_wr_read(1, g->buf, g->lmr, 4096, &g->d, off)))
			return 11;
		for (size_t i = 0; i < 4096; i++)
			if (g->buf[i] != pat(off + i)) {
				fprintf(stderr,
				        "good peer: byte %zu is %#x, not "
				        "%#x\n",
				        off + i, g->buf[i], pat(off + i));
				return 12;
			}
	}
	return 0;
}

/* The scratch area: WRITE, READ back. 0, or the step that failed (13,
 * 14). */
static int good_scratch(struct good_peer *g)
{
	uint8_t *buf = g->buf;
	uint64_t tag = farm_now_ns();
	for (unsigned i = 0; i < 512; i++)
		memcpy(buf + 8 * i, &(uint64_t){tag + i}, 8);
	if (tu_do(g->ep, g->cq,
	          farm_wr_write(2, buf, g->lmr, 4096, &g->d,
	                        RSIZE - SCRATCH)) ||
	    tu_do(g->ep, g->cq,
	          farm_wr_read(3, buf + 8192, g->lmr, 4096, &g->d,
	                       RSIZE - SCRATCH)))
		return 13;
	if (memcmp(buf, buf + 8192, 4096))
		return 14;
	return 0;
}

/* The bad requests through libfarm: refused at the initiator, nothing
 * sent; the endpoint still works after. 0, or the step that failed (15,
 * 16). */
static int good_bad(struct good_peer *g)
{
	const farm_mr_desc d = g->d, td = g->ti->table;
	uint8_t *buf = g->buf;
	farm_mr *lmr = g->lmr;
	struct {
		farm_wr w;
		int want;
	} bad[6];
	bad[0].w = farm_wr_write(4, buf, lmr, 64, &d, RSIZE - 63);
	bad[0].want = FARM_EREMOTE_ACCESS; /* past the end */
	bad[1].w = farm_wr_read(5, buf, lmr, 64, &d, 0);
	bad[1].w.raddr = d.addr - 64; /* before the start */
	bad[1].want = FARM_EREMOTE_ACCESS;
	bad[2].w = bad[1].w;
	bad[2].w.raddr = UINT64_MAX - 10; /* wraps */
	bad[3].w = farm_wr_write(6, buf, lmr, 64, &d, 0);
	bad[3].w.rkey = d.key ^ (1ull << 40); /* unknown key */
	bad[3].want = FARM_EREMOTE_KEY;
	bad[4].w = farm_wr_write(7, buf, lmr, 8, &td, 0);
	bad[4].want = FARM_EREMOTE_ACCESS; /* the read-only table */
	bad[5].w = farm_wr_read(8, buf, lmr, 8, &td, td.len);
	bad[5].w.rkey = 0; /* key 0 */
	bad[5].want = FARM_EREMOTE_KEY;
	bad[2].want = FARM_EREMOTE_ACCESS;
	for (unsigned k = 0; k < 6; k++) {
		if (k >= 4 && !td.key)
			continue;
		/* A failed request leaves its endpoint in the error state
		 * (verbs semantics): a fresh one each. */
		farm_ep *e2 = NULL;
		int rc =
		        farm_ep_connect(g->f, g->cq, 1, g->ti->addr, NULL, &e2);
		if (!rc)
			rc = tu_do(e2, g->cq, bad[k].w);
		farm_ep_destroy(e2);
		if (rc != bad[k].want) {
			fprintf(stderr,
			        "good peer: bad request %u: %s, not %s\n", k,
			        farm_strerror(rc), farm_strerror(bad[k].want));
			return 15;
		}
	}
	/* The endpoint still works after the refusals. */
	if (tu_do(g->ep, g->cq, farm_wr_read(8, buf, lmr, 64, &d, 0)) ||
	    buf[0] != pat(0))
		return 16;
	return 0;
}

/* Its exit status: 0 all well; 10+ the step that failed. */
static int good_main(void *argp)
{
	struct good_arg *ga = argp;
	struct good_peer g = {.ti = ga->ti};
	char dir[256];
	tu_tmpdir(dir, sizeof(dir), "wire-g");
	int st = 10;
	g.f = open_fab(T_GOOD, 2, dir);
	g.buf = aligned_alloc(4096, 16384);
	if (!g.f || !g.buf || farm_cq_create(g.f, 64, 0, &g.cq) ||
	    farm_ep_connect(g.f, g.cq, 1, g.ti->addr, NULL, &g.ep) ||
	    farm_mr_reg(g.f, g.buf, 16384, FARM_ACCESS_LOCAL, &g.lmr))
		goto out;
	g.d = g.ti->desc;
	st = good_read_all(&g);
	if (!st)
		st = good_scratch(&g);
	if (!st && ga->farm_bad)
		st = good_bad(&g);
out:
	farm_ep_destroy(g.ep);
	if (g.cq && farm_cq_destroy(g.cq) && !st)
		st = 17;
	farm_mr_dereg(g.lmr);
	free(g.buf);
	if (g.f)
		farm_fabric_close(g.f);
	tu_rmtree(dir);
	return st;
}

/* ---- the attacker: libfabric without libfarm ----------------------------- */

struct raw {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *mr;
	void *desc;
	uint8_t *buf;
	fi_addr_t dest;
};

#define RAW_BUF (1u << 17)

static int raw_open(struct raw *r, const char *target)
{
	memset(r, 0, sizeof(*r));
	char listen[96];
	listen_of(T_BAD, listen, sizeof(listen));
	struct sockaddr_storage ss, ts;
	socklen_t sl, tl;
	if (farm_ofi_parse_addr(listen, &ss, &sl) ||
	    farm_ofi_parse_addr(target, &ts, &tl))
		return -EINVAL;
	struct fi_info *h = fi_allocinfo();
	h->caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_SEND |
	          FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE;
	h->ep_attr->type = FI_EP_RDM;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
	                          FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	h->addr_format = FI_SOCKADDR_IN;
	h->src_addr = malloc(sl);
	h->src_addrlen = sl;
	memcpy(h->src_addr, &ss, sl);
	h->fabric_attr->prov_name = strdup(OFI_DEFAULT_PROVIDER);
	int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &r->info);
	fi_freeinfo(h);
	if (rc)
		return rc;
	struct fi_av_attr ava = {.type = FI_AV_UNSPEC};
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_MSG,
	                         .wait_obj = FI_WAIT_NONE};
	r->buf = aligned_alloc(4096, RAW_BUF);
	if (!r->buf)
		return -ENOMEM;
	memset(r->buf, 0xa5, RAW_BUF);
	if ((rc = fi_fabric(r->info->fabric_attr, &r->fabric, NULL)) ||
	    (rc = fi_domain(r->fabric, r->info, &r->domain, NULL)) ||
	    (rc = fi_av_open(r->domain, &ava, &r->av, NULL)) ||
	    (rc = fi_cq_open(r->domain, &cqa, &r->cq, NULL)) ||
	    (rc = fi_endpoint(r->domain, r->info, &r->ep, NULL)) ||
	    (rc = fi_ep_bind(r->ep, &r->av->fid, 0)) ||
	    (rc = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_enable(r->ep)) ||
	    (rc = fi_mr_reg(r->domain, r->buf, RAW_BUF,
	                    FI_READ | FI_WRITE | FI_SEND | FI_RECV, 0, 0, 0,
	                    &r->mr, NULL)))
		return rc;
	r->desc = fi_mr_desc(r->mr);
	if (fi_av_insert(r->av, &ts, 1, &r->dest, 0, NULL) != 1)
		return -ECONNREFUSED;
	return 0;
}

/* Wait for one completion: 1 success, 0 none within RAW_WAIT_S, < 0 the
 * error it completed with (a negative libfabric errno). */
static int raw_wait(struct raw *r)
{
	uint64_t dl = farm_now_ns() + RAW_WAIT_S * 1000000000ull;
	while (farm_now_ns() < dl) {
		struct fi_cq_msg_entry e;
		ssize_t n = fi_cq_read(r->cq, &e, 1);
		if (n == 1)
			return 1;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry ee = {0};
			fi_cq_readerr(r->cq, &ee, 0);
			return -(ee.err ? ee.err : FI_EIO);
		}
		usleep(200);
	}
	return 0;
}

/* Post with retries while libfabric says EAGAIN (connecting). */
#define RAW_POST(r, call)                                                   \
	({                                                                  \
		ssize_t rc_;                                                \
		uint64_t dl_ = farm_now_ns() + RAW_WAIT_S * 1000000000ull;  \
		while ((rc_ = (call)) == -FI_EAGAIN && farm_now_ns() < dl_) \
			fi_cq_read((r)->cq, NULL, 0);                       \
		rc_;                                                        \
	})

enum {
	A_READ_BADKEY,
	A_WRITE_BADKEY,
	A_ATOMIC_BADKEY,
	A_READ_PAST_END,
	A_WRITE_PAST_END,
	A_WRITE_BEFORE,
	A_WRITE_WRAP,
	A_ATOMIC_PAST_END,
	A_WRITE_TABLE,
	A_ATOMIC_TABLE,
	A_N
};
static const char *const a_name[A_N] = {
        "READ, unregistered key",        "WRITE, unregistered key",
        "ATOMIC, unregistered key",      "READ past the region's end",
        "WRITE past the region's end",   "WRITE before the region",
        "WRITE, address + length wraps", "ATOMIC past the region's end",
        "WRITE to the read-only table",  "ATOMIC to the read-only table"};

/* One raw RMA attack: the attacker's exit status is what it saw: 0 an
 * error completion, 1 no status within RAW_WAIT_S, 2 a refusal at post,
 * 3 SUCCESS (never acceptable), 9 set-up failure. */
struct rma_arg {
	const struct target_info *ti;
	int kind;
};

static int rma_main(void *argp)
{
	struct rma_arg *a = argp;
	const struct target_info *ti = a->ti;
	struct raw r;
	if (raw_open(&r, ti->addr))
		return 9;
	uint64_t key = ti->desc.key, addr = ti->desc.addr;
	uint64_t end = ti->desc.addr + ti->desc.len;
	uint64_t bogus = 0x7777000ull | (1ull << 40);
	uint64_t *one = (uint64_t *)(void *)r.buf;
	*one = 0xdeadbeefdeadbeefull;
	ssize_t rc = 0;
	switch (a->kind) {
	case A_READ_BADKEY:
		rc = RAW_POST(&r, fi_read(r.ep, r.buf, 64, r.desc, r.dest, addr,
		                          bogus, NULL));
		break;
	case A_WRITE_BADKEY:
		rc = RAW_POST(&r, fi_write(r.ep, r.buf, 64, r.desc, r.dest,
		                           addr, bogus, NULL));
		break;
	case A_ATOMIC_BADKEY:
		rc = RAW_POST(&r, fi_atomic(r.ep, one, 1, r.desc, r.dest, addr,
		                            bogus, FI_UINT64, FI_ATOMIC_WRITE,
		                            NULL));
		break;
	case A_READ_PAST_END:
		rc = RAW_POST(&r, fi_read(r.ep, r.buf, 4096, r.desc, r.dest,
		                          end - 64, key, NULL));
		break;
	case A_WRITE_PAST_END:
		rc = RAW_POST(&r, fi_write(r.ep, r.buf, 65536, r.desc, r.dest,
		                           end - 4096, key, NULL));
		break;
	case A_WRITE_BEFORE:
		rc = RAW_POST(&r, fi_write(r.ep, r.buf, 4096, r.desc, r.dest,
		                           addr - 2048, key, NULL));
		break;
	case A_WRITE_WRAP:
		rc = RAW_POST(&r, fi_write(r.ep, r.buf, 4096, r.desc, r.dest,
		                           UINT64_MAX - 1000, key, NULL));
		break;
	case A_ATOMIC_PAST_END:
		rc = RAW_POST(&r,
		              fi_atomic(r.ep, one, 1, r.desc, r.dest, end, key,
		                        FI_UINT64, FI_ATOMIC_WRITE, NULL));
		break;
	case A_WRITE_TABLE:
		if (!ti->table.key)
			return 0; /* no table: nothing to attack */
		rc = RAW_POST(&r,
		              fi_write(r.ep, r.buf, 64, r.desc, r.dest,
		                       ti->table.addr, ti->table.key, NULL));
		break;
	case A_ATOMIC_TABLE:
		if (!ti->table.key)
			return 0;
		rc = RAW_POST(&r, fi_atomic(r.ep, one, 1, r.desc, r.dest,
		                            ti->table.addr, ti->table.key,
		                            FI_UINT64, FI_ATOMIC_WRITE, NULL));
		break;
	}
	if (rc)
		return 2;
	int w = raw_wait(&r);
	return w < 0 ? 0 : w == 0 ? 1 : 3;
}

/* Send @len bytes of r->buf; a sent one adds @counts to *@counted. */
static void ctrl_send(struct raw *r, size_t len, int counts, int *sent,
                      int *counted)
{
	if (RAW_POST(r, fi_send(r->ep, r->buf, len, r->desc, r->dest, NULL)))
		return;
	(*sent)++;
	*counted += counts;
	int w = raw_wait(r);
	if (getenv("WIRE_DEBUG"))
		fprintf(stderr, "control: %zu bytes sent: %d\n", len, w);
}

/* Control messages of every wrong shape; the exit status is the number
 * the target must count as malformed (it cannot tell the others apart
 * from a peer that went away), or 99 for a set-up failure. */
static int ctrl_main(void *argp)
{
	const struct target_info *ti = argp;
	struct raw r;
	if (raw_open(&r, ti->addr))
		return 99;
	uint64_t rng = farm_now_ns();
	for (unsigned i = 0; i < RAW_BUF / 8; i++)
		((uint64_t *)(void *)r.buf)[i] = farm_rand64(&rng);
	struct ofi_ctrl *m = (struct ofi_ctrl *)(void *)r.buf;
	int counted = 0, sent = 0;
	ctrl_send(&r, 1, 1, &sent, &counted);              /* too short */
	ctrl_send(&r, sizeof(*m) - 1, 1, &sent, &counted); /* one byte short */
	ctrl_send(&r, sizeof(*m), 1, &sent, &counted); /* random: bad magic */
	memset(m, 0, sizeof(*m));
	m->magic = OFI_CTRL_MAGIC;
	m->type = 99; /* no such type */
	ctrl_send(&r, sizeof(*m), 1, &sent, &counted);
	m->type = CTRL_HELLO; /* a reply address that is no address */
	memset(m->reply_addr, 'A', sizeof(m->reply_addr));
	ctrl_send(&r, sizeof(*m), 1, &sent, &counted);
	m->type = CTRL_NOTIFY; /* unknown key */
	m->key = 0x12345ull << 12;
	m->addr = ti->desc.addr;
	ctrl_send(&r, sizeof(*m), 1, &sent, &counted);
	m->key = ti->desc.key; /* outside the region */
	m->addr = ti->desc.addr + ti->desc.len;
	ctrl_send(&r, sizeof(*m), 1, &sent, &counted);
	m->addr = ti->desc.addr + 2; /* misaligned */
	ctrl_send(&r, sizeof(*m), 1, &sent, &counted);
	m->addr = UINT64_MAX - 2; /* wraps */
	ctrl_send(&r, sizeof(*m), 1, &sent, &counted);
	m->type = CTRL_ACK; /* an answer to nothing: ignored */
	m->cookie = farm_rand64(&rng);
	ctrl_send(&r, sizeof(*m), 0, &sent, &counted);
	/* A HELLO whose reply goes where nobody listens: the target's ACK
	 * fails on its side, which must not stop it. */
	memset(m, 0, sizeof(*m));
	m->magic = OFI_CTRL_MAGIC;
	m->type = CTRL_HELLO;
	m->to = 1;
	char ip[64] = "127.0.0.1";
	if (tn_active())
		tn_addr(T_BAD, ip, sizeof(ip));
	snprintf(m->reply_addr, sizeof(m->reply_addr), "%s:1", ip);
	ctrl_send(&r, sizeof(*m), 0, &sent, &counted);
	printf("control: %d bad messages sent, %d of them the target must "
	       "refuse\n",
	       sent, counted);
	fflush(stdout);
	return sent == 11 ? counted : 98;
}

/* Messages longer than the target's receive buffers: truncated there
 * (ofi_rxm then drops the connection), one large enough for ofi_rxm's
 * rendezvous (the target would have to fetch it). 0, or 99. */
static int ctrl_big_main(void *argp)
{
	const struct target_info *ti = argp;
	struct raw r;
	if (raw_open(&r, ti->addr))
		return 99;
	int sent = 0, counted = 0;
	ctrl_send(&r, 4096, 0, &sent, &counted);
	ctrl_send(&r, RAW_BUF, 0, &sent, &counted);
	printf("control: %d messages too long for the target sent\n", sent);
	fflush(stdout);
	return 0;
}

/* Plain TCP to the target's libfabric port; one silent connection stays
 * open on fd @arg's other end until the parent closes it. */
static int tcp_connect_to(const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	if (farm_ofi_parse_addr(addr, &ss, &sl))
		return -1;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {.tv_sec = 3};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&ss, sl)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int silent_pipe[2];

static int tcp_main(void *argp)
{
	const struct target_info *ti = argp;
	close(silent_pipe[1]);
	uint8_t junk[65536];
	uint64_t rng = farm_now_ns();
	int st = 0;
	for (int round = 0; round < 3; round++) {
		int fd = tcp_connect_to(ti->addr);
		if (fd < 0)
			return 20 + round;
		if (round == 1)
			memset(junk, 0xff, sizeof(junk));
		else
			for (size_t i = 0; i < sizeof(junk) / 8; i++)
				((uint64_t *)(void *)junk)[i] =
				        farm_rand64(&rng);
		/* The target may close on the first bad byte: a short write
		 * or EPIPE is fine. */
		signal(SIGPIPE, SIG_IGN);
		(void)!write(fd, junk, round == 2 ? 7 : sizeof(junk));
		close(fd);
	}
	/* Silent: connected, says nothing, stays until told. */
	int fd = tcp_connect_to(ti->addr);
	if (fd < 0)
		return 30;
	char b;
	while (read(silent_pipe[0], &b, 1) > 0)
		;
	close(fd);
	return st;
}

/* ---- the parent ---------------------------------------------------------- */

static pid_t target_pid;
static struct target_info TI;

static int wait_pid(pid_t pid, int ms)
{
	uint64_t dl = farm_now_ns() + (uint64_t)ms * 1000000ull;
	int st;
	for (;;) {
		pid_t p = waitpid(pid, &st, WNOHANG);
		if (p == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st)
			                     : 128 + WTERMSIG(st);
		if (farm_now_ns() > dl) {
			kill(pid, SIGKILL);
			tu_reap(pid);
			return -1;
		}
		usleep(2000);
	}
}

static void target_alive(const char *after)
{
	if (waitpid(target_pid, NULL, WNOHANG) != 0)
		fail_msg("the target died after %s", after);
}

/* A fresh good peer: the whole region, the scratch area. */
static void good_peer(const char *after, bool farm_bad)
{
	struct good_arg ga = {.ti = &TI, .farm_bad = farm_bad};
	pid_t pid;
	uint64_t t0 = farm_now_ns();
	assert_int_equal(spawn(T_GOOD, good_main, &ga, &pid), 0);
	int st = wait_pid(pid, 60000);
	printf("after %s: a good peer read the whole region and wrote the "
	       "scratch area%s: %s (%.0f ms)\n",
	       after, farm_bad ? ", libfarm refused its bad requests" : "",
	       st == 0 ? "ok" : "FAILED", (double)(farm_now_ns() - t0) / 1e6);
	fflush(stdout);
	if (st)
		fail_msg("good peer after %s: exit %d", after, st);
	target_alive(after);
}

static struct target_report target_check(void)
{
	struct target_report rep;
	char c = 'C';
	assert_int_equal(tu_send(to_target[1], &c, 1), 0);
	assert_int_equal(tu_recv(from_target[0], &rep, sizeof(rep)), 0);
	return rep;
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(pipe(to_target), 0);
	assert_int_equal(pipe(from_target), 0);
	tu_tmpdir(target_dir, sizeof(target_dir), "wire-t");
	assert_int_equal(spawn(T_TARGET, target_main, NULL, &target_pid), 0);
	close(to_target[0]);
	close(from_target[1]);
	assert_int_equal(tu_recv(from_target[0], &TI, sizeof(TI)), 0);
	printf("target at %s%s; region key %#" PRIx64 ", %" PRIu64
	       " bytes; table key %#" PRIx64 "\n",
	       TI.addr, tn_active() ? " (its own namespace)" : "", TI.desc.key,
	       TI.desc.len, TI.table.key);
	fflush(stdout);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (to_target[1] >= 0)
		close(to_target[1]);
	to_target[1] = -1;
	if (target_pid > 0) {
		int st = wait_pid(target_pid, 10000);
		target_pid = 0;
		if (st != 0)
			fprintf(stderr, "target exited %d\n", st);
	}
	if (from_target[0] >= 0)
		close(from_target[0]);
	if (target_dir[0])
		tu_rmtree(target_dir);
	target_dir[0] = 0;
	return 0;
}

static void test_wire(void **state)
{
	(void)state;
	good_peer("nothing", false);
	struct target_report r0 = target_check();

	/* tcp */
	assert_int_equal(pipe(silent_pipe), 0);
	pid_t tp;
	assert_int_equal(spawn(T_BAD, tcp_main, &TI, &tp), 0);
	close(silent_pipe[0]);
	good_peer("TCP garbage (one silent connection still open)", false);

	/* control */
	pid_t cp;
	assert_int_equal(spawn(T_BAD, ctrl_main, &TI, &cp), 0);
	int must = wait_pid(cp, 120000);
	assert_true(must >= 0 && must < 90);
	good_peer("bad control messages", false);
	struct target_report r1 = target_check();
	assert_int_equal(spawn(T_BAD, ctrl_big_main, &TI, &cp), 0);
	assert_int_equal(wait_pid(cp, 120000), 0);
	good_peer("control messages too long", false);
	printf("control: the target refused %" PRIu64 " (at least %d "
	       "expected)\n",
	       r1.st.malformed - r0.st.malformed, must);
	assert_true(r1.st.malformed - r0.st.malformed >= (uint64_t)must);

	/* rma */
	int errors = 0, silent = 0, refused = 0;
	for (int k = 0; k < A_N; k++) {
		struct rma_arg a = {.ti = &TI, .kind = k};
		pid_t ap;
		assert_int_equal(spawn(T_BAD, rma_main, &a, &ap), 0);
		int st = wait_pid(ap, 60000);
		printf("raw %-30s: %s\n", a_name[k],
		       st == 0   ? "error completion"
		       : st == 1 ? "no status (the target dropped the "
		                   "connection)"
		       : st == 2 ? "refused at post"
		       : st == 3 ? "SUCCEEDED"
		                 : "attacker failed");
		fflush(stdout);
		assert_true(st >= 0 && st <= 2);
		errors += st == 0;
		silent += st == 1;
		refused += st == 2;
		target_alive(a_name[k]);
	}
	printf("raw RMA: %d of %d failed with an error, %d got no status, %d "
	       "refused at post; none succeeded\n",
	       errors, A_N, silent, refused);
	good_peer("raw RMA out of bounds and to bad keys", true);

	/* the silent TCP connection goes away; the target's memory */
	close(silent_pipe[1]);
	assert_int_equal(wait_pid(tp, 10000), 0);
	struct target_report r2 = target_check();
	printf("target: %" PRIu64 " bytes outside the scratch area changed; "
	       "%" PRIu64 " control messages refused, %" PRIu64
	       " libfabric errors\n",
	       r2.changed, r2.st.malformed, r2.st.errors);
	assert_int_equal(r2.changed, 0);
	good_peer("everything", false);
}

int main(void)
{
	if (!farm_fabric_provider_available("ofi")) {
		printf("SKIPPED: the ofi provider was not built\n");
		return FARM_TEST_SKIP;
	}
	if (tn_active() && tn_count() < 3) {
		fprintf(stderr, "netns: 3 machine namespaces needed\n");
		return 2;
	}
	to_target[1] = from_target[0] = -1;
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_setup_teardown(test_wire, setup, teardown),
	};
	return cmocka_run_group_tests_name("ofi_wire", t, NULL, NULL);
}
