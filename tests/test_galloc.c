/*
 * Cluster-wide allocation (src/alloc/galloc.h) on three in-process
 * machines: regions come from the address space, a hint on another
 * machine is served there by RPC, frees go to the owner, bad input gets a
 * clear error.
 */
#include "asnodes.h"

#include <inttypes.h>

#include "alloc/alloc.h"
#include "alloc/galloc.h"
#include "alloc/objhdr.h"
#include "brokenarg.h"

#include <sched.h>
#include <stdatomic.h>

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

/* ---- adopting a promoted region (recovery, galloc.h) ------------------- */

static void region_made(farm_loop *loop, void *ctx, int status, uint32_t id)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->a = farm_gaddr_make(id, 0);
	r->done++;
}

/* Wait (pumping the loops) until @want adoptions and deferred frees are
 * done on machine @m. */
static void adopt_wait(unsigned m, uint64_t want, struct farm_galloc_stats *s)
{
	uint64_t t0 = farm_now_ns();
	do {
		asn_pump(&C);
		farm_galloc_stats(C.m[m].ga, s);
	} while ((s->adopted + s->adopt_failed + s->adopt_skipped < want ||
	          s->deferred_freed + s->deferred_lost < s->frees_deferred) &&
	         farm_now_ns() - t0 < 10000000000ull);
}

/* The adopter held at FARM_FP_ALLOC_ADOPT_SLOW until the test lets it go. */
static atomic_int adopt_held, adopt_go;

static void hold_adopter(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
	atomic_store(&adopt_held, 1);
	uint64_t t0 = farm_now_ns();
	while (!atomic_load(&adopt_go) && farm_now_ns() - t0 < 20000000000ull)
		sched_yield();
}

static bool broken_park; /* --broken-park: FARM_FP_ALLOC_NO_PARK */

/* A promoted region, as test_adopt makes it: primary on machine @m, its
 * block table written from descriptions only, @n objects of 200 bytes in
 * it. Its id. */
static uint32_t promoted_region(unsigned m, unsigned n)
{
	struct res r = {0};
	assert_int_equal(farm_as_region_alloc(C.m[m].as, C.m[m].loop, 0,
	                                      region_made, &r),
	                 0);
	asn_wait(&C, &r.done);
	assert_int_equal(r.status, 0);
	uint32_t id = farm_gaddr_region(r.a);
	enum farm_as_role role;
	farm_region *fr = farm_as_local_region(C.m[m].as, id, &role);
	assert_non_null(fr);
	struct farm_alloc_region ar = {.id = id,
	                               .base = farm_region_base(fr),
	                               .size = farm_region_size(fr)};
	farm_blockalloc *old;
	struct farm_blockalloc_attr at = {0};
	assert_int_equal(farm_blockalloc_create(&at, &old), 0);
	assert_int_equal(farm_blockalloc_add_region(old, &ar), 0);
	farm_slab *s;
	assert_int_equal(farm_slab_create(old, &s), 0);
	farm_gaddr obj[16];
	uint32_t info[16];
	for (unsigned i = 0; i < n && i < 16; i++) {
		assert_int_equal(farm_slab_alloc(s, 200, 0, &obj[i]), 0);
		assert_int_equal(farm_alloc_block_info(old, obj[i], &info[i]),
		                 0);
	}
	farm_slab_destroy(s);
	farm_blockalloc_destroy(old);
	memset(ar.base, 0, 1u << 20);
	for (unsigned i = 0; i < n && i < 16; i++)
		assert_true(farm_alloc_copy_note(&ar, obj[i], info[i]) >= 0);
	return id;
}

/*
 * A machine with no region of its own (a late machine promoted to primary
 * by recovery) allocates while the region promoted to it is being
 * adopted: the allocation waits for the adoption (allocs_parked) and is
 * served from the adopted region; no region is made. Allocating a region
 * then (FARM_FP_ALLOC_NO_PARK, --broken-park) was how the reuse campaign's
 * regions accumulated, one or more at every such recovery, none ever
 * freed. Runs first: machine 0's allocator has no region yet.
 */
