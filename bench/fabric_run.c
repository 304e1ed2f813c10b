/*
 * fabric_bench: the target machine, the initiator and the measured runs
 * (fabric_bench.h; what is measured: fabric_bench.c's head).
 */
#include "fabric_bench.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint32_t max_size(const struct opts *o)
{
	uint32_t m = 0;
	for (unsigned i = 0; i < o->nsizes; i++)
		m = BU_MAX(m, o->sizes[i]);
	return m;
}

double median(const double *v, unsigned n)
{
	double s[MAX_REPEAT];
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), bu_cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The page faults this process has taken so far. */
static long minor_faults(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt + ru.ru_majflt
	                                        : 0;
}

/* ---- the target ---------------------------------------------------------- */

/* The child: serve the region until told to stop (a byte on @ctl_fd) or
 * until the initiator goes away (end of file, or SIGTERM from the parent
 * death signal); then remove everything, @base too if the initiator (pid
 * @parent) died. SIGINT and SIGHUP are the initiator's to handle: it stops
 * in order and tells us. */
int target_main(const struct opts *o, const char *base, const char *dir,
                int info_fd, int ctl_fd, pid_t parent)
{
	struct target_msg msg;
	memset(&msg, 0, sizeof(msg));
	farm_fabric *fab = NULL;
	farm_region *region = NULL;
	char lbuf[96];
	farm_fabric_attr attr = {
	        .provider = o->net.fabric,
	        .machine_id = TARGET_ID,
	        .data_dir = dir,
	        .listen_addr = bnet_listen(&o->net, 0, lbuf, sizeof(lbuf))};
	int rc = farm_fabric_open(&attr, &fab);
	if (rc) {
		fprintf(stderr, PROG ": target: cannot open fabric in %s: %s\n",
		        dir, farm_strerror(rc));
		goto reply;
	}
	rc = farm_region_create(fab, o->region_size, &region);
	if (rc) {
		fprintf(stderr,
		        PROG ": target: cannot create a %" PRIu64
		             "-byte region: %s\n",
		        o->region_size, farm_strerror(rc));
		goto reply;
	}
	/* Touch every page, so no first-touch fault is measured (the memory
	 * itself is allocated by farm_mem_alloc already). Each page starts
	 * with a different value. */
	uint8_t *p = farm_region_base(region);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t off = 0; off < o->region_size; off += page)
		*(volatile uint64_t *)(void *)(p + off) = off | 1;
	msg.desc = farm_region_desc(region);
	msg.huge = farm_region_is_huge(region);
	rc = farm_fabric_address(fab, msg.addr, sizeof(msg.addr));
	if (rc > 0)
		rc = 0;
reply:
	msg.status = rc;
	bool told = false;
	if (write(info_fd, &msg, sizeof(msg)) == (ssize_t)sizeof(msg) &&
	    rc == 0) {
		char c = 0;
		ssize_t n;
		do
			n = read(ctl_fd, &c, 1);
		while (n < 0 && errno == EINTR && !interrupted);
		told = n == 1 && c == 'q';
	}
	close(info_fd);
	close(ctl_fd);
	farm_region_destroy(region);
	farm_fabric_close(fab);
	if (told)
		return rc ? 1 : 0;
	/* End of file or SIGTERM without 'q': the initiator is dying. We are
	 * handed to a new parent only once its last thread is gone: wait
	 * (briefly) for that, then clean up after it. */
	for (int i = 0; i < 1000 && getppid() == parent; i++)
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	if (getppid() != parent)
		bu_rm_tree(AT_FDCWD, base, 2);
	return rc ? 1 : 0;
}

/* ---- the initiator's measurements ---------------------------------------- */

/* Where a run of windowed requests stands. */
struct window {
	uint64_t posted; /* next wr_id */
	size_t idx;      /* next offset */
	unsigned slot;   /* buffer slot of the next request */
	unsigned sig;    /* requests until the next signaled one */
};

/* Post @room requests as one list (the free part of the window); every
 * --signal-every'th and the last are signaled. Returns 0 or a code. */
