/*
 * The wire format of transaction recovery's messages (recover.c; the
 * FARM_MSGT_REC_* types are in txm.h). Every message carries the
 * configuration id it belongs to. Internal; tests use it to forge bad
 * ones.
 */
#ifndef FARM_TXN_RECOVER_WIRE_H
#define FARM_TXN_RECOVER_WIRE_H

#include <stdint.h>

enum { V_LOCK = 1, V_REFUSED = 2, V_CP = 4, V_ABORT = 8, V_CB = 16 };
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

struct rec_end { /* REC_END and REC_DONE */
	uint64_t cfg;
	uint64_t lw;
	uint32_t coord, thread;
};

struct rec_dec { /* REC_DECIDE */
	uint64_t cfg;
	uint64_t txid;
	uint32_t coord;
	uint32_t commit;
};

#endif
