/*
 * ht_bench: the hashtable's structure (src/hashtable, FaRM's chained
 * associative hopscotch hashing): one-sided reads per lookup and space
 * utilization against occupancy, for neighbourhoods H and inline value
 * sizes -- the analogue of the FaRM paper's Figures 10 and 11.
 *
 * Setup: --machines (1) in-process machines (shm fabric, one loop each, one
 * thread drives them all, as tests/asnodes.h does), a table of --shards
 * (3) shards of --buckets (4096) buckets, spread over the machines. For
 * each H (--H: 2,4,6,8) and value size (--values: 8..512 B), a fresh
 * cluster and table with 16-byte keys and val_inline = the value size
 * (24 at least, the minimum; rounded up to 8 bytes by the table). Keys are
 * inserted in one order (up to --window puts in flight, flat-combined by
 * the shard's owner) until each occupancy of --occ (50..95%) is reached;
 * then every key inserted so far is looked up once (up to --window lookups
 * in flight) and its value checked.
 *
 * Occupancy: pairs / bucket slots (shards x buckets x H/2; neither the
 * extra bucket at each shard's end nor overflow blocks count). Reads per
 * lookup: farm_ht_stats lookup_reads / lookups over the lookups at that
 * occupancy (a local lookup counts as one read of buckets b and b+1, as a
 * remote one; each chain block or indirect object read is one more).
 * Space utilization: key + value bytes over the bytes the table uses:
 * shards x (buckets + 1) x bucket bytes, plus live overflow blocks
 * (chain_appends - chain_frees) x block bytes (all values are inline here,
 * so there are no indirect objects).
 *
 * The limit in the same run (bench/lib/memlimit.h): after the runs, one
 * thread copies the two-bucket span from random homes of a table of the
 * reference point's size and bucket bytes (H = 8, 32-byte values, 90%;
 * in /dev/shm as the shards are), --window lookups in flight with
 * prefetch, and one at a time; that point's lookups per second (one
 * thread drives every machine) are reported against it.
 *
 * Output: a table per H, the data as gnuplot files (ht_bench.dat,
 * ht_bench_90.dat in --out, default <build>/bench-results; plots with
 * bench/ht_plot.gp), then, last, one JSON line (bench/README.md).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <ftw.h>
#include <unistd.h>

#include <farm/farm.h>

#include "addrspace/addrspace.h"
#include "alloc/galloc.h"
#include "hashtable/ht.h"
#include "txn/txm.h"
#include "benchopts.h"
#include "benchutil.h"
#include "ht_cluster.h"
#include "ht_limit.h"

#define PROG "ht_bench"

#define MAX_LIST 16
#define KLEN     16u
#define STALL_NS 10000000000ull /* no progress for 10 s: give up */

/* Which list defaults the options overrode (--quick's apply to the
 * others). */
struct set_opts {
	bool h, v, b;
};

struct opts {
	unsigned machines, shards;
	uint32_t buckets;
	unsigned window;
	unsigned hs[MAX_LIST], nh;
	uint32_t vals[MAX_LIST], nv;
	unsigned occ[MAX_LIST], nocc;
	uint64_t region_size;
	uint64_t seed;
	char out[PATH_MAX];
	bool quick;
	struct set_opts given;
};

/* ---- keys and values ----------------------------------------------------- */

/* Key i: 8 mixed bytes, then i (so distinct, and not sequential). */
static void mk_key(uint64_t seed, uint64_t i, uint8_t *k)
{
	uint64_t s = seed ^ (i * 0x9e3779b97f4a7c15ull);
	uint64_t a = bu_rand64(&s);
	memcpy(k, &a, 8);
	memcpy(k + 8, &i, 8);
}

static void mk_val(uint64_t i, uint32_t len, uint8_t *v)
{
	uint64_t s = i + 0x5bd1e995ull;
	for (uint32_t j = 0; j < len; j += 8) {
		uint64_t x = bu_rand64(&s);
		memcpy(v + j, &x, BU_MIN(8u, len - j));
	}
}

/* ---- one configuration --------------------------------------------------- */

