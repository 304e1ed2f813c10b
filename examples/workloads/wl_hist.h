/*
 * fwl's history files: each client appends, with one write(2) each (so a
 * machine killed mid-run leaves every record it finished), a begin record
 * with a transaction's operations before it commits and an end record
 * with its outcome after. A begin record without its end is a
 * transaction whose outcome nobody learned. tests/wl_histcheck.c reads
 * them into the serializability checker.
 */
#ifndef FWL_WL_HIST_H
#define FWL_WL_HIST_H

#include <stdint.h>

#define WL_HIST_MAX_OPS 8

struct wl_hrec {
	uint32_t kind; /* 'B' or 'E' */
	uint32_t n;    /* 'B': operations that follow; 'E': 1 committed,
	                  2 aborted */
	uint64_t seq;  /* the client's transaction number */
	uint64_t t_ns; /* 'B': invocation; 'E': completion (monotonic) */
};
struct wl_hop {
	uint64_t key, ver;
	uint32_t write, pad;
};

#endif
