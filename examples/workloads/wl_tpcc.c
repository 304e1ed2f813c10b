/*
 * TPC-C on libfarm: the ordered indexes (made by machine 0, opened by the
 * others), the load of each machine's warehouses (and its share of the
 * items) in batched transactions, and the consistency conditions checked
 * after every run. The transactions are wl_tpcc_txn.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_tpcc.h"

#define LOAD_NS (30ull * 1000000000ull)

static const char *const tree_names[4] = {"ord", "cord", "no", "cust"};

static const struct farm_bt_attr tree_attr[4] = {
        {16, sizeof(farm_fatptr), 0, 0},
        {16, sizeof(farm_fatptr), 0, 0},
        {16, 1, 0, 0},
        {40, 4, 0, 0}};

static int trees_init(struct wl_machine *m)
{
	if (m->app)
		return 0;
	struct tpcc_trees *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->nw = m->o->scale;
	t->t = calloc((t->nw + 1) * 4, sizeof(*t->t));
	if (!t->t) {
		free(t);
		return -ENOMEM;
	}
	m->app = t;
	return 0;
}

/* Make (the owner, at load) or open tree @k of warehouse @w, retried
 * while it is not there yet or fails retryably. */
static int tree_get(struct wl_machine *m, farm_loop *loop, uint64_t w,
                    enum tpcc_tree k, bool make, farm_bt **out)
{
	char name[64];
	snprintf(name, sizeof(name), "tpcc.%s.%llu", tree_names[k],
	         (unsigned long long)w);
	uint64_t dl = wl_now_ns() + LOAD_NS;
	for (unsigned tries = 1;; tries++) {
		int rc = make ? farm_bt_create_sync(m->kv, m->txm, loop, name,
		                                    &tree_attr[k], out)
		              : farm_bt_open_sync(m->kv, m->txm, loop, name,
		                                  out);
		if (rc == 0 || (rc != -ENOENT && !wl_retryable(rc)) ||
		    wl_now_ns() > dl)
			return rc;
		static const volatile int never = 0;
		(void)farm_loop_wait(loop, &never,
		                     (tries < 50 ? tries : 50) * 20000ull);
	}
}

int tpcc_bt(struct wl_machine *m, farm_loop *loop, uint64_t w, enum tpcc_tree k,
            farm_bt **out)
{
	struct tpcc_trees *t = m->app;
	if (!t || w < 1 || w > t->nw)
		return -EINVAL;
	farm_bt *_Atomic *slot = &t->t[w * 4 + k];
	/* Acquire pairs with the release of the compare-exchange below and
	 * of the owner's store in trees_make: a handle seen is fully made. */
	farm_bt *h = atomic_load_explicit(slot, memory_order_acquire);
	if (h) {
		*out = h;
		return 0;
	}
	/* Opened without a lock (opening drives this loop, which must not
	 * wait on another of the machine's loops); the first to store wins
	 * and a loser closes its copy. */
	int rc = tree_get(m, loop, w, k, false, &h);
	if (rc)
		return rc;
	farm_bt *none = NULL;
	/* Release pairs with the acquire load above (and this CAS on
	 * another loop); acquire, on failure, with the release that stored
	 * the handle found (this CAS elsewhere, trees_make). */
	if (!atomic_compare_exchange_strong_explicit(slot, &none, h,
	                                             memory_order_acq_rel,
	                                             memory_order_acquire)) {
		farm_bt_close(h);
		h = none;
	}
	*out = h;
	return 0;
}

/* The owner makes its warehouse's four trees. */
static int trees_make(struct wl_machine *m, farm_loop *loop, uint64_t w)
{
	struct tpcc_trees *t = m->app;
	for (int k = 0; k < 4; k++) {
		farm_bt *h;
		int rc = tree_get(m, loop, w, (enum tpcc_tree)k, true, &h);
		if (rc)
			return rc;
		/* Pairs with the acquire load and CAS in tpcc_bt. */
		atomic_store_explicit(&t->t[w * 4 + k], h,
		                      memory_order_release);
	}
	return 0;
}

