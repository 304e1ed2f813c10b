/*
 * Internal to the ofi provider (ofi.c: fabric, completion dispatch,
 * memory, endpoints; ofi_data.c: the data path; ofi_ctl.c: addresses,
 * control messages, registrations and their table, heartbeats, the
 * connection check). See ofi.c's head comment
 * and README.md, "ofi".
 */
#ifndef FARM_FABRIC_OFI_INT_H
#define FARM_FABRIC_OFI_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "fabric/ofi_testing.h"
#include "fabric/provider.h"
#include "util/common.h"
#include "util/stat.h"

#define OFI_DEFAULT_PROVIDER "tcp;ofi_rxm"
#define OFI_MAX_EPS          4096 /* logical endpoints per fabric */
#define OFI_MAX_PEERS        1024 /* machine ids tracked for death */
#define OFI_VERIFY_MAX       4096 /* READs up to this are line-atomic */
#define OFI_RECVS            32
#define OFI_CTRL_MAGIC       0x3130494f4d524146ull /* "FARMOI01" */
#define OFI_CONNECT_NS       (3000ull * 1000000ull)
#define OFI_ACKS_MAX         64           /* ACKs waiting for a connection */
#define OFI_ACK_RETRY_NS     (1000000ull) /* first retry; then doubling */
#define OFI_ACK_RETRY_MAX_NS (100000000ull)
#define OFI_CTX_SLOT         (1ull << 63)
#define OFI_HOLDERS          256 /* peer processes holding keys here */

/* What a libfabric operation is, for the order rules (see order_ok). */
enum { P_READ = 0, P_WRITE, P_AWRITE, P_CAS, P_SEND, P_KINDS };

/* CTRL_FENCED: the target fenced the holder it is sent to (its keys are
 * gone); best effort, so that holder's requests say FARM_EFENCED. */
enum { CTRL_HELLO = 1, CTRL_ACK = 2, CTRL_NOTIFY = 3, CTRL_FENCED = 4 };

/* Control messages (fi_send): connection check and doorbells. */
struct ofi_ctrl {
	uint64_t magic;
	uint32_t type, from, to;
	int32_t status;
	uint32_t wire; /* the sender's wire version */
	uint32_t pad;
	uint64_t cookie;     /* HELLO, ACK; NOTIFY, FENCED: the holder's tag */
	uint64_t key, addr;  /* NOTIFY; ACK: the registration table */
	uint64_t len;        /* ACK: the table's bytes */
	char reply_addr[64]; /* HELLO: where to send the ACK */
};

enum { K_RECV = 1, K_SENDFREE = 2, K_HELLO = 3, K_FETCH = 4, K_HB = 5 };

/*
 * The registration table: every fabric publishes its registrations in a
 * table peers may READ (entry 0 is the table itself). A key is
 * (generation << 12 | slot). An initiator checks every request against its
 * copy of the target's table and fails a bad one in software (refetching
 * the copy once when the key is unknown to it): libfabric's tcp provider
 * answers an RMA to a bad key or range by closing the connection, failing
 * everything else in flight to that peer, and reports no status.
 */
#define OFI_TABLE_N 4096
struct ofi_tent {
	uint64_t key, addr, len;
	uint32_t access, pad;
};
struct ofi_octx {
	int kind;
};

struct ofi_fetch {
	struct ofi_octx c;  /* K_FETCH */
	_Atomic int status; /* 0 waiting, 1 done, < 0 error */
};

struct ofi_rbuf {
	struct ofi_octx c;
	struct ofi_ctrl msg;
};

struct ofi_sendbuf {
	struct ofi_octx c;
	struct ofi_ctrl msg;
	/* An ACK libfabric did not take yet (its connection to the HELLO's
	 * sender is not up): on the fabric's deferred list. */
	struct ofi_sendbuf *next;
	fi_addr_t to;
	uint64_t deadline, next_try, gap; /* gap doubles, to 100 ms */
};

