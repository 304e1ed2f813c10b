/*
 * What the two baselines (baseline_tcp.c, baseline_ring.c) share, defined
 * in baseline.c: the helper process (fork, ready handshake, reap), a run's
 * warm-up and measured window, and the latency sampler. Internal to
 * bench/lib; baseline.h is the contract.
 */
#ifndef FARM_BENCH_BASELINE_INT_H
#define FARM_BENCH_BASELINE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "baseline.h"
#include "benchutil.h"

#define BL_PFX         "baseline: "
#define BL_STALL_NS    (5 * BU_NS_PER_S)
#define BL_MAX_SAMPLES (1u << 20)

/* Where a run is: not counted yet, counted, or draining after the window. */
enum bl_phase { BL_WARMUP, BL_MEASURE, BL_DRAIN };

/* CLOCK_MONOTONIC in ns. Inline (not bu_now_ns): it is read on the
 * measured path, twice per round trip. */
static inline uint64_t bl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * BU_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* 0 when @seconds is a run length the baselines take, else -EINVAL. */
int bl_check_seconds(double seconds);

/* Warm-up, then measured window, both in ns. */
void bl_durations(double seconds, uint64_t *warm, uint64_t *dur);

/* Latency samples: every stride'th, the stride doubling when full. */
struct bl_sampler {
	uint64_t *v;
	size_t n;
	uint64_t stride, skip;
};

/* 0, or -ENOMEM. The caller frees s->v (also after a failure). */
int bl_sampler_init(struct bl_sampler *s);

static inline void bl_sampler_add(struct bl_sampler *s, uint64_t x)
{
	if (s->skip) {
		s->skip--;
		return;
	}
	if (s->n == BL_MAX_SAMPLES) {
		/* Keep the even ones: x is then exactly the next one due. */
		for (size_t i = 0; i < BL_MAX_SAMPLES / 2; i++)
			s->v[i] = s->v[2 * i];
		s->n = BL_MAX_SAMPLES / 2;
		s->stride *= 2;
	}
	s->v[s->n++] = x;
	s->skip = s->stride - 1;
}

/* Sorts the samples; r->p50_ns and r->p99_ns by nearest rank. */
void bl_sampler_finish(struct bl_sampler *s, struct bl_result *r);

/* Runs in the child; returns 0 or a positive errno, its exit status. */
typedef int (*bl_child_fn)(void *arg, int wfd);

/*
 * Forks a child running fn(arg, wfd), where wfd is the write end of a pipe
 * whose read end goes to *rfd. The child dies with the parent (or exits at
 * once if the parent is already gone). Returns the pid or a negative errno.
 */
pid_t bl_spawn(bl_child_fn fn, void *arg, int *rfd);

/*
 * Reaps the child (killing it first when @kill_it). Returns 0 when it
 * exited with status 0, the negated exit status otherwise (the child exits
 * with a positive errno), -ECHILD when a signal ended it.
 */
int bl_reap(pid_t pid, bool kill_it);

/*
 * Waits for the child's ready message (@len bytes into @msg) and closes
 * @rfd. When the pipe ends early the child failed: reaps it and returns its
 * error; on any other error kills and reaps it.
 */
int bl_await_child(pid_t pid, int rfd, void *msg, size_t len);

/* After the measurement, which returned @err: on an error the child is
 * killed and reaped and @err returned; else the child is reaped once it
 * ends (bl_reap: 0, or its error). */
int bl_end(pid_t pid, int err);

#endif /* FARM_BENCH_BASELINE_INT_H */
