/*
 * The fault campaign (campaign.h), the parent: the faults, their order
 * drawn from the seed, and how each is applied.
 */
#include "campaign.h"

uint64_t cp_rng;

unsigned cp_draw(unsigned n)
{
	return (unsigned)(farm_rand64(&cp_rng) % n);
}

static void zk_do(struct fails *f, const char *verb, unsigned k)
{
	char line[128];
	int st = tu_zk_member(rb_zk_script, rb_zk_dir, k, verb, line,
	                      sizeof(line));
	if (st)
		failed(f,
		       "zk-local %s of ZooKeeper server %u: %d (log: %s/%u/"
		       "zk.log)",
		       verb, k, st, rb_zk_dir, k);
}

static unsigned zk_wait_leader(unsigned not )
{
	uint64_t dl = np_now_ns() + CP_ELECT_MS * 1000000ull;
	for (;;) {
		unsigned k = zkl_leader(rb_zk_script, rb_zk_dir, CP_ZK);
		if ((k && k != not ) || np_now_ns() >= dl)
			return k != not ? k : 0;
		pause_ms(20);
	}
}

/* A live machine whose loss must be followed by a copy: a replica of a
 * region that has no extra backup (the region's next replica then holds
 * no copy of it). Where a late machine grows into a region as its extra
 * (ring.h, growth), the loss of a replica may make the extra a replica
 * with its copy complete, and no copy follows: the campaign found cycle
 * 4 of seed 66838 (restart_copy) waiting 20 s for one. Else any machine
 * that holds a region (a late machine may hold none: then no copy would
 * follow its loss). */
static unsigned cp_copy_victim(void)
{
	uint64_t sure = 0, holders = 0;
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct held_report *r = cp_ask_held(i);
		if (r->n)
			holders |= 1ull << i;
		for (unsigned k = 0; k < r->n; k++)
			if (r->h[k].extra == FARM_RING_NO_EXTRA &&
			    r->h[k].nreps == CP_REPLICAS)
				sure |= 1ull << i;
		free(r);
	}
	assert_true(holders != 0);
	uint64_t from = sure ? sure : holders;
	return cp_nth(from, cp_draw(cp_count(from)));
}

/* Until some live machine copies a region (data recovery): whether one
 * was seen within 20 s. */
static bool cp_await_copying(void)
{
	uint64_t dl = np_now_ns() + 20000000000ull;
	while (np_now_ns() < dl) {
		for (unsigned i = 0; i < 64; i++) {
			if (!cp_is(cp_live, i))
				continue;
			struct held_report *r = cp_ask_held(i);
			bool copying = rp_copying(r);
			free(r);
			if (copying)
				return true;
		}
		pause_ms(2);
	}
	return false;
}

/* A machine that holds a region killed (into *@v and *@gone), its
 * configuration awaited, then a copy awaited: 0 when one was seen in
 * progress; 2 when none was and every region is complete already (at
 * exactly its replicas, all machines in one configuration: none was
 * needed, or one ran between two looks; either way the fault's premise
 * failed, not the system); 1 when none was and replicas are still short
 * (what every machine holds is printed); -1 (failed into @f) when no
 * configuration without it came. Before a second fault that must come
 * during data recovery. */
static int cp_kill_until_copying(unsigned *v, uint64_t *gone, struct fails *f)
{
	char why[256];
	*v = cp_copy_victim();
	cp_kill(*v);
	*gone = 1ull << *v;
	if (cp_await_config(CP_RECONF_MS, why, sizeof(why))) {
		failed(f, "no configuration without machine %u: %s", *v, why);
		return -1;
	}
	/* Once some new backup has read part of a region. */
	if (cp_await_copying())
		return 0;
	unsigned nreg;
	if (!cp_await_replicated(0, why, sizeof(why), &nreg)) {
		printf("campaign: no copy seen in progress after machine %u's "
		       "kill, and %u regions are complete at their "
		       "replicas\n",
		       *v, nreg);
		return 2;
	}
	printf("campaign: no copy after machine %u's kill, and %s\n", *v, why);
	cp_dump_held();
	return 1;
}

/* Every live machine at once: stopped first, each waited on until it
 * has stopped (tu_stop), so that none sees another die and reconfigures
 * in between (a power loss takes all at once; test_restart does the
 * same), killed, then restarted on its directory;
 * their histories go on in the same files. The machines in *@n, the
 * transactions left open in *@sealed; the time until all were up. */
