# Coming from PyTorch (docs/language.md): free dims bound by the given
# inputs, PyTorch's spellings, the tensor constructors, `@`, gather and
# index_select, masks on multihead_attention; ref against emu, NVRTC.
if HAVE_CHECK
check_PROGRAMS += tests/test_pytorch
TESTS += tests/test_pytorch
tests_test_pytorch_SOURCES = tests/test_pytorch.c tests/testutil.c tests/testutil.h
tests_test_pytorch_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_pytorch_CFLAGS = $(TEST_CFLAGS)
tests_test_pytorch_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
