/*
 * The one-host limit for graph_bench: the same layout as fgraph (a node
 * with its data inline and list heads and counts; per-(node, type) lists
 * of edge blocks, newest first, in the same block format) in one process's
 * malloc'ed memory, an open-addressing table from id to node, and no
 * fabric, no transactions, no copies on read beyond what the result needs.
 * Header-only; one thread.
 */
#ifndef FGRAPH_MEMGRAPH_H
#define FGRAPH_MEMGRAPH_H

#include <stdlib.h>

#include "graph_int.h"

struct mg_list {
	uint32_t atype, count;
	struct gb_hdr *head;
};

struct mg_node {
	uint64_t id;
	uint32_t otype, version;
	int64_t time;
	uint16_t dlen, dcap;
	struct mg_list lists[FG_MAX_TYPES];
	/* a next pointer stands where fgraph's blocks keep a fat pointer */
	uint8_t data[];
};

struct mg {
	struct mg_node **tab;
	uint64_t cap, n;
};

/* The block's next block (fgraph keeps a fat pointer there; here the
 * pointer is stored in its address field). */
static inline struct gb_hdr *mg_next(const struct gb_hdr *b)
{
	return (struct gb_hdr *)(uintptr_t)b->next.addr;
}
static inline void mg_set_next(struct gb_hdr *b, struct gb_hdr *n)
{
	b->next = (farm_fatptr){.addr = (farm_gaddr)(uintptr_t)n};
}

static inline int mg_init(struct mg *m, uint64_t nodes)
{
	m->cap = 16;
	while (m->cap < nodes * 2)
		m->cap *= 2;
	m->n = 0;
	m->tab = calloc(m->cap, sizeof(*m->tab));
	return m->tab ? 0 : -ENOMEM;
}

static inline struct mg_node **mg_slot(struct mg *m, uint64_t id)
{
	for (uint64_t i = fg_mix(id) & (m->cap - 1);;
	     i = (i + 1) & (m->cap - 1))
		if (!m->tab[i] || m->tab[i]->id == id)
			return &m->tab[i];
}

static inline struct mg_node *mg_get(struct mg *m, uint64_t id)
{
	return *mg_slot(m, id);
}

static inline void mg_free_lists(struct mg_node *n)
{
	for (unsigned s = 0; s < FG_MAX_TYPES; s++)
		for (struct gb_hdr *b = n->lists[s].head, *nx; b; b = nx) {
			nx = mg_next(b);
			free(b);
		}
}

/* A node: a new one, or one deleted before (version 0: deleted nodes stay
 * in the table as tombstones, which a table that only grows can afford). */
static inline int mg_obj_add(struct mg *m, uint64_t id, uint32_t otype,
                             int64_t time, const void *d, uint32_t len)
{
	if (m->n * 2 >= m->cap)
		return -ENOSPC;
	struct mg_node **s = mg_slot(m, id);
	if (*s && (*s)->version)
		return -EEXIST;
	uint32_t cap = len < 32 ? 32 : len;
	struct mg_node *n = realloc(*s, sizeof(*n) + cap);
	if (!n)
		return -ENOMEM;
	if (!*s)
		m->n++;
	memset(n, 0, sizeof(*n));
	n->id = id;
	n->otype = otype;
	n->version = 1;
	n->time = time;
	n->dlen = (uint16_t)len;
	n->dcap = (uint16_t)cap;
	memcpy(n->data, d, len);
	*s = n;
	return 0;
}

static inline struct mg_node *mg_live(struct mg *m, uint64_t id)
{
	struct mg_node *n = mg_get(m, id);
	return n && n->version ? n : NULL;
}

static inline int mg_obj_update(struct mg *m, uint64_t id, uint32_t otype,
                                int64_t time, const void *d, uint32_t len)
{
	struct mg_node **s = mg_slot(m, id), *n = *s;
	if (!n || !n->version)
		return -ENOENT;
	if (len > n->dcap) {
		n = realloc(n, sizeof(*n) + len);
		if (!n)
			return -ENOMEM;
		n->dcap = (uint16_t)len;
		*s = n;
	}
	n->otype = otype;
	n->time = time;
	n->version++;
	n->dlen = (uint16_t)len;
	memcpy(n->data, d, len);
	return 0;
}

