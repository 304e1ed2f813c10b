/*
 * fgraph: the transaction logic of updates and assoc_get on the owner, and
 * the accessor it reads, writes, allocates and frees objects through
 * (graph_logic.h says how PLAN and APPLY share it).
 *
 * Edge lists: blocks newest first; within a block, edges newest first;
 * every edge of a block is newer than every edge of the blocks after it.
 * An edge goes into the first block whose oldest edge is older than it (or
 * the last block). A full block below GB_MAX_CAP is replaced (the old one
 * freed) by one larger block holding its edges and the new one; a full
 * block of GB_MAX_CAP keeps the newer half in place and a new block after
 * it takes the older half. An emptied block is unlinked and freed. So a
 * block stops being the head only by being freed, and a client holding
 * the head's fat pointer either reads the current head or gets
 * FARM_EFREED; and a head holds at least min(count, GB_MAX_CAP / 2) of the
 * newest edges until deletes thin it.
 */
#include "graph_logic.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the accessor ------------------------------------------------------- */

void acc_reset(struct uop *op)
{
	for (unsigned i = 0; i < op->nobj; i++)
		if (op->objs[i].scratch)
			free(op->objs[i].data);
	op->nobj = 0;
}

static bool fake(farm_gaddr a)
{
	return a && farm_gaddr_region(a) == 0;
}

static struct aobj *acc_find(struct uop *op, farm_gaddr a)
{
	for (unsigned i = 0; i < op->nobj; i++)
		if (op->objs[i].a == a)
			return &op->objs[i];
	return NULL;
}

static struct aobj *acc_add(struct uop *op, farm_gaddr a, uint32_t size,
                            uint8_t *data)
{
	if (op->nobj == op->capobj) {
		unsigned nc = op->capobj ? op->capobj * 2 : 16;
		struct aobj *no = realloc(op->objs, nc * sizeof(*no));
		if (!no)
			return NULL;
		op->objs = no;
		op->capobj = nc;
	}
	struct aobj *o = &op->objs[op->nobj++];
	*o = (struct aobj){.a = a, .size = size, .data = data};
	return o;
}

/* Object @p's bytes: 0; L_NEED (remote: read it first); L_STALE. */
static int acc_get(struct uop *op, farm_fatptr p, uint8_t **d)
{
	struct aobj *o = acc_find(op, p.addr);
	if (o) {
		if (o->freed || o->size < p.size)
			return L_STALE;
		*d = o->data;
		return 0;
	}
	if (!p.addr || fake(p.addr))
		return L_STALE;
	const void *cd;
	int rc = farm_tx_read_local(op->tx, p.addr, p.size, &cd);
	if (rc == -EREMOTE) {
		op->need = p;
		return L_NEED;
	}
	if (rc == FARM_EFREED || rc == -EINVAL) {
		return L_STALE;
	}
	if (rc)
		return rc;
	if (!acc_add(op, p.addr, p.size, (uint8_t *)(uintptr_t)cd))
		return -ENOMEM;
	*d = (uint8_t *)(uintptr_t)cd;
	return 0;
}

/* Object @a (read before) made writable: its bytes in *@d. */
static int acc_put(struct uop *op, farm_gaddr a, uint8_t **d)
{
	struct aobj *o = acc_find(op, a);
	if (!o || o->freed)
		return L_STALE;
	if (op->mode == M_PLAN) {
		if (!o->scratch) {
			uint8_t *s = malloc(o->size);
			if (!s)
				return -ENOMEM;
			memcpy(s, o->data, o->size);
			o->data = s;
			o->scratch = true;
		}
	} else if (!o->fresh) {
		void *w;
		int rc = farm_tx_write(op->tx, a, &w);
		if (rc)
			return rc == -ENOENT ? L_STALE : rc;
		o->data = w;
	}
	*d = o->data;
	return 0;
}

