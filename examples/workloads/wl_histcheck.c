/*
 * wl_histcheck: read the per-client histories farm-workload --history
 * wrote (wl_hist.h) and run tests/'s strict-serializability checker over
 * them. Exits 0 when the history is strictly serializable and holds at
 * least --min committed transactions, 1 on anomalies (or too few), 2 on
 * bad input.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sercheck.h"
#include "wl_hist.h"

/* One client's file into @h: 0, or -1 when it is malformed. */
static int read_file(sc_history *h, const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	struct wl_hrec r;
	int open_txn = -1, bad = 0;
	uint64_t open_seq = 0, open_t = 0;
	while (!bad && fread(&r, sizeof(r), 1, f) == 1) {
		if (r.kind == 'B') {
			if (open_txn >= 0) /* its outcome was never learned */
				bad |= sc_txn_end(h, open_txn, open_t,
				                  SC_UNKNOWN) < 0;
			struct wl_hop ops[WL_HIST_MAX_OPS];
			if (r.n > WL_HIST_MAX_OPS ||
			    fread(ops, sizeof(ops[0]), r.n, f) != r.n) {
				bad = 1;
				break;
			}
			open_txn = sc_txn_begin(h, r.t_ns);
			open_seq = r.seq;
			open_t = r.t_ns;
			bad |= open_txn < 0;
			for (uint32_t i = 0; i < r.n && !bad; i++)
				bad |= (ops[i].write ? sc_write(h, open_txn,
				                                ops[i].key,
				                                ops[i].ver)
				                     : sc_read(h, open_txn,
				                               ops[i].key,
				                               ops[i].ver)) < 0;
		} else if (r.kind == 'E' && open_txn >= 0 &&
		           r.seq == open_seq) {
			bad |= sc_txn_end(h, open_txn, r.t_ns,
			                  r.n == 1 ? SC_COMMITTED
			                           : SC_ABORTED) < 0;
			open_txn = -1;
		} else {
			bad = 1;
		}
	}
	if (!bad && open_txn >= 0)
		bad |= sc_txn_end(h, open_txn, open_t, SC_UNKNOWN) < 0;
	fclose(f);
	return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
	unsigned long min = 1;
	if (argc == 4 && !strcmp(argv[2], "--min"))
		min = strtoul(argv[3], NULL, 10);
	else if (argc != 2 || !strcmp(argv[1], "--help")) {
		fprintf(argc == 2 ? stdout : stderr,
		        "usage: wl_histcheck DIR [--min N]\n");
		return argc == 2 ? 0 : 2;
	}
	DIR *d = opendir(argv[1]);
	sc_history *h = sc_new();
	if (!d || !h) {
		fprintf(stderr, "wl_histcheck: cannot open %s\n", argv[1]);
		return 2;
	}
	struct dirent *e;
	unsigned files = 0;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "hist.", 5))
			continue;
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", argv[1], e->d_name);
		if (read_file(h, p)) {
			fprintf(stderr, "wl_histcheck: %s is malformed\n", p);
			return 2;
		}
		files++;
	}
	closedir(d);
	static sc_report rep;
	int rc = sc_check(h, &rep);
	sc_report_print(stdout, &rep);
	printf("wl_histcheck: %u clients, %llu transactions, %llu committed, "
	       "%llu anomalies\n",
	       files, (unsigned long long)rep.ntxns,
	       (unsigned long long)rep.ncommitted,
	       (unsigned long long)rep.total);
	sc_free(h);
	if (rc < 0)
		return 2;
	if (rep.ncommitted < min) {
		fprintf(stderr,
		        "wl_histcheck: only %llu committed (want %lu)\n",
		        (unsigned long long)rep.ncommitted, min);
		return 1;
	}
	return rc ? 1 : 0;
}
