/*
 * SmallBank on libfarm: savings and checking rows as objects indexed by
 * the KV store ('s'/'c' + account id -> fat pointer), the six
 * transactions as libfarm transactions, a hotspot, and in audit mode a
 * ledger row per client that every changing transaction also updates, so
 * the total can be checked however many transactions ended unknown.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_bank.h"

#define LEDGER_KEY (1ull << 62)

static int64_t initial_balance(uint64_t id, int kind)
{
	uint64_t s = (id * 2 + (uint64_t)kind) * 0x9e3779b97f4a7c15ull + 1;
	return (int64_t)wl_uni(&s, 10000, 50000);
}

/* Allocate the rows of the accounts of @first..@last this machine owns
 * in one transaction, run again while it fails retryably (a loaded host
 * can time a commit out). */
static int alloc_rows(struct wl_machine *m, farm_loop *loop, uint64_t first,
                      uint64_t last, farm_fatptr *p)
{
	uint64_t dl = wl_now_ns() + 20ull * 1000000000ull;
	for (;;) {
		unsigned n = 0;
		farm_tx *tx;
		int rc = farm_tx_begin(m->txm, loop, &tx);
		if (rc)
			return rc;
		for (uint64_t id = first; id <= last && !rc; id++) {
			if (wl_owner(m->o, id) != m->me)
				continue;
			for (int k = 0; k < 2 && !rc; k++) {
				void *d;
				rc = farm_tx_alloc_sync(
				        tx, sizeof(struct bank_row),
				        FARM_GADDR_NULL, &p[n++], &d);
				if (!rc)
					((struct bank_row *)d)->bal =
					        initial_balance(id, k);
			}
		}
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (!rc || !wl_retryable(rc) || wl_now_ns() > dl)
			return rc;
	}
}

static int load_batch(struct wl_machine *m, farm_loop *loop, uint64_t first,
                      uint64_t last, uint64_t *accounts, int64_t *total)
{
	farm_fatptr p[64];
	unsigned n = 0;
	int rc = alloc_rows(m, loop, first, last, p);
	for (uint64_t id = first; id <= last && !rc; id++) {
		if (wl_owner(m->o, id) != m->me)
			continue;
		for (int k = 0; k < 2 && !rc; k++) {
			struct wl_key key = wl_key_make(k ? 'c' : 's', id, 0);
			rc = wl_kv_put(m, loop, &key, &p[n++],
			               sizeof(farm_fatptr));
			*total += initial_balance(id, k);
		}
		++*accounts;
	}
	return rc;
}

static int alloc_ledger(struct wl_machine *m, farm_loop *loop, farm_fatptr *p)
{
	uint64_t dl = wl_now_ns() + 20ull * 1000000000ull;
	for (;;) {
		farm_tx *tx;
		void *d;
		int rc = farm_tx_begin(m->txm, loop, &tx);
		if (rc)
			return rc;
		rc = farm_tx_alloc_sync(tx, sizeof(struct bank_ledger),
		                        FARM_GADDR_NULL, p, &d);
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (!rc || !wl_retryable(rc) || wl_now_ns() > dl)
			return rc;
	}
}

static int bank_load(struct wl_machine *m, farm_loop *loop)
{
	uint64_t accounts = 0;
	int64_t total = 0;
	int rc = 0;
	for (uint64_t id = 1; id <= m->o->scale && !rc;
	     id += 32 * m->o->machines) {
		uint64_t last = id + 32 * m->o->machines - 1;
		rc = load_batch(m, loop, id,
		                last < m->o->scale ? last : m->o->scale,
		                &accounts, &total);
	}
	for (unsigned t = 0; t < m->o->threads && !rc; t++) {
		rc = alloc_ledger(m, loop, &m->cl[t].ledger);
		struct wl_key key = wl_key_make('L', m->me * 64u + t, 0);
		if (!rc)
			rc = wl_kv_put(m, loop, &key, &m->cl[t].ledger,
			               sizeof(farm_fatptr));
	}
	m->loaded[0] = accounts;
	m->loaded[1] = (uint64_t)total;
	return rc;
}

/* ---- transactions ---------------------------------------------------------
 */

