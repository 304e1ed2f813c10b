/*
 * The KV store's owner-served lookups (src/kv/README.md, "Owner-served
 * lookups") across machine processes: three forked machines (nodeproc.h),
 * machine 2 asks, machines 0 and 1 own the other shards and answer.
 *
 *   agree     machine 2 puts 120 keys (1 in 4 left absent; values of 8,
 *             100 and 2000 bytes: inline and in objects of their own),
 *             then gets every key on the owner path and on the READ path
 *             and multi-gets them all on the owner path: each answer
 *             equals what was put; the owner path sent one RPC per get of
 *             another machine's key and the owners served them
 *   malformed raw FARM_MSGT_KV_OGET requests to machine 0 (empty, short,
 *             klen 0, klen above the limit, truncated key, trailing byte,
 *             flags set, pad set): -EINVAL each, counted as bad; a key of
 *             machine 1's shard: -EAGAIN (not its primary); a stale
 *             configuration id: -ESTALE; both counted as refused; a
 *             one-way request: dropped and counted. Machine 0 then answers
 *             a good request byte for byte, and every key still reads
 *             as it was put (nothing touched)
 *   detached  machine 0 detaches its loop from the store (farm_kv_detach):
 *             a good request for a key of its shard, which still reaches
 *             that loop (the region's), is answered FARM_KV_MGET_SPILL
 *             with no value (its lookup cannot start there: the asker
 *             reads the key itself), never a value or an error; every
 *             key on the owner path still reads as it was put, machine 0's
 *             by the asker's own READs; attached again, machine 0 answers
 *             the good request byte for byte
 *   in flight machine 0 detaches while a lookup it started for the asker
 *             is in flight (a test-only switch detaches it right after the
 *             start): that lookup ends cancelled, and is answered
 *             FARM_KV_MGET_SPILL, never the cancellation, once for a
 *             single get and once inside a multi-get batch, whose keys
 *             all read as put. --broken-cancel answers the cancellation
 *             instead: the get and the multi-get must fail
 */
#include "brokenarg.h"
#include "kvproc.h"

#include <inttypes.h>

#include "kv/kv.h"

#define NM      NP_NM
#define ASKER   2u
#define RSIZE   "32M"
#define JOIN_MS 30000
#define NKEYS   120u
#define CAP     4096u

static struct np_cluster G;

struct ch {
	struct np_child np;
	farm_kv *kv;
};

static uint32_t mkkey(unsigned i, uint8_t *k)
{
	memset(k, 0, 12);
	snprintf((char *)k, 12, "o-%05u", i);
	return 12;
}

static uint32_t vlen_of(unsigned i)
{
	static const uint32_t lens[] = {8, 100, 2000};
	return lens[i % 3];
}

static void mkval(unsigned i, uint8_t *v)
{
	for (uint32_t j = 0; j < vlen_of(i); j++)
		v[j] = (uint8_t)(i * 131u + j * 7u + 1u);
}

static bool present(unsigned i)
{
	return i % 4 != 3;
}

static unsigned machine_of(const void *key, uint32_t klen)
{
	return farm_ht_shard_index(farm_ht_hash(key, klen), NM);
}

/* Every key read with @mode equals what was put: the keys that do not. */
static unsigned check_all(struct ch *c, enum farm_kv_lookup mode)
{
	if (farm_kv_set_lookup(c->kv, mode))
		return NKEYS;
	unsigned bad = 0;
	for (unsigned i = 0; i < NKEYS; i++) {
		uint8_t k[16], want[CAP], got[CAP];
		uint32_t kl = mkkey(i, k), len = 0;
		mkval(i, want);
		int rc = farm_kv_get_sync(c->kv, c->np.loop, k, kl, got, CAP,
		                          &len);
		if (present(i) ? rc != 0 || len != vlen_of(i) ||
		                         memcmp(got, want, len) != 0
		               : rc != -ENOENT) {
			fprintf(stderr, "key %u (%s): %d (%s), %u bytes\n", i,
			        mode == FARM_KV_LOOKUP_OWNER ? "owner" : "read",
			        rc, farm_strerror(rc), len);
			bad++;
		}
	}
	return bad;
}

