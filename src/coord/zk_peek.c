/*
 * Short ZooKeeper sessions of their own, outside any membership: what
 * `farm status` reads without joining (farm_zk_peek), and the refusal
 * notices of machines that refused their damaged directories at a restart
 * (farm_zk_note_refused, farm_zk_clear_refused; membership.h). Only with
 * the client library; without it, the stubs at the end answer -ENOTSUP.
 */
#ifdef FARM_HAVE_ZK

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord/zk_int.h"
#include "util/log.h"

struct peek_conn {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool connected;
};

static void peek_watcher(zhandle_t *zh, int type, int state, const char *path,
                         void *ctx)
{
	(void)zh;
	(void)path;
	struct peek_conn *c = ctx;
	if (type != ZOO_SESSION_EVENT || state != ZOO_CONNECTED_STATE)
		return;
	pthread_mutex_lock(&c->lock);
	c->connected = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* A short session of our own (farm_zk_peek, the refusal notices) at @zk
 * for the cluster under *@root (NULL: "/libfarm/default", set there):
 * connected within @connect_ms (0: the default), or NULL with *@rc
 * (-EINVAL for a bad connect string or root). Close it with
 * oneshot_close either way. */
static zhandle_t *oneshot_open(const char *zk, const char **root,
                               unsigned connect_ms, struct peek_conn *c,
                               int *rc)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, farm_zk_global_init);
	c->connected = false;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (!*root)
		*root = "/libfarm/default";
	if (!farm_zk_connect_valid(zk) || !farm_zk_path_valid(*root)) {
		*rc = -EINVAL;
		return NULL;
	}
	unsigned ms = connect_ms ? connect_ms : ZK_DEFAULT_CONNECT_MS;
	errno = 0;
	zhandle_t *zh =
	        zookeeper_init2(zk, peek_watcher, (int)ZK_DEFAULT_SESSION_MS,
	                        NULL, c, 0, farm_zk_log);
	*rc = zh ? 0 : errno ? -errno : -EINVAL;
	if (zh) {
		struct timespec dl;
		farm_zk_deadline_in(&dl, (int)ms);
		pthread_mutex_lock(&c->lock);
		while (!c->connected &&
		       pthread_cond_timedwait(&c->cond, &c->lock, &dl) == 0)
			;
		bool up = c->connected;
		pthread_mutex_unlock(&c->lock);
		*rc = up ? 0 : FARM_EUNAVAILABLE;
	}
	return zh;
}

static void oneshot_close(zhandle_t *zh, struct peek_conn *c)
{
	if (zh)
		zookeeper_close(zh);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
}

/* The registrations under @members, sorted by id (names that are not
 * decimal ids are skipped; one that left meanwhile too). */
static int peek_live(zhandle_t *zh, const char *members,
                     struct farm_zk_peek *out)
{
	struct String_vector sv = {0};
	int zrc = zoo_get_children(zh, members, 0, &sv);
	if (zrc != ZOK)
		return farm_zk_err(zrc);
	uint32_t ids[FARM_VIEW_MAX];
	unsigned n = 0;
	for (int32_t i = 0; i < sv.count && n < FARM_VIEW_MAX; i++) {
		const char *s = sv.data[i];
		char *e;
		errno = 0;
		unsigned long v = strtoul(s, &e, 10);
		if (isdigit((unsigned char)s[0]) && !*e && !errno &&
		    v <= UINT32_MAX)
			ids[n++] = (uint32_t)v;
	}
	deallocate_String_vector(&sv);
	if (n > 1)
		qsort(ids, n, sizeof(ids[0]), farm_zk_cmp_u32);
	out->nlive = 0;
	for (unsigned i = 0; i < n; i++) {
		char path[240];
		int pl = snprintf(path, sizeof(path), "%s/%" PRIu32, members,
		                  ids[i]);
		if (pl < 0 || (size_t)pl >= sizeof(path))
			return -ENAMETOOLONG; /* the root is checked: cannot be
			                       */
		struct farm_member *mb = &out->live[out->nlive];
		char card[ZK_CARD_MAX];
		int len = (int)sizeof(card) - 1;
		struct Stat st;
		zrc = zoo_get(zh, path, 0, card, &len, &st);
		if (zrc == ZNONODE)
			continue;
		if (zrc != ZOK)
			return farm_zk_err(zrc);
		if (farm_zk_card_parse(card, len, mb)) /* shown as it is */
			snprintf(mb->endpoint, sizeof(mb->endpoint), "%.*s",
			         len > 0 ? len : 0, card);
		mb->id = ids[i];
		out->live_incarnation[out->nlive++] = st.czxid;
	}
	return 0;
}

