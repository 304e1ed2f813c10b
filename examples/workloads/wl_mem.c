/*
 * workload_bench's in-memory limit: TATP and SmallBank with the same
 * rows, keys, distributions and transaction logic as wl_tatp.c and
 * wl_bank.c, in one thread of this process on plain open-addressing hash
 * tables: no replication, no messages, no concurrency control. What a
 * core can do at best; libfarm's per-core figure is compared with it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_int.h"
#include "wl_peers.h"

struct mtab {
	uint64_t *keys;
	void **vals;
	uint64_t mask;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static int mt_init(struct mtab *t, uint64_t n)
{
	uint64_t cap = 16;
	while (cap < n * 2)
		cap <<= 1;
	t->keys = calloc(cap, sizeof(uint64_t));
	t->vals = calloc(cap, sizeof(void *));
	t->mask = cap - 1;
	return t->keys && t->vals ? 0 : -ENOMEM;
}

static void mt_put(struct mtab *t, uint64_t k, void *v)
{
	uint64_t i = mix64(k) & t->mask;
	while (t->keys[i] && t->keys[i] != k)
		i = (i + 1) & t->mask;
	t->keys[i] = k;
	t->vals[i] = v;
}

static void *mt_get(const struct mtab *t, uint64_t k)
{
	uint64_t i = mix64(k) & t->mask;
	while (t->keys[i]) {
		if (t->keys[i] == k)
			return t->vals[i];
		i = (i + 1) & t->mask;
	}
	return NULL;
}

static void mt_free(struct mtab *t)
{
	free(t->keys);
	free(t->vals);
}

static uint64_t mkey(char table, uint64_t id, unsigned sub)
{
	return (uint64_t)(unsigned char)table << 56 | id << 4 | sub;
}

static uint64_t nbr_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < 15; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h | 1;
}

struct mem {
	const struct wl_opts *o;
	struct mtab idx, nbr;
	void *rows; /* one block for every row */
	uint64_t rng;
};

/* ---- TATP -----------------------------------------------------------------
 */

struct tsub_rows {
	struct tatp_sub sub;
	struct tatp_ai ai[4];
	struct tatp_sf sf[4];
	struct tatp_cf cf[4];
};

static void tatp_fill(struct mem *m, uint64_t s, struct tsub_rows *r)
{
	uint64_t rng = s * 0x9e3779b97f4a7c15ull + m->o->seed;
	r->sub.s_id = s;
	snprintf(r->sub.sub_nbr, 16, "%015llu", (unsigned long long)s);
	r->sub.vlr_location = (uint32_t)wl_rand(&rng);
	mt_put(&m->idx, mkey('S', s, 0), &r->sub);
	mt_put(&m->nbr, nbr_hash(r->sub.sub_nbr), &r->sub);
	for (unsigned t = 0; t < 4; t++) {
		if (wl_uni(&rng, 0, 7) < 5) /* 2.5 rows a subscriber */
			mt_put(&m->idx, mkey('A', s, t + 1), &r->ai[t]);
		if (wl_uni(&rng, 0, 7) < 5) {
			r->sf[t].is_active = wl_uni(&rng, 0, 99) < 85;
			mt_put(&m->idx, mkey('F', s, t + 1), &r->sf[t]);
			mt_put(&m->idx, mkey('C', s, t + 1), &r->cf[t]);
			for (int k = 0; k < 3; k++)
				if (wl_uni(&rng, 0, 1)) {
					r->cf[t].slot[k].present = 1;
					r->cf[t].slot[k].end_time =
					        (uint8_t)(k * 8 +
					                  wl_uni(&rng, 1, 8));
				}
		}
	}
}

static uint64_t nurand(struct mem *m)
{
	uint64_t p = m->o->scale, a = p <= 1000000 ? 65535 : 1048575;
	return ((wl_uni(&m->rng, 0, a) | wl_uni(&m->rng, 1, p)) % p) + 1;
}

