/*
 * recovery_bench: the cluster driver. The private ZooKeeper server, and one
 * run: fork the machines, wait for their accounts, load, hit the victim,
 * wait for recovery, stop, scan, and gather the timeline and the checks.
 * See recovery_bench.c's head comment.
 */
#include "benchnode.h"
#include "benchutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <farm/farm.h>

#include "benchcluster.h"
#include "recovery_bench.h"

/* ---- ZooKeeper ------------------------------------------------------- */

/* Data on tmpfs, or on disk with fsync (--zk-disk). */
static const char *zk_env(void)
{
	return g_opt.zk_disk ? "ZK_LOCAL_SYNC=yes" : NULL;
}

int zk_start(void)
{
	const char *base = g_opt.zk_dir_base ? g_opt.zk_dir_base
	                   : g_opt.zk_disk   ? "/var/tmp"
	                                     : "/dev/shm";
	snprintf(g_zk_dir, sizeof(g_zk_dir), "%s/farm-recbench-zk-XXXXXX",
	         base);
	return bc_zk_start(PROG, g_opt.zk_script, zk_env(), g_zk_dir,
	                   g_zk_connect, sizeof(g_zk_connect));
}

void zk_stop(void)
{
	bc_zk_stop(PROG, g_opt.zk_script, zk_env(), g_zk_dir);
}

/* ---- one run (parent) ------------------------------------------------ */

void kill_all(void)
{
	for (unsigned i = 0; i < NM; i++)
		if (g_pid[i] > 0) {
			kill(g_pid[i], SIGKILL);
			kill(g_pid[i], SIGCONT);
			waitpid(g_pid[i], NULL, 0);
			g_pid[i] = 0;
		}
}

/* Wait until every machine in @mask is in a state >= @state (or failed);
 * -1 on timeout, failure or interruption. */
static int wait_state(unsigned mask, int state, unsigned ms, char *why,
                      size_t len)
{
	uint64_t dl = now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < NM; i++) {
			if (!(mask & (1u << i)))
				continue;
			int s = atomic_load(&g_sh->m[i].state);
			if (s == ST_FAILED) {
				snprintf(why, len, "machine %u: %s: %s", i,
				         g_sh->m[i].fail_what,
				         farm_strerror(g_sh->m[i].fail_rc));
				return -1;
			}
			all &= s >= state;
		}
		if (all)
			return 0;
		if (interrupted) {
			snprintf(why, len, "interrupted");
			return -1;
		}
		if (now_ns() > dl) {
			snprintf(why, len,
			         "machines did not reach state %d "
			         "within %u ms",
			         state, ms);
			return -1;
		}
		nap_ms(1);
	}
}

static void show_logs(const char *root)
{
	for (unsigned i = 0; i < NM; i++) {
		char cmd[400];
		snprintf(cmd, sizeof(cmd),
		         "echo '--- machine %u (last lines of its log)' >&2; "
		         "tail -n 8 '%s/m%u.log' >&2",
		         i, root, i);
		if (system(cmd) != 0)
			fprintf(stderr, "(no log of machine %u)\n", i);
	}
}

/* What one run's steps pass on to the next. */
struct run_ctx {
	unsigned idx;
	enum scen sc;
	unsigned pre_ms;
	char root[256];
	unsigned mask; /* the survivors */
	uint64_t t_go, t_kill, victim_xfers, stop_inflight;
};

/* The data directory and the machines' processes; they create the
 * store. */
static int run_spawn(struct run_ctx *c, struct run *r)
{
	char zk_root[128];
	snprintf(c->root, sizeof(c->root), "/dev/shm/farm-recbench-XXXXXX");
	if (!mkdtemp(c->root)) {
		snprintf(r->why, sizeof(r->why), "mkdtemp: %s",
		         strerror(errno));
		return -1;
	}
	snprintf(zk_root, sizeof(zk_root), "/libfarm/recbench-%d-%u",
	         (int)getpid(), c->idx);
	for (unsigned i = 0; i < NM; i++) {
		g_pid[i] =
		        bc_spawn(i, c->root, zk_root, g_opt.verbose, machine);
		if (g_pid[i] < 0) {
			g_pid[i] = 0;
			snprintf(r->why, sizeof(r->why), "fork: %s",
			         strerror(errno));
			kill_all();
			bu_rm_tree(AT_FDCWD, c->root, 3);
			return -1;
		}
	}
	return 0;
}

