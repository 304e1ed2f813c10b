/*
 * Futex wait/wake on a 4-byte word that may live in memory shared between
 * processes (a MAP_SHARED file mapping): the shared (non-PRIVATE) futex
 * operations, keyed by the backing file and offset. Internal.
 */
#ifndef FARM_UTIL_FUTEX_H
#define FARM_UTIL_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *addr == expected, for at most timeout_ns (0: no limit).
 * Returns 0 (woken, or the word differed), -ETIMEDOUT or -EINTR. */
static inline int farm_futex_wait(const uint32_t *addr, uint32_t expected,
                                  uint64_t timeout_ns)
{
	struct timespec ts, *tp = NULL;
	if (timeout_ns) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
		ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
		tp = &ts;
	}
	long rc = syscall(SYS_futex, addr, FUTEX_WAIT, expected, tp, NULL, 0);
	if (rc == 0 || errno == EAGAIN)
		return 0;
	return errno == ETIMEDOUT ? -ETIMEDOUT : -EINTR;
}

/* Wake every waiter on addr; returns how many were woken. */
static inline int farm_futex_wake(const uint32_t *addr)
{
	long rc = syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	return rc < 0 ? 0 : (int)rc;
}

#endif /* FARM_UTIL_FUTEX_H */
