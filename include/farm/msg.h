/*
 * libfarm messaging: FaRM's ring-buffer channels over one-sided WRITEs, an
 * event loop per thread, RPC and function shipping.
 *
 * A machine creates one farm_msg on its fabric. It owns a message region:
 * one ring per (sender machine, sender thread, receiver thread), written
 * by the sender with one-sided WRITEs and polled by the receiving thread;
 * no CPU of the receiver takes part in a send. Peers are added with the
 * region descriptor farm_msg_desc() returns on their side.
 *
 * Each of the machine's @nthreads threads opens its own event loop
 * (farm_loop_open) and drives it (farm_loop_poll / farm_loop_run /
 * farm_loop_wait). Everything that waits takes a continuation, which runs
 * on the loop (thread) that started the operation. All calls on a loop are
 * made by its thread, except farm_loop_post() and farm_loop_stop(), which
 * any thread may call.
 *
 * Messages have a 16-bit type; handlers are registered by type on the
 * farm_msg (before the loops start) and run on the receiving loop. A
 * message is a one-way send, an RPC request or an RPC reply. Payloads are
 * byte strings of 0..farm_msg_max_payload() bytes, valid during the
 * handler only.
 *
 * Errors are negative codes (farm_strerror). A malformed message from a
 * peer breaks only the channel it came on: it is counted and logged and
 * the channel is no longer read.
 */
#ifndef FARM_MSG_H
#define FARM_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <farm/error.h>
#include <farm/fabric.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct farm_msg farm_msg;
typedef struct farm_loop farm_loop;

/* Message types at or above this are reserved for libfarm's own layers. */
#define FARM_MSG_TYPE_USER_MAX 0xefffu
#define FARM_MSG_TYPES         0x10000u

typedef struct farm_msg_attr {
	/* Threads (event loops) on every machine; all machines of a cluster
	 * use the same value. 1..64 (0: 1). */
	unsigned nthreads;
	/* Machine ids are below this; all machines use the same value.
	 * 1..1024 (0: 16). */
	unsigned max_machines;
	/* Bytes of each ring: a power of two, 4 KiB..64 MiB (0: 256 KiB).
	 * All machines use the same value. The largest payload is about an
	 * eighth of it (farm_msg_max_payload). */
	uint32_t ring_size;
	/* Messages a loop queues locally per destination thread while the
	 * ring is full, before sends fail with -ENOBUFS (0: 4096). */
	uint32_t sendq_max;
	/* RPCs a loop may have outstanding (0: 4096). */
	uint32_t max_calls;
	/* A loop that has found no work for this long parks until a message
	 * or a posted work item arrives (0: 200 us). */
	uint64_t park_after_ns;
	/* How long a doorbell posted with farm_loop_rdma_lazy() may wait
	 * for others to the same loop, so one wake-up serves them all
	 * (0: none wait; farm_loop_rdma_lazy is farm_loop_rdma_wake). */
	uint64_t lazy_bell_ns;
	/* Never park: poll continuously (benchmarks, latency-sensitive runs;
	 * the default on verbs, where the wake-up doorbell does not exist). */
	bool busy_poll;
	/* Pin loop i to CPU i modulo the CPUs this process may use (default
	 * off on shm, where machines share the host's cores). */
	bool pin;
} farm_msg_attr;

/*
 * farm_msg_create() - messaging for this machine on @fab.
 * Allocates and registers the message region. Returns 0, -EINVAL for bad
 * attributes, -ENOMEM/-ENOSPC when the region cannot be had.
 */
FARM_API FARM_MUST_CHECK int
farm_msg_create(farm_fabric *fab, const farm_msg_attr *attr, farm_msg **out);
/* Destroy; every loop must be closed first (-EBUSY otherwise). */
FARM_API FARM_MUST_CHECK int farm_msg_destroy(farm_msg *msg);
/* The descriptor peers pass to farm_msg_add_peer() to reach us. */
FARM_API farm_mr_desc farm_msg_desc(const farm_msg *msg);
FARM_API uint32_t farm_msg_machine_id(const farm_msg *msg);
FARM_API unsigned farm_msg_nthreads(const farm_msg *msg);
FARM_API unsigned farm_msg_max_machines(const farm_msg *msg);
/* Largest payload of one message. */
FARM_API uint32_t farm_msg_max_payload(const farm_msg *msg);

