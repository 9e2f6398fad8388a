# Quantized ONNX models and the u8 dtype: u8 arithmetic and casts, the
# IR's quantize ranges, QuantizeLinear/DequantizeLinear, QDQ Conv and
# Gemm, ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul built
# in C, on ir_eval against onnxruntime's formulas and on emu against
# ir_eval, bit for bit; then the backend node tests of those ops and of
# UINT8 on emu too (tests/qdq_node.sh).
if HAVE_ONNX
if HAVE_CHECK
check_PROGRAMS += tests/test_qdq
TESTS += tests/test_qdq
tests_test_qdq_SOURCES = tests/test_qdq.c tests/onnxbuild.c tests/onnxbuild.h tests/testutil.c tests/testutil.h
tests_test_qdq_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_qdq_CFLAGS = $(TEST_CFLAGS)
tests_test_qdq_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
TESTS += tests/qdq_node.sh
endif
EXTRA_DIST += tests/qdq_node.sh
