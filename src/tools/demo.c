/*
 * The demo job: the machines of a local cluster share one address space
 * and say what they did in it. Machine i of N:
 *   1. allocates a mailbox object (the allocator takes a region from the
 *      address space, with backups on the next machines of its ring) and
 *      learns the others' mailbox addresses by RPC;
 *   2. WRITEs a greeting into machine (i+1)'s mailbox by global address:
 *      one one-sided WRITE, the region's descriptor fetched once from its
 *      primary;
 *   3. after a barrier (one-way messages), shows the greeting machine
 *      (i-1) left in its own mailbox (a local load: no CPU of ours took
 *      part) and READs the one in machine (i+2)'s;
 *   4. times 20000 64-byte one-sided READs of machine (i+1)'s mailbox,
 *      16 outstanding;
 *   5. allocates an object with machine (i+1)'s mailbox as locality hint:
 *      the allocation is shipped to that machine, which places it next to
 *      the hint;
 *   6. ships 20000 RPCs (a + b, checked) to the machine that stores
 *      machine (i+1)'s mailbox, 16 outstanding, and reports the rate;
 *   7. joins a last barrier, so nobody leaves while others still use it.
 * All of it runs on the machine's event loop; this thread starts each
 * step there and waits for it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <farm/farm.h>

#include "alloc/galloc.h"
#include "node/node.h"
#include "tools/tools.h"
#include "util/common.h"

#define T_MBOX    1 /* -> the machine's mailbox address */
#define T_ARRIVE  2 /* one-way: a machine reached barrier <payload> */
#define T_ADD     3 /* two uint64 -> their sum */
#define MBOX_SIZE 256u
#define NREADS    20000u
#define NCALLS    20000u
#define WINDOW    16u
/* A step's bound, a failure and never a wait: 20,000 RPCs took close to
 * 10 s under the sanitizers on a loaded 2-core host. */
#define STEP_NS (30ull * 1000000000ull)
/* One call's bound, a failure too: messaging's default (1 s) is a live
 * peer's answer on a quiet host, and a loaded 2-core host parks a loop
 * longer now and then (one 20,000-call run failed at it under the CI's
 * load). */
#define CALL_NS (10ull * 1000000000ull)

struct demo {
	farm_node *node;
	farm_loop *loop;
	farm_as *as;
	farm_galloc *ga;
	uint32_t me, n;
	farm_gaddr mbox; /* ours; set before anyone asks */
	farm_gaddr mboxes[FARM_NODE_MAX_MACHINES];
	_Atomic unsigned arrived[4]; /* barrier arrivals, by phase */
	uint8_t *buf;                /* registered scratch */
	farm_mr *lmr;
	/* the step in progress (loop thread) and its waiter (main thread) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, status;
	farm_gaddr a;
	unsigned issued, completed;
	uint64_t t0, t1, bad;
};

#define SAY(d, ...)                        \
	do {                               \
		printf("[m%u] ", (d)->me); \
		printf(__VA_ARGS__);       \
		printf("\n");              \
		fflush(stdout);            \
	} while (0)

static void step_done(struct demo *d, int status)
{
	pthread_mutex_lock(&d->lock);
	d->status = status;
	d->done = 1;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

/* Run @fn on the loop, then wait until it (or its continuations) calls
 * step_done, at most STEP_NS. */
static int step(struct demo *d, farm_work_fn fn)
{
	pthread_mutex_lock(&d->lock);
	d->done = 0;
	d->status = 0;
	pthread_mutex_unlock(&d->lock);
	int rc = farm_loop_post(d->loop, fn, d);
	if (rc)
		return rc;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(STEP_NS / 1000000000ull);
	pthread_mutex_lock(&d->lock);
	while (!d->done && rc == 0)
		rc = pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	int st = d->done ? d->status : -ETIMEDOUT;
	pthread_mutex_unlock(&d->lock);
	return st;
}

/* ---- handlers ------------------------------------------------------------ */

static void h_mbox(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct demo *d = arg;
	/* Acquire: pairs with the release store of the mailbox's address
	 * once it is allocated (demo_mailboxes). */
	farm_gaddr a = __atomic_load_n(&d->mbox, __ATOMIC_ACQUIRE);
	int rc = a ? farm_msg_reply(loop, &in->token, &a, sizeof(a))
	           : farm_msg_reply_error(loop, &in->token, -EAGAIN);
	if (rc)
		fprintf(stderr, "demo m%u: cannot reply: %s\n", d->me,
		        farm_strerror(rc));
}

static void h_arrive(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop;
	struct demo *d = arg;
	uint32_t phase;
	if (in->len != sizeof(phase))
		return;
	memcpy(&phase, in->payload, sizeof(phase));
	if (phase < 4) {
		atomic_fetch_add(&d->arrived[phase], 1);
		pthread_mutex_lock(&d->lock);
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
	}
}

static void h_add(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct demo *d = arg;
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
		fprintf(stderr, "demo m%u: cannot reply: %s\n", d->me,
		        farm_strerror(rc));
}

/* ---- steps (run on the loop) --------------------------------------------- */

static void alloc_done(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	(void)loop;
	struct demo *d = ctx;
	d->a = a;
	step_done(d, status);
}

static void s_alloc_mbox(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	int rc = status ? status
	                : farm_galloc_alloc(d->ga, loop, MBOX_SIZE,
	                                    FARM_GADDR_NULL, alloc_done, d);
	if (rc)
		step_done(d, rc);
}

static uint32_t ask_whom; /* machine whose mailbox s_ask_mbox asks for */

static void mbox_reply(farm_loop *loop, void *ctx, int status, const void *r,
                       uint32_t len)
{
	(void)loop;
	struct demo *d = ctx;
	if (!status && len == sizeof(farm_gaddr))
		memcpy(&d->a, r, sizeof(d->a));
	else if (!status)
		status = FARM_ECORRUPT;
	step_done(d, status);
}

static void s_ask_mbox(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	int rc = status ? status
	                : farm_msg_call(loop, ask_whom, 0, T_MBOX, NULL, 0,
	                                CALL_NS, mbox_reply, d);
	if (rc)
		step_done(d, rc);
}

static void op_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	step_done(ctx, status);
}