static void test_park(void **state)
{
	(void)state;
	farm_galloc *g = C.m[0].ga;
	uint32_t id = promoted_region(0, 3);
	struct farm_galloc_stats gs;
	farm_galloc_stats(g, &gs);
	assert_int_equal(gs.local.regions, 0);
	uint64_t made = gs.regions_added;
	assert_int_equal(
	        farm_fault_set(FARM_FP_ALLOC_ADOPT_SLOW, hold_adopter, NULL),
	        0);
	assert_int_equal(farm_galloc_adopt_expect(g, id), 1);
	assert_int_equal(farm_galloc_adopt(g, id), 0);
	uint64_t t0 = farm_now_ns();
	while (!atomic_load(&adopt_held) && farm_now_ns() - t0 < 10000000000ull)
		sched_yield();
	assert_true(atomic_load(&adopt_held));
	/* The adopter is on the region: an allocation wants a region. */
	struct res r = {0};
	assert_int_equal(farm_galloc_alloc(g, C.m[0].loop, 200, FARM_GADDR_NULL,
	                                   alloc_done, &r),
	                 0);
	/* Until its first answer, or its park: the loops run meanwhile. */
	t0 = farm_now_ns();
	do {
		asn_pump(&C);
		farm_galloc_stats(g, &gs);
	} while (!r.done && !gs.allocs_parked &&
	         farm_now_ns() - t0 < 10000000000ull);
	printf("park: while the promoted region was being adopted the "
	       "allocation %s (parked %" PRIu64 ", regions made %" PRIu64 ")\n",
	       r.done ? "was answered" : "waited", gs.allocs_parked,
	       gs.regions_added - made);
	atomic_store(&adopt_go, 1);
	asn_wait(&C, &r.done);
	farm_fault_set(FARM_FP_ALLOC_ADOPT_SLOW, NULL, NULL);
	assert_int_equal(r.status, 0);
	farm_galloc_stats(g, &gs);
	printf("park: answered in region %" PRIu32
	       " (the promoted one: %" PRIu32 "); regions made %" PRIu64 "\n",
	       farm_gaddr_region(r.a), id, gs.regions_added - made);
	if (broken_park) {
		if (gs.regions_added == made)
			fail_msg("--broken-park: no region was made, and no "
			         "check noticed");
		printf("--broken-park: a region was made for it; the check "
		       "fails, as it must\n");
		return;
	}
	assert_int_equal(gs.allocs_parked, 1);
	assert_int_equal(gs.regions_added, made);
	assert_int_equal(farm_gaddr_region(r.a), id);
}

/*
 * A region this machine is primary of but its allocator does not know
 * (a promoted backup copy): its block table written from block
 * descriptions only (farm_alloc_copy_note, as a backup does), objects in
 * it. Until it is adopted, allocations hinted into it are refused and a
 * free is deferred with the object left as the caller left it (locked);
 * once adopted, the free is done and the object unlocked with the word
 * the caller gave, and the region takes allocations.
 */
