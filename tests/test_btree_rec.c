/*
 * The B-tree under a kill: 4 machine processes joined through a real
 * ZooKeeper (scripts/zk-local; sessions of 4 s, leases of 50 ms), 3
 * replicas, a KV store for the tree's name. Machine 0 makes the tree
 * (4 entries a node, so inserts split often), the others open it. Every
 * machine inserts random keys (its own transaction per put, retried while
 * retryable) and appends each acknowledged key to a file. Machine 1 arms
 * a fault-injection point in its commit (a COMMIT-BACKUP written, another
 * not: util/fault.h, test builds) that kills it (SIGKILL) the first time
 * it gets there while committing a put that split a node. The survivors
 * go on until their configuration leaves machine 1 out, then insert more
 * (splits in the promoted regions). Then, with the cluster quiet:
 *
 *   - the tree's invariants hold (tests/btcheck.h: every level a chain
 *     from -inf to +inf, fences continuous, the chain exactly its parents'
 *     children, keys ordered and within fences, leaves at level 0);
 *   - every acknowledged key is in the tree (a full scan), and every key
 *     in the tree was acknowledged or was the victim's put in flight;
 *   - every survivor finds every acknowledged key with a lock-free get;
 *   - no orphan node: every allocated object that is a B-tree node, in
 *     every survivor's primary regions, is one the invariant check
 *     reached, and each reached node is allocated there once (so a split
 *     that died with its coordinator left nothing behind).
 *
 * --broken-orphan (test builds): every split also commits a node it never
 * links; the test then asserts that the orphan check finds some.
 *
 * Recovery needs nothing of the B-tree: a split is a transaction, so it
 * is all there or not at all. Exits 77 (skip) without the ZooKeeper
 * client or server, or without fault injection.
 */
#define NP_NM 4
#include "kvproc.h"
#include "recproc.h"

#include "btcheck.h"

#include <fcntl.h>

#include "addrspace/addrspace.h"
#include "alloc/alloc.h"
#include "alloc/objhdr.h"
#include "util/fault.h"

#ifndef FARM_SOURCE_DIR
#error "FARM_SOURCE_DIR must name the source tree (for scripts/zk-local)"
#endif

#define NM         NP_NM
#define VICTIM     1u
#define RSIZE      "16M"
#define SESSION_MS 4000
#define LEASE_US   50000u
#define JOIN_MS    30000
#define PRE_PUTS   150 /* per machine before the victim is armed */
#define POST_PUTS  150 /* per survivor after the new configuration */
#define RECONF_MS  15000
#define GIVE_UP_NS (20ull * 1000000000ull)

static char zk_dir[256], zk_connect[64], zk_root[96];
static const char *zk_script = FARM_SOURCE_DIR "/scripts/zk-local";
static struct np_cluster cl;
static bool opt_broken_orphan; /* --broken-orphan: splits leak a node */

static const struct farm_bt_attr ATTR = {
        .key_max = 8, .val_max = 8, .leaf_cap = 4, .inner_cap = 4};

struct ch {
	struct np_child np;
	farm_kv *kv;
	farm_bt *bt;
	int acks, inflight; /* files: acknowledged keys, the key in flight */
	struct rec_seen seen;
	uint64_t nputs, end;
};

/* ---- the victim's crash point ------------------------------------------ */

static farm_bt *crash_bt;
static uint64_t crash_splits_before; /* the splits before this put */
static int crash_out = -1;

static void crash_hook(enum farm_fault_point fp, void *arg)
{
	(void)fp, (void)arg;
	farm_bt_stats s;
	farm_bt_stats_get(crash_bt, &s);
	if (s.splits <= crash_splits_before)
		return; /* this commit splits nothing */
	char b = 'X';
	(void)!write(crash_out, &b, 1);
	kill(getpid(), SIGKILL);
}

/* ---- the machines ------------------------------------------------------ */

static uint64_t crnd(struct ch *c)
{
	c->np.rng ^= c->np.rng << 13;
	c->np.rng ^= c->np.rng >> 7;
	c->np.rng ^= c->np.rng << 17;
	return c->np.rng;
}

