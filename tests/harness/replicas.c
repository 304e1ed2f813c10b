#include "replicas.h"

void rp_held(struct tx_child *c, struct held_report *r)
{
	farm_as *as = farm_node_as(c->np.node);
	struct farm_as_held hl[RP_MAXREG];
	memset(r, 0, sizeof(*r));
	r->config = farm_node_config_id(c->np.node);
	r->n = FARM_MIN(farm_as_held(as, hl, RP_MAXREG), RP_MAXREG);
	for (unsigned i = 0; i < r->n; i++) {
		struct rp_held *h = &r->h[i];
		h->region = hl[i].region;
		h->role = (int)hl[i].role;
		h->filling = farm_as_backup_filling(as, h->region);
		h->nreps = farm_as_replicas(as, h->region, h->reps);
		h->extra = farm_as_extra(as, h->region);
	}
	r->ndr = FARM_MIN(farm_txm_datarec_get(c->txm, r->dr, RP_MAXREG),
	                  RP_MAXREG);
	farm_txm_stats st;
	farm_txm_stats_get(c->txm, &st);
	r->rec_t_config_ns = st.rec_t_config_ns;
	r->rec_t_active_ns = st.rec_t_active_ns;
	farm_txm_datarec_pace(c->txm, &r->pace_bytes, &r->pace_us);
	struct farm_view *v = malloc(sizeof(*v));
	if (v && !farm_node_view(c->np.node, v)) {
		r->late = farm_ids_have(v->late, v->nlate, c->np.me);
		r->bump = v->bump;
	}
	free(v);
	r->threads = 1;
}

bool rp_copying(const struct held_report *r)
{
	for (unsigned k = 0; k < r->ndr; k++)
		if (r->dr[k].state < FARM_DATAREC_DONE && r->dr[k].bytes > 0)
			return true;
	return false;
}

static bool rp_in(uint64_t in, uint32_t m)
{
	return m < 64 && ((in >> m) & 1);
}

/* Every machine of @in in the same configuration (else @why). */
static bool same_config(struct held_report *const *r, uint64_t in, char *why,
                        size_t len)
{
	for (unsigned i = 0, first = 64; i < 64; i++) {
		if (!rp_in(in, i))
			continue;
		if (first == 64)
			first = i;
		if (r[i]->config != r[first]->config) {
			snprintf(why, len,
			         "machine %u is in configuration %" PRIu64
			         ", machine %u in %" PRIu64,
			         i, r[i]->config, first, r[first]->config);
			return false;
		}
	}
	return true;
}

/* Whether machine @i's held region @h is reported first by @i (no
 * machine of @in before it holds it): each region is counted once. */
static bool first_report(struct held_report *const *r, uint64_t in, unsigned i,
                         const struct rp_held *h)
{
	for (unsigned j = 0; j < i; j++)
		for (unsigned q = 0; rp_in(in, j) && q < r[j]->n; q++)
			if (r[j]->h[q].region == h->region)
				return false;
	return true;
}

/* Region @h as machine @i's configuration places it: @reps replicas (and
 * its extra one), each a member holding a complete copy, its primary not
 * a machine of @no_primary. */
static bool region_whole(struct held_report *const *r, uint64_t in,
                         unsigned reps, uint64_t no_primary, unsigned i,
                         const struct rp_held *h, char *why, size_t len)
{
	bool extra = h->extra != FARM_RING_NO_EXTRA;
	if (h->nreps != reps + extra || (extra && h->reps[reps] != h->extra)) {
		snprintf(why, len,
		         "region %#" PRIx32 " has %u replicas in machine %u's "
		         "configuration",
		         h->region, h->nreps, i);
		return false;
	}
	for (unsigned x = 0; x < h->nreps; x++) {
		uint32_t m = h->reps[x];
		const struct rp_held *at = NULL;
		for (unsigned q = 0; rp_in(in, m) && q < r[m]->n; q++)
			if (r[m]->h[q].region == h->region)
				at = &r[m]->h[q];
		if (!rp_in(in, m) || !at || at->filling) {
			snprintf(why, len,
			         "region %#" PRIx32 ": replica %" PRIu32 " %s",
			         h->region, m,
			         !rp_in(in, m) ? "is not a member"
			         : !at         ? "holds no copy"
			                       : "is still filling");
			return false;
		}
		if (x == 0 && rp_in(no_primary, m)) {
			snprintf(why, len,
			         "region %#" PRIx32 ": machine %" PRIu32
			         " (joined late) is its primary",
			         h->region, m);
			return false;
		}
	}
	return true;
}

bool rp_replicated(struct held_report *const *r, uint64_t in, unsigned reps,
                   uint64_t no_primary, char *why, size_t len,
                   unsigned *nregions)
{
	why[0] = 0;
	*nregions = 0;
	if (!same_config(r, in, why, len))
		return false;
	for (unsigned i = 0; i < 64; i++) {
		if (!rp_in(in, i))
			continue;
		for (unsigned k = 0; k < r[i]->n; k++) {
			const struct rp_held *h = &r[i]->h[k];
			if (!first_report(r, in, i, h))
				continue;
			(*nregions)++;
			if (!region_whole(r, in, reps, no_primary, i, h, why,
			                  len))
				return false;
		}
	}
	return true;
}
