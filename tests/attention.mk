# The attention op and its FlashAttention-style kernel: masks, lengths,
# head counts and dtypes on emu against ir_eval, through NVRTC for
# sm_90 (tests/test_attention.c).
if HAVE_CHECK
check_PROGRAMS += tests/test_attention
TESTS += tests/test_attention
tests_test_attention_SOURCES = tests/test_attention.c tests/testutil.c tests/testutil.h tests/onnxbuild.c tests/onnxbuild.h
tests_test_attention_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_attention_CFLAGS = $(TEST_CFLAGS)
tests_test_attention_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
