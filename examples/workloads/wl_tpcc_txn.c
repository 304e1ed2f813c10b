/*
 * TPC-C's five transactions on libfarm (spec 2.4-2.8): rows found through
 * the KV store (their fat pointers cached per client: the TPC-C tables
 * are never re-indexed during a run), read and written in libfarm
 * transactions, orders and NEW-ORDER rows on the ordered index, retried
 * while the failure is retryable.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wl_tpcc.h"

#define PCACHE 8192 /* fat pointers cached per client */

struct pslot {
	uint64_t id;
	char table;
	farm_fatptr p;
};

struct tcl {
	struct pslot slot[PCACHE];
	/* Item rows read so far (price 0: not yet): items never change
	 * after the load, so a client keeps the copies it read, as the
	 * in-memory limit reads its item array. */
	struct tpcc_item *item;
};

static struct tcl *state(struct wl_client *c)
{
	if (!c->app) {
		struct tcl *s = calloc(1, sizeof(*s));
		if (s)
			s->item = calloc(c->m->o->items + 1, sizeof(*s->item));
		if (s && !s->item) {
			free(s);
			s = NULL;
		}
		c->app = s;
	}
	return c->app;
}

void tpcc_client_free(struct wl_client *c)
{
	struct tcl *s = c->app;
	if (s)
		free(s->item);
	free(s);
	c->app = NULL;
}

/* The fat pointer of row (@table, @id): the client's copy, else the KV
 * store's (rows never move or leave the index during a run). */
static int row_ptr(struct wl_client *c, char table, uint64_t id, farm_fatptr *p)
{
	struct tcl *s = state(c);
	struct pslot *sl = NULL;
	if (s) {
		uint64_t h =
		        (id * 0x9e3779b97f4a7c15ull ^ (uint64_t)table) >> 51;
		sl = &s->slot[h % PCACHE];
		if (sl->table == table && sl->id == id) {
			*p = sl->p;
			return 0;
		}
	}
	struct wl_key k = wl_key_make(table, id, 0);
	int rc = wl_kv_ptr(c, &k, p, sizeof(*p));
	if (!rc && sl)
		*sl = (struct pslot){id, table, *p};
	return rc;
}

/* Item @i's row: the client's copy, else one lock-free read. 1 when the
 * item does not exist. */
static int item_row(struct wl_client *c, uint32_t i, struct tpcc_item *out)
{
	struct tcl *s = state(c);
	if (s && i <= c->m->o->items && s->item[i].price) {
		*out = s->item[i];
		return 0;
	}
	farm_fatptr ip;
	int rc = row_ptr(c, 'I', i, &ip);
	if (rc == -ENOENT)
		return 1;
	rc = rc ?: wl_lf_read(c, ip, out, sizeof(*out));
	if (!rc && s && i <= c->m->o->items)
		s->item[i] = *out;
	return rc;
}

/* Read row (@table, @id) in @tx into @out. */
static int tread(struct wl_client *c, farm_tx *tx, char table, uint64_t id,
                 void *out, uint32_t size, farm_fatptr *where)
{
	farm_fatptr p;
	const void *d;
	int rc = row_ptr(c, table, id, &p)
	                 ?: farm_tx_read_sync(tx, p.addr, size, &d);
	if (rc)
		return rc;
	memcpy(out, d, size);
	if (where)
		*where = p;
	return 0;
}

/* Write @row (read before in @tx) at @p. */
static int twrite(farm_tx *tx, farm_fatptr p, const void *row, uint32_t size)
{
	void *d;
	int rc = farm_tx_write(tx, p.addr, &d);
	if (!rc)
		memcpy(d, row, size);
	return rc;
}

static uint32_t other_wh(struct wl_client *c, uint32_t w)
{
	uint32_t x = (uint32_t)wl_uni(&c->rng, 1, c->m->o->scale - 1);
	return x >= w ? x + 1 : x;
}

/* ---- NewOrder (2.4) ------------------------------------------------------ */

