/*
 * The TCP request/response baseline over loopback (baseline.h): a forked
 * server, this process the client.
 */
#include "baseline_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define IO_MIN (64u * 1024u)        /* smallest recv/send buffer */
#define IO_MAX (4u * 1024u * 1024u) /* largest */

struct tcp_cfg {
	size_t payload;
	unsigned inflight;
	bool busy;
	unsigned char *rbuf, *tbuf; /* made before fork; each side its own */
	size_t rlen, tlen;
};

static int set_nodelay(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		return -errno;
	return 0;
}

/* All of len bytes; in busy mode spinning on a full send buffer. */
static int send_all(int fd, const unsigned char *buf, size_t blen, uint64_t len,
                    bool busy)
{
	int flags = MSG_NOSIGNAL | (busy ? MSG_DONTWAIT : 0);
	while (len) {
		size_t n = len < blen ? (size_t)len : blen;
		ssize_t k = send(fd, buf, n, flags);
		if (k < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		len -= (uint64_t)k;
	}
	return 0;
}

/* In the helper: says what failed, returns the exit status for it. */
static int child_err(const char *what, int e)
{
	fprintf(stderr, BL_PFX "helper: %s: %s\n", what, strerror(e));
	return e;
}

static int tcp_server(void *arg, int wfd)
{
	const struct tcp_cfg *c = arg;
	struct sockaddr_in sa;
	socklen_t slen = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return child_err("socket", errno);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = 0;
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &slen) < 0)
		return child_err("bind/listen", errno);
	uint16_t port = ntohs(sa.sin_port);
	int err = bu_write_full(wfd, &port, sizeof(port));
	close(wfd);
	if (err)
		return child_err("writing the port", -err);
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return child_err("accept", errno);
	close(lfd);
	err = set_nodelay(fd);
	if (err)
		return child_err("TCP_NODELAY", -err);

	const uint64_t p = c->payload;
	const int rflags = c->busy ? MSG_DONTWAIT : 0;
	uint64_t in = 0, replied = 0;
	for (;;) {
		ssize_t n = recv(fd, c->rbuf, c->rlen, rflags);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return child_err("recv", errno);
		}
		if (n == 0)
			break;
		in += (uint64_t)n;
		uint64_t due = in / p - replied;
		if (due) {
			err = send_all(fd, c->tbuf, c->tlen, due * p, c->busy);
			if (err)
				return child_err("send", -err);
			replied += due;
		}
	}
	close(fd);
	if (in != replied * p) {
		fprintf(stderr,
		        BL_PFX "server: %llu bytes left over at the end\n",
		        (unsigned long long)(in - replied * p));
		return EPROTO;
	}
	return 0;
}

