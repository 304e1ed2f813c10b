/*
 * workload_bench's PostgreSQL peer: a server of its own (initdb into a
 * tmpfs directory, a Unix socket there and no TCP; run as the postgres
 * user when this process is root, which the server refuses to be), TATP
 * and SmallBank as tables loaded server-side, reads as prepared
 * statements, the multi-statement transactions as PL/pgSQL functions (one
 * round trip each), clients as threads with a connection each.
 */
#include <errno.h>
#include <glob.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_int.h"
#include "wl_peers.h"
#include "wl_pg_tpcc.h"

struct wl_pg {
	char dir[128], bin[256], conninfo[256];
	bool as_postgres;
};

static int sh(const struct wl_pg *pg, const char *cmd)
{
	char buf[2600];
	if (pg->as_postgres)
		snprintf(buf, sizeof(buf),
		         "runuser -u postgres -- sh -c \"%s\"", cmd);
	else
		snprintf(buf, sizeof(buf), "%s", cmd);
	return system(buf);
}

int wl_pg_start(struct wl_pg **out, char *err, size_t len)
{
	struct wl_pg *pg = calloc(1, sizeof(*pg));
	glob_t g;
	if (!pg)
		return -ENOMEM;
	if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) ||
	    !g.gl_pathc) {
		snprintf(err, len,
		         "PostgreSQL not installed "
		         "(scripts/install-deps installs it)");
		free(pg);
		return -ENOENT;
	}
	snprintf(pg->bin, sizeof(pg->bin), "%.*s",
	         (int)(strlen(g.gl_pathv[0]) - 7), g.gl_pathv[0]);
	globfree(&g);
	snprintf(pg->dir, sizeof(pg->dir), "/dev/shm/fwl-pg-XXXXXX");
	if (!mkdtemp(pg->dir)) {
		free(pg);
		return -errno;
	}
	pg->as_postgres = geteuid() == 0;
	char cmd[2048];
	if (pg->as_postgres) {
		snprintf(cmd, sizeof(cmd), "chown postgres %s", pg->dir);
		if (system(cmd)) {
			snprintf(err, len, "cannot give %s to postgres",
			         pg->dir);
			wl_pg_stop(pg);
			return -EPERM;
		}
	}
	snprintf(
	        cmd, sizeof(cmd),
	        "%s/initdb -D %s/data -A trust -U fwl --no-sync >%s/initdb.log "
	        "2>&1 && %s/pg_ctl -D %s/data -l %s/server.log -w -o "
	        "'-p 5433 -k %s -c listen_addresses= -c shared_buffers=512MB "
	        "-c max_connections=64 -c max_wal_size=4GB' start >/dev/null",
	        pg->bin, pg->dir, pg->dir, pg->bin, pg->dir, pg->dir, pg->dir);
	if (sh(pg, cmd)) {
		/* pg_ctl may give up while the server still comes up:
		 * stop it and remove the directory (its logs go with it). */
		snprintf(err, len, "PostgreSQL did not start in %s", pg->dir);
		wl_pg_stop(pg);
		return -EIO;
	}
	snprintf(pg->conninfo, sizeof(pg->conninfo),
	         "host=%s port=5433 user=fwl dbname=postgres", pg->dir);
	*out = pg;
	return 0;
}

void wl_pg_stop(struct wl_pg *pg)
{
	if (!pg)
		return;
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
	         "%s/pg_ctl -D %s/data -m immediate -w stop >/dev/null 2>&1",
	         pg->bin, pg->dir);
	if (sh(pg, cmd))
		fprintf(stderr,
		        "workload_bench: PostgreSQL in %s did not stop\n",
		        pg->dir);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", pg->dir);
	if (system(cmd))
		fprintf(stderr, "workload_bench: %s not removed\n", pg->dir);
	free(pg);
}

