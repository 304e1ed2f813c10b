/*
 * workload_bench's in-memory limit for TPC-C: the rows, population,
 * generators and transaction logic of wl_tpcc.c and wl_tpcc_txn.c in one
 * thread of this process, on plain arrays (warehouses, districts,
 * customers, stock and items are indexed by their ids, the densest hash)
 * and plain ordered maps: a sorted array per district for ORDER by id,
 * NEW-ORDER and ORDER by customer, and the customers of a district sorted
 * by (last, first, id) for the name lookup. No replication, messages or
 * concurrency control: what a core can do at best.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_peers.h"
#include "wl_tpcc.h"

/* A sorted map of u64 keys; entries before @lo are deleted (NEW-ORDER is
 * a queue: deletes at the front cost nothing). */
struct omap {
	uint64_t *k;
	void **v;
	size_t lo, n, cap;
};

static size_t om_lower(const struct omap *m, uint64_t k)
{
	size_t a = m->lo, b = m->n;
	while (a < b) {
		size_t mid = (a + b) / 2;
		if (m->k[mid] < k)
			a = mid + 1;
		else
			b = mid;
	}
	return a;
}

static int om_put(struct omap *m, uint64_t k, void *v)
{
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		uint64_t *nk = realloc(m->k, cap * sizeof(*nk));
		if (nk)
			m->k = nk;
		void **nv = realloc(m->v, cap * sizeof(*nv));
		if (nv)
			m->v = nv;
		if (!nk || !nv)
			return -ENOMEM;
		m->cap = cap;
	}
	size_t i = m->n && m->k[m->n - 1] < k ? m->n : om_lower(m, k);
	memmove(m->k + i + 1, m->k + i, (m->n - i) * sizeof(*m->k));
	memmove(m->v + i + 1, m->v + i, (m->n - i) * sizeof(*m->v));
	m->k[i] = k;
	m->v[i] = v;
	m->n++;
	return 0;
}

static void om_del(struct omap *m, size_t i)
{
	if (i == m->lo) {
		m->lo++;
		return;
	}
	memmove(m->k + i, m->k + i + 1, (m->n - i - 1) * sizeof(*m->k));
	memmove(m->v + i, m->v + i + 1, (m->n - i - 1) * sizeof(*m->v));
	m->n--;
}

static void om_free(struct omap *m)
{
	free(m->k);
	free(m->v);
}

struct mdist {
	struct tpcc_dist row;
	struct tpcc_cust *cust;    /* by id - 1 */
	struct tpcc_cust **byname; /* sorted by (last, first, id) */
	struct omap ord, no, cord;
};

struct mwh {
	struct tpcc_wh row;
	struct tpcc_stock *stock; /* by item - 1 */
	struct mdist d[TPCC_DISTRICTS];
};

struct mem {
	const struct wl_opts *o;
	struct mwh *wh; /* by id - 1 */
	struct tpcc_item *item;
	void **hist;
	size_t nhist, hcap;
	uint64_t rng, new_orders;
};

static int name_cmp(const void *a, const void *b)
{
	const struct tpcc_cust *x = *(const struct tpcc_cust *const *)a,
	                       *y = *(const struct tpcc_cust *const *)b;
	int c = memcmp(x->last, y->last, 16);
	if (!c)
		c = memcmp(x->first, y->first, 16);
	return c ? c : (x < y ? -1 : x > y);
}

