/*
 * The restart itself (restart.c's opening comment, steps 2 to 6):
 * farm_restart_run at the first view with the previous members.
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

/* ---- the restart ------------------------------------------------------ */

/* One member's previous log: READ from it whole (ours: copied). */
struct peer_log {
	uint32_t id;
	farm_ep *ep;
	farm_mr_desc d;
	uint8_t *buf;
	uint8_t *alloc; /* what buf points into (peers') */
	farm_mr *mr;
	size_t len;
	char what[96];
	uint8_t *hist; /* its configuration history (peers': READ) */
	size_t hist_len;
};

static int read_sync(farm_cq *cq, farm_ep *ep, farm_mr *lmr, void *dst,
                     uint64_t raddr, uint64_t rkey, uint32_t len)
{
	farm_wr wr = {.opcode = FARM_WR_READ,
	              .flags = FARM_WR_SIGNALED,
	              .len = len,
	              .local = dst,
	              .lmr = lmr,
	              .raddr = raddr,
	              .rkey = rkey};
	int rc = farm_ep_post(ep, &wr, NULL);
	if (rc)
		return rc;
	uint64_t dl = farm_now_ns() + 10000000000ull;
	for (;;) {
		farm_wc wc;
		int n = farm_cq_poll(cq, 1, &wc);
		if (n < 0)
			return n;
		if (n == 1)
			return wc.status;
		if (farm_now_ns() > dl)
			return -ETIMEDOUT;
		sched_yield();
	}
}

/* READ [@off, @off + @len) of @p's published log into the same place of
 * its buffer, in chunks. */
static int read_range(farm_cq *cq, struct peer_log *p, uint64_t off,
                      uint64_t len)
{
	/* The buffer's pages mapped in one call, not one fault each as the
	 * READ lands (a fault cost 25-50 us on the development host, a
	 * guest whose page tables are shadowed); only pages wholly inside
	 * the range, so nothing outside the buffer. An error leaves the
	 * faults to do it. */
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)(p->buf + off) + pg - 1) & ~(pg - 1);
	uintptr_t e = (uintptr_t)(p->buf + off + len) & ~(pg - 1);
	if (e > a)
		(void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
	int rc = 0;
	for (uint64_t o = off; !rc && o < off + len; o += READ_CHUNK) {
		uint32_t n =
		        (uint32_t)FARM_MIN((uint64_t)READ_CHUNK, off + len - o);
		rc = read_sync(cq, p->ep, p->mr, p->buf + o, p->d.addr + o,
		               p->d.key, n);
	}
	return rc;
}

/* The superblock fields of a published log at @buf (after its header). */
struct rlog_sb {
	uint64_t magic;
	uint32_t layout, machine, M, T;
	uint64_t R, hdr_area, total;
};

/* Does @p's superblock add up (its rings where it says)? */
static bool rlog_sb_ok(const struct peer_log *p, struct rlog_sb *sb)
{
	if (p->d.len < RLOG_HDR + sizeof(*sb))
		return false;
	memcpy(sb, p->buf + RLOG_HDR, sizeof(*sb));
	return sb->M && sb->M <= TXN_MAX_MACHINES && sb->T && sb->T <= 64 &&
	       sb->R && sb->total == p->d.len - RLOG_HDR &&
	       sb->hdr_area + (uint64_t)sb->M * sb->T * sb->R == sb->total;
}

/* A peer's previous log, first part: the header, the superblock and the
 * logs' headers (which say whose rings to read: farm_txlog_pending). A
 * superblock that does not add up is read whole, for farm_txlog_check
 * to name. */
static int read_log_head(farm_cq *cq, struct peer_log *p)
{
	uint64_t head = FARM_MIN(p->d.len, (uint64_t)RLOG_HDR + 4096);
	int rc = read_range(cq, p, 0, head);
	if (rc)
		return rc;
	struct rlog_sb sb;
	if (!rlog_sb_ok(p, &sb))
		return read_range(cq, p, 0, p->d.len);
	return read_range(cq, p, RLOG_HDR, sb.hdr_area);
}