struct ofi_conn {
	struct ofi_octx c; /* K_HELLO: the HELLO's send */
	struct ofi_conn *next;
	uint64_t cookie;
	_Atomic int status; /* 0 waiting, 1 accepted, < 0 error */
	uint32_t wire;      /* the target's wire version, from the ACK */
	uint64_t tab_key, tab_addr, tab_len; /* from the ACK */
	struct ofi_ctrl msg;
};

struct ofi_mr {
	struct farm_mr base;
	struct fid_mr *mr;
	void *ldesc;
	struct ofi_mr *next;
};

enum { S_FREE = 0, S_QUEUED, S_POSTED, S_DONE };

struct ofi_slot {
	uint64_t wr_id;
	uint32_t seq;
	uint16_t opcode, flags;
	uint32_t len;
	uint8_t state, npieces, posted, tries;
	bool started; /* handed to libfabric at least once */
	bool rev8;    /* test-only READ (FARM_OFI_KNOB_LINE_ATOMIC 0) */
	struct {
		uint32_t off, len;
		uint8_t kind; /* P_* */
	} pc[3];              /* the libfabric operations of the request */
	void *local;
	void *ldesc;
	uint64_t raddr, rkey;
	uint64_t cmp, swp;   /* CAS operands (registered with the slots) */
	uint64_t posted_ns;  /* first piece handed to libfabric */
	_Atomic int pending; /* libfabric operations not completed */
	_Atomic int err;     /* first failure, 0 */
	_Atomic int pend[P_KINDS]; /* pieces in flight, by kind */
	uint8_t *scratch;          /* verification copy (READ) */
	struct fid_mr *scr_mr;
	struct ofi_ctrl ctl; /* NOTIFY payload */
	uint8_t inl[FARM_INLINE_MAX];
};

struct ofi_fabric;

struct ofi_ep {
	struct farm_ep base;
	struct ofi_fabric *fab;
	struct ofi_ep *cq_next;
	uint32_t idx;
	uint16_t gen;
	fi_addr_t dest;
	unsigned depth, mask;
	struct ofi_slot *slots;
	size_t slots_len;
	struct fid_mr *slots_mr;
	void *slots_desc;
	uint32_t head, tail, next_post; /* sequences */
	_Atomic int inflight[P_KINDS];  /* pieces in flight, by kind */
	bool err_state, closed, shared;
	bool sw_failed; /* a request failed at post: later ones flush */
	bool kick;      /* in the drainer's list (drain lock held) */
	pthread_mutex_t lock;
	/* injected faults (tests), applied before libfabric is called */
	struct farm_faults faults; /* on this endpoint */
	/* the peer's registration table: where, and our copy */
	uint64_t tab_key, tab_addr, tab_len;
	struct ofi_tent *cache;
	struct fid_mr *cache_mr;
	struct ofi_fetch fetch;
	bool fetch_lost; /* a fetch that never completed: keep the memory */
	/* Our holder tag at the peer (its keys for us are tag << 32 | key;
	 * 0: the peer has one key per registration). */
	uint32_t tag;
	/* The peer fenced us (a HELLO refused, or its FENCED notice): every
	 * request asks again (a HELLO) and fails FARM_EFENCED until let in. */
	_Atomic bool fenced;
};

struct ofi_cq {
	struct farm_cq base;
	struct ofi_ep *eps;
	unsigned neps;
	bool shared;
	pthread_mutex_t lock;
};

/* Heartbeat (e): an 8-byte READ of the peer's table, one at a time, while
 * endpoints to it exist; one unanswered past the bound marks it dead. A
 * killed peer's TCP connection is never reported by tcp;ofi_rxm, and a
 * peer we have nothing in flight to would otherwise never be noticed. */
