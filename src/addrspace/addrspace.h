/*
 * The global address space of one machine: which machines hold which
 * regions (consistent hashing over the membership view, ring.h), the
 * regions this machine holds (as primary or backup), a cache of remote
 * regions' descriptors, and access by global address.
 *
 * A machine creates one farm_as on its fabric and messaging, before the
 * loops start (it registers its RPC handlers), then gives it the
 * membership view (farm_as_set_view) and again whenever the view changes.
 * Calls that take a loop run on that loop's thread and complete through
 * continuations on it. Internal; not installed.
 */
#ifndef FARM_ADDRSPACE_ADDRSPACE_H
#define FARM_ADDRSPACE_ADDRSPACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <farm/addr.h>
#include <farm/msg.h>
#include <farm/region.h>

#include "addrspace/ring.h"

/* Message types of the address space (reserved range of farm_msg). */
#define FARM_MSGT_AS_LOOKUP 0xf100u /* region id -> descriptor, to primary */
#define FARM_MSGT_AS_CREATE 0xf101u /* make a backup copy of a region */
#define FARM_MSGT_AS_DROP   0xf102u /* forget a backup copy (rollback) */
/* FARM_MSGT_AS_GROWQ 0xf103u: the regions of a grower's share (below) */
/* FARM_MSGT_AS_LEAVEQ 0xf104u: a leaver's handoff (below) */

typedef struct farm_as farm_as;

struct farm_as_attr {
	uint64_t region_size; /* power of two (0: FARM_REGION_DEFAULT_SIZE) */
	struct farm_ring_attr ring;
	uint64_t rpc_timeout_ns; /* 0: 10 s */
	uint64_t seed;           /* region-id choice; 0: from the clock */
};

enum farm_as_role { FARM_AS_NONE = 0, FARM_AS_PRIMARY, FARM_AS_BACKUP };

struct farm_as_stats {
	uint64_t regions_primary, regions_backup;
	uint64_t lookups_sent,
	        lookups_cached; /* descriptor cache misses/hits */
	uint64_t reads_local, reads_remote, writes_local, writes_remote;
	uint64_t bad_requests; /* malformed or out-of-range requests refused */
	/* Growth (farm_as_set_view_placed): our primary copies another
	 * machine became primary of, and backup copies no longer a
	 * replica's. */
	uint64_t demoted, displaced;
};

int farm_as_create(farm_fabric *fab, farm_msg *msg,
                   const struct farm_as_attr *attr, farm_as **out);
/* Every loop must be closed first. Destroys the regions this machine
 * holds. */
void farm_as_destroy(farm_as *as);

/*
 * farm_as_set_view() - install membership view @config_id with machines
 * @ids (this machine among them). Later views must have higher ids
 * (-ESTALE otherwise). Any thread. -EINVAL when this machine is absent.
 */
int farm_as_set_view(farm_as *as, uint64_t config_id, const uint32_t *ids,
                     unsigned n);
/* Same, with failure domains and departed machines (ring.h,
 * farm_ring_build_domains; farm_view_placement makes @ms from a view):
 * this machine must be among @ms and not departed. */
int farm_as_set_view_placed(farm_as *as, uint64_t config_id,
                            const struct farm_ring_machine *ms, unsigned n);
/*
 * The same in two steps, for a caller that needs the new placement before
 * the view is installed (node: growth's retired regions):
 * farm_as_place() makes the rings of @ms into *@out (farm_ring_update from
 * the rings in force: same placement as a build); the caller owns them
 * until farm_as_set_view_ring() installs them for @config_id. The latter
 * takes @g whatever it returns (freed unless installed); same returns as
 * farm_as_set_view_placed.
 */
int farm_as_place(farm_as *as, const struct farm_ring_machine *ms, unsigned n,
                  farm_ring **out);
int farm_as_set_view_ring(farm_as *as, uint64_t config_id,
                          const struct farm_ring_machine *ms, unsigned n,
                          farm_ring *g);
