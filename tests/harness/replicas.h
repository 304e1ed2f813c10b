/*
 * Full replication, as the tests judge it (tests/test_datarec.c,
 * tests/campaign/): what a machine holds and copies (child side:
 * rp_held), and whether every region any machine holds is complete at
 * exactly the machines its ring names (parent side: rp_replicated).
 * Defined in replicas.c.
 */
#ifndef FARM_TESTS_REPLICAS_H
#define FARM_TESTS_REPLICAS_H

#include "txproc.h"

#include "addrspace/addrspace.h"

#define RP_MAXREG 64

struct rp_held {
	uint32_t region;
	int role;
	bool filling;
	unsigned nreps; /* the replicas, then the extra backup if any */
	uint32_t reps[FARM_RING_MAX_REPLICAS];
	uint32_t extra; /* FARM_RING_NO_EXTRA: none (ring.h, growth) */
};

/* What a machine holds, and its copies (data recovery). */
struct held_report {
	uint64_t config;
	unsigned n, ndr, threads;
	struct rp_held h[RP_MAXREG];
	struct farm_datarec_region dr[RP_MAXREG];
	uint32_t pace_bytes, pace_us;
	/* In the late list of the configuration in force (a machine that
	 * joined late and has not grown into an ordinary member yet). */
	bool late;
	/* The last recovery round: when it began and when its promoted
	 * regions became active (farm_txm_stats; 0: none yet). */
	uint64_t rec_t_config_ns, rec_t_active_ns;
	/* The configuration's farm_view.bump (a round a member asked for). */
	uint64_t bump;
};

/* Child: fill @r with what machine @c holds now. */
void rp_held(struct tx_child *c, struct held_report *r);

/* Does the machine of @r copy a region now (bytes read, not done)? */
bool rp_copying(const struct held_report *r);

/*
 * Parent: is every region any machine of @in (bit i: machine i, whose
 * report is @r[i]; ids below 64) holds complete at exactly its @reps
 * replicas and its extra backup if it has one (a late machine growing
 * into it: ring.h), each of them in @in, none still filling, and none of
 * the machines of @no_primary its primary, every report of the same
 * configuration? Fills @why when not, and counts the regions in
 * *@nregions. (Reports of different configurations prove nothing: a
 * machine still in the older one says it holds a copy the newer one has
 * it give up and copy again, as growth's demoted primary does.)
 */
bool rp_replicated(struct held_report *const *r, uint64_t in, unsigned reps,
                   uint64_t no_primary, char *why, size_t len,
                   unsigned *nregions);

#endif
