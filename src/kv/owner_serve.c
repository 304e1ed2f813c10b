/*
 * Owner-served lookups, the owning side (README.md, "Owner-served
 * lookups"; wire format: kv.h): checks a request strictly, fences it by
 * configuration id and by who serves the shard, and answers it with the
 * hashtable's own lookup run here. That lookup is the one a READ-based
 * asker runs (its per-object validation, the lease check, retries on a
 * torn copy), so an answer from the owner is one a READ could have given:
 * never a locked (uncommitted) or overwritten version. A local lookup
 * prefetches its bucket pair when it starts and copies it a pass later,
 * so the requests of one drain of the rings are started together and
 * their cache misses overlap (G-Opt's group prefetching, done by the
 * loop's passes).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "util/fault.h"
#include "util/log.h"

struct osrv {
	farm_kv *kv;
	farm_loop *loop;
	struct farm_msg_token tok;
	uint32_t klen;
	uint8_t key[];
};

/* Check a request: 0, or the code the asker gets back. */
static int osrv_check(farm_kv *kv, const uint8_t *p, uint32_t len,
                      struct farm_kv_oget_req *q)
{
	if (!p || len < sizeof(*q))
		return -EINVAL;
	memcpy(q, p, sizeof(*q));
	if (q->flags || q->pad || q->klen == 0 || q->klen > FARM_KV_MAX_KEY ||
	    len != sizeof(*q) + q->klen)
		return -EINVAL;
	if (!joined(kv))
		return -EAGAIN;
	if (q->config != farm_as_config_id(kv->as))
		return -ESTALE;
	if (!farm_ht_serves(kv->ht,
	                    shard_of_key(kv, p + sizeof(*q), q->klen)) ||
	    FARM_FAULT_SWITCH(FARM_FP_KV_OWNER_REFUSE_GET))
		return -EAGAIN; /* not the shard's primary (any more) */
	return 0;
}

/* The answer written in place in the reply (farm_msg_reply_begin): status,
 * length, then the value, copied once from the lookup's copy. */
static int osrv_write(farm_loop *loop, const struct farm_msg_token *tok,
                      int32_t st, const void *val, uint32_t n)
{
	int rc;
	uint8_t *r = farm_msg_reply_begin(loop, tok, 8u + n, &rc);
	if (!r)
		return rc == -ENOMEM ? farm_msg_reply_error(loop, tok, rc) : rc;
	memcpy(r, &st, 4);
	memcpy(r + 4, &n, 4);
	if (n)
		memcpy(r + 8, val, n);
	return farm_msg_reply_end(loop);
}

static void osrv_answer(farm_loop *loop, struct osrv *s, int32_t st,
                        const void *val, uint32_t vlen)
{
	uint32_t maxp = farm_msg_max_payload(s->kv->msg);
	if (st == 0 && 8ull + vlen > maxp)
		st = FARM_KV_MGET_SPILL;
	int rc = osrv_write(loop, &s->tok, st, val, st == 0 ? vlen : 0);
	if (rc)
		farm_warn("kv: cannot answer machine %" PRIu32 "'s get: %s",
		          s->tok.machine, farm_strerror(rc));
	farm_stat_add(&s->kv->st[S_OWN_SERVED], 1);
	free(s);
}

/* FARM_FP_KV_OWNER_STALE (test builds only): values kept per serving
 * thread by key hash, answered again without a lookup while the switch
 * is on. */
struct stale {
	uint64_t hash;
	uint32_t len;
	uint8_t val[64];
};
#ifdef FARM_FAULT_INJECTION
#define STALE_SLOTS 64
static _Thread_local struct stale stale_cache[STALE_SLOTS];

static struct stale *stale_of(const struct osrv *s)
{
	uint64_t h = farm_ht_hash(s->key, s->klen) | 1;
	struct stale *e = &stale_cache[h % STALE_SLOTS];
	return e->hash == h ? e : NULL;
}