static void test_adopt(void **state)
{
	(void)state;
	struct res r = {0};
	assert_int_equal(farm_as_region_alloc(C.m[0].as, C.m[0].loop, 0,
	                                      region_made, &r),
	                 0);
	asn_wait(&C, &r.done);
	assert_int_equal(r.status, 0);
	uint32_t id = farm_gaddr_region(r.a);
	enum farm_as_role role;
	farm_region *fr = farm_as_local_region(C.m[0].as, id, &role);
	assert_non_null(fr);
	assert_int_equal(role, FARM_AS_PRIMARY);
	struct farm_alloc_region ar = {.id = id,
	                               .base = farm_region_base(fr),
	                               .size = farm_region_size(fr)};
	/* Its old owner's allocator: objects, then block 0 as a backup's
	 * copy would have it (descriptions noted, owners 0). */
	farm_blockalloc *old;
	struct farm_blockalloc_attr at = {0};
	assert_int_equal(farm_blockalloc_create(&at, &old), 0);
	assert_int_equal(farm_blockalloc_add_region(old, &ar), 0);
	farm_slab *s;
	assert_int_equal(farm_slab_create(old, &s), 0);
	enum { N = 50 };
	farm_gaddr obj[N];
	uint32_t info[N];
	for (int i = 0; i < N; i++) {
		assert_int_equal(
		        farm_slab_alloc(s, i % 2 ? 200 : 3000, 0, &obj[i]), 0);
		assert_int_equal(farm_alloc_block_info(old, obj[i], &info[i]),
		                 0);
	}
	farm_slab_destroy(s);
	farm_blockalloc_destroy(old);
	memset(ar.base, 0, 1u << 20);
	assert_false(farm_alloc_copy_formatted(&ar));
	for (int i = 0; i < N; i++) {
		int rc = farm_alloc_copy_note(&ar, obj[i], info[i]);
		assert_true(rc == 0 || rc == 1);
	}
	assert_true(farm_alloc_copy_formatted(&ar));

	farm_galloc *g = C.m[0].ga;
	assert_int_equal(farm_galloc_adopt_expect(g, id), 1);
	assert_int_equal(farm_galloc_adopt_expect(g, id), 0);
	/* Not adopted yet: no allocation there, the free waits. */
	int st;
	alloc_on(0, 200, obj[1], &st);
	assert_int_equal(st, -EREMOTE);
	_Atomic uint64_t *ver = (_Atomic uint64_t *)(void *)hdr(0, obj[1]);
	atomic_store(ver, 8 | 2); /* locked exclusive, as at commit */
	uint64_t incarn = farm_objhdr_load_incarn(hdr(0, obj[1]));
	assert_true(farm_incarn_allocated(incarn));
	/* Kept whole for the adoption (as while the adopter scans the
	 * region; the switch forces it): header and lock untouched, the
	 * version word marked (a restart before the adopter frees it frees
	 * the header, src/txn/restart.c). */
	assert_int_equal(
	        farm_fault_set(FARM_FP_ALLOC_DEFER_WHOLE, tu_switch_on, NULL),
	        0);
	assert_int_equal(
	        farm_galloc_free_local_or_defer(g, C.m[0].loop, obj[1], 12), 1);
	assert_int_equal(farm_fault_set(FARM_FP_ALLOC_DEFER_WHOLE, NULL, NULL),
	                 0);
	assert_int_equal(farm_galloc_free_local(g, C.m[0].loop, obj[1]),
	                 -EREMOTE);
	assert_int_equal(atomic_load(ver), 8 | 2 | FARM_OBJHDR_FREE_PENDING);
	assert_int_equal(farm_objhdr_load_incarn(hdr(0, obj[1])), incarn);
	/* Before the adopter's scan began: freed in its header at once (the
	 * scan lists the slot, as a restart's rebuild would after a kill);
	 * the caller unlocks. */
	uint64_t inc5 = farm_objhdr_load_incarn(hdr(0, obj[5]));
	assert_int_equal(
	        farm_galloc_free_local_or_defer(g, C.m[0].loop, obj[5], 0), 2);
	assert_int_equal(farm_objhdr_load_incarn(hdr(0, obj[5])),
	                 farm_incarn_freed(inc5));
	assert_int_equal(
	        farm_galloc_free_local_or_defer(g, C.m[0].loop, obj[5], 0),
	        -ENOENT); /* a second free of it */

	struct farm_galloc_stats gs;
	farm_galloc_stats(g, &gs);
	uint64_t before = gs.adopted;
	assert_int_equal(farm_galloc_adopt(g, id), 0);
	adopt_wait(0, before + 1, &gs);
	assert_int_equal(gs.adopted, before + 1);
	assert_int_equal(gs.frees_deferred, 2);
	assert_int_equal(gs.deferred_freed, 2);
	assert_int_equal(gs.deferred_lost, 0);
	assert_int_equal(farm_galloc_adopt_expect(g, id), 2);
	/* The deferred free: done, then the caller's word stored (the mark
	 * gone with it). */
	assert_int_equal(farm_objhdr_load_incarn(hdr(0, obj[1])),
	                 farm_incarn_freed(incarn));
	assert_int_equal(atomic_load(ver), 12);
	/* Adopted: allocations go there, frees are done at once (test_park
	 * counted its own already). */
	uint64_t aa0 = gs.adopted_allocs, af0 = gs.adopted_frees;
	farm_gaddr a = alloc_on(0, 200, obj[3], &st);
	assert_int_equal(st, 0);
	assert_int_equal(farm_gaddr_region(a), id);
	for (int i = 0; i < N; i++) /* no live one again */
		assert_true(a != obj[i] || i == 1 || i == 5);
	assert_int_equal(
	        farm_galloc_free_local_or_defer(g, C.m[0].loop, obj[2], 0), 0);
	farm_galloc_stats(g, &gs);
	assert_int_equal(gs.adopted_allocs, aa0 + 1);
	assert_int_equal(gs.adopted_frees, af0 + 1);
	printf("adopt: region %" PRIu32 " rebuilt in %.2f ms, 2 frees "
	       "deferred (one whole, one in its header at once) and done, "
	       "then allocation and free there\n",
	       id, (double)gs.adopt_max_ns / 1e6);
}

