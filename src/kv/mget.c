/*
 * Multi-get, the asking side (README.md, "Multi-get"; wire format: kv.h).
 *
 * Keys of our own shard are looked up at once in groups
 * (farm_ht_get_local_batch), and those it leaves unresolved get a whole
 * local lookup. With READ lookups every key of another machine's shard
 * first gets farm_ht_get_first (one READ of its bucket pair), and a key it
 * leaves unresolved (its home's overflow chain, a pair being written) a
 * whole lookup, by READs as farm_kv_get's. With owner lookups those keys
 * go to their owners, one batch message per machine (more only when one
 * would not fit). Keys whose values did not fit their batch's reply, and
 * keys of a batch that could not be sent, get a whole lookup of their
 * own. A loop has a bounded number of lookups in flight (-EAGAIN): the
 * rest wait in their queue until one completes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

/* A batch the owner does not answer in this time fails its keys. */
#define MGET_TIMEOUT_NS (5ull * 1000000000ull)

struct mg;

struct mg_key {
	struct mg *m;
	const uint8_t *key; /* in the mget's copy of the keys */
	uint32_t klen;
	uint32_t shard;
	uint64_t hash; /* farm_ht_hash of the key, taken once */
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
	unsigned first_hits; /* answered by their first read: counted at the end
	                      */
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
static void mg_full(struct mg *m, uint32_t i);

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
		/* A whole lookup, by READs, as farm_kv_get's: asking the owner
		 * instead (a batch message) made the multi-get wait for the
		 * owner's loop, and one in four multi-gets of 24 keys has such
		 * a key at 85% occupancy (docs/benchmarks.md, kv_bench,
		 * "multi-get"). */
		if (FARM_FAULT_SWITCH(FARM_FP_KV_MGET_NO_CHASE)) {
			mg_finish_key(m, i, -ENOENT, NULL, 0);
		} else {
			farm_stat_add(&m->kv->st[S_CHASED], 1);
			mg_full(m, i);
		}
	} else {
		if (status == 0 || status == -ENOENT)
			m->first_hits++;
		mg_finish_key(m, i, status, val, len);
		/* Nothing queued to start and first reads still out: the
		 * multi-get cannot be done and mg_advance would find nothing
		 * to do (the common case, once per key). */
		if (m->first_left && m->fullpos == m->nfull &&
		    m->firstpos == m->nfirst)
			return;
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

/* Start the first reads waiting while the loop takes more lookups; true
 * when it stopped on -EAGAIN. */
static bool mg_pump_first(struct mg *m)
{
	farm_ht *ht = m->kv->ht;
	while (m->firstpos < m->nfirst) {
		uint32_t i = m->firstq[m->firstpos];
		struct mg_key *k = &m->k[i];
		int rc = farm_ht_get_first_hashed(ht, m->loop, k->key, k->klen,
		                                  k->hash, mg_first_done, k);
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
	return mg_pump_first(m);
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
		farm_stat_add(&kv->st[S_FALLBACKS], nk);
		for (unsigned j = 0; j < nk; j++)
			mg_full(m, idx[j]);
		return;
	}
	m->calls++;
	farm_stat_add(&kv->st[S_MSGS], 1);
	farm_stat_add(&kv->st[S_MISSES], nk);
	/* b is mg_batch_reply's now: farm_as_call accepted it as context. */
	// cppcheck-suppress memleak
}

/* Every first read is back: the keys for the owners (owner lookups) to
 * them, grouped by shard (one shard per machine), as few messages as fit. */
static void mg_send_batches(struct mg *m)
{
	farm_kv *kv = m->kv;
	uint32_t maxp = farm_msg_max_payload(kv->msg);
	uint32_t *idx = m->missq; /* reused in place, shard by shard */
	uint32_t nmiss = m->nmiss;
	if (!nmiss)
		return;
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
				farm_stat_add(&kv->st[S_SPILLS], 1);
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
		farm_stat_add(&kv->st[S_FALLBACKS], b->nk);
		for (unsigned j = 0; j < b->nk; j++)
			mg_full(m, b->idx[j]);
	}
	free(b);
	mg_advance(m);
}

