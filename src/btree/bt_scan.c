/*
 * Range scans: the first leaf located as a lookup locates it, then right
 * siblings through each leaf's next pointer, each checked to start where
 * the one before ended (its low fence equals the previous high fence; a
 * sibling that does not is found again from its key). With a transaction
 * every leaf read is in its read set: a key inserted into the part of the
 * range scanned lands in one of them (their fences partition that part,
 * and a split rewrites the leaf it splits), so the commit fails
 * validation and no phantom is seen. Lock-free, the next leaf's READ is
 * started before the current leaf is visited (see prefetch).
 */
#include "btree/bt_int.h"

#include <errno.h>
#include <stdlib.h>

static int check_bound(const farm_bt *bt, const void *k, uint32_t len)
{
	if (!k)
		return 0;
	if (!len)
		return -EINVAL;
	return len > bt->lay.key_max ? -EMSGSIZE : 0;
}

struct scan {
	farm_bt *bt;
	farm_tx *tx;
	farm_loop *loop;
	const struct farm_bt_range *r;
	farm_bt_scan_fn fn;
	void *ctx;
	long count;
	bool stop;
	uint8_t *cur;   /* the leaf being visited, copied (see own_copy) */
	uint8_t *spare; /* lock-free: the second leaf buffer (see run_scan) */
	uint32_t avail; /* entries of the current leaf read (see prefetch) */
};

/* The leaf @leaf as the scan visits it: in a transaction, @leaf is the
 * transaction's own copy, which a callback writing in the transaction
 * changes under the scan (entries shift); the scan visits a copy of it
 * taken when it was read. Lock-free, @leaf is already the scan's buffer. */
static const uint8_t *own_copy(struct scan *s, const uint8_t *leaf)
{
	if (!s->tx)
		return leaf;
	memcpy(s->cur, leaf, s->bt->lay.leaf_size);
	return s->cur;
}

/* Visit @leaf's entries from @i; stop at the range's end or limit. The
 * end is compared only in the leaf that holds it (@last): every key of
 * an earlier leaf is below its high fence, itself below the end. */
static void visit(struct scan *s, const uint8_t *leaf, uint32_t i, bool last)
{
	const struct bt_layout *l = &s->bt->lay;
	const uint8_t *end = last ? s->r->end : NULL;
	uint32_t n = bt_n(leaf) < s->avail ? bt_n(leaf) : s->avail;
	for (; i < n && !s->stop; i++) {
		const uint8_t *e = bt_entry(l, leaf, i);
		const uint8_t *k = bt_ekey(e, true);
		if (end && bt_cmp(k, bt_eklen(e), end, s->r->end_len) >= 0) {
			s->stop = true;
			break;
		}
		s->count++;
		if (!s->fn(s->ctx, k, bt_eklen(e), bt_eval(l, e),
		           bt_evlen(e)) ||
		    (s->r->limit && s->count >= s->r->limit))
			s->stop = true;
	}
}

/* Whether the scan ends at @leaf's high fence. */
static bool ends_here(const struct scan *s, const struct bt_key *high)
{
	return high->inf || (s->r->end && bt_cmp(high->b, high->len, s->r->end,
	                                         s->r->end_len) >= 0);
}

/* Lock-free, start reading @leaf's right sibling into @into before
 * @leaf's entries from @i are visited, when the scan will need it (the
 * range goes on past @leaf and the limit is not reached inside it): the
 * READ's cache misses then overlap the visit (the fabric prefetches at
 * post, copies at poll). With a limit, only the sibling's header and the
 * entries the limit leaves are read: a prefix of the object, validated
 * as a whole read is, and the limit stops the scan inside it. The sibling
 * is still read after @leaf and checked as next_leaf checks it. */
static void prefetch(struct scan *s, const uint8_t *leaf, uint32_t i,
                     uint8_t *into, struct bt_lf_pending *pf)
{
	uint32_t n = bt_n(leaf), left = i < n ? n - i : 0;
	if (s->tx || !bt_next(leaf) ||
	    (s->r->limit && s->count + left >= s->r->limit))
		return;
	uint32_t upto = s->r->limit ? s->r->limit - (uint32_t)s->count - left
	                            : UINT32_MAX;
	(void)farm_bt_lf_start(s->bt, s->loop, bt_next(leaf), upto, into, pf);
	/* A start that failed leaves @pf idle: next_leaf reads it. */
}

