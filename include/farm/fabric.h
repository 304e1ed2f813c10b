/*
 * libfarm fabric: one-sided access to other machines' memory.
 *
 * This is the one place of libfarm that knows what an RDMA NIC is. A fabric
 * is opened with a provider chosen by name at run time:
 *   "shm"   machines are processes on one host; a one-sided operation is a
 *           copy done by the initiator on memory it has mapped. Default.
 *   "verbs" rdma-core (libibverbs + librdmacm): InfiniBand, RoCE, rxe, siw.
 *   "ofi"   libfabric: its "tcp;ofi_rxm" provider (software RMA over TCP,
 *           any network) by default, or another of its providers.
 *   "udp"   plain UDP datagrams, any network, no library: the target
 *           serves each one-sided request as a small RPC (eRPC-style
 *           sessions, credits, go-back-N retransmission).
 *
 * The model is that of RDMA verbs, simplified:
 *   - memory that peers may reach is registered (farm_mr_reg) and described
 *     to them by a farm_mr_desc, a plain 32-byte value they may copy freely;
 *   - an endpoint (farm_ep) connects this machine to one peer machine; work
 *     requests (READ, WRITE, CAS) are posted to it, singly or as a linked
 *     list rung with one doorbell, and execute asynchronously;
 *   - completions arrive through a completion queue (farm_cq) that the
 *     initiator polls. Only signaled requests produce a completion when they
 *     succeed; every failed request produces one, with a status. After a
 *     failure the endpoint is in the error state: every later request
 *     completes with FARM_EFLUSHED (as a verbs queue pair does).
 *
 * Guarantees every provider gives (ARCHITECTURE.md 2.1):
 *   - requests on one endpoint execute in the order they were posted;
 *   - a WRITE's last 8 bytes become visible only after all bytes before them,
 *     and its first and last 8 bytes, when 8-aligned, are never seen torn
 *     (a ring's frame header and trailer rely on both);
 *   - a READ is atomic per 64-byte cache line for lines whose first 8 bytes
 *     are a version that writers change before and after touching the line
 *     (real DMA is line-atomic outright; the shm provider emulates it with a
 *     per-line seqlock on that first word);
 *   - a CAS is atomic with respect to other CASes on the same 8 bytes.
 *
 * Threads: a farm_cq and the endpoints attached to it belong to one thread
 * unless created with FARM_EP_SHARED / FARM_CQ_SHARED; connecting and
 * destroying an endpoint of a non-shared CQ happen on that thread too.
 * Opening, memory and registration calls are thread-safe.
 *
 * Order: requests of one endpoint execute in post order and their
 * successful completions arrive in that order. A failure the provider
 * detects in software (verbs: a bad local buffer) may be reported before
 * the completions of requests posted earlier.
 */
#ifndef FARM_FABRIC_H
#define FARM_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <farm/error.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct farm_fabric farm_fabric;
typedef struct farm_mr farm_mr;
typedef struct farm_cq farm_cq;
typedef struct farm_ep farm_ep;
typedef struct farm_mem farm_mem;

/* Largest single READ or WRITE. */
#define FARM_FABRIC_MAX_OP (1u << 30)
/* Cache-line size the line-atomicity guarantee is stated in. */
#define FARM_CACHE_LINE 64

typedef struct farm_fabric_attr {
	/* "shm", "verbs", "ofi" or "udp"; NULL takes $FARM_FABRIC, else
	 * "shm". */
	const char *provider;
	/* This machine's identity, unique in the cluster. */
	uint32_t machine_id;
	/* shm: this machine's directory for region files and its liveness
	 * lock; peers reach the machine through it. verbs: used for nothing
	 * but diagnostics. Required for shm. */
	const char *data_dir;
	/* verbs, ofi, udp: "ip:port" to listen on for peers' connections
	 * (port 0: any free port). Give a concrete IP: a wildcard address is
	 * not one peers can connect to. Ignored by shm. ofi, udp: NULL is
	 * 127.0.0.1:0. */
	const char *listen_addr;
	/* verbs: device name (NULL: the first one). */
	const char *device;
	/* ofi: the libfabric provider (NULL: $FARM_OFI_PROVIDER, else
	 * "tcp;ofi_rxm"). It must offer RDM endpoints, RMA and atomics. */
	const char *ofi_provider;
} farm_fabric_attr;

