/*
 * Membership through ZooKeeper (ARCHITECTURE.md 2.3, 2.8; layout and
 * failure handling in membership.h).
 *
 * Who does what:
 * - The ZooKeeper client's event thread runs zk_watcher(): it records the
 *   session state and which work is pending, logs transitions, and wakes
 *   the worker. It never calls ZooKeeper (a synchronous call from it would
 *   deadlock the client).
 * - The worker thread (one per handle) does all ZooKeeper calls after open:
 *   zk_sync() re-registers if our ephemeral znode is missing, reads the
 *   live members and the configuration (both with watches), and, when this
 *   machine is the live member with the lowest id and the configuration's
 *   members differ from the live ones, writes the next configuration with
 *   zoo_set(expected version). A lost compare-and-set (ZBADVERSION) means
 *   someone else wrote first: re-read and decide again.
 *
 * Why the lowest live id: every member computes it from the same children
 * list, so at most one member writes once the list has settled; two
 * writers in a transient disagreement are serialised by the version check,
 * and each write is followed by a re-read, so the configuration converges
 * on the live set. Config ids only grow: a new id is above both the old id
 * and the znode's version.
 */
#include "coord/membership_impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/rt.h"

#ifdef FARM_HAVE_ZK

#include "coord/zk_int.h"

static bool zk_transient(int rc)
{
	return rc == -ENOTCONN || rc == -ETIMEDOUT || rc == -ESTALE ||
	       rc == -EAGAIN;
}

static void zk_watcher(zhandle_t *zh, int type, int state, const char *path,
                       void *ctx)
{
	struct farm_membership *m = ctx;
	struct farm_zk *z = m->zk;
	(void)zh;
	(void)path;
	pthread_mutex_lock(&m->lock);
	if (z->zh_closing) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	z->events++;
	m->st.fast_ready = false;
	if (type != ZOO_SESSION_EVENT) {
		z->pending |= PEND_SYNC; /* a watched znode changed */
	} else if (state == ZOO_CONNECTED_STATE) {
		if (m->st.state != FARM_MEMBERSHIP_CONNECTED)
			farm_info("membership: machine %" PRIu32
			          " connected to ZooKeeper (session timeout %d "
			          "ms)",
			          m->self, zoo_recv_timeout(zh));
		z->connected_once = true;
		m->st.state = FARM_MEMBERSHIP_CONNECTED;
		z->pending |= PEND_SYNC | PEND_STATE;
	} else if (state == ZOO_CONNECTING_STATE ||
	           state == ZOO_NOTCONNECTED_STATE ||
	           state == ZOO_ASSOCIATING_STATE) {
		if (m->st.state == FARM_MEMBERSHIP_CONNECTED) {
			m->st.conn_lost++;
			farm_warn(
			        "membership: machine %" PRIu32
			        ": connection to ZooKeeper lost; reconnecting "
			        "(the session survives if that takes less than "
			        "its timeout)",
			        m->self);
			m->st.state = FARM_MEMBERSHIP_CONNECTING;
			z->pending |= PEND_STATE;
		}
	} else if (state == ZOO_EXPIRED_SESSION_STATE ||
	           state == ZOO_AUTH_FAILED_STATE) {
		if (m->st.state != FARM_MEMBERSHIP_EXPIRED) {
			m->st.expired++;
			farm_warn(
			        "membership: machine %" PRIu32
			        ": ZooKeeper session %s; this machine left the "
			        "configuration; re-joining with a new session",
			        m->self,
			        state == ZOO_EXPIRED_SESSION_STATE
			                ? "expired"
			                : "failed authentication");
		}
		m->st.state = FARM_MEMBERSHIP_EXPIRED;
		m->st.registered = false;
		z->pending |= PEND_EXPIRED | PEND_STATE;
	}
	pthread_cond_broadcast(&m->changed);
	pthread_cond_signal(&z->wake);
	pthread_mutex_unlock(&m->lock);
}

