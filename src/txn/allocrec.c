/*
 * Allocator state recovery, the transaction layer's part (FaRM SOSP'15
 * section 5.4; src/alloc/README.md "Recovery").
 *
 * A backup's copy of a region receives object images in COMMIT-BACKUP
 * records, but the block table in block 0 is the primary's allocator's:
 * without it, a copy promoted after its primary failed could serve reads
 * and commits but its objects could not be freed nor its free space used.
 * So each record carries, for every object the coordinator writes and
 * holds (new ones always: transactions allocate on the coordinator), a
 * 15-bit description of the object's slab block (farm_alloc_block_info) in
 * the spare flag bits, and a backup writes it into its copy's table when
 * the record lands (farm_txn_alloc_note, from the poller, before the record can
 * be applied by truncation or recovery). Describing a block early is safe
 * even if the transaction aborts: a slab block never changes class and is
 * never freed, so the description holds for the block's lifetime.
 *
 * Adoption (rebuild by scan, frees deferred meanwhile) is the allocator's
 * (farm_galloc_adopt); recover.c says when: once a promoted region has no
 * recovered lock left, so no transaction of the old configuration can
 * still write (or create) an object in it.
 */
#include <inttypes.h>

#include <errno.h>

#include "txn/txn_int.h"
#include "txn/txn_tx.h"
#include "txn/txn_testing.h"
#include "util/log.h"

#ifdef FARM_FAULT_INJECTION
static _Atomic bool testing_no_block_info;

void farm_txn_testing_no_block_info(bool on)
{
	atomic_store(&testing_no_block_info, on);
}
#endif

uint32_t farm_txn_alloc_flags(farm_txm *m, const struct txobj *o)
{
	if (o->flags & TXO_FREE)
		return 0; /* bits 31..8 may hold a freed array's count */
#ifdef FARM_FAULT_INJECTION
	if (atomic_load_explicit(&testing_no_block_info, memory_order_relaxed))
		return 0; /* testing: the backups learn no block */
#endif
	uint32_t info;
	if (o->primary != m->me || farm_galloc_block_info(m->ga, o->a, &info))
		return 0; /* not ours, or not in a slab block */
	return info << OBJF_BINFO_SHIFT;
}

/*
 * Free @a, a committed free's object, installed and still locked by the
 * caller, who would unlock it with @nv. In a region promoted here and not
 * yet adopted the allocator frees it in its header at once (the adoption's
 * scan, or a whole-cluster restart's rebuild, lists the slot: the caller
 * unlocks; readers see the incarnation freed), or, while that scan runs,
 * frees it later and then stores @nv itself: returns true, and the caller
 * must not unlock it. The object stays locked until then, so no reader
 * takes it for live after the free committed.
 */
bool farm_txn_free_at_commit(farm_txm *m, struct txloop *tl, farm_gaddr a,
                             uint64_t nv)
{
	int rc = farm_galloc_free_local_or_defer(m->ga, tl->loop, a, nv);
	if (rc == 1 || rc == 2)
		farm_stat_add(&m->st.v[S_FREE_DEFERRED], 1);
	if (rc == 1)
		return true;
	if (rc == 2)
		return false; /* freed in its header: the adoption's scan
		                 lists the slot; the caller unlocks */
	if (rc == -EREMOTE)
		return false; /* the allocator gave the region up (growth moved
		                 its primary, farm_galloc_retire): the new
		                 primary's, rebuilt by scan, has the slot free
		                 from this commit's image; no leak */
	if (rc) {
		farm_stat_add(&m->st.v[S_FREE_FAILED], 1);
		farm_warn("txn: free at commit: %s", farm_strerror(rc));
	}
	return false;
}

void farm_txn_alloc_note(struct txloop *tl, const uint8_t *rec)
{
	farm_txm *m = tl->m;
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	const struct rec_obj *o =
	        (const struct rec_obj *)(const void *)(rec + sizeof(h));
	uint32_t last_region = FARM_REGION_ID_NONE, last_mib = UINT32_MAX;
	for (unsigned i = 0; i < h.nobj; i++) {
		uint32_t info = (o[i].flags & OBJF_ARRAY)
		                        ? 0
		                        : o[i].flags >> OBJF_BINFO_SHIFT;
		if (!info)
			continue;
		uint32_t rid = farm_gaddr_region(o[i].addr);
		uint32_t mib = farm_gaddr_offset(o[i].addr) >> 20;
		if (rid == last_region && mib == last_mib)
			continue; /* an array's elements: one block */
		last_region = rid;
		last_mib = mib;
		enum farm_as_role role;
		farm_region *r = farm_as_local_region(m->as, rid, &role);
		if (!r || role != FARM_AS_BACKUP)
			continue; /* only copies: a primary's table is live */
		struct farm_alloc_region c = {.id = rid,
		                              .base = farm_region_base(r),
		                              .size = farm_region_size(r)};
		int rc = farm_alloc_copy_note(&c, o[i].addr, info);
		if (rc > 0) {
			farm_stat_add(&m->st.v[S_BLOCK_NOTES], 1);
		} else if (rc < 0) {
			farm_stat_add(&m->st.v[S_BLOCK_NOTE_ERRORS], 1);
			farm_warn("txn: block of %#" PRIx64
			          " not noted in the copy: %s",
			          o[i].addr, farm_strerror(rc));
		}
	}
}
