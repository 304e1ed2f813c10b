/*
 * lincheck: linearizability checker for key-value histories. See
 * lincheck.h for the model.
 *
 * lc_check, step by step (N operations):
 *   1. sort the operations by (key, invocation, index): one group per key;
 *   2. per key: drop gets without response, number the rest 0..m-1 in
 *      invocation order, sort their call and return entries (time, calls
 *      before returns, op) and link them in a list;
 *   3. iterative DFS (Porcupine's checkSingle) with a memo of
 *      (linearized set as (M, U), state) in an open-addressing table;
 *      the deepest point reached is kept for the report;
 *   4. on failure, describe that point and diagnose the blocked operation.
 */
#include "lincheck.h"
#include "histbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NONE       UINT32_MAX
#define LC_MAX_OPS ((size_t)INT32_MAX / 2)

struct lc_rec {
	uint64_t key, value, t_inv, t_resp;
	uint32_t client;
	uint8_t kind, found, ended, mget;
};

struct lc_history {
	struct lc_rec *ops;
	size_t nops, cap;
	int err; /* sticky: first recording error */
};

/* ---- recording --------------------------------------------------------- */

lc_history *lc_new(void)
{
	return calloc(1, sizeof(lc_history));
}

void lc_free(lc_history *h)
{
	if (!h)
		return;
	free(h->ops);
	free(h);
}

static int fail(lc_history *h, int err)
{
	return h ? hb_fail(&h->err, err) : err;
}

static bool kind_ok(int kind)
{
	return kind >= LC_GET && kind <= LC_DEL_ANY;
}

int lc_begin(lc_history *h, uint32_t client, enum lc_kind kind, uint64_t key,
             uint64_t value_in, uint64_t t_inv)
{
	if (!h)
		return -EINVAL;
	if (!kind_ok((int)kind) || t_inv == LC_NO_RESPONSE)
		return fail(h, -EINVAL);
	if (h->nops >= LC_MAX_OPS ||
	    hb_grow((void **)&h->ops, &h->cap, h->nops + 1, sizeof(*h->ops)))
		return fail(h, -ENOMEM);
	h->ops[h->nops] = (struct lc_rec){
	        .key = key,
	        .value = kind == LC_PUT ? value_in : 0,
	        .t_inv = t_inv,
	        .t_resp = LC_NO_RESPONSE,
	        .client = client,
	        .kind = (uint8_t)kind,
	};
	return (int)h->nops++;
}

int lc_end(lc_history *h, int op, uint64_t value_out, bool found,
           uint64_t t_resp)
{
	if (!h)
		return -EINVAL;
	if (op < 0 || (size_t)op >= h->nops)
		return fail(h, -EINVAL);
	struct lc_rec *o = &h->ops[op];
	if (o->ended || t_resp < o->t_inv)
		return fail(h, -EINVAL);
	o->ended = 1;
	o->t_resp = t_resp;
	if (t_resp == LC_NO_RESPONSE)
		return 0;
	if (o->kind == LC_GET) {
		o->found = found;
		o->value = found ? value_out : 0;
	} else if (o->kind == LC_DEL) {
		o->found = found;
	}
	return 0;
}

int lc_op(lc_history *h, uint32_t client, enum lc_kind kind, uint64_t key,
          uint64_t value, bool found, uint64_t t_inv, uint64_t t_resp)
{
	if (h && !h->err && kind_ok((int)kind) && t_inv != LC_NO_RESPONSE &&
	    t_resp < t_inv)
		return fail(h, -EINVAL); /* check before recording anything */
	int i = lc_begin(h, client, kind, key, value, t_inv);
	if (i < 0)
		return i;
	int rc = lc_end(h, i, value, found, t_resp);
	return rc ? rc : i;
}

int lc_mget(lc_history *h, uint32_t client, size_t n, const uint64_t *keys,
            const uint64_t *values, const bool *found, uint64_t t_inv,
            uint64_t t_resp)
{
	if (!h)
		return -EINVAL;
	if (!n || !keys || (t_resp != LC_NO_RESPONSE && (!values || !found)) ||
	    t_inv == LC_NO_RESPONSE || t_resp < t_inv)
		return fail(h, -EINVAL);
	int first = -1;
	for (size_t i = 0; i < n; i++) {
		bool f = t_resp != LC_NO_RESPONSE && found[i];
		uint64_t v = f ? values[i] : 0;
		int rc = lc_op(h, client, LC_GET, keys[i], v, f, t_inv, t_resp);
		if (rc < 0)
			return rc;
		h->ops[rc].mget = 1;
		if (first < 0)
			first = rc;
	}
	return first;
}

