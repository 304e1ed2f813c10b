/*
 * farm_tx_run (include/farm/txn.h): the retry loop every application would
 * otherwise write by hand around a transaction, as FoundationDB's
 * fdb_transaction_on_error does for its users. It is built only on the
 * public transaction calls, so it adds no state to the transaction.
 *
 * Between tries it backs off for a random time that doubles per try, up to
 * a cap, while driving the loop (farm_loop_wait): a conflict between two
 * machines that retry in lock step would otherwise repeat, and the loop
 * must keep serving the messages other machines send this one (it may be a
 * participant of the very transaction it conflicts with).
 */
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include <farm/txn.h>

enum {
	RUN_BACKOFF_MIN_NS = 2000,
	RUN_BACKOFF_MAX_NS = 16 * 1000 * 1000,
};

static uint64_t run_rand(uint64_t *s)
{
	/* xorshift64: only spreads the backoff of contending machines. */
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static uint64_t run_seed(const void *ctx)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
	             (uint64_t)(uintptr_t)ctx ^ (uint64_t)(uintptr_t)&ts;
	return s ? s : 0x9e3779b97f4a7c15ull;
}

/* One try: begin, the body, commit (or abort when the body failed). */
static int run_once(farm_txm *m, farm_loop *loop, farm_tx_body_fn body,
                    void *ctx)
{
	farm_tx *tx;
	int rc = farm_tx_begin(m, loop, &tx);
	if (rc)
		return rc;
	rc = body(tx, ctx);
	/* No deadline of the wrapper's own on the commit: one that gave up
	 * would leave the outcome unknown, and retrying it could commit the
	 * body twice. The commit's own -ETIMEDOUT means it did not commit. */
	if (rc == 0)
		rc = farm_tx_commit_sync_timed(tx, 0);
	else if (rc > 0)
		rc = -EINVAL; /* the body broke its contract */
	farm_tx_free(tx);     /* aborts a transaction the body gave up */
	return rc;
}

int farm_tx_run(farm_txm *m, farm_loop *loop, farm_tx_body_fn body, void *ctx,
                unsigned max_tries)
{
	if (!m || !loop || !body)
		return -EINVAL;
	if (max_tries == 0)
		max_tries = FARM_TX_RUN_TRIES;
	uint64_t seed = run_seed(ctx);
	uint64_t cap = RUN_BACKOFF_MIN_NS;
	for (unsigned t = 1;; t++) {
		int rc = run_once(m, loop, body, ctx);
		if (rc == 0 || !farm_tx_retryable(rc) || t >= max_tries)
			return rc;
		static const volatile int never;
		uint64_t wait = cap / 2 + run_rand(&seed) % (cap / 2 + 1);
		int w = farm_loop_wait(loop, &never, wait);
		if (w != -ETIMEDOUT)
			return w ? w : rc; /* called from a handler: -EDEADLK */
		if (cap < RUN_BACKOFF_MAX_NS)
			cap *= 2;
	}
}