static int acc_alloc(struct uop *op, uint32_t size, farm_gaddr hint,
                     farm_fatptr *p, uint8_t **d)
{
	struct aobj *o;
	if (op->mode == M_PLAN) {
		if (op->nal == MAX_ALLOCS)
			return -E2BIG;
		op->al[op->nal] =
		        (struct alloc_req){.size = size, .hint = hint};
		farm_gaddr fa = 64ull * ++op->nal;
		uint8_t *s = calloc(1, size);
		if (!s || !(o = acc_add(op, fa, size, s))) {
			free(s);
			return -ENOMEM;
		}
		o->scratch = true;
		*p = (farm_fatptr){.addr = fa, .size = size};
	} else {
		if (op->ual >= op->nal_done || op->al[op->ual].size != size)
			return -EAGAIN;
		struct alloc_req *a = &op->al[op->ual++];
		if (!(o = acc_add(op, a->p.addr, size, a->data)))
			return -ENOMEM;
		o->fresh = true;
		*p = a->p;
		p->size = size;
	}
	*d = o->data;
	return 0;
}

static int acc_free(struct uop *op, farm_gaddr a)
{
	struct aobj *o = acc_find(op, a);
	if (!o || o->freed)
		return L_STALE;
	if (op->mode == M_APPLY) {
		int rc = farm_tx_free_obj(op->tx, a);
		if (rc)
			return rc == -ENOENT ? L_STALE : rc;
	}
	o->freed = true;
	return 0;
}

/* ---- nodes and lists ---------------------------------------------------- */

static uint16_t dcap_for(uint32_t len)
{
	uint32_t c = (len + len / 4 + 31) & ~31u;
	if (c < 32)
		c = 32;
	return (uint16_t)(c > FG_MAX_DATA ? FG_MAX_DATA : c);
}

/* Node @id through @p (following a move): its pointer and header. */
static int node_get(struct uop *op, farm_fatptr p, uint64_t id, farm_fatptr *at,
                    struct gn_hdr **n)
{
	for (int hops = 0; hops < 4; hops++) {
		if (!p.addr)
			return -ENOENT;
		uint8_t *d;
		int rc = acc_get(op, p, &d);
		if (rc)
			return rc;
		struct gn_hdr *h = (struct gn_hdr *)d;
		if (!gn_sane(h, p.size, id)) {
			return L_STALE;
		}
		if (h->flags & GN_DELETED)
			return -ENOENT;
		if (h->flags & GN_MOVED) {
			p = h->fwd;
			continue;
		}
		*at = p;
		*n = h;
		return 0;
	}
	return L_STALE;
}

static int node_put(struct uop *op, farm_fatptr np, struct gn_hdr **n)
{
	uint8_t *d;
	int rc = acc_put(op, np.addr, &d);
	*n = (struct gn_hdr *)d;
	return rc;
}

static int block_get(struct uop *op, farm_fatptr p, uint64_t id1,
                     uint32_t atype, struct gb_hdr **b)
{
	uint8_t *d;
	int rc = acc_get(op, p, &d);
	if (rc)
		return rc;
	*b = (struct gb_hdr *)d;
	return gb_sane(*b, p.size, id1, atype) && (*b)->n ? 0 : L_STALE;
}

/* Make the list's link after @prev (the node's head when @prev is NULL)
 * point at @to. */
static int set_next(struct uop *op, farm_fatptr np, int s, farm_fatptr prev,
                    farm_fatptr to)
{
	uint8_t *d;
	int rc = acc_put(op, prev.addr ? prev.addr : np.addr, &d);
	if (rc)
		return rc;
	if (prev.addr)
		((struct gb_hdr *)d)->next = to;
	else
		((struct gn_hdr *)d)->lists[s].head = to;
	return 0;
}

/* Walk guard: no list has more blocks than this. */
#define MAX_BLOCKS (1u << 22)

/* Find edge @id2 in slot @s of node @np: 1 and where, or 0. */
static int list_find(struct uop *op, farm_fatptr np, uint64_t id1, int s,
                     uint64_t id2, farm_fatptr *blk, farm_fatptr *prev,
                     unsigned *idx)
{
	struct gn_hdr *n;
	uint8_t *d;
	int rc = acc_get(op, np, &d);
	if (rc)
		return rc;
	n = (struct gn_hdr *)d;
	uint32_t atype = n->lists[s].atype;
	farm_fatptr pv = {0}, cur = n->lists[s].head;
	for (unsigned guard = 0; cur.addr; guard++) {
		struct gb_hdr *b;
		if (guard > MAX_BLOCKS)
			return L_STALE;
		if ((rc = block_get(op, cur, id1, atype, &b)))
			return rc;
		struct gb_edge *e = gb_edges(b);
		for (unsigned i = 0; i < b->n; i++)
			if (e[i].id2 == id2) {
				*blk = cur;
				*prev = pv;
				*idx = i;
				return 1;
			}
		pv = cur;
		cur = b->next;
	}
	return 0;
}

