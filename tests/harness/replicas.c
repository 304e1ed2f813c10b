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

bool rp_replicated(struct held_report *const *r, uint64_t in, unsigned reps,
                   uint64_t no_primary, char *why, size_t len,
                   unsigned *nregions)
{
	why[0] = 0;
	*nregions = 0;
#define RP_IN(m) ((m) < 64 && ((in >> (m)) & 1))
	for (unsigned i = 0, first = 64; i < 64; i++) {
		if (!RP_IN(i))
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
	for (unsigned i = 0; i < 64; i++) {
		if (!RP_IN(i))
			continue;
		for (unsigned k = 0; k < r[i]->n; k++) {
			const struct rp_held *h = &r[i]->h[k];
			bool first = true; /* count each region once */
			for (unsigned j = 0; j < i && first; j++)
				for (unsigned q = 0; RP_IN(j) && q < r[j]->n;
				     q++)
					first &= r[j]->h[q].region != h->region;
			if (!first)
				continue;
			(*nregions)++;
			bool extra = h->extra != FARM_RING_NO_EXTRA;
			if (h->nreps != reps + extra ||
			    (extra && h->reps[reps] != h->extra)) {
				snprintf(why, len,
				         "region %#" PRIx32
				         " has %u replicas in machine %u's "
				         "configuration",
				         h->region, h->nreps, i);
				return false;
			}
			for (unsigned x = 0; x < h->nreps; x++) {
				uint32_t m = h->reps[x];
				const struct rp_held *at = NULL;
				for (unsigned q = 0; RP_IN(m) && q < r[m]->n;
				     q++)
					if (r[m]->h[q].region == h->region)
						at = &r[m]->h[q];
				if (!RP_IN(m) || !at || at->filling) {
					snprintf(why, len,
					         "region %#" PRIx32 ": replica "
					         "%" PRIu32 " %s",
					         h->region, m,
					         !RP_IN(m) ? "is not a member"
					         : !at     ? "holds no copy"
					               : "is still filling");
					return false;
				}
				if (x == 0 && m < 64 &&
				    ((no_primary >> m) & 1)) {
					snprintf(
					        why, len,
					        "region %#" PRIx32
					        ": machine %" PRIu32
					        " (joined late) is its primary",
					        h->region, m);
					return false;
				}
			}
		}
	}
#undef RP_IN
	return true;
}
