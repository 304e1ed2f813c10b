/*
 * Objects as the transaction layer stores them (ARCHITECTURE.md 2.5).
 *
 * An object is a whole number of 64-byte lines. Line 0 starts with the
 * 16-byte header (src/alloc/objhdr.h): the version, whose two low bits are
 * the lock mode, and the incarnation word. Every later line starts with the
 * low 16 bits of the version. The application's bytes fill the rest: 48 in
 * line 0, 62 in each later line. Applications never see versions: reads
 * strip them (obj_unpack), writes insert them (obj_pack).
 *
 * Versions advance by 4 per committed write, so the lock bits of a version
 * at rest are 0. An install (obj_install) runs under the exclusive lock:
 * every line version set to the locked value, barrier, data, barrier, new
 * line versions, then the new header version, unlocked. A reader that saw
 * the header unlocked (or locked shared) and every line version equal to
 * the header's low 16 bits got one consistent object (obj_check).
 * Internal; not installed.
 */
#ifndef FARM_TXN_OBJECT_H
#define FARM_TXN_OBJECT_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <farm/error.h>

#include "alloc/objhdr.h"
#include "util/common.h"
#include "util/fault.h"

#define OBJ_LOCK_MASK   3ull
#define OBJ_LOCK_SHARED 1ull /* locked; lock-free reads still succeed */
#define OBJ_LOCK_EXCL   2ull /* locked for an install: readers retry */
#define OBJ_VSTEP       4ull
#define OBJ_LINE0_DATA  48u
#define OBJ_LINE_DATA   62u
#define OBJ_MAX_LINES   16384u
/* The largest application object: 16384 lines. */
#define OBJ_MAX_SIZE (OBJ_LINE0_DATA + OBJ_LINE_DATA * (OBJ_MAX_LINES - 1))

/* Lines an object of @size application bytes takes (0 for bad sizes). */
static inline unsigned obj_lines(uint32_t size)
{
	if (size == 0 || size > OBJ_MAX_SIZE)
		return 0;
	if (size <= OBJ_LINE0_DATA)
		return 1;
	if (size <= OBJ_LINE0_DATA + OBJ_LINE_DATA)
		return 2; /* the common small object: no division */
	return 1 + (size - OBJ_LINE0_DATA + OBJ_LINE_DATA - 1) / OBJ_LINE_DATA;
}

static inline uint16_t obj_v16(uint64_t version)
{
	return (uint16_t)version;
}

/*
 * obj_copy_line() - @n bytes (1 to 64) from @src to @dst, which do not
 * overlap: two fixed-size copies that overlap in the middle (the first and
 * the last 32, 16, 8, 4 or 2 bytes). A variable-length memcpy of at most a
 * line is expanded inline into an 8-byte loop with byte tails (about 40
 * instructions for 48 bytes); this is about 10, and it runs once per line
 * of every object read.
 */
static inline void obj_copy_line(uint8_t *dst, const uint8_t *src, uint32_t n)
{
	if (n >= 32) {
		memcpy(dst, src, 32);
		memcpy(dst + n - 32, src + n - 32, 32);
	} else if (n >= 16) {
		memcpy(dst, src, 16);
		memcpy(dst + n - 16, src + n - 16, 16);
	} else if (n >= 8) {
		memcpy(dst, src, 8);
		memcpy(dst + n - 8, src + n - 8, 8);
	} else if (n >= 4) {
		memcpy(dst, src, 4);
		memcpy(dst + n - 4, src + n - 4, 4);
	} else if (n >= 2) {
		memcpy(dst, src, 2);
		memcpy(dst + n - 2, src + n - 2, 2);
	} else if (n) {
		*dst = *src;
	}
}

/* Application bytes out of a stored image of @lines lines. */
static inline void obj_unpack(const uint8_t *img, uint32_t size, uint8_t *out)
{
	if (size <= OBJ_LINE0_DATA) {
		obj_copy_line(out, img + FARM_OBJHDR_SIZE, size);
		return;
	}
	/* Line 0 whole: a fixed-size copy. Then the common small object's
	 * one more line without the loop (every lock-free read of one
	 * comes here). */
	memcpy(out, img + FARM_OBJHDR_SIZE, OBJ_LINE0_DATA);
	if (size <= OBJ_LINE0_DATA + OBJ_LINE_DATA) {
		obj_copy_line(out + OBJ_LINE0_DATA, img + 64u + 2,
		              size - OBJ_LINE0_DATA);
		return;
	}
	for (uint32_t done = OBJ_LINE0_DATA, l = 1, n; done < size; l++) {
		n = FARM_MIN(size - done, OBJ_LINE_DATA);
		obj_copy_line(out + done, img + 64u * l + 2, n);
		done += n;
	}
}

