/*
 * The fault campaign (campaign.h), the parent: the checks after each
 * fault, the workloads paused.
 */
#include "campaign.h"

/* Pause every live machine (every operation in flight answered); their
 * counts in @n. */
void cp_pause(struct cp_counts *n)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'P');
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			np_expect(&rb_cl, i, 'p', 60000);
			np_recv(&rb_cl, i, &n[i], sizeof(n[i]), 1000);
		}
}

void cp_resume(void)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'r');
}

/* Every committed write so far: the highest version per object, from
 * each machine's history records read once (tx_hist_committed_since). A
 * bounded summary: the objects transfers write are the accounts. */
#define CP_WKEYS 1024
static struct {
	uint64_t key[CP_WKEYS], maxv[CP_WKEYS], writes[CP_WKEYS];
	unsigned n;
	uint64_t overflow; /* writes of objects past CP_WKEYS */
	uint64_t off[NP_NM];
	uint64_t txns;
} cp_w;

static void cp_w_write(void *ctx, uint64_t key, uint64_t version)
{
	(void)ctx;
	unsigned i = 0;
	while (i < cp_w.n && cp_w.key[i] != key)
		i++;
	if (i == CP_WKEYS) {
		cp_w.overflow++;
		return;
	}
	if (i == cp_w.n)
		cp_w.key[cp_w.n++] = key;
	cp_w.maxv[i] = FARM_MAX(cp_w.maxv[i], version);
	cp_w.writes[i]++;
}

/* 3. Every write of a transaction reported committed, in any machine's
 * history so far, is present in scan @s (each account's version at least
 * the highest one written): lost accounts, plus committed writes of
 * objects that are not accounts. Reads only what the histories added
 * since the last pause. */
static unsigned cp_check_committed(const struct scan_report *s,
                                   struct committed *w, struct fails *f)
{
	uint64_t t0 = np_now_ns(), before = cp_w.txns;
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_used, i))
			continue;
		long k = tx_hist_committed_since(&rb_cl, i, &cp_w.off[i],
		                                 cp_w_write, NULL);
		if (k < 0)
			failed(f,
			       "machine %u: history unreadable after byte "
			       "%" PRIu64,
			       i, cp_w.off[i]);
		else
			cp_w.txns += (uint64_t)k;
	}
	w->s = s;
	for (unsigned k = 0; k < cp_w.n; k++) {
		unsigned a = rb_account(s, cp_w.key[k]);
		if (a < s->n)
			w->maxv[a] = cp_w.maxv[k];
		else
			w->unknown_keys += cp_w.writes[k];
	}
	w->unknown_keys += cp_w.overflow;
	unsigned lost = rb_committed_lost(w, f);
	printf("committed: %" PRIu64 " new transactions read (%" PRIu64
	       " so far), %u objects written; %u accounts lost a committed "
	       "write, in %.0f ms\n",
	       cp_w.txns - before, cp_w.txns, cp_w.n, lost,
	       (double)(np_now_ns() - t0) / 1e6);
	return lost;
}

/* The highest committed versions the whole histories' replay found (@w)
 * equal those step 3 gathered from each cycle's new records (@wi): the
 * summary misses no record and counts none twice. */
static void cp_check_summary(const struct committed *w,
                             const struct committed *wi, struct fails *f)
{
	unsigned differ = 0;
	for (unsigned a = 0; a < w->s->n; a++)
		if (w->maxv[a] != wi->maxv[a] && differ++ < 4)
			failed(f,
			       "account %#" PRIx64 ": the whole history's "
			       "highest committed version %" PRIu64
			       ", the cycles' summary's %" PRIu64,
			       w->s->addr[a], w->maxv[a], wi->maxv[a]);
	if (w->unknown_keys != wi->unknown_keys)
		failed(f,
		       "committed writes of unknown objects: %" PRIu64
		       " in the whole history, %" PRIu64 " in the summary",
		       w->unknown_keys, wi->unknown_keys);
}

/* 4. sercheck over every machine's whole history; the committed writes it
 * replays must be present too, and equal step 3's summary (@wi). */
static void cp_check_ser(struct cp_cycle *cy, const struct scan_report *s,
                         const struct committed *wi, struct fails *f)
{
	struct committed *w = calloc(1, sizeof(*w));
	assert_non_null(w);
	w->s = s;
	sc_report rep;
	uint64_t cut = 0;
	uint64_t t0 = np_now_ns();
	int anomalies = tx_check_history(&rb_cl, cp_killed | ~cp_used, &rep,
	                                 &cut, on_write, w);
	double sc_ms = (double)(np_now_ns() - t0) / 1e6;
	unsigned n0 = f->n;
	unsigned lost = rb_committed_lost(w, f);
	cp_check_summary(w, wi, f);
	cy->lost = FARM_MAX(cy->lost, (uint64_t)lost);
	cy->anomalies = anomalies > 0 ? (uint64_t)anomalies : anomalies < 0;
	cy->ran = true;
	if (anomalies) {
		sc_report_print(stdout, &rep);
		failed(f,
		       "sercheck: %d anomalies in the history (%" PRIu64
		       " transactions, %" PRIu64 " committed)",
		       anomalies, rep.ntxns, rep.ncommitted);
	} else if (f->n == n0) {
		cy->checks++;
	}
	cy->txns = rep.ntxns;
	cy->committed = rep.ncommitted;
	printf("sercheck: %" PRIu64 " txns (%" PRIu64 " committed, %" PRIu64
	       " unknown at kills) of %u machines: %s in %.0f ms\n",
	       rep.ntxns, rep.ncommitted, cut, cp_count(cp_used),
	       anomalies ? "ANOMALIES" : "strictly serializable", sc_ms);
	free(w);
}

