/*
 * Whole-cluster restart from durable memory (restart.h; FaRM SOSP'15
 * section 3: memory and logs survive a power loss). On the shm fabric a
 * machine's region copies and its transaction logs are files in its data
 * directory, mapped with libpmem; this file makes a directory that a
 * killed incarnation left behind the start of the next one.
 *
 * The manifest (farm.manifest, written with write-to-temporary, fsync and
 * rename) says what the directory holds: the cluster (its ZooKeeper root)
 * and machine, the region size, the log file, every local region copy (id
 * and file) and the last configuration applied (id and members). It is
 * rewritten when a copy is gained (before the copy can be written to:
 * farm_as_on_local), when one is dropped, and when a view is applied; its
 * trailer (magic, length, checksum) tells a whole manifest from a torn
 * one.
 *
 * Start (farm_restart_open, before the fabric opens, which would remove
 * a previous incarnation's mem-*.region files):
 *   - no manifest and no region files: a fresh machine;
 *   - region files but no manifest, a manifest that is torn, of another
 *     layout, or whose files are missing, of the wrong size or with a bad
 *     magic (a region's allocator header, the log's superblock), a log
 *     record whose trailer says it is whole but whose checksum does not
 *     match (farm_txlog_check_fd): refused with the file and offset,
 *     nothing deleted (FARM_ECORRUPT);
 *   - another machine's or cluster's manifest: refused (-EXDEV);
 *   - intact: every listed file <f> is renamed <f>.old (a name the fabric
 *     leaves alone), and the machine restarts.
 *
 * Restart (the node joins as usual, with the previous log published to
 * peers: registered for remote reads, its descriptor in the card's rlog=
 * field):
 *   1. Views whose id is not above the manifest's are ignored: they are
 *      the previous incarnation's, with its dead cards. Views with other
 *      members (the cluster coming up machine by machine) are applied as
 *      usual; nothing runs on them (the application waits for every
 *      member, farm_node_wait_members, which returns only after step 6).
 *   2. At the first view with the manifest's members (the mapping of
 *      regions to machines is a function of the members, so every copy
 *      has its old role): each region file is mapped again where it lies
 *      (farm_region_adopt: the fabric links it under a new name, no copy)
 *      and adopted as a backup copy (farm_as_adopt).
 *      Or with the manifest's members but those the view lists as lost:
 *      machines that did not come back within restart_wait_ms of the last
 *      view change (a damaged directory is refused, never used) and were
 *      given up (node.c, farm_membership_forsake; at most replicas - 2,
 *      so every region keeps a backup with its log). A departure keeps
 *      the survivors' order in every replica list (ring.h), so every copy
 *      still has its old role or is the first surviving backup of a
 *      region whose primary was lost: promoted in step 4. The lost logs
 *      are gone: step 3 reads the lost coordinators' rings from the
 *      others' logs, and the decision counts the backups that came back
 *      in the previous placement (farm_rst_old_ring). Data recovery then makes
 *      the missing copies where machines are left to hold them.
 *   3. Every member's previous log is READ (one-sided): its headers
 *      first, then the rings of the previous members and of every
 *      removed coordinator some header marks pending (a recovery round
 *      had not emptied its log everywhere), and the
 *      transaction layer decides and applies them (src/txn/restart.c:
 *      the same logs on every machine give the same decisions; committed
 *      images are applied, every stale lock cleared).
 *   4. The copies whose primary is this machine are promoted, and the
 *      allocator rebuilds its state from their block tables.
 *   5. Barrier: this machine marks its published log done and waits until
 *      every member's is; until then nobody commits, so no new record can
 *      meet a copy that is not yet adopted.
 *   6. The new manifest is written (new files, new log) and the .old files
 *      are deleted. The view is then applied as usual.
 * A restart that fails leaves the .old names and the old manifest: the
 * machine says why and can be started again (the replay is idempotent:
 * images go only where they are newer, and every lock is cleared).
 *
 * History (restart_hist.c): farm.history keeps the placements of the last
 * HIST_DEPTH configurations this machine applied, written after each view
 * is applied (a kill between a view and its write leaves that one out;
 * another member's history may have it). A restarting machine loads it at
 * open and publishes it after its previous log; step 3 takes every
 * member's, and the decision judges a transaction known only by its
 * COMMIT-BACKUPs by the backups of the configuration its records carry.
 * Every recovery round truncates what the coordinators finished
 * (src/txn/log.c, farm_txn_truncate_all), so records older than the
 * history reach back are those of commits in flight that long.
 *
 * Clean shutdown (farm_node_shutdown, farm_restart_keep): after the loops
 * stopped, every listed file gets a second name <f>.old (a hard link) and
 * the manifest is marked clean, so closing (which unlinks <f>) keeps the
 * data; the next start restarts from it without copying logs of
 * transactions in flight (there are none).
 *
 * Known window: between another machine's step 6 and this one's, that
 * machine may commit into this machine's copies (the same files: the .old
 * names are links); if every machine is killed again inside that window,
 * this machine restarts with the previous logs, not the new ones, so a
 * commit of that window may be half-applied at its backups. The window is
 * one manifest write.
 */
