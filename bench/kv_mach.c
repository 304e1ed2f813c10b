/*
 * kv_bench: a machine process (kv_bench.h): its node and KV store, the
 * operations it keeps in flight (loading, the workloads, the unloaded
 * latency run), and kv_local_bench's measurements when it has them
 * (kb_inner).
 */
#include "kv_bench.h"

/* --demo's lease (lease_us): 5 times the default; see mach_open. */
#define DEMO_LEASE_US "100000"

static int mach_open(struct mach *m, uint32_t id, const char *base,
                     uint64_t nkeys)
{
	char dir[300], v[400];
	snprintf(dir, sizeof(dir), "%s/m%u", base, id);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, PROG ": mkdir %s: %s\n", dir, strerror(errno));
		return -errno;
	}
	uint32_t nb = kb_buckets_for(nkeys);
	farm_conf *c;
	if (bn_conf_new(PROG, &c))
		return -ENOMEM;
	int rc = 0;
	snprintf(v, sizeof(v), "%u", id);
	rc |= bn_set(PROG, c, "machine_id", v);
	rc |= bn_set(PROG, c, "data_dir", dir);
	rc |= bn_set(PROG, c, "fabric", g_opt.net.fabric);
	if (g_opt.lookup[0])
		rc |= bn_set(PROG, c, "kv_lookup", g_opt.lookup);
	char lbuf[96], ip[64];
	if (bnet_listen(&g_opt.net, id, lbuf, sizeof(lbuf)))
		rc |= bn_set(PROG, c, "listen", lbuf);
	if (g_opt.net.netns && bnet_addr(id, ip, sizeof(ip)) == 0)
		rc |= bn_set(PROG, c, "lease_bind", ip);
	snprintf(v, sizeof(v), "%" PRIu64, kb_region_for(nb, nkeys));
	rc |= bn_set(PROG, c, "region_size", v);
	snprintf(v, sizeof(v), "%u", BU_MIN(3u, g_opt.machines));
	rc |= bn_set(PROG, c, "replicas", v);
	rc |= bn_set(PROG, c, "threads", "1");
	rc |= bn_set(PROG, c, "busy_poll", "1");
	/* The demo shows throughput, not how fast a failure is detected:
	 * its leases must outlast the host's worst wake-up latency. On the
	 * 2-core VM at load 20 (a PREEMPT_NONE guest kernel) a SCHED_FIFO 90
	 * thread waited up to 13 ms for a core and the lease thread up to 20
	 * ms, past what a 20 ms lease renewed every 4 ms survives. */
	if (g_opt.demo)
		rc |= bn_set(PROG, c, "lease_us", DEMO_LEASE_US);
	if (g_opt.log_size) {
		snprintf(v, sizeof(v), "%" PRIu64, g_opt.log_size);
		rc |= bn_set(PROG, c, "log_size", v);
	}
	if (g_opt.zk[0]) {
		/* Membership in ZooKeeper: no peer lines; the view fills as
		 * the machines register under this cluster's own root. */
		rc |= bn_set(PROG, c, "zk", g_opt.zk);
		rc |= bn_set(PROG, c, "zk_root", g_opt.zk_root);
		snprintf(v, sizeof(v), "%u", g_opt.machines);
		rc |= bn_set(PROG, c, "expect_machines", v);
	} else {
		rc |= bn_peers(PROG, c, id, g_opt.machines, base);
	}
	rc = rc ? -EINVAL : bn_open(PROG, c, id, &m->node);
	farm_conf_free(c);
	if (rc)
		return rc;
	struct farm_kv_attr a = {.neighborhood = 8,
	                         .key_inline = kb_key_inline(),
	                         .val_inline = kb_val_inline()};
	if ((rc = farm_kv_create(m->node, &a, nb, &m->kv))) {
		fprintf(stderr, PROG ": machine %u: farm_kv_create: %s\n", id,
		        farm_strerror(rc));
		return rc;
	}
	uint32_t lim = farm_kv_value_limit(m->kv, g_opt.ksize);
	if (g_opt.vsize > lim) {
		fprintf(stderr,
		        PROG
		        ": --value-size %u: the store takes at most %" PRIu32
		        " bytes with %u-byte keys (one message: its "
		        "rings' size)\n",
		        g_opt.vsize, lim, g_opt.ksize);
		return -EMSGSIZE;
	}
	farm_node_set_app_loops(m->node, true);
	if ((rc = farm_node_start(m->node, JOIN_MS)) ||
	    (rc = farm_node_loop_open(m->node, 0, &m->loop)) ||
	    (rc = farm_node_wait_members(m->node, g_opt.machines, JOIN_MS))) {
		fprintf(stderr, PROG ": machine %u: cannot join: %s\n", id,
		        farm_strerror(rc));
		return rc;
	}
	if ((rc = farm_kv_attach(m->kv, m->loop)) ||
	    (rc = farm_kv_join_sync(m->kv, m->loop, g_opt.machines, JOIN_MS))) {
		fprintf(stderr, PROG ": machine %u: kv join: %s\n", id,
		        farm_strerror(rc));
		return rc;
	}
	return 0;
}

