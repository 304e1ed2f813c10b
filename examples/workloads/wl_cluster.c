/*
 * fwl's options: defaults, the mixes, and the checks made before anything
 * starts (shape, kill, memory); transaction names and latency
 * percentiles. The run itself is wl_run.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "wl_int.h"

static const char *const names[WT_NTYPES] = {"GET_SUBSCRIBER_DATA",
                                             "GET_NEW_DESTINATION",
                                             "GET_ACCESS_DATA",
                                             "UPDATE_SUBSCRIBER_DATA",
                                             "UPDATE_LOCATION",
                                             "INSERT_CALL_FORWARDING",
                                             "DELETE_CALL_FORWARDING",
                                             "Amalgamate",
                                             "Balance",
                                             "DepositChecking",
                                             "SendPayment",
                                             "TransactSavings",
                                             "WriteCheck",
                                             "NewOrder",
                                             "Payment",
                                             "OrderStatus",
                                             "Delivery",
                                             "StockLevel"};
/* TATP's standard mix (spec 1.2) and SmallBank's usual one (H-Store,
 * OLTPBench, FaSST, DrTM+H). */
static const unsigned tatp_std[7] = {35, 10, 35, 2, 14, 2, 2};
static const unsigned tatp_ro[7] = {40, 20, 40, 0, 0, 0, 0};
static const unsigned tatp_wh[7] = {10, 5, 10, 20, 35, 10, 10};
static const unsigned bank_std[6] = {15, 15, 15, 25, 15, 15};
static const unsigned bank_ro[6] = {0, 100, 0, 0, 0, 0};
static const unsigned bank_wh[6] = {20, 0, 20, 30, 15, 15};
/* TPC-C's standard mix (spec 5.2.3: the minimum shares, NewOrder the
 * rest); read-only: OrderStatus and StockLevel; write-heavy: NewOrder
 * and Payment. */
static const unsigned tpcc_std[5] = {45, 43, 4, 4, 4};
static const unsigned tpcc_ro[5] = {0, 0, 50, 0, 50};
static const unsigned tpcc_wh[5] = {50, 50, 0, 0, 0};

static const unsigned *mix_of(enum wl_kind k, int which)
{
	static const unsigned *const m[3][3] = {{tatp_std, tatp_ro, tatp_wh},
	                                        {bank_std, bank_ro, bank_wh},
	                                        {tpcc_std, tpcc_ro, tpcc_wh}};
	return m[k == WL_TATP ? 0 : k == WL_BANK ? 1 : 2][which];
}

const char *wl_txn_name(enum wl_txn t)
{
	return (unsigned)t < WT_NTYPES ? names[t] : "?";
}

void wl_types(enum wl_kind kind, int *from, int *to)
{
	*from = kind == WL_TATP   ? WT_GET_SUB
	        : kind == WL_BANK ? WT_AMALGAMATE
	                          : WT_NEW_ORDER;
	*to = kind == WL_TATP   ? WT_AMALGAMATE
	      : kind == WL_BANK ? WT_NEW_ORDER
	                        : WT_NTYPES;
}

static void set_mix(struct wl_opts *o, const unsigned *p)
{
	int from, to;
	wl_types(o->kind, &from, &to);
	memset(o->mix, 0, sizeof(o->mix));
	for (int t = from; t < to; t++)
		o->mix[t] = p[t - from];
}

void wl_opts_default(struct wl_opts *o, enum wl_kind kind)
{
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	o->machines = 3;
	o->threads = 1;
	o->scale = 10000;
	o->duration_ms = 2000;
	o->seed = 1;
	o->replicas = 3;
	o->fabric = "shm";
	o->hot_pct = 4;
	o->hot_prob = 90;
	o->kill_machine = -1;
	o->region_size = "64M";
	/* Long enough that a host loaded by other work does not suspect a
	 * live machine; the failure timeline uses a shorter one. */
	o->lease_ms = 1000;
	/* Idle loops park at once: with more machines' loops than cores,
	 * spinning takes the core from the loop that would answer (TATP on
	 * 3 machines, 2 cores: 48k txn/s parking at once, 10k after 50 us
	 * of spinning). */
	o->park_after_us = 0;
	o->ship_window = 1;
	o->bank_window = 1;
	/* TPC-C: one warehouse a machine, and a population scaled down so
	 * that the load takes seconds on a small host (README.md); the
	 * specification's is --items 100000 --customers 3000. */
	o->items = 1000;
	o->customers = 30;
	if (kind == WL_TPCC)
		o->scale = 3;
	set_mix(o, mix_of(kind, 0));
}

