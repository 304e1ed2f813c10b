/*
 * `farm cluster`: an N-machine local cluster in one directory.
 *
 *   farm cluster run   --dir D --machines N [--job demo] ...
 *       start, run the job to its end (or until ^C), stop, clean up;
 *   farm cluster start --dir D --machines N ...
 *       start and return once every machine is ready (pids in D/cluster.pids);
 *   farm cluster stop  --dir D
 *       SIGTERM each machine by pid, SIGKILL after a grace period, remove
 *       every file the cluster made.
 *
 * Layout of D: m<i>/ (machine i's data directory), m<i>.conf, m<i>.log,
 * cluster.pids. Readiness travels over pipes (each machine writes a byte
 * when ready), never through sleeps; deaths are watched with pidfds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/tools.h"
#include "util/common.h"
#include "util/config.h"

#define MAX_MACHINES     (FARM_CONFIG_MAX_PEERS + 1) /* a view's most */
#define STOP_GRACE_MS    5000
#define READY_TIMEOUT_MS 30000

struct opts {
	const char *dir;
	unsigned machines;
	const char *job;
	const char *fabric;
	const char *region_size;
	const char *zk;
	bool keep_logs;
};

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static void cusage(FILE *out)
{
	fprintf(out,
	        "usage: farm cluster run|start --dir DIR --machines N "
	        "[options]\n"
	        "       farm cluster stop --dir DIR\n"
	        "\n"
	        "  run    start N machines, run the job to its end, stop, "
	        "clean up\n"
	        "  start  start N machines and return once all are ready\n"
	        "  stop   stop the machines of DIR by pid and remove their "
	        "files\n"
	        "\n"
	        "  --dir DIR           the cluster's directory (created)\n"
	        "  --machines N        how many machines (1..%d; default 3)\n"
	        "  --job NAME          serve (default) or demo\n"
	        "  --fabric NAME       shm (default) or verbs\n"
	        "  --region-size SIZE  each machine's region (default 64M "
	        "here)\n"
	        "  --zk HOST:PORT      membership in this ZooKeeper (a "
	        "private\n"
	        "                      one: scripts/zk-local); default: each\n"
	        "                      machine lists the others (static)\n"
	        "  --keep-logs         leave DIR/m<i>.log after stopping\n"
	        "  -h, --help          this text\n",
	        MAX_MACHINES);
}

static int write_conf(const struct opts *o, unsigned i, char *path, size_t len)
{
	snprintf(path, len, "%s/m%u.conf", o->dir, i);
	FILE *f = fopen(path, "we");
	if (!f)
		return -errno;
	fprintf(f, "# machine %u of a local cluster (farm cluster)\n", i);
	fprintf(f, "machine_id = %u\ndata_dir = %s/m%u\njob = %s\n", i, o->dir,
	        i, o->job);
	fprintf(f, "region_size = %s\n", o->region_size);
	if (o->fabric)
		fprintf(f, "fabric = %s\n", o->fabric);
	fprintf(f, "expect_machines = %u\n", o->machines);
	if (o->machines > 64) /* ids 0..n-1 past the default id space */
		fprintf(f, "max_machines = %u\n", o->machines);
	if (o->zk) {
		/* One znode tree per cluster directory. */
		fprintf(f, "zk = %s\nzk_root = /libfarm/cluster-%ld\n", o->zk,
		        (long)getpid());
	} else {
		for (unsigned j = 0; j < o->machines; j++)
			if (j != i)
				fprintf(f, "peer = %u %s/m%u\n", j, o->dir, j);
	}
	return fclose(f) == 0 ? 0 : -errno;
}

static int write_pids(const char *dir, const pid_t *pids, unsigned n)
{
	char path[FARM_CONFIG_STR + 32];
	snprintf(path, sizeof(path), "%s/cluster.pids", dir);
	FILE *f = fopen(path, "we");
	if (!f)
		return -errno;
	for (unsigned i = 0; i < n; i++)
		fprintf(f, "%u %d\n", i, (int)pids[i]);
	return fclose(f) == 0 ? 0 : -errno;
}

