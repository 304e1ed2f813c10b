/*
 * fwl's run on a local cluster: fork the machine processes, load, run
 * (killing one mid-run when asked), check the invariants, clean up.
 */
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wl_int.h"
#include "wl_proc.h"

struct wl_cluster {
	char root[256];
	unsigned n;
	pid_t pid[WL_MAX_MACHINES];
	int to[WL_MAX_MACHINES], from[WL_MAX_MACHINES];
	bool alive[WL_MAX_MACHINES];
};

/* SIGINT/SIGTERM during a run: the handler kills the machines (kill is
 * async-signal-safe), so the parent's next pipe read fails and the run
 * ends through cluster_end, which removes the cluster's directory; then
 * wl_run raises the signal again with the caller's disposition. The
 * handler reads the pids through @live, set while a cluster exists. */
static struct wl_cluster *volatile live;
static volatile sig_atomic_t signalled;

static void on_signal(int sig)
{
	struct wl_cluster *cl = live;
	signalled = sig;
	for (unsigned i = 0; cl && i < cl->n; i++)
		if (cl->pid[i] > 0)
			kill(cl->pid[i], SIGKILL);
}

struct saved_sigs {
	struct sigaction intr, term, pipe;
};

/* A write to a dead machine's pipe is an error (EPIPE), not the end of
 * the parent. */
static void catch_signals(struct saved_sigs *s)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	signalled = 0;
	sigaction(SIGINT, &sa, &s->intr);
	sigaction(SIGTERM, &sa, &s->term);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, &s->pipe);
}

static void restore_signals(const struct saved_sigs *s)
{
	live = NULL;
	sigaction(SIGINT, &s->intr, NULL);
	sigaction(SIGTERM, &s->term, NULL);
	sigaction(SIGPIPE, &s->pipe, NULL);
	if (signalled)
		raise(signalled);
}

