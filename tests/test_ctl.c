/*
 * A machine's control socket (src/node/ctl.h) on one in-process machine
 * with a KV store:
 *
 *   stats       the text answer parses ("# machine" line, then unique
 *               "<section>.<name> <value>" lines), and the counters this
 *               test caused have its values (ht.puts, kv.mget_calls,
 *               kv.mget_keys, node.*, addrspace.regions_*);
 *   prometheus  the exposition answer follows the text format (HELP, TYPE,
 *               one sample per family with the machine label, counters
 *               named *_total) and names the same counters with the same
 *               values where they cannot move;
 *   bad input   binary, too long, two lines, empty, unknown, silent
 *               clients each get one "error" line, are counted exactly
 *               in ctl.bad_requests, and the socket serves on;
 *   regions     the answer lists what farm_as_held lists;
 *   remove      a counter source removed while an answer calls it: the
 *               removal waits for the answer (the source is never called
 *               after farm_ctl_remove returned). --broken removes without
 *               the lock (a testing switch of fault-injection builds), and
 *               the test must then see the source called after removal.
 *   lifetime    the socket is gone when the node closes; a stale socket
 *               file (a killed machine's) is replaced at the next open.
 *   cut off     a machine that closes the connection with no answer, or
 *               with its last line unfinished (it exited or crashed
 *               mid-answer), is an error to the client (-ECONNRESET, no
 *               answer), not an empty answer.
 */
#include "testutil.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "addrspace/addrspace.h"
#include "kv/kv.h"
#include "node/ctl.h"
#include "node/node.h"
#include "util/fault.h"

#define PUTS  20
#define MGETN 10

static bool broken;

struct fixture {
	char dir[256];
	farm_node *node;
	farm_loop *loop;
	farm_kv *kv;
};

static struct fixture fx;

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	tu_tmpdir(fx.dir, sizeof(fx.dir), "ctl");
	struct farm_config cfg;
	farm_config_defaults(&cfg);
	cfg.machine_id = 0;
	cfg.has_machine_id = true;
	snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", fx.dir);
	cfg.region_size = 16u << 20;
	cfg.threads = 1;
	char err[256];
	assert_int_equal(farm_config_validate(&cfg, err, sizeof(err)), 0);
	assert_int_equal(farm_node_open(&cfg, &fx.node), 0);
	assert_int_equal(farm_kv_create(fx.node, NULL, 256, &fx.kv), 0);
	farm_node_set_app_loops(fx.node, true);
	assert_int_equal(farm_node_start(fx.node, 10000), 0);
	assert_int_equal(farm_node_loop_open(fx.node, 0, &fx.loop), 0);
	assert_int_equal(farm_node_wait_members(fx.node, 1, 10000), 0);
	assert_int_equal(farm_kv_attach(fx.kv, fx.loop), 0);
	assert_int_equal(farm_kv_join_sync(fx.kv, fx.loop, 1, 10000), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.loop) {
		farm_kv_detach(fx.kv, fx.loop);
		farm_node_loop_close(fx.node, fx.loop);
	}
	farm_node_close(fx.node);
	farm_kv_destroy(fx.kv);
	tu_rmtree(fx.dir);
	return 0;
}

static char *ask(const char *req, int want)
{
	char *reply = NULL;
	int rc = farm_ctl_request(fx.dir, req, &reply, NULL, 5000);
	if (rc != want)
		fail_msg("'%s': %s (answer: %s)", req, farm_strerror(rc),
		         reply ? reply : "none");
	assert_non_null(reply);
	return reply;
}

/* ---- the text answer --------------------------------------------------- */

struct kv_line {
	char name[96];
	uint64_t value;
};

/* Parse a text answer: its header's machine and configuration, its
 * counters (unique, well formed). Returns how many. */
