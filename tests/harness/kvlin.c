#include "kvlin.h"

uint32_t vlen_of(uint64_t id)
{
	/* 16 and 32: inline; 96 and 300: indirect (val_inline 32) */
	static const uint32_t lens[] = {16, 32, 32, 96, 300};
	return lens[(id ^ (id >> 7)) % 5];
}

void fill_val(uint8_t *v, uint64_t id)
{
	uint32_t n = vlen_of(id);
	memcpy(v, &id, 8);
	for (uint32_t i = 8; i < n; i++)
		v[i] = (uint8_t)(id * 0x2545f491u + i * 7u);
}

uint64_t val_id(const uint8_t *v, uint32_t len)
{
	uint64_t id;
	if (len < 8)
		return 0;
	memcpy(&id, v, 8);
	if (id == 0 || vlen_of(id) != len)
		return 0;
	for (uint32_t i = 8; i < len; i++)
		if (v[i] != (uint8_t)(id * 0x2545f491u + i * 7u))
			return 0;
	return id;
}

void mkkey(uint8_t *k, const char *tag, unsigned i)
{
	memset(k, 0, KLEN);
	snprintf((char *)k, KLEN, "%s-%03u", tag, i);
}

unsigned kvl_shard(unsigned i, unsigned nshards)
{
	uint8_t k[KLEN];
	mkkey(k, "lin", i);
	return farm_ht_shard_index(farm_ht_hash(k, KLEN), nshards);
}

void kvl_path(const struct np_cluster *cl, unsigned i, char *path, size_t len)
{
	snprintf(path, len, "%s/lin-%u", cl->root, i);
}

int lin_init(struct lin *L, struct np_child *np, farm_ht *ht, unsigned w,
             uint64_t retry_ns, bool broken)
{
	memset(L, 0, sizeof(*L));
	L->np = np;
	L->ht = ht;
	L->w = FARM_MAX(1u, FARM_MIN(w, MAXW - 1)); /* MAXW - 1: lin_op_sync */
	L->retry_ns = retry_ns;
	L->broken = broken;
	L->quiet = -1;
	L->next_id = ((uint64_t)(np->me + 1) << 40) | 1;
	for (unsigned i = 0; i < MAXW; i++)
		L->s[i] = (struct slot){.L = L, .idx = i};
	char path[512];
	kvl_path(np->cl, np->me, path, sizeof(path));
	L->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
	return L->fd > 0 ? 0 : -1;
}

int lin_resume(struct lin *L, struct np_child *np, farm_ht *ht, unsigned w,
               uint64_t retry_ns)
{
	char path[512];
	size_t len = 0;
	kvl_path(np->cl, np->me, path, sizeof(path));
	struct rec *ev = np_read_file(path, &len);
	size_t nev = len / sizeof(*ev);
	uint32_t base = 0;
	uint64_t next = ((uint64_t)(np->me + 1) << 40) | 1;
	for (size_t k = 0; k < nev; k++) {
		base = FARM_MAX(base, ev[k].idx + 1);
		if (ev[k].value >= next && ev[k].value >> 40 == np->me + 1)
			next = ev[k].value + 1;
	}
	free(ev);
	memset(L, 0, sizeof(*L));
	L->np = np;
	L->ht = ht;
	L->w = FARM_MAX(1u, FARM_MIN(w, MAXW - 1));
	L->retry_ns = retry_ns;
	L->quiet = -1;
	L->base = base;
	L->next_id = next;
	for (unsigned i = 0; i < MAXW; i++)
		L->s[i] = (struct slot){.L = L, .idx = i};
	/* A torn last event (the kill) is cut off. */
	if (len % sizeof(struct rec) &&
	    truncate(path, (off_t)(nev * sizeof(struct rec))))
		return -1;
	L->fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	return L->fd > 0 ? 0 : -1;
}

void kvl_note(struct lin *L, size_t i)
{
	if (i == SIZE_MAX)
		return;
	if (L->nev == L->evcap) {
		size_t nc = L->evcap ? L->evcap * 2 : 1024;
		struct rec *ne = realloc(L->ev, nc * sizeof(*ne));
		if (!ne) {
			L->oom = 1;
			return;
		}
		L->ev = ne;
		L->evcap = nc;
	}
	L->ev[L->nev++] = L->r[i];
}

void kvl_flush(struct lin *L)
{
	if (L->nev && tu_send(L->fd, L->ev, L->nev * sizeof(*L->ev)))
		L->ioerr = 1;
	L->nev = 0;
}

