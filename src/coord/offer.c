/*
 * NEW-CONFIG (FaRM SOSP'15 5.2): a configuration the manager sends to the
 * other members right after its compare-and-set wrote it, so that they
 * take it without waiting for their ZooKeeper watch and read (11-30 ms
 * apart under load, hundreds when the server is short of CPU).
 *
 * Why a survivor may take it before its own read: the manager sends it
 * only once its compare-and-set on the version it read succeeded, and
 * every configuration is written so, so one id names one configuration
 * for good (two machines with the same config id have the same view,
 * src/coord/README.md). Taking it is what a later read would deliver; a
 * newer one read meanwhile makes it stale (dropped: ids only grow). A
 * message that is not such a configuration (does not parse, another
 * machine named as its manager, this machine not a member) is refused.
 *
 * The offer thread: a message handler hands the bytes over and returns;
 * this thread parses and publishes, as the worker would, under the
 * handle's publish_lock (one view at a time, in config-id order). Not the
 * worker itself: it is then mostly inside the very read the offer is
 * meant to spare.
 */
#include "coord/membership_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/log.h"
#include "util/rt.h"

/* The largest configuration text: as the ZooKeeper backend reads it. */
#define OFFER_MAX (256u << 10)

struct farm_offer {
	struct farm_membership *m;
	pthread_t th;
	pthread_cond_t cv; /* with m->lock: an offer or stop */
	bool stop;
	/* Under m->lock: the latest offer not yet taken (NULL: none). */
	char *text;
	size_t len;
	uint32_t from;
	struct farm_view *v; /* the thread's scratch */
};

/* Parse and check an offer; publish it when it is newer. */
static void take(struct farm_offer *o, const char *text, size_t len,
                 uint32_t from)
{
	struct farm_membership *m = o->m;
	struct farm_view *v = o->v;
	const char *why = NULL;
	if (farm_view_parse(text, len, v))
		why = "malformed";
	else if (!v->has_cm || v->cm != from)
		why = "not sent by its manager";
	else if (!farm_view_find(v, m->self))
		why = "without this machine";
	if (why) {
		pthread_mutex_lock(&m->lock);
		m->st.offers_refused++;
		pthread_mutex_unlock(&m->lock);
		farm_warn("membership: machine %" PRIu32 " refuses a "
		          "configuration from machine %" PRIu32 ": %s",
		          m->self, from, why);
		return;
	}
	pthread_mutex_lock(&m->lock);
	bool newer = v->config_id > m->view.config_id;
	pthread_mutex_unlock(&m->lock);
	if (!newer)
		return; /* ZooKeeper brought it first, or a newer one */
	farm_info("membership: machine %" PRIu32 " takes configuration "
	          "%" PRIu64 " from its manager, machine %" PRIu32,
	          m->self, v->config_id, from);
	(void)farm_membership_publish(m, v, true);
}

static void *offer_main(void *arg)
{
	struct farm_offer *o = arg;
	struct farm_membership *m = o->m;
	/* As the worker: a view must not wait for a core behind busy
	 * loops. */
	if (m->realtime)
		(void)farm_thread_set_realtime(); /* normal without the right */
	pthread_mutex_lock(&m->lock);
	while (!o->stop) {
		if (!o->text) {
			pthread_cond_wait(&o->cv, &m->lock);
			continue;
		}
		char *text = o->text;
		size_t len = o->len;
		uint32_t from = o->from;
		o->text = NULL;
		pthread_mutex_unlock(&m->lock);
		take(o, text, len, from);
		free(text);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

int farm_offer_start(struct farm_membership *m)
{
	struct farm_offer *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->m = m;
	o->v = malloc(sizeof(*o->v));
	if (!o->v || pthread_cond_init(&o->cv, NULL)) {
		free(o->v);
		free(o);
		return -ENOMEM;
	}
	if (pthread_create(&o->th, NULL, offer_main, o)) {
		pthread_cond_destroy(&o->cv);
		free(o->v);
		free(o);
		return -EAGAIN;
	}
	pthread_mutex_lock(&m->lock);
	m->offer = o;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

void farm_offer_stop(struct farm_membership *m)
{
	pthread_mutex_lock(&m->lock);
	struct farm_offer *o = m->offer;
	m->offer = NULL; /* later offers: FARM_ECLOSED */
	if (o) {
		o->stop = true;
		pthread_cond_signal(&o->cv);
	}
	pthread_mutex_unlock(&m->lock);
	if (!o)
		return;
	pthread_join(o->th, NULL);
	pthread_cond_destroy(&o->cv);
	free(o->text);
	free(o->v);
	free(o);
}

int farm_membership_offer(struct farm_membership *m, uint32_t from,
                          const char *text, size_t len)
{
	if (!m || !text || !len)
		return -EINVAL;
	if (len > OFFER_MAX)
		return -EMSGSIZE;
	if (!m->zk)
		return -ENOTSUP;
	char *copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	pthread_mutex_lock(&m->lock);
	struct farm_offer *o = m->offer;
	if (!o || m->closed) {
		pthread_mutex_unlock(&m->lock);
		free(copy);
		return FARM_ECLOSED;
	}
	/* One waits at most: a later offer replaces it (a newer manager's,
	 * or the same configuration again); publishing keeps ids growing. */
	free(o->text);
	o->text = copy;
	o->len = len;
	o->from = from;
	pthread_cond_signal(&o->cv);
	pthread_mutex_unlock(&m->lock);
	return 0;
}
