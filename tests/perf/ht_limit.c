/*
 * ht_bench's lookups against the limit loop (ht_limit.h): the reference
 * point (H = 8, 32-byte values, 90%) looks up every key once, one thread
 * driving the machines; the limit copies the same two-bucket span of random
 * homes of a table of that point's size and bucket bytes.
 */
#include "ht_limit.h"
#include "memlimit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define GOAL_VS_LIMIT 0.3

int ht_limit_measure(struct ht_limit *l, uint64_t lookups, double get_s,
                     uint64_t nbuckets, uint32_t bucket_bytes, unsigned window,
                     double secs)
{
	memset(l, 0, sizeof(*l));
	if (get_s <= 0 || nbuckets < 2)
		return 0;
	struct ml_table t;
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	int rc = ml_open(&t, nbuckets - 1, bucket_bytes, dir);
	if (rc)
		return rc;
	l->rate = (double)lookups / get_s;
	l->bytes = t.bytes;
	l->span = 2 * t.bucket_bytes;
	l->limit = ml_run(&t, window, secs, NULL);
	l->limit_one = ml_run(&t, 1, secs, NULL);
	ml_close(&t);
	printf("lookups (H=8, 32 B, 90%%, %u in flight): %.3f M/s; limit loop "
	       "(same %.1f MB table, %u B per lookup, one thread): %.3f M/s "
	       "with %u in flight, %.3f M/s one at a time; lookups / limit "
	       "%.3f (goal >= %.1f)\n",
	       window, l->rate / 1e6, (double)l->bytes / 1e6, l->span,
	       l->limit / 1e6, window, l->limit_one / 1e6,
	       l->limit > 0 ? l->rate / l->limit : 0, GOAL_VS_LIMIT);
	return 0;
}

void ht_limit_json(const struct ht_limit *l)
{
	printf("\"limit\": {\"table_bytes\": %" PRIu64
	       ", \"span_bytes\": %u, \"lookups_per_s\": %.0f, "
	       "\"limit_per_s\": %.0f, \"limit_one_per_s\": %.0f}",
	       l->bytes, l->span, l->rate, l->limit, l->limit_one);
}

void ht_limit_goal_json(const struct ht_limit *l)
{
	double v = l->limit > 0 ? l->rate / l->limit : 0;
	if (l->limit > 0)
		printf(", \"ht_lookups_vs_limit\": {\"value\": %.4f, "
		       "\"target\": %.1f, \"met\": %s}",
		       v, GOAL_VS_LIMIT, v >= GOAL_VS_LIMIT ? "true" : "false");
	else
		printf(", \"ht_lookups_vs_limit\": {\"value\": null, "
		       "\"target\": %.1f, \"met\": false}",
		       GOAL_VS_LIMIT);
}
