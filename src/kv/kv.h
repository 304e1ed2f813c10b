/*
 * The key-value store of a cluster of libfarm machines: one hashtable
 * (src/hashtable) with one shard per machine, set up when the machines
 * start, plus multi-get and a named-object directory. Internal for now;
 * the public include/farm/kv.h comes when the node API is public.
 *
 *   farm_kv_create()   on each machine, before its loops run (handlers)
 *   farm_kv_attach()   on each loop's thread that uses the store
 *   farm_kv_join_sync() on one loop of each machine: makes this machine's
 *                      shard, fetches every other machine's, and installs
 *                      the shard list (ordered by machine id), so every
 *                      machine maps keys to shards alike
 */
#ifndef FARM_KV_KV_H
#define FARM_KV_KV_H

#include <farm/txn.h>

#include "hashtable/ht.h"
#include "node/node.h"

#define FARM_MSGT_KV_SHARD 0xf140u /* -> the machine's shard descriptor */

typedef struct farm_kv farm_kv;

int farm_kv_create(farm_node *node, const struct farm_ht_attr *attr,
                   uint32_t buckets_per_machine, farm_kv **out);
void farm_kv_destroy(farm_kv *kv);
int farm_kv_attach(farm_kv *kv, farm_loop *loop);
void farm_kv_detach(farm_kv *kv, farm_loop *loop);
/* Make our shard, learn the other @nmachines - 1 machines' (machine ids
 * 0..nmachines-1), install the list. Drives @loop; not from a handler. */
int farm_kv_join_sync(farm_kv *kv, farm_loop *loop, unsigned nmachines,
                      int timeout_ms);
farm_ht *farm_kv_table(farm_kv *kv);

/* Blocking wrappers (drive @loop). get: 0 and *@len bytes into @val (at
 * most @cap; -EMSGSIZE when the value is larger), -ENOENT. */
int farm_kv_get_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, void *val, uint32_t cap, uint32_t *len);
int farm_kv_put_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, const void *val, uint32_t vlen);
int farm_kv_del_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen);

/*
 * farm_kv_mget() - look up @n keys at once (all in flight together); @cont
 * runs once all are done, with per-key statuses in @status (0 or
 * -ENOENT...), values copied into @vals (@cap bytes each) and lengths in
 * @lens. Keys are not looked up atomically together.
 */
typedef void (*farm_kv_mget_fn)(farm_loop *loop, void *ctx);
int farm_kv_mget(farm_kv *kv, farm_loop *loop, unsigned n,
                 const void *const *keys, const uint32_t *klens, void *vals,
                 uint32_t cap, uint32_t *lens, int *status,
                 farm_kv_mget_fn cont, void *ctx);

/* The named-object directory: a name names a fat pointer (kept in the
 * same table under a reserved key prefix). */
int farm_kv_name_sync(farm_kv *kv, farm_loop *loop, const char *name,
                      farm_fatptr p);
int farm_kv_lookup_sync(farm_kv *kv, farm_loop *loop, const char *name,
                        farm_fatptr *p);

#endif
