# Depthwise convolutions on their tiled kernel against the reference
# interpreter on emu, and conv_transpose on tensor cores (test_depthwise).
if HAVE_CHECK
check_PROGRAMS += tests/test_depthwise
TESTS += tests/test_depthwise
tests_test_depthwise_SOURCES = tests/test_depthwise.c tests/convcheck.c tests/convcheck.h tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_depthwise_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_depthwise_CFLAGS = $(TEST_CFLAGS)
tests_test_depthwise_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