struct no_in {
	uint32_t w, d, c, ol_cnt;
	uint32_t item[TPCC_MAX_OL], supply[TPCC_MAX_OL], qty[TPCC_MAX_OL];
	bool all_local;
};

static void no_input(struct wl_client *c, struct no_in *in)
{
	const struct wl_opts *o = c->m->o;
	in->w = tpcc_home(c);
	in->d = (uint32_t)wl_uni(&c->rng, 1, TPCC_DISTRICTS);
	in->c = tpcc_pick_cust(&c->rng, o->customers);
	in->ol_cnt = (uint32_t)wl_uni(&c->rng, 5, 15);
	bool rbk = wl_uni(&c->rng, 1, 100) == 1;
	in->all_local = true;
	for (uint32_t l = 0; l < in->ol_cnt; l++) {
		in->item[l] = tpcc_pick_item(&c->rng, o->items);
		in->supply[l] = in->w;
		if (o->scale > 1 && wl_uni(&c->rng, 1, 100) == 1) {
			in->supply[l] = other_wh(c, in->w);
			in->all_local = false;
		}
		in->qty[l] = (uint32_t)wl_uni(&c->rng, 1, 10);
	}
	/* 1% roll back on an unused item number, the last (2.4.1.4). */
	if (rbk)
		in->item[in->ol_cnt - 1] = o->items + 1;
}

/* Line @l: the item (lock-free: items never change), the stock row. 1
 * when the item does not exist (the transaction rolls back). */
static int no_line(struct wl_client *c, farm_tx *tx, const struct no_in *in,
                   uint32_t l, struct tpcc_ol *ol)
{
	farm_fatptr sp;
	struct tpcc_item it;
	struct tpcc_stock s;
	int rc = item_row(c, in->item[l], &it);
	rc = rc
	             ?: tread(c, tx, 'K', tpcc_sid(in->supply[l], in->item[l]),
	                      &s, sizeof(s), &sp);
	if (rc)
		return rc;
	int32_t q = (int32_t)in->qty[l];
	s.quantity =
	        s.quantity >= q + 10 ? s.quantity - q : s.quantity - q + 91;
	s.ytd += (uint32_t)q;
	s.order_cnt++;
	s.remote_cnt += in->supply[l] != in->w;
	*ol = (struct tpcc_ol){in->item[l],
	                       (uint16_t)in->supply[l],
	                       (uint8_t)q,
	                       (uint8_t)(l + 1),
	                       q * it.price,
	                       0,
	                       0};
	return twrite(tx, sp, &s, sizeof(s));
}

/* The order, its lines, and its three index entries. */
static int no_order(struct wl_client *c, farm_tx *tx, const struct no_in *in,
                    uint32_t o_id)
{
	farm_fatptr op;
	void *d;
	farm_bt *ord, *cord, *no;
	int rc = tpcc_bt(c->m, c->loop, in->w, TPCC_ORD, &ord) ?:
	         tpcc_bt(c->m, c->loop, in->w, TPCC_CORD, &cord) ?:
	         tpcc_bt(c->m, c->loop, in->w, TPCC_NO, &no) ?:
	         farm_tx_alloc_sync(tx, sizeof(struct tpcc_order),
	                            FARM_GADDR_NULL, &op, &d);
	if (rc)
		return rc;
	struct tpcc_order *o = d;
	o->o_id = o_id;
	o->c_id = in->c;
	o->entry_d = wl_now_ns();
	o->ol_cnt = (uint8_t)in->ol_cnt;
	o->all_local = in->all_local;
	o->client = c->m->me * 64u + c->idx + 1;
	for (uint32_t l = 0; l < in->ol_cnt && !rc; l++)
		rc = no_line(c, tx, in, l, &o->ol[l]);
	if (rc)
		return rc;
	struct tpcc_bkey k = tpcc_okey(in->w, in->d, o_id);
	struct tpcc_bkey ck = tpcc_cokey(in->w, in->d, in->c, o_id);
	return farm_bt_put(ord, tx, c->loop, k.b, k.len, &op, sizeof(op)) ?:
	       farm_bt_put(cord, tx, c->loop, ck.b, ck.len, &op, sizeof(op)) ?:
	       farm_bt_put(no, tx, c->loop, k.b, k.len, "", 0);
}

