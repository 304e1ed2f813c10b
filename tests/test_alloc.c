/*
 * The allocator (src/alloc): size classes and their fragmentation, bad
 * input, incarnations, hints, arrays, many threads with cross-thread frees,
 * and rebuild-by-scan. Regions are plain anonymous mappings here, with ids
 * the test picks (the address-space layer supplies real ones).
 *
 * FARM_ALLOC_TEST_OPS sets the operations per thread of the threaded test
 * (default 1000000).
 */
#include "testutil.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/alloc_int.h"
#include "util/fault.h"
#include "util/mem.h"
#include "brokenarg.h"

/* ---- a region provider ------------------------------------------------ */

#define PROV_MAX 256

struct prov {
	uint64_t size;
	uint32_t next_id;
	int n;
	int max; /* refuse more than this many regions (0: PROV_MAX) */
	struct farm_alloc_region r[PROV_MAX];
	uint32_t near[PROV_MAX];
};

static int prov_new(void *ctx, uint32_t near, struct farm_alloc_region *out)
{
	struct prov *p = ctx;
	if (p->n >= (p->max ? p->max : PROV_MAX))
		return -ENOMEM;
	void *m = mmap(NULL, p->size, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	struct farm_alloc_region r = {
	        .id = p->next_id++, .base = m, .size = p->size};
	p->near[p->n] = near;
	p->r[p->n++] = r;
	*out = r;
	return 0;
}

static void prov_init(struct prov *p, uint64_t size, uint32_t first_id)
{
	memset(p, 0, sizeof(*p));
	p->size = size;
	p->next_id = first_id;
}

static void prov_fini(struct prov *p)
{
	for (int i = 0; i < p->n; i++)
		munmap(p->r[i].base, p->r[i].size);
	p->n = 0;
}

static farm_blockalloc *mk_ba(struct prov *p)
{
	struct farm_blockalloc_attr a = {.new_region = prov_new, .ctx = p};
	farm_blockalloc *ba = NULL;
	assert_int_equal(farm_blockalloc_create(&a, &ba), 0);
	return ba;
}

static char *dump_str(farm_blockalloc *ba, int *rc)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	*rc = farm_blockalloc_dump(ba, f);
	fclose(f);
	return buf;
}

static struct farm_objhdr *hdr(farm_blockalloc *ba, farm_gaddr a)
{
	struct farm_objhdr *h = farm_alloc_local(ba, a, FARM_OBJHDR_SIZE);
	assert_non_null(h);
	return h;
}

/* ---- size classes ----------------------------------------------------- */

static void test_classes(void **state)
{
	(void)state;
	uint32_t prev = 0;
	for (int c = 0; c < FARM_ALLOC_NCLASSES; c++) {
		uint32_t sz = farm_alloc_class_size(c);
		assert_true(sz > prev);
		assert_int_equal(sz % 64, 0);
		uint32_t mb = farm_alloc_class_block_mb(c);
		assert_true(mb >= 1 && mb <= FARM_ALLOC_MAX_BLOCK_MB);
		prev = sz;
	}
	assert_int_equal(farm_alloc_class_size(0), 64);
	assert_int_equal(farm_alloc_class_size(255), 1u << 20);
	assert_int_equal(farm_alloc_class_size(256), 0);
	assert_int_equal(farm_alloc_class_size(-1), 0);
	/* Smallest class that fits, for every line-granular size and the
	 * bytes around each line boundary. */
	for (uint64_t l = 1; l <= FARM_ALLOC_MAX_LINES; l++) {
		for (uint64_t b = l * 64 - 63; b <= l * 64; b += 31) {
			int c = farm_alloc_class_of(b);
			assert_true(c >= 0);
			assert_true(farm_alloc_class_size(c) >= b);
			assert_true(c == 0 || farm_alloc_class_size(c - 1) < b);
		}
	}
	assert_int_equal(farm_alloc_class_of(0), -EINVAL);
	assert_int_equal(farm_alloc_class_of((1u << 20) + 1), -E2BIG);
	assert_int_equal(farm_alloc_class_of(UINT64_MAX), -E2BIG);
	assert_int_equal(farm_alloc_class_of(1u << 20), 255);
	/* Free finds the slot index by a multiply (alloc_int.h): exact for
	 * every line offset in a slab block of every class. */
	for (int c = 0; c < FARM_ALLOC_NCLASSES; c++) {
		uint64_t slot = farm_alloc_class_size(c);
		uint64_t inv = (1ull << SLOT_INV_SHIFT) / slot + 1;
		uint64_t end = (uint64_t)farm_alloc_class_block_mb(c) << 20;
		for (uint64_t rel = 0; rel < end; rel += 64)
			if (((rel * inv) >> SLOT_INV_SHIFT) != rel / slot)
				fail_msg("class %d rel %llu", c,
				         (unsigned long long)rel);
	}

	struct farm_alloc_frag f;
	farm_alloc_frag_compute(&f);
	printf("size classes: 256, every line count up to %u lines, then "
	       "minimax-geometric to 1 MiB\n",
	       f.exact_lines);
	printf("internal fragmentation (line-granular): avg over classes "
	       "%.4f (goal <= 0.018), max %.4f (goal <= 0.036), "
	       "max class avg %.4f, avg over all 16384 requests %.4f\n",
	       f.avg, f.max, f.max_avg, f.req_avg);
	printf("byte-granular: rounding to lines avg %.5f max %.4f; "
	       "lines+class "
	       "avg %.4f; slab block tail max %.4f\n",
	       f.line_avg, f.line_max, f.bytes_avg, f.block_tail_max);
	assert_true(f.avg <= 0.018);
	assert_true(f.max <= 0.036);
	assert_true(f.exact_lines >= 16);
}

/* ---- basics, bad input, incarnations ---------------------------------- */

static void test_basic_errors(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 7);
	farm_blockalloc *ba = mk_ba(&p);
	farm_slab *s;
	assert_int_equal(farm_slab_create(ba, &s), 0);

	farm_gaddr a, b2, x;
	assert_int_equal(farm_slab_alloc(s, 100, FARM_GADDR_NULL, &a), 0);
	assert_int_equal(farm_gaddr_region(a), 7);
	assert_int_equal(a % 64, 0);
	assert_true(farm_gaddr_offset(a) >= FARM_ALLOC_BLOCK); /* not block 0 */
	struct farm_objhdr *h = hdr(ba, a);
	assert_true(farm_objhdr_allocated(h));
	assert_int_equal(farm_objhdr_incarnation(h), 0);
	farm_gaddr back;
	assert_int_equal(farm_alloc_gaddr_of(ba, h, &back), 0);
	assert_int_equal(back, a);
	assert_int_equal(farm_alloc_gaddr_of(ba, &back, &back), -EINVAL);
	assert_true(farm_alloc_region_is_local(ba, 7));
	assert_false(farm_alloc_region_is_local(ba, 8));
	assert_null(farm_alloc_local(ba, farm_gaddr_make(7, 16u << 20), 0));
	assert_null(farm_alloc_local(ba, farm_gaddr_make(99, 0), 0));

	/* Bad input: a clear error and nothing changed. */
	int drc;
	char *before = dump_str(ba, &drc);
	assert_int_equal(drc, 0);
	struct farm_alloc_stats st0, st1;
	farm_blockalloc_stats(ba, &st0);
	assert_int_equal(farm_slab_alloc(s, 0, FARM_GADDR_NULL, &x), -EINVAL);
	assert_int_equal(
	        farm_slab_alloc(s, (1u << 20) + 1, FARM_GADDR_NULL, &x),
	        -E2BIG);
	assert_int_equal(farm_slab_free(s, FARM_GADDR_NULL), -EINVAL);
	assert_int_equal(farm_slab_free(s, a + 8), -EINVAL);  /* misaligned */
	assert_int_equal(farm_slab_free(s, a + 64), -EINVAL); /* inside */
	assert_int_equal(farm_slab_free(s, farm_gaddr_make(7, 0x7fffffc0)),
	                 -EINVAL); /* past region */
	assert_int_equal(farm_slab_free(s, farm_gaddr_make(7, 64)),
	                 -EINVAL); /* table */
	assert_int_equal(farm_slab_free(s, farm_gaddr_make(7, 5u << 20)),
	                 -EINVAL); /* free block */
	assert_int_equal(farm_slab_free(s, farm_gaddr_make(0, 128)), -EINVAL);
	assert_int_equal(farm_slab_free(s, farm_gaddr_make(999, 128)),
	                 -EREMOTE);
	assert_int_equal(farm_slab_free(s, a + 128),
	                 -ENOENT); /* never allocated */
	assert_int_equal(farm_slab_alloc(s, 64, farm_gaddr_make(999, 64), &x),
	                 -EREMOTE);
	assert_int_equal(
	        farm_slab_alloc(s, 64, farm_gaddr_make(7, 0x7fffffc0), &x),
	        -EINVAL);
	assert_int_equal(farm_slab_free(NULL, a), -EINVAL);
	assert_int_equal(farm_slab_alloc(NULL, 64, 0, &x), -EINVAL);
	char *after = dump_str(ba, &drc);
	assert_int_equal(drc, 0);
	assert_string_equal(before, after);
	farm_blockalloc_stats(ba, &st1);
	assert_int_equal(st1.allocs, st0.allocs);
	assert_int_equal(st1.frees, st0.frees);
	assert_int_equal(st1.bytes_in_use, st0.bytes_in_use);
	assert_int_equal(st1.blocks_in_use, st0.blocks_in_use);
	assert_true(st1.free_errors >= 8);
	free(before);
	free(after);

	/* Incarnations: free bumps, alloc keeps; the version is never reset;
	 * the slot is reused at once for the same class. */
	atomic_store(&h->version, 0x1234); /* as the transaction layer would */
	assert_int_equal(farm_slab_free(s, a), 0);
	assert_false(farm_objhdr_allocated(h));
	assert_int_equal(farm_objhdr_incarnation(h), 1);
	assert_int_equal(farm_slab_free(s, a), -ENOENT); /* double free */
	assert_int_equal(farm_objhdr_incarnation(h), 1);
	assert_int_equal(farm_slab_alloc(s, 128, FARM_GADDR_NULL, &b2), 0);
	assert_int_equal(b2, a); /* same class (2 lines): same slot */
	assert_true(farm_objhdr_allocated(h));
	assert_int_equal(farm_objhdr_incarnation(h), 1);
	assert_int_equal(farm_objhdr_load_version(h), 0x1234);
	assert_int_equal(farm_slab_free(s, b2), 0);
	assert_int_equal(farm_objhdr_incarnation(h), 2);
	assert_int_equal(farm_objhdr_load_version(h), 0x1234);

	/* Largest plain object, and the counters. */
	assert_int_equal(farm_slab_alloc(s, 1u << 20, FARM_GADDR_NULL, &x), 0);
	assert_int_equal(farm_gaddr_offset(x) % FARM_ALLOC_BLOCK, 0);
	struct farm_alloc_stats ss;
	farm_slab_stats(s, &ss);
	assert_int_equal(ss.allocs, 3);
	assert_int_equal(ss.frees, 2);
	assert_int_equal(ss.bytes_in_use, 1 << 20);
	assert_int_equal(farm_slab_free(s, x), 0);

	farm_slab_destroy(s);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);

	/* Regions the allocator refuses. */
	prov_init(&p, 8u << 20, 1);
	ba = mk_ba(&p);
	struct farm_alloc_region r;
	assert_int_equal(prov_new(&p, 0, &r), 0);
	struct farm_alloc_region bad = r;
	bad.size = 3u << 20;
	assert_int_equal(farm_blockalloc_add_region(ba, &bad), -EINVAL);
	bad = r;
	bad.id = 0;
	assert_int_equal(farm_blockalloc_add_region(ba, &bad), -EINVAL);
	assert_int_equal(farm_blockalloc_add_region(ba, &r), 0);
	assert_int_equal(farm_blockalloc_add_region(ba, &r), -EEXIST);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* ---- marked claims ---------------------------------------------------- */

