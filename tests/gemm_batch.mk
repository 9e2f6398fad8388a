# Linears of one input as one strided-batched GEMM (codegen/gemm_batch.c):
# the plan's steps and strides, f32/f16/bf16/int8 on emu against ir_eval,
# what stays apart, the example blocks' counts.
if HAVE_CHECK
check_PROGRAMS += tests/test_gemm_batch
TESTS += tests/test_gemm_batch
tests_test_gemm_batch_SOURCES = tests/test_gemm_batch.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_gemm_batch_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_gemm_batch_CFLAGS = $(TEST_CFLAGS)
tests_test_gemm_batch_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