/* The victim (machine 2, or the CM: all agree on it by now), then the
 * load for pre_ms. */
static int run_load(struct run_ctx *c, struct run *r)
{
	uint32_t cm = atomic_load(&g_sh->m[0].cm);
	unsigned victim = c->sc == SC_CM ? cm : 2;
	if (c->sc != SC_CM && victim == cm)
		victim = 3;
	r->victim = victim;
	c->mask = ((1u << NM) - 1) & ~(1u << victim);
	g_sh->scanner = victim == 0 ? 1 : 0;
	g_sh->t0 = now_ns();
	atomic_store(&g_sh->cmd, C_GO);
	c->t_go = g_sh->t0;
	while (now_ns() < c->t_go + (uint64_t)c->pre_ms * 1000000ull) {
		if (interrupted) {
			snprintf(r->why, sizeof(r->why), "interrupted");
			return -1;
		}
		for (unsigned i = 0; i < NM; i++)
			if (atomic_load(&g_sh->m[i].state) == ST_FAILED) {
				snprintf(r->why, sizeof(r->why),
				         "machine %u failed before the kill",
				         i);
				return -1;
			}
		nap_ms(c->pre_ms > 5000 ? 50 : 5);
	}
	return 0;
}

/* Kill (or stop) the victim, then wait until every survivor's regions
 * are active again. */
static int run_kill(struct run_ctx *c, struct run *r)
{
	unsigned victim = r->victim;
	/* Suspicions so far (refreshed every ms) are false ones; those
	 * after the kill are told apart by the survivors' steps. */
	for (unsigned i = 0; i < NM; i++)
		r->false_susp += atomic_load(&g_sh->m[i].suspicions);
	c->victim_xfers = atomic_load(&g_sh->m[victim].transfers);
	c->t_kill = now_ns();
	r->pre_secs = (double)(c->t_kill - c->t_go) / 1e9;
	kill(g_pid[victim], c->sc == SC_STOP ? SIGSTOP : SIGKILL);
	c->stop_inflight = (uint64_t)atomic_load(&g_sh->m[victim].inflight);
	if (c->sc != SC_STOP) {
		waitpid(g_pid[victim], NULL, 0);
		g_pid[victim] = 0;
	}
	uint64_t dl = c->t_kill + (uint64_t)RECOV_MS * 1000000ull;
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < NM; i++)
			if ((c->mask & (1u << i)) &&
			    atomic_load(&g_sh->m[i].t_active) < c->t_kill)
				all = false;
		if (all)
			return 0;
		int failed = -1, gone = -1;
		for (unsigned i = 0; i < NM; i++) {
			if (!(c->mask & (1u << i)))
				continue;
			if (atomic_load(&g_sh->m[i].state) == ST_FAILED)
				failed = (int)i;
			/* A survivor a false suspicion removed is no
			 * member of the configuration this run waits for:
			 * its regions never become active again. */
			if (atomic_load(&g_sh->m[i].removed))
				gone = (int)i;
		}
		if (failed >= 0)
			snprintf(r->why, sizeof(r->why),
			         "machine %d failed during recovery", failed);
		else if (gone >= 0)
			snprintf(r->why, sizeof(r->why),
			         "machine %d was removed (a false suspicion), "
			         "not the victim: no recovery to time",
			         gone);
		else if (interrupted)
			snprintf(r->why, sizeof(r->why), "interrupted");
		else if (now_ns() > dl)
			snprintf(r->why, sizeof(r->why),
			         "no recovery within %d ms of the kill",
			         RECOV_MS);
		if (failed >= 0 || gone >= 0 || interrupted || now_ns() > dl)
			return -1;
		nap_ms(1);
	}
}

