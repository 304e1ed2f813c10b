/*
 * NEW-CONFIG (FaRM SOSP'15 5.2): the CM sends the configuration its
 * compare-and-set just wrote to every survivor, which hands it to its
 * membership (farm_membership_offer, src/coord/offer.c: why a survivor
 * may take it before ZooKeeper's watch and read bring it). Survivors are
 * the members of the new configuration that this machine applied last
 * with the same incarnation: they are messaging peers already. A machine
 * joining, a new holder of an id, or a configuration too long for one
 * message learns it from ZooKeeper only, as every machine still does.
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

/* On loop 0: one message to each survivor's loop 0. */
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
	struct nc_send *s = malloc(sizeof(*s) + len);
	if (!s)
		return;
	s->config_id = v->config_id;
	s->len = len;
	memcpy(s->text, text, len);
	pthread_mutex_lock(&n->lock);
	farm_loop *loop = n->threads ? n->threads[0].loop : NULL;
	s->nids = survivors(n, v, s->ids);
	pthread_mutex_unlock(&n->lock);
	/* Posted: this runs on the membership worker, which publishes the
	 * view here next; a loop sends. */
	if (!loop || !s->nids || farm_loop_post(loop, nc_send_all, s))
		free(s);
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
