/*
 * The search of a bucket pair's image (hashtable/ht_pair.c:
 * farm_ht_pair_find, farm_ht_pair_find_in, farm_ht_pair_slot_is) against
 * the plain match on the unpacked buckets (ht_int.h's slot_match: the
 * header's flags and length, then memcmp of the key or the long key's
 * hash), for every layout the table takes (neighborhood 2..16, inline
 * keys 8..64 and values 24..256 and 1024 bytes): the image puts line
 * versions inside slots' headers, keys and values at every offset, so
 * the search's pieces, its 8-byte probe and its word compares (tails that
 * overlap) meet every split. Slots hold free garbage, short keys, keys of
 * the query's length that differ from it in one byte (anywhere, so the
 * probe cannot decide alone), a key one byte longer or shorter, and long
 * keys by hash; queries are each slot's key, those keys with a byte
 * changed, and keys absent. The answer (the slot, its header) must be the
 * plain match's, every time.
 *
 * Also the shard a hash picks (farm_ht_shard_index: jump consistent
 * hashing whose last step compares integers instead of dividing) against
 * the paper's doubles alone, for random hashes and shard counts and for
 * hashes built so that a step's products are equal (the case the
 * integers leave to the doubles).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hashtable/ht_int.h"
#include "txn/object.h"

#define QUERIES 64u

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

struct query {
	uint8_t key[FARM_HT_MAX_KEY];
	uint32_t klen;
	uint64_t hash;
};

/* Slot @s of a bucket's data filled: free (garbage), or holding a short
 * key drawn from @q (same length, one byte changed; or a length off by
 * one), @q's key itself, or a long key (its hash; @q's or another). */
static void fill_slot(const farm_ht *h, uint8_t *s, const struct query *q)
{
	fill(s, h->slot_bytes);
	unsigned kind = (unsigned)(rnd() % 6);
	if (kind == 0) {
		s[0] &= (uint8_t)~SLOT_USED;
		return;
	}
	s[0] = (uint8_t)((s[0] & ~(SLOT_USED | SLOT_LONGKEY)) | SLOT_USED);
	if (q->klen > h->K || kind == 5) { /* a long key */
		s[0] |= SLOT_LONGKEY;
		s[1] = 0;
		put64(s + 8,
		      rnd() % 2 ? q->hash : q->hash ^ (1ull << (rnd() % 64)));
		return;
	}
	uint32_t kl = q->klen;
	if (kind == 4 && kl > 1 && kl < h->K) /* one byte longer or shorter */
		kl = rnd() % 2 ? kl + 1 : kl - 1;
	s[1] = (uint8_t)kl;
	memcpy(s + 8, q->key, kl < q->klen ? kl : q->klen);
	if (kind == 3) /* one byte of the key changed */
		s[8 + rnd() % kl] ^= (uint8_t)(1u << (rnd() % 8));
}

/* The plain match: the first slot of the pair (bucket b0's, then b1's)
 * that holds @q, by slot_match on the unpacked data. */
static int plain_find(const farm_ht *h, uint8_t *data[2], unsigned lo,
                      unsigned hi, const struct query *q)
{
	for (unsigned i = lo; i < hi; i++) {
		const uint8_t *s = slot_at(h, data[i / h->spb], i % h->spb);
		if (slot_match(h, s, q->key, q->klen, q->hash))
			return (int)i;
	}
	return -1;
}

static void check_query(const farm_ht *h, uint8_t *data[2], const uint8_t *img,
                        const struct query *q)
{
	uint8_t hdr[8];
	int want = plain_find(h, data, 0, h->H, q);
	int got = farm_ht_pair_find(h, img, q->key, q->klen, q->hash, hdr);
	if (got != want)
		fail_msg(
		        "H %u K %u V %u klen %u: slot %d, the plain match's %d",
		        h->H, h->K, h->V, q->klen, got, want);
	if (got >= 0)
		assert_memory_equal(
		        hdr, slot_at(h, data[got / h->spb], got % h->spb), 8);
	for (unsigned b = 0; b < 2; b++) {
		unsigned lo = b * h->spb, hi = lo + h->spb;
		assert_int_equal(farm_ht_pair_find_in(h, img, lo, hi, q->key,
		                                      q->klen, q->hash, hdr),
		                 plain_find(h, data, lo, hi, q));
	}
	for (unsigned i = 0; i < h->H; i++)
		assert_int_equal(farm_ht_pair_slot_is(h, img, i, q->key,
		                                      q->klen, q->hash, hdr),
		                 plain_find(h, data, i, i + 1, q) == (int)i);
}

/* A query: short (1..K bytes, often K or 8 or 16) or long (K+1..256). */
static void draw_query(const farm_ht *h, struct query *q)
{
	static const uint32_t lens[] = {1, 7, 8, 9, 15, 16, 17};
	unsigned r = (unsigned)(rnd() % 4);
	if (r == 0)
		q->klen = 1 + (uint32_t)(rnd() % h->K);
	else if (r == 1)
		q->klen = h->K;
	else if (r == 2)
		q->klen =
		        h->K + 1 + (uint32_t)(rnd() % (FARM_HT_MAX_KEY - h->K));
	else
		q->klen = lens[rnd() % (sizeof(lens) / sizeof(lens[0]))];
	if (q->klen > FARM_HT_MAX_KEY)
		q->klen = FARM_HT_MAX_KEY;
	fill(q->key, q->klen);
	q->hash = rnd();
}

