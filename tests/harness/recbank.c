#include "recbank.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

struct rb_params rb_p = {.pre_transfers = 300, .post_ms = 3000};

unsigned rb_seeded(unsigned lo, unsigned hi, unsigned dflt)
{
	static uint64_t x;
	static int state = -1; /* -1 unread, 0 no seed, 1 seeded */
	if (state < 0) {
		const char *s = getenv("FARM_FAULT_SEED");
		state = s && *s;
		x = state ? strtoull(s, NULL, 10) : 0;
	}
	if (!state || hi < lo)
		return dflt;
	x += 0x9e3779b97f4a7c15ull; /* splitmix64 */
	uint64_t z = x;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return lo + (unsigned)(z % ((uint64_t)hi - lo + 1));
}

char rb_zk_dir[256], rb_zk_connect[256], rb_zk_root[96];

const char *rb_zk_script = FARM_SOURCE_DIR "/scripts/zk-local";

struct tx_child *rb_self; /* this machine (child side) */

/* When each configuration was applied here (by id % 16; 0: not seen). */
_Atomic uint64_t rb_cfg_t[16];

_Atomic uint64_t rb_left_ns;

void rb_on_config(void *ctx, uint64_t id, unsigned members, bool member)
{
	(void)ctx;
	(void)members;
	uint64_t zero = 0, now = np_now_ns();
	atomic_store(&rb_cfg_t[id % 16], now);
	if (!member)
		atomic_compare_exchange_strong(&rb_left_ns, &zero, now);
}

bool rb_config_without(struct tx_child *c, uint64_t gone, struct run_report *r)
{
	struct farm_view *v = malloc(sizeof(*v));
	bool without = v && !farm_node_view(c->np.node, v);
	for (unsigned i = 0; without && i < v->n; i++)
		without = v->members[i].id >= 64 ||
		          !((gone >> v->members[i].id) & 1);
	if (without) {
		r->config_new = v->config_id;
		r->members_new = v->n;
	}
	free(v);
	return without;
}

void rb_crash(enum farm_fault_point fp, void *arg)
{
	(void)arg;
	uint32_t p = (uint32_t)fp;
	(void)np_say(&rb_self->np, 'X', &p, sizeof(p));
	raise(SIGKILL);
}

/* rb_run's progress between its passes. */
struct rb_loop {
	bool said, notify;
	uint64_t t_end, seen;
};

/* 'K': a machine was killed (struct rb_kill follows): the run waits for
 * the configuration without it. */
static int rb_told(struct tx_child *c, struct run_report *r, struct rb_loop *l)
{
	struct rb_kill km;
	if (tu_recv(c->np.in, &km, sizeof(km)) || km.victim >= 64)
		return -1;
	r->told = true;
	r->new_config = false;
	r->gone |= 1ull << km.victim;
	r->t_kill_ns = km.t_kill_ns;
	r->config_at_kill = farm_node_config_id(c->np.node);
	l->notify = km.notify != 0;
	l->seen = 0;
	l->t_end = km.t_kill_ns + RB_RECONF_MS * 1000000ull;
	return 0;
}

/* 'Z': end with a transfer between two of our own accounts that is
 * committed and in the history, then wait to be killed. Its
 * COMMIT-BACKUPs are the last records this machine writes, so no later
 * one truncates them: only recovery's drain applies them at the promoted
 * backups (test_rec_bank --broken). Returns only on failure. */
static int rb_last_transfer(struct tx_child *c, const farm_fatptr *mine,
                            struct run_report *r)
{
	int rc = -1;
	bool declined = false;
	for (unsigned t = 0; t < 100 && rc; t++)
		rc = transfer(c, &r->k, mine[0].addr, mine[1].addr, 1,
		              &declined);
	if (rc || declined || np_say(&c->np, 'z', NULL, 0))
		return -1;
	char b;
	(void)tu_recv(c->np.in, &b, 1); /* blocks: killed here */
	return -1;
}

/* One command from the parent (@cmd, 0: none). 0, or -1: the run ends
 * failed. */
