# int8 calibration: the methods, the histogram, sample folders and their
# errors (api/calibrate.c); the quantization flags of dlcc and dlcc run.
if HAVE_CHECK
check_PROGRAMS += tests/test_calibrate
TESTS += tests/test_calibrate
tests_test_calibrate_SOURCES = tests/test_calibrate.c
tests_test_calibrate_CFLAGS = $(TEST_CFLAGS)
tests_test_calibrate_LDADD = $(TEST_LIBS)
endif
TESTS += tests/quant_cli.sh
EXTRA_DIST += tests/quant_cli.sh