static void mach_close(struct mach *m)
{
	if (m->kv && m->loop)
		farm_kv_detach(m->kv, m->loop);
	if (m->loop)
		farm_node_loop_close(m->node, m->loop);
	if (m->node)
		farm_node_close(m->node);
	farm_kv_destroy(m->kv);
	free(m->stream);
	free(m->own);
	memset(m, 0, sizeof(*m));
}

/* ---- the machine's work: operations in flight ---------------------------- */

struct eng;

struct op {
	struct eng *e;
	uint64_t t0;
	uint32_t k;    /* key number */
	uint32_t kind; /* OP_* */
	bool busy;
	/* mget */
	uint32_t mk[MGET_N];
	const void *keys[MGET_N];
	uint32_t klens[MGET_N], lens[MGET_N];
	int st[MGET_N];
	uint8_t *kb;   /* keys: MGET_N of g_opt.ksize bytes (mget), else 1 */
	uint8_t *vals; /* values: MGET_N of g_opt.vsize bytes (mget), else 1 */
};

struct eng {
	struct mach *m;
	struct mres *r;
	struct op *ops;
	uint8_t *bufs;
	unsigned nops;
	unsigned *freel;
	unsigned nfree;
	bool counting;
	uint64_t seq, gen;
	uint64_t cnt_ops, cnt_gets, cnt_puts, cnt_keys, err, notfound;
	uint64_t cnt_inserts, cnt_scans, cnt_scan_pairs, cnt_rmws;
	uint64_t sample_mask;
	int first_err;
	/* The gets a pass issues, started together by one farm_kv_get_many
	 * (the client's window); off: one farm_kv_get each (--single-gets,
	 * and outside the measured workloads). */
	bool window;
	unsigned nwin;
	struct op *win[FARM_KV_GET_MANY_MAX];
};

static void eng_sample(struct eng *e, struct op *o)
{
	if (o->t0 && e->counting && e->r->nsamp < SAMP_MAX)
		e->r->samp[e->r->nsamp++] = bu_now_ns() - o->t0;
}

static void op_free(struct eng *e, struct op *o)
{
	o->busy = false;
	e->freel[e->nfree++] = (unsigned)(o - e->ops);
}

static void fail(struct eng *e, int status)
{
	if (!e->err++)
		e->first_err = status;
}

static void put_cb(farm_loop *loop, void *ctx, int status);

static void get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                   uint32_t len)
{
	(void)loop;
	struct op *o = ctx;
	struct eng *e = o->e;
	bool ok = !status && val_ok(o->k, val, len);
	if (status == -ENOENT)
		e->notfound++;
	else if (!ok)
		fail(e, status ? status : -EBADMSG);
	if (o->kind == OP_RMW && ok) {
		/* YCSB F: read, then write the record back changed (the
		 * client's read-modify-write; not one transaction). */
		make_val(o->k, (uint32_t)e->seq++, o->vals);
		int rc = farm_kv_put(e->m->kv, e->m->loop, o->kb, g_opt.ksize,
		                     o->vals, g_opt.vsize, put_cb, o);
		if (!rc)
			return;
		fail(e, rc);
	}
	if (e->counting) {
		e->cnt_ops++;
		e->cnt_gets++;
		e->cnt_keys++;
	}
	eng_sample(e, o);
	op_free(e, o);
}

