/*
 * Single operations (get, put, delete with continuations) and iteration over
 * this machine's shard.
 */
#include <errno.h>

#include "kv/kv_int.h"

int farm_kv_get(farm_kv *kv, farm_loop *loop, const void *key, uint32_t klen,
                farm_kv_get_fn cont, void *ctx)
{
	if (!kv)
		return -EINVAL;
	int rc = check_key(key, klen);
	if (!rc && kv_owner_mode(kv))
		return farm_kv_owner_get(kv, loop, key, klen, cont, ctx);
	if (!rc)
		rc = farm_ht_get(kv->ht, loop, key, klen, cont, ctx);
	return rc == -E2BIG ? -EMSGSIZE : rc;
}

_Static_assert(FARM_KV_GET_MANY_MAX <= FARM_HT_BATCH_MAX,
               "a window of gets is one farm_ht_get_many call");
_Static_assert(FARM_KV_MAX_KEY == FARM_HT_MAX_KEY,
               "the store's keys are the table's");

int farm_kv_get_many(farm_kv *kv, farm_loop *loop, unsigned n,
                     const void *const *keys, const uint32_t *klens,
                     farm_kv_get_fn cont, void *const *ctxs, int *rcs)
{
	if (!kv || !cont || (n && (!keys || !klens || !ctxs || !rcs)))
		return -EINVAL;
	if (n > FARM_KV_GET_MANY_MAX)
		return -E2BIG;
	if (kv_owner_mode(kv)) { /* one RPC per key: nothing to group */
		for (unsigned i = 0; i < n; i++)
			rcs[i] = farm_kv_get(kv, loop, keys[i], klens[i], cont,
			                     ctxs[i]);
		return 0;
	}
	/* The table checks the keys as the store does (same limit, static
	 * assert above) and answers as it does but for a key too long: the
	 * table's -E2BIG is the store's -EMSGSIZE. With the whole call
	 * refused (a loop not attached), each key its own error first. */
	int rc =
	        farm_ht_get_many(kv->ht, loop, n, keys, klens, cont, ctxs, rcs);
	for (unsigned i = 0; i < n; i++) {
		if (rc) {
			int k = check_key(keys[i], klens[i]);
			rcs[i] = k ? k : rc;
		} else if (rcs[i] == -E2BIG) {
			rcs[i] = -EMSGSIZE;
		}
	}
	return 0;
}

int farm_kv_put(farm_kv *kv, farm_loop *loop, const void *key, uint32_t klen,
                const void *val, uint32_t vlen, farm_op_fn cont, void *ctx)
{
	if (!kv || !val || vlen == 0)
		return -EINVAL;
	int rc = check_key(key, klen);
	if (!rc && vlen > farm_ht_max_value(kv->ht, klen))
		rc = -EMSGSIZE;
	if (!rc)
		rc = farm_ht_put(kv->ht, loop, key, klen, val, vlen, cont, ctx);
	return rc == -E2BIG ? -EMSGSIZE : rc;
}

int farm_kv_del(farm_kv *kv, farm_loop *loop, const void *key, uint32_t klen,
                farm_op_fn cont, void *ctx)
{
	if (!kv)
		return -EINVAL;
	int rc = check_key(key, klen);
	if (!rc)
		rc = farm_ht_del(kv->ht, loop, key, klen, cont, ctx);
	return rc == -E2BIG ? -EMSGSIZE : rc;
}

/* The caller's iteration across shards: a false from it ends them all. */
struct iter_all {
	farm_kv_iter_fn fn;
	void *ctx;
	bool stopped;
};

static bool iter_one(void *ctx, const void *key, uint32_t klen, const void *val,
                     uint32_t vlen)
{
	struct iter_all *a = ctx;
	if (!a->fn(a->ctx, key, klen, val, vlen))
		a->stopped = true;
	return !a->stopped;
}

long farm_kv_iterate_local(farm_kv *kv, farm_kv_iter_fn fn, void *ctx)
{
	if (!kv || !fn || !joined(kv))
		return -EINVAL;
	/* Every shard this machine serves: those it made, less those growth
	 * moved away, plus those it took over. */
	struct iter_all a = {.fn = fn, .ctx = ctx};
	long n = 0;
	for (unsigned s = 0; s < kv->nshards && !a.stopped; s++) {
		if (!serves_shard(kv, s))
			continue;
		long r = farm_ht_iterate_local(kv->ht, s, iter_one, &a);
		if (r < 0)
			return r;
		n += r;
	}
	return n;
}
