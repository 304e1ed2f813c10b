/*
 * The manager's next configuration (zk_int.h): who is admitted, removed,
 * departed, late, gone or lost, from the registrations zk.c read and the
 * configuration in force. Pure computation on the worker thread: no
 * ZooKeeper call here.
 */
#ifdef FARM_HAVE_ZK

#include "coord/zk_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/wire.h"

/* "wire <n>" (@n bytes at @p): the version, 1..999999999, into *@out;
 * false for anything else. */
static bool card_wire(const char *p, size_t n, uint32_t *out)
{
	if (n < 6 || n > 14 || memcmp(p, "wire ", 5) || p[5] == '0')
		return false;
	uint32_t v = 0;
	for (size_t i = 5; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (uint32_t)(p[i] - '0');
	}
	*out = v;
	return true;
}

/* The registration @data (@len bytes) into @mb's endpoint, wire version,
 * domain and marks: the endpoint, then optionally "wire <n>" (0 when
 * absent: a build before versions), "domain <name>", and "fresh" or
 * "stale", one per line. 0, or -EINVAL: empty or control bytes in the
 * endpoint, a line that is none of those, or out of order. */
int farm_zk_card_parse(const char *data, int len, struct farm_member *mb)
{
	if (len <= 0 || memchr(data, 0, (size_t)len))
		return -EINVAL;
	const char *lim = data + len;
	const char *nl = memchr(data, '\n', (size_t)len);
	size_t elen = nl ? (size_t)(nl - data) : (size_t)len;
	if (elen == 0 || elen >= sizeof(mb->endpoint))
		return -EINVAL;
	memcpy(mb->endpoint, data, elen);
	mb->endpoint[elen] = 0;
	mb->domain[0] = 0;
	mb->fresh = false;
	mb->stale = false;
	mb->wire = 0;
	for (bool first = true; nl; first = false) {
		const char *p = nl + 1;
		nl = memchr(p, '\n', (size_t)(lim - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(lim - p);
		if (first && card_wire(p, n, &mb->wire)) {
			continue;
		} else if (n == 5 && !memcmp(p, "stale", 5) && !mb->stale) {
			mb->stale = true;
		} else if (n == 5 && !memcmp(p, "fresh", 5) && !mb->fresh &&
		           !mb->stale) {
			mb->fresh = true;
		} else if (n > 7 && n - 7 < sizeof(mb->domain) &&
		           !memcmp(p, "domain ", 7) && !mb->domain[0] &&
		           !mb->fresh) {
			memcpy(mb->domain, p + 7, n - 7);
			mb->domain[n - 7] = 0;
			if (!farm_domain_valid(mb->domain))
				return -EINVAL;
		} else {
			return -EINVAL;
		}
	}
	return 0;
}

/* Whether machine @id (registration @czxid, card @mb) speaks this
 * build's wire version (util/wire.h): no other can share the cluster.
 * Logged once per registration. */
static bool wire_admitted(struct farm_zk *z, uint32_t id,
                          const struct farm_member *mb, int64_t czxid)
{
	if (mb->wire == FARM_WIRE_VERSION ||
	    FARM_FAULT_SWITCH(FARM_FP_ZK_ANY_WIRE))
		return true;
	if (z->wire_refused_czxid != czxid)
		farm_err(
		        "membership: machine %" PRIu32 " registered with "
		        "wire version %" PRIu32 "%s; this cluster's is %u: not "
		        "admitted (machines of two wire versions cannot "
		        "share a cluster: start it with the cluster's build)",
		        id, mb->wire, mb->wire ? "" : " (none: an older build)",
		        FARM_WIRE_VERSION);
	z->wire_refused_czxid = czxid;
	return false;
}

/* Registration @card (@len bytes) of machine @id at @path into @mb:
 * whether it parses and names this build's wire version. */
static bool card_admitted(struct farm_zk *z, const char *path, const char *card,
                          int len, uint32_t id, int64_t czxid,
                          struct farm_member *mb)
{
	if (farm_zk_card_parse(card, len, mb)) {
		farm_warn("membership: %s has no usable endpoint and domain",
		          path);
		return false;
	}
	return wire_admitted(z, id, mb, czxid);
}

static bool is_suspect(struct farm_membership *m, uint32_t id)
{
	struct farm_zk *z = m->zk;
	bool yes = false;
	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < z->nsuspects && !yes; i++)
		yes = z->suspects[i] == id;
	pthread_mutex_unlock(&m->lock);
	return yes;
}

/* Has @id been given up (listed lost, or being forsaken by this one)? */
static bool is_lost(struct farm_membership *m, uint32_t id)
{
	struct farm_zk *z = m->zk;
	if (farm_ids_have(z->cur.lost, z->cur.nlost, id))
		return true;
	pthread_mutex_lock(&m->lock);
	bool yes = farm_ids_have(z->forsake, z->nforsake, id);
	pthread_mutex_unlock(&m->lock);
	return yes;
}

/* Append @id to a view's id list @ids (*@n of FARM_VIEW_MAX) unless it is
 * there; when full, the oldest is forgotten. */
static void ids_add(uint32_t *ids, unsigned *n, uint32_t id)
{
	if (farm_ids_have(ids, *n, id))
		return;
	if (*n == FARM_VIEW_MAX) {
		memmove(&ids[0], &ids[1], (FARM_VIEW_MAX - 1) * sizeof(ids[0]));
		(*n)--;
	}
	ids[(*n)++] = id;
}

/* Gone: those that left a formed configuration, until they come back
 * with their memory (a restart). */
static void next_gone(struct farm_view *x, const struct farm_view *c)
{
	x->ngone = 0;
	for (unsigned i = 0; i < c->ngone && i < FARM_VIEW_MAX; i++)
		if (!farm_view_find(x, c->gone[i]))
			x->gone[x->ngone++] = c->gone[i];
	for (unsigned i = 0; c->formed && i < c->n; i++) {
		uint32_t id = c->members[i].id;
		if (!farm_view_find(x, id))
			ids_add(x->gone, &x->ngone, id);
	}
}

/* Lost: given up at a restart (farm_membership_forsake), for good. */
static void next_lost(struct farm_membership *m, struct farm_view *x,
                      const struct farm_view *c)
{
	struct farm_zk *z = m->zk;
	x->nlost = 0;
	for (unsigned i = 0; i < c->nlost && i < FARM_VIEW_MAX; i++)
		x->lost[x->nlost++] = c->lost[i];
	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < z->nforsake; i++) {
		if (!farm_view_find(x, z->forsake[i]))
			ids_add(x->lost, &x->nlost, z->forsake[i]);
	}
	pthread_mutex_unlock(&m->lock);
}