/*
 * farm_fabric_open() - open a fabric for one machine.
 * Returns 0 and sets *out; -EINVAL for a bad attribute or unknown provider
 * name; FARM_ENODEVICE when the provider has no device here (verbs without
 * an RDMA NIC); -EBUSY when another live process holds @data_dir; other
 * negative errno values from the system.
 */
FARM_API FARM_MUST_CHECK int farm_fabric_open(const farm_fabric_attr *attr,
                                              farm_fabric **out);
/* Close: endpoints, CQs, registrations and memory must be released first;
 * whatever is left is released here. Peers see this machine as dead. */
FARM_API void farm_fabric_close(farm_fabric *fab);
FARM_API const char *farm_fabric_provider(const farm_fabric *fab);
FARM_API uint32_t farm_fabric_machine_id(const farm_fabric *fab);
/* The address peers pass to farm_ep_connect() to reach this machine
 * (shm: the data directory; verbs, ofi, udp: "ip:port"). Returns its length, or
 * -ENOSPC when @len is too small. */
FARM_API int farm_fabric_address(const farm_fabric *fab, char *buf, size_t len);
/* Whether @provider was built into this library. */
FARM_API bool farm_fabric_provider_available(const char *provider);

/* ---- memory ------------------------------------------------------------ */

enum farm_mem_flags {
	/* Align the memory to its size in the virtual address space (size must
	 * be a power of two). */
	FARM_MEM_ALIGN_SIZE = 1u << 0,
	/* Fail rather than fall back to small pages. */
	FARM_MEM_REQUIRE_HUGE = 1u << 1,
	/* Sized, not backed: a page takes memory when it is first written
	 * (by this process or by a peer's WRITE), so a large layout of
	 * which a few parts are used costs those parts (small pages). On
	 * shm a full file system then shows as SIGBUS at that write rather
	 * than here, unless the range was backed first (util/mem.h here,
	 * farm_ep_back from a peer). shm, udp and ofi; verbs backs it whole
	 * (registration pins the pages). Not with FARM_MEM_REQUIRE_HUGE. */
	FARM_MEM_SPARSE = 1u << 2,
};

/*
 * farm_mem_alloc() - memory that peers may reach once registered.
 * With shm, only such memory can be registered for remote access: it is a
 * file in the data directory, mapped with libpmem, that peers map by name.
 * With verbs it is anonymous memory. Both try huge pages first and log the
 * fallback. The memory is zeroed and fully backed (a full disk is reported
 * here as -ENOSPC, never later as a fault).
 */
FARM_API FARM_MUST_CHECK int farm_mem_alloc(farm_fabric *fab, size_t size,
                                            unsigned flags, farm_mem **out);
/* farm_mem_alloc's memory from the existing file @path of @size bytes
 * (shm: a previous incarnation's region file, which a restart maps again
 * instead of copying; the file keeps its old name too until the caller
 * removes it). -ENOTSUP for providers without files. */
FARM_API FARM_MUST_CHECK int farm_mem_adopt(farm_fabric *fab, const char *path,
                                            size_t size, unsigned flags,
                                            farm_mem **out);
FARM_API void farm_mem_free(farm_mem *mem);
FARM_API void *farm_mem_addr(const farm_mem *mem);
FARM_API size_t farm_mem_size(const farm_mem *mem);
/* Bytes of @mem in memory now (pages written by anyone, mincore), for
 * measurement: FARM_MEM_SPARSE memory costs only these. 0 on error. */
FARM_API uint64_t farm_mem_resident(const farm_mem *mem);
FARM_API bool farm_mem_is_huge(const farm_mem *mem);
/* Whether the memory is persistent memory (pmem_is_pmem). */
FARM_API bool farm_mem_is_pmem(const farm_mem *mem);
/* The file backing @mem in the data directory (shm: "mem-<slot>-<gen>.region",
 * which a whole-cluster restart reopens); "" for providers without files. */
