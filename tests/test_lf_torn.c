/*
 * A lock-free read never returns a torn or exclusively locked object as
 * consistent (src/txn/README.md, "Object layout"; txn/object.h obj_check),
 * nor does a transaction's read of a local object without waiting
 * (farm_tx_read_local: obj_read_lines, which copies and checks in one
 * pass), on three in-process machines (asntx.h). An object of 4 lines is
 * changed by hand at its primary, as an install caught half-way leaves
 * it, and read with farm_lf_read from the primary (a local copy) and from
 * another machine (one one-sided READ), and with farm_tx_read_local at
 * the primary:
 *   - a later line holding the next version's data and line version under
 *     the old header (a READ that copied the header before the install
 *     and that line after it): -EBUSY once the read's retries run out,
 *     never 0; the same with line 1 torn;
 *   - the header locked exclusive: -EBUSY;
 *   - the header locked shared (a commit's lock before its install): the
 *     object, whole;
 *   - put back: the object, whole, and a wrong incarnation FARM_EFREED;
 *   - a two-line object (the common size, checked and copied out
 *     without the loops) torn in line 1: -EBUSY;
 *   - every READ slower than the bound (1 ns): -EBUSY, never 0.
 *
 * --broken: the line versions are not compared with the header's
 * (FARM_FP_OBJ_NO_LINE_CHECK): the torn cases alone, each of which must
 * see the torn object returned as consistent.
 */
#include "asntx.h"
#include "brokenarg.h"

#include <inttypes.h>
#include <stdlib.h>

#include "txn/object.h"

#define RSIZE ASNTX_RSIZE
#define SIZE  200u /* 4 lines: 48 + 62 + 62 + 28 bytes */
#define SMALL 64u  /* 2 lines: 48 + 16 bytes (the common object) */
#define FILL  0x11
#define NEWB  0x22

static bool Broken;

struct obj {
	farm_fatptr p;
	uint32_t size;
	unsigned prim;  /* index of its primary in C.m */
	unsigned other; /* a machine that is not its primary */
	uint8_t *h;     /* its lines at the primary */
	uint8_t saved[64 * 4];
};

static void obj_make(struct obj *o, uint32_t size)
{
	assert_int_equal(obj_lines(SIZE), 4);
	assert_int_equal(obj_lines(SMALL), 2);
	o->size = size;
	o->p = make_obj(0, size, FILL);
	o->prim = primary_of(o->p.addr) - 1;
	o->other = (o->prim + 1) % 3;
	o->h = farm_as_local_ptr(C.m[o->prim].as, o->p.addr, 64 * 4);
	assert_non_null(o->h);
	memcpy(o->saved, o->h, sizeof(o->saved));
}

static void obj_put_back(struct obj *o)
{
	memcpy(o->h, o->saved, sizeof(o->saved));
}

/* Line @l (1..3) as the next version's install writes it: its version
 * and its data new, the header still the old one, unlocked. */
static void obj_tear(struct obj *o, unsigned l)
{
	assert_true(l < obj_lines(o->size));
	uint64_t v;
	memcpy(&v, o->h, 8);
	uint16_t nv = obj_v16(v + OBJ_VSTEP);
	memcpy(o->h + 64 * l, &nv, 2);
	memset(o->h + 64 * l + 2, NEWB, 62);
}

/* Whether @buf holds the committed object (every byte FILL). */
static bool whole(const struct obj *o, const uint8_t *buf)
{
	for (unsigned i = 0; i < o->size; i++)
		if (buf[i] != FILL)
			return false;
	return true;
}

/* The read of @o from machine @m: its status, @buf filled on 0. */
static int read_from(const struct obj *o, unsigned m, uint8_t *buf)
{
	memset(buf, 0, o->size);
	return lf(m, o->p.addr, o->size, o->p.incarnation, buf);
}

/* A transaction's read of @o at its primary without waiting
 * (farm_tx_read_local): its status, @buf filled on 0. */
static int read_tx_local(const struct obj *o, uint8_t *buf)
{
	memset(buf, 0, o->size);
	farm_tx *tx = begin(o->prim);
	const void *d = NULL;
	int rc = farm_tx_read_local(tx, o->p.addr, o->size, &d);
	if (!rc)
		memcpy(buf, d, o->size);
	farm_tx_free(tx);
	return rc;
}

/* Reader @k of a case: the lock-free read at the primary, at another
 * machine, then the transaction's local read at the primary. */
static const char *const READER[3] = {"local", "remote", "tx local"};

