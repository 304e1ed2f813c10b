/*
 * graph_bench's MariaDB peer: a private mariadbd (data in /dev/shm, a Unix
 * socket, no networking, buffer pool larger than the data) with LinkBench's
 * own schema (linktable, counttable, nodetable), loaded with LOAD DATA
 * INFILE, driven with prepared statements from several connections (one
 * thread each; LinkBench's own statements: getlinklist orders by time,
 * addlink upserts the link and its count in one transaction). Stopped by
 * pid. Header-only.
 */
#ifndef FGRAPH_GRAPH_MARIA_H
#define FGRAPH_GRAPH_MARIA_H

#include <mysql.h>
#include <pthread.h>

#include "graph_peers.h"

struct maria {
	pid_t pid;
	char dir[256], sock[300];
};

enum {
	Q_GETNODE,
	Q_COUNT,
	Q_RANGE,
	Q_TRANGE,
	Q_MGET,
	Q_ADDNODE,
	Q_UPDNODE,
	Q_DELNODE,
	Q_ADDLINK,
	Q_INCCOUNT,
	Q_DELLINK,
	Q_DECCOUNT,
	Q_MOVELINK,
	Q_N
};

static const char *const maria_sql[Q_N] = {
        "SELECT id, type, version, time, data FROM nodetable WHERE id = ?",
        "SELECT count FROM counttable WHERE id = ? AND link_type = ?",
        "SELECT id1, id2, link_type, visibility, data, time, version FROM "
        "linktable WHERE id1 = ? AND link_type = ? AND visibility = 1 "
        "ORDER BY time DESC LIMIT ?, ?",
        "SELECT id1, id2, link_type, visibility, data, time, version FROM "
        "linktable WHERE id1 = ? AND link_type = ? AND visibility = 1 AND "
        "time >= ? AND time <= ? ORDER BY time DESC LIMIT ?",
        "SELECT id1, id2, link_type, visibility, data, time, version FROM "
        "linktable WHERE link_type = ? AND id1 = ? AND id2 IN (?, ?)",
        "INSERT INTO nodetable (id, type, version, time, data) VALUES "
        "(?, ?, 1, ?, ?)",
        "UPDATE nodetable SET type = ?, version = version + 1, time = ?, "
        "data = ? WHERE id = ?",
        "DELETE FROM nodetable WHERE id = ?",
        "INSERT INTO linktable (id1, id2, link_type, visibility, data, time, "
        "version) VALUES (?, ?, ?, 1, ?, ?, 0) ON DUPLICATE KEY UPDATE "
        "data = VALUES(data), time = VALUES(time), version = version + 1",
        "INSERT INTO counttable (id, link_type, count, time, version) "
        "VALUES (?, ?, 1, ?, 0) ON DUPLICATE KEY UPDATE count = count + 1, "
        "time = VALUES(time), version = version + 1",
        "DELETE FROM linktable WHERE id1 = ? AND id2 = ? AND link_type = ?",
        "UPDATE counttable SET count = count - 1, version = version + 1 "
        "WHERE id = ? AND link_type = ?",
        "UPDATE linktable SET link_type = ? WHERE id1 = ? AND id2 = ? AND "
        "link_type = ?",
};

