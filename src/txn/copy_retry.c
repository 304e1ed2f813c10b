/*
 * Data recovery's re-reads (copy.c describes the whole): of a block table
 * it cannot read, and of an object a step stopped at (below).
 *
 * A block table. A copy reads the source's header and block table
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
 *
 * An object locked or torn at the source. A step stops at such an
 * object and the copy reads it again from there (copy.c, apply_obj): a
 * copy cannot pass it, since an object it took while locked may be
 * undone at the same version. Nearly always the lock is brief: an
 * install takes microseconds, a single-machine commit's shared lock
 * lasts until its COMMIT-BACKUPs are written, a lock recovery took for
 * an undecided transaction lasts until it is decided (SOSP'15 5.3-5.4:
 * locks are recovered before data recovery begins, and the decision
 * follows within the round). So the first DR_STUCK_FAST re-reads come
 * at the pace, as before. A lock that outlasts them is held by
 * something slow or wrong: a coordinator that died mid-commit whose
 * recovery has not run yet (its round releases it), or a bug; at a
 * primary nothing but that holder's end can release it. Reading it at
 * the pace meanwhile spent the copy's whole credit on the same bytes
 * (one READ a tick, 500 a second at FaRM's pace, each waking the engine
 * and the loop) for as long as it lasted, and said one line after 2 s
 * and nothing after. So later re-reads wait, as a bad table's do
 * (doubling from DR_BAD_WAIT_NS to DR_BAD_WAIT_MAX_NS; the engine skips
 * the copy until g->stuck_at and parks when every copy waits): about
 * four reads a second once the waits are at their ceiling, and the copy
 * goes on within a quarter second of the release. A copy from the
 * primary is never given up for it (it is the only source, and the
 * lock's release, not a new configuration, is what a stable cluster
 * gets: a copy stopped would leave the region a replica short for
 * good). Our demoted copy is: an object locked there for
 * DR_LOCAL_STUCK_NS is read from the primary instead (an older
 * configuration's lock there may wait for an adoption that never
 * comes). Each re-read is counted (datarec_stuck_reads); the log says
 * the streak once it lasted DR_STUCK_SAY_NS, then at most one summary
 * per DR_STUCK_SUMMARY_NS, and once when the copy gets past the object.
 */
#include <inttypes.h>

#include "txn/txn_int.h"
#include "txn/txn_testing.h"
#include "txn/copy_int.h"
#include "util/fault.h"
#include "util/log.h"

/* The @k-th wait in a row (0 first): doubling from DR_BAD_WAIT_NS to
 * DR_BAD_WAIT_MAX_NS. */
static uint64_t backoff(uint64_t k)
{
	if (k >= 20)
		return DR_BAD_WAIT_MAX_NS;
	return FARM_MIN(DR_BAD_WAIT_NS << k, DR_BAD_WAIT_MAX_NS);
}

/* The wait before the re-read that follows the @n-th bad read in a row
 * (n > DR_BAD_FAST). */
static uint64_t wait_for(unsigned n)
{
	return backoff(n - DR_BAD_FAST - 1);
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
	if (local && !FARM_FAULT_SWITCH(FARM_FP_DATAREC_NO_LOCAL_FALLBACK)) {
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

/* ---- an object a step stopped at ---------------------------------------- */

/* The log of a stuck object, rate-limited: once the streak lasted
 * DR_STUCK_SAY_NS, then one summary per DR_STUCK_SUMMARY_NS. */
static void stuck_say(struct dr_reg *g, bool local, uint64_t now)
{
	g->stuck_unsaid++;
	uint64_t since = g->stuck_said ? g->stuck_said : g->stuck_t0;
	uint64_t every = g->stuck_said ? DR_STUCK_SUMMARY_NS : DR_STUCK_SAY_NS;
	if (now - since < every)
		return;
	farm_warn("datarec: region %#" PRIx32 ": the object at offset "
	          "%#" PRIx64 " has been locked or torn at %s for %.1f s "
	          "(%" PRIu64 " reads in a row, %" PRIu64 " since the last "
	          "line); read again, at most four times a second",
	          g->id, g->stuck_off,
	          local ? "this machine's demoted copy" : "the source",
	          secs(now - g->stuck_t0), g->stuck_n, g->stuck_unsaid);
	g->stuck_said = now;
	g->stuck_unsaid = 0;
}

/* A stuck streak over: nothing waits, nothing said. */
static void stuck_reset(struct dr_reg *g)
{
	g->stuck_n = 0;
	g->stuck_at = 0;
	g->stuck_said = 0;
	g->stuck_unsaid = 0;
}

void farm_txn_dr_stuck(struct farm_datarec *dr, struct dr_reg *g, uint64_t off,
                       bool local, uint64_t now)
{
	g->retries++;
	dr->stuck_reads++;
	if (g->stuck_n && g->stuck_off != off)
		farm_txn_dr_stuck_settled(g, now);
	if (!g->stuck_n) {
		g->stuck_off = off;
		g->stuck_t0 = now;
	}
	g->stuck_n++;
	stuck_say(g, local, now);
	if (local && now - g->stuck_t0 >= DR_LOCAL_STUCK_NS &&
	    !FARM_FAULT_SWITCH(FARM_FP_DATAREC_NO_LOCAL_FALLBACK)) {
		farm_warn("datarec: region %#" PRIx32 ": the object at offset "
		          "%#" PRIx64
		          " stayed locked in this machine's demoted "
		          "copy for %.1f s (%" PRIu64 " reads); the copy goes "
		          "on from the primary",
		          g->id, off, secs(now - g->stuck_t0), g->stuck_n);
		g->remote = true;
		stuck_reset(g);
		return;
	}
	if (g->stuck_n <= DR_STUCK_FAST ||
	    FARM_FAULT_SWITCH(FARM_FP_DATAREC_STUCK_UNPACED)) {
		g->stuck_at = 0; /* at the pace: the next tick */
		return;
	}
	g->stuck_at = now + backoff(g->stuck_n - DR_STUCK_FAST - 1);
}

void farm_txn_dr_stuck_settled(struct dr_reg *g, uint64_t now)
{
	if (g->stuck_said) /* closes the warning said */
		farm_warn("datarec: region %#" PRIx32 ": the object at offset "
		          "%#" PRIx64 " read whole and unlocked after %" PRIu64
		          " reads over %.1f s; the copy goes on",
		          g->id, g->stuck_off, g->stuck_n,
		          secs(now - g->stuck_t0));
	stuck_reset(g);
}

uint64_t farm_txn_testing_datarec_stuck_bound(uint64_t ns)
{
	uint64_t reads = DR_STUCK_FAST + 1, sum = 0;
	for (uint64_t k = 0;; k++) {
		sum += backoff(k);
		if (sum > ns)
			return reads;
		reads++;
	}
}
