/*
 * Epochs (src/txn/epoch.c): memory freed from one size class is reused for
 * another only after every thread of every machine has finished the
 * operations it had open when the memory was freed.
 *
 *   local half    reader threads follow a shared pointer inside bracketed
 *                 operations and check the buffer again; writers swap
 *                 the pointer, waits for a grace period and poisons the
 *                 old buffer. A reader that ever sees poison read memory
 *                 "reused" while its operation was still open.
 *   distributed   3 machines in one process (tests/harness/asnodes.h): a large
 *                 array freed on machine 1 stays retired while machine 2
 *                 holds a transaction that read it, becomes free blocks
 *                 once that transaction ends and the epoch completes, and
 *                 is then reused by an object of another size class; a
 *                 machine that does not answer fails the epoch and nothing
 *                 is reused; low free memory starts an epoch by itself.
 *
 *   The local test runs 4 readers (more than the 2 cores) against 2
 *   writers whose grace periods run back to back, and widens the window
 *   between a reader's epoch check and its announcement with a fault hook
 *   (src/util/fault.h), where the bug fixed in epoch.c lived.
 *
 *   --broken      threads announce quiescent states with operations open:
 *                 the local test must see poison (proves it can fail).
 *   --one-pass    the protocol before the fix (one synchronize_rcu per
 *                 grace period): the local test must see poison.
 *   --stress S    the local test alone, for S seconds (make stress).
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "asnodes.h"
#include "txn/epoch.h"
#include "util/fault.h"

/* ---- local half ---------------------------------------------------------- */

#define BUF_WORDS 512
#define READERS   4    /* more than this machine's 2 cores */
#define WRITERS   2    /* grace periods requested back to back */
#define ROUNDS    1500 /* per writer */
#define CATCH     20   /* failure modes stop once this many are caught */
#define POISON    0xdeaddeaddeaddeadull

enum mode { NORMAL, BROKEN, ONE_PASS };
static enum mode mode = NORMAL;
static unsigned stress_seconds; /* --stress S: run the local test S s */

static _Atomic(uint64_t *) shared_buf;
static _Atomic bool stop_readers, stop_writers;
static _Atomic uint64_t poisoned_reads, reader_ops, writer_rounds;

/* The fault hook at the quiesce window (between reading the epoch and
 * announcing): widen it now and then, as preemption would, so a grace
 * period can end and the next begin inside it. */
static void window_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	static _Thread_local uint64_t x = 0x9e3779b97f4a7c15ull;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	if ((x & 7) == 0)
		sched_yield();
	else
		for (unsigned k = 0; k < (x >> 40 & 1023); k++)
			farm_cpu_relax();
}

static bool buf_ok(const uint64_t *b, uint64_t first, unsigned step)
{
	for (unsigned i = 0; i < BUF_WORDS; i += step)
		if (b[i] != first)
			return false;
	return true;
}

static void *reader_main(void *arg)
{
	(void)arg;
	assert_int_equal(farm_epoch_thread_enter(NULL), 0);
	uint64_t ops = 0, spin = 0;
	while (!atomic_load_explicit(&stop_readers, memory_order_relaxed)) {
		unsigned p = farm_epoch_op_begin();
		uint64_t *b =
		        atomic_load_explicit(&shared_buf, memory_order_acquire);
		uint64_t first = b[0];
		bool ok = first != POISON && buf_ok(b, first, 1);
		/* The operation spans poll passes, as a transaction waiting
		 * for replies does: poll points (and now and then a park)
		 * inside it, then look again. A grace period that ended
		 * meanwhile was wrong, and the writer poisons right after. */
		for (unsigned pass = 0; ok && pass < 3; pass++) {
			farm_epoch_quiesce();
			if ((ops & 15) == 0)
				farm_epoch_park();
			for (unsigned k = 0; k < 64 + (spin++ & 255); k++)
				farm_cpu_relax();
			if (pass == 2 && (ops & 3) == 0)
				sched_yield();
			ok = buf_ok(b, first, 7);
		}
		if (!ok)
			atomic_fetch_add(&poisoned_reads, 1);
		farm_epoch_op_end(p);
		ops++;
		farm_epoch_quiesce();
		if ((ops & 63) == 0) {
			farm_epoch_park(); /* as a loop that parks would */
			sched_yield();
		}
	}
	farm_epoch_thread_leave(NULL);
	atomic_fetch_add(&reader_ops, ops);
	return NULL;
}

