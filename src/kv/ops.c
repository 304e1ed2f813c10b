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

long farm_kv_iterate_local(farm_kv *kv, farm_kv_iter_fn fn, void *ctx)
{
	if (!kv || !fn || !joined(kv))
		return -EINVAL;
	if (kv->my_shard == UINT32_MAX)
		return 0; /* joined late: no shard of its own */
	return farm_ht_iterate_local(kv->ht, kv->my_shard, fn, ctx);
}
