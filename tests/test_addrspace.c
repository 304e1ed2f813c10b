/*
 * The address space in one process: three machines (each its own fabric,
 * messaging and farm_as) whose loops one test thread drives in turn.
 * Region allocation with backups, access by global address (local loads,
 * remote one-sided operations with a cached descriptor), bad input, a
 * graceful leave's completion check with nothing held, and data
 * recovery's filling copies across views.
 *
 * --broken: a view keeps a filling copy of a region it no longer places
 * here (FARM_FP_AS_KEEP_FILLING); the displaced copy must be seen held.
 * --broken-demoted: a view that demotes our primary copy of a region we
 * stay a replica of opens no new copy with it (FARM_FP_AS_DEMOTED_OPEN_LATE,
 * as before the fix); the region must be seen without a copy here.
 */
#include "asnodes.h"
#include "brokenarg.h"

#define N     3
#define RSIZE (4ull << 20)
#define T_WHO 8

static struct asn_cluster C;
#define nodes C.m

static void pump(void)
{
	asn_pump(&C);
}

struct res {
	int done, status;
	uint32_t region;
};

static void op_done(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->done = 1;
}

static void region_done(farm_loop *loop, void *ctx, int status, uint32_t region)
{
	(void)loop;
	struct res *r = ctx;
	r->status = status;
	r->region = region;
	r->done = 1;
}

static void wait_res(struct res *r)
{
	asn_wait(&C, &r->done);
}

/* Replies with the id of the machine that ran it. */
static void h_who(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	struct asn *x = arg;
	uint32_t me = farm_fabric_machine_id(x->fab);
	assert_int_equal(farm_msg_reply(loop, &in->token, &me, sizeof(me)), 0);
}

static void hook(struct asn *x, unsigned i)
{
	(void)i;
	assert_int_equal(farm_msg_handle(x->msg, T_WHO, h_who, x), 0);
}

static int setup(void **state)
{
	(void)state;
	asn_open_noview(&C, N, RSIZE, hook);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	asn_close(&C);
	return 0;
}

static void set_views(uint64_t cid)
{
	asn_set_views(&C, cid);
}

static void test_no_view(void **state)
{
	(void)state;
	struct res r = {0};
	assert_int_equal(farm_as_region_alloc(nodes[0].as, nodes[0].loop, 0,
	                                      region_done, &r),
	                 -ENOENT);
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	assert_int_equal(farm_as_replicas(nodes[0].as, 5, rep), 0);
	/* A view must hold this machine, and views only move forward. */
	uint32_t others[2] = {2, 3};
	assert_int_equal(farm_as_set_view(nodes[0].as, 1, others, 2), -EINVAL);
	set_views(5);
	uint32_t ids[N] = {1, 2, 3};
	assert_int_equal(farm_as_set_view(nodes[0].as, 5, ids, N), -ESTALE);
	assert_int_equal(farm_as_config_id(nodes[0].as), 5);
}

/* A graceful leave's completion check (farm_as_leave_check) where no
 * machine holds a region: nothing to hand off, complete at once. Every
 * list is empty, the leaver's own first: under UBSan this is the check
 * that adds an empty list to no list yet (memcpy to NULL). */
static void test_leave_check_nothing_held(void **state)
{
	(void)state;
	uint32_t ids[N];
	for (unsigned i = 0; i < N; i++)
		ids[i] = farm_as_machine_id(nodes[i].as);
	uint64_t cfg = farm_as_config_id(nodes[0].as);
	struct farm_as_stats st;
	farm_as_stats_get(nodes[0].as, &st);
	assert_int_equal(st.regions_primary + st.regions_backup, 0);
	struct res r = {0};
	assert_int_equal(farm_as_leave_check(nodes[N - 1].as, nodes[N - 1].loop,
	                                     cfg, ids, N, op_done, &r),
	                 0);
	wait_res(&r);
	assert_int_equal(r.status, 0);
	/* Another configuration than the one in force: refused at once. */
	assert_int_equal(farm_as_leave_check(nodes[N - 1].as, nodes[N - 1].loop,
	                                     cfg + 1, ids, N, op_done, &r),
	                 -ESTALE);
}

