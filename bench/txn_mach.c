/*
 * txn_bench: a machine process, its objects and latency samples
 * (txn_bench.h; what is measured: txn_bench.c's head).
 */
#include "txn_bench.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void samp_add(struct samples *s, uint64_t x)
{
	if (s->n < MAX_SAMPLES)
		s->v[s->n++] = x;
}

void samp_pcts(struct samples *s, double *p50, double *p99)
{
	*p50 = *p99 = 0;
	if (!s->n)
		return;
	qsort(s->v, s->n, sizeof(*s->v), bu_cmp_u64);
	*p50 = (double)s->v[s->n / 2];
	*p99 = (double)s->v[BU_MIN(s->n - 1, s->n * 99 / 100)];
}

/* The @i'th CPU this process may use, or -1. */
int nth_cpu(unsigned i, unsigned *count)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -1;
	*count = (unsigned)CPU_COUNT(&set);
	for (int c = 0, k = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && (unsigned)k++ == i)
			return c;
	return -1;
}

/* ---- a machine ----------------------------------------------------------- */

int mach_open(struct mach *m, uint32_t id, const char *base)
{
	memset(m, 0, sizeof(*m));
	m->id = id;
	snprintf(m->dir, sizeof(m->dir), "%s/m%u", base, id);
	if (mkdir(m->dir, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, PROG ": mkdir %s: %s\n", m->dir,
		        strerror(errno));
		return -errno;
	}
	farm_conf *c;
	if (bn_conf_new(PROG, &c))
		return -ENOMEM;
	char v[512];
	int rc = 0;
	snprintf(v, sizeof(v), "%u", id);
	rc |= bn_set(PROG, c, "machine_id", v);
	rc |= bn_set(PROG, c, "data_dir", m->dir);
	rc |= bn_set(PROG, c, "fabric", "shm");
	snprintf(v, sizeof(v), "%" PRIu64, g_opt.region_size);
	rc |= bn_set(PROG, c, "region_size", v);
	snprintf(v, sizeof(v), "%u", g_opt.replicas);
	rc |= bn_set(PROG, c, "replicas", v);
	snprintf(v, sizeof(v), "%" PRIu32, g_opt.log_size);
	rc |= bn_set(PROG, c, "log_size", v);
	rc |= bn_set(PROG, c, "threads", "1");
	rc |= bn_set(PROG, c, "busy_poll", "1");
	rc |= bn_peers(PROG, c, id, g_opt.machines, base);
	rc = rc ? -EINVAL : bn_open(PROG, c, id, &m->node);
	farm_conf_free(c);
	if (rc)
		return rc;
	farm_node_set_app_loops(m->node, true);
	if ((rc = farm_node_start(m->node, JOIN_MS)) ||
	    (rc = farm_node_loop_open(m->node, 0, &m->loop)) ||
	    (rc = farm_node_wait_members(m->node, g_opt.machines, JOIN_MS))) {
		fprintf(stderr, PROG ": machine %u: cannot join: %s\n", id,
		        farm_strerror(rc));
		return rc;
	}
	m->txm = farm_node_txm(m->node);
	return 0;
}

void mach_close(struct mach *m)
{
	if (m->loop)
		farm_node_loop_close(m->node, m->loop);
	/* Before the node, whose fabric they are registered with. */
	for (unsigned i = 0; i < m->nraw; i++)
		farm_region_destroy(m->raw[i]);
	m->nraw = 0;
	if (m->node)
		farm_node_close(m->node);
	m->loop = NULL;
	m->node = NULL;
}

/* Poll until every machine's state is at least @st (or one failed). */
int wait_state(struct mach *m, int st)
{
	uint64_t t0 = bu_now_ns();
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < g_opt.machines; i++) {
			int s = atomic_load(&g_sh->m[i].state);
			if (s == ST_FAILED)
				return g_sh->m[i].err ? g_sh->m[i].err : -EIO;
			all &= s >= st;
		}
		if (all)
			return 0;
		if (interrupted)
			return -EINTR;
		if (bu_now_ns() - t0 > 120 * NS_PER_S)
			return -ETIMEDOUT;
		(void)farm_loop_poll(m->loop);
	}
}

/* @n new committed objects of OBJ_SIZE bytes (zeroed) on this machine.
 * A batch whose commit aborts with a retryable outcome (-ENOSPC: the log
 * had no room yet) is allocated again. */
