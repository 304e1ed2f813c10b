/*
 * A bucket pair's image as one read copied it (buckets b and b + 1, each
 * an object of whole lines with its per-line versions), checked and
 * searched in place: every lookup path (farm_ht_get, farm_ht_get_first,
 * farm_ht_get_local_batch) validates and matches here. Searching the image
 * itself instead of first unpacking both buckets' data (obj_unpack) saves
 * copying the pair once more per lookup; only the bytes a match needs are
 * gathered, and only when they straddle a line's version. A local pair
 * (this machine's memory, where installs run) is searched the same way
 * where it lies, a found key's reads checked afterwards against its
 * bucket's header (farm_ht_pair_get_in).
 */
#include "hashtable/ht_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "txn/object.h"
#include "util/fault.h"

/* Where the object's data byte @i is in its image: line 0 holds
 * OBJ_LINE0_DATA bytes after the header, every later line OBJ_LINE_DATA
 * after its 2-byte version (txn/object.h). */
static inline uint32_t img_off(uint32_t i)
{
	if (i < OBJ_LINE0_DATA)
		return FARM_OBJHDR_SIZE + i;
	i -= OBJ_LINE0_DATA;
	return 64u * (1u + i / OBJ_LINE_DATA) + 2u + i % OBJ_LINE_DATA;
}

void farm_ht_img_read(const uint8_t *obj, uint32_t off, uint32_t n, void *out)
{
	uint8_t *o = out;
	while (n) {
		uint32_t at = img_off(off);
		uint32_t room = 64u - at % 64u; /* to the line's end */
		uint32_t k = n < room ? n : room;
		memmove(o, obj + at, k); /* may gather within one image */
		o += k;
		off += k;
		n -= k;
	}
}

int farm_ht_pair_check(const farm_ht *h, const uint8_t *img, uint64_t *fwd)
{
	unsigned L = h->bucket_lines;
	uint64_t v, w;
	int rc0 = obj_check(img, L, UINT64_MAX, &v, &w);
	int rc1 = obj_check(img + 64u * L, L, UINT64_MAX, &v, &w);
	if (rc0 == -EAGAIN || rc1 == -EAGAIN)
		return -EAGAIN;
	if (rc0 || rc1)
		return FARM_ECORRUPT; /* not a bucket */
	/* fwd and bwd are in line 0 of each bucket (BKT_HDR < 48 bytes). */
	uint64_t f = get64(img + img_off(0));
	if (f != get64(img + 64u * L + img_off(8)))
		return -EAGAIN; /* the two come from different commits */
	if (fwd)
		*fwd = f;
	return 0;
}

/* The image pieces (at most 3, each within one line) that @n bytes at
 * bucket offset @o occupy, in a pair image whose bucket starts at @base:
 * how many, and in *@left the bytes they did not cover. */
static uint8_t map_pieces(uint32_t base, uint32_t o, uint32_t n, uint16_t at[3],
                          uint8_t len[3], uint32_t *left)
{
	uint8_t p = 0;
	for (; n && p < 3; p++) {
		uint32_t a = img_off(o), room = 64u - a % 64u;
		uint32_t k = n < room ? n : room;
		at[p] = (uint16_t)(base + a);
		len[p] = (uint8_t)k;
		o += k;
		n -= k;
	}
	*left = n;
	return p;
}

