/*
 * The cluster's key-value store (include/farm/kv.h, kv.h).
 */
#include "kv/kv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "node/ctl.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

/* The shard list, kept with the machine's data directory (node.h,
 * farm_node_keep): after a whole-cluster restart the shards' buckets are
 * where they were, and this is the only way back to them. */
#define KV_KEPT "kv.shards"

#define DIR_PREFIX   0xffu /* first byte of directory keys */
#define MAX_MACHINES FARM_NODE_MAX_MACHINES
/* A batch the owner does not answer in this time fails its keys. */
#define MGET_TIMEOUT_NS (5ull * 1000000000ull)

_Static_assert(FARM_KV_MAX_KEY == FARM_HT_MAX_KEY, "key limit");
_Static_assert(FARM_KV_MAX_VALUE == FARM_HT_MAX_VALUE, "value limit");
_Static_assert(FARM_KV_MAX_KEY <= UINT16_MAX, "klen fits the batch's u16");
_Static_assert(MAX_MACHINES <= FARM_HT_MAX_SHARDS, "a shard per machine");

enum {
	S_CALLS,
	S_KEYS,
	S_LOCAL,
	S_FIRST_HITS,
	S_MISSES,
	S_MSGS,
	S_SPILLS,
	S_FALLBACKS,
	S_SERVED,
	S_SERVED_KEYS,
	S_BAD,
	S_N
};

struct farm_kv {
	farm_node *node;
	farm_ht *ht;
	farm_msg *msg;
	farm_as *as;
	uint32_t me;
	uint32_t nbuckets;
	_Atomic int shard_ready;
	struct farm_ht_shard mine;
	/* The installed shard list (set once, before joined is raised). */
	_Atomic int joined;
	unsigned nshards, my_shard;
	struct farm_ht_shard shards[MAX_MACHINES];
	_Atomic uint64_t st[S_N];
	_Atomic uint64_t sync_timeout_ns; /* the *_sync wrappers' default */
	struct farm_ctl_source ctl;       /* counters for the control socket */
};

static void st_add(farm_kv *kv, int i, uint64_t n)
{
	atomic_fetch_add_explicit(&kv->st[i], n, memory_order_relaxed);
}

static bool joined(const farm_kv *kv)
{
	return atomic_load_explicit(&kv->joined, memory_order_acquire) != 0;
}

/* The index of the shard @key lives in (joined stores only). */
static unsigned shard_of_key(const farm_kv *kv, const void *key, uint32_t klen)
{
	return farm_ht_shard_index(farm_ht_hash(key, klen), kv->nshards);
}

/* Keys: 0, -EINVAL (NULL, empty), -EMSGSIZE (too long). */
static int check_key(const void *key, uint32_t klen)
{
	if (!key || klen == 0)
		return -EINVAL;
	return klen > FARM_KV_MAX_KEY ? -EMSGSIZE : 0;
}

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

static void h_mget(farm_loop *loop, const farm_msg_in *in, void *arg);

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
	farm_kv *kv = ctx;
	farm_kv_stats ks;
	struct farm_ht_stats hs;
	farm_kv_stats_get(kv, &ks);
	farm_ht_stats_get(kv->ht, &hs);
	farm_ctl_put(o, "kv", kv_fields,
	             sizeof(kv_fields) / sizeof(kv_fields[0]), &ks);
	farm_ctl_put(o, "ht", ht_fields,
	             sizeof(ht_fields) / sizeof(ht_fields[0]), &hs);
}

