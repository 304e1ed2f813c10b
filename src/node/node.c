/*
 * A libfarm machine put together from a configuration (node.h).
 */
#include "node/node.h"
#include "node/node_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc/galloc.h"
#include "node/grow.h"
#include "node/ctl.h"
#include "node/rejoin.h"
#include "node/restart.h"
#include "recovery/recovery.h"
#include "txn/txm.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

#define CARD_FILE "machine.card"

/* ---- cards --------------------------------------------------------------- */

static int card_format(farm_node *n)
{
	char addr[FARM_ENDPOINT_MAX];
	int rc = farm_fabric_address(n->fab, addr, sizeof(addr));
	if (rc < 0)
		return rc;
	farm_mr_desc d = farm_msg_desc(n->msg), l = farm_txm_log_desc(n->txm);
	int len = snprintf(n->card, sizeof(n->card),
	                   "%s msg=%" PRIx64 ":%" PRIx64 ":%" PRIx64
	                   " log=%" PRIx64 ":%" PRIx64 ":%" PRIx64,
	                   addr, d.key, d.addr, d.len, l.key, l.addr, l.len);
	if (len < 0 || (size_t)len >= sizeof(n->card))
		return -ENAMETOOLONG;
	/* A restarting machine's previous log (restart.c), before the
	 * lease address, which stays last. */
	farm_restart_card(n->rs, n->card, sizeof(n->card));
	size_t used = strlen(n->card);
	len = snprintf(n->card + used, sizeof(n->card) - used, "%s%s",
	               n->rec ? " lease=" : "",
	               n->rec ? farm_recovery_lease_addr(n->rec) : "");
	return len < 0 || (size_t)len >= sizeof(n->card) - used ? -ENAMETOOLONG
	                                                        : 0;
}

/* Where a card's optional " lease=<addr>" tail starts (NULL: none). */
static const char *card_lease(const char *card)
{
	const char *t = NULL;
	for (const char *x = card; (x = strstr(x, " lease=")); x++)
		t = x;
	return t && !strchr(t + 7, ' ') ? t : NULL;
}

int farm_node_card_lease(const char *card, char *out, size_t len)
{
	if (!card || !out || !len)
		return -EINVAL;
	const char *t = card_lease(card);
	if (!t)
		return -ENOENT;
	size_t n = strlen(t + 7);
	if (n == 0 || n >= len)
		return -EINVAL;
	memcpy(out, t + 7, n + 1);
	return 0;
}

int farm_node_card_parse(const char *card, char *addr, size_t addrlen,
                         farm_mr_desc *msg_desc, farm_mr_desc *log_desc)
{
	if (!card || !addr || !msg_desc || !log_desc)
		return -EINVAL;
	char body[FARM_ENDPOINT_MAX];
	const char *t = card_lease(card);
	if (t) { /* parse what comes before the lease address */
		size_t bl = (size_t)(t - card);
		if (bl >= sizeof(body))
			return -EINVAL;
		memcpy(body, card, bl);
		body[bl] = 0;
		card = body;
	}
	const char *rl = farm_restart_card_field(card);
	if (rl) { /* and before a restarting machine's rlog= field */
		size_t bl = (size_t)(rl - card);
		if (bl >= sizeof(body))
			return -EINVAL;
		memmove(body, card, bl);
		body[bl] = 0;
		card = body;
	}
	const char *m = strstr(card, " msg=");
	if (!m)
		return -ENOENT; /* a bare address (static membership) */
	for (const char *x = m + 1; (x = strstr(x, " msg=")); x++)
		m = x; /* the last one: addresses may hold the text too */
	size_t alen = (size_t)(m - card);
	if (alen == 0 || alen >= addrlen)
		return -EINVAL;
	uint64_t key, base, len, lkey, lbase, llen;
	char tail;
	if (sscanf(m + 5,
	           "%" SCNx64 ":%" SCNx64 ":%" SCNx64 " log=%" SCNx64
	           ":%" SCNx64 ":%" SCNx64 "%c",
	           &key, &base, &len, &lkey, &lbase, &llen, &tail) != 6)
		return -EINVAL;
	memcpy(addr, card, alen);
	addr[alen] = 0;
	*msg_desc = (farm_mr_desc){.key = key,
	                           .addr = base,
	                           .len = len,
	                           .access = FARM_ACCESS_ALL};
	*log_desc = (farm_mr_desc){.key = lkey,
	                           .addr = lbase,
	                           .len = llen,
	                           .access = FARM_ACCESS_REMOTE_READ |
	                                     FARM_ACCESS_REMOTE_WRITE};
	return 0;
}

