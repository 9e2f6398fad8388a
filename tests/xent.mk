# softmax_xent (cross_entropy's row kernels) on emu against ref, and the
# GEMM's bias-gradient epilogue in a training step (docs/training.md).
if HAVE_CHECK
check_PROGRAMS += tests/test_xent
TESTS += tests/test_xent
tests_test_xent_SOURCES = tests/test_xent.c tests/testutil.c tests/testutil.h
tests_test_xent_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_xent_CFLAGS = $(TEST_CFLAGS)
tests_test_xent_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
