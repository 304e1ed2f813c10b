/*
 * The restart's manifest (restart.c's opening comment): writing it, reading
 * and checking a data directory against it, and opening a machine's
 * directory (farm_restart_open).
 */
#include "node/restart_int.h"

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/wire.h"

uint64_t farm_rst_fnv1a(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

void farm_rst_path(const struct farm_restart *rs, const char *name,
                   const char *suffix, char *out, size_t len)
{
	snprintf(out, len, "%s/%s%s", rs->dir, name, suffix);
}

/* The file @name as the previous incarnation left it: <name> or, once set
 * aside, <name>.old. 0 with its size; -ENOENT. */
static int find_old(const struct farm_restart *rs, const char *name, char *path,
                    size_t len, uint64_t *size)
{
	struct stat st;
	farm_rst_path(rs, name, ".old", path, len);
	if (stat(path, &st) == 0) {
		*size = (uint64_t)st.st_size;
		return 0;
	}
	farm_rst_path(rs, name, "", path, len);
	if (stat(path, &st) == 0) {
		*size = (uint64_t)st.st_size;
		return 0;
	}
	return -ENOENT;
}

static bool name_ok(const char *n)
{
	size_t l = strnlen(n, MAN_NAME);
	return l > 0 && l < MAN_NAME && !strchr(n, '/') && n[0] != '.';
}

/* ---- writing the manifest ------------------------------------------ */

/* Under rs->lock. */
int farm_rst_man_write(struct farm_restart *rs, bool clean)
{
	size_t len = sizeof(struct man_hdr) +
	             (size_t)rs->nregs * sizeof(struct man_region) +
	             (size_t)rs->nkept * sizeof(struct man_kept) +
	             sizeof(struct man_tail);
	uint8_t *buf = calloc(1, len);
	if (!buf)
		return -ENOMEM;
	struct man_hdr *h = (struct man_hdr *)(void *)buf;
	h->magic = MAN_MAGIC;
	h->layout = MAN_LAYOUT;
	h->wire = FARM_WIRE_VERSION;
	h->machine = rs->me;
	h->region_size = rs->region_size;
	snprintf(h->log_file, sizeof(h->log_file), "%s",
	         farm_txm_log_file(rs->txm));
	char lp[FARM_CONFIG_STR + 80];
	struct stat st;
	farm_rst_path(rs, h->log_file, "", lp, sizeof(lp));
	h->log_bytes = stat(lp, &st) == 0 ? (uint64_t)st.st_size : 0;
	h->config_id = rs->config_id;
	h->nregions = rs->nregs;
	h->nmembers = rs->nmembers;
	h->clean = clean;
	memcpy(h->members, rs->members, sizeof(h->members));
	snprintf(h->cluster, sizeof(h->cluster), "%s", rs->cluster);
	if (rs->nregs) /* regs may be NULL with none */
		memcpy(buf + sizeof(*h), rs->regs,
		       (size_t)rs->nregs * sizeof(struct man_region));
	h->nkept = rs->nkept;
	memcpy(buf + sizeof(*h) + (size_t)rs->nregs * sizeof(struct man_region),
	       rs->kept, (size_t)rs->nkept * sizeof(struct man_kept));
	struct man_tail t = {.magic = MAN_END,
	                     .len = len,
	                     .sum = farm_rst_fnv1a(buf, len - sizeof(t))};
	memcpy(buf + len - sizeof(t), &t, sizeof(t));
	char path[FARM_CONFIG_STR + 32], tmp[FARM_CONFIG_STR + 40];
	farm_rst_path(rs, FARM_MANIFEST_FILE, "", path, sizeof(path));
	farm_rst_path(rs, FARM_MANIFEST_FILE, ".tmp", tmp, sizeof(tmp));
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len || fsync(fd) != 0)
		rc = errno ? -errno : -EIO;
	if (fd >= 0 && close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (!rc) { /* the rename itself durable */
		int dfd = open(rs->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			if (fsync(dfd) != 0)
				farm_dbg("restart: fsync of %s: %s", rs->dir,
				         farm_strerror(-errno));
			close(dfd);
		}
	}
	free(buf);
	if (rc)
		farm_err("restart: cannot write %s: %s", path,
		         farm_strerror(rc));
	return rc;
}

void farm_rst_on_local(void *ctx, uint32_t region, farm_region *r, bool added)
{
	struct farm_restart *rs = ctx;
	pthread_mutex_lock(&rs->lock);
	unsigned i = 0;
	while (i < rs->nregs && rs->regs[i].id != region)
		i++;
	if (added && i == rs->nregs) {
		if (rs->nregs == rs->cap) {
			unsigned nc = rs->cap ? rs->cap * 2 : 16;
			struct man_region *nv =
			        realloc(rs->regs, nc * sizeof(*nv));
			if (!nv) {
				pthread_mutex_unlock(&rs->lock);
				farm_err("restart: region %" PRIu32
				         " not recorded: out of memory",
				         region);
				return;
			}
			rs->regs = nv;
			rs->cap = nc;
		}
		struct man_region *e = &rs->regs[rs->nregs++];
		memset(e, 0, sizeof(*e));
		e->id = region;
		e->size = farm_region_size(r);
		snprintf(e->file, sizeof(e->file), "%s",
		         farm_mem_file(farm_region_mem(r)));
	} else if (!added && i < rs->nregs) {
		rs->regs[i] = rs->regs[--rs->nregs];
	}
	if (rs->writable && farm_mem_file(farm_region_mem(r))[0])
		farm_rst_man_write(rs, false);
	pthread_mutex_unlock(&rs->lock);
}

/* ---- checking a directory ------------------------------------------ */

static int refuse(char *err, size_t len, int rc, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int refuse(char *err, size_t len, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (err && len)
		vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return rc;
}

/* Does @dir hold region files (a previous incarnation's or set aside)? */
static bool has_region_files(const char *dir, char *first, size_t len)
{
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		found = strncmp(e->d_name, "mem-", 4) == 0 &&
		        ((l > 7 && !strcmp(e->d_name + l - 7, ".region")) ||
		         (l > 11 &&
		          !strcmp(e->d_name + l - 11, ".region.old")));
		if (found)
			snprintf(first, len, "%s", e->d_name);
	}
	closedir(d);
	return found;
}

/* Check a region file: its size, and the allocator header where a
 * primary has one (a backup copy's first block is never written). */
static int check_region(const struct farm_restart *rs,
                        const struct man_region *r, char *err, size_t len)
{
	char path[FARM_CONFIG_STR + 80];
	uint64_t size;
	if (find_old(rs, r->file, path, sizeof(path), &size))
		return refuse(err, len, FARM_ECORRUPT,
		              "%s/%s: region %" PRIu32
		              " file missing (named by the manifest)",
		              rs->dir, r->file, r->id);
	if (size != r->size || size != rs->region_size)
		return refuse(err, len, FARM_ECORRUPT,
		              "%s: size mismatch at offset %" PRIu64
		              ": %" PRIu64 " bytes, region %" PRIu32
		              " needs %" PRIu64,
		              path, size, size, r->id, rs->region_size);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint64_t w[2] = {0, 0};
	ssize_t got = fd >= 0 ? pread(fd, w, sizeof(w), 0) : -1;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (got < 0) /* an I/O error, not damage: no refusal notice */
		return refuse(err, len, e ? -e : -EIO,
		              "%s: cannot read offset 0: %s", path,
		              farm_strerror(e ? -e : -EIO));
	if (got != (ssize_t)sizeof(w))
		return refuse(err, len, FARM_ECORRUPT,
		              "%s: unreadable at offset 0", path);
	int bad = farm_alloc_region_check(w[0], (uint32_t)w[1], r->id);
	if (bad)
		return refuse(err, len, FARM_ECORRUPT,
		              "%s: bad magic at offset %d (region %" PRIu32
		              ": not its allocator header)",
		              path, bad == 1 ? 0 : 8, r->id);
	return 0;
}

static int check_log(const struct farm_restart *rs, char *err, size_t len)
{
	char path[FARM_CONFIG_STR + 80];
	uint64_t size;
	if (find_old(rs, rs->old.log_file, path, sizeof(path), &size))
		return refuse(err, len, FARM_ECORRUPT,
		              "%s/%s: log file missing (named by the manifest)",
		              rs->dir, rs->old.log_file);
	if (size != rs->old.log_bytes)
		return refuse(err, len, FARM_ECORRUPT,
		              "%s: size mismatch at offset %" PRIu64
		              ": the manifest says %" PRIu64 " bytes",
		              path, size, rs->old.log_bytes);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return refuse(err, len, -errno, "%s: %s", path,
		              farm_strerror(-errno));
	/* By its descriptor, not a mapping: read through, the rings of the
	 * ids that never coordinated (holes) were filled with zero pages. */
	int rc = farm_txlog_check_fd(fd, size, path, err, len);
	close(fd);
	if (rc && rc != FARM_ECORRUPT) /* not damage: no refusal notice */
		return refuse(err, len, rc, "%s: cannot read: %s", path,
		              farm_strerror(rc));
	return rc;
}

/* The manifest header's magic, layout and the wire version that wrote
 * it: 0, or the refusal (named in @err). */
static int man_check_hdr(const struct man_hdr *h, const char *path, char *err,
                         size_t len)
{
	if (h->magic != MAN_MAGIC)
		return refuse(err, len, FARM_ECORRUPT,
		              "%s: bad magic at offset 0", path);
	if (h->layout < MAN_LAYOUT)
		return refuse(err, len, -EPROTO,
		              "%s: written by an older build (manifest layout "
		              "%" PRIu32 ", this build's is %u): restart it "
		              "with the build that wrote it",
		              path, h->layout, MAN_LAYOUT);
	if (h->layout != MAN_LAYOUT)
		return refuse(err, len, -EPROTO,
		              "%s: unknown layout %" PRIu32 " at offset 8 (a "
		              "newer build's, or damaged)",
		              path, h->layout);
	if (h->wire != FARM_WIRE_VERSION)
		return refuse(err, len, -EPROTO,
		              "%s: written by a build of wire version %" PRIu32
		              ", this build's is %u: its data's layouts "
		              "differ; restart it with a build of version "
		              "%" PRIu32,
		              path, h->wire, FARM_WIRE_VERSION, h->wire);
	return 0;
}

static int man_read(struct farm_restart *rs, const struct farm_config *cfg,
                    char *err, size_t len)
{
	char path[FARM_CONFIG_STR + 32];
	farm_rst_path(rs, FARM_MANIFEST_FILE, "", path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	uint8_t *buf = NULL;
	int rc = 0;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto out;
	}
	size_t n = (size_t)st.st_size;
	if (n < sizeof(struct man_hdr) + sizeof(struct man_tail)) {
		rc = refuse(err, len, FARM_ECORRUPT,
		            "%s: torn at offset %zu (shorter than a header "
		            "and trailer)",
		            path, n);
		goto out;
	}
	buf = malloc(n);
	if (!buf || pread(fd, buf, n, 0) != (ssize_t)n) {
		rc = buf ? -EIO : -ENOMEM;
		goto out;
	}
	struct man_hdr h;
	memcpy(&h, buf, sizeof(h));
	struct man_tail t;
	memcpy(&t, buf + n - sizeof(t), sizeof(t));
	rc = man_check_hdr(&h, path, err, len);
	if (rc)
		goto out;
	if (t.magic != MAN_END) {
		rc = refuse(err, len, FARM_ECORRUPT,
		            "%s: torn trailer at offset %zu", path,
		            n - sizeof(t));
		goto out;
	}
	if (t.len != n || h.nkept > FARM_RESTART_KEPT_N ||
	    n != sizeof(h) + (size_t)h.nregions * sizeof(struct man_region) +
	                    (size_t)h.nkept * sizeof(struct man_kept) +
	                    sizeof(t)) {
		rc = refuse(err, len, FARM_ECORRUPT,
		            "%s: size mismatch at offset %zu: %zu bytes, the "
		            "trailer says %" PRIu64 " for %" PRIu32
		            " regions and %" PRIu32 " kept blobs",
		            path, n - sizeof(t) + 8, n, t.len, h.nregions,
		            h.nkept);
		goto out;
	}
	if (t.sum != farm_rst_fnv1a(buf, n - sizeof(t))) {
		rc = refuse(err, len, FARM_ECORRUPT,
		            "%s: checksum mismatch at offset %zu", path,
		            n - sizeof(t) + 16);
		goto out;
	}
	h.cluster[sizeof(h.cluster) - 1] = 0;
	h.log_file[sizeof(h.log_file) - 1] = 0;
	if (h.machine != cfg->machine_id) {
		rc = refuse(err, len, -EXDEV,
		            "%s: belongs to machine %" PRIu32
		            " (offset 12), not %" PRIu32,
		            path, h.machine, cfg->machine_id);
		goto out;
	}
	if (strcmp(h.cluster, rs->cluster) != 0) {
		rc = refuse(err, len, -EXDEV,
		            "%s: belongs to cluster \"%s\" (offset %zu), not "
		            "\"%s\"",
		            path, h.cluster, offsetof(struct man_hdr, cluster),
		            rs->cluster);
		goto out;
	}
	if (h.region_size != rs->region_size || h.nmembers > FARM_VIEW_MAX ||
	    !name_ok(h.log_file)) {
		rc = refuse(err, len, FARM_ECORRUPT,
		            "%s: region size %" PRIu64 " (offset 16), %" PRIu32
		            " members or log file name do not fit this "
		            "configuration",
		            path, h.region_size, h.nmembers);
		goto out;
	}
	rs->old = h;
	rs->old_regs = calloc(h.nregions + 1, sizeof(struct man_region));
	if (!rs->old_regs) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(rs->old_regs, buf + sizeof(h),
	       (size_t)h.nregions * sizeof(struct man_region));
	memcpy(rs->kept,
	       buf + sizeof(h) + (size_t)h.nregions * sizeof(struct man_region),
	       (size_t)h.nkept * sizeof(struct man_kept));
	rs->nkept = h.nkept;
	for (unsigned i = 0; i < rs->nkept; i++) {
		rs->kept[i].name[FARM_RESTART_KEPT_NAME - 1] = 0;
		if (rs->kept[i].len > FARM_RESTART_KEPT_MAX) {
			rc = refuse(err, len, FARM_ECORRUPT,
			            "%s: kept blob \"%s\" of %" PRIu32
			            " bytes at offset %zu",
			            path, rs->kept[i].name, rs->kept[i].len,
			            sizeof(h) +
			                    (size_t)h.nregions *
			                            sizeof(struct man_region) +
			                    i * sizeof(struct man_kept));
			goto out;
		}
	}
	for (uint32_t i = 0; i < h.nregions; i++) {
		struct man_region *r = &rs->old_regs[i];
		r->file[MAN_NAME - 1] = 0;
		if (!name_ok(r->file) || !r->id) {
			rc = refuse(err, len, FARM_ECORRUPT,
			            "%s: bad region entry at offset %zu", path,
			            sizeof(h) + i * sizeof(*r));
			goto out;
		}
	}
out:
	free(buf);
	close(fd);
	return rc;
}

void farm_rst_cluster_name(const struct farm_config *cfg, char *out, size_t len)
{
	/* The cluster is its ZooKeeper root (where its configuration znode
	 * lives); static clusters have no name to check. */
	snprintf(out, len, "%s",
	         cfg->zk[0] ? (cfg->zk_root[0] ? cfg->zk_root : "/farm")
	                    : "static");
}

int farm_restart_open(const struct farm_config *cfg, struct farm_restart **out,
                      char *err, size_t errlen)
{
	if (!cfg || !out || !cfg->data_dir[0])
		return -EINVAL;
	struct farm_restart *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	pthread_mutex_init(&rs->lock, NULL);
	rs->t_open_ns = farm_now_ns();
	snprintf(rs->dir, sizeof(rs->dir), "%s", cfg->data_dir);
	rs->me = cfg->machine_id;
	rs->ring = (struct farm_ring_attr){.replicas = cfg->replicas,
	                                   .rings = cfg->rings,
	                                   .points = cfg->ring_points};
	rs->region_size =
	        cfg->region_size ? cfg->region_size : FARM_REGION_DEFAULT_SIZE;
	farm_rst_cluster_name(cfg, rs->cluster, sizeof(rs->cluster));
	int rc = man_read(rs, cfg, err, errlen);
	if (rc == -ENOENT) {
		char first[256];
		rc = 0;
		if (has_region_files(rs->dir, first, sizeof(first)) &&
		    !FARM_FAULT_SWITCH(FARM_FP_RESTART_NO_CHECK))
			rc = refuse(err, errlen, FARM_ECORRUPT,
			            "%s/%s: region file of a previous "
			            "incarnation but no %s (offset 0): not "
			            "started, nothing removed",
			            rs->dir, first, FARM_MANIFEST_FILE);
		if (!rc) {
			*out = rs;
			return 0;
		}
	}
	bool check = !FARM_FAULT_SWITCH(FARM_FP_RESTART_NO_CHECK);
	for (uint32_t i = 0; !rc && check && i < rs->old.nregions; i++)
		rc = check_region(rs, &rs->old_regs[i], err, errlen);
	if (!rc && check)
		rc = check_log(rs, err, errlen);
	if (rc) {
		farm_restart_close(rs);
		return rc;
	}
	/* Intact: set every file aside where the fabric will not remove it
	 * (it removes mem-*.region files of a previous incarnation). */
	for (uint32_t i = 0; i <= rs->old.nregions; i++) {
		const char *name = i < rs->old.nregions ? rs->old_regs[i].file
		                                        : rs->old.log_file;
		char a[FARM_CONFIG_STR + 80], b[FARM_CONFIG_STR + 80];
		farm_rst_path(rs, name, "", a, sizeof(a));
		farm_rst_path(rs, name, ".old", b, sizeof(b));
		struct stat st;
		if (stat(b, &st) == 0)
			continue; /* set aside already (clean shutdown) */
		if (rename(a, b) != 0) {
			rc = refuse(err, errlen, -errno,
			            "%s: cannot set aside: %s", a,
			            farm_strerror(-errno));
			farm_restart_close(rs);
			return rc;
		}
	}
	rs->pending = true;
	farm_rst_hist_load(rs);
	farm_info("restart: machine %" PRIu32 " restarts from %s (%" PRIu32
	          " regions, configuration %" PRIu64 " of %" PRIu32
	          " members%s)",
	          rs->me, rs->dir, rs->old.nregions, rs->old.config_id,
	          rs->old.nmembers, rs->old.clean ? ", shut down cleanly" : "");
	*out = rs;
	return 0;
}
