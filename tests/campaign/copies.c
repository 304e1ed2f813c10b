/*
 * The fault campaign (campaign.h), the parent: every region's copies
 * compared object by object, and what differs explained.
 */
#include "campaign.h"

static const char *cp_role(int role)
{
	return role == FARM_AS_PRIMARY ? "primary" : "backup";
}

/* Objects that differ between two copies, for the report: the first
 * CP_PROBE_OBJS of them, each as both copies' lists have it. */
struct cp_differ {
	unsigned n;
	struct cp_obj a[CP_PROBE_OBJS], b[CP_PROBE_OBJS];
	/* The first objects allocated at one copy only: [0] at the first
	 * machine, [1] at the second. */
	struct cp_obj only[2][CP_PROBE_OBJS];
};

/* Two copies of region @g, at machines @i and @j: the objects allocated
 * at both whose bytes differ (returned; the first ones in @dd), and in
 * one[0] those allocated at @i only, in one[1] at @j only. -1: a list
 * missing. */
static long cp_diff_copies(uint32_t g, unsigned i, unsigned j, long one[2],
                           struct cp_differ *dd)
{
	char pi[320], pj[320];
	cp_copy_path(pi, sizeof(pi), rb_cl.root, g, i);
	cp_copy_path(pj, sizeof(pj), rb_cl.root, g, j);
	size_t li = 0, lj = 0;
	struct cp_obj *a = np_read_file(pi, &li), *b = np_read_file(pj, &lj);
	size_t na = li / sizeof(*a), nb = lj / sizeof(*b), x = 0, y = 0;
	long differ = (!a && li) || (!b && lj) ? -1 : 0;
	one[0] = one[1] = 0;
	dd->n = 0;
	while (differ >= 0 && (x < na || y < nb)) {
		if (y == nb || (x < na && a[x].off < b[y].off)) {
			if (one[0] < (long)CP_PROBE_OBJS)
				dd->only[0][one[0]] = a[x];
			one[0]++;
			x++;
		} else if (x == na || b[y].off < a[x].off) {
			if (one[1] < (long)CP_PROBE_OBJS)
				dd->only[1][one[1]] = b[y];
			one[1]++;
			y++;
		} else {
			if (a[x].hash != b[y].hash && dd->n < CP_PROBE_OBJS) {
				dd->a[dd->n] = a[x];
				dd->b[dd->n++] = b[y];
			}
			differ += a[x++].hash != b[y++].hash;
		}
	}
	free(a);
	free(b);
	return differ;
}

/* Machine @m's probe answer (its file), or NULL. */
static struct cp_probe_ans *cp_probe_ask(unsigned m)
{
	char path[320];
	cp_probe_path(path, sizeof(path), rb_cl.root, m);
	(void)unlink(path);
	np_send(&rb_cl, m, 'O');
	np_expect(&rb_cl, m, 'o', 30000);
	size_t len = 0;
	struct cp_probe_ans *a = np_read_file(path, &len);
	if (a && len != sizeof(*a)) {
		free(a);
		a = NULL;
	}
	return a;
}

/* How machine @m holds the region: role, filling or complete, its
 * replicas as it sees them, a demoted copy, data recovery's record. */
static void cp_probe_say_copy(unsigned m, const struct cp_probe_ans *a)
{
	printf("    machine %u (configuration %" PRIu64 "): %s%s%s; replicas",
	       m, a->config,
	       a->role < 0                  ? "no copy"
	       : a->role == FARM_AS_PRIMARY ? "primary"
	                                    : "backup",
	       a->role == FARM_AS_BACKUP
	               ? (a->filling ? " (filling)" : " (complete)")
	               : "",
	       a->demoted ? ", a demoted copy mapped" : "");
	for (unsigned x = 0; x < a->nreps && x < FARM_RING_MAX_REPLICAS; x++)
		printf("%s%" PRIu32, x ? "," : " ", a->reps[x]);
	if (a->extra != FARM_RING_NO_EXTRA)
		printf(" (extra %" PRIu32 ")", a->extra);
	if (a->have_dr)
		printf("; its copy: state %d, %" PRIu64 " bytes read, %" PRIu64
		       " from the demoted copy, %" PRIu64 " fixed at the "
		       "check, %" PRIu64 " again, last error %d",
		       (int)a->dr.state, a->dr.bytes, a->dr.local, a->dr.fixed,
		       a->dr.retries, a->dr.last_err);
	else
		printf("; never copied here");
	printf("\n");
}

/* 16 bytes of @p from @at, in hex. */
static void cp_hex16(const char *who, const uint8_t *p, unsigned at)
{
	printf("      %-12s +%-4u", who, at);
	for (unsigned k = 0; k < 16; k++)
		printf(" %02x", p[at + k]);
	printf("\n");
}

