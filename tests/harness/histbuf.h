/*
 * What the history checkers (sercheck.c, lincheck.c) share to record a
 * history: arrays that grow as records arrive, and the first recording
 * error kept (sticky) so that a check refuses an incomplete history.
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

#endif