static int rm_cb(const char *path, const struct stat *sb, int flag,
                 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void cluster_end(struct wl_cluster *cl, bool force, int *bad)
{
	for (unsigned i = 0; i < cl->n; i++) {
		if (cl->to[i] >= 0)
			close(cl->to[i]);
		cl->to[i] = -1;
		if (force && cl->pid[i] > 0)
			kill(cl->pid[i], SIGKILL);
	}
	for (unsigned i = 0; i < cl->n; i++) {
		if (cl->pid[i] > 0) {
			int ws = 0;
			while (waitpid(cl->pid[i], &ws, 0) < 0 &&
			       errno == EINTR)
				;
			if (!force && (!WIFEXITED(ws) || WEXITSTATUS(ws))) {
				fprintf(stderr, "machine %u: exit status %#x\n",
				        i, ws);
				*bad = -1;
			}
		}
		cl->pid[i] = 0;
		if (cl->from[i] >= 0)
			close(cl->from[i]);
		cl->from[i] = -1;
	}
	if (cl->root[0])
		nftw(cl->root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	cl->root[0] = 0;
}

static int cluster_start(struct wl_cluster *cl, const struct wl_opts *o)
{
	memset(cl, 0, sizeof(*cl));
	cl->n = o->machines;
	for (unsigned i = 0; i < WL_MAX_MACHINES; i++)
		cl->to[i] = cl->from[i] = -1;
	snprintf(cl->root, sizeof(cl->root), "%s/fwl-XXXXXX",
	         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (!mkdtemp(cl->root))
		return -errno;
	for (unsigned i = 0; i < cl->n; i++) {
		char d[300];
		snprintf(d, sizeof(d), "%s/m%u", cl->root, i);
		if (mkdir(d, 0700))
			return -errno;
	}
	for (unsigned i = 0; i < cl->n; i++) {
		int down[2], up[2];
		if (pipe(down) || pipe(up))
			return -errno;
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0)
			return -errno;
		if (pid == 0) {
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			close(down[1]);
			close(up[0]);
			for (unsigned j = 0; j < i; j++) {
				close(cl->to[j]);
				close(cl->from[j]);
			}
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(wl_machine_main(o, i, cl->root, down[0], up[1]));
		}
		close(down[0]);
		close(up[1]);
		cl->pid[i] = pid;
		if (signalled) /* the handler may have missed this one */
			kill(pid, SIGKILL);
		cl->to[i] = down[1];
		cl->from[i] = up[0];
		cl->alive[i] = true;
	}
	for (unsigned i = 0; i < cl->n; i++) {
		char r = 0;
		if (wl_read_all(cl->from[i], &r, 1, 60000) || r != 'R')
			return -EIO;
	}
	return 0;
}

static int send_all(struct wl_cluster *cl, char cmd)
{
	for (unsigned i = 0; i < cl->n; i++)
		if (cl->alive[i] && wl_write_all(cl->to[i], &cmd, 1))
			return -EIO;
	return 0;
}

static int load(struct wl_cluster *cl, struct wl_result *r)
{
	uint64_t t0 = wl_now_ns();
	if (send_all(cl, 'L'))
		return -EIO;
	for (unsigned i = 0; i < cl->n; i++) {
		int rc = 0;
		uint64_t l[4];
		if (wl_read_all(cl->from[i], &rc, sizeof(rc), 600000) ||
		    wl_read_all(cl->from[i], l, sizeof(l), 10000))
			return -EIO;
		if (rc) {
			snprintf(r->msg, sizeof(r->msg), "machine %u: load: %s",
			         i, farm_strerror(rc));
			return rc;
		}
		for (int k = 0; k < 4; k++)
			r->initial[k] += l[k];
	}
	r->load_ms = (wl_now_ns() - t0) / 1000000;
	return 0;
}

static void add_run(struct wl_result *r, const struct wl_result *m, unsigned i)
{
	for (int t = 0; t < WT_NTYPES; t++) {
		r->commits[t] += m->commits[t];
		r->fails[t] += m->fails[t];
	}
	r->retries += m->retries;
	r->errors += m->errors;
	r->shipped += m->shipped;
	r->ship_fallbacks += m->ship_fallbacks;
	for (int b = 0; b < WL_HIST_BUCKETS; b++)
		r->hist[b] += m->hist[b];
	r->seconds = m->seconds > r->seconds ? m->seconds : r->seconds;
	r->cores += m->cores;
	r->cpu_s += m->cpu_s;
	r->acked_delta += m->acked_delta;
	memcpy(r->acked[i], m->acked[i], sizeof(r->acked[i]));
	r->rec[i] = m->rec[i];
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void dump_ticks(const char *path, const uint64_t *per, unsigned nt,
                       unsigned n, const struct wl_result *r)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "FWL_TICKS: cannot write %s: %s\n", path,
		        strerror(errno));
		return;
	}
	fprintf(f, "# kill_ns %llu tick_us %llu; run_start_ns per machine:",
	        (unsigned long long)r->kill_ns, (unsigned long long)r->tick_us);
	for (unsigned i = 0; i < n; i++)
		fprintf(f, " %llu", (unsigned long long)r->rec[i].run_start);
	fprintf(f, "\n");
	for (unsigned k = 0; k < nt; k++) {
		fprintf(f, "%u", k);
		for (unsigned i = 0; i < n; i++)
			fprintf(f, " %llu",
			        (unsigned long long)per[(size_t)k * n + i]);
		fprintf(f, "\n");
	}
	fclose(f);
}

