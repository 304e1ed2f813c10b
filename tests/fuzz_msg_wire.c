/*
 * libFuzzer target for the message decoder (src/msg/wire.h): the bytes
 * become a ring that a receiver walks exactly as poll_ring() does, frame by
 * frame, checking each body before it would deliver it. The decoder must
 * never read outside the ring, loop forever or accept a message that is not
 * inside its frame. Built with clang -fsanitize=fuzzer,address,undefined;
 * `make check` runs it for a bounded time.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "msg/wire.h"

#define RING      4096u
#define MAX_FRAME (RING / 8)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A heap ring of exactly RING bytes, so ASan sees any overrun. */
	uint8_t *ring = aligned_alloc(64, RING);
	if (!ring)
		return 0;
	memset(ring, 0, RING);
	uint64_t types[65536 / 64] = {0};
	if (size >= 8) {
		memcpy(types, data, 8); /* types 0..63 known per the input */
		data += 8;
		size -= 8;
	}
	memcpy(ring, data, size < RING ? size : RING);
	uint32_t seq = 1, off = 0;
	uint64_t head = 0;
	for (unsigned steps = 0; steps < 2 * RING / 8; steps++) {
		uint32_t len = 0;
		enum wire_peek k =
		        wire_peek(ring, RING, off, seq, MAX_FRAME, &len);
		if (k == WIRE_EMPTY || k == WIRE_PARTIAL || k == WIRE_CORRUPT)
			break;
		seq++;
		if (k == WIRE_WRAP) {
			head += RING - off;
			off = 0;
			continue;
		}
		if (len < WIRE_FRAME_OVERHEAD || off + len > RING)
			abort(); /* wire_peek promised otherwise */
		const uint8_t *body = ring + off + 8;
		uint32_t blen = len - WIRE_FRAME_OVERHEAD;
		int n = wire_check_body(body, blen, 4, types);
		if (n < 0)
			break;
		/* Walk the messages as deliver() would. */
		for (uint32_t o = 0; o < blen;) {
			struct wire_msg m;
			memcpy(&m, body + o, sizeof(m));
			if (o + wire_msg_stride(m.len) > blen)
				abort();
			volatile uint8_t sink =
			        m.len ? body[o + WIRE_MSG_HDR + m.len - 1] : 0;
			(void)sink;
			o += wire_msg_stride(m.len);
		}
		head += len;
		off = (off + len) % RING;
	}
	free(ring);
	return 0;
}
