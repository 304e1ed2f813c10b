/*
 * kv_bench: keys, values, key choice (uniform, YCSB's scrambled zipfian)
 * and small helpers (kv_bench.h).
 */
#include "kv_bench.h"

const struct wdesc g_wdesc[NW] = {
        [W_C] = {"uniform C (100/0)", "uniform_c", 0, 0, 0, 0, D_UNIFORM},
        [W_B] = {"uniform B (95/5)", "uniform_b", 5, 0, 0, 0, D_UNIFORM},
        [W_A] = {"uniform A (50/50)", "uniform_a", 50, 0, 0, 0, D_UNIFORM},
        [W_ZC] = {"zipf C (100/0)", "zipf_c", 0, 0, 0, 0, D_ZIPF},
        [W_ZB] = {"zipf B (95/5)", "zipf_b", 5, 0, 0, 0, D_ZIPF},
        [W_ZA] = {"zipf A (50/50)", "zipf_a", 50, 0, 0, 0, D_ZIPF},
        [W_MGET] = {"mget24 uniform", "mget24", 0, 0, 0, 0, D_UNIFORM},
        [W_LOCAL] = {"C own shard", "uniform_c_own_shard", 0, 0, 0, 0, D_OWN},
        /* YCSB's core workloads (workloads/workloada .. f). */
        [W_YA] = {"YCSB A (50/50 upd)", "ycsb_a", 50, 0, 0, 0, D_ZIPF},
        [W_YB] = {"YCSB B (95/5 upd)", "ycsb_b", 5, 0, 0, 0, D_ZIPF},
        [W_YC] = {"YCSB C (read only)", "ycsb_c", 0, 0, 0, 0, D_ZIPF},
        [W_YD] = {"YCSB D (latest)", "ycsb_d", 0, 5, 0, 0, D_LATEST},
        [W_YE] = {"YCSB E (scan)", "ycsb_e", 0, 5, 95, 0, D_OWN},
        [W_YF] = {"YCSB F (rmw)", "ycsb_f", 0, 0, 0, 50, D_ZIPF},
        [W_RC] = {"C other shards", "uniform_c_other_shards", 0, 0, 0, 0,
                  D_OTHERS},
};

static int cmp_key(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* A uniform key number below @nkeys that is not in the sorted @own (all
 * keys when @own holds every one: a machine alone). */
static uint64_t other_key(uint64_t *rng, uint64_t nkeys, const uint32_t *own,
                          uint64_t nown)
{
	for (;;) {
		uint64_t k = bu_rand64(rng) % nkeys;
		uint32_t k32 = (uint32_t)k;
		if (nown >= nkeys ||
		    !bsearch(&k32, own, nown, sizeof(*own), cmp_key))
			return k;
	}
}

double kb_zeta(uint64_t n, double theta)
{
	double s = 0;
	for (uint64_t i = 1; i <= n; i++)
		s += 1.0 / pow((double)i, theta);
	return s;
}

void kb_zipf_init(struct zipf *z, uint64_t n, double zetan)
{
	z->n = n;
	z->theta = g_opt.theta;
	z->alpha = 1.0 / (1.0 - z->theta);
	z->zetan = zetan;
	double zeta2 = 1.0 + pow(0.5, z->theta);
	z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - z->theta)) /
	         (1.0 - zeta2 / zetan);
	z->half_pow = pow(0.5, z->theta);
}

uint64_t kb_zipf_rank(const struct zipf *z, uint64_t *rng)
{
	double u = (double)(bu_rand64(rng) >> 11) / 9007199254740992.0;
	double uz = u * z->zetan;
	uint64_t r;
	if (uz < 1.0)
		r = 0;
	else if (uz < 1.0 + z->half_pow)
		r = 1;
	else
		r = (uint64_t)((double)z->n *
		               pow(z->eta * u - z->eta + 1.0, z->alpha));
	return r >= z->n ? z->n - 1 : r;
}

uint64_t kb_zipf_next(const struct zipf *z, uint64_t *rng)
{
	return mix64(kb_zipf_rank(z, rng) ^ 0x5bd1e995u) % z->n;
}

void kb_gen_stream(uint32_t *s, unsigned len, int wl, uint64_t nkeys,
                   double zetan, uint64_t seed, const uint32_t *own,
                   uint64_t nown)
{
	const struct wdesc *d = &g_wdesc[wl];
	/* Zeroed: set only for the skewed distributions, and the compiler
	 * cannot see that only those read it. */
	struct zipf z = {0};
	uint64_t n = d->dist == D_OWN ? nown : nkeys;
	bool own_zipf = d->dist == D_OWN && d->scan; /* YCSB E's starts */
	if (d->dist == D_ZIPF || d->dist == D_LATEST || own_zipf)
		kb_zipf_init(&z, n, zetan);
	uint64_t rng = seed;
	for (unsigned i = 0; i < len; i++) {
		uint64_t k;
		if (d->dist == D_ZIPF || own_zipf)
			k = kb_zipf_next(&z, &rng);
		else if (d->dist == D_LATEST)
			k = kb_zipf_rank(&z, &rng); /* a rank from the latest */
		else if (d->dist == D_OTHERS)
			k = other_key(&rng, nkeys, own, nown);
		else
			k = bu_rand64(&rng) % n;
		if (d->dist == D_OWN)
			k = own[k];
		unsigned p = (unsigned)(bu_rand64(&rng) % 100);
		uint32_t op = OP_READ;
		if (p < (unsigned)d->update)
			op = OP_UPDATE;
		else if ((p -= (unsigned)d->update) < (unsigned)d->insert)
			op = OP_INSERT;
		else if ((p -= (unsigned)d->insert) < (unsigned)d->scan)
			op = OP_SCAN;
		else if ((p -= (unsigned)d->scan) < (unsigned)d->rmw)
			op = OP_RMW;
		s[i] = entry(op, k);
	}
}

