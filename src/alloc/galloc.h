/*
 * Cluster-wide allocation: the slab and block allocators (alloc.h) on top
 * of the address space (addrspace.h).
 *
 * One farm_galloc per machine. Its block allocator takes regions from the
 * address space (this machine as primary, backups made by RPC); each event
 * loop has its own slab. An allocation whose locality hint lives on another
 * machine is shipped to that machine (an RPC to the loop that serves the
 * hint's region), as is a free of a remote object. Everything completes
 * through a continuation on the calling loop. Internal; not installed.
 */
#ifndef FARM_ALLOC_GALLOC_H
#define FARM_ALLOC_GALLOC_H

#include <farm/addr.h>
#include <farm/msg.h>

#include "addrspace/addrspace.h"
#include "alloc/alloc.h"

#define FARM_MSGT_ALLOC 0xf110u /* allocate with a hint this machine owns */
#define FARM_MSGT_FREE  0xf111u /* free an object this machine owns */

typedef struct farm_galloc farm_galloc;

struct farm_galloc_stats {
	struct farm_alloc_stats local; /* the block allocator's sums */
	uint64_t shipped_allocs;       /* sent to a hint's owner */
	uint64_t served_allocs;        /* done here for another machine */
	uint64_t shipped_frees, served_frees;
	uint64_t regions_added; /* regions taken from the address space */
	uint64_t region_waits;  /* allocations that waited for a region */
	/* Allocations that wanted a region while promoted regions were still
	 * to be adopted, and waited for an adoption instead (each wait). */
	uint64_t allocs_parked;
	/* Recovery: promoted regions adopted (rebuilt by scan), refused
	 * (corrupt copy), skipped (no object was ever carried into them);
	 * rebuild time in all and the longest; frees deferred until their
	 * region was adopted, done then, and lost (not freed: leaked). */
	uint64_t adopted, adopt_failed, adopt_skipped, adopt_ns, adopt_max_ns;
	uint64_t frees_deferred, deferred_freed, deferred_lost;
	/* Objects allocated in adopted regions since, and frees at commit
	 * (farm_galloc_free_local_or_defer) done in them. */
	uint64_t adopted_allocs, adopted_frees;
	/* Regions given up (farm_galloc_retire). */
	uint64_t retired;
};

/* Before the loops start (registers the RPC handlers). */
int farm_galloc_create(farm_as *as, farm_msg *msg, farm_galloc **out);
/* After every loop has closed. Region memory stays with the address
 * space. */
void farm_galloc_destroy(farm_galloc *g);

/* Completion: @status 0 and the object's address, or a negative code. */
typedef void (*farm_galloc_fn)(farm_loop *loop, void *ctx, int status,
                               farm_gaddr a);

/*
 * farm_galloc_alloc() - allocate @size stored bytes (16-byte header
 * included; see alloc.h) near @hint (FARM_GADDR_NULL: anywhere local).
 * Local hints and no hint are served by this loop's slab; when it needs a
 * new region the address space makes one (near the hint's region when
 * there is a hint) and the allocation continues. A hint owned by another
 * machine becomes an RPC to it. @cont runs once on @loop, never before this
 * returns. Errors (here or through @cont): -EINVAL, -E2BIG, -ENOMEM,
 * -ENOSPC, FARM_EPEERDEAD, -ETIMEDOUT, and the owner's error.
 */
int farm_galloc_alloc(farm_galloc *g, farm_loop *loop, uint64_t size,
                      farm_gaddr hint, farm_galloc_fn cont, void *ctx);
/*
 * farm_galloc_alloc_marked() - farm_galloc_alloc() whose claim sets @mark
 * (FARM_OBJHDR_MARK_MASK bits) in the object's version word before the
 * allocated bit is visible (farm_slab_alloc_marked): between the claim
 * and @cont, a loop pass or more, no reader sees the object allocated
 * without the mark. The caller clears it. Errors as farm_galloc_alloc,
 * -EINVAL for bits outside the mask.
 */
int farm_galloc_alloc_marked(farm_galloc *g, farm_loop *loop, uint64_t size,
                             farm_gaddr hint, uint64_t mark,
                             farm_galloc_fn cont, void *ctx);
/* An array of @n elements of @elem_size stored bytes (alloc.h). */
int farm_galloc_alloc_array(farm_galloc *g, farm_loop *loop, uint64_t elem_size,
                            uint64_t n, farm_gaddr hint, farm_galloc_fn cont,
                            void *ctx);
/* farm_galloc_alloc_array() with @mark in every element's version word
 * before its allocated bit (farm_alloc_array_marked). */
int farm_galloc_alloc_array_marked(farm_galloc *g, farm_loop *loop,
                                   uint64_t elem_size, uint64_t n,
                                   farm_gaddr hint, uint64_t mark,
                                   farm_galloc_fn cont, void *ctx);
/*
 * farm_galloc_alloc_array_alone() - an array as farm_galloc_alloc_array
 * makes, in a region made for it (this machine its primary), so that who
 * serves the array follows that region's placement alone: a KV shard's
 * buckets move to a machine that grows into the region's primary without
 * taking other shards with them. Other allocations may later use the
 * region's free space. Errors: as farm_galloc_alloc and
 * farm_as_region_alloc's.
 */