static void test_alloc_and_access(void **state)
{
	(void)state;
	/* Every machine allocates a region: it is the primary, each backup
	 * holds a copy, and all three agree on the replicas. */
	uint32_t regions[N];
	for (unsigned i = 0; i < N; i++) {
		struct res r = {0};
		assert_int_equal(farm_as_region_alloc(nodes[i].as,
		                                      nodes[i].loop, 0,
		                                      region_done, &r),
		                 0);
		wait_res(&r);
		assert_int_equal(r.status, 0);
		regions[i] = r.region;
		uint32_t rep[3][FARM_RING_MAX_REPLICAS];
		for (unsigned j = 0; j < N; j++)
			assert_int_equal(
			        farm_as_replicas(nodes[j].as, r.region, rep[j]),
			        3);
		assert_int_equal(rep[0][0], i + 1);
		assert_memory_equal(rep[0], rep[1], 3 * sizeof(uint32_t));
		assert_memory_equal(rep[0], rep[2], 3 * sizeof(uint32_t));
		for (unsigned j = 0; j < N; j++) {
			enum farm_as_role role;
			farm_region *lr = farm_as_local_region(nodes[j].as,
			                                       r.region, &role);
			assert_non_null(lr);
			assert_int_equal(role, j == i ? FARM_AS_PRIMARY
			                              : FARM_AS_BACKUP);
		}
	}
	/* Machine 2 writes into machine 1's region by global address, then
	 * reads it back; machine 1 sees the bytes with plain loads. */
	struct asn *b = &nodes[1];
	static FARM_CL_ALIGNED char buf[4096];
	static FARM_CL_ALIGNED char back[4096];
	farm_mr *mr;
	assert_int_equal(
	        farm_mr_reg(b->fab, buf, sizeof(buf), FARM_ACCESS_LOCAL, &mr),
	        0);
	farm_mr *mr2;
	assert_int_equal(farm_mr_reg(b->fab, back, sizeof(back),
	                             FARM_ACCESS_LOCAL, &mr2),
	                 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 7 + 1);
	farm_gaddr a = farm_gaddr_make(regions[0], 0x10000);
	struct res w = {0}, rd = {0};
	assert_int_equal(farm_as_write(b->as, b->loop, a, buf, mr, sizeof(buf),
	                               op_done, &w),
	                 0);
	wait_res(&w);
	assert_int_equal(w.status, 0);
	uint8_t *local = farm_as_local_ptr(nodes[0].as, a, sizeof(buf));
	assert_non_null(local);
	assert_memory_equal(local, buf, sizeof(buf));
	assert_null(farm_as_local_ptr(b->as, a, sizeof(buf))); /* a backup */
	assert_int_equal(farm_as_read(b->as, b->loop, a, back, mr2,
	                              sizeof(back), op_done, &rd),
	                 0);
	wait_res(&rd);
	assert_int_equal(rd.status, 0);
	assert_memory_equal(back, buf, sizeof(buf));
	struct farm_as_stats st;
	farm_as_stats_get(b->as, &st);
	assert_int_equal(st.lookups_sent, 1); /* the descriptor was cached */
	assert_int_equal(st.lookups_cached, 1);
	assert_int_equal(st.regions_primary, 1);
	assert_int_equal(st.regions_backup, 2);

	/* Local access: machine 2 reads its own region with loads. */
	farm_gaddr own = farm_gaddr_make(regions[1], 64);
	memset(farm_as_local_ptr(b->as, own, 8), 0x5a, 8);
	struct res lr = {0};
	assert_int_equal(
	        farm_as_read(b->as, b->loop, own, back, NULL, 8, op_done, &lr),
	        0);
	wait_res(&lr);
	assert_int_equal(lr.status, 0);
	assert_int_equal(back[0], 0x5a);

	/* Bad addresses: offset past the region, zero length, region 0, a
	 * region nobody allocated (its primary says so). Nothing is written. */
	struct res x = {0};
	assert_int_equal(farm_as_read(b->as, b->loop,
	                              farm_gaddr_make(regions[0], RSIZE - 8),
	                              back, mr2, 16, op_done, &x),
	                 -EINVAL);
	assert_int_equal(
	        farm_as_read(b->as, b->loop, a, back, mr2, 0, op_done, &x),
	        -EINVAL);
	assert_int_equal(farm_as_read(b->as, b->loop, farm_gaddr_make(0, 0),
	                              back, mr2, 8, op_done, &x),
	                 -EINVAL);
	uint32_t ghost = 0;
	for (uint32_t id = 1000;; id++) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		farm_as_replicas(b->as, id, rep);
		if (rep[0] == 1 && id != regions[0]) {
			ghost = id;
			break;
		}
	}
	assert_int_equal(farm_as_read(b->as, b->loop, farm_gaddr_make(ghost, 0),
	                              back, mr2, 8, op_done, &x),
	                 0);
	wait_res(&x);
	assert_int_equal(x.status, -ENOENT);
	assert_memory_equal(local, buf, sizeof(buf));

	/* Near allocation: same ring as the hint. */
	struct res nr = {0};
	assert_int_equal(farm_as_region_alloc(nodes[2].as, nodes[2].loop,
	                                      regions[0], region_done, &nr),
	                 0);
	wait_res(&nr);
	assert_int_equal(nr.status, 0);
	assert_int_equal(nr.region % FARM_RING_DEFAULT_RINGS,
	                 regions[0] % FARM_RING_DEFAULT_RINGS);
	uint32_t rep[FARM_RING_MAX_REPLICAS];
	assert_int_equal(farm_as_replicas(nodes[0].as, nr.region, rep), 3);
	assert_int_equal(rep[0], 3);

	farm_mr_dereg(mr);
	farm_mr_dereg(mr2);
}

