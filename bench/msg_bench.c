/*
 * msg_bench: request/response and one-way messaging between two machine
 * processes (include/farm/msg.h), against TCP loopback and a plain
 * shared-memory ring measured in the same run (baseline.h). --fabric ofi:
 * the same over libfabric on loopback (the baselines too); --netns: the
 * client in the first machine namespace of scripts/netns-cluster, the
 * server in the second, over the veth links (no baselines: they run on
 * one host).
 *
 * The process is machine 0, the client. It forks machine 1, the server:
 * each opens its own shm fabric on a data directory under /dev/shm and its
 * own farm_msg (one thread, busy polling), they swap fabric addresses and
 * message-region descriptors over pipes, add each other as peers and open
 * their loops. The server then blocks reading a pipe until told to serve;
 * while serving it runs nothing but its loop, until an "idle" request puts
 * it back on the pipe. So exactly two processes are busy at any time: the
 * two machines while messaging is measured, then this process and the
 * helper a baseline forks, while the server sleeps. While messaging, the
 * client is pinned to the first CPU it may use and the server to the
 * second (--no-pin: not), so the two never share a core.
 *
 * For each payload size (--sizes, default 16,64,128,256,512 bytes):
 *   rr1     request/response, one call outstanding: the continuation
 *           issues the next call; the server's handler echoes the payload.
 *           Rate and round-trip latency (median, p99) of every call;
 *   rrN     the same with --depth (64) calls outstanding: each
 *           continuation issues a new call, keeping the window full, and
 *           every --flush-every (depth/4) calls farm_loop_flush() sends
 *           what is staged, so the server works on the first calls while
 *           the client still handles replies. One call in 16 is timed;
 *   oneway  the client streams farm_msg_send as fast as it can (polling
 *           its loop every --send-batch (128) sends and whenever a send
 *           says -ENOBUFS), the server counts in a handler; the rate is
 *           what the server counts per second, which it reports up a pipe.
 * Each measurement lasts --seconds (2) after a warm-up of a tenth of that.
 * Then the baselines: TCP request/response at 64 B (bl_tcp_best, up to
 * --depth in flight), and the ring stream and ring request/response with
 * as many 64-byte slots as a message ring has bytes / 64.
 * Output: a table, then, last, one JSON line (bench/README.md).
 */
#include "benchnet.h"
#include "benchutil.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <farm/farm.h>

#include "baseline.h"
#include "util/common.h"
#include "util/config.h"

#define PROG            "msg_bench"
#define MAX_SIZES       16
#define MAX_DEPTH       4096u
#define MAX_SAMPLES     (1u << 20)
#define CLIENT_ID       0u
#define SERVER_ID       1u
#define NS_PER_S        1000000000ull
#define STALL_NS        (5 * NS_PER_S)
#define CALL_TIMEOUT_NS (5 * NS_PER_S)
#define GOAL_RR_VS_TCP  10.0
#define GOAL_RTT_US     1.0
#define GOAL_ONEWAY     0.2
#define RUN_RR1         1u
#define RUN_RRN         2u
#define RUN_ONEWAY      4u

/* Message types (both machines register the same handlers). */
#define T_ECHO 1 /* request: the reply is the payload */
#define T_SINK 2 /* one-way: counted */
#define T_CTL  3 /* request: a struct ctl_req */

enum ctl_cmd {
	CTL_SYNC = 1,   /* reply: everything sent before has arrived */
	CTL_IDLE = 2,   /* reply, then stop polling: back to the pipe */
	CTL_ONEWAY = 3, /* reply, then count T_SINK messages in a window */
};

struct ctl_req {
	uint32_t cmd, pad;
	uint64_t warm_ns, dur_ns;
};

struct opts {
	uint32_t sizes[MAX_SIZES];
	unsigned nsizes;
	double seconds;
	unsigned depth;
	uint32_t ring_size;
	unsigned send_batch;
	int flush_every; /* -1: depth / 4 */
	bool baseline;
	bool quick;
	bool pin;
	int cpu[2];    /* client, server (pin); -1: none */
	unsigned runs; /* RUN_* */
	struct bnet net;
};

/* A machine's introduction, and its status (one write, < PIPE_BUF). */
struct hello {
	int32_t status; /* 0, or the negative code it failed with */
	uint32_t pad;
	farm_mr_desc desc;
	char addr[512];
};

/* What the server counted in a one-way window (one write). */
struct oneway_res {
	uint64_t count, ns;
};

struct sampler {
	uint64_t *v;
	size_t n;
	uint64_t stride, skip;
	uint64_t max; /* of all, kept or not */
};

struct rr_res {
	double rate, p50_ns, p99_ns, max_ns, msgs_per_frame;
};

struct size_res {
	uint32_t size;
	struct rr_res rr1, rrn;
	double oneway_rate, oneway_msgs_per_frame;
	uint64_t oneway_queued, oneway_nobufs; /* sender's counters */
};

struct base_res {
	int tcp_rc, stream_rc, rr_rc;
	struct bl_result tcp, tcp1, stream, rr;
	char tcp_which[64];
	unsigned slots;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* ---- small helpers ------------------------------------------------------- */

static int parse_sizes(const char *s, struct opts *o)
{
	char tmp[256];
	if (strlen(s) >= sizeof(tmp))
		return -EINVAL;
	strcpy(tmp, s);
	o->nsizes = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		if (o->nsizes == MAX_SIZES || farm_parse_size(t, &v) ||
		    v > (1u << 24))
			return -EINVAL;
		o->sizes[o->nsizes++] = (uint32_t)v;
	}
	return o->nsizes ? 0 : -EINVAL;
}

static int parse_runs(const char *s, unsigned *runs)
{
	char tmp[64];
	if (strlen(s) >= sizeof(tmp))
		return -EINVAL;
	strcpy(tmp, s);
	*runs = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "rr1"))
			*runs |= RUN_RR1;
		else if (!strcmp(t, "rrn"))
			*runs |= RUN_RRN;
		else if (!strcmp(t, "oneway"))
			*runs |= RUN_ONEWAY;
		else
			return -EINVAL;
	}
	return *runs ? 0 : -EINVAL;
}

