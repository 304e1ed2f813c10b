/*
 * recovery_bench: timeline analysis. Times in ms after the kill, the
 * survivors' throughput per ms and the window the 80% point is judged
 * over, and the check of every commit log against the final counters.
 * See recovery_bench.c's head comment.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recovery_bench.h"

double ms_after(uint64_t t, uint64_t t_kill)
{
	return t >= t_kill ? (double)(t - t_kill) / 1e6 : NAN;
}

/* The smallest of @t (ms after the kill), NAN when none. */
double tmin(double a, double b)
{
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	return a < b ? a : b;
}

double tmax(double a, double b)
{
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	return a > b ? a : b;
}
/* Survivors' ops in bucket @b. */
uint32_t surv_ops(unsigned victim, uint64_t b, const uint32_t *arr)
{
	uint32_t s = 0;
	for (unsigned i = 0; i < NM; i++)
		if (i != victim)
			s += arr[(size_t)i * g_sh->nbuckets + b];
	return s;
}

/* The window "back to 80%" is judged over: the shortest multiple of
 * --window-ms in which at least 90% of the windows of the steady state
 * before the kill (buckets @b0..@b1, @rate ops per ms) reach 80% of
 * @rate, so that the test is one the steady state itself passes. At most
 * 100 ms (*@ok false when even that does not do). */
unsigned calibrate(unsigned victim, uint64_t b0, uint64_t b1, double rate,
                   bool *ok)
{
	unsigned w = g_opt.window_ms;
	for (; w <= 100; w += g_opt.window_ms) {
		unsigned n = 0, pass = 0;
		for (uint64_t b = b0; b + w <= b1; b++, n++) {
			uint64_t s = 0;
			for (unsigned k = 0; k < w; k++)
				s += surv_ops(victim, b + k, g_ops);
			pass += (double)s >= 0.8 * rate * w;
		}
		if (n && pass >= 0.9 * n) {
			*ok = true;
			return w;
		}
	}
	*ok = false;
	return w - g_opt.window_ms;
}

/* One committed write: account, the counter value written, by whom. */
struct cw {
	uint32_t acct, val, mach, idx, t_begin, t_end;
};

static int cmp_cw(const void *a, const void *b)
{
	const struct cw *x = a, *y = b;
	if (x->acct != y->acct)
		return x->acct < y->acct ? -1 : 1;
	if (x->val != y->val)
		return x->val < y->val ? -1 : 1;
	return (x->mach > y->mach) - (x->mach < y->mach);
}

/*
 * The commit logs against the final counters. Each transfer sets both
 * accounts' counters to what it read + 1, so the values the committed
 * transfers wrote into account j must be 1, 2, .., ctr[j], each once:
 *   a value written twice: two transfers reported committed read the same
 *     state, so one of them was lost (rolled back after it was reported,
 *     or overwritten without being read);
 *   a value above ctr[j]: a committed write is missing;
 *   a value nobody reported: a write of a commit that was not reported
 *     committed (allowed only for the victim's commits in flight, 2 per
 *     commit).
 * Returns the lost commits (duplicates + values above) and counts the
 * unreported writes in *@unreported; the first few violations go to @why.
 */
uint64_t check_clog(unsigned nacc, uint64_t t_kill_us, uint64_t *unreported,
                    char *why, size_t wl, bool *complete)
{
	size_t n = 0;
	*complete = true;
	for (unsigned i = 0; i < NM; i++) {
		n += 2 * (size_t)g_sh->m[i].nclog;
		*complete &= g_sh->m[i].nclog < CLOG_CAP;
	}
	struct cw *w = malloc((n + 1) * sizeof(*w));
	if (!w) {
		*complete = false;
		return 0;
	}
	size_t k = 0;
	for (unsigned i = 0; i < NM; i++)
		for (uint32_t e = 0; e < g_sh->m[i].nclog; e++) {
			const struct clog *c =
			        &g_clog[(size_t)i * CLOG_CAP + e];
			w[k++] = (struct cw){c->ia, c->ca,      i,
			                     e,     c->t_begin, c->t_end};
			w[k++] = (struct cw){c->ib, c->cb,      i,
			                     e,     c->t_begin, c->t_end};
		}
	qsort(w, n, sizeof(*w), cmp_cw);
	uint64_t lost = 0, unrep = 0;
	size_t o = strlen(why);
	size_t x = 0;
	for (unsigned j = 0; j < nacc; j++) {
		uint32_t expect = 1; /* the next value 1..ctr[j] */
		for (; x < n && w[x].acct == j; x++) {
			const struct cw *c = &w[x];
			bool dup = x > 0 && w[x - 1].acct == j &&
			           w[x - 1].val == c->val;
			bool above = c->val > g_sh->ctr[j];
			if (c->val > expect && !dup)
				unrep += c->val - expect;
			if (!dup)
				expect = c->val + 1;
			if (!dup && !above)
				continue;
			lost++;
			if (o >= wl - 1 || lost > 4)
				continue;
			/* Times in ms after the kill. */
			double b = ((double)c->t_begin - (double)t_kill_us) /
			           1e3,
			       e = ((double)c->t_end - (double)t_kill_us) / 1e3;
			o += (size_t)snprintf(
			        why + o, wl - o,
			        "%saccount %u (made on machine %u): counter %u "
			        "written by machine "
			        "%u's transfer #%u (begun %+.1f ms, committed "
			        "%+.1f ms after the kill)",
			        o ? "; " : "", j, j / g_opt.accounts, c->val,
			        c->mach, c->idx, b, e);
			if (dup) {
				const struct cw *p = &w[x - 1];
				o += (size_t)snprintf(
				        why + o, wl - BU_MIN(o, wl),
				        " and by machine %u's transfer #%u "
				        "(begun %+.1f, committed %+.1f ms)",
				        p->mach, p->idx,
				        ((double)p->t_begin -
				         (double)t_kill_us) /
				                1e3,
				        ((double)p->t_end - (double)t_kill_us) /
				                1e3);
			} else {
				o += (size_t)snprintf(
				        why + o, wl - BU_MIN(o, wl),
				        ", above the final %" PRIu64,
				        g_sh->ctr[j]);
			}
		}
		if (g_sh->ctr[j] >= expect)
			unrep += g_sh->ctr[j] - expect + 1;
	}
	free(w);
	*unreported = unrep;
	return lost;
}