static int new_order(struct wl_client *c, farm_tx *tx, void *arg)
{
	const struct no_in *in = arg;
	struct tpcc_wh wh;
	struct tpcc_dist dist;
	struct tpcc_cust cu;
	farm_fatptr dp;
	int rc = tread(c, tx, 'W', in->w, &wh, sizeof(wh), NULL) ?:
	         tread(c, tx, 'D', tpcc_did(in->w, in->d), &dist, sizeof(dist),
	               &dp) ?:
	         tread(c, tx, 'C', tpcc_cid(in->w, in->d, in->c), &cu,
	               sizeof(cu), NULL);
	if (rc)
		return rc;
	uint32_t o_id = dist.next_o_id++;
	return twrite(tx, dp, &dist, sizeof(dist)) ?: no_order(c, tx, in, o_id);
}

/* ---- Payment (2.5) ------------------------------------------------------- */

struct pay_in {
	uint32_t w, d, cw, cd, c;
	int32_t amount;
};

struct by_name {
	uint32_t id[64];
	unsigned n;
};

static bool name_hit(void *ctx, const void *key, uint32_t klen, const void *val,
                     uint32_t vlen)
{
	(void)key;
	(void)klen;
	struct by_name *b = ctx;
	if (vlen == 4 && b->n < 64)
		memcpy(&b->id[b->n++], val, 4);
	return b->n < 64;
}

/* The customer of last name @name in (@w, @d): the one at n/2 rounded up
 * in first-name order (2.5.2.2). The name index never changes during a
 * run: a lock-free scan. 0, or -ENOENT. */
static int cust_by_name(struct wl_client *c, uint32_t w, uint32_t d,
                        unsigned name, uint32_t *out)
{
	farm_bt *cust;
	int rc = tpcc_bt(c->m, c->loop, w, TPCC_CUST, &cust);
	if (rc)
		return rc;
	char last[16];
	tpcc_last_name(name, last);
	struct tpcc_bkey a = tpcc_nkey(w, d, last, NULL, 0), z = a;
	z.b[z.len - 1]++; /* names are at most 15 bytes: the 16th is 0 */
	struct farm_bt_range r = {a.b, a.len, z.b, z.len, 0, false};
	struct by_name b = {.n = 0};
	for (unsigned tries = 1;; tries++) {
		b.n = 0;
		long n = farm_bt_scan(cust, NULL, c->loop, &r, name_hit, &b);
		if (n >= 0)
			break;
		if (!wl_retryable((int)n) || tries > 1000)
			return (int)n;
		wl_backoff(c, tries);
	}
	if (!b.n)
		return -ENOENT;
	*out = b.id[(b.n - 1) / 2];
	return 0;
}

/* The customer of a Payment or OrderStatus: 60% by last name. */
static int pick_customer(struct wl_client *c, uint32_t w, uint32_t d,
                         uint32_t *out)
{
	uint32_t n = c->m->o->customers;
	if (wl_uni(&c->rng, 1, 100) <= 60)
		return cust_by_name(c, w, d, tpcc_pick_name(&c->rng, n), out);
	*out = tpcc_pick_cust(&c->rng, n);
	return 0;
}

