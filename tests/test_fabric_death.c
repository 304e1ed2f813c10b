/*
 * Peer death: kill -9 a machine while this one streams READs and WRITEs at
 * it and at a second machine. The dead machine's outstanding and new
 * requests must complete with an error within 100 ms of the kill; requests
 * to the survivor must keep succeeding. Detection is the shm provider's
 * pidfd watchdog (ARCHITECTURE.md 2.1 (d)).
 */
#include "testutil.h"

#include <inttypes.h>
#include <signal.h>
#include <sys/wait.h>

#include <farm/region.h>

#ifdef FARM_HAVE_OFI
#include "fabric/ofi_testing.h"
#endif

/* --broken-holder (ofi): the provider keeps one liveness for every
 * address of an id (FARM_OFI_KNOB_HOLDER 0): the test must see the new
 * holder of a reused id declared dead for its old holder's failure. */
static bool broken_holder;
/* --broken-fence (ofi): the target lets every holder of an id in and
 * closes no keys (FARM_OFI_KNOB_FENCE 0): a zombie's WRITE must land. */
static bool broken_fence;

#define RSIZE    (4u << 20)
#define DEPTH    16
#define BOUND_NS (100ull * 1000000ull)
/* ofi: libfabric's tcp provider reports nothing when the peer's process
 * dies; the provider's bound (FARM_OFI_TIMEOUT_MS, FARM_UDP_TIMEOUT_MS)
 * does, set short here, but not so short that a victim descheduled on a
 * loaded 2-core host (300 ms was seen) is declared dead before its kill. */
#define OFI_TIMEOUT_MS "400"
#define OFI_BOUND_NS   (1000ull * 1000000ull)

struct stream {
	farm_ep *ep;
	farm_mr_desc rd;
	uint64_t outstanding, ok, failed;
	uint64_t rng;
};

static void refill(struct stream *s, uint8_t *buf, farm_mr *lmr, uint64_t tag)
{
	while (s->outstanding < DEPTH) {
		uint64_t off = (farm_rand64(&s->rng) % (RSIZE / 64)) * 64;
		farm_wr wr =
		        (s->rng & 1)
		                ? farm_wr_read(tag, buf, lmr, 64, &s->rd, off)
		                : farm_wr_write(tag, buf, lmr, 64, &s->rd, off);
		assert_int_equal(farm_ep_post(s->ep, &wr, NULL), 0);
		s->outstanding++;
	}
}