/* The stopped machine, woken: it must find itself removed and commit
 * nothing. */
static void run_zombie(const struct run_ctx *c, struct run *r)
{
	unsigned victim = r->victim;
	kill(g_pid[victim], SIGCONT);
	char tmp[64];
	int zr = wait_state(1u << victim, ST_DONE, 1000, tmp, sizeof(tmp));
	uint64_t after = atomic_load(&g_sh->m[victim].transfers);
	uint64_t infl = (uint64_t)atomic_load(&g_sh->m[victim].inflight);
	r->zombie = after - c->victim_xfers;
	/* Its commits in flight at the stop may end either way. */
	r->zombie -= BU_MIN(r->zombie, c->stop_inflight);
	r->zombie_hung = zr != 0;
	if (zr)
		fprintf(stderr,
		        PROG ": run %u: the stopped machine %u did not "
		             "end its workload within 1 s of SIGCONT "
		             "(%" PRIu64 " commits in flight)\n",
		        c->idx, victim, infl);
	kill(g_pid[victim], SIGKILL);
	waitpid(g_pid[victim], NULL, 0);
	g_pid[victim] = 0;
}

/* post_ms more load, then stop, the zombie's check, and the scan. */
static int run_finish(const struct run_ctx *c, struct run *r)
{
	int rc;
	nap_ms(g_opt.post_ms);
	atomic_store(&g_sh->cmd, C_STOP);
	if (c->sc == SC_STOP)
		run_zombie(c, r);
	if ((rc = wait_state(c->mask, ST_DONE, 30000, r->why, sizeof(r->why))))
		return rc;
	atomic_store(&g_sh->cmd, C_SCAN);
	if ((rc = wait_state(1u << g_sh->scanner, ST_SCANNED, 120000, r->why,
	                     sizeof(r->why))))
		return rc;
	atomic_store(&g_sh->cmd, C_QUIT);
	r->ok = true;
	return 0;
}

/* Wait for every machine process (closing leaves ZooKeeper: a few
 * seconds each); a non-zero exit fails the run. */
static void run_reap(struct run *r)
{
	for (unsigned i = 0; i < NM; i++) {
		if (g_pid[i] <= 0)
			continue;
		uint64_t dl2 = now_ns() + 10000000000ull;
		int st = 0;
		pid_t w;
		while ((w = waitpid(g_pid[i], &st, WNOHANG)) == 0 &&
		       now_ns() < dl2)
			nap_ms(2);
		if (w == 0) {
			kill(g_pid[i], SIGKILL);
			waitpid(g_pid[i], &st, 0);
		}
		if (r->ok && (!WIFEXITED(st) || WEXITSTATUS(st))) {
			r->ok = false;
			snprintf(r->why, sizeof(r->why),
			         "machine %u exited with status %d", i,
			         WIFEXITED(st) ? WEXITSTATUS(st)
			                       : 128 + WTERMSIG(st));
		}
		g_pid[i] = 0;
	}
}

/* RECOVERY_BENCH_DEBUG: machine @i's counters, its slow operations, its
 * recovery steps and retries. */