static int payment(struct wl_client *c, farm_tx *tx, void *arg)
{
	const struct pay_in *in = arg;
	struct tpcc_wh wh;
	struct tpcc_dist dist;
	struct tpcc_cust cu;
	farm_fatptr wp, dp, cp, hp;
	int rc = tread(c, tx, 'W', in->w, &wh, sizeof(wh), &wp) ?:
	         tread(c, tx, 'D', tpcc_did(in->w, in->d), &dist, sizeof(dist),
	               &dp) ?:
	         tread(c, tx, 'C', tpcc_cid(in->cw, in->cd, in->c), &cu,
	               sizeof(cu), &cp);
	if (rc)
		return rc;
	wh.ytd += in->amount;
	dist.ytd += in->amount;
	cu.balance -= in->amount;
	cu.ytd_payment += in->amount;
	cu.payment_cnt++;
	void *h;
	rc = twrite(tx, wp, &wh, sizeof(wh)) ?:
	     twrite(tx, dp, &dist, sizeof(dist)) ?:
	     twrite(tx, cp, &cu, sizeof(cu)) ?:
	     farm_tx_alloc_sync(tx, sizeof(struct tpcc_hist), FARM_GADDR_NULL,
	                        &hp, &h);
	if (!rc)
		*(struct tpcc_hist *)h =
		        (struct tpcc_hist){in->c, in->cd,     in->cw,     in->d,
		                           in->w, in->amount, wl_now_ns()};
	return rc;
}

/* ---- OrderStatus (2.6) --------------------------------------------------- */

static bool first_ptr(void *ctx, const void *key, uint32_t klen,
                      const void *val, uint32_t vlen)
{
	(void)key;
	(void)klen;
	if (vlen == sizeof(farm_fatptr))
		memcpy(ctx, val, vlen);
	return false;
}

static int order_status(struct wl_client *c, farm_tx *tx, void *arg)
{
	const struct pay_in *in = arg;
	struct tpcc_cust cu;
	farm_bt *cord;
	int rc = tpcc_bt(c->m, c->loop, in->w, TPCC_CORD, &cord)
	                 ?: tread(c, tx, 'C', tpcc_cid(in->w, in->d, in->c),
	                          &cu, sizeof(cu), NULL);
	if (rc)
		return rc;
	/* The customer's latest order: the last entry below (c + 1, 0). */
	struct tpcc_bkey a = tpcc_cokey(in->w, in->d, in->c, 0),
	                 z = tpcc_cokey(in->w, in->d, in->c + 1, 0);
	struct farm_bt_range r = {a.b, a.len, z.b, z.len, 1, true};
	farm_fatptr op = {0};
	long n = farm_bt_scan(cord, tx, c->loop, &r, first_ptr, &op);
	if (n < 0)
		return (int)n;
	const void *d;
	return n == 0 ? 0
	              : farm_tx_read_sync(tx, op.addr,
	                                  sizeof(struct tpcc_order), &d);
}

/* ---- Delivery (2.7): one transaction per district ------------------------ */

struct dl_in {
	uint32_t w, d, carrier;
};

static bool first_id(void *ctx, const void *key, uint32_t klen, const void *val,
                     uint32_t vlen)
{
	(void)val;
	(void)vlen;
	const uint8_t *k = key;
	uint32_t o = 0;
	for (uint32_t i = klen - 4; i < klen; i++)
		o = o << 8 | k[i];
	*(uint32_t *)ctx = o;
	return false;
}

/* Deliver order @o_id of the district: its carrier, its lines' delivery
 * date, the customer's balance. */
static int deliver(struct wl_client *c, farm_tx *tx, const struct dl_in *in,
                   uint32_t o_id)
{
	struct tpcc_bkey k = tpcc_okey(in->w, in->d, o_id);
	farm_fatptr op;
	uint32_t vlen;
	const void *d;
	farm_bt *ord;
	int rc = tpcc_bt(c->m, c->loop, in->w, TPCC_ORD, &ord);
	if (rc)
		return rc;
	rc = farm_bt_get(ord, tx, c->loop, k.b, k.len, &op, sizeof(op), &vlen)
	             ?: farm_tx_read_sync(tx, op.addr,
	                                  sizeof(struct tpcc_order), &d);
	if (rc)
		return rc == -ENOENT ? FARM_ECORRUPT : rc;
	struct tpcc_order o;
	memcpy(&o, d, sizeof(o));
	o.carrier_id = (uint8_t)in->carrier;
	int64_t sum = 0;
	uint64_t now = wl_now_ns();
	for (unsigned l = 0; l < o.ol_cnt; l++) {
		o.ol[l].delivery_d = now;
		sum += o.ol[l].amount;
	}
	struct tpcc_cust cu;
	farm_fatptr cp;
	rc = twrite(tx, op, &o, sizeof(o))
	             ?: tread(c, tx, 'C', tpcc_cid(in->w, in->d, o.c_id), &cu,
	                      sizeof(cu), &cp);
	if (rc)
		return rc;
	cu.balance += sum;
	cu.delivery_cnt++;
	return twrite(tx, cp, &cu, sizeof(cu));
}