/* ---- retiring a region (farm_galloc_retire) ----------------------------
 *
 * A cluster of its own: three machines with two loops each (one test
 * thread drives all six), so that two slabs of one machine hold blocks of
 * the region given up.
 */
#define TL_M 3
#define TL_L 2

static struct {
	struct {
		char dir[256];
		farm_fabric *fab;
		farm_msg *msg;
		farm_loop *loop[TL_L];
		farm_as *as;
		farm_galloc *ga;
	} m[TL_M];
} L;

static void tl_open(void)
{
	farm_msg_attr ma = {
	        .nthreads = TL_L, .max_machines = 8, .busy_poll = true};
	struct farm_as_attr aa = {.region_size = RSIZE};
	memset(&L, 0, sizeof(L));
	for (unsigned i = 0; i < TL_M; i++) {
		tu_tmpdir(L.m[i].dir, sizeof(L.m[i].dir), "galr");
		L.m[i].fab = tu_open(i + 1, L.m[i].dir);
		assert_non_null(L.m[i].fab);
		assert_int_equal(farm_msg_create(L.m[i].fab, &ma, &L.m[i].msg),
		                 0);
		aa.seed = i + 1;
		assert_int_equal(
		        farm_as_create(L.m[i].fab, L.m[i].msg, &aa, &L.m[i].as),
		        0);
		assert_int_equal(
		        farm_galloc_create(L.m[i].as, L.m[i].msg, &L.m[i].ga),
		        0);
	}
	uint32_t ids[TL_M];
	for (unsigned i = 0; i < TL_M; i++) {
		ids[i] = i + 1;
		for (unsigned j = 0; j < TL_M; j++) {
			if (i == j)
				continue;
			char addr[256];
			assert_true(farm_fabric_address(L.m[j].fab, addr,
			                                sizeof(addr)) > 0);
			farm_mr_desc d = farm_msg_desc(L.m[j].msg);
			assert_int_equal(
			        farm_msg_add_peer(L.m[i].msg, j + 1, addr, &d),
			        0);
		}
		for (unsigned l = 0; l < TL_L; l++)
			assert_int_equal(
			        farm_loop_open(L.m[i].msg, l, &L.m[i].loop[l]),
			        0);
	}
	for (unsigned i = 0; i < TL_M; i++)
		assert_int_equal(farm_as_set_view(L.m[i].as, 1, ids, TL_M), 0);
}

static void tl_close(void)
{
	for (unsigned i = 0; i < TL_M; i++) {
		for (unsigned l = 0; l < TL_L; l++)
			farm_loop_close(L.m[i].loop[l]);
		farm_galloc_destroy(L.m[i].ga);
		farm_as_destroy(L.m[i].as);
		assert_int_equal(farm_msg_destroy(L.m[i].msg), 0);
		farm_fabric_close(L.m[i].fab);
		tu_rmtree(L.m[i].dir);
	}
}

static void tl_wait(const volatile int *flag)
{
	uint64_t t0 = farm_now_ns();
	while (!*flag && farm_now_ns() - t0 < 10000000000ull)
		for (unsigned i = 0; i < TL_M; i++)
			for (unsigned l = 0; l < TL_L; l++)
				(void)farm_loop_poll(L.m[i].loop[l]);
	assert_true(*flag);
}