/* Bump the seq of slot @s's head, the list's state as it ends this
 * transaction (a head freed by it needs none: its readers get EFREED). */
static int list_touch(struct uop *op, farm_fatptr np, int s)
{
	uint8_t *d;
	int rc = acc_get(op, np, &d);
	if (rc)
		return rc;
	farm_fatptr h = ((struct gn_hdr *)d)->lists[s].head;
	if (!h.addr)
		return 0;
	if ((rc = acc_get(op, h, &d)) || (rc = acc_put(op, h.addr, &d)))
		return rc;
	((struct gb_hdr *)d)->seq++;
	return 0;
}

/* Remove edge @id2 from node @np's list of @atype: 1 (the edge in *@old),
 * or 0 when it is not there. */
static int list_remove(struct uop *op, farm_fatptr np, uint64_t id1,
                       uint32_t atype, uint64_t id2, struct gb_edge *old)
{
	uint8_t *d;
	int rc = acc_get(op, np, &d);
	if (rc)
		return rc;
	int s = gn_slot((struct gn_hdr *)d, atype);
	if (s < 0)
		return 0;
	farm_fatptr blk, prev;
	unsigned i;
	rc = list_find(op, np, id1, s, id2, &blk, &prev, &i);
	if (rc <= 0)
		return rc;
	if ((rc = acc_put(op, blk.addr, &d)))
		return rc;
	struct gb_hdr *b = (struct gb_hdr *)d;
	struct gb_edge *e = gb_edges(b);
	if (old)
		*old = e[i];
	memmove(&e[i], &e[i + 1], (b->n - i - 1) * sizeof(*e));
	b->n--;
	memset(&e[b->n], 0, sizeof(*e));
	if (b->n == 0) {
		if ((rc = set_next(op, np, s, prev, b->next)) ||
		    (rc = acc_free(op, blk.addr)))
			return rc;
	}
	struct gn_hdr *n;
	if ((rc = node_put(op, np, &n)))
		return rc;
	n->lists[s].count--;
	return (rc = list_touch(op, np, s)) ? rc : 1;
}

/* The smallest block capacity that holds @k edges. */
static unsigned cap_for(unsigned k)
{
	unsigned c = GB_MIN_CAP;
	while (c < k)
		c *= 2;
	return c;
}

static unsigned grow_cap(uint32_t count)
{
	return count < 8 ? 4 : count < 32 ? 8 : count < 128 ? 16 : 32;
}

static void fill_block(struct gb_hdr *b, uint64_t id1, uint32_t atype,
                       unsigned cap, const struct gb_edge *e, unsigned n,
                       farm_fatptr next)
{
	b->id1 = id1;
	b->atype = atype;
	b->cap = (uint16_t)cap;
	b->n = (uint16_t)n;
	b->next = next;
	memcpy(gb_edges(b), e, n * sizeof(*e));
}

/* Where an insertion goes: node @np's list in slot @s (@count edges) of
 * @atype, its block @cur (@b, after @prev: none when @cur is the head)
 * and the new edge's position @pos in it. */
struct ins {
	struct uop *op;
	farm_fatptr np, prev, cur;
	uint64_t id1;
	uint32_t atype, count;
	int s;
	struct gb_hdr *b;
	unsigned pos;
};

/* The slot of @atype's list in node @np, taken (a free or emptied one)
 * if it has none: 0 (*@s, *@n the node's bytes), -ENOSPC. */
static int list_slot(struct uop *op, farm_fatptr np, uint32_t atype,
                     struct gn_hdr **n, int *s)
{
	uint8_t *d;
	int rc = acc_get(op, np, &d);
	if (rc)
		return rc;
	*n = (struct gn_hdr *)d;
	*s = gn_slot(*n, atype);
	if (*s >= 0)
		return 0;
	for (unsigned i = 0; i < FG_MAX_TYPES && *s < 0; i++)
		if (!(*n)->lists[i].atype ||
		    (!(*n)->lists[i].count && !(*n)->lists[i].head.addr))
			*s = (int)i;
	if (*s < 0)
		return -ENOSPC;
	if ((rc = node_put(op, np, n)))
		return rc;
	(*n)->lists[*s] = (struct gn_list){.atype = atype};
	return 0;
}