/* A command during the inserts: 'K' (the kill: who, when), 'A' (arm the
 * crash point). 0, or -1 for anything else. */
static int insert_cmd(struct ch *c, int cmd)
{
	if (cmd == 'K') {
		if (rec_told(&c->np, &c->seen))
			return -1;
		c->end = c->seen.t_kill_ns + RECONF_MS * 1000000ull;
		return 0;
	}
	if (cmd == 'A') {
		crash_bt = c->bt;
		crash_out = c->np.out;
		return farm_fault_set(FARM_FP_TX_BACKUP_SOME, crash_hook, NULL)
		               ? -1
		               : 0;
	}
	return -1;
}

/* One new key, put until acknowledged (retryable failures did not
 * commit). 0, or the error. */
static int put_one(struct ch *c)
{
	uint64_t k = (crnd(c) % (1ull << 40)) * NM + c->np.me, v = k ^ 0x5a;
	uint8_t kb[8];
	farm_bt_key_u64(k, kb);
	if (write(c->inflight, &k, 8) != 8)
		return -EIO;
	farm_bt_stats s;
	farm_bt_stats_get(c->bt, &s);
	crash_splits_before = s.splits;
	uint64_t give_up = np_now_ns() + GIVE_UP_NS;
	int rc;
	do {
		rc = farm_bt_put(c->bt, NULL, c->np.loop, kb, 8, &v, 8);
		int cmd = rc ? np_poll_cmd(&c->np) : 0;
		if (cmd && insert_cmd(c, cmd))
			return -EPIPE;
		(void)rec_watch(&c->np, &c->seen);
	} while (rc &&
	         (farm_tx_retryable(rc) || rc == -EBUSY || rc == -EAGAIN ||
	          rc == FARM_ELEASE) &&
	         np_now_ns() < give_up);
	if (rc) {
		fprintf(stderr, "m%u: put: %s\n", c->np.me, farm_strerror(rc));
		return rc;
	}
	c->nputs++;
	return write(c->acks, &k, 8) == 8 ? 0 : -EIO;
}

/* Puts until told of the kill and the new configuration has come, then
 * POST_PUTS more. */
static int insert_run(struct ch *c)
{
	for (int i = 0; i < PRE_PUTS; i++)
		if (put_one(c))
			return -1;
	if (np_say(&c->np, 'p', NULL, 0))
		return -1;
	c->end = UINT64_MAX;
	int post = -1;
	while (post != 0) {
		int cmd = np_poll_cmd(&c->np);
		if (cmd && insert_cmd(c, cmd))
			return -1;
		if (rec_watch(&c->np, &c->seen))
			post = POST_PUTS;
		if (c->seen.new_config && post < 0)
			post = POST_PUTS; /* seen inside a put's retries */
		if (np_now_ns() > c->end && post < 0) {
			fprintf(stderr,
			        "m%u: no configuration without the "
			        "victim\n",
			        c->np.me);
			return -1;
		}
		if (put_one(c))
			return -1;
		if (post > 0)
			post--;
	}
	return 0;
}

/* Machine 0, quiet cluster: the invariants, every key into a file, and
 * every node reached into another. */
static int verify(struct ch *c, uint64_t *nkeys)
{
	struct bc_nodes seen = {0};
	int rc = bc_verify_nodes(c->bt, c->np.loop, nkeys, &seen);
	char npath[400];
	snprintf(npath, sizeof(npath), "%s/nodes", c->np.cl->root);
	if (!rc && np_write_file(npath, seen.a, seen.n * sizeof(*seen.a)))
		rc = -1;
	free(seen.a);
	if (rc)
		return rc;
	struct bscan s = {.cap = *nkeys + 1};
	s.out = malloc(s.cap * sizeof(*s.out));
	struct farm_bt_range r = {0};
	long n = farm_bt_scan(c->bt, NULL, c->np.loop, &r, bscan_cb, &s);
	char path[400];
	snprintf(path, sizeof(path), "%s/keys", c->np.cl->root);
	if (n != (long)*nkeys || s.bad ||
	    np_write_file(path, s.out, s.n * sizeof(*s.out)))
		rc = -1;
	free(s.out);
	return rc;
}

