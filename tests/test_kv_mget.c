/*
 * The KV store's batched multi-get across machine processes.
 * Three forked machines (nodeproc.h: static membership, one loop each)
 * share a deliberately small table (16 buckets of 2 slots per machine)
 * filled well past its buckets, so overflow chains exist on every shard.
 * Machine 2 asks; machines 0 and 1 own the other shards and answer.
 *
 *   fill      machine 2 puts 240 keys (1 in 5 left absent; short and long
 *             keys; values of 8, 32, 100 and 400 bytes: inline and in
 *             objects of their own)
 *   main      (READ lookups) every key (present, absent, in chains or
 *             not) in one multi-get: each answer equals an individual
 *             get's and what was put. The keys the first read leaves
 *             unresolved (farm_ht_get_first, asked beforehand) lie on
 *             both other machines; each was chased (looked up whole by
 *             READs: the asker's counters), no batch message went out
 *   resolved  (READ) a multi-get of only keys the first read resolves:
 *             nothing chased, no batch
 *   owner     (owner lookups) every key again: exactly one batch message
 *             per other machine, each owner served exactly its keys
 *   spill     (owner) chained keys of machine 0 get 6000-byte values,
 *             more than one reply holds: still one message per machine,
 *             the values that did not fit are looked up separately
 *             (spills > 0), all answers still equal individual gets
 *   split     (owner) 150 absent 250-byte keys of machine 0: more than
 *             one request holds, so exactly as many messages as the
 *             greedy packing needs (2), all -ENOENT
 *   many      (READ) all keys three times over (720: more lookups than a
 *             loop has in flight at once), the chased ones among them
 *   bad input n = 0, NULL arrays, too many keys, empty / oversize keys
 *             and values, directory names: the documented codes
 *   malformed raw FARM_MSGT_KV_MGET requests to machine 0 (empty,
 *             truncated, no keys, too many, bad key lengths, trailing
 *             bytes, flags, cap, a key of another machine, a one-way
 *             send): an error reply each, counted as bad; machine 0 keeps
 *             answering a good request right after
 * --broken-chase (FARM_FP_KV_MGET_NO_CHASE): keys the first read leaves
 * unresolved are answered absent; phase main must see them wrong.
 */
#include "kvproc.h"
#include "brokenarg.h"

#include <inttypes.h>

#include "kv/kv.h"

#define NM       NP_NM
#define ASKER    2u
#define RSIZE    "32M"
#define JOIN_MS  30000
#define NBUCKETS 16u
#define NKEYS    240u
#define CAP      8192u
#define BIGV     6000u
#define NSPLIT   150u
#define SPLIT_KL 250u

static struct np_cluster G;
static bool broken; /* --broken-chase */

struct ch {
	struct np_child np;
	farm_kv *kv;
	farm_ht *ht;
	/* the asker's ground truth */
	bool present[NKEYS];
	unsigned ver[NKEYS];
};

/* ---- keys and values ----------------------------------------------------- */

/* Key @i: short (12 bytes) or, one in 9, long (40 bytes: not inline). */
static uint32_t mkkey(unsigned i, uint8_t *k)
{
	if (i % 9 == 8) {
		memset(k, 'x', 40);
		int n = snprintf((char *)k, 40, "long-key-%05u-", i);
		k[n] = 'x';
		return 40;
	}
	memset(k, 0, 12);
	snprintf((char *)k, 12, "k-%05u", i);
	return 12;
}

static uint32_t vlen_of(unsigned i, unsigned ver)
{
	static const uint32_t lens[] = {8, 32, 100, 400};
	return ver ? BIGV : lens[i % 4];
}

static void mkval(unsigned i, unsigned ver, uint8_t *v)
{
	for (uint32_t j = 0; j < vlen_of(i, ver); j++)
		v[j] = (uint8_t)(i * 131u + j * 7u + ver * 29u + 1u);
}

static unsigned machine_of(const void *key, uint32_t klen)
{
	return farm_ht_shard_index(farm_ht_hash(key, klen), NM);
}

/* ---- the machines -------------------------------------------------------- */

typedef int (*role_fn)(struct ch *c);

struct body {
	struct ch *c;
	role_fn role;
};

static int run_body(void *arg)
{
	struct body *b = arg;
	b->c->ht = farm_kv_table(b->c->kv);
	return b->role(b->c);
}

static int child_main(struct ch *c, role_fn role)
{
	struct farm_kv_attr a = {
	        .neighborhood = 4, .key_inline = 16, .val_inline = 32};
	struct body b = {c, role};
	return kvp_run(&c->np, RSIZE, &a, NBUCKETS, JOIN_MS, &c->kv, run_body,
	               &b);
}

static int child_entry(struct np_child *np, void *arg)
{
	struct ch *c = calloc(1, sizeof(*c));
	if (!c)
		return 3;
	c->np = *np;
	int st = child_main(c, *(role_fn *)arg);
	free(c);
	return st;
}

static int cl_cleanup(void **state)
{
	(void)state;
	np_cleanup(&G);
	return 0;
}

/* ---- the asker's checks -------------------------------------------------- */