/* Then only the rings of the coordinators @coords (a log file has rings
 * for every possible machine id, nearly all of them empty; the buffer is
 * zeroed, and a zero ring holds no record), of those the peer read in
 * (struct rlog_hdr: the others are zero there, and unbacked). */
static int read_log_rings(farm_cq *cq, struct peer_log *p,
                          const uint64_t *coords)
{
	struct rlog_sb sb;
	if (!rlog_sb_ok(p, &sb))
		return 0; /* read whole */
	struct rlog_hdr h;
	memcpy(&h, p->buf, sizeof(h));
	int rc = 0;
	for (uint32_t c = 0; !rc && c < sb.M; c++) {
		if (!txn_coord_in(coords, c) || !txn_coord_in(h.rings, c))
			continue;
		rc = read_range(cq, p,
		                RLOG_HDR + sb.hdr_area +
		                        (uint64_t)c * sb.T * sb.R,
		                (uint64_t)sb.T * sb.R);
	}
	return rc;
}

static int peer_desc(const struct farm_member *m, char *addr, size_t alen,
                     farm_mr_desc *d)
{
	farm_mr_desc md, ld;
	int rc = farm_node_card_parse(m->endpoint, addr, alen, &md, &ld);
	if (rc)
		return rc;
	const char *f = farm_restart_card_field(m->endpoint);
	uint64_t k, a, l;
	if (!f ||
	    sscanf(f + 6, "%" SCNx64 ":%" SCNx64 ":%" SCNx64, &k, &a, &l) != 3)
		return -ENOENT;
	*d = (farm_mr_desc){.key = k,
	                    .addr = a,
	                    .len = l,
	                    .machine = m->id,
	                    .access = FARM_ACCESS_REMOTE_READ};
	return 0;
}

/* A new region with the contents of @path (a fabric without files). */
static int copy_region(struct farm_restart *rs, const char *path, uint64_t size,
                       farm_region **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *src = fd >= 0 ? mmap(NULL, size, PROT_READ,
	                           MAP_SHARED | MAP_POPULATE, fd, 0)
	                    : MAP_FAILED;
	int rc = src == MAP_FAILED ? -errno : 0;
	if (fd >= 0)
		close(fd);
	if (!rc && !(rc = farm_region_create(rs->fab, size, out)))
		memcpy(farm_region_base(*out), src, size);
	if (src != MAP_FAILED)
		munmap(src, size);
	return rc;
}

bool farm_rst_peer_live(struct farm_restart *rs, const struct farm_member *m)
{
	char addr[FARM_ENDPOINT_MAX];
	farm_mr_desc d;
	if (peer_desc(m, addr, sizeof(addr), &d) || d.len < RLOG_HDR)
		return false;
	farm_cq *cq = NULL;
	farm_ep *ep = NULL;
	farm_mr *mr = NULL;
	struct rlog_hdr h = {0};
	int rc = farm_cq_create(rs->fab, 4, 0, &cq);
	if (!rc)
		rc = farm_mr_reg(rs->fab, &h, sizeof(h), FARM_ACCESS_LOCAL,
		                 &mr);
	if (!rc)
		rc = farm_ep_connect(rs->fab, cq, m->id, addr, NULL, &ep);
	if (!rc)
		rc = read_sync(cq, ep, mr, &h, d.addr, d.key, sizeof(h));
	if (ep)
		farm_ep_destroy(ep);
	if (mr)
		farm_mr_dereg(mr);
	if (cq && farm_cq_destroy(cq))
		farm_warn("restart: completion queue not destroyed");
	return !rc && h.magic == RLOG_MAGIC && h.machine == m->id;
}

static void set_done(struct farm_restart *rs)
{
	struct rlog_hdr *h = farm_mem_addr(rs->rmem);
	/* Pairs with peers' READ of the word in the barrier. */
	atomic_store_explicit(&h->done, 1, memory_order_release);
}