struct point {
	unsigned H;
	uint32_t vsize, val_inline;
	unsigned occ_target;
	uint64_t pairs, slots;
	double occupancy;
	uint64_t lookups, reads, chain_reads, retries;
	uint64_t chain_blocks, hops, combined;
	uint64_t table_bytes, data_bytes;
	double reads_per_lookup, chain_per_lookup, util;
	uint32_t bucket_bytes, block_bytes;
	double put_s, get_s;
	uint64_t shard_min, shard_max; /* pairs per shard */
};

struct run {
	struct cluster c;
	const struct opts *o;
	unsigned H;
	uint32_t vsize;
	uint64_t inflight, done, errors;
	uint64_t last_progress;
	char err[512];
};

static struct run RUN;

static void note_error(const char *what, uint64_t i, int status)
{
	RUN.errors++;
	if (RUN.errors == 1)
		snprintf(RUN.err, sizeof(RUN.err),
		         "H=%u value=%u: %s key #%" PRIu64 ": %d (%s)", RUN.H,
		         RUN.vsize, what, i, status,
		         status ? farm_strerror(status) : "-");
}

static void put_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	RUN.inflight--;
	RUN.done++;
	if (status)
		note_error("put failed:", (uint64_t)(uintptr_t)ctx, status);
}

static void get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                   uint32_t len)
{
	(void)loop;
	uint64_t i = (uint64_t)(uintptr_t)ctx;
	RUN.inflight--;
	RUN.done++;
	if (status) {
		note_error("get failed:", i, status);
		return;
	}
	uint8_t want[FARM_HT_MAX_VALUE > 1024 ? 1024 : FARM_HT_MAX_VALUE];
	mk_val(i, RUN.vsize, want);
	if (len != RUN.vsize || memcmp(val, want, len))
		note_error("get returned a wrong value (or length) for", i, 0);
}

/* Issue op(i) for i in [from, to) with up to --window in flight. */
static int drive(uint64_t from, uint64_t to, bool is_put)
{
	struct cluster *c = &RUN.c;
	const struct opts *o = RUN.o;
	uint8_t key[KLEN], val[1024];
	uint64_t i = from;
	RUN.done = 0;
	RUN.last_progress = bu_now_ns();
	uint64_t seen = 0;
	/* The clock (for the stall check) once in 64 passes: a read of a
	 * virtual machine's clock each pass costs about as much as a lookup
	 * (kv_bench's profile, docs/profiles/). */
	unsigned pass = 0;
	while (i < to || RUN.inflight) {
		while (i < to && RUN.inflight < o->window && !RUN.errors) {
			mk_key(o->seed, i, key);
			unsigned m = (unsigned)((i + (is_put ? 0 : 1)) % c->n);
			int rc;
			if (is_put) {
				mk_val(i, RUN.vsize, val);
				rc = farm_ht_put(c->m[m].ht, c->m[m].loop, key,
				                 KLEN, val, RUN.vsize, put_cb,
				                 (void *)(uintptr_t)i);
			} else {
				rc = farm_ht_get(c->m[m].ht, c->m[m].loop, key,
				                 KLEN, get_cb,
				                 (void *)(uintptr_t)i);
			}
			if (rc == -EAGAIN || rc == -ENOBUFS)
				break; /* full: pump first */
			if (rc) {
				note_error(is_put ? "farm_ht_put() refused"
				                  : "farm_ht_get() refused",
				           i, rc);
				break;
			}
			RUN.inflight++;
			i++;
		}
		if (RUN.errors && !RUN.inflight)
			break;
		pump(c);
		if (++pass % 64)
			continue;
		uint64_t now = bu_now_ns();
		if (RUN.done != seen) {
			seen = RUN.done;
			RUN.last_progress = now;
		} else if (now - RUN.last_progress > STALL_NS) {
			snprintf(RUN.err, sizeof(RUN.err),
			         "H=%u value=%u: no %s completed for 10 s "
			         "(%" PRIu64 " in flight, next key #%" PRIu64
			         ")",
			         RUN.H, RUN.vsize, is_put ? "put" : "get",
			         RUN.inflight, i);
			RUN.errors++;
			return -ETIMEDOUT;
		}
	}
	return RUN.errors ? -EIO : 0;
}

