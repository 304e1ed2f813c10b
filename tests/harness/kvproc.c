#include "kvproc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run with FARM_KV_LOOKUP=owner, a machine that looked nothing up at an
 * owner, and served nothing as one, did not test the owner path. */
bool kvp_owner_unused(const struct np_child *np, farm_kv *kv)
{
	const char *lk = getenv("FARM_KV_LOOKUP");
	if (!lk || strcmp(lk, "owner"))
		return false;
	struct farm_kv_owner_stats o;
	farm_kv_owner_stats_get(kv, &o);
	printf("m%u: owner path: %" PRIu64 " gets sent, %" PRIu64
	       " retried, %" PRIu64 " served, %" PRIu64 " refused\n",
	       np->me, o.sent, o.retries, o.served, o.refused);
	fflush(stdout);
	if (farm_kv_lookup_mode(kv) == FARM_KV_LOOKUP_OWNER &&
	    o.sent + o.served > 0)
		return false;
	fprintf(stderr,
	        "m%u: FARM_KV_LOOKUP=owner, but no get took the "
	        "owner path\n",
	        np->me);
	return true;
}

int kvp_run_config(struct np_child *np, const struct farm_config *cfg,
                   const struct farm_kv_attr *a, uint32_t nbuckets, int join_ms,
                   farm_kv **kv, int (*body)(void *), void *arg)
{
	if (farm_node_open(cfg, &np->node))
		return 4;
	int st = 5;
	if (farm_kv_create(np->node, a, nbuckets, kv))
		goto out;
	farm_node_set_app_loops(np->node, true);
	st = 6;
	if (farm_node_start(np->node, join_ms) ||
	    farm_node_loop_open(np->node, 0, &np->loop))
		goto out;
	st = 7;
	if (farm_node_wait_members(np->node, np_nm, join_ms))
		goto out;
	st = 8;
	if (farm_kv_attach(*kv, np->loop))
		goto out;
	int rc = farm_kv_join_sync(*kv, np->loop, np_nm, join_ms);
	if (rc) {
		fprintf(stderr, "m%u: join: %s\n", np->me, farm_strerror(rc));
		goto out;
	}
	st = np_ready(np) ? 9 : body(arg);
	if (!st && kvp_owner_unused(np, *kv))
		st = 10;
out:
	if (np->loop) {
		farm_kv_detach(*kv, np->loop);
		farm_node_loop_close(np->node, np->loop);
	}
	farm_node_close(np->node);
	farm_kv_destroy(*kv);
	return st;
}

int kvp_run(struct np_child *np, const char *rsize,
            const struct farm_kv_attr *a, uint32_t nbuckets, int join_ms,
            farm_kv **kv, int (*body)(void *), void *arg)
{
	struct farm_config cfg;
	int st = np_config(np, rsize, &cfg);
	return st ? st
	          : kvp_run_config(np, &cfg, a, nbuckets, join_ms, kv, body,
	                           arg);
}