/* The list of @w has one more edge: its count and its touch. */
static int list_counted(const struct ins *w)
{
	struct gn_hdr *n;
	int rc = node_put(w->op, w->np, &n);
	if (rc)
		return rc;
	n->lists[w->s].count++;
	return list_touch(w->op, w->np, w->s);
}

/* The first block of an empty list, holding @ne alone. */
static int list_start(const struct ins *w, const struct gb_edge *ne)
{
	farm_fatptr p1;
	uint8_t *d1;
	struct gn_hdr *n;
	int rc = acc_alloc(w->op, gb_size(GB_MIN_CAP), w->np.addr, &p1, &d1);
	if (rc)
		return rc;
	fill_block((struct gb_hdr *)d1, w->id1, w->atype, GB_MIN_CAP, ne, 1,
	           (farm_fatptr){0});
	if ((rc = node_put(w->op, w->np, &n)))
		return rc;
	n->lists[w->s].head = p1;
	n->lists[w->s].count++;
	return list_touch(w->op, w->np, w->s);
}

/* The block where @ne goes (w->cur from the head on): the first whose
 * last edge comes after it, else the last; and its position there. */
static int block_for(struct ins *w, const struct gb_edge *ne)
{
	for (unsigned guard = 0;; guard++) {
		if (guard > MAX_BLOCKS)
			return L_STALE;
		int rc = block_get(w->op, w->cur, w->id1, w->atype, &w->b);
		if (rc)
			return rc;
		const struct gb_edge *last = &gb_edges(w->b)[w->b->n - 1];
		if (edge_before(ne->time, ne->id2, last->time, last->id2) ||
		    !w->b->next.addr)
			break;
		w->prev = w->cur;
		w->cur = w->b->next;
	}
	const struct gb_edge *e = gb_edges(w->b);
	w->pos = 0;
	while (w->pos < w->b->n &&
	       edge_before(e[w->pos].time, e[w->pos].id2, ne->time, ne->id2))
		w->pos++;
	return 0;
}

/* @ne into its block, which has room. */
static int block_add(const struct ins *w, const struct gb_edge *ne)
{
	uint8_t *d;
	int rc = acc_put(w->op, w->cur.addr, &d);
	if (rc)
		return rc;
	struct gb_hdr *b = (struct gb_hdr *)d;
	struct gb_edge *e = gb_edges(b);
	memmove(&e[w->pos + 1], &e[w->pos], (b->n - w->pos) * sizeof(*e));
	e[w->pos] = *ne;
	b->n++;
	return list_counted(w);
}

/* A full block's @m edges (@all, the new one among them) split in place:
 * the newer half stays, the older half goes to a new block after it. */
static int block_split(const struct ins *w, const struct gb_edge *all,
                       unsigned m)
{
	unsigned h = m / 2, cap = w->b->cap;
	farm_fatptr next = w->b->next, p2;
	uint8_t *d, *d2;
	int rc = acc_alloc(w->op, gb_size(cap), w->np.addr, &p2, &d2);
	if (rc)
		return rc;
	fill_block((struct gb_hdr *)d2, w->id1, w->atype, cap, all + h, m - h,
	           next);
	if ((rc = acc_put(w->op, w->cur.addr, &d)))
		return rc;
	fill_block((struct gb_hdr *)d, w->id1, w->atype, cap, all, h, p2);
	memset(gb_edges((struct gb_hdr *)d) + h, 0,
	       (cap - h) * sizeof(struct gb_edge));
	return list_counted(w);
}

/* A full block's @m edges in a block (or two) of their own in its place,
 * the old one freed. */
static int block_replace(const struct ins *w, const struct gb_edge *all,
                         unsigned m)
{
	farm_fatptr p1, p2;
	uint8_t *d1, *d2;
	int rc;
	if (m <= GB_MAX_CAP) {
		unsigned cap = cap_for(m);
		if (!w->prev.addr && cap < grow_cap(w->count + 1))
			cap = grow_cap(w->count + 1);
		if ((rc = acc_alloc(w->op, gb_size(cap), w->np.addr, &p1, &d1)))
			return rc;
		fill_block((struct gb_hdr *)d1, w->id1, w->atype, cap, all, m,
		           w->b->next);
	} else {
		unsigned h = m / 2, cap = w->b->cap;
		if ((rc = acc_alloc(w->op, gb_size(cap), w->np.addr, &p1,
		                    &d1)) ||
		    (rc = acc_alloc(w->op, gb_size(cap), w->np.addr, &p2, &d2)))
			return rc;
		fill_block((struct gb_hdr *)d2, w->id1, w->atype, cap, all + h,
		           m - h, w->b->next);
		fill_block((struct gb_hdr *)d1, w->id1, w->atype, cap, all, h,
		           p2);
	}
	bool keep = false;
#ifdef FG_TEST_BREAK_HEAD
	keep = !w->prev.addr; /* the old head stays readable: wrong */
#endif
	if ((!keep && (rc = acc_free(w->op, w->cur.addr))) ||
	    (rc = set_next(w->op, w->np, w->s, w->prev, p1)))
		return rc;
	return list_counted(w);
}

