/*
 * The global address space of one machine (addrspace.h).
 *
 * State: the ring for the current view and a table of regions keyed by id,
 * both under one reader-writer lock (lookups take it shared; views and
 * region creation are rare and take it exclusive). A table entry is a
 * region this machine holds (primary or backup copy) or a remote region
 * whose descriptor it has cached. Installing a view, with growth's
 * give-ups and the demoted copies they keep, is as_view.c's.
 */
#include "addrspace/as_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/log.h"

/* ---- table --------------------------------------------------------------- */

static uint32_t hash32(uint32_t x)
{
	return farm_ring_pos(x);
}

struct entry *farm_as_find(const farm_as *as, uint32_t id)
{
	for (uint32_t i = hash32(id) & (as->cap - 1);;
	     i = (i + 1) & (as->cap - 1)) {
		struct entry *e = &as->tab[i];
		if (e->id == id)
			return e;
		if (e->id == 0)
			return NULL;
	}
}

static int grow(farm_as *as)
{
	uint32_t ncap = as->cap * 2;
	struct entry *nt = calloc(ncap, sizeof(*nt));
	if (!nt)
		return -ENOMEM;
	for (uint32_t i = 0; i < as->cap; i++) {
		struct entry *e = &as->tab[i];
		if (!e->id)
			continue;
		uint32_t j = hash32(e->id) & (ncap - 1);
		while (nt[j].id)
			j = (j + 1) & (ncap - 1);
		nt[j] = *e;
	}
	free(as->tab);
	as->tab = nt;
	as->cap = ncap;
	return 0;
}

/* Insert or overwrite; under the write lock. */
int farm_as_put(farm_as *as, const struct entry *in)
{
	struct entry *e = farm_as_find(as, in->id);
	if (e) {
		*e = *in;
		return 0;
	}
	if ((as->used + 1) * 4 > as->cap * 3) {
		int rc = grow(as);
		if (rc)
			return rc;
	}
	uint32_t i = hash32(in->id) & (as->cap - 1);
	while (as->tab[i].id)
		i = (i + 1) & (as->cap - 1);
	as->tab[i] = *in;
	as->used++;
	return 0;
}

/* Remove (backward-shift deletion keeps probe chains intact). */
void farm_as_del(farm_as *as, uint32_t id)
{
	struct entry *e = farm_as_find(as, id);
	if (!e)
		return;
	uint32_t i = (uint32_t)(e - as->tab), mask = as->cap - 1;
	for (uint32_t j = (i + 1) & mask; as->tab[j].id; j = (j + 1) & mask) {
		uint32_t home = hash32(as->tab[j].id) & mask;
		/* Move j back to i when i lies cyclically in [home, j). */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			as->tab[i] = as->tab[j];
			i = j;
		}
	}
	as->tab[i] = (struct entry){0};
	as->used--;
}

/* ---- creation ------------------------------------------------------------ */

/* The last serial given (farm_as.serial; 0 is never one). */
static _Atomic uint64_t as_serials;

static void h_lookup(farm_loop *loop, const farm_msg_in *in, void *arg);
static void h_create(farm_loop *loop, const farm_msg_in *in, void *arg);
static void h_drop(farm_loop *loop, const farm_msg_in *in, void *arg);

