/*
 * sercheck: strict-serializability checker over read/write register
 * histories with a known version order. See sercheck.h for the model.
 *
 * sc_check, step by step (T transactions, M operations):
 *   1. group operations by transaction (counting sort, program order kept);
 *      per transaction, mark superseded writes (an own later write of the
 *      key follows) and internal reads (an own earlier write precedes);
 *   2. sort the other operations by (key, version) (LSD radix sort);
 *   3. for each external read, its source: the best writer of that
 *      (key, version): committed > unknown > contested unknown (one that
 *      installs a version a committed txn installs too) > aborted >
 *      intermediate;
 *   4. include committed transactions, then (worklist) unknown ones that an
 *      included transaction read from; a read whose version several
 *      unknown transactions of the same rank claim goes, in a second pass,
 *      to one the other reads need (the first pass follows no such read);
 *   5. walk the sorted operations again: per-read anomalies, duplicates,
 *      and the ww / wr / rw edges; real-time edges through a chain of
 *      event nodes, one per distinct completion time. The edge generator
 *      runs twice: count, then fill a CSR adjacency;
 *   6. iterative Tarjan SCC; for each SCC with a cycle, find a cycle with
 *      the smallest set of edge kinds (ww; ww+wr; ww+wr+rw; all), by an
 *      iterative DFS then a BFS for a short one, and classify it.
 */
#include "sercheck.h"
#include "histbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NONE UINT32_MAX
/* Indices are uint32_t; keep clear of NONE. */
#define SC_MAX_OPS  ((size_t)INT32_MAX)
#define SC_MAX_TXNS ((size_t)INT32_MAX / 2)

struct sc_op {
	uint64_t key, ver;
	uint32_t txn;
	uint32_t write;
};

struct sc_txn {
	uint64_t t_inv, t_done, tag;
	uint8_t outcome; /* 0 while open */
	uint8_t has_tag;
};

struct sc_history {
	struct sc_op *ops;
	size_t nops, capops;
	struct sc_txn *txns;
	size_t ntxns, captxns;
	int err; /* sticky: first recording error */
};

/* ---- recording --------------------------------------------------------- */

sc_history *sc_new(void)
{
	return calloc(1, sizeof(sc_history));
}

void sc_free(sc_history *h)
{
	if (!h)
		return;
	free(h->ops);
	free(h->txns);
	free(h);
}

static int fail(sc_history *h, int err)
{
	return h ? hb_fail(&h->err, err) : err;
}

int sc_txn_begin(sc_history *h, uint64_t t_inv)
{
	if (!h)
		return -EINVAL;
	if (h->ntxns >= SC_MAX_TXNS)
		return fail(h, -ENOMEM);
	if (hb_grow((void **)&h->txns, &h->captxns, h->ntxns + 1,
	            sizeof(*h->txns)))
		return fail(h, -ENOMEM);
	struct sc_txn *t = &h->txns[h->ntxns];
	memset(t, 0, sizeof(*t));
	t->t_inv = t_inv;
	return (int)h->ntxns++;
}

static struct sc_txn *open_txn(sc_history *h, int txn)
{
	if (!h || txn < 0 || (size_t)txn >= h->ntxns)
		return NULL;
	struct sc_txn *t = &h->txns[txn];
	return t->outcome ? NULL : t;
}

int sc_txn_tag(sc_history *h, int txn, uint64_t tag)
{
	if (!h || txn < 0 || (size_t)txn >= h->ntxns)
		return fail(h, -EINVAL);
	h->txns[txn].tag = tag;
	h->txns[txn].has_tag = 1;
	return 0;
}

static int add_op(sc_history *h, int txn, uint64_t key, uint64_t ver, int write)
{
	if (!open_txn(h, txn))
		return fail(h, -EINVAL);
	if (write && ver == 0)
		return fail(h, -EINVAL); /* version 0 is the initial value */
	if (h->nops >= SC_MAX_OPS)
		return fail(h, -ENOMEM);
	if (hb_grow((void **)&h->ops, &h->capops, h->nops + 1, sizeof(*h->ops)))
		return fail(h, -ENOMEM);
	h->ops[h->nops++] = (struct sc_op){
	        .key = key, .ver = ver, .txn = (uint32_t)txn, .write = !!write};
	return 0;
}

int sc_read(sc_history *h, int txn, uint64_t key, uint64_t version)
{
	return add_op(h, txn, key, version, 0);
}

int sc_write(sc_history *h, int txn, uint64_t key, uint64_t version)
{
	return add_op(h, txn, key, version, 1);
}

int sc_txn_end(sc_history *h, int txn, uint64_t t_done, enum sc_outcome outcome)
{
	struct sc_txn *t = open_txn(h, txn);
	if (!t || t_done < t->t_inv ||
	    (outcome != SC_COMMITTED && outcome != SC_ABORTED &&
	     outcome != SC_UNKNOWN))
		return fail(h, -EINVAL);
	t->t_done = t_done;
	t->outcome = (uint8_t)outcome;
	return 0;
}

size_t sc_ntxns(const sc_history *h)
{
	return h ? h->ntxns : 0;
}

int sc_merge(sc_history *dst, const sc_history *src)
{
	if (!dst || !src || dst == src)
		return fail(dst, -EINVAL);
	if (src->err)
		return fail(dst, src->err);
	if (dst->ntxns + src->ntxns > SC_MAX_TXNS ||
	    dst->nops + src->nops > SC_MAX_OPS)
		return fail(dst, -ENOMEM);
	if (hb_grow((void **)&dst->txns, &dst->captxns, dst->ntxns + src->ntxns,
	            sizeof(*dst->txns)) ||
	    hb_grow((void **)&dst->ops, &dst->capops, dst->nops + src->nops,
	            sizeof(*dst->ops)))
		return fail(dst, -ENOMEM);
	uint32_t base = (uint32_t)dst->ntxns;
	if (src->ntxns)
		memcpy(dst->txns + dst->ntxns, src->txns,
		       src->ntxns * sizeof(*src->txns));
	for (size_t i = 0; i < src->nops; i++) {
		struct sc_op o = src->ops[i];
		o.txn += base;
		dst->ops[dst->nops + i] = o;
	}
	dst->ntxns += src->ntxns;
	dst->nops += src->nops;
	return (int)base;
}

