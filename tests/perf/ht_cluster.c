/*
 * ht_bench's in-process machines (ht_cluster.h).
 */
#include "ht_cluster.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "ht_bench"

static int rm_cb(const char *path, const struct stat *sb, int flag,
                 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

#define CK(expr)                                                            \
	do {                                                                \
		int rc_ = (expr);                                           \
		if (rc_) {                                                  \
			fprintf(stderr, PROG ": %s:%d: %s: %s\n", __FILE__, \
			        __LINE__, #expr, farm_strerror(rc_));       \
			return rc_ < 0 ? rc_ : -EIO;                        \
		}                                                           \
	} while (0)

int cluster_open(struct cluster *c, unsigned n, uint64_t rsize,
                 const struct farm_ht_attr *ha)
{
	farm_msg_attr ma = {.max_machines = 8, .busy_poll = true};
	struct farm_as_attr aa = {.region_size = rsize};
	memset(c, 0, sizeof(*c));
	for (unsigned i = 0; i < n; i++) {
		struct mach *x = &c->m[i];
		const char *base =
		        access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(x->dir, sizeof(x->dir), "%s/farm-htbench-XXXXXX",
		         base);
		if (!mkdtemp(x->dir)) {
			fprintf(stderr, PROG ": mkdtemp %s: %s\n", x->dir,
			        strerror(errno));
			x->dir[0] = 0;
			return -errno;
		}
		c->n = i + 1;
		farm_fabric_attr fa = {.provider = "shm",
		                       .machine_id = i + 1,
		                       .data_dir = x->dir};
		CK(farm_fabric_open(&fa, &x->fab));
		CK(farm_msg_create(x->fab, &ma, &x->msg));
		aa.seed = i + 1;
		CK(farm_as_create(x->fab, x->msg, &aa, &x->as));
		CK(farm_galloc_create(x->as, x->msg, &x->ga));
		struct farm_txm_attr ta = {.log_size = 1u << 20,
		                           .arena_size = 64u << 20};
		CK(farm_txm_create(x->fab, x->msg, x->as, x->ga, &ta, &x->txm));
		CK(farm_ht_create(x->txm, x->as, x->ga, x->msg, ha, &x->ht));
	}
	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = 0; j < n; j++) {
			if (i == j)
				continue;
			char addr[256];
			if (farm_fabric_address(c->m[j].fab, addr,
			                        sizeof(addr)) <= 0)
				return -EIO;
			farm_mr_desc d = farm_msg_desc(c->m[j].msg);
			CK(farm_msg_add_peer(c->m[i].msg, j + 1, addr, &d));
		}
		CK(farm_loop_open(c->m[i].msg, 0, &c->m[i].loop));
		CK(farm_txm_attach(c->m[i].txm, c->m[i].loop));
	}
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < n; j++) {
			if (i == j)
				continue;
			farm_mr_desc d = farm_txm_log_desc(c->m[j].txm);
			CK(farm_txm_add_peer(c->m[i].txm, j + 1, 0, &d));
		}
	uint32_t ids[MAX_M];
	for (unsigned i = 0; i < n; i++)
		ids[i] = i + 1;
	for (unsigned i = 0; i < n; i++)
		CK(farm_as_set_view(c->m[i].as, 1, ids, n));
	for (unsigned i = 0; i < n; i++)
		CK(farm_ht_attach(c->m[i].ht, c->m[i].loop));
	return 0;
}

void cluster_close(struct cluster *c)
{
	for (unsigned i = 0; i < c->n; i++) {
		struct mach *x = &c->m[i];
		if (x->ht && x->loop)
			farm_ht_detach(x->ht, x->loop);
		if (x->txm && x->loop)
			farm_txm_detach(x->txm, x->loop);
		if (x->loop)
			farm_loop_close(x->loop);
		if (x->ht)
			farm_ht_destroy(x->ht);
		if (x->txm)
			farm_txm_destroy(x->txm);
		if (x->ga)
			farm_galloc_destroy(x->ga);
		if (x->as)
			farm_as_destroy(x->as);
		if (x->msg && farm_msg_destroy(x->msg))
			fprintf(stderr, PROG ": farm_msg_destroy failed\n");
		if (x->fab)
			farm_fabric_close(x->fab);
		if (x->dir[0])
			nftw(x->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	}
	c->n = 0;
}

void pump(struct cluster *c)
{
	for (unsigned i = 0; i < c->n; i++)
		(void)farm_loop_poll(c->m[i].loop);
}
