/*
 * The address space's internals, shared by its files (not installed):
 * the table of regions and the state under its lock (addrspace.c), the
 * installation of views and the copies growth gives up (as_view.c), the
 * growth query (growq.c) and access to remote memory (access.c).
 * Everything here is under farm_as.lock unless its comment says
 * otherwise.
 */
#ifndef FARM_ADDRSPACE_AS_INT_H
#define FARM_ADDRSPACE_AS_INT_H

#include "addrspace/addrspace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "addrspace/ring.h"

enum {
	E_FREE = 0,
	E_PRIMARY = FARM_AS_PRIMARY,
	E_BACKUP = FARM_AS_BACKUP,
	E_REMOTE
};

struct entry {
	uint32_t id; /* 0: free slot */
	uint8_t kind;
	/* E_BACKUP being filled by data recovery (src/txn/copy.c): never
	 * promoted, not yet a replica that counts. */
	bool filling;
	/* E_BACKUP made at a primary's request (h_create): only that
	 * machine may drop it (its allocation failing). A DROP from
	 * another, or for a copy made otherwise, would destroy a replica a
	 * published region counts on. */
	bool created;
	uint32_t creator;
	farm_region *local; /* E_PRIMARY, E_BACKUP: our copy */
	farm_mr_desc desc;  /* the primary copy: ours for E_PRIMARY, the
	                       cached remote one otherwise (len 0: unknown) */
};

struct farm_as {
	farm_fabric *fab;
	farm_msg *msg;
	uint32_t me;
	uint64_t region_size;
	struct farm_ring_attr ring_attr;
	uint64_t rpc_timeout_ns;
	pthread_rwlock_t lock;
	farm_ring *ring;   /* under lock */
	farm_ring *prev;   /* the view before (recovery asks who held what) */
	uint64_t prev_cfg; /* its configuration id */
	/* Under lock: the views before those two, newest last, so recovery
	 * can ask who the replicas were in the configuration a transaction
	 * ran in (farm_as_replicas_at) after several views went by. */
	struct {
		uint64_t cfg;
		farm_ring *ring;
	} hist[AS_RING_HISTORY];
	unsigned nhist;
	/* Written under lock (release); read without it by farm_as_config_id
	 * (acquire), from any thread: the commit and copy paths stamp their
	 * work with it. */
	_Atomic uint64_t config_id;
	struct entry *tab; /* open addressing, cap a power of two */
	uint32_t cap, used;
	uint64_t seed;
	struct {
		_Atomic uint64_t lookups_sent, lookups_cached, reads_local,
		        reads_remote, writes_local, writes_remote, bad_requests;
	} st;
	/* Bumped whenever a writer takes the lock: resolve caches
	 * (farm_as_resolve_cached) trust entries of the current value. */
	_Atomic uint64_t gen;
	/* Unique among the address spaces this process ever made (never
	 * reused, unlike the structure's address): farm_as_local_region's
	 * per-thread answers are tagged with it. */
	uint64_t serial;
	/* Told of every local copy gained or dropped (farm_as_on_local). */
	farm_as_local_fn on_local;
	void *on_local_ctx;
	/* Under lock: copies a view took from this machine while it lives
	 * (growth: a primary that another machine took over, a backup the
	 * grower displaced; farm_as_set_view_placed). They stay mapped until
	 * farm_as_destroy: readers of an older configuration may still read
	 * a demoted primary's copy, and its transactions of that
	 * configuration finish there (farm_as_demoted_ptr). Newest last. */
	struct given_up {
		uint32_t id;
		bool primary; /* it was our primary copy */
		/* A demoted copy that data recovery may fill this machine's
		 * new backup copy from (farm_as_demoted_source): set while
		 * this machine has been a replica of the region in every
		 * view since the demotion and its new copy is not complete. */
		bool source;
		farm_region *r;
	} * given;
	unsigned ngiven, given_cap;
	uint64_t demoted, displaced; /* counts, under lock */
};

/* The primary of @region (not 0) in the installed view, from this
 * thread's answers when current (addrspace.c). 0; -ENOENT: no view. */
int farm_as_primary_of(farm_as *as, uint32_t region, uint32_t *machine);

static inline void tell_local(farm_as *as, uint32_t id, farm_region *r,
                              bool added)
{
	if (as->on_local)
		as->on_local(as->on_local_ctx, id, r, added);
}

static inline void as_wrlock(farm_as *as)
{
	pthread_rwlock_wrlock(&as->lock);
	/* Release: pairs with the acquire loads of gen in
	 * farm_as_resolve_cached, farm_as_resolve_slow and region_answer,
	 * whose cached entries it invalidates. */
	atomic_fetch_add_explicit(&as->gen, 1, memory_order_release);
}

/* ---- wire formats -------------------------------------------------------- */

struct lookup_req {
	uint32_t region;
};
struct desc_reply {
	uint32_t region;
	uint32_t machine;
	uint64_t key, addr, len;
	uint32_t access, pad;
};
struct create_req {
	uint32_t region;
	uint32_t primary;
	uint64_t size;
};

/* ---- shared by the files (addrspace.c) ----------------------------------- */

/* The table (caller holds the lock; farm_as_put and farm_as_del exclusively).
 */
struct entry *farm_as_find(const farm_as *as, uint32_t id);
int farm_as_put(farm_as *as, const struct entry *in);
void farm_as_del(farm_as *as, uint32_t id);

/* Replies from the handlers; a reply that cannot be sent is logged. */
void farm_as_reply(farm_loop *loop, const struct farm_msg_token *tok,
                   const void *data, uint32_t len);
void farm_as_reply_err(farm_loop *loop, const struct farm_msg_token *tok,
                       int status);
void farm_as_bad_request(farm_as *as, farm_loop *loop, const farm_msg_in *in,
                         const char *what);

/* growq.c: FARM_MSGT_AS_GROWQ (registered by farm_as_create). */
void farm_as_h_growq(farm_loop *loop, const farm_msg_in *in, void *arg);
/* leaveq.c: FARM_MSGT_AS_LEAVEQ (registered by farm_as_create). */
void farm_as_h_leaveq(farm_loop *loop, const farm_msg_in *in, void *arg);

#endif
