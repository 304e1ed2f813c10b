/*
 * alloc_bench: allocations and frees per second per thread of the slab
 * allocator (src/alloc), next to glibc malloc/free in the same run with the
 * same sizes, and the fragmentation of the size-class table.
 *
 * Pattern (thread-local): each thread keeps a window of --window (1024) live
 * objects; a step frees the object in a random window slot and allocates a
 * new one of the next size from a pre-generated list into it, then writes
 * 8 bytes into the new object (libfarm: after its 16-byte header). Both
 * allocators run the same sizes and slots. The window is filled before the
 * clock starts. A rate is steps (one alloc + one free) per second per
 * thread; each figure is the median of --repeat (3) runs of --seconds
 * (0.5), the two allocators interleaved.
 *
 * Workloads: "rand" (sizes uniform in 64 B..4 KiB, stored bytes) with 1 and
 * 2 threads (skipped with --no-rand), then a sweep of fixed sizes (--sizes)
 * with 1 thread. --only farm|malloc runs one side (for profiling; the other
 * side's rate is then printed as 0).
 * Output: a table, then, last, one JSON line (bench/README.md).
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <farm/farm.h>

#include "alloc/alloc.h"
#include "benchopts.h"
#include "benchutil.h"

#define PROG        "alloc_bench"
#define NSIZES      65536 /* pre-generated sizes and slots per thread */
#define MAX_THREADS 16
#define MAX_SWEEP   32

struct opts {
	double seconds;
	int repeat;
	int window;
	int threads_max;
	uint64_t region_size;
	uint32_t sweep[MAX_SWEEP];
	int nsweep;
	bool no_rand; /* --no-rand: the fixed sweep only */
	int only;     /* --only farm|malloc (profiling): -1 both */
};

/* ---- regions ---------------------------------------------------------- */

static pthread_mutex_t prov_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t prov_next = 1;
static uint64_t prov_size;
static struct farm_alloc_region prov_regions[FARM_ALLOC_MAX_REGIONS];
static int prov_n;

static int prov_new(void *ctx, uint32_t near, struct farm_alloc_region *out)
{
	(void)ctx;
	(void)near;
	pthread_mutex_lock(&prov_lock);
	int rc = -ENOMEM;
	if (prov_n < FARM_ALLOC_MAX_REGIONS) {
		void *m = mmap(NULL, prov_size, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		               0);
		if (m != MAP_FAILED) {
			struct farm_alloc_region r = {prov_next++, m,
			                              prov_size};
			prov_regions[prov_n++] = r;
			*out = r;
			rc = 0;
		}
	}
	pthread_mutex_unlock(&prov_lock);
	return rc;
}

/* ---- one run ------------------------------------------------------------ */

enum which { W_FARM, W_MALLOC };

struct worker {
	pthread_t th;
	enum which which;
	farm_blockalloc *ba;
	farm_slab *slab; /* kept across runs: a thread's slab */
	const struct opts *o;
	uint32_t *sizes;
	uint32_t *slots;
	farm_gaddr *gw;
	void **mw;
	pthread_barrier_t *bar;
	uint64_t steps;
	double secs;
	int err;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const int win = w->o->window;
	uint64_t i = 0, v = 0x5a5a;
	int rc = 0;
	if (w->which == W_FARM) {
		for (int k = 0; k < win && !rc; k++)
			rc = farm_slab_alloc(w->slab, w->sizes[k], 0,
			                     &w->gw[k]);
	} else {
		for (int k = 0; k < win; k++)
			if (!(w->mw[k] = malloc(w->sizes[k])))
				rc = -ENOMEM;
	}
	pthread_barrier_wait(w->bar);
	uint64_t t0 = bu_now_ns();
	uint64_t limit = (uint64_t)(w->o->seconds * 1e9);
	uint64_t now = t0;
	if (w->which == W_FARM) {
		farm_blockalloc *ba = w->ba;
		while (!rc) {
			for (int b = 0; b < 1024; b++, i++) {
				uint32_t j = w->slots[i & (NSIZES - 1)];
				rc |= farm_slab_free(w->slab, w->gw[j]);
				rc |= farm_slab_alloc(
				        w->slab, w->sizes[i & (NSIZES - 1)], 0,
				        &w->gw[j]);
				char *p = farm_alloc_local(ba, w->gw[j], 24);
				memcpy(p + 16, &v, 8);
			}
			now = bu_now_ns();
			if (now - t0 >= limit)
				break;
		}
		for (int k = 0; k < win; k++)
			rc |= farm_slab_free(w->slab, w->gw[k]);
	} else {
		while (!rc) {
			for (int b = 0; b < 1024; b++, i++) {
				uint32_t j = w->slots[i & (NSIZES - 1)];
				free(w->mw[j]);
				char *p = malloc(w->sizes[i & (NSIZES - 1)]);
				if (!p) {
					rc = -ENOMEM;
					break;
				}
				memcpy(p + 16, &v, 8);
				w->mw[j] = p;
			}
			now = bu_now_ns();
			if (now - t0 >= limit)
				break;
		}
		for (int k = 0; k < win; k++)
			free(w->mw[k]);
	}
	w->steps = i;
	w->secs = (double)(now - t0) / 1e9;
	w->err = rc;
	return NULL;
}

