/*
 * Replies written in place (farm_msg_reply_begin / farm_msg_reply_end):
 * two machines in one process, their loops driven in turn by the test
 * thread. The in-place path (the payload written in the send mirror) is
 * taken once the channel back exists and has room; the buffered one
 * (the loop's buffer, sent at the end) for this machine, a channel's
 * first message and a full ring. Every reply is checked byte for byte.
 */
#include "testutil.h"

#include <errno.h>
#include <string.h>

#define T_REV    1 /* reply: the payload reversed, in place */
#define T_FORGET 2 /* begins a reply and returns without ending it */
#define T_BIG    3 /* reply: BIG bytes, byte i = i + the request's byte */
#define BIG      400
#define NSEEN    64

struct srv {
	/* Where each T_REV reply's payload went, in order. */
	const void *where[NSEEN];
	unsigned nseen;
	int busy_send, busy_begin; /* what a send and a second begin said */
};

static void h_rev(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct srv *s = arg;
	int err = 0;
	uint8_t *p = farm_msg_reply_begin(loop, &in->token, in->len, &err);
	assert_non_null(p);
	if (s->nseen < NSEEN)
		s->where[s->nseen++] = p;
	/* While it is open nothing else leaves: it would go out before the
	 * reply, or with its bytes unwritten. */
	s->busy_send =
	        farm_msg_send(loop, in->src_machine, 0, T_FORGET, "x", 1);
	s->busy_begin = 0;
	assert_null(farm_msg_reply_begin(loop, &in->token, 1, &s->busy_begin));
	const uint8_t *q = in->payload;
	for (uint32_t i = 0; i < in->len; i++)
		p[i] = q[in->len - 1 - i];
	assert_int_equal(farm_msg_reply_end(loop), 0);
}

static void h_big(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)arg;
	assert_int_equal(in->len, 1);
	uint8_t seed = *(const uint8_t *)in->payload;
	uint8_t *p = farm_msg_reply_begin(loop, &in->token, BIG, NULL);
	assert_non_null(p);
	for (uint32_t i = 0; i < BIG; i++)
		p[i] = (uint8_t)(i + seed);
	assert_int_equal(farm_msg_reply_end(loop), 0);
}

static void h_forget(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)arg;
	if (!in->token.call_id)
		return;
	uint8_t *p = farm_msg_reply_begin(loop, &in->token, 3, NULL);
	assert_non_null(p);
	memcpy(p, "abc", 3);
}

struct node {
	char dir[256];
	farm_fabric *fab;
	farm_msg *msg;
	farm_loop *loop;
	struct srv srv;
};

static void nodes_open(struct node *nd, const farm_msg_attr *a)
{
	for (unsigned i = 0; i < 2; i++) {
		memset(&nd[i], 0, sizeof(nd[i]));
		tu_tmpdir(nd[i].dir, sizeof(nd[i].dir), "msgreply");
		nd[i].fab = tu_open(i, nd[i].dir);
		assert_non_null(nd[i].fab);
		assert_int_equal(farm_msg_create(nd[i].fab, a, &nd[i].msg), 0);
		assert_int_equal(
		        farm_msg_handle(nd[i].msg, T_REV, h_rev, &nd[i].srv),
		        0);
		assert_int_equal(
		        farm_msg_handle(nd[i].msg, T_FORGET, h_forget, NULL),
		        0);
		assert_int_equal(farm_msg_handle(nd[i].msg, T_BIG, h_big, NULL),
		                 0);
	}
	for (unsigned i = 0; i < 2; i++) {
		char addr[256];
		assert_true(farm_fabric_address(nd[1 - i].fab, addr,
		                                sizeof(addr)) > 0);
		farm_mr_desc d = farm_msg_desc(nd[1 - i].msg);
		assert_int_equal(farm_msg_add_peer(nd[i].msg, 1 - i, addr, &d),
		                 0);
		assert_int_equal(farm_loop_open(nd[i].msg, 0, &nd[i].loop), 0);
	}
}

static void nodes_close(struct node *nd)
{
	for (unsigned i = 0; i < 2; i++) {
		farm_loop_close(nd[i].loop);
		assert_int_equal(farm_msg_destroy(nd[i].msg), 0);
		farm_fabric_close(nd[i].fab);
		tu_rmtree(nd[i].dir);
	}
}

struct res {
	int done, status;
	uint32_t len;
	uint8_t buf[512];
};

static void cont(farm_loop *loop, void *ctx, int status, const void *reply,
                 uint32_t len)
{
	(void)loop;
	struct res *r = ctx;
	r->done++;
	r->status = status;
	r->len = len;
	if (!status && len <= sizeof(r->buf))
		memcpy(r->buf, reply, len);
}

/* Call T_REV on machine @to with @len bytes (byte i = i + @seed) into @r. */
static void call_rev(struct node *nd, uint32_t to, uint32_t len, uint8_t seed,
                     struct res *r)
{
	uint8_t req[512];
	for (uint32_t i = 0; i < len; i++)
		req[i] = (uint8_t)(i + seed);
	memset(r, 0, sizeof(*r));
	assert_int_equal(
	        farm_msg_call(nd[0].loop, to, 0, T_REV, req, len, 0, cont, r),
	        0);
}

static void check_rev(const struct res *r, uint32_t len, uint8_t seed)
{
	assert_int_equal(r->done, 1);
	assert_int_equal(r->status, 0);
	assert_int_equal(r->len, len);
	for (uint32_t i = 0; i < len; i++)
		assert_int_equal(r->buf[i], (uint8_t)(len - 1 - i + seed));
}

