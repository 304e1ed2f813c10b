/*
 * baseline_selftest: runs each baseline (baseline.h) once, for 1 s at a
 * 64-byte payload, and prints the figures; last, one JSON line.
 * Usage: baseline_selftest [SECONDS]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baseline.h"

#define PAYLOAD  64
#define INFLIGHT 16
#define SLOTS    1024

static void show(const char *name, int err, const struct bl_result *r)
{
	if (err)
		printf("%-34s failed: %s\n", name, strerror(-err));
	else
		printf("%-34s %10.3f M/s  p50 %8.0f ns  p99 %8.0f ns\n", name,
		       r->rate / 1e6, r->p50_ns, r->p99_ns);
	fflush(stdout);
}

static void json(const char *name, const struct bl_result *r, bool last)
{
	printf("\"%s\":{\"rate\":%.0f,\"p50_ns\":%.0f,\"p99_ns\":%.0f}%s", name,
	       r->rate, r->p50_ns, r->p99_ns, last ? "" : ",");
}

int main(int argc, char **argv)
{
	double s = argc > 1 ? atof(argv[1]) : 1.0;
	struct bl_result tb = {0}, tk = {0}, best = {0}, st = {0}, rr = {0};
	char which[64] = "";
	struct timespec t0, t1;
	int fails = 0, err;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	err = bl_tcp_rr(PAYLOAD, 1, false, s, &tb);
	show("tcp blocking, 1 in flight", err, &tb);
	fails += !!err;
	err = bl_tcp_rr(PAYLOAD, 1, true, s, &tk);
	show("tcp busy, 1 in flight", err, &tk);
	fails += !!err;
	err = bl_tcp_best(PAYLOAD, INFLIGHT, s, &best, which, sizeof(which),
	                  NULL);
	show("tcp best of 4", err, &best);
	if (!err)
		printf("%-34s %s\n", "  (which)", which);
	fails += !!err;
	err = bl_ring_stream(SLOTS, s, &st);
	show("ring stream, 1024 slots", err, &st);
	fails += !!err;
	err = bl_ring_rr(SLOTS, s, &rr);
	show("ring rr, 1024 slots", err, &rr);
	fails += !!err;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double wall = (double)(t1.tv_sec - t0.tv_sec) +
	              (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("total %.2f s\n", wall);

	printf("{\"bench\":\"baseline_selftest\",\"payload\":%d,\"seconds\":%"
	       "g,",
	       PAYLOAD, s);
	json("tcp_blocking_1", &tb, false);
	json("tcp_busy_1", &tk, false);
	json("tcp_best", &best, false);
	printf("\"tcp_best_which\":\"%s\",", which);
	json("ring_stream", &st, false);
	json("ring_rr", &rr, false);
	printf("\"wall_s\":%.2f,\"failures\":%d}\n", wall, fails);
	return fails ? 1 : 0;
}