struct shard_res {
	struct farm_ht_shard sd;
	int status, done;
};

static void shard_cb(farm_loop *loop, void *ctx, int status,
                     struct farm_ht_shard sd)
{
	(void)loop;
	struct shard_res *r = ctx;
	r->sd = sd;
	r->status = status;
	r->done = 1;
}

static bool count_cb(void *ctx, const void *k, uint32_t kl, const void *v,
                     uint32_t vl)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	(*(uint64_t *)ctx)++;
	return true;
}

static void stats_sum(struct cluster *c, struct farm_ht_stats *s)
{
	memset(s, 0, sizeof(*s));
	for (unsigned m = 0; m < c->n; m++) {
		struct farm_ht_stats t;
		farm_ht_stats_get(c->m[m].ht, &t);
		s->lookups += t.lookups;
		s->lookup_reads += t.lookup_reads;
		s->lookup_retries += t.lookup_retries;
		s->lookup_chain_reads += t.lookup_chain_reads;
		s->hops += t.hops;
		s->chain_appends += t.chain_appends;
		s->chain_frees += t.chain_frees;
		s->combined_txns += t.combined_txns;
	}
}

/* One (H, value size): fills the points for every occupancy. */
static int run_cfg(const struct opts *o, unsigned H, uint32_t vsize,
                   struct point *pts)
{
	struct farm_ht_attr ha = {.neighborhood = H,
	                          .key_inline = KLEN,
	                          .val_inline = vsize < 24 ? 24 : vsize};
	memset(&RUN, 0, sizeof(RUN));
	RUN.o = o;
	RUN.H = H;
	RUN.vsize = vsize;
	struct cluster *c = &RUN.c;
	int rc = cluster_open(c, o->machines, o->region_size, &ha);
	if (rc)
		goto out;
	/* Shards round-robin over the machines, made by their owners. */
	struct farm_ht_shard sd[FARM_HT_MAX_SHARDS];
	for (unsigned s = 0; s < o->shards; s++) {
		struct mach *x = &c->m[s % c->n];
		struct shard_res r = {0};
		rc = farm_ht_make_shard(x->ht, x->loop, o->buckets, shard_cb,
		                        &r);
		if (rc) {
			fprintf(stderr, PROG ": farm_ht_make_shard: %s\n",
			        farm_strerror(rc));
			goto out;
		}
		uint64_t t0 = bu_now_ns();
		while (!r.done && bu_now_ns() - t0 < STALL_NS)
			pump(c);
		rc = r.done ? r.status : -ETIMEDOUT;
		if (rc) {
			fprintf(stderr, PROG ": shard %u of %u buckets: %s\n",
			        s, o->buckets, farm_strerror(rc));
			goto out;
		}
		sd[s] = r.sd;
	}
	for (unsigned m = 0; m < c->n; m++)
		if ((rc = farm_ht_set_shards(c->m[m].ht, sd, o->shards)))
			goto out;
	farm_ht *h0 = c->m[0].ht;
	uint64_t slots =
	        (uint64_t)o->shards * o->buckets * farm_ht_slots_per_bucket(h0);
	uint64_t have = 0;
	for (unsigned k = 0; k < o->nocc; k++) {
		struct point *p = &pts[k];
		memset(p, 0, sizeof(*p));
		p->H = H;
		p->vsize = vsize;
		p->val_inline = ha.val_inline;
		p->occ_target = o->occ[k];
		p->slots = slots;
		p->bucket_bytes = farm_ht_bucket_bytes(h0);
		p->block_bytes = farm_ht_block_bytes(h0);
		uint64_t want = (slots * o->occ[k] + 50) / 100;
		uint64_t t0 = bu_now_ns();
		if (want > have && (rc = drive(have, want, true)))
			goto out;
		uint64_t t1 = bu_now_ns();
		have = BU_MAX(have, want);
		struct farm_ht_stats s0, s1;
		stats_sum(c, &s0);
		if ((rc = drive(0, have, false)))
			goto out;
		uint64_t t2 = bu_now_ns();
		stats_sum(c, &s1);
		p->pairs = have;
		p->occupancy = (double)have / (double)slots;
		p->lookups = s1.lookups - s0.lookups;
		p->reads = s1.lookup_reads - s0.lookup_reads;
		p->chain_reads = s1.lookup_chain_reads - s0.lookup_chain_reads;
		p->retries = s1.lookup_retries - s0.lookup_retries;
		p->chain_blocks = s1.chain_appends - s1.chain_frees;
		p->hops = s1.hops;
		p->combined = s1.combined_txns;
		p->table_bytes = (uint64_t)o->shards * (o->buckets + 1ull) *
		                         p->bucket_bytes +
		                 p->chain_blocks * p->block_bytes;
		p->data_bytes = have * (KLEN + vsize);
		p->reads_per_lookup =
		        p->lookups ? (double)p->reads / p->lookups : 0;
		p->chain_per_lookup =
		        p->lookups ? (double)p->chain_reads / p->lookups : 0;
		p->util = (double)p->data_bytes / (double)p->table_bytes;
		p->put_s = (double)(t1 - t0) / 1e9;
		p->get_s = (double)(t2 - t1) / 1e9;
		/* Pairs per shard, read in place by each owner. */
		p->shard_min = UINT64_MAX;
		uint64_t total = 0;
		for (unsigned s = 0; s < o->shards; s++) {
			uint64_t cnt = 0;
			long r = farm_ht_iterate_local(c->m[s % c->n].ht, s,
			                               count_cb, &cnt);
			if (r < 0) {
				rc = (int)r;
				goto out;
			}
			total += cnt;
			p->shard_min = BU_MIN(p->shard_min, cnt);
			p->shard_max = BU_MAX(p->shard_max, cnt);
		}
		if (total != have) {
			snprintf(RUN.err, sizeof(RUN.err),
			         "H=%u value=%u: the shards hold %" PRIu64
			         " pairs, %" PRIu64 " were inserted",
			         H, vsize, total, have);
			RUN.errors++;
			rc = -EIO;
			goto out;
		}
	}
out:
	if (RUN.errors)
		fprintf(stderr, PROG ": %s\n", RUN.err);
	cluster_close(c);
	return rc ? rc : RUN.errors ? -EIO : 0;
}