static zhandle_t *zk_init(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	/* The client's I/O and completion threads take the creating
	 * thread's policy (pthread_create's default, PTHREAD_INHERIT_SCHED),
	 * so the caller runs SCHED_FIFO for the call when asked to. */
	int policy = SCHED_OTHER;
	struct sched_param sp = {0};
	bool raised = m->realtime &&
	              !pthread_getschedparam(pthread_self(), &policy, &sp) &&
	              policy != SCHED_FIFO && !farm_thread_set_realtime();
	errno = 0;
	zhandle_t *zh =
	        zookeeper_init2(z->connect, zk_watcher, (int)z->session_ms,
	                        NULL, m, 0, farm_zk_log);
	int e = errno;
	if (raised)
		(void)pthread_setschedparam(pthread_self(), policy, &sp);
	/* By default the client resolves the server names again at every
	 * poll of its socket, and with AI_ADDRCONFIG each resolution opens a
	 * netlink socket and dumps the interfaces: 1,400 of them while an
	 * 8-machine cluster forms, 8% of the CPU at 64 machines. A
	 * connection loss still resolves at once; routine checks for DNS
	 * changes need not be more frequent than this. */
	if (zh)
		(void)zoo_set_servers_resolution_delay(zh, ZK_RESOLVE_MS);
	errno = e;
	if (!zh && !errno)
		errno = EINVAL;
	return zh;
}

static int zk_layout(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	char path[sizeof(z->root)];
	/* Every ancestor of the root, then the root itself. */
	for (const char *s = strchr(z->root + 1, '/');;
	     s = strchr(s + 1, '/')) {
		size_t n = s ? (size_t)(s - z->root) : strlen(z->root);
		memcpy(path, z->root, n);
		path[n] = 0;
		int rc = farm_zk_ensure(z->zh, path, NULL, -1);
		if (rc)
			return rc;
		if (!s)
			break;
	}
	int rc = farm_zk_ensure(z->zh, z->members, NULL, -1);
	if (!rc)
		rc = farm_zk_ensure(z->zh, z->refused_dir, NULL, -1);
	if (rc)
		return rc;
	for (unsigned k = 0; k < FARM_ZK_NMARKS; k++) {
		rc = farm_zk_ensure(z->zh, z->mark[k], NULL, -1);
		if (rc)
			return rc;
	}
	memset(&z->cur, 0, sizeof(z->cur));
	int len = farm_view_format(&z->cur, z->buf, ZK_BUF);
	if (len < 0)
		return len;
	return farm_zk_ensure(z->zh, z->config, z->buf, len);
}

static int zk_live(struct farm_zk *z, uint32_t *ids, unsigned *n)
{
	struct String_vector sv = {0};
	int zrc = zoo_get_children(z->zh, z->members, 1, &sv);
	if (zrc != ZOK)
		return farm_zk_err(zrc);
	farm_zk_kids_parse(z->members, &sv, ids, n);
	deallocate_String_vector(&sv);
	return 0;
}

/* The next configuration from the live @ids; @mark: farm_zk_restart_mark's. */
static int zk_build(struct farm_membership *m, const uint32_t *ids, unsigned n,
                    uint64_t mark)
{
	struct farm_zk *z = m->zk;
	z->next.n = 0;
	z->next.nremoved = 0;
	z->next.restart = mark;
	/* Every member's registration, read together (above), into the
	 * buffers a later suspicion may build from again (zk_fast_write). */
	if (n > FARM_VIEW_MAX)
		return -EINVAL; /* farm_zk_kids_parse keeps at most this many */
	struct zk_read *rd = z->rd;
	char *cards = z->cards;
	memcpy(z->rd_ids, ids, n * sizeof(ids[0]));
	z->rd_n = n;
	pthread_mutex_lock(&m->lock);
	m->st.reg_reads++;
	pthread_mutex_unlock(&m->lock);
	struct zk_batch b;
	farm_zk_batch_init(&b, n);
	for (unsigned i = 0; i < n; i++) {
		char path[sizeof(z->members) + 16];
		snprintf(path, sizeof(path), "%s/%" PRIu32, z->members, ids[i]);
		rd[i] = (struct zk_read){.b = &b,
		                         .buf = cards + (size_t)i * ZK_CARD_MAX,
		                         .cap = (int)ZK_CARD_MAX - 1};
		farm_zk_batch_started(&b,
		                      zoo_aget(z->zh, path, 0,
		                               farm_zk_read_data_done, &rd[i]),
		                      &rd[i].rc);
	}
	farm_zk_batch_wait(&b);
	return farm_zk_build_from(m, ids, n, rd);
}