/* ---- checking: state --------------------------------------------------- */

enum {
	F_SUPERSEDED = 1, /* write: a later own write of the key follows */
	F_INTERNAL = 2,   /* read: an earlier own write of the key precedes */
	F_INTBAD = 4,     /* internal read that missed the own latest write */
	F_BADREAD = 8,    /* external read of a version not installed */
	F_RANK_SHIFT = 4, /* external read: rank of its source (R_*) */
	F_RANK = 0x70,
	F_TIE = 0x80, /* external read: another writer has its source's rank */
};

/* R_CONTESTED: an unknown transaction that installs a (key, version) a
 * committed one installs too: it cannot have committed without a duplicate
 * version, so it is the source of a read only when no other unknown
 * transaction claims that version. */
enum { R_NONE, R_INTER, R_ABORTED, R_CONTESTED, R_UNKNOWN, R_COMMITTED };

enum { E_WW = 1, E_WR = 2, E_RW = 4, E_RT = 8, E_DATA = 7, E_ALL = 15 };

struct rec {
	uint64_t hi, lo;
	uint32_t idx;
};

struct ctx {
	const sc_history *h;
	sc_report *r;
	unsigned nex[SC_NKINDS];
	uint32_t T, M;
	uint32_t *toff, *tops; /* operations by transaction */
	uint8_t *opf;          /* F_* per operation */
	uint32_t *src;         /* external read: its source transaction */
	uint8_t *incl;         /* transaction counts as committed */
	uint8_t *contested;    /* unknown txn: a committed one claims one of
	                          the versions it installs */
	struct rec *srt;       /* external ops sorted by (key, version) */
	size_t nsrt;
	struct rec *ends, *starts; /* (time, txn) sorted */
	size_t nends, nstarts;
	uint64_t *evtime; /* event node k: the k-th distinct completion time */
	uint32_t nev;
	/* graph: nodes 0..T-1 transactions, T..T+nev-1 events */
	uint32_t V;
	size_t E;
	size_t *off; /* CSR; during the count pass: degrees */
	uint32_t *adj;
	uint8_t *ekind;
	bool fill;
	/* Tarjan and cycle search */
	uint32_t *comp;
};

static const char *const kind_names[SC_NKINDS] = {
        [SC_ABORTED_READ] = "G1a aborted read",
        [SC_PHANTOM_VERSION] = "phantom version (read of a version nobody "
                               "wrote)",
        [SC_INTERMEDIATE_READ] = "G1b intermediate read",
        [SC_INTERNAL] = "internal inconsistency (read missed own write)",
        [SC_DUPLICATE_VERSION] = "duplicate version",
        [SC_G0] = "G0 write cycle (ww)",
        [SC_G1C] = "G1c circular information flow (ww/wr)",
        [SC_GSINGLE] = "G-single: cycle with one anti-dependency (lost "
                       "update, read skew)",
        [SC_G2] = "G2: cycle with two or more anti-dependencies (write skew)",
        [SC_REALTIME] = "real-time violation (stale read: serializable, not "
                        "strictly)",
};

const char *sc_kind_name(enum sc_kind k)
{
	return (unsigned)k < SC_NKINDS ? kind_names[k] : "?";
}

static void sb_txn(struct hb_sbuf *b, const struct ctx *c, uint32_t t)
{
	const struct sc_txn *x = &c->h->txns[t];
	hb_sb_add(b, "T%" PRIu32, t);
	if (x->has_tag)
		hb_sb_add(b, "(tag %" PRIu64 ")", x->tag);
}

/* Count one anomaly; returns a buffer for its description when it is one
 * of the first few of its kind, else NULL. */
static struct hb_sbuf note(struct ctx *c, enum sc_kind k, char **text)
{
	sc_report *r = c->r;
	r->count[k]++;
	r->total++;
	struct hb_sbuf b = {0};
	*text = NULL;
	if (c->nex[k] < SC_EXAMPLES_PER_KIND &&
	    r->nexamples < SC_NKINDS * SC_EXAMPLES_PER_KIND) {
		struct sc_example *e = &r->examples[r->nexamples++];
		c->nex[k]++;
		e->kind = k;
		e->text[0] = 0;
		b.p = e->text;
		b.cap = sizeof(e->text);
		*text = e->text;
	}
	return b;
}

/* ---- sorting ----------------------------------------------------------- */

/* Stable LSD radix sort by (hi, lo), 8-bit digits; digits that are the
 * same in every record are skipped. */
static int radix_sort(struct rec *a, size_t n)
{
	if (n < 2)
		return 0;
	struct rec *b = malloc(n * sizeof(*b));
	size_t(*hist)[256] = calloc(16, sizeof(*hist));
	if (!b || !hist) {
		free(b);
		free(hist);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t lo = a[i].lo, hi = a[i].hi;
		for (int d = 0; d < 8; d++) {
			hist[d][(lo >> (8 * d)) & 255]++;
			hist[d + 8][(hi >> (8 * d)) & 255]++;
		}
	}
	struct rec *from = a, *to = b;
	for (int d = 0; d < 16; d++) {
		size_t *hd = hist[d];
		int trivial = 0;
		for (int k = 0; k < 256; k++)
			if (hd[k] == n)
				trivial = 1;
		if (trivial)
			continue;
		size_t sum = 0;
		for (int k = 0; k < 256; k++) {
			size_t x = hd[k];
			hd[k] = sum;
			sum += x;
		}
		int sh = 8 * (d & 7);
		if (d < 8)
			for (size_t i = 0; i < n; i++)
				to[hd[(from[i].lo >> sh) & 255]++] = from[i];
		else
			for (size_t i = 0; i < n; i++)
				to[hd[(from[i].hi >> sh) & 255]++] = from[i];
		struct rec *t = from;
		from = to;
		to = t;
	}
	if (from != a)
		memcpy(a, from, n * sizeof(*a));
	free(b);
	free(hist);
	return 0;
}

/* ---- step 1: per transaction ------------------------------------------- */

