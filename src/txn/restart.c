/*
 * Whole-cluster restart, the transaction layer's part (txm.h,
 * farm_txm_restart_*): every machine of the cluster was killed at once and
 * has come back on the data directories it left, with the same members.
 * Its region copies hold what was installed or applied when it died; its
 * previous log file holds every record not yet truncated. The node
 * (src/node/restart.c) hands this file a copy of every member's previous
 * log; from them every machine takes the same decisions, with no decider
 * and no message:
 *
 *  - The logs read: every member's, and in them the rings of the
 *    previous members and of every coordinator a log's header marks
 *    pending (farm_txlog_pending: a removed one whose recovery round had
 *    not emptied its log everywhere at the kill).
 *  - A transaction's facts are the records of it in any log: ABORT,
 *    COMMIT-PRIMARY, and which regions each backup's COMMIT-BACKUP covers.
 *    A recovery round's decision is one of the first two: each survivor
 *    logs it in its copy of the removed coordinator's log before applying
 *    it, and none empties that log before every survivor did
 *    (recover_decide.c), so where any copy holds a decision of the round
 *    some log still says it, and the restart takes it over the rule
 *    below, which it would otherwise judge with the ring it restarts in
 *    (a new backup that never had the COMMIT-BACKUP among the backups).
 *    A commit can have no decision logged only where nothing of it was
 *    applied by a round.
 *    A coordinator thread's low-water mark is the highest any whole
 *    record or pad of its log carries (on any machine): a pad carries
 *    the marks of the record written with it, which a kill may have
 *    stopped, and a replica may have truncated on them.
 *  - The rule is recovery's for a removed coordinator (recover.c, step 4),
 *    with every coordinator removed (none survived):
 *      abort   an ABORT anywhere;
 *      commit  a COMMIT-PRIMARY anywhere; or finished (its sequence is
 *              below its thread's mark); or a COMMIT-BACKUP for every
 *              region it writes at every backup of that region;
 *      abort   otherwise.
 *    "Every backup" is of the configuration the records carry (the
 *    placement the members' configuration histories give for it,
 *    src/node/restart_hist.c), less the machines whose holder then is not
 *    a member now (removed since: their logs are not read), as a recovery
 *    round judges (recover_decide.c). The ring the restart runs in may
 *    list a backup added since (a removal's replacement, a join, growth)
 *    that never had the COMMIT-BACKUP of an idle coordinator's last
 *    commit, and would abort what its primary installed. A configuration
 *    no history has is judged by that ring, as before the histories.
 *    When some members did not come back (their directories refused;
 *    node/restart.c gives them up, @lost), their logs are gone: "every
 *    backup" means every backup that came back, in the previous
 *    configuration's placement, and each region written needs one.
 *    This is recovery's rule for a removed backup (a lost machine is a
 *    failed one whose log failed with it).
 *    A coordinator reports commit only once every COMMIT-BACKUP is durable
 *    and reports abort only once its ABORTs landed, so no reported outcome
 *    is reversed. Every machine reads the same logs, so every machine
 *    decides the same.
 *  - A committed transaction's images are applied to every local copy
 *    (primary or backup) whose header is older: LOCK records carry the
 *    primary's after-images, COMMIT-BACKUP records the backups' (which a
 *    primary also takes: a single-machine commit logs only those, and the
 *    coordinator may have died between its local lock and its install).
 *    An image replaces the whole object, so an install that a kill cut
 *    short is finished, and versions only grow, so applying the images of
 *    one object in any order leaves the newest.
 *  - No transaction of the previous incarnation is in flight any more, so
 *    every lock bit left in a local object is stale: once the images are
 *    in, every object of every formatted local region is unlocked (found
 *    through its block table: farm_alloc_walk_region). Nothing an aborted
 *    transaction wrote is visible: primaries install only at commit. An
 *    object whose install finished but whose unlock never came (a free
 *    deferred until the allocator adopts its promoted region, while the
 *    adopter scanned it, whose records may all be truncated by then)
 *    already holds its new version under the lock (obj_install_locked),
 *    so unlocking it leaves it whole.
 *  - A committed free's slot is free again at every copy. The allocator
 *    keeps nothing of a free across a kill but the object's header (the
 *    rebuild by scan, src/node/restart_run.c step 4, lists a slot whose
 *    header says freed and keeps one that says allocated), and a
 *    COMMIT-BACKUP's image carries the freed header, a LOCK's image
 *    (applied with obj_install) leaves it as it was. So once the images
 *    are in, every copy whose header still holds the freed object
 *    allocated in the incarnation the free ended gets the freed header
 *    (free_committed): a primary's install the kill cut short, before or
 *    after its image, and a copy the LOCK's image reached first. Its
 *    records are still in the logs: the coordinator finishes (and so
 *    truncates) a commit only after the COMMIT-PRIMARY lands, and the
 *    primary processes its log in order, the LOCK's truncation after the
 *    COMMIT-PRIMARY the kill cut short; a single-machine commit's
 *    COMMIT-BACKUPs stay until it finishes, after its install. A free
 *    deferred to its region's adoption is done in its header at once
 *    unless the adopter was scanning the region
 *    (src/alloc/galloc_adopt.c), so no record is needed for it. One
 *    deferred while the adopter scanned left the object locked and
 *    allocated until the adopter frees it, and its records may all be
 *    truncated before the kill; so the allocator marks the object's
 *    version word (FARM_OBJHDR_FREE_PENDING, src/alloc/objhdr.h) when it
 *    defers such a free, and the lock walk frees the header of every
 *    object it finds marked (unlock_one), no record needed either.
 *
 * Not handled (src/recovery/README.md, "Limits"): an array's free whose
 * install the kill cut short (its run or slot is freed whole by the
 * allocator, and a large array's run is retired in the block table); a
 * single-machine commit's free with no backup (no record) killed between
 * its install and the allocator's free. Each is installed but its slot is
 * not freed (a leak, never a wrong value). A deferred free killed after
 * the adopter freed its header and before it cleared the mark is found
 * marked and free: unlocked, not freed again (unlock_one).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/objhdr.h"
#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_testing.h"
#include "util/fault.h"
#include "util/log.h"

struct rs_rec {
	const uint8_t *rec;
	struct rec_hdr h;
	uint32_t owner;     /* whose log holds it */
	uint32_t coord, th; /* whose log it is in (coordinator, thread) */
};

