/*
 * Internal to the udp provider (udp.c: fabric, memory, registrations,
 * completion queues, endpoints, posting; udp_wire.c: packets, the dispatch
 * thread that serves peers' requests and receives replies, retransmission,
 * liveness). See udp.c's head comment and README.md, "udp".
 */
#ifndef FARM_FABRIC_UDP_INT_H
#define FARM_FABRIC_UDP_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "fabric/provider.h"
#include "fabric/udp_testing.h"
#include "util/common.h"
#include "util/stat.h"

#define UDP_MAGIC        0x31505546u /* "FUP1" */
#define UDP_HDR          88u
#define UDP_PIECE        1344u /* data bytes per packet: 21 lines */
#define UDP_DGRAM_MAX    (UDP_HDR + UDP_PIECE) /* fits a 1500-byte MTU */
#define UDP_WINDOW       32u /* credits: unacknowledged packets a session */
#define UDP_BATCH        32u /* datagrams per recvmmsg / sendmmsg */
#define UDP_MAX_EPS      4096u
#define UDP_MAX_PEERS    1024u
#define UDP_MAX_SESS     1024u
#define UDP_TABLE_N      4096u
#define UDP_RTO_NS       (5ull * 1000000ull) /* as eRPC: 5 ms */
#define UDP_RTO_MAX_NS   (160ull * 1000000ull)
#define UDP_CONNECT_NS   (2000ull * 1000000ull)
#define UDP_TICK_NS      1000000ull   /* timers, with packets outstanding */
#define UDP_IDLE_TICK_NS 200000000ull /* ... without: liveness probes */
/* A poller that drained the socket holds it this long (times the test knob
 * FARM_UDP_KNOB_LEASE_MS, 1): the dispatch thread does not wait for
 * datagrams meanwhile (README.md, "udp": who receives). */
#define UDP_LEASE_NS 1000000ull
/* A poller with nothing outstanding drains at most this often when it
 * comes back at once (it has nothing else to do), at most the second when
 * it was busy between two polls: a recvmmsg that finds nothing costs one
 * to two microseconds here, a quarter of a loop's local KV lookups when
 * paid every few microseconds. */
#define UDP_IDLE_DRAIN_NS 4000ull
#define UDP_BUSY_DRAIN_NS 20000ull
#define UDP_SPIN_GAP_NS   1000ull /* polls this close: spinning */

/* Test-only request flags (udp_testing.h knobs, set at the initiator as
 * the tests set them, obeyed by the target in FARM_FAULT_INJECTION builds
 * only). */
#define UDP_TF_UNORDERED 1u /* WRITE: the last word first */
#define UDP_TF_TEARABLE  2u /* READ: word by word, highest first */

/* Set in a record's type when another record follows it in the same
 * datagram (README.md, "udp": coalescing). */
#define UDP_MORE      0x80u
#define UDP_RECS_MAX  (UDP_DGRAM_MAX / UDP_HDR) /* records a datagram */
#define UDP_ALIGN8(n) (((n) + 7u) & ~(size_t)7u)

enum {
	T_REQ = 1,
	T_RESP,
	T_CONNECT,
	T_ACCEPT,
	T_PING,
	T_PONG,
	T_CLOSE,
	T_BYE,  /* the sender's fabric closes */
	T_NACK, /* the target's session expects seq (a gap): resend from it */
};

/* Every datagram starts with this header (host byte order: the provider
 * runs between machines of one architecture, as the rings do). */
struct udp_hdr {
	uint32_t magic;
	uint8_t type;
	uint8_t op;        /* REQ: enum farm_wr_opcode */
	uint16_t len;      /* payload bytes after the header */
	uint32_t from, to; /* machine ids */
	uint64_t inc;      /* the sender fabric's incarnation (random) */
	uint32_t sess;     /* the target's session index */
	uint32_t token;    /* ... and its secret; both echoed in replies */
	uint32_t cep;      /* the initiator's endpoint: index << 16 | gen */
	int32_t status;    /* RESP */
	uint64_t seq;      /* packet sequence in the session */
	uint64_t raddr, rkey;
	uint32_t rlen;     /* READ: bytes wanted */
	uint32_t tflags;   /* test builds: UDP_TF_*, a guarantee to break */
	uint64_t cmp, swp; /* CAS; its RESP: cmp is the value found */
};
_Static_assert(sizeof(struct udp_hdr) == UDP_HDR, "header size");

