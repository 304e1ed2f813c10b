/*
 * Messaging in one process: several machines (each its own fabric and
 * farm_msg) whose loops one test thread drives in turn, so every step is
 * deterministic (the machines: harness/msgnodes.h). Multi-process
 * behaviour is in test_msg_multi.c, one-sided operations through loops in
 * test_msg_rdma.c.
 */
#include "testutil.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/mount.h>
#include <unistd.h>

#include "fabric/udp_testing.h"
#include "msg/msg_testing.h"
#include "brokenarg.h"
#include "msgnodes.h"

#ifndef NCALLS
#define NCALLS 500
#endif

struct rpc_res {
	int done, status;
	uint32_t len;
	uint8_t buf[64];
	pthread_t thread;
};

static void rpc_cont(farm_loop *loop, void *ctx, int status, const void *reply,
                     uint32_t len)
{
	(void)loop;
	struct rpc_res *r = ctx;
	r->done++;
	r->status = status;
	r->len = len;
	r->thread = pthread_self();
	if (status == 0 && len <= sizeof(r->buf))
		memcpy(r->buf, reply, len);
}

static void test_bad_args(void **state)
{
	(void)state;
	struct mn_node nd[2];
	farm_msg_attr a = {.ring_size = 4096};
	mn_open(nd, 2, &a);
	farm_msg_attr bad = {.ring_size = 5000};
	farm_msg *m;
	assert_int_equal(farm_msg_create(nd[0].fab, &bad, &m), -EINVAL);
	uint8_t big[8192] = {0};
	uint32_t max = farm_msg_max_payload(nd[0].msg);
	assert_int_equal(max, 4096 / 8 - 40); /* frame 24 B, message 16 */
	assert_int_equal(farm_msg_send(nd[0].loop, 1, 0, T_COUNT, big, max + 1),
	                 -EMSGSIZE);
	assert_int_equal(farm_msg_send(nd[0].loop, 1, 1, T_COUNT, big, 8),
	                 -EINVAL);
	assert_int_equal(farm_msg_send(nd[0].loop, 99, 0, T_COUNT, big, 8),
	                 -ENOENT);
	assert_int_equal(farm_msg_send(nd[0].loop, 5, 0, T_COUNT, big, 8),
	                 -ENOENT);
	assert_int_equal(farm_msg_send(nd[0].loop, 0, 0, 777, big, 8), -EINVAL);
	assert_int_equal(farm_msg_send(NULL, 1, 0, T_COUNT, big, 8), -EINVAL);
	farm_mr_desc d = farm_msg_desc(nd[1].msg);
	d.len += 4096;
	assert_int_equal(farm_msg_add_peer(nd[0].msg, 1, "x", &d), -EINVAL);
	d = farm_msg_desc(nd[1].msg);
	assert_int_equal(farm_msg_add_peer(nd[0].msg, 0, "x", &d), -EINVAL);
	farm_loop *l2;
	assert_int_equal(farm_loop_open(nd[0].msg, 0, &l2), -EBUSY);
	assert_int_equal(farm_msg_destroy(nd[0].msg), -EBUSY);
	mn_close(nd, 2);
}

/* The reconfiguration probe READs each machine's header: the live ones
 * answer, a machine never added, one the fabric fails and a closed one do
 * not; bad arguments are refused. */
static void test_probe(void **state)
{
	(void)state;
	struct mn_node nd[3];
	farm_msg_attr a = {.ring_size = 4096};
	mn_open(nd, 3, &a);
	uint32_t ids[4] = {0, 1, 2, 5};
	bool ok[4];
	assert_int_equal(farm_msg_probe(nd[0].msg, ids, 4, 100000000ull, ok),
	                 3);
	assert_true(ok[0] && ok[1] && ok[2]);
	assert_false(ok[3]); /* never added */
	/* A failing fabric to machine 1: its memory does not answer. */
	assert_int_equal(
	        farm_fabric_fault_peer(nd[0].fab, 1, FARM_FAULT_FAIL, 1), 0);
	assert_int_equal(farm_msg_probe(nd[0].msg, ids, 3, 100000000ull, ok),
	                 2);
	assert_true(ok[0] && !ok[1] && ok[2]);
	/* Healed: the probe connects a new endpoint and it answers again. */
	assert_int_equal(
	        farm_fabric_fault_peer(nd[0].fab, 1, FARM_FAULT_FAIL, 0), 0);
	assert_int_equal(farm_msg_probe(nd[0].msg, ids, 3, 100000000ull, ok),
	                 3);
	/* Paused: no completion within the timeout. */
	assert_int_equal(
	        farm_fabric_fault_peer(nd[0].fab, 2, FARM_FAULT_PAUSE, 1), 0);
	assert_int_equal(farm_msg_probe(nd[0].msg, ids, 3, 20000000ull, ok), 2);
	assert_true(ok[0] && ok[1] && !ok[2]);
	assert_int_equal(
	        farm_fabric_fault_peer(nd[0].fab, 2, FARM_FAULT_PAUSE, 0), 0);
	assert_int_equal(farm_msg_probe(nd[0].msg, ids, 3, 100000000ull, ok),
	                 3);
	/* Bad arguments. */
	uint32_t far = 4096;
	assert_int_equal(farm_msg_probe(NULL, ids, 1, 1000, ok), -EINVAL);
	assert_int_equal(farm_msg_probe(nd[0].msg, NULL, 1, 1000, ok), -EINVAL);
	assert_int_equal(farm_msg_probe(nd[0].msg, ids, 1, 1000, NULL),
	                 -EINVAL);
	assert_int_equal(farm_msg_probe(nd[0].msg, &far, 1, 1000, ok), -EINVAL);
	assert_int_equal(farm_msg_probe(nd[0].msg, ids, 0, 1000, ok), 0);
	mn_close(nd, 3);
}