/* One restart's state, handed from phase to phase (farm_restart_run). */
struct run {
	struct farm_restart *rs;
	const struct farm_view *v;
	uint32_t lost[FARM_VIEW_MAX]; /* previous members given up */
	unsigned nlost;
	char err[512];
	farm_ring *oring; /* the previous placement (with lost) */
	uint32_t *ids;    /* the regions adopted */
	int *fds;         /* each one's file, open to read (-1: none) */
	unsigned nadopt;
	struct peer_log *pl; /* every member's previous log */
	struct farm_txrestart_log *logs;
	unsigned nl;
	farm_cq *cq;
	uint64_t coords[TXN_COORD_WORDS]; /* coordinators whose records count */
	uint64_t rcoords[TXN_COORD_WORDS]; /* ... whose rings are read */
	bool any_coords;                   /* coords not empty (empty: all) */
	uint64_t t0, t1, tl, ta, t2;       /* phase boundaries (stats) */
	/* The configurations the members' histories place (restart_hist.c):
	 * each one's ring, members and incarnations. */
	struct farm_txrestart_conf *confs;
	unsigned nconfs;
	uint32_t now_ids[FARM_VIEW_MAX], now_inc[FARM_VIEW_MAX];
};

/* Machines given up: their logs are gone, and recovery's rule for a
 * removed backup decides (src/txn/restart.c). Only while every region
 * keeps a backup that came back. */
static int run_lost(struct run *r)
{
	struct farm_restart *rs = r->rs;
	int rc = 0;
	if (r->nlost > farm_rst_most_lost(rs)) {
		snprintf(r->err, sizeof(r->err),
		         "%u previous members are lost, more than the %u "
		         "the replicas allow",
		         r->nlost, farm_rst_most_lost(rs));
		return FARM_EUNAVAILABLE;
	}
	if (r->nlost &&
	    (rc = farm_rst_old_ring(rs, r->v, r->lost, r->nlost, &r->oring))) {
		snprintf(r->err, sizeof(r->err), "previous placement: %s",
		         farm_strerror(rc));
		return rc;
	}
	rs->st.lost = r->nlost;
	for (unsigned i = 0; i < r->nlost; i++)
		farm_warn("restart: machine %" PRIu32 " restarts without "
		          "machine %" PRIu32 " (given up: its directory did "
		          "not come back); its regions are served from "
		          "their other replicas",
		          rs->me, r->lost[i]);
	return 0;
}

/* 2. Adopt: every region from its set-aside file. */
static int run_adopt(struct run *r)
{
	struct farm_restart *rs = r->rs;
	int rc = 0;
	for (uint32_t i = 0; i < rs->old.nregions && !rc; i++) {
		const struct man_region *mr = &rs->old_regs[i];
		char path[FARM_CONFIG_STR + 80];
		farm_rst_path(rs, mr->file, ".old", path, sizeof(path));
		farm_region *reg = NULL;
		/* Mapped again where it lies (a second name for the file,
		 * no copy); copied only where the fabric cannot. */
		rc = farm_region_adopt(rs->fab, path, mr->size, &reg);
		bool mapped = rc == 0; /* the file itself, shared */
		if (rc == -ENOTSUP)
			rc = copy_region(rs, path, mr->size, &reg);
		if (!rc) {
			/* No MADV_POPULATE_*: populating 512 MiB took 0.9-2.4
			 * s on the development host, more than the faults
			 * of the walks below (one per object header, before
			 * they read by the file). */
			rc = farm_as_adopt(rs->as, mr->id, reg);
			if (rc)
				farm_region_destroy(reg);
		}
		if (rc) {
			snprintf(r->err, sizeof(r->err),
			         "region %" PRIu32 ": %s", mr->id,
			         farm_strerror(rc));
			break;
		}
		farm_rst_on_local(rs, mr->id, reg, true); /* not written:
		                                             pending */
		/* The walks read the copies by the file (pread), not by the
		 * mapping: a page fault per object header cost 25-50 us on
		 * the development host, a pread 3 (src/alloc/walk.c). Only a
		 * region mapped from the file itself: the pread must see
		 * every write made through the mapping (the images applied).
		 * A copied one is read by its memory (-1). */
		r->fds[r->nadopt] =
		        mapped ? open(path, O_RDONLY | O_CLOEXEC) : -1;
		r->ids[r->nadopt++] = mr->id;
		rs->st.bytes += mr->size;
	}
	rs->st.regions = r->nadopt;
	r->t1 = farm_now_ns();
	rs->st.adopt_ns = r->t1 - r->t0;
	return rc;
}

