/*
 * The fault campaign (campaign.h): the replica commands a paused
 * machine answers: its copies' object lists ('H'), the objects that
 * differ between two copies ('O'), --hold-end's cold objects ('W',
 * 'K').
 */
#include "campaign.h"

struct cp_walk {
	const uint8_t *base;
	struct cp_obj *o;
	size_t n, cap;
};

static void cp_count_backups(void *ctx, uint32_t coord, int type, uint64_t txid)
{
	(void)coord;
	(void)txid;
	if (type == FARM_TXN_TESTING_COMMIT_BACKUP)
		(*(unsigned *)ctx)++;
}

/* One object: its offset and a hash of its slot, a word at a time. */
static void cp_hash_one(struct cp_walk *w, const uint8_t *p, uint32_t lines);

static void cp_hash_object(void *ctx, struct farm_objhdr *obj, uint32_t lines)
{
	const uint8_t *p = (const uint8_t *)obj;
	uint64_t inc;
	memcpy(&inc, p + 8, 8);
	uint32_t el = (uint32_t)((inc >> 1) & 0x3fff) + 1;
	if (el >= lines) {
		cp_hash_one(ctx, p, lines);
		return;
	}
	for (uint32_t l = 0; l + el <= lines; l += el) {
		memcpy(&inc, p + (uint64_t)l * 64 + 8, 8);
		if (inc & 1)
			cp_hash_one(ctx, p + (uint64_t)l * 64, el);
	}
}

static void cp_hash_one(struct cp_walk *w, const uint8_t *p, uint32_t lines)
{
	uint64_t h = 1469598103934665603ull;
	for (uint64_t o = 0; o + 8 <= (uint64_t)lines * 64; o += 8) {
		uint64_t x;
		memcpy(&x, p + o, 8);
		h = (h ^ x) * 1099511628211ull;
		h ^= h >> 29;
	}
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 256;
		struct cp_obj *o = realloc(w->o, cap * sizeof(*o));
		if (!o)
			return;
		w->o = o;
		w->cap = cap;
	}
	uint64_t v, inc;
	memcpy(&v, p, 8);
	memcpy(&inc, p + 8, 8);
	w->o[w->n++] = (struct cp_obj){.off = (uint64_t)(p - w->base),
	                               .hash = h,
	                               .v = v,
	                               .w = inc,
	                               .lines = lines};
}