static unsigned check_mget(struct ch *c)
{
	static uint8_t keys[NKEYS][16], vals[NKEYS * CAP];
	const void *kp[NKEYS];
	uint32_t kls[NKEYS], lens[NKEYS];
	int st[NKEYS];
	for (unsigned i = 0; i < NKEYS; i++) {
		kls[i] = mkkey(i, keys[i]);
		kp[i] = keys[i];
	}
	if (farm_kv_set_lookup(c->kv, FARM_KV_LOOKUP_OWNER) ||
	    farm_kv_mget_sync(c->kv, c->np.loop, NKEYS, kp, kls, vals, CAP,
	                      lens, st))
		return NKEYS;
	unsigned bad = 0;
	for (unsigned i = 0; i < NKEYS; i++) {
		uint8_t want[CAP];
		mkval(i, want);
		if (present(i) ? st[i] != 0 || lens[i] != vlen_of(i) ||
		                         memcmp(vals + (size_t)i * CAP, want,
		                                lens[i]) != 0
		               : st[i] != -ENOENT)
			bad++;
	}
	return bad;
}

/* What the agree phase reports: [0] put errors, [1] owner-path mismatches,
 * [2] READ-path mismatches, [3] multi-get mismatches, [4] gets of other
 * machines' keys, [5] owner gets sent for them. */
static void do_agree(struct ch *c, int *r)
{
	for (unsigned i = 0; i < NKEYS; i++) {
		uint8_t k[16], v[CAP];
		uint32_t kl = mkkey(i, k);
		mkval(i, v);
		if (present(i) &&
		    farm_kv_put_sync(c->kv, c->np.loop, k, kl, v, vlen_of(i)))
			r[0]++;
		if (machine_of(k, kl) != c->np.me)
			r[4]++;
	}
	struct farm_kv_owner_stats a, b;
	farm_kv_owner_stats_get(c->kv, &a);
	r[1] = (int)check_all(c, FARM_KV_LOOKUP_OWNER);
	farm_kv_owner_stats_get(c->kv, &b);
	r[5] = (int)(b.sent - a.sent);
	r[2] = (int)check_all(c, FARM_KV_LOOKUP_READ);
	r[3] = (int)check_mget(c);
}

/* ---- malformed requests -------------------------------------------------- */

enum {
	M_EMPTY,
	M_SHORT,
	M_KLEN0,
	M_KLEN_BIG,
	M_TRUNC_KEY,
	M_TRAILING,
	M_FLAGS,
	M_PAD,
	M_NBAD, /* -EINVAL above */
	M_FOREIGN = M_NBAD,
	M_STALE,
	M_GOOD,
	M_AFTER, /* keys that no longer read as put */
	M_N
};

struct call_w {
	volatile int done;
	int status;
	uint8_t reply[64];
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
	int rc = farm_msg_call(c->np.loop, 0, 0, FARM_MSGT_KV_OGET, req, len,
	                       5000000000ull, call_cb, w);
	if (!rc)
		rc = farm_loop_wait(c->np.loop, &w->done, 10000000000ull);
	return rc ? rc : w->status;
}

static uint32_t mkreq(uint8_t *b, const struct farm_kv_oget_req *q,
                      const uint8_t *key, uint32_t klen)
{
	memcpy(b, q, sizeof(*q));
	memcpy(b + sizeof(*q), key, klen);
	return (uint32_t)sizeof(*q) + klen;
}

