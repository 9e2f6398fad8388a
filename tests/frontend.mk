# frontend tests: the scanner and parser
if HAVE_CHECK
check_PROGRAMS += tests/test_parse
TESTS += tests/test_parse
tests_test_parse_SOURCES = tests/test_parse.c
tests_test_parse_CFLAGS = $(TEST_CFLAGS)
tests_test_parse_LDADD = $(TEST_LIBS)
endif
