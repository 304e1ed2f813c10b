/*
 * libFuzzer target for the control socket's requests (src/node/ctl.c):
 * the bytes a local client sends, read as the control thread reads them
 * (read_request: one printable line of at most 128 bytes, in as many
 * pieces as the client sends) and then classified (request_kind). The
 * first input byte says where the client splits its bytes; the client
 * then closes its side. A line read_request accepts must be what it
 * promises: non-empty, printable, at most 128 bytes.
 */
#include "fuzz_quiet.h"
#include "node/ctl.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size || size > 8192)
		return 0;
	size_t split = data[0];
	data++;
	size--;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 0;
	/* Two pieces, both in the socket before the read (8 KiB fits in
	 * its buffer), then the end of the connection. */
	size_t a = split < size ? split : size;
	if (a && send(sv[1], data, a, MSG_NOSIGNAL) != (ssize_t)a)
		abort();
	if (size > a && send(sv[1], data + a, size - a, MSG_NOSIGNAL) !=
	                        (ssize_t)(size - a))
		abort();
	shutdown(sv[1], SHUT_WR);
	struct farm_ctl c = {.stopfd = -1};
	char req[REQ_MAX + 2];
	const char *bad = read_request(&c, sv[0], req);
	if (!bad) {
		size_t n = strlen(req);
		if (!n || n > REQ_MAX)
			abort();
		for (size_t i = 0; i < n; i++)
			if (req[i] < 0x20 || req[i] > 0x7e)
				abort();
		volatile enum ctl_req k = request_kind(req);
		(void)k;
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
