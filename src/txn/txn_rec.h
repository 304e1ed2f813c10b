/*
 * Transaction recovery's state (recover.c): the promoted regions' pending
 * COMMIT-BACKUPs, the decider's view of a removed coordinator's
 * transactions, and what recover.c offers the other files. Internal to
 * src/txn.
 */
#ifndef FARM_TXN_TXN_REC_H
#define FARM_TXN_TXN_REC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txm.h"
#include "util/common.h"

#include "txn/txn_log.h"

/* recover.c: a COMMIT-BACKUP for a region being promoted whose
 * transaction is not decided yet; its objects are locked meanwhile. */
struct rec_pend {
	struct rec_pend *next;
	uint64_t txid;
	uint32_t coord;
	uint8_t *rec; /* a copy of its COMMIT-BACKUP (malloc'd) */
	/* Per object of rec: where pend_add took its recovered lock (the
	 * object in the copy it was promoting), or NULL: settling releases
	 * only these, never another pending transaction's lock on the
	 * same object (malloc'd). */
	uint8_t **q;
	bool settled; /* at the log's truncation; awaits the answer */
};

/* recover_kept.c: the decisions this loop applied for the log of a
 * removed holder of machine id @coord, kept for later rounds: a round
 * that ends here may be superseded before every survivor took its
 * decisions, and a survivor that emptied the log votes them again in
 * the next one (V_DEC_*), so that the decider decides the same. */
struct rec_kept_dec {
	uint64_t txid;
	bool commit;
};
struct rec_kept {
	struct rec_kept *next;
	uint32_t coord;
	uint64_t gone; /* the configuration that removed that holder */
	uint64_t lw;   /* the low-water mark of the log's REC_DONE */
	bool done;     /* the log decided and emptied here */
	struct rec_kept_dec *d;
	unsigned n, cap;
};

/* recover.c: the decider's view of one transaction of a removed
 * coordinator, and the recovered locks of promoted regions. */
struct rec_cb {
	uint32_t machine, region;
};
struct rec_txn {
	uint64_t txid, cseq;
	uint32_t flags;
	uint32_t tcfg; /* the configuration of its COMMIT-BACKUPs (0: none) */
	bool sent;
	uint32_t *regs;
	unsigned nregs;
	struct rec_cb *cb; /* who holds a COMMIT-BACKUP for which region */
	unsigned ncb;
};
struct rec_rlock {
	uint64_t addr;
	/* The object in the copy the lock was taken in: the copy may be
	 * demoted (growth) before the lock's transaction settles, and is
	 * installed and unlocked there (demoted copies stay mapped). */
	uint8_t *q;
	unsigned n;
};

/* recover.c: recovery's state (decider fields on the decider only). */
struct txrec_state {
	pthread_mutex_t lock;
	_Atomic uint64_t cfg; /* the configuration being recovered into */
	uint32_t decider;
	/* Per machine id: the configuration that last removed a holder of
	 * it (0: none ever), and the incarnation of its current holder (the
	 * configuration that admitted it, farm_txm_replace_peer; 0 for an
	 * id's first holder). A holder admitted before the id's last
	 * removal is removed; its records are recovery's. */
	uint64_t *gone; /* M */
	uint64_t *inc;  /* M */
	bool *member;   /* M: the survivors of cfg */
	unsigned nsurv;
	uint32_t *promo; /* regions being promoted here */
	unsigned npromo;
	/* promo[0, nelig) are this round's to promote: complete backup
	 * copies this machine was primary of when the round began
	 * (farm_as_promotable); the rest are listed from earlier rounds.
	 * Decided once, so every loop's scan and the promotion agree. */
	unsigned nelig;
	_Atomic unsigned npromo_live;
	_Atomic unsigned applied, scanned; /* loops done with each step */
	_Atomic uint64_t t_config, t_go, t_active; /* farm_txm_stats */
	struct rec_rlock *rl;
	unsigned nrl, caprl;
	uint32_t *adopt; /* promoted regions not yet handed to the allocator */
	unsigned nadopt, capadopt;
	/* The decider. */
	bool go_sent;
	uint64_t *applied_from; /* M */
	struct rec_txn *d;
	unsigned nd, capd;
	unsigned *ends;  /* M * T, by coordinator * T + thread */
	unsigned *dends; /* M * T: the ends with END_DONE */
	unsigned *acks;  /* M * T: the END_APPLIED answers to DONE_ASK */
	uint64_t *maxlw; /* M * T */
};

struct txloop;

/* recover.c */
int farm_txn_rec_init(farm_txm *m);
void farm_txn_rec_fini(farm_txm *m);
void farm_txn_rec_detach(struct txloop *tl);
void farm_txn_rec_truncated(struct txloop *tl, uint64_t txid);
/* recover.c: whether every loop of this machine has taken configuration
 * @cfg or a later one (the round's barrier): no handler or commit that
 * saw an older one is still between its check and its lock. */
bool farm_txn_rec_taken(farm_txm *m, uint64_t cfg);
bool farm_txn_rec_promoting(farm_txm *m, uint32_t region);
/* recover_kept.c: loop @tl emptied the log of the removed holder of
 * @coord (@lw: the log's low-water mark), at REC_DONE or, empty, at its
 * reopening to a new holder; its decisions are voted in later rounds.
 * And the loop's kept decisions freed (its close). */
void farm_txn_rec_kept_done(struct txloop *tl, uint32_t coord, uint64_t lw);
void farm_txn_rec_kept_free(struct txloop *tl);
bool farm_txn_rec_truncate_apply(farm_txm *m, uint64_t addr, uint8_t *q,
                                 unsigned lines, const uint8_t *img);

#endif
