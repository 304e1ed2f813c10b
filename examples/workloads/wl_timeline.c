/*
 * workload_bench's failure timeline (FaRM SOSP'15 Figure 9): TATP on 4
 * machines under ZooKeeper membership (a private server from
 * scripts/zk-local), machine 3 killed a second into the run, committed
 * transactions counted per millisecond; drawn with gnuplot.
 *
 * The figure reported is FaRM's: from the first suspicion of the victim
 * (the earliest a survivor's recovery recorded it) to the start of the
 * first window back at 80% of the throughput before the kill. Beside it,
 * from the kill, and the phases in between from every survivor's
 * counters (one CLOCK_MONOTONIC on one host): the configuration written
 * to ZooKeeper, taken by the last survivor's transactions, REC_GO, the
 * last promoted region active. The window is the shortest of 1 to 50 ms
 * in which 90% of the steady state's own windows pass the 80% test (a
 * millisecond holds tens of commits on a loaded host), and the window
 * back must be followed by 100 ms at 80% on the whole (a burst of
 * commits during recovery is not recovery).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl.h"
#include "wl_peers.h"

#ifndef FWL_SCRIPTS
#define FWL_SCRIPTS "scripts"
#endif

static double window(const uint64_t *t, unsigned n, unsigned at, unsigned w)
{
	double s = 0;
	unsigned k = 0;
	for (; k < w && at + k < n; k++)
		s += (double)t[at + k];
	return k ? s / k : 0;
}

#define STEADY 500 /* ms before the kill that define "before" */
#define STAYS  100 /* ms at 80% on the whole after the window back */

/* The shortest window in which 90% of the steady state's own windows
 * are at 80% of its mean. */
static unsigned pick_window(const struct wl_result *r, unsigned k, double want)
{
	static const unsigned ws[] = {1, 2, 5, 10, 20, 50};
	for (unsigned i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
		unsigned w = ws[i], n = 0, ok = 0;
		for (unsigned t = k - STEADY; t + w <= k; t += w, n++)
			ok += window(r->ticks, r->nticks, t, w) >= want;
		if (ok * 10 >= n * 9)
			return w;
	}
	return 50;
}

/* Milliseconds after the kill (tick @k) at which the throughput fell
 * below @want and came back to it for good; NAN: never. */
static void find_80(const struct wl_result *r, unsigned k, double want,
                    unsigned w, struct wl_tl *tl)
{
	unsigned n = r->nticks, dip = k;
	while (dip + w < n && window(r->ticks, n, dip, w) >= want)
		dip++;
	if (dip + w >= n)
		return; /* it never fell */
	tl->dip = dip - k;
	for (unsigned t = dip; t + STAYS < n; t++)
		if (window(r->ticks, n, t, w) >= want &&
		    window(r->ticks, n, t, STAYS) >= want) {
			tl->back80 = t - k;
			return;
		}
}

static double after(uint64_t t, uint64_t kill)
{
	return t ? ((double)t - (double)kill) / 1e6 : NAN;
}

/* The phases from the survivors' counters (ms after the kill): the
 * earliest suspicion, the configuration's write, the last survivor to
 * take it, to get REC_GO and to have its regions active. */
static void phases(const struct wl_result *r, unsigned victim, struct wl_tl *tl)
{
	uint64_t sus = 0, zk = 0, view = 0, cfg = 0, go = 0, act = 0;
	for (unsigned i = 0; i < WL_MAX_MACHINES; i++) {
		const struct wl_rec_times *t = &r->rec[i];
		if (i == victim || !t->run_start)
			continue;
		if (t->suspect && (!sus || t->suspect < sus))
			sus = t->suspect;
		zk = t->zk_written > zk ? t->zk_written : zk;
		if (t->view && (!view || t->view < view))
			view = t->view;
		cfg = t->config > cfg ? t->config : cfg;
		go = t->go > go ? t->go : go;
		act = t->active > act ? t->active : act;
		tl->promoted += t->promoted;
		tl->locks += t->locks;
	}
	tl->suspect = after(sus, r->kill_ns);
	tl->zk_written = after(zk, r->kill_ns);
	tl->view_first = after(view, r->kill_ns);
	tl->config_last = after(cfg, r->kill_ns);
	tl->go = after(go, r->kill_ns);
	tl->active = after(act, r->kill_ns);
}

/* Tick 0 is the earliest survivor's start: the kill's tick from the
 * clock, not from the option (the machines start a little after the
 * command). */
static unsigned kill_tick(const struct wl_result *r, unsigned victim)
{
	uint64_t t0 = 0;
	for (unsigned i = 0; i < WL_MAX_MACHINES; i++)
		if (i != victim && r->rec[i].run_start &&
		    (!t0 || r->rec[i].run_start < t0))
			t0 = r->rec[i].run_start;
	if (!t0 || r->kill_ns < t0)
		return r->kill_tick;
	return (unsigned)((r->kill_ns - t0) / (r->tick_us * 1000));
}

