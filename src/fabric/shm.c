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
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <libpmem.h>

#include "fabric/provider.h"
#include "fabric/shm_testing.h"
#include "util/lines.h"
#include "util/common.h"
#include "util/futex.h"
#include "util/log.h"
#include "util/rt.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

#define SHM_MAGIC        0x3142415446524146ull /* "FARFTAB1" */
#define SHM_LAYOUT       1u
#define SHM_IDX_BITS     12
#define SHM_MAX_MR       (1u << SHM_IDX_BITS)
#define SHM_MAX_FILES    1024u
#define SHM_GEN_MASK     ((1ull << (64 - SHM_IDX_BITS)) - 1)
#define SHM_STATE_OPEN   1ull
#define SHM_STATE_CLOSED 2ull
#define SHM_PATH_MAX     4096
#define SHM_DIR_MAX      (SHM_PATH_MAX - 96) /* room for our file names */
/* Lines prefetched when a READ is posted (the rest stream in behind). */
#define SHM_PREFETCH_LINES 32
/* Seqlock retries of one line before the copy is taken as it is: only a
 * line rewritten continuously for this long gets here (counted). */
#define SHM_LINE_RETRIES 1000000
/* Above this, memcpy may use non-temporal stores (glibc's threshold has a
 * floor of 0x4040 bytes), so the store fence before the last word is
 * needed; below it plain stores are already ordered on x86. */
#define SHM_NT_THRESHOLD 16384

/* ---- the shared table ---------------------------------------------------- */

struct shm_table_hdr {
	uint64_t magic;
	uint32_t layout;
	uint32_t machine_id;
	_Atomic uint64_t state; /* SHM_STATE_*: release on change */
	uint64_t incarnation;
	int32_t pid;
	uint32_t max_mr;
	uint32_t max_files;
	uint32_t pad0;
	/* Machines whose access the owner revoked (bit = machine id, < 64):
	 * initiators check it before every doorbell (farm_fabric_revoke). */
	_Atomic uint64_t revoked;
	uint8_t pad[64 - 56];
};

struct shm_table_mr {
	_Atomic uint64_t gen; /* 0: free. Written last (release). */
	uint64_t base;        /* owner's address of the first byte */
	uint64_t len;
	uint64_t file_off; /* offset of base in the file */
	uint64_t file_gen;
	uint32_t file; /* slot of mem-<file>-<file_gen>.region */
	uint32_t access;
	uint8_t pad[64 - 48];
};

struct shm_table {
	struct shm_table_hdr hdr;
	struct shm_table_mr mr[SHM_MAX_MR];
};

_Static_assert(sizeof(struct shm_table_hdr) == 64, "header is one line");
_Static_assert(sizeof(struct shm_table_mr) == 64, "entry is one line");

/* ---- test knobs ------------------------------------------------------------
 */

static atomic_int knob_line_atomic = 1;
static atomic_int knob_ordered_writes = 1;
static atomic_ullong stat_line_giveups;

int farm_shm_testing_set(enum farm_shm_knob knob, int value)
{
	switch (knob) {
	case FARM_SHM_KNOB_LINE_ATOMIC:
		return atomic_exchange(&knob_line_atomic, value);
	case FARM_SHM_KNOB_ORDERED_WRITES:
		return atomic_exchange(&knob_ordered_writes, value);
	}
	return -EINVAL;
}

uint64_t farm_shm_testing_line_giveups(void)
{
	return atomic_load(&stat_line_giveups);
}

/* ---- objects ---------------------------------------------------------------
 */

struct shm_fmap { /* one mapping of a peer's file; immutable once published */
	uint8_t *addr;
	size_t size;
	uint64_t gen;
	struct shm_fmap *retired_next;
};

struct shm_faults {
	_Atomic uint64_t delay_ns;
	atomic_int fail;
	atomic_int pause;
};

struct shm_fabric;

struct shm_peer {
	struct shm_fabric *fab;
	struct shm_peer *next; /* fab->peers */
	uint32_t id;
	char *dir;
	const struct shm_table *table; /* peer's table, read-only mapping */
	size_t table_size;
	uint64_t incarnation;
	int pidfd; /* -1 for a peer in this process */
	atomic_int dead;
	struct shm_faults faults; /* fabric-level faults on this peer */
	pthread_mutex_t map_lock;
	_Atomic(struct shm_fmap *) fmap[SHM_MAX_FILES];
	struct shm_fmap *retired;
};

struct shm_mem {
	struct farm_mem base;
	struct shm_mem *next;
	uint32_t slot;
	uint64_t gen;
	size_t map_len; /* what pmem_map_file mapped */
	char path[SHM_PATH_MAX];
	bool fs_is_dax_like; /* persist with pmem_persist, not msync */
};

struct shm_mr {
	struct farm_mr base;
	int idx; /* table entry, -1 for local-only */
};

struct shm_op {
	uint64_t wr_id;
	uint64_t ready_ns; /* delay fault: completion not before */
	void *local;
	uint8_t *rptr; /* resolved remote address */
	uint64_t compare, swap;
	uint32_t len;
	int32_t status;
	uint16_t opcode;
	uint16_t flags;
	uint8_t executed;
};

enum { EP_OK = 0, EP_ERROR = 1, EP_CLOSED = 2 };

struct shm_cq;