static void do_malformed(struct ch *c, int *r)
{
	static uint8_t b[1024];
	uint8_t k0[16] = {0}, kf[16] = {0};
	uint32_t l0 = 0, lf = 0;
	int i0 = -1;
	for (unsigned i = 0; i < NKEYS && (!l0 || !lf); i++) {
		uint8_t k[16];
		uint32_t kl = mkkey(i, k);
		unsigned m = machine_of(k, kl);
		if (m == 0 && !l0 && present(i) && vlen_of(i) == 8) {
			memcpy(k0, k, kl);
			l0 = kl;
			i0 = (int)i;
		} else if (m == 1 && !lf) {
			memcpy(kf, k, kl);
			lf = kl;
		}
	}
	uint64_t cfg = farm_as_config_id(farm_node_as(c->np.node));
	struct farm_kv_oget_req good = {.klen = (uint16_t)l0, .config = cfg};
	struct farm_kv_oget_req q;
	struct call_w w;
	uint32_t n;
	r[M_EMPTY] = call0(c, NULL, 0, &w);
	n = mkreq(b, &good, k0, l0);
	r[M_SHORT] = call0(c, b, 8, &w);
	q = good;
	q.klen = 0;
	n = mkreq(b, &q, k0, 0);
	r[M_KLEN0] = call0(c, b, n, &w);
	q.klen = FARM_KV_MAX_KEY + 1;
	memcpy(b, &q, sizeof(q));
	memset(b + sizeof(q), 'q', q.klen);
	r[M_KLEN_BIG] = call0(c, b, (uint32_t)sizeof(q) + q.klen, &w);
	n = mkreq(b, &good, k0, l0);
	r[M_TRUNC_KEY] = call0(c, b, n - 1, &w);
	b[n] = 0;
	r[M_TRAILING] = call0(c, b, n + 1, &w);
	q = good;
	q.flags = 1;
	n = mkreq(b, &q, k0, l0);
	r[M_FLAGS] = call0(c, b, n, &w);
	q = good;
	q.pad = 1;
	n = mkreq(b, &q, k0, l0);
	r[M_PAD] = call0(c, b, n, &w);
	q = good;
	q.klen = (uint16_t)lf;
	n = mkreq(b, &q, kf, lf);
	r[M_FOREIGN] = call0(c, b, n, &w);
	q = good;
	q.config = cfg + 1;
	n = mkreq(b, &q, k0, l0);
	r[M_STALE] = call0(c, b, n, &w);
	n = mkreq(b, &good, k0, l0);
	if (farm_msg_send(c->np.loop, 0, 0, FARM_MSGT_KV_OGET, b, n))
		r[M_GOOD] = -100;
	int rc = call0(c, b, n, &w);
	r[M_GOOD] = rc;
	if (!rc && i0 >= 0) {
		int32_t st;
		uint32_t vl;
		uint8_t want[8];
		mkval((unsigned)i0, want);
		memcpy(&st, w.reply, 4);
		memcpy(&vl, w.reply + 4, 4);
		if (st != 0 || vl != 8 || w.len != 16 ||
		    memcmp(w.reply + 8, want, 8) != 0)
			r[M_GOOD] = 1;
	}
	if (i0 < 0 || !lf)
		r[M_GOOD] = -101;
	r[M_AFTER] = (int)(check_all(c, FARM_KV_LOOKUP_READ) +
	                   check_all(c, FARM_KV_LOOKUP_OWNER));
}

/* ---- a detached owner ------------------------------------------------------ */

enum {
	D_RAW,    /* a good request to machine 0: 0 SPILL, 1 another answer */
	D_OWNER,  /* owner-path gets and multi-gets not as put */
	D_SENT,   /* of them sent to an owner */
	D_OTHERS, /* gets of other machines' keys */
	D_N
};

/* A key of machine 0's shard with an 8-byte value put (-1: none). */
static int key_of_0(uint8_t *k, uint32_t *kl)
{
	for (unsigned i = 0; i < NKEYS; i++) {
		*kl = mkkey(i, k);
		if (machine_of(k, *kl) == 0 && present(i) && vlen_of(i) == 8)
			return (int)i;
	}
	return -1;
}

/* A good request for key @i (@k, @kl) to machine 0: 0 when answered
 * FARM_KV_MGET_SPILL with no value (@spill) or with the value put (not
 * @spill); 1 for another answer; else the call's error. */