/* Growth: the grower (the first late machine still a member) said every
 * copy of its share is complete in the configuration in force
 * (farm_membership_grown, R/grow): it leaves the late list and is placed
 * as an ordinary member from the next configuration on. The others keep
 * their order. A mark of an older configuration proves nothing (copies
 * may have been lost since): ignored. */
static void next_grown(const struct farm_zk *z, struct farm_view *x,
                       const struct farm_view *c)
{
	unsigned g = 0;
	while (g < x->nlate && !farm_view_find(x, x->late[g]))
		g++;
	uint64_t gcfg = z->mark_cfg[FARM_ZK_MARK_GROW];
	if (g < x->nlate && gcfg && gcfg == c->config_id &&
	    z->mark_id[FARM_ZK_MARK_GROW] == x->late[g] &&
	    farm_view_find(c, x->late[g])) {
		farm_info("membership: machine %" PRIu32 " holds its share: "
		          "an ordinary member from the next configuration",
		          x->late[g]);
		memmove(&x->late[g], &x->late[g + 1],
		        (x->nlate - g - 1) * sizeof(x->late[0]));
		x->nlate--;
	}
}

/* A round asked for (farm_membership_bump, R/bump) by a member in the
 * configuration in force: the next one names it, and every machine runs a
 * round for it (node.c). Carried on unchanged otherwise (so that no
 * configuration is written only to clear it): machines run a round for a
 * bump they have not seen. A mark no newer than the last bump is answered
 * already; one of a configuration written since that bump is answered
 * even when others came after it (they need not have run a round). */