/* Allocate on machine 0's loop @l. */
static farm_gaddr tl_alloc(unsigned l, uint64_t size, farm_gaddr hint, int *st)
{
	struct res r = {0};
	int rc = farm_galloc_alloc(L.m[0].ga, L.m[0].loop[l], size, hint,
	                           alloc_done, &r);
	if (rc) {
		*st = rc;
		return FARM_GADDR_NULL;
	}
	tl_wait(&r.done);
	*st = r.status;
	return r.a;
}

/* The slot [a, a + class size of @size) overlaps a live one of @live. */
static bool tl_overlaps(farm_gaddr a, uint64_t size, const farm_gaddr *live,
                        const uint64_t *lsize, int n)
{
	uint64_t len = farm_alloc_class_size(farm_alloc_class_of(size));
	for (int i = 0; i < n; i++) {
		uint64_t ll =
		        farm_alloc_class_size(farm_alloc_class_of(lsize[i]));
		if (farm_gaddr_region(a) == farm_gaddr_region(live[i]) &&
		    a < live[i] + ll && live[i] < a + len)
			return true;
	}
	return false;
}

enum { NO = 40, NLIVE = 2 * NO }; /* test_retire's live objects */

/* test_retire's state: machine 1's allocator, the live objects in R
 * (sizes, block descriptions and header images), its last stats. */
struct gr {
	farm_galloc *g;
	uint32_t R;
	farm_gaddr live[NLIVE];
	uint64_t lsize[NLIVE];
	uint32_t info[NLIVE];
	struct farm_objhdr img[NLIVE];
	struct farm_galloc_stats gs;
};

/* Live objects from both loops, all in one region R; each loop frees
 * one (its slab's region cache is on R); the headers' images kept. */
static void gr_populate(struct gr *t)
{
	int st;
	for (int i = 0; i < NLIVE; i++) {
		t->lsize[i] = i % 2 ? 3000 : 200;
		t->live[i] = tl_alloc(i < NO ? 0 : 1, t->lsize[i],
		                      FARM_GADDR_NULL, &st);
		assert_int_equal(st, 0);
		assert_int_equal(
		        farm_galloc_block_info(t->g, t->live[i], &t->info[i]),
		        0);
	}
	t->R = farm_gaddr_region(t->live[0]);
	for (int i = 0; i < NLIVE; i++)
		assert_int_equal(farm_gaddr_region(t->live[i]), t->R);
	/* Each loop frees one (its slab's region cache is on R). */
	assert_int_equal(
	        farm_galloc_free_local(t->g, L.m[0].loop[0], t->live[0]), 0);
	assert_int_equal(
	        farm_galloc_free_local(t->g, L.m[0].loop[1], t->live[NO]), 0);
	t->live[0] = t->live[1];
	t->lsize[0] = t->lsize[1];
	t->info[0] = t->info[1];
	t->live[NO] = t->live[NO + 1];
	t->lsize[NO] = t->lsize[NO + 1];
	t->info[NO] = t->info[NO + 1];
	for (int i = 0; i < NLIVE; i++)
		memcpy(&t->img[i],
		       farm_as_local_ptr(L.m[0].as, t->live[i],
		                         FARM_OBJHDR_SIZE),
		       sizeof(t->img[i]));
}

/* Every live object's header is its image. */
static void gr_headers_kept(const struct gr *t)
{
	for (int i = 0; i < NLIVE; i++)
		assert_memory_equal(farm_as_local_ptr(L.m[0].as, t->live[i],
		                                      FARM_OBJHDR_SIZE),
		                    &t->img[i], sizeof(t->img[i]));
}

/* R retired (once; bad input refused); (b) frees refused, nothing
 * written. */
static void gr_retire(struct gr *t)
{
	farm_galloc *g = t->g;
	assert_int_equal(farm_galloc_retire(g, t->R), 0);
	assert_int_equal(farm_galloc_retire(g, t->R), -ENOENT);
	assert_int_equal(farm_galloc_retire(NULL, t->R), -EINVAL);
	assert_int_equal(farm_galloc_retire(g, FARM_REGION_ID_NONE), -EINVAL);
	farm_galloc_stats(g, &t->gs);
	assert_int_equal(t->gs.retired, 1);

	/* (b) Frees refused, nothing written. */
	for (unsigned l = 0; l < TL_L; l++) {
		assert_int_equal(
		        farm_galloc_free_local(g, L.m[0].loop[l], t->live[2]),
		        -EREMOTE);
		assert_int_equal(farm_galloc_free_local_or_defer(
		                         g, L.m[0].loop[l], t->live[NO + 2], 0),
		                 -EREMOTE);
		assert_int_equal(farm_galloc_free_array_local(g, L.m[0].loop[l],
		                                              t->live[3], 3000,
		                                              1),
		                 -EREMOTE);
	}
	gr_headers_kept(t);
}

