/*
 * A local cluster of GC_NM machine processes for fgraph's tests, built on
 * the public API only: each machine is a forked child that writes its
 * configuration file, opens its node with farm_node_open_file, makes the KV
 * store and the graph, runs loop 0 itself, joins, and then runs the test's
 * body. The parent talks to each machine over a pipe each way (commands
 * down, answers up). Header-only.
 */
#ifndef FGRAPH_GCLUSTER_H
#define FGRAPH_GCLUSTER_H

#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "graph.h"

#define GC_NM 3

struct gc_cluster {
	char root[256];
	pid_t pid[GC_NM];
	int to[GC_NM], from[GC_NM];
};

struct gc_machine {
	unsigned me;
	int in, out;
	const struct gc_cluster *cl;
	farm_node *node;
	farm_kv *kv;
	fg_graph *g;
	farm_loop *loop;
};

typedef int (*gc_body_fn)(struct gc_machine *m, void *arg);

/* How the machines are made (the tool and the benchmark change it). */
struct gc_opts {
	const char *region_size;
	uint32_t kv_buckets; /* per machine */
	unsigned replicas;   /* 0: the configuration's default */
	bool busy_poll;
	const char *zk; /* ZooKeeper host:port: membership there, not peers */
	int park_after_us; /* < 0: the configuration's default */
	uint32_t lease_us; /* 0: the configuration's default */
};
static struct gc_opts gc_o = {"64M", 4096, 0, false, NULL, -1, 0};

static inline uint64_t gc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int gc_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read @len bytes within @ms (-1: none, or the other end went away). */
static inline int gc_read_all(int fd, void *buf, size_t len, int ms)
{
	uint64_t dl = gc_now_ns() + (uint64_t)ms * 1000000ull;
	char *p = buf;
	while (len) {
		uint64_t now = gc_now_ns();
		if (now >= dl)
			return -1;
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int r = poll(&pf, 1, (int)((dl - now) / 1000000ull) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static inline int gc_rm_cb(const char *path, const struct stat *sb, int flag,
                           struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Make machine @m's KV store (@buckets per machine) and graph over @nm
 * machines on its open node; its loops are the application's. 0, or 4.
 * Register message handlers of one's own after this and before
 * gc_machine_join. */
static inline int gc_machine_setup(struct gc_machine *m,
                                   const struct fg_attr *attr, unsigned nm,
                                   uint32_t buckets)
{
	m->me = farm_node_id(m->node);
	if (farm_kv_create(m->node, NULL, buckets, &m->kv) ||
	    fg_create(m->node, m->kv, attr, nm, &m->g))
		return 4;
	farm_node_set_app_loops(m->node, true);
	return 0;
}

/* Open machine @m from configuration file @conf and set it up: 0, 3 (the
 * node; said on stderr) or 4. */
static inline int gc_machine_open(struct gc_machine *m, const char *conf,
                                  const struct fg_attr *attr, unsigned nm,
                                  uint32_t buckets)
{
	int rc = farm_node_open_file(conf, &m->node);
	if (rc) {
		fprintf(stderr, "m%u: open %s: %s\n", m->me, conf,
		        farm_strerror(rc));
		return 3;
	}
	return gc_machine_setup(m, attr, nm, buckets);
}

/* Start it, run loop 0 on this thread, wait for @nm machines, join the
 * store. 0, or 5 (starting, the members) or 6 (the store). */
static inline int gc_machine_join(struct gc_machine *m, unsigned nm,
                                  int timeout_ms)
{
	if (farm_node_start(m->node, timeout_ms) ||
	    farm_node_loop_open(m->node, 0, &m->loop) ||
	    farm_node_wait_members(m->node, nm, timeout_ms))
		return 5;
	if (farm_kv_attach(m->kv, m->loop) || fg_attach(m->g, m->loop) ||
	    farm_kv_join_sync(m->kv, m->loop, nm, timeout_ms))
		return 6;
	return 0;
}

/* Leave and free whatever gc_machine_open and gc_machine_join made. */
static inline void gc_machine_close(struct gc_machine *m)
{
	if (m->loop) {
		fg_detach(m->g, m->loop);
		farm_kv_detach(m->kv, m->loop);
		farm_node_loop_close(m->node, m->loop);
	}
	farm_node_close(m->node);
	fg_destroy(m->g);
	farm_kv_destroy(m->kv);
	m->loop = NULL;
	m->node = NULL;
	m->kv = NULL;
	m->g = NULL;
}

/* The machine's life: configuration, node, store, graph, join, body. */
static inline int gc_machine_main(struct gc_machine *m,
                                  const struct fg_attr *attr, gc_body_fn body,
                                  void *arg)
{
	char dir[300], conf[320];
	snprintf(dir, sizeof(dir), "%s/m%u", m->cl->root, m->me);
	snprintf(conf, sizeof(conf), "%s/m%u.conf", m->cl->root, m->me);
	FILE *f = fopen(conf, "w");
	if (!f)
		return 2;
	fprintf(f, "machine_id = %u\ndata_dir = %s\nregion_size = %s\n", m->me,
	        dir, gc_o.region_size);
	fprintf(f, "threads = 1\nlog_size = 1M\nbusy_poll = %d\n",
	        gc_o.busy_poll);
	if (gc_o.replicas)
		fprintf(f, "replicas = %u\n", gc_o.replicas);
	if (gc_o.park_after_us >= 0)
		fprintf(f, "park_after_us = %d\n", gc_o.park_after_us);
	if (gc_o.lease_us)
		fprintf(f, "lease_us = %u\n", gc_o.lease_us);
	if (gc_o.zk)
		fprintf(f,
		        "zk = %s\nzk_root = /libfarm/fgraph-%d\n"
		        "expect_machines = %u\n",
		        gc_o.zk, (int)getppid(), GC_NM);
	for (unsigned j = 0; j < GC_NM && !gc_o.zk; j++)
		if (j != m->me)
			fprintf(f, "peer = %u %s/m%u\n", j, m->cl->root, j);
	if (fclose(f))
		return 2;
	int st = gc_machine_open(m, conf, attr, GC_NM, gc_o.kv_buckets);
	if (!st)
		st = gc_machine_join(m, GC_NM, 30000);
	char r = 'R';
	if (!st)
		st = gc_write_all(m->out, &r, 1) ? 7 : body(m, arg);
	gc_machine_close(m);
	return st;
}

/* Fork the machines; 0 once every one said it is ready. */
static inline int gc_start(struct gc_cluster *cl, const char *tag,
                           const struct fg_attr *attr, gc_body_fn body,
                           void *arg)
{
	memset(cl, 0, sizeof(*cl));
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(cl->root, sizeof(cl->root), "%s/fgraph-%s-XXXXXX", base, tag);
	if (!mkdtemp(cl->root))
		return -1;
	for (unsigned i = 0; i < GC_NM; i++) {
		char d[300];
		snprintf(d, sizeof(d), "%s/m%u", cl->root, i);
		if (mkdir(d, 0700))
			return -1;
		cl->to[i] = cl->from[i] = -1;
	}
	for (unsigned i = 0; i < GC_NM; i++) {
		int down[2], up[2];
		if (pipe(down) || pipe(up))
			return -1;
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0)
			return -1;
		if (pid == 0) {
			close(down[1]);
			close(up[0]);
			for (unsigned j = 0; j < i; j++) {
				close(cl->to[j]);
				close(cl->from[j]);
			}
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE,
			                    SIGABRT};
			for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]);
			     k++)
				signal(sigs[k], SIG_DFL);
			struct gc_machine m = {
			        .me = i, .in = down[0], .out = up[1], .cl = cl};
			_exit(gc_machine_main(&m, attr, body, arg));
		}
		close(down[0]);
		close(up[1]);
		cl->pid[i] = pid;
		cl->to[i] = down[1];
		cl->from[i] = up[0];
	}
	for (unsigned i = 0; i < GC_NM; i++) {
		char r = 0;
		if (gc_read_all(cl->from[i], &r, 1, 60000) || r != 'R') {
			fprintf(stderr, "machine %u did not start\n", i);
			return -1;
		}
	}
	return 0;
}