static uint64_t ver(farm_blockalloc *ba, farm_gaddr a)
{
	return farm_objhdr_load_version(hdr(ba, a));
}

static void set_ver(farm_blockalloc *ba, farm_gaddr a, uint64_t v)
{
	atomic_store(&hdr(ba, a)->version, v);
}

/* farm_slab_alloc_marked / farm_alloc_array_marked: the mark in the low
 * bits of every header's version word, the rest of the word kept but for
 * the free-pending bit; an unmarked claim leaves the word alone; a mark
 * outside FARM_OBJHDR_MARK_MASK is refused with nothing allocated. */
static void test_marked(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 3);
	farm_blockalloc *ba = mk_ba(&p);
	farm_slab *s;
	assert_int_equal(farm_slab_create(ba, &s), 0);
	farm_gaddr a, b;
	assert_int_equal(farm_slab_alloc(s, 100, FARM_GADDR_NULL, &a), 0);
	set_ver(ba, a, 0x40 | FARM_OBJHDR_FREE_PENDING | 2);
	assert_int_equal(farm_slab_free(s, a), 0);
	struct farm_alloc_stats st0, st1;
	farm_slab_stats(s, &st0);
	assert_int_equal(farm_slab_alloc_marked(s, 100, FARM_GADDR_NULL, 4, &b),
	                 -EINVAL);
	assert_int_equal(
	        farm_alloc_array_marked(s, 100, 2, FARM_GADDR_NULL, 8, &b),
	        -EINVAL);
	farm_slab_stats(s, &st1);
	assert_int_equal(st1.allocs, st0.allocs);
	assert_int_equal(farm_slab_alloc_marked(s, 100, FARM_GADDR_NULL, 1, &b),
	                 0);
	assert_int_equal(b, a); /* the freed slot, first on its list */
	assert_true(farm_objhdr_allocated(hdr(ba, b)));
	assert_int_equal(ver(ba, b), 0x41);
	assert_int_equal(farm_slab_free(s, b), 0);
	set_ver(ba, b, 0x80 | 2);
	assert_int_equal(farm_slab_alloc(s, 100, FARM_GADDR_NULL, &a), 0);
	assert_int_equal(a, b);
	assert_int_equal(ver(ba, a), 0x82); /* unmarked: untouched */
	/* A small array (one slot) and a large one (a run of blocks). */
	const uint64_t es[2] = {100, 600u << 10}, n[2] = {3, 3};
	for (int k = 0; k < 2; k++) {
		farm_gaddr c;
		assert_int_equal(farm_alloc_array_marked(s, es[k], n[k],
		                                         FARM_GADDR_NULL, 2,
		                                         &c),
		                 0);
		uint64_t esz = (es[k] + 63) / 64 * 64;
		for (uint64_t i = 0; i < n[k]; i++) {
			assert_true(
			        farm_objhdr_allocated(hdr(ba, c + i * esz)));
			assert_int_equal(ver(ba, c + i * esz) & 3, 2);
		}
		assert_int_equal(farm_alloc_array_free(s, c, es[k], n[k]), 0);
	}
	farm_slab_destroy(s);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* ---- hints ------------------------------------------------------------ */

static uint64_t hint_count(farm_slab *s, int level)
{
	struct farm_alloc_stats st;
	farm_slab_stats(s, &st);
	return st.hint[level];
}

static void test_hints(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 8u << 20, 100); /* 7 usable 1 MiB blocks per region */
	farm_blockalloc *ba = mk_ba(&p);
	farm_slab *s;
	assert_int_equal(farm_slab_create(ba, &s), 0);
	farm_gaddr a, x, prev;
	assert_int_equal(farm_slab_alloc(s, 64, FARM_GADDR_NULL, &a), 0);
	uint32_t ra = farm_gaddr_region(a);
	uint32_t blk = farm_gaddr_offset(a) >> 20;

	/* Level 1: the hint's block, until it is full (16384 slots). */
	uint64_t n1 = 0;
	for (;;) {
		uint64_t before = hint_count(s, FARM_ALLOC_HINT_BLOCK);
		assert_int_equal(farm_slab_alloc(s, 40, a, &x), 0);
		if (hint_count(s, FARM_ALLOC_HINT_BLOCK) == before)
			break;
		assert_int_equal(farm_gaddr_region(x), ra);
		assert_int_equal(farm_gaddr_offset(x) >> 20, blk);
		n1++;
	}
	assert_int_equal(n1, FARM_ALLOC_BLOCK / 64 - 1);
	/* Block full: level 2, same region, another block. */
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_REGION), 1);
	assert_int_equal(farm_gaddr_region(x), ra);
	assert_int_not_equal(farm_gaddr_offset(x) >> 20, blk);
	/* A hint of another class is a level-2 placement too. */
	assert_int_equal(farm_slab_alloc(s, 300, a, &x), 0);
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_REGION), 2);
	assert_int_equal(farm_gaddr_region(x), ra);

	/* A hint in another slab's block: not ours, so level 2. */
	farm_slab *s2;
	assert_int_equal(farm_slab_create(ba, &s2), 0);
	uint64_t r2 = hint_count(s2, FARM_ALLOC_HINT_REGION);
	assert_int_equal(farm_slab_alloc(s2, 64, a, &x), 0);
	assert_int_equal(hint_count(s2, FARM_ALLOC_HINT_REGION), r2 + 1);
	assert_int_equal(farm_gaddr_region(x), ra);
	assert_int_not_equal(farm_gaddr_offset(x) >> 20, blk);

	/* Fill the region with 1 MiB objects: each at level 2 while a block
	 * is left, then level 3 in a new region created near it. */
	int before_regions = p.n;
	uint64_t lvl2 = hint_count(s, FARM_ALLOC_HINT_REGION);
	uint64_t n2 = 0;
	for (;;) {
		assert_int_equal(farm_slab_alloc(s, 1u << 20, a, &x), 0);
		if (farm_gaddr_region(x) != ra)
			break;
		n2++;
	}
	assert_true(n2 >= 1);
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_REGION), lvl2 + n2);
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_NEAR), 1);
	assert_int_equal(p.n, before_regions + 1);
	assert_int_equal(p.near[p.n - 1], ra);
	uint32_t rnear = farm_gaddr_region(x);
	/* The next one goes to the same near region: no new region. */
	prev = x;
	assert_int_equal(farm_slab_alloc(s, 1u << 20, a, &x), 0);
	assert_int_equal(farm_gaddr_region(x), rnear);
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_NEAR), 2);
	assert_int_equal(p.n, before_regions + 1);
	/* A hint in the near region: level 1 for its own class when the
	 * block has room (1 MiB class: one slot per block, so level 2). */
	assert_int_equal(farm_slab_alloc(s, 64, prev, &x), 0);
	assert_int_equal(farm_gaddr_region(x), rnear);
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_REGION), lvl2 + n2 + 1);
	/* And its own block for the next one (level 1). */
	farm_gaddr y;
	assert_int_equal(farm_slab_alloc(s, 64, x, &y), 0);
	assert_int_equal(y >> 20, x >> 20);
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_BLOCK), n1 + 1);

	/* Remote: the hint's region is not local. */
	uint64_t rem = hint_count(s, FARM_ALLOC_HINT_REMOTE);
	assert_int_equal(farm_slab_alloc(s, 64, farm_gaddr_make(4242, 64), &x),
	                 -EREMOTE);
	assert_int_equal(hint_count(s, FARM_ALLOC_HINT_REMOTE), rem + 1);
	assert_int_equal(
	        farm_alloc_array(s, 64, 4, farm_gaddr_make(4242, 64), &x),
	        -EREMOTE);

	farm_slab_destroy(s2);
	farm_slab_destroy(s);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* ---- arrays ----------------------------------------------------------- */