static int card_write(farm_node *n)
{
	char path[FARM_CONFIG_STR + 32], tmp[FARM_CONFIG_STR + 40];
	snprintf(path, sizeof(path), "%s/" CARD_FILE, n->cfg.data_dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "we");
	if (!f)
		return -errno;
	fprintf(f, "%s\n", n->card);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		int rc = -errno;
		unlink(tmp);
		return rc;
	}
	n->card_written = true;
	return 0;
}

/* A static peer's card, from its data directory, waited for. */
int farm_node_card_read(const char *dir, int timeout_ms, char *out, size_t len)
{
	char path[FARM_CONFIG_STR + 32];
	snprintf(path, sizeof(path), "%s/" CARD_FILE, dir);
	uint64_t deadline = farm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	unsigned backoff_us = 100;
	for (;;) {
		FILE *f = fopen(path, "re");
		if (f) {
			bool ok = fgets(out, (int)len, f) != NULL;
			fclose(f);
			if (ok) {
				out[strcspn(out, "\n")] = 0;
				return 0;
			}
		} else if (errno != ENOENT) {
			return -errno;
		}
		if (farm_now_ns() >= deadline)
			return -ETIMEDOUT;
		/* Polling a file another process will create: back off. */
		usleep(backoff_us);
		backoff_us = FARM_MIN(backoff_us * 2, 50000u);
	}
}

/* ---- views --------------------------------------------------------------- */

/* grow.c's way to the membership (made while the membership opens,
 * cleared before it closes; the call, which returns at once, is made
 * under the lock so that it never reaches a closed membership). */
static int tell_grown(void *ctx, uint64_t cfg)
{
	farm_node *n = ctx;
	pthread_mutex_lock(&n->lock);
	struct farm_membership *mem = n->marked_mem;
	int rc = mem ? farm_membership_grown(mem, cfg) : -EAGAIN;
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* Data recovery completed a copy of a region our ring makes us primary
 * of after the configuration's round began (copy.c: a copy finished from
 * our demoted one when the machine growth had given the region to died
 * first): no round promotes it until a view asks for one, so ask. */
static void ask_round(void *ctx, uint64_t cfg)
{
	farm_node *n = ctx;
	pthread_mutex_lock(&n->lock); /* as tell_grown */
	struct farm_membership *mem = n->marked_mem;
	int rc = mem ? farm_membership_bump(mem, cfg) : -EAGAIN;
	pthread_mutex_unlock(&n->lock);
	if (rc)
		farm_warn("node %" PRIu32 ": cannot ask for a recovery round "
		          "in configuration %" PRIu64 " (a region this "
		          "machine is primary of waits for one): %s",
		          n->cfg.machine_id, cfg, farm_strerror(rc));
	else
		farm_info("node %" PRIu32 ": asked for a recovery round in "
		          "configuration %" PRIu64 " (a region this machine "
		          "is primary of was completed after its round began)",
		          n->cfg.machine_id, cfg);
}

/* The grower's side of growth: started once this machine is the grower
 * (grow_lock held). */
static void grow_view_locked(farm_node *n, const struct farm_view *v)
{
	bool grower = false;
	for (unsigned q = 0; q < v->nlate && q < FARM_VIEW_MAX; q++)
		if (farm_view_find(v, v->late[q])) {
			grower = v->late[q] == n->cfg.machine_id;
			break;
		}
	if (!n->cfg.grow)
		return; /* off (docs/config.md, grow): it stays late */
	if (!n->grow && grower && n->threads && n->nthreads) {
		pthread_mutex_lock(&n->lock);
		farm_loop *loop = n->threads[0].loop;
		pthread_mutex_unlock(&n->lock);
		if (loop)
			n->grow = farm_grow_create(
			        n->as, loop, n->cfg.machine_id, tell_grown, n);
		if (!n->grow)
			farm_warn("node %" PRIu32 ": grows into no share: %s",
			          n->cfg.machine_id,
			          loop ? farm_strerror(-errno)
			               : "no loop of its own yet");
	}
	farm_grow_view(n->grow, v);
}

