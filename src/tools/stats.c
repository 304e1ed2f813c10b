/*
 * `farm stats`: a running machine's counters, read from its control socket
 * (src/node/ctl.h) in its data directory on this host, as text or in
 * Prometheus' text exposition format.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/ctl.h"
#include "tools/tools.h"
#include "util/config.h"

int farm_tool_config(const char *cmd, const char *path, struct farm_config *c)
{
	char err[512];
	farm_config_defaults(c);
	if (farm_config_load(c, path, err, sizeof(err)) ||
	    farm_config_apply_env(c, err, sizeof(err))) {
		fprintf(stderr, "farm %s: %s\n", cmd, err);
		return -EINVAL;
	}
	return 0;
}

int farm_tool_ctl(const char *cmd, const char *dir, const char *req,
                  int timeout_ms, char **reply)
{
	int rc = farm_ctl_request(dir, req, reply, NULL, timeout_ms);
	if (!rc)
		return 0;
	if (rc == -ENOENT)
		fprintf(stderr,
		        "farm %s: %s: no control socket (no machine runs with "
		        "this data directory on this host)\n",
		        cmd, dir);
	else if (rc == -ECONNREFUSED)
		fprintf(stderr,
		        "farm %s: %s: nobody answers on the control socket "
		        "(the machine died)\n",
		        cmd, dir);
	else if (rc == -ECONNRESET)
		fprintf(stderr,
		        "farm %s: %s: the machine closed the control "
		        "connection without a whole answer (it exited or "
		        "crashed meanwhile: see its log)\n",
		        cmd, dir);
	else if (rc == -EPROTO)
		fprintf(stderr, "farm %s: %s: the machine refused: %s", cmd,
		        dir, *reply + 6);
	else
		fprintf(stderr, "farm %s: %s: %s\n", cmd, dir,
		        farm_strerror(rc));
	free(*reply);
	*reply = NULL;
	return rc;
}

int farm_tool_ctl_at(const char *cmd, const char *dir, const char *config,
                     const char *req, int timeout_ms, char **reply)
{
	if (!config)
		return farm_tool_ctl(cmd, dir, req, timeout_ms, reply);
	struct farm_config *cfg = malloc(sizeof(*cfg));
	int rc = cfg ? farm_tool_config(cmd, config, cfg) : -ENOMEM;
	if (!rc && !cfg->data_dir[0]) {
		fprintf(stderr, "farm %s: %s sets no data_dir\n", cmd, config);
		rc = -EINVAL;
	}
	if (!rc)
		rc = farm_tool_ctl(cmd, cfg->data_dir, req, timeout_ms, reply);
	free(cfg);
	return rc;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: farm stats (--dir DATA_DIR | --config FILE) "
	        "[--prometheus] [--timeout MS]\n"
	        "\n"
	        "Print the counters of a machine running on this host (fabric, "
	        "address\n"
	        "space, messaging, transactions, recovery, KV store), read "
	        "from the control\n"
	        "socket in its data directory (DATA_DIR/ctl.sock).\n"
	        "  --dir DATA_DIR  the machine's data directory\n"
	        "  --config FILE   the machine's configuration file (its "
	        "data_dir;\n"
	        "                  FARM_DATA_DIR overrides it)\n"
	        "  --prometheus    Prometheus' text exposition format, e.g. "
	        "for "
	        "node_exporter's\n"
	        "                  textfile collector\n"
	        "  --timeout MS    how long to wait for the machine (default "
	        "3000)\n"
	        "  -h, --help      this text\n"
	        "Exit status: 0 printed; 1 the machine could not be reached; 2 "
	        "usage.\n");
}

int farm_cmd_stats(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"dir", required_argument, NULL, 'd'},
	        {"config", required_argument, NULL, 'c'},
	        {"prometheus", no_argument, NULL, 'p'},
	        {"timeout", required_argument, NULL, 't'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	const char *dir = NULL, *config = NULL;
	bool prom = false;
	int timeout_ms = 3000, c;
	char *end;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'c': config = optarg; break;
		case 'p': prom = true; break;
		case 't':
			timeout_ms = (int)strtol(optarg, &end, 10);
			if (*end || timeout_ms <= 0) {
				fprintf(stderr,
				        "farm stats: bad --timeout '%s'\n",
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
	char *reply;
	int rc = farm_tool_ctl_at("stats", dir, config,
	                          prom ? "stats prometheus" : "stats",
	                          timeout_ms, &reply);
	if (rc)
		return 1;
	fputs(reply, stdout);
	free(reply);
	return fflush(stdout) ? 1 : 0;
}
