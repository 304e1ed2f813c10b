/*
 * Transactions (include/farm/txn.h): begin, the write set (write, alloc,
 * free), abort and release, and the blocking wrappers. A transaction
 * belongs to the loop that began it; its id is (machine, thread, sequence)
 * and its slot in the loop's table is the sequence's. Reads are read.c,
 * the commit is commit.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "txn/epoch.h"
#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/txn_testing.h"
#include "util/fault.h"

int farm_tx_begin(farm_txm *m, farm_loop *loop, farm_tx **out)
{
	struct txloop *tl = loop_state(m, loop);
	if (!tl || !out)
		return -EINVAL;
	/* A removed machine commits nothing and reads nothing it may serve:
	 * a final error, where a retryable one would keep an application
	 * retrying (and its commits failing) for as long as it runs. */
	if (txn_fenced(m))
		return FARM_EFENCED;
	uint64_t seq = 0;
	unsigned i;
	for (i = 0; i < TX_SLOTS; i++) {
		seq = txid_seq(++tl->seq);
		if (!tl->slots[seq % TX_SLOTS])
			break;
	}
	if (i == TX_SLOTS)
		return -EAGAIN;
	/* A recycled record keeps its arrays (objects, participants, log
	 * records, regions) and data chunks, emptied; everything else starts
	 * zeroed, as calloc gave it. */
	farm_tx *tx = tl->tx_free_list;
	if (tx) {
		tl->tx_free_list = tx->next_free;
		tl->tx_nfree--;
		/* Field by field: a copy of the whole record is as long as
		 * the memset. */
		struct txobj *o = tx->o;
		struct txpart *ph = tx->pheap;
		struct txrec *recs = tx->recs;
		uint32_t *regs = tx->regs;
		struct txdata *data = tx->data, *spare = tx->data_spare;
		unsigned cap = tx->cap, capheap = tx->capheap,
		         caprecs = tx->caprecs, capregs = tx->capregs,
		         nspare = tx->nspare;
		memset(tx, 0, sizeof(*tx));
		tx->o = o;
		tx->cap = cap;
		tx->pheap = ph;
		tx->capheap = capheap;
		tx->recs = recs;
		tx->caprecs = caprecs;
		tx->regs = regs;
		tx->capregs = capregs;
		tx->data = data;
		tx->data_spare = spare;
		tx->nspare = nspare;
	} else if (!(tx = calloc(1, sizeof(*tx)))) {
		return -ENOMEM;
	}
	tx->m = m;
	tx->tl = tl;
	tx->id = txid_make(m->me, tl->t, seq);
	tx->ep = farm_epoch_op_begin();
	tl->slots[seq % TX_SLOTS] = tx;
	*out = tx;
	return 0;
}

/* ---- the objects' data (txn_tx.h, struct txdata) ---------------------- */

/* A chunk of @cap bytes in @tx's list: at its head for the next small
 * objects, or after the head when it is @own, one object's (so the head
 * keeps its room). */
static struct txdata *data_chunk(farm_tx *tx, uint32_t cap, bool own)
{
	struct txdata *d = NULL;
	if (!own && cap == TXD_CHUNK && tx->data_spare) {
		d = tx->data_spare;
		tx->data_spare = d->next;
		tx->nspare--;
	} else if (!(d = malloc(sizeof(*d) + cap))) {
		return NULL;
	}
	d->used = own ? cap : 0;
	d->cap = cap;
	if (own && tx->data) {
		d->next = tx->data->next;
		tx->data->next = d;
	} else {
		d->next = tx->data;
		tx->data = d;
	}
	return d;
}

uint8_t *farm_txn_data_get(farm_tx *tx, uint32_t size)
{
	if (size > TXD_BIG) {
		struct txdata *d = data_chunk(tx, size, true);
		return d ? d->buf : NULL;
	}
	/* Rounded as malloc aligns: an application may keep any type in
	 * an object. */
	const size_t al = _Alignof(max_align_t);
	uint32_t need = (uint32_t)((size + al - 1) & ~(al - 1));
	struct txdata *d = tx->data;
	if (!d || d->cap != TXD_CHUNK || d->cap - d->used < need)
		d = data_chunk(tx, TXD_CHUNK, false);
	if (!d)
		return NULL;
	uint8_t *p = d->buf + d->used;
	d->used += need;
	return p;
}

