# Rounding to f16 and bf16 (ties to even, subnormals, overflow, NaN, and
# integers rounded once) on the reference interpreter, on emu and
# through NVRTC.
if HAVE_CHECK
check_PROGRAMS += tests/test_round
TESTS += tests/test_round
tests_test_round_SOURCES = tests/test_round.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_round_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_round_CFLAGS = $(TEST_CFLAGS)
tests_test_round_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
