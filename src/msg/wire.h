/*
 * The ring's wire format and its decoder. Pure functions of bytes, so the
 * fuzz target (tests/fuzz_msg_wire.c) exercises exactly what a receiver
 * runs. Internal.
 *
 * A ring holds frames. A frame is what one fabric WRITE carries:
 *
 *   word 0    header  = (uint64)seq << 32 | len
 *   word 1    the sender's configuration id (low 32 bits; the rest zero)
 *   ...       messages, each [wire_msg header (16 B) | payload | pad to 8]
 *   last word trailer = header ^ WIRE_TRAILER_MAGIC
 *
 * len counts the whole frame (header and trailer), a multiple of 8; seq
 * counts frames per ring (wrapping, starting at 1). Frames start on a
 * cache line (WIRE_FRAME_ALIGN): the next one begins at the line after
 * this one's end (wire_frame_span), the bytes between stay zero. So a
 * frame of a small message spans as few lines as its length allows (one
 * up to 64 bytes: a 16-byte payload; two up to 128: a 64-byte one), and
 * a receiver polling a frame's first line finds the whole frame in it
 * and the line it prefetches after it. A frame never crosses
 * the end of the ring: the sender writes a wrap marker, a lone header word
 * with len WIRE_WRAP_LEN, and goes on at offset 0. Free space is zero, so
 * a zero header means "nothing yet" and a zero trailer "not all here yet".
 * The fabric lands a WRITE's first and last words whole and the last one
 * after every other byte, so a header that is neither zero nor the one
 * expected, or a trailer that is neither zero nor the header's, is corrupt.
 */
#ifndef FARM_MSG_WIRE_H
#define FARM_MSG_WIRE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define WIRE_FRAME_OVERHEAD 24u /* header, configuration word, trailer */
#define WIRE_FRAME_BODY     16u /* where a frame's messages start */
#define WIRE_MSG_HDR        16u
#define WIRE_WRAP_LEN       1u
#define WIRE_FRAME_ALIGN    64u
#define WIRE_TRAILER_MAGIC                         \
	0xa5c3f00d5e1ec7a7ull /* low 3 bits set: a \
	                         trailer is never 0 */

enum wire_kind {
	WIRE_ONEWAY = 1,
	WIRE_REQUEST = 2,
	WIRE_REPLY = 3,
	WIRE_REPLY_ERR = 4, /* payload: int32 status < 0 */
};

struct wire_msg {
	uint32_t len; /* payload bytes */
	uint16_t type;
	uint8_t kind;
	uint8_t src_thread;
	uint64_t call_id; /* requests and replies; 0 for one-way */
};
_Static_assert(sizeof(struct wire_msg) == WIRE_MSG_HDR, "wire_msg layout");

static inline uint32_t wire_align8(uint32_t n)
{
	return (n + 7u) & ~7u;
}

/* Bytes a message of @len payload bytes takes in a frame. */
static inline uint32_t wire_msg_stride(uint32_t len)
{
	return WIRE_MSG_HDR + wire_align8(len);
}

/* Ring bytes a frame of @len bytes takes: up to the next frame's start. */
static inline uint32_t wire_frame_span(uint32_t len)
{
	return (len + WIRE_FRAME_ALIGN - 1) & ~(WIRE_FRAME_ALIGN - 1);
}

static inline uint64_t wire_header(uint32_t seq, uint32_t len)
{
	return (uint64_t)seq << 32 | len;
}

/* Lines of a frame wire_peek fetches ahead, and their size. */
#define WIRE_PREFETCH_LINE 64u
#define WIRE_PREFETCH_MAX  8u

enum wire_peek {
	WIRE_EMPTY = 0,   /* nothing at this offset yet */
	WIRE_PARTIAL = 1, /* a frame is arriving: its trailer is not here */
	WIRE_FRAME = 2,   /* a whole frame of *len bytes */
	WIRE_WRAP = 3,    /* a wrap marker: go on at offset 0 */
	WIRE_CORRUPT = -1,
};

/* Acquire: pairs with the release store of a WRITE's last word by the
 * provider that delivers it (fabric/shm_data.c, fabric/udp_serve.c's
 * write_piece): a frame whose trailer is seen is whole. */