static int read_full(int fd, void *p, size_t len)
{
	uint8_t *b = p;
	while (len) {
		ssize_t n = read(fd, b, len);
		if (n < 0 && errno == EINTR && !interrupted)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;
	while (len) {
		ssize_t n = write(fd, b, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Latencies: all of them up to MAX_SAMPLES, then every other one kept and
 * every stride'th taken (the stride doubling), so they span the run. */
static void sampler_reset(struct sampler *s)
{
	s->n = 0;
	s->stride = 1;
	s->skip = 0;
	s->max = 0;
}

/* Returns true when it took long (it compacted the samples). */
static inline bool sampler_add(struct sampler *s, uint64_t x)
{
	bool slow = false;
	if (x > s->max)
		s->max = x;
	if (s->skip) {
		s->skip--;
		return false;
	}
	if (s->n == MAX_SAMPLES) {
		for (size_t i = 0; i < s->n / 2; i++)
			s->v[i] = s->v[2 * i];
		s->n /= 2;
		s->stride *= 2;
		slow = true;
	}
	s->v[s->n++] = x;
	s->skip = s->stride - 1;
	return slow;
}

static void sampler_pcts(struct sampler *s, double *p50, double *p99)
{
	*p50 = *p99 = 0;
	if (!s->n)
		return;
	qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
	*p50 = (double)s->v[s->n / 2];
	*p99 = (double)s->v[FARM_MIN(s->n - 1, s->n * 99 / 100)];
}

/* Pin the calling process to @cpu (-1: leave it). */
static void pin_to(int cpu, const char *who)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		fprintf(stderr, PROG ": cannot pin the %s to CPU %d: %s\n", who,
		        cpu, strerror(errno));
}

/* ---- a machine ----------------------------------------------------------- */

struct machine {
	farm_fabric *fab;
	farm_msg *msg;
	farm_loop *loop;
};

/* Open the fabric and messaging of machine @id and say hello. */
static int machine_open(const struct opts *o, uint32_t id, const char *dir,
                        struct machine *m, struct hello *h)
{
	const char *who = id == SERVER_ID ? "server" : "client";
	memset(h, 0, sizeof(*h));
	char lbuf[96];
	farm_fabric_attr fa = {
	        .provider = o->net.fabric,
	        .machine_id = id,
	        .data_dir = dir,
	        .listen_addr = bnet_listen(&o->net, id, lbuf, sizeof(lbuf))};
	int rc = farm_fabric_open(&fa, &m->fab);
	if (rc) {
		fprintf(stderr, PROG ": %s: cannot open a fabric in %s: %s\n",
		        who, dir, farm_strerror(rc));
		return rc;
	}
	farm_msg_attr ma = {.nthreads = 1,
	                    .max_machines = 2,
	                    .ring_size = o->ring_size,
	                    .busy_poll = true};
	rc = farm_msg_create(m->fab, &ma, &m->msg);
	if (rc) {
		fprintf(stderr, PROG ": %s: farm_msg_create: %s\n", who,
		        farm_strerror(rc));
		return rc;
	}
	rc = farm_fabric_address(m->fab, h->addr, sizeof(h->addr));
	if (rc < 0) {
		fprintf(stderr, PROG ": %s: farm_fabric_address: %s\n", who,
		        farm_strerror(rc));
		return rc;
	}
	h->desc = farm_msg_desc(m->msg);
	return 0;
}

/* Add the peer and open the loop (the handlers are registered by now). */
static int machine_connect(struct machine *m, uint32_t peer, struct hello *ph)
{
	ph->addr[sizeof(ph->addr) - 1] = 0;
	int rc = farm_msg_add_peer(m->msg, peer, ph->addr, &ph->desc);
	if (rc) {
		fprintf(stderr, PROG ": farm_msg_add_peer(%" PRIu32 "): %s\n",
		        peer, farm_strerror(rc));
		return rc;
	}
	rc = farm_loop_open(m->msg, 0, &m->loop);
	if (rc)
		fprintf(stderr, PROG ": farm_loop_open: %s\n",
		        farm_strerror(rc));
	return rc;
}

static void machine_close(struct machine *m)
{
	if (m->loop)
		farm_loop_close(m->loop);
	if (m->msg && farm_msg_destroy(m->msg))
		fprintf(stderr, PROG ": farm_msg_destroy failed\n");
	if (m->fab)
		farm_fabric_close(m->fab);
	memset(m, 0, sizeof(*m));
}

/* ---- the server ---------------------------------------------------------- */

struct server {
	int up;         /* to the client: one-way results */
	int err;        /* first error of a handler */
	bool idle;      /* stop polling */
	uint64_t count; /* T_SINK messages */
	/* the one-way window: 0 off, 1 warming up, 2 counting */
	int ow_state;
	uint64_t ow_warm_end, ow_dur, ow_t0, ow_c0;
};

static void s_echo(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct server *s = arg;
	int rc = farm_msg_reply(loop, &in->token, in->payload, in->len);
	if (rc && !s->err)
		s->err = rc;
}

static void s_sink(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop;
	(void)in;
	struct server *s = arg;
	s->count++;
}

static void s_ctl(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct server *s = arg;
	struct ctl_req req;
	if (in->len != sizeof(req)) {
		if (farm_msg_reply_error(loop, &in->token, -EINVAL) && !s->err)
			s->err = -EPROTO;
		return;
	}
	memcpy(&req, in->payload, sizeof(req));
	switch (req.cmd) {
	case CTL_SYNC: break;
	case CTL_IDLE: s->idle = true; break;
	case CTL_ONEWAY:
		s->count = 0;
		s->ow_state = 1;
		s->ow_warm_end = farm_now_ns() + req.warm_ns;
		s->ow_dur = req.dur_ns;
		break;
	default:
		if (farm_msg_reply_error(loop, &in->token, -EINVAL) && !s->err)
			s->err = -EPROTO;
		return;
	}
	int rc = farm_msg_reply(loop, &in->token, NULL, 0);
	if (rc && !s->err)
		s->err = rc;
}

/* Poll until told to idle: nothing but the loop, and a clock read every
 * 64 passes while a one-way window is open. The reply to CTL_IDLE leaves
 * at the end of the pass that handled it. */
static int serve(struct server *s, farm_loop *loop)
{
	unsigned n = 0;
	s->idle = false;
	while (!s->idle && !interrupted && !s->err) {
		(void)farm_loop_poll(loop);
		if (!s->ow_state || (++n & 63))
			continue;
		uint64_t now = farm_now_ns();
		if (s->ow_state == 1 && now >= s->ow_warm_end) {
			s->ow_t0 = now;
			s->ow_c0 = s->count;
			s->ow_state = 2;
		} else if (s->ow_state == 2 && now - s->ow_t0 >= s->ow_dur) {
			struct oneway_res r = {s->count - s->ow_c0,
			                       now - s->ow_t0};
			s->ow_state = 0;
			int rc = write_full(s->up, &r, sizeof(r));
			if (rc)
				return rc;
		}
	}
	if (s->err)
		fprintf(stderr, PROG ": server: reply failed: %s\n",
		        farm_strerror(s->err));
	return interrupted ? -EINTR : s->err;
}

/* The child: machine 1. Serves when the client writes 'r' down the pipe,
 * goes when it writes 'q'; on end of file or SIGTERM (the parent death
 * signal) the client is dying: then remove @base too, once it is gone. */
static int server_main(const struct opts *o, const char *base, const char *dir,
                       int down, int up, pid_t parent)
{
	struct machine m = {0};
	struct server s = {.up = up};
	struct hello h, ph;
	pin_to(o->cpu[1], "server");
	int rc = machine_open(o, SERVER_ID, dir, &m, &h);
	if (rc == 0)
		rc = farm_msg_handle(m.msg, T_ECHO, s_echo, &s);
	if (rc == 0)
		rc = farm_msg_handle(m.msg, T_SINK, s_sink, &s);
	if (rc == 0)
		rc = farm_msg_handle(m.msg, T_CTL, s_ctl, &s);
	h.status = rc;
	bool told = false;
	if (write_full(up, &h, sizeof(h)) || rc)
		goto out;
	rc = read_full(down, &ph, sizeof(ph));
	if (rc)
		goto out;
	rc = machine_connect(&m, CLIENT_ID, &ph);
	int32_t st = rc;
	if (write_full(up, &st, sizeof(st)) || rc)
		goto out;
	for (;;) {
		char c = 0;
		if (read_full(down, &c, 1))
			break;
		if (c == 'q') {
			told = true;
			break;
		}
		if (c != 'r')
			break;
		rc = serve(&s, m.loop);
		if (rc)
			break;
	}
out:
	machine_close(&m);
	close(up);
	close(down);
	if (told)
		return rc ? 1 : 0;
	/* The client went away: once it is gone, clean up after it. */
	for (int i = 0; i < 1000 && getppid() == parent; i++)
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	if (getppid() != parent)
		bu_rm_tree(AT_FDCWD, base, 2);
	return 1;
}

/* ---- the client's measurements ------------------------------------------ */

struct bench;

struct rr_slot {
	struct bench *b;
	uint64_t t0;
};

struct bench {
	const struct opts *o;
	struct machine m;
	int up; /* from the server */
	uint8_t *buf;
	struct sampler lat;
	struct rr_slot *slots;
	/* the current request/response run */
	uint32_t size;
	unsigned outstanding;
	uint64_t done, issued;
	uint64_t sample_mask; /* time calls whose number & mask is 0 */
	unsigned flush_every;
	bool measuring, stop;
	int err;
};

static void rr_cont(farm_loop *loop, void *ctx, int status, const void *reply,
                    uint32_t len);

/* Issue a call on slot @sl; @now: the time if the caller has it, or 0.
 * Only every (sample_mask + 1)'th call is timed (t0 0: not timed): a clock
 * read costs tens of ns, a good part of a pipelined call. */
static inline void rr_issue(struct bench *b, struct rr_slot *sl, uint64_t now)
{
	sl->t0 = 0;
	if ((b->issued & b->sample_mask) == 0)
		sl->t0 = now ? now : farm_now_ns();
	int rc = farm_msg_call(b->m.loop, SERVER_ID, 0, T_ECHO, b->buf, b->size,
	                       CALL_TIMEOUT_NS, rr_cont, sl);
	if (FARM_UNLIKELY(rc)) {
		if (!b->err)
			b->err = rc;
		b->stop = true;
		return;
	}
	b->outstanding++;
	/* Let the server start on these while we reply-process the rest. */
	b->issued++;
	if (b->flush_every && b->issued % b->flush_every == 0)
		farm_loop_flush(b->m.loop);
}

static void rr_cont(farm_loop *loop, void *ctx, int status, const void *reply,
                    uint32_t len)
{
	(void)loop;
	(void)reply;
	struct rr_slot *sl = ctx;
	struct bench *b = sl->b;
	uint64_t now = sl->t0 ? farm_now_ns() : 0;
	b->outstanding--;
	if (FARM_UNLIKELY(status || len != b->size)) {
		if (!b->err)
			b->err = status ? status : -EPROTO;
		b->stop = true;
		return;
	}
	b->done++;
	/* After a compaction (a millisecond or two), the next call's start
	 * is read afresh. */
	if (now && b->measuring && sampler_add(&b->lat, now - sl->t0))
		now = 0;
	if (!b->stop)
		rr_issue(b, sl, now);
}

static double warm_ns(const struct opts *o)
{
	return o->seconds * 1e9 / 10;
}

/* Frames the client posted per message it sent, since @before. */
static double msgs_per_frame(struct bench *b, const farm_msg_stats *before)
{
	farm_msg_stats now;
	farm_msg_stats_get(NULL, b->m.loop, &now);
	uint64_t f = now.frames_sent - before->frames_sent;
	return f ? (double)(now.sent - before->sent) / (double)f : 0;
}

/* Request/response with @depth calls outstanding for --seconds after the
 * warm-up; every call completes before it returns. */
static int run_rr(struct bench *b, uint32_t size, unsigned depth,
                  struct rr_res *res)
{
	farm_loop *loop = b->m.loop;
	farm_msg_stats st0;
	farm_msg_stats_get(NULL, loop, &st0);
	b->size = size;
	b->outstanding = 0;
	b->done = b->issued = 0;
	b->sample_mask = depth > 1 ? 15 : 0;
	/* 0: leave it to the end of the loop pass */
	b->flush_every = depth > 1 ? (unsigned)b->o->flush_every : 0;
	b->measuring = b->stop = false;
	b->err = 0;
	sampler_reset(&b->lat);
	uint64_t start = farm_now_ns();
	uint64_t warm_end = start + (uint64_t)warm_ns(b->o);
	uint64_t dur = (uint64_t)(b->o->seconds * 1e9);
	uint64_t t0 = 0, t1 = 0, d0 = 0, d1 = 0;
	uint64_t last_done = 0, last_progress = start;
	for (unsigned i = 0; i < depth && !b->stop; i++)
		rr_issue(b, &b->slots[i], farm_now_ns());
	unsigned n = 0;
	while (b->outstanding) {
		(void)farm_loop_poll(loop);
		if (++n & 15)
			continue;
		uint64_t now = farm_now_ns();
		if (!b->stop && !b->measuring && now >= warm_end) {
			b->measuring = true;
			t0 = now;
			d0 = b->done;
		} else if (b->measuring && now - t0 >= dur) {
			b->measuring = false;
			b->stop = true;
			t1 = now;
			d1 = b->done;
		}
		if (interrupted)
			return -EINTR; /* closing the loop cancels the calls */
		if (b->done != last_done) {
			last_done = b->done;
			last_progress = now;
		} else if (now - last_progress > STALL_NS) {
			fprintf(stderr, PROG ": no reply for %llu s\n",
			        STALL_NS / NS_PER_S);
			return -ETIMEDOUT;
		}
	}
	if (b->err) {
		fprintf(stderr, PROG ": call failed: %s\n",
		        farm_strerror(b->err));
		return b->err;
	}
	if (!t1)
		return interrupted ? -EINTR : -EIO;
	res->rate = (double)(d1 - d0) / ((double)(t1 - t0) / 1e9);
	sampler_pcts(&b->lat, &res->p50_ns, &res->p99_ns);
	res->max_ns = (double)b->lat.max;
	res->msgs_per_frame = msgs_per_frame(b, &st0);
	return 0;
}

struct ctl_done {
	volatile int done;
	int status;
};

static void ctl_cont(farm_loop *loop, void *ctx, int status, const void *reply,
                     uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct ctl_done *d = ctx;
	d->status = status;
	d->done = 1;
}

/* A control call to the server, waited for. */
static int ctl_call(struct bench *b, uint32_t cmd, uint64_t warm, uint64_t dur)
{
	struct ctl_req req = {.cmd = cmd, .warm_ns = warm, .dur_ns = dur};
	struct ctl_done d = {0};
	/* After a one-way run the queue to the server may still be full:
	 * let it drain (the server keeps reading) before the call. */
	uint64_t give_up = farm_now_ns() + CALL_TIMEOUT_NS;
	int rc;
	while ((rc = farm_msg_call(b->m.loop, SERVER_ID, 0, T_CTL, &req,
	                           sizeof(req), CALL_TIMEOUT_NS, ctl_cont,
	                           &d)) == -ENOBUFS &&
	       farm_now_ns() < give_up)
		(void)farm_loop_poll(b->m.loop);
	if (rc == 0)
		rc = farm_loop_wait(b->m.loop, &d.done, CALL_TIMEOUT_NS * 2);
	if (rc == 0)
		rc = d.status;
	if (rc)
		fprintf(stderr, PROG ": control call %" PRIu32 ": %s\n", cmd,
		        farm_strerror(rc));
	return rc;
}

/* One-way stream of @size-byte messages; the server counts. */
static int run_oneway(struct bench *b, uint32_t size, struct size_res *res)
{
	farm_loop *loop = b->m.loop;
	const struct opts *o = b->o;
	uint64_t dur = (uint64_t)(o->seconds * 1e9);
	uint64_t warm = (uint64_t)warm_ns(o);
	int rc = ctl_call(b, CTL_ONEWAY, warm, dur);
	if (rc)
		return rc;
	farm_msg_stats st0, st1;
	farm_msg_stats_get(NULL, loop, &st0);
	uint64_t deadline = farm_now_ns() + warm + dur + STALL_NS;
	struct pollfd pfd = {.fd = b->up, .events = POLLIN};
	struct oneway_res r;
	unsigned batch = o->send_batch ? o->send_batch : UINT32_MAX;
	for (unsigned n = 1;; n++) {
		for (unsigned i = 0; i < batch; i++) {
			rc = farm_msg_send(loop, SERVER_ID, 0, T_SINK, b->buf,
			                   size);
			if (FARM_UNLIKELY(rc)) {
				if (rc == -ENOBUFS)
					break;
				fprintf(stderr, PROG ": send: %s\n",
				        farm_strerror(rc));
				return rc;
			}
		}
		(void)farm_loop_poll(loop);
		if (n & 63)
			continue;
		if (interrupted)
			return -EINTR;
		if (poll(&pfd, 1, 0) > 0)
			break;
		if (farm_now_ns() > deadline) {
			fprintf(stderr, PROG ": the server reported no "
			                     "one-way count\n");
			return -ETIMEDOUT;
		}
	}
	farm_msg_stats_get(NULL, loop, &st1);
	rc = read_full(b->up, &r, sizeof(r));
	if (rc) {
		fprintf(stderr, PROG ": reading the server's count: %s\n",
		        farm_strerror(rc));
		return rc;
	}
	/* Everything queued has arrived once the sync call's reply has. */
	rc = ctl_call(b, CTL_SYNC, 0, 0);
	if (rc)
		return rc;
	res->oneway_rate = r.ns ? (double)r.count / ((double)r.ns / 1e9) : 0;
	uint64_t f = st1.frames_sent - st0.frames_sent;
	res->oneway_msgs_per_frame =
	        f ? (double)(st1.sent - st0.sent) / (double)f : 0;
	res->oneway_queued = st1.queued - st0.queued;
	res->oneway_nobufs = st1.nobufs - st0.nobufs;
	return 0;
}

static int measure(struct bench *b, struct size_res *res)
{
	const struct opts *o = b->o;
	for (unsigned i = 0; i < o->nsizes; i++) {
		struct size_res *r = &res[i];
		r->size = o->sizes[i];
		int rc = 0;
		if (o->runs & RUN_RR1)
			rc = run_rr(b, r->size, 1, &r->rr1);
		if (rc == 0 && (o->runs & RUN_RRN))
			rc = run_rr(b, r->size, o->depth, &r->rrn);
		if (rc == 0 && (o->runs & RUN_ONEWAY))
			rc = run_oneway(b, r->size, r);
		if (rc)
			return rc;
		printf("%6" PRIu32 " B  rr1 %6.3f M/s p50 %6.2f us p99 %6.2f us"
		       " max %8.1f us  rr%u %6.3f M/s  oneway %6.3f M/s\n",
		       r->size, r->rr1.rate / 1e6, r->rr1.p50_ns / 1e3,
		       r->rr1.p99_ns / 1e3, r->rr1.max_ns / 1e3, o->depth,
		       r->rrn.rate / 1e6, r->oneway_rate / 1e6);
		fflush(stdout);
	}
	return 0;
}

static void run_baselines(const struct opts *o, struct base_res *br)
{
	br->slots = o->ring_size / 64;
	br->tcp_rc =
	        bl_tcp_best(64, o->depth, o->seconds, &br->tcp, br->tcp_which,
	                    sizeof(br->tcp_which), &br->tcp1);
	if (br->tcp_rc == 0) {
		printf("baseline tcp 64 B (best: %s): %.3f M/s p50 %.2f us "
		       "p99 %.2f us\n",
		       br->tcp_which, br->tcp.rate / 1e6, br->tcp.p50_ns / 1e3,
		       br->tcp.p99_ns / 1e3);
		printf("baseline tcp 64 B, 1 in flight (best of blocking and "
		       "busy): %.3f M/s p50 %.2f us\n",
		       br->tcp1.rate / 1e6, br->tcp1.p50_ns / 1e3);
	}
	fflush(stdout);
	br->stream_rc = interrupted ? -EINTR
	                            : bl_ring_stream(br->slots, o->seconds,
	                                             &br->stream);
	if (br->stream_rc == 0)
		printf("baseline ring stream (%u slots of 64 B): %.3f M/s\n",
		       br->slots, br->stream.rate / 1e6);
	fflush(stdout);
	br->rr_rc = interrupted ? -EINTR
	                        : bl_ring_rr(br->slots, o->seconds, &br->rr);
	if (br->rr_rc == 0)
		printf("baseline ring request/response: %.3f M/s p50 %.2f us "
		       "p99 %.2f us\n",
		       br->rr.rate / 1e6, br->rr.p50_ns / 1e3,
		       br->rr.p99_ns / 1e3);
	fflush(stdout);
}

/* ---- output -------------------------------------------------------------- */

static void print_goal(const char *name, double v, bool known, double target,
                       bool met, bool last)
{
	char s[32];
	if (known && isfinite(v))
		snprintf(s, sizeof(s), "%.3f", v);
	else
		snprintf(s, sizeof(s), "null");
	printf("\"%s\": {\"value\": %s, \"target\": %.1f, \"met\": %s}%s", name,
	       s, target, known && met ? "true" : "false", last ? "" : ", ");
}

static void print_bl(const char *name, int rc, const struct bl_result *r,
                     bool lat)
{
	if (rc) {
		printf("\"%s\": null, ", name);
		return;
	}
	printf("\"%s\": {\"rate\": %.0f", name, r->rate);
	if (lat)
		printf(", \"p50_ns\": %.0f, \"p99_ns\": %.0f", r->p50_ns,
		       r->p99_ns);
	printf("}, ");
}

static void print_results(const struct opts *o, const struct size_res *res,
                          const struct base_res *br)
{
	const struct size_res *r64 = NULL;
	printf("\nsize (B)  rr1: M/s   p50 us   p99 us | rr%-3u M/s   p50 us "
	       "  p99 us  msg/frame | oneway M/s  msg/frame\n",
	       o->depth);
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct size_res *r = &res[i];
		if (r->size == 64)
			r64 = r;
		printf("%8" PRIu32 "  %8.3f %8.2f %8.2f | %8.3f %8.2f %8.2f "
		       "%10.1f | %10.3f %10.1f\n",
		       r->size, r->rr1.rate / 1e6, r->rr1.p50_ns / 1e3,
		       r->rr1.p99_ns / 1e3, r->rrn.rate / 1e6,
		       r->rrn.p50_ns / 1e3, r->rrn.p99_ns / 1e3,
		       r->rrn.msgs_per_frame, r->oneway_rate / 1e6,
		       r->oneway_msgs_per_frame);
	}
	double best64 = r64 ? FARM_MAX(r64->rr1.rate, r64->rrn.rate) : 0;
	bool tcp_ok = o->baseline && br->tcp_rc == 0 && br->tcp.rate > 0;
	bool ring_ok = o->baseline && br->stream_rc == 0 && br->stream.rate > 0;
	double g_rr = tcp_ok ? best64 / br->tcp.rate : 0;
	double g_rtt = r64 ? r64->rr1.p50_ns / 1e3 : 0;
	double g_ow = ring_ok && r64 ? r64->oneway_rate / br->stream.rate : 0;
	if (r64) {
		printf("\n64 B: best msg request/response %.3f M/s",
		       best64 / 1e6);
		if (tcp_ok)
			printf(" = %.1fx TCP (goal %.0fx)", g_rr,
			       GOAL_RR_VS_TCP);
		if (tcp_ok && br->tcp1.rate > 0)
			printf("; with 1 in flight each, %.3f M/s = %.1fx TCP",
			       r64->rr1.rate / 1e6,
			       r64->rr1.rate / br->tcp1.rate);
		printf("; round trip p50 %.2f us (goal < %.1f us); one-way "
		       "%.3f M/s",
		       g_rtt, GOAL_RTT_US, r64->oneway_rate / 1e6);
		if (ring_ok)
			printf(" = %.2fx the plain ring (goal %.1fx)", g_ow,
			       GOAL_ONEWAY);
		printf("\n");
	}

	printf("{\"bench\": \"msg_bench\", \"provider\": \"%s\", "
	       "\"network\": \"%s\", \"threads\": 1, \"busy_poll\": true, "
	       "\"pinned\": %s, "
	       "\"ring_size\": %" PRIu32 ", \"depth\": %u, "
	       "\"flush_every\": %d, \"send_batch\": %u, \"seconds\": %.3g, "
	       "\"results\": [",
	       o->net.fabric, bnet_network(&o->net),
	       o->cpu[0] >= 0 ? "true" : "false", o->ring_size, o->depth,
	       o->flush_every, o->send_batch, o->seconds);
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct size_res *r = &res[i];
		printf("%s{\"size\": %" PRIu32 ", \"rr1_rate\": %.0f, "
		       "\"rr1_p50_ns\": %.0f, \"rr1_p99_ns\": %.0f, "
		       "\"rr1_max_ns\": %.0f, \"rrn_rate\": %.0f, "
		       "\"rrn_p50_ns\": %.0f, \"rrn_p99_ns\": %.0f, "
		       "\"rrn_max_ns\": %.0f, \"rrn_msgs_per_frame\": %.2f, "
		       "\"oneway_rate\": %.0f, \"oneway_msgs_per_frame\": "
		       "%.2f, \"oneway_queued\": %" PRIu64
		       ", \"oneway_nobufs\": %" PRIu64 "}",
		       i ? ", " : "", r->size, r->rr1.rate, r->rr1.p50_ns,
		       r->rr1.p99_ns, r->rr1.max_ns, r->rrn.rate, r->rrn.p50_ns,
		       r->rrn.p99_ns, r->rrn.max_ns, r->rrn.msgs_per_frame,
		       r->oneway_rate, r->oneway_msgs_per_frame,
		       r->oneway_queued, r->oneway_nobufs);
	}
	printf("], \"baseline\": {");
	if (o->baseline) {
		print_bl("tcp_best_64B", br->tcp_rc, &br->tcp, true);
		print_bl("tcp_1inflight_64B", br->tcp_rc, &br->tcp1, true);
		printf("\"tcp_best_which\": \"%s\", ",
		       br->tcp_rc ? "" : br->tcp_which);
		print_bl("ring_stream", br->stream_rc, &br->stream, false);
		print_bl("ring_rr", br->rr_rc, &br->rr, true);
		printf("\"ring_slots\": %u", br->slots);
	}
	printf("}, \"goals\": {");
	if (!bnet_shm(&o->net)) {
		/* The goals across hosts are kv_bench's: none here. */
		printf("}}\n");
		fflush(stdout);
		return;
	}
	print_goal("rr_vs_tcp_64B", g_rr, r64 && tcp_ok, GOAL_RR_VS_TCP,
	           g_rr >= GOAL_RR_VS_TCP, false);
	print_goal("rtt_p50_us_64B", g_rtt, r64 != NULL, GOAL_RTT_US,
	           g_rtt < GOAL_RTT_US, false);
	print_goal("oneway_vs_ring_64B", g_ow, r64 && ring_ok, GOAL_ONEWAY,
	           g_ow >= GOAL_ONEWAY, true);
	printf("}}\n");
	fflush(stdout);
}

/* ---- the client ---------------------------------------------------------- */

/* Everything but the server's side. *@serving: whether the server may
 * still be polling (it could not be told to stop). */
static int client_main(const struct opts *o, const char *dir, int down, int up,
                       bool *serving)
{
	struct bench b;
	memset(&b, 0, sizeof(b));
	b.o = o;
	b.up = up;
	struct base_res br;
	memset(&br, 0, sizeof(br));
	struct size_res *res = calloc(o->nsizes, sizeof(*res));
	uint32_t maxsz = 0;
	for (unsigned i = 0; i < o->nsizes; i++)
		maxsz = FARM_MAX(maxsz, o->sizes[i]);
	b.buf = calloc(1, maxsz + 1);
	b.lat.v = malloc(MAX_SAMPLES * sizeof(*b.lat.v));
	b.slots = calloc(o->depth, sizeof(*b.slots));
	int rc = res && b.buf && b.lat.v && b.slots ? 0 : -ENOMEM;
	struct hello h, sh;
	*serving = false;
	if (rc)
		goto out;
	for (uint32_t i = 0; i < maxsz; i++)
		b.buf[i] = (uint8_t)(i * 7 + 1);
	for (unsigned i = 0; i < o->depth; i++)
		b.slots[i].b = &b;
	rc = machine_open(o, CLIENT_ID, dir, &b.m, &h);
	if (rc)
		goto out;
	if (maxsz > farm_msg_max_payload(b.m.msg)) {
		fprintf(stderr,
		        PROG ": sizes must be at most %" PRIu32
		             " bytes with a %" PRIu32 "-byte ring\n",
		        farm_msg_max_payload(b.m.msg), o->ring_size);
		rc = -EMSGSIZE;
		goto out;
	}
	rc = read_full(up, &sh, sizeof(sh));
	if (rc == 0 && sh.status)
		rc = sh.status; /* the server said why */
	else if (rc)
		fprintf(stderr, PROG ": no word from the server: %s\n",
		        farm_strerror(rc));
	if (rc)
		goto out;
	rc = write_full(down, &h, sizeof(h));
	if (rc == 0)
		rc = machine_connect(&b.m, SERVER_ID, &sh);
	int32_t st;
	if (rc == 0)
		rc = read_full(up, &st, sizeof(st));
	if (rc == 0)
		rc = st;
	if (rc)
		goto out;

	char flush[48], batch[48];
	if (o->flush_every)
		snprintf(flush, sizeof(flush), "flushed every %d calls",
		         o->flush_every);
	else
		snprintf(flush, sizeof(flush), "flushed once a pass");
	if (o->send_batch)
		snprintf(batch, sizeof(batch), "every %u sends and",
		         o->send_batch);
	else
		snprintf(batch, sizeof(batch), "only");
	printf("msg_bench: %s fabric (%s), 2 machine processes, 1 loop "
	       "each, busy polling; rings of %" PRIu32 " KiB\n"
	       "  rr1: 1 call outstanding, each timed; rr%u: %u outstanding, "
	       "%s, 1 in 16 timed\n"
	       "  oneway: the sender polls %s on -ENOBUFS\n"
	       "  each run %.2f s after a %.2f s warm-up\n",
	       o->net.fabric, bnet_network(&o->net), o->ring_size >> 10,
	       o->depth, o->depth, flush, batch, o->seconds, warm_ns(o) / 1e9);
	if (o->cpu[0] >= 0)
		printf("  client pinned to CPU %d, server to CPU %d (while "
		       "messaging)\n",
		       o->cpu[0], o->cpu[1]);
	else
		printf("  not pinned\n");
	fflush(stdout);
	cpu_set_t mask;
	bool have_mask = sched_getaffinity(0, sizeof(mask), &mask) == 0;
	pin_to(o->cpu[0], "client");
	rc = write_full(down, "r", 1);
	if (rc)
		goto out;
	*serving = true;
	/* Connect both ways (lazily, on first use) before timing anything. */
	for (int i = 0; i < 100 && rc == 0; i++)
		rc = ctl_call(&b, CTL_SYNC, 0, 0);
	uint64_t t0 = farm_now_ns();
	if (rc == 0)
		rc = measure(&b, res);
	if (rc == 0)
		printf("messaging measured in %.1f s\n",
		       (double)(farm_now_ns() - t0) / 1e9);
	/* The server goes back to its pipe: no CPU during the baselines. */
	int rc2 = ctl_call(&b, CTL_IDLE, 0, 0);
	*serving = rc2 != 0;
	if (rc == 0)
		rc = rc2;
	if (rc)
		goto out;
	/* The baselines' processes go where the scheduler puts them. */
	if (have_mask && o->cpu[0] >= 0 &&
	    sched_setaffinity(0, sizeof(mask), &mask) != 0)
		fprintf(stderr, PROG ": cannot unpin: %s\n", strerror(errno));
	if (o->baseline)
		run_baselines(o, &br);
	if (interrupted) {
		rc = -EINTR;
		goto out;
	}
	print_results(o, res, &br);
	if (br.tcp_rc || br.stream_rc || br.rr_rc)
		rc = br.tcp_rc      ? br.tcp_rc
		     : br.stream_rc ? br.stream_rc
		                    : br.rr_rc;
out:
	machine_close(&b.m);
	free(res);
	free(b.buf);
	free(b.lat.v);
	free(b.slots);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: msg_bench [OPTIONS]\n"
	        "\n"
	        "Request/response and one-way messaging (farm_msg) between\n"
	        "two machine processes on the shm fabric, one busy-polling\n"
	        "loop each, against TCP loopback and a plain shared-memory\n"
	        "ring measured in the same run. Prints a table, then one\n"
	        "JSON line (last).\n"
	        "\n"
	        "  --sizes LIST       payload sizes in bytes, comma-separated\n"
	        "                     (default 16,64,128,256,512)\n"
	        "  --seconds S        length of one measurement, after a\n"
	        "                     warm-up of a tenth of it (default 2)\n"
	        "  --depth N          calls outstanding in the pipelined\n"
	        "                     run, and TCP's largest window\n"
	        "                     (default 64, max %u)\n"
	        "  --ring-size SZ     bytes of each message ring, a power of\n"
	        "                     two, 4K..64M (default 256K)\n"
	        "  --send-batch N     one-way: sends between loop polls (0:\n"
	        "                     poll only when a send says -ENOBUFS;\n"
	        "                     default 128)\n"
	        "  --flush-every N    pipelined run: farm_loop_flush() after\n"
	        "                     every N calls issued (0: only at the\n"
	        "                     end of each loop pass; default depth/4)\n"
	        "  --no-baseline      skip TCP and the plain ring (goals\n"
	        "                     that need them report null)\n"
	        "  --no-pin           do not pin the two machines to the\n"
	        "                     first two CPUs while messaging\n"
	        "  --runs LIST        measurements to make, of rr1,rrn,oneway\n"
	        "                     (default all; those left out report 0:\n"
	        "                     for profiling)\n"
	        "  --fabric NAME      shm (default) or ofi (libfabric\n"
	        "                     tcp;ofi_rxm over loopback)\n"
	        "  --netns            ofi across network namespaces (client\n"
	        "                     in the first machine namespace, server\n"
	        "                     in the second; no baselines); run it\n"
	        "                     under scripts/netns-cluster run\n"
	        "                     --net-only --\n"
	        "  --quick            0.2 s measurements (smoke test)\n"
	        "  -h, --help         this text\n",
	        MAX_DEPTH);
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum {
		O_SIZES = 256,
		O_SECONDS,
		O_DEPTH,
		O_RING,
		O_BATCH,
		O_FLUSH,
		O_NOBASE,
		O_NOPIN,
		O_RUNS,
		O_QUICK,
		O_FABRIC,
		O_NETNS
	};
	static const struct option lopts[] = {
	        {"sizes", required_argument, NULL, O_SIZES},
	        {"seconds", required_argument, NULL, O_SECONDS},
	        {"depth", required_argument, NULL, O_DEPTH},
	        {"ring-size", required_argument, NULL, O_RING},
	        {"send-batch", required_argument, NULL, O_BATCH},
	        {"flush-every", required_argument, NULL, O_FLUSH},
	        {"no-baseline", no_argument, NULL, O_NOBASE},
	        {"no-pin", no_argument, NULL, O_NOPIN},
	        {"runs", required_argument, NULL, O_RUNS},
	        {"quick", no_argument, NULL, O_QUICK},
	        {"fabric", required_argument, NULL, O_FABRIC},
	        {"netns", no_argument, NULL, O_NETNS},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	bool set_seconds = false;
	uint64_t v;
	char *end;
	int c;
	*o = (struct opts){.sizes = {16, 64, 128, 256, 512},
	                   .nsizes = 5,
	                   .seconds = 2.0,
	                   .depth = 64,
	                   .ring_size = 256u << 10,
	                   .send_batch = 128,
	                   .flush_every = -1,
	                   .baseline = true,
	                   .pin = true,
	                   .cpu = {-1, -1},
	                   .runs = RUN_RR1 | RUN_RRN | RUN_ONEWAY,
	                   .net = BNET_DEFAULT};
	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case O_SIZES:
			if (parse_sizes(optarg, o))
				goto bad;
			break;
		case O_SECONDS:
			o->seconds = strtod(optarg, &end);
			if (*end || !(o->seconds >= 0.01 && o->seconds <= 600))
				goto bad;
			set_seconds = true;
			break;
		case O_DEPTH:
			if (farm_parse_size(optarg, &v) || v < 1 ||
			    v > MAX_DEPTH)
				goto bad;
			o->depth = (unsigned)v;
			break;
		case O_RING:
			if (farm_parse_size(optarg, &v) || !farm_is_pow2(v) ||
			    v < (4u << 10) || v > (64u << 20))
				goto bad;
			o->ring_size = (uint32_t)v;
			break;
		case O_BATCH:
			if (farm_parse_size(optarg, &v) || v > 1000000)
				goto bad;
			o->send_batch = (unsigned)v;
			break;
		case O_FLUSH:
			if (farm_parse_size(optarg, &v) || v > MAX_DEPTH)
				goto bad;
			o->flush_every = (int)v;
			break;
		case O_NOBASE: o->baseline = false; break;
		case O_NOPIN: o->pin = false; break;
		case O_RUNS:
			if (parse_runs(optarg, &o->runs))
				goto bad;
			break;
		case O_QUICK: o->quick = true; break;
		case O_FABRIC:
			if (bnet_set_fabric(&o->net, optarg))
				goto bad;
			break;
		case O_NETNS: o->net.netns = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n",
		        argv[optind]);
		return -EINVAL;
	}
	if (o->quick && !set_seconds)
		o->seconds = 0.2;
	if (bnet_check(&o->net, PROG, 2))
		return -EINVAL;
	if (o->net.netns)
		o->baseline = false; /* TCP and the ring run on one host */
	if (o->flush_every < 0)
		o->flush_every = (int)FARM_MAX(o->depth / 4, 1u);
	/* The first two CPUs we may use: one machine on each. */
	cpu_set_t set;
	if (o->pin && sched_getaffinity(0, sizeof(set), &set) == 0 &&
	    CPU_COUNT(&set) >= 2) {
		for (int i = 0, k = 0; i < CPU_SETSIZE && k < 2; i++)
			if (CPU_ISSET(i, &set))
				o->cpu[k++] = i;
	}
	return 0;