/* Stop growth (a later view or loop 0 may start it again). Destroyed
 * outside grow_lock: the grow thread's answer may be telling the
 * membership, whose views take grow_lock. */
static void grow_stop(farm_node *n)
{
	pthread_mutex_lock(&n->grow_lock);
	struct farm_grow *g = n->grow;
	n->grow = NULL;
	pthread_mutex_unlock(&n->grow_lock);
	farm_grow_destroy(g);
}

void farm_node_grow_view(farm_node *n, const struct farm_view *v)
{
	pthread_mutex_lock(&n->grow_lock);
	grow_view_locked(n, v);
	pthread_mutex_unlock(&n->grow_lock);
}

/* Once the restart ran (or none was pending): as manager, this machine
 * writes no restart mark (zk.c). Any thread; farm_membership_restarted
 * does something only the first time. */
void farm_node_restart_unmark(farm_node *n)
{
	pthread_mutex_lock(&n->lock);
	struct farm_membership *m =
	        farm_restart_pending(n->rs) ? NULL : n->marked_mem;
	pthread_mutex_unlock(&n->lock);
	farm_membership_restarted(m);
}

static void on_recovery(void *ctx, enum farm_recovery_event e,
                        uint64_t config_id)
{
	(void)config_id;
	farm_node *n = ctx;
	pthread_mutex_lock(&n->lock);
	if (e == FARM_RECOVERY_REMOVED) {
		n->removed = true;
		/* Its application learns it at its next transaction. */
		farm_txm_set_removed(n->txm);
	} else if (e == FARM_RECOVERY_LEASE_LOST)
		n->lease_lost = true;
	pthread_cond_broadcast(&n->cond);
	pthread_mutex_unlock(&n->lock);
}

static void on_peer_death(void *ctx, uint32_t peer)
{
	farm_recovery_peer_dead(ctx, peer);
}

static void on_state(void *ctx, enum farm_membership_state s)
{
	farm_node *n = ctx;
	farm_info("node %" PRIu32 ": membership %s", n->cfg.machine_id,
	          farm_membership_state_name(s));
}

/* ---- lifetime ------------------------------------------------------------ */

/* Before the fabric, which removes a previous incarnation's region
 * files: an intact directory is restarted from, a damaged or foreign one
 * refused (restart.c). Only shm keeps memory in files. */
static int node_open_restart(farm_node *n, const struct farm_config *cfg)
{
	const char *prov = cfg->fabric[0] ? cfg->fabric : getenv("FARM_FABRIC");
	if (prov && *prov && strcmp(prov, "shm") != 0)
		return 0;
	char err[768] = "";
	/* A gone id's intact directory becomes a fresh one with stale
	 * sources first (rejoin.c), or is restarted from as before. */
	int rc = farm_rejoin_prepare(cfg, &n->rj);
	if (rc) {
		farm_err("node %" PRIu32 ": refusing to start: cannot rejoin "
		         "with its old copies kept: %s",
		         cfg->machine_id, farm_strerror(rc));
		return rc;
	}
	rc = farm_restart_open(cfg, &n->rs, err, sizeof(err));
	if (rc) {
		farm_err("node %" PRIu32 ": refusing to start: %s",
		         cfg->machine_id, err[0] ? err : farm_strerror(rc));
		farm_node_note_refused(cfg, rc,
		                       err[0] ? err : farm_strerror(rc));
		return rc;
	}
	if (farm_restart_pending(n->rs))
		farm_node_clear_notice(cfg); /* its directory passed */
	return 0;
}

