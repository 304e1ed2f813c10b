/*
 * msg_count: the instructions of one messaging round trip, counted, not
 * timed. msg_bench's timings swing with the host's load and the plain
 * ring's bimodal baseline; a change of tens of instructions on the
 * round trip is lost in them. This runs both machines of msg_bench's
 * rr1 (a 64-byte echo, one call in flight) in one process and one
 * thread, each on its own shm fabric and farm_msg, and drives their
 * loops in turn: the client's pass posts the request, the server's pass
 * delivers it and posts the echo, the client's next pass completes the
 * call and issues the next one. Nothing else runs, no clock is read
 * inside the measured round trips, so the count is the same run after
 * run.
 *
 * Counted two ways:
 *   - by the CPU's instruction counter (perf_event_open, user space
 *     only), where the kernel allows it: instructions per round trip,
 *     both sides;
 *   - under callgrind, per function: the measured round trips alone are
 *     collected (the setup and warm-up are not):
 *       valgrind --tool=callgrind --collect-atstart=no \
 *         build/bench/msg_count --rtts 100000
 *       callgrind_annotate callgrind.out.<pid>
 *     and the total divided by --rtts is the same figure.
 * Options: --rtts N (100000), --warm N (1000), --size B (64).
 * Output: a line of figures, then one JSON line (bench/README.md; no
 * goals: the targets are msg_bench's).
 */
#include "benchutil.h"
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <farm/farm.h>

#ifdef FARM_HAVE_CALLGRIND_H
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#endif

#define PROG   "msg_count"
#define T_ECHO 1

struct mach {
	char dir[128];
	farm_fabric *fab;
	farm_msg *msg;
	farm_loop *loop;
};

struct run {
	uint8_t buf[4096];
	uint32_t size;
	uint64_t left; /* calls still to issue */
	uint64_t done; /* calls completed */
	int err;
	farm_loop *client;
};

static void echo(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct run *r = arg;
	/* As msg_bench's server: the echo written in place. */
	int rc;
	void *p = farm_msg_reply_begin(loop, &in->token, in->len, &rc);
	if (p) {
		memcpy(p, in->payload, in->len);
		rc = farm_msg_reply_end(loop);
	}
	if (rc && !r->err)
		r->err = rc;
}

static void issue(struct run *r);

static void done(farm_loop *loop, void *ctx, int status, const void *reply,
                 uint32_t len)
{
	(void)loop;
	(void)reply;
	struct run *r = ctx;
	if (status || len != r->size) {
		if (!r->err)
			r->err = status ? status : -EPROTO;
		return;
	}
	r->done++;
	if (r->left)
		issue(r);
}

static void issue(struct run *r)
{
	r->left--;
	int rc = farm_msg_call(r->client, 1, 0, T_ECHO, r->buf, r->size, 0,
	                       done, r);
	if (rc && !r->err)
		r->err = rc;
}

static int mach_open(struct mach *m, uint32_t id, struct run *r)
{
	snprintf(m->dir, sizeof(m->dir), "/dev/shm/" PROG ".%d.%" PRIu32,
	         (int)getpid(), id);
	farm_fabric_attr fa = {
	        .provider = "shm", .machine_id = id, .data_dir = m->dir};
	int rc = farm_fabric_open(&fa, &m->fab);
	if (rc)
		return rc;
	farm_msg_attr ma = {
	        .nthreads = 1, .max_machines = 2, .busy_poll = true};
	rc = farm_msg_create(m->fab, &ma, &m->msg);
	if (rc)
		return rc;
	return farm_msg_handle(m->msg, T_ECHO, echo, r);
}

static int mach_link(struct mach *m, uint32_t peer_id, struct mach *peer)
{
	char addr[512];
	int rc = farm_fabric_address(peer->fab, addr, sizeof(addr));
	if (rc < 0)
		return rc;
	farm_mr_desc d = farm_msg_desc(peer->msg);
	rc = farm_msg_add_peer(m->msg, peer_id, addr, &d);
	return rc ? rc : farm_loop_open(m->msg, 0, &m->loop);
}

static void mach_close(struct mach *m)
{
	if (m->loop)
		farm_loop_close(m->loop);
	if (m->msg && farm_msg_destroy(m->msg))
		fprintf(stderr, PROG ": farm_msg_destroy failed\n");
	if (m->fab)
		farm_fabric_close(m->fab);
	if (m->dir[0])
		bu_rm_tree(AT_FDCWD, m->dir, 2);
}

