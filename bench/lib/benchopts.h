/*
 * A benchmark's command line: the getopt_long loop every benchmark runs
 * (--help, a bad value, an unknown option, a stray argument), and the
 * comma-separated lists its options take (benchopts.c). The numbers
 * themselves: bu_parse_u and bu_parse_size (benchutil.h).
 */
#ifndef FARM_BENCH_BENCHOPTS_H
#define FARM_BENCH_BENCHOPTS_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

/* One option @c with its value @arg (NULL when it takes none) into @ctx:
 * 0 (taken), 1 (not an option it knows) or anything else (a bad value). */
typedef int (*bo_handler)(int c, const char *arg, void *ctx);

struct bo_parser {
	const char *prog;        /* prefix of the error lines */
	const struct option *lo; /* getopt_long's table; --help is 'h' */
	void (*usage)(FILE *);   /* the --help text */
	bo_handler handle;
	bo_handler more; /* when @handle says 1 (NULL: none) */
};

/*
 * Runs getopt_long over @argc/@argv ("h" and @p->lo), giving each option
 * to @p->handle with @ctx, then to @p->more if @p->handle does not know it.
 * --help: the usage on stdout, then exit(0). An option the table or the handler
 * does not know: the usage on stderr. A bad value ("PROG: bad value 'V' for
 * --NAME (see --help)") or an argument that is not an option ("PROG: unexpected
 * argument 'A'"): said on stderr. 0, or -EINVAL after any of those errors.
 */
int bo_getopt(const struct bo_parser *p, int argc, char **argv, void *ctx);

/*
 * @s, comma-separated sizes (bu_parse_size's grammar) each in [@lo, @hi],
 * into @out (at most @max of them; *@n: how many). 0, or -EINVAL (none,
 * too many, one that is not a size or out of range, @s over 255 bytes).
 */
int bo_parse_sizes(const char *s, uint64_t lo, uint64_t hi, uint32_t *out,
                   unsigned max, unsigned *n);

/*
 * @s, comma-separated names from @names (@count of them), as a set:
 * *@bits gets bit i for names[i]. 0, or -EINVAL (none, a name not in
 * @names, @s over 63 bytes).
 */
int bo_parse_names(const char *s, const char *const *names, unsigned count,
                   unsigned *bits);

#endif