/* A stored image of @lines lines: header (@version, @incarn), line
 * versions, the application's @size bytes, zeros after them. */
static inline void obj_pack(uint8_t *img, unsigned lines, const uint8_t *in,
                            uint32_t size, uint64_t version, uint64_t incarn)
{
	/* Each byte written once: the data by obj_copy_line (a
	 * variable-length memcpy of a line is a byte loop inline), zeros
	 * only after it, then the header and line versions. */
	uint32_t n = FARM_MIN(size, OBJ_LINE0_DATA), done = n;
	uint32_t end = FARM_OBJHDR_SIZE + n;
	obj_copy_line(img + FARM_OBJHDR_SIZE, in, n);
	for (unsigned l = 1; done < size; l++) {
		n = FARM_MIN(size - done, OBJ_LINE_DATA);
		obj_copy_line(img + 64u * l + 2, in + done, n);
		done += n;
		end = 64u * l + 2 + n;
	}
	memset(img + end, 0, 64u * lines - end);
	memcpy(img, &version, 8);
	memcpy(img + 8, &incarn, 8);
	uint16_t v16 = obj_v16(version);
	for (unsigned l = 1; l < lines; l++)
		memcpy(img + 64u * l, &v16, 2);
}

/* Whether a line whose first word is @word holds another version than
 * @v16 (a torn copy). */
static inline bool obj_word_stale(uint64_t word, uint16_t v16)
{
	uint16_t x;
	memcpy(&x, &word, 2);
	return x != v16 && !FARM_FAULT_SWITCH(FARM_FP_OBJ_NO_LINE_CHECK);
}

/* Whether line @l of @img holds another version than @v16. */
static inline bool obj_line_stale(const uint8_t *img, unsigned l, uint16_t v16)
{
	uint64_t word;
	memcpy(&word, img + 64u * l, 8);
	return obj_word_stale(word, v16);
}

/* An object's header (version @v, incarnation word @w) checked alone, as
 * line 0 is one consistent line: -EAGAIN when locked for an install,
 * FARM_EFREED when not allocated or of another incarnation count than
 * @want_incarn (UINT64_MAX: any), -EINVAL when @lines runs past the
 * object's recorded size; else 0. */
static inline int obj_hdr_check(uint64_t v, uint64_t w, unsigned lines,
                                uint64_t want_incarn)
{
	if ((v & OBJ_LOCK_MASK) == OBJ_LOCK_EXCL)
		return -EAGAIN;
	if (!farm_incarn_allocated(w) ||
	    (want_incarn != UINT64_MAX && farm_incarn_count(w) != want_incarn))
		return FARM_EFREED;
	return lines > farm_incarn_lines(w) ? -EINVAL : 0;
}

/*
 * obj_check() - is @img (@lines lines, read in one operation) one
 * consistent object? Returns 0 with its unlocked version and incarnation
 * word; -EAGAIN when it was being installed (retry); FARM_EFREED when it is
 * not allocated or its incarnation count is not @want_incarn (UINT64_MAX:
 * any); -EINVAL when @lines runs past the object's recorded size.
 */
static inline int obj_check(const uint8_t *img, unsigned lines,
                            uint64_t want_incarn, uint64_t *version,
                            uint64_t *incarn)
{
	uint64_t v, w;
	memcpy(&v, img, 8);
	memcpy(&w, img + 8, 8);
	int rc = obj_hdr_check(v, w, lines, want_incarn);
	if (rc)
		return rc;
	uint16_t v16 = obj_v16(v & ~OBJ_LOCK_MASK);
	if (lines == 2) { /* the common small object: no loop */
		if (obj_line_stale(img, 1, v16))
			return -EAGAIN;
	} else {
		for (unsigned l = 1; l < lines; l++)
			if (obj_line_stale(img, l, v16))
				return -EAGAIN;
	}
	*version = v & ~OBJ_LOCK_MASK;
	*incarn = w;
	return 0;
}

/*
 * obj_read_lines() - the first @size application bytes of the object of
 * @lines lines at @p (this machine's memory, where installs may run)
 * copied to @out straight from its lines, and checked as obj_check checks
 * a copy, in one pass: farm_lines_copy, obj_check and obj_unpack at
 * once, without the image between them. Each line's bytes are seen as of
 * one instant (its first word read before and after them, as
 * farm_line_copy does: an install sets a line's version to the lock value
 * first and to the new version last); line 0's header then unlocked (or
 * locked shared), allocated and spanning @lines, every later line's
 * version its low 16 bits. Returns what obj_check returns, with its
 * version and incarnation word; on -EAGAIN (a line changed, or an install
 * is under way) @out holds garbage: read again.
 */
