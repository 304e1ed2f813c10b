/*
 * A machine closed while its graceful leave waits (farm_node_close during
 * farm_node_leave; src/node/README.md, "Graceful leave"): one in-process
 * machine through a private ZooKeeper, its leave asked on the control
 * socket ("leave MS", as `farm leave` does) and held by a test-only
 * switch (FARM_FP_LEAVE_HOLD: every step says "not yet", as when the
 * view that ends it never comes). Once the leave is seen waiting, the
 * main thread closes the node, as `farm machine` does on SIGTERM. The
 * close joins the control socket's thread, which runs the leave: it must
 * return within CLOSE_BOUND_MS, far below the leave's LEAVE_MS, and the
 * client must get an error answer that says the leave was cancelled
 * (never "left").
 *
 * --broken-cancel: the leave ignores the close (FARM_FP_LEAVE_NO_CANCEL,
 * the code before the closing flag): the close then waits the leave's
 * whole timeout, which the test must find.
 *
 * Exits 77 (skip) without the ZooKeeper client or server, or without
 * fault injection (the hold is a switch).
 */
#include "testutil.h"

#include <inttypes.h>
#include <pthread.h>
#include <time.h>

#include "brokenarg.h"
#include "node/ctl.h"
#include "node/node.h"
#include "util/fault.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define LEAVE_MS       20000 /* the leave's own timeout */
#define CLOSE_BOUND_MS 5000  /* the close, leave cut short */
#define WAIT_MS        30000 /* any other wait */

static char zk_dir[256], zk_connect[64];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static bool broken;

/* The hold's first hit, told to the main thread. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool held;
} hold = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};

static void hold_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	pthread_mutex_lock(&hold.lock);
	hold.held = true;
	pthread_cond_broadcast(&hold.cond); /* pairs with the wait in test */
	pthread_mutex_unlock(&hold.lock);
}

/* The client: "leave LEAVE_MS" on the control socket. */
struct asker {
	const char *dir;
	int rc;
	char *reply;
};

static void *ask_leave(void *arg)
{
	struct asker *a = arg;
	char req[32];
	snprintf(req, sizeof(req), "leave %d", LEAVE_MS);
	a->rc = farm_ctl_request(a->dir, req, &a->reply, NULL,
	                         LEAVE_MS + WAIT_MS);
	return NULL;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void test_close_during_leave(void **state)
{
	(void)state;
	char dir[256];
	tu_tmpdir(dir, sizeof(dir), "leaveclose");
	struct farm_config cfg;
	farm_config_defaults(&cfg);
	cfg.machine_id = 1;
	cfg.has_machine_id = true;
	snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", dir);
	cfg.region_size = 16u << 20;
	cfg.threads = 1;
	cfg.expect_machines = 1;
	snprintf(cfg.zk, sizeof(cfg.zk), "%s", zk_connect);
	snprintf(cfg.zk_root, sizeof(cfg.zk_root), "/libfarm/leave-close-%d",
	         (int)getpid());
	cfg.zk_session_ms = 4000;
	cfg.zk_connect_timeout_ms = WAIT_MS;
	char err[256];
	assert_int_equal(farm_config_validate(&cfg, err, sizeof(err)), 0);
	farm_node *node;
	assert_int_equal(farm_node_open(&cfg, &node), 0);
	assert_int_equal(farm_node_start(node, WAIT_MS), 0);
	assert_int_equal(farm_node_wait_members(node, 1, WAIT_MS), 0);

	assert_int_equal(farm_fault_set(FARM_FP_LEAVE_HOLD, hold_hook, NULL),
	                 0);
	struct asker a = {.dir = dir};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, ask_leave, &a), 0);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&hold.lock);
	while (!hold.held &&
	       pthread_cond_timedwait(&hold.cond, &hold.lock, &ts) == 0)
		;
	bool held = hold.held;
	pthread_mutex_unlock(&hold.lock);
	assert_true(held); /* the leave runs, on the socket's thread */

	uint64_t t0 = now_ms();
	farm_node_close(node);
	uint64_t ms = now_ms() - t0;
	pthread_join(th, NULL);
	farm_fault_set(FARM_FP_LEAVE_HOLD, NULL, NULL);
	printf("leave-close: the close took %" PRIu64 " ms (bound %d, the "
	       "leave's timeout %d); the client got %d: %s",
	       ms, CLOSE_BOUND_MS, LEAVE_MS, a.rc,
	       a.reply ? a.reply : "(no answer)\n");
	bool cancelled = a.rc == -EPROTO && a.reply &&
	                 strstr(a.reply, farm_strerror(-ECANCELED));
	free(a.reply);
	tu_rmtree(dir);
	if (broken) {
		/* The close waited the leave out: what this test exists to
		 * catch. */
		if (ms < CLOSE_BOUND_MS)
			fail_msg("--broken-cancel: the close took %" PRIu64
			         " ms, and no check noticed",
			         ms);
		printf("leave-close --broken-cancel: the close waited the "
		       "leave out, as the check must find\n");
		return;
	}
	if (ms >= CLOSE_BOUND_MS)
		fail_msg("the close waited %" PRIu64 " ms for the leave", ms);
	if (!cancelled)
		fail_msg("the client was not told the leave was cancelled");
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--broken-cancel")) {
		broken = true;
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--broken-cancel]\n", argv[0]);
		return 2;
	}
	if (!farm_fault_built()) {
		printf("skipped: the hold needs fault injection\n");
		return FARM_TEST_SKIP;
	}
	if (broken &&
	    farm_fault_set(FARM_FP_LEAVE_NO_CANCEL, tu_switch_on, NULL))
		return 1;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_close_during_leave),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "leave_close", tests, 1);
}