static void test_arrays(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 1);
	farm_blockalloc *ba = mk_ba(&p);
	farm_slab *s;
	assert_int_equal(farm_slab_create(ba, &s), 0);
	farm_gaddr a, b, x;

	/* Small: one slot of the class of the total, elements back to back. */
	assert_int_equal(farm_alloc_array(s, 100, 10, FARM_GADDR_NULL, &a), 0);
	char *p0 = farm_alloc_local(ba, a, 10 * 128);
	assert_non_null(p0);
	for (int i = 0; i < 10; i++) {
		struct farm_objhdr *h = (void *)(p0 + i * 128);
		assert_true(farm_objhdr_allocated(h));
		assert_ptr_equal(
		        farm_alloc_local(ba, a + (uint64_t)i * 128, 128),
		        p0 + i * 128);
		memset(p0 + i * 128 + 16, i, 112);
	}
	struct farm_alloc_stats st;
	farm_slab_stats(s, &st);
	assert_int_equal(st.bytes_in_use,
	                 farm_alloc_class_size(farm_alloc_class_of(1280)));
	/* A neighbour near the array. */
	assert_int_equal(farm_alloc_array(s, 64, 3, a, &b), 0);
	assert_int_equal(farm_gaddr_region(b), farm_gaddr_region(a));
	/* Free needs the right dimensions. */
	assert_int_equal(farm_alloc_array_free(s, a, 100, 11), -EINVAL);
	assert_int_equal(farm_alloc_array_free(s, a, 200, 10), -EINVAL);
	assert_int_equal(farm_alloc_array_free(s, a + 128, 100, 9), -EINVAL);
	assert_int_equal(farm_alloc_array_free(s, a, 100, 10), 0);
	for (int i = 0; i < 10; i++) {
		struct farm_objhdr *h = (void *)(p0 + i * 128);
		assert_false(farm_objhdr_allocated(h));
		assert_int_equal(farm_objhdr_incarnation(h), 1);
	}
	assert_int_equal(farm_alloc_array_free(s, a, 100, 10), -ENOENT);
	/* The slot is reused by the next object of its class. */
	assert_int_equal(farm_slab_alloc(s, 1280, FARM_GADDR_NULL, &x), 0);
	assert_int_equal(x, a);
	assert_int_equal(farm_slab_free(s, x), 0);

	/* Large: whole blocks, 1000 B elements (16 lines) x 3000 = 3 MiB
	 * less a little: three blocks. */
	assert_int_equal(farm_alloc_array(s, 1000, 3000, FARM_GADDR_NULL, &a),
	                 0);
	assert_int_equal(farm_gaddr_offset(a) % FARM_ALLOC_BLOCK, 0);
	p0 = farm_alloc_local(ba, a, 3000 * 1024);
	assert_non_null(p0);
	for (int i = 0; i < 3000; i++)
		assert_true(farm_objhdr_allocated((void *)(p0 + i * 1024)));
	struct farm_alloc_stats bs0, bs1;
	farm_blockalloc_stats(ba, &bs0);
	assert_int_equal(farm_slab_free(s, a), -EINVAL); /* not a slab object */
	assert_int_equal(farm_alloc_array_free(s, a, 1000, 2999), -EINVAL);
	assert_int_equal(
	        farm_alloc_array_free(s, a + FARM_ALLOC_BLOCK, 1000, 3000),
	        -EINVAL);
	int drc;
	char *d = dump_str(ba, &drc);
	assert_int_equal(drc, 0);
	assert_non_null(strstr(d, "array elem 1024 n 3000 unallocated 0"));
	free(d);
	assert_int_equal(farm_alloc_array_free(s, a, 1000, 3000), 0);
	assert_int_equal(farm_alloc_array_free(s, a, 1000, 3000), -ENOENT);
	for (int i = 0; i < 3000; i++) {
		struct farm_objhdr *h = (void *)(p0 + i * 1024);
		assert_false(farm_objhdr_allocated(h));
		assert_int_equal(farm_objhdr_incarnation(h), 1);
	}
	farm_blockalloc_stats(ba, &bs1);
	assert_int_equal(bs1.blocks_retired, bs0.blocks_retired + 3);
	assert_int_equal(bs1.blocks_in_use, bs0.blocks_in_use - 3);

	/* Bad input. */
	assert_int_equal(farm_alloc_array(s, 64, 0, 0, &x), -EINVAL);
	assert_int_equal(farm_alloc_array(s, 0, 5, 0, &x), -EINVAL);
	assert_int_equal(farm_alloc_array(s, (1u << 20) + 1, 2, 0, &x), -E2BIG);
	assert_int_equal(farm_alloc_array(s, 64, 1ull << 40, 0, &x), -E2BIG);
	/* Larger than this provider's regions (16 MiB): refused. */
	assert_int_equal(farm_alloc_array(s, 1u << 20, 20, 0, &x), -E2BIG);

	farm_slab_destroy(s);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* ---- many threads ----------------------------------------------------- */

#define NTHREADS 3
#define LIVE_MAX 4096
#define QMAX     8192

struct obj {
	farm_gaddr a;
	uint32_t size;  /* requested */
	uint32_t csize; /* class bytes */
};

struct tstate {
	int id;
	farm_slab *s;
	farm_blockalloc *ba;
	uint64_t ops;
	uint64_t seed;
	struct obj live[LIVE_MAX];
	int nlive;
	/* Objects other threads hand us to free. */
	pthread_mutex_t qlock;
	struct obj q[QMAX];
	int nq;
	/* Results. */
	uint64_t bad_pattern, alloc_err, free_err, handed, freed_remote;
};

static struct tstate *g_ts[NTHREADS];

static uint64_t pat(farm_gaddr a)
{
	return a * 0x9e3779b97f4a7c15ull ^ 0xa5a5;
}

static void obj_fill(farm_blockalloc *ba, const struct obj *o)
{
	char *p = farm_alloc_local(ba, o->a, o->size);
	uint64_t v = pat(o->a);
	if (o->size <= 512) {
		for (uint32_t off = 16; off + 8 <= o->size; off += 8)
			memcpy(p + off, &v, 8);
	} else {
		memcpy(p + 16, &v, 8);
		memcpy(p + o->size / 2 / 8 * 8, &v, 8);
		memcpy(p + (o->size - 8) / 8 * 8, &v, 8);
	}
}

static bool obj_check(farm_blockalloc *ba, const struct obj *o)
{
	char *p = farm_alloc_local(ba, o->a, o->size);
	if (!p || !farm_objhdr_allocated((void *)p))
		return false;
	uint64_t v = pat(o->a), w;
	if (o->size <= 512) {
		for (uint32_t off = 16; off + 8 <= o->size; off += 8) {
			memcpy(&w, p + off, 8);
			if (w != v)
				return false;
		}
		return true;
	}
	uint32_t offs[3] = {16, o->size / 2 / 8 * 8, (o->size - 8) / 8 * 8};
	for (int i = 0; i < 3; i++) {
		memcpy(&w, p + offs[i], 8);
		if (w != v)
			return false;
	}
	return true;
}

static uint32_t rand_size(uint64_t *seed)
{
	uint64_t r = farm_rand64(seed);
	unsigned k = r % 100;
	r >>= 8;
	if (k < 70)
		return 24 + (uint32_t)(r % 1000); /* 24 B .. 1 KiB */
	if (k < 95)
		return 1024 + (uint32_t)(r % 15360); /* 1 .. 16 KiB */
	if (k < 99)
		return 16384 + (uint32_t)(r % 114688); /* 16 .. 128 KiB */
	return 131072 + (uint32_t)(r % 917505);        /* 128 KiB .. 1 MiB */
}

static void drain_queue(struct tstate *t)
{
	pthread_mutex_lock(&t->qlock);
	for (int i = 0; i < t->nq; i++) {
		if (!obj_check(t->ba, &t->q[i]))
			t->bad_pattern++;
		if (farm_slab_free(t->s, t->q[i].a))
			t->free_err++;
		else
			t->freed_remote++;
	}
	t->nq = 0;
	pthread_mutex_unlock(&t->qlock);
}

static void *thread_main(void *arg)
{
	struct tstate *t = arg;
	for (uint64_t op = 0; op < t->ops; op++) {
		uint64_t r = farm_rand64(&t->seed);
		if ((op & 255) == 0)
			drain_queue(t);
		bool do_alloc = t->nlive == 0 ||
		                (t->nlive < LIVE_MAX && (r % 100) < 52);
		if (do_alloc) {
			struct obj o;
			o.size = rand_size(&t->seed);
			o.csize = farm_alloc_class_size(
			        farm_alloc_class_of(o.size));
			if (farm_slab_alloc(t->s, o.size, FARM_GADDR_NULL,
			                    &o.a)) {
				t->alloc_err++;
				continue;
			}
			obj_fill(t->ba, &o);
			t->live[t->nlive++] = o;
			continue;
		}
		int i = (int)((r >> 8) % (uint64_t)t->nlive);
		struct obj o = t->live[i];
		t->live[i] = t->live[--t->nlive];
		if (!obj_check(t->ba, &o))
			t->bad_pattern++;
		if ((r >> 40) % 100 < 30) {
			/* Hand it to another thread to free. */
			struct tstate *u =
			        g_ts[(t->id + 1 +
			              (int)((r >> 50) % (NTHREADS - 1))) %
			             NTHREADS];
			pthread_mutex_lock(&u->qlock);
			if (u->nq < QMAX) {
				u->q[u->nq++] = o;
				t->handed++;
				pthread_mutex_unlock(&u->qlock);
				continue;
			}
			pthread_mutex_unlock(&u->qlock);
		}
		if (farm_slab_free(t->s, o.a))
			t->free_err++;
	}
	return NULL;
}

static int cmp_obj(const void *x, const void *y)
{
	const struct obj *a = x, *b = y;
	return a->a < b->a ? -1 : a->a > b->a;
}

