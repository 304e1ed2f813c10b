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
	if (member || !(farm_node_removed(ctx) || farm_node_left(ctx)))
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

struct margs {
	const char *config;
	int ready_fd, go_fd;
	bool keep;
};

/* The command line into @a. -1 to go on, else the exit code (0 after
 * --help, 2 on a usage error). */
static int parse_args(int argc, char **argv, struct margs *a)
{
	static const struct option opts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"ready-fd", required_argument, NULL, 'r'},
	        {"go-fd", required_argument, NULL, 'g'},
	        {"keep", no_argument, NULL, 'k'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': a->config = optarg; break;
		case 'r': a->ready_fd = atoi(optarg); break;
		case 'g': a->go_fd = atoi(optarg); break;
		case 'k': a->keep = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!a->config || optind != argc) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/* The configuration from @path, the environment's overrides applied and
 * validated. 0, or -1 after saying why. */
static int load_config(struct farm_config *cfg, const char *path)
{
	char err[512];
	farm_config_defaults(cfg);
	if (farm_config_load(cfg, path, err, sizeof(err)) ||
	    farm_config_apply_env(cfg, err, sizeof(err)) ||
	    farm_config_validate(cfg, err, sizeof(err))) {
		fprintf(stderr, "farm machine: %s\n", err);
		return -1;
	}
	return 0;
}

/* Start the machine and wait until @expect machines are members. */
static int join(farm_node *node, const struct farm_config *cfg, unsigned expect)
{
	int rc = farm_node_start(node, JOIN_TIMEOUT_MS);
	if (rc)
		return rc;
	rc = farm_node_wait_members(node, expect, JOIN_TIMEOUT_MS);
	if (rc == -EEXIST)
		fprintf(stderr,
		        "farm machine %u: not admitted: a machine "
		        "with this id left the cluster; start this one "
		        "with a new machine_id and an empty data "
		        "directory\n",
		        cfg->machine_id);
	else if (rc)
		fprintf(stderr,
		        "farm machine %u: %u machines did not join "
		        "within %d s\n",
		        cfg->machine_id, expect, JOIN_TIMEOUT_MS / 1000);
	return rc;
}

/* The launcher's handshake: a byte on --ready-fd once joined, then wait
 * for one on --go-fd. 0 with *@go false when the launcher went away (the
 * machine stops), else an error code. */
static int handshake(const struct margs *a, bool *go)
{
	*go = true;
	if (a->ready_fd >= 0) {
		char b = 'r';
		if (write(a->ready_fd, &b, 1) != 1)
			return -errno;
		close(a->ready_fd);
	}
	if (a->go_fd >= 0) {
		char b;
		ssize_t n;
		do
			n = read(a->go_fd, &b, 1);
		while (n < 0 && errno == EINTR);
		close(a->go_fd);
		*go = n == 1;
	}
	return 0;
}

/* Serve until a stop signal in @stop; true when the signal said that the
 * cluster removed this machine. */
static bool serve(farm_node *node, const struct farm_config *cfg,
                  const sigset_t *stop)
{
	int sig;
	do
		sig = sigwaitinfo(stop, NULL);
	while (sig < 0 && errno == EINTR);
	if (sig == SIGUSR1 && farm_node_left(node)) {
		fprintf(stderr,
		        "farm machine %u: left the cluster gracefully "
		        "(configuration %" PRIu64 " goes on without it)\n",
		        cfg->machine_id, atomic_load(&removed_in));
		return false;
	}
	if (sig != SIGUSR1 || !farm_node_removed(node))
		return false;
	fprintf(stderr,
	        "farm machine %u: removed from the cluster in "
	        "configuration %" PRIu64
	        " (its lease lapsed or it did not answer the "
	        "probe); stopping. Restart it to join again as "
	        "a new machine incarnation.\n",
	        cfg->machine_id, atomic_load(&removed_in));
	return true;
}

int farm_cmd_machine(int argc, char **argv)
{
	struct margs a = {.ready_fd = -1, .go_fd = -1};
	int rc = parse_args(argc, argv, &a);
	if (rc >= 0)
		return rc;
	struct farm_config cfg;
	if (load_config(&cfg, a.config))
		return 1;

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
	rc = farm_node_open(&cfg, &node);
	if (rc) {
		fprintf(stderr, "farm machine %u: cannot start: %s\n",
		        cfg.machine_id, farm_strerror(rc));
		return 1;
	}
	void *job = NULL;
	bool removed = false, go = false;
	if (demo && (rc = farm_demo_register(node, &job)))
		goto out;
	farm_node_on_config(node, on_config, node);
	if ((rc = join(node, &cfg, expect)) || (rc = handshake(&a, &go)) || !go)
		goto out;
	if (demo)
		rc = farm_demo_job(node, expect, job);
	else
		removed = serve(node, &cfg, &stop);
out:
	if (rc)
		fprintf(stderr, "farm machine %u: %s\n", cfg.machine_id,
		        farm_strerror(rc));
	if (a.keep && !removed && !rc)
		farm_node_shutdown(node);
	else
		farm_node_close(node);
	farm_demo_free(job);
	return rc ? 1 : removed ? EXIT_REMOVED : 0;
}
