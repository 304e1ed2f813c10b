/*
 * A loop detached from the hashtable (farm_ht_detach) while lookups are
 * in flight on it, on three in-process machines driven by one thread
 * (asnodes.h): machine 1's loop starts four lookups that each come back
 * on a later pass (farm_ht_get and farm_ht_get_first, of a key in its
 * own shard, whose copy is deferred a pass, and of a key in another
 * machine's, a READ), none answered yet, then detaches. Each must be
 * answered exactly once, with -ECANCELED, when the loop runs on, and
 * the loop attached again must answer both keys. Under AddressSanitizer
 * (make asan) nothing may touch freed memory, and nothing may be left
 * unfreed (the child runs LeakSanitizer's check itself: it leaves by
 * _exit): a detached loop's state is freed by the last thing out.
 *
 * The run is a child process judged by its exit status, so that a
 * broken run's crash is a finding, not the end of the test.
 *
 * Then writes across the detach of the loop that serves their shard
 * (machine 0, the owner of shard 0; machine 1 writes): the owner has a
 * batch's transaction in flight and writes queued behind it when its
 * loop detaches. Each write must be answered exactly once, those queued
 * -ECANCELED (nothing starts on a detached loop), the batch's with its
 * transaction's outcome (or -ECANCELED if it was dropped before its
 * commit), and, attached again, the owner must hold exactly the keys
 * whose writes were answered 0. Once with inline values (the batch is
 * committing), once with values in objects (the batch may still be
 * allocating one). Last, a write that reaches the owner's loop after its
 * detach: answered -ECANCELED once (not -EINVAL, a malformed request),
 * nothing written; attached again, the owner takes it.
 *
 * --broken-detach: the detach frees the loop's lookup state at once
 * (FARM_FP_HT_DETACH_NOW, the code before lookups were counted): the
 * lookups then run on freed memory, and the child must fail (a wrong
 * answer, a crash, or a sanitizer's report).
 *
 * --broken-detach-writes: the detach leaves the loop's writes as before
 * (FARM_FP_HT_DETACH_WRITES_RUN_ON): the batch in flight and the writes
 * queued behind it run on after the detach, and the child must fail (a
 * queued write answered other than -ECANCELED).
 */
#include "asnodes.h"
#include "brokenarg.h"

#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "hashtable/ht.h"
#include "hashtable/ht_int.h"
#include "util/fault.h"

#define RSIZE (32ull << 20)

static struct asn_cluster C;
static farm_ht *H[3];

static void hook(struct asn *x, unsigned i)
{
	if (farm_ht_create(x->txm, x->as, x->ga, x->msg, NULL, &H[i]))
		abort();
}

struct res {
	int done, calls, status;
};

static void op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->done = 1;
}

static void get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                   uint32_t len)
{
	(void)loop;
	(void)val;
	(void)len;
	struct res *r = ctx;
	r->calls++;
	r->status = status;
	r->done = 1;
}

static struct farm_ht_shard made; /* shard_cb's */

static void shard_cb(farm_loop *loop, void *ctx, int status,
                     struct farm_ht_shard sd)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	made = sd;
	r->done = 1;
}

/* The child's checks: a finding is said on stderr and exits 1. */
#define CHECK(cond, ...)                                            \
	do {                                                        \
		if (!(cond)) {                                      \
			fprintf(stderr, "ht_detach: " __VA_ARGS__); \
			fputc('\n', stderr);                        \
			exit(1);                                    \
		}                                                   \
	} while (0)

/* A key of 16 bytes whose shard is @shard of 3. */
static void key_in(unsigned shard, char k[16])
{
	for (unsigned i = 0;; i++) {
		memset(k, 0, 16);
		snprintf(k, 16, "detach-%u", i);
		if (farm_ht_shard_index(farm_ht_hash(k, 16), 3) == shard)
			return;
	}
}

static int get_now(unsigned m, const char *k)
{
	struct res r = {0};
	int rc = farm_ht_get(H[m], C.m[m].loop, k, 16, get_cb, &r);
	if (rc)
		return rc;
	asn_wait(&C, &r.done);
	return r.status;
}