#include "node/restart_int.h"

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/mem.h"

/* ---- publishing the previous log ------------------------------------ */

/* @len bytes of @fd at @off into @dst, a range of the published memory
 * (sparse), backed first in one call rather than a fault a page (a fault
 * cost 25-50 us on the development host, a guest whose page tables are
 * shadowed). 0; -ENOSPC (the memory behind it full); -EIO. */
static int read_at(int fd, uint8_t *dst, uint64_t off, uint64_t len)
{
	int rc = farm_mem_back(dst, len);
	if (rc)
		return rc;
	uint64_t got = 0;
	while (got < len) {
		ssize_t r = pread(fd, dst + got, len - got, (off_t)(off + got));
		if (r <= 0)
			return -EIO;
		got += (uint64_t)r;
	}
	return 0;
}

/* The memory published to peers: the header, the previous log (@ll
 * bytes) and the configuration history loaded at open (*@hl bytes, copied
 * in after the log). Sparse, each range backed where it is written: the
 * log has a ring for every possible machine id, nearly all never read in
 * (zero), and allocating it whole took a machine hundreds of ms at open
 * (256 MiB at 4 MiB rings). */
static int alloc_published(struct farm_restart *rs, farm_fabric *fab, size_t ll,
                           size_t *hl)
{
	pthread_mutex_lock(&rs->lock);
	*hl = rs->hist_len;
	int rc = farm_mem_alloc(fab, RLOG_HDR + ll + *hl, FARM_MEM_SPARSE,
	                        &rs->rmem);
	if (!rc)
		rc = farm_mem_back(farm_mem_addr(rs->rmem), RLOG_HDR);
	if (!rc && *hl)
		rc = farm_mem_back((uint8_t *)farm_mem_addr(rs->rmem) +
		                           RLOG_HDR + ll,
		                   *hl);
	if (!rc && *hl) {
		memcpy((uint8_t *)farm_mem_addr(rs->rmem) + RLOG_HDR + ll,
		       rs->hist, *hl);
		rs->hist_pub = *hl;
	}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

/* The previous log (@ll bytes of @fd) into @dst: the superblock and
 * headers, then only the rings of the previous members' coordinators, and
 * of removed ones whose records the headers say may be left
 * (farm_txlog_pending): a log file has rings for every possible machine
 * id (ids x threads x ring bytes), nearly all empty, and the memory is
 * zero already. Unreadable superblock: all of it. The coordinators whose
 * rings were read in go to @rings (all, read whole). */
static int read_published(const struct farm_restart *rs, int fd, uint8_t *dst,
                          size_t ll, uint64_t *rings)
{
	struct {
		uint64_t magic;
		uint32_t layout, machine, M, T;
		uint64_t R, hdr_area, total;
	} sb = {0};
	bool whole = pread(fd, &sb, sizeof(sb), 0) != (ssize_t)sizeof(sb) ||
	             !sb.M || sb.M > TXN_MAX_MACHINES || !sb.T || sb.T > 64 ||
	             !sb.R || sb.total != ll || sb.hdr_area > ll ||
	             sb.hdr_area + (uint64_t)sb.M * sb.T * sb.R != ll;
	if (whole) {
		memset(rings, 0xff, TXN_COORD_WORDS * sizeof(*rings));
		return read_at(fd, dst, 0, ll);
	}
	int rc = read_at(fd, dst, 0, sb.hdr_area);
	memset(rings, 0, TXN_COORD_WORDS * sizeof(*rings));
	for (uint32_t i = 0; i < rs->old.nmembers; i++)
		txn_coord_put(rings, rs->old.members[i], true);
	if (!rc && !FARM_FAULT_SWITCH(FARM_FP_RESTART_NO_PENDING))
		(void)farm_txlog_pending(dst, ll, rings);
	for (uint32_t c = 0; !rc && c < sb.M; c++) {
		if (!txn_coord_in(rings, c))
			continue;
		uint64_t off = sb.hdr_area + (uint64_t)c * sb.T * sb.R;
		rc = read_at(fd, dst + off, off, (uint64_t)sb.T * sb.R);
	}
	return rc;
}

int farm_restart_attach(struct farm_restart *rs, farm_fabric *fab, farm_as *as,
                        farm_txm *txm, struct farm_galloc *ga)
{
	if (!rs)
		return 0;
	rs->fab = fab;
	rs->as = as;
	rs->txm = txm;
	rs->ga = ga;
	farm_as_on_local(as, farm_rst_on_local, rs);
	if (!rs->pending) {
		pthread_mutex_lock(&rs->lock);
		rs->writable = true;
		int rc = farm_txm_log_file(txm)[0]
		                 ? farm_rst_man_write(rs, false)
		                 : 0;
		pthread_mutex_unlock(&rs->lock);
		return rc;
	}
	char path[FARM_CONFIG_STR + 80];
	farm_rst_path(rs, rs->old.log_file, ".old", path, sizeof(path));
	size_t ll = (size_t)rs->old.log_bytes, hl = 0;
	int rc = alloc_published(rs, fab, ll, &hl);
	if (rc)
		return rc;
	uint8_t *base = farm_mem_addr(rs->rmem);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct rlog_hdr *h = (struct rlog_hdr *)(void *)base;
	rc = read_published(rs, fd, base + RLOG_HDR, ll, h->rings);
	close(fd);
	if (rc)
		return rc;
	h->magic = RLOG_MAGIC;
	h->machine = rs->me;
	h->log_bytes = ll;
	h->hist_bytes = hl;
	atomic_store_explicit(&h->done, 0, memory_order_relaxed);
	return farm_mr_reg(fab, base, RLOG_HDR + ll + hl,
	                   FARM_ACCESS_LOCAL | FARM_ACCESS_REMOTE_READ,
	                   &rs->rmr);
}

void farm_restart_card(const struct farm_restart *rs, char *buf, size_t len)
{
	if (!rs || !rs->pending || !rs->rmr)
		return;
	farm_mr_desc d = farm_mr_describe(rs->rmr);
	/* The header and the log: the history beyond them is found through
	 * the header (struct rlog_hdr). */
	d.len = RLOG_HDR + rs->old.log_bytes;
	size_t n = strlen(buf);
	snprintf(buf + n, len - n, " rlog=%" PRIx64 ":%" PRIx64 ":%" PRIx64,
	         d.key, d.addr, d.len);
}

const char *farm_restart_card_field(const char *card)
{
	const char *t = NULL;
	for (const char *x = card; x && (x = strstr(x, " rlog=")); x++)
		t = x;
	return t;
}

bool farm_restart_pending(const struct farm_restart *rs)
{
	return rs && rs->pending;
}

uint64_t farm_restart_config(const struct farm_restart *rs)
{
	if (!farm_restart_pending(rs))
		return 0;
	return rs->old.config_id ? rs->old.config_id : 1;
}

/* Is @v the restart's view: the previous members, but those it lists as
 * lost (given up, farm_membership_forsake)? Those into @lost. */
bool farm_rst_set(const struct farm_restart *rs, const struct farm_view *v,
                  uint32_t *lost, unsigned *nlost)
{
	unsigned back = 0;
	*nlost = 0;
	for (unsigned i = 0; i < rs->old.nmembers && i < FARM_VIEW_MAX; i++) {
		uint32_t id = rs->old.members[i];
		if (farm_view_find(v, id))
			back++;
		else if (farm_ids_have(v->lost, v->nlost, id))
			lost[(*nlost)++] = id;
		else
			return false;
	}
	return back == v->n;
}

unsigned farm_rst_most_lost(const struct farm_restart *rs)
{
	unsigned r = rs->ring.replicas ? rs->ring.replicas
	                               : FARM_RING_DEFAULT_REPLICAS;
	if (r > rs->old.nmembers)
		r = rs->old.nmembers;
	return r > 2 ? r - 2 : 0;
}

unsigned farm_restart_missing(const struct farm_restart *rs,
                              const struct farm_view *v, uint32_t *out,
                              unsigned *most)
{
	*most = 0;
	if (!rs || !rs->pending || !v)
		return 0;
	unsigned n = 0;
	for (unsigned i = 0; i < rs->old.nmembers && i < FARM_VIEW_MAX; i++)
		if (!farm_view_find(v, rs->old.members[i]))
			out[n++] = rs->old.members[i];
	*most = farm_rst_most_lost(rs);
	return n;
}

/* The previous configuration's placement: @v's, with the @lost machines
 * members again (where departed, with their domains). */
int farm_rst_old_ring(const struct farm_restart *rs, const struct farm_view *v,
                      const uint32_t *lost, unsigned nlost, farm_ring **out)
{
	uint32_t ids[FARM_VIEW_MAX];
	struct farm_ring_machine placed[3 * FARM_VIEW_MAX];
	for (unsigned i = 0; i < v->n; i++)
		ids[i] = v->members[i].id;
	unsigned np = farm_view_placement(v, ids, v->n, placed);
	for (unsigned i = 0; i < nlost; i++) {
		uint32_t late = 0;
		for (unsigned q = 0; q < v->nlate && !late; q++)
			if (v->late[q] == lost[i])
				late = q + 1;
		unsigned k = 0;
		while (k < np && placed[k].id != lost[i])
			k++;
		if (k == np)
			placed[np++] =
			        (struct farm_ring_machine){.id = lost[i]};
		/* Walked though its id is late: a shadow (membership.h,
		 * farm_departed), which its late member stood for. */
		if (placed[k].departed && !placed[k].late && late)
			placed[k].shadow = placed[k].domain;
		placed[k].departed = false;
		placed[k].late = late;
	}
	int rc = farm_ring_build_domains(placed, np, &rs->ring, out);
	/* The manager's pins are part of the placement (ring.h). */
	if (!rc && (rc = farm_ring_set_pins(*out, v->pins, v->npins))) {
		farm_ring_free(*out);
		*out = NULL;
	}
	return rc;
}

int farm_restart_view(struct farm_restart *rs, const struct farm_view *v)
{
	if (!rs || !rs->pending)
		return 0;
	/* Static membership has one configuration (id 1) and no stale
	 * one to ignore. */
	if (strcmp(rs->cluster, "static") != 0 &&
	    v->config_id <= rs->old.config_id) {
		farm_info("restart: view %" PRIu64
		          " ignored: the previous incarnation's",
		          v->config_id);
		return 1;
	}
	/* A member without a previous log published is an incarnation that
	 * has not restarted (its ephemeral znode outlives it until its
	 * session expires): its card is dead. */
	for (unsigned i = 0; i < v->n; i++)
		if (v->members[i].id != rs->me &&
		    !farm_restart_card_field(v->members[i].endpoint)) {
			farm_info("restart: view %" PRIu64
			          " ignored: machine %" PRIu32
			          " has not restarted yet",
			          v->config_id, v->members[i].id);
			return 1;
		}
	/* A card with a previous log may still be dead: an earlier restart's
	 * incarnation, in a configuration its CM wrote while the cluster
	 * shut down. Its log must answer a READ. */
	for (unsigned i = 0; i < v->n; i++)
		if (v->members[i].id != rs->me &&
		    !farm_rst_peer_live(rs, &v->members[i])) {
			farm_info("restart: view %" PRIu64
			          " ignored: machine %" PRIu32
			          "'s card is a dead incarnation's",
			          v->config_id, v->members[i].id);
			return 1;
		}
	return 0;
}

void farm_restart_applied(struct farm_restart *rs, const struct farm_view *v)
{
	if (!rs)
		return;
	pthread_mutex_lock(&rs->lock);
	if (!rs->frozen) {
		rs->config_id = v->config_id;
		rs->nmembers = v->n;
		for (unsigned i = 0; i < v->n; i++)
			rs->members[i] = v->members[i].id;
		if (rs->writable)
			farm_rst_man_write(rs, false);
		farm_rst_hist_add(rs, v);
	}
	pthread_mutex_unlock(&rs->lock);
}

void farm_restart_freeze(struct farm_restart *rs)
{
	if (!rs)
		return;
	pthread_mutex_lock(&rs->lock);
	rs->frozen = true;
	pthread_mutex_unlock(&rs->lock);
}

int farm_restart_keep(struct farm_restart *rs)
{
	if (!rs || !rs->writable)
		return rs ? -EAGAIN : -EINVAL;
	pthread_mutex_lock(&rs->lock);
	int rc = 0;
	for (unsigned i = 0; i <= rs->nregs && !rc; i++) {
		const char *name = i < rs->nregs ? rs->regs[i].file
		                                 : farm_txm_log_file(rs->txm);
		char a[FARM_CONFIG_STR + 80], b[FARM_CONFIG_STR + 80];
		farm_rst_path(rs, name, "", a, sizeof(a));
		farm_rst_path(rs, name, ".old", b, sizeof(b));
		unlink(b);
		if (link(a, b) != 0)
			rc = -errno;
	}
	if (!rc)
		rc = farm_rst_man_write(rs, true);
	pthread_mutex_unlock(&rs->lock);
	if (rc)
		farm_err("restart: clean shutdown of %s incomplete: %s",
		         rs->dir, farm_strerror(rc));
	return rc;
}

void farm_restart_discard(struct farm_restart *rs)
{
	if (!rs || !rs->writable)
		return;
	/* A plain close: the fabric removes the files, so the manifest
	 * naming them goes first. */
	char path[FARM_CONFIG_STR + 32];
	farm_rst_path(rs, FARM_MANIFEST_FILE, "", path, sizeof(path));
	pthread_mutex_lock(&rs->lock);
	rs->writable = false;
	if (unlink(path) != 0 && errno != ENOENT)
		farm_warn("restart: cannot remove %s: %s", path,
		          farm_strerror(-errno));
	/* The configuration history is the manifest's companion: without
	 * it the data directory holds nothing of ours, and the fabric can
	 * remove it. */
	farm_rst_path(rs, FARM_HISTORY_FILE, "", path, sizeof(path));
	if (unlink(path) != 0 && errno != ENOENT)
		farm_warn("restart: cannot remove %s: %s", path,
		          farm_strerror(-errno));
	pthread_mutex_unlock(&rs->lock);
}

void farm_restart_stats(const struct farm_restart *rs,
                        struct farm_restart_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (rs)
		*out = rs->st;
}

int farm_restart_keep_blob(struct farm_restart *rs, const char *name,
                           const void *data, size_t len)
{
	if (!name || !name[0] || strlen(name) >= FARM_RESTART_KEPT_NAME ||
	    (len && !data) || len > FARM_RESTART_KEPT_MAX)
		return -EINVAL;
	if (!rs)
		return -ENOTSUP; /* no durable directory (not shm) */
	pthread_mutex_lock(&rs->lock);
	unsigned i = 0;
	while (i < rs->nkept && strcmp(rs->kept[i].name, name))
		i++;
	int rc = 0;
	if (i == FARM_RESTART_KEPT_N) {
		rc = -ENOSPC;
	} else {
		struct man_kept *k = &rs->kept[i];
		memset(k, 0, sizeof(*k));
		snprintf(k->name, sizeof(k->name), "%s", name);
		k->len = (uint32_t)len;
		if (len)
			memcpy(k->data, data, len);
		if (i == rs->nkept)
			rs->nkept++;
		/* Before the restart's manifest, the next one carries it. */
		if (rs->writable && !rs->frozen)
			rc = farm_rst_man_write(rs, false);
	}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

long farm_restart_kept_blob(struct farm_restart *rs, const char *name,
                            void *buf, size_t cap)
{
	if (!name || (cap && !buf))
		return -EINVAL;
	if (!rs)
		return -ENOENT;
	pthread_mutex_lock(&rs->lock);
	long rc = -ENOENT;
	for (unsigned i = 0; i < rs->nkept; i++)
		if (!strcmp(rs->kept[i].name, name)) {
			rc = rs->kept[i].len;
			if (cap)
				memcpy(buf, rs->kept[i].data,
				       FARM_MIN(cap, (size_t)rs->kept[i].len));
			break;
		}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

void farm_restart_close(struct farm_restart *rs)
{
	if (!rs)
		return;
	if (rs->rmr)
		farm_mr_dereg(rs->rmr);
	if (rs->rmem)
		farm_mem_free(rs->rmem);
	free(rs->old_regs);
	free(rs->regs);
	free(rs->hist);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}