static struct tatp_sub *by_nbr(struct mem *m)
{
	char n[16];
	snprintf(n, sizeof(n), "%015llu", (unsigned long long)nurand(m));
	struct tatp_sub *s = mt_get(&m->nbr, nbr_hash(n));
	return s && !memcmp(s->sub_nbr, n, 15) ? s : NULL;
}

static int tatp_mem_txn(struct mem *m, enum wl_txn t)
{
	volatile struct tatp_sub copy;
	unsigned type = (unsigned)wl_uni(&m->rng, 1, 4);
	unsigned st = (unsigned)wl_uni(&m->rng, 0, 2);
	struct tatp_sub *su;
	struct tatp_sf *sf;
	struct tatp_cf *cf;
	switch (t) {
	case WT_GET_SUB:
		su = mt_get(&m->idx, mkey('S', nurand(m), 0));
		memcpy((void *)&copy, su, sizeof(copy));
		return 0;
	case WT_GET_ACCESS: return !mt_get(&m->idx, mkey('A', nurand(m), type));
	case WT_GET_NEWDEST: {
		uint64_t s = nurand(m);
		unsigned end = (unsigned)wl_uni(&m->rng, 1, 24);
		sf = mt_get(&m->idx, mkey('F', s, type));
		cf = mt_get(&m->idx, mkey('C', s, type));
		for (unsigned k = 0; sf && sf->is_active && k < 3; k++)
			if (cf->slot[k].present && k * 8 <= st * 8 &&
			    end < cf->slot[k].end_time)
				return 0;
		return 1;
	}
	case WT_UPD_SUB: {
		uint64_t s = nurand(m);
		sf = mt_get(&m->idx, mkey('F', s, type));
		if (!sf)
			return 1;
		su = mt_get(&m->idx, mkey('S', s, 0));
		su->bits =
		        (uint16_t)((su->bits & ~1u) | (wl_rand(&m->rng) & 1));
		sf->data_a = (uint8_t)wl_rand(&m->rng);
		return 0;
	}
	case WT_UPD_LOC:
		su = by_nbr(m);
		su->vlr_location = (uint32_t)wl_rand(&m->rng);
		return 0;
	case WT_INS_CF:
	case WT_DEL_CF:
		su = by_nbr(m);
		cf = mt_get(&m->idx, mkey('C', su->s_id, type));
		if (!cf || cf->slot[st].present == (t == WT_INS_CF))
			return 1;
		cf->slot[st].present = t == WT_INS_CF;
		cf->slot[st].end_time =
		        (uint8_t)(st * 8 + wl_uni(&m->rng, 1, 8));
		return 0;
	default: return -EINVAL;
	}
}

/* ---- SmallBank ------------------------------------------------------------
 */

static uint64_t bank_pick(struct mem *m)
{
	const struct wl_opts *o = m->o;
	uint64_t hot = o->scale * o->hot_pct / 100;
	hot = hot ? hot : 1;
	return wl_uni(&m->rng, 0, 99) < o->hot_prob
	               ? wl_uni(&m->rng, 1, hot)
	               : wl_uni(&m->rng, 1, o->scale);
}