/* ---- batched load -------------------------------------------------------- */

/* One batch of rows: allocated and filled in one transaction (with any
 * index entries @fill puts in it), then indexed in the KV store. */
struct batch {
	struct wl_machine *m;
	farm_loop *loop;
	uint32_t size;
	unsigned n;
	uint64_t first;
	/* Fill row @i (id first + i) with its fat pointer @p, in @tx. */
	int (*fill)(struct batch *b, farm_tx *tx, unsigned i, farm_fatptr p,
	            void *row);
	char table; /* KV table letter, 0: not in the KV store */
	uint64_t (*key)(struct batch *b, unsigned i);
	uint64_t w, d;
	uint32_t *perm;
	uint8_t olc[64]; /* orders: lines of each (0: delivered, ...) */
	bool fresh[64];  /* orders: each one's NEW-ORDER row */
	farm_fatptr p[64];
};

static int batch_tx(struct batch *b)
{
	uint64_t dl = wl_now_ns() + LOAD_NS;
	for (unsigned tries = 1;; tries++) {
		/* Back off before a try again: the conflicting transaction
		 * (a split of the same tree) should finish first. */
		if (tries > 1) {
			static const volatile int never = 0;
			(void)farm_loop_wait(b->loop, &never,
			                     (tries < 50 ? tries : 50) *
			                             20000ull);
		}
		farm_tx *tx;
		int rc = farm_tx_begin(b->m->txm, b->loop, &tx);
		if (rc)
			return rc;
		for (unsigned i = 0; i < b->n && !rc; i++) {
			void *d;
			rc = farm_tx_alloc_sync(tx, b->size, FARM_GADDR_NULL,
			                        &b->p[i], &d);
			if (!rc)
				rc = b->fill(b, tx, i, b->p[i], d);
		}
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (!rc || !wl_retryable(rc) || wl_now_ns() > dl)
			return rc;
	}
}

static int batch_run(struct batch *b)
{
	int rc = batch_tx(b);
	for (unsigned i = 0; i < b->n && !rc && b->table; i++) {
		struct wl_key k = wl_key_make(b->table, b->key(b, i), 0);
		rc = wl_kv_put(b->m, b->loop, &k, &b->p[i],
		               sizeof(farm_fatptr));
	}
	return rc;
}

/* Rows @from..@to in batches of @per. */
static int load_range(struct batch *b, uint64_t from, uint64_t to, unsigned per)
{
	int rc = 0;
	for (uint64_t x = from; x <= to && !rc; x += per) {
		b->first = x;
		b->n = (unsigned)(to - x + 1 < per ? to - x + 1 : per);
		rc = batch_run(b);
	}
	return rc;
}

static uint64_t seed_of(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t s = (a * 1000003 + b) * 0x9e3779b97f4a7c15ull + c * 7919 + 1;
	return s ? s : 1;
}

static int fill_item(struct batch *b, farm_tx *tx, unsigned i, farm_fatptr p,
                     void *row)
{
	(void)tx;
	(void)p;
	struct tpcc_item *it = row;
	uint64_t s = seed_of(0, 0, b->first + i);
	it->price = (int32_t)wl_uni(&s, 100, 10000);
	it->im_id = (uint32_t)wl_uni(&s, 1, 10000);
	snprintf(it->name, sizeof(it->name), "item-%llu",
	         (unsigned long long)(b->first + i));
	return 0;
}

static uint64_t key_item(struct batch *b, unsigned i)
{
	return b->first + i;
}

static int fill_stock(struct batch *b, farm_tx *tx, unsigned i, farm_fatptr p,
                      void *row)
{
	(void)tx;
	(void)p;
	struct tpcc_stock *s = row;
	uint64_t r = seed_of(b->w, 1, b->first + i);
	s->quantity = (int32_t)wl_uni(&r, 10, 100);
	return 0;
}