static unsigned parse_text(char *text, struct kv_line *out, unsigned max,
                           uint64_t *config)
{
	unsigned n = 0, line = 0;
	char fabric[32];
	uint32_t machine;
	for (char *save, *l = strtok_r(text, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save), line++) {
		if (line == 0) {
			assert_int_equal(sscanf(l,
			                        "# machine %" SCNu32
			                        ", configuration %" SCNu64
			                        ", fabric %31s",
			                        &machine, config, fabric),
			                 3);
			assert_int_equal(machine, 0);
			assert_string_equal(fabric, tu_provider());
			continue;
		}
		assert_true(n < max);
		char *sp = strchr(l, ' ');
		assert_non_null(sp);
		size_t nl = (size_t)(sp - l);
		assert_true(nl > 0 && nl < sizeof(out[n].name));
		bool dot = false;
		for (size_t i = 0; i < nl; i++) {
			if (l[i] == '.') {
				assert_false(dot); /* one section */
				assert_true(i > 0 && i + 1 < nl);
				dot = true;
				continue;
			}
			assert_true(islower((unsigned char)l[i]) ||
			            isdigit((unsigned char)l[i]) ||
			            l[i] == '_');
		}
		assert_true(dot);
		memcpy(out[n].name, l, nl);
		out[n].name[nl] = 0;
		char *e;
		assert_true(isdigit((unsigned char)sp[1]));
		out[n].value = strtoull(sp + 1, &e, 10);
		assert_int_equal(*e, 0);
		for (unsigned k = 0; k < n; k++)
			if (!strcmp(out[k].name, out[n].name))
				fail_msg("%s twice", out[n].name);
		n++;
	}
	return n;
}

static uint64_t value_of(const struct kv_line *l, unsigned n, const char *name)
{
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(l[i].name, name))
			return l[i].value;
	fail_msg("no counter %s", name);
	return 0;
}

static void do_ops(void)
{
	char key[16], val[32];
	const void *keys[MGETN];
	uint32_t klens[MGETN];
	static char kbuf[MGETN][16];
	for (unsigned i = 0; i < PUTS; i++) {
		snprintf(key, sizeof(key), "key-%u", i);
		snprintf(val, sizeof(val), "value-%u", i);
		assert_int_equal(farm_kv_put_sync(fx.kv, fx.loop, key,
		                                  (uint32_t)strlen(key), val,
		                                  (uint32_t)strlen(val)),
		                 0);
	}
	for (unsigned i = 0; i < MGETN; i++) {
		snprintf(kbuf[i], sizeof(kbuf[i]), "key-%u", i * 3);
		keys[i] = kbuf[i];
		klens[i] = (uint32_t)strlen(kbuf[i]);
	}
	static char vals[MGETN][64];
	uint32_t lens[MGETN];
	int st[MGETN];
	assert_int_equal(farm_kv_mget_sync(fx.kv, fx.loop, MGETN, keys, klens,
	                                   vals, 64, lens, st),
	                 0);
	for (unsigned i = 0; i < MGETN; i++)
		assert_int_equal(st[i], i * 3 < PUTS ? 0 : -ENOENT);
}

static struct kv_line lines[512];

static void test_stats_text(void **state)
{
	(void)state;
	char *r = ask("stats", 0);
	uint64_t config;
	unsigned n0 = parse_text(r, lines, 512, &config);
	free(r);
	uint64_t puts0 = value_of(lines, n0, "ht.puts");
	uint64_t calls0 = value_of(lines, n0, "kv.mget_calls");
	uint64_t keys0 = value_of(lines, n0, "kv.mget_keys");
	do_ops();
	r = ask("stats", 0);
	unsigned n = parse_text(r, lines, 512, &config);
	free(r);
	assert_int_equal(n, n0);
	assert_int_equal(value_of(lines, n, "ht.puts") - puts0, PUTS);
	assert_int_equal(value_of(lines, n, "kv.mget_calls") - calls0, 1);
	assert_int_equal(value_of(lines, n, "kv.mget_keys") - keys0, MGETN);
	struct farm_as_stats as;
	farm_as_stats_get(farm_node_as(fx.node), &as);
	assert_int_equal(value_of(lines, n, "addrspace.regions_primary"),
	                 as.regions_primary);
	assert_true(as.regions_primary > 0); /* the shard, at least */
	assert_int_equal(value_of(lines, n, "node.config_id"), config);
	assert_int_equal(config, farm_node_config_id(fx.node));
	assert_int_equal(value_of(lines, n, "node.members"), 1);
	assert_int_equal(value_of(lines, n, "node.threads"), 1);
	farm_txm_stats ts;
	farm_txm_stats_get(farm_node_txm(fx.node), &ts);
	assert_int_equal(value_of(lines, n, "txn.commits"), ts.commits);
	printf("stats: %u counters; %" PRIu64 " commits for %d puts\n", n,
	       ts.commits, PUTS);
}

