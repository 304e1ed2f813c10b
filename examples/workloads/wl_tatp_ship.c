/*
 * TATP's shipped updates (wl_tatp.c): UPDATE_LOCATION and
 * INSERT/DELETE_CALL_FORWARDING sent to the machine that owns the
 * subscriber, which runs each as a local transaction with the client's
 * ledger entry (an update shipped twice is applied once); a client whose
 * owner is gone runs it itself; with --ship-window, several in flight.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_tatp.h"

/* A request from the wire indexes cf->slot[] with q->slot: anything but
 * a known op on one of the row's 3 slots is refused before it is used. */
static bool ship_valid(const struct ship_req *q)
{
	return q->op >= SHIP_LOC && q->op <= SHIP_DEL && q->slot < 3;
}

/* The logic of a shipped update on writable @a (and read-only @b):
 * 0 changed, 1 nothing to do (the transaction ends without writing). */
static int ship_apply(const struct ship_req *q, void *a, const void *b)
{
	struct tatp_cf *cf = a;
	if (!ship_valid(q))
		return -EINVAL;
	switch (q->op) {
	case SHIP_LOC: ((struct tatp_sub *)a)->vlr_location = q->val; return 0;
	case SHIP_INS:
		(void)b;
		if (cf->slot[q->slot].present)
			return 1; /* the primary key exists */
		cf->slot[q->slot].present = 1;
		cf->slot[q->slot].end_time = q->end_time;
		memcpy(cf->slot[q->slot].numberx, q->numberx, 15);
		return 0;
	case SHIP_DEL:
		if (!cf->slot[q->slot].present)
			return 1;
		cf->slot[q->slot].present = 0;
		return 0;
	default: return -EINVAL;
	}
}

static uint32_t size_of(const struct ship_req *q)
{
	return q->op == SHIP_LOC ? sizeof(struct tatp_sub)
	                         : sizeof(struct tatp_cf);
}

struct local_upd {
	const struct ship_req *q;
	int answer;
};

/* A changed row's ledger entry, in the row's transaction. */
static int ledger_note(farm_tx *tx, const struct ship_req *q)
{
	void *w;
	int rc = farm_tx_write(tx, q->l, &w);
	if (!rc) {
		struct tatp_ledger *l = w;
		l->seq = q->seq;
		l->count++;
	}
	return rc;
}

static int local_body(struct wl_client *c, farm_tx *tx, void *arg)
{
	(void)c;
	struct local_upd *u = arg;
	const void *a, *b = NULL, *l;
	void *w;
	int rc = farm_tx_read_sync(tx, u->q->l, sizeof(struct tatp_ledger), &l);
	if (!rc && ((const struct tatp_ledger *)l)->seq == u->q->seq) {
		u->answer = 0; /* the owner applied it; its reply was lost */
		return 0;
	}
	if (!rc)
		rc = farm_tx_read_sync(tx, u->q->a, size_of(u->q), &a);
	if (!rc && u->q->b)
		rc = farm_tx_read_sync(tx, u->q->b, sizeof(struct tatp_sf), &b);
	if (!rc)
		rc = farm_tx_write(tx, u->q->a, &w);
	if (rc)
		return rc;
	u->answer = ship_apply(u->q, w, b);
	if (u->answer == 0)
		return ledger_note(tx, u->q);
	return u->answer < 0 ? u->answer : 0;
}

/* This client's ledger at @owner. */
static int ledger_of(struct wl_client *c, unsigned owner, farm_gaddr *l)
{
	farm_fatptr *p = &c->tledger[owner];
	int rc = 0;
	if (p->addr == FARM_GADDR_NULL)
		rc = wl_tatp_get_ptr(c, 'T', c->m->me * 64u + c->idx, owner, p);
	*l = p->addr;
	return rc;
}

#ifdef FWL_TEST_BREAK_READ
/* Test build: with its first shipped update a client also sends two
 * malformed ones (a slot past the row's 3, an unknown op); the owner must
 * refuse each with -EINVAL before touching the row, else the run counts
 * an error and fails. */