struct shm_ep {
	struct farm_ep base;
	struct shm_cq *cq;
	struct shm_peer *peer;
	struct shm_op *ops;
	uint8_t *inline_buf; /* FARM_INLINE_MAX per slot, on first use */
	uint32_t mask;
	uint32_t depth;
	uint32_t head; /* next to retire */
	uint32_t exec; /* next to execute */
	uint32_t tail; /* next free slot */
	int state;
	bool shared;
	pthread_mutex_t lock;
	struct shm_faults faults;
	/* The last registration resolved (valid while its entry keeps the
	 * key's generation: entries are never rewritten under one). */
	uint64_t rc_key;
	const struct shm_table_mr *rc_entry;
	uint64_t rc_base, rc_len;
	uint8_t *rc_ptr;
	uint32_t rc_access;
};

struct shm_cq {
	struct farm_cq base;
	bool shared;
	pthread_mutex_t lock;
	struct shm_ep **eps;
	unsigned neps, cap, rr;
};

struct shm_fabric {
	struct farm_fabric base;
	char dir[SHM_DIR_MAX];
	int lock_fd;
	struct shm_table *table;
	pthread_mutex_t lock; /* table slots, mems, peers, gen */
	uint64_t next_gen;
	uint32_t next_file_gen;
	bool file_used[SHM_MAX_FILES];
	struct shm_mem *mems;
	struct shm_peer *peers;
	bool huge_ok;   /* region files can get huge pages here */
	bool thp_tmpfs; /* tmpfs with shmem THP: populate after madvise */
	bool dax_like;  /* data dir is pmem or DRAM: persist = cache flush */
	/* watchdog */
	pthread_t wd_thread;
	bool wd_running;
	int wd_efd;
	atomic_int wd_stop;
	unsigned wd_gen; /* bumped when the watch set changes */
	/* farm_fabric_on_peer_death: called by the watchdog, under death_mu
	 * (so none runs once it is unset). */
	pthread_mutex_t death_mu;
	farm_peer_death_fn death_fn;
	void *death_ctx;
};

static inline struct shm_fabric *to_fab(farm_fabric *f)
{
	return (struct shm_fabric *)f;
}

/* ---- peers: liveness, mappings ---------------------------------------- */

static int sys_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline bool peer_alive(const struct shm_peer *p)
{
	/* dead: set by the watchdog (pairs with its release store); state:
	 * set CLOSED by the owner's close (release); incarnation: a restarted
	 * machine would have a new table, but we map the old inode. */
	if (atomic_load_explicit(&p->dead, memory_order_acquire))
		return false;
	return atomic_load_explicit(&p->table->hdr.state,
	                            memory_order_acquire) == SHM_STATE_OPEN;
}

static void *watchdog_main(void *arg)
{
	struct shm_fabric *fab = arg;
	struct pollfd pfd[1 + 256];
	struct shm_peer *who[1 + 256];
	/* The death notice is a failure detector: it must not wait behind
	 * busy threads for a time slice (a flake-hunt run at load 15 saw
	 * the first error 344 ms after kill -9, past the 100 ms bound). */
	int prc = farm_thread_set_realtime();
	if (prc)
		farm_dbg("shm: death watchdog at normal priority: %s",
		         strerror(prc));
	for (;;) {
		unsigned n = 1;
		pfd[0] = (struct pollfd){.fd = fab->wd_efd, .events = POLLIN};
		pthread_mutex_lock(&fab->lock);
		for (struct shm_peer *p = fab->peers; p && n < 257;
		     p = p->next) {
			if (p->pidfd < 0 || atomic_load(&p->dead))
				continue;
			pfd[n] = (struct pollfd){.fd = p->pidfd,
			                         .events = POLLIN};
			who[n++] = p;
		}
		pthread_mutex_unlock(&fab->lock);
		int r = poll(pfd, n, -1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			farm_err("shm: watchdog poll failed: %s",
			         strerror(errno));
			return NULL;
		}
		if (pfd[0].revents) {
			uint64_t v;
			ssize_t rr = read(fab->wd_efd, &v, sizeof(v));
			(void)rr;
			if (atomic_load(&fab->wd_stop))
				return NULL;
		}
		for (unsigned i = 1; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			/* Pairs with the acquire in peer_alive(). */
			atomic_store_explicit(&who[i]->dead, 1,
			                      memory_order_release);
			farm_info("shm: machine %u (%s) died", who[i]->id,
			          who[i]->dir);
			/* Requests to it fail from here; tell recovery. */
			pthread_mutex_lock(&fab->death_mu);
			if (fab->death_fn)
				fab->death_fn(fab->death_ctx, who[i]->id);
			pthread_mutex_unlock(&fab->death_mu);
		}
	}
}

static int watchdog_kick(struct shm_fabric *fab)
{
	/* Called with fab->lock held. */
	if (!fab->wd_running) {
		fab->wd_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (fab->wd_efd < 0)
			return -errno;
		int rc = pthread_create(&fab->wd_thread, NULL, watchdog_main,
		                        fab);
		if (rc) {
			close(fab->wd_efd);
			return -rc;
		}
		fab->wd_running = true;
		return 0;
	}
	uint64_t one = 1;
	ssize_t w = write(fab->wd_efd, &one, sizeof(one));
	(void)w;
	return 0;
}