/* A key of a multi-get and what it should give (exp_ver < 0: absent). */
struct kd {
	uint8_t key[FARM_KV_MAX_KEY];
	uint32_t klen;
	int idx;     /* the key set's index, or -1 */
	int exp_ver; /* -1: absent */
};

/* What a phase reports to the parent. */
struct phase {
	int rc;
	uint32_t n;
	uint32_t mismatch; /* multi-get != individual get */
	uint32_t wrong;    /* != what was put */
	uint32_t found, absent, indirect, local;
	bool owner;              /* the phase ran with owner lookups */
	uint32_t unresolved[NM]; /* per owner, by farm_ht_get_first */
	uint32_t remote[NM];     /* keys per owner other than the asker */
	uint32_t unresolved_big; /* batched keys holding BIGV values */
	uint32_t expect_msgs;    /* split: what the packing needs */
	farm_kv_stats d;         /* the asker's counters, after - before */
	char first[160];
};

static void note(struct phase *p, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void note(struct phase *p, const char *fmt, ...)
{
	if (p->first[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->first, sizeof(p->first), fmt, ap);
	va_end(ap);
}

struct first_w {
	volatile int done;
	int status;
};

static void first_cb(farm_loop *loop, void *ctx, int status, const void *val,
                     uint32_t len)
{
	(void)loop;
	(void)val;
	(void)len;
	struct first_w *w = ctx;
	w->status = status;
	w->done = 1;
}

/* What the first read alone says of a key (0, -ENOENT, UNRESOLVED). */
static int first_read(struct ch *c, const void *key, uint32_t klen)
{
	struct first_w w = {0};
	int rc = farm_ht_get_first(c->ht, c->np.loop, key, klen, first_cb, &w);
	if (!rc)
		rc = farm_loop_wait(c->np.loop, &w.done, 5000000000ull);
	return rc ? rc : w.status;
}

static void kd_set(struct kd *k, unsigned i, const struct ch *c)
{
	k->klen = mkkey(i, k->key);
	k->idx = (int)i;
	k->exp_ver = c->present[i] ? (int)c->ver[i] : -1;
}

static volatile int mg_done;
static void mg_cb(farm_loop *loop, void *ctx)
{
	(void)loop;
	(void)ctx;
	mg_done = 1;
}

/* Key @i's owner, and what its first read alone says of it. */
static void classify(struct ch *c, const struct kd *k, unsigned i,
                     struct phase *p)
{
	unsigned m = machine_of(k->key, k->klen);
	if (m == c->np.me) {
		p->local++;
		return;
	}
	p->remote[m]++;
	int f = first_read(c, k->key, k->klen);
	if (p->owner && k->exp_ver == 1)
		p->unresolved_big++;
	if (f == FARM_HT_UNRESOLVED)
		p->unresolved[m]++;
	else if (f != 0 && f != -ENOENT)
		note(p, "first read of key %u: %s", i, farm_strerror(f));
}

/*
 * Classify @n keys with a first read, multi-get them all (counters
 * around it), then get each on its own and compare.
 */
static void run_cmp(struct ch *c, struct kd *ks, unsigned n, struct phase *p)
{
	const void **kp = calloc(n, sizeof(*kp));
	uint32_t *kl = calloc(n, sizeof(*kl)), *lens = calloc(n, sizeof(*lens));
	int *st = calloc(n, sizeof(*st));
	uint8_t *vals = malloc((size_t)n * CAP), *one = malloc(CAP),
	        *want = malloc(BIGV);
	p->n = n;
	if (!kp || !kl || !lens || !st || !vals || !one || !want) {
		p->rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < n; i++) {
		kp[i] = ks[i].key;
		kl[i] = ks[i].klen;
		classify(c, &ks[i], i, p);
	}
	farm_kv_stats s0, s1;
	farm_kv_stats_get(c->kv, &s0);
	mg_done = 0;
	memset(lens, 0xff, n * sizeof(*lens));
	p->rc = farm_kv_mget(c->kv, c->np.loop, n, kp, kl, vals, CAP, lens, st,
	                     mg_cb, NULL);
	if (!p->rc)
		p->rc = farm_loop_wait(c->np.loop, &mg_done,
		                       20ull * 1000000000ull);
	farm_kv_stats_get(c->kv, &s1);
	if (p->rc)
		goto out;
	p->d = (farm_kv_stats){
	        .mget_calls = s1.mget_calls - s0.mget_calls,
	        .mget_keys = s1.mget_keys - s0.mget_keys,
	        .mget_local = s1.mget_local - s0.mget_local,
	        .mget_first_hits = s1.mget_first_hits - s0.mget_first_hits,
	        .mget_misses = s1.mget_misses - s0.mget_misses,
	        .mget_msgs = s1.mget_msgs - s0.mget_msgs,
	        .mget_spills = s1.mget_spills - s0.mget_spills,
	        .mget_fallbacks = s1.mget_fallbacks - s0.mget_fallbacks,
	        .mget_chased = s1.mget_chased - s0.mget_chased};
	for (unsigned i = 0; i < n; i++) {
		uint32_t len = 0;
		int rc = farm_kv_get_sync(c->kv, c->np.loop, ks[i].key,
		                          ks[i].klen, one, CAP, &len);
		const uint8_t *mv = vals + (size_t)i * CAP;
		if (rc != st[i] || (rc == 0 && (len != lens[i] ||
		                                memcmp(one, mv, len) != 0))) {
			p->mismatch++;
			note(p, "key %u: mget %s (%u bytes), get %s (%u bytes)",
			     i, farm_strerror(st[i]), lens[i],
			     farm_strerror(rc), len);
		}
		if (ks[i].exp_ver < 0) {
			if (st[i] != -ENOENT || lens[i] != 0) {
				p->wrong++;
				note(p, "absent key %u: %s", i,
				     farm_strerror(st[i]));
			}
			p->absent += st[i] == -ENOENT;
			continue;
		}
		unsigned id = (unsigned)ks[i].idx,
		         ver = (unsigned)ks[i].exp_ver;
		mkval(id, ver, want);
		if (st[i] != 0 || lens[i] != vlen_of(id, ver) ||
		    memcmp(mv, want, lens[i]) != 0) {
			p->wrong++;
			note(p, "key %u: %s, %u bytes, want %u", i,
			     farm_strerror(st[i]), lens[i], vlen_of(id, ver));
		}
		p->found += st[i] == 0;
		p->indirect += st[i] == 0 && lens[i] > 32;
	}
out:
	free(kp);
	free(kl);
	free(lens);
	free(st);
	free(vals);
	free(one);
	free(want);
}

static int do_fill(struct ch *c)
{
	uint8_t k[64], v[BIGV];
	for (unsigned i = 0; i < NKEYS; i++) {
		if (i % 5 == 4)
			continue;
		uint32_t kl = mkkey(i, k);
		mkval(i, 0, v);
		int rc = farm_kv_put_sync(c->kv, c->np.loop, k, kl, v,
		                          vlen_of(i, 0));
		if (rc)
			return rc;
		c->present[i] = true;
	}
	return 0;
}

/* Every key, @rep times over (more keys than a loop has lookups in
 * flight when @rep is 3: the rest wait their turn). */
static void do_main(struct ch *c, struct phase *p, unsigned rep)
{
	struct kd *ks = calloc(NKEYS * rep, sizeof(*ks));
	if (!ks) {
		p->rc = -ENOMEM;
		return;
	}
	for (unsigned i = 0; i < NKEYS * rep; i++)
		kd_set(&ks[i], i % NKEYS, c);
	run_cmp(c, ks, NKEYS * rep, p);
	free(ks);
}

/* Only keys that the first read resolves (and our own). */
static void do_resolved(struct ch *c, struct phase *p)
{
	struct kd *ks = calloc(NKEYS, sizeof(*ks));
	unsigned n = 0;
	if (!ks) {
		p->rc = -ENOMEM;
		return;
	}
	for (unsigned i = 0; i < NKEYS; i++) {
		kd_set(&ks[n], i, c);
		if (machine_of(ks[n].key, ks[n].klen) == c->np.me ||
		    first_read(c, ks[n].key, ks[n].klen) != FARM_HT_UNRESOLVED)
			n++;
	}
	run_cmp(c, ks, n, p);
	free(ks);
}

/* Give machine 0's chained keys values too big for one reply. */
static void do_spill(struct ch *c, struct phase *p)
{
	uint8_t k[64], *v = malloc(BIGV);
	unsigned big = 0;
	for (unsigned i = 0; v && i < NKEYS && big < 8; i++) {
		if (!c->present[i])
			continue;
		uint32_t kl = mkkey(i, k);
		if (machine_of(k, kl) != 0 ||
		    first_read(c, k, kl) != FARM_HT_UNRESOLVED)
			continue;
		mkval(i, 1, v);
		int rc = farm_kv_put_sync(c->kv, c->np.loop, k, kl, v, BIGV);
		if (rc) {
			p->rc = rc;
			free(v);
			return;
		}
		c->ver[i] = 1;
		big++;
	}
	free(v);
	do_main(c, p, 1);
}

/* Absent long keys machine 0 must answer for, more than one request
 * holds. */
static void do_split(struct ch *c, struct phase *p)
{
	struct kd *ks = calloc(NSPLIT, sizeof(*ks));
	unsigned n = 0;
	if (!ks) {
		p->rc = -ENOMEM;
		return;
	}
	for (unsigned t = 0; n < NSPLIT && t < 20000; t++) {
		struct kd *k = &ks[n];
		memset(k->key, 'z', SPLIT_KL);
		snprintf((char *)k->key, 32, "split-%u-", t);
		k->key[strlen((char *)k->key)] = 'z';
		k->klen = SPLIT_KL;
		k->idx = -1;
		k->exp_ver = -1;
		if (machine_of(k->key, k->klen) == 0 &&
		    first_read(c, k->key, k->klen) == FARM_HT_UNRESOLVED)
			n++;
	}
	/* The packing's rule: a request holds what fits one message. */
	uint32_t maxp = farm_msg_max_payload(farm_node_msg(c->np.node));
	uint32_t per = (maxp - (uint32_t)sizeof(struct farm_kv_mget_req)) /
	               (2 + SPLIT_KL);
	p->expect_msgs = (n + per - 1) / per;
	run_cmp(c, ks, n, p);
	free(ks);
}

/* ---- bad input ----------------------------------------------------------- */

enum {
	B_N0,
	B_KEYS_NULL,
	B_CONT_NULL,
	B_TOO_MANY,
	B_MGET_EMPTY_KEY, /* status of an empty key in a multi-get */
	B_MGET_NULL_KEY,
	B_MGET_BIG_KEY,
	B_MGET_GOOD, /* the good key next to them */
	B_GET_EMPTY,
	B_GET_BIG_KEY,
	B_PUT_BIG_KEY,
	B_PUT_BIG_VAL,
	B_PUT_OVER_LIMIT,
	B_PUT_EMPTY_VAL,
	B_DEL_BIG_KEY,
	B_NAME_EMPTY,
	B_NAME_LONG,
	B_GET_SMALL_CAP, /* value longer than the buffer */
	B_GET_SMALL_LEN,
	B_LIMIT, /* farm_kv_value_limit for a 12-byte key */
	B_N
};

static void do_bad(struct ch *c, int *r)
{
	farm_loop *loop = c->np.loop;
	uint8_t good[64], big[FARM_KV_MAX_KEY + 1], v[64];
	/* a present key with an inline value (8 or 32 bytes), and one with
	 * 100 bytes */
	unsigned gi = 0, hi = 0;
	while (gi < NKEYS &&
	       !(c->present[gi] && !c->ver[gi] && vlen_of(gi, 0) <= 32))
		gi++;
	while (hi < NKEYS &&
	       !(c->present[hi] && !c->ver[hi] && vlen_of(hi, 0) == 100))
		hi++;
	if (gi == NKEYS || hi == NKEYS) {
		r[B_MGET_GOOD] = -102;
		return;
	}
	uint32_t gl = mkkey(gi, good);
	memset(big, 'b', sizeof(big));
	const void *kp[3] = {good, big, good};
	uint32_t kl[3] = {gl, sizeof(big), gl}, lens[3];
	int st[3];
	uint8_t vals[3 * 64];
	r[B_N0] = farm_kv_mget(c->kv, loop, 0, kp, kl, vals, 64, lens, st,
	                       mg_cb, NULL);
	r[B_KEYS_NULL] = farm_kv_mget(c->kv, loop, 3, NULL, kl, vals, 64, lens,
	                              st, mg_cb, NULL);
	r[B_CONT_NULL] = farm_kv_mget(c->kv, loop, 3, kp, kl, vals, 64, lens,
	                              st, NULL, NULL);
	r[B_TOO_MANY] = farm_kv_mget(c->kv, loop, FARM_KV_MGET_MAX + 1, kp, kl,
	                             vals, 64, lens, st, mg_cb, NULL);
	/* empty key, oversize key, NULL key, good key */
	const void *kp2[4] = {good, big, NULL, good};
	uint32_t kl2[4] = {0, sizeof(big), 5, gl}, lens2[4];
	int st2[4];
	uint8_t vals2[4 * 64];
	int rc = farm_kv_mget_sync(c->kv, loop, 4, kp2, kl2, vals2, 64, lens2,
	                           st2);
	r[B_MGET_EMPTY_KEY] = rc ? rc : st2[0];
	r[B_MGET_BIG_KEY] = rc ? rc : st2[1];
	r[B_MGET_NULL_KEY] = rc ? rc : st2[2];
	r[B_MGET_GOOD] = rc ? rc : st2[3];
	if (!rc && !st2[3]) {
		uint8_t want[64];
		mkval(gi, 0, want);
		if (lens2[3] != vlen_of(gi, 0) ||
		    memcmp(vals2 + 3 * 64, want, lens2[3]) != 0)
			r[B_MGET_GOOD] = 1;
	}
	uint32_t len = 0;
	r[B_GET_EMPTY] = farm_kv_get_sync(c->kv, loop, good, 0, v, 64, &len);
	r[B_GET_BIG_KEY] =
	        farm_kv_get_sync(c->kv, loop, big, sizeof(big), v, 64, &len);
	r[B_PUT_BIG_KEY] =
	        farm_kv_put_sync(c->kv, loop, big, sizeof(big), v, 8);
	uint8_t *huge = calloc(1, FARM_KV_MAX_VALUE + 1);
	uint32_t lim = farm_kv_value_limit(c->kv, gl);
	r[B_PUT_BIG_VAL] = huge ? farm_kv_put_sync(c->kv, loop, good, gl, huge,
	                                           FARM_KV_MAX_VALUE + 1)
	                        : -ENOMEM;
	r[B_PUT_OVER_LIMIT] =
	        huge ? farm_kv_put_sync(c->kv, loop, good, gl, huge, lim + 1)
	             : -ENOMEM;
	free(huge);
	r[B_PUT_EMPTY_VAL] = farm_kv_put_sync(c->kv, loop, good, gl, v, 0);
	r[B_DEL_BIG_KEY] = farm_kv_del_sync(c->kv, loop, big, sizeof(big));
	r[B_NAME_EMPTY] = farm_kv_name_sync(c->kv, loop, "", (farm_fatptr){0});
	char name[FARM_KV_MAX_KEY + 1];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	r[B_NAME_LONG] = farm_kv_name_sync(c->kv, loop, name, (farm_fatptr){0});
	uint8_t hk[64];
	uint32_t hl = mkkey(hi, hk);
	len = 0;
	r[B_GET_SMALL_CAP] = farm_kv_get_sync(c->kv, loop, hk, hl, v, 10, &len);
	r[B_GET_SMALL_LEN] = (int)len;
	r[B_LIMIT] = (int)lim;
}

/* ---- malformed requests -------------------------------------------------- */

enum {
	M_EMPTY,
	M_SHORT,
	M_NOKEYS,
	M_TOO_MANY,
	M_FLAGS,
	M_CAP,
	M_KLEN0,
	M_KLEN_BIG,
	M_TRUNC_KEY,
	M_MISSING_KEY,
	M_TRAILING,
	M_FOREIGN,
	M_NBAD, /* the requests above are malformed */
	M_GOOD = M_NBAD,
	M_GOOD_LEN,
	M_N
};

struct call_w {
	volatile int done;
	int status;
	uint8_t reply[256];
	uint32_t len;
};

static void call_cb(farm_loop *loop, void *ctx, int status, const void *reply,
                    uint32_t len)
{
	(void)loop;
	struct call_w *w = ctx;
	w->status = status;
	w->len = len;
	if (!status && len <= sizeof(w->reply))
		memcpy(w->reply, reply, len);
	w->done = 1;
}

static int call0(struct ch *c, const void *req, uint32_t len, struct call_w *w)
{
	memset(w, 0, sizeof(*w));
	int rc = farm_msg_call(c->np.loop, 0, 0, FARM_MSGT_KV_MGET, req, len,
	                       5000000000ull, call_cb, w);
	if (!rc)
		rc = farm_loop_wait(c->np.loop, &w->done, 10000000000ull);
	return rc ? rc : w->status;
}

/* A request: header, then @nk keys. */
static uint32_t mkreq(uint8_t *b, uint16_t nkeys, uint16_t flags, uint32_t cap,
                      const uint8_t *const *keys, const uint16_t *kls,
                      unsigned nk)
{
	struct farm_kv_mget_req q = {
	        .nkeys = nkeys, .flags = flags, .cap = cap};
	memcpy(b, &q, sizeof(q));
	uint32_t off = sizeof(q);
	for (unsigned j = 0; j < nk; j++) {
		memcpy(b + off, &kls[j], 2);
		memcpy(b + off + 2, keys[j], kls[j]);
		off += 2 + kls[j];
	}
	return off;
}

static void do_malformed(struct ch *c, int *r)
{
	static uint8_t b[4096];
	uint8_t k0[64], kf[64];
	uint16_t l0 = 0, lf = 0;
	int i0 = -1;
	/* a present key of machine 0 (inline value) and one of machine 1 */
	for (unsigned i = 0; i < NKEYS && (!l0 || !lf); i++) {
		uint8_t k[64];
		uint32_t kl = mkkey(i, k);
		unsigned m = machine_of(k, kl);
		if (m == 0 && !l0 && c->present[i] && !c->ver[i] &&
		    vlen_of(i, 0) <= 32) {
			memcpy(k0, k, kl);
			l0 = (uint16_t)kl;
			i0 = (int)i;
		} else if (m == 1 && !lf) {
			memcpy(kf, k, kl);
			lf = (uint16_t)kl;
		}
	}
	const uint8_t *kk[2] = {k0, k0};
	uint16_t ll[2] = {l0, l0};
	struct call_w w;
	uint32_t n;
	r[M_EMPTY] = call0(c, NULL, 0, &w);
	n = mkreq(b, 1, 0, 64, kk, ll, 1);
	r[M_SHORT] = call0(c, b, 6, &w);
	n = mkreq(b, 0, 0, 64, kk, ll, 0);
	r[M_NOKEYS] = call0(c, b, n, &w);
	n = mkreq(b, FARM_KV_MGET_BATCH_MAX + 1, 0, 64, kk, ll, 1);
	r[M_TOO_MANY] = call0(c, b, n, &w);
	n = mkreq(b, 1, 1, 64, kk, ll, 1);
	r[M_FLAGS] = call0(c, b, n, &w);
	n = mkreq(b, 1, 0, FARM_KV_MAX_VALUE + 1, kk, ll, 1);
	r[M_CAP] = call0(c, b, n, &w);
	uint16_t zero = 0;
	n = mkreq(b, 1, 0, 64, kk, &zero, 1);
	r[M_KLEN0] = call0(c, b, n, &w);
	/* a key length above the limit, with that many bytes there */
	uint16_t bigl = FARM_KV_MAX_KEY + 1;
	memcpy(b + 8, &bigl, 2);
	memset(b + 10, 'q', bigl);
	r[M_KLEN_BIG] = call0(c, b, 10u + bigl, &w);
	n = mkreq(b, 1, 0, 64, kk, ll, 1);
	r[M_TRUNC_KEY] = call0(c, b, n - 1, &w);
	n = mkreq(b, 2, 0, 64, kk, ll, 1);
	r[M_MISSING_KEY] = call0(c, b, n, &w);
	n = mkreq(b, 1, 0, 64, kk, ll, 1);
	b[n] = 0;
	r[M_TRAILING] = call0(c, b, n + 1, &w);
	const uint8_t *kx[1] = {kf};
	n = mkreq(b, 1, 0, 64, kx, &lf, 1);
	r[M_FOREIGN] = call0(c, b, n, &w);
	/* A one-way message cannot be answered: dropped (and counted). */
	n = mkreq(b, 1, 0, 64, kk, ll, 1);
	if (farm_msg_send(c->np.loop, 0, 0, FARM_MSGT_KV_MGET, b, n))
		r[M_GOOD] = -100;
	/* Still answering: a good request, its reply checked byte by byte. */
	n = mkreq(b, 1, 0, 64, kk, ll, 1);
	int rc = call0(c, b, n, &w);
	r[M_GOOD] = rc;
	r[M_GOOD_LEN] = (int)w.len;
	if (!rc && i0 >= 0) {
		struct farm_kv_mget_rep h;
		int32_t st;
		uint32_t vl;
		uint8_t want[64];
		mkval((unsigned)i0, 0, want);
		memcpy(&h, w.reply, sizeof(h));
		memcpy(&st, w.reply + 8, 4);
		memcpy(&vl, w.reply + 12, 4);
		if (h.nkeys != 1 || st != 0 || vl != vlen_of((unsigned)i0, 0) ||
		    w.len != 16 + vl || memcmp(w.reply + 16, want, vl) != 0)
			r[M_GOOD] = 1;
	}
	if (i0 < 0 || !lf)
		r[M_GOOD] = -101;
}

/* ---- the machines' script ------------------------------------------------ */

static int role(struct ch *c)
{
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		struct phase p;
		memset(&p, 0, sizeof(p));
		switch (cmd) {
		case 'Q': return 0;
		case 'S': { /* my counters */
			farm_kv_stats s;
			farm_kv_stats_get(c->kv, &s);
			if (np_say(&c->np, 'S', &s, sizeof(s)))
				return 20;
			break;
		}
		case 'F': {
			int rc = do_fill(c);
			if (np_say(&c->np, 'F', &rc, sizeof(rc)))
				return 21;
			break;
		}
		case '1':
		case '2':
		case '3':
		case '4':
		case '5':
		case '6':
			/* The batches are owner lookups' way; READ lookups
			 * chase what the first read leaves. */
			p.owner = cmd == '3' || cmd == '4' || cmd == '6';
			if (farm_kv_set_lookup(c->kv,
			                       p.owner ? FARM_KV_LOOKUP_OWNER
			                               : FARM_KV_LOOKUP_READ))
				return 25;
			if (cmd == '1' || cmd == '6')
				do_main(c, &p, 1);
			else if (cmd == '5')
				do_main(c, &p, 3);
			else if (cmd == '2')
				do_resolved(c, &p);
			else if (cmd == '3')
				do_spill(c, &p);
			else
				do_split(c, &p);
			if (np_say(&c->np, (char)cmd, &p, sizeof(p)))
				return 22;
			break;
		case 'B': {
			int r[B_N] = {0};
			do_bad(c, r);
			if (np_say(&c->np, 'B', r, sizeof(r)))
				return 23;
			break;
		}
		case 'M': {
			int r[M_N] = {0};
			do_malformed(c, r);
			if (np_say(&c->np, 'M', r, sizeof(r)))
				return 24;
			break;
		}
		default: return 30;
		}
	}
}

/* ---- the parent ---------------------------------------------------------- */

static void stats_of(unsigned m, farm_kv_stats *s)
{
	np_send(&G, m, 'S');
	np_expect(&G, m, 'S', 10000);
	np_recv(&G, m, s, sizeof(*s), 1000);
}

/* Run phase @cmd on the asker; the owners' counters around it. */
static void phase(char cmd, struct phase *p, farm_kv_stats *served)
{
	farm_kv_stats b[NM], a[NM];
	for (unsigned m = 0; m < NM; m++)
		if (m != ASKER)
			stats_of(m, &b[m]);
	np_send(&G, ASKER, cmd);
	np_expect(&G, ASKER, cmd, 60000);
	np_recv(&G, ASKER, p, sizeof(*p), 1000);
	for (unsigned m = 0; m < NM; m++) {
		served[m] = (farm_kv_stats){0};
		if (m == ASKER)
			continue;
		stats_of(m, &a[m]);
		served[m].mget_served = a[m].mget_served - b[m].mget_served;
		served[m].mget_served_keys =
		        a[m].mget_served_keys - b[m].mget_served_keys;
		served[m].mget_bad = a[m].mget_bad - b[m].mget_bad;
	}
	printf("phase %c (%s lookups): %u keys (%u local), %u found (%u in "
	       "objects), %u absent; unresolved by the first read: %u on m0, "
	       "%u on m1 (%u batched with %u-byte values); asker: %" PRIu64
	       " first-read hits, %" PRIu64 " chased, %" PRIu64
	       " misses, %" PRIu64 " messages, %" PRIu64 " spills, %" PRIu64
	       " fallbacks; owners served %" PRIu64 "/%" PRIu64
	       " batches (%" PRIu64 "/%" PRIu64 " keys); %u mismatches, %u "
	       "wrong%s%s\n",
	       cmd, p->owner ? "owner" : "READ", p->n, p->local, p->found,
	       p->indirect, p->absent, p->unresolved[0], p->unresolved[1],
	       p->unresolved_big, BIGV, p->d.mget_first_hits, p->d.mget_chased,
	       p->d.mget_misses, p->d.mget_msgs, p->d.mget_spills,
	       p->d.mget_fallbacks, served[0].mget_served,
	       served[1].mget_served, served[0].mget_served_keys,
	       served[1].mget_served_keys, p->mismatch, p->wrong,
	       p->first[0] ? "; first: " : "", p->first);
	fflush(stdout);
	assert_int_equal(p->rc, 0);
	if (broken)
		return; /* test_mget judges the one phase run */
	assert_int_equal(p->mismatch, 0);
	assert_int_equal(p->wrong, 0);
	assert_string_equal(p->first, "");
	assert_int_equal(p->d.mget_calls, 1);
	assert_int_equal(p->d.mget_keys, p->n);
	assert_int_equal(p->d.mget_local, p->local);
	assert_int_equal(p->d.mget_fallbacks, 0);
	uint32_t unres = 0, remote = 0;
	for (unsigned m = 0; m < NM; m++) {
		unres += p->unresolved[m];
		remote += p->remote[m];
	}
	if (p->owner) { /* every remote key batched, no first read */
		assert_int_equal(p->d.mget_misses, remote);
		assert_int_equal(p->d.mget_first_hits, 0);
		assert_int_equal(p->d.mget_chased, 0);
	} else { /* resolved by its first read, or looked up whole */
		assert_int_equal(p->d.mget_misses, 0);
		assert_int_equal(p->d.mget_msgs, 0);
		assert_int_equal(p->d.mget_chased, unres);
		assert_int_equal(p->d.mget_first_hits, remote - unres);
	}
	for (unsigned m = 0; m < NM; m++)
		assert_int_equal(served[m].mget_served_keys,
		                 p->owner ? p->remote[m] : 0);
}

/* One message per machine with batched keys (the asker's and owners'
 * view). */
static void one_per_machine(const struct phase *p, const farm_kv_stats *sv)
{
	uint64_t machines = 0;
	for (unsigned m = 0; m < NM; m++) {
		bool any = p->owner && p->remote[m] > 0;
		machines += any;
		assert_int_equal(sv[m].mget_served, any);
	}
	assert_int_equal(p->d.mget_msgs, machines);
}

static void quit_all(void)
{
	for (unsigned i = 0; i < NM; i++)
		np_send(&G, i, 'Q');
	int st[NM];
	np_finish(&G, st);
	printf("kv_mget: machines exit %d / %d / %d\n", st[0], st[1], st[2]);
	for (unsigned i = 0; i < NM; i++)
		assert_int_equal(st[i], 0);
}

static void test_mget(void **state)
{
	(void)state;
	uint64_t t0 = np_now_ns();
	role_fn r = role;
	np_start(&G, "kvmg", child_entry, &r);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&G, i, 'R', 60000);
	np_send(&G, ASKER, 'F');
	np_expect(&G, ASKER, 'F', 60000);
	int rc;
	np_recv(&G, ASKER, &rc, sizeof(rc), 1000);
	assert_int_equal(rc, 0);

	struct phase p;
	farm_kv_stats sv[NM];

	/* 1. everything, READ lookups */
	phase('1', &p, sv);
	assert_int_equal(p.n, NKEYS);
	if (broken) { /* the chained keys answered absent: caught */
		assert_true(p.unresolved[0] + p.unresolved[1] > 0);
		assert_true(p.mismatch > 0 && p.wrong > 0);
		printf("--broken-chase: %u keys answered wrong, caught\n",
		       p.wrong);
		quit_all();
		return;
	}
	assert_int_equal(p.found, NKEYS - NKEYS / 5);
	assert_int_equal(p.absent, NKEYS / 5);
	assert_true(p.indirect > 0);
	assert_true(p.local > 0);
	/* chains exist on both other machines: the case is not empty */
	assert_true(p.unresolved[0] > 0 && p.unresolved[1] > 0);
	assert_int_equal(p.unresolved[ASKER], 0);
	assert_true(p.d.mget_chased > 0);
	assert_int_equal(p.d.mget_spills, 0);
	one_per_machine(&p, sv);

	/* 2. only keys the first read resolves: nothing chased */
	phase('2', &p, sv);
	assert_true(p.n > p.local);
	assert_int_equal(p.unresolved[0] + p.unresolved[1], 0);
	assert_int_equal(p.d.mget_chased, 0);
	one_per_machine(&p, sv);

	/* 6. everything, owner lookups: one batch per other machine */
	phase('6', &p, sv);
	assert_int_equal(p.n, NKEYS);
	assert_int_equal(p.found, NKEYS - NKEYS / 5);
	assert_int_equal(p.d.mget_spills, 0);
	one_per_machine(&p, sv);
	assert_int_equal(p.d.mget_msgs, 2);

	/* 3. a reply that cannot hold every value */
	phase('3', &p, sv);
	assert_true(p.unresolved_big >= 6); /* 6 x 6000 B > one message */
	assert_true(p.d.mget_spills > 0);
	one_per_machine(&p, sv);

	/* 4. a request that cannot hold every key */
	phase('4', &p, sv);
	assert_int_equal(p.n, NSPLIT);
	assert_int_equal(p.unresolved[0], NSPLIT);
	assert_int_equal(p.absent, NSPLIT);
	assert_true(p.expect_msgs > 1);
	assert_int_equal(p.d.mget_msgs, p.expect_msgs);
	assert_int_equal(sv[0].mget_served, p.expect_msgs);

	/* 5. 720 keys (each three times), READ lookups: more than a loop's
	 * 256 lookups in flight, the chased keys among them */
	phase('5', &p, sv);
	assert_int_equal(p.n, 3 * NKEYS);
	assert_int_equal(p.found, 3 * (NKEYS - NKEYS / 5));
	assert_true(p.unresolved[0] > 0 && p.unresolved[1] > 0);
	one_per_machine(&p, sv);

	/* 6. bad input */
	int b[B_N];
	np_send(&G, ASKER, 'B');
	np_expect(&G, ASKER, 'B', 60000);
	np_recv(&G, ASKER, b, sizeof(b), 1000);
	for (int i = 0; i < B_N; i++)
		printf("bad input %d: %d (%s)\n", i, b[i],
		       b[i] < 0 ? farm_strerror(b[i]) : "-");
	assert_int_equal(b[B_N0], -EINVAL);
	assert_int_equal(b[B_KEYS_NULL], -EINVAL);
	assert_int_equal(b[B_CONT_NULL], -EINVAL);
	assert_int_equal(b[B_TOO_MANY], -E2BIG);
	assert_int_equal(b[B_MGET_EMPTY_KEY], -EINVAL);
	assert_int_equal(b[B_MGET_NULL_KEY], -EINVAL);
	assert_int_equal(b[B_MGET_BIG_KEY], -EMSGSIZE);
	assert_int_equal(b[B_MGET_GOOD], 0);
	assert_int_equal(b[B_GET_EMPTY], -EINVAL);
	assert_int_equal(b[B_GET_BIG_KEY], -EMSGSIZE);
	assert_int_equal(b[B_PUT_BIG_KEY], -EMSGSIZE);
	assert_int_equal(b[B_PUT_BIG_VAL], -EMSGSIZE);
	assert_int_equal(b[B_PUT_OVER_LIMIT], -EMSGSIZE);
	assert_int_equal(b[B_PUT_EMPTY_VAL], -EINVAL);
	assert_int_equal(b[B_DEL_BIG_KEY], -EMSGSIZE);
	assert_int_equal(b[B_NAME_EMPTY], -EINVAL);
	assert_int_equal(b[B_NAME_LONG], -EMSGSIZE);
	assert_int_equal(b[B_GET_SMALL_CAP], -EMSGSIZE);
	assert_int_equal(b[B_GET_SMALL_LEN], 100);
	assert_true(b[B_LIMIT] > 1000 && b[B_LIMIT] <= (int)FARM_KV_MAX_VALUE);

	/* 7. malformed requests to machine 0 */
	farm_kv_stats s0b, s0a;
	stats_of(0, &s0b);
	int mr[M_N];
	np_send(&G, ASKER, 'M');
	np_expect(&G, ASKER, 'M', 60000);
	np_recv(&G, ASKER, mr, sizeof(mr), 1000);
	stats_of(0, &s0a);
	for (int i = 0; i < M_N; i++)
		printf("malformed request %d: %d (%s)\n", i, mr[i],
		       mr[i] < 0 ? farm_strerror(mr[i]) : "-");
	printf("machine 0 counted %" PRIu64 " bad requests, served %" PRIu64
	       "\n",
	       s0a.mget_bad - s0b.mget_bad, s0a.mget_served - s0b.mget_served);
	for (int i = 0; i < M_NBAD; i++)
		assert_int_equal(mr[i], i == M_TOO_MANY ? -E2BIG : -EINVAL);
	assert_int_equal(mr[M_GOOD], 0);
	/* M_NBAD error replies and the one-way message */
	assert_int_equal(s0a.mget_bad - s0b.mget_bad, M_NBAD + 1);
	assert_int_equal(s0a.mget_served - s0b.mget_served, 1);

	quit_all();
	printf("kv_mget: %.1f s in all\n", (double)(np_now_ns() - t0) / 1e9);
}

int main(int argc, char **argv)
{
	int st = tu_broken_named(argc, argv, "--broken-chase",
	                         FARM_FP_KV_MGET_NO_CHASE, &broken);
	if (st)
		return st;
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_teardown(test_mget, cl_cleanup),
	};
	return cmocka_run_group_tests_name("kv_mget", t, NULL, NULL);
}
