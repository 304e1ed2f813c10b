/*
 * Data recovery's chunk summaries and stale sources (copy.c describes the
 * whole; its opening comment, on the check pass and on a stale source, is
 * the argument). The check pass, and a first pass that has a stale
 * source, ask the region's primary for the summaries of a batch of 4 KiB
 * chunks (DIGEST, answered by copy_note.c), summarize this machine's side
 * by the same table (farm_txn_chunk_digest, copy_digest.c) and READ only
 * the chunks that differ or cannot be judged; the first pass takes the
 * others from the stale source. A stale source is held from
 * farm_txm_datarec_stale_add until the copy's first pass ends, the copy
 * is lost or its owner drops it, and given back once no step reads it
 * (farm_txn_dr_stale_reap, on the engine thread).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "txn/copy_digest.h"
#include "txn/txn_int.h"
#include "txn/copy_int.h"
#include "util/fault.h"
#include "util/log.h"

/* ---- chunk summaries (the check pass, a stale source's first pass) --- */

/*
 * The check pass, and a first pass with a stale source: which chunks of
 * the run s->lay to READ. The primary's summaries of a batch of chunks
 * come first (a DIGEST step; ours, of the copy in the check or of the
 * stale source in the first pass, are computed when they arrive,
 * digest_done); then only chunks whose summary differs, or that either
 * side could not judge, are READ. The first pass takes the others' slots
 * from the stale source (@s then a local step: s->src, s->stale); the
 * check skips them. Not for a copy from our demoted copy (local memory:
 * reading it is as cheap) nor a run inferred without a table (the
 * primary has none to summarize by). Returns 1 when @s is planned as a
 * DIGEST, -1 when g->next moved past equal chunks (plan again), else 0
 * with s->lim. Under dr->lock.
 */
int farm_txn_dr_check_plan(struct farm_datarec *dr, struct dr_step *s,
                           struct dr_reg *g)
{
	const uint64_t ch = FARM_DIGEST_CHUNK;
	s->lim = 0;
	bool stale = g->state == DR_COPY && g->stale;
	if ((g->state != DR_CHECK && !stale) || s->src || s->inferred ||
	    !dr->dg_max)
		return 0;
	uint64_t c = g->next / ch * ch;
	uint64_t end = g->dg_off + (uint64_t)g->dg_n * ch;
	if (!g->dg_n || c < g->dg_off || c >= end) {
		s->digest = true;
		s->pass = g->pass;
		s->off = c;
		s->len = (uint32_t)FARM_MIN((dr->region_size - c) / ch,
		                            (uint64_t)dr->dg_max);
		return 1;
	}
	unsigned i = (unsigned)((c - g->dg_off) / ch);
	if (stale && !((g->dg_differ >> i) & 1)) {
		unsigned j = i;
		while (j < g->dg_n && !((g->dg_differ >> j) & 1))
			j++;
		s->lim = g->dg_off + (uint64_t)j * ch;
		s->src = g->stale;
		s->stale = true;
		s->budget = (int64_t)dr->lp[s->loop].cap;
		return 0;
	}
	while (i < g->dg_n && !((g->dg_differ >> i) & 1))
		i++;
	if (g->dg_off + (uint64_t)i * ch > g->next) {
		g->next = g->dg_off + (uint64_t)i * ch; /* end if none */
		return -1;
	}
	unsigned j = i;
	while (j < g->dg_n && ((g->dg_differ >> j) & 1))
		j++;
	s->lim = g->dg_off + (uint64_t)j * ch;
	return 0;
}

/* The chunks of @s (a DIGEST) that must be READ, by the primary's answer
 * @ans (a word of chunks it could not judge, then a digest each): those
 * whose summary of our copy, by the table read in this pass, differs or
 * cannot be made. Equal summaries mean the copy holds the versions the
 * primary held when it answered, which a READ then would have brought
 * (src/recovery/README.md, "Same-id restart", why that is enough); what
 * the primary installed since reaches us as a COMMIT-BACKUP, as after a
 * READ. Under dr->lock. */
