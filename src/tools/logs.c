/*
 * `farm logs DIR`: list the transaction log records a machine's data
 * directory still holds (not truncated), read from the log file with no
 * machine running: what recovery would redo or decide.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tools/tools.h"
#include "txn/txm.h"

static const char *type_name(int t)
{
	static const char *const n[] = {
	        "?",     "LOCK",    "COMMIT-BACKUP", "COMMIT-PRIMARY",
	        "ABORT", "TRUNCATE"};
	return t > 0 && t < 6 ? n[t] : "?";
}

static void print_rec(void *ctx, const struct farm_txlog_rec *r)
{
	int *first = ctx;
	if (*first) {
		printf("coord thread type           txid               objs    "
		       "bytes position\n");
		*first = 0;
	}
	printf("%-4u %-6u %-14s %#018" PRIx64 " %5u %8u %" PRIu64 "\n",
	       r->coord, r->thread, type_name(r->type), r->txid, r->nobj,
	       r->len, r->pos);
}

int farm_cmd_logs(int argc, char **argv)
{
	if (argc != 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		FILE *out = argc == 2 ? stdout : stderr;
		fprintf(out,
		        "usage: farm logs DATA_DIR\n"
		        "  List the transaction log records still in the log "
		        "file of the machine\n"
		        "  whose data directory is DATA_DIR (works with the "
		        "machine stopped or dead).\n");
		return argc == 2 ? 0 : 2;
	}
	struct farm_txlog_info inf = {0};
	int first = 1;
	int n = farm_txlog_scan_dir(argv[1], print_rec, &first, &inf);
	if (n < 0) {
		fprintf(stderr, "farm logs: %s: %s\n", argv[1],
		        n == -ENOENT ? "no log file here" : farm_strerror(n));
		return 1;
	}
	printf("machine %u: %d records in %u x %u logs of %" PRIu64 " bytes\n",
	       inf.machine, n, inf.M, inf.T, inf.R);
	return 0;
}