size_t lc_nops(const lc_history *h)
{
	return h ? h->nops : 0;
}

int lc_merge(lc_history *dst, const lc_history *src)
{
	if (!dst || !src || dst == src)
		return fail(dst, -EINVAL);
	if (src->err)
		return fail(dst, src->err);
	if (dst->nops + src->nops > LC_MAX_OPS ||
	    hb_grow((void **)&dst->ops, &dst->cap, dst->nops + src->nops,
	            sizeof(*dst->ops)))
		return fail(dst, -ENOMEM);
	if (src->nops)
		memcpy(dst->ops + dst->nops, src->ops,
		       src->nops * sizeof(*src->ops));
	int base = (int)dst->nops;
	dst->nops += src->nops;
	return base;
}

/* ---- checking: state --------------------------------------------------- */

struct state {
	uint64_t v;
	uint8_t present;
};

/* One op of the key being checked, numbered in invocation order. */
struct kop {
	uint64_t value, t_inv, t_resp; /* t_resp NO_RESPONSE: optional */
	uint32_t gidx;                 /* index in the history */
	uint8_t kind, found;
	uint8_t unread; /* a put without response whose value no get returns */
};

struct ent {
	uint64_t t;
	uint32_t op;
	uint32_t ret; /* 1: return entry */
};

struct frame {
	struct state st; /* state before */
	uint32_t op, M, writer;
	uint32_t forced; /* op changed nothing: no alternative to try */
	uint32_t pass;   /* the pass that linearized op (see search) */
};

struct memo {
	uint64_t hash, v;
	uint32_t M, uoff, ulen;
	uint8_t present;
};

#define TAIL  3
#define TRIED 6

struct best {
	int64_t depth;
	uint32_t blocked; /* op whose return was reached unlinearized */
	struct state st;
	uint32_t writer; /* op that set st, NONE: initial */
	uint32_t tail[TAIL], ntail;
	uint32_t tried[TRIED], ntried, ntried_all;
};

