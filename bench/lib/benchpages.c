/*
 * --pages: a private tmpfs over /dev/shm per measurement (benchpages.h).
 */
#include "benchpages.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define BP_DIR     "/dev/shm"
#define BP_HUGE    (2u << 20)
#define BP_SLACK   (256ull << 20) /* logs, rings, the initiator's files */
#define BP_THP_SYS "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

int bp_parse(const char *arg, unsigned *pages)
{
	if (strcmp(arg, "4k") == 0)
		*pages = BP_4K;
	else if (strcmp(arg, "2m") == 0)
		*pages = BP_2M;
	else if (strcmp(arg, "both") == 0)
		*pages = BP_BOTH;
	else
		return -EINVAL;
	return 0;
}

const char *bp_key(unsigned pages)
{
	return pages == BP_2M ? "2m" : "4k";
}

const char *bp_words(unsigned pages)
{
	return pages == BP_2M ? "2 MiB" : "4 KiB";
}

void *bp_shared(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
	               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void bp_shared_free(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}

/* ---- smaps ----------------------------------------------------------------- */

/* A smaps line that opens a mapping: "start-end perms offset dev inode
 * [path]". Its path, or "" (anonymous); NULL when @line is a field. */
static const char *mapping_path(const char *line)
{
	const char *sp = strchr(line, ' ');
	if (!sp || sp[-1] == ':' || !memchr(line, '-', (size_t)(sp - line)))
		return NULL;
	int n = 0;
	if (sscanf(line, "%*s %*s %*s %*s %*s %n", &n) < 0 || n == 0)
		return "";
	return line + n;
}

int bp_huge_of(pid_t pid, const char *prefix, struct bp_huge *h)
{
	char path[64];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/smaps");
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	size_t plen = strlen(prefix);
	bool in = false;
	char line[4096];
	while (fgets(line, sizeof(line), f)) {
		const char *mp = mapping_path(line);
		unsigned long long kb;
		if (mp) {
			in = strncmp(mp, prefix, plen) == 0;
			continue;
		}
		if (!in)
			continue;
		if (sscanf(line, "Rss: %llu kB", &kb) == 1)
			h->rss += kb << 10;
		else if (sscanf(line, "ShmemPmdMapped: %llu kB", &kb) == 1 ||
		         sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1)
			h->pmd += kb << 10;
	}
	fclose(f);
	return 0;
}

double bp_huge_share(const struct bp_huge *h)
{
	return h->rss ? (double)h->pmd / (double)h->rss : -1;
}

/* ---- the private mount ----------------------------------------------------- */

/* In a child: a mount namespace of its own, nothing in it propagated
 * back (MS_PRIVATE over every mount: systemd makes / shared, and a mount
 * under a shared one would appear in the parent's namespace too), then a
 * tmpfs of @bytes with huge=@huge over /dev/shm. 0 or a negated errno
 * (said into @why). */
static int private_shm(const char *huge, uint64_t bytes, char *why,
                       size_t whylen)
{
	if (unshare(CLONE_NEWNS) != 0) {
		int e = errno;
		snprintf(why, whylen, "unshare(CLONE_NEWNS) refused: %s",
		         strerror(e));
		return -e;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		int e = errno;
		snprintf(why, whylen, "making / private refused: %s",
		         strerror(e));
		return -e;
	}
	char opt[96];
	snprintf(opt, sizeof(opt), "huge=%s,size=%llu,mode=1777", huge,
	         (unsigned long long)bytes);
	if (mount("tmpfs", BP_DIR, "tmpfs", MS_NOSUID | MS_NODEV, opt) != 0) {
		int e = errno;
		snprintf(why, whylen, "mount -t tmpfs -o %s on %s refused: %s",
		         opt, BP_DIR, strerror(e));
		return -e;
	}
	return 0;
}

/* In the probe's child: a 4 MiB file on a huge=advise tmpfs, mapped,
 * advised and populated as the shm fabric does its regions; 0 if it is
 * mapped by 2 MiB entries. */
static int probe_child(char *why, size_t whylen)
{
	int rc = private_shm("advise", 8u << 20, why, whylen);
	if (rc)
		return rc;
	size_t len = 2 * BP_HUGE;
	int fd = open(BP_DIR "/probe", O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
		snprintf(why, whylen, "probe file: %s", strerror(errno));
		return -EIO;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(why, whylen, "probe mmap: %s", strerror(errno));
		return -EIO;
	}
	(void)madvise(p, len, MADV_HUGEPAGE);
	if (madvise(p, len, MADV_POPULATE_WRITE) != 0) {
		snprintf(why, whylen, "probe populate: %s", strerror(errno));
		return -EIO;
	}
	struct bp_huge h = {0, 0};
	if (bp_huge_of(0, BP_DIR "/", &h) || h.pmd == 0) {
		snprintf(why, whylen,
		         "no 2 MiB page in a huge=advise tmpfs (shmem "
		         "transparent huge pages unavailable)");
		return -ENOTSUP;
	}
	return 0;
}

/* MemAvailable in bytes, or 0. */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return 0;
	char line[256];
	unsigned long long kb = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb << 10;
}

