/*
 * The B-tree across 3 machine processes (static membership, one loop
 * each, a KV store for the tree's name). Machine 0 makes the tree (small
 * nodes: 4 entries), the others open it by name; then:
 *
 *   model      each machine runs random puts, deletes, gets and scans
 *              (lock-free, and puts in transactions of two) on its own
 *              keys, interleaved with the others' (key % 3 == machine) so
 *              all three split the same leaves and internal nodes; each
 *              checks every answer against its own sorted-map model, and
 *              its keys in full scans; then machine 0 checks the tree's
 *              invariants and the parent that it holds exactly the keys
 *              the models hold.
 *   lin        all three insert, delete and look up (lock-free) keys of
 *              one range of 200 for ~2 s, recorded with CLOCK_MONOTONIC
 *              times; the parent checks the merged history with
 *              lincheck: no violation.
 *   ser        all three run transactions over 24 keys: read-modify-
 *              writes, scans of a sub-range (ascending or descending:
 *              every scan in this file picks at random), and scans followed by
 * a write outside the scanned range (write skew through phantoms); versions are
 * the values, so the merged history is checked with sercheck: strictly
 * serializable.
 *   --broken-fence  (test builds) the lin phase with the leaf fence check
 *              of lock-free lookups switched off on every machine: stale
 *              caches answer "absent" for present keys and lincheck must
 *              report violations.
 *   --broken-scan  (test builds) the ser phase with scans in a
 *              transaction reading their leaves outside its read set:
 *              sercheck must report anomalies. They are stale reads of
 *              the read-modify-writes on the 24 keys, not phantoms; the
 *              phantom cases are test_btree's test_phantoms.
 * Options: --seconds S (lin and ser phases), --broken-fence,
 * --broken-scan.
 */
#include "kvproc.h"

#include <inttypes.h>

#include "btcheck.h"
#include "lincheck.h"
#include "sercheck.h"

#include <farm/btree.h>

#define NM      NP_NM
#define JOIN_MS 30000
#define MKEYS   400u /* model keys per machine */
/* The lin phase's range: few keys, so that splits race with operations
 * on the keys they move. */
#define LKEYS 200u
#define LBASE 100000u
#define SKEYS 24u /* the ser phase's keys */
#define SBASE 200000u

static double opt_secs = 2;
static bool opt_broken, opt_broken_scan;
static struct np_cluster G;

static const struct farm_bt_attr ATTR = {
        .key_max = 8, .val_max = 8, .leaf_cap = 4, .inner_cap = 4};

struct ch {
	struct np_child np;
	farm_kv *kv;
	farm_bt *bt;
};

/* ---- helpers (child side) ---------------------------------------------- */

static uint64_t crnd(struct ch *c)
{
	c->np.rng ^= c->np.rng << 13;
	c->np.rng ^= c->np.rng >> 7;
	c->np.rng ^= c->np.rng << 17;
	return c->np.rng;
}

static int cput(struct ch *c, farm_tx *tx, uint64_t k, uint64_t v)
{
	uint8_t kb[8];
	farm_bt_key_u64(k, kb);
	return farm_bt_put(c->bt, tx, c->np.loop, kb, 8, &v, 8);
}
static int cget(struct ch *c, farm_tx *tx, uint64_t k, uint64_t *v)
{
	uint8_t kb[8];
	uint32_t len;
	farm_bt_key_u64(k, kb);
	int rc = farm_bt_get(c->bt, tx, c->np.loop, kb, 8, v, 8, &len);
	return !rc && len != 8 ? FARM_ECORRUPT : rc;
}
static int cdel(struct ch *c, farm_tx *tx, uint64_t k)
{
	uint8_t kb[8];
	farm_bt_key_u64(k, kb);
	return farm_bt_delete(c->bt, tx, c->np.loop, kb, 8);
}
static long cscan_dir(struct ch *c, farm_tx *tx, uint64_t lo, uint64_t hi,
                      bool rev, struct bscan *s)
{
	uint8_t kl[8], kh[8];
	farm_bt_key_u64(lo, kl);
	farm_bt_key_u64(hi, kh);
	struct farm_bt_range r = {.start = kl,
	                          .start_len = 8,
	                          .end = kh,
	                          .end_len = 8,
	                          .reverse = rev};
	s->n = 0;
	s->bad = false;
	long n = farm_bt_scan(c->bt, tx, c->np.loop, &r, bscan_cb, s);
	if (rev) /* back to ascending for the callers */
		for (size_t i = 0; i < s->n / 2; i++) {
			struct bm_pair t = s->out[i];
			s->out[i] = s->out[s->n - 1 - i];
			s->out[s->n - 1 - i] = t;
		}
	return s->bad ? FARM_ECORRUPT : n;
}