struct ctx {
	const lc_history *h;
	lc_report *r;
	uint64_t deadline; /* ns, 0: none */
	/* per key, reused */
	struct kop *ops;
	size_t capops;
	struct ent *ents;
	size_t capents;
	uint32_t *next, *prev, *maps, *call_of, *ret_of;
	size_t capnext, capprev, capmaps;
	struct frame *frames;
	size_t capframes;
	struct memo *memo;
	size_t nmemo, capmemo;
	uint32_t *uarena;
	size_t nuarena, capuarena;
	uint32_t *table;
	size_t tabsize, captable;
	uint32_t *ubuf;
	size_t capubuf;
	uint64_t *vals; /* values gets returned (sorted) */
	size_t capvals;
	struct best best;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool step(const struct kop *o, struct state st, struct state *ns)
{
	*ns = st;
	switch (o->kind) {
	case LC_GET:
		return o->found ? (st.present && st.v == o->value)
		                : !st.present;
	case LC_PUT:
		ns->v = o->value;
		ns->present = 1;
		return true;
	case LC_DEL:
		ns->v = 0;
		ns->present = 0;
		return o->found == st.present;
	default: /* LC_DEL_ANY */
		ns->v = 0;
		ns->present = 0;
		return true;
	}
}

static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static uint64_t memo_hash(uint32_t M, const uint32_t *u, uint32_t nu,
                          struct state st)
{
	uint64_t x = mix(M + 0x9e3779b97f4a7c15ull);
	for (uint32_t i = 0; i < nu; i++)
		x = mix(x ^ u[i]);
	return mix(x ^ mix(st.v ^ ((uint64_t)st.present << 63)) ^ st.present);
}

static int table_reset(struct ctx *c, size_t m)
{
	size_t n = 64;
	while (n < 4 * m)
		n *= 2;
	if (hb_grow((void **)&c->table, &c->captable, n, sizeof(uint32_t)))
		return -ENOMEM;
	c->tabsize = n;
	memset(c->table, 0xff, n * sizeof(uint32_t));
	c->nmemo = 0;
	c->nuarena = 0;
	return 0;
}

static int table_grow(struct ctx *c)
{
	size_t n = c->tabsize * 2;
	if (hb_grow((void **)&c->table, &c->captable, n, sizeof(uint32_t)))
		return -ENOMEM;
	c->tabsize = n;
	memset(c->table, 0xff, n * sizeof(uint32_t));
	for (size_t i = 0; i < c->nmemo; i++) {
		size_t s = c->memo[i].hash & (n - 1);
		while (c->table[s] != NONE)
			s = (s + 1) & (n - 1);
		c->table[s] = (uint32_t)i;
	}
	return 0;
}

/* 1: inserted (new), 0: already there, <0: error. */
static int memo_insert(struct ctx *c, uint32_t M, const uint32_t *u,
                       uint32_t nu, struct state st)
{
	uint64_t hv = memo_hash(M, u, nu, st);
	size_t mask = c->tabsize - 1, s = hv & mask;
	for (; c->table[s] != NONE; s = (s + 1) & mask) {
		const struct memo *e = &c->memo[c->table[s]];
		if (e->hash == hv && e->M == M && e->v == st.v &&
		    e->present == st.present && e->ulen == nu &&
		    (!nu || !memcmp(c->uarena + e->uoff, u, nu * sizeof(*u))))
			return 0;
	}
	if (c->nmemo >= UINT32_MAX - 1 || c->nuarena + nu >= UINT32_MAX)
		return -ENOMEM;
	if (hb_grow((void **)&c->memo, &c->capmemo, c->nmemo + 1,
	            sizeof(*c->memo)) ||
	    hb_grow((void **)&c->uarena, &c->capuarena, c->nuarena + nu + 1,
	            sizeof(uint32_t)))
		return -ENOMEM;
	struct memo *e = &c->memo[c->nmemo];
	*e = (struct memo){.hash = hv,
	                   .v = st.v,
	                   .M = M,
	                   .uoff = (uint32_t)c->nuarena,
	                   .ulen = nu,
	                   .present = st.present};
	if (nu)
		memcpy(c->uarena + c->nuarena, u, nu * sizeof(*u));
	c->nuarena += nu;
	c->table[s] = (uint32_t)c->nmemo++;
	if (c->nmemo * 2 > c->tabsize)
		return table_grow(c) ? -ENOMEM : 1;
	return 1;
}

static int ent_cmp(const void *x, const void *y)
{
	const struct ent *a = x, *b = y;
	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	if (a->ret != b->ret)
		return a->ret ? 1 : -1; /* calls first: ties are concurrent */
	return a->op < b->op ? -1 : a->op > b->op;
}

static inline void unlink_ent(struct ctx *c, uint32_t x)
{
	c->next[c->prev[x]] = c->next[x];
	if (c->next[x] != NONE)
		c->prev[c->next[x]] = c->prev[x];
}

static inline void relink_ent(struct ctx *c, uint32_t x)
{
	c->next[c->prev[x]] = x;
	if (c->next[x] != NONE)
		c->prev[c->next[x]] = x;
}

static inline bool responded(const struct kop *o)
{
	return o->t_resp != LC_NO_RESPONSE;
}

static inline bool writes(const struct kop *o)
{
	return o->kind != LC_GET;
}

enum { KEY_OK = 0, KEY_BAD = 1, KEY_TIMEOUT = 2 };

static int u64_cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

/* Mark the puts without response whose value no get of c->ops[0..m)
 * returns. */
static int mark_unread(struct ctx *c, uint32_t m)
{
	size_t nv = 0;
	if (hb_grow((void **)&c->vals, &c->capvals, (size_t)m + 1,
	            sizeof(*c->vals)))
		return -ENOMEM;
	for (uint32_t i = 0; i < m; i++)
		if (c->ops[i].kind == LC_GET && c->ops[i].found)
			c->vals[nv++] = c->ops[i].value;
	qsort(c->vals, nv, sizeof(*c->vals), u64_cmp);
	for (uint32_t i = 0; i < m; i++) {
		struct kop *o = &c->ops[i];
		o->unread = o->kind == LC_PUT && !responded(o) &&
		            !bsearch(&o->value, c->vals, nv, sizeof(*c->vals),
		                     u64_cmp);
	}
	return 0;
}

/*
 * Need call entry @e, an op without response, not be tried at this point
 * (state @st)? Such an op need not take effect at all, and one whose
 * effect no later op can tell apart from no effect is left for later,
 * which loses nothing: a delete when the key is absent, a put of a value
 * no get returns when the key is present (every op that succeeds after it
 * succeeds without it). The others of each kind are alike (deletes when
 * the key is present; unread puts when it is absent: no op tells their
 * values apart), so only the first of them in the list is tried. Without
 * this, a run of k writes that failed with no response (retried again
 * and again while a machine was down) made the search try all 2^k subsets
 * of them at every point where it had to backtrack.
 */
static bool skip_unknown(const struct ctx *c, uint32_t head, uint32_t e,
                         struct state st)
{
	const struct kop *o = &c->ops[c->ents[e].op];
	bool del = o->kind == LC_DEL_ANY;
	if (!del && !o->unread)
		return false;
	if (del ? !st.present : st.present)
		return true;
	for (uint32_t x = c->next[head]; x != e; x = c->next[x]) {
		const struct kop *p = &c->ops[c->ents[x].op];
		if (c->ents[x].ret || responded(p))
			continue;
		if (del ? p->kind == LC_DEL_ANY : p->unread)
			return true;
	}
	return false;
}

/* Where the search stands: the state after the ops linearized so far
 * (depth of them, on c->frames), the highest op index among them plus 1
 * (M), the last writer, the responses still to linearize, the pass (0:
 * ops with a response, 1: without) and the entry @e it looks at next. */
struct pos {
	struct state st;
	uint32_t M, writer, depth, remaining, pass, e, head;
	uint64_t steps;
};

/* The entry list of c->ops[0..m): a call and (when it has one) a return
 * per op, in time order, linked after the head entry (*@head); the
 * responses counted (*@nresp). 0 or -ENOMEM. */
static int search_setup(struct ctx *c, uint32_t m, uint32_t *head,
                        uint32_t *nresp)
{
	struct kop *ops = c->ops;
	size_t ne = 0;
	*nresp = 0;
	if (hb_grow((void **)&c->ents, &c->capents, 2 * (size_t)m,
	            sizeof(*c->ents)) ||
	    hb_grow((void **)&c->next, &c->capnext, 2 * (size_t)m + 1,
	            sizeof(uint32_t)) ||
	    hb_grow((void **)&c->prev, &c->capprev, 2 * (size_t)m + 1,
	            sizeof(uint32_t)) ||
	    hb_grow((void **)&c->maps, &c->capmaps, 2 * (size_t)m + 1,
	            sizeof(uint32_t)))
		return -ENOMEM;
	c->call_of = c->maps;
	c->ret_of = c->maps + m;
	for (uint32_t i = 0; i < m; i++) {
		c->ents[ne++] = (struct ent){.t = ops[i].t_inv, .op = i};
		if (responded(&ops[i])) {
			c->ents[ne++] = (struct ent){
			        .t = ops[i].t_resp, .op = i, .ret = 1};
			(*nresp)++;
		}
	}
	qsort(c->ents, ne, sizeof(*c->ents), ent_cmp);
	*head = (uint32_t)ne;
	c->prev[*head] = NONE;
	c->next[*head] = ne ? 0 : NONE;
	for (uint32_t i = 0; i < ne; i++) {
		c->prev[i] = i ? i - 1 : *head;
		c->next[i] = i + 1 < ne ? i + 1 : NONE;
		if (c->ents[i].ret)
			c->ret_of[c->ents[i].op] = i;
		else
			c->call_of[c->ents[i].op] = i;
	}
	if (table_reset(c, m) || mark_unread(c, m) ||
	    hb_grow((void **)&c->frames, &c->capframes, (size_t)m + 1,
	            sizeof(*c->frames)))
		return -ENOMEM;
	memset(&c->best, 0, sizeof(c->best));
	c->best.depth = -1;
	return 0;
}

/* The unlinearized ops below @nM other than entry @e's into c->ubuf
 * (*@nu): all are calls before the first remaining return. */
static int unlinearized(struct ctx *c, const struct pos *p, uint32_t nM,
                        uint32_t *nu)
{
	*nu = 0;
	for (uint32_t x = c->next[p->head];
	     x != NONE && !c->ents[x].ret && c->ents[x].op < nM;
	     x = c->next[x]) {
		if (x == p->e)
			continue;
		if (hb_grow((void **)&c->ubuf, &c->capubuf, *nu + 1,
		            sizeof(uint32_t)))
			return -ENOMEM;
		c->ubuf[(*nu)++] = c->ents[x].op;
	}
	return 0;
}

/* Call entry p->e's op tried at this point: linearized (pushed, the
 * search goes on from the first entry) or passed over (the next entry):
 * 0; 1: back (a forced op whose configuration failed before); -ENOMEM.
 */
static int try_call(struct ctx *c, struct pos *p)
{
	struct kop *ops = c->ops;
	uint32_t o = c->ents[p->e].op;
	struct state ns;
	if (responded(&ops[o]) == (p->pass == 1) ||
	    (p->pass == 1 && skip_unknown(c, p->head, p->e, p->st)) ||
	    !step(&ops[o], p->st, &ns)) {
		p->e = c->next[p->e]; /* the other pass's, left, or invalid */
		return 0;
	}
	/* An op that changes nothing in every state where it is valid (a
	 * get, a delete that found nothing) can go first whenever it can go
	 * at all: nothing it must follow is pending, and moving it to the
	 * front of any completion keeps that valid. So it is not a choice
	 * point. (A put of the value the key already holds is not such an
	 * op: later in a completion it may change the state.) */
	bool same = ops[o].kind == LC_GET ||
	            (ops[o].kind == LC_DEL && !ops[o].found);
	uint32_t nM = o + 1 > p->M ? o + 1 : p->M, nu;
	if (unlinearized(c, p, nM, &nu))
		return -ENOMEM;
	int ins = memo_insert(c, nM, c->ubuf, nu, ns);
	if (ins < 0)
		return -ENOMEM;
	if (!ins) {
		/* Seen before, so explored and failed: with a forced op,
		 * this configuration fails too. */
		if (same)
			return 1;
		p->e = c->next[p->e];
		return 0;
	}
	c->frames[p->depth++] = (struct frame){.st = p->st,
	                                       .op = o,
	                                       .M = p->M,
	                                       .writer = p->writer,
	                                       .forced = same,
	                                       .pass = p->pass};
	p->pass = 0;
	p->st = ns;
	p->M = nM;
	if (writes(&ops[o]))
		p->writer = o;
	unlink_ent(c, p->e);
	if (responded(&ops[o])) {
		unlink_ent(c, c->ret_of[o]);
		p->remaining--;
	}
	p->e = c->next[p->head];
	return 0;
}

/* A return entry (or, defensively, the end) reached: the op it returns
 * cannot be linearized later than this. The deepest such point is the
 * report's (c->best). */
static void note_best(struct ctx *c, const struct pos *p)
{
	struct best *b = &c->best;
	if ((int64_t)p->depth <= b->depth)
		return;
	b->depth = p->depth;
	b->blocked = p->e == NONE ? NONE : c->ents[p->e].op;
	b->st = p->st;
	b->writer = p->writer;
	b->ntail = 0;
	for (uint32_t i = p->depth; i > 0 && b->ntail < TAIL; i--)
		b->tail[b->ntail++] = c->frames[i - 1].op;
	b->ntried = b->ntried_all = 0;
	for (uint32_t x = c->next[p->head]; x != p->e && x != NONE;
	     x = c->next[x]) {
		if (c->ents[x].ret)
			continue;
		if (b->ntried < TRIED)
			b->tried[b->ntried++] = c->ents[x].op;
		b->ntried_all++;
	}
}

/* Undo the last choice (and the forced ops above it), the search going
 * on after it: KEY_OK, or KEY_BAD when there is none. */
static int backtrack(struct ctx *c, struct pos *p)
{
	uint32_t ce, forced;
	do {
		if (!p->depth)
			return KEY_BAD;
		struct frame *f = &c->frames[--p->depth];
		uint32_t o = f->op;
		ce = c->call_of[o];
		if (responded(&c->ops[o])) {
			relink_ent(c, c->ret_of[o]);
			p->remaining++;
		}
		relink_ent(c, ce);
		p->st = f->st;
		p->M = f->M;
		p->writer = f->writer;
		forced = f->forced;
		p->pass = f->pass;
		p->steps++;
	} while (forced);
	p->e = c->next[ce];
	return KEY_OK;
}

/*
 * The search over c->ops[0..m) (sorted by invocation). Returns KEY_OK,
 * KEY_BAD (c->best describes the deepest point), KEY_TIMEOUT or -ENOMEM.
 * At each point the candidates (calls before the first remaining return)
 * are tried in two passes: first the ops with a response, then those
 * without. An op without response need not take effect at all, and in
 * the histories of a failure (writes that failed retryably, retried
 * again and again) most did not: trying them first made the search
 * explore every subset of a run of them before skipping them all (60 s
 * for 18 failed puts of one key). The order changes nothing else: every
 * candidate is still tried.
 */
static int search(struct ctx *c, uint32_t m)
{
	if (!m)
		return KEY_OK; /* only gets without response */
	struct pos p = {.writer = NONE};
	if (search_setup(c, m, &p.head, &p.remaining))
		return -ENOMEM;
	p.e = c->next[p.head];
	int rc = KEY_OK;
	while (p.remaining && rc == KEY_OK) {
		if ((++p.steps & 1023) == 0 && c->deadline &&
		    now_ns() > c->deadline) {
			rc = KEY_TIMEOUT;
			break;
		}
		int back = 0;
		if (p.e != NONE && !c->ents[p.e].ret) {
			back = try_call(c, &p);
			if (back < 0) {
				rc = -ENOMEM;
				break;
			}
			if (!back)
				continue;
		}
		if (!back && p.pass == 0) {
			p.pass = 1; /* now the ops without response */
			p.e = c->next[p.head];
			continue;
		}
		if (!back)
			note_best(c, &p);
		rc = backtrack(c, &p);
	}
	c->r->nsteps += p.steps;
	c->r->nmemo += c->nmemo;
	return rc;
}

/* ---- reports ----------------------------------------------------------- */

static void sb_op(struct hb_sbuf *b, const struct ctx *c, uint32_t o)
{
	const struct kop *k = &c->ops[o];
	const struct lc_rec *g = &c->h->ops[k->gidx];
	hb_sb_add(b, "op %" PRIu32 " ", k->gidx);
	switch (k->kind) {
	case LC_GET:
		if (!responded(k))
			hb_sb_add(b, "get -> ?");
		else if (k->found)
			hb_sb_add(b, "%s -> %" PRIu64, g->mget ? "mget" : "get",
			          k->value);
		else
			hb_sb_add(b, "%s -> absent", g->mget ? "mget" : "get");
		break;
	case LC_PUT: hb_sb_add(b, "put %" PRIu64, k->value); break;
	case LC_DEL:
		if (responded(k))
			hb_sb_add(b, "del -> %s",
			          k->found ? "found" : "absent");
		else
			hb_sb_add(b, "del -> ?");
		break;
	default: hb_sb_add(b, "del"); break;
	}
	hb_sb_add(b, " (client %" PRIu32 ", %" PRIu64 "..", g->client,
	          k->t_inv);
	if (responded(k))
		hb_sb_add(b, "%" PRIu64 ")", k->t_resp);
	else
		hb_sb_add(b, "no response)");
}

static void sb_state(struct hb_sbuf *b, struct state st)
{
	if (st.present)
		hb_sb_add(b, "%" PRIu64, st.v);
	else
		hb_sb_add(b, "absent");
}

/* A delete that could fall between put @p and op @o in real time. */
static bool del_between(const struct ctx *c, uint32_t m, uint32_t p, uint32_t o)
{
	for (uint32_t d = 0; d < m; d++) {
		const struct kop *k = &c->ops[d];
		if (k->kind == LC_GET || k->kind == LC_PUT)
			continue;
		if (k->kind == LC_DEL && responded(k) && !k->found)
			continue; /* a no-op delete */
		if (k->t_inv <= c->ops[o].t_resp &&
		    !(responded(k) && k->t_resp < c->ops[p].t_inv))
			return true;
	}
	return false;
}

/* Diagnose the blocked op @o when a simple pattern proves it wrong. */
/* The latest write of the key (among the first @m ops) that overwrote
 * put @pi's value before get @k began, or NONE. */
static uint32_t overwrite_of(const struct ctx *c, uint32_t m,
                             const struct kop *pi, const struct kop *k)
{
	uint32_t w = NONE;
	for (uint32_t j = 0; j < m; j++) {
		const struct kop *x = &c->ops[j];
		if (!writes(x) || !responded(x) ||
		    (x->kind == LC_PUT && x->value == k->value) ||
		    (x->kind == LC_DEL && !x->found))
			continue;
		if (responded(pi) && pi->t_resp < x->t_inv &&
		    x->t_resp < k->t_inv &&
		    (w == NONE || x->t_resp > c->ops[w].t_resp))
			w = j;
	}
	return w;
}

/* Op @o, a get that found a value: one never written, or one every put
 * of which was overwritten before @o began. */
static void diagnose_found(struct hb_sbuf *b, const struct ctx *c, uint32_t m,
                           uint32_t o)
{
	const struct kop *k = &c->ops[o];
	uint32_t wp = NONE, ww = NONE;
	for (uint32_t i = 0; i < m; i++) {
		const struct kop *pi = &c->ops[i];
		if (pi->kind != LC_PUT || pi->value != k->value)
			continue;
		uint32_t w = overwrite_of(c, m, pi, k);
		if (w == NONE)
			return; /* a put of it still current: not this */
		if (wp == NONE) {
			wp = i;
			ww = w;
		}
	}
	if (wp == NONE) {
		hb_sb_add(b, "value never written: ");
		sb_op(b, c, o);
		hb_sb_add(b,
		          " read %" PRIu64 ", which no put of this key "
		          "wrote. ",
		          k->value);
		return;
	}
	hb_sb_add(b, "stale read: ");
	sb_op(b, c, o);
	hb_sb_add(b, " began after the value written by ");
	sb_op(b, c, wp);
	hb_sb_add(b, " was %s by ",
	          c->ops[ww].kind == LC_PUT ? "overwritten" : "deleted");
	sb_op(b, c, ww);
	hb_sb_add(b, ". ");
}

/* Op @o, a get or delete that found the key absent: a put that completed
 * before it began with no delete that could come in between. */
static void diagnose_absent(struct hb_sbuf *b, const struct ctx *c, uint32_t m,
                            uint32_t o)
{
	const struct kop *k = &c->ops[o];
	for (uint32_t p = 0; p < m; p++) {
		const struct kop *x = &c->ops[p];
		if (x->kind != LC_PUT || !responded(x) ||
		    x->t_resp >= k->t_inv || del_between(c, m, p, o))
			continue;
		hb_sb_add(b, "%s: ",
		          k->kind == LC_GET ? "stale read" : "lost update");
		sb_op(b, c, o);
		hb_sb_add(b, " found the key absent, but ");
		sb_op(b, c, p);
		hb_sb_add(b, " completed before it began and no delete could "
		             "come in between. ");
		return;
	}
}

static void diagnose(struct hb_sbuf *b, const struct ctx *c, uint32_t m,
                     uint32_t o)
{
	const struct kop *k = &c->ops[o];
	if (k->kind == LC_GET && k->found)
		diagnose_found(b, c, m, o);
	else if (k->kind == LC_GET ||
	         (k->kind == LC_DEL && responded(k) && !k->found))
		diagnose_absent(b, c, m, o);
}

static void describe(struct ctx *c, uint32_t m, uint64_t key)
{
	lc_report *r = c->r;
	if (r->nexamples >= LC_MAX_EXAMPLES)
		return;
	struct lc_example *ex = &r->examples[r->nexamples++];
	ex->key = key;
	ex->text[0] = 0;
	struct hb_sbuf b = {ex->text, 0, sizeof(ex->text)};
	const struct best *bs = &c->best;
	hb_sb_add(&b, "key %" PRIu64 " (%" PRIu32 " ops): ", key, m);
	if (bs->blocked != NONE)
		diagnose(&b, c, m, bs->blocked);
	hb_sb_add(&b, "Longest linearizable prefix: %" PRId64 " op%s; then ",
	          bs->depth, bs->depth == 1 ? "" : "s");
	if (bs->blocked == NONE) {
		hb_sb_add(&b, "nothing can take effect");
	} else {
		sb_op(&b, c, bs->blocked);
		hb_sb_add(&b, " cannot take effect before it returns");
	}
	hb_sb_add(&b, "; the key holds ");
	sb_state(&b, bs->st);
	if (bs->writer == NONE) {
		hb_sb_add(&b, " (initial)");
	} else {
		hb_sb_add(&b, " (set by ");
		sb_op(&b, c, bs->writer);
		hb_sb_add(&b, ")");
	}
	hb_sb_add(&b, ". Last linearized:");
	if (!bs->ntail)
		hb_sb_add(&b, " none");
	for (uint32_t i = bs->ntail; i > 0; i--) {
		hb_sb_add(&b, " ");
		sb_op(&b, c, bs->tail[i - 1]);
		hb_sb_add(&b, i > 1 ? ";" : "");
	}
	hb_sb_add(&b, ". Pending ops tried (%" PRIu32 "):", bs->ntried_all);
	if (!bs->ntried)
		hb_sb_add(&b, " none");
	for (uint32_t i = 0; i < bs->ntried; i++) {
		hb_sb_add(&b, " ");
		sb_op(&b, c, bs->tried[i]);
		hb_sb_add(&b, i + 1 < bs->ntried ? ";" : "");
	}
	hb_sb_add(&b, ".");
}

/* ---- lc_check ---------------------------------------------------------- */

struct skey {
	uint64_t key, t;
	uint32_t i;
};

static int skey_cmp(const void *x, const void *y)
{
	const struct skey *a = x, *b = y;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

static void ctx_free(struct ctx *c)
{
	free(c->ops);
	free(c->ents);
	free(c->next);
	free(c->prev);
	free(c->maps);
	free(c->frames);
	free(c->memo);
	free(c->uarena);
	free(c->table);
	free(c->ubuf);
	free(c->vals);
}

/* The history's records sorted by key, then by invocation, into @sk; the
 * unanswered and multi-get counts into the report. */
static struct skey *sorted_keys(const lc_history *h, lc_report *r)
{
	size_t n = h->nops;
	struct skey *sk = malloc((n ? n : 1) * sizeof(*sk));
	if (!sk)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const struct lc_rec *o = &h->ops[i];
		sk[i] = (struct skey){o->key, o->t_inv, (uint32_t)i};
		if (o->t_resp == LC_NO_RESPONSE)
			r->nno_response++;
		if (o->mget)
			r->nmget_gets++;
	}
	qsort(sk, n, sizeof(*sk), skey_cmp);
	return sk;
}

/* One key's records (@sk[@a..@z)) as the search's ops: a get never
 * answered says nothing (dropped); a delete never answered may or may not
 * have happened. Returns how many. */
static uint32_t key_ops(struct ctx *c, const struct skey *sk, size_t a,
                        size_t z)
{
	uint32_t m = 0;
	for (size_t i = a; i < z; i++) {
		const struct lc_rec *o = &c->h->ops[sk[i].i];
		if (o->kind == LC_GET && o->t_resp == LC_NO_RESPONSE) {
			c->r->ndropped_gets++;
			continue;
		}
		uint8_t kind = o->kind;
		if (kind == LC_DEL && o->t_resp == LC_NO_RESPONSE)
			kind = LC_DEL_ANY;
		c->ops[m++] = (struct kop){.value = o->value,
		                           .t_inv = o->t_inv,
		                           .t_resp = o->t_resp,
		                           .gidx = sk[i].i,
		                           .kind = kind,
		                           .found = o->found};
	}
	if (m > c->r->max_key_ops)
		c->r->max_key_ops = m;
	return m;
}

/* Each key's history searched for a linearization, until the deadline
 * (the keys after it counted unchecked). 0 or a negative error. */
static int check_keys(struct ctx *c, const struct skey *sk, size_t n)
{
	lc_report *r = c->r;
	bool spent = false;
	for (size_t a = 0, z; a < n; a = z) {
		uint64_t key = sk[a].key;
		for (z = a; z < n && sk[z].key == key; z++)
			;
		r->nkeys++;
		if (spent) {
			r->nunchecked++;
			continue;
		}
		if (hb_grow((void **)&c->ops, &c->capops, z - a,
		            sizeof(*c->ops)))
			return -ENOMEM;
		uint32_t m = key_ops(c, sk, a, z);
		int k = search(c, m);
		if (k < 0)
			return k;
		if (k == KEY_BAD) {
			r->nviolations++;
			describe(c, m, key);
		} else if (k == KEY_TIMEOUT) {
			r->ntimedout++;
			if (r->ntimedout_keys < LC_MAX_EXAMPLES)
				r->timedout_keys[r->ntimedout_keys++] = key;
			spent = true;
		}
	}
	return 0;
}

int lc_check(const lc_history *h, lc_report *r, uint64_t timeout_ms)
{
	if (!r)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	if (!h)
		return -EINVAL;
	if (h->err)
		return h->err;
	uint64_t t0 = now_ns();
	struct ctx c = {.h = h, .r = r};
	if (timeout_ms)
		c.deadline = t0 + timeout_ms * 1000000ull;
	r->nops = h->nops;
	struct skey *sk = sorted_keys(h, r);
	if (!sk)
		return -ENOMEM;
	int rc = check_keys(&c, sk, h->nops);
	free(sk);
	ctx_free(&c);
	r->elapsed_ms = (double)(now_ns() - t0) / 1e6;
	if (rc < 0)
		return rc;
	if (r->nviolations)
		return r->nviolations > INT_MAX ? INT_MAX : (int)r->nviolations;
	if (r->ntimedout)
		return -ETIMEDOUT;
	return 0;
}

void lc_report_print(FILE *f, const lc_report *r)
{
	fprintf(f,
	        "lincheck: %" PRIu64 " ops on %" PRIu64
	        " keys (busiest %" PRIu64 " ops; %" PRIu64
	        " without response, %" PRIu64 " of them gets dropped; %" PRIu64
	        " from multi-gets); %" PRIu64 " search steps, %" PRIu64
	        " memo entries; %.1f ms\n",
	        r->nops, r->nkeys, r->max_key_ops, r->nno_response,
	        r->ndropped_gets, r->nmget_gets, r->nsteps, r->nmemo,
	        r->elapsed_ms);
	if (r->ntimedout) {
		fprintf(f,
		        "lincheck: search budget spent on %" PRIu64
		        " key(s) (%" PRIu64 " more not checked):",
		        r->ntimedout, r->nunchecked);
		for (size_t i = 0; i < r->ntimedout_keys; i++)
			fprintf(f, " %" PRIu64, r->timedout_keys[i]);
		fprintf(f, "\n");
	}
	if (!r->nviolations) {
		if (!r->ntimedout)
			fprintf(f, "lincheck: linearizable (0 violations)\n");
		return;
	}
	fprintf(f, "lincheck: %" PRIu64 " key(s) not linearizable\n",
	        r->nviolations);
	for (size_t i = 0; i < r->nexamples; i++)
		fprintf(f, "  - %s\n", r->examples[i].text);
}