static int run(struct wl_cluster *cl, const struct wl_opts *o,
               struct wl_result *r)
{
	unsigned nt =
	        o->tick_us ? (unsigned)(o->duration_ms * 1000 / o->tick_us) + 1
	                   : 0;
	if (nt && !(r->ticks = calloc(nt, sizeof(uint64_t))))
		return -ENOMEM;
	r->nticks = nt;
	r->tick_us = o->tick_us;
	if (send_all(cl, 'G'))
		return -EIO;
	if (o->kill_machine >= 0) {
		sleep_ms(o->kill_at_ms);
		unsigned v = (unsigned)o->kill_machine;
		r->kill_ns = wl_now_ns();
		kill(cl->pid[v], SIGKILL);
		/* On the clock of the machines' log lines (FARM_LOG_TIME),
		 * so a recovery's steps read as ms after the kill. */
		if (getenv("FARM_LOG_TIME"))
			fprintf(stderr, "%.3f kill machine %u\n",
			        (double)r->kill_ns / 1e6, v);
		waitpid(cl->pid[v], NULL, 0);
		cl->pid[v] = 0;
		cl->alive[v] = false;
		if (o->tick_us)
			r->kill_tick =
			        (unsigned)(o->kill_at_ms * 1000 / o->tick_us);
	}
	struct wl_result *m = malloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	/* Each machine's commits per tick, one column a machine, for
	 * reading a recovery machine by machine (FWL_TICKS=file). */
	uint64_t *per = getenv("FWL_TICKS") && nt
	                        ? calloc((size_t)nt * cl->n, sizeof(uint64_t))
	                        : NULL;
	int ms = (int)o->duration_ms + 120000;
	char d = 0;
	for (unsigned i = 0; i < cl->n; i++)
		if (cl->alive[i] &&
		    (wl_read_all(cl->from[i], &d, 1, ms) || d != 'D')) {
			free(m);
			snprintf(r->msg, sizeof(r->msg),
			         "machine %u did not finish its run", i);
			return -EIO;
		}
	if (send_all(cl, 'R')) {
		free(m);
		return -EIO;
	}
	for (unsigned i = 0; i < cl->n; i++) {
		if (!cl->alive[i])
			continue;
		if (wl_read_all(cl->from[i], m, sizeof(*m), 60000)) {
			free(m);
			snprintf(r->msg, sizeof(r->msg),
			         "machine %u did not report its run", i);
			return -EIO;
		}
		add_run(r, m, i);
		for (unsigned k = 0; k < nt; k++) {
			uint64_t v;
			if (wl_read_all(cl->from[i], &v, sizeof(v), 10000)) {
				free(m);
				return -EIO;
			}
			r->ticks[k] += v;
			if (per)
				per[(size_t)k * cl->n + i] = v;
		}
	}
	free(m);
	if (per)
		dump_ticks(getenv("FWL_TICKS"), per, nt, cl->n, r);
	free(per);
	return 0;
}

static int check(struct wl_cluster *cl, struct wl_result *r)
{
	unsigned c = 0;
	while (c < cl->n && !cl->alive[c])
		c++;
	char cmd = 'C';
	int rc = 0;
	struct wl_result *m = malloc(sizeof(*m));
	if (!m || wl_write_all(cl->to[c], &cmd, 1) ||
	    wl_read_all(cl->from[c], &rc, sizeof(rc), 300000) ||
	    wl_read_all(cl->from[c], m, sizeof(*m), 10000)) {
		free(m);
		return -EIO;
	}
	memcpy(r->rows, m->rows, sizeof(r->rows));
	memcpy(r->ledger, m->ledger, sizeof(r->ledger));
	r->total = m->total;
	r->ledger_delta = m->ledger_delta;
	if (rc)
		snprintf(r->msg, sizeof(r->msg), "check: %.200s", m->msg);
	/* A condition the machine's check found broken (TPC-C's). */
	if (!rc && m->check) {
		r->check = m->check;
		memcpy(r->msg, m->msg, sizeof(r->msg));
	}
	free(m);
	return rc;
}

/* After a kill the survivors must commit again: some commits from half a
 * second after the kill (the lease, then recovery) to the end. Not a
 * bound on recovery's speed: locks of the victim's transactions have
 * been seen to stall every client for about a second after it. */
static bool recovered(const struct wl_result *r)
{
	uint64_t late = 0;
	unsigned from = r->kill_tick + (unsigned)(500000 / r->tick_us);
	for (unsigned t = from; t < r->nticks; t++)
		late += r->ticks[t];
	return late > 0;
}

/* Every surviving client's acknowledged changes are in its ledgers, and
 * none it was told failed: the counts are equal. */
static void check_acked(const struct wl_opts *o, const struct wl_cluster *cl,
                        struct wl_result *r)
{
	for (unsigned i = 0; i < o->machines; i++)
		for (unsigned t = 0; cl->alive[i] && t < o->threads; t++)
			if (r->acked[i][t] != r->ledger[i][t]) {
				snprintf(r->msg, sizeof(r->msg),
				         "client %u.%u was told %llu commits; "
				         "its ledgers hold %llu",
				         i, t,
				         (unsigned long long)r->acked[i][t],
				         (unsigned long long)r->ledger[i][t]);
				r->check = -1;
				return;
			}
}

/* The invariants of what the check counted against what the load made
 * and what the clients were told. */