static void test_kill_peer(void **state)
{
	(void)state;
	struct tu_machine victim, survivor;
	assert_int_equal(tu_spawn(&victim, 1, RSIZE, NULL, NULL), 0);
	assert_int_equal(tu_spawn(&survivor, 2, RSIZE, NULL, NULL), 0);
	char dir[256];
	tu_tmpdir(dir, sizeof(dir), "init");
	farm_fabric *fab = tu_open(0, dir);
	assert_non_null(fab);
	farm_cq *cq;
	assert_int_equal(farm_cq_create(fab, 64, 0, &cq), 0);
	uint8_t *buf = aligned_alloc(64, 4096);
	memset(buf, 0x3c, 4096);
	farm_mr *lmr;
	assert_int_equal(farm_mr_reg(fab, buf, 4096, FARM_ACCESS_LOCAL, &lmr),
	                 0);
	struct stream s[2] = {{.rd = victim.desc, .rng = 1},
	                      {.rd = survivor.desc, .rng = 2}};
	assert_int_equal(
	        farm_ep_connect(fab, cq, 1, victim.addr, NULL, &s[0].ep), 0);
	assert_int_equal(
	        farm_ep_connect(fab, cq, 2, survivor.addr, NULL, &s[1].ep), 0);

	uint64_t t_kill = 0, t_first_err = 0, t_all_failed = 0;
	uint64_t ok_after_err = 0, survivor_ok_after_kill = 0;
	uint64_t deadline = farm_now_ns() + 20ull * 1000000000ull;
	/* A network provider runs far fewer requests per second. */
	const uint64_t enough = tu_is_shm() ? 20000 : 2000;
	for (;;) {
		assert_true(farm_now_ns() < deadline);
		refill(&s[0], buf, lmr, 0);
		refill(&s[1], buf + 64, lmr, 1);
		farm_wc wc[2 * DEPTH];
		int n = farm_cq_poll(cq, 2 * DEPTH, wc);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			struct stream *x = &s[wc[i].wr_id];
			x->outstanding--;
			if (wc[i].status == 0) {
				x->ok++;
				if (x == &s[0] && t_first_err)
					ok_after_err++;
				if (x == &s[1] && t_kill)
					survivor_ok_after_kill++;
				continue;
			}
			/* Only the victim may fail, and only after the kill. */
			assert_ptr_equal(x, &s[0]);
			assert_true(t_kill != 0);
			assert_true(wc[i].status == FARM_EPEERDEAD ||
			            wc[i].status == FARM_EFLUSHED);
			x->failed++;
			if (!t_first_err)
				t_first_err = farm_now_ns();
		}
		if (!t_kill && s[0].ok >= enough) {
			t_kill = farm_now_ns();
			assert_int_equal(kill(victim.pid, SIGKILL), 0);
		}
		/* Every request the victim had outstanding, and those posted
		 * since, have failed: we have seen more failures than the
		 * window can hold. */
		if (t_first_err && !t_all_failed && s[0].failed >= 2 * DEPTH)
			t_all_failed = farm_now_ns();
		if (t_all_failed && survivor_ok_after_kill >= enough)
			break;
	}
	printf("victim: %" PRIu64
	       " ok before its death; first error %.2f ms after "
	       "kill -9, all outstanding failed %.2f ms after; survivor: "
	       "%" PRIu64 " ok since the kill\n",
	       s[0].ok, (double)(t_first_err - t_kill) / 1e6,
	       (double)(t_all_failed - t_kill) / 1e6, survivor_ok_after_kill);
	uint64_t bound = tu_is_shm() ? BOUND_NS : OFI_BOUND_NS;
	assert_true(t_first_err - t_kill <= bound);
	assert_true(t_all_failed - t_kill <= bound);
	assert_int_equal(ok_after_err, 0);
	assert_false(farm_ep_usable(s[0].ep));
	assert_true(farm_ep_usable(s[1].ep));
	/* The dead machine cannot be reached again. */
	farm_ep *again = NULL;
	assert_int_equal(farm_ep_connect(fab, cq, 1, victim.addr, NULL, &again),
	                 tu_unreachable());

	/* Drain, then tear down. */
	while (s[0].outstanding + s[1].outstanding) {
		farm_wc wc[2 * DEPTH];
		int n = farm_cq_poll(cq, 2 * DEPTH, wc);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++)
			s[wc[i].wr_id].outstanding--;
	}
	farm_ep_destroy(s[0].ep);
	farm_ep_destroy(s[1].ep);
	assert_int_equal(farm_cq_destroy(cq), 0);
	farm_mr_dereg(lmr);
	free(buf);
	farm_fabric_close(fab);
	tu_rmtree(dir);
	assert_int_equal(tu_finish(&victim), 128 + SIGKILL);
	assert_int_equal(tu_finish(&survivor), 0);
}

/*
 * A reused id (ofi): machine 1 is killed and a new process takes its id
 * at another address (a new holder, src/coord/README.md). A request on
 * this machine's endpoint to the old holder, posted after the new holder
 * was connected, fails without a wait, and its failure is the old
 * holder's alone: the new holder is served throughout, for three times
 * the death bound. Before, the id's liveness was one for every address:
 * the new connect revived the old holder's endpoint, its request timed
 * out at the dead address and declared the id, the new holder with it,
 * dead (what --broken-holder shows).
 */