/* Exactly once, in order, through many wrap-arounds of a small ring. */
static void test_stream_wraps(void **state)
{
	(void)state;
	struct mn_node nd[2];
	farm_msg_attr a = {.ring_size = 4096, .sendq_max = 100000};
	mn_open(nd, 2, &a);
	uint32_t max = farm_msg_max_payload(nd[0].msg);
	uint8_t buf[4096];
	uint64_t rng = 7, total = 0;
	for (uint64_t seq = 0; seq < 200000; seq++) {
		uint32_t len = 8 + (uint32_t)(farm_rand64(&rng) % (max - 7));
		memset(buf, (int)(seq & 0xff), len);
		memcpy(buf, &seq, 8);
		assert_int_equal(
		        farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, len), 0);
		total += len;
		if (seq % 7 == 0)
			mn_pump(nd, 2, 1);
	}
	for (int i = 0; i < 100000 && nd[1].count < 200000; i++)
		mn_pump(nd, 2, 1);
	assert_int_equal(nd[1].count, 200000);
	assert_int_equal(nd[1].bytes, total);
	assert_int_equal(nd[1].bad_seq, 0);
	farm_msg_stats s;
	farm_msg_stats_get(NULL, nd[0].loop, &s);
	assert_true(s.frames_sent > 0 && s.frames_sent <= 200000);
	assert_int_equal(s.sent, 200000);
	mn_close(nd, 2);
}

/* Frames start on a cache line: one of a 16-byte message takes one line,
 * one of 64 bytes two, one of 100 three; the receiver's head moves by
 * that much and the next frame is read from there. */
static void test_frame_lines(void **state)
{
	(void)state;
	struct mn_node nd[2];
	farm_msg_attr a = {.ring_size = 4096};
	mn_open(nd, 2, &a);
	static const uint32_t lens[] = {16, 64, 100, 8, 64};
	static const uint64_t span[] = {64, 128, 192, 64, 128};
	uint8_t buf[128] = {0};
	uint64_t want = 0;
	for (uint64_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		memcpy(buf, &i, 8);
		assert_int_equal(
		        farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, lens[i]),
		        0);
		mn_pump(nd, 2, 2);
		assert_int_equal(nd[1].count, i + 1);
		uint32_t size;
		uint64_t head;
		(void)farm_msg_testing_ring(nd[1].msg, 0, 0, 0, &size, &head);
		want += span[i];
		assert_int_equal(head, want);
	}
	assert_int_equal(nd[1].bad_seq, 0);
	mn_close(nd, 2);
}

/* The receiver hands back an eighth of its ring in the pass that consumed
 * it, once the ring is empty (after the pass's flush): frames of 64-byte
 * messages take 128 bytes, so in a 4 KiB ring the fourth one's pass
 * zeroes the 512 bytes consumed, and the three before leave them. */
static void test_hand_back_eighth(void **state)
{
	(void)state;
	struct mn_node nd[2];
	farm_msg_attr a = {.ring_size = 4096};
	mn_open(nd, 2, &a);
	uint8_t buf[64] = {0}, zero[512] = {0};
	for (uint64_t i = 0; i < 4; i++) {
		memcpy(buf, &i, 8);
		assert_int_equal(
		        farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, 64), 0);
		mn_pump(nd, 2, 1); /* the sender posts, the receiver consumes */
		assert_int_equal(nd[1].count, i + 1);
		uint32_t size;
		uint64_t head;
		uint8_t *ring =
		        farm_msg_testing_ring(nd[1].msg, 0, 0, 0, &size, &head);
		assert_int_equal(head, (i + 1) * 128);
		if (i < 3)
			assert_memory_not_equal(ring, zero, 8);
		else
			assert_memory_equal(ring, zero, sizeof(zero));
	}
	assert_int_equal(nd[1].bad_seq, 0);
	mn_close(nd, 2);
}

/* farm_msg_memory: the region is sized by max_machines (T*M*T rings);
 * a send mirror is counted once per channel, made by its first send; a
 * closed loop's tables are no longer counted. */
static void test_memory(void **state)
{
	(void)state;
	struct mn_node nd[3];
	farm_msg_attr a = {.ring_size = 8192, .max_machines = 5};
	mn_open(nd, 3, &a);
	farm_msg_mem m0 = {.size = sizeof(m0)}, m1 = {.size = sizeof(m1)},
	             m2 = {.size = sizeof(m2)};
	farm_msg_mem tiny = {.size = 4};
	assert_int_equal(farm_msg_memory(nd[0].msg, &tiny), -EINVAL);
	assert_int_equal(farm_msg_memory(NULL, &m0), -EINVAL);
	assert_int_equal(farm_msg_memory(nd[0].msg, &m0), 0);
	/* 5 rings (T = 1), the header page and a page of park and
	 * head-back lines. */
	assert_int_equal(m0.region, 5ull * 8192 + 2 * 4096);
	assert_int_equal(m0.version, FARM_MSG_MEM_VERSION);
	assert_int_equal(m0.size, sizeof(m0));
	assert_int_equal(m0.mirrors, 0);
	assert_true(m0.tables > 0);
	uint8_t buf[8] = {0};
	assert_int_equal(farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, 8), 0);
	assert_int_equal(farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, 8), 0);
	assert_int_equal(farm_msg_memory(nd[0].msg, &m1), 0);
	assert_int_equal(m1.mirrors, 8192);
	/* A mirror takes memory as frames are staged: one 16-byte-message
	 * frame, one page. */
	assert_int_equal(m1.mirrors_resident, 4096);
	assert_int_equal(farm_msg_send(nd[0].loop, 2, 0, T_COUNT, buf, 8), 0);
	assert_int_equal(farm_msg_memory(nd[0].msg, &m2), 0);
	assert_int_equal(m2.mirrors, 2 * 8192);
	assert_int_equal(m2.region, m0.region);
	mn_pump(nd, 3, 10);
	farm_loop_close(nd[0].loop);
	assert_int_equal(farm_msg_memory(nd[0].msg, &m2), 0);
	assert_int_equal(m2.mirrors, 0);
	assert_int_equal(m2.mirrors_resident, 0);
	assert_true(m2.tables < m0.tables);
	assert_int_equal(farm_loop_open(nd[0].msg, 0, &nd[0].loop), 0);
	mn_close(nd, 3);
}

