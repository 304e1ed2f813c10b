/*
 * Happens-before that ThreadSanitizer cannot see by itself, said
 * explicitly: liburcu's queues and grace periods order memory with plain
 * (volatile) loads and stores and barriers, which TSan does not model.
 * FARM_TSAN_RELEASE(p) where a thread hands @p over (before the enqueue),
 * FARM_TSAN_ACQUIRE(p) where the other takes it (after the dequeue); each
 * use names its partner.
 * FARM_TSAN_IGNORE_READS_BEGIN/END bracket the emulated one-sided READ of
 * the shm fabric: it copies a peer's memory as a NIC would, racing by
 * design with that memory's owner (a benign C11 data race, checked by the
 * line seqlocks, not by TSan). Only that thread's reads inside the bracket
 * are left unchecked. Nothing outside TSan builds. Internal.
 */
#ifndef FARM_UTIL_TSAN_H
#define FARM_UTIL_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define FARM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FARM_TSAN 1
#endif
#endif

#ifdef FARM_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define FARM_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define FARM_TSAN_RELEASE(p) __tsan_release((void *)(p))
/* The dynamic-annotation entry points: both GCC's and clang's TSan
 * runtimes export these (GCC's has no __tsan_ignore_reads_*). */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define FARM_TSAN_IGNORE_READS_BEGIN() \
	AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define FARM_TSAN_IGNORE_READS_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define FARM_TSAN_ACQUIRE(p)           ((void)0)
#define FARM_TSAN_RELEASE(p)           ((void)0)
#define FARM_TSAN_IGNORE_READS_BEGIN() ((void)0)
#define FARM_TSAN_IGNORE_READS_END()   ((void)0)
#endif

#endif