int lin_close(struct lin *L)
{
	kvl_flush(L);
	if (L->fd > 0 && close(L->fd))
		L->ioerr = 1;
	L->fd = 0;
	free(L->r);
	free(L->ev);
	L->r = L->ev = NULL;
	return L->ioerr || L->oom ? -1 : 0;
}

size_t rec_add(struct lin *L, struct rec r)
{
	if (L->n == L->cap) {
		size_t nc = L->cap ? L->cap * 2 : 1u << 16;
		struct rec *nr = realloc(L->r, nc * sizeof(*nr));
		if (!nr) {
			L->oom = 1;
			return SIZE_MAX;
		}
		L->r = nr;
		L->cap = nc;
	}
	r.idx = L->base + (uint32_t)L->n;
	L->r[L->n] = r;
	return L->n++;
}

void lin_failed(struct lin *L, struct slot *s, int rc)
{
	if (!L->st.first_err)
		L->st.first_err = rc;
	(void)tu_errs_add(&L->st.errs, rc);
	if (!farm_tx_retryable(rc))
		L->st.hard++;
	if (!s || !L->retry_ns || !farm_tx_retryable(rc)) {
		if (s)
			s->tries = 0;
		return;
	}
	uint64_t now = np_now_ns();
	if (!s->tries)
		s->t_first = now;
	if (now - s->t_first >= L->retry_ns) {
		L->st.gave_up++;
		s->tries = 0;
		return;
	}
	s->retry_at = now + (1000000ull << FARM_MIN(s->tries, 6u));
	s->tries++;
	L->st.retries++;
}

struct rec *lin_answered(struct slot *s, int status, uint64_t *t)
{
	*t = np_now_ns();
	s->busy = 0;
	s->L->wake = 1;
	if (s->rec == SIZE_MAX)
		return NULL;
	struct rec *r = &s->L->r[s->rec];
	r->status = status;
	return r;
}

void lin_get_cb(farm_loop *loop, void *ctx, int status, const void *val,
                uint32_t len)
{
	(void)loop;
	struct slot *s = ctx;
	struct lin *L = s->L;
	uint64_t t;
	struct rec *r = lin_answered(s, status, &t);
	if (!r)
		return;
	if (status == 0) {
		uint64_t id = val_id(val, len);
		if (!id) {
			L->st.garbage++;
			r->kind = 0;
			s->tries = 0;
			return;
		}
		r->value = id;
		r->found = 1;
		r->t_resp = t;
		L->st.found++;
		s->tries = 0;
		if (r->key < NKEYS)
			L->cache[r->key] = (struct cache){
			        .valid = true, .value = id, .t = t};
	} else if (status == -ENOENT) {
		r->found = 0;
		r->t_resp = t;
		L->st.absent++;
		s->tries = 0;
	} else { /* no answer: constrains nothing */
		r->kind = 0;
		L->st.get_err++;
		lin_failed(L, s, status);
	}
	kvl_note(L, s->rec);
}

void lin_op_cb(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct slot *s = ctx;
	struct lin *L = s->L;
	uint64_t t;
	struct rec *r = lin_answered(s, status, &t);
	if (!r)
		return;
	if (r->kind == LC_PUT) {
		if (status == 0) {
			r->t_resp = t;
			s->tries = 0;
			struct cache *ca =
			        r->key < NKEYS ? &L->cache[r->key] : NULL;
			if (ca && ca->valid && r->t_inv > ca->t)
				ca->overwritten = true;
		} else { /* may or may not have happened: no response */
			L->st.put_err++;
			lin_failed(L, s, status);
		}
	} else if (status == 0 || status == -ENOENT) {
		r->found = status == 0;
		r->t_resp = t;
		status == 0 ? L->st.del_found++ : L->st.del_absent++;
		s->tries = 0;
	} else {
		r->kind = LC_DEL_ANY;
		L->st.del_err++;
		lin_failed(L, s, status);
	}
	kvl_note(L, s->rec);
}