static const struct shm_fmap *peer_file(struct shm_peer *p, uint32_t file,
                                        uint64_t gen)
{
	struct shm_fmap *m =
	        atomic_load_explicit(&p->fmap[file], memory_order_acquire);
	if (FARM_LIKELY(m && m->gen == gen))
		return m;

	pthread_mutex_lock(&p->map_lock);
	m = atomic_load_explicit(&p->fmap[file], memory_order_acquire);
	if (m && m->gen == gen)
		goto out;
	char path[SHM_PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/mem-%u-%llu.region", p->dir,
	                 file, (unsigned long long)gen);
	m = NULL;
	if (n < 0 || (size_t)n >= sizeof(path))
		goto out;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		farm_dbg("shm: cannot open %s: %s", path, strerror(errno));
		goto out;
	}
	struct stat st;
	void *addr = MAP_FAILED;
	if (fstat(fd, &st) == 0 && st.st_size > 0)
		addr = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
		            MAP_SHARED, fd, 0);
	close(fd);
	if (addr == MAP_FAILED)
		goto out;
	m = calloc(1, sizeof(*m));
	if (!m) {
		munmap(addr, (size_t)st.st_size);
		goto out;
	}
	m->addr = addr;
	m->size = (size_t)st.st_size;
	m->gen = gen;
	/* The old mapping may still be in use by another thread's request:
	 * keep it until the peer goes away. */
	struct shm_fmap *old = atomic_load(&p->fmap[file]);
	if (old) {
		old->retired_next = p->retired;
		p->retired = old;
	}
	/* Pairs with the acquire at the top. */
	atomic_store_explicit(&p->fmap[file], m, memory_order_release);
out:
	pthread_mutex_unlock(&p->map_lock);
	return m;
}

static void peer_free(struct shm_peer *p)
{
	for (unsigned i = 0; i < SHM_MAX_FILES; i++) {
		struct shm_fmap *m = atomic_load(&p->fmap[i]);
		if (m) {
			munmap(m->addr, m->size);
			free(m);
		}
	}
	while (p->retired) {
		struct shm_fmap *m = p->retired;
		p->retired = m->retired_next;
		munmap(m->addr, m->size);
		free(m);
	}
	if (p->table)
		munmap((void *)p->table, p->table_size);
	if (p->pidfd >= 0)
		close(p->pidfd);
	pthread_mutex_destroy(&p->map_lock);
	free(p->dir);
	free(p);
}