/* Fill the file system at @dir: a file written until it is full. */
static void fill_fs(const char *dir, char *path, size_t cap)
{
	snprintf(path, cap, "%s/filler", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	static char chunk[4096];
	while (write(fd, chunk, sizeof(chunk)) > 0)
		;
	assert_int_equal(errno, ENOSPC);
	close(fd);
}

/* A receiver whose rings live on a full file system: the sender's first
 * message to it (which backs the ring there) fails with -ENOSPC, never a
 * SIGBUS at a frame, and works once there is room. Needs a small tmpfs
 * (root); skipped otherwise. */
static void test_full_fs(void **state)
{
	(void)state;
	struct mn_node nd[2];
	memset(nd, 0, sizeof(nd));
	tu_tmpdir(nd[0].dir, sizeof(nd[0].dir), "msg");
	tu_tmpdir(nd[1].dir, sizeof(nd[1].dir), "msgfull");
	if (geteuid() != 0 ||
	    mount("tmpfs", nd[1].dir, "tmpfs", 0, "size=2m") != 0) {
		tu_rmtree(nd[0].dir);
		tu_rmtree(nd[1].dir);
		skip();
	}
	farm_msg_attr a = {.ring_size = 64 << 10, .max_machines = 5};
	for (unsigned i = 0; i < 2; i++) {
		nd[i].fab = tu_open(i, nd[i].dir);
		assert_non_null(nd[i].fab);
		assert_int_equal(farm_msg_create(nd[i].fab, &a, &nd[i].msg), 0);
		assert_int_equal(
		        farm_msg_handle(nd[i].msg, T_COUNT, mn_h_count, &nd[i]),
		        0);
	}
	bool shm = strcmp(farm_fabric_provider(nd[0].fab), "shm") == 0;
	for (unsigned i = 0; i < 2; i++) {
		char addr[256];
		assert_true(farm_fabric_address(nd[1 - i].fab, addr,
		                                sizeof(addr)) > 0);
		farm_mr_desc d = farm_msg_desc(nd[1 - i].msg);
		assert_int_equal(farm_msg_add_peer(nd[i].msg, 1 - i, addr, &d),
		                 0);
		assert_int_equal(farm_loop_open(nd[i].msg, 0, &nd[i].loop), 0);
	}
	char filler[300];
	fill_fs(nd[1].dir, filler, sizeof(filler));
	uint8_t buf[8] = {0};
	/* Only shm's rings are files (udp, ofi: anonymous memory). */
	if (shm)
		assert_int_equal(
		        farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, 8),
		        -ENOSPC);
	assert_int_equal(unlink(filler), 0);
	assert_int_equal(farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, 8), 0);
	for (unsigned i = 0; i < 1000 && nd[1].count < 1; i++)
		mn_pump(nd, 2, 1);
	assert_int_equal(nd[1].count, 1);
	mn_close(nd, 2);
	umount2(nd[1].dir, MNT_DETACH);
	tu_rmtree(nd[1].dir);
}

/* A receiver that does not poll: the sender queues up to its bound, then
 * gets -ENOBUFS; once the receiver polls, everything accepted arrives. */
static void test_backpressure(void **state)
{
	(void)state;
	struct mn_node nd[2];
	farm_msg_attr a = {.ring_size = 4096, .sendq_max = 50};
	mn_open(nd, 2, &a);
	uint8_t buf[256] = {0};
	uint64_t seq = 0;
	int rc;
	for (;;) {
		memcpy(buf, &seq, 8);
		rc = farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, sizeof(buf));
		if (rc)
			break;
		seq++;
		(void)farm_loop_poll(nd[0].loop); /* sender only */
	}
	assert_int_equal(rc, -ENOBUFS);
	farm_msg_stats s;
	farm_msg_stats_get(NULL, nd[0].loop, &s);
	assert_int_equal(s.nobufs, 1);
	assert_true(s.queued >= 50);
	/* The ring holds what fits; 50 more wait locally. */
	assert_true(seq >= 50 + 4096 / (256 + 16 + 16) / 2);
	for (int i = 0; i < 10000 && nd[1].count < seq; i++)
		mn_pump(nd, 2, 1);
	assert_int_equal(nd[1].count, seq);
	assert_int_equal(nd[1].bad_seq, 0);
	/* and the channel works again */
	memcpy(buf, &seq, 8);
	assert_int_equal(farm_msg_send(nd[0].loop, 1, 0, T_COUNT, buf, 8), 0);
	mn_pump(nd, 2, 4);
	assert_int_equal(nd[1].count, seq + 1);
	mn_close(nd, 2);
}

