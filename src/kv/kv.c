/*
 * The cluster's key-value store (kv.h).
 */
#include "kv/kv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/log.h"

#define DIR_PREFIX   0xffu /* first byte of directory keys */
#define MAX_MACHINES 64u

struct farm_kv {
	farm_node *node;
	farm_ht *ht;
	uint32_t nbuckets;
	_Atomic int shard_ready;
	struct farm_ht_shard mine;
};

static void h_shard(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_kv *kv = arg;
	int rc;
	if (!in->token.call_id)
		return;
	if (!atomic_load_explicit(&kv->shard_ready, memory_order_acquire))
		rc = farm_msg_reply_error(loop, &in->token, -EAGAIN);
	else
		rc = farm_msg_reply(loop, &in->token, &kv->mine,
		                    sizeof(kv->mine));
	if (rc)
		farm_warn("kv: cannot answer machine %" PRIu32,
		          in->src_machine);
}

int farm_kv_create(farm_node *node, const struct farm_ht_attr *attr,
                   uint32_t buckets_per_machine, farm_kv **out)
{
	if (!node || !out || !buckets_per_machine)
		return -EINVAL;
	farm_kv *kv = calloc(1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->node = node;
	kv->nbuckets = buckets_per_machine;
	int rc = farm_ht_create(farm_node_txm(node), farm_node_as(node),
	                        farm_node_galloc(node), farm_node_msg(node),
	                        attr, &kv->ht);
	if (!rc)
		rc = farm_msg_handle(farm_node_msg(node), FARM_MSGT_KV_SHARD,
		                     h_shard, kv);
	if (rc) {
		farm_ht_destroy(kv->ht);
		free(kv);
		return rc;
	}
	*out = kv;
	return 0;
}

void farm_kv_destroy(farm_kv *kv)
{
	if (!kv)
		return;
	farm_ht_destroy(kv->ht);
	free(kv);
}

int farm_kv_attach(farm_kv *kv, farm_loop *loop)
{
	return kv ? farm_ht_attach(kv->ht, loop) : -EINVAL;
}

void farm_kv_detach(farm_kv *kv, farm_loop *loop)
{
	if (kv)
		farm_ht_detach(kv->ht, loop);
}

farm_ht *farm_kv_table(farm_kv *kv)
{
	return kv ? kv->ht : NULL;
}

/* ---- joining ----------------------------------------------------------------
 */

struct wait {
	volatile int done;
	int status;
	struct farm_ht_shard sd;
	uint8_t *val;
	uint32_t cap, len;
};

static void shard_made(farm_loop *loop, void *ctx, int status,
                       struct farm_ht_shard sd)
{
	(void)loop;
	struct wait *w = ctx;
	w->status = status;
	w->sd = sd;
	w->done = 1;
}

static void shard_reply(farm_loop *loop, void *ctx, int status,
                        const void *reply, uint32_t len)
{
	(void)loop;
	struct wait *w = ctx;
	if (!status && len != sizeof(w->sd))
		status = FARM_ECORRUPT;
	if (!status)
		memcpy(&w->sd, reply, sizeof(w->sd));
	w->status = status;
	w->done = 1;
}

static int drive(farm_loop *loop, struct wait *w, uint64_t deadline)
{
	uint64_t now = farm_now_ns();
	int rc = farm_loop_wait(loop, &w->done,
	                        deadline > now ? deadline - now : 1);
	return rc ? rc : w->status;
}

int farm_kv_join_sync(farm_kv *kv, farm_loop *loop, unsigned nmachines,
                      int timeout_ms)
{
	if (!kv || !loop || nmachines == 0 || nmachines > MAX_MACHINES)
		return -EINVAL;
	uint64_t deadline = farm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct wait w = {0};
	int rc = farm_ht_make_shard(kv->ht, loop, kv->nbuckets, shard_made, &w);
	if (!rc)
		rc = drive(loop, &w, deadline);
	if (rc)
		return rc;
	kv->mine = w.sd;
	atomic_store_explicit(&kv->shard_ready, 1, memory_order_release);
	struct farm_ht_shard sd[MAX_MACHINES];
	uint32_t me = farm_node_id(kv->node);
	for (uint32_t m = 0; m < nmachines; m++) {
		if (m == me) {
			sd[m] = kv->mine;
			continue;
		}
		for (;;) {
			/* A peer making a large shard does not answer until it
			 * is done (seconds for millions of buckets): wait for
			 * the reply as long as the caller allows, and ask
			 * again after a timeout. */
			uint64_t now = farm_now_ns();
			uint64_t left = deadline > now ? deadline - now : 1;
			w = (struct wait){0};
			rc = farm_msg_call(loop, m, 0, FARM_MSGT_KV_SHARD, NULL,
			                   0, left, shard_reply, &w);
			if (!rc)
				rc = drive(loop, &w, deadline);
			if ((rc != -EAGAIN && rc != -ETIMEDOUT) ||
			    farm_now_ns() >= deadline)
				break;
			/* m has not made its shard yet: serve, then ask again.
			 */
			for (int i = 0; i < 64; i++)
				(void)farm_loop_poll(loop);
		}
		if (rc)
			return rc;
		sd[m] = w.sd;
	}
	return farm_ht_set_shards(kv->ht, sd, nmachines);
}

/* ---- blocking wrappers
 * --------------------------------------------------------- */

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
	if (!kv || !val)
		return -EINVAL;
	struct wait w = {.val = val, .cap = cap};
	int rc;
	while ((rc = farm_ht_get(kv->ht, loop, key, klen, get_done, &w)) ==
	       -EAGAIN)
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
	if (!kv)
		return -EINVAL;
	struct wait w = {0};
	int rc = farm_ht_put(kv->ht, loop, key, klen, val, vlen, op_done, &w);
	return rc ? rc : wait_op(loop, &w);
}