static uint64_t key_stock(struct batch *b, unsigned i)
{
	return tpcc_sid(b->w, b->first + i);
}

static void random_name(uint64_t *r, char out[16])
{
	unsigned len = (unsigned)wl_uni(r, 8, 15);
	memset(out, 0, 16);
	for (unsigned k = 0; k < len; k++)
		out[k] = (char)('a' + wl_uni(r, 0, 25));
}

static int fill_cust(struct batch *b, farm_tx *tx, unsigned i, farm_fatptr p,
                     void *row)
{
	(void)p;
	struct tpcc_cust *c = row;
	uint32_t id = (uint32_t)(b->first + i);
	uint64_t r = seed_of(b->w, b->d, id);
	tpcc_last_name(tpcc_load_name(&r, id, b->m->o->customers), c->last);
	random_name(&r, c->first);
	memcpy(c->credit, wl_uni(&r, 1, 10) == 1 ? "BC" : "GC", 2);
	c->discount = (uint32_t)wl_uni(&r, 0, 5000);
	c->balance = -1000;
	c->ytd_payment = 1000;
	c->payment_cnt = 1;
	struct tpcc_bkey k = tpcc_nkey(b->w, b->d, c->last, c->first, id);
	farm_bt *cust;
	/* One history row per customer (spec 4.3.3.1), in no index. */
	farm_fatptr hp;
	void *hd;
	int rc = tpcc_bt(b->m, b->loop, b->w, TPCC_CUST, &cust)
	                 ?: farm_tx_alloc_sync(tx, sizeof(struct tpcc_hist),
	                                       FARM_GADDR_NULL, &hp, &hd);
	if (rc)
		return rc;
	*(struct tpcc_hist *)hd = (struct tpcc_hist){id,
	                                             (uint32_t)b->d,
	                                             (uint32_t)b->w,
	                                             (uint32_t)b->d,
	                                             (uint32_t)b->w,
	                                             1000,
	                                             0};
	return farm_bt_put(cust, tx, b->loop, k.b, k.len, &id, sizeof(id));
}

static uint64_t key_cust(struct batch *b, unsigned i)
{
	return tpcc_cid(b->w, b->d, b->first + i);
}

static int fill_order(struct batch *b, farm_tx *tx, unsigned i, farm_fatptr p,
                      void *row)
{
	struct tpcc_order *o = row;
	const struct wl_opts *op = b->m->o;
	uint32_t id = (uint32_t)(b->first + i);
	uint64_t r = seed_of(b->w, b->d + 100, id);
	bool delivered = id < tpcc_first_new(op->customers);
	o->o_id = id;
	o->c_id = b->perm[id - 1];
	o->entry_d = 1;
	o->carrier_id = delivered ? (uint8_t)wl_uni(&r, 1, 10) : 0;
	o->ol_cnt = (uint8_t)wl_uni(&r, 5, 15);
	o->all_local = 1;
	for (unsigned l = 0; l < o->ol_cnt; l++)
		o->ol[l] = (struct tpcc_ol){
		        (uint32_t)wl_uni(&r, 1, op->items),
		        (uint16_t)b->w,
		        5,
		        (uint8_t)(l + 1),
		        delivered ? 0 : (int32_t)wl_uni(&r, 1, 999999),
		        0,
		        delivered ? 1 : 0};
	struct tpcc_bkey k = tpcc_okey(b->w, b->d, id);
	struct tpcc_bkey ck = tpcc_cokey(b->w, b->d, o->c_id, id);
	farm_bt *ord, *cord, *no;
	int rc = tpcc_bt(b->m, b->loop, b->w, TPCC_ORD, &ord) ?:
	         tpcc_bt(b->m, b->loop, b->w, TPCC_CORD, &cord) ?:
	         tpcc_bt(b->m, b->loop, b->w, TPCC_NO, &no) ?:
	         farm_bt_put(ord, tx, b->loop, k.b, k.len, &p, sizeof(p)) ?:
	         farm_bt_put(cord, tx, b->loop, ck.b, ck.len, &p, sizeof(p));
	if (!rc && !delivered)
		rc = farm_bt_put(no, tx, b->loop, k.b, k.len, "", 0);
	b->olc[i] = o->ol_cnt;
	b->fresh[i] = !delivered;
	return rc;
}