static void test_rpc(void **state)
{
	(void)state;
	struct mn_node nd[3];
	farm_msg_attr a = {0};
	mn_open(nd, 3, &a);
	struct rpc_res r[4] = {{0}};
	const char *hello = "hello, machine";
	/* remote echo, to our own machine, error reply, timeout */
	assert_int_equal(farm_msg_call(nd[0].loop, 1, 0, T_ECHO, hello, 15, 0,
	                               rpc_cont, &r[0]),
	                 0);
	assert_int_equal(farm_msg_call(nd[0].loop, 0, 0, T_ECHO, hello, 15, 0,
	                               rpc_cont, &r[1]),
	                 0);
	assert_int_equal(farm_msg_call(nd[0].loop, 2, 0, T_FAIL, NULL, 0, 0,
	                               rpc_cont, &r[2]),
	                 0);
	assert_int_equal(farm_msg_call(nd[0].loop, 2, 0, T_DEFER, NULL, 0,
	                               20000000, rpc_cont, &r[3]),
	                 0);
	uint64_t until = farm_now_ns() + 2000000000ull;
	while (farm_now_ns() < until &&
	       !(r[0].done && r[1].done && r[2].done && r[3].done))
		mn_pump(nd, 3, 1);
	assert_int_equal(r[0].done, 1);
	assert_int_equal(r[0].status, 0);
	assert_int_equal(r[0].len, 15);
	assert_string_equal((char *)r[0].buf, hello);
	assert_int_equal(r[1].status, 0);
	assert_string_equal((char *)r[1].buf, hello);
	assert_int_equal(r[2].status, -EPERM);
	assert_int_equal(r[3].status, -ETIMEDOUT);
	/* The late reply to the timed-out call is dropped and counted. */
	assert_true(nd[2].has_deferred);
	assert_int_equal(farm_msg_reply(nd[2].loop, &nd[2].deferred, "late", 4),
	                 0);
	mn_pump(nd, 3, 4);
	assert_int_equal(r[3].done, 1);
	farm_msg_stats s;
	farm_msg_stats_get(NULL, nd[0].loop, &s);
	assert_int_equal(s.stale_replies, 1);
	assert_int_equal(s.timeouts, 1);
	/* Closing a loop cancels its outstanding calls. */
	struct rpc_res c = {0};
	assert_int_equal(farm_msg_call(nd[0].loop, 2, 0, T_DEFER, NULL, 0, 0,
	                               rpc_cont, &c),
	                 0);
	farm_loop_close(nd[0].loop);
	assert_int_equal(c.done, 1);
	assert_int_equal(c.status, -ECANCELED);
	assert_int_equal(farm_loop_open(nd[0].msg, 0, &nd[0].loop), 0);
	mn_close(nd, 3);
}

/*
 * A call to a machine that a configuration then removes (its frames
 * refused: farm_msg_peer_min_config UINT32_MAX) ends with FARM_EPEERDEAD
 * at the loop's next scan, not at its deadline: a machine stopped past its
 * lease and removed never answers, and no death notice comes for a
 * process that lives. Its late answer is refused. --broken-removed
 * (FARM_FP_MSG_CALL_REMOVED_WAIT: such calls wait for the deadline, as
 * before) must see the call run to its deadline instead.
 */
static bool broken_removed;
#define REMOVED_CALL_NS (broken_removed ? 1000000000ull : 5000000000ull)
static void test_call_to_removed(void **state)
{
	(void)state;
	struct mn_node nd[2];
	farm_msg_attr a = {0};
	mn_open(nd, 2, &a);
	struct rpc_res r = {0};
	assert_int_equal(farm_msg_call(nd[0].loop, 1, 0, T_DEFER, NULL, 0,
	                               REMOVED_CALL_NS, rpc_cont, &r),
	                 0);
	while (!nd[1].has_deferred) /* it arrived; no answer will come */
		mn_pump(nd, 2, 1);
	uint64_t t0 = farm_now_ns();
	assert_int_equal(farm_msg_peer_min_config(nd[0].msg, 1, UINT32_MAX), 0);
	while (!r.done)
		(void)farm_loop_poll(nd[0].loop);
	uint64_t took = farm_now_ns() - t0;
	printf("call to a removed machine ended after %.1f ms: %s\n",
	       (double)took / 1e6, farm_strerror(r.status));
	if (broken_removed) { /* to the deadline */
		assert_int_equal(r.status, -ETIMEDOUT);
		assert_true(took >= REMOVED_CALL_NS / 2);
		mn_close(nd, 2);
		return;
	}
	assert_int_equal(r.status, FARM_EPEERDEAD);
	assert_true(took < REMOVED_CALL_NS / 2);
	/* A new call fails at once; the late answer is not delivered. */
	assert_int_equal(farm_msg_call(nd[0].loop, 1, 0, T_ECHO, "x", 2, 0,
	                               rpc_cont, &r),
	                 FARM_EPEERDEAD);
	assert_int_equal(farm_msg_reply(nd[1].loop, &nd[1].deferred, "late", 4),
	                 0);
	mn_pump(nd, 2, 4);
	assert_int_equal(r.done, 1);
	mn_close(nd, 2);
}

struct chain {
	struct rpc_res first, second;
	uint64_t issued, ended;
	int rc;
};

static void chain_second(farm_loop *loop, void *ctx, int status,
                         const void *reply, uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct chain *ch = ctx;
	ch->ended = farm_now_ns();
	ch->second.status = status;
	ch->second.done++;
}

static void chain_first(farm_loop *loop, void *ctx, int status,
                        const void *reply, uint32_t len)
{
	(void)reply;
	(void)len;
	struct chain *ch = ctx;
	ch->first.status = status;
	ch->first.done++;
	ch->issued = farm_now_ns();
	ch->rc = farm_msg_call(loop, 2, 0, T_DEFER, NULL, 0, 20000000,
	                       chain_second, ch);
}

/* A call made inside a pass (here by a continuation) gets its deadline
 * when the pass has posted it: it times out, and not before its timeout
 * has passed since it was made. */
