/*
 * libFuzzer target for transaction recovery's messages at the decider
 * (src/txn/recover.c, wire format src/txn/recover_wire.h): REC_VOTE (a
 * survivor's votes for a removed coordinator's transactions, with region
 * lists), REC_END (a survivor's loop is done voting for a log) and
 * REC_APPLIED (a survivor applied the configuration), from any machine,
 * of any length, in any order. The input is a list of
 * [kind][source machine][length][payload]. The decider's state is set up
 * as after a configuration change that removed machines 3 and 5, so
 * well-formed votes are taken and tallied; the decision itself (which
 * needs the address space's replica lists) is not reached: the harness
 * has more survivors than any input sends ends from.
 */
#include "fuzz_quiet.h"
#include "txn/recover.c"
#include "txn/recover_decide.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint16_t kinds[] = {FARM_MSGT_REC_VOTE, FARM_MSGT_REC_END,
                                 FARM_MSGT_REC_APPLIED};

static void setup(farm_txm *m, uint8_t mode)
{
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->rec.lock, NULL);
	m->me = 0;
	m->T = 2;
	/* Ids past any source an input names (one byte): survivor 299
	 * never applies, so REC_GO is never sent and no message is ever
	 * sent from here. */
	m->M = 300;
	m->rec.gone = calloc(m->M, sizeof(*m->rec.gone));
	m->rec.inc = calloc(m->M, sizeof(*m->rec.inc));
	m->rec.member = calloc(m->M, sizeof(*m->rec.member));
	m->rec.applied_from = calloc(m->M, sizeof(*m->rec.applied_from));
	m->rec.ends = calloc((size_t)m->M * m->T, sizeof(*m->rec.ends));
	m->rec.dends = calloc((size_t)m->M * m->T, sizeof(*m->rec.dends));
	m->rec.acks = calloc((size_t)m->M * m->T, sizeof(*m->rec.acks));
	m->rec.maxlw = calloc((size_t)m->M * m->T, sizeof(*m->rec.maxlw));
	if (!m->rec.gone || !m->rec.inc || !m->rec.member ||
	    !m->rec.applied_from || !m->rec.ends || !m->rec.dends ||
	    !m->rec.acks || !m->rec.maxlw)
		abort();
	m->rec.member[299] = true;
	atomic_store(&m->rec.cfg, 7);
	m->rec.decider = (mode & 1) ? 0 : 1; /* this machine, or not */
	m->rec.gone[3] = m->rec.gone[5] = 6; /* removed before cfg 7 */
	m->rec.member[0] = m->rec.member[1] = m->rec.member[2] = true;
	m->rec.nsurv = 1000; /* never all ends: see the opening comment */
	m->rec.go_sent = (mode & 2) != 0;
	if (!m->rec.go_sent) /* "all applied" would send REC_GO */
		m->rec.applied_from[0] = m->rec.applied_from[1] = 0;
}

static void teardown(farm_txm *m)
{
	farm_txn_rec_fini(m); /* what setup allocated, and the rest NULL */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	static farm_txm m;
	setup(&m, data[0]);
	data++;
	size--;
	while (size >= 4) {
		farm_msg_in in = {0};
		in.type = kinds[data[0] % 3];
		in.src_machine = data[1];
		size_t n = (size_t)data[2] | (size_t)data[3] << 8;
		data += 4;
		size -= 4;
		if (n > size)
			n = size;
		/* An exact-size copy, so ASan sees a read past its end. */
		uint8_t *p = malloc(n ? n : 1);
		if (!p)
			break;
		memcpy(p, data, n);
		in.payload = p;
		in.len = (uint32_t)n;
		data += n;
		size -= n;
		/* REC_APPLIED from every survivor would send REC_GO to them
		 * (a real loop's work): keep one survivor behind. */
		m.rec.applied_from[2] = 0;
		if (in.type == FARM_MSGT_REC_VOTE)
			h_vote(NULL, &in, &m);
		else if (in.type == FARM_MSGT_REC_END)
			h_end(NULL, &in, &m);
		else if (in.src_machine != 2)
			h_applied(NULL, &in, &m);
		free(p);
	}
	for (unsigned i = 0; i < m.rec.nd; i++) /* tallies within bounds */
		if (m.rec.d[i].nregs > REC_MAX_REGS)
			abort();
	teardown(&m);
	return 0;
}