static long cscan(struct ch *c, farm_tx *tx, uint64_t lo, uint64_t hi,
                  struct bscan *s)
{
	return cscan_dir(c, tx, lo, hi, c->np.rng & 1, s);
}

#define CHECK(cond, ...)                                    \
	do {                                                \
		if (!(cond)) {                              \
			fprintf(stderr, "m%u: ", c->np.me); \
			fprintf(stderr, __VA_ARGS__);       \
			fputc('\n', stderr);                \
			return -1;                          \
		}                                           \
	} while (0)

/* ---- model phase ------------------------------------------------------- */

/* My keys of the model range in a full scan equal my model. */
static int model_scan(struct ch *c, const struct bmodel *m)
{
	struct bscan s = {.cap = NM * MKEYS + 8};
	s.out = malloc(s.cap * sizeof(*s.out));
	long n = cscan(c, NULL, 0, NM * MKEYS, &s);
	size_t j = 0;
	int rc = 0;
	for (long i = 0; n >= 0 && i < n && !rc; i++) {
		if (s.out[i].k % NM != c->np.me)
			continue;
		if (j >= m->n || s.out[i].k != m->p[j].k ||
		    s.out[i].v != m->p[j].v)
			rc = -1;
		j++;
	}
	free(s.out);
	CHECK(n >= 0 && !rc && j == m->n, "scan differs from the model (%ld)",
	      n);
	return 0;
}

/* Two puts in one transaction, run again while retryable. */
static int tx_pair(struct ch *c, struct bmodel *m, uint64_t k1, uint64_t k2,
                   uint64_t v)
{
	for (int t = 0; t < 100; t++) {
		farm_tx *tx = NULL;
		int rc = farm_tx_begin(farm_node_txm(c->np.node), c->np.loop,
		                       &tx);
		CHECK(!rc, "begin: %s", farm_strerror(rc));
		rc = cput(c, tx, k1, v);
		if (!rc)
			rc = cput(c, tx, k2, v + 1);
		if (!rc)
			rc = farm_tx_commit_sync(tx);
		farm_tx_free(tx);
		if (!rc) {
			bm_put(m, k1, v);
			bm_put(m, k2, v + 1);
			return 0;
		}
		CHECK(farm_tx_retryable(rc), "tx: %s", farm_strerror(rc));
	}
	CHECK(false, "tx: 100 retries");
}

static int model_op(struct ch *c, struct bmodel *m, uint64_t *seq)
{
	uint64_t k = (crnd(c) % MKEYS) * NM + c->np.me, v;
	unsigned what = (unsigned)(crnd(c) % 20);
	bool f;
	size_t i = bm_find(m, k, &f);
	int rc;
	if (what < 9) {
		rc = cput(c, NULL, k, ++*seq);
		CHECK(!rc, "put: %s", farm_strerror(rc));
		bm_put(m, k, *seq);
	} else if (what < 13) {
		rc = cdel(c, NULL, k);
		CHECK(rc == (f ? 0 : -ENOENT), "del: %s", farm_strerror(rc));
		bm_del(m, k);
	} else if (what < 18) {
		rc = cget(c, NULL, k, &v);
		CHECK(rc == (f ? 0 : -ENOENT), "get %" PRIu64 ": %s", k,
		      farm_strerror(rc));
		CHECK(!f || v == m->p[i].v, "get %" PRIu64 ": wrong value", k);
	} else if (what < 19) {
		uint64_t k2 = (crnd(c) % MKEYS) * NM + c->np.me;
		*seq += 2;
		return k2 == k ? 0 : tx_pair(c, m, k, k2, *seq - 1);
	} else {
		return model_scan(c, m);
	}
	return 0;
}

static int phase_model(struct ch *c, uint64_t *nkeys)
{
	struct bmodel m = {0};
	uint64_t seq = (uint64_t)c->np.me << 40;
	int rc = 0;
	for (int i = 0; i < 1500 && !rc; i++)
		rc = model_op(c, &m, &seq);
	if (!rc)
		rc = model_scan(c, &m);
	*nkeys = m.n;
	free(m.p);
	return rc;
}