int wl_mix_parse(struct wl_opts *o, const char *s, char *err, size_t len)
{
	static const char *const named[3] = {"standard", "read-only",
	                                     "write-heavy"};
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, named[i])) {
			set_mix(o, mix_of(o->kind, i));
			return 0;
		}
	int from, to;
	wl_types(o->kind, &from, &to);
	unsigned p[7], n = 0, sum = 0, want = (unsigned)(to - from);
	const char *q = s;
	while (*q && n < 7) {
		char *e;
		unsigned long v = strtoul(q, &e, 10);
		if (e == q || v > 100)
			break;
		p[n++] = (unsigned)v;
		sum += (unsigned)v;
		q = *e == ',' ? e + 1 : e;
		if (*e != ',')
			break;
	}
	if (n != want || *q || sum != 100) {
		snprintf(err, len,
		         "unknown mix '%s': want standard, read-only, "
		         "write-heavy, or %u comma-separated percentages "
		         "summing to 100",
		         s, want);
		return -EINVAL;
	}
	set_mix(o, p);
	return 0;
}

/* Bytes the cluster's memory needs for the scale, all replicas: rows in
 * whole 64-byte lines, index entries, with a margin for the allocator. */
static uint64_t need_bytes(const struct wl_opts *o)
{
	if (o->kind == WL_TPCC) /* stock; customers, history, orders and
	                           their index entries; items */
		return (o->scale * ((uint64_t)o->items * 96 +
		                    10ull * o->customers * 1024) +
		        (uint64_t)o->items * 96) *
		       o->replicas * 2;
	uint64_t per = o->kind == WL_TATP ? 64 * (1 + 2.5 * 3) + 64 * 10
	                                  : 2 * (64 + 64);
	return o->scale * per * o->replicas * 2;
}

static uint64_t parse_size(const char *s)
{
	char *e;
	unsigned long long v = strtoull(s, &e, 10);
	switch (*e) {
	case 'G': return v << 30;
	case 'M': return v << 20;
	case 'k':
	case 'K': return v << 10;
	default: return v;
	}
}

/* A kill: a machine that exists, recovery (ZooKeeper), and for
 * SmallBank the ledgers that know the victim's outcomes. */
static int validate_kill(const struct wl_opts *o, char *err, size_t len)
{
	if (o->kill_machine >= (int)o->machines) {
		snprintf(err, len, "no machine %d to kill", o->kill_machine);
		return -EINVAL;
	}
	if (o->kill_machine >= 0 && o->kind == WL_BANK && !o->audit) {
		snprintf(err, len,
		         "a SmallBank kill needs --audit (the "
		         "victim's outcomes are known only to ledgers)");
		return -EINVAL;
	}
	if (o->kill_machine >= 0 && !o->zk) {
		snprintf(err, len, "a kill needs recovery: give --zk");
		return -EINVAL;
	}
	/* A kill is judged by the survivors committing from half a second
	 * after it (wl_run's recovered()): a kill later than that never
	 * happens or cannot be judged. */
	if (o->kill_machine >= 0 &&
	    (o->duration_ms < 600 || o->kill_at_ms > o->duration_ms - 600)) {
		snprintf(err, len,
		         "the kill at %.3f s must come at least 0.6 s before "
		         "the end of the %.3f s run",
		         o->kill_at_ms / 1000.0, o->duration_ms / 1000.0);
		return -EINVAL;
	}
	return 0;
}

/* What the options ask of the workload: ids per machine, ledgers. */
static int validate_use(const struct wl_opts *o, char *err, size_t len)
{
	/* Partitioned, a machine picks only ids it owns: SmallBank's
	 * two-account transactions need two of them on every machine. */
	if (o->partitioned && o->kind != WL_TPCC &&
	    o->scale < 2ull * o->machines) {
		snprintf(err, len,
		         "a partitioned run needs a scale of at least 2 per "
		         "machine (%u)",
		         2 * o->machines);
		return -EINVAL;
	}
	/* TATP's ledgers are always on, and it writes no histories. */
	if (o->kind == WL_TATP && (o->audit || o->history)) {
		snprintf(err, len,
		         "--audit and --history are SmallBank's (TATP always "
		         "keeps its ledgers and writes no history)");
		return -EINVAL;
	}
	if (o->ship_window < 1 || o->ship_window > WL_MAX_MACHINES) {
		snprintf(err, len, "ship window must be 1..%u",
		         WL_MAX_MACHINES);
		return -EINVAL;
	}
	if (o->bank_window < 1 || o->bank_window > WL_MAX_BANK_WINDOW) {
		snprintf(err, len, "bank window must be 1..%u",
		         WL_MAX_BANK_WINDOW);
		return -EINVAL;
	}
	/* A client's ledger row is written by each of its transactions, so
	 * its transactions in flight would only conflict there; and its
	 * history is one transaction after another. */
	if (o->bank_window > 1 && o->kind != WL_BANK) {
		snprintf(err, len, "--bank-window is SmallBank's");
		return -EINVAL;
	}
	if (o->bank_window > 1 && (o->audit || o->history)) {
		snprintf(err, len,
		         "--bank-window over 1 takes neither --audit nor "
		         "--history");
		return -EINVAL;
	}
	return 0;
}