static void debug_machine(unsigned idx, unsigned i, uint64_t t_kill)
{
	const struct mstat *m = &g_sh->m[i];
	fprintf(stderr,
	        "debug run %u machine %u: %" PRIu64 " transfers, %" PRIu64
	        " lookups, %" PRIu64 " declined, %" PRIu64 " retries, %" PRIu64
	        " failed (%s%s%s); txm: %" PRIu64 " commits, "
	        "aborts conflict %" PRIu64 " validation %" PRIu64
	        " failure %" PRIu64 " nospace %" PRIu64 "; lease: %" PRIu64
	        " renewals, %" PRIu64 " late, max gap %.1f ms\n",
	        idx, i, (uint64_t)m->transfers, (uint64_t)m->lookups,
	        (uint64_t)m->declined, (uint64_t)m->retries,
	        (uint64_t)m->failed,
	        m->first_err ? farm_strerror(m->first_err) : "-",
	        m->first_err ? " at " : "", m->first_err_what, m->ts.commits,
	        m->ts.aborts_conflict, m->ts.aborts_validation,
	        m->ts.aborts_failure, m->ts.aborts_nospace,
	        m->ns.lease.renewals, m->ns.lease.late,
	        m->ns.lease.max_gap_us / 1e3);
	for (unsigned k = 0; k < BU_MIN(m->nslow, 16u); k++)
		fprintf(stderr,
		        "  slow %s: start %" PRId64
		        " ms after go (kill at %" PRIu64
		        "), %u ms, phase %d, %s, accounts %u "
		        "%u\n",
		        m->slow[k].lookup ? "lookup" : "transfer",
		        m->slow[k].start_ms,
		        (uint64_t)((t_kill - g_sh->t0) / 1000000ull),
		        m->slow[k].ms, m->slow[k].phase,
		        farm_strerror(m->slow[k].rc), m->slow[k].acct_a,
		        m->slow[k].acct_b);
	static const char *const kn[] = {"?",         "suspect",     "request",
	                                 "withdrawn", "no-majority", "config"};
	for (unsigned k = 0; k < m->ns.recovery.nsteps; k++) {
		const struct farm_stats_step *st = &m->ns.recovery.steps[k];
		fprintf(stderr,
		        "  step %+.1f ms after the kill: %s "
		        "machine %u (n %u, configuration "
		        "%" PRIu64 ")\n",
		        ((double)st->t_ns - (double)t_kill) / 1e6,
		        kn[st->kind <= 5 ? st->kind : 0], st->machine, st->n,
		        st->config_id);
	}
	fprintf(stderr,
	        "  lease: %" PRIu64 " expiries, %" PRIu64 " lost, %" PRIu64
	        " refused; membership: %" PRIu64 " config writes, %" PRIu64
	        " suspects\n",
	        m->ns.lease.expiries, m->ns.lease.lost, m->ns.lease.refused,
	        m->ns.membership.config_writes, m->ns.membership.suspects);
	for (unsigned k = 0; k < 8 && m->rcount[k]; k++)
		fprintf(stderr,
		        "  retried %s in phase %d x %" PRIu64
		        ", the last %" PRId64 " ms after go\n",
		        farm_strerror(m->rcode[k]), m->rphase[k], m->rcount[k],
		        m->rlast_ms[k]);
}

/* RECOVERY_BENCH_DUMP: every machine's ops per 10 ms, the whole run. */
static void dump_ops(const char *path, uint64_t t_kill)
{
	FILE *df = path ? fopen(path, "w") : NULL;
	if (!df)
		return;
	uint64_t kb10 = (t_kill - g_sh->t0) / 10000000ull;
	for (uint64_t b = 0; b + 10 <= g_sh->nbuckets; b += 10) {
		fprintf(df, "%" PRId64, (int64_t)(b / 10) - (int64_t)kb10);
		for (unsigned i = 0; i < NM; i++) {
			uint32_t n = 0;
			for (unsigned k = 0; k < 10; k++)
				n += g_ops[(size_t)i * g_sh->nbuckets + b + k];
			fprintf(df, " %u", n);
		}
		fprintf(df, "\n");
	}
	fclose(df);
}

/* One survivor's recovery steps after the kill into the timeline;
 * returns the configuration without the victim (0: none seen). */
