/*
 * shm provider: machines are processes on one host; a one-sided operation is
 * done by the initiator on memory it has mapped from the target's files.
 *
 * Design (ARCHITECTURE.md 2.1). Each machine owns a data directory:
 *   fabric.lock             flock(LOCK_EX) held while the machine lives; the
 *                           kernel drops it when the process dies.
 *   fabric.table            the registration table, mapped read-only by
 *                           peers: a header (magic, machine id, pid,
 *                           incarnation, OPEN/CLOSED) and one 64-byte entry
 *                           per registration (generation, range, file).
 *   mem-<slot>-<gen>.region memory from farm_mem_alloc(), mapped with
 *                           libpmem; peers map it by this name.
 * A descriptor's key is (generation << 12 | entry index). An initiator checks
 * the key's generation against the entry on every request, so a
 * deregistered or reused entry fails with FARM_EREMOTE_KEY, and checks the
 * range against the entry and against the size of the file it mapped, so
 * nothing outside a registration is ever touched (a garbage table cannot
 * make it fault either).
 *
 * Execution. Requests queue on the endpoint's send ring in post order and
 * run in that order. WRITE and CAS run at post (after any earlier READs);
 * READ resolves and prefetches its lines at post and copies when the
 * initiator polls, so a thread with many READs outstanding overlaps their
 * cache misses as a NIC overlaps its DMA reads. Completions are delivered
 * only by farm_cq_poll(), never inline, so code above is written for
 * asynchrony as on hardware.
 *
 * Hardware guarantees emulated:
 *   (a) in-order writes: the body of a WRITE is copied, then a store fence,
 *       then its last 8 bytes (one aligned 8-byte store when aligned);
 *   (b) cache-line-atomic reads: each line is copied as a seqlock reader on
 *       its first 8 bytes (load, copy, acquire fence, re-load, retry on
 *       change). Exact for lines whose first word is a version that writers
 *       change before and after touching the line (the object layout);
 *   (c) every request is checked (key, generation, access, bounds,
 *       overflow) before it touches memory; failures complete with a status;
 *   (d) a dead peer is seen through a pidfd watched by one thread per
 *       fabric (poll(2) wakes when the process exits); a peer closed
 *       in-process is seen through the table's state word. Both are checked
 *       when a request runs and again when it completes;
 *   (e) fault injection: delayed completions, failed endpoints, paused
 *       endpoints or peers.
 * What may race: peers write their tables while we read them (generation
 * word with release/acquire); the watchdog sets peer->dead while posters
 * read it; tests set fault knobs from other threads (all atomics). A
 * non-shared CQ and its endpoints are used by one thread.
 *
 * Files (shm_int.h has the table layout and the objects): this one opens
 * and closes the fabric (data directory, lock, table) and does memory,
 * registration, completion queues, endpoints and fault injection;
 * shm_peer.c maps peers' tables, watches them die (the watchdog, the death
 * notice) and revokes access; shm_data.c is the data path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <libpmem.h>

#include "fabric/shm_int.h"
#include "util/log.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

/* ---- open / close -------------------------------------------------------- */