/* Write z->next as the configuration after @version (the znode version
 * read with z->cur), when it names this machine first and differs from
 * z->cur (@force: z->cur did not parse). 1: nothing to write; 0: written
 * and published; -EAGAIN: another manager wrote first. @t_begin: when the
 * work began (membership status); @fast: built by zk_fast_write. */
static int zk_write_next(struct farm_membership *m, int32_t version, bool force,
                         uint64_t t_begin, bool fast)
{
	struct farm_zk *z = m->zk;
	z->next.has_cm = true;
	z->next.cm = m->self;
	if (!z->next.n || z->next.members[0].id != m->self ||
	    (!force && farm_view_same_members(&z->cur, &z->next)))
		return 1;
	uint64_t id = z->cur.config_id;
	if (version > 0 && (uint64_t)version > id)
		id = (uint64_t)version;
	z->next.config_id = id + 1;
	farm_zk_incarnations(&z->next);
	int len = farm_view_format(&z->next, z->buf, ZK_BUF);
	if (len < 0)
		return len;
	int zrc = zoo_set(z->zh, z->config, z->buf, len, version);
	if (zrc == ZBADVERSION) {
		pthread_mutex_lock(&m->lock);
		m->st.cas_conflicts++;
		pthread_mutex_unlock(&m->lock);
		return -EAGAIN;
	}
	if (zrc != ZOK)
		return farm_zk_err(zrc);
	pthread_mutex_lock(&m->lock);
	m->st.config_writes++;
	m->st.fast_writes += fast;
	m->st.t_write_begin_ns = t_begin;
	m->st.t_write_ns = farm_now_ns();
	m->st.write_config_id = z->next.config_id;
	pthread_mutex_unlock(&m->lock);
	farm_info("membership: machine %" PRIu32
	          " (manager) wrote configuration %" PRIu64
	          " with %u members%s",
	          m->self, z->next.config_id, z->next.n,
	          fast ? " (from its last read)" : "");
	/* The compare-and-set made it the configuration: the others may
	 * take it from us now (NEW-CONFIG, offer.c), before their watches
	 * and reads bring it. */
	if (m->on_written)
		m->on_written(m->ctx, &z->next, z->buf, (size_t)len);
	farm_membership_publish(m, &z->next, false);
	return 0;
}

/* The manager's last full sync read the members, their registrations and
 * the configuration (with watches) and had nothing to write; until a
 * watch or session event comes, those reads are still current, so a sync
 * that a local change asked for (a suspicion, above all) can build the
 * next configuration from them and go straight to the compare-and-set: one
 * round trip instead of three. On the 2-core host with four machine
 * processes busy, the two reads took most of a reconfiguration's
 * ZooKeeper time (recovery_bench, docs/benchmarks.md). The compare-and-set
 * on the version read keeps it safe against any write since; a member
 * that registered or left since fires the children watch, so the full
 * sync that event brings corrects the members. 1: not applicable (do the
 * full sync); else zk_write_next's answer. Used once per full sync. */
static int zk_fast_write(struct farm_membership *m, uint64_t t_begin)
{
	struct farm_zk *z = m->zk;
	if (!z->rd_ok)
		return 1;
	z->rd_ok = false;
	pthread_mutex_lock(&m->lock);
	bool current = z->events == z->rd_events;
	m->st.fast_ready = false;
	pthread_mutex_unlock(&m->lock);
	uint64_t mark = farm_zk_restart_mark(m);
	if (!current || mark == UINT64_MAX)
		return 1;
	z->next.n = 0;
	z->next.nremoved = 0;
	z->next.restart = mark;
	if (farm_zk_build_from(m, z->rd_ids, z->rd_n, z->rd))
		return 1;
	return zk_write_next(m, z->rd_version, false, t_begin, true);
}

/* Write our marks (farm_zk_mark): the manager's watch on each brings it a
 * sync, which acts on a mark that names the configuration in force
 * (zk_next.c: the grower leaves the late list; a bump is written). */
