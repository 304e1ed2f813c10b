#include "util/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"

#define FARM_DEFAULT_REGION_SIZE (2ull << 30)
/* The allocator's smallest region (FARM_ALLOC_MIN_REGION, checked there):
 * a 1 MiB region holds its header and block table and no block, so every
 * allocation in it would fail. */
#define FARM_MIN_REGION_SIZE FARM_CONFIG_MIN_REGION_SIZE
#define FARM_MAX_REGION_SIZE (1ull << 32) /* offsets are 32 bits */

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
	/* A lost machine's id goes to its replacement: without it each
	 * replacement takes a new id for good and the id space caps a
	 * cluster's life. */
	c->reuse_ids = true;
	/* A machine that joins a formed cluster takes over its share: the
	 * cluster's capacity grows with it (src/recovery/README.md). */
	c->grow = true;
	c->kv_shards = 1;
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

static int key_machine_id(struct farm_config *c, const char *value)
{
	int rc = parse_u32(value, &c->machine_id);
	c->has_machine_id = rc == 0;
	return rc;
}

static int key_fabric(struct farm_config *c, const char *value)
{
	if (strcmp(value, "shm") && strcmp(value, "verbs") &&
	    strcmp(value, "ofi") && strcmp(value, "udp"))
		return -EINVAL;
	return copy_str(c->fabric, sizeof(c->fabric), value);
}

static int key_kv_lookup(struct farm_config *c, const char *value)
{
	if (strcmp(value, "read") && strcmp(value, "owner") &&
	    strcmp(value, "auto"))
		return -EINVAL;
	return copy_str(c->kv_lookup, sizeof(c->kv_lookup),
	                strcmp(value, "auto") ? value : "");
}

static int key_log_size(struct farm_config *c, const char *value)
{
	uint64_t v;
	int rc = farm_parse_size(value, &v);
	if (!rc && (!farm_is_pow2(v) || v < (64u << 10) || v > (64u << 20)))
		rc = -ERANGE;
	if (!rc)
		c->log_size = (uint32_t)v;
	return rc;
}

static int key_zk_root(struct farm_config *c, const char *value)
{
	return value[0] != '/' || strpbrk(value, " \t")
	               ? -EINVAL
	               : copy_str(c->zk_root, sizeof(c->zk_root), value);
}

static int key_domain(struct farm_config *c, const char *value)
{
	return copy_domain(c->domain, value);
}

/* "peer_domain = <id> <domain>", after the peer's line */
static int key_peer_domain(struct farm_config *c, const char *value)
{
	char idbuf[16];
	uint32_t id;
	const char *sp = strchr(value, ' ');
	int rc = -EINVAL;
	if (sp && (size_t)(sp - value) < sizeof(idbuf)) {
		memcpy(idbuf, value, (size_t)(sp - value));
		idbuf[sp - value] = 0;
		while (*sp == ' ')
			sp++;
		if (!parse_u32(idbuf, &id))
			for (unsigned i = 0; i < c->npeers && rc; i++)
				if (c->peers[i].id == id)
					rc = copy_domain(c->peer_domains[i],
					                 sp);
	}
	return rc;
}

/* "peer = <id> <address>"; the caller checked there is room. */
static int key_peer(struct farm_config *c, const char *value)
{
	char idbuf[16];
	const char *sp = strchr(value, ' ');
	if (!sp || (size_t)(sp - value) >= sizeof(idbuf))
		return -EINVAL;
	memcpy(idbuf, value, (size_t)(sp - value));
	idbuf[sp - value] = 0;
	while (*sp == ' ')
		sp++;
	struct farm_config_peer *p = &c->peers[c->npeers];
	int rc = parse_u32(idbuf, &p->id);
	if (!rc && !*sp)
		rc = -EINVAL;
	if (!rc)
		rc = copy_str(p->addr, sizeof(p->addr), sp);
	if (!rc)
		c->npeers++;
	return rc;
}

/* How a key's value is read into its field. */
enum cfg_kind {
	CK_U32,    /* a decimal */
	CK_U32_IN, /* a decimal in [lo, hi] (-ERANGE outside) */
	CK_STR,    /* text shorter than the field */
	CK_WORD,   /* text without blanks (checked when used) */
	CK_BOOL,   /* parse_bool */
	CK_SIZE,   /* farm_parse_size, into a uint64_t */
	CK_FN,     /* fn */
};

struct cfg_key {
	const char *key;
	enum cfg_kind kind;
	size_t off, size; /* the field in struct farm_config */
	uint32_t lo, hi;
	int (*fn)(struct farm_config *c, const char *value);
};

#define CFG_FIELD(f) \
	offsetof(struct farm_config, f), sizeof(((struct farm_config *)0)->f)
#define CFG_U32(k, f)                               \
	{                                           \
		k, CK_U32, CFG_FIELD(f), 0, 0, NULL \
	}
#define CFG_IN(k, f, lo, hi)                             \
	{                                                \
		k, CK_U32_IN, CFG_FIELD(f), lo, hi, NULL \
	}
