/*
 * graph_bench's peers, driven with the same LinkBench graph and operation
 * stream as fgraph: a plain in-memory implementation of the same layout
 * (memgraph.h), Redis (nodes as hashes, each (id1, type) list a sorted set
 * by time whose members carry id2 and the edge's data, counts by ZCARD,
 * writes as Lua scripts, pipelined), and MariaDB (LinkBench's own schema,
 * prepared statements, several connections). Each peer is started by the
 * benchmark in a private directory, reached over a private Unix socket,
 * and stopped by pid. Results go into a struct gd_result like fgraph's.
 */
#ifndef FGRAPH_GRAPH_PEERS_H
#define FGRAPH_GRAPH_PEERS_H

#include <fcntl.h>

#include "gdriver.h"
#include "memgraph.h"

struct peer_run {
	enum lb_mix mix;
	double warm, secs;
	unsigned depth; /* Redis: pipeline depth; MariaDB: connections */
	struct gd_result *res;
};

/* Record one operation's latency once the warm-up is over. */
static inline void pr_record(struct gd_result *r, enum fg_op k, int status,
                             uint64_t t0, uint64_t t1, uint64_t warm_end,
                             uint64_t end)
{
	if (t0 < warm_end || t1 >= end)
		return;
	r->ops[k]++;
	if (status < 0 && status != -ENOENT && status != -EEXIST)
		r->errs[k]++;
	r->hist[k][gd_bucket(t1 - t0)]++;
}

/* CPU time of process @pid (ns), from /proc (0 when unknown). */
static inline uint64_t pr_proc_cpu_ns(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	if (!p || sscanf(p + 2,
	                 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
	                 "%lu %lu",
	                 &ut, &st) != 2)
		return 0;
	return (uint64_t)(ut + st) *
	       (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
}

/* Start @argv (a server) with its output to @log; its pid. */
static inline pid_t pr_spawn(char *const argv[], const char *log)
{
	fflush(NULL);
	pid_t parent = getpid(), pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
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

/* Stop a server by its pid: SIGTERM, then SIGKILL after @ms. */
static inline void pr_stop(pid_t pid, int ms)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL); /* waiting for a process to exit */
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* ---- the in-memory limit ------------------------------------------------- */

static inline int mem_load(struct mg *m, const struct lb_graph *lg)
{
	struct fg_edge *e = calloc(FG_LOAD_MAX, sizeof(*e));
	uint8_t data[FG_MAX_DATA];
	if (!e || mg_init(m, lg->nodes + 1000000))
		return -ENOMEM;
	for (uint64_t id = 1; id <= lg->nodes; id++) {
		uint32_t otype, len;
		int64_t t;
		lb_node(lg, id, &otype, &t, data, &len);
		unsigned n = lb_list(lg, id, e);
		int rc = mg_load(m, id, otype, t, data, len, e, n);
		if (rc) {
			free(e);
			return rc;
		}
	}
	free(e);
	return 0;
}

static inline int mem_op(struct mg *m, const struct lb_op *o, uint64_t *rng,
                         struct fg_edge *buf)
{
	uint8_t d[FG_MAX_DATA];
	uint32_t len;
	switch (o->op) {
	case FG_OBJ_GET: {
		struct mg_node *n = mg_live(m, o->id1);
		if (!n)
			return -ENOENT;
		struct fg_obj ob = {.id = n->id,
		                    .otype = n->otype,
		                    .version = n->version,
		                    .time = n->time,
		                    .len = n->dlen};
		memcpy(ob.data, n->data, n->dlen);
		__asm__ volatile("" ::"r"(&ob) : "memory");
		return 0;
	}
	case FG_ASSOC_COUNT: {
		struct mg_node *n = mg_live(m, o->id1);
		if (!n)
			return -ENOENT;
		struct mg_list *l = mg_list_of(n, o->atype, false);
		return l ? (int)(l->count & 0x7fffffff) : 0;
	}
	case FG_ASSOC_RANGE:
		return mg_range(m, o->id1, o->atype, o->pos, o->limit, 0, 0,
		                false, buf);
	case FG_ASSOC_TIME_RANGE:
		return mg_range(m, o->id1, o->atype, 0, o->limit, o->high,
		                o->low, true, buf);
	case FG_ASSOC_GET:
		return mg_get_edges(m, o->id1, o->atype, o->id2s, o->nid2, buf);
	case FG_OBJ_ADD:
	case FG_OBJ_UPDATE:
		len = lb_size(rng, 128, FG_MAX_DATA);
		lb_fill(rng, d, len);
		return o->op == FG_OBJ_ADD
		               ? mg_obj_add(m, o->id1, 1, o->time, d, len)
		               : mg_obj_update(m, o->id1, 1, o->time, d, len);
	case FG_OBJ_DELETE: return mg_obj_delete(m, o->id1);
	case FG_ASSOC_ADD:
		len = lb_size(rng, 8, FG_MAX_EDGE_DATA);
		lb_fill(rng, d, len);
		return mg_assoc_add(m, o->id1, o->atype, o->id2, o->time, d,
		                    len);
	case FG_ASSOC_DELETE: {
		struct mg_node *n = mg_live(m, o->id1);
		struct mg_list *l = n ? mg_list_of(n, o->atype, false) : NULL;
		return l && mg_remove(l, o->id2, NULL) ? 0 : -ENOENT;
	}
	case FG_ASSOC_CHANGE_TYPE: {
		struct mg_node *n = mg_live(m, o->id1);
		struct mg_list *l = n ? mg_list_of(n, o->atype, false) : NULL;
		struct gb_edge e;
		if (!l || !mg_remove(l, o->id2, &e))
			return -ENOENT;
		return mg_assoc_add(m, o->id1, o->newtype, o->id2, e.time,
		                    e.data, e.len);
	}
	default: return -EINVAL;
	}
}

static inline int mem_run(struct mg *m, const struct lb_graph *lg,
                          struct peer_run *pr)
{
	struct gd_result *r = pr->res;
	memset(r, 0, sizeof(*r));
	struct fg_edge *buf = calloc(LB_LB_LIMIT, sizeof(*buf));
	if (!buf)
		return -ENOMEM;
	uint64_t rng = lg->seed * 31 + 5, next_id = LB_NEW_IDS;
	uint64_t t = gc_now_ns(), warm_end = t + (uint64_t)(pr->warm * 1e9),
	         end = warm_end + (uint64_t)(pr->secs * 1e9), cpu0 = 0;
	bool measuring = false;
	for (uint64_t now = t; now < end;) {
		struct lb_op o;
		lb_next(lg, pr->mix, &rng, &next_id, &o);
		if (!measuring && now >= warm_end) {
			measuring = true;
			cpu0 = gd_cpu_ns();
		}
		uint64_t t0 = now;
		int st = mem_op(m, &o, &rng, buf);
		now = gc_now_ns();
		pr_record(r, o.op, st, t0, now, warm_end, end);
	}
	r->wall_ns = end - warm_end;
	r->cpu_ns = gd_cpu_ns() - cpu0;
	free(buf);
	return 0;
}

#endif