static uint64_t pick_account(struct wl_client *c)
{
	const struct wl_opts *o = c->m->o;
	uint64_t hot = o->scale * o->hot_pct / 100;
	hot = hot ? hot : 1;
	uint64_t id = wl_uni(&c->rng, 0, 99) < o->hot_prob
	                      ? wl_uni(&c->rng, 1, hot)
	                      : wl_uni(&c->rng, 1, o->scale);
	return wl_pick_id(c, id);
}

/* A client keeps the fat pointers its KV lookups found (wl_rowcache.c),
 * as TATP's clients do: SmallBank's rows are allocated by the load and
 * never freed, moved or re-indexed in a run, so a row's pointer is looked
 * up once (a lookup per row per transaction was two to three KV gets,
 * each a hash and a bucket read, beside reads of one object each). */
#define ROWS_MAX_BITS 18 /* 6 MiB a client */

/* Add the row of account @id, kind @k (0 savings, 1 checking). */
static int add_row(struct wl_client *c, struct btx *b, uint64_t id, int k)
{
	uint64_t rk = id * 2 + (uint64_t)k;
	if (!c->rows)
		c->rows = wl_rowcache_new(2 * c->m->o->scale, ROWS_MAX_BITS);
	struct wl_key key = wl_key_make(k ? 'c' : 's', id, 0);
	b->key[b->n] = rk;
	return wl_rowcache_get(c, c->rows, rk + 1, &key, &b->p[b->n++],
	                       sizeof(farm_fatptr));
}

#ifdef FWL_TEST_BREAK_READ
/* Test-only (fwl_broken): the logic works on lock-free reads taken
 * outside the transaction, a moment before it reads; so two clients can
 * both update from the same balance, and the tests must notice. */
static int stale_read(struct wl_client *c, struct btx *b, unsigned i)
{
	static const volatile int never = 0;
	int rc = farm_lf_read_sync(c->m->txm, c->loop, b->p[i].addr,
	                           sizeof(b->row[i]), b->p[i].incarnation,
	                           &b->row[i]);
	(void)farm_loop_wait(c->loop, &never, 2000000);
	return rc;
}
#endif

static int read_rows(struct wl_client *c, struct btx *b)
{
	for (unsigned i = 0; i < b->n; i++) {
		const void *d;
#ifdef FWL_TEST_BREAK_READ
		int rc = stale_read(c, b, i)
		                 ?: farm_tx_read_sync(b->tx, b->p[i].addr,
		                                      sizeof(struct bank_row),
		                                      &d);
		if (rc)
			return rc;
#else
		(void)c;
		int rc = farm_tx_read_sync(b->tx, b->p[i].addr,
		                           sizeof(struct bank_row), &d);
		if (rc)
			return rc;
		memcpy(&b->row[i], d, sizeof(b->row[i]));
#endif
	}
	wl_bank_rows_read(b);
	return 0;
}

void wl_bank_rows_read(struct btx *b)
{
	for (unsigned i = 0; i < b->n; i++) {
		b->w[i] = NULL;
		b->ops[b->nops++] =
		        (struct wl_hop){b->key[i], b->row[i].ver, 0, 0};
	}
}

/* Set row @i's balance (a write of the transaction). */
static int set_bal(struct btx *b, unsigned i, int64_t bal)
{
	if (!b->w[i]) {
		void *d;
		int rc = farm_tx_write(b->tx, b->p[i].addr, &d);
		if (rc)
			return rc;
		b->w[i] = d;
		b->w[i]->ver = b->row[i].ver + 1;
		b->ops[b->nops++] =
		        (struct wl_hop){b->key[i], b->w[i]->ver, 1, 0};
	}
	b->w[i]->bal = bal;
	return 0;
}

static int ledger_add(struct wl_client *c, struct btx *b, int64_t delta)
{
	const void *d;
	void *w;
	int rc = farm_tx_read_sync(b->tx, c->ledger.addr,
	                           sizeof(struct bank_ledger), &d);
	if (rc)
		return rc;
	struct bank_ledger l;
	memcpy(&l, d, sizeof(l));
	rc = farm_tx_write(b->tx, c->ledger.addr, &w);
	if (rc)
		return rc;
	uint64_t key = LEDGER_KEY | (uint64_t)c->m->me << 8 | c->idx;
	b->ops[b->nops++] = (struct wl_hop){key, l.ver, 0, 0};
	l.delta += delta;
	l.commits++;
	l.ver++;
	b->ops[b->nops++] = (struct wl_hop){key, l.ver, 1, 0};
	memcpy(w, &l, sizeof(l));
	return 0;
}

