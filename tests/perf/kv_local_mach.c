/*
 * kv_local_bench: a machine's side of the measurements on the store's
 * internal layout (struct kb_inner, kv_bench.h): the shard descriptors (the
 * store's own message), the plain local loop, YCSB E's scan from a key's
 * home bucket. The rest of the machine is kv_bench's (bench/kv_mach.c).
 */
#include "kv_local.h"
#include "memlimit.h"

#include "hashtable/ht.h"
#include "kv/kv.h"
#include "node/node.h"

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

/* The plain loop's state: the store's batched local lookup
 * (farm_ht_get_local_batch: hash, prefetch, copy, validate, match) on
 * calls of PLAIN_CALL keys, in groups of PLAIN_BATCH prefetched together, the
 * limit's number in flight. */
#define PLAIN_CALL FARM_HT_BATCH_MAX
_Static_assert(FARM_HT_BATCH_GROUP == PLAIN_BATCH,
               "the plain loop has the limit's number in flight");
struct plain {
	struct mach *m;
	farm_ht *ht;
	uint8_t *scratch; /* the batch's pair images */
	uint64_t bad, fallback, sum;
	unsigned fb_left;
};

/* A lookup the batch could not finish: the store's full one. */
struct fb {
	struct plain *p;
	uint32_t k;
};

static void fb_cb(farm_loop *loop, void *ctx, int status, const void *val,
                  uint32_t len)
{
	(void)loop;
	struct fb *f = ctx;
	if (status || !val_ok(f->k, val, len))
		f->p->bad++;
	f->p->fb_left--;
}

/* In the overflow chain (or being written): the API's full lookups of a
 * group's unresolved keys, all issued, then polled together (farm_loop_poll
 * runs the rest of the machine too). */
static void plain_fallback(struct plain *p, struct fb *f, unsigned n,
                           uint8_t (*key)[KLEN_MAX])
{
	for (unsigned j = 0; j < n; j++) {
		p->fb_left++;
		if (farm_ht_get(p->ht, p->m->loop, key[j], g_opt.ksize, fb_cb,
		                &f[j])) {
			p->fb_left--;
			p->bad++;
		}
	}
	p->fallback += n;
	while (p->fb_left)
		(void)farm_loop_poll(p->m->loop);
}

/* One call: PLAIN_CALL keys of the stream, looked up together. */
static void plain_batch(struct plain *p, uint64_t *gen)
{
	enum { B = PLAIN_CALL };
	struct farm_ht_lkey lk[B];
	uint32_t kk[B];
	uint8_t key[B][KLEN_MAX];
	for (int j = 0; j < B; j++) {
		kk[j] = key_of(p->m->stream[(*gen)++ % STREAM_LEN]);
		make_key(kk[j], key[j]);
		lk[j].key = key[j];
		lk[j].klen = g_opt.ksize;
	}
	if (farm_ht_get_local_batch(p->ht, p->m->loop, lk, B, p->scratch)) {
		p->bad += B;
		return;
	}
	struct fb f[B];
	uint8_t fkey[B][KLEN_MAX];
	unsigned nf = 0;
	for (int j = 0; j < B; j++) {
		if (lk[j].status == 0) {
			if (!val_ok(kk[j], lk[j].val, lk[j].vlen))
				p->bad++;
			if (lk[j].vlen)
				p->sum += ((const uint8_t *)lk[j].val)[0];
		} else if (lk[j].status == FARM_HT_UNRESOLVED) {
			f[nf] = (struct fb){.p = p, .k = kk[j]};
			memcpy(fkey[nf++], key[j], g_opt.ksize);
		} else {
			p->bad++;
		}
	}
	if (nf)
		plain_fallback(p, f, nf, fkey);
}

/* Machine @m's shard and the batch's images; 0, -EINVAL (not local),
 * -ENOMEM. */
static int plain_open(struct plain *p, struct mach *m)
{
	const struct farm_ht_shard *sd = &kl_sd[m->id];
	memset(p, 0, sizeof(*p));
	p->m = m;
	p->ht = farm_kv_table(m->kv);
	uint32_t bb = farm_ht_bucket_bytes(p->ht);
	if (!farm_as_local_ptr(farm_node_as(m->node), sd->base,
	                       ((uint64_t)sd->nbuckets + 1) * bb)) {
		fprintf(stderr, PROG ": machine %u: shard not local\n", m->id);
		return -EINVAL;
	}
	p->scratch = aligned_alloc(64, (size_t)PLAIN_CALL *
	                                       farm_ht_batch_bytes(p->ht));
	return p->scratch ? 0 : -ENOMEM;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	(void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

/* The limit's table and its turns so far (KL_LIMIT). */
static struct ml_table kl_lim;
static struct ml_tally kl_tally;

/* A turn of the limit loop for @dur ns over a table the size and layout
 * of the cluster's shards (as kb_run_limit's), made at the first turn;
 * the turns' figures so far into g_sh->res[m->id]. */
static int kl_limit(struct mach *m, uint64_t dur)
{
	if (!kl_lim.base) {
		uint64_t nb = (uint64_t)g_opt.machines *
		              (kb_buckets_for(m->nkeys) + 1ull);
		int rc = ml_open(&kl_lim, nb - 1, kb_bucket_bytes(), m->base);
		if (rc)
			return rc;
		kl_tally = (struct ml_tally){0};
	}
	int rc = ml_slice(&kl_lim, PLAIN_BATCH, (double)dur / 1e9, &kl_tally);
	if (rc)
		return rc;
	struct mres *r = &g_sh->res[m->id];
	r->ops = r->gets = r->keys = kl_tally.n;
	r->ns = kl_tally.ns;
	r->cpu_ns = kl_tally.cpu_ns;
	return 0;
}

/* The plain loop: lookups of own-shard keys straight from local memory,
 * for @dur ns; its figures into g_sh->res[m->id]. (CMD_INNER: a turn of
 * the limit instead, or its end, by g_sh->wl.) */
static int kl_plain(struct mach *m, uint64_t dur)
{
	if (g_sh->wl == KL_LIMIT)
		return kl_limit(m, dur);
	if (g_sh->wl == KL_LIMIT_END) {
		ml_close(&kl_lim);
		return 0;
	}
	struct mres *r = &g_sh->res[m->id];
	struct plain p;
	int rc = kb_make_stream(m, W_LOCAL);
	if (!rc)
		rc = plain_open(&p, m);
	if (rc)
		return rc;
	/* The stream goes on where the last turn left it (kv_local_bench
	 * takes the loop in turns with the limit's). */
	static uint64_t gen;
	uint64_t n = 0, c0 = thread_cpu_ns();
	uint64_t t0 = bu_now_ns(), now = t0;
	r->nsamp = 0;
	while (now - t0 < dur) {
		plain_batch(&p, &gen);
		n += PLAIN_CALL;
		now = bu_now_ns();
	}
	free(p.scratch);
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
