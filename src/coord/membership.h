/*
 * Cluster membership and configuration (ARCHITECTURE.md 2.3, 2.8). Internal;
 * not installed.
 *
 * A *view* is one configuration of the cluster: a config id and the members
 * (machine id and fabric address), sorted by id. Every machine that shares
 * a config id has the same view; a later configuration has a higher id.
 *
 * Two backends behind one interface:
 *
 * - static: the view is built once from a farm_config (the machine itself
 *   and its `peer` lines), config id 1; it never changes and nothing fails.
 *
 * - ZooKeeper: the view is the content of a configuration znode; members
 *   register with ephemeral znodes; the live member with the lowest id acts
 *   as configuration manager (CM) and writes a new configuration (config
 *   id + 1, naming itself as CM) with a versioned compare-and-set whenever
 *   the set of live members differs from the configuration. "Live" leaves
 *   out the incarnations the configuration lists as removed and the
 *   machines this machine was told to suspect (farm_membership_suspect:
 *   leases lapsed, recovery probed), so a suspected machine leaves within
 *   a lease rather than a session timeout, and a suspected CM is replaced
 *   by the next live id (its successors, in id order). Every member watches the
 * configuration znode and learns each new view. Layout under the cluster root R
 *   (default /libfarm/default):
 *
 *     R                persistent, empty
 *     R/config         persistent, the configuration as text:
 *                        "libfarm-config 1\n"
 *                        "config_id <decimal>\n"
 *                        "cm <id>\n"                  the manager (optional)
 *                        "member <id> <endpoint>\n"   one per member, by id
 *                        "domain <id> <name>\n"      failure domains, by id:
 *                                                     members' and departed
 *                                                     machines' (below)
 *                        "shadow <id> <name>\n"      departed machines whose
 *                                                     id is late now (a
 *                                                     reused id), by id (only
 *                                                     in "libfarm-config 3",
 *                                                     written when any is)
 *                        "incarnation <id> <cfg>\n"   a reused id's holder,
 *                                                     admitted in cfg (only
 *                                                     in "libfarm-config 2"
 *                                                     or 3, written when
 *                                                     any is)
 *                        "removed <id> <czxid>\n"     removed incarnations
 *                        "formed\n"                   had expect members
 *                        "late <id>\n"                joined late, in order
 *                        "gone <id>\n"                left the formed cluster
 *                        "lost <id>\n"                given up at a restart
 *                        "leaving <id>\n"             a member leaving
 *                                                     gracefully, in the
 *                                                     order asked
 *                        "pin <region> <id>\n"       a region the manager
 *                                                     placed (balance.c),
 *                                                     by region (only in
 *                                                     "libfarm-config 4",
 *                                                     written when any is)
 *                      (config_id 0 with no members until the first write)
 *     R/grow           persistent; "<id> <config id>": the grower that
 *                      said its share is complete in that configuration
 *                      (farm_membership_grown; read with a watch by the
 *                      manager, which then drops it from the late list)
 *     R/bump           persistent; "<id> <config id>": a member that asked
 *                      for a recovery round in that configuration
 *                      (farm_membership_bump; read with a watch by the
 *                      manager, which then writes the next one with
 *                      "bump <config id>")
 *     R/members        persistent, empty
 *     R/members/<id>   ephemeral, one per live machine (decimal id); its
 *                      data is the machine's endpoint, then "\nwire <n>"
 *                      (util/wire.h), then, when it has a failure domain,
 *                      "\ndomain <name>", then, when it started with an
 *                      empty directory, "\nfresh"
 *
 *   Threads: the ZooKeeper client runs two threads of its own; the module
 *   adds one worker thread per handle that makes every ZooKeeper call after
 *   open, writes configurations when it is the manager, and runs the
 *   callbacks. The client's own event thread only records events.
 *
 *   Failures: connection loss (server down or unreachable) makes the state
 *   CONNECTING; the session, the registration and the view are kept and the
 *   client reconnects by itself. Session expiry (the server dropped the
 *   session: this machine's registration is gone and the others have or
 *   will have a configuration without it) makes the state EXPIRED, and the
 *   worker re-joins automatically with a new session and a new registration
 *   marked stale (a new configuration with it follows, unless the cluster
 *   is formed: then its id is gone and the manager leaves it out, since
 *   its regions were recovered elsewhere). Each transition is logged
 *   (warn) and counted, and on_state runs.
 */
