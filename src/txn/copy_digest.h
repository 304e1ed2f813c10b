/*
 * Chunk summaries (copy_digest.c): what a copy that already holds a
 * region's memory, possibly stale, compares with its primary to learn
 * which chunks it must READ (src/recovery/README.md, "Same-id restart").
 * Internal; not installed.
 */
#ifndef FARM_TXN_COPY_DIGEST_H
#define FARM_TXN_COPY_DIGEST_H

#include <stdint.h>

#include <farm/error.h>

/* The chunk the summaries of a same-id rejoin would use (the figures in
 * src/recovery/README.md: 4 KiB READ about 8 times fewer bytes than 64
 * KiB, for a summary of 16 B a chunk in use). */
#define FARM_DIGEST_CHUNK 4096u

/*
 * farm_txn_chunk_digest() - the summary of the objects of chunk [@off,
 * @off + @len) of the region copy at @base (@region_size bytes), laid out
 * by the block table image @meta (@meta_bytes: the primary's, so that
 * both sides walk the same slots): a 64-bit digest of the table's region
 * header (its first 16 bytes), each slab run's slot size, and the offset,
 * version without its lock bits and incarnation word of every allocated
 * object (each element of a small array) whose slot starts in the chunk.
 * A free slot adds its header's words unless both are zero (never
 * written); blocks the table marks free or metadata add nothing.
 * Reads the header words with acquire loads, so a primary may summarize
 * its live copy.
 * Returns 0 with *@out; -EAGAIN when the chunk cannot be judged: an
 * object in it locked (shared or exclusive), or torn (a line version
 * unlike its header's: an apply or install cut short), or a block of
 * unknown layout; -EINVAL for a chunk outside the region; FARM_ECORRUPT
 * for a table that makes no sense. Two copies whose digests of a chunk
 * are equal (0 both) hold the same versions of the same objects there;
 * that the bytes are then equal is the copy's premise (a version names
 * one committed image), not something the digest reads.
 */
FARM_MUST_CHECK int farm_txn_chunk_digest(const void *meta, uint64_t meta_bytes,
                                          uint64_t region_size,
                                          const uint8_t *base, uint64_t off,
                                          uint64_t len, uint64_t *out);

#endif