static void ship_bad(struct wl_client *c, unsigned to, const struct ship_req *q)
{
	struct ship_req bad[2] = {*q, *q};
	bad[0].op = SHIP_INS;
	bad[0].slot = 3;
	bad[1].op = SHIP_DEL + 1;
	for (int i = 0; i < 2 && c->ship_seq == 1; i++) {
		int answer = 0;
		if (wl_ship(c, to, &bad[i], sizeof(bad[i]), &answer) != -EINVAL)
			c->res.errors++;
	}
}
#endif

/* Ship @q (its id given) to @to from try @tries on; run it here when
 * the owner cannot. */
static int ship_until(struct wl_client *c, unsigned to, struct ship_req *q,
                      int tries)
{
	int rc = 0;
	for (; tries < 100; tries++) {
		int answer = 0;
		rc = wl_ship(c, to, q, sizeof(*q), &answer);
		if (rc == 0) {
			c->res.shipped++;
			if (answer == 0)
				c->res.acked[c->m->me][c->idx]++;
			return answer;
		}
		if (!farm_tx_retryable(rc) || c->dead[to])
			break;
		c->res.retries++;
	}
	c->res.ship_fallbacks++;
	struct local_upd u = {q, 0};
	rc = wl_tatp_run_tx(c, local_body, &u);
	if (!rc && u.answer == 0)
		c->res.acked[c->m->me][c->idx]++;
	return rc ? rc : u.answer;
}

/* Ship @q to owner @to; run it here when the owner cannot. */
static int update_to(struct wl_client *c, unsigned to, struct ship_req *q)
{
	int rc = ledger_of(c, to, &q->l);
	if (rc)
		return rc;
	q->seq = ++c->ship_seq;
#ifdef FWL_TEST_BREAK_READ
	ship_bad(c, to, q);
#endif
	return ship_until(c, to, q, 0);
}

/* Ship @q to @s's owner; run it here when the owner cannot. */
int wl_tatp_update(struct wl_client *c, uint64_t s, struct ship_req *q)
{
	return update_to(c, wl_owner(c->m->o, s), q);
}

/* ---- shipped updates in flight (--ship-window) ----------------------------
 * A client that waits for each answer leaves its loop idle for the round
 * trip: it parks, and the owner, itself a client waiting for its own
 * answer, is woken to serve it and parks again, a futex sleep and wake on
 * each side per update. With updates in flight the client runs the next
 * transactions meanwhile and its loop keeps polling, so answers and
 * requests are found without a wake-up. One update per owner is shipped
 * at a time (the next wait here, in order): the owner's ledger keeps only
 * a client's last id, which tells a repeat of a wl_tatp_update (its answer
 * lost) from a new one, and two of a client's updates would conflict on that
 * ledger row anyway. */

enum { SLOT_FREE, SLOT_QUEUED, SLOT_SHIPPED };

struct ship_slot {
	struct ship_req q;
	enum wl_txn t;
	unsigned to, state;
	uint64_t order; /* issue order: an owner's queue is shipped in it */
	uint64_t t0, t_end;
	volatile int done; /* set by ship_answered on this loop */
	int status, answer;
};

struct ship_slots {
	struct ship_slot s[WL_MAX_MACHINES];
	bool shipping[WL_MAX_MACHINES]; /* an update to this owner is out */
	unsigned nused;
	uint64_t next_order;
};

static void ship_answered(farm_loop *loop, void *ctx, int status,
                          const void *reply, uint32_t len)
{
	(void)loop;
	struct ship_slot *s = ctx;
	s->status = status;
	if (status == 0 && len == sizeof(int))
		memcpy(&s->answer, reply, sizeof(int));
	else if (status == 0)
		s->status = FARM_ECORRUPT;
	s->t_end = wl_now_ns();
	s->done = 1;
}

static void slot_free(struct ship_slots *ss, struct ship_slot *s)
{
	s->state = SLOT_FREE;
	ss->nused--;
}