int farm_as_create(farm_fabric *fab, farm_msg *msg,
                   const struct farm_as_attr *attr, farm_as **out)
{
	if (!fab || !msg || !out)
		return -EINVAL;
	struct farm_as_attr a = attr ? *attr : (struct farm_as_attr){0};
	if (!a.region_size)
		a.region_size = FARM_REGION_DEFAULT_SIZE;
	if (!farm_is_pow2(a.region_size) ||
	    a.region_size < FARM_REGION_MIN_SIZE ||
	    a.region_size > FARM_REGION_MAX_SIZE)
		return -EINVAL;
	farm_as *as = calloc(1, sizeof(*as));
	if (!as)
		return -ENOMEM;
	as->fab = fab;
	as->msg = msg;
	as->me = farm_msg_machine_id(msg);
	as->region_size = a.region_size;
	as->ring_attr = a.ring;
	/* Making a backup copy allocates and registers a region, which can
	 * take seconds on a loaded host; a dead peer is reported sooner by
	 * the fabric anyway. */
	as->rpc_timeout_ns =
	        a.rpc_timeout_ns ? a.rpc_timeout_ns : 10ull * 1000000000ull;
	as->seed = a.seed ? a.seed : farm_now_ns() ^ ((uint64_t)as->me << 40);
	as->serial = atomic_fetch_add_explicit(&as_serials, 1,
	                                       memory_order_relaxed) +
	             1;
	as->cap = 64;
	as->tab = calloc(as->cap, sizeof(*as->tab));
	int rc = as->tab ? 0 : -ENOMEM;
	if (!rc)
		rc = pthread_rwlock_init(&as->lock, NULL) ? -ENOMEM : 0;
	if (rc) {
		free(as->tab);
		free(as);
		return rc;
	}
	if ((rc = farm_msg_handle(msg, FARM_MSGT_AS_LOOKUP, h_lookup, as)) ||
	    (rc = farm_msg_handle(msg, FARM_MSGT_AS_CREATE, h_create, as)) ||
	    (rc = farm_msg_handle(msg, FARM_MSGT_AS_DROP, h_drop, as)) ||
	    (rc = farm_msg_handle(msg, FARM_MSGT_AS_GROWQ, farm_as_h_growq,
	                          as)) ||
	    (rc = farm_msg_handle(msg, FARM_MSGT_AS_LEAVEQ, farm_as_h_leaveq,
	                          as))) {
		/* Handlers cannot be unregistered: the farm_msg is unusable
		 * for another address space now; say so. */
		farm_err("addrspace: cannot register handlers: %s",
		         farm_strerror(rc));
		pthread_rwlock_destroy(&as->lock);
		free(as->tab);
		free(as);
		return rc;
	}
	*out = as;
	return 0;
}

void farm_as_destroy(farm_as *as)
{
	if (!as)
		return;
	for (uint32_t i = 0; i < as->cap; i++)
		if (as->tab[i].local)
			farm_region_destroy(as->tab[i].local);
	for (unsigned i = 0; i < as->ngiven; i++)
		farm_region_destroy(as->given[i].r);
	free(as->given);
	farm_ring_free(as->ring);
	farm_ring_free(as->prev);
	for (unsigned i = 0; i < as->nhist; i++)
		farm_ring_free(as->hist[i].ring);
	pthread_rwlock_destroy(&as->lock);
	free(as->tab);
	free(as);
}

/* Replicas of @region in the current view, or the one before (@prev). */
static unsigned replicas_in(farm_as *as, bool prev, uint32_t region,
                            uint32_t *out)
{
	if (!as || !out || region == FARM_REGION_ID_NONE)
		return 0;
	pthread_rwlock_rdlock(&as->lock);
	const farm_ring *g = prev ? as->prev : as->ring;
	unsigned n = g ? farm_ring_holders(g, region, out) : 0;
	pthread_rwlock_unlock(&as->lock);
	return n;
}

void farm_as_on_local(farm_as *as, farm_as_local_fn fn, void *ctx)
{
	if (!as)
		return;
	as_wrlock(as);
	as->on_local = fn;
	as->on_local_ctx = ctx;
	pthread_rwlock_unlock(&as->lock);
}

int farm_as_adopt(farm_as *as, uint32_t region, farm_region *r)
{
	if (!as || !r || region == 0 || region > FARM_REGION_ID_MAX ||
	    farm_region_size(r) != as->region_size)
		return -EINVAL;
	struct entry e = {.id = region, .kind = E_BACKUP, .local = r};
	as_wrlock(as);
	int rc = farm_as_find(as, region) ? -EEXIST : farm_as_put(as, &e);
	pthread_rwlock_unlock(&as->lock);
	return rc;
}

unsigned farm_as_prev_replicas(farm_as *as, uint32_t region, uint32_t *out)
{
	return replicas_in(as, true, region, out);
}

unsigned farm_as_replicas_at(farm_as *as, uint32_t cfg, uint32_t region,
                             uint32_t *out)
{
	if (!as || !out || region == FARM_REGION_ID_NONE || !cfg)
		return 0;
	pthread_rwlock_rdlock(&as->lock);
	const farm_ring *g = NULL;
	if ((uint32_t)atomic_load_explicit(&as->config_id,
	                                   memory_order_relaxed) == cfg)
		g = as->ring;
	else if (as->prev && (uint32_t)as->prev_cfg == cfg)
		g = as->prev;
	for (unsigned i = as->nhist; !g && i > 0; i--)
		if ((uint32_t)as->hist[i - 1].cfg == cfg)
			g = as->hist[i - 1].ring;
	unsigned n = g ? farm_ring_holders(g, region, out) : 0;
	pthread_rwlock_unlock(&as->lock);
	return n;
}

