/*
 * What the history checkers (sercheck.c, lincheck.c) share to record a
 * history: arrays that grow as records arrive, and the first recording
 * error kept (sticky) so that a check refuses an incomplete history; and
 * to report one: text appended to a fixed buffer.
 */
#ifndef FARM_TESTS_HISTBUF_H
#define FARM_TESTS_HISTBUF_H

#include <stddef.h>

/* Make the array *@p (capacity *@cap elements of @elem bytes) hold at
 * least @need elements, doubling from 64. Returns 0, or -ENOMEM with the
 * array as it was. */
int hb_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Keep @err in *@sticky unless an earlier error is there; returns @err. */
int hb_fail(int *sticky, int err);

/* A report being written into a fixed buffer @p of @cap bytes. */
struct hb_sbuf {
	char *p;
	size_t len, cap;
};

/* Append to @b as printf would; a report that does not fit ends in
 * "...". */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void hb_sb_add(struct hb_sbuf *b, const char *fmt, ...);

#endif
