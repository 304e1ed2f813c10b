/*
 * What the files of the whole-cluster restart share (restart.c: the
 * lifecycle; restart_man.c: the manifest and the directory check;
 * restart_run.c: the restart itself). Internal to src/node.
 */
#ifndef FARM_NODE_RESTART_INT_H
#define FARM_NODE_RESTART_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "node/restart.h"
#include "node/node.h"
#include "txn/txid.h"
#include "txn/txm.h"

#define MAN_MAGIC 0x314e414d4d524146ull /* "FARMMAN1" */
#define MAN_END   0x31444e454d524146ull /* "FARMEND1" */
/* 2: the header names the wire version of the build that wrote the
 * directory (man_hdr.wire). */
#define MAN_LAYOUT 2u
#define MAN_NAME   64
#define RLOG_MAGIC 0x32474f4c524d5246ull /* "FRMRLOG2": with rings[] */
#define RLOG_HDR   256u
#define BARRIER_MS 60000
#define READ_CHUNK (1u << 20)

struct man_hdr {
	uint64_t magic;
	uint32_t layout;
	uint32_t machine;
	uint64_t region_size;
	uint64_t log_bytes;
	uint64_t config_id;
	uint32_t nregions;
	uint32_t nmembers;
	uint32_t clean;
	uint32_t nkept; /* struct man_kept entries after the regions (0 in
	                   manifests written before they existed) */
	/* The wire version of the build that wrote it (util/wire.h): the
	 * layouts at rest (object headers, buckets, nodes, log records) are
	 * the ones other machines READ, so they change with it, and a
	 * build of another version must not restart from them. */
	uint32_t wire;
	uint32_t pad;
	uint32_t members[FARM_VIEW_MAX];
	char cluster[256];
	char log_file[MAN_NAME];
};

struct man_region {
	uint32_t id;
	uint32_t pad;
	uint64_t size;
	char file[MAN_NAME];
};

/* A layer's durable blob (farm_restart_keep_blob): the KV store's shard
 * list, for one. */
struct man_kept {
	char name[FARM_RESTART_KEPT_NAME];
	uint32_t len;
	uint32_t pad;
	uint8_t data[FARM_RESTART_KEPT_MAX];
};

struct man_tail {
	uint64_t magic;
	uint64_t len; /* the whole manifest, tail included */
	uint64_t sum; /* FNV-1a of everything before the tail */
};

/* FNV-1a of @n bytes: the manifest's checksum (man_tail.sum). */
uint64_t farm_rst_fnv1a(const void *p, size_t n);
/* The cluster's name as a manifest records it (its ZooKeeper root). */
void farm_rst_cluster_name(const struct farm_config *cfg, char *out,
                           size_t len);

/* The head of the published previous log; the log file follows, then
 * the configuration history (hist_bytes of it, restart_hist.c), beyond the
 * length the card gives (a peer built before the history reads the log
 * alone, and one that publishes none leaves hist_bytes 0). The published
 * memory is sparse: only the rings of the coordinators in @rings were read
 * in (the rest are zero, and no record), and a peer reads no other: a
 * read of an unbacked range would have this machine's memory allocated
 * under the reader (on tmpfs; and a fault the reader dies of where the
 * file system is full). A peer built before @rings (another magic) is
 * refused as a bad header. */
struct rlog_hdr {
	uint64_t magic;
	uint32_t machine;
	_Atomic uint32_t done; /* 1: this machine's restart applied (step 5) */
	uint64_t log_bytes;
	uint64_t hist_bytes;
	uint64_t rings[TXN_COORD_WORDS];
	uint8_t pad[RLOG_HDR - 32 - 8 * TXN_COORD_WORDS];
};
_Static_assert(sizeof(struct rlog_hdr) == RLOG_HDR, "rlog header");

/* The configuration history (restart_hist.c): a header, configurations
 * oldest first, a checksum. */
#define FARM_HISTORY_FILE "farm.history"
#define HIST_MAGIC        0x31545349484d5246ull /* "FRMHIST1" */
#define HIST_LAYOUT       1u
#define HIST_DEPTH        16u
#define HIST_MAX_BYTES    (1u << 22)

