/*
 * Shared by the two halves of transaction-state recovery: recover.c (the
 * barrier, draining, promotion, the loops' scans) and recover_decide.c
 * (the coordinator's answers, the decider, applying its decisions). Only
 * those two files include it.
 */
#ifndef FARM_TXN_RECOVER_INT_H
#define FARM_TXN_RECOVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "util/fault.h"

#define REC_MAX_REGS 512u /* regions one vote carries (farm_tx_commit) */

static inline const struct rec_obj *robjs(const uint8_t *rec)
{
	return (const struct rec_obj *)(const void *)(rec +
	                                              sizeof(struct rec_hdr));
}

static inline const uint8_t *rimgs(const uint8_t *rec)
{
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	return rec + sizeof(h) + (size_t)h.nobj * sizeof(struct rec_obj);
}

/* Walk the whole records of log (@coord, this loop) from the applied
 * position to the head (what is not truncated). */
#define FOR_EACH_REC(tl, coord, pos, rec, h)                                   \
	for (uint64_t pos = (tl)->r[coord].applied; pos < (tl)->r[coord].head; \
	     pos += (h).len)                                                   \
		for (const uint8_t *rec = rec_at(tl, coord, pos, &(h)); rec;   \
		     rec = NULL)

static inline const uint8_t *rec_at(struct txloop *tl, uint32_t coord,
                                    uint64_t pos, struct rec_hdr *h)
{
	farm_txm *m = tl->m;
	const uint8_t *ring =
	        m->logbase + log_ring_off(m, log_index(m, coord, tl->t));
	const uint8_t *rec = ring + log_pos(m, pos);
	memcpy(h, rec, sizeof(*h));
	if (h->len == 0 || h->len % 64) {
		h->len = (uint32_t)(tl->r[coord].head - pos); /* stop */
		return NULL;
	}
	return rec;
}

/* Is the current holder of machine id @id removed? */
static inline bool is_removed(const farm_txm *m, uint32_t id)
{
	return id < m->M && m->rec.gone[id] &&
	       (m->rec.gone[id] > m->rec.inc[id] ||
	        FARM_FAULT_SWITCH(FARM_FP_REC_REMOVED_STICKY));
}

/* Was any holder of @id ever removed (transactions of a removed holder
 * of it may still be being decided)? */
static inline bool ever_removed(const farm_txm *m, uint32_t id)
{
	return id < m->M && m->rec.gone[id];
}

/* Is the holder of @id at configuration @cfg (the one a record carries)
 * removed since? Another holder may have the id now. */
static inline bool removed_since(const farm_txm *m, uint32_t id, uint64_t cfg)
{
	return id < m->M && m->rec.gone[id] > cfg;
}

/* Does @rd read records of a removed holder of @coord (recovery owns
 * them), rather than of its live holder? */
static inline bool reader_dead(const farm_txm *m, uint32_t coord,
                               const struct reader *rd)
{
	return coord < m->M && m->rec.gone[coord] &&
	       (m->rec.gone[coord] > rd->inc ||
	        FARM_FAULT_SWITCH(FARM_FP_REC_REMOVED_STICKY));
}

/* recover.c */
void farm_txn_rec_refuse(farm_txm *m, const farm_msg_in *in, const char *what);
void farm_txn_rec_send_query(struct txloop *tl, uint32_t coord, uint64_t txid);

/* recover_promo.c: a promoted primary's part. Step 2 for @coord's log
 * (rec.lock held); is a promoted region still locked by a pending
 * transaction; a region to hand to the allocator for adoption once its
 * locks are settled, and the hand-over of those that are. */
uint8_t *farm_txn_rec_copy_obj(farm_txm *m, const struct rec_obj *o);
void farm_txn_rec_pend_decide(struct txloop *tl, uint64_t txid, bool commit);
void farm_txn_rec_promote_scan(struct txloop *tl, uint32_t coord);
bool farm_txn_rec_region_locked(const farm_txm *m, uint32_t region);
void farm_txn_rec_adopt_add(farm_txm *m, uint32_t region);
void farm_txn_rec_adopt_ready(farm_txm *m);

/* recover_kept.c: keep the decision @commit for @txid of the removed
 * holder of @coord, applied by loop @tl; vote this loop's kept decisions
 * for @coord to the decider, and with @end, when the log was emptied
 * here, the end of votes (END_DONE) too (whether there were any to
 * vote); forget them (DONE_ALL). */
void farm_txn_rec_kept_decision(struct txloop *tl, uint32_t coord,
                                uint64_t txid, bool commit);
bool farm_txn_rec_kept_vote(struct txloop *tl, uint32_t coord, bool end);
void farm_txn_rec_kept_forget(struct txloop *tl, uint32_t coord);

/* recover_decide.c: registers the handlers of REC_QUERY, REC_ANSWER,
 * REC_VOTE, REC_END, REC_DECIDE and REC_DONE, and tells the coordinator
 * to report decisions to promoted primaries that asked. */
int farm_txn_rec_decide_init(farm_txm *m);

#endif