#ifndef FARM_COORD_MEMBERSHIP_H
#define FARM_COORD_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <farm/error.h>

#include "addrspace/ring.h"
#include "util/config.h"

#define FARM_VIEW_MAX      (FARM_CONFIG_MAX_PEERS + 1)
#define FARM_ENDPOINT_MAX  FARM_CONFIG_STR    /* with its NUL */
#define FARM_DOMAIN_MAX    FARM_CONFIG_DOMAIN /* with its NUL */
#define FARM_VIEW_MAX_PINS FARM_RING_MAX_PINS

struct farm_member {
	uint32_t id;
	char endpoint[FARM_ENDPOINT_MAX]; /* fabric address; shm: data dir */
	char domain[FARM_DOMAIN_MAX];     /* failure domain; "": none */
	bool fresh; /* registered with empty memory (ZooKeeper card) */
	bool stale; /* registered again after its session expired */
	/* The wire version its card names (util/wire.h; ZooKeeper only);
	 * 0: none named. */
	uint32_t wire;
	/* Which holder of the id this is: 0 for an id's first holder, the
	 * id of the configuration that admitted it for a holder that took
	 * the id of a machine the formed cluster had lost (a *reused* id).
	 * It only grows per id, so a frame, record or mark stamped with
	 * another incarnation's configuration is told from this one's
	 * (docs/architecture.md, "Ids and incarnations"). */
	uint32_t incarnation;
};

/* A machine that was a member with a failure domain and is not one now.
 * The configuration keeps it (and its domain) so that placement stays a
 * function of the configuration that never reorders the survivors on a
 * region's ring (ring.h, farm_ring_build_domains). */
struct farm_departed {
	uint32_t id;
	char domain[FARM_DOMAIN_MAX];
	/* A *shadow*: the machine left while it was walked (not late), and
	 * its id is late now: a reused id's new holder joined late (it may
	 * be a member, with a domain of its own) or has left again. The
	 * entry keeps the departed holder in the domain walk in its place
	 * and domain (farm_ring_machine.shadow), so the join of a new
	 * holder only appends. It goes when the id is no longer late: the
	 * holder grew (it then stands in the walk as itself), or the id left
	 * the late list (a plain departed machine is walked anyway). One
	 * entry per id: a shadow never adds to the list. */
	bool shadow;
};

/* A machine incarnation removed from the configuration (ZooKeeper: its
 * member znode's creation zxid). It stays out until it comes back as a
 * new incarnation (a new session). */
struct farm_removed {
	uint32_t id;
	int64_t incarnation;
};