static void put_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct op *o = ctx;
	struct eng *e = o->e;
	if (status)
		fail(e, status);
	else if (o->kind == OP_INSERT &&
	         (status = kb_ins_ack(&g_sh->ins, o->k - e->m->nkeys)))
		fail(e, status);
	if (e->counting) {
		e->cnt_ops++;
		e->cnt_puts++;
		e->cnt_keys++;
		e->cnt_inserts += o->kind == OP_INSERT;
		if (o->kind == OP_RMW) {
			e->cnt_gets++;
			e->cnt_rmws++;
		}
	}
	if (!g_opt.demo) /* the demo reports lookup latency only */
		eng_sample(e, o);
	op_free(e, o);
}

static void mget_cb(farm_loop *loop, void *ctx)
{
	(void)loop;
	struct op *o = ctx;
	struct eng *e = o->e;
	for (unsigned i = 0; i < MGET_N; i++) {
		if (o->st[i] == -ENOENT)
			e->notfound++;
		else if (o->st[i] ||
		         !val_ok(o->mk[i], o->vals + i * g_opt.vsize,
		                 o->lens[i]))
			fail(e, o->st[i] ? o->st[i] : -EBADMSG);
	}
	if (e->counting) {
		e->cnt_ops++;
		e->cnt_keys += MGET_N;
		e->cnt_gets += MGET_N;
	}
	eng_sample(e, o);
	op_free(e, o);
}

static void load_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct op *o = ctx;
	struct eng *e = o->e;
	if (status)
		fail(e, status);
	e->cnt_ops++;
	op_free(e, o);
}

/* YCSB E's scan: pairs of this machine's shard from the home bucket of
 * the start key on, in the table's order. Each is checked: its value
 * names a key number whose key it must be. */
struct scan {
	unsigned left, seen, bad;
	uint8_t key[KLEN_MAX];
};

static bool scan_pair(void *ctx, const void *key, uint32_t klen,
                      const void *val, uint32_t vlen)
{
	struct scan *s = ctx;
	uint64_t i;
	if (vlen >= 8)
		memcpy(&i, val, 8);
	if (vlen < 8 || i >= KEY_LIMIT || !val_ok(i, val, vlen) ||
	    klen != g_opt.ksize ||
	    (make_key(i, s->key), memcmp(key, s->key, klen)))
		s->bad++;
	s->seen++;
	return --s->left > 0;
}

static int do_scan(struct eng *e, struct op *o)
{
	struct scan s = {.left = 1 + (unsigned)(mix64(e->seq) % SCAN_MAX)};
	make_key(o->k, o->kb);
	if (!kb_inner || !kb_inner->scan_from)
		return -EOPNOTSUPP; /* kv_bench refuses --mix E */
	long n = kb_inner->scan_from(e->m, o->kb, g_opt.ksize, scan_pair, &s);
	if (n < 0)
		return (int)n;
	if (s.bad)
		fail(e, -EBADMSG);
	if (e->counting) {
		e->cnt_ops++;
		e->cnt_scans++;
		e->cnt_scan_pairs += s.seen;
		e->cnt_keys += s.seen;
		e->cnt_gets += s.seen;
	}
	eng_sample(e, o);
	op_free(e, o);
	return 0;
}

/* Start the window's gets in one call. A get refused for want of a
 * lookup slot (-EAGAIN, -ENOBUFS) goes back to the free ops as a refused
 * issue does; returns the first other refusal, or 0. */
