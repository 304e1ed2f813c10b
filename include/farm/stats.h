/*
 * libfarm: what an operator watches on a machine. Counters and
 * timestamps of failure detection and reconfiguration (leases, suspicions,
 * probes, the configurations taken), of the ZooKeeper membership, of the
 * last whole-cluster restart, and the progress of data recovery's copies.
 * They are read, never written: nothing here changes what the machine
 * does.
 *
 * Versioned and sized so that a program built against an older header
 * keeps working with a newer library: the caller sets @size to
 * sizeof(struct farm_node_stats) as it was compiled; the library fills
 * at most that many bytes, zeroes what it knows nothing of, and sets
 * @version to FARM_STATS_VERSION and @size to the bytes it filled. New
 * fields are only ever added at the end (and the version raised).
 *
 * Times are CLOCK_MONOTONIC nanoseconds (comparable between the processes
 * of one host), 0 when the event has not happened.
 */
#ifndef FARM_STATS_H
#define FARM_STATS_H

#include <farm/error.h>
#include <farm/node.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FARM_STATS_VERSION 1u
/* The last recovery steps kept (older ones are counted, not kept). */
#define FARM_STATS_STEPS 32u
/* The lease length a machine uses when its configuration names none. */
#define FARM_STATS_LEASE_DEFAULT_US 20000u

/* One step of failure handling, as this machine saw it. */
enum farm_stats_step_kind {
	FARM_STATS_STEP_SUSPECT = 1,     /* @machine suspected */
	FARM_STATS_STEP_REQUEST = 2,     /* probed: asked to remove @machine
	                                    (the first of @n) */
	FARM_STATS_STEP_WITHDRAWN = 3,   /* probed: everyone answered */
	FARM_STATS_STEP_NO_MAJORITY = 4, /* probed: @n answered, too few */
	FARM_STATS_STEP_CONFIG = 5,      /* configuration @config_id without
	                                    @machine (the first of @n) taken */
};

struct farm_stats_step {
	uint64_t t_ns;
	uint64_t config_id;
	uint32_t machine, n;
	uint32_t kind; /* enum farm_stats_step_kind */
	uint32_t pad_;
};

struct farm_node_stats {
	uint32_t size;    /* in: the caller's sizeof; out: bytes filled */
	uint32_t version; /* out: FARM_STATS_VERSION */

	/* The configuration in force here, its members, its CM. */
	uint64_t config_id;
	uint32_t members, cm;
	bool removed; /* this machine was removed from the cluster */

	/* Leases (both roles). */
	struct farm_stats_lease {
		uint64_t renewals;   /* grants that extended a lease */
		uint64_t late;       /* renewals after half a lease */
		uint64_t expiries;   /* leases that lapsed */
		uint64_t lost;       /* times this machine's own lapsed */
		uint64_t refused;    /* bad, stale or foreign messages */
		uint64_t max_gap_us; /* longest gap between renewals */
	} lease;

	/* Failure detection and the reconfigurations it asked for. */
	struct farm_stats_recovery {
		uint64_t suspicions, probes, requests, no_majority, withdrawn;
		uint64_t removed;      /* times it found itself removed */
		uint64_t t_suspect_ns; /* the last suspicion */
		uint64_t t_probed_ns;  /* its probe's end */
		uint64_t t_config_ns;  /* the first configuration without it */
		/* The last nsteps steps, oldest first; steps_total counts
		 * every one. */
		uint32_t nsteps;
		uint64_t steps_total;
		struct farm_stats_step steps[FARM_STATS_STEPS];
	} recovery;

	/* The ZooKeeper membership (zero without ZooKeeper). */
	struct farm_stats_membership {
		uint64_t views;         /* views delivered */
		uint64_t config_writes; /* configurations this machine wrote */
		uint64_t suspects;      /* machines it was asked to remove */
		uint64_t cas_conflicts; /* its writes that lost the race */
		/* The last configuration it wrote: when the write began and
		 * when ZooKeeper answered; its id. */
		uint64_t t_write_begin_ns, t_write_ns, write_config_id;
	} membership;

	/* The last whole-cluster restart from the data directories
	 * (restarted false: this machine started fresh). */
	struct farm_stats_restart {
		bool restarted;
		uint64_t regions, bytes, logs, records, txns, committed,
		        aborted, images, objects, unlocked, lost;
		/* Phases: adopting the regions, replaying the logs (reading
		 * them, deciding and applying, the allocator's rebuild), the
		 * barrier with the others; the whole. */
		uint64_t adopt_ns, replay_ns, logs_ns, apply_ns, alloc_ns,
		        barrier_ns, total_ns;
	} restart;
};

/*
 * farm_node_stats_get() - fill @out (whose size field the caller set, see
 * above). 0; -EINVAL (NULL, or a size below the first fields').
 */
FARM_API FARM_MUST_CHECK int farm_node_stats_get(farm_node *n,
                                                 struct farm_node_stats *out);

/* Data recovery: one region this machine copies as a new backup. */
enum farm_copy_state {
	FARM_COPY_COPYING = 0,
	FARM_COPY_CHECKING = 1, /* copied; every object read again */
	FARM_COPY_DONE = 2,     /* complete and checked: a replica */
	FARM_COPY_LOST = 3,     /* stopped: not a replica here any more, or
	                           no complete replica was left to copy */
};

struct farm_copy_stats {
	uint32_t region;
	uint32_t state;   /* enum farm_copy_state */
	uint64_t bytes;   /* READ from the primary, both passes */
	uint64_t local;   /* copied from this machine's own demoted copy */
	uint64_t reads;   /* READs that completed */
	uint64_t retries; /* READs failed, or stopped at a torn object */
	uint64_t t_start_ns, t_done_ns;
};

/*
 * farm_node_copies_get() - the regions this machine has copied or is
 * copying as a new backup, up to @max in @out. Returns how many there
 * are (possibly more than @max), 0 for NULL arguments.
 */
FARM_API unsigned
farm_node_copies_get(farm_node *n, struct farm_copy_stats *out, unsigned max);

#ifdef __cplusplus
}
#endif

#endif
