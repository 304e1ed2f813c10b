/*
 * Logging to stderr, one line per call, levels chosen by $FARM_LOG
 * (error, warn, info, debug; default warn); with $FARM_LOG_TIME set (not
 * "0") each line starts with CLOCK_MONOTONIC in ms, one clock for every
 * process of a host. Internal; not installed.
 */
#ifndef FARM_UTIL_LOG_H
#define FARM_UTIL_LOG_H

#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum farm_log_level {
	FARM_LOG_ERROR = 0,
	FARM_LOG_WARN = 1,
	FARM_LOG_INFO = 2,
	FARM_LOG_DEBUG = 3,
};

int farm_log_enabled(enum farm_log_level level);
void farm_log_write(enum farm_log_level level, const char *file, int line,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define farm_log(level, ...)                                      \
	do {                                                      \
		if (farm_log_enabled(level))                      \
			farm_log_write(level, __FILE__, __LINE__, \
			               __VA_ARGS__);              \
	} while (0)
#define farm_err(...)  farm_log(FARM_LOG_ERROR, __VA_ARGS__)
#define farm_warn(...) farm_log(FARM_LOG_WARN, __VA_ARGS__)
#define farm_info(...) farm_log(FARM_LOG_INFO, __VA_ARGS__)
#define farm_dbg(...)  farm_log(FARM_LOG_DEBUG, __VA_ARGS__)

/* Lines this process wrote (farm_log_write), for tests and the stats. */
uint64_t farm_log_lines(void);

/*
 * A recurring condition says one line per FARM_LOG_LIMIT_NS, with the
 * count of the lines it held back since the last: a loop that fails on
 * every try (an application that retries on a removed machine) must not
 * fill a disk. Zeroed static storage is a ready limiter.
 */
#define FARM_LOG_LIMIT_NS 1000000000ull
struct farm_log_limit {
	_Atomic uint64_t next_ns;    /* no line before (CLOCK_MONOTONIC) */
	_Atomic uint64_t suppressed; /* held back since the last line */
};
/* Whether to write the line now; then *@suppressed says how many were
 * held back before it. Any thread. */
bool farm_log_limit_pass(struct farm_log_limit *l, uint64_t *suppressed);
/* " (@n like it held back)" into @buf. */
void farm_log_held(char *buf, unsigned size, uint64_t n);

/* The line with " (N like it held back)" appended when N > 0. */
#define farm_log_limited(lim, level, fmt, ...)                              \
	do {                                                                \
		uint64_t sup_;                                              \
		char held_[48] = "";                                        \
		if (farm_log_enabled(level) &&                              \
		    farm_log_limit_pass(lim, &sup_)) {                      \
			if (sup_)                                           \
				farm_log_held(held_, sizeof(held_), sup_);  \
			farm_log_write(level, __FILE__, __LINE__, fmt "%s", \
			               __VA_ARGS__, held_);                 \
		}                                                           \
	} while (0)
#define farm_warn_limited(lim, fmt, ...) \
	farm_log_limited(lim, FARM_LOG_WARN, fmt, __VA_ARGS__)

#endif /* FARM_UTIL_LOG_H */
