/*
 * The named-object directory: a name maps to a fat pointer, kept in the
 * store under the key 0xff followed by the name.
 */
#include <errno.h>
#include <string.h>

#include "kv/kv_int.h"

#define DIR_PREFIX 0xffu /* first byte of directory keys */

static int dir_key(const char *name, uint8_t *key, uint32_t *klen)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0)
		return -EINVAL;
	if (n + 1 > FARM_KV_MAX_KEY)
		return -EMSGSIZE;
	key[0] = DIR_PREFIX;
	memcpy(key + 1, name, n);
	*klen = (uint32_t)n + 1;
	return 0;
}

int farm_kv_name_sync(farm_kv *kv, farm_loop *loop, const char *name,
                      farm_fatptr p)
{
	uint8_t key[FARM_KV_MAX_KEY];
	uint32_t klen;
	int rc = dir_key(name, key, &klen);
	return rc ? rc : farm_kv_put_sync(kv, loop, key, klen, &p, sizeof(p));
}

int farm_kv_lookup_sync(farm_kv *kv, farm_loop *loop, const char *name,
                        farm_fatptr *p)
{
	uint8_t key[FARM_KV_MAX_KEY];
	uint32_t klen, len = 0;
	int rc = dir_key(name, key, &klen);
	if (!rc && !p)
		rc = -EINVAL;
	if (!rc)
		rc = farm_kv_get_sync(kv, loop, key, klen, p, sizeof(*p), &len);
	if ((!rc && len != sizeof(*p)) || rc == -EMSGSIZE)
		rc = FARM_ECORRUPT;
	return rc;
}

int farm_kv_unname_sync(farm_kv *kv, farm_loop *loop, const char *name)
{
	uint8_t key[FARM_KV_MAX_KEY];
	uint32_t klen;
	int rc = dir_key(name, key, &klen);
	return rc ? rc : farm_kv_del_sync(kv, loop, key, klen);
}
