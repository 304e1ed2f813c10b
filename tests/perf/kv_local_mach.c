/*
 * kv_local_bench: a machine's side of the measurements on the store's
 * internal layout (struct kb_inner, kv_bench.h): the shard descriptors (the
 * store's own message), the plain local loop, YCSB E's scan from a key's
 * home bucket. The rest of the machine is kv_bench's (bench/kv_mach.c).
 */
#include "kv_local.h"

#include "hashtable/ht.h"
#include "kv/kv.h"
#include "node/node.h"
#include "txn/object.h"
#include "util/lines.h"

struct farm_ht_shard *kl_sd;

/* The shard descriptors of the other machines (kv's own message type), so
 * the plain loop can find this machine's shard: each machine asks the
 * others and writes what it learns into the shared page. */
struct sdwait {
	volatile int done;
	int status;
	struct farm_ht_shard sd;
};

static void sd_reply(farm_loop *loop, void *ctx, int status, const void *r,
                     uint32_t len)
{
	(void)loop;
	struct sdwait *w = ctx;
	if (!status && len == sizeof(w->sd))
		memcpy(&w->sd, r, sizeof(w->sd));
	else if (!status)
		status = -EPROTO;
	w->status = status;
	w->done = 1;
}

static int fetch_shards(struct mach *m)
{
	for (uint32_t j = 0; j < g_opt.machines; j++) {
		if (j == m->id)
			continue;
		struct sdwait w = {0};
		int rc = farm_msg_call(m->loop, j, 0, FARM_MSGT_KV_SHARD, NULL,
		                       0, 0, sd_reply, &w);
		if (!rc)
			rc = farm_loop_wait(m->loop, &w.done, 0);
		if (!rc)
			rc = w.status;
		if (rc)
			return rc;
		kl_sd[j] = w.sd;
	}
	return 0;
}

/* Once the store joined: the table's layout is the one kv_bench sizes
 * regions for, and the shards are known. */
static int kl_ready(struct mach *m)
{
	if (farm_ht_bucket_bytes(farm_kv_table(m->kv)) != kb_bucket_bytes()) {
		fprintf(stderr, PROG ": the table's bucket layout is not the "
		                     "one kv_bench sizes regions for\n");
		return -EPROTO;
	}
	return fetch_shards(m);
}

static long kl_scan_from(struct mach *m, const void *key, uint32_t klen,
                         farm_kv_iter_fn fn, void *ctx)
{
	return farm_ht_iterate_local_from(farm_kv_table(m->kv), m->id, key,
	                                  klen, fn, ctx);
}

/* ---- the plain loop ------------------------------------------------------ */

/* The shard's layout for the plain loop. */
struct plain {
	struct mach *m;
	farm_ht *ht;
	const uint8_t *arr; /* the shard's buckets, in local memory */
	uint32_t nbuckets, bb, bdata, hdr, slot, K;
	unsigned spb, L;
	uint8_t *img, *d;
	uint64_t bad, fallback, sum;
};

/* A lookup the plain loop could not finish: the store's full one. */
struct fb {
	volatile int done;
	uint32_t k;
	bool ok;
};

static void fb_cb(farm_loop *loop, void *ctx, int status, const void *val,
                  uint32_t len)
{
	(void)loop;
	struct fb *f = ctx;
	f->ok = !status && val_ok(f->k, val, len);
	f->done = 1;
}

/* In the overflow chain (or being written): the API's full lookup, polled
 * here (farm_loop_wait may park the thread). */
static void plain_fallback(struct plain *p, uint32_t k, const uint8_t *key)
{
	struct fb f = {.k = k};
	int rc = farm_ht_get(p->ht, p->m->loop, key, g_opt.ksize, fb_cb, &f);
	while (!rc && !f.done)
		(void)farm_loop_poll(p->m->loop);
	if (rc || !f.ok)
		p->bad++;
	p->fallback++;
}

/* Key @k (@key) in the two buckets copied into @im, checked and unpacked
 * as the store does: whether it was found there. */
static bool plain_match(struct plain *p, uint8_t *im, uint32_t k,
                        const uint8_t *key)
{
	uint64_t v, w;
	uint8_t *d = p->d;
	if (obj_check(im, p->L, UINT64_MAX, &v, &w) ||
	    obj_check(im + p->bb, p->L, UINT64_MAX, &v, &w))
		return false;
	obj_unpack(im, p->bdata, d);
	obj_unpack(im + p->bb, p->bdata, d + p->bdata);
	if (memcmp(d, d + p->bdata + 8, 8))
		return false;
	for (unsigned s = 0; s < 2 * p->spb; s++) {
		uint8_t *sl = d + (s < p->spb ? 0 : p->bdata) + p->hdr +
		              (s % p->spb) * p->slot;
		if ((sl[0] & 3) != 1 || sl[1] != g_opt.ksize ||
		    memcmp(sl + 8, key, g_opt.ksize))
			continue;
		uint32_t vl;
		memcpy(&vl, sl + 4, 4);
		if (!val_ok(k, sl + 8 + p->K, vl))
			p->bad++;
		p->sum += sl[8 + p->K + 8];
		return true;
	}
	return false;
}

