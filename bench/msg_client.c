/*
 * msg_bench: the client process, its request/response and one-way runs,
 * and the baselines measured in the same run (msg_bench.h; what is
 * measured: msg_bench.c's head).
 */
#include "msg_bench.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
		sl->t0 = now ? now : bu_now_ns();
	int rc = farm_msg_call(b->m.loop, SERVER_ID, 0, T_ECHO, b->buf, b->size,
	                       CALL_TIMEOUT_NS, rr_cont, sl);
	if (BU_UNLIKELY(rc)) {
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
	uint64_t now = sl->t0 ? bu_now_ns() : 0;
	b->outstanding--;
	if (BU_UNLIKELY(status || len != b->size)) {
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
	uint64_t start = bu_now_ns();
	uint64_t warm_end = start + (uint64_t)warm_ns(b->o);
	uint64_t dur = (uint64_t)(b->o->seconds * 1e9);
	uint64_t t0 = 0, t1 = 0, d0 = 0, d1 = 0;
	uint64_t last_done = 0, last_progress = start;
	for (unsigned i = 0; i < depth && !b->stop; i++)
		rr_issue(b, &b->slots[i], bu_now_ns());
	unsigned n = 0;
	while (b->outstanding) {
		(void)farm_loop_poll(loop);
		if (++n & 15)
			continue;
		uint64_t now = bu_now_ns();
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
	uint64_t give_up = bu_now_ns() + CALL_TIMEOUT_NS;
	int rc;
	while ((rc = farm_msg_call(b->m.loop, SERVER_ID, 0, T_CTL, &req,
	                           sizeof(req), CALL_TIMEOUT_NS, ctl_cont,
	                           &d)) == -ENOBUFS &&
	       bu_now_ns() < give_up)
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
	uint64_t deadline = bu_now_ns() + warm + dur + STALL_NS;
	struct pollfd pfd = {.fd = b->up, .events = POLLIN};
	struct oneway_res r;
	unsigned batch = o->send_batch ? o->send_batch : UINT32_MAX;
	for (unsigned n = 1;; n++) {
		for (unsigned i = 0; i < batch; i++) {
			rc = farm_msg_send(loop, SERVER_ID, 0, T_SINK, b->buf,
			                   size);
			if (BU_UNLIKELY(rc)) {
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
		if (bu_now_ns() > deadline) {
			fprintf(stderr, PROG ": the server reported no "
			                     "one-way count\n");
			return -ETIMEDOUT;
		}
	}
	farm_msg_stats_get(NULL, loop, &st1);
	rc = bu_read_full(b->up, &r, sizeof(r), &interrupted);
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
	/* On the two CPUs the messaging machines had: the ring's round trip
	 * is what ours is compared with (the goal), so both are measured
	 * alike. */
	pin_to(o->cpu[0], "client");
	br->rr_rc = interrupted ? -EINTR
	                        : bl_ring_rr_pinned(br->slots, o->seconds,
	                                            o->cpu[1], &br->rr);
	if (br->rr_rc == 0)
		printf("baseline ring request/response: %.3f M/s p50 %.2f us "
		       "p99 %.2f us\n",
		       br->rr.rate / 1e6, br->rr.p50_ns / 1e3,
		       br->rr.p99_ns / 1e3);
	fflush(stdout);
}

/* The client's buffers for @o's sizes (*@maxsz: the largest). 0 or
 * -ENOMEM. */
static int client_alloc(struct bench *b, const struct opts *o,
                        struct size_res **res, uint32_t *maxsz)
{
	*res = calloc(o->nsizes, sizeof(**res));
	*maxsz = 0;
	for (unsigned i = 0; i < o->nsizes; i++)
		*maxsz = BU_MAX(*maxsz, o->sizes[i]);
	b->buf = calloc(1, *maxsz + 1);
	b->lat.v = malloc(MAX_SAMPLES * sizeof(*b->lat.v));
	b->slots = calloc(o->depth, sizeof(*b->slots));
	if (!*res || !b->buf || !b->lat.v || !b->slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < *maxsz; i++)
		b->buf[i] = (uint8_t)(i * 7 + 1);
	for (unsigned i = 0; i < o->depth; i++)
		b->slots[i].b = b;
	return 0;
}

/* Open the client machine and connect it with the server's (through the
 * pipes @down and @up). 0 or an error (said). */
static int client_connect(struct bench *b, const struct opts *o,
                          const char *dir, uint32_t maxsz, int down, int up)
{
	struct hello h, sh;
	int rc = machine_open(o, CLIENT_ID, dir, &b->m, &h);
	if (rc)
		return rc;
	if (maxsz > farm_msg_max_payload(b->m.msg)) {
		fprintf(stderr,
		        PROG ": sizes must be at most %" PRIu32
		             " bytes with a %" PRIu32 "-byte ring\n",
		        farm_msg_max_payload(b->m.msg), o->ring_size);
		return -EMSGSIZE;
	}
	rc = bu_read_full(up, &sh, sizeof(sh), &interrupted);
	if (rc == 0 && sh.status)
		rc = sh.status; /* the server said why */
	else if (rc)
		fprintf(stderr, PROG ": no word from the server: %s\n",
		        farm_strerror(rc));
	if (rc)
		return rc;
	rc = bu_write_full(down, &h, sizeof(h));
	if (rc == 0)
		rc = machine_connect(&b->m, SERVER_ID, &sh);
	int32_t st;
	if (rc == 0)
		rc = bu_read_full(up, &st, sizeof(st), &interrupted);
	return rc == 0 ? st : rc;
}

/* What the runs are: the header lines. */
static void client_header(const struct opts *o)
{
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
}

/* The messaging runs, pinned, with the server told to serve and then to
 * idle. *@serving as client_main's. */
static int client_measure(struct bench *b, const struct opts *o, int down,
                          struct size_res *res, bool *serving)
{
	pin_to(o->cpu[0], "client");
	int rc = bu_write_full(down, "r", 1);
	if (rc)
		return rc;
	*serving = true;
	/* Connect both ways (lazily, on first use) before timing anything. */
	for (int i = 0; i < 100 && rc == 0; i++)
		rc = ctl_call(b, CTL_SYNC, 0, 0);
	uint64_t t0 = bu_now_ns();
	if (rc == 0)
		rc = measure(b, res);
	if (rc == 0)
		printf("messaging measured in %.1f s\n",
		       (double)(bu_now_ns() - t0) / 1e9);
	/* The server goes back to its pipe: no CPU during the baselines. */
	int rc2 = ctl_call(b, CTL_IDLE, 0, 0);
	*serving = rc2 != 0;
	return rc ? rc : rc2;
}

/* Everything but the server's side. *@serving: whether the server may
 * still be polling (it could not be told to stop). */
int client_main(const struct opts *o, const char *dir, int down, int up,
                bool *serving)
{
	struct bench b;
	memset(&b, 0, sizeof(b));
	b.o = o;
	b.up = up;
	struct base_res br;
	memset(&br, 0, sizeof(br));
	struct size_res *res = NULL;
	uint32_t maxsz;
	*serving = false;
	int rc = client_alloc(&b, o, &res, &maxsz);
	if (!rc)
		rc = client_connect(&b, o, dir, maxsz, down, up);
	if (rc)
		goto out;
	client_header(o);
	cpu_set_t mask;
	bool have_mask = sched_getaffinity(0, sizeof(mask), &mask) == 0;
	rc = client_measure(&b, o, down, res, serving);
	if (rc)
		goto out;
	/* The baselines' processes go where the scheduler puts them, but
	 * for the ring's request/response (run_baselines). */
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
