/*
 * bench/lib's own checks (ctest benchlib_test): the goal writer in each
 * style the benchmarks use, byte for byte, since their JSON lines must
 * not change; the option parsers' bounds and size suffixes.
 */
#include "benchopts.h"
#include "benchpages.h"
#include "benchreport.h"
#include "benchutil.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;

static void expect_goal(const struct br_style *st, const struct br_goal *g,
                        bool more, const char *want)
{
	char buf[512] = {0};
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
	if (!f) {
		perror("fmemopen");
		exit(1);
	}
	br_goal(f, st, g, more);
	fclose(f);
	if (strcmp(buf, want) != 0) {
		fprintf(stderr, "goal %s:\n  got  %s\n  want %s\n", g->name,
		        buf, want);
		failures++;
	}
}

static void goals(void)
{
	static const struct br_style spaced = {{'f', 3}, {'f', 1}, false};
	static const struct br_style kv = {{'g', 4}, {'g', 4}, false};
	static const struct br_style compact = {{'g', 4}, {'g', 6}, true};
	struct br_goal g = {"rr_vs_tcp_64B", 1.2345, 10, false, NULL, NULL};
	expect_goal(&spaced, &g, true,
	            "\"rr_vs_tcp_64B\": {\"value\": 1.234, \"target\": 10.0, "
	            "\"met\": false}, ");
	g.value = NAN;
	expect_goal(&spaced, &g, false,
	            "\"rr_vs_tcp_64B\": {\"value\": null, \"target\": 10.0, "
	            "\"met\": false}");
	struct br_goal k = {"lookups", 2.5, 2, true, ">=", NULL};
	expect_goal(&kv, &k, false,
	            "\"lookups\": {\"value\": 2.5, \"target\": 2, \"cmp\": "
	            "\">=\", \"met\": true}");
	struct br_goal h = {"read_64B_vs_memcpy", 0.75, 0.7, true, NULL, "2m"};
	expect_goal(&spaced, &h, false,
	            "\"read_64B_vs_memcpy\": {\"value\": 0.750, \"target\": "
	            "0.7, \"pages\": \"2m\", \"met\": true}");
	struct br_goal t = {"ops_per_commit", 0, 0, true, NULL, NULL};
	expect_goal(
	        &compact, &t, true,
	        "\"ops_per_commit\":{\"value\":0,\"target\":0,\"met\":true},");
	t.value = INFINITY;
	expect_goal(&compact, &t, false,
	            "\"ops_per_commit\":{\"value\":null,\"target\":0,\"met\":"
	            "true}");
}

static void expect_size(const char *s, int rc_want, uint64_t want)
{
	uint64_t v = 12345;
	int rc = bu_parse_size(s, &v);
	if (rc != rc_want || (rc == 0 && v != want) ||
	    (rc != 0 && v != 12345)) {
		fprintf(stderr, "bu_parse_size(%s): rc %d value %llu\n",
		        s ? s : "NULL", rc, (unsigned long long)v);
		failures++;
	}
}

static void sizes(void)
{
	expect_size("64", 0, 64);
	expect_size("4k", 0, 4096);
	expect_size("1M", 0, 1u << 20);
	expect_size("2GB", 0, 2ull << 30);
	expect_size("1t", 0, 1ull << 40);
	expect_size("16777215T", 0, 16777215ull << 40);
	expect_size("16777216T", -22, 0); /* 2^64: overflows */
	expect_size("", -22, 0);
	expect_size(NULL, -22, 0);
	expect_size("-1", -22, 0);
	expect_size("4x", -22, 0);
	expect_size("4kk", -22, 0);
	expect_size("k", -22, 0);
}

static void unsigned_opts(void)
{
	unsigned v = 7;
	if (bu_parse_u("3", 1, 3, &v) || v != 3)
		failures++;
	v = 7;
	if (!bu_parse_u("4", 1, 3, &v) || !bu_parse_u("0", 1, 3, &v) ||
	    !bu_parse_u("", 0, 3, &v) || !bu_parse_u(NULL, 0, 3, &v) ||
	    !bu_parse_u("2x", 0, 3, &v) || v != 7) {
		fprintf(stderr, "bu_parse_u accepted a bad value\n");
		failures++;
	}
}

static void lists(void)
{
	static const char *const names[] = {"read", "write", "memcpy"};
	uint32_t v[2];
	unsigned n = 9, bits = 9;
	if (bo_parse_sizes("64,4k", 1, 4096, v, 2, &n) || n != 2 ||
	    v[0] != 64 || v[1] != 4096 ||
	    bo_parse_names("memcpy,read", names, 3, &bits) || bits != 5) {
		fprintf(stderr, "bo_parse_sizes or bo_parse_names refused "
		                "a good list\n");
		failures++;
	}
	if (!bo_parse_sizes("64,4k,8", 1, 1 << 20, v, 2, &n) ||
	    !bo_parse_sizes("0", 1, 64, v, 2, &n) ||
	    !bo_parse_sizes("8k", 1, 4096, v, 2, &n) ||
	    !bo_parse_sizes("", 1, 64, v, 2, &n) ||
	    !bo_parse_names("read,copy", names, 3, &bits) ||
	    !bo_parse_names(",", names, 3, &bits)) {
		fprintf(stderr, "bo_parse_sizes or bo_parse_names accepted "
		                "a bad list\n");
		failures++;
	}
}

/* --pages, and the smaps reader on a file this process maps: its
 * resident bytes are found under the file's directory and nowhere else
 * (what pages they are is the host's: not checked here). */
static void pages(void)
{
	unsigned p = 9;
	if (bp_parse("4k", &p) || p != BP_4K || bp_parse("2m", &p) ||
	    p != BP_2M || bp_parse("both", &p) || p != BP_BOTH ||
	    !bp_parse("2M", &p) || !bp_parse("", &p) || p != BP_BOTH) {
		fprintf(stderr, "bp_parse: wrong answer\n");
		failures++;
	}
	char dir[] = "/tmp/benchlib_test.XXXXXX", path[64];
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		failures++;
		return;
	}
	snprintf(path, sizeof(path), "%s/f", dir);
	size_t len = 64 << 10;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	void *m = fd < 0 || ftruncate(fd, (off_t)len)
	                  ? MAP_FAILED
	                  : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
	                         fd, 0);
	struct bp_huge in = {0, 0}, out = {0, 0};
	if (m != MAP_FAILED) {
		memset(m, 1, len);
		if (bp_huge_of(0, dir, &in) ||
		    bp_huge_of(0, "/nonexistent/", &out))
			failures++;
		munmap(m, len);
	}
	if (m == MAP_FAILED || in.rss < len || in.pmd > in.rss || out.rss) {
		fprintf(stderr,
		        "bp_huge_of: %llu resident bytes under %s (want >= "
		        "%zu), %llu elsewhere\n",
		        (unsigned long long)in.rss, dir, len,
		        (unsigned long long)out.rss);
		failures++;
	}
	if (fd >= 0)
		close(fd);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	goals();
	sizes();
	unsigned_opts();
	lists();
	pages();
	if (failures) {
		fprintf(stderr, "benchlib_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("benchlib_test: ok\n");
	return 0;
}
