/*
 * The ofi provider's counters (farm stats) and its test-only switches,
 * which break a guarantee the provider adds on top of libfabric so that
 * tests prove they can fail. Internal; not installed.
 */
#ifndef FARM_FABRIC_OFI_TESTING_H
#define FARM_FABRIC_OFI_TESTING_H

#include <stdint.h>

#include <farm/fabric.h>

enum farm_ofi_knob {
	/* 1 (default): an aligned WRITE's first and last words travel as
	 * 8-byte atomic writes around the body; 0: one plain RMA write. */
	FARM_OFI_KNOB_ORDERED_WRITES = 1,
	/* 1 (default): READs up to 4 KiB are read twice and delivered when
	 * both copies agree; 0: one plain RMA read. */
	FARM_OFI_KNOB_LINE_ATOMIC = 2,
	/* 1 (default): an id's liveness (death, heartbeat) is its current
	 * holder's, the address of its last connect; 0: every address of
	 * the id shares it (an earlier holder's stuck heartbeat or timed
	 * out request then kills a new holder of the id). */
	FARM_OFI_KNOB_HOLDER = 3,
	/* 1 (default): a HELLO from a revoked id, or from an address other
	 * than the one its new holder was admitted at, is refused, and
	 * farm_fabric_revoke / farm_fabric_admit close the keys every other
	 * holder of the id knows; 0: every holder let in, no key closed
	 * (a zombie of a reused id READs, WRITEs and CASes as before). */
	FARM_OFI_KNOB_FENCE = 4,
	/* 1 (default): a FENCED notice from a target makes our endpoints to
	 * it fail FARM_EFENCED at once; 0: ignored, as by a zombie stopped
	 * while it came, whose requests then go out with the keys it holds
	 * and only the target can refuse them (tests of the fence). */
	FARM_OFI_KNOB_HEED_FENCE = 5,
};

/* Set a knob for the whole process; returns its previous value. */
int farm_ofi_testing_set(enum farm_ofi_knob knob, int value);

struct farm_ofi_stats {
	uint64_t ops;             /* requests handed to libfabric */
	uint64_t errors;          /* error completions from libfabric */
	uint64_t read_retries;    /* READs read again (copies differed) */
	uint64_t timeouts;        /* requests failed by the death bound */
	uint64_t stale;           /* completions of destroyed endpoints */
	uint64_t notifies_in;     /* doorbells received */
	uint64_t malformed;       /* control messages refused */
	uint64_t progress_sleeps; /* times the progress thread slept */
	uint64_t table_fetches;   /* peers' registration tables copied */
	uint64_t heartbeats;      /* liveness READs sent */
	uint64_t acks_deferred;   /* connection ACKs libfabric did not take
	                             at once (their sender unreachable yet) */
	uint64_t acks_dropped;    /* ... given up after the connect bound */
	uint64_t fenced;          /* HELLOs refused, NOTIFYs dropped: a
	                             revoked or not admitted holder's */
	uint64_t fences_in;       /* FENCED notices received */
};

/* A snapshot of an ofi fabric's counters; -EINVAL for another provider. */
int farm_ofi_stats(const farm_fabric *fab, struct farm_ofi_stats *out);

#endif