#define CFG_STR(k, f)                               \
	{                                           \
		k, CK_STR, CFG_FIELD(f), 0, 0, NULL \
	}
#define CFG_WORD(k, f)                               \
	{                                            \
		k, CK_WORD, CFG_FIELD(f), 0, 0, NULL \
	}
#define CFG_BOOL(k, f)                               \
	{                                            \
		k, CK_BOOL, CFG_FIELD(f), 0, 0, NULL \
	}
#define CFG_SIZE(k, f)                               \
	{                                            \
		k, CK_SIZE, CFG_FIELD(f), 0, 0, NULL \
	}
#define CFG_FN(k, fn)                    \
	{                                \
		k, CK_FN, 0, 0, 0, 0, fn \
	}

/* Every key of docs/config.md, with its field and its limits. */
static const struct cfg_key cfg_keys[] = {
        CFG_FN("machine_id", key_machine_id),
        CFG_STR("data_dir", data_dir),
        CFG_FN("fabric", key_fabric),
        CFG_FN("kv_lookup", key_kv_lookup),
        CFG_IN("kv_shards", kv_shards, 1, 256),
        CFG_STR("listen", listen),
        CFG_STR("ofi_provider", ofi_provider),
        CFG_SIZE("region_size", region_size),
        CFG_STR("job", job),
        CFG_IN("replicas", replicas, 1, 8),
        CFG_IN("rings", rings, 1, 16),
        CFG_IN("ring_points", ring_points, 1, 1024),
        CFG_FN("log_size", key_log_size),
        CFG_IN("expect_machines", expect_machines, 0,
               FARM_CONFIG_MAX_PEERS + 1),
        CFG_IN("threads", threads, 1, 64),
        CFG_IN("max_machines", max_machines, 1, 1024),
        CFG_BOOL("busy_poll", busy_poll),
        CFG_IN("park_after_us", park_after_us, 0, 1000000),
        CFG_IN("lazy_bell_us", lazy_bell_us, 0, 100000),
        /* host:port[,host:port...][/chroot]; checked when used */
        CFG_WORD("zk", zk),
        CFG_FN("zk_root", key_zk_root),
        CFG_IN("zk_session_ms", zk_session_ms, 100, 600000),
        CFG_IN("zk_connect_timeout_ms", zk_connect_timeout_ms, 1, 3600000),
        CFG_IN("lease_us", lease_us, 1000, 60000000),
        CFG_IN("datarec_bytes", datarec_bytes, 64, 1u << 30),
        CFG_IN("datarec_interval_us", datarec_interval_us, 10, 10000000),
        CFG_IN("datarec_hold_ms", datarec_hold_ms, 0, 60000),
        CFG_IN("restart_wait_ms", restart_wait_ms, 0, 86400000),
        CFG_U32("region_seed", region_seed),
        CFG_BOOL("grow", grow),
        CFG_BOOL("reuse_ids", reuse_ids),
        CFG_BOOL("reuse_copies", reuse_copies),
        CFG_WORD("lease_bind", lease_bind),
        CFG_FN("domain", key_domain),
        CFG_FN("peer_domain", key_peer_domain),
        CFG_FN("peer", key_peer),
};

static int set_key(struct farm_config *c, const struct cfg_key *k,
                   const char *value)
{
	void *f = (char *)c + k->off;
	switch (k->kind) {
	case CK_U32: return parse_u32(value, f);
	case CK_U32_IN: return parse_u32_in(value, k->lo, k->hi, f);
	case CK_STR: return copy_str(f, k->size, value);
	case CK_WORD:
		return strpbrk(value, " \t") ? -EINVAL
		                             : copy_str(f, k->size, value);
	case CK_BOOL: return parse_bool(value, f);
	case CK_SIZE: return farm_parse_size(value, f);
	case CK_FN: return k->fn(c, value);
	}
	return -EINVAL;
}

int farm_config_set(struct farm_config *c, const char *key, const char *value,
                    char *err, size_t errlen)
{
	const struct cfg_key *k = NULL;
	for (size_t i = 0; i < FARM_ARRAY_SIZE(cfg_keys) && !k; i++)
		if (strcmp(key, cfg_keys[i].key) == 0)
			k = &cfg_keys[i];
	if (!k) {
		snprintf(err, errlen, "unknown key '%s'", key);
		return -EINVAL;
	}
	if (k->fn == key_peer && c->npeers == FARM_CONFIG_MAX_PEERS) {
		snprintf(err, errlen, "more than %d peers",
		         FARM_CONFIG_MAX_PEERS);
		return -E2BIG;
	}
	int rc = set_key(c, k, value);
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
	                                   "max_machines",
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
	                                   "lazy_bell_us",
	                                   "domain",
	                                   "datarec_bytes",
	                                   "datarec_interval_us",
	                                   "datarec_hold_ms",
	                                   "restart_wait_ms",
	                                   "region_seed",
	                                   "grow",
	                                   "kv_lookup",
	                                   "kv_shards",
	                                   "reuse_ids",
	                                   "reuse_copies"};
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
		         " must be a power of two from 2M to 4G",
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
