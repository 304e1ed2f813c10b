/*
 * fabric_bench: one-sided READ and WRITE between two machine processes,
 * against a plain memcpy from the same memory; with --fabric ofi
 * the same over libfabric (tcp;ofi_rxm, software RMA) on loopback, or with
 * --netns across network namespaces, with the CPU time the
 * target spends per request (its progress thread does the work a NIC
 * would).
 *
 * The process forks a target machine: it opens its own fabric on a data
 * directory under /dev/shm, creates a region (1 GiB by default), touches
 * every page of it, sends its fabric address and region descriptor up a
 * pipe, then blocks reading a second pipe until told to go (no CPU while
 * being measured). The parent, the initiator, opens its own fabric,
 * connects, maps the target's region file read-only for the memcpy
 * baseline, faults in both of its mappings of the region, then measures,
 * for each size:
 *   rate     READ, WRITE and memcpy at random cache-line-aligned offsets
 *            over the whole region (one precomputed array, the same for all
 *            variants). READ and WRITE keep up to --outstanding requests in
 *            flight: every --signal-every'th request is signaled (default
 *            half the window), the CQ is polled one completion at a time
 *            (in order, it retires the requests before it too) and the
 *            freed slots are re-posted as one list. memcpy copies into the
 *            same rotating slots. Each run lasts --seconds; runs are
 *            repeated --repeat times, interleaved across variants and
 *            sizes, and the median run is reported;
 *   latency  READ and WRITE with one request in flight (post, poll until
 *            it completes), median and 99th percentile over --samples,
 *            each (variant, size) at offsets no other run touched.
 * Target CPU: the target's CPU time (all its threads, schedstat) over each
 * run, per request. On shm it is nil (the target sleeps in read(2)); on ofi
 * it is the software RMA's cost.
 * --fabric ofi: the region is anonymous memory, no file to map: no memcpy
 * baseline. --netns (under scripts/netns-cluster run --net-only): the
 * target runs in the first machine namespace, the initiator in the second,
 * over the veth links (tests/netns.h).
 * Output: a table, then, last, one JSON line (bench/README.md).
 */
#include "benchutil.h"
#include "benchnet.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <farm/farm.h>

#include "util/common.h"
#include "util/config.h"

#define PROG            "fabric_bench"
#define MAX_SIZES       16
#define MAX_OUTSTANDING 256
#define MAX_REPEAT      15
#define DEFAULT_OFFSETS (1u << 22) /* 256 MiB of distinct lines at 64 B */
#define STALL_NS        (5ull * 1000000000ull)
#define OP_READ         1u
#define OP_WRITE        2u
#define OP_MEMCPY       4u
#define TARGET_ID       1u
#define INITIATOR_ID    0u

struct opts {
	uint64_t region_size;
	uint32_t sizes[MAX_SIZES];
	unsigned nsizes;
	double seconds;
	unsigned outstanding;
	unsigned repeat;
	unsigned samples;
	size_t noffsets;
	unsigned signal_every;
	unsigned ops; /* OP_* */
	bool quick;
	int pin;
	struct bnet net; /* --fabric, --netns */
};

static bool is_shm(const struct opts *o)
{
	return bnet_shm(&o->net);
}

/* Sent by the target once it is ready (one write, < PIPE_BUF). */
struct target_msg {
	int32_t status; /* 0, or the negative code it failed with */
	uint32_t huge;
	farm_mr_desc desc;
	char addr[1024];
};

struct result {
	double read_mops[MAX_REPEAT], write_mops[MAX_REPEAT];
	double memcpy_mops[MAX_REPEAT];
	uint64_t read_p50, read_p99, write_p50, write_p99;
	/* CPU ns per request: the target's and ours, in rate runs (median)
	 * and in the latency run (one in flight) */
	double read_tcpu[MAX_REPEAT], write_tcpu[MAX_REPEAT];
	double read_icpu[MAX_REPEAT], write_icpu[MAX_REPEAT];
	double read_lat_tcpu, write_lat_tcpu;
};

