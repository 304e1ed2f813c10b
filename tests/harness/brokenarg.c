#include "brokenarg.h"

void tu_switch_on(enum farm_fault_point fp, void *arg)
{
	(void)fp;
	(void)arg;
}

int tu_broken_named(int argc, char **argv, const char *name,
                    enum farm_fault_point fp, bool *broken)
{
	*broken = false;
	if (argc < 2)
		return 0;
	if (argc > 2 || strcmp(argv[1], name)) {
		fprintf(stderr, "usage: %s [%s]\n", argv[0], name);
		return 2;
	}
	if (farm_fault_set(fp, tu_switch_on, NULL)) {
		printf("skipped: built without fault injection\n");
		return FARM_TEST_SKIP;
	}
	*broken = true;
	return 0;
}

int tu_broken_arg(int argc, char **argv, enum farm_fault_point fp, bool *broken)
{
	return tu_broken_named(argc, argv, "--broken", fp, broken);
}
