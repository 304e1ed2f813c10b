/*
 * Transaction-state recovery (SOSP'15 section 5.3, Figure 6), run when the
 * configuration loses machines: the node calls farm_txm_reconfigure() once
 * the new view is applied (the address space maps it and the previous one;
 * the fabric fenced the removed machines); every loop runs rec_loop_run().
 *
 * First a barrier (FaRM's NEW-CONFIG-ACK / NEW-CONFIG-COMMIT): every
 * loop of every survivor takes the new configuration id, after which its
 * coordinators no longer let a commit that started in an older
 * configuration reach COMMIT-PRIMARY (it aborts, retryably: commit.c).
 * Then the machine tells the decider (REC_APPLIED); when all survivors
 * have, the decider sends REC_GO. A COMMIT-BACKUP of an old commit that
 * can still commit has therefore landed before REC_GO, and one that lands
 * later belongs to a commit that will abort.
 *
 * Then, on each surviving machine, per loop t (owner of thread t's logs):
 *  1. Drain: process every record that has landed. The removed machines
 *     can write no more (fenced), so their logs are now final.
 *  2. Promote: the regions this machine held a backup copy of and is now
 *     primary of (farm_as_promotable) are still served by no one. Every
 *     COMMIT-BACKUP record for them not yet truncated is looked at: an
 *     aborted transaction's is skipped; a finished one's (its commit
 *     sequence is below the coordinator thread's low-water mark: it was
 *     decided, and not aborted, so committed) is applied; any other's
 *     objects are locked in the copy (lock recovery) and the transaction
 *     waits for a decision. When every loop has done this, the regions
 *     become primary (farm_as_promote): lock-free reads and LOCKs see the
 *     recovered locks, so nothing half-decided is visible.
 *  3. Decide, for transactions whose coordinator lives: ask it
 *     (REC_QUERY); it answers at once when it has decided, or when it
 *     does (commit at COMMIT-PRIMARY, abort at ABORT), or says the
 *     transaction finished (then its ABORT, if any, is in our log).
 *  4. Decide, for transactions of a removed coordinator: every survivor
 *     sends what its logs of that coordinator hold (REC_VOTE, one per
 *     transaction: LOCK held or refused, COMMIT-PRIMARY, ABORT, which
 *     regions its COMMIT-BACKUP covers), then REC_END with the highest
 *     low-water mark it saw. The decider (the configuration's CM) decides
 *     once every survivor's every loop has ended:
 *       abort    an ABORT, or a LOCK its primary refused;
 *       commit   a COMMIT-PRIMARY; or finished (sequence below the mark);
 *                or a COMMIT-BACKUP for every region it writes at every
 *                surviving backup of it in the configuration they were
 *                sent in (in their records; farm_as_replicas_at; the
 *                previous view when forgotten);
 *       abort    otherwise.
 *     A coordinator reports commit only once every COMMIT-BACKUP is
 *     durable, abort once its ABORTs landed: no reported outcome is ever
 *     reversed; committing needs every surviving backup to hold the
 *     images, so no replica is left without them.
 *     It sends REC_DECIDE per transaction and REC_DONE per log; survivors
 *     log each decision in their copy of the log (recover_decide.c), then
 *     install or unlock (old primaries from their LOCK records, promoted
 *     ones from the COMMIT-BACKUP), apply or skip their backup records,
 *     and answer the REC_DONE (DONE_ASK); once all have, a second REC_DONE
 *     has them empty the removed coordinator's log (a whole-cluster
 *     restart in between finds every decision a copy may hold); one that
 *     holds no LOCK of it (no primary, or its COMMIT-PRIMARY or ABORT
 *     processed before) installs nothing (rec_decided_unlocked). A newer
 *     configuration can supersede the round after some survivors did
 *     this and before others did: each survivor keeps the decisions it
 *     applied and votes them again in later rounds, the decider taking
 *     them over any record (recover_kept.c).
 *
 * Every message carries the configuration id; stale, malformed or
 * misdirected ones are refused, counted (rec_refused).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/txn_testing.h"
#include "txn/recover_int.h"
#include "txn/recover_wire.h"
#include "util/fault.h"
#include "util/log.h"

#define REC_RECOPY_MAX 64u /* copies given up in one round, copied again */