int farm_galloc_alloc_array_alone(farm_galloc *g, farm_loop *loop,
                                  uint64_t elem_size, uint64_t n,
                                  farm_galloc_fn cont, void *ctx);
/* Free the object at @a, here or on its owner. */
int farm_galloc_free(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                     farm_op_fn cont, void *ctx);

/* Free a local object now, on @loop's slab: 0, -EREMOTE (not local), or
 * farm_slab_free's errors. */
int farm_galloc_free_local(farm_galloc *g, farm_loop *loop, farm_gaddr a);
/* farm_galloc_free_local() that stores @then in the object's version word
 * after its header is freed and before the slot can be handed out again
 * (farm_slab_free_unlock): for an owner whose object is locked or marked
 * until it is free, so that no reader sees it allocated and unlocked. On
 * an error nothing is stored. */
int farm_galloc_free_local_unlock(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                                  uint64_t then);

/* Free a local array (farm_alloc_array_free): an array past 1 MiB has
 * its blocks retired until a distributed epoch (src/txn/epoch.c) ends. */
int farm_galloc_free_array_local(farm_galloc *g, farm_loop *loop, farm_gaddr a,
                                 uint64_t elem_size, uint64_t n);

/*
 * Allocator recovery (src/alloc/README.md "Recovery"; FaRM SOSP'15 5.4).
 *
 * farm_galloc_block_info() - the block description of a local object, for
 * the transaction layer to carry to replicas (farm_alloc_block_info).
 *
 * farm_galloc_adopt_expect() - region @region is about to become primary
 * here (promoted by recovery): from now on frees of its objects are
 * deferred (farm_galloc_free_local_or_defer) until it is adopted. Returns
 * 1 (expected from now on), 0 (it was already), 2 (it is adopted
 * already: nothing to do), -ENOMEM.
 * farm_galloc_adopt_cancel() - it was not promoted after all (only after
 * an expect that returned 1).
 * farm_galloc_adopt() - nothing can write new objects into it any more
 * but this machine's allocator: a background thread rebuilds its block
 * allocator state from the copy (block table kept by the replica, slab free
 * lists by scanning headers), then does its deferred frees. Never blocks
 * the caller. Returns 0 or -ENOMEM / a thread-creation error.
 *
 * farm_galloc_free_local_or_defer() - farm_galloc_free_local(), except for
 * an object of a region expected for adoption. Until the adopter begins
 * the region's scan, the free is done in the object's header at once
 * (the scan, or a whole-cluster restart's rebuild, lists the slot):
 * returns 2, and the caller unlocks. While the scan runs it is freed
 * later: returns 1, the object's first word is marked
 * FARM_OBJHDR_FREE_PENDING (a whole-cluster restart before the free
 * frees the header), and the adopter stores @then (release) there once
 * the object is free, so the caller leaves the object locked and lets
 * that store unlock it. 0 when freed now (the caller
 * unlocks), or a negative code.
 */
int farm_galloc_block_info(farm_galloc *g, farm_gaddr a, uint32_t *info);
int farm_galloc_adopt_expect(farm_galloc *g, uint32_t region);
void farm_galloc_adopt_cancel(farm_galloc *g, uint32_t region);
int farm_galloc_adopt(farm_galloc *g, uint32_t region);
int farm_galloc_free_local_or_defer(farm_galloc *g, farm_loop *loop,
                                    farm_gaddr a, uint64_t then);

/*
 * farm_galloc_retire() - this machine stopped being primary of @region (a
 * new configuration gave it to another machine, whose allocator rebuilds
 * it by scan and owns its free slots; src/alloc/README.md "Retiring a
 * region"). Any thread, while the loops keep allocating; it may wait for
 * the adopter thread if that is rebuilding @region. Once it returns, no
 * allocation that starts afterwards, on any loop, returns an address in
 * @region (each loop's slab drops its blocks of it the next time it would
 * take a slot from one); no block and no pooled region of it is used;
 * farm_galloc_free_local(), _free_array_local() and _free_local_or_defer()
 * of its objects return -EREMOTE; an expected adoption of it is cancelled,
 * its deferred frees dropped (counted lost: the copy is discarded); and the
 * allocator writes nothing more in its memory. Calls that overlapped this
 * one may still have used it: discard the memory once every loop has run a
 * pass after the return (a farm_loop_post round trip). A later
 * farm_galloc_adopt_expect() / farm_galloc_adopt() of the same id (primary
 * here again, with a fresh copy at any base) rebuilds it as any promoted
 * region. Returns 0, -EINVAL, -ENOENT (not known to this allocator: not
 * in use here, pooled or expected; nothing to do).
 */
int farm_galloc_retire(farm_galloc *g, uint32_t region);

farm_blockalloc *farm_galloc_blockalloc(farm_galloc *g);
void farm_galloc_stats(farm_galloc *g, struct farm_galloc_stats *out);

#endif