/* The user-space instruction counter of this thread, or -1. */
static int insn_counter(void)
{
	struct perf_event_attr pa = {.type = PERF_TYPE_HARDWARE,
	                             .size = sizeof(pa),
	                             .config = PERF_COUNT_HW_INSTRUCTIONS,
	                             .disabled = 1,
	                             .exclude_kernel = 1,
	                             .exclude_hv = 1};
	return (int)syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0);
}

static uint64_t insn_read(int fd)
{
	uint64_t v = 0;
	if (fd < 0 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		return 0;
	return v;
}

/* @n round trips: issue one call, then the two loops' passes in turn
 * (the client's posts a request or completes a call and posts the next,
 * the server's answers) until the last completes. */
static int round_trips(struct run *r, struct mach *c, struct mach *s,
                       uint64_t n)
{
	r->left = n;
	r->done = 0;
	issue(r);
	while (!r->err && r->done < n) {
		(void)farm_loop_poll(c->loop);
		(void)farm_loop_poll(s->loop);
	}
	return r->err;
}

static int parse(int argc, char **argv, uint64_t *rtts, uint64_t *warm,
                 uint32_t *size)
{
	static const struct option lo[] = {{"rtts", 1, NULL, 'n'},
	                                   {"warm", 1, NULL, 'w'},
	                                   {"size", 1, NULL, 's'},
	                                   {NULL, 0, NULL, 0}};
	int c;
	unsigned v;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (bu_parse_u(optarg, 1, 100000000, &v))
				return -EINVAL;
			*rtts = v;
			break;
		case 'w':
			if (bu_parse_u(optarg, 0, 100000000, &v))
				return -EINVAL;
			*warm = v;
			break;
		case 's':
			if (bu_parse_u(optarg, 0, 4096, &v))
				return -EINVAL;
			*size = v;
			break;
		default: return -EINVAL;
		}
	}
	return optind == argc ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
	uint64_t rtts = 100000, warm = 1000;
	struct run r = {.size = 64};
	if (parse(argc, argv, &rtts, &warm, &r.size)) {
		fprintf(stderr, "usage: " PROG " [--rtts N] [--warm N] "
		                "[--size BYTES]\n");
		return 2;
	}
	memset(r.buf, 0x5a, sizeof(r.buf));
	struct mach c = {0}, s = {0};
	int rc = mach_open(&c, 0, &r);
	if (!rc)
		rc = mach_open(&s, 1, &r);
	if (!rc)
		rc = mach_link(&c, 1, &s);
	if (!rc)
		rc = mach_link(&s, 0, &c);
	r.client = c.loop;
	if (!rc && warm)
		rc = round_trips(&r, &c, &s, warm);
	int fd = insn_counter();
	uint64_t t0 = 0, t1 = 0, i0 = 0, i1 = 0;
	if (!rc) {
		if (fd >= 0)
			(void)ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
		t0 = bu_now_ns();
		i0 = insn_read(fd);
		CALLGRIND_TOGGLE_COLLECT;
		rc = round_trips(&r, &c, &s, rtts);
		CALLGRIND_TOGGLE_COLLECT;
		i1 = insn_read(fd);
		t1 = bu_now_ns();
	}
	if (fd >= 0)
		close(fd);
	mach_close(&c);
	mach_close(&s);
	if (rc) {
		fprintf(stderr, PROG ": %s\n", farm_strerror(rc));
		return 1;
	}
	double ipr = fd >= 0 ? (double)(i1 - i0) / (double)rtts : 0;
	double nspr = (double)(t1 - t0) / (double)rtts;
	printf("%" PRIu64 " round trips of %" PRIu32 " B, both machines on one "
	       "thread: %.0f instructions each (user space%s), %.0f ns each\n",
	       rtts, r.size, ipr, fd >= 0 ? "" : ": no counter here", nspr);
	printf("{\"bench\": \"msg_count\", \"size\": %" PRIu32
	       ", \"rtts\": %" PRIu64 ", \"insns_per_rtt\": %.1f, "
	       "\"ns_per_rtt\": %.1f, \"goals\": {}}\n",
	       r.size, rtts, ipr, nspr);
	return 0;
}