static void test_call_in_pass_deadline(void **state)
{
	(void)state;
	struct mn_node nd[3];
	farm_msg_attr a = {0};
	mn_open(nd, 3, &a);
	struct chain ch = {0};
	assert_int_equal(farm_msg_call(nd[0].loop, 1, 0, T_ECHO, "x", 1, 0,
	                               chain_first, &ch),
	                 0);
	uint64_t until = farm_now_ns() + 2000000000ull;
	while (farm_now_ns() < until && !ch.second.done)
		mn_pump(nd, 3, 1);
	assert_int_equal(ch.first.done, 1);
	assert_int_equal(ch.first.status, 0);
	assert_int_equal(ch.rc, 0);
	assert_int_equal(ch.second.done, 1);
	assert_int_equal(ch.second.status, -ETIMEDOUT);
	assert_true(ch.ended - ch.issued >= 20000000ull);
	assert_true(nd[2].has_deferred);
	mn_close(nd, 3);
}

/* Garbage in one live ring breaks that channel only. */
static void test_corrupt_ring(void **state)
{
	(void)state;
	struct mn_node nd[3];
	farm_msg_attr a = {.ring_size = 8192};
	mn_open(nd, 3, &a);
	uint8_t buf[64] = {0};
	for (uint64_t s = 0; s < 10; s++) {
		memcpy(buf, &s, 8);
		assert_int_equal(
		        farm_msg_send(nd[0].loop, 2, 0, T_COUNT, buf, 64), 0);
	}
	mn_pump(nd, 3, 3);
	assert_int_equal(nd[2].count, 10);
	uint32_t size;
	uint64_t head;
	uint8_t *ring = farm_msg_testing_ring(nd[2].msg, 0, 0, 0, &size, &head);
	uint64_t rng = 3;
	for (unsigned i = 0; i < 64; i += 8) {
		uint64_t g = farm_rand64(&rng) | 1;
		memcpy(ring + (head % size) + i, &g, 8);
	}
	(void)farm_loop_poll(nd[2].loop);
	farm_msg_stats s;
	farm_msg_stats_get(NULL, nd[2].loop, &s);
	assert_int_equal(s.malformed, 1);
	/* machine 1's channel to machine 2 still works */
	nd[2].next_seq = 0;
	for (uint64_t q = 0; q < 10; q++) {
		memcpy(buf, &q, 8);
		assert_int_equal(
		        farm_msg_send(nd[1].loop, 2, 0, T_COUNT, buf, 64), 0);
		mn_pump(nd, 3, 1);
	}
	assert_int_equal(nd[2].count, 20);
	assert_int_equal(nd[2].bad_seq, 0);
	/* what machine 0 sends now is not read */
	assert_int_equal(farm_msg_send(nd[0].loop, 2, 0, T_COUNT, buf, 64), 0);
	mn_pump(nd, 3, 3);
	assert_int_equal(nd[2].count, 20);
	mn_close(nd, 3);
}

/* Frames stamped with a configuration older than the receiver accepts
 * from their sender are refused (counted, not delivered); a removed
 * machine (UINT32_MAX) is refused whatever it stamps, and sends to it
 * fail. Other senders are not affected. */
static void test_config_refused(void **state)
{
	(void)state;
	struct mn_node nd[3];
	farm_msg_attr a = {.ring_size = 8192};
	mn_open(nd, 3, &a);
	uint8_t buf[64] = {0};
	assert_int_equal(farm_msg_peer_min_config(nd[2].msg, 2, 1), -EINVAL);
	assert_int_equal(farm_msg_peer_min_config(NULL, 0, 1), -EINVAL);
	assert_int_equal(farm_msg_set_config(nd[0].msg, 4), 0);
	assert_int_equal(farm_msg_peer_min_config(nd[2].msg, 0, 5), 0);
	for (uint64_t q = 0; q < 10; q++) {
		memcpy(buf, &q, 8);
		assert_int_equal(
		        farm_msg_send(nd[0].loop, 2, 0, T_COUNT, buf, 64), 0);
		mn_pump(nd, 3, 1);
	}
	mn_pump(nd, 3, 3);
	farm_msg_stats s;
	farm_msg_stats_get(NULL, nd[2].loop, &s);
	assert_int_equal(nd[2].count, 0);
	assert_true(s.refused_config >= 1);
	assert_int_equal(s.malformed, 0);
	/* Another sender is read as before. */
	for (uint64_t q = 0; q < 10; q++) {
		memcpy(buf, &q, 8);
		assert_int_equal(
		        farm_msg_send(nd[1].loop, 2, 0, T_COUNT, buf, 64), 0);
		mn_pump(nd, 3, 1);
	}
	assert_int_equal(nd[2].count, 10);
	/* Stamped with the configuration that took it in: delivered. */
	assert_int_equal(farm_msg_set_config(nd[0].msg, 5), 0);
	nd[2].next_seq = 0;
	nd[2].count = 0;
	for (uint64_t q = 0; q < 10; q++) {
		memcpy(buf, &q, 8);
		assert_int_equal(
		        farm_msg_send(nd[0].loop, 2, 0, T_COUNT, buf, 64), 0);
		mn_pump(nd, 3, 1);
	}
	assert_int_equal(nd[2].count, 10);
	assert_int_equal(nd[2].bad_seq, 0);
	/* Removed: nothing it stamps is read, and nothing goes to it. */
	assert_int_equal(farm_msg_peer_min_config(nd[2].msg, 0, UINT32_MAX), 0);
	assert_int_equal(farm_msg_set_config(nd[0].msg, 9), 0);
	uint64_t before = s.refused_config;
	assert_int_equal(farm_msg_send(nd[0].loop, 2, 0, T_COUNT, buf, 64), 0);
	mn_pump(nd, 3, 3);
	farm_msg_stats_get(NULL, nd[2].loop, &s);
	assert_int_equal(nd[2].count, 10);
	assert_true(s.refused_config > before);
	assert_int_equal(farm_msg_send(nd[2].loop, 0, 0, T_COUNT, buf, 64),
	                 FARM_EPEERDEAD);
	mn_close(nd, 3);
}