/* Close the pipes (the machines' cue to leave) and reap: exit statuses
 * (0 all well), then remove every file. */
static inline int gc_finish(struct gc_cluster *cl)
{
	int bad = 0;
	for (unsigned i = 0; i < GC_NM; i++) {
		if (cl->to[i] >= 0)
			close(cl->to[i]);
		cl->to[i] = -1;
	}
	for (unsigned i = 0; i < GC_NM; i++) {
		if (cl->pid[i] > 0) {
			int ws = 0;
			while (waitpid(cl->pid[i], &ws, 0) < 0 &&
			       errno == EINTR)
				;
			if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
				fprintf(stderr, "machine %u: status %#x\n", i,
				        ws);
				bad = -1;
			}
		}
		cl->pid[i] = 0;
		if (cl->from[i] >= 0)
			close(cl->from[i]);
		cl->from[i] = -1;
	}
	if (cl->root[0])
		nftw(cl->root, gc_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	cl->root[0] = 0;
	return bad;
}

/* After a failure: kill what is left, remove every file. */
static inline void gc_kill(struct gc_cluster *cl)
{
	for (unsigned i = 0; i < GC_NM; i++)
		if (cl->pid[i] > 0) {
			kill(cl->pid[i], SIGKILL);
			waitpid(cl->pid[i], NULL, 0);
			cl->pid[i] = 0;
		}
	gc_finish(cl);
}

/* For a test's teardown, also after a failed assertion: whatever is left
 * of the cluster @cl (started with gc_start, root not yet removed). */
static inline void gc_cleanup(struct gc_cluster *cl)
{
	if (cl->root[0])
		gc_kill(cl);
}

/* The cluster a test runs, and a teardown (a cmocka group or test
 * teardown) that removes what is left of it after a failed assertion. */
static struct gc_cluster *gc_live __attribute__((unused));

static inline int gc_teardown(void **state)
{
	(void)state;
	if (gc_live)
		gc_cleanup(gc_live);
	gc_live = NULL;
	return 0;
}

/* Machine side: serve the loop until a command of @len bytes arrives
 * (0), or the parent closed the pipe (1). */
static inline int gc_wait_cmd(struct gc_machine *m, void *cmd, size_t len)
{
	static const volatile int never = 0;
	for (;;) {
		struct pollfd pf = {.fd = m->in, .events = POLLIN};
		if (poll(&pf, 1, 0) > 0)
			return gc_read_all(m->in, cmd, len, 10000) ? 1 : 0;
		(void)farm_loop_wait(m->loop, &never, 1000000ull);
	}
}

#endif
