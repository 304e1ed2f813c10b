/*
 * The goals of a benchmark's JSON line (benchreport.h).
 */
#include "benchreport.h"

#include <math.h>

static void put_num(FILE *out, struct br_num f, double v)
{
	if (f.conv == 'g')
		fprintf(out, "%.*g", f.prec, v);
	else
		fprintf(out, "%.*f", f.prec, v);
}

void br_goal(FILE *out, const struct br_style *st, const struct br_goal *g,
             bool more)
{
	const char *sp = st->compact ? "" : " ";
	fprintf(out, "\"%s\":%s{\"value\":%s", g->name, sp, sp);
	if (isfinite(g->value))
		put_num(out, st->value, g->value);
	else
		fputs("null", out);
	fprintf(out, ",%s\"target\":%s", sp, sp);
	put_num(out, st->target, g->target);
	if (g->cmp)
		fprintf(out, ",%s\"cmp\":%s\"%s\"", sp, sp, g->cmp);
	if (g->pages)
		fprintf(out, ",%s\"pages\":%s\"%s\"", sp, sp, g->pages);
	fprintf(out, ",%s\"met\":%s%s}%s", sp, sp, g->met ? "true" : "false",
	        more ? (st->compact ? "," : ", ") : "");
}