struct call_res {
	int done, status;
	uint32_t who;
};

static void call_done(farm_loop *loop, void *ctx, int status, const void *reply,
                      uint32_t len)
{
	(void)loop;
	struct call_res *r = ctx;
	r->status = status;
	if (!status && len == sizeof(r->who))
		memcpy(&r->who, reply, sizeof(r->who));
	r->done = 1;
}

/* Function shipping by address reaches the region's primary. */
static void test_ship_by_address(void **state)
{
	(void)state;
	uint64_t seed = 3;
	for (int t = 0; t < 30; t++) {
		uint32_t region = (uint32_t)farm_rand64(&seed) | 1;
		farm_gaddr a = farm_gaddr_make(region, 4096);
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		farm_as_replicas(nodes[0].as, region, rep);
		struct call_res r = {0};
		struct asn *from = &nodes[t % N];
		assert_int_equal(farm_as_call(from->as, from->loop, a, T_WHO,
		                              NULL, 0, 0, call_done, &r),
		                 0);
		for (unsigned i = 0; i < 1000000 && !r.done; i++)
			pump();
		assert_int_equal(r.status, 0);
		assert_int_equal(r.who, rep[0]);
	}
	assert_int_equal(farm_as_call(nodes[0].as, nodes[0].loop,
	                              farm_gaddr_make(0, 0), T_WHO, NULL, 0, 0,
	                              call_done, NULL),
	                 -EINVAL);
}

/* The loop's cache of resolved regions (farm_as_resolve_cached): two
 * regions whose ids share a set of the cache, looked up in turn, are each
 * answered as farm_as_resolve answers, from the cache after their first
 * lookup; after a change of the table (a region allocated) neither entry
 * answers again, both miss once. Machine 1 resolves machine 0's regions (their
 * descriptors) and machine 0 its own (local pointers). */
