/*
 * Statistics counters: the one helper every layer adds to its counters
 * with. Internal; not installed.
 *
 * Relaxed suffices: a counter orders nothing. Nothing is published through
 * a counter and no reader concludes from its value that other memory was
 * written: the *_stats calls copy each counter on its own, for reports. So
 * only the add itself must be indivisible (and a reader on another thread
 * must never see a torn value), not its place among other accesses.
 *
 *   farm_stat_add        any thread may add: a relaxed read-modify-write.
 *   farm_stat_add_owned  the counter has one writer (a slab's counters,
 *                        written by its owning thread only): a relaxed load
 *                        and store, no locked instruction on the hot path;
 *                        readers still see whole values.
 *
 * Both take an _Atomic uint64_t or int64_t counter; farm_stat_add also a
 * plain uint64_t word of a stats struct that is public (tests read it
 * without atomics), added to with the __atomic builtins.
 */
#ifndef FARM_UTIL_STAT_H
#define FARM_UTIL_STAT_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

static inline void farm_stat_add_u64_(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline void farm_stat_add_i64_(_Atomic int64_t *c, int64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline void farm_stat_add_word_(uint64_t *c, uint64_t n)
{
	__atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

static inline void farm_stat_add_owned_u64_(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c,
	                      atomic_load_explicit(c, memory_order_relaxed) + n,
	                      memory_order_relaxed);
}

static inline void farm_stat_add_owned_i64_(_Atomic int64_t *c, int64_t n)
{
	atomic_store_explicit(c,
	                      atomic_load_explicit(c, memory_order_relaxed) + n,
	                      memory_order_relaxed);
}

#define farm_stat_add(c, n) \
	_Generic((c),                                                       \
	        _Atomic uint64_t *: farm_stat_add_u64_,                     \
	        _Atomic int64_t *: farm_stat_add_i64_,                      \
	        uint64_t *: farm_stat_add_word_)((c), (n))

#define farm_stat_add_owned(c, n) \
	_Generic((c),                                                       \
	        _Atomic uint64_t *: farm_stat_add_owned_u64_,               \
	        _Atomic int64_t *: farm_stat_add_owned_i64_)((c), (n))

/* A public stats snapshot @src (@have bytes, this library's struct) into a
 * caller's @out of @want bytes, the size the caller was compiled with (the
 * public headers' inline *_stats_get pass sizeof): structs only grow at
 * their end, so an older caller gets the fields it knows and a newer one
 * zeros where this library has none. */
static inline void farm_stats_copy(void *out, size_t want, const void *src,
                                   size_t have)
{
	size_t n = want < have ? want : have;
	memcpy(out, src, n);
	if (want > n)
		memset((char *)out + n, 0, want - n);
}

#endif
