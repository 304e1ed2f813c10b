/*
 * Real-time priority for failure detectors (the lease thread, the shm
 * fabric's death watchdog): FaRM runs its lease manager at the highest
 * user priority so that renewals are never queued behind busy threads.
 * Such a thread must sleep between deadlines (poll(2)), so it cannot
 * starve the machine.
 */
#ifndef FARM_UTIL_RT_H
#define FARM_UTIL_RT_H

#include <pthread.h>
#include <sched.h>

/* SCHED_FIFO priority: above every ordinary thread, below the kernel's
 * threaded interrupts (50). */
#define FARM_RT_PRIORITY 40

/* Make the calling thread SCHED_FIFO. 0, or the positive error of
 * pthread_setschedparam (EPERM without the privilege: the thread stays
 * at normal priority). */
static inline int farm_thread_set_realtime(void)
{
	struct sched_param sp = {.sched_priority = FARM_RT_PRIORITY};
	return pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

#endif
