/*
 * Torn-read stress: the shm provider's READs must be atomic per cache line
 * for lines that follow the versioned-line discipline (ARCHITECTURE.md 2.1,
 * 2.5), as DMA is on hardware.
 *
 * A writer process rewrites objects of 1 to 8 cache lines in its own region
 * with local stores, FaRM's way: lock the header version, store the lock
 * value into every line version, store the data, store the new line
 * versions, store the new (unlocked) header version. The reader (this
 * process) READs whole objects through the fabric and validates them as a
 * lock-free read does: header unlocked and every line version equal to it.
 * A read that validates but whose data words do not all belong to that
 * version is torn. Cross-line tears are what the versions catch; tears
 * inside a line are what the emulation must prevent.
 *
 *   (default)   >= 10 million reads, 0 torn; the writer must really have
 *               raced the reader (some reads failed validation).
 *   --broken    the same with line atomicity switched off: it must find
 *               torn reads, which proves this test can fail.
 *   --reads N   how many reads (stress runs use more).
 */
#include "testutil.h"

#include <inttypes.h>

#include "fabric/shm_testing.h"
#include "fabric/udp_testing.h"
#ifdef FARM_HAVE_OFI
#include "fabric/ofi_testing.h"
#endif

/* Switch the guarantee under test on or off in the provider the test runs
 * on; returns the previous setting. */
static int set_knob(int on)
{
	if (strcmp(tu_provider(), "udp") == 0)
		return farm_udp_testing_set(FARM_UDP_KNOB_LINE_ATOMIC, on);
#ifdef FARM_HAVE_OFI
	if (!tu_is_shm())
		return farm_ofi_testing_set(FARM_OFI_KNOB_LINE_ATOMIC, on);
#endif
	return farm_shm_testing_set(FARM_SHM_KNOB_LINE_ATOMIC, on);
}

#define OBJS       16
#define LINES_MAX  8
#define OBJ_STRIDE (LINES_MAX * 64)
#define CTRL_OFF   (OBJS * OBJ_STRIDE) /* stop word */
#define RSIZE      (1u << 20)
#define WINDOW     8

static uint64_t n_reads = 10000000;
static bool broken;

static unsigned obj_lines(unsigned o)
{
	return 1 + o % LINES_MAX;
}

static uint64_t data_word(uint64_t ver, unsigned line, unsigned w)
{
	return (ver * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)line << 8 | w);
}

/* The writer: local stores in its own region until told to stop. */
static int writer(farm_fabric *fab, farm_region *r, int in, int out, void *arg)
{
	(void)fab;
	(void)in;
	(void)out;
	(void)arg;
	uint8_t *base = farm_region_base(r);
	_Atomic uint64_t *stop = (_Atomic uint64_t *)(void *)(base + CTRL_OFF);
	uint64_t updates = 0;
	while (!atomic_load_explicit(stop, memory_order_acquire)) {
		unsigned o = updates++ % OBJS, lines = obj_lines(o);
		_Atomic uint64_t *obj =
		        (_Atomic uint64_t *)(void *)(base + o * OBJ_STRIDE);
		uint64_t v =
		        atomic_load_explicit(&obj[0], memory_order_relaxed);
		uint64_t locked = v | 1, nv = v + 2;
		/* W0: lock the header (only writer: a store suffices, but
		 * FaRM's primary uses CAS; keep the real cost). */
		atomic_compare_exchange_strong(&obj[0], &v, locked);
		/* W1: the lock value into every line version. */
		for (unsigned l = 1; l < lines; l++)
			atomic_store_explicit(&obj[l * 8], locked,
			                      memory_order_release);
		/* W2: the data, after W1 (release fence). */
		atomic_thread_fence(memory_order_release);
		for (unsigned l = 0; l < lines; l++)
			for (unsigned w = 1; w < 8; w++)
				atomic_store_explicit(&obj[l * 8 + w],
				                      data_word(nv, l, w),
				                      memory_order_relaxed);
		/* W3: new line versions, then the unlocked header, after W2. */
		atomic_thread_fence(memory_order_release);
		for (unsigned l = 1; l < lines; l++)
			atomic_store_explicit(&obj[l * 8], nv,
			                      memory_order_relaxed);
		atomic_store_explicit(&obj[0], nv, memory_order_release);
	}
	return 0;
}

/* The writer, killed by the teardown when an assertion failed: left
 * running, it would hold ctest's output pipe until the test's timeout. */
static struct tu_machine w = {.to = -1, .from = -1};