static inline uint64_t wire_load(const uint8_t *p)
{
	return atomic_load_explicit((const _Atomic uint64_t *)(const void *)p,
	                            memory_order_acquire);
}

/*
 * What is at @off of a ring of @ring_size bytes, expecting frame @seq of at
 * most @max_frame bytes. @off is WIRE_FRAME_ALIGN-aligned and below
 * @ring_size, a multiple of WIRE_FRAME_ALIGN.
 */
static inline enum wire_peek wire_peek(const uint8_t *ring, uint32_t ring_size,
                                       uint32_t off, uint32_t seq,
                                       uint32_t max_frame, uint32_t *len)
{
	uint64_t h = wire_load(ring + off);
	if (h == 0)
		return WIRE_EMPTY;
	if ((uint32_t)(h >> 32) != seq)
		return WIRE_CORRUPT;
	uint32_t n = (uint32_t)h;
	if (n == WIRE_WRAP_LEN)
		return off ? WIRE_WRAP : WIRE_CORRUPT;
	if ((n & 7u) || n < WIRE_FRAME_OVERHEAD + WIRE_MSG_HDR ||
	    n > max_frame || n > ring_size - off)
		return WIRE_CORRUPT;
	/* The frame's next lines (the trailer's, the body's) are fetched
	 * together, not one miss after the other as the trailer check and
	 * the body's checks reach them. */
	for (uint32_t l = (off | (WIRE_PREFETCH_LINE - 1)) + 1, k = 0;
	     l < off + n && k < WIRE_PREFETCH_MAX; l += WIRE_PREFETCH_LINE, k++)
		__builtin_prefetch(ring + l, 0, 3);
	uint64_t t = wire_load(ring + off + n - 8);
	if (t == 0)
		return WIRE_PARTIAL;
	if (t != (h ^ WIRE_TRAILER_MAGIC))
		return WIRE_CORRUPT;
	*len = n;
	return WIRE_FRAME;
}

/* The configuration id a whole frame at @off carries, or -1 when its word
 * is malformed (high bits set). */
static inline int64_t wire_frame_config(const uint8_t *ring, uint32_t off)
{
	uint64_t w;
	memcpy(&w, ring + off + 8, 8);
	return w >> 32 ? -1 : (int64_t)w;
}

/* Whether a type has a handler: a bitmap of 65536 bits. */
static inline bool wire_type_known(const uint64_t *types, uint16_t type)
{
	return (types[type >> 6] >> (type & 63)) & 1u;
}

/*
 * Check every message of a frame body (@body, @len bytes: the frame
 * without header and trailer) before any is used: lengths within the body,
 * known kind, one-way and request types with a handler, sender thread
 * below @nthreads, call ids present where needed, error replies carrying
 * a negative status. Returns the number of messages, or -1.
 */
static inline int wire_check_body(const uint8_t *body, uint32_t len,
                                  unsigned nthreads, const uint64_t *types)
{
	int count = 0;
	uint32_t off = 0;
	while (off < len) {
		struct wire_msg m;
		if (len - off < WIRE_MSG_HDR)
			return -1;
		memcpy(&m, body + off, sizeof(m));
		if (m.len > len - off - WIRE_MSG_HDR ||
		    wire_msg_stride(m.len) > len - off)
			return -1;
		if (m.src_thread >= nthreads)
			return -1;
		switch (m.kind) {
		case WIRE_ONEWAY:
			if (m.call_id || !wire_type_known(types, m.type))
				return -1;
			break;
		case WIRE_REQUEST:
			if (!m.call_id || !wire_type_known(types, m.type))
				return -1;
			break;
		case WIRE_REPLY:
			if (!m.call_id)
				return -1;
			break;
		case WIRE_REPLY_ERR: {
			int32_t st;
			if (!m.call_id || m.len != 4)
				return -1;
			memcpy(&st, body + off + WIRE_MSG_HDR, 4);
			if (st >= 0)
				return -1;
			break;
		}
		default: return -1;
		}
		/* Padding is zero: anything else is not what a sender wrote. */
		for (uint32_t i = m.len; i < wire_align8(m.len); i++)
			if (body[off + WIRE_MSG_HDR + i])
				return -1;
		off += wire_msg_stride(m.len);
		count++;
	}
	return count;
}

#endif /* FARM_MSG_WIRE_H */
