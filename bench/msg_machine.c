/*
 * msg_bench: a machine (fabric and messaging on one loop) and the server
 * process (msg_bench.h; what is measured: msg_bench.c's head).
 */
#include "msg_bench.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Latencies: all of them up to MAX_SAMPLES, then every other one kept and
 * every stride'th taken (the stride doubling), so they span the run. */
void sampler_reset(struct sampler *s)
{
	s->n = 0;
	s->stride = 1;
	s->skip = 0;
	s->max = 0;
}

void sampler_pcts(struct sampler *s, double *p50, double *p99)
{
	*p50 = *p99 = 0;
	if (!s->n)
		return;
	qsort(s->v, s->n, sizeof(*s->v), bu_cmp_u64);
	*p50 = (double)s->v[s->n / 2];
	*p99 = (double)s->v[BU_MIN(s->n - 1, s->n * 99 / 100)];
}

/* Pin the calling process to @cpu (-1: leave it). */
void pin_to(int cpu, const char *who)
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

/* Open the fabric and messaging of machine @id and say hello. */
int machine_open(const struct opts *o, uint32_t id, const char *dir,
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
int machine_connect(struct machine *m, uint32_t peer, struct hello *ph)
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

void machine_close(struct machine *m)
{
	if (m->loop)
		farm_loop_close(m->loop);
	if (m->msg && farm_msg_destroy(m->msg))
		fprintf(stderr, PROG ": farm_msg_destroy failed\n");
	if (m->fab)
		farm_fabric_close(m->fab);
	memset(m, 0, sizeof(*m));
}

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
	/* Answered in place: the echo is copied from the request's ring
	 * straight into the reply's (farm_msg_reply_begin). */
	int rc;
	void *p = farm_msg_reply_begin(loop, &in->token, in->len, &rc);
	if (p) {
		memcpy(p, in->payload, in->len);
		rc = farm_msg_reply_end(loop);
	}
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
		s->ow_warm_end = bu_now_ns() + req.warm_ns;
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
		uint64_t now = bu_now_ns();
		if (s->ow_state == 1 && now >= s->ow_warm_end) {
			s->ow_t0 = now;
			s->ow_c0 = s->count;
			s->ow_state = 2;
		} else if (s->ow_state == 2 && now - s->ow_t0 >= s->ow_dur) {
			struct oneway_res r = {s->count - s->ow_c0,
			                       now - s->ow_t0};
			s->ow_state = 0;
			int rc = bu_write_full(s->up, &r, sizeof(r));
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
int server_main(const struct opts *o, const char *base, const char *dir,
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
	if (bu_write_full(up, &h, sizeof(h)) || rc)
		goto out;
	rc = bu_read_full(down, &ph, sizeof(ph), &interrupted);
	if (rc)
		goto out;
	rc = machine_connect(&m, CLIENT_ID, &ph);
	int32_t st = rc;
	if (bu_write_full(up, &st, sizeof(st)) || rc)
		goto out;
	for (;;) {
		char c = 0;
		if (bu_read_full(down, &c, 1, &interrupted))
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
