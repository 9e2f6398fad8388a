# f64, u64, u32, i16, u16 and fp_round's narrow formats in the kernels:
# emu against the reference interpreter, and the text through NVRTC.
if HAVE_CHECK
check_PROGRAMS += tests/test_dtypes
TESTS += tests/test_dtypes
tests_test_dtypes_SOURCES = tests/test_dtypes.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_dtypes_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_dtypes_CFLAGS = $(TEST_CFLAGS)
tests_test_dtypes_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