struct farm_view {
	uint64_t config_id; /* 0: no configuration yet */
	bool has_cm;        /* the configuration names its manager */
	uint32_t cm;        /* the configuration manager (CM) */
	unsigned n;
	struct farm_member members[FARM_VIEW_MAX]; /* sorted by id, unique */
	unsigned nremoved;
	struct farm_removed removed[FARM_VIEW_MAX];
	unsigned ndeparted;
	struct farm_departed departed[FARM_VIEW_MAX]; /* sorted by id */
	/* Rejoin and growth: once a configuration has had
	 * the expected number of machines the cluster is formed (sticky);
	 * from then on a machine joining with empty memory is late
	 * (ring.h: it only fills replica lists the others leave short).
	 * late[] is in the order they joined and keeps ids that left, so a
	 * placement never changes when one comes back with its memory. */
	bool formed;
	unsigned nlate;
	uint32_t late[FARM_VIEW_MAX];
	/* Ids that left the formed cluster and have not come back. A
	 * machine registering under one with empty memory is admitted as
	 * a new incarnation of the id (farm_member.incarnation) when the
	 * membership reuses ids (farm_membership_attr.reuse_ids), refused
	 * otherwise; one with stale memory is refused. */
	unsigned ngone;
	uint32_t gone[FARM_VIEW_MAX];
	/* Ids whose memory the cluster gave up at a whole-cluster restart
	 * (farm_membership_forsake: the machine did not come back, its
	 * directory refused as damaged): the others restarted without it
	 * and recovered its data from replicas. Never admitted again under
	 * that id, with memory or without. Sticky. */
	unsigned nlost;
	uint32_t lost[FARM_VIEW_MAX];
	/* Written during a whole-cluster restart: the configuration the
	 * restarting manager's directory last had (its manifest); 0 while
	 * the cluster lives. A machine that comes back with memory under
	 * an id that left (gone) is admitted only while it is set: when the
	 * others lived on without it, its memory is stale. */
	uint64_t restart;
	/* A member asked for a recovery round in configuration @bump
	 * (farm_membership_bump: it holds a complete copy of a region its
	 * ring makes it primary of, and no round promoted it), and the
	 * manager wrote this configuration for it; 0: none. Every machine
	 * runs a round for a view with it set. */
	uint64_t bump;
	/* Members leaving gracefully (src/recovery/README.md, "Graceful
	 * leave"), in the order they asked: each is placed as before, and
	 * the regions it holds list their successors (ring.h), whose copies
	 * fill before it departs. Every listed id is a member; one that
	 * departs leaves the list. */
	unsigned nleaving;
	uint32_t leaving[FARM_VIEW_MAX];
	/* Machines that left gracefully (farm_membership_left: their
	 * successors' copies were complete and they had quiesced), in that
	 * order; carried on, like bump, while they stay out. No listed id
	 * is a member; the CM skips the lease wait for them (no transaction
	 * of theirs is in flight), and a leaver that reads its id here
	 * knows it was let go, not removed. */
	unsigned nleft;
	uint32_t left[FARM_VIEW_MAX];
	/* Chosen placement (ring.h, farm_ring_set_pins): regions the
	 * manager placed itself, by region, the machine each is pinned to.
	 * The manager chooses them when a machine grows (balance.c:
	 * farm_view_balance) and drops those of machines that departed
	 * (their regions fall back to the rings). */
	unsigned npins;
	struct farm_ring_pin pins[FARM_VIEW_MAX_PINS];
};

enum farm_membership_state {
	FARM_MEMBERSHIP_CONNECTING = 1, /* no live connection: not yet, or lost
	                                   (the session may still be valid) */
	FARM_MEMBERSHIP_CONNECTED = 2,  /* session live (static: always) */
	FARM_MEMBERSHIP_EXPIRED = 3,    /* session expired: this machine left
	                                   the configuration; re-joining */
	FARM_MEMBERSHIP_CLOSED = 4,
};

