#include "btcheck.h"

#include "tmpdir.h"

size_t bm_find(const struct bmodel *m, uint64_t k, bool *found)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (m->p[mid].k < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < m->n && m->p[lo].k == k;
	return lo;
}

void bm_put(struct bmodel *m, uint64_t k, uint64_t v)
{
	bool f;
	size_t i = bm_find(m, k, &f);
	if (f) {
		m->p[i].v = v;
		return;
	}
	if (m->n == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 64;
		m->p = realloc(m->p, m->cap * sizeof(*m->p));
		if (!m->p)
			abort(); /* a test's own memory */
	}
	memmove(m->p + i + 1, m->p + i, (m->n - i) * sizeof(*m->p));
	m->p[i] = (struct bm_pair){k, v};
	m->n++;
}

bool bm_del(struct bmodel *m, uint64_t k)
{
	bool f;
	size_t i = bm_find(m, k, &f);
	if (f) {
		memmove(m->p + i, m->p + i + 1, (m->n - i - 1) * sizeof(*m->p));
		m->n--;
	}
	return f;
}

bool bscan_cb(void *ctx, const void *key, uint32_t klen, const void *val,
              uint32_t vlen)
{
	struct bscan *s = ctx;
	if (klen != 8 || vlen != 8 || s->n == s->cap) {
		s->bad = true;
		return false;
	}
	uint64_t k = 0, v;
	for (int i = 0; i < 8; i++)
		k = k << 8 | ((const uint8_t *)key)[i];
	memcpy(&v, val, 8);
	s->out[s->n++] = (struct bm_pair){k, v};
	return true;
}

int bc_fail(const char *what, farm_gaddr a)
{
	fprintf(stderr, "btree invariant: %s (node %#llx)\n", what,
	        (unsigned long long)a);
	return -1;
}

bool bc_key_eq(const struct bt_key *a, const uint8_t *b, uint32_t blen)
{
	return !a->inf && bt_cmp(a->b, a->len, b, blen) == 0;
}

void bc_note(struct bc_nodes *s, farm_gaddr a)
{
	if (!s)
		return;
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 1024;
		s->a = realloc(s->a, s->cap * sizeof(*s->a));
	}
	s->a[s->n++] = a;
}

int bc_level(farm_bt *bt, farm_loop *loop, farm_gaddr first,
             const farm_gaddr *kids, size_t nk, farm_gaddr **next, size_t *nn,
             uint64_t *keys, struct bc_nodes *seen)
{
	const struct bt_layout *l = &bt->lay;
	uint8_t *n = malloc(l->leaf_size);
	struct bt_key prev_high = {.inf = true}, lo, hi;
	uint8_t last[FARM_BT_MAX_KEY];
	uint32_t lastlen = 0;
	bool have_last = false;
	size_t cap = 1024, idx = 0;
	*next = malloc(cap * sizeof(**next));
	*nn = 0;
	int rc = 0, level = -1;
	for (farm_gaddr a = first; a && !rc; a = bt_next(n), idx++) {
		if (farm_lf_read_sync(bt->txm, loop, a, l->leaf_size,
		                      UINT64_MAX, n) ||
		    farm_bt_check_node(l, n))
			return bc_fail("unreadable or malformed", a);
		bc_note(seen, a);
		if (kids && (idx >= nk || kids[idx] != a))
			return bc_fail(
			        "chain differs from the parents' children", a);
		if (level < 0)
			level = (int)bt_level(n);
		if ((int)bt_level(n) != level)
			return bc_fail("levels differ along a chain", a);
		farm_bt_fence(l, n, false, &lo);
		farm_bt_fence(l, n, true, &hi);
		if (idx == 0 ? !lo.inf
		             : (lo.inf || !bc_key_eq(&prev_high, lo.b, lo.len)))
			return bc_fail("low fence is not the previous high", a);
		prev_high = hi;
		for (uint32_t i = 0; i < bt_n(n); i++) {
			const uint8_t *e = bt_entry(l, n, i);
			if (bt_is_leaf(n)) {
				if (have_last &&
				    bt_cmp(last, lastlen, bt_ekey(e, true),
				           bt_eklen(e)) >= 0)
					return bc_fail("keys out of order", a);
				lastlen = bt_eklen(e);
				memcpy(last, bt_ekey(e, true), lastlen);
				have_last = true;
				(*keys)++;
				continue;
			}
			if (*nn == cap)
				*next = realloc(*next,
				                (cap *= 2) * sizeof(**next));
			(*next)[(*nn)++] = bt_echild(e);
		}
	}
	if (kids && idx != nk)
		rc = bc_fail("parents name children past the chain's end",
		             first);
	if (!rc && !prev_high.inf)
		rc = bc_fail("the last node's high fence is not infinite",
		             first);
	free(n);
	return rc;
}

int bc_verify_nodes(farm_bt *bt, farm_loop *loop, uint64_t *keys,
                    struct bc_nodes *seen)
{
	*keys = 0;
	farm_gaddr *kids = NULL, *next = NULL;
	size_t nk = 0, nn = 0;
	farm_gaddr first = bt->root;
	int rc = 0;
	for (unsigned depth = 0; depth < BT_MAX_LEVELS && first && !rc;
	     depth++) {
		rc = bc_level(bt, loop, first, depth ? kids : NULL, nk, &next,
		              &nn, keys, seen);
		free(kids);
		kids = next;
		nk = nn;
		first = nn ? next[0] : FARM_GADDR_NULL;
	}
	free(kids);
	return rc;
}

int bc_verify(farm_bt *bt, farm_loop *loop, uint64_t *keys)
{
	return bc_verify_nodes(bt, loop, keys, NULL);
}

int bc_node_open(struct bc_node *o, const char *tag, const char *region_size,
                 uint32_t buckets)
{
	memset(o, 0, sizeof(*o));
	tu_tmpdir(o->dir, sizeof(o->dir), tag);
	char conf[300];
	snprintf(conf, sizeof(conf), "%s/machine.conf", o->dir);
	FILE *f = fopen(conf, "w");
	if (!f)
		return -errno;
	fprintf(f,
	        "machine_id = 0\ndata_dir = %s\nregion_size = %s\n"
	        "threads = 1\n",
	        o->dir, region_size);
	fclose(f);
	int rc = farm_node_open_file(conf, &o->node);
	if (!rc)
		rc = farm_kv_create(o->node, NULL, buckets, &o->kv);
	if (rc)
		return rc;
	farm_node_set_app_loops(o->node, true);
	if ((rc = farm_node_start(o->node, 10000)) ||
	    (rc = farm_node_loop_open(o->node, 0, &o->loop)) ||
	    (rc = farm_node_wait_members(o->node, 1, 10000)) ||
	    (rc = farm_kv_attach(o->kv, o->loop)) ||
	    (rc = farm_kv_join_sync(o->kv, o->loop, 1, 10000)))
		return rc;
	o->txm = farm_node_txm(o->node);
	return 0;
}

int bc_node_close(struct bc_node *o)
{
	if (o->kv && o->loop)
		farm_kv_detach(o->kv, o->loop);
	if (o->loop)
		farm_node_loop_close(o->node, o->loop);
	if (o->node)
		farm_node_close(o->node);
	if (o->kv)
		farm_kv_destroy(o->kv);
	return tu_rmtree(o->dir) ? -1 : 0;
}