static int load_dist(struct mem *m, uint32_t w, uint32_t d)
{
	const struct wl_opts *o = m->o;
	struct mdist *md = &m->wh[w - 1].d[d - 1];
	uint64_t r = w * 7919ull + d;
	md->row = (struct tpcc_dist){3000000, (uint32_t)wl_uni(&r, 0, 2000),
	                             o->customers + 1};
	md->cust = calloc(o->customers, sizeof(*md->cust));
	md->byname = calloc(o->customers, sizeof(*md->byname));
	if (!md->cust || !md->byname)
		return -ENOMEM;
	for (uint32_t c = 1; c <= o->customers; c++) {
		struct tpcc_cust *cu = &md->cust[c - 1];
		tpcc_last_name(tpcc_load_name(&r, c, o->customers), cu->last);
		for (unsigned k = 0; k < 10; k++)
			cu->first[k] = (char)('a' + wl_uni(&r, 0, 25));
		cu->discount = (uint32_t)wl_uni(&r, 0, 5000);
		cu->balance = -1000;
		cu->ytd_payment = 1000;
		cu->payment_cnt = 1;
		md->byname[c - 1] = cu;
	}
	qsort(md->byname, o->customers, sizeof(*md->byname), name_cmp);
	uint32_t first_new = tpcc_first_new(o->customers);
	for (uint32_t id = 1; id <= o->customers; id++) {
		struct tpcc_order * or = calloc(1, sizeof(* or));
		if (! or)
			return -ENOMEM;
		bool done = id < first_new;
		or->o_id = id;
		or->c_id = (uint32_t)((id * 7ull) % o->customers) + 1;
		or->carrier_id = done ? (uint8_t)wl_uni(&r, 1, 10) : 0;
		or->ol_cnt = (uint8_t)wl_uni(&r, 5, 15);
		for (unsigned l = 0; l < or->ol_cnt; l++)
			or->ol[l] = (struct tpcc_ol){
			        (uint32_t)wl_uni(&r, 1, o->items),
			        (uint16_t)w,
			        5,
			        (uint8_t)(l + 1),
			        done ? 0 : (int32_t)wl_uni(&r, 1, 999999),
			        0,
			        done};
		int rc = om_put(&md->ord, id, or)
		                 ?: om_put(&md->cord,
		                           (uint64_t) or->c_id << 32 | id, or);
		if (!rc && !done)
			rc = om_put(&md->no, id, or);
		if (rc)
			return rc;
	}
	return 0;
}

static int mem_load(struct mem *m)
{
	const struct wl_opts *o = m->o;
	m->wh = calloc(o->scale, sizeof(*m->wh));
	m->item = calloc(o->items, sizeof(*m->item));
	if (!m->wh || !m->item)
		return -ENOMEM;
	uint64_t r = 12345;
	for (uint32_t i = 0; i < o->items; i++)
		m->item[i].price = (int32_t)wl_uni(&r, 100, 10000);
	int rc = 0;
	for (uint32_t w = 1; w <= o->scale && !rc; w++) {
		struct mwh *h = &m->wh[w - 1];
		h->row = (struct tpcc_wh){30000000,
		                          (uint32_t)wl_uni(&r, 0, 2000), 0};
		h->stock = calloc(o->items, sizeof(*h->stock));
		if (!h->stock)
			return -ENOMEM;
		for (uint32_t i = 0; i < o->items; i++)
			h->stock[i].quantity = (int32_t)wl_uni(&r, 10, 100);
		for (uint32_t d = 1; d <= TPCC_DISTRICTS && !rc; d++)
			rc = load_dist(m, w, d);
	}
	return rc;
}

static uint32_t mhome(struct mem *m)
{
	return (uint32_t)wl_uni(&m->rng, 1, m->o->scale);
}

static uint32_t mother(struct mem *m, uint32_t w)
{
	uint32_t x = (uint32_t)wl_uni(&m->rng, 1, m->o->scale - 1);
	return x >= w ? x + 1 : x;
}

static int m_new_order(struct mem *m)
{
	const struct wl_opts *o = m->o;
	uint32_t w = mhome(m), d = (uint32_t)wl_uni(&m->rng, 1, 10);
	uint32_t c = tpcc_pick_cust(&m->rng, o->customers);
	uint32_t n = (uint32_t)wl_uni(&m->rng, 5, 15);
	uint32_t it[TPCC_MAX_OL], sw[TPCC_MAX_OL], q[TPCC_MAX_OL];
	bool rbk = wl_uni(&m->rng, 1, 100) == 1, local = true;
	for (uint32_t l = 0; l < n; l++) {
		it[l] = tpcc_pick_item(&m->rng, o->items);
		sw[l] = w;
		if (o->scale > 1 && wl_uni(&m->rng, 1, 100) == 1) {
			sw[l] = mother(m, w);
			local = false;
		}
		q[l] = (uint32_t)wl_uni(&m->rng, 1, 10);
	}
	if (rbk) /* an unused item: rolled back before any write */
		return 1;
	struct mwh *h = &m->wh[w - 1];
	struct mdist *md = &h->d[d - 1];
	volatile uint32_t tax = h->row.tax + md->cust[c - 1].discount;
	(void)tax;
	struct tpcc_order * or = calloc(1, sizeof(* or));
	if (! or)
		return -ENOMEM;
	or->o_id = md->row.next_o_id++;
	or->c_id = c;
	or->entry_d = wl_now_ns();
	or->ol_cnt = (uint8_t)n;
	or->all_local = local;
	for (uint32_t l = 0; l < n; l++) {
		struct tpcc_stock *s = &m->wh[sw[l] - 1].stock[it[l] - 1];
		int32_t qq = (int32_t)q[l];
		s->quantity = s->quantity >= qq + 10 ? s->quantity - qq
		                                     : s->quantity - qq + 91;
		s->ytd += q[l];
		s->order_cnt++;
		s->remote_cnt += sw[l] != w;
		or->ol[l] = (struct tpcc_ol){it[l],
		                             (uint16_t)sw[l],
		                             (uint8_t)qq,
		                             (uint8_t)(l + 1),
		                             qq * m->item[it[l] - 1].price,
		                             0,
		                             0};
	}
	m->new_orders++;
	return om_put(&md->ord, or->o_id, or) ?:
	       om_put(&md->cord, (uint64_t)c << 32 | or->o_id, or) ?:
	       om_put(&md->no, or->o_id, or);
}