static inline int obj_read_lines(const uint8_t *p, unsigned lines,
                                 uint32_t size, uint8_t *out, uint64_t *version,
                                 uint64_t *incarn)
{
	const _Atomic uint64_t *h = (const _Atomic uint64_t *)(const void *)p;
	/* Pairs with the install's release store of the header's new
	 * version (obj_install). */
	uint64_t v = atomic_load_explicit(h, memory_order_acquire);
	uint64_t w = atomic_load_explicit(h + 1, memory_order_relaxed);
	uint32_t done = FARM_MIN(size, OBJ_LINE0_DATA);
	obj_copy_line(out, p + FARM_OBJHDR_SIZE, done);
	/* The copy's loads before the re-load of the word; pairs with the
	 * install's store of the lock value before its data. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(h, memory_order_relaxed) != v)
		return -EAGAIN;
	int rc = obj_hdr_check(v, w, lines, UINT64_MAX);
	if (rc)
		return rc;
	uint16_t v16 = obj_v16(v & ~OBJ_LOCK_MASK);
	for (unsigned l = 1; l < lines; l++) {
		const uint8_t *q = p + 64u * l;
		const _Atomic uint64_t *lw =
		        (const _Atomic uint64_t *)(const void *)q;
		/* As line 0's: pairs with the install's stores of the line's
		 * version, the lock value before its data, the new one after.
		 */
		uint64_t a = atomic_load_explicit(lw, memory_order_acquire);
		if (obj_word_stale(a, v16))
			return -EAGAIN;
		uint32_t n = FARM_MIN(size - done, OBJ_LINE_DATA);
		obj_copy_line(out + done, q + 2, n);
		done += n;
		/* As line 0's: pairs with the release fence after the
		 * install's store of the lock value (obj_install_locked). */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(lw, memory_order_relaxed) != a)
			return -EAGAIN;
	}
	*version = v & ~OBJ_LOCK_MASK;
	*incarn = w;
	return 0;
}

/*
 * A transaction's new object holds the shared lock from its allocation
 * until the commit installs it (the lock, exclusive, then the new
 * version) or the abort unlocks it and gives it back. Unmarked, an
 * uncommitted object looked committed to data recovery's READs and chunk
 * summaries at this primary (src/txn/copy.c): a copy took it, and when
 * the transaction aborted the slot went free again (a later incarnation)
 * at that same version, which the copy, applying only newer versions,
 * never took: it kept an object allocated that its primary does not
 * hold. Data recovery reads a locked object again later; lock-free reads
 * still succeed under a shared lock (a stale pointer's read then finds a
 * new incarnation, as without the mark).
 *
 * obj_claim_mark() - the mark the allocator's claim sets
 * (farm_galloc_alloc_marked): the shared lock, stored in the version word
 * before the allocated bit becomes visible, so the slot is never seen
 * allocated and unlocked, not even between the claim and the
 * transaction taking the object (a loop pass: the allocator answers
 * through a posted continuation). 0 in tests that break it: with
 * FARM_FP_TX_NEW_UNMARKED nothing marks; with FARM_FP_TX_CLAIM_LATE the
 * transaction marks it itself once the allocator has answered
 * (obj_mark_new), the order before, whose window test_txn
 * --broken-claim must catch.
 */
static inline uint64_t obj_claim_mark(void)
{
	if (FARM_FAULT_SWITCH(FARM_FP_TX_NEW_UNMARKED) ||
	    FARM_FAULT_SWITCH(FARM_FP_TX_CLAIM_LATE))
		return 0;
	return OBJ_LOCK_SHARED;
}

/*
 * obj_mark_new() - testing only (obj_claim_mark answered 0): the shared
 * lock stored after the claim, on the header of new object (its version
 * @v, unlocked).
 */
static inline void obj_mark_new(const void *hdr, uint64_t v)
{
	if (FARM_FAULT_SWITCH(FARM_FP_TX_NEW_UNMARKED))
		return; /* testing: uncommitted objects look committed */
	/* Release: pairs with the acquire of the header by data recovery's
	 * chunk summary (copy_digest.c) and by the lockers below (commit
	 * and LOCK, whose CAS expects the mark). A one-sided READ sees
	 * the word as a whole. No one else writes a header of a slot just
	 * claimed: a stale transaction's LOCK or commit checks the
	 * incarnation first. */
	atomic_store_explicit((_Atomic uint64_t *)(uintptr_t)hdr,
	                      v | OBJ_LOCK_SHARED, memory_order_release);
}

