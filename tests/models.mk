# Whole-model tests: every example through the API, LeNet and the MLP
# against loops in the test, bad weights and inputs; `dlcc run` on bad
# files; the numpy cross-check (skips without python3 and numpy).
if HAVE_CHECK
check_PROGRAMS += tests/test_models
TESTS += tests/test_models
tests_test_models_SOURCES = tests/test_models.c
tests_test_models_CFLAGS = $(TEST_CFLAGS)
tests_test_models_LDADD = $(TEST_LIBS)
endif
TESTS += tests/run_cli.sh tests/xcheck.sh
EXTRA_DIST += tests/run_cli.sh tests/xcheck.sh tests/xcheck/xcheck.py \
	tests/xcheck/resblock.dl tests/xcheck/lstm.dl tests/xcheck/encoder.dl
