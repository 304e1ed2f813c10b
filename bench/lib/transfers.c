/*
 * The bank-transfer workload shared by recovery_bench and datarec_bench
 * (transfers.h).
 */
#include "transfers.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "benchutil.h"

int bx_create(farm_txm *txm, farm_loop *loop, unsigned n, uint32_t size,
              int64_t init, farm_fatptr *out)
{
	uint8_t buf[1024] = {0};
	struct bx_acct a = {.balance = init};
	memcpy(buf, &a, sizeof(a));
	for (unsigned done = 0; done < n;) {
		unsigned k = BU_MIN(16u, n - done);
		farm_tx *tx;
		int rc = farm_tx_begin(txm, loop, &tx);
		if (rc)
			return rc;
		for (unsigned j = 0; j < k && !rc; j++) {
			void *d;
			farm_fatptr p;
			rc = farm_tx_alloc_sync(tx, size, FARM_GADDR_NULL,
			                        out ? &out[done + j] : &p, &d);
			if (!rc)
				memcpy(d, buf, BU_MIN(size, sizeof(buf)));
		}
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (rc == 0)
			done += k;
		else if (!farm_tx_retryable(rc))
			return rc;
	}
	return 0;
}

static void pair_landed(struct bx_pair *p, int status, const void *data,
                        struct bx_acct *into)
{
	if (status && !p->err)
		p->err = status;
	if (!status)
		memcpy(into, data, sizeof(*into));
	if (!--p->pending)
		p->done(p);
}

static void read_a(farm_tx *tx, void *ctx, int status, const void *data,
                   uint32_t size)
{
	(void)tx;
	(void)size;
	pair_landed(ctx, status, data, &((struct bx_pair *)ctx)->a);
}

static void read_b(farm_tx *tx, void *ctx, int status, const void *data,
                   uint32_t size)
{
	(void)tx;
	(void)size;
	pair_landed(ctx, status, data, &((struct bx_pair *)ctx)->b);
}

void bx_pair_read(struct bx_pair *p, farm_gaddr a, farm_gaddr b)
{
	int rc;
	p->err = 0;
	p->pending = 3; /* two reads, and one held until both are issued */
	if ((rc = farm_tx_read(p->tx, a, sizeof(p->a), read_a, p))) {
		p->err = rc;
		p->pending--;
	}
	if ((rc = farm_tx_read(p->tx, b, sizeof(p->b), read_b, p))) {
		p->err = p->err ? p->err : rc;
		p->pending--;
	}
	if (!--p->pending)
		p->done(p);
}

int bx_pair_write(struct bx_pair *p, farm_gaddr a, farm_gaddr b, int64_t amt)
{
	void *wa, *wb;
	int rc;
	if ((rc = farm_tx_write(p->tx, a, &wa)) ||
	    (rc = farm_tx_write(p->tx, b, &wb)))
		return rc;
	p->a.balance -= amt;
	p->a.ctr++;
	p->b.balance += amt;
	p->b.ctr++;
	memcpy(wa, &p->a, sizeof(p->a));
	memcpy(wb, &p->b, sizeof(p->b));
	return 0;
}

uint64_t bx_backoff(unsigned *tries)
{
	uint64_t at = bu_now_ns() + (1000ull << BU_MIN(*tries, 10u));
	(*tries)++;
	return at;
}

void bx_slots_pass(farm_loop *loop, void *slots, size_t size, unsigned n,
                   uint64_t now, void (*start)(void *slot))
{
	static const volatile int never = 0;
	uint64_t next = now + 1000000ull;
	for (unsigned i = 0; i < n; i++) {
		struct bx_slot *s =
		        (struct bx_slot *)((char *)slots + (size_t)i * size);
		if (s->busy)
			continue;
		if (s->retry_at <= now)
			start(s);
		else
			next = BU_MIN(next, s->retry_at);
	}
	(void)farm_loop_wait(loop, &never, next > now ? next - now : 1000);
}

int bx_slots_drain(farm_loop *loop, const unsigned *busy)
{
	static const volatile int never = 0;
	uint64_t dl = bu_now_ns() + 10000000000ull;
	while (*busy && bu_now_ns() < dl)
		(void)farm_loop_wait(loop, &never, 1000000ull);
	return *busy ? -ETIMEDOUT : 0;
}