/* Counters; every one only grows. */
struct farm_membership_status {
	enum farm_membership_state state;
	bool registered;        /* our ephemeral znode exists (static: true) */
	uint64_t syncs;         /* times the view was read from ZooKeeper */
	uint64_t views;         /* views delivered (config id changed) */
	uint64_t conn_lost;     /* CONNECTED -> CONNECTING transitions */
	uint64_t expired;       /* session expiries */
	uint64_t rejoins;       /* new sessions after an expiry */
	uint64_t reclaimed;     /* dead incarnations' registrations replaced
	                           (farm_membership_attr.address) */
	uint64_t displaced;     /* removed incarnations' registrations of
	                           this id replaced by this machine's */
	uint64_t config_writes; /* configurations this machine wrote */
	uint64_t suspects;      /* machines farm_membership_suspect named */
	uint64_t cas_conflicts; /* its writes that lost the compare-and-set */
	uint64_t fast_writes;   /* of config_writes, those built from the
	                           last sync's reads (one round trip) */
	bool fast_ready;    /* manager: a suspicion now takes one round trip */
	uint64_t reg_reads; /* syncs that read every member's registration
	                       (the manager and its successor only) */
	/* The last configuration this machine wrote (CLOCK_MONOTONIC ns, 0:
	 * none): when the sync that wrote it began (the worker took the
	 * change) and when the compare-and-set returned; its id. */
	uint64_t t_write_begin_ns, t_write_ns, write_config_id;
	/* Configurations taken from the manager's NEW-CONFIG
	 * (farm_membership_offer) before ZooKeeper delivered them here, and
	 * offers refused (malformed, not from the configuration's manager,
	 * not naming this machine). */
	uint64_t offered, offers_refused;
};

struct farm_membership;

/* Runs on the membership worker thread, or its offer thread for a view
 * the manager sent (farm_membership_offer), never on both at once (static:
 * once, on the thread that calls farm_membership_open, before it returns)
 * with each new view, in config-id order. It must return quickly (it
 * delays the next view) and must not call farm_membership_close or
 * farm_membership_wait; farm_membership_view and farm_membership_status
 * are allowed. */
typedef void (*farm_view_fn)(void *ctx, const struct farm_view *v);
/* Runs on the worker thread of the manager right after its
 * compare-and-set wrote @v (@text, @len: the znode's bytes), before @v is
 * published here: the caller sends @text to the other members
 * (NEW-CONFIG, FaRM SOSP'15 5.2), who give it to farm_membership_offer.
 * It must return at once (hand the sends to another thread). */
typedef void (*farm_written_fn)(void *ctx, const struct farm_view *v,
                                const char *text, size_t len);
/* Runs on the worker thread when the state changes. Transitions that are
 * quicker than the worker may be coalesced (the counters are exact). */
typedef void (*farm_state_fn)(void *ctx, enum farm_membership_state s);

struct farm_membership_attr {
	uint32_t self_id;
	const char *endpoint; /* this machine's fabric address */
	const char *domain;   /* its failure domain; NULL or "": none */
	const char *zk;       /* NULL or "": static backend */
	const char *zk_root;  /* NULL: "/libfarm/default" */
	unsigned session_ms;  /* 0: 4000 (the server may adjust it) */
	unsigned connect_ms;  /* 0: 5000; bound on reaching ZooKeeper */
	/* static backend: the other machines */
	const struct farm_config_peer *peers;
	unsigned npeers;
	/* NULL, or the peers' failure domains ("": none), parallel */
	const char (*peer_domains)[FARM_CONFIG_DOMAIN];
	/* ZooKeeper: the machines the cluster is formed with (0: never
	 * formed, no machine is ever late), and whether this one starts
	 * with empty memory (a new data directory). */
	unsigned expect;
	bool fresh;
	/* ZooKeeper, as manager: admit a machine that registers with empty
	 * memory under an id the formed cluster lost (gone) as a new
	 * incarnation of that id (farm_member.incarnation), instead of
	 * refusing it. Every layer that could still hear from the id's old
	 * holder must check incarnations (src/node, view.c) before this is
	 * set: the node sets it. */
	bool reuse_ids;
	/* A machine restarting on its directory: the configuration its
	 * manifest names (farm_view.restart); 0: not restarting. */
	uint64_t restart;
	/* ZooKeeper: the fabric address @endpoint starts with, held by this
	 * process alone while it lives (a data directory it has locked, a
	 * port it listens on). A registration of this id by another session
	 * whose endpoint starts with the same address is a dead previous
	 * incarnation's (its session outlived it): it is replaced by ours at
	 * once instead of waited out. NULL or "": waited out. */
	const char *address;
	/* ZooKeeper: the worker and the client library's threads ask for
	 * SCHED_FIFO (util/rt.h; kept at normal priority without the
	 * privilege), as the lease thread does: a suspicion's configuration
	 * must not wait behind busy loops for a core (recovery_bench). */
	bool realtime;
	farm_view_fn on_view;       /* may be NULL */
	farm_state_fn on_state;     /* may be NULL */
	farm_written_fn on_written; /* may be NULL */
	void *ctx;
};

