/*
 * TATP on libfarm (TATP specification 1.0): the four tables as objects
 * indexed by the KV store ('S' subscriber, 'A' access_info, 'F'
 * special_facility, 'C' call_forwarding + s_id + type -> fat pointer;
 * 'N' + sub_nbr -> s_id, the secondary index), non-uniform subscriber
 * ids, single-row reads lock-free, and the single-object updates
 * (UPDATE_LOCATION, INSERT/DELETE_CALL_FORWARDING) shipped to the
 * machine that owns the subscriber, which runs them as local
 * transactions (FaRM's function shipping); a client whose owner is gone
 * or no longer primary runs them itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_tatp.h"

/* The 15 digits of a number (not terminated). */
static void nbr_of(uint64_t s_id, char *out)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%015llu",
	         (unsigned long long)(s_id % 1000000000000000ull));
	memcpy(out, buf, 15);
}

static struct wl_key nbr_key(uint64_t s_id)
{
	struct wl_key k = {.len = 16};
	k.b[0] = 'N';
	nbr_of(s_id, (char *)k.b + 1);
	return k;
}

/* ---- load -----------------------------------------------------------------
 */

/* Pick @n distinct values of 0..@k-1 (bit i: i chosen). */
static unsigned pick_set(uint64_t *rng, unsigned n, unsigned k)
{
	unsigned set = 0;
	while ((unsigned)__builtin_popcount(set) < n)
		set |= 1u << wl_uni(rng, 0, k - 1);
	return set;
}

struct row_ptrs {
	farm_fatptr sub, ai[4], sf[4], cf[4];
	unsigned ai_set, sf_set;
};

static int alloc_row(farm_tx *tx, uint32_t size, farm_fatptr *p, void **d)
{
	return farm_tx_alloc_sync(tx, size, FARM_GADDR_NULL, p, d);
}

static int make_sub(struct wl_machine *m, farm_tx *tx, uint64_t s,
                    struct row_ptrs *rp)
{
	uint64_t rng = s * 0x9e3779b97f4a7c15ull + m->o->seed;
	void *d;
	int rc = alloc_row(tx, sizeof(struct tatp_sub), &rp->sub, &d);
	if (rc)
		return rc;
	struct tatp_sub *su = d;
	su->s_id = s;
	nbr_of(s, su->sub_nbr);
	su->bits = (uint16_t)wl_rand(&rng);
	for (int i = 0; i < 10; i++) {
		su->hex[i] = (uint8_t)wl_uni(&rng, 0, 15);
		su->byte2[i] = (uint8_t)wl_rand(&rng);
	}
	su->msc_location = (uint32_t)wl_rand(&rng);
	su->vlr_location = (uint32_t)wl_rand(&rng);
	rp->ai_set = pick_set(&rng, (unsigned)wl_uni(&rng, 1, 4), 4);
	rp->sf_set = pick_set(&rng, (unsigned)wl_uni(&rng, 1, 4), 4);
	for (int t = 0; t < 4 && !rc; t++) {
		if (!(rp->ai_set >> t & 1))
			continue;
		rc = alloc_row(tx, sizeof(struct tatp_ai), &rp->ai[t], &d);
		if (!rc) {
			struct tatp_ai *ai = d;
			ai->data1 = (uint8_t)wl_rand(&rng);
			ai->data2 = (uint8_t)wl_rand(&rng);
			memcpy(ai->data3, "ABC", 3);
			memcpy(ai->data4, "ABCDE", 5);
		}
		m->loaded[1]++;
	}
	for (int t = 0; t < 4 && !rc; t++) {
		if (!(rp->sf_set >> t & 1))
			continue;
		rc = alloc_row(tx, sizeof(struct tatp_sf), &rp->sf[t], &d);
		if (rc)
			break;
		struct tatp_sf *sf = d;
		sf->is_active = wl_uni(&rng, 0, 99) < 85;
		sf->error_cntrl = (uint8_t)wl_rand(&rng);
		sf->data_a = (uint8_t)wl_rand(&rng);
		memcpy(sf->data_b, "XYZZY", 5);
		m->loaded[2]++;
		rc = alloc_row(tx, sizeof(struct tatp_cf), &rp->cf[t], &d);
		if (rc)
			break;
		struct tatp_cf *cf = d;
		/* 0 to 3 rows, start times distinct of 0, 8, 16. */
		unsigned set = pick_set(&rng, (unsigned)wl_uni(&rng, 0, 3), 3);
		for (int k = 0; k < 3; k++)
			if (set >> k & 1) {
				cf->slot[k].present = 1;
				cf->slot[k].end_time =
				        (uint8_t)(k * 8 + wl_uni(&rng, 1, 8));
				nbr_of(wl_rand(&rng) % 1000000000000000ull,
				       cf->slot[k].numberx);
				m->loaded[3]++;
			}
	}
	return rc;
}