void lin_issue(struct lin *L, struct slot *s, uint32_t kind, uint64_t key)
{
	uint8_t k[KLEN];
	mkkey(k, "lin", (unsigned)key);
	uint32_t client = L->np->me * MAXW + s->idx;
	struct rec r = {.client = client,
	                .kind = kind,
	                .key = key,
	                .t_resp = LC_NO_RESPONSE,
	                .status = -EINPROGRESS};
	int rc;
	s->busy = 1;
	s->key = key;
	s->kind = kind;
	if (kind == LC_GET) {
		r.t_inv = np_now_ns();
		s->rec = rec_add(L, r);
		rc = L->kv ? farm_kv_get(L->kv, L->np->loop, k, KLEN,
		                         lin_get_cb, s)
		           : farm_ht_get(L->ht, L->np->loop, k, KLEN,
		                         lin_get_cb, s);
		if (!rc)
			L->st.gets++;
	} else if (kind == LC_PUT) {
		uint8_t v[VMAX];
		uint64_t id = L->next_id++;
		fill_val(v, id);
		r.value = id;
		r.t_inv = np_now_ns();
		s->rec = rec_add(L, r);
		kvl_note(L, s->rec);
		kvl_flush(L); /* on file before it may take effect */
		rc = farm_ht_put(L->ht, L->np->loop, k, KLEN, v, vlen_of(id),
		                 lin_op_cb, s);
		if (!rc)
			L->st.puts++;
	} else {
		r.t_inv = np_now_ns();
		s->rec = rec_add(L, r);
		kvl_note(L, s->rec);
		kvl_flush(L);
		rc = farm_ht_del(L->ht, L->np->loop, k, KLEN, lin_op_cb, s);
		if (!rc)
			L->st.dels++;
	}
	if (rc) { /* not issued */
		if (s->rec != SIZE_MAX) {
			L->r[s->rec].kind = 0;
			L->r[s->rec].status = rc;
			if (kind != LC_GET)
				kvl_note(L, s->rec);
		}
		s->busy = 0;
		if (rc == -EAGAIN)
			L->st.eagain++;
		if (rc != -EAGAIN || L->retry_ns)
			lin_failed(L, s, rc);
	}
}

bool lin_hushed(const struct lin *L, uint64_t key)
{
	return L->quiet >= 0 &&
	       kvl_shard((unsigned)key, L->nshards) == (unsigned)L->quiet;
}

void lin_start(struct lin *L, struct slot *s)
{
	if (s->tries && (s->kind == LC_GET || !lin_hushed(L, s->key))) {
		lin_issue(L, s, s->kind, s->key);
		return;
	}
	s->tries = 0;
	uint64_t dice = farm_rand64(&L->np->rng);
	uint64_t key = (dice >> 8) % NKEYS;
	unsigned what = (unsigned)(dice % 100);
	struct cache *ca = &L->cache[key];
	if (what < 50 && L->broken && L->np->me == 0 && ca->valid &&
	    ca->overwritten && L->st.injected < 5) {
		/* The bug: answer from a cache our own put outdated. */
		uint64_t t = np_now_ns();
		kvl_note(L, rec_add(L, (struct rec){.client = L->np->me * MAXW +
		                                              s->idx,
		                                    .kind = LC_GET,
		                                    .key = key,
		                                    .value = ca->value,
		                                    .found = 1,
		                                    .t_inv = t,
		                                    .t_resp = t}));
		ca->valid = false;
		L->st.injected++;
		L->st.gets++;
		return;
	}
	uint32_t kind = what < 50 ? LC_GET : what < 85 ? LC_PUT : LC_DEL;
	lin_issue(L, s, kind != LC_GET && lin_hushed(L, key) ? LC_GET : kind,
	          key);
}

void lin_serve(struct lin *L, uint64_t ns)
{
	if (!ns) {
		(void)farm_loop_poll(L->np->loop);
		return;
	}
	L->wake = 0;
	(void)farm_loop_wait(L->np->loop, &L->wake, ns);
}

uint64_t lin_due(const struct slot *s, uint64_t now)
{
	if (s->busy)
		return UINT64_MAX;
	return s->tries && s->retry_at > now ? s->retry_at - now : 0;
}

int lin_run(struct lin *L, bool (*go)(struct lin *L, void *arg), void *arg)
{
	uint64_t t0 = np_now_ns(), t_go = 0;
	for (;;) {
		uint64_t now = np_now_ns();
		if (now - t_go >= 1000000ull) {
			if (!go(L, arg))
				break;
			t_go = now;
		}
		uint64_t wait = 1000000ull;
		for (unsigned i = 0; i < L->w && !L->oom; i++) {
			if (lin_due(&L->s[i], now) == 0)
				lin_start(L, &L->s[i]);
			wait = FARM_MIN(wait, lin_due(&L->s[i], now));
		}
		if (L->oom)
			break;
		lin_serve(L, wait);
	}
	uint64_t dd = np_now_ns() + 20ull * 1000000000ull;
	for (;;) {
		unsigned busy = 0;
		for (unsigned i = 0; i < L->w; i++)
			busy += L->s[i].busy != 0;
		if (!busy)
			break;
		if (np_now_ns() >= dd) {
			L->st.undrained = busy;
			break;
		}
		lin_serve(L, 1000000ull);
	}
	for (unsigned i = 0; i < MAXW; i++)
		L->s[i].tries = 0;
	kvl_flush(L);
	L->st.ns = np_now_ns() - t0;
	return L->oom ? -ENOMEM : 0;
}

