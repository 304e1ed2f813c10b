/*
 * graph_bench's Redis peer (graph_peers.h says the data model): a private
 * redis-server on a Unix socket, a minimal RESP client with pipelining.
 * Header-only.
 */
#ifndef FGRAPH_GRAPH_REDIS_H
#define FGRAPH_GRAPH_REDIS_H

#include <sys/socket.h>
#include <sys/un.h>

#include "graph_peers.h"

struct rds {
	int fd;
	pid_t pid;
	char dir[256], sock[300];
	char *w;
	size_t wlen, wcap;
	char *r;
	size_t rlen, rpos, rcap;
};

static inline int rds_wr(struct rds *c, const void *p, size_t n)
{
	if (c->wlen + n > c->wcap) {
		size_t nc = (c->wlen + n) * 2;
		char *w = realloc(c->w, nc);
		if (!w)
			return -ENOMEM;
		c->w = w;
		c->wcap = nc;
	}
	memcpy(c->w + c->wlen, p, n);
	c->wlen += n;
	return 0;
}

/* Queue one command of @argc arguments. */
static inline int rds_cmd(struct rds *c, int argc, const char *const *argv,
                          const size_t *lens)
{
	char h[32];
	int rc = rds_wr(c, h, (size_t)snprintf(h, sizeof(h), "*%d\r\n", argc));
	for (int i = 0; i < argc && !rc; i++) {
		size_t l = lens ? lens[i] : strlen(argv[i]);
		rc = rds_wr(c, h,
		            (size_t)snprintf(h, sizeof(h), "$%zu\r\n", l));
		rc = rc ? rc : rds_wr(c, argv[i], l);
		rc = rc ? rc : rds_wr(c, "\r\n", 2);
	}
	return rc;
}

