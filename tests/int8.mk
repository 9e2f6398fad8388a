# int8 codegen: quantize/dequantize, int8 conv2d/linear/matmul (cuBLAS's
# int8 GEMM and our kernel where cuBLAS refuses the shape) and the fused
# quantized conv chain, on emu byte for byte against ir_eval, NVRTC for
# sm_80 and sm_90.
if HAVE_CHECK
check_PROGRAMS += tests/test_int8
TESTS += tests/test_int8
tests_test_int8_SOURCES = tests/test_int8.c tests/testutil.c tests/testutil.h
tests_test_int8_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_int8_CFLAGS = $(TEST_CFLAGS)
tests_test_int8_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