/*
 * farm_membership_open() - join the cluster.
 *
 * Static backend: builds the view and returns 0 (-EINVAL for a peer listed
 * twice or with the machine's own id, an empty endpoint, too many peers).
 *
 * ZooKeeper: connects, creates the layout if missing, registers this
 * machine and reads the configuration, then returns 0; the view may not
 * include this machine yet (farm_membership_wait for it). Errors:
 * -EINVAL (bad connect string, root path, endpoint, id); FARM_EUNAVAILABLE
 * when no server answered within connect_ms; -EADDRINUSE when another live
 * session holds this machine id for connect_ms + session_ms (a crashed
 * incarnation's registration is waited out); -EPROTO when the manager
 * the configuration names registered another wire version (util/wire.h:
 * it would never admit this machine); -ENOTSUP when libfarm was
 * built without the ZooKeeper client; another negative code from
 * ZooKeeper (logged). *out is set only on success.
 */
int farm_membership_open(const struct farm_membership_attr *a,
                         struct farm_membership **out) FARM_MUST_CHECK;
/* Same, from a machine configuration: zk, zk_root, zk_session_ms,
 * zk_connect_timeout_ms, machine_id, peers; the endpoint is `listen` on
 * verbs and the data directory otherwise. */
int farm_membership_open_config(const struct farm_config *c, farm_view_fn fn,
                                farm_state_fn sfn, void *ctx,
                                struct farm_membership **out) FARM_MUST_CHECK;
/* Leave: delete the registration (the others see the departure at once,
 * not after the session timeout), stop the worker, free. NULL is a no-op.
 * Not from a callback, and not while another thread still uses @m. */
void farm_membership_close(struct farm_membership *m);

/*
 * farm_membership_suspect() - leave machines @ids out of the live set
 * (ZooKeeper backend), as recovery decided after their leases lapsed and
 * a majority answered its probe. The worker writes a configuration
 * without them if this machine is then the lowest live id; each is
 * recorded there as a removed incarnation, so no later manager takes it
 * back. Returns at once: 0; -EINVAL; -ENOTSUP (static backend: nothing
 * ever changes); FARM_ECLOSED.
 */
int farm_membership_suspect(struct farm_membership *m, const uint32_t *ids,
                            unsigned n);
/*
 * farm_membership_grown() - growth (ring.h): this machine, the grower
 * (the first late member), holds a complete copy of every region of its
 * share in configuration @config_id, as the primaries of those regions
 * confirmed (farm_as_grow_check). The mark goes to ZooKeeper (R/grow);
 * the manager takes the machine out of the late list in the next
 * configuration if @config_id is still the one in force and the machine
 * still the grower, so it becomes an ordinary member: primary of its
 * share. Returns at once: 0; -EINVAL; -ENOTSUP (static backend);
 * FARM_ECLOSED.
 */
int farm_membership_grown(struct farm_membership *m, uint64_t config_id);
/*
 * farm_membership_bump() - ask for a recovery round: this machine holds a
 * complete copy of a region the ring of configuration @config_id makes it
 * primary of, which no round promoted (its copy was completed after that
 * configuration's round began: src/txn/copy.c). The mark goes to
 * ZooKeeper (R/bump); the manager writes the next configuration with
 * farm_view.bump set if @config_id is still the one in force and this
 * machine still a member, and every machine runs a round for it. Returns
 * at once: 0; -EINVAL; -ENOTSUP (static backend); FARM_ECLOSED.
 */