/* The leaf after the one whose high fence is @high and next pointer
 * @next: the read @pf started, or one now, into @buf (lock-free) or
 * @s->tx. */
static int next_leaf(struct scan *s, farm_gaddr next, const struct bt_key *high,
                     uint8_t *buf, struct bt_lf_pending *pf,
                     const uint8_t **leaf)
{
	farm_bt *bt = s->bt;
	int rc = FARM_ECORRUPT;
	s->avail = UINT32_MAX;
	if (pf->busy) {
		BT_COUNT(bt, scan_leaves);
		BT_COUNT(bt, leaf_reads);
		rc = farm_bt_lf_finish(bt, s->loop, pf, leaf);
		if (!rc)
			s->avail = farm_bt_prefix_entries(&bt->lay, *leaf,
			                                  pf->size);
	} else if (next) {
		BT_COUNT(bt, scan_leaves);
		BT_COUNT(bt, leaf_reads);
		rc = farm_bt_read(bt, s->tx, s->loop, next, bt->lay.leaf_size,
		                  buf, leaf);
	}
	if (!rc) {
		struct bt_key low;
		farm_bt_fence(&bt->lay, *leaf, false, &low);
		if (bt_is_leaf(*leaf) && !low.inf &&
		    bt_cmp(low.b, low.len, high->b, high->len) == 0)
			return 0;
	} else if (rc != FARM_ECORRUPT) {
		return rc;
	}
	/* Not the leaf that starts at @high: find that one by its key. */
	s->avail = UINT32_MAX;
	struct bt_found f;
	rc = farm_bt_locate(bt, s->tx, s->loop, high->b, high->len, buf, &f);
	*leaf = f.leaf;
	return rc;
}

/* A read started for a leaf the scan did not visit after all (its
 * callback stopped it): waited for, as its buffer is the scan's. */
static long drain(struct scan *s, struct bt_lf_pending *pf)
{
	if (!pf->busy)
		return s->count;
	const uint8_t *unused;
	int rc = farm_bt_lf_finish(s->bt, s->loop, pf, &unused);
	/* What it read does not matter, only that it is over. */
	return pf->busy ? rc : s->count;
}

/* Ascending. Lock-free, leaves alternate between @buf and s->spare: the
 * next leaf is read into the buffer the current one is not in. */
static long run_scan(struct scan *s, uint8_t *buf)
{
	const struct farm_bt_range *r = s->r;
	const uint8_t *start = r->start ? r->start : (const uint8_t *)"";
	uint32_t slen = r->start ? r->start_len : 0;
	struct bt_found f;
	int rc = farm_bt_locate(s->bt, s->tx, s->loop, start, slen, buf, &f);
	if (rc)
		return rc;
	bool found;
	const uint8_t *leaf = own_copy(s, f.leaf);
	uint32_t i =
	        farm_bt_leaf_search(&s->bt->lay, leaf, start, slen, &found);
	for (;;) {
		struct bt_key high;
		farm_bt_fence(&s->bt->lay, leaf, true, &high);
		bool last = ends_here(s, &high);
		uint8_t *into = !s->tx && leaf == buf ? s->spare : buf;
		struct bt_lf_pending pf = {.busy = false};
		if (!last)
			prefetch(s, leaf, i, into, &pf);
		visit(s, leaf, i, last);
		if (s->stop || last)
			return drain(s, &pf);
		/* A prefix read holds every entry up to the limit. */
		if (bt_n(leaf) > s->avail)
			return -EIO;
		rc = next_leaf(s, bt_next(leaf), &high, into, &pf, &leaf);
		if (rc)
			return rc;
		leaf = own_copy(s, leaf);
		i = 0;
	}
}

/* Visit @leaf's entries below index @i, descending; stop below the
 * range's start or at its limit. */