unsigned farm_as_promotable(farm_as *as, uint32_t *out, unsigned max)
{
	unsigned n = 0;
	if (!as || !out)
		return 0;
	pthread_rwlock_rdlock(&as->lock);
	for (uint32_t i = 0; as->ring && i < as->cap; i++) {
		const struct entry *e = &as->tab[i];
		if (e->id && e->kind == E_BACKUP && !e->filling &&
		    farm_ring_primary(as->ring, e->id) == as->me) {
			if (n < max)
				out[n] = e->id;
			n++;
		}
	}
	pthread_rwlock_unlock(&as->lock);
	return n;
}

int farm_as_promote(farm_as *as, uint32_t region)
{
	if (!as || !region)
		return -EINVAL;
	int rc = -ENOENT;
	as_wrlock(as);
	struct entry *e = farm_as_find(as, region);
	if (e && e->kind == E_BACKUP && !e->filling && as->ring &&
	    farm_ring_primary(as->ring, region) == as->me) {
		e->kind = E_PRIMARY;
		e->desc = farm_region_desc(e->local);
		rc = 0;
	} else if (e && e->kind == E_PRIMARY) {
		rc = 0;
	}
	pthread_rwlock_unlock(&as->lock);
	return rc;
}

/* Acquire: pairs with the release store of config_id when a
 * configuration is installed. */
uint64_t farm_as_config_id(const farm_as *as)
{
	return as ? atomic_load_explicit(&as->config_id, memory_order_acquire)
	          : 0;
}
const _Atomic uint64_t *farm_as_config_word(const farm_as *as)
{
	return &as->config_id;
}
uint64_t farm_as_region_size(const farm_as *as)
{
	return as ? as->region_size : 0;
}
uint32_t farm_as_machine_id(const farm_as *as)
{
	return as ? as->me : 0;
}
farm_fabric *farm_as_fabric(const farm_as *as)
{
	return as ? as->fab : NULL;
}

unsigned farm_as_replicas(farm_as *as, uint32_t region, uint32_t *out)
{
	return replicas_in(as, false, region, out);
}

uint32_t farm_as_extra(farm_as *as, uint32_t region)
{
	if (!as || region == FARM_REGION_ID_NONE)
		return FARM_RING_NO_EXTRA;
	pthread_rwlock_rdlock(&as->lock);
	uint32_t x = as->ring ? farm_ring_extra(as->ring, region)
	                      : FARM_RING_NO_EXTRA;
	pthread_rwlock_unlock(&as->lock);
	return x;
}

/*
 * A thread's recent answers about regions: the local copy and this
 * machine's role (farm_as_local_region), and the primary the view names
 * (farm_as_primary_of, which every shipped operation asks). A commit's
 * install and apply, a backup's apply and a write's shipping ask for the
 * same few regions several times an operation, and the table's read
 * lock (two atomic read-modify-writes a call) was 8% of YCSB-A's CPU. An
 * answer is kept under the generation it was found in (as
 * farm_as_resolve_cached's entries are: any change of the table or the
 * view bumps it first) and its address space's serial, so an answer
 * outliving its address space never serves another made at the same
 * address. The answer's region lives as long as the locked lookup's
 * would: what keeps a copy mapped after the lookup is the caller's
 * business either way.
 */
/* Two ways a set, as the resolve cache: region ids are random, and the few
 * a loop uses at once (its shards', the allocator's) shared a direct-mapped
 * set often enough to show in YCSB-A's profile. */
#define LR_SLOTS 32
struct lr_ent {
	uint64_t serial, gen; /* serial 0: empty */
	uint32_t id;
	uint32_t primary;
	bool viewed; /* primary is the view's (false: no view yet) */
	enum farm_as_role role;
	farm_region *r;
	uint8_t *base; /* r's memory */
};
static _Thread_local struct lr_ent lr_cache[LR_SLOTS];

/* The table's and the view's answer for @region, under the read lock. */
static void region_locked(farm_as *as, uint32_t region, struct lr_ent *out)
{
	pthread_rwlock_rdlock(&as->lock);
	struct entry *e = farm_as_find(as, region);
	if (e && (e->kind == E_PRIMARY || e->kind == E_BACKUP)) {
		out->r = e->local;
		out->role = (enum farm_as_role)e->kind;
		out->base = farm_region_base(e->local);
	}
	if (as->ring) {
		out->primary = farm_ring_primary(as->ring, region);
		out->viewed = true;
	}
	pthread_rwlock_unlock(&as->lock);
}