struct udp_pkt {
	struct udp_hdr h;
	uint8_t data[UDP_PIECE];
};

/* A registration (key: gen << 12 | slot). */
struct udp_tent {
	uint64_t key;
	uintptr_t addr;
	uint64_t len;
	unsigned access;
};

struct udp_mr {
	farm_mr base;
	uint32_t slot;
};

/* The target's side of a session: where its replies go and the cache of
 * the last UDP_WINDOW replies, so a duplicate is answered, not redone. */
struct udp_sess {
	bool used, failed;
	uint32_t token, peer, cep;
	uint64_t peer_inc;
	struct sockaddr_storage addr;
	socklen_t alen;
	uint64_t expect; /* the next sequence to execute */
	uint64_t nacked; /* the expect a NACK was sent for (once each) */
	uint64_t seen_ns;
	struct udp_cached {
		uint64_t seq;
		uint16_t len;
		struct udp_pkt pkt;
	} * cache; /* UDP_WINDOW entries, by seq % UDP_WINDOW */
};

enum { S_FREE = 0, S_QUEUED, S_DONE };

struct udp_slot {
	uint64_t wr_id;
	uint16_t opcode, flags;
	uint32_t len;
	uint8_t state;
	int err;
	void *local;
	uint64_t raddr, rkey, cmp, swp;
	uint64_t pkt_first; /* its first packet's sequence */
	uint32_t npk, ndone;
	uint64_t posted_ns;
	uint8_t inl[FARM_INLINE_MAX];
};

/* The initiator's side of a session: one farm_ep. Requests become packets
 * with consecutive sequence numbers; at most UDP_WINDOW unacknowledged. */
struct udp_ep {
	farm_ep base;
	struct udp_fabric *fab;
	pthread_mutex_t lock;
	uint32_t idx, gen;
	uint32_t sess, token; /* the target's */
	uint64_t inc;         /* the target's incarnation, at connect */
	struct sockaddr_storage dest;
	socklen_t dlen;
	struct udp_slot *slots;
	uint32_t mask, depth, head, tail;
	uint32_t send_slot;            /* the slot holding snd_nxt */
	uint64_t next_pkt;             /* the next sequence to assign */
	uint64_t snd_una, snd_nxt;     /* oldest unacked; next to send */
	uint64_t acked;                /* bit i: snd_una + i answered */
	uint32_t win_slot[UDP_WINDOW]; /* the slot of packet q % W */
	uint64_t rto_at, progress_ns;
	uint64_t rto_ns; /* UDP_RTO_NS, doubled by each retransmission */
	uint64_t nack_q; /* the sequence the last NACK resent from, + 1 */
	bool closed, err_state, sw_failed;
	struct farm_faults faults;
	struct udp_ep *cq_next;
};

struct udp_cq {
	farm_cq base;
	pthread_mutex_t lock;
	bool shared;
	struct udp_ep *eps;
	uint64_t idle_since; /* first poll of this run finding nothing */
	bool kicked;         /* ... and it woke the dispatch thread */
	uint64_t polled_ns;  /* when its last poll with nothing outstanding
	                      * returned */
};

/* The one socket address a new holder of a reused id was admitted at
 * (farm_fabric_admit); alen 0: none (any address, as before a reuse). */
struct udp_admitted {
	struct sockaddr_storage addr;
	socklen_t alen;
};