static void test_threads(void **state)
{
	(void)state;
	uint64_t ops = 1000000;
	const char *e = getenv("FARM_ALLOC_TEST_OPS");
	if (e)
		ops = strtoull(e, NULL, 10);
	struct prov p;
	prov_init(&p, 64u << 20, 1);
	farm_blockalloc *ba = mk_ba(&p);
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		struct tstate *t = calloc(1, sizeof(*t));
		assert_non_null(t);
		t->id = i;
		t->ba = ba;
		t->ops = ops;
		t->seed = 1000 + (uint64_t)i;
		pthread_mutex_init(&t->qlock, NULL);
		assert_int_equal(farm_slab_create(ba, &t->s), 0);
		g_ts[i] = t;
	}
	uint64_t t0 = farm_now_ns();
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(
		        pthread_create(&th[i], NULL, thread_main, g_ts[i]), 0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	double secs = (double)(farm_now_ns() - t0) / 1e9;

	/* Every live object (threads' and queued): no overlap, patterns
	 * intact, bytes and counts agree with the counters. */
	size_t cap = NTHREADS * (LIVE_MAX + QMAX), n = 0;
	struct obj *all = malloc(cap * sizeof(*all));
	assert_non_null(all);
	uint64_t bad = 0, aerr = 0, ferr = 0, handed = 0, fremote = 0;
	int64_t bytes = 0;
	for (int i = 0; i < NTHREADS; i++) {
		struct tstate *t = g_ts[i];
		for (int k = 0; k < t->nlive; k++)
			all[n++] = t->live[k];
		for (int k = 0; k < t->nq; k++)
			all[n++] = t->q[k];
		bad += t->bad_pattern;
		aerr += t->alloc_err;
		ferr += t->free_err;
		handed += t->handed;
		fremote += t->freed_remote;
	}
	qsort(all, n, sizeof(*all), cmp_obj);
	uint64_t overlaps = 0;
	for (size_t i = 0; i < n; i++) {
		bytes += all[i].csize;
		if (!obj_check(ba, &all[i]))
			bad++;
		if (i && all[i - 1].a + all[i - 1].csize > all[i].a)
			overlaps++;
	}
	struct farm_alloc_stats st;
	farm_blockalloc_stats(ba, &st);
	printf("threads: %d x %llu ops in %.2f s; %zu live, %llu B; %llu "
	       "handed "
	       "across threads; allocs %llu frees %llu (remote %llu); regions "
	       "%llu, blocks %llu\n",
	       NTHREADS, (unsigned long long)ops, secs, n,
	       (long long unsigned)bytes, (unsigned long long)handed,
	       (unsigned long long)st.allocs, (unsigned long long)st.frees,
	       (unsigned long long)st.remote_frees,
	       (unsigned long long)st.regions,
	       (unsigned long long)st.blocks_in_use);
	assert_int_equal(bad, 0);
	assert_int_equal(overlaps, 0);
	assert_int_equal(aerr, 0);
	assert_int_equal(ferr, 0);
	assert_true(handed > ops / 20);
	assert_int_equal(st.allocs - st.frees, n);
	assert_int_equal(st.bytes_in_use, bytes);
	assert_true(st.remote_frees >= fremote);
	int drc;
	char *d = dump_str(ba, &drc);
	assert_int_equal(drc, 0); /* free lists agree with every header */
	free(d);

	/* The threads go; a new slab frees everything (all remote), then
	 * allocates again from adopted blocks, not new ones. */
	for (int i = 0; i < NTHREADS; i++)
		farm_slab_destroy(g_ts[i]->s);
	farm_slab *m;
	assert_int_equal(farm_slab_create(ba, &m), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(farm_slab_free(m, all[i].a), 0);
	farm_blockalloc_stats(ba, &st);
	assert_int_equal(st.allocs, st.frees);
	assert_int_equal(st.bytes_in_use, 0);
	d = dump_str(ba, &drc);
	assert_int_equal(drc, 0);
	assert_null(strstr(d, "allocated ")); /* no slot allocated anywhere */
	free(d);
	uint64_t blocks = st.blocks_in_use;
	farm_gaddr x;
	for (int i = 0; i < 1000; i++)
		assert_int_equal(farm_slab_alloc(m, 24 + (uint64_t)i * 37,
		                                 FARM_GADDR_NULL, &x),
		                 0);
	farm_blockalloc_stats(ba, &st);
	assert_int_equal(st.blocks_in_use, blocks);
	farm_slab_destroy(m);
	for (int i = 0; i < NTHREADS; i++) {
		pthread_mutex_destroy(&g_ts[i]->qlock);
		free(g_ts[i]);
	}
	free(all);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* Two threads free the same objects at once: exactly one wins each. */
struct race {
	farm_blockalloc *ba;
	farm_gaddr *objs;
	int n;
	_Atomic int go;
	int wins;
};

static void *race_main(void *arg)
{
	struct race *r = arg;
	farm_slab *s;
	if (farm_slab_create(r->ba, &s))
		return NULL;
	while (!atomic_load(&r->go))
		farm_cpu_relax();
	int wins = 0;
	for (int i = 0; i < r->n; i++)
		wins += farm_slab_free(s, r->objs[i]) == 0;
	farm_slab_destroy(s);
	return (void *)(intptr_t)wins;
}

static void test_double_free_race(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 1);
	farm_blockalloc *ba = mk_ba(&p);
	farm_slab *s;
	assert_int_equal(farm_slab_create(ba, &s), 0);
	enum { N = 20000 };
	farm_gaddr *objs = malloc(N * sizeof(*objs));
	assert_non_null(objs);
	for (int i = 0; i < N; i++)
		assert_int_equal(farm_slab_alloc(s, 64, 0, &objs[i]), 0);
	struct race r = {.ba = ba, .objs = objs, .n = N};
	pthread_t a, b;
	pthread_create(&a, NULL, race_main, &r);
	pthread_create(&b, NULL, race_main, &r);
	atomic_store(&r.go, 1);
	void *wa, *wb;
	pthread_join(a, &wa);
	pthread_join(b, &wb);
	assert_int_equal((int)(intptr_t)wa + (int)(intptr_t)wb, N);
	int drc;
	char *d = dump_str(ba, &drc);
	assert_int_equal(drc, 0); /* every slot listed once */
	free(d);
	/* Every slot comes back exactly once. */
	for (int i = 0; i < N; i++)
		assert_int_equal(farm_slab_alloc(s, 64, 0, &objs[i]), 0);
	qsort(objs, N, sizeof(*objs), cmp_obj);
	for (int i = 1; i < N; i++)
		assert_true(objs[i] > objs[i - 1]);
	free(objs);
	farm_slab_destroy(s);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* ---- rebuild ---------------------------------------------------------- */

static void test_rebuild(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 50);
	farm_blockalloc *ba = mk_ba(&p);
	farm_slab *s1, *s2;
	assert_int_equal(farm_slab_create(ba, &s1), 0);
	assert_int_equal(farm_slab_create(ba, &s2), 0);
	enum { N = 30000 };
	farm_gaddr *objs = malloc(N * sizeof(*objs));
	assert_non_null(objs);
	uint64_t seed = 7;
	for (int i = 0; i < N; i++) {
		uint32_t sz = rand_size(&seed);
		if (sz > 8192)
			sz = 64 + sz % 512;
		assert_int_equal(
		        farm_slab_alloc(i & 1 ? s2 : s1, sz, 0, &objs[i]), 0);
	}
	/* Free a third locally, a third from the other slab (remote stacks). */
	for (int i = 0; i < N; i++) {
		uint64_t r = farm_rand64(&seed) % 3;
		if (r == 0)
			assert_int_equal(
			        farm_slab_free(i & 1 ? s2 : s1, objs[i]), 0);
		else if (r == 1)
			assert_int_equal(
			        farm_slab_free(i & 1 ? s1 : s2, objs[i]), 0);
	}
	farm_gaddr arr_small, arr_large, arr_gone;
	assert_int_equal(farm_alloc_array(s1, 200, 7, 0, &arr_small), 0);
	assert_int_equal(farm_alloc_array(s1, 4096, 600, 0, &arr_large), 0);
	assert_int_equal(farm_alloc_array(s2, 4096, 300, 0, &arr_gone), 0);
	assert_int_equal(farm_alloc_array_free(s1, arr_gone, 4096, 300), 0);

	int rc1, rc2;
	char *live = dump_str(ba, &rc1);
	assert_int_equal(rc1, 0);
	struct farm_alloc_stats st1, st2;
	farm_blockalloc_stats(ba, &st1);

	/* Rebuild from copies of the regions (as from a replica). */
	struct farm_alloc_region copies[PROV_MAX];
	int nc = p.n;
	farm_blockalloc *rb;
	struct farm_blockalloc_attr at = {0};
	assert_int_equal(farm_blockalloc_create(&at, &rb), 0);
	for (int i = 0; i < nc; i++) {
		copies[i] = p.r[i];
		copies[i].base = aligned_alloc(4096, p.r[i].size);
		assert_non_null(copies[i].base);
		memcpy(copies[i].base, p.r[i].base, p.r[i].size);
		assert_int_equal(farm_blockalloc_rebuild_region(rb, &copies[i]),
		                 0);
	}
	char *rebuilt = dump_str(rb, &rc2);
	assert_int_equal(rc2, 0);
	printf("rebuild: %d regions, live dump %zu bytes, rebuilt dump %zu "
	       "bytes\n",
	       nc, strlen(live), strlen(rebuilt));
	assert_string_equal(live, rebuilt);
	farm_blockalloc_stats(rb, &st2);
	assert_int_equal(st2.bytes_in_use, st1.bytes_in_use);
	assert_int_equal(st2.blocks_in_use, st1.blocks_in_use);
	assert_int_equal(st2.blocks_retired, st1.blocks_retired);
	assert_int_equal(st2.allocs - st2.frees, st1.allocs - st1.frees);

	/* The rebuilt allocator works: frees what was live, reuses blocks. */
	farm_slab *s3;
	assert_int_equal(farm_slab_create(rb, &s3), 0);
	assert_int_equal(farm_alloc_array_free(s3, arr_small, 200, 7), 0);
	assert_int_equal(farm_alloc_array_free(s3, arr_large, 4096, 600), 0);
	assert_int_equal(farm_alloc_array_free(s3, arr_gone, 4096, 300),
	                 -ENOENT);
	farm_gaddr x;
	uint64_t blocks = st2.blocks_in_use;
	for (int i = 0; i < 1000; i++)
		assert_int_equal(farm_slab_alloc(s3, i & 1 ? 64 : 1000, 0, &x),
		                 0);
	farm_blockalloc_stats(rb, &st2);
	assert_int_equal(st2.blocks_in_use, blocks - 3 /* the large array */);
	farm_slab_destroy(s3);
	farm_blockalloc_destroy(rb);

	/* Corrupt copies are refused, with nothing added. */
	assert_int_equal(farm_blockalloc_create(&at, &rb), 0);
	((uint64_t *)copies[0].base)[0] ^= 1; /* magic */
	assert_int_equal(farm_blockalloc_rebuild_region(rb, &copies[0]),
	                 FARM_ECORRUPT);
	((uint64_t *)copies[0].base)[0] ^= 1;
	/* The large array's second block claims another head. */
	int ri = (int)farm_gaddr_region(arr_large) - 50;
	memcpy(copies[ri].base, p.r[ri].base, 1u << 20); /* s3 freed it */
	uint64_t *table = (uint64_t *)((char *)copies[ri].base + 64);
	uint32_t k = farm_gaddr_offset(arr_large) >> 20;
	assert_int_equal(table[k] >> 60, 3);
	assert_int_equal(table[k + 1], (4ull << 60) | k);
	table[k + 1] = (4ull << 60) | 9999;
	assert_int_equal(farm_blockalloc_rebuild_region(rb, &copies[ri]),
	                 FARM_ECORRUPT);
	assert_false(farm_alloc_region_is_local(rb, copies[ri].id));
	assert_int_equal(farm_blockalloc_rebuild_region(rb, &copies[0]), 0);
	if (ri != 0)
		assert_true(farm_alloc_region_is_local(rb, copies[0].id));
	farm_blockalloc_destroy(rb);

	for (int i = 0; i < nc; i++)
		free(copies[i].base);
	free(live);
	free(rebuilt);
	free(objs);
	farm_slab_destroy(s1);
	farm_slab_destroy(s2);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* ---- replicating the block table --------------------------------------- */

enum { CN_N = 20000 }; /* test_copy_note's objects */

/* test_copy_note's state: the owner's allocator and objects (each with
 * its block's description when new), and the replica's copies. */
struct cn {
	struct prov *p;
	farm_blockalloc *ba;
	farm_slab *s1, *s2;
	farm_gaddr *objs;
	uint32_t *info;
	farm_gaddr small; /* an array of 7 elements, and its description */
	uint32_t small_info;
	int nc;
	struct farm_alloc_region copies[PROV_MAX];
};

/* The owner's objects, a third of them freed again, and the block
 * descriptions taken when each was new; bad input refused. */
static void cn_allocate(struct cn *x)
{
	uint64_t seed = 11;
	for (int i = 0; i < CN_N; i++) {
		uint32_t sz = rand_size(&seed);
		if (sz > 8192)
			sz = 64 + sz % 512;
		if (i % 997 == 0) /* classes of 2 and 5 MiB blocks too */
			sz = i & 1 ? 89000 : 470000;
		assert_int_equal(farm_slab_alloc(i & 1 ? x->s2 : x->s1, sz, 0,
		                                 &x->objs[i]),
		                 0);
		/* Taken when the object is new, as a commit does. */
		assert_int_equal(
		        farm_alloc_block_info(x->ba, x->objs[i], &x->info[i]),
		        0);
		assert_true(x->info[i] & 1);
		assert_int_equal(x->info[i] >> FARM_ALLOC_BINFO_BITS, 0);
	}
	assert_int_equal(farm_alloc_array(x->s1, 200, 7, 0, &x->small), 0);
	assert_int_equal(farm_alloc_block_info(x->ba, x->small, &x->small_info),
	                 0);
	for (int i = 0; i < CN_N; i++)
		if (farm_rand64(&seed) % 3 == 0)
			assert_int_equal(farm_slab_free(i & 1 ? x->s1 : x->s2,
			                                x->objs[i]),
			                 0);
	/* Bad input. */
	assert_int_equal(farm_alloc_block_info(x->ba, farm_gaddr_make(9999, 64),
	                                       &x->info[0]),
	                 -EREMOTE);
	assert_int_equal(farm_alloc_block_info(NULL, x->objs[0], &x->info[0]),
	                 -EINVAL);
}

/* The copies: zero, then every object's image (allocated or freed since:
 * both were replicated) and its block's description, in a shuffled order
 * (replicas apply records of many logs). */
static void cn_copy(struct cn *x)
{
	const struct prov *p = x->p;
	x->nc = p->n;
	for (int i = 0; i < x->nc; i++) {
		x->copies[i] = p->r[i];
		x->copies[i].base = aligned_alloc(4096, p->r[i].size);
		assert_non_null(x->copies[i].base);
		memset(x->copies[i].base, 0, p->r[i].size);
	}
	uint64_t wrote = 0;
	for (int k = 0; k <= CN_N; k++) {
		int i = k == CN_N ? -1 : (int)((k * 7919ull) % CN_N);
		farm_gaddr a = i < 0 ? x->small : x->objs[i];
		uint32_t in = i < 0 ? x->small_info : x->info[i];
		int ci = (int)farm_gaddr_region(a) - 70;
		assert_true(ci >= 0 && ci < x->nc);
		uint64_t off = farm_gaddr_offset(a);
		/* The image: its header says how many lines it has (the
		 * array's: 7 elements of 4 lines). */
		const struct farm_objhdr *h =
		        (const void *)((char *)p->r[ci].base + off);
		uint64_t lines =
		        i < 0 ? 7 * 4 : ((h->incarn >> 1) & 0x3fff) + 1;
		memcpy((char *)x->copies[ci].base + off,
		       (char *)p->r[ci].base + off, lines * 64);
		int rc = farm_alloc_copy_note(&x->copies[ci], a, in);
		assert_true(rc == 0 || rc == 1);
		wrote += (uint64_t)rc;
		assert_int_equal(farm_alloc_copy_note(&x->copies[ci], a, in),
		                 0);
	}
	assert_true(wrote > 0);
}

/* Refused: bad descriptions, another region's copy, a class that
 * contradicts the noted one. Nothing is written. */
static void cn_refused(struct cn *x)
{
	farm_gaddr o = x->objs[0];
	uint32_t in = x->info[0];
	struct farm_alloc_region *c =
	        &x->copies[(int)farm_gaddr_region(o) - 70];
	assert_int_equal(farm_alloc_copy_note(c, o, 0), -EINVAL);
	assert_int_equal(farm_alloc_copy_note(c, o, in | 7u << 12), -EINVAL);
	assert_int_equal(
	        farm_alloc_copy_note(c, farm_gaddr_make(9999, 1 << 20), in),
	        -EINVAL);
	uint32_t other = (in & ~(0xffu << 1)) | ((((in >> 1) & 0xff) ^ 1) << 1);
	if (farm_alloc_class_block_mb((int)((other >> 1) & 0xff)) ==
	    ((other >> 9) & 7))
		assert_int_equal(farm_alloc_copy_note(c, o, other),
		                 FARM_ECORRUPT);
}

/* Owners are not carried (copies say 0): the live state without slabs
 * is what the copies must rebuild to. Destroys the owner's slabs. */
static void cn_rebuild(struct cn *x)
{
	farm_slab_destroy(x->s1);
	farm_slab_destroy(x->s2);
	int rc1, rc2;
	char *live = dump_str(x->ba, &rc1);
	assert_int_equal(rc1, 0);
	farm_blockalloc *rb;
	struct farm_blockalloc_attr at = {0};
	assert_int_equal(farm_blockalloc_create(&at, &rb), 0);
	for (int i = 0; i < x->nc; i++) {
		assert_true(farm_alloc_copy_formatted(&x->copies[i]));
		assert_int_equal(
		        farm_blockalloc_rebuild_region(rb, &x->copies[i]), 0);
	}
	char *rebuilt = dump_str(rb, &rc2);
	assert_int_equal(rc2, 0);
	printf("copy note: %d regions, %d objects, dump %zu bytes, equal %d\n",
	       x->nc, CN_N, strlen(live), strcmp(live, rebuilt) == 0);
	assert_string_equal(live, rebuilt);
	struct farm_alloc_stats st1, st2;
	farm_blockalloc_stats(x->ba, &st1);
	farm_blockalloc_stats(rb, &st2);
	assert_int_equal(st2.blocks_in_use, st1.blocks_in_use);
	assert_int_equal(st2.blocks_unusable, 0);
	farm_blockalloc_destroy(rb);
	free(live);
	free(rebuilt);
}

/* A large array's run is not carried: its copy holds the elements in
 * blocks the copied table says are FREE. A rebuild must never hand them
 * out. */
static void cn_large_array(struct cn *x)
{
	farm_slab *s3;
	assert_int_equal(farm_slab_create(x->ba, &s3), 0);
	farm_gaddr big;
	assert_int_equal(farm_alloc_array(s3, 4096, 600, 0, &big), 0);
	uint32_t bi;
	assert_int_equal(farm_alloc_block_info(x->ba, big, &bi), -ENOENT);
	int cb = (int)farm_gaddr_region(big) - 70;
	char *cbase = x->copies[cb].base;
	uint64_t boff = farm_gaddr_offset(big), blen = 4096ull * 600;
	for (uint64_t e = 0; e < 600; e++) /* each element's header */
		memcpy(cbase + boff + e * 4096,
		       (char *)x->p->r[cb].base + boff + e * 4096, 16);
	char *keep = malloc(blen);
	assert_non_null(keep);
	memcpy(keep, cbase + boff, blen);
	farm_blockalloc *rb;
	struct farm_blockalloc_attr at = {0};
	assert_int_equal(farm_blockalloc_create(&at, &rb), 0);
	assert_int_equal(farm_blockalloc_rebuild_region(rb, &x->copies[cb]), 0);
	struct farm_alloc_stats st2;
	farm_blockalloc_stats(rb, &st2);
	printf("copy note: a large array's 3 blocks, %llu found unusable\n",
	       (unsigned long long)st2.blocks_unusable);
	assert_int_equal(st2.blocks_unusable, 3);
	farm_slab *s4;
	assert_int_equal(farm_slab_create(rb, &s4), 0);
	farm_gaddr g;
	int got = 0;
	while (farm_slab_alloc(s4, 100000, big, &g) == 0 &&
	       farm_gaddr_region(g) == x->copies[cb].id && got < 1000) {
		uint64_t xo = farm_gaddr_offset(g);
		assert_true(xo + 100000 <= boff || xo >= boff + blen);
		got++;
	}
	assert_true(got > 0);
	assert_memory_equal(keep, cbase + boff, blen);
	farm_slab_destroy(s4);
	farm_blockalloc_destroy(rb);
	farm_slab_destroy(s3);
	free(keep);
}

/*
 * A replica's copy receives object images only; the block-table words come
 * from farm_alloc_block_info() carried with each new object and written by
 * farm_alloc_copy_note(). Rebuilt by scan, such a copy must give the
 * owner's allocator state exactly.
 */
static void test_copy_note(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 70);
	struct cn x = {.p = &p, .ba = mk_ba(&p)};
	assert_int_equal(farm_slab_create(x.ba, &x.s1), 0);
	assert_int_equal(farm_slab_create(x.ba, &x.s2), 0);
	x.objs = malloc(CN_N * sizeof(*x.objs));
	x.info = malloc(CN_N * sizeof(*x.info));
	assert_non_null(x.objs);
	assert_non_null(x.info);
	cn_allocate(&x);
	cn_copy(&x);
	cn_refused(&x);
	cn_rebuild(&x);
	cn_large_array(&x);
	for (int i = 0; i < x.nc; i++)
		free(x.copies[i].base);
	free(x.objs);
	free(x.info);
	farm_blockalloc_destroy(x.ba);
	prov_fini(&p);
}

/* ---- retiring a region ------------------------------------------------- */

static bool gaddr_in(farm_gaddr a, const farm_gaddr *set, int n)
{
	for (int i = 0; i < n; i++)
		if (set[i] == a)
			return true;
	return false;
}

/*
 * farm_blockalloc_retire_region(): two slabs hold current blocks of region
 * R (three classes each, a small array, a freed large array waiting for an
 * epoch), a third slab's block of R is unowned, a fourth slab's region cache
 * names R. After the retire nothing hands out or frees anything in R, and
 * R's memory is not written by anything (allocations, refused frees, an
 * epoch's reclaim, a slab's destroy): byte-equal to its image at the
 * retire. Then R is rebuilt from a copy at another base: the region cache
 * that named the tombstone frees into the copy, and hinted allocations land
 * there, never on a live object.
 */
/* ---- layouts for data recovery (layout.c) ------------------------------ */

/*
 * What a new backup's copy (src/txn/copy.c) learns of a block, and when it
 * has to guess. A block allocated after the copy read the table reads
 * FREE (skipped: its objects reach the new backup as COMMIT-BACKUPs), not
 * UNKNOWN; only an image without a header is UNKNOWN, and a copy given the
 * description of a slab block holding a small array has a header whose
 * table gives the slot's class, not the element's. So the probe
 * (farm_alloc_block_infer), which takes a small array's element for a
 * whole slot, only serves primaries whose copy was never given a slab
 * block's description.
 */
static void test_layout(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 90);
	farm_blockalloc *ba = mk_ba(&p);
	farm_slab *s1, *s2;
	assert_int_equal(farm_slab_create(ba, &s1), 0);
	assert_int_equal(farm_slab_create(ba, &s2), 0);
	farm_gaddr first;
	assert_int_equal(farm_slab_alloc(s1, 100, 0, &first), 0);
	uint64_t size = p.r[0].size, mlen = farm_alloc_meta_bytes(size);
	uint8_t *before = malloc(mlen), *after = malloc(mlen);
	uint8_t *none = calloc(1, mlen);
	assert_true(before && after && none);
	memcpy(before, p.r[0].base, mlen);

	/* In its own slab, so its class's block is new: 5 elements of 3
	 * lines in the first slot of a block allocated after `before`. */
	farm_gaddr arr, next;
	assert_int_equal(farm_alloc_array(s2, 3 * 64 - 16, 5, first, &arr), 0);
	assert_int_equal(farm_gaddr_region(arr), farm_gaddr_region(first));
	assert_int_equal(farm_gaddr_offset(arr) % FARM_ALLOC_BLOCK, 0);
	assert_int_equal(farm_alloc_array(s2, 3 * 64 - 16, 5, arr, &next), 0);
	memcpy(after, p.r[0].base, mlen);
	uint32_t b = (uint32_t)(farm_gaddr_offset(arr) / FARM_ALLOC_BLOCK);
	uint32_t slot = farm_alloc_class_size(farm_alloc_class_of(5 * 3 * 64));
	assert_true(slot > 3 * 64);
	assert_int_equal(farm_gaddr_offset(next) - farm_gaddr_offset(arr),
	                 slot);

	struct farm_alloc_layout L;
	assert_int_equal(farm_alloc_block_layout(before, mlen, size, b, &L), 0);
	assert_int_equal(L.kind, FARM_LAYOUT_SKIP);
	assert_int_equal(farm_alloc_block_layout(after, mlen, size, b, &L), 0);
	assert_int_equal(L.kind, FARM_LAYOUT_SLOTS);
	assert_int_equal(L.slot_bytes, slot);
	assert_int_equal(farm_alloc_block_layout(none, mlen, size, b, &L), 0);
	assert_int_equal(L.kind, FARM_LAYOUT_UNKNOWN);
	/* A block a rebuild made UNUSABLE (data the table does not
	 * describe) is copied by its first header, never refused: data
	 * recovery read such a table again and again, and never finished. */
	uint64_t keep, unusable = bt_unusable();
	uint8_t *tw = after + RHDR_TABLE_OFF + 8ull * b;
	memcpy(&keep, tw, 8);
	memcpy(tw, &unusable, 8);
	assert_int_equal(farm_alloc_block_layout(after, mlen, size, b, &L), 0);
	assert_int_equal(L.kind, FARM_LAYOUT_UNKNOWN);
	assert_int_equal(L.run_off, (uint64_t)b * FARM_ALLOC_BLOCK);
	assert_int_equal(L.run_len, FARM_ALLOC_BLOCK);
	memcpy(tw, &keep, 8);

	/* A zeroed copy given the array's description, as a backup is by
	 * the COMMIT-BACKUP that allocates it (txn/allocrec.c): a header,
	 * and the slot's class. */
	uint32_t info;
	assert_int_equal(farm_alloc_block_info(ba, arr, &info), 0);
	struct farm_alloc_region c = p.r[0];
	c.base = aligned_alloc(4096, size);
	assert_non_null(c.base);
	memset(c.base, 0, size);
	assert_int_equal(farm_alloc_copy_note(&c, arr, info), 1);
	assert_int_equal(farm_alloc_block_layout(c.base, mlen, size, b, &L), 0);
	assert_int_equal(L.kind, FARM_LAYOUT_SLOTS);
	assert_int_equal(L.slot_bytes, slot);

	/* The probe's word is the element's: it cannot tell the slot
	 * (alloc.h, farm_alloc_block_infer). */
	const struct farm_objhdr *h = hdr(ba, arr);
	assert_int_equal(
	        farm_alloc_block_infer(size, b, farm_objhdr_load_incarn(h), &L),
	        0);
	assert_int_equal(L.kind, FARM_LAYOUT_SLOTS);
	assert_int_equal(L.slot_bytes, 3 * 64);

	free(c.base);
	free(before);
	free(after);
	free(none);
	farm_slab_destroy(s1);
	farm_slab_destroy(s2);
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

enum { NL = 64, NLIVE = 2 * NL + 2 }; /* test_retire's objects */
static const uint32_t rt_sizes[3] = {64, 200, 3000};

/* test_retire's state: one region R with live objects of two slabs
 * (s1's and s2's), retired and then made primary again at another base
 * (nb); rbase and snap: its memory at the retire and a copy of it. */
struct rtx {
	struct prov *p;
	farm_blockalloc *ba;
	farm_slab *s1, *s2, *s4;
	farm_gaddr live[NLIVE];
	uint32_t R;
	farm_gaddr sarr, larr;
	uint64_t mark;
	char *rbase, *snap, *nb;
};

/* Live objects in region R: s1's and s2's, a small array; a retired run
 * in R (waits for an epoch), an unowned block of R, and s4's region
 * cache on R (a remote free into s1's block). */
static void rt_populate(struct rtx *t)
{
	farm_slab *s3;
	assert_int_equal(farm_slab_create(t->ba, &t->s1), 0);
	assert_int_equal(farm_slab_create(t->ba, &t->s2), 0);
	assert_int_equal(farm_slab_create(t->ba, &s3), 0);
	assert_int_equal(farm_slab_create(t->ba, &t->s4), 0);
	farm_gaddr *live = t->live;
	for (int i = 0; i < NL; i++) {
		assert_int_equal(
		        farm_slab_alloc(t->s1, rt_sizes[i % 3], 0, &live[i]),
		        0);
		assert_int_equal(farm_slab_alloc(t->s2, rt_sizes[(i + 1) % 3],
		                                 0, &live[NL + i]),
		                 0);
	}
	t->R = farm_gaddr_region(live[0]);
	farm_gaddr o3;
	assert_int_equal(farm_alloc_array(t->s1, 100, 5, 0, &t->sarr), 0);
	assert_int_equal(farm_alloc_array(t->s2, 4096, 300, 0, &t->larr), 0);
	assert_int_equal(farm_slab_alloc(s3, 1000, 0, &o3), 0);
	live[2 * NL] = t->sarr;
	live[2 * NL + 1] = o3;
	for (int i = 0; i < NLIVE; i++)
		assert_int_equal(farm_gaddr_region(live[i]), t->R);
	assert_int_equal(farm_gaddr_region(t->larr), t->R);
	assert_int_equal(farm_alloc_array_free(t->s2, t->larr, 4096, 300), 0);
	t->mark = farm_blockalloc_epoch_mark(t->ba);
	farm_slab_destroy(s3);
	assert_int_equal(farm_slab_free(t->s4, live[NL - 1]), 0);
	live[NL - 1] = live[0]; /* (freed: the set keeps only live ones) */
}

/* Retires R (once; bad input refused): no longer local, its blocks out
 * of the counts. Keeps a copy of its memory in snap. */
static void rt_retire(struct rtx *t)
{
	farm_blockalloc *ba = t->ba;
	uint32_t R = t->R;
	struct farm_alloc_stats st0, st;
	farm_blockalloc_stats(ba, &st0);

	assert_int_equal(farm_blockalloc_retire_region(ba, R), 0);
	t->rbase = t->p->r[0].base;
	assert_int_equal(t->p->r[0].id, R);
	t->snap = malloc(t->p->size);
	assert_non_null(t->snap);
	memcpy(t->snap, t->rbase, t->p->size);
	assert_int_equal(farm_blockalloc_retire_region(ba, R), -ENOENT);
	assert_int_equal(farm_blockalloc_retire_region(NULL, R), -EINVAL);
	assert_int_equal(farm_blockalloc_retire_region(ba, FARM_REGION_ID_NONE),
	                 -EINVAL);
	assert_false(farm_alloc_region_is_local(ba, R));
	assert_null(farm_alloc_local(ba, t->live[0], FARM_OBJHDR_SIZE));
	farm_gaddr ga;
	assert_int_equal(farm_alloc_gaddr_of(ba, t->rbase + 4096, &ga),
	                 -EINVAL);
	uint32_t info;
	assert_int_equal(farm_alloc_block_info(ba, t->live[0], &info),
	                 -EREMOTE);
	farm_blockalloc_stats(ba, &st);
	assert_int_equal(st.regions, st0.regions - 1);
	assert_int_equal(st.blocks_total, st0.blocks_total - 16);
	assert_int_equal(st.blocks_retired, st0.blocks_retired - 2);
}

/* Retired R: frees refused (by the owner, by another slab, for arrays);
 * a hint in R is not local; none of 6000 allocations lands in R. Then
 * the epoch ends and s2 is destroyed: R's memory stays untouched. */
static void rt_refused(struct rtx *t)
{
	farm_gaddr *live = t->live;
	assert_int_equal(farm_slab_free(t->s1, live[1]), -EREMOTE);
	assert_int_equal(farm_slab_free(t->s2, live[1]), -EREMOTE);
	assert_int_equal(farm_slab_free(t->s2, live[NL + 1]), -EREMOTE);
	assert_int_equal(farm_alloc_array_free(t->s1, t->sarr, 100, 5),
	                 -EREMOTE);
	assert_int_equal(farm_alloc_array_free(t->s2, t->larr, 4096, 300),
	                 -EREMOTE);
	farm_gaddr x;
	assert_int_equal(farm_slab_alloc(t->s1, 200, live[1], &x), -EREMOTE);
	assert_int_equal(farm_alloc_array(t->s2, 4096, 300, live[1], &x),
	                 -EREMOTE);
	int in_r = 0;
	for (int i = 0; i < 3000; i++) {
		for (int k = 0; k < 2; k++) {
			farm_slab *s = k ? t->s2 : t->s1;
			uint32_t sz = rt_sizes[(i + k) % 3];
			if (i % 100 == 7)
				assert_int_equal(
				        farm_alloc_array(s, 100, 5, 0, &x), 0);
			else if (i % 500 == 9)
				assert_int_equal(
				        farm_alloc_array(s, 4096, 300, 0, &x),
				        0);
			else
				assert_int_equal(farm_slab_alloc(s, sz, 0, &x),
				                 0);
			in_r += farm_gaddr_region(x) == t->R;
		}
	}
	assert_int_equal(in_r, 0);
	/* The epoch ends: R's retired run is not zeroed. A slab's destroy
	 * does not write R's table (owner ids). */
	assert_int_equal(farm_blockalloc_reclaim(t->ba, t->mark), 0);
	farm_slab_destroy(t->s2);
	assert_int_equal(memcmp(t->rbase, t->snap, t->p->size), 0);
}

/* Primary again: a copy of R at another base (nb), rebuilt by scan; s4's
 * cache still naming the tombstone sends its free to the copy. */
static void rt_rebuild(struct rtx *t)
{
	farm_blockalloc *ba = t->ba;
	size_t size = t->p->size;
	struct farm_alloc_stats st0, st;
	farm_blockalloc_stats(ba, &st0);
	char *nb = mmap(NULL, size, PROT_READ | PROT_WRITE,
	                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	assert_true(nb != MAP_FAILED);
	assert_true(nb != t->rbase);
	t->nb = nb;
	memcpy(nb, t->snap, size);
	struct farm_alloc_region ar = {.id = t->R, .base = nb, .size = size};
	assert_int_equal(farm_blockalloc_rebuild_region(ba, &ar), 0);
	assert_true(farm_alloc_region_is_local(ba, t->R));
	farm_gaddr *live = t->live;
	assert_ptr_equal(farm_alloc_local(ba, live[2], FARM_OBJHDR_SIZE),
	                 nb + farm_gaddr_offset(live[2]));
	farm_gaddr ga;
	assert_int_equal(farm_alloc_gaddr_of(ba, nb + 4096, &ga), 0);
	assert_int_equal(ga, farm_gaddr_make(t->R, 4096));
	farm_blockalloc_stats(ba, &st);
	assert_int_equal(st.regions, st0.regions + 1);
	/* s4's cache still named the tombstone: the free goes to the copy. */
	uint64_t w = farm_objhdr_load_incarn(
	        (void *)(nb + farm_gaddr_offset(live[2])));
	assert_int_equal(farm_slab_free(t->s4, live[2]), 0);
	assert_int_equal(farm_objhdr_load_incarn(
	                         (void *)(nb + farm_gaddr_offset(live[2]))),
	                 farm_incarn_freed(w));
	assert_int_equal(farm_slab_free(t->s1, live[NL + 2]), 0);
	live[2] = live[NL + 2] = live[0];
}

/* Hinted allocations land in R's copy, never on a live object; returns
 * how many of 300 did. */
static int rt_hinted(struct rtx *t)
{
	int in_r = 0;
	farm_gaddr x;
	for (int i = 0; i < 300; i++) {
		assert_int_equal(farm_slab_alloc(t->s1, 200, t->live[1], &x),
		                 0);
		if (farm_gaddr_region(x) == t->R) {
			in_r++;
			assert_false(gaddr_in(x, t->live, NLIVE));
			assert_true(farm_objhdr_allocated(
			        (void *)(t->nb + farm_gaddr_offset(x))));
		}
	}
	assert_true(in_r > 0);
	for (int i = 0; i < NLIVE; i++)
		assert_true(farm_objhdr_allocated(
		        (void *)(t->nb + farm_gaddr_offset(t->live[i]))));
	return in_r;
}

static void test_retire(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 300);
	struct rtx t = {.p = &p, .ba = mk_ba(&p)};
	rt_populate(&t);
	rt_retire(&t);
	rt_refused(&t);
	rt_rebuild(&t);
	int in_r = rt_hinted(&t);
	int rc;
	free(dump_str(t.ba, &rc));
	assert_int_equal(rc, 0);
	/* And the old memory was never touched. */
	assert_int_equal(memcmp(t.rbase, t.snap, p.size), 0);
	printf("retire: region %u with 2 slabs' current blocks retired; "
	       "6000 allocations elsewhere, 0 in it; rebuilt at another "
	       "base, %d hinted allocations there\n",
	       t.R, in_r);
	farm_slab_destroy(t.s1);
	farm_slab_destroy(t.s4);
	farm_blockalloc_destroy(t.ba);
	munmap(t.nb, p.size);
	prov_fini(&p);
	free(t.snap);
}

/*
 * Retiring while two threads allocate and free on their own slabs: once a
 * thread has seen the retire return (an acquire load of a flag the retiring
 * thread set after it), no allocation it starts is in the region, and its
 * frees of the region's objects are refused.
 */
struct rt_thread {
	farm_slab *s;
	uint32_t R;
	uint64_t seed;
	_Atomic uint64_t ops;
	uint64_t in_r_before, after, bad_alloc, bad_free;
	int rc;
};
static _Atomic int rt_retired;

static void *rt_main(void *arg)
{
	struct rt_thread *t = arg;
	enum { WIN = 256, AFTER = 20000 };
	farm_gaddr win[WIN] = {0};
	for (uint64_t i = 0;; i++) {
		bool seen =
		        atomic_load_explicit(&rt_retired, memory_order_acquire);
		unsigned k = (unsigned)(farm_rand64(&t->seed) % WIN);
		if (win[k]) {
			int rc = farm_slab_free(t->s, win[k]);
			/* In R: refused once the retire was seen; a free that
			 * overlapped it may have gone either way. */
			bool ok = farm_gaddr_region(win[k]) == t->R
			                  ? rc == -EREMOTE || (!seen && rc == 0)
			                  : rc == 0;
			t->bad_free += !ok;
		}
		/* Four classes: the blocks of both threads fit in R. */
		static const uint32_t szs[4] = {64, 200, 1000, 3000};
		uint32_t sz = szs[farm_rand64(&t->seed) % 4];
		int rc = farm_slab_alloc(t->s, sz, 0, &win[k]);
		if (rc) {
			t->rc = rc;
			break;
		}
		bool in_r = farm_gaddr_region(win[k]) == t->R;
		if (seen) {
			t->bad_alloc += in_r;
			if (++t->after == AFTER)
				break;
		} else {
			t->in_r_before += in_r;
		}
		atomic_store_explicit(&t->ops, i + 1, memory_order_relaxed);
	}
	return NULL;
}

static void test_retire_threads(void **state)
{
	(void)state;
	struct prov p;
	prov_init(&p, 16u << 20, 400);
	farm_blockalloc *ba = mk_ba(&p);
	/* R is the first region the threads' refills make (id 400): both
	 * take their first blocks there. */
	struct rt_thread t[2];
	pthread_t th[2];
	atomic_store(&rt_retired, 0);
	for (int i = 0; i < 2; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		assert_int_equal(farm_slab_create(ba, &t[i].s), 0);
		t[i].R = 400;
		t[i].seed = 11 + (uint64_t)i;
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, rt_main, &t[i]),
		                 0);
	/* Both running (bounded wait on their progress counters). */
	uint64_t t0 = farm_now_ns();
	while ((atomic_load(&t[0].ops) < 2000 ||
	        atomic_load(&t[1].ops) < 2000) &&
	       farm_now_ns() - t0 < 10000000000ull)
		sched_yield();
	assert_int_equal(farm_blockalloc_retire_region(ba, 400), 0);
	atomic_store_explicit(&rt_retired, 1, memory_order_release);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < 2; i++) {
		printf("retire race: thread %d: %" PRIu64 " allocations in the "
		       "region before, %" PRIu64 " after the retire (%" PRIu64
		       " in it), %" PRIu64 " bad frees\n",
		       i, t[i].in_r_before, t[i].after, t[i].bad_alloc,
		       t[i].bad_free);
		assert_int_equal(t[i].rc, 0);
		assert_true(t[i].in_r_before > 0);
		assert_int_equal(t[i].after, 20000);
		assert_int_equal(t[i].bad_alloc, 0);
		assert_int_equal(t[i].bad_free, 0);
		farm_slab_destroy(t[i].s);
	}
	farm_blockalloc_destroy(ba);
	prov_fini(&p);
}

