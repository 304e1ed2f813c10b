/*
 * Recovery's failure detector and reconfiguration trigger (FaRM SOSP'15
 * sections 5.1-5.2, steps SUSPECT and PROBE of Figure 5).
 *
 * A machine runs one of these next to its membership. It holds the
 * leases (lease.h) of the current configuration. When a lease lapses or
 * the fabric reports a peer dead, its recovery thread probes every other
 * member of the configuration with a one-sided READ (farm_msg_probe, as
 * FaRM's CM does), and the suspects on the lease channel (a datagram
 * each, answered by their lease threads); both are bounded by two lease
 * lengths. When a majority of the configuration (itself included)
 * answered, it asks the membership to leave out every member that did not
 * answer (farm_membership_suspect); a suspect that answered is alive, so
 * the suspicion is withdrawn (the lapse was on this side: it was paused).
 * The membership's manager rule then makes the lowest live id that is not
 * suspected write configuration c+1 naming itself CM, with the versioned
 * compare-and-set; a machine in a minority never asks.
 *
 * A machine that finds itself left out of the configuration, or listed
 * as removed, or whose own lease lapsed, reports it (on_event): it must
 * stop acting as a member. The layers below learn of configurations only
 * through the view the node applies.
 *
 * Internal; not installed.
 */
#ifndef FARM_RECOVERY_RECOVERY_H
#define FARM_RECOVERY_RECOVERY_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/error.h>
#include <farm/msg.h>

#include "coord/membership.h"
#include "recovery/lease.h"

typedef struct farm_recovery farm_recovery;

enum farm_recovery_event {
	FARM_RECOVERY_REMOVED = 1,    /* this machine is not in the config */
	FARM_RECOVERY_LEASE_LOST = 2, /* its lease at the CM lapsed */
};

/* On the lease or membership thread: quick, no farm_recovery_* calls. */
typedef void (*farm_recovery_event_fn)(void *ctx, enum farm_recovery_event e,
                                       uint64_t config_id);

struct farm_recovery_attr {
	uint32_t self_id;
	uint32_t lease_us;               /* 0: FARM_LEASE_DEFAULT_US */
	const char *lease_bind;          /* NULL: 127.0.0.1 */
	bool no_realtime;                /* lease thread at normal priority */
	farm_recovery_event_fn on_event; /* may be NULL */
	void *ctx;
	_Atomic uint64_t *serve_word; /* farm_lease_attr.serve_word */
	/* The messaging whose farm_msg_probe READs the members that are not
	 * suspected. NULL: they are probed on the lease channel too. */
	farm_msg *msg;
	/* The fabric's death notices (farm_recovery_peer_dead) are exact:
	 * sent only once the machine's process is gone (shm's pidfd), never
	 * for one merely unreachable or paused. */
	bool exact_deaths;
};

/* What recovery did, in order (the timeline of FaRM's Figure 9 for a
 * benchmark: which suspicion led to which configuration). */
enum farm_recovery_step_kind {
	FARM_RSTEP_SUSPECT = 1,     /* @machine suspected (lapse or report) */
	FARM_RSTEP_REQUEST = 2,     /* probed: asked to remove @machine (the
	                               first of @n) */
	FARM_RSTEP_WITHDRAWN = 3,   /* probed: everyone answered */
	FARM_RSTEP_NO_MAJORITY = 4, /* probed: @n answered, not a majority */
	FARM_RSTEP_CONFIG = 5,      /* configuration @config_id without
	                               @machine (the first of @n) taken */
};
struct farm_recovery_step {
	uint64_t t_ns; /* CLOCK_MONOTONIC */
	uint64_t config_id;
	uint32_t machine, n;
	uint32_t kind; /* enum farm_recovery_step_kind */
};
#define FARM_RECOVERY_STEPS 32 /* the last ones kept */

