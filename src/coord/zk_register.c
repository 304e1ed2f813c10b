/*
 * A machine's registration at ZooKeeper (zk.c's worker calls it): its
 * ephemeral znode under the members, created; or, when another session
 * holds the id, replaced in one multi-operation where that session is a
 * dead previous incarnation of this process, displaced where the
 * configuration lists it removed (a reused id's new holder), reclaimed
 * where it is our own. The card it carries is the machine's endpoint,
 * wire version, domain and flags.
 */
#include "coord/membership_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/wire.h"

#ifdef FARM_HAVE_ZK

#include "coord/zk_int.h"

/* The card: the endpoint, this build's wire version (util/wire.h), then
 * the optional lines (farm_zk_card_parse). */
static int zk_card(const struct farm_membership *m, char *out)
{
	unsigned wire = FARM_WIRE_VERSION;
	if (FARM_FAULT_SWITCH(FARM_FP_ZK_CARD_WIRE))
		wire++; /* testing: a machine of another version */
	return snprintf(out, ZK_CARD_MAX, "%s\nwire %u%s%s%s%s", m->endpoint,
	                wire, m->domain[0] ? "\ndomain " : "", m->domain,
	                m->fresh ? "\nfresh" : "", m->stale ? "\nstale" : "");
}

/* Our id's registration by another session, at data version @version,
 * replaced by ours in one atomic multi-operation (delete, create): the
 * manager never sees the id absent in between, which it would take for a
 * departure. 0 (*@created); -EAGAIN: it changed meanwhile (look again); a
 * negative code. */