static void test_reused_id(void **state)
{
	(void)state;
	if (strcmp(tu_provider(), "ofi") != 0)
		skip();
	struct tu_machine old, heir;
	assert_int_equal(tu_spawn(&old, 1, RSIZE, NULL, NULL), 0);
	char dir[256];
	tu_tmpdir(dir, sizeof(dir), "reuse");
	farm_fabric *fab = tu_open(0, dir);
	assert_non_null(fab);
	farm_cq *cq;
	assert_int_equal(farm_cq_create(fab, 64, 0, &cq), 0);
	uint8_t *buf = aligned_alloc(64, 4096);
	farm_mr *lmr;
	assert_int_equal(farm_mr_reg(fab, buf, 4096, FARM_ACCESS_LOCAL, &lmr),
	                 0);
	farm_ep *ep_old, *ep_new;
	assert_int_equal(farm_ep_connect(fab, cq, 1, old.addr, NULL, &ep_old),
	                 0);
	farm_wr wr = farm_wr_read(0, buf, lmr, 64, &old.desc, 0);
	assert_int_equal(farm_ep_post(ep_old, &wr, NULL), 0);
	farm_wc wc[DEPTH];
	int n;
	while ((n = farm_cq_poll(cq, DEPTH, wc)) == 0)
		;
	assert_int_equal(n, 1);
	assert_int_equal(wc[0].status, 0);
	assert_int_equal(kill(old.pid, SIGKILL), 0);
	assert_int_equal(tu_finish(&old), 128 + SIGKILL);

	assert_int_equal(tu_spawn(&heir, 1, RSIZE, NULL, NULL), 0);
	assert_string_not_equal(heir.addr, old.addr);
	assert_int_equal(farm_ep_connect(fab, cq, 1, heir.addr, NULL, &ep_new),
	                 0);
	/* The old holder's endpoint: its request fails (at post or at
	 * completion), and only it. */
	bool old_done = farm_ep_post(ep_old, &wr, NULL) != 0;
	uint64_t old_failed_ns = old_done ? farm_now_ns() : 0;
	struct stream s = {.ep = ep_new, .rd = heir.desc, .rng = 3};
	uint64_t new_failed = 0;
	uint64_t t0 = farm_now_ns();
	uint64_t span = 3ull * (uint64_t)atoi(OFI_TIMEOUT_MS) * 1000000ull;
	while (!old_done || farm_now_ns() - t0 < span) {
		assert_true(farm_now_ns() - t0 < 20ull * 1000000000ull);
		if (farm_ep_usable(ep_new))
			refill(&s, buf, lmr, 1);
		n = farm_cq_poll(cq, DEPTH, wc);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id == 0) {
				assert_int_not_equal(wc[i].status, 0);
				old_done = true;
				old_failed_ns = farm_now_ns();
				continue;
			}
			s.outstanding--;
			if (wc[i].status == 0)
				s.ok++;
			else
				new_failed++;
		}
		if (!farm_ep_usable(ep_new) && !s.outstanding)
			break;
	}
	printf("reused id: old holder's request failed %.1f ms after the "
	       "new connect; new holder: %" PRIu64 " ok, %" PRIu64
	       " failed, usable %d\n",
	       (double)(old_failed_ns - t0) / 1e6, s.ok, new_failed,
	       farm_ep_usable(ep_new));
	if (broken_holder) {
		assert_true(new_failed > 0 || !farm_ep_usable(ep_new));
	} else {
		assert_false(farm_ep_usable(ep_old));
		assert_int_equal(new_failed, 0);
		assert_true(farm_ep_usable(ep_new));
		assert_true(s.ok > 0);
	}
	while (s.outstanding) {
		n = farm_cq_poll(cq, DEPTH, wc);
		assert_true(n >= 0);
		s.outstanding -= (uint64_t)n;
	}
	farm_ep_destroy(ep_old);
	farm_ep_destroy(ep_new);
	assert_int_equal(farm_cq_destroy(cq), 0);
	farm_mr_dereg(lmr);
	free(buf);
	farm_fabric_close(fab);
	tu_rmtree(dir);
	assert_int_equal(tu_finish(&heir), 0);
}

/*
 * A connect that gets no answer (ofi): the peer's process is stopped
 * (SIGSTOP) after a first connect, so libfabric takes the connection
 * check, which nobody answers. farm_ep_connect returns -ETIMEDOUT (a
 * slow peer looks so; a later connect may succeed, as on udp), not
 * -ECONNREFUSED, which msg takes for the peer's death; once the peer
 * runs again a connect succeeds.
 */
/* Connect, again while nothing answers in the bound (a loaded host: a
 * peer's progress thread not run for 3 s was seen at load 55). */
static int connect_patient(farm_fabric *fab, farm_cq *cq, uint32_t id,
                           const char *addr, farm_ep **ep)
{
	uint64_t t0 = farm_now_ns();
	int rc;
	while ((rc = farm_ep_connect(fab, cq, id, addr, NULL, ep)) ==
	               -ETIMEDOUT &&
	       farm_now_ns() - t0 < 60ull * 1000000000ull)
		;
	return rc;
}

static void test_connect_unanswered(void **state)
{
	(void)state;
	if (strcmp(tu_provider(), "ofi") != 0)
		skip();
	struct tu_machine peer;
	assert_int_equal(tu_spawn(&peer, 1, RSIZE, NULL, NULL), 0);
	char dir[256];
	tu_tmpdir(dir, sizeof(dir), "unanswered");
	farm_fabric *fab = tu_open(0, dir);
	assert_non_null(fab);
	farm_cq *cq;
	assert_int_equal(farm_cq_create(fab, 16, 0, &cq), 0);
	farm_ep *ep;
	assert_int_equal(connect_patient(fab, cq, 1, peer.addr, &ep), 0);
	farm_ep_destroy(ep);
	assert_int_equal(kill(peer.pid, SIGSTOP), 0);
	int ws; /* stopped once this returns (the signal is asynchronous) */
	assert_int_equal(waitpid(peer.pid, &ws, WUNTRACED), peer.pid);
	assert_true(WIFSTOPPED(ws));
	uint64_t t0 = farm_now_ns();
	int rc = farm_ep_connect(fab, cq, 1, peer.addr, NULL, &ep);
	uint64_t took = farm_now_ns() - t0;
	assert_int_equal(kill(peer.pid, SIGCONT), 0);
	printf("connect to a stopped peer: %s after %.0f ms\n",
	       farm_strerror(rc), (double)took / 1e6);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_int_equal(connect_patient(fab, cq, 1, peer.addr, &ep), 0);
	farm_ep_destroy(ep);
	assert_int_equal(farm_cq_destroy(cq), 0);
	farm_fabric_close(fab);
	tu_rmtree(dir);
	assert_int_equal(tu_finish(&peer), 0);
}

/*
 * A zombie of a reused id (ofi): machine 1's old holder (a) still runs
 * when the target (b, machine 2) revokes id 1 and admits a new holder (n)
 * at its own address. The zombie ignores the target's FENCED notice
 * (FARM_OFI_KNOB_HEED_FENCE 0, as a process stopped while it came), so
 * its WRITE, CAS and READ go out with the keys it holds, posted at once
 * on three endpoints made before the fence: libfabric at the target must
 * refuse them (their keys were closed), and not a byte changes. The new
 * holder WRITEs and READs before and after; a new connect of the zombie
 * is fenced (its HELLO refused: FARM_EFENCED). --broken-fence: the
 * target closes no keys, and the zombie's WRITE lands.
 */
static void test_zombie_fenced(void **state)
{
	(void)state;
#ifndef FARM_HAVE_OFI
	skip();
#else
	if (strcmp(tu_provider(), "ofi") != 0)
		skip();
	char dir_a[256], dir_b[256], dir_n[256];
	tu_tmpdir(dir_a, sizeof(dir_a), "zombie");
	tu_tmpdir(dir_b, sizeof(dir_b), "target");
	tu_tmpdir(dir_n, sizeof(dir_n), "heir");
	farm_fabric *a = tu_open(1, dir_a), *b = tu_open(2, dir_b);
	assert_non_null(a);
	assert_non_null(b);
	farm_region *reg;
	assert_int_equal(farm_region_create(b, 1u << 20, &reg), 0);
	farm_mr_desc rd = farm_region_desc(reg);
	uint8_t *rbase = farm_region_base(reg);
	memset(rbase, 0x5a, 4096);
	char addr_b[256], addr_n[256];
	assert_true(farm_fabric_address(b, addr_b, sizeof(addr_b)) > 0);
	farm_cq *cq;
	assert_int_equal(farm_cq_create(a, 64, 0, &cq), 0);
	uint8_t *buf = aligned_alloc(64, 4096);
	farm_mr *lmr;
	assert_int_equal(farm_mr_reg(a, buf, 4096, FARM_ACCESS_LOCAL, &lmr), 0);
	farm_ep *zep[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(
		        farm_ep_connect(a, cq, 2, addr_b, NULL, &zep[i]), 0);
	assert_int_equal(
	        tu_do(zep[0], cq, farm_wr_read(1, buf, lmr, 64, &rd, 0)), 0);

	/* The fence: id 1 removed, then its new holder admitted. */
	farm_ofi_testing_set(FARM_OFI_KNOB_HEED_FENCE, 0);
	assert_int_equal(farm_fabric_revoke(b, 1), 0);
	farm_fabric *n = tu_open(1, dir_n);
	assert_non_null(n);
	assert_true(farm_fabric_address(n, addr_n, sizeof(addr_n)) > 0);
	assert_int_equal(farm_fabric_admit(b, 1, addr_n), 0);
	farm_cq *ncq;
	farm_ep *nep;
	assert_int_equal(farm_cq_create(n, 16, 0, &ncq), 0);
	assert_int_equal(farm_ep_connect(n, ncq, 2, addr_b, NULL, &nep), 0);
	uint8_t *nbuf = aligned_alloc(64, 4096);
	farm_mr *nmr;
	assert_int_equal(farm_mr_reg(n, nbuf, 4096, FARM_ACCESS_LOCAL, &nmr),
	                 0);
	memset(nbuf, 0x11, 64);
	assert_int_equal(
	        tu_do(nep, ncq, farm_wr_write(2, nbuf, nmr, 64, &rd, 2048)), 0);

	/* The zombie, at once on its three endpoints. */
	memset(buf, 0x77, 128);
	uint64_t *res = (uint64_t *)(void *)(buf + 1024);
	farm_wr w[3] = {
	        farm_wr_write(3, buf, lmr, 64, &rd, 0),
	        farm_wr_cas(4, res, lmr, &rd, 64, 0x5a5a5a5a5a5a5a5aull, 0x99),
	        farm_wr_read(5, buf + 256, lmr, 64, &rd, 128),
	};
	for (int i = 0; i < 3; i++)
		assert_int_equal(farm_ep_post(zep[i], &w[i], NULL), 0);
	int st[3] = {1, 1, 1};
	for (int got = 0; got < 3;) {
		farm_wc wc[4];
		int k = farm_cq_poll(cq, 4, wc);
		assert_true(k >= 0);
		for (int j = 0; j < k; j++, got++)
			st[wc[j].wr_id - 3] = wc[j].status;
	}
	bool landed = rbase[0] == 0x77 || rbase[64] == 0x99;
	printf("zombie: WRITE %s, CAS %s, READ %s; its WRITE or CAS %s\n",
	       farm_strerror(st[0]), farm_strerror(st[1]), farm_strerror(st[2]),
	       landed ? "landed" : "did not land");
	if (broken_fence) {
		assert_true(landed);
	} else {
		for (int i = 0; i < 3; i++)
			assert_int_not_equal(st[i], 0);
		for (int i = 0; i < 2048; i++)
			if (rbase[i] != 0x5a)
				fail_msg("byte %d changed", i);
		/* A new connect of the zombie: refused. Either the endpoint
		 * is made and its requests fail FARM_EFENCED (the FENCED
		 * notice), or the connect itself fails -ECONNREFUSED: on ofi
		 * the provider drops the connection on the zombie's RMA with a
		 * revoked key, and libfabric 1.17's rxm then took no new
		 * connection check from it within the bound on some hosts
		 * (kernel 6.18: every run). Nothing of the zombie lands
		 * either way, which is what is checked after. */
		farm_ep *z2;
		int crc = farm_ep_connect(a, cq, 2, addr_b, NULL, &z2);
		if (crc == 0) {
			assert_int_equal(
			        tu_do(z2, cq,
			              farm_wr_write(6, buf, lmr, 64, &rd, 0)),
			        FARM_EFENCED);
			farm_ep_destroy(z2);
		} else {
			assert_int_equal(crc, -ECONNREFUSED);
		}
		printf("zombie's new connect: %s\n",
		       crc ? farm_strerror(crc) : "made, its WRITE fenced");
		assert_int_equal(rbase[0], 0x5a);
	}
	/* The new holder is served still. */
	assert_int_equal(
	        tu_do(nep, ncq, farm_wr_read(7, nbuf + 64, nmr, 64, &rd, 2048)),
	        0);
	assert_int_equal(nbuf[64], 0x11);
	farm_ofi_testing_set(FARM_OFI_KNOB_HEED_FENCE, 1);
	for (int i = 0; i < 3; i++)
		farm_ep_destroy(zep[i]);
	farm_ep_destroy(nep);
	assert_int_equal(farm_cq_destroy(ncq), 0);
	assert_int_equal(farm_cq_destroy(cq), 0);
	farm_mr_dereg(nmr);
	farm_mr_dereg(lmr);
	free(nbuf);
	free(buf);
	farm_fabric_close(n);
	farm_fabric_close(a);
	farm_region_destroy(reg);
	farm_fabric_close(b);
	tu_rmtree(dir_a);
	tu_rmtree(dir_b);
	tu_rmtree(dir_n);
#endif
}

int main(int argc, char **argv)
{
	tu_require_provider();
	if (argc == 2 && strcmp(argv[1], "--broken-holder") == 0) {
#ifdef FARM_HAVE_OFI
		if (strcmp(tu_provider(), "ofi") != 0)
			return FARM_TEST_SKIP;
		broken_holder = true;
		farm_ofi_testing_set(FARM_OFI_KNOB_HOLDER, 0);
#else
		return FARM_TEST_SKIP;
#endif
	} else if (argc == 2 && strcmp(argv[1], "--broken-fence") == 0) {
#ifdef FARM_HAVE_OFI
		if (strcmp(tu_provider(), "ofi") != 0)
			return FARM_TEST_SKIP;
		broken_fence = true;
		farm_ofi_testing_set(FARM_OFI_KNOB_FENCE, 0);
#else
		return FARM_TEST_SKIP;
#endif
	} else if (argc != 1) {
		fprintf(stderr, "usage: test_fabric_death [--broken-holder | "
		                "--broken-fence]\n");
		return 2;
	}
	setenv("FARM_OFI_TIMEOUT_MS", OFI_TIMEOUT_MS, 0);
	setenv("FARM_UDP_TIMEOUT_MS", OFI_TIMEOUT_MS, 0);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_kill_peer),
	        cmocka_unit_test(test_reused_id),
	        cmocka_unit_test(test_zombie_fenced),
	        cmocka_unit_test(test_connect_unanswered),
	};
	const struct CMUnitTest broken[] = {
	        cmocka_unit_test(test_reused_id),
	};
	const struct CMUnitTest broken_keys[] = {
	        cmocka_unit_test(test_zombie_fenced),
	};
	if (broken_holder)
		return cmocka_run_group_tests_name("fabric_death", broken, NULL,
		                                   NULL);
	if (broken_fence)
		return cmocka_run_group_tests_name("fabric_death", broken_keys,
		                                   NULL, NULL);
	return cmocka_run_group_tests_name("fabric_death", tests, NULL, NULL);
}