int farm_kv_create(farm_node *node, const struct farm_kv_attr *attr,
                   uint32_t buckets_per_machine, farm_kv **out)
{
	if (!node || !out || !buckets_per_machine)
		return -EINVAL;
	farm_kv *kv = calloc(1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->node = node;
	kv->msg = farm_node_msg(node);
	kv->as = farm_node_as(node);
	kv->me = farm_node_id(node);
	kv->nbuckets = buckets_per_machine;
	struct farm_ht_attr ha = {0};
	if (attr)
		ha = (struct farm_ht_attr){.neighborhood = attr->neighborhood,
		                           .key_inline = attr->key_inline,
		                           .val_inline = attr->val_inline};
	int rc = farm_ht_create(farm_node_txm(node), kv->as,
	                        farm_node_galloc(node), kv->msg, &ha, &kv->ht);
	if (!rc)
		rc = farm_msg_handle(kv->msg, FARM_MSGT_KV_SHARD, h_shard, kv);
	if (!rc)
		rc = farm_msg_handle(kv->msg, FARM_MSGT_KV_MGET, h_mget, kv);
	if (!rc)
		rc = farm_msg_handle(kv->msg, FARM_MSGT_KV_SHARDS, h_shards,
		                     kv);
	if (rc) {
		farm_ht_destroy(kv->ht);
		free(kv);
		return rc;
	}
	kv->ctl = (struct farm_ctl_source){.fn = ctl_stats, .ctx = kv};
	farm_ctl_add(farm_node_ctl(node), &kv->ctl);
	*out = kv;
	return 0;
}

void farm_kv_destroy(farm_kv *kv)
{
	if (!kv)
		return;
	farm_ctl_remove(&kv->ctl);
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

void farm_kv_stats_get(const farm_kv *kv, farm_kv_stats *out)
{
	if (!kv || !out)
		return;
	uint64_t v[S_N];
	for (int i = 0; i < S_N; i++)
		v[i] = atomic_load_explicit(&kv->st[i], memory_order_relaxed);
	*out = (farm_kv_stats){.mget_calls = v[S_CALLS],
	                       .mget_keys = v[S_KEYS],
	                       .mget_local = v[S_LOCAL],
	                       .mget_first_hits = v[S_FIRST_HITS],
	                       .mget_misses = v[S_MISSES],
	                       .mget_msgs = v[S_MSGS],
	                       .mget_spills = v[S_SPILLS],
	                       .mget_fallbacks = v[S_FALLBACKS],
	                       .mget_served = v[S_SERVED],
	                       .mget_served_keys = v[S_SERVED_KEYS],
	                       .mget_bad = v[S_BAD]};
}

/* ---- joining ------------------------------------------------------------- */

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

/* Install @n shards @sd: this machine's is @sd[i] with machine == me (if
 * any). */
static int install(farm_kv *kv, const struct farm_ht_shard *sd, unsigned n)
{
	int rc = farm_ht_set_shards(kv->ht, sd, n);
	if (rc)
		return rc;
	memcpy(kv->shards, sd, n * sizeof(*sd));
	kv->nshards = n;
	kv->my_shard = UINT32_MAX; /* none: a late machine */
	for (unsigned i = 0; i < n; i++)
		if (sd[i].machine == kv->me) {
			kv->my_shard = i;
			kv->mine = sd[i];
			atomic_store_explicit(&kv->shard_ready, 1,
			                      memory_order_release);
		}
	atomic_store_explicit(&kv->joined, 1, memory_order_release);
	return 0;
}

/* After a whole-cluster restart: the shard list this machine kept. 1:
 * installed; 0: none kept (a fresh machine); <0: an error (a damaged
 * list, or one of another size than @nmachines when nonzero). */
static int install_kept(farm_kv *kv, unsigned nmachines)
{
	struct farm_ht_shard sd[MAX_MACHINES];
	long n = farm_node_kept(kv->node, KV_KEPT, sd, sizeof(sd));
	if (n == -ENOENT || FARM_FAULT_SWITCH(FARM_FP_KV_NO_KEPT))
		return 0;
	if (n < 0)
		return (int)n;
	unsigned k = (unsigned)((size_t)n / sizeof(sd[0]));
	if (n == 0 || (size_t)n % sizeof(sd[0]) || (size_t)n > sizeof(sd)) {
		farm_err("kv: machine %" PRIu32 ": the kept shard list is "
		         "malformed (%ld bytes)",
		         kv->me, n);
		return FARM_ECORRUPT;
	}
	if (nmachines && k != nmachines) {
		farm_err("kv: machine %" PRIu32 ": the store had %u shards "
		         "before the restart, not %u",
		         kv->me, k, nmachines);
		return -EINVAL;
	}
	int rc = install(kv, sd, k);
	if (!rc)
		farm_info("kv: machine %" PRIu32 ": %u shards of the previous "
		          "incarnation installed (whole-cluster restart)",
		          kv->me, k);
	return rc ? rc : 1;
}

/* Keep the installed list for a whole-cluster restart. */
static void keep_list(farm_kv *kv)
{
	int rc = farm_node_keep(kv->node, KV_KEPT, kv->shards,
	                        kv->nshards * sizeof(kv->shards[0]));
	if (rc && rc != -ENOTSUP)
		farm_warn("kv: machine %" PRIu32 ": the shard list is not "
		          "kept for a restart: %s",
		          kv->me, farm_strerror(rc));
}

int farm_kv_join_sync(farm_kv *kv, farm_loop *loop, unsigned nmachines,
                      int timeout_ms)
{
	if (!kv || !loop || nmachines == 0 || nmachines > MAX_MACHINES ||
	    kv->me >= nmachines || joined(kv))
		return -EINVAL;
	int kept = install_kept(kv, nmachines);
	if (kept)
		return kept < 0 ? kept : 0;
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
	for (uint32_t m = 0; m < nmachines; m++) {
		if (m == kv->me) {
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
	rc = farm_ht_set_shards(kv->ht, sd, nmachines);
	if (rc)
		return rc;
	memcpy(kv->shards, sd, nmachines * sizeof(*sd));
	kv->nshards = nmachines;
	kv->my_shard = kv->me;
	atomic_store_explicit(&kv->joined, 1, memory_order_release);
	keep_list(kv);
	return 0;
}

/* The shard list from machine @from (FARM_MSGT_KV_SHARDS). */
struct shards_wait {
	volatile int done;
	int status;
	uint32_t n;
	struct farm_ht_shard sd[MAX_MACHINES];
};

static void shards_reply(farm_loop *loop, void *ctx, int status,
                         const void *reply, uint32_t len)
{
	(void)loop;
	struct shards_wait *w = ctx;
	uint32_t n = 0;
	if (!status && len >= 4)
		memcpy(&n, reply, 4);
	if (!status && (len < 4 || n == 0 || n > MAX_MACHINES ||
	                len != 4 + n * (uint32_t)sizeof(w->sd[0])))
		status = FARM_ECORRUPT; /* a malformed answer */
	if (!status) {
		w->n = n;
		memcpy(w->sd, (const uint8_t *)reply + 4, n * sizeof(w->sd[0]));
	}
	w->status = status;
	w->done = 1;
}

int farm_kv_join_existing_sync(farm_kv *kv, farm_loop *loop, uint32_t from,
                               int timeout_ms)
{
	if (!kv || !loop || from == kv->me || timeout_ms < 0 || joined(kv))
		return -EINVAL;
	int kept = install_kept(kv, 0);
	if (kept)
		return kept < 0 ? kept : 0;
	uint64_t deadline = farm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct shards_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	int rc;
	for (;;) {
		uint64_t now = farm_now_ns();
		memset(w, 0, sizeof(*w));
		rc = farm_msg_call(loop, from, 0, FARM_MSGT_KV_SHARDS, NULL, 0,
		                   deadline > now ? deadline - now : 1,
		                   shards_reply, w);
		if (!rc) {
			rc = farm_loop_wait(loop, &w->done,
			                    deadline > now ? deadline - now
			                                   : 1);
			if (!rc)
				rc = w->status;
		}
		if ((rc != -EAGAIN && rc != -ETIMEDOUT) ||
		    farm_now_ns() >= deadline)
			break;
		for (int i = 0; i < 64; i++) /* not joined yet: ask again */
			(void)farm_loop_poll(loop);
	}
	if (!rc)
		rc = install(kv, w->sd, w->n);
	if (!rc)
		keep_list(kv);
	free(w);
	return rc;
}

/* ---- single operations --------------------------------------------------- */

int farm_kv_get(farm_kv *kv, farm_loop *loop, const void *key, uint32_t klen,
                farm_kv_get_fn cont, void *ctx)
{
	if (!kv)
		return -EINVAL;
	int rc = check_key(key, klen);
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

/* ---- blocking wrappers --------------------------------------------------- */

/* Each waits at most its deadline (farm_kv_set_sync_timeout, or the
 * *_timed variant's). Its record is on the heap: one that gives up leaves
 * its operation running, whose continuation frees the record it finds
 * abandoned (the continuation always runs; ops here never outlive it). */

struct sync_op {
	volatile int done;
	int status;
	bool abandoned;
	void *val; /* get: the caller's buffer, cap bytes */
	uint32_t cap, len;
	uint8_t *vals; /* mget: the lookup's own arrays */
	uint32_t *lens;
	int *st;
};

void farm_kv_set_sync_timeout(farm_kv *kv, uint64_t timeout_ns)
{
	if (kv)
		atomic_store_explicit(&kv->sync_timeout_ns, timeout_ns,
		                      memory_order_relaxed);
}

static uint64_t sync_timeout(const farm_kv *kv)
{
	return atomic_load_explicit(&kv->sync_timeout_ns, memory_order_relaxed);
}

static void sop_free(struct sync_op *w)
{
	free(w->vals);
	free(w->lens);
	free(w->st);
	free(w);
}

/* The operation ended: 1 when the record was abandoned (now freed). */
static bool sop_end(struct sync_op *w, int status)
{
	if (w->abandoned) {
		sop_free(w);
		return true;
	}
	w->status = status;
	w->done = 1;
	return false;
}

/* Drive @loop until @w is done (0) or its deadline passed (the error, @w
 * abandoned to its continuation). */
static int sop_wait(farm_loop *loop, struct sync_op *w, uint64_t timeout_ns)
{
	int rc = farm_loop_wait(loop, &w->done, timeout_ns);
	if (w->done)
		return 0;
	w->abandoned = true;
	return rc ? rc : -ETIMEDOUT;
}

static void get_done(farm_loop *loop, void *ctx, int status, const void *val,
                     uint32_t len)
{
	(void)loop;
	struct sync_op *w = ctx;
	if (!status && !w->abandoned) {
		w->len = len;
		if (len > w->cap)
			status = -EMSGSIZE;
		else
			memcpy(w->val, val, len);
	}
	(void)sop_end(w, status);
}

static void op_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)sop_end(ctx, status);
}

int farm_kv_get_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                           uint32_t klen, void *val, uint32_t cap,
                           uint32_t *len, uint64_t timeout_ns)
{
	if (!kv || !loop || (!val && cap))
		return -EINVAL;
	struct sync_op *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->val = val;
	w->cap = cap;
	int rc;
	while ((rc = farm_kv_get(kv, loop, key, klen, get_done, w)) == -EAGAIN)
		(void)farm_loop_poll(loop);
	if (!rc && (rc = sop_wait(loop, w, timeout_ns)))
		return rc;
	if (len)
		*len = w->len;
	rc = rc ? rc : w->status;
	sop_free(w);
	return rc;
}

int farm_kv_get_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, void *val, uint32_t cap, uint32_t *len)
{
	return farm_kv_get_sync_timed(kv, loop, key, klen, val, cap, len,
	                              kv ? sync_timeout(kv) : 0);
}

/* put (@val) or delete (@val NULL) */
static int change_sync(farm_kv *kv, farm_loop *loop, const void *key,
                       uint32_t klen, const void *val, uint32_t vlen,
                       uint64_t timeout_ns)
{
	struct sync_op *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	int rc = val ? farm_kv_put(kv, loop, key, klen, val, vlen, op_done, w)
	             : farm_kv_del(kv, loop, key, klen, op_done, w);
	if (!rc && (rc = sop_wait(loop, w, timeout_ns)))
		return rc;
	rc = rc ? rc : w->status;
	sop_free(w);
	return rc;
}

int farm_kv_put_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                           uint32_t klen, const void *val, uint32_t vlen,
                           uint64_t timeout_ns)
{
	if (!val)
		return -EINVAL;
	return change_sync(kv, loop, key, klen, val, vlen, timeout_ns);
}