static double cp_restart_all(unsigned *n, unsigned *sealed)
{
	uint64_t all = cp_live;
	*n = cp_count(all);
	*sealed = 0;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			assert_int_equal(tu_stop(rb_cl.pid[i]), 0);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			cp_kill(i);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i)) {
			int rc = tx_hist_seal(&rb_cl, i);
			assert_true(rc >= 0);
			*sealed += (unsigned)rc;
			cp_killed &= ~(1ull << i);
		}
	uint64_t t = np_now_ns();
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i)) {
			cp_args[i] =
			        (struct cp_arg){.mode = CP_RESTART, .n = *n};
			np_spawn_one(&rb_cl, i, cp_machine, &cp_args[i]);
		}
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			np_expect(&rb_cl, i, 'R', CP_JOIN_MS + 30000);
	double up = (double)(np_now_ns() - t) / 1e6;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			np_expect(&rb_cl, i, 'C', 60000);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(all, i))
			np_send(&rb_cl, i, 'G');
	cp_live = all;
	return up;
}

/* The refusals every live machine counted, summed, in @r. */
static void cp_refusals_sum(struct cp_refusals *r)
{
	memset(r, 0, sizeof(*r));
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			struct cp_refusals x;
			np_send(&rb_cl, i, 'u');
			np_expect(&rb_cl, i, 'U', 30000);
			np_recv(&rb_cl, i, &x, sizeof(x), 1000);
			r->frames += x.frames;
			r->lease += x.lease;
			r->stale += x.stale;
			r->rec += x.rec;
		}
}

/* The process in slot @from moves to slot @to (the parent's pipes and
 * pid), which frees @from's for a new holder of its id. */
static void cp_slot_move(unsigned from, unsigned to)
{
	rb_cl.pid[to] = rb_cl.pid[from];
	rb_cl.to[to] = rb_cl.to[from];
	rb_cl.from[to] = rb_cl.from[from];
	rb_cl.pid[from] = 0;
	rb_cl.to[from] = rb_cl.from[from] = -1;
}

/* The zombie's counts against what it must have done: every request
 * after SIGCONT fenced, no transfer committed, its removal known. */
static void cp_zombie_judge(unsigned v, const struct cp_zombie *z,
                            struct fails *f)
{
	zp_print("before the stop (control)", &z->control);
	zp_print("after SIGCONT", &z->after);
	printf("zombie %u after SIGCONT: %" PRIu64
	       " transfers committed, %" PRIu64 " attempts, %" PRIu64
	       " given up; %" PRIu64 " messages and %" PRIu64
	       " frames sent, %" PRIu64 " calls timed out, %" PRIu64
	       " peer deaths; %s removed "
	       "%" PRIu64 " ms after it began\n",
	       v, z->k.transfers, z->k.attempts, z->k.failed, z->sent,
	       z->frames, z->timeouts, z->peerdead,
	       z->removed ? "knew it was" : "did NOT know it was",
	       z->t_know_ms);
	if (z->control.executed[ZP_READ] != ZP_TARGETS ||
	    z->control.executed[ZP_CAS] != ZP_TARGETS)
		failed(f,
		       "zombie %u: the control requests before the stop "
		       "did not all execute: the probes prove nothing",
		       v);
	for (int op = 0; op < ZP_NOPS; op++)
		if (z->after.fenced[op] != ZP_TARGETS || z->after.executed[op])
			failed(f,
			       "zombie %u: %u of %u %ss after SIGCONT "
			       "fenced, %u executed",
			       v, z->after.fenced[op], ZP_TARGETS,
			       zp_op_name(op), z->after.executed[op]);
	if (z->k.transfers)
		failed(f,
		       "zombie %u committed %" PRIu64 " transfers after "
		       "its id was taken",
		       v, z->k.transfers);
	if (!z->removed)
		failed(f, "zombie %u did not learn it was removed", v);
}

/* The zombie in slot @slot (machine @v) has said it stopped: reap it and
 * close its pipes; it must have exited cleanly. */
static void cp_reap_zombie(unsigned slot, unsigned v, struct fails *f)
{
	int st = tu_reap(rb_cl.pid[slot]);
	rb_cl.pid[slot] = 0;
	close(rb_cl.to[slot]);
	close(rb_cl.from[slot]);
	rb_cl.to[slot] = rb_cl.from[slot] = -1;
	if (st)
		failed(f, "machine %u (the zombie) exited with %d", v, st);
}