static void test_resolve_cache(void **state)
{
	(void)state;
	/* 33 ids fill the 32 sets: two of them share one. */
	uint32_t ids[FARM_AS_RCACHE / 2 + 1], a = 0, b = 0;
	for (unsigned n = 0; n < FARM_AS_RCACHE / 2 + 1 && !b; n++) {
		struct res r = {0};
		assert_int_equal(farm_as_region_alloc(nodes[0].as,
		                                      nodes[0].loop, 0,
		                                      region_done, &r),
		                 0);
		wait_res(&r);
		assert_int_equal(r.status, 0);
		ids[n] = r.region;
		for (unsigned j = 0; j < n && !b; j++)
			if (ids[j] % (FARM_AS_RCACHE / 2) ==
			    r.region % (FARM_AS_RCACHE / 2)) {
				a = ids[j];
				b = r.region;
			}
	}
	assert_int_not_equal(b, 0);
	/* Machine 1 learns their descriptors by reading each once. */
	static FARM_CL_ALIGNED char buf[64];
	farm_mr *mr;
	assert_int_equal(farm_mr_reg(nodes[1].fab, buf, sizeof(buf),
	                             FARM_ACCESS_LOCAL, &mr),
	                 0);
	for (unsigned i = 0; i < 2; i++) {
		struct res r = {0};
		assert_int_equal(farm_as_read(nodes[1].as, nodes[1].loop,
		                              farm_gaddr_make(i ? b : a, 0),
		                              buf, mr, sizeof(buf), op_done,
		                              &r),
		                 0);
		wait_res(&r);
		assert_int_equal(r.status, 0);
	}
	farm_mr_dereg(mr);
	for (unsigned m = 0; m < 2; m++) {
		farm_as *as = nodes[m].as;
		struct farm_as_rcache *c = calloc(1, sizeof(*c));
		assert_non_null(c);
		for (unsigned round = 0; round < 2; round++) {
			uint64_t misses = c->misses;
			for (unsigned t = 0; t < 8; t++) {
				farm_gaddr x =
				        farm_gaddr_make(t % 2 ? b : a, 64u * t);
				uint8_t *lp, *want_lp;
				farm_mr_desc d = {0}, want_d = {0};
				assert_int_equal(farm_as_resolve_cached(
				                         as, c, x, 64, &lp, &d),
				                 0);
				assert_int_equal(farm_as_resolve(as, x, 64,
				                                 &want_lp,
				                                 &want_d),
				                 0);
				assert_ptr_equal(lp, want_lp);
				assert_true(m == 0 ? lp != NULL : lp == NULL);
				assert_memory_equal(&d, &want_d, sizeof(d));
			}
			assert_int_equal(c->misses - misses, 2);
			/* A change of the table: every entry stale, never
			 * used again (their answers scribbled over, which a
			 * stale hit would return). */
			struct res r = {0};
			assert_int_equal(farm_as_region_alloc(nodes[2].as,
			                                      nodes[2].loop, 0,
			                                      region_done, &r),
			                 0);
			wait_res(&r);
			assert_int_equal(r.status, 0);
			for (unsigned i = 0; i < FARM_AS_RCACHE; i++) {
				if (c->e[i].base)
					c->e[i].base += 64;
				c->e[i].d.key ^= 1;
			}
		}
		free(c);
	}
}

/* A cache handed another address space answers as that one does: the
 * first's entries are never used for it, even where their generation
 * tags equal the second's current generation (two spaces' generations
 * may coincide; here they are made to). */
static void test_resolve_cache_rebind(void **state)
{
	(void)state;
	struct res r = {0};
	assert_int_equal(farm_as_region_alloc(nodes[0].as, nodes[0].loop, 0,
	                                      region_done, &r),
	                 0);
	wait_res(&r);
	assert_int_equal(r.status, 0);
	farm_gaddr x = farm_gaddr_make(r.region, 128);
	/* Machine 1 learns its descriptor by reading it once. */
	static FARM_CL_ALIGNED char buf[64];
	farm_mr *mr;
	assert_int_equal(farm_mr_reg(nodes[1].fab, buf, sizeof(buf),
	                             FARM_ACCESS_LOCAL, &mr),
	                 0);
	struct res rr = {0};
	assert_int_equal(farm_as_read(nodes[1].as, nodes[1].loop, x, buf, mr,
	                              sizeof(buf), op_done, &rr),
	                 0);
	wait_res(&rr);
	assert_int_equal(rr.status, 0);
	farm_mr_dereg(mr);
	uint8_t *lp, *want_lp;
	farm_mr_desc d = {0}, want_d = {0};
	struct farm_as_rcache *c1 = calloc(1, sizeof(*c1)),
	                      *c = calloc(1, sizeof(*c));
	assert_non_null(c1);
	assert_non_null(c);
	/* Machine 1's current generation, read through a cache bound to
	 * it. */
	assert_int_equal(
	        farm_as_resolve_cached(nodes[1].as, c1, x, 64, &lp, &d), 0);
	uint64_t g1 = atomic_load(c1->gen);
	/* Machine 0 is the region's primary: a local pointer, cached. */
	assert_int_equal(farm_as_resolve_cached(nodes[0].as, c, x, 64, &lp, &d),
	                 0);
	assert_non_null(lp);
	for (unsigned i = 0; i < FARM_AS_RCACHE; i++)
		c->e[i].gen = g1;
	for (unsigned t = 0; t < 2; t++) {
		assert_int_equal(
		        farm_as_resolve_cached(nodes[1].as, c, x, 64, &lp, &d),
		        0);
		assert_int_equal(
		        farm_as_resolve(nodes[1].as, x, 64, &want_lp, &want_d),
		        0);
		assert_null(lp);
		assert_null(want_lp);
		assert_memory_equal(&d, &want_d, sizeof(d));
	}
	free(c1);
	free(c);
}

