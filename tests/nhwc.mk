# Channels last (passes/nhwc.c, conv2d layout "nhwc"): ResNet-style
# blocks in f16, bf16, int8 and tf32 on emu against ir_eval, what the
# pass leaves alone, the op itself and its errors (test_nhwc).
if HAVE_CHECK
check_PROGRAMS += tests/test_nhwc
TESTS += tests/test_nhwc
tests_test_nhwc_SOURCES = tests/test_nhwc.c tests/convcheck.c tests/convcheck.h tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_nhwc_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_nhwc_CFLAGS = $(TEST_CFLAGS)
tests_test_nhwc_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