/* Is the lock file at @dir held by a live machine? */
static int dir_lock_held(const char *dir)
{
	char path[SHM_PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/fabric.lock", dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd); /* drops our shared lock if we got it */
	return held;
}

static int peer_open(struct shm_fabric *fab, uint32_t peer_id, const char *dir,
                     struct shm_peer **out)
{
	char path[SHM_PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/fabric.table", dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	if (dir_lock_held(dir) != 1)
		return -ECONNREFUSED;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ECONNREFUSED;
	struct stat st;
	if (fstat(fd, &st) != 0 ||
	    (size_t)st.st_size < sizeof(struct shm_table)) {
		close(fd);
		return -ECONNREFUSED;
	}
	const struct shm_table *t = mmap(NULL, sizeof(struct shm_table),
	                                 PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (t == MAP_FAILED)
		return -errno;
	int rc = -ECONNREFUSED;
	if (t->hdr.magic != SHM_MAGIC || t->hdr.layout != SHM_LAYOUT ||
	    atomic_load_explicit(&t->hdr.state, memory_order_acquire) !=
	            SHM_STATE_OPEN)
		goto fail_map;
	if (t->hdr.machine_id != peer_id) {
		farm_err("shm: the machine at %s is %u, not %u", dir,
		         t->hdr.machine_id, peer_id);
		rc = -EINVAL;
		goto fail_map;
	}
	struct shm_peer *p = calloc(1, sizeof(*p));
	if (!p) {
		rc = -ENOMEM;
		goto fail_map;
	}
	p->fab = fab;
	p->id = peer_id;
	p->dir = strdup(dir);
	p->table = t;
	p->table_size = sizeof(struct shm_table);
	p->incarnation = t->hdr.incarnation;
	p->pidfd = -1;
	pthread_mutex_init(&p->map_lock, NULL);
	if (!p->dir) {
		peer_free(p);
		return -ENOMEM;
	}
	pid_t pid = t->hdr.pid;
	if (pid != getpid()) {
		p->pidfd = sys_pidfd_open(pid);
		if (p->pidfd < 0) {
			rc = errno == ESRCH ? -ECONNREFUSED : -errno;
			peer_free(p);
			return rc;
		}
		/* The pid may have been reused between our reading it and
		 * pidfd_open: it is the machine only if the machine still
		 * holds its lock and still has this table in place. */
		struct stat now;
		if (dir_lock_held(dir) != 1 || stat(path, &now) != 0 ||
		    now.st_ino != st.st_ino ||
		    atomic_load(&t->hdr.state) != SHM_STATE_OPEN) {
			peer_free(p);
			return -ECONNREFUSED;
		}
	}
	*out = p;
	return 0;
fail_map:
	munmap((void *)t, sizeof(struct shm_table));
	return rc;
}

/* Find or open the peer; fab->lock held. */
static int peer_get(struct shm_fabric *fab, uint32_t peer_id, const char *dir,
                    struct shm_peer **out)
{
	for (struct shm_peer *p = fab->peers; p; p = p->next) {
		if (p->id == peer_id && strcmp(p->dir, dir) == 0 &&
		    peer_alive(p)) {
			*out = p;
			return 0;
		}
	}
	struct shm_peer *p;
	int rc = peer_open(fab, peer_id, dir, &p);
	if (rc)
		return rc;
	/* Peers live until the fabric closes: the watchdog and endpoints may
	 * point at them without reference counts. */
	p->next = fab->peers;
	fab->peers = p;
	if (p->pidfd >= 0) {
		rc = watchdog_kick(fab);
		if (rc)
			farm_warn("shm: cannot watch machine %u: %s", peer_id,
			          strerror(-rc));
	}
	*out = p;
	return 0;
}

/* ---- open / close ----------------------------------------------------------
 */

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
	fab->next_gen = ((rnd[1] & 0xffffffffull) << 8) | 1;
	fab->next_file_gen = (uint32_t)(rnd[1] >> 40) | 1;
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
		peer_free(p);
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

/* ---- memory
 * ------------------------------------------------------------------ */

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
	pthread_mutex_lock(&fab->lock);
	uint32_t slot = 0;
	while (slot < SHM_MAX_FILES && fab->file_used[slot])
		slot++;
	if (slot == SHM_MAX_FILES) {
		pthread_mutex_unlock(&fab->lock);
		free(m);
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
	size_t mapped = 0;
	int is_pmem = 0;
	int rc;
	void *addr;
	if (adopt) {
		struct stat ast;
		if (stat(adopt, &ast) != 0 || (uint64_t)ast.st_size != size ||
		    link(adopt, m->path) != 0) {
			rc = errno ? -errno : -EINVAL;
			farm_err("shm: cannot adopt %s as %s: %s", adopt,
			         m->path, farm_strerror(rc));
			goto fail;
		}
		addr = pmem_map_file(m->path, 0, 0, 0600, &mapped, &is_pmem);
		if (!addr)
			unlink(m->path);
	} else if (fab->thp_tmpfs) {
		/* tmpfs with shmem huge pages: sized but not allocated yet,
		 * so the pages come through the mapping once it is advised
		 * (below): libpmem's posix_fallocate would allocate them
		 * first, as 4 KiB pages under "advise" and "within_size". */
		int fd = open(m->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
		              0600);
		if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
			rc = -errno;
			if (fd >= 0) {
				close(fd);
				unlink(m->path);
			}
			farm_err("shm: cannot create %zu-byte region file %s: "
			         "%s",
			         size, m->path, farm_strerror(rc));
			goto fail;
		}
		close(fd);
		addr = pmem_map_file(m->path, 0, 0, 0600, &mapped, &is_pmem);
		if (!addr)
			unlink(m->path);
	} else {
		/* Created and fully allocated (posix_fallocate) by libpmem,
		 * so a full file system is an error here, never a SIGBUS
		 * later. */
		addr = pmem_map_file(m->path, size,
		                     PMEM_FILE_CREATE | PMEM_FILE_EXCL, 0600,
		                     &mapped, &is_pmem);
	}
	if (!addr) {
		rc = errno ? -errno : -ENOMEM;
		farm_err("shm: cannot create %zu-byte region file %s: %s", size,
		         m->path, pmem_errormsg());
		goto fail;
	}
	m->map_len = mapped;
	if (flags & FARM_MEM_ALIGN_SIZE && ((uintptr_t)addr & (size - 1))) {
		/* pmem_map_file takes no address: reserve an aligned range
		 * and move the mapping into it (mremap keeps the pages). */
		size_t span = size * 2;
		uint8_t *res = mmap(NULL, span, PROT_NONE,
		                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		                    -1, 0);
		if (res == MAP_FAILED) {
			rc = -errno;
			pmem_unmap(addr, mapped);
			unlink(m->path);
			goto fail;
		}
		uint8_t *al = (uint8_t *)(((uintptr_t)res + size - 1) &
		                          ~(uintptr_t)(size - 1));
		if (al > res)
			munmap(res, (size_t)(al - res));
		if (res + span > al + size)
			munmap(al + size, (size_t)(res + span - (al + size)));
		void *moved = mremap(addr, mapped, mapped,
		                     MREMAP_MAYMOVE | MREMAP_FIXED, al);
		if (moved == MAP_FAILED) {
			rc = -errno;
			munmap(al, size);
			pmem_unmap(addr, mapped);
			unlink(m->path);
			goto fail;
		}
		if (mapped < size)
			munmap(al + mapped, size - mapped);
		addr = moved;
	}
	m->base.huge = false;
	if (fab->huge_ok && madvise(addr, mapped, MADV_HUGEPAGE) == 0)
		m->base.huge = true;
	if (fab->thp_tmpfs && madvise(addr, mapped, MADV_POPULATE_WRITE) != 0) {
		/* Allocating every page now: a full tmpfs is an error here
		 * (ENOMEM, EFAULT), never a SIGBUS later. */
		rc = errno == EFAULT || errno == ENOMEM ? -ENOSPC : -errno;
		farm_err("shm: cannot allocate the %zu-byte region file %s: %s",
		         size, m->path, farm_strerror(rc));
		pmem_unmap(addr, mapped);
		unlink(m->path);
		goto fail;
	}
	static atomic_int warned;
	if (!m->base.huge && !atomic_exchange(&warned, 1))
		farm_info(
		        "shm: region files in %s use 4 KiB pages (not "
		        "hugetlbfs, and its tmpfs mount has no huge= option); "
		        "for 2 MiB pages: mount -o remount,huge=advise <mount "
		        "point>",
		        fab->dir);
	m->base.fab = f;
	m->base.addr = addr;
	m->base.size = size;
	m->base.pmem = is_pmem != 0;
	m->fs_is_dax_like = is_pmem || fab->dax_like;
	pthread_mutex_lock(&fab->lock);
	m->next = fab->mems;
	fab->mems = m;
	pthread_mutex_unlock(&fab->lock);
	*out = &m->base;
	return 0;
fail:
	pthread_mutex_lock(&fab->lock);
	fab->file_used[m->slot] = false;
	pthread_mutex_unlock(&fab->lock);
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
		    e->file_gen == m->gen)
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

/* ---- registration ----------------------------------------------------------
 */

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
		if (atomic_load(&e->gen) == gen)
			atomic_store_explicit(&e->gen, 0, memory_order_release);
		pthread_mutex_unlock(&fab->lock);
	}
	free(mr);
}