/* @ne into its full block. It is replaced by one larger block holding all
 * its edges and the new one while they fit in GB_MAX_CAP (the old one
 * freed: a cached head pointer to it goes stale), else split in two: the
 * newer half stays in the block, the older half goes to a new block after
 * it. A head that fills up so stays one block with at least GB_MAX_CAP / 2
 * of the newest edges (a short range is one read). Splitting in place (it
 * used to be two new blocks for the old one) keeps the cached head
 * pointers of a long list valid: in LinkBench's mix the hot nodes' lists
 * split every ~16 adds, and each time every machine's next range of the
 * node read the freed head, the node and the new head. */
static int block_full(const struct ins *w, const struct gb_edge *ne)
{
	const struct gb_edge *e = gb_edges(w->b);
	struct gb_edge all[GB_MAX_CAP + 1];
	unsigned m = w->b->n + 1u;
	memcpy(all, e, w->pos * sizeof(*e));
	all[w->pos] = *ne;
	memcpy(&all[w->pos + 1], &e[w->pos], (w->b->n - w->pos) * sizeof(*e));
	bool in_place = m > GB_MAX_CAP;
#ifdef FG_TEST_BREAK_HEAD
	/* the broken build replaces on every split, as before, so the
	 * concurrency test's long lists keep replacing their heads */
	in_place = false;
#endif
	return in_place ? block_split(w, all, m) : block_replace(w, all, m);
}

/* Insert @ne (not in the list) into node @np's list of @atype. */
static int list_insert(struct uop *op, farm_fatptr np, uint64_t id1,
                       uint32_t atype, const struct gb_edge *ne)
{
	struct gn_hdr *n;
	struct ins w = {.op = op, .np = np, .id1 = id1, .atype = atype};
	int rc = list_slot(op, np, atype, &n, &w.s);
	if (rc)
		return rc;
	w.count = n->lists[w.s].count;
	w.cur = n->lists[w.s].head;
	if (!w.cur.addr)
		return list_start(&w, ne);
	if ((rc = block_for(&w, ne)))
		return rc;
	return w.b->n < w.b->cap ? block_add(&w, ne) : block_full(&w, ne);
}

/* Add or overwrite an edge: 1 added, 0 overwritten. */
static int edge_put(struct uop *op, farm_fatptr np, uint64_t id1,
                    uint32_t atype, const struct gb_edge *ne)
{
	int had = list_remove(op, np, id1, atype, ne->id2, NULL);
	if (had < 0)
		return had;
	int rc = list_insert(op, np, id1, atype, ne);
	return rc ? rc : !had;
}

/* ---- the operations ----------------------------------------------------- */

static uint32_t inv_of(const struct uop *op, uint32_t atype)
{
	return atype <= FG_MAX_ATYPE ? op->g->inverse[atype] : 0;
}

static int do_assoc_add(struct uop *op)
{
	const struct up_req *r = &op->rq;
	farm_fatptr np, np2;
	struct gn_hdr *n;
	int rc = node_get(op, op->id1ptr, r->id1, &np, &n);
	if (rc)
		return rc;
	struct gb_edge ne = {
	        .id2 = r->id2, .time = r->time, .len = (uint16_t)r->len};
	memcpy(ne.data, op->data, r->len);
	uint32_t inv = r->id1 != r->id2 ? inv_of(op, r->atype) : 0;
	if (inv && (rc = node_get(op, op->id2ptr, r->id2, &np2, &n)))
		return rc;
	int added = edge_put(op, np, r->id1, r->atype, &ne);
	if (added < 0 || !inv)
		return added;
	ne.id2 = r->id1;
	rc = edge_put(op, np2, r->id2, inv, &ne);
	return rc < 0 ? rc : added;
}

