/*
 * The fault campaign (campaign.h), the parent: the cluster. Its
 * machines started, killed and added, and awaited in one
 * configuration and at full replication.
 */
#include "campaign.h"

const char *const cp_zone[3] = {"zone-a", "zone-b", "zone-c"};

unsigned cp_dom[NP_NM];

/* The copies of the new holders of ids (campaign.h, --keep-dirs). */
uint64_t cp_new_read, cp_new_taken, cp_new_copies;

uint64_t cp_live;        /* machines running (bits) */
uint64_t cp_used;        /* machines that ever ran the workloads */
uint64_t cp_killed;      /* killed with SIGKILL: histories may end open */
static uint32_t cp_next; /* the next new machine id */
struct cp_arg cp_args[NP_NM];

void pause_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

bool cp_is(uint64_t mask, unsigned i)
{
	return i < 64 && ((mask >> i) & 1);
}

unsigned cp_count(uint64_t mask)
{
	return (unsigned)__builtin_popcountll(mask);
}

unsigned cp_lowest(uint64_t mask)
{
	return mask ? (unsigned)__builtin_ctzll(mask) : NP_NM;
}

/* The @k-th machine of @mask. */
unsigned cp_nth(uint64_t mask, unsigned k)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(mask, i) && k-- == 0)
			return i;
	return NP_NM;
}

static unsigned cp_gen[NP_NM]; /* holders of each id so far */

static void cp_dir(unsigned id)
{
	char d[sizeof(rb_cl.dir[id])];
	if (cp_gen[id]++)
		snprintf(d, sizeof(d), "%.240s/m%u.%u", rb_cl.root, id,
		         cp_gen[id] - 1);
	else
		snprintf(d, sizeof(d), "%.250s/m%u", rb_cl.root, id);
	memcpy(rb_cl.dir[id], d, sizeof(d));
	assert_int_equal(mkdir(rb_cl.dir[id], 0700), 0);
}

static struct cp_state cp_ask_state(unsigned i)
{
	struct cp_state s;
	np_send(&rb_cl, i, 'v');
	np_expect(&rb_cl, i, 'V', 30000);
	np_recv(&rb_cl, i, &s, sizeof(s), 1000);
	return s;
}

struct held_report *cp_ask_held(unsigned i)
{
	struct held_report *r = malloc(sizeof(*r));
	assert_non_null(r);
	np_send(&rb_cl, i, 'g');
	np_expect(&rb_cl, i, 'G', 30000);
	np_recv(&rb_cl, i, r, sizeof(*r), 1000);
	return r;
}

/* --reuse: what the new holder @i of a killed machine's id copied in
 * cycle @c: bytes its data recovery READ and those it took from its old
 * copies (--keep-dirs), its copies complete. */
void cp_new_holder_copies(unsigned c, unsigned i)
{
	struct held_report *r = cp_ask_held(i);
	uint64_t rd = 0, tk = 0, sm = 0;
	unsigned n = 0;
	for (unsigned k = 0; k < r->ndr && k < RP_MAXREG; k++) {
		const struct farm_datarec_region *d = &r->dr[k];
		if (d->state != FARM_DATAREC_DONE)
			continue;
		n++;
		rd += d->bytes;
		tk += d->stale;
		sm += d->summary;
	}
	free(r);
	cp_new_read += rd;
	cp_new_taken += tk;
	cp_new_copies += n;
	printf("cycle %u: new holder of id %u: %u copies READ %" PRIu64
	       " bytes (%" PRIu64 " of them summaries) and took %" PRIu64
	       " from its old copies\n",
	       c, i, n, rd, sm, tk);
}

/* The configuration manager, as the lowest live machine sees it. */
unsigned cp_cm(void)
{
	struct cp_state s = cp_ask_state(cp_lowest(cp_live));
	return s.has_cm ? s.cm : cp_lowest(cp_live);
}

