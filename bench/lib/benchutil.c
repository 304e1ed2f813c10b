/*
 * Small helpers the benchmarks share (benchutil.h).
 */
#include "benchutil.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

uint64_t bu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * BU_NS_PER_S + (uint64_t)ts.tv_nsec;
}

uint64_t bu_rand64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int bu_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

int bu_parse_u(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	if (!s)
		return -1;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* The shift a size suffix stands for, *@end moved past it (0: none). */
static unsigned size_shift(char **end)
{
	static const char suffix[] = "kmgt";
	const char *p = strchr(suffix, tolower((unsigned char)**end));
	if (!**end || !p)
		return 0;
	(*end)++;
	return 10u * (unsigned)(p - suffix + 1);
}

int bu_parse_size(const char *s, uint64_t *out)
{
	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	unsigned shift = size_shift(&end);
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

int bu_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int bu_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int bu_read_full(int fd, void *p, size_t len, const volatile sig_atomic_t *stop)
{
	uint8_t *b = p;
	while (len) {
		ssize_t n = read(fd, b, len);
		if (n < 0 && errno == EINTR && !(stop && *stop))
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

int bu_write_full(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;
	while (len) {
		ssize_t n = write(fd, b, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

void bu_rm_tree(int at, const char *path, int depth)
{
	int fd = openat(at, path,
	                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		DIR *d = fdopendir(fd);
		if (!d) {
			close(fd);
			return;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			if (unlinkat(fd, e->d_name, 0) != 0 &&
			    errno == EISDIR && depth > 0)
				bu_rm_tree(fd, e->d_name, depth - 1);
		}
		closedir(d);
	}
	unlinkat(at, path, AT_REMOVEDIR);
}

void bu_pin_to(int cpu, const char *prog)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		fprintf(stderr, "%s: cannot pin to CPU %d: %s\n", prog, cpu,
		        strerror(errno));
}

uint64_t bu_proc_cpu_ns(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task",
	         pid ? (int)pid : (int)getpid());
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char f[128];
		snprintf(f, sizeof(f), "%s/%.20s/schedstat", path, e->d_name);
		FILE *fp = fopen(f, "r");
		if (!fp)
			continue;
		unsigned long long ns = 0;
		if (fscanf(fp, "%llu", &ns) == 1)
			sum += ns;
		fclose(fp);
	}
	closedir(d);
	return sum;
}

uint64_t bu_self_cpu_ns(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
	               BU_NS_PER_S +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
	               1000ull;
}

void bu_on_stop(void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}