static int post_window(struct bench *b, struct window *wn, uint16_t opcode,
                       uint32_t size, unsigned room, const uint32_t *offs,
                       size_t mask)
{
	unsigned w = b->o->outstanding;
	for (unsigned j = 0; j < room; j++) {
		farm_wr *wr = &b->wrs[j];
		wr->next = j + 1 < room ? &b->wrs[j + 1] : NULL;
		wr->wr_id = wn->posted++;
		wr->opcode = opcode;
		wr->flags = 0;
		if (--wn->sig == 0 || j + 1 == room) {
			wr->flags = FARM_WR_SIGNALED;
			wn->sig = b->o->signal_every;
		}
		wr->len = size;
		wr->local = b->buf + (size_t)wn->slot * b->slot;
		if (++wn->slot == w)
			wn->slot = 0;
		wr->lmr = b->lmr;
		wr->raddr = b->rdesc.addr + offs[wn->idx++ & mask];
		wr->rkey = b->rdesc.key;
	}
	return farm_ep_post(b->ep, &b->wrs[0], NULL);
}

/*
 * Run @opcode requests of @size bytes with up to --outstanding in flight,
 * at offs[i & mask], until @count have completed or @secs have passed
 * (whichever is given); every request completes before it returns. Sets
 * *mops to completed requests per microsecond.
 */
static int run_window(struct bench *b, uint16_t opcode, uint32_t size,
                      const uint32_t *offs, size_t mask, uint64_t count,
                      double secs, double *mops)
{
	unsigned w = b->o->outstanding;
	struct window wn = {.sig = b->o->signal_every};
	uint64_t done = 0;
	uint64_t t0 = bu_now_ns(), now = t0;
	uint64_t deadline = secs > 0 ? t0 + (uint64_t)(secs * 1e9) : UINT64_MAX;
	uint64_t last_progress = t0;
	unsigned iter = 0;
	bool stop = false;
	while (done < wn.posted || !stop) {
		if (!stop && wn.posted - done < w) {
			unsigned room = (unsigned)(w - (wn.posted - done));
			if (count && count - wn.posted < room)
				room = (unsigned)(count - wn.posted);
			int rc = post_window(b, &wn, opcode, size, room, offs,
			                     mask);
			if (rc) {
				fprintf(stderr, PROG ": post failed: %s\n",
				        farm_strerror(rc));
				return rc;
			}
			if (count && wn.posted == count)
				stop = true;
		}
		/* One completion at a time: the shm provider executes queued
		 * READs up to the signaled one it returns, so those behind it
		 * stay in flight (prefetched) while we re-post. */
		int n = farm_cq_poll(b->cq, 1, b->wcs);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			if (b->wcs[i].status) {
				fprintf(stderr,
				        PROG ": request %" PRIu64
				             " failed: %s\n",
				        b->wcs[i].wr_id,
				        farm_strerror(b->wcs[i].status));
				return b->wcs[i].status;
			}
			/* In order: a completion covers all before it. */
			if (b->wcs[i].wr_id + 1 > done)
				done = b->wcs[i].wr_id + 1;
		}
		if (n)
			iter++;
		if (n == 0 || (iter & 63) == 0) {
			now = bu_now_ns();
			if (now >= deadline || interrupted)
				stop = true;
			if (n)
				last_progress = now;
			else if (now - last_progress > STALL_NS) {
				fprintf(stderr,
				        PROG ": no completion for "
				             "%llu s\n",
				        STALL_NS / 1000000000ull);
				return -ETIMEDOUT;
			}
		}
	}
	now = bu_now_ns();
	if (interrupted)
		return -EINTR;
	b->ops_done = done;
	*mops = (double)done / ((double)(now - t0) / 1e3);
	return 0;
}

/* Keep the compiler from dropping or merging the copies into @p. */
static inline void clobber(void *p)
{
	__asm__ __volatile__("" : : "r"(p) : "memory");
}

/* The upper limit: memcpy from the mapped region into the same rotating
 * slots, same offsets, same size, no fabric in between. */