/* A write's answers (a second one would be a bug). */
struct wres {
	int calls, status;
};

static void wr_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct wres *w = ctx;
	w->calls++;
	w->status = status;
}

#define NW 4 /* writes of a round */

/* Where a round's detach finds the owner's batch (write_round). */
enum at_detach {
	COMMITTING, /* its commit in flight, writes queued behind it */
	ALLOCATING, /* an object for one of its writes being allocated */
};

/* Whether the owner's queue @q of shard 0 is where @at says. */
static bool round_ready(const struct shardq *q, enum at_detach at)
{
	if (!q->busy)
		return false;
	if (at == COMMITTING) {
		if (!q->head)
			return false;
		for (const struct pending *p = q->batch; p; p = p->next)
			if (p->status == -EINPROGRESS)
				return false;
		return true;
	}
	/* An operation not yet applied while the batch waits (its
	 * transaction's allocation is the only step that waits). */
	for (const struct pending *p = q->batch; p; p = p->next)
		if (p->status == -EINPROGRESS)
			return true;
	return false;
}

/* Where a write was at the detach. BEFORE: out of the owner's queues, its
 * answer sent. */
enum where { BEFORE, BATCH, QUEUED };

/* The round's value bytes: static, as a put may read them until it is
 * answered. */
static uint8_t round_val[256];

/* NW new keys of shard 0 (absent before the round). */
static void round_keys(const char *pfx, char key[NW][16])
{
	for (unsigned i = 0; i < NW; i++) {
		for (unsigned n = 0;; n++) {
			char b[48];
			int len = snprintf(b, sizeof(b), "%s%u-%u", pfx, i, n);
			memset(key[i], 0, 16);
			memcpy(key[i], b, len < 16 ? (size_t)len : 15);
			if (farm_ht_shard_index(farm_ht_hash(key[i], 16), 3) ==
			    0)
				break;
		}
		CHECK(get_now(1, key[i]) == -ENOENT, "%s: key %u present", pfx,
		      i);
	}
}

/* Pumps the cluster until the owner's shard-0 queue is at @at; returns
 * that queue. */
static struct shardq *await_round(const char *pfx, enum at_detach at)
{
	struct htloop *l = hl_of(H[0], C.m[0].loop);
	CHECK(l, "%s: the owner's loop is not attached", pfx);
	struct shardq *q = &l->q[0];
	uint64_t t0 = farm_now_ns();
	for (unsigned m = 0;
	     !round_ready(q, at) && farm_now_ns() - t0 < 10000000000ull;
	     m = (m + 1) % 3)
		(void)farm_loop_poll(C.m[m].loop);
	CHECK(round_ready(q, at), "%s: the owner's batch never was %s", pfx,
	      at == COMMITTING ? "committing with writes queued behind it"
	                       : "allocating");
	return q;
}

/* Where each write of the round is in the owner's queue @q now. */
static void locate_writes(const struct shardq *q, char key[NW][16],
                          enum where where[NW])
{
	for (unsigned i = 0; i < NW; i++) {
		where[i] = BEFORE;
		for (struct pending *p = q->batch; p; p = p->next)
			if (p->klen == 16 && !memcmp(p->buf, key[i], 16))
				where[i] = BATCH;
		for (struct pending *p = q->head; p; p = p->next)
			if (p->klen == 16 && !memcmp(p->buf, key[i], 16))
				where[i] = QUEUED;
	}
}

/* Detaches the owner's loop, pumps until every write is answered (and
 * more, so that a write answered twice would show), attaches it again. */
static void detach_and_drain(const char *pfx, struct wres w[NW])
{
	farm_loop *owner = C.m[0].loop;
	farm_ht_detach(H[0], owner);
	uint64_t t0 = farm_now_ns();
	for (unsigned i = 0; i < NW; i++)
		while (!w[i].calls && farm_now_ns() - t0 < 10000000000ull)
			asn_pump(&C);
	/* More passes: a write answered twice would show now. */
	for (unsigned k = 0; k < 16; k++)
		asn_pump(&C);
	CHECK(!farm_ht_attach(H[0], owner), "%s: attach again", pfx);
}

/* Write @i's answer, given where it was at the detach (@at), and its
 * key's presence agree with the contract of write_round. */