/* 16 bytes of object @k from @at at both copies, and at a demoted copy
 * where one is mapped. */
static void cp_probe_rows(const struct cp_probe_ans *ai,
                          const struct cp_probe_ans *aj, unsigned k, unsigned i,
                          unsigned j, unsigned at)
{
	char w[4][32];
	snprintf(w[0], sizeof(w[0]), "m%u", i);
	snprintf(w[1], sizeof(w[1]), "m%u", j);
	snprintf(w[2], sizeof(w[2]), "m%u demoted", i);
	snprintf(w[3], sizeof(w[3]), "m%u demoted", j);
	cp_hex16(w[0], ai->obj[k], at);
	cp_hex16(w[1], aj->obj[k], at);
	if (ai->demoted)
		cp_hex16(w[2], ai->dem[k], at);
	if (aj->demoted)
		cp_hex16(w[3], aj->dem[k], at);
}

/* One object that differs: both header words, the first differing byte,
 * 16 bytes from there at each copy (and at a demoted copy), and so for
 * the body. */
static void cp_probe_say_obj(const struct cp_differ *dd, unsigned k, unsigned i,
                             unsigned j, const struct cp_probe_ans *ai,
                             const struct cp_probe_ans *aj)
{
	const struct cp_obj *x = &dd->a[k], *y = &dd->b[k];
	printf("    object +%#" PRIx64 ": machine %u header %#" PRIx64
	       " (version %#" PRIx64 ", lock %u) incarnation %#" PRIx64
	       ", %u lines; machine %u header %#" PRIx64 " (version %#" PRIx64
	       ", lock %u) incarnation %#" PRIx64 ", %u lines\n",
	       x->off, i, x->v, x->v >> 2, (unsigned)(x->v & 3), x->w, x->lines,
	       j, y->v, y->v >> 2, (unsigned)(y->v & 3), y->w, y->lines);
	if (!ai || !aj)
		return;
	unsigned len =
	        FARM_MIN(FARM_MIN(x->lines, y->lines) * 64u, CP_PROBE_BYTES);
	/* The first difference in the header (version, incarnation), then
	 * the first in the body. */
	for (unsigned from = 0, at; from < len; from = 16) {
		at = from;
		while (at < len && ai->obj[k][at] == aj->obj[k][at])
			at++;
		if (at == len) {
			printf("      bytes %u..%u equal now\n", from, len);
			break;
		}
		cp_probe_rows(ai, aj, k, i, j,
		              FARM_MIN(at & ~7u, CP_PROBE_BYTES - 16));
		if (at >= 16)
			break;
	}
}

/* Say what differs between the copies of region @g at machines @i and
 * @j, and how each holds the region (paused machines). */
static void cp_explain(uint32_t g, unsigned i, unsigned j,
                       const struct cp_differ *dd)
{
	struct cp_probe q = {.region = g, .n = dd->n};
	for (unsigned k = 0; k < dd->n; k++)
		q.off[k] = dd->a[k].off;
	char path[320];
	cp_probe_path(path, sizeof(path), rb_cl.root, ~0u);
	if (np_write_file(path, &q, sizeof(q)))
		return;
	struct cp_probe_ans *ai = cp_probe_ask(i), *aj = cp_probe_ask(j);
	printf("  region %#" PRIx32 ", machines %u and %u:\n", g, i, j);
	if (ai)
		cp_probe_say_copy(i, ai);
	if (aj)
		cp_probe_say_copy(j, aj);
	for (unsigned k = 0; k < dd->n; k++)
		cp_probe_say_obj(dd, k, i, j, ai, aj);
	free(ai);
	free(aj);
}

/* Of the objects allocated at one of machines @i and @j only (@one and
 * dd->only, as cp_diff_copies found them), those the primary of region
 * @g holds and its backup lacks fail the pair in @f; the first few are
 * looked up at the backup ('O'), and the failure says how many of them
 * it holds freed with a later incarnation (a committed free the primary
 * installed but whose slot it did not free: a leak; the last case known,
 * a free deferred while the adopter scanned its promoted region, its
 * records truncated before a restart_copy's power loss, is freed by the
 * restart since, src/txn/restart.c). Once every log is truncated a
 * complete backup
 * holds every object its primary does: a commit's allocations reach it
 * as COMMIT-BACKUP images, the rest through data recovery's copy (an
 * array's elements in one slab slot each: never written again, a copy of
 * the slot's first object alone left them out). Returns the objects
 * missing, leaks included. */