/* ---- the Prometheus answer --------------------------------------------- */

static bool metric_name(const char *s, size_t n)
{
	if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != ':')
			return false;
	return true;
}

static void test_stats_prometheus(void **state)
{
	(void)state;
	char *t = ask("stats", 0);
	uint64_t config;
	unsigned nt = parse_text(t, lines, 512, &config);
	free(t);
	char *r = ask("stats prometheus", 0);
	char help[128] = "", type[128] = "", kind[16] = "";
	unsigned samples = 0, matched = 0;
	for (char *save, *l = strtok_r(r, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(l, "# HELP ", 7)) {
			char *sp = strchr(l + 7, ' ');
			assert_non_null(sp);
			assert_true(metric_name(l + 7, (size_t)(sp - l - 7)));
			assert_true(strlen(sp + 1) > 0); /* it says what */
			snprintf(help, sizeof(help), "%.*s", (int)(sp - l - 7),
			         l + 7);
			type[0] = 0;
			continue;
		}
		if (!strncmp(l, "# TYPE ", 7)) {
			assert_int_equal(
			        sscanf(l + 7, "%127s %15s", type, kind), 2);
			assert_string_equal(type, help);
			assert_true(!strcmp(kind, "counter") ||
			            !strcmp(kind, "gauge"));
			continue;
		}
		assert_true(l[0] != '#');
		/* name{machine="0"...} value, after its HELP and TYPE */
		char *brace = strchr(l, '{');
		assert_non_null(brace);
		size_t nl = (size_t)(brace - l);
		assert_true(metric_name(l, nl));
		assert_true(type[0]);
		assert_int_equal(strlen(type), nl);
		assert_memory_equal(l, type, nl);
		assert_true(!strncmp(brace, "{machine=\"0\"", 12));
		char *close = strchr(brace, '}');
		assert_non_null(close);
		assert_int_equal(close[1], ' ');
		char *e;
		double v = strtod(close + 2, &e);
		assert_int_equal(*e, 0);
		bool counter = !strcmp(kind, "counter");
		if (counter)
			assert_true(nl > 6 && !memcmp(l + nl - 6, "_total", 6));
		type[0] = 0; /* one sample per family */
		samples++;
		/* The same counter in the text answer: farm_<section>_<name>
		 * [_total]; equal where it cannot have moved. */
		if (!strncmp(l, "farm_machine_info", nl))
			continue;
		char name[128];
		snprintf(name, sizeof(name), "%.*s",
		         (int)(nl - 5 - (counter ? 6 : 0)), l + 5);
		bool found = false;
		for (unsigned i = 0; i < nt && !found; i++) {
			char flat[128];
			assert_true(snprintf(flat, sizeof(flat), "%s",
			                     lines[i].name) <
			            (int)sizeof(flat));
			*strchr(flat, '.') = '_';
			if (strcmp(flat, name))
				continue;
			found = true;
			if (!strncmp(name, "ht_", 3) ||
			    !strncmp(name, "kv_", 3) ||
			    !strncmp(name, "node_", 5))
				assert_true(v == (double)lines[i].value);
		}
		if (!found)
			fail_msg("%.*s is not in the text answer", (int)nl, l);
		matched++;
	}
	free(r);
	assert_int_equal(matched, nt);
	assert_int_equal(samples, nt + 1);
	printf("prometheus: %u families, each with HELP, TYPE and one "
	       "sample\n",
	       samples);
}

/* ---- bad input --------------------------------------------------------- */

/* Send @data raw (@shut: then end the request side) and read the answer
 * until the machine closes. */