/* Every object's data goes; the head chunk stays with the record when it
 * has a small objects' chunk's size (farm_tx_begin reuses it, emptied),
 * and up to TXD_SPARE more of that size as spares (data_chunk). */
static void data_put(farm_tx *tx)
{
	struct txdata *keep = tx->data;
	if (keep && keep->cap != TXD_CHUNK)
		keep = NULL;
	struct txdata *d = keep ? keep->next : tx->data;
	while (d) {
		struct txdata *next = d->next;
		if (d->cap == TXD_CHUNK && tx->nspare < TXD_SPARE) {
			d->next = tx->data_spare;
			tx->data_spare = d;
			tx->nspare++;
		} else {
			free(d);
		}
		d = next;
	}
	if (keep) {
		keep->next = NULL;
		keep->used = 0;
	}
	tx->data = keep;
}

void farm_txn_tx_free(farm_tx *tx)
{
	struct txloop *tl = tx->tl;
	if (tl->slots[txid_seq(tx->id) % TX_SLOTS] == tx)
		tl->slots[txid_seq(tx->id) % TX_SLOTS] = NULL;
	data_put(tx);
	farm_txn_sync_orphans_free(tx);
	farm_epoch_op_end(tx->ep);
	/* Kept for the next farm_tx_begin on this loop: a transaction record
	 * is 1.6 KB (past malloc's per-thread cache), and allocating and
	 * freeing it, with its object array, was a visible part of a short
	 * transaction's cost (fgraph's updates, perf). */
	if (tx->capheap > TX_POOL_PARTS) {
		free(tx->pheap);
		tx->pheap = NULL;
		tx->capheap = 0;
	}
	if (tx->caprecs > TX_POOL_PARTS) {
		free(tx->recs);
		tx->recs = NULL;
		tx->caprecs = 0;
	}
	if (tl->tx_nfree < TX_POOL && tx->cap <= TX_POOL_OBJS) {
		tx->next_free = tl->tx_free_list;
		tl->tx_free_list = tx;
		tl->tx_nfree++;
		return;
	}
	farm_txn_tx_pool_drop(tx);
}

void farm_txn_tx_pool_drop(farm_tx *tx)
{
	free(tx->data); /* data_put left one chunk at most */
	while (tx->data_spare) {
		struct txdata *d = tx->data_spare;
		tx->data_spare = d->next;
		free(d);
	}
	free(tx->o);
	free(tx->pheap);
	free(tx->recs);
	free(tx->regs);
	free(tx);
}

int farm_txn_parts_grow(farm_tx *tx)
{
	unsigned cap = tx->pheap ? tx->capheap : TXP_INLINE;
	unsigned nc = cap * 2;
	struct txpart *np = tx->pheap ? realloc(tx->pheap, nc * sizeof(*np))
	                              : malloc(nc * sizeof(*np));
	if (!np)
		return -ENOMEM;
	if (!tx->pheap)
		memcpy(np, tx->pinl, tx->nparts * sizeof(*np));
	tx->pheap = np;
	tx->capheap = nc;
	return 0;
}

int farm_tx_write(farm_tx *tx, farm_gaddr a, void **data)
{
	if (!tx || !data)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	struct txobj *o = tx_find(tx, a);
	if (!o)
		return -ENOENT;
	if (o->flags & TXO_FREE)
		return FARM_EFREED;
	o->flags |= TXO_WRITE;
	*data = o->data;
	return 0;
}

/* Distinct values in @v[0..n) (n small: a write set's regions or
 * primaries). */
