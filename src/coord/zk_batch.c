/*
 * Reads issued together, for zk.c: the members' list they parse, and
 * what one sync reads (farm_zk_sync_read) with the marks parsed.
 *
 *
 * Each synchronous call is one round trip to the server; a sync used to
 * make 3 of them in a row, and the manager's path from a suspicion to its
 * compare-and-set 4 plus one per member (~25 ms of a member kill's
 * recovery on a loaded 2-core host, recovery_bench). Reads that do not
 * depend on each other are issued asynchronously and waited for together:
 * the server answers one session's requests in order, so what they see is
 * what the same calls in a row would have seen. The client library calls
 * every completion exactly once (with an error when the connection is lost
 * or the handle closes), so waiting for all is bounded as a synchronous
 * call is. Completions run on the client's completion thread.
 */
#ifdef FARM_HAVE_ZK

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coord/zk_int.h"
#include "util/log.h"

void farm_zk_batch_init(struct zk_batch *b, unsigned n)
{
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	b->pending = n;
}

/* One completion in (the waiter may return as soon as the lock drops). */
void farm_zk_batch_done(struct zk_batch *b)
{
	pthread_mutex_lock(&b->mu);
	if (--b->pending == 0)
		pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

/* @zrc from an asynchronous call: one that did not start never completes. */
void farm_zk_batch_started(struct zk_batch *b, int zrc, int *rc)
{
	if (zrc != ZOK) {
		*rc = zrc;
		farm_zk_batch_done(b);
	}
}

void farm_zk_batch_wait(struct zk_batch *b)
{
	pthread_mutex_lock(&b->mu);
	while (b->pending)
		pthread_cond_wait(&b->cv, &b->mu);
	pthread_mutex_unlock(&b->mu);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
}

void farm_zk_read_data_done(int rc, const char *value, int value_len,
                            const struct Stat *stat, const void *data)
{
	struct zk_read *r = (struct zk_read *)(uintptr_t)data;
	r->rc = rc;
	r->len = 0;
	if (rc == ZOK) {
		if (stat)
			r->st = *stat;
		int n = value && value_len > 0 ? value_len : 0;
		r->len = n < r->cap ? n : r->cap;
		if (r->len)
			memcpy(r->buf, value, (size_t)r->len);
	}
	farm_zk_batch_done(r->b);
}

void farm_zk_read_stat_done(int rc, const struct Stat *stat, const void *data)
{
	struct zk_read *r = (struct zk_read *)(uintptr_t)data;
	r->rc = rc;
	if (rc == ZOK && stat)
		r->st = *stat;
	farm_zk_batch_done(r->b);
}

/* The live members' ids, sorted, from the children of members/ (a watch is
 * set). Names that are not decimal ids are skipped. */
void farm_zk_kids_parse(const char *members, const struct String_vector *sv,
                        uint32_t *ids, unsigned *n)
{
	*n = 0;
	for (int32_t i = 0; sv && i < sv->count; i++) {
		const char *s = sv->data[i];
		char *e;
		errno = 0;
		unsigned long v = strtoul(s, &e, 10);
		if (!isdigit((unsigned char)s[0]) || *e || errno ||
		    v > UINT32_MAX || *n == FARM_VIEW_MAX) {
			farm_warn("membership: ignoring %s/%s", members, s);
			continue;
		}
		ids[(*n)++] = (uint32_t)v;
	}
	qsort(ids, *n, sizeof(ids[0]), farm_zk_cmp_u32);
}

/* zoo_aget_children's result, parsed as zk_live does. */

void farm_zk_kids_done(int rc, const struct String_vector *sv, const void *data)
{
	struct zk_kids *k = (struct zk_kids *)(uintptr_t)data;
	k->rc = rc;
	if (rc == ZOK)
		farm_zk_kids_parse(k->members, sv, k->ids, &k->n);
	farm_zk_batch_done(k->b);
}

/* A mark as read (R/grow, R/bump: "<id> <config id>"): kept for
 * zk_next.c. Absent, empty or malformed: none (a layout older than the
 * mark, or no machine has written it yet). */
void farm_zk_mark_parse(struct farm_zk *z, enum farm_zk_mark k,
                        const struct zk_read *r)
{
	z->mark_id[k] = 0;
	z->mark_cfg[k] = 0;
	if (r->rc != ZOK || r->len <= 0)
		return;
	r->buf[r->len] = 0;
	unsigned long id;
	unsigned long long cfg;
	char extra;
	if (sscanf(r->buf, "%lu %llu%c", &id, &cfg, &extra) != 2 ||
	    id > UINT32_MAX || !cfg) {
		farm_warn("membership: %s is malformed: ignored", z->mark[k]);
		return;
	}
	z->mark_id[k] = (uint32_t)id;
	z->mark_cfg[k] = cfg;
}

void farm_zk_sync_read(struct farm_zk *z, struct sync_reads *r)
{
	struct zk_batch *b = &r->b;
	farm_zk_batch_init(b, 4 + FARM_ZK_NMARKS);
	r->self = (struct zk_read){.b = b};
	r->cfg = (struct zk_read){.b = b, .buf = z->buf, .cap = (int)ZK_BUF};
	for (unsigned k = 0; k < FARM_ZK_NMARKS; k++)
		r->marks[k] =
		        (struct zk_read){.b = b,
		                         .buf = r->markbuf[k],
		                         .cap = (int)sizeof(r->markbuf[k]) - 1};
	r->kids =
	        (struct zk_kids){.b = b, .members = z->members, .ids = r->ids};
	r->refused = (struct zk_kids){
	        .b = b, .members = z->refused_dir, .ids = r->rids};
	farm_zk_batch_started(b,
	                      zoo_aget_children(z->zh, z->refused_dir, 1,
	                                        farm_zk_kids_done, &r->refused),
	                      &r->refused.rc);
	farm_zk_batch_started(b,
	                      zoo_aexists(z->zh, z->self_path, 1,
	                                  farm_zk_read_stat_done, &r->self),
	                      &r->self.rc);
	farm_zk_batch_started(b,
	                      zoo_aget_children(z->zh, z->members, 1,
	                                        farm_zk_kids_done, &r->kids),
	                      &r->kids.rc);
	farm_zk_batch_started(
	        b,
	        zoo_aget(z->zh, z->config, 1, farm_zk_read_data_done, &r->cfg),
	        &r->cfg.rc);
	for (unsigned k = 0; k < FARM_ZK_NMARKS; k++)
		farm_zk_batch_started(b,
		                      zoo_aget(z->zh, z->mark[k], 1,
		                               farm_zk_read_data_done,
		                               &r->marks[k]),
		                      &r->marks[k].rc);
	farm_zk_batch_wait(b);
	for (unsigned k = 0; k < FARM_ZK_NMARKS; k++)
		farm_zk_mark_parse(z, k, &r->marks[k]);
}

#endif /* FARM_HAVE_ZK */