/* Continuations and work items run on the loop's own thread. */
struct thr {
	farm_msg *msg;
	unsigned idx;
	int calls_ok, wrong_thread;
	volatile int done; /* the current call completed */
	pthread_t self;
};

static void thr_cont(farm_loop *loop, void *ctx, int status, const void *reply,
                     uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct thr *t = ctx;
	if (!pthread_equal(pthread_self(), t->self))
		t->wrong_thread++;
	if (status == 0)
		t->calls_ok++;
	t->done = 1;
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	t->self = pthread_self();
	farm_loop *loop;
	if (farm_loop_open(t->msg, t->idx, &loop))
		return NULL;
	for (int i = 0; i < NCALLS; i++) {
		t->done = 0;
		if (farm_msg_call(loop, 1, 0, T_ECHO, &i, sizeof(i), 0,
		                  thr_cont, t))
			break;
		if (farm_loop_wait(loop, &t->done, 5000000000ull))
			break;
	}
	farm_loop_close(loop);
	return NULL;
}

static void *serve_main(void *arg)
{
	farm_loop_run(arg);
	return NULL;
}

static void test_cont_thread(void **state)
{
	(void)state;
	char d0[256], d1[256];
	tu_tmpdir(d0, sizeof(d0), "ct0");
	tu_tmpdir(d1, sizeof(d1), "ct1");
	farm_fabric *f0 = tu_open(0, d0), *f1 = tu_open(1, d1);
	farm_msg_attr a0 = {.nthreads = 2}, a1 = {.nthreads = 2};
	farm_msg *m0, *m1;
	assert_int_equal(farm_msg_create(f0, &a0, &m0), 0);
	assert_int_equal(farm_msg_create(f1, &a1, &m1), 0);
	assert_int_equal(farm_msg_handle(m1, T_ECHO, mn_h_echo, NULL), 0);
	char addr[256];
	farm_mr_desc d;
	assert_true(farm_fabric_address(f1, addr, sizeof(addr)) > 0);
	d = farm_msg_desc(m1);
	assert_int_equal(farm_msg_add_peer(m0, 1, addr, &d), 0);
	assert_true(farm_fabric_address(f0, addr, sizeof(addr)) > 0);
	d = farm_msg_desc(m0);
	assert_int_equal(farm_msg_add_peer(m1, 0, addr, &d), 0);
	farm_loop *server;
	assert_int_equal(farm_loop_open(m1, 0, &server), 0);
	pthread_t st;
	pthread_create(&st, NULL, serve_main, server);
	struct thr t[2] = {{.msg = m0, .idx = 0}, {.msg = m0, .idx = 1}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, thr_main, &t[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	farm_loop_stop(server);
	pthread_join(st, NULL);
	farm_loop_close(server);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(t[i].calls_ok, NCALLS);
		assert_int_equal(t[i].wrong_thread, 0);
	}
	assert_int_equal(farm_msg_destroy(m0), 0);
	assert_int_equal(farm_msg_destroy(m1), 0);
	farm_fabric_close(f0);
	farm_fabric_close(f1);
	tu_rmtree(d0);
	tu_rmtree(d1);
}

struct post_ctx {
	int ran, status;
	pthread_t thread;
};

static void work(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct post_ctx *p = ctx;
	p->ran++;
	p->status = status;
	p->thread = pthread_self();
}

/* Another thread's post: {loop, ctx, fn (NULL: work)}. */
static void *poster(void *arg)
{
	void **a = arg;
	farm_work_fn fn = a[2] ? *(farm_work_fn *)a[2] : work;
	assert_int_equal(farm_loop_post(a[0], fn, a[1]), 0);
	return NULL;
}

/* A parked loop wakes for a work item posted from another thread. */
static void test_post_wakes(void **state)
{
	(void)state;
	struct mn_node nd[1];
	farm_msg_attr a = {.park_after_ns = 1000};
	mn_open(nd, 1, &a);
	struct post_ctx p = {0};
	void *args[3] = {nd[0].loop, &p, NULL};
	pthread_t th;
	pthread_create(&th, NULL, poster, args);
	assert_int_equal(farm_loop_wait(nd[0].loop, (volatile int *)&p.ran,
	                                5000000000ull),
	                 0);
	pthread_join(th, NULL);
	assert_int_equal(p.ran, 1);
	assert_int_equal(p.status, 0);
	assert_true(pthread_equal(p.thread, pthread_self()));
	/* closing runs what is still queued, cancelled */
	struct post_ctx q = {0};
	assert_int_equal(farm_loop_post(nd[0].loop, work, &q), 0);
	farm_loop_close(nd[0].loop);
	assert_int_equal(q.ran, 1);
	assert_int_equal(q.status, -ECANCELED);
	assert_int_equal(farm_loop_open(nd[0].msg, 0, &nd[0].loop), 0);
	mn_close(nd, 1);
}

/* What a posted item saw when it ran: the one-way messages node 0 had
 * taken by then. */
struct seen_ctx {
	struct mn_node *nd;
	int ran;
	uint64_t count_then;
};

static void seen_work(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)status;
	struct seen_ctx *c = ctx;
	c->ran++;
	c->count_then = c->nd->count;
}

/*
 * A loop's messages to itself skip the inbox (its own queue, no atomics)
 * and still keep the order the inbox gave: among themselves, and after
 * an item another thread queued before they were sent (posted, the
 * poster joined, then three sent: the item runs first, seeing none of
 * them). Closing the loop drops the ones still queued.
 */
