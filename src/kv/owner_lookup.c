/*
 * Owner-served lookups, the asking side (README.md, "Owner-served
 * lookups"; wire format: kv.h). A get of a key in another machine's shard
 * is one RPC to the loop that serves the shard's bucket region (HERD's
 * way: the request goes to the owner, which looks the key up in its own
 * memory and answers), instead of one-sided READs of the buckets. Also
 * the lookup mode: set, parsed, resolved by fabric.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "util/common.h"

/* An owner that does not answer in this time fails the get (as a READ's
 * timeout would). */
#define OGET_TIMEOUT_NS (5ull * 1000000000ull)
/* Refusals (-ESTALE: views differ; -EAGAIN: not the primary, yet or any
 * more) are retried for as long as a READ lookup retries a busy bucket
 * (a view change takes milliseconds, a few passes would not outlast it),
 * each resend later than the last (1 us doubling to 1 ms: the passes in
 * between send nothing), before the caller gets -EAGAIN, which it retries
 * as it does a READ lookup's during recovery. */
#define OGET_REFUSED_NS    (1000ull * 1000000ull)
#define OGET_GAP_MAX_SHIFT 10u

struct oget {
	farm_kv *kv;
	farm_loop *loop;
	farm_kv_get_fn cont;
	void *ctx;
	unsigned tries;
	uint64_t refused_t0; /* the first refusal (0: none yet) */
	uint64_t resend_at;  /* the next resend, not before */
	uint32_t klen;
	uint8_t req[]; /* struct farm_kv_oget_req, then the key */
};

static int oget_send(struct oget *o);

/* The reply's parts, checked before anything is handed on: 0 or
 * FARM_ECORRUPT. */
static int oget_parse(const uint8_t *p, uint32_t len, int32_t *st, uint32_t *vl)
{
	if (len < 8)
		return FARM_ECORRUPT;
	memcpy(st, p, 4);
	memcpy(vl, p + 4, 4);
	if (*st == 0)
		return *vl <= FARM_KV_MAX_VALUE && len == 8ull + *vl
		               ? 0
		               : FARM_ECORRUPT;
	if (len != 8 || (*st > 0 && *st != FARM_KV_MGET_SPILL))
		return FARM_ECORRUPT;
	return 0;
}

/* Whether a refused get is asked again, and when (o->resend_at). */
static bool oget_may_retry(struct oget *o)
{
	uint64_t now = farm_now_ns();
	if (!o->refused_t0)
		o->refused_t0 = now;
	if (now - o->refused_t0 >= OGET_REFUSED_NS)
		return false;
	unsigned k = FARM_MIN(o->tries, OGET_GAP_MAX_SHIFT);
	o->tries++;
	o->resend_at = now + (1000ull << k);
	return true;
}

static void oget_retry(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct oget *o = ctx;
	if (!status && farm_now_ns() < o->resend_at) {
		/* Not yet: look again on a later pass. */
		if (farm_loop_post(o->loop, oget_retry, o) == 0)
			return;
		status = -EAGAIN;
	}
	if (!status)
		status = oget_send(o);
	if (status) {
		o->cont(o->loop, o->ctx, status, NULL, 0);
		free(o);
	}
}

static void oget_reply(farm_loop *loop, void *ctx, int status,
                       const void *reply, uint32_t len)
{
	struct oget *o = ctx;
	farm_kv *kv = o->kv;
	int32_t st = status;
	uint32_t vl = 0;
	if (!status)
		status = oget_parse(reply, len, &st, &vl);
	if (status == 0)
		status = st;
	if ((status == -ESTALE || status == -EAGAIN) && oget_may_retry(o)) {
		/* Views differ or the machine is not (or no longer) the
		 * shard's primary: ask again later, routed by the view then
		 * in force. */
		farm_stat_add(&kv->st[S_OWN_RETRIES], 1);
		if (farm_loop_post(loop, oget_retry, o) == 0)
			return;
	}
	if (status == -ESTALE)
		status = -EAGAIN; /* retryable, as during a view change */
	if (status == FARM_KV_MGET_SPILL) {
		/* Too long for one reply: the asker reads it itself. */
		const uint8_t *key = o->req + sizeof(struct farm_kv_oget_req);
		int rc = farm_ht_get(kv->ht, loop, key, o->klen, o->cont,
		                     o->ctx);
		if (rc)
			o->cont(loop, o->ctx, rc, NULL, 0);
		free(o);
		return;
	}
	o->cont(loop, o->ctx, status,
	        status == 0 ? (const uint8_t *)reply + 8 : NULL,
	        status == 0 ? vl : 0);
	free(o);
}