/* Malformed requests get an error reply, are counted, and change nothing. */
static void test_bad_requests(void **state)
{
	(void)state;
	struct farm_as_stats before, after;
	farm_as_stats_get(nodes[0].as, &before);
	uint8_t junk[40] = {1, 2, 3};
	const uint16_t types[] = {FARM_MSGT_AS_LOOKUP, FARM_MSGT_AS_CREATE};
	for (unsigned t = 0; t < 2; t++) {
		struct call_res r = {0};
		assert_int_equal(farm_msg_call(nodes[1].loop, 1, 0, types[t],
		                               junk, 3, 0, call_done, &r),
		                 0);
		for (unsigned i = 0; i < 1000000 && !r.done; i++)
			pump();
		assert_true(r.done);
		assert_int_equal(r.status, -EINVAL);
	}
	/* A create for a size that is not the cluster's. */
	struct {
		uint32_t region, primary;
		uint64_t size;
	} q = {.region = 77, .primary = 2, .size = RSIZE * 2};
	struct call_res r = {0};
	assert_int_equal(farm_msg_call(nodes[1].loop, 1, 0, FARM_MSGT_AS_CREATE,
	                               &q, sizeof(q), 0, call_done, &r),
	                 0);
	for (unsigned i = 0; i < 1000000 && !r.done; i++)
		pump();
	assert_int_equal(r.status, -EINVAL);
	farm_as_stats_get(nodes[0].as, &after);
	assert_int_equal(after.bad_requests, before.bad_requests + 3);
	assert_int_equal(after.regions_backup, before.regions_backup);
	assert_int_equal(after.regions_primary, before.regions_primary);
}

static int call_and_wait(struct asn *from, uint32_t to, uint16_t type,
                         const void *req, uint32_t len)
{
	struct call_res r = {0};
	assert_int_equal(farm_msg_call(from->loop, to, 0, type, req, len, 0,
	                               call_done, &r),
	                 0);
	for (unsigned i = 0; i < 1000000 && !r.done; i++)
		pump();
	assert_true(r.done);
	return r.status;
}

/* A backup copy made at one machine's request is dropped only at that
 * machine's: a late or forged DROP from another keeps it. */
static void test_drop_only_by_creator(void **state)
{
	(void)state;
	farm_as *as = nodes[0].as;
	uint32_t to = farm_as_machine_id(as);
	uint32_t maker = farm_as_machine_id(nodes[2].as);
	uint32_t region = 0x71000001u;
	while (farm_as_local_region(as, region, NULL))
		region += 2;
	struct {
		uint32_t region, primary;
		uint64_t size;
	} q = {.region = region, .primary = maker, .size = RSIZE};
	assert_int_equal(call_and_wait(&nodes[2], to, FARM_MSGT_AS_CREATE, &q,
	                               sizeof(q)),
	                 0);
	enum farm_as_role role;
	assert_non_null(farm_as_local_region(as, region, &role));
	assert_int_equal(role, FARM_AS_BACKUP);
	uint32_t d = region;
	assert_int_equal(
	        call_and_wait(&nodes[1], to, FARM_MSGT_AS_DROP, &d, sizeof(d)),
	        -EPERM);
	assert_non_null(farm_as_local_region(as, region, &role));
	assert_int_equal(
	        call_and_wait(&nodes[2], to, FARM_MSGT_AS_DROP, &d, sizeof(d)),
	        0);
	assert_null(farm_as_local_region(as, region, NULL));
}

/* Data recovery's filling copies (farm_as_backup_open): held as backups,
 * never promotable, even where the ring makes this machine the primary,
 * until filled. */