static const char *const maria_schema[] = {
        "CREATE DATABASE linkdb",
        "CREATE TABLE linkdb.linktable (id1 BIGINT UNSIGNED NOT NULL "
        "DEFAULT 0, id2 BIGINT UNSIGNED NOT NULL DEFAULT 0, link_type "
        "BIGINT UNSIGNED NOT NULL DEFAULT 0, visibility TINYINT NOT NULL "
        "DEFAULT 0, data VARCHAR(255) NOT NULL DEFAULT '', time BIGINT "
        "UNSIGNED NOT NULL DEFAULT 0, version INT UNSIGNED NOT NULL "
        "DEFAULT 0, PRIMARY KEY (link_type, id1, id2)) ENGINE=InnoDB "
        "DEFAULT CHARSET=latin1",
        "CREATE TABLE linkdb.counttable (id BIGINT UNSIGNED NOT NULL "
        "DEFAULT 0, link_type BIGINT UNSIGNED NOT NULL DEFAULT 0, count "
        "INT NOT NULL DEFAULT 0, time BIGINT UNSIGNED NOT NULL DEFAULT 0, "
        "version BIGINT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (id, "
        "link_type)) ENGINE=InnoDB DEFAULT CHARSET=latin1",
        "CREATE TABLE linkdb.nodetable (id BIGINT UNSIGNED NOT NULL "
        "AUTO_INCREMENT, type INT UNSIGNED NOT NULL, version BIGINT "
        "UNSIGNED NOT NULL, time INT UNSIGNED NOT NULL, data MEDIUMTEXT "
        "NOT NULL, PRIMARY KEY (id)) ENGINE=InnoDB DEFAULT CHARSET=latin1",
};

static inline void maria_stop(struct maria *m)
{
	pr_stop(m->pid, 20000);
	m->pid = 0;
	if (m->dir[0]) {
		nftw(m->dir, gc_rm_cb, 8, FTW_DEPTH | FTW_PHYS);
		m->dir[0] = 0;
	}
}

static inline MYSQL *maria_connect(struct maria *m)
{
	MYSQL *c = mysql_init(NULL);
	if (!c)
		return NULL;
	if (!mysql_real_connect(c, "localhost", "root", NULL, NULL, 0, m->sock,
	                        0)) {
		mysql_close(c);
		return NULL;
	}
	return c;
}

/* The last lines of a MariaDB program's @log to stderr: why it failed
 * (the log's directory is removed with the server's). */
static inline void maria_log_tail(const char *log)
{
	FILE *f = fopen(log, "r");
	if (!f) {
		fprintf(stderr, "  (no log: %s)\n", strerror(errno));
		return;
	}
	char lines[8][256];
	unsigned n = 0;
	while (fgets(lines[n % 8], sizeof(lines[0]), f))
		n++;
	fclose(f);
	for (unsigned i = n > 8 ? n - 8 : 0; i < n; i++)
		fprintf(stderr, "  %s%s", lines[i % 8],
		        strchr(lines[i % 8], '\n') ? "" : "\n");
}