/* ---- lin phase --------------------------------------------------------- */

struct lrec {
	uint64_t key, value, t_inv, t_resp;
	uint8_t kind, found;
	uint8_t pad[6];
};

static int phase_lin(struct ch *c)
{
	size_t cap = 1 << 16, n = 0;
	struct lrec *r = malloc(cap * sizeof(*r));
	uint64_t end = np_now_ns() + (uint64_t)(opt_secs * 1e9), id = 0;
	while (np_now_ns() < end) {
		if (n == cap)
			r = realloc(r, (cap *= 2) * sizeof(*r));
		uint64_t k = LBASE + crnd(c) % LKEYS, v = 0;
		unsigned what = (unsigned)(crnd(c) % 10);
		struct lrec *x = &r[n];
		*x = (struct lrec){.key = k, .t_inv = np_now_ns()};
		int rc;
		if (what < 4) {
			v = ((uint64_t)c->np.me << 48) | ++id;
			rc = cput(c, NULL, k, v);
			x->kind = LC_PUT;
			x->value = v;
		} else if (what < 5) {
			rc = cdel(c, NULL, k);
			x->kind = LC_DEL;
			x->found = rc == 0;
			if (rc == -ENOENT)
				rc = 0;
		} else {
			rc = cget(c, NULL, k, &v);
			x->kind = LC_GET;
			x->found = rc == 0;
			x->value = v;
			if (rc == -ENOENT)
				rc = 0;
		}
		x->t_resp = np_now_ns();
		if (rc && (farm_tx_retryable(rc) || rc == -EBUSY))
			continue; /* did not happen (or a get: no answer) */
		CHECK(!rc, "lin op: %s", farm_strerror(rc));
		n++;
	}
	char path[400];
	snprintf(path, sizeof(path), "%s/lin", c->np.cl->dir[c->np.me]);
	int rc = np_write_file(path, r, n * sizeof(*r));
	free(r);
	return rc;
}

/* ---- ser phase --------------------------------------------------------- */

struct srec {
	uint64_t a, b;
	uint8_t type; /* 'B' t_inv, 'R'/'W' key version, 'E' t_done outcome */
	uint8_t pad[7];
};

struct shist {
	struct srec *r;
	size_t n, cap, txn_start;
};

static void srec_add(struct shist *h, uint8_t type, uint64_t a, uint64_t b)
{
	if (h->n == h->cap)
		h->r = realloc(h->r, (h->cap = h->cap ? 2 * h->cap : 4096) *
		                             sizeof(*h->r));
	h->r[h->n++] = (struct srec){.a = a, .b = b, .type = type};
}

/* Read-modify-write of key @k: its version (the value; 0 absent) + 1. */
static int ser_rmw(struct ch *c, farm_tx *tx, struct shist *h, uint64_t k)
{
	uint64_t v = 0;
	int rc = cget(c, tx, SBASE + k, &v);
	if (rc == -ENOENT) {
		v = 0;
		rc = 0;
	}
	if (rc)
		return rc;
	srec_add(h, 'R', k, v);
	rc = cput(c, tx, SBASE + k, v + 1);
	if (!rc)
		srec_add(h, 'W', k, v + 1);
	return rc;
}

/* Scan keys [lo, hi): a read of each, absent ones at version 0. */
static int ser_scan(struct ch *c, farm_tx *tx, struct shist *h, uint64_t lo,
                    uint64_t hi)
{
	struct bm_pair out[SKEYS + 1];
	struct bscan s = {.out = out, .cap = SKEYS + 1};
	long n = cscan(c, tx, SBASE + lo, SBASE + hi, &s);
	if (n < 0)
		return (int)n;
	size_t j = 0;
	for (uint64_t k = lo; k < hi; k++) {
		bool here = j < s.n && s.out[j].k == SBASE + k;
		srec_add(h, 'R', k, here ? s.out[j].v : 0);
		j += here;
	}
	return j == s.n ? 0 : FARM_ECORRUPT;
}