static void next_bump(const struct farm_zk *z, struct farm_view *x,
                      const struct farm_view *c)
{
	uint64_t bcfg = z->mark_cfg[FARM_ZK_MARK_BUMP];
	uint32_t bid = z->mark_id[FARM_ZK_MARK_BUMP];
	x->bump = c->bump;
	if (bcfg && bcfg > c->bump && bcfg <= c->config_id &&
	    farm_view_find(c, bid) && farm_view_find(x, bid)) {
		farm_info("membership: machine %" PRIu32 " asked for a "
		          "recovery round in configuration %" PRIu64,
		          bid, bcfg);
		x->bump = bcfg;
	}
}

/* Graceful leave: the leaving machines still members stay listed, in
 * their order; one that departed (its handoff done, or failed) leaves
 * the list. A request (farm_membership_leave, R/leave) made in the
 * configuration in force by a member that stays one adds it last: the
 * asker checked in that configuration that enough machines stay
 * (farm_view_may_leave), and one request a configuration keeps that
 * check true when two machines ask at once. */
static void next_leaving(const struct farm_zk *z, struct farm_view *x,
                         const struct farm_view *c)
{
	x->nleaving = 0;
	for (unsigned i = 0; i < c->nleaving && i < FARM_VIEW_MAX; i++)
		if (farm_view_find(x, c->leaving[i]))
			x->leaving[x->nleaving++] = c->leaving[i];
	uint64_t lcfg = z->mark_cfg[FARM_ZK_MARK_LEAVE];
	uint32_t lid = z->mark_id[FARM_ZK_MARK_LEAVE];
	if (!lcfg || lcfg != c->config_id || !farm_view_find(c, lid) ||
	    !farm_view_find(x, lid) ||
	    farm_ids_have(x->leaving, x->nleaving, lid) ||
	    x->nleaving == FARM_VIEW_MAX)
		return;
	farm_info("membership: machine %" PRIu32 " leaves gracefully: its "
	          "regions' successors fill their copies from the next "
	          "configuration",
	          lid);
	x->leaving[x->nleaving++] = lid;
}

/* Graceful leave, the last step: a leaving member said, in the
 * configuration in force, that its handoff is done and it quiesced
 * (farm_membership_left, R/left). A mark of an older configuration proves
 * nothing (the copies were checked against other lists): ignored. */
static bool left_now(const struct farm_zk *z, uint32_t id)
{
	const struct farm_view *c = &z->cur;
	bool left = z->mark_cfg[FARM_ZK_MARK_LEFT] &&
	            z->mark_cfg[FARM_ZK_MARK_LEFT] == c->config_id &&
	            z->mark_id[FARM_ZK_MARK_LEFT] == id &&
	            farm_ids_have(c->leaving, c->nleaving, id) &&
	            farm_view_find(c, id);
	/* Testing: the view that lets the leaver go never comes. */
	return left && !FARM_FAULT_SWITCH(FARM_FP_ZK_LEFT_HOLD);
}

/* The leaver that left_now lets go is listed left by the configuration
 * that removes it, so that its CM skips the lease wait: the machine is
 * not a failure. The list is carried on (as bump is) while its ids stay
 * out, so that no configuration is written only to clear it, and so that
 * a machine that skips the view that removed it (a watch can coalesce
 * two) still reads it: the leaver learns it left, not that it was
 * removed. */
