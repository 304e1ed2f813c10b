/*
 * A libfarm machine: everything one process needs to take part in a
 * cluster, put together from a configuration (docs/config.md).
 *
 *   farm_node_open()   fabric, messaging (config `threads` loops), the
 *                      address space; publishes this machine's card
 *   (register message handlers on farm_node_msg() here)
 *   farm_node_start()  starts one thread per loop and joins the cluster:
 *                      static membership (`peer` lines) or ZooKeeper
 *                      (`zk`); every new view is applied to messaging
 *                      (new peers) and to the address space (the rings)
 *   farm_node_close()  leaves, stops the loops, frees everything
 *
 * A machine's card, the endpoint it registers in the membership, is its
 * fabric address followed by " msg=<key>:<addr>:<len> log=<key>:<addr>:<len>"
 * (hex): the message region's and the transaction logs' descriptors, so
 * peers can message it and write its logs. With static membership a
 * peer's card is read from the `machine.info` file in its data directory
 * (same host only). Internal; not installed.
 */
#ifndef FARM_NODE_NODE_H
#define FARM_NODE_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/farm.h>

#include "addrspace/addrspace.h"
#include "addrspace/membership.h"
#include "util/config.h"

/* Machine ids run from 0 to FARM_NODE_MAX_MACHINES - 1. */
#define FARM_NODE_MAX_MACHINES 64u

typedef struct farm_node farm_node;

/* -EINVAL for a bad configuration (machine id out of range, ...), or the
 * first failing layer's code (logged). */
int farm_node_open(const struct farm_config *cfg, farm_node **out);
/* Start the loops and join. Static membership waits (at most @timeout_ms)
 * for the peers' cards to appear. */
int farm_node_start(farm_node *n, int timeout_ms);
/*
 * Application-run loops: before farm_node_start, say that the application's
 * threads will run the loops; farm_node_start then starts none, and thread
 * i opens loop i with farm_node_loop_open (transactions attached), drives
 * it (farm_loop_wait, the *_sync wrappers, farm_loop_poll) and closes it
 * with farm_node_loop_close before farm_node_close. Peers' requests to a
 * loop are served only while its thread polls it.
 */
void farm_node_set_app_loops(farm_node *n, bool on);
int farm_node_loop_open(farm_node *n, unsigned i, farm_loop **out);
void farm_node_loop_close(farm_node *n, farm_loop *loop);

/* Wait until the view has @count members and the address space uses it. */
int farm_node_wait_members(farm_node *n, unsigned count, int timeout_ms);
void farm_node_close(farm_node *n);

farm_fabric *farm_node_fabric(const farm_node *n);
farm_msg *farm_node_msg(const farm_node *n);
farm_as *farm_node_as(const farm_node *n);
struct farm_galloc *farm_node_galloc(const farm_node *n);
farm_txm *farm_node_txm(const farm_node *n);
uint32_t farm_node_id(const farm_node *n);
unsigned farm_node_nthreads(const farm_node *n);
/* Loop @i (valid after farm_node_start; its thread runs it). */
farm_loop *farm_node_loop(const farm_node *n, unsigned i);
/* The current view (config id 0 before the first). */
int farm_node_view(farm_node *n, struct farm_view *out);

/* Run @fn on loop @i's thread and wait for it to finish; for code outside
 * the loops (a main thread) that needs to act on a loop. */
int farm_node_run(farm_node *n, unsigned i, farm_work_fn fn, void *ctx);

/* The card text for this machine, and its parser (exposed for tests). */
int farm_node_card_parse(const char *card, char *addr, size_t addrlen,
                         farm_mr_desc *msg_desc, farm_mr_desc *log_desc);

#endif