static int delivery_one(struct wl_client *c, farm_tx *tx, void *arg)
{
	const struct dl_in *in = arg;
	struct tpcc_bkey a = tpcc_okey(in->w, in->d, 0),
	                 z = tpcc_okey(in->w, in->d + 1, 0);
	struct farm_bt_range r = {a.b, a.len, z.b, z.len, 1, false};
	uint32_t o_id = 0;
	farm_bt *no;
	int e = tpcc_bt(c->m, c->loop, in->w, TPCC_NO, &no);
	if (e)
		return e;
	long n = farm_bt_scan(no, tx, c->loop, &r, first_id, &o_id);
	if (n <= 0)
		return (int)n; /* none to deliver: skipped (2.7.4.2) */
	struct tpcc_bkey k = tpcc_okey(in->w, in->d, o_id);
#ifdef FWL_TEST_BREAK_DELIVERY
	/* Test-only (fwl_broken): the NEW-ORDER row stays, so the order is
	 * delivered again and again; condition 5 must see it. */
	(void)k;
	int rc = 0;
#else
	int rc = farm_bt_delete(no, tx, c->loop, k.b, k.len);
	/* The key this transaction's scan found is gone: another Delivery
	 * of the district took it since, a conflict (the scan's read would
	 * fail validation at commit), not "none to deliver". */
	if (rc == -ENOENT)
		rc = -EAGAIN;
#endif
	return rc ? rc : deliver(c, tx, in, o_id);
}

/* ---- StockLevel (2.8) ---------------------------------------------------- */

struct sl_scan {
	farm_fatptr p[20];
	unsigned n;
};

static bool sl_hit(void *ctx, const void *key, uint32_t klen, const void *val,
                   uint32_t vlen)
{
	(void)key;
	(void)klen;
	struct sl_scan *s = ctx;
	if (vlen == sizeof(farm_fatptr) && s->n < 20)
		memcpy(&s->p[s->n++], val, vlen);
	return s->n < 20;
}

/* The last 20 orders of the district in the transaction; their items'
 * stock lock-free (read committed is allowed, 2.8.2.3). */
static int stock_level(struct wl_client *c, farm_tx *tx, void *arg)
{
	const struct dl_in *in = arg; /* carrier: the threshold */
	struct tpcc_dist dist;
	farm_bt *ord;
	int rc = tpcc_bt(c->m, c->loop, in->w, TPCC_ORD, &ord)
	                 ?: tread(c, tx, 'D', tpcc_did(in->w, in->d), &dist,
	                          sizeof(dist), NULL);
	if (rc)
		return rc;
	uint32_t lo = dist.next_o_id > 20 ? dist.next_o_id - 20 : 1;
	struct tpcc_bkey a = tpcc_okey(in->w, in->d, lo),
	                 z = tpcc_okey(in->w, in->d, dist.next_o_id);
	struct farm_bt_range r = {a.b, a.len, z.b, z.len, 20, false};
	struct sl_scan s = {.n = 0};
	long n = farm_bt_scan(ord, tx, c->loop, &r, sl_hit, &s);
	if (n < 0)
		return (int)n;
	uint32_t seen[20 * TPCC_MAX_OL], nseen = 0, low = 0;
	for (unsigned i = 0; i < s.n; i++) {
		const void *d;
		struct tpcc_order o;
		rc = farm_tx_read_sync(tx, s.p[i].addr, sizeof(o), &d);
		if (rc)
			return rc;
		memcpy(&o, d, sizeof(o));
		for (unsigned l = 0; l < o.ol_cnt && l < TPCC_MAX_OL; l++) {
			uint32_t it = o.ol[l].i_id, k = 0;
			while (k < nseen && seen[k] != it)
				k++;
			if (k < nseen)
				continue;
			seen[nseen++] = it;
			farm_fatptr sp;
			struct tpcc_stock st;
			rc = row_ptr(c, 'K', tpcc_sid(in->w, it), &sp)
			             ?: wl_lf_read(c, sp, &st, sizeof(st));
			if (rc)
				return rc;
			low += st.quantity < (int32_t)in->carrier;
		}
	}
	(void)low;
	return 0;
}