static void test_self_order(void **state)
{
	(void)state;
	struct mn_node nd[1];
	farm_msg_attr a = {0};
	mn_open(nd, 1, &a);
	uint32_t me = farm_msg_machine_id(nd[0].msg);
	struct seen_ctx c = {.nd = &nd[0]};
	farm_work_fn fn = seen_work;
	void *args[3] = {nd[0].loop, &c, &fn};
	pthread_t th;
	pthread_create(&th, NULL, poster, args);
	pthread_join(th, NULL);
	for (uint64_t seq = 0; seq < 3; seq++)
		assert_int_equal(farm_msg_send(nd[0].loop, me, 0, T_COUNT, &seq,
		                               sizeof(seq)),
		                 0);
	assert_int_equal(nd[0].count, 0); /* never inline */
	mn_pump(nd, 1, 1);
	assert_int_equal(c.ran, 1);
	assert_int_equal(c.count_then, 0);
	assert_int_equal(nd[0].count, 3);
	assert_int_equal(nd[0].bad_seq, 0);
	uint64_t seq = 3;
	assert_int_equal(
	        farm_msg_send(nd[0].loop, me, 0, T_COUNT, &seq, sizeof(seq)),
	        0);
	farm_loop_close(nd[0].loop);
	assert_int_equal(nd[0].count, 3);
	assert_int_equal(farm_loop_open(nd[0].msg, 0, &nd[0].loop), 0);
	mn_close(nd, 1);
}

/* One echoed call to our own machine: its payload's bytes are
 * (seed + i), and so must the echo's be. */
struct self_echo {
	int done, status, bad;
	uint32_t len;
	uint8_t seed;
};

static void fill_pattern(uint8_t *b, uint32_t len, uint8_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seed + i);
}

static void self_echo_cont(farm_loop *loop, void *ctx, int status,
                           const void *reply, uint32_t len)
{
	(void)loop;
	struct self_echo *e = ctx;
	const uint8_t *b = reply;
	e->done++;
	e->status = status;
	if (status == 0 && len != e->len)
		e->bad++;
	for (uint32_t i = 0; status == 0 && i < len && i < e->len; i++)
		if (b[i] != (uint8_t)(e->seed + i)) {
			e->bad++;
			break;
		}
}

/*
 * The items a loop's messages to itself travel in are kept and reused
 * (msg_ring.c, self_item): requests and echoes of every size, some longer
 * than a kept item's room and more in flight than the loop keeps, each
 * arrive whole, round after round. Under AddressSanitizer a message
 * copied into a kept item too small for it fails here.
 */
#define SELF_CALLS 100
static void test_self_items(void **state)
{
	(void)state;
	struct mn_node nd[1];
	farm_msg_attr a = {0};
	mn_open(nd, 1, &a);
	uint32_t me = farm_msg_machine_id(nd[0].msg);
	static const uint32_t lens[] = {8, 300, 1, 256, 1000, 16, 2000, 257};
	static struct self_echo e[SELF_CALLS];
	static uint8_t buf[2000];
	for (unsigned round = 0; round < 4; round++) {
		for (unsigned i = 0; i < SELF_CALLS; i++) {
			uint32_t len = lens[(i + round) % 8];
			e[i] = (struct self_echo){
			        .len = len, .seed = (uint8_t)(i * 7 + round)};
			fill_pattern(buf, len, e[i].seed);
			assert_int_equal(farm_msg_call(nd[0].loop, me, 0,
			                               T_ECHO, buf, len, 0,
			                               self_echo_cont, &e[i]),
			                 0);
		}
		unsigned done = 0;
		uint64_t until = farm_now_ns() + 2000000000ull;
		while (done < SELF_CALLS && farm_now_ns() < until) {
			mn_pump(nd, 1, 1);
			done = 0;
			for (unsigned i = 0; i < SELF_CALLS; i++)
				done += e[i].done != 0;
		}
		for (unsigned i = 0; i < SELF_CALLS; i++) {
			assert_int_equal(e[i].done, 1);
			assert_int_equal(e[i].status, 0);
			assert_int_equal(e[i].bad, 0);
		}
	}
	mn_close(nd, 1);
}

/* farm_loop_defer: items run in order at the start of the next pass,
 * never inline; one deferred while they run waits for the pass after; a
 * pending item keeps the loop from parking (farm_loop_wait returns long
 * before its park would end); close cancels what is left. */
struct defer_rec {
	farm_loop *loop;
	int order[8];
	int n, status[8];
	volatile int done;
	bool could_wait; /* farm_loop_can_wait inside an item, ever */
};

static struct defer_rec *DR;

static void defer_fn(farm_loop *loop, void *ctx, int status)
{
	int id = (int)(intptr_t)ctx;
	DR->status[DR->n] = status;
	DR->order[DR->n++] = id;
	DR->could_wait |= farm_loop_can_wait(loop);
	if (id == 2 && !status) /* defers another from inside a pass */
		assert_int_equal(farm_loop_defer(loop, defer_fn, (void *)3), 0);
	if (id == 3 || id == 5)
		DR->done = 1;
}

/* A poller that defers an item once and reports no work: the loop must
 * see the item before parking. */
static int defer_poller(farm_loop *loop, void *ctx)
{
	(void)loop;
	(void)ctx;
	return 0;
}

/* Asked right before the loop parks: defers an item (once) and says
 * there is nothing to do; the loop must still not sleep on it. */
static bool defer_pending(farm_loop *loop, void *ctx)
{
	int *armed = ctx;
	if (*armed == 1) {
		*armed = 2;
		assert_int_equal(farm_loop_defer(loop, defer_fn, (void *)5), 0);
	}
	return false;
}

