/*
 * The udp provider's counters and its test-only switches: knobs that break
 * a guarantee so tests prove they can fail, and (FARM_FAULT_INJECTION
 * builds only) hooks that drop, duplicate and reorder the packets this
 * process sends. Internal; not installed.
 */
#ifndef FARM_FABRIC_UDP_TESTING_H
#define FARM_FABRIC_UDP_TESTING_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/fabric.h>

enum farm_udp_knob {
	/* 1 (default): the target executes a session's packets once each, in
	 * sequence order (go-back-N: later ones dropped until the missing
	 * one arrives, duplicates answered from the reply cache); 0: every
	 * packet is executed as it arrives, duplicates again. */
	FARM_UDP_KNOB_GO_BACK_N = 1,
	/* 1 (default): a READ is copied line by line as a seqlock reader;
	 * 0: word by word, highest first, unchecked. */
	FARM_UDP_KNOB_LINE_ATOMIC = 2,
	/* 1 (default): a WRITE's last word is stored after the rest; 0:
	 * first. */
	FARM_UDP_KNOB_ORDERED_WRITES = 3,
	/* Per mille of the packets this process sends that are dropped,
	 * sent twice, or held back behind the next one (test builds only:
	 * -ENOTSUP elsewhere). */
	FARM_UDP_KNOB_DROP = 4,
	FARM_UDP_KNOB_DUP = 5,
	FARM_UDP_KNOB_REORDER = 6,
	/* 1 (default): farm_fabric_revoke(peer) also fails what this
	 * machine has outstanding to that peer (FARM_EPEERDEAD), as tearing
	 * down its queue pairs would; 0: it only fences the peer's requests,
	 * and ours to it wait for the death bound (FARM_UDP_TIMEOUT_MS). */
	FARM_UDP_KNOB_REVOKE_FLUSH = 7,
	/* 1 (default): a thread that parks in farm_wait_word ends the
	 * receive lease of the pollers of its process's fabrics, so the
	 * dispatch thread serves what arrives next (a doorbell for it);
	 * 0: the lease runs out by itself. */
	FARM_UDP_KNOB_PARK_HANDBACK = 8,
	/* The receive lease of a poller that drained, in ms (default 1). */
	FARM_UDP_KNOB_LEASE_MS = 9,
	/* 1 (default): a connecting endpoint takes its slot of the endpoint
	 * table before the handshake; 0: only after it, so that two connects
	 * at once (two threads) may pick one slot and one endpoint is left
	 * out of the table: its replies dropped, its timers never run. */
	FARM_UDP_KNOB_SLOT_FIRST = 10,
};

/* Set a knob for the whole process; returns its previous value (or
 * -ENOTSUP for a hook in a build without fault injection). */
int farm_udp_testing_set(enum farm_udp_knob knob, int value);

struct farm_udp_stats {
	uint64_t ops;             /* requests posted to a peer */
	uint64_t tx_pkts;         /* datagrams sent */
	uint64_t rx_pkts;         /* datagrams received */
	uint64_t tx_calls;        /* sendmmsg calls */
	uint64_t rx_calls;        /* recvmmsg calls that returned packets */
	uint64_t served;          /* request packets executed */
	uint64_t malformed;       /* wrong magic, version, size or fields */
	uint64_t bad_session;     /* unknown, forged or stale session */
	uint64_t fenced;          /* from a revoked machine: not executed */
	uint64_t out_of_order;    /* ahead of the expected sequence: dropped */
	uint64_t replayed;        /* duplicates answered from the reply cache */
	uint64_t too_old;         /* duplicates older than the cache: dropped */
	uint64_t stale_replies;   /* replies for nothing outstanding */
	uint64_t retransmits;     /* packets sent again after a timeout */
	uint64_t timeouts;        /* peers declared dead by the bound */
	uint64_t pings;           /* liveness probes sent */
	uint64_t hook_drops;      /* test hooks: packets dropped */
	uint64_t hook_dups;       /* ... sent twice */
	uint64_t hook_reorders;   /* ... held behind a later one */
	uint64_t dispatch_sleeps; /* times the dispatch thread parked */
	uint64_t conn_refused;    /* CONNECTs refused: sessions all in use */
	uint64_t line_giveups;    /* READs answered -EAGAIN: a line kept
	                           * changing under the copy */
	uint64_t timer_passes;    /* the dispatch thread's timer passes */
	uint64_t empty_drains;    /* recvmmsg calls that found nothing */
	uint64_t nacks;           /* gaps told to the initiator (target) */
	uint64_t fast_resends;    /* resends on a NACK, before the RTO */
	uint64_t poller_sleeps;   /* pollers that slept in the kernel for a
	                           * datagram (nothing arriving) */
};

/* The event trace (udp_trace.c, test builds only, FARM_UDP_TRACE=DIR):
 * the hops of a round trip, time-stamped. */
enum {
	UDP_EV_POST = 1, /* requests posted on an endpoint (arg: first seq) */
	UDP_EV_KICK,     /* the dispatch thread's eventfd written */
	UDP_EV_SEND,     /* sendmmsg returned (arg: first record's type) */
	UDP_EV_RECV,     /* recvmmsg returned datagrams (arg: 1 dispatch
	                  * thread, 0 a poller) */
	UDP_EV_SLEEP,    /* a poller goes to sleep in ppoll */
	UDP_EV_WOKE,     /* ... and is back */
	UDP_EV_DWAKE,    /* the dispatch thread is back from poll(2) */
	UDP_EV_DONE,     /* a request's last reply arrived (arg: seq) */
	UDP_EV_RETIRE,   /* a poller retired completions (arg: how many) */
	UDP_EV_SERVED,   /* a request record executed (arg: seq) */
};
#ifdef FARM_FAULT_INJECTION
extern bool farm_udp_tracing;
void farm_udp_trace_open(void);
void farm_udp_trace(unsigned ev, uint64_t arg);
void farm_udp_trace_dump(void);
#define UDP_TRACE(ev, arg)                                     \
	do {                                                   \
		if (farm_udp_tracing)                          \
			farm_udp_trace((ev), (uint64_t)(arg)); \
	} while (0)
#else
#define UDP_TRACE(ev, arg) ((void)0)
#endif

/* A snapshot of a udp fabric's counters; -EINVAL for another provider. */
int farm_udp_stats(const farm_fabric *fab, struct farm_udp_stats *out);

#endif
