/*
 * A machine process of the KV tests (test_kv_multi, test_kv_mget): its
 * node with a KV store, application loop 0, every machine joined, then the
 * test's body, then everything closed. Defined in kvproc.c.
 */
#ifndef FARM_TESTS_KVPROC_H
#define FARM_TESTS_KVPROC_H

#include "nodeproc.h"

#include "kv/kv.h"

/*
 * Open @np's node with configuration @cfg and a KV store of @nbuckets
 * buckets per machine (@a, NULL: defaults) in *@kv, start loop 0 on this
 * thread, wait for the NP_NM machines, join, tell the parent we are ready,
 * run @body(@arg), close. Returns @body's status, or 4..9 for the step
 * that failed first.
 */
/* FARM_KV_LOOKUP=owner in the environment, yet the owner path unused by
 * this machine (said on stderr): true. */
bool kvp_owner_unused(const struct np_child *np, farm_kv *kv);
int kvp_run_config(struct np_child *np, const struct farm_config *cfg,
                   const struct farm_kv_attr *a, uint32_t nbuckets, int join_ms,
                   farm_kv **kv, int (*body)(void *), void *arg);

/* kvp_run_config with static membership (np_config) and regions of
 * @rsize. */
int kvp_run(struct np_child *np, const char *rsize,
            const struct farm_kv_attr *a, uint32_t nbuckets, int join_ms,
            farm_kv **kv, int (*body)(void *), void *arg);

#endif