/* ---- output -------------------------------------------------------------- */

static const struct point *find(const struct point *pts, unsigned n, unsigned H,
                                uint32_t v, unsigned occ)
{
	for (unsigned i = 0; i < n; i++)
		if (pts[i].H == H && pts[i].vsize == v &&
		    pts[i].occ_target == occ)
			return &pts[i];
	return NULL;
}

static void print_tables(const struct opts *o, const struct point *pts,
                         unsigned n)
{
	for (unsigned hi = 0; hi < o->nh; hi++) {
		unsigned H = o->hs[hi];
		printf("\nH = %u (%u slots per bucket), 16-byte keys, values "
		       "inline\n",
		       H, H / 2);
		printf("%5s %7s %9s %7s %7s %7s %6s |", "occ%", "pairs",
		       "rd/lookup", "chain%", "spread", "blocks", "hops");
		for (unsigned v = 0; v < o->nv; v++) {
			char lab[16];
			snprintf(lab, sizeof(lab), "util%u", o->vals[v]);
			printf(" %7s", lab);
		}
		printf("\n");
		for (unsigned k = 0; k < o->nocc; k++) {
			const struct point *p0 = NULL;
			double lo = 1e9, hi2 = 0;
			for (unsigned v = 0; v < o->nv; v++) {
				const struct point *p =
				        find(pts, n, H, o->vals[v], o->occ[k]);
				if (!p)
					continue;
				if (!p0)
					p0 = p;
				lo = BU_MIN(lo, p->reads_per_lookup);
				hi2 = BU_MAX(hi2, p->reads_per_lookup);
			}
			if (!p0)
				continue;
			printf("%5.1f %7" PRIu64 " %9.4f %7.2f %7.4f %7" PRIu64
			       " %6" PRIu64 " |",
			       100 * p0->occupancy, p0->pairs,
			       p0->reads_per_lookup, 100 * p0->chain_per_lookup,
			       hi2 - lo, p0->chain_blocks, p0->hops);
			for (unsigned v = 0; v < o->nv; v++) {
				const struct point *p =
				        find(pts, n, H, o->vals[v], o->occ[k]);
				if (p)
					printf(" %7.3f", p->util);
				else
					printf(" %7s", "-");
			}
			printf("\n");
		}
		printf("  bucket bytes by value size:");
		for (unsigned v = 0; v < o->nv; v++) {
			const struct point *p =
			        find(pts, n, H, o->vals[v], o->occ[0]);
			if (p)
				printf(" %u:%u", o->vals[v], p->bucket_bytes);
		}
		printf("; block bytes:");
		for (unsigned v = 0; v < o->nv; v++) {
			const struct point *p =
			        find(pts, n, H, o->vals[v], o->occ[0]);
			if (p)
				printf(" %u:%u", o->vals[v], p->block_bytes);
		}
		printf("\n");
	}
}

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(buf, 0777) && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(buf, 0777) && errno != EEXIST)
		return -errno;
	return 0;
}

