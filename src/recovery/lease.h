/*
 * Leases (FaRM SOSP'15 section 5.1): every machine holds a lease at the
 * configuration manager (CM) and the CM holds one at every machine. The
 * expiry of either is a suspicion of failure; recovery acts on it.
 *
 * Channel: UDP datagrams on a socket of the lease module's own, served by
 * one dedicated thread per machine that sleeps in poll(2) between
 * deadlines (never an event loop, so a lease message never queues behind
 * application messages, and an idle machine costs a few wake-ups per
 * lease length). The thread asks for SCHED_FIFO, as FaRM runs its lease
 * manager at the highest user priority; without the privilege it runs at
 * normal priority and says so once.
 *
 * Three-way handshake, renewed every lease/5:
 *   machine M -> CM   REQUEST (seq, t = M's send time)
 *   CM -> M           GRANT+REQUEST (echoes seq and t; carries the CM's
 *                     own seq and send time t')
 *   M -> CM           GRANT (echoes the CM's seq and t')
 * M's lease at the CM runs until t + lease on M's clock when the grant
 * for it arrives (measured from the send, so M never believes in a lease
 * the CM thinks expired). The CM's lease at M likewise runs until t' +
 * lease on the CM's clock. The CM suspects M when no REQUEST came for a
 * lease length, or M's grant lapsed; M suspects the CM when the CM's
 * lease at M lapses. A machine whose own lease at the CM lapsed has lost
 * it: it must stop acting as a member (on_lost) until a new
 * configuration takes it back. Every message carries the configuration
 * id. Leases go on across a reconfiguration that keeps the CM (machines
 * learn it at different moments), so a message is stale when its
 * configuration is older than the first one of the current CM; a stale
 * message, one from a machine that is not a member, a grant stamped in
 * the future, a bad size or magic is dropped and counted.
 *
 * Internal; not installed.
 */
#ifndef FARM_RECOVERY_LEASE_H
#define FARM_RECOVERY_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/error.h>

#define FARM_LEASE_ADDR_MAX 64 /* "udp:<ipv4>:<port>" with NUL */
/* 20 ms, not FaRM's 5-10 ms: lease_bench on the 2-core development host
 * under heavy load saw gaps of up to 16 ms in which no lease thread ran,
 * and 10 ms leases lapsed falsely (docs/benchmarks.md). */
#define FARM_LEASE_DEFAULT_US 20000u
/* Every member of a view (FARM_VIEW_MAX, checked in recovery.c): the CM
 * holds a lease with each. */
#define FARM_LEASE_MAX_PEERS 256u
/* A new lease (a machine joins, or a new CM takes over) starts with this
 * grace, or one lease length if longer: machines learn a configuration
 * from ZooKeeper at different moments, tens of milliseconds apart under
 * load, and the first handshake must not look like a failure. */
#define FARM_LEASE_JOIN_GRACE_NS 1000000000ull

typedef struct farm_lease farm_lease;

/* Why a machine is suspected. */
enum farm_lease_why {
	FARM_LEASE_EXPIRED = 1, /* the lease lapsed */
	FARM_LEASE_REPORTED = 2 /* farm_lease_suspect (e.g. fabric death) */
};

/* Called on the lease thread (or the caller of farm_lease_suspect), at
 * most once per machine and configuration: quick, no farm_lease_* calls
 * but farm_lease_stats and farm_lease_valid. */
typedef void (*farm_lease_suspect_fn)(void *ctx, uint32_t machine,
                                      enum farm_lease_why why);
/* Called on the lease thread once per configuration when this machine's
 * own lease at the CM lapsed. */
typedef void (*farm_lease_lost_fn)(void *ctx, uint64_t config_id);

struct farm_lease_attr {
	uint32_t self_id;
	uint32_t lease_us; /* 0: FARM_LEASE_DEFAULT_US; at least 1000 */
	const char *bind;  /* IPv4 address to bind; NULL: 127.0.0.1 */
	bool no_realtime;  /* do not ask for SCHED_FIFO */
	farm_lease_suspect_fn on_suspect; /* may be NULL */
	farm_lease_lost_fn on_lost;       /* may be NULL */
	void *ctx;
	/* May be NULL: a word the lease thread keeps at the time
	 * (CLOCK_MONOTONIC ns) until which this machine may serve reads: a
	 * member's lease at the CM, or the latest lease a member granted the
	 * CM; UINT64_MAX before any configuration or alone. It must outlive
	 * the lease (the transaction layer's: farm_txm_serve_word). */
	_Atomic uint64_t *serve_word;
};

struct farm_lease_peer {
	uint32_t id;
	char addr[FARM_LEASE_ADDR_MAX]; /* from the peer's card */
};