/* Counters and the last reconfiguration's timeline (monotonic ns). */
struct farm_recovery_stats {
	struct farm_lease_stats lease;
	uint64_t suspicions;  /* machines suspected (lapse or report) */
	uint64_t probes;      /* probe rounds */
	uint64_t requests;    /* farm_membership_suspect calls */
	uint64_t no_majority; /* probes that found no majority */
	uint64_t withdrawn;   /* suspects that answered the probe */
	uint64_t read_probes; /* members probed by a one-sided READ (itself
	                         included, answered at once) */
	uint64_t read_silent; /* ... of which did not answer */
	uint64_t removed;     /* times this machine found itself removed */
	/* Suspicions dropped unprobed: the view in force leaves this
	 * machine out, so it judges none of its members. */
	uint64_t dropped;
	/* farm_recovery_lease_wait: lease lengths waited as the CM, and waits
	 * skipped because every removed machine was known dead. */
	uint64_t lease_waits;
	uint64_t lease_waits_skipped;
	uint64_t t_suspect_ns; /* last suspicion */
	uint64_t t_probed_ns;  /* its probe's end */
	uint64_t t_config_ns;  /* the first configuration without it */
	uint64_t config_id;    /* the configuration in force here */
	uint32_t cm;           /* its CM */
	/* The last nsteps (at most FARM_RECOVERY_STEPS) steps, oldest
	 * first; steps_total counts every one. */
	unsigned nsteps;
	uint64_t steps_total;
	struct farm_recovery_step steps[FARM_RECOVERY_STEPS];
};

int farm_recovery_open(const struct farm_recovery_attr *a,
                       farm_recovery **out) FARM_MUST_CHECK;
/* Stop the recovery thread: no more probes (which use the lease) or
 * requests to the membership. Before the membership is closed; views
 * may still come. NULL is fine; so is a second call. */
void farm_recovery_stop(farm_recovery *r);
/* After the membership is closed (no more views). NULL is fine. */
void farm_recovery_close(farm_recovery *r);
/* The lease address for this machine's card. */
const char *farm_recovery_lease_addr(const farm_recovery *r);
/* The membership to ask (set once, before the first view). */
void farm_recovery_set_membership(farm_recovery *r, struct farm_membership *m);
/*
 * farm_recovery_view() - a new configuration @v; @lease_addrs[i] is the
 * lease address from member i's card ("" when its card has none: that
 * member takes no part in leases). Starts the leases of @v. 0; -EINVAL;
 * -ESTALE (an older configuration).
 */
int farm_recovery_view(farm_recovery *r, const struct farm_view *v,
                       const char (*lease_addrs)[FARM_LEASE_ADDR_MAX]);
/* The fabric saw @machine die: a suspicion, as a lapsed lease. */
void farm_recovery_peer_dead(farm_recovery *r, uint32_t machine);
void farm_recovery_stats(farm_recovery *r, struct farm_recovery_stats *out);
/*
 * farm_recovery_all_dead() - whether every machine of @ids (those the
 * view just taken left out) is known dead: its process was gone (an
 * exact death notice) before that view was taken here, so it can no
 * longer act under a lease it may still hold. False without exact_deaths
 * or when any of them was only suspected (a lapse, a probe unanswered).
 */
bool farm_recovery_all_dead(farm_recovery *r, const uint32_t *ids, unsigned n);
/*
 * farm_recovery_lease_wait() - FaRM's lease wait before a configuration
 * that removed @ids is acted on, by its CM: the CM grants no lease outside
 * the configuration it has taken, so one lease length from here every
 * lease a removed machine held has expired (by the holder's clock first)
 * and it no longer acts as a member. Skipped when farm_recovery_all_dead
 * says a dead process could act under none. Counted in the stats.
 */
void farm_recovery_lease_wait(farm_recovery *r, const uint32_t *ids,
                              unsigned n);
/* farm_lease_hold on this machine's leases (the node, around a
 * whole-cluster restart). */
void farm_recovery_hold_leases(farm_recovery *r, bool on);
/* The lease module (tests mute it to wedge this machine). */
farm_lease *farm_recovery_lease(farm_recovery *r);

#endif