static uint64_t distinct(const uint32_t *v, unsigned n)
{
	uint64_t d = 0;
	for (unsigned i = 0; i < n; i++) {
		unsigned j = 0;
		while (j < i && v[j] != v[i])
			j++;
		d += j == i;
	}
	return d;
}

/*
 * A commit's records in one log, at worst: every written object in it
 * (one entry and its image each), in a LOCK and one COMMIT-BACKUP per
 * primary (each record a header and every region id of the commit),
 * plus a COMMIT-PRIMARY and an ABORT. commit_room_check refuses a commit
 * needing more than half a log in any; this bounds what it counts.
 */
int farm_tx_write_fits(const farm_tx *tx, uint32_t nobj, uint32_t size)
{
	if (!tx || (nobj && (!size || size > FARM_TX_MAX_SIZE)))
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	uint64_t n = nobj, img = (uint64_t)nobj * 64 * obj_lines(size);
	uint32_t *reg = malloc(sizeof(*reg) * 2 * (tx->n + 1u));
	if (!reg)
		return -ENOMEM;
	uint32_t *prim = reg + tx->n + 1;
	unsigned w = 0;
	for (unsigned i = 0; i < tx->n; i++) {
		const struct txobj *o = &tx->o[i];
		if (!txo_is_write(o))
			continue;
		img += 64ull * o->lines;
		reg[w] = farm_gaddr_region(o->a);
		prim[w++] = o->primary;
	}
	n += w;
	uint64_t nreg = distinct(reg, w) + nobj; /* each new one: its own */
	if (nobj) /* new objects are this machine's */
		prim[w++] = tx->m->me;
	uint64_t nprim = distinct(prim, w);
	free(reg);
	if (n > UINT16_MAX)
		return -E2BIG;          /* a record's object count */
	nreg = nreg < 512 ? nreg : 512; /* commit_start.c refuses more */
	uint64_t worst = n * sizeof(struct rec_obj) + img +
	                 (nprim + 1) * rec_size(0, 0, (unsigned)nreg) + 128;
	return worst <= tx->m->R / 2 ? 0 : -E2BIG;
}

int farm_tx_free_array(farm_tx *tx, farm_fatptr first, uint32_t n)
{
	if (!tx || !n)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	unsigned el = obj_lines(first.size);
	if (!el)
		return -EINVAL;
	/* Every element must have been read here (so the commit locks and
	 * checks each), as it was allocated: same size, one incarnation. */
	struct txobj *o0 = tx_find(tx, first.addr);
	if (!o0)
		return -ENOENT;
	for (uint32_t i = 0; i < n; i++) {
		struct txobj *o = tx_find(tx, first.addr + 64ull * el * i);
		if (!o)
			return -ENOENT;
		if (o->flags & TXO_FREE)
			return FARM_EFREED;
		if (o->lines != el || o->primary != o0->primary ||
		    farm_incarn_count(o->incarn) != first.incarnation)
			return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct txobj *o = tx_find(tx, first.addr + 64ull * el * i);
		if (o)
			o->flags |= TXO_WRITE | TXO_FREE |
			            (i ? TXO_ELEM : TXO_ARRAY);
	}
	o0->arr_n = n;
	return 0;
}

int farm_tx_free_obj(farm_tx *tx, farm_gaddr a)
{
	if (!tx)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	struct txobj *o = tx_find(tx, a);
	if (!o)
		return -ENOENT;
	if (o->flags & TXO_FREE)
		return FARM_EFREED;
	o->flags |= TXO_WRITE | TXO_FREE;
	return 0;
}

/* ---- allocation ------------------------------------------------------- */

struct txal_ctx {
	farm_tx *tx;
	farm_tx_alloc_fn cont;
	void *ctx;
	uint32_t size;
	uint32_t n;    /* arrays: elements (0: one object) */
	uint64_t mark; /* what the claim set (obj_claim_mark); 0: mark here */
};

#ifdef FARM_FAULT_INJECTION
/* The object of the completion at FARM_FP_TX_ALLOC_CLAIMED, for the hook
 * (farm_tx_testing_claimed): it runs on this thread. */
