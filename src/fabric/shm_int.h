/*
 * Internal to the shm provider: the shared table's layout, the provider's
 * objects, the helpers its files share and the functions one file calls in
 * another. shm.c: the head comment (design, emulated guarantees, what may
 * race), open / close (the data directory and the table), memory,
 * registration, completion queues, endpoints, fault injection, the ops
 * table; shm_peer.c: peers (their tables, liveness through the pidfd
 * watchdog, the death notice) and revoking a machine's access;
 * shm_data.c: the data path (resolve, execute, post, poll) and its
 * test-only knobs.
 */
#ifndef FARM_FABRIC_SHM_INT_H
#define FARM_FABRIC_SHM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/provider.h"
#include "util/common.h"

#define SHM_MAGIC        0x3142415446524146ull /* "FARFTAB1" */
#define SHM_LAYOUT       3u    /* 3: revoked and admitted for 1,024 ids */
#define SHM_MAX_IDS      1024u /* machine ids revoked and admitted */
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
	uint32_t wire; /* the wire version its machine speaks */
	uint8_t pad[64 - 48];
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
	/* Machines whose access the owner revoked (bit id % 64 of word
	 * id / 64): initiators check it before every doorbell
	 * (farm_fabric_revoke). */
	_Atomic uint64_t revoked[SHM_MAX_IDS / 64];
	/* Per machine id: the table incarnation of the process
	 * admitted under it (farm_fabric_admit, a new holder of a reused
	 * id); 0: any. An initiator of another incarnation is fenced like
	 * a revoked one, so the id's old holder stays out while its new
	 * holder is let in. */
	_Atomic uint64_t admitted[SHM_MAX_IDS];
};

_Static_assert(sizeof(struct shm_table_hdr) == 64, "header is one line");
_Static_assert(sizeof(struct shm_table_mr) == 64, "entry is one line");

/* ---- objects ------------------------------------------------------------- */

struct shm_fmap { /* one mapping of a peer's file; immutable once published */
	uint8_t *addr;
	size_t size;
	uint64_t gen;
	struct shm_fmap *retired_next;
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
	struct farm_faults faults; /* fabric-level faults on this peer */
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
	/* A READ of whole lines that passed every check at post, with no
	 * injected delay: posted and completed by the fast paths
	 * (shm_data.c, post_read and harvest_reads). */
	uint8_t fast;
};

_Static_assert(sizeof(struct shm_op) == 64, "an op is one line");

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
	struct farm_faults faults;
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

/* ---- across files -------------------------------------------------------- */

/* shm_peer.c */
void farm_shm_peer_free(struct shm_peer *p);
int farm_shm_peer_get(struct shm_fabric *fab, uint32_t peer_id, const char *dir,
                      struct shm_peer **out);
int farm_shm_on_peer_death(farm_fabric *f, farm_peer_death_fn fn, void *ctx);
int farm_shm_revoke(farm_fabric *f, uint32_t peer_id);
int farm_shm_admit(farm_fabric *f, uint32_t peer_id, const char *addr);

/* shm_data.c */
int farm_shm_ep_post(farm_ep *e, farm_wr *list, farm_wr **bad);
int farm_shm_ep_back(farm_ep *e, uint64_t raddr, uint64_t len, uint64_t rkey);
int farm_shm_cq_poll(farm_cq *c, int n, farm_wc *wc);

#endif
