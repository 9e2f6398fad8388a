# int8 quantization on the reference interpreter: the pass's rewrite and
# its accuracy (top-1 agreement with f32 on MLP, LeNet, ResNet-18), and
# LeNet and ResNet-18 compiled, on emu byte for byte against ir_eval.
if HAVE_CHECK
check_PROGRAMS += tests/test_quantize
TESTS += tests/test_quantize
tests_test_quantize_SOURCES = tests/test_quantize.c tests/testutil.c tests/testutil.h
tests_test_quantize_CFLAGS = $(TEST_CFLAGS)
tests_test_quantize_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS) $(CUDA_CPPFLAGS)
tests_test_quantize_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
# make bench: top-1 of the int8 MLP and LeNet on 4096 inputs (tests/bench/int8_accuracy.sh).
BENCHES += tests/bench/int8_accuracy.sh
EXTRA_DIST += tests/bench/int8_accuracy.sh