static _Thread_local farm_gaddr testing_claimed;
#endif

/*
 * A new object goes back, the transaction not keeping it (an abort:
 * commit.c, new_abort; an allocation it does not take: new_give_back
 * below). It holds the claim's mark (obj_claim_mark), or the lock a LOCK
 * left it with on the way back (participant.c's unlock_objs restores the
 * mark): a free slot holds no lock (data recovery would wait for a locked
 * one for good), and the object must never look allocated and unlocked,
 * or a new backup's copy would take an object that goes back at the same
 * version, which no copy takes again. So it is freed first and unlocked
 * after: one object's header freed, then unlocked (@version stored in
 * @hv), then its slot reusable (farm_galloc_free_local_unlock); an array
 * (@n elements of @elem_bytes) freed whole while every element holds the
 * mark, then its first element unlocked here and each other one by the
 * caller after (farm_txn_new_unlock). The array was allocated on this
 * loop's slab and is freed on it, so nothing can claim its slot in
 * between (a large array's blocks stay retired until an epoch ends). Not
 * freed here (the region moved away: growth), it is unlocked all the
 * same. @hv NULL: no header here to unlock.
 */
void farm_txn_new_give_back(farm_txm *m, farm_loop *loop, farm_gaddr a,
                            uint64_t elem_bytes, uint32_t n,
                            _Atomic uint64_t *hv, uint64_t version)
{
	if (n)
		(void)farm_galloc_free_array_local(m->ga, loop, a, elem_bytes,
		                                   n);
	else if (!farm_galloc_free_local_unlock(m->ga, loop, a, version))
		return; /* freed, unlocked, then reusable */
	farm_txn_new_unlock(hv, version);
}

/*
 * Give back new object @a (@n elements of @size bytes; 0: one object) that
 * the transaction does not take (farm_txn_new_give_back), each header
 * unlocked at the version it holds. A header no longer local (its region
 * moved) is left as it is; its free is refused too.
 */
static void new_give_back(farm_txm *m, farm_loop *loop, farm_gaddr a,
                          uint32_t size, uint32_t n)
{
	unsigned el = obj_lines(size);
	_Atomic uint64_t *hv = farm_as_local_ptr(m->as, a, 16);
	if (!hv && !n)
		return;
	/* Relaxed: this loop's own new object, which no one else writes
	 * (an array's free below touches incarnations, not versions). */
	uint64_t v = hv ? atomic_load_explicit(hv, memory_order_relaxed) : 0;
	farm_txn_new_give_back(m, loop, a, 64ull * el, n, hv,
	                       v & ~OBJ_LOCK_MASK);
	for (uint32_t i = 1; i < n; i++) {
		hv = farm_as_local_ptr(m->as, a + 64ull * el * i, 16);
		if (hv)
			farm_txn_new_unlock(
			        hv,
			        atomic_load_explicit(hv, memory_order_relaxed) &
			                ~OBJ_LOCK_MASK);
	}
}

/* A new array's elements join the write set as new objects (its first
 * element marked TXO_ARRAY, so an abort frees the array whole). */