int farm_kv_put_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen, const void *val, uint32_t vlen)
{
	return farm_kv_put_sync_timed(kv, loop, key, klen, val, vlen,
	                              kv ? sync_timeout(kv) : 0);
}

int farm_kv_del_sync_timed(farm_kv *kv, farm_loop *loop, const void *key,
                           uint32_t klen, uint64_t timeout_ns)
{
	return change_sync(kv, loop, key, klen, NULL, 0, timeout_ns);
}

int farm_kv_del_sync(farm_kv *kv, farm_loop *loop, const void *key,
                     uint32_t klen)
{
	return farm_kv_del_sync_timed(kv, loop, key, klen,
	                              kv ? sync_timeout(kv) : 0);
}

/* ---- multi-get: the asking side
 * ---------------------------------------------------------
 *
 * Every key of another machine's shard first gets farm_ht_get_first (one
 * READ of its bucket pair); keys of our own shard get a whole local
 * lookup. Once every first read is back, the unresolved keys go to their
 * owners, one batch message per machine (more only when one would not
 * fit). Keys whose values did not fit their batch's reply, and keys of a
 * batch that could not be sent, get a whole lookup of their own. A loop
 * has a bounded number of lookups in flight (-EAGAIN): the rest wait in
 * their queue until one completes.
 */