static int run_memcpy(struct bench *b, uint32_t size, const uint32_t *offs,
                      size_t mask, uint64_t count, double secs, double *mops)
{
	unsigned w = b->o->outstanding;
	uint64_t n = 0;
	size_t idx = 0;
	unsigned slot = 0;
	uint64_t t0 = bu_now_ns(), now;
	uint64_t deadline = secs > 0 ? t0 + (uint64_t)(secs * 1e9) : UINT64_MAX;
	for (;;) {
		uint64_t chunk = count ? BU_MIN(count - n, 1024) : 1024;
		for (uint64_t j = 0; j < chunk; j++, n++) {
			uint8_t *dst = b->buf + (size_t)slot * b->slot;
			if (++slot == w)
				slot = 0;
			memcpy(dst, b->map + offs[idx++ & mask], size);
			clobber(dst);
		}
		now = bu_now_ns();
		if ((count && n == count) || now >= deadline || interrupted)
			break;
	}
	if (interrupted)
		return -EINTR;
	b->ops_done = n;
	*mops = (double)n / ((double)(now - t0) / 1e3);
	return 0;
}

/* One request in flight: post, poll until it completes. Median and p99 of
 * --samples requests, at offs[first...]: each latency run takes its own
 * part of the array, so no run finds the lines an earlier one cached. */
static int run_latency(struct bench *b, uint16_t opcode, uint32_t size,
                       size_t first, uint64_t *p50, uint64_t *p99)
{
	unsigned n = b->o->samples;
	size_t mask = b->noffs - 1;
	for (unsigned i = 0; i < n; i++) {
		farm_wr *wr = &b->wrs[0];
		*wr = (farm_wr){.wr_id = i,
		                .opcode = opcode,
		                .flags = FARM_WR_SIGNALED,
		                .len = size,
		                .local = b->buf + (size_t)(i % 2) * b->slot,
		                .lmr = b->lmr,
		                .raddr = b->rdesc.addr +
		                         b->offs[(first + i) & mask],
		                .rkey = b->rdesc.key};
		uint64_t t0 = bu_now_ns();
		int rc = farm_ep_post(b->ep, wr, NULL);
		if (rc)
			return rc;
		int got;
		uint64_t t1;
		unsigned spins = 0;
		while ((got = farm_cq_poll(b->cq, 1, b->wcs)) == 0) {
			if ((++spins & 1023) == 0 &&
			    (interrupted || bu_now_ns() - t0 > STALL_NS))
				return interrupted ? -EINTR : -ETIMEDOUT;
		}
		t1 = bu_now_ns();
		if (got < 0)
			return got;
		if (b->wcs[0].status)
			return b->wcs[0].status;
		b->lat[i] = t1 - t0;
	}
	qsort(b->lat, n, sizeof(*b->lat), bu_cmp_u64);
	*p50 = b->lat[n / 2];
	*p99 = b->lat[(size_t)n * 99 / 100];
	return 0;
}

/* Map the target's region file (the only mem-*.region in its directory)
 * read-only, shared, populated. */
static int map_region_file(struct bench *b, const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	char name[256] = "";
	unsigned found = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (strncmp(e->d_name, "mem-", 4) == 0 && len > 11 &&
		    strcmp(e->d_name + len - 7, ".region") == 0 &&
		    len < sizeof(name)) {
			strcpy(name, e->d_name);
			found++;
		}
	}
	int dfd = dup(dirfd(d));
	closedir(d);
	if (found != 1) {
		if (dfd >= 0)
			close(dfd);
		fprintf(stderr,
		        PROG ": expected one mem-*.region in %s, "
		             "found %u\n",
		        dir, found);
		return -ENOENT;
	}
	if (dfd < 0)
		return -errno;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	int rc = fd < 0 ? -errno : 0;
	close(dfd);
	if (rc)
		return rc;
	struct stat st;
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < b->rdesc.len) {
		close(fd);
		fprintf(stderr, PROG ": %s/%s is smaller than the region\n",
		        dir, name);
		return -EINVAL;
	}
	/* The region is the whole file: region offset = file offset. */
	void *m =
	        mmap(NULL, (size_t)b->rdesc.len, PROT_READ, MAP_SHARED, fd, 0);
	rc = m == MAP_FAILED ? -errno : 0;
	close(fd);
	if (rc)
		return rc;
	/* Mapped as the provider maps a peer's region (2 MiB entries where
	 * the file has 2 MiB pages), then populated; advice only. */
	(void)madvise(m, (size_t)b->rdesc.len, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_READ
	(void)madvise(m, (size_t)b->rdesc.len, MADV_POPULATE_READ);
#endif
	b->map = m;
	b->map_len = (size_t)b->rdesc.len;
	return 0;
}