int farm_zk_peek(const char *zk, const char *root, unsigned connect_ms,
                 struct farm_zk_peek *out)
{
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	char *buf = malloc(ZK_BUF);
	if (!buf)
		return -ENOMEM;
	struct peek_conn c;
	int rc;
	zhandle_t *zh = oneshot_open(zk, &root, connect_ms, &c, &rc);
	char path[240];
	if (!rc) {
		snprintf(path, sizeof(path), "%s/config", root);
		int len = (int)ZK_BUF - 1;
		int zrc = zoo_get(zh, path, 0, buf, &len, NULL);
		rc = farm_zk_err(zrc);
		if (!rc && len > 0 &&
		    farm_view_parse(buf, (size_t)len, &out->config))
			rc = FARM_ECORRUPT;
	}
	if (!rc) {
		snprintf(path, sizeof(path), "%s/members", root);
		rc = peek_live(zh, path, out);
		if (rc == -ENOENT)
			rc = 0; /* a configuration, nobody registered yet */
	}
	oneshot_close(zh, &c);
	free(buf);
	return rc;
}

int farm_zk_note_refused(const char *zk, const char *root, uint32_t id,
                         const char *why)
{
	if (!why)
		return -EINVAL;
	struct peek_conn c;
	int rc;
	zhandle_t *zh = oneshot_open(zk, &root, 0, &c, &rc);
	char path[240];
	snprintf(path, sizeof(path), "%s/refused", root);
	if (!rc) /* the cluster's layout is there: its configuration is */
		rc = farm_zk_ensure(zh, path, NULL, -1);
	snprintf(path, sizeof(path), "%s/refused/%" PRIu32, root, id);
	int len = (int)strnlen(why, 1024);
	if (!rc) {
		int zrc = zoo_create(zh, path, why, len, &ZOO_OPEN_ACL_UNSAFE,
		                     ZOO_PERSISTENT, NULL, 0);
		if (zrc == ZNODEEXISTS)
			zrc = zoo_set(zh, path, why, len, -1);
		rc = farm_zk_err(zrc);
	}
	oneshot_close(zh, &c);
	return rc;
}

int farm_zk_clear_refused(const char *zk, const char *root, uint32_t id)
{
	struct peek_conn c;
	int rc;
	zhandle_t *zh = oneshot_open(zk, &root, 0, &c, &rc);
	char path[240];
	snprintf(path, sizeof(path), "%s/refused/%" PRIu32, root, id);
	if (!rc) {
		int zrc = zoo_delete(zh, path, -1);
		rc = zrc == ZNONODE ? 0 : farm_zk_err(zrc);
	}
	oneshot_close(zh, &c);
	return rc;
}

#else /* !FARM_HAVE_ZK */

#include <errno.h>

#include "coord/membership_impl.h"

int farm_zk_note_refused(const char *zk, const char *root, uint32_t id,
                         const char *why)
{
	(void)zk;
	(void)root;
	(void)id;
	(void)why;
	return -ENOTSUP;
}

int farm_zk_clear_refused(const char *zk, const char *root, uint32_t id)
{
	(void)zk;
	(void)root;
	(void)id;
	return -ENOTSUP;
}

int farm_zk_peek(const char *zk, const char *root, unsigned connect_ms,
                 struct farm_zk_peek *out)
{
	(void)zk;
	(void)root;
	(void)connect_ms;
	(void)out;
	return -ENOTSUP;
}

#endif /* FARM_HAVE_ZK */
