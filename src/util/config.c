#include "util/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"

#define FARM_DEFAULT_REGION_SIZE (2ull << 30)
#define FARM_MIN_REGION_SIZE     (1ull << 20)
#define FARM_MAX_REGION_SIZE     (1ull << 32) /* offsets are 32 bits */

void farm_config_defaults(struct farm_config *c)
{
	memset(c, 0, sizeof(*c));
	c->region_size = FARM_DEFAULT_REGION_SIZE;
	strcpy(c->job, "serve");
	c->replicas = 3;
	c->rings = 3;
	c->ring_points = 128;
	c->threads = 1;
	c->log_size = 256u << 10;
	c->park_after_us = 200;
	strcpy(c->zk_root, "/libfarm/default");
	c->zk_session_ms = 4000;
	c->zk_connect_timeout_ms = 5000;
}

int farm_parse_size(const char *s, uint64_t *out)
{
	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	case 't':
	case 'T':
		shift = 40;
		end++;
		break;
	default: break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* 1, true, yes, on / 0, false, no, off. -EINVAL otherwise. */
static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};
	for (size_t i = 0; i < FARM_ARRAY_SIZE(yes); i++) {
		if (!strcmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_u32(const char *s, uint32_t *out)
{
	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* A number in [lo, hi]; *out changes only on success. */
static int parse_u32_in(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint32_t v;
	int rc = parse_u32(s, &v);
	if (rc)
		return rc;
	if (v < lo || v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

static int copy_str(char *dst, size_t cap, const char *v)
{
	size_t n = strlen(v);
	if (n >= cap)
		return -ENAMETOOLONG;
	memcpy(dst, v, n + 1);
	return 0;
}

/* A failure domain's name: 1 to FARM_CONFIG_DOMAIN - 1 bytes of letters,
 * digits and ._:- (it travels in the membership's text forms). */
static int copy_domain(char *dst, const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n >= FARM_CONFIG_DOMAIN)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)v[i]) && !strchr("._:-", v[i]))
			return -EINVAL;
	memcpy(dst, v, n + 1);
	return 0;
}

int farm_config_set(struct farm_config *c, const char *key, const char *value,
                    char *err, size_t errlen)
{
	int rc = 0;
	if (strcmp(key, "machine_id") == 0) {
		rc = parse_u32(value, &c->machine_id);
		c->has_machine_id = rc == 0;
	} else if (strcmp(key, "data_dir") == 0) {
		rc = copy_str(c->data_dir, sizeof(c->data_dir), value);
	} else if (strcmp(key, "fabric") == 0) {
		if (strcmp(value, "shm") && strcmp(value, "verbs") &&
		    strcmp(value, "ofi") && strcmp(value, "udp"))
			rc = -EINVAL;
		else
			rc = copy_str(c->fabric, sizeof(c->fabric), value);
	} else if (strcmp(key, "listen") == 0) {
		rc = copy_str(c->listen, sizeof(c->listen), value);
	} else if (strcmp(key, "ofi_provider") == 0) {
		rc = copy_str(c->ofi_provider, sizeof(c->ofi_provider), value);
	} else if (strcmp(key, "region_size") == 0) {
		rc = farm_parse_size(value, &c->region_size);
	} else if (strcmp(key, "job") == 0) {
		rc = copy_str(c->job, sizeof(c->job), value);
	} else if (strcmp(key, "replicas") == 0) {
		rc = parse_u32_in(value, 1, 8, &c->replicas);
	} else if (strcmp(key, "rings") == 0) {
		rc = parse_u32_in(value, 1, 16, &c->rings);
	} else if (strcmp(key, "ring_points") == 0) {
		rc = parse_u32_in(value, 1, 1024, &c->ring_points);
	} else if (strcmp(key, "log_size") == 0) {
		uint64_t v;
		rc = farm_parse_size(value, &v);
		if (!rc &&
		    (!farm_is_pow2(v) || v < (64u << 10) || v > (64u << 20)))
			rc = -ERANGE;
		if (!rc)
			c->log_size = (uint32_t)v;
	} else if (strcmp(key, "expect_machines") == 0) {
		rc = parse_u32_in(value, 0, FARM_CONFIG_MAX_PEERS + 1,
		                  &c->expect_machines);
	} else if (strcmp(key, "threads") == 0) {
		rc = parse_u32_in(value, 1, 64, &c->threads);
	} else if (strcmp(key, "busy_poll") == 0) {
		rc = parse_bool(value, &c->busy_poll);
	} else if (strcmp(key, "park_after_us") == 0) {
		rc = parse_u32_in(value, 0, 1000000, &c->park_after_us);
	} else if (strcmp(key, "zk") == 0) {
		/* host:port[,host:port...][/chroot]; checked when used */
		rc = strpbrk(value, " \t")
		             ? -EINVAL
		             : copy_str(c->zk, sizeof(c->zk), value);
	} else if (strcmp(key, "zk_root") == 0) {
		rc = value[0] != '/' || strpbrk(value, " \t")
		             ? -EINVAL
		             : copy_str(c->zk_root, sizeof(c->zk_root), value);
	} else if (strcmp(key, "zk_session_ms") == 0) {
		rc = parse_u32_in(value, 100, 600000, &c->zk_session_ms);
	} else if (strcmp(key, "zk_connect_timeout_ms") == 0) {
		rc = parse_u32_in(value, 1, 3600000, &c->zk_connect_timeout_ms);
	} else if (strcmp(key, "lease_us") == 0) {
		rc = parse_u32_in(value, 1000, 60000000, &c->lease_us);
	} else if (strcmp(key, "datarec_bytes") == 0) {
		rc = parse_u32_in(value, 64, 1u << 30, &c->datarec_bytes);
	} else if (strcmp(key, "datarec_interval_us") == 0) {
		rc = parse_u32_in(value, 10, 10000000, &c->datarec_interval_us);
	} else if (strcmp(key, "restart_wait_ms") == 0) {
		rc = parse_u32_in(value, 0, 86400000, &c->restart_wait_ms);
	} else if (strcmp(key, "region_seed") == 0) {
		rc = parse_u32(value, &c->region_seed);
	} else if (strcmp(key, "grow") == 0) {
		rc = parse_bool(value, &c->grow);
	} else if (strcmp(key, "lease_bind") == 0) {
		rc = strpbrk(value, " \t")
		             ? -EINVAL
		             : copy_str(c->lease_bind, sizeof(c->lease_bind),
		                        value);
	} else if (strcmp(key, "domain") == 0) {
		rc = copy_domain(c->domain, value);
	} else if (strcmp(key, "peer_domain") == 0) {
		/* "peer_domain = <id> <domain>", after the peer's line */
		char idbuf[16];
		uint32_t id;
		const char *sp = strchr(value, ' ');
		rc = -EINVAL;
		if (sp && (size_t)(sp - value) < sizeof(idbuf)) {
			memcpy(idbuf, value, (size_t)(sp - value));
			idbuf[sp - value] = 0;
			while (*sp == ' ')
				sp++;
			if (!parse_u32(idbuf, &id))
				for (unsigned i = 0; i < c->npeers && rc; i++)
					if (c->peers[i].id == id)
						rc = copy_domain(
						        c->peer_domains[i], sp);
		}
	} else if (strcmp(key, "peer") == 0) {
		/* "peer = <id> <address>" */
		if (c->npeers == FARM_CONFIG_MAX_PEERS) {
			snprintf(err, errlen, "more than %d peers",
			         FARM_CONFIG_MAX_PEERS);
			return -E2BIG;
		}
		char idbuf[16];
		const char *sp = strchr(value, ' ');
		if (!sp || (size_t)(sp - value) >= sizeof(idbuf)) {
			rc = -EINVAL;
		} else {
			memcpy(idbuf, value, (size_t)(sp - value));
			idbuf[sp - value] = 0;
			while (*sp == ' ')
				sp++;
			struct farm_config_peer *p = &c->peers[c->npeers];
			rc = parse_u32(idbuf, &p->id);
			if (!rc && !*sp)
				rc = -EINVAL;
			if (!rc)
				rc = copy_str(p->addr, sizeof(p->addr), sp);
			if (!rc)
				c->npeers++;
		}
	} else {
		snprintf(err, errlen, "unknown key '%s'", key);
		return -EINVAL;
	}
	if (rc)
		snprintf(err, errlen, "bad value '%s' for '%s'", value, key);
	return rc;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

int farm_config_load(struct farm_config *c, const char *path, char *err,
                     size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	char line[1024], msg[256];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, errlen, "%s:%d: line too long", path,
			         lineno);
			rc = -EINVAL;
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: expected 'key = value'",
			         path, lineno);
			rc = -EINVAL;
			break;
		}
		*eq = 0;
		rc = farm_config_set(c, trim(s), trim(eq + 1), msg,
		                     sizeof(msg));
		if (rc) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
			break;
		}
	}
	fclose(f);
	return rc;
}

