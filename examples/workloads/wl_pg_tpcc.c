/*
 * workload_bench's PostgreSQL peer for TPC-C: the nine tables with the
 * columns libfarm's rows carry (wl_tpcc.h), the same population (loaded
 * server-side by a PL/pgSQL function), the customer-by-name and
 * customer's-orders indexes, and the five transactions as PL/pgSQL
 * functions (one round trip each; StockLevel a prepared query), with the
 * inputs of wl_tpcc_txn.c (NURand, 1% remote items, 1% rolled back, 15%
 * remote customers, 60% by last name). Items are sorted within a
 * NewOrder, as TPC-C implementations on lock-based databases do, so its
 * stock updates take their locks in one order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_pg_tpcc.h"
#include "wl_tpcc.h"

static const char schema[] =
        "SET client_min_messages = warning;"
        "DROP TABLE IF EXISTS warehouse, district, customer, history, item, "
        "stock, orders, new_order, order_line CASCADE;"
        "CREATE TABLE warehouse (w_id int PRIMARY KEY, w_ytd bigint, w_tax "
        "int);"
        "CREATE TABLE district (d_w_id int, d_id int, d_ytd bigint, d_tax "
        "int, d_next_o_id int, PRIMARY KEY (d_w_id, d_id));"
        "CREATE TABLE customer (c_w_id int, c_d_id int, c_id int, c_last "
        "varchar(16), c_first varchar(16), c_credit char(2), c_discount int, "
        "c_balance bigint, c_ytd_payment bigint, c_payment_cnt int, "
        "c_delivery_cnt int, PRIMARY KEY (c_w_id, c_d_id, c_id));"
        "CREATE TABLE history (h_c_id int, h_c_d_id int, h_c_w_id int, "
        "h_d_id int, h_w_id int, h_date timestamp, h_amount int);"
        "CREATE TABLE item (i_id int PRIMARY KEY, i_im_id int, i_name "
        "varchar(24), i_price int);"
        "CREATE TABLE stock (s_w_id int, s_i_id int, s_quantity int, s_ytd "
        "int, s_order_cnt int, s_remote_cnt int, PRIMARY KEY (s_w_id, "
        "s_i_id));"
        "CREATE TABLE orders (o_w_id int, o_d_id int, o_id int, o_c_id int, "
        "o_entry_d timestamp, o_carrier_id int, o_ol_cnt int, o_all_local "
        "int, PRIMARY KEY (o_w_id, o_d_id, o_id));"
        "CREATE TABLE new_order (no_w_id int, no_d_id int, no_o_id int, "
        "PRIMARY KEY (no_w_id, no_d_id, no_o_id));"
        "CREATE TABLE order_line (ol_w_id int, ol_d_id int, ol_o_id int, "
        "ol_number int, ol_i_id int, ol_supply_w_id int, ol_delivery_d "
        "timestamp, ol_quantity int, ol_amount int, PRIMARY KEY (ol_w_id, "
        "ol_d_id, ol_o_id, ol_number));"
        "CREATE OR REPLACE FUNCTION tpcc_last(n int) RETURNS text AS $$ "
        "SELECT s[n / 100 %% 10 + 1] || s[n / 10 %% 10 + 1] || s[n %% 10 + 1] "
        "FROM (SELECT ARRAY['BAR','OUGHT','ABLE','PRI','PRES','ESE','ANTI',"
        "'CALLY','ATION','EING'] s) x $$ LANGUAGE sql IMMUTABLE;"
        "CREATE OR REPLACE FUNCTION tpcc_load(nw int, ni int, nc int) "
        "RETURNS int AS $$ DECLARE nn int := least(nc, 1000); "
        "fn int := nc - nc * 3 / 10 + 1; BEGIN "
        "PERFORM setseed(0.28);"
        "INSERT INTO item SELECT i, 1 + (random() * 9999)::int, 'item-' || "
        "i, 100 + (random() * 9900)::int FROM generate_series(1, ni) i;"
        "INSERT INTO warehouse SELECT w, 30000000, (random() * 2000)::int "
        "FROM generate_series(1, nw) w;"
        "INSERT INTO district SELECT w, d, 3000000, (random() * 2000)::int, "
        "nc + 1 FROM generate_series(1, nw) w, generate_series(1, 10) d;"
        "INSERT INTO stock SELECT w, i, 10 + (random() * 90)::int, 0, 0, 0 "
        "FROM generate_series(1, nw) w, generate_series(1, ni) i;"
        "INSERT INTO customer SELECT w, d, c, tpcc_last(CASE WHEN c <= nn "
        "THEN c - 1 ELSE (((floor(random() * 256)::int | floor(random() * "
        "nn)::int) + 157) %% nn) END), md5(random()::text)::varchar(12), "
        "CASE WHEN random() < 0.1 THEN 'BC' ELSE 'GC' END, (random() * "
        "5000)::int, -1000, 1000, 1, 0 FROM generate_series(1, nw) w, "
        "generate_series(1, 10) d, generate_series(1, nc) c;"
        "INSERT INTO history SELECT c_id, c_d_id, c_w_id, c_d_id, c_w_id, "
        "now(), 1000 FROM customer;"
        "INSERT INTO orders SELECT w, d, o, c, now(), CASE WHEN o < fn THEN "
        "1 + (random() * 9)::int END, 5 + (random() * 10)::int, 1 FROM "
        "(SELECT w, d, row_number() OVER (PARTITION BY w, d ORDER BY "
        "random()) AS o, c FROM generate_series(1, nw) w, generate_series(1, "
        "10) d, generate_series(1, nc) c) x;"
        "INSERT INTO new_order SELECT o_w_id, o_d_id, o_id FROM orders WHERE "
        "o_id >= fn;"
        "INSERT INTO order_line SELECT o_w_id, o_d_id, o_id, n, 1 + "
        "floor(random() * ni)::int, o_w_id, CASE WHEN o_id < fn THEN now() "
        "END, 5, CASE WHEN o_id < fn THEN 0 ELSE 1 + (random() * "
        "999998)::int END FROM orders, generate_series(1, 15) n WHERE n <= "
        "o_ol_cnt;"
        "RETURN 0; END $$ LANGUAGE plpgsql;"
        "CREATE OR REPLACE FUNCTION new_order(w int, d int, c int, it int[], "
        "sw int[], q int[]) RETURNS int AS $$ DECLARE o int; wt int; dt int; "
        "disc int; pr int; n int := array_length(it, 1); loc int; BEGIN "
        "SELECT w_tax INTO wt FROM warehouse WHERE w_id = w;"
        "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = w "
        "AND d_id = d RETURNING d_next_o_id - 1, d_tax INTO o, dt;"
        "SELECT c_discount INTO disc FROM customer WHERE c_w_id = w AND "
        "c_d_id = d AND c_id = c;"
        "SELECT bool_and(x = w)::int INTO loc FROM unnest(sw) x;"
        "INSERT INTO orders VALUES (w, d, o, c, now(), NULL, n, loc);"
        "INSERT INTO new_order VALUES (w, d, o);"
        "FOR i IN 1..n LOOP "
        "SELECT i_price INTO pr FROM item WHERE i_id = it[i];"
        "IF NOT FOUND THEN RAISE EXCEPTION 'unused item' USING ERRCODE = "
        "'P0002'; END IF;"
        "UPDATE stock SET s_quantity = CASE WHEN s_quantity >= q[i] + 10 "
        "THEN s_quantity - q[i] ELSE s_quantity - q[i] + 91 END, s_ytd = "
        "s_ytd + q[i], s_order_cnt = s_order_cnt + 1, s_remote_cnt = "
        "s_remote_cnt + (sw[i] <> w)::int WHERE s_w_id = sw[i] AND s_i_id = "
        "it[i];"
        "INSERT INTO order_line VALUES (w, d, o, i, it[i], sw[i], NULL, "
        "q[i], q[i] * pr);"
        "END LOOP; RETURN o; END $$ LANGUAGE plpgsql;"
        "CREATE OR REPLACE FUNCTION by_name(w int, d int, l text) RETURNS "
        "int AS $$ DECLARE n int; c int; BEGIN SELECT count(*) INTO n FROM "
        "customer WHERE c_w_id = w AND c_d_id = d AND c_last = l; SELECT "
        "c_id INTO c FROM customer WHERE c_w_id = w AND c_d_id = d AND "
        "c_last = l ORDER BY c_first OFFSET (n - 1) / 2 LIMIT 1; RETURN c; "
        "END $$ LANGUAGE plpgsql;"
        "CREATE OR REPLACE FUNCTION payment(w int, d int, cw int, cd int, c "
        "int, l text, a int) RETURNS int AS $$ BEGIN "
        "IF c = 0 THEN c := by_name(cw, cd, l); END IF;"
        "UPDATE warehouse SET w_ytd = w_ytd + a WHERE w_id = w;"
        "UPDATE district SET d_ytd = d_ytd + a WHERE d_w_id = w AND d_id = "
        "d;"
        "UPDATE customer SET c_balance = c_balance - a, c_ytd_payment = "
        "c_ytd_payment + a, c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id "
        "= cw AND c_d_id = cd AND c_id = c;"
        "INSERT INTO history VALUES (c, cd, cw, d, w, now(), a);"
        "RETURN 0; END $$ LANGUAGE plpgsql;"
        "CREATE OR REPLACE FUNCTION order_status(w int, d int, c int, l "
        "text) RETURNS int AS $$ DECLARE o int; BEGIN "
        "IF c = 0 THEN c := by_name(w, d, l); END IF;"
        "PERFORM c_balance FROM customer WHERE c_w_id = w AND c_d_id = d AND "
        "c_id = c;"
        "SELECT o_id INTO o FROM orders WHERE o_w_id = w AND o_d_id = d AND "
        "o_c_id = c ORDER BY o_id DESC LIMIT 1;"
        "PERFORM ol_i_id, ol_amount FROM order_line WHERE ol_w_id = w AND "
        "ol_d_id = d AND ol_o_id = o;"
        "RETURN 0; END $$ LANGUAGE plpgsql;"
        "CREATE OR REPLACE FUNCTION delivery(w int, carrier int) RETURNS int "
        "AS $$ DECLARE o int; c int; s bigint; BEGIN FOR d IN 1..10 LOOP "
        "DELETE FROM new_order WHERE no_w_id = w AND no_d_id = d AND "
        "no_o_id = (SELECT min(no_o_id) FROM new_order WHERE no_w_id = w "
        "AND no_d_id = d) RETURNING no_o_id INTO o;"
        "IF NOT FOUND THEN CONTINUE; END IF;"
        "UPDATE orders SET o_carrier_id = carrier WHERE o_w_id = w AND "
        "o_d_id = d AND o_id = o RETURNING o_c_id INTO c;"
        "UPDATE order_line SET ol_delivery_d = now() WHERE ol_w_id = w AND "
        "ol_d_id = d AND ol_o_id = o;"
        "SELECT sum(ol_amount) INTO s FROM order_line WHERE ol_w_id = w AND "
        "ol_d_id = d AND ol_o_id = o;"
        "UPDATE customer SET c_balance = c_balance + s, c_delivery_cnt = "
        "c_delivery_cnt + 1 WHERE c_w_id = w AND c_d_id = d AND c_id = c;"
        "END LOOP; RETURN 0; END $$ LANGUAGE plpgsql;"
        "SELECT tpcc_load(%llu, %u, %u);"
        "CREATE INDEX customer_name ON customer (c_w_id, c_d_id, c_last, "
        "c_first);"
        "CREATE INDEX orders_cust ON orders (o_w_id, o_d_id, o_c_id, o_id);"
        "ANALYZE;";

int wl_pg_tpcc_schema(const struct wl_opts *o, char *buf, size_t len)
{
	int n = snprintf(buf, len, schema, (unsigned long long)o->scale,
	                 o->items, o->customers);
	return n > 0 && (size_t)n < len ? 0 : -1;
}

static const char *const stmts[5][2] = {
        {"SELECT new_order($1, $2, $3, $4, $5, $6)", "6"},
        {"SELECT payment($1, $2, $3, $4, $5, $6, $7)", "7"},
        {"SELECT order_status($1, $2, $3, $4)", "4"},
        {"SELECT delivery($1, $2)", "2"},
        {"SELECT count(DISTINCT s_i_id) FROM district, order_line, stock "
         "WHERE d_w_id = $1 AND d_id = $2 AND ol_w_id = $1 AND ol_d_id = $2 "
         "AND ol_o_id < d_next_o_id AND ol_o_id >= d_next_o_id - 20 AND "
         "s_w_id = $1 AND s_i_id = ol_i_id AND s_quantity < $3",
         "3"}};

const char *wl_pg_tpcc_stmt(enum wl_txn t, int *nparams)
{
	*nparams = atoi(stmts[t - WT_NEW_ORDER][1]);
	return stmts[t - WT_NEW_ORDER][0];
}

/* A customer: id, or 0 and a last name (60%). */
static void customer(uint64_t *rng, const struct wl_opts *o, char *id,
                     char *last)
{
	char l[17] = {0};
	if (wl_uni(rng, 1, 100) <= 60) {
		tpcc_last_name(tpcc_pick_name(rng, o->customers), l);
		snprintf(id, WL_PG_PARAM, "0");
	} else {
		snprintf(id, WL_PG_PARAM, "%u",
		         tpcc_pick_cust(rng, o->customers));
	}
	snprintf(last, WL_PG_PARAM, "%s", l);
}

