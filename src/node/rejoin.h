/*
 * Same-id rejoin with old copies kept as hints (rejoin.c;
 * src/recovery/README.md, "Same-id restart"). The node calls these at
 * fixed points:
 *
 *   farm_rejoin_prepare()  before farm_restart_open: an intact directory
 *                          of an id the cluster in force lists gone (and
 *                          no whole-cluster restart under way) becomes a
 *                          fresh one, its region files kept as stale
 *                          sources in stale/; an interrupted one is
 *                          finished
 *   farm_rejoin_attach()   once the transaction manager exists, before
 *                          the machine registers: each source mapped and
 *                          given to data recovery
 *   farm_rejoin_grown()    a view where this machine is an ordinary
 *                          member (growth over): the sources of regions
 *                          not got back are let go
 *   farm_rejoin_close()    after the transaction manager is destroyed
 */
#ifndef FARM_NODE_REJOIN_H
#define FARM_NODE_REJOIN_H

#include "txn/txm.h"
#include "util/config.h"

#define FARM_STALE_DIR "stale"

struct farm_rejoin;

/* 0 with *@out (NULL: nothing kept, the directory as it was unless a
 * rejoin left stale sources that a later incarnation's directory
 * outdates, which are removed); -errno when the directory cannot be made
 * fresh (then nothing is removed but what the move already moved, and
 * the next open finishes it). Asks ZooKeeper only with `reuse_copies`,
 * `reuse_ids` and `zk` set and an intact manifest of this machine. */
int farm_rejoin_prepare(const struct farm_config *cfg,
                        struct farm_rejoin **out);
void farm_rejoin_attach(struct farm_rejoin *rj, farm_txm *txm);
void farm_rejoin_grown(struct farm_rejoin *rj, farm_txm *txm);
void farm_rejoin_close(struct farm_rejoin *rj);

#endif
