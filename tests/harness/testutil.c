#include "testutil.h"

#include <sys/prctl.h>

const char *tu_provider(void)
{
	const char *p = getenv("FARM_FABRIC");
	return p && *p ? p : "shm";
}

bool tu_is_shm(void)
{
	return strcmp(tu_provider(), "shm") == 0;
}

int tu_unreachable(void)
{
	return strcmp(tu_provider(), "udp") ? -ECONNREFUSED : -ETIMEDOUT;
}

void tu_require_provider(void)
{
	if (!farm_fabric_provider_available(tu_provider())) {
		printf("SKIPPED: fabric provider '%s' was not built\n",
		       tu_provider());
		exit(FARM_TEST_SKIP);
	}
}

char tu_lossy_log[256];

bool tu_lossy_begin(void)
{
	const char *h = getenv("FARM_UDP_HOOKS");
	int drop = 0;
	/* "drop,dup,reorder" per mille: with no drop by the hooks (the
	 * netns tests drop with nftables and only duplicate and reorder
	 * here) the hooks' tally proves nothing. */
	if (!h || !*h || sscanf(h, "%d", &drop) != 1 || drop <= 0)
		return false;
	if (!farm_fault_built()) {
		printf("SKIPPED: FARM_UDP_HOOKS needs fault injection "
		       "(FARM_FAULT_INJECTION=OFF): no packet would be lost\n");
		exit(FARM_TEST_SKIP);
	}
	snprintf(tu_lossy_log, sizeof(tu_lossy_log),
	         "/tmp/farm-udp-hooks-%d.log", (int)getpid());
	unlink(tu_lossy_log);
	setenv("FARM_UDP_HOOKS_LOG", tu_lossy_log, 1);
	return true;
}

unsigned long long tu_lossy_dropped(void)
{
	unsigned long long sum = 0, v;
	FILE *fp = fopen(tu_lossy_log, "r");
	if (!fp)
		return 0;
	while (fscanf(fp, "%llu", &v) == 1)
		sum += v;
	fclose(fp);
	unlink(tu_lossy_log);
	return sum;
}

int tu_lossy_end(bool lossy, int rc)
{
	if (!lossy || rc)
		return rc;
	unsigned long long d = tu_lossy_dropped();
	printf("lossy: the udp hooks dropped %llu packets\n", d);
	if (d == 0) {
		fprintf(stderr, "FARM_UDP_HOOKS set but no packet was dropped: "
		                "the run was not lossy\n");
		return 1;
	}
	return rc;
}

farm_fabric *tu_open(uint32_t id, const char *dir)
{
	farm_fabric_attr a = {.provider = tu_provider(),
	                      .machine_id = id,
	                      .data_dir = dir,
	                      .listen_addr =
	                              tu_is_shm() ? NULL : "127.0.0.1:0"};
	farm_fabric *f = NULL;
	int rc = farm_fabric_open(&a, &f);
	if (rc) {
		fprintf(stderr, "farm_fabric_open(%s, %s): %s\n", a.provider,
		        dir, farm_strerror(rc));
		return NULL;
	}
	return f;
}

int tu_wait_wc(farm_cq *cq, farm_wc *wc, unsigned timeout_ms)
{
	uint64_t deadline = farm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		int n = farm_cq_poll(cq, 1, wc);
		if (n == 1)
			return 1;
		if (n < 0 || farm_now_ns() > deadline)
			return 0;
		farm_cpu_relax();
	}
}

int tu_do(farm_ep *ep, farm_cq *cq, farm_wr wr)
{
	wr.flags |= FARM_WR_SIGNALED;
	wr.next = NULL;
	int rc = farm_ep_post(ep, &wr, NULL);
	if (rc)
		return rc;
	farm_wc wc;
	if (!tu_wait_wc(cq, &wc, 5000))
		return -ETIMEDOUT;
	if (wc.wr_id != wr.wr_id)
		return -EPROTO;
	return wc.status;
}