/* One block holds the multi-get, its queues and its copy of the keys
 * (farm_kv_mget). */
static void mg_free(struct mg *m)
{
	free(m);
}

/* Every key answered: the counters of the whole call (a locked add
 * each, so once per call rather than per key), then the continuation. */
static void mg_end(struct mg *m)
{
	if (m->first_hits)
		farm_stat_add(&m->kv->st[S_FIRST_HITS], m->first_hits);
	m->cont(m->loop, m->ctx);
	mg_free(m);
}

static void mg_done_work(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)status;
	mg_end(ctx);
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
	if (!m->in_call && m->left == 0 && m->calls == 0 && !m->retry_posted)
		mg_end(m);
}

/* Our shard's keys (all of fullq so far), looked up now in groups (the
 * hashtable's batched local lookup: every pair of a group prefetched
 * before any is searched); those it leaves unresolved stay queued for a
 * whole lookup. Without memory for the groups' images every key stays
 * queued. */
static void mg_local(struct mg *m)
{
	enum { G = 16, STACK_IMG = 16384 };
	farm_ht *ht = m->kv->ht;
	/* The groups' images: on the stack where they fit (small values
	 * inline), not a heap block of this size per call. */
	uint8_t stack_img[STACK_IMG] __attribute__((aligned(64)));
	size_t ib = G * (size_t)farm_ht_batch_bytes(ht);
	uint8_t *img = !m->nfull         ? NULL
	               : ib <= STACK_IMG ? stack_img
	                                 : aligned_alloc(64, ib);
	if (!img)
		return;
	struct farm_ht_lkey lk[G];
	uint32_t keep = 0;
	for (uint32_t at = 0; at < m->nfull; at += G) {
		unsigned n = m->nfull - at < G ? m->nfull - at : G;
		for (unsigned j = 0; j < n; j++) {
			const struct mg_key *k = &m->k[m->fullq[at + j]];
			lk[j].key = k->key;
			lk[j].klen = k->klen;
			lk[j].hash = k->hash; /* hashed once, to route it */
		}
		if (farm_ht_get_local_batch_hashed(ht, m->loop, lk, n, img))
			for (unsigned j = 0; j < n; j++)
				lk[j].status = FARM_HT_UNRESOLVED;
		for (unsigned j = 0; j < n; j++) {
			uint32_t i = m->fullq[at + j];
			if (lk[j].status == FARM_HT_UNRESOLVED)
				m->fullq[keep++] = i;
			else
				mg_finish_key(m, i, lk[j].status, lk[j].val,
				              lk[j].vlen);
		}
	}
	m->nfull = keep;
	if (img != stack_img)
		free(img);
}

/* Queue key @i (hashed) by where it is looked up: our shard (a local
 * lookup now), the owner's (owner mode), or a first READ. @serves: whether
 * this machine serves a shard, asked once per shard of the call (the
 * address space's lookup takes a lock): -1 not asked yet. True when
 * local. */
static bool mg_route(struct mg *m, uint32_t i, int8_t *serves)
{
	farm_kv *kv = m->kv;
	struct mg_key *k = &m->k[i];
	k->shard = farm_ht_shard_index(k->hash, kv->nshards);
	if (serves[k->shard] < 0)
		serves[k->shard] = serves_shard(kv, k->shard);
	if (serves[k->shard]) {
		mg_full(m, i); /* our shard: a local lookup */
		return true;
	}
	if (kv_owner_mode(kv))
		m->missq[m->nmiss++] = i; /* straight to its owner */
	else
		m->firstq[m->nfirst++] = i;
	return false;
}

/* Copy each key into the batch, hash it and route it (mg_route). A bad
 * key fails alone. Returns how many were local. */
