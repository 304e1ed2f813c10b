/*
 * The blocking wrappers: each starts its operation and drives the loop
 * until the continuation has run or its deadline passed
 * (farm_kv_set_sync_timeout, or the *_timed variant's). Their records are
 * on the heap (struct sync_op, kv_int.h): one that gives up is freed by
 * its operation's continuation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "util/common.h"
#include "util/fault.h"

void farm_kv_set_sync_timeout(farm_kv *kv, uint64_t timeout_ns)
{
	if (kv)
		atomic_store_explicit(&kv->sync_timeout_ns, timeout_ns,
		                      memory_order_relaxed);
}

uint64_t farm_kv_sync_timeout(const farm_kv *kv)
{
	return kv ? atomic_load_explicit(&kv->sync_timeout_ns,
	                                 memory_order_relaxed)
	          : 0;
}

void farm_kv_sop_free(struct sync_op *w)
{
	free(w->vals);
	free(w->lens);
	free(w->st);
	free(w);
}

bool farm_kv_sop_end(struct sync_op *w, int status)
{
	if (w->abandoned) {
		farm_kv_sop_free(w);
		return true;
	}
	w->status = status;
	w->done = 1;
	return false;
}

int farm_kv_sop_wait(farm_loop *loop, struct sync_op *w, uint64_t timeout_ns)
{
	int rc = farm_loop_wait(loop, &w->done, timeout_ns);
	if (w->done)
		return 0;
	w->abandoned = true;
	return rc ? rc : -ETIMEDOUT;
}

static void get_done(farm_loop *loop, void *ctx, int status, const void *val,
                     uint32_t len)
{
	(void)loop;
	struct sync_op *w = ctx;
	if (!status &&
	    (!w->abandoned || FARM_FAULT_SWITCH(FARM_FP_KV_SYNC_LATE_COPY))) {
		w->len = len;
		if (len > w->cap)
			status = -EMSGSIZE;
		else
			memcpy(w->val, val, len);
	}
	(void)farm_kv_sop_end(w, status);
}

static void op_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)farm_kv_sop_end(ctx, status);
}

/* How long an operation refused with -EAGAIN waits before it asks again,
 * the loop parked meanwhile (completing what is in flight): at first the
 * time a lookup slot takes to free, doubled at each refusal up to the
 * time a view change takes to spread. */
#define RETRY_MIN_NS 100000u
#define RETRY_MAX_NS 10000000u
/* With no deadline, how long a put or delete keeps asking while it is
 * refused: a shard moves within a configuration change, so refusals past
 * this are a machine that will not serve it, which the caller must see. */
#define RETRY_FOR_NS (10ull * 1000000000ull)

/* Park @loop for @ns before asking again, cut at @until (0: none). 0 to
 * ask again; -ETIMEDOUT once @until passed (before or after the park);
 * the loop's error. */
static int retry_park(farm_loop *loop, uint64_t until, uint64_t ns)
{
	static const volatile int never; /* the park's end is the wake-up */
	if (until) {
		uint64_t now = farm_now_ns();
		if (now >= until)
			return -ETIMEDOUT;
		if (until - now < ns)
			ns = until - now;
	}
	int wr = farm_loop_wait(loop, &never, ns);
	if (wr && wr != -ETIMEDOUT)
		return wr;
	/* A park cut at the deadline ends at it: asking then would start
	 * an operation with no time left to learn its outcome. */
	if (until && farm_now_ns() >= until)
		return -ETIMEDOUT;
	return 0;
}

/* What is left of @until for one wait: 0 is no limit, so a deadline
 * already past leaves one look (1 ns), after which the wait gives up. */
static uint64_t wait_left(uint64_t until)
{
	if (!until)
		return 0;
	uint64_t now = farm_now_ns();
	return now < until ? until - now : 1;
}

/* Start the get, retrying while the loop has no free lookup slot until
 * @until (0: no limit): -ETIMEDOUT once it passed with nothing started. */
static int get_start(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, struct sync_op *w, uint64_t until)
{
	int rc;
	/* A slot frees within a lookup: the shortest park each time. */
	while ((rc = farm_kv_get(kv, loop, key, klen, get_done, w)) ==
	       -EAGAIN) {
		int pr = retry_park(loop, until, RETRY_MIN_NS);
		if (pr)
			return pr;
	}
	return rc;
}

/* The arguments of one blocking get or change, asked again while refused
 * (retry_refused). */
struct sync_args {
	farm_kv *kv;
	farm_loop *loop;
	const void *key, *val; /* val: a put's value, NULL for a delete */
	void *out;             /* a get's buffer */
	uint32_t klen, vlen, cap;
	uint32_t *len;
};

