/*
 * Whole-cluster restart from durable memory (restart.h; FaRM SOSP'15
 * section 3: memory and logs survive a power loss). On the shm fabric a
 * machine's region copies and its transaction logs are files in its data
 * directory, mapped with libpmem; this file makes a directory that a
 * killed incarnation left behind the start of the next one.
 *
 * The manifest (farm.manifest, written with write-to-temporary, fsync and
 * rename) says what the directory holds: the cluster (its ZooKeeper root)
 * and machine, the region size, the log file, every local region copy (id
 * and file) and the last configuration applied (id and members). It is
 * rewritten when a copy is gained (before the copy can be written to:
 * farm_as_on_local), when one is dropped, and when a view is applied; its
 * trailer (magic, length, checksum) tells a whole manifest from a torn
 * one.
 *
 * Start (farm_restart_open, before the fabric opens, which would remove
 * a previous incarnation's mem-*.region files):
 *   - no manifest and no region files: a fresh machine;
 *   - region files but no manifest, a manifest that is torn, of another
 *     layout, or whose files are missing, of the wrong size or with a bad
 *     magic (a region's allocator header, the log's superblock), a log
 *     record whose trailer says it is whole but whose checksum does not
 *     match (farm_txlog_check): refused with the file and offset,
 *     nothing deleted (FARM_ECORRUPT);
 *   - another machine's or cluster's manifest: refused (-EXDEV);
 *   - intact: every listed file <f> is renamed <f>.old (a name the fabric
 *     leaves alone), and the machine restarts.
 *
 * Restart (the node joins as usual, with the previous log published to
 * peers: registered for remote reads, its descriptor in the card's rlog=
 * field):
 *   1. Views whose id is not above the manifest's are ignored: they are
 *      the previous incarnation's, with its dead cards. Views with other
 *      members (the cluster coming up machine by machine) are applied as
 *      usual; nothing runs on them (the application waits for every
 *      member, farm_node_wait_members, which returns only after step 6).
 *   2. At the first view with the manifest's members (the mapping of
 *      regions to machines is a function of the members, so every copy
 *      has its old role): each region file is mapped again where it lies
 *      (farm_region_adopt: the fabric links it under a new name, no copy)
 *      and adopted as a backup copy (farm_as_adopt).
 *      Or with the manifest's members but those the view lists as lost:
 *      machines that did not come back within restart_wait_ms of the last
 *      view change (a damaged directory is refused, never used) and were
 *      given up (node.c, farm_membership_forsake; at most replicas - 2,
 *      so every region keeps a backup with its log). A departure keeps
 *      the survivors' order in every replica list (ring.h), so every copy
 *      still has its old role or is the first surviving backup of a
 *      region whose primary was lost: promoted in step 4. The lost logs
 *      are gone: step 3 reads the lost coordinators' rings from the
 *      others' logs, and the decision counts the backups that came back
 *      in the previous placement (old_ring). Data recovery then makes
 *      the missing copies where machines are left to hold them.
 *   3. Every member's previous log is READ (one-sided) and the
 *      transaction layer decides and applies them (src/txn/restart.c:
 *      the same logs on every machine give the same decisions; committed
 *      images are applied, every stale lock cleared).
 *   4. The copies whose primary is this machine are promoted, and the
 *      allocator rebuilds its state from their block tables.
 *   5. Barrier: this machine marks its published log done and waits until
 *      every member's is; until then nobody commits, so no new record can
 *      meet a copy that is not yet adopted.
 *   6. The new manifest is written (new files, new log) and the .old files
 *      are deleted. The view is then applied as usual.
 * A restart that fails leaves the .old names and the old manifest: the
 * machine says why and can be started again (the replay is idempotent:
 * images go only where they are newer, and every lock is cleared).
 *
 * Clean shutdown (farm_node_shutdown, farm_restart_keep): after the loops
 * stopped, every listed file gets a second name <f>.old (a hard link) and
 * the manifest is marked clean, so closing (which unlinks <f>) keeps the
 * data; the next start restarts from it without copying logs of
 * transactions in flight (there are none).
 *
 * Known window: between another machine's step 6 and this one's, that
 * machine may commit into this machine's copies (the same files: the .old
 * names are links); if every machine is killed again inside that window,
 * this machine restarts with the previous logs, not the new ones, so a
 * commit of that window may be half-applied at its backups. The window is
 * one manifest write.
 */
#include "node/restart.h"

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
#include "node/node.h"
#include "txn/txm.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

#define MAN_MAGIC  0x314e414d4d524146ull /* "FARMMAN1" */
#define MAN_END    0x31444e454d524146ull /* "FARMEND1" */
#define MAN_LAYOUT 1u
#define MAN_NAME   64
#define RLOG_MAGIC 0x31474f4c524d5246ull /* "FRMRLOG1" */
#define RLOG_HDR   64u
#define BARRIER_MS 60000
#define READ_CHUNK (1u << 20)

struct man_hdr {
	uint64_t magic;
	uint32_t layout;
	uint32_t machine;
	uint64_t region_size;
	uint64_t log_bytes;
	uint64_t config_id;
	uint32_t nregions;
	uint32_t nmembers;
	uint32_t clean;
	uint32_t nkept; /* struct man_kept entries after the regions (0 in
	                   manifests written before they existed) */
	uint32_t members[FARM_VIEW_MAX];
	char cluster[256];
	char log_file[MAN_NAME];
};