/* The fabric and the messaging over it. */
static int node_open_transport(farm_node *n, const struct farm_config *cfg)
{
	farm_fabric_attr fa = {
	        .provider = cfg->fabric[0] ? cfg->fabric : NULL,
	        .machine_id = cfg->machine_id,
	        .data_dir = cfg->data_dir,
	        .listen_addr = cfg->listen[0] ? cfg->listen : NULL,
	        .ofi_provider = cfg->ofi_provider[0] ? cfg->ofi_provider : NULL,
	};
	int rc = farm_fabric_open(&fa, &n->fab);
	if (rc) {
		farm_err("node %" PRIu32 ": cannot open the fabric: %s",
		         cfg->machine_id, farm_strerror(rc));
		return rc;
	}
	farm_msg_attr ma = {
	        .nthreads = n->nthreads,
	        .max_machines = n->max_machines,
	        .busy_poll = cfg->busy_poll,
	        .lazy_bell_ns = cfg->lazy_bell_us * 1000ull,
	        /* messaging's 0 is its default: 1 ns is "at once" */
	        .park_after_ns =
	                cfg->park_after_us ? cfg->park_after_us * 1000ull : 1};
	if ((rc = farm_msg_create(n->fab, &ma, &n->msg)) ||
	    (rc = farm_node_newconfig_init(n)))
		farm_err("node %" PRIu32 ": messaging: %s", cfg->machine_id,
		         farm_strerror(rc));
	return rc;
}

/* The address space, the allocator and the transaction manager. */
static int node_open_store(farm_node *n, const struct farm_config *cfg)
{
	struct farm_as_attr aa = {
	        .region_size = cfg->region_size,
	        .seed = cfg->region_seed
	                        ? cfg->region_seed * 0x9e3779b97f4a7c15ull +
	                                  cfg->machine_id
	                        : 0,
	        .ring = {.replicas = cfg->replicas,
	                 .rings = cfg->rings,
	                 .points = cfg->ring_points},
	};
	struct farm_txm_attr ta = {.log_size = cfg->log_size,
	                           .datarec_bytes = cfg->datarec_bytes,
	                           .datarec_interval_us =
	                                   cfg->datarec_interval_us,
	                           .datarec_hold_ms = cfg->datarec_hold_ms};
	int rc;
	if ((rc = farm_as_create(n->fab, n->msg, &aa, &n->as)) ||
	    (rc = farm_galloc_create(n->as, n->msg, &n->ga)) ||
	    (rc = farm_txm_create(n->fab, n->msg, n->as, n->ga, &ta,
	                          &n->txm))) {
		farm_err("node %" PRIu32 ": address space: %s", cfg->machine_id,
		         farm_strerror(rc));
		return rc;
	}
	farm_txm_datarec_on_unserved(n->txm, ask_round, n);
	return 0;
}

/* Leases and failure detection, with a coordination service only. */
static int node_open_recovery(farm_node *n, const struct farm_config *cfg)
{
	if (!cfg->zk[0])
		return 0;
	struct farm_recovery_attr ra = {
	        .self_id = cfg->machine_id,
	        .lease_us = cfg->lease_us,
	        .lease_bind = cfg->lease_bind[0] ? cfg->lease_bind : NULL,
	        .on_event = on_recovery,
	        .ctx = n,
	        .serve_word = farm_txm_serve_word(n->txm),
	        .msg = n->msg,
	        /* shm reports a death from the process's pidfd: exact. */
	        .exact_deaths = !strcmp(farm_fabric_provider(n->fab), "shm")};
	int rc = farm_recovery_open(&ra, &n->rec);
	if (rc) {
		farm_err("node %" PRIu32 ": leases: %s", cfg->machine_id,
		         farm_strerror(rc));
		return rc;
	}
	/* The fabric's death notice is a suspicion too (shm: at once, where
	 * a lease takes its length). */
	int drc = farm_fabric_on_peer_death(n->fab, on_peer_death, n->rec);
	if (drc && drc != -ENOTSUP)
		farm_warn("node %" PRIu32 ": no death notices: %s",
		          cfg->machine_id, farm_strerror(drc));
	return 0;
}

