/*
 * The blocking put and delete retry a refusal: an owner that answers
 * -EAGAIN (its shard moving between machines, nothing written) is asked
 * again until it accepts, within the wrapper's deadline.
 *
 * Three forked machines (nodeproc.h, kvproc.h). The owner (machine 0)
 * refuses the next REFUSALS shipped writes (test-only switch
 * FARM_FP_HT_REFUSE_OP, the answer it gives a write for a shard it does
 * not serve), then serves again. The asker (machine 2):
 *  - farm_kv_put_sync of a key the owner's shard holds: 0, and the value
 *    reads back; the owner counted every refusal;
 *  - farm_kv_del_sync the same way: 0, the key gone;
 *  - with the owner refusing without end, farm_kv_put_sync_timed with a
 *    deadline: it stops asking at the deadline, not at the 10 s bound of
 *    a wrapper without one, with -EAGAIN (or -ETIMEDOUT where the deadline
 *    cut the wait for the last refusal), and nothing was written: the key
 *    is still absent.
 *
 *  - farm_kv_get_sync on the owner path (kv_lookup = owner) while the
 *    owner refuses gets for GET_REFUSE_MS (test-only switch
 *    FARM_FP_KV_OWNER_REFUSE_GET, the answer of a machine that is not the
 *    shard's primary), longer than the owner path's own second of
 *    retries: 0 with the value, after the refusals ended.
 *
 * --broken (FARM_FP_KV_SYNC_NO_RETRY): the wrappers return the first
 * refusal; the first put must then end in -EAGAIN (the proof that the
 * test's first check sees the retry's absence). --broken-get: the same
 * switch, the get step alone: it must end in -EAGAIN.
 */
#include "kvproc.h"

#include <inttypes.h>

#include "kv/kv.h"
#include "util/common.h"
#include "util/fault.h"
#include "brokenarg.h"

#define NM             NP_NM
#define ASKER          2u
#define OWNER          0u
#define RSIZE          "32M"
#define JOIN_MS        30000
#define NBUCKETS       64u
#define VLEN           24u
#define REFUSALS       5
#define FOREVER        1000000
#define DEADLINE       (200ull * 1000000ull)
#define NO_DEADLINE_MS 10000u /* sync.c's RETRY_FOR_NS */
/* Past owner_lookup.c's OGET_REFUSED_NS (1 s), with margin for a loaded
 * host's late resends. */
#define GET_REFUSE_MS 2500u

static struct np_cluster G;
static bool broken, broken_get;

/* The owner's refusals still to give; the hook counts them down and
 * unhooks itself with the last, so exactly that many writes are refused
 * (the switch is true on the call whose hook ran). */
static atomic_int left;
static atomic_int refused;

static void refuse_hook(enum farm_fault_point fp, void *arg)
{
	(void)arg;
	atomic_fetch_add(&refused, 1);
	if (atomic_fetch_sub(&left, 1) == 1)
		(void)farm_fault_set(fp, NULL, NULL);
}

/* The owner's get refusals: every get for GET_REFUSE_MS from the first,
 * then the hook unhooks itself. */
static _Atomic uint64_t refuse_until;

static void refuse_get_hook(enum farm_fault_point fp, void *arg)
{
	(void)arg;
	uint64_t now = farm_now_ns(), zero = 0;
	atomic_fetch_add(&refused, 1);
	(void)atomic_compare_exchange_strong(&refuse_until, &zero,
	                                     now + GET_REFUSE_MS * 1000000ull);
	if (now >= atomic_load(&refuse_until))
		(void)farm_fault_set(fp, NULL, NULL);
}

struct ch {
	struct np_child np;
	farm_kv *kv;
};

/* What the asker reports. */
struct report {
	int put_rc, got_rc, del_rc, gone_rc; /* retried put and delete */
	int timed_rc, absent_rc;             /* refused until the deadline */
	uint64_t timed_ms;                   /* how long that put took */
	int stored_rc, get_rc;               /* the get refused a while */
	uint64_t get_ms;
};

/* The @nth key (from 0) that the owner's shard holds. */
static uint32_t pick_key(char *k, size_t cap, unsigned nth)
{
	for (unsigned i = 0;; i++) {
		int l = snprintf(k, cap, "retry-%u", i);
		if (farm_ht_shard_index(farm_ht_hash(k, (uint32_t)l), NM) !=
		    OWNER)
			continue;
		if (nth-- == 0)
			return (uint32_t)l;
	}
}

/* The owner arms its refusals (@n writes, or gets for a while with @n
 * 0) and tells the test it has. */