/* A district's orders go to its customers in a random order (spec
 * 4.3.3.1: O_C_ID a permutation of 1..C). */
static int load_orders(struct batch *b, uint32_t customers)
{
	uint32_t *perm = malloc(customers * sizeof(*perm));
	if (!perm)
		return -ENOMEM;
	uint64_t r = seed_of(b->w, b->d, 77);
	for (uint32_t c = 0; c < customers; c++)
		perm[c] = c + 1;
	for (uint32_t c = customers - 1; c > 0; c--) {
		uint32_t j = (uint32_t)wl_uni(&r, 0, c);
		uint32_t x = perm[c];
		perm[c] = perm[j];
		perm[j] = x;
	}
	b->perm = perm;
	b->fill = fill_order;
	b->size = sizeof(struct tpcc_order);
	b->table = 0;
	int rc = 0;
	for (uint64_t x = 1; x <= customers && !rc; x += 16) {
		b->first = x;
		b->n = (unsigned)(customers - x + 1 < 16 ? customers - x + 1
		                                         : 16);
		rc = batch_tx(b);
		/* Counted once the batch committed (a try may fail). */
		for (unsigned i = 0; i < b->n && !rc; i++) {
			b->m->loaded[0]++;
			b->m->loaded[1] += b->fresh[i];
			b->m->loaded[2] += b->olc[i];
		}
	}
	free(perm);
	return rc;
}

static int fill_wh(struct batch *b, farm_tx *tx, unsigned i, farm_fatptr p,
                   void *row)
{
	(void)tx;
	(void)i;
	(void)p;
	uint64_t r = seed_of(b->w, 0, 0);
	*(struct tpcc_wh *)row =
	        (struct tpcc_wh){30000000, (uint32_t)wl_uni(&r, 0, 2000), 0};
	return 0;
}

static uint64_t key_wh(struct batch *b, unsigned i)
{
	(void)i;
	return b->w;
}

static int fill_dist(struct batch *b, farm_tx *tx, unsigned i, farm_fatptr p,
                     void *row)
{
	(void)tx;
	(void)p;
	uint64_t r = seed_of(b->w, b->first + i, 0);
	*(struct tpcc_dist *)row = (struct tpcc_dist){
	        3000000, (uint32_t)wl_uni(&r, 0, 2000), b->m->o->customers + 1};
	return 0;
}

static uint64_t key_dist(struct batch *b, unsigned i)
{
	return tpcc_did(b->w, b->first + i);
}

/* Warehouse @w: its row, districts, stock, customers (and their history
 * rows and name index), orders (and their order and new-order
 * entries). */
static int load_warehouse(struct batch *b, uint64_t w)
{
	const struct wl_opts *o = b->m->o;
	b->w = w;
	int rc = trees_make(b->m, b->loop, w);
	if (rc)
		return rc;
	b->size = sizeof(struct tpcc_wh);
	b->fill = fill_wh;
	b->table = 'W';
	b->key = key_wh;
	rc = load_range(b, 1, 1, 1);
	b->size = sizeof(struct tpcc_dist);
	b->fill = fill_dist;
	b->table = 'D';
	b->key = key_dist;
	if (!rc)
		rc = load_range(b, 1, TPCC_DISTRICTS, TPCC_DISTRICTS);
	b->size = sizeof(struct tpcc_stock);
	b->fill = fill_stock;
	b->table = 'K';
	b->key = key_stock;
	if (!rc)
		rc = load_range(b, 1, o->items, 64);
	for (uint64_t d = 1; d <= TPCC_DISTRICTS && !rc; d++) {
		b->d = d;
		b->size = sizeof(struct tpcc_cust);
		b->fill = fill_cust;
		b->table = 'C';
		b->key = key_cust;
		rc = load_range(b, 1, o->customers, 16);
		if (!rc)
			rc = load_orders(b, o->customers);
		b->m->loaded[3] += rc ? 0 : o->customers;
	}
	return rc;
}