FARM_API const char *farm_mem_file(const farm_mem *mem);
/* A read-only descriptor (O_CLOEXEC; the caller closes it) of the file
 * behind @mem, for looking at its contents without faulting its pages in:
 * lseek SEEK_DATA finds the holes a read through the mapping would
 * allocate. -ENOTSUP for providers without files (anonymous memory), or
 * -errno. */
FARM_API int farm_mem_open_file(const farm_mem *mem);
/* Make [addr, addr+len) durable: pmem_persist on persistent memory, msync
 * on a file, a store fence on DRAM. */
FARM_API FARM_MUST_CHECK int farm_mem_persist(const farm_mem *mem,
                                              const void *addr, size_t len);

/* ---- registration ------------------------------------------------------ */

enum farm_access {
	FARM_ACCESS_LOCAL = 1u << 0,         /* local buffer of requests */
	FARM_ACCESS_REMOTE_READ = 1u << 1,   /* peers may READ */
	FARM_ACCESS_REMOTE_WRITE = 1u << 2,  /* peers may WRITE */
	FARM_ACCESS_REMOTE_ATOMIC = 1u << 3, /* peers may CAS */
	FARM_ACCESS_ALL = 0xf,
};

/* What a peer needs to reach a registration. A plain value: copy it, send
 * it, store it. Only the owner's farm_mr_reg() makes valid ones. */
typedef struct farm_mr_desc {
	uint64_t key;     /* provider-specific (verbs: rkey) */
	uint64_t addr;    /* first byte, in the owner's address space */
	uint64_t len;     /* bytes */
	uint32_t machine; /* the owner's machine id */
	uint32_t access;  /* enum farm_access */
} farm_mr_desc;

/*
 * farm_mr_reg() - register [addr, addr+len) with the fabric.
 * Remote access needs memory from farm_mem_alloc() with shm (-ENOTSUP
 * otherwise). Returns -EINVAL for a NULL/empty/overflowing range or access 0.
 */
FARM_API FARM_MUST_CHECK int farm_mr_reg(farm_fabric *fab, void *addr,
                                         size_t len, unsigned access,
                                         farm_mr **out);
/* Deregister: later requests naming its descriptor fail with
 * FARM_EREMOTE_KEY (shm) or FARM_EREMOTE_ACCESS (verbs: a NIC reports key
 * and range errors alike). */
FARM_API void farm_mr_dereg(farm_mr *mr);
FARM_API farm_mr_desc farm_mr_describe(const farm_mr *mr);

/* ---- completion queues ------------------------------------------------- */

enum farm_cq_flags {
	FARM_CQ_SHARED = 1u << 0, /* polled by several threads (locks) */
};

FARM_API FARM_MUST_CHECK int farm_cq_create(farm_fabric *fab, unsigned depth,
                                            unsigned flags, farm_cq **out);
/* @depth: completions it can hold; with verbs it must cover the sum of
 * the sq_depth of the endpoints attached (the provider grows it where the
 * device allows). The shm provider's queue is unbounded. */
/* Destroy; endpoints attached to it must be destroyed first (-EBUSY). */
FARM_API FARM_MUST_CHECK int farm_cq_destroy(farm_cq *cq);

enum farm_wr_opcode {
	FARM_WR_READ = 1,
	FARM_WR_WRITE = 2,
	FARM_WR_CAS = 3,
	/* Doorbell for a parked peer thread (shm, ofi; verbs: -ENOTSUP at
	 * post). Executes after the requests posted before it: with a full
	 * barrier between their stores and the check, if the 4-byte word at
	 * raddr (4-aligned, in a registration with REMOTE_WRITE) is non-zero,
	 * it is set to zero and threads of the owner waiting on it
	 * (farm_wait_word) are woken. Zeroing closes the race with an owner
	 * that checked for work just before the WRITEs and is about to sleep:
	 * its farm_wait_word(word, non-zero) then returns at once. len is 4
	 * and local may be NULL. Its wc.len is 1 when it woke someone (shm;
	 * ofi, udp: always 0). */
	FARM_WR_NOTIFY = 4,
};