int tu_send(int fd, const void *buf, size_t len)
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

int tu_recv(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len) {
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

int tu_reap(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tu_stop(pid_t pid)
{
	if (kill(pid, SIGSTOP))
		return -1;
	int st;
	for (;;) {
		if (waitpid(pid, &st, WUNTRACED) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (WIFSTOPPED(st))
			return 0;
		if (WIFEXITED(st) || WIFSIGNALED(st))
			return -1;
	}
}

int tu_zk_local(const char *script, const char *verb, const char *dir,
                char *line, size_t len)
{
	return zkl_run(NULL, script, verb, dir, line, len);
}

int tu_zk_start_n(const char *script, char *dir, size_t dlen, unsigned nservers,
                  char *connect, size_t clen)
{
	tu_tmpdir(dir, dlen, nservers ? "zkens" : "zk");
	char n[16];
	snprintf(n, sizeof(n), "%u", nservers);
	int st = nservers ? zkl_run_arg(NULL, script, "start-ensemble", dir, n,
	                                connect, clen)
	                  : tu_zk_local(script, "start", dir, connect, clen);
	if (st == 0)
		return 0;
	if (st == 3) {
		printf("skipped: java or the ZooKeeper jars are not installed "
		       "(apt-get install zookeeper)\n");
	} else {
		fprintf(stderr, "zk-local start failed (%d); log:\n", st);
		char cmd[400];
		snprintf(cmd, sizeof(cmd),
		         nservers ? "tail -n 20 '%s'/*/zk.log >&2"
		                  : "cat '%s/zk.log' >&2",
		         dir);
		if (system(cmd) != 0)
			fprintf(stderr, "(no log)\n");
		tu_zk_local(script, nservers ? "stop-ensemble" : "stop", dir,
		            NULL, 0);
	}
	tu_rmtree(dir);
	return st == 3 ? FARM_TEST_SKIP : 1;
}

int tu_zk_start(const char *script, char *dir, size_t dlen, char *connect,
                size_t clen)
{
	return tu_zk_start_n(script, dir, dlen, 0, connect, clen);
}

void tu_zk_stop_n(const char *script, const char *dir, unsigned nservers)
{
	if (tu_zk_local(script, nservers ? "stop-ensemble" : "stop", dir, NULL,
	                0) != 0)
		fprintf(stderr, "zk-local stop failed\n");
	tu_rmtree(dir);
}

void tu_zk_stop(const char *script, const char *dir)
{
	tu_zk_stop_n(script, dir, 0);
}

int tu_zk_member(const char *script, const char *dir, unsigned k,
                 const char *verb, char *line, size_t len)
{
	return zkl_member(script, verb, dir, k, line, len);
}

int tu_zk_run_n(const char *script, char *dir, size_t dlen, unsigned nservers,
                char *connect, size_t clen, const char *name,
                const struct CMUnitTest *tests, size_t n)
{
#ifndef FARM_HAVE_ZK
	(void)script, (void)dir, (void)dlen, (void)nservers, (void)connect;
	(void)clen, (void)name, (void)tests, (void)n;
	printf("skipped: libfarm built without the ZooKeeper client\n");
	return FARM_TEST_SKIP;
#else
	/* FARM_TEST_ONLY: run only the tests whose names match (cmocka's
	 * pattern: * and ?), for the fault campaign (fault_campaign.sh). */
	const char *only = getenv("FARM_TEST_ONLY");
	if (only && *only)
		cmocka_set_test_filter(only);
	uint64_t t0 = farm_now_ns();
	int st = tu_zk_start_n(script, dir, dlen, nservers, connect, clen);
	if (st)
		return st;
	if (nservers)
		printf("zk-local: an ensemble of %u servers (%s) served %.0f "
		       "ms after its start\n",
		       nservers, connect, (double)(farm_now_ns() - t0) / 1e6);
	int rc = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
	tu_zk_stop_n(script, dir, nservers);
	return rc;
#endif
}

int tu_zk_run(const char *script, char *dir, size_t dlen, char *connect,
              size_t clen, const char *name, const struct CMUnitTest *tests,
              size_t n)
{
	return tu_zk_run_n(script, dir, dlen, 0, connect, clen, name, tests, n);
}

uint64_t tu_errs_add(struct tu_errs *e, int rc)
{
	unsigned i = 0;
	while (i < TU_NERR && e->n[i] && e->err[i] != rc)
		i++;
	if (i < TU_NERR) {
		e->err[i] = rc;
		e->n[i]++;
	}
	uint64_t all = 0;
	for (i = 0; i < TU_NERR; i++)
		all += e->n[i];
	return all;
}

const char *tu_errs_str(const struct tu_errs *e, char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = 0;
	for (unsigned i = 0; i < TU_NERR && e->n[i] && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s x %llu",
		                      i ? ", " : "", farm_strerror(e->err[i]),
		                      (unsigned long long)e->n[i]);
	return buf[0] ? buf : "none";
}

void failed(struct fails *f, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (f->len < sizeof(f->text) - 2) {
		f->len += (size_t)snprintf(f->text + f->len,
		                           sizeof(f->text) - f->len, "  - ");
		f->len += (size_t)vsnprintf(f->text + f->len,
		                            sizeof(f->text) - f->len, fmt, ap);
		f->len += (size_t)snprintf(f->text + f->len,
		                           sizeof(f->text) - f->len, "\n");
		f->len = FARM_MIN(f->len, sizeof(f->text) - 1);
	}
	va_end(ap);
	f->n++;
}

pid_t tu_fork(void)
{
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	/* The parent may have died before the prctl: then it never fires. */
	if (pid == 0 &&
	    (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent))
		_exit(1);
	return pid;
}

int tu_spawn(struct tu_machine *m, uint32_t id, uint64_t rsize,
             tu_machine_fn fn, void *arg)
{
	int down[2], up[2];
	memset(m, 0, sizeof(*m));
	m->id = id;
	char tag[32];
	snprintf(tag, sizeof(tag), "m%u", id);
	tu_tmpdir(m->dir, sizeof(m->dir), tag);
	if (pipe(down) || pipe(up))
		return -errno;
	pid_t pid = tu_fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(down[1]);
		close(up[0]);
		int st = 1;
		farm_fabric *fab = tu_open(id, m->dir);
		farm_region *r = NULL;
		if (fab && farm_region_create(fab, rsize, &r) == 0) {
			char addr[256] = {0};
			farm_mr_desc d = farm_region_desc(r);
			if (farm_fabric_address(fab, addr, sizeof(addr)) > 0 &&
			    tu_send(up[1], addr, sizeof(addr)) == 0 &&
			    tu_send(up[1], &d, sizeof(d)) == 0) {
				if (fn) {
					st = fn(fab, r, down[0], up[1], arg);
				} else {
					char b;
					while (read(down[0], &b, 1) > 0)
						;
					st = 0;
				}
			}
		}
		farm_region_destroy(r);
		if (fab)
			farm_fabric_close(fab);
		_exit(st);
	}
	close(down[0]);
	close(up[1]);
	m->pid = pid;
	m->to = down[1];
	m->from = up[0];
	if (tu_recv(m->from, m->addr, sizeof(m->addr)) ||
	    tu_recv(m->from, &m->desc, sizeof(m->desc)))
		return -ECHILD;
	return 0;
}

int tu_finish(struct tu_machine *m)
{
	if (m->to >= 0)
		close(m->to);
	m->to = -1;
	int st = m->pid > 0 ? tu_reap(m->pid) : 0;
	m->pid = 0;
	if (m->from >= 0)
		close(m->from);
	m->from = -1;
	tu_rmtree(m->dir);
	return st;
}