static int alloc_objs(struct mach *m, farm_gaddr *out, uint32_t n)
{
	unsigned tries = 0;
	for (uint32_t done = 0; done < n;) {
		farm_tx *tx;
		int rc = farm_tx_begin(m->txm, m->loop, &tx);
		if (rc)
			return rc;
		uint32_t b = BU_MIN(ALLOC_BATCH, n - done);
		for (uint32_t i = 0; i < b && !rc; i++) {
			farm_fatptr fp;
			void *d;
			rc = farm_tx_alloc_sync(tx, OBJ_SIZE, FARM_GADDR_NULL,
			                        &fp, &d);
			if (!rc)
				out[done + i] = fp.addr;
		}
		const char *what = "farm_tx_alloc";
		if (!rc) {
			what = "farm_tx_commit";
			rc = farm_tx_commit_sync(tx);
		}
		farm_tx_free(tx);
		if (rc && farm_tx_retryable(rc) && ++tries < 1000) {
			uint64_t t = bu_now_ns() + 100000;
			while (bu_now_ns() < t)
				(void)farm_loop_poll(m->loop);
			continue;
		}
		if (rc) {
			fprintf(stderr,
			        PROG ": machine %u: allocating objects "
			             "(%u of %u done): %s: %s\n",
			        m->id, done, n, what, farm_strerror(rc));
			return rc;
		}
		done += b;
	}
	if (tries && getenv("TXN_BENCH_DEBUG"))
		fprintf(stderr,
		        "debug machine %u: %u allocation commits retried\n",
		        m->id, tries);
	return 0;
}

/* Machine @id's part of the setup: its transaction objects, and on
 * machine 1 the lock-free-read objects and their regions' descriptors. */
int mach_alloc(struct mach *m)
{
	int rc = alloc_objs(m, g_sh->tx[m->id], g_opt.tx_objects);
	if (rc)
		return rc;
	g_sh->m[m->id].ntx = g_opt.tx_objects;
	if (m->id != 1)
		return 0;
	if ((rc = alloc_objs(m, g_sh->lf, g_opt.lf_objects)))
		return rc;
	g_sh->m[1].nlf = g_opt.lf_objects;
	uint32_t nreg = 0;
	for (uint32_t i = 0; i < g_opt.lf_objects; i++) {
		uint32_t r = farm_gaddr_region(g_sh->lf[i]);
		bool seen = false;
		for (uint32_t j = 0; j < nreg && !seen; j++)
			seen = g_sh->m[1].reg_id[j] == r;
		if (seen)
			continue;
		if (nreg == MAX_LFREG)
			return -E2BIG;
		/* The lock-free reads go to the primary, machine 1; the raw
		 * READs to a region machine 1 registers as it registers its
		 * own (farm_region_create, the region size), at the same
		 * offsets, its pages touched as the objects' are. */
		uint32_t rep[FARM_REPLICAS_MAX];
		if (region_replicas(m->node, r, rep) == 0 || rep[0] != 1)
			return -ENOENT;
		farm_region *reg = NULL;
		int rc2 = farm_region_create(farm_node_fabric(m->node),
		                             g_opt.region_size, &reg);
		if (rc2)
			return rc2;
		memset(farm_region_base(reg), 0, farm_region_size(reg));
		m->raw[m->nraw++] = reg;
		g_sh->m[1].reg_id[nreg] = r;
		g_sh->m[1].reg_desc[nreg] = farm_region_desc(reg);
		g_sh->m[1].reg_desc[nreg].machine = 1;
		nreg++;
	}
	g_sh->m[1].nreg = nreg;
	return 0;
}

/* A forked machine: join, allocate, serve until told to exit. */
int child_main(uint32_t id, const char *base, int cpu)
{
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() == 1)
		return 1;
	bu_pin_to(cpu, PROG);
	struct mach m;
	int rc = mach_open(&m, id, base);
	if (!rc) {
		atomic_store(&g_sh->m[id].state, ST_JOINED);
		while (atomic_load(&g_sh->go) < GO_ALLOC && !interrupted)
			(void)farm_loop_poll(m.loop);
		rc = interrupted ? -EINTR : mach_alloc(&m);
	}
	if (rc) {
		g_sh->m[id].err = rc;
		atomic_store(&g_sh->m[id].state, ST_FAILED);
	} else {
		atomic_store(&g_sh->m[id].state, ST_ALLOCATED);
		while (atomic_load(&g_sh->go) < GO_EXIT && !interrupted)
			(void)farm_loop_poll(m.loop);
	}
	mach_close(&m);
	bu_rm_tree(AT_FDCWD, m.dir, 1);
	return rc ? 1 : 0;
}