struct udp_peer {
	atomic_int dead;
	bool report;      /* dead, not yet told to the death callback */
	uint64_t inc;     /* its incarnation, learned at connect */
	uint64_t rx_ns;   /* last packet heard from it */
	uint64_t ping_ns; /* last probe sent */
	struct sockaddr_storage addr;
	socklen_t alen;
	unsigned neps;
	struct farm_faults faults;
};

/* A connect in progress: the dispatch thread fills it from the ACCEPT. */
struct udp_conn {
	uint32_t cep;
	atomic_int done;
	uint32_t sess, token;
	int32_t status;
	uint32_t wire; /* the target's wire version, from its ACCEPT */
	uint64_t inc;
};

struct udp_fabric {
	farm_fabric base;
	int fd, stop_fd;
	int kick_fd; /* eventfd: wakes the dispatch thread's idle sleep */
	uint64_t inc;
	uint64_t timeout_ns, hb_ns;
	char addr[64];
	pthread_t thread;
	bool started;
	/* Lock order: rx, then lock, then an endpoint's lock. */
	pthread_mutex_t rx;   /* the socket's receive side and sessions */
	pthread_mutex_t lock; /* eps, peers, conns */
	pthread_rwlock_t tab_lock;
	struct udp_tent *table;
	uint16_t slot_gen[UDP_TABLE_N];
	struct udp_ep *eps[UDP_MAX_EPS];
	uint16_t ep_gen[UDP_MAX_EPS];
	struct udp_peer *peers; /* UDP_MAX_PEERS */
	struct udp_sess *sess;  /* UDP_MAX_SESS */
	struct udp_conn *conn;  /* at most one connect at a time */
	pthread_mutex_t conn_mu;
	_Atomic uint64_t revoked[UDP_MAX_PEERS / 64];
	/* Under rx, made at the first admission: by machine id, where that
	 * id's requests may come from (its old holder elsewhere is fenced). */
	struct udp_admitted *admitted; /* UDP_MAX_PEERS */
	pthread_mutex_t death_mu;
	farm_peer_death_fn death_fn;
	void *death_ctx;
	pthread_mutex_t tx; /* the test hooks' held packet */
	struct udp_pkt held;
	size_t held_len;
	struct sockaddr_storage held_to;
	socklen_t held_tlen;
	struct udp_rxbuf *rxb; /* under rx */
	unsigned eps_hi;       /* eps[] used below this */
	unsigned peers_hi;     /* peers[] with endpoints below this */
	atomic_bool deaths;    /* some peer's report is pending */
	atomic_bool kick;      /* a poller waited a tick: timers now */
	/* Until when pollers receive (they drained the socket last then,
	 * less UDP_LEASE_NS); 0: the dispatch thread waits for datagrams.
	 * Relaxed: a stale value delays the hand-back by one wake-up. */
	_Atomic uint64_t lease_ns;
	_Atomic uint64_t idle_drain_ns; /* an idle poller's last drain */
	struct udp_fabric *next_open;   /* the process's open fabrics */
	bool coalesce;                  /* several records a datagram */
	int64_t spin_ns;    /* a poller finding nothing spins this long,
	                     * then sleeps for a datagram; < 0: never */
	uint64_t sleep_ns;  /* ... at most this long a sleep */
	uint64_t timers_at; /* dispatch thread only: next timers pass */
	struct farm_udp_stats st;
};

static inline struct udp_fabric *UF(farm_fabric *fab)
{
	return (struct udp_fabric *)fab;
}

/* A header from this fabric's machine and incarnation to machine @to,
 * every other field zero (the caller sets the session's). */
static inline void farm_udp_hdr(const struct udp_fabric *f, struct udp_hdr *h,
                                uint8_t type, uint32_t to)
{
	memset(h, 0, sizeof(*h));
	h->magic = UDP_MAGIC;
	h->type = type;
	h->from = f->base.machine_id;
	h->to = to;
	h->inc = f->inc;
}

/* A datagram to send. */
struct udp_out {
	const struct udp_pkt *pkt;
	size_t len;
	const struct sockaddr_storage *to;
	socklen_t tlen;
};