/* 5. lincheck over every KV history (this is how every acknowledged put
 * is checked present). */
static void cp_check_lin(struct cp_cycle *cy, struct fails *f)
{
	lc_report lr;
	uint64_t nrec = 0;
	uint64_t t0 = np_now_ns();
	int rc = kvl_check_some(&rb_cl, cp_used, &lr, &nrec, 600000);
	printf("lincheck: %" PRIu64 " ops of %u machines: %s in %.0f ms\n",
	       nrec, cp_count(cp_used),
	       rc == 0  ? "linearizable"
	       : rc > 0 ? "VIOLATIONS"
	                : farm_strerror(rc),
	       (double)(np_now_ns() - t0) / 1e6);
	if (rc)
		cy->anomalies += rc > 0 ? FARM_MAX(lr.nviolations, 1) : 1;
	if (rc) {
		lc_report_print(stdout, &lr);
		failed(f,
		       "lincheck: %d (%" PRIu64 " keys without a "
		       "linearization, %" PRIu64 " not checked in time)",
		       rc, lr.nviolations, lr.ntimedout + lr.nunchecked);
	} else {
		cy->checks++;
	}
	cy->kv_ops = nrec;
}

/* 6. the allocators, rebuilt by scan; no object left locked */
static void cp_check_allocs(struct cp_cycle *cy, struct fails *f)
{
	unsigned n0 = f->n;
	uint64_t objects = 0, locked = 0;
	/* Every machine scans at once: each answers on its own pipe. */
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'A');
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct alloc_report a;
		np_expect(&rb_cl, i, 'A', 120000);
		np_recv(&rb_cl, i, &a, sizeof(a), 1000);
		alloc_check(i, &a, f);
		objects += a.objects;
		locked += a.locked;
	}
	printf("allocators: rebuilt by scan on %u machines; %" PRIu64
	       " objects walked, %" PRIu64 " locked\n",
	       cp_count(cp_live), objects, locked);
	cy->checks += f->n == n0;
}

/* Milliseconds since *@tp; *@tp moves on. */
double cp_ms_since(uint64_t *tp)
{
	uint64_t now = np_now_ns();
	double ms = (double)(now - *tp) / 1e6;
	*tp = now;
	return ms;
}

/* Every check, the workloads paused; a failed one in @f. sercheck and
 * lincheck only where cy->full. */
void cp_check(struct cp_cycle *cy, struct fails *f)
{
	unsigned nreg = 0;
	char why[256];
	double ms[7] = {0};
	uint64_t tp = np_now_ns();
	cy->due = cy->full ? 7 : 4;
	/* 1. full replication, paused */
	if (cp_await_replicated(10000, why, sizeof(why), &nreg))
		failed(f, "paused: not fully replicated: %s", why);
	else
		cy->checks++;
	ms[0] = cp_ms_since(&tp);

	/* 2. locks, total, no negative balance */
	unsigned scanner = cp_lowest(cp_live);
	struct scan_report *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	np_send(&rb_cl, scanner, 'S');
	np_expect(&rb_cl, scanner, 's',
	          (RB_MAX_LOCKED + RB_SUM_TRIES) * 3000 + 60000);
	np_recv(&rb_cl, scanner, s, sizeof(*s), 5000);
	unsigned n0 = f->n;
	report_scan(s, scanner, f);
	cy->checks += f->n == n0;
	ms[1] = cp_ms_since(&tp);

	/* 3. every acknowledged commit present, from what is new */
	struct committed *wi = calloc(1, sizeof(*wi));
	assert_non_null(wi);
	unsigned lost = cp_check_committed(s, wi, f);
	cy->checks += !lost;
	cy->lost = lost;
	ms[2] = cp_ms_since(&tp);

	/* 4, 5. over the whole histories, where due */
	if (cy->full) {
		cp_check_ser(cy, s, wi, f);
		ms[3] = cp_ms_since(&tp);
		cp_check_lin(cy, f);
		ms[4] = cp_ms_since(&tp);
	}
	free(wi);
	free(s);

	/* 6. where due: a scan of every byte of every region, and regions
	 * only add up over a run (each new machine makes its own) */
	if (cy->full)
		cp_check_allocs(cy, f);
	ms[5] = cp_ms_since(&tp);

	/* 7. every region's copies equal, byte for byte */
	n0 = f->n;
	cp_check_copies(f);
	cy->checks += f->n == n0;
	ms[6] = cp_ms_since(&tp);
	printf("checks: ms: replicated %.0f, scan %.0f, committed %.0f, "
	       "sercheck %.0f, lincheck %.0f, allocators %.0f, copies %.0f\n",
	       ms[0], ms[1], ms[2], ms[3], ms[4], ms[5], ms[6]);
}