static uint64_t timeline_steps(const struct farm_node_stats *ns,
                               uint64_t t_kill, struct run *r)
{
	unsigned victim = r->victim;
	uint64_t new_cfg = 0;
	bool saw_cfg = false;
	for (unsigned k = 0; k < ns->recovery.nsteps; k++) {
		const struct farm_stats_step *st = &ns->recovery.steps[k];
		if (st->t_ns < t_kill)
			continue;
		double t = ms_after(st->t_ns, t_kill);
		bool v = st->machine == victim;
		switch (st->kind) {
		case FARM_STATS_STEP_SUSPECT:
			if (v)
				r->t[T_SUSPECT] = tmin(r->t[T_SUSPECT], t);
			else
				r->false_susp++; /* a survivor */
			break;
		case FARM_STATS_STEP_REQUEST:
			if (v && st->n == 1)
				r->t[T_PROBE] = tmin(r->t[T_PROBE], t);
			else
				r->false_susp++; /* a survivor too */
			break;
		case FARM_STATS_STEP_WITHDRAWN: r->false_susp++; break;
		case FARM_STATS_STEP_CONFIG:
			if (!v || saw_cfg)
				break;
			saw_cfg = true;
			new_cfg = st->config_id;
			r->t[T_CFG_FIRST] = tmin(r->t[T_CFG_FIRST], t);
			r->t[T_CFG_LAST] = tmax(r->t[T_CFG_LAST], t);
			break;
		default: break;
		}
	}
	if (!saw_cfg)
		r->t[T_CFG_LAST] = INFINITY; /* never took it */
	return new_cfg;
}

/* The survivors' timelines: suspicion, probe, configuration, ZooKeeper's
 * write, transaction recovery, first commit, regions active. */
static void run_timeline(uint64_t t_kill, struct run *r)
{
	unsigned victim = r->victim;
	uint64_t new_cfg = 0;
	for (unsigned i = 0; i < NM; i++) {
		if (i == victim)
			continue;
		const struct mstat *m = &g_sh->m[i];
		uint64_t cfg = timeline_steps(&m->ns, t_kill, r);
		if (cfg)
			new_cfg = cfg;
		r->t[T_TXREC] = tmax(r->t[T_TXREC],
		                     ms_after(m->ts.rec_t_config_ns, t_kill));
		r->t[T_COMMIT] = tmax(r->t[T_COMMIT],
		                      ms_after(m->ts.rec_t_go_ns, t_kill));
		r->t[T_ACTIVE] = tmax(r->t[T_ACTIVE],
		                      ms_after(m->ts.rec_t_active_ns, t_kill));
		if (m->removed)
			r->false_susp++;
		r->transfers += m->transfers;
	}
	for (unsigned i = 0; i < NM; i++) {
		const struct farm_node_stats *ns = &g_sh->m[i].ns;
		if (i != victim && new_cfg &&
		    ns->membership.write_config_id == new_cfg)
			r->t[T_ZK] = tmin(
			        r->t[T_ZK],
			        ms_after(ns->membership.t_write_ns, t_kill));
	}
}

/* Throughput before the kill, when it is back to 80%, and the plot's
 * series (200 ms before the kill to post_ms after active). */
static void run_throughput(uint64_t t_kill, struct run *r)
{
	unsigned victim = r->victim;
	uint64_t kb = (t_kill - g_sh->t0) / 1000000ull; /* the kill's bucket */
	unsigned base = BU_MIN(g_opt.base_ms, (unsigned)kb);
	uint64_t pre = 0;
	for (uint64_t b = kb - base; b < kb; b++)
		pre += surv_ops(victim, b, g_ops);
	r->pre_rate = base ? (double)pre / base : 0;
	r->win = calibrate(victim, kb - base, kb, r->pre_rate, &r->win_ok);
	double target = 0.8 * r->pre_rate * r->win;
	double from = isnan(r->t[T_SUSPECT]) ? 0 : r->t[T_SUSPECT];
	uint64_t end = kb + (uint64_t)ceil(r->t[T_ACTIVE]) + g_opt.post_ms;
	for (uint64_t b = kb + (uint64_t)ceil(from);
	     b + r->win <= end && b + r->win <= g_sh->nbuckets; b++) {
		uint64_t s = 0;
		for (unsigned w = 0; w < r->win; w++)
			s += surv_ops(victim, b + w, g_ops);
		if ((double)s >= target) {
			/* Bucket b counts what ended in [b, b + 1) ms after
			 * t0; the kill fell inside bucket kb. */
			uint64_t start = g_sh->t0 + b * 1000000ull;
			r->t[T_80] = start > t_kill
			                     ? (double)(start - t_kill) / 1e6
			                     : 0.0;
			break;
		}
	}
	if (!isnan(r->t[T_80]) && !isnan(r->t[T_SUSPECT]))
		r->t80_from_suspect = BU_MAX(0.0, r->t[T_80] - r->t[T_SUSPECT]);
	uint64_t p0 = kb >= 200 ? kb - 200 : 0;
	uint64_t p1 = BU_MIN(end, (uint64_t)g_sh->nbuckets);
	r->nplot = (unsigned)(p1 - p0);
	r->plot_ops = calloc(r->nplot + 1, sizeof(uint32_t) * 2);
	if (r->plot_ops) {
		r->plot_xfers = r->plot_ops + r->nplot;
		for (unsigned k = 0; k < r->nplot; k++) {
			r->plot_ops[k] = surv_ops(victim, p0 + k, g_ops);
			r->plot_xfers[k] = surv_ops(victim, p0 + k, g_xfers);
		}
	}
}