static int rm_cb(const char *path, const struct stat *sb, int flag,
                 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Remove what the cluster made in DIR (and DIR if it ends up empty). A
 * machine that was killed leaves its data directory behind (region files,
 * lock, table): the cluster made it, so the cluster removes it. */
static void clean_dir(const char *dir, bool keep_logs)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		size_t len = strlen(n);
		bool conf =
		        n[0] == 'm' && len > 5 && !strcmp(n + len - 5, ".conf");
		bool log =
		        n[0] == 'm' && len > 4 && !strcmp(n + len - 4, ".log");
		if (conf || (log && !keep_logs) || !strcmp(n, "cluster.pids"))
			unlinkat(dirfd(d), n, 0);
		else if (n[0] == 'm' && e->d_type == DT_DIR &&
		         strspn(n + 1, "0123456789") == len - 1) {
			char sub[FARM_CONFIG_STR + 300];
			snprintf(sub, sizeof(sub), "%s/%s", dir, n);
			nftw(sub, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
		}
	}
	closedir(d);
	rmdir(dir);
}

/* Stop the machines: SIGTERM, wait up to the grace period on their pidfds,
 * then SIGKILL. Returns how many had to be killed. */
static unsigned stop_pids(const pid_t *pids, unsigned n, bool children)
{
	int fds[MAX_MACHINES];
	for (unsigned i = 0; i < n; i++) {
		fds[i] = pids[i] > 0 ? pidfd_open_(pids[i]) : -1;
		if (fds[i] >= 0)
			kill(pids[i], SIGTERM);
	}
	uint64_t deadline = farm_now_ns() + STOP_GRACE_MS * 1000000ull;
	unsigned killed = 0;
	for (unsigned i = 0; i < n; i++) {
		if (fds[i] < 0)
			continue;
		uint64_t now = farm_now_ns();
		int ms =
		        now >= deadline ? 0 : (int)((deadline - now) / 1000000);
		struct pollfd p = {.fd = fds[i], .events = POLLIN};
		if (poll(&p, 1, ms) == 0) {
			kill(pids[i], SIGKILL);
			killed++;
			p.revents = 0;
			poll(&p, 1, STOP_GRACE_MS);
		}
		close(fds[i]);
		if (children)
			waitpid(pids[i], NULL, 0);
	}
	return killed;
}

