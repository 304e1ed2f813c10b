#include "nodeproc.h"

#include <stdlib.h>
#include <string.h>

unsigned np_nm = 3;

uint64_t np_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct np_cluster *np_other;

void np_close_pipes(const struct np_cluster *cl)
{
	for (uint32_t j = 0; cl && j < np_nm; j++) {
		if (cl->to[j] > 0)
			close(cl->to[j]);
		if (cl->from[j] > 0)
			close(cl->from[j]);
	}
}

void np_spawn_one(struct np_cluster *cl, uint32_t i, np_entry_fn entry,
                  void *arg)
{
	int down[2], up[2];
	assert_int_equal(pipe(down), 0);
	assert_int_equal(pipe(up), 0);
	pid_t pid = tu_fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(down[1]);
		close(up[0]);
		np_close_pipes(cl);
		if (np_other != cl)
			np_close_pipes(np_other);
		/* np_dump_stacks's gdb is this process's sibling, which
		 * Yama's ptrace_scope 1 refuses unless this process allows
		 * it (EINVAL without Yama: nothing to allow). */
		if (getenv("FARM_TEST_STALL_STACKS"))
			(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
		/* cmocka's handlers would run the parent's tests in this
		 * process. */
		const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
		for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++)
			signal(sigs[k], SIG_DFL);
		if (tn_active() && tn_enter_machine(i))
			_exit(12);
		struct np_child c = {
		        .me = i, .in = down[0], .out = up[1], .cl = cl};
		_exit(entry(&c, arg));
	}
	close(down[0]);
	close(up[1]);
	cl->pid[i] = pid;
	cl->to[i] = down[1];
	cl->from[i] = up[0];
}

void np_spawn(struct np_cluster *cl, np_entry_fn entry, void *arg)
{
	for (uint32_t i = 0; i < np_nm; i++)
		cl->to[i] = cl->from[i] = -1;
	for (uint32_t i = 0; i < np_nm; i++)
		np_spawn_one(cl, i, entry, arg);
}

void np_start(struct np_cluster *cl, const char *tag, np_entry_fn entry,
              void *arg)
{
	memset(cl, 0, sizeof(*cl));
	tn_require(np_nm);
	tu_tmpdir(cl->root, sizeof(cl->root), tag);
	/* A copy: with np_nm a variable, GCC cannot see that cl->dir[i]
	 * never reaches cl->root (-Wrestrict under the sanitizers). */
	char root[sizeof(cl->root)];
	memcpy(root, cl->root, sizeof(root));
	for (uint32_t i = 0; i < np_nm; i++) {
		snprintf(cl->dir[i], sizeof(cl->dir[i]), "%s/m%u", root, i);
		assert_int_equal(mkdir(cl->dir[i], 0700), 0);
		cl->to[i] = cl->from[i] = -1;
	}
	np_spawn(cl, entry, arg);
}

/*
 * A bound here detects a machine that hung or died, never how fast it
 * answers: a loaded host (two cores shared with sanitizer builds and
 * other spinning tests) can hold a child off the CPU for over a second
 * between its tag byte and the payload it writes right after. So no
 * wait is shorter than NP_MIN_WAIT_MS, whatever the caller asked.
 */
#define NP_MIN_WAIT_MS 20000

/* FARM_TEST_STALL_STACKS=1: a machine that did not answer within its
 * bound has every thread's stack printed (gdb, attached from here)
 * before the test fails, so that a stall says where it waited. */
static void np_dump_stacks(pid_t pid)
{
	if (!getenv("FARM_TEST_STALL_STACKS") || pid <= 0)
		return;
	char cmd[160];
	snprintf(cmd, sizeof(cmd),
	         "gdb -p %d -batch -ex 'thread apply all bt' 1>&2 2>/dev/null",
	         (int)pid);
	fflush(NULL);
	if (system(cmd) != 0)
		fprintf(stderr, "np: no stacks of process %d\n", (int)pid);
}