/* Fault in both of our mappings of the region: the provider's (one READ
 * per page through the fabric) and ours (one memcpy per page). */
static int warm_up(struct bench *b)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t npages = b->rdesc.len / page;
	size_t n = 1;
	while (n < npages)
		n <<= 1;
	uint32_t *po = malloc(n * sizeof(*po));
	if (!po)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		po[i] = (uint32_t)((i % npages) * page);
	double mops;
	int rc = run_window(b, FARM_WR_READ, FARM_CACHE_LINE, po, n - 1, n, 0,
	                    &mops);
	if (rc == 0 && b->map)
		rc = run_memcpy(b, FARM_CACHE_LINE, po, n - 1, n, 0, &mops);
	free(po);
	return rc;
}

static uint64_t timer_overhead_ns(void)
{
	enum { N = 100000 };
	uint64_t t0 = bu_now_ns(), t = t0;
	for (int i = 0; i < N; i++)
		t = bu_now_ns();
	return (t - t0 + N / 2) / N;
}

/* CPU time so far: the target's (all threads) and ours. */
struct cpu_mark {
	uint64_t tgt, ini;
};

static struct cpu_mark cpu_mark(const struct bench *b)
{
	return (struct cpu_mark){bu_proc_cpu_ns(b->target), bu_proc_cpu_ns(0)};
}

/* CPU ns per request since @m over @ops requests. */
static void cpu_per_op(const struct bench *b, struct cpu_mark m, uint64_t ops,
                       double *tgt, double *ini)
{
	struct cpu_mark n = cpu_mark(b);
	*tgt = ops ? (double)(n.tgt - m.tgt) / (double)ops : 0;
	if (ini)
		*ini = ops ? (double)(n.ini - m.ini) / (double)ops : 0;
}

static int measure(struct bench *b, struct result *res)
{
	const struct opts *o = b->o;
	size_t mask = b->noffs - 1;
	size_t first = 0;
	int rc = 0;
	for (unsigned i = 0; i < o->nsizes; i++) {
		struct cpu_mark m = cpu_mark(b);
		if (o->ops & OP_READ) {
			rc = run_latency(b, FARM_WR_READ, o->sizes[i], first,
			                 &res[i].read_p50, &res[i].read_p99);
			cpu_per_op(b, m, o->samples, &res[i].read_lat_tcpu,
			           NULL);
		}
		first += o->samples;
		m = cpu_mark(b);
		if (rc == 0 && (o->ops & OP_WRITE)) {
			rc = run_latency(b, FARM_WR_WRITE, o->sizes[i], first,
			                 &res[i].write_p50, &res[i].write_p99);
			cpu_per_op(b, m, o->samples, &res[i].write_lat_tcpu,
			           NULL);
		}
		first += o->samples;
		if (rc)
			return rc;
	}
	for (unsigned r = 0; r < o->repeat; r++) {
		for (unsigned i = 0; i < o->nsizes; i++) {
			struct result *s = &res[i];
			uint32_t size = o->sizes[i];
			struct cpu_mark m = cpu_mark(b);
			if (o->ops & OP_READ) {
				rc = run_window(b, FARM_WR_READ, size, b->offs,
				                mask, 0, o->seconds,
				                &s->read_mops[r]);
				cpu_per_op(b, m, b->ops_done, &s->read_tcpu[r],
				           &s->read_icpu[r]);
			}
			m = cpu_mark(b);
			if (rc == 0 && (o->ops & OP_MEMCPY)) {
				rc = run_memcpy(b, size, b->offs, mask, 0,
				                o->seconds, &s->memcpy_mops[r]);
				cpu_per_op(b, m, b->ops_done, &(double){0},
				           &s->memcpy_icpu[r]);
			}
			m = cpu_mark(b);
			if (rc == 0 && (o->ops & OP_WRITE)) {
				rc = run_window(b, FARM_WR_WRITE, size, b->offs,
				                mask, 0, o->seconds,
				                &s->write_mops[r]);
				cpu_per_op(b, m, b->ops_done, &s->write_tcpu[r],
				           &s->write_icpu[r]);
			}
			if (rc)
				return rc;
			double u = is_shm(o) ? 1 : 1e3;
			printf("run %u/%u %6" PRIu32 " B: READ %7.2f  "
			       "memcpy %7.2f  WRITE %7.2f %s\n",
			       r + 1, o->repeat, size, s->read_mops[r] * u,
			       s->memcpy_mops[r] * u, s->write_mops[r] * u,
			       is_shm(o) ? "Mops/s" : "kops/s");
			fflush(stdout);
		}
	}
	return 0;
}