void farm_ht_pair_map(farm_ht *h)
{
	for (unsigned i = 0; i < 2 * h->spb && i < 16; i++) {
		struct ht_smap *m = &h->smap[i];
		uint32_t base = i < h->spb ? 0 : 64u * h->bucket_lines;
		uint32_t off = BKT_HDR + (i % h->spb) * h->slot_bytes;
		uint16_t at[3];
		uint8_t n[3];
		uint32_t left;
		(void)map_pieces(base, off, 8, at, n, &left);
		m->hdr = at[0];
		m->hdr_whole = n[0] == 8;
		m->hdr_n = n[0];
		m->hdr2 = n[0] == 8 ? at[0] : at[1];
		m->npieces = map_pieces(base, off + 8, h->K, m->key_at,
		                        m->key_n, &left);
		/* The probe: the first piece of 8 bytes or more (none: 255,
		 * past every inline key's length). */
		m->probe_key = 255;
		for (unsigned p = 0, k = 0; p < m->npieces; k += m->key_n[p++])
			if (m->key_n[p] >= 8) {
				m->probe_key = (uint8_t)k;
				m->probe_at = m->key_at[p];
				break;
			}
		m->nvpieces = map_pieces(base, off + 8 + h->K, h->V, m->val_at,
		                         m->val_n, &left);
		if (left)
			m->nvpieces = 0; /* longer: farm_ht_pair_slot_read */
		m->line_lo = (uint16_t)((base + img_off(off)) / 64u);
		m->line_hi =
		        (uint16_t)((base + img_off(off + h->slot_bytes - 1)) /
		                   64u);
	}
}

static inline uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static inline uint16_t get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

/* Whether the @n bytes at @a and @b are equal: whole words, the last
 * compare overlapping the one before it instead of a loop over the tail's
 * bytes (a key's piece cut by a line's version is any length). */
static inline bool eq_bytes(const uint8_t *a, const uint8_t *b, uint32_t n)
{
	if (n >= 8) {
		for (; n > 8; a += 8, b += 8, n -= 8)
			if (get64(a) != get64(b))
				return false;
		return get64(a + n - 8) == get64(b + n - 8);
	}
	if (n >= 4)
		return get32(a) == get32(b) &&
		       get32(a + n - 4) == get32(b + n - 4);
	if (n >= 2)
		return get16(a) == get16(b) &&
		       get16(a + n - 2) == get16(b + n - 2);
	return n == 0 || *a == *b;
}

/* Whether slot @m's key area starts with the @n bytes of @key. */
static inline bool key_eq(const uint8_t *img, const struct ht_smap *m,
                          const uint8_t *key, uint32_t n)
{
	for (unsigned p = 0; p < m->npieces && n; p++) {
		uint32_t k = n < m->key_n[p] ? n : m->key_n[p];
		if (!eq_bytes(img + m->key_at[p], key, k))
			return false;
		key += k;
		n -= k;
	}
	return true;
}

/* Slot @m's 8-byte header, from its one or two pieces. */
static inline void hdr_get(const uint8_t *img, const struct ht_smap *m,
                           uint8_t hdr[8])
{
	if (FARM_LIKELY(m->hdr_whole)) {
		memcpy(hdr, img + m->hdr, 8);
		return;
	}
	for (unsigned i = 0; i < m->hdr_n; i++)
		hdr[i] = img[m->hdr + i];
	for (unsigned i = m->hdr_n; i < 8; i++)
		hdr[i] = img[m->hdr2 + i - m->hdr_n];
}

/* The match of one slot, inlined into the search's loop: the search of a
 * pair runs it on every slot before the key's, and a call per slot (its
 * arguments, a stack frame for the rare paths) cost more than the
 * compares (forced: with three callers gcc calls it). @kf: the key length
 * a matching header holds (0 for a long key, whose hash is in the key
 * area: @hb). */
static inline __attribute__((always_inline)) bool
slot_is(const uint8_t *img, const struct ht_smap *m, const uint8_t *key,
        uint32_t klen, uint8_t kf, const uint8_t *hb, uint8_t hdr[8])
{
	hdr_get(img, m, hdr);
	if (!(hdr[0] & SLOT_USED) || hdr[1] != kf)
		return false;
	if (kf)
		return key_eq(img, m, key, klen);
	return (hdr[0] & SLOT_LONGKEY) && key_eq(img, m, hb, 8);
}

