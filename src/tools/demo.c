/*
 * The demo job: machines of a local cluster use one-sided operations on
 * each other's regions and say what happened. Machine i of N:
 *   1. WRITEs a greeting into machine (i+1)'s region;
 *   2. joins a barrier: CAS-increments a counter in machine 0's region, then
 *      READs it until all N arrived;
 *   3. shows the greeting machine (i-1) wrote into its own memory (a local
 *      load: no CPU of ours took part in the write), and READs the greeting
 *      machine (i+1) wrote into machine (i+2)'s region;
 *   4. times 20000 64-byte READs from machine (i+1), 16 outstanding;
 *   5. exchanges RPCs with machine (i+1) over the messaging layer (its
 *      message-region descriptor is READ from that machine's region): each
 *      request carries two numbers, the reply their sum, checked;
 *   6. joins a second barrier, so nobody leaves while others read it;
 *      machine 0, whose counter the others poll, leaves last.
 * Descriptors come from the peers' machine.info files (same host), until
 * the messaging layer exchanges them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <farm/farm.h>

#include "tools/tools.h"
#include "util/common.h"
#include "util/config.h"

#define GREETING_OFF(i) (4096u * ((i) + 1))
#define GREETING_LEN    64u
#define BARRIER_OFF     0u
#define DEPART_OFF      64u
#define OP_TIMEOUT_NS   (5ull * 1000000000ull)
#define MSGINFO_OFF     0x10000u /* where a machine publishes its msg info */
#define T_ADD           1
#define RPCS            20000u
#define RPC_WINDOW      16u

struct msginfo {
	char addr[256];
	farm_mr_desc desc;
};

struct peer {
	uint32_t id;
	farm_ep *ep;
	farm_mr_desc desc;
};

struct demo {
	uint32_t me, n;
	farm_cq *cq;
	farm_mr *lmr;
	uint8_t *buf;       /* registered scratch */
	struct peer *peers; /* indexed by machine id; [me] unused */
};

#define say(d, ...)                                                         \
	do {                                                                \
		char line_[512];                                            \
		int n_ = snprintf(line_, sizeof(line_), "[m%u] ", (d)->me); \
		n_ += snprintf(line_ + n_, sizeof(line_) - (size_t)n_,      \
		               __VA_ARGS__);                                \
		if (n_ > (int)sizeof(line_) - 2)                            \
			n_ = (int)sizeof(line_) - 2;                        \
		line_[n_++] = '\n';                                         \
		ssize_t w_ = write(STDOUT_FILENO, line_, (size_t)n_);       \
		(void)w_;                                                   \
	} while (0)

/* Post one request and wait for its completion (bounded). */
static int run_one(struct demo *d, farm_ep *ep, farm_wr *wr)
{
	int rc = farm_ep_post(ep, wr, NULL);
	if (rc)
		return rc;
	uint64_t deadline = farm_now_ns() + OP_TIMEOUT_NS;
	unsigned spins = 0;
	for (;;) {
		farm_wc wc;
		int n = farm_cq_poll(d->cq, 1, &wc);
		if (n < 0)
			return n;
		if (n == 1 && wc.wr_id == wr->wr_id)
			return wc.status;
		if (farm_now_ns() > deadline)
			return -ETIMEDOUT;
		if (++spins >
		    1000) { /* back off: this is a demo, not a bench */
			struct timespec ts = {0, 20000};
			nanosleep(&ts, NULL);
		}
	}
}

/* Fetch-and-add on a word of machine 0, out of CAS: retry with the value
 * found. Returns the value before the add, or a negative code. */
static int64_t remote_add(struct demo *d, uint64_t off, unsigned *tries)
{
	uint64_t *res = (uint64_t *)(void *)d->buf;
	uint64_t seen = 0;
	for (*tries = 1;; (*tries)++) {
		farm_wr wr = farm_wr_cas(1, res, d->lmr, &d->peers[0].desc, off,
		                         seen, seen + 1);
		int rc = run_one(d, d->peers[0].ep, &wr);
		if (rc)
			return rc;
		if (*res == seen)
			return (int64_t)seen;
		seen = *res;
	}
}

