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

# Its gradient's two kernels (codegen/attention_grad.c) on emu against
# ir_eval (tests/test_attention_grad.c).
if HAVE_CHECK
check_PROGRAMS += tests/test_attention_grad
TESTS += tests/test_attention_grad
tests_test_attention_grad_SOURCES = tests/test_attention_grad.c tests/testutil.c tests/testutil.h tests/irjob.c \
	tests/irjob.h
tests_test_attention_grad_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_attention_grad_CFLAGS = $(TEST_CFLAGS)
tests_test_attention_grad_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