/* ---- rebuild by the region's file -------------------------------------- */

static bool broken_holes; /* --broken-holes: FARM_FP_ALLOC_HOLES_SKIP */

/* A file of @size bytes, zero, already unlinked (a tmpfs one where there
 * is: what a restart reads), mapped shared at *@base. */
static int region_file(uint64_t size, char **base)
{
	char path[] = "/dev/shm/test_alloc_fd_XXXXXX";
	char path2[] = "/tmp/test_alloc_fd_XXXXXX";
	int fd = mkstemp(path);
	if (fd >= 0)
		unlink(path);
	else if ((fd = mkstemp(path2)) >= 0)
		unlink(path2);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	*base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(*base != MAP_FAILED);
	return fd;
}

/* A region of @size bytes of a shm fabric's memory in a new directory
 * @dir, mapped at *@base: what a promoted region's adoption rebuilds,
 * through the descriptor returned (farm_mem_open_file, read-only). */
static int shm_region(char *dir, size_t dlen, uint64_t size, farm_fabric **fab,
                      farm_mem **mem, char **base)
{
	tu_tmpdir(dir, dlen, "alloc");
	farm_fabric_attr a = {
	        .provider = "shm", .machine_id = 1, .data_dir = dir};
	assert_int_equal(farm_fabric_open(&a, fab), 0);
	assert_int_equal(farm_mem_alloc(*fab, size, FARM_MEM_ALIGN_SIZE, mem),
	                 0);
	*base = farm_mem_addr(*mem);
	assert_int_equal(farm_mem_open_file(NULL), -EINVAL);
	int fd = farm_mem_open_file(*mem);
	assert_true(fd >= 0);
	return fd;
}