int farm_membership_bump(struct farm_membership *m, uint64_t config_id);
/*
 * farm_membership_leave() - ask to leave the cluster gracefully
 * (src/recovery/README.md, "Graceful leave"), having checked in
 * configuration @config_id that enough machines stay
 * (farm_view_may_leave). The mark goes to ZooKeeper (R/leave); the
 * manager lists this machine leaving in the next configuration if
 * @config_id is still the one in force and it is still a member (a
 * request of an older configuration was checked against other members:
 * ignored, the caller asks again). Returns at once: 0; -EINVAL;
 * -ENOTSUP (static backend: its members never change); FARM_ECLOSED.
 */
int farm_membership_leave(struct farm_membership *m, uint64_t config_id);
/*
 * farm_membership_left() - this machine, listed leaving in configuration
 * @config_id, has its handoff done: every region it held has its
 * replica count of complete copies without it, and it has quiesced (no
 * transaction of its own in flight or to come). The mark goes to
 * ZooKeeper (R/left); the manager writes the next configuration without
 * this machine, listing it left (farm_view.left), if @config_id is still
 * the one in force and this machine still leaving (a mark of an older
 * configuration is ignored: the copies were checked against other
 * lists; the caller checks again and asks again). Returns at once: 0;
 * -EINVAL; -ENOTSUP (static backend); FARM_ECLOSED.
 */
int farm_membership_left(struct farm_membership *m, uint64_t config_id);
/*
 * farm_view_may_leave() - may member @id of @v leave gracefully, with
 * @replicas copies of every region? 0: yes, or it is leaving already
 * (asking again changes nothing); -ENOENT: not a member; -EBUSY: fewer
 * than @replicas members would be left once it and the machines leaving
 * already have gone (nothing changes; a region would have no room for
 * its copies). -EINVAL for NULL.
 */
int farm_view_may_leave(const struct farm_view *v, uint32_t id,
                        unsigned replicas);
/*
 * farm_membership_restarted() - this machine's whole-cluster restart ran
 * (or it gave it up): from now on, as manager, it writes configurations
 * without the restart mark (farm_view.restart), so machines that come
 * back with memory under ids that left are refused. NULL is fine.
 */
void farm_membership_restarted(struct farm_membership *m);
/*
 * farm_membership_forsake() - give up machines @ids, which were members
 * of the configuration before a whole-cluster restart and have not come
 * back (ZooKeeper backend): the manager lists them as lost in its next
 * configuration, so the others restart without them (node/restart.c) and
 * none of them is admitted again under its id. Returns at once: 0;
 * -EINVAL; -ENOTSUP (static backend); FARM_ECLOSED.
 */
int farm_membership_forsake(struct farm_membership *m, const uint32_t *ids,
                            unsigned n);
/* Whether @id is among @ids[0..n) (a view's late, gone or lost list). */
bool farm_ids_have(const uint32_t *ids, unsigned n, uint32_t id);
/* Whether @v lists machine @id's incarnation @inc as removed. */
bool farm_view_removed(const struct farm_view *v, uint32_t id);

/*
 * farm_membership_offer() - the configuration @text (the znode's bytes,
 * @len) that machine @from sent as NEW-CONFIG right after its
 * compare-and-set wrote it (farm_written_fn). The compare-and-set on the
 * version read makes a configuration id name one configuration for good,
 * so a survivor may take it from the manager before its own ZooKeeper
 * read brings it: it is published (on_view, on the offer thread) when it
 * parses, names @from as its manager and this machine as a member, and is
 * newer than the current view; else it is dropped (a stale or repeated
 * one silently, the others counted as offers_refused). Copies @text and
 * returns at once, from any thread (a message handler): 0; -EINVAL;
 * -EMSGSIZE (longer than a configuration can be); -ENOTSUP (static
 * backend); FARM_ECLOSED; -ENOMEM.
 */
