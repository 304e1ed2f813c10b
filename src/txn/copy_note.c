/*
 * Data recovery, the primary's side (copy.c describes the whole): after a
 * configuration change the primary of every region tells each of its
 * backups to hold a copy (COPY, repeated until answered), and a backup
 * answers it (farm_txn_dr_h_copy), registering the region with its engine.
 * The primary also answers a new backup's check pass with the summaries
 * of chunks of its copy (DIGEST, farm_txn_dr_h_digest).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "txn/copy_digest.h"
#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_testing.h"
#include "txn/copy_int.h"
#include "util/fault.h"
#include "util/log.h"

/* ---- telling new backups (the primary's side) ------------------------- */

static void note_done(farm_loop *loop, void *ctx, int status, const void *reply,
                      uint32_t len)
{
	(void)loop;
	(void)reply;
	(void)len;
	struct dr_note *key = ctx;
	farm_txm *m = *(farm_txm **)(key + 1);
	struct farm_datarec *dr = m->dr;
	pthread_mutex_lock(&dr->lock);
	for (unsigned i = 0; i < dr->nn; i++) {
		struct dr_note *n = &dr->nt[i];
		if (n->region != key->region || n->to != key->to ||
		    n->cfg != key->cfg)
			continue;
		n->inflight = false;
		/* Answered (opened, or a configuration that moved on): done.
		 * Not yet in the configuration, or no answer: again. */
		if (status == 0 || status == -ESTALE || status == -EINVAL)
			dr->nt[i] = dr->nt[--dr->nn];
		break;
	}
	pthread_mutex_unlock(&dr->lock);
	free(key);
}

static void note_send(farm_loop *loop, void *ctx, int status)
{
	struct dr_note *key = ctx;
	farm_txm *m = *(farm_txm **)(key + 1);
	int rc = status;
	if (!rc) {
		struct copy_msg q = {.region = key->region, .cfg = key->cfg};
		rc = farm_msg_call(loop, key->to, 0, FARM_MSGT_TX_COPY, &q,
		                   sizeof(q), DR_RPC_TIMEOUT, note_done, key);
	}
	if (rc)
		note_done(loop, key, rc == -ECANCELED ? -ESTALE : rc, NULL, 0);
	(void)m;
}

/* Post the notes due (under dr->lock, from the engine thread). */
void farm_txn_dr_notes_post(struct farm_datarec *dr, uint64_t now)
{
	farm_txm *m = dr->m;
	farm_loop *l0 = dr->lp[0].loop;
	if (!l0)
		return;
	for (unsigned i = 0; i < dr->nn; i++) {
		struct dr_note *n = &dr->nt[i];
		if (n->inflight || now - n->t_sent < DR_NOTE_EVERY)
			continue;
		struct dr_note *key = malloc(sizeof(*key) + sizeof(farm_txm *));
		if (!key)
			return;
		*key = *n;
		memcpy(key + 1, &m, sizeof(m));
		n->inflight = true;
		n->t_sent = now;
		if (farm_loop_post(l0, note_send, key)) {
			n->inflight = false;
			free(key);
		}
	}
}

/* The regions this machine holds, into a fresh array (*@n of them);
 * NULL without memory. */
static struct farm_as_held *held_regions(farm_as *as, unsigned *n)
{
	unsigned cap = 256;
	struct farm_as_held *h = NULL;
	for (;;) {
		free(h);
		h = malloc(cap * sizeof(*h));
		if (!h)
			return NULL;
		*n = farm_as_held(as, h, cap);
		if (*n <= cap)
			return h;
		cap = *n;
	}
}

/* Regions a view demoted here (growth) that this machine is still a
 * replica of: their new copy, held since that view (the address space
 * puts it in place of the demoted one), is filled from the demoted one
 * now, without waiting for the primary's COPY, so that it is complete
 * within moments of the demotion (a read of local memory, unpaced) rather
 * than after a paced copy, and can be finished even if that primary dies
 * first. */