static int ser_txn(struct ch *c, struct shist *h)
{
	farm_tx *tx = NULL;
	h->txn_start = h->n;
	srec_add(h, 'B', np_now_ns(), 0);
	int rc = farm_tx_begin(farm_node_txm(c->np.node), c->np.loop, &tx);
	if (rc)
		return rc;
	unsigned what = (unsigned)(crnd(c) % 3);
	uint64_t lo = crnd(c) % SKEYS, len = 1 + crnd(c) % 8;
	uint64_t hi = lo + len > SKEYS ? SKEYS : lo + len;
	if (what == 0) {
		rc = ser_rmw(c, tx, h, crnd(c) % SKEYS);
		if (!rc && crnd(c) % 2)
			rc = ser_rmw(c, tx, h, crnd(c) % SKEYS);
	} else {
		rc = ser_scan(c, tx, h, lo, hi);
		uint64_t out = (hi + crnd(c) % (SKEYS - (hi - lo))) % SKEYS;
		if (!rc && what == 2 && (out < lo || out >= hi))
			rc = ser_rmw(c, tx, h, out);
	}
	if (!rc)
		rc = farm_tx_commit_sync(tx);
	farm_tx_free(tx);
	srec_add(h, 'E', np_now_ns(), rc ? SC_ABORTED : SC_COMMITTED);
	return rc && !farm_tx_retryable(rc) ? rc : 0;
}

static int phase_ser(struct ch *c)
{
	struct shist h = {0};
	uint64_t end = np_now_ns() + (uint64_t)(opt_secs * 1e9);
	int rc = 0;
	while (!rc && np_now_ns() < end)
		rc = ser_txn(c, &h);
	CHECK(!rc, "ser txn: %s", farm_strerror(rc));
	char path[400];
	snprintf(path, sizeof(path), "%s/ser", c->np.cl->dir[c->np.me]);
	rc = np_write_file(path, h.r, h.n * sizeof(*h.r));
	free(h.r);
	return rc;
}

/* ---- the machine's command loop ---------------------------------------- */

static int serve(struct ch *c)
{
	farm_txm *m = farm_node_txm(c->np.node);
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		int32_t rc = 0;
		uint64_t x = 0;
		switch (cmd) {
		case 'C':
			rc = farm_bt_create_sync(c->kv, m, c->np.loop, "multi",
			                         &ATTR, &c->bt);
			break;
		case 'O':
			rc = farm_bt_open_sync(c->kv, m, c->np.loop, "multi",
			                       &c->bt);
			break;
		case 'M': rc = phase_model(c, &x); break;
		case 'V': rc = bc_verify(c->bt, c->np.loop, &x); break;
		case 'L':
		case 'B':
#ifdef FARM_FAULT_INJECTION
			atomic_store(&farm_bt_fault_no_fence, cmd == 'B');
#endif
			rc = phase_lin(c);
#ifdef FARM_FAULT_INJECTION
			atomic_store(&farm_bt_fault_no_fence, 0);
#endif
			break;
		case 'S':
		case 'T':
#ifdef FARM_FAULT_INJECTION
			atomic_store(&farm_bt_fault_scan_lf, cmd == 'T');
#endif
			rc = phase_ser(c);
#ifdef FARM_FAULT_INJECTION
			atomic_store(&farm_bt_fault_scan_lf, 0);
#endif
			break;
		default: farm_bt_close(c->bt); return 0;
		}
		if (np_say(&c->np, (char)(cmd | 0x20), &rc, sizeof(rc)) ||
		    tu_send(c->np.out, &x, sizeof(x)))
			return 1;
	}
}

static int run_body(void *arg)
{
	return serve(arg);
}

static int child_entry(struct np_child *np, void *arg)
{
	(void)arg;
	struct ch c = {.np = *np};
	return kvp_run(&c.np, "64M", NULL, 256, JOIN_MS, &c.kv, run_body, &c);
}

/* ---- the parent -------------------------------------------------------- */

/* Send @cmd to the machines in @mask and collect their answers. */
static void all(char cmd, unsigned mask, uint64_t *x, int ms)
{
	for (unsigned i = 0; i < NM; i++)
		if (mask >> i & 1)
			np_send(&G, i, cmd);
	for (unsigned i = 0; i < NM; i++) {
		if (!(mask >> i & 1))
			continue;
		int32_t rc;
		uint64_t v;
		np_expect(&G, i, (char)(cmd | 0x20), ms);
		np_recv(&G, i, &rc, sizeof(rc), 1000);
		np_recv(&G, i, &v, sizeof(v), 1000);
		if (rc)
			fail_msg("machine %u: '%c' failed: %d (%s)", i, cmd, rc,
			         farm_strerror(rc));
		if (x)
			x[i] = v;
	}
}