/* Whose records count, and whose rings are read. Every previous member
 * coordinated: the lost ones too. Their records are in every log that
 * came back, and every machine must read the same records to take the
 * same decisions: a lost coordinator's COMMIT-BACKUPs at the other
 * backups, and the marks its later records carry, are what proves its
 * last commits (reading only the view's members' rings, each machine saw
 * a lost coordinator's records in its own log alone, and a backup
 * promoted for a lost primary aborted a commit another backup had
 * applied). */
static void run_coords(struct run *r)
{
	const struct farm_restart *rs = r->rs;
	memset(r->coords, 0, sizeof(r->coords));
	for (unsigned k = 0; k < rs->old.nmembers; k++)
		txn_coord_put(r->coords, rs->old.members[k], true);
	memcpy(r->rcoords, r->coords, sizeof(r->rcoords));
	if (FARM_FAULT_SWITCH(FARM_FP_RESTART_VIEW_RINGS)) { /* testing */
		memset(r->rcoords, 0, sizeof(r->rcoords));
		for (unsigned k = 0; k < r->v->n; k++)
			txn_coord_put(r->rcoords, r->v->members[k].id, true);
	}
	for (unsigned k = 0; k < r->nlost; k++)
		if (FARM_FAULT_SWITCH(FARM_FP_RESTART_LOST_STRICT))
			txn_coord_put(r->coords, r->lost[k],
			              false); /* testing */
	r->any_coords = false;
	for (unsigned w = 0; w < TXN_COORD_WORDS; w++)
		r->any_coords |= r->coords[w] != 0;
}

/* A peer's configuration history, published after its log (@hist_bytes
 * of it, struct rlog_hdr), into @p->hist. None from a peer that published
 * none, or too much to be one (then its configurations are judged as if
 * unknown). */
static int read_peer_hist(struct run *r, struct peer_log *p,
                          uint64_t hist_bytes)
{
	if (!hist_bytes || hist_bytes > HIST_MAX_BYTES)
		return 0;
	p->hist = malloc(hist_bytes);
	farm_mr *mr = NULL;
	int rc = p->hist ? farm_mr_reg(r->rs->fab, p->hist, hist_bytes,
	                               FARM_ACCESS_LOCAL, &mr)
	                 : -ENOMEM;
	uint64_t base = p->d.addr + RLOG_HDR + p->len;
	for (uint64_t o = 0; !rc && o < hist_bytes; o += READ_CHUNK)
		rc = read_sync(r->cq, p->ep, mr, p->hist + o, base + o,
		               p->d.key,
		               (uint32_t)FARM_MIN((uint64_t)READ_CHUNK,
		                                  hist_bytes - o));
	if (mr)
		farm_mr_dereg(mr);
	if (!rc)
		p->hist_len = (size_t)hist_bytes;
	return rc;
}

/* restart_hist.c's visitor: configuration @c (its machines @m) joins
 * r->confs unless one of its id is there (the first history that has it
 * gives it: one configuration id names one configuration for good). */
static void add_conf(void *ctx, const struct hist_conf *c,
                     const struct hist_machine *m,
                     const struct farm_ring_pin *pins)
{
	struct run *r = ctx;
	for (unsigned i = 0; i < r->nconfs; i++)
		if (r->confs[i].cfg == c->config_id)
			return;
	struct farm_ring_machine placed[2 * FARM_VIEW_MAX];
	uint32_t *ids = calloc(2ull * c->n, sizeof(*ids));
	struct farm_txrestart_conf *nc =
	        realloc(r->confs, (r->nconfs + 1) * sizeof(*nc));
	if (nc)
		r->confs = nc;
	if (!ids || !nc) {
		free(ids);
		return;
	}
	unsigned k = 0;
	for (unsigned i = 0; i < c->n; i++) {
		placed[i] =
		        (struct farm_ring_machine){.id = m[i].id,
		                                   .domain = m[i].domain,
		                                   .departed = m[i].departed,
		                                   .late = m[i].late,
		                                   .shadow = m[i].shadow,
		                                   .leaving = m[i].leaving};
		if (m[i].member) {
			ids[k] = m[i].id;
			ids[c->n + k++] = m[i].inc;
		}
	}
	farm_ring *g = NULL;
	/* The pins are part of the placement (ring.h): a pinned region's
	 * backups are not the rings' ones. */
	if (farm_ring_build_domains(placed, c->n, &r->rs->ring, &g) ||
	    farm_ring_set_pins(g, pins, c->npins)) {
		farm_ring_free(g);
		farm_warn("restart: configuration %" PRIu64
		          " of a history cannot be placed: its transactions "
		          "are judged by this restart's placement",
		          c->config_id);
		free(ids);
		return;
	}
	r->confs[r->nconfs++] =
	        (struct farm_txrestart_conf){.cfg = c->config_id,
	                                     .ring = g,
	                                     .ids = ids,
	                                     .inc = ids + c->n,
	                                     .n = k};
}

