/*
 * NEW-CONFIG (FaRM SOSP'15 5.2): the CM sends the configuration its
 * compare-and-set just wrote to every survivor, which hands it to its
 * membership (farm_membership_offer, src/coord/offer.c: why a survivor
 * may take it before ZooKeeper's watch and read bring it). Survivors are
 * the members of the new configuration that this machine applied last
 * with the same incarnation: they are messaging peers already, and are
 * sent it at once. A machine joining (an id's first holder, absent from
 * the view applied last) becomes a peer here only as this machine applies
 * the configuration: it is sent it then (farm_node_newconfig_joiners),
 * which spares the join its ZooKeeper watch and read, the last step of a
 * late join (hundreds of ms when the server is short of CPU,
 * docs/benchmarks.md, scale_bench). A new holder of a reused id, or a
 * configuration too long for one message, is learnt from ZooKeeper only;
 * every machine still reads it there too.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "node/node.h"
#include "node/node_int.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

struct nc_send {
	uint64_t config_id;
	uint32_t nids;
	uint32_t ids[FARM_VIEW_MAX];
	size_t len;
	char text[];
};

static struct nc_send *nc_make(const struct farm_view *v, const char *text,
                               size_t len)
{
	struct nc_send *s = malloc(sizeof(*s) + len);
	if (!s)
		return NULL;
	s->config_id = v->config_id;
	s->nids = 0;
	s->len = len;
	memcpy(s->text, text, len);
	return s;
}

/* On loop 0: one message to loop 0 of each machine @ctx names (survivors,
 * or the machines a configuration adds). */
static void nc_send_all(farm_loop *loop, void *ctx, int status)
{
	struct nc_send *s = ctx;
	for (uint32_t i = 0; !status && i < s->nids; i++) {
		int rc = farm_msg_send(loop, s->ids[i], 0, FARM_MSGT_NEW_CONFIG,
		                       s->text, (uint32_t)s->len);
		if (rc) /* it reads the configuration from ZooKeeper */
			farm_info("node: NEW-CONFIG %" PRIu64 " to machine "
			          "%" PRIu32 " not sent: %s",
			          s->config_id, s->ids[i], farm_strerror(rc));
	}
	if (!status)
		farm_loop_flush(loop);
	free(s);
}

/* Under n->lock: the members of @v that the view applied last does not
 * name, first holders of their ids (incarnation 0), this machine aside:
 * machines joining, which become messaging peers here only as this
 * machine applies @v (farm_node_newconfig_joiners). A new holder of a
 * reused id is left to ZooKeeper: the others fence it until they apply
 * the view (view.c, await_admitted). */
static uint32_t joiners(const farm_node *n, const struct farm_view *v,
                        uint32_t *ids)
{
	uint32_t k = 0;
	if (!farm_view_find(&n->view, n->cfg.machine_id))
		return 0;
	for (unsigned i = 0; i < v->n; i++) {
		const struct farm_member *nm = &v->members[i];
		if (nm->id != n->cfg.machine_id && !nm->incarnation &&
		    !farm_view_find(&n->view, nm->id))
			ids[k++] = nm->id;
	}
	return k;
}

/* Under n->lock: the members of @v, this machine aside, that the view
 * applied last names with the same incarnation. */
static uint32_t survivors(const farm_node *n, const struct farm_view *v,
                          uint32_t *ids)
{
	uint32_t k = 0;
	if (!farm_view_find(&n->view, n->cfg.machine_id))
		return 0; /* not a member yet: no peers to tell */
	for (unsigned i = 0; i < v->n; i++) {
		const struct farm_member *nm = &v->members[i];
		const struct farm_member *old =
		        farm_view_find(&n->view, nm->id);
		if (nm->id != n->cfg.machine_id && old &&
		    old->incarnation == nm->incarnation)
			ids[k++] = nm->id;
	}
	return k;
}

void farm_node_config_written(void *ctx, const struct farm_view *v,
                              const char *text, size_t len)
{
	farm_node *n = ctx;
	if (FARM_FAULT_SWITCH(FARM_FP_NODE_NO_NEW_CONFIG))
		return; /* testing: the survivors wait for ZooKeeper */
	if (!len || len > farm_msg_max_payload(n->msg))
		return;
	struct nc_send *s = nc_make(v, text, len);
	struct nc_send *j = nc_make(v, text, len);
	pthread_mutex_lock(&n->lock);
	farm_loop *loop = n->threads ? n->threads[0].loop : NULL;
	if (s)
		s->nids = survivors(n, v, s->ids);
	if (j && (j->nids = joiners(n, v, j->ids))) {
		free(n->nc_joiners); /* an older one no view took */
		n->nc_joiners = j;
		j = NULL;
	}
	pthread_mutex_unlock(&n->lock);
	free(j);
	/* Posted: this runs on the membership worker, which publishes the
	 * view here next; a loop sends. */
	if (s && (!loop || !s->nids || farm_loop_post(loop, nc_send_all, s)))
		free(s);
}

void farm_node_newconfig_joiners(farm_node *n, uint64_t config_id)
{
	pthread_mutex_lock(&n->lock);
	struct nc_send *j = n->nc_joiners;
	if (j && j->config_id <= config_id)
		n->nc_joiners = NULL;
	else
		j = NULL; /* none, or for a view still to come */
	farm_loop *loop = n->threads ? n->threads[0].loop : NULL;
	pthread_mutex_unlock(&n->lock);
	/* One for an older view (not applied here: a newer came first) is
	 * dropped: the machines it names read the newer one. */
	if (j && (j->config_id != config_id || !loop ||
	          farm_loop_post(loop, nc_send_all, j)))
		free(j);
}

static void h_new_config(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop;
	farm_node *n = arg;
	/* Under n->lock: farm_node_close clears marked_mem under it before
	 * closing the membership. */
	pthread_mutex_lock(&n->lock);
	int rc = n->marked_mem
	                 ? farm_membership_offer(n->marked_mem, in->src_machine,
	                                         in->payload, in->len)
	                 : FARM_ECLOSED;
	pthread_mutex_unlock(&n->lock);
	if (rc && rc != FARM_ECLOSED)
		farm_warn("node %" PRIu32 ": NEW-CONFIG from machine %" PRIu32
		          ": %s",
		          n->cfg.machine_id, in->src_machine,
		          farm_strerror(rc));
}

int farm_node_newconfig_init(farm_node *n)
{
	return farm_msg_handle(n->msg, FARM_MSGT_NEW_CONFIG, h_new_config, n);
}