static int tpcc_load(struct wl_machine *m, farm_loop *loop)
{
	const struct wl_opts *o = m->o;
	int rc = trees_init(m);
	if (rc)
		return rc;
	struct batch *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->m = m;
	b->loop = loop;
	b->size = sizeof(struct tpcc_item);
	b->fill = fill_item;
	b->table = 'I';
	b->key = key_item;
	/* Items (read-only, read lock-free): blocks of 64 dealt round the
	 * machines. */
	for (uint64_t i = 1, k = 0; i <= o->items && !rc; i += 64, k++) {
		uint64_t last = i + 63 < o->items ? i + 63 : o->items;
		if (k % o->machines == m->me)
			rc = load_range(b, i, last, 64);
	}
	if (rc)
		fprintf(stderr, "m%u: load: items: %s\n", m->me,
		        farm_strerror(rc));
	for (uint64_t w = 1; w <= o->scale && !rc; w++)
		if (wl_owner(o, w) == m->me) {
			rc = load_warehouse(b, w);
			if (rc) /* which table: the parent says only how */
				fprintf(stderr,
				        "m%u: load: warehouse %llu, table %c, "
				        "district %llu, row %llu: %s\n",
				        m->me, (unsigned long long)w,
				        b->table ? b->table : 'O',
				        (unsigned long long)b->d,
				        (unsigned long long)b->first,
				        farm_strerror(rc));
		}
	free(b);
	return rc;
}

/* ---- the consistency conditions ------------------------------------------
 */

/* Entries of a district's range of a tree: ids (the key's low half) and
 * values (fat pointers, or nothing). */
struct ids {
	uint64_t *id;
	farm_fatptr *p;
	size_t n, cap;
	int err;
};

static bool collect(void *ctx, const void *key, uint32_t klen, const void *val,
                    uint32_t vlen)
{
	struct ids *s = ctx;
	if (klen != 16) {
		s->err = FARM_ECORRUPT;
		return false;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		uint64_t *id = realloc(s->id, cap * sizeof(*id));
		if (id)
			s->id = id;
		farm_fatptr *p = realloc(s->p, cap * sizeof(*p));
		if (p)
			s->p = p;
		if (!id || !p) {
			s->err = -ENOMEM;
			return false;
		}
		s->cap = cap;
	}
	const uint8_t *k = key;
	uint64_t x = 0;
	for (int i = 8; i < 16; i++)
		x = x << 8 | k[i];
	s->id[s->n] = x & 0xffffffffu;
	memset(&s->p[s->n], 0, sizeof(farm_fatptr));
	if (vlen == sizeof(farm_fatptr))
		memcpy(&s->p[s->n], val, vlen);
	s->n++;
	return true;
}

static int scan_district(struct wl_client *c, farm_bt *t, uint64_t w,
                         uint64_t d, struct ids *s)
{
	struct tpcc_bkey a = tpcc_okey(w, d, 0), z = tpcc_okey(w, d + 1, 0);
	struct farm_bt_range r = {a.b, a.len, z.b, z.len, 0, false};
	s->n = 0;
	s->err = 0;
	uint64_t dl = wl_now_ns() + LOAD_NS;
	for (;;) {
		long n = farm_bt_scan(t, NULL, c->loop, &r, collect, s);
		if (s->err)
			return s->err;
		if (n >= 0)
			return 0;
		if (!wl_retryable((int)n) || wl_now_ns() > dl)
			return (int)n;
		s->n = 0;
	}
}