/* Why this host cannot have a private huge tmpfs, into @why ("" if it
 * can): the cheap checks, then the probe in a child. */
static void host_check(uint64_t need, char *why, size_t whylen)
{
	why[0] = 0;
	char thp[256] = "";
	FILE *f = fopen(BP_THP_SYS, "re");
	if (f) {
		if (!fgets(thp, sizeof(thp), f))
			thp[0] = 0;
		fclose(f);
	}
	uint64_t avail = mem_available();
	if (geteuid() != 0) {
		snprintf(why, whylen,
		         "not root (a private tmpfs on %s needs "
		         "CAP_SYS_ADMIN)",
		         BP_DIR);
		return;
	}
	if (!thp[0]) {
		snprintf(why, whylen, "no THP for shmem (%s unreadable)",
		         BP_THP_SYS);
		return;
	}
	if (strstr(thp, "[deny]")) {
		snprintf(why, whylen, "THP for shmem denied (%s: deny)",
		         BP_THP_SYS);
		return;
	}
	if (avail && avail < need) {
		snprintf(why, whylen,
		         "%llu MiB available, the measurement needs %llu",
		         (unsigned long long)(avail >> 20),
		         (unsigned long long)(need >> 20));
		return;
	}
	char *msg = bp_shared(whylen);
	if (!msg) {
		snprintf(why, whylen, "no shared page for the probe");
		return;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int rc = probe_child(msg, whylen - 1);
		_exit(rc ? 1 : 0);
	}
	int st = 0;
	if (pid < 0)
		snprintf(why, whylen, "fork: %s", strerror(errno));
	else if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	         WEXITSTATUS(st) != 0)
		snprintf(why, whylen, "%s", msg[0] ? msg : "the probe failed");
	bp_shared_free(msg, whylen);
}

int bp_plan(struct bp_plan *p, unsigned asked, uint64_t need, const char *prog)
{
	memset(p, 0, sizeof(*p));
	uint64_t avail = mem_available();
	uint64_t want = need + need / 4 + BP_SLACK;
	p->mount_bytes = avail && want > avail ? avail : want;
	p->mount_bytes =
	        (p->mount_bytes + BP_HUGE - 1) & ~(uint64_t)(BP_HUGE - 1);
	host_check(need, p->note, sizeof(p->note));
	if (!p->note[0]) {
		p->private_mount = true;
		p->pages = asked ? asked : BP_BOTH;
		return 0;
	}
	if (asked & BP_2M) {
		fprintf(stderr, "%s: --pages %s: no 2 MiB pages here: %s\n",
		        prog, asked == BP_BOTH ? "both" : "2m", p->note);
		return -ENOTSUP;
	}
	p->pages = BP_4K;
	return 0;
}

int bp_run(const struct bp_plan *p, unsigned pages, int (*fn)(void *),
           void *arg, const char *prog)
{
	if (!p->private_mount) {
		if (pages != BP_4K)
			return -ENOTSUP;
		return fn(arg);
	}
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		fprintf(stderr, "%s: fork: %s\n", prog, strerror(e));
		return -e;
	}
	if (pid == 0) {
		/* The measurement goes when this program does. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		char why[200];
		if (private_shm(pages == BP_2M ? "advise" : "never",
		                p->mount_bytes, why, sizeof(why))) {
			fprintf(stderr, "%s: %s\n", prog, why);
			_exit(1);
		}
		int rc = fn(arg);
		fflush(NULL);
		_exit(rc < 0 ? 1 : rc & 0xff);
	}
	int st = 0;
	bool told = false;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			int e = errno;
			fprintf(stderr, "%s: waitpid: %s\n", prog, strerror(e));
			return -e;
		}
		/* A signal this program handles (it stops early): the
		 * measurement stops too. */
		if (!told)
			kill(pid, SIGTERM);
		told = true;
	}
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}
