/*
 * The ZooKeeper backend's private state and what its files share: zk.c
 * (the session, the worker, registration, reads and writes), zk_next.c
 * (the next configuration, computed from what zk.c read) and zk_peek.c
 * (short sessions of their own: farm status's peek, refusal notices).
 * Only with the client library (FARM_HAVE_ZK).
 */
#ifndef FARM_COORD_ZK_INT_H
#define FARM_COORD_ZK_INT_H

#include "coord/membership_impl.h"

#define THREADED 1 /* the client's synchronous calls (zookeeper_mt) */
#include <zookeeper/zookeeper.h>

#define ZK_BUF                                                              \
	(256u << 10) /* the configuration: 65 members fit in 18 KiB, 256 in \
	                about 72 */
#define ZK_DEFAULT_SESSION_MS 4000u
/* Least time between two routine resolutions of the server names (zk.c). */
#define ZK_RESOLVE_MS         10000
#define ZK_DEFAULT_CONNECT_MS 5000u
/* A registration's data: the endpoint, "\nwire <n>", then "\ndomain
 * <name>" when the machine has a failure domain, and a mark. */
#define ZK_CARD_MAX   (FARM_ENDPOINT_MAX + FARM_DOMAIN_MAX + 32)
#define ZK_BACKOFF_MS 200 /* retry after an unexpected error */

enum {
	PEND_SYNC = 1u << 0,    /* re-read (and maybe write) the config */
	PEND_EXPIRED = 1u << 1, /* session expired: new session */
	PEND_STATE = 1u << 2,   /* run on_state */
	PEND_MARK = 1u << 3,    /* write our marks (farm_zk_mark) */
};

struct farm_zk {
	zhandle_t *zh; /* only the worker (and open/close around it) */
	pthread_t worker;
	bool worker_started;
	pthread_cond_t wake; /* with m->lock: pending work or stop */
	/* Under m->lock: */
	unsigned pending;
	unsigned retry; /* work to redo after ZK_BACKOFF_MS */
	bool stop;
	bool zh_closing;     /* ignore events from a handle being closed */
	bool connected_once; /* this handle reached a server */
	bool held_elsewhere; /* our id's znode belongs to another session */
	bool opened;         /* farm_zk_open returned 0 */
	int fatal;           /* error that makes open fail */
	/* Worker only: */
	bool layout_done;
	bool held_logged;
	bool lone_logged;      /* zk_sync: restarting alone, not managing */
	int64_t refused_czxid; /* the last registration left out, logged */
	/* The last registration of another wire version, logged. */
	int64_t wire_refused_czxid;
	enum farm_membership_state told; /* last state passed to on_state */
	unsigned session_ms, connect_ms;
	char connect[1024];
	char root[200];
	char members[216];
	char config[216];
	char self_path[232];
	/* R/refused: a znode per machine that refused its damaged
	 * directory at a restart (farm_zk_note_refused), read with a watch
	 * in every sync; refused_n ids in refused (under m->lock). */
	char refused_dir[216];
	uint32_t refused[FARM_VIEW_MAX];
	unsigned nrefused;
	/* Marks, "<id> <config id>" (enum farm_zk_mark): R/grow, the last
	 * machine that said its extra copies were complete in that
	 * configuration (farm_membership_grown); R/bump, the last member
	 * that asked for a recovery round in it (farm_membership_bump);
	 * R/leave, the last member that asked to leave gracefully
	 * (farm_membership_leave). The manager reads them with its watch in
	 * every sync. */
	char mark[FARM_ZK_NMARKS][216];
	/* Under m->lock: the configuration our mark names (0: none). */
	uint64_t mark_want[FARM_ZK_NMARKS];
	/* Worker only: the mark as the manager last read it (0: none). */
	uint32_t mark_id[FARM_ZK_NMARKS];
	uint64_t mark_cfg[FARM_ZK_NMARKS];
	char *buf;
	struct farm_view cur, next; /* scratch */
	/* Under m->lock: machines farm_membership_suspect named, left out of
	 * the live set until a configuration lists them as removed. */
	uint32_t suspects[FARM_VIEW_MAX];
	unsigned nsuspects;
	/* Under m->lock: machines farm_membership_forsake named (given up
	 * at a restart), listed as lost by the configurations this one
	 * writes. */
	uint32_t forsake[FARM_VIEW_MAX];
	unsigned nforsake;
	/* Under m->lock: watch and session events seen (zk_watcher). */
	uint64_t events;
	/* Worker only: the manager's last reads (zk_build): the live ids,
	 * their registrations (FARM_VIEW_MAX each), and, when rd_ok, still
	 * current while events == rd_events, with the configuration's
	 * version rd_version (zk_fast_write). */
	struct zk_read *rd;
	char *cards;
	uint32_t rd_ids[FARM_VIEW_MAX];
	unsigned rd_n;
	bool rd_ok;
	uint64_t rd_events;
	int32_t rd_version;
};

struct zk_batch {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned pending;
};

/* One zoo_aget or zoo_aexists: its result, the data copied into @buf (at
 * most @cap bytes, as zoo_get truncates). */
struct zk_read {
	struct zk_batch *b;
	int rc, len;
	struct Stat st;
	char *buf;
	int cap;
};