static int by_supply_item(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1)
	                    : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

static void no_params(uint64_t *rng, const struct wl_opts *o, uint32_t w,
                      char p[][WL_PG_PARAM])
{
	uint32_t n = (uint32_t)wl_uni(rng, 5, 15), l3[TPCC_MAX_OL][3];
	bool rbk = wl_uni(rng, 1, 100) == 1;
	snprintf(p[2], WL_PG_PARAM, "%u", tpcc_pick_cust(rng, o->customers));
	for (uint32_t l = 0; l < n; l++) {
		l3[l][1] = tpcc_pick_item(rng, o->items);
		l3[l][0] = w;
		if (o->scale > 1 && wl_uni(rng, 1, 100) == 1) {
			uint32_t x = (uint32_t)wl_uni(rng, 1, o->scale - 1);
			l3[l][0] = x >= w ? x + 1 : x;
		}
		l3[l][2] = (uint32_t)wl_uni(rng, 1, 10);
	}
	if (rbk)
		l3[n - 1][1] = o->items + 1;
	qsort(l3, n, sizeof(l3[0]), by_supply_item);
	for (int k = 0; k < 3; k++) {
		int at = 0;
		for (uint32_t l = 0; l < n; l++)
			at += snprintf(p[3 + k] + at, WL_PG_PARAM - (size_t)at,
			               "%c%u", l ? ',' : '{',
			               l3[l][k == 0   ? 1
			                     : k == 1 ? 0
			                              : 2]);
		snprintf(p[3 + k] + at, WL_PG_PARAM - (size_t)at, "}");
	}
}