static void test_torn(void **state)
{
	(void)state;
	/* Objects start at version 0 in zeroed memory; the check below
	 * skips version 0, whose data words are 0. */
	assert_int_equal(tu_spawn(&w, 1, RSIZE, writer, NULL), 0);

	char dir[256];
	tu_tmpdir(dir, sizeof(dir), "reader");
	farm_fabric *fab = tu_open(0, dir);
	assert_non_null(fab);
	farm_cq *cq;
	farm_ep *ep;
	assert_int_equal(farm_cq_create(fab, 64, 0, &cq), 0);
	assert_int_equal(farm_ep_connect(fab, cq, 1, w.addr, NULL, &ep), 0);
	uint8_t *buf = aligned_alloc(64, WINDOW * OBJ_STRIDE);
	farm_mr *lmr;
	assert_int_equal(farm_mr_reg(fab, buf, WINDOW * OBJ_STRIDE,
	                             FARM_ACCESS_LOCAL, &lmr),
	                 0);
	int prev = 1;
	if (broken)
		prev = set_knob(0);

	uint64_t reads = 0, valid = 0, invalid = 0, torn = 0, posted = 0;
	unsigned slot_obj[WINDOW];
	uint64_t t0 = farm_now_ns();
	/* At least n_reads, and on until the writer has raced a read (it may
	 * not have run yet on a loaded host), for a minute at most. */
	uint64_t want = n_reads;
	while (reads < want && !(broken && torn >= 20)) {
		if (reads + WINDOW >= want && !invalid &&
		    farm_now_ns() - t0 < 60ull * 1000000000ull)
			want += WINDOW;
		while (posted - reads < WINDOW && posted < want) {
			unsigned slot = (unsigned)(posted % WINDOW);
			unsigned o = (unsigned)((posted * 7) % OBJS);
			slot_obj[slot] = o;
			farm_wr r =
			        farm_wr_read(slot, buf + slot * OBJ_STRIDE, lmr,
			                     obj_lines(o) * 64, &w.desc,
			                     (uint64_t)o * OBJ_STRIDE);
			r.flags = FARM_WR_SIGNALED;
			assert_int_equal(farm_ep_post(ep, &r, NULL), 0);
			posted++;
		}
		farm_wc wc[WINDOW];
		int n = farm_cq_poll(cq, WINDOW, wc);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			assert_int_equal(wc[i].status, 0);
			unsigned slot = (unsigned)wc[i].wr_id;
			unsigned lines = obj_lines(slot_obj[slot]);
			const uint64_t *obj =
			        (const uint64_t *)(void *)(buf +
			                                   slot * OBJ_STRIDE);
			uint64_t v = obj[0];
			bool ok = !(v & 1);
			for (unsigned l = 1; ok && l < lines; l++)
				ok = obj[l * 8] == v;
			reads++;
			if (!ok) {
				invalid++;
				continue;
			}
			valid++;
			if (v == 0) /* never written yet: data words are 0 */
				continue;
			for (unsigned l = 0; l < lines; l++)
				for (unsigned x = 1; x < 8; x++)
					if (obj[l * 8 + x] !=
					    data_word(v, l, x)) {
						torn++;
						l = lines;
						break;
					}
		}
	}
	double secs = (double)(farm_now_ns() - t0) / 1e9;
	/* --broken stops early with READs outstanding: take their
	 * completions, so the stop WRITE's is the next one (a late READ's was
	 * taken for it once, on ofi at load 16). */
	for (uint64_t left = posted - reads; left;) {
		farm_wc wc[WINDOW];
		int n = farm_cq_poll(cq, WINDOW, wc);
		assert_true(n >= 0);
		left -= (uint64_t)n;
	}
	if (broken)
		set_knob(prev);
	/* Stop the writer with a one-sided WRITE of its stop word. */
	uint64_t one = 1;
	memcpy(buf, &one, 8);
	assert_int_equal(
	        tu_do(ep, cq,
	              farm_wr_write(99, buf, lmr, 8, &w.desc, CTRL_OFF)),
	        0);
	printf("%s: %" PRIu64 " reads in %.2f s (%.1f M/s): %" PRIu64
	       " valid, %" PRIu64
	       " failed validation (retried by a real reader), %" PRIu64
	       " torn; "
	       "seqlock give-ups %" PRIu64 "\n",
	       broken ? "line atomicity OFF" : "line atomicity ON", reads, secs,
	       reads / secs / 1e6, valid, invalid, torn,
	       farm_shm_testing_line_giveups());
	farm_ep_destroy(ep);
	assert_int_equal(farm_cq_destroy(cq), 0);
	farm_mr_dereg(lmr);
	free(buf);
	farm_fabric_close(fab);
	tu_rmtree(dir);
	assert_int_equal(tu_finish(&w), 0);

	/* The writer really raced the reader, or the test proves nothing. */
	assert_true(invalid > 0);
	assert_true(valid > 0);
	if (broken)
		assert_true(torn > 0);
	else
		assert_int_equal(torn, 0);
}

static int kill_writer(void **state)
{
	(void)state;
	if (w.pid > 0) {
		(void)kill(w.pid, SIGKILL);
		(void)tu_finish(&w);
	}
	return 0;
}

int main(int argc, char **argv)
{
	tu_require_provider();
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--broken"))
			broken = true;
		else if (!strcmp(argv[i], "--reads") && i + 1 < argc)
			n_reads = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: %s [--broken] [--reads N]\n",
			        argv[0]);
			return 2;
		}
	}
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_torn, kill_writer),
	};
	return cmocka_run_group_tests_name(broken ? "fabric_torn_broken"
	                                          : "fabric_torn",
	                                   tests, NULL, NULL);
}
