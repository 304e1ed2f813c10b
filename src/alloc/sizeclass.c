/*
 * The size-class table (src/alloc/README.md, "size classes").
 *
 * Requests are whole 64-byte lines, 1 to 16384 (1 MiB). A class of c lines
 * serves the requests (p, c] where p is the next smaller class, so its worst
 * internal fragmentation is (c - p - 1) / c and its average, over those
 * line-granular requests, half that. The table is the 256 classes that
 * minimise the worst case: a binary search over the bound f (a fixed-point
 * fraction, so the result is the same everywhere) for the smallest f whose
 * greedy top-down table (each class the smallest the bound allows below the
 * one above it, from 16384 down to 1) needs at most 256 classes; spare
 * classes then split the class with the largest average waste. Below about
 * 1/f lines the bound forces every line count to be a class.
 *
 * Computed once at first use (pthread_once); lookups are a table read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "alloc/alloc_int.h"

#define FRAC_BITS 24

static uint16_t cls_lines[FARM_ALLOC_NCLASSES];
static uint8_t cls_mb[FARM_ALLOC_NCLASSES];
static uint8_t line_cls[FARM_ALLOC_MAX_LINES + 1];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* Greedy table for bound @f (fraction << FRAC_BITS), top-down into @out
 * (descending). Returns the class count, or more than the capacity. */
static int greedy(uint64_t f, uint16_t *out, int cap)
{
	uint32_t c = FARM_ALLOC_MAX_LINES;
	int n = 0;
	for (;;) {
		if (n >= cap)
			return cap + 1;
		out[n++] = (uint16_t)c;
		if (c == 1)
			return n;
		uint64_t g = ((uint64_t)c * f) >> FRAC_BITS;
		c = g + 1 >= c ? 1 : (uint32_t)(c - 1 - g);
	}
}

/* Split classes until there are exactly 256: each time the class (p, c]
 * whose average waste (c - p - 1) / 2c is largest gains a class at the
 * midpoint. @asc is ascending with @n entries. */
static void fill(uint16_t *asc, int n)
{
	while (n < FARM_ALLOC_NCLASSES) {
		int best = -1;
		uint64_t bw = 0, bc = 1;
		for (int i = 0; i < n; i++) {
			uint32_t p = i ? asc[i - 1] : 0, c = asc[i];
			uint64_t w = c - p - 1;
			if (c - p < 2)
				continue;
			if (best < 0 || w * bc > bw * c) {
				best = i;
				bw = w;
				bc = c;
			}
		}
		if (best < 0)
			return; /* cannot happen: 16384 lines > 256 classes */
		uint32_t p = best ? asc[best - 1] : 0;
		uint16_t m = (uint16_t)(p + (asc[best] - p) / 2);
		memmove(&asc[best + 1], &asc[best],
		        (size_t)(n - best) * sizeof(asc[0]));
		asc[best] = m;
		n++;
	}
}

/* MiB per slab block of a class of @lines: the smallest k in 1..7 whose
 * unused tail is at most 1/32 of the block, else the k with the least
 * (7, so that every class fits a region of 8 MiB: block 0 is the table). */
static uint8_t block_mb_for(uint32_t lines)
{
	const uint64_t per_mb = FARM_ALLOC_BLOCK / FARM_ALLOC_LINE;
	uint8_t best = 1;
	double best_tail = 2;
	for (uint32_t k = 1; k <= FARM_ALLOC_MAX_BLOCK_MB; k++) {
		uint64_t tot = k * per_mb, tail = tot % lines;
		if (tail * 32 <= tot)
			return (uint8_t)k;
		double t = (double)tail / (double)tot;
		if (t < best_tail) {
			best_tail = t;
			best = (uint8_t)k;
		}
	}
	return best;
}

