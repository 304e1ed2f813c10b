/*
 * Copying a cache line so that it is seen as of one instant, the way a NIC's
 * line-atomic DMA read sees it: a seqlock on the line's first 8 bytes. It
 * works with writers that change a line's first word before and after its
 * other bytes, which is what FaRM's object layout does (every line starts
 * with a version that an install sets to the lock value first and to the
 * new version last). The shm fabric's READ and the transaction layer's
 * local reads use it. Internal; not installed.
 */
#ifndef FARM_UTIL_LINES_H
#define FARM_UTIL_LINES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/common.h"

/*
 * farm_line_copy() - copy @n bytes at @p (inside the line whose first word
 * is @w) to @dst, retrying until the first word read before and after the
 * copy agree, at most @max_tries times. Returns whether they agreed (false:
 * the copy may be torn).
 */
static inline bool farm_line_copy(uint8_t *dst, const uint8_t *p, size_t n,
                                  const _Atomic uint64_t *w, unsigned max_tries)
{
	for (unsigned tries = 0;; tries++) {
		/* Pairs with the writer's store of the word before the data. */
		uint64_t v1 = atomic_load_explicit(w, memory_order_acquire);
		if (FARM_LIKELY(n == FARM_CL))
			memcpy(dst, p, FARM_CL);
		else
			memcpy(dst, p, n);
		/* The copy's loads complete before the re-load; pairs with
		 * the writer's final store of the word. */
		atomic_thread_fence(memory_order_acquire);
		uint64_t v2 = atomic_load_explicit(w, memory_order_relaxed);
		if (FARM_LIKELY(v1 == v2))
			return true;
		if (tries == max_tries)
			return false;
		farm_cpu_relax();
	}
}

/* Copy [src, src + len) line by line with farm_line_copy; false when some
 * line could not be copied consistently. */
static inline bool farm_lines_copy(uint8_t *dst, const uint8_t *src, size_t len,
                                   unsigned max_tries)
{
	bool ok = true;
	if (((uintptr_t)src | len) % FARM_CL == 0) {
		/* Whole lines (objects, bucket pairs): each copy of a
		 * constant size, no bounds to work out. */
		for (size_t o = 0; o < len; o += FARM_CL)
			ok &= farm_line_copy(
			        dst + o, src + o, FARM_CL,
			        (const _Atomic uint64_t *)(src + o), max_tries);
		return ok;
	}
	const uint8_t *p = src, *end = src + len;
	while (p < end) {
		const uint8_t *line =
		        (const uint8_t *)((uintptr_t)p &
		                          ~(uintptr_t)(FARM_CL - 1));
		const uint8_t *lend = FARM_MIN(line + FARM_CL, end);
		size_t n = (size_t)(lend - p);
		ok &= farm_line_copy(dst, p, n, (const _Atomic uint64_t *)line,
		                     max_tries);
		dst += n;
		p = lend;
	}
	return ok;
}

#endif