typedef struct farm_wc {
	uint64_t wr_id;  /* as posted */
	int32_t status;  /* 0, or a negative code (farm_strerror) */
	uint16_t opcode; /* enum farm_wr_opcode */
	uint16_t pad;
	uint32_t peer; /* the endpoint's peer machine id */
	uint32_t len;  /* bytes transferred on success */
} farm_wc;

/*
 * farm_cq_poll() - run the fabric and harvest up to @n completions.
 * Returns how many were written to @wc (0 when none are ready), or a
 * negative code for a bad argument. Never blocks.
 */
FARM_API FARM_MUST_CHECK int farm_cq_poll(farm_cq *cq, int n, farm_wc *wc);

/* ---- endpoints --------------------------------------------------------- */

enum farm_ep_flags {
	FARM_EP_SHARED = 1u << 0, /* posted to by several threads (locks) */
};

typedef struct farm_ep_attr {
	unsigned sq_depth; /* requests outstanding at once (0: 256) */
	unsigned flags;    /* enum farm_ep_flags */
} farm_ep_attr;

/*
 * farm_ep_connect() - connect to machine @peer_id reachable at @peer_addr
 * (its farm_fabric_address()). Completions go to @cq. @attr may be NULL.
 * Returns -ECONNREFUSED when no live machine is there, -EINVAL when the
 * machine there is not @peer_id, -ETIMEDOUT when nothing answered in time
 * (a fabric that cannot tell a slow peer from a dead one, such as udp: a
 * later connect may succeed).
 */
FARM_API FARM_MUST_CHECK int
farm_ep_connect(farm_fabric *fab, farm_cq *cq, uint32_t peer_id,
                const char *peer_addr, const farm_ep_attr *attr, farm_ep **out);
/* Move to the error state: requests still queued and any posted later
 * complete with -ENOTCONN. The handle stays valid until destroyed. */
FARM_API void farm_ep_disconnect(farm_ep *ep);
/* Destroy; requests still queued are dropped without completions. */
FARM_API void farm_ep_destroy(farm_ep *ep);
FARM_API uint32_t farm_ep_peer(const farm_ep *ep);
/* Whether the endpoint can still carry requests (not in the error state
 * and the peer is not known dead). */
FARM_API bool farm_ep_usable(const farm_ep *ep);

enum farm_wr_flags {
	FARM_WR_SIGNALED = 1u << 0, /* completion on success too */
	FARM_WR_INLINE = 1u << 1,   /* WRITE: copy the payload at post time;
	                               lmr may be NULL; len <= FARM_INLINE_MAX */
	/* WRITE: the bytes are durable in the target's memory by the time
	 * the request completes. shm: flushed from the CPU caches
	 * (pmem_persist) when the target's data directory is persistent
	 * memory or DRAM (tmpfs: FaRM's battery-backed DRAM), msync'ed when
	 * it is a disk (a page write per request: slow). verbs: the NIC's
	 * completion is taken as durability, FaRM's model of non-volatile
	 * DRAM; no flush is issued. */
	FARM_WR_PERSIST = 1u << 2,
};
#define FARM_INLINE_MAX 256

typedef struct farm_wr {
	struct farm_wr *next; /* list rung with one doorbell; NULL ends it */
	uint64_t wr_id;
	uint16_t opcode; /* enum farm_wr_opcode */
	uint16_t flags;  /* enum farm_wr_flags */
	uint32_t len;    /* READ/WRITE bytes; CAS: 8 */
	void *local;     /* READ: destination; WRITE: source; CAS: 8 bytes
	                    receiving the value found */
	farm_mr *lmr;    /* registration holding @local (ACCESS_LOCAL) */
	uint64_t raddr;  /* remote address, in the owner's address space */
	uint64_t rkey;   /* farm_mr_desc.key of a registration holding it */
	uint64_t compare, swap; /* CAS: 8-byte aligned raddr */
} farm_wr;

