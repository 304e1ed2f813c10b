/*
 * Small helpers the benchmarks share: removing a benchmark's scratch
 * directory and pinning a process to a CPU. Header-only.
 */
#ifndef FARM_BENCH_BENCHUTIL_H
#define FARM_BENCH_BENCHUTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

#endif