static int put_ptr(struct wl_machine *m, farm_loop *loop, char table,
                   uint64_t s, unsigned t, const farm_fatptr *p)
{
	struct wl_key k = wl_key_make(table, s, (uint8_t)t);
	return wl_kv_put(m, loop, &k, p, sizeof(*p));
}

static int index_sub(struct wl_machine *m, farm_loop *loop, uint64_t s,
                     const struct row_ptrs *rp)
{
	struct wl_key nk = nbr_key(s);
	int rc = put_ptr(m, loop, 'S', s, 0, &rp->sub);
	if (!rc)
		rc = wl_kv_put(m, loop, &nk, &s, sizeof(s));
	for (unsigned t = 0; t < 4 && !rc; t++) {
		if (rp->ai_set >> t & 1)
			rc = put_ptr(m, loop, 'A', s, t + 1, &rp->ai[t]);
		if (!rc && rp->sf_set >> t & 1)
			rc = put_ptr(m, loop, 'F', s, t + 1, &rp->sf[t])
			             ?: put_ptr(m, loop, 'C', s, t + 1,
			                        &rp->cf[t]);
	}
	return rc;
}

#define LOAD_BATCH 8

/* Allocate and fill the rows of up to LOAD_BATCH subscribers from @s (ids
 * this machine owns) in one transaction, run again while it fails
 * retryably (a loaded host can time a commit out). *@n: how many. */
static int alloc_batch(struct wl_machine *m, farm_loop *loop, uint64_t s,
                       struct row_ptrs *rp, unsigned *n)
{
	uint64_t saved[4], dl = wl_now_ns() + 20ull * 1000000000ull;
	memcpy(saved, m->loaded, sizeof(saved));
	for (;;) {
		farm_tx *tx;
		int rc = farm_tx_begin(m->txm, loop, &tx);
		if (rc)
			return rc;
		*n = 0;
		for (uint64_t id = s;
		     *n < LOAD_BATCH && id <= m->o->scale && !rc;
		     id += m->o->machines)
			rc = make_sub(m, tx, id, &rp[(*n)++]);
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (!rc || !wl_retryable(rc) || wl_now_ns() > dl)
			return rc;
		memcpy(m->loaded, saved, sizeof(saved));
	}
}

/* The ledgers of every client at this machine (key 'T', the client's
 * number, this machine). */
static int load_ledgers(struct wl_machine *m, farm_loop *loop)
{
	int rc = 0;
	for (unsigned i = 0; i < m->o->machines && !rc; i++)
		for (unsigned t = 0; t < m->o->threads && !rc; t++) {
			uint64_t dl = wl_now_ns() + 20ull * 1000000000ull;
			farm_fatptr p;
			for (;;) {
				farm_tx *tx;
				void *d;
				rc = farm_tx_begin(m->txm, loop, &tx);
				if (rc)
					return rc;
				rc = alloc_row(tx, sizeof(struct tatp_ledger),
				               &p, &d);
				if (!rc) {
					memset(d, 0,
					       sizeof(struct tatp_ledger));
					rc = farm_tx_commit_sync(tx);
				}
				farm_tx_free(tx);
				if (!rc || !wl_retryable(rc) ||
				    wl_now_ns() > dl)
					break;
			}
			if (!rc)
				rc = put_ptr(m, loop, 'T', i * 64u + t, m->me,
				             &p);
		}
	return rc;
}

static int tatp_load(struct wl_machine *m, farm_loop *loop)
{
	const struct wl_opts *o = m->o;
	struct row_ptrs rp[LOAD_BATCH];
	uint64_t s = m->me ? m->me : o->machines; /* ids this machine owns */
	int rc = 0;
	m->loaded[0] = 0;
	while (s <= o->scale && !rc) {
		unsigned n = 0;
		rc = alloc_batch(m, loop, s, rp, &n);
		for (unsigned i = 0; i < n && !rc; i++, m->loaded[0]++)
			rc = index_sub(m, loop, s + i * o->machines, &rp[i]);
		s += (uint64_t)n * o->machines;
	}
	return rc ? rc : load_ledgers(m, loop);
}