struct kp {
	uint64_t key;
	uint32_t pos;
};

static int kp_cmp(const void *x, const void *y)
{
	const struct kp *a = x, *b = y;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static int per_txn(struct ctx *c)
{
	const struct sc_op *ops = c->h->ops;
	uint32_t kmax = 0;
	for (uint32_t t = 0; t < c->T; t++)
		if (c->toff[t + 1] - c->toff[t] > kmax)
			kmax = c->toff[t + 1] - c->toff[t];
	struct kp *tmp = malloc((kmax ? kmax : 1) * sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	for (uint32_t t = 0; t < c->T; t++) {
		uint32_t k = c->toff[t + 1] - c->toff[t];
		const uint32_t *list = c->tops + c->toff[t];
		if (k < 2)
			continue;
		for (uint32_t i = 0; i < k; i++)
			tmp[i] = (struct kp){ops[list[i]].key, i};
		if (k <= 32) {
			for (uint32_t i = 1; i < k; i++) {
				struct kp x = tmp[i];
				uint32_t j = i;
				while (j > 0 && kp_cmp(&tmp[j - 1], &x) > 0) {
					tmp[j] = tmp[j - 1];
					j--;
				}
				tmp[j] = x;
			}
		} else {
			qsort(tmp, k, sizeof(*tmp), kp_cmp);
		}
		/* Same key, program order: track the latest own write. */
		uint32_t last = NONE;
		for (uint32_t i = 0; i < k; i++) {
			if (i > 0 && tmp[i].key != tmp[i - 1].key)
				last = NONE;
			uint32_t o = list[tmp[i].pos];
			if (ops[o].write) {
				if (last != NONE)
					c->opf[last] |= F_SUPERSEDED;
				last = o;
			} else if (last != NONE) {
				c->opf[o] |= F_INTERNAL;
				if (ops[o].ver != ops[last].ver)
					c->opf[o] |= F_INTBAD;
			}
		}
	}
	free(tmp);
	return 0;
}

/* ---- steps 3 and 4: sources and inclusion ------------------------------ */

static int write_rank(const struct ctx *c, uint32_t o)
{
	const struct sc_op *op = &c->h->ops[o];
	int oc = c->h->txns[op->txn].outcome;
	if (oc == SC_ABORTED)
		return R_ABORTED;
	if (c->opf[o] & F_SUPERSEDED)
		return R_INTER;
	if (oc == SC_COMMITTED)
		return R_COMMITTED;
	return c->contested[op->txn] ? R_CONTESTED : R_UNKNOWN;
}

/* The end of the (key, version) group of the sorted reads and writes that
 * starts at @i. */
static size_t group_end(const struct ctx *c, size_t i)
{
	uint64_t key = c->srt[i].hi, ver = c->srt[i].lo;
	while (i < c->nsrt && c->srt[i].hi == key && c->srt[i].lo == ver)
		i++;
	return i;
}

/* A write that its own transaction did not overwrite later. */
static bool live_write(const struct ctx *c, uint32_t o)
{
	return c->h->ops[o].write && !(c->opf[o] & F_SUPERSEDED);
}

/* Mark the unknown transactions that install a (key, version) a committed
 * transaction installs too. Such a one really aborted, or the history has
 * a duplicate version whatever the others did. A machine killed while it
 * committed leaves one whenever the transaction it was committing aborted
 * and a later one installed the same versions (when a version is the one
 * read plus a step, the next writer of the object claims the same). */
static void find_contested(struct ctx *c)
{
	const struct sc_op *ops = c->h->ops;
	for (size_t g0 = 0, g1; g0 < c->nsrt; g0 = g1) {
		g1 = group_end(c, g0);
		bool committed = false;
		for (size_t j = g0; j < g1; j++) {
			uint32_t o = c->srt[j].idx;
			committed |=
			        live_write(c, o) &&
			        c->h->txns[ops[o].txn].outcome == SC_COMMITTED;
		}
		for (size_t j = g0; committed && j < g1; j++) {
			uint32_t o = c->srt[j].idx;
			if (live_write(c, o) &&
			    c->h->txns[ops[o].txn].outcome == SC_UNKNOWN)
				c->contested[ops[o].txn] = 1;
		}
	}
}

/* Each external read's source: the writer of the best rank. Between
 * writers of the same rank, one in c->incl (an unknown transaction some
 * read needs whichever claimant the ties take: a second pass) before the
 * first recorded. */
static void find_sources(struct ctx *c)
{
	const struct sc_op *ops = c->h->ops;
	for (size_t g0 = 0, i; g0 < c->nsrt; g0 = i) {
		i = group_end(c, g0);
		int best = R_NONE;
		uint32_t bw = NONE;
		bool tie = false;
		for (size_t j = g0; j < i; j++) {
			uint32_t o = c->srt[j].idx, t = ops[o].txn;
			if (!ops[o].write)
				continue;
			int rk = write_rank(c, o);
			if (rk > best) {
				best = rk;
				bw = t;
				tie = false;
			} else if (rk == best && t != bw) {
				tie = true;
				if (c->incl[t] && !c->incl[bw])
					bw = t;
			}
		}
		for (size_t j = g0; j < i; j++) {
			uint32_t o = c->srt[j].idx;
			if (ops[o].write)
				continue;
			c->src[o] = bw;
			c->opf[o] &= (uint8_t) ~(F_RANK | F_TIE);
			c->opf[o] |= (uint8_t)(best << F_RANK_SHIFT);
			if (tie)
				c->opf[o] |= F_TIE;
		}
	}
}

/* The committed transactions and, transitively, the unknown ones an
 * included one read from; with !@ties, not through a read whose source
 * was a tie (the unknowns every explanation needs). */
static int include(struct ctx *c, bool ties)
{
	const struct sc_txn *tx = c->h->txns;
	const struct sc_op *ops = c->h->ops;
	uint32_t *q = malloc((c->T ? c->T : 1) * sizeof(*q));
	if (!q)
		return -ENOMEM;
	uint32_t qn = 0;
	for (uint32_t t = 0; t < c->T; t++)
		if (tx[t].outcome == SC_COMMITTED) {
			c->incl[t] = 1;
			q[qn++] = t;
		}
	for (uint32_t qi = 0; qi < qn; qi++) {
		uint32_t t = q[qi];
		for (uint32_t j = c->toff[t]; j < c->toff[t + 1]; j++) {
			uint32_t o = c->tops[j];
			if (ops[o].write || (c->opf[o] & F_INTERNAL) ||
			    (!ties && (c->opf[o] & F_TIE)))
				continue;
			uint32_t w = c->src[o];
			if (w == NONE || c->incl[w] ||
			    tx[w].outcome != SC_UNKNOWN)
				continue;
			c->incl[w] = 1;
			q[qn++] = w;
		}
	}
	free(q);
	return 0;
}

/* ---- step 5: anomalies and edges --------------------------------------- */

static void edge(struct ctx *c, uint32_t a, uint32_t b, uint8_t kind)
{
	if (a == b)
		return;
	if (!c->fill) {
		c->off[a]++;
		return;
	}
	size_t p = --c->off[a];
	c->adj[p] = b;
	c->ekind[p] = kind;
}

static void read_anomaly(struct ctx *c, uint32_t o)
{
	const struct sc_op *op = &c->h->ops[o];
	int rank = (c->opf[o] & F_RANK) >> F_RANK_SHIFT;
	enum sc_kind k = rank == R_NONE    ? SC_PHANTOM_VERSION
	                 : rank == R_INTER ? SC_INTERMEDIATE_READ
	                                   : SC_ABORTED_READ;
	char *text;
	struct hb_sbuf b = note(c, k, &text);
	if (!text)
		return;
	sb_txn(&b, c, op->txn);
	hb_sb_add(&b, " read key %" PRIu64 " version %" PRIu64, op->key,
	          op->ver);
	if (rank == R_NONE) {
		hb_sb_add(&b, ", which no transaction wrote");
	} else {
		hb_sb_add(&b, rank == R_INTER ? ", an intermediate version of "
		                              : ", written only by aborted ");
		sb_txn(&b, c, c->src[o]);
		if (rank == R_INTER)
			hb_sb_add(&b, " (it wrote the key again later)");
	}
}

static void future_read(struct ctx *c, uint32_t o)
{
	const struct sc_op *op = &c->h->ops[o];
	char *text;
	struct hb_sbuf b = note(c, SC_INTERNAL, &text);
	if (!text)
		return;
	sb_txn(&b, c, op->txn);
	hb_sb_add(&b,
	          " read key %" PRIu64 " version %" PRIu64
	          " before it wrote that version itself",
	          op->key, op->ver);
}

static void duplicate(struct ctx *c, uint64_t key, uint64_t ver, uint32_t a,
                      uint32_t b2)
{
	char *text;
	struct hb_sbuf b = note(c, SC_DUPLICATE_VERSION, &text);
	if (!text)
		return;
	hb_sb_add(&b, "key %" PRIu64 " version %" PRIu64 " installed by both ",
	          key, ver);
	sb_txn(&b, c, a);
	hb_sb_add(&b, " and ");
	sb_txn(&b, c, b2);
}

/* The installed writer of @key's version @ver (the sorted records
 * [g0, end)), if any; two installed writers are a duplicate. */
static uint32_t version_writer(struct ctx *c, uint64_t key, uint64_t ver,
                               size_t g0, size_t end)
{
	const struct sc_op *ops = c->h->ops;
	uint32_t w = NONE;
	for (size_t j = g0; j < end; j++) {
		uint32_t o = c->srt[j].idx;
		uint32_t t = ops[o].txn;
		if (!ops[o].write || !c->incl[t] || (c->opf[o] & F_SUPERSEDED))
			continue;
		if (w == NONE)
			w = t;
		else if (w != t && !c->fill)
			duplicate(c, key, ver, w, t);
	}
	return w;
}

/* Anti-dependencies: the reads of the versions before @w's (the sorted
 * records [pend, g0)) to @w. */
static void rw_edges(struct ctx *c, size_t pend, size_t g0, uint32_t w)
{
	const struct sc_op *ops = c->h->ops;
	for (size_t j = pend; j < g0; j++) {
		uint32_t o = c->srt[j].idx;
		/* Reads already reported as G1a, G1b or phantom add no
		 * anti-dependency: one anomaly, reported once. */
		if (!ops[o].write && c->incl[ops[o].txn] &&
		    !(c->opf[o] & F_BADREAD))
			edge(c, ops[o].txn, w, E_RW);
	}
}

/* The reads of version @ver (the sorted records [g0, end)): a
 * dependency on its writer @w, or an anomaly when it has none. */
static void wr_edges(struct ctx *c, uint64_t ver, size_t g0, size_t end,
                     uint32_t w)
{
	const struct sc_op *ops = c->h->ops;
	for (size_t j = g0; j < end; j++) {
		uint32_t o = c->srt[j].idx;
		uint32_t t = ops[o].txn;
		if (ops[o].write || !c->incl[t])
			continue;
		if (w != NONE) {
			edge(c, w, t, E_WR);
			if (w == t && !c->fill)
				future_read(c, o);
		} else if (ver != 0 && !c->fill) {
			c->opf[o] |= F_BADREAD;
			read_anomaly(c, o);
		}
	}
}

static void data_edges(struct ctx *c)
{
	const struct rec *s = c->srt;
	size_t i = 0, n = c->nsrt;
	while (i < n) {
		uint64_t key = s[i].hi;
		size_t pend = i;
		uint32_t prev = NONE;
		while (i < n && s[i].hi == key) {
			size_t g0 = i;
			uint64_t ver = s[i].lo;
			while (i < n && s[i].hi == key && s[i].lo == ver)
				i++;
			uint32_t w = version_writer(c, key, ver, g0, i);
			if (w != NONE) {
				rw_edges(c, pend, g0, w);
				if (prev != NONE)
					edge(c, prev, w, E_WW);
				prev = w;
				pend = g0;
			}
			wr_edges(c, ver, g0, i, w);
		}
	}
}

static void rt_edges(struct ctx *c)
{
	uint32_t T = c->T;
	/* txn -> its completion event; event chain */
	uint32_t k = 0;
	for (size_t i = 0; i < c->nends; i++) {
		if (i > 0 && c->ends[i].hi != c->ends[i - 1].hi)
			k++;
		edge(c, c->ends[i].idx, T + k, E_RT);
	}
	for (uint32_t e = 0; e + 1 < c->nev; e++)
		edge(c, T + e, T + e + 1, E_RT);
	/* last completion strictly before the invocation -> txn */
	uint32_t p = 0;
	for (size_t i = 0; i < c->nstarts; i++) {
		uint64_t t_inv = c->starts[i].hi;
		while (p < c->nev && c->evtime[p] < t_inv)
			p++;
		if (p > 0)
			edge(c, T + p - 1, c->starts[i].idx, E_RT);
	}
}

static int build_graph(struct ctx *c)
{
	const struct sc_txn *tx = c->h->txns;
	c->ends = malloc((c->T ? c->T : 1) * sizeof(*c->ends));
	c->starts = malloc((c->T ? c->T : 1) * sizeof(*c->starts));
	if (!c->ends || !c->starts)
		return -ENOMEM;
	for (uint32_t t = 0; t < c->T; t++) {
		if (!c->incl[t])
			continue;
		c->starts[c->nstarts++] = (struct rec){tx[t].t_inv, 0, t};
		/* An unknown txn may have finished any time later. */
		if (tx[t].outcome == SC_COMMITTED)
			c->ends[c->nends++] = (struct rec){tx[t].t_done, 0, t};
	}
	if (radix_sort(c->ends, c->nends) || radix_sort(c->starts, c->nstarts))
		return -ENOMEM;
	c->evtime = malloc((c->nends ? c->nends : 1) * sizeof(*c->evtime));
	if (!c->evtime)
		return -ENOMEM;
	for (size_t i = 0; i < c->nends; i++)
		if (i == 0 || c->ends[i].hi != c->ends[i - 1].hi)
			c->evtime[c->nev++] = c->ends[i].hi;
	c->V = c->T + c->nev;
	c->off = calloc((size_t)c->V + 1, sizeof(*c->off));
	if (!c->off)
		return -ENOMEM;
	c->fill = false;
	data_edges(c);
	rt_edges(c);
	/* Degrees -> end positions; the fill pass decrements to starts. */
	size_t sum = 0;
	for (uint32_t v = 0; v < c->V; v++) {
		sum += c->off[v];
		c->off[v] = sum;
	}
	c->off[c->V] = sum;
	c->E = sum;
	c->adj = malloc((sum ? sum : 1) * sizeof(*c->adj));
	c->ekind = malloc(sum ? sum : 1);
	if (!c->adj || !c->ekind)
		return -ENOMEM;
	c->fill = true;
	data_edges(c);
	rt_edges(c);
	return 0;
}

/* ---- step 6: cycles ---------------------------------------------------- */

struct scc_range {
	size_t lo, hi; /* members[lo..hi) */
};

struct graph_scratch {
	uint32_t *a, *b, *stk, *cs, *members; /* V each */
	size_t *it;                           /* V */
	uint8_t *color;                       /* V */
	struct scc_range *scc;                /* the SCCs with a cycle */
	size_t nscc, capscc;
};

/* Iterative Tarjan: a = index, b = lowlink, cs/it = the call stack.
 * Members of each SCC end up contiguous in g->members. */
static int tarjan(struct ctx *c, struct graph_scratch *g)
{
	uint32_t V = c->V;
	uint32_t *index = g->a, *low = g->b, *stk = g->stk, *cs = g->cs;
	size_t *it = g->it;
	for (uint32_t v = 0; v < V; v++) {
		index[v] = NONE;
		c->comp[v] = NONE;
	}
	uint32_t next = 0, sp = 0, ncomp = 0;
	size_t nmem = 0;
	for (uint32_t root = 0; root < V; root++) {
		if (index[root] != NONE)
			continue;
		if (c->off[root] == c->off[root + 1]) {
			/* No out-edges: a trivial SCC of its own. */
			index[root] = next++;
			c->comp[root] = ncomp++;
			g->members[nmem++] = root;
			continue;
		}
		uint32_t top = 0;
		index[root] = low[root] = next++;
		stk[sp++] = root;
		cs[top] = root;
		it[top++] = c->off[root];
		while (top > 0) {
			uint32_t v = cs[top - 1];
			if (it[top - 1] < c->off[v + 1]) {
				uint32_t w = c->adj[it[top - 1]++];
				if (index[w] == NONE) {
					index[w] = low[w] = next++;
					stk[sp++] = w;
					cs[top] = w;
					it[top++] = c->off[w];
				} else if (c->comp[w] == NONE &&
				           index[w] < low[v]) {
					low[v] = index[w];
				}
				continue;
			}
			top--;
			if (top > 0 && low[v] < low[cs[top - 1]])
				low[cs[top - 1]] = low[v];
			if (low[v] != index[v])
				continue;
			size_t lo = nmem;
			uint32_t w;
			do {
				w = stk[--sp];
				c->comp[w] = ncomp;
				g->members[nmem++] = w;
			} while (w != v);
			ncomp++;
			if (nmem - lo < 2)
				continue;
			if (hb_grow((void **)&g->scc, &g->capscc, g->nscc + 1,
			            sizeof(*g->scc)))
				return -ENOMEM;
			g->scc[g->nscc++] = (struct scc_range){lo, nmem};
		}
	}
	return 0;
}

static inline bool usable(const struct ctx *c, size_t e, uint32_t comp,
                          int mask)
{
	return (c->ekind[e] & mask) && c->comp[c->adj[e]] == comp;
}

/* A node on a cycle of @mask edges inside SCC @comp, or NONE.
 * Iterative DFS; color: 0 white, 1 on the path, 2 done. */
static uint32_t find_cycle_node(struct ctx *c, struct graph_scratch *g,
                                const uint32_t *mem, size_t n, int mask)
{
	uint32_t comp = c->comp[mem[0]], found = NONE;
	uint32_t *cs = g->stk;
	size_t *it = g->it;
	for (size_t i = 0; i < n && found == NONE; i++) {
		uint32_t s = mem[i];
		if (g->color[s])
			continue;
		uint32_t top = 0;
		g->color[s] = 1;
		cs[top] = s;
		it[top++] = c->off[s];
		while (top > 0 && found == NONE) {
			uint32_t v = cs[top - 1];
			if (it[top - 1] < c->off[v + 1]) {
				size_t e = it[top - 1]++;
				if (!usable(c, e, comp, mask))
					continue;
				uint32_t w = c->adj[e];
				if (g->color[w] == 1) {
					found = w;
				} else if (g->color[w] == 0) {
					g->color[w] = 1;
					cs[top] = w;
					it[top++] = c->off[w];
				}
				continue;
			}
			g->color[v] = 2;
			top--;
		}
	}
	for (size_t i = 0; i < n; i++)
		g->color[mem[i]] = 0;
	return found;
}

/* Shortest cycle of @mask edges through @s inside its SCC (BFS).
 * Fills path[] (nodes) and kinds[] (edge from path[i] to the next);
 * returns its length. a = parent node, it = parent edge. */
static size_t bfs_cycle(struct ctx *c, struct graph_scratch *g,
                        const uint32_t *mem, size_t n, uint32_t s, int mask,
                        uint32_t *path, uint8_t *kinds)
{
	uint32_t comp = c->comp[s];
	uint32_t *q = g->stk, *parent = g->a;
	size_t *pedge = g->it;
	size_t qh = 0, qt = 0, len = 0;
	uint32_t last = NONE;
	size_t last_e = 0;
	g->color[s] = 1;
	q[qt++] = s;
	while (qh < qt && last == NONE) {
		uint32_t v = q[qh++];
		for (size_t e = c->off[v]; e < c->off[v + 1]; e++) {
			if (!usable(c, e, comp, mask))
				continue;
			uint32_t w = c->adj[e];
			if (w == s) {
				last = v;
				last_e = e;
				break;
			}
			if (g->color[w])
				continue;
			g->color[w] = 1;
			parent[w] = v;
			pedge[w] = e;
			q[qt++] = w;
		}
	}
	if (last != NONE) {
		/* Walk back from last to s, then reverse. */
		uint32_t v = last;
		size_t e = last_e;
		for (;;) {
			path[len] = v;
			kinds[len++] = c->ekind[e];
			if (v == s)
				break;
			e = pedge[v];
			v = parent[v];
		}
		for (size_t i = 0; i < len / 2; i++) {
			uint32_t t = path[i];
			path[i] = path[len - 1 - i];
			path[len - 1 - i] = t;
			uint8_t k = kinds[i];
			kinds[i] = kinds[len - 1 - i];
			kinds[len - 1 - i] = k;
		}
	}
	for (size_t i = 0; i < n; i++)
		g->color[mem[i]] = 0;
	return len;
}

static const char *edge_name(uint8_t kind)
{
	return kind == E_WW ? "ww" : kind == E_WR ? "wr" : "rw";
}

/* Describes an edge of @kind through operations @x (flags @fx) then @y
 * (@fy) when they are about the same key in the way @kind says; false
 * when they are not. */
static bool explain_ops(struct hb_sbuf *b, const struct sc_op *x, uint8_t fx,
                        const struct sc_op *y, uint8_t fy, uint8_t kind)
{
	if (x->key != y->key)
		return false;
	bool xw = x->write && !(fx & F_SUPERSEDED);
	bool yw = y->write && !(fy & F_SUPERSEDED);
	bool xr = !x->write && !(fx & F_INTERNAL);
	bool yr = !y->write && !(fy & F_INTERNAL);
	if (kind == E_WW && xw && yw && x->ver < y->ver)
		hb_sb_add(b,
		          "-ww(key %" PRIu64 ": v%" PRIu64 " then v%" PRIu64
		          ")->",
		          x->key, x->ver, y->ver);
	else if (kind == E_WR && xw && yr && x->ver == y->ver)
		hb_sb_add(b, "-wr(key %" PRIu64 " v%" PRIu64 ")->", x->key,
		          x->ver);
	else if (kind == E_RW && xr && yw && x->ver < y->ver)
		hb_sb_add(b,
		          "-rw(key %" PRIu64 ": read v%" PRIu64
		          ", overwritten by v%" PRIu64 ")->",
		          x->key, x->ver, y->ver);
	else
		return false;
	return true;
}

/* Which key an edge a -> b is about (for the description). */
static void explain(struct hb_sbuf *b, const struct ctx *c, uint32_t a,
                    uint32_t t, uint8_t kind, uint64_t *key_out)
{
	const struct sc_op *ops = c->h->ops;
	const struct sc_txn *tx = c->h->txns;
	uint32_t a0 = c->toff[a], a1 = c->toff[a + 1];
	uint32_t b0 = c->toff[t], b1 = c->toff[t + 1];
	*key_out = UINT64_MAX;
	if (kind == E_RT) {
		hb_sb_add(b, "-rt(done %" PRIu64 " < inv %" PRIu64 ")->",
		          tx[a].t_done, tx[t].t_inv);
		return;
	}
	if ((uint64_t)(a1 - a0) * (b1 - b0) > (1u << 22)) {
		hb_sb_add(b, "-%s->", edge_name(kind));
		return;
	}
	for (uint32_t i = a0; i < a1; i++) {
		const struct sc_op *x = &ops[c->tops[i]];
		uint8_t fx = c->opf[c->tops[i]];
		for (uint32_t j = b0; j < b1; j++) {
			if (explain_ops(b, x, fx, &ops[c->tops[j]],
			                c->opf[c->tops[j]], kind)) {
				*key_out = x->key;
				return;
			}
		}
	}
	hb_sb_add(b, "-%s->", edge_name(kind));
}

/* A cycle's path buffers: as found (event nodes included), then over
 * transactions only; each step's edge kind beside it. */
struct cyc_bufs {
	uint32_t *path, *tpath;
	uint8_t *kinds, *tkinds;
};

/* Cycle @len of @cb->path with its event nodes collapsed (txn -rt-> ev
 * ... -rt-> txn) into @cb->tpath; its length, and how many of its edges
 * are rw, wr and real-time. */
static size_t txn_cycle(const struct ctx *c, struct cyc_bufs *cb, size_t len,
                        int *nrw, int *nwr, int *nrt)
{
	size_t st = 0, tl = 0;
	while (st < len && cb->path[st] >= c->T)
		st++;
	*nrw = *nwr = *nrt = 0;
	for (size_t i = 0; i < len; i++) {
		size_t j = (st + i) % len;
		if (cb->path[j] >= c->T)
			continue;
		cb->tpath[tl] = cb->path[j];
		cb->tkinds[tl++] = cb->kinds[j];
		*nrw += cb->kinds[j] == E_RW;
		*nwr += cb->kinds[j] == E_WR;
		*nrt += cb->kinds[j] == E_RT;
	}
	return tl;
}

/* One cyclic SCC (@n nodes @mem): a shortest cycle in it, of the
 * strongest kind found first (ww, then with wr, data, all), noted as
 * its anomaly with its transactions and keys. */
static void note_cycle(struct ctx *c, struct graph_scratch *g,
                       const uint32_t *mem, size_t n, struct cyc_bufs *cb)
{
	static const int masks[] = {E_WW, E_WW | E_WR, E_DATA, E_ALL};
	uint32_t s = NONE;
	int mask = 0;
	for (size_t m = 0; m < 4 && s == NONE; m++) {
		mask = masks[m];
		s = find_cycle_node(c, g, mem, n, mask);
	}
	if (s == NONE)
		return; /* cannot happen: the SCC has a cycle */
	size_t len = bfs_cycle(c, g, mem, n, s, mask, cb->path, cb->kinds);
	int nrw, nwr, nrt;
	size_t tl = txn_cycle(c, cb, len, &nrw, &nwr, &nrt);
	enum sc_kind kd = nrt       ? SC_REALTIME
	                  : nrw > 1 ? SC_G2
	                  : nrw     ? SC_GSINGLE
	                  : nwr     ? SC_G1C
	                            : SC_G0;
	char *text;
	struct hb_sbuf b = note(c, kd, &text);
	if (!text)
		return;
	hb_sb_add(&b, "cycle of %zu txns (SCC of %zu nodes): ", tl, n);
	uint64_t keys[2] = {UINT64_MAX, UINT64_MAX};
	for (size_t i = 0; i < tl; i++) {
		if (i >= 12) {
			hb_sb_add(&b, " ... ");
			break;
		}
		sb_txn(&b, c, cb->tpath[i]);
		uint64_t key;
		explain(&b, c, cb->tpath[i], cb->tpath[(i + 1) % tl],
		        cb->tkinds[i], &key);
		if (i < 2)
			keys[i] = key;
	}
	sb_txn(&b, c, cb->tpath[0]);
	if (tl == 2 && nrw == 1 && !nrt && keys[0] == keys[1] &&
	    keys[0] != UINT64_MAX)
		hb_sb_add(&b, " [lost update of key %" PRIu64 "]", keys[0]);
	if (tl == 2 && nrw == 2 && keys[0] != keys[1])
		hb_sb_add(&b, " [write skew]");
	if (nrt)
		hb_sb_add(&b, " [a transaction saw state older than one that "
		              "had already completed]");
}

static void scratch_free(struct graph_scratch *g)
{
	free(g->a);
	free(g->b);
	free(g->stk);
	free(g->members);
	free(g->it);
	free(g->color);
	free(g->cs);
	free(g->scc);
}

static int scratch_alloc(struct graph_scratch *g, size_t nv)
{
	g->a = malloc(nv * sizeof(uint32_t));
	g->b = malloc(nv * sizeof(uint32_t));
	g->stk = malloc(nv * sizeof(uint32_t));
	g->members = malloc(nv * sizeof(uint32_t));
	g->cs = malloc(nv * sizeof(uint32_t));
	g->it = malloc(nv * sizeof(size_t));
	g->color = calloc(nv, 1);
	if (!g->a || !g->b || !g->stk || !g->members || !g->cs || !g->it ||
	    !g->color)
		return -ENOMEM; /* the caller frees what was made */
	return 0;
}

/* The dependency graph's cyclic SCCs (Tarjan), one anomaly noted for
 * each. 0 or -ENOMEM. */
static int cycles(struct ctx *c)
{
	int rc = -ENOMEM;
	size_t nv = c->V ? c->V : 1;
	struct graph_scratch g = {0};
	struct cyc_bufs cb = {0};
	c->comp = malloc(nv * sizeof(uint32_t));
	if (scratch_alloc(&g, nv) || !c->comp || tarjan(c, &g))
		goto out;
	c->r->nsccs_cyclic = g.nscc;
	if (g.nscc) {
		/* Cycles are no longer than the largest SCC, <= V nodes. */
		cb.path = malloc(nv * sizeof(*cb.path));
		cb.kinds = malloc(nv);
		cb.tpath = malloc(nv * sizeof(*cb.tpath));
		cb.tkinds = malloc(nv);
		if (!cb.path || !cb.kinds || !cb.tpath || !cb.tkinds)
			goto out;
	}
	for (size_t k = 0; k < g.nscc; k++)
		note_cycle(c, &g, g.members + g.scc[k].lo,
		           g.scc[k].hi - g.scc[k].lo, &cb);
	rc = 0;
out:
	free(cb.path);
	free(cb.kinds);
	free(cb.tpath);
	free(cb.tkinds);
	scratch_free(&g);
	return rc;
}

/* ---- sc_check ---------------------------------------------------------- */

static void internal_anomalies(struct ctx *c)
{
	const struct sc_op *ops = c->h->ops;
	for (uint32_t o = 0; o < c->M; o++) {
		if (!(c->opf[o] & F_INTBAD) || !c->incl[ops[o].txn])
			continue;
		char *text;
		struct hb_sbuf b = note(c, SC_INTERNAL, &text);
		if (!text)
			continue;
		/* The own latest write before it, for the description. */
		uint32_t t = ops[o].txn;
		uint64_t want = 0;
		for (uint32_t j = c->toff[t]; j < c->toff[t + 1]; j++) {
			uint32_t x = c->tops[j];
			if (x == o)
				break;
			if (ops[x].write && ops[x].key == ops[o].key)
				want = ops[x].ver;
		}
		sb_txn(&b, c, t);
		hb_sb_add(&b,
		          " read key %" PRIu64 " version %" PRIu64
		          " after writing version %" PRIu64 " itself",
		          ops[o].key, ops[o].ver, want);
	}
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The outcomes counted; -EINVAL for a transaction that never ended. */
static int count_outcomes(const sc_history *h, sc_report *r, uint32_t T)
{
	for (uint32_t t = 0; t < T; t++) {
		int oc = h->txns[t].outcome;
		if (!oc)
			return -EINVAL;
		r->ncommitted += oc == SC_COMMITTED;
		r->naborted += oc == SC_ABORTED;
	}
	return 0;
}

static int ctx_alloc(struct ctx *c)
{
	size_t nt = (size_t)c->T + 1, nm = c->M ? c->M : 1;
	c->toff = calloc(nt, sizeof(*c->toff));
	c->tops = malloc(nm * sizeof(*c->tops));
	c->opf = calloc(nm, 1);
	c->src = malloc(nm * sizeof(*c->src));
	c->incl = calloc(nt, 1);
	c->contested = calloc(nt, 1);
	c->srt = malloc(nm * sizeof(*c->srt));
	return c->toff && c->tops && c->opf && c->src && c->incl &&
	                       c->contested && c->srt
	               ? 0
	               : -ENOMEM;
}

static void ctx_free(struct ctx *c)
{
	free(c->toff);
	free(c->tops);
	free(c->opf);
	free(c->src);
	free(c->incl);
	free(c->contested);
	free(c->srt);
	free(c->ends);
	free(c->starts);
	free(c->evtime);
	free(c->off);
	free(c->adj);
	free(c->ekind);
	free(c->comp);
}

/* 1. Operations by transaction, program order kept (a counting sort:
 * toff[t] is where transaction t's operations start in tops). */
static void group_by_txn(struct ctx *c)
{
	const sc_history *h = c->h;
	for (uint32_t o = 0; o < c->M; o++)
		c->toff[h->ops[o].txn + 1]++;
	for (uint32_t t = 0; t < c->T; t++)
		c->toff[t + 1] += c->toff[t];
	for (uint32_t o = 0; o < c->M; o++)
		c->tops[c->toff[h->ops[o].txn]++] = o;
	for (uint32_t t = c->T; t > 0; t--)
		c->toff[t] = c->toff[t - 1];
	c->toff[0] = 0;
}

/* 3, 4: which transactions are in the history checked, and each read's
 * source. Ties between unknown claimants go to one that is needed
 * anyway. */
static int choose_included(struct ctx *c)
{
	find_contested(c);
	find_sources(c);
	if (include(c, false))
		return -ENOMEM;
	find_sources(c);
	memset(c->incl, 0, c->T);
	if (include(c, true))
		return -ENOMEM;
	for (uint32_t t = 0; t < c->T; t++)
		if (c->h->txns[t].outcome == SC_UNKNOWN) {
			if (c->incl[t])
				c->r->nunknown_included++;
			else
				c->r->nunknown_dropped++;
		}
	return 0;
}

/* Steps 1 to 6 over an allocated context. */
static int check_steps(struct ctx *c)
{
	const sc_history *h = c->h;
	group_by_txn(c);
	if (per_txn(c))
		return -ENOMEM;
	/* 2. external operations sorted by (key, version) */
	for (uint32_t o = 0; o < c->M; o++)
		if (!(c->opf[o] & F_INTERNAL))
			c->srt[c->nsrt++] =
			        (struct rec){h->ops[o].key, h->ops[o].ver, o};
	if (radix_sort(c->srt, c->nsrt) || choose_included(c))
		return -ENOMEM;
	internal_anomalies(c);
	/* 5 (per-read anomalies are found in the count pass) */
	if (build_graph(c))
		return -ENOMEM;
	c->r->nnodes = c->V;
	c->r->nedges = c->E;
	/* 6 */
	if (cycles(c))
		return -ENOMEM;
	return c->r->total > INT_MAX ? INT_MAX : (int)c->r->total;
}

int sc_check(const sc_history *h, sc_report *r)
{
	if (!h || !r)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	if (h->err)
		return h->err;
	double t0 = now_ms();
	struct ctx c = {.h = h, .r = r};
	c.T = (uint32_t)h->ntxns;
	c.M = (uint32_t)h->nops;
	if (count_outcomes(h, r, c.T))
		return -EINVAL; /* never ended */
	r->ntxns = c.T;
	r->nops = c.M;
	int rc = ctx_alloc(&c);
	if (!rc)
		rc = check_steps(&c);
	r->elapsed_ms = now_ms() - t0;
	ctx_free(&c);
	return rc;
}

void sc_report_print(FILE *f, const sc_report *r)
{
	fprintf(f,
	        "sercheck: %" PRIu64 " txns (%" PRIu64 " committed, %" PRIu64
	        " aborted, unknown: %" PRIu64 " taken as committed, %" PRIu64
	        " as aborted), %" PRIu64 " ops; graph %" PRIu64
	        " nodes %" PRIu64 " edges; %.1f ms\n",
	        r->ntxns, r->ncommitted, r->naborted, r->nunknown_included,
	        r->nunknown_dropped, r->nops, r->nnodes, r->nedges,
	        r->elapsed_ms);
	if (!r->total) {
		fprintf(f, "sercheck: strictly serializable (0 anomalies)\n");
		return;
	}
	fprintf(f, "sercheck: %" PRIu64 " anomalies\n", r->total);
	for (int k = 0; k < SC_NKINDS; k++) {
		if (!r->count[k])
			continue;
		fprintf(f, "  %" PRIu64 " x %s\n", r->count[k], kind_names[k]);
		for (size_t i = 0; i < r->nexamples; i++)
			if (r->examples[i].kind == (enum sc_kind)k)
				fprintf(f, "    - %s\n", r->examples[i].text);
	}
}