/* Start a private server and make the schema: 0 or an error. */
static inline int maria_start(struct maria *m, uint64_t pool_mb)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->dir, sizeof(m->dir), "/dev/shm/fgraph-maria-XXXXXX");
	if (!mkdtemp(m->dir)) {
		m->dir[0] = 0;
		return -errno;
	}
	snprintf(m->sock, sizeof(m->sock), "%s/m.sock", m->dir);
	char data[300], log[300], a_data[320], a_sock[320], a_pool[64],
	        a_priv[320];
	snprintf(data, sizeof(data), "%s/data", m->dir);
	snprintf(log, sizeof(log), "%s/install.log", m->dir);
	snprintf(a_data, sizeof(a_data), "--datadir=%s", data);
	/* --force: without it the script refuses to run where neither the
	 * host name nor "localhost" resolves (a fresh root has no
	 * /etc/hosts); that lookup only names hosts in the grant tables,
	 * and this server takes no network connections (--skip-networking,
	 * root by socket). */
	char *inst[] = {"mariadb-install-db",
	                "--no-defaults",
	                a_data,
	                "--auth-root-authentication-method=socket",
	                "--skip-test-db",
	                "--force",
	                "--user=root",
	                NULL};
	pid_t p = pr_spawn(inst, log);
	int st = 0;
	if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) ||
	    WEXITSTATUS(st)) {
		fprintf(stderr, "graph_bench: mariadb-install-db failed:\n");
		maria_log_tail(log); /* the reason, before the directory goes */
		return -EIO;
	}
	snprintf(log, sizeof(log), "%s/server.log", m->dir);
	snprintf(a_sock, sizeof(a_sock), "--socket=%s", m->sock);
	snprintf(a_pool, sizeof(a_pool),
	         "--innodb-buffer-pool-size=%" PRIu64 "M", pool_mb);
	snprintf(a_priv, sizeof(a_priv), "--secure-file-priv=%s", m->dir);
	char *srv[] = {"mariadbd",
	               "--no-defaults",
	               a_data,
	               a_sock,
	               "--skip-networking",
	               "--user=root",
	               a_pool,
	               "--innodb-log-file-size=512M",
	               "--innodb-flush-method=fsync",
	               "--skip-log-bin",
	               "--performance-schema=OFF",
	               "--skip-name-resolve",
	               a_priv,
	               NULL};
	m->pid = pr_spawn(srv, log);
	if (m->pid < 0)
		return -errno;
	uint64_t t0 = gc_now_ns();
	MYSQL *c;
	while (!(c = maria_connect(m))) {
		if (waitpid(m->pid, NULL, WNOHANG) == m->pid) {
			m->pid = 0;
			fprintf(stderr, "graph_bench: mariadbd exited:\n");
			maria_log_tail(log);
			return -ECHILD;
		}
		if (gc_now_ns() - t0 > 60000000000ull) {
			fprintf(stderr, "graph_bench: mariadbd did not answer "
			                "on its socket within 60 s:\n");
			maria_log_tail(log);
			return -ETIMEDOUT;
		}
		struct pollfd none;
		poll(&none, 0, 20); /* waiting for the server to listen */
	}
	int rc = 0;
	for (size_t i = 0; i < sizeof(maria_schema) / sizeof(*maria_schema);
	     i++)
		if (mysql_query(c, maria_schema[i])) {
			fprintf(stderr, "graph_bench: mariadb: %s\n",
			        mysql_error(c));
			rc = -EIO;
			break;
		}
	mysql_close(c);
	return rc;
}

/* Printable data for SQL text files: the same length as the bytes. */
static inline void maria_text(char *out, const uint8_t *d, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		out[i] = (char)('a' + d[i] % 26);
	out[len] = 0;
}