/* Lock-free gets of every key acknowledged by anyone: the number
 * missing. */
static uint64_t check_acked(struct ch *c)
{
	uint64_t missing = 0;
	for (unsigned i = 0; i < NM; i++) {
		char path[400];
		size_t len;
		snprintf(path, sizeof(path), "%s/acks", c->np.cl->dir[i]);
		uint64_t *k = np_read_file(path, &len);
		for (size_t j = 0; j < len / 8; j++) {
			uint8_t kb[8];
			uint64_t v;
			uint32_t vl;
			farm_bt_key_u64(k[j], kb);
			missing += farm_bt_get(c->bt, NULL, c->np.loop, kb, 8,
			                       &v, 8, &vl) != 0 ||
			           v != (k[j] ^ 0x5a);
		}
		free(k);
	}
	return missing;
}

/* ---- no orphan node ---------------------------------------------------- */

struct orphans {
	const farm_gaddr *reached; /* sorted */
	size_t nreached;
	uint8_t *base;
	uint32_t region;
	uint64_t nodes, orphans;
};

static int cmp_gaddr(const void *a, const void *b)
{
	farm_gaddr x = *(const farm_gaddr *)a, y = *(const farm_gaddr *)b;
	return x < y ? -1 : x > y;
}

/* An allocated object: a B-tree node (its first application bytes are
 * the node magic) must be one the check reached. */
static void orphan_obj(void *ctx, struct farm_objhdr *obj, uint32_t lines)
{
	(void)lines;
	struct orphans *o = ctx;
	uint32_t magic;
	memcpy(&magic, (uint8_t *)obj + FARM_OBJHDR_SIZE, 4);
	if (magic != BT_MAGIC)
		return;
	farm_gaddr a = farm_gaddr_make(o->region,
	                               (uint32_t)((uint8_t *)obj - o->base));
	o->nodes++;
	o->orphans +=
	        !bsearch(&a, o->reached, o->nreached, sizeof(a), cmp_gaddr);
}

/* Every allocated node in the regions this survivor is primary of, against
 * the nodes machine 0's check reached: orphans << 32 | nodes, or
 * UINT64_MAX when a region's walk failed. */
static uint64_t walk_nodes(struct ch *c)
{
	char path[400];
	size_t len;
	snprintf(path, sizeof(path), "%s/nodes", c->np.cl->root);
	farm_gaddr *reached = np_read_file(path, &len);
	struct orphans o = {.reached = reached, .nreached = len / 8};
	qsort(reached, o.nreached, 8, cmp_gaddr);
	farm_as *as = farm_node_as(c->np.node);
	struct farm_as_held hl[64];
	unsigned n = farm_as_held(as, hl, 64);
	bool bad = n > 64;
	for (unsigned i = 0; i < n && i < 64 && !bad; i++) {
		farm_region *r = farm_as_local_region(as, hl[i].region, NULL);
		if (!r || hl[i].role != FARM_AS_PRIMARY)
			continue;
		o.base = farm_region_base(r);
		o.region = hl[i].region;
		bad = farm_alloc_walk_region(o.base, farm_region_size(r),
		                             o.region, orphan_obj, &o) < 0;
	}
	free(reached);
	return bad ? UINT64_MAX : o.orphans << 32 | o.nodes;
}

static int serve(void *arg)
{
	struct ch *c = arg;
	farm_txm *m = farm_node_txm(c->np.node);
	farm_node_on_config(c->np.node, rec_on_config, NULL);
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		int32_t rc = 0;
		uint64_t x = 0;
		switch (cmd) {
		case 'C':
			rc = farm_bt_create_sync(c->kv, m, c->np.loop, "rec",
			                         &ATTR, &c->bt);
			break;
		case 'O':
			rc = farm_bt_open_sync(c->kv, m, c->np.loop, "rec",
			                       &c->bt);
			break;
		case 'I':
			rc = insert_run(c);
			x = c->nputs;
			break;
		case 'V': rc = verify(c, &x); break;
		case 'G': x = check_acked(c); break;
		case 'W': x = walk_nodes(c); break;
		default: farm_bt_close(c->bt); return 0;
		}
		if (np_say(&c->np, (char)(cmd | 0x20), &rc, sizeof(rc)) ||
		    tu_send(c->np.out, &x, sizeof(x)))
			return 1;
	}
}