static void test_filling_never_promoted(void **state)
{
	(void)state;
	farm_as *as = nodes[0].as;
	uint32_t me = farm_as_machine_id(as);
	uint32_t backup_of = 0, primary_of = 0;
	for (uint32_t r = 0x70000000u; r < 0x70010000u; r++) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		unsigned n = farm_as_replicas(as, r, rep);
		enum farm_as_role role;
		if (!n || farm_as_local_region(as, r, &role))
			continue;
		if (!primary_of && rep[0] == me)
			primary_of = r;
		for (unsigned k = 1; k < n && !backup_of; k++)
			if (rep[k] == me)
				backup_of = r;
		if (backup_of && primary_of)
			break;
	}
	assert_true(backup_of && primary_of);
	assert_int_equal(farm_as_backup_open(as, 0), -EINVAL);
	assert_int_equal(farm_as_backup_filled(as, backup_of), -ENOENT);
	assert_int_equal(farm_as_backup_open(as, backup_of), 0);
	assert_int_equal(farm_as_backup_open(as, backup_of), -EEXIST);
	assert_true(farm_as_backup_filling(as, backup_of));
	enum farm_as_role role;
	assert_non_null(farm_as_local_region(as, backup_of, &role));
	assert_int_equal(role, FARM_AS_BACKUP);

	/* The ring says primary, the copy is incomplete: not promotable. */
	assert_int_equal(farm_as_backup_open(as, primary_of), 0);
	uint32_t promo[64];
	unsigned np = farm_as_promotable(as, promo, 64);
	for (unsigned i = 0; i < np && i < 64; i++)
		assert_int_not_equal(promo[i], primary_of);
	assert_int_equal(farm_as_promote(as, primary_of), -ENOENT);
	assert_non_null(farm_as_local_region(as, primary_of, &role));
	assert_int_equal(role, FARM_AS_BACKUP);

	/* Complete: a backup like any other, promotable. */
	assert_int_equal(farm_as_backup_filled(as, primary_of), 0);
	assert_false(farm_as_backup_filling(as, primary_of));
	np = farm_as_promotable(as, promo, 64);
	bool listed = false;
	for (unsigned i = 0; i < np && i < 64; i++)
		listed |= promo[i] == primary_of;
	assert_true(listed);
	assert_int_equal(farm_as_promote(as, primary_of), 0);
	assert_non_null(farm_as_local_region(as, primary_of, &role));
	assert_int_equal(role, FARM_AS_PRIMARY);
	assert_int_equal(farm_as_backup_filled(as, backup_of), 0);
}

static bool opt_broken;

/* A view that no longer places this machine as a replica of a region
 * whose copy it is still filling (growth displaced it before data
 * recovery completed it) gives that copy up, as it does a complete one:
 * kept, it stayed held with stale bytes, and a later copy would have
 * been filled over them. Copies of regions still placed here stay
 * filling. Machine 1 alone takes a view with a fourth machine (it need
 * not exist: only the placement matters); runs last. */
static void test_displaced_filling(void **state)
{
	(void)state;
	farm_as *as = nodes[0].as;
	uint32_t me = farm_as_machine_id(as);
	enum { NCAND = 64 };
	uint32_t cand[NCAND];
	unsigned nc = 0;
	for (uint32_t r = 0x71000000u; r < 0x71010000u && nc < NCAND; r++)
		if (!farm_as_local_region(as, r, NULL)) {
			assert_int_equal(farm_as_backup_open(as, r), 0);
			cand[nc++] = r;
		}
	assert_int_equal(nc, NCAND);
	struct farm_as_stats before, after;
	farm_as_stats_get(as, &before);
	uint32_t ids[N + 1] = {1, 2, 3, 4};
	uint64_t cfg = farm_as_config_id(as) + 1;
	assert_int_equal(farm_as_set_view(as, cfg, ids, N + 1), 0);
	unsigned gone = 0, kept = 0;
	for (unsigned i = 0; i < nc; i++) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		unsigned n = farm_as_replicas(as, cand[i], rep);
		bool placed = false;
		for (unsigned k = 0; k < n; k++)
			placed |= rep[k] == me;
		bool held = farm_as_local_region(as, cand[i], NULL) != NULL;
		if (placed) {
			kept++;
			assert_true(held);
			assert_true(farm_as_backup_filling(as, cand[i]));
			continue;
		}
		gone++;
		assert_true(held == opt_broken);
		assert_true(farm_as_backup_filling(as, cand[i]) == opt_broken);
		/* Placed here again later: a fresh copy can be opened. */
		if (!opt_broken)
			assert_int_equal(farm_as_backup_filled(as, cand[i]),
			                 -ENOENT);
	}
	farm_as_stats_get(as, &after);
	assert_true(gone > 0 && kept > 0);
	/* Earlier tests' complete copies may be displaced too. */
	if (!opt_broken)
		assert_true(after.displaced >= before.displaced + gone);
	printf("displaced filling copies: %u of %u given up, %u kept "
	       "(placed here)%s\n",
	       opt_broken ? 0 : gone, gone, kept,
	       opt_broken ? " [broken: the displaced ones stayed held]" : "");
}