struct ofi_hbop {
	struct ofi_octx c; /* K_HB */
	uint32_t peer;
	fi_addr_t dest;
	uint64_t buf;
	struct ofi_hbop *next; /* abandoned (f->hb_old) */
};
struct ofi_hb {
	/* The beat's operation, its own object: a beat to an id's earlier
	 * holder may stay outstanding for ever (a killed peer's connection
	 * is not reported), and its late completion must not count for
	 * the new holder. Abandoned ones wait on f->hb_old until close. */
	struct ofi_hbop *op;
	bool known, trying;
	_Atomic int busy;
	uint64_t since; /* first attempt of the outstanding beat */
	fi_addr_t dest;
	uint64_t key, addr;
};

/*
 * A peer process that holds keys to this fabric's memory (the fence,
 * ofi_fence.c): machine @id at reply address @addr. Each of our
 * registrations is registered for it again under tag << 32 | key, with
 * the registration's remote access (the shared one under the plain key
 * has local access only), so that closing a holder's registrations
 * takes every key it knows: libfabric's provider executes RMA and
 * atomics without asking this code, and refuses only a key it does not
 * know. Drain lock and f->lock held to change.
 */
struct ofi_holder {
	uint32_t id, tag;
	char addr[64];
	struct fid_mr *mr[OFI_TABLE_N]; /* by slot; [0]: the table */
};

struct ofi_peer {
	_Atomic int dead;
	/* Target side, under f->lock: the id is revoked (fenced from any
	 * address), or admitted as a new holder only from @admitted. */
	bool revoked;
	char admitted[64];
	/* The address of the id's current holder (the last connect's): an
	 * id reused by a new process (a new holder, src/coord/README.md)
	 * has a new address. Endpoints to another address are an earlier
	 * holder's: unusable, and their failures are not the id's death. */
	_Atomic fi_addr_t dest;
	struct farm_faults faults; /* on every endpoint to it */
	unsigned neps;             /* endpoints to it (drain lock) */
	struct ofi_hb hb;
};

struct ofi_fabric {
	struct farm_fabric base;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_cq *cq;
	bool mr_local, virt_addr, prov_key, cq_wait;
	uint64_t order; /* tx_attr->msg_order granted */
	int cq_fd, stop_fd;
	pthread_t progress;
	bool progress_started;
	uint64_t timeout_ns;
	uint64_t hb_ns, hb_last; /* heartbeat period, last round */
	char addr[64];
	char prov[64];
	/* drain: one thread at a time reads the libfabric CQ */
	pthread_mutex_t drain;
	struct ofi_ep *kick[OFI_MAX_EPS]; /* endpoints that got completions */
	unsigned nkick;
	struct ofi_ep *eps[OFI_MAX_EPS];
	uint16_t ep_gen[OFI_MAX_EPS];
	/* registrations, pending connects, address cache */
	pthread_mutex_t lock;
	struct ofi_mr *mrs;
	bool validate; /* we choose keys: the table is kept and checked */
	struct ofi_tent *table;
	struct fid_mr *table_mr;
	uint16_t slot_gen[OFI_TABLE_N];
	struct ofi_conn *conns;
	struct ofi_ep *orphans; /* destroyed with operations outstanding */
	/* ACKs waiting for libfabric (drain lock): retried by the progress
	 * thread, never waited for in it (farm_ofi_acks_retry) */
	struct ofi_sendbuf *acks;
	unsigned nacks;
	struct {
		char addr[64];
		fi_addr_t fa;
	} avc[256];
	unsigned navc;
	struct ofi_rbuf rbufs[OFI_RECVS];
	struct fid_mr *rbufs_mr;
	struct ofi_peer peers[OFI_MAX_PEERS];
	struct ofi_hbop *hb_old; /* beats abandoned (drain lock) */
	struct ofi_holder *holders[OFI_HOLDERS]; /* f->lock */
	uint32_t tag_next;                       /* f->lock */
	struct farm_ofi_stats st;
};

static inline struct ofi_fabric *F(farm_fabric *f)
{
	return (struct ofi_fabric *)f;
}