static void visit_rev(struct scan *s, const uint8_t *leaf, uint32_t i)
{
	const struct bt_layout *l = &s->bt->lay;
	for (; i > 0 && !s->stop; i--) {
		const uint8_t *e = bt_entry(l, leaf, i - 1);
		const uint8_t *k = bt_ekey(e, true);
		if (s->r->start &&
		    bt_cmp(k, bt_eklen(e), s->r->start, s->r->start_len) < 0) {
			s->stop = true;
			break;
		}
		s->count++;
		if (!s->fn(s->ctx, k, bt_eklen(e), bt_eval(l, e),
		           bt_evlen(e)) ||
		    (s->r->limit && s->count >= s->r->limit))
			s->stop = true;
	}
}

/* Descending: the leaf holding the keys just below @end (a descent that
 * asks for low < end <= high), then, leaf by leaf, the one holding the
 * keys just below the previous low fence. Its high fence must be that
 * low fence: leaves only split, and the rightmost piece of a split keeps
 * the high fence. */
static long run_scan_rev(struct scan *s, uint8_t *buf)
{
	const struct farm_bt_range *r = s->r;
	const struct bt_layout *l = &s->bt->lay;
	struct bt_probe p = {.key = r->end, .klen = r->end_len, .before = true};
	struct bt_found f;
	int rc = farm_bt_locate_probe(s->bt, s->tx, s->loop, &p, buf, &f);
	bool found;
	uint32_t i = rc       ? 0
	             : r->end ? farm_bt_leaf_search(l, f.leaf, r->end,
	                                            r->end_len, &found)
	                      : bt_n(f.leaf);
	while (!rc) {
		const uint8_t *leaf = own_copy(s, f.leaf);
		visit_rev(s, leaf, i);
		struct bt_key low, high;
		farm_bt_fence(l, leaf, false, &low);
		if (s->stop || low.inf ||
		    (r->start &&
		     bt_cmp(low.b, low.len, r->start, r->start_len) <= 0))
			return s->count;
		p = (struct bt_probe){
		        .key = low.b, .klen = low.len, .before = true};
		BT_COUNT(s->bt, scan_leaves);
		rc = farm_bt_locate_probe(s->bt, s->tx, s->loop, &p, buf, &f);
		if (rc)
			break;
		farm_bt_fence(l, f.leaf, true, &high);
		/* In a transaction the leaf may be its older copy of a leaf
		 * split since (the descent went through the newer cache):
		 * its reads are not one snapshot, and it must run again.
		 * Lock-free, the leaf was just read and must meet @low. */
		if (high.inf || bt_cmp(high.b, high.len, low.b, low.len))
			return s->tx ? FARM_EVALIDATION : FARM_ECORRUPT;
		i = bt_n(f.leaf);
	}
	return rc;
}

long farm_bt_scan(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                  const struct farm_bt_range *r, farm_bt_scan_fn fn, void *ctx)
{
	if (!bt || !loop || !r || !fn)
		return -EINVAL;
	int rc = check_bound(bt, r->start, r->start_len);
	if (!rc)
		rc = check_bound(bt, r->end, r->end_len);
	if (rc)
		return rc;
	_Alignas(64) uint8_t sb[BT_STACK_NODE];
	uint8_t *buf = bt->lay.leaf_size <= sizeof(sb)
	                       ? sb
	                       : malloc(bt->lay.leaf_size);
	/* A transaction's scan copies the leaf it visits into @cur; a
	 * lock-free one reads the next leaf into it while visiting the
	 * current one in @buf (run_scan). */
	_Alignas(64) uint8_t sc[BT_STACK_NODE];
	uint8_t *cur = bt->lay.leaf_size <= sizeof(sc)
	                       ? sc
	                       : malloc(bt->lay.leaf_size);
	if (!buf || !cur) {
		if (buf != sb)
			free(buf);
		if (cur != sc)
			free(cur);
		return -ENOMEM;
	}
#ifdef FARM_FAULT_INJECTION
	if (atomic_load_explicit(&farm_bt_fault_scan_lf, memory_order_relaxed))
		tx = NULL; /* broken: the leaves stay out of the read set */
#endif
	struct scan s = {.bt = bt,
	                 .tx = tx,
	                 .loop = loop,
	                 .r = r,
	                 .fn = fn,
	                 .ctx = ctx,
	                 .cur = cur,
	                 .spare = cur,
	                 .avail = UINT32_MAX};
	long n = r->reverse ? run_scan_rev(&s, buf) : run_scan(&s, buf);
	if (buf != sb)
		free(buf);
	if (cur != sc)
		free(cur);
	return n;
}
