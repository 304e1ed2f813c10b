/*
 * Joining the store: making this machine's shard, learning the others',
 * installing the list (or the one kept across a whole-cluster restart).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

static void shard_made(farm_loop *loop, void *ctx, int status,
                       struct farm_ht_shard sd)
{
	(void)loop;
	struct wait *w = ctx;
	w->status = status;
	w->sd = sd;
	w->done = 1;
}

/* A peer's shards (FARM_MSGT_KV_SHARD): @per descriptors. */
struct peer_wait {
	volatile int done;
	int status;
	unsigned per;
	struct farm_ht_shard *sd; /* per of them */
};

static void shard_reply(farm_loop *loop, void *ctx, int status,
                        const void *reply, uint32_t len)
{
	(void)loop;
	struct peer_wait *w = ctx;
	size_t want = w->per * sizeof(w->sd[0]);
	if (!status && len != want && len % sizeof(w->sd[0]) == 0 && len) {
		farm_err("kv: a peer made %zu shards, this machine %u: every "
		         "machine must give the same shards per machine",
		         len / sizeof(w->sd[0]), w->per);
		status = -EINVAL;
	} else if (!status && len != want) {
		status = FARM_ECORRUPT;
	}
	if (!status)
		memcpy(w->sd, reply, want);
	w->status = status;
	w->done = 1;
}

static int drive(farm_loop *loop, volatile int *done, int *status,
                 uint64_t deadline)
{
	uint64_t now = farm_now_ns();
	int rc =
	        farm_loop_wait(loop, done, deadline > now ? deadline - now : 1);
	return rc ? rc : *status;
}

/* Install @n shards @sd. */
static int install(farm_kv *kv, const struct farm_ht_shard *sd, unsigned n)
{
	int rc = farm_ht_set_shards(kv->ht, sd, n);
	if (rc)
		return rc;
	memcpy(kv->shards, sd, n * sizeof(*sd));
	kv->nshards = n;
	unsigned mine = 0;
	for (unsigned i = 0; i < n && mine < kv->per; i++)
		if (sd[i].machine == kv->me)
			kv->mine[mine++] = sd[i];
	if (mine == kv->per)
		/* Release: pairs with the acquire load in h_shard (kv.c),
		 * which then replies kv->mine. */
		atomic_store_explicit(&kv->shard_ready, 1,
		                      memory_order_release);
	/* Release: pairs with the acquire load in joined() (kv_int.h): the
	 * shard list above is seen. */
	atomic_store_explicit(&kv->joined, 1, memory_order_release);
	/* A shard is served by its bucket region's primary: even serving
	 * needs even primaries of these regions, which the rings alone do
	 * not give (README.md, "Capacity follows the cluster"). */
	if (kv->env.balance) {
		uint32_t rg[MAX_SHARDS];
		for (unsigned i = 0; i < n; i++)
			rg[i] = farm_gaddr_region(sd[i].base);
		kv->env.balance(kv->env.host, rg, n);
	}
	return 0;
}

/* After a whole-cluster restart: the shard list this machine kept. 1:
 * installed; 0: none kept (a fresh machine); <0: an error (a damaged
 * list, or one of another size than @nmachines x shards per machine when
 * @nmachines is nonzero). */
static int install_kept(farm_kv *kv, unsigned nmachines)
{
	struct farm_ht_shard sd[MAX_SHARDS];
	long n = kv->env.kept(kv->env.host, KV_KEPT, sd, sizeof(sd));
	if (n == -ENOENT || FARM_FAULT_SWITCH(FARM_FP_KV_NO_KEPT))
		return 0;
	if (n < 0)
		return (int)n;
	unsigned k = (unsigned)((size_t)n / sizeof(sd[0]));
	if (n == 0 || (size_t)n % sizeof(sd[0]) || (size_t)n > sizeof(sd)) {
		farm_err("kv: machine %" PRIu32 ": the kept shard list is "
		         "malformed (%ld bytes)",
		         kv->me, n);
		return FARM_ECORRUPT;
	}
	if (nmachines && k != nmachines * kv->per) {
		farm_err("kv: machine %" PRIu32 ": the store had %u shards "
		         "before the restart, not %u (%u machines x %u)",
		         kv->me, k, nmachines * kv->per, nmachines, kv->per);
		return -EINVAL;
	}
	int rc = install(kv, sd, k);
	if (!rc)
		farm_info("kv: machine %" PRIu32 ": %u shards of the previous "
		          "incarnation installed (whole-cluster restart)",
		          kv->me, k);
	return rc ? rc : 1;
}

/* Keep the installed list for a whole-cluster restart. */
static void keep_list(farm_kv *kv)
{
	int rc = kv->env.keep(kv->env.host, KV_KEPT, kv->shards,
	                      kv->nshards * sizeof(kv->shards[0]));
	if (rc && rc != -ENOTSUP)
		farm_warn("kv: machine %" PRIu32 ": the shard list is not "
		          "kept for a restart: %s",
		          kv->me, farm_strerror(rc));
}

/* This machine's shards, each in a region of its own (so each moves with
 * its region's primary alone), one after another. */