/* obj_new_locked() - the version a commit's lock of object @version
 * expects to find: a new object's carries its claim's mark. */
static inline uint64_t obj_new_locked(uint64_t version, bool is_new)
{
	return is_new && !FARM_FAULT_SWITCH(FARM_FP_TX_NEW_UNMARKED)
	               ? version | OBJ_LOCK_SHARED
	               : version;
}

/*
 * obj_install() - write after-image @img (@lines lines) over the local
 * object @obj, whose header this thread holds locked: exclusive lock value
 * into every line version, data, new line versions, new header version
 * (@new_version, unlocked). The incarnation word is not touched.
 */
/*
 * obj_install_locked() - obj_install without the final unlock: the object
 * stays locked exclusive, for a caller that still has to change it in ways
 * that do not touch the version word (freeing it: the allocator rewrites
 * the incarnation and links the slot through its line 0). A reader copies
 * a line consistently only when the line's first word changes around the
 * change, so those writes must happen under the lock; the caller then
 * stores @new_version.
 *
 * The header takes @new_version at once, still locked exclusive: the
 * object is whole in memory from here on, the lock bits aside. The unlock
 * may come much later (a free in a promoted region while the allocator
 * scans it waits for the scan, src/alloc/galloc_adopt.c) or never (a
 * kill; a whole-cluster restart clears every lock left, and frees the
 * header of an object such a free marked, src/txn/restart.c), and
 * with the old version left in the header the cleared object was torn for
 * good: line versions of the new one, header of the old (the data
 * recovery copy of the region then read it again forever).
 */
static inline void obj_install_locked(uint8_t *obj, unsigned lines,
                                      const uint8_t *img, uint64_t new_version)
{
	_Atomic uint64_t *hv = (_Atomic uint64_t *)(void *)obj;
	uint64_t locked = atomic_load_explicit(hv, memory_order_relaxed);
	if ((locked & OBJ_LOCK_MASK) != OBJ_LOCK_EXCL) {
		locked = (locked & ~OBJ_LOCK_MASK) | OBJ_LOCK_EXCL;
		atomic_store_explicit(hv, locked, memory_order_relaxed);
	}
	uint16_t lv = obj_v16(locked), nv = obj_v16(new_version);
	for (unsigned l = 1; l < lines; l++)
		atomic_store_explicit(
		        (_Atomic uint16_t *)(void *)(obj + 64u * l), lv,
		        memory_order_relaxed);
	/* Release fence: the locked header and old line versions before the
	 * data. It pairs with the reader's copy: the acquire fence that
	 * follows each line's copy in obj_read_lines, or a one-sided READ (or
	 * shm's copy, fabric/shm_data.c), whose copy obj_check refuses when
	 * its line versions disagree with its header, so a copy that saw new
	 * data under old versions retries. */
	atomic_thread_fence(memory_order_release);
	memcpy(obj + FARM_OBJHDR_SIZE, img + FARM_OBJHDR_SIZE,
	       64 - FARM_OBJHDR_SIZE);
	for (unsigned l = 1; l < lines; l++)
		memcpy(obj + 64u * l + 2, img + 64u * l + 2, 62);
	farm_store_fence();
	/* Release fence: the data before the new line versions. This one
	 * pairs with the reader's acquire load of a line's version
	 * (obj_read_lines: one that sees the new version sees the new data),
	 * or with a copy checked by obj_check, as the one above. */
	atomic_thread_fence(memory_order_release);
	for (unsigned l = 1; l < lines; l++)
		atomic_store_explicit(
		        (_Atomic uint16_t *)(void *)(obj + 64u * l), nv,
		        memory_order_relaxed);
	/* Release: pairs with the acquire loads of the header (lock-free
	 * reads, farm_txn_copy_apply), so whoever sees the new version sees the
	 * new lines and data too; it still sees the object locked. */
	if (!FARM_FAULT_SWITCH(FARM_FP_TX_INSTALL_OLD_HEADER))
		atomic_store_explicit(
		        hv, (new_version & ~OBJ_LOCK_MASK) | OBJ_LOCK_EXCL,
		        memory_order_release);
}

static inline void obj_install(uint8_t *obj, unsigned lines, const uint8_t *img,
                               uint64_t new_version)
{
	obj_install_locked(obj, lines, img, new_version);
	/* The unlock (release): pairs with the acquire loads of the header
	 * (farm_objhdr_load_version, farm_txn_copy_apply). */
	atomic_store_explicit((_Atomic uint64_t *)(void *)obj, new_version,
	                      memory_order_release);
}

#endif
