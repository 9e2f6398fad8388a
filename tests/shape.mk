# shape tests
if HAVE_CHECK
check_PROGRAMS += tests/test_shape
TESTS += tests/test_shape
tests_test_shape_SOURCES = tests/test_shape.c
tests_test_shape_CFLAGS = $(TEST_CFLAGS)
tests_test_shape_LDADD = $(TEST_LIBS)
endif