static inline int maria_load(struct maria *m, const struct lb_graph *lg,
                             void (*progress)(uint64_t done, void *),
                             void *parg)
{
	char pn[320], pl[320], pc[320];
	snprintf(pn, sizeof(pn), "%s/nodes.tsv", m->dir);
	snprintf(pl, sizeof(pl), "%s/links.tsv", m->dir);
	snprintf(pc, sizeof(pc), "%s/counts.tsv", m->dir);
	FILE *fn = fopen(pn, "w"), *fl = fopen(pl, "w"), *fc = fopen(pc, "w");
	struct fg_edge *e = calloc(FG_LOAD_MAX, sizeof(*e));
	int rc = fn && fl && fc && e ? 0 : -EIO;
	uint8_t d[FG_MAX_DATA];
	char t[FG_MAX_DATA + 1];
	for (uint64_t id = 1; id <= lg->nodes && !rc; id++) {
		uint32_t otype, len;
		int64_t tm;
		lb_node(lg, id, &otype, &tm, d, &len);
		maria_text(t, d, len);
		fprintf(fn, "%" PRIu64 "\t%u\t1\t%u\t%s\n", id, otype,
		        (uint32_t)(tm / 1000000), t);
		unsigned n = lb_list(lg, id, e);
		for (unsigned i = 0; i < n; i++) {
			maria_text(t, e[i].data, e[i].len);
			fprintf(fl,
			        "%" PRIu64 "\t%" PRIu64 "\t1\t1\t%s\t%" PRId64
			        "\t0\n",
			        id, e[i].id2, t, e[i].time);
		}
		if (n)
			fprintf(fc, "%" PRIu64 "\t1\t%u\t%" PRId64 "\t0\n", id,
			        n, e[0].time);
		if (progress && id % 50000 == 0)
			progress(id / 2, parg);
	}
	free(e);
	if ((fn && fclose(fn)) | (fl && fclose(fl)) | (fc && fclose(fc)))
		rc = -EIO;
	MYSQL *c = rc ? NULL : maria_connect(m);
	if (!c)
		return rc ? rc : -EIO;
	const char *pre[] = {"SET unique_checks = 0",
	                     "SET foreign_key_checks = 0",
	                     "SET sql_log_bin = 0"};
	for (size_t i = 0; i < 3; i++)
		(void)mysql_query(c, pre[i]);
	char q[800];
	const char *files[] = {pn, pl, pc};
	const char *tabs[] = {"nodetable", "linktable", "counttable"};
	for (int i = 0; i < 3 && !rc; i++) {
		snprintf(q, sizeof(q),
		         "LOAD DATA INFILE '%s' INTO TABLE linkdb.%s FIELDS "
		         "TERMINATED BY '\\t'",
		         files[i], tabs[i]);
		if (mysql_query(c, q)) {
			fprintf(stderr, "graph_bench: mariadb load: %s\n",
			        mysql_error(c));
			rc = -EIO;
		}
		if (progress)
			progress(lg->nodes / 2 +
			                 lg->nodes * (unsigned)(i + 1) / 6,
			         parg);
		unlink(files[i]);
	}
	/* LinkBench's secondary index, built once the rows are in (a sorted
	 * build rather than 4M random inserts) */
	if (!rc && mysql_query(c, "ALTER TABLE linkdb.linktable ADD KEY "
	                          "id1_type (id1, link_type, visibility, time, "
	                          "id2, version, data)")) {
		fprintf(stderr, "graph_bench: mariadb index: %s\n",
		        mysql_error(c));
		rc = -EIO;
	}
	mysql_close(c);
	return rc;
}

/* One connection's statements. */
struct mconn {
	MYSQL *c;
	MYSQL_STMT *s[Q_N];
};

static inline int mconn_open(struct maria *m, struct mconn *k)
{
	memset(k, 0, sizeof(*k));
	if (!(k->c = maria_connect(m)) || mysql_select_db(k->c, "linkdb"))
		return -EIO;
	for (int i = 0; i < Q_N; i++) {
		k->s[i] = mysql_stmt_init(k->c);
		if (!k->s[i] || mysql_stmt_prepare(k->s[i], maria_sql[i],
		                                   strlen(maria_sql[i]))) {
			fprintf(stderr, "graph_bench: prepare: %s\n",
			        mysql_error(k->c));
			return -EIO;
		}
	}
	return 0;
}

static inline void mconn_close(struct mconn *k)
{
	for (int i = 0; i < Q_N; i++)
		if (k->s[i])
			mysql_stmt_close(k->s[i]);
	if (k->c)
		mysql_close(k->c);
}

/* Run statement @q with params: "i" int64, "s" string (@strs in order);
 * rows fetched whole. Returns rows (SELECT) or affected rows, or -EIO. */
static inline long mq(struct mconn *k, int q, const char *types,
                      const int64_t *ints, const char *const *strs,
                      const unsigned long *slens)
{
	MYSQL_BIND b[8];
	memset(b, 0, sizeof(b));
	unsigned ni = 0, ns = 0, n = (unsigned)strlen(types);
	int64_t iv[8];
	for (unsigned i = 0; i < n; i++) {
		if (types[i] == 'i') {
			iv[i] = ints[ni++];
			b[i].buffer_type = MYSQL_TYPE_LONGLONG;
			b[i].buffer = &iv[i];
		} else {
			b[i].buffer_type = MYSQL_TYPE_STRING;
			b[i].buffer = (void *)(uintptr_t)strs[ns];
			b[i].buffer_length = slens[ns];
			b[i].length = (unsigned long *)&slens[ns];
			ns++;
		}
	}
	MYSQL_STMT *s = k->s[q];
	if (mysql_stmt_bind_param(s, b) || mysql_stmt_execute(s))
		return -EIO;
	if (mysql_stmt_field_count(s)) {
		if (mysql_stmt_store_result(s))
			return -EIO;
		long rows = (long)mysql_stmt_num_rows(s);
		mysql_stmt_free_result(s);
		return rows;
	}
	return (long)mysql_stmt_affected_rows(s);
}