#define TATP_SCHEMA                                                            \
	"SET client_min_messages = warning;"                                   \
	"DROP TABLE IF EXISTS call_forwarding, special_facility, "             \
	"access_info, "                                                        \
	"subscriber, savings, checking CASCADE;"                               \
	"CREATE TABLE subscriber (s_id int PRIMARY KEY, sub_nbr varchar(15) "  \
	"NOT NULL UNIQUE, bits int, hex bytea, byte2 bytea, msc_location "     \
	"int, "                                                                \
	"vlr_location int);"                                                   \
	"CREATE TABLE access_info (s_id int, ai_type smallint, data1 "         \
	"smallint, "                                                           \
	"data2 smallint, data3 char(3), data4 char(5), PRIMARY KEY (s_id, "    \
	"ai_type));"                                                           \
	"CREATE TABLE special_facility (s_id int, sf_type smallint, "          \
	"is_active "                                                           \
	"smallint, error_cntrl smallint, data_a smallint, data_b char(5), "    \
	"PRIMARY KEY (s_id, sf_type));"                                        \
	"CREATE TABLE call_forwarding (s_id int, sf_type smallint, "           \
	"start_time "                                                          \
	"smallint, end_time smallint, numberx varchar(15), PRIMARY KEY "       \
	"(s_id, "                                                              \
	"sf_type, start_time));"                                               \
	"SELECT setseed(0.42);"                                                \
	"INSERT INTO subscriber SELECT s, lpad(s::text, 15, '0'), "            \
	"(random()*1023)::int, '\\x00010203040506070809', "                    \
	"'\\x00010203040506070809', (random()*2e9)::int, (random()*2e9)::int " \
	"FROM generate_series(1, %llu) s;"                                     \
	"INSERT INTO access_info SELECT s, t, 1, 2, 'ABC', 'ABCDE' FROM "      \
	"generate_series(1, %llu) s, generate_series(1, 4) t WHERE random() "  \
	"< 0.625;"                                                             \
	"INSERT INTO special_facility SELECT s, t, (random() < 0.85)::int, "   \
	"0, "                                                                  \
	"1, 'XYZZY' FROM generate_series(1, %llu) s, generate_series(1, 4) t " \
	"WHERE random() < 0.625;"                                              \
	"INSERT INTO call_forwarding SELECT s_id, sf_type, st, st + 1 + "      \
	"(random()*7)::int, '123456789012345' FROM special_facility, (VALUES " \
	"(0), (8), (16)) v(st) WHERE random() < 0.5;"                          \
	"CREATE OR REPLACE FUNCTION upd_sub(s int, t int, b int, d int) "      \
	"RETURNS int AS $$ BEGIN UPDATE subscriber SET bits = (bits & ~1) | "  \
	"b "                                                                   \
	"WHERE s_id = s; UPDATE special_facility SET data_a = d WHERE s_id = " \
	"s "                                                                   \
	"AND sf_type = t; IF NOT FOUND THEN RAISE EXCEPTION 'no sf' USING "    \
	"ERRCODE = 'P0002'; END IF; RETURN 0; END $$ LANGUAGE plpgsql;"        \
	"CREATE OR REPLACE FUNCTION ins_cf(n varchar, t int, st int, et int, " \
	"x varchar) RETURNS int AS $$ DECLARE s int; BEGIN SELECT s_id INTO "  \
	"s "                                                                   \
	"FROM subscriber WHERE sub_nbr = n; PERFORM sf_type FROM "             \
	"special_facility WHERE s_id = s; INSERT INTO call_forwarding SELECT " \
	"s, t, st, et, x WHERE EXISTS (SELECT 1 FROM special_facility WHERE "  \
	"s_id = s AND sf_type = t) ON CONFLICT DO NOTHING; IF FOUND THEN "     \
	"RETURN 0; END IF; RETURN 1; END $$ LANGUAGE plpgsql;"                 \
	"ANALYZE;"