struct mg;

struct mg_key {
	struct mg *m;
	const uint8_t *key; /* in the mget's copy of the keys */
	uint32_t klen;
	uint32_t shard;
};

struct mg {
	farm_kv *kv;
	farm_loop *loop;
	unsigned n;
	uint8_t *vals;
	uint32_t cap;
	uint32_t *lens;
	int *status;
	farm_kv_mget_fn cont;
	void *ctx;
	unsigned left;       /* keys without their answer */
	unsigned first_left; /* first reads not back */
	unsigned inflight;   /* our lookups in flight */
	unsigned calls;      /* batches in flight */
	bool busy, again, in_call, retry_posted, sent;
	uint32_t *firstq, nfirst, firstpos; /* keys waiting for a first read */
	uint32_t *fullq, nfull, fullpos;    /* ... for a whole lookup */
	uint32_t *missq, nmiss;             /* unresolved: for the batches */
	uint8_t *keybuf;
	struct mg_key k[];
};

struct mg_batch {
	struct mg *m;
	uint32_t cap;
	unsigned nk;
	uint32_t idx[];
};

static void mg_advance(struct mg *m);

/* Key @i's answer. @len is the value's length (also for -EMSGSIZE). */
static void mg_finish_key(struct mg *m, uint32_t i, int status, const void *val,
                          uint32_t len)
{
	if (status == 0 && len > m->cap)
		status = -EMSGSIZE;
	if (status == 0 && len)
		memcpy(m->vals + (size_t)i * m->cap, val, len);
	m->lens[i] = status == 0 || status == -EMSGSIZE ? len : 0;
	m->status[i] = status;
	m->left--;
}

static void mg_first_done(farm_loop *loop, void *ctx, int status,
                          const void *val, uint32_t len)
{
	(void)loop;
	struct mg_key *k = ctx;
	struct mg *m = k->m;
	uint32_t i = (uint32_t)(k - m->k);
	m->inflight--;
	m->first_left--;
	if (status == FARM_HT_UNRESOLVED) {
		m->missq[m->nmiss++] = i;
	} else {
		if (status == 0 || status == -ENOENT)
			st_add(m->kv, S_FIRST_HITS, 1);
		mg_finish_key(m, i, status, val, len);
	}
	mg_advance(m);
}

static void mg_full_done(farm_loop *loop, void *ctx, int status,
                         const void *val, uint32_t len)
{
	(void)loop;
	struct mg_key *k = ctx;
	struct mg *m = k->m;
	m->inflight--;
	mg_finish_key(m, (uint32_t)(k - m->k), status, val, len);
	mg_advance(m);
}

/* Start what the queues hold while the loop takes more lookups; true when
 * it stopped on -EAGAIN. */
static bool mg_pump(struct mg *m)
{
	farm_ht *ht = m->kv->ht;
	while (m->fullpos < m->nfull) {
		uint32_t i = m->fullq[m->fullpos];
		struct mg_key *k = &m->k[i];
		m->inflight++; /* the continuation may run inside the call */
		int rc = farm_ht_get(ht, m->loop, k->key, k->klen, mg_full_done,
		                     k);
		if (rc == -EAGAIN) {
			m->inflight--;
			return true;
		}
		m->fullpos++;
		if (rc) {
			m->inflight--;
			mg_finish_key(m, i, rc, NULL, 0);
		}
	}
	while (m->firstpos < m->nfirst) {
		uint32_t i = m->firstq[m->firstpos];
		struct mg_key *k = &m->k[i];
		int rc = farm_ht_get_first(ht, m->loop, k->key, k->klen,
		                           mg_first_done, k);
		if (rc == -EAGAIN)
			return true;
		m->firstpos++;
		if (rc) {
			m->first_left--;
			mg_finish_key(m, i, rc, NULL, 0);
		} else {
			m->inflight++;
		}
	}
	return false;
}

