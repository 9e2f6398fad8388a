# The scale-out estimate of `dlcc train --plan-parallel`: its formulas
# worked by hand (test_scaleout) and the command on the example blocks
# (scaleout_cli.sh).
if HAVE_CHECK
check_PROGRAMS += tests/test_scaleout
TESTS += tests/test_scaleout
tests_test_scaleout_SOURCES = tests/test_scaleout.c driver/scaleout.c driver/scaleout.h
tests_test_scaleout_CFLAGS = $(TEST_CFLAGS)
tests_test_scaleout_LDADD = $(CHECK_LIBS) -lm
endif
TESTS += tests/scaleout_cli.sh
EXTRA_DIST += tests/scaleout_cli.sh