/* ---- transactions ---------------------------------------------------------
 */

static uint64_t nurand_sub(struct wl_client *c)
{
	uint64_t p = c->m->o->scale;
	uint64_t a = p <= 1000000 ? 65535 : p <= 10000000 ? 1048575 : 2097151;
	uint64_t s = ((wl_uni(&c->rng, 0, a) | wl_uni(&c->rng, 1, p)) % p) + 1;
	return wl_pick_id(c, s);
}

/* ---- the client's row addresses ------------------------------------------
 * Rows never move in TATP: every row is allocated at the load and never
 * freed (a call forwarding insert or delete changes a slot of its
 * (s_id, sf_type) object, never the object or its index entry), and the
 * index does not change during the run. So a client keeps what its
 * lookups found, absences too, and a single-row read is one READ of the
 * row instead of two (the index's, then the row's), as the in-memory
 * limit reads its hash table once. A kept pointer is still checked: a
 * lock-free read that finds its object freed (FARM_EFREED) forgets it
 * and asks the index again (wl_rowcache.c). */
#define RC_MAX_BITS 18 /* 8 MiB a client */

/* The cache of @c, made at first use (about 16 keys a subscriber);
 * NULL without memory (lookups then go to the index each time). */
static struct wl_rowcache *rc_of(struct wl_client *c)
{
	if (!c->app)
		c->app = wl_rowcache_new(16 * c->m->o->scale, RC_MAX_BITS);
	return c->app;
}

static void tatp_fini(struct wl_machine *m)
{
	for (unsigned i = 0; i < WL_MAX_THREADS; i++) {
		wl_rowcache_free(m->cl[i].app);
		m->cl[i].app = NULL;
		free(m->cl[i].ships);
		m->cl[i].ships = NULL;
	}
}

static uint64_t rc_key(char table, uint64_t s, unsigned t)
{
	return (uint64_t)(uint8_t)table << 56 | (uint64_t)(t & 0xff) << 48 |
	       (s & ((1ull << 48) - 1));
}

int wl_tatp_get_ptr(struct wl_client *c, char table, uint64_t s, unsigned t,
                    farm_fatptr *p)
{
	struct wl_key k = wl_key_make(table, s, (uint8_t)t);
	return wl_rowcache_get(c, rc_of(c), rc_key(table, s, t), &k, p,
	                       sizeof(*p));
}

/* A single-row read, lock-free: 0, or 1 when the row does not exist. */
static int read_one(struct wl_client *c, char table, uint64_t s, unsigned t,
                    void *buf, uint32_t size)
{
	for (int fresh = 0;; fresh++) {
		farm_fatptr p;
		int rc = wl_tatp_get_ptr(c, table, s, t, &p);
		if (rc == -ENOENT)
			return 1;
		if (!rc)
			rc = wl_lf_read(c, p, buf, size);
		if (rc != FARM_EFREED || fresh)
			return rc;
		wl_rowcache_forget(rc_of(c), rc_key(table, s, t));
	}
}

/* read_one from the index itself, never the cache (the check counts
 * what the index holds). */
static int read_indexed(struct wl_client *c, char table, uint64_t s, unsigned t,
                        void *buf, uint32_t size)
{
	farm_fatptr p;
	struct wl_key k = wl_key_make(table, s, (uint8_t)t);
	int rc = wl_kv_ptr(c, &k, &p, sizeof(p));
	if (rc == -ENOENT)
		return 1;
	return rc ? rc : wl_lf_read(c, p, buf, size);
}

int wl_tatp_run_tx(struct wl_client *c, tx_body body, void *arg)
{
	uint64_t dl = wl_now_ns() + 20ull * 1000000000ull;
	for (unsigned tries = 1;; tries++) {
		farm_tx *tx;
		int rc = farm_tx_begin(c->m->txm, c->loop, &tx);
		if (rc == 0) {
			rc = body(c, tx, arg);
			if (rc == 0)
				rc = farm_tx_commit_sync(tx);
			farm_tx_free(tx);
		}
		if (rc >= 0 || !wl_retryable(rc) || wl_now_ns() > dl)
			return rc;
		c->res.retries++;
		wl_backoff(c, tries);
	}
}

struct newdest {
	farm_fatptr sf, cf;
	unsigned start, end;
	int found;
};

