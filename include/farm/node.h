/*
 * libfarm machines: everything one application process needs to take part
 * in a cluster, put together from a configuration file (docs/config.md).
 *
 *   farm_node_open_file()  fabric, messaging (config `threads` event
 *                          loops), the address space, the allocator and
 *                          the transaction manager; publishes this
 *                          machine's card (how peers reach it); or
 *                          farm_node_open_conf() from a configuration
 *                          built in memory (include/farm/config.h)
 *   (register message handlers on farm_node_msg() here, and create the
 *    KV store, farm_kv_create(), whose handlers must exist before the
 *    loops run)
 *   farm_node_start()      starts one thread per loop (or none: see
 *                          farm_node_set_app_loops) and joins the
 *                          cluster: static membership (`peer` lines) or
 *                          ZooKeeper (`zk`)
 *   farm_node_wait_members()  until the cluster has the machines expected
 *   farm_node_close()      leaves, stops the loops, frees everything
 *
 * Machine ids run from 0 to the configuration's max_machines - 1 (at most
 * FARM_NODE_MAX_MACHINES - 1). Errors are negative
 * codes (farm_strerror()).
 */
#ifndef FARM_NODE_H
#define FARM_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/error.h>
#include <farm/fabric.h>
#include <farm/msg.h>
#include <farm/txn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Machine ids are below this, the most a configuration's `max_machines`
 * allows; a machine's own ids are below its `max_machines` (default
 * FARM_NODE_DEFAULT_MACHINES), which every machine of a cluster shares. */
#define FARM_NODE_MAX_MACHINES     1024u
#define FARM_NODE_DEFAULT_MACHINES 64u

typedef struct farm_node farm_node;

/*
 * farm_node_open_file() - open a machine from the configuration file
 * @path (docs/config.md), with the FARM_<KEY> environment overrides
 * applied over it. Returns 0 and the machine in *@out; -EINVAL for a bad
 * configuration or arguments (the reason is logged, with the file and
 * line), a negated errno when the file cannot be read, or the first
 * failing layer's code (logged).
 */
FARM_API FARM_MUST_CHECK int farm_node_open_file(const char *path,
                                                 farm_node **out);

/*
 * farm_node_set_app_loops() - before farm_node_start: the application's
 * own threads will run the event loops. farm_node_start then starts no
 * thread; thread i opens loop i with farm_node_loop_open (transactions
 * attached), drives it (farm_loop_wait, the *_sync wrappers,
 * farm_loop_poll) and closes it with farm_node_loop_close before
 * farm_node_close. Peers' requests to a loop are served only while its
 * thread polls it. Ignored after farm_node_start.
 */
FARM_API void farm_node_set_app_loops(farm_node *n, bool on);

/*
 * farm_node_start() - start the loops (unless the application runs them)
 * and join the cluster. Static membership waits at most @timeout_ms
 * (<= 0: 30 s) for the peers' cards to appear. Returns 0; -EINVAL when
 * already started or @n is NULL; -EAGAIN when a thread cannot be made;
 * a loop's or the membership's error (FARM_EUNAVAILABLE: ZooKeeper could
 * not be reached; -EPROTO: the cluster's manager runs a build of another
 * wire version, which would never admit this one).
 */
FARM_API FARM_MUST_CHECK int farm_node_start(farm_node *n, int timeout_ms);

/*
 * farm_node_loop_open() - with application-run loops, after
 * farm_node_start: bind the calling thread to loop @i (< nthreads), with
 * transactions attached. Returns 0 and the loop; -EINVAL (loops not
 * application-run, not started, bad @i); -EBUSY (already open).
 */
FARM_API FARM_MUST_CHECK int farm_node_loop_open(farm_node *n, unsigned i,
                                                 farm_loop **out);
/* Close a loop farm_node_loop_open opened, on its thread. */
FARM_API void farm_node_loop_close(farm_node *n, farm_loop *loop);

/*
 * farm_node_wait_members() - wait until the cluster's view has @count
 * machines and the address space uses it. @timeout_ms < 0: no limit.
 * A machine that joins a formed cluster late (a new machine_id, an empty
 * directory) waits only until it is a member. In a whole-cluster restart
 * the previous members that do not come back are given up after
 * `restart_wait_ms` (docs/config.md): it returns once the others have
 * restarted, with @count less those machines.
 * Returns 0, -ETIMEDOUT, -EINVAL, or -EEXIST: this machine is not
 * admitted: it started with an empty directory under the id of a machine
 * that left the (formed) cluster, or under one a restart gave up; a
 * failed machine rejoins under a new `machine_id` (it then takes backup
 * copies where replicas are short).
 */