/* The commit logs against the final counters: lost commits, and writes
 * of commits never reported. */
static void run_clog(unsigned idx, uint64_t t_kill, unsigned nacc,
                     struct run *r)
{
	uint64_t unrep = 0;
	bool complete;
	char det[1400] = "";
	uint64_t l = check_clog(nacc, (t_kill - g_sh->t0) / 1000, &unrep, det,
	                        sizeof(det), &complete);
	uint64_t allowed =
	        2 * (uint64_t)atomic_load(&g_sh->m[r->victim].inflight);
	r->clog_lost = l;
	r->clog_unreported = unrep;
	if (l || unrep > allowed) {
		fprintf(stderr,
		        PROG ": run %u: %" PRIu64 " lost commit(s), %" PRIu64
		             " write(s) of commits not reported (%" PRIu64
		             " allowed)%s%s\n",
		        idx, l, unrep, allowed, det[0] ? ": " : "", det);
		if (unrep > allowed)
			r->phantom += (unrep - allowed + 1) / 2;
	}
	if (!complete)
		fprintf(stderr,
		        PROG ": run %u: a commit log is full; the "
		             "per-account check covers part of the run\n",
		        idx);
}

/* Lost and phantom commits from the counters, the sum and the commit
 * logs; appends to r->why from @o; returns the new length. */
static size_t run_lost(unsigned nacc, struct run *r, size_t o)
{
	char *w = r->why;
	size_t wl = sizeof(r->why);
	uint64_t reported = 0, ctr_sum = 0, below_max = 0;
	for (unsigned i = 0; i < NM; i++)
		reported += g_sh->m[i].transfers;
	for (unsigned j = 0; j < nacc; j++) {
		ctr_sum += g_sh->ctr[j];
		uint64_t want = 0;
		for (unsigned i = 0; i < NM; i++)
			want = BU_MAX(want, g_sh->maxw[i][j]);
		below_max += g_sh->ctr[j] < want;
	}
	int64_t expect = (int64_t)nacc * INIT_BAL;
	if (g_sh->sum_rc) {
		o += (size_t)snprintf(
		        w, wl, "the final sum failed: %s at its %s (%u tries)",
		        farm_strerror(g_sh->sum_rc), g_sh->sum_where,
		        g_sh->sum_tries);
		r->lost++; /* unknown: counted as a failure */
		return o;
	}
	/* Three views of the same question; the largest counts. */
	uint64_t slack =
	        2 * (uint64_t)atomic_load(&g_sh->m[r->victim].inflight);
	uint64_t deficit =
	        ctr_sum < 2 * reported ? (2 * reported - ctr_sum + 1) / 2 : 0;
	r->lost = BU_MAX(deficit, BU_MAX(below_max, r->clog_lost));
	if (ctr_sum > 2 * reported + slack)
		r->phantom = BU_MAX(r->phantom,
		                    (ctr_sum - 2 * reported - slack) / 2);
	if (r->lost || r->phantom)
		o += (size_t)snprintf(
		        w + o, wl - o,
		        "%" PRIu64 " lost, %" PRIu64
		        " phantom commit(s): counters sum to %" PRIu64
		        ", %" PRIu64 " transfers reported committed "
		        "(victim's in flight: %" PRIu64 "), %" PRIu64
		        " account(s) below a committed value, %" PRIu64
		        " counter value(s) committed twice or above "
		        "the final one (details on stderr)",
		        r->lost, r->phantom, ctr_sum, reported, slack / 2,
		        below_max, r->clog_lost);
	if (g_sh->total != expect) {
		r->lost++;
		o += (size_t)snprintf(w + o, wl - BU_MIN(o, wl),
		                      "%stotal %" PRId64 ", expected %" PRId64,
		                      o ? "; " : "", g_sh->total, expect);
	}
	return o;
}