/* Ship queued slot @s (its owner has none out); on a failed send, go on
 * as wl_tatp_update() would (tried again, or run here) and count it. */
static void ship_out(struct wl_client *c, struct ship_slots *ss,
                     struct ship_slot *s)
{
	unsigned to = s->to;
	int rc = c->dead[to] ? FARM_EPEERDEAD : ledger_of(c, to, &s->q.l);
	if (!rc) {
		s->q.seq = ++c->ship_seq;
		s->done = 0;
		rc = farm_msg_call(c->loop, to, c->idx % c->m->o->threads,
		                   WL_MSG_SHIP, &s->q, sizeof(s->q),
		                   500000000ull, ship_answered, s);
		if (!rc) {
			s->state = SLOT_SHIPPED;
			ss->shipping[to] = true;
			return;
		}
		rc = ship_until(c, to, &s->q, 0);
	} else if (rc == FARM_EPEERDEAD) {
		rc = update_to(c, to, &s->q);
	}
	wl_count(c, s->t, rc, s->t0);
	slot_free(ss, s);
}

/* Count answered slot @s as wl_tatp_update() would have; one that failed goes
 * on as there (tried again, or run here). */
static void ship_reap_one(struct wl_client *c, struct ship_slots *ss,
                          struct ship_slot *s)
{
	unsigned to = s->to;
	int rc = s->status;
	ss->shipping[to] = false;
	if (rc == FARM_EPEERDEAD)
		c->dead[to] = true; /* run its updates here from now on */
	if (rc == 0) {
		c->res.shipped++;
		if (s->answer == 0)
			c->res.acked[c->m->me][c->idx]++;
		wl_count_at(c, s->t, s->answer, s->t0, s->t_end);
	} else {
		int tries = !farm_tx_retryable(rc) || c->dead[to] ? 100 : 1;
		c->res.retries += tries == 1;
		rc = ship_until(c, to, &s->q, tries);
		wl_count(c, s->t, rc, s->t0);
		if (rc < 0)
			fprintf(stderr, "m%u.%u: %s given up: %s\n", c->m->me,
			        c->idx, wl_txn_name(s->t), farm_strerror(rc));
	}
	slot_free(ss, s);
}

/* Ship the oldest queued update of each owner with none out. */
static void ship_queued(struct wl_client *c, struct ship_slots *ss)
{
	for (unsigned to = 0; to < c->m->o->machines; to++) {
		struct ship_slot *first = NULL;
		for (unsigned i = 0; !ss->shipping[to] && i < WL_MAX_MACHINES;
		     i++) {
			struct ship_slot *s = &ss->s[i];
			if (s->state == SLOT_QUEUED && s->to == to &&
			    (!first || s->order < first->order))
				first = s;
		}
		if (first)
			ship_out(c, ss, first);
	}
}

/* Count what has been answered and ship what may go; @all: wait for
 * every update queued or in flight. */
void wl_tatp_reap(struct wl_client *c, bool all)
{
	struct ship_slots *ss = c->ships;
	while (ss && ss->nused) {
		for (unsigned i = 0; i < WL_MAX_MACHINES; i++)
			if (ss->s[i].state == SLOT_SHIPPED && ss->s[i].done)
				ship_reap_one(c, ss, &ss->s[i]);
		ship_queued(c, ss);
		if (!all || !ss->nused)
			return;
		/* Pass the loop until one answers. */
		for (unsigned i = 0; i < WL_MAX_MACHINES; i++)
			if (ss->s[i].state == SLOT_SHIPPED) {
				(void)farm_loop_wait(c->loop, &ss->s[i].done,
				                     0);
				break;
			}
	}
}

/* The oldest update shipped, answered and counted: room in the window. */
static void ship_wait_oldest(struct wl_client *c, struct ship_slots *ss)
{
	struct ship_slot *old = NULL;
	for (unsigned i = 0; i < WL_MAX_MACHINES; i++) {
		struct ship_slot *s = &ss->s[i];
		if (s->state == SLOT_SHIPPED && (!old || s->order < old->order))
			old = s;
	}
	if (!old)
		return;
	(void)farm_loop_wait(c->loop, &old->done, 0);
	wl_tatp_reap(c, false);
}