int farm_config_apply_env(struct farm_config *c, char *err, size_t errlen)
{
	static const char *const keys[] = {"machine_id",
	                                   "data_dir",
	                                   "fabric",
	                                   "listen",
	                                   "ofi_provider",
	                                   "region_size",
	                                   "job",
	                                   "replicas",
	                                   "rings",
	                                   "ring_points",
	                                   "threads",
	                                   "expect_machines",
	                                   "log_size",
	                                   "busy_poll",
	                                   "zk",
	                                   "zk_root",
	                                   "zk_session_ms",
	                                   "zk_connect_timeout_ms",
	                                   "lease_us",
	                                   "lease_bind",
	                                   "park_after_us",
	                                   "domain",
	                                   "datarec_bytes",
	                                   "datarec_interval_us",
	                                   "restart_wait_ms",
	                                   "region_seed",
	                                   "grow"};
	char env[64], msg[256];
	for (size_t i = 0; i < FARM_ARRAY_SIZE(keys); i++) {
		size_t n =
		        (size_t)snprintf(env, sizeof(env), "FARM_%s", keys[i]);
		for (size_t j = 5; j < n; j++)
			env[j] = (char)toupper((unsigned char)env[j]);
		const char *v = getenv(env);
		if (!v || !*v)
			continue;
		int rc = farm_config_set(c, keys[i], v, msg, sizeof(msg));
		if (rc) {
			snprintf(err, errlen, "%s: %s", env, msg);
			return rc;
		}
	}
	return 0;
}

int farm_config_validate(const struct farm_config *c, char *err, size_t errlen)
{
	if (!c->has_machine_id) {
		snprintf(err, errlen, "machine_id is not set");
		return -EINVAL;
	}
	if (!farm_is_pow2(c->region_size) ||
	    c->region_size < FARM_MIN_REGION_SIZE ||
	    c->region_size > FARM_MAX_REGION_SIZE) {
		snprintf(err, errlen,
		         "region_size %" PRIu64
		         " must be a power of two from 1M to 4G",
		         c->region_size);
		return -EINVAL;
	}
	if (!c->data_dir[0]) {
		snprintf(err, errlen, "data_dir is not set");
		return -EINVAL;
	}
	for (unsigned i = 0; i < c->npeers; i++)
		for (unsigned j = i + 1; j < c->npeers; j++)
			if (c->peers[i].id == c->peers[j].id) {
				snprintf(err, errlen, "peer %u listed twice",
				         c->peers[i].id);
				return -EINVAL;
			}
	return 0;
}
