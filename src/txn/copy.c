/*
 * Data recovery (SOSP'15 section 5.5): a new backup copies a region from
 * its primary in the background, object by object, while commits go on.
 * The primary's side (telling backups to copy: COPY) is in copy_note.c.
 *
 * Who copies what. After a configuration change that removed machines,
 * the primary of every region (a promoted one included) tells each of the
 * region's backups to hold a copy (COPY, an RPC, repeated until
 * answered); one that holds a complete copy answers at once, a new one
 * (the ring put it after the lost replica) opens an empty copy
 * (farm_as_backup_open: a backup that is *filling*, never promotable) and
 * registers the region with this machine's copy engine. A COMMIT-BACKUP
 * truncated at the new backup before its copy is open (a coordinator
 * already lists it) is not applied: its objects are locked at the primary
 * from before the record was written until they are installed there, so
 * the copy's READs, which all come after the open, see them locked (and
 * read them again) or installed. Opening the copy on the loop for it
 * instead held up every client of that loop for the open (7-17 ms for
 * 64 MB) right after a recovery. The copying waits for COPY: the primary
 * may not have applied the configuration yet (it accepts LOCKs of newer
 * ones), and a READ must come after that (below).
 *
 * The copy. One engine thread per machine, parked while there is nothing
 * to copy, wakes every `datarec_interval_us`, gives each loop
 * `datarec_bytes` of credit per interval that passed (at most DR_BURST
 * intervals' worth held) and, when
 * the loop has no step in flight and credit left, one step: one one-sided
 * READ of at most its credit (or one object, when an object is larger)
 * from the primary's region, whose bytes are taken from the credit. A
 * loop that is late (a busy host) so catches up a little; the average
 * never passes the pace. The engine reads
 * the region's header and block table first (farm_alloc_block_layout:
 * where objects are; free blocks are skipped), then runs of objects. Each
 * object read is checked like a lock-free read (every line's version
 * equal to the header's) and must not be locked at all: a shared lock is
 * a single-machine commit under way or a new object not committed yet
 * (obj_claim_mark, object.h), which an abort would free again at the same
 * version, so a copy that took it would keep it allocated for good. A
 * torn or locked object ends the step there and is read again at the
 * next one, and after growing waits while it stays so (copy_retry.c:
 * a lock held for good at a primary, a coordinator's that died before
 * recovery released it, must not be read at the pace forever, yet the
 * copy goes on once it is released). A slab slot
 * that holds a small array holds several objects, each element with a
 * header of its own: each is checked and applied alone (apply_slot). A
 * whole object
 * is written into the copy with farm_txn_copy_apply: only when it is newer than
 * what the copy holds, under the copy's header lock, exactly as
 * COMMIT-BACKUP images are applied at truncation. So whichever comes
 * first, the READ of an object or the image of a commit to it, the copy
 * ends with the newest: an older READ never overwrites a newer applied
 * image, and a commit installed at the primary after the READ is applied
 * from its COMMIT-BACKUP.
 *
 * Why every commit the copy does not see reaches the new backup as a
 * COMMIT-BACKUP: a commit sends COMMIT-BACKUPs to the replicas of the
 * configuration it started in. One that started in the new configuration
 * (or later) lists the new backup. One that started earlier either
 * installed before the primary applied the new configuration, or holds
 * the object locked at the primary from before that until it installs or
 * aborts: the primary refuses LOCKs of older configurations once it has
 * the new one, and coordinators, single-machine commits included
 * (commit.c), abort a commit of an older configuration than theirs before
 * installing. The primary sends COPY only after applying the
 * configuration, so every READ of the copy comes later and sees such an
 * object either locked (read again later) or installed. Objects that
 * recovery locked at a promoted primary (undecided transactions) are
 * likewise read once decided.
 *
 * Two passes: the copy, then a check that compares every object's version
 * with the primary's (an object the copy holds older than the primary is
 * brought up to date and counted as `fixed`; one whose COMMIT-BACKUP is
 * not truncated yet is the usual case). Only after the check is the copy
 * complete (farm_as_backup_filled): a replica that counts. The check does
 * not READ every object again: it asks the primary for the summaries of
 * 4 KiB chunks (DIGEST, up to 64 chunks a request, copy_note.c;
 * farm_txn_chunk_digest: the offset, version and incarnation of every
 * allocated object whose slot starts in the chunk), summarizes its own
 * copy's chunks by the same table when the answer comes, and READs only
 * the chunks whose summaries differ or could not be made (an object
 * locked or torn on either side), as the first pass does. An equal
 * summary says the copy holds the versions the primary held when it
 * answered, what a READ then would have found; whatever the primary
 * installs later reaches the copy as a COMMIT-BACKUP, as after a READ.
 * Without an answer (a timeout, another configuration, this machine the
 * ring's primary) every chunk of the request is READ. A fresh copy so
 * READs its blocks about once instead of twice.
 *
 * Another failure during the copy: a new configuration resets the
 * primary's cached descriptor (farm_as_set_view), so the copy goes on
 * from wherever it was with the region's new primary, once promoted (its
 * lookups answer -EAGAIN until then). Everything copied so far came from
 * a replica that had every committed write, and commits of every later
 * configuration list this machine. A filling copy whose machine the ring
 * makes primary is never promoted (the region had no complete replica
 * left: it is reported lost), unless it can be finished from a demoted
 * copy (below); one that is no longer a replica stops, its copy given up
 * by the view that displaced it (as_view.c), so a later copy starts
 * from fresh memory.
 *
 * A copy growth demoted here (addrspace.h, farm_as_demoted_source). The
 * view that makes the grower primary of a region this machine was primary
 * of demotes our copy; where this machine stays a replica, its new copy is
 * held from that view on (the address space puts it in place of the
 * demoted one in the same step, so no COMMIT-BACKUP of the view finds the
 * region without a copy here and goes unapplied: the demoted copy never
 * gets them) and filled from the demoted one, a read of local memory,
 * unpaced (one step after another on the loop), not from the grower. That
 * is enough: the demoted copy holds every write committed before the
 * view once the older configuration's locks in it are released (the step
 * stops at a locked object and reads it again later, as at a primary:
 * those transactions install or undo there, farm_as_demoted_ptr, and no
 * new LOCK reaches it), and every later commit reaches the new copy as a
 * COMMIT-BACKUP (this machine has been a replica since; a view in which
 * it is not ends the demoted copy's use). An object left locked there
 * for DR_LOCAL_STUCK_NS (a second) is read from the primary instead
 * (never while this machine is the ring primary itself). A step does not
 * start before every loop here has taken the configuration that demoted
 * the copy (farm_txn_rec_taken), and stops at any lock, a shared one included
 * (an older single-machine commit may still install there). So the new copy is
 * complete within moments of the handoff, not after a paced copy (the growth
 * gap, src/recovery/README.md), and if the grower dies first the ring makes
 * this machine primary again with a copy it can still finish. Finished after
 * the new configuration's round began, it is not promoted by that round: the
 * engine tells the node (farm_txm_datarec_on_unserved), which asks for a round
 * (farm_membership_bump), and that round promotes it.
 *
 * A stale source (farm_txm_datarec_stale_add): memory that once held a
 * copy of the region, a same-id rejoin's old copy (src/recovery/README.md,
 * "Same-id restart"), never a replica. A first pass that has one (added
 * before the copy's table is read, its header the primary's) asks the
 * primary for chunk summaries as the check does, summarizes the source's
 * chunks by the same table, and takes the slots of equal chunks from the
 * source as it takes a demoted copy's (a local step, unpaced, objects
 * checked as a READ's and applied only when newer); other chunks are READ.
 * An equal summary says the source holds, unlocked and whole, the
 * versions the primary held when it answered: what a READ then would have
 * returned (a version names one committed image; a source holds committed
 * images only). Whatever the primary installs after its answer reaches
 * the copy as a COMMIT-BACKUP, the copy being open before the summary was
 * asked for. An object the step stops at in the source (locked or torn
 * for good) makes its chunk READ. The source is given back (its release)
 * once the copy's first pass ends or the copy is lost, or its owner drops
 * it, when no step reads it.
 *
 * A block table the layout code refuses (farm_alloc_block_layout) is
 * read again: at once at first (one written while READ settles), then
 * after growing waits; past a bound our demoted copy is given up for the
 * primary, and a copy from the primary stalls, reading its table once a
 * second until it reads whole (copy_retry.c has the bound and why).
 *
 * Region memory outside objects: the header and block table (block 0) are
 * copied raw, so the copy can be rebuilt by scan; allocator changes that
 * commits do not carry (a slot allocated by an aborted transaction and
 * freed again, free-list links) are not replicated, as for every backup.
 * A promoted primary's table describes its slab blocks only (allocrec.c):
 * a large array's run reads as free there and is not copied.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_testing.h"
#include "txn/copy_int.h"
#include "util/fault.h"
#include "util/log.h"

#ifdef FARM_FAULT_INJECTION
static _Atomic bool testing_skip_apply;
void farm_txn_testing_datarec_skip_apply(bool on)
{
	atomic_store(&testing_skip_apply, on);
}
static _Atomic bool testing_skip_first;
void farm_txn_testing_datarec_skip_first(bool on)
{
	atomic_store(&testing_skip_first, on);
}
static _Atomic bool testing_no_check;
void farm_txn_testing_datarec_no_check(bool on)
{
	atomic_store(&testing_no_check, on);
}
#endif

/* ---- the table of regions being copied (under dr->lock) --------------- */