int farm_node_open(const struct farm_config *cfg, farm_node **out)
{
	if (!cfg || !out || !cfg->has_machine_id)
		return -EINVAL;
	uint32_t M = cfg->max_machines ? cfg->max_machines
	                               : FARM_NODE_DEFAULT_MACHINES;
	if (M > FARM_NODE_MAX_MACHINES || cfg->machine_id >= M) {
		farm_err("node: machine_id %" PRIu32 " out of range (0..%u: "
		         "max_machines %" PRIu32 ")",
		         cfg->machine_id, M - 1, M);
		return -EINVAL;
	}
	farm_node *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->max_machines = M;
	n->peer_inc = calloc(M, sizeof(*n->peer_inc));
	n->msg_removed = calloc(M, sizeof(*n->msg_removed));
	if (!n->peer_inc || !n->msg_removed) {
		free(n->peer_inc);
		free(n->msg_removed);
		free(n);
		return -ENOMEM;
	}
	n->cfg = *cfg;
	n->nthreads = cfg->threads ? cfg->threads : 1;
	n->start_timeout_ms = 30000;
	n->view_t_ns = farm_now_ns();
	pthread_mutex_init(&n->lock, NULL);
	pthread_mutex_init(&n->grow_lock, NULL);
	pthread_cond_init(&n->cond, NULL);
	int rc;
	if ((rc = node_open_restart(n, cfg)) ||
	    (rc = node_open_transport(n, cfg)) ||
	    (rc = node_open_store(n, cfg)) || (rc = node_open_recovery(n, cfg)))
		goto fail;
	/* Before the machine registers: a copy that starts takes them. */
	farm_rejoin_attach(n->rj, n->txm);
	if ((rc = farm_restart_attach(n->rs, n->fab, n->as, n->txm, n->ga))) {
		farm_err("node %" PRIu32 ": restart: %s", cfg->machine_id,
		         farm_strerror(rc));
		goto fail;
	}
	if ((rc = card_format(n)) || (rc = card_write(n))) {
		farm_err("node %" PRIu32 ": cannot publish its card: %s",
		         cfg->machine_id, farm_strerror(rc));
		goto fail;
	}
	n->ctl = farm_ctl_open(n, cfg->data_dir); /* NULL: warned, runs on */
	*out = n;
	return 0;
fail:
	farm_node_close(n);
	return rc;
}

static void *loop_main(void *arg)
{
	struct loop_thread *t = arg;
	farm_node *n = t->n;
	farm_loop *loop = NULL;
	int rc = farm_loop_open(n->msg, t->idx, &loop);
	pthread_mutex_lock(&n->lock);
	t->rc = rc;
	t->loop = loop;
	n->ready++;
	pthread_cond_broadcast(&n->cond);
	pthread_mutex_unlock(&n->lock);
	if (rc)
		return NULL;
	rc = farm_txm_attach(n->txm, loop);
	if (rc) {
		farm_err("node: loop %u: transactions: %s", t->idx,
		         farm_strerror(rc));
		farm_loop_close(loop);
		return NULL;
	}
	farm_loop_run(loop);
	farm_txm_detach(n->txm, loop);
	farm_loop_close(loop);
	return NULL;
}

void farm_node_set_app_loops(farm_node *n, bool on)
{
	if (n && !n->threads)
		n->app_loops = on;
}

int farm_node_loop_open(farm_node *n, unsigned i, farm_loop **out)
{
	if (!n || !out || !n->app_loops || !n->threads || i >= n->nthreads)
		return -EINVAL;
	farm_loop *loop;
	int rc = farm_loop_open(n->msg, i, &loop);
	if (rc)
		return rc;
	if ((rc = farm_txm_attach(n->txm, loop))) {
		farm_loop_close(loop);
		return rc;
	}
	pthread_mutex_lock(&n->lock);
	n->threads[i].loop = loop;
	pthread_mutex_unlock(&n->lock);
	/* The view that made this machine the grower may have come before
	 * its first loop (the fault campaign: a machine joining late found
	 * no loop to grow with, and no later view came): growth starts now
	 * with the view in force, read under grow_lock so that no newer
	 * view's grow_view can come between the read and its use. */
	struct farm_view *v = i == 0 && n->cfg.grow ? malloc(sizeof(*v)) : NULL;
	if (v) {
		pthread_mutex_lock(&n->grow_lock);
		pthread_mutex_lock(&n->lock);
		*v = n->view;
		pthread_mutex_unlock(&n->lock);
		if (v->config_id && farm_view_find(v, n->cfg.machine_id))
			grow_view_locked(n, v);
		pthread_mutex_unlock(&n->grow_lock);
		free(v);
	}
	*out = loop;
	return 0;
}