static int raw_get0(struct ch *c, int i, const uint8_t *k, uint32_t kl,
                    bool spill)
{
	static uint8_t b[256];
	struct farm_kv_oget_req q = {
	        .klen = (uint16_t)kl,
	        .config = farm_as_config_id(farm_node_as(c->np.node))};
	struct call_w w;
	int rc = call0(c, b, mkreq(b, &q, k, kl), &w);
	if (rc)
		return rc;
	int32_t st;
	uint32_t vl;
	uint8_t want[8];
	mkval((unsigned)i, want);
	memcpy(&st, w.reply, 4);
	memcpy(&vl, w.reply + 4, 4);
	if (spill)
		return st == FARM_KV_MGET_SPILL && vl == 0 && w.len == 8 ? 0
		                                                         : 1;
	return st == 0 && vl == 8 && w.len == 16 &&
	                       memcmp(w.reply + 8, want, 8) == 0
	               ? 0
	               : 1;
}

/* The asker, machine 0's loop detached ('D'). */
static void do_detached(struct ch *c, int *r)
{
	uint8_t k[16];
	uint32_t kl;
	int i = key_of_0(k, &kl);
	r[D_RAW] = i < 0 ? -101 : raw_get0(c, i, k, kl, true);
	for (unsigned j = 0; j < NKEYS; j++) {
		uint8_t kj[16];
		uint32_t klj = mkkey(j, kj);
		if (machine_of(kj, klj) != c->np.me)
			r[D_OTHERS]++;
	}
	struct farm_kv_owner_stats a, b;
	farm_kv_owner_stats_get(c->kv, &a);
	r[D_OWNER] = (int)check_all(c, FARM_KV_LOOKUP_OWNER);
	farm_kv_owner_stats_get(c->kv, &b);
	r[D_SENT] = (int)(b.sent - a.sent);
	r[D_OWNER] += (int)check_mget(c); /* its batches: the same answer */
}

/* The asker, machine 0 attached again ('E'): its good request answered
 * with the value (0), and every key as put on the owner path. */
static void do_reattached(struct ch *c, int *r)
{
	uint8_t k[16];
	uint32_t kl;
	int i = key_of_0(k, &kl);
	r[0] = i < 0 ? -101 : raw_get0(c, i, k, kl, false);
	r[1] = (int)check_all(c, FARM_KV_LOOKUP_OWNER);
}

/* The asker while machine 0 detaches mid-lookup: 'H' a good request (0:
 * answered SPILL), 'K' every key by multi-get (mismatches). */
static int do_in_flight(struct ch *c, int cmd)
{
	if (cmd == 'K')
		return (int)check_mget(c);
	uint8_t k[16];
	uint32_t kl;
	int i = key_of_0(k, &kl);
	return i < 0 ? -101 : raw_get0(c, i, k, kl, true);
}

/* The owner: 'C' arms the detach after the next lookup's start; 'T'
 * disarms it and attaches the loop again. */
static int owner_cmd(struct ch *c, int cmd)
{
	if (cmd == 'C')
		return farm_fault_set(FARM_FP_KV_DETACH_MID_LOOKUP,
		                      tu_switch_on, NULL);
	int rc = farm_fault_set(FARM_FP_KV_DETACH_MID_LOOKUP, NULL, NULL);
	return rc ? rc : farm_kv_attach(c->kv, c->np.loop);
}

/* ---- the machines -------------------------------------------------------- */

static int role(void *arg)
{
	struct ch *c = arg;
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		switch (cmd) {
		case 'Q': return 0;
		case 'S': {
			struct farm_kv_owner_stats s;
			farm_kv_owner_stats_get(c->kv, &s);
			if (np_say(&c->np, 'S', &s, sizeof(s)))
				return 20;
			break;
		}
		case 'A': {
			int r[6] = {0};
			do_agree(c, r);
			if (np_say(&c->np, 'A', r, sizeof(r)))
				return 21;
			break;
		}
		case 'M': {
			int r[M_N] = {0};
			do_malformed(c, r);
			if (np_say(&c->np, 'M', r, sizeof(r)))
				return 22;
			break;
		}
		case 'D': { /* the owner: its loop leaves the store */
			farm_kv_detach(c->kv, c->np.loop);
			if (np_say(&c->np, 'D', NULL, 0))
				return 23;
			break;
		}
		case 'C':
		case 'T': { /* the owner: armed; attached again */
			int rc = owner_cmd(c, cmd);
			if (np_say(&c->np, (char)cmd, &rc, sizeof(rc)))
				return 24;
			break;
		}
		case 'H':
		case 'K': {
			int r = do_in_flight(c, cmd);
			if (np_say(&c->np, (char)cmd, &r, sizeof(r)))
				return 27;
			break;
		}
		case 'G': {
			int r[D_N] = {0};
			do_detached(c, r);
			if (np_say(&c->np, 'G', r, sizeof(r)))
				return 25;
			break;
		}
		case 'E': {
			int r[2] = {0};
			do_reattached(c, r);
			if (np_say(&c->np, 'E', r, sizeof(r)))
				return 26;
			break;
		}
		default: return 30;
		}
	}
}