struct dr_reg *farm_txn_dr_reg_find(struct farm_datarec *dr, uint32_t id)
{
	for (unsigned i = 0; i < dr->nr; i++)
		if (dr->r[i].id == id)
			return &dr->r[i];
	return NULL;
}

int farm_txn_dr_reg_add(struct farm_datarec *dr, uint32_t id, uint64_t cfg)
{
	struct dr_reg *g = farm_txn_dr_reg_find(dr, id);
	if (g && g->state < DR_DONE)
		return 0; /* being copied */
	uint8_t *meta;
	unsigned pass = 0;
	if (g) {
		/* Copied here before, and given up since (growth demoted or
		 * displaced this machine's copy; addrspace.h): a new copy,
		 * from the start, in the same record. What is reported is
		 * this copy's. */
		meta = g->meta;
		pass = g->pass + 1;
	} else {
		if (dr->nr == dr->capr) {
			unsigned nc = dr->capr ? 2 * dr->capr : 16;
			struct dr_reg *n = realloc(dr->r, nc * sizeof(*n));
			if (!n)
				return -ENOMEM;
			dr->r = n;
			dr->capr = nc;
		}
		if (!(meta = malloc(dr->meta_bytes)))
			return -ENOMEM;
		g = &dr->r[dr->nr++];
	}
	*g = (struct dr_reg){.id = id,
	                     .loop = id % dr->m->T,
	                     .state = DR_COPY,
	                     .cfg = cfg,
	                     .t_start = farm_now_ns(),
	                     .meta = meta,
	                     .pass = pass};
	pthread_cond_signal(&dr->cond);
	return 0;
}