static inline int maria_op(struct mconn *k, const struct lb_op *o,
                           uint64_t *rng)
{
	uint8_t d[FG_MAX_DATA];
	char t[FG_MAX_DATA + 1];
	const char *sv[1] = {t};
	unsigned long sl[1];
	uint32_t len;
	long r;
	int64_t tsec = o->time / 1000000;
	switch (o->op) {
	case FG_OBJ_GET:
		r = mq(k, Q_GETNODE, "i", (int64_t[]){(int64_t)o->id1}, 0, 0);
		return r < 0 ? -EIO : r ? 0 : -ENOENT;
	case FG_ASSOC_COUNT:
		r = mq(k, Q_COUNT, "ii", (int64_t[]){(int64_t)o->id1, o->atype},
		       0, 0);
		return r < 0 ? -EIO : 0;
	case FG_ASSOC_RANGE:
		r = mq(k, Q_RANGE, "iiii",
		       (int64_t[]){(int64_t)o->id1, o->atype, o->pos, o->limit},
		       0, 0);
		return r < 0 ? -EIO : 0;
	case FG_ASSOC_TIME_RANGE:
		r = mq(k, Q_TRANGE, "iiiii",
		       (int64_t[]){(int64_t)o->id1, o->atype, o->low, o->high,
		                   o->limit},
		       0, 0);
		return r < 0 ? -EIO : 0;
	case FG_ASSOC_GET:
		r = mq(k, Q_MGET, "iiii",
		       (int64_t[]){o->atype, (int64_t)o->id1,
		                   (int64_t)o->id2s[0],
		                   (int64_t)o->id2s[o->nid2 > 1]},
		       0, 0);
		return r < 0 ? -EIO : 0;
	case FG_OBJ_ADD:
	case FG_OBJ_UPDATE:
		len = lb_size(rng, 128, FG_MAX_DATA);
		lb_fill(rng, d, len);
		maria_text(t, d, len);
		sl[0] = len;
		r = o->op == FG_OBJ_ADD
		            ? mq(k, Q_ADDNODE, "iiis",
		                 (int64_t[]){(int64_t)o->id1, 1, tsec}, sv, sl)
		            : mq(k, Q_UPDNODE, "iisi",
		                 (int64_t[]){1, tsec, (int64_t)o->id1}, sv, sl);
		return r < 0 ? -EIO : 0;
	case FG_OBJ_DELETE:
		r = mq(k, Q_DELNODE, "i", (int64_t[]){(int64_t)o->id1}, 0, 0);
		return r < 0 ? -EIO : 0;
	case FG_ASSOC_ADD:
		len = lb_size(rng, 8, FG_MAX_EDGE_DATA);
		lb_fill(rng, d, len);
		maria_text(t, d, len);
		sl[0] = len;
		r = mq(k, Q_ADDLINK, "iiisi",
		       (int64_t[]){(int64_t)o->id1, (int64_t)o->id2, o->atype,
		                   o->time},
		       sv, sl);
		if (r == 1)
			r = mq(k, Q_INCCOUNT, "iii",
			       (int64_t[]){(int64_t)o->id1, o->atype, o->time},
			       0, 0);
		break;
	case FG_ASSOC_DELETE:
		r = mq(k, Q_DELLINK, "iii",
		       (int64_t[]){(int64_t)o->id1, (int64_t)o->id2, o->atype},
		       0, 0);
		if (r == 1)
			r = mq(k, Q_DECCOUNT, "ii",
			       (int64_t[]){(int64_t)o->id1, o->atype}, 0, 0);
		break;
	case FG_ASSOC_CHANGE_TYPE:
		r = mq(k, Q_MOVELINK, "iiii",
		       (int64_t[]){o->newtype, (int64_t)o->id1, (int64_t)o->id2,
		                   o->atype},
		       0, 0);
		if (r == 1)
			r = mq(k, Q_DECCOUNT, "ii",
			       (int64_t[]){(int64_t)o->id1, o->atype}, 0, 0);
		break;
	default: return -EINVAL;
	}
	if (r < 0) {
		(void)mysql_rollback(k->c);
		return -EIO;
	}
	return mysql_commit(k->c) ? -EIO : 0;
}