/* ---- completion queues -----------------------------------------------------
 */

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

/* ---- the data path
 * ------------------------------------------------------------ */

/*
 * Copy @len bytes from a peer's memory as a line-atomic DMA read would:
 * each 64-byte line is a seqlock reader section on the line's first word.
 * The writer discipline it is exact for (object layout, txn layer): change
 * the word (lock value), store the data, change the word again (new
 * version). x86 keeps the writer's stores and our loads in order, so equal
 * words before and after the copy mean no store to the line fell inside it.
 */
/* Copy @n bytes at @p, inside the line whose first word is @w, as a
 * seqlock read of that word (ARCHITECTURE.md 2.1). */
static inline void read_line(uint8_t *dst, const uint8_t *p, size_t n,
                             const _Atomic uint64_t *w)
{
	if (FARM_UNLIKELY(!farm_line_copy(dst, p, n, w, SHM_LINE_RETRIES)))
		atomic_fetch_add(&stat_line_giveups, 1);
}

static void read_lines(uint8_t *dst, const uint8_t *src, size_t len)
{
	if (FARM_UNLIKELY(!farm_lines_copy(dst, src, len, SHM_LINE_RETRIES)))
		atomic_fetch_add(&stat_line_giveups, 1);
}

/*
 * Test-only (knob LINE_ATOMIC = 0): a READ with no line atomicity, as a DMA
 * engine that is not line-atomic could do it: 8 bytes at a time, highest
 * address first, pausing between words. A bare memcpy of a line is not a
 * useful stand-in: on x86 the line arrives in the reader's cache whole, so
 * it tore 0 times in 10 million racing reads here, and would not show that
 * the torn-read test can fail.
 */
static void read_unsafe(uint8_t *dst, const uint8_t *src, size_t len)
{
	size_t i = len;
	while (i >= 8) {
		i -= 8;
		uint64_t w = atomic_load_explicit(
		        (const _Atomic uint64_t *)(const void *)(src + i),
		        memory_order_relaxed);
		memcpy(dst + i, &w, 8);
		for (int k = 0; k < 8; k++)
			farm_cpu_relax();
	}
	memcpy(dst, src, i);
}

/* read_lines() for a line-aligned source and a whole number of lines. */
static inline void read_whole_lines(uint8_t *dst, const uint8_t *src,
                                    size_t len)
{
	for (const uint8_t *p = src, *end = src + len; p < end;
	     p += FARM_CL, dst += FARM_CL)
		read_line(dst, p, FARM_CL, (const _Atomic uint64_t *)p);
}

/*
 * WRITE with increasing-address visibility for its last word: the body
 * first (its first 8 bytes as one store when aligned), a store fence
 * (non-temporal stores of a large memcpy are not ordered by TSO), then the
 * last 8 bytes, as one store when aligned.
 */
static void write_ordered(uint8_t *dst, const uint8_t *src, size_t len)
{
	if (len < 8) {
		memcpy(dst, src, len);
		return;
	}
	size_t body = len - 8;
	uint64_t last;
	memcpy(&last, src + body, 8);
	if (FARM_UNLIKELY(!atomic_load_explicit(&knob_ordered_writes,
	                                        memory_order_relaxed))) {
		/* Test-only: the broken order a test must catch. */
		memcpy(dst + body, &last, 8);
		atomic_signal_fence(memory_order_seq_cst);
		memcpy(dst, src, body);
		return;
	}
	if (((uintptr_t)dst & 7) == 0 && body >= 8) {
		/* The first word lands whole (one store), as it does from a
		 * NIC, so a reader that polls it (a ring's frame header) never
		 * sees it half written. */
		uint64_t first;
		memcpy(&first, src, 8);
		atomic_store_explicit((_Atomic uint64_t *)dst, first,
		                      memory_order_relaxed);
		memcpy(dst + 8, src + 8, body - 8);
	} else {
		memcpy(dst, src, body);
	}
	if (body >= SHM_NT_THRESHOLD)
		farm_store_fence();
	if (((uintptr_t)(dst + body) & 7) == 0) {
		/* W: release orders the body's stores before this one (a
		 * compiler barrier on x86); pairs with a reader's acquire
		 * load of the last word. */
		atomic_store_explicit((_Atomic uint64_t *)(dst + body), last,
		                      memory_order_release);
	} else {
		atomic_thread_fence(memory_order_release);
		memcpy(dst + body, &last, 8);
	}
}

static inline bool local_ok(const struct shm_ep *ep, const farm_wr *wr)
{
	const farm_mr *lmr = wr->lmr;
	if (!lmr || lmr->fab != ep->base.fab ||
	    !(lmr->access & FARM_ACCESS_LOCAL))
		return false;
	uintptr_t a = (uintptr_t)wr->local, b = (uintptr_t)lmr->addr;
	return a >= b && wr->len <= lmr->len && a - b <= lmr->len - wr->len;
}