static void s_greet(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	uint32_t next = (d->me + 1) % d->n;
	snprintf((char *)d->buf, 64, "hello m%u, from m%u", next, d->me);
	int rc = status ? status
	                : farm_as_write(d->as, loop, d->mboxes[next] + 16,
	                                d->buf, d->lmr, 64, op_done, d);
	if (rc)
		step_done(d, rc);
}

static uint32_t phase_arg;

static void s_arrive(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	int rc = status;
	for (uint32_t m = 0; m < d->n && !rc; m++)
		if (m != d->me)
			rc = farm_msg_send(loop, m, 0, T_ARRIVE, &phase_arg,
			                   sizeof(phase_arg));
	step_done(d, rc);
}

static int barrier(struct demo *d, uint32_t phase)
{
	phase_arg = phase;
	int rc = step(d, s_arrive);
	if (rc)
		return rc;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(STEP_NS / 1000000000ull);
	pthread_mutex_lock(&d->lock);
	while (atomic_load(&d->arrived[phase]) < d->n - 1 && rc == 0)
		rc = pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	bool ok = atomic_load(&d->arrived[phase]) >= d->n - 1;
	pthread_mutex_unlock(&d->lock);
	return ok ? 0 : -ETIMEDOUT;
}

static void s_read_far(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	uint32_t far = (d->me + 2) % d->n;
	memset(d->buf, 0, 64);
	int rc = status ? status
	                : farm_as_read(d->as, loop, d->mboxes[far] + 16, d->buf,
	                               d->lmr, 64, op_done, d);
	if (rc)
		step_done(d, rc);
}

static void read_one(farm_loop *loop, struct demo *d);

static void read_done(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	d->completed++;
	if (status)
		d->status = status;
	if (d->completed == NREADS || d->status) {
		if (d->completed == d->issued) {
			d->t1 = farm_now_ns();
			step_done(d, d->status);
		}
		return;
	}
	if (d->issued < NREADS)
		read_one(loop, d);
}

static void read_one(farm_loop *loop, struct demo *d)
{
	uint32_t next = (d->me + 1) % d->n;
	/* Each outstanding READ lands in its own 64-byte slot. */
	uint8_t *slot = d->buf + 64 * (1 + d->issued % WINDOW);
	int rc = farm_as_read(d->as, loop, d->mboxes[next], slot, d->lmr, 64,
	                      read_done, d);
	if (rc) {
		d->status = rc;
		if (d->completed == d->issued)
			step_done(d, rc);
		return;
	}
	d->issued++;
}

static void s_reads(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	d->issued = d->completed = 0;
	d->status = status;
	d->t0 = farm_now_ns();
	for (unsigned i = 0; i < WINDOW && !d->status; i++)
		read_one(loop, d);
}

