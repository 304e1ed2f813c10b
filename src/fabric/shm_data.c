/*
 * shm provider: the data path. Requests are checked against the peer's
 * table (resolve), run in post order (WRITE and CAS at post, READs copied
 * at poll, line-atomic), and completed only by farm_cq_poll(). Also the
 * test-only knobs that break a guarantee (shm_testing.h). See shm.c's head
 * comment.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpmem.h>

#include "fabric/shm_int.h"
#include "fabric/shm_testing.h"
#include "util/futex.h"
#include "util/lines.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/tsan.h"

/* ---- test knobs ---------------------------------------------------------- */

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

/* ---- peers' files, mapped on first use -------------------------------- */

static const struct shm_fmap *peer_file(struct shm_peer *p, uint32_t file,
                                        uint64_t gen)
{
	/* Acquire (both loads): pairs with the release store of the mapping
	 * below. */
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
	/* No readahead: a fault here (farm_ep_back's, a READ's) would read
	 * the neighbouring pages of a sparse region into memory with it,
	 * and those are rings and logs of other machines (best effort). */
	(void)madvise(addr, (size_t)st.st_size, MADV_RANDOM);
	/* A region its owner allocated whole (shm.c, advise_pages; made of
	 * 2 MiB pages where the mount allows) is mapped by 2 MiB entries
	 * here too only when this mapping asks for them; without, every
	 * READ of a large region misses the TLB as if the pages were small.
	 * A sparse one (rings, logs: FARM_MEM_SPARSE) is not: our faults in
	 * it (farm_ep_back, WRITEs) would allocate a 2 MiB page around each
	 * ring under a huge=advise or always mount, as the owner's
	 * MADV_NOHUGEPAGE avoids for its own. Advice only. */
	bool whole = (uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size;
	(void)madvise(addr, (size_t)st.st_size,
	              whole ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
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
	/* Pairs with the acquire loads at the top. */
	atomic_store_explicit(&p->fmap[file], m, memory_order_release);
out:
	pthread_mutex_unlock(&p->map_lock);
	return m;
}

/* ---- the data path ------------------------------------------------------- */

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
/* The copies below are a NIC's DMA read: they race by design with the
 * owner's stores and atomics on the same words (e.g. execute()'s NOTIFY
 * load/exchange of a doorbell word, or a txn's lock CAS), which the line
 * seqlock, not C11, makes safe. TSan is told to leave these reads
 * unchecked (pairs with those writers; src/util/tsan.h); the writers'
 * own accesses stay checked. */
static inline void read_line(uint8_t *dst, const uint8_t *p, size_t n,
                             const _Atomic uint64_t *w)
{
	FARM_TSAN_IGNORE_READS_BEGIN();
	bool ok = farm_line_copy(dst, p, n, w, SHM_LINE_RETRIES);
	FARM_TSAN_IGNORE_READS_END();
	if (FARM_UNLIKELY(!ok))
		atomic_fetch_add(&stat_line_giveups, 1);
}

static void read_lines(uint8_t *dst, const uint8_t *src, size_t len)
{
	FARM_TSAN_IGNORE_READS_BEGIN();
	bool ok = farm_lines_copy(dst, src, len, SHM_LINE_RETRIES);
	FARM_TSAN_IGNORE_READS_END();
	if (FARM_UNLIKELY(!ok))
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
 *
 * What readers rely on (README.md, "Guarantees"): the first and last
 * words are never seen half written, and a reader whose acquire load sees
 * the last word sees every byte before it. Where the first word lands
 * among the others is not promised (ofi lands it after the body too):
 * ring and log readers poll it only to learn where the last word is, and
 * trust nothing of the frame or record before that word is there. So the
 * first word's relaxed store below may become visible before or after
 * the bytes around it (C11 orders it only before the release store);
 * on x86 it follows them, which is the point (speed, not correctness).
 * No layer WRITEs lines that lock-free READs validate by version: those
 * are changed by their owner's own stores (txn install), and a single
 * WRITE could not change a version before and after the line anyway.
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
		 * sees it half written. It is stored after the bytes between
		 * it and the last word (only the last word's place is
		 * promised): a ring receiver that sees the header then finds
		 * the rest of the frame there, instead of pulling lines the
		 * writer has yet to store into (they would move between the
		 * two cores twice). */
		uint64_t first;
		memcpy(&first, src, 8);
		memcpy(dst + 8, src + 8, body - 8);
		atomic_store_explicit((_Atomic uint64_t *)dst, first,
		                      memory_order_relaxed);
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
	return farm_wr_local_ok(ep->base.fab, wr);
}

/* The remote access a request needs of the registration it names. */
static unsigned access_needed(unsigned opcode)
{
	return opcode == FARM_WR_READ  ? FARM_ACCESS_REMOTE_READ
	       : opcode == FARM_WR_CAS ? FARM_ACCESS_REMOTE_ATOMIC
	                               : FARM_ACCESS_REMOTE_WRITE;
}

/* Does [raddr, raddr + len) lie within [base, base + len)? Written so
 * that nothing overflows. */
static bool in_range(const farm_wr *wr, uint64_t base, uint64_t len)
{
	return wr->raddr >= base && wr->len <= len &&
	       wr->raddr - base <= len - wr->len;
}

/* Resolve against the endpoint's one-entry cache of the last key. */
static int resolve_cached(struct shm_ep *ep, struct shm_op *op,
                          const farm_wr *wr, unsigned need)
{
	if ((ep->rc_access & need) != need ||
	    !in_range(wr, ep->rc_base, ep->rc_len))
		return FARM_EREMOTE_ACCESS;
	if (wr->opcode == FARM_WR_CAS && (wr->raddr & 7))
		return -EINVAL;
	op->rptr = ep->rc_ptr + (wr->raddr - ep->rc_base);
	return 0;
}

/* Resolve against the peer's table entry @idx, which must still be of
 * generation @gen, and cache the entry when it was stable throughout. */
static int resolve_table(struct shm_ep *ep, struct shm_op *op,
                         const farm_wr *wr, unsigned need, uint64_t idx,
                         uint64_t gen)
{
	struct shm_peer *p = ep->peer;
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
	if (!in_range(wr, base, elen))
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
	 * the cache holds a consistent snapshot. Pairs with the release
	 * store in shm_mr_reg(), as above. */
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

/* Check a request against the peer's table; on success point op->rptr at
 * the bytes it names. Touches nothing. */
static int resolve(struct shm_ep *ep, struct shm_op *op, const farm_wr *wr)
{
	if (wr->len && !(wr->flags & FARM_WR_INLINE) &&
	    wr->opcode != FARM_WR_NOTIFY && !local_ok(ep, wr))
		return FARM_ELOCAL_ACCESS;
	if (wr->len == 0)
		return 0;
	uint64_t idx = wr->rkey & (SHM_MAX_MR - 1),
	         gen = wr->rkey >> SHM_IDX_BITS;
	unsigned need = access_needed(wr->opcode);
	/* Pairs with the release store in shm_mr_reg(). */
	if (FARM_LIKELY(wr->rkey == ep->rc_key && ep->rc_entry &&
	                atomic_load_explicit(&ep->rc_entry->gen,
	                                     memory_order_acquire) == gen))
		return resolve_cached(ep, op, wr, need);
	return resolve_table(ep, op, wr, need, idx, gen);
}

/* farm_ep_back: the peer's registration resolved as a WRITE there
 * would be, and its pages allocated through our mapping of its file
 * (MAP_SHARED: they are the file's, so they are the peer's memory). */
int farm_shm_ep_back(farm_ep *e, uint64_t raddr, uint64_t len, uint64_t rkey)
{
	struct shm_ep *ep = (struct shm_ep *)e;
	if (len > UINT32_MAX)
		return -EINVAL;
	farm_wr wr = {.opcode = FARM_WR_WRITE,
	              .flags = FARM_WR_INLINE, /* no local buffer */
	              .len = (uint32_t)len,
	              .raddr = raddr,
	              .rkey = rkey};
	struct shm_op op = {0};
	ep_lock(ep); /* the resolve cache is the endpoint's */
	int rc = ep->state == EP_OK ? resolve(ep, &op, &wr) : -ENOTCONN;
	ep_unlock(ep);
	if (!rc && !peer_alive(ep->peer))
		rc = FARM_EPEERDEAD;
	return rc ? rc : farm_mem_back(op.rptr, (size_t)len);
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
	/* Acquire: pairs with the peer's fetch_or of its revoked mask
	 * (shm_peer.c, seq_cst, hence a release). */
	if (me < SHM_MAX_IDS &&
	    (atomic_load_explicit(&ep->peer->table->revoked[me / 64],
	                          memory_order_acquire) >>
	     (me % 64)) &
	            1)
		return FARM_EFENCED;
	/* An old holder of a reused id: the target admitted another
	 * incarnation under it (farm_shm_admit; pairs with its seq_cst store).
	 */
	uint64_t adm =
	        me < SHM_MAX_IDS
	                ? atomic_load_explicit(&ep->peer->table->admitted[me],
	                                       memory_order_acquire)
	                : 0;
	if (adm && adm != ep->peer->fab->table->hdr.incarnation)
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

/*
 * What the post's fast path needs of the endpoint, in locals: its cached
 * registration, only while that entry still has the cached key's
 * generation (checked once per post: the requests of one list are posted
 * together, so a deregistration is ordered before or after all of them),
 * else an empty range that no request fits. A copy, so the compiler keeps
 * it in registers across the stores into the send ring.
 */
struct post_view {
	const farm_fabric *fab;
	uint64_t key, base, len;
	uint64_t wlen; /* the range a WRITE may name (REMOTE_WRITE), or 0 */
	uint8_t *ptr;
	uint64_t ready; /* the injected delay's completion time (0: none) */
};

static inline void post_view_load(const struct shm_ep *ep, struct post_view *v)
{
	v->fab = ep->base.fab;
	v->key = ep->rc_key;
	v->base = ep->rc_base;
	v->ptr = ep->rc_ptr;
	v->len = v->wlen = 0;
	/* Pairs with the release store in shm_mr_reg(). */
	if (ep->state == EP_OK && ep->rc_entry &&
	    atomic_load_explicit(&ep->rc_entry->gen, memory_order_acquire) ==
	            ep->rc_key >> SHM_IDX_BITS) {
		if (ep->rc_access & FARM_ACCESS_REMOTE_READ)
			v->len = ep->rc_len;
		if (ep->rc_access & FARM_ACCESS_REMOTE_WRITE)
			v->wlen = ep->rc_len;
	}
}

/* The fast paths' checks (farm_wr_check(), local_ok() and
 * resolve_cached() in one): @wr is an @opcode without flags but SIGNALED,
 * under the cached key, within @range bytes of its registration, from a
 * local buffer inside a LOCAL registration of this fabric. */
static inline bool fast_ok(const struct post_view *v, const farm_wr *wr,
                           uint16_t opcode, uint64_t range)
{
	uint32_t len = wr->len;
	uint64_t raddr = wr->raddr, off = raddr - v->base;
	const farm_mr *lmr = wr->lmr;
	uintptr_t a = (uintptr_t)wr->local;
	return wr->opcode == opcode &&
	       !(wr->flags & ~(unsigned)FARM_WR_SIGNALED) &&
	       wr->rkey == v->key && len != 0 && len <= FARM_FABRIC_MAX_OP &&
	       raddr >= v->base && len <= range && off <= range - len && a &&
	       lmr && lmr->fab == v->fab && (lmr->access & FARM_ACCESS_LOCAL) &&
	       a >= (uintptr_t)lmr->addr && len <= lmr->len &&
	       a - (uintptr_t)lmr->addr <= lmr->len - len;
}

/*
 * Prefetch a READ's lines at @p (line-aligned), @len bytes: its first line
 * into L1, the rest (up to SHM_PREFETCH_LINES in all) into L2, from where
 * the copy at poll takes them a few cycles later. A READ's time is its
 * prefetches waiting for a fill buffer (perf: nearly all of the post's
 * samples sit on them); each L1 prefetch holds one until its line is in,
 * so prefetching every line into L1 capped the lines in flight below
 * what a plain memcpy's loads reach. Measured on an Intel Xeon host
 * (fabric_bench, 2 MiB pages, 16 in flight, docs/benchmarks.md): READ
 * against memcpy at 256 B 0.53-0.57 with every line into L1, 0.62-0.63
 * so; 4 KiB 0.82-0.85 against 0.86-0.92; 64 B (one line) the same.
 * Slower: every line into L2 (at 64 B), only the first line (at 256 B),
 * one line of each 128-byte pair (the adjacent-line prefetcher does not
 * bring the other in time).
 * Always inline: a function of prefetches alone is pure to GCC when not
 * inlined, and its calls are deleted (ht_batch.c, batch_prefetch).
 */
static inline __attribute__((always_inline)) void
prefetch_read(const uint8_t *p, uint64_t len)
{
	const uint8_t *end = p + FARM_MIN(len, SHM_PREFETCH_LINES * FARM_CL);
	__builtin_prefetch(p, 0, 3);
	while ((p += FARM_CL) < end)
		__builtin_prefetch(p, 0, 1);
}

/*
 * The post's fast path: a READ of whole lines (objects, bucket pairs)
 * under the cached registration @v. It makes the checks farm_wr_check(),
 * local_ok() and resolve_cached() make, in one place, and fills only what
 * a READ uses; anything else (another opcode, a key not cached, part of a
 * line, an error to report) returns false and takes the general path,
 * which says why.
 *
 * It prefetches the READ's lines here, once its checks pass, rather than
 * in a loop after the list: the next request's checks then run while this
 * one's page walk and miss are under way. The prefetch is where a READ's
 * time goes (a page walk, which the copy at poll then finds done), so
 * fewer instructions per request mean more walks under way at once.
 */
static inline bool post_read(const struct post_view *v, struct shm_op *op,
                             const farm_wr *wr)
{
	if (!fast_ok(v, wr, FARM_WR_READ, v->len))
		return false;
	uint32_t len = wr->len;
	uint64_t off = wr->raddr - v->base;
	uint8_t *rptr = v->ptr + off;
	if (((uintptr_t)rptr | len) & (FARM_CL - 1))
		return false;
	op->wr_id = wr->wr_id;
	op->ready_ns = v->ready;
	op->local = wr->local;
	op->rptr = rptr;
	op->len = len;
	op->status = 0;
	op->opcode = FARM_WR_READ;
	op->flags = wr->flags;
	op->executed = 0;
	op->fast = v->ready == 0;
	prefetch_read(rptr, len);
	return true;
}

/*
 * The post's fast path for a WRITE without flags but SIGNALED (a message
 * frame, a head-back word from a registered buffer) under the cached
 * registration @v: the checks farm_wr_check(), local_ok() and
 * resolve_cached() make, in one place; anything else (INLINE, PERSIST, a
 * key not cached, an error to report) returns false and takes the general
 * path, which says why. A message's WRITE is on the round trip: the
 * general path's checks, one after the other, were a good part of it.
 */
static inline bool post_write(const struct post_view *v, struct shm_op *op,
                              const farm_wr *wr)
{
	if (!fast_ok(v, wr, FARM_WR_WRITE, v->wlen))
		return false;
	uint32_t len = wr->len;
	uint64_t off = wr->raddr - v->base;
	op->wr_id = wr->wr_id;
	op->ready_ns = v->ready;
	op->local = wr->local;
	op->rptr = v->ptr + off;
	op->len = len;
	op->status = 0;
	op->opcode = FARM_WR_WRITE;
	op->flags = wr->flags;
	op->executed = 0;
	op->fast = 0; /* retired by the harvest's general path */
	return true;
}

/* The general path of a post: queue @wr (checked) in @op, the slot at
 * ep->tail; 0 or the code the post fails with. */
static int post_general(struct shm_ep *ep, struct shm_op *op, farm_wr *wr,
                        uint64_t ready)
{
	int rc = farm_wr_check(wr);
	if (rc)
		return rc;
	if (ep->tail - ep->head >= ep->depth)
		return -EAGAIN;
	op->fast = 0;
	op->wr_id = wr->wr_id;
	op->opcode = wr->opcode;
	op->flags = wr->flags;
	op->len = wr->len;
	op->local = wr->local;
	op->compare = wr->compare;
	op->swap = wr->swap;
	op->ready_ns = ready;
	op->executed = 0;
	op->rptr = NULL;
	if (wr->flags & FARM_WR_INLINE) {
		if (!ep->inline_buf) {
			ep->inline_buf =
			        malloc((size_t)ep->depth * FARM_INLINE_MAX);
			if (!ep->inline_buf)
				return -ENOMEM;
		}
		uint8_t *ib = ep->inline_buf +
		              (size_t)(ep->tail & ep->mask) * FARM_INLINE_MAX;
		memcpy(ib, wr->local, wr->len);
		op->local = ib;
	}
	op->status = ep->state == EP_OK ? resolve(ep, op, wr) : 0;
	return 0;
}

/* Prefetch the lines of the general path's READs from ring position
 * @first on (post_read() prefetched its own) in one tight loop, so their
 * TLB misses and cache misses overlap. Always inline, as prefetch_read. */
static inline __attribute__((always_inline)) void
prefetch_general(const struct shm_ep *ep, uint32_t first)
{
	for (uint32_t t = first; t != ep->tail; t++) {
		const struct shm_op *op = &ep->ops[t & ep->mask];
		if (op->fast || op->opcode != FARM_WR_READ || op->status != 0)
			continue;
		uintptr_t a = (uintptr_t)op->rptr & ~(uintptr_t)(FARM_CL - 1);
		prefetch_read((const uint8_t *)a,
		              (uintptr_t)op->rptr + op->len - a);
	}
}

/*
 * Retire, at the head of the send ring, the requests that ran at this
 * post, succeeded and asked for no completion (messaging's unsignaled
 * WRITEs): no poll would report anything of them, so the completion
 * queue's next poll finds the ring empty instead of harvesting each (a
 * seventh of a messaging round trip). On hardware the ack of such a
 * WRITE comes as soon as it lands; one that failed, or a request behind
 * an unexecuted READ, stays for the poll, which reports failures.
 */
static inline void retire_quiet(struct shm_ep *ep)
{
	while (ep->head != ep->exec) {
		const struct shm_op *op = &ep->ops[ep->head & ep->mask];
		if (op->status || op->ready_ns ||
		    (op->flags & FARM_WR_SIGNALED) || !op->executed)
			return;
		ep->head++;
	}
}

int farm_shm_ep_post(farm_ep *e, farm_wr *list, farm_wr **bad)
{
	struct shm_ep *ep = (struct shm_ep *)e;
	int rc = 0;
	uint32_t last_write = UINT32_MAX;
	ep_lock(ep);
	uint64_t delay = atomic_load_explicit(&ep->faults.delay_ns,
	                                      memory_order_relaxed) +
	                 atomic_load_explicit(&ep->peer->faults.delay_ns,
	                                      memory_order_relaxed);
	uint64_t ready = delay ? farm_now_ns() + delay : 0;
	farm_wr *wr = list;
	uint32_t first = UINT32_MAX; /* the general path's first READ */
	struct post_view v = {.ready = ready};
	post_view_load(ep, &v);
	struct shm_op *ops = ep->ops;
	uint32_t tail = ep->tail, full = ep->head + ep->depth, mask = ep->mask;
	for (; wr; wr = wr->next) {
		struct shm_op *op = &ops[tail & mask];
		if (FARM_LIKELY(tail != full && post_read(&v, op, wr))) {
			tail++;
			continue;
		}
		if (tail != full && post_write(&v, op, wr)) {
			last_write = tail++;
			continue;
		}
		ep->tail = tail;
		rc = post_general(ep, op, wr, ready);
		if (rc)
			break;
		if (op->opcode != FARM_WR_READ || op->status != 0)
			last_write = ep->tail;
		else if (first == UINT32_MAX)
			first = ep->tail;
		tail = ++ep->tail;
		/* resolve() may have cached another registration. */
		post_view_load(ep, &v);
	}
	ep->tail = tail;
	if (first != UINT32_MAX)
		prefetch_general(ep, first);
	/* Doorbell: run everything up to the last WRITE/CAS now, in order.
	 * READs after it stay queued (prefetched) until the poll. */
	if (last_write != UINT32_MAX && !paused(ep)) {
		int st = run_status(ep);
		while (ep->exec != last_write + 1) {
			execute(ep, &ep->ops[ep->exec & ep->mask], st);
			ep->exec++;
		}
		retire_quiet(ep);
	}
	ep_unlock(ep);
	if (bad)
		*bad = rc ? wr : NULL;
	return rc;
}

/* Execute a request not yet executed. Fast path: a whole-line READ on a
 * healthy endpoint (its state is re-checked per request: an earlier one
 * may fail it). */
static void execute_pending(struct shm_ep *ep, struct shm_op *op, bool fast,
                            int st)
{
	if (FARM_LIKELY(
	            fast && ep->state == EP_OK && op->opcode == FARM_WR_READ &&
	            op->status == 0 && op->len &&
	            ((op->len | (uintptr_t)op->rptr) & (FARM_CL - 1)) == 0)) {
		read_whole_lines(op->local, op->rptr, op->len);
		op->executed = 1;
	} else {
		execute(ep, op, st);
	}
	ep->exec++;
}

/* An outstanding request to a machine that died gets no ack on hardware:
 * it fails, whether or not its bytes landed. */
static void fail_if_gone(struct shm_ep *ep, struct shm_op *op, bool alive)
{
	if (op->status == 0 && (!alive || ep->state == EP_CLOSED)) {
		op->status = alive ? -ENOTCONN : FARM_EPEERDEAD;
		if (ep->state == EP_OK)
			ep->state = EP_ERROR;
	}
}

static farm_wc op_wc(const struct shm_ep *ep, const struct shm_op *op)
{
	farm_wc w = {.wr_id = op->wr_id,
	             .status = op->status,
	             .opcode = op->opcode,
	             .peer = ep->base.peer,
	             .len = op->status ? 0 : op->len};
	if (op->opcode == FARM_WR_NOTIFY && op->status == 0)
		w.len = op->len;
	return w;
}

/*
 * The harvest's fast path: retire the READs at the head that post_read()
 * took (copying those not executed yet), up to @n completions; stops at
 * the first other request. Only for a healthy endpoint (run_status() 0,
 * state EP_OK, line atomicity on): then nothing can fail these READs, and
 * fail_if_gone() and the general path's checks have nothing to do.
 */
static inline int harvest_reads(struct shm_ep *ep, int n, farm_wc *wc)
{
	int got = 0;
	uint32_t head = ep->head, tail = ep->tail, exec = ep->exec;
	const struct shm_op *ops = ep->ops;
	uint32_t mask = ep->mask, peer = ep->base.peer;
	while (head != tail && got < n) {
		const struct shm_op *op = &ops[head & mask];
		/* status: a doorbell may have executed (and failed) it. */
		if (!op->fast || op->status)
			break;
		if (head == exec) { /* executed in order: not yet */
			read_whole_lines(op->local, op->rptr, op->len);
			exec++;
		}
		if (op->flags & FARM_WR_SIGNALED)
			wc[got++] = (farm_wc){.wr_id = op->wr_id,
			                      .opcode = FARM_WR_READ,
			                      .peer = peer,
			                      .len = op->len};
		head++;
	}
	ep->head = head;
	ep->exec = exec;
	return got;
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
	/* run_status() says FARM_EPEERDEAD exactly when the peer is gone. */
	int st = run_status(ep);
	bool alive = st != FARM_EPEERDEAD;
	bool fast = st == 0 && atomic_load_explicit(&knob_line_atomic,
	                                            memory_order_relaxed);
	if (FARM_LIKELY(fast && ep->state == EP_OK))
		got = harvest_reads(ep, n, wc);
	while (ep->head != ep->tail && got < n) {
		struct shm_op *op = &ep->ops[ep->head & ep->mask];
		if (!op->executed)
			execute_pending(ep, op, fast, st);
		if (op->ready_ns) { /* an injected delay */
			if (!*now)
				*now = farm_now_ns();
			if (*now < op->ready_ns)
				break;
		}
		fail_if_gone(ep, op, alive);
		if (op->status || (op->flags & FARM_WR_SIGNALED))
			wc[got++] = op_wc(ep, op);
		ep->head++;
	}
	ep_unlock(ep);
	return got;
}

int farm_shm_cq_poll(farm_cq *c, int n, farm_wc *wc)
{
	struct shm_cq *cq = (struct shm_cq *)c;
	int got = 0;
	uint64_t now = 0;
	if (cq->shared)
		pthread_mutex_lock(&cq->lock);
	unsigned neps = cq->neps;
	/* Round robin from cq->rr without a division per endpoint (polled
	 * in every loop pass). */
	unsigned j = cq->rr < neps ? cq->rr : 0;
	for (unsigned i = 0; i < neps && got < n; i++) {
		struct shm_ep *ep = cq->eps[j];
		if (++j == neps)
			j = 0;
		if (ep->head != ep->tail)
			got += ep_harvest(ep, n - got, wc + got, &now);
	}
	if (neps)
		cq->rr = cq->rr + 1 < neps ? cq->rr + 1 : 0;
	if (cq->shared)
		pthread_mutex_unlock(&cq->lock);
	return got;
}
