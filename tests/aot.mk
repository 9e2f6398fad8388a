# AOT tests: model.so built by codegen/aot.c, dlopen-ed and run on emu
# against ir_eval, its caches, bad libraries (test_aot); the dlcc command
# line on .so files (aot.sh); the host examples (host_examples.sh).
# DLCC_LIBDIR: a test binary is not beside libdlcrt.so as dlcc is.
AM_TESTS_ENVIRONMENT += DLCC_LIBDIR='$(abs_top_builddir)/.libs'; export DLCC_LIBDIR;
# A host program linked against a sanitized libdlcrt must be sanitized too.
AM_TESTS_ENVIRONMENT += DLCC_HOST_CFLAGS='$(SAN_CFLAGS)'; export DLCC_HOST_CFLAGS;
if HAVE_CHECK
check_PROGRAMS += tests/test_aot
TESTS += tests/test_aot
tests_test_aot_SOURCES = tests/test_aot.c
tests_test_aot_CFLAGS = $(TEST_CFLAGS)
tests_test_aot_LDADD = $(TEST_LIBS) -ldl
endif

# The JIT example is linked like any host program of the compiler API;
# the AOT one is compiled by host_examples.sh against the model.so it
# builds, as a user would.
check_PROGRAMS += examples/host_jit
examples_host_jit_SOURCES = examples/host_jit.c
examples_host_jit_LDADD = libdlcc.la
TESTS += tests/aot.sh tests/host_examples.sh
EXTRA_DIST += tests/aot.sh tests/host_examples.sh
