/*
 * util/rt.h's farm_thread_set_lowest, as data recovery's engine uses it
 * (src/txn/copy_engine.c: each copy's open on a thread made for it):
 *
 *   lowest    a thread that calls it runs at nice 19, and the thread
 *             that made it (the engine, which paces every copy) keeps
 *             its own priority: a nice value is a thread's own on Linux,
 *             and a process-wide one would have slowed every loop.
 *   repeated  a second call changes nothing and still succeeds.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/rt.h"

struct seen {
	int rc, rc2, nice, nice2;
};

static int own_nice(void)
{
	errno = 0;
	return getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
}

static void *lowered(void *arg)
{
	struct seen *s = arg;
	s->rc = farm_thread_set_lowest();
	s->nice = own_nice();
	s->rc2 = farm_thread_set_lowest();
	s->nice2 = own_nice();
	return NULL;
}

static void test_lowest(void **state)
{
	(void)state;
	int before = own_nice();
	struct seen s = {-1, -1, 0, 0};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, lowered, &s), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(s.rc, 0);
	assert_int_equal(s.nice, 19);
	assert_int_equal(s.rc2, 0);
	assert_int_equal(s.nice2, 19);
	/* The maker's own priority is untouched. */
	assert_int_equal(own_nice(), before);
	assert_int_equal(getpriority(PRIO_PROCESS, (id_t)getpid()), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_lowest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