struct bench {
	const struct opts *o;
	farm_fabric *fab;
	farm_cq *cq;
	farm_ep *ep;
	farm_mr *lmr;
	farm_mr_desc rdesc;
	uint8_t *buf; /* outstanding slots of slot bytes, registered */
	size_t slot;
	const uint8_t *map; /* the target's region file, read-only */
	size_t map_len;
	uint32_t *offs; /* noffsets random line-aligned offsets */
	size_t noffs;
	uint64_t *lat; /* samples */
	farm_wr wrs[MAX_OUTSTANDING];
	farm_wc wcs[MAX_OUTSTANDING];
	pid_t target;
	uint64_t ops_done; /* requests the last run completed */
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* ---- small helpers ------------------------------------------------------- */

static int parse_sizes(const char *s, struct opts *o)
{
	char tmp[256];
	if (strlen(s) >= sizeof(tmp))
		return -EINVAL;
	strcpy(tmp, s);
	o->nsizes = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		if (o->nsizes == MAX_SIZES || farm_parse_size(t, &v) ||
		    v == 0 || v > FARM_FABRIC_MAX_OP)
			return -EINVAL;
		o->sizes[o->nsizes++] = (uint32_t)v;
	}
	return o->nsizes ? 0 : -EINVAL;
}

static int parse_ops(const char *s, unsigned *ops)
{
	char tmp[64];
	if (strlen(s) >= sizeof(tmp))
		return -EINVAL;
	strcpy(tmp, s);
	*ops = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "read"))
			*ops |= OP_READ;
		else if (!strcmp(t, "write"))
			*ops |= OP_WRITE;
		else if (!strcmp(t, "memcpy"))
			*ops |= OP_MEMCPY;
		else
			return -EINVAL;
	}
	return *ops ? 0 : -EINVAL;
}

