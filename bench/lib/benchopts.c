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
		if (rc == 1 && p->more)
			rc = p->more(c, optarg, ctx);
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

/* @each on every comma-separated word of @s (under @cap bytes, at most
 * 256): 0, the first nonzero @each returns, or -EINVAL (@s too long). */
static int each_word(const char *s, size_t cap,
                     int (*each)(const char *w, void *arg), void *arg)
{
	char tmp[256];
	if (cap > sizeof(tmp) || strlen(s) >= cap)
		return -EINVAL;
	strcpy(tmp, s);
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		int rc = each(t, arg);
		if (rc)
			return rc;
	}
	return 0;
}

struct size_list {
	uint64_t lo, hi;
	uint32_t *out;
	unsigned max, *n;
};

static int add_size(const char *w, void *arg)
{
	struct size_list *l = arg;
	uint64_t v;
	if (*l->n == l->max || bu_parse_size(w, &v) || v < l->lo || v > l->hi)
		return -EINVAL;
	l->out[(*l->n)++] = (uint32_t)v;
	return 0;
}

int bo_parse_sizes(const char *s, uint64_t lo, uint64_t hi, uint32_t *out,
                   unsigned max, unsigned *n)
{
	struct size_list l = {lo, hi, out, max, n};
	*n = 0;
	int rc = each_word(s, 256, add_size, &l);
	return rc ? rc : *n ? 0 : -EINVAL;
}

struct name_set {
	const char *const *names;
	unsigned count, *bits;
};

static int add_name(const char *w, void *arg)
{
	struct name_set *ns = arg;
	unsigned i = 0;
	while (i < ns->count && strcmp(w, ns->names[i]) != 0)
		i++;
	if (i == ns->count)
		return -EINVAL;
	*ns->bits |= 1u << i;
	return 0;
}

int bo_parse_names(const char *s, const char *const *names, unsigned count,
                   unsigned *bits)
{
	struct name_set ns = {names, count, bits};
	*bits = 0;
	int rc = each_word(s, 64, add_name, &ns);
	return rc ? rc : *bits ? 0 : -EINVAL;
}
