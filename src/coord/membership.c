/*
 * Membership: the handle, the interface over the two backends, and the
 * static backend. The ZooKeeper backend is in zk.c; its design is
 * described in membership.h. Views and their text form: view.c.
 */
#include "coord/membership_impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"

const char *farm_membership_state_name(enum farm_membership_state s)
{
	switch (s) {
	case FARM_MEMBERSHIP_CONNECTING: return "connecting";
	case FARM_MEMBERSHIP_CONNECTED: return "connected";
	case FARM_MEMBERSHIP_EXPIRED: return "expired";
	case FARM_MEMBERSHIP_CLOSED: return "closed";
	}
	return "unknown";
}

/* ---- the handle ---------------------------------------------------- */

static struct farm_membership *handle_new(uint32_t self, const char *endpoint)
{
	struct farm_membership *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (pthread_mutex_init(&m->lock, NULL)) {
		pthread_condattr_destroy(&ca);
		free(m);
		return NULL;
	}
	if (pthread_cond_init(&m->changed, &ca)) {
		pthread_condattr_destroy(&ca);
		pthread_mutex_destroy(&m->lock);
		free(m);
		return NULL;
	}
	if (pthread_mutex_init(&m->publish_lock, NULL)) {
		pthread_condattr_destroy(&ca);
		pthread_cond_destroy(&m->changed);
		pthread_mutex_destroy(&m->lock);
		free(m);
		return NULL;
	}
	pthread_condattr_destroy(&ca);
	m->self = self;
	strcpy(m->endpoint, endpoint); /* checked by the caller */
	m->st.state = FARM_MEMBERSHIP_CONNECTING;
	return m;
}

static void handle_free(struct farm_membership *m)
{
	pthread_mutex_destroy(&m->publish_lock);
	pthread_cond_destroy(&m->changed);
	pthread_mutex_destroy(&m->lock);
	free(m->balanced);
	free(m);
}