struct writer {
	pthread_t th;
	unsigned id;
	uint64_t **old; /* every buffer it swapped out, freed at the end */
	unsigned n, cap;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t t_end = farm_now_ns() + stress_seconds * 1000000000ull;
	for (unsigned r = 0;; r++) {
		if (atomic_load(&stop_writers))
			break;
		if (stress_seconds ? farm_now_ns() >= t_end : r >= ROUNDS)
			break;
		if (mode != NORMAL && atomic_load(&poisoned_reads) >= CATCH)
			break;
		uint64_t *nb = malloc(BUF_WORDS * sizeof(uint64_t));
		assert_non_null(nb);
		uint64_t v = ((uint64_t)w->id << 32) | (r + 2);
		for (unsigned i = 0; i < BUF_WORDS; i++)
			nb[i] = v;
		uint64_t *old = atomic_exchange(&shared_buf, nb);
		assert_int_equal(farm_epoch_local_sync(), 0);
		/* Poisoned, never freed before the readers stop, so a wrong
		 * reader sees poison rather than someone else's data. */
		for (unsigned i = 0; i < BUF_WORDS; i++)
			old[i] = POISON;
		if (w->n == w->cap) {
			w->cap = w->cap ? 2 * w->cap : 1024;
			w->old = realloc(w->old, w->cap * sizeof(*w->old));
			assert_non_null(w->old);
		}
		w->old[w->n++] = old;
		atomic_fetch_add(&writer_rounds, 1);
	}
	return NULL;
}