static inline int fi_to_errno(int rc)
{
	rc = rc < 0 ? -rc : rc;
	return rc ? -rc : -EIO;
}

/* A completion error from libfabric, as a farm status. */
static inline int map_err(int err)
{
	switch (err) {
	case FI_ENOKEY: return FARM_EREMOTE_KEY;
	case FI_EACCES:
	case FI_EPERM:
	case FI_EINVAL:
	case FI_EFAULT:
	case FI_EREMOTEIO: return FARM_EREMOTE_ACCESS;
	case FI_ECANCELED: /* the connection closed under it */
	case FI_ECONNREFUSED:
	case FI_ECONNRESET:
	case FI_ECONNABORTED:
	case FI_ENOTCONN:
	case FI_EHOSTUNREACH:
	case FI_ENETUNREACH:
	case FI_ENETDOWN:
	case FI_ETIMEDOUT:
	case FI_EADDRNOTAVAIL:
	case FI_EHOSTDOWN:
	case FI_ESHUTDOWN: return FARM_EPEERDEAD;
	default: return -EIO;
	}
}

static inline bool is_death(int st)
{
	return st == FARM_EPEERDEAD;
}

/* A slot operation's context: tag, piece kind, endpoint index and
 * generation, slot sequence. */
static inline uint64_t ofi_slot_ctx(const struct ofi_ep *ep, uint32_t seq,
                                    unsigned kind)
{
	return OFI_CTX_SLOT | (uint64_t)kind << 60 | (uint64_t)ep->idx << 48 |
	       (uint64_t)ep->gen << 32 | seq;
}

/* Test-only (FARM_OFI_KNOB_HOLDER): 0 treats every address of an id as
 * one peer, as before a reused id was told apart. */
extern _Atomic int farm_ofi_knob_holder;

/* Test-only (FARM_OFI_KNOB_FENCE): 0 lets every holder in and closes no
 * holder's keys, as before the fence. */
extern _Atomic int farm_ofi_knob_fence;
/* Test-only (FARM_OFI_KNOB_HEED_FENCE): 0 ignores FENCED notices. */
extern _Atomic int farm_ofi_knob_heed_fence;

/* Whether @dest is the address of @peer's current holder. */
static inline bool ofi_peer_current(struct ofi_fabric *f, uint32_t peer,
                                    fi_addr_t dest)
{
	return peer >= OFI_MAX_PEERS || !atomic_load(&farm_ofi_knob_holder) ||
	       atomic_load(&f->peers[peer].dest) == dest;
}

/* A failure that means the peer at @dest is gone: the id is dead only if
 * @dest is its current holder's address (an earlier holder's endpoint
 * fails alone). */
static inline void ofi_peer_kill(struct ofi_fabric *f, uint32_t peer,
                                 fi_addr_t dest)
{
	if (peer < OFI_MAX_PEERS && ofi_peer_current(f, peer, dest))
		atomic_store(&f->peers[peer].dead, 1);
}

static inline bool ofi_peer_dead(const struct ofi_ep *ep)
{
	return ep->base.peer < OFI_MAX_PEERS &&
	       (atomic_load(&ep->fab->peers[ep->base.peer].dead) ||
	        !ofi_peer_current(ep->fab, ep->base.peer, ep->dest));
}

/* Every endpoint has a lock, shared or not: besides its owner, a drainer
 * hands it queued requests when completions lift a fence (kick_waiting). */
static inline int ofi_ep_lock(struct ofi_ep *ep)
{
	pthread_mutex_lock(&ep->lock);
	return 0;
}

static inline void ofi_ep_unlock(struct ofi_ep *ep)
{
	pthread_mutex_unlock(&ep->lock);
}

/* ofi.c; farm_ofi_drain_locked: the caller holds f->drain. */
int farm_ofi_drain_locked(struct ofi_fabric *f);
void farm_ofi_drain_try(struct ofi_fabric *f);

