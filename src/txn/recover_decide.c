/*
 * Transaction-state recovery, the decision (recover.c describes the whole
 * protocol): the coordinator's answers to promoted primaries (REC_QUERY,
 * step 3), the decider for transactions of removed coordinators (REC_VOTE
 * and REC_END, step 4), and the survivors' application of its decisions
 * (REC_DECIDE, REC_DONE).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/recover_wire.h"
#include "txn/recover_int.h"
#include "util/fault.h"
#include "util/log.h"

/* ---- the coordinator's answers ------------------------------------------ */

static void answer(struct txloop *tl, uint32_t to, uint16_t thread,
                   uint64_t cfg, uint64_t txid, uint32_t a)
{
	struct rec_q q = {.cfg = cfg, .txid = txid, .answer = a};
	int rc = farm_msg_send(tl->loop, to, thread, FARM_MSGT_REC_ANSWER, &q,
	                       sizeof(q));
	if (rc)
		farm_warn("txn recovery: cannot answer machine %" PRIu32 ": %s",
		          to, farm_strerror(rc));
}

/* @tx decided (commit at COMMIT-PRIMARY, abort at ABORT): its waiters
 * learn the outcome. Registered with the coordinator (farm_txn_on_decided). */
static void rec_decided(farm_tx *tx, bool commit)
{
	for (unsigned i = 0; i < tx->nwaiters; i++)
		answer(tx->tl, tx->waiters[i].machine, tx->waiters[i].thread,
		       tx->waiters[i].cfg, tx->id, commit ? A_COMMIT : A_ABORT);
	tx->nwaiters = 0;
}