/* What each mark says, for the log. */
static const char *const mark_says[FARM_ZK_NMARKS] = {
        [FARM_ZK_MARK_GROW] = "holds every copy of its share: asks to "
                              "become an ordinary member",
        [FARM_ZK_MARK_BUMP] = "holds a complete copy of a region it is "
                              "primary of that no round promoted: asks for "
                              "a round",
        [FARM_ZK_MARK_LEAVE] = "asks to leave the cluster gracefully",
        [FARM_ZK_MARK_LEFT] = "handed its data off and quiesced: asks to "
                              "be removed",
};

static int zk_mark_write(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	for (unsigned k = 0; k < FARM_ZK_NMARKS; k++) {
		pthread_mutex_lock(&m->lock);
		uint64_t cfg = z->mark_want[k];
		pthread_mutex_unlock(&m->lock);
		if (!cfg)
			continue;
		if (!z->zh || zoo_state(z->zh) != ZOO_CONNECTED_STATE)
			return -ENOTCONN;
		char buf[48];
		int len = snprintf(buf, sizeof(buf), "%" PRIu32 " %" PRIu64,
		                   m->self, cfg);
		int zrc = zoo_set(z->zh, z->mark[k], buf, len, -1);
		if (zrc == ZNONODE) {
			zrc = zoo_create(z->zh, z->mark[k], buf, len,
			                 &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT,
			                 NULL, 0);
			if (zrc == ZNODEEXISTS)
				return -EAGAIN;
		}
		if (zrc != ZOK)
			return farm_zk_err(zrc);
		pthread_mutex_lock(&m->lock);
		if (z->mark_want[k] == cfg)
			z->mark_want[k] = 0; /* written; a newer one waits */
		pthread_mutex_unlock(&m->lock);
		farm_info("membership: machine %" PRIu32 " %s in configuration "
		          "%" PRIu64,
		          m->self, mark_says[k], cfg);
		FARM_FAULT_POINT(FARM_FP_ZK_MARK_WRITTEN);
	}
	return 0;
}

/* Under the handle's lock, what the sync read: the suspects still
 * members, the refusal notices, the counters. Whether this machine's own
 * notice is among them. */
static bool sync_note(struct farm_membership *m, const struct sync_reads *r,
                      const uint32_t *ids, unsigned nids, bool parsed, int reg)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	/* A suspect that the configuration no longer names as a member is
	 * out (listed as removed while its incarnation lives). */
	for (unsigned i = 0; parsed && i < z->nsuspects;)
		if (!farm_view_find(&z->cur, z->suspects[i]))
			z->suspects[i] = z->suspects[--z->nsuspects];
		else
			i++;
	/* Machines that refused their directories at a restart (node.c
	 * gives those still missing up at once). Ours, if we came back, is
	 * deleted below. */
	z->nrefused = 0;
	bool mine = false;
	const uint32_t *rids = r->rids;
	for (unsigned i = 0; r->refused.rc == ZOK && i < r->refused.n; i++) {
		/* One registered again came back since: stale. */
		bool live = false;
		for (unsigned j = 0; j < nids && !live; j++)
			live = ids[j] == rids[i];
		if (rids[i] != m->self && !live)
			z->refused[z->nrefused++] = rids[i];
		mine |= rids[i] == m->self;
	}
	if (r->refused.rc == ZNONODE)   /* removed under us: made again, and */
		z->layout_done = false; /* watched, at the next sync */
	m->st.syncs++;
	m->st.registered = reg == 0;
	z->held_elsewhere = reg == 1;
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	return mine;
}

/* The manager's part of a sync (this machine is the lowest live id):
 * build and write the next configuration. 1: go on with the sync; else
 * what zk_sync returns. */
