# Mixed precision: every example at f16 and bf16 on emu against the f32
# and the same-precision reference, NVRTC for sm_80 and sm_90, single ops
# in f16/bf16 through codegen, the language's precision="f32" and the API.
if HAVE_CHECK
check_PROGRAMS += tests/test_precision
TESTS += tests/test_precision
tests_test_precision_SOURCES = tests/test_precision.c tests/testutil.c tests/testutil.h
tests_test_precision_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_precision_CFLAGS = $(TEST_CFLAGS)
tests_test_precision_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif

# Every example's f16 and bf16 kernels through NVRTC for sm_80 and sm_90,
# the image CNNs included (a few minutes).
check-precision-nvrtc: tests/test_precision$(EXEEXT)
	DLCC_TEST_NVRTC_ALL=1 DLCC_TEST_VERBOSE=1 top_srcdir='$(abs_top_srcdir)' tests/test_precision$(EXEEXT)
.PHONY: check-precision-nvrtc