/* This thread's current answer for @region (not 0) of @as. */
static inline const struct lr_ent *region_answer(farm_as *as, uint32_t region)
{
	/* Acquire: pairs with the release bump of gen in as_wrlock, which
	 * every change of the table and the view takes before it changes
	 * anything; an answer found under this generation is still the
	 * table's. */
	uint64_t g = atomic_load_explicit(&as->gen, memory_order_acquire);
	struct lr_ent *c = &lr_cache[region % (LR_SLOTS / 2) * 2];
	if (c->serial == as->serial && c->id == region && c->gen == g)
		return c;
	if (c[1].serial == as->serial && c[1].id == region && c[1].gen == g)
		return &c[1];
	/* Tagged with the generation read before the lookup: a change since
	 * then makes the answer stale, never wrong. The first way's answer
	 * moves to the second. */
	c[1] = c[0];
	*c = (struct lr_ent){.serial = as->serial,
	                     .gen = g,
	                     .id = region,
	                     .role = FARM_AS_NONE};
	region_locked(as, region, c);
	return c;
}

farm_region *farm_as_local_region(farm_as *as, uint32_t region,
                                  enum farm_as_role *role)
{
	const struct lr_ent *c =
	        as && region ? region_answer(as, region) : NULL;
	if (role)
		*role = c ? c->role : FARM_AS_NONE;
	return c ? c->r : NULL;
}

/* Here, beside region_answer, so that its hit path is inline in the
 * pointer's (a commit asks a dozen times an update). */
void *farm_as_local_ptr(farm_as *as, farm_gaddr a, uint64_t len)
{
	if (!as || !farm_gaddr_valid(a, len, as->region_size))
		return NULL;
	const struct lr_ent *c = region_answer(as, farm_gaddr_region(a));
	if (c->role != FARM_AS_PRIMARY)
		return NULL;
	return c->base + farm_gaddr_offset(a);
}

int farm_as_primary_of(farm_as *as, uint32_t region, uint32_t *machine)
{
	const struct lr_ent *c = region_answer(as, region);
	if (!c->viewed)
		return -ENOENT;
	*machine = c->primary;
	return 0;
}

/* ---- handlers (run on the receiving machine's loop) ---------------------- */

/* A reply that cannot be sent means the caller is gone or its channel is
 * broken; its RPC times out. Say so and carry on. */
void farm_as_reply(farm_loop *loop, const struct farm_msg_token *tok,
                   const void *data, uint32_t len)
{
	int rc = farm_msg_reply(loop, tok, data, len);
	if (rc)
		farm_warn("addrspace: cannot reply to machine %" PRIu32 ": %s",
		          tok->machine, farm_strerror(rc));
}

void farm_as_reply_err(farm_loop *loop, const struct farm_msg_token *tok,
                       int status)
{
	int rc = farm_msg_reply_error(loop, tok, status);
	if (rc)
		farm_warn("addrspace: cannot reply to machine %" PRIu32 ": %s",
		          tok->machine, farm_strerror(rc));
}

void farm_as_bad_request(farm_as *as, farm_loop *loop, const farm_msg_in *in,
                         const char *what)
{
	atomic_fetch_add(&as->st.bad_requests, 1);
	farm_warn("addrspace: bad %s from machine %" PRIu32 " (%u bytes)", what,
	          in->src_machine, in->len);
	if (in->token.call_id)
		farm_as_reply_err(loop, &in->token, -EINVAL);
}

static struct desc_reply desc_reply_of(uint32_t region, const farm_mr_desc *d)
{
	return (struct desc_reply){.region = region,
	                           .machine = d->machine,
	                           .key = d->key,
	                           .addr = d->addr,
	                           .len = d->len,
	                           .access = d->access};
}

