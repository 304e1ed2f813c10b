/*
 * Transactions across machine processes. Each machine is a forked
 * process running a farm_node (static membership, 1 loop that the
 * process's main thread drives with the *_sync wrappers); the parent
 * coordinates them through pipes and checks what they report.
 *
 *   bank        3 machines, accounts created by each machine on itself;
 *               concurrent transfers (single-machine and distributed,
 *               retried, never overdrawing), lock-free balance reads and
 *               read-only subset sums from every machine. At the end one
 *               read-only transaction sums every account: the total is the
 *               initial total, no balance is negative, at least --transfers
 *               transfers committed, and the recorded history of every
 *               transaction (versions from txn_testing.h) is strictly
 *               serializable (sercheck: 0 anomalies).
 *               --broken: commits skip VALIDATE (txn_testing.h) on few,
 *               hot accounts: the checker must report anomalies.
 *   torn        2 machines rewrite 500-byte objects (9 lines, every byte
 *               the same counter) in transactions while the third reads
 *               them lock-free and in transactions: 0 torn objects.
 *   zombie      one machine frees and replaces objects that two others
 *               reach through fat pointers (fresh and stale): each read
 *               returns the object the pointer names or FARM_EFREED, each
 *               commit commits or aborts, nothing else.
 *   durability  a coordinator dies (SIGKILL) right after its COMMIT-BACKUP
 *               records are acknowledged: both surviving machines' logs
 *               hold that transaction's COMMIT-BACKUP record.
 * Options: --transfers N, --accounts N (per machine), --bank-seconds S
 * (deadline), --torn-seconds S, --torn-reads N, --broken, --broken_room,
 * --broken_pace, --dead_pace, --broken_dead_pace, --only NAME,
 * --epoch-every N (bank iterations per machine between epoch ends).
 */
#include "txproc.h"

#include <errno.h>

#include "msg/msg_testing.h"

#define NM      NP_NM
#define RSIZE   "16M"
#define JOIN_MS 30000

/* ---- options ------------------------------------------------------------- */

/* The issue asks for 100,000 committed transfers; the sanitizer build,
 * several times slower, runs a fifth of them. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
static uint64_t opt_transfers = 20000;
#else
static uint64_t opt_transfers = 100000;
#endif
static unsigned opt_accounts = 100;
/* A bound on the bank run, not its length (100,000 transfers take about
 * 50 s on a quiet 2-core host; at load 18 they run at about 950/s, so
 * 100 s would stop short of the count). */
static double opt_bank_secs = 200;
static double opt_torn_secs = 8;
static uint64_t opt_torn_reads = 0; /* 0: as many as fit in torn_secs */
static bool opt_broken;
static const char *opt_only;
static uint64_t opt_epoch_every = 2000; /* bank iterations per epoch end */

/* ---- the cluster (parent side) ------------------------------------------- */

static struct np_cluster G;

typedef int (*role_fn)(struct tx_child *c);

static int child_main(struct tx_child *c, role_fn role)
{
	struct farm_config cfg;
	int st = np_config(&c->np, RSIZE, &cfg);
	return st ? st : tx_child_run(c, &cfg, JOIN_MS, role);
}

/* Machine i's body: child_main with the role np_start was given. */
static int child_entry(struct np_child *np, void *arg)
{
	struct tx_child c = {.np = *np};
	return child_main(&c, *(role_fn *)arg);
}

static void cl_start(struct np_cluster *cl, role_fn role)
{
	np_start(cl, "txm", child_entry, &role);
}

/* Teardown, also after a failed assertion: no process or file stays. */
static int cl_cleanup(void **state)
{
	(void)state;
	np_cleanup(&G);
	return 0;
}

/* ---- bank ---------------------------------------------------------------- */

struct bank_stats {
	struct bank_counts k;
	uint64_t epochs, epochs_failed; /* distributed epochs run meanwhile */
	uint64_t ns;
	int64_t total, min_balance; /* the final sum (machine 0) */
	uint64_t sum_objs;
	int sum_status;
};

static int bank_role(struct tx_child *c)
{
	unsigned nmine = opt_accounts;
	farm_fatptr *mine = calloc(nmine, sizeof(*mine));
	farm_fatptr *acc = mine ? share_objs(c, "acct", nmine, 64, fill_account,
	                                     NULL, mine)
	                        : NULL;
	if (!acc)
		return 20;
	unsigned nacc = NM * nmine;
	if (opt_broken)
		farm_txn_testing_skip_validation(true);
	struct bank_stats s = {0};
	uint64_t target = (opt_transfers + NM - 1) / NM;
	uint64_t t0 = np_now_ns();
	uint64_t dl = t0 + (uint64_t)(opt_bank_secs * 1e9);
	uint64_t iter = 0;
	while (s.k.transfers < target && np_now_ns() < dl) {
		/* Now and then end an epoch on every machine: it must finish
		 * while everyone's transfers and reads go on. */
		if (++iter % opt_epoch_every == 0) {
			int rc = farm_txm_epoch_sync(c->txm, c->np.loop);
			if (rc) {
				s.epochs_failed++;
				fprintf(stderr, "m%u: epoch: %s\n", c->np.me,
				        farm_strerror(rc));
			} else {
				s.epochs++;
			}
		}
		bank_step(c, &s.k, mine, nmine, acc, nacc, 10000000000ull);
	}
	s.ns = np_now_ns() - t0;
	if (np_say(&c->np, 'D', NULL, 0))
		return 23;
	int cmd = np_wait_cmd(&c->np);
	if (cmd == 'S') { /* everyone is done: sum every account */
		s.sum_status = -1;
		for (unsigned tries = 0; tries < 100; tries++) {
			s.sum_status = ro_sum(c, &s.k, acc, nacc, nacc,
			                      &s.total, &s.min_balance);
			if (!farm_tx_retryable(s.sum_status))
				break;
		}
		s.sum_objs = nacc;
		if (np_say(&c->np, 's', NULL, 0))
			return 25;
		cmd = np_wait_cmd(&c->np);
	}
	if (cmd != 'Q' || tx_hist_save(c) || np_say(&c->np, 'F', &s, sizeof(s)))
		return 24;
	free(acc);
	free(mine);
	return 0;
}