#define BANK_SCHEMA                                                            \
	"SET client_min_messages = warning;"                                   \
	"DROP TABLE IF EXISTS call_forwarding, special_facility, "             \
	"access_info, "                                                        \
	"subscriber, savings, checking CASCADE;"                               \
	"CREATE TABLE savings (custid int PRIMARY KEY, bal bigint NOT NULL);"  \
	"CREATE TABLE checking (custid int PRIMARY KEY, bal bigint NOT NULL);" \
	"INSERT INTO savings SELECT c, 10000 + (random()*40000)::int FROM "    \
	"generate_series(1, %llu) c;"                                          \
	"INSERT INTO checking SELECT c, 10000 + (random()*40000)::int FROM "   \
	"generate_series(1, %llu) c;"                                          \
	"CREATE OR REPLACE FUNCTION amalgamate(a int, b int) RETURNS int AS "  \
	"$$ "                                                                  \
	"DECLARE t bigint; BEGIN PERFORM 1 FROM checking WHERE custid IN (a, " \
	"b) ORDER BY custid FOR UPDATE; SELECT s.bal + c.bal INTO t FROM "     \
	"savings s, checking c WHERE s.custid = a AND c.custid = a; UPDATE "   \
	"savings SET bal = 0 WHERE custid = a; UPDATE checking SET bal = 0 "   \
	"WHERE custid = a; UPDATE checking SET bal = bal + t WHERE custid = "  \
	"b; "                                                                  \
	"RETURN 0; END $$ LANGUAGE plpgsql;"                                   \
	"CREATE OR REPLACE FUNCTION write_check(a int, v bigint) RETURNS int " \
	"AS $$ DECLARE t bigint; BEGIN PERFORM 1 FROM checking WHERE custid "  \
	"= "                                                                   \
	"a FOR UPDATE; SELECT s.bal + c.bal INTO t FROM savings s, checking "  \
	"c "                                                                   \
	"WHERE s.custid = a AND c.custid = a; IF t < v THEN v := v + 1; END "  \
	"IF; UPDATE checking SET bal = bal - v WHERE custid = a; RETURN 0; "   \
	"END "                                                                 \
	"$$ LANGUAGE plpgsql;"                                                 \
	"CREATE OR REPLACE FUNCTION send_payment(a int, b int, v bigint) "     \
	"RETURNS int AS $$ DECLARE t bigint; BEGIN PERFORM 1 FROM checking "   \
	"WHERE custid IN (a, b) ORDER BY custid FOR UPDATE; SELECT bal INTO "  \
	"t "                                                                   \
	"FROM checking WHERE custid = a; IF t < v THEN RETURN 1; END IF; "     \
	"UPDATE checking SET bal = bal - v WHERE custid = a; UPDATE checking " \
	"SET bal = bal + v WHERE custid = b; RETURN 0; END $$ LANGUAGE "       \
	"plpgsql;"                                                             \
	"ANALYZE;"

int wl_pg_load(struct wl_pg *pg, const struct wl_opts *o)
{
	PGconn *c = PQconnectdb(pg->conninfo);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "workload_bench: %s", PQerrorMessage(c));
		PQfinish(c);
		return -EIO;
	}
	char *sql = malloc(32768);
	unsigned long long n = (unsigned long long)o->scale;
	if (!sql) {
		PQfinish(c);
		return -ENOMEM;
	}
	if (o->kind == WL_TATP)
		snprintf(sql, 32768, TATP_SCHEMA, n, n, n);
	else if (o->kind == WL_BANK)
		snprintf(sql, 32768, BANK_SCHEMA, n, n);
	else if (wl_pg_tpcc_schema(o, sql, 32768)) {
		free(sql);
		PQfinish(c);
		return -E2BIG;
	}
	PGresult *r = PQexec(c, sql);
	int rc = PQresultStatus(r) == PGRES_TUPLES_OK ||
	                         PQresultStatus(r) == PGRES_COMMAND_OK
	                 ? 0
	                 : -EIO;
	if (rc)
		fprintf(stderr, "workload_bench: load: %s", PQerrorMessage(c));
	PQclear(r);
	free(sql);
	PQfinish(c);
	return rc;
}

/* ---- clients --------------------------------------------------------------
 */

static const char *const stmts[WT_NTYPES][2] = {
        {"SELECT * FROM subscriber WHERE s_id = $1", "1"},
        {"SELECT cf.numberx FROM special_facility sf, call_forwarding cf "
         "WHERE sf.s_id = $1 AND sf.sf_type = $2 AND sf.is_active = 1 AND "
         "cf.s_id = sf.s_id AND cf.sf_type = sf.sf_type AND cf.start_time <= "
         "$3 AND $4 < cf.end_time",
         "4"},
        {"SELECT data1, data2, data3, data4 FROM access_info WHERE s_id = $1 "
         "AND ai_type = $2",
         "2"},
        {"SELECT upd_sub($1, $2, $3, $4)", "4"},
        {"UPDATE subscriber SET vlr_location = $2 WHERE sub_nbr = $1", "2"},
        {"SELECT ins_cf($1, $2, $3, $4, $5)", "5"},
        {"DELETE FROM call_forwarding WHERE s_id = (SELECT s_id FROM "
         "subscriber WHERE sub_nbr = $1) AND sf_type = $2 AND start_time = "
         "$3",
         "3"},
        {"SELECT amalgamate($1, $2)", "2"},
        {"SELECT s.bal + c.bal FROM savings s, checking c WHERE s.custid = $1 "
         "AND c.custid = $1",
         "1"},
        {"UPDATE checking SET bal = bal + $2 WHERE custid = $1", "2"},
        {"SELECT send_payment($1, $2, $3)", "3"},
        {"UPDATE savings SET bal = bal + $2 WHERE custid = $1", "2"},
        {"SELECT write_check($1, $2)", "2"},
};

