/*
 * The fault campaign (campaign.h), the parent: one cycle. The fault,
 * the cluster made whole again, the checks.
 */
#include "campaign.h"

/* Remove the directories of the machines in @gone, and those whose
 * removal failed before. A gone machine may still be running (a SIGSTOPped
 * one, resumed, notices its removal and exits on its own) and creating
 * files there, so a removal that fails is tried again at the next cycle,
 * by path (a new holder of the id has a directory of its own): it frees
 * memory, it checks nothing. */
static void cp_remove_dirs(uint64_t gone)
{
	static char left[64][sizeof(rb_cl.dir[0])]; /* to try again */
	for (unsigned i = 0; i < 64; i++) {
		if (left[i][0] && !tu_rmtree(left[i]))
			left[i][0] = '\0';
		if (!cp_is(gone, i) || !tu_rmtree(rb_cl.dir[i]))
			continue;
		printf("campaign: machine %u's directory %s not removed yet "
		       "(still running?): again next cycle\n",
		       i, rb_cl.dir[i]);
		memcpy(left[i], rb_cl.dir[i], sizeof(left[i]));
	}
}

static struct cp_times cp_ask_times(unsigned i)
{
	struct cp_times t;
	np_send(&rb_cl, i, 't');
	np_expect(&rb_cl, i, 'T', 30000);
	np_recv(&rb_cl, i, &t, sizeof(t), 1000);
	return t;
}

/* --slow-replace: each new holder of an id in @gone sent its first
 * requests only after every other member had ended its hold, that is
 * once that member's loops could start their channels with it afresh:
 * a request let in before would be answered on the old holder's channel
 * wherever the old holder had sent nothing (the answer is lost). */
static void cp_check_holds(uint64_t gone, struct fails *f)
{
	for (unsigned r = 0; r < 64; r++) {
		if (!cp_is(gone, r) || !cp_is(cp_live, r))
			continue;
		uint64_t asked = cp_ask_times(r).asked_at;
		for (unsigned i = 0; i < 64; i++) {
			if (i == r || !cp_is(cp_live, i))
				continue;
			uint64_t held = cp_ask_times(i).held_until;
			if (!asked || held > asked)
				failed(f,
				       "machine %u (a new holder of its id) "
				       "sent its first requests %.0f ms "
				       "before machine %u started its "
				       "channels with it afresh",
				       r,
				       asked ? (double)(held - asked) / 1e6
				             : 0.0,
				       i);
		}
	}
}

/* The phase that ends now (CP_PH_*) took from *@tp; *@tp moves on. */
static double cp_phase(struct cp_cycle *cy, unsigned ph, uint64_t *tp)
{
	return cy->ph[ph] = cp_ms_since(tp);
}

/* Where cycle @c's time went. */
static void cp_print_phases(unsigned c, const struct cp_cycle *cy)
{
	printf("cycle %u: ms: run %.0f, fault %.0f, removed %.0f, joined "
	       "%.0f, whole %.0f, copies %.0f, pause %.0f, checks %.0f%s\n",
	       c, cy->ph[CP_PH_RUN], cy->ph[CP_PH_FAULT], cy->ph[CP_PH_REMOVED],
	       cy->ph[CP_PH_JOIN], cy->ph[CP_PH_WHOLE], cy->ph[CP_PH_COPIES],
	       cy->ph[CP_PH_PAUSE], cy->ph[CP_PH_CHECKS],
	       cy->full ? " (whole histories)" : "");
}

/* One cycle: the fault, the cluster made whole again, the checks. */
/* Replacements for the machines @gone: new ids, empty directories, the
 * same domains (or, --reuse, their own ids again). The gone machines'
 * directories go first: none of them runs again, and 500 cycles of 16 MB
 * regions would fill /dev/shm (about 70 MB a cycle). @added: what was
 * added, for the log. */
