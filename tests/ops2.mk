# The second batch of ops (ONNX's math, indexing and top-k): what
# ir_eval says they mean, their shape errors and IR text, codegen on emu
# against ir_eval (exact where the op is exact) and through NVRTC for
# sm_80 and sm_90, a fused chain, and the language's builtins.
if HAVE_CHECK
check_PROGRAMS += tests/test_ops2
TESTS += tests/test_ops2
tests_test_ops2_SOURCES = tests/test_ops2.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_ops2_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_ops2_CFLAGS = $(TEST_CFLAGS)
tests_test_ops2_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