/* The logic of @t over the rows read: 0 with the writes made and
 * *@delta what it adds to the total, 1 when the logic ends it. */
int wl_bank_logic(struct btx *b, enum wl_txn t, int64_t v, int64_t *delta)
{
	int64_t x0 = b->row[0].bal, x1 = b->n > 1 ? b->row[1].bal : 0;
	*delta = 0;
	switch (t) {
	case WT_BALANCE: return 0;
	case WT_DEPOSIT:
	case WT_TRANSACT_SAV: *delta = v; return set_bal(b, 0, x0 + v);
	case WT_AMALGAMATE: /* savings1, checking1, checking2 */
		return set_bal(b, 0, 0) || set_bal(b, 1, 0) ||
		       set_bal(b, 2, b->row[2].bal + x0 + x1);
	case WT_WRITE_CHECK: /* savings, checking */
		*delta = x0 + x1 < v ? -(v + 1) : -v;
		return set_bal(b, 1, x1 + *delta);
	case WT_SEND_PAYMENT: /* checking1, checking2 */
		if (x0 < v)
			return 1;
		return set_bal(b, 0, x0 - v) || set_bal(b, 1, x1 + v);
	default: return -EINVAL;
	}
}

static void hist_write(struct wl_client *c, const void *a, size_t la,
                       const void *p, size_t lp)
{
	char buf[sizeof(struct wl_hrec) +
	         WL_HIST_MAX_OPS * sizeof(struct wl_hop)];
	memcpy(buf, a, la);
	if (lp) /* a transaction with no operations passes no array */
		memcpy(buf + la, p, lp);
	if (write(c->hist_fd, buf, la + lp) < 0)
		c->res.errors++;
}

/* One attempt: 0 committed, 1 ended by the logic, or the error. */
static int attempt(struct wl_client *c, struct btx *b, enum wl_txn t, int64_t v)
{
	b->nops = 0;
	int rc = farm_tx_begin(c->m->txm, c->loop, &b->tx);
	if (rc)
		return rc;
	int64_t delta = 0;
	uint64_t t0 = wl_now_ns();
	rc = read_rows(c, b);
	c->phase_ns[WL_PH_READ] += wl_now_ns() - t0;
	if (!rc)
		rc = wl_bank_logic(b, t, v, &delta);
	bool writes = b->nops > b->n;
	if (!rc && writes && c->m->o->audit)
		rc = ledger_add(c, b, delta);
	if (rc) {
		farm_tx_free(b->tx);
		return rc;
	}
	uint64_t seq = ++c->hist_seq;
	if (c->hist_fd >= 0) {
		struct wl_hrec h = {'B', b->nops, seq, t0};
		hist_write(c, &h, sizeof(h), b->ops,
		           b->nops * sizeof(b->ops[0]));
	}
	uint64_t tc = wl_now_ns();
	rc = farm_tx_commit_sync(b->tx);
	c->phase_ns[WL_PH_COMMIT] += wl_now_ns() - tc;
	farm_tx_free(b->tx);
	if (c->hist_fd >= 0 && (rc == 0 || wl_retryable(rc))) {
		struct wl_hrec h = {'E', rc == 0 ? 1 : 2, seq, wl_now_ns()};
		hist_write(c, &h, sizeof(h), NULL, 0);
	}
	if (rc == 0 && writes) {
		c->res.acked[c->m->me][c->idx]++;
		c->res.acked_delta += delta;
	}
	return rc;
}

