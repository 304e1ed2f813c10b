/*
 * The key-value store of a cluster of libfarm machines: the public API is
 * include/farm/kv.h; this header adds the hashtable underneath and the
 * store's messages (for the library and its tests). Internal; not
 * installed.
 *
 * Multi-get batch (FARM_MSGT_KV_MGET, an RPC to the loop that serves the
 * owner's shard region), all fields in host byte order (machines of a
 * cluster share one):
 *   request: struct farm_kv_mget_req, then nkeys times
 *            [u16 klen][klen bytes of key], packed, nothing after
 *   reply:   struct farm_kv_mget_rep, then nkeys times, in request order,
 *            [i32 status][u32 vlen] and, for status 0, vlen value bytes
 *            (packed). status: 0 (found), -ENOENT, -EMSGSIZE (the value
 *            is longer than the request's cap; vlen is its length, no
 *            bytes follow), FARM_KV_MGET_SPILL (found, but the value did
 *            not fit in this reply: the asker looks it up itself), or
 *            another lookup error.
 * A malformed request gets an error reply (farm_msg_reply_error): -EINVAL
 * (truncated, trailing bytes, nkeys 0, a key of 0 or more than
 * FARM_KV_MAX_KEY bytes, a key of another machine's shard, cap above
 * FARM_KV_MAX_VALUE, flags set), -E2BIG (more than FARM_KV_MGET_BATCH_MAX
 * keys), -EAGAIN (this machine has not joined yet).
 */
#ifndef FARM_KV_KV_H
#define FARM_KV_KV_H

#include <farm/kv.h>
#include <farm/txn.h>

#include "hashtable/ht.h"
#include "node/node.h"

#define FARM_MSGT_KV_SHARD 0xf140u /* -> the machine's shard descriptor */
#define FARM_MSGT_KV_MGET  0xf141u /* multi-get batch -> statuses, values */
#define FARM_MSGT_KV_SHARDS                            \
	0xf142u /* -> the installed shard list (u32 n, \
	           then n struct farm_ht_shard) */

/* Keys one batch request may carry. */
#define FARM_KV_MGET_BATCH_MAX 1024u
/* Reply status: found, value not included (look it up separately). */
#define FARM_KV_MGET_SPILL 1

struct farm_kv_mget_req {
	uint16_t nkeys;
	uint16_t flags; /* 0 */
	uint32_t cap;   /* longest value the asker takes */
};

struct farm_kv_mget_rep {
	uint32_t nkeys; /* the request's */
	uint32_t pad;
};

_Static_assert(sizeof(struct farm_kv_mget_req) == 8, "mget request layout");
_Static_assert(sizeof(struct farm_kv_mget_rep) == 8, "mget reply layout");

/* The store's hashtable (the asynchronous farm_ht_* calls, its stats). */
farm_ht *farm_kv_table(farm_kv *kv);

/*
 * Tests only (tests/test_campaign.c). The store keeps no shard list across
 * a whole-cluster restart: its shards survive in the regions, but no
 * machine knows where they are once every one restarted. Until it does,
 * a test saves the list a machine installed (farm_kv_testing_shards: its
 * length, at most @max copied; 0 before the join) and installs it again
 * on the restarted machines, as a join would (farm_kv_testing_install: 0;
 * -EINVAL when joined already or @n is 0 or too many; the hashtable's
 * error).
 */
unsigned farm_kv_testing_shards(const farm_kv *kv, struct farm_ht_shard *sd,
                                unsigned max);
int farm_kv_testing_install(farm_kv *kv, const struct farm_ht_shard *sd,
                            unsigned n);

#endif