int farm_membership_offer(struct farm_membership *m, uint32_t from,
                          const char *text, size_t len) FARM_MUST_CHECK;

/* Copy the current view (config id 0 and no members before the first). */
int farm_membership_view(struct farm_membership *m, struct farm_view *out);
int farm_membership_status(struct farm_membership *m,
                           struct farm_membership_status *out);

/* A condition on the membership, evaluated under the module's lock: quick,
 * no farm_membership_* calls. */
typedef bool (*farm_membership_pred)(const struct farm_view *v,
                                     const struct farm_membership_status *s,
                                     void *arg);
/*
 * farm_membership_wait() - block until @pred holds, at most @timeout_ms
 * (negative: no bound). Sleeps on a condition variable signalled on every
 * view, state or counter change. Returns 0 (with the view that satisfied it
 * in @out when non-NULL), -ETIMEDOUT, FARM_ECLOSED when closed meanwhile,
 * -EINVAL.
 */
int farm_membership_wait(struct farm_membership *m, farm_membership_pred pred,
                         void *arg, int timeout_ms, struct farm_view *out);
/* Wait until the view has exactly @n members, this machine among them. */
int farm_membership_wait_members(struct farm_membership *m, unsigned n,
                                 int timeout_ms, struct farm_view *out);
/* Wait until the config id is above @config_id. */
int farm_membership_wait_newer(struct farm_membership *m, uint64_t config_id,
                               int timeout_ms, struct farm_view *out);

const char *farm_membership_state_name(enum farm_membership_state s);

/*
 * farm_zk_peek() - what ZooKeeper holds for the cluster under @root (NULL:
 * "/libfarm/default") at @zk, read without joining it (`farm status`):
 * the configuration znode's view (config_id 0 and no members when none was
 * written yet) and the registrations, R/members/<id>, sorted by id, each
 * with its endpoint (the machine's card) and incarnation (the znode's
 * creation zxid). Waits at most @connect_ms (0: 5000) for a server.
 * Returns 0; -EINVAL (bad connect string or root); FARM_EUNAVAILABLE (no
 * server answered); -ENOENT (no cluster under @root); FARM_ECORRUPT (a
 * configuration znode that does not parse); -ENOTSUP (built without the
 * ZooKeeper client); -ENOMEM; another negative code from ZooKeeper.
 */
struct farm_zk_peek {
	struct farm_view config;
	unsigned nlive;
	struct farm_member live[FARM_VIEW_MAX];
	int64_t live_incarnation[FARM_VIEW_MAX];
};
int farm_zk_peek(const char *zk, const char *root, unsigned connect_ms,
                 struct farm_zk_peek *out) FARM_MUST_CHECK;

/*
 * farm_zk_note_refused() - leave a refusal notice for the cluster under
 * @root at @zk: machine @id refused to restart on its damaged directory
 * (@why: the error, file and offset), R/refused/<id>, persistent. The
 * other machines of a whole-cluster restart give a member with a notice
 * up at once, as if it had failed (node.c; farm_membership_refused),
 * rather than wait for it; a machine that restarts under that id deletes
 * its notice. Returns 0, -EINVAL, FARM_EUNAVAILABLE, -ENOTSUP, or another
 * negative code from ZooKeeper.
 */
int farm_zk_note_refused(const char *zk, const char *root, uint32_t id,
                         const char *why);
/* Delete machine @id's refusal notice, if any: its directory passed the
 * check at this start (a notice from an earlier attempt is stale and
 * would have the others give it up). 0 (also when there was none), or an
 * error as farm_zk_note_refused's. */
int farm_zk_clear_refused(const char *zk, const char *root, uint32_t id);
/* The machines with a refusal notice, as the last sync read them (this
 * one left out), into @ids (FARM_VIEW_MAX entries); how many (0 without
 * ZooKeeper). */