static void h_lookup(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_as *as = arg;
	struct lookup_req q;
	if (in->len != sizeof(q) || !in->token.call_id) {
		farm_as_bad_request(as, loop, in, "region lookup");
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	pthread_rwlock_rdlock(&as->lock);
	struct entry *e = q.region ? farm_as_find(as, q.region) : NULL;
	bool ok = e && e->kind == E_PRIMARY;
	/* A backup copy: recovery is promoting it, or the asker applied a
	 * configuration that makes us the region's primary and we have not
	 * applied it yet (the asker asks us only then). Ask again
	 * (retryable): -ENOENT would say the region does not exist. */
	bool recovering = e && e->kind == E_BACKUP;
	/* Or the asker's view still makes us the primary of a region that
	 * ours moved away (growth demoted our copy): it learns the new
	 * primary with the view. */
	if ((!e || e->kind == E_REMOTE) && q.region && as->ring &&
	    farm_ring_primary(as->ring, q.region) != as->me)
		recovering = true;
	farm_mr_desc d = ok ? e->desc : (farm_mr_desc){0};
	pthread_rwlock_unlock(&as->lock);
	if (!ok) {
		farm_as_reply_err(loop, &in->token,
		                  recovering ? -EAGAIN : -ENOENT);
		return;
	}
	struct desc_reply r = desc_reply_of(q.region, &d);
	farm_as_reply(loop, &in->token, &r, sizeof(r));
}

static void h_create(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_as *as = arg;
	struct create_req q;
	if (in->len != sizeof(q) || !in->token.call_id) {
		farm_as_bad_request(as, loop, in, "region create");
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	if (q.region == 0 || q.region > FARM_REGION_ID_MAX ||
	    q.size != as->region_size || q.primary != in->src_machine) {
		farm_as_bad_request(as, loop, in, "region create");
		return;
	}
	pthread_rwlock_rdlock(&as->lock);
	bool exists = farm_as_find(as, q.region) != NULL;
	pthread_rwlock_unlock(&as->lock);
	if (exists) {
		farm_as_reply_err(loop, &in->token, -EEXIST);
		return;
	}
	farm_region *r;
	int rc = farm_region_create(as->fab, as->region_size, &r);
	if (rc) {
		farm_as_reply_err(loop, &in->token, rc);
		return;
	}
	struct entry e = {.id = q.region,
	                  .kind = E_BACKUP,
	                  .created = true,
	                  .creator = in->src_machine,
	                  .local = r};
	as_wrlock(as);
	rc = farm_as_find(as, q.region) ? -EEXIST : farm_as_put(as, &e);
	pthread_rwlock_unlock(&as->lock);
	if (rc) {
		farm_region_destroy(r);
		farm_as_reply_err(loop, &in->token, rc);
		return;
	}
	/* Durable before the primary learns of the copy (and before any
	 * COMMIT-BACKUP for it can exist). */
	tell_local(as, q.region, r, true);
	farm_mr_desc bd = farm_region_desc(r);
	struct desc_reply d = desc_reply_of(q.region, &bd);
	farm_as_reply(loop, &in->token, &d, sizeof(d));
}

/* Whether a copy of @region is held here (primary or backup). */
static bool held_here(farm_as *as, uint32_t region)
{
	pthread_rwlock_rdlock(&as->lock);
	struct entry *e = farm_as_find(as, region);
	bool held = e && (e->kind == E_PRIMARY || e->kind == E_BACKUP);
	pthread_rwlock_unlock(&as->lock);
	return held;
}

int farm_as_backup_open(farm_as *as, uint32_t region)
{
	if (!as || region == 0 || region > FARM_REGION_ID_MAX)
		return -EINVAL;
	if (held_here(as, region))
		return -EEXIST;
	farm_region *r;
	int rc = farm_region_create(as->fab, as->region_size, &r);
	return rc ? rc : farm_as_backup_open_made(as, region, r);
}

int farm_as_backup_open_made(farm_as *as, uint32_t region, farm_region *r)
{
	if (!as || !r || region == 0 || region > FARM_REGION_ID_MAX ||
	    farm_region_size(r) != as->region_size) {
		farm_region_destroy(r);
		return -EINVAL;
	}
	struct entry ne = {
	        .id = region, .kind = E_BACKUP, .filling = true, .local = r};
	int rc;
	as_wrlock(as);
	struct entry *e = farm_as_find(as, region);
	if (e && (e->kind == E_PRIMARY || e->kind == E_BACKUP))
		rc = -EEXIST;
	else
		rc = farm_as_put(as, &ne); /* replaces a cached remote entry */
	pthread_rwlock_unlock(&as->lock);
	if (rc)
		farm_region_destroy(r);
	return rc;
}

int farm_as_backup_filled(farm_as *as, uint32_t region)
{
	if (!as || !region)
		return -EINVAL;
	as_wrlock(as);
	struct entry *e = farm_as_find(as, region);
	int rc = e && e->kind == E_BACKUP && e->filling ? 0 : -ENOENT;
	if (!rc) {
		/* Recorded for a whole-cluster restart (the manifest) before
		 * it counts: a filling copy is not, so without this a
		 * restarted machine came back without every copy data
		 * recovery had made it, and the empty one the ring's next
		 * commit opened there stayed filling for good. Under the
		 * lock, so that a drop cannot free the region meanwhile (the
		 * manifest's lock is never held while this one is taken). */
		tell_local(as, region, e->local, true);
		e->filling = false;
		/* Complete: no copy of this region is filled from a demoted
		 * one again (a later one would lack what came since). */
		for (unsigned i = 0; i < as->ngiven; i++)
			if (as->given[i].id == region)
				as->given[i].source = false;
	}
	pthread_rwlock_unlock(&as->lock);
	return rc;
}

bool farm_as_backup_filling(farm_as *as, uint32_t region)
{
	bool f = false;
	if (!as || !region)
		return false;
	pthread_rwlock_rdlock(&as->lock);
	struct entry *e = farm_as_find(as, region);
	f = e && e->kind == E_BACKUP && e->filling;
	pthread_rwlock_unlock(&as->lock);
	return f;
}

/*
 * A primary whose region allocation failed drops the backup copies it had
 * made (region_alloc.c). Only its own: the id may since have been made
 * again by another machine that became its primary, and that copy, or
 * any other, is a replica a published region counts on. The creator's
 * later CREATE cannot overtake its DROP (one channel, in order).
 */
static void h_drop(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	farm_as *as = arg;
	struct lookup_req q;
	if (in->len != sizeof(q)) {
		farm_as_bad_request(as, loop, in, "region drop");
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	farm_region *victim = NULL;
	bool refused = false;
	as_wrlock(as);
	struct entry *e = q.region ? farm_as_find(as, q.region) : NULL;
	if (e && e->kind == E_BACKUP && e->created &&
	    e->creator == in->src_machine) {
		victim = e->local;
		farm_as_del(as, q.region);
	} else if (e && (e->kind == E_BACKUP || e->kind == E_PRIMARY)) {
		refused = true;
	}
	pthread_rwlock_unlock(&as->lock);
	if (refused)
		farm_warn("addrspace: machine %" PRIu32 " asked to drop region "
		          "%" PRIu32 ", a copy it did not make here: kept",
		          in->src_machine, q.region);
	if (victim)
		tell_local(as, q.region, victim, false);
	farm_region_destroy(victim);
	if (in->token.call_id && refused)
		farm_as_reply_err(loop, &in->token, -EPERM);
	else if (in->token.call_id)
		farm_as_reply(loop, &in->token, NULL, 0);
}

void farm_as_stats_get(farm_as *as, struct farm_as_stats *out)
{
	if (!as || !out)
		return;
	memset(out, 0, sizeof(*out));
	pthread_rwlock_rdlock(&as->lock);
	for (uint32_t i = 0; i < as->cap; i++) {
		out->regions_primary += as->tab[i].kind == E_PRIMARY;
		out->regions_backup += as->tab[i].kind == E_BACKUP;
	}
	pthread_rwlock_unlock(&as->lock);
	out->lookups_sent = atomic_load(&as->st.lookups_sent);
	out->lookups_cached = atomic_load(&as->st.lookups_cached);
	out->reads_local = atomic_load(&as->st.reads_local);
	out->reads_remote = atomic_load(&as->st.reads_remote);
	out->writes_local = atomic_load(&as->st.writes_local);
	out->writes_remote = atomic_load(&as->st.writes_remote);
	out->bad_requests = atomic_load(&as->st.bad_requests);
	pthread_rwlock_rdlock(&as->lock);
	out->demoted = as->demoted;
	out->displaced = as->displaced;
	pthread_rwlock_unlock(&as->lock);
}

static int held_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct farm_as_held *)a)->region;
	uint32_t y = ((const struct farm_as_held *)b)->region;
	return x < y ? -1 : x > y;
}

unsigned farm_as_held(farm_as *as, struct farm_as_held *out, unsigned max)
{
	if (!as || (!out && max))
		return 0;
	unsigned n = 0;
	pthread_rwlock_rdlock(&as->lock);
	for (uint32_t i = 0; i < as->cap; i++) {
		const struct entry *e = &as->tab[i];
		if (e->kind != E_PRIMARY && e->kind != E_BACKUP)
			continue;
		if (n < max)
			out[n] = (struct farm_as_held){
			        .region = e->id,
			        .role = (enum farm_as_role)e->kind};
		n++;
	}
	pthread_rwlock_unlock(&as->lock);
	if (n && max)
		qsort(out, FARM_MIN(n, max), sizeof(*out), held_cmp);
	return n;
}