/* ---- helpers ----------------------------------------------------------- */

static void rregs(const uint8_t *rec, uint32_t *out, unsigned max, unsigned *n)
{
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	const struct rec_obj *o = robjs(rec);
	const uint8_t *p = rimgs(rec);
	for (unsigned i = 0; i < h.nobj; i++)
		p += 64ull * o[i].lines;
	*n = FARM_MIN((unsigned)h.nreg, max);
	memcpy(out, p, 4ull * *n);
}

/* A stale, malformed or misdirected recovery message: counted and said. */
void farm_txn_rec_refuse(farm_txm *m, const farm_msg_in *in, const char *what)
{
	farm_stat_add(&m->st.v[S_REC_REFUSED], 1);
	farm_warn("txn recovery: %s from machine %" PRIu32 " refused", what,
	          in->src_machine);
}

/* ---- the loops' part --------------------------------------------------- */

void farm_txn_rec_send_query(struct txloop *tl, uint32_t coord, uint64_t txid)
{
	struct rec_q q = {.cfg = atomic_load(&tl->m->rec.cfg), .txid = txid};
	int rc = farm_msg_send(tl->loop, coord, tl->t, FARM_MSGT_REC_QUERY, &q,
	                       sizeof(q));
	if (rc)
		farm_warn("txn recovery: cannot ask machine %" PRIu32
		          " about %#" PRIx64 ": %s",
		          coord, txid, farm_strerror(rc));
}

/* The buffers of one log's votes: the message, and the regions a vote
 * names (@regs: locked or written, @cbr: of its COMMIT-BACKUP's objects);
 * @mreg: the most regions one message carries. */
struct vote_bufs {
	uint8_t *buf;
	uint32_t *regs, *cbr;
	uint32_t mreg;
};

/* A LOCK record at @pos of @coord's log: held, or refused; a granted
 * LOCK settled by a later COMMIT-PRIMARY/ABORT says so itself. */
static uint32_t lock_vote_flags(struct txloop *tl, uint32_t coord, uint64_t pos,
                                uint64_t txid)
{
	bool held = false;
	for (struct lock_ent *e =
	             tl->locks[(txid ^ (txid >> 32)) % LOCK_BUCKETS];
	     e; e = e->next)
		held |= e->txid == txid;
	bool settled = false;
	struct rec_hdr h2;
	FOR_EACH_REC(tl, coord, pos2, rec2, h2)
	{
		(void)rec2;
		if (pos2 > pos && h2.txid == txid &&
		    (h2.type == REC_COMMIT_PRIMARY || h2.type == REC_ABORT))
			settled = true;
	}
	return held ? V_LOCK : settled ? 0 : V_REFUSED;
}

/* The distinct regions of a COMMIT-BACKUP record's objects into @cbr
 * (at most REC_MAX_REGS); returns how many. */
static unsigned cb_regions(const uint8_t *rec, const struct rec_hdr *h,
                           uint32_t *cbr)
{
	const struct rec_obj *o = robjs(rec);
	unsigned ncb = 0;
	for (unsigned i = 0; i < h->nobj && ncb < REC_MAX_REGS; i++) {
		uint32_t r = farm_gaddr_region(o[i].addr);
		unsigned k = 0;
		while (k < ncb && cbr[k] != r)
			k++;
		if (k == ncb)
			cbr[ncb++] = r;
	}
	return ncb;
}

/* Vote for the record @rec (header @h) at @pos of @coord's log and send
 * it to the decider. */