static int cmp_txid(const void *a, const void *b)
{
	const struct rs_rec *x = a, *y = b;
	if (x->h.txid != y->h.txid)
		return x->h.txid < y->h.txid ? -1 : 1;
	return x->owner < y->owner ? -1 : x->owner > y->owner;
}

/* A message into @err (when given), with the file's name first. */
#define FAIL(...)                                           \
	do {                                                \
		if (err && errlen)                          \
			snprintf(err, errlen, __VA_ARGS__); \
	} while (0)

/* The superblock of a log file at rest: its magic, layout, geometry and
 * size. */
static int super_check(const uint8_t *base, size_t len, const char *what,
                       char *err, size_t errlen)
{
	struct log_super sb;
	if (!base || len < sizeof(sb)) {
		FAIL("%s: log file shorter than its superblock (offset %zu)",
		     what, len);
		return FARM_ECORRUPT;
	}
	memcpy(&sb, base, sizeof(sb));
	if (sb.magic != LOG_SUPER_MAGIC) {
		FAIL("%s: bad log magic at offset 0", what);
		return FARM_ECORRUPT;
	}
	if (sb.layout != LOG_LAYOUT) {
		FAIL("%s: log layout %" PRIu32 " at offset 8 (this build reads "
		     "layout %u)",
		     what, sb.layout, LOG_LAYOUT);
		return FARM_ECORRUPT;
	}
	if (!farm_txn_log_geometry_ok(&sb)) {
		FAIL("%s: bad log superblock at offset 8", what);
		return FARM_ECORRUPT;
	}
	if (sb.total != len) {
		FAIL("%s: size mismatch at offset %zu: the superblock says "
		     "%" PRIu64 " bytes",
		     what, len, sb.total);
		return FARM_ECORRUPT;
	}
	return 0;
}

/* One ring of collect's (below): coordinator @c's thread @t, @R bytes at
 * @ring, @roff into machine @machine's log file (for the message). */
struct ring_at {
	const uint8_t *ring;
	uint64_t R, roff;
	uint32_t machine, c, t;
};

static int collect_ring(const struct ring_at *g, struct rs_rec **v, size_t *n,
                        size_t *cap, uint64_t *mark, const char *what,
                        char *err, size_t errlen)
{
	for (uint64_t off = 0; off < g->R; off += 64) {
		struct rec_hdr h;
		/* One in flight at the kill never landed, so was never
		 * acknowledged: not whole, skipped. */
		int k = farm_txn_log_record_at(g->ring, g->R, off, &h, NULL);
		if (k < 0) {
			FAIL("%s: damaged log record at offset %" PRIu64
			     " (machine %" PRIu32 "'s thread %" PRIu32
			     " ring, type %u, %" PRIu32
			     " bytes): whole by its trailer but its checksum "
			     "does not match",
			     what, g->roff + off, g->c, g->t, (unsigned)h.type,
			     h.len);
			return FARM_ECORRUPT;
		}
		if (!k)
			continue;
		if (mark && h.lw > mark[g->c * MAX_LOOPS + g->t])
			mark[g->c * MAX_LOOPS + g->t] = h.lw;
		if (k == 2 || !v) { /* a pad, or checking */
			off += h.len - 64;
			continue;
		}
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 1024;
			struct rs_rec *nv = realloc(*v, nc * sizeof(**v));
			if (!nv)
				return -ENOMEM;
			*v = nv;
			*cap = nc;
		}
		(*v)[(*n)++] = (struct rs_rec){.rec = g->ring + off,
		                               .h = h,
		                               .owner = g->machine,
		                               .coord = g->c,
		                               .th = g->t};
		off += h.len - 64;
	}
	return 0;
}