/* (a) Both loops allocate on: never in R; a hint in R is refused. */
static void gr_alloc_elsewhere(struct gr *t)
{
	int st;
	tl_alloc(0, 200, t->live[1], &st);
	assert_int_equal(st, -EREMOTE);
	enum { NA = 2500 };
	unsigned in_r = 0, regions = 0;
	uint32_t last = 0;
	for (int i = 0; i < NA; i++) {
		for (unsigned l = 0; l < TL_L; l++) {
			farm_gaddr a = tl_alloc(l, i % 3 ? 200 : 3000,
			                        FARM_GADDR_NULL, &st);
			assert_int_equal(st, 0);
			in_r += farm_gaddr_region(a) == t->R;
			if (farm_gaddr_region(a) != last) {
				last = farm_gaddr_region(a);
				regions++;
			}
		}
	}
	assert_int_equal(in_r, 0);
	farm_galloc_stats(t->g, &t->gs);
	printf("retire: %d allocations on 2 loops after region %" PRIu32
	       " was retired, 0 in it (%" PRIu64 " regions made in all)\n",
	       2 * NA, t->R, t->gs.regions_added);
}

/*
 * An adoption of R expected, then given up before it ran: the
 * expectation is cancelled and its deferred free dropped (counted lost,
 * the header untouched but for the deferral's free-pending mark, which a
 * restart of this copy would take to free the slot: the free
 * committed). A free kept whole (as while the adopter scans; the switch
 * forces it: one before the scan is done in its header at once,
 * test_adopt).
 */
static void gr_adopt_given_up(struct gr *t)
{
	farm_galloc *g = t->g;
	assert_int_equal(farm_galloc_adopt_expect(g, t->R), 1);
	assert_int_equal(
	        farm_fault_set(FARM_FP_ALLOC_DEFER_WHOLE, tu_switch_on, NULL),
	        0);
	assert_int_equal(farm_galloc_free_local_or_defer(g, L.m[0].loop[0],
	                                                 t->live[4], 0),
	                 1);
	assert_int_equal(farm_fault_set(FARM_FP_ALLOC_DEFER_WHOLE, NULL, NULL),
	                 0);
	uint64_t lost = t->gs.deferred_lost;
	assert_int_equal(farm_galloc_retire(g, t->R), 0);
	farm_galloc_stats(g, &t->gs);
	assert_int_equal(t->gs.retired, 2);
	assert_int_equal(t->gs.deferred_lost, lost + 1);
	assert_int_equal(farm_galloc_free_local_or_defer(g, L.m[0].loop[0],
	                                                 t->live[4], 0),
	                 -EREMOTE);
	const struct farm_objhdr *h4 =
	        farm_as_local_ptr(L.m[0].as, t->live[4], FARM_OBJHDR_SIZE);
	assert_non_null(h4);
	assert_int_equal(farm_objhdr_load_version(h4),
	                 atomic_load(&t->img[4].version) |
	                         FARM_OBJHDR_FREE_PENDING);
	assert_int_equal(farm_objhdr_load_incarn(h4),
	                 atomic_load(&t->img[4].incarn));
}

/* (c) Primary of R again: a fresh zeroed copy with the live objects'
 * images and their blocks noted, as recovery leaves it; adopted. */