static int tx_add_array(farm_tx *tx, farm_gaddr a, uint32_t size, uint32_t n,
                        uint64_t mark, farm_fatptr *fp, void **data)
{
	farm_txm *m = tx->m;
	unsigned el = obj_lines(size);
	unsigned n0 = tx->n;
	for (uint32_t i = 0; i < n; i++) {
		farm_gaddr ai = a + 64ull * el * i;
		const struct farm_objhdr *h = farm_as_local_ptr(m->as, ai, 16);
		struct txobj *o = tx_add(tx, ai);
		uint8_t *d = o ? farm_txn_data_get(tx, size) : NULL;
		if (!d || !h) {
			/* Their data stays the transaction's until it ends. */
			tx->n = n0;
			return d || !o ? -EREMOTE : -ENOMEM;
		}
		memset(d, 0, size);
		uint64_t w = farm_objhdr_load_incarn(h);
		/* Never the allocator's free-pending mark (a slot is freed
		 * without it): a new object's versions would keep it. */
		uint64_t v = farm_objhdr_load_version(h) &
		             ~(OBJ_LOCK_MASK | FARM_OBJHDR_FREE_PENDING);
		if (!mark) /* testing: marked after the claim */
			obj_mark_new(h, v);
		*o = (struct txobj){.a = ai,
		                    .size = size,
		                    .lines = el,
		                    .version = v,
		                    .incarn = w,
		                    .primary = m->me,
		                    .flags = TXO_READ | TXO_WRITE | TXO_NEW |
		                             (i ? TXO_ELEM : TXO_ARRAY),
		                    .data = d,
		                    .arr_n = i ? 0 : n};
		if (!i) {
			*fp = (farm_fatptr){.addr = ai,
			                    .size = size,
			                    .incarnation =
			                            farm_incarn_count(w)};
			*data = d;
		}
	}
	return 0;
}

static void txal_done(farm_loop *loop, void *ctx, int status, farm_gaddr a)
{
	(void)loop;
	struct txal_ctx *c = ctx;
	farm_tx *tx = c->tx;
	farm_txm *m = tx->m;
	tx->reads_out--;
#ifdef FARM_FAULT_INJECTION
	if (!status) {
		/* Claimed, not taken yet: the window a claim without its mark
		 * left open (obj_claim_mark). */
		testing_claimed = a;
		FARM_FAULT_POINT(FARM_FP_TX_ALLOC_CLAIMED);
		testing_claimed = FARM_GADDR_NULL;
	}
#endif
	if (tx->released) {
		if (!status)
			new_give_back(m, tx->tl->loop, a, c->size, c->n);
		free(c);
		(void)farm_txn_tx_gone(tx);
		return;
	}
	farm_fatptr fp = {0};
	void *data = NULL;
	int st = status;
	if (!st) {
		/* Ours alone until commit: its header read directly (not
		 * local: the region moved away meanwhile, -EAGAIN below). */
		const struct farm_objhdr *h =
		        FARM_FAULT_SWITCH(FARM_FP_TX_ALLOC_MOVED)
		                ? NULL
		                : farm_as_local_ptr(m->as, a, 16);
		if (c->n) {
			st = h ? tx_add_array(tx, a, c->size, c->n, c->mark,
			                      &fp, &data)
			       : -EAGAIN;
			if (st)
				new_give_back(m, tx->tl->loop, a, c->size,
				              c->n);
			farm_tx_alloc_fn cont = c->cont;
			void *cctx = c->ctx;
			free(c);
			cont(tx, cctx, st, fp, data);
			return;
		}
		struct txobj *o = tx_add(tx, a);
		uint8_t *d = o ? farm_txn_data_get(tx, c->size) : NULL;
		if (!d) {
			if (o)
				tx->n--;
			st = -ENOMEM;
		} else if (!h) {
			/* Allocated here (a remote hint is not followed), but
			 * its region left this machine since: growth made
			 * another machine its primary. Nothing is lost by
			 * trying again (the allocator picks a region still
			 * here); a hard error would fail a put during growth
			 * that a retry completes. */
			if (!FARM_FAULT_SWITCH(FARM_FP_TX_ALLOC_MOVED_KEPT))
				tx->n--;
			st = -EAGAIN;
		} else {
			/* Never the allocator's free-pending mark (a
			 * slot is freed without it): a new object's
			 * versions would keep it. */
			uint64_t v =
			        farm_objhdr_load_version(h) &
			        ~(OBJ_LOCK_MASK | FARM_OBJHDR_FREE_PENDING);
			uint64_t w = farm_objhdr_load_incarn(h);
			if (!c->mark) /* testing: marked after the claim */
				obj_mark_new(h, v);
			memset(d, 0, c->size);
			*o = (struct txobj){.a = a,
			                    .size = c->size,
			                    .lines = obj_lines(c->size),
			                    .version = v,
			                    .incarn = w,
			                    .primary = m->me,
			                    .flags = TXO_READ | TXO_WRITE |
			                             TXO_NEW,
			                    .data = d};
			fp = (farm_fatptr){.addr = a,
			                   .size = c->size,
			                   .incarnation = farm_incarn_count(w)};
			data = d;
		}
		if (st) /* give the object back */
			new_give_back(m, tx->tl->loop, a, c->size, 0);
	}
	farm_tx_alloc_fn cont = c->cont;
	void *cctx = c->ctx;
	free(c);
	cont(tx, cctx, st, fp, data);
}

