/*
 * kv_bench: keys, values, key choice (uniform, YCSB's scrambled zipfian)
 * and small helpers (kv_bench.h).
 */
#include "kv_bench.h"

const char *const wname[NW] = {"uniform C (100/0)", "uniform B (95/5)",
                               "uniform A (50/50)", "zipf C (100/0)",
                               "zipf B (95/5)",     "zipf A (50/50)",
                               "mget24 uniform",    "C own shard"};
const char *const wkey[NW] = {
        "uniform_c", "uniform_b", "uniform_a", "zipf_c",
        "zipf_b",    "zipf_a",    "mget24",    "uniform_c_own_shard"};
const int wput_pct[NW] = {0, 5, 50, 0, 5, 50, 0, 0};
const bool wzipf[NW] = {false, false, false, true, true, true, false, false};

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
	z->theta = 0.99;
	z->alpha = 1.0 / (1.0 - z->theta);
	z->zetan = zetan;
	double zeta2 = 1.0 + pow(0.5, z->theta);
	z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - z->theta)) /
	         (1.0 - zeta2 / zetan);
	z->half_pow = pow(0.5, z->theta);
}

uint64_t kb_zipf_next(const struct zipf *z, uint64_t *rng)
{
	double u = (double)(farm_rand64(rng) >> 11) / 9007199254740992.0;
	double uz = u * z->zetan;
	uint64_t r;
	if (uz < 1.0)
		r = 0;
	else if (uz < 1.0 + z->half_pow)
		r = 1;
	else
		r = (uint64_t)((double)z->n *
		               pow(z->eta * u - z->eta + 1.0, z->alpha));
	if (r >= z->n)
		r = z->n - 1;
	return mix64(r ^ 0x5bd1e995u) % z->n;
}

/* A stream of key numbers (PUT_BIT: an update) for workload @wl. */
void kb_gen_stream(uint32_t *s, unsigned len, int wl, uint64_t nkeys,
                   double zetan, uint64_t seed)
{
	struct zipf z;
	if (wzipf[wl])
		kb_zipf_init(&z, nkeys, zetan);
	uint64_t rng = seed;
	for (unsigned i = 0; i < len; i++) {
		uint64_t k = wzipf[wl] ? kb_zipf_next(&z, &rng)
		                       : farm_rand64(&rng) % nkeys;
		bool put = wput_pct[wl] &&
		           (farm_rand64(&rng) % 100) < (uint64_t)wput_pct[wl];
		s[i] = (uint32_t)k | (put ? PUT_BIT : 0);
	}
}

unsigned kb_shard_of_key(uint64_t i, unsigned n)
{
	uint8_t k[KLEN];
	make_key(i, k);
	return farm_ht_shard_index(farm_ht_hash(k, KLEN), n);
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
	*p99 = (double)v[FARM_MIN(n - 1, n * 99 / 100)];
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
	double per = (double)nkeys / O.machines / (4.0 * O.occupancy);
	return (uint32_t)per + 64;
}

uint64_t kb_region_for(uint32_t nb)
{
	/* The shard array plus room for overflow blocks; no bigger: making
	 * a region (and its backups) costs time in proportion to its size,
	 * under a 1 s RPC timeout. */
	uint64_t need = ((uint64_t)nb + 1) * 320 * 17 / 16;
	uint64_t r = 64ull << 20;
	while (r < need && r < (4ull << 30))
		r <<= 1;
	return r;
}
