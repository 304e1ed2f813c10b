/*
 * Cluster-wide allocation (src/alloc/galloc.h) on three in-process
 * machines: regions come from the address space, a hint on another
 * machine is served there by RPC, frees go to the owner, bad input gets a
 * clear error.
 */
#include "asnodes.h"

#include <inttypes.h>

#include "alloc/objhdr.h"

#define RSIZE (16ull << 20)

static struct asn_cluster C;

struct res {
	int done, status;
	farm_gaddr a;
};

static void alloc_done(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->a = a;
	r->done++;
}

static void op_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->done++;
}

static int setup(void **state)
{
	(void)state;
	asn_open(&C, 3, RSIZE, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	asn_close(&C);
	return 0;
}

static farm_gaddr alloc_on(unsigned m, uint64_t size, farm_gaddr hint, int *st)
{
	struct res r = {0};
	int rc = farm_galloc_alloc(C.m[m].ga, C.m[m].loop, size, hint,
	                           alloc_done, &r);
	if (rc) {
		*st = rc;
		return FARM_GADDR_NULL;
	}
	assert_int_equal(r.done, 0); /* never inline */
	asn_wait(&C, &r.done);
	assert_int_equal(r.done, 1);
	*st = r.status;
	return r.a;
}

static int free_on(unsigned m, farm_gaddr a)
{
	struct res r = {0};
	int rc = farm_galloc_free(C.m[m].ga, C.m[m].loop, a, op_done, &r);
	if (rc)
		return rc;
	asn_wait(&C, &r.done);
	return r.status;
}

static uint32_t primary_of(farm_gaddr a)
{
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	assert_true(farm_as_replicas(C.m[0].as, farm_gaddr_region(a), rep) > 0);
	return rep[0];
}

static struct farm_objhdr *hdr(unsigned m, farm_gaddr a)
{
	return farm_as_local_ptr(C.m[m].as, a, FARM_OBJHDR_SIZE);
}

static void test_local_and_hinted(void **state)
{
	(void)state;
	int st;
	/* No hint: a region is made with machine 1 as primary. */
	farm_gaddr a = alloc_on(0, 100, FARM_GADDR_NULL, &st);
	assert_int_equal(st, 0);
	assert_int_equal(primary_of(a), 1);
	assert_non_null(hdr(0, a));
	assert_true(farm_objhdr_allocated(hdr(0, a)));
	/* The header records the object's size in lines (100 B: 2 lines). */
	assert_int_equal(farm_incarn_lines(farm_objhdr_load_incarn(hdr(0, a))),
	                 2);
	/* Backups hold copies of the region. */
	enum farm_as_role role;
	unsigned backups = 0;
	for (unsigned i = 1; i < 3; i++)
		backups += farm_as_local_region(C.m[i].as, farm_gaddr_region(a),
		                                &role) != NULL &&
		           role == FARM_AS_BACKUP;
	assert_int_equal(backups, 2);
	/* Hint in our block: the same 1 MiB block. */
	farm_gaddr b = alloc_on(0, 100, a, &st);
	assert_int_equal(st, 0);
	assert_int_equal(farm_gaddr_region(b), farm_gaddr_region(a));
	assert_int_equal(farm_gaddr_offset(b) >> 20,
	                 farm_gaddr_offset(a) >> 20);

	/* Machine 2 allocates next to machine 1's object: shipped to 1. */
	farm_gaddr c = alloc_on(1, 200, a, &st);
	assert_int_equal(st, 0);
	assert_int_equal(farm_gaddr_region(c), farm_gaddr_region(a));
	assert_true(farm_objhdr_allocated(hdr(0, c)));
	struct farm_galloc_stats s1, s2;
	farm_galloc_stats(C.m[0].ga, &s1);
	farm_galloc_stats(C.m[1].ga, &s2);
	assert_int_equal(s2.shipped_allocs, 1);
	assert_int_equal(s1.served_allocs, 1);

	/* Frees: remote (by machine 3) and local; a second free fails and
	 * the incarnation moved once. */
	uint64_t inc = farm_objhdr_incarnation(hdr(0, c));
	assert_int_equal(free_on(2, c), 0);
	assert_false(farm_objhdr_allocated(hdr(0, c)));
	assert_int_equal(farm_objhdr_incarnation(hdr(0, c)), inc + 1);
	assert_int_equal(free_on(2, c), -ENOENT);
	assert_int_equal(free_on(0, c), -ENOENT);
	assert_int_equal(farm_objhdr_incarnation(hdr(0, c)), inc + 1);
	assert_int_equal(free_on(0, b), 0);
}

static void test_many_regions_near(void **state)
{
	(void)state;
	/* Fill past one region with 64 KiB objects hinted at the first: the
	 * allocator asks the address space for regions near it (same ring),
	 * each with machine 1 as primary. */
	int st;
	farm_gaddr first = alloc_on(0, 64 << 10, FARM_GADDR_NULL, &st);
	assert_int_equal(st, 0);
	uint32_t regions[64];
	unsigned nreg = 0;
	for (int i = 0; i < 600; i++) {
		farm_gaddr a = alloc_on(0, 64 << 10, first, &st);
		assert_int_equal(st, 0);
		assert_int_equal(primary_of(a), 1);
		uint32_t r = farm_gaddr_region(a);
		bool seen = false;
		for (unsigned k = 0; k < nreg; k++)
			seen |= regions[k] == r;
		if (!seen && nreg < 64)
			regions[nreg++] = r;
	}
	assert_true(nreg >= 2);
	for (unsigned k = 0; k < nreg; k++)
		assert_int_equal(regions[k] % FARM_RING_DEFAULT_RINGS,
		                 farm_gaddr_region(first) %
		                         FARM_RING_DEFAULT_RINGS);
	struct farm_galloc_stats s;
	farm_galloc_stats(C.m[0].ga, &s);
	assert_true(s.local.hint[FARM_ALLOC_HINT_NEAR] > 0);
	printf("600 x 64 KiB hinted allocations used %u regions on the "
	       "hint's ring; %" PRIu64 " waited for a region\n",
	       nreg, s.region_waits);
}

static void test_arrays_and_errors(void **state)
{
	(void)state;
	struct res r = {0};
	assert_int_equal(farm_galloc_alloc_array(C.m[2].ga, C.m[2].loop, 64,
	                                         100, FARM_GADDR_NULL,
	                                         alloc_done, &r),
	                 0);
	asn_wait(&C, &r.done);
	assert_int_equal(r.status, 0);
	for (int i = 0; i < 100; i++) {
		uint64_t w =
		        farm_objhdr_load_incarn(hdr(2, r.a + (uint64_t)i * 64));
		assert_true(farm_incarn_allocated(w));
		assert_int_equal(farm_incarn_lines(w), 1); /* each element's */
	}
	int st;
	assert_int_equal(alloc_on(0, 0, FARM_GADDR_NULL, &st), FARM_GADDR_NULL);
	assert_int_equal(st, -EINVAL);
	alloc_on(0, (1u << 20) + 1, FARM_GADDR_NULL, &st);
	assert_int_equal(st, -E2BIG);
	/* A hint in a region nobody made: its primary refuses. */
	uint32_t ghost = 0;
	for (uint32_t id = 5000;; id++)
		if (primary_of(farm_gaddr_make(id, 0)) == 2) {
			ghost = id;
			break;
		}
	alloc_on(0, 64, farm_gaddr_make(ghost, 64), &st);
	assert_int_equal(st, -EREMOTE);
	assert_int_equal(free_on(0, farm_gaddr_make(ghost, 64)), -EREMOTE);
	assert_int_equal(free_on(0, FARM_GADDR_NULL), -EINVAL);
	assert_int_equal(farm_galloc_alloc_array(C.m[0].ga, C.m[0].loop, 64, 0,
	                                         FARM_GADDR_NULL, alloc_done,
	                                         &r),
	                 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_local_and_hinted),
	        cmocka_unit_test(test_many_regions_near),
	        cmocka_unit_test(test_arrays_and_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