/* Is this machine a backup (not the primary) of @region now? */
bool farm_txn_dr_new_backup_here(farm_txm *m, uint32_t region)
{
	uint32_t reps[16];
	unsigned n = farm_as_replicas(m->as, region, reps);
	for (unsigned i = 1; i < n && i < 16; i++)
		if (reps[i] == m->me)
			return true;
	return false;
}

#ifdef FARM_FAULT_INJECTION
/* Test-only: the point before a copy of a region growth demoted here is
 * opened on the primary's COPY (FARM_FP_DATAREC_FILL_DEMOTED). */
static void testing_demoted_open(farm_txm *m, uint32_t region)
{
	uint32_t d[64];
	unsigned n = farm_as_demoted_sources(m->as, d, 64);
	for (unsigned i = 0; i < n && i < 64; i++)
		if (d[i] == region) {
			FARM_FAULT_POINT(FARM_FP_DATAREC_FILL_DEMOTED);
			return;
		}
}
#endif

bool farm_txn_datarec_adopt(farm_txm *m, uint32_t region, bool start)
{
	return farm_txn_datarec_adopt_made(m, region, start, NULL);
}

bool farm_txn_datarec_adopt_made(farm_txm *m, uint32_t region, bool start,
                                 farm_region *made)
{
	struct farm_datarec *dr = m->dr;
	if (!dr || !farm_txn_dr_new_backup_here(m, region)) {
		farm_region_destroy(made);
		return false;
	}
#ifdef FARM_FAULT_INJECTION
	testing_demoted_open(m, region);
#endif
	int rc = made ? farm_as_backup_open_made(m->as, region, made)
	              : farm_as_backup_open(m->as, region);
	if (rc && rc != -EEXIST) {
		farm_err("datarec: cannot open a copy of region %#" PRIx32
		         ": %s",
		         region, farm_strerror(rc));
		return false;
	}
	if (!farm_as_backup_filling(m->as, region))
		return rc == -EEXIST; /* complete already */
	if (FARM_FAULT_SWITCH(FARM_FP_DATAREC_EXTRA_EARLY) &&
	    farm_as_extra(m->as, region) == m->me) {
		/* Testing: a growing machine's copy counted complete before
		 * anything is copied (tests/test_datarec.c --broken-grow). */
		(void)farm_as_backup_filled(m->as, region);
		return true;
	}
	if (!start)
		return true; /* COPY starts it */
	pthread_mutex_lock(&dr->lock);
	rc = farm_txn_dr_reg_add(dr, region, farm_as_config_id(m->as));
	pthread_mutex_unlock(&dr->lock);
	if (rc)
		farm_err("datarec: region %#" PRIx32 " not copied: %s", region,
		         farm_strerror(rc));
	return true;
}

