/*
 * Chunk summaries (src/txn/copy_digest.c), what a machine rejoining under
 * its id with its old copies compares with the primary to READ only the
 * chunks that changed while it was away (src/recovery/README.md,
 * "Same-id restart"). One 16 MiB region in plain memory (the allocator's
 * own, with its table), 300 objects of 1 KiB and a small array, each with
 * a version; a byte copy of it stands for the old copy. Each case changes
 * the copy or the primary as an absence can (an object written, freed,
 * allocated, an array element written, a free slot's header older, a
 * lock left, a body cut short)
 * and checks which 4 KiB chunks the summaries tell apart: exactly the
 * chunk of the change, or none judged where the copy cannot be trusted.
 */
#include "testutil.h"

#include <sys/mman.h>

#include "brokenarg.h"

#include "alloc/alloc.h"
#include "txn/copy_digest.h"
#include "txn/object.h"

#define RS     (16ull << 20)
#define NOBJ   300u
#define OBJ_SZ 1040u /* stored bytes: 1 KiB and the header */
#define EL_SZ  (3u * 64u - 16u)
#define NEL    5u
#define CH     FARM_DIGEST_CHUNK

/* --broken: summaries take a slab slot's first object only
 * (FARM_FP_DIGEST_SLOT_FIRST); the array element's write must then go
 * unseen, which the case checks instead. */
static bool broken;

struct fx {
	struct farm_alloc_region r;
	bool made;
	farm_blockalloc *ba;
	farm_slab *s;
	farm_gaddr obj[NOBJ], arr;
	uint8_t *copy;
	uint64_t mlen;
};

static int prov_new(void *ctx, uint32_t near, struct farm_alloc_region *out)
{
	(void)near;
	struct fx *f = ctx;
	if (f->made)
		return -ENOMEM;
	void *m = mmap(NULL, RS, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	f->r = (struct farm_alloc_region){.id = 7, .base = m, .size = RS};
	f->made = true;
	*out = f->r;
	return 0;
}

static uint8_t *at(uint8_t *base, farm_gaddr a)
{
	return base + farm_gaddr_offset(a);
}

static unsigned lines_of(const uint8_t *p)
{
	uint64_t w;
	memcpy(&w, p + 8, 8);
	return farm_incarn_lines(w);
}

/* A committed write: version @v, unlocked, on the header and every line,
 * and the body filled with @fill. */
static void put(uint8_t *p, uint64_t v, uint8_t fill)
{
	unsigned lines = lines_of(p);
	memcpy(p, &v, 8);
	memset(p + 16, fill, 48);
	for (unsigned l = 1; l < lines; l++) {
		uint16_t x = obj_v16(v);
		memcpy(p + 64u * l, &x, 2);
		memset(p + 64u * l + 2, fill, 62);
	}
}

static struct fx *make(void)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	struct farm_blockalloc_attr a = {.new_region = prov_new, .ctx = f};
	assert_int_equal(farm_blockalloc_create(&a, &f->ba), 0);
	assert_int_equal(farm_slab_create(f->ba, &f->s), 0);
	for (unsigned i = 0; i < NOBJ; i++) {
		assert_int_equal(
		        farm_slab_alloc(f->s, OBJ_SZ,
		                        i ? f->obj[0] : FARM_GADDR_NULL,
		                        &f->obj[i]),
		        0);
		put(at(f->r.base, f->obj[i]), 4ull * (i + 1), (uint8_t)i);
	}
	assert_int_equal(farm_alloc_array(f->s, EL_SZ, NEL, f->obj[0], &f->arr),
	                 0);
	for (unsigned k = 0; k < NEL; k++)
		put(at(f->r.base, f->arr) + 3u * 64u * k, 8, (uint8_t)k);
	f->mlen = farm_alloc_meta_bytes(RS);
	f->copy = aligned_alloc(4096, RS);
	assert_non_null(f->copy);
	memcpy(f->copy, f->r.base, RS);
	return f;
}