static uint32_t max_size(const struct opts *o)
{
	uint32_t m = 0;
	for (unsigned i = 0; i < o->nsizes; i++)
		m = FARM_MAX(m, o->sizes[i]);
	return m;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v, unsigned n)
{
	double s[MAX_REPEAT];
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static int read_full(int fd, void *p, size_t len)
{
	uint8_t *b = p;
	while (len) {
		ssize_t n = read(fd, b, len);
		if (n < 0 && errno == EINTR && !interrupted)
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
static int target_main(const struct opts *o, const char *base, const char *dir,
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
	uint64_t t0 = farm_now_ns(), now = t0;
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
			now = farm_now_ns();
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
	now = farm_now_ns();
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
	uint64_t t0 = farm_now_ns(), now;
	uint64_t deadline = secs > 0 ? t0 + (uint64_t)(secs * 1e9) : UINT64_MAX;
	for (;;) {
		uint64_t chunk = count ? FARM_MIN(count - n, 1024) : 1024;
		for (uint64_t j = 0; j < chunk; j++, n++) {
			uint8_t *dst = b->buf + (size_t)slot * b->slot;
			if (++slot == w)
				slot = 0;
			memcpy(dst, b->map + offs[idx++ & mask], size);
			clobber(dst);
		}
		now = farm_now_ns();
		if ((count && n == count) || now >= deadline || interrupted)
			break;
	}
	if (interrupted)
		return -EINTR;
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
		uint64_t t0 = farm_now_ns();
		int rc = farm_ep_post(b->ep, wr, NULL);
		if (rc)
			return rc;
		int got;
		uint64_t t1;
		unsigned spins = 0;
		while ((got = farm_cq_poll(b->cq, 1, b->wcs)) == 0) {
			if ((++spins & 1023) == 0 &&
			    (interrupted || farm_now_ns() - t0 > STALL_NS))
				return interrupted ? -EINTR : -ETIMEDOUT;
		}
		t1 = farm_now_ns();
		if (got < 0)
			return got;
		if (b->wcs[0].status)
			return b->wcs[0].status;
		b->lat[i] = t1 - t0;
	}
	qsort(b->lat, n, sizeof(*b->lat), cmp_u64);
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
	void *m = mmap(NULL, (size_t)b->rdesc.len, PROT_READ,
	               MAP_SHARED | MAP_POPULATE, fd, 0);
	rc = m == MAP_FAILED ? -errno : 0;
	close(fd);
	if (rc)
		return rc;
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
	uint64_t t0 = farm_now_ns(), t = t0;
	for (int i = 0; i < N; i++)
		t = farm_now_ns();
	return (t - t0 + N / 2) / N;
}

static void print_results(const struct opts *o, const struct result *res,
                          uint64_t region_size)
{
	printf("\n%8s %11s %11s %11s %11s %17s %17s\n", "size", "READ", "WRITE",
	       "memcpy", "READ/", "READ ns", "WRITE ns");
	/* ofi runs thousands, not millions, of requests a second. */
	double unit = is_shm(o) ? 1 : 1e3;
	const char *un = is_shm(o) ? "Mops/s" : "kops/s";
	printf("%8s %11s %11s %11s %11s %17s %17s\n", "bytes", un, un, un,
	       "memcpy", "p50 / p99", "p50 / p99");
	for (unsigned i = 0; i < o->nsizes && !is_shm(o); i++) {
		const struct result *r = &res[i];
		if (i == 0)
			printf("%8s %23s %23s %23s\n", "size",
			       "target CPU ns/READ", "target CPU ns/WRITE",
			       "initiator CPU ns/op");
		printf("%8" PRIu32 " %11.0f / %9.0f %11.0f / %9.0f %11.0f / "
		       "%9.0f\n",
		       o->sizes[i], median(r->read_tcpu, o->repeat),
		       r->read_lat_tcpu, median(r->write_tcpu, o->repeat),
		       r->write_lat_tcpu, median(r->read_icpu, o->repeat),
		       median(r->write_icpu, o->repeat));
		if (i + 1 == o->nsizes)
			printf("(target: loaded rate run / one in flight; "
			       "initiator: READ / WRITE in rate runs)\n");
	}
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct result *r = &res[i];
		double rd = median(r->read_mops, o->repeat);
		double wr = median(r->write_mops, o->repeat);
		double mc = median(r->memcpy_mops, o->repeat);
		char rl[32], wl[32];
		snprintf(rl, sizeof(rl), "%" PRIu64 " / %" PRIu64, r->read_p50,
		         r->read_p99);
		snprintf(wl, sizeof(wl), "%" PRIu64 " / %" PRIu64, r->write_p50,
		         r->write_p99);
		printf("%8" PRIu32 " %11.2f %11.2f %11.2f %11.3f %17s %17s\n",
		       o->sizes[i], rd * unit, wr * unit, mc * unit,
		       mc > 0 ? rd / mc : 0.0, rl, wl);
	}
	printf("\n");

	/* Last: the one JSON line. */
	printf("{\"bench\": \"fabric_bench\", \"provider\": \"%s\", "
	       "\"network\": \"%s\", "
	       "\"region_bytes\": %" PRIu64 ", \"outstanding\": %u, "
	       "\"results\": [",
	       o->net.fabric, bnet_network(&o->net), region_size,
	       o->outstanding);
	double goal[2] = {-1, -1};
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct result *r = &res[i];
		double rd = median(r->read_mops, o->repeat);
		double wr = median(r->write_mops, o->repeat);
		double mc = median(r->memcpy_mops, o->repeat);
		double ratio = mc > 0 ? rd / mc : 0.0;
		bool both = (o->ops & (OP_READ | OP_MEMCPY)) ==
		            (OP_READ | OP_MEMCPY);
		if (both && o->sizes[i] == 64)
			goal[0] = ratio;
		if (both && o->sizes[i] == 256)
			goal[1] = ratio;
		printf("%s{\"size\": %" PRIu32 ", \"read_mops\": %.3f, "
		       "\"write_mops\": %.3f, \"memcpy_mops\": %.3f, "
		       "\"read_over_memcpy\": %.3f, \"read_p50_ns\": %" PRIu64
		       ", \"read_p99_ns\": %" PRIu64
		       ", \"write_p50_ns\": %" PRIu64
		       ", \"write_p99_ns\": %" PRIu64
		       ", \"read_target_cpu_ns_per_op\": %.0f"
		       ", \"write_target_cpu_ns_per_op\": %.0f"
		       ", \"read_target_cpu_ns_one_in_flight\": %.0f"
		       ", \"write_target_cpu_ns_one_in_flight\": %.0f"
		       ", \"read_initiator_cpu_ns_per_op\": %.0f"
		       ", \"write_initiator_cpu_ns_per_op\": %.0f}",
		       i ? ", " : "", o->sizes[i], rd, wr, mc, ratio,
		       r->read_p50, r->read_p99, r->write_p50, r->write_p99,
		       median(r->read_tcpu, o->repeat),
		       median(r->write_tcpu, o->repeat), r->read_lat_tcpu,
		       r->write_lat_tcpu, median(r->read_icpu, o->repeat),
		       median(r->write_icpu, o->repeat));
	}
	printf("], \"goals\": {");
	if (!is_shm(o)) {
		/* The goals across hosts are kv_bench's: none here. */
		printf("}}\n");
		fflush(stdout);
		return;
	}
	static const char *const names[2] = {"read_64B_vs_memcpy",
	                                     "read_256B_vs_memcpy"};
	for (int g = 0; g < 2; g++) {
		char v[32];
		if (goal[g] < 0)
			snprintf(v, sizeof(v), "null");
		else
			snprintf(v, sizeof(v), "%.3f", goal[g]);
		printf("%s\"%s\": {\"value\": %s, \"target\": 0.7, "
		       "\"met\": %s}",
		       g ? ", " : "", names[g], v,
		       goal[g] >= 0.7 ? "true" : "false");
	}
	printf("}}\n");
	fflush(stdout);
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
			if (rc == 0 && (o->ops & OP_MEMCPY))
				rc = run_memcpy(b, size, b->offs, mask, 0,
				                o->seconds, &s->memcpy_mops[r]);
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

/* The parent: everything but the target's side. */
static int initiator_main(const struct opts *o, const char *dir,
                          const char *target_dir, int info_fd, pid_t target)
{
	struct bench b;
	memset(&b, 0, sizeof(b));
	b.o = o;
	b.target = target;
	struct target_msg msg;
	struct result *res = calloc(o->nsizes, sizeof(*res));
	int rc = res ? 0 : -ENOMEM;
	if (rc == 0)
		rc = read_full(info_fd, &msg, sizeof(msg));
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

	char lbuf[96];
	farm_fabric_attr attr = {
	        .provider = o->net.fabric,
	        .machine_id = INITIATOR_ID,
	        .data_dir = dir,
	        .listen_addr = bnet_listen(&o->net, 1, lbuf, sizeof(lbuf))};
	rc = farm_fabric_open(&attr, &b.fab);
	if (rc) {
		fprintf(stderr, PROG ": cannot open fabric in %s: %s\n", dir,
		        farm_strerror(rc));
		goto out;
	}
	b.slot = (max_size(o) + FARM_CACHE_LINE - 1) &
	         ~(size_t)(FARM_CACHE_LINE - 1);
	size_t buflen = b.slot * o->outstanding;
	b.buf = aligned_alloc(4096, (buflen + 4095) & ~(size_t)4095);
	b.lat = malloc(o->samples * sizeof(*b.lat));
	b.noffs = o->noffsets;
	b.offs = malloc(b.noffs * sizeof(*b.offs));
	if (!b.buf || !b.lat || !b.offs) {
		rc = -ENOMEM;
		goto out;
	}
	memset(b.buf, 0, buflen);
	memset(b.lat, 0, o->samples * sizeof(*b.lat));
	rc = farm_mr_reg(b.fab, b.buf, buflen, FARM_ACCESS_LOCAL, &b.lmr);
	if (rc == 0)
		rc = farm_cq_create(b.fab, o->outstanding * 2, 0, &b.cq);
	if (rc == 0) {
		farm_ep_attr ea = {.sq_depth = o->outstanding};
		rc = farm_ep_connect(b.fab, b.cq, TARGET_ID, msg.addr, &ea,
		                     &b.ep);
	}
	if (rc) {
		fprintf(stderr, PROG ": cannot reach the target at %s: %s\n",
		        msg.addr, farm_strerror(rc));
		goto out;
	}
	rc = is_shm(o) ? map_region_file(&b, target_dir) : 0;
	if (rc) {
		fprintf(stderr, PROG ": cannot map the target's region: %s\n",
		        farm_strerror(rc));
		goto out;
	}

	/* Random cache-line-aligned offsets over the whole region, with room
	 * for the largest size. */
	uint64_t lines = (b.rdesc.len - b.slot) / FARM_CACHE_LINE + 1;
	uint64_t rng = 0x5eed0f2a3b4c5d6eull;
	for (size_t i = 0; i < b.noffs; i++)
		b.offs[i] = (uint32_t)((farm_rand64(&rng) % lines) *
		                       FARM_CACHE_LINE);

	char sigdesc[64];
	snprintf(sigdesc, sizeof(sigdesc), "every %u%s request signaled",
	         o->signal_every,
	         o->signal_every == 1   ? "st"
	         : o->signal_every == 2 ? "nd"
	         : o->signal_every == 3 ? "rd"
	                                : "th");
	printf("fabric_bench: %s provider (%s), 2 machine processes (target "
	       "pid blocked in read)\n"
	       "  region %" PRIu64 " MiB (%s pages), %zu random line-aligned "
	       "offsets, %u outstanding (%s)\n"
	       "  rate: %u run(s) of %.2f s per variant and size, median "
	       "reported; latency: %u samples, 1 outstanding\n",
	       o->net.fabric, bnet_network(&o->net), b.rdesc.len >> 20,
	       msg.huge ? "huge" : "4 KiB", b.noffs, o->outstanding, sigdesc,
	       o->repeat, o->seconds, o->samples);
	if (o->pin >= 0)
		printf("  initiator pinned to CPU %d\n", o->pin);
	fflush(stdout);

	uint64_t t0 = farm_now_ns();
	rc = warm_up(&b);
	if (rc) {
		fprintf(stderr, PROG ": warm-up failed: %s\n",
		        farm_strerror(rc));
		goto out;
	}
	printf("  warm-up (every page through both mappings): %.2f s; "
	       "clock read: %" PRIu64 " ns (not subtracted)\n",
	       (double)(farm_now_ns() - t0) / 1e9, timer_overhead_ns());
	fflush(stdout);

	long faults = minor_faults();
	t0 = farm_now_ns();
	rc = measure(&b, res);
	if (rc) {
		if (rc != -EINTR)
			fprintf(stderr, PROG ": measurement failed: %s\n",
			        farm_strerror(rc));
		goto out;
	}
	faults = minor_faults() - faults;
	printf("measured in %.1f s; page faults while measuring: %ld\n",
	       (double)(farm_now_ns() - t0) / 1e9, faults);
	print_results(o, res, b.rdesc.len);
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
	free(res);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: fabric_bench [OPTIONS]\n"
	        "\n"
	        "One-sided READ and WRITE rate and latency over the shm\n"
	        "fabric between two machine processes, against memcpy from\n"
	        "the same memory; or over libfabric (--fabric ofi), with the\n"
	        "target's CPU time per request. Prints a table, then one JSON\n"
	        "line (last).\n"
	        "\n"
	        "  --fabric NAME      shm (default) or ofi (libfabric\n"
	        "                     tcp;ofi_rxm over loopback; no memcpy\n"
	        "                     baseline; defaults: region 64M, 2000\n"
	        "                     latency samples)\n"
	        "  --netns            ofi across network namespaces: target "
	        "in\n"
	        "                     the first machine namespace, initiator\n"
	        "                     in the second; run it under\n"
	        "                     scripts/netns-cluster run --net-only --\n"
	        "  --sizes LIST       request sizes in bytes, comma-separated\n"
	        "                     (default 64,256,1024,4096,8192)\n"
	        "  --seconds S        length of one rate run (default 1)\n"
	        "  --repeat N         rate runs per variant and size; the\n"
	        "                     median is reported (default 3, max %d)\n"
	        "  --region-size SZ   target region, a power of two, 1M..4G\n"
	        "                     (default 1G)\n"
	        "  --outstanding N    requests in flight in rate runs\n"
	        "                     (default 16, max %d)\n"
	        "  --samples N        latency samples per size (default\n"
	        "                     20000)\n"
	        "  --offsets N        random offsets, a power of two\n"
	        "                     (default %u, fewer for small regions)\n"
	        "  --signal-every N   in rate runs, signal every Nth request\n"
	        "                     (default: outstanding / 2)\n"
	        "  --ops LIST         variants to run, of read,write,memcpy\n"
	        "                     (default all; those left out report 0:\n"
	        "                     for profiling)\n"
	        "  --pin CPU          pin the initiator to CPU\n"
	        "  --quick            small region, short runs (smoke test)\n"
	        "  -h, --help         this text\n",
	        MAX_REPEAT, MAX_OUTSTANDING, DEFAULT_OFFSETS);
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum {
		O_SIZES = 256,
		O_SECONDS,
		O_REPEAT,
		O_REGION,
		O_OUTSTANDING,
		O_SAMPLES,
		O_OFFSETS,
		O_SIGNAL,
		O_OPS,
		O_PIN,
		O_QUICK,
		O_FABRIC,
		O_NETNS
	};
	static const struct option lopts[] = {
	        {"sizes", required_argument, NULL, O_SIZES},
	        {"seconds", required_argument, NULL, O_SECONDS},
	        {"repeat", required_argument, NULL, O_REPEAT},
	        {"region-size", required_argument, NULL, O_REGION},
	        {"outstanding", required_argument, NULL, O_OUTSTANDING},
	        {"samples", required_argument, NULL, O_SAMPLES},
	        {"offsets", required_argument, NULL, O_OFFSETS},
	        {"signal-every", required_argument, NULL, O_SIGNAL},
	        {"ops", required_argument, NULL, O_OPS},
	        {"pin", required_argument, NULL, O_PIN},
	        {"quick", no_argument, NULL, O_QUICK},
	        {"fabric", required_argument, NULL, O_FABRIC},
	        {"netns", no_argument, NULL, O_NETNS},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	bool set_region = false, set_seconds = false, set_repeat = false,
	     set_samples = false;
	uint64_t v;
	char *end;
	int c;
	*o = (struct opts){.region_size = 1ull << 30,
	                   .sizes = {64, 256, 1024, 4096, 8192},
	                   .nsizes = 5,
	                   .seconds = 1.0,
	                   .outstanding = 16,
	                   .repeat = 3,
	                   .samples = 20000,
	                   .ops = OP_READ | OP_WRITE | OP_MEMCPY,
	                   .net = BNET_DEFAULT,
	                   .pin = -1};
	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case O_SIZES:
			if (parse_sizes(optarg, o))
				goto bad;
			break;
		case O_SECONDS:
			o->seconds = strtod(optarg, &end);
			if (*end || !(o->seconds > 0 && o->seconds <= 3600))
				goto bad;
			set_seconds = true;
			break;
		case O_REPEAT:
			if (farm_parse_size(optarg, &v) || v < 1 ||
			    v > MAX_REPEAT)
				goto bad;
			o->repeat = (unsigned)v;
			set_repeat = true;
			break;
		case O_REGION:
			if (farm_parse_size(optarg, &o->region_size))
				goto bad;
			set_region = true;
			break;
		case O_OUTSTANDING:
			if (farm_parse_size(optarg, &v) || v < 1 ||
			    v > MAX_OUTSTANDING)
				goto bad;
			o->outstanding = (unsigned)v;
			break;
		case O_SAMPLES:
			if (farm_parse_size(optarg, &v) || v < 1 ||
			    v > 100000000)
				goto bad;
			o->samples = (unsigned)v;
			set_samples = true;
			break;
		case O_OFFSETS:
			if (farm_parse_size(optarg, &v) || !farm_is_pow2(v) ||
			    v > (1u << 28))
				goto bad;
			o->noffsets = (size_t)v;
			break;
		case O_SIGNAL:
			if (farm_parse_size(optarg, &v) || v < 1 ||
			    v > MAX_OUTSTANDING)
				goto bad;
			o->signal_every = (unsigned)v;
			break;
		case O_OPS:
			if (parse_ops(optarg, &o->ops))
				goto bad;
			break;
		case O_PIN:
			if (farm_parse_size(optarg, &v) || v >= CPU_SETSIZE)
				goto bad;
			o->pin = (int)v;
			break;
		case O_QUICK: o->quick = true; break;
		case O_FABRIC:
			if (bnet_set_fabric(&o->net, optarg))
				goto bad;
			break;
		case O_NETNS: o->net.netns = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n",
		        argv[optind]);
		return -EINVAL;
	}
	if (bnet_check(&o->net, PROG, 2))
		return -EINVAL;
	if (!is_shm(o)) {
		/* Anonymous memory: no region file for memcpy to read. Software
		 * RMA over TCP: a smaller region and fewer samples keep the
		 * run within minutes. */
		o->ops &= ~OP_MEMCPY;
		if (!set_region)
			o->region_size = 64ull << 20;
		if (!set_samples)
			o->samples = 2000;
	}
	if (o->quick) {
		if (!set_region)
			o->region_size = 16ull << 20;
		if (!set_seconds)
			o->seconds = 0.05;
		if (!set_repeat)
			o->repeat = 1;
		if (!set_samples)
			o->samples = 2000;
	}
	if (!farm_is_pow2(o->region_size) ||
	    o->region_size < FARM_REGION_MIN_SIZE ||
	    o->region_size > FARM_REGION_MAX_SIZE) {
		fprintf(stderr, PROG ": --region-size must be a power of two "
		                     "from 1M to 4G\n");
		return -EINVAL;
	}
	if (max_size(o) > o->region_size / 2) {
		fprintf(stderr, PROG ": sizes must be at most half the "
		                     "region\n");
		return -EINVAL;
	}
	if (!o->signal_every)
		o->signal_every = FARM_MAX(o->outstanding / 2, 1u);
	if (o->signal_every > o->outstanding) {
		fprintf(stderr, PROG ": --signal-every must be at most "
		                     "--outstanding\n");
		return -EINVAL;
	}
	if (!o->noffsets) {
		/* At most one offset per 4 lines of the region. */
		o->noffsets = DEFAULT_OFFSETS;
		while (o->noffsets > o->region_size / (4 * FARM_CACHE_LINE))
			o->noffsets >>= 1;
	}
	return 0;
