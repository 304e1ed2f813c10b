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
	if (size && (data[0] & 1)) {
		/* Framed mode: the input is [u16 len][body] chunks that the
		 * harness wraps in well-formed frames (right header, trailer
		 * and wrap markers), so the fuzzer spends its time on the
		 * message bodies rather than on guessing trailers. */
		data++;
		size--;
		uint32_t o = 0, s = 1;
		while (size >= 2) {
			uint32_t blen =
			        (uint32_t)(data[0] | data[1] << 8) % MAX_FRAME;
			data += 2;
			size -= 2;
			if (blen > size)
				blen = (uint32_t)size;
			uint32_t flen = WIRE_FRAME_OVERHEAD + wire_align8(blen);
			if (flen > MAX_FRAME)
				break;
			if (o + flen > RING) {
				if (o == 0 || o == RING)
					break;
				uint64_t w = wire_header(s++, WIRE_WRAP_LEN);
				memcpy(ring + o, &w, 8);
				break; /* one lap: what follows the wrap is
				          empty */
			}
			uint64_t h = wire_header(s++, flen),
			         t = h ^ WIRE_TRAILER_MAGIC;
			uint64_t cfg = s; /* any id; the high bits zero */
			memcpy(ring + o, &h, 8);
			memcpy(ring + o + 8, &cfg, 8);
			memcpy(ring + o + WIRE_FRAME_BODY, data, blen);
			memcpy(ring + o + flen - 8, &t, 8);
			data += blen;
			size -= blen;
			o += wire_frame_span(flen);
		}
	} else if (size) {
		memcpy(ring, data + 1, size - 1 < RING ? size - 1 : RING);
	}
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
		const uint8_t *body = ring + off + WIRE_FRAME_BODY;
		uint32_t blen = len - WIRE_FRAME_OVERHEAD;
		if (wire_frame_config(ring, off) < 0)
			break;
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
		head += wire_frame_span(len);
		off = (off + wire_frame_span(len)) % RING;
	}
	free(ring);
	return 0;
}