static long cp_missing(uint32_t g, unsigned i, int ri, unsigned j, int rj,
                       const long one[2], const struct cp_differ *dd,
                       struct fails *f)
{
	int p = ri == FARM_AS_PRIMARY && rj == FARM_AS_BACKUP   ? 0
	        : rj == FARM_AS_PRIMARY && ri == FARM_AS_BACKUP ? 1
	                                                        : -1;
	if (p < 0 || !one[p])
		return 0;
	unsigned prim = p ? j : i, back = p ? i : j;
	struct cp_probe q = {
	        .region = g,
	        .n = (uint32_t)FARM_MIN(one[p], (long)CP_PROBE_OBJS)};
	for (unsigned k = 0; k < q.n; k++)
		q.off[k] = dd->only[p][k].off;
	char path[320];
	cp_probe_path(path, sizeof(path), rb_cl.root, ~0u);
	struct cp_probe_ans *a =
	        np_write_file(path, &q, sizeof(q)) ? NULL : cp_probe_ask(back);
	unsigned leaks = 0;
	for (unsigned k = 0; a && k < q.n; k++) {
		uint64_t wb;
		memcpy(&wb, a->obj[k] + 8, 8);
		leaks += !farm_incarn_allocated(wb) &&
		         farm_incarn_count(wb) >
		                 farm_incarn_count(dd->only[p][k].w);
	}
	free(a);
	failed(f,
	       "region %#" PRIx32 ": %ld objects allocated at the primary "
	       "(machine %u) missing at its backup (machine %u), the first "
	       "at offset %#" PRIx64 "; %u of the first %" PRIu32
	       " held freed there with a later incarnation (a committed "
	       "free whose slot the primary kept)",
	       g, one[p], prim, back, q.off[0], leaks, q.n);
	return one[p];
}

/* Every region's copies (primary and backups): the objects allocated at
 * both hold the same bytes, once every log is truncated, and a backup
 * lacks none its primary holds (cp_missing). An object allocated at a
 * backup only is counted, not failed. Failures in @f. */
void cp_check_copies(struct fails *f)
{
	struct cp_hashes *h = calloc(NP_NM, sizeof(*h));
	assert_non_null(h);
	uint64_t t0 = np_now_ns();
	for (int step = 0; step < 2; step++) {
		for (unsigned i = 0; i < 64; i++)
			if (cp_is(cp_live, i))
				np_send(&rb_cl, i, step ? 'H' : 'F');
		for (unsigned i = 0; i < 64; i++)
			if (cp_is(cp_live, i))
				np_expect(&rb_cl, i, step ? 'h' : 'f', 60000);
	}
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			np_recv(&rb_cl, i, &h[i], sizeof(h[i]), 5000);
			if (h[i].pending)
				failed(f,
				       "machine %u: %u COMMIT-BACKUPs not "
				       "truncated after 10 s",
				       i, h[i].pending);
			if (h[i].deferred)
				failed(f,
				       "machine %u: %" PRIu64
				       " committed frees "
				       "still deferred for their region's "
				       "adoption after 10 s (objects allocated "
				       "and locked at the primary)",
				       i, h[i].deferred);
		}
	unsigned pairs = 0, bad = 0;
	long differ = 0, only = 0, missing = 0;
	for (unsigned i = 0; i < 64; i++)
		for (unsigned k = 0; cp_is(cp_live, i) && k < h[i].n; k++)
			for (unsigned j = i + 1; j < 64; j++)
				for (unsigned q = 0;
				     cp_is(cp_live, j) && q < h[j].n; q++) {
					uint32_t g = h[i].region[k];
					if (h[j].region[q] != g)
						continue;
					long one[2] = {0, 0};
					struct cp_differ dd;
					long d = cp_diff_copies(g, i, j, one,
					                        &dd);
					pairs++;
					only += one[0] + one[1];
					missing += cp_missing(
					        g, i, h[i].role[k], j,
					        h[j].role[q], one, &dd, f);
					if (d == 0)
						continue;
					differ += d > 0 ? d : 0;
					if (bad++ >= 4)
						continue;
					failed(f,
					       "region %#" PRIx32
					       ": %ld objects "
					       "differ between machine %u (%s) "
					       "and machine %u (%s)",
					       g, d, i, cp_role(h[i].role[k]),
					       j, cp_role(h[j].role[q]));
					cp_explain(g, i, j, &dd);
				}
	printf("copies: %u pairs of copies compared, %ld objects differ, "
	       "%ld allocated at one copy only (%ld of them missing at a "
	       "backup), in %.0f ms\n",
	       pairs, differ, only, missing, (double)(np_now_ns() - t0) / 1e6);
	if (opt_reuse_measure)
		cp_rm_report(h);
	free(h);
}
