/*
 * Logging to stderr, one line per call, levels chosen by $FARM_LOG
 * (error, warn, info, debug; default warn); with $FARM_LOG_TIME set (not
 * "0") each line starts with CLOCK_MONOTONIC in ms, one clock for every
 * process of a host. Internal; not installed.
 */
#ifndef FARM_UTIL_LOG_H
#define FARM_UTIL_LOG_H

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

#endif /* FARM_UTIL_LOG_H */