static void show_log(const char *dir, unsigned i)
{
	char path[FARM_CONFIG_STR + 32];
	snprintf(path, sizeof(path), "%s/m%u.log", dir, i);
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	char line[512];
	fprintf(stderr, "---- %s ----\n", path);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

static int start(const struct opts *o, const char *self, bool detach,
                 pid_t *pids, int *go_fds)
{
	char path[FARM_CONFIG_STR + 32];
	int rc = 0;
	if (mkdir(o->dir, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, "farm cluster: cannot create %s: %s\n", o->dir,
		        strerror(errno));
		return -errno;
	}
	snprintf(path, sizeof(path), "%s/cluster.pids", o->dir);
	if (access(path, F_OK) == 0) {
		fprintf(stderr,
		        "farm cluster: %s exists: a cluster runs in %s "
		        "(farm cluster stop --dir %s)\n",
		        path, o->dir, o->dir);
		return -EEXIST;
	}
	int ready[MAX_MACHINES];
	for (unsigned i = 0; i < o->machines; i++) {
		pids[i] = -1;
		ready[i] = go_fds[i] = -1;
	}
	for (unsigned i = 0; i < o->machines; i++) {
		char conf[FARM_CONFIG_STR + 32], logp[FARM_CONFIG_STR + 32];
		rc = write_conf(o, i, conf, sizeof(conf));
		if (rc)
			goto fail;
		int rp[2], gp[2];
		if (pipe2(rp, O_CLOEXEC) || pipe2(gp, O_CLOEXEC)) {
			rc = -errno;
			goto fail;
		}
		snprintf(logp, sizeof(logp), "%s/m%u.log", o->dir, i);
		pid_t pid = fork();
		if (pid < 0) {
			rc = -errno;
			goto fail;
		}
		if (pid == 0) {
			sigset_t none;
			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			if (detach)
				setsid();
			else /* a machine does not outlive its launcher */
				prctl(PR_SET_PDEATHSIG, SIGTERM);
			int lf = open(logp,
			              O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			              0600);
			if (lf >= 0) {
				dup2(lf, STDERR_FILENO);
				if (detach)
					dup2(lf, STDOUT_FILENO);
			}
			/* The two pipe ends the machine uses survive exec. */
			int r = dup(rp[1]), g = dup(gp[0]);
			char rfd[16], gfd[16];
			snprintf(rfd, sizeof(rfd), "%d", r);
			snprintf(gfd, sizeof(gfd), "%d", g);
			execl(self, self, "machine", "--config", conf,
			      "--ready-fd", rfd, "--go-fd", gfd, (char *)NULL);
			fprintf(stderr, "farm cluster: exec %s: %s\n", self,
			        strerror(errno));
			_exit(127);
		}
		pids[i] = pid;
		close(rp[1]);
		close(gp[0]);
		ready[i] = rp[0];
		go_fds[i] = gp[1];
	}
	/* Wait until every machine says it is ready, or one dies. */
	uint64_t deadline = farm_now_ns() + READY_TIMEOUT_MS * 1000000ull;
	for (unsigned i = 0; i < o->machines; i++) {
		struct pollfd p = {.fd = ready[i], .events = POLLIN};
		uint64_t now = farm_now_ns();
		int ms =
		        now >= deadline ? 0 : (int)((deadline - now) / 1000000);
		char b;
		if (poll(&p, 1, ms) != 1 || read(ready[i], &b, 1) != 1) {
			fprintf(stderr,
			        "farm cluster: machine %u did not start\n", i);
			show_log(o->dir, i);
			rc = -ECHILD;
			goto fail;
		}
		close(ready[i]);
		ready[i] = -1;
	}
	rc = write_pids(o->dir, pids, o->machines);
	if (rc)
		goto fail;
	return 0;
fail:
	for (unsigned i = 0; i < o->machines; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (go_fds[i] >= 0)
			close(go_fds[i]);
		go_fds[i] = -1;
	}
	stop_pids(pids, o->machines, true);
	clean_dir(o->dir, false);
	return rc;
}

static int go(const struct opts *o, int *go_fds)
{
	for (unsigned i = 0; i < o->machines; i++) {
		char b = 'g';
		if (write(go_fds[i], &b, 1) != 1)
			return -errno;
		close(go_fds[i]);
		go_fds[i] = -1;
	}
	return 0;
}

static int read_pids(const char *dir, pid_t *pids, unsigned *n)
{
	char path[FARM_CONFIG_STR + 32];
	snprintf(path, sizeof(path), "%s/cluster.pids", dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	unsigned i;
	int pid;
	*n = 0;
	while (*n < MAX_MACHINES && fscanf(f, "%u %d", &i, &pid) == 2)
		pids[(*n)++] = pid;
	fclose(f);
	return 0;
}

/* The options after the verb into @o. -1 to go on, else the exit code
 * (0 after --help, 2 on a usage error). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lopts[] = {
	        {"dir", required_argument, NULL, 'd'},
	        {"machines", required_argument, NULL, 'n'},
	        {"job", required_argument, NULL, 'j'},
	        {"zk", required_argument, NULL, 'z'},
	        {"fabric", required_argument, NULL, 'f'},
	        {"region-size", required_argument, NULL, 's'},
	        {"keep-logs", no_argument, NULL, 'k'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case 'd': o->dir = optarg; break;
		case 'n':
			o->machines = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'j': o->job = optarg; break;
		case 'z': o->zk = optarg; break;
		case 'f': o->fabric = optarg; break;
		case 's': o->region_size = optarg; break;
		case 'k': o->keep_logs = true; break;
		case 'h': cusage(stdout); return 0;
		default: cusage(stderr); return 2;
		}
	}
	uint64_t rs;
	if (!o->dir || optind != argc || o->machines < 1 ||
	    o->machines > MAX_MACHINES ||
	    farm_parse_size(o->region_size, &rs)) {
		cusage(stderr);
		return 2;
	}
	return -1;
}

/* The cluster directory's absolute path (to free), created unless the verb
 * is "stop" (which only reads it); NULL after saying why. */
static char *cluster_dir(const char *dir, const char *verb)
{
	char *abs = realpath(dir, NULL);
	if (!abs && strcmp(verb, "stop") != 0) {
		if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
			fprintf(stderr, "farm cluster: cannot create %s: %s\n",
			        dir, strerror(errno));
			return NULL;
		}
		abs = realpath(dir, NULL);
	}
	if (!abs)
		fprintf(stderr, "farm cluster: %s: %s\n", dir, strerror(errno));
	return abs;
}

static int verb_stop(const struct opts *o)
{
	pid_t pids[MAX_MACHINES] = {0};
	unsigned n = 0;
	if (read_pids(o->dir, pids, &n)) {
		fprintf(stderr, "farm cluster: no cluster runs in %s\n",
		        o->dir);
		return 1;
	}
	unsigned killed = stop_pids(pids, n, false);
	clean_dir(o->dir, o->keep_logs);
	printf("stopped %u machine%s in %s%s\n", n, n == 1 ? "" : "s", o->dir,
	       killed ? " (some needed SIGKILL)" : "");
	return 0;
}

static int verb_start(const struct opts *o, const char *self)
{
	pid_t pids[MAX_MACHINES] = {0};
	int go_fds[MAX_MACHINES];
	if (start(o, self, true, pids, go_fds) != 0 || go(o, go_fds) != 0)
		return 1;
	printf("started %u machines in %s (stop: farm cluster "
	       "stop --dir %s)\n",
	       o->machines, o->dir, o->dir);
	return 0;
}

/* Note that machine @pid exited with @st; counts a failure in *@failed. */
static void reap(const struct opts *o, pid_t *pids, pid_t pid, int st,
                 unsigned *left, unsigned *failed)
{
	for (unsigned i = 0; i < o->machines; i++) {
		if (pids[i] != pid)
			continue;
		pids[i] = -1;
		(*left)--;
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			(*failed)++;
			fprintf(stderr, "farm cluster: machine %u failed\n", i);
			show_log(o->dir, i);
		}
	}
}