void cp_start(void)
{
	memset(&rb_cl, 0, sizeof(rb_cl));
	for (unsigned i = 0; i < NP_NM; i++)
		rb_cl.to[i] = rb_cl.from[i] = -1;
	tu_tmpdir(rb_cl.root, sizeof(rb_cl.root), "campaign");
	snprintf(rb_zk_root, sizeof(rb_zk_root), "/libfarm/campaign-%d",
	         (int)getpid());
	for (unsigned i = 0; i < CP_NM0; i++) {
		cp_dom[i] = i / 2;
		cp_dir(i);
		cp_args[i] = (struct cp_arg){.mode = CP_FIRST};
	}
	for (unsigned i = 0; i < CP_NM0; i++)
		np_spawn_one(&rb_cl, i, cp_machine, &cp_args[i]);
	for (unsigned i = 0; i < CP_NM0; i++)
		np_expect(&rb_cl, i, 'R', CP_JOIN_MS + 30000);
	for (unsigned i = 0; i < CP_NM0; i++)
		np_expect(&rb_cl, i, 'C', 60000);
	for (unsigned i = 0; i < CP_NM0; i++)
		np_send(&rb_cl, i, 'G');
	cp_live = cp_used = (1ull << CP_NM0) - 1;
	cp_next = CP_NM0;
}

/* Machine @i killed with SIGKILL, reaped. */
void cp_kill(unsigned i)
{
	assert_int_equal(kill(rb_cl.pid[i], SIGKILL), 0);
	assert_int_equal(tu_reap(rb_cl.pid[i]), 128 + SIGKILL);
	rb_cl.pid[i] = 0;
	close(rb_cl.to[i]);
	close(rb_cl.from[i]);
	rb_cl.to[i] = rb_cl.from[i] = -1;
	cp_live &= ~(1ull << i);
	cp_killed |= 1ull << i;
}

/* Every live machine runs a configuration of exactly the live machines
 * (within @ms): 0, or -1 with the reason in @why. */
int cp_await_config(unsigned ms, char *why, size_t len)
{
	uint64_t dl = np_now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < 64 && all; i++) {
			if (!cp_is(cp_live, i))
				continue;
			struct cp_state s = cp_ask_state(i);
			if (s.removed || s.members != cp_live) {
				all = false;
				snprintf(why, len,
				         "machine %u: configuration %" PRIu64
				         " has members %#" PRIx64
				         ", expected %#" PRIx64 "%s",
				         i, s.config, s.members, cp_live,
				         s.removed ? " (it was removed)" : "");
			}
		}
		if (all)
			return 0;
		if (np_now_ns() > dl)
			return -1;
		pause_ms(20);
	}
}

/* A new machine (a new id, an empty directory) in domain @dom joins the
 * running cluster and starts its workloads. */
unsigned cp_add(unsigned dom)
{
	unsigned id = cp_next++;
	assert_true(id < NP_NM);
	cp_dom[id] = dom;
	cp_dir(id);
	cp_args[id] =
	        (struct cp_arg){.mode = CP_LATE, .from = cp_lowest(cp_live)};
	np_spawn_one(&rb_cl, id, cp_machine, &cp_args[id]);
	np_expect(&rb_cl, id, 'R', CP_JOIN_MS + 30000);
	np_expect(&rb_cl, id, 'C', 60000);
	np_send(&rb_cl, id, 'G');
	cp_live |= 1ull << id;
	cp_used |= 1ull << id;
	return id;
}

/* --reuse: a new holder of killed machine @id's id (an empty directory,
 * the same domain) joins late and starts its workloads; its histories go
 * on in the id's files, the killed holder's sealed first. false: it was
 * not admitted (the old id rule). */
