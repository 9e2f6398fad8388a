# emu device tests: they compile kernels with the host C++ compiler.
AM_TESTS_ENVIRONMENT += DLCC_EMU_HEADER='$(abs_top_srcdir)/runtime/emu/dlcc_emu.h'; export DLCC_EMU_HEADER;
if HAVE_CHECK
check_PROGRAMS += tests/test_emu
TESTS += tests/test_emu
tests_test_emu_SOURCES = tests/test_emu.c
tests_test_emu_CFLAGS = $(TEST_CFLAGS)
tests_test_emu_LDADD = $(TEST_LIBS)
endif