/* zk_client.c */

/* A ZooKeeper return code as a negative errno value. */
int farm_zk_err(int zrc);
/* The client's log hook, its global set-up
 * (once), create @path unless it exists, order ids, a deadline @ms from
 * now on the monotonic clock. */
void farm_zk_log(const char *msg);
void farm_zk_global_init(void);
int farm_zk_ensure(zhandle_t *zh, const char *path, const char *data, int len);
int farm_zk_cmp_u32(const void *a, const void *b);
void farm_zk_deadline_in(struct timespec *t, int ms);

/* zk_batch.c: reads issued together (farm_zk_batch_init for @n completions,
 * each calls farm_zk_batch_done; farm_zk_batch_started for a call that did not
 * start; farm_zk_batch_wait until all are in), the completions of zoo_aget and
 * zoo_aexists into a struct zk_read, and the members' list. */
void farm_zk_batch_init(struct zk_batch *b, unsigned n);
void farm_zk_batch_done(struct zk_batch *b);
void farm_zk_batch_started(struct zk_batch *b, int zrc, int *rc);
void farm_zk_batch_wait(struct zk_batch *b);
void farm_zk_read_data_done(int rc, const char *value, int value_len,
                            const struct Stat *stat, const void *data);
void farm_zk_read_stat_done(int rc, const struct Stat *stat, const void *data);
/* zoo_aget_children's result, parsed as zk_live does. */
struct zk_kids {
	struct zk_batch *b;
	int rc;
	const char *members;
	uint32_t *ids;
	unsigned n;
};

void farm_zk_kids_parse(const char *members, const struct String_vector *sv,
                        uint32_t *ids, unsigned *n);
void farm_zk_kids_done(int rc, const struct String_vector *sv,
                       const void *data);

/* What one sync reads in one round trip (zk_sync): our registration, the
 * live members, the refusal notices, the configuration and the marks, each
 * with its watch. */
struct sync_reads {
	struct zk_batch b;
	char markbuf[FARM_ZK_NMARKS][48];
	struct zk_read self, cfg, marks[FARM_ZK_NMARKS];
	uint32_t ids[FARM_VIEW_MAX], rids[FARM_VIEW_MAX];
	struct zk_kids kids, refused;
};
/* A mark's znode (R/grow, R/bump) as read: its id and configuration into
 * z->mark_id[k], z->mark_cfg[k] (0, 0 when absent or malformed). */
void farm_zk_mark_parse(struct farm_zk *z, enum farm_zk_mark k,
                        const struct zk_read *r);
/* Issue every read of a sync together and wait for them (zk_sync). */
void farm_zk_sync_read(struct farm_zk *z, struct sync_reads *r);

/* zk_next.c */

/* The registration @data (@len bytes) into @mb's endpoint, domain and
 * fresh mark: the endpoint, then optionally "domain <name>", then
 * optionally "fresh", one per line. 0, or -EINVAL: empty or control bytes
 * in the endpoint, a line that is neither of those, or out of order. */
int farm_zk_card_parse(const char *data, int len, struct farm_member *mb);

/* The restart mark this machine writes as manager (farm_view.restart): its
 * manifest's configuration while it restarts on its directory, 0 once the
 * restart ran or when it never restarted. UINT64_MAX: it restarts, but the
 * configuration in force neither names it nor is a restart's, so the
 * others lived on without it and its memory is stale: it must not manage
 * (it would admit itself); node.c refuses it. */
uint64_t farm_zk_restart_mark(struct farm_membership *m);

/* Build in z->next the configuration of the live members @ids (@n), given
 * their registrations read (@rd[i] for @ids[i]): every live machine but
 * the incarnations z->cur lists as removed (kept listed while their znodes
 * live) and the machines this one suspects (listed from now on, by the
 * znode's creation zxid). Worker thread only. */
/* The placeholder farm_zk_build_from gives a member admitted as a new
 * incarnation of a reused id (farm_membership_attr.reuse_ids) until its
 * configuration's id is known: farm_zk_incarnations then sets it to that id. */
#define ZK_INC_NEW UINT32_MAX
void farm_zk_incarnations(struct farm_view *x);
int farm_zk_build_from(struct farm_membership *m, const uint32_t *ids,
                       unsigned n, const struct zk_read *rd);

/* Whether this machine could be the manager or its successor given the
 * live members @ids (@n, sorted): false when two live ids below it are
 * members of z->cur that the next configuration keeps whatever their
 * registrations say (not suspected here, not listed removed, gone or
 * lost). Only then does a sync read every registration (zk_build): the
 * others' builds could never name them first. Worker thread only. */
bool farm_zk_may_manage(struct farm_membership *m, const uint32_t *ids,
                        unsigned n);

/* zk_register.c: register this machine, given what zoo_exists on our
 * znode answered (@zrc, @stp; the watch was set by that call): 0 when our
 * ephemeral znode exists (*@created: this call made it), 1 when another
 * session holds our id and must be waited out, or a negative code. Worker
 * thread only. */
/* 0, or -EPROTO: the manager speaks another wire version (logged). */
int farm_zk_manager_wire(struct farm_membership *m);
int farm_zk_register(struct farm_membership *m, int zrc, const struct Stat *stp,
                     bool *created);

#endif