static void next_left(const struct farm_zk *z, struct farm_view *x,
                      const struct farm_view *c)
{
	x->nleft = 0;
	for (unsigned i = 0; i < c->nleft && i < FARM_VIEW_MAX; i++)
		if (!farm_view_find(x, c->left[i]))
			x->left[x->nleft++] = c->left[i];
	uint32_t id = z->mark_id[FARM_ZK_MARK_LEFT];
	if (!left_now(z, id) || farm_view_find(x, id) ||
	    farm_ids_have(x->left, x->nleft, id))
		return;
	if (x->nleft == FARM_VIEW_MAX) {
		memmove(&x->left[0], &x->left[1],
		        (FARM_VIEW_MAX - 1) * sizeof(x->left[0]));
		x->nleft--;
	}
	farm_info("membership: machine %" PRIu32 " handed its data off: the "
	          "next configuration goes on without it (not a failure)",
	          id);
	x->left[x->nleft++] = id;
}

/* Room for one more late id: a full list drops its oldest id that is no
 * longer a member. false (after saying so) when every listed one is. */
static bool late_room(struct farm_view *x, uint32_t id)
{
	if (x->nlate < FARM_VIEW_MAX)
		return true;
	unsigned q = 0;
	while (q < x->nlate && farm_view_find(x, x->late[q]))
		q++;
	if (q == x->nlate) {
		farm_warn("membership: machine %" PRIu32 " joins late, but %u "
		          "late machines are listed already",
		          id, x->nlate);
		return false;
	}
	memmove(&x->late[q], &x->late[q + 1],
	        (x->nlate - q - 1) * sizeof(x->late[0]));
	x->nlate--;
	return true;
}

/* @id out of the late list (a reused id's old holder's rank). */
static void late_drop(struct farm_view *x, uint32_t id)
{
	for (unsigned q = 0; q < x->nlate; q++) {
		if (x->late[q] != id)
			continue;
		memmove(&x->late[q], &x->late[q + 1],
		        (x->nlate - q - 1) * sizeof(x->late[0]));
		x->nlate--;
		return;
	}
}

/* Members new to a formed configuration that registered with empty memory
 * join the late list, after the earlier ones. */
static void next_late_new(struct farm_view *x, const struct farm_view *c)
{
	for (unsigned i = 0; c->formed && i < x->n; i++) {
		const struct farm_member *mb = &x->members[i];
		if (mb->incarnation == ZK_INC_NEW)
			late_drop(x, mb->id); /* a new holder: last */
		if (!mb->fresh || farm_ids_have(x->late, x->nlate, mb->id) ||
		    farm_view_find(c, mb->id))
			continue;
		if (!late_room(x, mb->id))
			continue;
		x->late[x->nlate++] = mb->id;
		farm_warn("membership: machine %" PRIu32 " joins the formed "
		          "cluster with empty memory: late (a backup where "
		          "replicas are short, the first late one an extra "
		          "backup of its share, never a primary)",
		          mb->id);
	}
}

/* Rejoin and growth (membership.h, ring.h): z->next's formed mark and late
 * list from z->cur's. Once formed (a configuration had m->expect
 * machines), a member that is new to the configuration and registered
 * with empty memory (its card says "fresh") is late, after the earlier
 * ones. Late ids stay listed (a late machine that restarts on its
 * directory keeps its placement); the oldest that are not members are
 * dropped when the list is full. A machine new to a formed configuration
 * that is not fresh comes back with memory (a whole-cluster restart): it
 * takes its place as before. */
static void zk_late(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	struct farm_view *x = &z->next;
	const struct farm_view *c = &z->cur;
	next_gone(x, c);
	next_lost(m, x, c);
	x->formed = c->formed || (m->expect && x->n >= m->expect);
	x->nlate = 0;
	for (unsigned i = 0; i < c->nlate && i < FARM_VIEW_MAX; i++)
		x->late[x->nlate++] = c->late[i];
	next_grown(z, x, c);
	next_bump(z, x, c);
	next_late_new(x, c);
	next_leaving(z, x, c);
	next_left(z, x, c);
}

/* The restart mark this machine writes as manager (farm_view.restart): its
 * manifest's configuration while it restarts on its directory, 0 once the
 * restart ran or when it never restarted. UINT64_MAX: it restarts, but the
 * configuration in force neither names it nor is a restart's, so the
 * others lived on without it and its memory is stale: it must not manage
 * (it would admit itself); node.c refuses it. */
