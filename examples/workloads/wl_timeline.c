/*
 * workload_bench's failure timeline (FaRM SOSP'15 Figure 9): TATP on 4
 * machines under ZooKeeper membership (a private server from
 * scripts/zk-local), machine 3 killed a second into the run, committed
 * transactions counted per millisecond; drawn with gnuplot. The figure
 * reported is from the kill to the end of the first 50 ms window back at 80% of
 * the throughput before it: an upper bound of FaRM's suspicion-to-80% time,
 * since it includes the detection (a lease of 200 ms here: shorter ones
 * suspect live machines on a loaded 2-core host).
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

/* From the kill to 80% of @before again, in ticks: the end of the first
 * 50 ms window after the throughput fell below 80% that starts 150 ms
 * all back above it (per-millisecond counts are too few to judge one by
 * one, and a burst of commits during recovery is not recovery); 0 when
 * it never fell, -1 when it never came back. */
#define W80 50
static bool back(const struct wl_result *r, unsigned t, double want)
{
	for (unsigned k = 0; k < 3; k++)
		if (t + (k + 1) * W80 > r->nticks ||
		    window(r->ticks, r->nticks, t + k * W80, W80) < want)
			return false;
	return true;
}

static double to_80(const struct wl_result *r, double before)
{
	unsigned k = r->kill_tick, dip = k;
	while (dip + W80 < r->nticks &&
	       window(r->ticks, r->nticks, dip, W80) >= 0.8 * before)
		dip++;
	/* No dip after the kill, or never back: nothing measured. */
	if (dip + W80 >= r->nticks || dip > k + 200)
		return NAN;
	for (unsigned t = dip; t + W80 < r->nticks; t++)
		if (back(r, t, 0.8 * before))
			return t + W80 - k;
	return NAN;
}

static int plot(const struct wl_result *r, const char *out)
{
	char dat[512], cmd[2048];
	snprintf(dat, sizeof(dat), "%s/workload_timeline.dat", out);
	FILE *f = fopen(dat, "w");
	if (!f)
		return -errno;
	for (unsigned t = 0; t < r->nticks; t++)
		fprintf(f, "%u %llu\n", t, (unsigned long long)r->ticks[t]);
	fclose(f);
	snprintf(cmd, sizeof(cmd),
	         "gnuplot -e \"set terminal png size 900,400; set output "
	         "'%s/workload_timeline.png'; set xlabel 'time (ms)'; set "
	         "ylabel "
	         "'committed TATP transactions per ms'; set arrow from %u, "
	         "graph "
	         "0 to %u, graph 1 nohead lc rgb 'red'; plot '%s' using 1:2 "
	         "with "
	         "lines title 'TATP, 4 machines, machine 3 killed (red)'\" "
	         "2>/dev/null",
	         out, r->kill_tick, r->kill_tick, dat);
	return system(cmd) ? -EIO : 0;
}

int wl_timeline(const char *scripts, const char *out, double *kill_to_80,
                double *before)
{
	char dir[] = "/tmp/fwl-timeline-XXXXXX", cmd[1024], zk[128] = "";
	if (!mkdtemp(dir))
		return -errno;
	scripts = scripts ? scripts : FWL_SCRIPTS;
	snprintf(cmd, sizeof(cmd), "%s/zk-local start %s/zk 2>/dev/null",
	         scripts, dir);
	FILE *p = popen(cmd, "r");
	if (!p || !fgets(zk, sizeof(zk), p) || pclose(p) != 0) {
		fprintf(stderr, "workload_bench: no ZooKeeper (zk-local): no "
		                "failure timeline\n");
		rmdir(dir);
		return -ENOENT;
	}
	zk[strcspn(zk, "\n")] = 0;
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
	o.lease_ms = 200;
	struct wl_result *r = calloc(1, sizeof(*r));
	int rc = r ? wl_run(&o, r) : -ENOMEM;
	snprintf(cmd, sizeof(cmd),
	         "%s/zk-local stop %s/zk >/dev/null 2>&1; "
	         "rm -rf %s",
	         scripts, dir, dir);
	if (system(cmd))
		fprintf(stderr, "workload_bench: ZooKeeper in %s\n", dir);
	if (!rc && r->nticks > r->kill_tick + 20 && r->kill_tick > 500) {
		/* The half second before the kill (the load's start excluded).
		 */
		*before = window(r->ticks, r->nticks, r->kill_tick - 500, 500);
		*kill_to_80 = to_80(r, *before);
		if (plot(r, out))
			fprintf(stderr, "workload_bench: no plot (gnuplot)\n");
	} else if (!rc) {
		rc = -EIO;
	} else {
		fprintf(stderr, "workload_bench: timeline: %s\n", r->msg);
	}
	if (r)
		wl_result_free(r);
	free(r);
	return rc;
}