static void cp_replace(uint64_t gone, char *added, size_t cap, struct fails *f)
{
	cp_remove_dirs(opt_keep_dirs ? 0 : gone);
	for (unsigned i = 0; opt_reuse_measure && i < NP_NM; i++)
		if (cp_is(gone, i))
			cp_rm_keep(i);
	size_t o = 0;
	added[0] = 0;
	for (unsigned i = 0; !f->n && i < 64; i++)
		if (cp_is(gone, i) && opt_reuse) {
			if (!cp_add_reused(i))
				failed(f,
				       "a new holder of id %u was not "
				       "admitted",
				       i);
			o += (size_t)snprintf(added + o, cap - o, "%s%u'",
			                      o ? "," : "", i);
		} else if (cp_is(gone, i)) {
			unsigned id = cp_add(cp_dom[i]);
			o += (size_t)snprintf(added + o, cap - o, "%s%u",
			                      o ? "," : "", id);
		}
}

/* The live machines' counters (@n, paused) so far, for the log. */
static void cp_print_counts(unsigned c, const struct cp_counts *n)
{
	uint64_t tr = 0, kv = 0, failedtx = 0;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			tr += n[i].k.transfers;
			failedtx += n[i].k.failed;
			kv += n[i].lin.found + n[i].lin.absent + n[i].lin.puts +
			      n[i].lin.del_found + n[i].lin.del_absent;
		}
	printf("cycle %u: the live machines so far: %" PRIu64
	       " transfers committed (%" PRIu64 " given up), %" PRIu64
	       " KV operations answered\n",
	       c, tr, failedtx, kv);
}

/* After the fault: the configuration without the gone machines, their
 * replacements joined, every region fully replicated again. */
static void cp_recover(unsigned c, uint64_t gone, struct cp_cycle *cy,
                       uint64_t *tp, struct fails *f)
{
	char why[256] = "", added[64];
	if (!f->n && cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f, "after the fault: %s", why);
	cp_phase(cy, CP_PH_REMOVED, tp);
	cp_replace(gone, added, sizeof(added), f);
	cp_phase(cy, CP_PH_JOIN, tp);
	if (!f->n && cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f, "after the replacements joined: %s", why);
	if (!f->n && opt_slow_replace)
		cp_check_holds(gone, f);
	cp_phase(cy, CP_PH_WHOLE, tp);
	unsigned nreg = 0;
	if (!f->n && cp_await_replicated(CP_REPL_MS, why, sizeof(why), &nreg)) {
		failed(f, "not fully replicated within %d ms: %s", CP_REPL_MS,
		       why);
		cp_dump_held();
	}
	double rep_ms = cp_phase(cy, CP_PH_COPIES, tp);
	if (getenv("FARM_CAMPAIGN_VERBOSE"))
		cp_dump_held(); /* and after the cluster is whole again */
	for (unsigned i = 0; !f->n && opt_reuse && i < 64; i++)
		if (cp_is(gone, i) && cp_is(cp_live, i))
			cp_new_holder_copies(c, i);
	printf("cycle %u: %s; replaced by %s; %u regions fully replicated "
	       "%.0f ms after the cluster was whole again\n",
	       c, cy->what, added[0] ? added : "none", nreg, rep_ms);
}

void cp_cycle(unsigned c, enum cp_fault fl, struct cp_cycle *cy,
              struct fails *f)
{
	uint64_t t0 = np_now_ns(), tp = t0;
	cy->fault = fl;
	/* The workloads run a while first: 0.3 to 1.5 s. */
	pause_ms(300 + cp_draw(1200));
	cp_phase(cy, CP_PH_RUN, &tp);
	uint64_t gone;
	if (getenv("FARM_CAMPAIGN_VERBOSE"))
		cp_dump_held(); /* where every copy is, before the fault */
	cp_fault(fl, cy, &gone, f);
	cp_phase(cy, CP_PH_FAULT, &tp);
	bool fault_failed = f->n > 0;
	cp_recover(c, gone, cy, &tp, f);
	struct cp_counts *n = calloc(NP_NM, sizeof(*n));
	assert_non_null(n);
	/* A fault that failed may have left machines gone: the campaign
	 * stops at this cycle, nothing is paused. */
	bool paused = !fault_failed;
	if (paused)
		cp_pause(n);
	cp_phase(cy, CP_PH_PAUSE, &tp);
	if (!f->n)
		cp_check(cy, f);
	cp_phase(cy, CP_PH_CHECKS, &tp);
	cp_print_counts(c, n);
	free(n);
	if (paused)
		cp_resume();
	cy->secs = (double)(np_now_ns() - t0) / 1e9;
	cy->ok = f->n == 0;
	cp_print_phases(c, cy);
}