struct man_region {
	uint32_t id;
	uint32_t pad;
	uint64_t size;
	char file[MAN_NAME];
};

/* A layer's durable blob (farm_restart_keep_blob): the KV store's shard
 * list, for one. */
struct man_kept {
	char name[FARM_RESTART_KEPT_NAME];
	uint32_t len;
	uint32_t pad;
	uint8_t data[FARM_RESTART_KEPT_MAX];
};

struct man_tail {
	uint64_t magic;
	uint64_t len; /* the whole manifest, tail included */
	uint64_t sum; /* FNV-1a of everything before the tail */
};

/* The head of the published previous log; the log file follows. */
struct rlog_hdr {
	uint64_t magic;
	uint32_t machine;
	_Atomic uint32_t done; /* 1: this machine's restart applied (step 5) */
	uint64_t log_bytes;
	uint8_t pad[RLOG_HDR - 24];
};
_Static_assert(sizeof(struct rlog_hdr) == RLOG_HDR, "rlog header");

struct farm_restart {
	char dir[FARM_CONFIG_STR];
	char cluster[256];
	uint32_t me;
	uint64_t region_size;
	farm_fabric *fab;
	farm_as *as;
	farm_txm *txm;
	struct farm_galloc *ga;
	pthread_mutex_t lock;
	/* The previous incarnation (pending restart). */
	bool pending;
	struct man_hdr old;
	struct man_region *old_regs;
	/* This incarnation's copies and last view (under lock). */
	struct man_region *regs;
	unsigned nregs, cap;
	uint64_t config_id;
	uint32_t members[FARM_VIEW_MAX];
	unsigned nmembers;
	bool writable; /* the manifest is this incarnation's */
	bool frozen;   /* shutting down: views no longer recorded */
	/* The previous log, published. */
	farm_mem *rmem;
	farm_mr *rmr;
	struct farm_restart_stats st;
	uint64_t t_open_ns;
	struct farm_ring_attr ring; /* placement's (cfg) */
	/* Under lock: the layers' blobs, the previous incarnation's until
	 * replaced (written with every manifest). */
	struct man_kept kept[FARM_RESTART_KEPT_N];
	unsigned nkept;
};

static uint64_t fnv1a(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static void path_of(const struct farm_restart *rs, const char *name,
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
	path_of(rs, name, ".old", path, len);
	if (stat(path, &st) == 0) {
		*size = (uint64_t)st.st_size;
		return 0;
	}
	path_of(rs, name, "", path, len);
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
static int man_write(struct farm_restart *rs, bool clean)
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
	h->machine = rs->me;
	h->region_size = rs->region_size;
	snprintf(h->log_file, sizeof(h->log_file), "%s",
	         farm_txm_log_file(rs->txm));
	char lp[FARM_CONFIG_STR + 80];
	struct stat st;
	path_of(rs, h->log_file, "", lp, sizeof(lp));
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
	                     .sum = fnv1a(buf, len - sizeof(t))};
	memcpy(buf + len - sizeof(t), &t, sizeof(t));
	char path[FARM_CONFIG_STR + 32], tmp[FARM_CONFIG_STR + 40];
	path_of(rs, FARM_MANIFEST_FILE, "", path, sizeof(path));
	path_of(rs, FARM_MANIFEST_FILE, ".tmp", tmp, sizeof(tmp));
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

static void on_local(void *ctx, uint32_t region, farm_region *r, bool added)
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
		man_write(rs, false);
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
	void *p = size ? mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)
	               : MAP_FAILED;
	int e = size ? errno : EINVAL;
	close(fd);
	if (p == MAP_FAILED) /* not damage: no refusal notice (node.c) */
		return refuse(err, len, -e,
		              "%s: cannot map %" PRIu64 " bytes: %s", path,
		              size, farm_strerror(-e));
	int rc = farm_txlog_check(p, size, path, err, len);
	munmap(p, size);
	return rc;
}

