/*
 * The blocking wrappers: each starts its operation and drives the loop
 * until the continuation has run.
 */
#include <errno.h>
#include <string.h>

#include "kv/kv_int.h"

static void get_done(farm_loop *loop, void *ctx, int status, const void *val,
                     uint32_t len)
{
	(void)loop;
	struct wait *w = ctx;
	if (!status) {
		w->len = len;
		if (len > w->cap)
			status = -EMSGSIZE;
		else
			memcpy(w->val, val, len);
	}
	w->status = status;
	w->done = 1;
}

static void op_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct wait *w = ctx;
	w->status = status;
	w->done = 1;
}

static int wait_op(farm_loop *loop, struct wait *w)
{
	int rc = farm_loop_wait(loop, &w->done, 0);
	return rc ? rc : w->status;
}

int farm_kv_get_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, void *val, uint32_t cap, uint32_t *len)
{
	if (!kv || !loop || (!val && cap))
		return -EINVAL;
	struct wait w = {.val = val, .cap = cap};
	int rc;
	while ((rc = farm_kv_get(kv, loop, key, klen, get_done, &w)) == -EAGAIN)
		(void)farm_loop_poll(loop);
	if (!rc)
		rc = wait_op(loop, &w);
	if (len)
		*len = w.len;
	return rc;
}

int farm_kv_put_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, const void *val, uint32_t vlen)
{
	struct wait w = {0};
	int rc = farm_kv_put(kv, loop, key, klen, val, vlen, op_done, &w);
	return rc ? rc : wait_op(loop, &w);
}

int farm_kv_del_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen)
{
	struct wait w = {0};
	int rc = farm_kv_del(kv, loop, key, klen, op_done, &w);
	return rc ? rc : wait_op(loop, &w);
}
