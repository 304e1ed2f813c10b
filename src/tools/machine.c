/*
 * `farm machine`: run one machine process from a configuration.
 *
 * The machine (src/node) opens its fabric, messaging and address space,
 * publishes its card (<data_dir>/machine.card), joins the cluster (static
 * `peer` lines or ZooKeeper), waits until `expect_machines` machines are
 * in its view, says it is ready, then runs its job:
 *   serve  wait for SIGTERM/SIGINT, parked in sigwaitinfo (the loops park
 *          too: an idle machine uses no CPU); a machine that recovery
 *          removed from the cluster (its lease lapsed, it did not answer
 *          the probe) stops too, says so and exits with status 3: it may
 *          come back only as a new incarnation (restart it);
 *   demo   the address-space demo with its peers (tools/demo.c).
 * On the way out everything it created is removed, unless --keep was
 * given: then a SIGTERM/SIGINT is a clean shutdown (farm_node_shutdown)
 * that keeps the region copies and logs in the data directory, and every
 * machine of the cluster started again on its directory brings the
 * cluster back with every committed transaction (src/node/restart.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <farm/farm.h>

#include "node/node.h"
#include "tools/tools.h"
#include "util/config.h"

#define JOIN_TIMEOUT_MS 30000
#define EXIT_REMOVED    3

static _Atomic uint64_t removed_in; /* the configuration without us */

/* On the membership's thread: a configuration without this machine
 * wakes the main thread's sigwaitinfo. */
static void on_config(void *ctx, uint64_t config_id, unsigned members,
                      bool member)
{
	(void)members;
	if (member || !farm_node_removed(ctx))
		return;
	uint64_t zero = 0;
	if (atomic_compare_exchange_strong(&removed_in, &zero, config_id))
		kill(getpid(), SIGUSR1);
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: farm machine --config FILE [--ready-fd N] [--go-fd N] "
	        "[--keep]\n"
	        "\n"
	        "Run one libfarm machine from a configuration file "
	        "(docs/config.md);\n"
	        "FARM_* environment variables override its keys.\n"
	        "  --config FILE  the configuration\n"
	        "  --ready-fd N   write one byte to fd N once the machine is "
	        "ready\n"
	        "  --go-fd N      then wait for one byte on fd N before the "
	        "job\n"
	        "  --keep         on SIGTERM/SIGINT, shut down cleanly and "
	        "keep the data\n"
	        "                 directory for a whole-cluster restart\n"
	        "  -h, --help     this text\n");
}

int farm_cmd_machine(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"ready-fd", required_argument, NULL, 'r'},
	        {"go-fd", required_argument, NULL, 'g'},
	        {"keep", no_argument, NULL, 'k'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	const char *config = NULL;
	int ready_fd = -1, go_fd = -1, c;
	bool keep = false;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'r': ready_fd = atoi(optarg); break;
		case 'g': go_fd = atoi(optarg); break;
		case 'k': keep = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!config || optind != argc) {
		usage(stderr);
		return 2;
	}
	struct farm_config cfg;
	char err[512];
	farm_config_defaults(&cfg);
	if (farm_config_load(&cfg, config, err, sizeof(err)) ||
	    farm_config_apply_env(&cfg, err, sizeof(err)) ||
	    farm_config_validate(&cfg, err, sizeof(err))) {
		fprintf(stderr, "farm machine: %s\n", err);
		return 1;
	}

	/* Block the stop signals before any thread exists, so they queue for
	 * sigwaitinfo instead of killing us mid-cleanup. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGUSR1); /* removed from the cluster */
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	bool demo = strcmp(cfg.job, "demo") == 0;
	if (!demo && strcmp(cfg.job, "serve") != 0) {
		fprintf(stderr, "farm machine %u: unknown job '%s'\n",
		        cfg.machine_id, cfg.job);
		return 1;
	}
	unsigned expect = cfg.expect_machines ? cfg.expect_machines
	                  : cfg.zk[0]         ? 1
	                                      : cfg.npeers + 1;
	farm_node *node;
	int rc = farm_node_open(&cfg, &node);
	if (rc) {
		fprintf(stderr, "farm machine %u: cannot start: %s\n",
		        cfg.machine_id, farm_strerror(rc));
		return 1;
	}
	void *job = NULL;
	if (demo && (rc = farm_demo_register(node, &job)))
		goto out;
	farm_node_on_config(node, on_config, node);
	bool removed = false;
	if ((rc = farm_node_start(node, JOIN_TIMEOUT_MS)))
		goto out;
	if ((rc = farm_node_wait_members(node, expect, JOIN_TIMEOUT_MS))) {
		if (rc == -EEXIST)
			fprintf(stderr,
			        "farm machine %u: not admitted: a machine "
			        "with this id left the cluster; start this one "
			        "with a new machine_id and an empty data "
			        "directory\n",
			        cfg.machine_id);
		else
			fprintf(stderr,
			        "farm machine %u: %u machines did not join "
			        "within %d s\n",
			        cfg.machine_id, expect, JOIN_TIMEOUT_MS / 1000);
		goto out;
	}
	if (ready_fd >= 0) {
		char b = 'r';
		if (write(ready_fd, &b, 1) != 1) {
			rc = -errno;
			goto out;
		}
		close(ready_fd);
	}
	if (go_fd >= 0) {
		char b;
		ssize_t n;
		do
			n = read(go_fd, &b, 1);
		while (n < 0 && errno == EINTR);
		close(go_fd);
		if (n != 1) { /* the launcher went away: stop */
			rc = 0;
			goto out;
		}
	}
	if (demo) {
		rc = farm_demo_job(node, expect, job);
	} else {
		int sig;
		do
			sig = sigwaitinfo(&stop, NULL);
		while (sig < 0 && errno == EINTR);
		rc = 0;
		if (sig == SIGUSR1 && farm_node_removed(node)) {
			fprintf(stderr,
			        "farm machine %u: removed from the cluster in "
			        "configuration %" PRIu64
			        " (its lease lapsed or it did not answer the "
			        "probe); stopping. Restart it to join again as "
			        "a new machine incarnation.\n",
			        cfg.machine_id, atomic_load(&removed_in));
			removed = true;
		}
	}
out:
	if (rc)
		fprintf(stderr, "farm machine %u: %s\n", cfg.machine_id,
		        farm_strerror(rc));
	if (keep && !removed && !rc)
		farm_node_shutdown(node);
	else
		farm_node_close(node);
	farm_demo_free(job);
	return rc ? 1 : removed ? EXIT_REMOVED : 0;
}
