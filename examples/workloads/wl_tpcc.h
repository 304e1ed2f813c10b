/*
 * TPC-C on libfarm (README.md): the rows, the keys of the KV store and of
 * the ordered indexes, and the specification's random generators (NURand,
 * last names), shared by the load and check (wl_tpcc.c), the five
 * transactions (wl_tpcc_txn.c) and the in-memory limit (wl_mem_tpcc.c).
 */
#ifndef FWL_WL_TPCC_H
#define FWL_WL_TPCC_H

#include <stdint.h>
#include <string.h>

#include <farm/btree.h>

#include "wl_int.h"

#define TPCC_DISTRICTS 10
#define TPCC_MAX_OL    15
/* Run-time and load-time constants C of NURand (spec 2.1.6): the last
 * names' differ by 86 (65..119, not 96 or 112, clause 2.1.6.1). */
#define TPCC_C_LAST_LOAD 157
#define TPCC_C_LAST_RUN  243
#define TPCC_C_ID        259
#define TPCC_C_ITEM      7911

/* Money in cents. Rows carry the fields the five transactions and the
 * consistency checks use; the specification's filler strings (s_dist_xx,
 * c_data, addresses, i_data) are left out. */
struct tpcc_wh {
	int64_t ytd;
	uint32_t tax; /* basis points */
	uint32_t pad;
};
struct tpcc_dist {
	int64_t ytd;
	uint32_t tax;
	uint32_t next_o_id;
};
struct tpcc_cust {
	int64_t balance, ytd_payment;
	uint32_t payment_cnt, delivery_cnt;
	uint32_t discount; /* basis points */
	char credit[2];    /* "GC" or "BC" */
	char last[16], first[16];
	uint16_t pad;
};
struct tpcc_stock {
	int32_t quantity;
	uint32_t ytd, order_cnt, remote_cnt;
};
struct tpcc_item {
	int32_t price;
	uint32_t im_id;
	char name[24];
};
struct tpcc_hist {
	uint32_t c_id, c_d, c_w, d, w;
	int32_t amount;
	uint64_t date;
};
/* An order and its lines in one object: ORDER-LINE rows live with their
 * ORDER row (a line with i_id 0 is absent). @client is the client that
 * committed it (machine * 64 + thread + 1), 0 for the loaded ones: the
 * check counts each client's orders against those it was told
 * committed. */
struct tpcc_ol {
	uint32_t i_id;
	uint16_t supply_w;
	uint8_t quantity, number;
	int32_t amount;
	uint32_t pad;
	uint64_t delivery_d;
};
struct tpcc_order {
	uint32_t o_id, c_id;
	uint64_t entry_d;
	uint8_t carrier_id, ol_cnt, all_local, pad;
	uint32_t client;
	struct tpcc_ol ol[TPCC_MAX_OL];
};

/* KV keys: a table letter and a packed id. */
static inline uint64_t tpcc_did(uint64_t w, uint64_t d)
{
	return w * 16 + d;
}
static inline uint64_t tpcc_cid(uint64_t w, uint64_t d, uint64_t c)
{
	return tpcc_did(w, d) << 20 | c;
}
static inline uint64_t tpcc_sid(uint64_t w, uint64_t i)
{
	return w << 20 | i;
}

/* Ordered-index keys (big-endian, so ranges follow the numbers):
 * ORDER and NEW-ORDER by (w, d, o_id), ORDER by (w, d, c_id, o_id) for
 * a customer's latest, CUSTOMER by (w, d, last, first, c_id). */
struct tpcc_bkey {
	uint8_t b[40];
	uint32_t len;
};
static inline struct tpcc_bkey tpcc_okey(uint64_t w, uint64_t d, uint64_t o)
{
	struct tpcc_bkey k = {.len = 16};
	farm_bt_key_u64(tpcc_did(w, d), k.b);
	farm_bt_key_u64(o, k.b + 8);
	return k;
}
static inline struct tpcc_bkey tpcc_cokey(uint64_t w, uint64_t d, uint64_t c,
                                          uint64_t o)
{
	struct tpcc_bkey k = {.len = 16};
	farm_bt_key_u64(tpcc_did(w, d), k.b);
	farm_bt_key_u64(c << 32 | o, k.b + 8);
	return k;
}
/* @last and @first are 16 bytes, zero-padded; @c 0 gives the prefix of
 * every customer of that last name (19 bytes). */