void farm_node_loop_close(farm_node *n, farm_loop *loop)
{
	if (!n || !loop)
		return;
	unsigned i = farm_loop_index(loop);
	/* Nothing new starts on it: growth asks on loop 0 (its thread posts
	 * there), so it stops before the loop goes, and a view that comes
	 * now finds no loop to grow with (a later loop 0 starts growth
	 * again, farm_node_loop_open). */
	pthread_mutex_lock(&n->grow_lock);
	pthread_mutex_lock(&n->lock);
	if (i < n->nthreads && n->threads[i].loop == loop)
		n->threads[i].loop = NULL;
	pthread_mutex_unlock(&n->lock);
	pthread_mutex_unlock(&n->grow_lock);
	if (i == 0)
		grow_stop(n);
	farm_ctl_lock(n->ctl);
	farm_txm_detach(n->txm, loop);
	farm_ctl_unlock(n->ctl);
	farm_loop_close(loop);
}

int farm_node_start(farm_node *n, int timeout_ms)
{
	if (!n || n->threads)
		return -EINVAL;
	n->threads = calloc(n->nthreads, sizeof(*n->threads));
	if (!n->threads)
		return -ENOMEM;
	for (unsigned i = 0; i < n->nthreads && !n->app_loops; i++) {
		struct loop_thread *t = &n->threads[i];
		t->n = n;
		t->idx = i;
		if (pthread_create(&t->th, NULL, loop_main, t))
			return -EAGAIN;
		t->started = true;
	}
	int rc = 0;
	pthread_mutex_lock(&n->lock);
	while (!n->app_loops && n->ready < n->nthreads)
		pthread_cond_wait(&n->cond, &n->lock);
	for (unsigned i = 0; i < n->nthreads && !rc; i++)
		rc = n->threads[i].rc;
	pthread_mutex_unlock(&n->lock);
	if (rc)
		return rc;
	n->start_timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
	/* The fabric address the card starts with, which this process holds
	 * alone (shm: its locked data directory; verbs, ofi: the port it
	 * listens on): a registration naming it is a dead incarnation's. */
	char addr[FARM_ENDPOINT_MAX];
	if (farm_fabric_address(n->fab, addr, sizeof(addr)) < 0)
		addr[0] = 0;
	struct farm_membership_attr ma = {
	        .self_id = n->cfg.machine_id,
	        .address = addr,
	        .endpoint = n->card,
	        .domain = n->cfg.domain,
	        .zk = n->cfg.zk,
	        .zk_root = n->cfg.zk_root[0] ? n->cfg.zk_root : NULL,
	        .session_ms = n->cfg.zk_session_ms,
	        .connect_ms = n->cfg.zk_connect_timeout_ms,
	        .peers = n->cfg.peers,
	        .npeers = n->cfg.npeers,
	        .peer_domains = n->cfg.peer_domains,
	        .expect = n->cfg.expect_machines,
	        .fresh = !farm_restart_pending(n->rs),
	        .restart = farm_restart_config(n->rs),
	        .realtime = true,
	        .reuse_ids = n->cfg.reuse_ids,
	        .on_view = farm_node_apply_view,
	        .on_state = on_state,
	        .on_written = farm_node_config_written,
	        .ctx = n,
	};
	rc = farm_membership_open(&ma, &n->mem);
	if (!rc) {
		farm_recovery_set_membership(n->rec, n->mem);
		pthread_mutex_lock(&n->lock);
		n->marked_mem = n->mem;
		pthread_mutex_unlock(&n->lock);
		farm_node_restart_unmark(
		        n); /* it may have run during the open */
	}
	if (rc)
		farm_err("node %" PRIu32 ": cannot join: %s", n->cfg.machine_id,
		         farm_strerror(rc));
	return rc;
}