static int oget_send(struct oget *o)
{
	farm_kv *kv = o->kv;
	const uint8_t *key = o->req + sizeof(struct farm_kv_oget_req);
	unsigned s = shard_of_key(kv, key, o->klen);
	struct farm_kv_oget_req q = {.klen = (uint16_t)o->klen,
	                             .config = farm_as_config_id(kv->as)};
	memcpy(o->req, &q, sizeof(q));
	int rc = farm_as_call(
	        kv->as, o->loop, kv->shards[s].base, FARM_MSGT_KV_OGET, o->req,
	        (uint32_t)sizeof(q) + o->klen, OGET_TIMEOUT_NS, oget_reply, o);
	if (!rc)
		farm_stat_add(&kv->st[S_OWN_SENT], 1);
	/* No view yet, or the primary not yet a peer: routing is in flux,
	 * which must not read as "absent" (the READ path's rule too). */
	return rc == -ENOENT ? -EAGAIN : rc;
}

int farm_kv_owner_get(farm_kv *kv, farm_loop *loop, const void *key,
                      uint32_t klen, farm_kv_get_fn cont, void *ctx)
{
	/* Our own shard, or not joined yet: the ordinary lookup (local, or
	 * its -ENOENT for a store with no shards). */
	if (!joined(kv) || !loop || !cont ||
	    serves_shard(kv, shard_of_key(kv, key, klen)))
		return farm_ht_get(kv->ht, loop, key, klen, cont, ctx);
	struct oget *o =
	        malloc(sizeof(*o) + sizeof(struct farm_kv_oget_req) + klen);
	if (!o)
		return -ENOMEM;
	*o = (struct oget){
	        .kv = kv, .loop = loop, .cont = cont, .ctx = ctx, .klen = klen};
	memcpy(o->req + sizeof(struct farm_kv_oget_req), key, klen);
	int rc = oget_send(o);
	if (rc)
		free(o);
	return rc;
}

/* AUTO by fabric (README.md, "Owner-served lookups", with the figures).
 * READ on every fabric measured so far: on shm a READ is a line-checked
 * memcpy by the asker's own core; on udp a READ is one record each way,
 * served by the target's dispatch thread, where an owner RPC is a ring
 * WRITE and a NOTIFY each way and a pass of the owner's loop (owner/READ
 * per busy core 0.24-2.2, geometric mean 0.67, in three runs); ofi's
 * messages are emulated RMA writes, dearer than its READ; verbs is
 * FaRM's one-sided READ (unmeasured here: no RDMA hardware). A table and
 * not a constant: the first fabric whose figures favour the owner (udp
 * with a message path of its own, verbs as HERD measured) changes one
 * line. */
static int lookup_for_fabric(const char *fabric)
{
	static const struct {
		const char *name;
		int mode;
	} by_fabric[] = {
	        {"shm", FARM_KV_LOOKUP_READ},
	        {"udp", FARM_KV_LOOKUP_READ},
	        {"ofi", FARM_KV_LOOKUP_READ},
	        {"verbs", FARM_KV_LOOKUP_READ},
	};
	for (size_t i = 0;
	     fabric && i < sizeof(by_fabric) / sizeof(by_fabric[0]); i++)
		if (strcmp(fabric, by_fabric[i].name) == 0)
			return by_fabric[i].mode;
	return FARM_KV_LOOKUP_READ;
}

int farm_kv_set_lookup(farm_kv *kv, enum farm_kv_lookup mode)
{
	if (!kv)
		return -EINVAL;
	int m;
	switch (mode) {
	case FARM_KV_LOOKUP_AUTO: m = lookup_for_fabric(kv->fabric); break;
	case FARM_KV_LOOKUP_READ:
	case FARM_KV_LOOKUP_OWNER: m = (int)mode; break;
	default: return -EINVAL;
	}
	atomic_store_explicit(&kv->lookup, m, memory_order_relaxed);
	return 0;
}

enum farm_kv_lookup farm_kv_lookup_mode(const farm_kv *kv)
{
	return kv && kv_owner_mode(kv) ? FARM_KV_LOOKUP_OWNER
	                               : FARM_KV_LOOKUP_READ;
}

int farm_kv_lookup_parse(const char *s, enum farm_kv_lookup *out)
{
	if (!s || !out)
		return -EINVAL;
	if (strcmp(s, "auto") == 0)
		*out = FARM_KV_LOOKUP_AUTO;
	else if (strcmp(s, "read") == 0)
		*out = FARM_KV_LOOKUP_READ;
	else if (strcmp(s, "owner") == 0)
		*out = FARM_KV_LOOKUP_OWNER;
	else
		return -EINVAL;
	return 0;
}

void farm_kv_owner_stats_get(const farm_kv *kv, struct farm_kv_owner_stats *o)
{
	if (!kv || !o)
		return;
	*o = (struct farm_kv_owner_stats){
	        .sent = atomic_load_explicit(&kv->st[S_OWN_SENT],
	                                     memory_order_relaxed),
	        .retries = atomic_load_explicit(&kv->st[S_OWN_RETRIES],
	                                        memory_order_relaxed),
	        .served = atomic_load_explicit(&kv->st[S_OWN_SERVED],
	                                       memory_order_relaxed),
	        .bad = atomic_load_explicit(&kv->st[S_OWN_BAD],
	                                    memory_order_relaxed),
	        .refused = atomic_load_explicit(&kv->st[S_OWN_REFUSED],
	                                        memory_order_relaxed)};
}