static bool opt_broken_demoted;

/* A view that demotes our primary copy of a region (another machine is
 * its primary now) and keeps this machine a replica holds a new, filling
 * backup copy of it in the same step, to be filled from the demoted one:
 * data recovery opening it later left a window in which the view's
 * COMMIT-BACKUPs found no copy here, were not applied, and were missing
 * for good (the demoted copy never gets them). The demoted copy keeps
 * its bytes; the new one starts empty. Runs after test_displaced_filling
 * (a view with a fifth machine, which need not exist). */
static void test_demoted_held(void **state)
{
	(void)state;
	farm_as *as = nodes[0].as;
	uint32_t me = farm_as_machine_id(as);
	enum { NCAND = 64 };
	uint32_t cand[NCAND];
	unsigned nc = 0;
	for (uint32_t r = 0x72000000u; r < 0x72010000u && nc < NCAND; r++) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		unsigned n = farm_as_replicas(as, r, rep);
		if (!n || rep[0] != me || farm_as_local_region(as, r, NULL))
			continue;
		assert_int_equal(farm_as_backup_open(as, r), 0);
		assert_int_equal(farm_as_backup_filled(as, r), 0);
		assert_int_equal(farm_as_promote(as, r), 0);
		farm_region *reg = farm_as_local_region(as, r, NULL);
		assert_non_null(reg);
		((uint8_t *)farm_region_base(reg))[4096] = 0x5a;
		cand[nc++] = r;
	}
	assert_int_equal(nc, NCAND);
	uint32_t ids[N + 2] = {1, 2, 3, 4, 5};
	uint64_t cfg = farm_as_config_id(as) + 1;
	assert_int_equal(farm_as_set_view(as, cfg, ids, N + 2), 0);
	unsigned demoted = 0;
	for (unsigned i = 0; i < nc; i++) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		unsigned n = farm_as_replicas(as, cand[i], rep);
		bool backup = false;
		for (unsigned k = 1; k < n; k++)
			backup |= rep[k] == me;
		if (!n || rep[0] == me || !backup)
			continue;
		demoted++;
		enum farm_as_role role;
		farm_region *reg = farm_as_local_region(as, cand[i], &role);
		if (opt_broken_demoted) {
			assert_null(reg);
			continue;
		}
		assert_non_null(reg);
		assert_int_equal(role, FARM_AS_BACKUP);
		assert_true(farm_as_backup_filling(as, cand[i]));
		assert_int_equal(((uint8_t *)farm_region_base(reg))[4096], 0);
		const uint8_t *src = farm_as_demoted_source(as, cand[i]);
		assert_non_null(src);
		assert_int_equal(src[4096], 0x5a);
	}
	assert_true(demoted > 0);
	printf("demoted primary copies: %u of %u, a new copy held with the "
	       "view%s\n",
	       opt_broken_demoted ? 0 : demoted, demoted,
	       opt_broken_demoted ? " [broken: none held]" : "");
}

int main(int argc, char **argv)
{
	int rc = 0;
	if (argc == 2 && !strcmp(argv[1], "--broken-demoted")) {
		if (farm_fault_set(FARM_FP_AS_DEMOTED_OPEN_LATE, tu_switch_on,
		                   NULL)) {
			printf("skipped: built without fault injection\n");
			return FARM_TEST_SKIP;
		}
		opt_broken_demoted = true;
	} else {
		rc = tu_broken_arg(argc, argv, FARM_FP_AS_KEEP_FILLING,
		                   &opt_broken);
	}
	if (rc)
		return rc;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_no_view),
	        cmocka_unit_test(test_leave_check_nothing_held),
	        cmocka_unit_test(test_alloc_and_access),
	        cmocka_unit_test(test_bad_requests),
	        cmocka_unit_test(test_ship_by_address),
	        cmocka_unit_test(test_resolve_cache),
	        cmocka_unit_test(test_resolve_cache_rebind),
	        cmocka_unit_test(test_drop_only_by_creator),
	        cmocka_unit_test(test_filling_never_promoted),
	        cmocka_unit_test(test_displaced_filling),
	        cmocka_unit_test(test_demoted_held),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
