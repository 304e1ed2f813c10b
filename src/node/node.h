/*
 * A libfarm machine: the public API is include/farm/node.h; this header
 * adds what only the library, its tools and its tests use.
 *
 *   farm_node_open()   from a parsed configuration (farm_node_open_file
 *                      loads one from a file and the environment)
 *
 * A machine's card, the endpoint it registers in the membership, is its
 * fabric address followed by " msg=<key>:<addr>:<len> log=<key>:<addr>:<len>"
 * (hex): the message region's and the transaction logs' descriptors, so
 * peers can message it and write its logs; with ZooKeeper membership
 * " lease=udp:<ip>:<port>" follows, its recovery lease socket. With static
 * membership a peer's card is read from the `machine.card` file in its data
 * directory (same host only). Internal; not installed.
 */
#ifndef FARM_NODE_NODE_H
#define FARM_NODE_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/farm.h>
#include <farm/node.h>

#include "addrspace/addrspace.h"
#include "coord/membership.h"
#include "util/config.h"

/* -EINVAL for a bad configuration (machine id out of range, ...), or the
 * first failing layer's code (logged). */
int farm_node_open(const struct farm_config *cfg, farm_node **out);

farm_as *farm_node_as(const farm_node *n);
/* Not admitted: started with an empty directory under the id of a
 * machine that left the cluster (farm_node_wait_members' -EEXIST). */
bool farm_node_refused(farm_node *n);
struct farm_galloc *farm_node_galloc(const farm_node *n);
/* The current view (config id 0 before the first). */
int farm_node_view(farm_node *n, struct farm_view *out);

/* The card text for this machine, and its parser (exposed for tests). */
int farm_node_card_parse(const char *card, char *addr, size_t addrlen,
                         farm_mr_desc *msg_desc, farm_mr_desc *log_desc);
/* The card's lease address (" lease=udp:<ip>:<port>" at its end, written
 * by machines that run recovery). 0; -ENOENT (none); -EINVAL. */
int farm_node_card_lease(const char *card, char *out, size_t len);
/* Recovery's failure detector (NULL without ZooKeeper). */
struct farm_recovery;
struct farm_recovery *farm_node_recovery(const farm_node *n);
/* The control socket (node/ctl.h; NULL when it could not be opened). */
struct farm_ctl;
struct farm_ctl *farm_node_ctl(const farm_node *n);
/* The membership (its counters and timeline: farm_membership_status). */
struct farm_membership *farm_node_membership(const farm_node *n);

/* Whole-cluster restart (restart.c): timings and counts of the last one. */
struct farm_restart_stats;
void farm_node_restart_stats(const farm_node *n,
                             struct farm_restart_stats *out);
/* A layer's durable blob, kept with the machine's data directory across a
 * whole-cluster restart (restart.h, farm_restart_keep_blob): the KV store
 * keeps its shard list. -ENOTSUP without a durable directory (not shm). */
int farm_node_keep(farm_node *n, const char *name, const void *data,
                   size_t len);
/* The blob kept under @name (this incarnation's, else the previous
 * one's): its length, up to @cap bytes copied into @buf; -ENOENT. */
long farm_node_kept(farm_node *n, const char *name, void *buf, size_t cap);

#endif
