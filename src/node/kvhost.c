/*
 * The KV store on a machine: farm_kv_create (include/farm/kv.h) gives the
 * store (src/kv, below this layer) what it needs of the machine, as a
 * struct farm_kv_env, and puts its counters on the control socket.
 */
#include <errno.h>
#include <stdlib.h>

#include "coord/membership.h"
#include "kv/kv.h"
#include "node/ctl.h"
#include "node/node.h"
#include "node/node_int.h"
#include "util/log.h"

/* What the machine keeps for its store: the callbacks' host. */
struct kvhost {
	farm_node *node;
	farm_kv *kv;
	struct farm_ctl_source ctl; /* counters for the control socket */
};

#define KV_C(f, help) FARM_CTL_COUNTER(farm_kv_stats, f, help)
static const struct farm_ctl_field kv_fields[] = {
        KV_C(mget_calls, "multi-gets accepted"),
        KV_C(mget_keys, "keys in them"),
        KV_C(mget_local, "multi-get keys of this machine's shard"),
        KV_C(mget_first_hits, "multi-get keys the first read resolved"),
        KV_C(mget_misses, "multi-get keys sent to their owner"),
        KV_C(mget_msgs, "multi-get batch messages sent"),
        KV_C(mget_spills, "values too long for a batch reply"),
        KV_C(mget_fallbacks, "batched keys looked up separately"),
        KV_C(mget_chased, "multi-get keys the first read left to a "
                          "whole lookup"),
        KV_C(mget_served, "multi-get batches answered here"),
        KV_C(mget_served_keys, "keys in them"),
        KV_C(mget_bad, "malformed multi-get batches refused"),
};

#define HT_C(f, help) FARM_CTL_COUNTER(struct farm_ht_stats, f, help)
static const struct farm_ctl_field ht_fields[] = {
        HT_C(lookups, "hashtable lookups started here"),
        HT_C(lookup_reads, "one-sided reads of those lookups"),
        HT_C(lookup_retries, "lookups started over (mixed views)"),
        HT_C(lookup_chain_reads, "overflow chain blocks read"),
        HT_C(puts, "puts sent from here"),
        HT_C(dels, "deletes sent from here"),
        HT_C(hops, "pairs moved between buckets (owner)"),
        HT_C(chain_appends, "overflow chain blocks appended (owner)"),
        HT_C(chain_frees, "overflow chain blocks freed (owner)"),
        HT_C(combined_txns, "transactions that combined several writes"),
        HT_C(found, "lookups that found their key"),
        HT_C(not_found, "lookups that did not"),
};

/* The store's counters for `farm stats` (on the control thread). */
static void ctl_stats(void *ctx, struct farm_ctl_out *o)
{
	struct kvhost *h = ctx;
	farm_kv_stats ks;
	struct farm_ht_stats hs;
	farm_kv_stats_get(h->kv, &ks);
	farm_ht_stats_get(farm_kv_table(h->kv), &hs);
	farm_ctl_put(o, "kv", kv_fields,
	             sizeof(kv_fields) / sizeof(kv_fields[0]), &ks);
	farm_ctl_put(o, "ht", ht_fields,
	             sizeof(ht_fields) / sizeof(ht_fields[0]), &hs);
}

static int host_keep(void *host, const char *name, const void *data, size_t len)
{
	return farm_node_keep(((struct kvhost *)host)->node, name, data, len);
}

static long host_kept(void *host, const char *name, void *buf, size_t cap)
{
	return farm_node_kept(((struct kvhost *)host)->node, name, buf, cap);
}

/* The store's shard regions, for the manager to balance when this
 * machine manages (every machine tells its own membership the same list,
 * so any manager has it). */
static void host_balance(void *host, const uint32_t *regions, unsigned n)
{
	farm_node *node = ((struct kvhost *)host)->node;
	/* The rings the address space places with (node.c). */
	struct farm_ring_attr attr = {.replicas = node->cfg.replicas,
	                              .rings = node->cfg.rings,
	                              .points = node->cfg.ring_points};
	int rc = node->mem
	                 ? farm_membership_balance(node->mem, &attr, regions, n)
	                 : 0;
	if (rc)
		farm_warn("kv: shard regions not balanced: %s",
		          farm_strerror(rc));
}

/* farm_kv_destroy: the counters leave the control socket first, so no
 * request reads a store being freed. */
static void host_release(void *host)
{
	struct kvhost *h = host;
	farm_ctl_remove(&h->ctl);
	free(h);
}

int farm_kv_create(farm_node *node, const struct farm_kv_attr *attr,
                   uint32_t buckets_per_machine, farm_kv **out)
{
	if (!node || !out || !buckets_per_machine)
		return -EINVAL;
	struct kvhost *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->node = node;
	struct farm_kv_env env = {
	        .txm = farm_node_txm(node),
	        .as = farm_node_as(node),
	        .galloc = farm_node_galloc(node),
	        .msg = farm_node_msg(node),
	        .me = farm_node_id(node),
	        .host = h,
	        .keep = host_keep,
	        .kept = host_kept,
	        .release = host_release,
	        .balance = host_balance,
	        .fabric = farm_fabric_provider(farm_node_fabric(node))};
	struct farm_kv_attr a = attr ? *attr : (struct farm_kv_attr){0};
	if (!a.shards_per_machine)
		a.shards_per_machine = node->cfg.kv_shards;
	int rc = farm_kv_open(&env, &a, buckets_per_machine, &h->kv);
	enum farm_kv_lookup mode;
	if (!rc && farm_kv_lookup_parse(node->cfg.kv_lookup, &mode) == 0)
		rc = farm_kv_set_lookup(h->kv, mode);
	if (rc) {
		free(h);
		return rc;
	}
	h->ctl = (struct farm_ctl_source){.fn = ctl_stats, .ctx = h};
	farm_ctl_add(farm_node_ctl(node), &h->ctl);
	*out = h->kv;
	return 0;
}
