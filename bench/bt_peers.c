/*
 * bt_bench's peers, each a private server started here (data in
 * /dev/shm, Unix sockets) and stopped at the end:
 *   Redis sorted sets: members "<16 hex key><16 hex value>", all of score
 *     0, so they sort by key; a lookup is ZRANGEBYLEX [key (key+ LIMIT 0
 *     1, a scan ZRANGEBYLEX [key + LIMIT 0 n, an insert ZADD; commands
 *     pipelined BB_PIPELINE at a time (its best);
 *   MariaDB: a table (k BIGINT UNSIGNED PRIMARY KEY, v BIGINT UNSIGNED) on
 *     InnoDB, queried as a database user would: one connection, one
 *     statement at a time (SELECT ... WHERE k = ?, SELECT ... WHERE k >= ?
 *     ORDER BY k LIMIT n, INSERT ... ON DUPLICATE KEY UPDATE).
 */
#include "bt_bench.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <mysql.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"

static pid_t spawn(char *const argv[], const char *log)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static void stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < 2000; i++) {
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return;
		poll(NULL, 0, 10); /* waiting for the server to exit */
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* ---- Redis ------------------------------------------------------------- */

static struct {
	pid_t pid;
	int fd;
	char dir[64], sock[128];
	char *r;
	size_t rlen, rpos, rcap;
	char w[1 << 16];
	size_t wlen;
} g_redis = {.fd = -1};

static int r_flush(void)
{
	for (size_t off = 0; off < g_redis.wlen;) {
		ssize_t n =
		        write(g_redis.fd, g_redis.w + off, g_redis.wlen - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		off += (size_t)n;
	}
	g_redis.wlen = 0;
	return 0;
}

/* Queue a command; @fmt's words are space-separated, none empty. */
static int r_cmd(int argc, const char *const *argv)
{
	if (g_redis.wlen + 64 + argc * 80 > sizeof(g_redis.w) && r_flush())
		return -EIO;
	g_redis.wlen += (size_t)snprintf(g_redis.w + g_redis.wlen,
	                                 sizeof(g_redis.w) - g_redis.wlen,
	                                 "*%d\r\n", argc);
	for (int i = 0; i < argc; i++)
		g_redis.wlen += (size_t)snprintf(
		        g_redis.w + g_redis.wlen,
		        sizeof(g_redis.w) - g_redis.wlen, "$%zu\r\n%s\r\n",
		        strlen(argv[i]), argv[i]);
	return 0;
}

/* The length of one whole reply at @p, 0 when incomplete; *@items: the
 * array's length (scans), -1 for an error reply. */
static long r_parse(const char *p, size_t n, long *items)
{
	const char *e = memchr(p, '\n', n);
	if (!e)
		return 0;
	long hdr = e - p + 1, v = strtol(p + 1, NULL, 10);
	if (p[0] == '-')
		*items = -1;
	if (p[0] != '*')
		return p[0] == '$' && v >= 0
		               ? ((size_t)(hdr + v + 2) <= n ? hdr + v + 2 : 0)
		               : hdr;
	long off = hdr, sub;
	*items = v;
	for (long i = 0; i < v; i++) {
		long k = r_parse(p + off, n - (size_t)off, &sub);
		if (k <= 0)
			return k;
		off += k;
	}
	return off;
}

/* One reply: its items (>= 0), or -EIO. */
static long r_reply(void)
{
	for (;;) {
		long items = 0;
		long k = g_redis.rlen > g_redis.rpos
		                 ? r_parse(g_redis.r + g_redis.rpos,
		                           g_redis.rlen - g_redis.rpos, &items)
		                 : 0;
		if (k > 0) {
			g_redis.rpos += (size_t)k;
			return items < 0 ? -EIO : items;
		}
		memmove(g_redis.r, g_redis.r + g_redis.rpos,
		        g_redis.rlen - g_redis.rpos);
		g_redis.rlen -= g_redis.rpos;
		g_redis.rpos = 0;
		if (g_redis.rcap - g_redis.rlen < 65536) {
			char *nr = realloc(g_redis.r, g_redis.rcap * 2 + 65536);
			if (!nr)
				return -ENOMEM;
			g_redis.r = nr;
			g_redis.rcap = g_redis.rcap * 2 + 65536;
		}
		ssize_t n = read(g_redis.fd, g_redis.r + g_redis.rlen,
		                 g_redis.rcap - g_redis.rlen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		g_redis.rlen += (size_t)n;
	}
}

static int r_queue(const struct bb_opd *o)
{
	char a[40], b[40], lim[16];
	if (o->op == BB_PUT) {
		snprintf(a, sizeof(a), "%016" PRIx64 "%016" PRIx64, o->key,
		         (uint64_t)BB_VAL(o->key));
		const char *v[] = {"ZADD", "z", "0", a};
		return r_cmd(4, v);
	}
	snprintf(a, sizeof(a), "[%016" PRIx64, o->key);
	snprintf(b, sizeof(b), "(%016" PRIx64 "g", o->key);
	snprintf(lim, sizeof(lim), "%u", o->op == BB_GET ? 1 : o->len);
	const char *v[] = {"ZRANGEBYLEX", "z", a,  o->op == BB_GET ? b : "+",
	                   "LIMIT",       "0", lim};
	return r_cmd(7, v);
}

static int redis_run(void *ctx, struct bb_gen *g, double secs, struct bb_res *r)
{
	(void)ctx;
	struct bb_opd ops[BB_PIPELINE];
	uint64_t t0 = bb_now_ns(), end = t0 + (uint64_t)(secs * 1e9);
	while (bb_now_ns() < end) {
		for (unsigned i = 0; i < BB_PIPELINE; i++) {
			bb_gen_next(g, &ops[i]);
			if (r_queue(&ops[i]))
				return -EIO;
		}
		if (r_flush())
			return -EIO;
		for (unsigned i = 0; i < BB_PIPELINE; i++) {
			long items = r_reply();
			if (items < 0)
				return -EIO;
			r->misses += ops[i].op == BB_GET && items != 1;
			r->entries +=
			        ops[i].op == BB_SCAN ? (uint64_t)items : 0;
		}
		r->ops += BB_PIPELINE;
	}
	r->wall_ns = bb_now_ns() - t0;
	return 0;
}

static uint64_t redis_cpu(void *ctx)
{
	(void)ctx;
	return bu_proc_cpu_ns(0) + bu_proc_cpu_ns(g_redis.pid);
}

static int redis_connect(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(g_redis.sock) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	memcpy(a.sun_path, g_redis.sock, strlen(g_redis.sock) + 1);
	for (int i = 0; i < 1000; i++) {
		g_redis.fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (g_redis.fd >= 0 &&
		    !connect(g_redis.fd, (struct sockaddr *)&a, sizeof(a)))
			return 0;
		close(g_redis.fd);
		g_redis.fd = -1;
		if (waitpid(g_redis.pid, NULL, WNOHANG) == g_redis.pid) {
			g_redis.pid = 0;
			return -ECHILD;
		}
		poll(NULL, 0, 10); /* waiting for the server to listen */
	}
	return -ETIMEDOUT;
}

int bb_redis_start(uint64_t n, struct bb_sys *s)
{
	snprintf(g_redis.dir, sizeof(g_redis.dir),
	         "/dev/shm/bt_bench-redis-XXXXXX");
	if (!mkdtemp(g_redis.dir))
		return -errno;
	snprintf(g_redis.sock, sizeof(g_redis.sock), "%s/r.sock", g_redis.dir);
	char log[128];
	snprintf(log, sizeof(log), "%s/log", g_redis.dir);
	char *argv[] = {"redis-server", "--port", "0",         "--unixsocket",
	                g_redis.sock,   "--save", "",          "--appendonly",
	                "no",           "--dir",  g_redis.dir, "--loglevel",
	                "warning",      NULL};
	g_redis.pid = spawn(argv, log);
	int rc = g_redis.pid < 0 ? -errno : redis_connect();
	for (uint64_t i = 0; !rc && i < n; i += 256) {
		/* ZADD z 0 m 0 m ...: 256 members a command. */
		static char buf[256][40];
		const char *v[2 + 2 * 256] = {"ZADD", "z"};
		int c = 2;
		for (uint64_t j = i; j < n && j < i + 256; j++) {
			snprintf(buf[j - i], 40, "%016" PRIx64 "%016" PRIx64,
			         2 * j, (uint64_t)BB_VAL(2 * j));
			v[c++] = "0";
			v[c++] = buf[j - i];
		}
		rc = r_cmd(c, v) || r_flush() || r_reply() < 0 ? -EIO : 0;
	}
	*s = (struct bb_sys){
	        .name = "redis", .run = redis_run, .cpu_ns = redis_cpu};
	return rc;
}

static int rm_cb(const char *p, const struct stat *sb, int f, struct FTW *w)
{
	(void)sb, (void)f, (void)w;
	return remove(p);
}

void bb_redis_stop(void)
{
	if (g_redis.fd >= 0)
		close(g_redis.fd);
	g_redis.fd = -1;
	stop(g_redis.pid);
	g_redis.pid = 0;
	free(g_redis.r);
	g_redis.r = NULL;
	if (g_redis.dir[0])
		nftw(g_redis.dir, rm_cb, 4, FTW_DEPTH | FTW_PHYS);
	g_redis.dir[0] = 0;
}

/* ---- MariaDB ----------------------------------------------------------- */

static struct {
	pid_t pid;
	char dir[64], sock[128];
	MYSQL *c;
} g_maria;

static int q(const char *sql)
{
	if (mysql_query(g_maria.c, sql)) {
		fprintf(stderr, "bt_bench: mariadb: %s\n",
		        mysql_error(g_maria.c));
		return -EIO;
	}
	MYSQL_RES *res = mysql_store_result(g_maria.c);
	if (res)
		mysql_free_result(res);
	return 0;
}

/* A query's rows, or -EIO. */
static long q_rows(const char *sql)
{
	if (mysql_query(g_maria.c, sql))
		return -EIO;
	MYSQL_RES *res = mysql_store_result(g_maria.c);
	if (!res)
		return -EIO;
	long n = 0;
	while (mysql_fetch_row(res))
		n++;
	mysql_free_result(res);
	return n;
}

static int maria_get(void *ctx, uint64_t k, uint64_t *v)
{
	(void)ctx;
	char sql[96];
	snprintf(sql, sizeof(sql), "SELECT v FROM t WHERE k=%" PRIu64, k);
	long n = q_rows(sql);
	*v = BB_VAL(k);
	return n < 0 ? (int)n : n ? 0 : -ENOENT;
}

static int maria_put(void *ctx, uint64_t k, uint64_t v)
{
	(void)ctx;
	char sql[160];
	snprintf(sql, sizeof(sql),
	         "INSERT INTO t VALUES(%" PRIu64 ",%" PRIu64
	         ") ON DUPLICATE KEY UPDATE v=VALUES(v)",
	         k, v);
	return q(sql);
}

static long maria_scan(void *ctx, uint64_t k, uint32_t n)
{
	(void)ctx;
	char sql[128];
	snprintf(sql, sizeof(sql),
	         "SELECT k,v FROM t WHERE k>=%" PRIu64 " ORDER BY k LIMIT %u",
	         k, n);
	return q_rows(sql);
}

static uint64_t maria_cpu(void *ctx)
{
	(void)ctx;
	return bu_proc_cpu_ns(0) + bu_proc_cpu_ns(g_maria.pid);
}

static int maria_load(uint64_t n)
{
	size_t cap = 64 + 2000 * 48;
	char *sql = malloc(cap);
	int rc = sql ? q("CREATE DATABASE b") || q("USE b") ||
	                         q("CREATE TABLE t (k BIGINT UNSIGNED PRIMARY "
	                           "KEY, v BIGINT UNSIGNED) ENGINE=InnoDB")
	             : -ENOMEM;
	for (uint64_t i = 0; !rc && i < n; i += 2000) {
		size_t len = (size_t)snprintf(sql, cap, "INSERT INTO t VALUES");
		for (uint64_t j = i; j < n && j < i + 2000; j++)
			len += (size_t)snprintf(sql + len, cap - len,
			                        "%s(%" PRIu64 ",%" PRIu64 ")",
			                        j > i ? "," : "", 2 * j,
			                        (uint64_t)BB_VAL(2 * j));
		rc = q(sql);
	}
	free(sql);
	return rc ? -EIO : 0;
}

static int maria_server(void)
{
	char data[96], log[96], a_data[128], a_sock[160];
	snprintf(data, sizeof(data), "%s/data", g_maria.dir);
	snprintf(log, sizeof(log), "%s/install.log", g_maria.dir);
	snprintf(a_data, sizeof(a_data), "--datadir=%s", data);
	char *inst[] = {"mariadb-install-db",
	                "--no-defaults",
	                a_data,
	                "--auth-root-authentication-method=socket",
	                "--skip-test-db",
	                "--user=root",
	                NULL};
	pid_t p = spawn(inst, log);
	int st = 0;
	if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) ||
	    WEXITSTATUS(st)) {
		fprintf(stderr, "bt_bench: mariadb-install-db failed (%s)\n",
		        log);
		return -EIO;
	}
	snprintf(log, sizeof(log), "%s/server.log", g_maria.dir);
	snprintf(a_sock, sizeof(a_sock), "--socket=%s", g_maria.sock);
	char *srv[] = {"mariadbd",
	               "--no-defaults",
	               a_data,
	               a_sock,
	               "--skip-networking",
	               "--user=root",
	               "--innodb-buffer-pool-size=1G",
	               "--innodb-flush-log-at-trx-commit=2",
	               "--skip-log-bin",
	               "--performance-schema=OFF",
	               NULL};
	g_maria.pid = spawn(srv, log);
	if (g_maria.pid < 0)
		return -errno;
	for (int i = 0; i < 3000; i++) {
		g_maria.c = mysql_init(NULL);
		if (mysql_real_connect(g_maria.c, "localhost", "root", NULL,
		                       NULL, 0, g_maria.sock, 0))
			return 0;
		mysql_close(g_maria.c);
		g_maria.c = NULL;
		if (waitpid(g_maria.pid, NULL, WNOHANG) == g_maria.pid) {
			g_maria.pid = 0;
			fprintf(stderr, "bt_bench: mariadbd exited (%s)\n",
			        log);
			return -ECHILD;
		}
		poll(NULL, 0, 20); /* waiting for the server to listen */
	}
	return -ETIMEDOUT;
}

int bb_maria_start(uint64_t n, struct bb_sys *s)
{
	snprintf(g_maria.dir, sizeof(g_maria.dir),
	         "/dev/shm/bt_bench-maria-XXXXXX");
	if (!mkdtemp(g_maria.dir))
		return -errno;
	snprintf(g_maria.sock, sizeof(g_maria.sock), "%s/m.sock", g_maria.dir);
	int rc = maria_server();
	if (!rc)
		rc = maria_load(n);
	*s = (struct bb_sys){.name = "mariadb",
	                     .get = maria_get,
	                     .put = maria_put,
	                     .scan = maria_scan,
	                     .cpu_ns = maria_cpu};
	return rc;
}

void bb_maria_stop(void)
{
	if (g_maria.c)
		mysql_close(g_maria.c);
	g_maria.c = NULL;
	stop(g_maria.pid);
	g_maria.pid = 0;
	if (g_maria.dir[0])
		nftw(g_maria.dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
	g_maria.dir[0] = 0;
}