static void test_bank(void **state)
{
	(void)state;
	cl_start(&G, bank_role);
	p_setup(&G);
	uint64_t t0 = np_now_ns();
	for (unsigned i = 0; i < NM; i++)
		np_expect(&G, i, 'D', (int)(opt_bank_secs * 1000) + 60000);
	double run_s = (double)(np_now_ns() - t0) / 1e9;
	/* Machine 0 sums every account while the others serve it. */
	np_send(&G, 0, 'S');
	np_expect(&G, 0, 's', 60000);
	struct bank_stats s[NM], tot = {0};
	for (unsigned i = 0; i < NM; i++) {
		np_send(&G, i, 'Q');
		np_expect(&G, i, 'F', 60000);
		np_recv(&G, i, &s[i], sizeof(s[i]), 60000);
		bank_counts_add(&tot.k, &s[i].k);
		tot.epochs += s[i].epochs;
		tot.epochs_failed += s[i].epochs_failed;
	}
	int st[NM];
	np_finish(&G, st);
	for (unsigned i = 0; i < NM; i++)
		assert_int_equal(st[i], 0);
	int64_t expect_total = (int64_t)NM * opt_accounts * INIT_BALANCE;
	printf("bank: %u accounts, %" PRIu64 " transfers committed (%" PRIu64
	       " single-machine) in %.2f s = %.0f/s; %" PRIu64
	       " declined, %" PRIu64 " attempts aborted of %" PRIu64
	       " (%" PRIu64 " timed out); %" PRIu64 " lock-free reads; %" PRIu64
	       " read-only sums (%" PRIu64 " aborted)\n",
	       NM * opt_accounts, tot.k.transfers, tot.k.single, run_s,
	       (double)tot.k.transfers / run_s, tot.k.declined, tot.k.aborts,
	       tot.k.attempts, tot.k.timeouts, tot.k.lf_reads, tot.k.ro_txns,
	       tot.k.ro_aborts);
	printf("bank: %" PRIu64 " distributed epochs ended during the run, "
	       "%" PRIu64 " failed\n",
	       tot.epochs, tot.epochs_failed);
	printf("bank: final sum over %" PRIu64 " accounts: %s, total %" PRId64
	       " (expected %" PRId64 "), lowest balance %" PRId64 "\n",
	       s[0].sum_objs, farm_strerror(s[0].sum_status), s[0].total,
	       expect_total, s[0].min_balance);
	sc_report rep;
	int anomalies = tx_check_history(&G, 0, &rep, NULL, NULL, NULL);
	sc_report_print(stdout, &rep);
	tu_rmtree(G.root);
	G.root[0] = 0;
	if (opt_broken) {
		/* Without validation, read-only sums read skewed states. */
		assert_true(anomalies > 0);
		return;
	}
	assert_int_equal(anomalies, 0);
	assert_int_equal(s[0].sum_status, 0);
	assert_int_equal(s[0].sum_objs, NM * opt_accounts);
	assert_int_equal(s[0].total, expect_total);
	assert_true(s[0].min_balance >= 0);
	assert_int_equal(tot.k.negative, 0);
	assert_int_equal(tot.k.failed + tot.k.peerdead + tot.k.ro_failed, 0);
	assert_true(tot.k.timeouts <= 1 + tot.k.transfers / 100);
	assert_int_equal(tot.k.lf_bad, 0);
	assert_true(tot.k.transfers >= opt_transfers);
	assert_true(tot.k.single > 0);
	assert_true(tot.epochs > 0);
	assert_int_equal(tot.epochs_failed, 0);
}

/* ---- torn reads ---------------------------------------------------------- */

#define TORN_SIZE 500 /* 9 lines */
#define TORN_PER  4   /* objects per machine */

struct torn_stats {
	uint64_t lf_reads, tx_reads, torn, busy, other, writes, aborts,
	        timeouts;
	uint64_t ro_commits, ro_aborts;
	uint64_t ns;
};

static void fill_zero(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	(void)p;
	(void)arg;
	memset(d, 0, size);
}

static bool all_same(const uint8_t *d, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		if (d[i] != d[0])
			return false;
	return true;
}

/* A writer's step: object @a read, checked whole and rewritten with its
 * next byte. 0, or an exit status. */
static int torn_rewrite(struct tx_child *c, farm_gaddr a, struct torn_stats *s)
{
	farm_tx *tx;
	if (farm_tx_begin(c->txm, c->np.loop, &tx))
		return 33;
	const uint8_t *d;
	int rc = farm_tx_read_sync(tx, a, TORN_SIZE, (const void **)&d);
	if (!rc) {
		s->tx_reads++;
		if (!all_same(d, TORN_SIZE))
			s->torn++;
		uint8_t *w;
		rc = farm_tx_write(tx, a, (void **)&w);
		if (!rc) {
			memset(w, (uint8_t)(d[0] + 1), TORN_SIZE);
			rc = farm_tx_commit_sync(tx);
		}
	}
	farm_tx_free(tx);
	if (rc == 0)
		s->writes++;
	else if (farm_tx_retryable(rc))
		s->aborts++;
	else if (rc == -ETIMEDOUT) /* a primary did not answer within the
	                              1 s bound */
		s->timeouts++;
	else if (s->other++ < 5)
		fprintf(stderr, "m%u: rewrite: %s\n", c->np.me,
		        farm_strerror(rc));
	return 0;
}