void farm_node_close(farm_node *n)
{
	if (!n)
		return;
	/* A graceful leave on the control socket's thread (or the
	 * application's) gives up before that thread is joined; the
	 * release store pairs with the acquire load in leave.c's closing(),
	 * and the broadcast under n->lock wakes its wait for a view. */
	pthread_mutex_lock(&n->lock);
	atomic_store_explicit(&n->closing, true, memory_order_release);
	pthread_cond_broadcast(&n->cond);
	pthread_mutex_unlock(&n->lock);
	farm_ctl_close(n->ctl);
	/* Recovery's thread asks the membership for configurations: it
	 * stops before the membership goes; views still reach recovery
	 * until the membership is closed. */
	farm_recovery_stop(n->rec);
	pthread_mutex_lock(&n->lock); /* growth and data recovery stop asking */
	n->marked_mem = NULL;
	pthread_mutex_unlock(&n->lock);
	farm_membership_close(n->mem); /* no more view callbacks */
	grow_stop(n);                  /* before the loops stop */
	if (n->rec && n->fab && farm_fabric_on_peer_death(n->fab, NULL, NULL))
		farm_info("node: fabric without death notices");
	farm_recovery_close(n->rec);
	if (n->threads) {
		for (unsigned i = 0; i < n->nthreads && !n->app_loops; i++)
			if (n->threads[i].loop)
				farm_loop_stop(n->threads[i].loop);
		for (unsigned i = 0; i < n->nthreads; i++)
			if (n->threads[i].started)
				pthread_join(n->threads[i].th, NULL);
		free(n->threads);
	}
	/* The loops are stopped: nothing changes memory any more. */
	if (n->keep)
		(void)farm_restart_keep(n->rs);
	else
		farm_restart_discard(n->rs);
	farm_txm_destroy(n->txm); /* hands back the stale sources it holds */
	farm_rejoin_close(n->rj);
	farm_galloc_destroy(n->ga);
	farm_as_destroy(n->as);
	if (n->msg && farm_msg_destroy(n->msg))
		farm_warn("node: messaging not destroyed (a loop is open)");
	if (n->card_written) {
		char path[FARM_CONFIG_STR + 32];
		snprintf(path, sizeof(path), "%s/" CARD_FILE, n->cfg.data_dir);
		unlink(path);
	}
	farm_restart_close(n->rs);
	farm_fabric_close(n->fab);
	pthread_cond_destroy(&n->cond);
	pthread_mutex_destroy(&n->lock);
	pthread_mutex_destroy(&n->grow_lock);
	free(n->peer_inc);
	free(n->msg_removed);
	free(n->nc_joiners);
	free(n);
}

void farm_node_quiesce(farm_node *n)
{
	if (n)
		farm_restart_freeze(n->rs);
}

void farm_node_shutdown(farm_node *n)
{
	if (!n)
		return;
	n->keep = true;
	farm_restart_freeze(n->rs);
	farm_node_close(n);
}

int farm_node_keep(farm_node *n, const char *name, const void *data, size_t len)
{
	if (!n)
		return -EINVAL;
	return farm_restart_keep_blob(n->rs, name, data, len);
}

long farm_node_kept(farm_node *n, const char *name, void *buf, size_t cap)
{
	if (!n)
		return -EINVAL;
	return farm_restart_kept_blob(n->rs, name, buf, cap);
}

void farm_node_restart_stats(const farm_node *n, struct farm_restart_stats *out)
{
	farm_restart_stats(n ? n->rs : NULL, out);
}

/* ---- access -------------------------------------------------------------- */

uint64_t farm_node_config_id(farm_node *n)
{
	if (!n)
		return 0;
	pthread_mutex_lock(&n->lock);
	uint64_t id = n->view.config_id;
	pthread_mutex_unlock(&n->lock);
	return id;
}

void farm_node_on_config(farm_node *n, farm_node_config_fn fn, void *ctx)
{
	if (!n)
		return;
	pthread_mutex_lock(&n->lock);
	n->on_config = fn;
	n->on_config_ctx = ctx;
	pthread_mutex_unlock(&n->lock);
}

bool farm_node_refused(farm_node *n)
{
	if (!n)
		return false;
	pthread_mutex_lock(&n->lock);
	bool r = n->refused;
	pthread_mutex_unlock(&n->lock);
	return r;
}

bool farm_node_removed(farm_node *n)
{
	if (!n)
		return false;
	pthread_mutex_lock(&n->lock);
	bool r = n->removed;
	pthread_mutex_unlock(&n->lock);
	return r;
}

