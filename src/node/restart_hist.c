/*
 * The restart's configuration history (restart.c's opening comment,
 * "History"): the placements of the last HIST_DEPTH configurations this
 * machine applied, kept in its data directory (farm.history) and published
 * with its previous log at a whole-cluster restart, so that every machine
 * decides a transaction known only by its COMMIT-BACKUPs by the backups of
 * the configuration its records carry (src/txn/restart.c), as a recovery
 * round does, rather than by those of the configuration it restarts in.
 *
 * The blob, the same in the file and in published memory:
 *   struct hist_hdr, then hdr.count configurations, oldest first, each a
 *   struct hist_conf, its n struct hist_machine and its npins struct
 *   farm_ring_pin (the manager's chosen placement), then a FNV-1a sum of
 *   everything before it (8 bytes).
 * A blob that does not add up is ignored (with a warning): the restart
 * then judges those configurations' transactions by its own ring, as
 * before the history existed.
 */
#include "node/restart_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/common.h"
#include "util/log.h"

static uint64_t hist_sum(const uint8_t *b, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* The configuration at @p (@left bytes from it): its size, 0 when it does
 * not fit. */
static size_t conf_size(const uint8_t *p, size_t left)
{
	struct hist_conf c;
	if (left < sizeof(c))
		return 0;
	memcpy(&c, p, sizeof(c));
	if (c.n == 0 || c.n > 2 * FARM_VIEW_MAX || c.npins > FARM_VIEW_MAX_PINS)
		return 0;
	size_t sz = sizeof(c) + (size_t)c.n * sizeof(struct hist_machine) +
	            (size_t)c.npins * sizeof(struct farm_ring_pin);
	return sz <= left ? sz : 0;
}

int farm_rst_hist_each(const uint8_t *b, size_t len, farm_rst_hist_fn fn,
                       void *ctx)
{
	struct hist_hdr h;
	if (!b || len < sizeof(h) + 8)
		return FARM_ECORRUPT;
	memcpy(&h, b, sizeof(h));
	uint64_t sum;
	memcpy(&sum, b + len - 8, 8);
	if (h.magic != HIST_MAGIC || h.layout != HIST_LAYOUT ||
	    h.bytes != len || h.count > HIST_DEPTH ||
	    sum != hist_sum(b, len - 8))
		return FARM_ECORRUPT;
	size_t off = sizeof(h);
	for (uint32_t i = 0; i < h.count; i++) {
		size_t sz = conf_size(b + off, len - 8 - off);
		if (!sz)
			return FARM_ECORRUPT;
		/* In place: every entry is 8-byte aligned in a malloc'd
		 * blob (24-byte header, 16-byte configurations, 24-byte
		 * machines, 8-byte pins). */
		if (fn) {
			const struct hist_conf *c =
			        (const struct hist_conf *)(const void *)(b +
			                                                 off);
			const uint8_t *m = b + off + sizeof(*c);
			fn(ctx, c, (const struct hist_machine *)(const void *)m,
			   (const struct farm_ring_pin
			            *)(const void
			                       *)(m +
			                          (size_t)c->n *
			                                  sizeof(struct
			                                         hist_machine)));
		}
		off += sz;
	}
	return off + 8 == len ? 0 : FARM_ECORRUPT;
}

/* @v's placement as a configuration entry (malloc'd) of *@len bytes. */
static uint8_t *conf_of(const struct farm_view *v, size_t *len)
{
	uint32_t ids[FARM_VIEW_MAX];
	struct farm_ring_machine placed[2 * FARM_VIEW_MAX];
	for (unsigned i = 0; i < v->n; i++)
		ids[i] = v->members[i].id;
	unsigned np = farm_view_placement(v, ids, v->n, placed);
	if (!np)
		return NULL;
	unsigned npins = FARM_MIN(v->npins, FARM_VIEW_MAX_PINS);
	size_t mlen = np * sizeof(struct hist_machine);
	*len = sizeof(struct hist_conf) + mlen +
	       npins * sizeof(struct farm_ring_pin);
	uint8_t *b = calloc(1, *len);
	if (!b)
		return NULL;
	struct hist_conf c = {
	        .config_id = v->config_id, .n = np, .npins = npins};
	memcpy(b + sizeof(c) + mlen, v->pins,
	       npins * sizeof(struct farm_ring_pin));
	memcpy(b, &c, sizeof(c));
	struct hist_machine *m = (struct hist_machine *)(void *)(b + sizeof(c));
	for (unsigned i = 0; i < np; i++) {
		const struct farm_member *mb =
		        placed[i].departed ? NULL
		                           : farm_view_find(v, placed[i].id);
		m[i] = (struct hist_machine){.id = placed[i].id,
		                             .domain = placed[i].domain,
		                             .late = placed[i].late,
		                             .shadow = placed[i].shadow,
		                             .inc = mb ? mb->incarnation : 0,
		                             .departed = placed[i].departed,
		                             .leaving = placed[i].leaving,
		                             .member = mb != NULL};
	}
	return b;
}

struct gather {
	const uint8_t *conf[HIST_DEPTH + 1];
	size_t len[HIST_DEPTH + 1];
	unsigned n;
	uint64_t newest;
};

static void gather_one(void *ctx, const struct hist_conf *c,
                       const struct hist_machine *m,
                       const struct farm_ring_pin *pins)
{
	(void)pins;
	struct gather *g = ctx;
	if (g->n < HIST_DEPTH + 1) {
		g->conf[g->n] = (const uint8_t *)c;
		g->len[g->n] = sizeof(*c) + c->n * sizeof(*m) +
		               c->npins * sizeof(struct farm_ring_pin);
		g->n++;
	}
	g->newest = c->config_id;
}

/* The blob of @confs[first..n) into rs->hist (under rs->lock). */
static int set_blob(struct farm_restart *rs, const struct gather *g,
                    unsigned first)
{
	size_t len = sizeof(struct hist_hdr) + 8;
	for (unsigned i = first; i < g->n; i++)
		len += g->len[i];
	uint8_t *b = calloc(1, len);
	if (!b)
		return -ENOMEM;
	struct hist_hdr h = {.magic = HIST_MAGIC,
	                     .layout = HIST_LAYOUT,
	                     .count = g->n - first,
	                     .bytes = len};
	memcpy(b, &h, sizeof(h));
	size_t off = sizeof(h);
	for (unsigned i = first; i < g->n; i++) {
		memcpy(b + off, g->conf[i], g->len[i]);
		off += g->len[i];
	}
	uint64_t sum = hist_sum(b, len - 8);
	memcpy(b + len - 8, &sum, 8);
	free(rs->hist);
	rs->hist = b;
	rs->hist_len = len;
	return 0;
}

/* farm.history in the data directory: written whole to a temporary,
 * synced, renamed (as the manifest). */
static int hist_write(const struct farm_restart *rs)
{
	char path[FARM_CONFIG_STR + 32], tmp[FARM_CONFIG_STR + 40];
	farm_rst_path(rs, FARM_HISTORY_FILE, "", path, sizeof(path));
	farm_rst_path(rs, FARM_HISTORY_FILE, ".tmp", tmp, sizeof(tmp));
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 ||
	    write(fd, rs->hist, rs->hist_len) != (ssize_t)rs->hist_len ||
	    fsync(fd) != 0)
		rc = errno ? -errno : -EIO;
	if (fd >= 0 && close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc)
		unlink(tmp); /* no half-written file left behind */
	return rc;
}