static int rb_command(struct tx_child *c, int cmd, const farm_fatptr *mine,
                      const farm_fatptr *acc, unsigned nacc,
                      struct run_report *r, struct rb_loop *l)
{
	if (cmd == 'K')
		return rb_told(c, r, l);
	if (cmd == 'A') {
		struct rb_arm a;
		if (tu_recv(c->np.in, &a, sizeof(a)) ||
		    a.point >= FARM_FP_COUNT ||
		    farm_fault_set((enum farm_fault_point)a.point, rb_crash,
		                   NULL))
			return -1;
		return 0;
	}
	if (cmd == 'Z')
		return rb_last_transfer(c, mine, r);
	if (cmd && (!rb_p.cmd || rb_p.cmd(c, cmd, acc, nacc)))
		return -1;
	return 0;
}

/* After a kill: the first configuration without the gone machines,
 * noted once seen; the run goes on post_ms after it. */
static void rb_watch_config(struct tx_child *c, struct run_report *r,
                            struct rb_loop *l)
{
	uint64_t id = farm_node_config_id(c->np.node);
	if (!r->told || r->new_config || id == l->seen)
		return;
	l->seen = id;
	if (!rb_config_without(c, r->gone, r))
		return;
	r->new_config = true;
	r->t_seen_ns = np_now_ns();
	r->t_cfg_ns = atomic_load(&rb_cfg_t[id % 16]);
	if (!r->t_cfg_ns)
		r->t_cfg_ns = r->t_seen_ns;
	r->at_cfg = r->k;
	unsigned ms = rb_p.post_ms;
	if (rb_p.first_post_ms && __builtin_popcountll(r->gone) == 1)
		ms = rb_p.first_post_ms;
	l->t_end = r->t_seen_ns + ms * 1000000ull;
}

int rb_run(struct tx_child *c, const farm_fatptr *mine, const farm_fatptr *acc,
           unsigned nacc, struct run_report *r)
{
	struct rb_loop l = {.t_end = UINT64_MAX};
	farm_node_on_config(c->np.node, rb_on_config, NULL);
	for (;;) {
		if (!l.said && r->k.transfers >= rb_p.pre_transfers) {
			if (np_say(&c->np, 'P', NULL, 0))
				return -1;
			l.said = true;
		}
		if (rb_command(c, np_poll_cmd(&c->np), mine, acc, nacc, r, &l))
			return -1;
		rb_watch_config(c, r, &l);
		if (l.notify && r->new_config) {
			/* Its recovery reset the timeline before the
			 * configuration id moved (node.c apply_view). */
			farm_txm_stats st;
			farm_txm_stats_get(c->txm, &st);
			if (st.rec_t_active_ns) {
				l.notify = false;
				if (np_say(&c->np, 'N', NULL, 0))
					return -1;
			}
		}
		/* The test's step first: it may have to act at once (a
		 * zombie that resumes), removed or not. */
		if (rb_p.step && rb_p.step(c, r))
			return 0;
		r->removed = farm_node_removed(c->np.node);
		if (r->removed || np_now_ns() >= l.t_end)
			return 0;
		bank_step(c, &r->k, mine, RB_ACCOUNTS, acc, nacc,
		          RB_GIVE_UP_NS);
	}
}

void rb_scan(struct tx_child *c, const farm_fatptr *acc, unsigned nacc,
             struct scan_report *s)
{
	s->n = nacc;
	/* Retries while a region recovers; once one account ran out of
	 * them, the others of a region that stays away get one try each
	 * (a --broken run's dead machine: 1 s, not 1 s per account). */
	unsigned retries = 100;
	for (unsigned i = 0; i < nacc; i++) {
		s->addr[i] = acc[i].addr;
		s->version[i] = UINT64_MAX;
		if (s->stopped)
			continue;
		/* A recovering region may answer a retryable error for a
		 * while; -EBUSY is what a lock left behind answers. */
		static const volatile int never = 0;
		int64_t b = 0;
		int rc;
		for (unsigned t = 0;; t++) {
			rc = lf_account(c, acc[i].addr, &b, &s->version[i]);
			if (rc == -EBUSY || !farm_tx_retryable(rc))
				break;
			if (t >= retries) {
				retries = 0;
				break;
			}
			(void)farm_loop_wait(c->np.loop, &never, 10000000ull);
		}
		if (rc == 0) {
			s->read++;
			s->balance[i] = b;
			s->negative += b < 0;
		} else if (rc == -EBUSY) {
			s->locked_by[i / RB_ACCOUNTS]++;
			s->locked_at[s->locked++] = acc[i].addr;
			s->stopped = s->locked == RB_MAX_LOCKED;
		} else {
			s->other_by[i / RB_ACCOUNTS]++;
			if (!s->other++)
				s->other_err = rc;
		}
		if (rc)
			s->version[i] = UINT64_MAX;
	}
	/* With locks held, each try costs the read's bound: try once. */
	struct bank_counts k = {0};
	unsigned tries = s->locked ? 1 : RB_SUM_TRIES;
	do
		s->sum_status = ro_sum(c, &k, acc, nacc, nacc, &s->total,
		                       &s->min_balance);
	while (++s->sum_tries < tries && farm_tx_retryable(s->sum_status));
	s->negative += k.negative;
}