uint64_t farm_as_config_id(const farm_as *as);
uint64_t farm_as_region_size(const farm_as *as);
uint32_t farm_as_machine_id(const farm_as *as);
farm_fabric *farm_as_fabric(const farm_as *as);

/* Replicas of @region in the current view, primary first, then its extra
 * backup if it has one (a late machine growing into the region: ring.h,
 * farm_ring_holders; it gets every COMMIT-BACKUP and is filled by data
 * recovery like any backup, but is beyond the configured count and never
 * promoted ahead of the others); returns how many (0 before the first
 * view). The lists below (previous view, view of a configuration) are
 * the same, extras included. */
unsigned farm_as_replicas(farm_as *as, uint32_t region, uint32_t *out);
/* @region's extra backup in the current view, or FARM_RING_NO_EXTRA. */
uint32_t farm_as_extra(farm_as *as, uint32_t region);

/* Replicas of @region in the view before the current one (0: none). */
unsigned farm_as_prev_replicas(farm_as *as, uint32_t region, uint32_t *out);
/* Replicas of @region in the view of configuration @cfg (its low 32 bits,
 * as log records carry it): the current one, the one before, or one of
 * the AS_RING_HISTORY before those; 0 when this machine did not apply it
 * or has forgotten it. */
#define AS_RING_HISTORY 8
unsigned farm_as_replicas_at(farm_as *as, uint32_t cfg, uint32_t region,
                             uint32_t *out);
/*
 * Recovery's promotion of backup copies (src/txn/recover.c): the regions
 * this machine holds a backup copy of and is primary of in the current
 * view (up to @max in @out; returns how many there are), and the switch
 * of one of them to primary, once its logs are drained and its
 * transactions' locks recovered. Until then its lookups and accesses say
 * -EAGAIN (retryable).
 */
unsigned farm_as_promotable(farm_as *as, uint32_t *out, unsigned max);
int farm_as_promote(farm_as *as, uint32_t region);

/*
 * Growth (ring.h): a view that makes another machine primary of a region
 * this machine was primary of demotes our copy: from then on it is not
 * held (no lookup, local access or LOCK reaches it; if this machine is a
 * backup in the view, data recovery gives it a fresh copy), but it stays
 * mapped until farm_as_destroy. farm_as_demoted_ptr() is the address of
 * [@a, @a + @len) in the newest such copy, NULL when there is none: for
 * the transaction layer to finish there what an older configuration's
 * transactions locked (installs and unlocks), so that readers still in
 * that configuration never see a committed write missing.
 */
void *farm_as_demoted_ptr(farm_as *as, farm_gaddr a, uint64_t len);
/*
 * farm_as_demoted_source() - the base of the copy of @region a view
 * demoted here (growth), when data recovery may fill this machine's new,
 * still filling backup copy of it from there instead of from the
 * primary: that copy was the primary's, so it holds every write committed
 * before the demotion once the older configuration's locks in it are
 * released (installed or undone), and every later commit reaches the new
 * copy as a COMMIT-BACKUP, since this machine has been a replica of the
 * region in every view since. NULL otherwise: no demoted copy, a view
 * since in which this machine was not a replica, or a copy of the region
 * completed since (a later one would lack what came after).
 */
const void *farm_as_demoted_source(farm_as *as, uint32_t region);
/* The regions with a demoted copy that may be such a source, whether or
 * not a new copy is open yet (up to @max in @out; returns how many). */
unsigned farm_as_demoted_sources(farm_as *as, uint32_t *out, unsigned max);
/*
 * farm_as_give_up() - forget our backup copy of @region (kept mapped until
 * farm_as_destroy, as a displaced one): recovery locked objects in it to
 * promote it, and a later view gave the region another primary first, so
 * it is no longer a copy a backup may keep (its locks would never be
 * released). Where this machine is a backup, data recovery makes a new
 * one. 0, -EINVAL, -ENOENT (no complete backup copy held, or the ring
 * still makes this machine the region's primary: nothing done).
 */
int farm_as_give_up(farm_as *as, uint32_t region);

