/*
 * Point operations: get, put and delete, inside the caller's transaction
 * or (tx NULL) lock-free for a get and in a transaction of their own for
 * a put or delete.
 */
#include "btree/bt_int.h"

#include <errno.h>
#include <stdlib.h>

#define OWN_TX_TRIES FARM_TX_RUN_TRIES

int farm_bt_get(farm_bt *bt, farm_tx *tx, farm_loop *loop, const void *key,
                uint32_t klen, void *val, uint32_t cap, uint32_t *vlen)
{
	int rc = farm_bt_check_key(bt, key, klen);
	if (rc)
		return rc;
	if (!loop || !vlen || (cap && !val))
		return -EINVAL;
	_Alignas(64) uint8_t sb[BT_STACK_NODE];
	uint8_t *buf = bt->lay.leaf_size <= sizeof(sb)
	                       ? sb
	                       : malloc(bt->lay.leaf_size);
	if (!buf)
		return -ENOMEM;
	struct bt_found f;
	rc = farm_bt_locate(bt, tx, loop, key, klen, buf, &f);
	if (!rc) {
		bool found;
		uint32_t i = farm_bt_leaf_search(&bt->lay, f.leaf, key, klen,
		                                 &found);
		const uint8_t *e = bt_entry(&bt->lay, f.leaf, i);
		if (!found) {
			rc = -ENOENT;
		} else {
			*vlen = bt_evlen(e);
			if (*vlen > cap)
				rc = -EMSGSIZE;
			else if (*vlen)
				memcpy(val, bt_eval(&bt->lay, e), *vlen);
		}
	}
	if (buf != sb)
		free(buf);
	return rc;
}

/* The leaf for @key in @tx, writable; a split first when @insert needs
 * room that the leaf lacks. *@found and *@i: where the key is or goes. */
static int writable_for(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                        const void *key, uint32_t klen, bool insert,
                        uint8_t **w, uint32_t *i, bool *found)
{
	uint8_t *buf = malloc(bt->lay.leaf_size);
	if (!buf)
		return -ENOMEM;
	struct bt_found f;
	int rc = farm_bt_locate(bt, tx, loop, key, klen, buf, &f);
	free(buf);
	if (rc)
		return rc;
	*i = farm_bt_leaf_search(&bt->lay, f.leaf, key, klen, found);
	if (!insert && !*found)
		return -ENOENT; /* the leaf read stays in the read set */
	if (!insert || *found || bt_n(f.leaf) < bt->lay.leaf_cap) {
		rc = farm_tx_write(tx, f.a, (void **)w);
	} else {
		farm_gaddr a;
		rc = farm_bt_writable_leaf(bt, tx, loop, key, klen, true, &a,
		                           w);
		if (!rc)
			*i = farm_bt_leaf_search(&bt->lay, *w, key, klen,
			                         found);
	}
	return rc;
}

struct op_args {
	const void *key, *val;
	uint32_t klen, vlen;
	bool del;
};

static int do_op(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                 const struct op_args *o)
{
	uint8_t *w;
	uint32_t i;
	bool found;
	int rc = writable_for(bt, tx, loop, o->key, o->klen, !o->del, &w, &i,
	                      &found);
	if (rc)
		return rc;
	if (o->del)
		farm_bt_remove(&bt->lay, w, i);
	else if (found)
		farm_bt_leaf_set_val(&bt->lay, bt_entry(&bt->lay, w, i), o->val,
		                     o->vlen);
	else
		farm_bt_leaf_insert(&bt->lay, w, i, o->key, o->klen, o->val,
		                    o->vlen);
	return 0;
}

struct own_ctx {
	farm_bt *bt;
	farm_loop *loop;
	const struct op_args *o;
	bool absent;
};

/* One try of own_tx. An absent key's delete commits read-only: its leaf
 * read is validated, so -ENOENT is as current as a write. */
static int own_body(farm_tx *tx, void *ctx)
{
	struct own_ctx *c = ctx;
	int op = do_op(c->bt, tx, c->loop, c->o);
	c->absent = op == -ENOENT;
	return c->absent ? 0 : op;
}

/* @o in a transaction of its own, run again while the outcome is
 * retryable (farm_tx_run's tries and backoff). */
static int own_tx(farm_bt *bt, farm_loop *loop, const struct op_args *o)
{
	struct own_ctx c = {.bt = bt, .loop = loop, .o = o};
	int rc = farm_tx_run(bt->txm, loop, own_body, &c, OWN_TX_TRIES);
	return !rc && c.absent ? -ENOENT : rc;
}

static int write_op(farm_bt *bt, farm_tx *tx, farm_loop *loop,
                    const struct op_args *o)
{
	int rc = farm_bt_check_key(bt, o->key, o->klen);
	if (rc)
		return rc;
	if (!loop)
		return -EINVAL;
	if (!o->del && ((o->vlen && !o->val)))
		return -EINVAL;
	if (!o->del && o->vlen > bt->lay.val_max)
		return -EMSGSIZE;
	return tx ? do_op(bt, tx, loop, o) : own_tx(bt, loop, o);
}

int farm_bt_put(farm_bt *bt, farm_tx *tx, farm_loop *loop, const void *key,
                uint32_t klen, const void *val, uint32_t vlen)
{
	struct op_args o = {.key = key, .klen = klen, .val = val, .vlen = vlen};
	return write_op(bt, tx, loop, &o);
}

int farm_bt_delete(farm_bt *bt, farm_tx *tx, farm_loop *loop, const void *key,
                   uint32_t klen)
{
	struct op_args o = {.key = key, .klen = klen, .del = true};
	return write_op(bt, tx, loop, &o);
}
