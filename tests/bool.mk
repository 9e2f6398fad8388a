# The bool dtype: comparisons, logic and where in ir_eval, the IR text,
# the language and codegen (emu byte for byte against ir_eval, NVRTC for
# sm_80 and sm_90, fusion), bool tensors in .npy and safetensors.
if HAVE_CHECK
check_PROGRAMS += tests/test_bool
TESTS += tests/test_bool
tests_test_bool_SOURCES = tests/test_bool.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_bool_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_bool_CFLAGS = $(TEST_CFLAGS)
tests_test_bool_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