static char *raw(const void *data, size_t len, bool shut)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	assert_true(snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", fx.dir,
	                     FARM_CTL_SOCKET) < (int)sizeof(a.sun_path));
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	if (len)
		assert_int_equal(send(fd, data, len, MSG_NOSIGNAL),
		                 (ssize_t)len);
	if (shut)
		shutdown(fd, SHUT_WR);
	static char buf[4096];
	size_t n = 0;
	ssize_t r;
	while ((r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = 0;
	return buf;
}

static void test_bad_input(void **state)
{
	(void)state;
	char *t = ask("stats", 0);
	uint64_t config;
	unsigned n = parse_text(t, lines, 512, &config);
	free(t);
	uint64_t bad0 = value_of(lines, n, "ctl.bad_requests");
	uint64_t req0 = value_of(lines, n, "ctl.requests");
	char longreq[300];
	memset(longreq, 'x', sizeof(longreq));
	longreq[sizeof(longreq) - 1] = '\n';
	static const char bin[] = {'\x01', '\xff', 's', '\0', 't', '\n'};
	struct {
		const void *data;
		size_t len;
		bool shut;
		const char *answer;
	} cases[] = {
	        {bin, sizeof(bin), true,
	         "error the request is not printable text\n"},
	        {longreq, sizeof(longreq), true,
	         "error request longer than 128 bytes\n"},
	        {"stats\nregions\n", 14, true, "error more than one line\n"},
	        {"\n", 1, true, "error empty request\n"},
	        {"", 0, true, "error empty request\n"},
	        {"stats json\n", 11, true,
	         "error unknown request (try help)\n"},
	        {"STATS\n", 6, true, "error unknown request (try help)\n"},
	        /* Connects, says nothing, keeps the connection: 1 s. */
	        {"", 0, false, "error no request within 1 s\n"},
	};
	unsigned nc = sizeof(cases) / sizeof(cases[0]);
	for (unsigned i = 0; i < nc; i++) {
		const char *a = raw(cases[i].data, cases[i].len, cases[i].shut);
		if (strcmp(a, cases[i].answer))
			fail_msg("case %u: '%s', expected '%s'", i, a,
			         cases[i].answer);
	}
	/* A client may end its line with \r\n, or with the connection. */
	assert_true(!strncmp(raw("help\r\n", 6, true), "stats ", 6));
	assert_true(!strncmp(raw("regions", 7, true), "machine 0\n", 10));
	/* The client library refuses a request with a newline. */
	char *reply = NULL;
	assert_int_equal(farm_ctl_request(fx.dir, "a\nb", &reply, NULL, 1000),
	                 -EINVAL);
	/* An error answer reaches the library's caller as -EPROTO. */
	free(ask("nonsense", -EPROTO));
	t = ask("stats", 0);
	n = parse_text(t, lines, 512, &config);
	free(t);
	/* Counted before this answer: nc bad ones, the nonsense, and the
	 * good ones (help, regions, the first stats). */
	assert_int_equal(value_of(lines, n, "ctl.bad_requests") - bad0, nc + 1);
	assert_int_equal(value_of(lines, n, "ctl.requests") - req0, nc + 4);
}

static void test_regions(void **state)
{
	(void)state;
	farm_as *as = farm_node_as(fx.node);
	struct farm_as_held h[64];
	unsigned n = farm_as_held(as, h, 64);
	assert_true(n > 0 && n <= 64);
	char *r = ask("regions", 0);
	char want[4096];
	int len = snprintf(want, sizeof(want),
	                   "machine 0\nconfiguration %" PRIu64 "\nregions %u\n",
	                   farm_node_config_id(fx.node), n);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(h[i].role, FARM_AS_PRIMARY);
		if (i)
			assert_true(h[i].region > h[i - 1].region);
		len += snprintf(want + len, sizeof(want) - (size_t)len,
		                "region %" PRIu32 " primary 0\n", h[i].region);
	}
	assert_string_equal(r, want);
	free(r);
}

/* ---- removing a source while an answer calls it ------------------------ */

struct race {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool in_answer, removed, dead;
	unsigned calls, calls_dead;
	int hook_wait_ms;
};

static struct race race = {.lock = PTHREAD_MUTEX_INITIALIZER,
                           .cond = PTHREAD_COND_INITIALIZER};

static void race_counters(void *ctx, struct farm_ctl_out *o)
{
	(void)o;
	struct race *r = ctx;
	pthread_mutex_lock(&r->lock);
	r->calls++;
	if (r->dead)
		r->calls_dead++;
	pthread_mutex_unlock(&r->lock);
}