static inline int rds_flush(struct rds *c)
{
	size_t off = 0;
	while (off < c->wlen) {
		ssize_t n = write(c->fd, c->w + off, c->wlen - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		off += (size_t)n;
	}
	c->wlen = 0;
	return 0;
}

/* The length of one complete reply at @p (@n bytes there): > 0; 0 when
 * incomplete; -1 malformed. *@err: an error reply. */
static inline long rds_parse(const char *p, size_t n, bool *err)
{
	const char *e = memchr(p, '\n', n);
	if (!e)
		return 0;
	long hdr = e - p + 1;
	long v = strtol(p + 1, NULL, 10);
	switch (p[0]) {
	case '+':
	case ':': return hdr;
	case '-': *err = true; return hdr;
	case '$':
		if (v < 0)
			return hdr;
		return (size_t)(hdr + v + 2) <= n ? hdr + v + 2 : 0;
	case '*': {
		long off = hdr;
		for (long i = 0; i < v; i++) {
			long k = rds_parse(p + off, n - (size_t)off, err);
			if (k <= 0)
				return k;
			off += k;
		}
		return off;
	}
	default: return -1;
	}
}

/* Wait for one reply: 0, 1 (an error reply), or -EIO. */
static inline int rds_reply(struct rds *c)
{
	for (;;) {
		bool err = false;
		long k = c->rlen > c->rpos ? rds_parse(c->r + c->rpos,
		                                       c->rlen - c->rpos, &err)
		                           : 0;
		if (k < 0)
			return -EIO;
		if (k > 0) {
			c->rpos += (size_t)k;
			return err;
		}
		if (c->rpos) {
			memmove(c->r, c->r + c->rpos, c->rlen - c->rpos);
			c->rlen -= c->rpos;
			c->rpos = 0;
		}
		if (c->rcap - c->rlen < 65536) {
			char *r = realloc(c->r, c->rcap * 2 + 65536);
			if (!r)
				return -ENOMEM;
			c->r = r;
			c->rcap = c->rcap * 2 + 65536;
		}
		ssize_t n = read(c->fd, c->r + c->rlen, c->rcap - c->rlen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		c->rlen += (size_t)n;
	}
}

static inline void rds_stop(struct rds *c)
{
	if (c->fd > 0)
		close(c->fd);
	c->fd = -1;
	pr_stop(c->pid, 5000);
	c->pid = 0;
	free(c->w);
	free(c->r);
	c->w = c->r = NULL;
	if (c->dir[0]) {
		nftw(c->dir, gc_rm_cb, 4, FTW_DEPTH | FTW_PHYS);
		c->dir[0] = 0;
	}
}

/* Start redis-server in a private directory and connect: 0 or an error. */
static inline int rds_start(struct rds *c)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	snprintf(c->dir, sizeof(c->dir), "/dev/shm/fgraph-redis-XXXXXX");
	if (!mkdtemp(c->dir)) {
		c->dir[0] = 0;
		return -errno;
	}
	snprintf(c->sock, sizeof(c->sock), "%s/redis.sock", c->dir);
	char log[320];
	snprintf(log, sizeof(log), "%s/redis.log", c->dir);
	char *argv[] = {"redis-server",
	                "--port",
	                "0",
	                "--unixsocket",
	                c->sock,
	                "--save",
	                "",
	                "--appendonly",
	                "no",
	                "--dir",
	                c->dir,
	                "--daemonize",
	                "no",
	                "--io-threads",
	                "1",
	                "--loglevel",
	                "warning",
	                NULL};
	c->pid = pr_spawn(argv, log);
	if (c->pid < 0)
		return -errno;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(c->sock) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	memcpy(a.sun_path, c->sock, strlen(c->sock) + 1);
	uint64_t t0 = gc_now_ns();
	for (;;) {
		c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (c->fd >= 0 &&
		    connect(c->fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return 0;
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
			c->pid = 0;
			return -ECHILD;
		}
		if (gc_now_ns() - t0 > 10000000000ull)
			return -ETIMEDOUT;
		struct pollfd none;
		poll(&none, 0, 5); /* waiting for the server to listen */
	}
}

#define RDS_ADD                                       \
	"local o=redis.call('HGET',KEYS[2],ARGV[1]) " \
	"if o then redis.call('ZREM',KEYS[1],o) end " \
	"redis.call('ZADD',KEYS[1],ARGV[3],ARGV[2]) " \
	"redis.call('HSET',KEYS[2],ARGV[1],ARGV[2]) " \
	"if o then return 0 end return 1"
#define RDS_DEL                                                            \
	"local o=redis.call('HGET',KEYS[2],ARGV[1]) "                      \
	"if not o then return 0 end "                                      \
	"redis.call('ZREM',KEYS[1],o) redis.call('HDEL',KEYS[2],ARGV[1]) " \
	"return 1"
#define RDS_MOVE                                                               \
	"local o=redis.call('HGET',KEYS[2],ARGV[1]) "                          \
	"if not o then return 0 end "                                          \
	"local s=redis.call('ZSCORE',KEYS[1],o) "                              \
	"redis.call('ZREM',KEYS[1],o) redis.call('HDEL',KEYS[2],ARGV[1]) "     \
	"redis.call('ZADD',KEYS[3],s,o) redis.call('HSET',KEYS[4],ARGV[1],o) " \
	"return 1"

/* An edge's member: id2 in decimal, '|', its data. */
static inline size_t rds_member(char *m, uint64_t id2, const uint8_t *d,
                                uint32_t len)
{
	int k = snprintf(m, 32, "%" PRIu64 "|", id2);
	memcpy(m + k, d, len);
	return (size_t)k + len;
}

/* Queue operation @o's command(s): how many replies it will have. */
static inline int rds_queue(struct rds *c, const struct lb_op *o, uint64_t *rng)
{
	char k1[48], k2[48], k3[48], k4[48], a1[32], a2[32], a3[32], a4[32];
	char mem[96];
	uint8_t d[FG_MAX_DATA];
	uint32_t len;
	snprintf(k1, sizeof(k1), "n:%" PRIu64, o->id1);
	snprintf(k2, sizeof(k2), "l:%" PRIu64 ":%u", o->id1, o->atype);
	snprintf(k3, sizeof(k3), "e:%" PRIu64 ":%u", o->id1, o->atype);
	switch (o->op) {
	case FG_OBJ_GET: {
		const char *v[] = {"HGETALL", k1};
		return rds_cmd(c, 2, v, NULL) ?: 1;
	}
	case FG_ASSOC_COUNT: {
		const char *v[] = {"ZCARD", k2};
		return rds_cmd(c, 2, v, NULL) ?: 1;
	}
	case FG_ASSOC_RANGE: {
		snprintf(a1, sizeof(a1), "%u", o->pos);
		snprintf(a2, sizeof(a2), "%u", o->pos + o->limit - 1);
		const char *v[] = {"ZREVRANGE", k2, a1, a2, "WITHSCORES"};
		return rds_cmd(c, 5, v, NULL) ?: 1;
	}
	case FG_ASSOC_TIME_RANGE: {
		snprintf(a1, sizeof(a1), "%" PRId64, o->high);
		snprintf(a2, sizeof(a2), "%" PRId64, o->low);
		snprintf(a3, sizeof(a3), "%u", o->limit);
		const char *v[] = {"ZREVRANGEBYSCORE", k2,      a1,  a2,
		                   "WITHSCORES",       "LIMIT", "0", a3};
		return rds_cmd(c, 8, v, NULL) ?: 1;
	}
	case FG_ASSOC_GET: {
		snprintf(a1, sizeof(a1), "%" PRIu64, o->id2s[0]);
		snprintf(a2, sizeof(a2), "%" PRIu64, o->id2s[1]);
		const char *v[] = {"HMGET", k3, a1, a2};
		return rds_cmd(c, 2 + (int)o->nid2, v, NULL) ?: 1;
	}
	case FG_OBJ_ADD:
	case FG_OBJ_UPDATE: {
		len = lb_size(rng, 128, FG_MAX_DATA);
		lb_fill(rng, d, len);
		snprintf(a1, sizeof(a1), "%" PRId64, o->time);
		const char *v[] = {"HSET", k1,   "t", "1", "v",
		                   "1",    "ts", a1,  "d", (const char *)d};
		size_t l[] = {4, strlen(k1), 1, 1, 1, 1, 2, strlen(a1), 1, len};
		return rds_cmd(c, 10, v, l) ?: 1;
	}
	case FG_OBJ_DELETE: {
		snprintf(k4, sizeof(k4), "l:%" PRIu64 ":2", o->id1);
		const char *v[] = {"DEL", k1, k2, k3, k4};
		return rds_cmd(c, 5, v, NULL) ?: 1;
	}
	case FG_ASSOC_ADD: {
		len = lb_size(rng, 8, FG_MAX_EDGE_DATA);
		lb_fill(rng, d, len);
		size_t ml = rds_member(mem, o->id2, d, len);
		snprintf(a1, sizeof(a1), "%" PRIu64, o->id2);
		snprintf(a2, sizeof(a2), "%" PRId64, o->time);
		const char *v[] = {"EVAL", RDS_ADD, "2", k2, k3, a1, mem, a2};
		size_t l[] = {4,          strlen(RDS_ADD), 1,  strlen(k2),
		              strlen(k3), strlen(a1),      ml, strlen(a2)};
		return rds_cmd(c, 8, v, l) ?: 1;
	}
	case FG_ASSOC_DELETE: {
		snprintf(a1, sizeof(a1), "%" PRIu64, o->id2);
		const char *v[] = {"EVAL", RDS_DEL, "2", k2, k3, a1};
		return rds_cmd(c, 6, v, NULL) ?: 1;
	}
	case FG_ASSOC_CHANGE_TYPE: {
		snprintf(a1, sizeof(a1), "%" PRIu64, o->id2);
		snprintf(a3, sizeof(a3), "l:%" PRIu64 ":%u", o->id1,
		         o->newtype);
		snprintf(a4, sizeof(a4), "e:%" PRIu64 ":%u", o->id1,
		         o->newtype);
		const char *v[] = {"EVAL", RDS_MOVE, "4", k2, k3, a3, a4, a1};
		return rds_cmd(c, 8, v, NULL) ?: 1;
	}
	default: return -EINVAL;
	}
}

/* Load the graph, pipelined: 0 or an error. */
static inline int rds_load(struct rds *c, const struct lb_graph *lg,
                           void (*progress)(uint64_t done, void *), void *parg)
{
	struct fg_edge *e = calloc(FG_LOAD_MAX, sizeof(*e));
	static char buf[FG_LOAD_MAX][96], ts[FG_LOAD_MAX][24],
	        ids[FG_LOAD_MAX][24];
	const char **v = calloc(2 + 2 * FG_LOAD_MAX, sizeof(*v));
	size_t *l = calloc(2 + 2 * FG_LOAD_MAX, sizeof(*l));
	uint8_t d[FG_MAX_DATA];
	int rc = e && v && l ? 0 : -ENOMEM;
	unsigned queued = 0;
	for (uint64_t id = 1; id <= lg->nodes && !rc; id++) {
		uint32_t otype, len;
		int64_t t;
		char k1[48], k2[48], k3[48], a1[24], a2[24];
		lb_node(lg, id, &otype, &t, d, &len);
		snprintf(k1, sizeof(k1), "n:%" PRIu64, id);
		snprintf(a1, sizeof(a1), "%u", otype);
		snprintf(a2, sizeof(a2), "%" PRId64, t);
		const char *nv[] = {"HSET", k1,   "t", a1,  "v",
		                    "1",    "ts", a2,  "d", (const char *)d};
		size_t nl[] = {4, strlen(k1), 1,          strlen(a1), 1,
		               1, 2,          strlen(a2), 1,          len};
		rc = rds_cmd(c, 10, nv, nl);
		queued++;
		unsigned n = lb_list(lg, id, e);
		if (n && !rc) {
			snprintf(k2, sizeof(k2), "l:%" PRIu64 ":1", id);
			snprintf(k3, sizeof(k3), "e:%" PRIu64 ":1", id);
			v[0] = "ZADD";
			v[1] = k2;
			l[0] = 4;
			l[1] = strlen(k2);
			for (unsigned i = 0; i < n; i++) {
				size_t ml = rds_member(buf[i], e[i].id2,
				                       e[i].data, e[i].len);
				snprintf(ts[i], sizeof(ts[i]), "%" PRId64,
				         e[i].time);
				v[2 + 2 * i] = ts[i];
				l[2 + 2 * i] = strlen(ts[i]);
				v[3 + 2 * i] = buf[i];
				l[3 + 2 * i] = ml;
			}
			rc = rds_cmd(c, 2 + 2 * (int)n, v, l);
			v[0] = "HSET";
			v[1] = k3;
			l[1] = strlen(k3);
			for (unsigned i = 0; i < n && !rc; i++) {
				snprintf(ids[i], sizeof(ids[i]), "%" PRIu64,
				         e[i].id2);
				v[2 + 2 * i] = ids[i];
				l[2 + 2 * i] = strlen(ids[i]);
			}
			rc = rc ? rc : rds_cmd(c, 2 + 2 * (int)n, v, l);
			queued += 2;
		}
		if (queued >= 3000 || id == lg->nodes) {
			rc = rc ? rc : rds_flush(c);
			for (; queued && !rc; queued--)
				rc = rds_reply(c) == 0 ? 0 : -EPROTO;
			if (progress)
				progress(id, parg);
		}
	}
	free(e);
	free(v);
	free(l);
	return rc;
}

/* Run a mix with @pr->depth operations in flight (1: one at a time). */
static inline int rds_run(struct rds *c, const struct lb_graph *lg,
                          struct peer_run *pr)
{
	struct gd_result *r = pr->res;
	memset(r, 0, sizeof(*r));
	unsigned depth = pr->depth ? pr->depth : 1;
	struct lb_op *q = calloc(depth, sizeof(*q));
	uint64_t *t0s = calloc(depth, sizeof(*t0s));
	if (!q || !t0s)
		return -ENOMEM;
	uint64_t rng = lg->seed * 31 + 5, next_id = LB_NEW_IDS;
	uint64_t t = gc_now_ns(), warm_end = t + (uint64_t)(pr->warm * 1e9),
	         end = warm_end + (uint64_t)(pr->secs * 1e9), cpu0 = 0,
	         scpu0 = 0;
	bool measuring = false;
	unsigned head = 0, n = 0;
	int rc = 0;
	uint64_t now = t;
	while (!rc && (now < end || n)) {
		/* top up, one write for the batch */
		while (now < end && n < depth) {
			unsigned i = (head + n) % depth;
			lb_next(lg, pr->mix, &rng, &next_id, &q[i]);
			if ((rc = rds_queue(c, &q[i], &rng)) < 0)
				break;
			rc = 0;
			t0s[i] = now;
			n++;
		}
		if (rc || (rc = rds_flush(c)))
			break;
		int st = rds_reply(c);
		if (st < 0) {
			rc = st;
			break;
		}
		now = gc_now_ns();
		if (!measuring && now >= warm_end) {
			measuring = true;
			cpu0 = gd_cpu_ns();
			scpu0 = pr_proc_cpu_ns(c->pid);
		}
		pr_record(r, q[head].op, st ? -EIO : 0, t0s[head], now,
		          warm_end, end);
		head = (head + 1) % depth;
		n--;
	}
	r->wall_ns = end - warm_end;
	r->cpu_ns = gd_cpu_ns() - cpu0 + pr_proc_cpu_ns(c->pid) - scpu0;
	free(q);
	free(t0s);
	return rc;
}

#endif
