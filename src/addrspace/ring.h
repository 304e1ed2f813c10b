/*
 * Consistent hashing of regions to machines: FaRM's one-hop DHT.
 *
 * Each machine is placed on each of k virtual rings at p points, the
 * positions being hashes of (machine id, ring, point). A region id belongs
 * to ring (id mod k) at position mix32(id); its replicas are the first r
 * distinct machines met walking the ring clockwise from that position, the
 * first being the primary. Every machine builds the same rings from the
 * same membership view: nothing here depends on pointers, time, random
 * seeds or the order the members were given in. Internal; not installed.
 *
 * Failure domains (farm_ring_build_domains): when machines name domains,
 * a region's replicas are, in this order,
 *   1. L: walking clockwise over every machine on the rings, members and
 *      departed ones alike, the first machine of each domain not met yet,
 *      until r are chosen; when fewer domains exist, L is filled with the
 *      next machines clockwise not in it (the fallback);
 *   2. the members of L, in L's order;
 *   3. when departed machines left L short, the next members clockwise
 *      whose domain is not one of L's, then the next other members
 *      clockwise.
 * L depends only on the machines ever placed and their domains, never on
 * which of them are still members (a late member that took a departed
 * machine's id is walked as that machine: farm_ring_machine.shadow), and
 * step 3 takes a prefix of one fixed order; so a machine's departure
 * removes it from every replica list and appends at the end, and a join
 * only appends: the survivors keep their order, and a region whose
 * primary left gets its first surviving backup as primary. (Picking, among
 * members only, the first machine of each unused domain would not: a
 * machine skipped because its domain was taken by the primary would move
 * in front of the surviving backups once the primary left.) A machine
 * without a domain (0) is a domain of its own; when no machine names one,
 * departed machines are ignored and placement is exactly the plain one.
 */
#ifndef FARM_ADDRSPACE_RING_H
#define FARM_ADDRSPACE_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FARM_RING_MAX_RINGS    16u
#define FARM_RING_MAX_POINTS   1024u
#define FARM_RING_MAX_REPLICAS 8u
#define FARM_RING_MAX_MACHINES 1024u
/* Defaults (docs/config.md): r = 3, k = 3 and 128 points per machine per
 * ring, which keeps every machine's share within 20% of even for 3 to 10
 * machines (tests/test_ring.c measures it). */
#define FARM_RING_DEFAULT_REPLICAS 3u
#define FARM_RING_DEFAULT_RINGS    3u
#define FARM_RING_DEFAULT_POINTS   128u

typedef struct farm_ring farm_ring;

struct farm_ring_attr {
	unsigned replicas; /* r: 1..FARM_RING_MAX_REPLICAS (0: default) */
	unsigned rings;    /* k: 1..FARM_RING_MAX_RINGS (0: default) */
	unsigned points;   /* p: 1..FARM_RING_MAX_POINTS (0: default) */
};

/*
 * farm_ring_build() - rings for the @n machines in @ids (any order,
 * distinct). Returns 0, -EINVAL (n == 0, duplicate ids, bad attributes)
 * or -ENOMEM. The replica count in use is min(r, n).
 */
int farm_ring_build(const uint32_t *ids, unsigned n,
                    const struct farm_ring_attr *attr, farm_ring **out);
void farm_ring_free(farm_ring *ring);

/* One machine for farm_ring_build_domains. */
struct farm_ring_machine {
	uint32_t id;
	uint32_t domain; /* failure domain; 0: none (a domain of its own) */
	bool departed;   /* no longer a member: on the rings (so the domain
	                    walk does not change), never a replica */
	/* A member that joined a running cluster with empty memory (issue
	 * 13, rejoin and growth): 0 if not; else its rank among such
	 * machines, in the order they joined (1 first). A late machine is
	 * never in the domain walk (L) and never a replica while the other
	 * members suffice: it only fills the replica lists the others leave
	 * short, after them, in rank order. So it never becomes a primary
	 * or a backup before a copy that exists, and a later joiner never
	 * comes before an earlier one. */
	uint32_t late;
	/* A late member whose id an earlier holder left while it was
	 * walked (a reused id; the configuration's "shadow" line): 0 if
	 * not; else that holder's domain. The walk (L) meets this machine's
	 * points, which are its id's, as it met the departed holder's: in
	 * that domain, never a replica through L. So the join of a reused
	 * id's new holder changes no list: it is only appended where a
	 * list is short, as any late machine. The shadow goes with growth:
	 * in its own target (placed as an ordinary member) it is walked as
	 * itself, in its own domain, which is how the configuration that
	 * takes it out of the late list (and drops the shadow) places it.
	 * Ignored on a departed or not late machine. */
	uint32_t shadow;
	/* A member on its way out (a graceful leave, src/recovery/README.md
	 * "Graceful leave"): placed as any member, so its lists do not
	 * change, and its successors (farm_ring_successors) fill copies
	 * after them. Never the grower. */
	bool leaving;
};
/*
 * farm_ring_build_domains() - rings for the @n machines in @ms (any order,
 * distinct ids, at least one not departed), placing replicas in distinct
 * domains (above). Same returns as farm_ring_build; the replica count in
 * use is min(r, members). farm_ring_build is this with no domains.
 */