/* Key @i gets a whole lookup of its own. */
static void mg_full(struct mg *m, uint32_t i)
{
	m->fullq[m->nfull++] = i;
}

static void mg_batch_reply(farm_loop *loop, void *ctx, int status,
                           const void *reply, uint32_t len);

/* One batch of @nk unresolved keys of shard @s. */
static void mg_send(struct mg *m, unsigned s, const uint32_t *idx, unsigned nk,
                    uint32_t reqlen)
{
	farm_kv *kv = m->kv;
	struct mg_batch *b = malloc(sizeof(*b) + nk * sizeof(uint32_t));
	uint8_t *req = malloc(reqlen);
	int rc = b && req ? 0 : -ENOMEM;
	if (!rc) {
		b->m = m;
		b->cap = FARM_MIN(m->cap, FARM_KV_MAX_VALUE);
		b->nk = nk;
		memcpy(b->idx, idx, nk * sizeof(uint32_t));
		struct farm_kv_mget_req q = {
		        .nkeys = (uint16_t)nk, .flags = 0, .cap = b->cap};
		memcpy(req, &q, sizeof(q));
		uint32_t off = sizeof(q);
		for (unsigned j = 0; j < nk; j++) {
			const struct mg_key *k = &m->k[idx[j]];
			uint16_t kl = (uint16_t)k->klen;
			memcpy(req + off, &kl, 2);
			memcpy(req + off + 2, k->key, k->klen);
			off += 2 + k->klen;
		}
		rc = farm_as_call(kv->as, m->loop, kv->shards[s].base,
		                  FARM_MSGT_KV_MGET, req, reqlen,
		                  MGET_TIMEOUT_NS, mg_batch_reply, b);
	}
	free(req);
	if (rc) {
		/* Not sent: each key is looked up on its own. */
		free(b);
		st_add(kv, S_FALLBACKS, nk);
		for (unsigned j = 0; j < nk; j++)
			mg_full(m, idx[j]);
		return;
	}
	m->calls++;
	st_add(kv, S_MSGS, 1);
	st_add(kv, S_MISSES, nk);
}

/* Every first read is back: the unresolved keys to their owners, grouped
 * by shard (one shard per machine), as few messages as fit. */
static void mg_send_batches(struct mg *m)
{
	farm_kv *kv = m->kv;
	uint32_t maxp = farm_msg_max_payload(kv->msg);
	uint32_t *idx = m->missq; /* reused in place, shard by shard */
	uint32_t nmiss = m->nmiss;
	uint32_t *grp = malloc((size_t)FARM_MAX(nmiss, 1u) * sizeof(uint32_t));
	if (!grp) {
		for (uint32_t j = 0; j < nmiss; j++)
			mg_finish_key(m, idx[j], -ENOMEM, NULL, 0);
		return;
	}
	for (unsigned s = 0; s < kv->nshards; s++) {
		unsigned ng = 0;
		for (uint32_t j = 0; j < nmiss; j++)
			if (m->k[idx[j]].shard == s)
				grp[ng++] = idx[j];
		unsigned first = 0, nk = 0;
		uint32_t reqlen = sizeof(struct farm_kv_mget_req);
		for (unsigned j = 0; j < ng; j++) {
			uint32_t add = 2 + m->k[grp[j]].klen;
			bool fits = nk < FARM_KV_MGET_BATCH_MAX &&
			            reqlen + add <= maxp &&
			            sizeof(struct farm_kv_mget_rep) +
			                            8ull * (nk + 1) <=
			                    maxp;
			if (!fits) {
				mg_send(m, s, grp + first, nk, reqlen);
				first = j;
				nk = 0;
				reqlen = sizeof(struct farm_kv_mget_req);
			}
			nk++;
			reqlen += add;
		}
		if (nk)
			mg_send(m, s, grp + first, nk, reqlen);
	}
	free(grp);
}

/* A batch reply's entries are well formed (nothing is applied before). */
static int mg_reply_check(const struct mg_batch *b, const uint8_t *p,
                          uint32_t len)
{
	struct farm_kv_mget_rep h;
	if (len < sizeof(h))
		return FARM_ECORRUPT;
	memcpy(&h, p, sizeof(h));
	if (h.nkeys != b->nk)
		return FARM_ECORRUPT;
	uint64_t off = sizeof(h);
	for (unsigned j = 0; j < b->nk; j++) {
		int32_t st;
		uint32_t vl;
		if (off + 8 > len)
			return FARM_ECORRUPT;
		memcpy(&st, p + off, 4);
		memcpy(&vl, p + off + 4, 4);
		off += 8;
		if (st == 0) {
			if (vl > b->cap || off + vl > len)
				return FARM_ECORRUPT;
			off += vl;
		} else if (st > 0 && st != FARM_KV_MGET_SPILL) {
			return FARM_ECORRUPT;
		}
	}
	return off == len ? 0 : FARM_ECORRUPT;
}