static int zk_replace(struct farm_membership *m, int32_t version, bool *created)
{
	struct farm_zk *z = m->zk;
	char mine[ZK_CARD_MAX];
	int mlen = zk_card(m, mine);
	zoo_op_t ops[2];
	zoo_op_result_t res[2];
	zoo_delete_op_init(&ops[0], z->self_path, version);
	zoo_create_op_init(&ops[1], z->self_path, mine, mlen,
	                   &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
	int zrc = zoo_multi(z->zh, 2, ops, res);
	if (zrc == ZNONODE || zrc == ZBADVERSION || zrc == ZNODEEXISTS)
		return -EAGAIN;
	if (zrc != ZOK)
		return farm_zk_err(zrc);
	*created = true;
	return 0;
}

/* Our id's registration by another session (@st) that the configuration
 * in force (z->cur, read with it) lists as a removed incarnation (its
 * creation zxid is the incarnation listed): that holder is out of the
 * configuration and fenced everywhere, and its registration outlives it
 * only until its session ends (the session timeout after a kill -9). Ours
 * replaces it at once (0, *@created) instead of waiting. A registration
 * the configuration does not list as removed (a live member, paused or
 * not, or a fresh holder not yet admitted) is never touched: 1 (wait). A
 * removed holder that is still alive (paused) finds its registration
 * gone and registers again only as stale (zk_register), which a formed
 * cluster refuses under a gone id. -EAGAIN: it changed meanwhile; a
 * negative code. The delete checks the data version read, which an
 * ephemeral registration never changes: one deleted and made again
 * between the read and the multi-operation would be taken too, which
 * takes two new holders of one id started at once. */
static int zk_displace(struct farm_membership *m, const struct Stat *st,
                       bool *created)
{
	struct farm_zk *z = m->zk;
	if (FARM_FAULT_SWITCH(FARM_FP_ZK_DISPLACE_WAIT))
		return 1;
	bool removed = FARM_FAULT_SWITCH(FARM_FP_ZK_DISPLACE_EARLY);
	for (unsigned r = 0; r < z->cur.nremoved && !removed; r++)
		removed = z->cur.removed[r].id == m->self &&
		          z->cur.removed[r].incarnation == st->czxid;
	if (!removed)
		return 1;
	int rc = zk_replace(m, st->version, created);
	if (rc)
		return rc;
	farm_warn("membership: machine %" PRIu32 ": the registration of "
	          "session 0x%" PRIx64 " is the incarnation configuration "
	          "%" PRIu64 " removed: replaced by this one's instead of "
	          "waited out",
	          m->self, (uint64_t)st->ephemeralOwner, z->cur.config_id);
	pthread_mutex_lock(&m->lock);
	m->st.displaced++;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* Our id's registration by another session (@st): when its endpoint
 * starts with our own address, which this process holds alone while it
 * lives, that session's process is a dead previous incarnation of this
 * machine whose session outlived it: replace the registration by ours
 * (0, *@created), as a whole-cluster restart would otherwise wait for
 * every session to expire. One atomic multi-operation (delete, create):
 * the manager never sees the id absent in between, which it would take
 * for a departure (the machine, already registered again, then found
 * itself removed). 1: someone else's (wait for it); -EAGAIN: it changed
 * meanwhile (look again); a negative code. */
static int zk_reclaim(struct farm_membership *m, const struct Stat *st,
                      bool *created)
{
	struct farm_zk *z = m->zk;
	size_t alen = strlen(m->address);
	if (!alen)
		return 1;
	char card[ZK_CARD_MAX];
	int len = (int)sizeof(card) - 1;
	struct Stat cur;
	int zrc = zoo_get(z->zh, z->self_path, 0, card, &len, &cur);
	if (zrc == ZNONODE)
		return -EAGAIN; /* gone meanwhile: look again */
	if (zrc != ZOK)
		return farm_zk_err(zrc);
	if (len < 0)
		len = 0;
	card[len] = 0;
	if (cur.ephemeralOwner != st->ephemeralOwner ||
	    strncmp(card, m->address, alen) ||
	    (card[alen] != ' ' && card[alen] != '\n' && card[alen] != 0))
		return 1;
	int rc = zk_replace(m, cur.version, created);
	if (rc)
		return rc;
	farm_warn("membership: machine %" PRIu32 ": the registration of "
	          "session 0x%" PRIx64 " names this machine's own address, "
	          "which this process holds: a dead previous incarnation's, "
	          "replaced by this one's instead of waited out",
	          m->self, (uint64_t)cur.ephemeralOwner);
	pthread_mutex_lock(&m->lock);
	m->st.reclaimed++;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* Register this machine, given what zoo_exists on our znode answered
 * (@zrc, @st; the watch was set by that call). Returns 0 when our
 * ephemeral znode exists (*created: this call made it), 1 when another
 * session holds our id (we wait for it: its deletion fires the watch), or
 * a negative code. */
int farm_zk_register(struct farm_membership *m, int zrc, const struct Stat *stp,
                     bool *created)
{
	struct farm_zk *z = m->zk;
	struct Stat st = *stp;
	*created = false;
	if (zrc == ZOK) {
		const clientid_t *cid = zoo_client_id(z->zh);
		if (cid && st.ephemeralOwner == cid->client_id) {
			z->held_logged = false;
			return 0;
		}
		int rrc = zk_reclaim(m, &st, created);
		if (rrc == 1)
			rrc = zk_displace(m, &st, created);
		if (rrc <= 0)
			return rrc; /* replaced by ours (0), or look again */
		if (!z->held_logged)
			farm_warn(
			        "membership: machine id %" PRIu32
			        " is registered by another session (0x%" PRIx64
			        "); waiting for it to end",
			        m->self, (uint64_t)st.ephemeralOwner);
		z->held_logged = true;
		return 1;
	}
	if (zrc != ZNONODE)
		return farm_zk_err(zrc);
	pthread_mutex_lock(&m->lock);
	bool was = m->st.registered; /* by this session (expiry clears it) */
	pthread_mutex_unlock(&m->lock);
	if (was && !m->stale) {
		/* Our registration went while our session lives: another
		 * session deleted it, a new holder of this id replacing a
		 * removed incarnation (zk_displace), which this machine is.
		 * Its memory is the removed incarnation's: registered again
		 * only as stale, never fresh, so it is not admitted as a new
		 * holder of the id (farm_zk_build_from). */
		farm_warn("membership: machine %" PRIu32 ": its registration "
		          "was deleted while its session lives (a removed "
		          "incarnation, replaced); registering again as stale",
		          m->self);
		m->stale = true;
	}
	char card[ZK_CARD_MAX];
	int clen = zk_card(m, card);
	zrc = zoo_create(z->zh, z->self_path, card, clen, &ZOO_OPEN_ACL_UNSAFE,
	                 ZOO_EPHEMERAL, NULL, 0);
	if (zrc == ZOK) {
		farm_info("membership: machine %" PRIu32 " registered as %s",
		          m->self, z->self_path);
		*created = true;
		return 0;
	}
	if (zrc == ZNODEEXISTS)
		return -EAGAIN; /* raced with another session: look again */
	return farm_zk_err(zrc);
}

/* The wire version of the manager the configuration in force names: 0
 * when it is ours (or there is none, or it is this machine or gone), else
 * -EPROTO, logged: it would never admit this machine (zk_next.c,
 * wire_admitted). One read of the configuration and one of a card, on the
 * opener's thread (the client is thread-safe). */
int farm_zk_manager_wire(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	char *buf = malloc(ZK_BUF);
	struct farm_view *v = malloc(sizeof(*v));
	int rc = buf && v ? 0 : -ENOMEM;
	int len = ZK_BUF;
	if (!rc && zoo_get(z->zh, z->config, 0, buf, &len, NULL) == ZOK &&
	    !farm_view_parse(buf, len > 0 ? (size_t)len : 0, v) && v->has_cm &&
	    v->cm != m->self) {
		char path[sizeof(z->members) + 16];
		struct farm_member mb;
		snprintf(path, sizeof(path), "%s/%" PRIu32, z->members, v->cm);
		len = ZK_CARD_MAX;
		if (zoo_get(z->zh, path, 0, buf, &len, NULL) == ZOK &&
		    !farm_zk_card_parse(buf, len, &mb) &&
		    mb.wire != FARM_WIRE_VERSION) {
			farm_err("membership: machine %" PRIu32 ": the "
			         "cluster's manager (machine %" PRIu32
			         ") speaks "
			         "wire version %" PRIu32 ", this build %u: it "
			         "cannot join (start it with the cluster's "
			         "build)",
			         m->self, v->cm, mb.wire, FARM_WIRE_VERSION);
			rc = -EPROTO;
		}
	}
	free(v);
	free(buf);
	return rc;
}

#endif
