/*
 * The wire format of transaction recovery's messages (recover.c; the
 * FARM_MSGT_REC_* types are in txm.h). Every message carries the
 * configuration id it belongs to. Internal; tests use it to forge bad
 * ones.
 */
#ifndef FARM_TXN_RECOVER_WIRE_H
#define FARM_TXN_RECOVER_WIRE_H

#include <stdint.h>

/* V_DEC_*: not a record but a decision this survivor applied in an
 * earlier round that did not end everywhere (recover_kept.c). */
enum {
	V_LOCK = 1,
	V_REFUSED = 2,
	V_CP = 4,
	V_ABORT = 8,
	V_CB = 16,
	V_DEC_COMMIT = 32,
	V_DEC_ABORT = 64
};
enum { A_COMMIT = 1, A_ABORT = 2, A_FINISHED = 3 };

struct rec_q { /* REC_QUERY and REC_ANSWER */
	uint64_t cfg;
	uint64_t txid;
	uint32_t answer; /* A_*; 0 in a query */
	uint32_t pad;
};

struct rec_vote { /* REC_VOTE, then nregs + ncb region ids */
	uint64_t cfg;
	uint64_t txid;
	uint64_t cseq;
	uint32_t coord;
	uint32_t flags;
	uint16_t nregs, ncb;
	uint32_t tcfg; /* V_CB: the configuration its record carries (the
	                  one the coordinator sent the COMMIT-BACKUPs in) */
};

/* REC_END (flags: END_DONE, END_APPLIED) and REC_DONE (DONE_ALL,
 * DONE_ASK); REC_APPLIED and REC_GO use cfg alone. */
enum {
	/* An end from a survivor that emptied this log in an earlier round:
	 * its votes are the decisions it applied (recover_kept.c). */
	END_DONE = 1,
	/* Not an end of votes: the answer to a DONE_ASK, every decision of
	 * the log logged and applied here. */
	END_APPLIED = 2,
	/* Every survivor's end was END_DONE: no one needs the kept
	 * decisions of this log any more. */
	DONE_ALL = 1,
	/* Every decision of the log was sent: answer END_APPLIED, and keep
	 * the log (its records and the decisions logged in it) until the
	 * REC_DONE without this flag. */
	DONE_ASK = 2
};
struct rec_end {
	uint64_t cfg;
	uint64_t lw;
	uint32_t coord, thread;
	uint32_t flags, pad;
};

struct rec_dec { /* REC_DECIDE */
	uint64_t cfg;
	uint64_t txid;
	uint32_t coord;
	uint32_t commit;
};

#endif
