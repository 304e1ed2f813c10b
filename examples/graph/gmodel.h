/*
 * The in-memory model fgraph's model test compares the store with: the
 * graph.h semantics written as plainly as possible (arrays, linear scans),
 * for node ids 1..GM_NODES and association types 1..GM_TYPES. Header-only.
 */
#ifndef FGRAPH_GMODEL_H
#define FGRAPH_GMODEL_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

#define GM_NODES 16u
#define GM_TYPES 6u

struct gm_list {
	struct fg_edge *e; /* newest first */
	unsigned n, cap;
};

struct gm_node {
	bool live;
	struct fg_obj o;
	struct gm_list l[GM_TYPES + 1];
};

struct gm {
	struct gm_node n[GM_NODES + 1];
	uint8_t inverse[FG_MAX_ATYPE + 1];
};

static inline struct gm_node *gm_node(struct gm *m, uint64_t id)
{
	return id >= 1 && id <= GM_NODES && m->n[id].live ? &m->n[id] : NULL;
}

static inline bool gm_before(const struct fg_edge *a, const struct fg_edge *b)
{
	return a->time != b->time ? a->time > b->time : a->id2 > b->id2;
}

static inline int gm_find(const struct gm_list *l, uint64_t id2)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->e[i].id2 == id2)
			return (int)i;
	return -1;
}

static inline unsigned gm_nonempty(const struct gm_node *n)
{
	unsigned k = 0;
	for (unsigned t = 1; t <= GM_TYPES; t++)
		k += n->l[t].n > 0;
	return k;
}

static inline void gm_remove_at(struct gm_list *l, unsigned i)
{
	memmove(&l->e[i], &l->e[i + 1], (l->n - i - 1) * sizeof(*l->e));
	l->n--;
}

/* Insert (no id2 twice): 0, or -ENOSPC (no slot for a new type). */
static inline int gm_insert(struct gm_node *n, uint32_t t,
                            const struct fg_edge *e)
{
	struct gm_list *l = &n->l[t];
	if (!l->n && gm_nonempty(n) >= FG_MAX_TYPES)
		return -ENOSPC;
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 8;
		l->e = realloc(l->e, l->cap * sizeof(*l->e));
	}
	unsigned pos = 0;
	while (pos < l->n && gm_before(&l->e[pos], e))
		pos++;
	memmove(&l->e[pos + 1], &l->e[pos], (l->n - pos) * sizeof(*l->e));
	l->e[pos] = *e;
	l->n++;
	return 0;
}

/* Would adding (n, t, id2) find room? (the add removes id2 first) */
static inline bool gm_room(const struct gm_node *n, uint32_t t)
{
	return n->l[t].n || gm_nonempty(n) < FG_MAX_TYPES;
}

static inline void gm_clear(struct gm_node *n)
{
	for (unsigned t = 0; t <= GM_TYPES; t++) {
		free(n->l[t].e);
		memset(&n->l[t], 0, sizeof(n->l[t]));
	}
}

static inline int gm_obj_add(struct gm *m, uint64_t id, uint32_t otype,
                             int64_t time, const void *d, uint32_t len)
{
	if (gm_node(m, id))
		return -EEXIST;
	struct gm_node *n = &m->n[id];
	gm_clear(n);
	n->live = true;
	n->o = (struct fg_obj){.id = id,
	                       .otype = otype,
	                       .version = 1,
	                       .time = time,
	                       .len = len};
	memcpy(n->o.data, d, len);
	return 0;
}

static inline int gm_obj_update(struct gm *m, uint64_t id, uint32_t otype,
                                int64_t time, const void *d, uint32_t len)
{
	struct gm_node *n = gm_node(m, id);
	if (!n)
		return -ENOENT;
	n->o.otype = otype;
	n->o.time = time;
	n->o.version++;
	n->o.len = len;
	memcpy(n->o.data, d, len);
	return 0;
}

static inline int gm_obj_delete(struct gm *m, uint64_t id)
{
	struct gm_node *n = gm_node(m, id);
	if (!n)
		return -ENOENT;
	gm_clear(n);
	n->live = false;
	return 0;
}

static inline uint32_t gm_inv(const struct gm *m, uint64_t id1, uint64_t id2,
                              uint32_t t)
{
	return id1 != id2 ? m->inverse[t] : 0;
}

/* 1 added, 0 overwritten, or an error. */
static inline int gm_assoc_add(struct gm *m, uint64_t id1, uint32_t t,
                               uint64_t id2, int64_t time, const void *d,
                               uint32_t len)
{
	struct gm_node *n = gm_node(m, id1), *n2 = NULL;
	if (!n)
		return -ENOENT;
	uint32_t inv = gm_inv(m, id1, id2, t);
	if (inv && !(n2 = gm_node(m, id2)))
		return -ENOENT;
	if (!gm_room(n, t) || (inv && !gm_room(n2, inv)))
		return -ENOSPC;
	struct fg_edge e = {
	        .id1 = id1, .id2 = id2, .atype = t, .time = time, .len = len};
	memcpy(e.data, d, len);
	int i = gm_find(&n->l[t], id2);
	if (i >= 0)
		gm_remove_at(&n->l[t], (unsigned)i);
	gm_insert(n, t, &e);
	if (inv) {
		int k = gm_find(&n2->l[inv], id1);
		if (k >= 0)
			gm_remove_at(&n2->l[inv], (unsigned)k);
		e.id1 = id2;
		e.id2 = id1;
		e.atype = inv;
		gm_insert(n2, inv, &e);
	}
	return i < 0;
}

