/*
 * Small helpers every layer uses: branch hints, cache-line layout, CPU
 * pause, clocks. Internal; not installed.
 */
#ifndef FARM_UTIL_COMMON_H
#define FARM_UTIL_COMMON_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define FARM_LIKELY(x)     __builtin_expect(!!(x), 1)
#define FARM_UNLIKELY(x)   __builtin_expect(!!(x), 0)
#define FARM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define FARM_CL            64
#define FARM_CL_ALIGNED    alignas(FARM_CL)
#define FARM_INTERNAL      __attribute__((visibility("hidden")))

#define FARM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FARM_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Pause inside a spin loop: tells the core it may yield to its sibling. */
static inline void farm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/*
 * Store fence for weakly ordered stores. On x86 ordinary stores are already
 * seen in program order (TSO), but non-temporal stores (which a large
 * memcpy may use) are not: sfence orders them before later stores. Elsewhere
 * a C11 release fence is what is needed.
 */
static inline void farm_store_fence(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_sfence();
#else
	/* Pairs with the acquire load of what the caller stores next: the
	 * last word of a WRITE (write_ordered, fabric/shm_data.c), read by
	 * wire_load and the log scans; an object header after its body
	 * (obj_install, farm_txn_copy_apply), read by lock-free reads. */
	atomic_thread_fence(memory_order_release);
#endif
}

static inline uint64_t farm_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A cheap, monotonic-enough tick count for measuring short intervals on
 * one thread (the TSC on x86: a third of clock_gettime's cost on these
 * VMs); elsewhere nanoseconds. Convert with a calibration, never assume a
 * rate. */
static inline uint64_t farm_cycles(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_ia32_rdtsc();
#else
	return farm_now_ns();
#endif
}

static inline int farm_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* splitmix64: a fast, well-mixed 64-bit generator for tests and backoff. */
static inline uint64_t farm_rand64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif /* FARM_UTIL_COMMON_H */