static void dr_fill_demoted(farm_txm *m, struct farm_datarec *dr, uint64_t cfg)
{
	/* As many as there are: a large cluster demotes more than a fixed
	 * table would hold, and one left out would wait for a paced copy. */
	unsigned cap = 64, nd;
	uint32_t *dem = NULL;
	for (;;) {
		free(dem);
		if (!(dem = malloc(cap * sizeof(*dem)))) {
			farm_err("datarec: no memory to list demoted regions");
			return;
		}
		if ((nd = farm_as_demoted_sources(m->as, dem, cap)) <= cap)
			break;
		cap = nd;
	}
	if (nd)
		FARM_FAULT_POINT(FARM_FP_DATAREC_FILL_DEMOTED);
	for (unsigned i = 0; i < nd; i++) {
		int orc = farm_as_backup_open(m->as, dem[i]);
		if (orc && orc != -EEXIST) {
			farm_err("datarec: cannot open a copy of region "
			         "%#" PRIx32 ": %s",
			         dem[i], farm_strerror(orc));
			continue;
		}
		if (!farm_as_demoted_source(m->as, dem[i]))
			continue; /* complete, or not ours to fill */
		pthread_mutex_lock(&dr->lock);
		orc = farm_txn_dr_reg_add(dr, dem[i], cfg);
		pthread_mutex_unlock(&dr->lock);
		if (orc)
			farm_err("datarec: region %#" PRIx32 " not copied: %s",
			         dem[i], farm_strerror(orc));
	}
	free(dem);
}

/* Notes of older configurations go: the new one decides again. Under
 * dr->lock. */
static void dr_drop_old_notes(struct farm_datarec *dr, uint64_t cfg)
{
	for (unsigned i = 0; i < dr->nn;)
		if (dr->nt[i].cfg < cfg && !dr->nt[i].inflight)
			dr->nt[i] = dr->nt[--dr->nn];
		else
			i++;
}

/* Our copy of @region is still being filled and the view has replicas
 * @now (@nn of them, the primary first): is it still worth filling?
 * Under dr->lock. */
static void dr_judge_filling(farm_txm *m, struct farm_datarec *dr,
                             uint32_t region, const uint32_t *now, unsigned nn)
{
	struct dr_reg *g = farm_txn_dr_reg_find(dr, region);
	bool in = false;
	for (unsigned k = 1; k < nn; k++)
		in |= now[k] == m->me;
	if (!g || g->state >= DR_DONE)
		return;
	bool src = farm_as_demoted_source(m->as, region);
	if (src)
		g->remote = false; /* the view may need it */
	if (now[0] == m->me && src) {
		/* The primary that took the region from us (growth) is gone
		 * before our new copy was complete: it is finished from our
		 * demoted copy (no primary needed), and the next
		 * configuration's recovery promotes it. */
		farm_warn("datarec: region %#" PRIx32 ": this machine is its "
		          "primary again before its new copy is complete; "
		          "the copy is finished from the demoted one",
		          g->id);
	} else if (now[0] == m->me) {
		g->state = DR_LOST;
		farm_err("datarec: region %#" PRIx32 " has no complete "
		         "replica left: this machine's copy is incomplete "
		         "and is not promoted",
		         g->id);
	} else if (!in) {
		g->state = DR_LOST;
	}
}

/* Copies whose filling copy this machine no longer holds stop: a view
 * that no longer places it as a replica gave the copy up (growth
 * displaced it before it was complete: farm_as_set_view_placed), so
 * dr_judge_filling, which sees held copies only, never meets it. Under
 * dr->lock. */
static void dr_stop_forgotten(farm_txm *m, struct farm_datarec *dr)
{
	for (unsigned i = 0; i < dr->nr; i++) {
		struct dr_reg *g = &dr->r[i];
		if (g->state < DR_DONE &&
		    !farm_as_backup_filling(m->as, g->id)) {
			g->state = DR_LOST;
			farm_info("datarec: region %#" PRIx32 ": this machine "
			          "is no longer its replica; its copy stops "
			          "and is given up",
			          g->id);
		}
	}
}

/* As @region's primary, note a COPY to each of its backups @now[1..nn).
 * Every backup, not only those new since the last configuration: one
 * told by a primary that died since may never have opened its copy (a
 * complete one answers at once). With no previous view too: a machine
 * holds regions at its first view only when it restarted on its
 * directory (a whole-cluster restart), and a copy the restart cut off
 * (never in the manifest) must start again. Under dr->lock. */