/* Every whole record of one log file (as farm_txlog_scan_file finds
 * them), appended to *@v (when @v is given), and every coordinator
 * thread's low-water mark raised to the highest a whole record or pad
 * carries (@mark[coordinator * MAX_LOOPS + thread], when given). A pad
 * counts: it is written with the record after it, in one append, and
 * carries the same marks, so a kill can leave the pad without the record,
 * and a replica may already have truncated on the pad's mark
 * (participant.c) what another replica still holds. A record or pad whose
 * trailer says it landed whole but whose checksum does not match is
 * damage: FARM_ECORRUPT, with the file (@what) and offset in @err; the
 * superblock was checked. */
static int collect(const uint8_t *base, const uint64_t *coords,
                   struct rs_rec **v, size_t *n, size_t *cap, uint64_t *mark,
                   const char *what, char *err, size_t errlen)
{
	struct log_super sb;
	memcpy(&sb, base, sizeof(sb));
	for (uint32_t c = 0; c < sb.M; c++)
		for (uint32_t t = 0;
		     t < sb.T && (!coords || txn_coord_in(coords, c)); t++) {
			struct ring_at g = {.R = sb.R,
			                    .machine = sb.machine,
			                    .c = c,
			                    .t = t};
			g.roff = sb.hdr_area + ((uint64_t)c * sb.T + t) * sb.R;
			g.ring = base + g.roff;
			int rc = collect_ring(&g, v, n, cap, mark, what, err,
			                      errlen);
			if (rc)
				return rc;
		}
	return 0;
}

int farm_txlog_check(const uint8_t *base, size_t len, const char *what,
                     char *err, size_t errlen)
{
	int rc = super_check(base, len, what, err, errlen);
	return rc ? rc
	          : collect(base, 0, NULL, NULL, NULL, NULL, what, err, errlen);
}

/* Does @fd hold data anywhere in [@off, @off + @len)? A hole reads as
 * zeros, and a zero line is no record (farm_txn_log_record_at), so a ring
 * without data holds nothing to check. A file system without SEEK_DATA
 * says data everywhere (the generic lseek), and the ring is read. */
static bool has_data(int fd, uint64_t off, uint64_t len)
{
	if (FARM_FAULT_SWITCH(FARM_FP_TXLOG_SKIP_DATA))
		return false;
	off_t d = lseek(fd, (off_t)off, SEEK_DATA);
	return d >= 0 ? (uint64_t)d < off + len : errno != ENXIO;
}