static int do_assoc_delete(struct uop *op)
{
	const struct up_req *r = &op->rq;
	farm_fatptr np, np2;
	struct gn_hdr *n;
	int rc = node_get(op, op->id1ptr, r->id1, &np, &n);
	if (rc)
		return rc;
	uint32_t inv = r->id1 != r->id2 ? inv_of(op, r->atype) : 0;
	if (inv) {
		rc = node_get(op, op->id2ptr, r->id2, &np2, &n);
		if (rc == -ENOENT)
			inv = 0; /* no node, no inverse edge */
		else if (rc)
			return rc;
	}
	rc = list_remove(op, np, r->id1, r->atype, r->id2, NULL);
	if (rc <= 0)
		return rc ? rc : -ENOENT;
	if (inv && (rc = list_remove(op, np2, r->id2, inv, r->id1, NULL)) < 0)
		return rc;
	return 0;
}

static int do_change_type(struct uop *op)
{
	const struct up_req *r = &op->rq;
	farm_fatptr np, np2 = {0}, blk, prev;
	struct gn_hdr *n;
	unsigned idx;
	int rc = node_get(op, op->id1ptr, r->id1, &np, &n);
	if (rc)
		return rc;
	uint32_t nt = r->arg;
	bool self = r->id1 == r->id2;
	uint32_t ia = self ? 0 : inv_of(op, r->atype),
	         in = self ? 0 : inv_of(op, nt);
	if (ia || in) {
		rc = node_get(op, op->id2ptr, r->id2, &np2, &n);
		if (rc == -ENOENT && !in)
			ia = 0;
		else if (rc)
			return rc;
	}
	int s;
	uint8_t *d;
	if ((rc = acc_get(op, np, &d)))
		return rc;
	s = gn_slot((struct gn_hdr *)d, nt);
	if (nt == r->atype) {
		/* nothing moves; the edge must exist */
		rc = s < 0 ? 0
		           : list_find(op, np, r->id1, s, r->id2, &blk, &prev,
		                       &idx);
		return rc < 0 ? rc : rc ? 0 : -ENOENT;
	}
	if (s >= 0) {
		rc = list_find(op, np, r->id1, s, r->id2, &blk, &prev, &idx);
		if (rc)
			return rc < 0 ? rc : -EEXIST;
	}
	struct gb_edge e;
	rc = list_remove(op, np, r->id1, r->atype, r->id2, &e);
	if (rc <= 0)
		return rc ? rc : -ENOENT;
	if ((rc = list_insert(op, np, r->id1, nt, &e)))
		return rc;
	e.id2 = r->id1;
	if (ia && (rc = list_remove(op, np2, r->id2, ia, r->id1, NULL)) < 0)
		return rc;
	if (in && (rc = edge_put(op, np2, r->id2, in, &e)) < 0)
		return rc;
	return 0;
}

static int do_obj_add(struct uop *op)
{
	const struct up_req *r = &op->rq;
	if (op->id1ptr.addr)
		return -EEXIST;
	uint16_t dcap = dcap_for(r->len);
	farm_fatptr p;
	uint8_t *d;
	int rc = acc_alloc(op, (uint32_t)sizeof(struct gn_hdr) + dcap,
	                   FARM_GADDR_NULL, &p, &d);
	if (rc)
		return rc;
	struct gn_hdr *n = (struct gn_hdr *)d;
	n->id = r->id1;
	n->otype = r->arg;
	n->version = 1;
	n->time = r->time;
	n->dlen = (uint16_t)r->len;
	n->dcap = dcap;
	memcpy(gn_data(n), op->data, r->len);
	if (op->mode == M_APPLY)
		op->newnode = p;
	return 0;
}

/* A load request's node data (*@nd, *@dlen) and its @n edges (@e),
 * checked whole: 0 or FARM_ECORRUPT. */