/*
 * farm_as_grow_check() - growth, asked by the grower (the first late
 * member, @me here) in configuration @cfg: does it hold a complete copy
 * of every region of its share? Each of the @n machines in @members is
 * asked (FARM_MSGT_AS_GROWQ) for the regions it is primary of that this
 * machine is to hold a copy of (as their extra backup, or as a replica
 * where the others left them short); each must be held here as a backup
 * that is not filling. The primaries answer only once they have applied @cfg
 * and every region they are to be primary of is promoted (else -EAGAIN). @cont
 * runs once on @loop: 0 (complete: every member answered, every region
 * listed is complete here, and @cfg is still in force here), -EAGAIN (not
 * yet: ask again later), -ESTALE (another configuration is in force), or
 * a messaging error. Returns 0 or an error (then @cont does not run).
 */
#define FARM_MSGT_AS_GROWQ 0xf103u
int farm_as_grow_check(farm_as *as, farm_loop *loop, uint64_t cfg,
                       const uint32_t *members, unsigned n, farm_op_fn cont,
                       void *ctx);

/*
 * farm_as_leave_check() - graceful leave, asked by a leaving member (@me
 * here) in configuration @cfg (src/recovery/README.md, "Graceful
 * leave"): is every successor's copy complete? Each of the @n machines
 * in @members is asked (FARM_MSGT_AS_LEAVEQ) for the regions it is
 * primary of that have successors (ring.h, farm_ring_successors) and
 * for the successors' copies it holds complete; this machine answers
 * for itself. Complete: every listed region's successors each hold a
 * complete copy, so once the leaver departs every region it held has
 * its replica count of complete copies without it. @cont runs once on
 * @loop: 0 (complete, and @cfg still in force here), -EAGAIN (not yet:
 * ask again later), -ESTALE (another configuration is in force), or a
 * messaging error. Returns 0 or an error (then @cont does not run).
 */
#define FARM_MSGT_AS_LEAVEQ 0xf104u
int farm_as_leave_check(farm_as *as, farm_loop *loop, uint64_t cfg,
                        const uint32_t *members, unsigned n, farm_op_fn cont,
                        void *ctx);

/*
 * Data recovery (src/txn/copy.c): a new backup's copy of @region, zeroed,
 * that the copy engine fills from the primary while commits are applied
 * to it (-EEXIST when a copy is held already). A filling copy is a backup
 * that does not count yet: it is never promotable, even where the ring
 * makes this machine the region's primary. farm_as_backup_filled() says
 * the copy is complete and checked.
 */
int farm_as_backup_open(farm_as *as, uint32_t region);
/* The same with @r, a region of the address space's size the caller made
 * (farm_region_create with farm_as_fabric): taken over, destroyed where
 * it is not used (an error, or -EEXIST). Lets the making, the costly
 * part, run where the caller chooses (src/txn/copy_engine.c). */
int farm_as_backup_open_made(farm_as *as, uint32_t region, farm_region *r);
int farm_as_backup_filled(farm_as *as, uint32_t region);
bool farm_as_backup_filling(farm_as *as, uint32_t region);

/*
 * Whole-cluster restart (src/node/restart.c). farm_as_adopt(): @r, a local
 * copy of @region filled from the previous incarnation's file, joins the
 * table as a backup copy that no lookup is answered for (-EAGAIN to
 * askers) until farm_as_promote() makes it primary. -EEXIST, -EINVAL.
 * farm_as_on_local(): @fn is told of every local copy this machine gains
 * (before anyone can write it: a primary before it is published, a backup
 * before the primary learns of it) or drops; it runs on the thread that
 * made the change, outside the table's lock.
 */
int farm_as_adopt(farm_as *as, uint32_t region, farm_region *r);
/* A region mapped from a previous incarnation's file @path (shm:
 * farm_mem_adopt, no copy). -ENOTSUP off shm; -EINVAL; the fabric's. */
int farm_region_adopt(farm_fabric *fab, const char *path, uint64_t size,
                      farm_region **out);
typedef void (*farm_as_local_fn)(void *ctx, uint32_t region, farm_region *r,
                                 bool added);