/* The reader's lock-free read of @a, checked whole. */
static void torn_lf_read(struct tx_child *c, farm_gaddr a, uint8_t *buf,
                         struct torn_stats *s)
{
	int rc = farm_lf_read_sync(c->txm, c->np.loop, a, TORN_SIZE, UINT64_MAX,
	                           buf);
	if (rc == -EBUSY) {
		s->busy++;
	} else if (rc) {
		if (s->other++ < 5)
			fprintf(stderr, "m%u: read: %s\n", c->np.me,
			        farm_strerror(rc));
	} else {
		s->lf_reads++;
		if (!all_same(buf, TORN_SIZE))
			s->torn++;
	}
}

/* The reader's read-only transaction of two of the @n objects @o, each
 * checked whole. 0, or an exit status. */
static int torn_tx_read(struct tx_child *c, const farm_fatptr *o, unsigned n,
                        struct torn_stats *s)
{
	farm_tx *tx;
	if (farm_tx_begin(c->txm, c->np.loop, &tx))
		return 34;
	int rc = 0;
	for (int k = 0; k < 2 && !rc; k++) {
		const uint8_t *d;
		rc = farm_tx_read_sync(tx, o[tx_rnd(c) % n].addr, TORN_SIZE,
		                       (const void **)&d);
		if (!rc) {
			s->tx_reads++;
			if (!all_same(d, TORN_SIZE))
				s->torn++;
		}
	}
	if (!rc)
		rc = farm_tx_commit_sync(tx);
	farm_tx_free(tx);
	if (rc == 0)
		s->ro_commits++;
	else if (farm_tx_retryable(rc))
		s->ro_aborts++;
	else if (s->other++ < 5)
		fprintf(stderr, "m%u: read-only: %s\n", c->np.me,
		        farm_strerror(rc));
	return 0;
}

/* Whether the reader is done: its reads counted out, or its time. */
static bool torn_reader_done(const struct torn_stats *s, unsigned it,
                             uint64_t dl)
{
	if (opt_torn_reads)
		return s->lf_reads + s->tx_reads >= opt_torn_reads;
	return (it & 63) == 0 && np_now_ns() >= dl;
}

static int torn_role(struct tx_child *c)
{
	farm_fatptr mine[TORN_PER];
	farm_fatptr *o = share_objs(c, "torn", TORN_PER, TORN_SIZE, fill_zero,
	                            NULL, mine);
	if (!o)
		return 30;
	unsigned n = NM * TORN_PER;
	struct torn_stats s = {0};
	uint64_t t0 = np_now_ns();
	int rc = 0;
	if (c->np.me < 2) { /* writers, until told to stop */
		for (unsigned it = 0; !rc; it++) {
			if ((it & 15) == 0 && np_poll_cmd(&c->np))
				break;
			rc = torn_rewrite(c, o[tx_rnd(c) % n].addr, &s);
		}
	} else { /* the reader */
		uint64_t dl = t0 + (uint64_t)(opt_torn_secs * 1e9);
		uint8_t buf[TORN_SIZE];
		for (unsigned it = 0; !rc && !torn_reader_done(&s, it, dl);
		     it++) {
			if (it % 8)
				torn_lf_read(c, o[tx_rnd(c) % n].addr, buf, &s);
			else
				rc = torn_tx_read(c, o, n, &s);
		}
	}
	s.ns = np_now_ns() - t0;
	if (rc || np_say(&c->np, 'D', &s, sizeof(s))) {
		free(o);
		return rc ? rc : 35;
	}
	free(o);
	return np_wait_cmd(&c->np) == 'Q' ? 0 : 36;
}

static void test_torn(void **state)
{
	(void)state;
	cl_start(&G, torn_role);
	p_setup(&G);
	struct torn_stats s[NM];
	/* The reader finishes first; then the writers are stopped. */
	np_expect(&G, 2, 'D', (int)(opt_torn_secs * 1000) + 600000);
	np_recv(&G, 2, &s[2], sizeof(s[2]), 1000);
	for (unsigned i = 0; i < 2; i++) {
		np_send(&G, i, 'T');
		np_expect(&G, i, 'D', 60000);
		np_recv(&G, i, &s[i], sizeof(s[i]), 1000);
	}
	for (unsigned i = 0; i < NM; i++)
		np_send(&G, i, 'Q');
	int st[NM];
	np_finish(&G, st);
	uint64_t reads = s[2].lf_reads + s[2].tx_reads;
	printf("torn: reader: %" PRIu64 " lock-free + %" PRIu64
	       " transactional reads of %u-byte objects in %.2f s (%.0f/s), "
	       "%" PRIu64 " torn, %" PRIu64 " busy, %" PRIu64
	       " other errors; %" PRIu64 " read-only commits, %" PRIu64
	       " aborts\n",
	       s[2].lf_reads, s[2].tx_reads, TORN_SIZE, (double)s[2].ns / 1e9,
	       (double)reads / ((double)s[2].ns / 1e9), s[2].torn, s[2].busy,
	       s[2].other, s[2].ro_commits, s[2].ro_aborts);
	for (unsigned i = 0; i < 2; i++)
		printf("torn: writer %u: %" PRIu64
		       " rewrites committed, %" PRIu64 " aborted, %" PRIu64
		       " timed out, %" PRIu64 " torn in its reads, %" PRIu64
		       " other errors\n",
		       i, s[i].writes, s[i].aborts, s[i].timeouts, s[i].torn,
		       s[i].other);
	for (unsigned i = 0; i < NM; i++) {
		assert_int_equal(st[i], 0);
		assert_int_equal(s[i].torn, 0);
		assert_int_equal(s[i].other, 0);
	}
	assert_true(s[0].writes > 0 && s[1].writes > 0);
	/* Timeouts are an outcome under load (2 cores, sanitizers), rare. */
	assert_true(s[0].timeouts + s[1].timeouts <=
	            1 + (s[0].writes + s[1].writes) / 100);
	assert_true(reads > 0);
	if (opt_torn_reads)
		assert_true(reads >= opt_torn_reads);
}

/* ---- zombie reads -------------------------------------------------------- */

#define Z_ROOTS 8
#define Z_SIZE  200
#define Z_STALE 64