static int barrier(struct demo *d, uint64_t target)
{
	farm_ep *ep0 = d->peers[0].ep;
	const farm_mr_desc *r0 = &d->peers[0].desc;
	uint64_t *res = (uint64_t *)(void *)d->buf;
	unsigned tries;
	int64_t old = remote_add(d, BARRIER_OFF, &tries);
	if (old < 0)
		return (int)old;
	uint64_t seen = (uint64_t)old;
	say(d,
	    "barrier %" PRIu64 ": CAS on m0's counter %" PRIu64 " -> %" PRIu64
	    " (%u attempt%s)",
	    target / d->n, seen, seen + 1, tries, tries == 1 ? "" : "s");
	uint64_t deadline = farm_now_ns() + 10 * 1000000000ull;
	for (;;) {
		farm_wr wr = farm_wr_read(2, res, d->lmr, 8, r0, BARRIER_OFF);
		int rc = run_one(d, ep0, &wr);
		if (rc)
			return rc;
		if (*res >= target)
			return 0;
		if (farm_now_ns() > deadline)
			return -ETIMEDOUT;
		struct timespec ts = {0, 50000};
		nanosleep(&ts, NULL);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int time_reads(struct demo *d, struct peer *p, uint64_t region_size)
{
	enum { OPS = 20000, DEPTH = 16 };
	uint64_t *lat = malloc(OPS * sizeof(*lat));
	uint64_t posted_at[DEPTH];
	if (!lat)
		return -ENOMEM;
	uint64_t rng = d->me * 7919u + 1;
	unsigned posted = 0, done = 0;
	uint64_t t0 = farm_now_ns();
	int rc = 0;
	while (done < OPS) {
		while (posted < OPS && posted - done < DEPTH) {
			unsigned slot = posted % DEPTH;
			uint64_t off =
			        (farm_rand64(&rng) % (region_size / 64)) * 64;
			farm_wr wr =
			        farm_wr_read(posted, d->buf + 64 + slot * 64,
			                     d->lmr, 64, &p->desc, off);
			posted_at[slot] = farm_now_ns();
			rc = farm_ep_post(p->ep, &wr, NULL);
			if (rc)
				goto out;
			posted++;
		}
		farm_wc wc[DEPTH];
		int n = farm_cq_poll(d->cq, DEPTH, wc);
		if (n < 0) {
			rc = n;
			goto out;
		}
		uint64_t now = farm_now_ns();
		for (int i = 0; i < n; i++) {
			if (wc[i].status) {
				rc = wc[i].status;
				goto out;
			}
			lat[done++] = now - posted_at[wc[i].wr_id % DEPTH];
		}
	}
	double secs = (double)(farm_now_ns() - t0) / 1e9;
	qsort(lat, OPS, sizeof(*lat), cmp_u64);
	say(d,
	    "%d random 64-byte READs from m%u, %d outstanding: %.2f M/s, "
	    "median %" PRIu64 " ns, p99 %" PRIu64 " ns",
	    OPS, p->id, DEPTH, OPS / secs / 1e6, lat[OPS / 2],
	    lat[OPS * 99 / 100]);
out:
	free(lat);
	return rc;
}

/* ---- messaging: RPCs to the next machine, driven on the loop's thread --- */

struct rpc_demo {
	farm_msg *msg;
	farm_loop *loop;
	pthread_t thread;
	int evfd;        /* the loop thread signals the main thread */
	uint32_t target; /* machine we call */
	unsigned issued, done, wrong;
	int err;
	uint64_t t0, t1;
	uint64_t *lat, *sent_at;
};

static void h_add(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)arg;
	uint64_t v[2], sum;
	int rc;
	if (in->len != sizeof(v)) {
		rc = farm_msg_reply_error(loop, &in->token, -EINVAL);
	} else {
		memcpy(v, in->payload, sizeof(v));
		sum = v[0] + v[1];
		rc = farm_msg_reply(loop, &in->token, &sum, sizeof(sum));
	}
	if (rc)
		fprintf(stderr, "demo: cannot reply to m%u: %s\n",
		        in->src_machine, farm_strerror(rc));
}

static void signal_main(struct rpc_demo *r)
{
	uint64_t one = 1;
	ssize_t w = write(r->evfd, &one, 8);
	(void)w;
}

static void rpc_issue(farm_loop *loop, struct rpc_demo *r);

static void rpc_done(farm_loop *loop, void *ctx, int status, const void *reply,
                     uint32_t len)
{
	struct rpc_demo *r = ctx;
	uint64_t now = farm_now_ns();
	if (status) {
		if (!r->err)
			r->err = status;
	} else {
		uint64_t sum;
		unsigned i = r->done;
		if (len != 8)
			r->wrong++;
		memcpy(&sum, reply, 8);
		/* request i (in order per channel) asked for i + 2i */
		if (sum != 3ull * i)
			r->wrong++;
		r->lat[i] = now - r->sent_at[i % RPC_WINDOW];
	}
	if (++r->done == RPCS || (r->err && r->done == r->issued)) {
		r->t1 = now;
		signal_main(r);
		return;
	}
	rpc_issue(loop, r);
}

static void rpc_issue(farm_loop *loop, struct rpc_demo *r)
{
	while (!r->err && r->issued < RPCS &&
	       r->issued - r->done < RPC_WINDOW) {
		uint64_t v[2] = {r->issued, 2ull * r->issued};
		r->sent_at[r->issued % RPC_WINDOW] = farm_now_ns();
		int rc = farm_msg_call(loop, r->target, 0, T_ADD, v, sizeof(v),
		                       OP_TIMEOUT_NS, rpc_done, r);
		if (rc) {
			r->err = rc;
			if (r->done == r->issued) {
				signal_main(r);
				return;
			}
			break;
		}
		r->issued++;
	}
}

static void rpc_start(farm_loop *loop, void *ctx, int status)
{
	struct rpc_demo *r = ctx;
	if (status) {
		r->err = status;
		signal_main(r);
		return;
	}
	r->t0 = farm_now_ns();
	rpc_issue(loop, r);
}

static void *loop_main(void *arg)
{
	struct rpc_demo *r = arg;
	int rc = farm_loop_open(r->msg, 0, &r->loop);
	if (rc)
		r->err = rc;
	signal_main(r);
	if (!rc) {
		farm_loop_run(r->loop);
		farm_loop_close(r->loop);
	}
	return NULL;
}

static int wait_main(struct rpc_demo *r)
{
	uint64_t v;
	return read(r->evfd, &v, 8) == 8 ? 0 : -errno;
}

int farm_demo_job(const struct farm_config *cfg, farm_fabric *fab,
                  farm_region *region)
{
	struct demo d = {.me = cfg->machine_id, .n = cfg->npeers + 1};
	struct rpc_demo rd = {.evfd = -1};
	bool loop_started = false;
	int rc;
	for (unsigned i = 0; i < cfg->npeers; i++)
		if (cfg->peers[i].id >= d.n || cfg->peers[i].id == d.me) {
			fprintf(stderr, "demo: machine ids must be 0..%u\n",
			        d.n - 1);
			return -EINVAL;
		}
	d.peers = calloc(d.n, sizeof(*d.peers));
	d.buf = aligned_alloc(64, 4096);
	if (!d.peers || !d.buf) {
		rc = -ENOMEM;
		goto out;
	}
	memset(d.buf, 0, 4096);
	rc = farm_mr_reg(fab, d.buf, 4096, FARM_ACCESS_LOCAL, &d.lmr);
	if (rc)
		goto out;
	rc = farm_cq_create(fab, 256, 0, &d.cq);
	if (rc)
		goto out;
	for (unsigned i = 0; i < cfg->npeers; i++) {
		const struct farm_config_peer *cp = &cfg->peers[i];
		struct peer *p = &d.peers[cp->id];
		uint32_t id;
		char addr[512];
		p->id = cp->id;
		rc = farm_read_machine_info(cp->addr, &id, addr, sizeof(addr),
		                            &p->desc);
		if (rc == 0 && id != cp->id)
			rc = -EINVAL;
		if (rc == 0)
			rc = farm_ep_connect(fab, d.cq, cp->id, addr, NULL,
			                     &p->ep);
		if (rc) {
			fprintf(stderr,
			        "demo m%u: cannot reach m%u at %s: %s\n", d.me,
			        cp->id, cp->addr, farm_strerror(rc));
			goto out;
		}
	}
	say(&d, "up: %s fabric, %" PRIu64 " MiB region at %p%s, %u peers",
	    farm_fabric_provider(fab), farm_region_size(region) >> 20,
	    farm_region_base(region),
	    farm_region_is_huge(region) ? " (huge pages)" : "", d.n - 1);
	if (d.me == 0) { /* machine 0 also reaches itself for the barrier */
		rc = farm_fabric_address(fab, (char *)d.buf + 1024, 1024);
		if (rc < 0)
			goto out;
		d.peers[0].id = 0;
		d.peers[0].desc = farm_region_desc(region);
		rc = farm_ep_connect(fab, d.cq, 0, (char *)d.buf + 1024, NULL,
		                     &d.peers[0].ep);
		if (rc)
			goto out;
	}

	/* Messaging: publish our message region in our region (peers READ
	 * it after the first barrier) and serve on a loop thread. */
	farm_msg_attr ma = {.nthreads = 1, .max_machines = d.n};
	rc = farm_msg_create(fab, &ma, &rd.msg);
	if (rc)
		goto out;
	rc = farm_msg_handle(rd.msg, T_ADD, h_add, NULL);
	if (rc)
		goto out;
	struct msginfo *mi =
	        (struct msginfo *)(void *)((uint8_t *)farm_region_base(region) +
	                                   MSGINFO_OFF);
	rc = farm_fabric_address(fab, mi->addr, sizeof(mi->addr));
	if (rc < 0)
		goto out;
	mi->desc = farm_msg_desc(rd.msg);
	rd.evfd = eventfd(0, 0);
	rd.lat = calloc(RPCS, sizeof(*rd.lat));
	rd.sent_at = calloc(RPC_WINDOW, sizeof(*rd.sent_at));
	if (rd.evfd < 0 || !rd.lat || !rd.sent_at) {
		rc = -ENOMEM;
		goto out;
	}
	if (pthread_create(&rd.thread, NULL, loop_main, &rd)) {
		rc = -EAGAIN;
		goto out;
	}
	loop_started = true;
	rc = wait_main(&rd);
	if (!rc)
		rc = rd.err;
	if (rc)
		goto out;

	/* 1. WRITE a greeting into the next machine. */
	uint32_t next = (d.me + 1) % d.n, after = (d.me + 2) % d.n;
	char *g = (char *)d.buf + 512;
	memset(g, 0, GREETING_LEN);
	snprintf(g, GREETING_LEN, "hello m%u, from m%u", next, d.me);
	farm_wr wr = farm_wr_write(3, g, d.lmr, GREETING_LEN,
	                           &d.peers[next].desc, GREETING_OFF(d.me));
	rc = run_one(&d, d.peers[next].ep, &wr);
	if (rc)
		goto out;
	say(&d, "WRITE %u B into m%u's region at +0x%x: \"%s\"", GREETING_LEN,
	    next, GREETING_OFF(d.me), g);

	/* 2. Everyone has written. */
	rc = barrier(&d, d.n);
	if (rc)
		goto out;

	/* 3. What landed here, and what landed two machines on. */
	uint32_t prev = (d.me + d.n - 1) % d.n;
	const char *mine =
	        (const char *)farm_region_base(region) + GREETING_OFF(prev);
	say(&d,
	    "my memory at +0x%x (written by m%u, no CPU of mine involved): "
	    "\"%.*s\"",
	    GREETING_OFF(prev), prev, (int)GREETING_LEN, mine);
	if (after != d.me) {
		char *r = (char *)d.buf + 256;
		wr = farm_wr_read(4, r, d.lmr, GREETING_LEN,
		                  &d.peers[after].desc, GREETING_OFF(next));
		rc = run_one(&d, d.peers[after].ep, &wr);
		if (rc)
			goto out;
		say(&d, "READ %u B from m%u's region at +0x%x: \"%.*s\"",
		    GREETING_LEN, after, GREETING_OFF(next), (int)GREETING_LEN,
		    r);
	}

	/* 4. A feel for the speed. */
	rc = time_reads(&d, &d.peers[next], d.peers[next].desc.len);
	if (rc)
		goto out;

	/* 5. RPCs to the next machine over the message rings. */
	for (uint32_t i = 0; i < d.n; i++) {
		if (i == d.me)
			continue;
		struct msginfo *pi = (struct msginfo *)(void *)(d.buf + 1024);
		wr = farm_wr_read(5, pi, d.lmr, sizeof(*pi), &d.peers[i].desc,
		                  MSGINFO_OFF);
		rc = run_one(&d, d.peers[i].ep, &wr);
		if (rc)
			goto out;
		pi->addr[sizeof(pi->addr) - 1] = 0;
		rc = farm_msg_add_peer(rd.msg, i, pi->addr, &pi->desc);
		if (rc)
			goto out;
	}
	if (next != d.me) {
		rd.target = next;
		rc = farm_loop_post(rd.loop, rpc_start, &rd);
		if (!rc)
			rc = wait_main(&rd);
		if (!rc)
			rc = rd.err;
		if (!rc && rd.wrong)
			rc = FARM_ECORRUPT;
		if (rc)
			goto out;
		double secs = (double)(rd.t1 - rd.t0) / 1e9;
		qsort(rd.lat, RPCS, sizeof(*rd.lat), cmp_u64);
		say(&d,
		    "%u RPCs to m%u (a + b, checked), %u in flight: %.0f k/s, "
		    "median %" PRIu64 " us, p99 %" PRIu64
		    " us (loops park when idle)",
		    RPCS, next, RPC_WINDOW, RPCS / secs / 1e3,
		    rd.lat[RPCS / 2] / 1000, rd.lat[RPCS * 99 / 100] / 1000);
	}

	/* 6. Leave together; machine 0 last, as the others read its memory
	 * until they see the barrier complete. */
	rc = barrier(&d, 2ull * d.n);
	if (rc)
		goto out;
	if (d.me != 0) {
		unsigned tries;
		int64_t old = remote_add(&d, DEPART_OFF, &tries);
		rc = old < 0 ? (int)old : 0;
	} else {
		const _Atomic uint64_t *gone =
		        (const _Atomic uint64_t
		                 *)(void *)((uint8_t *)farm_region_base(
		                                    region) +
		                            DEPART_OFF);
		uint64_t deadline = farm_now_ns() + 10 * 1000000000ull;
		while (atomic_load_explicit(gone, memory_order_acquire) <
		       d.n - 1) {
			if (farm_now_ns() > deadline) {
				rc = -ETIMEDOUT;
				break;
			}
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
		}
	}
out:
	if (rc)
		fprintf(stderr, "demo m%u: %s\n", d.me, farm_strerror(rc));
	if (loop_started) {
		farm_loop_stop(rd.loop);
		pthread_join(rd.thread, NULL);
	}
	if (rd.msg && farm_msg_destroy(rd.msg))
		fprintf(stderr, "demo m%u: messaging still busy\n", d.me);
	if (rd.evfd >= 0)
		close(rd.evfd);
	free(rd.lat);
	free(rd.sent_at);
	if (d.peers)
		for (unsigned i = 0; i < d.n; i++)
			farm_ep_destroy(d.peers[i].ep);
	if (d.cq && farm_cq_destroy(d.cq))
		fprintf(stderr, "demo m%u: completion queue still busy\n",
		        d.me);
	farm_mr_dereg(d.lmr);
	free(d.buf);
	free(d.peers);
	return rc;
}