int farm_ring_build_domains(const struct farm_ring_machine *ms, unsigned n,
                            const struct farm_ring_attr *attr, farm_ring **out);

/*
 * farm_ring_update() - farm_ring_build_domains for @ms, taking what it
 * can from @prev (NULL: a build), the rings of the previous view: the
 * same placement, to the last arc, as a build. Where no machine names a
 * domain and the sizes are unchanged, the points of the machines kept
 * are merged with the new ones', and only the arcs whose walk (ring.h's
 * steps) reaches a point of a machine that joined, left, became or
 * stopped being late, or the grower, are placed again: a join or leave
 * at 128 machines places a few percent of the arcs. Else it builds.
 * Same returns as farm_ring_build_domains.
 */
int farm_ring_update(const farm_ring *prev, const struct farm_ring_machine *ms,
                     unsigned n, const struct farm_ring_attr *attr,
                     farm_ring **out);
/* Do @a and @b place every region alike, through identical rings
 * (tests: an update against a build)? */
bool farm_ring_same(const farm_ring *a, const farm_ring *b);

unsigned farm_ring_nrings(const farm_ring *ring);
/* Replicas per region: min(r, machines). */
unsigned farm_ring_nreplicas(const farm_ring *ring);
unsigned farm_ring_nmachines(const farm_ring *ring);
bool farm_ring_has(const farm_ring *ring, uint32_t machine);

/* The ring and position a region id maps to. */
static inline unsigned farm_ring_of(const farm_ring *ring, uint32_t region);
static inline uint32_t farm_ring_pos(uint32_t region)
{
	/* A bijective 32-bit mix, so neighbouring ids land far apart. */
	uint32_t x = region;
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	x ^= x >> 16;
	return x;
}

/*
 * farm_ring_replicas() - the replicas of @region, primary first, into
 * @out (room for FARM_RING_MAX_REPLICAS). Returns how many (min(r, n)).
 */
unsigned farm_ring_replicas(const farm_ring *ring, uint32_t region,
                            uint32_t *out);
uint32_t farm_ring_primary(const farm_ring *ring, uint32_t region);

/*
 * Growth (the first step of FaRM's rebalancing on join):
 * the *grower* is the first late member in rank order (the earliest
 * joiner still a member). Its *target* is the regions whose replicas it
 * would be among were it an ordinary member (placed by the steps above
 * with it not late, the later joiners still late). Where it is in the
 * target and not a replica, it is the region's *extra* backup: a backup
 * beyond the configured count, listed after the replicas, so never
 * promoted while any of them lives. Commits send it their COMMIT-BACKUPs
 * and data recovery fills its copy as any new backup's, so it ends
 * holding a complete copy of its target. Later joiners get nothing until
 * it leaves (one machine grows at a time; the late list keeps rank
 * order). A departure keeps the grower in a target it was in (the
 * target is a placement, and departures only append to those), so a
 * copy it made never falls out of its lists and goes stale.
 * Once every copy of its target is complete (the primaries confirm it,
 * farm_as_grow_check), the configuration takes it out of the late list:
 * it is then placed as an ordinary member, a replica of exactly its
 * target, the primary of some of it, and the replica it displaces in each
 * region gives its copy up (addrspace.h, farm_as_demoted_ptr;
 * src/recovery/README.md, "Rejoin and growth").
 *
 * farm_ring_extra() - @region's extra backup, or FARM_RING_NO_EXTRA.
 * farm_ring_holders() - @region's replicas, primary first, then its
 * extra backup if any, then its successors if any (below), into @out
 * (room for FARM_RING_MAX_REPLICAS; an extra is given only where the
 * replicas leave room). Returns how many.
 */
#define FARM_RING_NO_EXTRA UINT32_MAX
uint32_t farm_ring_extra(const farm_ring *ring, uint32_t region);
unsigned farm_ring_holders(const farm_ring *ring, uint32_t region,
                           uint32_t *out);