static uint64_t digest_differ(struct farm_datarec *dr, struct dr_reg *g,
                              const struct dr_step *s, const uint64_t *ans)
{
	uint64_t all = s->len >= 64 ? ~0ull : (1ull << s->len) - 1;
	enum farm_as_role role;
	farm_region *r = farm_as_local_region(dr->m->as, g->id, &role);
	if (!r || role != FARM_AS_BACKUP)
		return all; /* given up: step_done stops the copy */
	if (g->state == DR_COPY &&
	    FARM_FAULT_SWITCH(FARM_FP_DATAREC_STALE_EQUAL))
		return 0; /* testing: every chunk taken from the source */
	if (g->state == DR_CHECK &&
	    FARM_FAULT_SWITCH(FARM_FP_DATAREC_DIGEST_EQUAL))
		return 0; /* testing: every chunk taken as equal */
	/* The first pass summarizes its stale source, by the same table:
	 * equal, it holds the versions the primary held when it answered
	 * (src/recovery/README.md, "Same-id restart": why that is enough,
	 * the source holding committed images only). */
	const uint8_t *base =
	        g->state == DR_COPY ? g->stale : farm_region_base(r);
	uint64_t differ = ans[0] & all;
	for (unsigned i = 0; i < s->len; i++) {
		uint64_t d;
		if ((differ >> i) & 1)
			continue;
		int rc = farm_txn_chunk_digest(
		        g->meta, dr->meta_bytes, dr->region_size, base,
		        s->off + (uint64_t)i * FARM_DIGEST_CHUNK,
		        FARM_DIGEST_CHUNK, &d);
		if (rc || d != ans[1 + i])
			differ |= 1ull << i;
	}
	return differ;
}

/* The primary's summaries (or none: @status): the chunks to READ. With
 * none, every chunk of the batch is READ, as a check without summaries
 * would. */
static void digest_done(farm_loop *loop, void *ctx, int status,
                        const void *reply, uint32_t len)
{
	(void)loop;
	struct dr_step *s = ctx;
	struct farm_datarec *dr = s->dr;
	pthread_mutex_lock(&dr->lock);
	struct dr_reg *g = farm_txn_dr_reg_find(dr, s->region);
	if (g && (g->state == DR_CHECK || (g->state == DR_COPY && g->stale)) &&
	    g->pass == s->pass && g->have_meta) {
		uint64_t differ = s->len >= 64 ? ~0ull : (1ull << s->len) - 1;
		uint64_t ans[1 + DR_DIGEST_MAX];
		if (!status && len == 8ull * (1 + s->len)) {
			memcpy(ans, reply, len);
			differ = digest_differ(dr, g, s, ans);
			dr->lp[s->loop].credit -= len;
			g->summary += len;
		} else {
			g->last_err = status ? status : -EPROTO;
		}
		g->dg_off = s->off;
		g->dg_n = s->len;
		g->dg_differ = differ;
		g->equal += s->len - (unsigned)__builtin_popcountll(differ);
	}
	pthread_mutex_unlock(&dr->lock);
	farm_txn_dr_step_end(dr, s);
}

/* Ask the region's primary for the summaries of @s's chunks; this
 * machine being the primary (the ring's, with no one else to ask), every
 * chunk is READ as before. */
void farm_txn_dr_digest_post(farm_loop *loop, struct dr_step *s)
{
	farm_txm *m = s->dr->m;
	uint32_t reps[16];
	unsigned n = farm_as_replicas(m->as, s->region, reps);
	int rc = -EAGAIN;
	if (n && reps[0] != m->me) {
		struct digest_msg q = {.region = s->region,
		                       .n = s->len,
		                       .cfg = farm_as_config_id(m->as),
		                       .off = s->off};
		rc = farm_msg_call(loop, reps[0], s->loop, FARM_MSGT_TX_DIGEST,
		                   &q, sizeof(q), DR_RPC_TIMEOUT, digest_done,
		                   s);
	}
	if (rc)
		digest_done(loop, s, rc, NULL, 0);
}

/* A step from a stale source stopped at the object at @off: locked or
 * torn there (a kill cut an apply short, or a free slot's lock the
 * summary does not judge), and the source never changes. Its chunk is
 * READ instead. */
void farm_txn_dr_stale_stop(struct dr_reg *g, uint64_t off)
{
	uint64_t c = off / FARM_DIGEST_CHUNK * FARM_DIGEST_CHUNK;
	g->retries++;
	if (g->dg_n && c >= g->dg_off &&
	    c < g->dg_off + (uint64_t)g->dg_n * FARM_DIGEST_CHUNK)
		g->dg_differ |= 1ull << ((c - g->dg_off) / FARM_DIGEST_CHUNK);
}

/* ---- stale sources (under dr->lock) ---------------------------------- */

static struct dr_stale *stale_find(struct farm_datarec *dr, uint32_t id)
{
	for (unsigned i = 0; i < dr->nst; i++)
		if (dr->st[i].region == id)
			return &dr->st[i];
	return NULL;
}

