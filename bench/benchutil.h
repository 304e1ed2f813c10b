/*
 * Small helpers the benchmarks share: removing a benchmark's scratch
 * directory, pinning a process to a CPU, the CPU time a process used,
 * an option's number.
 * Header-only.
 */
#ifndef FARM_BENCH_BENCHUTIL_H
#define FARM_BENCH_BENCHUTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

/* *@out = @s, a decimal number in [@lo, @hi]; -1 when @s is NULL (an
 * option's missing value), empty, not a number or out of range. */
static inline int bu_parse_u(const char *s, unsigned lo, unsigned hi,
                             unsigned *out)
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

/* Remove @path (relative to @at) and what is in it, @depth levels down at
 * most. Never follows links. */
static inline void bu_rm_tree(int at, const char *path, int depth)
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

/* Pin the calling process to @cpu (nothing when @cpu < 0); a failure is
 * said on stderr, prefixed with @prog, and the run goes on unpinned. */
static inline void bu_pin_to(int cpu, const char *prog)
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

/* CPU time process @pid (0: this one) has used so far, all its threads,
 * in ns (each thread's /proc/PID/task/TID/schedstat: exact, not ticks);
 * 0 when it cannot be read. A thread that exited is not counted, so take
 * differences while the threads live. */
static inline uint64_t bu_proc_cpu_ns(pid_t pid)
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

/* CPU time this process has used, threads that exited included (user +
 * system, getrusage), in ns. */
static inline uint64_t bu_self_cpu_ns(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
	               1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
	               1000ull;
}

#endif