static int make_mine(farm_kv *kv, farm_loop *loop, uint64_t deadline)
{
	for (unsigned j = 0; j < kv->per; j++) {
		struct wait w = {0};
		int rc = farm_ht_make_shard_alone(kv->ht, loop, kv->nbuckets,
		                                  shard_made, &w);
		if (!rc)
			rc = drive(loop, &w.done, &w.status, deadline);
		if (rc)
			return rc;
		kv->mine[j] = w.sd;
	}
	/* Release: pairs with the acquire load in h_shard (kv.c). */
	atomic_store_explicit(&kv->shard_ready, 1, memory_order_release);
	return 0;
}

/* Machine @m's shards into @sd (kv->per of them), asked until it has made
 * them or @deadline passed. */
static int ask_peer(farm_kv *kv, farm_loop *loop, uint32_t m,
                    struct farm_ht_shard *sd, uint64_t deadline)
{
	for (;;) {
		/* A peer making a large shard does not answer until it is
		 * done (seconds for millions of buckets): wait for the reply
		 * as long as the caller allows, and ask again after a
		 * timeout. */
		uint64_t now = farm_now_ns();
		uint64_t left = deadline > now ? deadline - now : 1;
		struct peer_wait w = {.per = kv->per, .sd = sd};
		int rc = farm_msg_call(loop, m, 0, FARM_MSGT_KV_SHARD, NULL, 0,
		                       left, shard_reply, &w);
		if (!rc)
			rc = drive(loop, &w.done, &w.status, deadline);
		if ((rc != -EAGAIN && rc != -ETIMEDOUT) ||
		    farm_now_ns() >= deadline)
			return rc;
		/* m has not made its shards yet: serve, then ask again. */
		for (int i = 0; i < 64; i++)
			(void)farm_loop_poll(loop);
	}
}

int farm_kv_join_sync(farm_kv *kv, farm_loop *loop, unsigned nmachines,
                      int timeout_ms)
{
	if (!kv || !loop || nmachines == 0 || nmachines > MAX_SHARDS ||
	    nmachines * kv->per > MAX_SHARDS || kv->me >= nmachines ||
	    joined(kv))
		return -EINVAL;
	int kept = install_kept(kv, nmachines);
	if (kept)
		return kept < 0 ? kept : 0;
	uint64_t deadline = farm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int rc = make_mine(kv, loop, deadline);
	if (rc)
		return rc;
	/* Machine m's j-th shard is m x per + j: the same list everywhere. */
	struct farm_ht_shard sd[MAX_SHARDS];
	for (uint32_t m = 0; m < nmachines && !rc; m++) {
		if (m == kv->me)
			memcpy(sd + m * kv->per, kv->mine,
			       kv->per * sizeof(sd[0]));
		else
			rc = ask_peer(kv, loop, m, sd + m * kv->per, deadline);
	}
	if (!rc)
		rc = install(kv, sd, nmachines * kv->per);
	if (!rc)
		keep_list(kv);
	return rc;
}

/* The shard list from machine @from (FARM_MSGT_KV_SHARDS), asked again
 * after this long without an answer. */
#define JOIN_ASK_NS (500ull * 1000000ull)
struct shards_wait {
	volatile int done;
	int status;
	uint32_t n;
	struct farm_ht_shard sd[MAX_SHARDS];
};

static void shards_reply(farm_loop *loop, void *ctx, int status,
                         const void *reply, uint32_t len)
{
	(void)loop;
	struct shards_wait *w = ctx;
	uint32_t n = 0;
	if (!status && len >= 4)
		memcpy(&n, reply, 4);
	if (!status && (len < 4 || n == 0 || n > MAX_SHARDS ||
	                len != 4 + n * (uint32_t)sizeof(w->sd[0])))
		status = FARM_ECORRUPT; /* a malformed answer */
	if (!status) {
		w->n = n;
		memcpy(w->sd, (const uint8_t *)reply + 4, n * sizeof(w->sd[0]));
	}
	w->status = status;
	w->done = 1;
}

int farm_kv_join_existing_sync(farm_kv *kv, farm_loop *loop, uint32_t from,
                               int timeout_ms)
{
	if (!kv || !loop || from == kv->me || timeout_ms < 0 || joined(kv))
		return -EINVAL;
	int kept = install_kept(kv, 0);
	if (kept)
		return kept < 0 ? kept : 0;
	uint64_t deadline = farm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct shards_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	int rc;
	for (;;) {
		/* Each ask gets part of the budget: an answer can be lost
		 * (sent on the channel of the id's old holder, while @from
		 * still starts its channels with this new holder afresh), and
		 * only a later ask gets one. */
		uint64_t now = farm_now_ns();
		uint64_t left = deadline > now ? deadline - now : 1;
		uint64_t one = FARM_MIN(left, JOIN_ASK_NS);
		memset(w, 0, sizeof(*w));
		rc = farm_msg_call(loop, from, 0, FARM_MSGT_KV_SHARDS, NULL, 0,
		                   one, shards_reply, w);
		if (!rc) {
			rc = farm_loop_wait(loop, &w->done, one);
			if (!rc)
				rc = w->status;
		}
		if ((rc != -EAGAIN && rc != -ETIMEDOUT) ||
		    farm_now_ns() >= deadline)
			break;
		for (int i = 0; i < 64; i++) /* not joined yet: ask again */
			(void)farm_loop_poll(loop);
	}
	if (!rc)
		rc = install(kv, w->sd, w->n);
	if (!rc)
		keep_list(kv);
	free(w);
	return rc;
}