/* The customer of a Payment or OrderStatus (60% by last name). */
static struct tpcc_cust *m_customer(struct mem *m, struct mdist *md)
{
	uint32_t n = m->o->customers;
	if (wl_uni(&m->rng, 1, 100) > 60)
		return &md->cust[tpcc_pick_cust(&m->rng, n) - 1];
	char last[16];
	tpcc_last_name(tpcc_pick_name(&m->rng, n), last);
	size_t a = 0, b = n;
	while (a < b) {
		size_t mid = (a + b) / 2;
		if (memcmp(md->byname[mid]->last, last, 16) < 0)
			a = mid + 1;
		else
			b = mid;
	}
	size_t e = a;
	while (e < n && !memcmp(md->byname[e]->last, last, 16))
		e++;
	return e > a ? md->byname[a + (e - a - 1) / 2] : NULL;
}

static int m_payment(struct mem *m)
{
	uint32_t w = mhome(m), d = (uint32_t)wl_uni(&m->rng, 1, 10);
	uint32_t cw = w, cd = d;
	int32_t amount = (int32_t)wl_uni(&m->rng, 100, 500000);
	if (m->o->scale > 1 && wl_uni(&m->rng, 1, 100) <= 15) {
		cw = mother(m, w);
		cd = (uint32_t)wl_uni(&m->rng, 1, 10);
	}
	struct tpcc_cust *cu = m_customer(m, &m->wh[cw - 1].d[cd - 1]);
	if (!cu)
		return -ENOENT;
	m->wh[w - 1].row.ytd += amount;
	m->wh[w - 1].d[d - 1].row.ytd += amount;
	cu->balance -= amount;
	cu->ytd_payment += amount;
	cu->payment_cnt++;
	struct tpcc_hist *hi = malloc(sizeof(*hi));
	if (!hi)
		return -ENOMEM;
	*hi = (struct tpcc_hist){(uint32_t)(cu - m->wh[cw - 1].d[cd - 1].cust) +
	                                 1,
	                         cd,
	                         cw,
	                         d,
	                         w,
	                         amount,
	                         wl_now_ns()};
	if (m->nhist == m->hcap) {
		size_t cap = m->hcap ? m->hcap * 2 : 1024;
		void **nh = realloc(m->hist, cap * sizeof(*nh));
		if (!nh) {
			free(hi);
			return -ENOMEM;
		}
		m->hist = nh;
		m->hcap = cap;
	}
	m->hist[m->nhist++] = hi;
	return 0;
}

static int m_order_status(struct mem *m)
{
	uint32_t w = mhome(m), d = (uint32_t)wl_uni(&m->rng, 1, 10);
	struct mdist *md = &m->wh[w - 1].d[d - 1];
	struct tpcc_cust *cu = m_customer(m, md);
	if (!cu)
		return -ENOENT;
	uint64_t c = (uint64_t)(cu - md->cust) + 1;
	size_t i = om_lower(&md->cord, (c + 1) << 32);
	if (i > md->cord.lo && md->cord.k[i - 1] >> 32 == c) {
		volatile int64_t sum = 0;
		const struct tpcc_order * or = md->cord.v[i - 1];
		for (unsigned l = 0; l < or->ol_cnt; l++)
			sum += or->ol[l].amount;
	}
	return 0;
}

