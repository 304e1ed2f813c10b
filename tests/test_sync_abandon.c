/*
 * The blocking wrappers that give up on a one-sided READ in flight: the
 * READ completes later, into nothing the caller owned.
 *
 * Three forked machines (nodeproc.h, kvproc.h). Machine 2 puts keys whose
 * shard machine 0 owns, then pauses its fabric to machine 0 (test-only
 * fault injection, FARM_FAULT_PAUSE: requests wait unexecuted, the READ of
 * a slow or wedged target). Each farm_kv_get_sync_timed and a
 * farm_kv_mget_sync_timed over those keys must give up at its deadline
 * (-ETIMEDOUT) with the lookup's one-sided READ still queued; the caller
 * then scribbles over and frees every buffer it passed (value, lengths,
 * statuses). The fabric is resumed and the loop driven: the READs execute
 * and complete late. The mget's first reads are seen completing then (its
 * counter of first-read answers moves only after the resume), and under
 * the sanitizers' build (FARM_SANITIZE=address) any write of a late
 * completion into a freed buffer is a use-after-free report, which fails
 * the test. Afterwards every key reads back whole.
 *
 * --broken (FARM_FP_KV_SYNC_LATE_COPY): an abandoned get still copies its
 * late value into the caller's buffer; under FARM_SANITIZE=address the
 * run must end in a use-after-free report (the proof that the test sees
 * the bug it guards against; elsewhere the write lands unseen).
 */
#include "kvproc.h"

#include <inttypes.h>

#include <farm/fabric.h>

#include "kv/kv.h"
#include "util/common.h"
#include "util/fault.h"
#include "brokenarg.h"

#define NM       NP_NM
#define ASKER    2u
#define OWNER    0u
#define RSIZE    "32M"
#define JOIN_MS  30000
#define NBUCKETS 64u
#define NK       6u
#define VLEN     24u
#define CAP      64u
#define GIVE_UP  (20ull * 1000000ull)    /* each wrapper's deadline */
#define DRAIN_NS (10000ull * 1000000ull) /* late completions land */
#define SLICE_NS (10ull * 1000000ull)

static struct np_cluster G;
static bool broken;

struct ch {
	struct np_child np;
	farm_kv *kv;
	uint8_t key[NK][16];
	uint32_t klen[NK];
};

/* What machine 2 reports. */
struct report {
	int rc;                /* 0, or the first unexpected code */
	int step;              /* where it went wrong */
	int get_rc[NK];        /* each abandoned get */
	int mget_rc;           /* the abandoned mget */
	uint64_t hits_paused;  /* mget first-read answers while paused */
	uint64_t hits_resumed; /* ... after the resume and the drain */
	unsigned read_back;    /* keys read back whole at the end */
};

static void mkval(unsigned i, uint8_t *v)
{
	for (unsigned j = 0; j < VLEN; j++)
		v[j] = (uint8_t)(i * 37u + j + 1u);
}

/* NK keys that machine OWNER's shard holds. */
static void pick_keys(struct ch *c)
{
	unsigned n = 0;
	for (unsigned i = 0; n < NK; i++) {
		int l = snprintf((char *)c->key[n], 16, "ab-%u", i);
		uint32_t kl = (uint32_t)l;
		if (farm_ht_shard_index(farm_ht_hash(c->key[n], kl), NM) !=
		    OWNER)
			continue;
		c->klen[n++] = kl;
	}
}

static void drain(struct ch *c, uint64_t ns)
{
	static const volatile int never = 0;
	(void)farm_loop_wait(c->np.loop, &never, ns);
}

static uint64_t first_hits(struct ch *c)
{
	farm_kv_stats s;
	farm_kv_stats_get(c->kv, &s);
	return s.mget_first_hits;
}

/* Every wrapper gives up with its READ paused; every buffer is freed. */
static void abandon(struct ch *c, struct report *r)
{
	for (unsigned i = 0; i < NK; i++) {
		uint8_t *val = malloc(CAP);
		uint32_t *len = malloc(sizeof(*len));
		if (!val || !len) {
			free(val);
			free(len);
			r->get_rc[i] = -ENOMEM;
			continue;
		}
		r->get_rc[i] = farm_kv_get_sync_timed(c->kv, c->np.loop,
		                                      c->key[i], c->klen[i],
		                                      val, CAP, len, GIVE_UP);
		memset(val, 0xa5, CAP);
		free(val);
		free(len);
	}
	const void *keys[NK];
	for (unsigned i = 0; i < NK; i++)
		keys[i] = c->key[i];
	uint8_t *vals = malloc((size_t)NK * CAP);
	uint32_t *lens = malloc(NK * sizeof(*lens));
	int *st = malloc(NK * sizeof(*st));
	if (vals && lens && st)
		r->mget_rc = farm_kv_mget_sync_timed(c->kv, c->np.loop, NK,
		                                     keys, c->klen, vals, CAP,
		                                     lens, st, GIVE_UP);
	else
		r->mget_rc = -ENOMEM;
	if (vals)
		memset(vals, 0x5a, (size_t)NK * CAP);
	free(vals);
	free(lens);
	free(st);
}