static int arm(struct ch *c, int n)
{
	atomic_store(&left, n);
	atomic_store(&refuse_until, 0);
	int rc = n ? farm_fault_set(FARM_FP_HT_REFUSE_OP, refuse_hook, NULL)
	           : farm_fault_set(FARM_FP_KV_OWNER_REFUSE_GET,
	                            refuse_get_hook, NULL);
	int r = atomic_load(&refused);
	if (np_say(&c->np, 'H', &rc, sizeof(rc)) ||
	    np_say(&c->np, 'N', &r, sizeof(r)))
		return 20;
	return 0;
}

static void ask(struct ch *c, struct report *r)
{
	char k[32], got[64];
	uint8_t v[VLEN];
	memset(v, 0x3c, sizeof(v));
	uint32_t kl = pick_key(k, sizeof(k), 0), len = 0;
	r->put_rc = farm_kv_put_sync(c->kv, c->np.loop, k, kl, v, VLEN);
	r->got_rc = farm_kv_get_sync(c->kv, c->np.loop, k, kl, got, sizeof(got),
	                             &len);
	if (!r->got_rc && (len != VLEN || memcmp(got, v, VLEN)))
		r->got_rc = -EILSEQ;
}

static void ask_del(struct ch *c, struct report *r)
{
	char k[32], got[64];
	uint32_t kl = pick_key(k, sizeof(k), 0), len = 0;
	r->del_rc = farm_kv_del_sync(c->kv, c->np.loop, k, kl);
	r->gone_rc = farm_kv_get_sync(c->kv, c->np.loop, k, kl, got,
	                              sizeof(got), &len);
}

static void ask_timed(struct ch *c, struct report *r)
{
	char k[32], got[64];
	uint8_t v[VLEN];
	memset(v, 0x5e, sizeof(v));
	/* Another key of the owner's: the first was deleted. */
	uint32_t kl = pick_key(k, sizeof(k), 1), len = 0;
	uint64_t t0 = farm_now_ns();
	r->timed_rc = farm_kv_put_sync_timed(c->kv, c->np.loop, k, kl, v, VLEN,
	                                     DEADLINE);
	r->timed_ms = (farm_now_ns() - t0) / 1000000ull;
	r->absent_rc = farm_kv_get_sync(c->kv, c->np.loop, k, kl, got,
	                                sizeof(got), &len);
}

#define GET_NTH 2u /* a third key of the owner's */

static void store_for_get(struct ch *c, struct report *r)
{
	char k[32];
	uint8_t v[VLEN];
	memset(v, 0x7a, sizeof(v));
	uint32_t kl = pick_key(k, sizeof(k), GET_NTH);
	r->stored_rc = farm_kv_put_sync(c->kv, c->np.loop, k, kl, v, VLEN);
}

static void ask_get(struct ch *c, struct report *r)
{
	char k[32], got[64];
	uint8_t v[VLEN];
	memset(v, 0x7a, sizeof(v));
	uint32_t kl = pick_key(k, sizeof(k), GET_NTH), len = 0;
	r->get_rc = farm_kv_set_lookup(c->kv, FARM_KV_LOOKUP_OWNER);
	uint64_t t0 = farm_now_ns();
	if (!r->get_rc)
		r->get_rc = farm_kv_get_sync(c->kv, c->np.loop, k, kl, got,
		                             sizeof(got), &len);
	r->get_ms = (farm_now_ns() - t0) / 1000000ull;
	if (!r->get_rc && (len != VLEN || memcmp(got, v, VLEN)))
		r->get_rc = -EILSEQ;
}

static int asker_cmd(struct ch *c, int cmd)
{
	struct report r;
	memset(&r, 0, sizeof(r));
	if ((broken || broken_get) &&
	    farm_fault_set(FARM_FP_KV_SYNC_NO_RETRY, tu_switch_on, NULL))
		return 21;
	if (cmd == 'P')
		ask(c, &r);
	else if (cmd == 'W')
		store_for_get(c, &r);
	else if (cmd == 'G')
		ask_get(c, &r);
	else if (cmd == 'D')
		ask_del(c, &r);
	else
		ask_timed(c, &r);
	return np_say(&c->np, (char)cmd, &r, sizeof(r)) ? 20 : 0;
}

