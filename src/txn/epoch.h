/*
 * Epochs: knowing when every operation that started before some moment
 * has finished, on every thread of every machine (FaRM NSDI'14 section
 * 3.5, "a distributed version of an epoch-based allocator"). Memory freed
 * from one size class is reused for another only after such an epoch.
 *
 * Local half (one domain per process, shared by every machine the process
 * runs): liburcu's QSBR flavour. Each thread that runs transactions or
 * lock-free reads registers (farm_epoch_thread_enter, done by
 * farm_txm_attach) and counts its operations in two buckets by epoch
 * parity (farm_epoch_op_begin/end: plain thread-local counters). A grace
 * period advances the process epoch and waits (synchronize_rcu) until
 * every registered thread has announced a quiescent state, which a thread
 * does from its loop's poller only when none of its operations begun in
 * the previous epoch is still open. A thread with no operation open goes
 * offline when its loop parks, so idle loops never delay an epoch.
 *
 * Distributed half: farm_epoch_run() (farm_txm_epoch) asks every peer, by
 * an FARM_MSGT_EPOCH request, to run a local grace period and reply once
 * it is over, runs one here, and when every machine has answered frees
 * what the block allocator retired before the epoch began.
 *
 * Internal; not installed.
 */
#ifndef FARM_TXN_EPOCH_H
#define FARM_TXN_EPOCH_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/msg.h>

#include "alloc/alloc.h"

#define FARM_MSGT_EPOCH 0xf121u /* -> a machine: run a local grace period */

/* Per-thread state (thread-local; only its thread touches it). */
struct farm_epoch_tls {
	uint64_t ep;     /* the process epoch this thread last saw */
	uint64_t ops[2]; /* open operations by epoch parity */
	unsigned regs;   /* farm_epoch_thread_enter nesting */
	bool offline;    /* QSBR offline (parked with nothing open) */
};
extern _Thread_local struct farm_epoch_tls farm_epoch_t;
extern _Atomic uint64_t farm_epoch_global;
void farm_epoch_online_slow(void);

/* Process-wide domain: started by the first user, stopped by the last. */
int farm_epoch_domain_get(void);
void farm_epoch_domain_put(void);

/* Register the calling thread (nesting allowed) and its @loop (woken when
 * a grace period starts; NULL for a thread with no loop). */
int farm_epoch_thread_enter(farm_loop *loop);
/* Undo one enter; grace-period completions still owed to @loop run now
 * with -ECANCELED. */
void farm_epoch_thread_leave(farm_loop *loop);

/* Bracket one operation (a transaction, a lock-free read, a lookup that
 * follows pointers): begin returns the parity end needs. Registered
 * threads only. */
static inline unsigned farm_epoch_op_begin(void)
{
	struct farm_epoch_tls *t = &farm_epoch_t;
	if (__builtin_expect(t->offline, 0))
		farm_epoch_online_slow();
	/* Acquire: pairs with the acq_rel bump of the epoch in epoch_main
	 * (epoch.c). */
	uint64_t e = __atomic_load_n((const uint64_t *)&farm_epoch_global,
	                             __ATOMIC_ACQUIRE);
	t->ep = e;
	t->ops[e & 1]++;
	return (unsigned)(e & 1);
}
static inline void farm_epoch_op_end(unsigned parity)
{
	farm_epoch_t.ops[parity & 1]--;
}

/* A poll point (every loop pass): cheap unless a grace period is waiting,
 * then announces a quiescent state when nothing old is open. */
void farm_epoch_quiesce(void);
/* Before the thread's loop parks: offline when nothing is open. */
void farm_epoch_park(void);

/*
 * farm_epoch_local_async() - @fn runs on @loop (posted, status 0) once
 * every operation begun in this process before the call has ended; with
 * -ECANCELED when @loop leaves first. -ENOMEM.
 */
int farm_epoch_local_async(farm_loop *loop, farm_work_fn fn, void *ctx);
/* The same from a thread that is not registered (tests, tools). */
int farm_epoch_local_sync(void);

/* Register the FARM_MSGT_EPOCH handler on @msg (before its loops run). */
int farm_epoch_handle(farm_msg *msg);

/*
 * farm_epoch_run() - a distributed epoch from @loop: marks @ba, runs a
 * grace period here and on the @npeers machines in @peers (loop 0 of
 * each, by RPC with @timeout_ns), then reclaims @ba's runs retired before
 * the mark. @cont gets 0, or the first failure (FARM_EPEERDEAD,
 * -ETIMEDOUT, ...; nothing is reclaimed then). *@reclaimed (may be NULL)
 * gets the blocks freed, before @cont runs.
 */
int farm_epoch_run(farm_loop *loop, const uint32_t *peers, unsigned npeers,
                   uint64_t timeout_ns, farm_blockalloc *ba,
                   uint64_t *reclaimed, farm_op_fn cont, void *ctx);

/* Testing: announce quiescent states whatever is open (the bug the
 * tests must catch). */
void farm_epoch_testing_break(bool on);
/* Testing (fault-injection builds only, else -ENOTSUP): grace periods
 * of one synchronize_rcu pass, the protocol before the fix described at
 * the top of epoch.c. */
int farm_epoch_testing_one_pass(bool on);
/* Process-wide counters: grace periods completed. */
uint64_t farm_epoch_grace_periods(void);

#endif