/* Steps per second per thread (mean over threads), or -1 on error. */
static double run_once(struct worker *ws, int nthreads, enum which which)
{
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
	for (int t = 0; t < nthreads; t++) {
		ws[t].which = which;
		ws[t].bar = &bar;
		pthread_create(&ws[t].th, NULL, worker_main, &ws[t]);
	}
	double sum = 0;
	int err = 0;
	for (int t = 0; t < nthreads; t++) {
		pthread_join(ws[t].th, NULL);
		sum += (double)ws[t].steps / ws[t].secs;
		if (ws[t].err)
			err = ws[t].err;
	}
	pthread_barrier_destroy(&bar);
	if (err) {
		fprintf(stderr, PROG ": %s\n", farm_strerror(err));
		return -1;
	}
	return sum / nthreads;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct result {
	const char *name;
	uint32_t size; /* 0: random */
	int threads;
	double farm, mall;
};

/* Sizes in [lo, hi] (hi == lo: fixed), slots in the window. */
static int measure(farm_blockalloc *ba, struct worker *ws, const struct opts *o,
                   int nthreads, uint32_t lo, uint32_t hi, struct result *res)
{
	for (int t = 0; t < nthreads; t++) {
		uint64_t seed = 42 + (uint64_t)t;
		for (int k = 0; k < NSIZES; k++) {
			uint64_t r = bu_rand64(&seed);
			ws[t].sizes[k] = lo + (uint32_t)(r % (hi - lo + 1));
			ws[t].slots[k] =
			        (uint32_t)((r >> 32) % (uint64_t)o->window);
		}
		ws[t].ba = ba;
		ws[t].o = o;
	}
	double f[16], m[16];
	for (int r = 0; r < o->repeat; r++) {
		f[r] = o->only == W_MALLOC ? 1 : run_once(ws, nthreads, W_FARM);
		m[r] = o->only == W_FARM ? 1 : run_once(ws, nthreads, W_MALLOC);
		if (f[r] < 0 || m[r] < 0)
			return -1;
	}
	qsort(f, (size_t)o->repeat, sizeof(double), cmp_double);
	qsort(m, (size_t)o->repeat, sizeof(double), cmp_double);
	res->threads = nthreads;
	res->farm = f[o->repeat / 2];
	res->mall = m[o->repeat / 2];
	return 0;
}

/* ---- main ------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: " PROG " [OPTIONS]\n"
	        "Slab allocator alloc+free rate per thread vs glibc malloc, "
	        "and\n"
	        "the size-class table's fragmentation. Last line: JSON.\n"
	        "  --seconds S        length of each run (0.5)\n"
	        "  --repeat N         runs per figure, median reported (3, max "
	        "15)\n"
	        "  --window N         live objects per thread (1024)\n"
	        "  --threads N        most threads for the random workload "
	        "(2)\n"
	        "  --sizes A,B,...    fixed sizes of the sweep, bytes\n"
	        "                     (64,256,1024,4096,16384,65536)\n"
	        "  --region-size N    bytes per region, power of two (256 "
	        "MiB)\n"
	        "  --no-rand          the fixed-size sweep only\n"
	        "  --only farm|malloc run one allocator (for profiling)\n"
	        "  --quick            0.05 s runs, 1 repeat (the smoke test)\n"
	        "  -h, --help         this text\n");
}

/* @arg as an int in [@min, @max] into *@out. 0 or -EINVAL. */
static int parse_int(const char *arg, long min, long max, int *out)
{
	char *end;
	long v = strtol(arg, &end, 10);
	*out = (int)v;
	return *end || v < min || v > max ? -EINVAL : 0;
}

/* --sizes: a comma list of object sizes. 0 or -EINVAL. */
static int parse_sweep(const char *arg, struct opts *o)
{
	o->nsweep = 0;
	const char *s = arg;
	while (*s) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);
		if (end == s || v < 16 || v > FARM_ALLOC_MAX_OBJECT ||
		    o->nsweep == MAX_SWEEP || (*end && *end != ','))
			return -EINVAL;
		o->sweep[o->nsweep++] = (uint32_t)v;
		s = *end ? end + 1 : end;
	}
	return 0;
}