static inline int gm_assoc_delete(struct gm *m, uint64_t id1, uint32_t t,
                                  uint64_t id2)
{
	struct gm_node *n = gm_node(m, id1);
	if (!n)
		return -ENOENT;
	uint32_t inv = gm_inv(m, id1, id2, t);
	struct gm_node *n2 = inv ? gm_node(m, id2) : NULL;
	int i = gm_find(&n->l[t], id2);
	if (i < 0)
		return -ENOENT;
	gm_remove_at(&n->l[t], (unsigned)i);
	if (n2 && (i = gm_find(&n2->l[inv], id1)) >= 0)
		gm_remove_at(&n2->l[inv], (unsigned)i);
	return 0;
}

static inline int gm_change_type(struct gm *m, uint64_t id1, uint32_t t,
                                 uint64_t id2, uint32_t nt)
{
	struct gm_node *n = gm_node(m, id1), *n2 = NULL;
	if (!n)
		return -ENOENT;
	uint32_t ia = gm_inv(m, id1, id2, t), in = gm_inv(m, id1, id2, nt);
	if (ia || in) {
		n2 = gm_node(m, id2);
		if (!n2 && in)
			return -ENOENT;
		if (!n2)
			ia = 0;
	}
	int i = gm_find(&n->l[t], id2);
	if (nt == t)
		return i < 0 ? -ENOENT : 0;
	if (gm_find(&n->l[nt], id2) >= 0)
		return -EEXIST;
	if (i < 0)
		return -ENOENT;
	/* room is judged after the edge left its old list */
	struct fg_edge e = n->l[t].e[i];
	unsigned ne = gm_nonempty(n) - (n->l[t].n == 1);
	if (!n->l[nt].n && ne >= FG_MAX_TYPES)
		return -ENOSPC;
	if (in) {
		unsigned ne2 = gm_nonempty(n2);
		if (ia && n2->l[ia].n == 1 && gm_find(&n2->l[ia], id1) >= 0)
			ne2--;
		bool has = gm_find(&n2->l[in], id1) >= 0;
		if (!n2->l[in].n && !has && ne2 >= FG_MAX_TYPES)
			return -ENOSPC;
	}
	gm_remove_at(&n->l[t], (unsigned)i);
	e.atype = nt;
	gm_insert(n, nt, &e);
	if (ia && (i = gm_find(&n2->l[ia], id1)) >= 0)
		gm_remove_at(&n2->l[ia], (unsigned)i);
	if (in) {
		if ((i = gm_find(&n2->l[in], id1)) >= 0)
			gm_remove_at(&n2->l[in], (unsigned)i);
		e.id1 = id2;
		e.id2 = id1;
		e.atype = in;
		gm_insert(n2, in, &e);
	}
	return 0;
}

/* Ranges into @out (capacity FG_MAX_LIMIT): the count, or -ENOENT. */
static inline int gm_range(struct gm *m, uint64_t id1, uint32_t t, uint32_t pos,
                           uint32_t limit, struct fg_edge *out)
{
	struct gm_node *n = gm_node(m, id1);
	if (!n)
		return -ENOENT;
	unsigned k = 0;
	for (unsigned i = pos; i < n->l[t].n && k < limit; i++)
		out[k++] = n->l[t].e[i];
	return (int)k;
}

static inline int gm_time_range(struct gm *m, uint64_t id1, uint32_t t,
                                int64_t high, int64_t low, uint32_t limit,
                                struct fg_edge *out)
{
	struct gm_node *n = gm_node(m, id1);
	if (!n)
		return -ENOENT;
	unsigned k = 0;
	for (unsigned i = 0; i < n->l[t].n && k < limit; i++) {
		const struct fg_edge *e = &n->l[t].e[i];
		if (e->time < low)
			break;
		if (e->time <= high)
			out[k++] = *e;
	}
	return (int)k;
}

static inline int gm_get(struct gm *m, uint64_t id1, uint32_t t,
                         const uint64_t *id2s, unsigned nid, int64_t high,
                         int64_t low, struct fg_edge *out)
{
	struct gm_node *n = gm_node(m, id1);
	if (!n)
		return -ENOENT;
	unsigned k = 0;
	for (unsigned i = 0; i < n->l[t].n; i++) {
		const struct fg_edge *e = &n->l[t].e[i];
		if (e->time < low || e->time > high)
			continue;
		for (unsigned j = 0; j < nid; j++)
			if (id2s[j] == e->id2) {
				out[k++] = *e;
				break;
			}
	}
	return (int)k;
}

#endif