static int newdest_body(struct wl_client *c, farm_tx *tx, void *arg)
{
	(void)c;
	struct newdest *q = arg;
	const void *a, *b;
	int rc = farm_tx_read_sync(tx, q->sf.addr, sizeof(struct tatp_sf), &a);
	if (!rc)
		rc = farm_tx_read_sync(tx, q->cf.addr, sizeof(struct tatp_cf),
		                       &b);
	if (rc)
		return rc;
	const struct tatp_sf *sf = a;
	const struct tatp_cf *cf = b;
	q->found = 0;
	for (unsigned k = 0; k < 3 && sf->is_active; k++)
		if (cf->slot[k].present && k * 8 <= q->start &&
		    q->end < cf->slot[k].end_time)
			q->found = 1;
	return 0;
}

static int get_new_dest(struct wl_client *c)
{
	uint64_t s = nurand_sub(c);
	unsigned t = (unsigned)wl_uni(&c->rng, 1, 4);
	struct newdest q = {.start = (unsigned)wl_uni(&c->rng, 0, 2) * 8,
	                    .end = (unsigned)wl_uni(&c->rng, 1, 24)};
	int rc = wl_tatp_get_ptr(c, 'F', s, t, &q.sf);
	if (rc == -ENOENT)
		return 1;
	if (!rc)
		rc = wl_tatp_get_ptr(c, 'C', s, t, &q.cf);
	if (!rc)
		rc = wl_tatp_run_tx(c, newdest_body, &q);
	return rc ? rc : !q.found;
}

struct updsub {
	farm_fatptr sub, sf;
	unsigned bit, data_a;
};

static int updsub_body(struct wl_client *c, farm_tx *tx, void *arg)
{
	(void)c;
	struct updsub *q = arg;
	const void *a, *b;
	void *wa, *wb;
	int rc =
	        farm_tx_read_sync(tx, q->sub.addr, sizeof(struct tatp_sub), &a);
	if (!rc)
		rc = farm_tx_read_sync(tx, q->sf.addr, sizeof(struct tatp_sf),
		                       &b);
	if (!rc)
		rc = farm_tx_write(tx, q->sub.addr, &wa);
	if (!rc)
		rc = farm_tx_write(tx, q->sf.addr, &wb);
	if (rc)
		return rc;
	struct tatp_sub *su = wa;
	su->bits = (uint16_t)((su->bits & ~1u) | q->bit);
	((struct tatp_sf *)wb)->data_a = (uint8_t)q->data_a;
	return 0;
}

static int upd_sub(struct wl_client *c)
{
	uint64_t s = nurand_sub(c);
	struct updsub q = {.bit = (unsigned)wl_uni(&c->rng, 0, 1),
	                   .data_a = (unsigned)wl_uni(&c->rng, 0, 255)};
	unsigned t = (unsigned)wl_uni(&c->rng, 1, 4);
	int rc = wl_tatp_get_ptr(c, 'F', s, t, &q.sf);
	if (rc == -ENOENT)
		return 1;
	if (!rc)
		rc = wl_tatp_get_ptr(c, 'S', s, 0, &q.sub);
	return rc ? rc : wl_tatp_run_tx(c, updsub_body, &q);
}

/* The subscriber of a random sub_nbr, through the secondary index. */
static int by_nbr(struct wl_client *c, uint64_t *s)
{
	uint64_t n = nurand_sub(c);
	/* The key's 15 digits are printed only on a miss. */
	int rc = wl_rowcache_find(rc_of(c), rc_key('N', n, 0), s, sizeof(*s));
	if (rc <= 0)
		return rc;
	struct wl_key k = nbr_key(n);
	return wl_rowcache_fill(c, rc_of(c), rc_key('N', n, 0), &k, s,
	                        sizeof(*s));
}

