# Lowering tests: the examples, tests/errors/*.dl and inline snippets.
if HAVE_CHECK
check_PROGRAMS += tests/test_lower
TESTS += tests/test_lower
tests_test_lower_SOURCES = tests/test_lower.c
tests_test_lower_CFLAGS = $(TEST_CFLAGS)
tests_test_lower_LDADD = $(TEST_LIBS)
endif