/* wl_tatp_update(), leaving the update queued or in flight: WL_INFLIGHT, or its
 * outcome when it could not be. */
int wl_tatp_update_async(struct wl_client *c, uint64_t s, struct ship_req *q,
                         enum wl_txn t, uint64_t t0)
{
	struct ship_slots *ss = c->ships;
	if (!ss && !(ss = c->ships = calloc(1, sizeof(*ss))))
		return wl_tatp_update(c, s, q);
	while (ss->nused >= c->m->o->ship_window)
		ship_wait_oldest(c, ss);
	struct ship_slot *sl = ss->s;
	while (sl->state != SLOT_FREE)
		sl++;
	*sl = (struct ship_slot){.q = *q,
	                         .t = t,
	                         .to = wl_owner(c->m->o, s),
	                         .state = SLOT_QUEUED,
	                         .order = ss->next_order++,
	                         .t0 = t0};
	ss->nused++;
	ship_queued(c, ss);
	return WL_INFLIGHT;
}

/* ---- the owner's side of a shipped update ----------------------------------
 */

struct ship_ctx {
	struct farm_msg_token tok;
	int answer;
};

static void ship_committed(farm_loop *loop, void *ctx, int outcome)
{
	struct ship_ctx *s = ctx;
	if (outcome)
		wl_unanswered(farm_msg_reply_error(loop, &s->tok, outcome));
	else
		wl_unanswered(
		        farm_msg_reply(loop, &s->tok, &s->answer, sizeof(int)));
	free(s);
}

/* Read both rows here (they must be local), apply, commit; the reply
 * goes when the commit's outcome is known. */
static int ship_run(struct wl_machine *m, farm_loop *loop,
                    const struct ship_req *q, struct ship_ctx *s)
{
	farm_tx *tx;
	const void *a, *b = NULL, *l;
	void *w;
	int rc = farm_tx_begin(m->txm, loop, &tx);
	if (rc)
		return rc;
	rc = farm_tx_read_local(tx, q->l, sizeof(struct tatp_ledger), &l);
	if (!rc && ((const struct tatp_ledger *)l)->seq == q->seq) {
		s->answer = 0; /* applied already: a repeat of a lost reply */
		rc = 1;
		goto answered;
	}
	if (!rc)
		rc = farm_tx_read_local(tx, q->a, size_of(q), &a);
	if (!rc && q->b)
		rc = farm_tx_read_local(tx, q->b, sizeof(struct tatp_sf), &b);
	if (!rc)
		rc = farm_tx_write(tx, q->a, &w);
	if (!rc)
		rc = s->answer = ship_apply(q, w, b);
	if (!rc)
		rc = ledger_note(tx, q);
answered:
	if (rc == 1) { /* nothing to write: answered without a commit */
		farm_tx_free(tx);
		wl_unanswered(
		        farm_msg_reply(loop, &s->tok, &s->answer, sizeof(int)));
		free(s);
		return 0;
	}
	if (!rc)
		rc = farm_tx_commit(tx, ship_committed, s);
	farm_tx_free(tx);
	return rc;
}

void wl_tatp_ship(struct wl_machine *m, farm_loop *loop, const farm_msg_in *in)
{
	struct ship_req q;
	struct ship_ctx *s;
	if (in->len != sizeof(q)) {
		wl_unanswered(farm_msg_reply_error(loop, &in->token, -EINVAL));
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	if (!ship_valid(&q) || !(s = malloc(sizeof(*s)))) {
		wl_unanswered(farm_msg_reply_error(
		        loop, &in->token, ship_valid(&q) ? -ENOMEM : -EINVAL));
		return;
	}
	s->tok = in->token;
	int rc = ship_run(m, loop, &q, s);
	if (rc) {
		wl_unanswered(farm_msg_reply_error(loop, &s->tok, rc));
		free(s);
	}
}