/* Accounts the scan found locked or could not read. */
static void run_locked(struct run *r, size_t o)
{
	char *w = r->why;
	size_t wl = sizeof(r->why);
	if (!g_sh->lf_locked && !g_sh->lf_other)
		return;
	r->unlocked_checks = g_sh->lf_locked + g_sh->lf_other;
	o += (size_t)snprintf(
	        w + BU_MIN(o, wl - 1), wl - BU_MIN(o, wl - 1),
	        "%s%s%u account(s) left locked, %u unreadable (%s); "
	        "locked:",
	        o ? "; " : "", g_sh->lf_locked >= 4 ? "at least " : "",
	        g_sh->lf_locked, g_sh->lf_other,
	        g_sh->lf_other ? farm_strerror(g_sh->lf_err) : "-");
	for (unsigned k = 0; k < BU_MIN(g_sh->lf_locked, 4u); k++)
		o += (size_t)snprintf(w + BU_MIN(o, wl - 1),
		                      wl - BU_MIN(o, wl - 1),
		                      " %u (made on %u)", g_sh->locked_acct[k],
		                      g_sh->locked_acct[k] / g_opt.accounts);
}

/* The run's result and the shared memory, zeroed for a new run. */
static void run_reset(unsigned pre_ms, enum scen sc, struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->sc = sc;
	for (unsigned k = 0; k < NT; k++)
		r->t[k] = NAN;
	r->t80_from_suspect = NAN;
	memset(g_sh, 0, sizeof(*g_sh));
	g_sh->nbuckets = pre_ms + RECOV_MS + g_opt.post_ms + 3000;
	size_t nb = (size_t)NM * g_sh->nbuckets;
	memset(g_ops, 0, nb * sizeof(*g_ops));
	memset(g_xfers, 0, nb * sizeof(*g_xfers));
}

int one_run(unsigned idx, enum scen sc, unsigned pre_ms, struct run *r)
{
	struct run_ctx c = {.idx = idx, .sc = sc, .pre_ms = pre_ms};
	run_reset(pre_ms, sc, r);
	if (run_spawn(&c, r))
		return -1;
	int rc = wait_state((1u << NM) - 1, ST_CREATED, 2 * JOIN_MS + 30000,
	                    r->why, sizeof(r->why));
	if (!rc)
		rc = run_load(&c, r);
	if (!rc)
		rc = run_kill(&c, r);
	if (!rc)
		rc = run_finish(&c, r);
	if (rc)
		atomic_store(&g_sh->cmd, C_QUIT);
	run_reap(r);
	if (!r->ok)
		show_logs(c.root);
	bu_rm_tree(AT_FDCWD, c.root, 3);
	if (!r->ok)
		return -1;

	if (getenv("RECOVERY_BENCH_DEBUG"))
		for (unsigned i = 0; i < NM; i++)
			debug_machine(idx, i, c.t_kill);
	dump_ops(getenv("RECOVERY_BENCH_DUMP"), c.t_kill);
	run_timeline(c.t_kill, r);
	run_throughput(c.t_kill, r);
	unsigned nacc = NM * g_opt.accounts;
	if (g_sh->sum_rc == 0)
		run_clog(idx, c.t_kill, nacc, r);
	run_locked(r, run_lost(nacc, r, 0));
	return 0;
}