void farm_as_on_local(farm_as *as, farm_as_local_fn fn, void *ctx);

/* The local copy of @region, and this machine's role for it. NULL and
 * FARM_AS_NONE when not held here. */
farm_region *farm_as_local_region(farm_as *as, uint32_t region,
                                  enum farm_as_role *role);
/* The local address of [@a, @a + @len) when this machine is @a's primary
 * and the range is inside the region, else NULL. */
void *farm_as_local_ptr(farm_as *as, farm_gaddr a, uint64_t len);
/*
 * farm_as_resolve() - for hot paths that post their own one-sided
 * operations: where [a, a+len) is, with one lookup. 0 with *@local set
 * (this machine is the primary: loads and stores) or *@local NULL and
 * *@desc the remote primary's cached descriptor (counted as a remote read
 * served from the cache); -EAGAIN when neither is known yet (use
 * farm_as_read, which looks the region up); -EINVAL for a bad address.
 */
int farm_as_resolve(farm_as *as, farm_gaddr a, uint64_t len, uint8_t **local,
                    farm_mr_desc *desc);

/*
 * farm_as_resolve_cached() - farm_as_resolve through a small cache the
 * caller owns (one per loop; zero-initialised), with no lock and no shared
 * write when the entry is current: entries are tagged with the address
 * space's generation, which every change of its table bumps. Reads served
 * from the cache are counted in the cache (hits), not in farm_as_stats.
 * Two-way set associative: a region's set is its id mod FARM_AS_RCACHE / 2.
 * The hit path is inline (every lookup and lock-free read takes it): the
 * cache keeps, from its first miss, the address space it serves, its
 * generation word and its region size, so a hit calls nothing; a cache
 * handed another address space starts empty for it.
 */
#define FARM_AS_RCACHE 64
struct farm_as_rcache_ent {
	uint32_t id; /* region; 0: empty */
	uint64_t gen;
	uint8_t *base; /* the region here (primary), or NULL: d */
	farm_mr_desc d;
};
struct farm_as_rcache {
	struct farm_as_rcache_ent e[FARM_AS_RCACHE];
	uint64_t hits, misses;
	/* Set by the first miss (farm_as_resolve_slow): what the hit path
	 * needs of the address space, which is opaque here. */
	const farm_as *as;
	const _Atomic uint64_t *gen;
	uint64_t region_size;
};

/* The cache's current entry of region @id under generation @gen, counted
 * as a hit, or NULL. */
static inline const struct farm_as_rcache_ent *
farm_as_rcache_hit(struct farm_as_rcache *c, uint64_t gen, uint32_t id)
{
	/* Two ways a set: a loop's lookups alternate between its own shard's
	 * region and others', and two of those whose ids share a set (one
	 * run in 64 with two shards, direct-mapped) missed every other time,
	 * a locked lookup each. */
	const struct farm_as_rcache_ent *e =
	        &c->e[id % (FARM_AS_RCACHE / 2) * 2];
	if (e->id != id || e->gen != gen) {
		e++;
		if (e->id != id || e->gen != gen)
			return NULL;
	}
	c->hits++;
	return e;
}

/* farm_as_resolve_cached's path when the inline one cannot answer: its
 * arguments checked, the cache (re)bound to @as, the locked look-up. */
int farm_as_resolve_slow(farm_as *as, struct farm_as_rcache *c, farm_gaddr a,
                         uint64_t len, uint8_t **local, farm_mr_desc *desc);