static inline int mg_obj_delete(struct mg *m, uint64_t id)
{
	struct mg_node *n = mg_live(m, id);
	if (!n)
		return -ENOENT;
	mg_free_lists(n);
	memset(n->lists, 0, sizeof(n->lists));
	n->version = 0;
	return 0;
}

static inline struct mg_list *mg_list_of(struct mg_node *n, uint32_t t,
                                         bool make)
{
	int free_slot = -1;
	for (unsigned s = 0; s < FG_MAX_TYPES; s++) {
		if (n->lists[s].atype == t)
			return &n->lists[s];
		if (free_slot < 0 && !n->lists[s].head)
			free_slot = (int)s;
	}
	if (!make || free_slot < 0)
		return NULL;
	n->lists[free_slot] = (struct mg_list){.atype = t};
	return &n->lists[free_slot];
}

/* Remove @id2: 1 removed, 0 absent. */
static inline int mg_remove(struct mg_list *l, uint64_t id2,
                            struct gb_edge *old)
{
	struct gb_hdr *prev = NULL;
	for (struct gb_hdr *b = l->head; b; prev = b, b = mg_next(b)) {
		struct gb_edge *e = gb_edges(b);
		for (unsigned i = 0; i < b->n; i++) {
			if (e[i].id2 != id2)
				continue;
			if (old)
				*old = e[i];
			memmove(&e[i], &e[i + 1], (b->n - i - 1) * sizeof(*e));
			if (--b->n == 0) {
				if (prev)
					mg_set_next(prev, mg_next(b));
				else
					l->head = mg_next(b);
				free(b);
			}
			l->count--;
			return 1;
		}
	}
	return 0;
}

static inline struct gb_hdr *mg_block(unsigned cap)
{
	struct gb_hdr *b = calloc(1, gb_size(cap));
	if (b)
		b->cap = (uint16_t)cap;
	return b;
}

static inline int mg_insert(struct mg_list *l, uint64_t id1,
                            const struct gb_edge *ne)
{
	struct gb_hdr *prev = NULL, *b = l->head;
	while (b) {
		const struct gb_edge *last = &gb_edges(b)[b->n - 1];
		if (edge_before(ne->time, ne->id2, last->time, last->id2) ||
		    !mg_next(b))
			break;
		prev = b;
		b = mg_next(b);
	}
	if (!b) {
		if (!(b = mg_block(GB_MIN_CAP)))
			return -ENOMEM;
		b->id1 = id1;
		b->atype = l->atype;
		l->head = b;
	}
	struct gb_edge *e = gb_edges(b);
	unsigned pos = 0;
	while (pos < b->n &&
	       edge_before(e[pos].time, e[pos].id2, ne->time, ne->id2))
		pos++;
	if (b->n == b->cap) {
		/* a new block in front (at the head) or a split */
		bool front = !prev && pos == 0;
		unsigned cap = !front ? b->cap : l->count < 32 ? 8 : GB_MAX_CAP;
		struct gb_hdr *x = mg_block(cap);
		if (!x)
			return -ENOMEM;
		x->id1 = id1;
		x->atype = l->atype;
		if (front) {
			mg_set_next(x, b);
			l->head = x;
			b = x;
		} else {
			unsigned h = b->n / 2;
			memcpy(gb_edges(x), &e[h], (b->n - h) * sizeof(*e));
			x->n = (uint16_t)(b->n - h);
			b->n = (uint16_t)h;
			mg_set_next(x, mg_next(b));
			mg_set_next(b, x);
			if (pos > h) {
				pos -= h;
				b = x;
			}
		}
		e = gb_edges(b);
	}
	memmove(&e[pos + 1], &e[pos], (b->n - pos) * sizeof(*e));
	e[pos] = *ne;
	b->n++;
	l->count++;
	return 0;
}