static int man_read(struct farm_restart *rs, const struct farm_config *cfg,
                    char *err, size_t len)
{
	char path[FARM_CONFIG_STR + 32];
	path_of(rs, FARM_MANIFEST_FILE, "", path, sizeof(path));
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
	if (h.magic != MAN_MAGIC) {
		rc = refuse(err, len, FARM_ECORRUPT,
		            "%s: bad magic at offset 0", path);
		goto out;
	}
	if (h.layout != MAN_LAYOUT) {
		rc = refuse(err, len, FARM_ECORRUPT,
		            "%s: unknown layout %" PRIu32 " at offset 8", path,
		            h.layout);
		goto out;
	}
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
	if (t.sum != fnv1a(buf, n - sizeof(t))) {
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

static void cluster_name(const struct farm_config *cfg, char *out, size_t len)
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
	cluster_name(cfg, rs->cluster, sizeof(rs->cluster));
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
		path_of(rs, name, "", a, sizeof(a));
		path_of(rs, name, ".old", b, sizeof(b));
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
	farm_info("restart: machine %" PRIu32 " restarts from %s (%" PRIu32
	          " regions, configuration %" PRIu64 " of %" PRIu32
	          " members%s)",
	          rs->me, rs->dir, rs->old.nregions, rs->old.config_id,
	          rs->old.nmembers, rs->old.clean ? ", shut down cleanly" : "");
	*out = rs;
	return 0;
}

/* ---- publishing the previous log ------------------------------------ */

/* @len bytes of @fd at @off into @dst. 0; -EIO. */
static int read_at(int fd, uint8_t *dst, uint64_t off, uint64_t len)
{
	uint64_t got = 0;
	while (got < len) {
		ssize_t r = pread(fd, dst + got, len - got, (off_t)(off + got));
		if (r <= 0)
			return -EIO;
		got += (uint64_t)r;
	}
	return 0;
}

int farm_restart_attach(struct farm_restart *rs, farm_fabric *fab, farm_as *as,
                        farm_txm *txm, struct farm_galloc *ga)
{
	if (!rs)
		return 0;
	rs->fab = fab;
	rs->as = as;
	rs->txm = txm;
	rs->ga = ga;
	farm_as_on_local(as, on_local, rs);
	if (!rs->pending) {
		pthread_mutex_lock(&rs->lock);
		rs->writable = true;
		int rc = farm_txm_log_file(txm)[0] ? man_write(rs, false) : 0;
		pthread_mutex_unlock(&rs->lock);
		return rc;
	}
	char path[FARM_CONFIG_STR + 80];
	path_of(rs, rs->old.log_file, ".old", path, sizeof(path));
	size_t ll = (size_t)rs->old.log_bytes;
	int rc = farm_mem_alloc(fab, RLOG_HDR + ll, 0, &rs->rmem);
	if (rc)
		return rc;
	uint8_t *base = farm_mem_addr(rs->rmem);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* The superblock and headers, then only the rings of the previous
	 * members' coordinators: a log file has rings for every possible
	 * machine id (64 x threads x ring bytes), nearly all empty, and the
	 * memory is zero already. Unreadable superblock: all of it. */
	struct {
		uint64_t magic;
		uint32_t layout, machine, M, T;
		uint64_t R, hdr_area, total;
	} sb = {0};
	bool whole = pread(fd, &sb, sizeof(sb), 0) != (ssize_t)sizeof(sb) ||
	             !sb.M || sb.M > 0x40 || !sb.T || sb.T > 64 || !sb.R ||
	             sb.total != ll || sb.hdr_area > ll ||
	             sb.hdr_area + (uint64_t)sb.M * sb.T * sb.R != ll;
	int rc2 = whole ? read_at(fd, base + RLOG_HDR, 0, ll)
	                : read_at(fd, base + RLOG_HDR, 0, sb.hdr_area);
	for (uint32_t i = 0; !whole && !rc2 && i < rs->old.nmembers; i++) {
		uint64_t c = rs->old.members[i];
		if (c >= sb.M)
			continue;
		uint64_t off = sb.hdr_area + c * sb.T * sb.R;
		rc2 = read_at(fd, base + RLOG_HDR + off, off,
		              (uint64_t)sb.T * sb.R);
	}
	close(fd);
	if (rc2)
		return rc2;
	struct rlog_hdr *h = (struct rlog_hdr *)(void *)base;
	h->magic = RLOG_MAGIC;
	h->machine = rs->me;
	h->log_bytes = ll;
	atomic_store_explicit(&h->done, 0, memory_order_relaxed);
	return farm_mr_reg(fab, base, RLOG_HDR + ll,
	                   FARM_ACCESS_LOCAL | FARM_ACCESS_REMOTE_READ,
	                   &rs->rmr);
}

void farm_restart_card(const struct farm_restart *rs, char *buf, size_t len)
{
	if (!rs || !rs->pending || !rs->rmr)
		return;
	farm_mr_desc d = farm_mr_describe(rs->rmr);
	size_t n = strlen(buf);
	snprintf(buf + n, len - n, " rlog=%" PRIx64 ":%" PRIx64 ":%" PRIx64,
	         d.key, d.addr, d.len);
}

const char *farm_restart_card_field(const char *card)
{
	const char *t = NULL;
	for (const char *x = card; x && (x = strstr(x, " rlog=")); x++)
		t = x;
	return t;
}

bool farm_restart_pending(const struct farm_restart *rs)
{
	return rs && rs->pending;
}

uint64_t farm_restart_config(const struct farm_restart *rs)
{
	if (!farm_restart_pending(rs))
		return 0;
	return rs->old.config_id ? rs->old.config_id : 1;
}

/* Is @v the restart's view: the previous members, but those it lists as
 * lost (given up, farm_membership_forsake)? Those into @lost. */
static bool restart_set(const struct farm_restart *rs,
                        const struct farm_view *v, uint32_t *lost,
                        unsigned *nlost)
{
	unsigned back = 0;
	*nlost = 0;
	for (unsigned i = 0; i < rs->old.nmembers && i < FARM_VIEW_MAX; i++) {
		uint32_t id = rs->old.members[i];
		if (farm_view_find(v, id))
			back++;
		else if (farm_ids_have(v->lost, v->nlost, id))
			lost[(*nlost)++] = id;
		else
			return false;
	}
	return back == v->n;
}

static unsigned most_lost(const struct farm_restart *rs)
{
	unsigned r = rs->ring.replicas ? rs->ring.replicas
	                               : FARM_RING_DEFAULT_REPLICAS;
	if (r > rs->old.nmembers)
		r = rs->old.nmembers;
	return r > 2 ? r - 2 : 0;
}

unsigned farm_restart_missing(const struct farm_restart *rs,
                              const struct farm_view *v, uint32_t *out,
                              unsigned *most)
{
	*most = 0;
	if (!rs || !rs->pending || !v)
		return 0;
	unsigned n = 0;
	for (unsigned i = 0; i < rs->old.nmembers && i < FARM_VIEW_MAX; i++)
		if (!farm_view_find(v, rs->old.members[i]))
			out[n++] = rs->old.members[i];
	*most = most_lost(rs);
	return n;
}

/* The previous configuration's placement: @v's, with the @lost machines
 * members again (where departed, with their domains). */
static int old_ring(const struct farm_restart *rs, const struct farm_view *v,
                    const uint32_t *lost, unsigned nlost, farm_ring **out)
{
	uint32_t ids[FARM_VIEW_MAX];
	struct farm_ring_machine placed[3 * FARM_VIEW_MAX];
	for (unsigned i = 0; i < v->n; i++)
		ids[i] = v->members[i].id;
	unsigned np = farm_view_placement(v, ids, v->n, placed);
	for (unsigned i = 0; i < nlost; i++) {
		uint32_t late = 0;
		for (unsigned q = 0; q < v->nlate && !late; q++)
			if (v->late[q] == lost[i])
				late = q + 1;
		unsigned k = 0;
		while (k < np && placed[k].id != lost[i])
			k++;
		if (k == np)
			placed[np++] =
			        (struct farm_ring_machine){.id = lost[i]};
		placed[k].departed = false;
		placed[k].late = late;
	}
	return farm_ring_build_domains(placed, np, &rs->ring, out);
}

static bool peer_live(struct farm_restart *rs, const struct farm_member *m);

int farm_restart_view(struct farm_restart *rs, const struct farm_view *v)
{
	if (!rs || !rs->pending)
		return 0;
	/* Static membership has one configuration (id 1) and no stale
	 * one to ignore. */
	if (strcmp(rs->cluster, "static") != 0 &&
	    v->config_id <= rs->old.config_id) {
		farm_info("restart: view %" PRIu64
		          " ignored: the previous incarnation's",
		          v->config_id);
		return 1;
	}
	/* A member without a previous log published is an incarnation that
	 * has not restarted (its ephemeral znode outlives it until its
	 * session expires): its card is dead. */
	for (unsigned i = 0; i < v->n; i++)
		if (v->members[i].id != rs->me &&
		    !farm_restart_card_field(v->members[i].endpoint)) {
			farm_info("restart: view %" PRIu64
			          " ignored: machine %" PRIu32
			          " has not restarted yet",
			          v->config_id, v->members[i].id);
			return 1;
		}
	/* A card with a previous log may still be dead: an earlier restart's
	 * incarnation, in a configuration its CM wrote while the cluster
	 * shut down. Its log must answer a READ. */
	for (unsigned i = 0; i < v->n; i++)
		if (v->members[i].id != rs->me &&
		    !peer_live(rs, &v->members[i])) {
			farm_info("restart: view %" PRIu64
			          " ignored: machine %" PRIu32
			          "'s card is a dead incarnation's",
			          v->config_id, v->members[i].id);
			return 1;
		}
	return 0;
}

void farm_restart_applied(struct farm_restart *rs, const struct farm_view *v)
{
	if (!rs)
		return;
	pthread_mutex_lock(&rs->lock);
	if (!rs->frozen) {
		rs->config_id = v->config_id;
		rs->nmembers = v->n;
		for (unsigned i = 0; i < v->n; i++)
			rs->members[i] = v->members[i].id;
		if (rs->writable)
			man_write(rs, false);
	}
	pthread_mutex_unlock(&rs->lock);
}

void farm_restart_freeze(struct farm_restart *rs)
{
	if (!rs)
		return;
	pthread_mutex_lock(&rs->lock);
	rs->frozen = true;
	pthread_mutex_unlock(&rs->lock);
}

/* ---- the restart ------------------------------------------------------ */

/* One member's previous log: READ from it whole (ours: copied). */
struct peer_log {
	uint32_t id;
	farm_ep *ep;
	farm_mr_desc d;
	uint8_t *buf;
	uint8_t *alloc; /* what buf points into (peers') */
	farm_mr *mr;
	size_t len;
	char what[96];
};

static int read_sync(farm_cq *cq, farm_ep *ep, farm_mr *lmr, void *dst,
                     uint64_t raddr, uint64_t rkey, uint32_t len)
{
	farm_wr wr = {.opcode = FARM_WR_READ,
	              .flags = FARM_WR_SIGNALED,
	              .len = len,
	              .local = dst,
	              .lmr = lmr,
	              .raddr = raddr,
	              .rkey = rkey};
	int rc = farm_ep_post(ep, &wr, NULL);
	if (rc)
		return rc;
	uint64_t dl = farm_now_ns() + 10000000000ull;
	for (;;) {
		farm_wc wc;
		int n = farm_cq_poll(cq, 1, &wc);
		if (n < 0)
			return n;
		if (n == 1)
			return wc.status;
		if (farm_now_ns() > dl)
			return -ETIMEDOUT;
		sched_yield();
	}
}

/* READ [@off, @off + @len) of @p's published log into the same place of
 * its buffer, in chunks. */
static int read_range(farm_cq *cq, struct peer_log *p, uint64_t off,
                      uint64_t len)
{
	int rc = 0;
	for (uint64_t o = off; !rc && o < off + len; o += READ_CHUNK) {
		uint32_t n =
		        (uint32_t)FARM_MIN((uint64_t)READ_CHUNK, off + len - o);
		rc = read_sync(cq, p->ep, p->mr, p->buf + o, p->d.addr + o,
		               p->d.key, n);
	}
	return rc;
}

/* A peer's previous log: the header and superblock first, then only the
 * rings of the coordinators @coords (a log file has rings for every
 * possible machine id, nearly all of them empty; the buffer is zeroed, and
 * a zero ring holds no record). A superblock that does not add up is read
 * whole, for farm_txlog_check to name. */
static int read_log(farm_cq *cq, struct peer_log *p, uint64_t coords)
{
	uint64_t head = FARM_MIN(p->d.len, (uint64_t)RLOG_HDR + 4096);
	int rc = read_range(cq, p, 0, head);
	if (rc)
		return rc;
	struct {
		uint64_t magic;
		uint32_t layout, machine, M, T;
		uint64_t R, hdr_area, total;
	} sb;
	if (p->d.len < RLOG_HDR + sizeof(sb))
		return read_range(cq, p, 0, p->d.len);
	memcpy(&sb, p->buf + RLOG_HDR, sizeof(sb));
	if (!sb.M || sb.M > 0x40 || !sb.T || sb.T > 64 || !sb.R ||
	    sb.total != p->d.len - RLOG_HDR ||
	    sb.hdr_area + (uint64_t)sb.M * sb.T * sb.R != sb.total)
		return read_range(cq, p, 0, p->d.len);
	rc = read_range(cq, p, RLOG_HDR, sb.hdr_area);
	for (uint32_t c = 0; !rc && c < sb.M && c < 64; c++) {
		if (!((coords >> c) & 1))
			continue;
		rc = read_range(cq, p,
		                RLOG_HDR + sb.hdr_area +
		                        (uint64_t)c * sb.T * sb.R,
		                (uint64_t)sb.T * sb.R);
	}
	return rc;
}

static int peer_desc(const struct farm_member *m, char *addr, size_t alen,
                     farm_mr_desc *d)
{
	farm_mr_desc md, ld;
	int rc = farm_node_card_parse(m->endpoint, addr, alen, &md, &ld);
	if (rc)
		return rc;
	const char *f = farm_restart_card_field(m->endpoint);
	uint64_t k, a, l;
	if (!f ||
	    sscanf(f + 6, "%" SCNx64 ":%" SCNx64 ":%" SCNx64, &k, &a, &l) != 3)
		return -ENOENT;
	*d = (farm_mr_desc){.key = k,
	                    .addr = a,
	                    .len = l,
	                    .machine = m->id,
	                    .access = FARM_ACCESS_REMOTE_READ};
	return 0;
}

/* A new region with the contents of @path (a fabric without files). */
static int copy_region(struct farm_restart *rs, const char *path, uint64_t size,
                       farm_region **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *src = fd >= 0 ? mmap(NULL, size, PROT_READ,
	                           MAP_SHARED | MAP_POPULATE, fd, 0)
	                    : MAP_FAILED;
	int rc = src == MAP_FAILED ? -errno : 0;
	if (fd >= 0)
		close(fd);
	if (!rc && !(rc = farm_region_create(rs->fab, size, out)))
		memcpy(farm_region_base(*out), src, size);
	if (src != MAP_FAILED)
		munmap(src, size);
	return rc;
}

static bool peer_live(struct farm_restart *rs, const struct farm_member *m)
{
	char addr[FARM_ENDPOINT_MAX];
	farm_mr_desc d;
	if (peer_desc(m, addr, sizeof(addr), &d) || d.len < RLOG_HDR)
		return false;
	farm_cq *cq = NULL;
	farm_ep *ep = NULL;
	farm_mr *mr = NULL;
	struct rlog_hdr h = {0};
	int rc = farm_cq_create(rs->fab, 4, 0, &cq);
	if (!rc)
		rc = farm_mr_reg(rs->fab, &h, sizeof(h), FARM_ACCESS_LOCAL,
		                 &mr);
	if (!rc)
		rc = farm_ep_connect(rs->fab, cq, m->id, addr, NULL, &ep);
	if (!rc)
		rc = read_sync(cq, ep, mr, &h, d.addr, d.key, sizeof(h));
	if (ep)
		farm_ep_destroy(ep);
	if (mr)
		farm_mr_dereg(mr);
	if (cq && farm_cq_destroy(cq))
		farm_warn("restart: completion queue not destroyed");
	return !rc && h.magic == RLOG_MAGIC && h.machine == m->id;
}

static void set_done(struct farm_restart *rs)
{
	struct rlog_hdr *h = farm_mem_addr(rs->rmem);
	/* Pairs with peers' READ of the word in the barrier. */
	atomic_store_explicit(&h->done, 1, memory_order_release);
}

int farm_restart_run(struct farm_restart *rs, const struct farm_view *v)
{
	uint32_t lost[FARM_VIEW_MAX];
	unsigned nlost;
	if (!rs || !rs->pending || !restart_set(rs, v, lost, &nlost))
		return 0;
	char err[512] = "";
	farm_ring *oring = NULL;
	uint64_t t0 = farm_now_ns();
	int rc = 0;
	unsigned nadopt = 0;
	uint32_t *ids = calloc(rs->old.nregions + 1, sizeof(*ids));
	struct peer_log *pl = calloc(v->n, sizeof(*pl));
	struct farm_txrestart_log *logs = calloc(v->n, sizeof(*logs));
	farm_cq *cq = NULL;
	if (!ids || !pl || !logs) {
		rc = -ENOMEM;
		goto out;
	}
	/* Without the machines given up: their logs are gone, and recovery's
	 * rule for a removed backup decides (src/txn/restart.c). Only while
	 * every region keeps a backup that came back. */
	if (nlost > most_lost(rs)) {
		rc = FARM_EUNAVAILABLE;
		snprintf(err, sizeof(err),
		         "%u previous members are lost, more than the %u "
		         "the replicas allow",
		         nlost, most_lost(rs));
		goto out;
	}
	if (nlost && (rc = old_ring(rs, v, lost, nlost, &oring))) {
		snprintf(err, sizeof(err), "previous placement: %s",
		         farm_strerror(rc));
		goto out;
	}
	rs->st.lost = nlost;
	for (unsigned i = 0; i < nlost; i++)
		farm_warn("restart: machine %" PRIu32 " restarts without "
		          "machine %" PRIu32 " (given up: its directory did "
		          "not come back); its regions are served from "
		          "their other replicas",
		          rs->me, lost[i]);
	/* 2. Adopt: copy every region from its set-aside file. */
	for (uint32_t i = 0; i < rs->old.nregions && !rc; i++) {
		const struct man_region *r = &rs->old_regs[i];
		char path[FARM_CONFIG_STR + 80];
		path_of(rs, r->file, ".old", path, sizeof(path));
		farm_region *reg = NULL;
		/* Mapped again where it lies (a second name for the file,
		 * no copy); copied only where the fabric cannot. */
		rc = farm_region_adopt(rs->fab, path, r->size, &reg);
		if (rc == -ENOTSUP)
			rc = copy_region(rs, path, r->size, &reg);
		if (!rc) {
			/* No MADV_POPULATE_*: populating 512 MiB took 0.9-2.4
			 * s on the development host, more than the faults
			 * of the walks below (one per object header). */
			rc = farm_as_adopt(rs->as, r->id, reg);
			if (rc)
				farm_region_destroy(reg);
		}
		if (rc) {
			snprintf(err, sizeof(err), "region %" PRIu32 ": %s",
			         r->id, farm_strerror(rc));
			break;
		}
		on_local(rs, r->id, reg, true); /* not written: pending */
		ids[nadopt++] = r->id;
		rs->st.bytes += r->size;
	}
	rs->st.regions = nadopt;
	uint64_t t1 = farm_now_ns();
	rs->st.adopt_ns = t1 - t0;
	if (rc)
		goto out;
	/* 3. Every member's previous log. */
	if ((rc = farm_cq_create(rs->fab, 64, 0, &cq)))
		goto out;
	/* Every previous member coordinated: the lost ones too. Their
	 * records are in every log that came back, and every machine must
	 * read the same records to take the same decisions: a lost
	 * coordinator's COMMIT-BACKUPs at the other backups, and the marks
	 * its later records carry, are what proves its last commits (reading
	 * only the view's members' rings, each machine saw a lost
	 * coordinator's records in its own log alone, and a backup promoted
	 * for a lost primary aborted a commit another backup had applied). */
	uint64_t coords = 0;
	for (unsigned k = 0; k < rs->old.nmembers; k++)
		if (rs->old.members[k] < 64)
			coords |= 1ull << rs->old.members[k];
	uint64_t rcoords = coords;
	if (FARM_FAULT_SWITCH(FARM_FP_RESTART_VIEW_RINGS)) { /* testing */
		rcoords = 0;
		for (unsigned k = 0; k < v->n; k++)
			if (v->members[k].id < 64)
				rcoords |= 1ull << v->members[k].id;
	}
	for (unsigned k = 0; k < nlost; k++)
		if (lost[k] < 64 &&
		    FARM_FAULT_SWITCH(FARM_FP_RESTART_LOST_STRICT))
			coords &= ~(1ull << lost[k]); /* testing */
	unsigned nl = 0;
	for (unsigned i = 0; i < v->n && !rc; i++) {
		const struct farm_member *m = &v->members[i];
		struct peer_log *p = &pl[nl];
		p->id = m->id;
		snprintf(p->what, sizeof(p->what),
		         "previous log of machine %" PRIu32, m->id);
		if (m->id == rs->me) {
			p->buf = (uint8_t *)farm_mem_addr(rs->rmem) + RLOG_HDR;
			p->len = (size_t)rs->old.log_bytes;
		} else {
			char addr[FARM_ENDPOINT_MAX];
			rc = peer_desc(m, addr, sizeof(addr), &p->d);
			if (rc) {
				snprintf(err, sizeof(err),
				         "machine %" PRIu32
				         " publishes no previous log (%s)",
				         m->id, farm_strerror(rc));
				break;
			}
			if (p->d.len < RLOG_HDR ||
			    p->d.len > RLOG_HDR + (1ull << 34)) {
				rc = FARM_ECORRUPT;
				snprintf(err, sizeof(err),
				         "machine %" PRIu32
				         ": previous log of %" PRIu64 " bytes",
				         m->id, p->d.len);
				break;
			}
			p->len = (size_t)(p->d.len - RLOG_HDR);
			p->buf = p->alloc = calloc(1, p->d.len);
			rc = p->buf ? 0 : -ENOMEM;
			if (!rc)
				rc = farm_mr_reg(rs->fab, p->buf, p->d.len,
				                 FARM_ACCESS_LOCAL, &p->mr);
			if (!rc)
				rc = farm_ep_connect(rs->fab, cq, m->id, addr,
				                     NULL, &p->ep);
			if (!rc)
				rc = read_log(cq, p, rcoords);
			if (rc) {
				snprintf(err, sizeof(err),
				         "cannot read the previous log of "
				         "machine %" PRIu32 ": %s",
				         m->id, farm_strerror(rc));
				break;
			}
			struct rlog_hdr h;
			memcpy(&h, p->buf, sizeof(h));
			if (h.magic != RLOG_MAGIC || h.machine != m->id ||
			    h.log_bytes != p->len) {
				rc = FARM_ECORRUPT;
				snprintf(err, sizeof(err),
				         "machine %" PRIu32
				         ": bad previous-log header",
				         m->id);
				break;
			}
			p->buf += RLOG_HDR;
		}
		logs[nl] = (struct farm_txrestart_log){.base = p->buf,
		                                       .len = p->len,
		                                       .what = p->what,
		                                       .coords = coords};
		nl++;
	}
	if (rc)
		goto out;
	rs->st.logs = nl;
	/* 3, 4. Decide and apply; promote; the allocator's state. */
	uint64_t tl = farm_now_ns();
	rs->st.logs_ns = tl - t1;
	struct farm_txrestart_stats ts;
	struct farm_txrestart_lost tl_lost = {
	        .ring = oring, .ids = lost, .n = nlost};
	rc = farm_txm_restart_apply(rs->txm, logs, nl, ids, nadopt,
	                            nlost ? &tl_lost : NULL, &ts, err,
	                            sizeof(err));
	if (rc)
		goto out;
	rs->st.records = ts.records;
	rs->st.txns = ts.txns;
	rs->st.committed = ts.committed;
	rs->st.aborted = ts.aborted;
	rs->st.images = ts.images;
	rs->st.objects = ts.objects;
	rs->st.unlocked = ts.unlocked;
	uint64_t ta = farm_now_ns();
	rs->st.apply_ns = ta - tl;
	for (unsigned i = 0; i < nadopt && !rc; i++) {
		uint32_t reps[FARM_RING_MAX_REPLICAS];
		unsigned nr = farm_as_replicas(rs->as, ids[i], reps);
		if (!nr || reps[0] != rs->me)
			continue;
		rc = farm_as_promote(rs->as, ids[i]);
		farm_region *r = farm_as_local_region(rs->as, ids[i], NULL);
		if (rc || !r) {
			snprintf(err, sizeof(err),
			         "region %" PRIu32 " not promoted: %s", ids[i],
			         farm_strerror(rc ? rc : -ENOENT));
			rc = rc ? rc : -ENOENT;
			break;
		}
		struct farm_alloc_region ar = {.id = ids[i],
		                               .base = farm_region_base(r),
		                               .size = farm_region_size(r)};
		const uint64_t *w = ar.base;
		farm_blockalloc *ba = farm_galloc_blockalloc(rs->ga);
		rc = w[0] ? farm_blockalloc_rebuild_region(ba, &ar)
		          : farm_blockalloc_add_region(ba, &ar);
		if (rc)
			snprintf(err, sizeof(err),
			         "region %" PRIu32 ": allocator state: %s",
			         ids[i], farm_strerror(rc));
	}
	uint64_t t2 = farm_now_ns();
	rs->st.replay_ns = t2 - t1;
	rs->st.alloc_ns = t2 - ta;
	if (rc)
		goto out;
	/* 5. Barrier: nobody commits before every copy is in place. */
	set_done(rs);
	uint64_t dl = t2 + (uint64_t)BARRIER_MS * 1000000ull;
	for (unsigned i = 0; i < nl && !rc; i++) {
		struct peer_log *p = &pl[i];
		if (p->id == rs->me)
			continue;
		for (;;) {
			uint8_t *hb = p->buf - RLOG_HDR;
			rc = read_sync(cq, p->ep, p->mr, hb, p->d.addr,
			               p->d.key, RLOG_HDR);
			struct rlog_hdr h;
			memcpy(&h, hb, sizeof(h));
			if (rc || atomic_load(&h.done) == 1)
				break;
			if (farm_now_ns() > dl) {
				rc = -ETIMEDOUT;
				break;
			}
			struct timespec ts1 = {0, 1000000};
			nanosleep(&ts1, NULL);
		}
		if (rc)
			snprintf(err, sizeof(err),
			         "machine %" PRIu32 " did not finish its "
			         "restart: %s",
			         p->id, farm_strerror(rc));
	}
	uint64_t t3 = farm_now_ns();
	rs->st.barrier_ns = t3 - t2;
	if (rc)
		goto out;
	/* 6. This incarnation's manifest, then the old files go. */
	pthread_mutex_lock(&rs->lock);
	rs->config_id = v->config_id;
	rs->nmembers = v->n;
	for (unsigned i = 0; i < v->n; i++)
		rs->members[i] = v->members[i].id;
	rs->writable = true;
	rc = man_write(rs, false);
	pthread_mutex_unlock(&rs->lock);
	if (rc)
		goto out;
	for (uint32_t i = 0; i <= rs->old.nregions; i++) {
		char path[FARM_CONFIG_STR + 80];
		path_of(rs,
		        i < rs->old.nregions ? rs->old_regs[i].file
		                             : rs->old.log_file,
		        ".old", path, sizeof(path));
		if (unlink(path) != 0)
			farm_warn("restart: cannot remove %s: %s", path,
			          farm_strerror(-errno));
	}
	rs->pending = false;
	rs->st.restarted = true;
	rs->st.total_ns = farm_now_ns() - rs->t_open_ns;
	farm_info("restart: machine %" PRIu32 " restarted: %" PRIu64
	          " regions (%" PRIu64 " MiB) in %.1f ms, %" PRIu64
	          " records of %" PRIu64 " transactions (%" PRIu64
	          " committed, %" PRIu64 " aborted, %" PRIu64
	          " images applied, %" PRIu64 " locks cleared) in %.1f ms, "
	          "barrier %.1f ms",
	          rs->me, rs->st.regions, rs->st.bytes >> 20,
	          rs->st.adopt_ns / 1e6, rs->st.records, rs->st.txns,
	          rs->st.committed, rs->st.aborted, rs->st.images,
	          rs->st.unlocked, rs->st.replay_ns / 1e6,
	          rs->st.barrier_ns / 1e6);
out:
	for (unsigned i = 0; pl && i < v->n; i++) {
		if (pl[i].ep)
			farm_ep_destroy(pl[i].ep);
		if (pl[i].mr)
			farm_mr_dereg(pl[i].mr);
		if (pl[i].id != rs->me)
			free(pl[i].alloc);
	}
	if (cq && farm_cq_destroy(cq))
		farm_warn("restart: completion queue not destroyed");
	farm_ring_free(oring);
	free(ids);
	free(pl);
	free(logs);
	if (rc)
		farm_err("restart: machine %" PRIu32
		         " cannot restart: %s (%s); its previous files are "
		         "kept (*.old)",
		         rs->me, err[0] ? err : "error", farm_strerror(rc));
	return rc;
}

int farm_restart_keep(struct farm_restart *rs)
{
	if (!rs || !rs->writable)
		return rs ? -EAGAIN : -EINVAL;
	pthread_mutex_lock(&rs->lock);
	int rc = 0;
	for (unsigned i = 0; i <= rs->nregs && !rc; i++) {
		const char *name = i < rs->nregs ? rs->regs[i].file
		                                 : farm_txm_log_file(rs->txm);
		char a[FARM_CONFIG_STR + 80], b[FARM_CONFIG_STR + 80];
		path_of(rs, name, "", a, sizeof(a));
		path_of(rs, name, ".old", b, sizeof(b));
		unlink(b);
		if (link(a, b) != 0)
			rc = -errno;
	}
	if (!rc)
		rc = man_write(rs, true);
	pthread_mutex_unlock(&rs->lock);
	if (rc)
		farm_err("restart: clean shutdown of %s incomplete: %s",
		         rs->dir, farm_strerror(rc));
	return rc;
}

void farm_restart_discard(struct farm_restart *rs)
{
	if (!rs || !rs->writable)
		return;
	/* A plain close: the fabric removes the files, so the manifest
	 * naming them goes first. */
	char path[FARM_CONFIG_STR + 32];
	path_of(rs, FARM_MANIFEST_FILE, "", path, sizeof(path));
	pthread_mutex_lock(&rs->lock);
	rs->writable = false;
	if (unlink(path) != 0 && errno != ENOENT)
		farm_warn("restart: cannot remove %s: %s", path,
		          farm_strerror(-errno));
	pthread_mutex_unlock(&rs->lock);
}

void farm_restart_stats(const struct farm_restart *rs,
                        struct farm_restart_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (rs)
		*out = rs->st;
}

int farm_restart_keep_blob(struct farm_restart *rs, const char *name,
                           const void *data, size_t len)
{
	if (!name || !name[0] || strlen(name) >= FARM_RESTART_KEPT_NAME ||
	    (len && !data) || len > FARM_RESTART_KEPT_MAX)
		return -EINVAL;
	if (!rs)
		return -ENOTSUP; /* no durable directory (not shm) */
	pthread_mutex_lock(&rs->lock);
	unsigned i = 0;
	while (i < rs->nkept && strcmp(rs->kept[i].name, name))
		i++;
	int rc = 0;
	if (i == FARM_RESTART_KEPT_N) {
		rc = -ENOSPC;
	} else {
		struct man_kept *k = &rs->kept[i];
		memset(k, 0, sizeof(*k));
		snprintf(k->name, sizeof(k->name), "%s", name);
		k->len = (uint32_t)len;
		if (len)
			memcpy(k->data, data, len);
		if (i == rs->nkept)
			rs->nkept++;
		/* Before the restart's manifest, the next one carries it. */
		if (rs->writable && !rs->frozen)
			rc = man_write(rs, false);
	}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

long farm_restart_kept_blob(struct farm_restart *rs, const char *name,
                            void *buf, size_t cap)
{
	if (!name || (cap && !buf))
		return -EINVAL;
	if (!rs)
		return -ENOENT;
	pthread_mutex_lock(&rs->lock);
	long rc = -ENOENT;
	for (unsigned i = 0; i < rs->nkept; i++)
		if (!strcmp(rs->kept[i].name, name)) {
			rc = rs->kept[i].len;
			if (cap)
				memcpy(buf, rs->kept[i].data,
				       FARM_MIN(cap, (size_t)rs->kept[i].len));
			break;
		}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

void farm_restart_close(struct farm_restart *rs)
{
	if (!rs)
		return;
	if (rs->rmr)
		farm_mr_dereg(rs->rmr);
	if (rs->rmem)
		farm_mem_free(rs->rmem);
	free(rs->old_regs);
	free(rs->regs);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}