/* Memory messaging holds on this machine, in bytes. Sized and
 * versioned as farm_node_mem (include/farm/node.h). */
#define FARM_MSG_MEM_VERSION 3u
typedef struct farm_msg_mem {
	uint32_t size;    /* in: bytes of *out the caller has */
	uint32_t version; /* out: FARM_MSG_MEM_VERSION */
	/* The message region (rings, head-back and park words): registered
	 * for the peers' WRITEs and, on shm, allocated whole at creation. */
	uint64_t region;
	/* The send mirrors of the channels made so far (ring_size each,
	 * one per (local loop, remote machine, remote thread) used), as
	 * address space: see mirrors_resident. */
	uint64_t mirrors;
	/* Tables sized by machine ids and threads: the peers and their
	 * thresholds, and each open loop's channel tables. */
	uint64_t tables;
	/* Of region, the bytes in memory (version 2): the region is sparse
	 * (FARM_MEM_SPARSE), so rings no peer wrote cost nothing. */
	uint64_t region_resident;
	/* Of mirrors, the bytes in memory (version 3): a mirror takes a
	 * page when a frame is first staged in it, so a channel that
	 * carried little costs little (verbs: registration pins it
	 * whole). */
	uint64_t mirrors_resident;
} farm_msg_mem;

/* Fill *@out for @msg (a snapshot: loops may be making channels). 0;
 * -EINVAL for NULL arguments or a @size below the first counter's end. */
FARM_API FARM_MUST_CHECK int farm_msg_memory(farm_msg *msg, farm_msg_mem *out);

/*
 * farm_msg_add_peer() - make machine @id (at fabric address @addr, message
 * region @desc) reachable. Thread-safe; loops connect lazily on first use.
 * -EINVAL: bad id (ours, or >= max_machines) or a descriptor whose length
 * does not match our layout (the peer runs another nthreads, max_machines
 * or ring_size); -EEXIST: already added with another descriptor.
 */
FARM_API FARM_MUST_CHECK int farm_msg_add_peer(farm_msg *msg, uint32_t id,
                                               const char *addr,
                                               const farm_mr_desc *desc);

/*
 * farm_msg_replace_peer() - machine @id is a new holder of its id (a new
 * incarnation: a new process, new message rings at @addr, @desc): the
 * next messages and one-sided operations go there. Every loop must then
 * run farm_loop_forget_peer(loop, @id) on its own thread (before it sends
 * to @id again) to start its channels with @id afresh; @id's frames should
 * be refused (farm_msg_peer_min_config) until every loop has, or one read
 * early is answered on the old holder's channel. Thread-safe.
 * -EINVAL as farm_msg_add_peer; a machine not added yet is added.
 */
FARM_API FARM_MUST_CHECK int farm_msg_replace_peer(farm_msg *msg, uint32_t id,
                                                   const char *addr,
                                                   const farm_mr_desc *desc);
/*
 * farm_loop_forget_peer() - on @loop's thread: its channels with machine
 * @id start afresh (a new incarnation, farm_msg_replace_peer): the rings
 * it receives from @id are read from their start, the rings it sends to
 * are made anew at the peer's new descriptor, its endpoints reconnect.
 * Messages queued for @id and not yet written are dropped; calls waiting
 * for @id's replies time out. -EINVAL: bad arguments or another thread.
 */
FARM_API FARM_MUST_CHECK int farm_loop_forget_peer(farm_loop *loop,
                                                   uint32_t id);

/*
 * Configurations. Every frame carries the id its sender last set with
 * farm_msg_set_config() (0 until then). farm_msg_peer_min_config() makes
 * this machine refuse frames from machine @id stamped with an older id
 * than @cfg (counted as refused_config, logged, never delivered; their
 * requests get no reply) and sends to it fail with FARM_EPEERDEAD when
 * @cfg is UINT32_MAX: a machine removed from the configuration gets
 * UINT32_MAX, and when it comes back (a new incarnation) the id of the
 * configuration that takes it in. Members' frames stamped with an older
 * id than ours are accepted: machines take a configuration at different
 * times, and the layers above check it where it matters (log records,
 * recovery messages, shard ownership). -EINVAL: bad id.
 */