/* Option @c's value @arg into @o. 0, -EINVAL, or 1 (not an option). */
static int parse_one(int c, const char *arg, void *ctx)
{
	struct opts *o = ctx;
	char *end;
	switch (c) {
	case 's':
		o->seconds = strtod(arg, &end);
		return *end || o->seconds <= 0 || o->seconds > 60 ? -EINVAL : 0;
	case 'r': return parse_int(arg, 1, 15, &o->repeat);
	case 'w': return parse_int(arg, 1, NSIZES, &o->window);
	case 't': return parse_int(arg, 1, MAX_THREADS, &o->threads_max);
	case 'z': return parse_sweep(arg, o);
	case 'g':
		o->region_size = strtoull(arg, &end, 10);
		return *end || !bu_is_pow2(o->region_size) ||
		                       o->region_size < (8u << 20) ||
		                       o->region_size > FARM_ALLOC_MAX_REGION
		               ? -EINVAL
		               : 0;
	case 'n': o->no_rand = true; return 0;
	case 'o':
		if (!strcmp(arg, "farm"))
			o->only = W_FARM;
		else if (!strcmp(arg, "malloc"))
			o->only = W_MALLOC;
		else
			return -EINVAL;
		return 0;
	case 'q':
		o->seconds = 0.05;
		o->repeat = 1;
		return 0;
	default: return 1;
	}
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	        {"seconds", required_argument, NULL, 's'},
	        {"repeat", required_argument, NULL, 'r'},
	        {"window", required_argument, NULL, 'w'},
	        {"threads", required_argument, NULL, 't'},
	        {"sizes", required_argument, NULL, 'z'},
	        {"region-size", required_argument, NULL, 'g'},
	        {"quick", no_argument, NULL, 'q'},
	        {"no-rand", no_argument, NULL, 'n'},
	        {"only", required_argument, NULL, 'o'},
	        {"help", no_argument, NULL, 'h'},
	        {0},
	};
	const uint32_t defsw[] = {64, 256, 1024, 4096, 16384, 65536};
	o->seconds = 0.5;
	o->repeat = 3;
	o->window = 1024;
	o->threads_max = 2;
	o->region_size = 256ull << 20;
	o->no_rand = false;
	o->only = -1;
	o->nsweep = (int)BU_ARRAY_SIZE(defsw);
	memcpy(o->sweep, defsw, sizeof(defsw));
	static const struct bo_parser parser = {PROG, lo, usage, parse_one,
	                                        NULL};
	return bo_getopt(&parser, argc, argv, o);
}

/* Each thread's buffers and slab. 0, or 1 (said). */
static int workers_make(farm_blockalloc *ba, struct worker *ws,
                        const struct opts *o)
{
	memset(ws, 0, MAX_THREADS * sizeof(*ws));
	for (int t = 0; t < o->threads_max; t++) {
		ws[t].sizes = malloc(NSIZES * sizeof(uint32_t));
		ws[t].slots = malloc(NSIZES * sizeof(uint32_t));
		ws[t].gw = calloc((size_t)o->window, sizeof(farm_gaddr));
		ws[t].mw = calloc((size_t)o->window, sizeof(void *));
		if (!ws[t].sizes || !ws[t].slots || !ws[t].gw || !ws[t].mw ||
		    farm_slab_create(ba, &ws[t].slab)) {
			fprintf(stderr, PROG ": out of memory\n");
			return 1;
		}
	}
	return 0;
}

/* The random-size runs (1 thread, then all), then the fixed sizes, into
 * @res: how many, or -1 (said). */
static int run_all(farm_blockalloc *ba, struct worker *ws, const struct opts *o,
                   struct result *res)
{
	int nres = 0;
	int tlist[2] = {1, o->threads_max};
	int nt = o->no_rand ? 0 : o->threads_max > 1 ? 2 : 1;
	for (int k = 0; k < nt; k++) {
		res[nres].name = "rand64-4096";
		res[nres].size = 0;
		if (measure(ba, ws, o, tlist[k], 64, 4096, &res[nres]))
			return -1;
		nres++;
	}
	for (int k = 0; k < o->nsweep; k++) {
		res[nres].name = "fixed";
		res[nres].size = o->sweep[k];
		if (measure(ba, ws, o, 1, o->sweep[k], o->sweep[k], &res[nres]))
			return -1;
		nres++;
	}
	return nres;
}