static int sync_manage(struct farm_membership *m, const uint32_t *ids,
                       unsigned nids, int32_t version, bool parsed,
                       uint64_t t_begin, uint64_t events)
{
	struct farm_zk *z = m->zk;
	/* The manager is the lowest live id that is neither removed nor
	 * suspected: the CM while it lives, then its successors in id
	 * order. */
	uint64_t mark = farm_zk_restart_mark(m);
	if (mark == UINT64_MAX) {
		/* Restarting alone into a cluster that lived on: not a
		 * manager (node.c refuses this machine and closes, which
		 * hands management back to the next id). */
		if (!z->lone_logged)
			farm_warn("membership: machine %" PRIu32
			          " restarts on its directory, but "
			          "configuration %" PRIu64
			          " does not name it: it does not manage",
			          m->self, z->cur.config_id);
		z->lone_logged = true;
		return 1;
	}
	int rc = zk_build(m, ids, nids, mark);
	if (rc)
		return rc;
	rc = zk_write_next(m, version, !parsed, t_begin, false);
	if (rc <= 0)
		return rc;
	/* Nothing to write: these reads serve the next suspicion
	 * (zk_fast_write) while no event comes. */
	z->rd_ok = parsed;
	z->rd_events = events;
	z->rd_version = version;
	pthread_mutex_lock(&m->lock);
	m->st.fast_ready = z->rd_ok && z->events == events;
	pthread_mutex_unlock(&m->lock);
	return 1;
}

/* The rest of a sync, on what farm_zk_sync_read read: registration, the live
 * members, the configuration, the manager's write, our stale notice, the
 * view published. */
static int sync_apply(struct farm_membership *m, struct sync_reads *r,
                      uint64_t t_begin, uint64_t events)
{
	struct farm_zk *z = m->zk;
	uint32_t *ids = r->ids;
	unsigned nids = 0;
	int rc;
	bool created;
	struct Stat cst = r->cfg.st;
	int len = r->cfg.len;
	int zrc = r->cfg.rc;
	if (zrc == ZNONODE) {
		z->layout_done = false;
		return -EAGAIN;
	}
	if (zrc != ZOK)
		return farm_zk_err(zrc);
	/* Parsed before registering: the configuration read with our
	 * registration says whether another session's is a removed
	 * incarnation (zk_displace). */
	bool parsed = farm_view_parse(z->buf, len > 0 ? (size_t)len : 0,
	                              &z->cur) == 0;
	if (!parsed) {
		farm_err("membership: %s is malformed; the manager will "
		         "rewrite it",
		         z->config);
		memset(&z->cur, 0, sizeof(z->cur));
	}
	int reg = farm_zk_register(m, r->self.rc, &r->self.st, &created);
	if (reg < 0)
		return reg;
	if (created) { /* the members read above did not list us yet */
		rc = zk_live(z, ids, &nids);
	} else {
		rc = farm_zk_err(r->kids.rc);
		nids = r->kids.n;
	}
	if (rc == -ENOENT)
		z->layout_done = false; /* someone removed the layout */
	if (rc)
		return rc == -ENOENT ? -EAGAIN : rc;
	bool mine = sync_note(m, r, ids, nids, parsed, reg);

	/* Only the machines that could manage read every registration: by
	 * all, each configuration change cost M reads at each of M machines
	 * (M squared at 128 machines). */
	bool may = parsed ? farm_zk_may_manage(m, ids, nids) : true;
	if (reg == 0 && nids && ids[0] <= m->self && may) {
		rc = sync_manage(m, ids, nids, cst.version, parsed, t_begin,
		                 events);
		if (rc <= 0)
			return rc;
	} else {
		z->rd_ok = false; /* no reads for a suspicion to build from */
	}
	if (mine && reg == 0) { /* we came back: the notice is stale */
		char p[sizeof(z->refused_dir) + 16];
		snprintf(p, sizeof(p), "%s/%" PRIu32, z->refused_dir, m->self);
		int drc = zoo_delete(z->zh, p, -1);
		if (drc != ZOK && drc != ZNONODE)
			farm_warn("membership: cannot delete %s: %s", p,
			          zerror(drc));
	}
	if (parsed && z->cur.config_id) {
		/* Testing: a slow read (a ZooKeeper short of CPU). */
		FARM_FAULT_POINT(FARM_FP_ZK_SLOW_PUBLISH);
		farm_membership_publish(m, &z->cur, false);
	}
	return 0;
}