/* Every member's history, in the view's order (the same on every
 * machine), into r->confs; the members now and their incarnations. */
static void run_confs(struct run *r)
{
	const struct farm_restart *rs = r->rs;
	for (unsigned i = 0; i < r->nl; i++) {
		const struct peer_log *p = &r->pl[i];
		const uint8_t *b = p->hist;
		size_t len = p->hist_len;
		if (p->id == rs->me) {
			b = (const uint8_t *)farm_mem_addr(rs->rmem) +
			    RLOG_HDR + rs->old.log_bytes;
			len = rs->hist_pub;
		}
		if (len && farm_rst_hist_each(b, len, NULL, NULL) == 0)
			(void)farm_rst_hist_each(b, len, add_conf, r);
		else if (len)
			farm_warn("restart: machine %" PRIu32
			          "'s configuration "
			          "history does not add up: ignored",
			          p->id);
	}
	for (unsigned i = 0; i < r->v->n; i++) {
		r->now_ids[i] = r->v->members[i].id;
		r->now_inc[i] = r->v->members[i].incarnation;
	}
}

/* Member @m's previous log into @p, READ from it whole. */
static int read_peer_log(struct run *r, const struct farm_member *m,
                         struct peer_log *p)
{
	struct farm_restart *rs = r->rs;
	char addr[FARM_ENDPOINT_MAX];
	int rc = peer_desc(m, addr, sizeof(addr), &p->d);
	if (rc) {
		snprintf(r->err, sizeof(r->err),
		         "machine %" PRIu32 " publishes no previous log (%s)",
		         m->id, farm_strerror(rc));
		return rc;
	}
	if (p->d.len < RLOG_HDR || p->d.len > RLOG_HDR + (1ull << 34)) {
		snprintf(r->err, sizeof(r->err),
		         "machine %" PRIu32 ": previous log of %" PRIu64
		         " bytes",
		         m->id, p->d.len);
		return FARM_ECORRUPT;
	}
	p->len = (size_t)(p->d.len - RLOG_HDR);
	p->buf = p->alloc = calloc(1, p->d.len);
	rc = p->buf ? 0 : -ENOMEM;
	if (!rc)
		rc = farm_mr_reg(rs->fab, p->buf, p->d.len, FARM_ACCESS_LOCAL,
		                 &p->mr);
	if (!rc)
		rc = farm_ep_connect(rs->fab, r->cq, m->id, addr, NULL, &p->ep);
	if (!rc)
		rc = read_log_head(r->cq, p);
	if (rc) {
		snprintf(r->err, sizeof(r->err),
		         "cannot read the previous log of machine %" PRIu32
		         ": %s",
		         m->id, farm_strerror(rc));
		return rc;
	}
	struct rlog_hdr h;
	memcpy(&h, p->buf, sizeof(h));
	if (h.magic != RLOG_MAGIC || h.machine != m->id ||
	    h.log_bytes != p->len) {
		snprintf(r->err, sizeof(r->err),
		         "machine %" PRIu32 ": bad previous-log header", m->id);
		return FARM_ECORRUPT;
	}
	rc = read_peer_hist(r, p, h.hist_bytes);
	if (rc)
		snprintf(r->err, sizeof(r->err),
		         "cannot read the configuration history of machine "
		         "%" PRIu32 ": %s",
		         m->id, farm_strerror(rc));
	return rc;
}