/* Open the initiator's fabric, its buffers and endpoint, connect to the
 * target at @msg's address and map its region (shm). 0 or an error
 * (said). */
static int init_open(struct bench *b, const struct opts *o, const char *dir,
                     const char *target_dir, const struct target_msg *msg)
{
	char lbuf[96];
	farm_fabric_attr attr = {
	        .provider = o->net.fabric,
	        .machine_id = INITIATOR_ID,
	        .data_dir = dir,
	        .listen_addr = bnet_listen(&o->net, 1, lbuf, sizeof(lbuf))};
	int rc = farm_fabric_open(&attr, &b->fab);
	if (rc) {
		fprintf(stderr, PROG ": cannot open fabric in %s: %s\n", dir,
		        farm_strerror(rc));
		return rc;
	}
	/* A line more than the largest request: slots a power of two apart
	 * put every slot's n-th line in one L1 set and alias their stores
	 * with the loads 4 KiB away, which slowed the READs' copies at poll
	 * (16 at once) and memcpy's not (256 B READs 17 against 19.5 M/s,
	 * memcpy the same). Neither is how a caller's buffers lie. */
	b->slot = ((max_size(o) + FARM_CACHE_LINE - 1) &
	           ~(size_t)(FARM_CACHE_LINE - 1)) +
	          FARM_CACHE_LINE;
	size_t buflen = b->slot * o->outstanding;
	b->buf = aligned_alloc(4096, (buflen + 4095) & ~(size_t)4095);
	b->lat = malloc(o->samples * sizeof(*b->lat));
	b->noffs = o->noffsets;
	b->offs = malloc(b->noffs * sizeof(*b->offs));
	if (!b->buf || !b->lat || !b->offs)
		return -ENOMEM;
	memset(b->buf, 0, buflen);
	memset(b->lat, 0, o->samples * sizeof(*b->lat));
	rc = farm_mr_reg(b->fab, b->buf, buflen, FARM_ACCESS_LOCAL, &b->lmr);
	if (rc == 0)
		rc = farm_cq_create(b->fab, o->outstanding * 2, 0, &b->cq);
	if (rc == 0) {
		farm_ep_attr ea = {.sq_depth = o->outstanding};
		rc = farm_ep_connect(b->fab, b->cq, TARGET_ID, msg->addr, &ea,
		                     &b->ep);
	}
	if (rc) {
		fprintf(stderr, PROG ": cannot reach the target at %s: %s\n",
		        msg->addr, farm_strerror(rc));
		return rc;
	}
	rc = is_shm(o) ? map_region_file(b, target_dir) : 0;
	if (rc)
		fprintf(stderr, PROG ": cannot map the target's region: %s\n",
		        farm_strerror(rc));
	return rc;
}

/* What the runs are: the header lines. */
static void init_header(const struct bench *b, const struct opts *o,
                        const struct target_msg *msg)
{
	char sigdesc[64];
	snprintf(sigdesc, sizeof(sigdesc), "every %u%s request signaled",
	         o->signal_every,
	         o->signal_every == 1   ? "st"
	         : o->signal_every == 2 ? "nd"
	         : o->signal_every == 3 ? "rd"
	                                : "th");
	printf("fabric_bench: %s provider (%s), 2 machine processes (target "
	       "pid blocked in read)\n"
	       "  region %" PRIu64 " MiB (%s), %zu random line-aligned "
	       "offsets, %u outstanding (%s)\n"
	       "  rate: %u run(s) of %.2f s per variant and size, median "
	       "reported; latency: %u samples, 1 outstanding\n",
	       o->net.fabric, bnet_network(&o->net), b->rdesc.len >> 20,
	       msg->huge ? "advised huge" : "not advised huge", b->noffs,
	       o->outstanding, sigdesc, o->repeat, o->seconds, o->samples);
	if (o->pin >= 0)
		printf("  initiator pinned to CPU %d\n", o->pin);
	fflush(stdout);
}