static void h_query(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct txloop *tl = loop_state(m, loop);
	struct rec_q q;
	if (!tl || in->len != sizeof(q)) {
		farm_txn_rec_refuse(m, in, "malformed recovery query");
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	if (txid_machine(q.txid) != m->me || txid_thread(q.txid) != tl->t) {
		farm_txn_rec_refuse(m, in,
		                    "recovery query for another coordinator");
		return;
	}
	farm_tx *tx = tl->slots[txid_seq(q.txid) % TX_SLOTS];
	uint32_t a = A_FINISHED;
	if (tx && tx->id == q.txid) {
		switch (tx->ph) {
		case PH_PRIMARY: a = A_COMMIT; break;
		case PH_ABORT: a = A_ABORT; break;
		case PH_DONE: a = tx->outcome ? A_ABORT : A_COMMIT; break;
		default:
			if (tx->nwaiters < FARM_ARRAY_SIZE(tx->waiters)) {
				tx->waiters[tx->nwaiters++] =
				        (struct rec_waiter){
				                .machine = in->src_machine,
				                .thread = in->src_thread,
				                .cfg = q.cfg};
				return; /* answered when it decides */
			}
			a = 0; /* cannot wait: the asker asks again */
		}
	}
	answer(tl, in->src_machine, in->src_thread, q.cfg, q.txid, a);
}

static void h_answer(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct txloop *tl = loop_state(m, loop);
	struct rec_q q;
	if (!tl || in->len != sizeof(q)) {
		farm_txn_rec_refuse(m, in, "malformed recovery answer");
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	if (q.answer > A_FINISHED) {
		farm_txn_rec_refuse(m, in, "malformed recovery answer");
		return;
	}
	bool known = false;
	for (struct rec_pend *p = tl->pend; p; p = p->next)
		known |= p->txid == q.txid && p->coord == in->src_machine;
	if (!known) {
		farm_txn_rec_refuse(
		        m, in, "recovery answer for no pending transaction");
		return;
	}
	bool settled = false;
	for (struct rec_pend *p = tl->pend; p; p = p->next)
		settled |= p->txid == q.txid && p->settled;
	if (settled) { /* at the truncation of its log */
		farm_txn_rec_pend_decide(tl, q.txid, false);
		return;
	}
	if (q.answer == 0) {
		farm_txn_rec_send_query(tl, in->src_machine, q.txid);
		return;
	}
	if (q.answer == A_FINISHED) {
		/* Its ABORT, if any, landed before it finished: process it.
		 * If that truncates its COMMIT-BACKUP, the truncation settles
		 * it (farm_txn_rec_truncated); else the ABORT is still known.
		 */
		while (farm_txn_poll(loop, tl) > 0)
			;
		q.answer = farm_txn_aborted(tl, q.txid) ? A_ABORT : A_COMMIT;
	}
	farm_txn_rec_pend_decide(tl, q.txid, q.answer == A_COMMIT);
}

/* ---- the decider --------------------------------------------------------- */

static struct rec_txn *dec_find(farm_txm *m, uint64_t txid)
{
	for (unsigned i = 0; i < m->rec.nd; i++)
		if (m->rec.d[i].txid == txid)
			return &m->rec.d[i];
	if (m->rec.nd == m->rec.capd) {
		unsigned nc = m->rec.capd ? 2 * m->rec.capd : 64;
		struct rec_txn *nd = realloc(m->rec.d, nc * sizeof(*nd));
		if (!nd)
			return NULL;
		m->rec.d = nd;
		m->rec.capd = nc;
	}
	struct rec_txn *t = &m->rec.d[m->rec.nd++];
	memset(t, 0, sizeof(*t));
	t->txid = txid;
	return t;
}

static void h_vote(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop;
	farm_txm *m = arg;
	struct rec_vote v;
	if (in->len < sizeof(v)) {
		farm_txn_rec_refuse(m, in, "malformed recovery vote");
		return;
	}
	memcpy(&v, in->payload, sizeof(v));
	if (v.cfg != atomic_load(&m->rec.cfg) || m->rec.decider != m->me ||
	    !ever_removed(m, v.coord) || txid_machine(v.txid) != v.coord ||
	    txid_thread(v.txid) >= m->T || v.nregs > REC_MAX_REGS ||
	    v.ncb > REC_MAX_REGS ||
	    in->len != sizeof(v) + 4ull * (v.nregs + v.ncb) ||
	    in->src_machine >= m->M || is_removed(m, in->src_machine)) {
		farm_txn_rec_refuse(m, in, "recovery vote");
		return;
	}
	pthread_mutex_lock(&m->rec.lock);
	struct rec_txn *t = dec_find(m, v.txid);
	if (!t) {
		pthread_mutex_unlock(&m->rec.lock);
		farm_err("txn recovery: out of memory for votes");
		return;
	}
	const uint8_t *p = (const uint8_t *)in->payload + sizeof(v);
	t->flags |= v.flags;
	if (v.cseq)
		t->cseq = v.cseq;
	if ((v.flags & V_CB) && v.tcfg && !t->tcfg)
		t->tcfg = v.tcfg;
	if (v.nregs && !t->nregs) {
		t->regs = malloc(4ull * v.nregs);
		if (t->regs) {
			memcpy(t->regs, p, 4ull * v.nregs);
			t->nregs = v.nregs;
		}
	}
	p += 4ull * v.nregs;
	for (unsigned i = 0; i < v.ncb; i++) {
		uint32_t r;
		memcpy(&r, p + 4ull * i, 4);
		struct rec_cb *nc =
		        realloc(t->cb, (t->ncb + 1) * sizeof(*t->cb));
		if (!nc)
			break;
		t->cb = nc;
		t->cb[t->ncb++] = (struct rec_cb){.machine = in->src_machine,
		                                  .region = r};
	}
	pthread_mutex_unlock(&m->rec.lock);
}

static bool has_cb(const struct rec_txn *t, uint32_t machine, uint32_t region)
{
	for (unsigned i = 0; i < t->ncb; i++)
		if (t->cb[i].machine == machine && t->cb[i].region == region)
			return true;
	return false;
}

static bool decide(farm_txm *m, const struct rec_txn *t, uint64_t maxlw)
{
	/* A survivor applied an earlier round's decision (recover_kept.c):
	 * that round's decider saw every record and decided; its records
	 * may be gone or read otherwise now (a LOCK installed reads as
	 * refused). Deciders agree, so never both. */
	if (t->flags & V_DEC_COMMIT)
		return true;
	if (t->flags & V_DEC_ABORT)
		return false;
	if (t->flags & (V_ABORT | V_REFUSED))
		return false;
	if (t->flags & V_CP)
		return true;
	if (t->cseq && t->cseq < maxlw)
		return true; /* finished, and no ABORT anywhere */
	if (!(t->flags & V_CB) || !t->nregs)
		return false;
	for (unsigned i = 0; i < t->nregs; i++) {
		/* The backups the coordinator sent its COMMIT-BACKUPs to:
		 * those of the configuration they carry. Not the view before
		 * the current one: a later view (a late join, a second
		 * removal) makes this round's "previous" one with a new
		 * backup that never had them, and a reported commit would be
		 * aborted. */
		uint32_t reps[FARM_RING_MAX_REPLICAS];
		unsigned n = 0;
		if (!FARM_FAULT_SWITCH(FARM_FP_REC_PREV_RING))
			n = farm_as_replicas_at(m->as, t->tcfg, t->regs[i],
			                        reps);
		if (!n)
			n = farm_as_prev_replicas(m->as, t->regs[i], reps);
		if (!n)
			return false;
		for (unsigned k = 1; k < n; k++)
			if (!(t->tcfg ? removed_since(m, reps[k], t->tcfg)
			              : is_removed(m, reps[k])) &&
			    !has_cb(t, reps[k], t->regs[i]))
				return false;
	}
	return true;
}

/* To every survivor, REC_DONE for log (@e's coord, thread), with @flags
 * (rec.lock held). */
static void send_done(farm_txm *m, farm_loop *loop, const struct rec_end *e,
                      uint64_t key, uint32_t flags)
{
	struct rec_end done = *e;
	done.lw = m->rec.maxlw[key];
	done.flags = flags;
	for (uint32_t s = 0; s < m->M; s++)
		if (m->rec.member[s] &&
		    farm_msg_send(loop, s, (uint16_t)e->thread,
		                  FARM_MSGT_REC_DONE, &done, sizeof(done)))
			farm_warn("txn recovery: done not sent to machine "
			          "%" PRIu32,
			          s);
}

/* Every survivor has voted for log (@e's coord, thread): decide each of
 * its transactions and send the decisions, then ask every survivor to
 * say when it has logged and applied them (rec.lock held). */
static void decide_log(farm_txm *m, farm_loop *loop, const struct rec_end *e,
                       uint64_t key, unsigned need)
{
	unsigned nc = 0, na = 0;
	for (unsigned i = 0; i < m->rec.nd; i++) {
		struct rec_txn *t = &m->rec.d[i];
		if (txid_machine(t->txid) != e->coord ||
		    txid_thread(t->txid) != e->thread || t->sent)
			continue;
		bool commit = decide(m, t, m->rec.maxlw[key]);
		t->sent = true;
		commit ? nc++ : na++;
		struct rec_dec d = {.cfg = e->cfg,
		                    .txid = t->txid,
		                    .coord = e->coord,
		                    .commit = commit};
		for (uint32_t s = 0; s < m->M; s++)
			if (m->rec.member[s] &&
			    farm_msg_send(loop, s, (uint16_t)e->thread,
			                  FARM_MSGT_REC_DECIDE, &d, sizeof(d)))
				farm_warn("txn recovery: decision not sent to "
				          "machine %" PRIu32,
				          s);
	}
	/* No survivor empties the log before every survivor has logged its
	 * decisions in it (h_decide): until then a whole-cluster restart
	 * finds each decision that any copy may already hold. */
	if (FARM_FAULT_SWITCH(FARM_FP_REC_DECIDE_UNLOGGED))
		send_done(m, loop, e, key,
		          m->rec.dends[key] == need ? DONE_ALL : 0);
	else
		send_done(m, loop, e, key, DONE_ASK);
	farm_info("txn recovery: coordinator %" PRIu32 " thread %" PRIu32
	          ": %u committed, %u aborted",
	          e->coord, e->thread, nc, na);
}

static void h_end(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct rec_end e;
	if (in->len != sizeof(e)) {
		farm_txn_rec_refuse(m, in, "malformed end of votes");
		return;
	}
	memcpy(&e, in->payload, sizeof(e));
	if (e.cfg != atomic_load(&m->rec.cfg) || m->rec.decider != m->me ||
	    !ever_removed(m, e.coord) || e.thread >= m->T ||
	    in->src_machine >= m->M || is_removed(m, in->src_machine)) {
		farm_txn_rec_refuse(m, in, "end of votes");
		return;
	}
	uint64_t key = (uint64_t)e.coord * m->T + e.thread;
	/* A new holder of the id among the survivors holds no log of its
	 * removed holder (it began empty): it sends no end for it, nor an
	 * END_APPLIED. */
	unsigned need =
	        m->rec.nsurv - (e.coord < m->M && m->rec.member[e.coord]);
	pthread_mutex_lock(&m->rec.lock);
	if (e.flags & END_APPLIED) {
		/* Every survivor logged and applied the decisions: the log
		 * can go. Every survivor had emptied it already: their kept
		 * decisions of it are needed no more. */
		if (++m->rec.acks[key] == need)
			send_done(m, loop, &e, key,
			          m->rec.dends[key] == need ? DONE_ALL : 0);
		pthread_mutex_unlock(&m->rec.lock);
		return;
	}
	if (e.lw > m->rec.maxlw[key])
		m->rec.maxlw[key] = e.lw;
	if (e.flags & END_DONE)
		m->rec.dends[key]++;
	/* Every survivor's loop e.thread has voted for log (coord, thread). */
	if (++m->rec.ends[key] == need)
		decide_log(m, loop, &e, key, need);
	pthread_mutex_unlock(&m->rec.lock);
}

/* ---- survivors apply the decisions --------------------------------------- */

#ifdef FARM_FAULT_INJECTION
/* FARM_FP_REC_DECIDE_REINSTALL: the LOCK records of @txid in @coord's log
 * installed again, as a broken recovery would. */
static void testing_reinstall(struct txloop *tl, uint32_t coord, uint64_t txid)
{
	struct rec_hdr h;
	FOR_EACH_REC(tl, coord, pos, rec, h)
	{
		if (h.type == REC_LOCK && h.txid == txid)
			farm_txn_testing_install_rec(tl, rec);
	}
}
#else
#define testing_reinstall(tl, coord, txid) ((void)0)
#endif

/*
 * The decision @commit of transaction @txid, logged in this loop's log of
 * removed coordinator @coord before anything of it is applied here: a
 * 64-byte COMMIT-PRIMARY or ABORT record after the last record there, as
 * durable as the coordinator's own (its trailer last, then persisted). A
 * whole-cluster restart before the round ended everywhere then decides as
 * the round did (restart.c: a COMMIT-PRIMARY or ABORT anywhere decides),
 * although it reads the backups of another configuration than the one the
 * round judged by, or a survivor's records are gone. Only where a record
 * of @txid is here (nothing is applied elsewhere), and once. False when
 * the log has no room for it (then applied unlogged, as before).
 */
static bool log_decision(struct txloop *tl, uint32_t coord, uint64_t txid,
                         bool commit, uint64_t cfg)
{
	farm_txm *m = tl->m;
	struct reader *rd = &tl->r[coord];
	bool mine = false;
	struct rec_hdr h;
	FOR_EACH_REC(tl, coord, pos, rec, h)
	{
		if (h.txid != txid)
			continue;
		if (h.type == REC_COMMIT_PRIMARY || h.type == REC_ABORT)
			return true; /* logged, or the coordinator's own */
		mine = true;
	}
	if (!mine || FARM_FAULT_SWITCH(FARM_FP_REC_DECIDE_UNLOGGED))
		return true;
	if (rd->head - rd->applied + 64 > m->R)
		return false;
	uint8_t *ring =
	        m->logbase + log_ring_off(m, log_index(m, coord, tl->t));
	uint8_t *dst = ring + log_pos(m, rd->head);
	uint8_t buf[64] = {0};
	struct rec_hdr d = {.len = 64,
	                    .type = commit ? REC_COMMIT_PRIMARY : REC_ABORT,
	                    .txid = txid,
	                    .cfg = (uint32_t)cfg};
	memcpy(buf, &d, sizeof(d));
	uint64_t so = rec_sum_off(d.type, d.len), sum = rec_sum(buf, so);
	uint64_t tr = rd->head + 1; /* its position, as the scans check */
	memcpy(buf + so, &sum, 8);
	memcpy(buf + 56, &tr, 8);
	memcpy(dst, buf, 56);
	/* The trailer last: pairs with the acquire load of the trailer in
	 * the log scans (participant.c; restart.c reads it at rest). */
	atomic_store_explicit((_Atomic uint64_t *)(void *)(dst + 56), tr,
	                      memory_order_release);
	if (farm_mem_persist(m->logmem, dst, 64))
		return false;
	rd->head += 64; /* the poller reads past it */
	return true;
}

static void h_decide(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct txloop *tl = loop_state(m, loop);
	struct rec_dec d;
	if (!tl || in->len != sizeof(d)) {
		farm_txn_rec_refuse(m, in, "malformed recovery decision");
		return;
	}
	memcpy(&d, in->payload, sizeof(d));
	if (d.cfg != atomic_load(&m->rec.cfg) ||
	    in->src_machine != m->rec.decider || !ever_removed(m, d.coord) ||
	    txid_machine(d.txid) != d.coord || txid_thread(d.txid) != tl->t ||
	    d.commit > 1) {
		farm_txn_rec_refuse(m, in, "recovery decision");
		return;
	}
	if (FARM_FAULT_SWITCH(FARM_FP_REC_DECIDE_LATE)) {
		farm_txn_rec_refuse(m, in, "recovery decision (testing: late)");
		return;
	}
	/* Our log of the id is open to a new holder already (its removed
	 * holder's was decided and emptied): the txid may be the new
	 * holder's, which this decision is not about. Or emptied, after
	 * this decision was applied (a later round's, voted again). */
	if (!reader_dead(m, d.coord, &tl->r[d.coord]) ||
	    tl->r[d.coord].rec_done)
		return;
	bool commit = d.commit != 0;
	if (!log_decision(tl, d.coord, d.txid, commit, d.cfg))
		farm_warn("txn recovery: decision on transaction %#" PRIx64
		          " not logged (machine %" PRIu32 "'s log is full): "
		          "a whole-cluster restart before the round ends may "
		          "decide it otherwise",
		          d.txid, d.coord);
	farm_txn_rec_kept_decision(tl, d.coord, d.txid, commit);
	/* As an old primary: the LOCK record installs or unlocks, if still
	 * held (participant.c says why it often is not). */
	if (!farm_txn_decide_primary(tl, d.txid, commit)) {
		farm_stat_add(&m->st.v[S_REC_DEC_UNLOCKED], 1);
		if (commit && FARM_FAULT_SWITCH(FARM_FP_REC_DECIDE_REINSTALL))
			testing_reinstall(tl, d.coord, d.txid);
	}
	/* As a promoted primary: the COMMIT-BACKUP's images, under the
	 * recovered locks. */
	farm_txn_rec_pend_decide(tl, d.txid, commit);
	/* As a backup: its COMMIT-BACKUP applied now, or never. */
	struct rec_hdr h;
	FOR_EACH_REC(tl, d.coord, pos, rec, h)
	{
		if (h.type != REC_COMMIT_BACKUP || h.txid != d.txid)
			continue;
		if (!commit) {
			farm_stat_add(&m->st.v[S_BACKUP_SKIPPED], 1);
			continue;
		}
		const struct rec_obj *o = robjs(rec);
		const uint8_t *img = rimgs(rec);
		for (unsigned i = 0; i < h.nobj; i++) {
			enum farm_as_role role;
			farm_region *r = farm_as_local_region(
			        m->as, farm_gaddr_region(o[i].addr), &role);
			uint8_t *q = r && role == FARM_AS_BACKUP
			                     ? farm_txn_rec_copy_obj(m, &o[i])
			                     : NULL;
			if (q && farm_txn_copy_apply(q, o[i].lines, img, false))
				farm_stat_add(&m->st.v[S_BACKUP_APPLIES], 1);
			img += 64ull * o[i].lines;
		}
	}
}

static void h_done(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_txm *m = arg;
	struct txloop *tl = loop_state(m, loop);
	struct rec_end e;
	if (!tl || in->len != sizeof(e)) {
		farm_txn_rec_refuse(m, in, "malformed end of recovery");
		return;
	}
	memcpy(&e, in->payload, sizeof(e));
	if (e.cfg != atomic_load(&m->rec.cfg) ||
	    in->src_machine != m->rec.decider || !ever_removed(m, e.coord) ||
	    e.thread != tl->t) {
		farm_txn_rec_refuse(m, in, "end of recovery");
		return;
	}
	if (FARM_FAULT_SWITCH(FARM_FP_REC_DONE_LATE)) {
		farm_txn_rec_refuse(m, in, "end of recovery (testing: late)");
		return;
	}
	if (!(e.flags & DONE_ASK) &&
	    FARM_FAULT_SWITCH(FARM_FP_REC_EMPTY_LATE)) {
		farm_txn_rec_refuse(m, in, "end of recovery (testing: late)");
		return;
	}
	if (e.flags & DONE_ASK) {
		/* Every decision before it was logged and applied here (they
		 * come in order, on this loop). A new holder of the id sent
		 * no end, so says nothing. */
		struct rec_end a = e;
		a.flags = END_APPLIED;
		if (m->me != e.coord &&
		    farm_msg_send(loop, m->rec.decider, 0, FARM_MSGT_REC_END,
		                  &a, sizeof(a)))
			farm_warn("txn recovery: applied decisions not said");
		return;
	}
	if (e.flags & DONE_ALL)
		farm_txn_rec_kept_forget(tl, e.coord);
	/* Every transaction of the log is decided: empty it (unless it is
	 * open to a new holder of the id already, or was emptied in an
	 * earlier round). */
	struct reader *rd = &tl->r[e.coord];
	if (!reader_dead(m, e.coord, rd) || rd->rec_done)
		return;
	uint64_t li = log_index(m, e.coord, tl->t);
	uint8_t *ring = m->logbase + log_ring_off(m, li);
	while (rd->applied < rd->head) {
		struct rec_hdr h;
		memcpy(&h, ring + log_pos(m, rd->applied), sizeof(h));
		if (h.len == 0 || h.len % 64 ||
		    h.len > m->R - log_pos(m, rd->applied))
			break;
		rec_zero(ring + log_pos(m, rd->applied), h.type, h.len);
		rd->applied += h.len;
	}
	rd->rec_done = true;
	/* Nothing of the removed holder here for a restart to read. */
	farm_txn_log_mark_pending(m, e.coord, tl->t, false);
	farm_txn_rec_kept_done(tl, e.coord, e.lw);
	farm_info("txn recovery: log of machine %" PRIu32 " thread %u done",
	          e.coord, tl->t);
	/* A new holder of the id waits for it (farm_txm_forget_peer). */
	if (rd->reopen)
		farm_txn_log_reopen(tl, e.coord);
}

int farm_txn_rec_decide_init(farm_txm *m)
{
	/* A promoted primary that asked about a transaction still being
	 * decided waits for its outcome (h_query): the coordinator tells. */
	farm_txn_on_decided(m, rec_decided);
	int rc = farm_msg_handle(m->msg, FARM_MSGT_REC_QUERY, h_query, m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_REC_ANSWER, h_answer, m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_REC_VOTE, h_vote, m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_REC_END, h_end, m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_REC_DECIDE, h_decide, m);
	if (!rc)
		rc = farm_msg_handle(m->msg, FARM_MSGT_REC_DONE, h_done, m);
	return rc;
}