static void s_alloc_near(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	uint32_t next = (d->me + 1) % d->n;
	int rc = status ? status
	                : farm_galloc_alloc(d->ga, loop, 128, d->mboxes[next],
	                                    alloc_done, d);
	if (rc)
		step_done(d, rc);
}

static void call_one(farm_loop *loop, struct demo *d);

static void add_done(farm_loop *loop, void *ctx, int status, const void *r,
                     uint32_t len)
{
	struct demo *d = ctx;
	d->completed++;
	if (!status && len != sizeof(uint64_t))
		status = FARM_ECORRUPT;
	(void)r;
	if (status)
		d->status = status;
	if (d->completed == NCALLS || d->status) {
		if (d->completed == d->issued) {
			d->t1 = farm_now_ns();
			step_done(d, d->status);
		}
		return;
	}
	if (d->issued < NCALLS)
		call_one(loop, d);
}

struct add_call {
	struct demo *d;
	uint64_t k;
};

static void add_checked(farm_loop *loop, void *ctx, int status, const void *r,
                        uint32_t len)
{
	struct add_call *c = ctx;
	struct demo *d = c->d;
	uint64_t sum = 0;
	if (!status && len == sizeof(sum))
		memcpy(&sum, r, sizeof(sum));
	if (!status && sum != 3 * c->k)
		d->bad++;
	free(c);
	add_done(loop, d, status, r, len);
}

static void call_one(farm_loop *loop, struct demo *d)
{
	uint32_t next = (d->me + 1) % d->n;
	struct add_call *c = malloc(sizeof(*c));
	int rc = c ? 0 : -ENOMEM;
	if (c) {
		c->d = d;
		c->k = d->issued;
		uint64_t v[2] = {c->k, 2 * c->k};
		rc = farm_as_call(d->as, loop, d->mboxes[next], T_ADD, v,
		                  sizeof(v), CALL_NS, add_checked, c);
		if (rc)
			free(c);
	}
	if (rc) {
		d->status = rc;
		if (d->completed == d->issued)
			step_done(d, rc);
		return;
	}
	d->issued++;
}

static void s_calls(farm_loop *loop, void *ctx, int status)
{
	struct demo *d = ctx;
	d->issued = d->completed = 0;
	d->bad = 0;
	d->status = status;
	d->t0 = farm_now_ns();
	for (unsigned i = 0; i < WINDOW && !d->status; i++)
		call_one(loop, d);
}

/* ---- the job ------------------------------------------------------------- */

int farm_demo_register(farm_node *node, void **state)
{
	struct demo *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	farm_msg *msg = farm_node_msg(node);
	int rc;
	if ((rc = farm_msg_handle(msg, T_MBOX, h_mbox, d)) ||
	    (rc = farm_msg_handle(msg, T_ARRIVE, h_arrive, d)) ||
	    (rc = farm_msg_handle(msg, T_ADD, h_add, d))) {
		free(d);
		return rc;
	}
	*state = d;
	return 0;
}

static const char *name_of(farm_gaddr a, char *buf)
{
	farm_gaddr_format(a, buf, FARM_GADDR_STRLEN);
	return buf;
}

/* 1. A mailbox, and everyone's address. */
static int demo_mailboxes(struct demo *d)
{
	char g1[FARM_GADDR_STRLEN];
	int rc = step(d, s_alloc_mbox);
	if (rc)
		return rc;
	/* Release: pairs with the acquire load in h_mbox. */
	__atomic_store_n(&d->mbox, d->a, __ATOMIC_RELEASE);
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	unsigned nr = farm_as_replicas(d->as, farm_gaddr_region(d->a), rep);
	char reps[64] = "";
	for (unsigned i = 1, o = 0; i < nr && o < sizeof(reps); i++)
		o += (unsigned)snprintf(reps + o, sizeof(reps) - o, "%sm%u",
		                        i > 1 ? ", " : "", rep[i]);
	SAY(d, "allocated its mailbox at %s (primary m%u, backups %s)",
	    name_of(d->a, g1), rep[0], nr > 1 ? reps : "none");
	for (uint32_t m = 0; m < d->n; m++) {
		if (m == d->me) {
			d->mboxes[m] = d->mbox;
			continue;
		}
		uint64_t until = farm_now_ns() + STEP_NS;
		ask_whom = m;
		while ((rc = step(d, s_ask_mbox)) == -EAGAIN &&
		       farm_now_ns() < until)
			sched_yield(); /* m has not allocated yet: ask again */
		if (rc)
			return rc;
		d->mboxes[m] = d->a;
	}
	return 0;
}