static void run(struct ch *c, struct report *r)
{
	uint8_t v[VLEN];
	pick_keys(c);
	for (unsigned i = 0; i < NK; i++) {
		mkval(i, v);
		int rc = farm_kv_put_sync(c->kv, c->np.loop, c->key[i],
		                          c->klen[i], v, VLEN);
		if (rc) {
			r->rc = rc;
			r->step = 1;
			return;
		}
	}
	farm_fabric *fab = farm_node_fabric(c->np.node);
	int rc = farm_fabric_fault_peer(fab, OWNER, FARM_FAULT_PAUSE, 1);
	if (rc) {
		r->rc = rc;
		r->step = 2;
		return;
	}
	if (broken &&
	    farm_fault_set(FARM_FP_KV_SYNC_LATE_COPY, tu_switch_on, NULL)) {
		r->rc = -ENOTSUP;
		r->step = 4;
		return;
	}
	uint64_t h0 = first_hits(c);
	abandon(c, r);
	r->hits_paused = first_hits(c) - h0;
	rc = farm_fabric_fault_peer(fab, OWNER, FARM_FAULT_PAUSE, 0);
	if (rc) {
		r->rc = rc;
		r->step = 3;
		return;
	}
	/* Drive the loop until the abandoned READs have all come back (or
	 * a deadline no loaded host reaches): their count is the assertion,
	 * so no fixed wait decides it. */
	uint64_t end = farm_now_ns() + DRAIN_NS;
	while (first_hits(c) - h0 < NK && farm_now_ns() < end)
		drain(c, SLICE_NS);
	drain(c, SLICE_NS); /* any completion beyond the count lands too */
	r->hits_resumed = first_hits(c) - h0;
	for (unsigned i = 0; i < NK; i++) {
		uint8_t got[CAP];
		uint32_t len = 0;
		rc = farm_kv_get_sync_timed(c->kv, c->np.loop, c->key[i],
		                            c->klen[i], got, CAP, &len,
		                            5000ull * 1000000ull);
		mkval(i, v);
		if (!rc && len == VLEN && !memcmp(got, v, VLEN))
			r->read_back++;
	}
}

static int role(struct ch *c)
{
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		if (cmd == 'Q')
			return 0;
		if (cmd == 'A') {
			struct report r;
			memset(&r, 0, sizeof(r));
			run(c, &r);
			if (np_say(&c->np, 'A', &r, sizeof(r)))
				return 20;
		}
	}
}

static int run_body(void *arg)
{
	return role(arg);
}

static int child_entry(struct np_child *np, void *arg)
{
	(void)arg;
	struct ch *c = calloc(1, sizeof(*c));
	if (!c)
		return 3;
	c->np = *np;
	struct farm_kv_attr a = {
	        .neighborhood = 4, .key_inline = 16, .val_inline = 32};
	int st = kvp_run(&c->np, RSIZE, &a, NBUCKETS, JOIN_MS, &c->kv, run_body,
	                 c);
	free(c);
	return st;
}

static int cl_cleanup(void **state)
{
	(void)state;
	np_cleanup(&G);
	return 0;
}

static void test_abandon(void **state)
{
	(void)state;
	np_start(&G, "abandon", child_entry, NULL);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&G, i, 'R', 60000);
	np_send(&G, ASKER, 'A');
	np_expect(&G, ASKER, 'A', 60000);
	struct report r;
	np_recv(&G, ASKER, &r, sizeof(r), 1000);
	printf("sync_abandon: step %d rc %d; mget %d; first reads answered "
	       "while paused %" PRIu64 ", after the resume %" PRIu64
	       "; %u of %u keys read back\n",
	       r.step, r.rc, r.mget_rc, r.hits_paused, r.hits_resumed,
	       r.read_back, NK);
	assert_int_equal(r.rc, 0);
	for (unsigned i = 0; i < NK; i++)
		assert_int_equal(r.get_rc[i], -ETIMEDOUT);
	assert_int_equal(r.mget_rc, -ETIMEDOUT);
	/* The mget's READs were still queued when it gave up, and
	 * completed after the resume, into its abandoned record. */
	assert_int_equal(r.hits_paused, 0);
	assert_int_equal(r.hits_resumed, NK);
	assert_int_equal(r.read_back, NK);
	np_quit_all(&G);
}

int main(int argc, char **argv)
{
	broken = argc > 1 && !strcmp(argv[1], "--broken");
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_teardown(test_abandon, cl_cleanup),
	};
	return cmocka_run_group_tests_name("sync_abandon", t, NULL, NULL);
}