/* ht_bench.dat: one block (gnuplot index) per (H, value size), rows by
 * occupancy. ht_bench_90.dat: one block per H, rows by value size, at the
 * occupancy nearest 90%. */
static int write_dat(const struct opts *o, const struct point *pts, unsigned n)
{
	if (mkdir_p(o->out)) {
		fprintf(stderr, PROG ": cannot create %s: %s\n", o->out,
		        strerror(errno));
		return -EIO;
	}
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/ht_bench.dat", o->out);
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -EIO;
	}
	fprintf(f,
	        "# ht_bench: %u shards x %u buckets, 16-byte keys, values "
	        "inline\n# one block per (H, value size); columns:\n"
	        "# H value_bytes occupancy_pct reads_per_lookup space_util "
	        "chain_reads_per_lookup chain_blocks hops pairs\n",
	        o->shards, o->buckets);
	for (unsigned hi = 0; hi < o->nh; hi++)
		for (unsigned v = 0; v < o->nv; v++) {
			fprintf(f, "# H=%u value=%u\n", o->hs[hi], o->vals[v]);
			for (unsigned k = 0; k < o->nocc; k++) {
				const struct point *p =
				        find(pts, n, o->hs[hi], o->vals[v],
				             o->occ[k]);
				if (p)
					fprintf(f,
					        "%u %u %.3f %.5f %.5f %.5f "
					        "%" PRIu64 " %" PRIu64
					        " %" PRIu64 "\n",
					        p->H, p->vsize,
					        100 * p->occupancy,
					        p->reads_per_lookup, p->util,
					        p->chain_per_lookup,
					        p->chain_blocks, p->hops,
					        p->pairs);
			}
			fprintf(f, "\n\n");
		}
	fclose(f);
	unsigned best = 0;
	for (unsigned k = 1; k < o->nocc; k++)
		if (abs((int)o->occ[k] - 90) < abs((int)o->occ[best] - 90))
			best = k;
	snprintf(path, sizeof(path), "%s/ht_bench_90.dat", o->out);
	f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -EIO;
	}
	fprintf(f,
	        "# ht_bench at %u%% occupancy: one block per H; columns:\n"
	        "# H value_bytes reads_per_lookup space_util\n",
	        o->occ[best]);
	for (unsigned hi = 0; hi < o->nh; hi++) {
		fprintf(f, "# H=%u\n", o->hs[hi]);
		for (unsigned v = 0; v < o->nv; v++) {
			const struct point *p = find(pts, n, o->hs[hi],
			                             o->vals[v], o->occ[best]);
			if (p)
				fprintf(f, "%u %u %.5f %.5f\n", p->H, p->vsize,
				        p->reads_per_lookup, p->util);
		}
		fprintf(f, "\n\n");
	}
	fclose(f);
	printf("\ndata: %s/ht_bench.dat, %s/ht_bench_90.dat (plots: gnuplot "
	       "-e \"dir='%s'\" bench/ht_plot.gp)\n",
	       o->out, o->out, o->out);
	return 0;
}

