/*
 * A transaction id: the coordinator's machine id, its loop and a
 * per-loop sequence number. Made by the coordinator (tx.c) and read by
 * participants and recovery to find whose log a record is in, so every
 * file makes and parses it here. Internal to src/txn (tests forge ids
 * with it).
 *
 *   bits 63..54  machine id (TXID_MACHINE_BITS: 1,024 ids)
 *   bits 53..48  loop (64 loops a machine)
 *   bits 47..0   sequence (TXID_SEQ_MASK)
 */
#ifndef FARM_TXN_TXID_H
#define FARM_TXN_TXID_H

#include <stdbool.h>
#include <stdint.h>

#define TXID_MACHINE_BITS 10u
#define TXID_THREAD_BITS  6u
#define TXID_SEQ_BITS     48u
#define TXID_SEQ_MASK     ((1ull << TXID_SEQ_BITS) - 1)
/* Machine ids a transaction id can name: the most a txm serves. */
#define TXN_MAX_MACHINES (1u << TXID_MACHINE_BITS)

_Static_assert(TXID_MACHINE_BITS + TXID_THREAD_BITS + TXID_SEQ_BITS == 64,
               "a transaction id is one word");

static inline uint64_t txid_make(uint32_t machine, unsigned thread,
                                 uint64_t seq)
{
	return ((uint64_t)machine << (TXID_THREAD_BITS + TXID_SEQ_BITS)) |
	       ((uint64_t)(thread & ((1u << TXID_THREAD_BITS) - 1))
	        << TXID_SEQ_BITS) |
	       (seq & TXID_SEQ_MASK);
}

static inline uint32_t txid_machine(uint64_t txid)
{
	return (uint32_t)(txid >> (TXID_THREAD_BITS + TXID_SEQ_BITS));
}

static inline unsigned txid_thread(uint64_t txid)
{
	return (unsigned)((txid >> TXID_SEQ_BITS) &
	                  ((1u << TXID_THREAD_BITS) - 1));
}

static inline uint64_t txid_seq(uint64_t txid)
{
	return txid & TXID_SEQ_MASK;
}

/* A set of machine ids: TXN_COORD_WORDS words, bit c%64 of word c/64. */
#define TXN_COORD_WORDS (TXN_MAX_MACHINES / 64)

static inline bool txn_coord_in(const uint64_t *set, uint32_t c)
{
	return c < TXN_MAX_MACHINES && ((set[c / 64] >> (c % 64)) & 1);
}

static inline void txn_coord_put(uint64_t *set, uint32_t c, bool in)
{
	if (c >= TXN_MAX_MACHINES)
		return;
	if (in)
		set[c / 64] |= 1ull << (c % 64);
	else
		set[c / 64] &= ~(1ull << (c % 64));
}

#endif