bad:
	fprintf(stderr, PROG ": bad value '%s' for --%s (see --help)\n", optarg,
	        lopts[c - O_SIZES].name);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse_opts(argc, argv, &o))
		return 2;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a blocked read returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	const char *tmp = "/dev/shm";
	if (access(tmp, W_OK) != 0) {
		tmp = getenv("TMPDIR");
		if (!tmp || !*tmp)
			tmp = "/tmp";
	}
	char base[512], tdir[600], idir[600];
	if (snprintf(base, sizeof(base), "%s/fabric_bench.XXXXXX", tmp) >=
	    (int)sizeof(base)) {
		fprintf(stderr, PROG ": temporary directory name too long\n");
		return 1;
	}
	if (!mkdtemp(base)) {
		fprintf(stderr, PROG ": cannot create a directory in %s: %s\n",
		        tmp, strerror(errno));
		return 1;
	}
	snprintf(tdir, sizeof(tdir), "%s/target", base);
	snprintf(idir, sizeof(idir), "%s/initiator", base);

	int info[2], ctl[2];
	if (pipe2(info, O_CLOEXEC) != 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	if (pipe2(ctl, O_CLOEXEC) != 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		close(info[0]);
		close(info[1]);
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		close(info[0]);
		close(info[1]);
		close(ctl[0]);
		close(ctl[1]);
		bu_rm_tree(AT_FDCWD, base, 2);
		return 1;
	}
	if (pid == 0) {
		close(info[0]);
		close(ctl[1]);
		/* Go when the initiator goes, however it goes. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		int rc = 1;
		if (getppid() != parent)
			bu_rm_tree(AT_FDCWD, base, 2);
		else if (bnet_enter(&o.net, 0))
			rc = 1;
		else if (!interrupted)
			rc = target_main(&o, base, tdir, info[1], ctl[0],
			                 parent);
		fflush(NULL);
		_exit(rc);
	}
	close(info[1]);
	close(ctl[0]);
	if (o.pin >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(o.pin, &set);
		if (sched_setaffinity(0, sizeof(set), &set) != 0)
			fprintf(stderr, PROG ": cannot pin to CPU %d: %s\n",
			        o.pin, strerror(errno));
	}

	int rc = 0;
	if (bnet_enter(&o.net, 1))
		rc = 1;
	else
		rc = initiator_main(&o, idir, tdir, info[0], pid);
	close(info[0]);
	/* Tell the target to go, and wait for it to have cleaned up. */
	char q = 'q';
	if (write(ctl[1], &q, 1) != 1 && errno != EPIPE)
		fprintf(stderr, PROG ": cannot stop the target: %s\n",
		        strerror(errno));
	close(ctl[1]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = -1;
			break;
		}
	}
	if (status != 0 && rc == 0) {
		fprintf(stderr, PROG ": the target exited badly (status %#x)\n",
		        (unsigned)status);
		rc = -ECHILD;
	}
	bu_rm_tree(AT_FDCWD, base, 2);
	if (interrupted && rc) {
		fprintf(stderr, PROG ": interrupted\n");
		return 130;
	}
	return rc ? 1 : 0;
}