int rb_wait_cmd(struct tx_child *c, const farm_fatptr *acc, unsigned nacc)
{
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		if (cmd == 'S' || cmd == 'Q' || !rb_p.cmd)
			return cmd;
		if (rb_p.cmd(c, cmd, acc, nacc))
			return -1;
	}
}

int rb_bank(struct tx_child *c)
{
	farm_fatptr mine[RB_ACCOUNTS];
	farm_fatptr *acc = share_objs(c, "acct", RB_ACCOUNTS, 64, fill_account,
	                              NULL, mine);
	if (!acc)
		return 20;
	unsigned nacc = RB_NACC;
	struct run_report r = {0};
	if (rb_run(c, mine, acc, nacc, &r))
		return 23;
	tx_hist_flush(c);
	farm_txm_stats_get(c->txm, &r.st);
	if (np_say(&c->np, 'D', &r, sizeof(r)))
		return 24;
	if (rb_p.end && rb_p.end(c, acc, nacc))
		return 28;
	int cmd = rb_wait_cmd(c, acc, nacc);
	if (cmd == 'S') {
		struct scan_report *s = calloc(1, sizeof(*s));
		if (!s)
			return 25;
		rb_scan(c, acc, nacc, s);
		int bad = np_say(&c->np, 's', s, sizeof(*s));
		free(s);
		if (bad)
			return 26;
		cmd = rb_wait_cmd(c, acc, nacc);
	}
	free(acc);
	return cmd == 'Q' && !tx_hist_save(c) ? 0 : 27;
}

int rb_machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct tx_child c = {.np = *np};
	rb_self = &c;
	struct farm_config cfg;
	int st = np_config_zk(np, "16M", rb_zk_connect, rb_zk_root,
	                      RB_SESSION_MS, RB_LEASE_US, &cfg);
	if (st)
		return st;
	cfg.replicas = 3;
	if (rb_p.configure)
		rb_p.configure(np->me, &cfg);
	if (tx_hist_stream(&c))
		return 8;
	return tx_child_run(&c, &cfg, RB_JOIN_MS, rb_bank);
}

struct np_cluster rb_cl;

void rb_start(struct rb_result *res, const char *name)
{
	memset(res, 0, sizeof(*res));
	res->name = name;
	/* The campaign moves the fault: after 1/2 to 3/2 of the transfers. */
	/* The test's own count, kept for each draw; one the test set
	 * since the last draw (a count of its own per case) replaces it. */
	static unsigned pre, drawn;
	if (!pre || rb_p.pre_transfers != drawn)
		pre = rb_p.pre_transfers;
	drawn = rb_p.pre_transfers = rb_seeded(pre / 2, pre * 3 / 2, pre);
	if (getenv("FARM_FAULT_SEED"))
		printf("%s: the fault after %u transfers per machine\n", name,
		       rb_p.pre_transfers);
	static unsigned starts; /* a cluster of its own each time */
	snprintf(rb_zk_root, sizeof(rb_zk_root), "/libfarm/%s-%d-%u", name,
	         (int)getpid(), starts++);
	np_start(&rb_cl, "recbank", rb_machine, NULL);
	p_setup(&rb_cl);
	for (unsigned i = 0; i < np_nm; i++)
		np_expect(&rb_cl, i, 'P', 60000);
}

bool rb_member(const struct rb_result *res, unsigned i)
{
	return !((res->out >> i) & 1);
}

void rb_tell(struct rb_result *res, unsigned victim, bool notify)
{
	res->out |= 1ull << victim;
	struct rb_kill km = {.victim = victim,
	                     .notify = notify,
	                     .t_kill_ns = res->t_kill_ns};
	for (unsigned i = 0; i < np_nm; i++)
		if (rb_member(res, i)) {
			np_send(&rb_cl, i, 'K');
			assert_int_equal(tu_send(rb_cl.to[i], &km, sizeof(km)),
			                 0);
		}
}