static void mg_batch_reply(farm_loop *loop, void *ctx, int status,
                           const void *reply, uint32_t len)
{
	(void)loop;
	struct mg_batch *b = ctx;
	struct mg *m = b->m;
	farm_kv *kv = m->kv;
	m->calls--;
	if (!status)
		status = mg_reply_check(b, reply, len);
	if (!status) {
		const uint8_t *p = reply;
		uint32_t off = sizeof(struct farm_kv_mget_rep);
		for (unsigned j = 0; j < b->nk; j++) {
			int32_t st;
			uint32_t vl;
			memcpy(&st, p + off, 4);
			memcpy(&vl, p + off + 4, 4);
			off += 8;
			if (st == FARM_KV_MGET_SPILL) {
				st_add(kv, S_SPILLS, 1);
				mg_full(m, b->idx[j]);
				continue;
			}
			mg_finish_key(m, b->idx[j], st, st ? NULL : p + off,
			              vl);
			if (!st)
				off += vl;
		}
	} else if (status == FARM_EPEERDEAD || status == -ETIMEDOUT ||
	           status == -ECANCELED || status == FARM_ECORRUPT) {
		for (unsigned j = 0; j < b->nk; j++)
			mg_finish_key(m, b->idx[j], status, NULL, 0);
	} else {
		/* Refused (the owner's serving loop cannot look keys up, or
		 * it is out of memory): each key is looked up on its own. */
		farm_warn("kv: machine %" PRIu32 " refused a multi-get "
		          "batch: %s",
		          kv->shards[m->k[b->idx[0]].shard].machine,
		          farm_strerror(status));
		st_add(kv, S_FALLBACKS, b->nk);
		for (unsigned j = 0; j < b->nk; j++)
			mg_full(m, b->idx[j]);
	}
	free(b);
	mg_advance(m);
}

static void mg_free(struct mg *m)
{
	free(m->firstq);
	free(m->keybuf);
	free(m);
}

static void mg_done_work(farm_loop *loop, void *ctx, int status)
{
	(void)status;
	struct mg *m = ctx;
	m->cont(loop, m->ctx);
	mg_free(m);
}

static void mg_retry(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct mg *m = ctx;
	m->retry_posted = false;
	if (status) { /* the loop is closing: the waiting keys fail */
		while (m->fullpos < m->nfull)
			mg_finish_key(m, m->fullq[m->fullpos++], status, NULL,
			              0);
		while (m->firstpos < m->nfirst) {
			m->first_left--;
			mg_finish_key(m, m->firstq[m->firstpos++], status, NULL,
			              0);
		}
	}
	mg_advance(m);
}

/* Move on after any event; the last one runs the continuation. */
static void mg_advance(struct mg *m)
{
	if (m->busy) { /* called back from inside a call we are making */
		m->again = true;
		return;
	}
	m->busy = true;
	do {
		m->again = false;
		bool stalled = mg_pump(m);
		if (!m->sent && m->first_left == 0) {
			m->sent = true;
			mg_send_batches(m);
			m->again = true;
			continue;
		}
		/* Stalled with none of ours in flight: the lookups that hold
		 * the loop's buffers are others'; try again on a later pass.
		 */
		if (stalled && m->inflight == 0 && !m->retry_posted) {
			if (farm_loop_post(m->loop, mg_retry, m) == 0)
				m->retry_posted = true;
			else
				mg_retry(m->loop, m, -ENOMEM);
		}
	} while (m->again);
	m->busy = false;
	if (!m->in_call && m->left == 0 && m->calls == 0 && !m->retry_posted) {
		m->cont(m->loop, m->ctx);
		mg_free(m);
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
	if (n > FARM_KV_MGET_MAX)
		return -E2BIG;
	if (!joined(kv))
		return -ENOENT;
	size_t kbytes = 0;
	for (unsigned i = 0; i < n; i++)
		if (!check_key(keys[i], klens[i]))
			kbytes += klens[i];
	struct mg *m = calloc(1, sizeof(*m) + n * sizeof(struct mg_key));
	if (!m)
		return -ENOMEM;
	m->firstq = malloc(3ull * n * sizeof(uint32_t));
	m->keybuf = malloc(kbytes ? kbytes : 1);
	if (!m->firstq || !m->keybuf) {
		mg_free(m);
		return -ENOMEM;
	}
	m->fullq = m->firstq + n;
	m->missq = m->fullq + n;
	m->kv = kv;
	m->loop = loop;
	m->n = n;
	m->vals = vals;
	m->cap = cap;
	m->lens = lens;
	m->status = status;
	m->cont = cont;
	m->ctx = ctx;
	m->left = n;
	m->in_call = true;
	size_t off = 0;
	unsigned local = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct mg_key *k = &m->k[i];
		k->m = m;
		int rc = check_key(keys[i], klens[i]);
		if (rc) { /* this key fails alone */
			mg_finish_key(m, i, rc, NULL, 0);
			continue;
		}
		memcpy(m->keybuf + off, keys[i], klens[i]);
		k->key = m->keybuf + off;
		k->klen = klens[i];
		off += klens[i];
		k->shard = shard_of_key(kv, k->key, k->klen);
		if (kv->shards[k->shard].machine == kv->me) {
			mg_full(m, i); /* our shard: a local lookup */
			local++;
		} else {
			m->firstq[m->nfirst++] = i;
		}
	}
	m->first_left = m->nfirst;
	st_add(kv, S_CALLS, 1);
	st_add(kv, S_KEYS, n);
	st_add(kv, S_LOCAL, local);
	mg_advance(m);
	m->in_call = false;
	if (m->left == 0 && m->calls == 0 && !m->retry_posted) {
		/* All answered already: @cont still runs on a later pass. */
		int rc = farm_loop_post(loop, mg_done_work, m);
		if (rc) {
			mg_free(m);
			return rc;
		}
	}
	return 0;
}