/* Check a request against the peer's table; on success point op->rptr at
 * the bytes it names. Touches nothing. */
static int resolve(struct shm_ep *ep, struct shm_op *op, const farm_wr *wr)
{
	struct shm_peer *p = ep->peer;
	if (wr->len && !(wr->flags & FARM_WR_INLINE) &&
	    wr->opcode != FARM_WR_NOTIFY && !local_ok(ep, wr))
		return FARM_ELOCAL_ACCESS;
	if (wr->len == 0)
		return 0;
	uint64_t idx = wr->rkey & (SHM_MAX_MR - 1),
	         gen = wr->rkey >> SHM_IDX_BITS;
	unsigned need = wr->opcode == FARM_WR_READ  ? FARM_ACCESS_REMOTE_READ
	                : wr->opcode == FARM_WR_CAS ? FARM_ACCESS_REMOTE_ATOMIC
	                                            : FARM_ACCESS_REMOTE_WRITE;
	if (FARM_LIKELY(wr->rkey == ep->rc_key && ep->rc_entry &&
	                atomic_load_explicit(&ep->rc_entry->gen,
	                                     memory_order_acquire) == gen)) {
		if ((ep->rc_access & need) != need || wr->raddr < ep->rc_base ||
		    wr->len > ep->rc_len ||
		    wr->raddr - ep->rc_base > ep->rc_len - wr->len)
			return FARM_EREMOTE_ACCESS;
		if (wr->opcode == FARM_WR_CAS && (wr->raddr & 7))
			return -EINVAL;
		op->rptr = ep->rc_ptr + (wr->raddr - ep->rc_base);
		return 0;
	}
	const struct shm_table_mr *e = &p->table->mr[idx];
	/* Pairs with the release store in shm_mr_reg(). */
	if (gen == 0 ||
	    atomic_load_explicit(&e->gen, memory_order_acquire) != gen)
		return FARM_EREMOTE_KEY;
	uint64_t base = e->base, elen = e->len, foff = e->file_off;
	uint32_t file = e->file, acc = e->access;
	uint64_t fgen = e->file_gen;
	if ((acc & need) != need)
		return FARM_EREMOTE_ACCESS;
	if (wr->raddr < base || wr->len > elen ||
	    wr->raddr - base > elen - wr->len)
		return FARM_EREMOTE_ACCESS;
	if (wr->opcode == FARM_WR_CAS && (wr->raddr & 7))
		return -EINVAL;
	if (file >= SHM_MAX_FILES)
		return FARM_EREMOTE_KEY;
	const struct shm_fmap *m = peer_file(p, file, fgen);
	if (!m)
		return FARM_EREMOTE_KEY;
	/* The table is the peer's: check it against what we mapped. */
	if (foff > m->size || elen > m->size - foff)
		return FARM_EREMOTE_ACCESS;
	op->rptr = m->addr + foff + (wr->raddr - base);
	/* Entry fields were read after the acquire of gen; re-check it so
	 * the cache holds a consistent snapshot. */
	if (atomic_load_explicit(&e->gen, memory_order_acquire) == gen) {
		ep->rc_key = wr->rkey;
		ep->rc_entry = e;
		ep->rc_base = base;
		ep->rc_len = elen;
		ep->rc_ptr = m->addr + foff;
		ep->rc_access = acc;
	}
	return 0;
}

static inline int fault_status(const struct shm_ep *ep)
{
	if (atomic_load_explicit(&ep->faults.fail, memory_order_relaxed) ||
	    atomic_load_explicit(&ep->peer->faults.fail, memory_order_relaxed))
		return FARM_EINJECTED;
	return 0;
}

static inline bool paused(const struct shm_ep *ep)
{
	return atomic_load_explicit(&ep->faults.pause, memory_order_relaxed) ||
	       atomic_load_explicit(&ep->peer->faults.pause,
	                            memory_order_relaxed);
}

/* What every request executed now would fail with (0: none): checked once
 * per doorbell or harvest, not per request. */
static inline int run_status(const struct shm_ep *ep)
{
	if (!peer_alive(ep->peer))
		return FARM_EPEERDEAD;
	uint32_t me = ep->peer->fab->base.machine_id;
	if (me < 64 && (atomic_load_explicit(&ep->peer->table->hdr.revoked,
	                                     memory_order_acquire) >>
	                me) & 1)
		return FARM_EFENCED;
	return fault_status(ep);
}

/* FARM_WR_PERSIST: the target is a file in the peer's data directory,
 * which is on the same kind of file system as ours on one host. */
static void persist_remote(struct shm_ep *ep, struct shm_op *op)
{
	if (ep->peer->fab->dax_like) {
		pmem_persist(op->rptr, op->len);
		return;
	}
	uintptr_t page = (uintptr_t)op->rptr & ~(uintptr_t)4095;
	if (pmem_msync((void *)page, (uintptr_t)op->rptr + op->len - page))
		op->status = -errno;
}