static void deadline(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* On the control thread, before a source is called: say so, then give
 * the main thread's removal a chance to return first (it must not). */
static void race_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	struct race *r = arg;
	struct timespec ts;
	deadline(&ts, r->hook_wait_ms);
	pthread_mutex_lock(&r->lock);
	r->in_answer = true;
	pthread_cond_broadcast(&r->cond);
	while (!r->removed &&
	       pthread_cond_timedwait(&r->cond, &r->lock, &ts) == 0)
		;
	pthread_mutex_unlock(&r->lock);
}

static void *asker(void *arg)
{
	(void)arg;
	char *reply = NULL;
	int rc = farm_ctl_request(fx.dir, "stats", &reply, NULL, 20000);
	free(reply);
	return (void *)(intptr_t)rc;
}

static void test_remove_during_answer(void **state)
{
	(void)state;
	if (!farm_fault_built()) {
		printf("SKIPPED: built without fault injection\n");
		skip();
	}
	struct farm_ctl_source src = {.fn = race_counters, .ctx = &race};
	/* The correct removal blocks until the answer ends, so the hook
	 * waits a short bound; broken, it returns at once. */
	race.hook_wait_ms = broken ? 10000 : 300;
	farm_ctl_add(farm_node_ctl(fx.node), &src);
	assert_int_equal(farm_fault_set(FARM_FP_CTL_SOURCE, race_hook, &race),
	                 0);
	if (broken)
		assert_int_equal(farm_ctl_testing_unlocked_remove(true), 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, asker, NULL), 0);
	struct timespec ts;
	deadline(&ts, 10000);
	pthread_mutex_lock(&race.lock);
	while (!race.in_answer &&
	       pthread_cond_timedwait(&race.cond, &race.lock, &ts) == 0)
		;
	assert_true(race.in_answer);
	pthread_mutex_unlock(&race.lock);
	farm_ctl_remove(&src);
	pthread_mutex_lock(&race.lock);
	race.dead = true; /* the source is gone for its owner now */
	race.removed = true;
	pthread_cond_broadcast(&race.cond);
	pthread_mutex_unlock(&race.lock);
	void *rc;
	pthread_join(th, &rc);
	farm_fault_set(FARM_FP_CTL_SOURCE, NULL, NULL);
	if (broken)
		farm_ctl_testing_unlocked_remove(false);
	assert_int_equal((int)(intptr_t)rc, 0);
	assert_true(race.calls >= 1);
	if (broken) {
		/* Removal without the lock: the answer called the source
		 * after its owner was told it was gone, which is what this
		 * test exists to catch. */
		assert_int_equal(race.calls_dead, 1);
		return;
	}
	assert_int_equal(race.calls_dead, 0);
	/* Removed: no longer called. */
	unsigned calls = race.calls;
	free(ask("stats", 0));
	assert_int_equal(race.calls, calls);
}

/* ---- a machine that goes away mid-answer ------------------------------ */

/* A stand-in for a machine on a control socket: takes one request line,
 * writes @answer (maybe nothing, maybe no whole line) and closes, as a
 * machine that exits or crashes before it has answered does. */
struct fake {
	int lfd;
	const char *answer;
	char req[64];
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	size_t n = 0;
	while (n < sizeof(f->req) - 1) {
		ssize_t r = recv(fd, f->req + n, sizeof(f->req) - 1 - n, 0);
		if (r <= 0)
			break;
		n += (size_t)r;
		if (memchr(f->req, '\n', n))
			break;
	}
	f->req[n] = 0;
	size_t len = strlen(f->answer);
	if (len && send(fd, f->answer, len, MSG_NOSIGNAL) != (ssize_t)len)
		f->req[0] = 0; /* the test sees the request lost */
	close(fd);
	return NULL;
}

/* farm_ctl_request against a fake answering @answer: its result, with
 * the request the fake saw checked. */
static int ask_fake(const char *dir, const char *answer, char **reply)
{
	struct fake f = {.answer = answer};
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	assert_true(snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir,
	                     FARM_CTL_SOCKET) < (int)sizeof(a.sun_path));
	f.lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(f.lfd >= 0);
	if (bind(f.lfd, (struct sockaddr *)&a, sizeof(a)) || listen(f.lfd, 1))
		fail_msg("bind %s: %s", a.sun_path, strerror(errno));
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, fake_main, &f), 0);
	*reply = NULL;
	int rc = farm_ctl_request(dir, "leave 1000", reply, NULL, 5000);
	pthread_join(th, NULL);
	close(f.lfd);
	unlink(a.sun_path);
	assert_string_equal(f.req, "leave 1000\n");
	return rc;
}