void rb_reap(struct rb_result *res, unsigned victim, bool kill_it)
{
	if (kill_it) {
		res->t_kill_ns = np_now_ns();
		assert_int_equal(kill(rb_cl.pid[victim], SIGKILL), 0);
	}
	assert_int_equal(tu_reap(rb_cl.pid[victim]), 128 + SIGKILL);
	if (!kill_it)
		res->t_kill_ns = np_now_ns();
	rb_cl.pid[victim] = 0;
	res->killed |= 1ull << victim;
}

void rb_wait_recovered(struct rb_result *res)
{
	for (unsigned i = 0; i < np_nm; i++)
		if (rb_member(res, i))
			np_expect(&rb_cl, i, 'N', RB_RECONF_MS + 30000);
}

unsigned rb_account(const struct scan_report *s, uint64_t key)
{
	for (unsigned i = 0; i < s->n; i++)
		if (s->addr[i] == key)
			return i;
	return RB_NACC;
}

void on_write(void *ctx, uint64_t key, uint64_t version)
{
	struct committed *w = ctx;
	for (unsigned i = 0; i < w->s->n; i++)
		if (w->s->addr[i] == key) {
			w->maxv[i] = FARM_MAX(w->maxv[i], version);
			return;
		}
	w->unknown_keys++;
}

unsigned rb_committed_lost(const struct committed *w, struct fails *f)
{
	const struct scan_report *s = w->s;
	unsigned lost = 0;
	for (unsigned i = 0; i < s->n; i++) {
		if (s->version[i] == UINT64_MAX || w->maxv[i] <= s->version[i])
			continue;
		if (lost++ < 4 && f)
			failed(f,
			       "account %#" PRIx64 ": a transaction reported "
			       "committed wrote version %" PRIu64
			       ", its final version is %" PRIu64,
			       s->addr[i], w->maxv[i], s->version[i]);
	}
	if (lost > 4 && f)
		failed(f, "%u accounts in all lost committed writes", lost);
	if (w->unknown_keys && f)
		failed(f, "%" PRIu64 " committed writes of unknown objects",
		       w->unknown_keys);
	return lost + (unsigned)FARM_MIN(w->unknown_keys, (uint64_t)UINT32_MAX);
}

bool rb_committed_present(const struct committed *w, struct fails *f)
{
	return !rb_committed_lost(w, f);
}

void report_run(unsigned i, const struct run_report *r, struct fails *f)
{
	char errs[512];
	uint64_t after = r->k.transfers - r->at_cfg.transfers;
	printf("machine %u: %" PRIu64 " transfers committed (%" PRIu64
	       " declined, %" PRIu64 " attempts aborted, %" PRIu64
	       " unknown: %" PRIu64 " peer dead, %" PRIu64
	       " timed out; %" PRIu64 " given up), %" PRIu64
	       " lock-free reads (%" PRIu64 " failed), %" PRIu64
	       " read-only sums (%" PRIu64 " failed); errors: %s\n",
	       i, r->k.transfers, r->k.declined, r->k.aborts,
	       r->k.peerdead + r->k.timeouts, r->k.peerdead, r->k.timeouts,
	       r->k.failed, r->k.lf_reads, r->k.lf_bad, r->k.ro_txns,
	       r->k.ro_failed, tu_errs_str(&r->k.errs, errs, sizeof(errs)));
	printf("machine %u: recovery: %" PRIu64 " committed, %" PRIu64
	       " aborted, %" PRIu64 " locks recovered, %" PRIu64
	       " regions promoted; refused: %" PRIu64
	       " recovery messages, %" PRIu64 " stale LOCKs\n",
	       i, r->st.rec_committed, r->st.rec_aborted, r->st.rec_locks,
	       r->st.rec_promoted, r->st.rec_refused, r->st.stale_refused);
	if (r->new_config)
		printf("machine %u: configuration %" PRIu64 " (%u members) "
		       "applied %.1f ms after the last kill (seen after "
		       "%.1f ms); after it %" PRIu64 " transfers committed, "
		       "%" PRIu64 " given up\n",
		       i, r->config_new, r->members_new,
		       (double)(r->t_cfg_ns - r->t_kill_ns) / 1e6,
		       (double)(r->t_seen_ns - r->t_kill_ns) / 1e6, after,
		       r->k.failed - r->at_cfg.failed);
	if (r->st.trunc_unfinished)
		failed(f,
		       "machine %u truncated %" PRIu64 " COMMIT-BACKUP(s) its "
		       "coordinator's low-water mark had not passed: recovery "
		       "could abort them after they were reported committed",
		       i, r->st.trunc_unfinished);
	if (r->removed)
		failed(f, "machine %u was removed from the configuration", i);
	else if (!r->new_config)
		failed(f,
		       "machine %u: no configuration without machines %#" PRIx64
		       " within %d ms of the kill (configuration %" PRIu64 ")",
		       i, r->gone, RB_RECONF_MS, r->config_at_kill);
	else if (after == 0)
		failed(f,
		       "machine %u committed 0 transfers after configuration "
		       "%" PRIu64 " (in %u ms: %" PRIu64 " attempts, %" PRIu64
		       " given up, %" PRIu64
		       " unknown; errors of the whole run: %s)",
		       i, r->config_new, rb_p.post_ms,
		       r->k.attempts - r->at_cfg.attempts,
		       r->k.failed - r->at_cfg.failed,
		       r->k.peerdead + r->k.timeouts - r->at_cfg.peerdead -
		               r->at_cfg.timeouts,
		       errs);
	if (r->k.negative)
		failed(f, "machine %u read %" PRIu64 " negative balances", i,
		       r->k.negative);
}

