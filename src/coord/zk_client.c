/*
 * What every file of the ZooKeeper backend uses and nothing of it calls
 * back: the plain-text checks of a connect string and a root path (with or
 * without the client library), and, with it, the client's error codes as
 * errno values, its log hook and set-up, creating a znode, and two small
 * helpers. The bottom of src/coord's ZooKeeper files (README.md).
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
#include "util/log.h"

/* Plain-text checks, needed with or without the client library. */

bool farm_zk_path_valid(const char *s)
{
	if (!s || s[0] != '/' || strlen(s) >= 200)
		return false;
	const char *c = s;
	while (*c == '/') {
		const char *e = c + 1;
		while (*e && *e != '/') {
			if (!isprint((unsigned char)*e))
				return false;
			e++;
		}
		size_t n = (size_t)(e - c - 1);
		if (n == 0 || (n == 1 && c[1] == '.') ||
		    (n == 2 && c[1] == '.' && c[2] == '.'))
			return false;
		c = e;
	}
	return *c == 0;
}

/* The host of "[ipv6]:port" in [@p, @he): the colon before the port, or
 * NULL when the address is malformed. */
static const char *host_v6(const char *p, const char *he)
{
	const char *rb = memchr(p, ']', (size_t)(he - p));
	if (!rb || rb == p + 1 || rb + 1 >= he || rb[1] != ':')
		return NULL;
	for (const char *q = p + 1; q < rb; q++)
		if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
			return NULL;
	return rb + 1;
}

/* The host of "name:port" in [@p, @he) (the last colon starts the port):
 * that colon, or NULL when the name is empty or has a byte no host name
 * has. */
static const char *host_name(const char *p, const char *he)
{
	const char *colon = NULL;
	for (const char *q = p; q < he; q++)
		if (*q == ':')
			colon = q;
	if (!colon || colon == p)
		return NULL;
	for (const char *q = p; q < colon; q++)
		if (!isalnum((unsigned char)*q) && *q != '.' && *q != '-' &&
		    *q != '_')
			return NULL;
	return colon;
}

/* A port in [@q, @he): 1 to 65535, digits only. */
static bool port_valid(const char *q, const char *he)
{
	unsigned long port = 0;
	if (q == he || he - q > 5)
		return false;
	for (; q < he; q++) {
		if (!isdigit((unsigned char)*q))
			return false;
		port = port * 10 + (unsigned long)(*q - '0');
	}
	return port != 0 && port <= 65535;
}

bool farm_zk_connect_valid(const char *s)
{
	if (!s || !*s || strlen(s) >= 1024)
		return false;
	const char *slash = strchr(s, '/');
	const char *end = slash ? slash : s + strlen(s);
	if (slash && !farm_zk_path_valid(slash))
		return false;
	const char *p = s;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *he = comma ? comma : end;
		const char *colon =
		        *p == '[' ? host_v6(p, he) : host_name(p, he);
		if (!colon || !port_valid(colon + 1, he))
			return false;
		if (!comma)
			break;
		p = comma + 1;
		if (p == end)
			return false; /* trailing comma */
	}
	return true;
}

#ifdef FARM_HAVE_ZK

#include "coord/zk_int.h"

void farm_zk_log(const char *msg)
{
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		n--;
	/* The client's own warnings and errors (e.g. one per failed connect
	 * while a server restarts) are detail: libfarm reports the state
	 * changes that matter at warn. */
	farm_info("zookeeper client: %.*s", (int)n, msg);
}

void farm_zk_global_init(void)
{
	ZooLogLevel l = ZOO_LOG_LEVEL_WARN;
	if (farm_log_enabled(FARM_LOG_DEBUG))
		l = ZOO_LOG_LEVEL_DEBUG;
	zoo_set_debug_level(l);
}

int farm_zk_err(int zrc)
{
	if (zrc == ZOK)
		return 0;
	if (zrc == ZCONNECTIONLOSS || zrc == ZINVALIDSTATE)
		return -ENOTCONN;
	if (zrc == ZOPERATIONTIMEOUT)
		return -ETIMEDOUT;
	if (zrc == ZSESSIONEXPIRED)
		return -ESTALE;
	if (zrc == ZNONODE)
		return -ENOENT;
	if (zrc == ZNODEEXISTS)
		return -EEXIST;
	if (zrc == ZBADVERSION)
		return -EAGAIN;
	if (zrc == ZNOAUTH || zrc == ZAUTHFAILED)
		return -EACCES;
	if (zrc == ZBADARGUMENTS)
		return -EINVAL;
	if (zrc == ZMARSHALLINGERROR)
		return -ENOMEM;
	return -EIO;
}

/* Create @path (persistent, empty or @data) unless it exists. */
int farm_zk_ensure(zhandle_t *zh, const char *path, const char *data, int len)
{
	int zrc = zoo_create(zh, path, data, len, &ZOO_OPEN_ACL_UNSAFE,
	                     ZOO_PERSISTENT, NULL, 0);
	if (zrc == ZOK || zrc == ZNODEEXISTS)
		return 0;
	return farm_zk_err(zrc);
}

int farm_zk_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

void farm_zk_deadline_in(struct timespec *t, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, t);
	t->tv_sec += ms / 1000;
	t->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}

#endif /* FARM_HAVE_ZK */