static inline struct tpcc_bkey tpcc_nkey(uint64_t w, uint64_t d,
                                         const char *last, const char *first,
                                         uint32_t c)
{
	struct tpcc_bkey k = {.len = 19};
	uint8_t x[8];
	farm_bt_key_u64(tpcc_did(w, d), x);
	memcpy(k.b, x + 5, 3);
	memcpy(k.b + 3, last, 16);
	if (first) {
		memcpy(k.b + 19, first, 16);
		farm_bt_key_u64(c, x);
		memcpy(k.b + 35, x + 4, 4);
		k.len = 39;
	}
	return k;
}

/* The specification's generators (2.1.6, 4.3.2.3). */
static inline uint64_t tpcc_nurand(uint64_t *rng, uint64_t a, uint64_t x,
                                   uint64_t y, uint64_t c)
{
	return (((wl_uni(rng, 0, a) | wl_uni(rng, x, y)) + c) % (y - x + 1)) +
	       x;
}
static inline void tpcc_last_name(unsigned n, char out[16])
{
	static const char *const syl[10] = {"BAR",   "OUGHT", "ABLE", "PRI",
	                                    "PRES",  "ESE",   "ANTI", "CALLY",
	                                    "ATION", "EING"};
	char buf[32];
	size_t l = 0;
	memset(out, 0, 16);
	for (unsigned k = 100; k; k /= 10) {
		const char *s = syl[(n / k) % 10];
		memcpy(buf + l, s, strlen(s));
		l += strlen(s);
	}
	memcpy(out, buf, l < 16 ? l : 15);
}
/* Last names in use: 1,000 at the specification's scale, fewer with
 * fewer customers (every name then still has customers). */
static inline unsigned tpcc_names(uint32_t customers)
{
	return customers < 1000 ? customers : 1000;
}
/* A run-time customer pick: by id (NURand 1023) or a last name
 * (NURand 255 over the names in use). */
static inline uint32_t tpcc_pick_cust(uint64_t *rng, uint32_t customers)
{
	return (uint32_t)tpcc_nurand(rng, 1023, 1, customers, TPCC_C_ID);
}
static inline unsigned tpcc_pick_name(uint64_t *rng, uint32_t customers)
{
	return (unsigned)tpcc_nurand(rng, 255, 0, tpcc_names(customers) - 1,
	                             TPCC_C_LAST_RUN);
}
static inline uint32_t tpcc_pick_item(uint64_t *rng, uint32_t items)
{
	return (uint32_t)tpcc_nurand(rng, 8191, 1, items, TPCC_C_ITEM);
}
/* The load's last name of customer @c (1-based). */
static inline unsigned tpcc_load_name(uint64_t *rng, uint32_t c,
                                      uint32_t customers)
{
	unsigned n = tpcc_names(customers);
	if (c <= n)
		return c - 1;
	return (unsigned)tpcc_nurand(rng, 255, 0, n - 1, TPCC_C_LAST_LOAD);
}
/* The first order id of the loaded NEW-ORDER rows: the last 30% of the
 * orders (2,101 of 3,000 at full scale). */
static inline uint32_t tpcc_first_new(uint32_t customers)
{
	return customers - customers * 3 / 10 + 1;
}

/* The ordered indexes: four trees a warehouse, made by its owner when it
 * loads (so their nodes are in its memory and the warehouses' trees never
 * contend), opened by other machines at first use. */
enum tpcc_tree {
	TPCC_ORD,  /* (w, d, o) -> the order's fat pointer */
	TPCC_CORD, /* (w, d, c, o) -> the order's fat pointer */
	TPCC_NO,   /* (w, d, o) -> nothing: NEW-ORDER */
	TPCC_CUST  /* (w, d, last, first, c) -> c_id */
};
struct tpcc_trees {
	uint64_t nw;
	farm_bt *_Atomic *t; /* [w * 4 + tree], w from 1 */
};
/* The handle of tree @k of warehouse @w on machine @m (made or opened):
 * 0, or the error that kept it from opening. Any loop of @m. */
int tpcc_bt(struct wl_machine *m, farm_loop *loop, uint64_t w, enum tpcc_tree k,
            farm_bt **out);

/* A warehouse this client serves: one its machine owns (warehouses are
 * partitioned across machines). */
static inline uint32_t tpcc_home(struct wl_client *c)
{
	const struct wl_opts *o = c->m->o;
	uint64_t first = c->m->me ? c->m->me : o->machines;
	uint64_t per = (o->scale - first) / o->machines + 1; /* W >= M */
	return (uint32_t)(first + wl_uni(&c->rng, 0, per - 1) * o->machines);
}

/* wl_tpcc_txn.c: one transaction; free a client's state. */
int tpcc_txn(struct wl_client *c, enum wl_txn t);
void tpcc_client_free(struct wl_client *c);

#endif