static void test_local_grace_period(void **state)
{
	(void)state;
	assert_int_equal(farm_epoch_domain_get(), 0);
	farm_epoch_testing_break(mode == BROKEN);
	if (mode == ONE_PASS)
		assert_int_equal(farm_epoch_testing_one_pass(true), 0);
	bool hooked = farm_fault_set(FARM_FP_EPOCH_QUIESCE_WINDOW, window_hook,
	                             NULL) == 0;
	atomic_store(&stop_readers, false);
	atomic_store(&stop_writers, false);
	atomic_store(&poisoned_reads, 0);
	atomic_store(&reader_ops, 0);
	atomic_store(&writer_rounds, 0);
	uint64_t *first = malloc(BUF_WORDS * sizeof(uint64_t));
	assert_non_null(first);
	for (unsigned i = 0; i < BUF_WORDS; i++)
		first[i] = 1;
	atomic_store(&shared_buf, first);
	pthread_t th[READERS];
	for (int i = 0; i < READERS; i++)
		assert_int_equal(
		        pthread_create(&th[i], NULL, reader_main, NULL), 0);
	uint64_t gp0 = farm_epoch_grace_periods();
	uint64_t t0 = farm_now_ns();
	struct writer w[WRITERS] = {{0}};
	for (unsigned i = 0; i < WRITERS; i++) {
		w[i].id = i + 1;
		assert_int_equal(
		        pthread_create(&w[i].th, NULL, writer_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < WRITERS; i++)
		pthread_join(w[i].th, NULL);
	atomic_store(&stop_readers, true);
	for (int i = 0; i < READERS; i++)
		pthread_join(th[i], NULL);
	uint64_t ms = (farm_now_ns() - t0) / 1000000;
	uint64_t gps = farm_epoch_grace_periods() - gp0;
	farm_epoch_testing_break(false);
	if (mode == ONE_PASS)
		assert_int_equal(farm_epoch_testing_one_pass(false), 0);
	if (hooked)
		assert_int_equal(farm_fault_set(FARM_FP_EPOCH_QUIESCE_WINDOW,
		                                NULL, NULL),
		                 0);
	free(atomic_load(&shared_buf));
	for (unsigned i = 0; i < WRITERS; i++) {
		for (unsigned j = 0; j < w[i].n; j++)
			free(w[i].old[j]);
		free(w[i].old);
	}
	farm_epoch_domain_put();
	static const char *names[] = {"", " (broken mode)",
	                              " (one-pass protocol)"};
	printf("local: %d readers, %d writers, %" PRIu64
	       " writer rounds, %" PRIu64 " grace periods in %" PRIu64
	       " ms, %" PRIu64 " reader operations, %" PRIu64
	       " saw reused memory%s%s\n",
	       READERS, WRITERS, atomic_load(&writer_rounds), gps, ms,
	       atomic_load(&reader_ops), atomic_load(&poisoned_reads),
	       names[mode], hooked ? "" : " (no fault hooks in this build)");
	assert_true(gps >= 1);
	assert_true(atomic_load(&reader_ops) > 0);
	if (mode != NORMAL)
		assert_true(atomic_load(&poisoned_reads) > 0);
	else
		assert_int_equal(atomic_load(&poisoned_reads), 0);
}

/* ---- distributed half ---------------------------------------------------- */

#define RSIZE (16ull << 20)
/* A large array: 24 elements of 64 KiB (stored), 1.5 MiB in 2 blocks. */
#define ESZ (64u << 10)
#define NEL 24

struct galloc_res {
	volatile int done;
	int status;
	farm_gaddr a;
};

static void galloc_cb(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	(void)loop;
	struct galloc_res *r = ctx;
	r->status = status;
	r->a = a;
	r->done = 1;
}

struct op_res {
	volatile int done;
	int status;
};

static void op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct op_res *r = ctx;
	r->status = status;
	r->done = 1;
}

struct rd_res {
	volatile int done;
	int status;
};

static void rd_cb(farm_tx *tx, void *ctx, int status, const void *data,
                  uint32_t size)
{
	(void)tx;
	(void)data;
	(void)size;
	struct rd_res *r = ctx;
	r->status = status;
	r->done = 1;
}

static farm_gaddr alloc_array(struct asn_cluster *c, unsigned i)
{
	struct galloc_res r = {0};
	assert_int_equal(farm_galloc_alloc_array(c->m[i].ga, c->m[i].loop, ESZ,
	                                         NEL, FARM_GADDR_NULL,
	                                         galloc_cb, &r),
	                 0);
	asn_wait(c, &r.done);
	assert_int_equal(r.status, 0);
	return r.a;
}

static uint64_t retired_blocks(struct asn *x)
{
	uint64_t t, u, rt;
	farm_blockalloc_blocks(farm_galloc_blockalloc(x->ga), &t, &u, &rt);
	return rt;
}

static void open_manual(struct asn_cluster *c)
{
	/* The transaction managers have default attributes (background
	 * epochs under 25% free blocks): 16 MiB regions with a 2-block
	 * array retired stay above that, so only the test starts epochs
	 * until test_epoch_background fills memory on purpose. */
	asn_open(c, 3, RSIZE, NULL);
}

static void test_epoch_waits_and_reuses(void **state)
{
	(void)state;
	struct asn_cluster c;
	open_manual(&c);
	struct asn *m1 = &c.m[0], *m2 = &c.m[1];
	farm_gaddr arr = alloc_array(&c, 0);
	farm_gaddr el3 = arr + 3ull * ESZ;
	/* Machine 2 reads an element in a transaction and keeps it open. */
	farm_tx *tx;
	assert_int_equal(farm_tx_begin(m2->txm, m2->loop, &tx), 0);
	struct rd_res rr = {0};
	assert_int_equal(farm_tx_read(tx, el3, 64, rd_cb, &rr), 0);
	asn_wait(&c, &rr.done);
	assert_int_equal(rr.status, 0);
	/* Machine 1 frees the array: its blocks are retired, not free. */
	assert_int_equal(
	        farm_galloc_free_array_local(m1->ga, m1->loop, arr, ESZ, NEL),
	        0);
	assert_int_equal(retired_blocks(m1), 2);
	uint64_t gp0 = farm_epoch_grace_periods();
	struct op_res er = {0};
	assert_int_equal(farm_txm_epoch(m1->txm, m1->loop, op_cb, &er), 0);
	/* While the transaction is open, no grace period can end: every
	 * loop runs for 300 ms (a grace period takes microseconds here) and
	 * the epoch must still be waiting. */
	uint64_t t0 = farm_now_ns(), pumps = 0;
	while (farm_now_ns() - t0 < 300000000ull) {
		asn_pump(&c);
		pumps++;
	}
	assert_false(er.done);
	assert_int_equal(farm_epoch_grace_periods(), gp0);
	assert_int_equal(retired_blocks(m1), 2);
	/* The transaction ends: the epoch completes and the blocks are
	 * free. */
	farm_tx_free(tx);
	asn_wait(&c, &er.done);
	assert_int_equal(er.status, 0);
	assert_true(farm_epoch_grace_periods() > gp0);
	assert_int_equal(retired_blocks(m1), 0);
	farm_txm_stats st;
	farm_txm_stats_get(m1->txm, &st);
	assert_int_equal(st.epochs, 1);
	assert_int_equal(st.epochs_failed, 0);
	assert_int_equal(st.epoch_blocks_reclaimed, 2);
	/* Reuse for another size class: objects of a class never used
	 * before take a new slab block, the first free one, which is the
	 * array's first block. */
	struct galloc_res r = {0};
	assert_int_equal(farm_galloc_alloc(m1->ga, m1->loop, 3000,
	                                   FARM_GADDR_NULL, galloc_cb, &r),
	                 0);
	asn_wait(&c, &r.done);
	assert_int_equal(r.status, 0);
	printf("distributed: array at %#" PRIx64 " retired through %" PRIu64
	       " pumps with a reader open; after the epoch a 3000-byte "
	       "object went to %#" PRIx64 "\n",
	       arr, pumps, r.a);
	assert_true(r.a >= arr && r.a < arr + (2ull << 20));
	asn_close(&c);
}

static void test_epoch_peer_silent(void **state)
{
	(void)state;
	struct asn_cluster c;
	open_manual(&c);
	struct asn *m1 = &c.m[0];
	farm_gaddr arr = alloc_array(&c, 0);
	assert_int_equal(
	        farm_galloc_free_array_local(m1->ga, m1->loop, arr, ESZ, NEL),
	        0);
	/* Machine 3 never polls: its answer never comes. */
	const uint32_t peers[] = {2, 3};
	uint64_t got = 77;
	struct op_res er = {0};
	assert_int_equal(farm_epoch_run(m1->loop, peers, 2, 200000000ull,
	                                farm_galloc_blockalloc(m1->ga), &got,
	                                op_cb, &er),
	                 0);
	uint64_t t0 = farm_now_ns();
	while (!er.done && farm_now_ns() - t0 < 10000000000ull) {
		(void)farm_loop_poll(c.m[0].loop);
		(void)farm_loop_poll(c.m[1].loop);
	}
	assert_true(er.done);
	assert_int_equal(er.status, -ETIMEDOUT);
	assert_int_equal(got, 0);
	assert_int_equal(retired_blocks(m1), 2);
	/* With everyone answering, the next epoch frees it. */
	er = (struct op_res){0};
	assert_int_equal(farm_txm_epoch(m1->txm, m1->loop, op_cb, &er), 0);
	asn_wait(&c, &er.done);
	assert_int_equal(er.status, 0);
	assert_int_equal(retired_blocks(m1), 0);
	asn_close(&c);
}

struct rpc_res {
	volatile int done;
	int status;
};

static void rpc_cb(farm_loop *loop, void *ctx, int status, const void *reply,
                   uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct rpc_res *r = ctx;
	r->status = status;
	r->done = 1;
}

static void test_epoch_bad_requests(void **state)
{
	(void)state;
	struct asn_cluster c;
	open_manual(&c);
	const char junk[] = "not an epoch request";
	uint32_t bad_magic[2] = {0x12345678u, 0};
	struct {
		const void *p;
		uint32_t len;
	} cases[] = {{junk, sizeof(junk)},
	             {bad_magic, sizeof(bad_magic)},
	             {junk, 0}};
	uint64_t gp0 = farm_epoch_grace_periods();
	for (unsigned i = 0; i < 3; i++) {
		struct rpc_res r = {0};
		assert_int_equal(farm_msg_call(c.m[0].loop, 2, 0,
		                               FARM_MSGT_EPOCH, cases[i].p,
		                               cases[i].len, 0, rpc_cb, &r),
		                 0);
		asn_wait(&c, &r.done);
		assert_int_equal(r.status, -EINVAL);
	}
	assert_int_equal(farm_epoch_grace_periods(), gp0);
	/* API misuse. */
	assert_int_equal(farm_txm_epoch(NULL, c.m[0].loop, op_cb, NULL),
	                 -EINVAL);
	assert_int_equal(farm_txm_epoch(c.m[0].txm, c.m[0].loop, NULL, NULL),
	                 -EINVAL);
	assert_int_equal(farm_txm_epoch(c.m[0].txm, c.m[1].loop, op_cb, NULL),
	                 -EINVAL);
	farm_lf_op op;
	assert_int_equal(farm_lf_begin(c.m[0].txm, c.m[1].loop, &op), -EINVAL);
	assert_int_equal(farm_lf_begin(c.m[0].txm, c.m[0].loop, NULL), -EINVAL);
	/* A thread that drives loops must not wait for itself. */
	assert_int_equal(farm_epoch_local_sync(), -EDEADLK);
	asn_close(&c);
}

static void test_epoch_background(void **state)
{
	(void)state;
	struct asn_cluster c;
	open_manual(&c);
	struct asn *m1 = &c.m[0];
	/* Fill machine 1's memory with arrays until under a quarter of its
	 * blocks are free, then free them all: loop 0 sees retired blocks
	 * with free memory low and ends an epoch by itself. */
	farm_gaddr a[64];
	unsigned n = 0;
	farm_blockalloc *ba = farm_galloc_blockalloc(m1->ga);
	for (;;) {
		uint64_t t, u, rt;
		farm_blockalloc_blocks(ba, &t, &u, &rt);
		if ((t - u) * 100 < t * 25 || n == 64)
			break;
		a[n++] = alloc_array(&c, 0);
	}
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(farm_galloc_free_array_local(m1->ga, m1->loop,
		                                              a[i], ESZ, NEL),
		                 0);
	assert_int_equal(retired_blocks(m1), 2ull * n);
	farm_txm_stats st;
	uint64_t t0 = farm_now_ns();
	do {
		asn_pump(&c);
		farm_txm_stats_get(m1->txm, &st);
	} while (retired_blocks(m1) && farm_now_ns() - t0 < 10000000000ull);
	printf("background: %u arrays (%u blocks) freed; %" PRIu64
	       " epoch(s) reclaimed %" PRIu64 " blocks\n",
	       n, 2 * n, st.epochs, st.epoch_blocks_reclaimed);
	assert_int_equal(retired_blocks(m1), 0);
	assert_true(st.epochs >= 1);
	assert_int_equal(st.epoch_blocks_reclaimed, 2ull * n);
	asn_close(&c);
}

static int usage(const char *argv0)
{
	fprintf(stderr,
	        "usage: %s [--broken | --one-pass | --stress SECONDS]\n"
	        "  --broken      quiescent states announced with operations\n"
	        "                open: the local test must see reused memory\n"
	        "  --one-pass    grace periods of one synchronize_rcu pass\n"
	        "                (the protocol before the fix): likewise\n"
	        "  --stress S    only the local test, for S seconds\n",
	        argv0);
	return 2;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--broken")) {
			mode = BROKEN;
		} else if (!strcmp(argv[i], "--one-pass")) {
			mode = ONE_PASS;
		} else if (!strcmp(argv[i], "--stress") && i + 1 < argc) {
			stress_seconds = (unsigned)atoi(argv[++i]);
			if (!stress_seconds)
				return usage(argv[0]);
		} else {
			return usage(argv[0]);
		}
	}
	if (mode == ONE_PASS && !farm_fault_built()) {
		printf("skip: built without fault injection "
		       "(FARM_FAULT_INJECTION=OFF)\n");
		return 77;
	}
	if (mode != NORMAL || stress_seconds) {
		const struct CMUnitTest t[] = {
		        cmocka_unit_test(test_local_grace_period)};
		return cmocka_run_group_tests(t, NULL, NULL);
	}
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_local_grace_period),
	        cmocka_unit_test(test_epoch_waits_and_reuses),
	        cmocka_unit_test(test_epoch_peer_silent),
	        cmocka_unit_test(test_epoch_bad_requests),
	        cmocka_unit_test(test_epoch_background),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
