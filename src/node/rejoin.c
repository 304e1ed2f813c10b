/*
 * Same-id rejoin (rejoin.h; src/recovery/README.md, "Same-id restart",
 * step 1). A machine killed and started again on its intact directory
 * while the others lived is not a restart: the cluster removed it (its id
 * is `gone`) and recovered its transactions without it. With
 * `reuse_copies` it rejoins as a fresh machine, a new incarnation of its
 * id (reuse_ids: every fence that keeps an old holder out applies to the
 * dead one), and its old region files are kept, read-only, as stale
 * sources data recovery takes unchanged chunks from (src/txn/copy.c).
 *
 * The move, so that a kill at any point leaves either the intact
 * directory (restarted or rejoined again at the next open) or a fresh one
 * with sources, never a manifest without its files:
 *   1. stale/farm.manifest: the old manifest, written (fsync'ed, renamed)
 *      before anything moves; it lists the sources;
 *   2. each region file (or its `.old`, set aside by a clean shutdown or
 *      an earlier open) renamed into stale/;
 *   3. the old log removed: its transactions were recovered by the
 *      survivors when the id was removed, and its log at the others opens
 *      to the new holder only once they are decided (src/txn/README.md),
 *      and every other memory file of the old incarnation with it;
 *   4. the top manifest removed (the directory fsync'ed): fresh.
 * An open that finds stale/farm.manifest equal to the top manifest
 * finishes 2-4; one that finds a different top manifest (the rejoined
 * incarnation's own, killed in turn) removes stale/ and judges afresh.
 *
 * A source is never a replica: never counted, promoted or served; data
 * recovery hands it back (source_release: unmapped, its file removed)
 * once its region's copy is past its first pass, or when growth is over
 * for regions this machine did not get back (farm_rejoin_grown); the last
 * one takes stale/ with it.
 */
#include "node/rejoin.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coord/membership.h"
#include "node/restart_int.h"
#include "util/log.h"
#include "util/wire.h"

#define RJ_PATH (FARM_CONFIG_STR + 96)

struct farm_rejoin {
	char top[RJ_PATH];   /* the data directory */
	char stale[RJ_PATH]; /* its stale/ */
	uint8_t *man;        /* stale/farm.manifest, checked */
	size_t man_len;
	pthread_mutex_t lock;
	unsigned held; /* sources data recovery holds (under lock) */
	bool attached;
};

struct rj_src {
	struct farm_rejoin *rj;
	size_t size;
	char path[RJ_PATH * 2];
};

/* The whole file at @path into *@buf (malloc'ed); -errno. */
static int read_all(const char *path, uint8_t **buf, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) ? -errno : 0;
	uint8_t *b = rc ? NULL : malloc((size_t)st.st_size + 1);
	if (!rc && !b)
		rc = -ENOMEM;
	if (!rc && pread(fd, b, (size_t)st.st_size, 0) != st.st_size)
		rc = -EIO;
	close(fd);
	if (rc) {
		free(b);
		return rc;
	}
	*buf = b;
	*len = (size_t)st.st_size;
	return 0;
}

static const struct man_hdr *man_hdr(const uint8_t *b)
{
	return (const struct man_hdr *)(const void *)b;
}

/* A whole manifest of machine @cfg's, of its cluster and region size? */
static bool man_ok(const struct farm_config *cfg, const uint8_t *b, size_t n)
{
	if (n < sizeof(struct man_hdr) + sizeof(struct man_tail))
		return false;
	struct man_tail t;
	memcpy(&t, b + n - sizeof(t), sizeof(t));
	const struct man_hdr *h = man_hdr(b);
	char cluster[sizeof(h->cluster)];
	farm_rst_cluster_name(cfg, cluster, sizeof(cluster));
	uint64_t rsize =
	        cfg->region_size ? cfg->region_size : FARM_REGION_DEFAULT_SIZE;
	return t.magic == MAN_END && t.len == n &&
	       t.sum == farm_rst_fnv1a(b, n - sizeof(t)) &&
	       h->magic == MAN_MAGIC && h->layout == MAN_LAYOUT &&
	       h->wire == FARM_WIRE_VERSION && h->machine == cfg->machine_id &&
	       h->region_size == rsize &&
	       !strncmp(h->cluster, cluster, sizeof(h->cluster)) &&
	       h->nregions <=
	               (n - sizeof(*h) - sizeof(t)) / sizeof(struct man_region);
}