static int eng_flush(struct eng *e)
{
	const void *keys[FARM_KV_GET_MANY_MAX];
	uint32_t klens[FARM_KV_GET_MANY_MAX];
	void *ctxs[FARM_KV_GET_MANY_MAX];
	int rcs[FARM_KV_GET_MANY_MAX];
	unsigned n = e->nwin;
	e->nwin = 0;
	if (!n)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		keys[i] = e->win[i]->kb;
		klens[i] = g_opt.ksize;
		ctxs[i] = e->win[i];
	}
	int rc = farm_kv_get_many(e->m->kv, e->m->loop, n, keys, klens, get_cb,
	                          ctxs, rcs);
	for (unsigned i = 0; i < n; i++) {
		int r = rc ? rc : rcs[i];
		if (!r)
			continue;
		op_free(e, e->win[i]);
		if (r != -EAGAIN && r != -ENOBUFS && !rc)
			rc = r;
	}
	return rc;
}

/* Issue stream entry @s as an operation on free op @o: 0 (in flight, or
 * done already: a scan), or -EAGAIN/-ENOBUFS (try later). */
static int issue(struct eng *e, struct op *o, int wl, uint32_t s)
{
	struct mach *m = e->m;
	o->t0 = (e->seq++ & e->sample_mask) == 0 ? bu_now_ns() : 0;
	o->kind = op_of(s);
	o->k = key_of(s);
	int rc;
	if (wl == W_MGET) {
		for (unsigned i = 0; i < MGET_N; i++) {
			uint32_t kk =
			        key_of(e->m->stream[(e->gen + i) % STREAM_LEN]);
			uint8_t *kb = o->kb + (size_t)i * g_opt.ksize;
			o->mk[i] = kk;
			make_key(kk, kb);
			o->keys[i] = kb;
			o->klens[i] = g_opt.ksize;
		}
		e->gen += MGET_N;
		rc = farm_kv_mget(m->kv, m->loop, MGET_N, o->keys, o->klens,
		                  o->vals, g_opt.vsize, o->lens, o->st, mget_cb,
		                  o);
		if (!rc)
			o->busy = true;
		return rc;
	}
	if (o->kind == OP_INSERT) {
		uint64_t n = atomic_fetch_add(&g_sh->ins.next, 1);
		if (m->nkeys + n >= KEY_LIMIT) /* no numbers left: read */
			o->kind = OP_READ;
		else
			o->k = (uint32_t)(m->nkeys + n);
	}
	if (o->kind == OP_READ && g_wdesc[wl].dist == D_LATEST)
		o->k = (uint32_t)latest_key(
		        m->nkeys, atomic_load(&g_sh->ins.limit), o->k);
	if (o->kind == OP_SCAN)
		return do_scan(e, o);
	make_key(o->k, o->kb);
	if (o->kind == OP_UPDATE || o->kind == OP_INSERT ||
	    o->kind == OP_LOAD) {
		make_val(o->k, (uint32_t)e->seq, o->vals);
		rc = farm_kv_put(m->kv, m->loop, o->kb, g_opt.ksize, o->vals,
		                 g_opt.vsize,
		                 o->kind == OP_LOAD ? load_cb : put_cb, o);
	} else if (e->window) {
		if (e->nwin == FARM_KV_GET_MANY_MAX && (rc = eng_flush(e)))
			return rc;
		e->win[e->nwin++] = o; /* started by eng_flush */
		rc = 0;
	} else {
		rc = farm_kv_get(m->kv, m->loop, o->kb, g_opt.ksize, get_cb, o);
	}
	if (!rc)
		o->busy = true;
	return rc;
}

/* @n ops, each with room for @per keys and values. */
static int eng_init(struct eng *e, struct mach *m, struct mres *r, unsigned n,
                    unsigned per)
{
	memset(e, 0, sizeof(*e));
	e->m = m;
	e->r = r;
	e->nops = n;
	size_t kb = (size_t)per * g_opt.ksize, vb = (size_t)per * g_opt.vsize;
	e->ops = calloc(n, sizeof(*e->ops));
	e->freel = calloc(n, sizeof(*e->freel));
	e->bufs = malloc(n * (kb + vb));
	if (!e->ops || !e->freel || !e->bufs) {
		free(e->ops);
		free(e->freel);
		free(e->bufs);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		e->ops[i].e = e;
		e->ops[i].kb = e->bufs + i * (kb + vb);
		e->ops[i].vals = e->ops[i].kb + kb;
		e->freel[e->nfree++] = n - 1 - i;
	}
	e->sample_mask = g_opt.sample_every - 1;
	return 0;
}