bool cp_add_reused(unsigned id)
{
	assert_true(tx_hist_seal(&rb_cl, id) >= 0);
	cp_killed &= ~(1ull << id);
	if (!opt_keep_dirs) /* else its old directory, as the kill left it */
		cp_dir(id);
	cp_args[id] = (struct cp_arg){
	        .mode = CP_LATE, .from = cp_lowest(cp_live), .reused = 1};
	np_spawn_one(&rb_cl, id, cp_machine, &cp_args[id]);
	char t = 0;
	np_recv(&rb_cl, id, &t, 1, CP_JOIN_MS + 30000);
	if (t == 'X') {
		assert_int_equal(tu_reap(rb_cl.pid[id]), 0);
		rb_cl.pid[id] = 0;
		close(rb_cl.to[id]);
		close(rb_cl.from[id]);
		rb_cl.to[id] = rb_cl.from[id] = -1;
		return false;
	}
	assert_int_equal(t, 'R');
	np_expect(&rb_cl, id, 'C', 60000);
	np_send(&rb_cl, id, 'G');
	cp_live |= 1ull << id;
	cp_used |= 1ull << id;
	return true;
}

/* What every live machine holds, and its view (when replication did not
 * come back: for the report). */
void cp_dump_held(void)
{
	for (unsigned i = 0; i < 64; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct cp_state st = cp_ask_state(i);
		struct held_report *r = cp_ask_held(i);
		printf("machine %u: configuration %" PRIu64
		       ", members %#" PRIx64 ", late %#" PRIx64
		       ", CM %u; holds",
		       i, st.config, st.members, st.late, st.cm);
		for (unsigned k = 0; k < r->n; k++) {
			const struct rp_held *h = &r->h[k];
			printf(" %#" PRIx32 "(%s%s:", h->region,
			       h->role == FARM_AS_PRIMARY ? "P" : "B",
			       h->filling ? ",filling" : "");
			for (unsigned x = 0; x < h->nreps; x++)
				printf("%s%" PRIu32, x ? "," : "", h->reps[x]);
			printf(")");
		}
		printf("; copies:");
		for (unsigned k = 0; k < r->ndr; k++)
			printf(" %#" PRIx32 "(state %d, %" PRIu64
			       " bytes, %" PRIu64 " reads, %" PRIu64
			       " again, last error %d)",
			       r->dr[k].region, (int)r->dr[k].state,
			       r->dr[k].bytes, r->dr[k].reads, r->dr[k].retries,
			       r->dr[k].last_err);
		printf("\n");
		free(r);
	}
}

/* Every region back at CP_REPLICAS complete replicas (within @ms): 0, or
 * -1 with the reason in @why. Regions counted in *@nreg. */
int cp_await_replicated(unsigned ms, char *why, size_t len, unsigned *nreg)
{
	uint64_t dl = np_now_ns() + (uint64_t)ms * 1000000ull;
	struct held_report *r[64] = {0};
	int rc;
	for (;;) {
		for (unsigned i = 0; i < 64; i++) {
			free(r[i]);
			r[i] = cp_is(cp_live, i) ? cp_ask_held(i) : NULL;
		}
		bool ok = rp_replicated(r, cp_live, CP_REPLICAS, 0, why, len,
		                        nreg);
		for (unsigned i = 0; ok && opt_grow && i < 64; i++)
			if (r[i] && r[i]->late) {
				ok = false;
				snprintf(why, len,
				         "machine %u is still late (growing)",
				         i);
			}
		if (ok || np_now_ns() > dl) {
			rc = ok ? 0 : -1;
			break;
		}
		pause_ms(20);
	}
	for (unsigned i = 0; i < 64; i++)
		free(r[i]);
	return rc;
}

void cp_stop(void)
{
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i))
			np_send(&rb_cl, i, 'P');
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i)) {
			struct cp_counts n;
			np_expect(&rb_cl, i, 'p', 60000);
			np_recv(&rb_cl, i, &n, sizeof(n), 1000);
			np_send(&rb_cl, i, 'Q');
		}
	int st[NP_NM];
	np_finish(&rb_cl, st);
	for (unsigned i = 0; i < 64; i++)
		if (cp_is(cp_live, i) && st[i])
			fail_msg("machine %u exited with status %d", i, st[i]);
	cp_live = 0;
}
