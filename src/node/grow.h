/*
 * Growth, the grower's side (src/recovery/README.md, "Rejoin and growth"):
 * while this machine is the grower (the first late member of the
 * configuration in force), find out when it holds a complete copy of every
 * region of its share, as the primaries confirm (farm_as_grow_check), and
 * then tell the membership (farm_membership_grown), whose manager makes it
 * an ordinary member in the next configuration: primary of its share.
 *
 * One thread, started on first use, parked while this machine is not the
 * grower; while it is, it asks on one of the node's loops, and again every
 * FARM_GROW_RETRY_MS until the answer is yes or another configuration
 * comes. Internal; not installed.
 */
#ifndef FARM_NODE_GROW_H
#define FARM_NODE_GROW_H

#include <stdint.h>

#include <farm/msg.h>

#include "addrspace/addrspace.h"
#include "coord/membership.h"

#define FARM_GROW_RETRY_MS 50

struct farm_grow;

/* Says the share is held in configuration @cfg (the node passes it on to
 * farm_membership_grown): 0, or an error (asked again later). */
typedef int (*farm_grow_tell_fn)(void *ctx, uint64_t cfg);

/* Asks on @loop. NULL with errno on failure. */
struct farm_grow *farm_grow_create(farm_as *as, farm_loop *loop, uint32_t me,
                                   farm_grow_tell_fn tell, void *ctx);
/*
 * farm_grow_view() - configuration @v is in force here (applied by the
 * address space): start asking when this machine is its grower, stop when
 * not. Any thread; returns at once.
 */
void farm_grow_view(struct farm_grow *g, const struct farm_view *v);

struct farm_grow_stats {
	uint64_t checks;   /* growth checks answered */
	uint64_t grown_at; /* the configuration this machine said it grew in */
};
void farm_grow_stats(struct farm_grow *g, struct farm_grow_stats *out);

/* Stops the thread (before the loops close). NULL is fine. */
void farm_grow_destroy(struct farm_grow *g);

#endif
