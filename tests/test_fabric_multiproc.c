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

/* One machine process's state: its peers, its CQ and endpoints, and
 * the registered buffers it writes from and reads into. */
struct mach {
	uint32_t me;
	struct peers P;
	farm_cq *cq;
	farm_ep *ep[N];
	uint8_t *src, *dst;
	farm_mr *ls, *ld;
	unsigned completions;
};

/* Writes pattern(me, j) into each peer j's region at slot me and reads
 * it back; returns 0 or the machine's exit code. */
static int write_peers(farm_fabric *fab, struct mach *m)
{
	for (uint32_t j = 0; j < N; j++) {
		if (j == m->me)
			continue;
		if (farm_ep_connect(fab, m->cq, j, m->P.m[j].addr, NULL,
		                    &m->ep[j]))
			return 12;
		for (size_t i = 0; i < SLOT; i++)
			m->src[i] = pattern(m->me, j, i);
		if (transfer(m->ep[j], m->cq, FARM_WR_WRITE, m->src, m->ls,
		             &m->P.m[j].desc, (uint64_t)m->me * SLOT, SLOT,
		             &m->completions))
			return 13;
		memset(m->dst, 0, SLOT);
		if (transfer(m->ep[j], m->cq, FARM_WR_READ, m->dst, m->ld,
		             &m->P.m[j].desc, (uint64_t)m->me * SLOT, SLOT,
		             &m->completions))
			return 14;
		if (memcmp(m->src, m->dst, SLOT))
			return 15;
	}
	return 0;
}

/* My memory holds what each peer wrote into my region; returns 0 or the
 * machine's exit code. */
static int check_mine(const struct mach *m, farm_region *r)
{
	const uint8_t *mine = farm_region_base(r);
	for (uint32_t i = 0; i < N; i++) {
		if (i == m->me)
			continue;
		for (size_t k = 0; k < SLOT; k++)
			if (mine[(size_t)i * SLOT + k] != pattern(i, m->me, k))
				return 17;
	}
	return 0;
}

/* READ what a third machine wrote into each peer; returns 0 or the
 * machine's exit code. */
static int read_thirds(struct mach *m)
{
	for (uint32_t j = 0; j < N; j++) {
		if (j == m->me)
			continue;
		uint32_t third = 3 - m->me - j; /* the one that is neither */
		memset(m->dst, 0, SLOT);
		if (transfer(m->ep[j], m->cq, FARM_WR_READ, m->dst, m->ld,
		             &m->P.m[j].desc, (uint64_t)third * SLOT, SLOT,
		             &m->completions))
			return 18;
		for (size_t k = 0; k < SLOT; k++)
			if (m->dst[k] != pattern(third, j, k))
				return 19;
	}
	return 0;
}

/* Reports the completions, waits for everyone to be done, tears down;
 * returns 0 or the machine's exit code. */
static int finish(struct mach *m, int in, int out)
{
	/* Unsignaled successes must not have produced completions. */
	farm_wc stray;
	if (farm_cq_poll(m->cq, 1, &stray) != 0)
		return 23;
	if (tu_send(out, &m->completions, sizeof(m->completions)))
		return 20;
	char b;
	if (tu_recv(in, &b, 1)) /* stay up until everyone is done */
		return 21;
	for (uint32_t j = 0; j < N; j++)
		farm_ep_destroy(m->ep[j]);
	if (farm_cq_destroy(m->cq))
		return 22;
	farm_mr_dereg(m->ls);
	farm_mr_dereg(m->ld);
	free(m->src);
	free(m->dst);
	return 0;
}

static int machine(farm_fabric *fab, farm_region *r, int in, int out, void *arg)
{
	(void)arg;
	struct mach m = {.me = farm_fabric_machine_id(fab)};
	if (tu_recv(in, &m.P, sizeof(m.P)))
		return 10;
	m.src = malloc(SLOT);
	m.dst = malloc(SLOT);
	if (farm_cq_create(fab, 64, 0, &m.cq) ||
	    farm_mr_reg(fab, m.src, SLOT, FARM_ACCESS_LOCAL, &m.ls) ||
	    farm_mr_reg(fab, m.dst, SLOT, FARM_ACCESS_LOCAL, &m.ld))
		return 11;
	int rc = write_peers(fab, &m);
	if (rc)
		return rc;
	/* Barrier through the parent. */
	char b = 'w';
	if (tu_send(out, &b, 1) || tu_recv(in, &b, 1))
		return 16;
	rc = check_mine(&m, r);
	if (!rc)
		rc = read_thirds(&m);
	return rc ? rc : finish(&m, in, out);
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