static void drop(struct fx *f)
{
	free(f->copy);
	farm_slab_destroy(f->s);
	farm_blockalloc_destroy(f->ba);
	munmap(f->r.base, RS);
	free(f);
}

/* The chunks whose summaries differ between the primary and the copy
 * (both by the primary's table); those either cannot judge in
 * *@unjudged; the first that differs in *@first. */
static unsigned differ(struct fx *f, unsigned *unjudged, uint64_t *first)
{
	const uint8_t *pb = f->r.base;
	unsigned n = 0;
	*unjudged = 0;
	*first = UINT64_MAX;
	for (uint64_t o = 0; o < RS; o += CH) {
		uint64_t a = 0, b = 0;
		int ra = farm_txn_chunk_digest(pb, f->mlen, RS, pb, o, CH, &a);
		int rb = farm_txn_chunk_digest(pb, f->mlen, RS, f->copy, o, CH,
		                               &b);
		assert_true(ra == 0 || ra == -EAGAIN);
		assert_true(rb == 0 || rb == -EAGAIN);
		if (ra || rb) {
			(*unjudged)++;
			continue;
		}
		if (a != b && n++ == 0)
			*first = o;
	}
	return n;
}

static uint64_t chunk_of(farm_gaddr a)
{
	return farm_gaddr_offset(a) / CH * CH;
}

static void test_equal(void **state)
{
	(void)state;
	struct fx *f = make();
	unsigned u;
	uint64_t first;
	assert_int_equal(differ(f, &u, &first), 0);
	assert_int_equal(u, 0);
	/* Same version, other bytes: the digest trusts versions (a version
	 * names one committed image, the copy's premise). */
	at(f->copy, f->obj[5])[100] ^= 0xff;
	assert_int_equal(differ(f, &u, &first), 0);
	uint64_t d;
	assert_int_equal(farm_txn_chunk_digest(f->r.base, f->mlen, RS,
	                                       f->r.base, 0, 0, &d),
	                 -EINVAL);
	assert_int_equal(farm_txn_chunk_digest(f->r.base, f->mlen, RS,
	                                       f->r.base, RS, CH, &d),
	                 -EINVAL);
	assert_int_equal(farm_txn_chunk_digest(f->r.base, f->mlen, RS,
	                                       f->r.base, RS - CH, 2 * CH, &d),
	                 -EINVAL);
	drop(f);
}

/* Written at the primary while the copy was away (the copy older). */
static void test_written(void **state)
{
	(void)state;
	struct fx *f = make();
	put(at(f->r.base, f->obj[10]), 4ull * 11 + 4, 0xee);
	unsigned u;
	uint64_t first;
	assert_int_equal(differ(f, &u, &first), 1);
	assert_int_equal(u, 0);
	assert_int_equal(first, chunk_of(f->obj[10]));
	drop(f);
}

/* Freed, then a new object allocated in the freed slot, at the primary. */
static void test_freed_allocated(void **state)
{
	(void)state;
	struct fx *f = make();
	assert_int_equal(farm_slab_free(f->s, f->obj[20]), 0);
	unsigned u;
	uint64_t first;
	assert_int_equal(differ(f, &u, &first), 1);
	assert_int_equal(first, chunk_of(f->obj[20]));
	memcpy(f->copy, f->r.base, RS); /* the copy up to date again */
	assert_int_equal(differ(f, &u, &first), 0);
	farm_gaddr n;
	assert_int_equal(farm_slab_alloc(f->s, OBJ_SZ, f->obj[0], &n), 0);
	put(at(f->r.base, n), 4000, 0x11);
	assert_int_equal(differ(f, &u, &first), 1);
	assert_int_equal(first, chunk_of(n));
	assert_int_equal(u, 0);
	drop(f);
}