FARM_API FARM_MUST_CHECK int farm_msg_set_config(farm_msg *msg, uint32_t cfg);
FARM_API FARM_MUST_CHECK int
farm_msg_peer_min_config(farm_msg *msg, uint32_t id, uint32_t cfg);

/*
 * farm_msg_probe() - FaRM's reconfiguration probe: a one-sided READ of the
 * message-region header of each machine @ids[0..n) (added with
 * farm_msg_add_peer), on endpoints and a completion queue of the probe's
 * own, so it never waits behind messages and needs no loop. @ok[i] is
 * true when machine @ids[i]'s memory answered within @timeout_ns with its
 * own header (this machine always answers). The calling thread parks
 * while it waits. One probe runs at a time; any thread. Returns how many
 * answered, -EINVAL (a bad argument or id) or -ENOMEM.
 */
FARM_API FARM_MUST_CHECK int farm_msg_probe(farm_msg *msg, const uint32_t *ids,
                                            unsigned n, uint64_t timeout_ns,
                                            bool *ok);

/* ---- handlers ------------------------------------------------------------ */

/* A received message, valid during the handler. */
typedef struct farm_msg_in {
	uint32_t src_machine;
	uint16_t src_thread;
	uint16_t type;
	const void *payload;
	uint32_t len;
	/* For requests: who to reply to. Copy it to reply later. */
	struct farm_msg_token {
		uint64_t call_id; /* 0: a one-way message (no reply) */
		uint32_t machine;
		uint16_t thread;
		uint16_t type;
	} token;
} farm_msg_in;

typedef void (*farm_msg_handler_fn)(farm_loop *loop, const farm_msg_in *in,
                                    void *arg);

/* Register @fn for @type (<= FARM_MSG_TYPE_USER_MAX for applications).
 * Before the loops run. -EEXIST when taken. A message of a type with no
 * handler breaks its channel (it is malformed from our point of view). */
FARM_API FARM_MUST_CHECK int farm_msg_handle(farm_msg *msg, uint16_t type,
                                             farm_msg_handler_fn fn, void *arg);

/* ---- loops --------------------------------------------------------------- */

/* Bind the calling thread to loop @idx (< nthreads). -EBUSY when open. */
FARM_API FARM_MUST_CHECK int farm_loop_open(farm_msg *msg, unsigned idx,
                                            farm_loop **out);
/* Close (on its thread): outstanding RPCs complete with -ECANCELED,
 * queued sends are dropped and work items still queued run with
 * their status set to -ECANCELED. */
FARM_API void farm_loop_close(farm_loop *loop);
FARM_API unsigned farm_loop_index(const farm_loop *loop);
FARM_API farm_msg *farm_loop_msg(const farm_loop *loop);

/* One pass: completions, rings, work items, timers, flush sends. Never
 * blocks. Returns how many events it handled (>= 0). Called from a
 * handler, continuation or work item of the same loop it does nothing
 * and returns 0 (farm_loop_wait returns -EDEADLK): they must not wait. */
FARM_API int farm_loop_poll(farm_loop *loop);
/* Poll until farm_loop_stop(); parks when idle (unless busy_poll). */
FARM_API void farm_loop_run(farm_loop *loop);
/* Make farm_loop_run() return (any thread). */
FARM_API void farm_loop_stop(farm_loop *loop);
/* Poll (parking when idle) until *@flag becomes non-zero or @timeout_ns
 * passes (0: no limit). Returns 0 or -ETIMEDOUT. The blocking wrapper
 * every asynchronous call can be driven with. Set the flag from a
 * continuation or work item of this loop: a store from another thread is
 * seen only when the loop next wakes (post a work item to wake it). */
FARM_API int farm_loop_wait(farm_loop *loop, const volatile int *flag,
                            uint64_t timeout_ns);
/* On @loop's thread: something the loop polls for (a poller's paced
 * retry) is due at @at_ns (farm_now_ns's clock), so an idle loop parks no
 * longer than until then; what wakes a parked loop (doorbells, work items,
 * messages) still wakes it earlier. The earliest time asked for holds
 * until a pass finds it reached. */
