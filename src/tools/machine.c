/*
 * `farm machine`: run one machine process from a configuration.
 *
 * The machine opens its fabric, allocates and registers its region, writes
 * <data_dir>/machine.info (its fabric address and region descriptor, for
 * peers on this host), says it is ready, then runs its job:
 *   serve  wait for SIGTERM/SIGINT, parked in sigwaitinfo (no CPU);
 *   demo   one-sided READ/WRITE/CAS with its peers (tools/demo.c).
 * On the way out everything it created is removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <farm/farm.h>

#include "tools/tools.h"
#include "util/config.h"

static int write_info(const char *dir, farm_fabric *fab, farm_region *r)
{
	char path[FARM_CONFIG_STR + 32], tmp[FARM_CONFIG_STR + 32], addr[512];
	snprintf(path, sizeof(path), "%s/machine.info", dir);
	snprintf(tmp, sizeof(tmp), "%s/machine.info.tmp", dir);
	int rc = farm_fabric_address(fab, addr, sizeof(addr));
	if (rc < 0)
		return rc;
	FILE *f = fopen(tmp, "we");
	if (!f)
		return -errno;
	farm_mr_desc d = farm_region_desc(r);
	fprintf(f, "machine %u\naddress %s\nregion %" PRIx64 " %" PRIx64 " %" PRIx64 "\n",
	        farm_fabric_machine_id(fab), addr, d.key, d.addr, d.len);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		rc = -errno;
		unlink(tmp);
		return rc;
	}
	return 0;
}

int farm_read_machine_info(const char *dir, uint32_t *id, char *addr,
                           size_t addrlen, farm_mr_desc *desc)
{
	char path[FARM_CONFIG_STR + 32];
	snprintf(path, sizeof(path), "%s/machine.info", dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char a[512];
	uint64_t key, base, len;
	int n = fscanf(f, "machine %u\naddress %511s\nregion %" SCNx64 " %" SCNx64
	               " %" SCNx64, id, a, &key, &base, &len);
	fclose(f);
	if (n != 5 || strlen(a) >= addrlen)
		return -EINVAL;
	strcpy(addr, a);
	*desc = (farm_mr_desc){.key = key, .addr = base, .len = len,
	                       .machine = *id, .access = FARM_ACCESS_ALL};
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: farm machine --config FILE [--ready-fd N] [--go-fd N]\n"
	        "\n"
	        "Run one libfarm machine from a configuration file (docs/config.md);\n"
	        "FARM_* environment variables override its keys.\n"
	        "  --config FILE  the configuration\n"
	        "  --ready-fd N   write one byte to fd N once the machine is ready\n"
	        "  --go-fd N      then wait for one byte on fd N before the job\n"
	        "  -h, --help     this text\n");
}

int farm_cmd_machine(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"ready-fd", required_argument, NULL, 'r'},
		{"go-fd", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config = NULL;
	int ready_fd = -1, go_fd = -1, c;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'r': ready_fd = atoi(optarg); break;
		case 'g': go_fd = atoi(optarg); break;
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
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	farm_fabric_attr attr = {
		.provider = cfg.fabric[0] ? cfg.fabric : NULL,
		.machine_id = cfg.machine_id,
		.data_dir = cfg.data_dir,
		.listen_addr = cfg.listen[0] ? cfg.listen : NULL,
	};
	farm_fabric *fab;
	int rc = farm_fabric_open(&attr, &fab);
	if (rc) {
		fprintf(stderr, "farm machine %u: cannot open fabric: %s\n",
		        cfg.machine_id, farm_strerror(rc));
		return 1;
	}
	farm_region *region;
	rc = farm_region_create(fab, cfg.region_size, &region);
	if (rc) {
		fprintf(stderr, "farm machine %u: cannot create region: %s\n",
		        cfg.machine_id, farm_strerror(rc));
		farm_fabric_close(fab);
		return 1;
	}
	rc = write_info(cfg.data_dir, fab, region);
	if (rc) {
		fprintf(stderr, "farm machine %u: cannot write machine.info: %s\n",
		        cfg.machine_id, farm_strerror(rc));
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
	if (strcmp(cfg.job, "demo") == 0) {
		rc = farm_demo_job(&cfg, fab, region);
	} else if (strcmp(cfg.job, "serve") == 0) {
		int sig;
		do
			sig = sigwaitinfo(&stop, NULL);
		while (sig < 0 && errno == EINTR);
		rc = 0;
	} else {
		fprintf(stderr, "farm machine %u: unknown job '%s'\n",
		        cfg.machine_id, cfg.job);
		rc = -EINVAL;
	}
out: {
	char path[FARM_CONFIG_STR + 32];
	snprintf(path, sizeof(path), "%s/machine.info", cfg.data_dir);
	unlink(path);
}
	farm_region_destroy(region);
	farm_fabric_close(fab);
	return rc ? 1 : 0;
}