/* TPC-C's population: ids that its keys can pack, a warehouse on every
 * machine (warehouses are partitioned across them). */
static int validate_tpcc(const struct wl_opts *o, char *err, size_t len)
{
	if (o->kind != WL_TPCC)
		return 0;
	if (o->items < 1 || o->items > 100000 || o->customers < 1 ||
	    o->customers > 3000 || o->scale > 10000) {
		snprintf(err, len,
		         "TPC-C: items must be 1..100000, customers per "
		         "district 1..3000, warehouses at most 10000");
		return -EINVAL;
	}
	if (o->audit || o->history) {
		snprintf(err, len,
		         "--audit and --history are SmallBank's (TPC-C always "
		         "counts each client's new orders)");
		return -EINVAL;
	}
	return 0;
}

/* The shape of the run: machines, threads, replicas, fabric, mix. */
static int validate_shape(const struct wl_opts *o, char *err, size_t len)
{
	int from, to;
	if (o->kind < WL_TATP || o->kind > WL_TPCC) {
		snprintf(err, len, "unknown workload");
		return -EINVAL;
	}
	if (o->machines < 1 || o->machines > WL_MAX_MACHINES ||
	    o->threads < 1 || o->threads > WL_MAX_THREADS) {
		snprintf(err, len, "machines must be 1..%u, threads 1..%u",
		         WL_MAX_MACHINES, WL_MAX_THREADS);
		return -EINVAL;
	}
	if (o->replicas < 1 || o->replicas > 8 || !o->duration_ms ||
	    o->lease_ms < 1 || o->lease_ms > 60000) {
		snprintf(err, len,
		         "replicas must be 1..8, duration > 0, "
		         "lease 1..60000 ms");
		return -EINVAL;
	}
	if (strcmp(o->fabric, "shm") && strcmp(o->fabric, "ofi") &&
	    strcmp(o->fabric, "verbs")) {
		snprintf(err, len, "unknown fabric '%s'", o->fabric);
		return -EINVAL;
	}
	unsigned sum = 0;
	wl_types(o->kind, &from, &to);
	for (int t = from; t < to; t++)
		sum += o->mix[t];
	if (sum != 100) {
		snprintf(err, len, "the mix sums to %u%%, not 100%%", sum);
		return -EINVAL;
	}
	uint64_t minscale = o->kind == WL_BANK ? 2 : 1;
	if (o->scale < minscale || o->scale > (1ull << 40) ||
	    o->scale < o->machines) {
		snprintf(err, len,
		         "scale must be at least %llu and the machines%s",
		         (unsigned long long)minscale,
		         o->kind == WL_TPCC ? " (a warehouse on every machine)"
		                            : "");
		return -EINVAL;
	}
	return validate_use(o, err, len) ?: validate_tpcc(o, err, len)
	                                 ?: validate_kill(o, err, len);
}

/* That the scale fits what is free, before anything starts. */
static int validate_memory(const struct wl_opts *o, char *err, size_t len)
{
	/* Every machine's memory lives in this host's /dev/shm (shm) or
	 * RAM: the scale must fit what is free, before anything starts. */
	struct statvfs vs;
	uint64_t avail = (uint64_t)sysconf(_SC_AVPHYS_PAGES) *
	                 (uint64_t)sysconf(_SC_PAGESIZE);
	if (statvfs("/dev/shm", &vs) == 0) {
		uint64_t shm = (uint64_t)vs.f_bavail * vs.f_frsize;
		avail = shm < avail ? shm : avail;
	}
	uint64_t need = need_bytes(o);
	if (need > avail) {
		snprintf(err, len,
		         "scale %llu needs about %llu MiB with %u replicas; "
		         "this host has %llu MiB free",
		         (unsigned long long)o->scale,
		         (unsigned long long)(need >> 20), o->replicas,
		         (unsigned long long)(avail >> 20));
		return -ENOMEM;
	}
	uint64_t rs = parse_size(o->region_size);
	if (rs < (1u << 20) || (rs & (rs - 1))) {
		snprintf(err, len, "region size %s is not a power of two >= 1M",
		         o->region_size);
		return -EINVAL;
	}
	return 0;
}

int wl_validate(const struct wl_opts *o, char *err, size_t len)
{
	int rc = validate_shape(o, err, len);
	return rc ? rc : validate_memory(o, err, len);
}

double wl_hist_pct(const uint64_t *hist, double p)
{
	uint64_t n = 0, acc = 0;
	for (int b = 0; b < WL_HIST_BUCKETS; b++)
		n += hist[b];
	if (!n)
		return 0;
	for (int b = 0; b < WL_HIST_BUCKETS; b++) {
		acc += hist[b];
		if ((double)acc >= p * (double)n) /* the bucket's middle */
			return b < 1000 ? (b + 0.5) / 10
			                : 100 + (b - 999.5) * 10;
	}
	return 200000;
}

void wl_result_free(struct wl_result *r)
{
	free(r->ticks);
	r->ticks = NULL;
}