static void check_answer(const char *pfx, unsigned i, const char *key,
                         enum where where, enum at_detach at,
                         const struct wres *w)
{
	static const char *const wn[] = {"answered before the detach",
	                                 "in the batch", "queued"};
	int g = get_now(1, key);
	printf("ht_detach: %s write %u (%s) answered %d time(s): %d; "
	       "the key %s\n",
	       pfx, i, wn[where], w->calls, w->status,
	       g == 0 ? "present" : "absent");
	CHECK(w->calls == 1, "%s: write %u (%s) answered %d time(s) (want one)",
	      pfx, i, wn[where], w->calls);
	CHECK(where != QUEUED || w->status == -ECANCELED,
	      "%s: write %u queued at the detach answered %d (want "
	      "-ECANCELED: nothing starts on a detached loop)",
	      pfx, i, w->status);
	CHECK(where != BATCH || at != ALLOCATING || w->status == -ECANCELED,
	      "%s: write %u in a batch allocating at the detach "
	      "answered %d (want -ECANCELED: its transaction is "
	      "dropped)",
	      pfx, i, w->status);
	CHECK(where != BEFORE || w->status == 0,
	      "%s: write %u answered %d before the detach", pfx, i, w->status);
	CHECK(w->status == 0 || w->status == -ECANCELED,
	      "%s: write %u answered %d", pfx, i, w->status);
	CHECK(g == (w->status == 0 ? 0 : -ENOENT),
	      "%s: write %u answered %d but its key is %s (lookup %d)", pfx, i,
	      w->status, g == 0 ? "present" : "absent", g);
}

/* Attached again: the owner takes writes. */
static void write_again(const char *pfx, char key[NW][16], uint32_t vlen)
{
	for (unsigned i = 0; i < NW; i++) {
		struct res r = {0};
		CHECK(!farm_ht_put(H[1], C.m[1].loop, key[i], 16, round_val,
		                   vlen, op_cb, &r),
		      "%s: put again", pfx);
		asn_wait(&C, &r.done);
		CHECK(!r.status && get_now(1, key[i]) == 0,
		      "%s: write %u after attaching again: %d", pfx, i,
		      r.status);
	}
}

/*
 * A round of writes on the owner's loop across its detach: machine 1
 * puts NW new keys of shard 0 (values of @vlen bytes: past the slot's
 * 32, each needs an object allocated in the batch's transaction first);
 * machine 0, the owner, detaches once its batch is where @at says,
 * checked after each machine's pass. Each write must be answered once:
 * those queued -ECANCELED (no transaction took them); those in a batch
 * that is still allocating -ECANCELED (its transaction is dropped before
 * any commit); those in a batch committing, the commit's outcome (or
 * -ECANCELED); any the owner answered before the detach, 0. Attached
 * again, the owner must hold exactly the keys whose writes were answered
 * 0, and take writes again.
 */
static void write_round(const char *pfx, uint32_t vlen, enum at_detach at)
{
	char key[NW][16];
	round_keys(pfx, key);
	memset(round_val, 'w', sizeof(round_val));
	struct wres w[NW] = {{0}};
	for (unsigned i = 0; i < NW; i++)
		CHECK(!farm_ht_put(H[1], C.m[1].loop, key[i], 16, round_val,
		                   vlen, wr_cb, &w[i]),
		      "%s: put %u", pfx, i);
	struct shardq *q = await_round(pfx, at);
	enum where where[NW];
	locate_writes(q, key, where);
	detach_and_drain(pfx, w);
	for (unsigned i = 0; i < NW; i++)
		check_answer(pfx, i, key[i], where[i], at, &w[i]);
	write_again(pfx, key, vlen);
}

/*
 * A write that reaches the owner's loop after its detach (a valid
 * message: the sender picks that loop by the shard's region, whatever is
 * attached there): answered once, -ECANCELED (nothing written, as for
 * the writes queued at the detach), not -EINVAL (a malformed request);
 * the key stays absent. Attached again, the same write is taken.
 */