static void print_json(const struct opts *o, const struct point *pts,
                       unsigned n, const struct ht_limit *l)
{
	printf("{\"bench\": \"ht_bench\", \"machines\": %u, \"shards\": %u, "
	       "\"buckets_per_shard\": %u, \"key_bytes\": %u, \"window\": %u, "
	       "\"results\": [",
	       o->machines, o->shards, o->buckets, KLEN, o->window);
	for (unsigned i = 0; i < n; i++) {
		const struct point *p = &pts[i];
		printf("%s{\"H\": %u, \"value_bytes\": %u, \"val_inline\": %u, "
		       "\"occ_target\": %u, \"occupancy\": %.5f, \"pairs\": "
		       "%" PRIu64 ", \"slots\": %" PRIu64
		       ", \"lookups\": %" PRIu64
		       ", \"reads_per_lookup\": %.5f, "
		       "\"chain_reads_per_lookup\": %.5f, \"retries\": %" PRIu64
		       ", \"chain_blocks\": %" PRIu64 ", \"hops\": %" PRIu64
		       ", \"bucket_bytes\": %u, \"block_bytes\": %u, "
		       "\"table_bytes\": %" PRIu64 ", \"data_bytes\": %" PRIu64
		       ", \"space_util\": %.5f, \"shard_pairs_min\": %" PRIu64
		       ", \"shard_pairs_max\": %" PRIu64 "}",
		       i ? ", " : "", p->H, p->vsize, p->val_inline,
		       p->occ_target, p->occupancy, p->pairs, p->slots,
		       p->lookups, p->reads_per_lookup, p->chain_per_lookup,
		       p->retries, p->chain_blocks, p->hops, p->bucket_bytes,
		       p->block_bytes, p->table_bytes, p->data_bytes, p->util,
		       p->shard_min, p->shard_max);
	}
	const struct point *g = find(pts, n, 8, 32, 90);
	printf("], ");
	ht_limit_json(l);
	printf(", \"goals\": {\"reads_per_lookup_90pct_H8_32B\": ");
	if (g)
		printf("{\"value\": %.5f, \"target\": 1.04, \"met\": %s}",
		       g->reads_per_lookup,
		       g->reads_per_lookup <= 1.04 ? "true" : "false");
	else
		printf("{\"value\": null, \"target\": 1.04, \"met\": "
		       "false}");
	ht_limit_goal_json(l);
	printf("}}\n");
}

/* ---- options ------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: " PROG " [options]\n"
	        "Reads per lookup and space utilization of the hashtable "
	        "against\n"
	        "occupancy, per neighbourhood H and inline value size "
	        "(16-byte\n"
	        "keys); in-process machines driven by one thread.\n"
	        "  --H LIST          neighbourhoods (default 2,4,6,8)\n"
	        "  --values LIST     value sizes in bytes, inline (default\n"
	        "                    8,16,32,64,128,256,512; at most 1024)\n"
	        "  --occ LIST        occupancies in %% (default "
	        "50,60,70,80,90,95)\n"
	        "  --shards N        shards (default 3)\n"
	        "  --buckets N       buckets per shard (default 4096)\n"
	        "  --machines N      in-process machines, 1..%d (default 1);\n"
	        "                    shards round-robin over them\n"
	        "  --window N        puts / lookups in flight (default 16)\n"
	        "  --seed N          key seed (default 1)\n"
	        "  --region-size B   region bytes, a power of two (default "
	        "128 MiB)\n"
	        "  --out DIR         where the .dat files go (default "
	        "<build>/bench-results)\n"
	        "  --quick           smoke test: 3 x 128 buckets, H 2,8, "
	        "values "
	        "8,32,512\n"
	        "  -h, --help        this text\n"
	        "Output: a table per H, then one JSON line "
	        "(bench/README.md).\n",
	        MAX_M);
}

static int parse_list(const char *s, unsigned *out, unsigned *n,
                      unsigned long lo, unsigned long hi)
{
	*n = 0;
	while (*s) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);
		if (end == s || v < lo || v > hi || *n == MAX_LIST ||
		    (*end && *end != ','))
			return -EINVAL;
		out[(*n)++] = (unsigned)v;
		s = *end ? end + 1 : end;
	}
	return *n ? 0 : -EINVAL;
}

static void default_out(char *buf, size_t len)
{
	/* <build>/bench/ht_bench -> <build>/bench-results */
	char exe[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		char *s = strrchr(exe, '/');
		if (s) {
			*s = 0;
			s = strrchr(exe, '/');
			if (s) {
				*s = 0;
				snprintf(buf, len, "%s/bench-results", exe);
				return;
			}
		}
	}
	snprintf(buf, len, "bench-results");
}