static void dr_note_backups(struct farm_datarec *dr, uint32_t region,
                            const uint32_t *now, unsigned nn, uint64_t cfg)
{
	for (unsigned k = 1; k < nn; k++) {
		if (dr->nn == dr->capn) {
			unsigned nc = dr->capn ? 2 * dr->capn : 16;
			struct dr_note *x = realloc(dr->nt, nc * sizeof(*x));
			if (!x)
				return;
			dr->nt = x;
			dr->capn = nc;
		}
		dr->nt[dr->nn++] = (struct dr_note){
		        .region = region, .to = now[k], .cfg = cfg};
	}
}

void farm_txm_datarec_view(farm_txm *m)
{
	struct farm_datarec *dr = m ? m->dr : NULL;
	if (!dr)
		return;
	uint64_t cfg = farm_as_config_id(m->as);
	unsigned n;
	struct farm_as_held *h = held_regions(m->as, &n);
	if (!h)
		return;
	dr_fill_demoted(m, dr, cfg);
	pthread_mutex_lock(&dr->lock);
	dr_drop_old_notes(dr, cfg);
	dr_stop_forgotten(m, dr);
	for (unsigned i = 0; i < n; i++) {
		uint32_t now[16], prev[16];
		unsigned nn = farm_as_replicas(m->as, h[i].region, now);
		unsigned np = farm_as_prev_replicas(m->as, h[i].region, prev);
		if (!nn || nn > 16 || np > 16)
			continue;
		if (farm_as_backup_filling(m->as, h[i].region))
			dr_judge_filling(m, dr, h[i].region, now, nn);
		else if (now[0] == m->me)
			dr_note_backups(dr, h[i].region, now, nn, cfg);
	}
	pthread_cond_signal(&dr->cond);
	pthread_mutex_unlock(&dr->lock);
	free(h);
}

/* On the loop that took the COPY: answer it. */
static void dr_open_done(farm_loop *loop, void *ctx, int status)
{
	struct dr_open *o = ctx;
	if (!status) { /* else the loop closes: the primary asks again */
		int rc = o->rc ? farm_msg_reply_error(loop, &o->token, o->rc)
		               : farm_msg_reply(loop, &o->token, NULL, 0);
		if (rc)
			farm_warn("datarec: cannot answer machine %" PRIu32
			          ": %s",
			          o->token.machine, farm_strerror(rc));
	}
	free(o);
}

void farm_txn_dr_open_run(struct dr_open *o)
{
	farm_region *made = o->made;
	o->made = NULL;
	o->rc = farm_txn_datarec_adopt_made(o->m, o->region, true, made)
	                ? 0
	                : -ENOMEM;
	if (farm_loop_post(o->loop, dr_open_done, o)) {
		farm_warn("datarec: COPY of region %#" PRIx32 " not answered "
		          "(the primary asks again)",
		          o->region);
		free(o);
	}
}

/* A copy not held here yet is opened by the engine: making and
 * registering a region (farm_as_backup_open) took 7-17 ms a region on
 * the loop, and at the CM that loop also gathers the survivors' acks
 * before REC_GO, while every client of the loop waits. True when
 * handed over (answered later); false: open it here (held already, so
 * it is quick; no engine; no memory). */
static bool open_later(farm_txm *m, farm_loop *loop, const farm_msg_in *in,
                       uint32_t region)
{
	struct farm_datarec *dr = m->dr;
	enum farm_as_role role;
	if (!dr || farm_as_local_region(m->as, region, &role))
		return false;
	struct dr_open *o = calloc(1, sizeof(*o));
	if (!o)
		return false;
	*o = (struct dr_open){
	        .m = m, .loop = loop, .token = in->token, .region = region};
	pthread_mutex_lock(&dr->lock);
	bool run = dr->started && !dr->stop;
	if (run) {
		o->next = dr->opens;
		dr->opens = o;
		/* Pairs with the engine's wait on dr->cond. */
		pthread_cond_signal(&dr->cond);
	}
	pthread_mutex_unlock(&dr->lock);
	if (!run)
		free(o);
	return run;
}