static int child_entry(struct np_child *np, void *arg)
{
	(void)arg;
	struct ch *c = calloc(1, sizeof(*c));
	if (!c)
		return 3;
	c->np = *np;
	struct farm_kv_attr a = {.val_inline = 32};
	int st = kvp_run(&c->np, RSIZE, &a, 64, JOIN_MS, &c->kv, role, c);
	free(c);
	return st;
}

/* ---- the parent ---------------------------------------------------------- */

static void stats_of(unsigned m, struct farm_kv_owner_stats *s)
{
	np_send(&G, m, 'S');
	np_expect(&G, m, 'S', 10000);
	np_recv(&G, m, s, sizeof(*s), 1000);
}

/* Parent: command @cmd to machine @m, its one int answer. */
static int ask(unsigned m, char cmd)
{
	int r = -1;
	np_send(&G, m, cmd);
	np_expect(&G, m, cmd, 60000);
	np_recv(&G, m, &r, sizeof(r), 1000);
	return r;
}

/* --broken-cancel: the in-flight checks must fail (in_flight_phase). */
static bool opt_broken;

/* Machine 0 detaches with a lookup of its own in flight, once for a get
 * and once for a multi-get batch: the cancelled lookup is answered
 * "read it yourself", and the asker reads every key as put. */
static void in_flight_phase(void)
{
	int armed = ask(0, 'C');
	int get = ask(ASKER, 'H');
	int back = ask(0, 'T');
	int armed2 = ask(0, 'C');
	int mget = ask(ASKER, 'K');
	int back2 = ask(0, 'T');
	printf("in flight: armed %d/%d; a get cancelled in flight answered "
	       "%s (%d); a multi-get batch with one: %d mismatches; "
	       "attached again %d/%d\n",
	       armed, armed2, get == 0 ? "SPILL" : "otherwise", get, mget, back,
	       back2);
	assert_int_equal(armed, 0);
	assert_int_equal(armed2, 0);
	assert_int_equal(back, 0);
	assert_int_equal(back2, 0);
	if (opt_broken) {
		if (get == 0 && mget == 0)
			fail_msg("--broken-cancel: the cancelled lookups were "
			         "answered as if nothing was wrong: the checks "
			         "cannot tell");
		printf("--broken-cancel: the checks caught it, as they must\n");
		return;
	}
	assert_int_equal(get, 0);
	assert_int_equal(mget, 0);
}