/* Run op (the next unexecuted one) now; @st from run_status(). */
static void execute(struct shm_ep *ep, struct shm_op *op, int st)
{
	op->executed = 1;
	if (ep->state != EP_OK) {
		op->status = ep->state == EP_CLOSED ? -ENOTCONN : FARM_EFLUSHED;
		return;
	}
	if (op->status == 0)
		op->status = st;
	if (op->status) {
		ep->state = EP_ERROR;
		return;
	}
	if (op->len == 0)
		return;
	switch (op->opcode) {
	case FARM_WR_READ:
		if (FARM_LIKELY(atomic_load_explicit(&knob_line_atomic,
		                                     memory_order_relaxed)))
			read_lines(op->local, op->rptr, op->len);
		else
			read_unsafe(op->local, op->rptr, op->len);
		break;
	case FARM_WR_WRITE:
		write_ordered(op->rptr, op->local, op->len);
		if (op->flags & FARM_WR_PERSIST)
			persist_remote(ep, op);
		break;
	case FARM_WR_CAS: {
		uint64_t expect = op->compare;
		__atomic_compare_exchange_n((uint64_t *)(void *)op->rptr,
		                            &expect, op->swap, false,
		                            __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		memcpy(op->local, &expect, 8);
		break;
	}
	case FARM_WR_NOTIFY: {
		/* Dekker with the waiter: our earlier stores (the WRITEs before
		 * this request), full barrier, then the load of its word; the
		 * waiter stores the word, full barrier, re-checks its memory.
		 */
		atomic_thread_fence(memory_order_seq_cst);
		uint32_t *w = (uint32_t *)(void *)op->rptr;
		bool woke = false;
		/* Load first: most doorbells find the word clear, and a load
		 * does not take the line away from its owner. */
		if (__atomic_load_n(w, __ATOMIC_SEQ_CST) != 0 &&
		    __atomic_exchange_n(w, 0, __ATOMIC_SEQ_CST) != 0)
			woke = farm_futex_wake(w) > 0;
		op->len = woke ? 1 : 0;
		break;
	}
	}
}

static inline void ep_lock(struct shm_ep *ep)
{
	if (ep->shared)
		pthread_mutex_lock(&ep->lock);
}

static inline void ep_unlock(struct shm_ep *ep)
{
	if (ep->shared)
		pthread_mutex_unlock(&ep->lock);
}

static int shm_ep_post(farm_ep *e, farm_wr *list, farm_wr **bad)
{
	struct shm_ep *ep = (struct shm_ep *)e;
	int rc = 0;
	uint32_t last_write = UINT32_MAX;
	ep_lock(ep);
	uint64_t delay = atomic_load_explicit(&ep->faults.delay_ns,
	                                      memory_order_relaxed) +
	                 atomic_load_explicit(&ep->peer->faults.delay_ns,
	                                      memory_order_relaxed);
	uint64_t now = delay ? farm_now_ns() : 0;
	farm_wr *wr = list;
	uint32_t first = ep->tail;
	for (; wr; wr = wr->next) {
		rc = farm_wr_check(wr);
		if (rc)
			break;
		if (ep->tail - ep->head >= ep->depth) {
			rc = -EAGAIN;
			break;
		}
		struct shm_op *op = &ep->ops[ep->tail & ep->mask];
		op->wr_id = wr->wr_id;
		op->opcode = wr->opcode;
		op->flags = wr->flags;
		op->len = wr->len;
		op->local = wr->local;
		op->compare = wr->compare;
		op->swap = wr->swap;
		op->ready_ns = delay ? now + delay : 0;
		op->executed = 0;
		op->rptr = NULL;
		if (wr->flags & FARM_WR_INLINE) {
			if (!ep->inline_buf) {
				ep->inline_buf = malloc((size_t)ep->depth *
				                        FARM_INLINE_MAX);
				if (!ep->inline_buf) {
					rc = -ENOMEM;
					break;
				}
			}
			uint8_t *ib =
			        ep->inline_buf +
			        (size_t)(ep->tail & ep->mask) * FARM_INLINE_MAX;
			memcpy(ib, wr->local, wr->len);
			op->local = ib;
		}
		op->status = ep->state == EP_OK ? resolve(ep, op, wr) : 0;
		if (op->opcode != FARM_WR_READ || op->status != 0)
			last_write = ep->tail;
		ep->tail++;
	}
	/* Prefetch the new READs' lines in one tight loop, so their TLB
	 * misses and cache misses overlap (spread between requests' checks
	 * they each stall the core on a page walk). */
	for (uint32_t t = first; t != ep->tail; t++) {
		const struct shm_op *op = &ep->ops[t & ep->mask];
		if (op->opcode != FARM_WR_READ || op->status != 0)
			continue;
		const uint8_t *l =
		        (const uint8_t *)((uintptr_t)op->rptr & ~(uintptr_t)63);
		for (unsigned i = 0;
		     i < SHM_PREFETCH_LINES && l < op->rptr + op->len;
		     i++, l += FARM_CL)
			__builtin_prefetch(l, 0, 3);
	}
	/* Doorbell: run everything up to the last WRITE/CAS now, in order.
	 * READs after it stay queued (prefetched) until the poll. */
	if (last_write != UINT32_MAX && !paused(ep)) {
		int st = run_status(ep);
		while (ep->exec != last_write + 1) {
			execute(ep, &ep->ops[ep->exec & ep->mask], st);
			ep->exec++;
		}
	}
	ep_unlock(ep);
	if (bad)
		*bad = rc ? wr : NULL;
	return rc;
}

/* Harvest completions from one endpoint; returns how many were written. */
static int ep_harvest(struct shm_ep *ep, int n, farm_wc *wc, uint64_t *now)
{
	int got = 0;
	ep_lock(ep);
	if (paused(ep)) {
		ep_unlock(ep);
		return 0;
	}
	bool alive = peer_alive(ep->peer);
	int st = alive ? run_status(ep) : FARM_EPEERDEAD;
	/* Fast path: whole-line READs on a healthy endpoint (its state is
	 * re-checked per request: an earlier one may fail it). */
	bool fast = st == 0 && atomic_load_explicit(&knob_line_atomic,
	                                            memory_order_relaxed);
	while (ep->head != ep->tail && got < n) {
		struct shm_op *op = &ep->ops[ep->head & ep->mask];
		if (!op->executed) {
			if (FARM_LIKELY(fast && ep->state == EP_OK &&
			                op->opcode == FARM_WR_READ &&
			                op->status == 0 && op->len &&
			                ((op->len | (uintptr_t)op->rptr) &
			                 (FARM_CL - 1)) == 0)) {
				read_whole_lines(op->local, op->rptr, op->len);
				op->executed = 1;
			} else {
				execute(ep, op, st);
			}
			ep->exec++;
		}
		if (op->ready_ns) {
			if (!*now)
				*now = farm_now_ns();
			if (*now < op->ready_ns)
				break;
		}
		/* An outstanding request to a machine that died gets no ack
		 * on hardware: it fails, whether or not its bytes landed. */
		if (op->status == 0 && (!alive || ep->state == EP_CLOSED)) {
			op->status = alive ? -ENOTCONN : FARM_EPEERDEAD;
			if (ep->state == EP_OK)
				ep->state = EP_ERROR;
		}
		if (op->status || (op->flags & FARM_WR_SIGNALED)) {
			wc[got++] = (farm_wc){.wr_id = op->wr_id,
			                      .status = op->status,
			                      .opcode = op->opcode,
			                      .peer = ep->base.peer,
			                      .len = op->status ? 0 : op->len};
			if (op->opcode == FARM_WR_NOTIFY && op->status == 0)
				wc[got - 1].len = op->len;
		}
		ep->head++;
	}
	ep_unlock(ep);
	return got;
}

static int shm_cq_poll(farm_cq *c, int n, farm_wc *wc)
{
	struct shm_cq *cq = (struct shm_cq *)c;
	int got = 0;
	uint64_t now = 0;
	if (cq->shared)
		pthread_mutex_lock(&cq->lock);
	unsigned neps = cq->neps;
	for (unsigned i = 0; i < neps && got < n; i++) {
		struct shm_ep *ep = cq->eps[(cq->rr + i) % neps];
		if (ep->head != ep->tail)
			got += ep_harvest(ep, n - got, wc + got, &now);
	}
	if (neps)
		cq->rr = (cq->rr + 1) % neps;
	if (cq->shared)
		pthread_mutex_unlock(&cq->lock);
	return got;
}

/* ---- endpoints
 * ---------------------------------------------------------------- */

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
	int rc = peer_get(fab, peer_id, real, &p);
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

static void apply_fault(struct shm_faults *fs, enum farm_fault f, uint64_t arg)
{
	switch (f) {
	case FARM_FAULT_CLEAR:
		atomic_store(&fs->delay_ns, 0);
		atomic_store(&fs->fail, 0);
		atomic_store(&fs->pause, 0);
		break;
	case FARM_FAULT_DELAY: atomic_store(&fs->delay_ns, arg); break;
	case FARM_FAULT_FAIL: atomic_store(&fs->fail, arg != 0); break;
	case FARM_FAULT_PAUSE: atomic_store(&fs->pause, arg != 0); break;
	}
}

static int shm_ep_fault(farm_ep *e, enum farm_fault f, uint64_t arg)
{
	apply_fault(&((struct shm_ep *)e)->faults, f, arg);
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
			apply_fault(&p->faults, fl, arg);
			rc = 0;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	return rc;
}

static int shm_on_peer_death(farm_fabric *f, farm_peer_death_fn fn, void *ctx)
{
	struct shm_fabric *fab = to_fab(f);
	pthread_mutex_lock(&fab->death_mu);
	fab->death_fn = fn;
	fab->death_ctx = ctx;
	pthread_mutex_unlock(&fab->death_mu);
	return 0;
}

static int shm_revoke(farm_fabric *f, uint32_t peer_id)
{
	struct shm_fabric *fab = to_fab(f);
	if (peer_id >= 64)
		return -ERANGE;
	/* Initiators load it (acquire) before each doorbell. */
	atomic_fetch_or_explicit(&fab->table->hdr.revoked, 1ull << peer_id,
	                         memory_order_seq_cst);
	return 0;
}

const struct farm_fabric_ops farm_shm_ops = {
        .name = "shm",
        .open = shm_open_fabric,
        .close = shm_close_fabric,
        .address = shm_address,
        .mem_alloc = shm_mem_alloc,
        .mem_adopt = shm_mem_adopt,
        .mem_free = shm_mem_free,
        .mem_persist = shm_mem_persist,
        .mr_reg = shm_mr_reg,
        .mr_dereg = shm_mr_dereg,
        .cq_create = shm_cq_create,
        .cq_destroy = shm_cq_destroy,
        .cq_poll = shm_cq_poll,
        .ep_connect = shm_ep_connect,
        .ep_disconnect = shm_ep_disconnect,
        .ep_destroy = shm_ep_destroy,
        .ep_usable = shm_ep_usable,
        .ep_post = shm_ep_post,
        .ep_fault = shm_ep_fault,
        .revoke = shm_revoke,
        .on_peer_death = shm_on_peer_death,
        .fault_peer = shm_fault_peer,
};
