/*
 * fwl: what the parent (wl_cluster.c) and a machine process
 * (wl_machine.c) share: whole reads and writes on the pipes between
 * them, and the machine's entry point.
 */
#ifndef FWL_WL_PROC_H
#define FWL_WL_PROC_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <unistd.h>

#include "wl.h"

static inline int wl_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read @len bytes, waiting at most @ms for each piece (-1: timed out or
 * the other end went away). */
static inline int wl_read_all(int fd, void *buf, size_t len, int ms)
{
	char *p = buf;
	while (len) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int r = poll(&pf, 1, ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A machine process's life: configuration, node, store, commands from
 * @in, answers to @out. Its exit status: 0 all well. */
int wl_machine_main(const struct wl_opts *o, unsigned me, const char *root,
                    int in, int out);

#endif