static void verdict(const struct wl_opts *o, const struct wl_cluster *cl,
                    struct wl_result *r)
{
	char *msg = r->msg;
	size_t len = sizeof(r->msg);
	if (o->kill_machine >= 0 && r->ticks && !recovered(r)) {
		snprintf(msg, len,
		         "no commits in the last quarter of the run: "
		         "the survivors did not recover");
		r->check = -1;
		return;
	}
	if (o->kind == WL_TPCC) {
		/* The consistency conditions (the check), then every
		 * surviving client's acknowledged new orders present and
		 * none it was told rolled back or failed. */
		if (!r->check)
			check_acked(o, cl, r);
		return;
	}
	if (o->kind == WL_TATP) {
		uint64_t cf = r->initial[3] + r->commits[WT_INS_CF] -
		              r->fails[WT_INS_CF] -
		              (r->commits[WT_DEL_CF] - r->fails[WT_DEL_CF]);
		for (int k = 0; k < 3; k++)
			if (r->rows[k] != r->initial[k]) {
				snprintf(msg, len,
				         "table %d has %llu rows, loaded %llu",
				         k, (unsigned long long)r->rows[k],
				         (unsigned long long)r->initial[k]);
				r->check = -1;
				return;
			}
		if (o->kill_machine < 0 && r->rows[3] != cf) {
			snprintf(msg, len,
			         "call_forwarding has %llu rows, want %llu",
			         (unsigned long long)r->rows[3],
			         (unsigned long long)cf);
			r->check = -1;
			return;
		}
		check_acked(o, cl, r);
		return;
	}
	/* With ledgers the total is checked whatever ended unknown; without,
	 * against what the clients were told (no kill: they know every
	 * outcome). */
	int64_t added = o->audit ? r->ledger_delta : r->acked_delta;
	if (o->audit && o->kill_machine < 0 && r->acked_delta != added) {
		snprintf(msg, len,
		         "clients were told %lld was added, ledgers "
		         "say %lld",
		         (long long)r->acked_delta, (long long)added);
		r->check = -1;
		return;
	}
	if (r->rows[0] != r->initial[0] ||
	    r->total - added != (int64_t)r->initial[1]) {
		snprintf(msg, len,
		         "%llu accounts (loaded %llu); total %lld less the "
		         "%lld added is not the loaded %lld",
		         (unsigned long long)r->rows[0],
		         (unsigned long long)r->initial[0], (long long)r->total,
		         (long long)added, (long long)(int64_t)r->initial[1]);
		r->check = -1;
		return;
	}
	if (o->audit)
		check_acked(o, cl, r);
}

int wl_run(const struct wl_opts *o, struct wl_result *r)
{
	memset(r, 0, sizeof(*r));
	char err[256];
	int rc = wl_validate(o, err, sizeof(err));
	if (rc) {
		snprintf(r->msg, sizeof(r->msg), "%s", err);
		return rc;
	}
	if (o->history && mkdir(o->history, 0700) && errno != EEXIST) {
		snprintf(r->msg, sizeof(r->msg), "history directory %.200s: %s",
		         o->history, strerror(errno));
		return -errno;
	}
	/* A kill is judged also by the survivors committing after it:
	 * count commits per 100 ms when the caller does not count them. */
	struct wl_opts ko = *o;
	if (ko.kill_machine >= 0 && !ko.tick_us)
		ko.tick_us = 100000;
	o = &ko;
	struct wl_cluster cl;
	struct saved_sigs ss;
	int bad = 0;
	cl.n = 0;
	live = &cl;
	catch_signals(&ss);
	rc = cluster_start(&cl, o);
	if (rc)
		snprintf(r->msg, sizeof(r->msg), "the cluster did not start");
	if (!rc)
		rc = load(&cl, r);
	if (!rc)
		rc = run(&cl, o, r);
	if (!rc)
		rc = check(&cl, r);
	if (!rc)
		verdict(o, &cl, r);
	cluster_end(&cl, rc != 0, &bad);
	if (!rc && bad) {
		snprintf(r->msg, sizeof(r->msg), "a machine failed");
		rc = -EIO;
	}
	if (signalled) {
		snprintf(r->msg, sizeof(r->msg), "interrupted by signal %d",
		         (int)signalled);
		rc = -EINTR;
	}
	restore_signals(&ss);
	return rc;
}