FARM_API void farm_loop_wake_by(farm_loop *loop, uint64_t at_ns);
/* Whether farm_loop_wait may run now: false from inside a handler,
 * continuation or work item of @loop (where it returns -EDEADLK). A
 * blocking wrapper asks before it posts, so it never returns while an
 * operation still writes into its caller's buffer. */
FARM_API bool farm_loop_can_wait(const farm_loop *loop);

/* Work items. @status is 0, or -ECANCELED when the loop closed first. */
typedef void (*farm_work_fn)(farm_loop *loop, void *ctx, int status);
/* Queue @fn on @loop; any thread. Wakes the loop if parked. -ENOMEM. */
FARM_API FARM_MUST_CHECK int farm_loop_post(farm_loop *loop, farm_work_fn fn,
                                            void *ctx);

/*
 * farm_loop_defer() - farm_loop_post() for the loop's own thread only (a
 * handler, continuation or the code driving the loop): @fn runs at the
 * start of the next pass, with -ECANCELED if the loop closes first. No
 * atomics and no allocation in the steady state: what completing an
 * operation "later, not inline" costs. -ENOMEM.
 */
FARM_API FARM_MUST_CHECK int farm_loop_defer(farm_loop *loop, farm_work_fn fn,
                                             void *ctx);

/* ---- sending ------------------------------------------------------------- */

/*
 * farm_msg_send() - one-way message to loop @thread of machine @machine
 * (ours included). Queued in order per destination; leaves at the end of
 * this loop pass (or farm_loop_flush). Returns 0; -EMSGSIZE: payload too
 * large; -ENOENT: unknown machine; -EINVAL: bad thread or type;
 * -ENOBUFS: the destination's ring is full and the local queue is at
 * sendq_max; FARM_EPEERDEAD: the machine is known dead; FARM_ECORRUPT: the
 * channel is broken.
 */
FARM_API FARM_MUST_CHECK int farm_msg_send(farm_loop *loop, uint32_t machine,
                                           unsigned thread, uint16_t type,
                                           const void *payload, uint32_t len);
/* Post every queued frame now (one doorbell per destination). */
FARM_API void farm_loop_flush(farm_loop *loop);
/* Destinations with messages not yet written to their rings (queued for
 * room, or staged): 0 means everything sent so far has left this machine.
 * Poll until it is 0 before closing a loop whose sends must not be lost. */
FARM_API unsigned farm_loop_unsent(const farm_loop *loop);

/* RPC completion: @status 0 with the reply, or a negative code and no
 * reply (-ETIMEDOUT, FARM_EPEERDEAD, -ECANCELED, or the code the handler
 * replied with through farm_msg_reply_error). Runs on the calling loop. */
typedef void (*farm_rpc_fn)(farm_loop *loop, void *ctx, int status,
                            const void *reply, uint32_t len);

/*
 * farm_msg_call() - request/response. @timeout_ns 0: 1 s, counted from
 * the loop's next check of its calls (every 256 busy passes, every idle
 * one), not read here. @cont runs exactly once, on this loop, unless
 * this returns an error (then never).
 * Errors as farm_msg_send, plus -EAGAIN when max_calls are outstanding.
 */
FARM_API FARM_MUST_CHECK int farm_msg_call(farm_loop *loop, uint32_t machine,
                                           unsigned thread, uint16_t type,
                                           const void *req, uint32_t len,
                                           uint64_t timeout_ns,
                                           farm_rpc_fn cont, void *ctx);
/* Reply to a request, from its handler or later (any time, on any loop of
 * this machine). A token whose caller gave up is answered harmlessly. */
FARM_API FARM_MUST_CHECK int farm_msg_reply(farm_loop *loop,
                                            const struct farm_msg_token *tok,
                                            const void *reply, uint32_t len);