/* COPY at the new backup: open the copy and start copying. */
void farm_txn_dr_h_copy(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct copy_msg q;
	int rc = 0;
	if (in->len != sizeof(q) || !in->token.call_id) {
		farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
		farm_warn("datarec: malformed COPY from machine %" PRIu32,
		          in->src_machine);
		if (in->token.call_id &&
		    farm_msg_reply_error(loop, &in->token, -EINVAL))
			farm_warn("datarec: cannot answer machine %" PRIu32,
			          in->src_machine);
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	uint64_t cfg = farm_as_config_id(m->as);
	uint32_t reps[16];
	unsigned n = farm_as_replicas(m->as, q.region, reps);
	if (q.region == 0 || q.region > FARM_REGION_ID_MAX)
		rc = -EINVAL;
	else if (q.cfg > cfg)
		rc = -EAGAIN; /* we have not applied it yet */
	else if (!n || reps[0] != in->src_machine ||
	         !farm_txn_dr_new_backup_here(m, q.region))
		rc = q.cfg < cfg ? -ESTALE : -EINVAL;
	else if (open_later(m, loop, in, q.region))
		return; /* the engine opens it; this loop answers then */
	else if (!farm_txn_datarec_adopt(m, q.region, true))
		rc = -ENOMEM;
	rc = rc ? farm_msg_reply_error(loop, &in->token, rc)
	        : farm_msg_reply(loop, &in->token, NULL, 0);
	if (rc) /* the primary asks again */
		farm_warn("datarec: cannot answer machine %" PRIu32 ": %s",
		          in->src_machine, farm_strerror(rc));
}

/* The answer to DIGEST @q into @out (a word of chunks not judged, then a
 * digest each), from this machine's live copy by its own block table, as
 * a READ of them would find them; -EAGAIN in another configuration than
 * the asker's, -EINVAL when this machine is not the region's primary. */
static int digest_answer(farm_txm *m, const struct digest_msg *q, uint64_t *out)
{
	const uint64_t ch = FARM_DIGEST_CHUNK;
	uint64_t size = farm_as_region_size(m->as);
	uint32_t reps[16];
	if (q->region == 0 || q->region > FARM_REGION_ID_MAX || !q->n ||
	    q->n > DR_DIGEST_MAX || q->off % ch || q->off >= size ||
	    q->n > (size - q->off) / ch)
		return -EINVAL;
	if (q->cfg != farm_as_config_id(m->as))
		return -EAGAIN;
	enum farm_as_role role;
	farm_region *r = farm_as_local_region(m->as, q->region, &role);
	if (!r || role != FARM_AS_PRIMARY ||
	    !farm_as_replicas(m->as, q->region, reps) || reps[0] != m->me)
		return -EINVAL;
	const uint8_t *base = farm_region_base(r);
	uint64_t meta_bytes = farm_alloc_meta_bytes(size);
	out[0] = 0;
	for (unsigned i = 0; i < q->n; i++)
		if (farm_txn_chunk_digest(base, meta_bytes, size, base,
		                          q->off + i * ch, ch, &out[1 + i])) {
			out[0] |= 1ull << i;
			out[1 + i] = 0;
		}
	return 0;
}

/* DIGEST at the primary: answered on the loop that took it (64 chunks'
 * headers at most). */
void farm_txn_dr_h_digest(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct digest_msg q = {0};
	uint64_t out[1 + DR_DIGEST_MAX];
	int rc = -EINVAL;
	if (in->len == sizeof(q) && in->token.call_id) {
		memcpy(&q, in->payload, sizeof(q));
		rc = digest_answer(m, &q, out);
	} else {
		farm_stat_add(&m->st.v[S_BAD_RECORDS], 1);
		farm_warn("datarec: malformed DIGEST from machine %" PRIu32,
		          in->src_machine);
		if (!in->token.call_id)
			return;
	}
	rc = rc ? farm_msg_reply_error(loop, &in->token, rc)
	        : farm_msg_reply(loop, &in->token, out,
	                         (uint32_t)(8 * (1 + q.n)));
	if (rc) /* the backup READs the chunks instead */
		farm_warn("datarec: cannot answer machine %" PRIu32 ": %s",
		          in->src_machine, farm_strerror(rc));
}