/* zombie_reuse (cp_fault): see the head of campaign.h. */
static void cp_zombie_reuse(struct cp_cycle *cy, struct fails *f)
{
	unsigned cm = cp_cm();
	uint64_t others = cp_live & ~(1ull << cm);
	unsigned v = cp_nth(others, cp_draw(cp_count(others)));
	char why[256] = "";
	struct cp_counts n;
	struct cp_zombie z = {0};
	np_send(&rb_cl, v, 'P');
	np_expect(&rb_cl, v, 'p', 60000);
	np_recv(&rb_cl, v, &n, sizeof(n), 1000);
	np_send(&rb_cl, v, 'z');
	np_expect(&rb_cl, v, 'z', 60000);
	np_recv(&rb_cl, v, &z.control, sizeof(z.control), 1000);
	uint64_t t = np_now_ns();
	assert_int_equal(tu_stop(rb_cl.pid[v]), 0);
	cp_live &= ~(1ull << v);
	cp_slot_move(v, CP_ZSLOT);
	if (cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f,
		       "machine %u stopped: no configuration without it "
		       "within %d ms: %s",
		       v, CP_RECONF_MS, why);
	else if (!cp_add_reused(v))
		failed(f, "a new holder of id %u was not admitted", v);
	else if (cp_await_config(CP_RECONF_MS, why, sizeof(why)))
		failed(f, "after id %u's new holder joined: %s", v, why);
	double stopped = (double)(np_now_ns() - t) / 1e6;
	struct cp_refusals r0, r1;
	cp_refusals_sum(&r0);
	assert_int_equal(kill(rb_cl.pid[CP_ZSLOT], SIGCONT), 0);
	np_send(&rb_cl, CP_ZSLOT, 'Y');
	np_expect(&rb_cl, CP_ZSLOT, 'Z',
	          CP_ZOMBIE_ACT_MS + CP_ZOMBIE_KNOW_MS + 60000);
	struct zp_counts control = z.control;
	np_recv(&rb_cl, CP_ZSLOT, &z, sizeof(z), 1000);
	z.control = control;
	cp_reap_zombie(CP_ZSLOT, v, f);
	snprintf(cy->what, sizeof(cy->what),
	         "SIGSTOP machine %u %.0f ms, id reused, SIGCONT", v, stopped);
	/* A zombie let in may have broken the others (their channels, their
	 * logs): judged first, and nothing more asked of them then. */
	unsigned nf = f->n;
	cp_zombie_judge(v, &z, f);
	if (f->n != nf)
		return;
	cp_refusals_sum(&r1);
	printf("zombie %u: the others refused %" PRIu64 " frames, %" PRIu64
	       " lease messages, %" PRIu64 " stale LOCK records, %" PRIu64
	       " recovery messages meanwhile\n",
	       v, r1.frames - r0.frames, r1.lease - r0.lease,
	       r1.stale - r0.stale, r1.rec - r0.rec);
	/* Its frames and log records are fenced at the fabric (shm): they
	 * never reach the others' counters. Its lease REQUESTs do, and must
	 * be counted refused at the CM. */
	if (r1.lease == r0.lease)
		failed(f,
		       "zombie %u: no lease message was refused while it "
		       "ran: its lease REQUESTs went unseen or were taken",
		       v);
}

/* sigstop (cp_fault): see the head of campaign.h. */
static void cp_sigstop(uint64_t others, struct cp_cycle *cy, uint64_t *gone,
                       struct fails *f)
{
	char why[256] = "";
	unsigned v = cp_nth(others, cp_draw(cp_count(others)));
	uint64_t t = np_now_ns();
	assert_int_equal(tu_stop(rb_cl.pid[v]), 0);
	cp_live &= ~(1ull << v);
	int rc = cp_await_config(CP_RECONF_MS, why, sizeof(why));
	double stopped = (double)(np_now_ns() - t) / 1e6;
	assert_int_equal(kill(rb_cl.pid[v], SIGCONT), 0);
	if (rc)
		failed(f,
		       "machine %u stopped: no configuration "
		       "without it within %d ms: %s",
		       v, CP_RECONF_MS, why);
	/* It must learn it was removed, and stop. */
	struct cp_counts n;
	np_expect(&rb_cl, v, 'Z', 60000);
	np_recv(&rb_cl, v, &n, sizeof(n), 1000);
	cp_reap_zombie(v, v, f);
	*gone = 1ull << v;
	snprintf(cy->what, sizeof(cy->what),
	         "SIGSTOP machine %u %.0f ms, SIGCONT", v, stopped);
}

/* --hold-end: those of @others that hold no copy of some region machine
 * CP_HOLD backs up (cold objects can go there), and in *@prim for each
 * such machine the primary of one such region; @others when none does. */