void farm_rst_hist_add(struct farm_restart *rs, const struct farm_view *v)
{
	struct gather g = {0};
	if (rs->hist &&
	    farm_rst_hist_each(rs->hist, rs->hist_len, gather_one, &g))
		g.n = 0;
	if (g.n && g.newest >= v->config_id)
		return; /* applied already (a view applied again) */
	size_t len = 0;
	uint8_t *c = conf_of(v, &len);
	if (!c) {
		farm_warn("restart: configuration %" PRIu64
		          " not kept in the history (out of memory)",
		          v->config_id);
		return;
	}
	g.conf[g.n] = c;
	g.len[g.n] = len;
	g.n++;
	int rc = set_blob(rs, &g, g.n > HIST_DEPTH ? g.n - HIST_DEPTH : 0);
	free(c);
	if (!rc && rs->writable)
		rc = hist_write(rs);
	if (rc)
		farm_warn("restart: configuration history not kept: %s",
		          farm_strerror(rc));
}

void farm_rst_hist_load(struct farm_restart *rs)
{
	char path[FARM_CONFIG_STR + 32];
	farm_rst_path(rs, FARM_HISTORY_FILE, "", path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return; /* none: written before the history existed */
	struct stat st;
	uint8_t *b = NULL;
	size_t n = 0;
	if (fstat(fd, &st) == 0 && st.st_size > 0 &&
	    st.st_size < (off_t)HIST_MAX_BYTES) {
		n = (size_t)st.st_size;
		b = malloc(n);
		if (b && pread(fd, b, n, 0) != (ssize_t)n) {
			free(b);
			b = NULL;
		}
	}
	close(fd);
	if (!b || farm_rst_hist_each(b, n, NULL, NULL)) {
		farm_warn("restart: %s does not add up: ignored (the restart "
		          "judges older configurations' transactions by its "
		          "own placement)",
		          path);
		free(b);
		return;
	}
	free(rs->hist);
	rs->hist = b;
	rs->hist_len = n;
}