static int read_by(const struct obj *o, unsigned k, uint8_t *buf)
{
	return k == 2 ? read_tx_local(o, buf)
	              : read_from(o, k ? o->other : o->prim, buf);
}

/* A torn object read by each reader: -EBUSY (--broken: returned,
 * torn). */
static void torn_case(struct obj *o, unsigned l)
{
	for (unsigned k = 0; k < 3; k++) {
		uint8_t buf[SIZE];
		obj_tear(o, l);
		int rc = read_by(o, k, buf);
		obj_put_back(o);
		printf("line %u torn, read %s: %s%s\n", l, READER[k],
		       farm_strerror(rc),
		       !rc && !whole(o, buf) ? " (torn object returned)" : "");
		if (Broken) {
			if (rc || whole(o, buf))
				fail_msg("--broken: line %u torn, %s read: %s, "
				         "the torn object was not returned",
				         l, READER[k], farm_strerror(rc));
			continue;
		}
		assert_int_equal(rc, -EBUSY);
	}
}

static void test_torn(void **state)
{
	(void)state;
	struct obj o;
	obj_make(&o, SIZE);
	uint8_t buf[SIZE];
	assert_int_equal(read_from(&o, o.other, buf), 0);
	assert_true(whole(&o, buf));
	torn_case(&o, 3);
	torn_case(&o, 1);
	assert_int_equal(read_from(&o, o.other, buf), 0);
	assert_true(whole(&o, buf));
	/* A two-line object: obj_check and obj_unpack's own path for it. */
	struct obj s;
	obj_make(&s, SMALL);
	assert_int_equal(read_from(&s, s.other, buf), 0);
	assert_true(whole(&s, buf));
	torn_case(&s, 1);
	assert_int_equal(read_from(&s, s.other, buf), 0);
	assert_true(whole(&s, buf));
}

static void test_locked(void **state)
{
	(void)state;
	struct obj o;
	obj_make(&o, SIZE);
	uint8_t buf[SIZE];
	uint64_t v;
	memcpy(&v, o.h, 8);
	for (unsigned k = 0; k < 3; k++) {
		uint64_t x = v | OBJ_LOCK_EXCL;
		memcpy(o.h, &x, 8);
		int rc = read_by(&o, k, buf);
		obj_put_back(&o);
		printf("locked exclusive, read %s: %s\n", READER[k],
		       farm_strerror(rc));
		assert_int_equal(rc, -EBUSY);
		x = v | OBJ_LOCK_SHARED;
		memcpy(o.h, &x, 8);
		rc = read_by(&o, k, buf);
		obj_put_back(&o);
		assert_int_equal(rc, 0);
		assert_true(whole(&o, buf));
	}
	assert_int_equal(read_from(&o, o.other, buf), 0);
	assert_true(whole(&o, buf));
	assert_int_equal(lf(o.other, o.p.addr, SIZE, o.p.incarnation + 1, buf),
	                 FARM_EFREED);
}

/* Every machine's bound 1 ns: every READ is slower than it. */
static int bound_setup(void **state)
{
	asn_lf_bound_ns = 1;
	int rc = asntx_setup(state);
	asn_lf_bound_ns = 0;
	return rc;
}

/* A READ slower than the bound (the object could have been committed
 * 2^14 times meanwhile, its 16-bit line versions wrapped unseen) is
 * retried, never returned: -EBUSY once the retries run out. A local
 * copy has no bound. */
static void test_bound(void **state)
{
	(void)state;
	struct obj o;
	obj_make(&o, SMALL);
	uint8_t buf[SIZE];
	assert_int_equal(read_from(&o, o.other, buf), -EBUSY);
	assert_int_equal(read_from(&o, o.prim, buf), 0);
	assert_true(whole(&o, buf));
}

int main(int argc, char **argv)
{
	int st = tu_broken_arg(argc, argv, FARM_FP_OBJ_NO_LINE_CHECK, &Broken);
	if (st)
		return st;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_torn, asntx_setup,
	                                        asntx_teardown),
	        cmocka_unit_test_setup_teardown(test_locked, asntx_setup,
	                                        asntx_teardown),
	        cmocka_unit_test_setup_teardown(test_bound, bound_setup,
	                                        asntx_teardown),
	};
	const struct CMUnitTest broken_tests[] = {
	        cmocka_unit_test_setup_teardown(test_torn, asntx_setup,
	                                        asntx_teardown),
	};
	if (Broken)
		return cmocka_run_group_tests(broken_tests, NULL, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
