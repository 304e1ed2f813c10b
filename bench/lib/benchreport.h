/*
 * The goals of a benchmark's JSON line (bench/README.md): each one
 * "NAME": {"value": V, "target": T, "met": true|false}, with an optional
 * "cmp" member saying how value and target compare and an optional
 * "pages" member saying which page size the value was measured on. Every
 * benchmark keeps the number formats its results page was written with, so the
 * format is the caller's (benchreport.c).
 */
#ifndef FARM_BENCH_BENCHREPORT_H
#define FARM_BENCH_BENCHREPORT_H

#include <stdbool.h>
#include <stdio.h>

/* A number's printf conversion: 'f' or 'g', with @prec digits ("%.3f"
 * is {'f', 3}; "%g" is {'g', 6}). */
struct br_num {
	char conv;
	int prec;
};

/* How a benchmark writes its goals. */
struct br_style {
	struct br_num value, target;
	bool compact; /* no space after ':' and ',' */
};

struct br_goal {
	const char *name;
	double value; /* NAN or an infinity: written as null */
	double target;
	bool met;
	const char *cmp; /* ">=", "<", ...; NULL: no "cmp" member */
	/* The pages the value was measured on ("4k", "2m": benchpages.h),
	 * where a run measured more than one; NULL: no "pages" member. */
	const char *pages;
};

/* Write @g to @out in @st's style, then a separator when @more follow. */
void br_goal(FILE *out, const struct br_style *st, const struct br_goal *g,
             bool more);

#endif