static int machine(struct np_child *np, void *arg)
{
	(void)arg;
	struct ch *c = calloc(1, sizeof(*c));
	if (!c)
		return 9;
	c->np = *np;
	char path[400];
	snprintf(path, sizeof(path), "%s/acks", np->cl->dir[np->me]);
	c->acks = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	snprintf(path, sizeof(path), "%s/inflight", np->cl->dir[np->me]);
	c->inflight = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	struct farm_config cfg;
	int st = np_config_zk(np, RSIZE, zk_connect, zk_root, SESSION_MS,
	                      LEASE_US, &cfg);
	if (!st && c->acks >= 0 && c->inflight >= 0) {
		cfg.replicas = 3;
		cfg.expect_machines = NM;
		st = kvp_run_config(&c->np, &cfg, NULL, 256, JOIN_MS, &c->kv,
		                    serve, c);
	}
	free(c);
	return st;
}

/* ---- the parent -------------------------------------------------------- */

static void ask(unsigned i, char cmd)
{
	np_send(&cl, i, cmd);
}

static uint64_t answer(unsigned i, char cmd, int ms)
{
	int32_t rc;
	uint64_t x;
	np_expect(&cl, i, (char)(cmd | 0x20), ms);
	np_recv(&cl, i, &rc, sizeof(rc), 1000);
	np_recv(&cl, i, &x, sizeof(x), 1000);
	if (rc)
		fail_msg("machine %u: '%c' failed: %d (%s)", i, cmd, rc,
		         farm_strerror(rc));
	return x;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The acknowledged keys of every machine, sorted (*@n). */
static uint64_t *all_acks(size_t *n)
{
	uint64_t *all = NULL;
	*n = 0;
	for (unsigned i = 0; i < NM; i++) {
		char path[400];
		size_t len;
		snprintf(path, sizeof(path), "%s/acks", cl.dir[i]);
		uint64_t *k = np_read_file(path, &len);
		all = realloc(all, (*n + len / 8 + 1) * 8);
		memcpy(all + *n, k, len / 8 * 8);
		*n += len / 8;
		free(k);
	}
	qsort(all, *n, 8, cmp_u64);
	return all;
}

/* The tree's keys (machine 0's scan) against the acknowledged ones: every
 * acknowledged key there, nothing else but the victim's put in flight. */
static void check_keys(uint64_t puts, uint64_t nkeys)
{
	size_t nacks, nin, ntree;
	uint64_t *acks = all_acks(&nacks);
	char path[400];
	snprintf(path, sizeof(path), "%s/inflight", cl.dir[VICTIM]);
	uint64_t *in = np_read_file(path, &nin);
	uint64_t maybe = nin >= 8 ? in[nin / 8 - 1] : UINT64_MAX;
	snprintf(path, sizeof(path), "%s/keys", cl.root);
	struct bm_pair *tree = np_read_file(path, &ntree);
	ntree /= sizeof(*tree);
	printf("btree_rec: %zu keys acknowledged (%" PRIu64
	       " by survivors), the tree holds %" PRIu64 "\n",
	       nacks, puts, nkeys);
	/* Both sorted: every acknowledged key in the tree, nothing else but
	 * the victim's put in flight. */
	size_t j = 0, extra = 0, missing = 0;
	for (size_t i = 0; i < ntree; i++) {
		while (j < nacks && acks[j] < tree[i].k)
			missing++, j++;
		if (j < nacks && acks[j] == tree[i].k) {
			while (j < nacks && acks[j] == tree[i].k)
				j++;
		} else if (tree[i].k != maybe) {
			extra++;
		}
	}
	missing += nacks - j;
	printf("btree_rec: %zu acknowledged keys missing, %zu keys never "
	       "acknowledged\n",
	       missing, extra);
	assert_int_equal(missing, 0);
	assert_int_equal(extra, 0);
	free(acks);
	free(in);
	free(tree);
}

/* Every node allocated in the survivors' primary regions is one machine
 * 0's check reached, and each reached node is found there once: a split
 * whose commit died with its coordinator left no node behind. */
static void check_no_orphan(void)
{
	char path[400];
	size_t len;
	snprintf(path, sizeof(path), "%s/nodes", cl.root);
	free(np_read_file(path, &len));
	uint64_t nodes = 0, orphans = 0;
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			ask(i, 'W');
	for (unsigned i = 0; i < NM; i++) {
		if (i == VICTIM)
			continue;
		uint64_t x = answer(i, 'W', 60000);
		assert_true(x != UINT64_MAX);
		nodes += x & 0xffffffffu;
		orphans += x >> 32;
	}
	printf("btree_rec: %zu nodes reached, %" PRIu64
	       " allocated in the primaries, %" PRIu64 " orphans\n",
	       len / 8, nodes, orphans);
	if (opt_broken_orphan) { /* the check must see what splits leaked */
		assert_true(orphans > 0);
		return;
	}
	assert_int_equal(orphans, 0);
	assert_int_equal(nodes, len / 8);
}

static void test_kill_in_split(void **state)
{
	(void)state;
	snprintf(zk_root, sizeof(zk_root), "/libfarm/test-btree-rec-%d",
	         (int)getpid());
	np_start(&cl, "btrec", machine, NULL);
	for (unsigned i = 0; i < NM; i++)
		np_expect(&cl, i, 'R', 60000);
	ask(0, 'C');
	answer(0, 'C', 30000);
	for (unsigned i = 1; i < NM; i++)
		ask(i, 'O');
	for (unsigned i = 1; i < NM; i++)
		answer(i, 'O', 30000);
	for (unsigned i = 0; i < NM; i++)
		ask(i, 'I');
	for (unsigned i = 0; i < NM; i++)
		np_expect(&cl, i, 'p', 60000);
	ask(VICTIM, 'A');
	np_expect(&cl, VICTIM, 'X', 30000);
	assert_int_equal(tu_reap(cl.pid[VICTIM]), 128 + SIGKILL);
	cl.pid[VICTIM] = 0;
	struct kill_msg km = {.victim = VICTIM, .t_kill_ns = np_now_ns()};
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM) {
			np_send(&cl, i, 'K');
			assert_int_equal(tu_send(cl.to[i], &km, sizeof(km)), 0);
		}
	printf("btree_rec: machine %u died in a commit that split a node\n",
	       VICTIM);
	uint64_t puts = 0;
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			puts += answer(i, 'I', RECONF_MS + 120000);
	ask(0, 'V');
	uint64_t nkeys = answer(0, 'V', 60000);
	check_keys(puts, nkeys);
	check_no_orphan();
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			ask(i, 'G');
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			assert_int_equal(answer(i, 'G', 60000), 0);
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			np_send(&cl, i, 'Q');
	int st[NM];
	np_finish(&cl, st);
	for (unsigned i = 0; i < NM; i++)
		if (i != VICTIM)
			assert_int_equal(st[i], 0);
}

static int teardown(void **state)
{
	(void)state;
	np_cleanup(&cl);
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--broken-orphan")) {
			fprintf(stderr, "usage: %s [--broken-orphan]\n",
			        argv[0]);
			return 2;
		}
		opt_broken_orphan = true;
	}
	if (!farm_fault_built()) {
		printf("skipped: built without fault injection\n");
		return FARM_TEST_SKIP;
	}
#ifdef FARM_FAULT_INJECTION
	/* Before the machines fork: each inherits it. */
	atomic_store(&farm_bt_fault_orphan, opt_broken_orphan);
#endif
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_kill_in_split, teardown),
	};
	return tu_zk_run(zk_script, zk_dir, sizeof(zk_dir), zk_connect,
	                 sizeof(zk_connect), "btree_rec", tests, 1);
}