/* A target names itself: its fat pointer and generation, then a pattern. */
struct ztarget {
	uint64_t addr, incarnation, gen;
};

struct zombie_stats {
	uint64_t replaced, repl_aborts, reads_ok, reads_freed, stale_ok,
	        stale_freed, tx_commits, tx_aborts, tx_freed, busy, bad, other;
	uint64_t ns;
};

static void fill_target(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	uint64_t gen = arg ? *(uint64_t *)arg : 0;
	struct ztarget t = {
	        .addr = p.addr, .incarnation = p.incarnation, .gen = gen};
	memset(d, (uint8_t)gen, size);
	memcpy(d, &t, sizeof(t));
}

static void fill_root(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	(void)p;
	memset(d, 0, size);
	memcpy(d, arg, sizeof(farm_fatptr));
}

/* Is @d the object @p names (and whole)? */
static bool target_ok_(const uint8_t *d, farm_fatptr p, int line)
{
	struct ztarget t;
	memcpy(&t, d, sizeof(t));
	bool ok = t.addr == p.addr && t.incarnation == p.incarnation;
	unsigned i = sizeof(t);
	for (; ok && i < Z_SIZE; i++)
		if (d[i] != (uint8_t)t.gen)
			ok = false;
	if (!ok) {
		static unsigned shown;
		if (shown++ < 5)
			fprintf(stderr,
			        "pid %d line %d: wrong object through fat "
			        "pointer "
			        "(%#" PRIx64 ", incarnation %" PRIu64
			        "): it names "
			        "(%#" PRIx64 ", %" PRIu64
			        ") generation %" PRIu64 ", byte %u is %u\n",
			        (int)getpid(), line, p.addr, p.incarnation,
			        t.addr, t.incarnation, t.gen, i - 1, d[i - 1]);
	}
	return ok;
}
#define target_ok(d, p) target_ok_((const uint8_t *)(d), (p), __LINE__)

struct rsync {
	volatile int done;
	int status;
	const void *data;
};

static void rsync_cb(farm_tx *tx, void *ctx, int status, const void *data,
                     uint32_t size)
{
	(void)tx;
	(void)size;
	struct rsync *r = ctx;
	r->status = status;
	r->data = data;
	r->done = 1;
}

static int read_fat_sync(struct tx_child *c, farm_tx *tx, farm_fatptr p,
                         const void **d)
{
	struct rsync r = {0};
	int rc = farm_tx_read_fat(tx, p, rsync_cb, &r);
	if (rc)
		return rc;
	rc = farm_loop_wait(c->np.loop, &r.done, 0);
	if (rc)
		return rc;
	*d = r.data;
	return r.status;
}

#define Z_SECS 3

/* Machine 0: one transaction replacing root @r's target: the old one
 * read, checked and freed, a new one allocated and linked. 0, or an exit
 * status. */
static int zombie_replace(struct tx_child *c, farm_gaddr r, uint64_t *gen,
                          struct zombie_stats *s)
{
	farm_tx *tx;
	if (farm_tx_begin(c->txm, c->np.loop, &tx))
		return 44;
	const void *rd, *td;
	farm_fatptr old, nw;
	void *nd, *w;
	int rc = farm_tx_read_sync(tx, r, 64, &rd);
	if (!rc) {
		memcpy(&old, rd, sizeof(old));
		rc = farm_tx_read_sync(tx, old.addr, Z_SIZE, &td);
	}
	if (!rc && !target_ok(td, old))
		s->bad++;
	if (!rc)
		rc = farm_tx_free_obj(tx, old.addr);
	if (!rc)
		rc = farm_tx_alloc_sync(tx, Z_SIZE, FARM_GADDR_NULL, &nw, &nd);
	if (!rc) {
		(*gen)++;
		fill_target(nd, Z_SIZE, nw, gen);
		rc = farm_tx_write(tx, r, &w);
	}
	if (!rc) {
		memcpy(w, &nw, sizeof(nw));
		rc = farm_tx_commit_sync(tx);
	}
	farm_tx_free(tx);
	if (rc == 0)
		s->replaced++;
	else if (farm_tx_retryable(rc))
		s->repl_aborts++;
	else if (s->other++ < 5)
		fprintf(stderr, "m0: replace: %s\n", farm_strerror(rc));
	return 0;
}

/* Machine 0: the roots and their targets made and published, then
 * targets replaced until the parent says stop. 0 or an exit status. */
static int zombie_freer(struct tx_child *c, struct zombie_stats *s)
{
	farm_fatptr tg[Z_ROOTS], roots[Z_ROOTS];
	uint64_t gen = 1;
	if (create_objs(c, "ztarget", Z_ROOTS, Z_SIZE, fill_target, &gen, tg))
		return 40;
	for (unsigned i = 0; i < Z_ROOTS; i++)
		if (create_objs(c, "zroot", 1, 64, fill_root, &tg[i],
		                &roots[i]))
			return 41;
	/* One file of every root (create_objs wrote the last one). */
	char path[512];
	snprintf(path, sizeof(path), "%s/zroot-0", c->np.cl->root);
	if (np_write_file(path, roots, sizeof(roots)))
		return 42;
	if (np_say(&c->np, 'C', NULL, 0) || np_wait_cmd(&c->np) != 'G')
		return 43;
	uint64_t t0 = np_now_ns();
	int rc = 0;
	for (unsigned it = 0; !rc; it++) {
		if ((it & 7) == 0 && np_poll_cmd(&c->np))
			break;
		rc = zombie_replace(c, roots[tx_rnd(c) % Z_ROOTS].addr, &gen,
		                    s);
	}
	s->ns = np_now_ns() - t0;
	return rc;
}

/* A follower's pointers seen earlier (targets since freed, most). */
struct zstale {
	farm_fatptr p[Z_STALE];
	unsigned n;
};