/* pread of @len bytes at @off into @dst. 0; a negative errno. */
static int pread_all(int fd, uint8_t *dst, uint64_t off, uint64_t len)
{
	for (uint64_t got = 0; got < len;) {
		ssize_t r = pread(fd, dst + got, len - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		got += (uint64_t)r;
	}
	return 0;
}

int farm_txlog_check_fd(int fd, uint64_t len, const char *what, char *err,
                        size_t errlen)
{
	struct log_super sb;
	if (fd < 0)
		return -EINVAL;
	int rc = len < sizeof(sb)
	                 ? 0
	                 : pread_all(fd, (uint8_t *)&sb, 0, sizeof(sb));
	if (rc)
		return rc;
	if ((rc = super_check(len < sizeof(sb) ? NULL : (const uint8_t *)&sb,
	                      len, what, err, errlen)))
		return rc;
	uint8_t *buf = malloc(sb.R);
	if (!buf)
		return -ENOMEM;
	for (uint32_t c = 0; c < sb.M && !rc; c++)
		for (uint32_t t = 0; t < sb.T && !rc; t++) {
			struct ring_at g = {.ring = buf,
			                    .R = sb.R,
			                    .machine = sb.machine,
			                    .c = c,
			                    .t = t};
			g.roff = sb.hdr_area + ((uint64_t)c * sb.T + t) * sb.R;
			if (!has_data(fd, g.roff, sb.R))
				continue;
			rc = pread_all(fd, buf, g.roff, sb.R);
			if (!rc)
				rc = collect_ring(&g, NULL, NULL, NULL, NULL,
				                  what, err, errlen);
		}
	free(buf);
	return rc;
}

int farm_txlog_pending(const uint8_t *base, size_t len, uint64_t *coords)
{
	struct log_super sb;
	if (!base || !coords || len < sizeof(sb))
		return FARM_ECORRUPT;
	memcpy(&sb, base, sizeof(sb));
	if (sb.magic != LOG_SUPER_MAGIC || !farm_txn_log_geometry_ok(&sb) ||
	    sb.hdr_area > len)
		return FARM_ECORRUPT;
	for (uint32_t c = 0; c < sb.M; c++)
		for (uint32_t t = 0; t < sb.T; t++) {
			uint64_t w;
			memcpy(&w,
			       base + 64 + ((uint64_t)c * sb.T + t) * 64 +
			               LOG_HDR_PENDING,
			       8);
			if (w)
				txn_coord_put(coords, c, true);
		}
	return 0;
}

static const struct rec_obj *objs_of(const uint8_t *rec)
{
	return (const struct rec_obj *)(const void *)(rec +
	                                              sizeof(struct rec_hdr));
}

/* Does the COMMIT-BACKUP @r hold an object of @region? */
static bool covers(const struct rs_rec *r, uint32_t region)
{
	const struct rec_obj *o = objs_of(r->rec);
	for (unsigned i = 0; i < r->h.nobj; i++) {
		struct rec_obj x;
		memcpy(&x, &o[i], sizeof(x));
		if (farm_gaddr_region(x.addr) == region)
			return true;
	}
	return false;
}

/* The regions a record says its transaction writes. */
static unsigned regs_of(const struct rs_rec *r, uint32_t *out, unsigned max)
{
	const struct rec_obj *o = objs_of(r->rec);
	uint64_t img = 0;
	for (unsigned i = 0; i < r->h.nobj; i++) {
		struct rec_obj x;
		memcpy(&x, &o[i], sizeof(x));
		img += 64ull * x.lines;
	}
	if (rec_size(r->h.nobj, img, r->h.nreg) > r->h.len)
		return 0;
	unsigned n = FARM_MIN((unsigned)r->h.nreg, max);
	memcpy(out,
	       r->rec + sizeof(struct rec_hdr) +
	               (size_t)r->h.nobj * sizeof(struct rec_obj) + img,
	       4ull * n);
	return n;
}

static bool given_up(const struct farm_txrestart_lost *lost, uint32_t id)
{
	for (unsigned i = 0; i < lost->n; i++)
		if (lost->ids[i] == id)
			return true;
	return false;
}

/* The configuration @cfg (low 32 bits, as records carry it) among those
 * the restart knows, or NULL. */
static const struct farm_txrestart_conf *
conf_of(const struct farm_txrestart_lost *lost, uint32_t cfg)
{
	for (unsigned i = 0; lost && cfg && i < lost->nconfs; i++)
		if ((uint32_t)lost->confs[i].cfg == cfg)
			return &lost->confs[i];
	return NULL;
}

/* Is the holder of @id in configuration @c removed since: not a member
 * now, or the id held by another incarnation now? Its log is not read
 * (a removed machine's log went with it). */
static bool removed_since(const struct farm_txrestart_lost *lost,
                          const struct farm_txrestart_conf *c, uint32_t id)
{
	uint32_t then = 0;
	bool was = false;
	for (unsigned i = 0; i < c->n && !was; i++)
		if (c->ids[i] == id) {
			was = true;
			then = c->inc[i];
		}
	for (unsigned i = 0; was && i < lost->now_n; i++)
		if (lost->now_ids[i] == id)
			return lost->now_inc[i] != then;
	return true;
}

/* Whether the records @g[0..n) of one transaction hold a
 * COMMIT-BACKUP of region @reg written by machine @backup. */
static bool has_cb_from(const struct rs_rec *g, size_t n, uint32_t backup,
                        uint32_t reg)
{
	for (size_t i = 0; i < n; i++)
		if (g[i].h.type == REC_COMMIT_BACKUP && g[i].owner == backup &&
		    covers(&g[i], reg))
			return true;
	return false;
}

/* Whether region @reg's backups that came back all hold the
 * transaction's COMMIT-BACKUP. A backup given up took its records with
 * it: the others' decide. The coordinator reported the commit only once
 * every backup's COMMIT-BACKUP was durable, so those of the backups that
 * came back are there; committing one it did not report is allowed
 * (every lock was held and validation passed before any COMMIT-BACKUP
 * was sent). With no backup of a region back, nothing proves the
 * commit. */
static bool backups_agree(farm_txm *m, const struct rs_rec *g, size_t n,
                          uint32_t reg, const struct farm_txrestart_lost *lost,
                          const struct farm_txrestart_conf *c, bool strict)
{
	uint32_t reps[FARM_RING_MAX_REPLICAS];
	unsigned nr = c ? farm_ring_holders(c->ring, reg, reps)
	              : lost && lost->ring
	                      ? farm_ring_holders(lost->ring, reg, reps)
	                      : farm_as_replicas(m->as, reg, reps);
	unsigned back = 0, skipped = 0;
	for (unsigned b = 1; b < nr; b++) {
		if (lost && !strict && given_up(lost, reps[b])) {
			skipped++;
			continue;
		}
		if (c && removed_since(lost, c, reps[b]))
			continue;
		back++;
		if (!has_cb_from(g, n, reps[b], reg))
			return false;
	}
	return !(skipped && !back);
}

/* What the records alone say of the transaction @g[0..n): 0 abort, 1
 * commit, -1 undecided (COMMIT-BACKUPs only: their backups decide). */
static int decide_by_records(const struct rs_rec *g, size_t n,
                             const uint64_t *mark)
{
	bool cb = false;
	for (size_t i = 0; i < n; i++)
		if (g[i].h.type == REC_ABORT)
			return 0;
	for (size_t i = 0; i < n; i++) {
		if (g[i].h.type == REC_COMMIT_PRIMARY)
			return 1;
		if (g[i].h.cseq &&
		    g[i].h.cseq < mark[g[i].coord * MAX_LOOPS + g[i].th])
			return 1;
		cb |= g[i].h.type == REC_COMMIT_BACKUP;
	}
	return cb ? -1 : 0;
}

/* Decide the transaction of records @g[0..n) (one txid). */
static bool decide(farm_txm *m, const struct rs_rec *g, size_t n,
                   const uint64_t *mark, const struct farm_txrestart_lost *lost)
{
	int by_rec = decide_by_records(g, n, mark);
	if (by_rec >= 0)
		return by_rec;
	uint32_t regs[512];
	unsigned nreg = 0;
	for (size_t i = 0; i < n && !nreg; i++)
		if (g[i].h.type == REC_COMMIT_BACKUP || g[i].h.type == REC_LOCK)
			nreg = regs_of(&g[i], regs, 512);
	if (!nreg)
		return false;
	bool strict = FARM_FAULT_SWITCH(FARM_FP_RESTART_LOST_STRICT);
	/* The backups the coordinator sent its COMMIT-BACKUPs to: those of
	 * the configuration they carry, when a previous member's history
	 * has it. The ring this machine restarts in may list a backup that
	 * never had them (one added by a removal, a join or growth since),
	 * and would abort a commit its primary installed. */
	const struct farm_txrestart_conf *c = NULL;
	for (size_t i = 0; i < n && !c; i++)
		if (g[i].h.type == REC_COMMIT_BACKUP)
			c = conf_of(lost, g[i].h.cfg);
	if (FARM_FAULT_SWITCH(FARM_FP_RESTART_OWN_RING))
		c = NULL; /* testing: as before */
	for (unsigned k = 0; k < nreg; k++)
		if (!backups_agree(m, g, n, regs[k], lost, c, strict))
			return false;
	return true;
}

/* The local copy of @o (any role), or NULL. */
static uint8_t *local_obj(farm_txm *m, const struct rec_obj *o)
{
	enum farm_as_role role;
	farm_region *r =
	        farm_as_local_region(m->as, farm_gaddr_region(o->addr), &role);
	uint64_t off = farm_gaddr_offset(o->addr);
	if (!r || o->lines == 0 || o->lines > OBJ_MAX_LINES || off % 64 ||
	    off + 64ull * o->lines > farm_region_size(r))
		return NULL;
	return (uint8_t *)farm_region_base(r) + off;
}

/* Apply a committed record's images to the local copies that are older. */
static uint64_t apply(farm_txm *m, const struct rs_rec *r)
{
	const struct rec_obj *o = objs_of(r->rec);
	const uint8_t *img = r->rec + sizeof(struct rec_hdr) +
	                     (size_t)r->h.nobj * sizeof(struct rec_obj);
	const uint8_t *end = r->rec + r->h.len;
	uint64_t n = 0;
	for (unsigned i = 0; i < r->h.nobj; i++) {
		struct rec_obj x;
		memcpy(&x, &o[i], sizeof(x));
		if (img + 64ull * x.lines > end)
			break;
		uint8_t *p = local_obj(m, &x);
		uint64_t nv = (r->h.type == REC_LOCK ? x.version + OBJ_VSTEP
		                                     : x.version) &
		              ~OBJ_LOCK_MASK;
		_Atomic uint64_t *hv = (_Atomic uint64_t *)(void *)p;
		/* Acquire: pairs with the release of the version word by
		 * the install before (obj_install, or the store below). */
		uint64_t cur =
		        p ? atomic_load_explicit(hv, memory_order_acquire) : 0;
		if (p && !((cur & ~OBJ_LOCK_MASK) >= nv && cur)) {
			if (r->h.type == REC_LOCK) {
				/* The primary's image: the incarnation word
				 * is the allocator's, not in the image. */
				obj_install(p, x.lines, img, nv);
			} else {
				memcpy(p + 8, img + 8, 64ull * x.lines - 8);
				farm_store_fence();
				/* Release: pairs with the acquire loads of
				 * the version word (farm_objhdr_load_version,
				 * the load above). */
				atomic_store_explicit(hv, nv,
				                      memory_order_release);
			}
			n++;
		}
		img += 64ull * x.lines;
	}
	return n;
}

/*
 * A committed record's frees, after its transaction's images are in: at
 * every local copy (primary or backup) whose header still holds the freed
 * object allocated, in the incarnation the free ended, the header is freed
 * as the allocator's free leaves it (hdr_free, src/alloc/slab_int.h). The
 * primary's allocator frees a slot in its header and lists it; a kill
 * between the install and that free (or before the install, which the
 * replay above finished: a LOCK's image leaves the incarnation word as it
 * was) left the slot allocated with no record of it but this one, and the
 * rebuild by scan (src/node/restart_run.c, step 4) kept it: a leak, and at
 * a backup that applied the COMMIT-BACKUP's image (which carries the freed
 * word) a copy that disagrees with its primary. A later incarnation of the
 * slot (freed, then allocated again) holds a higher count and is left
 * alone. Only objects: an array's free also changes its run (retired, in
 * the block table) or is refused in a promoted region, and is not done
 * here. Returns the headers freed.
 */
static uint64_t free_committed(farm_txm *m, const struct rs_rec *r)
{
	const struct rec_obj *o = objs_of(r->rec);
	uint64_t n = 0;
	for (unsigned i = 0; i < r->h.nobj; i++) {
		struct rec_obj x;
		memcpy(&x, &o[i], sizeof(x));
		if ((x.flags & (OBJF_FREE | OBJF_ARRAY | OBJF_ELEM)) !=
		    OBJF_FREE)
			continue;
		struct farm_objhdr *p = (void *)local_obj(m, &x);
		/* The word the free left: a COMMIT-BACKUP carries it, a LOCK
		 * the word before. */
		uint64_t freed = r->h.type == REC_LOCK
		                         ? farm_incarn_freed(x.incarn)
		                         : x.incarn;
		if (!p || farm_incarn_allocated(freed))
			continue;
		uint64_t w = farm_objhdr_load_incarn(p);
		if (!farm_incarn_allocated(w) ||
		    farm_incarn_count(w) + 1 != farm_incarn_count(freed))
			continue;
		/* Release: pairs with the acquire loads of the incarnation
		 * (farm_objhdr_load_incarn: the rebuild's scan, readers).
		 * Nothing else runs on the copies during the restart. */
		atomic_store_explicit(&p->incarn, farm_incarn_freed(w),
		                      memory_order_release);
		/* Its lock too: a free kept whole for the adoption left it
		 * locked, and unlock_all passes free slots by (a slot
		 * allocated again with the lock bit would refuse every
		 * writer, and data recovery's copy would read it again
		 * forever). Release: pairs with the acquire loads of the
		 * version word (farm_objhdr_load_version). */
		uint64_t v = farm_objhdr_load_version(p);
		if (v & (OBJ_LOCK_MASK | FARM_OBJHDR_FREE_PENDING))
			atomic_store_explicit(
			        &p->version,
			        v & ~(OBJ_LOCK_MASK | FARM_OBJHDR_FREE_PENDING),
			        memory_order_release);
		n++;
	}
	return n;
}

/*
 * A stale lock cleared; and an object marked FARM_OBJHDR_FREE_PENDING
 * freed in its header first, as the allocator's free leaves it (hdr_free,
 * src/alloc/slab_int.h), for the rebuild by scan to list: its free committed
 * and was installed, then deferred while the adopter scanned its promoted
 * region (src/alloc/galloc_adopt.c), and the kill came before the adopter
 * freed it. Its records may all be truncated, so free_committed may not
 * have seen it; its backups applied the COMMIT-BACKUP's freed header, the
 * same word. The walk read the incarnation word allocated just before,
 * and nothing else runs on the copies during the restart. Also called
 * for a free slot that is locked or marked (farm_alloc_walk_region_locked):
 * a deferred free the kill cut short after the adopter freed its header
 * (farm_slab_free_unlock): its header is not freed again, only unlocked
 * (a slot allocated again locked would refuse every writer, and data
 * recovery's copy would read it again forever).
 */
static void unlock_one(void *ctx, struct farm_objhdr *obj, uint32_t lines)
{
	(void)lines;
	struct farm_txrestart_stats *st = ctx;
	_Atomic uint64_t *hv = (_Atomic uint64_t *)(void *)obj;
	uint64_t v = atomic_load_explicit(hv, memory_order_relaxed);
	if (v & FARM_OBJHDR_FREE_PENDING) {
		uint64_t w = farm_objhdr_load_incarn(obj);
		/* Release: pairs with the acquire loads of the incarnation
		 * (farm_objhdr_load_incarn: the rebuild's scan, readers). */
		if (farm_incarn_allocated(w)) {
			atomic_store_explicit(&obj->incarn,
			                      farm_incarn_freed(w),
			                      memory_order_release);
			st->freed++;
			st->marked++;
		}
	}
	if (v & (OBJ_LOCK_MASK | FARM_OBJHDR_FREE_PENDING)) {
		/* Release: pairs with the acquire loads of the version word
		 * (farm_objhdr_load_version, farm_txn_copy_apply). */
		atomic_store_explicit(
		        hv, v & ~(OBJ_LOCK_MASK | FARM_OBJHDR_FREE_PENDING),
		        memory_order_release);
		st->unlocked++;
	}
}

/* How many objects of the record @r this machine's copies hold at the
 * version the record's transaction writes (a LOCK's install, a
 * COMMIT-BACKUP's image): already applied here. */
static unsigned held_here(farm_txm *m, const struct rs_rec *r)
{
	const struct rec_obj *o = objs_of(r->rec);
	unsigned n = 0;
	for (unsigned i = 0; i < r->h.nobj; i++) {
		struct rec_obj x;
		memcpy(&x, &o[i], sizeof(x));
		uint8_t *p = local_obj(m, &x);
		uint64_t nv = (r->h.type == REC_LOCK ? x.version + OBJ_VSTEP
		                                     : x.version) &
		              ~OBJ_LOCK_MASK;
		/* Acquire: pairs with the release of the version word by
		 * the install that wrote it (obj_install, apply). */
		n += p && nv &&
		     (atomic_load_explicit((_Atomic uint64_t *)(void *)p,
		                           memory_order_acquire) &
		      ~OBJ_LOCK_MASK) == nv;
	}
	return n;
}

/*
 * An aborted transaction @g[0..n) whose images some copy here already
 * holds: a decision made before the kill that this one contradicts (a
 * recovery round's decision that was not logged, for want of room, or a
 * single-machine commit of an idle coordinator whose region's backups
 * changed since), so that copy keeps images the others never get. Said
 * with what the decision went by: the records' configuration, which
 * machines' logs hold which records, the ring's configuration
 * (src/recovery/README.md, "Limits"). A later transaction
 * may have written the same version after a real abort, so this is a
 * lead, not proof.
 */
static void say_contradicted(farm_txm *m, const struct rs_rec *g, size_t n)
{
	unsigned held = 0;
	for (size_t i = 0; i < n; i++)
		if (g[i].h.type == REC_LOCK || g[i].h.type == REC_COMMIT_BACKUP)
			held += held_here(m, &g[i]);
	if (!held)
		return;
	char who[160];
	size_t len = 0;
	who[0] = 0;
	for (size_t i = 0; i < n && len + 24 < sizeof(who); i++)
		len += (size_t)snprintf(who + len, sizeof(who) - len,
		                        " %s@%" PRIu32 "(cfg %" PRIu32 ")",
		                        g[i].h.type == REC_LOCK ? "LOCK"
		                        : g[i].h.type == REC_COMMIT_BACKUP
		                                ? "CB"
		                                : "other",
		                        g[i].owner, g[i].h.cfg);
	farm_warn("restart: transaction %#" PRIx64 " decided abort, but %u "
	          "of its objects here already hold the version it writes "
	          "(records:%s; ring of configuration %" PRIu64 ")",
	          g[0].h.txid, held, who, farm_as_config_id(m->as));
}

/* Decide each transaction of the sorted records @v[0..n) and replay the
 * committed ones' images (unless a test switch forbids it). */
static void decide_all(farm_txm *m, const struct rs_rec *v, size_t n,
                       const uint64_t *mark,
                       const struct farm_txrestart_lost *lost,
                       struct farm_txrestart_stats *st)
{
	bool replay = !FARM_FAULT_SWITCH(FARM_FP_RESTART_NO_REPLAY);
	bool free_slots = !FARM_FAULT_SWITCH(FARM_FP_RESTART_KEEP_FREED);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && v[j].h.txid == v[i].h.txid)
			j++;
		if (v[i].h.type == REC_TRUNC) { /* no transaction */
			i = j;
			continue;
		}
		st->txns++;
		bool commit = decide(m, &v[i], j - i, mark, lost);
		if (commit) {
			st->committed++;
			for (size_t k = i; k < j && replay; k++)
				if (v[k].h.type == REC_LOCK ||
				    v[k].h.type == REC_COMMIT_BACKUP)
					st->images += apply(m, &v[k]);
			for (size_t k = i; k < j && replay && free_slots; k++)
				if (v[k].h.type == REC_LOCK ||
				    v[k].h.type == REC_COMMIT_BACKUP)
					st->freed += free_committed(m, &v[k]);
		} else {
			st->aborted++;
			say_contradicted(m, &v[i], j - i);
		}
		i = j;
	}
}