static int zk_sync(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	uint64_t t_begin = farm_now_ns();
	if (!z->zh || zoo_state(z->zh) != ZOO_CONNECTED_STATE)
		return -ENOTCONN; /* the CONNECTED event brings us back */
	int rc;
	if (!z->layout_done) {
		rc = zk_layout(m);
		if (rc)
			return rc;
		z->layout_done = true;
	}
	rc = zk_fast_write(m, t_begin);
	if (rc <= 0)
		return rc;
	/* Events from here on make what this sync reads out of date. */
	pthread_mutex_lock(&m->lock);
	uint64_t events = z->events;
	pthread_mutex_unlock(&m->lock);
	/* Our registration, the live members and the configuration, each
	 * with its watch, in one round trip (above). */
	struct sync_reads r;
	farm_zk_sync_read(z, &r);
	return sync_apply(m, &r, t_begin, events);
}

/* The session expired: close the handle, open a new session. The CONNECTED
 * event of the new one brings a sync, which registers again. */
static int zk_rejoin(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	z->zh_closing = true;
	pthread_mutex_unlock(&m->lock);
	if (z->zh) {
		int zrc = zookeeper_close(z->zh);
		if (zrc != ZOK)
			farm_dbg("membership: zookeeper_close: %d", zrc);
	}
	z->zh = NULL;
	z->layout_done = false;
	pthread_mutex_lock(&m->lock);
	z->zh_closing = false;
	pthread_mutex_unlock(&m->lock);
	zhandle_t *zh = zk_init(m);
	if (!zh) {
		int rc = -errno;
		farm_err("membership: machine %" PRIu32
		         ": cannot open a new ZooKeeper session: %s",
		         m->self, farm_strerror(rc));
		return rc;
	}
	z->zh = zh;
	/* Registered again from here on with "stale": in a formed cluster
	 * the machine's regions were recovered elsewhere when it left, so
	 * its memory must not come back as a member's (farm_zk_build_from). */
	m->stale = true;
	pthread_mutex_lock(&m->lock);
	m->st.rejoins++;
	m->st.registered = false; /* the old session's znode went with it */
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static void deliver_state(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	enum farm_membership_state s = m->st.state;
	pthread_mutex_unlock(&m->lock);
	if (s == z->told)
		return;
	z->told = s;
	if (m->on_state)
		m->on_state(m->ctx, s);
}

static void *zk_worker(void *arg)
{
	struct farm_membership *m = arg;
	struct farm_zk *z = m->zk;
	if (m->realtime)
		(void)farm_thread_set_realtime(); /* normal without the right */
	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!z->stop && !z->pending) {
			if (!z->retry) {
				pthread_cond_wait(&z->wake, &m->lock);
				continue;
			}
			struct timespec dl;
			farm_zk_deadline_in(&dl, ZK_BACKOFF_MS);
			if (pthread_cond_timedwait(&z->wake, &m->lock, &dl) ==
			    ETIMEDOUT) {
				z->pending |= z->retry;
				z->retry = 0;
			}
		}
		if (z->stop)
			break;
		unsigned p = z->pending;
		z->pending = 0;
		pthread_mutex_unlock(&m->lock);

		int rc = 0;
		unsigned redo = 0;
		if (p & PEND_EXPIRED) {
			rc = zk_rejoin(m);
			redo = PEND_EXPIRED;
		} else if (p & PEND_MARK) {
			rc = zk_mark_write(m);
			redo = PEND_MARK;
			if (p & PEND_SYNC) { /* not lost: next round */
				pthread_mutex_lock(&m->lock);
				z->pending |= PEND_SYNC;
				pthread_mutex_unlock(&m->lock);
			}
		} else if (p & PEND_SYNC) {
			rc = zk_sync(m);
			redo = PEND_SYNC;
		}
		deliver_state(m);

		pthread_mutex_lock(&m->lock);
		/* A mark waits in mark_want until written: one not taken
		 * this round (a re-join came first) is taken next, and one
		 * that found no session is tried again after the backoff
		 * (no session event asks for it). */
		if ((p & PEND_MARK) && redo != PEND_MARK)
			z->pending |= PEND_MARK;
		if (rc == -EAGAIN) {
			z->pending |= redo; /* lost a race: look again now */
		} else if (rc == -ESTALE || rc == -ENOTCONN) {
			/* The session event that follows brings us back. */
			if (redo == PEND_MARK)
				z->retry |= PEND_MARK;
		} else if (rc) {
			if (!z->opened && !zk_transient(rc)) {
				z->fatal = rc;
				pthread_cond_broadcast(&m->changed);
			}
			farm_warn("membership: machine %" PRIu32
			          ": %s failed: %s; retrying",
			          m->self,
			          redo == PEND_SYNC   ? "sync"
			          : redo == PEND_MARK ? "mark"
			                              : "re-join",
			          farm_strerror(rc));
			z->retry |= redo;
		}
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

static void zk_free(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	if (z->worker_started) {
		pthread_mutex_lock(&m->lock);
		z->stop = true;
		pthread_cond_signal(&z->wake);
		pthread_mutex_unlock(&m->lock);
		pthread_join(z->worker, NULL);
	}
	pthread_mutex_lock(&m->lock);
	z->zh_closing = true;
	pthread_mutex_unlock(&m->lock);
	if (z->zh) {
		/* Ends the session: our ephemeral znode goes at once. */
		int zrc = zookeeper_close(z->zh);
		if (zrc != ZOK)
			farm_dbg("membership: zookeeper_close: %d", zrc);
	}
	pthread_cond_destroy(&z->wake);
	free(z->rd);
	free(z->cards);
	free(z->buf);
	free(z);
	m->zk = NULL;
}

int farm_zk_suspect(struct farm_membership *m, const uint32_t *ids, unsigned n)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < n; i++) {
		bool have = false;
		for (unsigned j = 0; j < z->nsuspects && !have; j++)
			have = z->suspects[j] == ids[i];
		if (have || ids[i] == m->self)
			continue;
		if (z->nsuspects == FARM_VIEW_MAX)
			break;
		z->suspects[z->nsuspects++] = ids[i];
		m->st.suspects++;
	}
	z->pending |= PEND_SYNC;
	pthread_cond_signal(&z->wake);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int farm_zk_forsake(struct farm_membership *m, const uint32_t *ids, unsigned n)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < n; i++) {
		if (ids[i] == m->self ||
		    farm_ids_have(z->forsake, z->nforsake, ids[i]))
			continue;
		if (z->nforsake == FARM_VIEW_MAX)
			break;
		z->forsake[z->nforsake++] = ids[i];
	}
	z->pending |= PEND_SYNC;
	pthread_cond_signal(&z->wake);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int farm_zk_mark(struct farm_membership *m, enum farm_zk_mark k,
                 uint64_t config_id)
{
	if ((unsigned)k >= FARM_ZK_NMARKS)
		return -EINVAL;
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	if (z->mark_want[k] < config_id)
		z->mark_want[k] = config_id;
	z->pending |= PEND_MARK;
	pthread_cond_signal(&z->wake);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

unsigned farm_zk_refused(struct farm_membership *m, uint32_t *ids)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	unsigned n = z->nrefused;
	memcpy(ids, z->refused, n * sizeof(ids[0]));
	pthread_mutex_unlock(&m->lock);
	return n;
}