static void mg_sync_done(farm_loop *loop, void *ctx)
{
	(void)loop;
	(void)sop_end(ctx, 0);
}

/* The lookup fills arrays of its own, copied out once it is done: one
 * that outlives a wrapper that gave up must not write the caller's. */
int farm_kv_mget_sync_timed(farm_kv *kv, farm_loop *loop, unsigned n,
                            const void *const *keys, const uint32_t *klens,
                            void *vals, uint32_t cap, uint32_t *lens,
                            int *status, uint64_t timeout_ns)
{
	if (!vals || !lens || !status)
		return -EINVAL;
	if (n > FARM_KV_MGET_MAX)
		return -E2BIG;
	struct sync_op *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->vals = malloc((size_t)n * cap + 1);
	w->lens = calloc(n + 1u, sizeof(*w->lens));
	w->st = calloc(n + 1u, sizeof(*w->st));
	int rc = w->vals && w->lens && w->st ? 0 : -ENOMEM;
	if (!rc)
		rc = farm_kv_mget(kv, loop, n, keys, klens, w->vals, cap,
		                  w->lens, w->st, mg_sync_done, w);
	if (!rc && (rc = sop_wait(loop, w, timeout_ns)))
		return rc;
	if (!rc) {
		memcpy(vals, w->vals, (size_t)n * cap);
		memcpy(lens, w->lens, n * sizeof(*lens));
		memcpy(status, w->st, n * sizeof(*status));
	}
	sop_free(w);
	return rc;
}

int farm_kv_mget_sync(farm_kv *kv, farm_loop *loop, unsigned n,
                      const void *const *keys, const uint32_t *klens,
                      void *vals, uint32_t cap, uint32_t *lens, int *status)
{
	return farm_kv_mget_sync_timed(kv, loop, n, keys, klens, vals, cap,
	                               lens, status, kv ? sync_timeout(kv) : 0);
}

/* ---- multi-get: the owning side ------------------------------------------ */

struct srv;

struct srv_key {
	struct srv *s;
	const uint8_t *key; /* in the request's copy */
	uint32_t klen;
	int status;
	uint32_t vlen;
	uint8_t *val;
};

struct srv {
	farm_kv *kv;
	farm_loop *loop;
	struct farm_msg_token tok;
	uint32_t cap;
	unsigned n, next, inflight, left;
	bool busy, again, retry_posted;
	uint8_t *req;
	struct srv_key k[];
};

/* Check a batch request; with @s, also fill its keys. 0 or the code the
 * asker gets back. */
static int srv_parse(farm_kv *kv, const uint8_t *p, uint32_t len, struct srv *s)
{
	struct farm_kv_mget_req q;
	if (!joined(kv))
		return -EAGAIN;
	if (!p || len < sizeof(q))
		return -EINVAL;
	memcpy(&q, p, sizeof(q));
	if (q.nkeys == 0 || q.flags != 0 || q.cap > FARM_KV_MAX_VALUE)
		return -EINVAL;
	if (q.nkeys > FARM_KV_MGET_BATCH_MAX ||
	    sizeof(struct farm_kv_mget_rep) + 8ull * q.nkeys >
	            farm_msg_max_payload(kv->msg))
		return -E2BIG;
	uint64_t off = sizeof(q);
	for (unsigned j = 0; j < q.nkeys; j++) {
		uint16_t kl;
		if (off + 2 > len)
			return -EINVAL;
		memcpy(&kl, p + off, 2);
		off += 2;
		if (kl == 0 || kl > FARM_KV_MAX_KEY || off + kl > len)
			return -EINVAL;
		if (!farm_ht_serves(kv->ht, shard_of_key(kv, p + off, kl)))
			return -EINVAL; /* not ours to answer */
		if (s) {
			s->k[j] = (struct srv_key){
			        .s = s, .key = p + off, .klen = kl};
		}
		off += kl;
	}
	return off == len ? 0 : -EINVAL;
}

static void srv_advance(struct srv *s);

static void srv_get_done(farm_loop *loop, void *ctx, int status,
                         const void *val, uint32_t len)
{
	(void)loop;
	struct srv_key *k = ctx;
	struct srv *s = k->s;
	k->status = status;
	k->vlen = status ? 0 : len;
	if (!status && len > s->cap) {
		k->status = -EMSGSIZE;
	} else if (!status && len) {
		k->val = malloc(len);
		if (k->val)
			memcpy(k->val, val, len);
		else
			k->status = -ENOMEM;
	}
	s->inflight--;
	s->left--;
	srv_advance(s);
}