/* One get, waited for until @until (0: no limit): its status, or the
 * wait's error (the record abandoned). */
static int get_once(const struct sync_args *a, uint64_t until)
{
	struct sync_op *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->val = a->out;
	w->cap = a->cap;
	int rc = get_start(a->kv, a->loop, a->key, a->klen, w, until);
	if (!rc && (rc = farm_kv_sop_wait(a->loop, w, wait_left(until))))
		return rc; /* abandoned: its continuation frees it */
	if (a->len)
		*a->len = w->len;
	rc = rc ? rc : w->status;
	farm_kv_sop_free(w);
	return rc;
}

/* One put (@a->val) or delete (@a->val NULL), waited for until @until
 * (0: no limit): its status, or the wait's error (the record abandoned). */
static int change_once(const struct sync_args *a, uint64_t until)
{
	struct sync_op *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	int rc = a->val ? farm_kv_put(a->kv, a->loop, a->key, a->klen, a->val,
	                              a->vlen, op_done, w)
	                : farm_kv_del(a->kv, a->loop, a->key, a->klen, op_done,
	                              w);
	if (!rc && (rc = farm_kv_sop_wait(a->loop, w, wait_left(until))))
		return rc;
	rc = rc ? rc : w->status;
	farm_kv_sop_free(w);
	return rc;
}

/* @once, asked again while refused: -EAGAIN (no call slot on the loop;
 * the shard's machine does not serve it yet or any more, so nothing was
 * written; a lookup that met a view change) is asked again until the
 * deadline, or for RETRY_FOR_NS with none; then -EAGAIN, which still
 * means nothing was written. A wait cut by the deadline is -ETIMEDOUT
 * (the last try's outcome unknown). */
static int retry_refused(int (*once)(const struct sync_args *, uint64_t),
                         const struct sync_args *a, uint64_t timeout_ns)
{
	uint64_t start = farm_now_ns();
	uint64_t until = timeout_ns ? start + timeout_ns : 0;
	uint64_t stop = until ? until : start + RETRY_FOR_NS;
	for (uint64_t park = RETRY_MIN_NS;;
	     park = park * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : park * 2) {
		int rc = once(a, until);
		if (rc != -EAGAIN ||
		    FARM_FAULT_SWITCH(FARM_FP_KV_SYNC_NO_RETRY))
			return rc;
		int pr = retry_park(a->loop, stop, park);
		if (pr)
			return pr == -ETIMEDOUT ? -EAGAIN : pr;
	}
}

int farm_kv_get_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                           uint32_t klen, void *val, uint32_t cap,
                           uint32_t *len, uint64_t timeout_ns)
{
	if (!kv || !loop || (!val && cap))
		return -EINVAL;
	struct sync_args a = {.kv = kv,
	                      .loop = loop,
	                      .key = key,
	                      .klen = klen,
	                      .out = val,
	                      .cap = cap,
	                      .len = len};
	return retry_refused(get_once, &a, timeout_ns);
}

int farm_kv_get_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, void *val, uint32_t cap, uint32_t *len)
{
	return farm_kv_get_sync_timed(kv, loop, key, klen, val, cap, len,
	                              farm_kv_sync_timeout(kv));
}

static int change_sync(farm_kv *kv, farm_loop *loop, const void *key,
                       uint32_t klen, const void *val, uint32_t vlen,
                       uint64_t timeout_ns)
{
	if (!kv || !loop)
		return -EINVAL;
	struct sync_args a = {.kv = kv,
	                      .loop = loop,
	                      .key = key,
	                      .klen = klen,
	                      .val = val,
	                      .vlen = vlen};
	return retry_refused(change_once, &a, timeout_ns);
}

int farm_kv_put_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                           uint32_t klen, const void *val, uint32_t vlen,
                           uint64_t timeout_ns)
{
	if (!val)
		return -EINVAL;
	return change_sync(kv, loop, key, klen, val, vlen, timeout_ns);
}

int farm_kv_put_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, const void *val, uint32_t vlen)
{
	return farm_kv_put_sync_timed(kv, loop, key, klen, val, vlen,
	                              farm_kv_sync_timeout(kv));
}

int farm_kv_del_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                           uint32_t klen, uint64_t timeout_ns)
{
	return change_sync(kv, loop, key, klen, NULL, 0, timeout_ns);
}

int farm_kv_del_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen)
{
	return farm_kv_del_sync_timed(kv, loop, key, klen,
	                              farm_kv_sync_timeout(kv));
}
