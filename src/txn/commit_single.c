/*
 * Single-machine commits (every object's primary is the coordinator's
 * machine): lock locally in shared mode (lock-free reads still succeed),
 * validate locally, COMMIT-BACKUP to the backups (commit.c's phases), then
 * lock exclusively, install and unlock. The state machine that calls
 * these is commit.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/object.h"
#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "util/log.h"

static _Atomic uint64_t *local_hdr(farm_tx *tx, const struct txobj *o)
{
	return farm_as_local_ptr(tx->m->as, o->a, 64ull * o->lines);
}

/* An object this commit locked here: in our primary copy, or in the copy
 * growth demoted since (txn_own_ptr). */
static _Atomic uint64_t *own_hdr(farm_tx *tx, const struct txobj *o,
                                 bool *demoted)
{
	return (_Atomic uint64_t *)(void *)txn_own_ptr(
	        tx->m, o->a, 64ull * o->lines, demoted);
}

void farm_txn_single_unlock(farm_tx *tx, unsigned upto)
{
	for (unsigned i = 0; i < upto; i++) {
		struct txobj *o = &tx->o[i];
		if (!txo_is_write(o) || !o->locked)
			continue;
		bool demoted;
		_Atomic uint64_t *h = own_hdr(tx, o, &demoted);
		/* Unlocked, unchanged (a new object keeps its claim's mark
		 * until the abort frees it: commit.c, new_abort): pairs with
		 * the next locker's CAS and readers' acquire of the header. */
		if (h)
			atomic_store_explicit(
			        h,
			        obj_new_locked(o->version, o->flags & TXO_NEW),
			        memory_order_release);
		o->locked = false;
	}
}

void farm_txn_single_lock(farm_tx *tx)
{
	tx->ph = PH_VALIDATE;
	for (unsigned i = 0; i < tx->n && !tx->fail; i++) {
		struct txobj *o = &tx->o[i];
		_Atomic uint64_t *h = local_hdr(tx, o);
		if (!h) {
			/* Not ours as primary (any more, or not yet: recovery
			 * is promoting our copy): retryable. */
			tx->fail = -EAGAIN;
			break;
		}
		if (!txo_is_write(o)) {
			/* Pairs with the release of the version at unlock and
			 * install. */
			if (atomic_load_explicit(h, memory_order_acquire) !=
			    o->version)
				tx->fail = FARM_EVALIDATION;
			continue;
		}
		const struct farm_objhdr *oh = (const void *)h;
		if (farm_objhdr_load_incarn(oh) != o->incarn) {
			tx->fail = FARM_EFREED;
			break;
		}
		/* A new object holds the shared lock since its allocation
		 * (obj_claim_mark): it stays as it is. */
		uint64_t expect =
		        obj_new_locked(o->version, o->flags & TXO_NEW);
		/* Lock: pairs with the release that last unlocked or installed
		 * this header (or marked it new). */
		if (!atomic_compare_exchange_strong_explicit(
		            h, &expect, o->version | OBJ_LOCK_SHARED,
		            memory_order_acq_rel, memory_order_acquire)) {
			tx->fail = FARM_ECONFLICT;
			break;
		}
		o->locked = true;
	}
	farm_txn_tx_step(tx); /* PH_VALIDATE: unlock on failure, else backups */
}

void farm_txn_single_install(farm_tx *tx)
{
	farm_txm *m = tx->m;
	/* Every written object exclusive before the first is installed: a
	 * shared lock lets lock-free readers through, and they must not see
	 * one object installed and another one still as it was. */
	/* A view may demote the copy meanwhile (growth): then the demoted
	 * copy, where it was locked, gets the images (txn_own_ptr), and the
	 * allocator, which gave the region up, frees nothing there. */
	bool demoted = false;
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		bool d;
		_Atomic uint64_t *h =
		        txo_is_write(o) ? own_hdr(tx, o, &d) : NULL;
		/* Relaxed: obj_install_locked's release fence orders this
		 * mark before the object's new data (a reader's copy is
		 * checked as that fence's comment says), and its release
		 * store of each object's new header orders it before that
		 * header (pairs with readers' acquire of it): no reader sees
		 * one object installed and another still shared-locked. No
		 * later load here must wait for the mark, so it needs no
		 * sequentially consistent store (an xchg, a locked
		 * instruction, per object). */
		if (h)
			atomic_store_explicit(h, o->version | OBJ_LOCK_EXCL,
			                      memory_order_relaxed);
	}
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if (!txo_is_write(o))
			continue;
		uint8_t *p = (uint8_t *)own_hdr(tx, o, &demoted);
		if (!p)
			continue; /* cannot be: locked here */
		uint64_t nv = o->version + OBJ_VSTEP;
		obj_install_locked(p, o->lines, o->img, nv);
		txl_count(tx->tl, S_INSTALLS, 1);
		if ((o->flags & TXO_FREE) &&
		    (o->flags & (TXO_ARRAY | TXO_ELEM)) && !demoted)
			continue; /* freed whole below, then unlocked */
		if ((o->flags & TXO_FREE) && !demoted &&
		    farm_txn_free_at_commit(m, tx->tl, o->a, nv)) {
			o->locked = false; /* the allocator unlocks it */
			continue;
		}
		/* Install: body, then version. Pairs with readers' acquire of
		 * the header and the next locker's CAS. */
		atomic_store_explicit((_Atomic uint64_t *)(void *)p, nv,
		                      memory_order_release);
		o->locked = false;
	}
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		if ((o->flags & (TXO_FREE | TXO_ARRAY)) !=
		            (TXO_FREE | TXO_ARRAY) ||
		    !local_hdr(tx, o))
			continue;
		int rc = farm_galloc_free_array_local(
		        m->ga, tx->tl->loop, o->a, 64ull * o->lines, o->arr_n);
		if (rc) {
			farm_stat_add(&m->st.v[S_FREE_FAILED], 1);
			farm_warn("txn: array free at commit: %s",
			          farm_strerror(rc));
		}
	}
	for (unsigned i = 0; i < tx->n; i++) {
		struct txobj *o = &tx->o[i];
		bool d;
		_Atomic uint64_t *h =
		        txo_is_write(o) && (o->flags & TXO_FREE) &&
		                        (o->flags & (TXO_ARRAY | TXO_ELEM))
		                ? own_hdr(tx, o, &d)
		                : NULL;
		if (!h)
			continue;
		/* As an install: pairs with readers' acquire of the header. */
		atomic_store_explicit(h, o->version + OBJ_VSTEP,
		                      memory_order_release);
		o->locked = false;
	}
	farm_txn_tx_report(tx, 0);
	farm_txn_tx_finish(tx);
}