static int load_parse(const struct uop *op, unsigned n, const uint8_t **nd,
                      uint32_t *dlen, struct gb_edge *e)
{
	const struct up_req *r = &op->rq;
	const uint8_t *p = op->data, *end = op->data + r->len;
	if (r->len < 4 || n > FG_LOAD_MAX || (n && !r->atype) ||
	    r->atype > FG_MAX_ATYPE)
		return FARM_ECORRUPT;
	memcpy(dlen, p, 4);
	p += 4;
	if (*dlen > FG_MAX_DATA || *dlen > (size_t)(end - p))
		return FARM_ECORRUPT;
	*nd = p;
	p += *dlen;
	for (unsigned i = 0; i < n; i++) {
		struct ld_edge le;
		if (sizeof(le) > (size_t)(end - p))
			return FARM_ECORRUPT;
		memcpy(&le, p, sizeof(le));
		p += sizeof(le);
		if (le.len > FG_MAX_EDGE_DATA || le.len > (size_t)(end - p) ||
		    !le.id2)
			return FARM_ECORRUPT;
		e[i] = (struct gb_edge){.id2 = le.id2,
		                        .time = le.time,
		                        .len = (uint16_t)le.len};
		memcpy(e[i].data, p, le.len);
		p += le.len;
		if (i && !edge_before(e[i - 1].time, e[i - 1].id2, e[i].time,
		                      e[i].id2))
			return FARM_ECORRUPT; /* not newest first, or twice */
	}
	return p == end ? 0 : FARM_ECORRUPT;
}

/* A node and its list in one go; the request is checked whole first. */
static int do_obj_load(struct uop *op)
{
	const struct up_req *r = &op->rq;
	if (op->id1ptr.addr)
		return -EEXIST;
	const uint8_t *nd = NULL;
	uint32_t dlen = 0;
	unsigned n = (unsigned)r->id2;
	struct gb_edge e[FG_LOAD_MAX];
	int prc = load_parse(op, n, &nd, &dlen, e);
	if (prc)
		return prc;
	uint16_t dcap = dcap_for(dlen);
	farm_fatptr np;
	uint8_t *d;
	int rc = acc_alloc(op, (uint32_t)sizeof(struct gn_hdr) + dcap,
	                   FARM_GADDR_NULL, &np, &d);
	if (rc)
		return rc;
	struct gn_hdr *nh = (struct gn_hdr *)d;
	*nh = (struct gn_hdr){.id = r->id1,
	                      .otype = r->arg,
	                      .version = 1,
	                      .time = r->time,
	                      .dlen = (uint16_t)dlen,
	                      .dcap = dcap};
	memcpy(gn_data(nh), nd, dlen);
	if (op->mode == M_APPLY)
		op->newnode = np;
	if (!n)
		return 0;
	/* blocks of GB_MAX_CAP edges from the newest, the last one smaller */
	farm_fatptr bp[FG_LOAD_MAX / GB_MIN_CAP + 1];
	uint8_t *bd[FG_LOAD_MAX / GB_MIN_CAP + 1];
	unsigned nb = 0;
	for (unsigned i = 0; i < n; i += GB_MAX_CAP, nb++) {
		unsigned k = n - i < GB_MAX_CAP ? n - i : GB_MAX_CAP;
		if ((rc = acc_alloc(op, gb_size(cap_for(k)), np.addr, &bp[nb],
		                    &bd[nb])))
			return rc;
	}
	for (unsigned b = 0, i = 0; b < nb; b++, i += GB_MAX_CAP) {
		unsigned k = n - i < GB_MAX_CAP ? n - i : GB_MAX_CAP;
		fill_block((struct gb_hdr *)bd[b], r->id1, r->atype, cap_for(k),
		           &e[i], k, b + 1 < nb ? bp[b + 1] : (farm_fatptr){0});
	}
	nh->lists[0] =
	        (struct gn_list){.atype = r->atype, .count = n, .head = bp[0]};
	return 0;
}

static int do_obj_update(struct uop *op)
{
	const struct up_req *r = &op->rq;
	farm_fatptr np;
	struct gn_hdr *n;
	int rc = node_get(op, op->id1ptr, r->id1, &np, &n);
	if (rc)
		return rc;
	if (r->len > n->dcap) {
		/* grow: a new node, the old one says where it went */
		uint16_t dcap = dcap_for(r->len);
		farm_fatptr p;
		uint8_t *d;
		if ((rc = acc_alloc(op, (uint32_t)sizeof(struct gn_hdr) + dcap,
		                    np.addr, &p, &d)))
			return rc;
		memcpy(d, n, sizeof(*n));
		if ((rc = node_put(op, np, &n)))
			return rc;
		n->flags |= GN_MOVED;
		n->fwd = p;
		n = (struct gn_hdr *)d;
		n->dcap = dcap;
		if (op->mode == M_APPLY) {
			op->newnode = p;
			op->oldnode = np;
		}
	} else if ((rc = node_put(op, np, &n))) {
		return rc;
	}
	n->otype = r->arg;
	n->time = r->time;
	n->version++;
	n->dlen = (uint16_t)r->len;
	memcpy(gn_data(n), op->data, r->len);
	memset(gn_data(n) + r->len, 0, n->dcap - r->len);
	return 0;
}