static inline int mg_assoc_add(struct mg *m, uint64_t id1, uint32_t t,
                               uint64_t id2, int64_t time, const void *d,
                               uint32_t len)
{
	struct mg_node *n = mg_live(m, id1);
	if (!n)
		return -ENOENT;
	struct mg_list *l = mg_list_of(n, t, true);
	if (!l)
		return -ENOSPC;
	int had = mg_remove(l, id2, NULL);
	struct gb_edge ne = {.id2 = id2, .time = time, .len = (uint16_t)len};
	memcpy(ne.data, d, len);
	int rc = mg_insert(l, id1, &ne);
	return rc ? rc : !had;
}

/* The loader's path: a list given newest first. */
static inline int mg_load(struct mg *m, uint64_t id, uint32_t otype,
                          int64_t time, const void *d, uint32_t len,
                          const struct fg_edge *e, unsigned n)
{
	int rc = mg_obj_add(m, id, otype, time, d, len);
	struct mg_node *nd = rc ? NULL : mg_live(m, id);
	if (!nd || !n)
		return rc;
	struct mg_list *l = mg_list_of(nd, 1, true);
	struct gb_hdr *prev = NULL;
	for (unsigned i = 0; i < n; i += GB_MAX_CAP) {
		unsigned k = n - i < GB_MAX_CAP ? n - i : GB_MAX_CAP;
		struct gb_hdr *b = mg_block(k < GB_MIN_CAP ? GB_MIN_CAP : k);
		if (!b)
			return -ENOMEM;
		b->id1 = id;
		b->atype = 1;
		for (unsigned j = 0; j < k; j++) {
			gb_edges(b)[j] =
			        (struct gb_edge){.id2 = e[i + j].id2,
			                         .time = e[i + j].time,
			                         .len = (uint16_t)e[i + j].len};
			memcpy(gb_edges(b)[j].data, e[i + j].data,
			       e[i + j].len);
		}
		b->n = (uint16_t)k;
		if (prev)
			mg_set_next(prev, b);
		else
			l->head = b;
		prev = b;
	}
	l->count = n;
	return 0;
}

/* Ranges: the edges copied into @out (as fgraph's reads copy them). */
static inline int mg_range(struct mg *m, uint64_t id1, uint32_t t, uint32_t pos,
                           uint32_t limit, int64_t high, int64_t low,
                           bool by_time, struct fg_edge *out)
{
	struct mg_node *n = mg_live(m, id1);
	if (!n)
		return -ENOENT;
	struct mg_list *l = mg_list_of(n, t, false);
	unsigned k = 0, skip = 0;
	for (struct gb_hdr *b = l ? l->head : NULL; b && k < limit;
	     b = mg_next(b)) {
		const struct gb_edge *e = gb_edges(b);
		for (unsigned i = 0; i < b->n && k < limit; i++) {
			if (by_time) {
				if (e[i].time > high)
					continue;
				if (e[i].time < low)
					return (int)k;
			} else if (skip < pos) {
				skip++;
				continue;
			}
			out[k] = (struct fg_edge){.id1 = id1,
			                          .id2 = e[i].id2,
			                          .atype = t,
			                          .time = e[i].time,
			                          .len = e[i].len};
			memcpy(out[k].data, e[i].data, e[i].len);
			k++;
		}
	}
	return (int)k;
}

static inline int mg_get_edges(struct mg *m, uint64_t id1, uint32_t t,
                               const uint64_t *id2s, unsigned nid,
                               struct fg_edge *out)
{
	struct mg_node *n = mg_live(m, id1);
	if (!n)
		return -ENOENT;
	struct mg_list *l = mg_list_of(n, t, false);
	unsigned k = 0;
	for (struct gb_hdr *b = l ? l->head : NULL; b; b = mg_next(b)) {
		const struct gb_edge *e = gb_edges(b);
		for (unsigned i = 0; i < b->n; i++)
			for (unsigned j = 0; j < nid; j++)
				if (e[i].id2 == id2s[j]) {
					out[k] = (struct fg_edge){
					        .id1 = id1,
					        .id2 = e[i].id2,
					        .atype = t,
					        .time = e[i].time,
					        .len = e[i].len};
					memcpy(out[k].data, e[i].data,
					       e[i].len);
					k++;
					break;
				}
	}
	return (int)k;
}

#endif