unsigned farm_membership_refused(struct farm_membership *m, uint32_t *ids);

/*
 * farm_view_placement() - the machines placement works on (ring.h,
 * farm_ring_build_domains) for the members @ids[0..n) of @v (any subset of
 * its members) and @v's departed machines: each with its domain as a
 * number (1 + the rank of its name among the names @v uses; 0: none) and
 * its rank among @v's late machines, departed ones included (0: not
 * late). A shadow (farm_departed.shadow) is its id's late member's
 * farm_ring_machine.shadow when that member is among @ids, else a
 * departed machine that is not late. @out has room for n +
 * FARM_VIEW_MAX; returns how many it holds.
 */
unsigned farm_view_placement(const struct farm_view *v, const uint32_t *ids,
                             unsigned n, struct farm_ring_machine *out);
/*
 * farm_view_next_departed() - the departed machines of @next, the
 * configuration the manager writes after @cur, from @cur's departed
 * machines and members and @next's members and late list (the manager's
 * step, pure; struct farm_departed says which are shadows).
 */
void farm_view_next_departed(const struct farm_view *cur,
                             struct farm_view *next);
/*
 * farm_view_balance() - the manager's step choosing @x's pins (balance.c):
 * pins of machines that are not members of @x go; then, while @x has a
 * grower (ring.h), the balanced @regions[0..n) (any order) are spread
 * evenly over the ordinary members and the grower as primaries of the
 * grower's target: a region the rings would move to the grower is
 * pinned to its primary in force instead, and regions of the machines
 * with the most move to the grower (pinned to it) until none has more
 * than one above it. Deterministic (a function of @x, @attr, the set of
 * @regions), and a fixed point: run again on its result it changes
 * nothing. @attr: the rings' (the members' own, addrspace). 0, -EINVAL,
 * -ENOMEM (pins as they were, less the departed ones) or -ENOSPC (more
 * than FARM_VIEW_MAX_PINS pins: the rest as the rings place them).
 */
int farm_view_balance(struct farm_view *x, const struct farm_ring_attr *attr,
                      const uint32_t *regions, unsigned n);
/*
 * farm_membership_balance() - this machine's list of balanced regions
 * (the KV store's shard regions, told by the node) and its rings'
 * attributes, which it uses when it manages (farm_view_balance on every
 * configuration it writes). Every machine of a store sets the same list,
 * so a new manager chooses as the old one did. A manager that never set
 * one keeps the pins it finds (less the departed). Copies @regions.
 * 0, -EINVAL (n over FARM_VIEW_MAX_PINS) or -ENOMEM.
 */
int farm_membership_balance(struct farm_membership *m,
                            const struct farm_ring_attr *attr,
                            const uint32_t *regions, unsigned n);
/* Is @s a usable failure-domain name: 1 to FARM_DOMAIN_MAX - 1 bytes of
 * letters, digits and ._:- ? */
bool farm_domain_valid(const char *s);

/* View helpers. */
const struct farm_member *farm_view_find(const struct farm_view *v,
                                         uint32_t id);
bool farm_view_equal(const struct farm_view *a, const struct farm_view *b);
/* farm_view_equal but for the config id: the same members, removed,
 * departed, late, gone and lost machines, manager and restart mark. */
bool farm_view_same_members(const struct farm_view *a,
                            const struct farm_view *b);
/* The configuration znode's text (format above). farm_view_format returns
 * the length written (without NUL) or -ENOBUFS; farm_view_parse returns 0
 * or FARM_ECORRUPT (anything malformed: unknown line, ids not increasing,
 * empty or too long endpoint, too many members). */
int farm_view_format(const struct farm_view *v, char *buf, size_t len);
int farm_view_parse(const char *buf, size_t len, struct farm_view *v);

#endif /* FARM_COORD_MEMBERSHIP_H */
