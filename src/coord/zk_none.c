/*
 * The ZooKeeper backend's entry points when libfarm is built without the
 * client library (libzookeeper-mt-dev): opening says so and fails with
 * -ENOTSUP; the rest do nothing. zk_peek.c has its own.
 */
#ifndef FARM_HAVE_ZK

#include <errno.h>

#include "coord/membership_impl.h"
#include "util/log.h"

int farm_zk_open(struct farm_membership *m,
                 const struct farm_membership_attr *a)
{
	(void)m;
	(void)a;
	farm_warn("membership: libfarm was built without the ZooKeeper client "
	          "(libzookeeper-mt-dev)");
	return -ENOTSUP;
}

int farm_zk_suspect(struct farm_membership *m, const uint32_t *ids, unsigned n)
{
	(void)m;
	(void)ids;
	(void)n;
	return -ENOTSUP;
}

int farm_zk_forsake(struct farm_membership *m, const uint32_t *ids, unsigned n)
{
	(void)m;
	(void)ids;
	(void)n;
	return -ENOTSUP;
}

int farm_zk_mark(struct farm_membership *m, enum farm_zk_mark k,
                 uint64_t config_id)
{
	(void)m;
	(void)k;
	(void)config_id;
	return -ENOTSUP;
}

void farm_zk_kick(struct farm_membership *m)
{
	(void)m;
}

unsigned farm_zk_refused(struct farm_membership *m, uint32_t *ids)
{
	(void)m;
	(void)ids;
	return 0;
}

void farm_zk_close(struct farm_membership *m)
{
	(void)m;
}

#endif /* !FARM_HAVE_ZK */
