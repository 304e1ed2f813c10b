/*
 * shm provider: peers. A peer is a machine whose table (and, on demand,
 * region files) we map; it lives until the fabric closes. Its death is
 * seen through a pidfd watched by one thread per fabric (poll(2), no CPU
 * while idle), which marks it dead and calls the death notice. Revoking a
 * machine's access is a bit in our own table that initiators check. See
 * shm.c's head comment.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fabric/shm_int.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

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

/* Is @p an old holder of its id, another process admitted under it since
 * (farm_shm_admit)? Its death is no news of the id's holder: a notice
 * would have recovery remove the new one. Acquire: pairs with the
 * seq_cst store in farm_shm_admit. */
static bool old_holder(struct shm_fabric *fab, const struct shm_peer *p)
{
	uint64_t adm =
	        p->id < SHM_MAX_IDS
	                ? atomic_load_explicit(&fab->table->admitted[p->id],
	                                       memory_order_acquire)
	                : 0;
	if (!adm || adm == p->incarnation)
		return false;
	farm_info("shm: machine %u's old holder died: no death notice (a "
	          "new holder has its id)",
	          p->id);
	return true;
}

static void *watchdog_main(void *arg)
{
	struct shm_fabric *fab = arg;
	struct pollfd pfd[1 + 256];
	struct shm_peer *who[1 + 256];
	/* The death notice is a failure detector: it must not wait behind
	 * busy threads for a time slice (at load 15 an ordinary thread saw
	 * the first error 344 ms after kill -9, past the 100 ms bound). */
	int prc = farm_thread_set_detector_realtime();
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
			if (old_holder(fab, who[i]))
				continue;
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

void farm_shm_peer_free(struct shm_peer *p)
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
	/* The state's acquire load pairs with its release store at open
	 * (shm.c). */
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
	if (t->hdr.wire != fab->base.wire) {
		rc = farm_fabric_wire_refused(&fab->base, peer_id, dir,
		                              t->hdr.wire);
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
		farm_shm_peer_free(p);
		return -ENOMEM;
	}
	pid_t pid = t->hdr.pid;
	if (pid != getpid()) {
		p->pidfd = sys_pidfd_open(pid);
		if (p->pidfd < 0) {
			rc = errno == ESRCH ? -ECONNREFUSED : -errno;
			farm_shm_peer_free(p);
			return rc;
		}
		/* The pid may have been reused between our reading it and
		 * pidfd_open: it is the machine only if the machine still
		 * holds its lock and still has this table in place. */
		struct stat now;
		if (dir_lock_held(dir) != 1 || stat(path, &now) != 0 ||
		    now.st_ino != st.st_ino ||
		    atomic_load(&t->hdr.state) != SHM_STATE_OPEN) {
			farm_shm_peer_free(p);
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
int farm_shm_peer_get(struct shm_fabric *fab, uint32_t peer_id, const char *dir,
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

int farm_shm_on_peer_death(farm_fabric *f, farm_peer_death_fn fn, void *ctx)
{
	struct shm_fabric *fab = to_fab(f);
	pthread_mutex_lock(&fab->death_mu);
	fab->death_fn = fn;
	fab->death_ctx = ctx;
	pthread_mutex_unlock(&fab->death_mu);
	return 0;
}

int farm_shm_revoke(farm_fabric *f, uint32_t peer_id)
{
	struct shm_fabric *fab = to_fab(f);
	if (peer_id >= SHM_MAX_IDS)
		return -ERANGE;
	/* Initiators load it (acquire) before each doorbell. */
	atomic_fetch_or_explicit(&fab->table->revoked[peer_id / 64],
	                         1ull << (peer_id % 64), memory_order_seq_cst);
	return 0;
}

int farm_shm_admit(farm_fabric *f, uint32_t peer_id, const char *addr)
{
	struct shm_fabric *fab = to_fab(f);
	if (peer_id >= SHM_MAX_IDS || !addr)
		return -ERANGE;
	char *real = realpath(addr, NULL);
	if (!real)
		return -errno;
	pthread_mutex_lock(&fab->lock);
	struct shm_peer *p = NULL;
	int rc = farm_shm_peer_get(fab, peer_id, real, &p);
	uint64_t inc = rc ? 0 : p->incarnation;
	pthread_mutex_unlock(&fab->lock);
	if (FARM_FAULT_SWITCH(FARM_FP_FABRIC_ADMIT_ANY))
		inc = 0; /* testing: no incarnation, every holder let in */
	free(real);
	if (rc)
		return rc;
	/* The incarnation first, then the revocation lifted: an initiator
	 * that sees the bit clear sees the incarnation (both seq_cst;
	 * initiators load the bit, then the incarnation, with acquire). */
	atomic_store_explicit(&fab->table->admitted[peer_id], inc,
	                      memory_order_seq_cst);
	atomic_fetch_and_explicit(&fab->table->revoked[peer_id / 64],
	                          ~(1ull << (peer_id % 64)),
	                          memory_order_seq_cst);
	return 0;
}