static void vote_send(struct txloop *tl, uint32_t coord, uint64_t pos,
                      const uint8_t *rec, const struct rec_hdr *h,
                      const struct vote_bufs *b)
{
	farm_txm *m = tl->m;
	struct rec_vote v = {.cfg = atomic_load(&m->rec.cfg),
	                     .txid = h->txid,
	                     .cseq = h->cseq,
	                     .coord = coord};
	unsigned nregs = 0, ncb = 0;
	if (h->type == REC_LOCK) {
		v.flags = lock_vote_flags(tl, coord, pos, h->txid);
		rregs(rec, b->regs, REC_MAX_REGS, &nregs);
	} else if (h->type == REC_COMMIT_BACKUP) {
		v.flags = V_CB;
		v.tcfg = h->cfg;
		rregs(rec, b->regs, REC_MAX_REGS, &nregs);
		ncb = cb_regions(rec, h, b->cbr);
	} else {
		v.flags = h->type == REC_ABORT ? V_ABORT : V_CP;
	}
	if (nregs + ncb > b->mreg) {
		farm_err("txn recovery: transaction %#" PRIx64
		         " writes too many regions to vote",
		         h->txid);
		nregs = ncb = 0;
		v.flags = V_ABORT; /* cannot be judged: see REC_MAX */
	}
	v.nregs = (uint16_t)nregs;
	v.ncb = (uint16_t)ncb;
	memcpy(b->buf, &v, sizeof(v));
	memcpy(b->buf + sizeof(v), b->regs, 4ull * nregs);
	memcpy(b->buf + sizeof(v) + 4ull * nregs, b->cbr, 4ull * ncb);
	int rc = farm_msg_send(tl->loop, m->rec.decider, 0, FARM_MSGT_REC_VOTE,
	                       b->buf,
	                       (uint32_t)(sizeof(v) + 4ull * (nregs + ncb)));
	if (rc)
		farm_warn("txn recovery: vote not sent: %s", farm_strerror(rc));
}

/* Records that take part in the vote. */
static bool votes(uint16_t type)
{
	return type == REC_LOCK || type == REC_COMMIT_BACKUP ||
	       type == REC_COMMIT_PRIMARY || type == REC_ABORT;
}

/* Step 4: what this loop's log of removed coordinator @coord holds. */
static void vote_scan(struct txloop *tl, uint32_t coord)
{
	farm_txm *m = tl->m;
	uint32_t mreg = farm_msg_max_payload(m->msg);
	mreg = mreg > sizeof(struct rec_vote)
	               ? (mreg - (uint32_t)sizeof(struct rec_vote)) / 4
	               : 0;
	struct vote_bufs b = {.mreg = FARM_MIN(mreg, 2 * REC_MAX_REGS)};
	b.buf = malloc(sizeof(struct rec_vote) + 4ull * b.mreg);
	b.regs = malloc(4ull * REC_MAX_REGS);
	b.cbr = malloc(4ull * REC_MAX_REGS);
	bool have = b.buf && b.regs && b.cbr;
	struct rec_hdr h;
	if (!have)
		farm_err("txn recovery: out of memory: no votes from loop %u "
		         "for machine %" PRIu32 " (its transactions abort)",
		         tl->t, coord);
	FOR_EACH_REC(tl, coord, pos, rec, h)
	{
		if (have && votes(h.type))
			vote_send(tl, coord, pos, rec, &h, &b);
	}
	free(b.buf);
	free(b.regs);
	free(b.cbr);
	/* Decisions this loop applied in a round superseded before it
	 * emptied the log (its LOCK records may read as refused now). */
	(void)farm_txn_rec_kept_vote(tl, coord, false);
	struct rec_end e = {.cfg = atomic_load(&m->rec.cfg),
	                    .lw = tl->r[coord].lw,
	                    .coord = coord,
	                    .thread = tl->t};
	int rc = farm_msg_send(tl->loop, m->rec.decider, 0, FARM_MSGT_REC_END,
	                       &e, sizeof(e));
	if (rc)
		farm_warn("txn recovery: end of votes not sent: %s",
		          farm_strerror(rc));
}

/* Steps 1, 2 and 4 on loop @tl, once every survivor took the
 * configuration (REC_GO). */
/* Every member's log told how far this loop's records are done (as the
 * lazy truncation would, half a log later): an idle coordinator's
 * finished commit is not kept into later configurations (txn_log.h,
 * farm_txn_truncate_all). */
static void rec_loop_truncate(struct txloop *tl)
{
	farm_txm *m = tl->m;
	if (FARM_FAULT_SWITCH(FARM_FP_TXN_KEEP_RECORDS))
		return;
	bool *live = malloc(m->M * sizeof(*live));
	if (!live)
		return; /* the lazy truncation still comes */
	pthread_mutex_lock(&m->rec.lock);
	memcpy(live, m->rec.member, m->M * sizeof(*live));
	pthread_mutex_unlock(&m->rec.lock);
	(void)farm_txn_truncate_all(tl, live);
	free(live);
}

static void rec_loop_run(struct txloop *tl)
{
	farm_txm *m = tl->m;
	/* 1. Drain. */
	while (farm_txn_poll(tl->loop, tl) > 0)
		;
	for (uint32_t c = 0; c < m->M; c++)
		if (reader_dead(m, c, &tl->r[c]))
			tl->r[c].fenced = true;
	/* 2. Promote: every log may hold COMMIT-BACKUPs for our regions. */
	unsigned n = atomic_load(&m->nready);
	pthread_mutex_lock(&m->rec.lock);
	for (unsigned i = 0; i < n; i++)
		farm_txn_rec_promote_scan(tl, m->ready_ids[i]);
	pthread_mutex_unlock(&m->rec.lock);
	/* 4. Votes for the removed coordinators' transactions; for a log
	 * emptied in an earlier round, the decisions applied then (another
	 * survivor may not have taken them before that round ended). */
	for (unsigned i = 0; i < n; i++) {
		uint32_t c = m->ready_ids[i];
		if (reader_dead(m, c, &tl->r[c]) && !tl->r[c].rec_done)
			vote_scan(tl, c);
		else
			(void)farm_txn_rec_kept_vote(tl, c, true);
	}
	/* 5. Truncation. */
	rec_loop_truncate(tl);
	if (atomic_fetch_add(&m->rec.scanned, 1) + 1 != m->T)
		return;
	unsigned np = 0, kept = 0, nrecopy = 0;
	uint32_t recopy[REC_RECOPY_MAX];
	pthread_mutex_lock(&m->rec.lock);
	for (unsigned i = 0; i < m->rec.npromo; i++) {
		uint32_t id = m->rec.promo[i];
		bool elig = i < m->rec.nelig;
		m->rec.promo[kept++] = id;
		/* Before it serves: its frees wait for adoption (galloc.h).
		 * A region of an earlier recovery (still listed) may be
		 * adopted already (2). */
		int ex = farm_galloc_adopt_expect(m->ga, id);
		/* Promoted: this round's (scanned as such by every loop), or
		 * one an earlier round promoted (farm_as_promote: 0). A
		 * copy that became promotable since the round began (a newer
		 * view, a copy completed) is not: that view's round, or the
		 * one data recovery asks for, promotes it after a scan. */
		enum farm_as_role role;
		bool primary = farm_as_local_region(m->as, id, &role) &&
		               role == FARM_AS_PRIMARY;
		if ((elig || primary ||
		     FARM_FAULT_SWITCH(FARM_FP_REC_STALE_PROMO)) &&
		    !farm_as_promote(m->as, id)) {
			farm_stat_add(&m->st.v[S_REC_PROMOTED], 1);
			np++;
			if (ex == 0 || ex == 1)
				farm_txn_rec_adopt_add(m, id);
		} else {
			if (ex == 1)
				farm_galloc_adopt_cancel(m->ga, id);
			/* Not ours to promote (a view since made another
			 * machine its primary: growth), and no recovered
			 * lock in it: whatever copy we hold is a plain
			 * backup's, kept. It leaves the list. */
			if (!farm_txn_rec_region_locked(m, id) &&
			    !FARM_FAULT_SWITCH(FARM_FP_REC_STALE_PROMO)) {
				kept--;
				farm_info("txn recovery: region %" PRIu32
				          " leaves the promotion list (not "
				          "this round's to promote; the copy "
				          "held here, if any, is kept)",
				          id);
				continue;
			}
			/* Our copy holds the locks promote_scan
			 * recovered, which nothing releases on a backup;
			 * it goes, and a new one is copied at once (every
			 * machine has taken this configuration: the
			 * primary's COPY for it may have come already). It
			 * leaves the list: no later round promotes it (or
			 * gives its new copy up again). Past REC_RECOPY_MAX
			 * in one round it stays listed for the next one,
			 * never given up without its new copy started. */
			if (nrecopy < REC_RECOPY_MAX &&
			    !farm_as_give_up(m->as, id)) {
				kept--;
				recopy[nrecopy++] = id;
			}
		}
	}
	m->rec.npromo = kept;
	m->rec.nelig = 0;
	if (np)
		FARM_FAULT_POINT(FARM_FP_REC_PROMOTED);
	farm_txn_rec_adopt_ready(m);
	/* Promoted: backups' truncation no longer touches them (role). */
	atomic_store(&m->rec.npromo_live, 0);
	pthread_mutex_unlock(&m->rec.lock);
	/* Outside the lock: opening a copy makes and registers a region. */
	for (unsigned i = 0; i < nrecopy; i++)
		(void)farm_txn_datarec_adopt(m, recopy[i], true);
	atomic_store(&m->rec.t_active, farm_now_ns());
	farm_info("txn recovery: configuration %" PRIu64
	          ": %u region(s) promoted",
	          (uint64_t)atomic_load(&m->rec.cfg), np);
}