uint64_t farm_zk_restart_mark(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	uint64_t r = m->restart;
	pthread_mutex_unlock(&m->lock);
	if (!r || farm_view_find(&z->cur, m->self) || z->cur.restart ||
	    !z->cur.formed)
		return r;
	return UINT64_MAX;
}
/* Member @mb (id @id, registered) gets its incarnation: the one it has
 * in the configuration in force, else 0. true: it is a new holder of an
 * id the formed cluster lost (gone), registered with empty memory while
 * ids are reused (farm_membership_attr.reuse_ids): admitted as a new
 * incarnation, the configuration that admits it (ZK_INC_NEW until
 * farm_zk_incarnations knows that configuration's id). */
static bool zk_incarnation(struct farm_membership *m, uint32_t id,
                           struct farm_member *mb)
{
	struct farm_zk *z = m->zk;
	const struct farm_member *was = farm_view_find(&z->cur, id);
	mb->incarnation = was ? was->incarnation : 0;
	/* Stale: a later session of a machine that held the id (its
	 * session expired, or its registration was replaced as a removed
	 * incarnation's): its memory is that holder's, never empty. */
	if (was || !mb->fresh || mb->stale || !m->reuse_ids ||
	    !farm_ids_have(z->cur.gone, z->cur.ngone, id))
		return false;
	mb->incarnation = ZK_INC_NEW;
	return true;
}

/* The grower of @v (the first late member), or UINT32_MAX. */
static uint32_t grower_of(const struct farm_view *v)
{
	for (unsigned q = 0; q < v->nlate && q < FARM_VIEW_MAX; q++)
		if (farm_view_find(v, v->late[q]))
			return v->late[q];
	return UINT32_MAX;
}

/* Chosen placement (balance.c): z->next's pins from z->cur's, balanced
 * with the regions this machine was told of, in the configuration that
 * makes a machine the grower only: its share (its extra copies) is then
 * fixed for the rest of its growth, as the rings' share is. Otherwise,
 * and without a list (a manager that hosts no store, such as a new
 * holder of the lowest id before it joined the store), the pins only
 * lose the departed machines'. A failure keeps the carried pins:
 * placement stays valid, only less even. */
static void zk_pins(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	struct farm_view *x = &z->next;
	x->npins = 0;
	for (unsigned i = 0; i < z->cur.npins && i < FARM_VIEW_MAX_PINS; i++) {
		/* A pin is its machine's incarnation's: a new holder of the
		 * id (a reused id) starts with none. */
		const struct farm_member *was =
		        farm_view_find(&z->cur, z->cur.pins[i].machine);
		const struct farm_member *now =
		        farm_view_find(x, z->cur.pins[i].machine);
		if (!was || !now || was->incarnation != now->incarnation)
			continue;
		x->pins[x->npins++] = z->cur.pins[i];
	}
	pthread_mutex_lock(&m->lock);
	unsigned n = m->nbalanced;
	uint32_t *rg = n ? malloc(n * sizeof(*rg)) : NULL;
	if (rg)
		memcpy(rg, m->balanced, n * sizeof(*rg));
	struct farm_ring_attr attr = m->ring_attr;
	pthread_mutex_unlock(&m->lock);
	uint32_t g = grower_of(x);
	bool first = g != UINT32_MAX && g != grower_of(&z->cur);
	int rc = farm_view_balance(x, &attr, rg, rg && first ? n : 0);
	if (rc && rc != -ENOSPC)
		farm_warn("membership: regions not balanced: %s",
		          farm_strerror(rc));
	free(rg);
}