/* The removed coordinators whose records some member's log may still
 * hold (a recovery round under way at the kill had not emptied them
 * everywhere: farm_txlog_pending) join the coordinators whose records
 * count and whose rings are read. Unread, a backup that had not applied
 * a commit the round decided, and its primary installed, never would;
 * the round's decisions are logged there (recover_decide.c). Every
 * machine reads the same headers, so adds the same. */
static void run_pending(struct run *r)
{
	uint64_t pend[TXN_COORD_WORDS] = {0};
	for (unsigned i = 0; i < r->nl; i++) {
		const struct peer_log *p = &r->pl[i];
		const uint8_t *base =
		        p->id == r->rs->me ? p->buf : p->buf + RLOG_HDR;
		(void)farm_txlog_pending(base, p->len, pend);
	}
	const struct farm_restart *rs = r->rs;
	for (unsigned k = 0; k < rs->old.nmembers; k++)
		txn_coord_put(pend, rs->old.members[k], false);
	for (unsigned w = 0; w < TXN_COORD_WORDS; w++) {
		if (FARM_FAULT_SWITCH(FARM_FP_RESTART_NO_PENDING))
			break; /* testing: as before */
		r->coords[w] |= pend[w];
		r->rcoords[w] |= pend[w];
		r->any_coords |= pend[w] != 0;
	}
}

/* 3. Read every member's previous log (ours is in memory already). */
static int run_read_logs(struct run *r)
{
	struct farm_restart *rs = r->rs;
	int rc = farm_cq_create(rs->fab, 64, 0, &r->cq);
	if (rc)
		return rc;
	run_coords(r);
	for (unsigned i = 0; i < r->v->n && !rc; i++) {
		const struct farm_member *m = &r->v->members[i];
		struct peer_log *p = &r->pl[r->nl];
		p->id = m->id;
		snprintf(p->what, sizeof(p->what),
		         "previous log of machine %" PRIu32, m->id);
		if (m->id == rs->me) {
			p->buf = (uint8_t *)farm_mem_addr(rs->rmem) + RLOG_HDR;
			p->len = (size_t)rs->old.log_bytes;
		} else if ((rc = read_peer_log(r, m, p))) {
			break;
		}
		r->nl++;
	}
	if (rc)
		return rc;
	run_confs(r);
	run_pending(r);
	for (unsigned i = 0; i < r->nl && !rc; i++) {
		struct peer_log *p = &r->pl[i];
		if (p->id != rs->me) {
			rc = read_log_rings(r->cq, p, r->rcoords);
			if (rc) {
				snprintf(r->err, sizeof(r->err),
				         "cannot read the previous log of "
				         "machine %" PRIu32 ": %s",
				         p->id, farm_strerror(rc));
				break;
			}
			p->buf += RLOG_HDR;
		}
		r->logs[i] = (struct farm_txrestart_log){
		        .base = p->buf,
		        .len = p->len,
		        .what = p->what,
		        .coords = r->any_coords ? r->coords : NULL};
	}
	if (!rc)
		rs->st.logs = r->nl;
	return rc;
}

/* 3. Decide and apply: the transaction layer (src/txn/restart.c). */
static int run_decide(struct run *r)
{
	struct farm_restart *rs = r->rs;
	r->tl = farm_now_ns();
	rs->st.logs_ns = r->tl - r->t1;
	struct farm_txrestart_stats ts;
	struct farm_txrestart_lost tl_lost = {.ring = r->oring,
	                                      .ids = r->lost,
	                                      .n = r->nlost,
	                                      .confs = r->confs,
	                                      .nconfs = r->nconfs,
	                                      .now_ids = r->now_ids,
	                                      .now_inc = r->now_inc,
	                                      .now_n = r->v->n};
	int rc = farm_txm_restart_apply(rs->txm, r->logs, r->nl, r->ids, r->fds,
	                                r->nadopt, &tl_lost, &ts, r->err,
	                                sizeof(r->err));
	if (rc)
		return rc;
	rs->st.records = ts.records;
	rs->st.txns = ts.txns;
	rs->st.committed = ts.committed;
	rs->st.aborted = ts.aborted;
	rs->st.images = ts.images;
	rs->st.objects = ts.objects;
	rs->st.unlocked = ts.unlocked;
	rs->st.freed = ts.freed;
	r->ta = farm_now_ns();
	rs->st.apply_ns = r->ta - r->tl;
	return 0;
}

