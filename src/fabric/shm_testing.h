/*
 * Test-only switches of the shm provider. They exist to prove that the tests
 * of the hardware guarantees can fail: with a guarantee switched off, the
 * stress tests must report violations. Never used outside tests.
 */
#ifndef FARM_FABRIC_SHM_TESTING_H
#define FARM_FABRIC_SHM_TESTING_H

#include <stdint.h>

enum farm_shm_knob {
	/* 1 (default): READs are line-atomic (per-line seqlock); 0: a copy with
	 * no line atomicity (word at a time, highest first, pausing between).
	 */
	FARM_SHM_KNOB_LINE_ATOMIC = 1,
	/* 1 (default): a WRITE's last 8 bytes land last; 0: they land first. */
	FARM_SHM_KNOB_ORDERED_WRITES = 2,
};

/* Set a knob for the whole process; returns its previous value. */
int farm_shm_testing_set(enum farm_shm_knob knob, int value);
/* Lines whose seqlock copy gave up after its retry bound. */
uint64_t farm_shm_testing_line_giveups(void);

#endif