static void test_owner(void **state)
{
	(void)state;
	uint64_t t0 = np_now_ns();
	np_start(&G, "kvow", child_entry, NULL);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&G, i, 'R', 60000);

	struct farm_kv_owner_stats s0b, s0a, s1b, s1a;
	stats_of(0, &s0b);
	stats_of(1, &s1b);
	int a[6];
	np_send(&G, ASKER, 'A');
	np_expect(&G, ASKER, 'A', 60000);
	np_recv(&G, ASKER, a, sizeof(a), 1000);
	stats_of(0, &s0a);
	stats_of(1, &s1a);
	printf("agree: %d put errors; mismatches: owner %d, read %d, "
	       "mget %d; %d gets of other machines' keys, %d sent to an "
	       "owner; owners served %" PRIu64 " + %" PRIu64 "\n",
	       a[0], a[1], a[2], a[3], a[4], a[5], s0a.served - s0b.served,
	       s1a.served - s1b.served);
	assert_int_equal(a[0], 0);
	assert_int_equal(a[1], 0);
	assert_int_equal(a[2], 0);
	assert_int_equal(a[3], 0);
	assert_true(a[4] > 0);
	assert_int_equal(a[5], a[4]);
	assert_int_equal((s0a.served - s0b.served) + (s1a.served - s1b.served),
	                 (uint64_t)a[4]);

	int mr[M_N];
	np_send(&G, ASKER, 'M');
	np_expect(&G, ASKER, 'M', 60000);
	np_recv(&G, ASKER, mr, sizeof(mr), 1000);
	struct farm_kv_owner_stats s0c;
	stats_of(0, &s0c);
	for (int i = 0; i < M_N; i++)
		printf("malformed request %d: %d (%s)\n", i, mr[i],
		       mr[i] < 0 ? farm_strerror(mr[i]) : "-");
	printf("machine 0 counted %" PRIu64 " bad, %" PRIu64 " refused\n",
	       s0c.bad - s0a.bad, s0c.refused - s0a.refused);
	for (int i = 0; i < M_NBAD; i++)
		assert_int_equal(mr[i], -EINVAL);
	assert_int_equal(mr[M_FOREIGN], -EAGAIN);
	assert_int_equal(mr[M_STALE], -ESTALE);
	assert_int_equal(mr[M_GOOD], 0);
	assert_int_equal(mr[M_AFTER], 0);
	assert_int_equal(s0c.bad - s0a.bad, M_NBAD + 1); /* + the one-way */
	assert_int_equal(s0c.refused - s0a.refused, 2);

	/* Machine 0's loop detached: a lookup reaching it cannot start
	 * there (the store's state for that loop is gone), and the asker
	 * is told to read the key itself. */
	np_send(&G, 0, 'D');
	np_expect(&G, 0, 'D', 10000);
	int d[D_N];
	np_send(&G, ASKER, 'G');
	np_expect(&G, ASKER, 'G', 60000);
	np_recv(&G, ASKER, d, sizeof(d), 1000);
	np_send(&G, 0, 'T');
	np_expect(&G, 0, 'T', 10000);
	int arc;
	np_recv(&G, 0, &arc, sizeof(arc), 1000);
	int e[2];
	np_send(&G, ASKER, 'E');
	np_expect(&G, ASKER, 'E', 60000);
	np_recv(&G, ASKER, e, sizeof(e), 1000);
	printf("detached: a good request to machine 0 answered %s (%d); "
	       "owner-path mismatches %d, %d of %d gets sent to an owner; "
	       "attached again (%d): the request answered %s (%d), "
	       "mismatches %d\n",
	       d[D_RAW] == 0 ? "SPILL" : "otherwise", d[D_RAW], d[D_OWNER],
	       d[D_SENT], d[D_OTHERS], arc,
	       e[0] == 0 ? "its value" : "otherwise", e[0], e[1]);
	assert_int_equal(d[D_RAW], 0);
	assert_int_equal(d[D_OWNER], 0);
	assert_int_equal(d[D_SENT], d[D_OTHERS]);
	assert_int_equal(arc, 0);
	assert_int_equal(e[0], 0);
	assert_int_equal(e[1], 0);

	in_flight_phase();

	for (unsigned i = 0; i < NM; i++)
		np_send(&G, i, 'Q');
	int st[NM];
	np_finish(&G, st);
	printf("kv_owner: machines exit %d / %d / %d; %.1f s in all\n", st[0],
	       st[1], st[2], (double)(np_now_ns() - t0) / 1e9);
	for (unsigned i = 0; i < NM; i++)
		assert_int_equal(st[i], 0);
}

static int cl_cleanup(void **state)
{
	(void)state;
	np_cleanup(&G);
	return 0;
}

int main(int argc, char **argv)
{
	int rc = tu_broken_named(argc, argv, "--broken-cancel",
	                         FARM_FP_KV_CANCEL_UNMAPPED, &opt_broken);
	if (rc)
		return rc;
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_teardown(test_owner, cl_cleanup),
	};
	return cmocka_run_group_tests_name("kv_owner", t, NULL, NULL);
}