int farm_tx_alloc(farm_tx *tx, uint32_t size, farm_gaddr hint,
                  farm_tx_alloc_fn cont, void *ctx)
{
	if (!tx || !cont)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	unsigned lines = obj_lines(size);
	if (!lines)
		return size ? -E2BIG : -EINVAL;
	/* Allocated on this machine, next to @hint when the hint is local
	 * too; a remote hint is not followed yet (the new object would be
	 * another machine's, whose header this machine cannot read here). */
	if (hint && !farm_as_local_ptr(tx->m->as, hint, 16))
		hint = FARM_GADDR_NULL;
	struct txal_ctx *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct txal_ctx){.tx = tx,
	                       .cont = cont,
	                       .ctx = ctx,
	                       .size = size,
	                       .mark = obj_claim_mark()};
	/* Marked by the claim itself: never seen allocated and unlocked
	 * before its commit (obj_claim_mark). */
	int rc =
	        farm_galloc_alloc_marked(tx->m->ga, tx->tl->loop, 64ull * lines,
	                                 hint, c->mark, txal_done, c);
	if (rc)
		free(c);
	else
		tx->reads_out++;
	return rc;
}

int farm_tx_alloc_array(farm_tx *tx, uint32_t elem_size, uint32_t n,
                        farm_gaddr hint, farm_tx_alloc_fn cont, void *ctx)
{
	if (!tx || !cont || !n)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	unsigned el = obj_lines(elem_size);
	if (!el)
		return elem_size ? -E2BIG : -EINVAL;
	/* Every element is in the commit's records: one commit must fit
	 * half a log (-E2BIG at commit otherwise); here, at most 1 MiB. */
	if ((uint64_t)el * n > FARM_ALLOC_MAX_OBJECT / 64)
		return -E2BIG;
	if (hint && !farm_as_local_ptr(tx->m->as, hint, 16))
		hint = FARM_GADDR_NULL;
	struct txal_ctx *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct txal_ctx){.tx = tx,
	                       .cont = cont,
	                       .ctx = ctx,
	                       .size = elem_size,
	                       .n = n,
	                       .mark = obj_claim_mark()};
	int rc = farm_galloc_alloc_array_marked(tx->m->ga, tx->tl->loop,
	                                        64ull * el, n, hint, c->mark,
	                                        txal_done, c);
	if (rc)
		free(c);
	else
		tx->reads_out++;
	return rc;
}

/* ---- the end of a transaction ----------------------------------------- */

int farm_tx_abort(farm_tx *tx)
{
	if (!tx)
		return -EINVAL;
	if (tx->ph != PH_OPEN)
		return FARM_ECLOSED;
	if (tx->reads_out)
		return -EBUSY;
	tx->outcome = -ECANCELED;
	farm_txn_tx_finish(tx);
	return 0;
}

void farm_tx_free(farm_tx *tx)
{
	if (!tx)
		return;
	tx->released = true;
	if (tx->ph == PH_OPEN && !tx->reads_out) {
		tx->outcome = -ECANCELED;
		farm_txn_tx_finish(tx); /* frees */
	} else if (tx->ph == PH_DONE) {
		farm_txn_tx_free(tx);
	}
	/* else: a commit or reads are in flight; freed when they end. */
}

/* A read came back to a transaction the application already freed. */
bool farm_txn_tx_gone(farm_tx *tx)
{
	if (!tx->released || tx->reads_out)
		return false;
	if (tx->ph == PH_OPEN) {
		tx->outcome = -ECANCELED;
		farm_txn_tx_finish(tx);
	}
	return true;
}