int farm_kv_del_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen)
{
	if (!kv)
		return -EINVAL;
	struct wait w = {0};
	int rc = farm_ht_del(kv->ht, loop, key, klen, op_done, &w);
	return rc ? rc : wait_op(loop, &w);
}

/* ---- multi-get
 * -------------------------------------------------------------------- */

struct mget {
	unsigned left;
	farm_kv_mget_fn cont;
	void *ctx;
};

struct mget_one {
	struct mget *m;
	uint8_t *val;
	uint32_t cap;
	uint32_t *len;
	int *status;
};

static void mget_done(farm_loop *loop, void *ctx, int status, const void *val,
                      uint32_t len)
{
	struct mget_one *o = ctx;
	struct mget *m = o->m;
	if (!status && len > o->cap)
		status = -EMSGSIZE;
	if (!status)
		memcpy(o->val, val, len);
	*o->len = status ? 0 : len;
	*o->status = status;
	free(o);
	if (--m->left == 0) {
		m->cont(loop, m->ctx);
		free(m);
	}
}

int farm_kv_mget(farm_kv *kv, farm_loop *loop, unsigned n,
                 const void *const *keys, const uint32_t *klens, void *vals,
                 uint32_t cap, uint32_t *lens, int *status,
                 farm_kv_mget_fn cont, void *ctx)
{
	if (!kv || !loop || !n || !keys || !klens || !vals || !lens ||
	    !status || !cont)
		return -EINVAL;
	struct mget *m = malloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	*m = (struct mget){.left = n + 1, .cont = cont, .ctx = ctx};
	for (unsigned i = 0; i < n; i++) {
		struct mget_one *o = malloc(sizeof(*o));
		int rc = o ? 0 : -ENOMEM;
		if (o) {
			*o = (struct mget_one){.m = m,
			                       .val = (uint8_t *)vals +
			                              (size_t)i * cap,
			                       .cap = cap,
			                       .len = &lens[i],
			                       .status = &status[i]};
			rc = farm_ht_get(kv->ht, loop, keys[i], klens[i],
			                 mget_done, o);
			if (rc)
				free(o);
		}
		if (rc) { /* this key fails alone */
			status[i] = rc;
			lens[i] = 0;
			m->left--;
		}
	}
	/* The extra count keeps cont from running inside this call. */
	if (--m->left == 0) {
		cont(loop, ctx);
		free(m);
	}
	return 0;
}

/* ---- the named-object directory
 * ---------------------------------------------------- */

static int dir_key(const char *name, uint8_t *key, uint32_t *klen)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0)
		return -EINVAL;
	if (n + 1 > FARM_HT_MAX_KEY)
		return -E2BIG;
	key[0] = DIR_PREFIX;
	memcpy(key + 1, name, n);
	*klen = (uint32_t)n + 1;
	return 0;
}

int farm_kv_name_sync(farm_kv *kv, farm_loop *loop, const char *name,
                      farm_fatptr p)
{
	uint8_t key[FARM_HT_MAX_KEY];
	uint32_t klen;
	int rc = dir_key(name, key, &klen);
	return rc ? rc : farm_kv_put_sync(kv, loop, key, klen, &p, sizeof(p));
}

int farm_kv_lookup_sync(farm_kv *kv, farm_loop *loop, const char *name,
                        farm_fatptr *p)
{
	uint8_t key[FARM_HT_MAX_KEY];
	uint32_t klen, len = 0;
	int rc = dir_key(name, key, &klen);
	if (!rc && !p)
		rc = -EINVAL;
	if (!rc)
		rc = farm_kv_get_sync(kv, loop, key, klen, p, sizeof(*p), &len);
	if (!rc && len != sizeof(*p))
		rc = FARM_ECORRUPT;
	return rc;
}