/* 4. Apply: promote the copies whose primary is this machine; the
 * allocator rebuilds its state from their block tables. */
static int run_apply(struct run *r)
{
	struct farm_restart *rs = r->rs;
	int rc = 0;
	FARM_FAULT_POINT(FARM_FP_RESTART_SLOW); /* testing */
	for (unsigned i = 0; i < r->nadopt && !rc; i++) {
		uint32_t reps[FARM_RING_MAX_REPLICAS];
		uint32_t id = r->ids[i];
		unsigned nr = farm_as_replicas(rs->as, id, reps);
		if (!nr || reps[0] != rs->me)
			continue;
		rc = farm_as_promote(rs->as, id);
		farm_region *reg = farm_as_local_region(rs->as, id, NULL);
		if (rc || !reg) {
			snprintf(r->err, sizeof(r->err),
			         "region %" PRIu32 " not promoted: %s", id,
			         farm_strerror(rc ? rc : -ENOENT));
			rc = rc ? rc : -ENOENT;
			break;
		}
		struct farm_alloc_region ar = {.id = id,
		                               .base = farm_region_base(reg),
		                               .size = farm_region_size(reg)};
		const uint64_t *w = ar.base;
		farm_blockalloc *ba = farm_galloc_blockalloc(rs->ga);
		rc = !w[0]           ? farm_blockalloc_add_region(ba, &ar)
		     : r->fds[i] < 0 ? farm_blockalloc_rebuild_region(ba, &ar)
		                     : farm_blockalloc_rebuild_region_fd(
		                               ba, &ar, r->fds[i]);
		if (rc)
			snprintf(r->err, sizeof(r->err),
			         "region %" PRIu32 ": allocator state: %s", id,
			         farm_strerror(rc));
	}
	r->t2 = farm_now_ns();
	rs->st.replay_ns = r->t2 - r->t1;
	rs->st.alloc_ns = r->t2 - r->ta;
	return rc;
}

/* Until @p's machine has marked its published log done (or @dl). */
static int wait_done(struct run *r, struct peer_log *p, uint64_t dl)
{
	int rc;
	for (;;) {
		uint8_t *hb = p->buf - RLOG_HDR;
		rc = read_sync(r->cq, p->ep, p->mr, hb, p->d.addr, p->d.key,
		               RLOG_HDR);
		struct rlog_hdr h;
		memcpy(&h, hb, sizeof(h));
		if (rc || atomic_load(&h.done) == 1)
			break;
		if (farm_now_ns() > dl) {
			rc = -ETIMEDOUT;
			break;
		}
		struct timespec ts1 = {0, 1000000};
		nanosleep(&ts1, NULL);
	}
	if (rc)
		snprintf(r->err, sizeof(r->err),
		         "machine %" PRIu32 " did not finish its restart: %s",
		         p->id, farm_strerror(rc));
	return rc;
}

/* 5. Barrier: nobody commits before every copy is in place. */
static int run_barrier(struct run *r)
{
	struct farm_restart *rs = r->rs;
	set_done(rs);
	uint64_t dl = r->t2 + (uint64_t)BARRIER_MS * 1000000ull;
	int rc = 0;
	for (unsigned i = 0; i < r->nl && !rc; i++)
		if (r->pl[i].id != rs->me)
			rc = wait_done(r, &r->pl[i], dl);
	rs->st.barrier_ns = farm_now_ns() - r->t2;
	return rc;
}