static void write_detached(void)
{
	farm_loop *owner = C.m[0].loop, *writer = C.m[1].loop;
	char key[16];
	memset(key, 0, sizeof(key));
	for (unsigned n = 0;; n++) {
		snprintf(key, sizeof(key), "late-%u", n);
		if (farm_ht_shard_index(farm_ht_hash(key, 16), 3) == 0)
			break;
	}
	CHECK(get_now(1, key) == -ENOENT, "late: key present");
	farm_ht_detach(H[0], owner);
	struct wres w = {0};
	CHECK(!farm_ht_put(H[1], writer, key, 16, "late", 4, wr_cb, &w),
	      "late: put");
	uint64_t t0 = farm_now_ns();
	while (!w.calls && farm_now_ns() - t0 < 10000000000ull)
		asn_pump(&C);
	for (unsigned k = 0; k < 16; k++)
		asn_pump(&C);
	CHECK(!farm_ht_attach(H[0], owner), "late: attach again");
	int g = get_now(1, key);
	printf("ht_detach: a write reaching the detached owner answered %d "
	       "time(s): %d; the key %s\n",
	       w.calls, w.status, g == 0 ? "present" : "absent");
	CHECK(w.calls == 1 && w.status == -ECANCELED,
	      "late: a write reaching the detached owner: %d answer(s), "
	      "status %d (want one, -ECANCELED: not written, and no bad "
	      "request)",
	      w.calls, w.status);
	CHECK(g == -ENOENT, "late: the write answered -ECANCELED was written");
	struct res r = {0};
	CHECK(!farm_ht_put(H[1], writer, key, 16, "late", 4, op_cb, &r),
	      "late: put again");
	asn_wait(&C, &r.done);
	CHECK(!r.status && get_now(1, key) == 0,
	      "late: the write after attaching again: %d", r.status);
}

/* The child's machines' directories, told to the parent, which removes
 * them once the child is gone (a broken run's child dies holding them). */
static int dirs_fd = -1;

static int child(void)
{
	asn_open(&C, 3, RSIZE, hook);
	for (unsigned i = 0; i < 3; i++)
		CHECK(!tu_send(dirs_fd, C.m[i].dir, sizeof(C.m[i].dir)),
		      "telling the parent machine %u's directory", i);
	close(dirs_fd);
	for (unsigned i = 0; i < 3; i++)
		CHECK(!farm_ht_attach(H[i], C.m[i].loop), "attach %u", i);
	/* A shard per machine, shard i made by machine i. */
	struct farm_ht_shard sd[3];
	for (unsigned i = 0; i < 3; i++) {
		struct res s = {0};
		CHECK(!farm_ht_make_shard(H[i], C.m[i].loop, 8, shard_cb, &s),
		      "make shard %u", i);
		asn_wait(&C, &s.done);
		CHECK(!s.status, "shard %u: %d", i, s.status);
		sd[i] = made;
	}
	for (unsigned i = 0; i < 3; i++)
		CHECK(!farm_ht_set_shards(H[i], sd, 3), "set shards %u", i);
	char local[16], remote[16];
	key_in(0, local);
	key_in(1, remote);
	for (unsigned i = 0; i < 2; i++) {
		struct res r = {0};
		CHECK(!farm_ht_put(H[0], C.m[0].loop, i ? remote : local, 16,
		                   "value", 5, op_cb, &r),
		      "put");
		asn_wait(&C, &r.done);
		CHECK(!r.status, "put: %d", r.status);
	}
	CHECK(get_now(0, local) == 0 && get_now(0, remote) == 0,
	      "the keys are not found before the detach");

	/* In flight across the detach: each comes back on a later pass. */
	struct res r[4] = {{0}};
	farm_loop *loop = C.m[0].loop;
	CHECK(!farm_ht_get(H[0], loop, local, 16, get_cb, &r[0]), "get");
	CHECK(!farm_ht_get(H[0], loop, remote, 16, get_cb, &r[1]), "get");
	CHECK(!farm_ht_get_first(H[0], loop, local, 16, get_cb, &r[2]),
	      "get_first");
	CHECK(!farm_ht_get_first(H[0], loop, remote, 16, get_cb, &r[3]),
	      "get_first");
	for (unsigned i = 0; i < 4; i++)
		CHECK(!r[i].calls, "lookup %u answered before the detach", i);
	farm_ht_detach(H[0], loop);
	for (unsigned i = 0; i < 4; i++)
		asn_wait(&C, &r[i].done);
	/* More passes: a lookup answered twice would show now. */
	for (unsigned k = 0; k < 16; k++)
		asn_pump(&C);
	for (unsigned i = 0; i < 4; i++) {
		printf("ht_detach: lookup %u answered %d time(s): %d\n", i,
		       r[i].calls, r[i].status);
		CHECK(r[i].calls == 1 && r[i].status == -ECANCELED,
		      "lookup %u in flight at the detach: %d answer(s), "
		      "status %d (want one, -ECANCELED)",
		      i, r[i].calls, r[i].status);
	}
	/* Detached: nothing starts. Attached again: both keys answer. */
	struct res none = {0};
	CHECK(farm_ht_get(H[0], loop, local, 16, get_cb, &none) == -EINVAL,
	      "a lookup started on a detached loop");
	CHECK(!farm_ht_attach(H[0], loop), "attach again");
	CHECK(get_now(0, local) == 0 && get_now(0, remote) == 0,
	      "the keys are not found after attaching again");

	/* Writes on the owner's loop across its detach: the batch
	 * committing, then the batch allocating an object. */
	write_round("wc", 8, COMMITTING);
	write_round("wa", 200, ALLOCATING);
	write_detached();
	for (unsigned i = 0; i < 3; i++) {
		farm_ht_detach(H[i], C.m[i].loop);
		farm_ht_destroy(H[i]);
	}
	asn_close(&C);
	fflush(stdout);
#if defined(__SANITIZE_ADDRESS__)
	/* The child leaves by _exit, which skips LeakSanitizer's own check:
	 * a detached loop's state left behind (kept for a batch in flight,
	 * never freed) shows here. */
	CHECK(!__lsan_do_recoverable_leak_check(), "memory leaked");
#endif
	return 0;
}