/* @g's copy no longer takes from its stale source: the source is given
 * back once no step reads it (farm_txn_dr_stale_reap). */
void farm_txn_dr_stale_end(struct farm_datarec *dr, struct dr_reg *g)
{
	struct dr_stale *x = stale_find(dr, g->id);
	g->stale = NULL;
	if (x && !x->done) {
		x->done = true;
		pthread_cond_signal(&dr->cond); /* the engine reaps it */
	}
}

/* The stale source the first pass of @g may take chunks from, once the
 * primary's header and table (g->meta) are read: only one whose header
 * says the same region (magic, id, size) as the primary's, so memory of
 * another region, or never formatted, is never compared. */
const uint8_t *farm_txn_dr_stale_take(struct farm_datarec *dr, struct dr_reg *g)
{
	struct dr_stale *x = stale_find(dr, g->id);
	if (!x || x->done || g->state != DR_COPY)
		return NULL;
	if (memcmp(x->base, g->meta, 16)) {
		farm_warn("datarec: region %#" PRIx32 ": the stale source's "
		          "header is not the primary's; copied without it",
		          g->id);
		farm_txn_dr_stale_end(dr, g);
		return NULL;
	}
	return x->base;
}

/* Under dr->lock: give back one stale source no copy takes any more and
 * no step reads (a step's region is its loop's while it is busy; a copy
 * finds a source only in the table, so none takes it once it is out).
 * Whether there was one. */
bool farm_txn_dr_stale_reap(struct farm_datarec *dr)
{
	for (unsigned i = 0; i < dr->nst; i++) {
		struct dr_stale x = dr->st[i];
		if (!x.done)
			continue;
		bool read = false;
		for (unsigned t = 0; t < MAX_LOOPS; t++)
			read |= dr->lp[t].busy && dr->lp[t].region == x.region;
		if (read)
			continue;
		struct dr_reg *g = farm_txn_dr_reg_find(dr, x.region);
		if (g)
			g->stale = NULL;
		dr->st[i] = dr->st[--dr->nst];
		pthread_mutex_unlock(&dr->lock);
		if (x.release)
			x.release(x.ctx, x.region, x.base);
		pthread_mutex_lock(&dr->lock);
		return true;
	}
	return false;
}

/* ---- stale sources: their owner's calls (txm.h) --------------------- */

int farm_txm_datarec_stale_add(farm_txm *m, uint32_t region, const void *base,
                               farm_txm_stale_fn release, void *ctx)
{
	struct farm_datarec *dr = m ? m->dr : NULL;
	if (!dr)
		return -ENODEV;
	if (!base || region == 0 || region > FARM_REGION_ID_MAX)
		return -EINVAL;
	int rc = 0;
	pthread_mutex_lock(&dr->lock);
	if (stale_find(dr, region)) {
		rc = -EEXIST;
	} else if (dr->nst == dr->capst) {
		unsigned nc = dr->capst ? 2 * dr->capst : 16;
		struct dr_stale *n = realloc(dr->st, nc * sizeof(*n));
		if (n) {
			dr->st = n;
			dr->capst = nc;
		} else {
			rc = -ENOMEM;
		}
	}
	if (!rc)
		dr->st[dr->nst++] = (struct dr_stale){.region = region,
		                                      .base = base,
		                                      .release = release,
		                                      .ctx = ctx};
	pthread_mutex_unlock(&dr->lock);
	return rc;
}

void farm_txm_datarec_stale_drop(farm_txm *m, uint32_t region)
{
	struct farm_datarec *dr = m ? m->dr : NULL;
	if (!dr)
		return;
	pthread_mutex_lock(&dr->lock);
	struct dr_stale *x = stale_find(dr, region);
	if (x && !x->done) {
		struct dr_reg *g = farm_txn_dr_reg_find(dr, region);
		if (g)
			g->stale = NULL;
		x->done = true;
		/* Pairs with the engine's wait: it gives the source back. */
		pthread_cond_signal(&dr->cond);
	}
	pthread_mutex_unlock(&dr->lock);
}

unsigned farm_txm_datarec_stale_count(farm_txm *m)
{
	struct farm_datarec *dr = m ? m->dr : NULL;
	if (!dr)
		return 0;
	pthread_mutex_lock(&dr->lock);
	unsigned n = dr->nst;
	pthread_mutex_unlock(&dr->lock);
	return n;
}