/* ofi_data.c: the data path. */
void farm_ofi_pump(struct ofi_ep *ep);
int farm_ofi_ep_post(farm_ep *fep, farm_wr *list, farm_wr **bad);
int farm_ofi_cq_poll(farm_cq *fcq, int n, farm_wc *wc);

/* ofi_ctl.c */
int farm_ofi_parse_addr(const char *s, struct sockaddr_storage *ss,
                        socklen_t *len);
int farm_ofi_format_addr(const void *sa, char *buf, size_t len);
int farm_ofi_av_lookup(struct ofi_fabric *f, const char *addr, fi_addr_t *out);
/* A control message of @type from this fabric to machine @to, freed at its
 * send's completion (K_SENDFREE); NULL without memory. */
struct ofi_sendbuf *farm_ofi_sendbuf_new(const struct ofi_fabric *f,
                                         uint32_t type, uint32_t to,
                                         uint64_t cookie);
void farm_ofi_post_recv(struct ofi_fabric *f, struct ofi_rbuf *r);
void farm_ofi_on_ctrl(struct ofi_fabric *f, struct ofi_ctrl *m, size_t len);
void farm_ofi_hb_tick(struct ofi_fabric *f);
/* Retry the deferred ACKs once each (drain lock held); true while some
 * are left (the progress thread then sleeps briefly). */
bool farm_ofi_acks_retry(struct ofi_fabric *f);
void farm_ofi_acks_free(struct ofi_fabric *f);
int farm_ofi_mr_reg(farm_fabric *fab, void *addr, size_t len, unsigned access,
                    farm_mr **out);
void farm_ofi_mr_dereg(farm_mr *mr);
int farm_ofi_check_remote(struct ofi_ep *ep, const farm_wr *wr);
/* The HELLO / ACK exchange: the target's registration table (@tab: key,
 * address, bytes); -EPROTO when it speaks another wire version (@wire). */
int farm_ofi_hello(struct ofi_fabric *f, uint32_t peer_id, fi_addr_t dest,
                   uint64_t tab[3], uint32_t *wire);

/* ofi_fence.c: holders (see struct ofi_holder), admission, revocation. */
int farm_ofi_admission(struct ofi_fabric *f, uint32_t id, const char *addr,
                       uint64_t *tab_key);
int farm_ofi_holders_reg(struct ofi_fabric *f, unsigned slot, uint64_t key);
void farm_ofi_holders_dereg(struct ofi_fabric *f, unsigned slot);
bool farm_ofi_holder_live(struct ofi_fabric *f, uint32_t id, uint32_t tag);
void farm_ofi_on_fenced(struct ofi_fabric *f, uint32_t from, uint32_t tag);
void farm_ofi_holders_free(struct ofi_fabric *f);
int farm_ofi_revoke(farm_fabric *fab, uint32_t peer_id);
int farm_ofi_admit(farm_fabric *fab, uint32_t peer_id, const char *addr);

/* libfabric's access flags for a farm access (LOCAL: every local use). */
static inline uint64_t farm_ofi_access(unsigned access)
{
	uint64_t fa = 0;
	if (access & FARM_ACCESS_LOCAL)
		fa |= FI_READ | FI_WRITE | FI_SEND | FI_RECV;
	if (access & FARM_ACCESS_REMOTE_READ)
		fa |= FI_REMOTE_READ;
	if (access & FARM_ACCESS_REMOTE_WRITE)
		fa |= FI_REMOTE_WRITE;
	if (access & FARM_ACCESS_REMOTE_ATOMIC)
		fa |= FI_REMOTE_READ | FI_REMOTE_WRITE;
	return fa;
}

/* The key @rkey of @ep's peer, as that peer gave it to us (our holder
 * tag there in the high half; ofi_fence.c). */
static inline uint64_t ofi_rkey(const struct ofi_ep *ep, uint64_t rkey)
{
	return (uint64_t)ep->tag << 32 | rkey;
}

#endif