static void one_layout(unsigned H, uint32_t K, uint32_t V)
{
	farm_ht *h = calloc(1, sizeof(*h));
	assert_non_null(h);
	farm_ht_layout(h, &(struct farm_ht_attr){.neighborhood = H,
	                                         .key_inline = K,
	                                         .val_inline = V});
	unsigned L = h->bucket_lines;
	uint8_t *data[2] = {malloc(h->bucket_data), malloc(h->bucket_data)};
	uint8_t *img = malloc(128u * L);
	assert_non_null(data[0]);
	assert_non_null(data[1]);
	assert_non_null(img);
	for (unsigned round = 0; round < QUERIES; round++) {
		struct query q;
		draw_query(h, &q);
		uint64_t version = rnd() & ~OBJ_LOCK_MASK;
		for (unsigned b = 0; b < 2; b++) {
			fill(data[b], BKT_HDR);
			for (unsigned i = 0; i < h->spb; i++)
				fill_slot(h, slot_at(h, data[b], i), &q);
			obj_pack(img + 64u * L * b, L, data[b], h->bucket_data,
			         version, rnd());
		}
		check_query(h, data, img, &q);
		/* The same pair for a query with a byte of it changed. */
		if (q.klen <= h->K) {
			q.key[rnd() % q.klen] ^= (uint8_t)(1u << (rnd() % 8));
			check_query(h, data, img, &q);
		}
		/* Each slot's own key, as it stands. */
		for (unsigned i = 0; i < h->H; i++) {
			const uint8_t *s =
			        slot_at(h, data[i / h->spb], i % h->spb);
			if (!(s[0] & SLOT_USED) || (s[0] & SLOT_LONGKEY))
				continue;
			struct query o = {.klen = s[1], .hash = rnd()};
			if (!o.klen || o.klen > h->K)
				continue;
			memcpy(o.key, s + 8, o.klen);
			check_query(h, data, img, &o);
		}
	}
	free(img);
	free(data[0]);
	free(data[1]);
	free(h);
}

static void test_layouts(void **state)
{
	(void)state;
	for (unsigned H = 2; H <= 16; H += 2)
		for (uint32_t K = 8; K <= 64; K += 8) {
			for (uint32_t V = 24; V <= 256; V += 8)
				one_layout(H, K, V);
			one_layout(H, K, 1024);
		}
}

#define JUMP_C 2862933555777941757ull

/* Jump consistent hash as the paper computes it, every step in doubles. */
static unsigned jump_ref(uint64_t key, unsigned n)
{
	int64_t b = -1, j = 0;
	while (j < (int64_t)n) {
		b = j;
		key = key * JUMP_C + 1;
		j = (int64_t)((double)(b + 1) * ((double)(1ll << 31) /
		                                 (double)((key >> 33) + 1)));
	}
	return (unsigned)b;
}

/* The state before LCG state @k: the LCG run backwards (JUMP_C is
 * odd, so it has an inverse modulo 2^64). */
static uint64_t jump_back(uint64_t k)
{
	uint64_t inv = JUMP_C;
	for (int i = 0; i < 6; i++)
		inv *= 2 - JUMP_C * inv;
	return (k - 1) * inv;
}

/* A hash whose step @step (1 or 2) has (b + 1) * 2^31 == n * (r + 1),
 * b being @b, or 0 when none turned up in the tries. */
static uint64_t jump_equal(unsigned n, unsigned b, unsigned step)
{
	uint64_t num = (uint64_t)(b + 1) << 31;
	if (num % n || num / n > (1ull << 31))
		return 0;
	uint64_t r = num / n - 1;
	for (int t = 0; t < 100000; t++) {
		uint64_t ks = (r << 33) | (rnd() & ((1ull << 33) - 1));
		uint64_t k0 = jump_back(ks);
		if (step == 1)
			return b == 0 ? k0 : 0;
		/* step 2: the first step (state k0) must land on b */
		if ((int64_t)((double)(1ll << 31) / (double)((k0 >> 33) + 1)) ==
		    (int64_t)b)
			return jump_back(k0);
	}
	return 0;
}

static void test_jump(void **state)
{
	(void)state;
	static const unsigned big[] = {1000,           4096,     65535,
	                               (1u << 20) - 1, 1u << 20, 3000000};
	for (unsigned n = 1; n <= 300; n++)
		for (int i = 0; i < 2000; i++) {
			uint64_t k = rnd();
			assert_int_equal(farm_ht_shard_index(k, n),
			                 jump_ref(k, n));
		}
	for (unsigned x = 0; x < sizeof(big) / sizeof(big[0]); x++)
		for (int i = 0; i < 20000; i++) {
			uint64_t k = rnd();
			assert_int_equal(farm_ht_shard_index(k, big[x]),
			                 jump_ref(k, big[x]));
		}
	unsigned equal = 0;
	/* n = 64, b = 48 is one whose doubles round below n: j = 63. */
	for (unsigned n = 1; n <= 128; n += n < 64 ? 1 : 64)
		for (unsigned step = 1; step <= 2; step++)
			for (unsigned b = 0; b < n; b++) {
				uint64_t k = jump_equal(n, b, step);
				if (!k)
					continue;
				/* built right: that step's products are equal
				 */
				uint64_t ks = k * JUMP_C + 1;
				if (step == 2)
					ks = ks * JUMP_C + 1;
				assert_true(((uint64_t)(b + 1) << 31) ==
				            n * ((ks >> 33) + 1));
				equal++;
				assert_int_equal(farm_ht_shard_index(k, n),
				                 jump_ref(k, n));
			}
	assert_true(equal >= 200);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_layouts),
	        cmocka_unit_test(test_jump),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