static void eng_fini(struct eng *e)
{
	/* Operations still out (a drain that timed out, an interrupt)
	 * complete into their op when the node closes, and their
	 * continuations reach the engine through it: keep the ops and move
	 * the engine, which lives on its caller's stack, to the heap (the
	 * process is ending; both are left to its exit). */
	if (e->nfree < e->nops) {
		struct eng *kept = malloc(sizeof(*kept));
		if (!kept) { /* a late continuation would find a dead frame */
			fprintf(stderr,
			        PROG ": out of memory keeping %u "
			             "operations in flight\n",
			        e->nops - e->nfree);
			_exit(3);
		}
		*kept = *e;
		kept->counting = false; /* no samples into the results */
		for (unsigned i = 0; i < kept->nops; i++)
			kept->ops[i].e = kept;
		return;
	}
	free(e->ops);
	free(e->freel);
	free(e->bufs);
}

/* Poll until every op is back (or @deadline). */
static int eng_drain(struct eng *e, uint64_t deadline)
{
	while (e->nfree < e->nops) {
		(void)farm_loop_poll(e->m->loop);
		if (bu_now_ns() > deadline || interrupted) {
			fprintf(stderr,
			        PROG ": machine %u: %u operations never "
			             "completed\n",
			        e->m->id, e->nops - e->nfree);
			return -ETIMEDOUT;
		}
	}
	return 0;
}

/* Load keys i = id mod M. */
static int do_load(struct mach *m)
{
	struct eng e;
	int rc = eng_init(&e, m, &g_sh->res[m->id], g_opt.load_depth, 1);
	if (rc)
		return rc;
	uint64_t next = m->id, done_reported = 0;
	uint64_t last = bu_now_ns();
	while (next < m->nkeys || e.nfree < e.nops) {
		while (e.nfree && next < m->nkeys) {
			struct op *o = &e.ops[e.freel[e.nfree - 1]];
			e.nfree--;
			rc = issue(&e, o, -1, entry(OP_LOAD, next));
			if (rc) {
				e.freel[e.nfree++] = (unsigned)(o - e.ops);
				if (rc != -EAGAIN && rc != -ENOBUFS)
					goto out;
				rc = 0;
				break;
			}
			next += g_opt.machines;
		}
		(void)farm_loop_poll(m->loop);
		if (e.cnt_ops - done_reported >= 4096) {
			atomic_store(&g_sh->m[m->id].loaded, e.cnt_ops);
			done_reported = e.cnt_ops;
			last = bu_now_ns();
		} else if (bu_now_ns() - last > STALL_NS) {
			fprintf(stderr, PROG ": machine %u: loading stalled\n",
			        m->id);
			rc = -ETIMEDOUT;
			goto out;
		}
		if (e.err) {
			fprintf(stderr,
			        PROG ": machine %u: a put of key %s failed: "
			             "%s\n",
			        m->id, "", farm_strerror(e.first_err));
			rc = -EIO;
			goto out;
		}
		if (interrupted) {
			rc = -EINTR;
			goto out;
		}
	}
	atomic_store(&g_sh->m[m->id].loaded, e.cnt_ops);
out:
	if (rc)
		(void)eng_drain(&e, bu_now_ns() + 5 * NS);
	eng_fini(&e);
	return rc;
}

/* The loaded keys of this machine's shard, as the store has them: each
 * pair's value starts with its key number (make_val). */
struct own_keys {
	uint32_t *v;
	uint64_t n, cap, nkeys;
};