static int m_delivery(struct mem *m)
{
	uint32_t w = mhome(m), carrier = (uint32_t)wl_uni(&m->rng, 1, 10);
	for (uint32_t d = 1; d <= TPCC_DISTRICTS; d++) {
		struct mdist *md = &m->wh[w - 1].d[d - 1];
		if (md->no.lo == md->no.n)
			continue;
		struct tpcc_order * or = md->no.v[md->no.lo];
		om_del(&md->no, md->no.lo);
		or->carrier_id = (uint8_t)carrier;
		int64_t sum = 0;
		uint64_t now = wl_now_ns();
		for (unsigned l = 0; l < or->ol_cnt; l++) {
			or->ol[l].delivery_d = now;
			sum += or->ol[l].amount;
		}
		md->cust[or->c_id - 1].balance += sum;
		md->cust[or->c_id - 1].delivery_cnt++;
	}
	return 0;
}

static int m_stock_level(struct mem *m)
{
	uint32_t w = mhome(m), d = (uint32_t)wl_uni(&m->rng, 1, 10);
	int32_t thr = (int32_t)wl_uni(&m->rng, 10, 20);
	struct mdist *md = &m->wh[w - 1].d[d - 1];
	uint32_t next = md->row.next_o_id, lo = next > 20 ? next - 20 : 1;
	uint32_t seen[20 * TPCC_MAX_OL], nseen = 0;
	volatile uint32_t low = 0;
	for (size_t i = om_lower(&md->ord, lo); i < md->ord.n; i++) {
		const struct tpcc_order * or = md->ord.v[i];
		for (unsigned l = 0; l < or->ol_cnt; l++) {
			uint32_t it = or->ol[l].i_id, k = 0;
			while (k < nseen && seen[k] != it)
				k++;
			if (k < nseen)
				continue;
			seen[nseen++] = it;
			low += m->wh[w - 1].stock[it - 1].quantity < thr;
		}
	}
	return 0;
}

static void mem_free(struct mem *m)
{
	for (uint64_t w = 0; m->wh && w < m->o->scale; w++) {
		for (unsigned d = 0; d < TPCC_DISTRICTS; d++) {
			struct mdist *md = &m->wh[w].d[d];
			for (size_t i = 0; i < md->ord.n; i++)
				free(md->ord.v[i]);
			om_free(&md->ord);
			om_free(&md->no);
			om_free(&md->cord);
			free(md->cust);
			free(md->byname);
		}
		free(m->wh[w].stock);
	}
	for (size_t i = 0; i < m->nhist; i++)
		free(m->hist[i]);
	free(m->hist);
	free(m->wh);
	free(m->item);
}

int wl_mem_tpcc_run(const struct wl_opts *o, struct wl_bres *out)
{
	static int (*const fn[5])(struct mem *) = {m_new_order, m_payment,
	                                           m_order_status, m_delivery,
	                                           m_stock_level};
	struct mem m = {.o = o, .rng = (o->seed + 5) * 0x9e3779b97f4a7c15ull};
	uint64_t *hist = calloc(WL_HIST_BUCKETS, sizeof(uint64_t));
	int rc = hist ? mem_load(&m) : -ENOMEM;
	uint64_t n = 0, t0 = wl_now_ns(), cpu0 = wl_thread_cpu_ns(),
	         end = t0 + o->duration_ms * 1000000ull;
	while (!rc && wl_now_ns() < end) {
		for (int i = 0; i < 64 && rc >= 0; i++) {
			unsigned r = (unsigned)wl_uni(&m.rng, 0, 99), acc = 0;
			int t = WT_NEW_ORDER;
			while (t < WT_NTYPES - 1 && r >= (acc += o->mix[t]))
				t++;
			uint64_t s = wl_now_ns();
			rc = fn[t - WT_NEW_ORDER](&m);
			hist[wl_hist_bucket(wl_now_ns() - s)]++;
			n++;
		}
		rc = rc < 0 ? rc : 0;
	}
	double secs = (double)(wl_now_ns() - t0) / 1e9;
	*out = (struct wl_bres){.tput = n / secs,
	                        .new_orders = m.new_orders / secs,
	                        .cpu_tput = wl_thread_cpu_rate(n, cpu0),
	                        .p50 = wl_hist_pct(hist, 0.5),
	                        .p99 = wl_hist_pct(hist, 0.99),
	                        .cores = 1,
	                        .clients = 1};
	snprintf(out->note, sizeof(out->note),
	         "one thread, arrays and sorted per-district maps");
	free(hist);
	mem_free(&m);
	return rc;
}