/* 2. A greeting into the next machine's mailbox; 3. after everyone
 * wrote, our mailbox and a far one. */
static int demo_greetings(struct demo *d)
{
	char g1[FARM_GADDR_STRLEN], g2[FARM_GADDR_STRLEN];
	uint32_t next = (d->me + 1) % d->n, prev = (d->me + d->n - 1) % d->n,
	         far = (d->me + 2) % d->n;
	int rc = step(d, s_greet);
	if (rc)
		return rc;
	SAY(d, "WROTE a greeting into m%u's mailbox %s (one one-sided WRITE)",
	    next, name_of(d->mboxes[next] + 16, g1));
	if ((rc = barrier(d, 0)))
		return rc;
	const char *mine = farm_as_local_ptr(d->as, d->mbox + 16, 64);
	SAY(d,
	    "its own mailbox holds \"%.*s\" (written by m%u; no CPU here "
	    "took part)",
	    63, mine ? mine : "?", prev);
	if ((rc = step(d, s_read_far)))
		return rc;
	SAY(d, "READ m%u's mailbox %s: \"%.*s\"", far,
	    name_of(d->mboxes[far] + 16, g2), 63, (const char *)d->buf);
	return 0;
}

/* 4. One-sided READ rate; 5. an allocation placed next to another
 * machine's object; 6. RPCs shipped to the machine storing an address. */
static int demo_remote_work(struct demo *d)
{
	char g1[FARM_GADDR_STRLEN];
	uint32_t next = (d->me + 1) % d->n;
	int rc = step(d, s_reads);
	if (rc)
		return rc;
	double s = (double)(d->t1 - d->t0) / 1e9;
	SAY(d,
	    "%u one-sided 64 B READs of m%u's mailbox: %.0f k/s (%u in flight)",
	    NREADS, next, NREADS / s / 1e3, WINDOW);
	if ((rc = step(d, s_alloc_near)))
		return rc;
	uint32_t rep[FARM_RING_MAX_REPLICAS] = {0};
	if (farm_as_replicas(d->as, farm_gaddr_region(d->a), rep) < 1)
		SAY(d,
		    "allocated next to m%u's mailbox: %s, its region not "
		    "placed yet",
		    next, name_of(d->a, g1));
	else
		SAY(d,
		    "allocated next to m%u's mailbox: %s, on m%u "
		    "(shipped there)",
		    next, name_of(d->a, g1), rep[0]);
	if ((rc = step(d, s_calls)))
		return rc;
	s = (double)(d->t1 - d->t0) / 1e9;
	SAY(d,
	    "%u RPCs (a + b) shipped to the owner of %s: %.0f k/s, %" PRIu64
	    " wrong sums",
	    NCALLS, name_of(d->mboxes[next], g1), NCALLS / s / 1e3, d->bad);
	return 0;
}

int farm_demo_job(farm_node *node, unsigned nmachines, void *state)
{
	struct demo *d = state;
	d->node = node;
	d->loop = farm_node_loop(node, 0);
	d->as = farm_node_as(node);
	d->ga = farm_node_galloc(node);
	d->me = farm_node_id(node);
	d->n = nmachines;
	if (d->n < 2 || d->me >= d->n) {
		fprintf(stderr, "demo: needs machines 0..N-1, N >= 2\n");
		return -EINVAL;
	}
	size_t blen = 64 * (WINDOW + 1);
	d->buf = aligned_alloc(64, blen);
	int rc = d->buf ? farm_mr_reg(farm_node_fabric(node), d->buf, blen,
	                              FARM_ACCESS_LOCAL, &d->lmr)
	                : -ENOMEM;
	if (rc)
		goto out;
	struct farm_view v;
	farm_node_view(node, &v);
	SAY(d, "joined: view %" PRIu64 " with %u machines", v.config_id, v.n);
	if ((rc = demo_mailboxes(d)) || (rc = demo_greetings(d)))
		goto out;
	if ((rc = demo_remote_work(d)))
		goto out;
	if (d->bad)
		rc = FARM_ECORRUPT;
	/* 7. nobody leaves while others may still use it, wrong sums or
	 * not */
	int brc = barrier(d, 1);
	if (!rc)
		rc = brc;
	if (!rc)
		SAY(d, "done: everyone finished");
out:
	if (rc)
		fprintf(stderr, "demo m%u: %s\n", d->me, farm_strerror(rc));
	if (d->lmr)
		farm_mr_dereg(d->lmr);
	free(d->buf);
	return rc;
}

void farm_demo_free(void *state)
{
	struct demo *d = state;
	if (!d)
		return;
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}