static int role(struct ch *c)
{
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		int st = 0;
		if (cmd == 'Q' || cmd < 0)
			return cmd < 0 ? 22 : 0;
		if (cmd == 'A')
			st = arm(c, REFUSALS);
		else if (cmd == 'F')
			st = arm(c, FOREVER);
		else if (cmd == 'g')
			st = arm(c, 0);
		else if (cmd == 'O') {
			(void)farm_fault_set(FARM_FP_HT_REFUSE_OP, NULL, NULL);
			(void)farm_fault_set(FARM_FP_KV_OWNER_REFUSE_GET, NULL,
			                     NULL);
			int r = atomic_load(&refused);
			st = np_say(&c->np, 'N', &r, sizeof(r)) ? 20 : 0;
		} else if (strchr("PDTWG", cmd))
			st = asker_cmd(c, cmd);
		if (st)
			return st;
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

/* The owner arms @cmd's refusals; its refusal count before. */
static int owner_arm(char cmd)
{
	int rc = -1, n = -1;
	np_send(&G, OWNER, cmd);
	np_expect(&G, OWNER, 'H', 10000);
	np_recv(&G, OWNER, &rc, sizeof(rc), 1000);
	np_expect(&G, OWNER, 'N', 10000);
	np_recv(&G, OWNER, &n, sizeof(n), 1000);
	if (rc == -ENOTSUP) {
		printf("skipped: built without fault injection\n");
		skip();
	}
	assert_int_equal(rc, 0);
	return n;
}

static struct report asker(char cmd)
{
	struct report r;
	np_send(&G, ASKER, cmd);
	np_expect(&G, ASKER, cmd, 60000);
	np_recv(&G, ASKER, &r, sizeof(r), 1000);
	return r;
}

static int owner_refused(void)
{
	int n = -1;
	np_send(&G, OWNER, 'O');
	np_expect(&G, OWNER, 'N', 10000);
	np_recv(&G, OWNER, &n, sizeof(n), 1000);
	return n;
}

/* A get on the owner path refused past the owner path's own retries. */
static void get_step(void)
{
	struct report r = asker('W');
	assert_int_equal(r.stored_rc, 0);
	int n0 = owner_arm('g');
	r = asker('G');
	int n1 = owner_refused();
	printf("owner-path get refused for %u ms: %s after %" PRIu64
	       " ms and %d refusals%s\n",
	       GET_REFUSE_MS, farm_strerror(r.get_rc), r.get_ms, n1 - n0,
	       broken_get ? " [broken: the wrappers do not retry]" : "");
	if (broken_get) {
		if (r.get_rc != -EAGAIN)
			fail_msg(
			        "--broken-get: the get did not return the "
			        "refusal (%d): the test cannot see the retry's "
			        "absence",
			        r.get_rc);
		return;
	}
	assert_int_equal(r.get_rc, 0);
	assert_true(r.get_ms >= GET_REFUSE_MS);
	assert_true(n1 - n0 >= 2);
}

static void test_retry(void **state)
{
	(void)state;
	np_start(&G, "syncretry", child_entry, NULL);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&G, i, 'R', 60000);
	if (broken_get) {
		get_step();
		np_quit_all(&G);
		return;
	}
	int n0 = owner_arm('A');
	struct report r = asker('P');
	int n1 = owner_refused();
	printf("put: %s after %d refusals%s; read back: %s\n",
	       farm_strerror(r.put_rc), n1 - n0,
	       broken ? " [broken: the wrappers do not retry]" : "",
	       farm_strerror(r.got_rc));
	if (broken) {
		/* The proof: without the retry the refusal reaches the
		 * caller, which this test's first check fails on. */
		if (r.put_rc != -EAGAIN)
			fail_msg(
			        "--broken: the put did not return the "
			        "refusal (%d): the test cannot see the retry's "
			        "absence",
			        r.put_rc);
		np_quit_all(&G);
		return;
	}
	assert_int_equal(r.put_rc, 0);
	assert_int_equal(n1 - n0, REFUSALS);
	assert_int_equal(r.got_rc, 0);

	n0 = owner_arm('A');
	r = asker('D');
	n1 = owner_refused();
	printf("delete: %s after %d refusals; then get: %s\n",
	       farm_strerror(r.del_rc), n1 - n0, farm_strerror(r.gone_rc));
	assert_int_equal(r.del_rc, 0);
	assert_int_equal(n1 - n0, REFUSALS);
	assert_int_equal(r.gone_rc, -ENOENT);

	n0 = owner_arm('F');
	r = asker('T');
	n1 = owner_refused();
	printf("put refused without end, deadline %llu ms: %s after %" PRIu64
	       " ms and %d refusals; then get: %s\n",
	       DEADLINE / 1000000ull, farm_strerror(r.timed_rc), r.timed_ms,
	       n1 - n0, farm_strerror(r.absent_rc));
	assert_true(r.timed_rc == -EAGAIN || r.timed_rc == -ETIMEDOUT);
	assert_true(n1 - n0 >= 1);
	assert_true(r.timed_ms >= DEADLINE / 1000000ull);
	assert_true(r.timed_ms < NO_DEADLINE_MS);
	assert_int_equal(r.absent_rc, -ENOENT);

	get_step();
	np_quit_all(&G);
}

int main(int argc, char **argv)
{
	broken = argc > 1 && !strcmp(argv[1], "--broken");
	broken_get = argc > 1 && !strcmp(argv[1], "--broken-get");
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_teardown(test_retry, cl_cleanup),
	};
	return cmocka_run_group_tests_name("sync_retry", t, NULL, NULL);
}