struct mthread {
	struct maria *m;
	const struct lb_graph *lg;
	struct peer_run *pr;
	struct gd_result res;
	unsigned idx;
	uint64_t warm_end, end;
	int rc;
};

static inline void *maria_thread(void *arg)
{
	struct mthread *t = arg;
	struct mconn k;
	mysql_thread_init();
	if ((t->rc = mconn_open(t->m, &k))) {
		mconn_close(&k);
		mysql_thread_end();
		return NULL;
	}
	mysql_autocommit(k.c, 0);
	uint64_t rng = t->lg->seed * 31 + 5 + t->idx * 7777,
	         next_id = LB_NEW_IDS + ((uint64_t)t->idx << 36);
	for (uint64_t now = gc_now_ns(); now < t->end;) {
		struct lb_op o;
		lb_next(t->lg, t->pr->mix, &rng, &next_id, &o);
		uint64_t t0 = now;
		int st = maria_op(&k, &o, &rng);
		if (o.op < FG_OBJ_ADD)
			(void)mysql_commit(k.c); /* end the read's snapshot */
		now = gc_now_ns();
		pr_record(&t->res, o.op, st, t0, now, t->warm_end, t->end);
	}
	mconn_close(&k);
	mysql_thread_end();
	return NULL;
}

static inline int maria_run(struct maria *m, const struct lb_graph *lg,
                            struct peer_run *pr)
{
	unsigned n = pr->depth ? pr->depth : 1;
	struct mthread *t = calloc(n, sizeof(*t));
	pthread_t *th = calloc(n, sizeof(*th));
	if (!t || !th)
		return -ENOMEM;
	uint64_t now = gc_now_ns(), warm_end = now + (uint64_t)(pr->warm * 1e9),
	         end = warm_end + (uint64_t)(pr->secs * 1e9);
	for (unsigned i = 0; i < n; i++) {
		t[i] = (struct mthread){.m = m,
		                        .lg = lg,
		                        .pr = pr,
		                        .idx = i,
		                        .warm_end = warm_end,
		                        .end = end};
		pthread_create(&th[i], NULL, maria_thread, &t[i]);
	}
	/* the CPU of the measured window: the server's and this process's */
	while (gc_now_ns() < warm_end) {
		struct pollfd none;
		poll(&none, 0, 5); /* the warm-up runs in the threads */
	}
	uint64_t cpu0 = gd_cpu_ns(), s0 = pr_proc_cpu_ns(m->pid);
	int rc = 0;
	for (unsigned i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		if (t[i].rc && !rc)
			rc = t[i].rc;
	}
	struct gd_result *r = pr->res;
	memset(r, 0, sizeof(*r));
	r->cpu_ns = gd_cpu_ns() - cpu0 + pr_proc_cpu_ns(m->pid) - s0;
	r->wall_ns = end - warm_end;
	for (unsigned i = 0; i < n; i++)
		for (unsigned k = 0; k < FG_NOPS; k++) {
			r->ops[k] += t[i].res.ops[k];
			r->errs[k] += t[i].res.errs[k];
			for (unsigned b = 0; b < GD_HB; b++)
				r->hist[k][b] += t[i].res.hist[k][b];
		}
	free(t);
	free(th);
	return rc;
}

#endif