/* Every loop of this machine has seen the configuration: tell the
 * decider (REC_APPLIED). */
static void rec_loop_apply(farm_loop *loop, void *ctx, int status)
{
	/* Cancelled (the loop's close): @ctx was freed by the detach. */
	if (status)
		return;
	struct txloop *tl = ctx;
	farm_txm *m = tl->m;
	/* Without memory for it, lock waits end at their deadline. */
	bool *removed = calloc(m->M, sizeof(*removed));
	pthread_mutex_lock(&m->rec.lock);
	for (uint32_t i = 0; removed && i < m->M; i++)
		removed[i] = is_removed(m, i);
	pthread_mutex_unlock(&m->rec.lock);
	if (removed)
		farm_txn_end_lock_waits(tl, removed);
	free(removed);
	if (atomic_fetch_add(&m->rec.applied, 1) + 1 != m->T)
		return;
	struct rec_end a = {.cfg = atomic_load(&m->rec.cfg)};
	int rc = farm_msg_send(loop, m->rec.decider, 0, FARM_MSGT_REC_APPLIED,
	                       &a, sizeof(a));
	if (rc)
		farm_warn("txn recovery: cannot tell the decider (machine "
		          "%" PRIu32 "): %s",
		          m->rec.decider, farm_strerror(rc));
}

/* The survivors @members and the @removed machines of configuration
 * @cfg into m->rec. Under rec.lock. */
static void rec_set_members(farm_txm *m, uint64_t cfg, const uint32_t *removed,
                            unsigned nremoved, const uint32_t *members,
                            unsigned nmembers)
{
	m->rec.nsurv = 0;
	memset(m->rec.member, 0, m->M * sizeof(*m->rec.member));
	for (unsigned i = 0; i < nmembers; i++)
		if (members[i] < m->M && !m->rec.member[members[i]]) {
			m->rec.member[members[i]] = true;
			m->rec.nsurv++;
		}
	for (unsigned i = 0; i < nremoved; i++)
		if (removed[i] < m->M && removed[i] != m->me)
			m->rec.gone[removed[i]] = cfg;
}

/* Regions still being promoted from an earlier configuration stay in the
 * list (their pending transactions refer to them): append them to @promo
 * (@np long, room for 4096). Returns the new length. Under rec.lock. */
static unsigned rec_keep_promoting(const farm_txm *m, uint32_t *promo,
                                   unsigned np)
{
	for (unsigned i = 0; i < m->rec.npromo && np < 4096; i++) {
		unsigned k = 0;
		while (k < np && promo[k] != m->rec.promo[i])
			k++;
		if (k == np)
			promo[np++] = m->rec.promo[i];
	}
	return np;
}