static int mkdir_p(const char *dir)
{
	char tmp[SHM_PATH_MAX];
	size_t len = strlen(dir);
	if (len == 0 || len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, dir, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static bool read_sysfs_word(const char *path, const char *word)
{
	char buf[256];
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* The selected value is shown in brackets: "always [advise] never". */
	char pat[64];
	snprintf(pat, sizeof(pat), "[%s]", word);
	return strstr(buf, pat) != NULL;
}

/* The huge= option of the tmpfs mount that holds @dir (the last mount of
 * the longest matching mount point wins), in @out; false when none. */
static bool tmpfs_huge_opt(const char *dir, char *out, size_t len)
{
	char real[PATH_MAX];
	if (!realpath(dir, real))
		return false;
	FILE *f = setmntent("/proc/mounts", "r");
	if (!f)
		return false;
	size_t best = 0;
	bool found = false;
	struct mntent *e;
	while ((e = getmntent(f))) {
		size_t l = strlen(e->mnt_dir);
		bool under = !strncmp(real, e->mnt_dir, l) &&
		             (real[l] == '/' || real[l] == 0 ||
		              (l == 1 && e->mnt_dir[0] == '/'));
		if (!under || l < best)
			continue;
		best = l;
		found = false;
		if (strcmp(e->mnt_type, "tmpfs"))
			continue;
		const char *h = hasmntopt(e, "huge");
		if (h && h[4] == '=') {
			snprintf(out, len, "%.*s", (int)strcspn(h + 5, ","),
			         h + 5);
			found = true;
		}
	}
	endmntent(f);
	return found;
}

static void probe_memory(struct shm_fabric *fab)
{
	struct statfs sf;
	if (statfs(fab->dir, &sf) != 0)
		return;
	if ((unsigned long)sf.f_type == HUGETLBFS_MAGIC) {
		fab->huge_ok = true;
	} else if ((unsigned long)sf.f_type == TMPFS_MAGIC) {
		/* A tmpfs mount's own huge= option decides (shmem_enabled
		 * covers only the kernel's internal mount, unless "force"). */
		const char *p =
		        "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
		char opt[32];
		fab->huge_ok = read_sysfs_word(p, "force") ||
		               (tmpfs_huge_opt(fab->dir, opt, sizeof(opt)) &&
		                (!strcmp(opt, "always") ||
		                 !strcmp(opt, "within_size") ||
		                 !strcmp(opt, "advise")));
		fab->thp_tmpfs = fab->huge_ok;
	}
	/* tmpfs and hugetlbfs are DRAM: a cache flush makes data as durable
	 * as the model (battery-backed DRAM) asks; a disk file needs msync. */
	fab->dax_like = (unsigned long)sf.f_type == TMPFS_MAGIC ||
	                (unsigned long)sf.f_type == HUGETLBFS_MAGIC;
}

/* Remove files a crashed incarnation left behind in our directory. */
static void remove_stale(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	unsigned n = 0;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		bool stale = (strncmp(e->d_name, "mem-", 4) == 0 && len > 7 &&
		              strcmp(e->d_name + len - 7, ".region") == 0) ||
		             strcmp(e->d_name, "fabric.table") == 0 ||
		             strcmp(e->d_name, "fabric.table.tmp") == 0;
		if (stale && unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	if (n)
		farm_info(
		        "shm: removed %u files of a previous incarnation in %s",
		        n, dir);
}

static int take_dir_lock(const char *dir, int *fd_out)
{
	char path[SHM_PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/fabric.lock", dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	for (int tries = 0; tries < 8; tries++) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			int e = errno;
			close(fd);
			return e == EWOULDBLOCK ? -EBUSY : -e;
		}
		/* A closing owner unlinks the file before releasing it: make
		 * sure the lock we hold is on the file at the path. */
		struct stat a, b;
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
			char pid[32];
			int n = snprintf(pid, sizeof(pid), "%d\n",
			                 (int)getpid());
			/* For people reading the directory; peers use the
			 * table. */
			if (ftruncate(fd, 0) != 0 ||
			    pwrite(fd, pid, (size_t)n, 0) != n)
				farm_dbg("shm: cannot record pid in %s", path);
			*fd_out = fd;
			return 0;
		}
		close(fd);
	}
	return -EBUSY;
}

static int shm_open_fabric(const farm_fabric_attr *attr, farm_fabric **out)
{
	if (!attr->data_dir || !*attr->data_dir) {
		farm_err("shm: a data directory is required");
		return -EINVAL;
	}
	if (strlen(attr->data_dir) >= SHM_DIR_MAX)
		return -ENAMETOOLONG;
	struct shm_fabric *fab = calloc(1, sizeof(*fab));
	if (!fab)
		return -ENOMEM;
	fab->base.ops = &farm_shm_ops;
	fab->base.machine_id = attr->machine_id;
	fab->base.wire = farm_fabric_wire_own();
	fab->lock_fd = -1;
	fab->wd_efd = -1;
	pthread_mutex_init(&fab->lock, NULL);
	pthread_mutex_init(&fab->death_mu, NULL);
	char *real = NULL;
	int rc = mkdir_p(attr->data_dir);
	if (rc)
		goto fail;
	real = realpath(attr->data_dir, NULL);
	if (!real || strlen(real) >= sizeof(fab->dir)) {
		rc = real ? -ENAMETOOLONG : -errno;
		goto fail;
	}
	strcpy(fab->dir, real);
	rc = take_dir_lock(fab->dir, &fab->lock_fd);
	if (rc) {
		if (rc == -EBUSY)
			farm_err("shm: %s is in use by a live machine",
			         fab->dir);
		goto fail;
	}
	remove_stale(fab->dir);
	probe_memory(fab);

	/* Build the table under a temporary name and rename it into place,
	 * so a peer never maps a half-written header. */
	char tmp[SHM_PATH_MAX], path[SHM_PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s/fabric.table.tmp", fab->dir);
	snprintf(path, sizeof(path), "%s/fabric.table", fab->dir);
	int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	if (posix_fallocate(fd, 0, sizeof(struct shm_table)) != 0) {
		rc = -ENOSPC;
		close(fd);
		goto fail;
	}
	void *t = mmap(NULL, sizeof(struct shm_table), PROT_READ | PROT_WRITE,
	               MAP_SHARED, fd, 0);
	close(fd);
	if (t == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	fab->table = t;
	uint64_t rnd[2] = {0, 0};
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		rnd[0] = farm_now_ns() ^ ((uint64_t)getpid() << 32);
		rnd[1] = rnd[0] * 0x9e3779b97f4a7c15ull;
	}
	struct shm_table_hdr *h = &fab->table->hdr;
	h->magic = SHM_MAGIC;
	h->layout = SHM_LAYOUT;
	h->machine_id = attr->machine_id;
	h->incarnation = rnd[0] | 1;
	h->pid = (int32_t)getpid();
	h->max_mr = SHM_MAX_MR;
	h->max_files = SHM_MAX_FILES;
	h->wire = fab->base.wire;
	fab->next_gen = ((rnd[1] & 0xffffffffull) << 8) | 1;
	fab->next_file_gen = (uint32_t)(rnd[1] >> 40) | 1;
	/* Release: pairs with the acquire load of the state in a peer's
	 * connect (shm_peer.c), which then reads the header written above. */
	atomic_store_explicit(&h->state, SHM_STATE_OPEN, memory_order_release);
	if (rename(tmp, path) != 0) {
		rc = -errno;
		goto fail;
	}
	free(real);
	*out = &fab->base;
	return 0;
fail:
	free(real);
	if (fab->table)
		munmap(fab->table, sizeof(struct shm_table));
	if (fab->lock_fd >= 0)
		close(fab->lock_fd);
	pthread_mutex_destroy(&fab->lock);
	pthread_mutex_destroy(&fab->death_mu);
	free(fab);
	return rc;
}

static void shm_mem_free(farm_mem *m);

static void shm_close_fabric(farm_fabric *f)
{
	struct shm_fabric *fab = to_fab(f);
	/* Peers see us closed from here on (pairs with peer_alive()). */
	atomic_store_explicit(&fab->table->hdr.state, SHM_STATE_CLOSED,
	                      memory_order_release);
	if (fab->wd_running) {
		atomic_store(&fab->wd_stop, 1);
		uint64_t one = 1;
		ssize_t w = write(fab->wd_efd, &one, sizeof(one));
		(void)w;
		pthread_join(fab->wd_thread, NULL);
		close(fab->wd_efd);
	}
	while (fab->mems) {
		farm_warn(
		        "shm: closing with memory still allocated; freeing it");
		shm_mem_free(&fab->mems->base);
	}
	while (fab->peers) {
		struct shm_peer *p = fab->peers;
		fab->peers = p->next;
		farm_shm_peer_free(p);
	}
	char path[SHM_PATH_MAX];
	snprintf(path, sizeof(path), "%s/fabric.table", fab->dir);
	unlink(path);
	munmap(fab->table, sizeof(struct shm_table));
	/* Unlink the lock file before dropping the lock: a machine starting
	 * on this directory re-checks the path after locking. */
	snprintf(path, sizeof(path), "%s/fabric.lock", fab->dir);
	unlink(path);
	close(fab->lock_fd);
	rmdir(fab->dir); /* only if empty: never removes the user's files */
	pthread_mutex_destroy(&fab->lock);
	pthread_mutex_destroy(&fab->death_mu);
	free(fab);
}

static int shm_address(const farm_fabric *f, char *buf, size_t len)
{
	const struct shm_fabric *fab = (const struct shm_fabric *)f;
	size_t n = strlen(fab->dir);
	if (n + 1 > len)
		return -ENOSPC;
	memcpy(buf, fab->dir, n + 1);
	return (int)n;
}

/* ---- memory -------------------------------------------------------------- */

/* Claim a free file slot for @m and name its file after the slot and a
 * generation, so a reused slot never reuses a name. */
static int take_file_slot(struct shm_fabric *fab, struct shm_mem *m)
{
	pthread_mutex_lock(&fab->lock);
	uint32_t slot = 0;
	while (slot < SHM_MAX_FILES && fab->file_used[slot])
		slot++;
	if (slot == SHM_MAX_FILES) {
		pthread_mutex_unlock(&fab->lock);
		return -EMFILE;
	}
	fab->file_used[slot] = true;
	m->slot = slot;
	m->gen = fab->next_file_gen++;
	pthread_mutex_unlock(&fab->lock);

	snprintf(m->path, sizeof(m->path), "%s/mem-%u-%llu.region", fab->dir,
	         slot, (unsigned long long)m->gen);
	snprintf(m->base.name, sizeof(m->base.name), "mem-%u-%llu.region", slot,
	         (unsigned long long)m->gen);
	return 0;
}

static void release_file_slot(struct shm_fabric *fab, struct shm_mem *m)
{
	pthread_mutex_lock(&fab->lock);
	fab->file_used[m->slot] = false;
	pthread_mutex_unlock(&fab->lock);
}

/* The mapping of a region file, as pmem_map_file returns it. */
struct region_map {
	void *addr;
	size_t mapped;
	int is_pmem;
};

/* Link the existing file @adopt under m->path and map it. Returns 0 with
 * rm->addr NULL when only the mapping failed (errno says why). */
static int map_adopted(struct shm_mem *m, const char *adopt, size_t size,
                       struct region_map *rm)
{
	struct stat ast;
	if (stat(adopt, &ast) != 0 || (uint64_t)ast.st_size != size ||
	    link(adopt, m->path) != 0) {
		int rc = errno ? -errno : -EINVAL;
		farm_err("shm: cannot adopt %s as %s: %s", adopt, m->path,
		         farm_strerror(rc));
		return rc;
	}
	rm->addr =
	        pmem_map_file(m->path, 0, 0, 0600, &rm->mapped, &rm->is_pmem);
	if (!rm->addr)
		unlink(m->path);
	return 0;
}

/* Sized but not allocated yet. tmpfs with shmem huge pages: the pages
 * come through the mapping once it is advised (advise_pages): libpmem's
 * posix_fallocate would allocate them first, as 4 KiB pages under
 * "advise" and "within_size". FARM_MEM_SPARSE: each page when first
 * written. Same return convention as map_adopted. */
static int map_sized(struct shm_mem *m, size_t size, struct region_map *rm)
{
	int fd = open(m->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		int rc = -errno;
		if (fd >= 0) {
			close(fd);
			unlink(m->path);
		}
		farm_err("shm: cannot create %zu-byte region file %s: %s", size,
		         m->path, farm_strerror(rc));
		return rc;
	}
	close(fd);
	rm->addr =
	        pmem_map_file(m->path, 0, 0, 0600, &rm->mapped, &rm->is_pmem);
	if (!rm->addr)
		unlink(m->path);
	return 0;
}

/* Create (or adopt) the region file and map it. */
static int map_region_file(struct shm_fabric *fab, struct shm_mem *m,
                           size_t size, unsigned flags, const char *adopt,
                           struct region_map *rm)
{
	int rc = 0;
	if (adopt) {
		rc = map_adopted(m, adopt, size, rm);
	} else if (fab->thp_tmpfs || (flags & FARM_MEM_SPARSE)) {
		rc = map_sized(m, size, rm);
	} else {
		/* Created and fully allocated (posix_fallocate) by libpmem,
		 * so a full file system is an error here, never a SIGBUS
		 * later. */
		rm->addr = pmem_map_file(m->path, size,
		                         PMEM_FILE_CREATE | PMEM_FILE_EXCL,
		                         0600, &rm->mapped, &rm->is_pmem);
	}
	if (rc)
		return rc;
	if (!rm->addr) {
		rc = errno ? -errno : -ENOMEM;
		farm_err("shm: cannot create %zu-byte region file %s: %s", size,
		         m->path, pmem_errormsg());
		return rc;
	}
	return 0;
}

/* pmem_map_file takes no address: reserve an aligned range and move the
 * mapping into it (mremap keeps the pages). On failure the mapping and
 * the file are gone. */
static int align_mapping(struct shm_mem *m, size_t size, struct region_map *rm)
{
	size_t span = size * 2;
	uint8_t *res = mmap(NULL, span, PROT_NONE,
	                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (res == MAP_FAILED) {
		int rc = -errno;
		pmem_unmap(rm->addr, rm->mapped);
		unlink(m->path);
		return rc;
	}
	uint8_t *al = (uint8_t *)(((uintptr_t)res + size - 1) &
	                          ~(uintptr_t)(size - 1));
	if (al > res)
		munmap(res, (size_t)(al - res));
	if (res + span > al + size)
		munmap(al + size, (size_t)(res + span - (al + size)));
	void *moved = mremap(rm->addr, rm->mapped, rm->mapped,
	                     MREMAP_MAYMOVE | MREMAP_FIXED, al);
	if (moved == MAP_FAILED) {
		int rc = -errno;
		munmap(al, size);
		pmem_unmap(rm->addr, rm->mapped);
		unlink(m->path);
		return rc;
	}
	if (rm->mapped < size)
		munmap(al + rm->mapped, size - rm->mapped);
	rm->addr = moved;
	return 0;
}

/* Ask for huge pages where the file system can have them, and on a THP
 * tmpfs allocate every page now. On failure the mapping and the file are
 * gone. */
static int advise_pages(struct shm_fabric *fab, struct shm_mem *m, size_t size,
                        unsigned flags, const struct region_map *rm)
{
	m->base.huge = false;
	/* Small pages, each when first touched: a huge page would back
	 * 2 MiB around every ring a peer writes, and readahead would fill
	 * the page cache around every page read (best effort both). */
	if (flags & FARM_MEM_SPARSE) {
		(void)madvise(rm->addr, rm->mapped, MADV_NOHUGEPAGE);
		(void)madvise(rm->addr, rm->mapped, MADV_RANDOM);
		return 0;
	}
	if (fab->huge_ok && madvise(rm->addr, rm->mapped, MADV_HUGEPAGE) == 0)
		m->base.huge = true;
	if (fab->thp_tmpfs &&
	    madvise(rm->addr, rm->mapped, MADV_POPULATE_WRITE) != 0) {
		/* Allocating every page now: a full tmpfs is an error here
		 * (ENOMEM, EFAULT), never a SIGBUS later. */
		int rc = errno == EFAULT || errno == ENOMEM ? -ENOSPC : -errno;
		farm_err("shm: cannot allocate the %zu-byte region file %s: %s",
		         size, m->path, farm_strerror(rc));
		pmem_unmap(rm->addr, rm->mapped);
		unlink(m->path);
		return rc;
	}
	static atomic_int warned;
	if (!m->base.huge && !atomic_exchange(&warned, 1))
		farm_info(
		        "shm: region files in %s use 4 KiB pages (not "
		        "hugetlbfs, and its tmpfs mount has no huge= option); "
		        "for 2 MiB pages: mount -o remount,huge=advise <mount "
		        "point>",
		        fab->dir);
	return 0;
}

/* @adopt: an existing file of @size bytes to map instead of a new one (a
 * restart, farm_mem_adopt): linked under the new name, so the old name
 * keeps the data until its owner removes it. */
static int shm_mem_map(farm_fabric *f, size_t size, unsigned flags,
                       const char *adopt, farm_mem **out)
{
	struct shm_fabric *fab = to_fab(f);
	if ((flags & FARM_MEM_REQUIRE_HUGE) && !fab->huge_ok) {
		farm_err(
		        "shm: huge pages required but %s cannot have them "
		        "(not hugetlbfs, and shmem transparent huge pages off)",
		        fab->dir);
		return -ENOTSUP;
	}
	struct shm_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	int rc = take_file_slot(fab, m);
	if (rc) {
		free(m);
		return rc;
	}
	struct region_map rm = {NULL, 0, 0};
	rc = map_region_file(fab, m, size, flags, adopt, &rm);
	if (rc)
		goto fail;
	m->map_len = rm.mapped;
	if (flags & FARM_MEM_ALIGN_SIZE && ((uintptr_t)rm.addr & (size - 1))) {
		rc = align_mapping(m, size, &rm);
		if (rc)
			goto fail;
	}
	rc = advise_pages(fab, m, size, flags, &rm);
	if (rc)
		goto fail;
	m->base.fab = f;
	m->base.addr = rm.addr;
	m->base.size = size;
	m->base.pmem = rm.is_pmem != 0;
	m->fs_is_dax_like = rm.is_pmem || fab->dax_like;
	pthread_mutex_lock(&fab->lock);
	m->next = fab->mems;
	fab->mems = m;
	pthread_mutex_unlock(&fab->lock);
	*out = &m->base;
	return 0;
fail:
	release_file_slot(fab, m);
	free(m);
	return rc;
}

static int shm_mem_alloc(farm_fabric *f, size_t size, unsigned flags,
                         farm_mem **out)
{
	return shm_mem_map(f, size, flags, NULL, out);
}

static int shm_mem_adopt(farm_fabric *f, const char *path, size_t size,
                         unsigned flags, farm_mem **out)
{
	return shm_mem_map(f, size, flags, path, out);
}

static int shm_mem_open(const farm_mem *mm)
{
	const struct shm_mem *m = (const struct shm_mem *)mm;
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

static void shm_mem_free(farm_mem *mm)
{
	struct shm_mem *m = (struct shm_mem *)mm;
	struct shm_fabric *fab = to_fab(mm->fab);
	pthread_mutex_lock(&fab->lock);
	for (struct shm_mem **pp = &fab->mems; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	}
	/* Registrations inside it die with it: peers get FARM_EREMOTE_KEY. */
	for (unsigned i = 0; i < SHM_MAX_MR; i++) {
		struct shm_table_mr *e = &fab->table->mr[i];
		if (atomic_load(&e->gen) && e->file == m->slot &&
		    e->file_gen == m->gen) /* release: pairs with resolve()'s */
			atomic_store_explicit(&e->gen, 0, memory_order_release);
	}
	fab->file_used[m->slot] = false;
	pthread_mutex_unlock(&fab->lock);
	pmem_unmap(mm->addr, m->map_len);
	unlink(m->path);
	free(m);
}

static int shm_mem_persist(const farm_mem *mm, const void *addr, size_t len)
{
	const struct shm_mem *m = (const struct shm_mem *)mm;
	if (m->fs_is_dax_like) {
		pmem_persist(addr, len);
		return 0;
	}
	return pmem_msync(addr, len) == 0 ? 0 : -errno;
}

/* ---- registration -------------------------------------------------------- */

static int shm_mr_reg(farm_fabric *f, void *addr, size_t len, unsigned access,
                      farm_mr **out)
{
	struct shm_fabric *fab = to_fab(f);
	struct shm_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->base.fab = f;
	mr->base.addr = addr;
	mr->base.len = len;
	mr->base.access = access;
	mr->idx = -1;
	mr->base.desc = (farm_mr_desc){.key = 0,
	                               .addr = (uint64_t)(uintptr_t)addr,
	                               .len = len,
	                               .machine = f->machine_id,
	                               .access = access};
	unsigned remote = access & ~(unsigned)FARM_ACCESS_LOCAL;
	if (!remote) {
		*out = &mr->base;
		return 0;
	}
	pthread_mutex_lock(&fab->lock);
	struct shm_mem *m = fab->mems;
	uintptr_t a = (uintptr_t)addr;
	for (; m; m = m->next) {
		uintptr_t b = (uintptr_t)m->base.addr;
		if (a >= b && len <= m->base.size &&
		    a - b <= m->base.size - len)
			break;
	}
	if (!m) {
		pthread_mutex_unlock(&fab->lock);
		free(mr);
		farm_err("shm: remote access needs memory from "
		         "farm_mem_alloc()");
		return -ENOTSUP;
	}
	unsigned idx = 0;
	while (idx < SHM_MAX_MR && atomic_load(&fab->table->mr[idx].gen))
		idx++;
	if (idx == SHM_MAX_MR) {
		pthread_mutex_unlock(&fab->lock);
		free(mr);
		return -ENOSPC;
	}
	uint64_t gen = fab->next_gen++ & SHM_GEN_MASK;
	if (!gen)
		gen = fab->next_gen++ & SHM_GEN_MASK;
	struct shm_table_mr *e = &fab->table->mr[idx];
	e->base = (uint64_t)a;
	e->len = len;
	e->file_off = (uint64_t)(a - (uintptr_t)m->base.addr);
	e->file = m->slot;
	e->file_gen = m->gen;
	e->access = access;
	/* Publish: pairs with the acquire load in resolve(). */
	atomic_store_explicit(&e->gen, gen, memory_order_release);
	pthread_mutex_unlock(&fab->lock);
	mr->idx = (int)idx;
	mr->base.desc.key = (gen << SHM_IDX_BITS) | idx;
	*out = &mr->base;
	return 0;
}

static void shm_mr_dereg(farm_mr *m)
{
	struct shm_mr *mr = (struct shm_mr *)m;
	struct shm_fabric *fab = to_fab(m->fab);
	if (mr->idx >= 0) {
		pthread_mutex_lock(&fab->lock);
		struct shm_table_mr *e = &fab->table->mr[mr->idx];
		uint64_t gen = m->desc.key >> SHM_IDX_BITS;
		/* Release: pairs with the acquire loads of the entry's gen in
		 * shm_data.c (resolve and the cached-entry checks). */
		if (atomic_load(&e->gen) == gen)
			atomic_store_explicit(&e->gen, 0, memory_order_release);
		pthread_mutex_unlock(&fab->lock);
	}
	free(mr);
}

/* ---- completion queues --------------------------------------------------- */

static int shm_cq_create(farm_fabric *f, unsigned depth, unsigned flags,
                         farm_cq **out)
{
	struct shm_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->base.fab = f;
	cq->shared = flags & FARM_CQ_SHARED;
	pthread_mutex_init(&cq->lock, NULL);
	*out = &cq->base;
	return 0;
}

static int shm_cq_destroy(farm_cq *c)
{
	struct shm_cq *cq = (struct shm_cq *)c;
	pthread_mutex_lock(&cq->lock);
	unsigned n = cq->neps;
	pthread_mutex_unlock(&cq->lock);
	if (n)
		return -EBUSY;
	pthread_mutex_destroy(&cq->lock);
	free(cq->eps);
	free(cq);
	return 0;
}

/* ---- endpoints ----------------------------------------------------------- */

static int shm_ep_connect(farm_fabric *f, farm_cq *c, uint32_t peer_id,
                          const char *peer_addr, const farm_ep_attr *attr,
                          farm_ep **out)
{
	struct shm_fabric *fab = to_fab(f);
	struct shm_cq *cq = (struct shm_cq *)c;
	char *real = realpath(peer_addr, NULL);
	if (!real)
		return -ECONNREFUSED;
	struct shm_peer *p = NULL;
	pthread_mutex_lock(&fab->lock);
	int rc = farm_shm_peer_get(fab, peer_id, real, &p);
	pthread_mutex_unlock(&fab->lock);
	free(real);
	if (rc)
		return rc;
	struct shm_ep *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	uint32_t depth = 1;
	while (depth < attr->sq_depth)
		depth <<= 1;
	ep->ops = calloc(depth, sizeof(*ep->ops));
	if (!ep->ops) {
		free(ep);
		return -ENOMEM;
	}
	ep->base.fab = f;
	ep->base.cq = c;
	ep->base.peer = peer_id;
	ep->cq = cq;
	ep->peer = p;
	ep->mask = depth - 1;
	ep->depth = attr->sq_depth;
	ep->shared = attr->flags & FARM_EP_SHARED;
	pthread_mutex_init(&ep->lock, NULL);

	pthread_mutex_lock(&cq->lock);
	if (cq->neps == cq->cap) {
		unsigned cap = cq->cap ? cq->cap * 2 : 8;
		struct shm_ep **eps = realloc(cq->eps, cap * sizeof(*eps));
		if (!eps) {
			pthread_mutex_unlock(&cq->lock);
			free(ep->ops);
			free(ep);
			return -ENOMEM;
		}
		cq->eps = eps;
		cq->cap = cap;
	}
	cq->eps[cq->neps++] = ep;
	pthread_mutex_unlock(&cq->lock);
	*out = &ep->base;
	return 0;
}

static void shm_ep_disconnect(farm_ep *e)
{
	struct shm_ep *ep = (struct shm_ep *)e;
	ep_lock(ep);
	ep->state = EP_CLOSED;
	ep_unlock(ep);
}

static void shm_ep_destroy(farm_ep *e)
{
	struct shm_ep *ep = (struct shm_ep *)e;
	struct shm_cq *cq = ep->cq;
	pthread_mutex_lock(&cq->lock);
	for (unsigned i = 0; i < cq->neps; i++) {
		if (cq->eps[i] == ep) {
			cq->eps[i] = cq->eps[--cq->neps];
			break;
		}
	}
	pthread_mutex_unlock(&cq->lock);
	pthread_mutex_destroy(&ep->lock);
	free(ep->inline_buf);
	free(ep->ops);
	free(ep);
}

static bool shm_ep_usable(const farm_ep *e)
{
	const struct shm_ep *ep = (const struct shm_ep *)e;
	return ep->state == EP_OK && peer_alive(ep->peer);
}

static int shm_ep_fault(farm_ep *e, enum farm_fault f, uint64_t arg)
{
	farm_faults_apply(&((struct shm_ep *)e)->faults, f, arg);
	return 0;
}

static int shm_fault_peer(farm_fabric *f, uint32_t peer_id, enum farm_fault fl,
                          uint64_t arg)
{
	struct shm_fabric *fab = to_fab(f);
	int rc = -ENOENT;
	pthread_mutex_lock(&fab->lock);
	for (struct shm_peer *p = fab->peers; p; p = p->next) {
		if (p->id == peer_id) {
			farm_faults_apply(&p->faults, fl, arg);
			rc = 0;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	return rc;
}

const struct farm_fabric_ops farm_shm_ops = {
        .name = "shm",
        .open = shm_open_fabric,
        .close = shm_close_fabric,
        .address = shm_address,
        .mem_alloc = shm_mem_alloc,
        .mem_adopt = shm_mem_adopt,
        .mem_free = shm_mem_free,
        .mem_open = shm_mem_open,
        .mem_persist = shm_mem_persist,
        .mr_reg = shm_mr_reg,
        .mr_dereg = shm_mr_dereg,
        .cq_create = shm_cq_create,
        .cq_destroy = shm_cq_destroy,
        .cq_poll = farm_shm_cq_poll,
        .ep_connect = shm_ep_connect,
        .ep_disconnect = shm_ep_disconnect,
        .ep_destroy = shm_ep_destroy,
        .ep_usable = shm_ep_usable,
        .ep_post = farm_shm_ep_post,
        .ep_back = farm_shm_ep_back,
        .ep_fault = shm_ep_fault,
        .revoke = farm_shm_revoke,
        .admit = farm_shm_admit,
        .on_peer_death = farm_shm_on_peer_death,
        .fault_peer = shm_fault_peer,
};