/* A lock-free read of an old pointer: its target intact, or freed. */
static void zombie_stale_read(struct tx_child *c, struct zstale *st,
                              uint8_t *buf, struct zombie_stats *s)
{
	farm_fatptr p = st->p[tx_rnd(c) % st->n];
	int rc = farm_lf_read_sync(c->txm, c->np.loop, p.addr, p.size,
	                           p.incarnation, buf);
	if (rc == 0)
		target_ok(buf, p) ? s->stale_ok++ : s->bad++;
	else if (rc == FARM_EFREED)
		s->stale_freed++;
	else if (rc == -EBUSY)
		s->busy++;
	else if (s->other++ < 5)
		fprintf(stderr, "m%u: stale read: %s\n", c->np.me,
		        farm_strerror(rc));
}

/* Lock-free: root @r, then its target (the pointer kept as old). */
static void zombie_lf_read(struct tx_child *c, farm_gaddr r, struct zstale *st,
                           uint8_t *buf, struct zombie_stats *s)
{
	farm_fatptr p;
	int rc = farm_lf_read_sync(c->txm, c->np.loop, r, 64, UINT64_MAX, buf);
	if (!rc) {
		memcpy(&p, buf, sizeof(p));
		st->p[st->n < Z_STALE ? st->n++ : tx_rnd(c) % Z_STALE] = p;
		rc = farm_lf_read_sync(c->txm, c->np.loop, p.addr, p.size,
		                       p.incarnation, buf);
		if (rc == 0)
			target_ok(buf, p) ? s->reads_ok++ : s->bad++;
	}
	if (rc == FARM_EFREED)
		s->reads_freed++;
	else if (rc == -EBUSY)
		s->busy++;
	else if (rc && s->other++ < 5)
		fprintf(stderr, "m%u: read: %s\n", c->np.me, farm_strerror(rc));
}

/* A transaction follows pointer @p (none: root @r's, read in it) to its
 * target and commits. 0, or an exit status. */
static int zombie_tx_follow(struct tx_child *c, farm_gaddr r, farm_fatptr p,
                            struct zombie_stats *s)
{
	farm_tx *tx;
	if (farm_tx_begin(c->txm, c->np.loop, &tx))
		return 47;
	const void *rd, *td;
	int rc = 0;
	if (!p.addr) {
		rc = farm_tx_read_sync(tx, r, 64, &rd);
		if (!rc)
			memcpy(&p, rd, sizeof(p));
	}
	if (!rc) {
		rc = read_fat_sync(c, tx, p, &td);
		if (!rc && !target_ok(td, p))
			s->bad++;
	}
	if (rc == FARM_EFREED) {
		s->tx_freed++;
	} else if (rc == 0) {
		rc = farm_tx_commit_sync(tx);
		if (rc == 0)
			s->tx_commits++;
		else if (farm_tx_retryable(rc) || rc == FARM_EFREED)
			s->tx_aborts++;
		else if (s->other++ < 5)
			fprintf(stderr, "m%u: commit: %s\n", c->np.me,
			        farm_strerror(rc));
	} else if (rc == -EBUSY) {
		s->busy++;
	} else if (s->other++ < 5) {
		fprintf(stderr, "m%u: tx read: %s\n", c->np.me,
		        farm_strerror(rc));
	}
	farm_tx_free(tx);
	return 0;
}

/* The other machines: for Z_SECS, reads of fresh and old pointers, lock
 * free and in transactions. 0 or an exit status. */
static int zombie_follower(struct tx_child *c, struct zombie_stats *s)
{
	if (np_say(&c->np, 'C', NULL, 0) || np_wait_cmd(&c->np) != 'G')
		return 45;
	unsigned n;
	farm_fatptr *roots = load_objs(c, "zroot", &n);
	if (!roots || n != Z_ROOTS) {
		free(roots);
		return 46;
	}
	struct zstale st = {.n = 0};
	uint8_t buf[Z_SIZE];
	uint64_t t0 = np_now_ns(), dl = t0 + Z_SECS * 1000000000ull;
	int rc = 0;
	for (unsigned it = 0; !rc; it++) {
		if ((it & 15) == 0 && np_now_ns() >= dl)
			break;
		farm_gaddr r = roots[tx_rnd(c) % Z_ROOTS].addr;
		unsigned dice = (unsigned)(tx_rnd(c) % 4);
		/* A transaction follows a fresh pointer (dice 2, 3) or an
		 * old one (dice 0, odd iterations). */
		farm_fatptr oldp = {0};
		if (dice == 0 && st.n && (it & 1)) {
			oldp = st.p[tx_rnd(c) % st.n];
			dice = 2;
		}
		if (dice == 0 && st.n)
			zombie_stale_read(c, &st, buf, s);
		else if (dice == 1)
			zombie_lf_read(c, r, &st, buf, s);
		else
			rc = zombie_tx_follow(c, r, oldp, s);
	}
	s->ns = np_now_ns() - t0;
	free(roots);
	return rc;
}

static int zombie_role(struct tx_child *c)
{
	struct zombie_stats s = {0};
	int rc = c->np.me == 0 ? zombie_freer(c, &s) : zombie_follower(c, &s);
	if (rc)
		return rc;
	if (np_say(&c->np, 'D', &s, sizeof(s)))
		return 48;
	return np_wait_cmd(&c->np) == 'Q' ? 0 : 49;
}