static void stale_keep(const struct osrv *s, const void *val, uint32_t len)
{
	uint64_t h = farm_ht_hash(s->key, s->klen) | 1;
	struct stale *e = &stale_cache[h % STALE_SLOTS];
	if (e->hash != h && len <= sizeof(e->val)) {
		e->hash = h;
		e->len = len;
		memcpy(e->val, val, len);
	}
}
#else
static struct stale *stale_of(const struct osrv *s)
{
	(void)s;
	return NULL;
}

static void stale_keep(const struct osrv *s, const void *val, uint32_t len)
{
	(void)s, (void)val, (void)len;
}
#endif

static void osrv_done(farm_loop *loop, void *ctx, int status, const void *val,
                      uint32_t len)
{
	if (status == 0 && FARM_FAULT_SWITCH(FARM_FP_KV_OWNER_STALE))
		stale_keep(ctx, val, len);
	/* -ECANCELED: the store was detached from this loop meanwhile: the
	 * asker looks the key up itself, as for a loop never attached. */
	if (status == -ECANCELED &&
	    !FARM_FAULT_SWITCH(FARM_FP_KV_CANCEL_UNMAPPED))
		status = FARM_KV_MGET_SPILL;
	osrv_answer(loop, ctx, status, val, status == 0 ? len : 0);
}

static void osrv_start(farm_loop *loop, void *ctx, int status);

static void osrv_run(struct osrv *s)
{
	struct stale *e;
	if (FARM_FAULT_SWITCH(FARM_FP_KV_OWNER_STALE) && (e = stale_of(s))) {
		osrv_answer(s->loop, s, 0, e->val, e->len);
		return;
	}
	int rc = farm_ht_get(s->kv->ht, s->loop, s->key, s->klen, osrv_done, s);
	if (rc == 0 && FARM_FAULT_SWITCH(FARM_FP_KV_DETACH_MID_LOOKUP))
		farm_ht_detach(s->kv->ht, s->loop);
	if (rc == -EAGAIN) {
		/* The loop's lookup slots are all in flight: start on a
		 * later pass, once some have completed. */
		rc = farm_loop_post(s->loop, osrv_start, s);
		if (!rc)
			return;
	}
	if (rc == -EINVAL)
		rc = FARM_KV_MGET_SPILL; /* not attached here: asker reads */
	if (rc == -ENOENT)
		rc = -EAGAIN; /* no shards yet: not an answer of "absent" */
	if (rc)
		osrv_answer(s->loop, s, rc, NULL, 0);
}

static void osrv_start(farm_loop *loop, void *ctx, int status)
{
	struct osrv *s = ctx;
	if (status) /* the loop is closing */
		osrv_answer(loop, s, status, NULL, 0);
	else
		osrv_run(s);
}

void farm_kv_owner_serve(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_kv *kv = arg;
	if (!in->token.call_id) {
		farm_stat_add(&kv->st[S_OWN_BAD], 1);
		farm_warn("kv: a get from machine %" PRIu32
		          " without a reply address: dropped",
		          in->src_machine);
		return;
	}
	struct farm_kv_oget_req q;
	int rc = osrv_check(kv, in->payload, in->len, &q);
	struct osrv *s = NULL;
	if (!rc) {
		s = malloc(sizeof(*s) + q.klen);
		if (!s)
			rc = -ENOMEM;
	}
	if (rc) {
		if (rc == -EINVAL) {
			farm_stat_add(&kv->st[S_OWN_BAD], 1);
			farm_warn("kv: bad get from machine %" PRIu32,
			          in->src_machine);
		} else if (rc != -ENOMEM) {
			farm_stat_add(&kv->st[S_OWN_REFUSED], 1);
		}
		if (farm_msg_reply_error(loop, &in->token, rc))
			farm_warn("kv: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	*s = (struct osrv){
	        .kv = kv, .loop = loop, .tok = in->token, .klen = q.klen};
	memcpy(s->key, (const uint8_t *)in->payload + sizeof(q), q.klen);
	osrv_run(s);
}