bool farm_tx_retryable(int outcome)
{
	/* FARM_EPEERDEAD and -ETIMEDOUT included: a commit reports them only
	 * once its ABORT records have landed (or before it wrote anything),
	 * so it did not commit; recovery never decides otherwise for a live
	 * coordinator (recover.c). Retried after the configuration changes,
	 * they succeed. */
	return outcome == FARM_ECONFLICT || outcome == FARM_EVALIDATION ||
	       outcome == -ENOSPC || outcome == -EBUSY || outcome == -EAGAIN ||
	       outcome == FARM_EPEERDEAD || outcome == -ETIMEDOUT ||
	       outcome == FARM_ELEASE;
}

/* ---- testing (txn_testing.h): for tests only --------------------------- */

uint64_t farm_tx_testing_version(farm_tx *tx, farm_gaddr a)
{
	struct txobj *o = tx ? tx_find(tx, a) : NULL;
	return o ? o->version : UINT64_MAX;
}

farm_gaddr farm_tx_testing_claimed(void)
{
#ifdef FARM_FAULT_INJECTION
	return testing_claimed;
#else
	return FARM_GADDR_NULL;
#endif
}

uint64_t farm_tx_testing_id(farm_tx *tx)
{
	return tx ? tx->id : 0;
}

/* One round of farm_txn_testing_participants: NULL, or what went wrong. */
static const char *parts_round(farm_tx *tx, unsigned nids, bool first)
{
	/* Ids in a scrambled order: 509 is prime, so a bijection unless
	 * @nids is a multiple of it. */
	for (uint32_t i = 0; i < nids; i++) {
		uint32_t mach = (i * 509u + 7u) % nids;
		struct txpart *p = tx_part_get(tx, mach);
		if (!p)
			return "tx_part_get: out of memory";
		if (p->mach != mach)
			return "tx_part_get returned another machine's entry";
		p->need += mach + 1;
		if (first && i < TXP_INLINE && tx->pheap)
			return "the heap used before the inline entries ran "
			       "out";
	}
	if (tx->nparts != nids || (nids > TXP_INLINE && !tx->pheap))
		return "not every machine added, or no heap past the inline "
		       "ones";
	const struct txpart *pt = tx_parts(tx);
	for (unsigned i = 0; i < nids; i++)
		if (pt[i].mach != i || pt[i].need != i + 1)
			return "the list is not sorted by machine, or lost a "
			       "count";
	uint32_t last = nids - 1;
	if (tx_part_get(tx, last) != tx_part(tx, last) || tx->nparts != nids)
		return "getting an entry again added one";
	tx_part_mark(tx, last, TXP_LOCKED);
	if (!tx_part_has(tx, last, TXP_LOCKED) ||
	    (last && tx_part_has(tx, last - 1, TXP_LOCKED)))
		return "a flag not set, or set on a neighbour";
	tx_part_mark(tx, nids, TXP_LOCKED); /* not a participant */
	if (tx_part(tx, nids) || tx->nparts != nids)
		return "marking a machine that is not a participant added it";
	tx_need_clear(tx);
	if (tx->nparts || tx_part(tx, last))
		return "tx_need_clear left participants";
	return NULL;
}

int farm_txn_testing_participants(unsigned nids, char *why, size_t len)
{
	if (!nids || !why || !len)
		return -1;
	farm_tx *tx = calloc(1, sizeof(*tx));
	const char *bad = tx ? NULL : "out of memory";
	for (unsigned round = 0; !bad && round < 2; round++)
		bad = parts_round(tx, nids, round == 0);
	if (!bad && nids > TXP_INLINE && tx->capheap < nids)
		bad = "the heap's memory was not kept";
	if (tx)
		free(tx->pheap);
	free(tx);
	snprintf(why, len, "%s", bad ? bad : "");
	return bad ? -1 : 0;
}