bool farm_txn_datarec_skip_apply(farm_txm *m, uint32_t region)
{
#ifdef FARM_FAULT_INJECTION
	if (atomic_load(&testing_skip_first) && m->dr &&
	    farm_as_backup_filling(m->as, region)) {
		pthread_mutex_lock(&m->dr->lock);
		struct dr_reg *g = farm_txn_dr_reg_find(m->dr, region);
		bool first = g && g->state == DR_COPY;
		pthread_mutex_unlock(&m->dr->lock);
		return first;
	}
	return atomic_load(&testing_skip_apply) &&
	       farm_as_backup_filling(m->as, region);
#else
	(void)m;
	(void)region;
	return false;
#endif
}

/* ---- one step of a copy (on the region's loop) ----------------------- */

void farm_txn_dr_step_end(struct farm_datarec *dr, struct dr_step *s)
{
	pthread_mutex_lock(&dr->lock);
	dr->lp[s->loop].busy = false;
	pthread_mutex_unlock(&dr->lock);
	free(s);
}

/* Does our ring make this machine @region's primary? (Then no other
 * machine serves it to READ from.) */
static bool primary_here(farm_txm *m, uint32_t region)
{
	uint32_t reps[16];
	return farm_as_replicas(m->as, region, reps) && reps[0] == m->me;
}

/* The end of a pass: the check after the copy, then complete. */
static void pass_end(struct farm_datarec *dr, struct dr_reg *g)
{
	g->next = 0;
	g->pass++;
	g->dg_n = 0;
	g->have_meta = false;
	g->run.kind = FARM_LAYOUT_SKIP;
	g->probe_ok = false;
	bool check = true;
#ifdef FARM_FAULT_INJECTION
	/* Broken on purpose: no check either, or it would repair what the
	 * dropped records missed before the copy counts. A test of the
	 * first pass alone skips it too. */
	check = !atomic_load(&testing_skip_apply) &&
	        !atomic_load(&testing_no_check);
#endif
	/* The check compares the filling copy itself: a stale source
	 * serves the first pass only. */
	farm_txn_dr_stale_end(dr, g);
	if (g->state == DR_COPY && check) {
		g->state = DR_CHECK;
		return;
	}
	int rc = farm_as_backup_filled(dr->m->as, g->id);
	g->state = rc ? DR_LOST : DR_DONE;
	g->t_done = farm_now_ns();
	if (!rc && primary_here(dr->m, g->id)) {
		/* Our ring primary's copy, completed from our demoted one
		 * after its configuration's round began: a round promotes
		 * it (the engine asks, below). */
		dr->unserved = farm_as_config_id(dr->m->as);
		pthread_cond_signal(&dr->cond);
	}
	if (rc)
		farm_warn("datarec: region %#" PRIx32 " copied, but no longer "
		          "held here: %s",
		          g->id, farm_strerror(rc));
	else
		farm_info("datarec: region %#" PRIx32
		          " replicated here: %" PRIu64 " bytes read, %" PRIu64
		          " taken from this machine's "
		          "demoted copy and %" PRIu64 " from a stale one "
		          "in %.1f ms (%" PRIu64 " objects newer "
		          "at the check, %" PRIu64 " chunks equal by their "
		          "summaries, %" PRIu64 " bytes of them; %" PRIu64
		          " reads again, %" PRIu64 " of a bad block table)",
		          g->id, g->bytes, g->local, g->from_stale,
		          (double)(g->t_done - g->t_start) / 1e6, g->fixed,
		          g->equal, g->summary, g->retries, g->bad_total);
}

