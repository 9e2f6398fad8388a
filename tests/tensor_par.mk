# Tensor parallelism without MPI (passes/tensor_par.c, docs/parallel.md):
# each rank's model on the reference interpreter, the ranks' partial sums
# against the whole model; what splits and what does not and why; the
# all-reduces of the gradients; the refusals; the plan's sum steps.
if HAVE_CHECK
check_PROGRAMS += tests/test_tensor_par
TESTS += tests/test_tensor_par
tests_test_tensor_par_SOURCES = tests/test_tensor_par.c tests/testutil.c tests/testutil.h
tests_test_tensor_par_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_tensor_par_CFLAGS = $(TEST_CFLAGS)
tests_test_tensor_par_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
