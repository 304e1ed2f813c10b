/*
 * --pages 4k|2m|both: the page size of the memory a benchmark's machines
 * keep their data in (benchpages.c). The shm fabric's region files live
 * in /dev/shm; a tmpfs gives 2 MiB pages only when mounted with huge=, and
 * many hosts mount /dev/shm without it. A measurement with 2 MiB pages runs
 * in a child in a private mount namespace, over which a tmpfs mounted with
 * huge=advise hides /dev/shm: every process the measurement forks sees it,
 * nothing outside the namespace changes, and the mount (with whatever the
 * measurement left in it) goes when the namespace's last process does.
 * With 4 KiB pages the same is done with huge=never, so that the two
 * figures differ in the page size alone; where no namespace can be made
 * (not root), 4 KiB pages are measured on the host's /dev/shm as it is.
 * What a measurement got is read back from smaps, not assumed.
 */
#ifndef FARM_BENCH_BENCHPAGES_H
#define FARM_BENCH_BENCHPAGES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define BP_4K   1u
#define BP_2M   2u
#define BP_BOTH (BP_4K | BP_2M)

struct bp_plan {
	unsigned pages;       /* BP_* to measure, 4 KiB first */
	bool private_mount;   /* a private tmpfs per measurement */
	uint64_t mount_bytes; /* its size= */
	char note[200]; /* why 2 MiB pages are not measured; "" if they are */
};

/* "4k", "2m" or "both" into *@pages. 0 or -EINVAL. */
int bp_parse(const char *arg, unsigned *pages);

/* The page sizes to measure: @asked (BP_*, 0: both where this host
 * allows, else 4 KiB with a note why) for a measurement that keeps about
 * @need bytes under /dev/shm. 0, or -ENOTSUP when 2 MiB pages were asked
 * for and cannot be had (said on stderr, with @prog). A probe runs in a
 * child: a private mount, a 2 MiB file advised and populated, its smaps. */
int bp_plan(struct bp_plan *p, unsigned asked, uint64_t need, const char *prog);

/* Run @fn(@arg) with @pages (BP_4K or BP_2M) under /dev/shm, as @p says:
 * in a child in a private mount namespace, or (4 KiB without one) here.
 * What @fn returns (0, or an exit status), 128 + the signal that killed
 * the child, or a negated errno (said on stderr). Results come back
 * through memory from bp_shared, mapped before the call. */
int bp_run(const struct bp_plan *p, unsigned pages, int (*fn)(void *),
           void *arg, const char *prog);

/* Zeroed memory shared with the children bp_run forks (MAP_SHARED,
 * anonymous). NULL on failure. */
void *bp_shared(size_t len);
void bp_shared_free(void *p, size_t len);

/* "4k" or "2m" (the JSON lines' suffixes); "4 KiB" or "2 MiB". */
const char *bp_key(unsigned pages);
const char *bp_words(unsigned pages);

/* What a process's mappings of files under @prefix are backed by, from
 * /proc/@pid/smaps (@pid 0: this process): resident bytes, and those of
 * them mapped by 2 MiB entries (ShmemPmdMapped, FilePmdMapped). */
struct bp_huge {
	uint64_t rss, pmd;
};
/* Added to *@h. 0 or a negated errno. */
int bp_huge_of(pid_t pid, const char *prefix, struct bp_huge *h);
/* pmd / rss, or -1 when nothing was resident. */
double bp_huge_share(const struct bp_huge *h);

#endif
