/*
 * TATP's files' shared part (not the tool's API): the shipped update's
 * request and the owner's ledger (wl_tatp_ship.c), and what the shipped
 * updates use of the client's side (wl_tatp.c).
 */
#ifndef FWL_TATP_H
#define FWL_TATP_H

#include "wl_int.h"

enum { SHIP_LOC = 1, SHIP_INS, SHIP_DEL };

struct ship_req {
	uint32_t op, slot;
	farm_gaddr a, b; /* a: the row written; b: a row read (INS: sf) */
	farm_gaddr l;    /* the client's ledger at the owner */
	uint64_t seq;    /* the client's id of this update */
	uint32_t val;
	uint8_t end_time;
	char numberx[15];
};

/* One per (client, owner), at the owner: the updates of the client that
 * changed a row there, written in the same transaction as the row. @seq
 * is the last one's id: an update shipped again (its reply lost) or run
 * by the client after all is answered from here, not applied twice. */
struct tatp_ledger {
	uint64_t seq, count;
};

/* wl_tatp.c: the fat pointer of a row (@table, subscriber @s, type @t),
 * from the client's cache or the index; run @body as a transaction until
 * it ends (not retryable). */
int wl_tatp_get_ptr(struct wl_client *c, char table, uint64_t s, unsigned t,
                    farm_fatptr *p);
typedef int (*tx_body)(struct wl_client *c, farm_tx *tx, void *arg);
int wl_tatp_run_tx(struct wl_client *c, tx_body body, void *arg);

/* wl_tatp_ship.c: the update @q of subscriber @s at its owner (or here),
 * waited for; with a ship window, sent and left in flight (WL_INFLIGHT);
 * answers reaped (@all: every one); the owner's handler of a request. */
int wl_tatp_update(struct wl_client *c, uint64_t s, struct ship_req *q);
int wl_tatp_update_async(struct wl_client *c, uint64_t s, struct ship_req *q,
                         enum wl_txn t, uint64_t t0);
void wl_tatp_reap(struct wl_client *c, bool all);
void wl_tatp_ship(struct wl_machine *m, farm_loop *loop, const farm_msg_in *in);

#endif
