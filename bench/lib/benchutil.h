/*
 * Small helpers the benchmarks share: the clock, a random generator,
 * options' numbers and sizes, reading and writing pipes whole, sorting
 * samples, removing a benchmark's scratch directory, pinning a process to
 * a CPU, the CPU time a process used (benchutil.c).
 */
#ifndef FARM_BENCH_BENCHUTIL_H
#define FARM_BENCH_BENCHUTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#define BU_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define BU_MAX(a, b)     ((a) > (b) ? (a) : (b))
#define BU_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define BU_NS_PER_S      1000000000ull

/* CLOCK_MONOTONIC in ns. */
uint64_t bu_now_ns(void);

/* splitmix64: the next number of the sequence *@state names (advanced). */
uint64_t bu_rand64(uint64_t *state);

/* Nonzero when @x is a power of two (0 is not). */
int bu_is_pow2(uint64_t x);

/* *@out = @s, a decimal number in [@lo, @hi]; -1 when @s is NULL (an
 * option's missing value), empty, not a number or out of range. */
int bu_parse_u(const char *s, unsigned lo, unsigned hi, unsigned *out);

/* *@out = @s, a byte count: digits, then an optional suffix k, M, G or T
 * (powers of 1024, either case) and an optional B. 0, or -EINVAL (not a
 * size, or one that overflows 64 bits); *@out untouched on error. The
 * same grammar as the configuration's sizes (docs/config.md). */
int bu_parse_size(const char *s, uint64_t *out);

/* qsort comparators, ascending. */
int bu_cmp_u64(const void *a, const void *b);
int bu_cmp_double(const void *a, const void *b);

/* Read exactly @len bytes from @fd: 0; -EPIPE at end of file first; a
 * negated errno. EINTR retries unless *@stop is set (a signal handler's
 * flag; NULL: always retry). */
int bu_read_full(int fd, void *p, size_t len,
                 const volatile sig_atomic_t *stop);

/* Write all @len bytes to @fd (EINTR retried): 0 or a negated errno. */
int bu_write_full(int fd, const void *p, size_t len);

/* Remove @path (relative to @at) and what is in it, @depth levels down at
 * most. Never follows links. */
void bu_rm_tree(int at, const char *path, int depth);

/* Pin the calling process to @cpu (nothing when @cpu < 0); a failure is
 * said on stderr, prefixed with @prog, and the run goes on unpinned. */
void bu_pin_to(int cpu, const char *prog);

/* CPU time process @pid (0: this one) has used so far, all its threads,
 * in ns (each thread's /proc/PID/task/TID/schedstat: exact, not ticks);
 * 0 when it cannot be read. A thread that exited is not counted, so take
 * differences while the threads live. */
uint64_t bu_proc_cpu_ns(pid_t pid);

/* CPU time this process has used, threads that exited included (user +
 * system, getrusage), in ns. */
uint64_t bu_self_cpu_ns(void);

/* SIGINT, SIGTERM and SIGHUP to @fn, without SA_RESTART (a blocked read
 * returns, so the benchmark stops early and cleans up); SIGPIPE ignored. */
void bu_on_stop(void (*fn)(int));

#endif