static int cp_obj_cmp(const void *a, const void *b)
{
	const struct cp_obj *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

void cp_copy_path(char *path, size_t len, const char *root, uint32_t region,
                  unsigned m)
{
	snprintf(path, len, "%.256s/copy-%08" PRIx32 "-m%u", root, region, m);
}

/* Data recovery's last complete copy of each region of @r here, into
 * r->dr_bytes and r->dr_ns (--reuse-measure's fresh copy). */
static void cp_hash_dr(struct cp_child *c, struct cp_hashes *r)
{
	struct farm_datarec_region *d = calloc(256, sizeof(*d));
	unsigned n =
	        d ? FARM_MIN(farm_txm_datarec_get(c->tx.txm, d, 256), 256u) : 0;
	for (unsigned i = 0; i < r->n; i++)
		for (unsigned k = 0; k < n; k++)
			if (d[k].region == r->region[i] &&
			    d[k].state == FARM_DATAREC_DONE) {
				r->dr_bytes[i] = d[k].bytes;
				r->dr_ns[i] = d[k].t_done_ns - d[k].t_start_ns;
			}
	free(d);
}

static int cp_hash_regions(struct cp_child *c)
{
	static const volatile int never = 0;
	farm_as *as = farm_node_as(c->tx.np.node);
	struct cp_hashes *r = calloc(1, sizeof(*r));
	if (!r)
		return -1;
	uint64_t dl = np_now_ns() + 10000000000ull;
	for (;;) {
		r->pending = 0;
		(void)farm_txm_testing_records(c->tx.txm, cp_count_backups,
		                               &r->pending);
		struct farm_galloc_stats gs;
		farm_galloc_stats(farm_node_galloc(c->tx.np.node), &gs);
		r->deferred = gs.frees_deferred - gs.deferred_freed -
		              gs.deferred_lost;
		if ((!r->pending && !r->deferred) || np_now_ns() > dl)
			break;
		(void)farm_loop_wait(c->tx.np.loop, &never, 1000000ull);
	}
	struct farm_as_held hl[RP_MAXREG];
	r->n = FARM_MIN(farm_as_held(as, hl, RP_MAXREG), RP_MAXREG);
	for (unsigned i = 0; i < r->n; i++) {
		enum farm_as_role role;
		farm_region *g = farm_as_local_region(as, hl[i].region, &role);
		r->region[i] = hl[i].region;
		r->role[i] = (int)hl[i].role;
		struct cp_walk w = {.base = g ? farm_region_base(g) : NULL};
		r->objects[i] = g ? farm_alloc_walk_region(farm_region_base(g),
		                                           farm_region_size(g),
		                                           hl[i].region,
		                                           cp_hash_object, &w)
		                  : -ENOENT;
		if (w.n)
			qsort(w.o, w.n, sizeof(*w.o), cp_obj_cmp);
		char path[320];
		cp_copy_path(path, sizeof(path), c->tx.np.cl->root,
		             hl[i].region, c->tx.np.me);
		if (np_write_file(path, w.o, w.n * sizeof(*w.o)))
			r->objects[i] = -EIO;
		free(w.o);
	}
	cp_hash_dr(c, r);
	int rc = np_say(&c->tx.np, 'h', r, sizeof(*r));
	free(r);
	return rc;
}

void cp_probe_path(char *path, size_t len, const char *root, unsigned m)
{
	if (m == ~0u)
		snprintf(path, len, "%.256s/probe", root);
	else
		snprintf(path, len, "%.256s/probe-m%u", root, m);
}

/* The bytes of the probe's objects, at this machine's copy and at its
 * demoted copy if it holds one. */
static void cp_probe_objects(farm_as *as, const struct cp_probe *q,
                             const uint8_t *base, struct cp_probe_ans *a)
{
	uint64_t rs = farm_as_region_size(as);
	for (unsigned k = 0; k < q->n && k < CP_PROBE_OBJS; k++) {
		uint64_t off = q->off[k];
		if (off + CP_PROBE_BYTES > rs)
			continue;
		if (base)
			memcpy(a->obj[k], base + off, CP_PROBE_BYTES);
		const void *d = farm_as_demoted_ptr(
		        as, farm_gaddr_make(q->region, off), CP_PROBE_BYTES);
		a->demoted |= d != NULL;
		if (d)
			memcpy(a->dem[k], d, CP_PROBE_BYTES);
	}
}

static int cp_probe_answer(struct cp_child *c)
{
	farm_as *as = farm_node_as(c->tx.np.node);
	char path[320];
	cp_probe_path(path, sizeof(path), c->tx.np.cl->root, ~0u);
	size_t len = 0;
	struct cp_probe *q = np_read_file(path, &len);
	struct cp_probe_ans *a = calloc(1, sizeof(*a));
	if (!q || len != sizeof(*q) || !a) {
		free(q);
		free(a);
		return np_say(&c->tx.np, 'o', NULL, 0);
	}
	enum farm_as_role role;
	farm_region *g = farm_as_local_region(as, q->region, &role);
	a->role = g ? (int)role : -1;
	a->filling = farm_as_backup_filling(as, q->region);
	a->config = farm_node_config_id(c->tx.np.node);
	a->nreps = farm_as_replicas(as, q->region, a->reps);
	a->extra = farm_as_extra(as, q->region);
	struct farm_datarec_region dr[RP_MAXREG];
	unsigned ndr = FARM_MIN(farm_txm_datarec_get(c->tx.txm, dr, RP_MAXREG),
	                        RP_MAXREG);
	for (unsigned k = 0; k < ndr; k++)
		if (dr[k].region == q->region) {
			a->dr = dr[k];
			a->have_dr = true;
		}
	cp_probe_objects(as, q, g ? farm_region_base(g) : NULL, a);
	cp_probe_path(path, sizeof(path), c->tx.np.cl->root, c->tx.np.me);
	int rc = np_write_file(path, a, sizeof(*a));
	free(q);
	free(a);
	return np_say(&c->tx.np, 'o', NULL, 0) || rc ? -1 : 0;
}

/* A cold object's bytes: a pattern of its address. */
static void cp_fill_cold(void *d, uint32_t size, farm_gaddr a)
{
	uint64_t x = a ^ 0x9e3779b97f4a7c15ull;
	for (uint32_t o = 0; o + 8 <= size; o += 8) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		memcpy((uint8_t *)d + o, &x, 8);
	}
}