static void analyse(const struct wl_result *r, unsigned victim,
                    struct wl_tl *tl)
{
	unsigned k = kill_tick(r, victim);
	tl->before = window(r->ticks, r->nticks, k - STEADY, STEADY);
	double want = 0.8 * tl->before;
	tl->window_ms = pick_window(r, k, want);
	phases(r, victim, tl);
	/* No commit in the steady state (a host that stopped the cluster
	 * before the kill): there is no throughput to come back to, and
	 * every window would pass a test of 80% of nothing. */
	if (!(tl->before > 0))
		return;
	find_80(r, k, want, tl->window_ms, tl);
	if (isnan(tl->dip)) /* no dip: never below 80% */
		tl->back80 = 0;
	tl->kill_to_80 = tl->back80;
	if (!isnan(tl->back80) && !isnan(tl->suspect))
		tl->suspect_to_80 =
		        tl->back80 > tl->suspect ? tl->back80 - tl->suspect : 0;
}

static int plot(const struct wl_result *r, unsigned k, const struct wl_tl *tl,
                const char *out)
{
	char dat[512], cmd[3072], marks[512] = "";
	snprintf(dat, sizeof(dat), "%s/workload_timeline.dat", out);
	FILE *f = fopen(dat, "w");
	if (!f)
		return -errno;
	for (unsigned t = 0; t < r->nticks; t++)
		fprintf(f, "%u %llu\n", t, (unsigned long long)r->ticks[t]);
	fclose(f);
	/* The suspicion (orange) and the return to 80% (green) beside the
	 * kill (red), when seen. */
	if (!isnan(tl->suspect) && !isnan(tl->back80))
		snprintf(marks, sizeof(marks),
		         "set arrow from %.1f, graph 0 to %.1f, graph 1 nohead "
		         "lc rgb 'orange'; set arrow from %.1f, graph 0 to "
		         "%.1f, graph 1 nohead lc rgb 'dark-green'; ",
		         k + tl->suspect, k + tl->suspect, k + tl->back80,
		         k + tl->back80);
	snprintf(cmd, sizeof(cmd),
	         "gnuplot -e \"set terminal png size 900,400; set output "
	         "'%s/workload_timeline.png'; set xlabel 'time (ms)'; set "
	         "ylabel 'committed TATP transactions per ms'; set arrow "
	         "from %u, graph 0 to %u, graph 1 nohead lc rgb 'red'; %s"
	         "plot '%s' using 1:2 with lines title 'TATP, 4 machines, "
	         "lease %u ms: machine 3 killed (red), suspected (orange), "
	         "80%% again (green)'\" 2>/dev/null",
	         out, k, k, marks, dat, tl->lease_ms);
	return system(cmd) ? -EIO : 0;
}

static int zk_start(const char *scripts, const char *dir, char *zk, size_t len)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s/zk-local start %s/zk 2>/dev/null",
	         scripts, dir);
	FILE *p = popen(cmd, "r");
	if (!p || !fgets(zk, (int)len, p) || pclose(p) != 0) {
		fprintf(stderr, "workload_bench: no ZooKeeper (zk-local): no "
		                "failure timeline\n");
		return -ENOENT;
	}
	zk[strcspn(zk, "\n")] = 0;
	return 0;
}

int wl_timeline(const char *scripts, const char *out, unsigned lease_ms,
                struct wl_tl *tl)
{
	char dir[] = "/tmp/fwl-timeline-XXXXXX", cmd[1024], zk[128] = "";
	*tl = (struct wl_tl){.lease_ms = lease_ms,
	                     .suspect = NAN,
	                     .zk_written = NAN,
	                     .view_first = NAN,
	                     .config_last = NAN,
	                     .go = NAN,
	                     .active = NAN,
	                     .dip = NAN,
	                     .back80 = NAN,
	                     .suspect_to_80 = NAN,
	                     .kill_to_80 = NAN};
	if (!mkdtemp(dir))
		return -errno;
	scripts = scripts ? scripts : FWL_SCRIPTS;
	if (zk_start(scripts, dir, zk, sizeof(zk))) {
		rmdir(dir);
		return -ENOENT;
	}
	struct wl_opts o;
	wl_opts_default(&o, WL_TATP);
	o.machines = 4;
	o.scale = 2000;
	o.duration_ms = 3000;
	o.zk = zk;
	o.kill_machine = 3;
	o.kill_at_ms = 1000;
	o.tick_us = 1000;
	o.region_size = "64M";
	o.lease_ms = lease_ms;
	struct wl_result *r = calloc(1, sizeof(*r));
	int rc = r ? wl_run(&o, r) : -ENOMEM;
	snprintf(cmd, sizeof(cmd),
	         "%s/zk-local stop %s/zk >/dev/null 2>&1; "
	         "rm -rf %s",
	         scripts, dir, dir);
	if (system(cmd))
		fprintf(stderr, "workload_bench: ZooKeeper in %s\n", dir);
	unsigned k = r && !rc ? kill_tick(r, 3) : 0;
	if (!rc && r->nticks > k + STAYS + 50 && k > STEADY) {
		analyse(r, 3, tl);
		if (plot(r, k, tl, out))
			fprintf(stderr, "workload_bench: no plot (gnuplot)\n");
	} else if (!rc) {
		rc = -EIO;
	} else if (r) {
		fprintf(stderr, "workload_bench: timeline: %s\n", r->msg);
	}
	if (r)
		wl_result_free(r);
	free(r);
	return rc;
}