FARM_API FARM_MUST_CHECK int
farm_node_wait_members(farm_node *n, unsigned count, int timeout_ms);
/* The machines the configuration says to wait for: `expect_machines`, or
 * the `peer` lines + 1 with static membership, or 1 with ZooKeeper. */
FARM_API unsigned farm_node_expected_machines(const farm_node *n);

/* Leave the cluster, stop the loops this library started, free
 * everything. Application-run loops must be closed first. NULL is fine. */
FARM_API void farm_node_close(farm_node *n);
/* Clean shutdown: as farm_node_close, but the machine's region copies and
 * logs stay in its data directory (with a manifest marked clean), so
 * starting every machine of the cluster again on the same directories
 * brings the cluster back with every committed transaction
 * (src/node/restart.c). Stop issuing transactions first. */
FARM_API void farm_node_shutdown(farm_node *n);
/* The first step of a clean whole-cluster shutdown: call it on every
 * machine before any of them calls farm_node_shutdown. From here on the
 * configuration kept for the restart is the current one, not the views of
 * machines leaving one by one (each would record fewer members, and the
 * restart waits for the members it recorded). */
FARM_API void farm_node_quiesce(farm_node *n);

/*
 * farm_node_leave() - leave the cluster gracefully, handing this
 * machine's data off first (ZooKeeper membership only;
 * src/recovery/README.md, "Graceful leave"). The machine asks to be
 * listed leaving (checked first: at least `replicas` machines must stay
 * once it and the machines leaving already have gone); the regions it
 * holds gain successors, whose copies data recovery fills while this
 * machine still serves; once every one is complete it stops starting
 * commits (farm_tx_commit then fails -ESHUTDOWN), waits for its own in
 * flight to end, and the next configuration goes on without it. That is
 * not a failure: no lease wait, no suspicion. Loop 0 must be served
 * meanwhile by another thread (the library's loops are; with
 * application-run loops, call this from another thread). Returns 0 (the
 * configuration without this machine is applied: farm_node_close it),
 * -EBUSY (too few machines would stay: nothing changed), -EPERM (this
 * machine is the configuration manager, whose role is not handed off:
 * nothing changed), -ENOTSUP (static membership), -EALREADY (another
 * farm_node_leave runs on this machine, from another thread or the
 * control socket's `leave`: one leave at a time, so this call is
 * refused at once and changes nothing; that one goes on, and
 * farm_node_left tells how it ended), -ETIMEDOUT (not let go
 * within @timeout_ms; the machine stays listed leaving until a later call
 * or its departure. Before its handoff was said, commits are let in
 * again. After (the mark R/left written in the configuration in force)
 * the machine stays quiesced, farm_tx_commit failing -ESHUTDOWN: the
 * manager may still let it go on the mark's promise that no commit of
 * its own is to come. Then call this again, which waits on for the
 * configuration without this machine (0), or farm_node_close it. In a
 * later configuration that still lists it the mark is void: a call then
 * checks the handoff and says it anew, and one that gives up lets
 * commits in again), FARM_ECLOSED
 * (removed as a failure meanwhile), -ECANCELED (farm_node_close began
 * meanwhile, from another thread or on SIGTERM in `farm machine`: the
 * leave gives up at once rather than hold the close; listed leaving
 * and not yet let go, the machine's close is then a failure, recovered
 * as one), -EINVAL.
 */
FARM_API FARM_MUST_CHECK int farm_node_leave(farm_node *n, int timeout_ms);

/* This machine's id (0 for NULL). */
FARM_API uint32_t farm_node_id(const farm_node *n);
/* Event loops (threads) per machine (config `threads`). */
FARM_API unsigned farm_node_nthreads(const farm_node *n);
/* Loop @i once started (NULL before, for a bad @i, or for an
 * application-run loop that is not open). Its own thread runs it. */
FARM_API farm_loop *farm_node_loop(const farm_node *n, unsigned i);

/*
 * farm_node_run() - run @fn(loop, @ctx, status) on loop @i's thread and
 * wait for it to finish: for code outside the loops (a main thread) that
 * must act on a loop. Not from a loop's own thread. Returns 0, the work
 * item's status (-ECANCELED when the loop closed first), -EINVAL (no such
 * loop, @fn NULL) or -ENOMEM.
 */
FARM_API int farm_node_run(farm_node *n, unsigned i, farm_work_fn fn,
                           void *ctx);