static int read_row(struct wl_client *c, char table, uint64_t id, void *buf,
                    uint32_t size)
{
	struct wl_key key = wl_key_make(table, id, 0);
	farm_fatptr p;
	int rc = wl_kv_ptr(c, &key, &p, sizeof(p));
	return rc ? rc : wl_lf_read(c, p, buf, size);
}

static bool has_id(const struct ids *s, uint64_t id)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->id[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n && s->id[lo] == id;
}

#define FAIL(...)                                              \
	do {                                                   \
		snprintf(r->msg, sizeof(r->msg), __VA_ARGS__); \
		r->check = -1;                                 \
		return 0;                                      \
	} while (0)

/* The orders of a district (conditions 4 and 5, the per-client counts):
 * their lines, and a carrier set exactly when no NEW-ORDER row is. */
static int check_orders(struct wl_client *c, uint64_t w, uint64_t d,
                        const struct ids *ord, const struct ids *no,
                        struct wl_result *r)
{
	uint64_t ol_sum = 0, lines = 0, undelivered = 0;
	for (size_t i = 0; i < ord->n; i++) {
		struct tpcc_order o;
		int rc = wl_lf_read(c, ord->p[i], &o, sizeof(o));
		if (rc)
			return rc;
		if (o.o_id != ord->id[i])
			FAIL("order (%llu,%llu,%llu) holds order %u",
			     (unsigned long long)w, (unsigned long long)d,
			     (unsigned long long)ord->id[i], o.o_id);
		ol_sum += o.ol_cnt;
		undelivered += o.carrier_id == 0;
		for (unsigned l = 0; l < TPCC_MAX_OL; l++)
			lines += o.ol[l].i_id != 0;
		if ((o.carrier_id == 0) != has_id(no, o.o_id))
			FAIL("condition 5: order (%llu,%llu,%u) has carrier "
			     "%u and %s NEW-ORDER row",
			     (unsigned long long)w, (unsigned long long)d,
			     o.o_id, o.carrier_id,
			     has_id(no, o.o_id) ? "a" : "no");
		if (o.client) {
			unsigned cl = o.client - 1;
			r->ledger[cl / 64 % WL_MAX_MACHINES]
			         [cl % 64 % WL_MAX_THREADS]++;
		}
	}
	/* Condition 5 from the NEW-ORDER side: a row whose order was lost
	 * would not be seen from the orders above. */
	if (undelivered != no->n)
		FAIL("condition 5: district (%llu,%llu): %llu undelivered "
		     "orders, %zu NEW-ORDER rows",
		     (unsigned long long)w, (unsigned long long)d,
		     (unsigned long long)undelivered, no->n);
	r->rows[0] += ord->n;
	r->rows[2] += lines;
	if (ol_sum != lines)
		FAIL("condition 4: district (%llu,%llu): sum(O_OL_CNT) %llu, "
		     "%llu ORDER-LINE rows",
		     (unsigned long long)w, (unsigned long long)d,
		     (unsigned long long)ol_sum, (unsigned long long)lines);
	return 0;
}

