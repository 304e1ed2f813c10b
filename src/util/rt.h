/*
 * Real-time priority for failure detectors (the lease thread, the shm
 * fabric's death watchdog): FaRM runs its lease manager at the highest
 * user priority so that renewals are never queued behind busy threads,
 * its own machine's real-time work included. Such a thread must sleep
 * between deadlines (poll(2)), so it cannot starve the machine.
 */
#ifndef FARM_UTIL_RT_H
#define FARM_UTIL_RT_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* SCHED_FIFO priorities, both below the kernel's threaded interrupts (50).
 * The failure detectors (the lease thread, the shm fabric's death
 * watchdog) sit above every other real-time thread of the library (the
 * membership's worker, which applies each view: mapping and zeroing
 * regions, many milliseconds of CPU; the ZooKeeper client's threads;
 * recovery's thread). A SCHED_FIFO thread is never preempted by another
 * of its own priority: with all of them at one level, during make demo's
 * join on the loaded 2-core host, probes at FIFO 40 and FIFO 1 waited up
 * to 66-68 ms for a core while one at FIFO 90 waited 13 ms at most, so
 * real-time work at the lease threads' own level held them off, and
 * healthy machines lost their 20 ms leases. */
#define FARM_RT_PRIORITY          40
#define FARM_RT_PRIORITY_DETECTOR 45

static inline int farm_thread_set_realtime_at(int prio)
{
	struct sched_param sp = {.sched_priority = prio};
	return pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

/* Make the calling thread SCHED_FIFO at FARM_RT_PRIORITY. 0, or the
 * positive error of pthread_setschedparam (EPERM without the privilege:
 * the thread stays at normal priority). */
static inline int farm_thread_set_realtime(void)
{
	return farm_thread_set_realtime_at(FARM_RT_PRIORITY);
}

/* The same at FARM_RT_PRIORITY_DETECTOR: for a failure detector only,
 * which must sleep between deadlines. */
static inline int farm_thread_set_detector_realtime(void)
{
	return farm_thread_set_realtime_at(FARM_RT_PRIORITY_DETECTOR);
}

/* Back to SCHED_OTHER: for a thread that does bulk work (a region's scan,
 * a copy) and may have been created by a real-time one (threads inherit
 * their creator's policy: the membership's worker applies views and
 * starts recovery's helpers), so that it never holds a core away from
 * the loops that serve transactions (and, for the whole-cluster restart
 * on the membership's worker, from the ZooKeeper threads and server: a
 * real-time restart starved them and cost leases). 0 or the positive
 * error. */
static inline int farm_thread_set_normal(void)
{
	struct sched_param sp = {.sched_priority = 0};
	return pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
}

/* The calling thread at the lowest SCHED_OTHER priority (nice 19; on
 * Linux a thread's nice value is its own): for one-off bulk work that
 * nothing waits for in a hurry, so that it takes the CPU only where the
 * loops leave it. An unprivileged thread cannot come back from it: call
 * it on a thread made for the work. 0 or the positive error. */
static inline int farm_thread_set_lowest(void)
{
	return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) ? errno
	                                                                : 0;
}

#endif