static uint64_t cp_cold_victims(uint64_t others, unsigned *prim)
{
	struct held_report *r = cp_ask_held(CP_HOLD);
	uint64_t can = 0;
	for (unsigned k = 0; k < r->n; k++) {
		const struct rp_held *h = &r->h[k];
		if (h->nreps < 2 || h->reps[0] == CP_HOLD || h->reps[0] >= 64 ||
		    !cp_is(cp_live, h->reps[0]))
			continue;
		uint64_t in = 0;
		for (unsigned x = 0; x < h->nreps; x++)
			in |= h->reps[x] < 64 ? 1ull << h->reps[x] : 0;
		for (unsigned v = 0; v < 64; v++)
			if (cp_is(others & ~in & ~can, v))
				prim[v] = h->reps[0];
		can |= others & ~in;
	}
	free(r);
	return can ? can : others;
}

/* --hold-end: machine @v, about to be killed, writes the cold objects
 * machine @p (the primary of a region CP_HOLD backs up and @v holds no
 * copy of) made (cp_make_cold, cp_write_cold), both paused meanwhile:
 * the images CP_HOLD gets only if recovery applies the COMMIT-BACKUPs its
 * log of @v holds, which the comparison of copies then checks. */
static void cp_cold_before_kill(unsigned v, unsigned p)
{
	struct cp_counts n;
	unsigned made = 0, wrote = 0;
	if (p < 64 && p != v) {
		np_send(&rb_cl, p, 'P');
		np_expect(&rb_cl, p, 'p', 60000);
		np_recv(&rb_cl, p, &n, sizeof(n), 1000);
		np_send(&rb_cl, p, 'W');
		np_expect(&rb_cl, p, 'w', 60000);
		np_recv(&rb_cl, p, &made, sizeof(made), 1000);
		np_send(&rb_cl, p, 'r');
	}
	np_send(&rb_cl, v, 'P');
	np_expect(&rb_cl, v, 'p', 60000);
	np_recv(&rb_cl, v, &n, sizeof(n), 1000);
	np_send(&rb_cl, v, 'K');
	np_expect(&rb_cl, v, 'k', 60000);
	np_recv(&rb_cl, v, &wrote, sizeof(wrote), 1000);
	printf("campaign: machine %u made %u cold objects, machine %u wrote "
	       "%u of them (backed up at machine %u), then is killed\n",
	       p, made, v, wrote, CP_HOLD);
}

/* Apply fault @fl; the machines that left in *@gone (to be replaced, in
 * their domains). Failures in @f. */
/* Both live machines of a domain that has two (a and b, by the layout),
 * killed at once. */
static void cp_fault_domain(unsigned cm, struct cp_cycle *cy, uint64_t *gone)
{
	unsigned pick[3], n = 0;
	for (unsigned d = 0; d < 3; d++) {
		unsigned k = 0;
		for (unsigned i = 0; i < 64; i++)
			k += cp_is(cp_live, i) && cp_dom[i] == d;
		if (k == 2)
			pick[n++] = d;
	}
	assert_true(n > 0);
	unsigned d = pick[cp_draw(n)], a = NP_NM, b = NP_NM;
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i) && cp_dom[i] == d)
			*(a == NP_NM ? &a : &b) = i;
	cp_kill(a);
	cp_kill(b);
	*gone = (1ull << a) | (1ull << b);
	snprintf(cy->what, sizeof(cy->what), "kill -9 %s (machines %u, %u)%s",
	         cp_zone[d], a, b,
	         a == cm || b == cm ? ", the CM among them" : "");
}

/* A machine killed, and a second one (F_COPY_KILL) or all (F_RESTART_COPY:
 * killed and restarted) while the first one's data is being copied. */
static void cp_fault_copying(enum cp_fault fl, struct cp_cycle *cy,
                             uint64_t *gone, struct fails *f)
{
	unsigned v;
	int c = cp_kill_until_copying(&v, gone, f);
	if (c < 0)
		return;
	const char *how =
	        c == 2 ? "(no copy seen, none short)" : "while copying";
	if (fl == F_COPY_KILL) {
		unsigned w = cp_nth(cp_live, cp_draw(cp_count(cp_live)));
		cp_kill(w);
		*gone |= 1ull << w;
		snprintf(cy->what, sizeof(cy->what),
		         "kill -9 machine %u, machine %u %s", v, w, how);
	} else {
		unsigned n, sealed;
		double up = cp_restart_all(&n, &sealed);
		snprintf(cy->what, sizeof(cy->what),
		         "kill -9 machine %u, all %u restarted %s (up in "
		         "%.0f ms)",
		         v, n, how, up);
	}
	if (c == 1)
		failed(f,
		       "no copy was seen in progress after machine %u's kill: "
		       "the %s did not come during data recovery",
		       v, fl == F_COPY_KILL ? "second kill" : "restart");
}