/*
 * Configurations. Every configuration of the cluster has an id that only
 * grows; machines join and leave (or are removed after a failure) by a
 * new one. farm_node_config_id() returns the id in force on this machine
 * (0 before the first). farm_node_on_config() sets @fn (NULL: none),
 * called after each new configuration is applied, on the membership's
 * thread, with its id, its member count and whether this machine is
 * still a member (false: it was removed, and it stops serving); @fn must
 * return quickly and must not call farm_node_close.
 * farm_node_removed() says whether this machine was removed from the
 * cluster (its lease lapsed or it stopped answering): operations then
 * fail, and the machine must be restarted as a new incarnation.
 */
typedef void (*farm_node_config_fn)(void *ctx, uint64_t config_id,
                                    unsigned members, bool member);
FARM_API uint64_t farm_node_config_id(farm_node *n);
FARM_API void farm_node_on_config(farm_node *n, farm_node_config_fn fn,
                                  void *ctx);
FARM_API bool farm_node_removed(farm_node *n);
/* Whether this machine left the cluster gracefully (farm_node_leave):
 * a configuration without it listed it left, as no failure. */
FARM_API bool farm_node_left(farm_node *n);

/*
 * farm_replicas() - where the object at @a lives: the region @a names, its
 * primary and its backups (in promotion order; an extra backup that a
 * machine growing into the region holds comes last), in the configuration
 * in force on this machine, whose id is out->config_id (one view: the id
 * and the machines are read together). A later configuration may move
 * them (farm_node_on_config says when). The region need not be allocated:
 * this is where its copies are placed. Returns 0; -EINVAL (NULL, or an
 * address no region of this cluster holds: region 0 or an offset past the
 * region size, or a region id past the last one the cluster places);
 * -ENOENT (no configuration yet).
 */
#define FARM_REPLICAS_MAX 9u /* FARM_RING_MAX_REPLICAS (8) and an extra */
struct farm_replicas {
	uint64_t config_id;
	uint32_t region;
	uint32_t primary;
	unsigned nbackups;
	uint32_t backups[FARM_REPLICAS_MAX - 1];
};
FARM_API FARM_MUST_CHECK int farm_replicas(farm_node *n, farm_gaddr a,
                                           struct farm_replicas *out);

/* The machine's messaging (register handlers before farm_node_start),
 * fabric and transaction manager (farm_tx_begin, farm_lf_read). */
FARM_API farm_msg *farm_node_msg(const farm_node *n);
FARM_API farm_fabric *farm_node_fabric(const farm_node *n);
FARM_API farm_txm *farm_node_txm(const farm_node *n);

/* Memory a machine holds for talking to and serving the others, in
 * bytes: what grows with the number of machine ids and threads. Sized
 * and versioned as farm_kv_table_stats: the caller sets @size to
 * sizeof(farm_node_mem) as it was compiled; the library fills at most
 * that many bytes and sets @size to what it filled and @version. Fields
 * are only ever added at the end. */
#define FARM_NODE_MEM_VERSION 2u
typedef struct farm_node_mem {
	uint32_t size;    /* in: bytes of *out the caller has */
	uint32_t version; /* out: FARM_NODE_MEM_VERSION */
	/* The message region and the send mirrors of the channels made
	 * (farm_msg_memory). */
	uint64_t msg;
	/* The transaction log arena: a ring per (coordinator id, thread). */
	uint64_t log;
	/* Tables sized by machine ids or threads: messaging's peers and
	 * loop tables, the logs' peers, writers, readers and record
	 * queues, the node's own per-machine state. */
	uint64_t meta;
	/* The machine ids the layouts are sized for. */
	uint64_t max_machines;
	/* Version 2: of msg and log, the bytes in memory. The message region
	 * and the log arena are laid out for every id but backed only where
	 * written (FARM_MEM_SPARSE): a page per ring and log of each peer,
	 * and whole rings and logs of the peers that message or commit
	 * here; send mirrors as frames are staged. Ids that are not peers
	 * cost nothing. */
	uint64_t msg_resident;
	uint64_t log_resident;
} farm_node_mem;

/* Fill *@out for @n; any thread, once farm_node_open returned. -EINVAL
 * for NULL arguments or a @size below the first counter's end. */
FARM_API FARM_MUST_CHECK int farm_node_memory(const farm_node *n,
                                              farm_node_mem *out);

#ifdef __cplusplus
}
#endif
#endif /* FARM_NODE_H */
