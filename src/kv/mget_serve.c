/*
 * Multi-get, the owning side: checks a batch strictly, runs its lookups
 * locally and answers them in one reply (README.md, "Multi-get").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

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
	/* -ECANCELED: the store was detached from this loop meanwhile: the
	 * asker looks the key up itself, as for a loop never attached. */
	k->status = status == -ECANCELED && !FARM_FAULT_SWITCH(
	                                            FARM_FP_KV_CANCEL_UNMAPPED)
	                    ? FARM_KV_MGET_SPILL
	                    : status;
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

/* The reply's payload size; a value that would not fit after those before
 * it is marked SPILL (the asker reads it itself). */
static uint32_t srv_fit(struct srv *s, uint32_t maxp)
{
	/* srv_parse bounds the fixed part by maxp. */
	uint64_t off = sizeof(struct farm_kv_mget_rep) + 8ull * s->n;
	for (unsigned j = 0; j < s->n; j++) {
		struct srv_key *k = &s->k[j];
		if (k->status != 0)
			continue;
		if (off + k->vlen > maxp)
			k->status = FARM_KV_MGET_SPILL;
		else
			off += k->vlen;
	}
	return (uint32_t)off;
}

/* All answered: one reply, written in place (farm_msg_reply_begin), values
 * while they fit, then SPILL markers. */
static int srv_write(struct srv *s)
{
	uint32_t len = srv_fit(s, farm_msg_max_payload(s->kv->msg));
	int rc;
	uint8_t *r = farm_msg_reply_begin(s->loop, &s->tok, len, &rc);
	if (!r)
		return rc == -ENOMEM
		               ? farm_msg_reply_error(s->loop, &s->tok, rc)
		               : rc;
	struct farm_kv_mget_rep h = {.nkeys = s->n};
	memcpy(r, &h, sizeof(h));
	uint32_t off = sizeof(h);
	for (unsigned j = 0; j < s->n; j++) {
		const struct srv_key *k = &s->k[j];
		int32_t st = k->status;
		memcpy(r + off, &st, 4);
		memcpy(r + off + 4, &k->vlen, 4);
		off += 8;
		if (st == 0 && k->vlen) {
			memcpy(r + off, k->val, k->vlen);
			off += k->vlen;
		}
	}
	return farm_msg_reply_end(s->loop);
}

static void srv_reply(struct srv *s)
{
	farm_kv *kv = s->kv;
	int rc = srv_write(s);
	if (rc)
		farm_warn("kv: cannot answer machine %" PRIu32 "'s multi-get: "
		          "%s",
		          s->tok.machine, farm_strerror(rc));
	farm_stat_add(&kv->st[S_SERVED], 1);
	farm_stat_add(&kv->st[S_SERVED_KEYS], s->n);
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
			if (rc == 0 &&
			    FARM_FAULT_SWITCH(FARM_FP_KV_DETACH_MID_LOOKUP))
				farm_ht_detach(s->kv->ht, s->loop);
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

void farm_kv_mget_serve(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_kv *kv = arg;
	if (!in->token.call_id) {
		farm_stat_add(&kv->st[S_BAD], 1);
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
			farm_stat_add(&kv->st[S_BAD], 1);
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