/*
 * farm_ep_post() - post a list of work requests (one doorbell).
 * Returns 0 once all are queued. On an immediate error (a malformed request:
 * bad opcode, CAS length not 8, inline too large; -EAGAIN when the send
 * queue is full) returns it and sets *bad (if not NULL) to the first request
 * not queued; those before it are queued. Remote problems (bad range,
 * unknown key, dead peer) are never returned here: they arrive as
 * completions, as they do on hardware.
 */
FARM_API FARM_MUST_CHECK int farm_ep_post(farm_ep *ep, farm_wr *list,
                                          farm_wr **bad);

/* Helpers that fill a request for a registration's descriptor. */
static inline farm_wr farm_wr_read(uint64_t wr_id, void *dst, farm_mr *lmr,
                                   uint32_t len, const farm_mr_desc *rd,
                                   uint64_t roff)
{
	/* Every member named: C++ -Wextra warns about {0}. */
	farm_wr wr = {NULL, 0, 0, 0, 0, NULL, NULL, 0, 0, 0, 0};
	wr.wr_id = wr_id;
	wr.opcode = FARM_WR_READ;
	wr.flags = FARM_WR_SIGNALED;
	wr.len = len;
	wr.local = dst;
	wr.lmr = lmr;
	wr.raddr = rd->addr + roff;
	wr.rkey = rd->key;
	return wr;
}

static inline farm_wr farm_wr_write(uint64_t wr_id, const void *src,
                                    farm_mr *lmr, uint32_t len,
                                    const farm_mr_desc *rd, uint64_t roff)
{
	farm_wr wr = farm_wr_read(wr_id, (void *)src, lmr, len, rd, roff);
	wr.opcode = FARM_WR_WRITE;
	return wr;
}

static inline farm_wr farm_wr_cas(uint64_t wr_id, uint64_t *result,
                                  farm_mr *lmr, const farm_mr_desc *rd,
                                  uint64_t roff, uint64_t compare,
                                  uint64_t swap)
{
	farm_wr wr = farm_wr_read(wr_id, result, lmr, 8, rd, roff);
	wr.opcode = FARM_WR_CAS;
	wr.compare = compare;
	wr.swap = swap;
	return wr;
}

static inline farm_wr farm_wr_notify(uint64_t wr_id, const farm_mr_desc *rd,
                                     uint64_t roff)
{
	farm_wr wr = farm_wr_read(wr_id, NULL, NULL, 4, rd, roff);
	wr.opcode = FARM_WR_NOTIFY;
	wr.flags = 0;
	return wr;
}

/*
 * farm_wait_word() - sleep while the 4-byte word at @addr, in this
 * machine's memory from farm_mem_alloc(), holds @expected, for at most
 * @timeout_ns (0: no limit). Peers wake it with FARM_WR_NOTIFY. Returns 0
 * when woken or the word differs, -ETIMEDOUT, -EINTR. Spurious wake-ups
 * happen: re-check the condition.
 */
FARM_API int farm_wait_word(const uint32_t *addr, uint32_t expected,
                            uint64_t timeout_ns);
/* If the word at @addr is non-zero, zero it and wake local waiters on it
 * (what FARM_WR_NOTIFY does for a peer). */
FARM_API void farm_wake_word(const uint32_t *addr);

/* ---- fault injection (tests) ------------------------------------------ */

enum farm_fault {
	FARM_FAULT_CLEAR = 0, /* undo every fault on the target */
	FARM_FAULT_DELAY = 1, /* arg: completions arrive >= arg ns after post */
	FARM_FAULT_FAIL = 2,  /* every request fails with FARM_EINJECTED */
	FARM_FAULT_PAUSE = 3, /* arg 1: requests wait, unexecuted; arg 0: go */
};

/*
 * farm_fabric_on_peer_death() - @fn(@ctx, peer) runs, on a thread of the
 * fabric's, when it learns that a connected peer's process died (shm: the
 * watchdog's pidfd), once requests to it fail. One callback per fabric;
 * NULL unsets it, and none runs once that returns. Recovery takes it as a
 * suspicion, faster than a lease. -ENOTSUP where the provider has none.
 */
typedef void (*farm_peer_death_fn)(void *ctx, uint32_t peer_id);
FARM_API FARM_MUST_CHECK int
farm_fabric_on_peer_death(farm_fabric *fab, farm_peer_death_fn fn, void *ctx);

