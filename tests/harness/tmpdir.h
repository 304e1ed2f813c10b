/*
 * A test's temporary directory: made under /dev/shm (else /tmp), removed
 * with everything in it. libc only, so that the tests on the public API
 * alone use it too.
 */
#ifndef FARM_TESTS_TMPDIR_H
#define FARM_TESTS_TMPDIR_H

#include <stddef.h>

/* A new directory farm-test-@tag-XXXXXX, its path in @buf (@len bytes);
 * aborts when none can be made (nothing a test could do without it). */
void tu_tmpdir(char *buf, size_t len, const char *tag);

/* Remove @dir and everything under it, going on past what cannot be
 * removed: 0 once the walk is done or @dir does not exist (its machine
 * may have removed it), -1 when the walk failed. */
int tu_rmtree(const char *dir);

#endif