/* All answered: one reply, values while they fit, then SPILL markers. */
static void srv_reply(struct srv *s)
{
	farm_kv *kv = s->kv;
	uint32_t maxp = farm_msg_max_payload(kv->msg);
	uint64_t fixed = sizeof(struct farm_kv_mget_rep) + 8ull * s->n;
	uint64_t want = fixed;
	for (unsigned j = 0; j < s->n; j++)
		if (s->k[j].status == 0)
			want += s->k[j].vlen;
	uint32_t len = (uint32_t)FARM_MIN(want, (uint64_t)maxp);
	uint8_t *r = malloc(len);
	int rc;
	if (!r) {
		rc = farm_msg_reply_error(s->loop, &s->tok, -ENOMEM);
	} else {
		struct farm_kv_mget_rep h = {.nkeys = s->n};
		memcpy(r, &h, sizeof(h));
		uint64_t off = sizeof(h), vals = 0;
		for (unsigned j = 0; j < s->n; j++) {
			struct srv_key *k = &s->k[j];
			int32_t st = k->status;
			uint32_t vl = k->vlen;
			if (st == 0 && fixed + vals + vl > maxp)
				st = FARM_KV_MGET_SPILL;
			memcpy(r + off, &st, 4);
			memcpy(r + off + 4, &vl, 4);
			off += 8;
			if (st == 0) {
				memcpy(r + off, k->val, vl);
				off += vl;
				vals += vl;
			}
		}
		rc = farm_msg_reply(s->loop, &s->tok, r, (uint32_t)off);
		free(r);
	}
	if (rc)
		farm_warn("kv: cannot answer machine %" PRIu32 "'s multi-get: "
		          "%s",
		          s->tok.machine, farm_strerror(rc));
	st_add(kv, S_SERVED, 1);
	st_add(kv, S_SERVED_KEYS, s->n);
	for (unsigned j = 0; j < s->n; j++)
		free(s->k[j].val);
	free(s->req);
	free(s);
}

static void srv_retry(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct srv *s = ctx;
	s->retry_posted = false;
	if (status) /* the loop is closing: the rest fail */
		for (; s->next < s->n; s->next++, s->left--)
			s->k[s->next].status = status;
	srv_advance(s);
}

static void srv_advance(struct srv *s)
{
	if (s->busy) {
		s->again = true;
		return;
	}
	s->busy = true;
	do {
		s->again = false;
		while (s->next < s->n) {
			struct srv_key *k = &s->k[s->next];
			s->inflight++;
			int rc = farm_ht_get(s->kv->ht, s->loop, k->key,
			                     k->klen, srv_get_done, k);
			if (rc == -EAGAIN) {
				s->inflight--;
				break;
			}
			s->next++;
			if (rc) {
				/* -EINVAL: the store is not attached to this
				 * loop: the asker looks the key up itself. */
				s->inflight--;
				s->left--;
				k->status =
				        rc == -EINVAL ? FARM_KV_MGET_SPILL : rc;
			}
		}
		if (s->next < s->n && s->inflight == 0 && !s->retry_posted) {
			if (farm_loop_post(s->loop, srv_retry, s) == 0)
				s->retry_posted = true;
			else
				srv_retry(s->loop, s, -ENOMEM);
		}
	} while (s->again);
	s->busy = false;
	if (s->left == 0 && !s->retry_posted)
		srv_reply(s);
}

static void h_mget(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_kv *kv = arg;
	if (!in->token.call_id) {
		st_add(kv, S_BAD, 1);
		farm_warn("kv: a multi-get from machine %" PRIu32
		          " without a reply address: dropped",
		          in->src_machine);
		return;
	}
	int rc = srv_parse(kv, in->payload, in->len, NULL);
	struct srv *s = NULL;
	if (!rc) {
		struct farm_kv_mget_req q;
		memcpy(&q, in->payload, sizeof(q));
		s = calloc(1, sizeof(*s) + q.nkeys * sizeof(struct srv_key));
		uint8_t *req = s ? malloc(in->len) : NULL;
		if (!req) {
			free(s);
			rc = -ENOMEM;
		} else {
			memcpy(req, in->payload, in->len);
			*s = (struct srv){.kv = kv,
			                  .loop = loop,
			                  .tok = in->token,
			                  .cap = q.cap,
			                  .n = q.nkeys,
			                  .left = q.nkeys,
			                  .req = req};
			rc = srv_parse(kv, req, in->len, s);
		}
	}
	if (rc) {
		if (rc != -ENOMEM && rc != -EAGAIN) {
			st_add(kv, S_BAD, 1);
			farm_warn("kv: bad multi-get from machine %" PRIu32
			          ": %s",
			          in->src_machine, farm_strerror(rc));
		}
		if (s) {
			free(s->req);
			free(s);
		}
		if (farm_msg_reply_error(loop, &in->token, rc))
			farm_warn("kv: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	srv_advance(s);
}

/* ---- iteration ----------------------------------------------------------- */

long farm_kv_iterate_local(farm_kv *kv, farm_kv_iter_fn fn, void *ctx)
{
	if (!kv || !fn || !joined(kv))
		return -EINVAL;
	if (kv->my_shard == UINT32_MAX)
		return 0; /* joined late: no shard of its own */
	return farm_ht_iterate_local(kv->ht, kv->my_shard, fn, ctx);
}

/* ---- the named-object directory ------------------------------------------ */

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