/* The decider's state is for one configuration. Under rec.lock. */
static void rec_reset_decider(farm_txm *m)
{
	for (unsigned i = 0; i < m->rec.nd; i++) {
		free(m->rec.d[i].regs);
		free(m->rec.d[i].cb);
	}
	m->rec.nd = 0;
	memset(m->rec.ends, 0, (size_t)m->M * m->T * sizeof(*m->rec.ends));
	memset(m->rec.dends, 0, (size_t)m->M * m->T * sizeof(*m->rec.dends));
	memset(m->rec.acks, 0, (size_t)m->M * m->T * sizeof(*m->rec.acks));
	memset(m->rec.maxlw, 0, (size_t)m->M * m->T * sizeof(*m->rec.maxlw));
}

/* Every loop applies the new configuration (rec_loop_apply); the first
 * error of a post. */
static int rec_post_loops(farm_txm *m)
{
	int rc = 0;
	/* The loops' table under rec.lock: a loop attaching or detaching on
	 * its own thread meanwhile (farm_txm_attach, txm_unpublish_loop)
	 * would otherwise be read half made, or after its close freed it
	 * (a post into a freed loop's inbox writes where its memory now
	 * belongs to something else). */
	pthread_mutex_lock(&m->rec.lock);
	for (unsigned t = 0; t < m->T; t++) {
		struct txloop *tl = m->loops[t];
		int r = tl ? farm_loop_post(tl->loop, rec_loop_apply, tl)
		           : -ENOENT;
		if (r && !rc)
			rc = r;
	}
	pthread_mutex_unlock(&m->rec.lock);
	return rc;
}

int farm_txm_reconfigure(farm_txm *m, uint64_t cfg, const uint32_t *removed,
                         unsigned nremoved, const uint32_t *members,
                         unsigned nmembers, uint32_t decider)
{
	if (!m || (nremoved && !removed) || !members || !nmembers ||
	    decider >= m->M)
		return -EINVAL;
	uint32_t *promo = malloc(sizeof(uint32_t) * 4096);
	if (!promo)
		return -ENOMEM;
	unsigned np = farm_as_promotable(m->as, promo, 4096);
	if (np > 4096) {
		free(promo);
		return -E2BIG;
	}
	unsigned nelig = np;
	pthread_mutex_lock(&m->rec.lock);
	if (cfg <= atomic_load(&m->rec.cfg)) {
		pthread_mutex_unlock(&m->rec.lock);
		free(promo);
		return -ESTALE;
	}
	m->rec.decider = decider;
	rec_set_members(m, cfg, removed, nremoved, members, nmembers);
	np = rec_keep_promoting(m, promo, np);
	free(m->rec.promo);
	m->rec.promo = promo;
	m->rec.npromo = np;
	m->rec.nelig = nelig;
	atomic_store(&m->rec.npromo_live, np);
	atomic_store(&m->rec.scanned, 0);
	atomic_store(&m->rec.applied, 0);
	m->rec.go_sent = false;
	rec_reset_decider(m);
	atomic_store(&m->rec.t_config, farm_now_ns());
	atomic_store(&m->rec.t_go, 0);
	atomic_store(&m->rec.t_active, 0);
	/* From here on this machine's coordinators stop older commits
	 * short of COMMIT-PRIMARY: pairs with their acquire of rec.cfg in
	 * commit.c (tx_step). */
	atomic_store(&m->rec.cfg, cfg);
	pthread_mutex_unlock(&m->rec.lock);
	farm_info("txn recovery: configuration %" PRIu64 ", %u removed, %u "
	          "region(s) to promote, decider %" PRIu32,
	          cfg, nremoved, np, decider);
	return rec_post_loops(m);
}

