/*
 * Machine configuration: a file of "key = value" lines plus environment
 * overrides (FARM_<KEY> in upper case). The format and every key are
 * documented in docs/config.md. Internal; not installed.
 */
#ifndef FARM_UTIL_CONFIG_H
#define FARM_UTIL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FARM_CONFIG_MAX_PEERS       255 /* a view holds up to 256 machines */
#define FARM_CONFIG_STR             256
#define FARM_CONFIG_DOMAIN          64 /* a failure domain's name, with NUL */
#define FARM_CONFIG_MIN_REGION_SIZE (2ull << 20) /* region_size's least */

struct farm_config_peer {
	uint32_t id;
	char addr[FARM_CONFIG_STR];
};

struct farm_config {
	uint32_t machine_id;
	bool has_machine_id;
	char data_dir[FARM_CONFIG_STR];
	char fabric[16];                /* "" = $FARM_FABRIC or shm */
	char listen[FARM_CONFIG_STR];   /* verbs, ofi, udp: ip:port */
	char ofi_provider[64];          /* ofi: libfabric provider ("" =
	                                   tcp;ofi_rxm) */
	uint64_t region_size;           /* bytes, power of two */
	char job[32];                   /* what the machine host runs */
	uint32_t replicas;              /* r: copies of each region, 1..8 */
	uint32_t rings;                 /* k: consistent-hashing rings, 1..16 */
	uint32_t ring_points;           /* points per machine per ring */
	uint32_t threads;               /* event loops per machine, 1..64 */
	uint32_t max_machines;          /* machine ids are below this,
	                                   1..1024 (0: 64); the same on every
	                                   machine of a cluster */
	bool busy_poll;                 /* loops never park (messaging's
	                                   busy_poll); default off */
	uint32_t park_after_us;         /* idle this long before a loop parks
	                                   (0: at once); default 200 */
	uint32_t lazy_bell_us;          /* a transaction's LOCK records wait
	                                   this long for company before their
	                                   doorbell (0: at once, the
	                                   default) */
	uint32_t log_size;              /* bytes of each transaction log ring
	                                   (0: 256 KiB) */
	uint32_t expect_machines;       /* the job waits for this many (0:
	                                   the peers + 1, or 1 with zk) */
	char zk[FARM_CONFIG_STR];       /* ZooKeeper connect string; "" = static
	                                   membership from the peer lines */
	char zk_root[FARM_CONFIG_STR];  /* cluster root znode */
	uint32_t zk_session_ms;         /* ZooKeeper session timeout */
	uint32_t zk_connect_timeout_ms; /* bound on reaching ZooKeeper */
	uint32_t lease_us;              /* recovery's lease length (0: 10 ms);
	                                   leases run with ZooKeeper only */
	char lease_bind[FARM_CONFIG_STR]; /* IPv4 address of the lease
	                                     socket ("": 127.0.0.1) */
	/* The machine's failure domain ("": none): placement puts a
	 * region's replicas in distinct domains (docs/config.md). */
	char domain[FARM_CONFIG_DOMAIN];
	uint32_t datarec_bytes;       /* data recovery: bytes READ per loop
	                                 per interval (0: 8192) */
	uint32_t datarec_interval_us; /* ... every so often (0: 2000) */
	/* For measurement only (bench/datarec_bench): copies held in the odd
	 * windows of this many ms of CLOCK_MONOTONIC (0, the default:
	 * never), so the foreground is compared with and without them
	 * over the same stretch of time. */
	uint32_t datarec_hold_ms;
	/* Whole-cluster restart: after this long without every previous
	 * member back, the others give up the missing ones and restart
	 * without them (0, the default: wait for ever; experimental, see
	 * src/recovery/README.md). */
	uint32_t restart_wait_ms;
	/* Region ids drawn from this seed (mixed with the machine id) rather
	 * than the clock: the same allocations give the same ids, so the
	 * same placement (tests that need a given layout; reproducing one).
	 * 0: the clock. */
	uint32_t region_seed;
	/* Growth (src/recovery/README.md): this machine, once it joined late
	 * and holds its share, asks to become an ordinary member (primary of
	 * part of its share). Off: it stays a late backup. */
	bool grow;
	/* How the KV store's lookups travel: "read", "owner" or "" (auto:
	 * by fabric; src/kv/README.md). */
	char kv_lookup[8];
	/* KV shards each machine makes when the store is made. */
	uint32_t kv_shards;
	/* A fresh machine under a gone id is admitted as a new incarnation
	 * (farm_membership_attr.reuse_ids) instead of refused. */
	bool reuse_ids;
	/* A machine whose intact data directory belongs to an id the
	 * cluster lost (gone) rejoins as a fresh machine under it, its old
	 * region copies kept as stale sources its copies take unchanged
	 * chunks from (src/recovery/README.md, "Same-id restart"). Needs
	 * reuse_ids and zk. */
	bool reuse_copies;
	unsigned npeers;
	struct farm_config_peer peers[FARM_CONFIG_MAX_PEERS];
	/* peer_domains[i]: peers[i]'s failure domain ("peer_domain"; "":
	 * none), for static membership. */
	char peer_domains[FARM_CONFIG_MAX_PEERS][FARM_CONFIG_DOMAIN];
};

void farm_config_defaults(struct farm_config *c);
/* Read @path over @c. Returns 0, or a negative code with a message naming
 * the file and line in @err. */
int farm_config_load(struct farm_config *c, const char *path, char *err,
                     size_t errlen);
/* Apply FARM_MACHINE_ID, FARM_DATA_DIR, FARM_FABRIC, FARM_LISTEN,
 * FARM_OFI_PROVIDER,
 * FARM_REGION_SIZE, FARM_JOB over @c. */
int farm_config_apply_env(struct farm_config *c, char *err, size_t errlen);
/* Set one key; the file parser and the environment both use it. */
int farm_config_set(struct farm_config *c, const char *key, const char *value,
                    char *err, size_t errlen);
/* Check the whole configuration is usable. */
int farm_config_validate(const struct farm_config *c, char *err, size_t errlen);
/* "64M", "2G", "4096", "1k": bytes. Returns 0 or -EINVAL. */
int farm_parse_size(const char *s, uint64_t *out);

#endif