/* One batch: PLAIN_BATCH keys of the stream hashed and their home buckets
 * prefetched, then each looked up. */
static void plain_batch(struct plain *p, uint64_t *gen)
{
	enum { B = PLAIN_BATCH };
	const uint8_t *a[B];
	uint32_t kk[B];
	uint8_t key[B][KLEN_MAX];
	for (int j = 0; j < B; j++) {
		kk[j] = key_of(p->m->stream[(*gen)++ % STREAM_LEN]);
		make_key(kk[j], key[j]);
		uint64_t h = farm_ht_hash(key[j], g_opt.ksize);
		uint32_t b = (uint32_t)((h >> 11) % p->nbuckets);
		a[j] = p->arr + (uint64_t)b * p->bb;
		for (unsigned l = 0; l < 2 * p->L; l++)
			__builtin_prefetch(a[j] + 64u * l);
	}
	for (int j = 0; j < B; j++) {
		uint8_t *im = p->img + (size_t)j * 2 * p->bb;
		if (!farm_lines_copy(im, a[j], 2ull * p->bb, 1000) ||
		    !plain_match(p, im, kk[j], key[j]))
			plain_fallback(p, kk[j], key[j]);
	}
}

/* The layout of machine @m's shard; 0, -EINVAL (not local), -ENOMEM. */
static int plain_open(struct plain *p, struct mach *m)
{
	const struct farm_ht_shard *sd = &kl_sd[m->id];
	memset(p, 0, sizeof(*p));
	p->m = m;
	p->ht = farm_kv_table(m->kv);
	p->nbuckets = sd->nbuckets;
	p->bb = farm_ht_bucket_bytes(p->ht);
	p->spb = farm_ht_slots_per_bucket(p->ht);
	p->L = p->bb / 64;
	/* Layout (src/hashtable/ht_int.h): bucket data = fwd u64, bwd u64,
	 * overflow fat pointer (24 B), then slots of [flags u8][klen u8]
	 * [pad u16][vlen u32][key K][value V] (K, V: the inline sizes; a
	 * pair that does not fit is in an object: the API's lookup). */
	p->K = kb_key_inline();
	p->hdr = 40;
	p->slot = 8 + p->K + kb_val_inline();
	p->bdata = p->hdr + p->spb * p->slot;
	p->arr = farm_as_local_ptr(farm_node_as(m->node), sd->base,
	                           ((uint64_t)sd->nbuckets + 1) * p->bb);
	if (!p->arr) {
		fprintf(stderr, PROG ": machine %u: shard not local\n", m->id);
		return -EINVAL;
	}
	p->img = aligned_alloc(64, (size_t)PLAIN_BATCH * 2 * p->bb);
	p->d = malloc(2 * (size_t)p->bdata);
	if (!p->img || !p->d) {
		free(p->img);
		free(p->d);
		return -ENOMEM;
	}
	return 0;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	(void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

/* The plain loop: lookups of own-shard keys straight from local memory,
 * for @dur ns; its figures into g_sh->res[m->id]. */
static int kl_plain(struct mach *m, uint64_t dur)
{
	struct mres *r = &g_sh->res[m->id];
	struct plain p;
	int rc = kb_make_stream(m, W_LOCAL);
	if (!rc)
		rc = plain_open(&p, m);
	if (rc)
		return rc;
	uint64_t n = 0, gen = 0, c0 = thread_cpu_ns();
	uint64_t t0 = bu_now_ns(), now = t0;
	r->nsamp = 0;
	while (now - t0 < dur) {
		plain_batch(&p, &gen);
		n += PLAIN_BATCH;
		now = bu_now_ns();
	}
	free(p.img);
	free(p.d);
	r->ops = r->gets = r->keys = n;
	r->ns = now - t0;
	r->cpu_ns = thread_cpu_ns() - c0;
	r->errors = p.bad;
	r->chain_fallbacks = p.fallback;
	if (p.sum == 42)
		r->puts = 0; /* keep the value reads */
	if (p.bad) {
		fprintf(stderr, PROG ": plain loop: %" PRIu64 " bad lookups\n",
		        p.bad);
		return -EIO;
	}
	return 0;
}

static const struct kb_inner kl_inner = {
        .ready = kl_ready,
        .cmd = kl_plain,
        .scan_from = kl_scan_from,
};
const struct kb_inner *const kb_inner = &kl_inner;