/*
 * One object of @lines lines read into @p, for the copy's @local: -1 when
 * the step must stop at it (locked or torn: read again later), else 0
 * (applied, or the copy's is as new).
 */
static int apply_obj(struct dr_reg *g, const struct dr_step *s, uint8_t *p,
                     uint8_t *local, unsigned lines)
{
	uint64_t v;
	memcpy(&v, p, 8);
	if ((v & OBJ_LOCK_MASK) == OBJ_LOCK_EXCL)
		return -1; /* being installed or recovered: later */
	/* A shared lock: a single-machine commit validating, or a new
	 * object not committed yet (obj_claim_mark), which an abort frees
	 * again at this same version: a copy that took it would keep it
	 * allocated for good (only newer versions are applied). In our
	 * demoted copy it may also be a single-machine commit of the older
	 * configuration that may still install there, and nothing sends us
	 * its images. Later, in every case: a commit's shared lock lasts
	 * until its COMMIT-BACKUPs are written. */
	if (v & OBJ_LOCK_MASK)
		return -1;
	uint16_t v16 = obj_v16(v & ~OBJ_LOCK_MASK);
	for (unsigned l = 1; l < lines; l++) {
		uint16_t x;
		memcpy(&x, p + 64u * l, 2);
		if (x != v16)
			return -1;
	}
	if (farm_txn_copy_apply(local, lines, p, false) &&
	    g->state == DR_CHECK && v)
		g->fixed++;
	return 0;
}

/*
 * One slot of @slot_lines lines read into @p: its object, or each element
 * of the array it holds. A small array (farm_alloc_array) fills part of
 * one slab slot: element 0's header records the element's lines, fewer
 * than the slot's, and every element's header carries element 0's
 * incarnation word (alloc/walk.c reads slots the same way). Each element
 * is an object of its own, with its own version, and one never written
 * since the copy began reaches us from this READ only. -1: stop here.
 */
static int apply_slot(struct dr_reg *g, const struct dr_step *s, uint8_t *p,
                      uint8_t *local, unsigned slot_lines)
{
	uint64_t w;
	memcpy(&w, p + 8, 8);
	unsigned lines = w ? farm_incarn_lines(w) : 1;
	if (lines >= slot_lines || !farm_incarn_allocated(w) ||
	    FARM_FAULT_SWITCH(FARM_FP_DATAREC_SLOT_FIRST))
		return apply_obj(g, s, p, local, FARM_MIN(lines, slot_lines));
	for (unsigned l = 0; l + lines <= slot_lines; l += lines) {
		uint64_t we;
		memcpy(&we, p + 64ull * l + 8, 8);
		if (l && we != w)
			continue; /* past the array's end */
		if (apply_obj(g, s, p + 64ull * l, local + 64ull * l, lines))
			return -1;
	}
	return 0;
}

/*
 * Apply the objects of a span read into @img (the run's slots from
 * s->off), in order, up to the first slot holding a torn or locked
 * object. Returns where the copy goes on.
 */
static uint64_t apply_span(struct farm_datarec *dr, struct dr_reg *g,
                           const struct dr_step *s, uint8_t *img,
                           uint8_t *local)
{
	const struct farm_alloc_layout *L = &s->lay;
	uint64_t off = s->off;
	while (off + L->slot_bytes <= s->off + s->len &&
	       !apply_slot(g, s, img + (off - s->off), local + off,
	                   (unsigned)(L->slot_bytes / 64)))
		off += L->slot_bytes;
	(void)dr;
	return off;
}