/* The connection closed before a whole answer is an error, never an
 * empty (or cut) answer taken for one: a tool would report success. */
static void test_closed_without_answer(void **state)
{
	(void)state;
	char dir[256];
	tu_tmpdir(dir, sizeof(dir), "ctlfake");
	char *reply;
	assert_int_equal(ask_fake(dir, "left\n", &reply), 0);
	assert_string_equal(reply, "left\n");
	free(reply);
	assert_int_equal(ask_fake(dir, "", &reply), -ECONNRESET);
	assert_null(reply);
	assert_int_equal(ask_fake(dir, "machine 0\nconfigura", &reply),
	                 -ECONNRESET);
	assert_null(reply);
	tu_rmtree(dir);
}

/* ---- the socket's lifetime --------------------------------------------- */

/* A machine without a KV store on @dir: open it, ask it for help, close
 * it; its socket must be gone then. */
static void plain_machine(const char *dir)
{
	struct farm_config cfg;
	farm_config_defaults(&cfg);
	cfg.machine_id = 0;
	cfg.has_machine_id = true;
	snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", dir);
	cfg.region_size = 16u << 20;
	farm_node *node;
	assert_int_equal(farm_node_open(&cfg, &node), 0);
	char *reply = NULL;
	assert_int_equal(farm_ctl_request(dir, "help", &reply, NULL, 5000), 0);
	assert_true(!strncmp(reply, "stats ", 6));
	free(reply);
	farm_node_close(node);
	assert_int_equal(farm_ctl_request(dir, "help", &reply, NULL, 1000),
	                 -ENOENT);
}

static void test_lifetime(void **state)
{
	(void)state;
	char path[600];
	snprintf(path, sizeof(path), "%s/%s", fx.dir, FARM_CTL_SOCKET);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	/* Closed: the socket is gone. */
	farm_kv_detach(fx.kv, fx.loop);
	farm_node_loop_close(fx.node, fx.loop);
	farm_node_close(fx.node);
	farm_kv_destroy(fx.kv);
	fx.loop = NULL;
	fx.node = NULL;
	fx.kv = NULL;
	assert_int_equal(stat(path, &st), -1);
	char *reply = NULL;
	assert_int_equal(farm_ctl_request(fx.dir, "stats", &reply, NULL, 1000),
	                 -ENOENT);
	/* A killed machine's socket file: refused, then replaced by the
	 * next machine on that directory (the node removed the directory
	 * it left empty). */
	assert_true(mkdir(fx.dir, 0700) == 0 || errno == EEXIST);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	assert_true(snprintf(a.sun_path, sizeof(a.sun_path), "%s", path) <
	            (int)sizeof(a.sun_path));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)))
		fail_msg("bind %s: %s", path, strerror(errno));
	close(fd);
	assert_int_equal(farm_ctl_request(fx.dir, "stats", &reply, NULL, 1000),
	                 -ECONNREFUSED);
	plain_machine(fx.dir);
	assert_true(mkdir(fx.dir, 0700) == 0 || errno == EEXIST);
	/* A data directory longer than a socket address takes. */
	char deep[400];
	assert_true(snprintf(deep, sizeof(deep), "%s/%080d", fx.dir, 0) <
	            (int)sizeof(deep));
	assert_true(strlen(deep) + 10 > sizeof(a.sun_path));
	assert_int_equal(mkdir(deep, 0700), 0);
	plain_machine(deep);
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--broken")) {
		broken = true;
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--broken]\n", argv[0]);
		return 2;
	}
	tu_require_provider();
	if (broken) {
		if (!farm_fault_built()) {
			printf("SKIPPED: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
		const struct CMUnitTest bt[] = {cmocka_unit_test_setup_teardown(
		        test_remove_during_answer, setup, teardown)};
		return cmocka_run_group_tests(bt, NULL, NULL);
	}
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_stats_text, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_stats_prometheus, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_bad_input, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_regions, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_remove_during_answer,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_lifetime, setup, teardown),
	        cmocka_unit_test(test_closed_without_answer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
