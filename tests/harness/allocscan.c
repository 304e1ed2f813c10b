#include "allocscan.h"

void alloc_locked_one(void *ctx, struct farm_objhdr *obj, uint32_t lines)
{
	(void)lines;
	uint64_t *locked = ctx;
	uint64_t v = atomic_load_explicit((_Atomic uint64_t *)(void *)obj,
	                                  memory_order_acquire);
	*locked += (v & OBJ_LOCK_MASK) != 0;
}

char *alloc_dump_of(farm_blockalloc *ba, int *rc)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f) {
		*rc = -ENOMEM;
		return NULL;
	}
	*rc = farm_blockalloc_dump(ba, f);
	fclose(f);
	return buf;
}

void alloc_scan(farm_node *node, struct alloc_report *a)
{
	*a = (struct alloc_report){.live_rc = -1, .rebuilt_rc = -1};
	farm_txm_stats_get(farm_node_txm(node), &a->st);
	farm_galloc *g = farm_node_galloc(node);
	farm_galloc_stats(g, &a->gs);
	farm_blockalloc *ba = farm_galloc_blockalloc(g);
	struct farm_blockalloc_attr at = {0};
	farm_blockalloc *rb = NULL;
	char *live = alloc_dump_of(ba, &a->live_rc);
	if (!farm_blockalloc_create(&at, &rb)) {
		uint32_t n = atomic_load(&ba->nregions);
		a->regions = n;
		a->rebuilt_rc = 0;
		void **copies = calloc(n ? n : 1, sizeof(void *));
		for (uint32_t i = 0; copies && i < n && !a->rebuilt_rc; i++) {
			struct ba_region *r = ba->regions[i];
			/* Given up (growth moved its primary away,
			 * farm_galloc_retire): not the allocator's any more,
			 * and the live dump leaves it out. */
			if (atomic_load(&r->retired))
				continue;
			int w = farm_alloc_walk_region(r->base, r->size, r->id,
			                               alloc_locked_one,
			                               &a->locked);
			if (w < 0 && !a->walk_rc)
				a->walk_rc = w;
			a->objects += w > 0 ? (uint64_t)w : 0;
			copies[i] = aligned_alloc(4096, r->size);
			if (!copies[i]) {
				a->rebuilt_rc = -ENOMEM;
				break;
			}
			memcpy(copies[i], r->base, r->size);
			struct farm_alloc_region ar = {.id = r->id,
			                               .base = copies[i],
			                               .size = r->size};
			a->rebuilt_rc = farm_blockalloc_rebuild_region(rb, &ar);
		}
		int rc = 0;
		char *rebuilt = a->rebuilt_rc ? NULL : alloc_dump_of(rb, &rc);
		if (!a->rebuilt_rc)
			a->rebuilt_rc = rc;
		a->equal = live && rebuilt && !strcmp(live, rebuilt);
		a->dump_bytes = live ? strlen(live) : 0;
		free(rebuilt);
		farm_blockalloc_destroy(rb);
		for (uint32_t i = 0; copies && i < n; i++)
			free(copies[i]);
		free(copies);
	}
	free(live);
}

void alloc_check(unsigned i, const struct alloc_report *a, struct fails *f)
{
	if (a->st.free_failed || a->st.deferred_lost)
		failed(f,
		       "machine %u: %" PRIu64 " frees at commit refused "
		       "and %" PRIu64 " deferred frees lost (leaks)",
		       i, a->st.free_failed, a->st.deferred_lost);
	if (a->st.block_note_errors || a->gs.adopt_failed)
		failed(f,
		       "machine %u: %" PRIu64 " block descriptions "
		       "refused by backup copies, %" PRIu64
		       " promoted regions refused by the allocator",
		       i, a->st.block_note_errors, a->gs.adopt_failed);
	if (a->locked || a->walk_rc)
		failed(f,
		       "machine %u: %" PRIu64 " of %" PRIu64
		       " objects it is primary of left locked with the "
		       "cluster quiet (walk: %s)",
		       i, a->locked, a->objects,
		       a->walk_rc ? farm_strerror(a->walk_rc) : "ok");
	if (a->live_rc || a->rebuilt_rc || !a->equal)
		failed(f,
		       "machine %u: allocator state rebuilt by scan "
		       "differs from the live one (dumps: %d live, %d "
		       "rebuilt)",
		       i, a->live_rc, a->rebuilt_rc);
}
