/*
 * What membership.c (interface, views, static backend) and zk.c (the
 * ZooKeeper backend) share. Private to those two files.
 */
#ifndef FARM_COORD_MEMBERSHIP_IMPL_H
#define FARM_COORD_MEMBERSHIP_IMPL_H

#include <pthread.h>

#include "coord/membership.h"

struct farm_zk;

struct farm_membership {
	pthread_mutex_t lock;   /* guards view, st, closed */
	pthread_cond_t changed; /* broadcast on any change of view or st */
	struct farm_view view;
	struct farm_membership_status st;
	bool closed;
	uint32_t self;
	char endpoint[FARM_ENDPOINT_MAX];
	char domain[FARM_DOMAIN_MAX]; /* "": none */
	unsigned expect; /* ZooKeeper: machines the cluster forms with */
	bool fresh;      /* this machine started with empty memory */
	bool stale;      /* a later session: its memory may be out of date */
	bool realtime;   /* farm_membership_attr.realtime */
	bool reuse_ids;  /* farm_membership_attr.reuse_ids */
	/* farm_membership_attr.restart until farm_membership_restarted();
	 * under lock. */
	uint64_t restart;
	char address[FARM_ENDPOINT_MAX]; /* farm_membership_attr.address */
	farm_view_fn on_view;
	farm_state_fn on_state;
	farm_written_fn on_written;
	void *ctx;
	struct farm_zk *zk; /* NULL: static backend */
	/* Held from a view's install through its on_view: the worker and
	 * the offer thread both publish, one view at a time, in config-id
	 * order. Never taken under lock. */
	pthread_mutex_t publish_lock;
	struct farm_offer *offer; /* NULL: none (static backend) */
	/* farm_membership_balance (under lock): the balanced regions and
	 * the rings' attributes the manager places them with. */
	uint32_t *balanced;
	unsigned nbalanced;
	struct farm_ring_attr ring_attr;
};

/* offer.c: the thread that takes configurations the manager sent
 * directly (farm_membership_offer). Started after the backend opened,
 * stopped before it closes. 0; -ENOMEM; -EAGAIN. */
int farm_offer_start(struct farm_membership *m);
void farm_offer_stop(struct farm_membership *m);

/* ZooKeeper backend (zk.c). open fills m->zk and starts the worker; close
 * stops it and frees m->zk. Without the client library open is -ENOTSUP. */
int farm_zk_open(struct farm_membership *m,
                 const struct farm_membership_attr *a);
void farm_zk_close(struct farm_membership *m);
/* Leave @ids out of the live set and sync (farm_membership_suspect). */
int farm_zk_suspect(struct farm_membership *m, const uint32_t *ids, unsigned n);
/* List @ids as lost from the next configuration (farm_membership_forsake). */
int farm_zk_forsake(struct farm_membership *m, const uint32_t *ids, unsigned n);
/* Sync again (farm_membership_restarted: the restart mark changed). */
/* A member's mark naming configuration @config_id: the grower's
 * (farm_membership_grown), a request for a round (farm_membership_bump)
 * or to leave (farm_membership_leave), and a leaver's handoff done
 * (farm_membership_left). */
enum farm_zk_mark {
	FARM_ZK_MARK_GROW = 0,
	FARM_ZK_MARK_BUMP,
	FARM_ZK_MARK_LEAVE,
	FARM_ZK_MARK_LEFT,
	FARM_ZK_NMARKS
};
int farm_zk_mark(struct farm_membership *m, enum farm_zk_mark k,
                 uint64_t config_id);
void farm_zk_kick(struct farm_membership *m);
/* The machines with a refusal notice (R/refused/<id>) as the last sync
 * read them, this one left out, into @ids (FARM_VIEW_MAX); how many. */
unsigned farm_zk_refused(struct farm_membership *m, uint32_t *ids);
/* Is @s a well-formed connect string: host:port[,host:port...][/chroot]? */
bool farm_zk_connect_valid(const char *s);
/* Is @s a usable root path: /a/b, no trailing slash, no empty, "." or ".."
 * component, printable ASCII, shorter than 200 bytes? */
bool farm_zk_path_valid(const char *s);

/* For the backends and offer.c: install @v as the current view if its
 * config id is newer, then run on_view outside the lock (under
 * publish_lock). @offered: it came in the manager's NEW-CONFIG, counted
 * with the install, so that anyone on_view wakes sees it counted. Call
 * without either lock. Whether @v was newer. */
bool farm_membership_publish(struct farm_membership *m,
                             const struct farm_view *v, bool offered);

/* view.c: an endpoint's text is one line of printable bytes (static
 * peers' addresses, ZooKeeper registrations). */
bool farm_endpoint_valid(const char *e);

#endif
