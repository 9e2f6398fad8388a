# Resize and GridSample: the tables ONNX import computes for Resize, the
# operands it reads as not given and its errors (with ONNX support),
# grid_sample's meaning by hand, the kernels on emu against ir_eval and
# through NVRTC, and the language's grid_sample builtin.
if HAVE_CHECK
check_PROGRAMS += tests/test_resize
TESTS += tests/test_resize
tests_test_resize_SOURCES = tests/test_resize.c tests/testutil.c tests/testutil.h
if HAVE_ONNX
tests_test_resize_SOURCES += tests/onnxbuild.c tests/onnxbuild.h
endif
tests_test_resize_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_resize_CFLAGS = $(TEST_CFLAGS)
tests_test_resize_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