const char *by_maker(const unsigned *n, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "made by machine");
	for (unsigned i = 0, k = 0; i < np_nm && o < len; i++)
		if (n[i])
			o += (size_t)snprintf(buf + o, len - o, "%s %u: %u",
			                      k++ ? "," : "", i, n[i]);
	return buf;
}

void report_scan(const struct scan_report *s, unsigned scanner, struct fails *f)
{
	int64_t expect = (int64_t)s->n * INIT_BALANCE; /* every account */
	printf("machine %u: lock-free scan of %u accounts: %u read, %u "
	       "locked%s, %u other errors; final sum: %s after %u tries, "
	       "total %" PRId64 " (expected %" PRId64 "), lowest %" PRId64 "\n",
	       scanner, s->n, s->read, s->locked,
	       s->stopped ? " (scan stopped)" : "", s->other,
	       farm_strerror(s->sum_status), s->sum_tries, s->total, expect,
	       s->min_balance);
	char by[128];
	if (s->locked) {
		char at[256] = "";
		size_t o = 0;
		for (unsigned i = 0; i < s->locked && o < sizeof(at); i++)
			o += (size_t)snprintf(at + o, sizeof(at) - o,
			                      " %#" PRIx64, s->locked_at[i]);
		failed(f,
		       "%s%u of %u accounts left locked (lock-free reads: "
		       "-EBUSY after their 1 s bound; %s):%s",
		       s->stopped ? "at least " : "", s->locked, s->n,
		       by_maker(s->locked_by, by, sizeof(by)), at);
	}
	if (s->other)
		failed(f,
		       "%u of %u accounts could not be read lock-free (%s; "
		       "first error: %s)",
		       s->other, s->n, by_maker(s->other_by, by, sizeof(by)),
		       farm_strerror(s->other_err));
	if (s->sum_status)
		failed(f, "the final read-only sum failed: %s (%u tries)",
		       farm_strerror(s->sum_status), s->sum_tries);
	else if (s->total != expect)
		failed(f, "the total is %" PRId64 ", expected %" PRId64,
		       s->total, expect);
	if (s->negative)
		failed(f,
		       "the final scan and sum read %" PRIu64
		       " negative balances",
		       s->negative);
}

void rb_collect(struct rb_result *res)
{
	if (res->collected)
		return;
	res->collected = true;
	res->scanner = np_nm;
	for (unsigned i = 0; i < np_nm; i++)
		if (rb_member(res, i)) {
			np_expect(&rb_cl, i, 'D',
			          RB_RECONF_MS + (int)rb_p.post_ms + 30000);
			np_recv(&rb_cl, i, &res->r[i], sizeof(res->r[i]), 1000);
			if (res->scanner == np_nm)
				res->scanner = i;
		}
	res->run_s = (double)(np_now_ns() - res->t_kill_ns) / 1e9;
}