int wl_bank_prepare(struct wl_client *c, struct btx *b, enum wl_txn t,
                    int64_t *amount)
{
	uint64_t a = pick_account(c), a2 = a;
	*amount = (int64_t)wl_uni(&c->rng, 1, 100);
	int rc = 0;
	/* A second account: a bounded number of picks (a skewed or
	 * partitioned pick may keep landing on @a), then @a's neighbour
	 * (wl_validate guarantees at least two accounts). */
	if (t == WT_AMALGAMATE || t == WT_SEND_PAYMENT) {
		for (int i = 0; i < 64 && a2 == a; i++)
			a2 = pick_account(c);
		if (a2 == a)
			a2 = a % c->m->o->scale + 1;
	}
	memset(c->phase_ns, 0, sizeof(c->phase_ns));
	uint64_t tl = wl_now_ns();
	switch (t) {
	case WT_BALANCE:
	case WT_WRITE_CHECK:
		rc = add_row(c, b, a, 0) ?: add_row(c, b, a, 1);
		break;
	case WT_DEPOSIT: rc = add_row(c, b, a, 1); break;
	case WT_TRANSACT_SAV: rc = add_row(c, b, a, 0); break;
	case WT_AMALGAMATE:
		rc = add_row(c, b, a, 0) ?: add_row(c, b, a, 1)
		                         ?: add_row(c, b, a2, 1);
		break;
	case WT_SEND_PAYMENT:
		rc = add_row(c, b, a, 1) ?: add_row(c, b, a2, 1);
		break;
	default: return -EINVAL;
	}
	c->phase_ns[WL_PH_LOOKUP] = wl_now_ns() - tl;
	return rc;
}

static int bank_txn(struct wl_client *c, enum wl_txn t)
{
	if (c->m->o->bank_window > 1)
		return wl_bank_txn_window(c, t);
	struct btx b = {0};
	int64_t v;
	int rc = wl_bank_prepare(c, &b, t, &v);
	if (rc)
		return rc;
	uint64_t dl = wl_now_ns() + 20ull * 1000000000ull;
	for (unsigned tries = 1;; tries++) {
		rc = attempt(c, &b, t, v);
		if (rc >= 0 || !wl_retryable(rc) || wl_now_ns() > dl)
			return rc;
		c->res.retries++;
		uint64_t tb = wl_now_ns();
		wl_backoff(c, tries);
		c->phase_ns[WL_PH_BACKOFF] += wl_now_ns() - tb;
	}
}

/* ---- check ----------------------------------------------------------------
 */

static int read_ptr(struct wl_client *c, char table, uint64_t id, void *buf,
                    uint32_t size)
{
	struct wl_key key = wl_key_make(table, id, 0);
	farm_fatptr p;
	int rc = wl_kv_ptr(c, &key, &p, sizeof(p));
	if (rc)
		return rc;
	return wl_lf_read(c, p, buf, size);
}

static int bank_check(struct wl_machine *m, farm_loop *loop,
                      struct wl_result *r)
{
	struct wl_client *c = &m->cl[0];
	(void)loop;
	for (uint64_t id = 1; id <= m->o->scale; id++) {
		struct bank_row s, k;
		int rc = read_ptr(c, 's', id, &s, sizeof(s));
		if (!rc)
			rc = read_ptr(c, 'c', id, &k, sizeof(k));
		if (rc) {
			snprintf(r->msg, sizeof(r->msg), "account %llu: %s",
			         (unsigned long long)id, farm_strerror(rc));
			return rc;
		}
		r->rows[0]++;
		r->total += s.bal + k.bal;
	}
	for (unsigned i = 0; i < m->o->machines; i++)
		for (unsigned t = 0; t < m->o->threads; t++) {
			struct bank_ledger l;
			int rc = read_ptr(c, 'L', i * 64u + t, &l, sizeof(l));
			if (rc) {
				snprintf(r->msg, sizeof(r->msg),
				         "ledger %u.%u: %s", i, t,
				         farm_strerror(rc));
				return rc;
			}
			r->ledger[i][t] = l.commits;
			r->ledger_delta += l.delta;
		}
	return 0;
}

static void bank_ship(struct wl_machine *m, farm_loop *loop,
                      const farm_msg_in *in)
{
	(void)m;
	wl_unanswered(farm_msg_reply_error(loop, &in->token, -EOPNOTSUPP));
}

static void bank_fini(struct wl_machine *m)
{
	for (unsigned t = 0; t < m->o->threads; t++) {
		wl_rowcache_free(m->cl[t].rows);
		m->cl[t].rows = NULL;
	}
	wl_bank_win_fini(m);
}

const struct wl_ops wl_bank_ops = {bank_load,  bank_txn,  bank_ship,
                                   bank_check, bank_fini, wl_bank_reap};