/* Counters; each only grows. */
struct farm_lease_stats {
	uint64_t sent, received;
	uint64_t renewals;   /* grants that extended a lease, both roles */
	uint64_t late;       /* renewals that came after half a lease */
	uint64_t expiries;   /* leases that lapsed (suspicions raised) */
	uint64_t reported;   /* suspicions from farm_lease_suspect */
	uint64_t lost;       /* times this machine's own lease lapsed */
	uint64_t refused;    /* bad, stale or foreign messages dropped */
	uint64_t max_gap_us; /* longest time between renewals of one lease */
	uint64_t retired;    /* farm_lease_retire calls that took effect */
	bool realtime;       /* the thread runs SCHED_FIFO */
};

/* Start the lease thread (idle until farm_lease_set_config). 0; -EINVAL;
 * -ENOMEM; a socket error. */
int farm_lease_open(const struct farm_lease_attr *a,
                    farm_lease **out) FARM_MUST_CHECK;
/* Stop the thread, close the socket, free. NULL is fine. */
void farm_lease_close(farm_lease *l);
/* This machine's lease address, for its card ("udp:127.0.0.1:40123"). */
const char *farm_lease_addr(const farm_lease *l);

/*
 * farm_lease_set_config() - the configuration @config_id with CM @cm and
 * the @n members in @peers (this machine may be among them; it is
 * skipped). On the CM: expect a lease from every member, the clock of
 * each starting now. On another member: hold a lease at the CM, starting
 * with a request now. A member whose lease was running keeps it when the
 * CM stays the same. 0; -EINVAL (bad address, too many, @cm not listed);
 * -ESTALE (@config_id older than the current one).
 */
int farm_lease_set_config(farm_lease *l, uint64_t config_id, uint32_t cm,
                          const struct farm_lease_peer *peers,
                          unsigned n) FARM_MUST_CHECK;
/*
 * farm_lease_probe() - ask each of @peers whether its lease thread runs
 * (a PROBE datagram; a member answers in any configuration, a wedged or
 * paused one does not) and wait at most @timeout_ns for the answers.
 * @answered[i] says whether @peers[i] answered (this machine counts as
 * answered). Returns the number that answered, or -EINVAL. Not from a
 * lease callback (the lease thread delivers the answers).
 */
int farm_lease_probe(farm_lease *l, const struct farm_lease_peer *peers,
                     unsigned n, uint64_t timeout_ns, bool *answered);
/*
 * farm_lease_probe_dead() - the fabric saw @machine die: a probe does not
 * wait for its answer (it counts as not answering), one in progress
 * included, until a configuration leaves it out or names another
 * holder of its id (another lease address). NULL @l: a no-op.
 */
void farm_lease_probe_dead(farm_lease *l, uint32_t machine);
/*
 * farm_lease_retire() - this machine is a member no more (a configuration
 * left it out: removed, or let go): its lease thread neither renews nor
 * judges any lease, and raises no suspicion, until farm_lease_set_config
 * takes it back. The serve word is left as it is: nothing renews it, so
 * it lapses (a removed machine's lapsed long before it learns). NULL @l:
 * a no-op.
 */
void farm_lease_retire(farm_lease *l);
/* Report a suspicion from elsewhere (the fabric saw the peer die): it
 * goes through on_suspect as a lapse would. -ENOENT for a machine this
 * machine holds no lease with. */
int farm_lease_suspect(farm_lease *l, uint32_t machine);
/* While @on, renewals go on but no lease is judged, here or of anyone:
 * a whole-cluster restart, whose machines commit nothing before every
 * one has finished (its barrier) and may each run it in another
 * configuration (their first with every member restarted: the CM refuses
 * the renewals of a member left in an older one until it takes the
 * newer). Off: every lease is judged again from the join grace. */
void farm_lease_hold(farm_lease *l, bool on);
/* Whether this machine holds a live lease at the CM (the CM: always). */
bool farm_lease_valid(farm_lease *l);

void farm_lease_stats(farm_lease *l, struct farm_lease_stats *out);

/* Testing: stop answering and renewing (a wedged machine whose thread
 * still runs) while @on. */
void farm_lease_testing_mute(farm_lease *l, bool on);
/* Testing, fault-injection builds only (else -ENOTSUP): no lease lapses
 * in this process while @on (the bug the lease tests must catch). */
int farm_lease_testing_no_expiry(bool on);
/* Testing, fault-injection builds only (else -ENOTSUP): a member's
 * datagrams are taken from any source address while @on, as before
 * leases checked it (a zombie of a reused id's old holder renews). */
int farm_lease_testing_any_source(bool on);

#endif