void rb_check(struct rb_result *res)
{
	struct fails *f = &res->f;
	rb_collect(res);
	struct scan_report *s = res->s = calloc(1, sizeof(*s));
	assert_non_null(s);
	np_send(&rb_cl, res->scanner, 'S');
	np_expect(&rb_cl, res->scanner, 's',
	          (RB_MAX_LOCKED + RB_SUM_TRIES) * 3000 + 60000);
	np_recv(&rb_cl, res->scanner, s, sizeof(*s), 5000);
	for (unsigned i = 0; i < np_nm; i++)
		if (rb_cl.pid[i] > 0)
			np_send(&rb_cl, i, 'Q');
	int st[NP_MAX];
	np_finish(&rb_cl, st);

	printf("%s: machines %#" PRIx64 " left the configuration; survivors "
	       "ran %.1f s after the last kill\n",
	       res->name, res->out, res->run_s);
	for (unsigned i = 0; i < np_nm; i++) {
		if ((res->killed >> i) & 1)
			continue;
		if (st[i])
			failed(f, "machine %u exited with status %d", i, st[i]);
		if (rb_member(res, i))
			report_run(i, &res->r[i], f);
	}
	report_scan(s, res->scanner, f);

	struct committed *w = calloc(1, sizeof(*w));
	assert_non_null(w);
	w->s = s;
	int anomalies = tx_check_history(&rb_cl, res->killed, &res->rep,
	                                 &res->cut, on_write, w);
	sc_report_print(stdout, &res->rep);
	printf("%s: the killed machines' histories end with %" PRIu64
	       " transaction(s) in flight (unknown)\n",
	       res->name, res->cut);
	(void)rb_committed_present(w, f);
	if (anomalies)
		failed(f,
		       "sercheck: %d anomalies in the history (%" PRIu64
		       " transactions, %" PRIu64 " committed; report above)",
		       anomalies, res->rep.ntxns, res->rep.ncommitted);
	free(w);
}

/* FARM_HIST_DIR: every run's histories (hist-<machine>) are copied to
 * <dir>/<pid>-<run>-hist-<machine>, passed or failed, so that a rare
 * checker report can be replayed (test_sercheck --replay). */
static void rb_hist_copy(void)
{
	const char *dir = getenv("FARM_HIST_DIR");
	static unsigned runs;
	if (!dir || !*dir)
		return;
	unsigned run = runs++;
	for (unsigned i = 0; i < np_nm; i++) {
		char from[512], to[512];
		size_t len;
		tx_hist_path(&rb_cl, i, from, sizeof(from));
		void *v = np_read_file(from, &len);
		if (!v)
			continue;
		snprintf(to, sizeof(to), "%s/%d-%u-hist-%u", dir, (int)getpid(),
		         run, i);
		if (np_write_file(to, v, len))
			printf("could not keep %s in %s\n", from, to);
		free(v);
	}
	printf("%s/%d-%u-hist-*: this run's histories\n", dir, (int)getpid(),
	       run);
}

void rb_verdict(struct rb_result *res, bool broken, const char *why)
{
	free(res->s);
	res->s = NULL;
	rb_hist_copy();
	if (res->f.n && !broken && getenv("FARM_FAULT_SEED"))
		/* a campaign's failure: keep the histories (hist-<machine>) */
		printf("%s: histories kept in %s\n", res->name, rb_cl.root);
	else
		tu_rmtree(rb_cl.root);
	rb_cl.root[0] = 0;
	fflush(stdout); /* the report above, then what failed */
	struct fails *f = &res->f;
	if (broken) {
		if (!f->n)
			fail_msg("%s --broken: %s, and no check noticed",
			         res->name, why);
		printf("%s --broken: %u check(s) failed, as they must:\n%s",
		       res->name, f->n, f->text);
		return;
	}
	if (f->n)
		fail_msg("%s: %u check(s) failed:\n%s", res->name, f->n,
		         f->text);
}

int rb_teardown(void **state)
{
	(void)state;
	np_cleanup(&rb_cl);
	return 0;
}

int rb_main_n(const char *name, const struct CMUnitTest *tests, size_t n,
              unsigned nservers)
{
	return tu_zk_run_n(rb_zk_script, rb_zk_dir, sizeof(rb_zk_dir), nservers,
	                   rb_zk_connect, sizeof(rb_zk_connect), name, tests,
	                   n);
}

int rb_main(const char *name, const struct CMUnitTest *tests, size_t n)
{
	return rb_main_n(name, tests, n, 0);
}