/* 6. This incarnation's manifest, then the old files go. */
static int run_commit(struct run *r)
{
	struct farm_restart *rs = r->rs;
	const struct farm_view *v = r->v;
	pthread_mutex_lock(&rs->lock);
	rs->config_id = v->config_id;
	rs->nmembers = v->n;
	for (unsigned i = 0; i < v->n; i++)
		rs->members[i] = v->members[i].id;
	rs->writable = true;
	int rc = farm_rst_man_write(rs, false);
	pthread_mutex_unlock(&rs->lock);
	if (rc)
		return rc;
	for (uint32_t i = 0; i <= rs->old.nregions; i++) {
		char path[FARM_CONFIG_STR + 80];
		farm_rst_path(rs,
		              i < rs->old.nregions ? rs->old_regs[i].file
		                                   : rs->old.log_file,
		              ".old", path, sizeof(path));
		if (unlink(path) != 0)
			farm_warn("restart: cannot remove %s: %s", path,
			          farm_strerror(-errno));
	}
	rs->pending = false;
	rs->st.restarted = true;
	rs->st.total_ns = farm_now_ns() - rs->t_open_ns;
	farm_info("restart: machine %" PRIu32 " restarted: %" PRIu64
	          " regions (%" PRIu64 " MiB) in %.1f ms, %" PRIu64
	          " records of %" PRIu64 " transactions (%" PRIu64
	          " committed, %" PRIu64 " aborted, %" PRIu64
	          " images applied, %" PRIu64 " locks cleared, %" PRIu64
	          " freed slots) in %.1f ms, barrier %.1f ms",
	          rs->me, rs->st.regions, rs->st.bytes >> 20,
	          rs->st.adopt_ns / 1e6, rs->st.records, rs->st.txns,
	          rs->st.committed, rs->st.aborted, rs->st.images,
	          rs->st.unlocked, rs->st.freed, rs->st.replay_ns / 1e6,
	          rs->st.barrier_ns / 1e6);
	return 0;
}

static void run_free(struct run *r)
{
	for (unsigned i = 0; r->pl && i < r->v->n; i++) {
		if (r->pl[i].ep)
			farm_ep_destroy(r->pl[i].ep);
		if (r->pl[i].mr)
			farm_mr_dereg(r->pl[i].mr);
		if (r->pl[i].id != r->rs->me)
			free(r->pl[i].alloc);
		free(r->pl[i].hist);
	}
	for (unsigned i = 0; i < r->nconfs; i++) {
		farm_ring_free((farm_ring *)r->confs[i].ring);
		free((uint32_t *)r->confs[i].ids);
	}
	free(r->confs);
	if (r->cq && farm_cq_destroy(r->cq))
		farm_warn("restart: completion queue not destroyed");
	farm_ring_free(r->oring);
	for (unsigned i = 0; r->fds && i < r->nadopt; i++)
		if (r->fds[i] >= 0)
			close(r->fds[i]);
	free(r->fds);
	free(r->ids);
	free(r->pl);
	free(r->logs);
}

int farm_restart_run(struct farm_restart *rs, const struct farm_view *v)
{
	struct run *r = NULL;
	uint32_t lost[FARM_VIEW_MAX];
	unsigned nlost;
	if (!rs || !rs->pending || !farm_rst_set(rs, v, lost, &nlost))
		return 0;
	int rc = -ENOMEM;
	r = calloc(1, sizeof(*r));
	if (r) {
		*r = (struct run){
		        .rs = rs, .v = v, .nlost = nlost, .t0 = farm_now_ns()};
		memcpy(r->lost, lost, nlost * sizeof(lost[0]));
		r->ids = calloc(rs->old.nregions + 1, sizeof(*r->ids));
		r->fds = calloc(rs->old.nregions + 1, sizeof(*r->fds));
		r->pl = calloc(v->n, sizeof(*r->pl));
		r->logs = calloc(v->n, sizeof(*r->logs));
		if (r->ids && r->fds && r->pl && r->logs)
			rc = 0;
	}
	/* The phases, in order; the first that fails ends the restart. */
	if (!rc)
		rc = run_lost(r);
	if (!rc)
		rc = run_adopt(r);
	if (!rc)
		rc = run_read_logs(r);
	if (!rc)
		rc = run_decide(r);
	if (!rc)
		rc = run_apply(r);
	if (!rc)
		rc = run_barrier(r);
	if (!rc)
		rc = run_commit(r);
	if (rc)
		farm_err("restart: machine %" PRIu32
		         " cannot restart: %s (%s); its previous files are "
		         "kept (*.old)",
		         rs->me, r && r->err[0] ? r->err : "error",
		         farm_strerror(rc));
	if (r)
		run_free(r);
	free(r);
	return rc;
}