/* The decider: every member took the configuration? Then REC_GO. */
static void h_applied(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct rec_end a;
	if (in->len != sizeof(a) || in->src_machine >= m->M) {
		farm_txn_rec_refuse(m, in, "malformed recovery ack");
		return;
	}
	memcpy(&a, in->payload, sizeof(a));
	pthread_mutex_lock(&m->rec.lock);
	uint64_t cfg = atomic_load(&m->rec.cfg);
	if (a.cfg > m->rec.applied_from[in->src_machine])
		m->rec.applied_from[in->src_machine] = a.cfg;
	bool all = m->rec.decider == m->me && !m->rec.go_sent;
	for (uint32_t s = 0; all && s < m->M; s++)
		if (m->rec.member[s] && m->rec.applied_from[s] < cfg)
			all = false;
	if (all)
		m->rec.go_sent = true;
	pthread_mutex_unlock(&m->rec.lock);
	if (!all)
		return;
	struct rec_end go = {.cfg = cfg};
	for (uint32_t s = 0; s < m->M; s++)
		for (unsigned t = 0; m->rec.member[s] && t < m->T; t++)
			if (farm_msg_send(loop, s, (uint16_t)t,
			                  FARM_MSGT_REC_GO, &go, sizeof(go)))
				farm_warn("txn recovery: cannot start machine "
				          "%" PRIu32 "'s recovery",
				          s);
}

static void h_go(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct txloop *tl = loop_state(m, loop);
	struct rec_end go;
	if (!tl || in->len != sizeof(go)) {
		farm_txn_rec_refuse(m, in, "malformed recovery start");
		return;
	}
	memcpy(&go, in->payload, sizeof(go));
	if (go.cfg != atomic_load(&m->rec.cfg) ||
	    in->src_machine != m->rec.decider) {
		farm_txn_rec_refuse(m, in, "recovery start");
		return;
	}
	uint64_t zero = 0;
	atomic_compare_exchange_strong(&m->rec.t_go, &zero, farm_now_ns());
	rec_loop_run(tl);
}

int farm_txn_rec_init(farm_txm *m)
{
	/* Per machine id, sized by the ids this machine serves. */
	m->rec.gone = calloc(m->M, sizeof(*m->rec.gone));
	m->rec.inc = calloc(m->M, sizeof(*m->rec.inc));
	m->rec.member = calloc(m->M, sizeof(*m->rec.member));
	m->rec.applied_from = calloc(m->M, sizeof(*m->rec.applied_from));
	m->rec.ends = calloc((size_t)m->M * m->T, sizeof(*m->rec.ends));
	m->rec.dends = calloc((size_t)m->M * m->T, sizeof(*m->rec.dends));
	m->rec.acks = calloc((size_t)m->M * m->T, sizeof(*m->rec.acks));
	m->rec.maxlw = calloc((size_t)m->M * m->T, sizeof(*m->rec.maxlw));
	if (!m->rec.gone || !m->rec.inc || !m->rec.member ||
	    !m->rec.applied_from || !m->rec.ends || !m->rec.dends ||
	    !m->rec.acks || !m->rec.maxlw)
		return -ENOMEM;
	/* The decision's handlers first (recover_decide.c), then the
	 * barrier's. */
	int rc = farm_txn_rec_decide_init(m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_REC_APPLIED, h_applied,
		                     m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_REC_GO, h_go, m);
	return rc;
}

void farm_txn_rec_fini(farm_txm *m)
{
	for (unsigned i = 0; i < m->rec.nd; i++) {
		free(m->rec.d[i].regs);
		free(m->rec.d[i].cb);
	}
	free(m->rec.d);
	free(m->rec.promo);
	free(m->rec.rl);
	free(m->rec.adopt);
	free(m->rec.gone);
	free(m->rec.inc);
	free(m->rec.member);
	free(m->rec.applied_from);
	free(m->rec.ends);
	free(m->rec.dends);
	free(m->rec.acks);
	free(m->rec.maxlw);
	pthread_mutex_destroy(&m->rec.lock);
}

void farm_txn_rec_detach(struct txloop *tl)
{
	farm_txn_rec_kept_free(tl);
	while (tl->pend) {
		struct rec_pend *p = tl->pend;
		tl->pend = p->next;
		free(p->q);
		free(p->rec);
		free(p);
	}
}