void np_recv(struct np_cluster *cl, unsigned i, void *buf, size_t len, int ms)
{
	if (ms < NP_MIN_WAIT_MS)
		ms = NP_MIN_WAIT_MS;
	uint64_t dl = np_now_ns() + (uint64_t)ms * 1000000ull;
	char *p = buf;
	while (len) {
		int left = (int)((dl - FARM_MIN(dl, np_now_ns())) / 1000000ull);
		struct pollfd pf = {.fd = cl->from[i], .events = POLLIN};
		int r = poll(&pf, 1, left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			np_dump_stacks(cl->pid[i]);
			fail_msg("machine %u: nothing within %d ms", i, ms);
		}
		ssize_t n = read(cl->from[i], p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail_msg("machine %u went away", i);
		p += n;
		len -= (size_t)n;
	}
}

void np_expect(struct np_cluster *cl, unsigned i, char want, int ms)
{
	char b = 0;
	np_recv(cl, i, &b, 1, ms);
	if (b != want)
		fail_msg("machine %u said '%c', expected '%c'", i, b, want);
}

void np_send(struct np_cluster *cl, unsigned i, char cmd)
{
	assert_int_equal(tu_send(cl->to[i], &cmd, 1), 0);
}

void np_finish(struct np_cluster *cl, int *st)
{
	for (unsigned i = 0; i < np_nm; i++) {
		if (cl->to[i] >= 0)
			close(cl->to[i]);
		cl->to[i] = -1;
	}
	for (unsigned i = 0; i < np_nm; i++) {
		st[i] = cl->pid[i] > 0 ? tu_reap(cl->pid[i]) : 0;
		cl->pid[i] = 0;
		if (cl->from[i] >= 0)
			close(cl->from[i]);
		cl->from[i] = -1;
	}
}

void np_quit_all(struct np_cluster *cl)
{
	int st[NP_MAX];
	for (unsigned i = 0; i < np_nm; i++)
		np_send(cl, i, 'Q');
	np_finish(cl, st);
	for (unsigned i = 0; i < np_nm; i++)
		if (st[i])
			fail_msg("machine %u exited %d", i, st[i]);
}

void np_reap_killed(struct np_cluster *cl, unsigned i)
{
	int st = tu_reap(cl->pid[i]);
	assert_int_equal(st, 128 + SIGKILL);
	cl->pid[i] = 0;
	close(cl->to[i]);
	close(cl->from[i]);
	cl->to[i] = cl->from[i] = -1;
}

void np_pause_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

void np_cleanup(struct np_cluster *cl)
{
	for (unsigned i = 0; i < np_nm; i++)
		if (cl->pid[i] > 0) {
			kill(cl->pid[i], SIGKILL);
			tu_reap(cl->pid[i]);
			cl->pid[i] = 0;
		}
	for (unsigned i = 0; i < np_nm; i++) {
		if (cl->to[i] > 0)
			close(cl->to[i]);
		if (cl->from[i] > 0)
			close(cl->from[i]);
		cl->to[i] = cl->from[i] = -1;
	}
	if (cl->root[0])
		tu_rmtree(cl->root);
	cl->root[0] = 0;
}

int np_config_netns(const struct np_child *c, struct farm_config *cfg)
{
	char ip[64];
	const char *zk = getenv("FARM_NETNS_ZK");
	if (tn_addr(c->me, ip, sizeof(ip)) || !zk || !*zk) {
		fprintf(stderr, "m%u: netns: no address or no FARM_NETNS_ZK\n",
		        c->me);
		return 3;
	}
	snprintf(cfg->listen, sizeof(cfg->listen), "%s:0", ip);
	snprintf(cfg->lease_bind, sizeof(cfg->lease_bind), "%s", ip);
	snprintf(cfg->zk, sizeof(cfg->zk), "%s", zk);
	const char *base = strrchr(c->cl->root, '/');
	snprintf(cfg->zk_root, sizeof(cfg->zk_root), "/libfarm/netns-%.200s",
	         base ? base + 1 : c->cl->root);
	cfg->lease_us = NP_NETNS_LEASE_US;
	cfg->npeers = 0;
	return 0;
}

int np_config(const struct np_child *c, const char *rsize,
              struct farm_config *cfg)
{
	farm_config_defaults(cfg);
	cfg->machine_id = c->me;
	cfg->has_machine_id = true;
	snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s", c->cl->dir[c->me]);
	if (farm_parse_size(rsize, &cfg->region_size))
		return 2;
	cfg->threads = 1;
	for (uint32_t i = 0; i < np_nm; i++) {
		if (i == c->me)
			continue;
		cfg->peers[cfg->npeers].id = i;
		snprintf(cfg->peers[cfg->npeers].addr,
		         sizeof(cfg->peers[cfg->npeers].addr), "%s",
		         c->cl->dir[i]);
		cfg->npeers++;
	}
	if (tn_active() && np_config_netns(c, cfg))
		return 3;
	char err[256];
	/* The KV store's lookup path (read, owner, auto), as a machine's
	 * FARM_KV_LOOKUP would set it: the KV tests run on either. */
	const char *lk = getenv("FARM_KV_LOOKUP");
	if (lk && *lk &&
	    farm_config_set(cfg, "kv_lookup", lk, err, sizeof(err))) {
		fprintf(stderr, "m%u: FARM_KV_LOOKUP: %s\n", c->me, err);
		return 3;
	}
	if (farm_config_validate(cfg, err, sizeof(err))) {
		fprintf(stderr, "m%u: config: %s\n", c->me, err);
		return 3;
	}
	return 0;
}

int np_config_zk(const struct np_child *c, const char *rsize, const char *zk,
                 const char *root, uint32_t session_ms, uint32_t lease_us,
                 struct farm_config *cfg)
{
	int rc = np_config(c, rsize, cfg);
	if (rc)
		return rc;
	cfg->npeers = 0;
	snprintf(cfg->zk, sizeof(cfg->zk), "%s", zk);
	snprintf(cfg->zk_root, sizeof(cfg->zk_root), "%s", root);
	cfg->zk_session_ms = session_ms;
	cfg->lease_us = lease_us;
	/* A cold ZooKeeper on a loaded 2-core host took over 5 s to let
	 * machines join (make check at load 16). */
	cfg->zk_connect_timeout_ms = 30000;
	return 0;
}

int np_check_netns(struct np_child *c)
{
	struct farm_view *v = malloc(sizeof(*v));
	int rc = v && farm_node_view(c->node, v) == 0 ? 0 : -1;
	for (unsigned i = 0; v && !rc && i < v->n; i++) {
		char addr[FARM_ENDPOINT_MAX], ip[64];
		farm_mr_desc d, l;
		const struct farm_member *m = &v->members[i];
		if (farm_node_card_parse(m->endpoint, addr, sizeof(addr), &d,
		                         &l) ||
		    tn_addr(m->id, ip, sizeof(ip)) ||
		    strncmp(addr, ip, strlen(ip)) != 0 ||
		    addr[strlen(ip)] != ':') {
			fprintf(stderr,
			        "m%u: machine %u's card '%s' is not on its "
			        "namespace's network\n",
			        c->me, m->id, m->endpoint);
			rc = -1;
		} else if (c->me == 0) {
			printf("netns: machine %u at %s\n", m->id, addr);
		}
	}
	fflush(stdout);
	free(v);
	return rc;
}

int np_ready(struct np_child *c)
{
	if (tn_active() && c->node && np_check_netns(c))
		return -1;
	c->rng = np_now_ns() ^ ((uint64_t)c->me << 40) ^ 0x9e3779b97f4a7c15ull;
	char b = 'R';
	return tu_send(c->out, &b, 1);
}

int np_poll_cmd(struct np_child *c)
{
	struct pollfd pf = {.fd = c->in, .events = POLLIN};
	if (poll(&pf, 1, 0) <= 0)
		return 0;
	char b;
	ssize_t n = read(c->in, &b, 1);
	return n == 1 ? b : -1;
}

int np_wait_cmd(struct np_child *c)
{
	static const volatile int never = 0;
	for (;;) {
		int b = np_poll_cmd(c);
		if (b)
			return b;
		(void)farm_loop_wait(c->loop, &never, 1000000ull);
	}
}

int np_await_member(farm_node *node, farm_loop *loop, uint32_t id, int ms)
{
	static const volatile int never = 0;
	struct farm_view *v = malloc(sizeof(*v));
	if (!v)
		return -ENOMEM;
	int rc = -ETIMEDOUT;
	for (uint64_t dl = np_now_ns() + (uint64_t)ms * 1000000ull;
	     rc == -ETIMEDOUT && np_now_ns() < dl;) {
		if (!farm_node_view(node, v) && farm_view_find(v, id))
			rc = 0;
		else if (farm_node_refused(node))
			rc = -EEXIST;
		else
			(void)farm_loop_wait(loop, &never, 10000000ull);
	}
	free(v);
	return rc;
}

int np_say(struct np_child *c, char b, const void *data, size_t len)
{
	if (tu_send(c->out, &b, 1))
		return -1;
	return len ? tu_send(c->out, data, len) : 0;
}

int np_write_file(const char *path, const void *buf, size_t len)
{
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	size_t n = len ? fwrite(buf, 1, len, f) : 0;
	if (fclose(f) || n != len || rename(tmp, path))
		return -1;
	return 0;
}

void *np_read_file(const char *path, size_t *len)
{
	*len = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	void *buf = malloc(n > 0 ? (size_t)n : 1);
	if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = n > 0 ? (size_t)n : 0;
	return buf;
}