/* Conditions 2 to 5 for district (@w, @d); its D_YTD into @ytd. */
static int check_district(struct wl_client *c, uint64_t w, uint64_t d,
                          struct ids *ord, struct ids *no, int64_t *ytd,
                          struct wl_result *r)
{
	struct tpcc_dist dist;
	farm_bt *to, *tn;
	int rc = tpcc_bt(c->m, c->loop, w, TPCC_ORD, &to) ?:
	         tpcc_bt(c->m, c->loop, w, TPCC_NO, &tn) ?:
	         read_row(c, 'D', tpcc_did(w, d), &dist, sizeof(dist)) ?:
	         scan_district(c, to, w, d, ord) ?:
	         scan_district(c, tn, w, d, no);
	if (rc)
		return rc;
	*ytd += dist.ytd;
	r->rows[1] += no->n;
	r->rows[3]++;
	uint64_t max_o = ord->n ? ord->id[ord->n - 1] : 0;
	if (dist.next_o_id - 1 != max_o)
		FAIL("condition 2: district (%llu,%llu): D_NEXT_O_ID - 1 = "
		     "%u, max(O_ID) = %llu",
		     (unsigned long long)w, (unsigned long long)d,
		     dist.next_o_id - 1, (unsigned long long)max_o);
	/* Order ids are dense (D_NEXT_O_ID hands them out one by one, a
	 * rolled-back NewOrder never takes one), so a lost order below the
	 * maximum shows as a short count. */
	if (ord->n != max_o)
		FAIL("district (%llu,%llu): %zu orders for ids 1..%llu",
		     (unsigned long long)w, (unsigned long long)d, ord->n,
		     (unsigned long long)max_o);
	if (no->n && no->id[no->n - 1] != max_o)
		FAIL("condition 2: district (%llu,%llu): max(NO_O_ID) = %llu, "
		     "max(O_ID) = %llu",
		     (unsigned long long)w, (unsigned long long)d,
		     (unsigned long long)no->id[no->n - 1],
		     (unsigned long long)max_o);
	if (no->n && no->id[no->n - 1] - no->id[0] + 1 != no->n)
		FAIL("condition 3: district (%llu,%llu): NEW-ORDER from %llu "
		     "to %llu holds %zu rows",
		     (unsigned long long)w, (unsigned long long)d,
		     (unsigned long long)no->id[0],
		     (unsigned long long)no->id[no->n - 1], no->n);
	return check_orders(c, w, d, ord, no, r);
}

/* Conditions 1 to 5 over every warehouse (the cluster is quiet: reads
 * are lock-free), and each client's orders counted into r->ledger. */
static int tpcc_check(struct wl_machine *m, farm_loop *loop,
                      struct wl_result *r)
{
	struct wl_client *c = &m->cl[0];
	struct ids ord = {0}, no = {0};
	int rc = 0;
	(void)loop;
	for (uint64_t w = 1; w <= m->o->scale && !rc && !r->check; w++) {
		struct tpcc_wh wh;
		int64_t ytd = 0;
		rc = read_row(c, 'W', w, &wh, sizeof(wh));
		for (uint64_t d = 1; d <= TPCC_DISTRICTS && !rc && !r->check;
		     d++)
			rc = check_district(c, w, d, &ord, &no, &ytd, r);
		if (!rc && !r->check && wh.ytd != ytd) {
			snprintf(r->msg, sizeof(r->msg),
			         "condition 1: warehouse %llu: W_YTD %lld, "
			         "sum(D_YTD) %lld",
			         (unsigned long long)w, (long long)wh.ytd,
			         (long long)ytd);
			r->check = -1;
		}
	}
	if (rc)
		snprintf(r->msg, sizeof(r->msg), "reading the tables: %s",
		         farm_strerror(rc));
	free(ord.id);
	free(ord.p);
	free(no.id);
	free(no.p);
	return rc;
}

static void tpcc_ship(struct wl_machine *m, farm_loop *loop,
                      const farm_msg_in *in)
{
	(void)m;
	wl_unanswered(farm_msg_reply_error(loop, &in->token, -EOPNOTSUPP));
}

static void tpcc_fini(struct wl_machine *m)
{
	struct tpcc_trees *t = m->app;
	for (uint64_t i = 0; t && i < (t->nw + 1) * 4; i++)
		farm_bt_close(atomic_load(&t->t[i]));
	if (t)
		free(t->t);
	free(t);
	m->app = NULL;
	for (unsigned i = 0; i < WL_MAX_THREADS; i++)
		tpcc_client_free(&m->cl[i]);
}

const struct wl_ops wl_tpcc_ops = {tpcc_load,  tpcc_txn,  tpcc_ship,
                                   tpcc_check, tpcc_fini, NULL};
