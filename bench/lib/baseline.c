/*
 * baseline: TCP loopback and shared-memory ring reference figures
 * (baseline.h says what each measures).
 */
#include "baseline.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h> /* isfinite */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PFX         "baseline: "
#define NS_PER_S    1000000000ull
#define WARMUP_NS   (NS_PER_S / 10)
#define STALL_NS    (5 * NS_PER_S)
#define MAX_SECONDS 3600.0
#define MAX_SAMPLES (1u << 20)
#define IO_MIN      (64u * 1024u)        /* smallest recv/send buffer */
#define IO_MAX      (4u * 1024u * 1024u) /* largest */
/* Apart by two cache lines: the adjacent-line prefetcher pairs them. */
#define SEP        128u
#define SLOT_WORDS 7u
#define RING_STOP  UINT64_MAX /* consumed count / request word: stop */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static int check_seconds(double seconds)
{
	return isfinite(seconds) && seconds > 0 && seconds <= MAX_SECONDS
	               ? 0
	               : -EINVAL;
}

/* Warm-up, then measured window, both in ns. */
static void durations(double seconds, uint64_t *warm, uint64_t *dur)
{
	*dur = (uint64_t)(seconds * (double)NS_PER_S);
	if (*dur < 1)
		*dur = 1;
	*warm = *dur < 4 * WARMUP_NS ? *dur / 4 : WARMUP_NS;
}

/* ---- latency samples: every stride'th, stride doubling when full -------- */

struct sampler {
	uint64_t *v;
	size_t n;
	uint64_t stride, skip;
};

static int sampler_init(struct sampler *s)
{
	s->v = malloc(MAX_SAMPLES * sizeof(*s->v));
	s->n = 0;
	s->stride = 1;
	s->skip = 0;
	return s->v ? 0 : -ENOMEM;
}

static inline void sampler_add(struct sampler *s, uint64_t x)
{
	if (s->skip) {
		s->skip--;
		return;
	}
	if (s->n == MAX_SAMPLES) {
		/* Keep the even ones: x is then exactly the next one due. */
		for (size_t i = 0; i < MAX_SAMPLES / 2; i++)
			s->v[i] = s->v[2 * i];
		s->n = MAX_SAMPLES / 2;
		s->stride *= 2;
	}
	s->v[s->n++] = x;
	s->skip = s->stride - 1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest rank. */
static double sampler_pct(const struct sampler *s, double q)
{
	if (!s->n)
		return 0;
	double x = q * (double)s->n;
	size_t rank = (size_t)x;
	if ((double)rank < x)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	return (double)s->v[rank - 1];
}

static void sampler_finish(struct sampler *s, struct bl_result *r)
{
	qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
	r->p50_ns = sampler_pct(s, 0.50);
	r->p99_ns = sampler_pct(s, 0.99);
}

/* ---- the helper process ------------------------------------------------ */

/* Runs in the child; returns 0 or a positive errno, its exit status. */
typedef int (*child_fn)(void *arg, int wfd);

static int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Forks a child running fn(arg, wfd), where wfd is the write end of a pipe
 * whose read end goes to *rfd. The child dies with the parent (or exits at
 * once if the parent is already gone). Returns the pid or a negative errno.
 */
static pid_t spawn(child_fn fn, void *arg, int *rfd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		int err = -errno;
		fprintf(stderr, PFX "pipe: %s\n", strerror(errno));
		return err;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int err = -errno;
		fprintf(stderr, PFX "fork: %s\n", strerror(errno));
		close(p[0]);
		close(p[1]);
		return err;
	}
	if (pid == 0) {
		close(p[0]);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(ECHILD);
		int code = fn(arg, p[1]);
		_exit(code < 0 ? -code : code > 255 ? 255 : code);
	}
	close(p[1]);
	*rfd = p[0];
	return pid;
}

/*
 * Reaps the child (killing it first when @kill_it). Returns 0 when it
 * exited with status 0, the negated exit status otherwise (the child exits
 * with a positive errno), -ECHILD when a signal ended it.
 */
static int reap(pid_t pid, bool kill_it)
{
	int st;
	if (kill_it)
		kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			int err = -errno;
			fprintf(stderr, PFX "waitpid: %s\n", strerror(errno));
			return err;
		}
	}
	if (kill_it)
		return 0;
	if (WIFEXITED(st)) {
		int code = WEXITSTATUS(st);
		if (code)
			fprintf(stderr, PFX "helper process failed: %s\n",
			        strerror(code));
		return -code;
	}
	fprintf(stderr, PFX "helper process killed by signal %d\n",
	        WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return -ECHILD;
}