static int lin_check(lc_report *rep)
{
	lc_history *h = lc_new();
	uint64_t ops = 0;
	for (unsigned i = 0; i < NM; i++) {
		char path[400];
		size_t len;
		snprintf(path, sizeof(path), "%s/lin", G.dir[i]);
		struct lrec *r = np_read_file(path, &len);
		assert_non_null(r);
		for (size_t k = 0; k < len / sizeof(*r); k++)
			assert_true(lc_op(h, i, (enum lc_kind)r[k].kind,
			                  r[k].key, r[k].value, r[k].found,
			                  r[k].t_inv, r[k].t_resp) >= 0);
		ops += len / sizeof(*r);
		free(r);
	}
	int rc = lc_check(h, rep, 60000);
	printf("lin: %" PRIu64 " operations, lincheck %d\n", ops, rc);
	lc_report_print(stdout, rep);
	lc_free(h);
	return rc;
}

static int ser_check(sc_report *rep)
{
	sc_history *h = sc_new();
	uint64_t committed = 0, total = 0;
	for (unsigned i = 0; i < NM; i++) {
		char path[400];
		size_t len;
		snprintf(path, sizeof(path), "%s/ser", G.dir[i]);
		struct srec *r = np_read_file(path, &len);
		assert_non_null(r);
		int t = -1;
		for (size_t k = 0; k < len / sizeof(*r); k++) {
			switch (r[k].type) {
			case 'B': t = sc_txn_begin(h, r[k].a); break;
			case 'R': sc_read(h, t, r[k].a, r[k].b); break;
			case 'W': sc_write(h, t, r[k].a, r[k].b); break;
			default:
				sc_txn_end(h, t, r[k].a,
				           (enum sc_outcome)r[k].b);
				committed += r[k].b == SC_COMMITTED;
				total++;
			}
		}
		free(r);
	}
	int rc = sc_check(h, rep);
	printf("ser: %" PRIu64 " transactions, %" PRIu64
	       " committed, sercheck %d\n",
	       total, committed, rc);
	sc_report_print(stdout, rep);
	sc_free(h);
	assert_true(committed > 50);
	return rc;
}

static void test_multi(void **state)
{
	(void)state;
	uint64_t t0 = np_now_ns(), x[NM];
	np_start(&G, "btm", child_entry, NULL);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&G, i, 'R', 60000);
	all('C', 1, NULL, 30000);
	all('O', 6, NULL, 30000);
	int ms = (int)(opt_secs * 1000) + 60000;
	if (opt_broken_scan) {
		all('T', 7, NULL, ms);
		sc_report sr;
		int rc = ser_check(&sr);
		printf("broken scans: sercheck reports %d\n", rc);
		assert_true(rc > 0);
	} else if (opt_broken) {
		all('B', 7, NULL, ms);
		lc_report rep;
		int rc = lin_check(&rep);
		printf("broken fence check: lincheck reports %d\n", rc);
		assert_true(rc > 0);
	} else {
		all('M', 7, x, 120000);
		uint64_t want = x[0] + x[1] + x[2], keys = 0;
		all('V', 1, &keys, 30000);
		printf("model: %" PRIu64 " keys, tree holds %" PRIu64 "\n",
		       want, keys);
		assert_int_equal(keys, want);
		all('L', 7, NULL, ms);
		lc_report lr;
		assert_int_equal(lin_check(&lr), 0);
		all('S', 7, NULL, ms);
		sc_report sr;
		assert_int_equal(ser_check(&sr), 0);
		all('V', 1, &keys, 30000);
	}
	np_quit_all(&G);
	printf("btree_multi: %.1f s\n", (double)(np_now_ns() - t0) / 1e9);
}

static int cleanup(void **state)
{
	(void)state;
	np_cleanup(&G);
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--broken-fence")) {
			opt_broken = true;
		} else if (!strcmp(argv[i], "--broken-scan")) {
			opt_broken_scan = true;
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			opt_secs = strtod(argv[++i], NULL);
		} else {
			fprintf(stderr, "%s: bad option %s\n", argv[0],
			        argv[i]);
			return 2;
		}
	}
#ifndef FARM_FAULT_INJECTION
	if (opt_broken || opt_broken_scan) {
		printf("SKIPPED: --broken-* needs a test build\n");
		return FARM_TEST_SKIP;
	}
#endif
	const struct CMUnitTest t[] = {
	        cmocka_unit_test_teardown(test_multi, cleanup),
	};
	return cmocka_run_group_tests_name("btree_multi", t, NULL, NULL);
}