/* Every lock left is stale (no transaction survived the restart): clear
 * them in the local @regions. */
static int unlock_all(farm_txm *m, const uint32_t *regions, const int *fds,
                      unsigned nregions, struct farm_txrestart_stats *st,
                      char *err, size_t errlen)
{
	for (unsigned i = 0; i < nregions; i++) {
		farm_region *r = farm_as_local_region(m->as, regions[i], NULL);
		if (!r)
			continue;
		/* By the file where there is one: the headers read by pread,
		 * only the locked or marked ones touched in the mapping (a
		 * page fault per header cost more than the pread: walk.c).
		 * Nothing else runs on the copies while the restart does. */
		int fd = fds ? fds[i] : -1;
		int w = fd >= 0 ? farm_alloc_walk_region_fd(
		                          farm_region_base(r),
		                          farm_region_size(r), regions[i], fd,
		                          unlock_one, unlock_one, st)
		                : farm_alloc_walk_region_locked(
		                          farm_region_base(r),
		                          farm_region_size(r), regions[i],
		                          unlock_one, unlock_one, st);
		if (w < 0) {
			if (err && errlen)
				snprintf(err, errlen,
				         "region %" PRIu32
				         ": damaged block table (%s)",
				         regions[i], farm_strerror(w));
			return w;
		}
		st->objects += (uint64_t)w;
	}
	return 0;
}