/*
 * A region in a file, rebuilt by the file as a restart does
 * (farm_blockalloc_rebuild_region_fd), and as a promoted region's adoption
 * does, through its memory's file (farm_mem_open_file): objects in a slab
 * block, a FREE
 * block holding data past its first page (what a replica's copy of a
 * large array leaves: the run's table words are not carried), a FREE
 * block fallocated and never written, the rest holes. The block with data
 * must be UNUSABLE and never handed out, the others reused, every object
 * kept, the state the same as a rebuild by memory, and no page of the
 * file brought into memory by the rebuild (reading the holes through the
 * mapping allocated each on tmpfs). --broken-holes: every FREE block taken
 * for zero without a look (the skip of holes made blind); the data must
 * then be allocated over, which the test notices.
 */
static void rebuild_by_file(bool live)
{
	const uint64_t size = 8ull << 20, B = FARM_ALLOC_BLOCK;
	char *base, dir[256];
	farm_fabric *fab = NULL;
	farm_mem *mem = NULL;
	int fd = live ? shm_region(dir, sizeof(dir), size, &fab, &mem, &base)
	              : region_file(size, &base);
	struct farm_blockalloc_attr at = {0};
	farm_blockalloc *ba;
	assert_int_equal(farm_blockalloc_create(&at, &ba), 0);
	struct farm_alloc_region ar = {.id = 9, .base = base, .size = size};
	assert_int_equal(farm_blockalloc_add_region(ba, &ar), 0);
	farm_slab *s;
	assert_int_equal(farm_slab_create(ba, &s), 0);
	farm_gaddr objs[40];
	for (int i = 0; i < 40; i++)
		assert_int_equal(farm_slab_alloc(s, 1000, 0, &objs[i]), 0);
	assert_int_equal(farm_slab_free(s, objs[7]), 0); /* a free slot */
	farm_slab_destroy(s);
	const uint64_t *tab = (const uint64_t *)(base + RHDR_TABLE_OFF);
	assert_int_equal(tab[7], 0); /* FREE */
	assert_int_equal(tab[6], 0);
	memset(base + 7 * B + 300000, 0xab, 64); /* data in a FREE block */
	(void)fallocate(fd, 0, (off_t)(6 * B), (off_t)B); /* may be refused */
	char *keep = mmap(NULL, size, PROT_READ | PROT_WRITE,
	                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(keep != MAP_FAILED);
	/* By the file: a read through the mapping would fault the holes. */
	assert_int_equal(pread(fd, keep, size, 0), (ssize_t)size);
	int rc1, rc2;
	farm_blockalloc *rm, *rf;
	assert_int_equal(farm_blockalloc_create(&at, &rm), 0);
	struct farm_alloc_region cm = {.id = 9, .base = keep, .size = size};
	assert_int_equal(farm_blockalloc_rebuild_region(rm, &cm), 0);
	char *dm = dump_str(rm, &rc1);
	farm_blockalloc_destroy(rm);
	assert_int_equal(farm_blockalloc_create(&at, &rf), 0);
	uint64_t res0 = farm_mem_resident_range(base, size);
	assert_int_equal(farm_blockalloc_rebuild_region_fd(rf, &ar, fd), 0);
	uint64_t res1 = farm_mem_resident_range(base, size);
	char *df = dump_str(rf, &rc2);
	struct farm_alloc_stats st;
	farm_blockalloc_stats(rf, &st);
	/* Allocations of 100,000 bytes until the region is full: none may
	 * land on the data of block 7 or on a live object. */
	assert_int_equal(farm_slab_create(rf, &s), 0);
	farm_gaddr x;
	unsigned got = 0, over = 0;
	while (farm_slab_alloc(s, 100000, 0, &x) == 0 && got < 100) {
		uint64_t xo = farm_gaddr_offset(x);
		over += xo < 7 * B + 300064 && xo + 100000 > 7 * B + 300000;
		got++;
	}
	farm_gaddr y;
	assert_int_equal(farm_slab_alloc(s, 1000, 0, &y), 0);
	assert_true(y == objs[7]); /* the free slot, lowest first */
	farm_slab_destroy(s);
	bool lost = st.blocks_unusable != 1 || over || rc1 || rc2 ||
	            strcmp(dm, df) != 0;
	printf("rebuild by the file%s: %" PRIu64 " block(s) unusable, %u "
	       "allocations of %u over the FREE block's data, dumps %s, "
	       "%" PRIu64 " KiB brought into memory%s\n",
	       live ? " (live)" : "", st.blocks_unusable, over, got,
	       strcmp(dm, df) ? "differ" : "equal", (res1 - res0) >> 10,
	       broken_holes ? " (--broken-holes: must be caught)" : "");
	if (broken_holes)
		assert_true(lost);
	else
		assert_false(lost);
	assert_true(res0 > 0 && res0 < size / 2);
	assert_int_equal(res1, res0);
	farm_blockalloc_destroy(rf);
	farm_blockalloc_destroy(ba);
	close(fd);
	if (live) {
		farm_mem_free(mem);
		farm_fabric_close(fab);
		tu_rmtree(dir);
	} else {
		munmap(base, size);
	}
	munmap(keep, size);
	free(dm);
	free(df);
}

static void test_rebuild_fd(void **state)
{
	(void)state;
	rebuild_by_file(false);
}

static void test_rebuild_live(void **state)
{
	(void)state;
	rebuild_by_file(true);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_classes),
	        cmocka_unit_test(test_basic_errors),
	        cmocka_unit_test(test_marked),
	        cmocka_unit_test(test_hints),
	        cmocka_unit_test(test_arrays),
	        cmocka_unit_test(test_double_free_race),
	        cmocka_unit_test(test_rebuild),
	        cmocka_unit_test(test_copy_note),
	        cmocka_unit_test(test_layout),
	        cmocka_unit_test(test_threads),
	        cmocka_unit_test(test_retire),
	        cmocka_unit_test(test_retire_threads),
	        cmocka_unit_test(test_rebuild_fd),
	        cmocka_unit_test(test_rebuild_live),
	};
	if (argc > 1 && !strcmp(argv[1], "--broken-holes")) {
		if (!farm_fault_built()) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
		broken_holes = true;
		if (farm_fault_set(FARM_FP_ALLOC_HOLES_SKIP, tu_switch_on,
		                   NULL))
			return 1;
		const struct CMUnitTest one[] = {
		        cmocka_unit_test(test_rebuild_fd),
		        cmocka_unit_test(test_rebuild_live)};
		return cmocka_run_group_tests_name("alloc", one, NULL, NULL);
	}
	return cmocka_run_group_tests_name("alloc", tests, NULL, NULL);
}
