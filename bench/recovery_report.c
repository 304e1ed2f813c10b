/*
 * recovery_bench: reporting. Distributions over runs, a run's line, and
 * the throughput plot of the median run (gnuplot, bench/recovery_plot.gp).
 * See recovery_bench.c's head comment.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "recovery_bench.h"

/* ---- reporting ------------------------------------------------------- */

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentiles of the finite values (NAN counts as +inf: a
 * step never seen is as slow as it gets). */
struct dist distribution(const double *v, unsigned n)
{
	struct dist d = {.n = n, .med = NAN, .p90 = NAN, .max = NAN};
	if (!n)
		return d;
	double *s = malloc(n * sizeof(*s));
	if (!s)
		return d;
	for (unsigned i = 0; i < n; i++)
		s[i] = isnan(v[i]) ? INFINITY : v[i];
	qsort(s, n, sizeof(*s), cmp_dbl);
	d.med = s[(n + 1) / 2 - 1];
	d.p90 = s[(unsigned)ceil(0.9 * n) - 1];
	d.max = s[n - 1];
	free(s);
	return d;
}

void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.2f", v);
	else
		fprintf(f, "null");
}

void print_run(unsigned i, const struct run *r)
{
	if (!r->ok) {
		printf("%3u %-7s  FAILED: %s\n", i, scen_name[r->sc], r->why);
		return;
	}
	printf("%3u %-7s %2u", i, scen_name[r->sc], r->victim);
	for (unsigned k = 0; k < NT; k++) {
		if (isnan(r->t[k]))
			printf(" %7s", "-");
		else
			printf(" %7.1f", r->t[k]);
	}
	printf(" %7.1f %7.1f %3u%s %3" PRIu64 " %s\n", r->t80_from_suspect,
	       r->pre_rate, r->win, r->win_ok ? " " : "!", r->false_susp,
	       r->lost || r->phantom || r->unlocked_checks ? r->why : "ok");
}

void write_plot(const struct run *r, unsigned idx)
{
	if (!g_opt.out || !r || !r->plot_ops)
		return;
	if (mkdir(g_opt.out, 0755) && errno != EEXIST) {
		fprintf(stderr, PROG ": mkdir %s: %s\n", g_opt.out,
		        strerror(errno));
		return;
	}
	char dat[600], ev[600], png[600];
	snprintf(dat, sizeof(dat), "%s/recovery_timeline.dat", g_opt.out);
	snprintf(ev, sizeof(ev), "%s/recovery_events.dat", g_opt.out);
	snprintf(png, sizeof(png), "%s/recovery_timeline.png", g_opt.out);
	FILE *f = fopen(dat, "w");
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", dat, strerror(errno));
		return;
	}
	fprintf(f,
	        "# recovery_bench run %u (%s, machine %u): survivors' "
	        "operations per 1 ms bucket\n"
	        "# ms_after_kill ops transfers ops_10ms_mean (pre-failure "
	        "%.1f ops/ms)\n",
	        idx, scen_name[r->sc], r->victim, r->pre_rate);
	for (unsigned k = 0; k < r->nplot; k++) {
		/* The mean of the 10 buckets around this one. */
		unsigned lo = k >= 5 ? k - 5 : 0, hi = BU_MIN(k + 5, r->nplot),
		         sum = 0;
		for (unsigned j = lo; j < hi; j++)
			sum += r->plot_ops[j];
		fprintf(f, "%d %u %u %.2f\n", (int)k - 200, r->plot_ops[k],
		        r->plot_xfers[k], (double)sum / (hi - lo));
	}
	fclose(f);
	f = fopen(ev, "w");
	if (!f)
		return;
	fprintf(f, "# event ms_after_kill\n\"kill\" 0\n");
	static const unsigned shown[] = {T_SUSPECT, T_PROBE,  T_ZK,
	                                 T_COMMIT,  T_ACTIVE, T_80};
	for (unsigned k = 0; k < sizeof(shown) / sizeof(shown[0]); k++)
		if (!isnan(r->t[shown[k]]))
			fprintf(f, "\"%s\" %.2f\n", t_name[shown[k]],
			        r->t[shown[k]]);
	fclose(f);
	printf("timeline of run %u: %s, events %s\n", idx, dat, ev);
	if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
		printf("(gnuplot not installed: no PNG; scripts/install-deps "
		       "installs it)\n");
		return;
	}
	char cmd[2400];
	snprintf(cmd, sizeof(cmd),
	         "gnuplot -e \"dat='%s'; ev='%s'; png='%s'; pre=%.3f\" "
	         "'%s/bench/recovery_plot.gp'",
	         dat, ev, png, r->pre_rate, FARM_SOURCE_DIR);
	if (system(cmd) == 0)
		printf("plot: %s\n", png);
	else
		fprintf(stderr, PROG ": gnuplot failed: %s\n", cmd);
}