static int do_obj_delete(struct uop *op)
{
	const struct up_req *r = &op->rq;
	farm_fatptr np;
	struct gn_hdr *n;
	int rc = node_get(op, op->id1ptr, r->id1, &np, &n);
	if (rc)
		return rc;
	for (unsigned s = 0; s < FG_MAX_TYPES; s++) {
		uint32_t atype = n->lists[s].atype;
		farm_fatptr cur = n->lists[s].head;
		for (unsigned guard = 0; cur.addr; guard++) {
			struct gb_hdr *b;
			if (guard > MAX_BLOCKS)
				return L_STALE;
			if ((rc = block_get(op, cur, r->id1, atype, &b)))
				return rc;
			farm_fatptr next = b->next;
			if ((rc = acc_free(op, cur.addr)))
				return rc;
			cur = next;
		}
	}
	if ((rc = node_put(op, np, &n)))
		return rc;
	n->flags |= GN_DELETED;
	memset(n->lists, 0, sizeof(n->lists));
	if (op->mode == M_APPLY)
		op->oldnode = np;
	return 0;
}

/* After the KV store forgot (or moved past) it: free the old node. */
static int do_free_old(struct uop *op)
{
	uint8_t *d;
	int rc = acc_get(op, op->oldnode, &d);
	if (rc)
		return rc == L_STALE ? 0 : rc; /* gone already */
	const struct gn_hdr *n = (const struct gn_hdr *)d;
	if (n->id != op->rq.id1 || !(n->flags & (GN_DELETED | GN_MOVED)))
		return 0;
	return acc_free(op, op->oldnode.addr);
}

static int do_get(struct uop *op)
{
	const struct get_req *r = &op->grq;
	op->nout = 0;
	farm_fatptr np;
	struct gn_hdr *n;
	int rc = node_get(op, op->id1ptr, r->id1, &np, &n);
	if (rc)
		return rc;
	if (!op->out && !(op->out = malloc(FG_GET_MAX * sizeof(*op->out))))
		return -ENOMEM;
	int s = gn_slot(n, r->atype);
	if (s < 0)
		return 0;
	farm_fatptr cur = n->lists[s].head;
	for (unsigned guard = 0; cur.addr && op->nout < r->n; guard++) {
		struct gb_hdr *b;
		if (guard > MAX_BLOCKS)
			return L_STALE;
		if ((rc = block_get(op, cur, r->id1, r->atype, &b)))
			return rc;
		const struct gb_edge *e = gb_edges(b);
		for (unsigned i = 0; i < b->n; i++) {
			if (e[i].time < r->low) {
				cur.addr = 0;
				break;
			}
			if (e[i].time > r->high)
				continue;
			for (unsigned k = 0; k < r->n; k++)
				if (op->id2s[k] == e[i].id2) {
					struct fg_edge *o =
					        &op->out[op->nout++];
					o->id1 = r->id1;
					o->id2 = e[i].id2;
					o->atype = r->atype;
					o->time = e[i].time;
					o->len = e[i].len;
					memcpy(o->data, e[i].data, e[i].len);
					break;
				}
		}
		if (cur.addr)
			cur = b->next;
	}
	return (int)op->nout;
}

int fg_logic(struct uop *op)
{
	if (op->is_get)
		return do_get(op);
	if (op->step == S_FREE_OLD)
		return do_free_old(op);
	switch (op->rq.op) {
	case UP_OBJ_ADD: return do_obj_add(op);
	case UP_OBJ_UPDATE: return do_obj_update(op);
	case UP_OBJ_DELETE: return do_obj_delete(op);
	case UP_ASSOC_ADD: return do_assoc_add(op);
	case UP_ASSOC_DELETE: return do_assoc_delete(op);
	case UP_ASSOC_CHANGE_TYPE: return do_change_type(op);
	case UP_OBJ_LOAD: return do_obj_load(op);
	}
	return -EINVAL;
}
