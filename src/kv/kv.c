/*
 * The cluster's key-value store (include/farm/kv.h, kv.h): the handle, its
 * shard handlers and counters. Joining is join.c, single operations
 * ops.c, the blocking wrappers sync.c, multi-get mget.c (asking) and
 * mget_serve.c (owning), owner-served gets owner_lookup.c (asking) and
 * owner_serve.c (owning), the named-object directory dir.c.
 */
#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "util/common.h"
#include "util/log.h"
#include "util/stat.h"

_Static_assert(FARM_KV_MAX_KEY == FARM_HT_MAX_KEY, "key limit");
_Static_assert(FARM_KV_MAX_VALUE == FARM_HT_MAX_VALUE, "value limit");
_Static_assert(FARM_KV_MAX_KEY <= UINT16_MAX, "klen fits the batch's u16");
_Static_assert(MAX_SHARDS <= FARM_HT_MAX_SHARDS, "a shard per machine");

static void h_shard(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_kv *kv = arg;
	int rc;
	if (!in->token.call_id)
		return;
	/* Acquire: pairs with the release stores of shard_ready in join.c
	 * (kv->mine is written). */
	if (!atomic_load_explicit(&kv->shard_ready, memory_order_acquire))
		rc = farm_msg_reply_error(loop, &in->token, -EAGAIN);
	else
		rc = farm_msg_reply(loop, &in->token, kv->mine,
		                    kv->per * (uint32_t)sizeof(kv->mine[0]));
	if (rc)
		farm_warn("kv: cannot answer machine %" PRIu32,
		          in->src_machine);
}

/* FARM_MSGT_KV_SHARDS: the shard list this machine installed (for a
 * machine that joins the store late: farm_kv_join_existing_sync). */
static void h_shards(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_kv *kv = arg;
	if (!in->token.call_id)
		return;
	int rc;
	if (!joined(kv)) {
		rc = farm_msg_reply_error(loop, &in->token, -EAGAIN);
	} else {
		uint8_t buf[4 + sizeof(kv->shards)];
		uint32_t n = kv->nshards;
		memcpy(buf, &n, 4);
		memcpy(buf + 4, kv->shards, n * sizeof(kv->shards[0]));
		rc = farm_msg_reply(loop, &in->token, buf,
		                    4 + n * (uint32_t)sizeof(kv->shards[0]));
	}
	if (rc)
		farm_warn("kv: cannot answer machine %" PRIu32,
		          in->src_machine);
}

int farm_kv_open(const struct farm_kv_env *env, const struct farm_kv_attr *attr,
                 uint32_t buckets_per_machine, farm_kv **out)
{
	unsigned per =
	        attr && attr->shards_per_machine ? attr->shards_per_machine : 1;
	if (!env || !out || !buckets_per_machine || per > MAX_SHARDS)
		return -EINVAL;
	farm_kv *kv = calloc(1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->env = *env;
	kv->msg = env->msg;
	kv->as = env->as;
	kv->me = env->me;
	kv->per = per;
	/* The machine's buckets shared among its shards. */
	kv->nbuckets = FARM_MAX(1u, buckets_per_machine / per);
	kv->fabric = env->fabric;
	struct farm_ht_attr ha = {0};
	if (attr)
		ha = (struct farm_ht_attr){.neighborhood = attr->neighborhood,
		                           .key_inline = attr->key_inline,
		                           .val_inline = attr->val_inline};
	int rc = farm_ht_create(env->txm, kv->as, env->galloc, kv->msg, &ha,
	                        &kv->ht);
	if (!rc)
		rc = farm_msg_handle(kv->msg, FARM_MSGT_KV_SHARD, h_shard, kv);
	if (!rc)
		rc = farm_msg_handle(kv->msg, FARM_MSGT_KV_MGET,
		                     farm_kv_mget_serve, kv);
	if (!rc)
		rc = farm_msg_handle(kv->msg, FARM_MSGT_KV_SHARDS, h_shards,
		                     kv);
	if (!rc)
		rc = farm_msg_handle(kv->msg, FARM_MSGT_KV_OGET,
		                     farm_kv_owner_serve, kv);
	if (!rc)
		rc = farm_kv_set_lookup(kv, FARM_KV_LOOKUP_AUTO);
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
	if (kv->env.release)
		kv->env.release(kv->env.host);
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

uint32_t farm_kv_value_limit(const farm_kv *kv, uint32_t klen)
{
	return kv ? farm_ht_max_value(kv->ht, klen) : 0;
}

void farm_kv_stats_read(const farm_kv *kv, farm_kv_stats *out, size_t size)
{
	if (!kv || !out)
		return;
	uint64_t v[S_N];
	for (int i = 0; i < S_N; i++)
		v[i] = atomic_load_explicit(&kv->st[i], memory_order_relaxed);
	farm_kv_stats s = {.mget_calls = v[S_CALLS],
	                   .mget_keys = v[S_KEYS],
	                   .mget_local = v[S_LOCAL],
	                   .mget_first_hits = v[S_FIRST_HITS],
	                   .mget_misses = v[S_MISSES],
	                   .mget_msgs = v[S_MSGS],
	                   .mget_spills = v[S_SPILLS],
	                   .mget_fallbacks = v[S_FALLBACKS],
	                   .mget_chased = v[S_CHASED],
	                   .mget_served = v[S_SERVED],
	                   .mget_served_keys = v[S_SERVED_KEYS],
	                   .mget_bad = v[S_BAD]};
	farm_stats_copy(out, size, &s, sizeof(s));
}

int farm_kv_table_stats_get(const farm_kv *kv, farm_kv_table_stats *out)
{
	if (!kv || !out || out->size < offsetof(farm_kv_table_stats, lookups))
		return -EINVAL;
	struct farm_ht_stats h;
	farm_ht_stats_get(kv->ht, &h);
	farm_kv_table_stats s = {.size = sizeof(s),
	                         .version = FARM_KV_TABLE_STATS_VERSION,
	                         .lookups = h.lookups,
	                         .lookup_reads = h.lookup_reads,
	                         .lookup_retries = h.lookup_retries,
	                         .lookup_chain_reads = h.lookup_chain_reads,
	                         .puts = h.puts,
	                         .dels = h.dels,
	                         .hops = h.hops,
	                         .chain_appends = h.chain_appends,
	                         .chain_frees = h.chain_frees,
	                         .combined_txns = h.combined_txns,
	                         .found = h.found,
	                         .not_found = h.not_found};
	/* An older caller's struct is a prefix of this one. */
	size_t n = out->size < sizeof(s) ? out->size : sizeof(s);
	s.size = (uint32_t)n;
	memcpy(out, &s, n);
	return 0;
}