static void step_done(farm_loop *loop, void *ctx, int status);

/* The layout of block @b into s->lay: from the block table read in this
 * pass, else the run it lies in, else a probe's word. A table refused
 * there is read again (s->meta) or waited for (s->wait: copy_retry.c). The
 * probe serves a primary without a header only, whose copies were never given a
 * slab block's description (every commit that allocates gives one; a block
 * allocated after the table was read reads free there, not unknown); its
 * word cannot tell a small array's element from a slot (alloc.h,
 * farm_alloc_block_infer). Returns true when
 * @s must read something else first (the table again, or the block's
 * first line for a probe), false with s->lay set. Under dr->lock. */
static bool step_layout(struct farm_datarec *dr, struct dr_step *s,
                        struct dr_reg *g, uint32_t b)
{
	s->inferred = false;
	/* s->src here: the table was read from our demoted copy (a stale
	 * source's table is the primary's, and s->stale is clear). */
	bool bad =
	        FARM_FAULT_SWITCH(FARM_FP_DATAREC_BAD_TABLE) ||
	        (s->src && FARM_FAULT_SWITCH(FARM_FP_DATAREC_BAD_LOCAL_TABLE));
	int rc = bad ? FARM_ECORRUPT
	             : farm_alloc_block_layout(g->meta, dr->meta_bytes,
	                                       dr->region_size, b, &s->lay);
	if (rc) {
		/* Read it again, at once or after a wait, or give the
		 * source up (copy_retry.c). */
		g->have_meta = false;
		g->last_err = rc;
		bool local = s->src && !primary_here(dr->m, g->id);
		int v = farm_txn_dr_bad_table(dr, g, b, rc, local,
		                              farm_now_ns());
		s->meta = v == DR_BAD_NOW;
		s->wait = !s->meta;
		return true;
	}
	if (g->bad_n)
		farm_txn_dr_bad_settled(g, farm_now_ns());
	if (s->lay.kind != FARM_LAYOUT_UNKNOWN)
		return false;
	s->inferred = true;
	if (g->run.kind == FARM_LAYOUT_SLOTS && g->next >= g->run.run_off &&
	    g->next < g->run.run_off + g->run.run_len) {
		s->lay = g->run;
		return false;
	}
	if (!g->probe_ok || g->probe_block != b) {
		s->probe = true;
		s->off = (uint64_t)b * FARM_ALLOC_BLOCK;
		s->len = 64;
		return true;
	}
	g->probe_ok = false;
	rc = farm_alloc_block_infer(dr->region_size, b, g->probe_w, &s->lay);
	if (rc) {
		farm_warn("datarec: region %#" PRIx32 ": no layout for block "
		          "%" PRIu32 " (%s): skipped",
		          g->id, b, farm_strerror(rc));
		g->last_err = rc;
		s->lay.kind = FARM_LAYOUT_SKIP;
	}
	g->run = s->lay;
	g->inferred += s->lay.kind == FARM_LAYOUT_SLOTS;
	return false;
}

/* The block table's own block: copied raw from the image just read. */
static void step_copy_meta(struct farm_datarec *dr, const struct dr_reg *g)
{
	enum farm_as_role role;
	farm_region *r = farm_as_local_region(dr->m->as, g->id, &role);
	uint8_t *local = r ? farm_region_base(r) : NULL;
	if (local)
		memcpy(local, g->meta, dr->meta_bytes);
}

/* Plan the READ of run s->lay's slots from g->next, as many as the budget
 * takes (one at least). False when no slot of the run is left from there
 * (g->next moves past it). */
static bool step_plan_slots(struct dr_step *s, struct dr_reg *g)
{
	const struct farm_alloc_layout *L = &s->lay;
	uint64_t k = g->next <= L->run_off
	                     ? 0
	                     : (g->next - L->run_off + L->slot_bytes - 1) /
	                               L->slot_bytes;
	if (k >= L->nslots) {
		g->next = L->run_off + L->run_len;
		return false;
	}
	uint64_t per = (uint64_t)s->budget / L->slot_bytes;
	uint64_t o = L->run_off + k * L->slot_bytes;
	if (s->lim && o >= s->lim) {
		g->next = s->lim; /* no slot starts in the chunks to READ */
		return false;
	}
	if (per == 0)
		per = 1;
	if (per > L->nslots - k)
		per = L->nslots - k;
	if (s->lim && per > (s->lim - o + L->slot_bytes - 1) / L->slot_bytes)
		per = (s->lim - o + L->slot_bytes - 1) / L->slot_bytes;
	s->off = o;
	s->len = (uint32_t)(per * L->slot_bytes);
	g->next = s->off;
	return true;
}