static void test_zombie(void **state)
{
	(void)state;
	cl_start(&G, zombie_role);
	p_setup(&G);
	/* The followers run for Z_SECS, then the freer is stopped. */
	struct zombie_stats s[NM], t = {0};
	for (unsigned i = 1; i < NM; i++) {
		np_expect(&G, i, 'D', Z_SECS * 1000 + 60000);
		np_recv(&G, i, &s[i], sizeof(s[i]), 1000);
	}
	np_send(&G, 0, 'T');
	np_expect(&G, 0, 'D', 60000);
	np_recv(&G, 0, &s[0], sizeof(s[0]), 1000);
	for (unsigned i = 0; i < NM; i++)
		np_send(&G, i, 'Q');
	int st[NM];
	np_finish(&G, st);
	for (unsigned i = 1; i < NM; i++) {
		t.reads_ok += s[i].reads_ok;
		t.reads_freed += s[i].reads_freed;
		t.stale_ok += s[i].stale_ok;
		t.stale_freed += s[i].stale_freed;
		t.tx_commits += s[i].tx_commits;
		t.tx_aborts += s[i].tx_aborts;
		t.tx_freed += s[i].tx_freed;
		t.busy += s[i].busy;
	}
	printf("zombie: %" PRIu64 " objects freed and replaced (%" PRIu64
	       " aborted); followers: %" PRIu64 " reads ok, %" PRIu64
	       " freed; stale pointers: %" PRIu64 " ok, %" PRIu64
	       " freed; transactions: %" PRIu64 " committed, %" PRIu64
	       " aborted, %" PRIu64 " saw freed; %" PRIu64 " busy\n",
	       s[0].replaced, s[0].repl_aborts, t.reads_ok, t.reads_freed,
	       t.stale_ok, t.stale_freed, t.tx_commits, t.tx_aborts, t.tx_freed,
	       t.busy);
	for (unsigned i = 0; i < NM; i++) {
		if (st[i] || s[i].bad || s[i].other)
			printf("zombie: machine %u: exit %d, %" PRIu64
			       " wrong objects, %" PRIu64 " other errors\n",
			       i, st[i], s[i].bad, s[i].other);
		assert_int_equal(st[i], 0);
		assert_int_equal(s[i].bad, 0);
		assert_int_equal(s[i].other, 0);
	}
	assert_true(s[0].replaced > 0);
	assert_true(t.stale_freed > 0); /* stale pointers were exercised */
	assert_true(t.reads_ok + t.tx_commits > 0);
}

/* ---- durability ---------------------------------------------------------- */

struct recs_ctx {
	uint64_t txid;
	uint32_t found[8]; /* by record type, of that txid from machine 0 */
	uint32_t total;
};

static void rec_cb(void *ctx, uint32_t coord, int type, uint64_t txid)
{
	struct recs_ctx *r = ctx;
	r->total++;
	if (coord == 0 && txid == r->txid && type > 0 && type < 8)
		r->found[type]++;
}

static void disk_rec_cb(void *ctx, const struct farm_txlog_rec *rec)
{
	rec_cb(ctx, rec->coord, rec->type, rec->txid);
}

static void fill_one(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	(void)p;
	(void)arg;
	memset(d, 1, size);
}

static int durable_role(struct tx_child *c)
{
	farm_fatptr mine;
	if (c->np.me != 0 &&
	    create_objs(c, "dobj", 1, 64, fill_one, NULL, &mine))
		return 50;
	if (np_say(&c->np, 'C', NULL, 0) || np_wait_cmd(&c->np) != 'G')
		return 51;
	if (c->np.me == 0) {
		unsigned n;
		farm_fatptr *o = load_objs(c, "dobj", &n);
		if (!o || n != 2)
			return 52;
		for (int round = 0; round < 2; round++) {
			farm_tx *tx;
			if (farm_tx_begin(c->txm, c->np.loop, &tx))
				return 53;
			for (unsigned i = 0; i < 2; i++) {
				void *w;
				if (farm_tx_read_sync(tx, o[i].addr, 64,
				                      NULL) ||
				    farm_tx_write(tx, o[i].addr, &w))
					return 54;
				memset(w, 2 + round, 64);
			}
			if (round == 1) { /* the one that dies */
				uint64_t id = farm_tx_testing_id(tx);
				if (np_say(&c->np, 'X', &id, sizeof(id)))
					return 55;
				farm_txn_testing_crash_after_backup(true);
			}
			int rc = farm_tx_commit_sync(tx);
			farm_tx_free(tx);
			if (rc)
				return 56;
		}
		return 57; /* still alive: the knob did nothing */
	}
	int cmd = np_wait_cmd(&c->np);
	if (cmd != 'L')
		return 58;
	struct recs_ctx r = {0};
	if (tu_recv(c->np.in, &r.txid, sizeof(r.txid)))
		return 59;
	farm_txm_testing_records(c->txm, rec_cb, &r);
	if (np_say(&c->np, 'L', &r, sizeof(r)))
		return 60;
	return np_wait_cmd(&c->np) == 'Q' ? 0 : 61;
}