int farm_txm_restart_apply(farm_txm *m, const struct farm_txrestart_log *logs,
                           unsigned nlogs, const uint32_t *regions,
                           const int *fds, unsigned nregions,
                           const struct farm_txrestart_lost *lost,
                           struct farm_txrestart_stats *st, char *err,
                           size_t errlen)
{
	if (!m || (!logs && nlogs) || (!regions && nregions) || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	struct rs_rec *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	uint64_t *mark =
	        calloc((size_t)TXN_MAX_MACHINES * MAX_LOOPS, sizeof(*mark));
	if (!mark)
		return -ENOMEM;
	for (unsigned i = 0; i < nlogs && !rc; i++) {
		rc = super_check(logs[i].base, logs[i].len, logs[i].what, err,
		                 errlen);
		if (!rc)
			rc = collect(logs[i].base, logs[i].coords, &v, &n, &cap,
			             mark, logs[i].what, err, errlen);
	}
	if (!rc) {
		st->records = n;
		if (n) /* v is NULL with no record */
			qsort(v, n, sizeof(*v), cmp_txid);
		decide_all(m, v, n, mark, lost, st);
		rc = unlock_all(m, regions, fds, nregions, st, err, errlen);
		if (!rc && st->marked)
			farm_warn("restart: %" PRIu64 " committed frees "
			          "deferred while the allocator scanned their "
			          "region were not done at the kill: their "
			          "slots freed by their marks",
			          st->marked);
	}
	free(v);
	free(mark);
	return rc;
}

const char *farm_txm_log_file(const farm_txm *m)
{
	return m && m->logmem ? farm_mem_file(m->logmem) : "";
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

int farm_txlog_testing_marks(const uint8_t *base, size_t len, uint64_t *mark)
{
	if (!base || !mark)
		return -EINVAL;
	memset(mark, 0, (size_t)TXN_MAX_MACHINES * MAX_LOOPS * sizeof(*mark));
	int rc = super_check(base, len, "test log", NULL, 0);
	struct rs_rec *v = NULL;
	size_t n = 0, cap = 0;
	if (!rc)
		rc = collect(base, NULL, &v, &n, &cap, mark, "test log", NULL,
		             0);
	free(v);
	return rc;
}

int farm_txlog_testing_format(uint8_t *base, size_t len, uint32_t layout,
                              uint64_t ring, uint64_t hdr_area)
{
	if (!base || hdr_area < sizeof(struct log_super) || ring < 64 ||
	    hdr_area + ring > len)
		return -EINVAL;
	struct log_super sb = {.magic = LOG_SUPER_MAGIC,
	                       .layout = layout ? layout : LOG_LAYOUT,
	                       .machine = 0,
	                       .M = 1,
	                       .T = 1,
	                       .R = ring,
	                       .hdr_area = hdr_area,
	                       .total = len};
	memcpy(base, &sb, sizeof(sb));
	return 0;
}

long farm_txlog_testing_record(uint8_t *base, size_t len, uint64_t off,
                               int type, uint32_t rlen, uint64_t lw, bool torn)
{
	struct log_super sb;
	if (!base || len < sizeof(sb))
		return -EINVAL;
	memcpy(&sb, base, sizeof(sb));
	bool pad = type == FARM_TXN_TESTING_PAD;
	if ((!pad && type != FARM_TXN_TESTING_TRUNCATE) || rlen < 64 ||
	    rlen % 64 || off % 64 || off + rlen > sb.R ||
	    sb.hdr_area + sb.R > len)
		return -EINVAL;
	uint8_t *p = base + sb.hdr_area + off;
	struct rec_hdr h = {
	        .len = rlen, .type = pad ? REC_PAD : REC_TRUNC, .lw = lw};
	memcpy(p, &h, sizeof(h));
	/* A pad's checksum and trailer end its first line (log.c). */
	uint64_t so = pad ? 48 : (uint64_t)rlen - 16;
	uint64_t sum = rec_sum(p, so);
	memcpy(p + so, &sum, 8);
	uint64_t tr = off + 1; /* first lap: its position */
	if (torn)
		tr = ~tr;
	memcpy(p + so + 8, &tr, 8);
	return (long)(sb.hdr_area + off);
}