static unsigned mg_classify(struct mg *m, const void *const *keys,
                            const uint32_t *klens)
{
	size_t off = 0;
	unsigned local = 0;
	int8_t serves[MAX_SHARDS];
	memset(serves, -1, m->kv->nshards);
	for (uint32_t i = 0; i < m->n; i++) {
		struct mg_key *k = &m->k[i];
		*k = (struct mg_key){.m = m};
		int rc = check_key(keys[i], klens[i]);
		if (rc) { /* this key fails alone */
			mg_finish_key(m, i, rc, NULL, 0);
			continue;
		}
		memcpy(m->keybuf + off, keys[i], klens[i]);
		k->key = m->keybuf + off;
		k->klen = klens[i];
		off += klens[i];
		k->hash = farm_ht_hash(k->key, k->klen);
		local += mg_route(m, i, serves);
	}
	return local;
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
	/* One allocation per multi-get, not one per part: the keys' entries
	 * (each set by mg_classify), the three queues, the keys' copy. Only
	 * the header is zeroed. */
	size_t qat = sizeof(struct mg) + n * sizeof(struct mg_key);
	struct mg *m = malloc(qat + 3ull * n * sizeof(uint32_t) + kbytes);
	if (!m)
		return -ENOMEM;
	*m = (struct mg){.kv = kv,
	                 .loop = loop,
	                 .n = n,
	                 .vals = vals,
	                 .cap = cap,
	                 .lens = lens,
	                 .status = status,
	                 .cont = cont,
	                 .ctx = ctx,
	                 .left = n,
	                 .in_call = true};
	m->firstq = (uint32_t *)(void *)((uint8_t *)m + qat);
	m->fullq = m->firstq + n;
	m->missq = m->fullq + n;
	m->keybuf = (uint8_t *)(m->missq + n);
	unsigned local = mg_classify(m, keys, klens);
	m->first_left = m->nfirst;
	/* The other shards' first reads go out before our own shard's keys
	 * are looked up (G-Opt's order: every pair's read issued, then
	 * completed): a local pair's read is a prefetch now and a copy on a
	 * later pass, a READ on shm prefetches the owner's lines when
	 * posted, so their misses overlap the local batch's work instead
	 * of starting after it. Their answers come on a later pass (and
	 * mg_advance, called back meanwhile, waits for busy to clear). */
	m->busy = true;
	(void)mg_pump_first(m);
	mg_local(m);
	m->busy = false;
	farm_stat_add(&kv->st[S_CALLS], 1);
	farm_stat_add(&kv->st[S_KEYS], n);
	farm_stat_add(&kv->st[S_LOCAL], local);
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
	(void)farm_kv_sop_end(ctx, 0);
}

/* With a deadline the lookup fills arrays of its own, copied out once it
 * is done: one that outlives a wrapper that gave up must not write the
 * caller's. Without one it always ends before the wrapper returns, so it
 * writes the caller's arrays directly (no n * cap copy per call). */
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
	if (!timeout_ns) {
		int rc = farm_kv_mget(kv, loop, n, keys, klens, vals, cap, lens,
		                      status, mg_sync_done, w);
		if (!rc && (rc = farm_kv_sop_wait(loop, w, 0)))
			return rc; /* -EDEADLK: not from a handler */
		farm_kv_sop_free(w);
		return rc;
	}
	w->vals = malloc((size_t)n * cap + 1);
	w->lens = calloc(n + 1u, sizeof(*w->lens));
	w->st = calloc(n + 1u, sizeof(*w->st));
	int rc = w->vals && w->lens && w->st ? 0 : -ENOMEM;
	if (!rc)
		rc = farm_kv_mget(kv, loop, n, keys, klens, w->vals, cap,
		                  w->lens, w->st, mg_sync_done, w);
	if (!rc && (rc = farm_kv_sop_wait(loop, w, timeout_ns)))
		return rc;
	if (!rc) {
		memcpy(vals, w->vals, (size_t)n * cap);
		memcpy(lens, w->lens, n * sizeof(*lens));
		memcpy(status, w->st, n * sizeof(*status));
	}
	farm_kv_sop_free(w);
	return rc;
}

int farm_kv_mget_sync(farm_kv *kv, farm_loop *loop, unsigned n,
                      const void *const *keys, const uint32_t *klens,
                      void *vals, uint32_t cap, uint32_t *lens, int *status)
{
	return farm_kv_mget_sync_timed(kv, loop, n, keys, klens, vals, cap,
	                               lens, status, farm_kv_sync_timeout(kv));
}