static void test_durability(void **state)
{
	(void)state;
	cl_start(&G, durable_role);
	p_setup(&G);
	uint64_t txid;
	np_expect(&G, 0, 'X', 60000);
	np_recv(&G, 0, &txid, sizeof(txid), 1000);
	/* The coordinator dies by its own SIGKILL once its COMMIT-BACKUP
	 * WRITEs completed. */
	int st0 = tu_reap(G.pid[0]);
	G.pid[0] = 0;
	assert_int_equal(st0, 128 + SIGKILL);
	struct recs_ctx r[NM];
	for (unsigned i = 1; i < NM; i++) {
		np_send(&G, i, 'L');
		assert_int_equal(tu_send(G.to[i], &txid, sizeof(txid)), 0);
		np_expect(&G, i, 'L', 60000);
		np_recv(&G, i, &r[i], sizeof(r[i]), 1000);
	}
	/* Then the survivors die too (kill -9: a power loss for DRAM-backed
	 * files), and their logs are read back from their data directories
	 * as a restarting machine would, with no process alive. */
	for (unsigned i = 1; i < NM; i++) {
		kill(G.pid[i], SIGKILL);
		assert_int_equal(tu_reap(G.pid[i]), 128 + SIGKILL);
		G.pid[i] = 0;
	}
	int st[NM];
	np_finish(&G, st);
	struct recs_ctx disk[NM];
	for (unsigned i = 1; i < NM; i++) {
		disk[i] = (struct recs_ctx){.txid = txid};
		struct farm_txlog_info inf;
		int n = farm_txlog_scan_dir(G.dir[i], disk_rec_cb, &disk[i],
		                            &inf);
		printf("durability: after kill -9, machine %u's log file "
		       "(machine %u, %u x %u logs of %" PRIu64
		       " bytes) holds %d records: %u LOCK, %u COMMIT-BACKUP of "
		       "the dead transaction\n",
		       i, inf.machine, inf.M, inf.T, inf.R, n,
		       disk[i].found[FARM_TXN_TESTING_LOCK],
		       disk[i].found[FARM_TXN_TESTING_COMMIT_BACKUP]);
		assert_true(n > 0);
		assert_int_equal(inf.machine, i);
		assert_int_equal(disk[i].found[FARM_TXN_TESTING_COMMIT_BACKUP],
		                 1);
		assert_int_equal(disk[i].found[FARM_TXN_TESTING_LOCK], 1);
		assert_int_equal(disk[i].found[FARM_TXN_TESTING_COMMIT_PRIMARY],
		                 0);
	}
	for (unsigned i = 1; i < NM; i++) {
		printf("durability: machine %u holds %u records; of "
		       "transaction "
		       "%#" PRIx64 " (dead coordinator 0): %u LOCK, %u "
		       "COMMIT-BACKUP, %u COMMIT-PRIMARY, %u ABORT\n",
		       i, r[i].total, txid, r[i].found[FARM_TXN_TESTING_LOCK],
		       r[i].found[FARM_TXN_TESTING_COMMIT_BACKUP],
		       r[i].found[FARM_TXN_TESTING_COMMIT_PRIMARY],
		       r[i].found[FARM_TXN_TESTING_ABORT]);
		/* Each survivor is a primary of one object (its LOCK) and a
		 * backup of the other's primary (COMMIT-BACKUP). */
		assert_int_equal(r[i].found[FARM_TXN_TESTING_COMMIT_BACKUP], 1);
		assert_int_equal(r[i].found[FARM_TXN_TESTING_LOCK], 1);
		assert_int_equal(r[i].found[FARM_TXN_TESTING_COMMIT_PRIMARY],
		                 0);
		assert_int_equal(r[i].found[FARM_TXN_TESTING_ABORT], 0);
	}
}

/* ---- room: a parked replica frees log room when asked ------------------- */

/* Records a replica need not answer (COMMIT-BACKUP, TRUNCATE) ring no
 * doorbell, so a coordinator that fills its log on parked replicas must
 * wake them when it runs short of room (log.c, farm_txn_refresh_freed).
 * Machine 0 rewrites one object of its own (backups 1 and 2) until its
 * records have wrapped its logs there several times, while 1 and 2 sit
 * parked with their timed check raised to 20 s: every commit must commit.
 * --broken_room drops that doorbell: a commit short of room then waits
 * for the replicas' timed check, and gives up (-ENOSPC) after 1 s.
 * Re-READs of the freed word that find nothing freed are paced (log.c):
 * --broken_pace holds a deferred one when it is due, as a pacing that lost
 * it would: the commit short of room then never ends (its sync wait gives
 * up, FARM_EUNKNOWN), until the switch is let go. --dead_pace: the
 * doorbell dropped and every paced READ failing to send, as to a replica
 * that died while the commit waited: the commit must still end, -ENOSPC
 * once its wait for room is out (its next try runs in the configuration
 * without the dead machine); --broken_dead_pace keeps such a READ
 * deferred, as before: the commit then never ends (FARM_EUNKNOWN). */
#define ROOM_SIZE    2048u
#define ROOM_COMMITS 800u /* about 1.7 MiB of records: 6 laps of 256 KiB */

static bool opt_broken_room, opt_broken_pace, opt_dead_pace,
        opt_broken_dead_pace;
#define PACE_SYNC_NS 3000000000ull /* --broken_pace: a commit's sync wait */

struct room_result {
	uint32_t commits;
	int rc; /* the first failed commit's, 0 if none */
	uint64_t ns;
};

static int room_commits(struct tx_child *c, farm_fatptr o,
                        struct room_result *r)
{
	uint64_t t0 = np_now_ns();
	for (uint32_t i = 0; i < ROOM_COMMITS && !r->rc; i++) {
		farm_tx *tx;
		void *w;
		if (farm_tx_begin(c->txm, c->np.loop, &tx))
			return 70;
		int rc = farm_tx_read_sync(tx, o.addr, ROOM_SIZE, NULL);
		if (!rc)
			rc = farm_tx_write(tx, o.addr, &w);
		if (!rc) {
			memset(w, (int)(i & 0xff), ROOM_SIZE);
			rc = farm_tx_commit_sync(tx);
		}
		farm_tx_free(tx);
		if (rc)
			r->rc = rc;
		else
			r->commits++;
	}
	r->ns = np_now_ns() - t0;
	return 0;
}

static int room_role(struct tx_child *c)
{
	static const volatile int never = 0;
	farm_fatptr mine;
	if (c->np.me == 0 &&
	    create_objs(c, "room", 1, ROOM_SIZE, fill_one, NULL, &mine))
		return 71;
	if (np_say(&c->np, 'C', NULL, 0) || np_wait_cmd(&c->np) != 'G')
		return 72;
	if (c->np.me != 0) {
		/* Parked but for doorbells until machine 0 is done (or
		 * 5 s, which its commits never need with the doorbell). */
		if (farm_msg_testing_park_max(20000000000ull) < 0)
			return 73;
		(void)farm_loop_wait(c->np.loop, &never, 5000000000ull);
		return np_wait_cmd(&c->np) == 'Q' ? 0 : 74;
	}
	bool dead = opt_dead_pace || opt_broken_dead_pace;
	farm_txn_testing_no_room_bell(opt_broken_room || dead);
	farm_txn_testing_hold_paced(opt_broken_pace);
	farm_txn_testing_fail_paced(dead, opt_broken_dead_pace);
	if (opt_broken_pace || dead)
		farm_txm_set_sync_timeout(c->txm, PACE_SYNC_NS);
	struct room_result r = {0};
	int st = room_commits(c, mine, &r);
	if (st)
		return st;
	/* Let go: the held READ goes, and the commit that waited on it
	 * ends before the machine leaves. */
	farm_txn_testing_hold_paced(false);
	farm_txn_testing_fail_paced(false, false);
	uint64_t t0 = np_now_ns();
	while (farm_txm_commits_out(c->txm) && np_now_ns() - t0 < PACE_SYNC_NS)
		(void)farm_loop_poll(c->np.loop);
	if (np_say(&c->np, 'D', &r, sizeof(r)))
		return 75;
	return np_wait_cmd(&c->np) == 'Q' ? 0 : 76;
}

