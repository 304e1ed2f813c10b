/*
 * Three machine processes read and write each other's regions through the
 * shm provider: data round-trips byte for byte and every completion comes
 * through the completion queue.
 *
 * Machine i writes pattern(i, j) into machine j's region at slot i, using
 * requests of many sizes posted as lists with one doorbell, then reads it
 * back. After a barrier (through the parent), each machine checks its own
 * memory holds what the others wrote (no CPU of its own involved), and
 * READs from each peer the slot a third machine wrote.
 */
#include "testutil.h"

#define N     3
#define RSIZE (4u << 20)
#define SLOT  (256u << 10)

struct peers {
	struct {
		uint32_t id;
		char addr[256];
		farm_mr_desc desc;
	} m[N];
};

static uint8_t pattern(uint32_t src, uint32_t dst, size_t i)
{
	return (uint8_t)((i * 131u) ^ (src * 17u + dst * 101u + (i >> 8)));
}

/* Post [off, off+len) of @buf as requests of varying sizes, 8 per
 * doorbell, every 4th signaled; wait for all signaled completions. */
static int transfer(farm_ep *ep, farm_cq *cq, uint16_t op, uint8_t *buf,
                    farm_mr *lmr, const farm_mr_desc *rd, uint64_t roff,
                    size_t len, unsigned *completions)
{
	static const uint32_t sizes[] = {1, 7, 64, 100, 4096, 8192, 777, 65536};
	size_t done = 0;
	unsigned k = 0;
	while (done < len) {
		farm_wr l[8];
		unsigned n = 0, signaled = 0;
		while (n < 8 && done < len) {
			uint32_t sz = sizes[k++ % 8];
			if (sz > len - done)
				sz = (uint32_t)(len - done);
			l[n] = op == FARM_WR_READ
			               ? farm_wr_read(k, buf + done, lmr, sz,
			                              rd, roff + done)
			               : farm_wr_write(k, buf + done, lmr, sz,
			                               rd, roff + done);
			l[n].flags = (n % 4 == 3 || done + sz == len)
			                     ? FARM_WR_SIGNALED
			                     : 0;
			signaled += l[n].flags != 0;
			l[n].next = NULL;
			if (n)
				l[n - 1].next = &l[n];
			done += sz;
			n++;
		}
		if (farm_ep_post(ep, l, NULL))
			return -1;
		while (signaled) {
			farm_wc wc;
			if (!tu_wait_wc(cq, &wc, 5000) || wc.status)
				return -1;
			(*completions)++;
			signaled--;
		}
	}
	return 0;
}

static int machine(farm_fabric *fab, farm_region *r, int in, int out, void *arg)
{
	(void)arg;
	uint32_t me = farm_fabric_machine_id(fab);
	struct peers P;
	if (tu_recv(in, &P, sizeof(P)))
		return 10;
	farm_cq *cq;
	farm_ep *ep[N] = {0};
	uint8_t *src = malloc(SLOT), *dst = malloc(SLOT);
	farm_mr *ls, *ld;
	if (farm_cq_create(fab, 64, 0, &cq) ||
	    farm_mr_reg(fab, src, SLOT, FARM_ACCESS_LOCAL, &ls) ||
	    farm_mr_reg(fab, dst, SLOT, FARM_ACCESS_LOCAL, &ld))
		return 11;
	unsigned completions = 0;
	for (uint32_t j = 0; j < N; j++) {
		if (j == me)
			continue;
		if (farm_ep_connect(fab, cq, j, P.m[j].addr, NULL, &ep[j]))
			return 12;
		for (size_t i = 0; i < SLOT; i++)
			src[i] = pattern(me, j, i);
		if (transfer(ep[j], cq, FARM_WR_WRITE, src, ls, &P.m[j].desc,
		             (uint64_t)me * SLOT, SLOT, &completions))
			return 13;
		memset(dst, 0, SLOT);
		if (transfer(ep[j], cq, FARM_WR_READ, dst, ld, &P.m[j].desc,
		             (uint64_t)me * SLOT, SLOT, &completions))
			return 14;
		if (memcmp(src, dst, SLOT))
			return 15;
	}
	/* Barrier through the parent. */
	char b = 'w';
	if (tu_send(out, &b, 1) || tu_recv(in, &b, 1))
		return 16;
	/* My memory holds what each peer wrote into my region. */
	const uint8_t *mine = farm_region_base(r);
	for (uint32_t i = 0; i < N; i++) {
		if (i == me)
			continue;
		for (size_t k = 0; k < SLOT; k++)
			if (mine[(size_t)i * SLOT + k] != pattern(i, me, k))
				return 17;
	}
	/* READ what a third machine wrote into each peer. */
	for (uint32_t j = 0; j < N; j++) {
		if (j == me)
			continue;
		uint32_t third = 3 - me - j; /* the one that is neither */
		memset(dst, 0, SLOT);
		if (transfer(ep[j], cq, FARM_WR_READ, dst, ld, &P.m[j].desc,
		             (uint64_t)third * SLOT, SLOT, &completions))
			return 18;
		for (size_t k = 0; k < SLOT; k++)
			if (dst[k] != pattern(third, j, k))
				return 19;
	}
	/* Unsignaled successes must not have produced completions. */
	farm_wc stray;
	if (farm_cq_poll(cq, 1, &stray) != 0)
		return 23;
	if (tu_send(out, &completions, sizeof(completions)))
		return 20;
	if (tu_recv(in, &b, 1)) /* stay up until everyone is done */
		return 21;
	for (uint32_t j = 0; j < N; j++)
		farm_ep_destroy(ep[j]);
	if (farm_cq_destroy(cq))
		return 22;
	farm_mr_dereg(ls);
	farm_mr_dereg(ld);
	free(src);
	free(dst);
	return 0;
}

static void test_three_machines(void **state)
{
	(void)state;
	struct tu_machine m[N];
	struct peers P;
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(tu_spawn(&m[i], i, RSIZE, machine, NULL), 0);
		P.m[i].id = i;
		memcpy(P.m[i].addr, m[i].addr, sizeof(P.m[i].addr));
		P.m[i].desc = m[i].desc;
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(tu_send(m[i].to, &P, sizeof(P)), 0);
	char b;
	for (int i = 0; i < N; i++)
		assert_int_equal(tu_recv(m[i].from, &b, 1), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(tu_send(m[i].to, "g", 1), 0);
	for (int i = 0; i < N; i++) {
		unsigned c = 0;
		assert_int_equal(tu_recv(m[i].from, &c, sizeof(c)), 0);
		assert_true(c > 0);
		printf("machine %d: %u completions through its CQ\n", i, c);
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(tu_send(m[i].to, "d", 1), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(tu_finish(&m[i]), 0);
}

int main(void)
{
	tu_require_provider();
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_three_machines),
	};
	return cmocka_run_group_tests_name("fabric_multiproc", tests, NULL,
	                                   NULL);
}
