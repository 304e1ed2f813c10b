/*
 * A benchmark's command line (benchopts.h).
 */
#include "benchopts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"

/* The long name of option @c in @lo ("?" when it has none). */
static const char *opt_name(const struct option *lo, int c)
{
	for (; lo->name; lo++)
		if (lo->val == c && !lo->flag)
			return lo->name;
	return "?";
}

int bo_getopt(const struct bo_parser *p, int argc, char **argv, void *ctx)
{
	int c;
	while ((c = getopt_long(argc, argv, "h", p->lo, NULL)) != -1) {
		if (c == 'h') {
			p->usage(stdout);
			exit(0);
		}
		int rc = c == '?' ? 1 : p->handle(c, optarg, ctx);
		if (rc == 1) {
			p->usage(stderr);
			return -EINVAL;
		}
		if (rc) {
			fprintf(stderr,
			        "%s: bad value '%s' for --%s (see --help)\n",
			        p->prog, optarg, opt_name(p->lo, c));
			return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", p->prog,
		        argv[optind]);
		return -EINVAL;
	}
	return 0;
}

int bo_parse_sizes(const char *s, uint64_t lo, uint64_t hi, uint32_t *out,
                   unsigned max, unsigned *n)
{
	char tmp[256];
	if (strlen(s) >= sizeof(tmp))
		return -EINVAL;
	strcpy(tmp, s);
	*n = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		if (*n == max || bu_parse_size(t, &v) || v < lo || v > hi)
			return -EINVAL;
		out[(*n)++] = (uint32_t)v;
	}
	return *n ? 0 : -EINVAL;
}

int bo_parse_names(const char *s, const char *const *names, unsigned count,
                   unsigned *bits)
{
	char tmp[64];
	if (strlen(s) >= sizeof(tmp))
		return -EINVAL;
	strcpy(tmp, s);
	*bits = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		unsigned i = 0;
		while (i < count && strcmp(t, names[i]) != 0)
			i++;
		if (i == count)
			return -EINVAL;
		*bits |= 1u << i;
	}
	return *bits ? 0 : -EINVAL;
}