static void gr_readopt(struct gr *t)
{
	farm_galloc *g = t->g;
	enum farm_as_role role;
	farm_region *fr = farm_as_local_region(L.m[0].as, t->R, &role);
	assert_non_null(fr);
	struct farm_alloc_region ar = {.id = t->R,
	                               .base = farm_region_base(fr),
	                               .size = farm_region_size(fr)};
	memset(ar.base, 0, ar.size);
	for (int i = 0; i < NLIVE; i++) {
		memcpy((char *)ar.base + farm_gaddr_offset(t->live[i]),
		       &t->img[i], sizeof(t->img[i]));
		int rc = farm_alloc_copy_note(&ar, t->live[i], t->info[i]);
		assert_true(rc == 0 || rc == 1);
	}
	uint64_t before = t->gs.adopted;
	assert_int_equal(farm_galloc_adopt_expect(g, t->R), 1);
	assert_int_equal(farm_galloc_adopt(g, t->R), 0);
	uint64_t t0 = farm_now_ns();
	do {
		for (unsigned i = 0; i < TL_M; i++)
			for (unsigned l = 0; l < TL_L; l++)
				(void)farm_loop_poll(L.m[i].loop[l]);
		farm_galloc_stats(g, &t->gs);
	} while (t->gs.adopted + t->gs.adopt_failed < before + 1 &&
	         farm_now_ns() - t0 < 10000000000ull);
	assert_int_equal(t->gs.adopted, before + 1);
	assert_int_equal(farm_galloc_adopt_expect(g, t->R), 2);
}

/* Hinted allocations from both loops land in R again, none on a live
 * object; returns how many of 400 did. */
static unsigned gr_hinted(struct gr *t)
{
	unsigned in_r = 0;
	int st;
	for (int i = 0; i < 200; i++) {
		for (unsigned l = 0; l < TL_L; l++) {
			uint64_t sz = i % 2 ? 3000 : 200;
			farm_gaddr a =
			        tl_alloc(l, sz, t->live[i % 2 ? 3 : 2], &st);
			assert_int_equal(st, 0);
			in_r += farm_gaddr_region(a) == t->R;
			assert_false(
			        tl_overlaps(a, sz, t->live, t->lsize, NLIVE));
		}
	}
	assert_true(in_r > 0);
	gr_headers_kept(t);
	return in_r;
}

/*
 * Machine 1 (index 0) gives up region R while both its loops' slabs hold
 * current blocks there: (a) thousands of allocations on both loops after
 * the retire all succeed and none is in R (new regions are made); (b)
 * frees of R's objects are -EREMOTE with their headers untouched; (c) R
 * comes back (primary here again) as a fresh zeroed copy holding only the
 * live objects' images and block descriptions: after adopt_expect/adopt,
 * hinted allocations from both loops land in R again, none on a live
 * object, and the rebuilt state is consistent (dump).
 */
static void test_retire(void **state)
{
	(void)state;
	tl_open();
	struct gr t = {.g = L.m[0].ga};
	farm_galloc *g = t.g;
	gr_populate(&t);
	gr_retire(&t);
	gr_alloc_elsewhere(&t);
	gr_adopt_given_up(&t);
	gr_readopt(&t);
	unsigned in_r = gr_hinted(&t);
	/* Frees in R work again, on both loops. */
	assert_int_equal(farm_galloc_free_local(g, L.m[0].loop[0], t.live[2]),
	                 0);
	assert_int_equal(
	        farm_galloc_free_local(g, L.m[0].loop[1], t.live[NO + 2]), 0);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	int drc = farm_blockalloc_dump(farm_galloc_blockalloc(g), f);
	fclose(f);
	free(buf);
	assert_int_equal(drc, 0);
	printf("retire: region %" PRIu32 " re-adopted from a zeroed copy "
	       "with %d live objects; %u of 400 hinted allocations there, "
	       "none on a live object\n",
	       t.R, NLIVE, in_r);
	tl_close();
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--broken-park")) {
		if (farm_fault_set(FARM_FP_ALLOC_NO_PARK, tu_switch_on, NULL)) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
		broken_park = true;
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--broken-park]\n", argv[0]);
		return 2;
	}
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_park),
	        cmocka_unit_test(test_local_and_hinted),
	        cmocka_unit_test(test_many_regions_near),
	        cmocka_unit_test(test_arrays_and_errors),
	        cmocka_unit_test(test_adopt),
	        cmocka_unit_test(test_retire),
	};
	if (broken_park)
		return _cmocka_run_group_tests("galloc", tests, 1, setup,
		                               teardown);
	return cmocka_run_group_tests(tests, setup, teardown);
}