void wl_pg_tpcc_params(uint64_t *rng, const struct wl_opts *o, enum wl_txn t,
                       char p[][WL_PG_PARAM])
{
	uint32_t w = (uint32_t)wl_uni(rng, 1, o->scale);
	uint32_t d = (uint32_t)wl_uni(rng, 1, TPCC_DISTRICTS);
	snprintf(p[0], WL_PG_PARAM, "%u", w);
	snprintf(p[1], WL_PG_PARAM, "%u", d);
	switch (t) {
	case WT_NEW_ORDER: no_params(rng, o, w, p); break;
	case WT_PAYMENT: {
		uint32_t cw = w, cd = d;
		if (o->scale > 1 && wl_uni(rng, 1, 100) <= 15) {
			uint32_t x = (uint32_t)wl_uni(rng, 1, o->scale - 1);
			cw = x >= w ? x + 1 : x;
			cd = (uint32_t)wl_uni(rng, 1, TPCC_DISTRICTS);
		}
		snprintf(p[2], WL_PG_PARAM, "%u", cw);
		snprintf(p[3], WL_PG_PARAM, "%u", cd);
		customer(rng, o, p[4], p[5]);
		snprintf(p[6], WL_PG_PARAM, "%u",
		         (unsigned)wl_uni(rng, 100, 500000));
		break;
	}
	case WT_ORDER_STATUS: customer(rng, o, p[2], p[3]); break;
	case WT_DELIVERY:
		snprintf(p[1], WL_PG_PARAM, "%u", (unsigned)wl_uni(rng, 1, 10));
		break;
	default:
		snprintf(p[2], WL_PG_PARAM, "%u",
		         (unsigned)wl_uni(rng, 10, 20));
		break;
	}
}
