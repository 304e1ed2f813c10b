/*
 * libFuzzer target for what machines read from ZooKeeper: the
 * configuration znode's text (farm_view_parse, src/coord/
 * view.c) and a member's registration card (farm_zk_card_parse,
 * src/coord/zk_next.c). The first byte picks the decoder. Both must
 * refuse anything malformed with an error, never read outside the bytes,
 * and a view they accept must survive farm_view_format and a second
 * parse unchanged (what one machine writes, the others read alike).
 */
#include "fuzz_quiet.h"
#include "coord/view.c"
#include "coord/zk_next.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	uint8_t mode = data[0];
	data++;
	size--;
	/* An exact-size heap copy, so ASan sees a read past the end. */
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (mode & 1) {
		struct farm_member mb;
		memset(&mb, 0, sizeof(mb));
		if (farm_zk_card_parse(buf, (int)size, &mb) == 0 &&
		    (!mb.endpoint[0] ||
		     strlen(mb.endpoint) >= sizeof(mb.endpoint) ||
		     (mb.domain[0] && !farm_domain_valid(mb.domain))))
			abort(); /* accepted what it promises to refuse */
	} else {
		static struct farm_view v, w;
		static char out[1 << 16];
		if (farm_view_parse(buf, size, &v) == 0) {
			int n = farm_view_format(&v, out, sizeof(out));
			if (n < 0 || farm_view_parse(out, (size_t)n, &w) != 0 ||
			    !farm_view_equal(&v, &w))
				abort(); /* the round trip changed the view */
		}
	}
	free(buf);
	return 0;
}
