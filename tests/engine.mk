# The execution engine: CUDA graphs captured and replayed on emu against
# the reference interpreter, device-resident I/O and asynchronous runs,
# and over tests/fake_cuda.c the driver calls of a warm ResNet-18 run.
if HAVE_CHECK
check_PROGRAMS += tests/test_engine
TESTS += tests/test_engine
tests_test_engine_SOURCES = tests/test_engine.c tests/modelbuild.c tests/modelbuild.h
tests_test_engine_CFLAGS = $(TEST_CFLAGS)
tests_test_engine_LDADD = $(TEST_LIBS) -ldl
endif
EXTRA_DIST += tests/engine/inception.dl