static void test_room(void **state)
{
	(void)state;
	cl_start(&G, room_role);
	p_setup(&G);
	struct room_result r;
	np_expect(&G, 0, 'D', 60000);
	np_recv(&G, 0, &r, sizeof(r), 1000);
	printf("room: %u of %u commits of %u bytes on parked replicas in "
	       "%.1f ms%s%s\n",
	       r.commits, ROOM_COMMITS, ROOM_SIZE, (double)r.ns / 1e6,
	       r.rc ? ", then " : "", r.rc ? farm_strerror(r.rc) : "");
	for (unsigned i = 0; i < NM; i++)
		np_send(&G, i, 'Q');
	int st[NM];
	np_finish(&G, st);
	for (unsigned i = 0; i < NM; i++)
		assert_int_equal(st[i], 0);
	if (opt_broken_pace || opt_broken_dead_pace) {
		/* The commit whose paced READ was held never ended. */
		assert_int_equal(r.rc, FARM_EUNKNOWN);
		return;
	}
	if (opt_broken_room || opt_dead_pace) {
		/* Without the doorbell the commit short of room waits out
		 * SPACE_WAIT_NS on replicas that sleep for seconds. */
		assert_int_equal(r.rc, -ENOSPC);
		return;
	}
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.commits, ROOM_COMMITS);
}

/* ---- main ---------------------------------------------------------------- */

/* A flag without a value: the --broken variants. */
static bool parse_flag(const char *a)
{
	if (!strcmp(a, "--broken"))
		opt_broken = true;
	else if (!strcmp(a, "--broken_room"))
		opt_broken_room = true;
	else if (!strcmp(a, "--broken_pace"))
		opt_broken_pace = true;
	else if (!strcmp(a, "--dead_pace"))
		opt_dead_pace = true;
	else if (!strcmp(a, "--broken_dead_pace"))
		opt_broken_dead_pace = true;
	else
		return false;
	return true;
}

/* An option @a with its value @v; false if it is none of them (or
 * --epoch-every 0). */
static bool parse_valued(const char *a, const char *v)
{
	if (!strcmp(a, "--transfers"))
		opt_transfers = strtoull(v, NULL, 0);
	else if (!strcmp(a, "--accounts"))
		opt_accounts = (unsigned)strtoul(v, NULL, 0);
	else if (!strcmp(a, "--bank-seconds"))
		opt_bank_secs = strtod(v, NULL);
	else if (!strcmp(a, "--torn-seconds"))
		opt_torn_secs = strtod(v, NULL);
	else if (!strcmp(a, "--torn-reads"))
		opt_torn_reads = strtoull(v, NULL, 0);
	else if (!strcmp(a, "--only"))
		opt_only = v;
	else if (!strcmp(a, "--epoch-every") && strtoull(v, NULL, 0))
		opt_epoch_every = strtoull(v, NULL, 0);
	else
		return false;
	return true;
}

/* 0, or 2 on a bad option (said on stderr). */
static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (parse_flag(a))
			continue;
		if (!v || !parse_valued(a, v)) {
			fprintf(stderr, "%s: bad option %s\n", argv[0], a);
			return 2;
		}
		i++;
	}
	return 0;
}

/* The options each mode implies; false when the run must be skipped
 * (--broken without fault injection). */
static bool settle_modes(void)
{
	/* --broken and the durability test need the testing switches of
	 * txn_testing.h, compiled only with fault injection. */
	if (!farm_fault_built()) {
		if (opt_broken || opt_broken_room || opt_broken_pace ||
		    opt_dead_pace || opt_broken_dead_pace) {
			printf("skipped: --broken needs fault injection "
			       "(FARM_FAULT_INJECTION=OFF)\n");
			return false;
		}
		printf("durability and room tests skipped: need fault "
		       "injection (FARM_FAULT_INJECTION=OFF)\n");
	}
	if (opt_broken) { /* few hot accounts, a short run */
		opt_only = "bank";
		opt_accounts = 4;
		opt_transfers = 2000;
	}
	if (opt_broken_room || opt_broken_pace || opt_dead_pace ||
	    opt_broken_dead_pace)
		opt_only = "room";
	if (opt_accounts < 2)
		opt_accounts = 2;
	return true;
}

int main(int argc, char **argv)
{
	int rc = parse_args(argc, argv);
	if (rc)
		return rc;
	if (!settle_modes())
		return FARM_TEST_SKIP;
	const struct CMUnitTest all[] = {
	        cmocka_unit_test_teardown(test_bank, cl_cleanup),
	        cmocka_unit_test_teardown(test_torn, cl_cleanup),
	        cmocka_unit_test_teardown(test_zombie, cl_cleanup),
	        cmocka_unit_test_teardown(test_durability, cl_cleanup),
	        cmocka_unit_test_teardown(test_room, cl_cleanup),
	};
	const char *names[] = {"bank", "torn", "zombie", "durability", "room"};
	struct CMUnitTest sel[5];
	size_t n = 0;
	for (size_t i = 0; i < 5; i++)
		if ((!opt_only || strstr(opt_only, names[i])) &&
		    (i < 3 || farm_fault_built()))
			sel[n++] = all[i];
	bool lossy = tu_lossy_begin();
	return tu_lossy_end(lossy, _cmocka_run_group_tests("txn_multi", sel, n,
	                                                   NULL, NULL));
}
