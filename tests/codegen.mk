# codegen tests: NVRTC compiles every kernel for sm_90, plans are checked,
# and plans run on the emu device against ir_eval.
if HAVE_CHECK
check_PROGRAMS += tests/test_codegen
TESTS += tests/test_codegen
tests_test_codegen_SOURCES = tests/test_codegen.c tests/testutil.c tests/testutil.h
tests_test_codegen_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_codegen_CFLAGS = $(TEST_CFLAGS)
tests_test_codegen_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