static void parse_defaults(struct opts *o)
{
	static const unsigned dh[] = {2, 4, 6, 8};
	static const unsigned dv[] = {8, 16, 32, 64, 128, 256, 512};
	static const unsigned docc[] = {50, 60, 70, 80, 90, 95};
	memset(o, 0, sizeof(*o));
	o->machines = 1;
	o->shards = 3;
	o->buckets = 4096;
	o->window = 16;
	o->seed = 1;
	o->region_size = 128ull << 20;
	o->nh = 4;
	memcpy(o->hs, dh, sizeof(dh));
	o->nv = 7;
	memcpy(o->vals, dv, sizeof(dv));
	o->nocc = 6;
	memcpy(o->occ, docc, sizeof(docc));
}

/* @arg as an unsigned in [@min, @max] into *@out. 0 or -EINVAL. */
static int parse_uint(const char *arg, unsigned long min, unsigned long max,
                      unsigned *out)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 10);
	if (*end || v < min || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* The lists: -H (even), --values, --occ (increasing: keys are only
 * added). 0, -EINVAL, or 1 (not a list option). */
static int parse_lists(int c, const char *arg, void *ctx)
{
	struct opts *o = ctx;
	switch (c) {
	case 'H':
		if (parse_list(arg, o->hs, &o->nh, 2, 16))
			return -EINVAL;
		for (unsigned i = 0; i < o->nh; i++)
			if (o->hs[i] % 2)
				return -EINVAL;
		o->given.h = true;
		return 0;
	case 'v':
		o->given.v = true;
		return parse_list(arg, o->vals, &o->nv, 1, 1024) ? -EINVAL : 0;
	case 'o':
		if (parse_list(arg, o->occ, &o->nocc, 1, 100))
			return -EINVAL;
		for (unsigned i = 1; i < o->nocc; i++)
			if (o->occ[i] <= o->occ[i - 1])
				return -EINVAL;
		return 0;
	default: return 1;
	}
}

/* One option @c other than the lists. 0, -EINVAL, or 1 (not one). */
static int parse_one(int c, const char *arg, void *ctx)
{
	struct opts *o = ctx;
	char *end;
	unsigned b;
	switch (c) {
	case 's': return parse_uint(arg, 1, FARM_HT_MAX_SHARDS, &o->shards);
	case 'b':
		if (parse_uint(arg, 1, 1ul << 24, &b))
			return -EINVAL;
		o->buckets = b;
		o->given.b = true;
		return 0;
	case 'm': return parse_uint(arg, 1, MAX_M, &o->machines);
	case 'w': return parse_uint(arg, 1, 128, &o->window);
	case 'S': o->seed = strtoull(arg, &end, 10); return *end ? -EINVAL : 0;
	case 'g':
		o->region_size = strtoull(arg, &end, 10);
		return *end || !bu_is_pow2(o->region_size) ||
		                       o->region_size < (1u << 20)
		               ? -EINVAL
		               : 0;
	case 'O':
		if (!*arg || strlen(arg) >= sizeof(o->out))
			return -EINVAL;
		snprintf(o->out, sizeof(o->out), "%s", arg);
		return 0;
	case 'q': o->quick = true; return 0;
	default: return 1;
	}
}

/* --quick's smaller lists and table, where not given. */
static void quick_defaults(struct opts *o, struct set_opts set)
{
	static const unsigned qh[] = {2, 8};
	static const unsigned qv[] = {8, 32, 512};
	if (!set.h) {
		o->nh = 2;
		memcpy(o->hs, qh, sizeof(qh));
	}
	if (!set.v) {
		o->nv = 3;
		memcpy(o->vals, qv, sizeof(qv));
	}
	if (!set.b)
		o->buckets = 128;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	        {"H", required_argument, NULL, 'H'},
	        {"values", required_argument, NULL, 'v'},
	        {"occ", required_argument, NULL, 'o'},
	        {"shards", required_argument, NULL, 's'},
	        {"buckets", required_argument, NULL, 'b'},
	        {"machines", required_argument, NULL, 'm'},
	        {"window", required_argument, NULL, 'w'},
	        {"seed", required_argument, NULL, 'S'},
	        {"region-size", required_argument, NULL, 'g'},
	        {"out", required_argument, NULL, 'O'},
	        {"quick", no_argument, NULL, 'q'},
	        {"help", no_argument, NULL, 'h'},
	        {0, 0, 0, 0},
	};
	parse_defaults(o);
	static const struct bo_parser parser = {PROG, lo, usage, parse_lists,
	                                        parse_one};
	if (bo_getopt(&parser, argc, argv, o))
		return -EINVAL;
	if (o->quick)
		quick_defaults(o, o->given);
	if (!o->out[0])
		default_out(o->out, sizeof(o->out));
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse(argc, argv, &o))
		return 2;
	unsigned npts = o.nh * o.nv * o.nocc;
	struct point *pts = calloc(npts, sizeof(*pts));
	if (!pts)
		return 1;
	printf("ht_bench: chained associative hopscotch hashtable, %u "
	       "machine(s), %u shards x %u buckets, 16-byte keys, values "
	       "inline, %u puts/lookups in flight\n",
	       o.machines, o.shards, o.buckets, o.window);
	printf("reads/lookup: one-sided reads per lookup of every key present "
	       "(buckets b and b+1 = 1; +1 per overflow block); chain%%: chain "
	       "block reads per 100 lookups;\nspread: max - min of "
	       "reads/lookup "
	       "over the value sizes (the layout does not depend on them); "
	       "utilN: key+value bytes / table bytes for N-byte values\n");
	fflush(stdout);
	unsigned n = 0;
	int failed = 0;
	uint64_t t0 = bu_now_ns();
	for (unsigned hi = 0; hi < o.nh; hi++)
		for (unsigned v = 0; v < o.nv; v++) {
			uint64_t t1 = bu_now_ns();
			int rc = run_cfg(&o, o.hs[hi], o.vals[v], &pts[n]);
			if (rc) {
				fflush(stdout);
				fprintf(stderr,
				        PROG
				        ": H=%u value=%u failed: %s "
				        "(reproduce: "
				        "%s --H %u --values %u --shards %u "
				        "--buckets %u --machines %u --window "
				        "%u "
				        "--seed %" PRIu64 ")\n",
				        o.hs[hi], o.vals[v], farm_strerror(rc),
				        argv[0], o.hs[hi], o.vals[v], o.shards,
				        o.buckets, o.machines, o.window,
				        o.seed);
				failed = 1;
				continue;
			}
			double put_s = 0, get_s = 0;
			for (unsigned k = 0; k < o.nocc; k++) {
				put_s += pts[n + k].put_s;
				get_s += pts[n + k].get_s;
			}
			printf("  H=%u value=%u: %.2f s (puts %.2f s, lookups "
			       "%.2f s)\n",
			       o.hs[hi], o.vals[v],
			       (double)(bu_now_ns() - t1) / 1e9, put_s, get_s);
			fflush(stdout);
			n += o.nocc;
		}
	print_tables(&o, pts, n);
	printf("total %.1f s\n", (double)(bu_now_ns() - t0) / 1e9);
	const struct point *g = find(pts, n, 8, 32, 90);
	if (g)
		printf("goal: reads per lookup at 90%% occupancy, H = 8, "
		       "32-byte "
		       "values inline <= 1.04 (FaRM): %.4f -> %s\n",
		       g->reads_per_lookup,
		       g->reads_per_lookup <= 1.04 ? "met" : "NOT met");
	struct ht_limit lim = {0};
	if (g && ht_limit_measure(&lim, g->lookups, g->get_s,
	                          (uint64_t)o.shards * (o.buckets + 1ull),
	                          g->bucket_bytes, o.window, o.quick ? 0.1 : 1))
		failed = 1;
	if (write_dat(&o, pts, n))
		failed = 1;
	print_json(&o, pts, n, &lim);
	free(pts);
	return failed;
}