int kb_ins_ack(struct inserts *in, uint64_t n)
{
	if (n - atomic_load(&in->limit) >= ACK_WINDOW)
		return -EOVERFLOW;
	uint64_t b = n % ACK_WINDOW;
	atomic_fetch_or(&in->done[b / 8], (uint8_t)(1u << (b % 8)));
	/* Whoever gets the lock moves the limit over the done ones; a mark
	 * made meanwhile is taken by the next insert's pass. */
	int z = 0;
	if (!atomic_compare_exchange_strong(&in->lock, &z, 1))
		return 0;
	for (;;) {
		uint64_t l = atomic_load(&in->limit), lb = l % ACK_WINDOW;
		uint8_t bit = (uint8_t)(1u << (lb % 8));
		if (!(atomic_load(&in->done[lb / 8]) & bit))
			break;
		atomic_fetch_and(&in->done[lb / 8], (uint8_t)~bit);
		atomic_store(&in->limit, l + 1);
	}
	atomic_store(&in->lock, 0);
	return 0;
}

bool kb_runs(int w, bool peer)
{
	if (g_opt.any_mix)
		return g_opt.mix[w] && !(peer && w == W_YE);
	return peer ? w < W_LOCAL : w <= W_LOCAL;
}

uint32_t kb_key_inline(void)
{
	return g_opt.ksize <= 64 ? BU_MAX((g_opt.ksize + 7) & ~7u, 8u) : 16u;
}

uint32_t kb_val_inline(void)
{
	return g_opt.vsize <= VAL_INLINE_MAX
	               ? BU_MAX((g_opt.vsize + 7) & ~7u, 24u)
	               : 32u;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

void kb_pcts(uint64_t *v, size_t n, double *p50, double *p99)
{
	*p50 = *p99 = 0;
	if (!n)
		return;
	qsort(v, n, sizeof(*v), cmp_u64);
	*p50 = (double)v[n / 2];
	*p99 = (double)v[BU_MIN(n - 1, n * 99 / 100)];
}

int kb_ncpus_allowed(int *first)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 1;
	int k = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			first[k < MAXM ? k : MAXM - 1] = c, k++;
	return k ? k : 1;
}

void kb_nap_ms(long ms)
{
	nanosleep(&(struct timespec){.tv_sec = ms / 1000,
	                             .tv_nsec = (ms % 1000) * 1000000},
	          NULL);
}

bool kb_in_path(const char *prog)
{
	const char *path = getenv("PATH");
	if (!path)
		return false;
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *save = NULL, *d = strtok_r(buf, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		char f[4200];
		snprintf(f, sizeof(f), "%s/%s", d, prog);
		if (access(f, X_OK) == 0)
			return true;
	}
	return false;
}

uint32_t kb_buckets_for(uint64_t nkeys)
{
	double per = (double)nkeys / g_opt.machines / (4.0 * g_opt.occupancy);
	return (uint32_t)per + 64;
}

uint32_t kb_bucket_bytes(void)
{
	/* src/hashtable's layout: a 40-byte header, then H/2 (4) slots of
	 * 8 bytes and the inline key and value (each rounded up to 8), in
	 * whole lines with their versions as every object. */
	uint32_t slot = 8 + kb_key_inline() + kb_val_inline();
	return (uint32_t)farm_array_stride(40 + 4 * slot);
}

uint64_t kb_region_for(uint32_t nb, uint64_t nkeys)
{
	/* The shard array plus room for overflow blocks; no bigger: making
	 * a region (and its backups) costs time in proportion to its size,
	 * under a 1 s RPC timeout. Pairs that do not fit a slot add an
	 * object each ([klen][vlen][key][value], whole lines, a size class
	 * up to an eighth bigger). */
	uint64_t need = ((uint64_t)nb + 1) * kb_bucket_bytes() * 17 / 16;
	if (g_opt.ksize > kb_key_inline() || g_opt.vsize > kb_val_inline())
		need += nkeys / g_opt.machines *
		        farm_array_stride(8 + g_opt.ksize + g_opt.vsize) * 9 /
		        8;
	uint64_t r = 64ull << 20;
	while (r < need && r < (4ull << 30))
		r <<= 1;
	return r;
}
