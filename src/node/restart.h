/*
 * Whole-cluster restart from durable memory (restart.c; the opening
 * comment there is the protocol). The node calls these at fixed points:
 *
 *   farm_restart_open()     before the fabric opens: check the directory
 *                           (refuse a damaged or foreign one, naming file
 *                           and offset; delete nothing), set the previous
 *                           incarnation's files aside
 *   farm_restart_attach()   once the layers exist: keep the manifest up to
 *                           date, publish the previous log to peers
 *   farm_restart_card()     the card's " rlog=" field while restarting
 *   farm_restart_view()     every view: 1 = ignore it (stale), 0 = apply
 *   farm_restart_run()      the first view with the previous members
 *                           (but those it lists lost: given up after
 *                           restart_wait_ms, farm_restart_missing):
 *                           adopt, replay, unlock, barrier, commit
 *   farm_restart_keep()     clean shutdown: keep the files for a restart
 *   farm_restart_close()
 */
#ifndef FARM_NODE_RESTART_H
#define FARM_NODE_RESTART_H

#include <stdbool.h>
#include <stdint.h>

#include <farm/farm.h>

#include "addrspace/addrspace.h"
#include "coord/membership.h"
#include "alloc/galloc.h"
#include "util/config.h"

#define FARM_MANIFEST_FILE "farm.manifest"

struct farm_restart;

/* Timings and counts of the last restart (all 0 without one). */
struct farm_restart_stats {
	bool restarted;
	uint64_t regions, bytes, logs, records, txns, committed, aborted,
	        images, objects, unlocked, freed;
	uint64_t adopt_ns, replay_ns, barrier_ns, total_ns;
	/* replay_ns's parts: reading the logs, deciding and applying them
	 * with the lock walk, promotion with the allocator's rebuild */
	uint64_t logs_ns, apply_ns, alloc_ns;
	/* Previous members given up (listed lost): restarted without. */
	uint64_t lost;
};

/* 0 with *@out (a fresh directory, or an intact one to restart from);
 * FARM_ECORRUPT (damaged: @err names the file and offset), -EXDEV
 * (another machine's or cluster's), -ENOMEM, -errno; nothing in the
 * directory is deleted on any error. */
int farm_restart_open(const struct farm_config *cfg, struct farm_restart **out,
                      char *err, size_t errlen);
int farm_restart_attach(struct farm_restart *rs, farm_fabric *fab, farm_as *as,
                        farm_txm *txm, struct farm_galloc *ga);
/* Appends " rlog=<key>:<addr>:<len>" while a restart is pending. */
void farm_restart_card(const struct farm_restart *rs, char *buf, size_t len);
/* Where a card's " rlog=" field starts (NULL: none). */
const char *farm_restart_card_field(const char *card);
bool farm_restart_pending(const struct farm_restart *rs);
/* The configuration the manifest names (at least 1 while a restart is
 * pending: the membership's restart mark); 0 when none is pending. */
uint64_t farm_restart_config(const struct farm_restart *rs);
int farm_restart_view(struct farm_restart *rs, const struct farm_view *v);
int farm_restart_run(struct farm_restart *rs, const struct farm_view *v);
/* While a restart is pending: the previous members that @v lacks, into
 * @out[FARM_VIEW_MAX]; returns how many. *@most: how many of them the
 * others can restart without (min(replicas, previous members) - 2, so
 * every region keeps a backup whose log came back). */
unsigned farm_restart_missing(const struct farm_restart *rs,
                              const struct farm_view *v, uint32_t *out,
                              unsigned *most);
/* The view was applied (pending or not): recorded in the manifest. */
void farm_restart_applied(struct farm_restart *rs, const struct farm_view *v);
/* A clean shutdown begins: the configuration recorded stays the one
 * applied last (machines leaving one by one make views without those that
 * left first; the restart needs the whole cluster's). */
void farm_restart_freeze(struct farm_restart *rs);
int farm_restart_keep(struct farm_restart *rs);
/* Plain close: the manifest goes (the fabric removes the files). */
void farm_restart_discard(struct farm_restart *rs);
void farm_restart_stats(const struct farm_restart *rs,
                        struct farm_restart_stats *out);
/*
 * A layer's durable blob, kept in the manifest across a whole-cluster
 * restart (the KV store's shard list: the only way back to the data its
 * shards hold). keep: 0, -EINVAL (name empty or FARM_RESTART_KEPT_NAME
 * long, more than FARM_RESTART_KEPT_MAX bytes), -ENOSPC (more than
 * FARM_RESTART_KEPT_N names), -ENOTSUP (no durable directory), or the
 * manifest write's error. kept: the blob's length (up to @cap bytes
 * copied), -ENOENT (none), -EINVAL. A blob a previous incarnation kept
 * reads back from farm_restart_open on, and is carried into this
 * incarnation's manifest until replaced.
 */
#define FARM_RESTART_KEPT_NAME 32
#define FARM_RESTART_KEPT_MAX  4096
#define FARM_RESTART_KEPT_N    4
int farm_restart_keep_blob(struct farm_restart *rs, const char *name,
                           const void *data, size_t len);
long farm_restart_kept_blob(struct farm_restart *rs, const char *name,
                            void *buf, size_t cap);
void farm_restart_close(struct farm_restart *rs);

#endif
