/*
 * One-sided requests of a zombie (test_rec_zombie; tests/campaign/,
 * zombie_reuse):
 * while it is still a member, a machine resolves one account at each of
 * ZP_TARGETS other primaries and runs a READ and a CAS that changes
 * nothing there (the control: each must execute); once it was removed
 * and its id taken by a new holder, it runs a READ, a WRITE of the
 * account's line 0 (a balance of 1,000,000) and a CAS of its header to
 * locked at each, on endpoints of their own: each must fail with
 * FARM_EFENCED, none may execute (the fabric's fence itself, whatever
 * messaging concluded about the peer). Defined in zprobe.c.
 */
#ifndef FARM_TESTS_ZPROBE_H
#define FARM_TESTS_ZPROBE_H

#include "txproc.h"

#define ZP_TARGETS 3

enum { ZP_READ, ZP_WRITE, ZP_CAS, ZP_NOPS };

/* Outcomes of the requests, per kind. */
struct zp_counts {
	unsigned executed[ZP_NOPS], fenced[ZP_NOPS], other[ZP_NOPS];
	int other_err;
};

struct zprobe {
	farm_cq *cq;
	farm_mr *lmr;
	uint8_t *buf; /* 64 per target: line 0; then 8 per target: CAS */
	struct zp_target {
		uint32_t machine;
		char addr[FARM_ENDPOINT_MAX];
		farm_gaddr a;
		farm_mr_desc d;
		uint64_t hdr; /* the header word the control READ saw */
	} t[ZP_TARGETS];
};

/* Pick the targets among @acc (@nacc accounts) and run the control into
 * @control. 0, or -1 (too few remote primaries, or no resources). */
int zp_prepare(struct zprobe *z, struct tx_child *c, const farm_fatptr *acc,
               unsigned nacc, struct zp_counts *control);

/* The READ, WRITE and CAS at every target, into @pc. */
void zp_run(struct zprobe *z, struct tx_child *c, struct zp_counts *pc);

/* A line "zombie's requests <when>: ..." on stdout. */
void zp_print(const char *when, const struct zp_counts *p);

/* "READ", "WRITE", "CAS". */
const char *zp_op_name(int op);

void zp_free(struct zprobe *z);

#endif