bool farm_ht_pair_slot_is(const farm_ht *h, const uint8_t *img, unsigned slot,
                          const void *key, uint32_t klen, uint64_t hash,
                          uint8_t hdr[8])
{
	uint8_t hb[8];
	put64(hb, hash);
	return slot_is(img, &h->smap[slot], key, klen,
	               (uint8_t)(klen > h->K ? 0 : klen), hb, hdr);
}

/* A search's first look at a slot: 8 bytes of a short key (@kf, as
 * slot_is) in one piece of the slot's key area (ht_smap's probe) compared
 * as one word. Most slots a search passes hold another key of the same
 * length (their headers agree), and this one compare tells them apart. */
static inline bool probe_differs(const uint8_t *img, const struct ht_smap *m,
                                 const uint8_t *key, uint32_t klen, uint8_t kf)
{
	return kf && m->probe_key + 8u <= klen &&
	       get64(img + m->probe_at) != get64(key + m->probe_key);
}

static inline __attribute__((always_inline)) int
find_in(const farm_ht *h, const uint8_t *img, unsigned lo, unsigned hi,
        const void *key, uint32_t klen, uint64_t hash, uint8_t hdr[8])
{
	uint8_t hb[8];
	put64(hb, hash);
	uint8_t kf = (uint8_t)(klen > h->K ? 0 : klen);
	for (unsigned i = lo; i < hi; i++) {
		const struct ht_smap *m = &h->smap[i];
		if (!probe_differs(img, m, key, klen, kf) &&
		    slot_is(img, m, key, klen, kf, hb, hdr))
			return (int)i;
	}
	return -1;
}

int farm_ht_pair_find_in(const farm_ht *h, const uint8_t *img, unsigned lo,
                         unsigned hi, const void *key, uint32_t klen,
                         uint64_t hash, uint8_t hdr[8])
{
	return find_in(h, img, lo, hi, key, klen, hash, hdr);
}

int farm_ht_pair_find(const farm_ht *h, const uint8_t *img, const void *key,
                      uint32_t klen, uint64_t hash, uint8_t hdr[8])
{
	return farm_ht_pair_find_in(h, img, 0, 2 * h->spb, key, klen, hash,
	                            hdr);
}

/* Whether slot @m, in the bucket of the pair at @pair (the table's
 * memory) whose line 0 is line @b0 and whose header read @v (and
 * incarnation word @w) before the slot was, is still as it was read: the
 * reads' loads done, then the header still @v, every other line holding
 * the slot of @v's version. An install stores a line's lock value before
 * its data and its new version after (obj_install), so a line whose
 * version is @v's after the reads had none of a later install's bytes
 * when they ran: each line as of one instant, all of one version, as
 * obj_read_lines checks an object it copies. */
static inline bool slot_unchanged(const farm_ht *h, const struct ht_smap *m,
                                  const uint8_t *pair, unsigned b0, uint64_t v,
                                  uint64_t w)
{
	if (FARM_FAULT_SWITCH(FARM_FP_HT_SLOT_NO_CHECK))
		return true;
	/* The reads' loads before these; pairs with the install's release
	 * fence between a line's lock value and its data. */
	atomic_thread_fence(memory_order_acquire);
	const _Atomic uint64_t *hw =
	        (const _Atomic uint64_t *)(const void *)(pair + 64u * b0);
	if (atomic_load_explicit(hw, memory_order_relaxed) != v ||
	    obj_hdr_check(v, w, h->bucket_lines, UINT64_MAX))
		return false; /* changed, being installed, or not a bucket */
	uint16_t v16 = obj_v16(v & ~OBJ_LOCK_MASK);
	for (unsigned l = m->line_lo > b0 ? m->line_lo : b0 + 1;
	     l <= m->line_hi; l++) {
		const _Atomic uint16_t *lw =
		        (const _Atomic uint16_t *)(const void *)(pair +
		                                                 64u * l);
		if (atomic_load_explicit(lw, memory_order_relaxed) != v16)
			return false;
	}
	return true;
}

/* Slot @m's first @n value bytes (@n <= V, its pieces mapped) from the
 * table's memory @pair to @out: the pieces at most a line each. */