struct pg_client {
	const struct wl_pg *pg;
	const struct wl_opts *o;
	bool sync;
	uint64_t rng, n, aborts, new_orders;
	/* Set once before the thread starts; cleared early to stop the
	 * clients already started when a later one cannot be (seq_cst
	 * store in wl_pg_run pairs with the load in pg_client_main). */
	_Atomic uint64_t end_ns;
	uint64_t *hist;
	int err;
	pthread_t th;
};

static uint64_t pick_id(struct pg_client *k)
{
	const struct wl_opts *o = k->o;
	if (o->kind == WL_TATP) {
		uint64_t p = o->scale, a = p <= 1000000 ? 65535 : 1048575;
		return ((wl_uni(&k->rng, 0, a) | wl_uni(&k->rng, 1, p)) % p) +
		       1;
	}
	uint64_t hot = o->scale * o->hot_pct / 100;
	hot = hot ? hot : 1;
	return wl_uni(&k->rng, 0, 99) < o->hot_prob
	               ? wl_uni(&k->rng, 1, hot)
	               : wl_uni(&k->rng, 1, o->scale);
}

/* The parameters of one transaction of type @t, as text. */
static void params(struct pg_client *k, enum wl_txn t,
                   char p[WL_PG_NPARAM][WL_PG_PARAM])
{
	if (k->o->kind == WL_TPCC) {
		wl_pg_tpcc_params(&k->rng, k->o, t, p);
		return;
	}
	uint64_t a = pick_id(k), b = pick_id(k);
	while (b == a && k->o->scale > 1 && t >= WT_AMALGAMATE)
		b = pick_id(k);
	unsigned st = (unsigned)wl_uni(&k->rng, 0, 2) * 8;
	bool nbr = t == WT_UPD_LOC || t == WT_INS_CF || t == WT_DEL_CF;
	snprintf(p[0], WL_PG_PARAM, nbr ? "%015llu" : "%llu",
	         (unsigned long long)a);
	snprintf(p[1], WL_PG_PARAM, "%u", (unsigned)wl_uni(&k->rng, 1, 4));
	snprintf(p[2], WL_PG_PARAM, "%u", st);
	snprintf(p[3], WL_PG_PARAM, "%u", (unsigned)wl_uni(&k->rng, 1, 24));
	snprintf(p[4], WL_PG_PARAM, "123456789012345");
	if (t == WT_UPD_SUB) {
		snprintf(p[2], WL_PG_PARAM, "%u",
		         (unsigned)wl_uni(&k->rng, 0, 1));
		snprintf(p[3], WL_PG_PARAM, "%u",
		         (unsigned)wl_uni(&k->rng, 0, 255));
	} else if (t == WT_UPD_LOC) {
		snprintf(p[1], WL_PG_PARAM, "%u",
		         (unsigned)(wl_rand(&k->rng) >> 34));
	} else if (t == WT_INS_CF) {
		snprintf(p[3], WL_PG_PARAM, "%u",
		         st + (unsigned)wl_uni(&k->rng, 1, 8));
	} else if (t >= WT_AMALGAMATE) {
		unsigned v = (unsigned)wl_uni(&k->rng, 1, 100);
		bool two = t == WT_AMALGAMATE || t == WT_SEND_PAYMENT;
		snprintf(p[1], WL_PG_PARAM, "%llu",
		         two ? (unsigned long long)b : v);
		snprintf(p[2], WL_PG_PARAM, "%u", v);
	}
}

static enum wl_txn pick(struct pg_client *k)
{
	int from, to;
	unsigned r = (unsigned)wl_uni(&k->rng, 0, 99), acc = 0;
	wl_types(k->o->kind, &from, &to);
	for (int t = from; t < to; t++)
		if (r < (acc += k->o->mix[t]))
			return (enum wl_txn)t;
	return (enum wl_txn)from;
}

static const char *stmt_of(const struct wl_opts *o, enum wl_txn t, int *np)
{
	if (o->kind == WL_TPCC)
		return wl_pg_tpcc_stmt(t, np);
	*np = atoi(stmts[t][1]);
	return stmts[t][0];
}

static int prepare(PGconn *c, const struct wl_opts *o, bool sync)
{
	int from, to;
	PGresult *r = PQexec(c, sync ? "SET synchronous_commit = on"
	                             : "SET synchronous_commit = off");
	int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -EIO;
	PQclear(r);
	wl_types(o->kind, &from, &to);
	for (int t = from; t < to && !rc; t++) {
		char name[16];
		snprintf(name, sizeof(name), "t%d", t);
		int np;
		const char *q = stmt_of(o, (enum wl_txn)t, &np);
		r = PQprepare(c, name, q, np, NULL);
		rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -EIO;
		PQclear(r);
	}
	return rc;
}