/* Datagrams being filled: consecutive records to the same address share
 * one (when the fabric coalesces), each at an 8-byte aligned offset, every
 * one but the last marked UDP_MORE. @dg holds cap + 1 datagrams (the last
 * is slack: a record is written as a struct udp_pkt). */
struct udp_packer {
	uint8_t (*dg)[UDP_DGRAM_MAX];
	struct udp_out *out;
	unsigned cap, n;
	size_t last; /* offset of the last record in dg[n - 1] */
	bool coalesce;
};

/* udp_wire.c */
void farm_udp_packer_init(struct udp_packer *pk, uint8_t (*dg)[UDP_DGRAM_MAX],
                          struct udp_out *out, unsigned cap, bool coalesce);
struct udp_pkt *farm_udp_packer_add(struct udp_fabric *f, struct udp_packer *pk,
                                    size_t len,
                                    const struct sockaddr_storage *to,
                                    socklen_t tlen);
void farm_udp_packer_flush(struct udp_fabric *f, struct udp_packer *pk);
int farm_udp_parse_addr(const char *s, struct sockaddr_storage *ss,
                        socklen_t *sl);
int farm_udp_format_addr(const struct sockaddr_storage *ss, char *buf,
                         size_t len);
bool farm_udp_addr_admits(const struct sockaddr_storage *adm, socklen_t al,
                          const struct sockaddr_storage *from, socklen_t fl);
void farm_udp_send(struct udp_fabric *f, const struct udp_out *out, unsigned n);
/* udp_ep.c: the endpoint ops (fabric/provider.h). */
int farm_udp_ep_connect(farm_fabric *fab, farm_cq *cq, uint32_t peer_id,
                        const char *peer_addr, const farm_ep_attr *attr,
                        farm_ep **out);
void farm_udp_ep_disconnect(farm_ep *fep);
void farm_udp_ep_destroy(farm_ep *fep);
bool farm_udp_ep_usable(const farm_ep *fep);
int farm_udp_ep_post(farm_ep *fep, farm_wr *list, farm_wr **bad);
int farm_udp_rx_alloc(struct udp_fabric *f);
unsigned farm_udp_rx_drain(struct udp_fabric *f);
unsigned farm_udp_rx_drain_idle(struct udp_fabric *f, uint64_t *polled_ns);
unsigned farm_udp_rx_sleep(struct udp_fabric *f, uint64_t max_ns,
                           bool (*done)(void *), void *arg);
void *farm_udp_dispatch_main(void *arg);
void farm_udp_kick(struct udp_fabric *f);
int farm_udp_timers_if_due(struct udp_fabric *f);
bool farm_udp_ep_paused(const struct udp_ep *ep);
void farm_udp_ep_send(struct udp_ep *ep, uint64_t from, uint64_t end,
                      bool timeout);
#ifdef FARM_FAULT_INJECTION
void farm_udp_flush_held(struct udp_fabric *f);
#endif
int farm_udp_knob_value(int knob);
void farm_udp_ep_pump(struct udp_ep *ep);
void farm_udp_piece(uint64_t raddr, uint32_t len, uint32_t k, uint64_t *off,
                    uint32_t *plen);
uint32_t farm_udp_npieces(uint64_t raddr, uint32_t len);
void farm_udp_bye(struct udp_fabric *f);
bool farm_udp_fail_peer_locked(struct udp_fabric *f, uint32_t peer,
                               bool report);
/* udp_serve.c */
void farm_udp_serve_req(struct udp_fabric *f, const struct udp_pkt *p, size_t n,
                        const struct sockaddr_storage *from, socklen_t flen,
                        struct udp_pkt *reply, size_t *rlen);
void farm_udp_serve_ctl(struct udp_fabric *f, const struct udp_pkt *p, size_t n,
                        const struct sockaddr_storage *from, socklen_t flen,
                        struct udp_pkt *reply, size_t *rlen);

#endif