static bool own_pair(void *ctx, const void *key, uint32_t klen, const void *val,
                     uint32_t vlen)
{
	(void)key;
	struct own_keys *o = ctx;
	uint64_t i;
	if (vlen < 8 || klen != g_opt.ksize)
		return true; /* not one of the benchmark's keys */
	memcpy(&i, val, 8);
	if (i < o->nkeys && o->n < o->cap)
		o->v[o->n++] = (uint32_t)i;
	return true;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* m->own: the key numbers below m->nkeys of this machine's shard, in
 * increasing order (the streams' draws are then the same whichever order
 * the shard holds them in). While no machine writes (CMD_OWN, after the
 * load): the shard is read in place. */
static int learn_own(struct mach *m)
{
	uint64_t cap = m->nkeys / g_opt.machines * 2 + 1024;
	struct own_keys o = {.v = malloc(cap * sizeof(uint32_t)),
	                     .cap = cap,
	                     .nkeys = m->nkeys};
	if (!o.v)
		return -ENOMEM;
	long n = farm_kv_iterate_local(m->kv, own_pair, &o);
	if (n < 0 || !o.n) {
		free(o.v);
		return n < 0 ? (int)n : -ENOENT;
	}
	qsort(o.v, o.n, sizeof(*o.v), cmp_u32);
	m->own = o.v;
	m->nown = o.n;
	return 0;
}

int kb_make_stream(struct mach *m, int wl)
{
	if (!m->stream && !(m->stream = malloc(STREAM_LEN * sizeof(uint32_t))))
		return -ENOMEM;
	if (m->stream_wl == wl + 1)
		return 0; /* made already (streams are deterministic) */
	m->stream_wl = 0;
	uint64_t seed = 0x1234567ull * (m->id + 1) + (uint64_t)wl * 7919;
	if (g_wdesc[wl].dist != D_OWN && g_wdesc[wl].dist != D_OTHERS) {
		kb_gen_stream(m->stream, STREAM_LEN, wl, m->nkeys, g_sh->zeta_n,
		              seed, NULL, 0);
		m->stream_wl = wl + 1;
		return 0;
	}
	if (!m->own)
		return -ENOENT; /* CMD_OWN first */
	if (g_wdesc[wl].scan && !m->zeta_own)
		m->zeta_own = kb_zeta(m->nown, g_opt.theta);
	kb_gen_stream(m->stream, STREAM_LEN, wl, m->nkeys, m->zeta_own, seed,
	              m->own, m->nown);
	m->stream_wl = wl + 1;
	return 0;
}

/* One pass's issues: every free op, at most depth of them (scans finish
 * at once, and the loop must still be polled between them), up to the
 * first refused for want of room; then the window's gets started. 0, or
 * the first other refusal. */
static int issue_pass(struct eng *e, int wl)
{
	for (unsigned n = 0; e->nfree && n < e->nops; n++) {
		struct op *o = &e->ops[e->freel[e->nfree - 1]];
		e->nfree--;
		uint32_t k = e->m->stream[e->gen++ % STREAM_LEN];
		int rc = issue(e, o, wl, k);
		if (rc) {
			e->freel[e->nfree++] = (unsigned)(o - e->ops);
			if (rc != -EAGAIN && rc != -ENOBUFS)
				return rc; /* the window: released by do_run */
			break;
		}
	}
	return eng_flush(e);
}

/* --alt-gets: the window (mode 0) and single gets (mode 1) take turns,
 * ALT_SLICE_NS each, their gets and this thread's CPU time counted apart,
 * so both shapes meet the same table, keys and host: on this shared host
 * a run's rates move by half between runs, more than the change. */
enum { ALT_SLICE_NS = 50 * 1000 * 1000 };
struct alt {
	int mode;
	uint64_t slice_t0, cpu0, gets0;
	uint64_t gets[2], cpu[2];
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

/* At a pass's start (the window flushed): close the slice when due. */
static void alt_tick(struct alt *a, struct eng *e, uint64_t now)
{
	if (!e->counting || now - a->slice_t0 < ALT_SLICE_NS)
		return;
	uint64_t c = thread_cpu_ns();
	if (a->slice_t0) {
		a->gets[a->mode] += e->cnt_gets - a->gets0;
		a->cpu[a->mode] += c - a->cpu0;
		a->mode ^= 1;
	}
	e->window = a->mode == 0;
	a->slice_t0 = now;
	a->cpu0 = c;
	a->gets0 = e->cnt_gets;
}

static void alt_report(const struct alt *a, const struct mach *m, int wl)
{
	if (!a->cpu[0] || !a->cpu[1] || !a->gets[0] || !a->gets[1])
		return;
	double w = (double)a->gets[0] * 1e3 / (double)a->cpu[0],
	       s = (double)a->gets[1] * 1e3 / (double)a->cpu[1];
	printf("  machine %u, %s: window %.3f M gets per CPU-s (%.2f "
	       "CPU-s), single %.3f M (%.2f CPU-s): window / single %.3f\n",
	       m->id, g_wdesc[wl].key, w, (double)a->cpu[0] / 1e9, s,
	       (double)a->cpu[1] / 1e9, w / s);
	fflush(stdout);
}

/* A run's passes and its idle passes before the start, each in a function
 * of its own: what `valgrind --tool=callgrind --toggle-collect=kb_pass`
 * (and kb_idle_pass) counts (bench/kv_callgrind.py: instructions a get,
 * and a pass with nothing to do). */
__attribute__((noinline)) static void kb_idle_pass(farm_loop *loop)
{
	(void)farm_loop_poll(loop);
}

__attribute__((noinline)) static int kb_pass(struct eng *e, int wl)
{
	int rc = issue_pass(e, wl);
	if (!rc)
		(void)farm_loop_poll(e->m->loop);
	return rc;
}

/* Run workload @wl with @depth ops in flight, counting in [go, go+dur]. */
static int do_run(struct mach *m, int wl, unsigned depth, uint64_t go,
                  uint64_t dur, uint64_t warm)
{
	struct mres *r = &g_sh->res[m->id];
	int rc = kb_make_stream(m, wl);
	if (rc)
		return rc;
	struct eng e;
	if (wl == W_MGET)
		depth = (depth + MGET_N - 1) / MGET_N;
	if ((rc = eng_init(&e, m, r, depth, wl == W_MGET ? MGET_N : 1)))
		return rc;
	if (depth == 1)
		e.sample_mask = 0;
	/* One get in flight has nothing to group (farm_kv_get_many of one
	 * key costs a little more than farm_kv_get). */
	e.window = !g_opt.single_gets && depth > 1;
	struct alt alt = {0};
	r->nsamp = 0;
	uint64_t start = go - warm, end = go + dur, t0 = 0, t1 = 0;
	uint64_t now;
	while ((now = bu_now_ns()) < start && !interrupted)
		kb_idle_pass(m->loop);
	/* The clock once in CLOCK_PASSES passes: a pass is about a
	 * microsecond, and a clock read on a virtual machine's clock source
	 * (kvm-clock here: about 40 ns) each pass was a third of the
	 * machines' time in the profile (docs/profiles/). */
	enum { CLOCK_PASSES = 16 };
	for (unsigned pass = 0;; pass++) {
		if (pass % CLOCK_PASSES == 0)
			now = bu_now_ns();
		if (!e.counting && !t0 && now >= go) {
			e.counting = true;
			t0 = now;
		}
		if (now >= end)
			break;
		if (g_opt.alt_gets && depth > 1)
			alt_tick(&alt, &e, now);
		if ((rc = kb_pass(&e, wl))) {
			fprintf(stderr, PROG ": machine %u: %s\n", m->id,
			        farm_strerror(rc));
			goto out;
		}
		if (interrupted) {
			rc = -EINTR;
			goto out;
		}
	}
	t1 = now;
	e.counting = false;
	r->ops = e.cnt_ops;
	r->gets = e.cnt_gets;
	r->puts = e.cnt_puts;
	r->keys = e.cnt_keys;
	r->inserts = e.cnt_inserts;
	r->scans = e.cnt_scans;
	r->scan_pairs = e.cnt_scan_pairs;
	r->rmws = e.cnt_rmws;
	r->ns = t1 - t0;
	if (g_opt.alt_gets && wl != W_MGET)
		alt_report(&alt, m, wl);
out:
	while (e.nwin) /* never started */
		op_free(&e, e.win[--e.nwin]);
	int rc2 = eng_drain(&e, bu_now_ns() + 10 * NS);
	r->errors = e.err;
	r->notfound = e.notfound;
	eng_fini(&e);
	if (!rc && e.err) {
		fprintf(stderr,
		        PROG
		        ": machine %u: %s: %" PRIu64
		        " operations failed or read wrong values (first: %s)\n",
		        m->id, g_wdesc[wl].key, e.err,
		        farm_strerror(e.first_err));
		rc = -EIO;
	}
	return rc ? rc : rc2;
}

/* Command @cmd of the coordinator on machine @m. */
static int mach_cmd(struct mach *m, int cmd)
{
	switch (cmd) {
	case CMD_LOAD: return do_load(m);
	case CMD_RUN:
		return do_run(m, g_sh->wl, g_opt.depth, g_sh->go_ns,
		              g_sh->dur_ns, g_sh->warm_ns);
	case CMD_LAT:
		return m->id == 0 ? do_run(m, W_C, 1, g_sh->go_ns, g_sh->dur_ns,
		                           g_sh->warm_ns)
		                  : 0;
	case CMD_LAT_OTHERS:
		return m->id == 0 ? do_run(m, W_RC, 1, g_sh->go_ns,
		                           g_sh->dur_ns, g_sh->warm_ns)
		                  : 0;
	case CMD_OWN: return m->own ? 0 : learn_own(m);
	case CMD_STREAM: return kb_make_stream(m, g_sh->wl);
	case CMD_INNER:
		if (!kb_inner || !kb_inner->cmd)
			return -EINVAL;
		return m->id == 0 ? kb_inner->cmd(m, g_sh->dur_ns) : 0;
	default: return -EINVAL;
	}
}

int kb_machine_main(uint32_t id, const char *base, uint64_t nkeys, int cpu)
{
	struct mach m = {.id = id, .nkeys = nkeys, .base = base};
	bu_pin_to(cpu, PROG);
	int rc = mach_open(&m, id, base, nkeys);
	if (!rc && kb_inner && kb_inner->ready)
		rc = kb_inner->ready(&m);
	if (rc) {
		g_sh->m[id].err = rc;
		atomic_store(&g_sh->m[id].state, ST_FAILED);
		mach_close(&m);
		return 1;
	}
	atomic_store(&g_sh->m[id].state, ST_READY);
	int seen = 0;
	for (;;) {
		int s;
		/* While the coordinator measures the limit, an idle pass
		 * naps 1 ms (10 while a peer runs): busy-polling, each machine
		 * held one of the host's two CPUs and the limit loop shared one
		 * with it (time slices, a cold cache after each). A 50 us nap
		 * woke it up to 20,000 times a second on the loop's CPU, which
		 * lost a third of its rate. Nothing of the benchmark's waits
		 * on an idle machine; leases have their own thread. */
		int nap;
		while ((s = atomic_load(&g_sh->seq)) == seen && !interrupted)
			if (farm_loop_poll(m.loop) == 0 &&
			    (nap = atomic_load_explicit(&g_sh->nap,
			                                memory_order_relaxed)))
				kb_nap_ms(nap);
		if (interrupted) {
			rc = -EINTR;
			break;
		}
		seen = s;
		int cmd = g_sh->cmd;
		if (cmd == CMD_QUIT)
			break;
		memset(&g_sh->res[id], 0, offsetof(struct mres, samp));
		rc = mach_cmd(&m, cmd);
		g_sh->hst[id] =
		        (farm_kv_table_stats){.size = sizeof(g_sh->hst[id])};
		if (farm_kv_table_stats_get(m.kv, &g_sh->hst[id]))
			g_sh->hst[id] = (farm_kv_table_stats){0};
		farm_txm_stats_get(farm_node_txm(m.node), &g_sh->tst[id]);
		if (rc) {
			g_sh->m[id].err = rc;
			atomic_store(&g_sh->m[id].state, ST_FAILED);
			break;
		}
		atomic_store(&g_sh->m[id].done, seen);
	}
	/* Keep serving until everyone is told to go, then leave. */
	mach_close(&m);
	return rc ? 1 : 0;
}