static int shipped_txn(struct wl_client *c, enum wl_txn t)
{
	uint64_t s;
	/* The start of an update left in flight; one waited for is timed
	 * by the caller. */
	uint64_t t0 = c->m->o->ship_window > 1 ? wl_now_ns() : 0;
	struct ship_req q = {0};
	farm_fatptr p, sf;
	int rc = by_nbr(c, &s);
	unsigned type = (unsigned)wl_uni(&c->rng, 1, 4);
	q.slot = (uint32_t)wl_uni(&c->rng, 0, 2);
	if (rc)
		return rc;
	if (t == WT_UPD_LOC) {
		q.op = SHIP_LOC;
		q.val = (uint32_t)wl_rand(&c->rng);
		rc = wl_tatp_get_ptr(c, 'S', s, 0, &p);
	} else {
		q.op = t == WT_INS_CF ? SHIP_INS : SHIP_DEL;
		q.end_time = (uint8_t)(q.slot * 8 + wl_uni(&c->rng, 1, 8));
		nbr_of(wl_rand(&c->rng) % 1000000000000000ull, q.numberx);
		rc = wl_tatp_get_ptr(c, 'C', s, type, &p);
		if (!rc && t == WT_INS_CF)
			rc = wl_tatp_get_ptr(c, 'F', s, type, &sf);
		q.b = t == WT_INS_CF && !rc ? sf.addr : FARM_GADDR_NULL;
	}
	if (rc == -ENOENT)
		return 1; /* no such special facility */
	if (rc)
		return rc;
	q.a = p.addr;
	if (c->m->o->ship_window > 1)
		return wl_tatp_update_async(c, s, &q, t, t0);
	return wl_tatp_update(c, s, &q);
}

static int tatp_txn(struct wl_client *c, enum wl_txn t)
{
	struct tatp_sub su;
	struct tatp_ai ai;
	switch (t) {
	case WT_GET_SUB:
		return read_one(c, 'S', nurand_sub(c), 0, &su, sizeof(su));
	case WT_GET_ACCESS:
		return read_one(c, 'A', nurand_sub(c),
		                (unsigned)wl_uni(&c->rng, 1, 4), &ai,
		                sizeof(ai));
	case WT_GET_NEWDEST: return get_new_dest(c);
	case WT_UPD_SUB: return upd_sub(c);
	case WT_UPD_LOC:
	case WT_INS_CF:
	case WT_DEL_CF: return shipped_txn(c, t);
	default: return -EINVAL;
	}
}

/* ---- check ----------------------------------------------------------------
 */

/* Each client's changing updates, summed over its ledgers at every
 * owner (the parent compares them with what the client was told). */
static int check_ledgers(struct wl_machine *m, struct wl_result *r)
{
	struct wl_client *c = &m->cl[0];
	for (unsigned i = 0; i < m->o->machines; i++)
		for (unsigned t = 0; t < m->o->threads; t++)
			for (unsigned o = 0; o < m->o->machines; o++) {
				struct tatp_ledger l;
				int rc = read_indexed(c, 'T', i * 64u + t, o,
				                      &l, sizeof(l));
				if (rc) {
					snprintf(r->msg, sizeof(r->msg),
					         "ledger %u.%u at %u: %s", i, t,
					         o,
					         rc > 0 ? "missing"
					                : farm_strerror(rc));
					return rc > 0 ? -ENOENT : rc;
				}
				r->ledger[i][t] += l.count;
			}
	return 0;
}

static int tatp_check(struct wl_machine *m, farm_loop *loop,
                      struct wl_result *r)
{
	struct wl_client *c = &m->cl[0];
	(void)loop;
	for (uint64_t s = 1; s <= m->o->scale; s++) {
		struct tatp_sub su;
		struct tatp_ai ai;
		struct tatp_sf sf;
		struct tatp_cf cf;
		int rc = read_indexed(c, 'S', s, 0, &su, sizeof(su));
		r->rows[0] += rc == 0 && su.s_id == s;
		for (unsigned t = 1; t <= 4 && rc >= 0; t++) {
			rc = read_indexed(c, 'A', s, t, &ai, sizeof(ai));
			r->rows[1] += rc == 0;
			if (rc >= 0)
				rc = read_indexed(c, 'F', s, t, &sf,
				                  sizeof(sf));
			r->rows[2] += rc == 0;
			if (rc == 0)
				rc = read_indexed(c, 'C', s, t, &cf,
				                  sizeof(cf));
			for (int k = 0; k < 3 && rc == 0; k++)
				r->rows[3] += cf.slot[k].present;
		}
		if (rc < 0) {
			snprintf(r->msg, sizeof(r->msg), "subscriber %llu: %s",
			         (unsigned long long)s, farm_strerror(rc));
			return rc;
		}
	}
	return check_ledgers(m, r);
}

const struct wl_ops wl_tatp_ops = {tatp_load,  tatp_txn,  wl_tatp_ship,
                                   tatp_check, tatp_fini, wl_tatp_reap};
