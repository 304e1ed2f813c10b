/*
 * The bank-transfer workload shared by recovery_bench and datarec_bench:
 * an account's layout, making accounts (and filler objects), the two
 * reads of a transfer and its two writes, and the closed loop over the
 * operations in flight (bringing the cluster up: benchcluster.h). What
 * each benchmark counts around a transfer
 * (buckets, commit logs, retry statistics) stays in its own file: only
 * the mechanics are here, so that both measure the same transaction.
 */
#ifndef FARM_BENCH_TRANSFERS_H
#define FARM_BENCH_TRANSFERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <farm/farm.h>
#include <farm/txn.h>

struct bx_acct {
	int64_t balance;
	uint64_t ctr; /* committed transfers that wrote it */
};

/* @n objects of @size bytes, in transactions of 16 (retried while
 * retryable); each starts with a struct bx_acct of balance @init, the
 * rest zero. Their pointers go to @out unless it is NULL (filler). */
int bx_create(farm_txm *txm, farm_loop *loop, unsigned n, uint32_t size,
              int64_t init, farm_fatptr *out);

/* A transfer's two reads in flight. Embed it; @done runs once both have
 * landed or failed to post (err: the first failure; a, b: what was
 * read), possibly before bx_pair_read returns. */
struct bx_pair {
	farm_tx *tx;
	unsigned pending;
	int err;
	struct bx_acct a, b;
	void (*done)(struct bx_pair *p);
};

/* Reads the accounts at @a and @b in p->tx (begun by the caller). */
void bx_pair_read(struct bx_pair *p, farm_gaddr a, farm_gaddr b);

/* Moves @amt from a to b, bumps both counters and writes both into
 * p->tx; the caller commits. */
int bx_pair_write(struct bx_pair *p, farm_gaddr a, farm_gaddr b, int64_t amt);

/* When a transfer that failed retryably runs again: an exponential
 * backoff from 1 us to about 1 ms over *@tries, which it bumps. */
uint64_t bx_backoff(unsigned *tries);

/* What the closed loop reads of an operation slot: the first member of
 * each benchmark's own slot. */
struct bx_slot {
	bool busy;         /* an operation in flight */
	uint64_t retry_at; /* ns: when an idle one starts again */
};

/* One pass of a closed loop over @n slots of @size bytes at @slots:
 * starts the idle ones whose time has come (@start), then serves @loop
 * until the next is due (1 ms at most after @now). */
void bx_slots_pass(farm_loop *loop, void *slots, size_t size, unsigned n,
                   uint64_t now, void (*start)(void *slot));

/* After the loop: serves @loop until *@busy operations have ended, 10 s
 * at most; -ETIMEDOUT if some never did (their slots may still be used
 * by continuations: the caller must not free them). */
int bx_slots_drain(farm_loop *loop, const unsigned *busy);

#endif
