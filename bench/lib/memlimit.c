/*
 * The limit loop (memlimit.h). The table is written once whole, so every
 * page is backed before the clock starts; the loop's copies are folded
 * into a sum the caller cannot see but the compiler cannot drop.
 */
#include "memlimit.h"
#include "benchutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ML_MAX_DEPTH 256u
#define ML_LINE      64u

volatile uint64_t ml_sink;

int ml_open(struct ml_table *t, uint64_t nbuckets, uint32_t bucket_bytes,
            const char *dir)
{
	memset(t, 0, sizeof(*t));
	if (!nbuckets || !bucket_bytes || bucket_bytes % ML_LINE)
		return -EINVAL;
	uint64_t bytes = (nbuckets + 1) * bucket_bytes;
	int fd = -1;
	if (dir) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/memlimit.XXXXXX", dir);
		fd = mkstemp(path);
		/* Sized, not allocated: posix_fallocate would allocate 4 KiB
		 * pages before any advice, where the shm fabric's regions on
		 * a huge= tmpfs get 2 MiB ones (src/fabric/README.md). The
		 * pages are allocated below, after the advice, as the
		 * fabric's are. */
		int fe = fd < 0 ? errno
		                : (unlink(path),
		                   ftruncate(fd, (off_t)bytes) ? errno : 0);
		if (fe) {
			fprintf(stderr, "memlimit: table in %s: %s\n", dir,
			        strerror(fe));
			if (fd >= 0)
				close(fd);
			return -fe;
		}
	}
	void *p =
	        mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	             fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED) {
		fprintf(stderr, "memlimit: mmap %llu B: %s\n",
		        (unsigned long long)bytes, strerror(e));
		return -e;
	}
	/* As the shm fabric advises its regions: where tmpfs or anonymous
	 * memory may have huge pages, the table has them as the store does. */
	(void)madvise(p, bytes, MADV_HUGEPAGE);
	/* Every page allocated now: on a full tmpfs this fails with ENOMEM
	 * instead of the first write raising SIGBUS in the middle of the
	 * benchmark. */
	if (fd >= 0 && madvise(p, bytes, MADV_POPULATE_WRITE) != 0) {
		e = errno;
		fprintf(stderr, "memlimit: allocating %llu B in %s: %s\n",
		        (unsigned long long)bytes, dir, strerror(e));
		munmap(p, bytes);
		return e == ENOMEM || e == EFAULT ? -ENOSPC : -e;
	}
	uint64_t seed = 1;
	for (uint64_t off = 0; off < bytes; off += 8) {
		uint64_t x = bu_rand64(&seed);
		memcpy((uint8_t *)p + off, &x, 8);
	}
	t->base = p;
	t->bytes = bytes;
	t->nbuckets = nbuckets;
	t->bucket_bytes = bucket_bytes;
	return 0;
}

void ml_close(struct ml_table *t)
{
	if (t->base)
		munmap(t->base, t->bytes);
	memset(t, 0, sizeof(*t));
}

static inline uint64_t ml_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * BU_NS_PER_S + (uint64_t)ts.tv_nsec;
}

int ml_slice(const struct ml_table *t, unsigned depth, double seconds,
             struct ml_tally *tl)
{
	if (depth < 1)
		depth = 1;
	if (depth > ML_MAX_DEPTH)
		depth = ML_MAX_DEPTH;
	const uint32_t span = 2 * t->bucket_bytes;
	uint8_t *buf = aligned_alloc(ML_LINE, (size_t)depth * span);
	if (!buf)
		return -ENOMEM;
	const uint8_t *p[ML_MAX_DEPTH];
	uint64_t n = 0, ctr = tl->ctr, sum = 0;
	uint64_t c0 = thread_cpu_ns();
	uint64_t t0 = bu_now_ns(), now = t0;
	uint64_t dur = (uint64_t)(seconds * 1e9);
	while (now - t0 < dur) {
		/* 1024 lookups between clock reads. */
		for (unsigned g = 0; g < 1024; g += depth) {
			for (unsigned j = 0; j < depth; j++) {
				uint64_t b = ml_mix(++ctr) % t->nbuckets;
				p[j] = t->base + b * t->bucket_bytes;
				if (depth > 1)
					for (uint32_t l = 0; l < span;
					     l += ML_LINE)
						__builtin_prefetch(p[j] + l);
			}
			for (unsigned j = 0; j < depth; j++) {
				uint8_t *d = buf + (size_t)j * span;
				memcpy(d, p[j], span);
				sum += d[(ctr + j) % span];
			}
			n += depth;
		}
		now = bu_now_ns();
	}
	tl->cpu_ns += thread_cpu_ns() - c0;
	tl->ns += now - t0;
	tl->n += n;
	tl->ctr = ctr;
	ml_sink = sum;
	free(buf);
	return 0;
}

double ml_run(const struct ml_table *t, unsigned depth, double seconds,
              double *per_cpu_s)
{
	struct ml_tally tl = {0};
	if (per_cpu_s)
		*per_cpu_s = 0;
	if (ml_slice(t, depth, seconds, &tl) || !tl.ns)
		return 0;
	if (per_cpu_s)
		*per_cpu_s = tl.cpu_ns
		                     ? (double)tl.n / ((double)tl.cpu_ns / 1e9)
		                     : 0;
	return (double)tl.n / ((double)tl.ns / 1e9);
}
