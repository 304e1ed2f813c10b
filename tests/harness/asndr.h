/*
 * Data recovery on the in-process machines of asnodes.h (cluster C of
 * asntx.h), for the tests of a copy's re-reads (test_datarec_retry,
 * test_datarec_demoted, test_datarec_stuck): views the test sets itself,
 * a copy's record, and the log captured while a copy runs. Defined in
 * asndr.c.
 */
#ifndef FARM_TESTS_ASNDR_H
#define FARM_TESTS_ASNDR_H

#include "asntx.h"

#include "addrspace/ring.h"

/* Machine index @m's record of its copy of @region (false: none). */
bool dr_copy_of(unsigned m, uint32_t region, struct farm_datarec_region *d);

/* Machines @ms (@n, indexes = id - 1) take configuration @cid with that
 * placement (late members included); @gone removed (0: none). Pumped
 * until each has finished its recovery round (bounded), then each told
 * of the view (farm_txm_datarec_view). */
void dr_reconfigure_placed(uint64_t cid, const struct farm_ring_machine *ms,
                           unsigned n, uint32_t gone);
/* The same with ordinary members @ids. */
void dr_reconfigure(uint64_t cid, const uint32_t *ids, unsigned n,
                    uint32_t gone);

/* Pump until machine index @m's copy of @region started at @after or
 * later (monotonic ns; a copy started again keeps its record) has been
 * read again @retries times (d->retries), or, @retries 0, is no longer
 * in progress; false when @until passes first. */
bool dr_pump_copy(unsigned m, uint32_t region, uint64_t after, uint64_t until,
                  uint64_t retries, struct farm_datarec_region *d);

/* Pump every loop for @ns. */
void dr_pump_for(uint64_t ns);

/* Whether the object at @a is the same in machine indexes @ma's and
 * @mb's copies of its region (every line of it, as @ma's header gives
 * them; false where either holds no copy). */
bool dr_obj_equal(unsigned ma, unsigned mb, farm_gaddr a);

/* stderr into a file from here (one write(2) a line, log.c) ... */
void dr_log_capture(void);
/* ... back to the real stderr: the lines captured that hold @needle. */
unsigned dr_log_release(const char *needle);

#endif