/*
 * Graceful leave: where a region's replicas include a leaving member, its
 * *successors* are the machines that the placement with every leaving
 * member departed lists and the real one does not: the ones that
 * departure appends (the target is the replicas less the leavers, then
 * them, in that order). Listed by farm_ring_holders after the replicas
 * and the extra backup, given only where room is left (with r = 3 and
 * one leaver, always). Like an extra, a successor gets every
 * COMMIT-BACKUP and data recovery fills its copy, and it is never
 * promoted while a replica lives; once the leaver departs the replicas
 * are the old ones less it, then the successors, so no copy moves.
 *
 * farm_ring_successors() - @region's successors into @out (room for
 * FARM_RING_MAX_REPLICAS), in the target's order. Returns how many (0
 * when no replica of it is leaving).
 * farm_ring_nleaving() - how many members are leaving.
 */
unsigned farm_ring_successors(const farm_ring *ring, uint32_t region,
                              uint32_t *out);
unsigned farm_ring_nleaving(const farm_ring *ring);

/*
 * Chosen placement (FaRM's CM placing regions with knowledge of the
 * machines): a *pin* names a machine for one region. Where the machine
 * is an ordinary member of a placement (not departed, not late, not
 * leaving in the placement a leave fills), the region's list there is
 * the machine, then the ring's list for the region without it, cut to
 * the replica count: the pinned machine is the primary, the others keep
 * the ring's order and the last backup makes room. Elsewhere the pin is
 * ignored (the ring's list). So a pin keeps the ring's rules: a
 * departure (the pinned machine's included: the ring's list less it)
 * only removes and appends, a late join changes nothing, and a pin to
 * the grower is honored only in its target (farm_ring_extra: the grower
 * is the region's extra backup until it grows, then its primary, the
 * handoff of any growth). The configuration carries the pins
 * (src/coord: `pin` lines, chosen by the manager, coord/balance.c);
 * without any, placement is the ring's alone. Only without failure
 * domains (no machine names one): with domains a pin is ignored, since
 * the domain walk keeps departed machines, and the ring's list after a
 * pinned machine departs could put a backup of its domain behind one it
 * was ahead of (farm_ring_has_domains).
 * farm_ring_set_pins() - the pins of @ring (replacing any), @n entries
 * of @pins (any order, distinct nonzero regions, at most
 * FARM_RING_MAX_PINS). Every lookup below honors them, and
 * farm_ring_pick_region/near_region never give a pinned id. 0, -EINVAL
 * or -ENOMEM (the ring then has no pins).
 * farm_ring_pinned() - @region's pinned machine, or FARM_RING_NO_EXTRA.
 * farm_ring_grower() - the grower's id, or FARM_RING_NO_EXTRA.
 * farm_ring_target_primary() - @region's primary in the grower's target
 * placement (the grower placed as an ordinary member, pins honored);
 * farm_ring_primary when there is no grower.
 */
#define FARM_RING_MAX_PINS 1024u
struct farm_ring_pin {
	uint32_t region;
	uint32_t machine;
};
int farm_ring_set_pins(farm_ring *ring, const struct farm_ring_pin *pins,
                       unsigned n);
uint32_t farm_ring_pinned(const farm_ring *ring, uint32_t region);
uint32_t farm_ring_grower(const farm_ring *ring);
bool farm_ring_has_domains(const farm_ring *ring);
uint32_t farm_ring_target_primary(const farm_ring *ring, uint32_t region);

/*
 * farm_ring_pick_region() - a region id whose primary is @machine, on a
 * ring chosen from @seed, that @taken (may be NULL) does not reject.
 * Tries at most @max_tries random ids (0: 64 * machines). Returns 0 and
 * sets *out, -ENOENT when @machine is not on the rings, -EAGAIN when no
 * id was found within the tries.
 */
int farm_ring_pick_region(const farm_ring *ring, uint32_t machine,
                          uint64_t *seed, bool (*taken)(void *, uint32_t),
                          void *ctx, unsigned max_tries, uint32_t *out);

/*
 * farm_ring_near_region() - a region id on the same ring as @near, whose
 * primary is @machine, as close after @near's position as possible; for
 * allocations that want to be near an existing region. Same returns as
 * farm_ring_pick_region.
 */
int farm_ring_near_region(const farm_ring *ring, uint32_t machine,
                          uint32_t near, bool (*taken)(void *, uint32_t),
                          void *ctx, unsigned max_tries, uint32_t *out);

/*
 * farm_ring_shares() - each machine's exact share of the region-id space
 * as primary and as a backup, averaged over the rings (fractions of 1;
 * primary shares sum to 1, backup shares to nreplicas - 1). @ids receives
 * the machines in ascending order; arrays hold farm_ring_nmachines().
 */
void farm_ring_shares(const farm_ring *ring, uint32_t *ids, double *primary,
                      double *backup);

/* Internal, for the inline above. */
unsigned farm_ring_nrings_(const farm_ring *ring);
static inline unsigned farm_ring_of(const farm_ring *ring, uint32_t region)
{
	return region % farm_ring_nrings_(ring);
}

#endif