static int cmp_member(const void *a, const void *b)
{
	const struct farm_member *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int static_open(struct farm_membership *m,
                       const struct farm_membership_attr *a)
{
	if (a->npeers > FARM_VIEW_MAX - 1 || (a->npeers && !a->peers))
		return -EINVAL;
	struct farm_view *v = malloc(sizeof(*v));
	if (!v)
		return -ENOMEM;
	memset(v, 0, sizeof(*v));
	v->config_id = 1;
	v->n = 0;
	v->members[v->n].id = a->self_id;
	strcpy(v->members[v->n].domain, m->domain);
	strcpy(v->members[v->n++].endpoint, a->endpoint);
	for (unsigned i = 0; i < a->npeers; i++) {
		const struct farm_config_peer *p = &a->peers[i];
		if (!farm_endpoint_valid(p->addr) ||
		    strlen(p->addr) >= FARM_ENDPOINT_MAX) {
			free(v);
			return -EINVAL;
		}
		const char *d = a->peer_domains ? a->peer_domains[i] : "";
		if (d[0] && !farm_domain_valid(d)) {
			free(v);
			return -EINVAL;
		}
		v->members[v->n].id = p->id;
		strcpy(v->members[v->n].domain, d);
		strcpy(v->members[v->n++].endpoint, p->addr);
	}
	qsort(v->members, v->n, sizeof(v->members[0]), cmp_member);
	for (unsigned i = 1; i < v->n; i++)
		if (v->members[i].id == v->members[i - 1].id) {
			farm_warn("membership: machine %" PRIu32
			          " listed twice in the static membership",
			          v->members[i].id);
			free(v);
			return -EINVAL;
		}
	pthread_mutex_lock(&m->lock);
	m->st.state = FARM_MEMBERSHIP_CONNECTED;
	m->st.registered = true;
	pthread_mutex_unlock(&m->lock);
	farm_membership_publish(m, v, false);
	free(v);
	return 0;
}

int farm_membership_open(const struct farm_membership_attr *a,
                         struct farm_membership **out)
{
	if (!a || !out || !a->endpoint || !farm_endpoint_valid(a->endpoint))
		return -EINVAL;
	bool zk = a->zk && a->zk[0];
	if (zk && (!farm_zk_connect_valid(a->zk) ||
	           (a->zk_root && !farm_zk_path_valid(a->zk_root))))
		return -EINVAL;
	if (a->domain && a->domain[0] && !farm_domain_valid(a->domain))
		return -EINVAL;
	struct farm_membership *m = handle_new(a->self_id, a->endpoint);
	if (!m)
		return -ENOMEM;
	if (a->domain)
		strcpy(m->domain, a->domain); /* checked above */
	m->expect = a->expect;
	m->fresh = a->fresh;
	m->realtime = a->realtime;
	m->reuse_ids = a->reuse_ids;
	m->restart = a->restart;
	if (a->address && strlen(a->address) < sizeof(m->address))
		strcpy(m->address, a->address);
	m->on_view = a->on_view;
	m->on_state = a->on_state;
	m->on_written = a->on_written;
	m->ctx = a->ctx;
	int rc = zk ? farm_zk_open(m, a) : static_open(m, a);
	if (rc) {
		handle_free(m);
		return rc;
	}
	/* Views a manager sends come in only with ZooKeeper: a static view
	 * never changes. */
	if (zk && (rc = farm_offer_start(m))) {
		farm_zk_close(m);
		handle_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int farm_membership_open_config(const struct farm_config *c, farm_view_fn fn,
                                farm_state_fn sfn, void *ctx,
                                struct farm_membership **out)
{
	if (!c || !out || !c->has_machine_id)
		return -EINVAL;
	const char *ep = strcmp(c->fabric, "verbs") == 0 && c->listen[0]
	                         ? c->listen
	                         : c->data_dir;
	struct farm_membership_attr a = {
	        .self_id = c->machine_id,
	        .endpoint = ep,
	        .domain = c->domain,
	        .zk = c->zk,
	        .zk_root = c->zk_root[0] ? c->zk_root : NULL,
	        .session_ms = c->zk_session_ms,
	        .connect_ms = c->zk_connect_timeout_ms,
	        .peers = c->peers,
	        .npeers = c->npeers,
	        .peer_domains = c->peer_domains,
	        .on_view = fn,
	        .on_state = sfn,
	        .ctx = ctx,
	};
	return farm_membership_open(&a, out);
}

void farm_membership_close(struct farm_membership *m)
{
	if (!m)
		return;
	farm_offer_stop(m); /* it may publish: before the worker goes */
	if (m->zk)
		farm_zk_close(m);
	pthread_mutex_lock(&m->lock);
	m->closed = true;
	m->st.state = FARM_MEMBERSHIP_CLOSED;
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	handle_free(m);
}

/* What a request to the ZooKeeper backend answers before it is handed
 * on: 0, -ENOTSUP (static backend) or FARM_ECLOSED. */
static int zk_open_for(struct farm_membership *m)
{
	if (!m->zk)
		return -ENOTSUP;
	pthread_mutex_lock(&m->lock);
	bool closed = m->closed;
	pthread_mutex_unlock(&m->lock);
	return closed ? FARM_ECLOSED : 0;
}

/* Hand machines @ids to the ZooKeeper backend's @fn (suspect, forsake):
 * the argument checks and answers they share. */
static int zk_ids(struct farm_membership *m, const uint32_t *ids, unsigned n,
                  int (*fn)(struct farm_membership *, const uint32_t *,
                            unsigned))
{
	if (!m || (n && !ids))
		return -EINVAL;
	int rc = zk_open_for(m);
	return rc ? rc : fn(m, ids, n);
}

int farm_membership_suspect(struct farm_membership *m, const uint32_t *ids,
                            unsigned n)
{
	return zk_ids(m, ids, n, farm_zk_suspect);
}

int farm_membership_forsake(struct farm_membership *m, const uint32_t *ids,
                            unsigned n)
{
	return zk_ids(m, ids, n, farm_zk_forsake);
}

unsigned farm_membership_refused(struct farm_membership *m, uint32_t *ids)
{
	if (!m || !ids || !m->zk)
		return 0;
	return farm_zk_refused(m, ids);
}

int farm_membership_grown(struct farm_membership *m, uint64_t config_id)
{
	if (!m || !config_id)
		return -EINVAL;
	int rc = zk_open_for(m);
	return rc ? rc : farm_zk_mark(m, FARM_ZK_MARK_GROW, config_id);
}

int farm_membership_balance(struct farm_membership *m,
                            const struct farm_ring_attr *attr,
                            const uint32_t *regions, unsigned n)
{
	if (!m || (n && !regions) || n > FARM_VIEW_MAX_PINS)
		return -EINVAL;
	uint32_t *copy = n ? malloc(n * sizeof(*copy)) : NULL;
	if (n && !copy)
		return -ENOMEM;
	if (n)
		memcpy(copy, regions, n * sizeof(*copy));
	pthread_mutex_lock(&m->lock);
	free(m->balanced);
	m->balanced = copy;
	m->nbalanced = n;
	m->ring_attr = attr ? *attr : (struct farm_ring_attr){0};
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int farm_membership_bump(struct farm_membership *m, uint64_t config_id)
{
	if (!m || !config_id)
		return -EINVAL;
	int rc = zk_open_for(m);
	return rc ? rc : farm_zk_mark(m, FARM_ZK_MARK_BUMP, config_id);
}

int farm_membership_leave(struct farm_membership *m, uint64_t config_id)
{
	if (!m || !config_id)
		return -EINVAL;
	int rc = zk_open_for(m);
	return rc ? rc : farm_zk_mark(m, FARM_ZK_MARK_LEAVE, config_id);
}

int farm_membership_left(struct farm_membership *m, uint64_t config_id)
{
	if (!m || !config_id)
		return -EINVAL;
	int rc = zk_open_for(m);
	return rc ? rc : farm_zk_mark(m, FARM_ZK_MARK_LEFT, config_id);
}

void farm_membership_restarted(struct farm_membership *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	bool was = m->restart != 0, closed = m->closed;
	m->restart = 0;
	pthread_mutex_unlock(&m->lock);
	if (was && !closed && m->zk)
		farm_zk_kick(m);
}

int farm_membership_view(struct farm_membership *m, struct farm_view *out)
{
	if (!m || !out)
		return -EINVAL;
	pthread_mutex_lock(&m->lock);
	*out = m->view;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int farm_membership_status(struct farm_membership *m,
                           struct farm_membership_status *out)
{
	if (!m || !out)
		return -EINVAL;
	pthread_mutex_lock(&m->lock);
	*out = m->st;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int farm_membership_wait(struct farm_membership *m, farm_membership_pred pred,
                         void *arg, int timeout_ms, struct farm_view *out)
{
	if (!m || !pred)
		return -EINVAL;
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	if (timeout_ms >= 0) {
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
	}
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	for (;;) {
		if (m->closed) {
			rc = FARM_ECLOSED;
			break;
		}
		if (pred(&m->view, &m->st, arg)) {
			if (out)
				*out = m->view;
			break;
		}
		int e = timeout_ms >= 0
		                ? pthread_cond_timedwait(&m->changed, &m->lock,
		                                         &dl)
		                : pthread_cond_wait(&m->changed, &m->lock);
		if (e == ETIMEDOUT) {
			/* One last look: the change may have come with it. */
			if (pred(&m->view, &m->st, arg)) {
				if (out)
					*out = m->view;
			} else {
				rc = -ETIMEDOUT;
			}
			break;
		}
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

struct wait_members {
	unsigned n;
	uint32_t self;
};

static bool pred_members(const struct farm_view *v,
                         const struct farm_membership_status *s, void *arg)
{
	const struct wait_members *w = arg;
	(void)s;
	return v->n == w->n && farm_view_find(v, w->self);
}

int farm_membership_wait_members(struct farm_membership *m, unsigned n,
                                 int timeout_ms, struct farm_view *out)
{
	if (!m)
		return -EINVAL;
	struct wait_members w = {.n = n, .self = m->self};
	return farm_membership_wait(m, pred_members, &w, timeout_ms, out);
}

static bool pred_newer(const struct farm_view *v,
                       const struct farm_membership_status *s, void *arg)
{
	(void)s;
	return v->config_id > *(const uint64_t *)arg;
}

int farm_membership_wait_newer(struct farm_membership *m, uint64_t config_id,
                               int timeout_ms, struct farm_view *out)
{
	return farm_membership_wait(m, pred_newer, &config_id, timeout_ms, out);
}
