#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/common.h"

static atomic_int log_level = -1;
static atomic_int log_time = -1; /* $FARM_LOG_TIME set: 1 */
static _Atomic uint64_t log_lines;

uint64_t farm_log_lines(void)
{
	return atomic_load_explicit(&log_lines, memory_order_relaxed);
}

void farm_log_held(char *buf, unsigned size, uint64_t n)
{
	snprintf(buf, size, " (%" PRIu64 " like it held back)", n);
}

bool farm_log_limit_pass(struct farm_log_limit *l, uint64_t *suppressed)
{
	uint64_t now = farm_now_ns();
	/* Relaxed: a counter and a deadline, nothing published with them;
	 * the CAS alone picks the one thread that writes the line. */
	uint64_t next = atomic_load_explicit(&l->next_ns, memory_order_relaxed);
	if (now < next || !atomic_compare_exchange_strong_explicit(
	                          &l->next_ns, &next, now + FARM_LOG_LIMIT_NS,
	                          memory_order_relaxed, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&l->suppressed, 1,
		                          memory_order_relaxed);
		return false;
	}
	*suppressed = atomic_exchange_explicit(&l->suppressed, 0,
	                                       memory_order_relaxed);
	return true;
}

static int parse_level(const char *s)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	if (!s || !*s)
		return FARM_LOG_WARN;
	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return FARM_LOG_WARN;
}

int farm_log_enabled(enum farm_log_level level)
{
	int cur = atomic_load_explicit(&log_level, memory_order_relaxed);
	if (cur < 0) {
		cur = parse_level(getenv("FARM_LOG"));
		atomic_store_explicit(&log_level, cur, memory_order_relaxed);
	}
	return (int)level <= cur;
}

void farm_log_write(enum farm_log_level level, const char *file, int line,
                    const char *fmt, ...)
{
	static const char *const tags[] = {"error", "warn", "info", "debug"};
	char buf[1024], when[32] = "";
	const char *base = strrchr(file, '/');
	int t = atomic_load_explicit(&log_time, memory_order_relaxed);
	if (t < 0) {
		const char *e = getenv("FARM_LOG_TIME");
		t = e && *e && strcmp(e, "0") != 0;
		atomic_store_explicit(&log_time, t, memory_order_relaxed);
	}
	/* CLOCK_MONOTONIC in ms: one clock for every process of a host, so
	 * the lines of several machines order into one timeline. */
	if (t) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		snprintf(when, sizeof(when), "%.3f ",
		         (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6);
	}
	int n = snprintf(buf, sizeof(buf), "%sfarm[%d] %s: %s:%d: ", when,
	                 (int)getpid(), tags[level], base ? base + 1 : file,
	                 line);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof(buf))
		n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf) - 1)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* One write(2) per line, so lines from several machine processes
	 * sharing a terminal do not interleave mid-line. */
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
	atomic_fetch_add_explicit(&log_lines, 1, memory_order_relaxed);
}
