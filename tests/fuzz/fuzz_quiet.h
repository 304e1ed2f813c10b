/*
 * For fuzz targets over decoders that log what they refuse: at most one
 * line per error (FARM_LOG=error, unless set), since a warning per
 * refused input would make the run write rather than fuzz. libFuzzer
 * calls LLVMFuzzerInitialize once before the first input (replay.c too).
 */
#ifndef FARM_FUZZ_QUIET_H
#define FARM_FUZZ_QUIET_H

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("FARM_LOG", "error", 0);
	return 0;
}

#endif