static int tcp_connect(uint16_t port, int *out)
{
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons(port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = -errno;
		fprintf(stderr, BL_PFX "socket: %s\n", strerror(errno));
		return err;
	}
	struct timeval tv = {.tv_sec = (time_t)(BL_STALL_NS / BU_NS_PER_S)};
	int err = 0;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		err = -errno;
	else
		err = set_nodelay(fd);
	if (!err &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		err = -errno;
	if (err) {
		fprintf(stderr, BL_PFX "connecting to 127.0.0.1:%u: %s\n",
		        (unsigned)port, strerror(-err));
		close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

struct tcp_run {
	uint64_t count;   /* replies in the window */
	uint64_t elapsed; /* ns */
};

static bool again(void)
{
	return errno == EAGAIN || errno == EINTR;
}

/* The client's state through a run. */
struct tcp_cl {
	int fd;
	const struct tcp_cfg *c;
	uint64_t p, win, warm, dur;
	uint64_t issued, sent, rcvd, first;
	uint64_t t0, tstart, last;
	unsigned spins;
	enum bl_phase ph;
	uint64_t *ts;
	struct bl_sampler *smp;
	struct tcp_run *run;
};

/* Send what is issued and not sent yet, as much as the socket takes. */
static int cl_send(struct tcp_cl *st)
{
	const struct tcp_cfg *c = st->c;
	if (st->sent >= st->issued * st->p)
		return 0;
	uint64_t left = st->issued * st->p - st->sent;
	size_t n = left < c->tlen ? (size_t)left : c->tlen;
	ssize_t k = send(st->fd, c->tbuf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (k > 0)
		st->sent += (uint64_t)k;
	else if (k < 0 && !again()) {
		int err = -errno;
		fprintf(stderr, BL_PFX "send: %s\n", strerror(errno));
		return err;
	}
	return 0;
}

/* The recv's flags: busy polling never blocks; a blocking client with
 * bytes still to send polls for both ways first. 0 or an error. */
static int cl_wait(struct tcp_cl *st, int *flags)
{
	*flags = 0;
	if (st->c->busy) {
		*flags = MSG_DONTWAIT;
		return 0;
	}
	if (st->sent >= st->issued * st->p)
		return 0;
	struct pollfd pfd = {.fd = st->fd, .events = POLLIN | POLLOUT};
	int r = poll(&pfd, 1, (int)(BL_STALL_NS / 1000000));
	if (r == 0) {
		fprintf(stderr, BL_PFX "no progress for 5 s\n");
		return -ETIMEDOUT;
	}
	if (r < 0 && errno != EINTR) {
		int err = -errno;
		fprintf(stderr, BL_PFX "poll: %s\n", strerror(errno));
		return err;
	}
	*flags = MSG_DONTWAIT;
	return 0;
}

/* Receive replies: the bytes received (0: none yet), or an error. */
static ssize_t cl_recv(struct tcp_cl *st, int flags)
{
	const struct tcp_cfg *c = st->c;
	uint64_t want = st->issued * st->p - st->rcvd;
	ssize_t k = recv(st->fd, c->rbuf,
	                 want < c->rlen ? (size_t)want : c->rlen, flags);
	if (k > 0)
		return k;
	if (k == 0) {
		fprintf(stderr, BL_PFX "server closed the connection\n");
		return -ECONNRESET;
	}
	if (errno == EINTR)
		return 0;
	if (errno != EAGAIN) {
		int err = -errno;
		fprintf(stderr, BL_PFX "recv: %s\n", strerror(errno));
		return err;
	}
	/* A blocking recv timed out (SO_RCVTIMEO). */
	if (!flags ||
	    (++st->spins % 4096 == 0 && bl_now_ns() - st->last > BL_STALL_NS)) {
		fprintf(stderr, BL_PFX "no progress for 5 s\n");
		return -ETIMEDOUT;
	}
	return 0;
}

/* Replies @done..@now_done completed: their latency, and the phases. */
static void cl_done(struct tcp_cl *st, uint64_t done, uint64_t now_done)
{
	uint64_t t = bl_now_ns();
	st->last = t;
	if (st->ph == BL_MEASURE) {
		for (uint64_t j = done; j < now_done; j++)
			bl_sampler_add(st->smp, t - st->ts[j % st->win]);
		if (t - st->tstart >= st->dur) {
			st->run->count = now_done - st->first;
			st->run->elapsed = t - st->tstart;
			st->ph = BL_DRAIN;
		}
	} else if (st->ph == BL_WARMUP && t - st->t0 >= st->warm) {
		st->first = now_done;
		st->tstart = t;
		st->ph = BL_MEASURE;
	}
}

/* Clean close: our end of stream, then the server's. */
static int cl_close(int fd, const struct tcp_cfg *c)
{
	if (shutdown(fd, SHUT_WR) < 0) {
		int err = -errno;
		fprintf(stderr, BL_PFX "shutdown: %s\n", strerror(errno));
		return err;
	}
	for (;;) {
		ssize_t k = recv(fd, c->rbuf, c->rlen, 0);
		if (k == 0)
			return 0;
		if (k > 0) {
			fprintf(stderr, BL_PFX "unexpected data from server\n");
			return -EPROTO;
		}
		if (errno == EINTR)
			continue;
		int err = errno == EAGAIN ? -ETIMEDOUT : -errno;
		fprintf(stderr, BL_PFX "waiting for the server to close: %s\n",
		        strerror(-err));
		return err;
	}
}

/* The client side: runs the window, then drains and closes cleanly. */
static int tcp_client(int fd, const struct tcp_cfg *c, double seconds,
                      uint64_t *ts, struct bl_sampler *smp, struct tcp_run *run)
{
	struct tcp_cl st = {.fd = fd,
	                    .c = c,
	                    .p = c->payload,
	                    .win = c->inflight,
	                    .ph = BL_WARMUP,
	                    .ts = ts,
	                    .smp = smp,
	                    .run = run};
	bl_durations(seconds, &st.warm, &st.dur);
	st.t0 = st.last = bl_now_ns();
	for (;;) {
		uint64_t done = st.rcvd / st.p;
		if (st.ph != BL_DRAIN && st.sent == st.issued * st.p &&
		    st.issued - done < st.win) {
			uint64_t t = bl_now_ns();
			while (st.issued - done < st.win)
				ts[st.issued++ % st.win] = t;
		}
		int err = cl_send(&st);
		if (err)
			return err;
		if (st.rcvd == st.issued * st.p) {
			if (st.ph == BL_DRAIN)
				break;
			continue;
		}
		int flags;
		if ((err = cl_wait(&st, &flags)))
			return err;
		ssize_t k = cl_recv(&st, flags);
		if (k < 0)
			return (int)k;
		st.rcvd += (uint64_t)k;
		uint64_t now_done = st.rcvd / st.p;
		if (now_done != done)
			cl_done(&st, done, now_done);
	}
	return cl_close(fd, c);
}

int bl_tcp_rr(size_t payload, unsigned inflight, bool busy, double seconds,
              struct bl_result *out)
{
	if (payload < 1 || payload > BL_TCP_MAX_PAYLOAD || inflight < 1 ||
	    inflight > BL_TCP_MAX_INFLIGHT || bl_check_seconds(seconds) ||
	    !out) {
		fprintf(stderr, BL_PFX "bl_tcp_rr: invalid arguments\n");
		return -EINVAL;
	}
	size_t io = payload * inflight;
	io = io < IO_MIN ? IO_MIN : io > IO_MAX ? IO_MAX : io;
	struct tcp_cfg c = {.payload = payload,
	                    .inflight = inflight,
	                    .busy = busy,
	                    .rlen = io,
	                    .tlen = io};
	struct bl_sampler smp = {0};
	uint64_t *ts = calloc(inflight, sizeof(*ts));
	c.rbuf = malloc(io);
	c.tbuf = calloc(1, io);
	int err = bl_sampler_init(&smp);
	if (!err && (!ts || !c.rbuf || !c.tbuf))
		err = -ENOMEM;
	if (err) {
		fprintf(stderr, BL_PFX "out of memory\n");
		goto out_free;
	}
	memset(c.rbuf, 0, io);

	int rfd = -1;
	pid_t pid = bl_spawn(tcp_server, &c, &rfd);
	if (pid < 0) {
		err = (int)pid;
		goto out_free;
	}
	uint16_t port;
	err = bl_await_child(pid, rfd, &port, sizeof(port));
	if (err)
		goto out_free;
	int fd = -1;
	err = tcp_connect(port, &fd);
	struct tcp_run run = {0};
	if (!err) {
		err = tcp_client(fd, &c, seconds, ts, &smp, &run);
		close(fd);
	}
	err = bl_end(pid, err);
	if (err)
		goto out_free;
	memset(out, 0, sizeof(*out));
	out->rate = (double)run.count * (double)BU_NS_PER_S /
	            (double)(run.elapsed ? run.elapsed : 1);
	bl_sampler_finish(&smp, out);
out_free:
	free(smp.v);
	free(ts);
	free(c.rbuf);
	free(c.tbuf);
	return err;
}

int bl_tcp_best(size_t payload, unsigned max_inflight, double seconds_each,
                struct bl_result *out, char *which, size_t whichlen,
                struct bl_result *single)
{
	struct bl_result one = {0};
	if (max_inflight < 1 || max_inflight > BL_TCP_MAX_INFLIGHT || !out) {
		fprintf(stderr, BL_PFX "bl_tcp_best: invalid arguments\n");
		return -EINVAL;
	}
	struct bl_result best = {0};
	unsigned best_inflight = 0;
	bool best_busy = false;
	for (int i = 0; i < 4; i++) {
		unsigned inflight = i < 2 ? 1 : max_inflight;
		bool busy = i % 2;
		if (i >= 2 && max_inflight == 1)
			break;
		struct bl_result r;
		int err = bl_tcp_rr(payload, inflight, busy, seconds_each, &r);
		if (err)
			return err;
		if (inflight == 1 && r.rate > one.rate)
			one = r;
		if (!best_inflight || r.rate > best.rate) {
			best = r;
			best_inflight = inflight;
			best_busy = busy;
		}
	}
	*out = best;
	if (single)
		*single = one;
	if (which && whichlen)
		snprintf(which, whichlen, "tcp %s, %u in flight",
		         best_busy ? "busy" : "blocking", best_inflight);
	return 0;
}