static int bank_mem_txn(struct mem *m, enum wl_txn t)
{
	uint64_t a = bank_pick(m), b = bank_pick(m);
	int64_t v = (int64_t)wl_uni(&m->rng, 1, 100);
	while (b == a && m->o->scale > 1)
		b = bank_pick(m);
	struct bank_row *sa = mt_get(&m->idx, mkey('s', a, 0)),
	                *ca = mt_get(&m->idx, mkey('c', a, 0)),
	                *cb = mt_get(&m->idx, mkey('c', b, 0));
	volatile int64_t sink;
	switch (t) {
	case WT_BALANCE:
		sink = sa->bal + ca->bal;
		(void)sink;
		return 0;
	case WT_DEPOSIT:
		ca->bal += v;
		ca->ver++;
		return 0;
	case WT_TRANSACT_SAV:
		sa->bal += v;
		sa->ver++;
		return 0;
	case WT_AMALGAMATE:
		cb->bal += sa->bal + ca->bal;
		sa->bal = ca->bal = 0;
		sa->ver++, ca->ver++, cb->ver++;
		return 0;
	case WT_WRITE_CHECK:
		ca->bal -= sa->bal + ca->bal < v ? v + 1 : v;
		ca->ver++;
		return 0;
	case WT_SEND_PAYMENT:
		if (ca->bal < v)
			return 1;
		ca->bal -= v;
		cb->bal += v;
		ca->ver++, cb->ver++;
		return 0;
	default: return -EINVAL;
	}
}

/* ---- the run --------------------------------------------------------------
 */

static int mem_load(struct mem *m)
{
	const struct wl_opts *o = m->o;
	bool tatp = o->kind == WL_TATP;
	size_t row =
	        tatp ? sizeof(struct tsub_rows) : 2 * sizeof(struct bank_row);
	m->rows = calloc(o->scale + 1, row);
	if (!m->rows || mt_init(&m->idx, o->scale * (tatp ? 13 : 2)) ||
	    mt_init(&m->nbr, tatp ? o->scale : 1))
		return -ENOMEM;
	for (uint64_t id = 1; id <= o->scale; id++) {
		char *r = (char *)m->rows + id * row;
		if (tatp) {
			tatp_fill(m, id, (struct tsub_rows *)r);
			continue;
		}
		struct bank_row *b = (struct bank_row *)r;
		b[0].bal = b[1].bal = 30000;
		mt_put(&m->idx, mkey('s', id, 0), &b[0]);
		mt_put(&m->idx, mkey('c', id, 0), &b[1]);
	}
	return 0;
}

int wl_mem_run(const struct wl_opts *o, struct wl_bres *out)
{
	if (o->kind == WL_TPCC)
		return wl_mem_tpcc_run(o, out);
	struct mem m = {.o = o, .rng = (o->seed + 3) * 0x9e3779b97f4a7c15ull};
	uint64_t *hist = calloc(WL_HIST_BUCKETS, sizeof(uint64_t));
	int rc = hist ? mem_load(&m) : -ENOMEM;
	int from, to;
	uint64_t n = 0, t0 = wl_now_ns(), cpu0 = wl_thread_cpu_ns(),
	         end = t0 + o->duration_ms * 1000000ull;
	wl_types(o->kind, &from, &to);
	while (!rc && wl_now_ns() < end) {
		/* Batches of 64 between clock reads of the deadline. */
		for (int i = 0; i < 64 && rc >= 0; i++) {
			unsigned r = (unsigned)wl_uni(&m.rng, 0, 99), acc = 0;
			int t = from;
			while (t < to - 1 && r >= (acc += o->mix[t]))
				t++;
			uint64_t s = wl_now_ns();
			rc = o->kind == WL_TATP
			             ? tatp_mem_txn(&m, (enum wl_txn)t)
			             : bank_mem_txn(&m, (enum wl_txn)t);
			hist[wl_hist_bucket(wl_now_ns() - s)]++;
			n++;
		}
		rc = rc < 0 ? rc : 0;
	}
	double secs = (double)(wl_now_ns() - t0) / 1e9;
	*out = (struct wl_bres){.tput = n / secs,
	                        .cpu_tput = wl_thread_cpu_rate(n, cpu0),
	                        .p50 = wl_hist_pct(hist, 0.5),
	                        .p99 = wl_hist_pct(hist, 0.99),
	                        .cores = 1,
	                        .clients = 1};
	snprintf(out->note, sizeof(out->note), "one thread, plain hash tables");
	free(hist);
	free(m.rows);
	mt_free(&m.idx);
	mt_free(&m.nbr);
	return rc;
}