/* Plan @s's next READ of @g: the block table, a probe, or slots. Skip
 * what holds no object, using the table read in this pass (blocks free
 * then were free at the configuration change too, so whatever is
 * allocated there later is committed with a COMMIT-BACKUP to us). False
 * at the region's end: the pass is over. Under dr->lock. */
static bool step_plan(struct farm_datarec *dr, struct dr_step *s,
                      struct dr_reg *g)
{
	s->meta = !g->have_meta;
	s->probe = false;
	s->digest = false;
	s->wait = false;
	s->off = 0;
	s->len = (uint32_t)dr->meta_bytes;
	int64_t budget = s->budget;
	while (!s->meta) {
		if (s->stale) { /* planned from a stale source, no slot left */
			s->stale = false;
			s->src = NULL;
			s->budget = budget;
		}
		if (g->next >= dr->region_size)
			return false;
		uint32_t b = (uint32_t)(g->next / FARM_ALLOC_BLOCK);
		if (step_layout(dr, s, g, b))
			return true;
		if (s->lay.kind == FARM_LAYOUT_SKIP ||
		    s->lay.kind == FARM_LAYOUT_META) {
			if (s->lay.kind == FARM_LAYOUT_META)
				step_copy_meta(dr, g);
			g->next = (uint64_t)(b + 1) * FARM_ALLOC_BLOCK;
			continue;
		}
		int cp = farm_txn_dr_check_plan(dr, s, g);
		if (cp > 0)
			return true;
		if (cp == 0 && step_plan_slots(s, g))
			return true;
	}
	return true;
}

/* The READ of @s could not be posted: counted against its region. */
static void step_post_failed(struct farm_datarec *dr, struct dr_step *s, int rc)
{
	pthread_mutex_lock(&dr->lock);
	struct dr_reg *g = farm_txn_dr_reg_find(dr, s->region);
	if (g) {
		g->retries++;
		g->last_err = rc;
	}
	pthread_mutex_unlock(&dr->lock);
	farm_txn_dr_step_end(dr, s);
}

/* Plan and post the next READ of region @s->region, or finish the pass. */
void farm_txn_dr_step_run(farm_loop *loop, void *ctx, int status)
{
	struct dr_step *s = ctx;
	struct farm_datarec *dr = s->dr;
	farm_txm *m = dr->m;
	if (status) {
		farm_txn_dr_step_end(dr, s);
		return;
	}
	pthread_mutex_lock(&dr->lock);
	struct dr_reg *g = farm_txn_dr_reg_find(dr, s->region);
	if (!g || g->state >= DR_DONE) {
		pthread_mutex_unlock(&dr->lock);
		farm_txn_dr_step_end(dr, s);
		return;
	}
	s->stale = false;
	s->src = g->remote ? NULL : farm_as_demoted_source(m->as, g->id);
	if (s->src && !farm_txn_rec_taken(m, g->cfg)) {
		/* Not before every loop here has taken the configuration
		 * that demoted the copy: a LOCK handler or a commit that saw
		 * the older one may still lock an object we would read. */
		pthread_mutex_unlock(&dr->lock);
		farm_txn_dr_step_end(dr, s);
		return;
	}
	if (s->src)
		s->budget = (int64_t)dr->lp[s->loop].cap;
	if (!step_plan(dr, s, g)) {
		pass_end(dr, g);
		pthread_mutex_unlock(&dr->lock);
		farm_txn_dr_step_end(dr, s);
		return;
	}
	pthread_mutex_unlock(&dr->lock);
	if (s->wait) { /* a bad table: the engine posts the re-read */
		farm_txn_dr_step_end(dr, s);
		return;
	}
	if (s->rerun && !s->src) {
		/* After stale chunks, a READ or DIGEST: the engine posts it
		 * within the loop's credit (planning again then finds it). */
		farm_txn_dr_step_end(dr, s);
		return;
	}
	if (s->digest) {
		farm_txn_dr_digest_post(loop, s);
		return;
	}
	if (s->src) {
		/* Our demoted copy stays mapped until the address space
		 * goes (addrspace.h), a stale source until
		 * farm_txn_dr_stale_reap finds no step reading it; their
		 * objects are checked as a READ's. */
		memcpy(dr->lp[s->loop].buf, s->src + s->off, s->len);
		step_done(loop, s, 0);
		return;
	}
	farm_gaddr a = farm_gaddr_make(s->region, s->off);
	int rc = farm_as_read(m->as, loop, a, dr->lp[s->loop].buf,
	                      dr->lp[s->loop].mr, s->len, step_done, s);
	if (rc)
		step_post_failed(dr, s, rc);
}