/* A free slot's header, once written, is summarized too: a copy taken
 * from a source whose freed slot holds an older header would not be the
 * bytes a READ brings (the same free at both: equal). */
static void test_free_header(void **state)
{
	(void)state;
	struct fx *f = make();
	assert_int_equal(farm_slab_free(f->s, f->obj[50]), 0);
	uint8_t *p = at(f->r.base, f->obj[50]);
	uint64_t v = 4ull * 51 + 8;
	memcpy(p, &v, 8); /* the free committed a later version */
	memcpy(f->copy, f->r.base, RS);
	unsigned u;
	uint64_t first;
	assert_int_equal(differ(f, &u, &first), 0);
	assert_int_equal(u, 0);
	v -= 4; /* the copy's free slot is older */
	memcpy(at(f->copy, f->obj[50]), &v, 8);
	assert_int_equal(differ(f, &u, &first), 1);
	assert_int_equal(first, chunk_of(f->obj[50]));
	assert_int_equal(u, 0);
	drop(f);
}

/* An element of a small array written: every element is summarized, not
 * only the slot's first. */
static void test_array_element(void **state)
{
	(void)state;
	struct fx *f = make();
	put(at(f->r.base, f->arr) + 3u * 64u * 3, 12, 0x33);
	unsigned u;
	uint64_t first;
	unsigned n = differ(f, &u, &first);
	printf("an array's element 3 written: %u chunk(s) differ%s\n", n,
	       broken ? " [broken: first objects only]" : "");
	assert_int_equal(n, broken ? 0 : 1);
	if (!broken)
		assert_int_equal(first, chunk_of(f->arr));
	drop(f);
}

/* A lock left in the old copy (an install or apply a kill cut short) and
 * a body written in part: those chunks cannot be judged, whatever the
 * versions say. */
static void test_locked_torn(void **state)
{
	(void)state;
	struct fx *f = make();
	uint8_t *p = at(f->copy, f->obj[30]);
	uint64_t v;
	memcpy(&v, p, 8);
	v |= OBJ_LOCK_EXCL;
	memcpy(p, &v, 8);
	unsigned u;
	uint64_t first;
	assert_int_equal(differ(f, &u, &first), 0);
	assert_int_equal(u, 1);
	memcpy(f->copy, f->r.base, RS);
	p = at(f->copy, f->obj[40]);
	uint16_t x = 0xbeef;
	memcpy(p + 64u * 3, &x, 2);
	assert_int_equal(differ(f, &u, &first), 0);
	assert_int_equal(u, 1);
	uint64_t d;
	assert_int_equal(farm_txn_chunk_digest(f->r.base, f->mlen, RS, f->copy,
	                                       chunk_of(f->obj[40]), CH, &d),
	                 -EAGAIN);
	/* A one-line object has no line versions to give a lock away: a
	 * shared lock alone must make its chunk unjudged. */
	farm_gaddr one;
	assert_int_equal(farm_slab_alloc(f->s, 64, f->obj[0], &one), 0);
	put(at(f->r.base, one), 20, 0x44);
	memcpy(f->copy, f->r.base, RS);
	p = at(f->copy, one);
	v = 20 | OBJ_LOCK_SHARED;
	memcpy(p, &v, 8);
	assert_int_equal(differ(f, &u, &first), 0);
	assert_int_equal(u, 1);
	drop(f);
}

int main(int argc, char **argv)
{
	int rc = tu_broken_arg(argc, argv, FARM_FP_DIGEST_SLOT_FIRST, &broken);
	if (rc)
		return rc;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_equal),
	        cmocka_unit_test(test_written),
	        cmocka_unit_test(test_freed_allocated),
	        cmocka_unit_test(test_free_header),
	        cmocka_unit_test(test_array_element),
	        cmocka_unit_test(test_locked_torn),
	};
	return cmocka_run_group_tests_name("copy_digest", tests, NULL, NULL);
}