/* The warm-up, then the measurements into @out, printed. */
static int init_measure(struct bench *b, const struct opts *o,
                        const char *target_dir, struct page_out *out)
{
	struct result *res = out->res;
	uint64_t t0 = bu_now_ns();
	int rc = warm_up(b);
	if (rc) {
		fprintf(stderr, PROG ": warm-up failed: %s\n",
		        farm_strerror(rc));
		return rc;
	}
	printf("  warm-up (every page through both mappings): %.2f s; "
	       "clock read: %" PRIu64 " ns (not subtracted)\n",
	       (double)(bu_now_ns() - t0) / 1e9, timer_overhead_ns());
	/* What the pages are, read back: every page of the region file is
	 * resident through both of our mappings now. */
	if (is_shm(o) && bp_huge_of(0, target_dir, &out->huge) == 0)
		printf("  pages: %.0f%% of the %" PRIu64
		       " MiB of the region file resident in our mappings "
		       "mapped by 2 MiB entries (asked: %s)\n",
		       100 * BU_MAX(bp_huge_share(&out->huge), 0.0),
		       out->huge.rss >> 20, bp_words(out->pages));
	fflush(stdout);

	long faults = minor_faults();
	t0 = bu_now_ns();
	rc = measure(b, res);
	if (rc) {
		if (rc != -EINTR)
			fprintf(stderr, PROG ": measurement failed: %s\n",
			        farm_strerror(rc));
		return rc;
	}
	faults = minor_faults() - faults;
	printf("measured in %.1f s; page faults while measuring: %ld\n",
	       (double)(bu_now_ns() - t0) / 1e9, faults);
	print_table(o, res);
	out->region_bytes = b->rdesc.len;
	out->done = true;
	return 0;
}

/* The parent: everything but the target's side. */
int initiator_main(const struct opts *o, const char *dir,
                   const char *target_dir, int info_fd, pid_t target,
                   struct page_out *out)
{
	struct bench b;
	memset(&b, 0, sizeof(b));
	b.o = o;
	b.target = target;
	struct target_msg msg;
	int rc = bu_read_full(info_fd, &msg, sizeof(msg), &interrupted);
	if (rc) {
		fprintf(stderr, PROG ": no word from the target: %s\n",
		        farm_strerror(rc));
		goto out;
	}
	if (msg.status) {
		rc = msg.status;
		goto out; /* the target said why */
	}
	msg.addr[sizeof(msg.addr) - 1] = 0;
	b.rdesc = msg.desc;
	rc = init_open(&b, o, dir, target_dir, &msg);
	if (rc)
		goto out;
	/* Random cache-line-aligned offsets over the whole region, with room
	 * for the largest size. */
	uint64_t lines = (b.rdesc.len - b.slot) / FARM_CACHE_LINE + 1;
	uint64_t rng = 0x5eed0f2a3b4c5d6eull;
	for (size_t i = 0; i < b.noffs; i++)
		b.offs[i] =
		        (uint32_t)((bu_rand64(&rng) % lines) * FARM_CACHE_LINE);
	init_header(&b, o, &msg);
	out->advised = msg.huge;
	rc = init_measure(&b, o, target_dir, out);
out:
	if (b.map)
		munmap((void *)b.map, b.map_len);
	farm_ep_destroy(b.ep);
	if (b.cq && farm_cq_destroy(b.cq))
		fprintf(stderr, PROG ": completion queue still busy\n");
	farm_mr_dereg(b.lmr);
	farm_fabric_close(b.fab);
	free(b.buf);
	free(b.lat);
	free(b.offs);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */
