/*
 * verbs provider: the same request semantics as shm, on an RDMA device.
 *
 * Without a device (or without the provider built) the test is skipped, not
 * passed: it prints why and exits 77, which ctest reports as "Skipped".
 * With a device, set FARM_TEST_VERBS_IP to an address of an RDMA-capable
 * interface (default 127.0.0.1, which works with rxe bound to lo).
 * The connect exchange's private data is checked without a device.
 */
#include "testutil.h"

#ifdef FARM_HAVE_VERBS
#include <stddef.h>

#include "fabric/verbs_int.h"
#include "util/wire.h"
#endif

#define RSIZE (1u << 20)

static const char *ip;

struct vfx {
	farm_fabric *a, *b;
	farm_region *region;
	farm_mr_desc rd;
	farm_cq *cq;
	farm_ep *ep;
	uint8_t *buf;
	farm_mr *lmr;
};

static farm_fabric *vopen(uint32_t id)
{
	char listen[128];
	snprintf(listen, sizeof(listen), "%s:0", ip);
	farm_fabric_attr a = {
	        .provider = "verbs", .machine_id = id, .listen_addr = listen};
	farm_fabric *f = NULL;
	return farm_fabric_open(&a, &f) == 0 ? f : NULL;
}

static int setup(void **state)
{
	struct vfx *f = calloc(1, sizeof(*f));
	f->a = vopen(1);
	f->b = vopen(2);
	assert_non_null(f->a);
	assert_non_null(f->b);
	assert_int_equal(farm_region_create(f->b, RSIZE, &f->region), 0);
	f->rd = farm_region_desc(f->region);
	char addr[256];
	assert_true(farm_fabric_address(f->b, addr, sizeof(addr)) > 0);
	assert_int_equal(farm_cq_create(f->a, 256, 0, &f->cq), 0);
	assert_int_equal(farm_ep_connect(f->a, f->cq, 2, addr, NULL, &f->ep),
	                 0);
	f->buf = aligned_alloc(64, 16384);
	memset(f->buf, 0, 16384);
	assert_int_equal(
	        farm_mr_reg(f->a, f->buf, 16384, FARM_ACCESS_LOCAL, &f->lmr),
	        0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct vfx *f = *state;
	farm_ep_destroy(f->ep);
	assert_int_equal(farm_cq_destroy(f->cq), 0);
	farm_mr_dereg(f->lmr);
	free(f->buf);
	farm_region_destroy(f->region);
	farm_fabric_close(f->b);
	farm_fabric_close(f->a);
	free(f);
	return 0;
}

static void test_round_trip(void **state)
{
	struct vfx *f = *state;
	uint8_t *src = f->buf, *dst = f->buf + 8192;
	uint8_t *rbase = farm_region_base(f->region);
	for (int i = 0; i < 4096; i++)
		src[i] = (uint8_t)(i * 13 + 1);
	assert_int_equal(
	        tu_do(f->ep, f->cq,
	              farm_wr_write(1, src, f->lmr, 4096, &f->rd, 4096)),
	        0);
	assert_memory_equal(rbase + 4096, src, 4096);
	assert_int_equal(
	        tu_do(f->ep, f->cq,
	              farm_wr_read(2, dst, f->lmr, 4096, &f->rd, 4096)),
	        0);
	assert_memory_equal(dst, src, 4096);
	uint64_t *res = (uint64_t *)(void *)(f->buf + 16000);
	memcpy(rbase + 64, &(uint64_t){5}, 8);
	assert_int_equal(tu_do(f->ep, f->cq,
	                       farm_wr_cas(3, res, f->lmr, &f->rd, 64, 5, 6)),
	                 0);
	assert_int_equal(*res, 5);
	assert_int_equal(*(uint64_t *)(void *)(rbase + 64), 6);
}

static void test_errors(void **state)
{
	struct vfx *f = *state;
	/* Out of range: a remote access error, then the endpoint flushes. */
	farm_wr l[2] = {
	        farm_wr_read(1, f->buf, f->lmr, 64, &f->rd, RSIZE),
	        farm_wr_read(2, f->buf, f->lmr, 64, &f->rd, 0),
	};
	l[0].next = &l[1];
	assert_int_equal(farm_ep_post(f->ep, l, NULL), 0);
	farm_wc wc[2];
	int got = 0;
	uint64_t deadline = farm_now_ns() + 5000000000ull;
	while (got < 2 && farm_now_ns() < deadline)
		got += farm_cq_poll(f->cq, 2 - got, wc + got);
	assert_int_equal(got, 2);
	assert_int_equal(wc[0].status, FARM_EREMOTE_ACCESS);
	assert_int_equal(wc[1].status, FARM_EFLUSHED);
	assert_false(farm_ep_usable(f->ep));
}

#ifdef FARM_HAVE_VERBS
/* The private data of a connect request: the wire version survives the
 * round trip; an older build's, which has none (shorter), and another
 * kind are not taken as ours. */
static void test_pdata(void **state)
{
	(void)state;
	struct vb_pdata pd, out;
	farm_vb_pdata_encode(&pd, VB_PD_REQ, 1, 2, 0, FARM_WIRE_VERSION);
	assert_true(farm_vb_pdata_decode(&pd, sizeof(pd), VB_PD_REQ, &out));
	assert_int_equal(out.from, 1);
	assert_int_equal(out.to, 2);
	assert_int_equal(out.wire, FARM_WIRE_VERSION);
	assert_false(farm_vb_pdata_decode(&pd, offsetof(struct vb_pdata, wire),
	                                  VB_PD_REQ, &out));
	assert_false(farm_vb_pdata_decode(&pd, sizeof(pd), VB_PD_ACC, &out));
}
#endif

int main(void)
{
#ifdef FARM_HAVE_VERBS
	const struct CMUnitTest pdata[] = {cmocka_unit_test(test_pdata)};
	if (cmocka_run_group_tests_name("verbs_pdata", pdata, NULL, NULL))
		return 1;
#endif
	if (!farm_fabric_provider_available("verbs")) {
		printf("SKIPPED: the verbs provider was not built "
		       "(libibverbs-dev/librdmacm-dev missing at build "
		       "time)\n");
		return FARM_TEST_SKIP;
	}
	ip = getenv("FARM_TEST_VERBS_IP");
	if (!ip || !*ip)
		ip = "127.0.0.1";
	char listen[128];
	snprintf(listen, sizeof(listen), "%s:0", ip);
	farm_fabric_attr a = {
	        .provider = "verbs", .machine_id = 0, .listen_addr = listen};
	farm_fabric *probe = NULL;
	int rc = farm_fabric_open(&a, &probe);
	if (rc == FARM_ENODEVICE) {
		printf("SKIPPED: no RDMA device on this machine "
		       "(ibv_get_device_list "
		       "found none); the verbs tests need one (or rxe/siw)\n");
		return FARM_TEST_SKIP;
	}
	if (rc) {
		printf("SKIPPED: an RDMA device exists but the provider cannot "
		       "listen "
		       "on %s (%s); set FARM_TEST_VERBS_IP to the address of "
		       "an "
		       "RDMA-capable interface\n",
		       listen, farm_strerror(rc));
		return FARM_TEST_SKIP;
	}
	farm_fabric_close(probe);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_round_trip, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	};
	return cmocka_run_group_tests_name("fabric_verbs", tests, NULL, NULL);
}