static void pump(struct node *nd, const struct res *r, unsigned n)
{
	for (int k = 0; k < 100000; k++) {
		unsigned done = 0;
		for (unsigned i = 0; i < n; i++)
			done += r[i].done != 0;
		if (done == n)
			return;
		(void)farm_loop_poll(nd[0].loop);
		(void)farm_loop_poll(nd[1].loop);
	}
	fail_msg("calls not answered");
}

/* Remote replies: the first buffered (no channel back yet), then in the
 * mirror, each at the next place in it; one to this machine buffered. */
static void test_in_place(void **state)
{
	(void)state;
	struct node nd[2];
	farm_msg_attr a = {0};
	nodes_open(nd, &a);
	struct res r;
	for (unsigned k = 0; k < 4; k++) {
		call_rev(nd, 1, 61 + k, (uint8_t)k, &r);
		pump(nd, &r, 1);
		check_rev(&r, 61 + k, (uint8_t)k);
		assert_int_equal(nd[1].srv.busy_send, -EBUSY);
		assert_int_equal(nd[1].srv.busy_begin, -EBUSY);
	}
	struct srv *s = &nd[1].srv;
	assert_int_equal(s->nseen, 4);
	/* In place: every reply at its own place (the loop's buffer would
	 * be one address for all); a frame of a 64-byte reply spans two
	 * lines, so each is 128 bytes past the one before. */
	for (unsigned k = 2; k < 4; k++)
		assert_int_equal((const uint8_t *)s->where[k] -
		                         (const uint8_t *)s->where[k - 1],
		                 128);
	/* This machine: the inbox, from the loop's buffer. */
	call_rev(nd, 0, 17, 9, &r);
	pump(nd, &r, 1);
	check_rev(&r, 17, 9);
	/* Zero bytes. */
	call_rev(nd, 1, 0, 0, &r);
	pump(nd, &r, 1);
	check_rev(&r, 0, 0);
	nodes_close(nd);
}

/* Replies too many for the ring back: a burst of small requests is
 * answered with large replies in one pass of the server, so those that
 * find no room are buffered and queued, in order, and all arrive whole. */
static void test_full_ring(void **state)
{
	(void)state;
	struct node nd[2];
	farm_msg_attr a = {.ring_size = 4096};
	nodes_open(nd, &a);
	enum { N = 40 };
	static struct res r[N];
	for (unsigned k = 0; k < N; k++) {
		uint8_t seed = (uint8_t)(7 * k);
		memset(&r[k], 0, sizeof(r[k]));
		assert_int_equal(farm_msg_call(nd[0].loop, 1, 0, T_BIG, &seed,
		                               1, 0, cont, &r[k]),
		                 0);
	}
	farm_msg_stats st0;
	farm_msg_stats_get(NULL, nd[1].loop, &st0);
	pump(nd, r, N);
	for (unsigned k = 0; k < N; k++) {
		assert_int_equal(r[k].status, 0);
		assert_int_equal(r[k].len, BIG);
		for (uint32_t i = 0; i < BIG; i++)
			assert_int_equal(r[k].buf[i], (uint8_t)(i + 7 * k));
	}
	farm_msg_stats st1;
	farm_msg_stats_get(NULL, nd[1].loop, &st1);
	assert_true(st1.queued > st0.queued); /* some found the ring full */
	nodes_close(nd);
}

/* Bad arguments, an end without a begin, and a handler that forgets the
 * end: the loop ends it (the reply goes) and goes on sending. */
static void test_misuse(void **state)
{
	(void)state;
	struct node nd[2];
	farm_msg_attr a = {0};
	nodes_open(nd, &a);
	struct farm_msg_token tok = {.call_id = 0, .machine = 1};
	int err = 0;
	assert_null(farm_msg_reply_begin(NULL, &tok, 1, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(farm_msg_reply_begin(nd[0].loop, &tok, 1, &err));
	assert_int_equal(err, -EINVAL); /* a one-way message's token */
	tok.call_id = 1;
	tok.thread = 5;
	assert_null(farm_msg_reply_begin(nd[0].loop, &tok, 1, &err));
	assert_int_equal(err, -EINVAL);
	tok.thread = 0;
	assert_null(farm_msg_reply_begin(
	        nd[0].loop, &tok, farm_msg_max_payload(nd[0].msg) + 1, &err));
	assert_int_equal(err, -EMSGSIZE);
	assert_int_equal(farm_msg_reply_end(nd[0].loop), -EINVAL);
	assert_int_equal(farm_msg_reply_end(NULL), -EINVAL);
	for (unsigned k = 0; k < 2; k++) { /* buffered, then in place */
		struct res r = {0};
		assert_int_equal(farm_msg_call(nd[0].loop, 1, 0, T_FORGET, NULL,
		                               0, 0, cont, &r),
		                 0);
		pump(nd, &r, 1);
		assert_int_equal(r.status, 0);
		assert_int_equal(r.len, 3);
		assert_memory_equal(r.buf, "abc", 3);
	}
	struct res r;
	call_rev(nd, 1, 8, 1, &r);
	pump(nd, &r, 1);
	check_rev(&r, 8, 1);
	nodes_close(nd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_in_place),
	        cmocka_unit_test(test_full_ring),
	        cmocka_unit_test(test_misuse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