static struct man_region man_region(const uint8_t *b, uint32_t i)
{
	struct man_region e;
	memcpy(&e, b + sizeof(struct man_hdr) + (size_t)i * sizeof(e),
	       sizeof(e));
	e.file[sizeof(e.file) - 1] = '\0';
	return e;
}

/* A name a manifest may give: no directory in it. */
static bool name_ok(const char *n)
{
	return n[0] && n[0] != '.' && !strchr(n, '/');
}

static void dir_sync(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		if (fsync(fd))
			farm_dbg("rejoin: fsync of %s: %s", dir,
			         farm_strerror(-errno));
		close(fd);
	}
}

/* @b written to @path durably (a temporary file, fsync, rename). */
static int write_all(const char *dir, const char *path, const uint8_t *b,
                     size_t n)
{
	char tmp[RJ_PATH * 2 + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int rc = fd < 0 ? -errno : 0;
	if (!rc && (write(fd, b, n) != (ssize_t)n || fsync(fd)))
		rc = errno ? -errno : -EIO;
	if (fd >= 0 && close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (!rc)
		dir_sync(dir);
	return rc;
}

/* The previous incarnation's other memory files (mem-*.region, set aside
 * or not: its message rings, whatever the manifest does not list), which
 * the fabric removes at open anyway; left, they would make the fresh
 * directory read as a damaged one (restart_man.c). */
static int drop_mem_files(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	char p[RJ_PATH * 2];
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		bool mem = !strncmp(e->d_name, "mem-", 4) &&
		           ((l > 7 && !strcmp(e->d_name + l - 7, ".region")) ||
		            (l > 11 &&
		             !strcmp(e->d_name + l - 11, ".region.old")));
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (mem && unlink(p) && errno != ENOENT && !rc)
			rc = -errno;
	}
	closedir(d);
	return rc;
}

/* Steps 2-4 of the move, each one done again harmlessly. */
static int finish_move(struct farm_rejoin *rj)
{
	const struct man_hdr *h = man_hdr(rj->man);
	char a[RJ_PATH * 2], b[RJ_PATH * 2];
	for (uint32_t i = 0; i < h->nregions; i++) {
		struct man_region e = man_region(rj->man, i);
		if (!name_ok(e.file))
			continue;
		snprintf(b, sizeof(b), "%s/%s", rj->stale, e.file);
		for (unsigned old = 0; old < 2; old++) {
			snprintf(a, sizeof(a), "%s/%s%s", rj->top, e.file,
			         old ? ".old" : "");
			if (rename(a, b) == 0 || errno == ENOENT)
				continue;
			farm_err("rejoin: cannot keep %s as %s: %s", a, b,
			         farm_strerror(-errno));
			return -errno;
		}
	}
	char lf[sizeof(h->log_file)];
	memcpy(lf, h->log_file, sizeof(lf));
	lf[sizeof(lf) - 1] = '\0';
	for (unsigned old = 0; name_ok(lf) && old < 2; old++) {
		snprintf(a, sizeof(a), "%s/%s%s", rj->top, lf,
		         old ? ".old" : "");
		if (unlink(a) && errno != ENOENT)
			return -errno;
	}
	int rc = drop_mem_files(rj->top);
	if (rc)
		return rc;
	dir_sync(rj->stale);
	snprintf(a, sizeof(a), "%s/" FARM_MANIFEST_FILE, rj->top);
	if (unlink(a) && errno != ENOENT)
		return -errno;
	dir_sync(rj->top);
	return 0;
}

/* stale/ and what it holds, gone (a later incarnation outdates it, or
 * its last source was handed back). */
static void remove_stale(const char *stale, const uint8_t *man, size_t n)
{
	char p[RJ_PATH * 2];
	for (uint32_t i = 0; man && n && i < man_hdr(man)->nregions; i++) {
		struct man_region e = man_region(man, i);
		snprintf(p, sizeof(p), "%s/%s", stale, e.file);
		if (name_ok(e.file))
			(void)unlink(p);
	}
	snprintf(p, sizeof(p), "%s/" FARM_MANIFEST_FILE, stale);
	(void)unlink(p);
	if (rmdir(stale) && errno != ENOENT)
		farm_warn("rejoin: %s not removed: %s", stale,
		          farm_strerror(-errno));
}

/* Does the configuration in force list this machine's id gone, outside a
 * whole-cluster restart? (Then an intact directory is not a restart's:
 * the manager would leave it out, src/recovery/README.md.) */
static bool id_gone(const struct farm_config *cfg)
{
	struct farm_zk_peek *pk = calloc(1, sizeof(*pk));
	if (!pk)
		return false;
	int rc = farm_zk_peek(cfg->zk, cfg->zk_root[0] ? cfg->zk_root : NULL,
	                      cfg->zk_connect_timeout_ms, pk);
	bool gone = !rc && !pk->config.restart &&
	            farm_ids_have(pk->config.gone, pk->config.ngone,
	                          cfg->machine_id);
	if (rc)
		farm_warn("rejoin: cannot read the cluster's configuration "
		          "(%s): the directory is restarted from as before",
		          farm_strerror(rc));
	free(pk);
	return gone;
}

static struct farm_rejoin *rj_new(const struct farm_config *cfg)
{
	struct farm_rejoin *rj = calloc(1, sizeof(*rj));
	if (!rj)
		return NULL;
	snprintf(rj->top, sizeof(rj->top), "%s", cfg->data_dir);
	snprintf(rj->stale, sizeof(rj->stale), "%s/" FARM_STALE_DIR,
	         cfg->data_dir);
	pthread_mutex_init(&rj->lock, NULL);
	return rj;
}

/* An intact directory of a gone id: steps 1-4. */
static int rejoin_new(struct farm_rejoin *rj, uint8_t *top, size_t n)
{
	char p[RJ_PATH * 2];
	if (mkdir(rj->stale, 0700) && errno != EEXIST)
		return -errno;
	snprintf(p, sizeof(p), "%s/" FARM_MANIFEST_FILE, rj->stale);
	int rc = write_all(rj->stale, p, top, n);
	if (rc)
		return rc;
	rj->man = top;
	rj->man_len = n;
	farm_info("rejoin: machine %" PRIu32 " is gone from the cluster; "
	          "rejoins fresh under its id, its %" PRIu32 " region "
	          "copies kept in %s as stale sources",
	          man_hdr(top)->machine, man_hdr(top)->nregions, rj->stale);
	return finish_move(rj);
}

int farm_rejoin_prepare(const struct farm_config *cfg, struct farm_rejoin **out)
{
	*out = NULL;
	if (!cfg->reuse_copies)
		return 0;
	if (!cfg->reuse_ids || !cfg->zk[0]) {
		farm_warn("rejoin: reuse_copies needs reuse_ids and zk: off");
		return 0;
	}
	struct farm_rejoin *rj = rj_new(cfg);
	if (!rj)
		return -ENOMEM;
	char p[RJ_PATH * 2];
	uint8_t *top = NULL, *sm = NULL;
	size_t nt = 0, ns = 0;
	snprintf(p, sizeof(p), "%s/" FARM_MANIFEST_FILE, rj->top);
	bool have_top = !read_all(p, &top, &nt);
	snprintf(p, sizeof(p), "%s/" FARM_MANIFEST_FILE, rj->stale);
	bool have_sm = !read_all(p, &sm, &ns) && man_ok(cfg, sm, ns);
	int rc = 0;
	if (have_sm && (!have_top || (nt == ns && !memcmp(top, sm, ns)))) {
		/* A rejoin's move, whole or cut short: finish it. */
		rj->man = sm;
		rj->man_len = ns;
		sm = NULL;
		rc = finish_move(rj);
	} else {
		if (have_sm || !access(rj->stale, F_OK))
			remove_stale(rj->stale, have_sm ? sm : NULL, ns);
		if (have_top && man_ok(cfg, top, nt) && id_gone(cfg)) {
			rc = rejoin_new(rj, top, nt);
			top = NULL;
		}
	}
	free(top);
	free(sm);
	if (!rj->man || rc) {
		farm_rejoin_close(rj);
		return rc;
	}
	*out = rj;
	return 0;
}

/* Data recovery hands a source back: unmapped, its file removed; the last
 * one takes stale/ with it. */
static void source_release(void *ctx, uint32_t region, const void *base)
{
	struct rj_src *s = ctx;
	struct farm_rejoin *rj = s->rj;
	munmap((void *)(uintptr_t)base, s->size);
	if (unlink(s->path) && errno != ENOENT)
		farm_warn("rejoin: %s not removed: %s", s->path,
		          farm_strerror(-errno));
	farm_dbg("rejoin: stale copy of region %#" PRIx32 " let go", region);
	pthread_mutex_lock(&rj->lock);
	bool last = --rj->held == 0;
	pthread_mutex_unlock(&rj->lock);
	if (last)
		remove_stale(rj->stale, rj->man, rj->man_len);
	free(s);
}

/* Map source @e (read-only; only a file of the region's whole size, so a
 * read never passes its end) and hand it to data recovery. */
static bool source_add(struct farm_rejoin *rj, farm_txm *txm,
                       const struct man_region *e)
{
	struct rj_src *s = calloc(1, sizeof(*s));
	if (!s)
		return false;
	s->rj = rj;
	s->size = (size_t)e->size;
	snprintf(s->path, sizeof(s->path), "%s/%s", rj->stale, e->file);
	int fd = open(s->path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	void *p = MAP_FAILED;
	if (fd >= 0 && !fstat(fd, &st) && (uint64_t)st.st_size == e->size &&
	    e->size == man_hdr(rj->man)->region_size)
		p = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p != MAP_FAILED) {
		pthread_mutex_lock(&rj->lock);
		rj->held++; /* before data recovery can hand it back */
		pthread_mutex_unlock(&rj->lock);
		if (!farm_txm_datarec_stale_add(txm, e->id, p, source_release,
		                                s))
			return true;
		munmap(p, s->size);
		pthread_mutex_lock(&rj->lock);
		rj->held--;
		pthread_mutex_unlock(&rj->lock);
	}
	(void)unlink(s->path);
	free(s);
	return false;
}

void farm_rejoin_attach(struct farm_rejoin *rj, farm_txm *txm)
{
	if (!rj || rj->attached)
		return;
	rj->attached = true;
	unsigned n = 0, kept = 0;
	for (uint32_t i = 0; i < man_hdr(rj->man)->nregions; i++) {
		struct man_region e = man_region(rj->man, i);
		if (!name_ok(e.file))
			continue;
		n++;
		kept += source_add(rj, txm, &e);
	}
	farm_info("rejoin: %u of %u stale copies given to data recovery", kept,
	          n);
	pthread_mutex_lock(&rj->lock);
	bool none = rj->held == 0;
	pthread_mutex_unlock(&rj->lock);
	if (none)
		remove_stale(rj->stale, rj->man, rj->man_len);
}

void farm_rejoin_grown(struct farm_rejoin *rj, farm_txm *txm)
{
	if (!rj || !rj->attached)
		return;
	for (uint32_t i = 0; i < man_hdr(rj->man)->nregions; i++)
		farm_txm_datarec_stale_drop(txm, man_region(rj->man, i).id);
}

void farm_rejoin_close(struct farm_rejoin *rj)
{
	if (!rj)
		return;
	pthread_mutex_destroy(&rj->lock);
	free(rj->man);
	free(rj);
}