int main(int argc, char **argv)
{
	const char *broken = NULL;
	enum farm_fault_point fp = FARM_FP_COUNT;
	if (argc == 2 && !strcmp(argv[1], "--broken-detach")) {
		broken = argv[1];
		fp = FARM_FP_HT_DETACH_NOW;
	} else if (argc == 2 && !strcmp(argv[1], "--broken-detach-writes")) {
		broken = argv[1];
		fp = FARM_FP_HT_DETACH_WRITES_RUN_ON;
	} else if (argc != 1) {
		fprintf(stderr,
		        "usage: %s [--broken-detach | "
		        "--broken-detach-writes]\n",
		        argv[0]);
		return 2;
	}
	if (broken) {
		if (!farm_fault_built()) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
		/* Inherited by the child (forked). */
		if (farm_fault_set(fp, tu_switch_on, NULL))
			return 1;
	}
	fflush(stdout);
	int fds[2];
	if (pipe(fds))
		return 1;
	pid_t pid = tu_fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(fds[0]);
		dirs_fd = fds[1];
		_exit(child());
	}
	close(fds[1]);
	char dir[sizeof(C.m[0].dir)];
	char dirs[3][sizeof(C.m[0].dir)];
	unsigned nd = 0;
	while (nd < 3 && tu_recv(fds[0], dir, sizeof(dir)) == 0)
		memcpy(dirs[nd++], dir, sizeof(dir));
	close(fds[0]);
	int st = tu_reap(pid);
	for (unsigned i = 0; i < nd; i++) /* gone already after a clean run */
		tu_rmtree(dirs[i]);
	if (broken) {
		if (!st) {
			printf("ht_detach %s: %s, and no check noticed\n",
			       broken,
			       fp == FARM_FP_HT_DETACH_NOW
			               ? "the lookups ran on after the detach "
			                 "freed their state"
			               : "the writes queued at the detach ran "
			                 "on after it");
			return 1;
		}
		printf("ht_detach %s: the child failed (%d), as it must\n",
		       broken, st);
		return 0;
	}
	printf("ht_detach: the child %s (%d)\n", st ? "failed" : "passed", st);
	return st ? 1 : 0;
}
