/*
 * A node's state, shared by node.c (open, views, loops, close) and
 * members.c (waiting for the members, and giving up at a whole-cluster
 * restart the ones that do not come back). Internal; not installed.
 */
#ifndef FARM_NODE_NODE_INT_H
#define FARM_NODE_NODE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc/galloc.h"
#include "node/node.h"
#include "recovery/recovery.h"

struct loop_thread {
	farm_node *n;
	unsigned idx;
	pthread_t th;
	farm_loop *loop;
	int rc;
	bool started;
};

struct farm_node {
	struct farm_config cfg;
	farm_fabric *fab;
	farm_msg *msg;
	farm_as *as;
	farm_galloc *ga;
	farm_txm *txm;
	struct farm_membership *mem;
	char card[FARM_ENDPOINT_MAX];
	unsigned nthreads;
	struct loop_thread *threads;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned ready;        /* loops opened */
	struct farm_view view; /* last view applied */
	int start_timeout_ms; /* static peers' cards are waited for this long */
	bool card_written;
	/* The control socket (ctl.c); NULL: none. */
	struct farm_ctl *ctl;
	bool app_loops;     /* the application's threads run the loops */
	farm_recovery *rec; /* leases and reconfiguration (ZooKeeper only) */
	struct farm_restart *rs; /* durable directory (restart.c; shm only) */
	bool keep;               /* closing cleanly: keep the files */
	bool restart_failed;     /* views are no longer applied */
	uint64_t view_t_ns;      /* under lock: when n->view last changed */
	bool forsook;            /* asked to restart without the missing */
	/* Old copies kept as stale sources by a same-id rejoin (rejoin.c;
	 * NULL: none). */
	struct farm_rejoin *rj;
	/* Under lock: previous members given up for their refusal notices
	 * (forsake_refused). */
	uint32_t refused_gone[FARM_VIEW_MAX];
	unsigned nrefused_gone;
	unsigned refused_over; /* the count over the limit last said */
	unsigned restart_lost; /* under lock: restarted without so many */
	/* Under lock: */
	bool removed; /* this machine was removed from the cluster */
	bool refused; /* fresh under the id of a machine that left */
	/* The configuration that let this machine go after a graceful
	 * leave (farm_view.left; leave.c); 0: none. */
	uint64_t left_cfg;
	/* Under lock: the configuration in which this machine last said its
	 * graceful leave's handoff done (R/left; leave.c); 0: never. While
	 * it is the one in force the quiesce stays on, also after the call
	 * that said it gave up: the mark promised no commit to come. */
	uint64_t leave_said;
	/* Under lock: a farm_node_leave runs (leave.c, leave_claim and
	 * leave_release). A second call meanwhile is refused -EALREADY:
	 * two would each keep their own idea of leave_said and of the
	 * quiesce, and one giving up could let commits in again under the
	 * other's R/left. */
	bool leave_running;
	/* Set once farm_node_close begins (release store there, acquire
	 * loads in leave.c): a graceful leave still waiting gives up
	 * (-ECANCELED) instead of holding the close for its timeout. */
	atomic_bool closing;
	/* The membership once farm_membership_open returned (under lock):
	 * views may come before, on its worker, which must not read n->mem
	 * while open writes it. */
	struct farm_membership *marked_mem;
	/* Under lock: the CM's NEW-CONFIG for the machines a configuration
	 * it wrote adds, sent once it applies it (newconfig.c). */
	struct nc_send *nc_joiners;
	bool lease_lost; /* its lease at the CM lapsed */
	/* Under lock: this machine's incarnation (farm_member.incarnation),
	 * taken from the first view that named it; views naming its id
	 * with another one name a later holder (view.c, self_member). */
	bool have_inc;
	uint32_t self_inc;
	uint64_t replaced_seen; /* views that named a later holder */
	/* apply_view's thread only: each peer's incarnation as last added
	 * (add_peer): another one is a new holder of the id. */
	uint32_t *peer_inc; /* max_machines */
	/* Machines whose messages are refused (farm_msg_peer_min_config);
	 * apply_view's thread only. */
	bool *msg_removed;     /* max_machines */
	uint32_t max_machines; /* ids are below this (config) */
	farm_node_config_fn on_config;
	void *on_config_ctx;
	/* Growth, the grower's side (grow.c): made on the first view that
	 * names this machine the grower once it has a loop; under
	 * grow_lock (farm_node_close destroys it after the loops stop). */
	struct farm_grow *grow;
	/* Serialises grow_view: views and the opening of loop 0 (the grow
	 * thread asks on it) both start growth. */
	pthread_mutex_t grow_lock;
};

/* members.c: farm_node_open refused this machine's directory (@rc, @why):
 * with ZooKeeper, leave a refusal notice (farm_zk_note_refused) when it is
 * damage. */
void farm_node_note_refused(const struct farm_config *cfg, int rc,
                            const char *why);
/* members.c: this machine's directory passed the restart check: with
 * ZooKeeper, delete a refusal notice an earlier attempt left. */
void farm_node_clear_notice(const struct farm_config *cfg);

/* node.c: a static member's card, read from its data directory (waits
 * up to @timeout_ms for the file). */
int farm_node_card_read(const char *dir, int timeout_ms, char *out, size_t len);
/* node.c: growth learns a view (under grow_lock). */
void farm_node_grow_view(farm_node *n, const struct farm_view *v);
/* node.c: once the restart ran (or none was pending), the manager's
 * restart mark goes. */
void farm_node_restart_unmark(farm_node *n);
/* The CM -> survivors: the configuration its compare-and-set wrote
 * (newconfig.c). */
#define FARM_MSGT_NEW_CONFIG 0xf150u
/* newconfig.c: the membership's on_written callback (the CM sends
 * NEW-CONFIG), and its handler's registration (before the loops run). */
void farm_node_config_written(void *ctx, const struct farm_view *v,
                              const char *text, size_t len);
int farm_node_newconfig_init(farm_node *n);
/* newconfig.c: on the CM, once it made the machines joining in
 * configuration @config_id its peers (view.c, PEERS), NEW-CONFIG to
 * them; apply_view's thread. */
void farm_node_newconfig_joiners(farm_node *n, uint64_t config_id);
/* view.c: the membership's on_view callback. */
void farm_node_apply_view(void *ctx, const struct farm_view *v);

#endif