/* ---- the driver ---------------------------------------------------------- */

typedef int (*body_fn)(struct wl_client *c, farm_tx *tx, void *arg);

/* Run @body in a transaction until it commits (0), its logic ends it
 * (1: the transaction is dropped, nothing written), or it fails for
 * good. */
static int run_tx(struct wl_client *c, body_fn body, void *arg)
{
	uint64_t dl = wl_now_ns() + 20ull * 1000000000ull;
	for (unsigned tries = 1;; tries++) {
		farm_tx *tx;
		int rc = farm_tx_begin(c->m->txm, c->loop, &tx);
		if (!rc) {
			rc = body(c, tx, arg);
			if (!rc)
				rc = farm_tx_commit_sync(tx);
			farm_tx_free(tx);
		}
		if (rc >= 0 || !wl_retryable(rc) || wl_now_ns() > dl)
			return rc;
		c->res.retries++;
		wl_backoff(c, tries);
	}
}

static int pay_input(struct wl_client *c, struct pay_in *in, bool remote_ok)
{
	const struct wl_opts *o = c->m->o;
	in->w = in->cw = tpcc_home(c);
	in->d = in->cd = (uint32_t)wl_uni(&c->rng, 1, TPCC_DISTRICTS);
	in->amount = (int32_t)wl_uni(&c->rng, 100, 500000);
	/* 15% of Payments pay for a customer of another warehouse. */
	if (remote_ok && o->scale > 1 && wl_uni(&c->rng, 1, 100) <= 15) {
		in->cw = other_wh(c, in->w);
		in->cd = (uint32_t)wl_uni(&c->rng, 1, TPCC_DISTRICTS);
	}
	return pick_customer(c, in->cw, in->cd, &in->c);
}

int tpcc_txn(struct wl_client *c, enum wl_txn t)
{
	struct pay_in p;
	struct dl_in dl;
	struct no_in no;
	int rc;
	switch (t) {
	case WT_NEW_ORDER:
		no_input(c, &no);
		rc = run_tx(c, new_order, &no);
		if (rc == 0)
			c->res.acked[c->m->me][c->idx]++;
		return rc;
	case WT_PAYMENT:
		return pay_input(c, &p, true) ?: run_tx(c, payment, &p);
	case WT_ORDER_STATUS:
		return pay_input(c, &p, false) ?: run_tx(c, order_status, &p);
	case WT_DELIVERY:
		dl.w = tpcc_home(c);
		dl.carrier = (uint32_t)wl_uni(&c->rng, 1, 10);
		for (dl.d = 1; dl.d <= TPCC_DISTRICTS; dl.d++)
			if ((rc = run_tx(c, delivery_one, &dl)) < 0)
				return rc;
		return 0;
	case WT_STOCK_LEVEL:
		dl.w = tpcc_home(c);
		dl.d = (uint32_t)wl_uni(&c->rng, 1, TPCC_DISTRICTS);
		dl.carrier = (uint32_t)wl_uni(&c->rng, 10, 20);
		return run_tx(c, stock_level, &dl);
	default: return -EINVAL;
	}
}
