# 3-d convolutions and pools (conv3d, conv_transpose3d, maxpool3d,
# avgpool3d): ir_eval against naive loops, shape errors and IR text,
# codegen on emu against ir_eval at -O0 and -O2 (fused) and through NVRTC
# for sm_80 and sm_90, and the language's builtins.
if HAVE_CHECK
check_PROGRAMS += tests/test_conv3d
TESTS += tests/test_conv3d
tests_test_conv3d_SOURCES = tests/test_conv3d.c tests/testutil.c tests/testutil.h
tests_test_conv3d_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_conv3d_CFLAGS = $(TEST_CFLAGS)
tests_test_conv3d_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
