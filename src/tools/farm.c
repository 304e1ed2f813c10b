/* `farm`: libfarm's command-line tool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/tools.h"

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: farm <command> [options]   (farm <command> --help)\n"
	        "\n"
	        "commands:\n"
	        "  machine   run one machine process from a configuration "
	        "file\n"
	        "  cluster   run, start or stop a local cluster of machines\n"
	        "  logs      list the transaction log records in a data "
	        "directory\n"
	        "  status    a cluster's configuration, members, regions and "
	        "replication\n"
	        "  stats     a running machine's counters (text or "
	        "Prometheus)\n"
	        "  leave     make a running machine leave its cluster "
	        "gracefully\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	/* The launcher re-executes this binary for each machine. */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		perror("farm: /proc/self/exe");
		return 1;
	}
	self[n] = 0;
	if (!strcmp(argv[1], "machine"))
		return farm_cmd_machine(argc - 1, argv + 1);
	if (!strcmp(argv[1], "logs"))
		return farm_cmd_logs(argc - 1, argv + 1);
	if (!strcmp(argv[1], "status"))
		return farm_cmd_status(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stats"))
		return farm_cmd_stats(argc - 1, argv + 1);
	if (!strcmp(argv[1], "leave"))
		return farm_cmd_leave(argc - 1, argv + 1);
	if (!strcmp(argv[1], "cluster"))
		return farm_cmd_cluster(argc - 1, argv + 1, self);
	fprintf(stderr, "farm: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
