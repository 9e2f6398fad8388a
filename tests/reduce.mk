# Reductions and normalizations across threads, vectorized maps: every
# kernel on emu against ir_eval in f32, f16 and bf16, through NVRTC for
# sm_90, and the kernels' text (tests/test_reduce.c).
if HAVE_CHECK
check_PROGRAMS += tests/test_reduce
TESTS += tests/test_reduce
tests_test_reduce_SOURCES = tests/test_reduce.c tests/testutil.c tests/testutil.h
tests_test_reduce_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_reduce_CFLAGS = $(TEST_CFLAGS)
tests_test_reduce_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
