/*
 * `farm leave`: ask a machine running on this host to leave its cluster
 * gracefully (farm_node_leave, through its control socket): its data is
 * handed off to the machines that follow it before the configuration goes
 * on without it, and the machine process then exits 0.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "util/config.h"

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: farm leave (--dir DATA_DIR | --config FILE) "
	        "[--timeout MS]\n"
	        "\n"
	        "Make a machine running on this host leave its cluster "
	        "gracefully: the\n"
	        "regions it holds get new copies on the machines that follow "
	        "it, then it\n"
	        "stops starting transactions and the cluster goes on without "
	        "it, with no\n"
	        "failure and no lease wait. Refused when fewer than "
	        "`replicas` machines\n"
	        "would stay, for the configuration manager, and with static "
	        "membership.\n"
	        "  --dir DATA_DIR  the machine's data directory\n"
	        "  --config FILE   the machine's configuration file (its "
	        "data_dir)\n"
	        "  --timeout MS    how long the handoff may take (default "
	        "300000)\n"
	        "  -h, --help      this text\n"
	        "Exit status: 0 left; 1 refused, timed out or unreachable; 2 "
	        "usage.\n");
}

int farm_cmd_leave(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"dir", required_argument, NULL, 'd'},
	        {"config", required_argument, NULL, 'c'},
	        {"timeout", required_argument, NULL, 't'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	const char *dir = NULL, *config = NULL;
	long timeout_ms = 300000;
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'c': config = optarg; break;
		case 't':
			timeout_ms = strtol(optarg, &end, 10);
			if (*end || timeout_ms <= 0 || timeout_ms > 86400000) {
				fprintf(stderr,
				        "farm leave: bad --timeout '%s'\n",
				        optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc || !dir == !config) {
		usage(stderr);
		return 2;
	}
	char req[32];
	snprintf(req, sizeof(req), "leave %ld", timeout_ms);
	char *reply;
	/* The machine answers once the handoff is done: wait that long,
	 * and a little for the answer. */
	int rc = farm_tool_ctl_at("leave", dir, config, req,
	                          (int)timeout_ms + 5000, &reply);
	if (rc)
		return 1;
	/* Anything but "left" is not a leave this tool may report done. */
	if (strcmp(reply, "left\n")) {
		fprintf(stderr,
		        "farm leave: %s: unexpected answer from the machine: "
		        "%s",
		        dir ? dir : config, reply);
		free(reply);
		return 1;
	}
	fputs(reply, stdout);
	free(reply);
	return fflush(stdout) ? 1 : 0;
}
