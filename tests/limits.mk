# Limits: deep and large inputs give located errors, never a stack
# overflow (on a 1 MB thread), and the failing-allocator sweep: every
# outcome of an allocation failure is a clean error or a success.
if HAVE_CHECK
check_PROGRAMS += tests/test_allocfail
TESTS += tests/test_allocfail
tests_test_allocfail_SOURCES = tests/test_allocfail.c tests/failalloc.c tests/failalloc.h tests/testutil.c tests/testutil.h
tests_test_allocfail_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_allocfail_CFLAGS = $(TEST_CFLAGS)
tests_test_allocfail_LDADD = $(TEST_LIBS) $(CUDA_LIBS) -ldl
check_PROGRAMS += tests/test_limits
TESTS += tests/test_limits
tests_test_limits_SOURCES = tests/test_limits.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_limits_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_limits_CFLAGS = $(TEST_CFLAGS)
tests_test_limits_LDADD = $(TEST_LIBS) $(CUDA_LIBS) -lpthread
endif
TESTS += tests/limits_cli.sh
EXTRA_DIST += tests/limits_cli.sh