static void test_defer(void **state)
{
	(void)state;
	struct mn_node nd[1];
	farm_msg_attr a = {.park_after_ns = 1000};
	mn_open(nd, 1, &a);
	struct defer_rec r = {.loop = nd[0].loop};
	DR = &r;
	assert_int_equal(farm_loop_defer(NULL, defer_fn, NULL), -EINVAL);
	assert_int_equal(farm_loop_defer(nd[0].loop, NULL, NULL), -EINVAL);
	assert_int_equal(farm_loop_defer(nd[0].loop, defer_fn, (void *)1), 0);
	assert_int_equal(farm_loop_defer(nd[0].loop, defer_fn, (void *)2), 0);
	assert_int_equal(r.n, 0); /* not inline */
	(void)farm_loop_poll(nd[0].loop);
	assert_int_equal(r.n, 2); /* 1 then 2; 3 waits for the next pass */
	assert_int_equal(r.order[0], 1);
	assert_int_equal(r.order[1], 2);
	assert_int_equal(farm_loop_wait(nd[0].loop, &r.done, 5000000000ull), 0);
	assert_int_equal(r.n, 3);
	assert_int_equal(r.order[2], 3);
	assert_int_equal(r.status[2], 0);
	/* Inside an item the loop cannot be waited on; outside it can. */
	assert_false(r.could_wait);
	assert_true(farm_loop_can_wait(nd[0].loop));
	assert_false(farm_loop_can_wait(NULL));
	/* Deferred by a pass that found nothing else: no park before it
	 * runs. */
	int armed = 0;
	assert_int_equal(farm_loop_add_poller(nd[0].loop, defer_poller,
	                                      defer_pending, &armed),
	                 0);
	farm_msg_stats st0, st1;
	farm_msg_stats_get(nd[0].msg, nd[0].loop, &st0);
	r.done = 0;
	armed = 1;
	assert_int_equal(farm_loop_wait(nd[0].loop, &r.done, 5000000000ull), 0);
	farm_msg_stats_get(nd[0].msg, nd[0].loop, &st1);
	assert_int_equal(r.order[3], 5);
	assert_int_equal(st1.parks, st0.parks);
	assert_int_equal(farm_loop_defer(nd[0].loop, defer_fn, (void *)4), 0);
	farm_loop_close(nd[0].loop);
	assert_int_equal(r.n, 5);
	assert_int_equal(r.order[4], 4);
	assert_int_equal(r.status[4], -ECANCELED);
	assert_int_equal(farm_loop_open(nd[0].msg, 0, &nd[0].loop), 0);
	mn_close(nd, 1);
}

/* A connect nobody answers (udp: every datagram dropped) is not a death:
 * the call fails with -ETIMEDOUT, and once the peer answers again a later
 * call reaches it. Taking the silence as FARM_EPEERDEAD kept the live peer
 * dead to this loop until it was forgotten, which a member never is. */
static void test_connect_timeout(void **state)
{
	(void)state;
	if (strcmp(getenv("FARM_FABRIC") ? getenv("FARM_FABRIC") : "", "udp") ||
	    farm_udp_testing_set(FARM_UDP_KNOB_DROP, 0) == -ENOTSUP)
		skip(); /* shm and ofi tell a dead peer from a slow one */
	/* The connect bound is the smaller of 2 s and the death bound. */
	setenv("FARM_UDP_TIMEOUT_MS", "300", 1);
	struct mn_node nd[2];
	farm_msg_attr a = {0};
	mn_open(nd, 2, &a);
	unsetenv("FARM_UDP_TIMEOUT_MS");
	struct rpc_res r = {0};
	farm_udp_testing_set(FARM_UDP_KNOB_DROP, 1000);
	assert_int_equal(farm_msg_call(nd[0].loop, 1, 0, T_ECHO, "x", 2, 0,
	                               rpc_cont, &r),
	                 -ETIMEDOUT);
	farm_udp_testing_set(FARM_UDP_KNOB_DROP, 0);
	int rc = -ETIMEDOUT;
	uint64_t until = farm_now_ns() + 10000000000ull;
	while (rc == -ETIMEDOUT && farm_now_ns() < until) {
		rc = farm_msg_call(nd[0].loop, 1, 0, T_ECHO, "x", 2, 0,
		                   rpc_cont, &r);
		mn_pump(nd, 2, 1);
	}
	assert_int_equal(rc, 0);
	while (!r.done && farm_now_ns() < until)
		mn_pump(nd, 2, 1);
	assert_int_equal(r.done, 1);
	assert_int_equal(r.status, 0);
	assert_string_equal((char *)r.buf, "x");
	mn_close(nd, 2);
}

/* argv[1], if given: run only the tests it names (a cmocka pattern). */
int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--broken-removed")) {
		if (farm_fault_set(FARM_FP_MSG_CALL_REMOVED_WAIT, tu_switch_on,
		                   NULL)) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
		broken_removed = true;
		cmocka_set_test_filter("test_call_to_removed");
	} else if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_bad_args),
	        cmocka_unit_test(test_probe),
	        cmocka_unit_test(test_stream_wraps),
	        cmocka_unit_test(test_frame_lines),
	        cmocka_unit_test(test_hand_back_eighth),
	        cmocka_unit_test(test_call_in_pass_deadline),
	        cmocka_unit_test(test_memory),
	        cmocka_unit_test(test_full_fs),
	        cmocka_unit_test(test_backpressure),
	        cmocka_unit_test(test_rpc),
	        cmocka_unit_test(test_call_to_removed),
	        cmocka_unit_test(test_corrupt_ring),
	        cmocka_unit_test(test_config_refused),
	        cmocka_unit_test(test_cont_thread),
	        cmocka_unit_test(test_post_wakes),
	        cmocka_unit_test(test_self_order),
	        cmocka_unit_test(test_self_items),
	        cmocka_unit_test(test_defer),
	        cmocka_unit_test(test_connect_timeout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
