/*
 * The public observability API (include/farm/stats.h): the layers' own
 * counters (recovery/recovery.h, coord/membership.h, node/restart.h,
 * txn/txm.h) copied field by field into the versioned public structures,
 * so the internal ones can change without breaking a program built
 * against an older header.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <farm/stats.h>

#include "coord/membership.h"
#include "node/node.h"
#include "node/restart.h"
#include "recovery/lease.h"
#include "recovery/recovery.h"
#include "txn/txm.h"

_Static_assert(FARM_STATS_STEPS == FARM_RECOVERY_STEPS,
               "the public step buffer mirrors recovery's");
_Static_assert(FARM_STATS_LEASE_DEFAULT_US == FARM_LEASE_DEFAULT_US,
               "the public default lease is the library's");
_Static_assert((int)FARM_STATS_STEP_CONFIG == (int)FARM_RSTEP_CONFIG &&
                       (int)FARM_STATS_STEP_SUSPECT == (int)FARM_RSTEP_SUSPECT,
               "the public step kinds are recovery's");
_Static_assert((int)FARM_COPY_DONE == (int)FARM_DATAREC_DONE &&
                       (int)FARM_COPY_LOST == (int)FARM_DATAREC_LOST,
               "the public copy states are data recovery's");

static void stats_recovery(farm_node *n, struct farm_node_stats *s)
{
	struct farm_recovery *rec = farm_node_recovery(n);
	if (!rec)
		return;
	struct farm_recovery_stats rs;
	farm_recovery_stats(rec, &rs);
	s->cm = rs.cm;
	s->lease.renewals = rs.lease.renewals;
	s->lease.late = rs.lease.late;
	s->lease.expiries = rs.lease.expiries;
	s->lease.lost = rs.lease.lost;
	s->lease.refused = rs.lease.refused;
	s->lease.max_gap_us = rs.lease.max_gap_us;
	s->recovery.suspicions = rs.suspicions;
	s->recovery.probes = rs.probes;
	s->recovery.requests = rs.requests;
	s->recovery.no_majority = rs.no_majority;
	s->recovery.withdrawn = rs.withdrawn;
	s->recovery.removed = rs.removed;
	s->recovery.t_suspect_ns = rs.t_suspect_ns;
	s->recovery.t_probed_ns = rs.t_probed_ns;
	s->recovery.t_config_ns = rs.t_config_ns;
	s->recovery.nsteps = rs.nsteps;
	s->recovery.steps_total = rs.steps_total;
	for (unsigned k = 0; k < rs.nsteps && k < FARM_STATS_STEPS; k++)
		s->recovery.steps[k] = (struct farm_stats_step){
		        .t_ns = rs.steps[k].t_ns,
		        .config_id = rs.steps[k].config_id,
		        .machine = rs.steps[k].machine,
		        .n = rs.steps[k].n,
		        .kind = rs.steps[k].kind};
}

static void stats_membership(farm_node *n, struct farm_node_stats *s)
{
	struct farm_membership *m = farm_node_membership(n);
	struct farm_membership_status ms;
	if (!m || farm_membership_status(m, &ms))
		return;
	s->membership.views = ms.views;
	s->membership.config_writes = ms.config_writes;
	s->membership.suspects = ms.suspects;
	s->membership.cas_conflicts = ms.cas_conflicts;
	s->membership.t_write_begin_ns = ms.t_write_begin_ns;
	s->membership.t_write_ns = ms.t_write_ns;
	s->membership.write_config_id = ms.write_config_id;
}

static void stats_restart(farm_node *n, struct farm_node_stats *s)
{
	struct farm_restart_stats r;
	memset(&r, 0, sizeof(r));
	farm_node_restart_stats(n, &r);
	s->restart.restarted = r.restarted;
	s->restart.regions = r.regions;
	s->restart.bytes = r.bytes;
	s->restart.logs = r.logs;
	s->restart.records = r.records;
	s->restart.txns = r.txns;
	s->restart.committed = r.committed;
	s->restart.aborted = r.aborted;
	s->restart.images = r.images;
	s->restart.objects = r.objects;
	s->restart.unlocked = r.unlocked;
	s->restart.lost = r.lost;
	s->restart.adopt_ns = r.adopt_ns;
	s->restart.replay_ns = r.replay_ns;
	s->restart.logs_ns = r.logs_ns;
	s->restart.apply_ns = r.apply_ns;
	s->restart.alloc_ns = r.alloc_ns;
	s->restart.barrier_ns = r.barrier_ns;
	s->restart.total_ns = r.total_ns;
}

/* The view (a few KiB: on the heap, not the caller's stack). */
static void stats_view(farm_node *n, struct farm_node_stats *s)
{
	struct farm_view *v = malloc(sizeof(*v));
	if (v && !farm_node_view(n, v))
		s->members = v->n;
	free(v);
}

int farm_node_stats_get(farm_node *n, struct farm_node_stats *out)
{
	if (!n || !out || out->size < offsetof(struct farm_node_stats, lease))
		return -EINVAL;
	size_t want = out->size;
	struct farm_node_stats *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->version = FARM_STATS_VERSION;
	s->config_id = farm_node_config_id(n);
	s->removed = farm_node_removed(n);
	stats_view(n, s);
	stats_recovery(n, s);
	stats_membership(n, s);
	stats_restart(n, s);
	size_t fill = want < sizeof(*s) ? want : sizeof(*s);
	s->size = (uint32_t)fill;
	memcpy(out, s, fill);
	free(s);
	return 0;
}

unsigned farm_node_copies_get(farm_node *n, struct farm_copy_stats *out,
                              unsigned max)
{
	farm_txm *m = n ? farm_node_txm(n) : NULL;
	if (!m)
		return 0;
	struct farm_datarec_region d[64];
	unsigned total = farm_txm_datarec_get(m, d, 64);
	for (unsigned i = 0; out && i < total && i < max && i < 64; i++)
		out[i] = (struct farm_copy_stats){.region = d[i].region,
		                                  .state = (uint32_t)d[i].state,
		                                  .bytes = d[i].bytes,
		                                  .local = d[i].local,
		                                  .reads = d[i].reads,
		                                  .retries = d[i].retries,
		                                  .t_start_ns = d[i].t_start_ns,
		                                  .t_done_ns = d[i].t_done_ns};
	return total;
}
