/*
 * Backing a range of a sparse mapping now (FARM_MEM_SPARSE regions: laid
 * out for every machine id, each page allocated when first written).
 * A page first written on a full tmpfs is a SIGBUS, not an error; so a
 * layer backs the ranges a peer will write when it learns of the peer,
 * and a full file system is an error there.
 */
#ifndef FARM_UTIL_MEM_H
#define FARM_UTIL_MEM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Back [@addr, @addr + @len) (widened to whole pages). 0, or -ENOSPC
 * when the memory behind it is full. A kernel without
 * MADV_POPULATE_WRITE (before 5.14) backs nothing ahead: 0. */
static inline int farm_mem_back(void *addr, size_t len)
{
	if (!len)
		return 0;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)addr & ~(pg - 1);
	uintptr_t e = ((uintptr_t)addr + len + pg - 1) & ~(pg - 1);
	if (madvise((void *)a, e - a, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno == EINVAL)
		return 0; /* no MADV_POPULATE_WRITE here */
	return errno == EFAULT || errno == ENOMEM || errno == EIO ? -ENOSPC
	                                                          : -errno;
}

/* Bytes of [@addr, @addr + @len) in memory now (mincore; widened to
 * whole pages), for measurement. 0 on error. */
static inline uint64_t farm_mem_resident_range(const void *addr, size_t len)
{
	if (!addr || !len)
		return 0;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)addr & ~(pg - 1);
	size_t np = ((uintptr_t)addr + len - a + pg - 1) / pg;
	unsigned char vec[4096]; /* in slices: no large vector */
	uint64_t n = 0;
	for (size_t i = 0; i < np; i += sizeof(vec)) {
		size_t k = np - i < sizeof(vec) ? np - i : sizeof(vec);
		if (mincore((void *)(a + i * pg), k * pg, vec))
			return 0;
		for (size_t j = 0; j < k; j++)
			n += vec[j] & 1;
	}
	return n * pg;
}

#endif