static inline void val_copy(const struct ht_smap *m, const uint8_t *pair,
                            uint32_t n, uint8_t *out)
{
	for (unsigned p = 0; p < m->nvpieces && n; p++) {
		uint32_t k = n < m->val_n[p] ? n : m->val_n[p];
		obj_copy_line(out, pair + m->val_at[p], k);
		out += k;
		n -= k;
	}
}

int farm_ht_pair_get_in(const farm_ht *h, const uint8_t *pair, unsigned lo,
                        unsigned hi, const void *key, uint32_t klen,
                        uint64_t hash, uint8_t *out, uint32_t *vlen)
{
	unsigned L = h->bucket_lines;
	/* The headers of the buckets searched, before any slot is read: the
	 * one of the slot found is what its lines are checked against. */
	const _Atomic uint64_t *h0 =
	        (const _Atomic uint64_t *)(const void *)pair;
	const _Atomic uint64_t *h1 =
	        (const _Atomic uint64_t *)(const void *)(pair + 64u * L);
	uint64_t v0 = 0, w0 = 0, v1 = 0, w1 = 0;
	if (lo < h->spb) {
		/* Pairs with the install's release store of the header's
		 * new version (obj_install, txn/object.h). */
		v0 = atomic_load_explicit(h0, memory_order_acquire);
		w0 = atomic_load_explicit(h0 + 1, memory_order_relaxed);
	}
	if (hi > h->spb) {
		/* Pairs with obj_install's release store of this bucket's
		 * header, as v0's load does. */
		v1 = atomic_load_explicit(h1, memory_order_acquire);
		w1 = atomic_load_explicit(h1 + 1, memory_order_relaxed);
	}
	uint8_t hdr[8];
	int slot = find_in(h, pair, lo, hi, key, klen, hash, hdr);
	if (slot < 0)
		return -ENOENT;
	const struct ht_smap *m = &h->smap[slot];
	bool first = (unsigned)slot < h->spb;
	uint32_t n = slot_vlen(hdr);
	if ((hdr[0] & SLOT_INDIRECT) || n > h->V)
		return -EAGAIN; /* an object of its own, or a torn header */
	FARM_FAULT_POINT(FARM_FP_HT_SLOT_WINDOW);
	if (m->nvpieces)
		val_copy(m, pair, n, out);
	else
		farm_ht_pair_slot_read(h, pair, (unsigned)slot, 8 + h->K, n,
		                       out);
	if (!slot_unchanged(h, m, pair, first ? 0 : L, first ? v0 : v1,
	                    first ? w0 : w1))
		return -EAGAIN;
	*vlen = n;
	return 0;
}

void farm_ht_pair_slot_read(const farm_ht *h, const uint8_t *img, unsigned slot,
                            uint32_t off, uint32_t n, void *out)
{
	const uint8_t *obj = img + (slot < h->spb ? 0 : 64u * h->bucket_lines);
	farm_ht_img_read(obj, BKT_HDR + (slot % h->spb) * h->slot_bytes + off,
	                 n, out);
}

void farm_ht_pair_val_read(const farm_ht *h, const uint8_t *img, unsigned slot,
                           uint32_t n, void *out)
{
	const struct ht_smap *m = &h->smap[slot];
	if (!m->nvpieces || n > h->V) {
		farm_ht_pair_slot_read(h, img, slot, 8 + h->K, n, out);
		return;
	}
	uint8_t *o = out;
	for (unsigned p = 0; p < m->nvpieces && n; p++) {
		uint32_t k = n < m->val_n[p] ? n : m->val_n[p];
		memmove(o, img + m->val_at[p], k); /* may be the image's own */
		o += k;
		n -= k;
	}
}

farm_fatptr farm_ht_pair_overflow(const uint8_t *img)
{
	farm_fatptr f;
	farm_ht_img_read(img, 16, sizeof(f), &f);
	return f;
}