/*
 * farm_fabric_revoke() - fence machine @peer_id off this machine's memory:
 * its one-sided READs, WRITEs and CAS on every registration here fail with
 * FARM_EFENCED from now on (recovery does it to a removed machine, FaRM's
 * teardown of its queue pairs). shm: a bit in this machine's registration
 * table that initiators check before each doorbell, so a request already
 * past its check when the bit is set still lands; ids up to 63. udp: the
 * target refuses each request of that machine before executing it, and
 * when this returns none of its requests is still executing (the bit set
 * here pairs with the target's load of it under its receive lock, which
 * revoke takes and drops); and, as a queue pair torn down, this
 * machine's requests outstanding to it complete with FARM_EPEERDEAD, as
 * do later ones until a new farm_ep_connect to it (no death callback);
 * ids up to 63. ofi: the keys each process of that id holds here (its
 * own) are closed, so the target's libfabric refuses its requests, and
 * its connection checks are refused (FARM_EFENCED); a request whose key
 * was checked before still lands; ids up to 1,023. Not to be called from
 * a request handler. -ENOTSUP for providers without it (verbs; ofi where
 * the provider chooses the keys).
 */
FARM_API FARM_MUST_CHECK int farm_fabric_revoke(farm_fabric *fab,
                                                uint32_t peer_id);

/*
 * farm_fabric_admit() - machine @peer_id is a new holder of its id (a new
 * process at fabric address @addr, which must answer): its one-sided
 * requests to this machine's memory are let in again after a
 * farm_fabric_revoke, and every other holder of the id stays fenced
 * (FARM_EFENCED), an old one that still runs above all. shm: the
 * incarnation of @addr's table, recorded in this machine's table, which
 * initiators compare with their own before each doorbell; ids up to 63.
 * udp: @addr, the only socket address its requests are let in from. ofi:
 * @addr, the only reply address its connection checks are let in from;
 * every other holder's keys are closed. -ENOTSUP for providers without
 * it (verbs: its old holder not fenced).
 */
FARM_API FARM_MUST_CHECK int
farm_fabric_admit(farm_fabric *fab, uint32_t peer_id, const char *addr);

/*
 * farm_ep_back() - make [@offset, @offset + @len) of the peer's
 * registration @desc (REMOTE_WRITE) take memory now, so that the WRITEs
 * this endpoint posts there later cannot fail for want of it: 0, or
 * -ENOSPC when the memory behind it is full (-EINVAL out of range,
 * FARM_EREMOTE_KEY / FARM_EREMOTE_ACCESS as a WRITE there would fail,
 * FARM_EPEERDEAD). For FARM_MEM_SPARSE memory that a peer writes into:
 * on shm it is a file, and a page first written on a full file system is
 * a SIGBUS in the writer, so the writer backs the range it is about to
 * use through its own mapping of the file (MADV_POPULATE_WRITE). udp and
 * ofi: 0 (anonymous memory: the page comes at the target's first write,
 * as any heap page; no SIGBUS). verbs: 0 (registration pinned it whole).
 * Synchronous; not a request on the queue (no completion).
 */
FARM_API FARM_MUST_CHECK int farm_ep_back(farm_ep *ep, const farm_mr_desc *desc,
                                          uint64_t offset, uint64_t len);

/* Inject a fault on one endpoint. -ENOTSUP where the provider has none. */
FARM_API FARM_MUST_CHECK int farm_ep_fault(farm_ep *ep, enum farm_fault f,
                                           uint64_t arg);
/* Inject a fault on every endpoint of this fabric to machine @peer_id,
 * which must be connected (-ENOENT otherwise): "pause a peer" is
 * FARM_FAULT_PAUSE here. */
FARM_API FARM_MUST_CHECK int farm_fabric_fault_peer(farm_fabric *fab,
                                                    uint32_t peer_id,
                                                    enum farm_fault f,
                                                    uint64_t arg);

#ifdef __cplusplus
}
#endif
#endif /* FARM_FABRIC_H */