farm_recovery *farm_node_recovery(const farm_node *n)
{
	return n ? n->rec : NULL;
}

struct farm_ctl *farm_node_ctl(const farm_node *n)
{
	return n ? n->ctl : NULL;
}

struct farm_membership *farm_node_membership(const farm_node *n)
{
	return n ? n->mem : NULL;
}

farm_fabric *farm_node_fabric(const farm_node *n)
{
	return n ? n->fab : NULL;
}
farm_msg *farm_node_msg(const farm_node *n)
{
	return n ? n->msg : NULL;
}
farm_as *farm_node_as(const farm_node *n)
{
	return n ? n->as : NULL;
}
farm_galloc *farm_node_galloc(const farm_node *n)
{
	return n ? n->ga : NULL;
}
farm_txm *farm_node_txm(const farm_node *n)
{
	return n ? n->txm : NULL;
}

int farm_node_memory(const farm_node *n, farm_node_mem *out)
{
	if (!n || !out || out->size < offsetof(farm_node_mem, log))
		return -EINVAL;
	farm_msg_mem mm = {.size = sizeof(mm)};
	int rc = farm_msg_memory(n->msg, &mm);
	if (rc)
		return rc;
	uint64_t logs = 0, logs_res = 0, tables = 0;
	farm_txm_memory(n->txm, &logs, &logs_res, &tables);
	farm_node_mem s = {.size = sizeof(s),
	                   .version = FARM_NODE_MEM_VERSION,
	                   .msg = mm.region + mm.mirrors,
	                   .log = logs,
	                   .meta = mm.tables + tables +
	                           n->max_machines * (sizeof(*n->msg_removed) +
	                                              sizeof(*n->peer_inc)),
	                   .max_machines = farm_msg_max_machines(n->msg),
	                   .msg_resident =
	                           mm.region_resident + mm.mirrors_resident,
	                   .log_resident = logs_res};
	size_t len = out->size < sizeof(s) ? out->size : sizeof(s);
	s.size = (uint32_t)len;
	memcpy(out, &s, len);
	return 0;
}
uint32_t farm_node_id(const farm_node *n)
{
	return n ? n->cfg.machine_id : 0;
}
unsigned farm_node_nthreads(const farm_node *n)
{
	return n ? n->nthreads : 0;
}

farm_loop *farm_node_loop(const farm_node *n, unsigned i)
{
	if (!n || !n->threads || i >= n->nthreads)
		return NULL;
	return n->threads[i].loop;
}

int farm_node_view(farm_node *n, struct farm_view *out)
{
	if (!n || !out)
		return -EINVAL;
	pthread_mutex_lock(&n->lock);
	*out = n->view;
	pthread_mutex_unlock(&n->lock);
	return 0;
}

struct run_ctx {
	farm_work_fn fn;
	void *ctx;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, status;
};

static void run_tramp(farm_loop *loop, void *arg, int status)
{
	struct run_ctx *r = arg;
	r->fn(loop, r->ctx, status);
	pthread_mutex_lock(&r->lock);
	r->done = 1;
	r->status = status;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

int farm_node_run(farm_node *n, unsigned i, farm_work_fn fn, void *ctx)
{
	farm_loop *loop = farm_node_loop(n, i);
	if (!loop || !fn)
		return -EINVAL;
	struct run_ctx r = {.fn = fn, .ctx = ctx};
	pthread_mutex_init(&r.lock, NULL);
	pthread_cond_init(&r.cond, NULL);
	int rc = farm_loop_post(loop, run_tramp, &r);
	if (!rc) {
		pthread_mutex_lock(&r.lock);
		while (!r.done)
			pthread_cond_wait(&r.cond, &r.lock);
		pthread_mutex_unlock(&r.lock);
		rc = r.status;
	}
	pthread_cond_destroy(&r.cond);
	pthread_mutex_destroy(&r.lock);
	return rc;
}

unsigned farm_node_expected_machines(const farm_node *n)
{
	if (!n)
		return 0;
	if (n->cfg.expect_machines)
		return n->cfg.expect_machines;
	return n->cfg.zk[0] ? 1 : n->cfg.npeers + 1;
}