/*
 * Waits for the child's ready message. When the pipe ends early the child
 * failed: reaps it and returns its error.
 */
static int await_child(pid_t pid, int rfd, void *msg, size_t len)
{
	int err = read_full(rfd, msg, len);
	close(rfd);
	if (err == -EPIPE) {
		err = reap(pid, false);
		if (!err) {
			fprintf(stderr,
			        PFX "helper exited before it was ready\n");
			err = -EPIPE;
		}
		return err;
	}
	if (err) {
		fprintf(stderr, PFX "reading from the helper: %s\n",
		        strerror(-err));
		reap(pid, true);
	}
	return err;
}

/* ---- TCP ------------------------------------------------------------- */

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
	fprintf(stderr, PFX "helper: %s: %s\n", what, strerror(e));
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
	int err = write_full(wfd, &port, sizeof(port));
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
		fprintf(stderr, PFX "server: %llu bytes left over at the end\n",
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
		fprintf(stderr, PFX "socket: %s\n", strerror(errno));
		return err;
	}
	struct timeval tv = {.tv_sec = (time_t)(STALL_NS / NS_PER_S)};
	int err = 0;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		err = -errno;
	else
		err = set_nodelay(fd);
	if (!err &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		err = -errno;
	if (err) {
		fprintf(stderr, PFX "connecting to 127.0.0.1:%u: %s\n",
		        (unsigned)port, strerror(-err));
		close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

enum phase { WARMUP, MEASURE, DRAIN };

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
	enum phase ph;
	uint64_t *ts;
	struct sampler *smp;
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
		fprintf(stderr, PFX "send: %s\n", strerror(errno));
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
	int r = poll(&pfd, 1, (int)(STALL_NS / 1000000));
	if (r == 0) {
		fprintf(stderr, PFX "no progress for 5 s\n");
		return -ETIMEDOUT;
	}
	if (r < 0 && errno != EINTR) {
		int err = -errno;
		fprintf(stderr, PFX "poll: %s\n", strerror(errno));
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
		fprintf(stderr, PFX "server closed the connection\n");
		return -ECONNRESET;
	}
	if (errno == EINTR)
		return 0;
	if (errno != EAGAIN) {
		int err = -errno;
		fprintf(stderr, PFX "recv: %s\n", strerror(errno));
		return err;
	}
	/* A blocking recv timed out (SO_RCVTIMEO). */
	if (!flags ||
	    (++st->spins % 4096 == 0 && now_ns() - st->last > STALL_NS)) {
		fprintf(stderr, PFX "no progress for 5 s\n");
		return -ETIMEDOUT;
	}
	return 0;
}

/* Replies @done..@now_done completed: their latency, and the phases. */
static void cl_done(struct tcp_cl *st, uint64_t done, uint64_t now_done)
{
	uint64_t t = now_ns();
	st->last = t;
	if (st->ph == MEASURE) {
		for (uint64_t j = done; j < now_done; j++)
			sampler_add(st->smp, t - st->ts[j % st->win]);
		if (t - st->tstart >= st->dur) {
			st->run->count = now_done - st->first;
			st->run->elapsed = t - st->tstart;
			st->ph = DRAIN;
		}
	} else if (st->ph == WARMUP && t - st->t0 >= st->warm) {
		st->first = now_done;
		st->tstart = t;
		st->ph = MEASURE;
	}
}

/* Clean close: our end of stream, then the server's. */
static int cl_close(int fd, const struct tcp_cfg *c)
{
	if (shutdown(fd, SHUT_WR) < 0) {
		int err = -errno;
		fprintf(stderr, PFX "shutdown: %s\n", strerror(errno));
		return err;
	}
	for (;;) {
		ssize_t k = recv(fd, c->rbuf, c->rlen, 0);
		if (k == 0)
			return 0;
		if (k > 0) {
			fprintf(stderr, PFX "unexpected data from server\n");
			return -EPROTO;
		}
		if (errno == EINTR)
			continue;
		int err = errno == EAGAIN ? -ETIMEDOUT : -errno;
		fprintf(stderr, PFX "waiting for the server to close: %s\n",
		        strerror(-err));
		return err;
	}
}

/* The client side: runs the window, then drains and closes cleanly. */
static int tcp_client(int fd, const struct tcp_cfg *c, double seconds,
                      uint64_t *ts, struct sampler *smp, struct tcp_run *run)
{
	struct tcp_cl st = {.fd = fd,
	                    .c = c,
	                    .p = c->payload,
	                    .win = c->inflight,
	                    .ph = WARMUP,
	                    .ts = ts,
	                    .smp = smp,
	                    .run = run};
	durations(seconds, &st.warm, &st.dur);
	st.t0 = st.last = now_ns();
	for (;;) {
		uint64_t done = st.rcvd / st.p;
		if (st.ph != DRAIN && st.sent == st.issued * st.p &&
		    st.issued - done < st.win) {
			uint64_t t = now_ns();
			while (st.issued - done < st.win)
				ts[st.issued++ % st.win] = t;
		}
		int err = cl_send(&st);
		if (err)
			return err;
		if (st.rcvd == st.issued * st.p) {
			if (st.ph == DRAIN)
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
	    inflight > BL_TCP_MAX_INFLIGHT || check_seconds(seconds) || !out) {
		fprintf(stderr, PFX "bl_tcp_rr: invalid arguments\n");
		return -EINVAL;
	}
	size_t io = payload * inflight;
	io = io < IO_MIN ? IO_MIN : io > IO_MAX ? IO_MAX : io;
	struct tcp_cfg c = {.payload = payload,
	                    .inflight = inflight,
	                    .busy = busy,
	                    .rlen = io,
	                    .tlen = io};
	struct sampler smp = {0};
	uint64_t *ts = calloc(inflight, sizeof(*ts));
	c.rbuf = malloc(io);
	c.tbuf = calloc(1, io);
	int err = sampler_init(&smp);
	if (!err && (!ts || !c.rbuf || !c.tbuf))
		err = -ENOMEM;
	if (err) {
		fprintf(stderr, PFX "out of memory\n");
		goto out_free;
	}
	memset(c.rbuf, 0, io);

	int rfd = -1;
	pid_t pid = spawn(tcp_server, &c, &rfd);
	if (pid < 0) {
		err = (int)pid;
		goto out_free;
	}
	uint16_t port;
	err = await_child(pid, rfd, &port, sizeof(port));
	if (err)
		goto out_free;
	int fd = -1;
	err = tcp_connect(port, &fd);
	struct tcp_run run = {0};
	if (!err) {
		err = tcp_client(fd, &c, seconds, ts, &smp, &run);
		close(fd);
	}
	if (err) {
		reap(pid, true);
		goto out_free;
	}
	err = reap(pid, false);
	if (err)
		goto out_free;
	memset(out, 0, sizeof(*out));
	out->rate = (double)run.count * (double)NS_PER_S /
	            (double)(run.elapsed ? run.elapsed : 1);
	sampler_finish(&smp, out);
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
		fprintf(stderr, PFX "bl_tcp_best: invalid arguments\n");
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

/* ---- shared-memory rings --------------------------------------------- */

struct slot {
	_Atomic uint64_t seq; /* message number, from 1 */
	uint64_t w[SLOT_WORDS];
};
_Static_assert(sizeof(struct slot) == 64, "a slot is one cache line");
/* Shared between processes: only lock-free (address-free) atomics work. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

/* Shared: the consumer's count, alone in its SEP bytes, then the slots. */
struct ring_hdr {
	alignas(SEP) _Atomic uint64_t consumed;
};
_Static_assert(sizeof(struct ring_hdr) == SEP, "header is SEP bytes");

struct ring {
	struct ring_hdr *hdr;
	struct slot *slot;
	uint32_t nslots;
};

struct producer {
	uint64_t n;      /* next message number */
	uint64_t cached; /* consumer's count, as last read */
	uint32_t pos;
};

struct consumer {
	uint64_t n; /* next message number expected */
	uint32_t pos;
};

static size_t ring_bytes(unsigned slots)
{
	size_t b =
	        sizeof(struct ring_hdr) + (size_t)slots * sizeof(struct slot);
	return (b + SEP - 1) / SEP * SEP;
}

/* Lays a ring out at base (SEP-aligned, zeroed). */
static struct ring ring_at(void *base, unsigned slots)
{
	struct ring_hdr *hdr = base;
	struct ring r = {
	        .hdr = hdr, .slot = (struct slot *)(hdr + 1), .nslots = slots};
	return r;
}

/*
 * Producer: the slot for the next message, or NULL when the consumer said
 * stop. Reads the consumer's count only when the cached one says the ring
 * is full. The caller writes the payload, then calls ring_commit().
 */
static inline struct slot *ring_reserve(struct ring r, struct producer *p)
{
	if (p->n - 1 - p->cached >= r.nslots) {
		for (;;) {
			uint64_t c = atomic_load_explicit(&r.hdr->consumed,
			                                  memory_order_acquire);
			if (c == RING_STOP)
				return NULL;
			p->cached = c;
			if (p->n - 1 - c < r.nslots)
				break;
			cpu_relax();
		}
	}
	return &r.slot[p->pos];
}

/* Producer: publishes the message written in s (release). */
static inline void ring_commit(struct ring r, struct producer *p,
                               struct slot *s)
{
	atomic_store_explicit(&s->seq, p->n, memory_order_release);
	p->n++;
	if (++p->pos == r.nslots)
		p->pos = 0;
}

/* Consumer: the next message's slot once it is there (acquire), or NULL. */
static inline const struct slot *ring_peek(struct ring r,
                                           const struct consumer *c)
{
	const struct slot *s = &r.slot[c->pos];
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != c->n)
		return NULL;
	return s;
}

/* Consumer: done reading that message; hands its slot back (release). */
static inline void ring_release(struct ring r, struct consumer *c)
{
	atomic_store_explicit(&r.hdr->consumed, c->n, memory_order_release);
	c->n++;
	if (++c->pos == r.nslots)
		c->pos = 0;
}

/* Every payload word of message n is n: 7 of them, so their xor is n. */
static inline void slot_fill(struct slot *s, uint64_t v)
{
	for (unsigned i = 0; i < SLOT_WORDS; i++)
		s->w[i] = v;
}

static inline bool slot_ok(const struct slot *s, uint64_t v)
{
	uint64_t x = 0;
	for (unsigned i = 0; i < SLOT_WORDS; i++)
		x ^= s->w[i];
	return x == v && s->w[0] == v;
}

struct ring_cfg {
	struct ring a, b; /* a: to the parent (stream) or to the child (rr) */
};

static int ready(int wfd)
{
	char one = 1;
	int err = write_full(wfd, &one, 1);
	close(wfd);
	return -err;
}

static int stream_producer(void *arg, int wfd)
{
	const struct ring r = ((const struct ring_cfg *)arg)->a;
	struct producer p = {.n = 1};
	int err = ready(wfd);
	if (err)
		return err;
	for (;;) {
		struct slot *s = ring_reserve(r, &p);
		if (!s)
			return 0;
		slot_fill(s, p.n);
		ring_commit(r, &p, s);
	}
}

/* Echoes each request as its reply until the stop request. */
static int rr_server(void *arg, int wfd)
{
	const struct ring a = ((const struct ring_cfg *)arg)->a;
	const struct ring b = ((const struct ring_cfg *)arg)->b;
	struct producer p = {.n = 1};
	struct consumer q = {.n = 1};
	int err = ready(wfd);
	if (err)
		return err;
	for (;;) {
		const struct slot *rq;
		while (!(rq = ring_peek(a, &q)))
			cpu_relax();
		if (rq->w[0] == RING_STOP) {
			ring_release(a, &q);
			return 0;
		}
		struct slot *rp = ring_reserve(b, &p);
		if (!rp)
			return EPROTO;
		memcpy(rp->w, rq->w, sizeof(rp->w));
		ring_commit(b, &p, rp);
		ring_release(a, &q);
	}
}

/* Called every so often while spinning: 0, or the run failed. */
static int spin_check(pid_t pid, uint64_t last)
{
	if (now_ns() - last > STALL_NS) {
		fprintf(stderr, PFX "ring: no progress for 5 s\n");
		return -ETIMEDOUT;
	}
	siginfo_t si;
	si.si_pid = 0;
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	    si.si_pid == pid) {
		fprintf(stderr, PFX "ring: the helper process ended early\n");
		return -ECHILD;
	}
	return 0;
}

enum ring_kind { STREAM, RR };

static int ring_consume_stream(const struct ring_cfg *c, pid_t pid,
                               double seconds, struct bl_result *out)
{
	const struct ring r = c->a;
	struct consumer q = {.n = 1};
	uint64_t warm, dur, first = 0;
	durations(seconds, &warm, &dur);
	uint64_t t0 = now_ns(), tstart = 0, last = t0;
	enum phase ph = WARMUP;
	unsigned spins = 0;
	for (;;) {
		const struct slot *s = ring_peek(r, &q);
		if (!s) {
			cpu_relax();
			if (++spins % 65536 == 0) {
				int err = spin_check(pid, last);
				if (err)
					return err;
			}
			continue;
		}
		uint64_t got = q.n;
		if (!slot_ok(s, got)) {
			fprintf(stderr, PFX "ring: message %llu is wrong\n",
			        (unsigned long long)got);
			return -EPROTO;
		}
		ring_release(r, &q);
		if (got % 4096)
			continue;
		uint64_t t = now_ns();
		last = t;
		if (ph == WARMUP && t - t0 >= warm) {
			first = got;
			tstart = t;
			ph = MEASURE;
		} else if (ph == MEASURE && t - tstart >= dur) {
			out->rate = (double)(got - first) * (double)NS_PER_S /
			            (double)(t - tstart);
			break;
		}
	}
	atomic_store_explicit(&r.hdr->consumed, RING_STOP,
	                      memory_order_release);
	return 0;
}

static int ring_client_rr(const struct ring_cfg *c, pid_t pid, double seconds,
                          struct sampler *smp, struct bl_result *out)
{
	const struct ring a = c->a, b = c->b;
	struct producer p = {.n = 1};
	struct consumer q = {.n = 1};
	uint64_t warm, dur, first = 0;
	durations(seconds, &warm, &dur);
	uint64_t t0 = now_ns(), tstart = 0;
	enum phase ph = WARMUP;
	struct slot *rq;
	for (uint64_t i = 1;; i++) {
		uint64_t ts = now_ns();
		if (!(rq = ring_reserve(a, &p)))
			return -EPROTO; /* cannot happen: no one says stop */
		slot_fill(rq, i);
		ring_commit(a, &p, rq);
		const struct slot *rp;
		unsigned spins = 0;
		while (!(rp = ring_peek(b, &q))) {
			cpu_relax();
			if (++spins % 65536 == 0) {
				int err = spin_check(pid, ts);
				if (err)
					return err;
			}
		}
		uint64_t t = now_ns();
		if (!slot_ok(rp, i)) {
			fprintf(stderr, PFX "ring: reply %llu is wrong\n",
			        (unsigned long long)i);
			return -EPROTO;
		}
		ring_release(b, &q);
		if (ph == MEASURE) {
			sampler_add(smp, t - ts);
			if (t - tstart >= dur) {
				out->rate = (double)(i - first) *
				            (double)NS_PER_S /
				            (double)(t - tstart);
				break;
			}
		} else if (t - t0 >= warm) {
			first = i;
			tstart = t;
			ph = MEASURE;
		}
	}
	if (!(rq = ring_reserve(a, &p)))
		return -EPROTO;
	slot_fill(rq, RING_STOP);
	ring_commit(a, &p, rq);
	return 0;
}

static int ring_run(enum ring_kind kind, unsigned slots, double seconds,
                    struct bl_result *out)
{
	const char *fn = kind == STREAM ? "bl_ring_stream" : "bl_ring_rr";
	if (slots < 2 || slots > BL_RING_MAX_SLOTS || check_seconds(seconds) ||
	    !out) {
		fprintf(stderr, PFX "%s: invalid arguments\n", fn);
		return -EINVAL;
	}
	size_t rb = ring_bytes(slots);
	size_t len = kind == STREAM ? rb : 2 * rb;
	void *base = mmap(NULL, len, PROT_READ | PROT_WRITE,
	                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		int err = -errno;
		fprintf(stderr, PFX "%s: mmap: %s\n", fn, strerror(errno));
		return err;
	}
	struct ring_cfg c = {.a = ring_at(base, slots)};
	if (kind == RR)
		c.b = ring_at((char *)base + rb, slots);
	/* Fault the pages in before fork: both sides then map them. */
	memset(base, 0, len);

	struct sampler smp = {0};
	struct bl_result r = {0};
	int err = kind == RR ? sampler_init(&smp) : 0;
	if (err) {
		fprintf(stderr, PFX "out of memory\n");
		goto out_unmap;
	}
	int rfd = -1;
	pid_t pid =
	        spawn(kind == STREAM ? stream_producer : rr_server, &c, &rfd);
	if (pid < 0) {
		err = (int)pid;
		goto out_unmap;
	}
	char one;
	err = await_child(pid, rfd, &one, 1);
	if (err)
		goto out_unmap;
	if (kind == STREAM)
		err = ring_consume_stream(&c, pid, seconds, &r);
	else
		err = ring_client_rr(&c, pid, seconds, &smp, &r);
	if (err) {
		reap(pid, true);
		goto out_unmap;
	}
	err = reap(pid, false);
	if (err)
		goto out_unmap;
	if (kind == RR)
		sampler_finish(&smp, &r);
	*out = r;
out_unmap:
	free(smp.v);
	munmap(base, len);
	return err;
}

int bl_ring_stream(unsigned slots, double seconds, struct bl_result *out)
{
	return ring_run(STREAM, slots, seconds, out);
}

int bl_ring_rr(unsigned slots, double seconds, struct bl_result *out)
{
	return ring_run(RR, slots, seconds, out);
}