struct hist_hdr {
	uint64_t magic;
	uint32_t layout;
	uint32_t count; /* configurations */
	uint64_t bytes; /* the whole blob, checksum included */
};

struct hist_conf {
	uint64_t config_id;
	uint32_t n; /* struct hist_machine entries after it */
	/* struct farm_ring_pin entries after those (the configuration's
	 * pins, part of its placement: ring.h); 0 in a blob written before
	 * pins existed, where this was padding. */
	uint32_t npins;
};

/* A machine of a configuration's placement (farm_ring_machine), with the
 * incarnation of the member that held the id then. */
struct hist_machine {
	uint32_t id, domain, late, shadow, inc;
	uint8_t departed, leaving, member, pad;
};

struct farm_restart {
	char dir[FARM_CONFIG_STR];
	char cluster[256];
	uint32_t me;
	uint64_t region_size;
	farm_fabric *fab;
	farm_as *as;
	farm_txm *txm;
	struct farm_galloc *ga;
	pthread_mutex_t lock;
	/* The previous incarnation (pending restart). */
	bool pending;
	struct man_hdr old;
	struct man_region *old_regs;
	/* This incarnation's copies and last view (under lock). */
	struct man_region *regs;
	unsigned nregs, cap;
	uint64_t config_id;
	uint32_t members[FARM_VIEW_MAX];
	unsigned nmembers;
	bool writable; /* the manifest is this incarnation's */
	bool frozen;   /* shutting down: views no longer recorded */
	/* The previous log, published. */
	farm_mem *rmem;
	farm_mr *rmr;
	struct farm_restart_stats st;
	uint64_t t_open_ns;
	struct farm_ring_attr ring; /* placement's (cfg) */
	/* Under lock: the layers' blobs, the previous incarnation's until
	 * replaced (written with every manifest). */
	struct man_kept kept[FARM_RESTART_KEPT_N];
	unsigned nkept;
	/* Under lock: the configuration history's blob (restart_hist.c);
	 * the previous incarnation's until a view is added. */
	uint8_t *hist;
	size_t hist_len;
	size_t hist_pub; /* bytes of it published after the previous log */
};

/* <dir>/<name><suffix> into @out. */
void farm_rst_path(const struct farm_restart *rs, const char *name,
                   const char *suffix, char *out, size_t len);
/* Write the manifest (under rs->lock); @clean marks a clean shutdown. */
int farm_rst_man_write(struct farm_restart *rs, bool clean);
/* farm_as_on_local's callback: a copy gained or dropped. */
void farm_rst_on_local(void *ctx, uint32_t region, farm_region *r, bool added);
/* Is @v the restart's view (restart.c)? The lost members into @lost. */
bool farm_rst_set(const struct farm_restart *rs, const struct farm_view *v,
                  uint32_t *lost, unsigned *nlost);
/* How many previous members the replicas allow to be lost. */
unsigned farm_rst_most_lost(const struct farm_restart *rs);
/* The previous placement (with the lost members), for the decision. */
int farm_rst_old_ring(const struct farm_restart *rs, const struct farm_view *v,
                      const uint32_t *lost, unsigned nlost, farm_ring **out);
/* restart_hist.c: visit each configuration of the history blob @b (@len
 * bytes; 0, FARM_ECORRUPT when it does not add up); add @v's placement to
 * rs->hist (under rs->lock; written to the directory when writable);
 * load the directory's history (a pending restart's). */
typedef void (*farm_rst_hist_fn)(void *ctx, const struct hist_conf *c,
                                 const struct hist_machine *m,
                                 const struct farm_ring_pin *pins);
int farm_rst_hist_each(const uint8_t *b, size_t len, farm_rst_hist_fn fn,
                       void *ctx);
void farm_rst_hist_add(struct farm_restart *rs, const struct farm_view *v);
void farm_rst_hist_load(struct farm_restart *rs);

/* Does @m publish its previous log (restart_run.c)? */
bool farm_rst_peer_live(struct farm_restart *rs, const struct farm_member *m);

#endif