/*
 * farm_msg_reply_begin() - a reply written in place: returns where the
 * @len payload bytes of the reply to @tok go (in the send mirror of the
 * ring to the caller when it has room, else a buffer of the loop); write
 * all @len of them there, then call farm_msg_reply_end(). A reply built
 * there is not copied again before the fabric's WRITE (farm_msg_reply
 * copies its payload into the mirror). Between the two, nothing else may
 * be sent on @loop (-EBUSY) and farm_loop_flush waits for the end; a
 * handler ends what it began before it returns. NULL on error, with
 * *@err (when not NULL) set as farm_msg_reply would return it, or -EBUSY
 * when a reply is already open.
 */
FARM_API void *farm_msg_reply_begin(farm_loop *loop,
                                    const struct farm_msg_token *tok,
                                    uint32_t len, int *err);
/* The reply begun is complete: 0, or (when it was not in place) the
 * error farm_msg_reply would return; -EINVAL when none was begun. */
FARM_API FARM_MUST_CHECK int farm_msg_reply_end(farm_loop *loop);
/* Reply with an error code (< 0) that the caller's continuation receives. */
FARM_API FARM_MUST_CHECK int
farm_msg_reply_error(farm_loop *loop, const struct farm_msg_token *tok,
                     int status);

/* ---- one-sided operations ------------------------------------------------ */

/* Completion of a one-sided operation: @status 0, or the completion's
 * error (FARM_EPEERDEAD, FARM_EREMOTE_ACCESS, ...; -ECANCELED when the
 * loop closed first). Runs on the loop that posted it. */
typedef void (*farm_op_fn)(farm_loop *loop, void *ctx, int status);

/*
 * farm_loop_rdma() - post one READ, WRITE or CAS (built with farm_wr_read,
 * farm_wr_write, farm_wr_cas) to machine @machine through this loop's
 * endpoint and completion queue. This sets @wr's wr_id, next and the
 * SIGNALED flag; @wr itself may be reused once this returns, the buffers
 * it names only after @cont runs. @cont runs exactly once unless this
 * returns an error. A loop with operations outstanding polls rather than
 * parks. Local memory is reached with loads and stores, not through here:
 * @machine must be another machine (-EINVAL). These operations use an
 * endpoint separate from messaging's: after one fails (a bad address), the
 * operations posted behind it complete with FARM_EFLUSHED (they did not
 * run; retry them), and once they have, the next call connects a fresh
 * endpoint. Errors: -EINVAL, -ENOENT (unknown machine), FARM_EPEERDEAD,
 * -EAGAIN (send queue full, or a failed endpoint still draining),
 * -ENOMEM.
 */
FARM_API FARM_MUST_CHECK int farm_loop_rdma(farm_loop *loop, uint32_t machine,
                                            farm_wr *wr, farm_op_fn cont,
                                            void *ctx);

/*
 * farm_loop_rdma_reads() - @n READs (built with farm_wr_read) to machine
 * @machine, each as farm_loop_rdma() posts one (@cont runs once for each,
 * with its own @ctxs[i]), posted as one list: the endpoints are checked
 * and the provider called once for them all. Sets each @wrs[i]'s wr_id,
 * next and SIGNALED flag. Returns 0 with *@posted = @n; or an error, as
 * farm_loop_rdma's, with *@posted the number of READs posted (the first
 * ones, whose continuations run; those after them never run): -EAGAIN
 * when the send queue took only some. -EINVAL (none posted) when any
 * request is not a READ farm_loop_rdma would take.
 */
FARM_API FARM_MUST_CHECK int
farm_loop_rdma_reads(farm_loop *loop, uint32_t machine, farm_wr *wrs,
                     unsigned n, farm_op_fn cont, void *const *ctxs,
                     unsigned *posted);

/*
 * farm_loop_back() - farm_ep_back() through this loop's endpoint to
 * @machine: [@offset, @offset + @len) of its registration @desc takes
 * memory now, so the WRITEs this loop makes there later cannot fail for
 * want of it (a sparse area a peer backs only where someone writes, as
 * the transaction logs: the coordinator backs its log at a participant
 * before its first record). 0, or -ENOSPC (the peer's memory is full),
 * -EINVAL, -ENOENT (unknown machine), FARM_EPEERDEAD. Owner thread only.
 */
FARM_API FARM_MUST_CHECK int farm_loop_back(farm_loop *loop, uint32_t machine,
                                            const farm_mr_desc *desc,
                                            uint64_t offset, uint64_t len);

