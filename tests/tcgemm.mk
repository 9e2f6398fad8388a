# Tensor-core GEMM kernels: convolutions and the int8 GEMM kernel on
# mma.sync against the reference interpreter on emu, their tile edges,
# split-K, fallbacks and the tile heuristic (test_tcgemm).
if HAVE_CHECK
check_PROGRAMS += tests/test_tcgemm
TESTS += tests/test_tcgemm
tests_test_tcgemm_SOURCES = tests/test_tcgemm.c tests/convcheck.c tests/convcheck.h tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_tcgemm_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_tcgemm_CFLAGS = $(TEST_CFLAGS)
tests_test_tcgemm_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