int farm_zk_build_from(struct farm_membership *m, const uint32_t *ids,
                       unsigned n, const struct zk_read *rd)
{
	struct farm_zk *z = m->zk;
	for (unsigned i = 0; i < n; i++) {
		char path[sizeof(z->members) + 16];
		snprintf(path, sizeof(path), "%s/%" PRIu32, z->members, ids[i]);
		struct farm_member *mb = &z->next.members[z->next.n];
		const char *card = rd[i].buf;
		int len = rd[i].len;
		struct Stat st = rd[i].st;
		int zrc = rd[i].rc;
		if (zrc == ZNONODE)
			continue; /* left meanwhile; its watch event follows */
		if (zrc != ZOK)
			return farm_zk_err(zrc);
		bool out = is_suspect(m, ids[i]) || left_now(z, ids[i]);
		for (unsigned r = 0; r < z->cur.nremoved && !out; r++)
			out = z->cur.removed[r].id == ids[i] &&
			      z->cur.removed[r].incarnation == st.czxid;
		if (out) {
			z->next.removed[z->next.nremoved++] =
			        (struct farm_removed){.id = ids[i],
			                              .incarnation = st.czxid};
			continue;
		}
		if (!card_admitted(z, path, card, len, ids[i], st.czxid, mb))
			continue;
		/* Not admitted: an id a restart gave up (any memory), or
		 * one that left the formed cluster (with empty or stale
		 * memory, or with its directory's memory while the cluster
		 * is not restarting: the others lived on without it, so
		 * its copies are out of date). Logged once per
		 * registration. */
		bool lost = is_lost(m, ids[i]);
		if (!lost && zk_incarnation(m, ids[i], mb)) {
			mb->id = ids[i];
			z->next.n++;
			continue;
		}
		bool alone = !mb->fresh && !mb->stale && !z->next.restart &&
		             !FARM_FAULT_SWITCH(FARM_FP_ZK_ADMIT_ALONE);
		bool gone = farm_ids_have(z->cur.gone, z->cur.ngone, ids[i]);
		if (lost || ((mb->fresh || mb->stale || alone) && gone)) {
			if (z->refused_czxid != st.czxid)
				farm_err("membership: machine %" PRIu32
				         " registered%s under the id of a "
				         "machine %s: not admitted (start it "
				         "under a new machine_id with an empty "
				         "directory)",
				         ids[i],
				         lost        ? ""
				         : mb->fresh ? " with empty memory"
				         : mb->stale
				                 ? " again after its session "
				                   "expired"
				                 : " with its old memory, "
				                   "alone,",
				         lost ? "the cluster gave up at a "
				                "restart "
				                "(its data was recovered from "
				                "replicas)"
				              : "that left this cluster");
			z->refused_czxid = st.czxid;
			continue;
		}
		mb->id = ids[i];
		z->next.n++;
	}
	zk_late(m);
	farm_view_next_departed(&z->cur, &z->next);
	zk_pins(m);
	return 0;
}

/* Is member @id of z->cur kept by the next configuration whatever its
 * registration says? Excluded are only the machines this one suspects,
 * the ones listed removed (any incarnation: the registration's decides),
 * gone or lost (farm_zk_build_from); a member's card parsed when it was
 * admitted. */
static bool surely_kept(struct farm_membership *m, uint32_t id)
{
	const struct farm_view *c = &m->zk->cur;
	if (!farm_view_find(c, id) || is_suspect(m, id) || is_lost(m, id) ||
	    farm_ids_have(c->gone, c->ngone, id))
		return false;
	for (unsigned r = 0; r < c->nremoved; r++)
		if (c->removed[r].id == id)
			return false;
	return true;
}

bool farm_zk_may_manage(struct farm_membership *m, const uint32_t *ids,
                        unsigned n)
{
	/* The manager's successor keeps building too: its reads make its
	 * first suspicion of the manager one round trip (zk_fast_write). */
	unsigned kept = 0;
	if (FARM_FAULT_SWITCH(FARM_FP_ZK_ALL_MANAGE))
		return true;
	for (unsigned i = 0; i < n && ids[i] < m->self; i++)
		if (surely_kept(m, ids[i]) && ++kept == 2)
			return false;
	return true;
}

void farm_zk_incarnations(struct farm_view *x)
{
	for (unsigned i = 0; i < x->n; i++)
		if (x->members[i].incarnation == ZK_INC_NEW)
			x->members[i].incarnation = (uint32_t)x->config_id;
}

#endif /* FARM_HAVE_ZK */