/*
 * farm_loop_rdma_wake() - farm_loop_rdma(), then, in the same doorbell,
 * wake loop @thread of @machine if it is parked (shm; nothing on verbs,
 * whose loops poll). For WRITEs into memory that loop polls through a
 * poller (farm_loop_add_poller), such as transaction logs.
 */
FARM_API FARM_MUST_CHECK int farm_loop_rdma_wake(farm_loop *loop,
                                                 uint32_t machine,
                                                 unsigned thread, farm_wr *wr,
                                                 farm_op_fn cont, void *ctx);

/*
 * farm_loop_rdma_lazy() - farm_loop_rdma_wake() whose doorbell may wait
 * up to the messaging attribute lazy_bell_ns, so that the WRITEs of that
 * time to loop @thread of @machine share one wake-up of a parked
 * receiver. For WRITEs whose sender can afford the delay: nothing waits
 * on the receiver meanwhile but the sender's own work. The owed
 * doorbells are rung when the time is up (at a pass of this loop), when
 * this loop runs out of work (an empty pass with no one-sided operation
 * outstanding: its caller waits for an answer), and before it parks; a
 * receiver that polls anyway finds the WRITE without one.
 */
FARM_API FARM_MUST_CHECK int farm_loop_rdma_lazy(farm_loop *loop,
                                                 uint32_t machine,
                                                 unsigned thread, farm_wr *wr,
                                                 farm_op_fn cont, void *ctx);

/* ---- pollers ------------------------------------------------------------- */

/* Poll something the loop does not know about (memory that peers WRITE
 * into, such as logs). Returns the events handled (>= 0). Runs on the
 * loop's thread on every pass, like a handler (it must not wait). */
typedef int (*farm_poll_fn)(farm_loop *loop, void *ctx);
/* Whether the poller has work, asked before the loop parks, after its park
 * word is raised (so a WRITE followed by farm_loop_rdma_wake's doorbell is
 * never missed). */
typedef bool (*farm_pending_fn)(farm_loop *loop, void *ctx);
/* Add a poller to @loop (on its thread; at most 8). -ENOSPC when full. */
FARM_API FARM_MUST_CHECK int farm_loop_add_poller(farm_loop *loop,
                                                  farm_poll_fn poll,
                                                  farm_pending_fn pending,
                                                  void *ctx);

/* ---- counters ------------------------------------------------------------ */

typedef struct farm_msg_stats {
	uint64_t sent;        /* messages accepted by farm_msg_send/call */
	uint64_t received;    /* messages delivered to handlers */
	uint64_t frames_sent; /* WRITEs of frames */
	uint64_t frames_recv;
	uint64_t queued;         /* sends that waited for ring space */
	uint64_t nobufs;         /* sends refused with -ENOBUFS */
	uint64_t malformed;      /* channels broken by bad data */
	uint64_t stale_replies;  /* replies to calls that had given up */
	uint64_t timeouts;       /* calls that timed out */
	uint64_t peer_deaths;    /* calls failed because the peer died */
	uint64_t parks;          /* times the loop parked */
	uint64_t doorbells;      /* wake-up doorbells posted (receivers that
	                            may be parked) */
	uint64_t refused_config; /* frames refused: their sender's
	                            configuration is older than this
	                            machine accepts from it (removed) */
} farm_msg_stats;

/* Counters of one loop (read on its thread) or, with @loop NULL, the sum
 * over the loops of @msg (approximate while they run). */
/* @size: sizeof(*@out) as the caller was compiled, which the inline
 * farm_msg_stats_get passes. The struct only grows at its end: the
 * library fills the fields both know and zeroes any it does not. */
FARM_API void farm_msg_stats_read(const farm_msg *msg, const farm_loop *loop,
                                  farm_msg_stats *out, size_t size);
static inline void farm_msg_stats_get(const farm_msg *msg,
                                      const farm_loop *loop,
                                      farm_msg_stats *out)
{
	farm_msg_stats_read(msg, loop, out, sizeof(*out));
}

#ifdef __cplusplus
}
#endif
#endif /* FARM_MSG_H */
