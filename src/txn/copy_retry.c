/*
 * Data recovery's answer to a block table it cannot read (copy.c
 * describes the whole). A copy reads the source's header and block table
 * before the objects (farm_alloc_block_layout says where they are); a
 * table refused there is usually one being written while it was READ
 * (a run's words are not written in one store), which a re-read
 * settles, so the first DR_BAD_FAST re-reads come at once. A table that
 * stays bad is damaged, forged, or its source keeps answering garbage:
 * reading it again at the pace would spin for good (a local source, our
 * demoted copy, is read unpaced on the loop) and log a line a read. So
 * later re-reads wait, twice as long each time up to DR_BAD_WAIT_MAX_NS
 * (the engine skips the region until g->bad_at, and parks when every
 * copy waits). At DR_BAD_MAX reads in a row a demoted copy is given up
 * for the primary, as when an object stays locked there (copy.c,
 * local_stuck). The primary is not given up: it is the only source, and
 * a copy stopped would leave the region a replica short until some
 * configuration change sent COPY again, which a stable cluster never
 * does; a table that heals (a primary slow to finish a write, or
 * repaired) must still be copied. So the copy stalls instead: its table
 * is read again once per DR_BAD_STALL_NS, counted once in
 * datarec_stalled and said as an error, and the copy goes on as soon as
 * it reads whole. A read a second costs nothing a host notices. The
 * filling copy meanwhile is held and never promoted (it is not
 * complete). Nothing committed is touched: the copy had written only
 * objects whose layout the table gave.
 *
 * The log: one line at the first bad read of a copy, then while the
 * table stays bad one summary per DR_BAD_SAY_NS with the count, one when
 * the copy stalls, then one per DR_BAD_STALL_SAY_NS; one when it reads
 * whole again; the copy's last line (replicated here) carries the total.
 */
#include <inttypes.h>

#include "txn/txn_int.h"
#include "txn/txn_testing.h"
#include "txn/copy_int.h"
#include "util/fault.h"
#include "util/log.h"

/* The wait before the re-read that follows the @n-th bad read in a row
 * (n > DR_BAD_FAST). */
static uint64_t wait_for(unsigned n)
{
	unsigned k = n - DR_BAD_FAST - 1;
	if (k >= 20)
		return DR_BAD_WAIT_MAX_NS;
	return FARM_MIN(DR_BAD_WAIT_NS << k, DR_BAD_WAIT_MAX_NS);
}

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* The log, rate-limited: the first bad read of the copy, then one line a
 * DR_BAD_SAY_NS while it stays bad. */
static void say(struct dr_reg *g, uint64_t now)
{
	if (g->bad_total == 1) {
		farm_warn("datarec: region %#" PRIx32 ": bad block table at "
		          "block %" PRIu32 " (%s): read again (a summary "
		          "each second while it stays bad)",
		          g->id, g->bad_block, farm_strerror(g->bad_err));
		g->bad_said = now;
		g->bad_unsaid = 0;
		return;
	}
	g->bad_unsaid++;
	uint64_t every = g->bad_stalled ? DR_BAD_STALL_SAY_NS : DR_BAD_SAY_NS;
	if (g->bad_n < 2 || now - g->bad_said < every)
		return;
	farm_warn("datarec: region %#" PRIx32 ": block table still bad at "
	          "block %" PRIu32 " (%s): %u reads in a row over %.1f s, "
	          "%" PRIu64 " bad reads since the last line",
	          g->id, g->bad_block, farm_strerror(g->bad_err), g->bad_n,
	          secs(now - g->bad_t0), g->bad_unsaid);
	g->bad_said = now;
	g->bad_unsaid = 0;
}

/* DR_BAD_MAX reads in a row or more: our demoted copy is given up for
 * the primary; the primary's table is read again once per
 * DR_BAD_STALL_NS (said and counted once). */
static int past_bound(struct farm_datarec *dr, struct dr_reg *g, bool local,
                      uint64_t now)
{
	if (local) {
		farm_warn("datarec: region %#" PRIx32 ": the block table of "
		          "this machine's demoted copy stayed bad at block "
		          "%" PRIu32 " (%s) for %u reads; the copy goes on "
		          "from the primary",
		          g->id, g->bad_block, farm_strerror(g->bad_err),
		          g->bad_n);
		g->remote = true;
		g->bad_n = 0;
		g->bad_at = 0;
		return DR_BAD_LATER;
	}
	if (!g->bad_stalled) {
		farm_err("datarec: region %#" PRIx32 ": the primary's block "
		         "table stayed bad at block %" PRIu32 " (%s) for %u "
		         "reads over %.1f s; the copy stalls (the region a "
		         "replica short), reading it again once a second until "
		         "it reads whole",
		         g->id, g->bad_block, farm_strerror(g->bad_err),
		         g->bad_n, secs(now - g->bad_t0));
		g->bad_stalled = true;
		g->bad_said = now;
		g->bad_unsaid = 0;
		dr->stalled++;
	}
	g->bad_at = now + DR_BAD_STALL_NS;
	return DR_BAD_LATER;
}

int farm_txn_dr_bad_table(struct farm_datarec *dr, struct dr_reg *g, uint32_t b,
                          int err, bool local, uint64_t now)
{
	/* In a row whatever the block: a source answering garbage names
	 * another each time, and a streak per block never ended. */
	if (!g->bad_n)
		g->bad_t0 = now;
	g->bad_block = b;
	g->bad_n++;
	g->bad_total++;
	g->bad_err = err;
	g->retries++;
	if (FARM_FAULT_SWITCH(FARM_FP_DATAREC_BAD_UNBOUNDED)) {
		/* Broken on purpose: the code before the bound. */
		farm_err("datarec: region %#" PRIx32 ": bad block table "
		         "at block %" PRIu32 " (%s): read again",
		         g->id, b, farm_strerror(err));
		return DR_BAD_NOW;
	}
	say(g, now);
	if (g->bad_n <= DR_BAD_FAST)
		return DR_BAD_NOW;
	if (g->bad_n >= DR_BAD_MAX)
		return past_bound(dr, g, local, now);
	g->bad_at = now + wait_for(g->bad_n);
	return DR_BAD_LATER;
}

void farm_txn_dr_bad_settled(struct dr_reg *g, uint64_t now)
{
	if (g->bad_stalled)
		farm_warn("datarec: region %#" PRIx32 ": the primary's block "
		          "table read whole again after %u bad reads over "
		          "%.1f s; the copy goes on",
		          g->id, g->bad_n, secs(now - g->bad_t0));
	else if (g->bad_n > DR_BAD_FAST)
		farm_info("datarec: region %#" PRIx32 ": block table read "
		          "whole again after %u bad reads over %.1f s",
		          g->id, g->bad_n, secs(now - g->bad_t0));
	g->bad_n = 0;
	g->bad_at = 0;
	g->bad_stalled = false;
}

void farm_txn_testing_datarec_bad_bound(unsigned *reads, uint64_t *wait_ns)
{
	uint64_t sum = 0;
	for (unsigned n = DR_BAD_FAST + 1; n < DR_BAD_MAX; n++)
		sum += wait_for(n);
	*reads = DR_BAD_MAX;
	*wait_ns = sum;
}