/* A region machine CP_HOLD backs up (a backup, not its primary) and
 * machine @me holds no copy of. */
static bool cp_cold_region(farm_as *as, uint32_t region, uint32_t me)
{
	uint32_t reps[FARM_RING_MAX_REPLICAS];
	unsigned n = farm_as_replicas(as, region, reps);
	bool backup = false;
	for (unsigned k = 0; k < n; k++) {
		if (reps[k] == me)
			return false;
		backup |= k > 0 && reps[k] == CP_HOLD;
	}
	return backup;
}

/* --hold-end, 'W' (paused; the primary of a region machine CP_HOLD backs
 * up): CP_COLD objects allocated here, their fat pointers in the
 * cluster's file "cold" for the machine about to be killed ('K'). 'w'. */
#define CP_COLD 16u
static int cp_make_cold(struct cp_child *c)
{
	farm_fatptr p[CP_COLD];
	unsigned n = 0;
	farm_tx *tx;
	if (farm_tx_begin(c->tx.txm, c->tx.np.loop, &tx))
		return -1;
	for (; n < CP_COLD; n++) {
		void *d;
		if (farm_tx_alloc_sync(tx, 256, FARM_GADDR_NULL, &p[n], &d))
			break;
		memset(d, 0x5a, 256);
	}
	int rc = n ? farm_tx_commit_sync(tx) : -ENOMEM;
	farm_tx_free(tx);
	char path[320];
	snprintf(path, sizeof(path), "%.300s/cold", c->tx.np.cl->root);
	if (rc || np_write_file(path, p, n * sizeof(p[0])))
		n = 0;
	return np_say(&c->tx.np, 'w', &n, sizeof(n));
}

/* --hold-end, 'K' (paused, about to be killed): every object of "cold" in
 * a region CP_HOLD backs up and this machine holds no copy of, written
 * here in a transaction of its own and never again. Their COMMIT-BACKUPs
 * wait at CP_HOLD for truncation when the kill comes, so CP_HOLD's copies
 * get these images only from recovery; later transfers write nothing
 * over them. 'k' and how many. */
static int cp_write_cold(struct cp_child *c)
{
	farm_as *as = farm_node_as(c->tx.np.node);
	char path[320];
	snprintf(path, sizeof(path), "%.300s/cold", c->tx.np.cl->root);
	size_t len = 0;
	farm_fatptr *p = np_read_file(path, &len);
	unsigned made = 0;
	for (size_t i = 0; p && i < len / sizeof(*p); i++) {
		if (!cp_cold_region(as, farm_gaddr_region(p[i].addr),
		                    c->tx.np.me))
			continue;
		farm_tx *tx;
		const void *old;
		void *d;
		if (farm_tx_begin(c->tx.txm, c->tx.np.loop, &tx))
			break;
		int rc = farm_tx_read_sync(tx, p[i].addr, 256, &old);
		if (!rc)
			rc = farm_tx_write(tx, p[i].addr, &d);
		if (!rc) {
			cp_fill_cold(d, 256, p[i].addr);
			rc = farm_tx_commit_sync(tx);
		}
		farm_tx_free(tx);
		made += !rc;
	}
	free(p);
	return np_say(&c->tx.np, 'k', &made, sizeof(made));
}

/* The replica commands a paused machine answers: 'F' (TRUNCATE records
 * now), 'H', 'W', 'K', 'O'. 1: not one of them. */
int cp_replica_cmd(struct cp_child *c, int cmd)
{
	if (cmd == 'F') {
		(void)farm_txm_testing_truncate(c->tx.txm, c->tx.np.loop);
		return np_say(&c->tx.np, 'f', NULL, 0) ? -1 : 0;
	}
	if (cmd == 'H')
		return cp_hash_regions(c) ? -1 : 0;
	if (cmd == 'W')
		return cp_make_cold(c) ? -1 : 0;
	if (cmd == 'K')
		return cp_write_cold(c) ? -1 : 0;
	if (cmd == 'O')
		return cp_probe_answer(c) ? -1 : 0;
	return 1;
}