int lin_op_sync(struct lin *L, uint32_t kind, uint64_t key, struct rec *r)
{
	struct slot *s = &L->s[MAXW - 1];
	s->tries = 0;
	s->kind = kind;
	s->key = key;
	do {
		uint64_t now = np_now_ns();
		if (s->tries && s->retry_at > now)
			lin_serve(L, s->retry_at - now);
		else
			lin_issue(L, s, s->kind, s->key);
		while (s->busy)
			lin_serve(L, 1000000ull);
	} while (s->tries);
	kvl_flush(L);
	*r = s->rec != SIZE_MAX ? L->r[s->rec] : (struct rec){0};
	return s->rec != SIZE_MAX ? r->status : -ENOMEM;
}

void lin_quiet(struct lin *L, int shard, unsigned nshards)
{
	L->quiet = shard;
	L->nshards = nshards;
	for (;;) {
		unsigned n = 0;
		for (unsigned i = 0; i < L->w; i++)
			n += L->s[i].busy && L->s[i].kind != LC_GET &&
			     lin_hushed(L, L->s[i].key);
		if (!n)
			return;
		lin_serve(L, 1000000ull);
	}
}

struct rec *kvl_load(const struct np_cluster *cl, unsigned i, size_t *n)
{
	char path[512];
	size_t len = 0;
	kvl_path(cl, i, path, sizeof(path));
	*n = 0;
	struct rec *ev = np_read_file(path, &len);
	if (!ev)
		return NULL;
	size_t nev = len / sizeof(*ev), max = 0;
	for (size_t k = 0; k < nev; k++)
		max = FARM_MAX(max, (size_t)ev[k].idx + 1);
	struct rec *r = calloc(max ? max : 1, sizeof(*r));
	assert_non_null(r);
	for (size_t k = 0; k < nev; k++)
		r[ev[k].idx] = ev[k];
	free(ev);
	*n = max;
	return r;
}

int kvl_check_some(const struct np_cluster *cl, uint64_t which, lc_report *rep,
                   uint64_t *nrec, unsigned budget_ms)
{
	lc_history *h = lc_new();
	assert_non_null(h);
	*nrec = 0;
	for (unsigned i = 0; i < FARM_MIN(np_nm, 64u); i++) {
		if (!((which >> i) & 1))
			continue;
		size_t n;
		struct rec *r = kvl_load(cl, i, &n);
		if (!r)
			fail_msg("machine %u left no history", i);
		for (size_t k = 0; k < n; k++) {
			if (!r[k].kind)
				continue;
			int op = lc_op(h, r[k].client, (enum lc_kind)r[k].kind,
			               r[k].key, r[k].value, r[k].found != 0,
			               r[k].t_inv, r[k].t_resp);
			assert_true(op >= 0);
			(*nrec)++;
		}
		free(r);
	}
	int rc = lc_check(h, rep, budget_ms);
	lc_free(h);
	return rc;
}

int kvl_check(const struct np_cluster *cl, lc_report *rep, uint64_t *nrec)
{
	uint64_t all = np_nm >= 64 ? ~0ull : (1ull << np_nm) - 1;
	return kvl_check_some(cl, all, rep, nrec, 60000);
}

void print_lin(unsigned i, const struct lin_stats *s)
{
	char errs[256];
	printf("lin: machine %u: %" PRIu64 " gets (%" PRIu64 " found, %" PRIu64
	       " absent, %" PRIu64 " errors), %" PRIu64 " puts (%" PRIu64
	       " errors), %" PRIu64 " deletes (%" PRIu64 " found, %" PRIu64
	       " absent, %" PRIu64 " errors) in %.2f s; %" PRIu64
	       " garbage values, %" PRIu64 " stale reads injected, %" PRIu64
	       " not drained; %" PRIu64 " retries, %" PRIu64
	       " given up, %" PRIu64 " not retryable; errors: %s\n",
	       i, s->gets, s->found, s->absent, s->get_err, s->puts, s->put_err,
	       s->dels, s->del_found, s->del_absent, s->del_err,
	       (double)s->ns / 1e9, s->garbage, s->injected, s->undrained,
	       s->retries, s->gave_up, s->hard,
	       tu_errs_str(&s->errs, errs, sizeof(errs)));
}
