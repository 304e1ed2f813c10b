/*
 * The --broken argument of a test whose broken run turns one switch point
 * on (util/fault.h, FARM_FAULT_SWITCH): the hook does nothing, it only
 * makes the switch true, in this process and the machines it forks.
 * Defined in brokenarg.c.
 */
#ifndef FARM_TESTS_BROKENARG_H
#define FARM_TESTS_BROKENARG_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "util/fault.h"

void tu_switch_on(enum farm_fault_point fp, void *arg);

/* No argument: 0, *@broken false. "--broken": the switch @fp on, 0,
 * *@broken true. Otherwise an exit status for main: FARM_TEST_SKIP (a
 * build without fault injection) or 2 (usage, printed to stderr). */
int tu_broken_arg(int argc, char **argv, enum farm_fault_point fp,
                  bool *broken);

/* The same for a switch named otherwise (@name, e.g. "--broken-guard"). */
int tu_broken_named(int argc, char **argv, const char *name,
                    enum farm_fault_point fp, bool *broken);

#endif