/* The slots of step @s read into @buf, applied to our copy; g->next moves
 * past what was applied. False when the step stopped at its first object
 * (read it again later, or READ it: farm_txn_dr_stale_stop) or the copy was
 * given up: no local step follows at once. Under dr->lock. */
static bool step_apply(struct farm_datarec *dr, struct dr_reg *g,
                       const struct dr_step *s, uint8_t *buf)
{
	enum farm_as_role role;
	farm_region *r = farm_as_local_region(dr->m->as, g->id, &role);
	if (!r || role != FARM_AS_BACKUP) {
		/* Given up (a view that displaced it): the copy stops. */
		g->state = r ? g->state : DR_LOST;
		return false;
	}
	uint64_t nx = apply_span(dr, g, s, buf, farm_region_base(r));
	bool on = nx != s->off;
	if (!on && s->stale) {
		/* Locked or torn in the source, for good: READ. */
		farm_txn_dr_stale_stop(g, nx);
	} else if (!on) {
		/* Read again, paced; our demoted copy given up for the
		 * primary past a bound (copy_retry.c). */
		farm_txn_dr_stuck(dr, g, nx,
		                  s->src && !primary_here(dr->m, g->id),
		                  farm_now_ns());
	} else if (g->stuck_n) {
		farm_txn_dr_stuck_settled(g, farm_now_ns());
	}
	g->next = nx < s->off + s->len ? nx : s->off + s->len;
	return on;
}

static void step_done(farm_loop *loop, void *ctx, int status)
{
	struct dr_step *s = ctx;
	struct farm_datarec *dr = s->dr;
	uint8_t *buf = dr->lp[s->loop].buf;
	bool again = false; /* a local step that got on: the next one now */
	pthread_mutex_lock(&dr->lock);
	struct dr_reg *g = farm_txn_dr_reg_find(dr, s->region);
	if (g && g->state < DR_DONE) {
		if (status) {
			g->retries++;
			g->last_err = status;
		} else {
			if (s->stale) {
				g->from_stale += s->len;
				again = true;
			} else if (s->src) {
				g->local += s->len;
				again = true;
			} else {
				dr->lp[s->loop].credit -= s->len;
				g->bytes += s->len;
				g->steps++;
			}
			if (s->meta) {
				memcpy(g->meta, buf, dr->meta_bytes);
				g->have_meta = true;
				g->run.kind = FARM_LAYOUT_SKIP;
				if (!s->src)
					g->stale =
					        farm_txn_dr_stale_take(dr, g);
			} else if (s->probe) {
				memcpy(&g->probe_w, buf + 8, 8);
				g->probe_block =
				        (uint32_t)(s->off / FARM_ALLOC_BLOCK);
				g->probe_ok = true;
			} else {
				again = step_apply(dr, g, s, buf) && again;
			}
		}
	}
	bool more = g && g->state < DR_DONE;
	again = again && more && !farm_txn_dr_held(dr, farm_now_ns()) &&
	        !dr->stop;
	pthread_mutex_unlock(&dr->lock);
	if (more && !status)
		FARM_FAULT_POINT(FARM_FP_DATAREC_STEP);
	/* Posted, not called: the loop serves its other work in between. */
	s->rerun = true;
	if (again && !farm_loop_post(loop, farm_txn_dr_step_run, s))
		return;
	farm_txn_dr_step_end(dr, s);
}