static void build_table(void)
{
	uint16_t tmp[FARM_ALLOC_NCLASSES + 1];
	uint64_t lo = 0, hi = 1ull << FRAC_BITS; /* greedy(hi) fits */
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (greedy(mid, tmp, FARM_ALLOC_NCLASSES) <=
		    FARM_ALLOC_NCLASSES)
			hi = mid;
		else
			lo = mid;
	}
	int n = greedy(hi, tmp, FARM_ALLOC_NCLASSES);
	uint16_t asc[FARM_ALLOC_NCLASSES];
	for (int i = 0; i < n; i++)
		asc[i] = tmp[n - 1 - i];
	fill(asc, n);
	uint32_t l = 1;
	for (int i = 0; i < FARM_ALLOC_NCLASSES; i++) {
		cls_lines[i] = asc[i];
		cls_mb[i] = block_mb_for(asc[i]);
		for (; l <= asc[i]; l++)
			line_cls[l] = (uint8_t)i;
	}
}

static inline void table_init(void)
{
	pthread_once(&table_once, build_table);
}

int farm_alloc_class_of(uint64_t size)
{
	if (size == 0)
		return -EINVAL;
	if (size > FARM_ALLOC_MAX_OBJECT)
		return -E2BIG;
	table_init();
	return line_cls[(size + FARM_ALLOC_LINE - 1) / FARM_ALLOC_LINE];
}

uint32_t farm_alloc_class_size(int cls)
{
	if (cls < 0 || cls >= FARM_ALLOC_NCLASSES)
		return 0;
	table_init();
	return (uint32_t)cls_lines[cls] * FARM_ALLOC_LINE;
}

uint32_t farm_alloc_class_block_mb(int cls)
{
	if (cls < 0 || cls >= FARM_ALLOC_NCLASSES)
		return 0;
	table_init();
	return cls_mb[cls];
}

void farm_alloc_frag_compute(struct farm_alloc_frag *f)
{
	table_init();
	memset(f, 0, sizeof(*f));
	double sum = 0, req_sum = 0;
	for (int i = 0; i < FARM_ALLOC_NCLASSES; i++) {
		uint32_t p = i ? cls_lines[i - 1] : 0, c = cls_lines[i];
		double worst = (double)(c - p - 1) / c;
		double avg = worst / 2;
		sum += avg;
		if (worst > f->max)
			f->max = worst;
		if (avg > f->max_avg)
			f->max_avg = avg;
		for (uint32_t r = p + 1; r <= c; r++)
			req_sum += (double)(c - r) / c;
		if (c == (uint32_t)i + 1)
			f->exact_lines = c;
		uint64_t tot = (uint64_t)cls_mb[i] * FARM_ALLOC_BLOCK;
		double tail = (double)(tot % ((uint64_t)c * FARM_ALLOC_LINE)) /
		              (double)tot;
		if (tail > f->block_tail_max)
			f->block_tail_max = tail;
	}
	f->avg = sum / FARM_ALLOC_NCLASSES;
	f->req_avg = req_sum / FARM_ALLOC_MAX_LINES;
	double lsum = 0, bsum = 0;
	uint64_t nb = 0;
	for (uint64_t b = FARM_OBJHDR_SIZE; b <= FARM_ALLOC_MAX_OBJECT; b++) {
		uint64_t lines = (b + FARM_ALLOC_LINE - 1) / FARM_ALLOC_LINE;
		double lw = (double)(lines * FARM_ALLOC_LINE - b) /
		            (double)(lines * FARM_ALLOC_LINE);
		uint64_t cb =
		        (uint64_t)cls_lines[line_cls[lines]] * FARM_ALLOC_LINE;
		lsum += lw;
		bsum += (double)(cb - b) / (double)cb;
		if (lw > f->line_max)
			f->line_max = lw;
		nb++;
	}
	f->line_avg = lsum / (double)nb;
	f->bytes_avg = bsum / (double)nb;
}

const uint8_t *farm_alloc_line_cls_table(void)
{
	table_init();
	return line_cls;
}