/* Wait for the machines of a running cluster to end (a job) or for one to
 * end or a stop signal (serving, as a serving machine never ends by
 * itself); the number that failed. @block holds the signals to park on. */
static unsigned wait_machines(const struct opts *o, pid_t *pids,
                              const sigset_t *block)
{
	unsigned failed = 0, left = o->machines;
	bool serving = !strcmp(o->job, "serve");
	while (left) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid == 0) {
			/* Park until a machine exits (SIGCHLD) or a stop
			 * signal arrives. */
			int sig = sigwaitinfo(block, NULL);
			if (sig == SIGINT || sig == SIGTERM)
				break;
			continue;
		}
		if (pid < 0)
			break;
		reap(o, pids, pid, st, &left, &failed);
		if (serving)
			break;
	}
	return failed;
}

static int verb_run(const struct opts *o, const char *self)
{
	pid_t pids[MAX_MACHINES] = {0};
	int go_fds[MAX_MACHINES];
	int rc = 1;
	/* ^C stops the machines cleanly rather than orphaning them. */
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, &old);
	if (start(o, self, false, pids, go_fds) == 0) {
		printf("local cluster: %u machines in %s, job '%s'\n",
		       o->machines, o->dir, o->job);
		fflush(stdout);
		rc = go(o, go_fds) ? 1 : 0;
		if (rc == 0 && wait_machines(o, pids, &block))
			rc = 1;
		stop_pids(pids, o->machines, true);
		clean_dir(o->dir, o->keep_logs);
		printf("local cluster stopped%s\n",
		       rc ? " (with failures)" : "");
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return rc;
}

int farm_cmd_cluster(int argc, char **argv, const char *self)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		cusage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *verb = argv[1];
	struct opts o = {.machines = 3, .job = "serve", .region_size = "64M"};
	int rc = parse_opts(argc, argv, &o);
	if (rc >= 0)
		return rc;
	char *abs = cluster_dir(o.dir, verb);
	if (!abs)
		return 1;
	o.dir = abs;
	if (!strcmp(verb, "stop")) {
		rc = verb_stop(&o);
	} else if (!strcmp(verb, "start")) {
		rc = verb_start(&o, self);
	} else if (!strcmp(verb, "run")) {
		rc = verb_run(&o, self);
	} else {
		cusage(stderr);
		rc = 2;
	}
	free(abs);
	return rc;
}
