/*
 * SmallBank's transaction pieces shared by its two clients: wl_bank.c's,
 * which waits for each transaction, and wl_bank_win.c's, which keeps
 * several in flight on one loop (--bank-window).
 */
#ifndef FWL_BANK_H
#define FWL_BANK_H

#include "wl_hist.h"
#include "wl_int.h"

#define MAX_ROWS 4

struct btx {
	unsigned n;
	farm_fatptr p[MAX_ROWS];
	uint64_t key[MAX_ROWS];
	struct bank_row row[MAX_ROWS]; /* as read */
	struct bank_row *w[MAX_ROWS];  /* writable copies, once written */
	farm_tx *tx;
	struct wl_hop ops[WL_HIST_MAX_OPS];
	unsigned nops;
};

/* Pick @t's accounts and amount (*@amount) and look their rows up: 0 or
 * the lookup's error. */
int wl_bank_prepare(struct wl_client *c, struct btx *b, enum wl_txn t,
                    int64_t *amount);
/* After b->row[] was read: no writes yet, the reads in b->ops. */
void wl_bank_rows_read(struct btx *b);
/* The logic of @t over the rows read: 0 with the writes made and *@delta
 * what it adds to the total, 1 when the logic ends it, or an error. */
int wl_bank_logic(struct btx *b, enum wl_txn t, int64_t v, int64_t *delta);

/* --bank-window N > 1: start @t and return WL_INFLIGHT (after waiting
 * for a slot when N are in flight), or the error that ended an earlier
 * one for good; wl_bank_reap counts those that ended. */
int wl_bank_txn_window(struct wl_client *c, enum wl_txn t);
void wl_bank_reap(struct wl_client *c, bool all);
void wl_bank_win_fini(struct wl_machine *m);

#endif