static inline int farm_as_resolve_cached(farm_as *as, struct farm_as_rcache *c,
                                         farm_gaddr a, uint64_t len,
                                         uint8_t **local, farm_mr_desc *desc)
{
	/* c->as is set only with gen and region_size (the slow path), so a
	 * cache bound to @as can check the address with its region size. */
	if (__builtin_expect(c && as && c->as == as && local && desc && len &&
	                             farm_gaddr_valid(a, len, c->region_size),
	                     1)) {
		/* Acquire: pairs with the release bump of gen in as_wrlock
		 * (an entry cached under this generation predates no change
		 * of the map). */
		uint64_t g = atomic_load_explicit(c->gen, memory_order_acquire);
		const struct farm_as_rcache_ent *e =
		        farm_as_rcache_hit(c, g, farm_gaddr_region(a));
		if (__builtin_expect(e != NULL, 1)) {
			if (e->base) {
				*local = e->base + farm_gaddr_offset(a);
			} else {
				*local = NULL;
				*desc = e->d;
			}
			return 0;
		}
	}
	return farm_as_resolve_slow(as, c, a, len, local, desc);
}

/*
 * farm_as_config_word(): the configuration id (acquire: pairs with its
 * release store when a view is installed, as_view.c) that
 * farm_as_config_id reads; it lives as long as @as.
 */
const _Atomic uint64_t *farm_as_config_word(const farm_as *as);

/*
 * farm_as_region_alloc() - a new region with this machine as primary:
 * picks an id (on a random ring, or, when @near is a region id, close
 * after it on its ring), creates and registers the region, has each backup
 * create its copy (RPC), then publishes it. @cont runs once on @loop with
 * the status and the new region id. Errors: -EAGAIN (no id found),
 * -ENOSPC/-ENOMEM (memory), a backup's error or FARM_EPEERDEAD (the region
 * is then dropped everywhere). No view yet: -ENOENT.
 */
typedef void (*farm_as_region_fn)(farm_loop *loop, void *ctx, int status,
                                  uint32_t region);
int farm_as_region_alloc(farm_as *as, farm_loop *loop, uint32_t near,
                         farm_as_region_fn cont, void *ctx);

/*
 * farm_as_read() / farm_as_write() - @len bytes at global address @a into
 * (from) @buf, which @lmr registers (NULL is fine when the address turns
 * out local). Local regions are copied with loads and stores; remote ones
 * take one one-sided READ/WRITE to the region's primary with a cached
 * descriptor (fetched by RPC on first use). @cont runs once on @loop.
 * Errors: -EINVAL (address outside a region, length 0 or beyond the
 * region), -ENOENT (no such region at its primary), FARM_EPEERDEAD, and
 * the fabric's completion codes. These are raw bytes: objects with
 * versions are the transaction layer's.
 */
int farm_as_read(farm_as *as, farm_loop *loop, farm_gaddr a, void *buf,
                 farm_mr *lmr, uint32_t len, farm_op_fn cont, void *ctx);
int farm_as_write(farm_as *as, farm_loop *loop, farm_gaddr a, const void *buf,
                  farm_mr *lmr, uint32_t len, farm_op_fn cont, void *ctx);

/*
 * Function shipping by address: send a one-way message (farm_as_ship) or
 * make an RPC (farm_as_call) to the machine that is primary for @a's
 * region in the current view, to its loop farm_as_thread_of(@a) (the same
 * loop for every address of a region, so work on one region is
 * serialized there). The machine may be this one. Errors as farm_msg_send
 * and farm_msg_call, plus -EINVAL for an address outside any region and
 * -ENOENT before the first view.
 */
unsigned farm_as_thread_of(const farm_as *as, farm_gaddr a);
int farm_as_ship(farm_as *as, farm_loop *loop, farm_gaddr a, uint16_t type,
                 const void *payload, uint32_t len);
int farm_as_call(farm_as *as, farm_loop *loop, farm_gaddr a, uint16_t type,
                 const void *req, uint32_t len, uint64_t timeout_ns,
                 farm_rpc_fn cont, void *ctx);

void farm_as_stats_get(farm_as *as, struct farm_as_stats *out);

/* The regions this machine holds (primary or backup copies), for the
 * control socket (`farm status`): up to @max in @out, ordered by id.
 * Returns how many it holds (more than @max: the rest are left out). */
struct farm_as_held {
	uint32_t region;
	enum farm_as_role role; /* FARM_AS_PRIMARY or FARM_AS_BACKUP */
};
unsigned farm_as_held(farm_as *as, struct farm_as_held *out, unsigned max);

#endif