void farm_zk_kick(struct farm_membership *m)
{
	struct farm_zk *z = m->zk;
	pthread_mutex_lock(&m->lock);
	z->pending |= PEND_SYNC;
	pthread_cond_signal(&z->wake);
	pthread_mutex_unlock(&m->lock);
}

void farm_zk_close(struct farm_membership *m)
{
	if (m && m->zk)
		zk_free(m);
}

static uint64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* Wait until registered with a view read, within the bounds of the open
 * that began at @t0 (ms). 0 or why not. */
static int zk_open_wait(struct farm_membership *m, uint64_t t0)
{
	struct farm_zk *z = m->zk;
	uint64_t dl_connect = t0 + z->connect_ms;
	uint64_t dl_register = dl_connect + z->session_ms;
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	for (;;) {
		if (z->fatal) {
			rc = z->fatal;
			break;
		}
		if (m->st.registered && m->st.syncs) {
			z->opened = true;
			break;
		}
		uint64_t now = mono_ms();
		if (!z->connected_once && now >= dl_connect) {
			rc = FARM_EUNAVAILABLE;
			break;
		}
		if (now >= dl_register) {
			rc = z->held_elsewhere ? -EADDRINUSE : -ETIMEDOUT;
			break;
		}
		uint64_t until = z->connected_once ? dl_register : dl_connect;
		struct timespec ts;
		farm_zk_deadline_in(&ts, (int)(until - now));
		pthread_cond_timedwait(&m->changed, &m->lock, &ts);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int farm_zk_open(struct farm_membership *m,
                 const struct farm_membership_attr *a)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, farm_zk_global_init);

	const char *root = a->zk_root ? a->zk_root : "/libfarm/default";
	if (!farm_zk_connect_valid(a->zk) || !farm_zk_path_valid(root))
		return -EINVAL;
	struct farm_zk *z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	z->buf = malloc(ZK_BUF);
	z->rd = calloc(FARM_VIEW_MAX, sizeof(*z->rd));
	z->cards = malloc((size_t)FARM_VIEW_MAX * ZK_CARD_MAX);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int e = pthread_cond_init(&z->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (!z->buf || !z->rd || !z->cards || e) {
		if (!e)
			pthread_cond_destroy(&z->wake);
		free(z->rd);
		free(z->cards);
		free(z->buf);
		free(z);
		return e ? -e : -ENOMEM;
	}
	z->session_ms = a->session_ms ? a->session_ms : ZK_DEFAULT_SESSION_MS;
	z->connect_ms = a->connect_ms ? a->connect_ms : ZK_DEFAULT_CONNECT_MS;
	z->told = FARM_MEMBERSHIP_CONNECTING;
	snprintf(z->connect, sizeof(z->connect), "%s", a->zk);
	snprintf(z->root, sizeof(z->root), "%s", root);
	snprintf(z->members, sizeof(z->members), "%s/members", root);
	snprintf(z->config, sizeof(z->config), "%s/config", root);
	snprintf(z->mark[FARM_ZK_MARK_GROW], sizeof(z->mark[0]), "%s/grow",
	         root);
	snprintf(z->mark[FARM_ZK_MARK_BUMP], sizeof(z->mark[0]), "%s/bump",
	         root);
	snprintf(z->mark[FARM_ZK_MARK_LEFT], sizeof(z->mark[0]), "%s/left",
	         root);
	snprintf(z->mark[FARM_ZK_MARK_LEAVE], sizeof(z->mark[0]), "%s/leave",
	         root);
	snprintf(z->self_path, sizeof(z->self_path), "%s/%" PRIu32, z->members,
	         m->self);
	snprintf(z->refused_dir, sizeof(z->refused_dir), "%s/refused", root);
	m->zk = z;

	uint64_t t0 = mono_ms();
	z->zh = zk_init(m);
	if (!z->zh) {
		int rc = -errno;
		farm_warn("membership: cannot use ZooKeeper at '%s': %s", a->zk,
		          farm_strerror(rc));
		zk_free(m);
		return rc;
	}
	e = pthread_create(&z->worker, NULL, zk_worker, m);
	if (e) {
		zk_free(m);
		return -e;
	}
	z->worker_started = true;

	int rc = zk_open_wait(m, t0);
	/* A manager of another build would leave us out for good: say so
	 * now rather than at the caller's timeout. (Testing: a card of
	 * another version is a test's stand-in for another build, which is
	 * to reach the manager's check.) */
	if (!rc && !FARM_FAULT_SWITCH(FARM_FP_ZK_CARD_WIRE))
		rc = farm_zk_manager_wire(m);
	if (rc) {
		farm_warn("membership: machine %" PRIu32
		          " could not join through ZooKeeper at '%s' within "
		          "%" PRIu64 " ms: %s",
		          m->self, a->zk, mono_ms() - t0, farm_strerror(rc));
		zk_free(m);
		return rc;
	}
	farm_info("membership: machine %" PRIu32
	          " joined through %s%s in %" PRIu64 " ms",
	          m->self, a->zk, z->root, mono_ms() - t0);
	return 0;
}

/* ---- a read without joining (farm_zk_peek) ---------------------------- */

#endif /* FARM_HAVE_ZK */
