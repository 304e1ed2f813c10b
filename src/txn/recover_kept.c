/*
 * Transaction-state recovery, the decisions a survivor applied (recover.c
 * describes the whole protocol). A round can be superseded by a newer
 * configuration after some survivors took its decider's REC_DECIDE and
 * REC_DONE for a removed coordinator's log and before others did: those
 * refuse them as stale and vote from the log again in the new round. A
 * survivor that emptied the log has no records to vote with, and sending
 * only its end would be unsafe: its COMMIT-BACKUP votes would be missing,
 * and the new decider could abort a transaction it committed and
 * installed. So each loop keeps, per removed holder of an id (the
 * configuration that removed it), the decisions it applied, and votes
 * them in every later round (V_DEC_COMMIT, V_DEC_ABORT) until a decider
 * says every survivor had emptied the log (DONE_ALL). The decider takes a
 * decided vote over any record's: every decider decides as the first one
 * did, since a decision applied anywhere is voted again in each round
 * until all survivors applied it.
 *
 * Each loop touches only its own list, on its own thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txn_int.h"
#include "txn/recover_wire.h"
#include "txn/recover_int.h"
#include "util/fault.h"
#include "util/log.h"

/* The configuration that removed the holder of @coord whose log this
 * machine's readers recover (0: none). */
static uint64_t gone_of(farm_txm *m, uint32_t coord)
{
	pthread_mutex_lock(&m->rec.lock);
	uint64_t g = coord < m->M ? m->rec.gone[coord] : 0;
	pthread_mutex_unlock(&m->rec.lock);
	return g;
}

static void kept_free(struct rec_kept *k)
{
	free(k->d);
	free(k);
}

/* The entry of @coord's holder removed at @gone; with @make, made (an
 * entry of an older holder of the id goes: its log was emptied before
 * this one's could hold records). NULL: none, or out of memory. */
static struct rec_kept *kept_get(struct txloop *tl, uint32_t coord,
                                 uint64_t gone, bool make)
{
	for (struct rec_kept **pp = &tl->kept; *pp; pp = &(*pp)->next) {
		struct rec_kept *k = *pp;
		if (k->coord != coord)
			continue;
		if (k->gone == gone)
			return k;
		if (!make)
			return NULL;
		*pp = k->next;
		kept_free(k);
		break;
	}
	if (!make)
		return NULL;
	struct rec_kept *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->coord = coord;
	k->gone = gone;
	k->next = tl->kept;
	tl->kept = k;
	return k;
}

void farm_txn_rec_kept_decision(struct txloop *tl, uint32_t coord,
                                uint64_t txid, bool commit)
{
	if (FARM_FAULT_SWITCH(FARM_FP_REC_NO_KEPT))
		return;
	struct rec_kept *k = kept_get(tl, coord, gone_of(tl->m, coord), true);
	for (unsigned i = 0; k && i < k->n; i++)
		if (k->d[i].txid == txid)
			return; /* the same decision, from a later round */
	if (k && k->n == k->cap) {
		unsigned nc = k->cap ? 2 * k->cap : 16;
		struct rec_kept_dec *nd = realloc(k->d, nc * sizeof(*nd));
		if (nd) {
			k->d = nd;
			k->cap = nc;
		}
	}
	if (!k || k->n == k->cap) {
		/* Unsafe only if this round is superseded before every
		 * survivor took the decision: said loudly. */
		farm_err("txn recovery: out of memory: the decision for "
		         "%#" PRIx64 " is not kept for a later round",
		         txid);
		return;
	}
	k->d[k->n++] = (struct rec_kept_dec){.txid = txid, .commit = commit};
}

void farm_txn_rec_kept_done(struct txloop *tl, uint32_t coord, uint64_t lw)
{
	if (FARM_FAULT_SWITCH(FARM_FP_REC_NO_KEPT))
		return;
	struct rec_kept *k = kept_get(tl, coord, gone_of(tl->m, coord), true);
	if (!k) {
		farm_err("txn recovery: out of memory: machine %" PRIu32
		         "'s emptied log is not voted in a later round",
		         coord);
		return;
	}
	k->done = true;
	if (lw > k->lw)
		k->lw = lw;
}

/* One decided vote to the decider. */
static void kept_send(struct txloop *tl, uint32_t coord,
                      const struct rec_kept_dec *d)
{
	farm_txm *m = tl->m;
	struct rec_vote v = {.cfg = atomic_load(&m->rec.cfg),
	                     .txid = d->txid,
	                     .coord = coord,
	                     .flags = d->commit ? V_DEC_COMMIT : V_DEC_ABORT};
	int rc = farm_msg_send(tl->loop, m->rec.decider, 0, FARM_MSGT_REC_VOTE,
	                       &v, sizeof(v));
	if (rc)
		farm_warn("txn recovery: kept decision not sent: %s",
		          farm_strerror(rc));
}

bool farm_txn_rec_kept_vote(struct txloop *tl, uint32_t coord, bool end)
{
	farm_txm *m = tl->m;
	uint64_t gone = gone_of(m, coord);
	struct rec_kept *k = gone ? kept_get(tl, coord, gone, false) : NULL;
	if (!k || (end && !k->done))
		return false;
	for (unsigned i = 0; i < k->n; i++)
		kept_send(tl, coord, &k->d[i]);
	if (!end)
		return true;
	struct rec_end e = {.cfg = atomic_load(&m->rec.cfg),
	                    .lw = k->lw,
	                    .coord = coord,
	                    .thread = tl->t,
	                    .flags = END_DONE};
	int rc = farm_msg_send(tl->loop, m->rec.decider, 0, FARM_MSGT_REC_END,
	                       &e, sizeof(e));
	if (rc)
		farm_warn("txn recovery: end of kept votes not sent: %s",
		          farm_strerror(rc));
	return true;
}

void farm_txn_rec_kept_forget(struct txloop *tl, uint32_t coord)
{
	for (struct rec_kept **pp = &tl->kept; *pp; pp = &(*pp)->next) {
		struct rec_kept *k = *pp;
		if (k->coord == coord && k->done) {
			*pp = k->next;
			kept_free(k);
			return;
		}
	}
}

void farm_txn_rec_kept_free(struct txloop *tl)
{
	while (tl->kept) {
		struct rec_kept *k = tl->kept;
		tl->kept = k->next;
		kept_free(k);
	}
}