/* The JSON line. */
static void print_json(const struct opts *po, const struct farm_alloc_frag *pfr,
                       const struct result *res, int nres, double ratio)
{
	const struct opts o = *po;
	const struct farm_alloc_frag fr = *pfr;
	printf("{\"bench\": \"alloc_bench\", \"window\": %d, \"seconds\": "
	       "%.3f, "
	       "\"repeat\": %d, \"classes\": 256, \"exact_lines\": %u, "
	       "\"frag_req_avg\": %.5f, \"frag_line_rounding_avg\": %.5f, "
	       "\"frag_line_rounding_max\": %.4f, \"results\": [",
	       o.window, o.seconds, o.repeat, fr.exact_lines, fr.req_avg,
	       fr.line_avg, fr.line_max);
	for (int i = 0; i < nres; i++)
		printf("%s{\"workload\": \"%s\", \"size\": %u, \"threads\": "
		       "%d, "
		       "\"farm_rate\": %.0f, \"malloc_rate\": %.0f, "
		       "\"ratio\": %.3f}",
		       i ? ", " : "", res[i].name, res[i].size, res[i].threads,
		       res[i].farm, res[i].mall, res[i].farm / res[i].mall);
	printf("], \"goals\": {\"frag_avg\": {\"value\": %.5f, \"target\": "
	       "0.018, "
	       "\"met\": %s}, \"frag_max\": {\"value\": %.5f, \"target\": "
	       "0.036, "
	       "\"met\": %s}, \"rate_vs_malloc\": {\"value\": %.3f, "
	       "\"target\": 1.0, \"met\": %s}}}\n",
	       fr.avg, fr.avg <= 0.018 ? "true" : "false", fr.max,
	       fr.max <= 0.036 ? "true" : "false", ratio,
	       ratio >= 1.0 ? "true" : "false");
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse(argc, argv, &o))
		return 2;
	prov_size = o.region_size;

	struct farm_alloc_frag fr;
	farm_alloc_frag_compute(&fr);

	struct farm_blockalloc_attr at = {.new_region = prov_new};
	farm_blockalloc *ba;
	int rc = farm_blockalloc_create(&at, &ba);
	if (rc) {
		fprintf(stderr, PROG ": %s\n", farm_strerror(rc));
		return 1;
	}
	struct worker ws[MAX_THREADS];
	if (workers_make(ba, ws, &o))
		return 1;

	printf("alloc_bench: slab allocator vs glibc malloc, window %d, "
	       "%.2f s x %d runs (median), thread-local alloc+free\n",
	       o.window, o.seconds, o.repeat);
	printf("size classes: 256, avg internal fragmentation %.4f (goal <= "
	       "0.018), max %.4f (goal <= 0.036), line-granular requests;\n"
	       "  every line count is a class up to %u lines; byte-granular "
	       "rounding to lines: avg %.5f, max %.3f (a 16 B object)\n",
	       fr.avg, fr.max, fr.exact_lines, fr.line_avg, fr.line_max);

	struct result res[2 + MAX_SWEEP];
	int nres = run_all(ba, ws, &o, res);
	if (nres < 0)
		return 1;

	printf("\n%-12s %8s %8s %14s %14s %8s\n", "workload", "size", "threads",
	       "farm M/s/thr", "malloc M/s/thr", "ratio");
	for (int i = 0; i < nres; i++) {
		char sz[16];
		if (res[i].size)
			snprintf(sz, sizeof(sz), "%u", res[i].size);
		else
			snprintf(sz, sizeof(sz), "64-4096");
		printf("%-12s %8s %8d %14.2f %14.2f %8.2f\n", res[i].name, sz,
		       res[i].threads, res[i].farm / 1e6, res[i].mall / 1e6,
		       res[i].farm / res[i].mall);
	}
	struct farm_alloc_stats st;
	farm_blockalloc_stats(ba, &st);
	printf("\nallocator: %llu allocs, %llu frees, %llu regions, %llu "
	       "blocks "
	       "in use, %lld bytes in use after the runs\n",
	       (unsigned long long)st.allocs, (unsigned long long)st.frees,
	       (unsigned long long)st.regions,
	       (unsigned long long)st.blocks_in_use,
	       (long long)st.bytes_in_use);
	double ratio = res[0].farm / res[0].mall;
	if (!o.no_rand)
		printf("goal: thread-local alloc+free rate >= glibc malloc's "
		       "(random 64 B-4 KiB, 1 thread): %.2f -> %s\n",
		       ratio, ratio >= 1.0 ? "met" : "NOT met");

	print_json(&o, &fr, res, nres, ratio);

	for (int t = 0; t < o.threads_max; t++) {
		farm_slab_destroy(ws[t].slab);
		free(ws[t].sizes);
		free(ws[t].slots);
		free(ws[t].gw);
		free(ws[t].mw);
	}
	farm_blockalloc_destroy(ba);
	for (int i = 0; i < prov_n; i++)
		munmap(prov_regions[i].base, prov_regions[i].size);
	return 0;
}