bad:
	fprintf(stderr, PROG ": bad value '%s' for --%s (see --help)\n", optarg,
	        lopts[c - O_SIZES].name);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse_opts(argc, argv, &o))
		return 2;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a blocked read returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGCHLD, SIG_DFL); /* the baselines reap their helpers */

	const char *tmp = "/dev/shm";
	if (access(tmp, W_OK) != 0) {
		tmp = getenv("TMPDIR");
		if (!tmp || !*tmp)
			tmp = "/tmp";
	}
	char base[512], sdir[600], cdir[600];
	if (snprintf(base, sizeof(base), "%s/msg_bench.XXXXXX", tmp) >=
	    (int)sizeof(base)) {
		fprintf(stderr, PROG ": temporary directory name too long\n");
		return 1;
	}
	if (!mkdtemp(base)) {
		fprintf(stderr, PROG ": cannot create a directory in %s: %s\n",
		        tmp, strerror(errno));
		return 1;
	}
	snprintf(sdir, sizeof(sdir), "%s/m%u", base, SERVER_ID);
	snprintf(cdir, sizeof(cdir), "%s/m%u", base, CLIENT_ID);

	int down[2] = {-1, -1}, up[2] = {-1, -1};
	if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		for (int i = 0; i < 2; i++) {
			if (down[i] >= 0)
				close(down[i]);
			if (up[i] >= 0)
				close(up[i]);
		}
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		close(down[0]);
		close(down[1]);
		close(up[0]);
		close(up[1]);
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	if (pid == 0) {
		close(down[1]);
		close(up[0]);
		/* Go when the client goes, however it goes. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		int rc = 1;
		if (getppid() != parent)
			bu_rm_tree(AT_FDCWD, base, 2);
		else if (bnet_enter(&o.net, SERVER_ID))
			rc = 1;
		else if (!interrupted)
			rc = server_main(&o, base, sdir, down[0], up[1],
			                 parent);
		fflush(NULL);
		_exit(rc);
	}
	close(down[0]);
	close(up[1]);

	bool serving = false;
	int rc = bnet_enter(&o.net, CLIENT_ID)
	                 ? -ENOENT
	                 : client_main(&o, cdir, down[1], up[0], &serving);
	/* Tell the server to go, and wait for it to have cleaned up; one
	 * that is still polling does not read its pipe: kill it (its files
	 * go with the directory below). */
	if (serving)
		kill(pid, SIGKILL);
	else if (write(down[1], "q", 1) != 1 && errno != EPIPE)
		fprintf(stderr, PROG ": cannot stop the server: %s\n",
		        strerror(errno));
	close(down[1]);
	close(up[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = -1;
			break;
		}
	}
	if (status != 0 && rc == 0 && !serving) {
		fprintf(stderr, PROG ": the server exited badly (status %#x)\n",
		        (unsigned)status);
		rc = -ECHILD;
	}
	bu_rm_tree(AT_FDCWD, base, 2);
	if (interrupted && rc) {
		fprintf(stderr, PROG ": interrupted\n");
		return 130;
	}
	return rc ? 1 : 0;
}
