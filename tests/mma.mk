# Tensor-core instructions: the emu's mma, ldmatrix and cp.async against a
# plain GEMM, their errors, and the same kernels through NVRTC (test_mma);
# the instructions in the kernels' SASS when cuobjdump is there (tc_sass.sh).
if HAVE_CHECK
check_PROGRAMS += tests/test_mma
TESTS += tests/test_mma tests/tc_sass.sh
tests_test_mma_SOURCES = tests/test_mma.c tests/mma_kernels.h tests/testutil.c tests/testutil.h
tests_test_mma_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_mma_CFLAGS = $(TEST_CFLAGS)
tests_test_mma_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
EXTRA_DIST += tests/tc_sass.sh