static void *pg_client_main(void *arg)
{
	struct pg_client *k = arg;
	PGconn *c = PQconnectdb(k->pg->conninfo);
	if (PQstatus(c) != CONNECTION_OK || prepare(c, k->o, k->sync)) {
		fprintf(stderr, "workload_bench: %s", PQerrorMessage(c));
		k->err = -EIO;
		PQfinish(c);
		return NULL;
	}
	while (wl_now_ns() < atomic_load(&k->end_ns) && !k->err) {
		enum wl_txn t = pick(k);
		char p[WL_PG_NPARAM][WL_PG_PARAM], name[16];
		const char *pv[WL_PG_NPARAM] = {p[0], p[1], p[2], p[3],
		                                p[4], p[5], p[6]};
		int np;
		(void)stmt_of(k->o, t, &np);
		params(k, t, p);
		snprintf(name, sizeof(name), "t%d", (int)t);
		uint64_t t0 = wl_now_ns();
		for (;;) {
			PGresult *r =
			        PQexecPrepared(c, name, np, pv, NULL, NULL, 0);
			ExecStatusType st = PQresultStatus(r);
			const char *code =
			        PQresultErrorField(r, PG_DIAG_SQLSTATE);
			bool retry = st == PGRES_FATAL_ERROR && code &&
			             (!strcmp(code, "40001") ||
			              !strcmp(code, "40P01"));
			bool logic = st == PGRES_FATAL_ERROR && code &&
			             !strcmp(code, "P0002");
			if (st == PGRES_FATAL_ERROR && !retry && !logic) {
				fprintf(stderr, "workload_bench: %s: %s",
				        wl_txn_name(t), PQerrorMessage(c));
				k->err = -EIO;
			}
			PQclear(r);
			k->new_orders += t == WT_NEW_ORDER && !retry &&
			                 !logic && st != PGRES_FATAL_ERROR;
			if (!retry)
				break;
			k->aborts++;
		}
		k->hist[wl_hist_bucket(wl_now_ns() - t0)]++;
		k->n++;
	}
	PQfinish(c);
	return NULL;
}

int wl_pg_run(struct wl_pg *pg, const struct wl_opts *o, unsigned clients,
              bool sync_commit, struct wl_bres *out)
{
	struct pg_client k[64];
	uint64_t *hist =
	        calloc(WL_HIST_BUCKETS, sizeof(uint64_t) * (clients + 1));
	if (!hist || clients > 64) {
		free(hist);
		return -ENOMEM;
	}
	uint64_t t0 = wl_now_ns();
	for (unsigned i = 0; i < clients; i++) {
		k[i] = (struct pg_client){
		        .pg = pg,
		        .o = o,
		        .sync = sync_commit,
		        .rng = (o->seed + 7) * 0x9e3779b97f4a7c15ull * (i + 1),
		        .end_ns = t0 + o->duration_ms * 1000000ull,
		        .hist = hist + (size_t)(i + 1) * WL_HIST_BUCKETS};
		if (pthread_create(&k[i].th, NULL, pg_client_main, &k[i])) {
			for (unsigned j = 0; j < i; j++)
				atomic_store(&k[j].end_ns, 0);
			for (unsigned j = 0; j < i; j++)
				pthread_join(k[j].th, NULL);
			free(hist);
			return -EAGAIN;
		}
	}
	uint64_t n = 0, aborts = 0, no = 0;
	int err = 0;
	for (unsigned i = 0; i < clients; i++) {
		pthread_join(k[i].th, NULL);
		n += k[i].n;
		aborts += k[i].aborts;
		no += k[i].new_orders;
		err = err ? err : k[i].err;
		for (int b = 0; b < WL_HIST_BUCKETS; b++)
			hist[b] += k[i].hist[b];
	}
	double secs = (double)(wl_now_ns() - t0) / 1e9;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	*out = (struct wl_bres){.tput = n / secs,
	                        .new_orders = no / secs,
	                        .p50 = wl_hist_pct(hist, 0.5),
	                        .p99 = wl_hist_pct(hist, 0.99),
	                        .abort_pct =
	                                n ? 100.0 * aborts / (n + aborts) : 0,
	                        .cores = (unsigned)(ncpu > 0 ? ncpu : 1),
	                        .clients = clients};
	snprintf(out->note, sizeof(out->note), "synchronous_commit %s",
	         sync_commit ? "on" : "off");
	free(hist);
	return err;
}
