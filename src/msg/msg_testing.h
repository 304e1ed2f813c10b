/*
 * Test-only access to a message region's rings (tests corrupt them on
 * purpose). Internal; not installed.
 */
#ifndef FARM_MSG_TESTING_H
#define FARM_MSG_TESTING_H

#include <stdint.h>

#include <farm/msg.h>

/* The ring loop @r of this machine reads from (machine @m, thread @t),
 * and how far that loop has consumed it (bytes, since creation). */
uint8_t *farm_msg_testing_ring(farm_msg *msg, unsigned r, uint32_t m,
                               unsigned t, uint32_t *size, uint64_t *head);

/* Offset in the message region of loop @r's park word (non-zero while
 * the loop is parked). */
uint64_t farm_msg_testing_park_offset(const farm_msg *msg, unsigned r);

/* Test builds (FARM_FAULT_INJECTION): @on non-zero breaks the order of a
 * loop's one-sided operations: a WRITE or CAS to a machine no longer posts
 * that machine's batched READs first, so it overtakes them. Returns the
 * previous setting; -ENOTSUP in a production build. */
int farm_msg_testing_unordered_batch(int on);

/* Test builds: the longest a loop of this process parks with nothing
 * pending (0: the default, 200 ms), so a test can tell a doorbell from
 * the timed check; returns the previous setting, -ENOTSUP in a production
 * build. */
int64_t farm_msg_testing_park_max(uint64_t ns);

#endif