/* The ZooKeeper leader killed until another leads, restarted; then the
 * new leader the same way. */
static void cp_fault_zk(struct cp_cycle *cy, struct fails *f)
{
	unsigned k1 = zk_wait_leader(0);
	if (!k1) {
		failed(f, "no ZooKeeper server leads");
		return;
	}
	zk_do(f, "kill", k1);
	if (!zk_wait_leader(k1))
		failed(f,
		       "no ZooKeeper server led within %d ms of server %u's "
		       "kill",
		       CP_ELECT_MS, k1);
	zk_do(f, "start", k1);
	unsigned k2 = zk_wait_leader(0);
	if (!k2) {
		failed(f, "no ZooKeeper server leads after server %u's restart",
		       k1);
		return;
	}
	zk_do(f, "kill", k2);
	if (!zk_wait_leader(k2))
		failed(f,
		       "no ZooKeeper server led within %d ms of server %u's "
		       "kill",
		       CP_ELECT_MS, k2);
	zk_do(f, "start", k2);
	snprintf(cy->what, sizeof(cy->what),
	         "ZooKeeper servers %u, then %u killed, restarted", k1, k2);
}

void cp_fault(enum cp_fault fl, struct cp_cycle *cy, uint64_t *gone,
              struct fails *f)
{
	unsigned cm = cp_cm();
	uint64_t others = cp_live & ~(1ull << cm);
	if (opt_hold_end && others != 1ull << CP_HOLD)
		others &= ~(1ull << CP_HOLD); /* it must see the round */
	unsigned prim[64];
	for (unsigned i = 0; i < 64; i++)
		prim[i] = NP_NM;
	if (opt_hold_end)
		others = cp_cold_victims(others, prim);
	*gone = 0;
	switch (fl) {
	case F_KILL_MEMBER:
	case F_KILL_CM: {
		unsigned v =
		        fl == F_KILL_CM
		                ? cm
		                : cp_nth(others, cp_draw(cp_count(others)));
		if (opt_hold_end)
			cp_cold_before_kill(v, prim[v]);
		cp_kill(v);
		*gone = 1ull << v;
		snprintf(cy->what, sizeof(cy->what), "kill -9 machine %u%s", v,
		         v == cm ? " (CM)" : "");
		break;
	}
	case F_SIGSTOP: cp_sigstop(others, cy, gone, f); break;
	case F_DOMAIN: cp_fault_domain(cm, cy, gone); break;
	case F_COPY_KILL:
	case F_RESTART_COPY: cp_fault_copying(fl, cy, gone, f); break;
	case F_RESTART: {
		unsigned n, sealed;
		double up = cp_restart_all(&n, &sealed);
		snprintf(cy->what, sizeof(cy->what),
		         "kill -9 all %u, restart (up in %.0f ms; %u open "
		         "txns)",
		         n, up, sealed);
		break;
	}
	case F_ZK_KILL: cp_fault_zk(cy, f); break;
	case F_ZOMBIE_REUSE: cp_zombie_reuse(cy, f); break;
	default: fail_msg("no fault %d", (int)fl);
	}
}

/* The faults' order: every fault in use once per round, shuffled (or the
 * list given, in its order, with --order). */
void cp_order(enum cp_fault *order)
{
	unsigned nuse = 0, nord = 0;
	enum cp_fault use[F_COUNT];
	for (unsigned i = 0; i < F_COUNT; i++)
		if (opt_use[i])
			use[nuse++] = (enum cp_fault)i;
	assert_true(nuse > 0 && opt_cycles <= 1024);
	while (opt_order && nord < opt_cycles) {
		order[nord] = opt_list[nord % opt_nlist];
		nord++;
	}
	while (nord < opt_cycles) {
		enum cp_fault r[F_COUNT];
		memcpy(r, use, sizeof(r));
		for (unsigned i = nuse - 1; i > 0; i--) {
			unsigned j = cp_draw(i + 1);
			enum cp_fault t = r[i];
			r[i] = r[j];
			r[j] = t;
		}
		for (unsigned i = 0; i < nuse && nord < opt_cycles; i++)
			order[nord++] = r[i];
	}
}
